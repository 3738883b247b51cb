#include "ql/core/next_fire_gate.h"

#include <gtest/gtest.h>

#include <string>

#include "ql/core/misfire.h"
#include "ql/core/rfc3339.h"

namespace ql {
namespace {

int64_t At(const char* rfc3339) { return ParseRfc3339(rfc3339).value(); }

TriggerRevisionRecord Stored(std::string expression, std::string zone,
                             std::string misfire = "skip") {
  TriggerRevisionRecord t;
  t.trigger_id = "0190a6a0-0000-7000-8000-000000000001";
  t.revision = 3;
  t.expression = std::move(expression);
  t.timezone = std::move(zone);
  t.misfire = std::move(misfire);
  return t;
}

TEST(NextFireGateTest, RecomputesTheNextFireFromTheStoredRevisionAcrossDaylightSaving) {
  NextFireGate gate;
  // 02:30 does not exist in New York on 2026-03-08: it fires once, at the end of the gap.
  const TriggerRevisionRecord daily = Stored("30 2 * * *", "America/New_York");
  const int64_t occurrence = At("2026-03-07T07:30:00Z");
  EXPECT_TRUE(gate.Check(daily, occurrence, occurrence, At("2026-03-08T07:00:00Z")).ok());
  // A day's arithmetic (24 h later) is not the schedule's next fire.
  Status wrong = gate.Check(daily, occurrence, occurrence, At("2026-03-08T07:30:00Z"));
  EXPECT_EQ(wrong.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(wrong.reason(), misfire::kReasonNextFireMismatch);
  EXPECT_NE(wrong.message().find("trigger 0190a6a0-0000-7000-8000-000000000001 revision 3: "),
            std::string::npos)
      << wrong.message();
  // Another zone's content under the same expression has its own next fire.
  const TriggerRevisionRecord shanghai = Stored("30 2 * * *", "Asia/Shanghai");
  EXPECT_FALSE(gate.Check(shanghai, occurrence, occurrence, At("2026-03-08T07:00:00Z")).ok());
  EXPECT_TRUE(gate.Check(shanghai, At("2026-03-06T18:30:00Z"), At("2026-03-06T18:30:00Z"),
                         At("2026-03-07T18:30:00Z"))
                  .ok());
}

TEST(NextFireGateTest, FollowsTheStoredMisfirePolicy) {
  NextFireGate gate;
  const int64_t occurrence = At("2026-01-01T00:00:00Z");
  const int64_t now = At("2026-01-01T00:02:30Z");
  const int64_t after_now = At("2026-01-01T00:03:00Z");
  EXPECT_TRUE(gate.Check(Stored("* * * * *", "UTC", "fire_once"), occurrence, now, after_now).ok());
  EXPECT_EQ(gate.Check(Stored("* * * * *", "UTC", "skip"), occurrence, now, after_now).reason(),
            misfire::kReasonNextFireMismatch);
}

TEST(NextFireGateTest, AStoredSpecThatNoLongerParsesIsCorrupt) {
  NextFireGate gate;
  for (const TriggerRevisionRecord& bad :
       {Stored("* * * *", "UTC"), Stored("* * * * *", "Mars/Olympus_Mons"),
        Stored("* * * * *", "UTC", "fire_all")}) {
    Status st = gate.Check(bad, 0, 0, 60'000);
    EXPECT_EQ(st.code(), StatusCode::kCorrupt) << st.ToString();
    EXPECT_EQ(st.reason(), "trigger_spec_invalid");
  }
}

TEST(NextFireGateTest, CountsRefusalsUntilTaken) {
  NextFireGate gate;
  EXPECT_EQ(gate.TakeMismatches(), 0);
  gate.CountMismatch();
  gate.CountMismatch();
  EXPECT_EQ(gate.TakeMismatches(), 2);
  EXPECT_EQ(gate.TakeMismatches(), 0);
}

}  // namespace
}  // namespace ql
