#pragma once

// The row-lease schedule repository of the cluster scheduler (DESIGN §5.2) over the runtime
// pool: claims with FOR UPDATE SKIP LOCKED and one database-clock reading, admissions in one
// SERIALIZABLE transaction under the full four-part fence.

#include <functional>
#include <string_view>
#include <vector>

#include "ql/core/ports.h"
#include "ql/core/status.h"
#include "ql/storage/postgres/pg_client.h"

namespace ql {

class PostgresClusterSchedules final : public ClusterScheduleRepository {
 public:
  // `pool` is the runtime role's pool; it must outlive this object.
  explicit PostgresClusterSchedules(pg::Pool& pool) : pool_(pool) {}

  Result<std::vector<ScheduleClaim>> ClaimDueSchedules(const ClaimRequest& request) override;
  Result<AdvanceOutcome> CommitClaimDecision(const ClaimDecision& decision) override;
  Result<std::optional<int64_t>> MsUntilNextDue() override;

  // Tests only: called inside the admission transaction after each write step ("run", then
  // "schedule"); a non-ok return aborts the transaction there, as a failed write would.
  using WriteFault = std::function<Status(std::string_view step)>;
  void SetWriteFaultForTesting(WriteFault fault) { write_fault_ = std::move(fault); }

 private:
  pg::Pool& pool_;
  WriteFault write_fault_;
};

}  // namespace ql
