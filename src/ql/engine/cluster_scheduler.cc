#include "ql/engine/cluster_scheduler.h"

#include <algorithm>
#include <string>
#include <utility>

#include "ql/core/ids.h"
#include "ql/core/misfire.h"

namespace ql {
namespace {

constexpr int kHardClaimCap = 256;

// A random (version 4) UUID: the claim token of one round. Its time must not come from the
// node, so it carries none.
std::string RandomUuid(RandomSource& random) {
  std::string hex = RandomHex(random, 16);
  hex[12] = '4';
  hex[16] = "89ab"[std::stoi(hex.substr(16, 1), nullptr, 16) & 3];
  return hex.substr(0, 8) + "-" + hex.substr(8, 4) + "-" + hex.substr(12, 4) + "-" +
         hex.substr(16, 4) + "-" + hex.substr(20, 12);
}

}  // namespace

ClusterScheduler::ClusterScheduler(ClusterScheduleRepository& schedules,
                                   DefinitionRepository& definitions, RandomSource& random,
                                   Metrics& metrics, ClusterSchedulerOptions options)
    : schedules_(schedules),
      random_(random),
      metrics_(metrics),
      options_(std::move(options)),
      decider_(definitions, random, options_.executor_type, options_.grace_ms),
      batch_(options_.claims_per_round) {
  metrics_.Describe("ql_scheduler_occurrences_total", "counter",
                    "Schedule decisions, by outcome (initialize, admit, skip, raced, "
                    "already_admitted, refused).");
  metrics_.Describe("ql_scheduler_rounds_total", "counter", "Scheduler rounds run.");
  metrics_.Describe("ql_scheduler_claims_total", "counter", "Schedule rows claimed.");
  metrics_.DescribeHistogram("ql_scheduler_round_rows", "Rows claimed per round.",
                             Metrics::kRowBuckets);
  metrics_.Describe("ql_scheduler_errors_total", "counter",
                    "Claim statements and decisions that failed.");
  metrics_.Describe("ql_scheduler_lag_seconds", "histogram",
                    "Claim time minus scheduled time of admitted occurrences (database clock).");
  metrics_.Describe("ql_scheduler_admission_retries_total", "counter",
                    "Admission transactions rerun whole after a serialization failure or deadlock.");
  metrics_.Describe("ql_scheduler_admission_retries_exhausted_total", "counter",
                    "Admission transactions that failed because their reruns ran out.");
  metrics_.Describe("ql_scheduler_batch_fallbacks_total", "counter",
                    "Admission batches whose transaction failed, then committed one by one.");
  metrics_.Describe("ql_scheduler_next_fire_mismatches_total", "counter",
                    "Admissions the store refused because their new cursor was not the next fire "
                    "time recomputed from the stored trigger revision (next_fire_mismatch).");
}

Status ClusterScheduler::ValidateOptions(const ClusterSchedulerOptions& o) {
  if (o.owner.empty() || o.owner.size() > 128) {
    return InvalidArgument("invalid_scheduler_option", "the claim owner must be 1..128 bytes");
  }
  if (o.claims_per_round < 1 || o.claims_per_round > kHardClaimCap) {
    return InvalidArgument("invalid_scheduler_option",
                           "claims per round " + std::to_string(o.claims_per_round) +
                               " is outside 1.." + std::to_string(kHardClaimCap));
  }
  if (o.max_claims_per_round != 0 &&
      (o.max_claims_per_round < o.claims_per_round || o.max_claims_per_round > kHardClaimCap)) {
    return InvalidArgument("invalid_scheduler_option",
                           "max claims per round " + std::to_string(o.max_claims_per_round) +
                               " is outside claims per round.." + std::to_string(kHardClaimCap));
  }
  if (o.lease_ms < 1000 || o.lease_ms > 60'000) {
    return InvalidArgument("invalid_scheduler_option",
                           "lease " + std::to_string(o.lease_ms) + " ms is outside 1000..60000");
  }
  if (o.cadence_ms < 100 || o.cadence_ms > 60'000) {
    return InvalidArgument("invalid_scheduler_option",
                           "cadence " + std::to_string(o.cadence_ms) + " ms is outside 100..60000");
  }
  if (o.executor_type != "remote_worker" && o.executor_type != "local_process") {
    return InvalidArgument("invalid_scheduler_option",
                           "executor type '" + o.executor_type + "' is not known");
  }
  return ValidateGraceMs(o.grace_ms);
}

void ClusterScheduler::Account(const ClaimDecision& decision, misfire::Decision::Kind kind,
                               AdvanceOutcome outcome, RoundReport& report) {
  const int64_t now_ms = decision.claim.acquired_at_ms;
  if (outcome == AdvanceOutcome::kRaced) {
    ++report.raced;
    metrics_.Increment("ql_scheduler_occurrences_total", R"(outcome="raced")");
    return;
  }
  if (decision.exhausted) ++report.exhausted;
  if (outcome == AdvanceOutcome::kAlreadyAdmitted) {
    ++report.already_admitted;
    metrics_.Increment("ql_scheduler_occurrences_total", R"(outcome="already_admitted")");
  } else if (outcome == AdvanceOutcome::kSkipped) {
    // Recorded as a skipped run: the overlap policy or the concurrency limit refused it.
    ++report.skipped;
    metrics_.Increment("ql_scheduler_occurrences_total", R"(outcome="refused")");
  } else if (decision.run.has_value()) {
    ++report.admitted;
    metrics_.Increment("ql_scheduler_occurrences_total", R"(outcome="admit")");
    metrics_.Observe("ql_scheduler_lag_seconds",
                     static_cast<double>(now_ms - *decision.run->scheduled_for_ms) / 1000.0);
  } else if (kind == misfire::Decision::Kind::kInitialize) {
    ++report.initialized;
    metrics_.Increment("ql_scheduler_occurrences_total", R"(outcome="initialize")");
  } else {
    ++report.skipped;
    metrics_.Increment("ql_scheduler_occurrences_total", R"(outcome="skip")");
  }
  if (decision.new_next_fire_at_ms.has_value() && *decision.new_next_fire_at_ms <= now_ms) {
    report.still_due = true;
  }
}

void ClusterScheduler::Fail(const Status& status, RoundReport& report) {
  if (report.first_error.ok()) report.first_error = status;
  ++report.errors;
  metrics_.Increment("ql_scheduler_errors_total");
}

void ClusterScheduler::ReportSlowPath(size_t decisions, const Status& batch_failure,
                                      RoundReport& report) {
  const AdmissionRetryStats stats = schedules_.TakeAdmissionRetryStats();
  report.admission_retries += stats.retries;
  report.admission_retries_exhausted += stats.exhausted;
  report.committed_one_by_one = !batch_failure.ok();
  if (stats.retries > 0) {
    metrics_.Increment("ql_scheduler_admission_retries_total", {}, stats.retries);
  }
  if (stats.exhausted > 0) {
    metrics_.Increment("ql_scheduler_admission_retries_exhausted_total", {}, stats.exhausted);
  }
  if (report.committed_one_by_one) metrics_.Increment("ql_scheduler_batch_fallbacks_total");
  if ((stats.retries == 0 && stats.exhausted == 0 && batch_failure.ok()) || !diagnostics_) return;
  std::string line = "a batch of " + std::to_string(decisions) + " decision(s): " +
                     std::to_string(stats.retries) + " whole-transaction rerun(s), " +
                     std::to_string(stats.exhausted) + " transaction(s) out of reruns";
  if (!batch_failure.ok()) {
    line += "; committed one by one after " + batch_failure.reason() + ": " +
            batch_failure.message();
  }
  diagnostics_("scheduler", Busy("admission_slow_path", line));
}

Result<RoundReport> ClusterScheduler::RunRound() {
  if (in_round_.exchange(true)) {
    return Busy("round_in_progress",
                "a round of scheduler " + options_.owner + " is running; rounds never overlap");
  }
  // Cleared however the round ends, an exception included.
  struct Leave {
    std::atomic<bool>& flag;
    ~Leave() { flag = false; }
  } leave{in_round_};
  return Round();
}

Result<RoundReport> ClusterScheduler::Round() {
  RoundReport report;
  if (stopping_) return report;
  metrics_.Increment("ql_scheduler_rounds_total");
  ClaimRequest request{options_.owner, RandomUuid(random_), batch_, options_.lease_ms};
  Result<std::vector<ScheduleClaim>> claims = schedules_.ClaimDueSchedules(request);
  if (!claims.ok()) {
    metrics_.Increment("ql_scheduler_errors_total");
    return claims.status();
  }
  report.rows = static_cast<int>(claims->size());
  report.page_full = report.rows >= batch_;
  metrics_.Increment("ql_scheduler_claims_total", {}, report.rows);
  metrics_.Observe("ql_scheduler_round_rows", report.rows);
  // Decide every claim with its own acquisition time, then commit the batch at once.
  std::vector<ClaimDecision> decisions;
  std::vector<misfire::Decision::Kind> kinds;
  for (const ScheduleClaim& claim : *claims) {
    Result<DecidedRow> row = decider_.Decide(claim.due, claim.acquired_at_ms);
    if (!row.ok()) {
      Fail(row.status(), report);
      continue;
    }
    if (row->decision.kind == misfire::Decision::Kind::kNotDue) continue;
    ClaimDecision decision;
    decision.claim = claim;
    decision.new_next_fire_at_ms = row->new_next_fire_at_ms;
    decision.exhausted = row->exhausted;
    decision.run = std::move(row->run);
    decisions.push_back(std::move(decision));
    kinds.push_back(row->decision.kind);
  }
  if (!decisions.empty() && !stopping_) {
    Result<std::vector<ClaimCommitResult>> batch = schedules_.CommitClaimDecisions(decisions);
    const Status batch_failure = batch.status();
    if (batch.ok()) {
      for (size_t k = 0; k < decisions.size(); ++k) {
        if (!(*batch)[k].error.ok()) {
          Fail((*batch)[k].error, report);
        } else {
          Account(decisions[k], kinds[k], (*batch)[k].outcome, report);
        }
      }
    } else {
      // The batch as a whole failed: commit one by one, so one bad decision cannot hold back
      // the others. When the failure was a lost COMMIT reply the batch may have been written;
      // each single commit re-verifies the full fence, so what the batch wrote comes back
      // raced and nothing is admitted twice.
      for (size_t k = 0; k < decisions.size() && !stopping_; ++k) {
        Result<AdvanceOutcome> one = schedules_.CommitClaimDecision(decisions[k]);
        if (one.ok()) {
          Account(decisions[k], kinds[k], *one, report);
        } else {
          Fail(one.status(), report);
        }
      }
    }
    ReportSlowPath(decisions.size(), batch_failure, report);
    report.next_fire_mismatches = schedules_.TakeNextFireMismatches();
    if (report.next_fire_mismatches > 0) {
      metrics_.Increment("ql_scheduler_next_fire_mismatches_total", {},
                         report.next_fire_mismatches);
    }
  }
  if (report.admitted > 0 && on_admitted_) on_admitted_();
  // A burst: grow the next batch while rounds come back full and make progress.
  const int cap = std::max(options_.max_claims_per_round, options_.claims_per_round);
  batch_ = report.page_full && report.rows > report.errors ? std::min(batch_ * 2, cap)
                                                           : options_.claims_per_round;
  return report;
}

Result<int64_t> ClusterScheduler::NextDelayMs(const RoundReport& report) {
  // Rows that failed keep their claims until expiry; they must not make the loop spin.
  const bool progressed = report.rows > report.errors;
  if ((report.page_full && progressed) || report.still_due) return int64_t{0};
  QL_ASSIGN_OR_RETURN(std::optional<int64_t> until, schedules_.MsUntilNextDue());
  if (!until.has_value()) return options_.cadence_ms;
  return std::clamp<int64_t>(*until, 0, options_.cadence_ms);
}

}  // namespace ql
