#include "ql/engine/cluster_recovery.h"

#include <algorithm>
#include <vector>

#include "ql/core/states.h"

namespace ql {

ClusterRecovery::ClusterRecovery(ClusterRecoveryRepository& candidates, RunRepository& runs,
                                 Clock& clock, RandomSource& random, Metrics& metrics,
                                 EventLog* log)
    : candidates_(candidates),
      runs_(runs),
      metrics_(metrics),
      log_(log),
      settlement_(runs, clock, random, metrics, "recovery", log) {
  metrics_.Describe("ql_recovery_runs", "gauge",
                    "Runs the last recovery cycle found, by what it did with them.");
  metrics_.Describe("ql_recovery_errors_total", "counter", "Recovery steps that failed.");
}

Status ClusterRecovery::Settle(const RecoveryCandidate& c, RecoveryReport& report) {
  if (c.lease_live) {
    ++report.live;
    return Status::Ok();
  }
  const std::optional<RunStatus> run_status = ParseRunStatus(c.run_status);
  const std::optional<AttemptStatus> attempt_status = ParseAttemptStatus(c.attempt_status);
  if (!run_status || !attempt_status) {
    ++report.stuck;
    return Corrupt("status_invalid", "run " + c.run_id + " has an unknown status");
  }
  switch (*run_status) {
    case RunStatus::kDispatching:
    case RunStatus::kRunning: {
      if (IsTerminal(*attempt_status)) {
        ++report.stuck;
        return Status::Ok();
      }
      AttemptOutcome lost;
      lost.kind = AttemptOutcome::Kind::kLost;
      lost.message = "the worker's lease expired before the attempt reported a result";
      QL_RETURN_IF_ERROR(settlement_.Finish(c.run_id, c.attempt_id, lost));
      ++report.lost;
      return Status::Ok();
    }
    case RunStatus::kLost: {
      QL_ASSIGN_OR_RETURN(RunRecord run, runs_.GetRun(c.run_id));
      QL_ASSIGN_OR_RETURN(std::vector<AttemptRecord> attempts, runs_.ListAttempts(c.run_id));
      if (attempts.empty() || run.status != c.run_status) return Status::Ok();
      QL_RETURN_IF_ERROR(settlement_.SettleLost(run, attempts.back(), ""));
      ++report.settled;
      return Status::Ok();
    }
    case RunStatus::kQueued:
      if (*attempt_status == AttemptStatus::kClaimed && c.never_started) {
        ++report.redispatch;
      } else {
        ++report.stuck;
      }
      return Status::Ok();
    default:
      ++report.stuck;
      return Status::Ok();
  }
}

void ClusterRecovery::EnforceTimeouts(RunLeaseRepository& leases, int64_t grace_ms) {
  leases_ = &leases;
  timeout_grace_ms_ = grace_ms;
}

Result<RecoveryReport> ClusterRecovery::RunOnce(int page, RecoveryScope scope) {
  RecoveryReport report;
  std::string after;
  while (true) {
    QL_ASSIGN_OR_RETURN(std::vector<RecoveryCandidate> batch,
                        candidates_.ListRecoveryCandidates(after, page, scope));
    for (const RecoveryCandidate& c : batch) {
      ++report.candidates;
      Status st = Settle(c, report);
      if (!st.ok()) {
        if (report.first_error.ok()) report.first_error = st;
        ++report.errors;
        metrics_.Increment("ql_recovery_errors_total");
      }
    }
    if (static_cast<int>(batch.size()) < page) break;
    after = batch.back().run_id;
  }
  if (leases_ != nullptr) {
    Result<std::vector<OverdueRun>> overdue = leases_->ListOverdueRuns(timeout_grace_ms_, page);
    if (!overdue.ok()) {
      if (report.first_error.ok()) report.first_error = overdue.status();
      ++report.errors;
    } else {
      for (const OverdueRun& run : *overdue) {
        AttemptOutcome timed_out;
        timed_out.kind = AttemptOutcome::Kind::kTimedOut;
        timed_out.message = "the run outlived its timeout and its worker did not end it";
        timed_out.end_unconfirmed = true;
        Status st = settlement_.Finish(run.run_id, run.attempt_id, timed_out);
        if (st.ok()) {
          ++report.timed_out;
        } else {
          if (report.first_error.ok()) report.first_error = st;
          ++report.errors;
        }
      }
    }
  }
  Result<int> requeued = settlement_.PromoteRetries(page);
  if (requeued.ok()) {
    report.requeued = *requeued;
  } else {
    if (report.first_error.ok()) report.first_error = requeued.status();
    ++report.errors;
  }
  metrics_.SetGauge("ql_recovery_runs", R"(action="live")", report.live);
  metrics_.SetGauge("ql_recovery_runs", R"(action="lost")", report.lost);
  metrics_.SetGauge("ql_recovery_runs", R"(action="settled")", report.settled);
  metrics_.SetGauge("ql_recovery_runs", R"(action="redispatch")", report.redispatch);
  metrics_.SetGauge("ql_recovery_runs", R"(action="stuck")", report.stuck);
  metrics_.SetGauge("ql_recovery_runs", R"(action="timed_out")", report.timed_out);
  if (log_ != nullptr &&
      report.lost + report.settled + report.timed_out + report.stuck + report.errors > 0) {
    log_->Write(report.errors > 0 || report.stuck > 0 ? LogLevel::kWarn : LogLevel::kInfo,
                "recovery.round",
                {{"candidates", report.candidates},
                 {"lost", report.lost},
                 {"settled", report.settled},
                 {"timed_out", report.timed_out},
                 {"requeued", report.requeued},
                 {"stuck", report.stuck},
                 {"errors", report.errors}});
  }
  return report;
}

}  // namespace ql
