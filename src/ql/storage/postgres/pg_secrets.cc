#include "ql/storage/postgres/pg_secrets.h"

#include <memory>
#include <vector>

#include "ql/storage/postgres/pg_governance.h"
#include "ql/storage/postgres/pg_store_rows.h"

namespace ql::pg {
namespace {

constexpr char kSecretColumns[] =
    "SELECT project_id, name, current_version, status, created_at_ms, updated_at_ms, "
    "deleted_at_ms FROM ql3.secrets ";

constexpr char kVersionColumns[] =
    "SELECT project_id, name, version, key_id, wrapped_key, sealed_value, created_by, "
    "created_at_ms, shredded_at_ms FROM ql3.secret_versions ";

std::vector<SecretRecord> ReadSecrets(const Rows& r) {
  std::vector<SecretRecord> out;
  for (int i = 0; i < r.size(); ++i) {
    out.push_back(SecretRecord{r.Text(i, 0), r.Text(i, 1), r.Int(i, 2), r.Text(i, 3),
                               r.Int(i, 4), r.Int(i, 5), r.OptInt(i, 6)});
  }
  return out;
}

std::vector<SecretVersionRecord> ReadVersions(const Rows& r) {
  std::vector<SecretVersionRecord> out;
  for (int i = 0; i < r.size(); ++i) {
    SecretVersionRecord v;
    v.project_id = r.Text(i, 0);
    v.name = r.Text(i, 1);
    v.version = r.Int(i, 2);
    v.sealed = SealedSecretValue{r.OptText(i, 3).value_or(""), r.OptText(i, 4).value_or(""),
                                 r.Text(i, 5)};
    v.created_by = r.Text(i, 6);
    v.created_at_ms = r.Int(i, 7);
    v.shredded_at_ms = r.OptInt(i, 8);
    out.push_back(std::move(v));
  }
  return out;
}

class PgSecretTx final : public SecretTx {
 public:
  explicit PgSecretTx(Tx& tx) : tx_(tx) {}

  Result<std::optional<SecretRecord>> LoadSecret(const std::string& project_id,
                                                 const std::string& name) override {
    static const std::string kSql =
        std::string(kSecretColumns) + "WHERE project_id = $1 AND name = $2";
    QL_ASSIGN_OR_RETURN(auto rows, Query(tx_, kSql, {P(project_id), P(name)}, ReadSecrets));
    return First(std::move(rows));
  }

  Result<std::vector<SecretRecord>> ListSecrets(const std::string& project_id) override {
    static const std::string kSql =
        std::string(kSecretColumns) + "WHERE project_id = $1 ORDER BY name COLLATE \"C\"";
    return Query(tx_, kSql, {P(project_id)}, ReadSecrets);
  }

  Status SaveSecret(const SecretRecord& h, bool insert) override {
    if (insert) {
      return tx_
          .Exec("INSERT INTO ql3.secrets (project_id, name, current_version, status, "
                "created_at_ms, updated_at_ms, deleted_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7)",
                {P(h.project_id), P(h.name), P(h.current_version), P(h.status),
                 P(h.created_at_ms), P(h.updated_at_ms), P(h.deleted_at_ms)})
          .status();
    }
    return tx_
        .Exec("UPDATE ql3.secrets SET current_version = $3, status = $4, updated_at_ms = $5, "
              "deleted_at_ms = $6 WHERE project_id = $1 AND name = $2",
              {P(h.project_id), P(h.name), P(h.current_version), P(h.status), P(h.updated_at_ms),
               P(h.deleted_at_ms)})
        .status();
  }

  Result<std::optional<SecretVersionRecord>> LoadVersion(const std::string& project_id,
                                                         const std::string& name,
                                                         int64_t version) override {
    static const std::string kSql =
        std::string(kVersionColumns) + "WHERE project_id = $1 AND name = $2 AND version = $3";
    QL_ASSIGN_OR_RETURN(auto rows,
                        Query(tx_, kSql, {P(project_id), P(name), P(version)}, ReadVersions));
    return First(std::move(rows));
  }

  Status InsertVersion(const SecretVersionRecord& v) override {
    return tx_
        .Exec("INSERT INTO ql3.secret_versions (project_id, name, version, key_id, wrapped_key, "
              "sealed_value, created_by, created_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
              {P(v.project_id), P(v.name), P(v.version), P(v.sealed.key_id),
               P(v.sealed.wrapped_key), P(v.sealed.sealed_value), P(v.created_by),
               P(v.created_at_ms)})
        .status();
  }

  Result<int64_t> ShredVersions(const std::string& project_id, const std::string& name,
                                int64_t now_ms) override {
    QL_ASSIGN_OR_RETURN(
        Rows rows, tx_.Exec("UPDATE ql3.secret_versions SET key_id = NULL, wrapped_key = NULL, "
                            "shredded_at_ms = $3 WHERE project_id = $1 AND name = $2 "
                            "AND key_id IS NOT NULL",
                            {P(project_id), P(name), P(now_ms)}));
    return rows.affected();
  }

  Result<std::vector<SecretVersionRecord>> ListLiveVersions(
      const std::optional<SecretVersionKey>& after, int limit) override {
    static const std::string kSql =
        std::string(kVersionColumns) +
        "WHERE key_id IS NOT NULL AND ($1::text IS NULL OR (project_id, name COLLATE \"C\", "
        "version) > ($1, $2::text COLLATE \"C\", $3)) "
        "ORDER BY project_id, name COLLATE \"C\", version LIMIT $4";
    std::vector<Param> params;
    if (after) {
      params = {P(after->project_id), P(after->name), P(after->version)};
    } else {
      params = {P(std::optional<std::string>()), P(std::optional<std::string>()),
                P(std::optional<int64_t>())};
    }
    params.push_back(P(static_cast<int64_t>(limit)));
    return Query(tx_, kSql, params, ReadVersions);
  }

  Result<bool> ReplaceWrappedKey(const RewrapSecretCommand& c) override {
    QL_ASSIGN_OR_RETURN(
        Rows rows,
        tx_.Exec("UPDATE ql3.secret_versions SET key_id = $1, wrapped_key = $2 "
                 "WHERE project_id = $3 AND name = $4 AND version = $5 AND key_id = $6 "
                 "AND wrapped_key = $7",
                 {P(c.new_key_id), P(c.new_wrapped_key), P(c.version.project_id),
                  P(c.version.name), P(c.version.version), P(c.old_key_id),
                  P(c.old_wrapped_key)}));
    return rows.affected() == 1;
  }

 private:
  Tx& tx_;
};

}  // namespace

Status PgSecretRunner::Run(SecretTxKind kind, std::string_view operation,
                           const std::function<Status(GovernanceTx&, SecretTx&)>& body) {
  const bool write = kind == SecretTxKind::kWrite;
  if (write && admin_ == nullptr) {
    return Unavailable("admin_pool_missing",
                       std::string(operation) +
                           " needs the admin database URL (--admin-database-url)");
  }
  TxOptions options;
  options.read_only = !write;
  Pool& pool = write ? *admin_ : runtime_;
  return pool.Transact(options, operation, [&](Tx& tx) {
    std::unique_ptr<GovernanceTx> governance = NewGovernanceTx(tx);
    PgSecretTx secrets(tx);
    return body(*governance, secrets);
  });
}

}  // namespace ql::pg
