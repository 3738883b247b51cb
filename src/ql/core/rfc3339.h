#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "ql/core/status.h"
#include "ql/core/timezone.h"

namespace ql {

// Formats `unix_ms` as RFC 3339 local time in `zone` with the zone's offset at that instant,
// e.g. "2026-03-08T03:00:00-04:00". Milliseconds appear (".123") only when non-zero; the offset
// is always numeric ("+00:00" for UTC). Historical offsets with seconds (local mean time) are
// truncated to whole minutes and the printed wall time follows, so the instant stays exact.
// Years outside 0000-9999 (which RFC 3339 cannot express) print with more digits or a sign.
std::string FormatRfc3339(int64_t unix_ms, const TimeZone& zone);

// Formats `unix_ms` as RFC 3339 UTC with a "Z" suffix, e.g. "2026-03-08T07:00:00Z".
std::string FormatRfc3339Utc(int64_t unix_ms);

// Parses a strict RFC 3339 date-time "YYYY-MM-DDTHH:MM:SS[.fraction](Z|+HH:MM|-HH:MM)" ('T' and
// 'Z' may be lowercase; the fraction has 1-9 digits and is truncated to milliseconds) and
// returns Unix milliseconds. Leap seconds (:60) are rejected because Unix time has none.
// Errors: InvalidArgument "invalid_timestamp" with a message naming the offending part.
Result<int64_t> ParseRfc3339(std::string_view text);

}  // namespace ql
