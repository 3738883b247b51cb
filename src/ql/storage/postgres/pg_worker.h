#pragma once

// Remote workers on PostgreSQL (DESIGN §6, docs/worker-protocol.md): sessions through the
// worker-ingress role, run leases through the runtime role. Lease times come from
// clock_timestamp() read after the rows are locked. Lock order everywhere: run, lease, session.

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ql/core/ports.h"
#include "ql/core/status.h"
#include "ql/core/worker_ports.h"
#include "ql/storage/postgres/pg_client.h"

namespace ql::pg {

// The columns of a worker session row, in the order ReadSession reads them from `first` on.
extern const char kSessionColumns[];
WorkerSessionRecord ReadSession(const Rows& r, int i, int first);
// Labels stored as a JSON object (labels::text, required_labels::text); anything else is none.
std::map<std::string, std::string> LabelsFromText(const std::string& text);

// The lease row a fence was verified against.
struct VerifiedLease {
  std::string attempt_id;
  std::string run_id;
  int64_t lease_version = 0;
  int64_t now_ms = 0;  // the database clock, read after the lease and session were locked
};

// Locks the lease of `fence.offer_id` (FOR UPDATE) and its session (FOR KEY SHARE: a concurrent
// registration's FOR UPDATE cannot fence it before this transaction ends, while grants and
// heartbeats of the same session, FOR NO KEY UPDATE, neither wait for it nor hold it up) and
// checks the full fence (see LeaseFence). The caller locks the run first when it will change it.
Result<VerifiedLease> VerifyLease(Tx& tx, const LeaseFence& fence);
// The statements VerifyLease runs when the fence holds, in its order, for Tx::Prefetch.
std::vector<Statement> VerifyLeaseStatements(const LeaseFence& fence);

// Releases the granted lease of `attempt_id`, if any (the attempt ended).
Status ReleaseLease(Tx& tx, const std::string& attempt_id, int64_t now_ms);
// The statement ReleaseLease runs, for Tx::Prefetch.
Statement ReleaseLeaseStatement(const std::string& attempt_id, int64_t now_ms);

// Worker credentials and sessions; `ingress` connects as ql3_worker_ingress.
class PostgresWorkerSessions final : public WorkerSessionRepository {
 public:
  explicit PostgresWorkerSessions(Pool& ingress) : pool_(ingress) {}
  Result<std::string> AuthenticateWorker(const std::string& token_digest) override;
  Result<WorkerSessionRecord> RegisterSession(const RegisterSessionCommand& command) override;
  Result<WorkerSessionRecord> Heartbeat(const std::string& worker_id, const std::string& session_id,
                                        int64_t generation, int available_slots,
                                        int64_t ttl_ms) override;
  Result<WorkerSessionRecord> SetSessionStatus(const std::string& worker_id,
                                               const std::string& session_id, int64_t generation,
                                               const std::string& status) override;

 private:
  Pool& pool_;
};

// Run leases; `runtime` connects as ql3_runtime.
class PostgresRunLeases final : public RunLeaseRepository {
 public:
  explicit PostgresRunLeases(Pool& runtime) : pool_(runtime) {}
  Result<LeaseGrant> GrantLeases(const PullCommand& command) override;
  Result<LeaseRenewal> RenewLease(const LeaseFence& fence, int64_t ttl_ms) override;
  Result<LeaseLogAppend> AppendLeaseLog(const LeaseFence& fence, int64_t offset,
                                        std::string_view data, int64_t cap_bytes,
                                        int64_t now_ms) override;
  Result<LeaseState> GetLeaseState(const std::string& offer_id) override;
  Result<std::vector<std::string>> ListCancelledOffers(const std::string& worker_id,
                                                       const std::string& session_id) override;
  Result<std::vector<OverdueRun>> ListOverdueRuns(int64_t grace_ms, int limit) override;

 private:
  Pool& pool_;
};

}  // namespace ql::pg
