// Feeds the input as JSON text to ParseJsonStrict and CanonicalJson, as a document nlohmann's
// lenient parser reads (fractions, large numbers, repeated keys) to CanonicalJson, and as bytes
// to IsValidUtf8 and QuoteForMessage (canonical_json.h).
//
// Invariants:
// - strictly parsed text is UTF-8 without a NUL byte anywhere (nothing follows the value);
// - a strictly parsed document has int64 numbers only and a canonical encoding; that encoding
//   parses back to the same document, is its own canonical encoding (idempotent), equals the
//   lossy encoding, and is byte for byte what nlohmann writes for the same value (sorted keys,
//   no whitespace, the same minimal escapes);
// - a refusal is InvalidArgument with one of the documented reasons and a UTF-8 message;
// - CanonicalJson of any value accepts exactly the values with int64 numbers and at most
//   kMaxJsonDepth levels, and what it writes parses back to the same value;
// - IsValidUtf8 agrees with an independent RFC 3629 decoder;
// - QuoteForMessage always gives valid UTF-8 in quotes, keeps at most `max_bytes` bytes of the
//   value, and keeps printable UTF-8 that fits unchanged.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "json_checks.h"
#include "ql/core/canonical_json.h"

namespace {

using nlohmann::json;

// RFC 3629 validation by decoding code points, written independently of canonical_json.cc.
bool ReferenceUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char b = static_cast<unsigned char>(s[i]);
    size_t n;
    uint32_t cp;
    uint32_t min;
    if (b < 0x80) {
      ++i;
      continue;
    } else if ((b & 0xE0) == 0xC0) {
      n = 2, cp = b & 0x1F, min = 0x80;
    } else if ((b & 0xF0) == 0xE0) {
      n = 3, cp = b & 0x0F, min = 0x800;
    } else if ((b & 0xF8) == 0xF0) {
      n = 4, cp = b & 0x07, min = 0x10000;
    } else {
      return false;
    }
    if (s.size() - i < n) return false;
    for (size_t k = 1; k < n; ++k) {
      const unsigned char c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

int Depth(const json& v) {
  if (!v.is_structured()) return 0;
  int deepest = 0;
  for (const auto& child : v) deepest = std::max(deepest, Depth(child));
  return deepest + 1;
}

bool NoUnsigned(const json& v) {
  if (v.is_number_unsigned() || v.is_number_float()) return false;
  if (v.is_structured()) {
    for (const auto& child : v) {
      if (!NoUnsigned(child)) return false;
    }
  }
  return true;
}

void CheckStrict(std::string_view text) {
  const ql::Result<json> parsed = ql::ParseJsonStrict(text);
  if (!parsed.ok()) {
    ql::fuzz::CheckRefusal(parsed.status(), ql::fuzz::kStrictJsonReasons);
    return;
  }
  const json& value = *parsed;
  QL_FUZZ_CHECK(ql::IsValidUtf8(text), "invalid UTF-8 parsed");
  // A raw NUL is valid nowhere in JSON text (control characters in strings are escaped).
  QL_FUZZ_CHECK(text.find('\0') == std::string_view::npos, "a NUL byte in accepted JSON text");
  QL_FUZZ_CHECK(NoUnsigned(value), "a number that is not a signed integer");
  QL_FUZZ_CHECK(Depth(value) <= ql::kMaxJsonDepth, "too deep");
  const ql::Result<std::string> canonical = ql::CanonicalJson(value);
  QL_FUZZ_CHECK(canonical.ok(), canonical.status().ToString());
  QL_FUZZ_CHECK(*canonical == value.dump(), *canonical + " / " + value.dump());
  QL_FUZZ_CHECK(ql::internal::CanonicalJsonLossy(value) == *canonical, *canonical);
  const ql::Result<json> again = ql::ParseJsonStrict(*canonical);
  QL_FUZZ_CHECK(again.ok() && *again == value, *canonical);
  const ql::Result<std::string> twice = ql::CanonicalJson(*again);
  QL_FUZZ_CHECK(twice.ok() && *twice == *canonical, *canonical);
  QL_FUZZ_CHECK(ql::IsValidUtf8(ql::DescribeJsonValue(value)), ql::DescribeJsonValue(value));
}

void CheckLenient(std::string_view text) {
  const json value = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) return;
  const bool encodable = ql::fuzz::OnlyInt64(value) && Depth(value) <= ql::kMaxJsonDepth;
  const ql::Result<std::string> canonical = ql::CanonicalJson(value);
  QL_FUZZ_CHECK(canonical.ok() == encodable,
                canonical.ok() ? *canonical : canonical.status().ToString());
  if (!canonical.ok()) {
    ql::fuzz::CheckRefusal(canonical.status(), {"json_number_unsupported", "json_too_deep"});
    return;
  }
  const ql::Result<json> again = ql::ParseJsonStrict(*canonical);
  QL_FUZZ_CHECK(again.ok() && *again == value, *canonical);
  QL_FUZZ_CHECK(ql::internal::CanonicalJsonLossy(value) == *canonical, *canonical);
}

void CheckQuote(std::string_view bytes) {
  for (size_t max_bytes : {size_t{0}, size_t{5}, size_t{64}}) {
    const std::string quoted = ql::QuoteForMessage(bytes, max_bytes);
    QL_FUZZ_CHECK(ql::IsValidUtf8(quoted), quoted);
    QL_FUZZ_CHECK(quoted.size() >= 2 && quoted[0] == '"', quoted);
    const size_t kept = std::min(bytes.size(), max_bytes);
    QL_FUZZ_CHECK(quoted.size() <= 2 + 6 * kept + 3, quoted);
    bool plain = ql::IsValidUtf8(bytes) && bytes.size() <= max_bytes;
    for (char c : bytes) {
      const unsigned char u = static_cast<unsigned char>(c);
      plain = plain && u >= 0x20 && u != 0x7f && c != '"' && c != '\\';
    }
    if (plain) QL_FUZZ_CHECK(quoted == "\"" + std::string(bytes) + "\"", quoted);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  QL_FUZZ_CHECK(ql::IsValidUtf8(text) == ReferenceUtf8(text), std::string(text));
  CheckStrict(text);
  if (size <= 4096) CheckLenient(text);  // nlohmann's own writer recurses once per level
  CheckQuote(text);
  return 0;
}
