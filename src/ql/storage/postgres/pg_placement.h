#pragma once

// Worker placement in PostgreSQL (core/placement_ports.h). Pools, grants and drains are written
// as the admin role, each write authorized by the installation fence and audited in its own
// transaction; worker names are read as the admin role (the runtime role never reads
// credentials), sessions, leases and queued runs as the runtime role.

#include <mutex>

#include "ql/core/clock.h"
#include "ql/core/placement_ports.h"
#include "ql/core/ports.h"
#include "ql/storage/postgres/pg_client.h"

namespace ql::pg {

class PostgresPlacement final : public PlacementRepository {
 public:
  // Writes and worker reads fail with Unavailable `admin_pool_missing` without an admin pool.
  // `random` makes audit ids; it must outlive this.
  PostgresPlacement(Pool& runtime, Pool* admin, RandomSource& random)
      : runtime_(runtime), admin_(admin), random_(random) {}

  Result<std::vector<PoolRecord>> ListPools() override;
  Result<PoolRecord> GetPool(const std::string& name) override;
  Result<PoolGrantRecord> GrantPool(const GrantPoolCommand& cmd) override;
  Status RevokePool(const RevokePoolCommand& cmd) override;
  Result<PoolRecord> SetPool(const SetPoolCommand& cmd) override;
  Result<std::vector<WorkerRecord>> ListWorkers() override;
  Result<WorkerRecord> GetWorker(const std::string& name_or_id) override;
  Result<WorkerRecord> DrainWorker(const DrainWorkerCommand& cmd) override;
  Result<std::vector<WaitingReason>> ExplainWaiting(
      const std::vector<std::string>& run_ids) override;
  Result<std::vector<WaitingCount>> CountWaiting() override;

 private:
  Result<Pool*> Admin();
  Result<std::vector<PoolRecord>> ReadPools(const std::optional<std::string>& name);
  Result<std::vector<WorkerRecord>> ReadWorkers(const std::optional<std::string>& name_or_id);
  std::string NewAuditId(int64_t now_ms);

  Pool& runtime_;
  Pool* admin_;
  RandomSource& random_;
  std::mutex random_mu_;
};

}  // namespace ql::pg
