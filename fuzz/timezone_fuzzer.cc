// Feeds the input's first line as a time-zone name to TimeZone::Load (the installed tzdata and
// its catalog of names), and each further line as an instant (Unix seconds) to OffsetAt and
// SegmentAt of the zone that loads (timezone.h).
//
// Invariants:
// - a refusal is InvalidArgument timezone_required / timezone_invalid / timezone_unknown;
// - only a plain IANA name loads (letters, digits, '.', '_', '-', '+' and '/'; no empty, "." or
//   ".." component, no leading '/', no "posix/" or "right/" tree, at most 255 bytes, not
//   localtime, posixrules or Factory), so no name reaches a file outside the zoneinfo tree; the
//   loaded zone's canonical name is a Zone of the catalog, loads again as itself, and passes the
//   same rules;
// - OffsetAt agrees with absl (cctz) at every instant up to the year 9999, including around
//   every transition the probes meet and the periodic continuation past cctz's own table;
// - SegmentAt(t) contains t, has the offset OffsetAt gives inside it and on either side, and
//   segments follow one another: the next one begins where this one ends, each with another
//   offset.

#include <absl/time/time.h>

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.h"
#include "ql/core/timezone.h"

namespace {

constexpr int64_t kMaxProbe = 253402300800LL + 86400;  // just past 9999-12-31
constexpr int64_t kMinProbe = -62167219200LL;          // 0000-01-01

bool NameChar(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-' || c == '+' || c == '/';
}

// The documented rules for a name that may load, checked independently of timezone.cc.
bool PlainName(std::string_view name) {
  if (name.empty() || name.size() > 255 || name == "localtime" || name == "posixrules" ||
      name == "Factory") {
    return false;
  }
  for (char c : name) {
    if (!NameChar(c)) return false;
  }
  size_t start = 0;
  bool first = true;
  while (true) {
    const size_t slash = name.find('/', start);
    const std::string_view part = name.substr(start, slash - start);
    if (part.empty() || part == "." || part == ".." || part[0] == '-') return false;
    if (first && slash != std::string_view::npos && (part == "posix" || part == "right")) {
      return false;
    }
    first = false;
    if (slash == std::string_view::npos) return true;
    start = slash + 1;
  }
}

void CheckInstant(const ql::TimeZone& zone, const absl::TimeZone& reference, int64_t t) {
  if (t < kMinProbe || t > kMaxProbe) return;
  const std::string where = zone.name() + " at " + std::to_string(t);
  const int32_t offset = zone.OffsetAt(t);
  QL_FUZZ_CHECK(offset == reference.At(absl::FromUnixSeconds(t)).offset,
                where + ": offset " + std::to_string(offset) + ", cctz says " +
                    std::to_string(reference.At(absl::FromUnixSeconds(t)).offset));
  QL_FUZZ_CHECK(offset > -86400 && offset < 86400, where);

  ql::OffsetSegment seg = zone.SegmentAt(t);
  QL_FUZZ_CHECK(seg.offset == offset, where);
  QL_FUZZ_CHECK(!seg.has_begin() || seg.begin <= t, where);
  QL_FUZZ_CHECK(!seg.has_end() || t < seg.end, where);
  if (seg.has_begin()) {
    QL_FUZZ_CHECK(zone.OffsetAt(seg.begin) == seg.offset, where);
    QL_FUZZ_CHECK(zone.OffsetAt(seg.begin - 1) == seg.offset_before, where);
    QL_FUZZ_CHECK(seg.offset_before != seg.offset, where);
  } else {
    QL_FUZZ_CHECK(seg.offset_before == seg.offset, where);
  }
  // The segments that follow: each begins where the last ended, with another offset, and cctz
  // agrees on both sides of each transition.
  for (int i = 0; i < 4 && seg.has_end() && seg.end <= kMaxProbe; ++i) {
    const ql::OffsetSegment next = zone.SegmentAt(seg.end);
    const std::string at = zone.name() + " transition at " + std::to_string(seg.end);
    QL_FUZZ_CHECK(next.begin == seg.end && next.offset == seg.offset_after, at);
    QL_FUZZ_CHECK(next.offset_before == seg.offset && next.offset != seg.offset, at);
    QL_FUZZ_CHECK(zone.OffsetAt(seg.end - 1) == seg.offset, at);
    QL_FUZZ_CHECK(reference.At(absl::FromUnixSeconds(seg.end - 1)).offset == seg.offset, at);
    QL_FUZZ_CHECK(reference.At(absl::FromUnixSeconds(seg.end)).offset == next.offset, at);
    seg = next;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  const size_t eol = rest.find('\n');
  const std::string_view name = rest.substr(0, eol);
  rest.remove_prefix(eol == std::string_view::npos ? rest.size() : eol + 1);

  const ql::Result<ql::TimeZone> zone = ql::TimeZone::Load(name);
  if (!zone.ok()) {
    const std::string reason = zone.status().reason();
    QL_FUZZ_CHECK(zone.status().code() == ql::StatusCode::kInvalidArgument &&
                      (reason == "timezone_required" || reason == "timezone_invalid" ||
                       reason == "timezone_unknown"),
                  zone.status().ToString());
    return 0;
  }
  QL_FUZZ_CHECK(PlainName(name), std::string(name));
  QL_FUZZ_CHECK(PlainName(zone->name()), zone->name());
  const ql::ZoneCatalog& catalog = ql::ZoneCatalog::Installed();
  if (!catalog.empty()) {
    QL_FUZZ_CHECK(catalog.Canonicalize(zone->name()) == zone->name(), zone->name());
    QL_FUZZ_CHECK(catalog.Canonicalize(name) == zone->name(), std::string(name));
  }
  const ql::Result<ql::TimeZone> again = ql::TimeZone::Load(zone->name());
  QL_FUZZ_CHECK(again.ok() && again->name() == zone->name(), zone->name());

  absl::TimeZone reference;
  QL_FUZZ_CHECK(absl::LoadTimeZone(zone->name(), &reference), zone->name());

  std::vector<int64_t> probes = {0, 1767225600, kMaxProbe - 2 * 86400};
  while (!rest.empty() && probes.size() < 32) {
    const size_t end = rest.find('\n');
    const std::string_view line = rest.substr(0, end);
    rest.remove_prefix(end == std::string_view::npos ? rest.size() : end + 1);
    int64_t t = 0;
    const auto [ptr, ec] = std::from_chars(line.data(), line.data() + line.size(), t);
    if (ec == std::errc()) probes.push_back(t);
  }
  for (int64_t t : probes) CheckInstant(*zone, reference, t);
  return 0;
}
