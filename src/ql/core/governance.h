#pragma once

// Governance (DESIGN §9): who may do what. Principals hold roles through append-only role
// bindings in a scope — the installation, above every project, or one project — and every
// mutation is authorized twice: early by the API (for a clear error) and again by the store
// inside the transaction that writes (the policy fence, which decides). The rules here are pure
// and shared by both stores, so SQLite and PostgreSQL refuse the same writes with the same codes
// and messages.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ql/core/status.h"

namespace ql {

// Roles in increasing power; each includes every lower one. kNone is a revoked binding.
enum class Role { kNone = 0, kViewer = 1, kOperator = 2, kAdmin = 3, kOwner = 4 };

// Returns "none", "viewer", "operator", "admin" or "owner".
std::string_view RoleName(Role role);
// Returns the role named `name` (including "none"), or InvalidArgument `invalid_role`.
Result<Role> ParseRole(std::string_view name);

// The scope of installation-wide bindings (principals, tokens, projects, audit). A project
// scope is the project's id.
inline constexpr std::string_view kInstallationScope = "installation";

inline constexpr std::string_view kPrincipalUser = "user";
inline constexpr std::string_view kPrincipalService = "service";
inline constexpr std::string_view kPrincipalActive = "active";
inline constexpr std::string_view kPrincipalDisabled = "disabled";
inline constexpr std::string_view kProjectArchived = "archived";

// The name of the principal ql-local and an empty cluster bootstrap as installation owner.
inline constexpr std::string_view kBootstrapOwnerName = "owner";

// How long an API replica may keep answering from a cached authentication: a disabled
// principal or revoked token stops working on every replica within this bound.
inline constexpr int64_t kAuthCacheMs = 2'000;

// What a caller wants to do, each with the least role it needs (DESIGN §9 permissions).
enum class Action {
  kRead,            // viewer: tasks, triggers, runs, events, logs of a project
  kOperateRuns,     // operator: start, cancel, retry runs
  kToggleTriggers,  // operator: enable / disable triggers
  kPublish,         // admin: publish tasks and triggers, repin
  kWriteSecrets,    // admin
  kApprove,         // admin
  kGrantRole,       // admin: grant or revoke viewer .. admin (owner needs owner)
  kArchiveProject,  // owner
  kManageIdentity,  // installation admin: principals, tokens, projects
  kReadAudit,       // installation admin
  kManageWorkers,   // installation admin: worker pools, their grants, drains
};

// Returns the least role `action` needs in its scope.
Role RequiredRole(Action action);
// Returns a short name of `action` for messages and the audit ("publish", "operate_runs", ...).
std::string_view ActionName(Action action);

struct PrincipalRecord {
  std::string id;
  std::string kind;    // user | service
  std::string name;    // unique
  std::string status;  // active | disabled
  int64_t version = 0;
  int64_t created_at_ms = 0;
  int64_t updated_at_ms = 0;
};

// An API token as stored: the secret itself is never kept, only its SHA-256 digest, which is
// never read back out of the store.
struct TokenRecord {
  std::string id;
  std::string principal_id;
  int64_t created_at_ms = 0;
  std::optional<int64_t> expires_at_ms;
  std::optional<int64_t> revoked_at_ms;
  std::optional<int64_t> last_used_at_ms;
  // kTokenApi (made by a principal or an admin for programs) or kTokenSession (made by a
  // sign-in: the panel's cookie or the token `ql login` keeps).
  std::string kind = std::string("api");
  // A session also ends once it has not been used for this long (its last use is recorded at
  // most once a minute).
  std::optional<int64_t> idle_timeout_ms;
  // What made it, for people: "panel from 10.0.0.7", "ql login from ...".
  std::string label;
  // A session that may do one thing before anything else: "" (none), kRestrictPasswordChange
  // or kRestrictTotpEnrolment. Admission refuses every other route (DESIGN §9).
  std::string restriction;
};

inline constexpr std::string_view kTokenApi = "api";
inline constexpr std::string_view kTokenSession = "session";
inline constexpr std::string_view kRestrictPasswordChange = "password_change";
inline constexpr std::string_view kRestrictTotpEnrolment = "totp_enrolment";

// Installation-wide sign-in settings: whether a password sign-in needs a second factor ("off",
// "admins": principals holding admin or owner anywhere, "everyone"), and the one-time set-up
// code printed at first start (only its SHA-256 digest), until it is used or expires.
struct InstallationSettings {
  std::string require_second_factor = std::string("off");
  std::optional<std::string> setup_code_digest;
  std::optional<int64_t> setup_code_expires_at_ms;
  int64_t version = 0;
  int64_t updated_at_ms = 0;
};

inline constexpr std::string_view kSecondFactorOff = "off";
inline constexpr std::string_view kSecondFactorAdmins = "admins";
inline constexpr std::string_view kSecondFactorEveryone = "everyone";

// An OpenID Connect sign-in in progress: the digest of its `state` (the browser holds the
// state), the nonce the ID token must carry, the PKCE verifier, and until when it may finish.
struct OidcLoginRecord {
  std::string state_digest;
  std::string nonce;
  std::string code_verifier;
  std::string client;  // panel | cli
  int64_t created_at_ms = 0;
  int64_t expires_at_ms = 0;
  // `ql login`: the loopback port its listener waits on, and the X25519 public key (unpadded
  // base64url) the session token is sealed for on its way back through the browser.
  std::optional<int64_t> cli_port;
  std::optional<std::string> cli_key;
};

// A principal's password: only its Argon2id hash (libsodium's encoded string, which carries the
// parameters it was made with), whether the next sign-in must choose a new one, and the failed
// attempts since the last success (past a bound the account is locked for a while).
struct PasswordRecord {
  std::string principal_id;
  std::string hash;
  bool must_change = false;
  int64_t set_at_ms = 0;
  int64_t failed_attempts = 0;
  std::optional<int64_t> locked_until_ms;
  // The second factor (RFC 6238 TOTP): base32 secret ("" none), confirmed or still pending,
  // the last 30-second step a code was accepted for, and the SHA-256 hex digests of the unused
  // recovery codes, space-separated.
  std::string totp_secret;
  bool totp_enabled = false;
  int64_t totp_last_step = 0;
  std::string recovery_digests;
};

// One version of the binding of `subject_id` in `scope`; the current binding is the highest
// version, and role "none" means the subject has no role there.
struct RoleBindingRecord {
  std::string scope;  // kInstallationScope or a project id
  std::string subject_id;
  int64_t version = 0;
  std::string role;
  std::string mutation_id;
  std::string changed_by;  // principal id of the writer
  int64_t created_at_ms = 0;
};

// One security audit fact. Never holds a token, a secret value or a parameter value.
struct AuditRecord {
  std::string id;  // UUIDv7: ordered by time
  int64_t at_ms = 0;
  std::optional<std::string> actor_id;  // empty for anonymous requests
  std::string action;       // e.g. auth.failed, permission.denied, binding.write, project.archive
  std::string target_kind;  // principal | token | binding | project | task | trigger | run | route
  std::string target_id;
  std::optional<std::string> project_id;
  std::string outcome;  // ok | denied | failed
  std::string code;     // the stable code of the outcome ("ok" when it succeeded)
  std::string request_id;
};

inline constexpr std::string_view kAuditOk = "ok";
inline constexpr std::string_view kAuditDenied = "denied";
inline constexpr std::string_view kAuditFailed = "failed";

// What a policy decision reads, all inside the transaction that writes.
struct PolicyInputs {
  std::optional<PrincipalRecord> principal;
  Role installation_role = Role::kNone;
  Role project_role = Role::kNone;  // kNone when the decision is installation-wide
};

// Returns the role that counts in a project: the higher of the installation binding (an
// installation owner or admin holds that role in every project; lower installation roles do not
// carry over) and the project's own binding.
Role EffectiveProjectRole(Role installation_role, Role project_role);

// Decides whether the principal may act with at least `required` in a scope (a project when
// `project_scope`, else the installation). Errors: PermissionDenied `principal_not_found`,
// `principal_disabled`, or `permission_denied` naming the role needed.
Status DecidePolicy(const PolicyInputs& inputs, Role required, bool project_scope);

// Returns PermissionDenied `permission_denied`: "<what> needs role <role> in <scope>".
Status RoleDenied(Role required, std::string_view what, std::string_view scope);

// Validates a principal name: 1..64 of [A-Za-z0-9._-], starting with a letter or digit;
// InvalidArgument `invalid_principal_name`.
Status ValidatePrincipalName(std::string_view name);
// Validates a principal kind: user | service; InvalidArgument `invalid_principal_kind`.
Status ValidatePrincipalKind(std::string_view kind);
// Validates a project slug: 1..64 of [a-z0-9-], starting with a letter or digit;
// InvalidArgument `invalid_project_slug`.
Status ValidateProjectSlug(std::string_view slug);

// Returns ok when a writer holding `writer_role` in a scope may set a binding to `role` there:
// viewer .. admin and none need admin, owner (and removing an owner) needs owner.
// PermissionDenied `permission_denied` otherwise.
Status CheckGrant(Role writer_role, Role current_role, Role new_role, std::string_view scope);

// Returns the scope name used in messages: "the installation" or "project <id>".
std::string ScopeLabel(std::string_view scope);

}  // namespace ql
