// Daylight-saving behaviour of CronSchedule::NextAfter, checked against the real 2026 and 2027
// transitions (zdump -v -c 2026,2028 ZONE) and against a brute-force reference built on absl.
#include <absl/time/civil_time.h>
#include <absl/time/time.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "ql/core/cron.h"
#include "ql/core/rfc3339.h"

namespace ql {
namespace {

struct Vector {
  const char* zone;
  const char* expression;
  const char* after;
  std::vector<const char*> expected;
};

std::vector<std::string> NextFires(const CronSchedule& schedule, int64_t after, size_t count) {
  std::vector<std::string> out;
  for (size_t i = 0; i < count; ++i) {
    std::optional<int64_t> next = schedule.NextAfter(after);
    if (!next) break;
    out.push_back(FormatRfc3339(*next, schedule.zone()));
    after = *next;
  }
  return out;
}

void CheckVectors(const std::vector<Vector>& vectors) {
  for (const Vector& v : vectors) {
    SCOPED_TRACE(std::string(v.zone) + " '" + v.expression + "' after " + v.after);
    Result<CronSchedule> schedule = CronSchedule::Create(v.expression, v.zone);
    ASSERT_TRUE(schedule.ok()) << schedule.status().ToString();
    Result<int64_t> after = ParseRfc3339(v.after);
    ASSERT_TRUE(after.ok()) << after.status().ToString();
    std::vector<std::string> expected(v.expected.begin(), v.expected.end());
    EXPECT_EQ(NextFires(*schedule, *after, expected.size()), expected);
  }
}

// America/New_York: 2026-03-08 02:00 EST -> 03:00 EDT (07:00Z); 2026-11-01 02:00 EDT -> 01:00
// EST (06:00Z); 2027-03-14 and 2027-11-07 likewise.
TEST(CronDstTest, NewYork) {
  CheckVectors({
      // Gap: a daily 02:30 job fires once at 03:00 EDT on the spring-forward day.
      {"America/New_York",
       "30 2 * * *",
       "2026-03-07T02:30:00-05:00",
       {"2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"}},
      {"America/New_York",
       "0 30 2 * * *",
       "2026-03-07T02:30:00-05:00",
       {"2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"}},
      // Several skipped wall times and the matching 03:00 are one fire.
      {"America/New_York",
       "0,15,30,45 2-3 * * *",
       "2026-03-08T01:59:59-05:00",
       {"2026-03-08T03:00:00-04:00", "2026-03-08T03:15:00-04:00", "2026-03-08T03:30:00-04:00",
        "2026-03-08T03:45:00-04:00", "2026-03-09T02:00:00-04:00"}},
      {"America/New_York",
       "*/30 * * * *",
       "2026-03-08T01:00:00-05:00",
       {"2026-03-08T01:30:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-08T03:30:00-04:00"}},
      {"America/New_York",
       "* * * * *",
       "2026-03-08T01:58:00-05:00",
       {"2026-03-08T01:59:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-08T03:01:00-04:00"}},
      // Just before and exactly at the transition instant.
      {"America/New_York", "30 2 * * *", "2026-03-08T06:59:59.500Z", {"2026-03-08T03:00:00-04:00"}},
      {"America/New_York",
       "30 2 * * *",
       "2026-03-08T03:00:00-04:00",
       {"2026-03-09T02:30:00-04:00"}},
      // Overlap: 01:30 daily fires once, at the first (EDT) pass.
      {"America/New_York",
       "30 1 * * *",
       "2026-10-31T12:00:00-04:00",
       {"2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"}},
      {"America/New_York",
       "0 1 * * *",
       "2026-11-01T00:59:59-04:00",
       {"2026-11-01T01:00:00-04:00", "2026-11-02T01:00:00-05:00"}},
      // Every minute of hour 1 is not "every hour": the second pass does not fire.
      {"America/New_York",
       "* 1 * * *",
       "2026-11-01T01:58:00-04:00",
       {"2026-11-01T01:59:00-04:00", "2026-11-02T01:00:00-05:00"}},
      // The hour field covers all hours: both passes fire.
      {"America/New_York",
       "*/30 * * * *",
       "2026-11-01T00:30:00-04:00",
       {"2026-11-01T01:00:00-04:00", "2026-11-01T01:30:00-04:00", "2026-11-01T01:00:00-05:00",
        "2026-11-01T01:30:00-05:00", "2026-11-01T02:00:00-05:00"}},
      {"America/New_York",
       "0 */30 * * * *",
       "2026-11-01T00:30:00-04:00",
       {"2026-11-01T01:00:00-04:00", "2026-11-01T01:30:00-04:00", "2026-11-01T01:00:00-05:00",
        "2026-11-01T01:30:00-05:00", "2026-11-01T02:00:00-05:00"}},
      {"America/New_York",
       "0 0-23 * * *",
       "2026-11-01T00:00:00-04:00",
       {"2026-11-01T01:00:00-04:00", "2026-11-01T01:00:00-05:00", "2026-11-01T02:00:00-05:00"}},
      // Starting inside the first pass, and inside the second pass.
      {"America/New_York",
       "*/30 * * * *",
       "2026-11-01T01:40:00-04:00",
       {"2026-11-01T01:00:00-05:00", "2026-11-01T01:30:00-05:00"}},
      {"America/New_York",
       "*/30 * * * *",
       "2026-11-01T01:10:00-05:00",
       {"2026-11-01T01:30:00-05:00", "2026-11-01T02:00:00-05:00"}},
      {"America/New_York",
       "30 1 * * *",
       "2026-11-01T01:10:00-05:00",
       {"2026-11-02T01:30:00-05:00"}},
      {"America/New_York",
       "30 1 * * *",
       "2026-11-01T01:40:00-04:00",
       {"2026-11-02T01:30:00-05:00"}},
      {"America/New_York",
       "30 2 * * *",
       "2027-03-13T12:00:00-05:00",
       {"2027-03-14T03:00:00-04:00", "2027-03-15T02:30:00-04:00"}},
      {"America/New_York",
       "30 1 * * *",
       "2027-11-06T12:00:00-04:00",
       {"2027-11-07T01:30:00-04:00", "2027-11-08T01:30:00-05:00"}},
      {"America/New_York",
       "0 0 9 * * MON-FRI",
       "2026-03-06T09:00:00-05:00",
       {"2026-03-09T09:00:00-04:00", "2026-03-10T09:00:00-04:00"}},
  });
}

// Europe/London: 2026-03-29 01:00 GMT -> 02:00 BST; 2026-10-25 02:00 BST -> 01:00 GMT;
// 2027-03-28 and 2027-10-31 likewise.
TEST(CronDstTest, London) {
  CheckVectors({
      {"Europe/London",
       "30 1 * * *",
       "2026-03-28T12:00:00+00:00",
       {"2026-03-29T02:00:00+01:00", "2026-03-30T01:30:00+01:00"}},
      {"Europe/London",
       "30 1 * * *",
       "2026-10-24T12:00:00+01:00",
       {"2026-10-25T01:30:00+01:00", "2026-10-26T01:30:00+00:00"}},
      {"Europe/London",
       "0 * * * *",
       "2026-10-24T23:30:00+01:00",
       {"2026-10-25T00:00:00+01:00", "2026-10-25T01:00:00+01:00", "2026-10-25T01:00:00+00:00",
        "2026-10-25T02:00:00+00:00"}},
      {"Europe/London",
       "0 30 1 * * *",
       "2027-03-27T12:00:00Z",
       {"2027-03-28T02:00:00+01:00", "2027-03-29T01:30:00+01:00"}},
      {"Europe/London",
       "*/20 1 * * *",
       "2027-10-31T00:50:00+01:00",
       {"2027-10-31T01:00:00+01:00", "2027-10-31T01:20:00+01:00", "2027-10-31T01:40:00+01:00",
        "2027-11-01T01:00:00+00:00"}},
  });
}

// Australia/Lord_Howe shifts by 30 minutes: 2026-04-05 02:00 (+11) -> 01:30 (+10:30);
// 2026-10-04 02:00 (+10:30) -> 02:30 (+11); 2027-04-04 and 2027-10-03 likewise.
TEST(CronDstTest, LordHowe) {
  CheckVectors({
      {"Australia/Lord_Howe",
       "45 1 * * *",
       "2026-04-04T12:00:00+11:00",
       {"2026-04-05T01:45:00+11:00", "2026-04-06T01:45:00+10:30"}},
      {"Australia/Lord_Howe",
       "*/15 * * * *",
       "2026-04-05T01:20:00+11:00",
       {"2026-04-05T01:30:00+11:00", "2026-04-05T01:45:00+11:00", "2026-04-05T01:30:00+10:30",
        "2026-04-05T01:45:00+10:30", "2026-04-05T02:00:00+10:30"}},
      {"Australia/Lord_Howe",
       "15 2 * * *",
       "2026-10-03T12:00:00+10:30",
       {"2026-10-04T02:30:00+11:00", "2026-10-05T02:15:00+11:00"}},
      {"Australia/Lord_Howe",
       "0 2 * * *",
       "2026-10-03T12:00:00+10:30",
       {"2026-10-04T02:30:00+11:00", "2026-10-05T02:00:00+11:00"}},
      {"Australia/Lord_Howe",
       "*/10 * * * *",
       "2026-10-04T01:45:00+10:30",
       {"2026-10-04T01:50:00+10:30", "2026-10-04T02:30:00+11:00", "2026-10-04T02:40:00+11:00"}},
      {"Australia/Lord_Howe",
       "15 2 * * *",
       "2027-10-02T12:00:00+10:30",
       {"2027-10-03T02:30:00+11:00", "2027-10-04T02:15:00+11:00"}},
      {"Australia/Lord_Howe",
       "45 1 * * *",
       "2027-04-03T12:00:00+11:00",
       {"2027-04-04T01:45:00+11:00", "2027-04-05T01:45:00+10:30"}},
  });
}

// Africa/Cairo changes at midnight: Thu 2026-04-23 24:00 EET -> Fri 01:00 EEST; Thu 2026-10-29
// 24:00 EEST -> 23:00 EET; 2027-04-30 and 2027-10-28 likewise.
TEST(CronDstTest, CairoMidnight) {
  CheckVectors({
      {"Africa/Cairo",
       "0 0 * * *",
       "2026-04-23T12:00:00+02:00",
       {"2026-04-24T01:00:00+03:00", "2026-04-25T00:00:00+03:00"}},
      {"Africa/Cairo",
       "0 0 * * FRI",
       "2026-04-20T00:00:00+02:00",
       {"2026-04-24T01:00:00+03:00", "2026-05-01T00:00:00+03:00"}},
      {"Africa/Cairo",
       "30 0 24 4 *",
       "2026-01-01T00:00:00+02:00",
       {"2026-04-24T01:00:00+03:00", "2027-04-24T00:30:00+02:00"}},
      {"Africa/Cairo",
       "30 23 * * *",
       "2026-10-29T12:00:00+03:00",
       {"2026-10-29T23:30:00+03:00", "2026-10-30T23:30:00+02:00"}},
      {"Africa/Cairo",
       "0 * * * *",
       "2026-10-29T22:30:00+03:00",
       {"2026-10-29T23:00:00+03:00", "2026-10-29T23:00:00+02:00", "2026-10-30T00:00:00+02:00"}},
      {"Africa/Cairo",
       "0 0 * * *",
       "2027-04-29T12:00:00+02:00",
       {"2027-04-30T01:00:00+03:00", "2027-05-01T00:00:00+03:00"}},
      {"Africa/Cairo",
       "30 23 * * *",
       "2027-10-28T12:00:00+03:00",
       {"2027-10-28T23:30:00+03:00", "2027-10-29T23:30:00+02:00"}},
  });
}

// America/Santiago changes at midnight: Sat 2026-04-04 24:00 -03 -> 23:00 -04; Sat 2026-09-05
// 24:00 -04 -> Sun 01:00 -03; 2027-04-03 and 2027-09-04 likewise.
TEST(CronDstTest, SantiagoMidnight) {
  CheckVectors({
      {"America/Santiago",
       "0 0 * * *",
       "2026-09-05T12:00:00-04:00",
       {"2026-09-06T01:00:00-03:00", "2026-09-07T00:00:00-03:00"}},
      {"America/Santiago",
       "0 0 * * SUN",
       "2026-09-01T00:00:00-04:00",
       {"2026-09-06T01:00:00-03:00", "2026-09-13T00:00:00-03:00"}},
      {"America/Santiago",
       "0 0 * * *",
       "2026-04-04T12:00:00-03:00",
       {"2026-04-05T00:00:00-04:00", "2026-04-06T00:00:00-04:00"}},
      {"America/Santiago",
       "30 23 * * *",
       "2026-04-04T12:00:00-03:00",
       {"2026-04-04T23:30:00-03:00", "2026-04-05T23:30:00-04:00"}},
      {"America/Santiago",
       "*/30 * * * *",
       "2026-04-04T22:45:00-03:00",
       {"2026-04-04T23:00:00-03:00", "2026-04-04T23:30:00-03:00", "2026-04-04T23:00:00-04:00",
        "2026-04-04T23:30:00-04:00", "2026-04-05T00:00:00-04:00"}},
      {"America/Santiago",
       "0 0 * * *",
       "2027-09-04T12:00:00-04:00",
       {"2027-09-05T01:00:00-03:00", "2027-09-06T00:00:00-03:00"}},
      {"America/Santiago",
       "30 23 * * *",
       "2027-04-03T12:00:00-03:00",
       {"2027-04-03T23:30:00-03:00", "2027-04-04T23:30:00-04:00"}},
  });
}

TEST(CronDstTest, ShanghaiHasNoDst) {
  CheckVectors({
      {"Asia/Shanghai",
       "0 30 2 * * *",
       "2026-03-07T12:00:00+08:00",
       {"2026-03-08T02:30:00+08:00", "2026-03-09T02:30:00+08:00"}},
      {"Asia/Shanghai",
       "*/30 * * * *",
       "2026-11-01T00:45:00+08:00",
       {"2026-11-01T01:00:00+08:00", "2026-11-01T01:30:00+08:00", "2026-11-01T02:00:00+08:00"}},
      {"Asia/Shanghai",
       "0 0 9 * * MON-FRI",
       "2026-03-06T09:00:00+08:00",
       {"2026-03-09T09:00:00+08:00", "2026-03-10T09:00:00+08:00"}},
  });
}

const char* const kZones[] = {"America/New_York", "Europe/London",    "Australia/Lord_Howe",
                              "Africa/Cairo",     "America/Santiago", "Asia/Shanghai"};

// Builds random valid expressions; `dense` keeps them firing at least hourly.
class ExpressionGenerator {
 public:
  explicit ExpressionGenerator(uint64_t seed) : rng_(seed) {}

