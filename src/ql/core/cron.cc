#include "ql/core/cron.h"

#include <algorithm>
#include <bit>

#include "ql/core/rfc3339.h"

namespace ql {
namespace {

constexpr int64_t kSecondsPerDay = 86400;
constexpr int64_t kSecondsPer400Years = 146097 * kSecondsPerDay;
constexpr int64_t kMinUnixSeconds = -62135596800;  // 0001-01-01T00:00:00Z
constexpr int64_t kMaxUnixSeconds = 253402300799;  // 9999-12-31T23:59:59Z
// Real zones change offset about twice a year; this bounds a 400-year walk generously.
constexpr int kMaxSegments = 4096;

int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

constexpr const char* kMonthNames[] = {"JAN", "FEB", "MAR", "APR", "MAY", "JUN",
                                       "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"};
constexpr const char* kWeekdayNames[] = {"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"};

struct FieldSpec {
  const char* name;
  int min;
  int max;                   // largest value accepted
  int open_max;              // upper end of "*" and "N/S"
  int span;                  // largest step accepted: the number of distinct values of the field
  const char* const* names;  // three-letter names, or nullptr
  int first_name_value;      // value of names[0]
  int name_count;
  const char* range_text;  // for messages
};

constexpr FieldSpec kSecond{"second", 0, 59, 59, 60, nullptr, 0, 0, "0-59"};
constexpr FieldSpec kMinute{"minute", 0, 59, 59, 60, nullptr, 0, 0, "0-59"};
constexpr FieldSpec kHour{"hour", 0, 23, 23, 24, nullptr, 0, 0, "0-23"};
constexpr FieldSpec kDayOfMonth{"day-of-month", 1, 31, 31, 31, nullptr, 0, 0, "1-31"};
constexpr FieldSpec kMonth{"month", 1, 12, 12, 12, kMonthNames, 1, 12, "1-12 or JAN-DEC"};
// As in cronie, "*" and "N/S" run to 7 (Sunday again), so "1/2" is MON,WED,FRI,SUN.
constexpr FieldSpec kDayOfWeek{"day-of-week", 0, 7, 7, 7, kWeekdayNames, 0, 7, "0-7 or SUN-SAT"};

std::string Quote(std::string_view s) {
  if (s.size() > 64) return "'" + std::string(s.substr(0, 61)) + "...'";
  return "'" + std::string(s) + "'";
}

bool AllDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

char UpperAscii(char c) { return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 'a' + 'A') : c; }

std::string Upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = UpperAscii(c);
  return out;
}

// Explains tokens that come from other cron dialects (Quartz, Spring) or are plain garbage.
std::string ExplainBadToken(std::string_view token, const FieldSpec& spec) {
  const std::string up = Upper(token);
  if (up.find('?') != std::string::npos) {
    return "'?' (Quartz \"no specific value\") is not supported; use '*'";
  }
  if (up.find('#') != std::string::npos) {
    return "'#' (Quartz \"n-th weekday of the month\") is not supported";
  }
  const bool digits_then = up.size() >= 2 && AllDigits(up.substr(0, up.size() - 1));
  if (up == "L" || up == "LW" || (digits_then && up.back() == 'L') ||
      (up.size() > 1 && up[0] == 'L' && up[1] == '-')) {
    return "'L' (Quartz \"last\") is not supported";
  }
  if (digits_then && up.back() == 'W') {
    return "'W' (Quartz \"nearest weekday\") is not supported";
  }
  for (char c : token) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x21 || u >= 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      return Quote(token) + " contains the byte 0x" + std::string(1, kHex[u >> 4]) +
             std::string(1, kHex[u & 15]) + ", which cron does not allow";
    }
  }
  for (char c : token) {
    const bool plain = (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
    if (!plain) {
      return Quote(token) + " contains '" + std::string(1, c) + "', which is not allowed here";
    }
  }
  if (spec.names != nullptr) {
    return Quote(token) + " is neither a number nor a " + spec.name + " name (" + spec.names[0] +
           "-" + spec.names[spec.name_count - 1] + ")";
  }
  return Quote(token) + " is not a number (" + spec.name + " takes " + spec.range_text + ")";
}

class FieldParser {
 public:
  FieldParser(const FieldSpec& spec, std::string_view text) : spec_(spec), text_(text) {}

