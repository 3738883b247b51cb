#pragma once

// The port of worker placement (placement.h): pools, their grants to projects, the workers as
// an operator sees them, drains, and why a queued remote run waits. Only the cluster's store
// has remote workers; ql-local has none of this.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ql/core/governance.h"
#include "ql/core/governance_ports.h"
#include "ql/core/placement.h"
#include "ql/core/ports.h"
#include "ql/core/status.h"
#include "ql/core/worker_ports.h"

namespace ql {

struct PoolGrantRecord {
  std::string pool;
  std::string project_id;
  std::optional<int64_t> max_running;  // live leases of the project in the pool
  int64_t weight = 1;                  // its share when projects take turns
  std::string created_by;
  int64_t created_at_ms = 0;
  int64_t updated_at_ms = 0;
};

struct PoolRecord {
  std::string name;
  bool serves_all_projects = false;
  std::optional<int64_t> max_running;  // live leases in the pool
  int64_t version = 0;
  std::vector<PoolGrantRecord> grants;  // by project id
  int64_t live_workers = 0;             // active sessions not expired by the store's clock
  int64_t running = 0;                  // live leases in the pool
};

struct WorkerRecord {
  std::string id;  // the credential's id
  std::string name;
  std::string pool = std::string(kDefaultPool);  // its credential's: where its sessions register
  int64_t created_at_ms = 0;
  std::optional<int64_t> revoked_at_ms;
  std::optional<int64_t> drained_at_ms;        // an operator's drain
  std::optional<WorkerSessionRecord> session;  // the newest session, if it ever registered
  bool live = false;  // the session is active and not expired by the store's clock
  std::vector<std::string> running_run_ids;  // the runs its live leases hold
};

// Why a queued remote run has not been granted (empty reason: it waits for a free slot only).
struct WaitingReason {
  std::string run_id;
  std::string reason;  // waiting_for_worker | "" (an eligible worker exists)
  Placement placement;
  std::string detail;  // what is missing, for people
};

// How many queued remote runs have no eligible live worker, per pool.
struct WaitingCount {
  std::string pool;
  int64_t runs = 0;
};

struct GrantPoolCommand {
  std::string pool;
  std::string project_id;
  std::optional<int64_t> max_running;
  int64_t weight = 1;
  Actor actor;
  std::optional<PolicyFence> fence;  // installation-wide; absent: the system
  int64_t now_ms = 0;
};

struct RevokePoolCommand {
  std::string pool;
  std::string project_id;
  Actor actor;
  std::optional<PolicyFence> fence;
  int64_t now_ms = 0;
};

struct SetPoolCommand {
  std::string pool;
  std::optional<bool> serves_all_projects;
  std::optional<std::optional<int64_t>> max_running;  // set, or cleared with an inner nullopt
  Actor actor;
  std::optional<PolicyFence> fence;
  int64_t now_ms = 0;
};

struct DrainWorkerCommand {
  std::string worker;  // name or id
  bool drain = true;   // false: resume
  Actor actor;
  std::optional<PolicyFence> fence;
  int64_t now_ms = 0;
};

class PlacementRepository {
 public:
  virtual ~PlacementRepository() = default;
  virtual Result<std::vector<PoolRecord>> ListPools() = 0;
  // NotFound `pool_not_found`.
  virtual Result<PoolRecord> GetPool(const std::string& name) = 0;
  // Grants (or changes the limit and weight of) the pool to a project, creating the pool
  // (serving only its grants) when it has no row. Audited as `pool.grant`. NotFound
  // `project_not_found`; Conflict `project_archived`.
  virtual Result<PoolGrantRecord> GrantPool(const GrantPoolCommand& cmd) = 0;
  // Removes a grant: from the next grant on, the pool's workers get none of the project's runs
  // (leases granted before finish). Audited as `pool.revoke`. NotFound `pool_grant_not_found`.
  virtual Status RevokePool(const RevokePoolCommand& cmd) = 0;
  // Creates or changes a pool. Audited as `pool.set`.
  virtual Result<PoolRecord> SetPool(const SetPoolCommand& cmd) = 0;
  virtual Result<std::vector<WorkerRecord>> ListWorkers() = 0;
  // NotFound `worker_not_found` (by name or id).
  virtual Result<WorkerRecord> GetWorker(const std::string& name_or_id) = 0;
  // Drains (no new runs for any session of the worker until resumed) or resumes a worker.
  // Audited as `worker.drain` / `worker.resume`.
  virtual Result<WorkerRecord> DrainWorker(const DrainWorkerCommand& cmd) = 0;
  // For each of `run_ids` that is queued for a remote worker: whether a live, undrained worker
  // of its pool with its labels exists and the pool serves its project.
  virtual Result<std::vector<WaitingReason>> ExplainWaiting(
      const std::vector<std::string>& run_ids) = 0;
  // Queued remote runs with no eligible live worker, per pool (for the metric).
  virtual Result<std::vector<WaitingCount>> CountWaiting() = 0;
};

}  // namespace ql
