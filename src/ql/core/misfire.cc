#include "ql/core/misfire.h"

#include <string>

namespace ql {

std::string_view MisfirePolicyName(MisfirePolicy policy) {
  switch (policy) {
    case MisfirePolicy::kSkip:
      return "skip";
    case MisfirePolicy::kFireOnce:
      return "fire_once";
  }
  return "unknown";
}

Result<MisfirePolicy> ParseMisfirePolicy(std::string_view name) {
  if (name == "skip") return MisfirePolicy::kSkip;
  if (name == "fire_once") return MisfirePolicy::kFireOnce;
  std::string shown(name.substr(0, 64));
  if (name.size() > 64) shown += "...";
  return InvalidArgument("invalid_misfire_policy",
                         "misfire policy '" + shown + "' is not one of 'skip', 'fire_once'");
}

Status ValidateGraceMs(int64_t grace_ms) {
  if (grace_ms >= 0 && grace_ms <= kMaxGraceMs) return Status::Ok();
  return InvalidArgument("invalid_grace", "misfire grace " + std::to_string(grace_ms) +
                                              " ms is outside 0.." + std::to_string(kMaxGraceMs) +
                                              " ms");
}

namespace misfire {

std::string_view DecisionKindName(Decision::Kind kind) {
  switch (kind) {
    case Decision::Kind::kInitialize:
      return "initialize";
    case Decision::Kind::kNotDue:
      return "not_due";
    case Decision::Kind::kAdmit:
      return "admit";
    case Decision::Kind::kSkip:
      return "skip";
    case Decision::Kind::kExhausted:
      return "exhausted";
  }
  return "unknown";
}

int64_t CursorToStore(const Decision& decision) {
  return decision.new_cursor_ms.value_or(kExhaustedCursorMs);
}

Decision Decide(std::optional<int64_t> cursor_ms, int64_t now_ms, int64_t published_at_ms,
                int64_t grace_ms, MisfirePolicy policy, const NextFireFn& next) {
  using Kind = Decision::Kind;
  if (!cursor_ms.has_value()) {
    std::optional<int64_t> first = next(published_at_ms);
    return Decision{first.has_value() ? Kind::kInitialize : Kind::kExhausted, std::nullopt, first};
  }
  const int64_t cursor = *cursor_ms;
  if (cursor > now_ms) return Decision{Kind::kNotDue, std::nullopt, cursor};

  // now - cursor is non-negative here; computing it unsigned keeps it exact for any int64 pair.
  const uint64_t lateness = static_cast<uint64_t>(now_ms) - static_cast<uint64_t>(cursor);
  const uint64_t grace = grace_ms > 0 ? static_cast<uint64_t>(grace_ms) : 0;
  if (lateness <= grace) return Decision{Kind::kAdmit, cursor, next(cursor)};

  // Late: jump past the observation time so the occurrences in between are never replayed.
  std::optional<int64_t> after_now = next(now_ms);
  if (policy == MisfirePolicy::kFireOnce) return Decision{Kind::kAdmit, cursor, after_now};
  return Decision{after_now.has_value() ? Kind::kSkip : Kind::kExhausted, std::nullopt, after_now};
}

namespace {

std::string CursorText(std::optional<int64_t> cursor_ms) {
  return cursor_ms.has_value() ? std::to_string(*cursor_ms) : std::string("none");
}

}  // namespace

Status VerifyAdmittedCursor(int64_t occurrence_ms, int64_t now_ms, MisfirePolicy policy,
                            const NextFireFn& next, std::optional<int64_t> proposed_cursor_ms) {
  // The lateness is compared unsigned, exact for any int64 pair (as in Decide).
  const bool late_at_all = now_ms > occurrence_ms;
  const bool within_max_grace =
      !late_at_all || static_cast<uint64_t>(now_ms) - static_cast<uint64_t>(occurrence_ms) <=
                          static_cast<uint64_t>(kMaxGraceMs);
  std::string expected;
  if (within_max_grace) {
    const std::optional<int64_t> in_grace = next(occurrence_ms);
    if (proposed_cursor_ms == in_grace) return Status::Ok();
    expected = CursorText(in_grace) + " (inside the grace)";
  }
  if (policy == MisfirePolicy::kFireOnce && late_at_all) {
    const std::optional<int64_t> late = next(now_ms);
    if (proposed_cursor_ms == late) return Status::Ok();
    expected += (expected.empty() ? "" : " or ") + CursorText(late) + " (late)";
  }
  const std::string admitting = "admitting the occurrence at " + std::to_string(occurrence_ms) +
                                " observed at " + std::to_string(now_ms) + " under " +
                                std::string(MisfirePolicyName(policy));
  if (expected.empty()) {
    return InvalidArgument(std::string(kReasonNextFireMismatch),
                           admitting +
                               " is not a decision: an occurrence later than any grace "
                               "is skipped (proposed cursor " +
                               CursorText(proposed_cursor_ms) + ")");
  }
  return InvalidArgument(
      std::string(kReasonNextFireMismatch),
      admitting + " stores the cursor " + expected + ", not " + CursorText(proposed_cursor_ms));
}

}  // namespace misfire
}  // namespace ql