  Status Parse(uint64_t* mask) {
    *mask = 0;
    size_t start = 0;
    while (true) {
      size_t comma = text_.find(',', start);
      const size_t end = comma == std::string_view::npos ? text_.size() : comma;
      const std::string_view element = text_.substr(start, end - start);
      if (element.empty()) {
        return Error("cron_empty_element", "has an empty list element; remove the extra comma");
      }
      QL_RETURN_IF_ERROR(ParseElement(element, mask));
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
    return Status::Ok();
  }

 private:
  Status Error(const char* reason, const std::string& why) const {
    return InvalidArgument(reason, std::string(spec_.name) + " field " + Quote(text_) + " " + why);
  }

  Status ParseValue(std::string_view token, bool range_end, int* value) const {
    if (AllDigits(token)) {
      int v = 0;
      for (char c : token) {
        v = v * 10 + (c - '0');
        if (v > 1'000'000) break;
      }
      if (v < spec_.min || v > spec_.max) {
        return Error("cron_value_out_of_range", "has value " + std::string(token) +
                                                    ", outside the " + spec_.name + " range " +
                                                    spec_.range_text);
      }
      *value = v;
      return Status::Ok();
    }
    if (spec_.names != nullptr && token.size() == 3) {
      const std::string up = Upper(token);
      for (int i = 0; i < spec_.name_count; ++i) {
        if (up == spec_.names[i]) {
          *value = spec_.first_name_value + i;
          // SUN closing a range means the Sunday at the end of the week (MON-SUN).
          if (&spec_ == &kDayOfWeek && *value == 0 && range_end) *value = 7;
          return Status::Ok();
        }
      }
    }
    return Error("cron_invalid_token", "is invalid: " + ExplainBadToken(token, spec_));
  }

  Status ParseElement(std::string_view element, uint64_t* mask) const {
    const size_t slash = element.find('/');
    const std::string_view base = element.substr(0, slash);
    int step = 1;
    const bool has_step = slash != std::string_view::npos;
    if (has_step) {
      const std::string_view step_text = element.substr(slash + 1);
      if (step_text.empty()) {
        return Error("cron_invalid_token",
                     "is invalid: " + Quote(element) + " needs a step number after '/'");
      }
      if (!AllDigits(step_text)) {
        if (step_text.find('/') != std::string_view::npos) {
          return Error("cron_invalid_token",
                       "is invalid: " + Quote(element) + " has more than one '/'");
        }
        return Error("cron_invalid_token", "is invalid: step " + Quote(step_text) + " in " +
                                               Quote(element) + " is not a number");
      }
      int v = 0;
      for (char c : step_text) {
        v = v * 10 + (c - '0');
        if (v > 1'000'000) break;
      }
      if (v == 0) {
        return Error("cron_step_zero",
                     "has step 0 in " + Quote(element) + "; a step must be at least 1");
      }
      if (v > spec_.span) {
        return Error("cron_step_out_of_range",
                     "has step " + std::string(step_text) + " in " + Quote(element) +
                         ", larger than the field's span of " + std::to_string(spec_.span) +
                         " values (" + spec_.range_text + ")");
      }
      step = v;
    }
    int low = 0;
    int high = 0;
    if (base == "*") {
      low = spec_.min;
      high = spec_.open_max;
    } else if (base.empty()) {
      return Error("cron_invalid_token", "is invalid: " + Quote(element) +
                                             " has no value before '/'; write '*" +
                                             std::string(element) + "' for every step");
    } else {
      const size_t dash = base.find('-');
      if (dash != std::string_view::npos) {
        const std::string_view first = base.substr(0, dash);
        const std::string_view last = base.substr(dash + 1);
        if (first.empty() || last.empty()) {
          return Error("cron_invalid_token",
                       "is invalid: " + Quote(base) + " is not a range; write it as N-M");
        }
        QL_RETURN_IF_ERROR(ParseValue(first, false, &low));
        QL_RETURN_IF_ERROR(ParseValue(last, true, &high));
        if (low > high) {
          return Error("cron_range_reversed",
                       "has reversed range " + Quote(base) + ": " + std::string(first) +
                           " comes after " + std::string(last) +
                           "; ranges do not wrap, so list both parts (e.g. 22-23,0-2)");
        }
      } else {
        QL_RETURN_IF_ERROR(ParseValue(base, false, &low));
        high = has_step ? spec_.open_max : low;
      }
    }
    for (int v = low; v <= high; v += step) {
      const int bit = (&spec_ == &kDayOfWeek && v == 7) ? 0 : v;
      *mask |= uint64_t{1} << bit;
    }
    return Status::Ok();
  }

  const FieldSpec& spec_;
  std::string_view text_;
};

std::string MacroAdvice(std::string_view macro) {
  const std::string lower = [&] {
    std::string s(macro);
    for (char& c : s) {
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    }
    return s;
  }();
  if (lower == "@yearly" || lower == "@annually") return "write '0 0 1 1 *' instead";
  if (lower == "@monthly") return "write '0 0 1 * *' instead";
  if (lower == "@weekly") return "write '0 0 * * 0' instead";
  if (lower == "@daily" || lower == "@midnight") return "write '0 0 * * *' instead";
  if (lower == "@hourly") return "write '0 * * * *' instead";
  if (lower == "@reboot") return "it is not a time schedule; run the task manually or at start-up";
  return "write the five fields (minute hour day-of-month month day-of-week) instead";
}

const std::string kFieldHelp =
    "expected 5 fields (minute hour day-of-month month day-of-week) or 6 fields (second minute "
    "hour day-of-month month day-of-week)";

}  // namespace

