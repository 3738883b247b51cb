#include "ql/core/retention.h"

#include <string>

namespace ql {
namespace {

Status CheckRange(const std::optional<int>& value, int max, const char* reason,
                  const char* what) {
  if (value.has_value() && (*value < 1 || *value > max)) {
    return InvalidArgument(reason, std::string(what) + " must be 1.." + std::to_string(max) +
                                       ", got " + std::to_string(*value));
  }
  return Status::Ok();
}

}  // namespace

Status ValidateRetentionSettings(const RetentionSettings& settings) {
  QL_RETURN_IF_ERROR(
      CheckRange(settings.keep_days, kMaxKeepDays, "invalid_keep_days", "keep_days"));
  return CheckRange(settings.keep_runs, kMaxKeepRuns, "invalid_keep_runs", "keep_runs");
}

EffectiveRetention ResolveRetention(const RetentionSettings& project,
                                    const RetentionSettings& task) {
  EffectiveRetention out;
  out.keep_days = task.keep_days.value_or(project.keep_days.value_or(kDefaultKeepDays));
  out.keep_runs = task.keep_runs.value_or(project.keep_runs.value_or(kDefaultKeepRuns));
  return out;
}

AuditRecord RetentionAuditFact(const SetRetentionCommand& cmd) {
  AuditRecord fact;
  fact.id = cmd.audit_id;
  fact.at_ms = cmd.now_ms;
  if (cmd.fence.has_value()) fact.actor_id = cmd.fence->principal_id;
  fact.action = std::string(kAuditRetentionSet);
  fact.target_kind = cmd.task_id.empty() ? "project" : "task";
  fact.target_id = cmd.task_id.empty() ? cmd.project_id : cmd.task_id;
  fact.project_id = cmd.project_id;
  fact.outcome = std::string(kAuditOk);
  fact.code = std::string(kAuditOk);
  fact.request_id = cmd.request_id;
  return fact;
}

PurgeSelection PlanPurge(const RetentionScope& scope, int64_t now_ms, int limit,
                         const std::string& audit_id) {
  const EffectiveRetention effective = ResolveRetention(scope.project, scope.task);
  PurgeSelection out;
  out.project_id = scope.project_id;
  out.task_id = scope.task_id;
  out.finished_before_ms = now_ms - int64_t{effective.keep_days} * kDayMs;
  out.keep_runs = effective.keep_runs;
  out.limit = limit;
  out.audit.id = audit_id;
  out.audit.at_ms = now_ms;
  out.audit.action = std::string(kAuditRunsPurge);
  out.audit.target_kind = "task";
  out.audit.target_id = scope.task_id;
  out.audit.project_id = scope.project_id;
  out.audit.outcome = std::string(kAuditOk);
  out.audit.code = std::string(kAuditOk);
  out.audit.request_id = "retention";
  return out;
}

}  // namespace ql
