#pragma once

// The governance port (DESIGN §9): principals, tokens, projects, role bindings and the security
// audit, with the same observable behaviour in every store (the repository contract suite states
// it). Every write carries the acting principal and is authorized by the policy fence inside its
// own transaction (governance.h: DecidePolicy / CheckGrant); a refused write changes nothing.
// Every successful governance write appends its audit fact in the same transaction.
//
// Errors beyond ports.h's conventions:
//   PermissionDenied  permission_denied, principal_disabled, principal_not_found (the actor)
//   Conflict          project_archived, last_owner, mutation_id_reused, principal_disabled (a
//                     token for a disabled principal), token_revoked
//   Duplicate         principal_name_duplicate, slug_duplicate

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ql/core/governance.h"
#include "ql/core/ports.h"
#include "ql/core/records.h"
#include "ql/core/status.h"

namespace ql {

// Who acts and with which request id (for the audit). An empty principal id is the system
// itself (bootstrap, scheduler): no policy check, audited without an actor.
struct Actor {
  std::string principal_id;
  std::string request_id;
};

// The audit fact `id` of an action `actor` carried out at `at_ms` (outcome and code "ok").
AuditRecord SucceededFact(std::string id, const Actor& actor, std::string_view action,
                          std::string_view target_kind, const std::string& target_id,
                          const std::optional<std::string>& project_id, int64_t at_ms);

struct CreatePrincipalCommand {
  Actor actor;
  std::string id;  // canonical UUID chosen by the caller
  std::string kind = std::string(kPrincipalUser);
  std::string name;
  int64_t now_ms = 0;
};

struct CreateTokenCommand {
  Actor actor;
  std::string id;  // canonical UUID
  std::string principal_id;
  std::string token_digest;  // lowercase hex SHA-256 of the token
  std::optional<int64_t> expires_at_ms;
  // The expiry of the token the request was authenticated with: the new token expires no later
  // (an already expired one mints nothing).
  std::optional<int64_t> parent_expires_at_ms;
  int64_t now_ms = 0;
};

struct CreateProjectCommand {
  Actor actor;
  std::string id;  // canonical UUID
  std::string slug;
  std::string name;
  int64_t now_ms = 0;
};

struct WriteBindingCommand {
  Actor actor;
  std::string scope;  // kInstallationScope or a project id
  std::string subject_id;
  std::string role;         // owner | admin | operator | viewer | none (revoke)
  std::string mutation_id;  // exact replay returns the stored binding; drift is a conflict
  int64_t now_ms = 0;
};

struct WriteBindingResult {
  RoleBindingRecord binding;
  bool replayed = false;
};

// A live token's principal, as authentication found them.
struct Authentication {
  PrincipalRecord principal;
  TokenRecord token;
};

// The current (highest-version, role other than none) bindings of a principal.
struct PrincipalRoles {
  Role installation = Role::kNone;
  std::vector<std::pair<std::string, Role>> projects;  // project id, role; by project id
};

// The one-time set-up of an installation: the owner principal bound as installation owner with
// one token.
struct BootstrapCommand {
  std::string principal_id;  // used when the principal is created
  std::string name = std::string(kBootstrapOwnerName);
  std::string kind = std::string(kPrincipalUser);
  std::string token_id;
  std::string token_digest;
  std::string mutation_id;
  int64_t now_ms = 0;
};

struct BootstrapResult {
  PrincipalRecord principal;
  bool bootstrapped = false;  // false: the installation already had an owner; nothing written
  bool token_added = false;   // the token's digest was new and now belongs to the principal
};

// Sets a principal's password (its Argon2id hash, made by the caller).
struct SetPasswordCommand {
  Actor actor;
  std::string principal_id;
  std::string hash;
  bool must_change = false;
  // The session the actor changes its own password from stays (its password_change
  // restriction lifted); every other session of the principal ends.
  std::string keep_token_id;
  // An admin's reset for a lost device: the second factor and its recovery codes go too.
  bool clear_second_factor = false;
  int64_t now_ms = 0;
};

// Sets a principal's own second factor (enrolment, confirmation, removal).
struct SetSecondFactorCommand {
  Actor actor;
  std::string principal_id;
  std::string totp_secret;  // base32; "" removes the second factor
  bool totp_enabled = false;
  int64_t totp_last_step = 0;
  std::string recovery_digests;
  std::string audit_action;  // totp.enrol | totp.enable | totp.disable
  // The session the actor enables its second factor from: its totp_enrolment restriction is
  // lifted.
  std::string lift_token_id;
  int64_t now_ms = 0;
};

// The first password of the installation owner, chosen with the one-time set-up code.
struct SetupCommand {
  std::string code_digest;  // SHA-256 hex of the code given
  std::string hash;         // Argon2id hash of the chosen password
  // The session to create (id, expiry, idle timeout, label) and its digest.
  TokenRecord session;
  std::string session_digest;
  std::string request_id;
  int64_t now_ms = 0;
};

struct SetupResult {
  PrincipalRecord principal;
  TokenRecord session;
};

// A sign-in decided outside the password table (OpenID Connect): the principal the provider's
// claims mapped to, and the session to create.
struct ExternalSignInCommand {
  std::string principal_id;
  std::string method;  // "oidc": recorded as the audit fact's code
  TokenRecord session;
  std::string session_digest;
  std::string request_id;
  int64_t now_ms = 0;
};

// The outcome of one sign-in attempt whose password the caller has checked.
struct SignInCommand {
  std::string principal_id;
  bool password_ok = false;
  // When password_ok: the session to create (id, expiry, idle timeout, label) and its digest.
  TokenRecord session;
  std::string session_digest;
  // Failed attempts in a row that lock the account, and for how long.
  int64_t lock_after = 10;
  int64_t lock_ms = 15 * 60 * 1000;
  // For an account with a confirmed second factor, what the caller checked besides the
  // password: the step of a valid TOTP code (accepted only past the last one used), or the
  // digest of a recovery code (accepted once). Neither: the sign-in fails.
  std::optional<int64_t> totp_step;
  std::optional<std::string> recovery_digest;
  std::string request_id;
  int64_t now_ms = 0;
};

class GovernanceRepository {
 public:
  virtual ~GovernanceRepository() = default;

