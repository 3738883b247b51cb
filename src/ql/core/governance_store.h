#pragma once

// The governance repository written once over a store's primitives. A store implements
// GovernanceTx (row reads and writes valid inside one of its transactions, no decisions) and
// GovernanceTxRunner (which transaction runs where); GovernanceStore holds every rule — policy
// decisions, grant ceilings, the last owner, replays, audit facts — so SQLite and PostgreSQL
// cannot decide differently. CheckPolicyFence is the same fence for the stores' own writes
// (publish, run creation, cancel), called inside their transactions.

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ql/core/clock.h"
#include "ql/core/governance.h"
#include "ql/core/governance_ports.h"
#include "ql/core/ports.h"
#include "ql/core/records.h"
#include "ql/core/status.h"

namespace ql {

// Row primitives inside one transaction. Loads return nullopt for a missing row; writes return
// the store's mapped errors (Duplicate for a unique key, ...). Nothing here decides policy.
class GovernanceTx {
 public:
  virtual ~GovernanceTx() = default;

  // Serialises this transaction with governance writers before anything is read: a shared lock
  // for a fenced write, an exclusive one for a governance write (taken by LockScope). SQLite
  // transactions are serial already.
  virtual Status EnterFence() = 0;

  virtual Result<std::optional<PrincipalRecord>> LoadPrincipal(const std::string& id) = 0;
  virtual Result<std::optional<PrincipalRecord>> LoadPrincipalByName(const std::string& name) = 0;
  virtual Result<std::vector<PrincipalRecord>> ListPrincipals() = 0;
  virtual Status InsertPrincipal(const PrincipalRecord& principal) = 0;
  // Sets status, version + 1 and updated_at where the version is still `expected_version`;
  // Conflict `version_conflict` otherwise.
  virtual Status UpdatePrincipalStatus(const std::string& id, const std::string& status,
                                       int64_t expected_version, int64_t now_ms) = 0;

  virtual Result<std::optional<TokenRecord>> LoadToken(const std::string& id) = 0;
  virtual Result<std::optional<TokenRecord>> LoadTokenByDigest(const std::string& digest) = 0;
  virtual Result<std::vector<TokenRecord>> ListTokens(
      const std::optional<std::string>& principal_id) = 0;
  virtual Status InsertToken(const TokenRecord& token, const std::string& digest) = 0;
  virtual Status SetTokenRevoked(const std::string& id, int64_t now_ms) = 0;
  virtual Status SetTokenUsed(const std::string& id, int64_t now_ms) = 0;
  // Sets a token's restriction ("" lifts it).
  virtual Status SetTokenRestriction(const std::string& id, const std::string& restriction) = 0;
  // Revokes every live session of a principal but `except_token_id` (empty: all of them).
  virtual Status RevokeSessionsOf(const std::string& principal_id,
                                  const std::string& except_token_id, int64_t now_ms) = 0;

  virtual Result<std::optional<PasswordRecord>> LoadPassword(const std::string& principal_id) = 0;
  // Inserts or replaces the principal's password row.
  virtual Status UpsertPassword(const PasswordRecord& password) = 0;
  virtual Status DeletePassword(const std::string& principal_id) = 0;

  virtual Result<std::optional<ProjectRecord>> LoadProject(const std::string& id) = 0;
  virtual Status InsertProject(const ProjectRecord& project) = 0;
  // Sets status, version + 1 and updated_at where the version is still `expected_version`.
  virtual Status UpdateProjectStatus(const std::string& id, const std::string& status,
                                     int64_t expected_version, int64_t now_ms) = 0;

  // Takes the exclusive governance lock and locks the scope's row (the installation row or the
  // project row) against other binding writers; returns false when the scope row is missing.
  virtual Result<bool> LockScope(const std::string& scope) = 0;
  // Bumps the version of the scope's row (installation or project).
  virtual Status BumpScope(const std::string& scope, int64_t now_ms) = 0;

  // Returns the highest-version binding of (scope, subject), role none included.
  virtual Result<std::optional<RoleBindingRecord>> LoadCurrentBinding(
      const std::string& scope, const std::string& subject_id) = 0;
  virtual Result<std::optional<RoleBindingRecord>> LoadBindingByMutation(
      const std::string& mutation_id) = 0;
  virtual Status InsertBinding(const RoleBindingRecord& binding) = 0;
  // Returns the current binding of every subject of a scope (role none included), by subject.
  virtual Result<std::vector<RoleBindingRecord>> ListCurrentBindings(const std::string& scope) = 0;
  // Returns the current binding of every scope of a subject (role none included), by scope.
  virtual Result<std::vector<RoleBindingRecord>> CurrentBindingsOf(
      const std::string& subject_id) = 0;

  // The installation row's sign-in settings.
  virtual Result<InstallationSettings> LoadInstallationSettings() = 0;
  // Writes the settings, version + 1 and updated_at where the version is still
  // `settings.version`; Conflict `version_conflict` otherwise.
  virtual Status UpdateInstallationSettings(const InstallationSettings& settings,
                                            int64_t now_ms) = 0;

