#include "ql/core/totp.h"

#include <sha1.h>  // libmd

#include <array>
#include <cstring>

#include "ql/core/http_endpoint.h"

namespace ql {
namespace {

std::array<uint8_t, SHA1_DIGEST_LENGTH> HmacSha1(std::string_view key, const uint8_t* message,
                                                 size_t size) {
  constexpr size_t kBlock = 64;
  std::array<uint8_t, kBlock> k{};
  if (key.size() > kBlock) {
    SHA1_CTX ctx;
    SHA1Init(&ctx);
    SHA1Update(&ctx, reinterpret_cast<const uint8_t*>(key.data()), key.size());
    SHA1Final(k.data(), &ctx);
  } else {
    std::memcpy(k.data(), key.data(), key.size());
  }
  std::array<uint8_t, kBlock> ipad{}, opad{};
  for (size_t i = 0; i < kBlock; ++i) {
    ipad[i] = static_cast<uint8_t>(k[i] ^ 0x36);
    opad[i] = static_cast<uint8_t>(k[i] ^ 0x5c);
  }
  std::array<uint8_t, SHA1_DIGEST_LENGTH> inner{}, outer{};
  SHA1_CTX ctx;
  SHA1Init(&ctx);
  SHA1Update(&ctx, ipad.data(), ipad.size());
  SHA1Update(&ctx, message, size);
  SHA1Final(inner.data(), &ctx);
  SHA1Init(&ctx);
  SHA1Update(&ctx, opad.data(), opad.size());
  SHA1Update(&ctx, inner.data(), inner.size());
  SHA1Final(outer.data(), &ctx);
  return outer;
}

std::string HotpCode(std::string_view secret, int64_t counter) {
  uint8_t message[8];
  for (int i = 7; i >= 0; --i) {
    message[i] = static_cast<uint8_t>(counter & 0xff);
    counter >>= 8;
  }
  const auto mac = HmacSha1(secret, message, sizeof message);
  const int offset = mac[19] & 0x0f;
  const uint32_t binary = (static_cast<uint32_t>(mac[offset] & 0x7f) << 24) |
                          (static_cast<uint32_t>(mac[offset + 1]) << 16) |
                          (static_cast<uint32_t>(mac[offset + 2]) << 8) |
                          static_cast<uint32_t>(mac[offset + 3]);
  std::string code = std::to_string(binary % 1'000'000);
  return std::string(6 - code.size(), '0') + code;
}

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

}  // namespace

std::string TotpCode(std::string_view secret, int64_t unix_ms) {
  return HotpCode(secret, unix_ms / kTotpStepMs);
}

int64_t TotpMatch(std::string_view secret, std::string_view code, int64_t unix_ms) {
  bool digits = code.size() == 6;
  for (char c : code) digits = digits && c >= '0' && c <= '9';
  if (!digits) return -1;
  const int64_t step = unix_ms / kTotpStepMs;
  int64_t matched = -1;
  for (int64_t s = step - 1; s <= step + 1; ++s) {
    const std::string expected = HotpCode(secret, s);
    unsigned char diff = 0;
    for (size_t i = 0; i < 6; ++i) diff |= static_cast<unsigned char>(expected[i] ^ code[i]);
    if (diff == 0 && matched < 0) matched = s;
  }
  return matched;
}

std::string Base32Encode(std::string_view bytes) {
  std::string out;
  uint32_t buffer = 0;
  int bits = 0;
  for (unsigned char c : bytes) {
    buffer = (buffer << 8) | c;
    bits += 8;
    while (bits >= 5) {
      out += kAlphabet[(buffer >> (bits - 5)) & 0x1f];
      bits -= 5;
    }
  }
  if (bits > 0) out += kAlphabet[(buffer << (5 - bits)) & 0x1f];
  return out;
}

bool Base32Decode(std::string_view text, std::string* bytes) {
  bytes->clear();
  uint32_t buffer = 0;
  int bits = 0;
  for (char c : text) {
    if (c == ' ' || c == '=') continue;
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    const char* at = std::strchr(kAlphabet, c);
    if (at == nullptr || c == '\0') return false;
    buffer = (buffer << 5) | static_cast<uint32_t>(at - kAlphabet);
    bits += 5;
    if (bits >= 8) {
      bytes->push_back(static_cast<char>((buffer >> (bits - 8)) & 0xff));
      bits -= 8;
    }
  }
  return true;
}

std::string TotpUri(std::string_view issuer, std::string_view account, std::string_view secret) {
  return "otpauth://totp/" + PercentEncode(issuer) + ":" + PercentEncode(account) +
         "?secret=" + Base32Encode(secret) + "&issuer=" + PercentEncode(issuer) +
         "&algorithm=SHA1&digits=6&period=30";
}

}  // namespace ql