  // Creates a principal (active, version 1). Needs installation admin. Duplicate
  // `principal_name_duplicate` when the name is taken.
  virtual Result<PrincipalRecord> CreatePrincipal(const CreatePrincipalCommand& cmd) = 0;
  virtual Result<PrincipalRecord> GetPrincipal(const std::string& principal_id) = 0;
  // NotFound `principal_not_found`.
  virtual Result<PrincipalRecord> FindPrincipalByName(const std::string& name) = 0;
  // Lists principals by name.
  virtual Result<std::vector<PrincipalRecord>> ListPrincipals() = 0;
  // Sets a principal active or disabled (version + 1; a no-op returns the row unchanged). Needs
  // installation admin; disabling an installation owner needs owner. Disabling the last active
  // installation owner is Conflict `last_owner`.
  virtual Result<PrincipalRecord> SetPrincipalStatus(const Actor& actor,
                                                     const std::string& principal_id,
                                                     const std::string& status, int64_t now_ms) = 0;

  // Adds a token to a principal. Needs installation admin, or the principal itself (a principal
  // may mint its own tokens). Conflict `principal_disabled` for a disabled principal; Duplicate
  // `duplicate_id` for a digest or id that exists.
  virtual Result<TokenRecord> CreateToken(const CreateTokenCommand& cmd) = 0;
  // Lists tokens (of one principal when given) by id.
  virtual Result<std::vector<TokenRecord>> ListTokens(
      const std::optional<std::string>& principal_id) = 0;
  // Revokes a token (a no-op for a revoked one). Needs installation admin or the token's own
  // principal. NotFound `token_not_found`.
  virtual Result<TokenRecord> RevokeToken(const Actor& actor, const std::string& token_id,
                                          int64_t now_ms) = 0;
  // Finds the live token with this digest and its active principal. NotFound `token_unknown`;
  // Conflict `token_revoked`, `token_expired` (expires_at <= now) or `principal_disabled`.
  virtual Result<Authentication> Authenticate(const std::string& token_digest, int64_t now_ms) = 0;
  // Records that a token was used (best effort; at most once a minute per token is enough).
  virtual Status TouchToken(const std::string& token_id, int64_t now_ms) = 0;

  // Creates an active project. Needs installation admin; the creator is bound as its owner.
  // Duplicate `slug_duplicate`.
  virtual Result<ProjectRecord> CreateProject(const CreateProjectCommand& cmd) = 0;
  // Archives a project (version + 1; a no-op for an archived one). Needs owner of the project.
  // Its queued runs are left to the caller to cancel (ListRuns + RequestCancel with reason
  // project_archived); nothing of the project is admitted or dispatched any more.
  virtual Result<ProjectRecord> ArchiveProject(const Actor& actor, const std::string& project_id,
                                               int64_t now_ms) = 0;

