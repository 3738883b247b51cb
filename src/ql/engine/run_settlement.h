#pragma once

// How an attempt's end becomes run state (DESIGN §2, §6), shared by every executor: the local
// dispatcher (processes on this machine) and the cluster control plane (remote workers). One
// transition per step, each a CAS on the run's version; a committed cancel intent wins over a
// later completion; a lost attempt retries only when the run's policy says so; retry_wait runs
// come back as attempt N+1 once their backoff has passed.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "ql/core/clock.h"
#include "ql/core/event_log.h"
#include "ql/core/ports.h"
#include "ql/core/records.h"
#include "ql/core/states.h"
#include "ql/core/status.h"
#include "ql/engine/attempt_runner.h"
#include "ql/engine/metrics.h"

namespace ql {

// Returns the retry delay before attempt `next_attempt` (≥ 2): base · 2^(n−2), at most max.
int64_t RetryBackoffMs(const RetryPolicy& policy, int next_attempt);

// Returns an event with `payload` in canonical form.
NewEvent MakeRunEvent(std::string type, const std::string& actor,
                      std::optional<std::string> attempt_id,
                      const nlohmann::json& payload = nlohmann::json::object());

// The move of a starting attempt, and of its run at `run_version`, to running with `pid` at
// `now_ms`, with the attempt.running {pid} and run.running events by `actor`.
RunTransitionCommand RunningTransition(const std::string& run_id, int64_t run_version,
                                       const std::string& attempt_id, int64_t pid,
                                       const std::string& actor, int64_t now_ms);

// Returns true for the errors of a broken lease fence (LeaseFence).
bool IsLeaseFenceError(const Status& status);

// The statuses an end was recorded with.
struct FinishRecord {
  std::string run_status;
  std::string attempt_status;
};

class RunSettlement {
 public:
  // `actor` names who reports outcomes in events ("executor" locally, "worker" remotely).
  // With `log`, each recorded end is also a daemon log line: run.failed, run.timed_out,
  // run.lost, run.recovery_required (warn; error for the last), run.retrying, run.cancelled and
  // attempt.descendants_ended (info), run.succeeded (debug).
  RunSettlement(RunRepository& runs, Clock& clock, RandomSource& random, Metrics& metrics,
                std::string actor = "executor", EventLog* log = nullptr);

  // Records how an attempt ended: the attempt moves to its terminal status and the run to its
  // terminal status, or to retry_wait when the outcome is retryable and attempts remain. A
  // cancel intent turns a completion into cancelled. A lost attempt makes the run lost, then
  // settles it (SettleLost). An attempt that is already terminal is left as it is (ok).
  // With `lease`, the final transition holds only under that remote worker's lease. With
  // `recorded`, receives the run's and the attempt's status when this call recorded the end
  // (left untouched when the attempt had ended before). With `started_pid`, an attempt still
  // starting is first recorded running with that pid, in the same transaction as its end (a
  // short command whose start is reported with its end).
  Status Finish(const std::string& run_id, const std::string& attempt_id,
                const AttemptOutcome& outcome, const LeaseFence* lease = nullptr,
                FinishRecord* recorded = nullptr,
                std::optional<int64_t> started_pid = std::nullopt);

  // Finish decided on a state the caller read before (`run` with `attempts`, which must hold
  // `attempt_id`) instead of reading it again: one try, no retry. Every transition still holds
  // only if the run's version is the one read, so a state that is no longer current changes
  // nothing and fails with a Conflict (`raced` is then set, unless a lease fence broke).
  Status FinishFrom(RunRecord run, std::vector<AttemptRecord> attempts,
                    const std::string& attempt_id, const AttemptOutcome& outcome,
                    const LeaseFence* lease, FinishRecord* recorded,
                    std::optional<int64_t> started_pid, bool* raced = nullptr);

  // Moves a lost run on: cancelled when a cancel intent exists, retry_wait when the policy
  // retries lost attempts and attempts remain, failed otherwise.
  Status SettleLost(const RunRecord& run, const AttemptRecord& attempt, const std::string& reason);

  // Requeues up to `limit` retry_wait runs whose backoff has passed, each with a new claimed
  // attempt N+1. Returns how many were requeued.
  Result<int> PromoteRetries(int limit);

 private:
  // Writes the daemon log line of a run that moved to `to` after attempt number `attempt`.
  void LogEnd(const RunRecord& run, int attempt, RunStatus to, const std::string& code,
              std::optional<int> exit_code, int signal, int64_t retry_in_ms,
              const std::string& summary);

  RunRepository& runs_;
  Clock& clock_;
  RandomSource& random_;
  Metrics& metrics_;
  std::string actor_;
  EventLog* log_;
};

}  // namespace ql
