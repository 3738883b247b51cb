#include "ql/core/timezone.h"

#include <absl/time/civil_time.h>
#include <absl/time/time.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <vector>

namespace ql {

int64_t DaysFromCivil(int64_t year, int month, int day) {
  // Howard Hinnant's days_from_civil, on 400-year eras starting in March.
  const int64_t y = year - (month <= 2 ? 1 : 0);
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;                          // [0, 399]
  const int64_t mp = (month + 9) % 12;                        // March = 0
  const int64_t doy = (153 * mp + 2) / 5 + day - 1;           // [0, 365]
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;  // [0, 146096]
  return era * 146097 + doe - 719468;
}

CivilDate CivilFromDays(int64_t days) {
  const int64_t z = days + 719468;
  const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const int64_t doe = z - era * 146097;                                       // [0, 146096]
  const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;  // [0, 399]
  const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);                // [0, 365]
  const int64_t mp = (5 * doy + 2) / 153;                                     // [0, 11]
  CivilDate date;
  date.day = static_cast<int>(doy - (153 * mp + 2) / 5 + 1);
  date.month = static_cast<int>(mp < 10 ? mp + 3 : mp - 9);
  date.year = yoe + era * 400 + (date.month <= 2 ? 1 : 0);
  return date;
}

int WeekdayFromDays(int64_t days) {
  // 1970-01-01 was a Thursday.
  const int64_t w = (days + 4) % 7;
  return static_cast<int>(w < 0 ? w + 7 : w);
}

bool IsLeapYear(int64_t year) { return year % 4 == 0 && (year % 100 != 0 || year % 400 == 0); }

