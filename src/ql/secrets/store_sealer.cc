#include "ql/secrets/store_sealer.h"

#include <optional>
#include <utility>
#include <vector>

#include "ql/core/store_commands.h"

namespace ql::secrets {

SealedSecretValue ToStoredSecret(const SealedSecret& sealed) {
  return SealedSecretValue{sealed.key.key_id, Base64UrlEncode(sealed.key.ciphertext),
                           Base64UrlEncode(sealed.value.nonce + sealed.value.ciphertext)};
}

Result<SealedSecret> FromStoredSecret(const SealedSecretValue& stored) {
  if (stored.key_id.empty() || stored.wrapped_key.empty()) {
    return NotFound("secret_not_found", "the secret version was deleted (its key is destroyed)");
  }
  std::optional<std::string> boxed = Base64UrlDecode(stored.sealed_value);
  if (!boxed || boxed->size() < kAeadNonceBytes) {
    return Corrupt("secret_corrupt", "stored secret value is not a nonce and a ciphertext");
  }
  // One parser for every sealed record: the stored columns are the fields of a qlseal:v1 text.
  return DecodeSealedSecret(std::string(kSealedSecretPrefix) + Base64UrlEncode(stored.key_id) +
                            ":" + stored.wrapped_key + ":" +
                            Base64UrlEncode(boxed->substr(0, kAeadNonceBytes)) + ":" +
                            Base64UrlEncode(boxed->substr(kAeadNonceBytes)));
}

Result<SealedSecretValue> EnvelopeSealer::Seal(const SecretRef& version, std::string_view value) {
  QL_ASSIGN_OR_RETURN(SealedSecret sealed, SealSecret(provider_, version, value));
  return ToStoredSecret(sealed);
}

Result<std::string> EnvelopeSealer::Open(const SecretRef& version,
                                         const SealedSecretValue& stored) {
  QL_ASSIGN_OR_RETURN(SealedSecret sealed, FromStoredSecret(stored));
  QL_ASSIGN_OR_RETURN(SecretBytes value, UnsealSecret(provider_, version, sealed));
  return std::string(value.view());
}

Result<RotationReport> RotateSecretKeys(SecretRepository& secrets, KeyProvider& from,
                                        KeyProvider& to, Clock& clock) {
  RotationReport report;
  std::optional<SecretVersionKey> after;
  while (true) {
    QL_ASSIGN_OR_RETURN(std::vector<SecretVersionRecord> page,
                        secrets.ListLiveVersions(after, kRewrapBatch));
    for (const SecretVersionRecord& v : page) {
      after = SecretVersionKey{v.project_id, v.name, v.version};
      if (v.sealed.key_id == to.key_id()) {
        ++report.skipped;
        continue;
      }
      QL_ASSIGN_OR_RETURN(SealedSecret sealed, FromStoredSecret(v.sealed));
      QL_ASSIGN_OR_RETURN(WrappedKey rewrapped, RewrapDataKey(from, to, sealed.key));
      RewrapSecretCommand cmd;
      cmd.actor = Actor{"", "rotate-secret-key"};
      cmd.version = *after;
      cmd.old_key_id = v.sealed.key_id;
      cmd.old_wrapped_key = v.sealed.wrapped_key;
      cmd.new_key_id = rewrapped.key_id;
      cmd.new_wrapped_key = Base64UrlEncode(rewrapped.ciphertext);
      cmd.now_ms = clock.NowMs();
      Status st = secrets.RewrapSecret(cmd);
      if (st.reason() == "secret_key_changed") {
        ++report.raced;
        continue;
      }
      QL_RETURN_IF_ERROR(st);
      ++report.rewrapped;
    }
    if (static_cast<int>(page.size()) < kRewrapBatch) return report;
  }
}

}  // namespace ql::secrets
