// Feeds the input as an API request body to api::ParseBody (required and optional), then reads
// every field of an accepted body with api::OptionalString / OptionalInteger / OptionalBool /
// RequiredString and api::CheckFields (api_json.h).
//
// Invariants:
// - an accepted body is a JSON object with integers only, and it is accepted exactly when
//   nlohmann's own (lenient) parser reads a JSON object from the same bytes with no key
//   repeated in any object, no nesting deeper than kMaxJsonDepth and only int64 numbers, and
//   the bytes hold no NUL (which nlohmann's lexer takes for the end of the input); both read the
//   same value; an empty optional body is {};
// - every refusal is InvalidArgument with one of the documented reasons and a UTF-8 message
//   that an error answer can carry (ErrorJson(...).dump() in strict mode does not throw);
// - an accepted body has a canonical encoding that is accepted again as the same body;
// - each field reader accepts exactly the values of its type and returns them unchanged.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.h"
#include "json_checks.h"
#include "ql/core/canonical_json.h"
#include "ql/http/api_json.h"

namespace {

using nlohmann::json;

using ql::fuzz::OnlyInt64;

// A refusal (json_checks.h) whose API error answer can be written.
void CheckError(const ql::Status& status, const std::set<std::string>& reasons) {
  ql::fuzz::CheckRefusal(status, reasons);
  try {
    (void)ql::api::ErrorJson(status.reason(), status.message()).dump();
  } catch (const std::exception& e) {
    QL_FUZZ_CHECK(false, e.what());
  }
}

// Whether nlohmann's own parser reads a body the strict reader must accept, and what it reads.
struct Lenient {
  bool parsed = false;
  bool duplicate_key = false;
  int depth = 0;
  json value;
};

Lenient ParseLeniently(std::string_view text) {
  Lenient out;
  std::vector<std::set<std::string>> keys;  // one set per open object
  int depth = 0;
  auto callback = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        keys.emplace_back();
        out.depth = std::max(out.depth, ++depth);
        break;
      case json::parse_event_t::array_start:
        out.depth = std::max(out.depth, ++depth);
        break;
      case json::parse_event_t::object_end:
        keys.pop_back();
        --depth;
        break;
      case json::parse_event_t::array_end:
        --depth;
        break;
      case json::parse_event_t::key:
        if (!keys.back().insert(parsed.get<std::string>()).second) out.duplicate_key = true;
        break;
      case json::parse_event_t::value:
        break;
    }
    return true;
  };
  out.value = json::parse(text.begin(), text.end(), callback, /*allow_exceptions=*/false);
  out.parsed = !out.value.is_discarded();
  return out;
}

bool NoUnsigned(const json& v) {
  if (v.is_number_unsigned()) return false;
  if (v.is_structured()) {
    for (const auto& child : v) {
      if (!NoUnsigned(child)) return false;
    }
  }
  return true;
}

void CheckFieldReaders(const json& body) {
  for (const auto& [key, value] : body.items()) {
    const auto text = ql::api::OptionalString(body, key);
    QL_FUZZ_CHECK(text.ok() == value.is_string(), key);
    if (text.ok()) {
      QL_FUZZ_CHECK(text->has_value() && **text == value.get<std::string>(), key);
      const auto required = ql::api::RequiredString(body, key);
      QL_FUZZ_CHECK(required.ok() && *required == **text, key);
    } else {
      CheckError(text.status(), {"invalid_type"});
    }
    const auto integer = ql::api::OptionalInteger(body, key);
    QL_FUZZ_CHECK(integer.ok() == value.is_number_integer(), key);
    if (integer.ok()) {
      QL_FUZZ_CHECK(integer->has_value() && **integer == value.get<int64_t>(), key);
    } else {
      CheckError(integer.status(), {"invalid_type"});
    }
    const auto boolean = ql::api::OptionalBool(body, key);
    QL_FUZZ_CHECK(boolean.ok() == value.is_boolean(), key);
    if (boolean.ok()) {
      QL_FUZZ_CHECK(boolean->has_value() && **boolean == value.get<bool>(), key);
    } else {
      CheckError(boolean.status(), {"invalid_type"});
    }
  }
  // An absent field: nothing for the optional readers, missing_field for the required one.
  const std::string absent = "\x01 absent";
  if (!body.contains(absent)) {
    QL_FUZZ_CHECK(ql::api::OptionalString(body, absent).ok(), "absent string");
    QL_FUZZ_CHECK(!ql::api::OptionalInteger(body, absent)->has_value(), "absent integer");
    const auto required = ql::api::RequiredString(body, absent);
    QL_FUZZ_CHECK(!required.ok(), "absent required string");
    CheckError(required.status(), {"missing_field"});
  }
  const ql::Status fields = ql::api::CheckFields(body, {"name", "spec", "kind", "labels"});
  bool known = true;
  for (const auto& [key, value] : body.items()) {
    known = known && (key == "name" || key == "spec" || key == "kind" || key == "labels");
  }
  QL_FUZZ_CHECK(fields.ok() == known, body.dump());
  if (!fields.ok()) CheckError(fields, {"unknown_field"});
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const ql::Result<json> required = ql::api::ParseBody(text, true);
  const ql::Result<json> optional = ql::api::ParseBody(text, false);
  if (text.empty()) {
    QL_FUZZ_CHECK(!required.ok(), "an empty required body accepted");
    CheckError(required.status(), {"invalid_json"});
    QL_FUZZ_CHECK(optional.ok() && *optional == json::object(), "an empty optional body");
    return 0;
  }
  QL_FUZZ_CHECK(required.ok() == optional.ok(), "required and optional disagree on a body");

  const Lenient lenient = ParseLeniently(text);
  // nlohmann's lexer takes a NUL byte for the end of the input; JSON text never holds one (not
  // even in a string, where control characters are escaped).
  const bool acceptable = lenient.parsed && lenient.value.is_object() && !lenient.duplicate_key &&
                          lenient.depth <= ql::kMaxJsonDepth && OnlyInt64(lenient.value) &&
                          text.find('\0') == std::string_view::npos;
  QL_FUZZ_CHECK(required.ok() == acceptable,
                required.ok() ? "accepted a body that nlohmann refuses or that holds a NUL"
                              : required.status().ToString());
  if (!required.ok()) {
    CheckError(required.status(), ql::fuzz::kStrictJsonReasons);
    return 0;
  }
  const json& body = *required;
  QL_FUZZ_CHECK(body.is_object(), "a body that is not an object accepted");
  QL_FUZZ_CHECK(NoUnsigned(body), "numbers are stored as signed integers");
  QL_FUZZ_CHECK(body == lenient.value, body.dump());

  const ql::Result<std::string> canonical = ql::CanonicalJson(body);
  QL_FUZZ_CHECK(canonical.ok(), canonical.status().ToString());
  const ql::Result<json> again = ql::api::ParseBody(*canonical, true);
  QL_FUZZ_CHECK(again.ok() && *again == body, *canonical);

  CheckFieldReaders(body);
  return 0;
}
