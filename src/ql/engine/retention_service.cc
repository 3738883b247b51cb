#include "ql/engine/retention_service.h"

#include "ql/core/ids.h"
#include "ql/core/store_commands.h"

namespace ql {

RetentionService::RetentionService(Store& store, GovernanceService& governance, Clock& clock,
                                   RandomSource& random)
    : store_(store), governance_(governance), clock_(clock), random_(random) {}

Result<std::string> RetentionService::ProjectFor(const Caller& caller, const std::string& project,
                                                 Action action, std::string_view target) {
  QL_ASSIGN_OR_RETURN(ProjectRecord record, governance_.ResolveProject(
                                                project.empty() ? caller.project : project));
  Status st = governance_.Authorize(caller, record.id, action, target);
  if (st.reason() == "hidden") {
    return NotFound("project_not_found", "no project is named " + Quote(project));
  }
  QL_RETURN_IF_ERROR(st);
  return record.id;
}

Result<std::string> RetentionService::ProjectOfTask(const Caller& caller,
                                                    const std::string& task_id, Action action,
                                                    std::string_view target) {
  QL_RETURN_IF_ERROR(ValidateId("task_id", task_id));
  const Status missing = NotFound("task_not_found", "task " + task_id + " does not exist");
  Result<TaskHeadRecord> head = store_.definitions().GetTaskHead(task_id);
  if (!head.ok()) return head.status().code() == StatusCode::kNotFound ? missing : head.status();
  Status st = governance_.Authorize(caller, head->project_id, action, target);
  if (st.reason() == "hidden") return missing;
  QL_RETURN_IF_ERROR(st);
  return head->project_id;
}

Result<RetentionView> RetentionService::View(const std::string& project_id,
                                             const std::string& task_id) {
  RetentionView view;
  QL_ASSIGN_OR_RETURN(RetentionRecord project, store_.retention().GetRetention(project_id, ""));
  if (task_id.empty()) {
    view.stored = project;
    view.effective = ResolveRetention(project.settings, {});
    return view;
  }
  QL_ASSIGN_OR_RETURN(view.stored, store_.retention().GetRetention(project_id, task_id));
  view.effective = ResolveRetention(project.settings, view.stored.settings);
  return view;
}

Result<RetentionView> RetentionService::Set(const Caller& caller, const std::string& project_id,
                                            const std::string& task_id,
                                            const RetentionSettings& settings) {
  QL_RETURN_IF_ERROR(ValidateRetentionSettings(settings));
  SetRetentionCommand cmd;
  cmd.project_id = project_id;
  cmd.task_id = task_id;
  cmd.settings = settings;
  if (!caller.principal_id.empty()) {
    cmd.fence = PolicyFence{caller.principal_id, RequiredRole(Action::kPublish)};
  }
  cmd.request_id = caller.request_id;
  cmd.now_ms = clock_.NowMs();
  {
    std::lock_guard<std::mutex> lock(random_mu_);
    cmd.audit_id = NewUuidV7(cmd.now_ms, random_);
  }
  QL_RETURN_IF_ERROR(store_.retention().SetRetention(cmd).status());
  return View(project_id, task_id);
}

Result<RetentionView> RetentionService::GetProjectRetention(const Caller& caller,
                                                            const std::string& project) {
  QL_ASSIGN_OR_RETURN(std::string id,
                      ProjectFor(caller, project, Action::kRead, "projects.retention.get"));
  return View(id, "");
}

Result<RetentionView> RetentionService::SetProjectRetention(const Caller& caller,
                                                            const std::string& project,
                                                            const RetentionSettings& settings) {
  QL_ASSIGN_OR_RETURN(std::string id,
                      ProjectFor(caller, project, Action::kPublish, "projects.retention.set"));
  return Set(caller, id, "", settings);
}

Result<RetentionView> RetentionService::GetTaskRetention(const Caller& caller,
                                                         const std::string& task_id) {
  QL_ASSIGN_OR_RETURN(std::string project,
                      ProjectOfTask(caller, task_id, Action::kRead, "tasks.retention.get"));
  return View(project, task_id);
}

Result<RetentionView> RetentionService::SetTaskRetention(const Caller& caller,
                                                         const std::string& task_id,
                                                         const RetentionSettings& settings) {
  QL_ASSIGN_OR_RETURN(std::string project,
                      ProjectOfTask(caller, task_id, Action::kPublish, "tasks.retention.set"));
  return Set(caller, project, task_id, settings);
}

}  // namespace ql
