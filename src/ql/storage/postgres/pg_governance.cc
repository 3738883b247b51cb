#include "ql/storage/postgres/pg_governance.h"

#include <utility>
#include <vector>

#include "ql/storage/postgres/pg_store_rows.h"

namespace ql::pg {
namespace {

constexpr char kPrincipalColumns[] =
    "SELECT id, kind, name, status, version, created_at_ms, updated_at_ms FROM ql3.principals ";

PrincipalRecord ReadPrincipal(const Rows& r, int i) {
  return PrincipalRecord{r.Text(i, 0), r.Text(i, 1), r.Text(i, 2), r.Text(i, 3),
                         r.Int(i, 4),  r.Int(i, 5),  r.Int(i, 6)};
}

constexpr char kTokenColumns[] =
    "SELECT t.id, t.principal_id, t.created_at_ms, t.expires_at_ms, t.revoked_at_ms, "
    "u.last_used_at_ms, t.kind, t.idle_timeout_ms, t.label, t.restriction FROM ql3.api_tokens t "
    "LEFT JOIN ql3.api_token_usage u ON u.token_id = t.id ";

TokenRecord ReadToken(const Rows& r, int i) {
  return TokenRecord{r.Text(i, 0),   r.Text(i, 1), r.Int(i, 2),    r.OptInt(i, 3), r.OptInt(i, 4),
                     r.OptInt(i, 5), r.Text(i, 6), r.OptInt(i, 7), r.Text(i, 8),   r.Text(i, 9)};
}

constexpr char kSettingsColumns[] =
    "SELECT require_second_factor, setup_code_digest, setup_code_expires_at_ms, version, "
    "updated_at_ms FROM ql3.installation WHERE id = 'installation'";

InstallationSettings ReadSettings(const Rows& r, int i) {
  return InstallationSettings{r.Text(i, 0), r.OptText(i, 1), r.OptInt(i, 2), r.Int(i, 3),
                              r.Int(i, 4)};
}

constexpr char kOidcLoginColumns[] =
    "state_digest, nonce, code_verifier, client, created_at_ms, expires_at_ms, cli_port, cli_key";

OidcLoginRecord ReadOidcLogin(const Rows& r, int i) {
  return OidcLoginRecord{r.Text(i, 0), r.Text(i, 1), r.Text(i, 2),   r.Text(i, 3),
                         r.Int(i, 4),  r.Int(i, 5),  r.OptInt(i, 6), r.OptText(i, 7)};
}

constexpr char kPasswordColumns[] =
    "SELECT principal_id, hash, must_change, set_at_ms, failed_attempts, locked_until_ms, "
    "totp_secret, totp_enabled, totp_last_step, recovery_digests "
    "FROM ql3.principal_passwords ";

PasswordRecord ReadPassword(const Rows& r, int i) {
  return PasswordRecord{r.Text(i, 0),   r.Text(i, 1), r.Bool(i, 2), r.Int(i, 3), r.Int(i, 4),
                        r.OptInt(i, 5), r.Text(i, 6), r.Bool(i, 7), r.Int(i, 8), r.Text(i, 9)};
}

constexpr char kBindingColumns[] =
    "SELECT b.scope, b.subject_id, b.version, b.role, b.mutation_id, b.changed_by, "
    "b.created_at_ms FROM ql3.role_bindings b ";

// Keeps, of every (scope, subject), the highest version.
constexpr char kCurrentBinding[] =
    " b.version = (SELECT max(x.version) FROM ql3.role_bindings x WHERE x.scope = b.scope AND "
    "x.subject_id = b.subject_id)";

RoleBindingRecord ReadBinding(const Rows& r, int i) {
  return RoleBindingRecord{r.Text(i, 0), r.Text(i, 1), r.Int(i, 2), r.Text(i, 3),
                           r.Text(i, 4), r.Text(i, 5), r.Int(i, 6)};
}

constexpr char kAuditColumns[] =
    "SELECT id, at_ms, actor_id, action, target_kind, target_id, project_id, outcome, code, "
    "request_id FROM ql3.security_audit ";

AuditRecord ReadAudit(const Rows& r, int i) {
  return AuditRecord{r.Text(i, 0), r.Int(i, 1),     r.OptText(i, 2), r.Text(i, 3), r.Text(i, 4),
                     r.Text(i, 5), r.OptText(i, 6), r.Text(i, 7),    r.Text(i, 8), r.Text(i, 9)};
}

template <typename T, typename Reader>
Result<std::vector<T>> All(Tx& tx, std::string_view sql, const Params& params, Reader read) {
  QL_ASSIGN_OR_RETURN(Rows rows, tx.Exec(sql, params));
  std::vector<T> out;
  out.reserve(rows.size());
  for (int i = 0; i < rows.size(); ++i) out.push_back(read(rows, i));
  QL_RETURN_IF_ERROR(rows.status());
  return out;
}

template <typename T, typename Reader>
Result<std::optional<T>> One(Tx& tx, std::string_view sql, const Params& params, Reader read) {
  QL_ASSIGN_OR_RETURN(std::vector<T> all, All<T>(tx, sql, params, read));
  if (all.size() > 1) return Corrupt("identity_not_unique", "a lookup by key found several rows");
  if (all.empty()) return std::optional<T>();
  return std::optional<T>(std::move(all.front()));
}

Status Exec(Tx& tx, std::string_view sql, const Params& params) {
  return tx.Exec(sql, params).status();
}

Status Cas(Tx& tx, std::string_view what, std::string_view sql, const Params& params) {
  QL_ASSIGN_OR_RETURN(Rows rows, tx.Exec(sql, params));
  if (rows.affected() != 1) {
    return Conflict("version_conflict", std::string(what) + " changed concurrently");
  }
  return Status();
}

class PgGovernanceTx final : public GovernanceTx {
 public:
  explicit PgGovernanceTx(Tx& tx) : tx_(tx) {}

