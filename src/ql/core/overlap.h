#pragma once

// Overlap policy of a cron trigger and the per-task concurrency limit (DESIGN §11): what
// admission does with an occurrence while earlier runs are unfinished. Both stores decide it
// inside their admission transaction; this file holds the shared vocabulary.

#include <cstdint>
#include <string_view>

#include "ql/core/status.h"

namespace ql {

// kAllow: every occurrence runs. kForbid: an occurrence is recorded as a skipped run (reason
// "overlap") while a run of the same trigger is unfinished. kReplace: the unfinished runs of the
// trigger are cancelled (reason "replaced") and the occurrence runs.
enum class OverlapPolicy { kAllow, kForbid, kReplace };

// Returns "allow", "forbid" or "replace".
std::string_view OverlapPolicyName(OverlapPolicy policy);
// Parses the exact wire name; anything else is InvalidArgument "invalid_overlap_policy".
Result<OverlapPolicy> ParseOverlapPolicy(std::string_view name);

// The error_code of a skipped run and the "reason" of its run.skipped event.
inline constexpr std::string_view kSkipReasonOverlap = "overlap";
inline constexpr std::string_view kSkipReasonConcurrency = "concurrency";
// The cancel reason of a run a `replace` trigger's next occurrence cancelled.
inline constexpr std::string_view kCancelReasonReplaced = "replaced";

// The largest per-task concurrency limit a task may set.
inline constexpr int64_t kMaxConcurrency = 10'000;

// The SQL predicate over runs.status of an unfinished run (every status but the terminal ones).
// The partial indexes of unfinished runs (SQLite runs_unfinished_by_trigger and
// runs_unfinished_by_task, PostgreSQL runs_unfinished) use exactly this text, so a query that
// repeats it can use them.
inline constexpr char kUnfinishedRunSql[] =
    "status NOT IN ('succeeded', 'failed', 'cancelled', 'timed_out', 'skipped')";

}  // namespace ql
