#include "ql/core/log_source.h"

#include <algorithm>

namespace ql {

int64_t AttemptLogCap(int64_t attempt_cap, int64_t run_cap, int64_t used_by_earlier) {
  attempt_cap = std::max<int64_t>(attempt_cap, 0);
  if (run_cap <= 0) return attempt_cap;
  const int64_t left = std::max<int64_t>(run_cap - std::max<int64_t>(used_by_earlier, 0), 0);
  const int64_t floor = std::min(kMinAttemptLogBytes, attempt_cap);
  return std::min(attempt_cap, std::max(left, floor));
}

}  // namespace ql
