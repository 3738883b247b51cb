#include "ql/secrets/aead.h"

#include <sodium.h>

static_assert(ql::secrets::kAeadKeyBytes == crypto_aead_xchacha20poly1305_ietf_KEYBYTES);
static_assert(ql::secrets::kAeadNonceBytes == crypto_aead_xchacha20poly1305_ietf_NPUBBYTES);
static_assert(ql::secrets::kAeadTagBytes == crypto_aead_xchacha20poly1305_ietf_ABYTES);

namespace ql::secrets {
namespace {

const unsigned char* Bytes(std::string_view s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

Status CheckKey(const SecretBytes& key) {
  if (key.size() != kAeadKeyBytes) {
    return InvalidArgument("secret_bad_key", "an AEAD key is " + std::to_string(kAeadKeyBytes) +
                                                 " bytes, got " + std::to_string(key.size()));
  }
  return Status::Ok();
}

}  // namespace

Result<AeadBox> AeadSeal(const SecretBytes& key, std::string_view plaintext,
                         std::string_view associated_data) {
  QL_RETURN_IF_ERROR(CheckKey(key));
  AeadBox box;
  box.nonce.resize(kAeadNonceBytes);
  randombytes_buf(box.nonce.data(), box.nonce.size());
  box.ciphertext.resize(plaintext.size() + kAeadTagBytes);
  unsigned long long written = 0;
  crypto_aead_xchacha20poly1305_ietf_encrypt(
      reinterpret_cast<unsigned char*>(box.ciphertext.data()), &written, Bytes(plaintext),
      plaintext.size(), Bytes(associated_data), associated_data.size(), nullptr, Bytes(box.nonce),
      key.data());
  box.ciphertext.resize(written);
  return box;
}

Result<SecretBytes> AeadOpen(const SecretBytes& key, const AeadBox& box,
                             std::string_view associated_data, std::string_view what) {
  QL_RETURN_IF_ERROR(CheckKey(key));
  auto corrupt = [&](std::string_view why) {
    return Corrupt("secret_corrupt", std::string(what) + " " + std::string(why));
  };
  if (box.nonce.size() != kAeadNonceBytes) return corrupt("has a nonce of the wrong size");
  if (box.ciphertext.size() < kAeadTagBytes) return corrupt("is shorter than its tag");
  SecretBytes plaintext(box.ciphertext.size() - kAeadTagBytes);
  unsigned long long written = 0;
  // libsodium verifies the tag before it decrypts, and writes nothing when it does not verify.
  if (crypto_aead_xchacha20poly1305_ietf_decrypt(
          plaintext.data(), &written, nullptr, Bytes(box.ciphertext), box.ciphertext.size(),
          Bytes(associated_data), associated_data.size(), Bytes(box.nonce), key.data()) != 0) {
    return corrupt(
        "does not verify: it was altered, sealed for another secret or version, or "
        "sealed under another key");
  }
  return plaintext;
}

}  // namespace ql::secrets
