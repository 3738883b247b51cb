#include "ql/core/governance_store.h"

#include <algorithm>
#include <climits>
#include <mutex>
#include <utility>

#include "ql/core/digest.h"
#include "ql/core/ids.h"
#include "ql/core/store_commands.h"

namespace ql {
namespace {

constexpr std::string_view kAuditListing = "audit";

Role RoleOf(const std::optional<RoleBindingRecord>& binding) {
  if (!binding.has_value()) return Role::kNone;
  Result<Role> role = ParseRole(binding->role);
  return role.ok() ? *role : Role::kNone;
}

// Reads what a decision in `scope` needs: the principal and its installation and scope roles.
Result<PolicyInputs> ReadPolicyInputs(GovernanceTx& tx, const std::string& principal_id,
                                      const std::string& scope) {
  PolicyInputs in;
  QL_ASSIGN_OR_RETURN(in.principal, tx.LoadPrincipal(principal_id));
  if (!in.principal.has_value()) return in;
  QL_ASSIGN_OR_RETURN(std::optional<RoleBindingRecord> installation,
                      tx.LoadCurrentBinding(std::string(kInstallationScope), principal_id));
  in.installation_role = RoleOf(installation);
  if (scope != kInstallationScope) {
    QL_ASSIGN_OR_RETURN(std::optional<RoleBindingRecord> project,
                        tx.LoadCurrentBinding(scope, principal_id));
    in.project_role = RoleOf(project);
  }
  return in;
}

// Decides for a governance write by `actor` in `scope` and returns the role the actor holds
// there (the system actor always may, as owner).
Result<Role> Authorize(GovernanceTx& tx, const Actor& actor, const std::string& scope,
                       Role required) {
  if (actor.principal_id.empty()) return Role::kOwner;
  QL_ASSIGN_OR_RETURN(PolicyInputs in, ReadPolicyInputs(tx, actor.principal_id, scope));
  QL_RETURN_IF_ERROR(DecidePolicy(in, required, scope != kInstallationScope));
  return scope == kInstallationScope ? in.installation_role
                                     : EffectiveProjectRole(in.installation_role, in.project_role);
}

Status AuthorizeOnly(GovernanceTx& tx, const Actor& actor, const std::string& scope,
                     Role required) {
  return Authorize(tx, actor, scope, required).status();
}

// The highest role `subject_id` holds in any scope.
Result<Role> RankOf(GovernanceTx& tx, const std::string& subject_id) {
  QL_ASSIGN_OR_RETURN(std::vector<RoleBindingRecord> bindings, tx.CurrentBindingsOf(subject_id));
  Role rank = Role::kNone;
  for (const RoleBindingRecord& b : bindings) rank = std::max(rank, RoleOf(b));
  return rank;
}

// Minting or revoking a token of another principal needs an installation role at least as high
// as every role that principal holds: an admin never acts with an owner's token.
Status RequireRankOver(GovernanceTx& tx, const Actor& actor, Role actor_role,
                       const std::string& subject_id, std::string_view what) {
  if (actor.principal_id.empty() || actor.principal_id == subject_id) return Status();
  QL_ASSIGN_OR_RETURN(Role target, RankOf(tx, subject_id));
  if (actor_role >= target) return Status();
  return PermissionDenied("rank_too_low", std::string(what) + " a token of a principal holding " +
                                              std::string(RoleName(target)) + " needs " +
                                              std::string(RoleName(target)) + " installation-wide");
}

Result<ProjectRecord> RequireProject(GovernanceTx& tx, const std::string& project_id) {
  QL_ASSIGN_OR_RETURN(std::optional<ProjectRecord> project, tx.LoadProject(project_id));
  if (!project.has_value()) {
    return NotFound("project_not_found", "project " + project_id + " does not exist");
  }
  return *project;
}

Result<PrincipalRecord> RequirePrincipal(GovernanceTx& tx, const std::string& id) {
  QL_ASSIGN_OR_RETURN(std::optional<PrincipalRecord> principal, tx.LoadPrincipal(id));
  if (!principal.has_value()) {
    return NotFound("principal_not_found", "principal " + id + " does not exist");
  }
  return *principal;
}

// Counts the current owners of a scope that are active principals.
Result<int> CountActiveOwners(GovernanceTx& tx, const std::string& scope) {
  QL_ASSIGN_OR_RETURN(std::vector<RoleBindingRecord> bindings, tx.ListCurrentBindings(scope));
  int owners = 0;
  for (const RoleBindingRecord& b : bindings) {
    if (b.role != RoleName(Role::kOwner)) continue;
    QL_ASSIGN_OR_RETURN(std::optional<PrincipalRecord> p, tx.LoadPrincipal(b.subject_id));
    if (p.has_value() && p->status == kPrincipalActive) ++owners;
  }
  return owners;
}

Status ValidateAudit(const AuditRecord& fact) {
  QL_RETURN_IF_ERROR(ValidateId("audit id", fact.id));
  if (fact.action.empty() || fact.action.size() > 64) {
    return InvalidArgument("invalid_audit_fact", "an audit action must be 1-64 characters");
  }
  if (fact.outcome != kAuditOk && fact.outcome != kAuditDenied && fact.outcome != kAuditFailed) {
    return InvalidArgument("invalid_audit_fact",
                           "audit outcome " + Quote(fact.outcome) + " is not ok, denied or failed");
  }
  return Status();
}

}  // namespace

namespace {

// Lifts `restriction` from the principal's token `token_id` (none given, or another restriction:
// nothing changes).
Status LiftRestriction(GovernanceTx& tx, const std::string& token_id,
                       const std::string& principal_id, std::string_view restriction) {
  if (token_id.empty()) return Status();
  QL_ASSIGN_OR_RETURN(std::optional<TokenRecord> token, tx.LoadToken(token_id));
  if (!token.has_value() || token->principal_id != principal_id ||
      token->restriction != restriction) {
    return Status();
  }
  return tx.SetTokenRestriction(token_id, "");
}

// Inserts the session a sign-in asked for (id, expiry, idle timeout, label, restriction) as a
// live session token of `principal_id`, and returns it as stored.
Result<TokenRecord> InsertSession(GovernanceTx& tx, const TokenRecord& requested,
                                  const std::string& digest, const std::string& principal_id,
                                  int64_t now_ms) {
  TokenRecord session = requested;
  session.principal_id = principal_id;
  session.kind = std::string(kTokenSession);
  session.created_at_ms = now_ms;
  session.revoked_at_ms.reset();
  session.last_used_at_ms.reset();
  QL_RETURN_IF_ERROR(tx.InsertToken(session, digest));
  return session;
}

// The bootstrap owner: the installation owner named kBootstrapOwnerName.
Result<std::optional<PrincipalRecord>> BootstrapOwner(GovernanceTx& tx) {
  QL_ASSIGN_OR_RETURN(std::optional<PrincipalRecord> principal,
                      tx.LoadPrincipalByName(std::string(kBootstrapOwnerName)));
  if (!principal.has_value()) return principal;
  QL_ASSIGN_OR_RETURN(std::optional<RoleBindingRecord> binding,
                      tx.LoadCurrentBinding(std::string(kInstallationScope), principal->id));
  if (RoleOf(binding) != Role::kOwner) return std::optional<PrincipalRecord>();
  return principal;
}

}  // namespace

Status CheckPolicyFence(GovernanceTx& tx, const PolicyFence& fence, const std::string& project_id) {
  QL_RETURN_IF_ERROR(tx.EnterFence());
  QL_ASSIGN_OR_RETURN(PolicyInputs in, ReadPolicyInputs(tx, fence.principal_id, project_id));
  QL_RETURN_IF_ERROR(DecidePolicy(in, fence.required, /*project_scope=*/true));
  QL_ASSIGN_OR_RETURN(ProjectRecord project, RequireProject(tx, project_id));
  if (project.status != kProjectActive) {
    return Conflict("project_archived", "project " + project.slug + " is archived");
  }
  return Status();
}

Status CheckInstallationFence(GovernanceTx& tx, const PolicyFence& fence) {
  QL_RETURN_IF_ERROR(tx.EnterFence());
  QL_ASSIGN_OR_RETURN(PolicyInputs in,
                      ReadPolicyInputs(tx, fence.principal_id, std::string(kInstallationScope)));
  return DecidePolicy(in, fence.required, /*project_scope=*/false);
}

GovernanceStore::GovernanceStore(GovernanceTxRunner& runner, RandomSource& random)
    : runner_(runner), random_(random) {}

std::string GovernanceStore::NewAuditId(int64_t now_ms) {
  std::lock_guard<std::mutex> lock(random_mu_);
  return NewUuidV7(now_ms, random_);
}

AuditRecord SucceededFact(std::string id, const Actor& actor, std::string_view action,
                          std::string_view target_kind, const std::string& target_id,
                          const std::optional<std::string>& project_id, int64_t at_ms) {
  AuditRecord fact;
  fact.id = std::move(id);
  fact.at_ms = at_ms;
  if (!actor.principal_id.empty()) fact.actor_id = actor.principal_id;
  fact.action = std::string(action);
  fact.target_kind = std::string(target_kind);
  fact.target_id = target_id;
  fact.project_id = project_id;
  fact.outcome = std::string(kAuditOk);
  fact.code = std::string(kAuditOk);
  fact.request_id = actor.request_id;
  return fact;
}

AuditRecord GovernanceStore::Fact(const Actor& actor, std::string_view action,
                                  std::string_view target_kind, const std::string& target_id,
                                  const std::optional<std::string>& project_id, int64_t now_ms) {
  return SucceededFact(NewAuditId(now_ms), actor, action, target_kind, target_id, project_id,
                       now_ms);
}

Result<PrincipalRecord> GovernanceStore::CreatePrincipal(const CreatePrincipalCommand& cmd) {
  QL_RETURN_IF_ERROR(ValidateId("principal id", cmd.id));
  QL_RETURN_IF_ERROR(ValidatePrincipalName(cmd.name));
  QL_RETURN_IF_ERROR(ValidatePrincipalKind(cmd.kind));
  PrincipalRecord out{cmd.id, cmd.kind,   cmd.name,  std::string(kPrincipalActive),
                      1,      cmd.now_ms, cmd.now_ms};
  AuditRecord fact = Fact(cmd.actor, "principal.create", "principal", cmd.id, {}, cmd.now_ms);
  QL_RETURN_IF_ERROR(runner_.Run(
      GovernanceTxKind::kWrite, "creating a principal", [&](GovernanceTx& tx) -> Status {
        QL_RETURN_IF_ERROR(tx.LockScope(std::string(kInstallationScope)).status());
        QL_RETURN_IF_ERROR(AuthorizeOnly(tx, cmd.actor, std::string(kInstallationScope),
                                         RequiredRole(Action::kManageIdentity)));
        QL_ASSIGN_OR_RETURN(std::optional<PrincipalRecord> same, tx.LoadPrincipalByName(cmd.name));
        if (same.has_value()) {
          return Duplicate("principal_name_duplicate",
                           "a principal named " + cmd.name + " exists already");
        }
        QL_RETURN_IF_ERROR(tx.InsertPrincipal(out));
        return tx.InsertAudit(fact);
      }));
  return out;
}

Result<PrincipalRecord> GovernanceStore::GetPrincipal(const std::string& principal_id) {
  QL_RETURN_IF_ERROR(ValidateId("principal id", principal_id));
  PrincipalRecord out;
  QL_RETURN_IF_ERROR(
      runner_.Run(GovernanceTxKind::kRead, "reading a principal", [&](GovernanceTx& tx) -> Status {
        QL_ASSIGN_OR_RETURN(out, RequirePrincipal(tx, principal_id));
        return Status();
      }));
  return out;
}

Result<PrincipalRecord> GovernanceStore::FindPrincipalByName(const std::string& name) {
  QL_RETURN_IF_ERROR(ValidatePrincipalName(name));
  PrincipalRecord out;
  QL_RETURN_IF_ERROR(
      runner_.Run(GovernanceTxKind::kRead, "finding a principal", [&](GovernanceTx& tx) -> Status {
        QL_ASSIGN_OR_RETURN(std::optional<PrincipalRecord> found, tx.LoadPrincipalByName(name));
        if (!found.has_value()) {
          return NotFound("principal_not_found", "no principal is named " + name);
        }
        out = std::move(*found);
        return Status();
      }));
  return out;
}

Result<std::vector<PrincipalRecord>> GovernanceStore::ListPrincipals() {
  std::vector<PrincipalRecord> out;
  QL_RETURN_IF_ERROR(
      runner_.Run(GovernanceTxKind::kRead, "listing principals", [&](GovernanceTx& tx) -> Status {
        QL_ASSIGN_OR_RETURN(out, tx.ListPrincipals());
        return Status();
      }));
  return out;
}

Result<PrincipalRecord> GovernanceStore::SetPrincipalStatus(const Actor& actor,
                                                            const std::string& principal_id,
                                                            const std::string& status,
                                                            int64_t now_ms) {
  QL_RETURN_IF_ERROR(ValidateId("principal id", principal_id));
  if (status != kPrincipalActive && status != kPrincipalDisabled) {
    return InvalidArgument("invalid_principal_status",
                           "principal status " + Quote(status) + " is not active or disabled");
  }
  const std::string installation(kInstallationScope);
  PrincipalRecord out;
  QL_RETURN_IF_ERROR(runner_.Run(
      GovernanceTxKind::kWrite, "changing a principal's status", [&](GovernanceTx& tx) -> Status {
        QL_RETURN_IF_ERROR(tx.LockScope(installation).status());
        QL_ASSIGN_OR_RETURN(
            Role held, Authorize(tx, actor, installation, RequiredRole(Action::kManageIdentity)));
        QL_ASSIGN_OR_RETURN(PrincipalRecord current, RequirePrincipal(tx, principal_id));
        if (current.status == status) {
          out = std::move(current);
          return Status();
        }
        QL_ASSIGN_OR_RETURN(std::optional<RoleBindingRecord> binding,
                            tx.LoadCurrentBinding(installation, principal_id));
        if (RoleOf(binding) == Role::kOwner && status == kPrincipalDisabled) {
          if (held < Role::kOwner) {
            return RoleDenied(Role::kOwner, "disabling an installation owner", installation);
          }
          QL_ASSIGN_OR_RETURN(int owners, CountActiveOwners(tx, installation));
          if (owners <= 1) {
            return Conflict("last_owner", "principal " + current.name +
                                              " is the last active owner of the installation");
          }
        }
        QL_RETURN_IF_ERROR(tx.UpdatePrincipalStatus(principal_id, status, current.version, now_ms));
        QL_RETURN_IF_ERROR(tx.InsertAudit(
            Fact(actor, status == kPrincipalDisabled ? "principal.disable" : "principal.enable",
                 "principal", principal_id, {}, now_ms)));
        QL_ASSIGN_OR_RETURN(out, RequirePrincipal(tx, principal_id));
        return Status();
      }));
  return out;
}

Result<TokenRecord> GovernanceStore::CreateToken(const CreateTokenCommand& cmd) {
  QL_RETURN_IF_ERROR(ValidateId("token id", cmd.id));
  QL_RETURN_IF_ERROR(ValidateId("principal id", cmd.principal_id));
  QL_RETURN_IF_ERROR(RequireDigest("token digest", cmd.token_digest));
  if (cmd.expires_at_ms.has_value() && *cmd.expires_at_ms <= cmd.now_ms) {
    return InvalidArgument("invalid_expiry", "a token must expire in the future");
  }
  // A token never outlives the token that minted it.
  std::optional<int64_t> expires_at_ms = cmd.expires_at_ms;
  if (cmd.parent_expires_at_ms.has_value()) {
    if (*cmd.parent_expires_at_ms <= cmd.now_ms) {
      return InvalidArgument("invalid_expiry", "the minting token has expired");
    }
    expires_at_ms = std::min(expires_at_ms.value_or(INT64_MAX), *cmd.parent_expires_at_ms);
  }
  TokenRecord out{cmd.id, cmd.principal_id, cmd.now_ms, expires_at_ms, {}, {}};
  QL_RETURN_IF_ERROR(
      runner_.Run(GovernanceTxKind::kWrite, "creating a token", [&](GovernanceTx& tx) -> Status {
        QL_RETURN_IF_ERROR(tx.LockScope(std::string(kInstallationScope)).status());
        // A principal may mint its own tokens; anyone else's need an installation admin.
        const Role required = cmd.actor.principal_id == cmd.principal_id
                                  ? Role::kNone
                                  : RequiredRole(Action::kManageIdentity);
        QL_ASSIGN_OR_RETURN(Role held,
                            Authorize(tx, cmd.actor, std::string(kInstallationScope), required));
        QL_RETURN_IF_ERROR(RequireRankOver(tx, cmd.actor, held, cmd.principal_id, "minting"));
        QL_ASSIGN_OR_RETURN(PrincipalRecord principal, RequirePrincipal(tx, cmd.principal_id));
        if (principal.status != kPrincipalActive) {
          return Conflict("principal_disabled",
                          "principal " + principal.name + " is disabled; it gets no new token");
        }
        QL_RETURN_IF_ERROR(tx.InsertToken(out, cmd.token_digest));
        return tx.InsertAudit(Fact(cmd.actor, "token.create", "token", cmd.id, {}, cmd.now_ms));
      }));
  return out;
}

Result<std::vector<TokenRecord>> GovernanceStore::ListTokens(
    const std::optional<std::string>& principal_id) {
  if (principal_id.has_value()) QL_RETURN_IF_ERROR(ValidateId("principal id", *principal_id));
  std::vector<TokenRecord> out;
  QL_RETURN_IF_ERROR(
      runner_.Run(GovernanceTxKind::kRead, "listing tokens", [&](GovernanceTx& tx) -> Status {
        QL_ASSIGN_OR_RETURN(out, tx.ListTokens(principal_id));
        return Status();
      }));
  return out;
}

Result<TokenRecord> GovernanceStore::RevokeToken(const Actor& actor, const std::string& token_id,
                                                 int64_t now_ms) {
  QL_RETURN_IF_ERROR(ValidateId("token id", token_id));
  TokenRecord out;
  QL_RETURN_IF_ERROR(
      runner_.Run(GovernanceTxKind::kWrite, "revoking a token", [&](GovernanceTx& tx) -> Status {
        QL_RETURN_IF_ERROR(tx.LockScope(std::string(kInstallationScope)).status());
        QL_ASSIGN_OR_RETURN(std::optional<TokenRecord> token, tx.LoadToken(token_id));
        if (!token.has_value()) {
          return NotFound("token_not_found", "token " + token_id + " does not exist");
        }
        const Role required = actor.principal_id == token->principal_id
                                  ? Role::kNone
                                  : RequiredRole(Action::kManageIdentity);
        QL_ASSIGN_OR_RETURN(Role held,
                            Authorize(tx, actor, std::string(kInstallationScope), required));
        QL_RETURN_IF_ERROR(RequireRankOver(tx, actor, held, token->principal_id, "revoking"));
        if (!token->revoked_at_ms.has_value()) {
          QL_RETURN_IF_ERROR(tx.SetTokenRevoked(token_id, now_ms));
          QL_RETURN_IF_ERROR(
              tx.InsertAudit(Fact(actor, "token.revoke", "token", token_id, {}, now_ms)));
        }
        QL_ASSIGN_OR_RETURN(token, tx.LoadToken(token_id));
        out = std::move(*token);
        return Status();
      }));
  return out;
}

Result<Authentication> GovernanceStore::Authenticate(const std::string& token_digest,
                                                     int64_t now_ms) {
  QL_RETURN_IF_ERROR(RequireDigest("token digest", token_digest));
  Authentication out;
  QL_RETURN_IF_ERROR(runner_.Run(
      GovernanceTxKind::kRead, "authenticating a token", [&](GovernanceTx& tx) -> Status {
        QL_ASSIGN_OR_RETURN(std::optional<TokenRecord> token, tx.LoadTokenByDigest(token_digest));
        if (!token.has_value()) return NotFound("token_unknown", "the token is not known");
        if (token->revoked_at_ms.has_value()) {
          return Conflict("token_revoked", "token " + token->id + " was revoked");
        }
        if (token->expires_at_ms.has_value() && *token->expires_at_ms <= now_ms) {
          return Conflict("token_expired", "token " + token->id + " has expired");
        }
        if (token->idle_timeout_ms.has_value() &&
            token->last_used_at_ms.value_or(token->created_at_ms) + *token->idle_timeout_ms <=
                now_ms) {
          return Conflict("token_expired", "session " + token->id + " ended after idling");
        }
        QL_ASSIGN_OR_RETURN(PrincipalRecord principal, RequirePrincipal(tx, token->principal_id));
        if (principal.status != kPrincipalActive) {
          return Conflict("principal_disabled", "principal " + principal.name + " is disabled");
        }
        out = Authentication{std::move(principal), std::move(*token)};
        return Status();
      }));
  return out;
}

Status GovernanceStore::TouchToken(const std::string& token_id, int64_t now_ms) {
  QL_RETURN_IF_ERROR(ValidateId("token id", token_id));
  return runner_.Run(GovernanceTxKind::kTouch, "recording a token's use",
                     [&](GovernanceTx& tx) { return tx.SetTokenUsed(token_id, now_ms); });
}

Result<ProjectRecord> GovernanceStore::CreateProject(const CreateProjectCommand& cmd) {
  QL_RETURN_IF_ERROR(ValidateId("project id", cmd.id));
  QL_RETURN_IF_ERROR(ValidateProjectSlug(cmd.slug));
  if (cmd.name.empty() || cmd.name.size() > 256) {
    return InvalidArgument("invalid_project_name", "a project's display name must be 1-256 bytes");
  }
  ProjectRecord out{cmd.id, cmd.slug,   cmd.name,  std::string(kProjectActive),
                    1,      cmd.now_ms, cmd.now_ms};
  QL_RETURN_IF_ERROR(
      runner_.Run(GovernanceTxKind::kWrite, "creating a project", [&](GovernanceTx& tx) -> Status {
        QL_RETURN_IF_ERROR(tx.LockScope(std::string(kInstallationScope)).status());
        QL_RETURN_IF_ERROR(AuthorizeOnly(tx, cmd.actor, std::string(kInstallationScope),
                                         RequiredRole(Action::kManageIdentity)));
        QL_RETURN_IF_ERROR(tx.InsertProject(out));
        if (!cmd.actor.principal_id.empty()) {
          QL_RETURN_IF_ERROR(tx.InsertBinding(RoleBindingRecord{
              cmd.id, cmd.actor.principal_id, 1, std::string(RoleName(Role::kOwner)),
              "project-create:" + cmd.id, cmd.actor.principal_id, cmd.now_ms}));
        }
        return tx.InsertAudit(
            Fact(cmd.actor, "project.create", "project", cmd.id, cmd.id, cmd.now_ms));
      }));
  return out;
}

Result<ProjectRecord> GovernanceStore::ArchiveProject(const Actor& actor,
                                                      const std::string& project_id,
                                                      int64_t now_ms) {
  QL_RETURN_IF_ERROR(ValidateId("project id", project_id));
  ProjectRecord out;
  QL_RETURN_IF_ERROR(
      runner_.Run(GovernanceTxKind::kWrite, "archiving a project", [&](GovernanceTx& tx) -> Status {
        QL_ASSIGN_OR_RETURN(bool exists, tx.LockScope(project_id));
        if (!exists) {
          return NotFound("project_not_found", "project " + project_id + " does not exist");
        }
        QL_RETURN_IF_ERROR(
            AuthorizeOnly(tx, actor, project_id, RequiredRole(Action::kArchiveProject)));
        QL_ASSIGN_OR_RETURN(ProjectRecord project, RequireProject(tx, project_id));
        if (project.status != kProjectArchived) {
          QL_RETURN_IF_ERROR(tx.UpdateProjectStatus(project_id, std::string(kProjectArchived),
                                                    project.version, now_ms));
          QL_RETURN_IF_ERROR(tx.InsertAudit(
              Fact(actor, "project.archive", "project", project_id, project_id, now_ms)));
        }
        QL_ASSIGN_OR_RETURN(out, RequireProject(tx, project_id));
        return Status();
      }));
  return out;
}

Result<WriteBindingResult> GovernanceStore::WriteBinding(const WriteBindingCommand& cmd) {
  if (cmd.scope != kInstallationScope) QL_RETURN_IF_ERROR(ValidateId("scope", cmd.scope));
  QL_RETURN_IF_ERROR(ValidateId("subject id", cmd.subject_id));
  QL_ASSIGN_OR_RETURN(Role new_role, ParseRole(cmd.role));
  if (cmd.scope == kInstallationScope && new_role != Role::kNone && new_role < Role::kAdmin) {
    // Lower installation roles would carry no permission anywhere; refuse rather than mislead.
    return InvalidArgument("invalid_role",
                           "the installation scope knows only the roles owner and admin");
  }
  QL_RETURN_IF_ERROR(RequireText("mutation_id", cmd.mutation_id));
  if (cmd.mutation_id.size() > 128) {
    return InvalidArgument("invalid_mutation_id", "a mutation id is at most 128 bytes");
  }
  WriteBindingResult out;
  QL_RETURN_IF_ERROR(runner_.Run(
      GovernanceTxKind::kWrite, "writing a role binding", [&](GovernanceTx& tx) -> Status {
        QL_ASSIGN_OR_RETURN(bool exists, tx.LockScope(cmd.scope));
        if (!exists) {
          return NotFound("project_not_found", "project " + cmd.scope + " does not exist");
        }
        QL_ASSIGN_OR_RETURN(std::optional<RoleBindingRecord> replay,
                            tx.LoadBindingByMutation(cmd.mutation_id));
        if (replay.has_value()) {
          if (replay->scope == cmd.scope && replay->subject_id == cmd.subject_id &&
              replay->role == cmd.role) {
            out = WriteBindingResult{std::move(*replay), true};
            return Status();
          }
          return Conflict("mutation_id_reused", "mutation id " + Quote(cmd.mutation_id) +
                                                    " was used for another binding write");
        }
        QL_ASSIGN_OR_RETURN(Role held,
                            Authorize(tx, cmd.actor, cmd.scope, RequiredRole(Action::kGrantRole)));
        if (cmd.scope != kInstallationScope) {
          QL_ASSIGN_OR_RETURN(ProjectRecord project, RequireProject(tx, cmd.scope));
          if (project.status != kProjectActive) {
            return Conflict("project_archived", "project " + project.slug + " is archived");
          }
        }
        QL_RETURN_IF_ERROR(RequirePrincipal(tx, cmd.subject_id).status());
        QL_ASSIGN_OR_RETURN(std::optional<RoleBindingRecord> current,
                            tx.LoadCurrentBinding(cmd.scope, cmd.subject_id));
        const Role current_role = RoleOf(current);
        QL_RETURN_IF_ERROR(CheckGrant(held, current_role, new_role, cmd.scope));
        if (current_role == Role::kOwner && new_role != Role::kOwner) {
          QL_ASSIGN_OR_RETURN(int owners, CountActiveOwners(tx, cmd.scope));
          if (owners <= 1) {
            return Conflict("last_owner",
                            "the last owner of " + ScopeLabel(cmd.scope) + " cannot be removed");
          }
        }
        RoleBindingRecord next{
            cmd.scope, cmd.subject_id,  current.has_value() ? current->version + 1 : 1,
            cmd.role,  cmd.mutation_id, cmd.actor.principal_id,
            cmd.now_ms};
        QL_RETURN_IF_ERROR(tx.InsertBinding(next));
        QL_RETURN_IF_ERROR(tx.BumpScope(cmd.scope, cmd.now_ms));
        // A role taken away (or lowered) ends the subject's sessions: a person signs in again
        // under what they may do now. API tokens stay; every request is authorized afresh.
        if (new_role < current_role) {
          QL_RETURN_IF_ERROR(tx.RevokeSessionsOf(cmd.subject_id, "", cmd.now_ms));
        }
        std::optional<std::string> project;
        if (cmd.scope != kInstallationScope) project = cmd.scope;
        QL_RETURN_IF_ERROR(tx.InsertAudit(
            Fact(cmd.actor, new_role == Role::kNone ? "binding.revoke" : "binding.grant",
                 "principal", cmd.subject_id, project, cmd.now_ms)));
        out = WriteBindingResult{std::move(next), false};
        return Status();
      }));
  return out;
}

Result<std::vector<RoleBindingRecord>> GovernanceStore::ListBindings(const std::string& scope) {
  if (scope != kInstallationScope) QL_RETURN_IF_ERROR(ValidateId("scope", scope));
  std::vector<RoleBindingRecord> out;
  QL_RETURN_IF_ERROR(runner_.Run(
      GovernanceTxKind::kRead, "listing role bindings", [&](GovernanceTx& tx) -> Status {
        QL_ASSIGN_OR_RETURN(std::vector<RoleBindingRecord> all, tx.ListCurrentBindings(scope));
        for (RoleBindingRecord& b : all) {
          if (b.role != RoleName(Role::kNone)) out.push_back(std::move(b));
        }
        return Status();
      }));
  return out;
}

Result<PrincipalRoles> GovernanceStore::RolesOf(const std::string& principal_id) {
  QL_RETURN_IF_ERROR(ValidateId("principal id", principal_id));
  PrincipalRoles out;
  QL_RETURN_IF_ERROR(runner_.Run(
      GovernanceTxKind::kRead, "reading a principal's roles", [&](GovernanceTx& tx) -> Status {
        QL_ASSIGN_OR_RETURN(std::vector<RoleBindingRecord> all, tx.CurrentBindingsOf(principal_id));
        for (const RoleBindingRecord& b : all) {
          QL_ASSIGN_OR_RETURN(Role role, ParseRole(b.role));
          if (role == Role::kNone) continue;
          if (b.scope == kInstallationScope) {
            out.installation = role;
          } else {
            out.projects.emplace_back(b.scope, role);
          }
        }
        return Status();
      }));
  return out;
}

Status GovernanceStore::AppendAudit(const AuditRecord& fact) {
  QL_RETURN_IF_ERROR(ValidateAudit(fact));
  return runner_.Run(GovernanceTxKind::kAuditAppend, "appending an audit fact",
                     [&](GovernanceTx& tx) { return tx.InsertAudit(fact); });
}

Result<Page<AuditRecord>> GovernanceStore::ListAudit(const PageRequest& page) {
  QL_RETURN_IF_ERROR(RequireLimit("limit", page.limit));
  std::optional<std::string> before;
  if (page.after_key.has_value()) {
    QL_ASSIGN_OR_RETURN(before, DecodeIdKey(kAuditListing, *page.after_key));
  }
  Page<AuditRecord> out;
  QL_RETURN_IF_ERROR(runner_.Run(
      GovernanceTxKind::kAuditRead, "listing the audit", [&](GovernanceTx& tx) -> Status {
        QL_ASSIGN_OR_RETURN(out.items, tx.ListAudit(before, page.limit + 1));
        return Status();
      }));
  if (static_cast<int>(out.items.size()) > page.limit) {
    out.items.resize(page.limit);
    out.next_key = EncodeIdKey(kAuditListing, out.items.back().id);
  }
  return out;
}

Result<BootstrapResult> GovernanceStore::Bootstrap(const BootstrapCommand& cmd) {
  QL_RETURN_IF_ERROR(ValidateId("principal id", cmd.principal_id));
  QL_RETURN_IF_ERROR(ValidatePrincipalName(cmd.name));
  QL_RETURN_IF_ERROR(ValidatePrincipalKind(cmd.kind));
  QL_RETURN_IF_ERROR(ValidateId("token id", cmd.token_id));
  QL_RETURN_IF_ERROR(RequireDigest("token digest", cmd.token_digest));
  QL_RETURN_IF_ERROR(RequireText("mutation_id", cmd.mutation_id));
  const std::string installation(kInstallationScope);
  BootstrapResult out;
  QL_RETURN_IF_ERROR(runner_.Run(
      GovernanceTxKind::kWrite, "bootstrapping the installation", [&](GovernanceTx& tx) -> Status {
        QL_RETURN_IF_ERROR(tx.LockScope(installation).status());
        QL_ASSIGN_OR_RETURN(std::optional<PrincipalRecord> principal,
                            tx.LoadPrincipalByName(cmd.name));
        QL_ASSIGN_OR_RETURN(int owners, CountActiveOwners(tx, installation));
        const Actor system;
        if (owners > 0) {
          std::optional<RoleBindingRecord> binding;
          if (principal.has_value()) {
            QL_ASSIGN_OR_RETURN(binding, tx.LoadCurrentBinding(installation, principal->id));
          }
          if (!principal.has_value() || RoleOf(binding) != Role::kOwner ||
              principal->status != kPrincipalActive) {
            return Conflict("already_bootstrapped",
                            "the installation has an owner already; grant roles with ql role "
                            "grant");
          }
        } else {
          if (!principal.has_value()) {
            principal = PrincipalRecord{
                cmd.principal_id, cmd.kind,  cmd.name, std::string(kPrincipalActive), 1,
                cmd.now_ms,       cmd.now_ms};
            QL_RETURN_IF_ERROR(tx.InsertPrincipal(*principal));
            QL_RETURN_IF_ERROR(tx.InsertAudit(
                Fact(system, "principal.create", "principal", principal->id, {}, cmd.now_ms)));
          } else if (principal->status != kPrincipalActive) {
            QL_RETURN_IF_ERROR(tx.UpdatePrincipalStatus(
                principal->id, std::string(kPrincipalActive), principal->version, cmd.now_ms));
          }
          QL_ASSIGN_OR_RETURN(std::optional<RoleBindingRecord> current,
                              tx.LoadCurrentBinding(installation, principal->id));
          QL_RETURN_IF_ERROR(tx.InsertBinding(RoleBindingRecord{
              installation, principal->id, current.has_value() ? current->version + 1 : 1,
              std::string(RoleName(Role::kOwner)), cmd.mutation_id, principal->id, cmd.now_ms}));
          QL_RETURN_IF_ERROR(tx.BumpScope(installation, cmd.now_ms));
          QL_RETURN_IF_ERROR(tx.InsertAudit(
              Fact(system, "binding.grant", "principal", principal->id, {}, cmd.now_ms)));
          out.bootstrapped = true;
        }
        QL_ASSIGN_OR_RETURN(std::optional<TokenRecord> token,
                            tx.LoadTokenByDigest(cmd.token_digest));
        if (token.has_value() && token->principal_id != principal->id) {
          return Conflict("token_taken", "the token belongs to another principal");
        }
        if (!token.has_value()) {
          QL_RETURN_IF_ERROR(tx.InsertToken(
              TokenRecord{cmd.token_id, principal->id, cmd.now_ms, {}, {}, {}}, cmd.token_digest));
          QL_RETURN_IF_ERROR(
              tx.InsertAudit(Fact(system, "token.create", "token", cmd.token_id, {}, cmd.now_ms)));
          out.token_added = true;
        }
        QL_ASSIGN_OR_RETURN(principal, tx.LoadPrincipal(principal->id));
        out.principal = std::move(*principal);
        return Status();
      }));
  return out;
}

Result<std::optional<PasswordRecord>> GovernanceStore::GetPassword(
    const std::string& principal_id) {
  QL_RETURN_IF_ERROR(ValidateId("principal id", principal_id));
  std::optional<PasswordRecord> out;
  // On the role that writes passwords: the runtime role never reads a hash.
  QL_RETURN_IF_ERROR(
      runner_.Run(GovernanceTxKind::kWrite, "reading a password", [&](GovernanceTx& tx) -> Status {
        QL_ASSIGN_OR_RETURN(out, tx.LoadPassword(principal_id));
        return Status();
      }));
  return out;
}

Status GovernanceStore::SetPassword(const SetPasswordCommand& cmd) {
  QL_RETURN_IF_ERROR(ValidateId("principal id", cmd.principal_id));
  QL_RETURN_IF_ERROR(RequireText("password hash", cmd.hash));
  return runner_.Run(
      GovernanceTxKind::kWrite, "setting a password", [&](GovernanceTx& tx) -> Status {
        QL_RETURN_IF_ERROR(tx.LockScope(std::string(kInstallationScope)).status());
        // A principal sets its own; anyone else's needs an installation admin of its rank.
        const Role required = cmd.actor.principal_id == cmd.principal_id
                                  ? Role::kNone
                                  : RequiredRole(Action::kManageIdentity);
        QL_ASSIGN_OR_RETURN(Role held,
                            Authorize(tx, cmd.actor, std::string(kInstallationScope), required));
        QL_RETURN_IF_ERROR(
            RequireRankOver(tx, cmd.actor, held, cmd.principal_id, "setting the password of"));
        QL_ASSIGN_OR_RETURN(PrincipalRecord principal, RequirePrincipal(tx, cmd.principal_id));
        if (principal.status != kPrincipalActive) {
          return Conflict("principal_disabled",
                          "principal " + principal.name + " is disabled; enable it first");
        }
        QL_ASSIGN_OR_RETURN(std::optional<PasswordRecord> existing,
                            tx.LoadPassword(cmd.principal_id));
        PasswordRecord next;
        if (existing.has_value() && !cmd.clear_second_factor) next = *existing;
        next.principal_id = cmd.principal_id;
        next.hash = cmd.hash;
        next.must_change = cmd.must_change;
        next.set_at_ms = cmd.now_ms;
        next.failed_attempts = 0;
        next.locked_until_ms.reset();
        QL_RETURN_IF_ERROR(tx.UpsertPassword(next));
        QL_RETURN_IF_ERROR(tx.RevokeSessionsOf(cmd.principal_id, cmd.keep_token_id, cmd.now_ms));
        QL_RETURN_IF_ERROR(
            LiftRestriction(tx, cmd.keep_token_id, cmd.principal_id, kRestrictPasswordChange));
        return tx.InsertAudit(
            Fact(cmd.actor, "password.set", "principal", cmd.principal_id, {}, cmd.now_ms));
      });
}

Status GovernanceStore::RemovePassword(const Actor& actor, const std::string& principal_id,
                                       int64_t now_ms) {
  QL_RETURN_IF_ERROR(ValidateId("principal id", principal_id));
  return runner_.Run(
      GovernanceTxKind::kWrite, "removing a password", [&](GovernanceTx& tx) -> Status {
        QL_RETURN_IF_ERROR(tx.LockScope(std::string(kInstallationScope)).status());
        QL_ASSIGN_OR_RETURN(Role held, Authorize(tx, actor, std::string(kInstallationScope),
                                                 RequiredRole(Action::kManageIdentity)));
        QL_RETURN_IF_ERROR(
            RequireRankOver(tx, actor, held, principal_id, "removing the password of"));
        QL_RETURN_IF_ERROR(RequirePrincipal(tx, principal_id).status());
        QL_ASSIGN_OR_RETURN(std::optional<PasswordRecord> existing, tx.LoadPassword(principal_id));
        if (!existing.has_value()) {
          return NotFound("password_not_set", "this principal has no password");
        }
        QL_RETURN_IF_ERROR(tx.DeletePassword(principal_id));
        QL_RETURN_IF_ERROR(tx.RevokeSessionsOf(principal_id, "", now_ms));
        return tx.InsertAudit(
            Fact(actor, "password.remove", "principal", principal_id, {}, now_ms));
      });
}

Result<TokenRecord> GovernanceStore::RecordSignIn(const SignInCommand& cmd) {
  QL_RETURN_IF_ERROR(ValidateId("principal id", cmd.principal_id));
  if (cmd.password_ok) {
    QL_RETURN_IF_ERROR(ValidateId("session id", cmd.session.id));
    QL_RETURN_IF_ERROR(RequireDigest("session digest", cmd.session_digest));
  }
  const Actor actor{cmd.principal_id, cmd.request_id};
  TokenRecord out;
  bool failed = false;
  QL_RETURN_IF_ERROR(
      runner_.Run(GovernanceTxKind::kWrite, "recording a sign-in", [&](GovernanceTx& tx) -> Status {
        QL_ASSIGN_OR_RETURN(std::optional<PrincipalRecord> principal,
                            tx.LoadPrincipal(cmd.principal_id));
        QL_ASSIGN_OR_RETURN(std::optional<PasswordRecord> password,
                            tx.LoadPassword(cmd.principal_id));
        if (!principal.has_value() || !password.has_value()) {
          return NotFound("principal_not_found", "no password is set for this principal");
        }
        const bool locked =
            password->locked_until_ms.has_value() && *password->locked_until_ms > cmd.now_ms;
        const bool active = principal->status == kPrincipalActive;
        // A confirmed second factor: a fresh TOTP step, or an unused recovery code.
        bool second_ok = !password->totp_enabled;
        if (password->totp_enabled && cmd.totp_step.has_value() &&
            *cmd.totp_step > password->totp_last_step) {
          second_ok = true;
          password->totp_last_step = *cmd.totp_step;
        }
        if (password->totp_enabled && !second_ok && cmd.recovery_digest.has_value() &&
            !cmd.recovery_digest->empty()) {
          std::string kept;
          size_t at = 0;
          const std::string& list = password->recovery_digests;
          while (at < list.size()) {
            const size_t end = std::min(list.find(' ', at), list.size());
            const std::string digest = list.substr(at, end - at);
            if (!second_ok && digest == *cmd.recovery_digest) {
              second_ok = true;
            } else if (!digest.empty()) {
              kept += (kept.empty() ? "" : " ") + digest;
            }
            at = end + 1;
          }
          password->recovery_digests = kept;
        }
        if (cmd.password_ok && second_ok && !locked && active) {
          QL_ASSIGN_OR_RETURN(out, InsertSession(tx, cmd.session, cmd.session_digest,
                                                 cmd.principal_id, cmd.now_ms));
          password->failed_attempts = 0;
          password->locked_until_ms.reset();
          QL_RETURN_IF_ERROR(tx.UpsertPassword(*password));
          return tx.InsertAudit(Fact(actor, "auth.sign_in", "token", out.id, {}, cmd.now_ms));
        }
        failed = true;
        // A wrong password or second factor counts; attempts against a locked or disabled
        // account do not extend the lock.
        if ((!cmd.password_ok || !second_ok) && !locked && active) {
          password->failed_attempts += 1;
          if (password->failed_attempts >= cmd.lock_after) {
            password->locked_until_ms = cmd.now_ms + cmd.lock_ms;
            password->failed_attempts = 0;
            AuditRecord lockout =
                Fact(actor, "auth.lockout", "principal", cmd.principal_id, {}, cmd.now_ms);
            lockout.outcome = std::string(kAuditDenied);
            lockout.code = "account_locked";
            QL_RETURN_IF_ERROR(tx.InsertAudit(lockout));
          }
          QL_RETURN_IF_ERROR(tx.UpsertPassword(*password));
        }
        AuditRecord fact =
            Fact(actor, "auth.sign_in", "principal", cmd.principal_id, {}, cmd.now_ms);
        fact.outcome = std::string(kAuditFailed);
        fact.code = locked ? "account_locked" : !active ? "principal_disabled" : "sign_in_failed";
        return tx.InsertAudit(fact);
      }));
  if (failed) {
    return PermissionDenied("sign_in_failed",
                            "wrong name or password, or too many attempts; try again later");
  }
  return out;
}

Status GovernanceStore::SetSecondFactor(const SetSecondFactorCommand& cmd) {
  QL_RETURN_IF_ERROR(ValidateId("principal id", cmd.principal_id));
  QL_RETURN_IF_ERROR(RequireText("audit action", cmd.audit_action));
  if (cmd.actor.principal_id != cmd.principal_id) {
    return PermissionDenied("permission_denied",
                            "a second factor is set by its own principal only");
  }
  return runner_.Run(
      GovernanceTxKind::kWrite, "setting a second factor", [&](GovernanceTx& tx) -> Status {
        QL_ASSIGN_OR_RETURN(PrincipalRecord principal, RequirePrincipal(tx, cmd.principal_id));
        if (principal.status != kPrincipalActive) {
          return Conflict("principal_disabled", "principal " + principal.name + " is disabled");
        }
        QL_ASSIGN_OR_RETURN(std::optional<PasswordRecord> password,
                            tx.LoadPassword(cmd.principal_id));
        if (!password.has_value()) {
          return NotFound("password_not_set",
                          "set a password first: a second factor guards a password sign-in");
        }
        password->totp_secret = cmd.totp_secret;
        password->totp_enabled = cmd.totp_enabled && !cmd.totp_secret.empty();
        password->totp_last_step = cmd.totp_last_step;
        password->recovery_digests = cmd.recovery_digests;
        QL_RETURN_IF_ERROR(tx.UpsertPassword(*password));
        if (password->totp_enabled) {
          QL_RETURN_IF_ERROR(
              LiftRestriction(tx, cmd.lift_token_id, cmd.principal_id, kRestrictTotpEnrolment));
        }
        return tx.InsertAudit(
            Fact(cmd.actor, cmd.audit_action, "principal", cmd.principal_id, {}, cmd.now_ms));
      });
}

Result<InstallationSettings> GovernanceStore::GetInstallationSettings() {
  InstallationSettings out;
  // On the role that signs people in (it reads the set-up code's digest).
  QL_RETURN_IF_ERROR(runner_.Run(GovernanceTxKind::kWrite, "reading the installation settings",
                                 [&](GovernanceTx& tx) -> Status {
                                   QL_ASSIGN_OR_RETURN(out, tx.LoadInstallationSettings());
                                   return Status();
                                 }));
  return out;
}

Result<InstallationSettings> GovernanceStore::SetRequireSecondFactor(const Actor& actor,
                                                                     const std::string& value,
                                                                     int64_t now_ms) {
  if (value != kSecondFactorOff && value != kSecondFactorAdmins && value != kSecondFactorEveryone) {
    return InvalidArgument(
        "invalid_setting",
        "require_second_factor is one of off, admins, everyone; got " + Quote(value.substr(0, 64)));
  }
  InstallationSettings out;
  QL_RETURN_IF_ERROR(
      runner_.Run(GovernanceTxKind::kWrite, "writing the installation settings",
                  [&](GovernanceTx& tx) -> Status {
                    QL_RETURN_IF_ERROR(tx.LockScope(std::string(kInstallationScope)).status());
                    QL_RETURN_IF_ERROR(Authorize(tx, actor, std::string(kInstallationScope),
                                                 RequiredRole(Action::kManageIdentity))
                                           .status());
                    QL_ASSIGN_OR_RETURN(out, tx.LoadInstallationSettings());
                    if (out.require_second_factor == value) return Status();
                    out.require_second_factor = value;
                    QL_RETURN_IF_ERROR(tx.UpdateInstallationSettings(out, now_ms));
                    QL_ASSIGN_OR_RETURN(out, tx.LoadInstallationSettings());
                    AuditRecord fact = Fact(actor, "settings.write", "installation",
                                            std::string(kInstallationScope), {}, now_ms);
                    fact.code = "require_second_factor=" + value;
                    return tx.InsertAudit(fact);
                  }));
  out.setup_code_digest.reset();
  return out;
}

Status GovernanceStore::SetSetupCode(const std::string& code_digest, int64_t expires_at_ms,
                                     int64_t now_ms) {
  QL_RETURN_IF_ERROR(RequireDigest("set-up code digest", code_digest));
  return runner_.Run(
      GovernanceTxKind::kWrite, "storing the set-up code", [&](GovernanceTx& tx) -> Status {
        QL_RETURN_IF_ERROR(tx.LockScope(std::string(kInstallationScope)).status());
        QL_ASSIGN_OR_RETURN(InstallationSettings settings, tx.LoadInstallationSettings());
        settings.setup_code_digest = code_digest;
        settings.setup_code_expires_at_ms = expires_at_ms;
        QL_RETURN_IF_ERROR(tx.UpdateInstallationSettings(settings, now_ms));
        return tx.InsertAudit(Fact(Actor{}, "setup.code", "installation",
                                   std::string(kInstallationScope), {}, now_ms));
      });
}

Result<SetupResult> GovernanceStore::CompleteSetup(const SetupCommand& cmd) {
  QL_RETURN_IF_ERROR(RequireDigest("set-up code digest", cmd.code_digest));
  QL_RETURN_IF_ERROR(RequireText("password hash", cmd.hash));
  QL_RETURN_IF_ERROR(ValidateId("session id", cmd.session.id));
  QL_RETURN_IF_ERROR(RequireDigest("session digest", cmd.session_digest));
  SetupResult out;
  bool refused = false;
  QL_RETURN_IF_ERROR(runner_.Run(
      GovernanceTxKind::kWrite, "completing the set-up", [&](GovernanceTx& tx) -> Status {
        QL_RETURN_IF_ERROR(tx.LockScope(std::string(kInstallationScope)).status());
        QL_ASSIGN_OR_RETURN(InstallationSettings settings, tx.LoadInstallationSettings());
        QL_ASSIGN_OR_RETURN(std::optional<PrincipalRecord> owner, BootstrapOwner(tx));
        std::optional<PasswordRecord> password;
        if (owner.has_value()) {
          QL_ASSIGN_OR_RETURN(password, tx.LoadPassword(owner->id));
        }
        const bool code_ok = settings.setup_code_digest.has_value() &&
                             ConstantTimeEquals(*settings.setup_code_digest, cmd.code_digest) &&
                             settings.setup_code_expires_at_ms.value_or(0) > cmd.now_ms;
        const Actor actor{owner.has_value() ? owner->id : std::string(), cmd.request_id};
        if (!code_ok || !owner.has_value() || password.has_value()) {
          refused = true;
          AuditRecord fact = Fact(Actor{std::string(), cmd.request_id}, "auth.setup",
                                  "installation", std::string(kInstallationScope), {}, cmd.now_ms);
          fact.outcome = std::string(kAuditFailed);
          fact.code = "setup_code_invalid";
          return tx.InsertAudit(fact);
        }
        if (owner->status != kPrincipalActive) {
          return Conflict("principal_disabled", "principal " + owner->name + " is disabled");
        }
        PasswordRecord next;
        next.principal_id = owner->id;
        next.hash = cmd.hash;
        next.set_at_ms = cmd.now_ms;
        QL_RETURN_IF_ERROR(tx.UpsertPassword(next));
        settings.setup_code_digest.reset();
        settings.setup_code_expires_at_ms.reset();
        QL_RETURN_IF_ERROR(tx.UpdateInstallationSettings(settings, cmd.now_ms));
        QL_ASSIGN_OR_RETURN(
            out.session, InsertSession(tx, cmd.session, cmd.session_digest, owner->id, cmd.now_ms));
        QL_RETURN_IF_ERROR(
            tx.InsertAudit(Fact(actor, "password.set", "principal", owner->id, {}, cmd.now_ms)));
        QL_RETURN_IF_ERROR(tx.InsertAudit(Fact(actor, "auth.setup", "installation",
                                               std::string(kInstallationScope), {}, cmd.now_ms)));
        QL_RETURN_IF_ERROR(
            tx.InsertAudit(Fact(actor, "auth.sign_in", "token", out.session.id, {}, cmd.now_ms)));
        out.principal = std::move(*owner);
        return Status();
      }));
  if (refused) {
    return PermissionDenied("setup_code_invalid",
                            "the set-up code is wrong, used or expired, or the owner has a "
                            "password already");
  }
  return out;
}

Status GovernanceStore::BeginOidcLogin(const OidcLoginRecord& login) {
  QL_RETURN_IF_ERROR(RequireDigest("state digest", login.state_digest));
  return runner_.Run(GovernanceTxKind::kWrite, "starting an OpenID Connect sign-in",
                     [&](GovernanceTx& tx) -> Status {
                       QL_RETURN_IF_ERROR(tx.PurgeOidcLogins(login.created_at_ms));
                       return tx.InsertOidcLogin(login);
                     });
}

Result<OidcLoginRecord> GovernanceStore::TakeOidcLogin(const std::string& state_digest,
                                                       int64_t now_ms) {
  QL_RETURN_IF_ERROR(RequireDigest("state digest", state_digest));
  std::optional<OidcLoginRecord> out;
  QL_RETURN_IF_ERROR(runner_.Run(GovernanceTxKind::kWrite, "finishing an OpenID Connect sign-in",
                                 [&](GovernanceTx& tx) -> Status {
                                   QL_ASSIGN_OR_RETURN(out, tx.TakeOidcLogin(state_digest));
                                   return Status();
                                 }));
  if (!out.has_value() || out->expires_at_ms <= now_ms) {
    return PermissionDenied("oidc_state_invalid",
                            "this sign-in was not started here, was used already or took too "
                            "long; start again");
  }
  return *out;
}

Result<TokenRecord> GovernanceStore::RecordExternalSignIn(const ExternalSignInCommand& cmd) {
  QL_RETURN_IF_ERROR(ValidateId("principal id", cmd.principal_id));
  QL_RETURN_IF_ERROR(ValidateId("session id", cmd.session.id));
  QL_RETURN_IF_ERROR(RequireDigest("session digest", cmd.session_digest));
  QL_RETURN_IF_ERROR(RequireText("sign-in method", cmd.method));
  const Actor actor{cmd.principal_id, cmd.request_id};
  TokenRecord out;
  bool disabled = false;
  QL_RETURN_IF_ERROR(
      runner_.Run(GovernanceTxKind::kWrite, "recording a sign-in", [&](GovernanceTx& tx) -> Status {
        QL_ASSIGN_OR_RETURN(PrincipalRecord principal, RequirePrincipal(tx, cmd.principal_id));
        if (principal.status != kPrincipalActive) {
          disabled = true;
          AuditRecord fact =
              Fact(actor, "auth.sign_in", "principal", cmd.principal_id, {}, cmd.now_ms);
          fact.outcome = std::string(kAuditFailed);
          fact.code = "principal_disabled";
          return tx.InsertAudit(fact);
        }
        QL_ASSIGN_OR_RETURN(
            out, InsertSession(tx, cmd.session, cmd.session_digest, cmd.principal_id, cmd.now_ms));
        AuditRecord fact = Fact(actor, "auth.sign_in", "token", out.id, {}, cmd.now_ms);
        fact.code = cmd.method;
        return tx.InsertAudit(fact);
      }));
  if (disabled) {
    return PermissionDenied("principal_disabled", "this account is disabled");
  }
  return out;
}

}  // namespace ql
