#pragma once

// The misfire decision (DESIGN §3): given a schedule's durable cursor and an observation time,
// decide whether to initialise the cursor, admit one occurrence, skip, or wait. Pure and
// profile-neutral: the SQLite scheduler and the PostgreSQL coordinator call the same function,
// so both admit exactly the same occurrences.

#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>

#include "ql/core/status.h"

namespace ql {

enum class MisfirePolicy { kSkip, kFireOnce };

// Returns "skip" or "fire_once".
std::string_view MisfirePolicyName(MisfirePolicy policy);
// Parses the exact wire name; anything else is InvalidArgument "invalid_misfire_policy".
Result<MisfirePolicy> ParseMisfirePolicy(std::string_view name);

// Default grace per profile, and the ceiling any configuration may set.
inline constexpr int64_t kEdgeGraceMs = 30'000;
inline constexpr int64_t kStandaloneGraceMs = 300'000;
inline constexpr int64_t kClusterGraceMs = 30'000;
inline constexpr int64_t kMaxGraceMs = 300'000;

// Returns ok for 0 <= grace_ms <= kMaxGraceMs, else InvalidArgument "invalid_grace".
Status ValidateGraceMs(int64_t grace_ms);

namespace misfire {

// Returns the first fire time strictly after `after_ms`, or nullopt when the schedule never
// fires again. Must be deterministic and return a value greater than its argument.
using NextFireFn = std::function<std::optional<int64_t>(int64_t after_ms)>;

struct Decision {
  enum class Kind {
    kInitialize,  // cursor was NULL: store new_cursor_ms; no run
    kNotDue,      // cursor is in the future: nothing to write (new_cursor_ms == cursor)
    kAdmit,       // admit occurrence admit_scheduled_for_ms, then store new_cursor_ms
    kSkip,        // late under `skip`: no run; store new_cursor_ms
    kExhausted,   // nothing admitted and the schedule never fires again (new_cursor_ms empty)
  };
  Kind kind = Kind::kNotDue;
  // Set exactly when kind == kAdmit.
  std::optional<int64_t> admit_scheduled_for_ms;
  // The cursor to store. Empty when the schedule never fires again: always for kExhausted, and
  // for kAdmit when the admitted occurrence was the last one.
  std::optional<int64_t> new_cursor_ms;

  bool operator==(const Decision&) const = default;
};

// Returns "initialize", "not_due", "admit", "skip" or "exhausted" (for logs and metrics).
std::string_view DecisionKindName(Decision::Kind kind);

// The cursor value a caller stores for a schedule that never fires again. NULL cannot be used:
// it means "needs initialisation", which would recompute a first fire. This value is the
// largest integer every store and JSON client represents exactly (2^53 - 1, about the year
// 287,000), so Decide sees it as not due for any real observation time.
inline constexpr int64_t kExhaustedCursorMs = (int64_t{1} << 53) - 1;

// Returns the stored form of `decision.new_cursor_ms`: the value itself, or kExhaustedCursorMs
// when the schedule never fires again.
int64_t CursorToStore(const Decision& decision);

// Decides one step for a schedule row. `cursor_ms` is the durable next_fire_at_ms (nullopt =
// needs initialisation), `now_ms` the observation time, `published_at_ms` the trigger
// revision's publication time, `grace_ms` the admission grace (callers validate it with
// ValidateGraceMs; a negative value is treated as 0):
//   cursor null                      -> kInitialize, cursor = next(published_at_ms); no run.
//   cursor > now                     -> kNotDue, cursor unchanged.
//   now - cursor <= grace            -> kAdmit(cursor), cursor = next(cursor). Occurrences that
//                                       are all inside the grace are admitted one per call, in
//                                       order, by calling again with the stored cursor.
//   now - cursor > grace, skip       -> kSkip, no run, cursor = next(now).
//   now - cursor > grace, fire_once  -> kAdmit(cursor): only the oldest missed occurrence,
//                                       cursor = next(now). A backlog is never replayed.
// When `next` returns nullopt the new cursor is empty: kAdmit still admits its occurrence; the
// other cases become kExhausted. Callers persist CursorToStore(decision).
Decision Decide(std::optional<int64_t> cursor_ms, int64_t now_ms, int64_t published_at_ms,
                int64_t grace_ms, MisfirePolicy policy, const NextFireFn& next);

// The stable reason of an admission refused by VerifyAdmittedCursor.
inline constexpr std::string_view kReasonNextFireMismatch = "next_fire_mismatch";

// Checks the cursor an admission stores against the decision recomputed from the trigger
// revision. Admitting the occurrence `occurrence_ms` observed at `now_ms`, Decide stores
//   next(occurrence)  when the occurrence was inside the grace, which needs
//                     now - occurrence <= kMaxGraceMs, or
//   next(now)         under fire_once when it was late, which needs now > occurrence.
// The grace is the scheduler's setting (at most kMaxGraceMs), not part of the revision, so
// whichever of the two some valid grace gives is accepted; every other value would skip
// occurrences or replay a backlog. `proposed_cursor_ms` empty means "never fires again" and
// matches a `next` that returns nullopt. Returns InvalidArgument kReasonNextFireMismatch
// naming the proposed and the expected cursors.
Status VerifyAdmittedCursor(int64_t occurrence_ms, int64_t now_ms, MisfirePolicy policy,
                            const NextFireFn& next, std::optional<int64_t> proposed_cursor_ms);

}  // namespace misfire
}  // namespace ql
