#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ql/engine/attempt_runner.h"

namespace ql::exec {

// Implements the AttemptRunner port with the POSIX supervisor of this library: one supervisor
// process per attempt, started as `supervisor_prefix + {<run_root>/<attempt_id>}` (the calling
// executable re-executed with its supervisor subcommand, e.g. `ql-local supervise DIR` or
// `ql-worker supervise DIR`). Commands without a working directory run in
// `default_working_directory`. Used by ql-local and ql-worker.
class SupervisionRunner final : public AttemptRunner {
 public:
  SupervisionRunner(std::vector<std::string> supervisor_prefix, std::string run_root,
                    std::string default_working_directory);
  // Starts the attempt in `<run_root>/<attempt_id>`. Errors: those of Supervision::Launch.
  Result<std::unique_ptr<AttemptHandle>> Launch(const AttemptLaunch& launch) override;
  // Reattaches to `<run_root>/<attempt_id>`. Errors: those of Supervision::Adopt.
  Result<std::unique_ptr<AttemptHandle>> Adopt(const std::string& attempt_id) override;

 private:
  std::vector<std::string> supervisor_prefix_;
  std::string run_root_;
  std::string default_working_directory_;
};

}  // namespace ql::exec