  std::string Next(bool dense, int hint_hour = -1) {
    for (;;) {
      std::string text;
      if (Chance(3)) text += Field(0, 59, "*/20") + " ";
      text += dense ? Pick({"*/15", "0", "30", "*/7", "0-59/20", "*", "5,35", "1/29"})
                    : Field(0, 59, "*/5");
      text += " ";
      if (dense) {
        const int h = hint_hour >= 0 ? hint_hour : Uniform(0, 23);
        const int h2 = std::min(23, h + Uniform(0, 2));
        text += Pick({"*", "*/1", "0-23", std::to_string(h),
                      std::to_string(h) + "-" + std::to_string(h2), "*/2",
                      std::to_string(h) + "," + std::to_string((h + 12) % 24)});
        text += Chance(5) ? " * * " + Field(0, 7, "*") : " * * *";
      } else {
        text += Field(0, 23, "*/3") + " " + Field(1, 31, "*/2") + " " + Field(1, 12, "*") + " " +
                Field(0, 7, "*");
      }
      if (CronExpression::Parse(text).ok()) return text;
    }
  }

  std::mt19937_64& rng() { return rng_; }

 private:
  int Uniform(int low, int high) { return std::uniform_int_distribution<int>(low, high)(rng_); }
  bool Chance(int one_in) { return Uniform(1, one_in) == 1; }
  std::string Pick(std::initializer_list<std::string> options) {
    auto it = options.begin();
    std::advance(it, Uniform(0, static_cast<int>(options.size()) - 1));
    return *it;
  }
  std::string Element(int low, int high) {
    const int a = Uniform(low, high);
    const int b = Uniform(a, high);
    const int step = Uniform(1, high - low + 1);
    switch (Uniform(0, 5)) {
      case 0:
        return "*";
      case 1:
        return "*/" + std::to_string(step);
      case 2:
        return std::to_string(a);
      case 3:
        return std::to_string(a) + "-" + std::to_string(b);
      case 4:
        return std::to_string(a) + "-" + std::to_string(b) + "/" + std::to_string(step);
      default:
        return std::to_string(a) + "/" + std::to_string(step);
    }
  }
  std::string Field(int low, int high, const char* common) {
    if (Chance(3)) return Chance(2) ? "*" : common;
    std::string out = Element(low, high);
    while (Chance(3)) out += "," + Element(low, high);
    return out;
  }

