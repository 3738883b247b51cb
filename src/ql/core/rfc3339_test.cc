#include "ql/core/rfc3339.h"

#include <gtest/gtest.h>

#include <random>

namespace ql {
namespace {

constexpr int64_t kNySpringForwardMs = 1772953200000;  // 2026-03-08T07:00:00Z

TEST(Rfc3339Test, FormatsUtc) {
  EXPECT_EQ(FormatRfc3339Utc(0), "1970-01-01T00:00:00Z");
  EXPECT_EQ(FormatRfc3339Utc(kNySpringForwardMs), "2026-03-08T07:00:00Z");
  EXPECT_EQ(FormatRfc3339Utc(kNySpringForwardMs + 123), "2026-03-08T07:00:00.123Z");
  EXPECT_EQ(FormatRfc3339Utc(kNySpringForwardMs + 5), "2026-03-08T07:00:00.005Z");
  EXPECT_EQ(FormatRfc3339Utc(-1), "1969-12-31T23:59:59.999Z");
  EXPECT_EQ(FormatRfc3339Utc(253402300799000), "9999-12-31T23:59:59Z");
  EXPECT_EQ(FormatRfc3339Utc(253402300800001), "10000-01-01T00:00:00.001Z");
}

TEST(Rfc3339Test, FormatsWithTheZoneOffsetAtThatInstant) {
  TimeZone ny = *TimeZone::Load("America/New_York");
  EXPECT_EQ(FormatRfc3339(kNySpringForwardMs, ny), "2026-03-08T03:00:00-04:00");
  EXPECT_EQ(FormatRfc3339(kNySpringForwardMs - 1000, ny), "2026-03-08T01:59:59-05:00");
  EXPECT_EQ(FormatRfc3339(kNySpringForwardMs + 250, ny), "2026-03-08T03:00:00.250-04:00");
  TimeZone shanghai = *TimeZone::Load("Asia/Shanghai");
  EXPECT_EQ(FormatRfc3339(kNySpringForwardMs, shanghai), "2026-03-08T15:00:00+08:00");
  TimeZone utc = *TimeZone::Load("Etc/UTC");
  EXPECT_EQ(FormatRfc3339(kNySpringForwardMs, utc), "2026-03-08T07:00:00+00:00");
  TimeZone lord_howe = *TimeZone::Load("Australia/Lord_Howe");
  EXPECT_EQ(FormatRfc3339(1775314800000, lord_howe), "2026-04-05T01:30:00+10:30");
  EXPECT_EQ(FormatRfc3339(1775314799000, lord_howe), "2026-04-05T01:59:59+11:00");
  TimeZone kolkata = *TimeZone::Load("Asia/Kolkata");
  EXPECT_EQ(FormatRfc3339(0, kolkata), "1970-01-01T05:30:00+05:30");
}

TEST(Rfc3339Test, TruncatesLocalMeanTimeOffsetsToMinutesKeepingTheInstant) {
  // Shanghai used +08:05:43 before 1901.
  TimeZone shanghai = *TimeZone::Load("Asia/Shanghai");
  const int64_t ms = -2208988800000;  // 1900-01-01T00:00:00Z
  const std::string text = FormatRfc3339(ms, shanghai);
  EXPECT_EQ(text, "1900-01-01T08:05:00+08:05");
  EXPECT_EQ(*ParseRfc3339(text), ms);
}

TEST(Rfc3339Test, ParsesStrictForms) {
  EXPECT_EQ(*ParseRfc3339("2026-03-08T07:00:00Z"), kNySpringForwardMs);
  EXPECT_EQ(*ParseRfc3339("2026-03-08t07:00:00z"), kNySpringForwardMs);
  EXPECT_EQ(*ParseRfc3339("2026-03-08T03:00:00-04:00"), kNySpringForwardMs);
  EXPECT_EQ(*ParseRfc3339("2026-03-08T15:00:00+08:00"), kNySpringForwardMs);
  EXPECT_EQ(*ParseRfc3339("2026-03-08T07:00:00-00:00"), kNySpringForwardMs);
  EXPECT_EQ(*ParseRfc3339("2026-03-08T07:00:00.1Z"), kNySpringForwardMs + 100);
  EXPECT_EQ(*ParseRfc3339("2026-03-08T07:00:00.123Z"), kNySpringForwardMs + 123);
  EXPECT_EQ(*ParseRfc3339("2026-03-08T07:00:00.123999999Z"), kNySpringForwardMs + 123);
  EXPECT_EQ(*ParseRfc3339("1969-12-31T23:59:59.5Z"), -500);
  EXPECT_EQ(*ParseRfc3339("2024-02-29T00:00:00Z"), 1709164800000);
  EXPECT_EQ(*ParseRfc3339("0001-01-01T00:00:00Z"), -62135596800000);
  EXPECT_EQ(*ParseRfc3339("9999-12-31T23:59:59Z"), 253402300799000);
}

TEST(Rfc3339Test, RejectsEverythingElse) {
  for (const char* text : {"",
                           "2026-03-08",
                           "2026-03-08T07:00Z",
                           "2026-03-08 07:00:00Z",
                           "2026-03-08T07:00:00",
                           "2026-03-08T07:00:00+0800",
                           "2026-03-08T07:00:00+8:00",
                           "2026-3-08T07:00:00Z",
                           "26-03-08T07:00:00Z",
                           "2026-03-08T07:00:00.Z",
                           "2026-03-08T07:00:00.1234567890Z",
                           "2026-13-01T00:00:00Z",
                           "2026-00-01T00:00:00Z",
                           "2026-02-29T00:00:00Z",
                           "2026-04-31T00:00:00Z",
                           "2026-03-08T24:00:00Z",
                           "2026-03-08T23:60:00Z",
                           "2026-12-31T23:59:60Z",
                           "2026-03-08T07:00:00+24:00",
                           "2026-03-08T07:00:00+08:60",
                           "2026-03-08T07:00:00Z ",
                           " 2026-03-08T07:00:00Z",
                           "2026-03-08T07:00:00ZZ",
                           "+2026-03-08T07:00:00Z",
                           "2026-03-08T07:00:00UTC",
                           "now",
                           "1772953200000"}) {
    Result<int64_t> parsed = ParseRfc3339(text);
    ASSERT_FALSE(parsed.ok()) << "'" << text << "' parsed as " << *parsed;
    EXPECT_EQ(parsed.status().reason(), "invalid_timestamp") << text;
    EXPECT_NE(parsed.status().message().find("RFC 3339"), std::string::npos);
  }
  EXPECT_NE(ParseRfc3339("2026-02-29T00:00:00Z").status().message().find("day 29"),
            std::string::npos);
  EXPECT_NE(ParseRfc3339("2026-12-31T23:59:60Z").status().message().find("leap"),
            std::string::npos);
}

TEST(Rfc3339Test, FormatAndParseRoundTrip) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int64_t> ms(-62135596800000, 253402300799999);
  TimeZone zones[] = {*TimeZone::Load("America/New_York"), *TimeZone::Load("Australia/Lord_Howe"),
                      *TimeZone::Load("America/Santiago"), *TimeZone::Load("Asia/Shanghai")};
  for (int i = 0; i < 20000; ++i) {
    const int64_t t = ms(rng);
    ASSERT_EQ(*ParseRfc3339(FormatRfc3339Utc(t)), t);
    for (const TimeZone& zone : zones) ASSERT_EQ(*ParseRfc3339(FormatRfc3339(t, zone)), t);
  }
}

}  // namespace
}  // namespace ql
