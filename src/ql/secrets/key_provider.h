#pragma once

// Key providers wrap and unwrap the data keys that seal secret values (see envelope.h). The
// provider's own key never leaves it: a `file` provider holds it in memory, an `exec` provider
// asks an external command (a cloud KMS or Vault CLI behind a small script).

#include <cstddef>
#include <string>
#include <string_view>

#include "ql/core/status.h"
#include "ql/secrets/secret_bytes.h"

namespace ql::secrets {

// Data keys are AEAD keys.
inline constexpr size_t kDataKeyBytes = 32;
// Bounds what a provider may return as a wrapped key.
inline constexpr size_t kMaxWrappedKeyBytes = 2048;
inline constexpr size_t kMaxKeyIdBytes = 256;

// A data key as wrapped by a provider, with the id of the key that wrapped it.
struct WrappedKey {
  std::string key_id;
  std::string ciphertext;  // opaque to everyone but the provider; 1..kMaxWrappedKeyBytes bytes

  bool operator==(const WrappedKey&) const = default;
};

// Returns ok when `key_id` is 1..kMaxKeyIdBytes printable ASCII characters without spaces
// (0x21-0x7e: enough for a file key's id, an ARN or a Vault key name); otherwise
// InvalidArgument `key_id_invalid` quoting it.
Status ValidateKeyId(std::string_view key_id);

// Wraps and unwraps data keys. Implementations are safe to call from several threads at once.
class KeyProvider {
 public:
  virtual ~KeyProvider() = default;
  // Returns the id of the key Wrap uses now; it is stored beside every wrapped key.
  virtual const std::string& key_id() const = 0;
  // Wraps a kDataKeyBytes data key under key_id(). Errors: InvalidArgument `secret_bad_key` for a
  // data key of the wrong size; each implementation documents its own.
  virtual Result<WrappedKey> Wrap(const SecretBytes& data_key) = 0;
  // Returns the data key inside `wrapped`: exactly kDataKeyBytes bytes, or an error; never
  // guessed bytes. Errors: NotFound `secret_key_unknown` when the provider does not hold the key
  // `wrapped.key_id`; Corrupt `secret_corrupt` when the wrapped key does not verify; each
  // implementation documents its own.
  virtual Result<SecretBytes> Unwrap(const WrappedKey& wrapped) = 0;
};

}  // namespace ql::secrets
