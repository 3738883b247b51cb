#include "ql/core/retry_policy.h"

#include <string>
#include <string_view>

#include "ql/core/canonical_json.h"

namespace ql {

Result<RetryPolicy> ParseRetryPolicy(const nlohmann::json& value) {
  auto wrong_type = [](std::string_view field, std::string_view want, const nlohmann::json& v) {
    return InvalidArgument("retry_invalid_type", "retry." + std::string(field) + " must be " +
                                                     std::string(want) + ", got " +
                                                     DescribeJsonValue(v));
  };
  if (!value.is_object()) return wrong_type("", "an object", value);
  RetryPolicy policy;
  for (const auto& [key, v] : value.items()) {
    if (key == "max_attempts") {
      if (!v.is_number_integer()) return wrong_type(key, "an integer", v);
      const int64_t n = v.get<int64_t>();
      if (n < 1 || n > kMaxRetryAttempts) {
        return InvalidArgument("retry_out_of_range", "retry.max_attempts must be 1.." +
                                                         std::to_string(kMaxRetryAttempts) +
                                                         ", got " + std::to_string(n));
      }
      policy.max_attempts = static_cast<int>(n);
    } else if (key == "retry_on_lost") {
      if (!v.is_boolean()) return wrong_type(key, "a boolean", v);
      policy.retry_on_lost = v.get<bool>();
    } else if (key == "retry_on_timeout") {
      if (!v.is_boolean()) return wrong_type(key, "a boolean", v);
      policy.retry_on_timeout = v.get<bool>();
    } else if (key == "safety") {
      if (!v.is_string()) return wrong_type(key, "a string", v);
      const std::string& s = v.get_ref<const std::string&>();
      if (s != "unknown" && s != "idempotent" && s != "deduplicated") {
        return InvalidArgument("retry_invalid_safety",
                               "retry.safety must be \"unknown\", \"idempotent\" or "
                               "\"deduplicated\", got " +
                                   QuoteForMessage(s));
      }
      policy.safety = s;
    } else if (key == "backoff_base_ms" || key == "backoff_max_ms") {
      if (!v.is_number_integer()) return wrong_type(key, "an integer", v);
      const int64_t ms = v.get<int64_t>();
      if (ms < 0 || ms > kMaxRetryBackoffMs) {
        return InvalidArgument("retry_out_of_range",
                               "retry." + key + " must be 0.." +
                                   std::to_string(kMaxRetryBackoffMs) + " (24 h), got " +
                                   std::to_string(ms));
      }
      (key == "backoff_base_ms" ? policy.backoff_base_ms : policy.backoff_max_ms) = ms;
    } else {
      return InvalidArgument("retry_unknown_field",
                             "retry." + key +
                                 " is not a field of a retry policy (max_attempts, "
                                 "retry_on_lost, retry_on_timeout, safety, backoff_base_ms, "
                                 "backoff_max_ms)");
    }
  }
  if (policy.backoff_max_ms < policy.backoff_base_ms) {
    return InvalidArgument("retry_out_of_range",
                           "retry.backoff_max_ms (" + std::to_string(policy.backoff_max_ms) +
                               ") must be >= retry.backoff_base_ms (" +
                               std::to_string(policy.backoff_base_ms) + ")");
  }
  if (policy.retry_on_lost && policy.safety == "unknown") {
    return InvalidArgument("retry_lost_requires_safety",
                           "retry.retry_on_lost needs retry.safety \"idempotent\" or "
                           "\"deduplicated\": a lost attempt may still have run");
  }
  return policy;
}

nlohmann::json RetryPolicyToJson(const RetryPolicy& p) {
  nlohmann::json out{{"backoff_base_ms", p.backoff_base_ms},
                     {"backoff_max_ms", p.backoff_max_ms},
                     {"max_attempts", p.max_attempts},
                     {"retry_on_lost", p.retry_on_lost},
                     {"safety", p.safety}};
  // Only when set: a policy without it keeps the canonical form, and so the digests, it had
  // before the field existed.
  if (p.retry_on_timeout) out["retry_on_timeout"] = true;
  return out;
}

}  // namespace ql
