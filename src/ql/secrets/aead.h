#pragma once

// The one AEAD of this library: XChaCha20-Poly1305-IETF from libsodium. Its 192-bit nonces are
// drawn at random for every message, which is safe for any number of messages under one key.

#include <cstddef>
#include <string>
#include <string_view>

#include "ql/core/status.h"
#include "ql/secrets/secret_bytes.h"

namespace ql::secrets {

inline constexpr size_t kAeadKeyBytes = 32;
inline constexpr size_t kAeadNonceBytes = 24;
inline constexpr size_t kAeadTagBytes = 16;

// A sealed message: the nonce and the ciphertext with its authentication tag appended.
struct AeadBox {
  std::string nonce;       // kAeadNonceBytes
  std::string ciphertext;  // plaintext size + kAeadTagBytes

  bool operator==(const AeadBox&) const = default;
};

// Encrypts `plaintext` under `key` with a fresh random nonce, binding `associated_data` (not
// encrypted, but required unchanged to open). Errors: InvalidArgument `secret_bad_key` when the
// key is not kAeadKeyBytes long.
Result<AeadBox> AeadSeal(const SecretBytes& key, std::string_view plaintext,
                         std::string_view associated_data);

// Decrypts `box`. Returns the plaintext only when the tag verifies, that is when the key, the
// nonce, the ciphertext and `associated_data` are all exactly those used to seal; otherwise
// Corrupt `secret_corrupt` and no plaintext at all (never partially decrypted bytes). `what`
// names the sealed thing in the message. Errors: InvalidArgument `secret_bad_key`.
Result<SecretBytes> AeadOpen(const SecretBytes& key, const AeadBox& box,
                             std::string_view associated_data, std::string_view what);

}  // namespace ql::secrets
