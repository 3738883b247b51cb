#include "ql/engine/local_scheduler.h"

#include <algorithm>

#include "ql/core/canonical_json.h"
#include "ql/core/execution_plan.h"
#include "ql/core/idempotency_key.h"
#include "ql/core/ids.h"
#include "ql/core/misfire.h"

namespace ql {
namespace {

constexpr int kHardPageCap = 256;

}  // namespace

Result<LocalSchedulerOptions> LocalSchedulerOptionsForProfile(std::string_view profile) {
  LocalSchedulerOptions options;
  if (profile == "edge") {
    options.page_size = 4;
    options.cadence_ms = 5000;
    options.grace_ms = 30'000;
  } else if (profile == "standalone") {
    options.page_size = 16;
    options.cadence_ms = 1000;
    options.grace_ms = 300'000;
  } else {
    return InvalidArgument(
        "unknown_profile",
        "unknown deployment profile '" + std::string(profile) + "': expected edge or standalone");
  }
  return options;
}

LocalScheduler::LocalScheduler(ScheduleRepository& schedules, DefinitionRepository& definitions,
                               Clock& clock, RandomSource& random, Metrics& metrics,
                               LocalSchedulerOptions options)
    : schedules_(schedules),
      clock_(clock),
      metrics_(metrics),
      options_(std::move(options)),
      decider_(definitions, random, options_.executor_type, options_.grace_ms) {
  metrics_.Describe("ql_scheduler_occurrences_total", "counter",
                    "Schedule decisions applied, by outcome (initialize, admit, skip, raced, "
                    "already_admitted, refused).");
  metrics_.Describe("ql_scheduler_rounds_total", "counter", "Scheduler rounds run.");
  metrics_.DescribeHistogram("ql_scheduler_round_rows", "Rows decided per round.",
                             Metrics::kRowBuckets);
  metrics_.Describe("ql_scheduler_lag_seconds", "histogram",
                    "Admission time minus scheduled time of admitted occurrences.");
  metrics_.Describe("ql_scheduler_errors_total", "counter", "Scheduler storage errors.");
  metrics_.Describe("ql_scheduler_next_fire_mismatches_total", "counter",
                    "Admissions the store refused because their new cursor was not the next fire "
                    "time recomputed from the stored trigger revision (next_fire_mismatch).");
}

Status LocalScheduler::ValidateOptions(const LocalSchedulerOptions& o) {
  if (o.page_size < 1 || o.page_size > kHardPageCap) {
    return InvalidArgument("invalid_scheduler_option",
                           "page size " + std::to_string(o.page_size) + " is outside 1..256");
  }
  if (o.cadence_ms < 100 || o.cadence_ms > 60'000) {
    return InvalidArgument("invalid_scheduler_option",
                           "cadence " + std::to_string(o.cadence_ms) + " ms is outside 100..60000");
  }
  return ValidateGraceMs(o.grace_ms);
}

Status LocalScheduler::DecideAndApply(const DueSchedule& due, int64_t now_ms, RoundReport& report) {
  const ScheduleRecord& s = due.schedule;
  const TriggerRevisionRecord& t = due.trigger;
  QL_ASSIGN_OR_RETURN(DecidedRow row, decider_.Decide(due, now_ms));
  const misfire::Decision& decision = row.decision;
  if (decision.kind == misfire::Decision::Kind::kNotDue) return Status::Ok();

  ScheduleAdvance advance;
  advance.trigger_id = s.trigger_id;
  advance.expected_trigger_revision = s.trigger_revision;
  advance.expected_state_version = s.state_version;
  advance.expected_next_fire_at_ms = s.next_fire_at_ms;
  advance.expected_task_revision = t.task_revision;
  advance.expected_task_digest = t.task_digest;
  advance.new_next_fire_at_ms = row.new_next_fire_at_ms;
  advance.exhausted = row.exhausted;
  advance.now_ms = now_ms;
  advance.run = std::move(row.run);

  QL_ASSIGN_OR_RETURN(AdvanceOutcome outcome, schedules_.ApplyScheduleAdvance(advance));
  if (outcome == AdvanceOutcome::kRaced) {
    ++report.raced;
    metrics_.Increment("ql_scheduler_occurrences_total", R"(outcome="raced")");
    return Status::Ok();
  }
  if (advance.exhausted) ++report.exhausted;
  if (outcome == AdvanceOutcome::kAlreadyAdmitted) {
    // The cursor moved past an occurrence whose key a run holds already.
    ++report.already_admitted;
    metrics_.Increment("ql_scheduler_occurrences_total", R"(outcome="already_admitted")");
  } else if (outcome == AdvanceOutcome::kSkipped) {
    // Recorded as a skipped run: the overlap policy or the concurrency limit refused it.
    ++report.skipped;
    metrics_.Increment("ql_scheduler_occurrences_total", R"(outcome="refused")");
  } else if (advance.run.has_value()) {
    ++report.admitted;
    metrics_.Increment("ql_scheduler_occurrences_total", R"(outcome="admit")");
    metrics_.Observe("ql_scheduler_lag_seconds",
                     static_cast<double>(now_ms - *advance.run->scheduled_for_ms) / 1000.0);
    if (on_admitted_) on_admitted_();
  } else if (decision.kind == misfire::Decision::Kind::kInitialize) {
    ++report.initialized;
    metrics_.Increment("ql_scheduler_occurrences_total", R"(outcome="initialize")");
  } else {
    ++report.skipped;
    metrics_.Increment("ql_scheduler_occurrences_total", R"(outcome="skip")");
  }
  if (decision.new_cursor_ms.has_value() && *decision.new_cursor_ms <= now_ms) {
    report.still_due = true;
  }
  return Status::Ok();
}

Result<RoundReport> LocalScheduler::RunRound() {
  RoundReport report;
  const int64_t now_ms = clock_.NowMs();
  metrics_.Increment("ql_scheduler_rounds_total");
  Result<std::vector<DueSchedule>> due = schedules_.ListDueSchedules(now_ms, options_.page_size);
  if (!due.ok()) {
    metrics_.Increment("ql_scheduler_errors_total");
    return due.status();
  }
  report.rows = static_cast<int>(due->size());
  report.page_full = report.rows >= options_.page_size;
  metrics_.Observe("ql_scheduler_round_rows", report.rows);
  Status failed;
  for (const DueSchedule& row : *due) {
    Status st = DecideAndApply(row, now_ms, report);
    if (st.ok()) continue;
    ++report.errors;
    metrics_.Increment("ql_scheduler_errors_total");
    // A row whose stored definition is unusable, or whose admission the store refused for its
    // cursor, must not stall every other trigger.
    if (st.code() == StatusCode::kCorrupt || st.code() == StatusCode::kNotFound ||
        st.code() == StatusCode::kConflict || st.reason() == misfire::kReasonNextFireMismatch) {
      continue;
    }
    failed = std::move(st);
    break;
  }
  report.next_fire_mismatches = schedules_.TakeNextFireMismatches();
  if (report.next_fire_mismatches > 0) {
    metrics_.Increment("ql_scheduler_next_fire_mismatches_total", {}, report.next_fire_mismatches);
  }
  if (!failed.ok()) return failed;
  return report;
}

Result<int64_t> LocalScheduler::NextDelayMs(const RoundReport& report) {
  // Rows that failed stay due; they must not turn the loop into a busy spin.
  const bool progressed = report.rows > report.errors;
  if ((report.page_full && progressed) || report.still_due) return int64_t{0};
  QL_ASSIGN_OR_RETURN(std::optional<int64_t> earliest, schedules_.EarliestDueAt());
  if (!earliest.has_value()) return options_.cadence_ms;
  const int64_t until = *earliest - clock_.NowMs();
  return std::clamp<int64_t>(until, 0, options_.cadence_ms);
}

}  // namespace ql
