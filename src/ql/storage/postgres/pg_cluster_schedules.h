#pragma once

// The row-lease schedule repository of the cluster scheduler (DESIGN §5.2) over the runtime
// pool: claims with FOR UPDATE SKIP LOCKED and one database-clock reading, admissions in one
// transaction under the full four-part fence, whose claim expiry is read again right before
// COMMIT. An admission transaction may sit idle only until its earliest claim expiry (at least
// 1 s after locking, at most the session's bound), so a frozen holder loses its row locks about
// when its claims expire and another replica takes the rows over.

#include <atomic>
#include <functional>
#include <string_view>
#include <vector>

#include "ql/core/next_fire_gate.h"
#include "ql/core/ports.h"
#include "ql/core/status.h"
#include "ql/storage/postgres/pg_client.h"

namespace ql {

// How an admission transaction is isolated. SERIALIZABLE is the default of the design: every
// re-verification is also protected by serializable snapshot isolation. READ COMMITTED keeps
// the same re-verifications, made explicit: the schedule row is locked FOR UPDATE (a trigger
// republish rewrites that row, so it waits for the lock), the full fence is re-checked under the
// lock, the definitions are re-read after it, and the final UPDATE is conditional on the whole
// fence; a task republish or project archive that commits meanwhile only reads rows the
// admission never writes, so the admission is ordered before it. It avoids the false conflicts
// SERIALIZABLE raises between replicas whose schedule rows share index pages.
enum class AdmissionIsolation { kSerializable, kReadCommitted };

class PostgresClusterSchedules final : public ClusterScheduleRepository {
 public:
  // `pool` is the runtime role's pool; it must outlive this object.
  explicit PostgresClusterSchedules(
      pg::Pool& pool, AdmissionIsolation isolation = AdmissionIsolation::kSerializable)
      : pool_(pool), isolation_(isolation) {}

  Result<std::vector<ScheduleClaim>> ClaimDueSchedules(const ClaimRequest& request) override;
  Result<AdvanceOutcome> CommitClaimDecision(const ClaimDecision& decision) override;
  Result<std::vector<ClaimCommitResult>> CommitClaimDecisions(
      const std::vector<ClaimDecision>& decisions) override;
  Result<std::optional<int64_t>> MsUntilNextDue() override;
  AdmissionRetryStats TakeAdmissionRetryStats() override;
  int64_t TakeNextFireMismatches() override;

  // The claim statement for `limit` rows ($1 owner, $2 token, $3 lease ms, $4 executor type),
  // for benchmarks that show its plan.
  static std::string ClaimStatement(int limit);

  // Tests only: called inside the admission transaction after each write step ("schedule",
  // then "run" when the batch admits runs; the last one right before the claims' expiry is read
  // again for COMMIT); a non-ok return aborts the transaction there, as a failed write would.
  // A call that blocks stands for a holder frozen inside its admission.
  // `tx` is the admission's transaction (a fault may run a statement in it, such as pg_sleep).
  using WriteFault = std::function<Status(std::string_view step, pg::Tx& tx)>;
  void SetWriteFaultForTesting(WriteFault fault) { write_fault_ = std::move(fault); }

 private:
  pg::Pool& pool_;
  AdmissionIsolation isolation_;
  WriteFault write_fault_;
  // Recomputes an admission's cursor from the stored trigger revision and counts refusals.
  NextFireGate next_fire_gate_;
  std::atomic<int64_t> retries_{0};
  std::atomic<int64_t> retries_exhausted_{0};
};

}  // namespace ql
