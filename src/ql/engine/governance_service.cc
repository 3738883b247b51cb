#include "ql/engine/governance_service.h"

#include <algorithm>

#include <utility>

#include "ql/core/digest.h"
#include "ql/core/ids.h"
#include "ql/core/states.h"
#include "ql/core/store_commands.h"

namespace ql {
namespace {

// Largest token lifetime: ten years.
constexpr int64_t kMaxTokenTtlMs = int64_t{10} * 366 * 24 * 3600 * 1000;
constexpr int kArchiveCancelPage = 200;

}  // namespace

GovernanceService::GovernanceService(Store& store, Clock& clock, RandomSource& random,
                                     std::string default_project_slug)
    : store_(store),
      clock_(clock),
      random_(random),
      default_project_slug_(std::move(default_project_slug)) {}

std::string GovernanceService::NewId() {
  std::lock_guard<std::mutex> lock(mu_);
  return NewUuidV7(clock_.NowMs(), random_);
}

Result<ProjectRecord> GovernanceService::ResolveProject(const std::string& slug_or_id) {
  const std::string& key = slug_or_id.empty() ? default_project_slug_ : slug_or_id;
  if (IsCanonicalUuid(key)) return store_.projects().GetProject(key);
  if (Status st = ValidateProjectSlug(key); !st.ok()) {
    return NotFound("project_not_found", "no project is named " + Quote(key));
  }
  Result<ProjectRecord> found = store_.projects().GetProjectBySlug(key);
  if (!found.ok() && found.status().code() == StatusCode::kNotFound) {
    return NotFound("project_not_found", "no project is named " + Quote(key));
  }
  return found;
}

Result<std::string> GovernanceService::AuthorizedProjectId(const Caller& caller, Action action,
                                                           std::string_view target) {
  QL_ASSIGN_OR_RETURN(ProjectRecord project, ResolveProject(caller));
  Status allowed = Authorize(caller, project.id, action, target);
  if (allowed.reason() == "hidden") {
    return NotFound("project_not_found",
                    "no project is named " + (caller.project.empty() ? "default" : caller.project));
  }
  QL_RETURN_IF_ERROR(allowed);
  return project.id;
}

Result<ProjectRecord> GovernanceService::ResolveProject(const Caller& caller) {
  return ResolveProject(caller.project);
}

Result<Role> GovernanceService::RoleIn(const Caller& caller, const std::string& project_id) {
  if (caller.principal_id.empty()) return Role::kOwner;
  QL_ASSIGN_OR_RETURN(PrincipalRoles roles, repository().RolesOf(caller.principal_id));
  if (project_id.empty()) return roles.installation;
  Role project_role = Role::kNone;
  for (const auto& [id, role] : roles.projects) {
    if (id == project_id) project_role = role;
  }
  return EffectiveProjectRole(roles.installation, project_role);
}

void GovernanceService::RecordDenial(const Caller& caller,
                                     const std::optional<std::string>& project_id,
                                     std::string_view target, const Status& denial) {
  const int64_t now = clock_.NowMs();
  int64_t left_out = 0;
  if (!Spend(denials_, kMaxDenialFactsPerSec, now, &left_out)) return;
  AppendSummary("permission.denied", kAuditDenied, left_out, now);
  AuditRecord fact;
  fact.id = NewId();
  fact.at_ms = now;
  if (!caller.principal_id.empty()) fact.actor_id = caller.principal_id;
  fact.action = "permission.denied";
  fact.target_kind = "route";
  fact.target_id = std::string(target);
  fact.project_id = project_id;
  fact.outcome = std::string(kAuditDenied);
  fact.code = denial.reason();
  fact.request_id = caller.request_id;
  // Best effort: the refusal stands whether or not its fact could be written.
  (void)repository().AppendAudit(fact);
}

Status GovernanceService::Authorize(const Caller& caller, const std::string& project_id,
                                    Action action, std::string_view target, Role at_least) {
  if (caller.principal_id.empty()) return Status();
  // Authentication may be up to kAuthCacheMs old; the principal's status is read now.
  QL_ASSIGN_OR_RETURN(PrincipalRecord principal, repository().GetPrincipal(caller.principal_id));
  if (principal.status != kPrincipalActive) {
    Status denial = PermissionDenied("principal_disabled",
                                     "principal " + principal.name + " is disabled");
    RecordDenial(caller, project_id.empty() ? std::nullopt : std::optional(project_id), target,
                 denial);
    return denial;
  }
  QL_ASSIGN_OR_RETURN(Role held, RoleIn(caller, project_id));
  const Role required = std::max(RequiredRole(action), at_least);
  if (held >= required) return Status();
  Status denial =
      held == Role::kNone && action == Action::kRead && !project_id.empty()
          ? NotFound("hidden", "not visible to the caller")
          : RoleDenied(required, target, project_id.empty() ? kInstallationScope : project_id);
  std::optional<std::string> project;
  if (!project_id.empty()) project = project_id;
  RecordDenial(caller, project, target, denial);
  return denial;
}

Result<WhoAmI> GovernanceService::Whoami(const Caller& caller) {
  if (caller.principal_id.empty()) {
    return InvalidArgument("no_principal", "the system acts without a principal");
  }
  WhoAmI out;
  QL_ASSIGN_OR_RETURN(out.principal, repository().GetPrincipal(caller.principal_id));
  QL_ASSIGN_OR_RETURN(out.roles, repository().RolesOf(caller.principal_id));
  for (const auto& [id, role] : out.roles.projects) {
    QL_ASSIGN_OR_RETURN(ProjectRecord project, store_.projects().GetProject(id));
    out.projects.push_back(std::move(project));
  }
  return out;
}

Result<PrincipalRecord> GovernanceService::FindPrincipal(const std::string& name_or_id) {
  if (IsCanonicalUuid(name_or_id)) return repository().GetPrincipal(name_or_id);
  return repository().FindPrincipalByName(name_or_id);
}

Result<PrincipalRecord> GovernanceService::AddPrincipal(const Caller& caller,
                                                        const std::string& name,
                                                        const std::string& kind) {
  QL_RETURN_IF_ERROR(ValidatePrincipalName(name));
  QL_RETURN_IF_ERROR(ValidatePrincipalKind(kind));
  QL_RETURN_IF_ERROR(Authorize(caller, "", Action::kManageIdentity, "principals.create"));
  CreatePrincipalCommand cmd;
  cmd.actor = ActorOf(caller);
  cmd.id = NewId();
  cmd.kind = kind;
  cmd.name = name;
  cmd.now_ms = clock_.NowMs();
  return repository().CreatePrincipal(cmd);
}

Result<std::vector<PrincipalRecord>> GovernanceService::ListPrincipals(const Caller& caller) {
  QL_RETURN_IF_ERROR(Authorize(caller, "", Action::kManageIdentity, "principals.list"));
  return repository().ListPrincipals();
}

Result<PrincipalRecord> GovernanceService::GetPrincipal(const Caller& caller,
                                                        const std::string& name_or_id) {
  QL_ASSIGN_OR_RETURN(PrincipalRecord principal, FindPrincipal(name_or_id));
  if (principal.id != caller.principal_id) {
    QL_RETURN_IF_ERROR(Authorize(caller, "", Action::kManageIdentity, "principals.get"));
  }
  return principal;
}

Result<PrincipalRecord> GovernanceService::SetPrincipalStatus(const Caller& caller,
                                                              const std::string& name_or_id,
                                                              const std::string& status) {
  QL_RETURN_IF_ERROR(Authorize(caller, "", Action::kManageIdentity, "principals.status"));
  QL_ASSIGN_OR_RETURN(PrincipalRecord principal, FindPrincipal(name_or_id));
  return repository().SetPrincipalStatus(ActorOf(caller), principal.id, status, clock_.NowMs());
}

Result<MintedToken> GovernanceService::CreateToken(const Caller& caller,
                                                   const std::string& principal,
                                                   std::optional<int64_t> ttl_ms) {
  if (ttl_ms.has_value() && (*ttl_ms <= 0 || *ttl_ms > kMaxTokenTtlMs)) {
    return InvalidArgument("invalid_expiry", "a token lives between 1 ms and ten years");
  }
  std::string principal_id = caller.principal_id;
  if (!principal.empty()) {
    QL_ASSIGN_OR_RETURN(PrincipalRecord found, FindPrincipal(principal));
    principal_id = found.id;
  }
  if (principal_id.empty()) {
    return InvalidArgument("missing_field", "name the principal the token is for");
  }
  if (principal_id != caller.principal_id) {
    QL_RETURN_IF_ERROR(Authorize(caller, "", Action::kManageIdentity, "tokens.create"));
  }
  MintedToken out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out.token = "ql_" + RandomHex(random_, 32);
  }
  const int64_t now = clock_.NowMs();
  CreateTokenCommand cmd;
  cmd.actor = ActorOf(caller);
  cmd.id = NewId();
  cmd.principal_id = principal_id;
  cmd.token_digest = Sha256Hex(out.token);
  if (ttl_ms.has_value()) cmd.expires_at_ms = now + *ttl_ms;
  cmd.parent_expires_at_ms = caller.token_expires_at_ms;
  cmd.now_ms = now;
  Result<TokenRecord> created = repository().CreateToken(cmd);
  if (!created.ok()) {
    if (created.status().reason() == "rank_too_low") {
      RecordDenial(caller, std::nullopt, "tokens.create", created.status());
    }
    return created.status();
  }
  out.record = std::move(created).value();
  return out;
}

