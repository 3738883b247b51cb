#include "ql/core/misfire.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace ql::misfire {
namespace {

using Kind = Decision::Kind;

constexpr int64_t kSecond = 1000;
constexpr int64_t kMinute = 60 * kSecond;
constexpr int64_t kHour = 60 * kMinute;
// 2026-01-01T12:00:00Z, a minute boundary.
constexpr int64_t kNoon = 1767268800000;

int64_t FloorDiv(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

// Fires at offset + k * period for every integer k.
NextFireFn Every(int64_t period, int64_t offset = 0) {
  return [=](int64_t after) -> std::optional<int64_t> {
    return offset + (FloorDiv(after - offset, period) + 1) * period;
  };
}

// Like "* * * * *": every minute on the minute.
NextFireFn MinuteCron() { return Every(kMinute); }

// Like "0,1,3,30 * * * *": irregular gaps within each hour.
NextFireFn IrregularCron() {
  return [](int64_t after) -> std::optional<int64_t> {
    int64_t hour = FloorDiv(after, kHour) * kHour;
    for (int64_t h = hour;; h += kHour) {
      for (int64_t minute : {0, 1, 3, 30}) {
        int64_t t = h + minute * kMinute;
        if (t > after) return t;
      }
    }
  };
}

// Fires only at the listed times (ascending), then never again.
NextFireFn Finite(std::vector<int64_t> times) {
  return [times = std::move(times)](int64_t after) -> std::optional<int64_t> {
    for (int64_t t : times) {
      if (t > after) return t;
    }
    return std::nullopt;
  };
}

Decision Admit(int64_t at, std::optional<int64_t> cursor) {
  return Decision{Kind::kAdmit, at, cursor};
}

// Calls Decide repeatedly at one observation time, storing each new cursor as a scheduler
// would, until nothing more is due. Returns the admitted occurrences in order.
std::vector<int64_t> DrainAt(std::optional<int64_t>& cursor, int64_t now, int64_t published,
                             int64_t grace, MisfirePolicy policy, const NextFireFn& next) {
  std::vector<int64_t> admitted;
  for (int guard = 0; guard < 100000; ++guard) {
    Decision d = Decide(cursor, now, published, grace, policy, next);
    if (d.kind == Kind::kNotDue) return admitted;
    if (d.kind == Kind::kAdmit) admitted.push_back(*d.admit_scheduled_for_ms);
    cursor = CursorToStore(d);
    if (d.kind == Kind::kExhausted) return admitted;
  }
  ADD_FAILURE() << "Decide did not converge";
  return admitted;
}

TEST(MisfirePolicyTest, ParsesAndNamesExactly) {
  EXPECT_EQ(MisfirePolicyName(MisfirePolicy::kSkip), "skip");
  EXPECT_EQ(MisfirePolicyName(MisfirePolicy::kFireOnce), "fire_once");
  for (MisfirePolicy p : {MisfirePolicy::kSkip, MisfirePolicy::kFireOnce}) {
    Result<MisfirePolicy> parsed = ParseMisfirePolicy(MisfirePolicyName(p));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, p);
  }
  for (std::string_view bad : {"", "Skip", "SKIP", "fire-once", "fireOnce", "fire_once ",
                               "fire_all", "catch_up", "none"}) {
    Result<MisfirePolicy> parsed = ParseMisfirePolicy(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(parsed.status().reason(), "invalid_misfire_policy");
  }
  EXPECT_EQ(ParseMisfirePolicy("fire-once").status().message(),
            "misfire policy 'fire-once' is not one of 'skip', 'fire_once'");
}

TEST(MisfireGraceTest, ProfileDefaultsAndBounds) {
  EXPECT_EQ(kEdgeGraceMs, 30 * kSecond);
  EXPECT_EQ(kStandaloneGraceMs, 5 * kMinute);
  EXPECT_EQ(kClusterGraceMs, 30 * kSecond);
  EXPECT_EQ(kMaxGraceMs, 5 * kMinute);
  for (int64_t ok :
       {int64_t{0}, int64_t{1}, kEdgeGraceMs, kStandaloneGraceMs, kClusterGraceMs, kMaxGraceMs}) {
    EXPECT_TRUE(ValidateGraceMs(ok).ok()) << ok;
  }
  for (int64_t bad : {int64_t{-1}, kMaxGraceMs + 1, std::numeric_limits<int64_t>::max(),
                      std::numeric_limits<int64_t>::min()}) {
    Status st = ValidateGraceMs(bad);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(st.reason(), "invalid_grace");
  }
  EXPECT_EQ(ValidateGraceMs(300001).message(), "misfire grace 300001 ms is outside 0..300000 ms");
}

TEST(MisfireDecideTest, InitializesToFirstFireStrictlyAfterPublication) {
  for (MisfirePolicy policy : {MisfirePolicy::kSkip, MisfirePolicy::kFireOnce}) {
    // Published mid-minute.
    EXPECT_EQ(Decide(std::nullopt, kNoon + kHour, kNoon + 30 * kSecond, kEdgeGraceMs, policy,
                     MinuteCron()),
              (Decision{Kind::kInitialize, std::nullopt, kNoon + kMinute}));
    // Published exactly on a fire time: that instant is not an occurrence of this revision.
    EXPECT_EQ(Decide(std::nullopt, kNoon, kNoon, kEdgeGraceMs, policy, MinuteCron()),
              (Decision{Kind::kInitialize, std::nullopt, kNoon + kMinute}));
  }
}

TEST(MisfireDecideTest, InitializationNeverInventsHistory) {
  // Publication long ago: initialise only; the next call then finds the cursor late and
  // applies the policy instead of replaying the hours since publication.
  std::optional<int64_t> cursor;
  const int64_t published = kNoon - 3 * kHour;
  std::vector<int64_t> admitted = DrainAt(cursor, kNoon + 10 * kSecond, published, kEdgeGraceMs,
                                          MisfirePolicy::kSkip, MinuteCron());
  EXPECT_TRUE(admitted.empty());
  EXPECT_EQ(cursor, kNoon + kMinute);

  cursor.reset();
  admitted = DrainAt(cursor, kNoon + 10 * kSecond, published, kEdgeGraceMs,
                     MisfirePolicy::kFireOnce, MinuteCron());
  EXPECT_EQ(admitted, std::vector<int64_t>{published + kMinute});
  EXPECT_EQ(cursor, kNoon + kMinute);
}

TEST(MisfireDecideTest, FutureCursorIsNotDue) {
  for (MisfirePolicy policy : {MisfirePolicy::kSkip, MisfirePolicy::kFireOnce}) {
    EXPECT_EQ(Decide(kNoon, kNoon - 1, 0, kEdgeGraceMs, policy, MinuteCron()),
              (Decision{Kind::kNotDue, std::nullopt, kNoon}));
    EXPECT_EQ(Decide(kNoon, kNoon - kHour, 0, kEdgeGraceMs, policy, MinuteCron()),
              (Decision{Kind::kNotDue, std::nullopt, kNoon}));
  }
}

TEST(MisfireDecideTest, OnTimeAdmitsTheCursorAndAdvancesFromIt) {
  for (MisfirePolicy policy : {MisfirePolicy::kSkip, MisfirePolicy::kFireOnce}) {
    EXPECT_EQ(Decide(kNoon, kNoon, 0, kEdgeGraceMs, policy, MinuteCron()),
              Admit(kNoon, kNoon + kMinute));
    EXPECT_EQ(Decide(kNoon, kNoon + 250, 0, kEdgeGraceMs, policy, MinuteCron()),
              Admit(kNoon, kNoon + kMinute));
  }
}

TEST(MisfireDecideTest, GraceBoundaryIsInclusive) {
  for (int64_t grace : {int64_t{0}, kEdgeGraceMs, kStandaloneGraceMs}) {
    for (MisfirePolicy policy : {MisfirePolicy::kSkip, MisfirePolicy::kFireOnce}) {
      EXPECT_EQ(Decide(kNoon, kNoon + grace, 0, grace, policy, Every(10 * kMinute)),
                Admit(kNoon, kNoon + 10 * kMinute))
          << grace;
    }
    // One millisecond past the grace is late.
    const int64_t now = kNoon + grace + 1;
    EXPECT_EQ(Decide(kNoon, now, 0, grace, MisfirePolicy::kSkip, Every(10 * kMinute)),
              (Decision{Kind::kSkip, std::nullopt, kNoon + 10 * kMinute}))
        << grace;
    EXPECT_EQ(Decide(kNoon, now, 0, grace, MisfirePolicy::kFireOnce, Every(10 * kMinute)),
              Admit(kNoon, kNoon + 10 * kMinute))
        << grace;
  }
}

TEST(MisfireDecideTest, NegativeGraceCountsAsZero) {
  EXPECT_EQ(Decide(kNoon, kNoon, 0, -5, MisfirePolicy::kSkip, MinuteCron()),
            Admit(kNoon, kNoon + kMinute));
  EXPECT_EQ(Decide(kNoon, kNoon + 1, 0, -5, MisfirePolicy::kSkip, MinuteCron()).kind, Kind::kSkip);
}

TEST(MisfireDecideTest, OccurrencesInsideTheGraceAreEachAdmittedOnceInOrder) {
  for (MisfirePolicy policy : {MisfirePolicy::kSkip, MisfirePolicy::kFireOnce}) {
    std::optional<int64_t> cursor = kNoon;
    std::vector<int64_t> admitted =
        DrainAt(cursor, kNoon + 25 * kSecond, 0, 30 * kSecond, policy, Every(10 * kSecond));
    EXPECT_EQ(admitted, (std::vector<int64_t>{kNoon, kNoon + 10 * kSecond, kNoon + 20 * kSecond}));
    EXPECT_EQ(cursor, kNoon + 30 * kSecond);
    // Observing again at the same time admits nothing more.
    EXPECT_TRUE(DrainAt(cursor, kNoon + 25 * kSecond, 0, 30 * kSecond, policy, Every(10 * kSecond))
                    .empty());

    // Irregular gaps: 12:00, 12:01 and 12:03 are within five minutes of 12:04.
    cursor = kNoon;
    admitted = DrainAt(cursor, kNoon + 4 * kMinute, 0, kStandaloneGraceMs, policy, IrregularCron());
    EXPECT_EQ(admitted, (std::vector<int64_t>{kNoon, kNoon + kMinute, kNoon + 3 * kMinute}));
    EXPECT_EQ(cursor, kNoon + 30 * kMinute);
  }
}

TEST(MisfireDecideTest, LateCursorJumpsPastNowEvenOverOccurrencesInsideTheGrace) {
  // The cursor is 40 s late with a 30 s grace: the decision concerns the oldest occurrence, and
  // the cursor moves strictly past `now`, so 12:00:10..12:00:40 are not admitted either.
  std::optional<int64_t> cursor = kNoon;
  std::vector<int64_t> admitted = DrainAt(cursor, kNoon + 40 * kSecond, 0, 30 * kSecond,
                                          MisfirePolicy::kSkip, Every(10 * kSecond));
  EXPECT_TRUE(admitted.empty());
  EXPECT_EQ(cursor, kNoon + 50 * kSecond);

  cursor = kNoon;
  admitted = DrainAt(cursor, kNoon + 40 * kSecond, 0, 30 * kSecond, MisfirePolicy::kFireOnce,
                     Every(10 * kSecond));
  EXPECT_EQ(admitted, std::vector<int64_t>{kNoon});
  EXPECT_EQ(cursor, kNoon + 50 * kSecond);
}

TEST(MisfireDecideTest, LongDowntimeSkipAdmitsNothing) {
  const int64_t now = kNoon + 3 * kHour + 30 * kMinute + 10 * kSecond;  // 15:30:10
  EXPECT_EQ(Decide(kNoon, now, 0, kEdgeGraceMs, MisfirePolicy::kSkip, MinuteCron()),
            (Decision{Kind::kSkip, std::nullopt, kNoon + 3 * kHour + 31 * kMinute}));

  std::optional<int64_t> cursor = kNoon;
  EXPECT_TRUE(DrainAt(cursor, now, 0, kEdgeGraceMs, MisfirePolicy::kSkip, MinuteCron()).empty());
  ASSERT_TRUE(cursor.has_value());
  EXPECT_GT(*cursor, now);
  // Service resumes: the next on-time observation admits the next occurrence normally.
  EXPECT_EQ(DrainAt(cursor, *cursor + 5, 0, kEdgeGraceMs, MisfirePolicy::kSkip, MinuteCron()),
            std::vector<int64_t>{kNoon + 3 * kHour + 31 * kMinute});
}

TEST(MisfireDecideTest, LongDowntimeFireOnceAdmitsOnlyTheOldestMissedOccurrence) {
  const int64_t now = kNoon + 3 * kHour + 30 * kMinute + 10 * kSecond;
  EXPECT_EQ(Decide(kNoon, now, 0, kStandaloneGraceMs, MisfirePolicy::kFireOnce, MinuteCron()),
            Admit(kNoon, kNoon + 3 * kHour + 31 * kMinute));

  std::optional<int64_t> cursor = kNoon;
  std::vector<int64_t> admitted =
      DrainAt(cursor, now, 0, kStandaloneGraceMs, MisfirePolicy::kFireOnce, MinuteCron());
  EXPECT_EQ(admitted, std::vector<int64_t>{kNoon});
  ASSERT_TRUE(cursor.has_value());
  EXPECT_GT(*cursor, now);
  // Later observations never go back to the 210 minutes in between.
  std::vector<int64_t> later = DrainAt(cursor, now + 2 * kMinute, 0, kStandaloneGraceMs,
                                       MisfirePolicy::kFireOnce, MinuteCron());
  EXPECT_EQ(later, (std::vector<int64_t>{kNoon + 3 * kHour + 31 * kMinute,
                                         kNoon + 3 * kHour + 32 * kMinute}));
}

TEST(MisfireDecideTest, NeverFiresAgain) {
  const NextFireFn once = Finite({kNoon});
  // Nothing after publication: exhausted at initialisation, stored as the far-future cursor.
  Decision d = Decide(std::nullopt, kNoon + kHour, kNoon, kEdgeGraceMs, MisfirePolicy::kSkip, once);
  EXPECT_EQ(d, (Decision{Kind::kExhausted, std::nullopt, std::nullopt}));
  EXPECT_EQ(CursorToStore(d), kExhaustedCursorMs);
  // The stored far-future cursor is never due, so an exhausted schedule stays quiet.
  EXPECT_EQ(Decide(kExhaustedCursorMs, kNoon + 100LL * 365 * 24 * kHour, kNoon, kEdgeGraceMs,
                   MisfirePolicy::kFireOnce, once)
                .kind,
            Kind::kNotDue);

  // The last occurrence on time is admitted, leaving no cursor.
  EXPECT_EQ(Decide(kNoon, kNoon + 1, 0, kEdgeGraceMs, MisfirePolicy::kSkip, once),
            Admit(kNoon, std::nullopt));
  // Late with nothing after now: skip exhausts, fire_once still admits the oldest missed one.
  EXPECT_EQ(Decide(kNoon, kNoon + kHour, 0, kEdgeGraceMs, MisfirePolicy::kSkip, once),
            (Decision{Kind::kExhausted, std::nullopt, std::nullopt}));
  EXPECT_EQ(Decide(kNoon, kNoon + kHour, 0, kEdgeGraceMs, MisfirePolicy::kFireOnce, once),
            Admit(kNoon, std::nullopt));

  // A two-occurrence schedule is drained to exactly its occurrences and then stays exhausted.
  std::optional<int64_t> cursor;
  const NextFireFn twice = Finite({kNoon, kNoon + kMinute});
  EXPECT_TRUE(
      DrainAt(cursor, kNoon - 1, kNoon - kHour, kEdgeGraceMs, MisfirePolicy::kSkip, twice).empty());
  EXPECT_EQ(cursor, kNoon);
  EXPECT_EQ(DrainAt(cursor, kNoon + kMinute, 0, kMaxGraceMs, MisfirePolicy::kSkip, twice),
            (std::vector<int64_t>{kNoon, kNoon + kMinute}));
  EXPECT_EQ(cursor, kExhaustedCursorMs);
  EXPECT_TRUE(DrainAt(cursor, kNoon + kHour, 0, kMaxGraceMs, MisfirePolicy::kSkip, twice).empty());
}

TEST(MisfireDecideTest, ExtremeTimesDoNotOverflowIntoOnTime) {
  // now - cursor exceeds int64; a wrapped difference would look negative and "on time".
  const int64_t cursor = std::numeric_limits<int64_t>::min() + 1;
  const int64_t now = std::numeric_limits<int64_t>::max() - 1;
  const NextFireFn fixed = [](int64_t) -> std::optional<int64_t> {
    return std::numeric_limits<int64_t>::max();
  };
  EXPECT_EQ(Decide(cursor, now, 0, kMaxGraceMs, MisfirePolicy::kSkip, fixed).kind, Kind::kSkip);
  EXPECT_EQ(Decide(cursor, now, 0, kMaxGraceMs, MisfirePolicy::kFireOnce, fixed),
            Admit(cursor, std::numeric_limits<int64_t>::max()));
}

TEST(MisfireDecideTest, KindNames) {
  EXPECT_EQ(DecisionKindName(Kind::kInitialize), "initialize");
  EXPECT_EQ(DecisionKindName(Kind::kNotDue), "not_due");
  EXPECT_EQ(DecisionKindName(Kind::kAdmit), "admit");
  EXPECT_EQ(DecisionKindName(Kind::kSkip), "skip");
  EXPECT_EQ(DecisionKindName(Kind::kExhausted), "exhausted");
}

// Observes a fixed-interval schedule at seeded random times (gaps of 1 ms .. max_gap) and
// checks the invariants a user relies on.
void Simulate(uint64_t seed, int64_t max_gap, int64_t grace, MisfirePolicy policy) {
  SCOPED_TRACE(testing::Message() << "seed " << seed << " max_gap " << max_gap << " grace " << grace
                                  << " policy " << MisfirePolicyName(policy));
  constexpr int64_t kPeriod = 10 * kSecond;
  std::mt19937_64 rng(seed);
  const int64_t offset = static_cast<int64_t>(rng() % kPeriod);
  const NextFireFn next = Every(kPeriod, offset);
  const int64_t published = kNoon + static_cast<int64_t>(rng() % kHour);

  std::optional<int64_t> cursor;
  std::vector<int64_t> admitted;
  int64_t now = published;
  int64_t last_observed = now;
  for (int step = 0; step < 3000; ++step) {
    last_observed = now;
    std::vector<int64_t> round = DrainAt(cursor, now, published, grace, policy, next);
    int late = 0;
    for (int64_t t : round) {
      EXPECT_EQ(((t - offset) % kPeriod + kPeriod) % kPeriod, 0) << "not an occurrence: " << t;
      EXPECT_GT(t, published);
      EXPECT_LE(t, now) << "admitted before it was due";
      if (now - t > grace) ++late;
      if (!admitted.empty()) {
        EXPECT_GT(t, admitted.back()) << "admitted twice or out of order";
      }
      admitted.push_back(t);
    }
    // skip never admits a late occurrence; fire_once admits at most one per observation.
    EXPECT_LE(late, policy == MisfirePolicy::kSkip ? 0 : 1);
    ASSERT_TRUE(cursor.has_value());
    EXPECT_GT(*cursor, now) << "a due occurrence was left behind";
    now += 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(max_gap));
  }
  if (grace >= max_gap) {
    // Every occurrence after publication up to the last observation was admitted.
    std::vector<int64_t> expected;
    for (int64_t t = *next(published); t <= last_observed; t = *next(t)) expected.push_back(t);
    EXPECT_EQ(admitted, expected);
    EXPECT_GT(admitted.size(), 100u);
  }
}

TEST(MisfireSimulationTest, RandomObservationTimesNeverAdmitTwiceAndMissNothingWithinGrace) {
  for (uint64_t seed : {1u, 2u, 3u, 42u, 2026u}) {
    for (MisfirePolicy policy : {MisfirePolicy::kSkip, MisfirePolicy::kFireOnce}) {
      // Gaps within the grace: nothing may be missed.
      Simulate(seed, kEdgeGraceMs, kEdgeGraceMs, policy);
      Simulate(seed, 5 * kSecond, kEdgeGraceMs, policy);
      Simulate(seed, kStandaloneGraceMs, kStandaloneGraceMs, policy);
      // Gaps beyond the grace: misses are allowed, duplicates and backlogs are not.
      Simulate(seed, 2 * kMinute, kEdgeGraceMs, policy);
      Simulate(seed, 20 * kMinute, 0, policy);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// VerifyAdmittedCursor: the admission's recomputation of the cursor

bool Accepted(int64_t occurrence, int64_t now, MisfirePolicy policy, const NextFireFn& next,
              std::optional<int64_t> proposed) {
  Status st = VerifyAdmittedCursor(occurrence, now, policy, next, proposed);
  if (!st.ok()) {
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(st.reason(), kReasonNextFireMismatch);
  }
  return st.ok();
}

TEST(MisfireVerifyAdmittedCursorTest, AcceptsTheNextFireAfterTheOccurrenceOnly) {
  for (MisfirePolicy policy : {MisfirePolicy::kSkip, MisfirePolicy::kFireOnce}) {
    // On time and inside the grace: the next occurrence, nothing before or after it.
    for (int64_t now : {kNoon, kNoon + 10 * kSecond, kNoon + kMaxGraceMs}) {
      EXPECT_TRUE(Accepted(kNoon, now, policy, MinuteCron(), kNoon + kMinute));
      for (std::optional<int64_t> wrong :
           {std::optional<int64_t>(kNoon + 2 * kMinute),
            std::optional<int64_t>(kNoon + kMinute - 1),
            std::optional<int64_t>(kNoon + kMinute + kSecond), std::optional<int64_t>(kNoon),
            std::optional<int64_t>()}) {
        EXPECT_FALSE(Accepted(kNoon, now, policy, MinuteCron(), wrong))
            << MisfirePolicyName(policy) << " now " << now;
      }
    }
  }
  // Irregular gaps: the next fire is the schedule's, not the last gap repeated.
  EXPECT_TRUE(Accepted(kNoon + kMinute, kNoon + kMinute, MisfirePolicy::kSkip, IrregularCron(),
                       kNoon + 3 * kMinute));
  EXPECT_FALSE(Accepted(kNoon + kMinute, kNoon + kMinute, MisfirePolicy::kSkip, IrregularCron(),
                        kNoon + 2 * kMinute));
}

TEST(MisfireVerifyAdmittedCursorTest, ALateFireOnceOccurrenceMayJumpPastTheObservationTime) {
  const int64_t now = kNoon + 3 * kMinute + 20 * kSecond;  // late by more than some graces
  // next(now): the backlog is not replayed; next(occurrence): a grace that still covered it.
  EXPECT_TRUE(Accepted(kNoon, now, MisfirePolicy::kFireOnce, MinuteCron(), kNoon + 4 * kMinute));
  EXPECT_TRUE(Accepted(kNoon, now, MisfirePolicy::kFireOnce, MinuteCron(), kNoon + kMinute));
  // Anything in between skips occurrences no decision skips.
  for (int64_t wrong : {kNoon + 2 * kMinute, kNoon + 3 * kMinute, kNoon + 5 * kMinute}) {
    EXPECT_FALSE(Accepted(kNoon, now, MisfirePolicy::kFireOnce, MinuteCron(), wrong)) << wrong;
  }
  // skip never admits late, so only the in-grace cursor is possible.
  EXPECT_TRUE(Accepted(kNoon, now, MisfirePolicy::kSkip, MinuteCron(), kNoon + kMinute));
  EXPECT_FALSE(Accepted(kNoon, now, MisfirePolicy::kSkip, MinuteCron(), kNoon + 4 * kMinute));
}

TEST(MisfireVerifyAdmittedCursorTest, LaterThanAnyGraceOnlyTheLateFormIsADecision) {
  const int64_t now = kNoon + kMaxGraceMs + 1;
  const std::optional<int64_t> after_now = MinuteCron()(now);
  EXPECT_TRUE(Accepted(kNoon, now, MisfirePolicy::kFireOnce, MinuteCron(), after_now));
  // Admitting it and stepping to the next occurrence would replay the backlog one by one.
  EXPECT_FALSE(Accepted(kNoon, now, MisfirePolicy::kFireOnce, MinuteCron(), kNoon + kMinute));
  for (std::optional<int64_t> any : {std::optional<int64_t>(kNoon + kMinute), after_now}) {
    Status st = VerifyAdmittedCursor(kNoon, now, MisfirePolicy::kSkip, MinuteCron(), any);
    EXPECT_EQ(st.reason(), kReasonNextFireMismatch);
    EXPECT_NE(st.message().find("is skipped"), std::string::npos) << st.message();
  }
}

TEST(MisfireVerifyAdmittedCursorTest, ExhaustionMatchesOnlyAScheduleWithoutAnotherFire) {
  const NextFireFn two = Finite({kNoon, kNoon + kMinute});
  EXPECT_TRUE(Accepted(kNoon, kNoon, MisfirePolicy::kSkip, two, kNoon + kMinute));
  EXPECT_FALSE(Accepted(kNoon, kNoon, MisfirePolicy::kSkip, two, std::nullopt));
  EXPECT_TRUE(Accepted(kNoon + kMinute, kNoon + kMinute, MisfirePolicy::kSkip, two, std::nullopt));
  EXPECT_FALSE(
      Accepted(kNoon + kMinute, kNoon + kMinute, MisfirePolicy::kSkip, two, kNoon + 2 * kMinute));
  // Late under fire_once with nothing after now: exhausted is the late form.
  EXPECT_TRUE(Accepted(kNoon, kNoon + kHour, MisfirePolicy::kFireOnce, two, std::nullopt));
}

TEST(MisfireVerifyAdmittedCursorTest, NamesTheProposedAndTheExpectedCursors) {
  Status st = VerifyAdmittedCursor(kNoon, kNoon + 3 * kMinute + 20 * kSecond,
                                   MisfirePolicy::kFireOnce, MinuteCron(), kNoon + 2 * kMinute);
  EXPECT_EQ(st.message(),
            "admitting the occurrence at 1767268800000 observed at 1767269000000 "
            "under fire_once stores the cursor 1767268860000 (inside the grace) or "
            "1767269040000 (late), not 1767268920000");
}

// Every admission Decide makes, at any observation time, grace and policy, passes the check.
TEST(MisfireVerifyAdmittedCursorTest, AcceptsEveryAdmissionDecideMakes) {
  std::mt19937_64 rng(20260722);
  for (int i = 0; i < 20000; ++i) {
    const NextFireFn next = (i % 2 == 0) ? MinuteCron() : IrregularCron();
    const MisfirePolicy policy = (i % 3 == 0) ? MisfirePolicy::kSkip : MisfirePolicy::kFireOnce;
    const int64_t cursor = *next(kNoon + static_cast<int64_t>(rng() % (10 * kHour)));
    const int64_t now = cursor + static_cast<int64_t>(rng() % (15 * kMinute));
    const int64_t grace = static_cast<int64_t>(rng() % (kMaxGraceMs + 1));
    Decision d = Decide(cursor, now, kNoon, grace, policy, next);
    if (d.kind != Kind::kAdmit) continue;
    EXPECT_TRUE(Accepted(*d.admit_scheduled_for_ms, now, policy, next, d.new_cursor_ms))
        << "cursor " << cursor << " now " << now << " grace " << grace;
  }
}

}  // namespace
}  // namespace ql::misfire
