#pragma once

// The worker's lifecycle against the control plane (docs/worker-protocol.md): one session,
// heartbeats, pulls that propose offers for free slots, and one reporting thread per leased run
// that starts the command through the AttemptRunner port, ships its output, renews the lease and
// reports the end.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "control_client.h"
#include "ql/core/clock.h"
#include "ql/core/status.h"
#include "ql/engine/attempt_runner.h"
#include "ql/engine/script_cache.h"

namespace ql::worker {

struct WorkerOptions {
  // Runs leased at once (1..1024); also the session's max_concurrent_runs.
  int slots = 1;
  // Absolute directory owned by this worker: attempt directories under RunRootOf(work_dir) (the
  // AttemptRunner must use the same root), command output under LogRootOf(work_dir).
  std::string work_dir;
  // Bytes of each attempt's output kept and shipped at most (head and tail, see
  // exec::LaunchSpec::log_cap_bytes); an offer that names a smaller cap lowers it.
  int64_t log_cap_bytes = 16LL * 1024 * 1024;
  // How long running commands may take to finish after a drain request before they are cancelled.
  int64_t drain_timeout_ms = 60'000;
  // Pull cadence while slots are free (a pull also follows every run's end at once).
  int64_t pull_interval_ms = 1000;
  // How often each run's outcome is polled and its new output shipped.
  int64_t poll_interval_ms = 500;
  // Backoff of retried calls: starts here, doubles, capped at retry_max_ms.
  int64_t retry_initial_ms = 250;
  int64_t retry_max_ms = 5000;
  // How long a command being stopped (lease lost, fenced, left over) is waited for.
  int64_t stop_wait_ms = 15'000;
  nlohmann::json capabilities = nlohmann::json::object();
  // The pool this worker takes runs of and its labels (--pool, --label KEY=VALUE): it gets only
  // runs whose task names this pool and labels it has, of projects the pool serves.
  Placement placement;
  // Opens the sealed secrets of a lease right before its command starts (--secret-key-file or
  // an exec provider); null: a run that uses a secret fails with secret_unavailable. Must
  // outlive the worker.
  SecretSealer* sealer = nullptr;
  // Bytes of script versions kept in ScriptsRootOf(work_dir) for later runs (a bound, not a
  // quota: entries in use stay, see ScriptCache).
  int64_t script_cache_bytes = int64_t{1} << 30;
  std::string software_version = "0.1.0";
  // Receives one line per event (without a newline); stderr when unset. Never sees a token.
  std::function<void(const std::string& line)> log;
};

// Returns the cap the supervisor keeps an attempt's output to: `own`, lowered to the offer's cap
// (when it names one) less kLogMarkerRoomBytes, so that the log with its marker line fits what
// the control plane stores.
int64_t SupervisorLogCap(int64_t own, int64_t offered);

// Returns `<work_dir>/run`, where attempt directories live.
std::string RunRootOf(const std::string& work_dir);
// Returns `<work_dir>/log`, where each attempt's output is written as `<attempt_id>.log`.
std::string LogRootOf(const std::string& work_dir);
// Returns `<work_dir>/scripts`, the verified read-only cache of the script versions runs fetch.
std::string ScriptsRootOf(const std::string& work_dir);
// Returns `<work_dir>/work`, under which a command without a working directory runs in
// `<task_id>/` (the AttemptRunner's work root).
std::string WorkRootOf(const std::string& work_dir);

// One worker process's participation in the cluster. Run() blocks on the calling thread and owns
// the heartbeat thread and one thread per leased run; RequestDrain() may be called from any
// thread.
class Worker {
 public:
  Worker(WorkerOptions options, ControlClient& control, AttemptRunner& runner, Clock& clock,
         RandomSource& random);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Stops commands left running by an earlier incarnation in work_dir, registers a session
  // (retrying while the control plane is unreachable), then heartbeats, pulls and runs leased
  // commands until drained; a session the control plane reports expired is extended by a
  // heartbeat, an offline one replaced by a new registration — only a drain ends Run(). Returns
  // Ok after a drain (every command finished or was cancelled and reported, the session set
  // offline). Errors: the control plane's `unauthorized`
  // (InvalidArgument) or `session_fenced` / `session_not_found` (Conflict / NotFound) after every
  // command was stopped without further reports; any other error of `register` that retrying
  // cannot fix; Internal `worker_dir_io` when work_dir cannot be prepared.
  Status Run();

