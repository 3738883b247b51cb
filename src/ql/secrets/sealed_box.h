#pragma once

// Sealed boxes (libsodium crypto_box_seal: X25519 + XSalsa20-Poly1305, an ephemeral sender key)
// carry a secret to whoever holds one private key. `ql login` through single sign-on makes a key
// pair, gives the server its public key, and receives its session token sealed to it through the
// browser's redirect to its loopback listener: the browser, its history and anything on the way
// see only the sealed bytes. Keys and boxes are unpadded base64url.
//
// Errors: InvalidArgument `invalid_public_key`, PermissionDenied `sealed_box_invalid` (not sealed
// to this key, or damaged).

#include <string>
#include <string_view>

#include "ql/core/status.h"
#include "ql/secrets/secret_bytes.h"

namespace ql::secrets {

struct BoxKeyPair {
  std::string public_key;  // 32 bytes, unpadded base64url (43 characters)
  SecretBytes secret_key;  // 32 bytes
};

// A fresh key pair. Calls InitializeSecrets.
Result<BoxKeyPair> NewBoxKeyPair();
// Seals `plaintext` to `public_key`.
Result<std::string> SealToPublicKey(std::string_view public_key, std::string_view plaintext);
// Opens a box sealed to `keys.public_key`.
Result<std::string> OpenSealedBox(const BoxKeyPair& keys, std::string_view sealed);

}  // namespace ql::secrets
