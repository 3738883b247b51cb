#pragma once

// The decision every scheduler takes for one due schedule row (DESIGN §3): the misfire
// decision and, for an admission, the cron run with its idempotency key, pinned execution
// revision and retry policy. The local scheduler (SQLite) and the cluster coordinator
// (PostgreSQL) both call it, so both admit exactly the same occurrences.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "ql/core/clock.h"
#include "ql/core/cron.h"
#include "ql/core/misfire.h"
#include "ql/core/ports.h"
#include "ql/core/records.h"
#include "ql/core/status.h"

namespace ql {

// What one scheduler round did.
struct RoundReport {
  int rows = 0;
  int initialized = 0;
  int admitted = 0;
  int skipped = 0;
  int raced = 0;
  int exhausted = 0;
  int already_admitted = 0;  // cluster: the occurrence had its run; the cursor moved past it
  int errors = 0;
  // Admissions the store refused because their new cursor was not the next fire time it
  // recomputed from the stored trigger revision (`next_fire_mismatch`; also in errors).
  int64_t next_fire_mismatches = 0;
  // Cluster admissions: whole-transaction reruns, admissions whose reruns ran out, and whether
  // the batch's transaction failed so that its decisions were committed one by one.
  int64_t admission_retries = 0;
  int64_t admission_retries_exhausted = 0;
  bool committed_one_by_one = false;
  bool page_full = false;  // the page came back full: more rows may be waiting
  bool still_due = false;  // a row is still due after this round (catching up inside grace)
  Status first_error;      // the first decision that failed (reason and message only)
};

// The write one decision asks for.
struct DecidedRow {
  misfire::Decision decision;
  std::optional<int64_t> new_next_fire_at_ms;  // empty with exhausted = true
  bool exhausted = false;
  std::optional<NewRun> run;  // set for an admission
};

class ScheduleDecider {
 public:
  ScheduleDecider(DefinitionRepository& definitions, RandomSource& random,
                  std::string executor_type, int64_t grace_ms)
      : definitions_(definitions),
        random_(random),
        executor_type_(std::move(executor_type)),
        grace_ms_(grace_ms) {}

  // Decides `due` as observed at `now_ms`. The run (ids stamped with `now_ms`) pins the
  // execution revision of the trigger's task revision for the executor type, read once per
  // task revision and checked against its plan digest and the pinned task digest.
  // Errors: Corrupt `trigger_spec_invalid` / `digest_mismatch` / plan digest errors, NotFound
  // when the execution revision is missing, and storage errors.
  Result<DecidedRow> Decide(const DueSchedule& due, int64_t now_ms);

 private:
  struct ExecutionRef {
    std::string id;
    RetryPolicy retry_policy;
  };
  Result<const CronSchedule*> ScheduleFor(const TriggerRevisionRecord& trigger);
  Result<ExecutionRef> ExecutionFor(const TriggerRevisionRecord& trigger);

  DefinitionRepository& definitions_;
  RandomSource& random_;
  std::string executor_type_;
  int64_t grace_ms_;
  // Parsed expressions by "expression\ttimezone" and plans by task revision; both bounded to
  // keep memory flat on routers (execution revisions are immutable, so caching is safe).
  std::map<std::string, std::unique_ptr<CronSchedule>> cron_cache_;
  std::map<std::pair<std::string, int64_t>, ExecutionRef> execution_cache_;
};

}  // namespace ql