Result<std::vector<TokenRecord>> GovernanceService::ListTokens(const Caller& caller) {
  QL_ASSIGN_OR_RETURN(Role installation, RoleIn(caller, ""));
  if (installation >= RequiredRole(Action::kManageIdentity)) {
    return repository().ListTokens(std::nullopt);
  }
  return repository().ListTokens(caller.principal_id);
}

Result<TokenRecord> GovernanceService::RevokeToken(const Caller& caller,
                                                   const std::string& token_id) {
  QL_RETURN_IF_ERROR(ValidateId("token id", token_id));
  Result<TokenRecord> revoked = repository().RevokeToken(ActorOf(caller), token_id, clock_.NowMs());
  if (!revoked.ok() && revoked.status().reason() == "rank_too_low") {
    RecordDenial(caller, std::nullopt, "tokens.revoke", revoked.status());
  }
  return revoked;
}

Result<ProjectRecord> GovernanceService::CreateProject(const Caller& caller,
                                                       const std::string& slug,
                                                       const std::string& name) {
  QL_RETURN_IF_ERROR(ValidateProjectSlug(slug));
  QL_RETURN_IF_ERROR(Authorize(caller, "", Action::kManageIdentity, "projects.create"));
  CreateProjectCommand cmd;
  cmd.actor = ActorOf(caller);
  cmd.id = NewId();
  cmd.slug = slug;
  cmd.name = name.empty() ? slug : name;
  cmd.now_ms = clock_.NowMs();
  return repository().CreateProject(cmd);
}

