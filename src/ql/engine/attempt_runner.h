#pragma once

// The port through which the dispatcher runs attempts. The local daemon implements it with the
// POSIX supervisor of src/ql/exec; tests implement it with fakes.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ql/core/status.h"
#include "ql/core/task_spec.h"

namespace ql {

// Everything needed to start one attempt of the pinned plan.
struct AttemptLaunch {
  std::string run_id;
  std::string attempt_id;
  std::string project_id;  // picks the uid a confined command runs as
  std::string task_id;  // names the default working directory of the task's commands
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> environment;  // plan env + QL_RUN_ID/ATTEMPT_ID
  // Resolved secret variables: the command sees them, the runner writes them to no file and
  // masks their values in the log.
  std::vector<std::pair<std::string, std::string>> secret_environment;
  // Further exact values to mask ("***") in the log; values shorter than 4 bytes are not masked.
  std::vector<std::string> mask_values;
  std::optional<std::string> working_directory;
  int64_t timeout_ms = 0;
  std::string log_path;
  int64_t log_cap_bytes = 0;
  // The plan's own limits and network (the runner applies the smaller of each limit and the
  // installation's; no network needs namespaces).
  TaskLimits limits;
  bool network = true;
  // The task asks to run as the daemon's user without namespaces; the runner refuses unless the
  // installation allows it.
  bool unconfined = false;
  // A script command's materialised version (ScriptCache): the runner shows it to the command
  // read-only, even when it lies in a directory commands must not see. Empty otherwise.
  std::string script_directory;
};

// How an attempt's process ended.
struct AttemptOutcome {
  enum class Kind { kExited, kSignaled, kTimedOut, kCancelled, kSpawnFailed, kLost };
  Kind kind = Kind::kLost;
  int exit_code = 0;  // kExited
  int signal = 0;     // kSignaled
  std::string message;
  // kSpawnFailed only: why the command was not started when that is not the executor's fault
  // (secret_not_found, secret_unavailable, secret_corrupt); empty: exec_spawn_failed.
  std::string error_code;
  bool log_truncated = false;
  int64_t log_bytes = 0;
  // Set for kExited / kSignaled when the command failed because it ran into a limit
  // (memory_limit_exceeded, pids_limit_exceeded, cpu_limit_exceeded); then it is the attempt's
  // error code instead of exit_status / killed_by_signal.
  std::string limit_error_code;
  // How the command was confined, in one line; empty when the runner does not say.
  std::string confinement;
  // Processes the command left running at its end that were ended with its run.
  int64_t descendants_ended = 0;
  // kTimedOut only: the end was decided without the executor reporting it (the command may
  // still be running), so a retry needs a policy that retries lost attempts too.
  bool end_unconfirmed = false;
};

// One running (or finished) attempt.
class AttemptHandle {
 public:
  virtual ~AttemptHandle() = default;
  // Returns the outcome once the attempt has ended (or is known to be lost), else nullopt.
  virtual std::optional<AttemptOutcome> Poll() = 0;
  // Returns true once the log reached its cap (observable while the command still runs).
  virtual bool LogTruncated() const = 0;
  // Asks the attempt to end as cancelled; idempotent.
  virtual Status RequestCancel() = 0;
  // Returns the pid and start time of the process that represents the attempt.
  virtual int64_t pid() const = 0;
  virtual int64_t process_start_ticks() const = 0;
};

class AttemptRunner {
 public:
  virtual ~AttemptRunner() = default;
  // Starts an attempt; spawn failures of the command itself surface later as kSpawnFailed.
  virtual Result<std::unique_ptr<AttemptHandle>> Launch(const AttemptLaunch& launch) = 0;
  // Reattaches to an attempt started by an earlier incarnation of the daemon. NotFound when no
  // process was ever started for it (nothing to adopt).
  virtual Result<std::unique_ptr<AttemptHandle>> Adopt(const std::string& attempt_id) = 0;
};

}  // namespace ql
