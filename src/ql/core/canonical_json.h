#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "ql/core/status.h"

namespace ql {

// The deepest nesting of objects and arrays a document may have (the top-level container is
// depth 1). Bounds recursion for every reader and writer of our JSON.
inline constexpr int kMaxJsonDepth = 64;

// Parses `text` as one strict JSON document (RFC 8259, UTF-8, no comments, nothing after the
// value). Returns InvalidArgument with reason
//   `invalid_json`            for a syntax error, a NUL byte included (message carries the byte
//                             offset; it is valid UTF-8),
//   `json_invalid_utf8`       for bytes that are not well-formed UTF-8 (with the byte offset),
//   `json_duplicate_key`      for a key repeated in one object (naming the key and its path),
//   `json_too_deep`           for nesting deeper than kMaxJsonDepth,
//   `json_number_unsupported` for a number that is not an integer in the int64 range
//                             (fractions, exponents, overflow): our documents carry integers.
// Every number in the result is stored as a signed int64 (`is_number_integer()`, never
// unsigned), so equal documents compare equal. Callers that rely on unique object keys (task
// environments, labels) must parse with this function: nlohmann::json::parse keeps the last
// duplicate silently.
Result<nlohmann::json> ParseJsonStrict(std::string_view text);

// Returns the canonical encoding of `value`: object keys sorted by UTF-8 byte order, no
// insignificant whitespace, integers in plain decimal, strings escaped minimally (\" \\ \b \f \n
// \r \t, other control characters as \u00xx with lowercase hex, everything else as raw UTF-8).
// Equal values give byte-identical output whatever order their keys were inserted in. Returns
// InvalidArgument with reason `json_number_unsupported` for floating-point numbers and unsigned
// integers above INT64_MAX, `json_invalid_utf8` for a string or key that is not valid UTF-8,
// `json_too_deep` beyond kMaxJsonDepth and `json_value_unsupported` for binary values; the
// message names the JSON path of the offending value.
Result<std::string> CanonicalJson(const nlohmann::json& value);

// Returns true when `bytes` is well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates,
// nothing above U+10FFFF).
bool IsValidUtf8(std::string_view bytes);

// Returns `bytes` with each byte that does not start a well-formed UTF-8 sequence replaced by
// U+FFFD.
std::string ReplaceInvalidUtf8(std::string_view bytes);

// Returns `value` as a quoted, escaped string for an error message, cut on a character boundary
// to at most `max_bytes` bytes of content with "..." appended when it was cut. Invalid UTF-8
// bytes are shown as \xNN so the message itself is always valid UTF-8.
std::string QuoteForMessage(std::string_view value, size_t max_bytes = 64);

// Returns a short description of a JSON value for an error message, such as `string "abc"`,
// `integer 5`, `boolean true`, `null`, `array of 3 elements`, `object with 2 keys` or
// `number 1.5`.
std::string DescribeJsonValue(const nlohmann::json& value);

namespace internal {

// Returns the canonical encoding of a value built by our own code, which cannot fail except on
// strings that are not valid UTF-8 (a broken caller precondition): those have each ill-formed
// byte replaced by U+FFFD so the function stays total and deterministic. Numbers that are not
// int64 are written in decimal as nlohmann prints them. Used by digests over validated structs.
std::string CanonicalJsonLossy(const nlohmann::json& value);

}  // namespace internal

}  // namespace ql