int DaysInMonth(int64_t year, int month) {
  static constexpr int kDays[13] = {0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return month == 2 && IsLeapYear(year) ? 29 : kDays[month];
}

namespace {

std::string ToLowerAscii(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::string ZoneInfoDir() {
  const char* dir = std::getenv("TZDIR");
  if (dir != nullptr && *dir != '\0') return dir;
  return "/usr/share/zoneinfo";
}

}  // namespace

ZoneCatalog ZoneCatalog::Parse(std::string_view text) {
  ZoneCatalog catalog;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    if (line.size() < 3 || line[1] != ' ') continue;
    std::vector<std::string_view> words;
    size_t i = 0;
    while (i < line.size()) {
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
      size_t start = i;
      while (i < line.size() && line[i] != ' ' && line[i] != '\t' && line[i] != '\r') ++i;
      if (i > start) words.push_back(line.substr(start, i - start));
    }
    if (words.size() >= 2 && words[0] == "Z") {
      catalog.zones_.emplace(std::string(words[1]), true);
    } else if (words.size() >= 3 && words[0] == "L") {
      catalog.links_.insert_or_assign(std::string(words[2]), std::string(words[1]));
    }
  }
  return catalog;
}

const ZoneCatalog& ZoneCatalog::Installed() {
  // A function-local static is initialised exactly once even under concurrent first calls.
  static const ZoneCatalog* const catalog = [] {
    std::ifstream in(ZoneInfoDir() + "/tzdata.zi", std::ios::binary);
    if (!in) return new ZoneCatalog();
    std::stringstream buffer;
    buffer << in.rdbuf();
    return new ZoneCatalog(Parse(buffer.str()));
  }();
  return *catalog;
}

std::optional<std::string> ZoneCatalog::Canonicalize(std::string_view name) const {
  std::string current(name);
  // Links may point at links; a bounded walk also stops on malformed cycles.
  for (int hop = 0; hop < 16; ++hop) {
    if (zones_.count(current) != 0) return current;
    auto it = links_.find(current);
    if (it == links_.end()) return std::nullopt;
    current = it->second;
  }
  return std::nullopt;
}

std::optional<std::string> ZoneCatalog::FindIgnoringCase(std::string_view name) const {
  const std::string wanted = ToLowerAscii(name);
  std::optional<std::string> best;
  auto consider = [&](const std::string& candidate) {
    if (ToLowerAscii(candidate) == wanted && (!best || candidate < *best)) best = candidate;
  };
  for (const auto& [zone, unused] : zones_) consider(zone);
  for (const auto& [link, unused] : links_) consider(link);
  return best;
}

struct TimeZone::Data {
  std::string name;
  int32_t initial_offset = 0;   // offset before the first transition
  std::vector<int64_t> at;      // transition instants, strictly increasing
  std::vector<int32_t> offset;  // offset[i] is in effect from at[i] on
};

namespace {

constexpr int64_t kSecondsPer400Years = 146097LL * 86400;
// Transitions are materialised up to just past 9999-12-31, the last instant cron computes.
constexpr int64_t kTableHorizon = 253402300800LL + 2 * 86400;

int64_t CivilToUnix(const absl::CivilSecond& cs) {
  return cs - absl::CivilSecond(1970, 1, 1, 0, 0, 0);
}

std::shared_ptr<const TimeZone::Data> BuildData(const std::string& name, const absl::TimeZone& az) {
  auto data = std::make_shared<TimeZone::Data>();
  data->name = name;
  data->initial_offset = az.At(absl::UnixEpoch()).offset;
  absl::TimeZone::CivilTransition tr;
  absl::Time cursor = absl::InfinitePast();
  bool first = true;
  for (int guard = 0; guard < 100000 && az.NextTransition(cursor, &tr); ++guard) {
    const absl::Time instant = az.At(tr.to).trans;
    if (!first && instant <= cursor) break;  // enumeration past cctz's horizon is unspecified
    const int64_t s = absl::ToUnixSeconds(instant);
    const int32_t before = static_cast<int32_t>(CivilToUnix(tr.from) - s);
    const int32_t after = static_cast<int32_t>(CivilToUnix(tr.to) - s);
    if (first) data->initial_offset = before;
    first = false;
    cursor = instant;
    if (before == after) continue;  // abbreviation-only change
    if (!data->offset.empty() && data->offset.back() == after) continue;
    data->at.push_back(s);
    data->offset.push_back(after);
  }

  // cctz enumerates rule-based transitions only about 400 years past the last explicit one and
  // answers later instants by shifting whole 400-year Gregorian cycles. Materialise the same
  // periodic continuation so segment lookups work up to year 9999, after checking that the
  // zone really is periodic (zones without future DST rules are constant instead).
  const size_t n = data->at.size();
  if (n >= 2) {
    const int64_t last = data->at.back();
    size_t window = n;
    while (window > 0 && data->at[window - 1] > last - kSecondsPer400Years) --window;
    bool periodic = window > 0 && window + 1 < n;
    for (size_t i = window; periodic && i < n; ++i) {
      const int64_t shifted = data->at[i] + kSecondsPer400Years;
      const int32_t before = data->offset[i - 1];
      periodic = az.At(absl::FromUnixSeconds(shifted)).offset == data->offset[i] &&
                 az.At(absl::FromUnixSeconds(shifted - 1)).offset == before;
    }
    periodic = periodic && data->offset[window - 1] == data->offset[n - 1];
    for (int64_t shift = kSecondsPer400Years; periodic; shift += kSecondsPer400Years) {
      for (size_t i = window; i < n; ++i) {
        const int64_t s = data->at[i] + shift;
        if (s > kTableHorizon) {
          periodic = false;
          break;
        }
        data->at.push_back(s);
        data->offset.push_back(data->offset[i]);
      }
    }
  }
  return data;
}

std::shared_ptr<const TimeZone::Data> LoadData(const std::string& name) {
  static std::mutex* const mu = new std::mutex;
  static auto* const cache =
      new std::unordered_map<std::string, std::shared_ptr<const TimeZone::Data>>();
  std::lock_guard<std::mutex> lock(*mu);
  auto it = cache->find(name);
  if (it != cache->end()) return it->second;
  absl::TimeZone az;
  if (!absl::LoadTimeZone(name, &az)) return nullptr;
  auto data = BuildData(name, az);
  cache->emplace(name, data);
  return data;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Recognises "+08:00", "-0500", "UTC+8", "GMT-03:00", "Z+1" and the like.
bool LooksLikeFixedOffset(std::string_view name) {
  std::string lower = ToLowerAscii(name);
  std::string_view rest = lower;
  for (std::string_view prefix : {"utc", "gmt", "ut", "z"}) {
    if (rest.substr(0, prefix.size()) == prefix) {
      rest.remove_prefix(prefix.size());
      break;
    }
  }
  if (rest.size() < 2 || (rest[0] != '+' && rest[0] != '-')) return false;
  rest.remove_prefix(1);
  for (char c : rest) {
    if (!IsDigit(c) && c != ':' && c != '.') return false;
  }
  return IsDigit(rest[0]);
}

std::string Quote(std::string_view s) { return "'" + std::string(s) + "'"; }

Status Invalid(std::string message) {
  return InvalidArgument("timezone_invalid", std::move(message));
}

constexpr std::string_view kExample = "an IANA name such as Asia/Shanghai or America/New_York";

Status CheckName(std::string_view name) {
  if (name.empty()) {
    return InvalidArgument("timezone_required",
                           "a time zone is required; give " + std::string(kExample));
  }
  if (name == "localtime") {
    return Invalid("'localtime' means the host's time zone, which QingLong never assumes; give " +
                   std::string(kExample));
  }
  if (name == "posixrules") {
    return Invalid("'posixrules' is a tzdata internal file, not a time zone; give " +
                   std::string(kExample));
  }
  if (name == "Factory") {
    return Invalid("'Factory' is a placeholder zone without real offsets; give " +
                   std::string(kExample));
  }
  if (name.front() == '/') {
    return Invalid(Quote(name) + " is a file path, not a time zone name; give " +
                   std::string(kExample));
  }
  const bool offset_like = LooksLikeFixedOffset(name);
  auto syntax_error = [&](std::string why) {
    if (offset_like) {
      return Invalid(Quote(name) +
                     " is a fixed UTC offset, not an IANA time zone; give the region's zone, " +
                     std::string(kExample));
    }
    return Invalid("time zone " + Quote(name) + " is not an IANA zone name: " + why);
  };
  if (name.size() > 255) return syntax_error("it is longer than 255 characters");
  size_t start = 0;
  while (start <= name.size()) {
    size_t slash = name.find('/', start);
    if (slash == std::string_view::npos) slash = name.size();
    std::string_view part = name.substr(start, slash - start);
    if (part.empty()) return syntax_error("it has an empty path component");
    if (part == "." || part == "..")
      return syntax_error("it contains a '" + std::string(part) + "' component");
    if (part.front() == '-') return syntax_error("a component starts with '-'");
    for (char c : part) {
      const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || IsDigit(c) || c == '.' ||
                      c == '_' || c == '-' || c == '+';
      if (!ok) {
        const unsigned char u = static_cast<unsigned char>(c);
        std::string shown = (u >= 0x21 && u < 0x7f)
                                ? std::string("'") + c + "'"
                                : "byte 0x" + std::string(1, "0123456789abcdef"[u >> 4]) +
                                      std::string(1, "0123456789abcdef"[u & 15]);
        return syntax_error("it contains " + shown +
                            "; zone names use only letters, digits, '.', '_', '-', '+' and '/'");
      }
    }
    if (start == 0 && slash < name.size() && (part == "posix" || part == "right")) {
      return Invalid(Quote(name) + " names a tzdata build variant, not a zone; write " +
                     Quote(name.substr(slash + 1)) + " instead");
    }
    start = slash + 1;
  }
  return Status::Ok();
}

Status UnknownZone(std::string_view name, const ZoneCatalog& catalog) {
  if (LooksLikeFixedOffset(name)) {
    return Invalid(Quote(name) +
                   " is a fixed UTC offset, not an IANA time zone; give the region's zone, " +
                   std::string(kExample));
  }
  if (auto suggestion = catalog.FindIgnoringCase(name)) {
    return InvalidArgument("timezone_unknown",
                           "unknown time zone " + Quote(name) +
                               "; zone names are case-sensitive: did you mean " + *suggestion +
                               "?");
  }
  return InvalidArgument("timezone_unknown",
                         "unknown time zone " + Quote(name) +
                             ": it is not in the IANA time zone database; give " +
                             std::string(kExample));
}

}  // namespace

Result<TimeZone> TimeZone::Load(std::string_view name) {
  return Load(name, ZoneCatalog::Installed());
}

Result<TimeZone> TimeZone::Load(std::string_view name, const ZoneCatalog& catalog) {
  QL_RETURN_IF_ERROR(CheckName(name));
  std::string canonical(name);
  if (!catalog.empty()) {
    std::optional<std::string> resolved = catalog.Canonicalize(name);
    if (!resolved) return UnknownZone(name, catalog);
    canonical = std::move(*resolved);
    if (canonical == "Factory") QL_RETURN_IF_ERROR(CheckName(canonical));
  }
  std::shared_ptr<const Data> data = LoadData(canonical);
  if (data == nullptr && canonical != name) data = LoadData(std::string(name));
  if (data == nullptr) {
    if (catalog.empty()) return UnknownZone(name, catalog);
    return InvalidArgument(
        "timezone_unknown",
        "time zone " + Quote(name) + " has no loadable zone file under " + ZoneInfoDir());
  }
  return TimeZone(std::move(data));
}

const std::string& TimeZone::name() const { return data_->name; }

int32_t TimeZone::OffsetAt(int64_t unix_seconds) const {
  const auto& at = data_->at;
  const auto it = std::upper_bound(at.begin(), at.end(), unix_seconds);
  if (it == at.begin()) return data_->initial_offset;
  return data_->offset[static_cast<size_t>(it - at.begin()) - 1];
}

OffsetSegment TimeZone::SegmentAt(int64_t unix_seconds) const {
  const auto& at = data_->at;
  const auto& off = data_->offset;
  const size_t next =
      static_cast<size_t>(std::upper_bound(at.begin(), at.end(), unix_seconds) - at.begin());
  OffsetSegment seg;
  if (next == 0) {
    seg.offset = seg.offset_before = data_->initial_offset;
  } else {
    seg.begin = at[next - 1];
    seg.offset = off[next - 1];
    seg.offset_before = next >= 2 ? off[next - 2] : data_->initial_offset;
  }
  if (next < at.size()) {
    seg.end = at[next];
    seg.offset_after = off[next];
  } else {
    seg.offset_after = seg.offset;
  }
  return seg;
}

}  // namespace ql
