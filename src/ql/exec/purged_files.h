#pragma once

// The local files of purged attempts (DESIGN §11): when retention deletes a run, ql-local
// deletes what its attempts left on disk — the log file under the log root and the attempt
// directory `<run_root>/<attempt_id>` — so the data directory shrinks with the database.

#include <cstdint>
#include <string>

#include "ql/core/retention.h"

namespace ql::exec {

struct PurgedFiles {
  int64_t logs = 0;          // log files removed
  int64_t attempt_dirs = 0;  // attempt directories removed
  int64_t errors = 0;        // paths that could not be removed (left for the next purge)
};

// Removes the log file of every purged attempt (a relative log_path is taken relative to
// `log_root`; one outside the root, after normalising, is left alone and counted as an error)
// together with its directory once that is empty (never the root itself), and the directory
// `<run_root>/<attempt_id>` of every attempt whose id is one plain path component. Missing
// files are not errors: a purge may be repeated after a crash.
PurgedFiles RemovePurgedFiles(const PurgeResult& purged, const std::string& log_root,
                              const std::string& run_root);

}  // namespace ql::exec