  virtual Status InsertOidcLogin(const OidcLoginRecord& login) = 0;
  // Removes and returns the login with this state digest (nullopt: none).
  virtual Result<std::optional<OidcLoginRecord>> TakeOidcLogin(const std::string& state_digest) = 0;
  // Removes the logins that expired before `now_ms`.
  virtual Status PurgeOidcLogins(int64_t now_ms) = 0;

  virtual Status InsertAudit(const AuditRecord& fact) = 0;
  // Returns facts with id < before_id (all when empty), newest first, at most `limit`.
  virtual Result<std::vector<AuditRecord>> ListAudit(const std::optional<std::string>& before_id,
                                                     int limit) = 0;
};

// Which transaction a governance operation needs. PostgreSQL runs kWrite and kAuditRead on the
// admin role and the others on the runtime role (which may only INSERT audit facts).
enum class GovernanceTxKind { kRead, kWrite, kAuditAppend, kAuditRead, kTouch };

class GovernanceTxRunner {
 public:
  virtual ~GovernanceTxRunner() = default;
  // Runs `body` in one transaction of `kind`, committing when it returns ok.
  virtual Status Run(GovernanceTxKind kind, std::string_view operation,
                     const std::function<Status(GovernanceTx&)>& body) = 0;
};

// Re-reads, inside the caller's transaction, the fence's principal, the project and the
// principal's bindings, and decides: ok, PermissionDenied (permission_denied,
// principal_disabled, principal_not_found), NotFound project_not_found or Conflict
// project_archived. Calls tx.EnterFence() first.
Status CheckPolicyFence(GovernanceTx& tx, const PolicyFence& fence, const std::string& project_id);
// The same for an installation-wide write: the principal's installation role decides.
Status CheckInstallationFence(GovernanceTx& tx, const PolicyFence& fence);

class GovernanceStore final : public GovernanceRepository {
 public:
  // `runner` and `random` must outlive the store (`random` makes the ids of audit facts).
  GovernanceStore(GovernanceTxRunner& runner, RandomSource& random);

  Result<PrincipalRecord> CreatePrincipal(const CreatePrincipalCommand& cmd) override;
  Result<PrincipalRecord> GetPrincipal(const std::string& principal_id) override;
  Result<PrincipalRecord> FindPrincipalByName(const std::string& name) override;
  Result<std::vector<PrincipalRecord>> ListPrincipals() override;
  Result<PrincipalRecord> SetPrincipalStatus(const Actor& actor, const std::string& principal_id,
                                             const std::string& status, int64_t now_ms) override;
  Result<TokenRecord> CreateToken(const CreateTokenCommand& cmd) override;
  Result<std::vector<TokenRecord>> ListTokens(
      const std::optional<std::string>& principal_id) override;
  Result<TokenRecord> RevokeToken(const Actor& actor, const std::string& token_id,
                                  int64_t now_ms) override;
  Result<Authentication> Authenticate(const std::string& token_digest, int64_t now_ms) override;
  Status TouchToken(const std::string& token_id, int64_t now_ms) override;
  Result<ProjectRecord> CreateProject(const CreateProjectCommand& cmd) override;
  Result<ProjectRecord> ArchiveProject(const Actor& actor, const std::string& project_id,
                                       int64_t now_ms) override;
  Result<WriteBindingResult> WriteBinding(const WriteBindingCommand& cmd) override;
  Result<std::vector<RoleBindingRecord>> ListBindings(const std::string& scope) override;
  Result<PrincipalRoles> RolesOf(const std::string& principal_id) override;
  Status AppendAudit(const AuditRecord& fact) override;
  Result<Page<AuditRecord>> ListAudit(const PageRequest& page) override;
  Result<BootstrapResult> Bootstrap(const BootstrapCommand& cmd) override;
  Result<std::optional<PasswordRecord>> GetPassword(const std::string& principal_id) override;
  Status SetPassword(const SetPasswordCommand& cmd) override;
  Status RemovePassword(const Actor& actor, const std::string& principal_id,
                        int64_t now_ms) override;
  Result<TokenRecord> RecordSignIn(const SignInCommand& cmd) override;
  Status SetSecondFactor(const SetSecondFactorCommand& cmd) override;
  Result<InstallationSettings> GetInstallationSettings() override;
  Result<InstallationSettings> SetRequireSecondFactor(const Actor& actor, const std::string& value,
                                                      int64_t now_ms) override;
  Status SetSetupCode(const std::string& code_digest, int64_t expires_at_ms,
                      int64_t now_ms) override;
  Result<SetupResult> CompleteSetup(const SetupCommand& cmd) override;
  Status BeginOidcLogin(const OidcLoginRecord& login) override;
  Result<OidcLoginRecord> TakeOidcLogin(const std::string& state_digest, int64_t now_ms) override;
  Result<TokenRecord> RecordExternalSignIn(const ExternalSignInCommand& cmd) override;

 private:
  // An audit fact of a successful governance write by `actor`.
  AuditRecord Fact(const Actor& actor, std::string_view action, std::string_view target_kind,
                   const std::string& target_id, const std::optional<std::string>& project_id,
                   int64_t now_ms);
  std::string NewAuditId(int64_t now_ms);

  GovernanceTxRunner& runner_;
  RandomSource& random_;
  std::mutex random_mu_;
};

}  // namespace ql
