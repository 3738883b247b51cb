#pragma once

// The bridge between the envelope (envelope.h) and the stores' secret versions
// (core/secret_store.h): a SecretSealer over a KeyProvider, and the rotation that re-wraps every
// stored data key.

#include <cstdint>
#include <string>
#include <string_view>

#include "ql/core/clock.h"
#include "ql/core/secret_store.h"
#include "ql/core/status.h"
#include "ql/secrets/envelope.h"
#include "ql/secrets/key_provider.h"

namespace ql::secrets {

// Returns the stored form of `sealed`: the key id as is, the wrapped key and nonce || ciphertext
// in unpadded base64url.
SealedSecretValue ToStoredSecret(const SealedSecret& sealed);

// Parses a stored version. Errors: Corrupt `secret_corrupt` (as DecodeSealedSecret); NotFound
// `secret_not_found` for a shredded version (no wrapped key).
Result<SealedSecret> FromStoredSecret(const SealedSecretValue& stored);

// Seals and opens with one key provider. Thread-safe when the provider is.
class EnvelopeSealer final : public SecretSealer {
 public:
  // `provider` must outlive the sealer.
  explicit EnvelopeSealer(KeyProvider& provider) : provider_(provider) {}
  const std::string& key_id() const override { return provider_.key_id(); }
  // Errors: those of SealSecret.
  Result<SealedSecretValue> Seal(const SecretRef& version, std::string_view value) override;
  // Errors: those of FromStoredSecret and UnsealSecret. The plaintext is copied out of its
  // SecretBytes: the caller hands it to a command's environment.
  Result<std::string> Open(const SecretRef& version, const SealedSecretValue& sealed) override;

 private:
  KeyProvider& provider_;
};

struct RotationReport {
  int64_t rewrapped = 0;  // data keys now wrapped by `to`
  int64_t skipped = 0;    // already under `to`'s key id
  int64_t raced = 0;      // rewrapped or shredded by someone else meanwhile
};

// Re-wraps the data key of every live secret version from `from` to `to` without touching any
// ciphertext, one compare-and-set per version (audited as secret.rewrap). Versions already
// under to.key_id() are skipped, so an interrupted rotation is simply run again. Errors: those of
// the store and of from.Unwrap / to.Wrap (the rotation stops at the first; what was re-wrapped
// stays re-wrapped).
Result<RotationReport> RotateSecretKeys(SecretRepository& secrets, KeyProvider& from,
                                        KeyProvider& to, Clock& clock);

}  // namespace ql::secrets
