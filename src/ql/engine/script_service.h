#pragma once

// Scripts (DESIGN §14): what the API does with a project's script library, over the artifact
// port (core/artifact_store.h). Reads need the viewer role, writes the admin role (a script is
// code a task runs, so pushing one is publishing); identity and permission are decided by
// GovernanceService::Authorize and handed to the store as its policy fence.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ql/core/artifact_store.h"
#include "ql/core/clock.h"
#include "ql/core/ports.h"
#include "ql/engine/governance_service.h"

namespace ql {

// A push as the API receives it.
struct ScriptPush {
  std::string kind;  // file | tree
  std::vector<ScriptFile> files;
  std::string entry;
  std::optional<int64_t> expected_latest;
};

class ScriptService {
 public:
  // All references must outlive the service. Thread-safe.
  ScriptService(Store& store, GovernanceService& governance, Clock& clock, ArtifactLimits limits);

  // The caller may publish scripts in its project (the decision Upload and Push take), for a
  // route that must refuse before it looks at the request's body.
  Status MayPublish(const Caller& caller);
  // Stores `bytes` as a blob the caller's project holds (one request: at most one chunk's
  // worth when it is a piece of a larger blob, see Compose).
  Result<BlobDescriptor> Upload(const Caller& caller, std::string_view bytes);
  // Joins uploaded pieces into one blob (ComposeBlobCommand).
  Result<BlobDescriptor> Compose(const Caller& caller, const std::vector<std::string>& pieces);
  // Returns the descriptor of a blob the project holds.
  Result<BlobDescriptor> Stat(const Caller& caller, const std::string& digest);
  // Returns chunk `index` of a blob Stat returned, verified; the project is resolved again.
  Result<std::string> ReadChunk(const Caller& caller, const BlobDescriptor& blob, size_t index);

  Result<PushScriptResult> Push(const Caller& caller, const std::string& name,
                                const ScriptPush& push);
  Result<std::vector<ScriptRecord>> List(const Caller& caller);
  // The head and one version (the latest when unset) with its files.
  Result<std::pair<ScriptRecord, ScriptVersionRecord>> Get(const Caller& caller,
                                                           const std::string& name,
                                                           std::optional<int64_t> version);
  Result<std::vector<ScriptVersionRecord>> History(const Caller& caller, const std::string& name);
  Result<ScriptRecord> Remove(const Caller& caller, const std::string& name);

  const ArtifactLimits& limits() const { return limits_; }
  // The chunk size pieces of a composed blob must have.
  static constexpr size_t kPieceBytes = kArtifactChunkBytes;

 private:
  // Resolves the caller's project and authorizes `action` there.
  Result<std::string> ProjectFor(const Caller& caller, Action action, const std::string& target);

  Store& store_;
  GovernanceService& governance_;
  Clock& clock_;
  ArtifactLimits limits_;
};

}  // namespace ql
