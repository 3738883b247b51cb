#include "ql/engine/script_retention.h"

#include <set>
#include <string>

#include "ql/core/canonical_json.h"
#include "ql/core/execution_plan.h"
#include "ql/core/task_spec.h"

namespace ql {
namespace {

// The script a stored task revision pins, if any (a revision that cannot be read pins none:
// its plan cannot run either).
void PinOf(const TaskRevisionRecord& revision, std::set<ScriptVersionKey>& out) {
  Result<nlohmann::json> spec = ParseJsonStrict(revision.spec_json);
  if (!spec.ok()) return;
  Result<CommandSpec> parsed = ParseCommandSpec(*spec);
  if (!parsed.ok()) return;
  const auto* script = std::get_if<ScriptCommand>(&parsed->command);
  if (script == nullptr || !script->version) return;
  out.insert(ScriptVersionKey{revision.project_id, script->script, *script->version});
}

}  // namespace

Result<std::vector<ScriptVersionKey>> PinnedScriptVersions(Store& store) {
  std::set<ScriptVersionKey> pinned;
  QL_ASSIGN_OR_RETURN(std::vector<ProjectRecord> projects, store.projects().ListProjects());
  for (const ProjectRecord& project : projects) {
    PageRequest page;
    page.limit = 1000;
    for (;;) {
      QL_ASSIGN_OR_RETURN(Page<TaskRevisionRecord> tasks,
                          store.definitions().ListTasks(project.id, page));
      for (const TaskRevisionRecord& task : tasks.items) PinOf(task, pinned);
      if (!tasks.next_key) break;
      page.after_key = tasks.next_key;
    }
    page = PageRequest{};
    page.limit = 1000;
    for (;;) {
      QL_ASSIGN_OR_RETURN(Page<TriggerRevisionRecord> triggers,
                          store.definitions().ListTriggers(project.id, std::nullopt, page));
      for (const TriggerRevisionRecord& trigger : triggers.items) {
        if (!trigger.enabled) continue;
        Result<TaskRevisionRecord> task =
            store.definitions().GetTaskRevision(trigger.task_id, trigger.task_revision);
        if (task.ok()) PinOf(*task, pinned);
      }
      if (!triggers.next_key) break;
      page.after_key = triggers.next_key;
    }
  }
  QL_ASSIGN_OR_RETURN(std::vector<RunRecord> active, store.runs().ListActive());
  for (const RunRecord& run : active) {
    Result<ExecutionRevisionRecord> execution =
        store.definitions().GetExecutionRevision(run.execution_revision_id);
    if (!execution.ok()) continue;
    Result<nlohmann::json> json = ParseJsonStrict(execution->plan_json);
    if (!json.ok()) continue;
    Result<ExecutionPlan> plan = PlanFromJson(*json);
    if (plan.ok() && plan->script) {
      pinned.insert(ScriptVersionKey{run.project_id, plan->script->name, plan->script->version});
    }
  }
  return std::vector<ScriptVersionKey>(pinned.begin(), pinned.end());
}

Result<PurgeArtifactsResult> PurgeScripts(Store& store, Clock& clock,
                                          const ArtifactRetention& retention, int limit) {
  PurgeArtifactsCommand cmd;
  QL_ASSIGN_OR_RETURN(cmd.pinned, PinnedScriptVersions(store));
  cmd.now_ms = clock.NowMs();
  cmd.retention = retention;
  cmd.limit = limit;
  return store.artifacts().PurgeArtifacts(cmd);
}

}  // namespace ql
