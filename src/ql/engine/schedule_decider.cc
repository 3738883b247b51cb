#include "ql/engine/schedule_decider.h"

#include "ql/core/canonical_json.h"
#include "ql/core/execution_plan.h"
#include "ql/core/idempotency_key.h"
#include "ql/core/ids.h"
#include "ql/core/jitter.h"

namespace ql {
namespace {

constexpr size_t kMaxCachedSchedules = 4096;

}  // namespace

Result<const CronSchedule*> ScheduleDecider::ScheduleFor(const TriggerRevisionRecord& trigger) {
  std::string key = trigger.expression + "\t" + trigger.timezone;
  auto it = cron_cache_.find(key);
  if (it != cron_cache_.end()) return it->second.get();
  Result<CronSchedule> parsed = CronSchedule::Create(trigger.expression, trigger.timezone);
  if (!parsed.ok()) {
    // A stored revision that no longer parses (zone removed from tzdata, say) is corrupt input.
    return Corrupt("trigger_spec_invalid", "trigger " + trigger.trigger_id + " revision " +
                                               std::to_string(trigger.revision) + ": " +
                                               parsed.status().message());
  }
  if (cron_cache_.size() >= kMaxCachedSchedules) cron_cache_.clear();
  auto owned = std::make_unique<CronSchedule>(std::move(parsed).value());
  const CronSchedule* raw = owned.get();
  cron_cache_.emplace(std::move(key), std::move(owned));
  return raw;
}

Result<ScheduleDecider::ExecutionRef> ScheduleDecider::ExecutionFor(
    const TriggerRevisionRecord& trigger) {
  auto key = std::make_pair(trigger.task_id, trigger.task_revision);
  auto it = execution_cache_.find(key);
  if (it != execution_cache_.end()) return it->second;
  QL_ASSIGN_OR_RETURN(
      ExecutionRevisionRecord execution,
      definitions_.FindExecutionRevision(trigger.task_id, trigger.task_revision, executor_type_));
  QL_ASSIGN_OR_RETURN(nlohmann::json plan_json, ParseJsonStrict(execution.plan_json));
  QL_ASSIGN_OR_RETURN(ExecutionPlan plan, PlanFromJson(plan_json));
  QL_RETURN_IF_ERROR(VerifyPlanDigest(plan, execution.plan_digest));
  if (plan.task_digest != trigger.task_digest) {
    return Corrupt("digest_mismatch", "execution revision " + execution.id +
                                          " does not belong to the pinned task digest");
  }
  if (execution_cache_.size() >= kMaxCachedSchedules) execution_cache_.clear();
  ExecutionRef ref{execution.id, plan.retry_policy};
  execution_cache_.emplace(key, ref);
  return ref;
}

Result<DecidedRow> ScheduleDecider::Decide(const DueSchedule& due, int64_t now_ms) {
  const ScheduleRecord& s = due.schedule;
  const TriggerRevisionRecord& t = due.trigger;
  QL_ASSIGN_OR_RETURN(const CronSchedule* cron, ScheduleFor(t));
  QL_ASSIGN_OR_RETURN(MisfirePolicy policy, ParseMisfirePolicy(t.misfire));
  misfire::NextFireFn next = [cron](int64_t after) { return cron->NextAfter(after); };
  DecidedRow row;
  row.decision =
      misfire::Decide(s.next_fire_at_ms, now_ms, s.published_at_ms, grace_ms_, policy, next);
  row.new_next_fire_at_ms = row.decision.new_cursor_ms;
  row.exhausted = !row.decision.new_cursor_ms.has_value();
  if (!row.decision.admit_scheduled_for_ms.has_value()) return row;

  QL_ASSIGN_OR_RETURN(ExecutionRef execution, ExecutionFor(t));
  const int64_t scheduled_for = *row.decision.admit_scheduled_for_ms;
  NewRun run;
  run.run_id = NewUuidV7(now_ms, random_);
  run.attempt_id = NewUuidV7(now_ms, random_);
  run.project_id = t.project_id;
  run.task_id = t.task_id;
  run.task_revision = t.task_revision;
  run.task_digest = t.task_digest;
  run.execution_revision_id = execution.id;
  run.executor_type = executor_type_;
  run.trigger_id = t.trigger_id;
  run.trigger_revision = t.revision;
  run.scheduled_for_ms = scheduled_for;
  if (t.jitter_ms > 0) {
    run.release_at_ms = scheduled_for + JitterOffsetMs(t.trigger_id, scheduled_for, t.jitter_ms);
  }
  run.trigger_type = "cron";
  run.idempotency_key = CronIdempotencyKey(t.trigger_id, t.revision, scheduled_for);
  run.retry_policy = execution.retry_policy;
  run.actor_type = "scheduler";
  run.now_ms = now_ms;
  row.run = std::move(run);
  return row;
}

}  // namespace ql
