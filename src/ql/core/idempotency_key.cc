#include "ql/core/idempotency_key.h"

#include <charconv>
#include <optional>
#include <vector>

namespace ql {
namespace {

// Quotes a fragment of untrusted input for an error message, bounded so a huge key cannot
// produce a huge message.
std::string Quote(std::string_view s) {
  constexpr std::size_t kMax = 64;
  if (s.size() <= kMax) return "'" + std::string(s) + "'";
  return "'" + std::string(s.substr(0, kMax)) + "...' (" + std::to_string(s.size()) + " bytes)";
}

Status Invalid(std::string message) {
  return InvalidArgument(std::string(kReasonInvalidIdempotencyKey), std::move(message));
}

bool IsLowerHex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

bool IsCanonicalUuid(std::string_view s) {
  if (s.size() != 36) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    bool dash_position = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash_position ? s[i] != '-' : !IsLowerHex(s[i])) return false;
  }
  return true;
}

// Parses plain decimal: digits only, no leading zero unless the token is "0", within int64.
std::optional<int64_t> ParseCanonicalDecimal(std::string_view s) {
  if (s.empty()) return std::nullopt;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  if (s.size() > 1 && s[0] == '0') return std::nullopt;
  int64_t value = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  return value;
}

}  // namespace

std::string CronIdempotencyKey(std::string_view trigger_id, int64_t trigger_revision,
                               int64_t scheduled_for_ms) {
  std::string key(kCronIdempotencyKeyPrefix);
  key.append(trigger_id);
  key.push_back(':');
  key.append(std::to_string(trigger_revision));
  key.push_back(':');
  key.append(std::to_string(scheduled_for_ms));
  return key;
}

Result<CronKeyParts> ParseCronIdempotencyKey(std::string_view key) {
  if (key.substr(0, kCronIdempotencyKeyPrefix.size()) != kCronIdempotencyKeyPrefix) {
    return Invalid("idempotency key " + Quote(key) + " does not start with '" +
                   std::string(kCronIdempotencyKeyPrefix) + "'");
  }
  std::string_view rest = key.substr(kCronIdempotencyKeyPrefix.size());
  std::vector<std::string_view> fields;
  while (true) {
    std::size_t colon = rest.find(':');
    fields.push_back(rest.substr(0, colon));
    if (colon == std::string_view::npos) break;
    rest.remove_prefix(colon + 1);
  }
  if (fields.size() != 3) {
    return Invalid("idempotency key " + Quote(key) +
                   " must have exactly 3 fields <triggerId>:<triggerRevision>:<scheduledForMs> "
                   "after the prefix, found " +
                   std::to_string(fields.size()));
  }
  CronKeyParts parts;
  if (!IsCanonicalUuid(fields[0])) {
    return Invalid("idempotency key trigger id " + Quote(fields[0]) +
                   " is not a canonical lowercase UUID (8-4-4-4-12 hex digits)");
  }
  parts.trigger_id = std::string(fields[0]);

  std::optional<int64_t> revision = ParseCanonicalDecimal(fields[1]);
  if (!revision.has_value()) {
    return Invalid("idempotency key trigger revision " + Quote(fields[1]) +
                   " is not a plain decimal integer within int64 (no sign or leading zeros)");
  }
  if (*revision < 1) {
    return Invalid("idempotency key trigger revision " + Quote(fields[1]) + " must be >= 1");
  }
  parts.trigger_revision = *revision;

  std::optional<int64_t> scheduled = ParseCanonicalDecimal(fields[2]);
  if (!scheduled.has_value()) {
    return Invalid("idempotency key scheduled time " + Quote(fields[2]) +
                   " is not a plain decimal integer within int64 (no sign or leading zeros)");
  }
  parts.scheduled_for_ms = *scheduled;
  return parts;
}

}  // namespace ql
