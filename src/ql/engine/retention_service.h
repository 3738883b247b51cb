#pragma once

// Retention settings (DESIGN §11) for the HTTP API and the CLI: a project's defaults and a
// task's overrides, each shown with what applies after inheritance. Reading needs viewer in the
// project, writing admin (checked early here and again inside the write by the store's fence);
// each write leaves a retention.set audit fact.
//
// Errors: InvalidArgument `invalid_keep_days` / `invalid_keep_runs` / `invalid_id`, NotFound
// `project_not_found` / `task_not_found` (also for a caller without any role there),
// PermissionDenied `permission_denied`, Conflict `project_archived`, and the store's.

#include <mutex>
#include <string>

#include "ql/core/clock.h"
#include "ql/core/ports.h"
#include "ql/core/retention.h"
#include "ql/core/status.h"
#include "ql/engine/governance_service.h"

namespace ql {

struct RetentionView {
  RetentionRecord stored;        // what was set here (empty fields inherit)
  EffectiveRetention effective;  // what the purge applies
};

class RetentionService {
 public:
  // Every argument must outlive the service. Thread-safe.
  RetentionService(Store& store, GovernanceService& governance, Clock& clock,
                   RandomSource& random);

  // A project by slug or id (the caller's default project when empty).
  Result<RetentionView> GetProjectRetention(const Caller& caller, const std::string& project);
  Result<RetentionView> SetProjectRetention(const Caller& caller, const std::string& project,
                                            const RetentionSettings& settings);
  // A task by id.
  Result<RetentionView> GetTaskRetention(const Caller& caller, const std::string& task_id);
  Result<RetentionView> SetTaskRetention(const Caller& caller, const std::string& task_id,
                                         const RetentionSettings& settings);

 private:
  // Resolves and authorizes the project (and the task in it) for `action`.
  Result<std::string> ProjectFor(const Caller& caller, const std::string& project, Action action,
                                 std::string_view target);
  Result<std::string> ProjectOfTask(const Caller& caller, const std::string& task_id,
                                    Action action, std::string_view target);
  Result<RetentionView> View(const std::string& project_id, const std::string& task_id);
  Result<RetentionView> Set(const Caller& caller, const std::string& project_id,
                            const std::string& task_id, const RetentionSettings& settings);

  Store& store_;
  GovernanceService& governance_;
  Clock& clock_;
  RandomSource& random_;
  std::mutex random_mu_;
};

}  // namespace ql
