#pragma once

// Internal to the PostgreSQL adapter: the approval primitives (core/approval_store.h) over one
// transaction of the runtime pool. Every decider locks the request row (FOR UPDATE) after the
// shared governance lock (pg_governance.h), so two decisions on one request, an approval and
// the expiry sweeper, or an approval and a revoke or archive, commit in one serial order. The
// clock of requests, decisions and expiry is the database's.

#include <functional>
#include <string_view>

#include "ql/core/approval_store.h"
#include "ql/storage/postgres/pg_client.h"

namespace ql::pg {

// Runs approval transactions on the runtime pool (reads READ ONLY).
class PgApprovalRunner final : public ApprovalTxRunner {
 public:
  explicit PgApprovalRunner(Pool& runtime) : runtime_(runtime) {}
  Status Run(ApprovalTxKind kind, std::string_view operation,
             const std::function<Status(ApprovalTx&)>& body) override;

 private:
  Pool& runtime_;
};

}  // namespace ql::pg