  std::mt19937_64 rng_;
};

absl::TimeZone AbslZone(const std::string& name) {
  absl::TimeZone zone;
  EXPECT_TRUE(absl::LoadTimeZone(name, &zone)) << name;
  return zone;
}

bool MatchesCivil(const CronExpression& cron, const absl::CivilSecond& cs) {
  return cron.Matches(cs.year(), cs.month(), cs.day(), cs.hour(), cs.minute(), cs.second());
}

// Returns true when some wall time in [from, to) matches.
bool GapMatches(const CronExpression& cron, absl::CivilSecond from, absl::CivilSecond to) {
  for (absl::CivilSecond cs = from; cs < to; ++cs) {
    if (MatchesCivil(cron, cs)) return true;
  }
  return false;
}

// Every result is strictly later than the previous one and is either a matching wall time (on
// its first pass unless the hour field covers all hours) or the instant of a forward
// transition that skipped a matching wall time.
TEST(CronPropertyTest, ResultsIncreaseAndMatchTheRule) {
  ExpressionGenerator gen(20260308);
  std::uniform_int_distribution<int64_t> start(1767225600, 1830297600);  // 2026-01-01..2028-01-01
  for (const char* zone_name : kZones) {
    const absl::TimeZone reference = AbslZone(zone_name);
    for (int e = 0; e < 40; ++e) {
      const std::string expression = gen.Next(/*dense=*/e % 2 == 0);
      SCOPED_TRACE(std::string(zone_name) + " '" + expression + "'");
      CronSchedule schedule = *CronSchedule::Create(expression, zone_name);
      const bool both_passes = schedule.cron().HourFieldCoversAllHours();
      int64_t after = start(gen.rng()) * 1000 + static_cast<int64_t>(gen.rng()() % 1000);
      for (int i = 0; i < 200; ++i) {
        std::optional<int64_t> next = schedule.NextAfter(after);
        ASSERT_TRUE(next.has_value()) << "after " << after;
        ASSERT_GT(*next, after);
        ASSERT_EQ(*next % 1000, 0);
        const absl::Time t = absl::FromUnixSeconds(*next / 1000);
        const absl::CivilSecond wall = reference.At(t).cs;
        if (MatchesCivil(schedule.cron(), wall)) {
          const absl::TimeZone::TimeInfo info = reference.At(wall);
          if (!both_passes && info.kind == absl::TimeZone::TimeInfo::REPEATED) {
            ASSERT_EQ(info.pre, t) << "second pass fired at " << FormatRfc3339Utc(*next);
          }
        } else {
          absl::TimeZone::CivilTransition tr;
          ASSERT_TRUE(reference.PrevTransition(t + absl::Seconds(1), &tr))
              << FormatRfc3339Utc(*next) << " matches nothing";
          ASSERT_EQ(reference.At(tr.to).trans, t)
              << FormatRfc3339Utc(*next) << " neither matches nor is a transition";
          ASSERT_LT(tr.from, tr.to) << "only forward transitions shift fires";
          ASSERT_TRUE(GapMatches(schedule.cron(), tr.from, tr.to));
        }
        after = *next;
      }
    }
  }
}

// Brute force: around every 2026/2027 transition, scan each second and derive the fire set
// straight from the rule with absl's conversions, then compare with NextAfter.
TEST(CronPropertyTest, AgreesWithBruteForceAroundTransitions) {
  ExpressionGenerator gen(1);
  constexpr int64_t kWindow = 3 * 3600;
  for (const char* zone_name : kZones) {
    const absl::TimeZone reference = AbslZone(zone_name);
    std::vector<absl::Time> centers;
    absl::TimeZone::CivilTransition tr;
    absl::Time cursor = absl::FromUnixSeconds(1767225600);  // 2026-01-01
    while (reference.NextTransition(cursor, &tr) &&
           reference.At(tr.to).trans < absl::FromUnixSeconds(1830297600)) {
      cursor = reference.At(tr.to).trans;
      centers.push_back(cursor);
    }
    if (centers.empty()) centers.push_back(absl::FromUnixSeconds(1782864000));  // 2026-07-01
    for (absl::Time center : centers) {
      const int64_t begin = absl::ToUnixSeconds(center) - kWindow;
      const int64_t end = absl::ToUnixSeconds(center) + kWindow;
      // Per second of the window: its wall time, whether it is the wall time's first instant,
      // and the skipped wall times when a forward transition happens at that second.
      struct Second {
        absl::CivilSecond wall;
        bool first_pass;
        bool forward_transition;
        absl::CivilSecond gap_from, gap_to;
      };
      std::vector<Second> seconds;
      for (int64_t s = begin; s <= end; ++s) {
        const absl::Time t = absl::FromUnixSeconds(s);
        Second sec;
        sec.wall = reference.At(t).cs;
        const absl::TimeZone::TimeInfo info = reference.At(sec.wall);
        ASSERT_TRUE(info.kind == absl::TimeZone::TimeInfo::REPEATED
                        ? (info.pre == t || info.post == t)
                        : info.pre == t);
        sec.first_pass = info.kind != absl::TimeZone::TimeInfo::REPEATED || info.pre == t;
        absl::TimeZone::CivilTransition at;
        sec.forward_transition = reference.PrevTransition(t + absl::Seconds(1), &at) &&
                                 reference.At(at.to).trans == t && at.from < at.to;
        sec.gap_from = at.from;
        sec.gap_to = at.to;
        seconds.push_back(sec);
      }
      for (int e = 0; e < 12; ++e) {
        const int hint = static_cast<int>(reference.At(center).cs.hour());
        const std::string expression = gen.Next(/*dense=*/true, (hint + 23 + e % 3) % 24);
        SCOPED_TRACE(std::string(zone_name) + " '" + expression + "' around " +
                     FormatRfc3339Utc(absl::ToUnixMillis(center)));
        CronSchedule schedule = *CronSchedule::Create(expression, zone_name);
        const bool both_passes = schedule.cron().HourFieldCoversAllHours();

        std::vector<int64_t> expected;
        for (int64_t s = begin; s <= end; ++s) {
          const Second& sec = seconds[static_cast<size_t>(s - begin)];
          const bool wall_fires =
              MatchesCivil(schedule.cron(), sec.wall) && (both_passes || sec.first_pass);
          const bool gap_fires =
              sec.forward_transition && GapMatches(schedule.cron(), sec.gap_from, sec.gap_to);
          if (wall_fires || gap_fires) expected.push_back(s * 1000);
        }
        std::vector<int64_t> actual;
        int64_t after = begin * 1000 - 1;
        while (true) {
          std::optional<int64_t> next = schedule.NextAfter(after);
          if (!next || *next > end * 1000) break;
          actual.push_back(*next);
          after = *next;
        }
        ASSERT_EQ(actual, expected);
      }
    }
  }
}

// Asking from any instant gives the same answer as walking fire by fire, including from just
// before each fire and each transition.
TEST(CronPropertyTest, NextAfterIsConsistentFromArbitraryInstants) {
  ExpressionGenerator gen(99);
  for (const char* zone_name : kZones) {
    const absl::TimeZone reference = AbslZone(zone_name);
    std::vector<int64_t> transitions;
    absl::TimeZone::CivilTransition tr;
    absl::Time cursor = absl::FromUnixSeconds(1767225600);  // 2026-01-01
    while (reference.NextTransition(cursor, &tr) &&
           reference.At(tr.to).trans < absl::FromUnixSeconds(1798761600)) {  // 2027-01-01
      cursor = reference.At(tr.to).trans;
      transitions.push_back(absl::ToUnixSeconds(cursor));
    }
    if (transitions.empty()) transitions.push_back(1782864000);  // 2026-07-01
    for (int64_t center : transitions) {
      for (int e = 0; e < 6; ++e) {
        const std::string expression = gen.Next(/*dense=*/true);
        SCOPED_TRACE(std::string(zone_name) + " '" + expression + "' around " +
                     FormatRfc3339Utc(center * 1000));
        CronSchedule schedule = *CronSchedule::Create(expression, zone_name);
        const int64_t begin = (center - 2 * 86400) * 1000;
        const int64_t end = (center + 2 * 86400) * 1000;
        std::vector<int64_t> fires;
        for (int64_t after = begin; after < end;) {
          after = *schedule.NextAfter(after);
          fires.push_back(after);
        }
        for (int64_t fire : fires) ASSERT_EQ(schedule.NextAfter(fire - 1), fire);
        std::vector<int64_t> probes = {center * 1000 - 1, center * 1000, center * 1000 - 1000};
        std::uniform_int_distribution<int64_t> probe(begin, fires.back() - 1);
        for (int i = 0; i < 300; ++i) probes.push_back(probe(gen.rng()));
        for (int64_t at : probes) {
          const int64_t want = *std::upper_bound(fires.begin(), fires.end(), at);
          ASSERT_EQ(schedule.NextAfter(at), want) << "after " << FormatRfc3339Utc(at);
        }
      }
    }
  }
}

}  // namespace
}  // namespace ql
