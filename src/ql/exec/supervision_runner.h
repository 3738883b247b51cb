#pragma once

#include <memory>
#include <utility>
#include <string>
#include <vector>

#include "ql/engine/attempt_runner.h"
#include "ql/exec/confinement.h"
#include "ql/exec/launcher.h"

namespace ql::exec {

// Implements the AttemptRunner port with the POSIX supervisor of this library: one supervisor
// process per attempt, started as `supervisor_prefix + {<run_root>/<attempt_id>}` (the calling
// executable re-executed with its supervisor subcommand, e.g. `ql-local supervise DIR` or
// `ql-worker supervise DIR`). Commands without a working directory run in a directory of their
// task, `<work_root>/<task_id>`, so that they never start among the daemon's own files. Used by
// ql-local and ql-worker; ql-worker passes a SupervisorLauncher, so its supervisors are forked
// by the launcher instead of re-executed (see launcher.h).
// How the commands of a runner are confined (confinement.h): the host's level from
// ProbeIsolation, the uids of projects, and what every command must not see or may write.
struct RunnerIsolation {
  IsolationReport report;
  // Required unless report.mode is kHost; shared by the runner's launches.
  std::shared_ptr<ProjectUids> uids;
  std::vector<std::string> hidden_paths;
  std::vector<std::string> writable_paths;
  CommandLimits limits;
  // Tasks that ask for "isolation": "none" run as the daemon's user without namespaces (with the
  // limits); without it such a run fails with confinement_unavailable.
  bool allow_unconfined = false;
};

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
  // From now on, commands are confined as `isolation` says (before: as the daemon, no limits).
  void SetIsolation(RunnerIsolation isolation) { isolation_ = std::move(isolation); }
  const RunnerIsolation& isolation() const { return isolation_; }
  // Reattaches to `<run_root>/<attempt_id>`. Errors: those of Supervision::Adopt.
  Result<std::unique_ptr<AttemptHandle>> Adopt(const std::string& attempt_id) override;

 private:
  // Returns `<work_root>/<task_id>`, creating it when missing.
  Result<std::string> TaskDirectory(const std::string& task_id) const;
  // The confinement of one launch; errors: those of ProjectUids::UidOf.
  Result<Confinement> ConfinementOf(const AttemptLaunch& launch) const;

  std::vector<std::string> supervisor_prefix_;
  std::string run_root_;
  std::string work_root_;
  SupervisorLauncher* launcher_ = nullptr;  // not owned; may be null
  bool fsync_results_ = true;
  RunnerIsolation isolation_;
};

}  // namespace ql::exec
