#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "ql/core/status.h"

namespace ql {

// Proleptic Gregorian calendar arithmetic, valid for every int64 day count used here.
struct CivilDate {
  int64_t year = 1970;
  int month = 1;  // 1-12
  int day = 1;    // 1-31
};

// Returns the number of days from 1970-01-01 to the given date (negative before it).
int64_t DaysFromCivil(int64_t year, int month, int day);
// Returns the date `days` days after 1970-01-01.
CivilDate CivilFromDays(int64_t days);
// Returns 0 (Sunday) to 6 (Saturday) for the day `days` after 1970-01-01.
int WeekdayFromDays(int64_t days);
// Returns true for Gregorian leap years.
bool IsLeapYear(int64_t year);
// Returns the number of days in `month` (1-12) of `year`.
int DaysInMonth(int64_t year, int month);

// The IANA zone and link names listed in a tzdata.zi file ("Z NAME ..." and "L TARGET LINK"
// lines), used to store zone names canonically.
class ZoneCatalog {
 public:
  ZoneCatalog() = default;

  // Parses the text of a tzdata.zi file; lines it does not understand are ignored.
  static ZoneCatalog Parse(std::string_view tzdata_zi);
  // Returns the catalog read once, lazily and thread-safely, from $TZDIR/tzdata.zi (or
  // /usr/share/zoneinfo/tzdata.zi when TZDIR is unset). Empty when the file is absent.
  static const ZoneCatalog& Installed();

  // Returns true when no names are known (no tzdata.zi): names are then kept as given.
  bool empty() const { return zones_.empty() && links_.empty(); }
  // Returns the Zone name a zone or link name resolves to (following link chains), or nullopt
  // when `name` is not listed or its links do not end at a Zone.
  std::optional<std::string> Canonicalize(std::string_view name) const;
  // Returns a listed name equal to `name` ignoring ASCII case, or nullopt.
  std::optional<std::string> FindIgnoringCase(std::string_view name) const;

 private:
  std::unordered_map<std::string, bool> zones_;         // Zone names
  std::unordered_map<std::string, std::string> links_;  // link name -> target
};

// The maximal interval [begin, end) of instants (Unix seconds) over which a zone's UTC offset
// is constant, with the offsets on either side.
struct OffsetSegment {
  static constexpr int64_t kNoTransition = std::numeric_limits<int64_t>::min();
  static constexpr int64_t kNoEnd = std::numeric_limits<int64_t>::max();

  int64_t begin = kNoTransition;  // the transition instant that starts the segment, if any
  int64_t end = kNoEnd;           // the next transition instant, if any
  int32_t offset_before = 0;      // offset before `begin` (== offset when there is none)
  int32_t offset = 0;             // seconds east of UTC inside the segment
  int32_t offset_after = 0;       // offset from `end` on (== offset when there is none)

  bool has_begin() const { return begin != kNoTransition; }
  bool has_end() const { return end != kNoEnd; }
};

// An IANA time zone, loaded from the system zoneinfo database (absl/cctz) and named canonically.
// Cheap to copy; all copies of one zone share immutable transition data, so a TimeZone may be
// used from several threads.
class TimeZone {
 public:
  // Loads the zone `name`, which must be an explicit IANA name such as "Asia/Shanghai". Link
  // names are stored as the Zone they point to ("US/Eastern" -> "America/New_York") using
  // ZoneCatalog::Installed(). Errors (InvalidArgument):
  //   timezone_required  `name` is empty;
  //   timezone_invalid   not an IANA zone name: "localtime", "posixrules", "Factory", paths,
  //                      "." or ".." components, characters outside [A-Za-z0-9._+-], fixed
  //                      offsets such as "+08:00" or "UTC+8";
  //   timezone_unknown   no such zone (case matters; the message suggests the correctly cased
  //                      name when one exists) or no loadable zone file.
  static Result<TimeZone> Load(std::string_view name);
  // Loads like Load(name) but canonicalises with `catalog` (an empty catalog keeps names).
  static Result<TimeZone> Load(std::string_view name, const ZoneCatalog& catalog);

  // Returns the canonical IANA name.
  const std::string& name() const;
  // Returns the UTC offset in seconds east of UTC in effect at `unix_seconds`.
  int32_t OffsetAt(int64_t unix_seconds) const;
  // Returns the constant-offset segment containing `unix_seconds`.
  OffsetSegment SegmentAt(int64_t unix_seconds) const;

  friend bool operator==(const TimeZone& a, const TimeZone& b) { return a.name() == b.name(); }

  struct Data;  // immutable, shared per canonical name

 private:
  explicit TimeZone(std::shared_ptr<const Data> data) : data_(std::move(data)) {}
  std::shared_ptr<const Data> data_;
};

}  // namespace ql
