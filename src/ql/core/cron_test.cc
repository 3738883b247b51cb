#include "ql/core/cron.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>
#include <vector>

#include "ql/core/rfc3339.h"

namespace ql {
namespace {

CronFields FieldsOf(std::string_view text) {
  Result<CronExpression> cron = CronExpression::Parse(text);
  EXPECT_TRUE(cron.ok()) << text << ": " << cron.status().ToString();
  return cron.ok() ? cron->fields() : CronFields{};
}

uint64_t Bits(std::initializer_list<int> values) {
  uint64_t mask = 0;
  for (int v : values) mask |= uint64_t{1} << v;
  return mask;
}

uint64_t BitRange(int low, int high, int step = 1) {
  uint64_t mask = 0;
  for (int v = low; v <= high; v += step) mask |= uint64_t{1} << v;
  return mask;
}

Status ParseError(std::string_view text) { return CronExpression::Parse(text).status(); }

int64_t Ms(std::string_view rfc3339) {
  Result<int64_t> ms = ParseRfc3339(rfc3339);
  EXPECT_TRUE(ms.ok()) << ms.status().ToString();
  return ms.ok() ? *ms : 0;
}

// Returns the next `count` fire times after `from`, formatted in the schedule's zone.
std::vector<std::string> Next(std::string_view expression, std::string_view zone,
                              std::string_view from, int count) {
  Result<CronSchedule> schedule = CronSchedule::Create(expression, zone);
  EXPECT_TRUE(schedule.ok()) << schedule.status().ToString();
  if (!schedule.ok()) return {};
  std::vector<std::string> out;
  int64_t after = Ms(from);
  for (int i = 0; i < count; ++i) {
    std::optional<int64_t> next = schedule->NextAfter(after);
    if (!next) break;
    out.push_back(FormatRfc3339(*next, schedule->zone()));
    after = *next;
  }
  return out;
}

TEST(CronParseTest, FiveFieldsHaveSecondZero) {
  CronFields f = FieldsOf("*/5 * * * *");
  EXPECT_EQ(f.seconds, Bits({0}));
  EXPECT_EQ(f.minutes, BitRange(0, 59, 5));
  EXPECT_EQ(f.hours, BitRange(0, 23));
  EXPECT_EQ(f.days_of_month, BitRange(1, 31));
  EXPECT_EQ(f.months, BitRange(1, 12));
  EXPECT_EQ(f.days_of_week, BitRange(0, 6));
  EXPECT_TRUE(f.day_of_month_star);
  EXPECT_TRUE(f.day_of_week_star);
}

TEST(CronParseTest, SixFieldsPutSecondsFirst) {
  CronFields f = FieldsOf("0 30 2 * * *");
  EXPECT_EQ(f.seconds, Bits({0}));
  EXPECT_EQ(f.minutes, Bits({30}));
  EXPECT_EQ(f.hours, Bits({2}));
  f = FieldsOf("15,45 */20 9-17/4 1 1 1");
  EXPECT_EQ(f.seconds, Bits({15, 45}));
  EXPECT_EQ(f.minutes, Bits({0, 20, 40}));
  EXPECT_EQ(f.hours, Bits({9, 13, 17}));
  EXPECT_TRUE(CronExpression::Parse("0 30 2 * * *")->has_seconds_field());
  EXPECT_FALSE(CronExpression::Parse("30 2 * * *")->has_seconds_field());
}

TEST(CronParseTest, ListsRangesAndSteps) {
  CronFields f = FieldsOf("1,2,10-12,50-59/3 0 1 * *");
  EXPECT_EQ(f.minutes, Bits({1, 2, 10, 11, 12, 50, 53, 56, 59}));
  // N/S runs from N to the field's maximum.
  EXPECT_EQ(FieldsOf("0 1/2 * * *").hours, BitRange(1, 23, 2));
  EXPECT_EQ(FieldsOf("0 0 5/10 * *").days_of_month, Bits({5, 15, 25}));
  EXPECT_EQ(FieldsOf("0 0 */11 * *").days_of_month, Bits({1, 12, 23}));
  EXPECT_EQ(FieldsOf("*/60 * * * *").minutes, Bits({0}));  // a step equal to the span
  EXPECT_EQ(FieldsOf("0 */24 * * *").hours, Bits({0}));
  EXPECT_EQ(FieldsOf("00 07 * * *").hours, Bits({7}));  // leading zeros
  EXPECT_EQ(FieldsOf("0 0 * 2-2 *").months, Bits({2}));
}

TEST(CronParseTest, NamesAreCaseInsensitiveAndWorkInRanges) {
  EXPECT_EQ(FieldsOf("0 9 * * MON-FRI").days_of_week, BitRange(1, 5));
  EXPECT_EQ(FieldsOf("0 9 * * mon-fri").days_of_week, BitRange(1, 5));
  EXPECT_EQ(FieldsOf("0 9 * * Sat,sun").days_of_week, Bits({0, 6}));
  EXPECT_EQ(FieldsOf("0 9 * * MON-SUN").days_of_week, BitRange(0, 6));
  EXPECT_EQ(FieldsOf("0 9 * * SUN-SAT").days_of_week, BitRange(0, 6));
  EXPECT_EQ(FieldsOf("0 9 * * 1-5/2").days_of_week, Bits({1, 3, 5}));
  EXPECT_EQ(FieldsOf("0 9 * JAN-MAR,dec *").months, Bits({1, 2, 3, 12}));
  EXPECT_EQ(FieldsOf("0 9 * Jun/3 *").months, Bits({6, 9, 12}));
}

TEST(CronParseTest, SevenAndZeroAreBothSunday) {
  EXPECT_EQ(FieldsOf("0 0 * * 7").days_of_week, Bits({0}));
  EXPECT_EQ(FieldsOf("0 0 * * 0").days_of_week, Bits({0}));
  EXPECT_EQ(FieldsOf("0 0 * * 5-7").days_of_week, Bits({0, 5, 6}));
  EXPECT_EQ(FieldsOf("0 0 * * 0-7").days_of_week, BitRange(0, 6));
  // As in cronie, the open end of "N/S" is 7, so Sunday follows Friday here.
  EXPECT_EQ(FieldsOf("0 0 * * 1/2").days_of_week, Bits({0, 1, 3, 5}));
  EXPECT_EQ(FieldsOf("0 0 * * */7").days_of_week, Bits({0}));
}

TEST(CronParseTest, SeparatorsAreRunsOfSpacesAndTabs) {
  Result<CronExpression> cron = CronExpression::Parse("  */5\t\t1  *   *\t*  ");
  ASSERT_TRUE(cron.ok()) << cron.status().ToString();
  EXPECT_EQ(cron->ToString(), "*/5 1 * * *");
  EXPECT_EQ(CronExpression::Parse("0 0 9 * * mon-FRI")->ToString(), "0 0 9 * * mon-FRI");
}

TEST(CronParseTest, StarFlagsFollowTheFieldText) {
  EXPECT_TRUE(FieldsOf("0 0 */2 * 1").day_of_month_star);
  EXPECT_FALSE(FieldsOf("0 0 */2 * 1").day_of_week_star);
  EXPECT_FALSE(FieldsOf("0 0 1-31 * 1").day_of_month_star);
  EXPECT_TRUE(FieldsOf("0 0 1 * */1").day_of_week_star);
  EXPECT_FALSE(FieldsOf("0 0 1 * 0-7").day_of_week_star);
}

TEST(CronParseTest, HourFieldCoversAllHours) {
  for (const char* text : {"0 * * * *", "0 */1 * * *", "0 0-23 * * *", "0 0-11,12-23 * * *",
                           "0 0 * * * *", "0 0/1 * * *"}) {
    EXPECT_TRUE(CronExpression::Parse(text)->HourFieldCoversAllHours()) << text;
  }
  for (const char* text : {"0 */2 * * *", "0 1-23 * * *", "0 0 1 * * *", "0 0-22 * * *"}) {
    EXPECT_FALSE(CronExpression::Parse(text)->HourFieldCoversAllHours()) << text;
  }
}

struct Rejection {
  const char* text;
  const char* reason;
  std::vector<const char*> message_parts;
};

TEST(CronParseTest, RejectsWithStableReasonsAndPreciseMessages) {
  const std::vector<Rejection> cases = {
      {"@daily", "cron_macro_unsupported", {"'@daily'", "0 0 * * *"}},
      {"@reboot", "cron_macro_unsupported", {"'@reboot'", "not a time schedule"}},
      {"@every 5m", "cron_macro_unsupported", {"'@every'", "five fields"}},
      {"  @hourly", "cron_macro_unsupported", {"0 * * * *"}},
      {"", "cron_field_count", {"empty", "5 fields"}},
      {" \t ", "cron_field_count", {"empty"}},
      {"* * * *", "cron_field_count", {"has 4 fields", "6 fields"}},
      {"* * * * * * *", "cron_field_count", {"has 7 fields"}},
      {"0 0 1,,2 * *", "cron_empty_element", {"day-of-month field '1,,2'", "empty"}},
      {"0 0 * * 1,", "cron_empty_element", {"day-of-week field '1,'"}},
      {",5 * * * *", "cron_empty_element", {"minute field ',5'"}},
      {"0 0 ? * MON", "cron_invalid_token", {"day-of-month", "'?'", "use '*'"}},
      {"0 0 L * *", "cron_invalid_token", {"day-of-month", "'L'"}},
      {"0 0 15W * *", "cron_invalid_token", {"'W'"}},
      {"0 0 * * 5#3", "cron_invalid_token", {"day-of-week", "'#'"}},
      {"0 0 * * 5L", "cron_invalid_token", {"day-of-week", "'L'"}},
      {"0 0 * * FOO", "cron_invalid_token", {"day-of-week field 'FOO'", "SUN-SAT"}},
      {"0 0 * * MONDAY", "cron_invalid_token", {"'MONDAY'"}},
      {"0 0 * FOO *", "cron_invalid_token", {"month field", "JAN-DEC"}},
      {"0 0 * MON * *", "cron_invalid_token", {"day-of-month field 'MON'", "not a number"}},
      {"0 MON * * *", "cron_invalid_token", {"hour field 'MON'", "not a number"}},
      {"0 0 1 * JAN", "cron_invalid_token", {"day-of-week field 'JAN'"}},
      {"x * * * *", "cron_invalid_token", {"minute field 'x'"}},
      {"-5 * * * *", "cron_invalid_token", {"minute field '-5'", "not a range"}},
      {"5- * * * *", "cron_invalid_token", {"'5-'"}},
      {"1-2-3 * * * *", "cron_invalid_token", {"'2-3'"}},
      {"*/ * * * *", "cron_invalid_token", {"step number"}},
      {"/5 * * * *", "cron_invalid_token", {"'*/5'"}},
      {"*/5/2 * * * *", "cron_invalid_token", {"more than one '/'"}},
      {"*/x * * * *", "cron_invalid_token", {"step 'x'"}},
      {"*-5 * * * *", "cron_invalid_token", {"'*'"}},
      {"+5 * * * *", "cron_invalid_token", {"'+'"}},
      {"5;6 * * * *", "cron_invalid_token", {"';'"}},
      {"0 0 * * *\n", "cron_invalid_token", {"0x0a"}},
      {"60 * * * *", "cron_value_out_of_range", {"minute", "60", "0-59"}},
      {"0 24 * * *", "cron_value_out_of_range", {"hour field '24'", "0-23"}},
      {"0 0 0 * *", "cron_value_out_of_range", {"day-of-month", "1-31"}},
      {"0 0 32 * *", "cron_value_out_of_range", {"day-of-month", "32"}},
      {"0 0 * 13 *", "cron_value_out_of_range", {"month", "13"}},
      {"0 0 * 0 *", "cron_value_out_of_range", {"month", "0"}},
      {"0 0 * * 8", "cron_value_out_of_range", {"day-of-week", "0-7"}},
      {"60 0 0 * * *", "cron_value_out_of_range", {"second field '60'"}},
      {"0 0-99999999999 * * *", "cron_value_out_of_range", {"hour"}},
      {"5-1 * * * *", "cron_range_reversed", {"minute", "'5-1'", "do not wrap"}},
      {"0 0 * * FRI-MON", "cron_range_reversed", {"day-of-week", "'FRI-MON'"}},
      {"0 0 * DEC-JAN *", "cron_range_reversed", {"month"}},
      {"*/0 * * * *", "cron_step_zero", {"minute", "'*/0'"}},
      {"0 0 1-10/0 * *", "cron_step_zero", {"day-of-month"}},
      {"*/61 * * * *", "cron_step_out_of_range", {"minute", "61", "60 values"}},
      {"0 */25 * * *", "cron_step_out_of_range", {"hour", "25"}},
      {"0 0 */32 * *", "cron_step_out_of_range", {"day-of-month"}},
      {"0 0 * */13 *", "cron_step_out_of_range", {"month"}},
      {"0 0 * * */8", "cron_step_out_of_range", {"day-of-week"}},
      {"0 0 30 2 *", "cron_never_fires", {"'0 0 30 2 *'", "never fires", "'30'", "'2'"}},
      {"0 0 31 4,6,9,11 *", "cron_never_fires", {"never fires"}},
      {"0 0 30,31 FEB *", "cron_never_fires", {"never fires"}},
      {"0 0 0 31 2 */2", "cron_never_fires", {"never fires"}},
  };
  for (const Rejection& c : cases) {
    Status s = ParseError(c.text);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.text;
    EXPECT_EQ(s.reason(), c.reason) << "'" << c.text << "' -> " << s.ToString();
    for (const char* part : c.message_parts) {
      EXPECT_NE(s.message().find(part), std::string::npos)
          << "'" << c.text << "' message lacks \"" << part << "\": " << s.message();
    }
  }
}

TEST(CronParseTest, ImpossibleDayOnlyMattersWhenBothDayFieldsMustMatch) {
  // Both restricted: Feb 30 never exists, but every Monday in February matches.
  EXPECT_TRUE(CronExpression::Parse("0 0 30 2 MON").ok());
  // February 29 exists in leap years.
  EXPECT_TRUE(CronExpression::Parse("0 0 29 2 *").ok());
  EXPECT_TRUE(CronExpression::Parse("0 0 31 1-4 *").ok());
}

TEST(CronMatchTest, DayOfMonthAndDayOfWeekRule) {
  // Both restricted: either matches (2026-01-01 is a Thursday, 2026-01-05 a Monday).
  CronExpression either = *CronExpression::Parse("0 0 1,15 * MON");
  EXPECT_TRUE(either.MatchesDay(2026, 1, 1));
  EXPECT_TRUE(either.MatchesDay(2026, 1, 5));
  EXPECT_TRUE(either.MatchesDay(2026, 1, 15));
  EXPECT_FALSE(either.MatchesDay(2026, 1, 6));
  // A day-of-month starting with '*' makes both required (Vixie cron, cronie).
  CronExpression both = *CronExpression::Parse("0 0 */11 * FRI");
  EXPECT_TRUE(both.MatchesDay(2026, 1, 23));   // Friday the 23rd
  EXPECT_FALSE(both.MatchesDay(2026, 1, 12));  // a Monday
  EXPECT_FALSE(both.MatchesDay(2026, 1, 2));   // a Friday, not in 1,12,23
  // A day-of-week starting with '*' too.
  CronExpression dow_star = *CronExpression::Parse("0 0 13 * */5");
  EXPECT_EQ(dow_star.fields().days_of_week, Bits({0, 5}));
  EXPECT_TRUE(dow_star.MatchesDay(2026, 2, 13));  // Friday the 13th
  EXPECT_FALSE(dow_star.MatchesDay(2026, 1, 13));
  EXPECT_FALSE(dow_star.MatchesDay(2026, 1, 2));
  // Unrestricted day-of-week: only day-of-month decides.
  CronExpression dom_only = *CronExpression::Parse("0 0 13 * *");
  EXPECT_TRUE(dom_only.MatchesDay(2026, 1, 13));
  EXPECT_FALSE(dom_only.MatchesDay(2026, 1, 14));
}

TEST(CronNextTest, DayRuleAcrossAYear) {
  EXPECT_EQ(Next("0 0 */11 * FRI", "Etc/UTC", "2026-01-01T00:00:00Z", 4),
            (std::vector<std::string>{"2026-01-23T00:00:00+00:00", "2026-05-01T00:00:00+00:00",
                                      "2026-06-12T00:00:00+00:00", "2026-10-23T00:00:00+00:00"}));
  EXPECT_EQ(Next("0 0 1,15 * MON", "Etc/UTC", "2025-12-31T23:59:59Z", 8),
            (std::vector<std::string>{"2026-01-01T00:00:00+00:00", "2026-01-05T00:00:00+00:00",
                                      "2026-01-12T00:00:00+00:00", "2026-01-15T00:00:00+00:00",
                                      "2026-01-19T00:00:00+00:00", "2026-01-26T00:00:00+00:00",
                                      "2026-02-01T00:00:00+00:00", "2026-02-02T00:00:00+00:00"}));
}

TEST(CronNextTest, IsStrictlyAfterAndWholeSeconds) {
  CronSchedule every_5 = *CronSchedule::Create("*/5 * * * *", "Asia/Shanghai");
  const int64_t at = Ms("2026-01-01T10:05:00+08:00");
  EXPECT_EQ(every_5.NextAfter(at - 1), at);
  EXPECT_EQ(every_5.NextAfter(at), at + 300000);
  EXPECT_EQ(every_5.NextAfter(at + 999), at + 300000);
  CronSchedule every_second = *CronSchedule::Create("* * * * * *", "Asia/Shanghai");
  EXPECT_EQ(every_second.NextAfter(at + 1), at + 1000);
  EXPECT_EQ(every_second.NextAfter(at + 1000), at + 2000);
  EXPECT_EQ(every_second.NextAfter(-1500), -1000);  // before the epoch
  EXPECT_EQ(every_second.NextAfter(-1000), 0);
}

TEST(CronNextTest, CommonSchedulesInShanghai) {
  EXPECT_EQ(Next("0 30 2 * * *", "Asia/Shanghai", "2026-01-31T02:30:00+08:00", 3),
            (std::vector<std::string>{"2026-02-01T02:30:00+08:00", "2026-02-02T02:30:00+08:00",
                                      "2026-02-03T02:30:00+08:00"}));
  EXPECT_EQ(Next("0 0 9 * * MON-FRI", "Asia/Shanghai", "2026-01-02T09:00:00+08:00", 3),
            (std::vector<std::string>{"2026-01-05T09:00:00+08:00", "2026-01-06T09:00:00+08:00",
                                      "2026-01-07T09:00:00+08:00"}));
  EXPECT_EQ(Next("*/5 * * * *", "Asia/Shanghai", "2026-12-31T23:57:30+08:00", 2),
            (std::vector<std::string>{"2027-01-01T00:00:00+08:00", "2027-01-01T00:05:00+08:00"}));
  EXPECT_EQ(Next("30 */20 * * * *", "Asia/Shanghai", "2026-06-01T00:00:30+08:00", 3),
            (std::vector<std::string>{"2026-06-01T00:20:30+08:00", "2026-06-01T00:40:30+08:00",
                                      "2026-06-01T01:00:30+08:00"}));
  EXPECT_EQ(Next("0 12 31 * *", "Asia/Shanghai", "2026-01-31T12:00:00+08:00", 3),
            (std::vector<std::string>{"2026-03-31T12:00:00+08:00", "2026-05-31T12:00:00+08:00",
                                      "2026-07-31T12:00:00+08:00"}));
}

TEST(CronNextTest, FindsRareFebruary29Weekdays) {
  // Day-of-week "*/7" is Sunday and starts with '*', so both day fields must match:
  // February 29 falling on a Sunday (2032, 2060, 2088, then 2128: 2100 is not a leap year).
  EXPECT_EQ(Next("0 0 29 2 */7", "Etc/UTC", "2026-01-01T00:00:00Z", 4),
            (std::vector<std::string>{"2032-02-29T00:00:00+00:00", "2060-02-29T00:00:00+00:00",
                                      "2088-02-29T00:00:00+00:00", "2128-02-29T00:00:00+00:00"}));
  EXPECT_EQ(Next("0 0 29 2 *", "America/New_York", "2026-01-01T00:00:00Z", 3),
            (std::vector<std::string>{"2028-02-29T00:00:00-05:00", "2032-02-29T00:00:00-05:00",
                                      "2036-02-29T00:00:00-05:00"}));
}

TEST(CronNextTest, WorksFarAwayAndStopsAtYear9999) {
  // Beyond the years cctz enumerates transitions for, DST still applies.
  EXPECT_EQ(Next("0 30 2 * * *", "America/New_York", "2800-07-01T00:00:00Z", 1),
            (std::vector<std::string>{"2800-07-01T02:30:00-04:00"}));
  EXPECT_EQ(Next("0 0 1 1 *", "Etc/UTC", "9998-06-01T00:00:00Z", 3),
            (std::vector<std::string>{"9999-01-01T00:00:00+00:00"}));
  CronSchedule yearly = *CronSchedule::Create("0 0 1 1 *", "Etc/UTC");
  EXPECT_EQ(yearly.NextAfter(Ms("9999-12-31T23:59:59Z")), std::nullopt);
  EXPECT_EQ(yearly.NextAfter(std::numeric_limits<int64_t>::max()), std::nullopt);
  EXPECT_EQ(yearly.NextAfter(std::numeric_limits<int64_t>::min()), Ms("0001-01-01T00:00:00Z"));
}

TEST(CronNextTest, NextFireReportsErrors) {
  EXPECT_EQ(*NextFire("*/5 * * * *", "Asia/Shanghai", Ms("2026-01-01T00:01:00Z")),
            Ms("2026-01-01T00:05:00Z"));
  EXPECT_EQ(NextFire("@daily", "Asia/Shanghai", 0).status().reason(), "cron_macro_unsupported");
  EXPECT_EQ(NextFire("0 0 * * *", "", 0).status().reason(), "timezone_required");
  EXPECT_EQ(NextFire("0 0 * * *", "localtime", 0).status().reason(), "timezone_invalid");
  Status none = NextFire("0 0 1 1 *", "Etc/UTC", Ms("9999-06-01T00:00:00Z")).status();
  EXPECT_EQ(none.code(), StatusCode::kNotFound);
  EXPECT_EQ(none.reason(), "cron_no_next_fire");
}

TEST(CronScheduleTest, KeepsCanonicalTextAndZone) {
  CronSchedule schedule = *CronSchedule::Create(" 0  9\t* * mon-fri ", "US/Eastern");
  EXPECT_EQ(schedule.expression(), "0 9 * * mon-fri");
  if (!ZoneCatalog::Installed().empty()) {
    EXPECT_EQ(schedule.zone().name(), "America/New_York");
  }
}

// Random strings over cron's alphabet and beyond must parse or fail cleanly with a known
// reason; whatever parses must round-trip and compute fire times.
TEST(CronFuzzTest, GarbageNeverCrashes) {
  const std::set<std::string> reasons = {
      "cron_macro_unsupported", "cron_field_count",        "cron_empty_element",
      "cron_invalid_token",     "cron_value_out_of_range", "cron_range_reversed",
      "cron_step_zero",         "cron_step_out_of_range",  "cron_never_fires"};
  const std::string alphabet = "0123456789 */-,*/-,*  \t?LW#@abcJANMONSUNFRIxyz\n\x01\xff";
  const std::vector<std::string> tokens = {
      "*",   "*",   "*",   "*/5", "0", "1",  "2", "7",      "12",  "23",   "29",  "30",
      "31",  "59",  "60",  "-",   ",", ",1", "/", "/2",     "-3",  "1-5",  "5-1", "MON",
      "fri", "SUN", "JAN", "feb", "?", "L",  "#", "@daily", "*/0", "*/61", "*/13"};
  std::mt19937_64 rng(42);
  CronSchedule probe = *CronSchedule::Create("* * * * *", "America/Santiago");
  int parsed = 0;
  for (int i = 0; i < 50000; ++i) {
    std::string text;
    if (i % 3 == 2) {
      // A valid expression with one field replaced by a random token.
      std::vector<std::string> fields = {"*/5", "0", "*", "*", "*"};
      if (rng() % 2 == 0) fields.insert(fields.begin(), "0");
      fields[rng() % fields.size()] = tokens[rng() % tokens.size()];
      for (const std::string& field : fields) text += field + " ";
    } else if (i % 3 == 0) {
      const int length = static_cast<int>(rng() % 40);
      for (int j = 0; j < length; ++j) text += alphabet[rng() % alphabet.size()];
    } else {
      // Fields of whole tokens, often valid, so that deeper fields and the day rule are reached.
      const int fields = 4 + static_cast<int>(rng() % 4);
      for (int f = 0; f < fields; ++f) {
        if (f > 0) text += (rng() % 8 == 0) ? "\t " : " ";
        const int pieces = 1 + static_cast<int>(rng() % 2);
        for (int j = 0; j < pieces; ++j) text += tokens[rng() % tokens.size()];
      }
    }
    Result<CronExpression> cron = CronExpression::Parse(text);
    if (!cron.ok()) {
      ASSERT_EQ(cron.status().code(), StatusCode::kInvalidArgument);
      ASSERT_EQ(reasons.count(cron.status().reason()), 1u) << cron.status().ToString();
      ASSERT_FALSE(cron.status().message().empty());
      continue;
    }
    ++parsed;
    ASSERT_TRUE(CronExpression::Parse(cron->ToString()).ok()) << text;
    CronSchedule schedule(*cron, probe.zone());
    const int64_t after = static_cast<int64_t>(rng() % 253402300799000);
    std::optional<int64_t> next = schedule.NextAfter(after);
    if (next) {
      ASSERT_GT(*next, after);
    }
  }
  EXPECT_GT(parsed, 1000);  // the generator does reach valid expressions
}

}  // namespace
}  // namespace ql
