#pragma once

#include <cstdint>
#include <mutex>
#include <string>

#include "ql/core/clock.h"
#include "ql/core/event_log.h"
#include "ql/core/status.h"

namespace ql {

// Turns the results of one component's store calls into two daemon log lines per outage, never
// one per retry: `database.unavailable` (error) at the first failure that says the store cannot
// be reached or used (Unavailable, Busy, OutcomeUnknown, Internal), and `database.available`
// (info) at the next answer, with how long the outage lasted and how many calls failed. Any
// other error is an answer from a working store and ends an outage like a success. Thread-safe;
// `log` may be null (then nothing is written, the state is still kept).
class OutageLog {
 public:
  OutageLog(std::string component, EventLog* log, const Clock& clock)
      : component_(std::move(component)), log_(log), clock_(clock) {}

  // Records the result of one store call.
  void Observe(const Status& status);
  // Returns true while the last observed call failed with an outage error.
  bool down() const;

 private:
  const std::string component_;
  EventLog* const log_;
  const Clock& clock_;
  mutable std::mutex mu_;
  bool down_ = false;
  int64_t since_ms_ = 0;
  int64_t failures_ = 0;
};

}  // namespace ql
