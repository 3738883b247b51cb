#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ql/core/status.h"
#include "ql/exec/confinement.h"
#include "ql/exec/process_identity.h"

namespace ql::exec {

class SupervisorLauncher;

// What to run for one attempt. The supervisor reads it from `<attempt_dir>/spec.json`.
struct LaunchSpec {
  // Directory owned by this attempt (created if missing); holds spec.json, supervisor.json,
  // result.json and the `truncated` marker. Must not have been launched before.
  std::string attempt_dir;
  // argv[0] is an absolute path, or a name looked up in the command's PATH.
  std::vector<std::string> argv;
  // The plan's environment; must contain QL_RUN_ID and QL_ATTEMPT_ID. The command sees exactly
  // these variables, plus PATH and HOME when they are not set here.
  std::vector<std::pair<std::string, std::string>> environment;
  // Further variables of the command whose values are secret (resolved secret values). They
  // reach the supervisor through an anonymous memory file, are never written to spec.json or any
  // other file, and are masked in the log. Names follow the rules of `environment`, may not
  // repeat one of its names and may not be QL_RUN_ID, QL_ATTEMPT_ID, PATH or HOME.
  std::vector<std::pair<std::string, std::string>> secret_environment;
  // Exact values replaced with "***" in the log, also when split across reads (see LogMasker:
  // values shorter than 4 bytes are not masked). Handed over like `secret_environment`.
  std::vector<std::string> mask_values;
  std::optional<std::string> working_directory;
  // Used when `working_directory` is absent.
  std::string default_working_directory;
  int64_t timeout_ms = 0;
  // Output (stdout and stderr interleaved, masked) is appended here; the parent directory is
  // created.
  std::string log_path;
  // Bytes of this attempt's masked output kept in the log: past it, the head (the first
  // `cap - min(cap / 2, 1 MiB)` bytes, written as they come) and the tail (the last
  // `min(cap / 2, 1 MiB)` bytes, held in memory and written when the command has ended) are
  // kept, with one marker line `--- qinglong: N bytes truncated ---` between them; the middle is
  // drained and discarded.
  int64_t log_cap_bytes = 0;
  // Time between SIGTERM and SIGKILL when the command group is stopped.
  int64_t kill_grace_ms = 5000;
  // Whether result.json is fsynced (file and directory) before the supervisor exits. A caller
  // that never reads a result after its machine restarted may leave it false: the result is
  // still replaced atomically and read the moment the supervisor has exited.
  bool fsync_result = true;
  // How the command is confined (confinement.h). The default, kHost without limits, starts it
  // as the daemon's user with posix_spawn; anything else starts it through a child that sets up
  // the namespaces, the limits and the identity first. A confined command without HOME in its
  // environment gets its working directory as HOME.
  Confinement confinement;
};

enum class OutcomeKind {
  kExited,       // the command exited on its own; see exit_code
  kSignaled,     // the command was ended by a signal nobody here sent; see signal
  kTimedOut,     // timeout_ms passed and the group was stopped
  kCancelled,    // the supervisor was asked to cancel and stopped the group
  kSpawnFailed,  // the command never ran (missing file, not executable, bad working dir, ...)
};

// Returns "exited", "signaled", "timed_out", "cancelled" or "spawn_failed".
std::string_view OutcomeKindName(OutcomeKind kind);
// Returns the kind named `name`, or nullopt.
std::optional<OutcomeKind> ParseOutcomeKind(std::string_view name);

// The recorded end of one attempt (`result.json`).
struct Outcome {
  OutcomeKind kind = OutcomeKind::kSpawnFailed;
  std::optional<int> exit_code;   // set when the command exited (also after timeout or cancel)
  std::optional<int> signal;      // set when a signal ended the command
  int64_t log_bytes_written = 0;  // masked output kept in the log (without the marker line)
  int64_t log_bytes_dropped = 0;  // masked output left out between head and tail
  int64_t output_bytes = 0;       // all command output read, kept or discarded, before masking
  bool log_truncated = false;
  std::optional<int64_t> truncated_at_bytes;  // the cap, when the log was truncated
  int64_t started_at_ms = 0;   // UTC ms when the command was started (or the spawn attempted)
  int64_t finished_at_ms = 0;  // UTC ms when the command's exit was observed
  std::string message;         // human-readable detail; the errno text for spawn failures
  // Set when the command failed because it ran into a limit: "memory_limit_exceeded",
  // "pids_limit_exceeded", "cpu_limit_exceeded"; or, for a spawn failure of the confinement
  // itself, "confinement_failed" / "cgroup_setup_failed".
  std::string error_code;
  // How the command was confined (DescribeConfinement), empty when it never started.
  std::string confinement;
  // Processes the command left behind when its run ended (started outside its process group,
  // e.g. with setsid), ended by the supervisor.
  int64_t descendants_ended = 0;