  Status EnterFence() override {
    return Exec(tx_, "SELECT pg_advisory_xact_lock_shared($1)", {P(kGovernanceLockKey)});
  }

  Result<std::optional<PrincipalRecord>> LoadPrincipal(const std::string& id) override {
    static const std::string kSql = std::string(kPrincipalColumns) + "WHERE id = $1";
    return One<PrincipalRecord>(tx_, kSql, {P(id)}, ReadPrincipal);
  }
  Result<std::optional<PrincipalRecord>> LoadPrincipalByName(const std::string& name) override {
    static const std::string kSql = std::string(kPrincipalColumns) + "WHERE name = $1";
    return One<PrincipalRecord>(tx_, kSql, {P(name)}, ReadPrincipal);
  }
  Result<std::vector<PrincipalRecord>> ListPrincipals() override {
    static const std::string kSql = std::string(kPrincipalColumns) + "ORDER BY name";
    return All<PrincipalRecord>(tx_, kSql, {}, ReadPrincipal);
  }
  Status InsertPrincipal(const PrincipalRecord& p) override {
    return Exec(tx_,
                "INSERT INTO ql3.principals (id, kind, name, status, version, created_at_ms, "
                "updated_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7)",
                {P(p.id), P(p.kind), P(p.name), P(p.status), P(p.version), P(p.created_at_ms),
                 P(p.updated_at_ms)});
  }
  Status UpdatePrincipalStatus(const std::string& id, const std::string& status,
                               int64_t expected_version, int64_t now_ms) override {
    return Cas(tx_, "principal " + id,
               "UPDATE ql3.principals SET status = $1, version = version + 1, "
               "updated_at_ms = $2 WHERE id = $3 AND version = $4",
               {P(status), P(now_ms), P(id), P(expected_version)});
  }

