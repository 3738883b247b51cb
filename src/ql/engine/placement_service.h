#pragma once

// Worker pools, their grants to projects, workers and drains for people (DESIGN §6.6): the one
// place that decides who may change placement (an installation admin) and resolves projects by
// slug or id, then hands the decision to the store, which re-checks it inside the write's own
// transaction. Only ql-cluster has one; ql-local runs every task itself.

#include <optional>
#include <string>
#include <vector>

#include "ql/core/clock.h"
#include "ql/core/placement_ports.h"
#include "ql/core/status.h"
#include "ql/engine/governance_service.h"

namespace ql {

class PlacementService {
 public:
  // Everything must outlive the service. Thread-safe.
  PlacementService(PlacementRepository& repo, GovernanceService& governance, Clock& clock)
      : repo_(repo), governance_(governance), clock_(clock) {}

  Result<std::vector<PoolRecord>> ListPools(const Caller& caller);
  Result<PoolRecord> GetPool(const Caller& caller, const std::string& pool);
  // `project` by slug or id. InvalidArgument `invalid_pool`, `invalid_max_running`
  // (1..kMaxPoolRunning), `invalid_weight` (1..kMaxPoolGrantWeight).
  Result<PoolGrantRecord> Grant(const Caller& caller, const std::string& pool,
                                const std::string& project, std::optional<int64_t> max_running,
                                int64_t weight);
  Status Revoke(const Caller& caller, const std::string& pool, const std::string& project);
  Result<PoolRecord> SetPool(const Caller& caller, const std::string& pool,
                             std::optional<bool> serves_all_projects,
                             std::optional<std::optional<int64_t>> max_running);
  Result<std::vector<WorkerRecord>> ListWorkers(const Caller& caller);
  Result<WorkerRecord> GetWorker(const Caller& caller, const std::string& worker);
  Result<WorkerRecord> Drain(const Caller& caller, const std::string& worker, bool drain);
  // Why a queued remote run waits (nullopt: it is not one, or an eligible worker exists). The
  // caller has already been allowed to read the run.
  Result<std::optional<WaitingReason>> Waiting(const std::string& run_id);
  Result<std::vector<WaitingCount>> CountWaiting() { return repo_.CountWaiting(); }

 private:
  Status Allow(const Caller& caller, std::string_view target);
  std::optional<PolicyFence> Fence(const Caller& caller) const;

  PlacementRepository& repo_;
  GovernanceService& governance_;
  Clock& clock_;
};

}  // namespace ql
