#pragma once

// The on-disk cache of script versions a daemon runs (DESIGN §14): one read-only directory per
// digest, `<root>/<digest>/`, holding the version's files (a `file` version: its one file under
// its name; a `tree`: every entry of its manifest). Every byte is checked against its digest on
// the way in, and every file again each time the entry is used, so a damaged entry is removed
// and fetched again, never run. Shared by a daemon's attempts; thread-safe.
//
// Where the bytes come from is the caller's: the store for ql-local (ArtifactRepository), the
// control plane's worker protocol for ql-worker.

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>

#include "ql/core/artifact.h"
#include "ql/core/execution_plan.h"
#include "ql/core/status.h"

namespace ql {

// Streams blob `digest` of the run's project to `sink` (any chunking); errors pass through.
using BlobFetch = std::function<Status(const std::string& digest,
                                       const std::function<Status(std::string_view)>& sink)>;

struct ScriptCacheStats {
  int64_t hits = 0;
  int64_t fetches = 0;
  int64_t damaged = 0;  // entries found damaged and fetched again
  int64_t evicted = 0;
};

class ScriptCache {
 public:
  // `root` is created (0711: commands pass through, never list). Entries not used for
  // `idle_evict_ms` are removed once the cache holds more than `max_bytes`.
  ScriptCache(std::string root, int64_t max_bytes,
              int64_t idle_evict_ms = int64_t{24} * 60 * 60 * 1000);

  // Returns the directory holding `pin`'s version, verified; fetches it when absent or damaged.
  // Errors: Corrupt artifact_corrupt (fetched bytes that do not have their digest), the
  // fetch's (NotFound artifact_not_found when the store no longer has it), Internal
  // script_cache_io.
  Result<std::string> Materialize(const ScriptPin& pin, const BlobFetch& fetch);

  const std::string& root() const { return root_; }
  ScriptCacheStats stats() const;

 private:
  // Checks an entry's files against the digests it was made from; false when damaged.
  bool Verify(const std::string& dir, const ScriptPin& pin) const;
  Status Fetch(const ScriptPin& pin, const BlobFetch& fetch, const std::string& into);
  void Evict(const std::string& keep);

  std::string root_;
  int64_t max_bytes_;
  int64_t idle_evict_ms_;
  mutable std::mutex mu_;
  ScriptCacheStats stats_;
  uint64_t counter_ = 0;
};

}  // namespace ql
