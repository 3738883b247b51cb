// Feeds the input as up to three lines: a cron expression, a time-zone name (UTC when it does
// not load) and a start instant (RFC 3339, or Unix seconds; 2026-01-01T00:00:00Z when absent),
// to CronExpression::Parse, CronExpression::NextMatchingLocal and CronSchedule::NextAfter
// (cron.h).
//
// Invariants:
// - an accepted expression keeps only values of each field's range, reads back the same from
//   ToString(), and reads the same in upper and in lower case (names are case-insensitive);
// - NextMatchingLocal agrees with a day-by-day scan of the calendar that asks Matches for
//   every candidate (a matching time at or after the start, none before it, none past the
//   limit);
// - the fire times of a schedule (from the start, and from just before the zone's next two
//   transitions) are whole seconds, strictly increasing, and each one is the first instant the
//   documented rules give after the previous one: walking the zone's constant-offset segments,
//   the first matching wall time in each segment (a repeated fall-back hour only on its first
//   pass unless the hour field covers every hour), or the instant of a forward transition whose
//   skipped wall times hold a match.

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "ql/core/cron.h"
#include "ql/core/rfc3339.h"
#include "ql/core/timezone.h"

namespace {

using ql::CronExpression;

constexpr int64_t kDay = 86400;
constexpr int64_t kScanDays = 3 * 366;             // the reference scans this far and no farther
constexpr int64_t kMaxUnixSeconds = 253402300799;  // 9999-12-31T23:59:59Z
constexpr int64_t kDefaultStart = 1767225600;      // 2026-01-01T00:00:00Z

int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

bool MatchesLocal(const CronExpression& cron, int64_t local) {
  const int64_t days = FloorDiv(local, kDay);
  const int64_t second = local - days * kDay;
  const ql::CivilDate date = ql::CivilFromDays(days);
  return cron.Matches(date.year, date.month, date.day, static_cast<int>(second / 3600),
                      static_cast<int>(second / 60 % 60), static_cast<int>(second % 60));
}

// The reference: the first local second at or after `from` and at or before `limit` that
// Matches, found by trying every day of the calendar and, on a matching day, every allowed
// hour, minute and second in order. Scans at most kScanDays days; `scanned_to` says how far.
struct Scan {
  std::optional<int64_t> found;
  int64_t scanned_to;  // no match in [from, scanned_to] when nothing was found
};

Scan ScanNext(const CronExpression& cron, int64_t from, int64_t limit) {
  const ql::CronFields& f = cron.fields();
  const int64_t first_day = FloorDiv(from, kDay);
  const int64_t last_day = std::min(FloorDiv(limit, kDay), first_day + kScanDays);
  for (int64_t day = first_day; day <= last_day; ++day) {
    const ql::CivilDate date = ql::CivilFromDays(day);
    if (((f.months >> date.month) & 1) == 0) continue;
    if (!cron.MatchesDay(date.year, date.month, date.day)) continue;
    const int64_t start = day * kDay;
    const int64_t skip = day == first_day ? from - start : 0;  // seconds of the day before `from`
    for (int h = static_cast<int>(skip / 3600); h < 24; ++h) {
      if (((f.hours >> h) & 1) == 0) continue;
      for (int m = 0; m < 60; ++m) {
        if (((f.minutes >> m) & 1) == 0) continue;
        for (int s = 0; s < 60; ++s) {
          if (((f.seconds >> s) & 1) == 0) continue;
          const int64_t t = start + h * 3600 + m * 60 + s;
          if (t < from) continue;
          if (t > limit) return {std::nullopt, limit};
          QL_FUZZ_CHECK(MatchesLocal(cron, t), "the scan found a time Matches refuses");
          return {t, t};
        }
      }
    }
  }
  return {std::nullopt, std::min(limit, last_day * kDay + kDay - 1)};
}

void CheckFields(const CronExpression& cron) {
  const ql::CronFields& f = cron.fields();
  QL_FUZZ_CHECK((f.seconds >> 60) == 0 && f.seconds != 0, cron.ToString());
  QL_FUZZ_CHECK((f.minutes >> 60) == 0 && f.minutes != 0, cron.ToString());
  QL_FUZZ_CHECK((f.hours >> 24) == 0 && f.hours != 0, cron.ToString());
  QL_FUZZ_CHECK((f.days_of_month & 1) == 0 && f.days_of_month != 0, cron.ToString());
  QL_FUZZ_CHECK((f.months & 0xE001) == 0 && f.months != 0, cron.ToString());
  QL_FUZZ_CHECK((f.days_of_week >> 7) == 0 && f.days_of_week != 0, cron.ToString());
  if (!cron.has_seconds_field()) QL_FUZZ_CHECK(f.seconds == 1, cron.ToString());
  QL_FUZZ_CHECK(cron.HourFieldCoversAllHours() == (f.hours == 0xFFFFFF), cron.ToString());
}

bool SameFields(const ql::CronFields& a, const ql::CronFields& b) {
  return a.seconds == b.seconds && a.minutes == b.minutes && a.hours == b.hours &&
         a.days_of_month == b.days_of_month && a.months == b.months &&
         a.days_of_week == b.days_of_week && a.day_of_month_star == b.day_of_month_star &&
         a.day_of_week_star == b.day_of_week_star;
}

std::string Cased(std::string_view text, bool upper) {
  std::string out(text);
  for (char& c : out) {
    if (upper && c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    if (!upper && c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// What the documented rules say the first fire strictly after `after` (Unix seconds) is: a
// fire instant, nullopt for "none before the year 10000", or "unknown" when the reference scan
// cannot tell (a match farther away than it scans).
struct Expected {
  bool known = false;
  std::optional<int64_t> fire;
};

Expected ExpectedNext(const ql::CronSchedule& schedule, int64_t after) {
  const CronExpression& cron = schedule.cron();
  const bool both_passes = cron.HourFieldCoversAllHours();
  int64_t u = after + 1;  // the first instant still to be considered
  for (int segments = 0; segments < 64; ++segments) {
    if (u > kMaxUnixSeconds) return {true, std::nullopt};
    const ql::OffsetSegment seg = schedule.zone().SegmentAt(u);
    if (u == seg.begin && seg.offset > seg.offset_before) {
      // Wall times skipped by this forward transition fire at its instant.
      const Scan gap = ScanNext(cron, seg.begin + seg.offset_before, seg.begin + seg.offset - 1);
      if (gap.found) return {true, u};
      if (gap.scanned_to < seg.begin + seg.offset - 1) return {};
    }
    int64_t from_local = u + seg.offset;
    if (!both_passes && seg.has_begin() && seg.offset < seg.offset_before) {
      from_local = std::max(from_local, seg.begin + seg.offset_before);  // first passes only
    }
    const int64_t end_local =
        seg.has_end() ? seg.end + seg.offset - 1 : kMaxUnixSeconds + seg.offset;
    if (from_local <= end_local) {
      const Scan scan = ScanNext(cron, from_local, end_local);
      if (scan.found) {
        const int64_t fire = *scan.found - seg.offset;
        return {true, fire <= kMaxUnixSeconds ? std::optional<int64_t>(fire) : std::nullopt};
      }
      if (scan.scanned_to < end_local) return {};
    }
    if (!seg.has_end()) return {true, std::nullopt};
    u = seg.end;
  }
  return {};
}

void CheckSchedule(const ql::CronSchedule& schedule, int64_t start_ms) {
  int64_t after_ms = start_ms;
  for (int i = 0; i < 6; ++i) {
    const std::optional<int64_t> next = schedule.NextAfter(after_ms);
    const int64_t after = FloorDiv(after_ms, 1000);
    const std::string where = schedule.expression() + " in " + schedule.zone().name() + " after " +
                              std::to_string(after_ms);
    if (after >= -62135596800) {  // the reference does not model instants before year 1
      const Expected expected = ExpectedNext(schedule, after);
      if (expected.known) {
        QL_FUZZ_CHECK(
            next == (expected.fire ? std::optional<int64_t>(*expected.fire * 1000) : std::nullopt),
            where + ": got " + (next ? std::to_string(*next) : "none") + ", expected " +
                (expected.fire ? std::to_string(*expected.fire * 1000) : "none"));
      }
    }
    if (!next) return;
    QL_FUZZ_CHECK(*next > after_ms && *next % 1000 == 0, where);
    QL_FUZZ_CHECK(*next <= kMaxUnixSeconds * 1000, where);
    after_ms = *next;
  }
}

std::string_view Line(std::string_view& rest) {
  const size_t eol = rest.find('\n');
  const std::string_view line = rest.substr(0, eol);
  rest.remove_prefix(eol == std::string_view::npos ? rest.size() : eol + 1);
  return line;
}

int64_t ParseStart(std::string_view text) {
  if (text.empty()) return kDefaultStart * 1000;
  if (const ql::Result<int64_t> ms = ql::ParseRfc3339(text); ms.ok()) return *ms;
  int64_t seconds = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), seconds);
  if (ec != std::errc() || ptr != text.data() + text.size()) return kDefaultStart * 1000;
  // Whole years 0 .. 10000 or so; the schedule's own bounds are tested at their edges.
  return std::clamp<int64_t>(seconds, -62167219200 - 86400, kMaxUnixSeconds + 86400) * 1000;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  const std::string_view expression = Line(rest);
  const std::string_view zone_name = Line(rest);
  const std::string_view start_text = Line(rest);

  const ql::Result<CronExpression> cron = CronExpression::Parse(expression);
  for (bool upper : {false, true}) {
    const ql::Result<CronExpression> cased = CronExpression::Parse(Cased(expression, upper));
    QL_FUZZ_CHECK(cased.ok() == cron.ok(), std::string(expression));
    if (cron.ok())
      QL_FUZZ_CHECK(SameFields(cased->fields(), cron->fields()), std::string(expression));
  }
  if (!cron.ok()) {
    QL_FUZZ_CHECK(cron.status().code() == ql::StatusCode::kInvalidArgument &&
                      cron.status().reason().starts_with("cron_"),
                  cron.status().ToString());
    return 0;
  }
  CheckFields(*cron);
  const ql::Result<CronExpression> again = CronExpression::Parse(cron->ToString());
  QL_FUZZ_CHECK(again.ok() && SameFields(again->fields(), cron->fields()) &&
                    again->ToString() == cron->ToString(),
                cron->ToString());

  const int64_t start_ms = ParseStart(start_text);
  const int64_t start_local = FloorDiv(start_ms, 1000);
  const int64_t limit_local = start_local + kScanDays * kDay;
  const std::optional<int64_t> local = cron->NextMatchingLocal(start_local, limit_local);
  const Scan scan = ScanNext(*cron, start_local, limit_local);
  QL_FUZZ_CHECK(scan.found || scan.scanned_to == limit_local, "the reference scan stopped early");
  QL_FUZZ_CHECK(local == scan.found, cron->ToString() + " from local " +
                                         std::to_string(start_local) + ": got " +
                                         (local ? std::to_string(*local) : "none") + ", expected " +
                                         (scan.found ? std::to_string(*scan.found) : "none"));

  ql::Result<ql::TimeZone> zone = ql::TimeZone::Load(zone_name);
  if (!zone.ok()) zone = ql::TimeZone::Load("UTC");
  QL_FUZZ_CHECK(zone.ok(), "UTC does not load");
  const ql::CronSchedule schedule(*cron, *zone);
  CheckSchedule(schedule, start_ms);
  // Also from just before the zone's next two transitions, where the DST rules apply.
  int64_t at = start_local;
  for (int i = 0; i < 2; ++i) {
    const ql::OffsetSegment seg = zone->SegmentAt(at);
    if (!seg.has_end() || seg.end > kMaxUnixSeconds) break;
    CheckSchedule(schedule, (seg.end - 3 * 3600) * 1000);
    CheckSchedule(schedule, (seg.end - 1) * 1000);
    at = seg.end;
  }
  return 0;
}
