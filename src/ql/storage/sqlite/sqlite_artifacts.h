#pragma once

// Internal to the SQLite adapter: the artifact primitives (core/artifact_store.h) over one
// connection, and the runner that gives them a transaction together with the governance
// primitives of the same transaction (the policy fence and the audit).

#include "ql/core/artifact_store.h"

namespace ql::sqlite {

class Db;

// Runs reads as BEGIN and writes as BEGIN IMMEDIATE transactions of `db`.
class SqliteArtifactRunner final : public ArtifactTxRunner {
 public:
  explicit SqliteArtifactRunner(Db& db) : db_(db) {}
  Status Run(ArtifactTxKind kind, std::string_view operation,
             const std::function<Status(GovernanceTx&, ArtifactTx&)>& body) override;

 private:
  Db& db_;
};

}  // namespace ql::sqlite