Result<std::vector<ProjectRecord>> GovernanceService::ListProjects(const Caller& caller) {
  QL_ASSIGN_OR_RETURN(std::vector<ProjectRecord> all, store_.projects().ListProjects());
  if (caller.principal_id.empty()) return all;
  QL_ASSIGN_OR_RETURN(PrincipalRoles roles, repository().RolesOf(caller.principal_id));
  if (roles.installation >= Role::kAdmin) return all;
  std::vector<ProjectRecord> out;
  for (ProjectRecord& p : all) {
    for (const auto& [id, role] : roles.projects) {
      if (id == p.id) {
        out.push_back(std::move(p));
        break;
      }
    }
  }
  return out;
}

Result<ProjectRecord> GovernanceService::GetProject(const Caller& caller,
                                                    const std::string& slug_or_id) {
  QL_ASSIGN_OR_RETURN(ProjectRecord project, ResolveProject(slug_or_id));
  Status st = Authorize(caller, project.id, Action::kRead, "projects.get");
  if (st.reason() == "hidden") {
    return NotFound("project_not_found", "no project is named " + Quote(slug_or_id));
  }
  QL_RETURN_IF_ERROR(st);
  return project;
}

Result<ProjectRecord> GovernanceService::ArchiveProject(const Caller& caller,
                                                        const std::string& slug_or_id) {
  QL_ASSIGN_OR_RETURN(ProjectRecord project, GetProject(caller, slug_or_id));
  QL_RETURN_IF_ERROR(Authorize(caller, project.id, Action::kArchiveProject, "projects.archive"));
  QL_ASSIGN_OR_RETURN(ProjectRecord archived,
                      repository().ArchiveProject(ActorOf(caller), project.id, clock_.NowMs()));
  // Nothing of an archived project is admitted or dispatched any more, so every run that has
  // not started can be cancelled after the archive committed: none can be added meanwhile.
  for (const char* status : {"created", "queued", "retry_wait"}) {
    for (;;) {
      RunFilter filter;
      filter.project_id = project.id;
      filter.status = status;
      PageRequest page;
      page.limit = kArchiveCancelPage;
      QL_ASSIGN_OR_RETURN(Page<RunRecord> runs, store_.runs().ListRuns(filter, page));
      int cancelled = 0;
      for (const RunRecord& run : runs.items) {
        Result<RunRecord> done =
            store_.runs().RequestCancel(run.id, "project_archived",
                                        std::string(ActorTypeName(ActorType::kUser)),
                                        clock_.NowMs(), std::nullopt);
        if (done.ok()) ++cancelled;
      }
      if (cancelled == 0 || !runs.next_key.has_value()) break;
    }
  }
  return archived;
}

