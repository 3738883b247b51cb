#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ql/core/clock.h"
#include "ql/core/status.h"

namespace ql {

// Returns a new RFC 9562 UUIDv7 in canonical form (lowercase hex, hyphenated 8-4-4-4-12): the
// first 48 bits are `unix_ms` big-endian, then version 7, 12 random bits, variant 0b10 and 62
// random bits (74 random bits in all, drawn from `random`). `unix_ms` is clamped to the
// representable range [0, 2^48 - 1], so ids made later in time sort later as strings.
std::string NewUuidV7(int64_t unix_ms, RandomSource& random);

// Returns true when `value` is a UUID in canonical text form: 36 characters, lowercase hex
// digits, hyphens exactly at offsets 8, 13, 18 and 23. Any version or variant is accepted.
bool IsCanonicalUuid(std::string_view value);

// Returns ok when `value` is a canonical UUID (see IsCanonicalUuid); otherwise InvalidArgument
// with reason `invalid_id` and a message naming `field` and the offending value.
Status ValidateId(std::string_view field, std::string_view value);

// Returns `bytes` random bytes from `random` as 2 * `bytes` lowercase hex digits (for tokens).
std::string RandomHex(RandomSource& random, size_t bytes);

// Returns the length of the shortest prefix of `id`, at least `min_length` characters and never
// ending on a dash, that none of `others` other than `id` itself starts with; `id.size()` when
// no shorter prefix is unique (an id shorter than `min_length` is returned whole).
size_t UniqueIdPrefixLength(std::string_view id, const std::vector<std::string>& others,
                            size_t min_length = 8);

}  // namespace ql
