#include "ql/core/timezone.h"

#include <absl/time/time.h>
#include <gtest/gtest.h>

#include <random>
#include <string>

namespace ql {
namespace {

std::string LoadName(std::string_view name) {
  Result<TimeZone> zone = TimeZone::Load(name);
  EXPECT_TRUE(zone.ok()) << name << ": " << zone.status().ToString();
  return zone.ok() ? zone->name() : "";
}

Status LoadError(std::string_view name) { return TimeZone::Load(name).status(); }

TEST(CivilCalendarTest, RoundTripsDaysAndWeekdays) {
  EXPECT_EQ(DaysFromCivil(1970, 1, 1), 0);
  EXPECT_EQ(DaysFromCivil(2000, 3, 1), 11017);
  EXPECT_EQ(DaysFromCivil(1969, 12, 31), -1);
  EXPECT_EQ(WeekdayFromDays(0), 4);                            // Thursday
  EXPECT_EQ(WeekdayFromDays(DaysFromCivil(2026, 3, 8)), 0);    // Sunday
  EXPECT_EQ(WeekdayFromDays(DaysFromCivil(1969, 12, 28)), 0);  // Sunday, before the epoch
  for (int64_t days = -800000; days < 3000000; days += 997) {
    const CivilDate date = CivilFromDays(days);
    ASSERT_EQ(DaysFromCivil(date.year, date.month, date.day), days);
    ASSERT_GE(date.day, 1);
    ASSERT_LE(date.day, DaysInMonth(date.year, date.month));
  }
  EXPECT_EQ(DaysInMonth(2024, 2), 29);
  EXPECT_EQ(DaysInMonth(2100, 2), 28);
  EXPECT_EQ(DaysInMonth(2000, 2), 29);
  EXPECT_EQ(DaysInMonth(2026, 4), 30);
}

TEST(TimeZoneTest, LoadsCanonicalZoneNames) {
  EXPECT_EQ(LoadName("Asia/Shanghai"), "Asia/Shanghai");
  EXPECT_EQ(LoadName("America/New_York"), "America/New_York");
  EXPECT_EQ(LoadName("America/Argentina/Buenos_Aires"), "America/Argentina/Buenos_Aires");
  EXPECT_EQ(LoadName("Etc/GMT-8"), "Etc/GMT-8");  // an IANA zone, even if fixed
}

TEST(TimeZoneTest, StoresLinksAsTheirTargetZone) {
  if (ZoneCatalog::Installed().empty()) GTEST_SKIP() << "no tzdata.zi installed";
  EXPECT_EQ(LoadName("US/Eastern"), "America/New_York");
  EXPECT_EQ(LoadName("Asia/Chongqing"), "Asia/Shanghai");
  EXPECT_EQ(LoadName("Asia/Calcutta"), "Asia/Kolkata");
  EXPECT_EQ(LoadName("Europe/Belfast"), "Europe/London");
  EXPECT_EQ(LoadName("Australia/LHI"), "Australia/Lord_Howe");
  EXPECT_EQ(LoadName("UTC"), "Etc/UTC");
  EXPECT_EQ(LoadName("GMT"), "Etc/GMT");
  // Loading a link and its target yields the same zone.
  EXPECT_TRUE(*TimeZone::Load("US/Eastern") == *TimeZone::Load("America/New_York"));
}

TEST(TimeZoneTest, RequiresAZone) {
  Status s = LoadError("");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.reason(), "timezone_required");
}

TEST(TimeZoneTest, RejectsImplicitAndNonIanaNames) {
  for (const char* name :
       {"localtime", "posixrules", "Factory", "/etc/localtime", "/usr/share/zoneinfo/Asia/Shanghai",
        "../etc/passwd", "Asia/../UTC", "./UTC", "Asia//Shanghai", "Asia/Shanghai/",
        "Asia Shanghai", "Asia/Shang hai", "America/New York", "-Asia", "Asia/Sh\xc3\xa4nghai",
        "right/UTC", "posix/Asia/Shanghai", "file:Asia/Shanghai"}) {
    Status s = LoadError(name);
    EXPECT_EQ(s.reason(), "timezone_invalid") << name << " -> " << s.ToString();
  }
  EXPECT_NE(LoadError("localtime").message().find("host"), std::string::npos);
  EXPECT_NE(LoadError("right/UTC").message().find("'UTC'"), std::string::npos);
}

TEST(TimeZoneTest, RejectsFixedOffsets) {
  for (const char* name :
       {"+08:00", "-05:00", "+0800", "UTC+8", "UTC+08:00", "GMT-3", "utc-5", "Z+1"}) {
    Status s = LoadError(name);
    EXPECT_EQ(s.reason(), "timezone_invalid") << name << " -> " << s.ToString();
    EXPECT_NE(s.message().find("fixed UTC offset"), std::string::npos) << s.message();
  }
}

TEST(TimeZoneTest, RejectsUnknownZonesNamingThem) {
  Status s = LoadError("Mars/Olympus_Mons");
  EXPECT_EQ(s.reason(), "timezone_unknown");
  EXPECT_NE(s.message().find("Mars/Olympus_Mons"), std::string::npos);
  EXPECT_EQ(LoadError("EDT").reason(), "timezone_unknown");
  EXPECT_EQ(LoadError("Asia/Beijing").reason(), "timezone_unknown");
  // Files in the zoneinfo directory that are not zones.
  EXPECT_EQ(LoadError("zone.tab").reason(), "timezone_unknown");
  EXPECT_EQ(LoadError("tzdata.zi").reason(), "timezone_unknown");
}

TEST(TimeZoneTest, ZoneNamesAreCaseSensitiveWithASuggestion) {
  if (ZoneCatalog::Installed().empty()) GTEST_SKIP() << "no tzdata.zi installed";
  Status s = LoadError("asia/shanghai");
  EXPECT_EQ(s.reason(), "timezone_unknown");
  EXPECT_NE(s.message().find("did you mean Asia/Shanghai?"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("case-sensitive"), std::string::npos);
  EXPECT_NE(LoadError("AMERICA/NEW_YORK").message().find("did you mean America/New_York?"),
            std::string::npos);
  EXPECT_NE(LoadError("us/eastern").message().find("did you mean US/Eastern?"), std::string::npos);
}

TEST(ZoneCatalogTest, ResolvesLinkChainsAndIgnoresCycles) {
  ZoneCatalog catalog = ZoneCatalog::Parse(
      "# version test\n"
      "R d 1916 o - Jun 14 23s 1 S\n"
      "Z Europe/Paris 0:9:21 - LMT 1891 Mar 16\n"
      "1 c CE%sT\n"
      "Z Asia/Tokyo 9:18:59 - LMT 1887 D 31 15u\n"
      "L Europe/Paris Europe/Monaco\n"
      "L Europe/Monaco Europe/Alias\n"
      "L Loop/A Loop/B\n"
      "L Loop/B Loop/A\n"
      "L Nowhere/Zone Dangling/Link\n");
  EXPECT_FALSE(catalog.empty());
  EXPECT_EQ(catalog.Canonicalize("Europe/Paris"), "Europe/Paris");
  EXPECT_EQ(catalog.Canonicalize("Europe/Monaco"), "Europe/Paris");
  EXPECT_EQ(catalog.Canonicalize("Europe/Alias"), "Europe/Paris");
  EXPECT_EQ(catalog.Canonicalize("Loop/A"), std::nullopt);
  EXPECT_EQ(catalog.Canonicalize("Dangling/Link"), std::nullopt);
  EXPECT_EQ(catalog.Canonicalize("Asia/Osaka"), std::nullopt);
  EXPECT_EQ(catalog.FindIgnoringCase("europe/monaco"), "Europe/Monaco");
  EXPECT_EQ(catalog.FindIgnoringCase("asia/osaka"), std::nullopt);
}

TEST(ZoneCatalogTest, CanonicalisesThroughTheGivenCatalog) {
  ZoneCatalog catalog =
      ZoneCatalog::Parse("Z Asia/Shanghai 8:5:43 - LMT 1901\nL Asia/Shanghai PRC\n");
  Result<TimeZone> prc = TimeZone::Load("PRC", catalog);
  ASSERT_TRUE(prc.ok()) << prc.status().ToString();
  EXPECT_EQ(prc->name(), "Asia/Shanghai");
  // Not listed in this catalog, although a zone file exists.
  EXPECT_EQ(TimeZone::Load("Europe/London", catalog).status().reason(), "timezone_unknown");
}

TEST(ZoneCatalogTest, WithoutTzdataZiNamesAreKeptAsGiven) {
  const ZoneCatalog none;
  EXPECT_TRUE(none.empty());
  Result<TimeZone> zone = TimeZone::Load("US/Eastern", none);
  ASSERT_TRUE(zone.ok()) << zone.status().ToString();
  EXPECT_EQ(zone->name(), "US/Eastern");
  EXPECT_EQ(zone->OffsetAt(1772953200), -4 * 3600);  // 2026-03-08T07:00:00Z, EDT begins
  EXPECT_EQ(TimeZone::Load("Mars/Base", none).status().reason(), "timezone_unknown");
  EXPECT_EQ(TimeZone::Load("UTC+8", none).status().reason(), "timezone_invalid");
  EXPECT_EQ(TimeZone::Load("localtime", none).status().reason(), "timezone_invalid");
}

TEST(TimeZoneTest, SegmentsDescribeRealTransitions) {
  TimeZone ny = *TimeZone::Load("America/New_York");
  // 2026-03-08T07:00:00Z: 02:00 EST becomes 03:00 EDT.
  OffsetSegment spring = ny.SegmentAt(1772953200);
  EXPECT_EQ(spring.begin, 1772953200);
  EXPECT_EQ(spring.offset_before, -5 * 3600);
  EXPECT_EQ(spring.offset, -4 * 3600);
  EXPECT_EQ(spring.end, 1793512800);  // 2026-11-01T06:00:00Z
  EXPECT_EQ(spring.offset_after, -5 * 3600);
  OffsetSegment before = ny.SegmentAt(1772953199);
  EXPECT_EQ(before.end, 1772953200);
  EXPECT_EQ(before.offset, -5 * 3600);

  TimeZone shanghai = *TimeZone::Load("Asia/Shanghai");
  OffsetSegment constant = shanghai.SegmentAt(1772953200);
  EXPECT_FALSE(constant.has_end());
  EXPECT_EQ(constant.offset, 8 * 3600);
  EXPECT_EQ(constant.begin, 684867600);  // 1991-09-14T17:00:00Z, the last DST change

  TimeZone utc = *TimeZone::Load("UTC");
  EXPECT_FALSE(utc.SegmentAt(0).has_begin());
  EXPECT_FALSE(utc.SegmentAt(0).has_end());
  EXPECT_EQ(utc.OffsetAt(253402300799), 0);
}

// The transition table, including its continuation past cctz's enumerated horizon, must agree
// with absl's own conversion at every instant up to year 9999.
TEST(TimeZoneTest, OffsetsAgreeWithAbslUpToYear9999) {
  std::mt19937_64 rng(20260308);
  for (const char* name : {"America/New_York", "Europe/London", "Australia/Lord_Howe",
                           "Africa/Cairo", "America/Santiago", "Asia/Shanghai", "Africa/Casablanca",
                           "America/Sao_Paulo", "Pacific/Apia"}) {
    TimeZone zone = *TimeZone::Load(name);
    absl::TimeZone reference;
    ASSERT_TRUE(absl::LoadTimeZone(name, &reference));
    std::uniform_int_distribution<int64_t> instant(-2208988800, 253402300799);  // 1900-9999
    for (int i = 0; i < 20000; ++i) {
      const int64_t t = instant(rng);
      ASSERT_EQ(zone.OffsetAt(t), reference.At(absl::FromUnixSeconds(t)).offset)
          << name << " at " << t;
      const OffsetSegment seg = zone.SegmentAt(t);
      ASSERT_LE(seg.begin, t);
      ASSERT_GT(seg.end, t);
      if (seg.has_end()) {
        ASSERT_EQ(reference.At(absl::FromUnixSeconds(seg.end)).offset, seg.offset_after);
        ASSERT_EQ(reference.At(absl::FromUnixSeconds(seg.end - 1)).offset, seg.offset);
      }
      if (seg.has_begin()) {
        ASSERT_EQ(reference.At(absl::FromUnixSeconds(seg.begin - 1)).offset, seg.offset_before);
      }
    }
  }
}

}  // namespace
}  // namespace ql
