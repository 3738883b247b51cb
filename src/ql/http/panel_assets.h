#pragma once

// The web panel as the API server sees it: a lookup from a URL path to a file embedded in the
// binary (the files and how they are embedded: src/ql/panel/README.md). The API server serves a
// found file with the headers below and never reads the file system.

#include <span>
#include <string_view>

namespace ql {

// One file of the panel.
struct PanelFile {
  // The URL path it is served at: "/" for the page, "/ui/<bundle hash>/<name>" for an asset.
  std::string_view path;
  std::string_view content_type;
  std::string_view body;
  // True when the URL changes whenever the content does (assets under the bundle hash), so a
  // browser may keep it for a year; false for "/", which must be revalidated every time.
  bool immutable = false;
};

// The panel's response headers (docs/api.md "Web panel"): no inline script or style, nothing
// from another origin, no framing, no form posts, and DOM sinks closed to strings.
inline constexpr std::string_view kPanelContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'; "
    "require-trusted-types-for 'script'";
inline constexpr std::string_view kPanelImmutableCacheControl =
    "public, max-age=31536000, immutable";
inline constexpr std::string_view kPanelPageCacheControl = "no-cache";

// A read-only set of panel files; copies share the files, which must outlive it.
class PanelAssets {
 public:
  // `files` may be empty (a binary built without the panel): then Find finds nothing.
  explicit PanelAssets(std::span<const PanelFile> files) : files_(files) {}

  // Returns the file served at `path` (exact match, no normalisation), or nullptr.
  const PanelFile* Find(std::string_view path) const;
  // Returns the number of files.
  size_t size() const { return files_.size(); }
  // Returns the total bytes of the files' bodies.
  size_t body_bytes() const;

 private:
  std::span<const PanelFile> files_;
};

}  // namespace ql
