#pragma once

// Governance use-cases (DESIGN §9) over the governance port: principals, tokens, projects, role
// bindings, the audit and "who am I", addressed by name or id, for the HTTP API and the CLI.
// Authorization of the management API itself (which role a caller holds where) lives here too,
// so the API and ControlService ask one place: Authorize.
//
// Every method takes the acting Caller; an empty principal id is the system (full access).
// Errors: InvalidArgument (invalid_principal_name, invalid_role, invalid_expiry, ...),
// NotFound (principal_not_found, project_not_found, token_not_found), PermissionDenied
// (permission_denied naming the role needed), Conflict (last_owner, project_archived,
// already_bootstrapped, ...), Duplicate (principal_name_duplicate, slug_duplicate), and the
// store's Busy / Unavailable / OutcomeUnknown / Corrupt / Internal.

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ql/core/clock.h"
#include "ql/core/governance.h"
#include "ql/core/governance_ports.h"
#include "ql/core/ports.h"
#include "ql/core/status.h"

namespace ql {

// Who calls, in which project, under which request id.
struct Caller {
  std::string principal_id;  // empty: the system itself (never from the HTTP side)
  std::string project;       // slug or id; empty: the default project
  std::string request_id;
  // When the token the caller authenticated with expires (none: never). A token it mints never
  // outlives it.
  std::optional<int64_t> token_expires_at_ms = std::nullopt;
  // The token the caller authenticated with, and its kind (api or session).
  std::string token_id = std::string();
  std::string token_kind = std::string();
};

struct MintedToken {
  TokenRecord record;
  std::string token;  // shown once; only its digest is stored
};

struct WhoAmI {
  PrincipalRecord principal;
  PrincipalRoles roles;
  std::vector<ProjectRecord> projects;  // the projects of `roles.projects`, same order
};

struct BindingView {
  RoleBindingRecord binding;
  std::string subject_name;
};

class GovernanceService {
 public:
  // `store`, `clock` and `random` must outlive the service. Thread-safe.
  GovernanceService(Store& store, Clock& clock, RandomSource& random,
                    std::string default_project_slug = "default");

  // Returns the project a caller means (by slug or id; the default one when empty). NotFound
  // project_not_found.
  Result<ProjectRecord> ResolveProject(const Caller& caller);
  Result<ProjectRecord> ResolveProject(const std::string& slug_or_id);

  // Returns ok when the caller may do `action` in `project_id` (an installation action when
  // `project_id` is empty). A refused caller gets PermissionDenied `permission_denied` naming the
  // role needed — or, for kRead of a project where it holds no role at all, NotFound `hidden`
  // (the caller turns it into its own not-found), so ids of other projects do not leak. Every
  // refusal is recorded in the audit (best effort).
  // `at_least` raises the role needed above the action's own (the approvers' role of a guarded
  // task, say).
  Status Authorize(const Caller& caller, const std::string& project_id, Action action,
                   std::string_view target, Role at_least = Role::kNone);
  // Resolves the caller's project and authorizes `action` there: the project's id, or the
  // refusal — NotFound project_not_found where Authorize says `hidden`, so a caller without a
  // role cannot tell an existing project from a missing one. The one decision the project-scoped
  // services (secrets, scripts, notifications) take.
  Result<std::string> AuthorizedProjectId(const Caller& caller, Action action,
                                          std::string_view target);
  // Returns the caller's effective role in a project (kOwner for the system).
  Result<Role> RoleIn(const Caller& caller, const std::string& project_id);

  Result<WhoAmI> Whoami(const Caller& caller);

  Result<PrincipalRecord> AddPrincipal(const Caller& caller, const std::string& name,
                                       const std::string& kind);
  Result<std::vector<PrincipalRecord>> ListPrincipals(const Caller& caller);
  Result<PrincipalRecord> GetPrincipal(const Caller& caller, const std::string& name_or_id);
  Result<PrincipalRecord> SetPrincipalStatus(const Caller& caller, const std::string& name_or_id,
                                             const std::string& status);

  // Mints a token for a principal (the caller itself when empty); `ttl_ms` > 0 sets an expiry.
  Result<MintedToken> CreateToken(const Caller& caller, const std::string& principal,
                                  std::optional<int64_t> ttl_ms);
  // Lists tokens: all of them for an installation admin, else the caller's own.
  Result<std::vector<TokenRecord>> ListTokens(const Caller& caller);
  Result<TokenRecord> RevokeToken(const Caller& caller, const std::string& token_id);

  Result<ProjectRecord> CreateProject(const Caller& caller, const std::string& slug,
                                      const std::string& name);
  // Lists the projects the caller holds a role in (every project for an installation admin).
  Result<std::vector<ProjectRecord>> ListProjects(const Caller& caller);
  Result<ProjectRecord> GetProject(const Caller& caller, const std::string& slug_or_id);
  // Archives the project, then cancels its runs that have not started (reason
  // project_archived). Running runs finish. Returns the archived project.
  Result<ProjectRecord> ArchiveProject(const Caller& caller, const std::string& slug_or_id);

  // Sets the binding of `principal` in a project (or the installation when `project` is
  // "installation"); role "none" revokes. `mutation_id` makes it idempotent (fresh when empty).
  Result<WriteBindingResult> WriteBinding(const Caller& caller, const std::string& scope,
                                          const std::string& principal, const std::string& role,
                                          const std::optional<std::string>& mutation_id);
  Result<std::vector<BindingView>> ListBindings(const Caller& caller, const std::string& scope);

  Result<Page<AuditRecord>> ListAudit(const Caller& caller, const PageRequest& page);

  // Records a failed authentication (no actor) for the audit, at most kMaxAuthFailureFactsPerSec
  // a second so an anonymous flood cannot grow the audit; the rest are counted, and the next
  // fact after a window that left some out is preceded by one `auth.failed.suppressed` fact
  // whose target (kind `count`) is the number left out. Refusals (`permission.denied`) are
  // bounded the same way (kMaxDenialFactsPerSec, `permission.denied.suppressed`).
  void RecordAuthFailure(const std::string& request_id, const std::string& code);
  int64_t dropped_auth_failures() const;
  int64_t dropped_denials() const;

  GovernanceRepository& repository() { return store_.governance(); }

 private:
  static constexpr int kMaxAuthFailureFactsPerSec = 10;
  static constexpr int kMaxDenialFactsPerSec = 20;

  // One kind of fact written at most `limit` times a second.
  struct AuditBudget {
    int64_t window_ms = 0;
    int in_window = 0;
    int64_t dropped = 0;          // since start
    int64_t unreported = 0;       // left out and not yet summarised in a fact
  };
  // Returns false when `budget` has no room left this second (the fact is counted instead);
  // `summary` receives the number left out since the last summary, when a summary is due.
  bool Spend(AuditBudget& budget, int limit, int64_t now, int64_t* summary);
  void AppendSummary(std::string_view action, std::string_view outcome, int64_t left_out,
                     int64_t now);

  std::string NewId();
  Actor ActorOf(const Caller& caller) const { return Actor{caller.principal_id, caller.request_id}; }
  Result<std::string> ScopeOf(const std::string& scope);
  Result<PrincipalRecord> FindPrincipal(const std::string& name_or_id);
  void RecordDenial(const Caller& caller, const std::optional<std::string>& project_id,
                    std::string_view target, const Status& denial);

  Store& store_;
  Clock& clock_;
  RandomSource& random_;
  std::string default_project_slug_;
  mutable std::mutex mu_;  // guards random_ and the audit budgets below
  AuditBudget auth_failures_;
  AuditBudget denials_;
};

}  // namespace ql
