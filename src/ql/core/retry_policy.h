#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

#include "ql/core/records.h"
#include "ql/core/status.h"

namespace ql {

inline constexpr int kMaxRetryAttempts = 16;
inline constexpr int64_t kMaxRetryBackoffMs = 24LL * 60 * 60 * 1000;

// Parses a retry policy object {"max_attempts", "retry_on_lost", "retry_on_timeout", "safety",
// "backoff_base_ms", "backoff_max_ms"} (every field optional, defaults as in RetryPolicy).
// retry_on_timeout retries an attempt that ran into its timeout (the executor ended it) as a
// failed one is retried; without it a timeout ends the run. Errors are
// InvalidArgument: retry_invalid_type, retry_unknown_field, retry_out_of_range (attempts 1..16,
// backoffs 0..24 h, max ≥ base), retry_invalid_safety, and retry_lost_requires_safety
// (retry_on_lost with safety "unknown": a lost attempt may still have run).
Result<RetryPolicy> ParseRetryPolicy(const nlohmann::json& value);

// Returns the normalised object with every field present but retry_on_timeout, which appears
// only when true (so policies without it keep their canonical form and digests).
nlohmann::json RetryPolicyToJson(const RetryPolicy& policy);

}  // namespace ql
