#include "ql/storage/sqlite/sqlite_governance.h"

#include <utility>

#include "ql/storage/sqlite/sqlite_db.h"
#include "ql/storage/sqlite/sqlite_store_rows.h"

namespace ql::sqlite {
namespace {

constexpr char kPrincipalColumns[] =
    "SELECT id, kind, name, status, version, created_at_ms, updated_at_ms FROM principals ";

PrincipalRecord ReadPrincipal(const Stmt& s) {
  return PrincipalRecord{s.Text(0), s.Text(1), s.Text(2), s.Text(3), s.Int(4), s.Int(5), s.Int(6)};
}

constexpr char kTokenColumns[] =
    "SELECT id, principal_id, created_at_ms, expires_at_ms, revoked_at_ms, last_used_at_ms, "
    "kind, idle_timeout_ms, label, restriction FROM api_tokens ";

TokenRecord ReadToken(const Stmt& s) {
  return TokenRecord{s.Text(0),   s.Text(1), s.Int(2),    s.OptInt(3), s.OptInt(4),
                     s.OptInt(5), s.Text(6), s.OptInt(7), s.Text(8),   s.Text(9)};
}

constexpr char kSettingsColumns[] =
    "SELECT require_second_factor, setup_code_digest, setup_code_expires_at_ms, version, "
    "updated_at_ms FROM installation WHERE id = 'installation'";

InstallationSettings ReadSettings(const Stmt& s) {
  return InstallationSettings{s.Text(0), s.OptText(1), s.OptInt(2), s.Int(3), s.Int(4)};
}

constexpr char kOidcLoginColumns[] =
    "state_digest, nonce, code_verifier, client, created_at_ms, expires_at_ms, cli_port, cli_key";

OidcLoginRecord ReadOidcLogin(const Stmt& s) {
  return OidcLoginRecord{s.Text(0), s.Text(1), s.Text(2),   s.Text(3),
                         s.Int(4),  s.Int(5),  s.OptInt(6), s.OptText(7)};
}

constexpr char kPasswordColumns[] =
    "SELECT principal_id, hash, must_change, set_at_ms, failed_attempts, locked_until_ms, "
    "totp_secret, totp_enabled, totp_last_step, recovery_digests "
    "FROM principal_passwords ";

PasswordRecord ReadPassword(const Stmt& s) {
  return PasswordRecord{s.Text(0),   s.Text(1), s.Int(2) != 0, s.Int(3), s.Int(4),
                        s.OptInt(5), s.Text(6), s.Int(7) != 0, s.Int(8), s.Text(9)};
}

constexpr char kBindingColumns[] =
    "SELECT b.scope, b.subject_id, b.version, b.role, b.mutation_id, b.changed_by, "
    "b.created_at_ms FROM role_bindings b ";

// Keeps, of every (scope, subject), the highest version.
constexpr char kCurrentBinding[] =
    " b.version = (SELECT max(x.version) FROM role_bindings x WHERE x.scope = b.scope AND "
    "x.subject_id = b.subject_id)";

RoleBindingRecord ReadBinding(const Stmt& s) {
  return RoleBindingRecord{s.Text(0), s.Text(1), s.Int(2), s.Text(3),
                           s.Text(4), s.Text(5), s.Int(6)};
}

constexpr char kAuditColumns[] =
    "SELECT id, at_ms, actor_id, action, target_kind, target_id, project_id, outcome, code, "
    "request_id FROM security_audit ";

AuditRecord ReadAudit(const Stmt& s) {
  return AuditRecord{s.Text(0), s.Int(1),     s.OptText(2), s.Text(3), s.Text(4),
                     s.Text(5), s.OptText(6), s.Text(7),    s.Text(8), s.Text(9)};
}

template <typename T, typename Reader, typename... Args>
Result<std::optional<T>> One(Db& db, std::string_view sql, Reader read, const Args&... args) {
  QL_ASSIGN_OR_RETURN(Stmt s, db.Prepare(sql));
  s.BindAll(args...);
  QL_ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return std::optional<T>();
  return std::optional<T>(read(s));
}

template <typename T, typename Reader, typename... Args>
Result<std::vector<T>> All(Db& db, std::string_view sql, Reader read, const Args&... args) {
  QL_ASSIGN_OR_RETURN(Stmt s, db.Prepare(sql));
  s.BindAll(args...);
  std::vector<T> out;
  while (true) {
    QL_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    out.push_back(read(s));
  }
  return out;
}

template <typename... Args>
Status Exec(Db& db, std::string_view sql, const Args&... args) {
  QL_ASSIGN_OR_RETURN(Stmt s, db.Prepare(sql));
  s.BindAll(args...);
  return s.Run();
}

// Executes a compare-and-set UPDATE; Conflict `version_conflict` when no row matched.
template <typename... Args>
Status Cas(Db& db, std::string_view what, std::string_view sql, const Args&... args) {
  QL_RETURN_IF_ERROR(Exec(db, sql, args...));
  QL_ASSIGN_OR_RETURN(std::string changed, db.QueryText("SELECT changes()", "counting changes"));
  if (changed != "1") {
    return Conflict("version_conflict", std::string(what) + " changed concurrently");
  }
  return Status();
}

class SqliteGovernanceTx final : public GovernanceTx {
 public:
  explicit SqliteGovernanceTx(Db& db) : db_(db) {}

