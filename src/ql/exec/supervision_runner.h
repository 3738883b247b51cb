#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ql/engine/attempt_runner.h"
#include "ql/exec/launcher.h"

namespace ql::exec {

// Implements the AttemptRunner port with the POSIX supervisor of this library: one supervisor
// process per attempt, started as `supervisor_prefix + {<run_root>/<attempt_id>}` (the calling
// executable re-executed with its supervisor subcommand, e.g. `ql-local supervise DIR` or
// `ql-worker supervise DIR`). Commands without a working directory run in a directory of their
// task, `<work_root>/<task_id>`, so that they never start among the daemon's own files. Used by
// ql-local and ql-worker; ql-worker passes a SupervisorLauncher, so its supervisors are forked
// by the launcher instead of re-executed (see launcher.h).
class SupervisionRunner final : public AttemptRunner {
 public:
  // With `fsync_results` false the attempts' results are not fsynced (LaunchSpec::fsync_result):
  // for ql-worker, which never reports an attempt its previous incarnation started.
  SupervisionRunner(std::vector<std::string> supervisor_prefix, std::string run_root,
                    std::string work_root, SupervisorLauncher* launcher = nullptr,
                    bool fsync_results = true);
  // Starts the attempt in `<run_root>/<attempt_id>`. A launch without a working directory runs
  // in `<work_root>/<task_id>`, created (with `work_root`) mode 0700 when missing. Errors:
  // InvalidArgument `invalid_task_id` when the task id is not one plain path component (letters,
  // digits, '-', '_'), Internal `exec_io_error` when the directory cannot be created, and those
  // of Supervision::Launch.
  Result<std::unique_ptr<AttemptHandle>> Launch(const AttemptLaunch& launch) override;
  // Reattaches to `<run_root>/<attempt_id>`. Errors: those of Supervision::Adopt.
  Result<std::unique_ptr<AttemptHandle>> Adopt(const std::string& attempt_id) override;

 private:
  // Returns `<work_root>/<task_id>`, creating it when missing.
  Result<std::string> TaskDirectory(const std::string& task_id) const;

  std::vector<std::string> supervisor_prefix_;
  std::string run_root_;
  std::string work_root_;
  SupervisorLauncher* launcher_ = nullptr;  // not owned; may be null
  bool fsync_results_ = true;
};

}  // namespace ql::exec