  Result<std::optional<TokenRecord>> LoadToken(const std::string& id) override {
    static const std::string kSql = std::string(kTokenColumns) + "WHERE t.id = $1";
    return One<TokenRecord>(tx_, kSql, {P(id)}, ReadToken);
  }
  Result<std::optional<TokenRecord>> LoadTokenByDigest(const std::string& digest) override {
    static const std::string kSql = std::string(kTokenColumns) + "WHERE t.token_digest = $1";
    return One<TokenRecord>(tx_, kSql, {P(digest)}, ReadToken);
  }
  Result<std::vector<TokenRecord>> ListTokens(
      const std::optional<std::string>& principal_id) override {
    static const std::string kSql =
        std::string(kTokenColumns) + "WHERE $1::text IS NULL OR t.principal_id = $1 ORDER BY t.id";
    return All<TokenRecord>(tx_, kSql, {P(principal_id)}, ReadToken);
  }
  Status InsertToken(const TokenRecord& t, const std::string& digest) override {
    return Exec(tx_,
                "INSERT INTO ql3.api_tokens (id, principal_id, token_digest, created_at_ms, "
                "expires_at_ms, kind, idle_timeout_ms, label, restriction) "
                "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                {P(t.id), P(t.principal_id), P(digest), P(t.created_at_ms), P(t.expires_at_ms),
                 P(t.kind), P(t.idle_timeout_ms), P(t.label), P(t.restriction)});
  }
  Status SetTokenRestriction(const std::string& id, const std::string& restriction) override {
    return Exec(tx_, "UPDATE ql3.api_tokens SET restriction = $1 WHERE id = $2",
                {P(restriction), P(id)});
  }
  Result<InstallationSettings> LoadInstallationSettings() override {
    QL_ASSIGN_OR_RETURN(std::optional<InstallationSettings> settings,
                        One<InstallationSettings>(tx_, kSettingsColumns, {}, ReadSettings));
    if (!settings.has_value()) return Corrupt("installation_missing", "no installation row");
    return *settings;
  }
  Status UpdateInstallationSettings(const InstallationSettings& s, int64_t now_ms) override {
    return Cas(tx_, "the installation settings",
               "UPDATE ql3.installation SET require_second_factor = $1, setup_code_digest = $2, "
               "setup_code_expires_at_ms = $3, version = version + 1, updated_at_ms = $4 "
               "WHERE id = 'installation' AND version = $5",
               {P(s.require_second_factor), P(s.setup_code_digest), P(s.setup_code_expires_at_ms),
                P(now_ms), P(s.version)});
  }
  Status InsertOidcLogin(const OidcLoginRecord& l) override {
    return Exec(tx_,
                std::string("INSERT INTO ql3.oidc_logins (") + kOidcLoginColumns +
                    ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                {P(l.state_digest), P(l.nonce), P(l.code_verifier), P(l.client), P(l.created_at_ms),
                 P(l.expires_at_ms), P(l.cli_port), P(l.cli_key)});
  }
  Result<std::optional<OidcLoginRecord>> TakeOidcLogin(const std::string& state_digest) override {
    static const std::string kSql =
        std::string("DELETE FROM ql3.oidc_logins WHERE state_digest = $1 RETURNING ") +
        kOidcLoginColumns;
    return One<OidcLoginRecord>(tx_, kSql, {P(state_digest)}, ReadOidcLogin);
  }
  Status PurgeOidcLogins(int64_t now_ms) override {
    return Exec(tx_, "DELETE FROM ql3.oidc_logins WHERE expires_at_ms < $1", {P(now_ms)});
  }
  Status RevokeSessionsOf(const std::string& principal_id, const std::string& except_token_id,
                          int64_t now_ms) override {
    return Exec(tx_,
                "UPDATE ql3.api_tokens SET revoked_at_ms = $1 WHERE principal_id = $2 AND "
                "kind = 'session' AND revoked_at_ms IS NULL AND id <> $3",
                {P(now_ms), P(principal_id), P(except_token_id)});
  }
  Result<std::optional<PasswordRecord>> LoadPassword(const std::string& principal_id) override {
    static const std::string kSql = std::string(kPasswordColumns) + "WHERE principal_id = $1";
    return One<PasswordRecord>(tx_, kSql, {P(principal_id)}, ReadPassword);
  }
  Status UpsertPassword(const PasswordRecord& p) override {
    return Exec(tx_,
                "INSERT INTO ql3.principal_passwords (principal_id, hash, must_change, "
                "set_at_ms, failed_attempts, locked_until_ms, totp_secret, totp_enabled, "
                "totp_last_step, recovery_digests) "
                "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) "
                "ON CONFLICT (principal_id) DO UPDATE SET hash = EXCLUDED.hash, "
                "must_change = EXCLUDED.must_change, set_at_ms = EXCLUDED.set_at_ms, "
                "failed_attempts = EXCLUDED.failed_attempts, "
                "locked_until_ms = EXCLUDED.locked_until_ms, totp_secret = EXCLUDED.totp_secret, "
                "totp_enabled = EXCLUDED.totp_enabled, totp_last_step = EXCLUDED.totp_last_step, "
                "recovery_digests = EXCLUDED.recovery_digests",
                {P(p.principal_id), P(p.hash), P(p.must_change), P(p.set_at_ms),
                 P(p.failed_attempts), P(p.locked_until_ms), P(p.totp_secret), P(p.totp_enabled),
                 P(p.totp_last_step), P(p.recovery_digests)});
  }
  Status DeletePassword(const std::string& principal_id) override {
    return Exec(tx_, "DELETE FROM ql3.principal_passwords WHERE principal_id = $1",
                {P(principal_id)});
  }
  Status SetTokenRevoked(const std::string& id, int64_t now_ms) override {
    return Exec(tx_,
                "UPDATE ql3.api_tokens SET revoked_at_ms = coalesce(revoked_at_ms, $1) "
                "WHERE id = $2",
                {P(now_ms), P(id)});
  }
  Status SetTokenUsed(const std::string& id, int64_t now_ms) override {
    return Exec(tx_,
                "INSERT INTO ql3.api_token_usage (token_id, last_used_at_ms) VALUES ($1, $2) "
                "ON CONFLICT (token_id) DO UPDATE SET last_used_at_ms = "
                "greatest(ql3.api_token_usage.last_used_at_ms, EXCLUDED.last_used_at_ms)",
                {P(id), P(now_ms)});
  }