Result<CronExpression> CronExpression::Parse(std::string_view text) {
  std::vector<std::string_view> parts;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
    const size_t start = i;
    while (i < text.size() && text[i] != ' ' && text[i] != '\t') ++i;
    if (i > start) parts.push_back(text.substr(start, i - start));
  }
  if (parts.empty()) {
    return InvalidArgument("cron_field_count", "cron expression is empty; " + kFieldHelp);
  }
  if (parts[0].front() == '@') {
    return InvalidArgument(
        "cron_macro_unsupported",
        "cron macro " + Quote(parts[0]) + " is not supported; " + MacroAdvice(parts[0]));
  }
  if (parts.size() != 5 && parts.size() != 6) {
    return InvalidArgument("cron_field_count", "cron expression " + Quote(text) + " has " +
                                                   std::to_string(parts.size()) + " field" +
                                                   (parts.size() == 1 ? "" : "s") + "; " +
                                                   kFieldHelp);
  }
  CronExpression cron;
  const size_t offset = parts.size() == 6 ? 1 : 0;
  uint64_t mask = 0;
  if (offset == 1) {
    QL_RETURN_IF_ERROR(FieldParser(kSecond, parts[0]).Parse(&mask));
    cron.fields_.seconds = mask;
  } else {
    cron.fields_.seconds = 1;
  }
  QL_RETURN_IF_ERROR(FieldParser(kMinute, parts[offset + 0]).Parse(&mask));
  cron.fields_.minutes = mask;
  QL_RETURN_IF_ERROR(FieldParser(kHour, parts[offset + 1]).Parse(&mask));
  cron.fields_.hours = static_cast<uint32_t>(mask);
  QL_RETURN_IF_ERROR(FieldParser(kDayOfMonth, parts[offset + 2]).Parse(&mask));
  cron.fields_.days_of_month = static_cast<uint32_t>(mask);
  QL_RETURN_IF_ERROR(FieldParser(kMonth, parts[offset + 3]).Parse(&mask));
  cron.fields_.months = static_cast<uint16_t>(mask);
  QL_RETURN_IF_ERROR(FieldParser(kDayOfWeek, parts[offset + 4]).Parse(&mask));
  cron.fields_.days_of_week = static_cast<uint8_t>(mask);
  cron.fields_.day_of_month_star = parts[offset + 2].front() == '*';
  cron.fields_.day_of_week_star = parts[offset + 4].front() == '*';
  for (std::string_view part : parts) cron.texts_.emplace_back(part);

  for (int first = 0; first < 7; ++first) {
    uint32_t days = 0;
    for (int day = 1; day <= 31; ++day) {
      if ((cron.fields_.days_of_week >> ((first + day - 1) % 7)) & 1) days |= uint32_t{1} << day;
    }
    cron.weekday_days_by_first_[static_cast<size_t>(first)] = days;
  }

  // With both day fields restricted, any weekday in the set fires eventually. Otherwise both
  // must match; every (month, day) pair falls on every weekday within a 400-year cycle
  // (February 29 included), so only the pairs that exist at all decide.
  if (cron.fields_.day_of_month_star || cron.fields_.day_of_week_star) {
    bool possible = false;
    for (int month = 1; month <= 12 && !possible; ++month) {
      if (((cron.fields_.months >> month) & 1) == 0) continue;
      const int longest = month == 2 ? 29 : DaysInMonth(2001, month);
      const uint32_t existing = longest == 31 ? 0xFFFFFFFEu : ((uint32_t{1} << (longest + 1)) - 2);
      possible = (cron.fields_.days_of_month & existing) != 0;
    }
    if (!possible) {
      return InvalidArgument("cron_never_fires",
                             "cron expression " + Quote(cron.ToString()) +
                                 " never fires: day-of-month " + Quote(parts[offset + 2]) +
                                 " names no day that exists in month " + Quote(parts[offset + 3]) +
                                 " (February has at most 29 days; April, June, " +
                                 "September and November have 30)");
    }
  }
  return cron;
}

