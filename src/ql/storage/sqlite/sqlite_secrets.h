#pragma once

// Internal to the SQLite adapter: the secrets primitives (core/secret_store.h) over one
// connection, and the runner that gives them a transaction together with the governance
// primitives of the same transaction (the policy fence and the audit).

#include "ql/core/secret_store.h"

namespace ql::sqlite {

class Db;

// Runs reads as BEGIN and writes as BEGIN IMMEDIATE transactions of `db`.
class SqliteSecretRunner final : public SecretTxRunner {
 public:
  explicit SqliteSecretRunner(Db& db) : db_(db) {}
  Status Run(SecretTxKind kind, std::string_view operation,
             const std::function<Status(GovernanceTx&, SecretTx&)>& body) override;

 private:
  Db& db_;
};

}  // namespace ql::sqlite
