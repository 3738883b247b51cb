#include "ql/secrets/envelope.h"

#include <nlohmann/json.hpp>
#include <optional>
#include <utility>
#include <vector>

#include "ql/core/canonical_json.h"
#include "ql/core/store_commands.h"

namespace ql::secrets {
namespace {

constexpr std::string_view kValueDomain = "qinglong/secret-value@v1\n";
constexpr size_t kSealedFields = 4;

Status CorruptRecord(std::string_view why) {
  return Corrupt("secret_corrupt", "sealed secret record " + std::string(why));
}

// Splits `text` at every ':'.
std::vector<std::string_view> SplitFields(std::string_view text) {
  std::vector<std::string_view> fields;
  size_t begin = 0;
  while (true) {
    size_t end = text.find(':', begin);
    fields.push_back(text.substr(begin, end == std::string_view::npos ? end : end - begin));
    if (end == std::string_view::npos) return fields;
    begin = end + 1;
  }
}

}  // namespace

std::string EncodeSealedSecret(const SealedSecret& sealed) {
  return std::string(kSealedSecretPrefix) + Base64UrlEncode(sealed.key.key_id) + ":" +
         Base64UrlEncode(sealed.key.ciphertext) + ":" + Base64UrlEncode(sealed.value.nonce) + ":" +
         Base64UrlEncode(sealed.value.ciphertext);
}

Result<SealedSecret> DecodeSealedSecret(std::string_view text) {
  if (!text.starts_with(kSealedSecretPrefix)) {
    return CorruptRecord("does not start with " + std::string(kSealedSecretPrefix));
  }
  std::vector<std::string_view> fields = SplitFields(text.substr(kSealedSecretPrefix.size()));
  if (fields.size() != kSealedFields) {
    return CorruptRecord("has " + std::to_string(fields.size()) + " fields, not " +
                         std::to_string(kSealedFields));
  }
  std::string decoded[kSealedFields];
  static constexpr const char* kNames[kSealedFields] = {"key id", "wrapped key", "nonce",
                                                        "ciphertext"};
  for (size_t i = 0; i < kSealedFields; ++i) {
    std::optional<std::string> bytes = Base64UrlDecode(fields[i]);
    if (!bytes.has_value()) {
      return CorruptRecord(std::string("has a ") + kNames[i] + " that is not unpadded base64url");
    }
    decoded[i] = std::move(*bytes);
  }
  SealedSecret sealed;
  sealed.key.key_id = std::move(decoded[0]);
  sealed.key.ciphertext = std::move(decoded[1]);
  sealed.value.nonce = std::move(decoded[2]);
  sealed.value.ciphertext = std::move(decoded[3]);
  if (!ValidateKeyId(sealed.key.key_id).ok()) return CorruptRecord("has an invalid key id");
  if (sealed.key.ciphertext.empty() || sealed.key.ciphertext.size() > kMaxWrappedKeyBytes) {
    return CorruptRecord("has an empty or oversized wrapped key");
  }
  if (sealed.value.nonce.size() != kAeadNonceBytes) {
    return CorruptRecord("has a nonce of " + std::to_string(sealed.value.nonce.size()) +
                         " bytes, not " + std::to_string(kAeadNonceBytes));
  }
  if (sealed.value.ciphertext.size() < kAeadTagBytes) {
    return CorruptRecord("has a ciphertext shorter than its tag");
  }
  return sealed;
}

Result<std::string> SecretAssociatedData(const SecretRef& version) {
  if (!version.version.has_value()) {
    return InvalidArgument("secret_version_required",
                           "secret " + version.name + " is sealed per version; none was given");
  }
  QL_RETURN_IF_ERROR(ValidateSecretRef(version));
  nlohmann::json object = {
      {"projectId", version.project_id}, {"name", version.name}, {"version", *version.version}};
  // Validated fields are ASCII and an integer, so the canonical encoding cannot fail.
  return std::string(kValueDomain) + internal::CanonicalJsonLossy(object);
}

Result<SealedSecret> SealSecret(KeyProvider& provider, const SecretRef& version,
                                std::string_view value) {
  QL_ASSIGN_OR_RETURN(std::string associated_data, SecretAssociatedData(version));
  if (value.empty()) {
    return InvalidArgument("secret_value_empty", "secret " + version.name + " has an empty value");
  }
  if (value.size() > kMaxSecretValueBytes) {
    return InvalidArgument("secret_value_too_large",
                           "secret " + version.name + " has " + std::to_string(value.size()) +
                               " bytes; at most " + std::to_string(kMaxSecretValueBytes) +
                               " are allowed");
  }
  SecretBytes data_key = SecretBytes::Random(kDataKeyBytes);
  SealedSecret sealed;
  QL_ASSIGN_OR_RETURN(sealed.value, AeadSeal(data_key, value, associated_data));
  QL_ASSIGN_OR_RETURN(sealed.key, provider.Wrap(data_key));
  return sealed;
}

Result<SecretBytes> UnsealSecret(KeyProvider& provider, const SecretRef& version,
                                 const SealedSecret& sealed) {
  QL_ASSIGN_OR_RETURN(std::string associated_data, SecretAssociatedData(version));
  QL_ASSIGN_OR_RETURN(SecretBytes data_key, provider.Unwrap(sealed.key));
  return AeadOpen(data_key, sealed.value, associated_data,
                  "secret " + version.name + " version " + std::to_string(*version.version));
}

Result<WrappedKey> RewrapDataKey(KeyProvider& from, KeyProvider& to, const WrappedKey& wrapped) {
  if (wrapped.key_id == to.key_id()) return wrapped;
  QL_ASSIGN_OR_RETURN(SecretBytes data_key, from.Unwrap(wrapped));
  return to.Wrap(data_key);
}

}  // namespace ql::secrets
