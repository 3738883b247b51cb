#include "ql/engine/placement_service.h"

#include <utility>

namespace ql {

Status PlacementService::Allow(const Caller& caller, std::string_view target) {
  return governance_.Authorize(caller, "", Action::kManageWorkers, target);
}

std::optional<PolicyFence> PlacementService::Fence(const Caller& caller) const {
  if (caller.principal_id.empty()) return std::nullopt;
  return PolicyFence{caller.principal_id, RequiredRole(Action::kManageWorkers)};
}

namespace {

Status CheckPool(const std::string& pool) { return ValidatePoolName("invalid_pool", "pool", pool); }

Status CheckMaxRunning(const std::optional<int64_t>& max) {
  if (max.has_value() && (*max < 1 || *max > kMaxPoolRunning)) {
    return InvalidArgument(
        "invalid_max_running",
        "max_running " + std::to_string(*max) + " is not in 1.." + std::to_string(kMaxPoolRunning));
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<PoolRecord>> PlacementService::ListPools(const Caller& caller) {
  QL_RETURN_IF_ERROR(Allow(caller, "pools.list"));
  return repo_.ListPools();
}

Result<PoolRecord> PlacementService::GetPool(const Caller& caller, const std::string& pool) {
  QL_RETURN_IF_ERROR(Allow(caller, "pools.get"));
  QL_RETURN_IF_ERROR(CheckPool(pool));
  return repo_.GetPool(pool);
}

Result<PoolGrantRecord> PlacementService::Grant(const Caller& caller, const std::string& pool,
                                                const std::string& project,
                                                std::optional<int64_t> max_running,
                                                int64_t weight) {
  QL_RETURN_IF_ERROR(Allow(caller, "pools.grant"));
  QL_RETURN_IF_ERROR(CheckPool(pool));
  QL_RETURN_IF_ERROR(CheckMaxRunning(max_running));
  if (weight < 1 || weight > kMaxPoolGrantWeight) {
    return InvalidArgument("invalid_weight", "weight " + std::to_string(weight) + " is not in 1.." +
                                                 std::to_string(kMaxPoolGrantWeight));
  }
  QL_ASSIGN_OR_RETURN(ProjectRecord p, governance_.ResolveProject(project));
  GrantPoolCommand cmd;
  cmd.pool = pool;
  cmd.project_id = p.id;
  cmd.max_running = max_running;
  cmd.weight = weight;
  cmd.actor = Actor{caller.principal_id, caller.request_id};
  cmd.fence = Fence(caller);
  cmd.now_ms = clock_.NowMs();
  return repo_.GrantPool(cmd);
}

Status PlacementService::Revoke(const Caller& caller, const std::string& pool,
                                const std::string& project) {
  QL_RETURN_IF_ERROR(Allow(caller, "pools.revoke"));
  QL_RETURN_IF_ERROR(CheckPool(pool));
  QL_ASSIGN_OR_RETURN(ProjectRecord p, governance_.ResolveProject(project));
  RevokePoolCommand cmd;
  cmd.pool = pool;
  cmd.project_id = p.id;
  cmd.actor = Actor{caller.principal_id, caller.request_id};
  cmd.fence = Fence(caller);
  cmd.now_ms = clock_.NowMs();
  return repo_.RevokePool(cmd);
}

Result<PoolRecord> PlacementService::SetPool(const Caller& caller, const std::string& pool,
                                             std::optional<bool> serves_all_projects,
                                             std::optional<std::optional<int64_t>> max_running) {
  QL_RETURN_IF_ERROR(Allow(caller, "pools.set"));
  QL_RETURN_IF_ERROR(CheckPool(pool));
  if (max_running.has_value()) QL_RETURN_IF_ERROR(CheckMaxRunning(*max_running));
  if (!serves_all_projects.has_value() && !max_running.has_value()) {
    return InvalidArgument("invalid_argument",
                           "nothing to change: give serves_all_projects or max_running");
  }
  SetPoolCommand cmd;
  cmd.pool = pool;
  cmd.serves_all_projects = serves_all_projects;
  cmd.max_running = max_running;
  cmd.actor = Actor{caller.principal_id, caller.request_id};
  cmd.fence = Fence(caller);
  cmd.now_ms = clock_.NowMs();
  return repo_.SetPool(cmd);
}

Result<std::vector<WorkerRecord>> PlacementService::ListWorkers(const Caller& caller) {
  QL_RETURN_IF_ERROR(Allow(caller, "workers.list"));
  return repo_.ListWorkers();
}

Result<WorkerRecord> PlacementService::GetWorker(const Caller& caller, const std::string& worker) {
  QL_RETURN_IF_ERROR(Allow(caller, "workers.get"));
  return repo_.GetWorker(worker);
}

Result<WorkerRecord> PlacementService::Drain(const Caller& caller, const std::string& worker,
                                             bool drain) {
  QL_RETURN_IF_ERROR(Allow(caller, drain ? "workers.drain" : "workers.resume"));
  DrainWorkerCommand cmd;
  cmd.worker = worker;
  cmd.drain = drain;
  cmd.actor = Actor{caller.principal_id, caller.request_id};
  cmd.fence = Fence(caller);
  cmd.now_ms = clock_.NowMs();
  return repo_.DrainWorker(cmd);
}

Result<std::optional<WaitingReason>> PlacementService::Waiting(const std::string& run_id) {
  QL_ASSIGN_OR_RETURN(std::vector<WaitingReason> found, repo_.ExplainWaiting({run_id}));
  if (found.empty() || found.front().reason.empty()) return std::optional<WaitingReason>();
  return std::optional<WaitingReason>(std::move(found.front()));
}

}  // namespace ql
