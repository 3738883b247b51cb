#include "ql/engine/secret_service.h"

#include <optional>

namespace ql {
namespace {

std::optional<PolicyFence> WriteFence(const Caller& caller) {
  if (caller.principal_id.empty()) return std::nullopt;
  return PolicyFence{caller.principal_id, RequiredRole(Action::kWriteSecrets)};
}

}  // namespace

SecretService::SecretService(Store& store, GovernanceService& governance, SecretSealer* sealer,
                             Clock& clock)
    : store_(store), governance_(governance), sealer_(sealer), clock_(clock) {}

Status SecretService::RequireSealer() const {
  if (sealer_ != nullptr) return Status::Ok();
  return Unavailable("secrets_unavailable",
                     "this server has no secret key provider (see docs/secret-providers.md)");
}

Result<std::string> SecretService::ProjectFor(const Caller& caller, Action action,
                                              const std::string& target) {
  return governance_.AuthorizedProjectId(caller, action, target);
}

Result<SecretRecord> SecretService::Set(const Caller& caller, const std::string& name,
                                        std::string_view value) {
  QL_RETURN_IF_ERROR(ValidateSecretName(name));
  QL_RETURN_IF_ERROR(RequireSealer());
  QL_ASSIGN_OR_RETURN(std::string project_id,
                      ProjectFor(caller, Action::kWriteSecrets, "secret " + name));
  Status last;
  for (int attempt = 0; attempt < kSecretWriteAttempts; ++attempt) {
    Result<SecretRecord> head = store_.secrets().GetSecret(project_id, name);
    if (!head.ok() && head.status().reason() != "secret_not_found") return head.status();
    const int64_t version = head.ok() ? head->current_version + 1 : 1;
    PutSecretCommand cmd;
    cmd.actor = Actor{caller.principal_id, caller.request_id};
    cmd.fence = WriteFence(caller);
    cmd.project_id = project_id;
    cmd.name = name;
    cmd.version = version;
    QL_ASSIGN_OR_RETURN(cmd.sealed, sealer_->Seal(SecretRef{project_id, name, version}, value));
    cmd.now_ms = clock_.NowMs();
    Result<SecretVersionRecord> stored = store_.secrets().PutSecret(cmd);
    if (stored.ok()) return store_.secrets().GetSecret(project_id, name);
    last = stored.status();
    if (last.reason() != "secret_version_conflict") return last;
  }
  return last;
}

Result<std::vector<SecretRecord>> SecretService::List(const Caller& caller) {
  QL_ASSIGN_OR_RETURN(std::string project_id, ProjectFor(caller, Action::kRead, "secrets"));
  return store_.secrets().ListSecrets(project_id);
}

Result<SecretRecord> SecretService::Remove(const Caller& caller, const std::string& name) {
  QL_RETURN_IF_ERROR(ValidateSecretName(name));
  QL_ASSIGN_OR_RETURN(std::string project_id,
                      ProjectFor(caller, Action::kWriteSecrets, "secret " + name));
  DeleteSecretCommand cmd;
  cmd.actor = Actor{caller.principal_id, caller.request_id};
  cmd.fence = WriteFence(caller);
  cmd.project_id = project_id;
  cmd.name = name;
  cmd.now_ms = clock_.NowMs();
  return store_.secrets().DeleteSecret(cmd);
}

}  // namespace ql
