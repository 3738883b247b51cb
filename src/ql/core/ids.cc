#include "ql/core/ids.h"

#include <algorithm>
#include <array>
#include <span>
#include <vector>

#include "ql/core/canonical_json.h"

namespace ql {
namespace {

constexpr char kHexDigits[] = "0123456789abcdef";
constexpr int64_t kMaxUuidV7Ms = (int64_t{1} << 48) - 1;

void AppendHex(std::uint8_t byte, std::string& out) {
  out.push_back(kHexDigits[byte >> 4]);
  out.push_back(kHexDigits[byte & 0x0f]);
}

bool IsLowerHex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

}  // namespace

std::string NewUuidV7(int64_t unix_ms, RandomSource& random) {
  const uint64_t ms = static_cast<uint64_t>(unix_ms < 0 ? 0 : std::min(unix_ms, kMaxUuidV7Ms));
  std::array<std::uint8_t, 16> b{};
  for (int i = 0; i < 6; ++i) b[i] = static_cast<std::uint8_t>(ms >> (8 * (5 - i)));
  random.Fill(std::span<std::uint8_t>(b.data() + 6, 10));
  b[6] = static_cast<std::uint8_t>(0x70 | (b[6] & 0x0f));  // version 7
  b[8] = static_cast<std::uint8_t>(0x80 | (b[8] & 0x3f));  // variant 0b10
  std::string out;
  out.reserve(36);
  for (size_t i = 0; i < b.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out.push_back('-');
    AppendHex(b[i], out);
  }
  return out;
}

bool IsCanonicalUuid(std::string_view value) {
  if (value.size() != 36) return false;
  for (size_t i = 0; i < value.size(); ++i) {
    const bool hyphen_slot = i == 8 || i == 13 || i == 18 || i == 23;
    if (hyphen_slot ? value[i] != '-' : !IsLowerHex(value[i])) return false;
  }
  return true;
}

Status ValidateId(std::string_view field, std::string_view value) {
  if (IsCanonicalUuid(value)) return Status::Ok();
  return InvalidArgument("invalid_id", std::string(field) + ": " + QuoteForMessage(value) +
                                           " is not a canonical UUID (lowercase hex, 8-4-4-4-12)");
}

std::string RandomHex(RandomSource& random, size_t bytes) {
  std::vector<std::uint8_t> buf(bytes);
  random.Fill(std::span<std::uint8_t>(buf));
  std::string out;
  out.reserve(2 * bytes);
  for (std::uint8_t byte : buf) AppendHex(byte, out);
  return out;
}

size_t UniqueIdPrefixLength(std::string_view id, const std::vector<std::string>& others,
                            size_t min_length) {
  // One character past the longest prefix `id` shares with another id tells them apart.
  size_t shared = 0;
  for (const std::string& other : others) {
    if (other == id) continue;
    size_t n = 0;
    while (n < id.size() && n < other.size() && id[n] == other[n]) ++n;
    shared = std::max(shared, n);
  }
  size_t length = std::max(shared + 1, min_length);
  while (length < id.size() && id[length - 1] == '-') ++length;
  return std::min(length, id.size());
}

}  // namespace ql
