#pragma once

// Internal to the PostgreSQL adapter: the governance primitives (core/governance_store.h) over
// one transaction, and the runner that picks the role for each kind of governance transaction.
//
// Serialisation with governance writers: every governance write takes the exclusive
// transaction-level advisory lock kGovernanceLockKey first, and every fenced write (publish, run
// creation, cancel, admission) takes it shared before it reads the policy (EnterFence). Under READ
// COMMITTED each later statement reads a fresh snapshot, so a fenced write either sees a revoke,
// a disable or an archive that committed before it, or holds that writer off until it commits:
// the commit order decides, as DESIGN §9 asks. The runtime role cannot lock project rows (that
// needs UPDATE), which is why a lock that needs no table privilege serves here.

#include <memory>
#include <string>

#include "ql/core/governance_store.h"
#include "ql/storage/postgres/pg_client.h"

namespace ql::pg {

// The advisory lock key of governance ("qlgov" in ASCII).
inline constexpr int64_t kGovernanceLockKey = 0x716c676f76;

// Primitives valid inside `tx`.
std::unique_ptr<GovernanceTx> NewGovernanceTx(Tx& tx);

// Reads, authentication, token use and audit appends run on the runtime pool; governance writes
// and audit reads on the admin pool (Unavailable `admin_pool_missing` without one).
class PgGovernanceRunner final : public GovernanceTxRunner {
 public:
  PgGovernanceRunner(Pool& runtime, Pool* admin) : runtime_(runtime), admin_(admin) {}
  Status Run(GovernanceTxKind kind, std::string_view operation,
             const std::function<Status(GovernanceTx&)>& body) override;

 private:
  Pool& runtime_;
  Pool* admin_;
};

}  // namespace ql::pg
