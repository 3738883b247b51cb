#pragma once

// The idempotency key of a cron occurrence. Runs carry it under a per-project unique index, so
// admitting the same occurrence twice fails in the database by construction.

#include <cstdint>
#include <string>
#include <string_view>

#include "ql/core/status.h"

namespace ql {

inline constexpr std::string_view kCronIdempotencyKeyPrefix = "ql3:cron:v1:";
inline constexpr std::string_view kReasonInvalidIdempotencyKey = "invalid_idempotency_key";

// Returns "ql3:cron:v1:<trigger_id>:<trigger_revision>:<scheduled_for_ms>" with both numbers in
// plain decimal. The result parses back to the same parts whenever `trigger_id` is a canonical
// lowercase UUID, `trigger_revision` >= 1 and `scheduled_for_ms` >= 0; callers pass values that
// were validated when the trigger and schedule were stored.
std::string CronIdempotencyKey(std::string_view trigger_id, int64_t trigger_revision,
                               int64_t scheduled_for_ms);

struct CronKeyParts {
  std::string trigger_id;
  int64_t trigger_revision = 0;
  int64_t scheduled_for_ms = 0;

  bool operator==(const CronKeyParts&) const = default;
};

// Parses a key produced by CronIdempotencyKey. Strict: the exact prefix, then exactly three
// colon-separated fields — a canonical lowercase UUID (8-4-4-4-12 hex digits), a revision >= 1
// and a scheduled time >= 0, each number plain decimal without sign, spaces or leading zeros
// ("0" itself is allowed for the time) and within int64. Anything else is InvalidArgument with
// reason "invalid_idempotency_key" and a message naming the offending field.
Result<CronKeyParts> ParseCronIdempotencyKey(std::string_view key);

}  // namespace ql
