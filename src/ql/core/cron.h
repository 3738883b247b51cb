#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ql/core/status.h"
#include "ql/core/timezone.h"

namespace ql {

// The value sets of a parsed cron expression, one bit per allowed value.
struct CronFields {
  uint64_t seconds = 0;        // bit s for second s (0-59); only bit 0 for 5-field expressions
  uint64_t minutes = 0;        // bit m for minute m (0-59)
  uint32_t hours = 0;          // bit h for hour h (0-23)
  uint32_t days_of_month = 0;  // bit d for day d (1-31)
  uint16_t months = 0;         // bit m for month m (1-12)
  uint8_t days_of_week = 0;    // bit d for weekday d (0-6, Sunday = 0; 7 is folded onto 0)
  // True when the field's text begins with '*' ("*", "*/2"): such a field does not make the
  // day rule an OR (see CronExpression::MatchesDay).
  bool day_of_month_star = false;
  bool day_of_week_star = false;
};

// A parsed `qinglong/cron@v1` expression: pure wall-clock matching, no time zone.
//
// Grammar: 5 fields "minute hour day-of-month month day-of-week" (second = 0) or 6 fields
// "second minute hour day-of-month month day-of-week", separated by runs of spaces or tabs.
// Each field is a comma list of `*`, `*/S`, `N`, `N-M`, `N-M/S` or `N/S` (N to the field's
// maximum). Ranges: second and minute 0-59, hour 0-23, day-of-month 1-31, month 1-12 or
// JAN-DEC, day-of-week 0-7 or SUN-SAT (0 and 7 are Sunday; SUN ending a range means 7, so
// MON-SUN is the whole week). Names are case-insensitive; ranges never wrap.
class CronExpression {
 public:
  // Parses `text`. Errors (InvalidArgument), each naming the field, the token and why:
  //   cron_macro_unsupported   "@daily", "@reboot", ... (write the fields instead)
  //   cron_field_count         empty, whitespace only, or not 5 or 6 fields
  //   cron_empty_element       "1,,2", a leading or trailing comma
  //   cron_invalid_token       unknown names, '?', 'L', 'W', '#', stray characters
  //   cron_value_out_of_range  a value outside the field's range
  //   cron_range_reversed      "5-1"
  //   cron_step_zero           "*/0"
  //   cron_step_out_of_range   a step larger than the field's span ("*/61" for minutes)
  //   cron_never_fires         no day exists that matches, e.g. "0 0 30 2 *"
  static Result<CronExpression> Parse(std::string_view text);

  const CronFields& fields() const { return fields_; }
  // Returns true for the 6-field form (seconds first).
  bool has_seconds_field() const { return texts_.size() == 6; }
  // Returns true when the hour field allows all 24 hours ("*", "*/1", "0-23", ...): such a
  // schedule fires on both passes of a repeated (fall-back) wall-clock time.
  bool HourFieldCoversAllHours() const { return fields_.hours == 0xFFFFFFu; }
  // Returns the fields re-joined with single spaces, as written.
  std::string ToString() const;

  // Returns true when the date matches the day rule of Vixie cron and cronie: if either
  // day-of-month or day-of-week begins with '*', both must match; otherwise either may.
  bool MatchesDay(int64_t year, int month, int day) const;
  // Returns true when the wall-clock time matches every field.
  bool Matches(int64_t year, int month, int day, int hour, int minute, int second) const;
  // Returns the first matching wall-clock time at or after `from_local`, or nullopt when none
  // exists at or before `limit_local`. Both are local seconds: seconds since
  // 1970-01-01T00:00:00 on the wall clock, independent of any zone.
  std::optional<int64_t> NextMatchingLocal(int64_t from_local, int64_t limit_local) const;

 private:
  CronExpression() = default;
  // Returns the bit set (bits 1-31) of matching days in a month of `days_in_month` days whose
  // first day falls on weekday `first_weekday`.
  uint32_t DayMask(int first_weekday, int days_in_month) const;

  CronFields fields_;
  std::vector<std::string> texts_;
  // For each weekday of the 1st of a month: the days 1-31 whose weekday matches.
  std::array<uint32_t, 7> weekday_days_by_first_ = {};
};

// A cron expression bound to a time zone: computes fire instants.
//
// Every matching local wall-clock time fires once. A matching wall time skipped by a forward
// transition (spring forward) fires once at the transition instant, the first instant after the
// gap; several skipped wall times, and a matching wall time at the transition itself, are one
// fire. A wall time that occurs twice (fall back) fires once, at its first instant, unless the
// hour field covers all 24 hours: then it fires on both passes. Fire times are whole seconds.
class CronSchedule {
 public:
  // Parses `expression` and loads `timezone`; errors are those of CronExpression::Parse and
  // TimeZone::Load.
  static Result<CronSchedule> Create(std::string_view expression, std::string_view timezone);
  CronSchedule(CronExpression cron, TimeZone zone)
      : cron_(std::move(cron)), zone_(std::move(zone)), expression_(cron_.ToString()) {}

  // Returns the canonical expression text (fields joined by single spaces).
  const std::string& expression() const { return expression_; }
  const TimeZone& zone() const { return zone_; }
  const CronExpression& cron() const { return cron_; }

  // Returns the first fire instant (Unix ms, a whole second) strictly after `after_unix_ms`, or
  // nullopt when there is none within 400 years or before 10000-01-01T00:00:00Z.
  std::optional<int64_t> NextAfter(int64_t after_unix_ms) const;

 private:
  CronExpression cron_;
  TimeZone zone_;
  std::string expression_;
};

// Returns the first fire instant of `expression` in `zone` strictly after `after_unix_ms`.
// Errors: those of CronSchedule::Create, or NotFound "cron_no_next_fire" when none exists
// (see CronSchedule::NextAfter).
Result<int64_t> NextFire(std::string_view expression, std::string_view zone, int64_t after_unix_ms);

}  // namespace ql
