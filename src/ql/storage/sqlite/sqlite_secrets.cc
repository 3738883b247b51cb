#include "ql/storage/sqlite/sqlite_secrets.h"

#include <memory>

#include "ql/storage/sqlite/sqlite_db.h"
#include "ql/storage/sqlite/sqlite_governance.h"

namespace ql::sqlite {
namespace {

constexpr char kSecretColumns[] =
    "SELECT project_id, name, current_version, status, created_at_ms, updated_at_ms, "
    "deleted_at_ms FROM secrets ";

constexpr char kVersionColumns[] =
    "SELECT project_id, name, version, key_id, wrapped_key, sealed_value, created_by, "
    "created_at_ms, shredded_at_ms FROM secret_versions ";

SecretRecord ReadSecret(const Stmt& s) {
  return SecretRecord{s.Text(0), s.Text(1), s.Int(2), s.Text(3), s.Int(4), s.Int(5), s.OptInt(6)};
}

SecretVersionRecord ReadVersion(const Stmt& s) {
  SecretVersionRecord v;
  v.project_id = s.Text(0);
  v.name = s.Text(1);
  v.version = s.Int(2);
  v.sealed = SealedSecretValue{s.OptText(3).value_or(""), s.OptText(4).value_or(""), s.Text(5)};
  v.created_by = s.Text(6);
  v.created_at_ms = s.Int(7);
  v.shredded_at_ms = s.OptInt(8);
  return v;
}

class SqliteSecretTx final : public SecretTx {
 public:
  explicit SqliteSecretTx(Db& db) : db_(db) {}

  Result<std::optional<SecretRecord>> LoadSecret(const std::string& project_id,
                                                 const std::string& name) override {
    static const std::string kSql =
        std::string(kSecretColumns) + "WHERE project_id = ?1 AND name = ?2";
    QL_ASSIGN_OR_RETURN(Stmt s, db_.Prepare(kSql));
    s.BindAll(project_id, name);
    std::optional<SecretRecord> out;
    QL_RETURN_IF_ERROR(EachRow(s, [&](const Stmt& r) { out = ReadSecret(r); }));
    return out;
  }

  Result<std::vector<SecretRecord>> ListSecrets(const std::string& project_id) override {
    static const std::string kSql =
        std::string(kSecretColumns) + "WHERE project_id = ?1 ORDER BY name";
    QL_ASSIGN_OR_RETURN(Stmt s, db_.Prepare(kSql));
    s.BindAll(project_id);
    std::vector<SecretRecord> out;
    QL_RETURN_IF_ERROR(EachRow(s, [&](const Stmt& r) { out.push_back(ReadSecret(r)); }));
    return out;
  }

  Status SaveSecret(const SecretRecord& h, bool insert) override {
    QL_ASSIGN_OR_RETURN(
        Stmt s, db_.Prepare(insert ? "INSERT INTO secrets (project_id, name, current_version, "
                                     "status, created_at_ms, updated_at_ms, deleted_at_ms) "
                                     "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"
                                   : "UPDATE secrets SET current_version = ?3, status = ?4, "
                                     "updated_at_ms = ?6, deleted_at_ms = ?7 "
                                     "WHERE project_id = ?1 AND name = ?2"));
    // Both forms number their parameters alike; the UPDATE leaves ?5 (created_at_ms) unused.
    s.BindAll(h.project_id, h.name, h.current_version, h.status, h.created_at_ms, h.updated_at_ms,
              h.deleted_at_ms);
    return s.Run();
  }

  Result<std::optional<SecretVersionRecord>> LoadVersion(const std::string& project_id,
                                                         const std::string& name,
                                                         int64_t version) override {
    static const std::string kSql =
        std::string(kVersionColumns) + "WHERE project_id = ?1 AND name = ?2 AND version = ?3";
    QL_ASSIGN_OR_RETURN(Stmt s, db_.Prepare(kSql));
    s.BindAll(project_id, name, version);
    std::optional<SecretVersionRecord> out;
    QL_RETURN_IF_ERROR(EachRow(s, [&](const Stmt& r) { out = ReadVersion(r); }));
    return out;
  }

  Status InsertVersion(const SecretVersionRecord& v) override {
    QL_ASSIGN_OR_RETURN(Stmt s,
                        db_.Prepare("INSERT INTO secret_versions (project_id, name, version, "
                                    "key_id, wrapped_key, sealed_value, created_by, created_at_ms) "
                                    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"));
    s.BindAll(v.project_id, v.name, v.version, v.sealed.key_id, v.sealed.wrapped_key,
              v.sealed.sealed_value, v.created_by, v.created_at_ms);
    return s.Run();
  }

  Result<int64_t> ShredVersions(const std::string& project_id, const std::string& name,
                                int64_t now_ms) override {
    QL_ASSIGN_OR_RETURN(Stmt s, db_.Prepare("UPDATE secret_versions SET key_id = NULL, "
                                            "wrapped_key = NULL, shredded_at_ms = ?3 "
                                            "WHERE project_id = ?1 AND name = ?2 "
                                            "AND key_id IS NOT NULL"));
    s.BindAll(project_id, name, now_ms);
    QL_RETURN_IF_ERROR(s.Run());
    return db_.Changes();
  }

  Result<std::vector<SecretVersionRecord>> ListLiveVersions(
      const std::optional<SecretVersionKey>& after, int limit) override {
    static const std::string kSql =
        std::string(kVersionColumns) +
        "WHERE key_id IS NOT NULL AND (?1 IS NULL OR (project_id, name, version) > (?1, ?2, ?3)) "
        "ORDER BY project_id, name, version LIMIT ?4";
    QL_ASSIGN_OR_RETURN(Stmt s, db_.Prepare(kSql));
    if (after) {
      s.BindAll(after->project_id, after->name, after->version, limit);
    } else {
      s.BindAll(std::nullopt, std::nullopt, std::nullopt, limit);
    }
    std::vector<SecretVersionRecord> out;
    QL_RETURN_IF_ERROR(EachRow(s, [&](const Stmt& r) { out.push_back(ReadVersion(r)); }));
    return out;
  }

  Result<bool> ReplaceWrappedKey(const RewrapSecretCommand& c) override {
    QL_ASSIGN_OR_RETURN(Stmt s, db_.Prepare("UPDATE secret_versions SET key_id = ?1, "
                                            "wrapped_key = ?2 WHERE project_id = ?3 AND "
                                            "name = ?4 AND version = ?5 AND key_id = ?6 AND "
                                            "wrapped_key = ?7"));
    s.BindAll(c.new_key_id, c.new_wrapped_key, c.version.project_id, c.version.name,
              c.version.version, c.old_key_id, c.old_wrapped_key);
    QL_RETURN_IF_ERROR(s.Run());
    return db_.Changes() == 1;
  }

 private:
  Db& db_;
};

}  // namespace

Status SqliteSecretRunner::Run(SecretTxKind kind, std::string_view operation,
                               const std::function<Status(GovernanceTx&, SecretTx&)>& body) {
  const TxMode mode = kind == SecretTxKind::kRead ? TxMode::kRead : TxMode::kWrite;
  return db_.Transact(mode, operation, [&](Tx&) {
    std::unique_ptr<GovernanceTx> governance = NewGovernanceTx(db_);
    SqliteSecretTx secrets(db_);
    return body(*governance, secrets);
  });
}

}  // namespace ql::sqlite
