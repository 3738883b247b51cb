#include "ql/core/digest.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <cstdlib>
#include <initializer_list>
#include <memory>

namespace ql {
namespace {

constexpr char kHexDigits[] = "0123456789abcdef";

std::string Sha256OfParts(std::initializer_list<std::string_view> parts) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int md_len = 0;
  bool ok = ctx != nullptr && EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) == 1;
  for (std::string_view part : parts) {
    ok = ok && EVP_DigestUpdate(ctx.get(), part.data(), part.size()) == 1;
  }
  ok = ok && EVP_DigestFinal_ex(ctx.get(), md, &md_len) == 1;
  // SHA-256 fails only when memory runs out; a wrong digest would be worse than stopping.
  if (!ok) std::abort();
  std::string hex;
  hex.reserve(2 * md_len);
  for (unsigned int i = 0; i < md_len; ++i) {
    hex.push_back(kHexDigits[md[i] >> 4]);
    hex.push_back(kHexDigits[md[i] & 0x0f]);
  }
  return hex;
}

}  // namespace

std::string Sha256Hex(std::string_view bytes) { return Sha256OfParts({bytes}); }

std::string DomainDigest(std::string_view domain, std::string_view canonical) {
  static constexpr char kSeparator = '\0';
  return Sha256OfParts({domain, std::string_view(&kSeparator, 1), canonical});
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  if (a.empty()) return true;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

bool IsSha256Hex(std::string_view value) {
  if (value.size() != 64) return false;
  for (char c : value) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace ql
