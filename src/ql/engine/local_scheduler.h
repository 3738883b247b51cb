#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "ql/core/clock.h"
#include "ql/core/cron.h"
#include "ql/core/ports.h"
#include "ql/core/records.h"
#include "ql/core/status.h"
#include "ql/engine/metrics.h"
#include "ql/engine/schedule_decider.h"

namespace ql {

struct LocalSchedulerOptions {
  int page_size = 16;          // rows decided per round; edge 4, standalone 16, hard cap 256
  int64_t cadence_ms = 1000;   // longest idle sleep; edge 5000, standalone 1000
  int64_t grace_ms = 300'000;  // misfire grace; edge 30 s, standalone 5 min, at most 5 min
  std::string executor_type = "local_process";
};

// Returns the options of a local deployment profile ("edge" or "standalone"), or
// InvalidArgument (unknown_profile).
Result<LocalSchedulerOptions> LocalSchedulerOptionsForProfile(std::string_view profile);

// The local scheduler of DESIGN §5.1 as a step function: the composition root calls RunRound()
// from one thread (rounds never overlap) and sleeps NextDelayMs() between rounds.
class LocalScheduler {
 public:
  LocalScheduler(ScheduleRepository& schedules, DefinitionRepository& definitions, Clock& clock,
                 RandomSource& random, Metrics& metrics, LocalSchedulerOptions options);

  // Validates the options: page size 1..256, cadence 100 ms..60 s, grace 0..5 min.
  static Status ValidateOptions(const LocalSchedulerOptions& options);

  // Decides one bounded page of due rows and applies each decision in its own transaction.
  // A storage error ends the round early and is returned; decisions already applied stay.
  Result<RoundReport> RunRound();

  // Returns how long to sleep after a round: 0 when the page was full or a row is still due;
  // otherwise the time until the earliest known cursor, at most the cadence.
  Result<int64_t> NextDelayMs(const RoundReport& report);

  // Called after each committed admission (to nudge the dispatcher).
  void SetOnAdmitted(std::function<void()> on_admitted) { on_admitted_ = std::move(on_admitted); }

 private:
  Status DecideAndApply(const DueSchedule& due, int64_t now_ms, RoundReport& report);

  ScheduleRepository& schedules_;
  Clock& clock_;
  Metrics& metrics_;
  LocalSchedulerOptions options_;
  ScheduleDecider decider_;
  std::function<void()> on_admitted_;
};

}  // namespace ql
