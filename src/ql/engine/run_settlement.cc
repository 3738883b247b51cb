#include "ql/engine/run_settlement.h"

#include <algorithm>
#include <utility>

#include "ql/core/canonical_json.h"
#include "ql/core/ids.h"
#include "ql/core/states.h"

namespace ql {
namespace {

std::string Name(RunStatus s) { return std::string(RunStatusName(s)); }
std::string Name(AttemptStatus s) { return std::string(AttemptStatusName(s)); }

NewEvent Event(std::string type, const std::string& actor, std::optional<std::string> attempt_id,
               const nlohmann::json& payload = nlohmann::json::object()) {
  return MakeRunEvent(std::move(type), actor, std::move(attempt_id), payload);
}

// Where an outcome takes the attempt, and the run when no retry follows.
struct Mapping {
  AttemptStatus attempt_to;
  RunStatus run_to;
  bool retryable;
  std::optional<int> exit_code;
  std::optional<std::string> error_code;
  std::string summary;
};

Mapping MapOutcome(const AttemptOutcome& o) {
  using K = AttemptOutcome::Kind;
  const bool failed = (o.kind == K::kExited && o.exit_code != 0) || o.kind == K::kSignaled;
  if (failed && !o.limit_error_code.empty()) {
    // The command ran into a limit of its confinement: that, not the exit status, is the cause.
    return {AttemptStatus::kFailed,
            RunStatus::kFailed,
            true,
            o.kind == K::kExited ? std::optional<int>(o.exit_code) : std::nullopt,
            o.limit_error_code,
            o.message};
  }
  switch (o.kind) {
    case K::kExited:
      if (o.exit_code == 0) {
        return {AttemptStatus::kSucceeded, RunStatus::kSucceeded, false, 0, std::nullopt, ""};
      }
      return {AttemptStatus::kFailed,
              RunStatus::kFailed,
              true,
              o.exit_code,
              "exit_status",
              "command exited with status " + std::to_string(o.exit_code)};
    case K::kSignaled:
      return {AttemptStatus::kFailed,
              RunStatus::kFailed,
              true,
              std::nullopt,
              "killed_by_signal",
              "command was killed by signal " + std::to_string(o.signal)};
    case K::kTimedOut:
      return {AttemptStatus::kTimedOut,      RunStatus::kTimedOut, false, std::nullopt, "timed_out",
              "command exceeded its timeout"};
    case K::kCancelled:
      return {AttemptStatus::kCancelled, RunStatus::kCancelled, false, std::nullopt, "cancelled",
              "cancelled on request"};
    case K::kSpawnFailed:
      return {AttemptStatus::kFailed,
              RunStatus::kFailed,
              false,
              std::nullopt,
              o.error_code.empty() ? std::string("exec_spawn_failed") : o.error_code,
              o.message};
    case K::kLost:
      break;
  }
  return {AttemptStatus::kLost, RunStatus::kLost, false, std::nullopt, "attempt_lost", o.message};
}

// True for a run a second principal approved: once its attempt may have started, a loss leaves
// its effect unknown, so it waits for a human instead of any automatic retry (DESIGN §9.1).
bool NeedsRecovery(const RunRecord& run) {
  return run.trigger_type == TriggerTypeName(TriggerType::kApproved) &&
         !run.cancel_requested_at_ms.has_value();
}

bool CancelWins(RunStatus to) {
  return to == RunStatus::kSucceeded || to == RunStatus::kFailed || to == RunStatus::kTimedOut ||
         to == RunStatus::kRetryWait || to == RunStatus::kLost;
}

}  // namespace

bool IsLeaseFenceError(const Status& status) {
  const std::string& r = status.reason();
  return r == "lease_not_found" || r == "lease_fenced" || r == "lease_expired" ||
         r == "session_fenced" || r == "attempt_finished";
}

RunTransitionCommand RunningTransition(const std::string& run_id, int64_t run_version,
                                       const std::string& attempt_id, int64_t pid,
                                       const std::string& actor, int64_t now_ms) {
  RunTransitionCommand t;
  t.run_id = run_id;
  t.expected_version = run_version;
  t.run_to = Name(RunStatus::kRunning);
  t.attempt_id = attempt_id;
  t.expected_attempt_status = Name(AttemptStatus::kStarting);
  t.attempt_to = Name(AttemptStatus::kRunning);
  t.started_at_ms = now_ms;
  t.attempt_started_at_ms = now_ms;
  t.pid = pid;
  t.events = {MakeRunEvent(AttemptEventType(AttemptStatus::kRunning), actor, attempt_id,
                           {{"pid", pid}}),
              MakeRunEvent(RunEventType(RunStatus::kRunning), actor, attempt_id)};
  t.now_ms = now_ms;
  return t;
}

NewEvent MakeRunEvent(std::string type, const std::string& actor,
                      std::optional<std::string> attempt_id, const nlohmann::json& payload) {
  NewEvent e;
  e.type = std::move(type);
  e.actor_type = actor;
  e.attempt_id = std::move(attempt_id);
  Result<std::string> canonical = CanonicalJson(payload);
  e.payload_json = canonical.ok() ? *canonical : "{}";
  return e;
}

int64_t RetryBackoffMs(const RetryPolicy& policy, int next_attempt) {
  int64_t delay = std::max<int64_t>(policy.backoff_base_ms, 0);
  for (int i = 2; i < next_attempt && delay < policy.backoff_max_ms; ++i) delay *= 2;
  return std::min(delay, policy.backoff_max_ms);
}

RunSettlement::RunSettlement(RunRepository& runs, Clock& clock, RandomSource& random,
                             Metrics& metrics, std::string actor, EventLog* log)
    : runs_(runs),
      clock_(clock),
      random_(random),
      metrics_(metrics),
      actor_(std::move(actor)),
      log_(log) {
  metrics_.Describe("ql_executor_exits_total", "counter", "Attempts ended, by resulting status.");
  metrics_.Describe("ql_run_transitions_total", "counter", "Run transitions, by target status.");
}

Status RunSettlement::Finish(const std::string& run_id, const std::string& attempt_id,
                             const AttemptOutcome& outcome, const LeaseFence* lease,
                             FinishRecord* recorded, std::optional<int64_t> started_pid) {
  // Two tries: a cancel intent may commit between our read and our write, and then it wins.
  for (int attempt_no = 0; attempt_no < 2; ++attempt_no) {
    QL_ASSIGN_OR_RETURN(auto read, runs_.GetRunWithAttempts(run_id));
    bool raced = false;
    Status st = FinishFrom(std::move(read.first), std::move(read.second), attempt_id, outcome,
                           lease, recorded, started_pid, &raced);
    // A lost race with a cancel intent is worth one more read; a broken lease fence is not.
    if (raced && attempt_no == 0) continue;
    return st;
  }
  return Conflict("finish_raced", "run " + run_id + " kept changing while recording its outcome");
}

Status RunSettlement::FinishFrom(RunRecord run, std::vector<AttemptRecord> attempts,
                                 const std::string& attempt_id, const AttemptOutcome& outcome,
                                 const LeaseFence* lease, FinishRecord* recorded,
                                 std::optional<int64_t> started_pid, bool* raced) {
  if (raced != nullptr) *raced = false;
  const std::string run_id = run.id;
  auto it = std::find_if(attempts.begin(), attempts.end(),
                         [&](const AttemptRecord& a) { return a.id == attempt_id; });
  if (it == attempts.end()) return NotFound("attempt_not_found", "attempt " + attempt_id);
  AttemptRecord& attempt = *it;
  std::optional<AttemptStatus> attempt_status = ParseAttemptStatus(attempt.status);
  std::optional<RunStatus> run_status = ParseRunStatus(run.status);
  if (!attempt_status || !run_status) {
    return Corrupt("status_invalid", "run " + run_id + " has an unknown status");
  }
  if (IsTerminal(*attempt_status)) return Status::Ok();  // recorded already

  std::vector<RunTransitionCommand> steps;
  if (started_pid.has_value() && *attempt_status == AttemptStatus::kStarting) {
    // The start first, in the same transaction; the end is decided on the state it leaves.
    steps.push_back(
        RunningTransition(run.id, run.version, attempt.id, *started_pid, actor_, clock_.NowMs()));
    if (lease != nullptr) steps.back().lease = *lease;
    run.version += 1;
    run.status = Name(RunStatus::kRunning);
    run.started_at_ms = steps.back().started_at_ms;
    attempt.status = Name(AttemptStatus::kRunning);
    attempt.started_at_ms = steps.back().attempt_started_at_ms;
    attempt.pid = started_pid;
    attempt_status = AttemptStatus::kRunning;
  }

  Mapping m = MapOutcome(outcome);
  // A timeout is retried only when the task asks for it. When the control plane decided the
  // timeout itself (the command may still be running on its worker), the attempt is as good as
  // lost: it is retried only if lost attempts may be.
  if (outcome.kind == AttemptOutcome::Kind::kTimedOut && run.retry_policy.retry_on_timeout) {
    m.retryable = !outcome.end_unconfirmed || run.retry_policy.retry_on_lost;
  }
  if (run.cancel_requested_at_ms.has_value() && CancelWins(m.run_to)) {
    m = {AttemptStatus::kCancelled, RunStatus::kCancelled, false, m.exit_code, "cancelled",
         "cancelled on request"};
  }
  const bool lost = m.attempt_to == AttemptStatus::kLost;
  // A claimed attempt never started: losing it is taken over as for any run.
  const bool recovery = lost && NeedsRecovery(run) && *attempt_status != AttemptStatus::kClaimed;
  const bool retry = !lost && m.retryable && attempt.attempt < run.retry_policy.max_attempts;
  const RunStatus run_to =
      recovery ? RunStatus::kRecoveryRequired : retry ? RunStatus::kRetryWait : m.run_to;
  const int64_t now = clock_.NowMs();

  RunTransitionCommand t;
  t.run_id = run_id;
  t.expected_version = run.version;
  t.run_to = Name(run_to);
  t.attempt_id = attempt_id;
  t.expected_attempt_status = attempt.status;
  t.attempt_to = Name(m.attempt_to);
  t.attempt_finished_at_ms = now;
  t.attempt_exit_code = m.exit_code;
  t.attempt_error_code = m.error_code;
  if (!m.summary.empty()) t.attempt_error_summary = m.summary;
  t.exit_code = m.exit_code;
  t.error_code = m.error_code;
  if (!m.summary.empty()) t.error_summary = m.summary;
  if (retry) {
    t.retry_at_ms = now + RetryBackoffMs(run.retry_policy, attempt.attempt + 1);
  } else if (!lost) {
    t.finished_at_ms = now;
  }
  nlohmann::json payload = nlohmann::json::object();
  if (m.exit_code) payload["exit_code"] = *m.exit_code;
  if (m.error_code) payload["error_code"] = *m.error_code;
  if (outcome.kind == AttemptOutcome::Kind::kSignaled) payload["signal"] = outcome.signal;
  // How the command was confined: `ql run show` prints it with the attempt's end.
  if (!outcome.confinement.empty()) payload["confinement"] = outcome.confinement;
  t.events.clear();
  if (outcome.descendants_ended > 0) {
    // What the command left behind was ended with it: said before the attempt's end.
    t.events.push_back(Event(std::string(kEventDescendantsEnded), actor_, attempt_id,
                             {{"processes", outcome.descendants_ended}}));
  }
  t.events.push_back(Event(AttemptEventType(m.attempt_to), actor_, attempt_id, payload));
  t.events.push_back(
      Event(RunEventType(run_to), "dispatcher", attempt_id,
            retry ? nlohmann::json{{"retry_at_ms", *t.retry_at_ms}} : nlohmann::json::object()));
  t.now_ms = now;
  if (lease != nullptr) t.lease = *lease;
  steps.push_back(std::move(t));
  Result<RunRecord> applied = runs_.ApplyTransitions(steps);
  if (!applied.ok()) {
    if (raced != nullptr) {
      *raced = applied.status().code() == StatusCode::kConflict &&
               !IsLeaseFenceError(applied.status());
    }
    return applied.status();
  }
  if (steps.size() > 1) metrics_.Increment("ql_run_transitions_total", R"(to="running")");
  metrics_.Increment("ql_executor_exits_total",
                     "status=\"" + std::string(AttemptStatusName(m.attempt_to)) + "\"");
  metrics_.Increment("ql_run_transitions_total",
                     "to=\"" + std::string(RunStatusName(run_to)) + "\"");
  if (log_ != nullptr) {
    if (outcome.descendants_ended > 0) {
      log_->Info("attempt.descendants_ended", {{"run", run_id},
                                               {"task", run.task_id},
                                               {"attempt", attempt.attempt},
                                               {"processes", outcome.descendants_ended}});
    }
    LogEnd(run, attempt.attempt, run_to, m.error_code.value_or(""), m.exit_code,
           outcome.kind == AttemptOutcome::Kind::kSignaled ? outcome.signal : 0,
           retry ? *t.retry_at_ms - now : 0, m.summary);
  }
  if (lost && !recovery) {
    QL_ASSIGN_OR_RETURN(std::vector<AttemptRecord> after, runs_.ListAttempts(run_id));
    return SettleLost(*applied, after.back(), m.summary);
  }
  if (recorded != nullptr) *recorded = {applied->status, Name(m.attempt_to)};
  return Status::Ok();
}

Status RunSettlement::SettleLost(const RunRecord& run, const AttemptRecord& attempt,
                                 const std::string& reason) {
  // A lost attempt may have had side effects: only a policy that says so retries it.
  const bool retry = !run.cancel_requested_at_ms.has_value() && run.retry_policy.retry_on_lost &&
                     attempt.attempt < run.retry_policy.max_attempts;
  // An approved attempt that reported starting (pid or start time) may have had its effect.
  const bool recovery = NeedsRecovery(run) && (attempt.started_at_ms.has_value() ||
                                               attempt.pid.has_value());
  const RunStatus to = run.cancel_requested_at_ms.has_value() ? RunStatus::kCancelled
                       : recovery                             ? RunStatus::kRecoveryRequired
                       : retry                                ? RunStatus::kRetryWait
                                                              : RunStatus::kFailed;
  const int64_t now = clock_.NowMs();
  RunTransitionCommand t;
  t.run_id = run.id;
  t.expected_version = run.version;
  t.run_to = Name(to);
  if (recovery) {
    t.error_code = "attempt_lost";
    t.error_summary = reason.empty() ? "the attempt was lost after it started" : reason;
  } else if (retry) {
    t.retry_at_ms = now + RetryBackoffMs(run.retry_policy, attempt.attempt + 1);
  } else {
    t.finished_at_ms = now;
    t.error_code = to == RunStatus::kCancelled ? "cancelled" : "attempt_lost";
    t.error_summary = reason.empty() ? "the attempt's process vanished without a result" : reason;
  }
  t.events = {Event(RunEventType(to), "recovery", attempt.id)};
  t.now_ms = now;
  Result<RunRecord> r = runs_.ApplyTransition(t);
  metrics_.Increment("ql_run_transitions_total", "to=\"" + std::string(RunStatusName(to)) + "\"");
  if (r.ok() && log_ != nullptr) {
    if (to == RunStatus::kRecoveryRequired) {
      LogEnd(run, attempt.attempt, to, "attempt_lost", std::nullopt, 0, 0, *t.error_summary);
    } else {
      log_->Warn("run.lost", {{"run", run.id},
                              {"task", run.task_id},
                              {"attempt", attempt.attempt},
                              {"then", RunStatusName(to)},
                              {"message", reason.empty() ? "the attempt was lost" : reason}});
    }
  }
  return r.ok() ? Status::Ok() : r.status();
}

void RunSettlement::LogEnd(const RunRecord& run, int attempt, RunStatus to, const std::string& code,
                           std::optional<int> exit_code, int signal, int64_t retry_in_ms,
                           const std::string& summary) {
  std::vector<LogField> fields = {{"run", run.id}, {"task", run.task_id}, {"attempt", attempt}};
  if (!code.empty()) fields.emplace_back("code", code);
  if (exit_code.has_value()) fields.emplace_back("exit", *exit_code);
  if (signal != 0) fields.emplace_back("signal", signal);
  switch (to) {
    case RunStatus::kFailed:
      if (!summary.empty()) fields.emplace_back("message", summary.substr(0, 300));
      log_->Write(LogLevel::kWarn, "run.failed", fields);
      return;
    case RunStatus::kTimedOut:
      log_->Write(LogLevel::kWarn, "run.timed_out", fields);
      return;
    case RunStatus::kRecoveryRequired:
      if (!summary.empty()) fields.emplace_back("message", summary.substr(0, 300));
      log_->Write(LogLevel::kError, "run.recovery_required", fields);
      return;
    case RunStatus::kRetryWait:
      fields.emplace_back("retry_in_ms", retry_in_ms);
      log_->Write(LogLevel::kInfo, "run.retrying", fields);
      return;
    case RunStatus::kCancelled:
      log_->Write(LogLevel::kInfo, "run.cancelled", fields);
      return;
    case RunStatus::kSucceeded:
      log_->Write(LogLevel::kDebug, "run.succeeded", fields);
      return;
    default:
      return;  // lost: SettleLost says what became of it
  }
}

Result<int> RunSettlement::PromoteRetries(int limit) {
  int requeued = 0;
  const int64_t now = clock_.NowMs();
  QL_ASSIGN_OR_RETURN(std::vector<RunRecord> due, runs_.ListRetryDue(now, limit));
  for (const RunRecord& run : due) {
    RunTransitionCommand t;
    t.run_id = run.id;
    t.expected_version = run.version;
    t.run_to = Name(RunStatus::kQueued);
    t.new_attempt_id = NewUuidV7(now, random_);
    t.events = {Event(RunEventType(RunStatus::kQueued), "dispatcher", t.new_attempt_id)};
    t.now_ms = now;
    Result<RunRecord> r = runs_.ApplyTransition(t);
    if (r.ok()) {
      ++requeued;
      metrics_.Increment("ql_run_transitions_total", R"(to="queued")");
    } else if (r.status().code() != StatusCode::kConflict) {
      return r.status();
    }
  }
  return requeued;
}

}  // namespace ql
