#pragma once

// Envelope sealing of secret values. Every secret version is sealed with its own fresh random
// data key (AEAD, aead.h); the associated data binds the ciphertext to its project, name and
// version, so a ciphertext copied to another secret or version never opens. The data key is
// wrapped by a KeyProvider. Rotating the provider's key re-wraps data keys only; ciphertexts are
// never touched. Destroying a version's wrapped key makes its ciphertext unreadable for good.

#include <cstddef>
#include <string>
#include <string_view>

#include "ql/core/secret_ref.h"
#include "ql/core/status.h"
#include "ql/secrets/aead.h"
#include "ql/secrets/key_provider.h"
#include "ql/secrets/secret_bytes.h"

namespace ql::secrets {

inline constexpr size_t kMaxSecretValueBytes = 64 * 1024;
inline constexpr std::string_view kSealedSecretPrefix = "qlseal:v1:";

// One sealed secret version, as a store keeps it.
struct SealedSecret {
  WrappedKey key;  // the version's data key, wrapped by a provider
  AeadBox value;   // the value sealed under the data key

  bool operator==(const SealedSecret&) const = default;
};

// Returns the record as one ASCII text for a row:
//   qlseal:v1:<key id>:<wrapped key>:<nonce>:<ciphertext>
// each field unpadded base64url (RFC 4648 §5). The `v1` names this layout and the AEAD
// (XChaCha20-Poly1305-IETF) with the associated data of SecretAssociatedData.
std::string EncodeSealedSecret(const SealedSecret& sealed);

// Parses a record written by EncodeSealedSecret. Errors: Corrupt `secret_corrupt` for another
// prefix or version, a wrong field count, a field that is not canonical base64url, an invalid
// key id, an empty or oversized wrapped key, a nonce of the wrong size or a ciphertext shorter
// than its tag. The message never quotes the record.
Result<SealedSecret> DecodeSealedSecret(std::string_view text);

// Returns the associated data of one secret version: "qinglong/secret-value@v1\n" followed by
// the canonical JSON {"name":..,"projectId":..,"version":N}. Errors: those of ValidateSecretRef,
// and InvalidArgument `secret_version_required` when `version.version` is unset.
Result<std::string> SecretAssociatedData(const SecretRef& version);

// Seals `value` as secret version `version` (project, name and version all set) with a fresh
// data key wrapped by `provider`; the data key is wiped before returning. Errors: those of
// SecretAssociatedData, InvalidArgument `secret_value_empty` / `secret_value_too_large` (more
// than kMaxSecretValueBytes), and the provider's Wrap errors.
Result<SealedSecret> SealSecret(KeyProvider& provider, const SecretRef& version,
                                std::string_view value);

// Returns the value of secret version `version` from `sealed`. Errors: those of
// SecretAssociatedData; Corrupt `secret_corrupt` when the ciphertext, nonce or wrapped key was
// altered, when `sealed` belongs to another project, name or version, or when the provider's key
// is not the one that wrapped the data key; and the provider's Unwrap errors (NotFound
// `secret_key_unknown`, key_provider_* of an exec provider).
Result<SecretBytes> UnsealSecret(KeyProvider& provider, const SecretRef& version,
                                 const SealedSecret& sealed);

// Re-wraps a data key from `from` to `to` without looking at any ciphertext: unwraps it with
// `from`, wraps it with `to`, wipes it. Returns `wrapped` unchanged when it is already under
// `to.key_id()`, so an interrupted rotation can simply be run again. Errors: those of
// from.Unwrap and to.Wrap.
Result<WrappedKey> RewrapDataKey(KeyProvider& from, KeyProvider& to, const WrappedKey& wrapped);

}  // namespace ql::secrets