  Result<std::optional<ProjectRecord>> LoadProject(const std::string& id) override {
    return pg::LoadProject(tx_, id);
  }
  Status InsertProject(const ProjectRecord& p) override {
    return Exec(tx_,
                "INSERT INTO ql3.projects (id, slug, name, status, version, created_at_ms, "
                "updated_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7)",
                {P(p.id), P(p.slug), P(p.name), P(p.status), P(p.version), P(p.created_at_ms),
                 P(p.updated_at_ms)});
  }
  Status UpdateProjectStatus(const std::string& id, const std::string& status,
                             int64_t expected_version, int64_t now_ms) override {
    return Cas(tx_, "project " + id,
               "UPDATE ql3.projects SET status = $1, version = version + 1, updated_at_ms = $2 "
               "WHERE id = $3 AND version = $4",
               {P(status), P(now_ms), P(id), P(expected_version)});
  }

  Result<bool> LockScope(const std::string& scope) override {
    QL_RETURN_IF_ERROR(Exec(tx_, "SELECT pg_advisory_xact_lock($1)", {P(kGovernanceLockKey)}));
    QL_ASSIGN_OR_RETURN(Rows rows,
                        tx_.Exec(scope == kInstallationScope
                                     ? "SELECT 1 FROM ql3.installation WHERE id = $1 FOR UPDATE"
                                     : "SELECT 1 FROM ql3.projects WHERE id = $1 FOR UPDATE",
                                 {P(scope)}));
    return rows.size() == 1;
  }
  Status BumpScope(const std::string& scope, int64_t now_ms) override {
    return Exec(tx_,
                scope == kInstallationScope
                    ? "UPDATE ql3.installation SET version = version + 1, updated_at_ms = $1 "
                      "WHERE id = $2"
                    : "UPDATE ql3.projects SET version = version + 1, updated_at_ms = $1 "
                      "WHERE id = $2",
                {P(now_ms), P(scope)});
  }

