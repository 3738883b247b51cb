#pragma once

// Internal to the SQLite adapter: the approval primitives (core/approval_store.h) over one
// connection, and the runner that gives them a transaction. SqliteStore serves its
// ApprovalRepository through them.

#include <functional>
#include <string_view>

#include "ql/core/approval_store.h"

namespace ql::sqlite {

class Db;

// Runs every approval transaction as one BEGIN IMMEDIATE (writes) or BEGIN (reads) transaction
// of `db`; SQLite transactions are serial, so row locks are implicit.
class SqliteApprovalRunner final : public ApprovalTxRunner {
 public:
  explicit SqliteApprovalRunner(Db& db) : db_(db) {}
  Status Run(ApprovalTxKind kind, std::string_view operation,
             const std::function<Status(ApprovalTx&)>& body) override;

 private:
  Db& db_;
};

}  // namespace ql::sqlite