std::string CronExpression::ToString() const {
  std::string out;
  for (const std::string& text : texts_) {
    if (!out.empty()) out += ' ';
    out += text;
  }
  return out;
}

bool CronExpression::MatchesDay(int64_t year, int month, int day) const {
  const int weekday = WeekdayFromDays(DaysFromCivil(year, month, day));
  const bool dom = (fields_.days_of_month >> day) & 1;
  const bool dow = (fields_.days_of_week >> weekday) & 1;
  if (fields_.day_of_month_star || fields_.day_of_week_star) return dom && dow;
  return dom || dow;
}

bool CronExpression::Matches(int64_t year, int month, int day, int hour, int minute,
                             int second) const {
  return ((fields_.months >> month) & 1) && MatchesDay(year, month, day) &&
         ((fields_.hours >> hour) & 1) && ((fields_.minutes >> minute) & 1) &&
         ((fields_.seconds >> second) & 1);
}

uint32_t CronExpression::DayMask(int first_weekday, int days_in_month) const {
  const uint32_t existing =
      days_in_month == 31 ? 0xFFFFFFFEu : ((uint32_t{1} << (days_in_month + 1)) - 2);
  const uint32_t dom = fields_.days_of_month;
  const uint32_t dow = weekday_days_by_first_[static_cast<size_t>(first_weekday)];
  const uint32_t days =
      (fields_.day_of_month_star || fields_.day_of_week_star) ? (dom & dow) : (dom | dow);
  return days & existing;
}

std::optional<int64_t> CronExpression::NextMatchingLocal(int64_t from_local,
                                                         int64_t limit_local) const {
  if (from_local > limit_local) return std::nullopt;
  const int64_t from_days = FloorDiv(from_local, kSecondsPerDay);
  const int64_t second_of_day = from_local - from_days * kSecondsPerDay;
  const CivilDate date = CivilFromDays(from_days);
  const int64_t limit_year = CivilFromDays(FloorDiv(limit_local, kSecondsPerDay)).year;
  int64_t year = date.year;
  int month = date.month;
  int day = date.day;
  int hour = static_cast<int>(second_of_day / 3600);
  int minute = static_cast<int>(second_of_day / 60 % 60);
  int second = static_cast<int>(second_of_day % 60);

  // Each step either settles a field or moves a larger field forward and resets the smaller
  // ones, so the walk visits at most a few states per month up to `limit_year`.
  for (int guard = 0; guard < 1'000'000; ++guard) {
    if (year > limit_year) return std::nullopt;
    if (((fields_.months >> month) & 1) == 0) {
      const uint32_t later = fields_.months & ~((uint32_t{2} << month) - 1);
      if (later != 0) {
        month = std::countr_zero(later);
      } else {
        ++year;
        month = std::countr_zero(static_cast<uint32_t>(fields_.months));
      }
      day = 1;
      hour = minute = second = 0;
      continue;
    }
    const int64_t first_day = DaysFromCivil(year, month, 1);
    const uint32_t days = DayMask(WeekdayFromDays(first_day), DaysInMonth(year, month));
    const uint32_t day_candidates = day <= 31 ? days & (~uint32_t{0} << day) : 0;
    if (day_candidates == 0) {
      if (++month > 12) {
        month = 1;
        ++year;
      }
      day = 1;
      hour = minute = second = 0;
      continue;
    }
    const int next_day = std::countr_zero(day_candidates);
    if (next_day != day) {
      day = next_day;
      hour = minute = second = 0;
    }
    const uint32_t hour_candidates = hour <= 23 ? fields_.hours & (~uint32_t{0} << hour) : 0;
    if (hour_candidates == 0) {
      ++day;
      hour = minute = second = 0;
      continue;
    }
    const int next_hour = std::countr_zero(hour_candidates);
    if (next_hour != hour) {
      hour = next_hour;
      minute = second = 0;
    }
    const uint64_t minute_candidates =
        minute <= 59 ? fields_.minutes & (~uint64_t{0} << minute) : 0;
    if (minute_candidates == 0) {
      ++hour;
      minute = second = 0;
      continue;
    }
    const int next_minute = std::countr_zero(minute_candidates);
    if (next_minute != minute) {
      minute = next_minute;
      second = 0;
    }
    const uint64_t second_candidates =
        second <= 59 ? fields_.seconds & (~uint64_t{0} << second) : 0;
    if (second_candidates == 0) {
      ++minute;
      second = 0;
      continue;
    }
    second = std::countr_zero(second_candidates);
    const int64_t result =
        (first_day + day - 1) * kSecondsPerDay + hour * 3600 + minute * 60 + second;
    if (result > limit_local) return std::nullopt;
    return result;
  }
  return std::nullopt;
}

