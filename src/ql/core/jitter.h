#pragma once

// Deterministic jitter of a cron trigger (DESIGN §11): a trigger may spread its runs over a
// window after each occurrence, so that many triggers on the same expression do not start their
// commands in the same second. The occurrence is still admitted on time, exactly once, under
// its own idempotency key; its run is only held in the queue until the occurrence's release
// time (queued_at), which no dispatcher or worker passes. The offset is a hash of the trigger
// and the occurrence: every replica and every repeated decision computes the same one, and it
// differs from one occurrence to the next.

#include <cstdint>
#include <string_view>

#include "ql/core/status.h"

namespace ql {

// The widest window a trigger may set: one hour.
inline constexpr int64_t kMaxJitterMs = 3'600'000;

// Accepts 0 (no jitter) through kMaxJitterMs; else InvalidArgument "invalid_jitter".
Status ValidateJitterMs(int64_t jitter_ms);

// Returns the offset in [0, jitter_ms] of the occurrence `scheduled_for_ms` of `trigger_id`:
// the first 8 bytes of DomainDigest("qinglong/jitter@v1", "<trigger_id>\n<scheduled_for_ms>")
// modulo jitter_ms + 1. 0 when jitter_ms <= 0.
int64_t JitterOffsetMs(std::string_view trigger_id, int64_t scheduled_for_ms, int64_t jitter_ms);

}  // namespace ql
