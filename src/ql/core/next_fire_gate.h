#pragma once

// The admission's own recomputation of the next fire time (DESIGN §5; seed ADR-0105 asks the
// admission to verify the decision's occurrence, observation time and next fire time before it
// commits). Every store runs it inside its admission transaction against the trigger revision
// that transaction read under its locks, so a cursor computed from other content, by a faulty
// decision or by a replica whose cron code differs is refused instead of stored, and no
// occurrence is skipped or replayed by it.

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "ql/core/cron.h"
#include "ql/core/records.h"
#include "ql/core/status.h"

namespace ql {

class NextFireGate {
 public:
  // Checks the cursor an admission of the occurrence `occurrence_ms`, observed at `now_ms`,
  // proposes (`proposed_cursor_ms`, empty when it says the trigger never fires again) against
  // misfire::VerifyAdmittedCursor over `stored` (its trigger_id, revision, expression, timezone
  // and misfire are read). Parsed expressions are kept by expression and zone, so the check
  // costs a lookup and one or two next-fire computations. Thread-safe.
  // Errors: InvalidArgument `next_fire_mismatch`; Corrupt `trigger_spec_invalid` when the
  // stored expression, zone or misfire policy no longer parses.
  Status Check(const TriggerRevisionRecord& stored, int64_t occurrence_ms, int64_t now_ms,
               std::optional<int64_t> proposed_cursor_ms);

  // Counts one admission refused with `next_fire_mismatch`. A store calls it once per refused
  // admission, after the admission's transaction ended, so a rerun transaction counts once.
  void CountMismatch() { mismatches_.fetch_add(1); }
  // Returns the admissions counted since the last call and resets the count.
  int64_t TakeMismatches() { return mismatches_.exchange(0); }

 private:
  Result<std::shared_ptr<const CronSchedule>> ScheduleFor(const TriggerRevisionRecord& stored);

  std::mutex mu_;
  // By "expression\tzone"; cleared when it reaches its bound (a zone name holds no tab).
  std::unordered_map<std::string, std::shared_ptr<const CronSchedule>> schedules_;
  std::atomic<int64_t> mismatches_{0};
};

}  // namespace ql
