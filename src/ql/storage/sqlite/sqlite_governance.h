#pragma once

// Internal to the SQLite adapter: the governance primitives (core/governance_store.h) over one
// connection, and the runner that gives them a transaction. SqliteStore uses them for its
// GovernanceRepository and for the policy fence inside its own write transactions.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ql/core/governance_store.h"

namespace ql::sqlite {

class Db;

// Primitives valid inside a transaction of `db` (the caller holds it).
std::unique_ptr<GovernanceTx> NewGovernanceTx(Db& db);

// Runs every kind of governance transaction as one BEGIN IMMEDIATE (writes) or BEGIN (reads)
// transaction of `db`.
class SqliteGovernanceRunner final : public GovernanceTxRunner {
 public:
  explicit SqliteGovernanceRunner(Db& db) : db_(db) {}
  Status Run(GovernanceTxKind kind, std::string_view operation,
             const std::function<Status(GovernanceTx&)>& body) override;

 private:
  Db& db_;
};

}  // namespace ql::sqlite
