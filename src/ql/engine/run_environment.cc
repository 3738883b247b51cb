#include "ql/engine/run_environment.h"

#include <algorithm>

#include "ql/core/rfc3339.h"
#include "ql/core/timezone.h"

namespace ql {
namespace {

bool Known(const Status& status) { return status.ok() || status.code() == StatusCode::kNotFound; }

}  // namespace

Result<EnvironmentList> RunContextEnvironment(DefinitionRepository& definitions,
                                              ProjectRepository* projects, const RunRecord& run,
                                              const EnvironmentList& task_environment) {
  std::string zone = "UTC";
  if (run.trigger_id.has_value() && run.trigger_revision.has_value()) {
    auto trigger = definitions.GetTriggerRevision(*run.trigger_id, *run.trigger_revision);
    if (!Known(trigger.status())) return trigger.status();
    if (trigger.ok()) zone = trigger->timezone;
  }
  std::string task_name;
  {
    auto head = definitions.GetTaskHead(run.task_id);
    if (!Known(head.status())) return head.status();
    if (head.ok()) task_name = head->name;
    if (task_name.empty()) {
      auto revision = definitions.GetTaskRevision(run.task_id, run.task_revision);
      if (!Known(revision.status())) return revision.status();
      if (revision.ok()) task_name = revision->name;
    }
  }
  std::string project = run.project_id;
  if (projects != nullptr) {
    auto record = projects->GetProject(run.project_id);
    if (!Known(record.status())) return record.status();
    if (record.ok() && !record->slug.empty()) project = record->slug;
  }
  const int64_t at = run.scheduled_for_ms.value_or(run.created_at_ms);
  std::string scheduled = FormatRfc3339Utc(at);
  if (Result<TimeZone> tz = TimeZone::Load(zone); tz.ok()) scheduled = FormatRfc3339(at, *tz);

  EnvironmentList out;
  auto add = [&](const char* name, std::string value) {
    const bool set_by_task =
        std::any_of(task_environment.begin(), task_environment.end(),
                    [&](const auto& variable) { return variable.first == name; });
    if (!set_by_task && !value.empty()) out.emplace_back(name, std::move(value));
  };
  add("TZ", zone);
  add("LANG", "C.UTF-8");
  add("QL_TASK_NAME", task_name);
  add("QL_PROJECT", project);
  add("QL_SCHEDULED_FOR", scheduled);
  return out;
}

}  // namespace ql