  // Appends binding version current + 1 of (scope, subject) under a lock of the scope row and
  // bumps the scope's version. The writer needs admin in the scope (owner to grant owner or to
  // change an owner's binding); the last owner of a scope cannot be removed (Conflict
  // `last_owner`); a subject must exist (NotFound `principal_not_found`); a project scope must
  // be active. Replaying the mutation id with the same scope, subject and role returns the stored
  // binding; any drift is Conflict `mutation_id_reused`.
  virtual Result<WriteBindingResult> WriteBinding(const WriteBindingCommand& cmd) = 0;
  // Lists the current bindings of a scope (role none left out) by subject id.
  virtual Result<std::vector<RoleBindingRecord>> ListBindings(const std::string& scope) = 0;
  // Returns the current roles of a principal.
  virtual Result<PrincipalRoles> RolesOf(const std::string& principal_id) = 0;

  // Appends one audit fact in a transaction of its own (denials and authentication failures,
  // which have no write of their own to ride along with).
  virtual Status AppendAudit(const AuditRecord& fact) = 0;
  // Lists audit facts newest first with keyset paging.
  virtual Result<Page<AuditRecord>> ListAudit(const PageRequest& page) = 0;

  // Bootstraps an installation without an owner: creates (or reuses, by name) the principal,
  // binds it as installation owner and adds the token (bootstrapped = true). When the
  // installation has an owner already and the named principal is one of its current owners, only
  // adds the token when its digest is new (a restart of ql-local); otherwise Conflict
  // `already_bootstrapped` with nothing written. Audited as actor-less facts.
  virtual Result<BootstrapResult> Bootstrap(const BootstrapCommand& cmd) = 0;

  // The principal's password row, if it has one.
  virtual Result<std::optional<PasswordRecord>> GetPassword(const std::string& principal_id) = 0;
  // Sets a password: the principal itself, or an installation admin of at least its rank. Clears
  // failed attempts and any lock, ends the principal's sessions but cmd.keep_token_id, audited
  // `password.set`. Conflict `principal_disabled` for a disabled principal.
  virtual Status SetPassword(const SetPasswordCommand& cmd) = 0;
  // Removes a principal's password (and its second factor): an installation admin of at least
  // its rank. Every session of the principal ends; API tokens stay. Audited `password.remove`.
  // NotFound `password_not_set`.
  virtual Status RemovePassword(const Actor& actor, const std::string& principal_id,
                                int64_t now_ms) = 0;
  // Records a sign-in attempt. A success (principal active, not locked) creates the session,
  // clears failed attempts and is audited `auth.sign_in` ok; a failure counts an attempt, locks
  // the account for cmd.lock_ms at cmd.lock_after in a row (audited `auth.lockout`), is audited
  // `auth.sign_in` failed and returns PermissionDenied `sign_in_failed`. A locked or disabled
  // principal fails the same way whatever the password.
  virtual Result<TokenRecord> RecordSignIn(const SignInCommand& cmd) = 0;
  // Sets the principal's own second factor (the principal itself only; it needs a password).
  // Audited as cmd.audit_action. NotFound `password_not_set`.
  virtual Status SetSecondFactor(const SetSecondFactorCommand& cmd) = 0;

  // The installation's sign-in settings.
  virtual Result<InstallationSettings> GetInstallationSettings() = 0;
  // Sets whether a password sign-in needs a second factor (off | admins | everyone). Needs
  // installation admin; audited `settings.write`. InvalidArgument `invalid_setting`.
  virtual Result<InstallationSettings> SetRequireSecondFactor(const Actor& actor,
                                                              const std::string& value,
                                                              int64_t now_ms) = 0;
  // Stores the digest of a new one-time set-up code (the system at first start of ql-local).
  virtual Status SetSetupCode(const std::string& code_digest, int64_t expires_at_ms,
                              int64_t now_ms) = 0;
  // Uses the set-up code: sets the bootstrap owner's first password, creates its session,
  // clears the code, audited `auth.setup`. One answer, PermissionDenied `setup_code_invalid`,
  // for a wrong, used or expired code, and when the owner has a password already (also
  // audited, failed). Conflict `principal_disabled` when the owner is disabled.
  virtual Result<SetupResult> CompleteSetup(const SetupCommand& cmd) = 0;
  // Keeps an OpenID Connect sign-in in progress (and drops expired ones).
  virtual Status BeginOidcLogin(const OidcLoginRecord& login) = 0;
  // Takes (removes) the sign-in in progress with this state digest: it can finish once.
  // PermissionDenied `oidc_state_invalid` when there is none or it expired.
  virtual Result<OidcLoginRecord> TakeOidcLogin(const std::string& state_digest,
                                                int64_t now_ms) = 0;
  // Creates the session of a sign-in decided by an identity provider. The principal must be
  // active (PermissionDenied `principal_disabled`, audited failed). Audited `auth.sign_in` with
  // code = cmd.method.
  virtual Result<TokenRecord> RecordExternalSignIn(const ExternalSignInCommand& cmd) = 0;
};

}  // namespace ql