  bool operator==(const Outcome&) const = default;
};

// One attempt run by a supervisor process. The supervisor is the caller's own executable
// re-executed with a subcommand that calls SupervisorMain(); it runs in its own session, so it and
// the command survive the death of the daemon, and it records the outcome in the attempt
// directory. A Supervision is a cheap value that only reads files and /proc; the caller drives it
// by calling Poll(). Not thread-safe; use one object per thread.
class Supervision {
 public:
  enum class State {
    kRunning,   // the supervisor is alive and has not recorded a result
    kFinished,  // result.json exists; see outcome()
    kLost,      // the supervisor is gone (or unprovable) without a result
  };

  // Validates `spec`, writes `<attempt_dir>/spec.json` and starts the supervisor as
  // `supervisor_argv_prefix + {attempt_dir}` in a new session, detached from the caller (no
  // zombie is left for the caller to reap). Blocks until the supervisor has recorded itself and
  // started the command, or recorded the command's spawn failure (a few milliseconds), so on
  // success supervisor.json exists, Adopt() works from then on, and command() is set unless the
  // spawn failed. A command that cannot be started is not an error here: Poll() reports
  // kFinished with kSpawnFailed. Errors: InvalidArgument `exec_bad_spec` (names the field),
  // Duplicate `exec_attempt_exists`, Internal `exec_io_error` (files), Internal
  // `exec_spawn_failed` (the supervisor itself could not be started, with errno text; spec.json
  // is removed again).
  // With a `launcher` the supervisor is forked by it instead (no exec; see launcher.h), and
  // re-executed only when the launcher cannot be reached.
  static Result<Supervision> Launch(const std::vector<std::string>& supervisor_argv_prefix,
                                    const LaunchSpec& spec,
                                    SupervisorLauncher* launcher = nullptr);

  // Reattaches to an attempt launched earlier (for example by a daemon that has since restarted)
  // from supervisor.json / result.json. Identities recorded under another boot are treated as
  // gone. Errors: NotFound `exec_attempt_not_found` (no spec.json), NotFound
  // `exec_supervisor_unknown` (launched but the supervisor never recorded itself and no result
  // exists: the attempt cannot be proven alive and must be treated as lost, never signalled),
  // Corrupt `exec_corrupt_record`, Internal `exec_io_error`. Any error means the attempt cannot
  // be proven alive, so the caller treats it as lost.
  static Result<Supervision> Adopt(const std::string& attempt_dir);

  const std::string& attempt_dir() const { return attempt_dir_; }
  // Returns the supervisor's identity as it recorded it.
  ProcessIdentity supervisor() const { return supervisor_; }
  // Returns the command's identity (its pid is also its process group id) as last read from
  // supervisor.json; nullopt when the command never started.
  std::optional<ProcessIdentity> command() const { return command_; }

  // Reports the attempt's state without blocking. kFinished when result.json exists; kLost when
  // the supervisor (by pid and start time) is gone without a result, or the result is unreadable.
  State Poll();
  // Returns the parsed result once Poll() has returned kFinished.
  const std::optional<Outcome>& outcome() const { return outcome_; }
  // Returns true as soon as the supervisor has started discarding output past the cap (while the
  // command still runs), or when the result says so.
  bool LogTruncated() const;

  // Asks the supervisor to cancel (SIGTERM): it stops the command's group (SIGTERM, kill grace,
  // SIGKILL) and records kCancelled. Idempotent; Ok also when the supervisor has already ended.
  // Errors: Internal `exec_signal_failed`.
  Status RequestCancel();
  // Last resort: SIGKILLs the supervisor and the command's process group, each only when its
  // identity still matches. Afterwards Poll() reports kLost (or kFinished if the result was
  // recorded first). Errors: Internal `exec_signal_failed`.
  Status Kill();

 private:
  Supervision(std::string attempt_dir, ProcessIdentity supervisor)
      : attempt_dir_(std::move(attempt_dir)), supervisor_(supervisor) {}

  // Loads the command identity from supervisor.json once it appears.
  void RefreshCommand();

  std::string attempt_dir_;
  ProcessIdentity supervisor_;
  std::optional<ProcessIdentity> command_;
  std::optional<Outcome> outcome_;
  // False when the recorded identities belong to another boot and must never be signalled.
  bool same_boot_ = true;
};

// Runs the supervisor for the attempt in `attempt_dir` (see Supervision) and returns the process
// exit code: 0 when result.json was written, 1 otherwise. The daemon's main() dispatches its
// supervisor subcommand here before doing anything else (no threads, no other setup).
int SupervisorMain(const std::string& attempt_dir);

}  // namespace ql::exec