  // Asks Run() to drain: no more pulls, running commands finish within drain_timeout_ms and are
  // then cancelled. Idempotent; before registration it makes Run() return Ok.
  void RequestDrain();

 private:
  struct RunContext;
  struct Proposal {
    OfferProposal offer;
    int64_t first_proposed_ms = 0;  // monotonic; leases granted for it cannot predate this
  };

  void Log(const std::string& line);
  Status PrepareDirectories();
  void StopLeftovers();
  // Returns the new session, or nullopt when a drain was requested before one was registered.
  Result<std::optional<SessionGrant>> RegisterSession();
  void HeartbeatLoop();
  // Proposes offers for the free slots and starts the granted runs; returns the delay before
  // the next pull.
  int64_t PullOnce();
  // After a pull answered `session_expired`: extends the session by a heartbeat, or (offline)
  // registers a new one once no run leased under the old one is left. Returns the delay before
  // the next pull. Main thread only.
  int64_t RenewSession();
  void StartRun(const LeaseOffer& offer, const Proposal& proposal);
  void ReapFinishedRuns();
  void MarkCancel(const std::vector<std::string>& offer_ids, const char* source);
  // Records a fatal answer (the first one wins), abandons every run and wakes every thread.
  void SetFatal(const Status& status);
  // Sleeps up to `ms`, or less once a run ended, a drain was requested or a fatal answer came.
  void WaitMain(int64_t ms);
  int FreeSlots();

  // The steps of one run, on its own thread.
  void RunAttempt(RunContext& ctx);
  // Sleeps up to `ms`; returns early when the run is abandoned (or, with `wake_on_cancel`, when
  // a cancel request has not been acted on yet).
  void SleepRun(RunContext& ctx, int64_t ms, bool wake_on_cancel);
  // Runs a lease call, repeating retryable failures with backoff while the lease may still be
  // valid. Returns the last status: ok, fatal (recorded), lease lost, another refusal, or
  // Conflict `lease_unconfirmed` / `run_abandoned` when retrying stopped.
  Status CallLease(RunContext& ctx, const char* step, const std::function<Status()>& call);
  // Renews the lease when due; returns false when the run must stop without further reports.
  bool RenewIfDue(RunContext& ctx);
  // Ships new output (a few chunks, or with `to_end` everything up to the end of the file);
  // returns false when the run must stop without further reports.
  bool ShipLog(RunContext& ctx, bool to_end);
  // Puts the pinned script of a script command in the cache (fetched from the control plane
  // when absent or damaged) and its path at argv[2]. Returns false when the command must not
  // start: the end is reported (spawn_failed with artifact_unavailable, artifact_corrupt or
  // script_plan_invalid) or, once the lease is lost, nothing more is.
  bool PrepareScript(RunContext& ctx, AttemptLaunch& launch);
  // Stops the command and waits (bounded) for its end; reports nothing.
  void StopCommand(RunContext& ctx, AttemptHandle& handle);
  // Reports the end with `complete`, then removes the attempt's files.
  // `started_pid`: the command ended before its start was reported (see Completion::pid).
  void Report(RunContext& ctx, const AttemptOutcome& outcome,
              std::optional<int64_t> started_pid = std::nullopt);
  void RemoveFiles(RunContext& ctx);

  WorkerOptions options_;
  ControlClient& control_;
  AttemptRunner& runner_;
  Clock& clock_;
  RandomSource& random_;
  ScriptCache scripts_;

  SessionRef session_;  // written by the main thread under mu_; the main thread reads it freely
  int64_t session_lease_ttl_ms_ = 0;      // likewise
  int64_t heartbeat_interval_ms_ = 1000;  // likewise
  std::vector<Proposal> pending_;         // main thread only
  int64_t pull_backoff_ms_ = 0;           // main thread only

  std::mutex log_mu_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool wake_ = false;                                        // guarded by mu_
  bool drain_requested_ = false;                             // guarded by mu_
  bool stop_heartbeat_ = false;                              // guarded by mu_
  bool awaiting_new_session_ = false;                        // guarded by mu_
  bool registering_ = false;  // a replacement session is being registered; guarded by mu_
  std::optional<Status> fatal_;                              // guarded by mu_
  std::map<std::string, std::shared_ptr<RunContext>> runs_;  // by offer id; guarded by mu_
};

}  // namespace ql::worker
