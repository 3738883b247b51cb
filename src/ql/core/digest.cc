#include "ql/core/digest.h"

#include <sha2.h>  // libmd: SHA-256 without a crypto library's initialisation or providers

#include <cstdint>
#include <initializer_list>

namespace ql {
namespace {

constexpr char kHexDigits[] = "0123456789abcdef";

std::string FinalHex(SHA2_CTX& ctx) {
  uint8_t md[SHA256_DIGEST_LENGTH];
  SHA256Final(md, &ctx);
  std::string hex;
  hex.reserve(2 * SHA256_DIGEST_LENGTH);
  for (uint8_t byte : md) {
    hex.push_back(kHexDigits[byte >> 4]);
    hex.push_back(kHexDigits[byte & 0x0f]);
  }
  return hex;
}

std::string Sha256OfParts(std::initializer_list<std::string_view> parts) {
  SHA2_CTX ctx;
  SHA256Init(&ctx);
  for (std::string_view part : parts) {
    SHA256Update(&ctx, reinterpret_cast<const uint8_t*>(part.data()), part.size());
  }
  return FinalHex(ctx);
}

}  // namespace

struct Sha256Hasher::State {
  SHA2_CTX ctx;
};

Sha256Hasher::Sha256Hasher() : state_(std::make_unique<State>()) { SHA256Init(&state_->ctx); }

Sha256Hasher::~Sha256Hasher() = default;

void Sha256Hasher::Update(std::string_view bytes) {
  SHA256Update(&state_->ctx, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

std::string Sha256Hasher::FinishHex() {
  std::string hex = FinalHex(state_->ctx);
  SHA256Init(&state_->ctx);
  return hex;
}

std::string Sha256Hex(std::string_view bytes) { return Sha256OfParts({bytes}); }

std::string DomainDigest(std::string_view domain, std::string_view canonical) {
  static constexpr char kSeparator = '\0';
  return Sha256OfParts({domain, std::string_view(&kSeparator, 1), canonical});
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  // Every byte is compared whatever the earlier ones were, so timing reveals nothing.
  volatile unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = diff | static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return diff == 0;
}

bool IsSha256Hex(std::string_view value) {
  if (value.size() != 64) return false;
  for (char c : value) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace ql
