#include "ql/core/governance.h"

#include <algorithm>

namespace ql {
namespace {

bool IsNameChar(char c, bool allow_upper) {
  return (c >= 'a' && c <= 'z') || (allow_upper && c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9');
}

// Returns true when `text` is 1..`max` characters of letters (lowercase only unless
// `allow_upper`), digits and `punct`, starting with a letter or digit.
bool IsSimpleName(std::string_view text, size_t max, bool allow_upper, std::string_view punct) {
  if (text.empty() || text.size() > max || !IsNameChar(text.front(), allow_upper)) return false;
  return std::all_of(text.begin(), text.end(), [&](char c) {
    return IsNameChar(c, allow_upper) || punct.find(c) != std::string_view::npos;
  });
}

std::string Shorten(std::string_view text) {
  std::string out(text.substr(0, 64));
  if (text.size() > 64) out += "...";
  return out;
}

}  // namespace

std::string_view RoleName(Role role) {
  switch (role) {
    case Role::kNone:
      return "none";
    case Role::kViewer:
      return "viewer";
    case Role::kOperator:
      return "operator";
    case Role::kAdmin:
      return "admin";
    case Role::kOwner:
      return "owner";
  }
  return "none";
}

Result<Role> ParseRole(std::string_view name) {
  for (Role role : {Role::kNone, Role::kViewer, Role::kOperator, Role::kAdmin, Role::kOwner}) {
    if (RoleName(role) == name) return role;
  }
  return InvalidArgument("invalid_role", "role \"" + Shorten(name) +
                                             "\" is not one of owner, admin, operator, viewer, "
                                             "none");
}

Role RequiredRole(Action action) {
  switch (action) {
    case Action::kRead:
      return Role::kViewer;
    case Action::kOperateRuns:
    case Action::kToggleTriggers:
      return Role::kOperator;
    case Action::kPublish:
    case Action::kWriteSecrets:
    case Action::kApprove:
    case Action::kGrantRole:
    case Action::kManageIdentity:
    case Action::kReadAudit:
    case Action::kManageWorkers:
      return Role::kAdmin;
    case Action::kArchiveProject:
      return Role::kOwner;
  }
  return Role::kOwner;
}

std::string_view ActionName(Action action) {
  switch (action) {
    case Action::kRead:
      return "read";
    case Action::kOperateRuns:
      return "operate_runs";
    case Action::kToggleTriggers:
      return "toggle_triggers";
    case Action::kPublish:
      return "publish";
    case Action::kWriteSecrets:
      return "write_secrets";
    case Action::kApprove:
      return "approve";
    case Action::kGrantRole:
      return "grant_role";
    case Action::kArchiveProject:
      return "archive_project";
    case Action::kManageIdentity:
      return "manage_identity";
    case Action::kReadAudit:
      return "read_audit";
    case Action::kManageWorkers:
      return "manage_workers";
  }
  return "unknown";
}

Role EffectiveProjectRole(Role installation_role, Role project_role) {
  const Role carried = installation_role >= Role::kAdmin ? installation_role : Role::kNone;
  return std::max(carried, project_role);
}

std::string ScopeLabel(std::string_view scope) {
  if (scope == kInstallationScope) return "the installation";
  return "project " + std::string(scope);
}

Status RoleDenied(Role required, std::string_view what, std::string_view scope) {
  return PermissionDenied("permission_denied", std::string(what) + " needs role " +
                                                   std::string(RoleName(required)) + " in " +
                                                   ScopeLabel(scope));
}

Status DecidePolicy(const PolicyInputs& inputs, Role required, bool project_scope) {
  if (!inputs.principal.has_value()) {
    return PermissionDenied("principal_not_found", "the acting principal does not exist");
  }
  if (inputs.principal->status != kPrincipalActive) {
    return PermissionDenied("principal_disabled",
                            "principal " + inputs.principal->name + " is disabled");
  }
  const Role held = project_scope
                        ? EffectiveProjectRole(inputs.installation_role, inputs.project_role)
                        : inputs.installation_role;
  if (held >= required) return Status();
  return PermissionDenied(
      "permission_denied",
      "principal " + inputs.principal->name + " holds role " + std::string(RoleName(held)) +
          (project_scope ? " in the project" : " in the installation") + "; this needs role " +
          std::string(RoleName(required)));
}

Status ValidatePrincipalName(std::string_view name) {
  if (IsSimpleName(name, 64, /*allow_upper=*/true, "._-")) return Status();
  return InvalidArgument("invalid_principal_name",
                         "principal name \"" + Shorten(name) +
                             "\" must be 1-64 letters, digits, '.', '_' or '-', starting with a "
                             "letter or digit");
}

Status ValidatePrincipalKind(std::string_view kind) {
  if (kind == kPrincipalUser || kind == kPrincipalService) return Status();
  return InvalidArgument("invalid_principal_kind",
                         "principal kind \"" + Shorten(kind) + "\" is not user or service");
}

Status ValidateProjectSlug(std::string_view slug) {
  if (IsSimpleName(slug, 64, /*allow_upper=*/false, "-")) return Status();
  return InvalidArgument("invalid_project_slug",
                         "project name \"" + Shorten(slug) +
                             "\" must be 1-64 lowercase letters, digits or '-', starting with a "
                             "letter or digit");
}

Status CheckGrant(Role writer_role, Role current_role, Role new_role, std::string_view scope) {
  const Role needed =
      (new_role == Role::kOwner || current_role == Role::kOwner) ? Role::kOwner : Role::kAdmin;
  if (writer_role >= needed) return Status();
  return RoleDenied(needed,
                    std::string("changing a binding from ") + std::string(RoleName(current_role)) +
                        " to " + std::string(RoleName(new_role)),
                    scope);
}

}  // namespace ql