  Result<std::optional<RoleBindingRecord>> LoadCurrentBinding(
      const std::string& scope, const std::string& subject_id) override {
    static const std::string kSql = std::string(kBindingColumns) +
                                    "WHERE b.scope = $1 AND b.subject_id = $2 "
                                    "ORDER BY b.version DESC LIMIT 1";
    return One<RoleBindingRecord>(tx_, kSql, {P(scope), P(subject_id)}, ReadBinding);
  }
  Result<std::optional<RoleBindingRecord>> LoadBindingByMutation(
      const std::string& mutation_id) override {
    static const std::string kSql = std::string(kBindingColumns) + "WHERE b.mutation_id = $1";
    return One<RoleBindingRecord>(tx_, kSql, {P(mutation_id)}, ReadBinding);
  }
  Status InsertBinding(const RoleBindingRecord& b) override {
    return Exec(tx_,
                "INSERT INTO ql3.role_bindings (scope, subject_id, version, role, mutation_id, "
                "changed_by, created_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7)",
                {P(b.scope), P(b.subject_id), P(b.version), P(b.role), P(b.mutation_id),
                 P(b.changed_by), P(b.created_at_ms)});
  }
  Result<std::vector<RoleBindingRecord>> ListCurrentBindings(const std::string& scope) override {
    static const std::string kSql = std::string(kBindingColumns) + "WHERE b.scope = $1 AND" +
                                    kCurrentBinding + " ORDER BY b.subject_id";
    return All<RoleBindingRecord>(tx_, kSql, {P(scope)}, ReadBinding);
  }
  Result<std::vector<RoleBindingRecord>> CurrentBindingsOf(const std::string& subject) override {
    static const std::string kSql = std::string(kBindingColumns) + "WHERE b.subject_id = $1 AND" +
                                    kCurrentBinding + " ORDER BY b.scope";
    return All<RoleBindingRecord>(tx_, kSql, {P(subject)}, ReadBinding);
  }

  Status InsertAudit(const AuditRecord& a) override {
    return Exec(tx_,
                "INSERT INTO ql3.security_audit (id, at_ms, actor_id, action, target_kind, "
                "target_id, project_id, outcome, code, request_id) "
                "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
                {P(a.id), P(a.at_ms), P(a.actor_id), P(a.action), P(a.target_kind), P(a.target_id),
                 P(a.project_id), P(a.outcome), P(a.code), P(a.request_id)});
  }
  Result<std::vector<AuditRecord>> ListAudit(const std::optional<std::string>& before_id,
                                             int limit) override {
    static const std::string kSql =
        std::string(kAuditColumns) + "WHERE $1::text IS NULL OR id < $1 ORDER BY id DESC LIMIT $2";
    return All<AuditRecord>(tx_, kSql, {P(before_id), P(static_cast<int64_t>(limit))}, ReadAudit);
  }

 private:
  Tx& tx_;
};

}  // namespace

std::unique_ptr<GovernanceTx> NewGovernanceTx(Tx& tx) {
  return std::make_unique<PgGovernanceTx>(tx);
}

Status PgGovernanceRunner::Run(GovernanceTxKind kind, std::string_view operation,
                               const std::function<Status(GovernanceTx&)>& body) {
  const bool admin = kind == GovernanceTxKind::kWrite || kind == GovernanceTxKind::kAuditRead;
  if (admin && admin_ == nullptr) {
    return Unavailable(
        "admin_pool_missing",
        std::string(operation) + " needs the admin database URL (--admin-database-url)");
  }
  TxOptions options;
  options.read_only = kind == GovernanceTxKind::kRead || kind == GovernanceTxKind::kAuditRead;
  // Token use is a hint: losing it in a crash is harmless.
  options.durable_commit = kind != GovernanceTxKind::kTouch;
  Pool& pool = admin ? *admin_ : runtime_;
  return pool.Transact(options, operation, [&](Tx& tx) {
    PgGovernanceTx governance(tx);
    return body(governance);
  });
}

}  // namespace ql::pg
