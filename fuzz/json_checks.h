#pragma once

// Checks the JSON fuzz targets share: what a refusal of strict JSON looks like, and which parsed
// values the strict reader may accept.

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "fuzz_check.h"
#include "ql/core/canonical_json.h"
#include "ql/core/status.h"

namespace ql::fuzz {

// The reasons ParseJsonStrict refuses a text with.
inline const std::set<std::string> kStrictJsonReasons = {"invalid_json", "json_invalid_utf8",
                                                         "json_duplicate_key", "json_too_deep",
                                                         "json_number_unsupported"};

// A refusal: InvalidArgument, one of `reasons`, a message that is valid UTF-8.
inline void CheckRefusal(const Status& status, const std::set<std::string>& reasons) {
  QL_FUZZ_CHECK(status.code() == StatusCode::kInvalidArgument, status.ToString());
  QL_FUZZ_CHECK(reasons.count(status.reason()) == 1, status.ToString());
  QL_FUZZ_CHECK(IsValidUtf8(status.message()), status.message());
}

// True when every number in `v` is an integer that fits int64_t (what the strict reader keeps).
inline bool OnlyInt64(const nlohmann::json& v) {
  if (v.is_number_float()) return false;
  if (v.is_number_unsigned()) {
    return v.get<nlohmann::json::number_unsigned_t>() <=
           static_cast<nlohmann::json::number_unsigned_t>(std::numeric_limits<int64_t>::max());
  }
  if (v.is_structured()) {
    for (const auto& child : v) {
      if (!OnlyInt64(child)) return false;
    }
  }
  return true;
}

}  // namespace ql::fuzz
