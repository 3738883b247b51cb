#pragma once

// Retention of the script library (DESIGN §14): which script versions something still needs,
// and one purge of the artifact store that keeps them. Run by the retention job of every daemon.
//
// A version is needed while a live task's current revision pins it, an enabled trigger pins a
// task revision that pins it, or a run that has not finished pins it through its plan. Every
// other version older than the retention and not its script's latest goes; then uploads, blobs
// and chunks nothing references after the grace (ArtifactRepository::PurgeArtifacts).

#include <vector>

#include "ql/core/artifact_store.h"
#include "ql/core/clock.h"
#include "ql/core/ports.h"
#include "ql/core/status.h"

namespace ql {

// Returns the versions live tasks, enabled triggers and unfinished runs pin (duplicates
// removed). Errors: the store's.
Result<std::vector<ScriptVersionKey>> PinnedScriptVersions(Store& store);

// Purges the artifact store once: up to `limit` versions, then what nothing references.
Result<PurgeArtifactsResult> PurgeScripts(Store& store, Clock& clock,
                                          const ArtifactRetention& retention, int limit = 100);

}  // namespace ql
