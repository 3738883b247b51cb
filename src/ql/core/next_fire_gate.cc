#include "ql/core/next_fire_gate.h"

#include <utility>

#include "ql/core/misfire.h"

namespace ql {
namespace {

constexpr size_t kMaxCachedSchedules = 4096;

Status SpecInvalid(const TriggerRevisionRecord& stored, const Status& why) {
  return Corrupt("trigger_spec_invalid", "trigger " + stored.trigger_id + " revision " +
                                             std::to_string(stored.revision) + ": " +
                                             why.message());
}

}  // namespace

Result<std::shared_ptr<const CronSchedule>> NextFireGate::ScheduleFor(
    const TriggerRevisionRecord& stored) {
  std::string key = stored.expression + "\t" + stored.timezone;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = schedules_.find(key);
    if (it != schedules_.end()) return it->second;
  }
  // Parsed outside the lock: loading a zone reads tzdata.
  Result<CronSchedule> parsed = CronSchedule::Create(stored.expression, stored.timezone);
  if (!parsed.ok()) return SpecInvalid(stored, parsed.status());
  auto schedule = std::make_shared<const CronSchedule>(std::move(parsed).value());
  std::lock_guard<std::mutex> lock(mu_);
  if (schedules_.size() >= kMaxCachedSchedules) schedules_.clear();
  schedules_.emplace(std::move(key), schedule);
  return schedule;
}

Status NextFireGate::Check(const TriggerRevisionRecord& stored, int64_t occurrence_ms,
                           int64_t now_ms, std::optional<int64_t> proposed_cursor_ms) {
  Result<MisfirePolicy> policy = ParseMisfirePolicy(stored.misfire);
  if (!policy.ok()) return SpecInvalid(stored, policy.status());
  QL_ASSIGN_OR_RETURN(std::shared_ptr<const CronSchedule> schedule, ScheduleFor(stored));
  Status verified = misfire::VerifyAdmittedCursor(
      occurrence_ms, now_ms, *policy,
      [&schedule](int64_t after_ms) { return schedule->NextAfter(after_ms); }, proposed_cursor_ms);
  if (verified.ok()) return verified;
  return InvalidArgument(verified.reason(), "trigger " + stored.trigger_id + " revision " +
                                                std::to_string(stored.revision) + ": " +
                                                verified.message());
}

}  // namespace ql
