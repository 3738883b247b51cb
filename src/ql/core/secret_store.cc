#include "ql/core/secret_store.h"

#include <utility>

#include "ql/core/ids.h"
#include "ql/core/store_commands.h"

namespace ql {
namespace {

constexpr std::string_view kSecretTarget = "secret";

std::string Label(const std::string& name, int64_t version) {
  return "secret " + name + " version " + std::to_string(version);
}

// Returns ok when `text` is 1..`max` unpadded base64url characters.
Status RequireBase64Url(std::string_view field, std::string_view text, size_t max) {
  if (text.empty() || text.size() > max || !Base64UrlDecode(text).has_value()) {
    return InvalidArgument("secret_sealed_invalid",
                           std::string(field) + " must be 1.." + std::to_string(max) +
                               " characters of unpadded base64url");
  }
  return Status::Ok();
}

Status ValidateSealed(const SealedSecretValue& sealed) {
  if (sealed.key_id.empty() || sealed.key_id.size() > 256) {
    return InvalidArgument("secret_sealed_invalid", "key id must be 1..256 characters");
  }
  QL_RETURN_IF_ERROR(RequireBase64Url("wrapped key", sealed.wrapped_key, kMaxWrappedKeyChars));
  return RequireBase64Url("sealed value", sealed.sealed_value, kMaxSealedValueChars);
}

Status ValidateNamed(const std::string& project_id, const std::string& name) {
  QL_RETURN_IF_ERROR(ValidateId("project id", project_id));
  return ValidateSecretName(name);
}

// The fence of a secret write, or (for the system) only the project's existence.
Status Fence(GovernanceTx& gov, const std::optional<PolicyFence>& fence,
             const std::string& project_id) {
  if (fence) return CheckPolicyFence(gov, *fence, project_id);
  QL_ASSIGN_OR_RETURN(std::optional<ProjectRecord> project, gov.LoadProject(project_id));
  if (!project) return NotFound("project_not_found", "project " + project_id + " does not exist");
  return Status::Ok();
}

}  // namespace

Status SecretNotFound(const SecretRef& ref, std::string_view why) {
  std::string what = "secret " + ref.name;
  if (ref.version) what += " version " + std::to_string(*ref.version);
  return NotFound("secret_not_found", what + " " + std::string(why));
}

SecretStore::SecretStore(SecretTxRunner& runner, RandomSource& random)
    : runner_(runner), random_(random) {}

AuditRecord SecretStore::Fact(const Actor& actor, std::string_view action,
                              const std::string& project_id, const std::string& name,
                              int64_t now_ms) {
  AuditRecord fact;
  {
    std::lock_guard<std::mutex> lock(random_mu_);
    fact.id = NewUuidV7(now_ms, random_);
  }
  fact.at_ms = now_ms;
  if (!actor.principal_id.empty()) fact.actor_id = actor.principal_id;
  fact.action = std::string(action);
  fact.target_kind = std::string(kSecretTarget);
  fact.target_id = name;
  fact.project_id = project_id;
  fact.outcome = std::string(kAuditOk);
  fact.code = std::string(kAuditOk);
  fact.request_id = actor.request_id;
  return fact;
}

Result<SecretVersionRecord> SecretStore::PutSecret(const PutSecretCommand& cmd) {
  QL_RETURN_IF_ERROR(ValidateNamed(cmd.project_id, cmd.name));
  if (cmd.version < 1) {
    return InvalidArgument("secret_ref_version_invalid",
                           "secret version must be >= 1, got " + std::to_string(cmd.version));
  }
  QL_RETURN_IF_ERROR(ValidateSealed(cmd.sealed));
  SecretVersionRecord stored;
  const AuditRecord fact = Fact(cmd.actor, "secret.write", cmd.project_id, cmd.name, cmd.now_ms);
  QL_RETURN_IF_ERROR(
      runner_.Run(SecretTxKind::kWrite, "write secret", [&](GovernanceTx& gov, SecretTx& tx) {
        QL_RETURN_IF_ERROR(Fence(gov, cmd.fence, cmd.project_id));
        QL_ASSIGN_OR_RETURN(std::optional<SecretRecord> head,
                            tx.LoadSecret(cmd.project_id, cmd.name));
        const int64_t current = head ? head->current_version : 0;
        if (cmd.version != current + 1) {
          return Conflict("secret_version_conflict",
                          Label(cmd.name, cmd.version) + " cannot follow version " +
                              std::to_string(current) + " (another writer came first)");
        }
        SecretRecord next = head.value_or(SecretRecord{cmd.project_id, cmd.name, 0, "", cmd.now_ms,
                                                       cmd.now_ms, std::nullopt});
        next.current_version = cmd.version;
        next.status = std::string(kSecretActive);
        next.updated_at_ms = cmd.now_ms;
        next.deleted_at_ms.reset();
        QL_RETURN_IF_ERROR(tx.SaveSecret(next, /*insert=*/!head.has_value()));
        stored = SecretVersionRecord{cmd.project_id,         cmd.name,  cmd.version,
                                     cmd.sealed,             "",        cmd.now_ms,
                                     std::nullopt};
        stored.created_by = cmd.actor.principal_id;
        QL_RETURN_IF_ERROR(tx.InsertVersion(stored));
        return gov.InsertAudit(fact);
      }));
  return stored;
}

Result<SecretRecord> SecretStore::GetSecret(const std::string& project_id,
                                            const std::string& name) {
  QL_RETURN_IF_ERROR(ValidateNamed(project_id, name));
  std::optional<SecretRecord> head;
  QL_RETURN_IF_ERROR(
      runner_.Run(SecretTxKind::kRead, "read secret", [&](GovernanceTx&, SecretTx& tx) {
        QL_ASSIGN_OR_RETURN(head, tx.LoadSecret(project_id, name));
        return Status::Ok();
      }));
  if (!head) return SecretNotFound(SecretRef{project_id, name, {}}, "does not exist");
  return *head;
}

Result<std::vector<SecretRecord>> SecretStore::ListSecrets(const std::string& project_id) {
  QL_RETURN_IF_ERROR(ValidateId("project id", project_id));
  std::vector<SecretRecord> out;
  QL_RETURN_IF_ERROR(
      runner_.Run(SecretTxKind::kRead, "list secrets", [&](GovernanceTx&, SecretTx& tx) {
        QL_ASSIGN_OR_RETURN(out, tx.ListSecrets(project_id));
        return Status::Ok();
      }));
  return out;
}

Result<SecretVersionRecord> SecretStore::ResolveSecret(const SecretRef& ref) {
  QL_RETURN_IF_ERROR(ValidateSecretRef(ref));
  std::optional<SecretVersionRecord> found;
  Status why;
  QL_RETURN_IF_ERROR(
      runner_.Run(SecretTxKind::kRead, "resolve secret", [&](GovernanceTx&, SecretTx& tx) {
        QL_ASSIGN_OR_RETURN(std::optional<SecretRecord> head,
                            tx.LoadSecret(ref.project_id, ref.name));
        if (!head) {
          why = SecretNotFound(ref, "does not exist in the run's project");
          return Status::Ok();
        }
        if (head->status == kSecretDeleted) {
          why = SecretNotFound(ref, "was deleted");
          return Status::Ok();
        }
        const int64_t version = ref.version.value_or(head->current_version);
        QL_ASSIGN_OR_RETURN(found, tx.LoadVersion(ref.project_id, ref.name, version));
        if (!found) {
          why = SecretNotFound(ref, "does not exist (the current version is " +
                                        std::to_string(head->current_version) + ")");
        } else if (found->sealed.key_id.empty()) {
          why = SecretNotFound(ref, "was deleted");
          found.reset();
        }
        return Status::Ok();
      }));
  if (!found) return why;
  return *found;
}

Result<SecretRecord> SecretStore::DeleteSecret(const DeleteSecretCommand& cmd) {
  QL_RETURN_IF_ERROR(ValidateNamed(cmd.project_id, cmd.name));
  SecretRecord out;
  const AuditRecord fact = Fact(cmd.actor, "secret.delete", cmd.project_id, cmd.name, cmd.now_ms);
  QL_RETURN_IF_ERROR(
      runner_.Run(SecretTxKind::kWrite, "delete secret", [&](GovernanceTx& gov, SecretTx& tx) {
        QL_RETURN_IF_ERROR(Fence(gov, cmd.fence, cmd.project_id));
        QL_ASSIGN_OR_RETURN(std::optional<SecretRecord> head,
                            tx.LoadSecret(cmd.project_id, cmd.name));
        if (!head) return SecretNotFound(SecretRef{cmd.project_id, cmd.name, {}}, "does not exist");
        out = *head;
        if (head->status == kSecretDeleted) return Status::Ok();
        QL_RETURN_IF_ERROR(tx.ShredVersions(cmd.project_id, cmd.name, cmd.now_ms).status());
        out.status = std::string(kSecretDeleted);
        out.updated_at_ms = cmd.now_ms;
        out.deleted_at_ms = cmd.now_ms;
        QL_RETURN_IF_ERROR(tx.SaveSecret(out, /*insert=*/false));
        return gov.InsertAudit(fact);
      }));
  return out;
}

Result<std::vector<SecretVersionRecord>> SecretStore::ListLiveVersions(
    const std::optional<SecretVersionKey>& after, int limit) {
  QL_RETURN_IF_ERROR(RequireLimit("limit", limit));
  std::vector<SecretVersionRecord> out;
  QL_RETURN_IF_ERROR(
      runner_.Run(SecretTxKind::kRead, "list secret keys", [&](GovernanceTx&, SecretTx& tx) {
        QL_ASSIGN_OR_RETURN(out, tx.ListLiveVersions(after, limit));
        return Status::Ok();
      }));
  return out;
}

Status SecretStore::RewrapSecret(const RewrapSecretCommand& cmd) {
  QL_RETURN_IF_ERROR(ValidateNamed(cmd.version.project_id, cmd.version.name));
  QL_RETURN_IF_ERROR(ValidateSealed(SealedSecretValue{cmd.new_key_id, cmd.new_wrapped_key, "AA"}));
  const AuditRecord fact =
      Fact(cmd.actor, "secret.rewrap", cmd.version.project_id, cmd.version.name, cmd.now_ms);
  return runner_.Run(SecretTxKind::kWrite, "rewrap secret", [&](GovernanceTx& gov, SecretTx& tx) {
    QL_ASSIGN_OR_RETURN(bool changed, tx.ReplaceWrappedKey(cmd));
    if (!changed) {
      return Conflict("secret_key_changed", Label(cmd.version.name, cmd.version.version) +
                                                " no longer holds the key being replaced");
    }
    return gov.InsertAudit(fact);
  });
}

}  // namespace ql
