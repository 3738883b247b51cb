#include "ql/secrets/sealed_box.h"

#include <sodium.h>

#include <optional>

#include "ql/core/store_commands.h"

namespace ql::secrets {
namespace {

Result<std::string> DecodeKey(std::string_view public_key) {
  std::optional<std::string> raw = Base64UrlDecode(public_key);
  if (!raw.has_value() || raw->size() != crypto_box_PUBLICKEYBYTES) {
    return InvalidArgument("invalid_public_key",
                           "a public key is 32 bytes in unpadded base64url (43 characters)");
  }
  return *raw;
}

}  // namespace

Result<BoxKeyPair> NewBoxKeyPair() {
  QL_RETURN_IF_ERROR(InitializeSecrets());
  BoxKeyPair out;
  std::string pk(crypto_box_PUBLICKEYBYTES, '\0');
  out.secret_key = SecretBytes(crypto_box_SECRETKEYBYTES);
  crypto_box_keypair(reinterpret_cast<unsigned char*>(pk.data()), out.secret_key.data());
  out.public_key = Base64UrlEncode(pk);
  return out;
}

Result<std::string> SealToPublicKey(std::string_view public_key, std::string_view plaintext) {
  QL_RETURN_IF_ERROR(InitializeSecrets());
  QL_ASSIGN_OR_RETURN(std::string pk, DecodeKey(public_key));
  std::string sealed(plaintext.size() + crypto_box_SEALBYTES, '\0');
  if (crypto_box_seal(reinterpret_cast<unsigned char*>(sealed.data()),
                      reinterpret_cast<const unsigned char*>(plaintext.data()), plaintext.size(),
                      reinterpret_cast<const unsigned char*>(pk.data())) != 0) {
    return InvalidArgument("invalid_public_key", "cannot seal to this public key");
  }
  return Base64UrlEncode(sealed);
}

Result<std::string> OpenSealedBox(const BoxKeyPair& keys, std::string_view sealed) {
  QL_RETURN_IF_ERROR(InitializeSecrets());
  QL_ASSIGN_OR_RETURN(std::string pk, DecodeKey(keys.public_key));
  std::optional<std::string> raw = Base64UrlDecode(sealed);
  if (!raw.has_value() || raw->size() < crypto_box_SEALBYTES ||
      keys.secret_key.size() != crypto_box_SECRETKEYBYTES) {
    return PermissionDenied("sealed_box_invalid", "the sealed answer is damaged");
  }
  std::string plain(raw->size() - crypto_box_SEALBYTES, '\0');
  if (crypto_box_seal_open(reinterpret_cast<unsigned char*>(plain.data()),
                           reinterpret_cast<const unsigned char*>(raw->data()), raw->size(),
                           reinterpret_cast<const unsigned char*>(pk.data()),
                           keys.secret_key.data()) != 0) {
    return PermissionDenied("sealed_box_invalid",
                            "the answer was not sealed to this key, or is damaged");
  }
  return plain;
}

}  // namespace ql::secrets
