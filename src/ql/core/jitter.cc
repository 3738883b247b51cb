#include "ql/core/jitter.h"

#include <string>

#include "ql/core/digest.h"

namespace ql {

Status ValidateJitterMs(int64_t jitter_ms) {
  if (jitter_ms < 0 || jitter_ms > kMaxJitterMs) {
    return InvalidArgument("invalid_jitter", "jitter must be 0 to " +
                                                 std::to_string(kMaxJitterMs) + " ms (1 h), got " +
                                                 std::to_string(jitter_ms));
  }
  return Status();
}

int64_t JitterOffsetMs(std::string_view trigger_id, int64_t scheduled_for_ms, int64_t jitter_ms) {
  if (jitter_ms <= 0) return 0;
  std::string input(trigger_id);
  input += '\n';
  input += std::to_string(scheduled_for_ms);
  const std::string digest = DomainDigest("qinglong/jitter@v1", input);
  const uint64_t head = std::stoull(digest.substr(0, 16), nullptr, 16);
  return static_cast<int64_t>(head % static_cast<uint64_t>(jitter_ms + 1));
}

}  // namespace ql