Result<CronSchedule> CronSchedule::Create(std::string_view expression, std::string_view timezone) {
  QL_ASSIGN_OR_RETURN(CronExpression cron, CronExpression::Parse(expression));
  QL_ASSIGN_OR_RETURN(TimeZone zone, TimeZone::Load(timezone));
  return CronSchedule(std::move(cron), std::move(zone));
}

std::optional<int64_t> CronSchedule::NextAfter(int64_t after_unix_ms) const {
  int64_t after = FloorDiv(after_unix_ms, 1000);
  if (after >= kMaxUnixSeconds) return std::nullopt;
  after = std::max(after, kMinUnixSeconds - 1);
  // Fires are whole seconds, so "strictly after after_unix_ms" means at or after `first`.
  const int64_t first = after + 1;
  auto finish = [](int64_t instant) -> std::optional<int64_t> {
    if (instant > kMaxUnixSeconds) return std::nullopt;
    return instant * 1000;
  };

  // Walk the zone's constant-offset segments in instant order. Inside a segment wall time and
  // instant map one to one; a forward transition ends a segment with the fire for its skipped
  // wall times; after a backward transition the repeated wall times are second passes, which
  // only fire when the hour field covers every hour.
  const bool both_passes = cron_.HourFieldCoversAllHours();
  OffsetSegment seg = zone_.SegmentAt(first);
  int64_t from_local = first + seg.offset;
  const int64_t limit_local = from_local + kSecondsPer400Years;
  if (seg.has_begin()) {
    if (seg.offset > seg.offset_before) {
      if (first == seg.begin &&
          cron_.NextMatchingLocal(seg.begin + seg.offset_before, seg.begin + seg.offset - 1)) {
        return finish(first);  // a skipped wall time fires at the transition itself
      }
    } else if (!both_passes) {
      from_local = std::max(from_local, seg.begin + seg.offset_before);
    }
  }
  std::optional<int64_t> wall = cron_.NextMatchingLocal(from_local, limit_local);
  for (int i = 0; i < kMaxSegments && wall.has_value(); ++i) {
    if (!seg.has_end() || *wall < seg.end + seg.offset) return finish(*wall - seg.offset);
    // `wall` lies at or after this segment's last wall time.
    if (seg.offset_after > seg.offset && *wall < seg.end + seg.offset_after) {
      return finish(seg.end);  // skipped by the forward transition at seg.end
    }
    if (seg.offset_after < seg.offset && both_passes) {
      // The wall times [end + offset_after, end + offset) are lived again.
      wall = cron_.NextMatchingLocal(seg.end + seg.offset_after, limit_local);
    }
    seg = zone_.SegmentAt(seg.end);
  }
  return std::nullopt;
}

Result<int64_t> NextFire(std::string_view expression, std::string_view zone,
                         int64_t after_unix_ms) {
  QL_ASSIGN_OR_RETURN(CronSchedule schedule, CronSchedule::Create(expression, zone));
  std::optional<int64_t> next = schedule.NextAfter(after_unix_ms);
  if (!next) {
    return NotFound("cron_no_next_fire",
                    "cron expression " + Quote(schedule.expression()) + " in " +
                        schedule.zone().name() + " has no fire time after " +
                        FormatRfc3339Utc(after_unix_ms) + " within 400 years or before year 10000");
  }
  return *next;
}

}  // namespace ql
