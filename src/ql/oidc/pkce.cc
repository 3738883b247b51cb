#include "ql/oidc/pkce.h"

#include <openssl/evp.h>

#include <array>
#include <cstdint>

#include "ql/oidc/jose.h"

namespace ql::oidc {
namespace {

std::string RandomBase64Url(RandomSource& random) {
  std::array<std::uint8_t, kRandomValueBytes> bytes{};
  random.Fill(bytes);
  return Base64UrlEncode(
      std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

bool IsUnreserved(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_' || c == '~';
}

}  // namespace

std::string NewCodeVerifier(RandomSource& random) { return RandomBase64Url(random); }

std::string NewState(RandomSource& random) { return RandomBase64Url(random); }

std::string NewNonce(RandomSource& random) { return RandomBase64Url(random); }

Result<std::string> CodeChallengeS256(std::string_view verifier) {
  bool valid = verifier.size() >= 43 && verifier.size() <= 128;
  for (char c : verifier) valid = valid && IsUnreserved(c);
  if (!valid) {
    return InvalidArgument("oidc_pkce_verifier_invalid",
                           "a PKCE code verifier is 43 to 128 characters of A-Z a-z 0-9 - . _ ~");
  }
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int size = 0;
  if (EVP_Digest(verifier.data(), verifier.size(), digest.data(), &size, EVP_sha256(), nullptr) !=
          1 ||
      size != 32) {
    return Internal("oidc_crypto_failed", "SHA-256 of the code verifier failed");
  }
  return Base64UrlEncode(std::string_view(reinterpret_cast<const char*>(digest.data()), size));
}

}  // namespace ql::oidc