  Status EnterFence() override { return Status(); }

  Result<std::optional<PrincipalRecord>> LoadPrincipal(const std::string& id) override {
    static const std::string kSql = std::string(kPrincipalColumns) + "WHERE id = ?1";
    return One<PrincipalRecord>(db_, kSql, ReadPrincipal, id);
  }
  Result<std::optional<PrincipalRecord>> LoadPrincipalByName(const std::string& name) override {
    static const std::string kSql = std::string(kPrincipalColumns) + "WHERE name = ?1";
    return One<PrincipalRecord>(db_, kSql, ReadPrincipal, name);
  }
  Result<std::vector<PrincipalRecord>> ListPrincipals() override {
    static const std::string kSql = std::string(kPrincipalColumns) + "ORDER BY name";
    return All<PrincipalRecord>(db_, kSql, ReadPrincipal);
  }
  Status InsertPrincipal(const PrincipalRecord& p) override {
    return Exec(db_,
                "INSERT INTO principals (id, kind, name, status, version, created_at_ms, "
                "updated_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                p.id, p.kind, p.name, p.status, p.version, p.created_at_ms, p.updated_at_ms);
  }
  Status UpdatePrincipalStatus(const std::string& id, const std::string& status,
                               int64_t expected_version, int64_t now_ms) override {
    return Cas(db_, "principal " + id,
               "UPDATE principals SET status = ?1, version = version + 1, updated_at_ms = ?2 "
               "WHERE id = ?3 AND version = ?4",
               status, now_ms, id, expected_version);
  }

  Result<std::optional<TokenRecord>> LoadToken(const std::string& id) override {
    static const std::string kSql = std::string(kTokenColumns) + "WHERE id = ?1";
    return One<TokenRecord>(db_, kSql, ReadToken, id);
  }
  Result<std::optional<TokenRecord>> LoadTokenByDigest(const std::string& digest) override {
    static const std::string kSql = std::string(kTokenColumns) + "WHERE token_digest = ?1";
    return One<TokenRecord>(db_, kSql, ReadToken, digest);
  }
  Result<std::vector<TokenRecord>> ListTokens(
      const std::optional<std::string>& principal_id) override {
    static const std::string kSql =
        std::string(kTokenColumns) + "WHERE ?1 IS NULL OR principal_id = ?1 ORDER BY id";
    return All<TokenRecord>(db_, kSql, ReadToken, principal_id);
  }
  Status InsertToken(const TokenRecord& t, const std::string& digest) override {
    return Exec(db_,
                "INSERT INTO api_tokens (id, principal_id, token_digest, created_at_ms, "
                "expires_at_ms, kind, idle_timeout_ms, label, restriction) "
                "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                t.id, t.principal_id, digest, t.created_at_ms, t.expires_at_ms, t.kind,
                t.idle_timeout_ms, t.label, t.restriction);
  }
  Status SetTokenRestriction(const std::string& id, const std::string& restriction) override {
    return Exec(db_, "UPDATE api_tokens SET restriction = ?1 WHERE id = ?2", restriction, id);
  }
  Result<InstallationSettings> LoadInstallationSettings() override {
    QL_ASSIGN_OR_RETURN(std::optional<InstallationSettings> settings,
                        One<InstallationSettings>(db_, kSettingsColumns, ReadSettings));
    if (!settings.has_value()) return Corrupt("installation_missing", "no installation row");
    return *settings;
  }
  Status UpdateInstallationSettings(const InstallationSettings& s, int64_t now_ms) override {
    return Cas(db_, "the installation settings",
               "UPDATE installation SET require_second_factor = ?1, setup_code_digest = ?2, "
               "setup_code_expires_at_ms = ?3, version = version + 1, updated_at_ms = ?4 "
               "WHERE id = 'installation' AND version = ?5",
               s.require_second_factor, s.setup_code_digest, s.setup_code_expires_at_ms, now_ms,
               s.version);
  }
  Status InsertOidcLogin(const OidcLoginRecord& l) override {
    return Exec(db_,
                std::string("INSERT INTO oidc_logins (") + kOidcLoginColumns +
                    ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                l.state_digest, l.nonce, l.code_verifier, l.client, l.created_at_ms,
                l.expires_at_ms, l.cli_port, l.cli_key);
  }
  Result<std::optional<OidcLoginRecord>> TakeOidcLogin(const std::string& state_digest) override {
    static const std::string kSql = std::string(
                                        "DELETE FROM oidc_logins WHERE state_digest = ?1 "
                                        "RETURNING ") +
                                    kOidcLoginColumns;
    return One<OidcLoginRecord>(db_, kSql, ReadOidcLogin, state_digest);
  }
  Status PurgeOidcLogins(int64_t now_ms) override {
    return Exec(db_, "DELETE FROM oidc_logins WHERE expires_at_ms < ?1", now_ms);
  }
  Status RevokeSessionsOf(const std::string& principal_id, const std::string& except_token_id,
                          int64_t now_ms) override {
    return Exec(db_,
                "UPDATE api_tokens SET revoked_at_ms = ?1 WHERE principal_id = ?2 AND "
                "kind = 'session' AND revoked_at_ms IS NULL AND id <> ?3",
                now_ms, principal_id, except_token_id);
  }
  Result<std::optional<PasswordRecord>> LoadPassword(const std::string& principal_id) override {
    static const std::string kSql = std::string(kPasswordColumns) + "WHERE principal_id = ?1";
    return One<PasswordRecord>(db_, kSql, ReadPassword, principal_id);
  }
  Status UpsertPassword(const PasswordRecord& p) override {
    return Exec(db_,
                "INSERT INTO principal_passwords (principal_id, hash, must_change, set_at_ms, "
                "failed_attempts, locked_until_ms, totp_secret, totp_enabled, totp_last_step, "
                "recovery_digests) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) "
                "ON CONFLICT (principal_id) DO UPDATE SET hash = excluded.hash, "
                "must_change = excluded.must_change, set_at_ms = excluded.set_at_ms, "
                "failed_attempts = excluded.failed_attempts, "
                "locked_until_ms = excluded.locked_until_ms, totp_secret = excluded.totp_secret, "
                "totp_enabled = excluded.totp_enabled, totp_last_step = excluded.totp_last_step, "
                "recovery_digests = excluded.recovery_digests",
                p.principal_id, p.hash, int64_t{p.must_change ? 1 : 0}, p.set_at_ms,
                p.failed_attempts, p.locked_until_ms, p.totp_secret,
                int64_t{p.totp_enabled ? 1 : 0}, p.totp_last_step, p.recovery_digests);
  }
  Status DeletePassword(const std::string& principal_id) override {
    return Exec(db_, "DELETE FROM principal_passwords WHERE principal_id = ?1", principal_id);
  }
  Status SetTokenRevoked(const std::string& id, int64_t now_ms) override {
    return Exec(db_,
                "UPDATE api_tokens SET revoked_at_ms = coalesce(revoked_at_ms, ?1) WHERE id = ?2",
                now_ms, id);
  }
  Status SetTokenUsed(const std::string& id, int64_t now_ms) override {
    return Exec(db_, "UPDATE api_tokens SET last_used_at_ms = ?1 WHERE id = ?2", now_ms, id);
  }

  Result<std::optional<ProjectRecord>> LoadProject(const std::string& id) override {
    return sqlite::LoadProject(db_, id);
  }
  Status InsertProject(const ProjectRecord& p) override {
    return Exec(db_,
                "INSERT INTO projects (id, slug, name, status, version, created_at_ms, "
                "updated_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                p.id, p.slug, p.name, p.status, p.version, p.created_at_ms, p.updated_at_ms);
  }
  Status UpdateProjectStatus(const std::string& id, const std::string& status,
                             int64_t expected_version, int64_t now_ms) override {
    return Cas(db_, "project " + id,
               "UPDATE projects SET status = ?1, version = version + 1, updated_at_ms = ?2 "
               "WHERE id = ?3 AND version = ?4",
               status, now_ms, id, expected_version);
  }

  Result<bool> LockScope(const std::string& scope) override {
    // BEGIN IMMEDIATE already serialises every writer; the scope only has to exist.
    if (scope == kInstallationScope) return true;
    QL_ASSIGN_OR_RETURN(std::optional<ProjectRecord> project, LoadProject(scope));
    return project.has_value();
  }
  Status BumpScope(const std::string& scope, int64_t now_ms) override {
    if (scope == kInstallationScope) {
      return Exec(db_,
                  "UPDATE installation SET version = version + 1, updated_at_ms = ?1 "
                  "WHERE id = 'installation'",
                  now_ms);
    }
    return Exec(db_, "UPDATE projects SET version = version + 1, updated_at_ms = ?1 WHERE id = ?2",
                now_ms, scope);
  }

  Result<std::optional<RoleBindingRecord>> LoadCurrentBinding(
      const std::string& scope, const std::string& subject_id) override {
    static const std::string kSql = std::string(kBindingColumns) +
                                    "WHERE b.scope = ?1 AND b.subject_id = ?2 "
                                    "ORDER BY b.version DESC LIMIT 1";
    return One<RoleBindingRecord>(db_, kSql, ReadBinding, scope, subject_id);
  }
  Result<std::optional<RoleBindingRecord>> LoadBindingByMutation(
      const std::string& mutation_id) override {
    static const std::string kSql = std::string(kBindingColumns) + "WHERE b.mutation_id = ?1";
    return One<RoleBindingRecord>(db_, kSql, ReadBinding, mutation_id);
  }
  Status InsertBinding(const RoleBindingRecord& b) override {
    return Exec(db_,
                "INSERT INTO role_bindings (scope, subject_id, version, role, mutation_id, "
                "changed_by, created_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                b.scope, b.subject_id, b.version, b.role, b.mutation_id, b.changed_by,
                b.created_at_ms);
  }
  Result<std::vector<RoleBindingRecord>> ListCurrentBindings(const std::string& scope) override {
    static const std::string kSql = std::string(kBindingColumns) + "WHERE b.scope = ?1 AND" +
                                    kCurrentBinding + " ORDER BY b.subject_id";
    return All<RoleBindingRecord>(db_, kSql, ReadBinding, scope);
  }
  Result<std::vector<RoleBindingRecord>> CurrentBindingsOf(const std::string& subject) override {
    static const std::string kSql = std::string(kBindingColumns) + "WHERE b.subject_id = ?1 AND" +
                                    kCurrentBinding + " ORDER BY b.scope";
    return All<RoleBindingRecord>(db_, kSql, ReadBinding, subject);
  }

  Status InsertAudit(const AuditRecord& a) override {
    return Exec(db_,
                "INSERT INTO security_audit (id, at_ms, actor_id, action, target_kind, "
                "target_id, project_id, outcome, code, request_id) "
                "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                a.id, a.at_ms, a.actor_id, a.action, a.target_kind, a.target_id, a.project_id,
                a.outcome, a.code, a.request_id);
  }
  Result<std::vector<AuditRecord>> ListAudit(const std::optional<std::string>& before_id,
                                             int limit) override {
    static const std::string kSql =
        std::string(kAuditColumns) + "WHERE ?1 IS NULL OR id < ?1 ORDER BY id DESC LIMIT ?2";
    return All<AuditRecord>(db_, kSql, ReadAudit, before_id, limit);
  }

 private:
  Db& db_;
};

}  // namespace

std::unique_ptr<GovernanceTx> NewGovernanceTx(Db& db) {
  return std::make_unique<SqliteGovernanceTx>(db);
}

Status SqliteGovernanceRunner::Run(GovernanceTxKind kind, std::string_view operation,
                                   const std::function<Status(GovernanceTx&)>& body) {
  const TxMode mode = kind == GovernanceTxKind::kRead || kind == GovernanceTxKind::kAuditRead
                          ? TxMode::kRead
                          : TxMode::kWrite;
  return db_.Transact(mode, operation, [&](Tx&) {
    SqliteGovernanceTx tx(db_);
    return body(tx);
  });
}

}  // namespace ql::sqlite