Result<std::string> GovernanceService::ScopeOf(const std::string& scope) {
  if (scope == kInstallationScope) return std::string(kInstallationScope);
  QL_ASSIGN_OR_RETURN(ProjectRecord project, ResolveProject(scope));
  return project.id;
}

Result<WriteBindingResult> GovernanceService::WriteBinding(
    const Caller& caller, const std::string& scope, const std::string& principal,
    const std::string& role, const std::optional<std::string>& mutation_id) {
  QL_RETURN_IF_ERROR(ParseRole(role).status());
  QL_ASSIGN_OR_RETURN(std::string scope_id, ScopeOf(scope));
  QL_ASSIGN_OR_RETURN(PrincipalRecord subject, FindPrincipal(principal));
  const std::string project = scope_id == kInstallationScope ? "" : scope_id;
  QL_RETURN_IF_ERROR(Authorize(caller, project, Action::kGrantRole, "bindings.write"));
  WriteBindingCommand cmd;
  cmd.actor = ActorOf(caller);
  cmd.scope = scope_id;
  cmd.subject_id = subject.id;
  cmd.role = role;
  cmd.mutation_id = mutation_id.has_value() ? *mutation_id : NewId();
  cmd.now_ms = clock_.NowMs();
  return repository().WriteBinding(cmd);
}

Result<std::vector<BindingView>> GovernanceService::ListBindings(const Caller& caller,
                                                                 const std::string& scope) {
  QL_ASSIGN_OR_RETURN(std::string scope_id, ScopeOf(scope));
  if (scope_id == kInstallationScope) {
    QL_RETURN_IF_ERROR(Authorize(caller, "", Action::kManageIdentity, "bindings.list"));
  } else {
    Status st = Authorize(caller, scope_id, Action::kRead, "bindings.list");
    if (st.reason() == "hidden") {
      return NotFound("project_not_found", "no project is named " + Quote(scope));
    }
    QL_RETURN_IF_ERROR(st);
  }
  QL_ASSIGN_OR_RETURN(std::vector<RoleBindingRecord> bindings,
                      repository().ListBindings(scope_id));
  std::vector<BindingView> out;
  for (RoleBindingRecord& b : bindings) {
    QL_ASSIGN_OR_RETURN(PrincipalRecord subject, repository().GetPrincipal(b.subject_id));
    out.push_back(BindingView{std::move(b), subject.name});
  }
  return out;
}

Result<Page<AuditRecord>> GovernanceService::ListAudit(const Caller& caller,
                                                       const PageRequest& page) {
  QL_RETURN_IF_ERROR(Authorize(caller, "", Action::kReadAudit, "audit.list"));
  return repository().ListAudit(page);
}

bool GovernanceService::Spend(AuditBudget& budget, int limit, int64_t now, int64_t* summary) {
  std::lock_guard<std::mutex> lock(mu_);
  *summary = 0;
  if (now - budget.window_ms >= 1000) {
    budget.window_ms = now;
    budget.in_window = 0;
  }
  if (++budget.in_window > limit) {
    ++budget.dropped;
    ++budget.unreported;
    return false;
  }
  *summary = budget.unreported;
  budget.unreported = 0;
  return true;
}

void GovernanceService::AppendSummary(std::string_view action, std::string_view outcome,
                                      int64_t left_out, int64_t now) {
  if (left_out <= 0) return;
  AuditRecord fact;
  fact.id = NewId();
  fact.at_ms = now;
  fact.action = std::string(action) + ".suppressed";
  fact.target_kind = "count";
  fact.target_id = std::to_string(left_out);
  fact.outcome = std::string(outcome);
  fact.code = "rate_limited";
  (void)repository().AppendAudit(fact);
}

void GovernanceService::RecordAuthFailure(const std::string& request_id, const std::string& code) {
  const int64_t now = clock_.NowMs();
  int64_t left_out = 0;
  if (!Spend(auth_failures_, kMaxAuthFailureFactsPerSec, now, &left_out)) return;
  AppendSummary("auth.failed", kAuditFailed, left_out, now);
  AuditRecord fact;
  fact.id = NewId();
  fact.at_ms = now;
  fact.action = "auth.failed";
  fact.target_kind = "route";
  fact.target_id = "api";
  fact.outcome = std::string(kAuditFailed);
  fact.code = code;
  fact.request_id = request_id;
  (void)repository().AppendAudit(fact);
}

int64_t GovernanceService::dropped_auth_failures() const {
  std::lock_guard<std::mutex> lock(mu_);
  return auth_failures_.dropped;
}

int64_t GovernanceService::dropped_denials() const {
  std::lock_guard<std::mutex> lock(mu_);
  return denials_.dropped;
}

}  // namespace ql
