#pragma once

// Recovery candidates of the cluster (runtime pool), with lease liveness by the database clock.

#include <string>
#include <vector>

#include "ql/core/ports.h"
#include "ql/storage/postgres/pg_client.h"

namespace ql {

class PostgresClusterRecovery final : public ClusterRecoveryRepository {
 public:
  explicit PostgresClusterRecovery(pg::Pool& pool) : pool_(pool) {}

  Result<std::vector<RecoveryCandidate>> ListRecoveryCandidates(
      const std::string& after_run_id, int limit,
      RecoveryScope scope = RecoveryScope::kAll) override;

 private:
  pg::Pool& pool_;
};

}  // namespace ql
