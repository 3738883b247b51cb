#include "ql/core/rfc3339.h"

#include <cstdio>
#include <string_view>

namespace ql {
namespace {

int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

// Formats the wall time `local_seconds` (seconds since 1970-01-01T00:00:00 on the local clock)
// plus `millis`, without an offset.
void PutDigits(char* at, int value, int width) {
  for (int i = width - 1; i >= 0; --i, value /= 10) at[i] = static_cast<char>('0' + value % 10);
}

// Followed by `suffix` (the offset, or "Z"). Years 0..9999 are written digit by digit (every
// API answer formats timestamps); others through snprintf, as before.
std::string FormatLocal(int64_t local_seconds, int millis, std::string_view suffix) {
  const int64_t days = FloorDiv(local_seconds, 86400);
  const int64_t secs = local_seconds - days * 86400;
  const CivilDate date = CivilFromDays(days);
  const int hour = static_cast<int>(secs / 3600);
  const int minute = static_cast<int>(secs / 60 % 60);
  const int second = static_cast<int>(secs % 60);
  char buf[64];
  size_t n = 0;
  if (date.year >= 0 && date.year <= 9999) {
    PutDigits(buf, static_cast<int>(date.year), 4);
    buf[4] = '-';
    PutDigits(buf + 5, date.month, 2);
    buf[7] = '-';
    PutDigits(buf + 8, date.day, 2);
    buf[10] = 'T';
    PutDigits(buf + 11, hour, 2);
    buf[13] = ':';
    PutDigits(buf + 14, minute, 2);
    buf[16] = ':';
    PutDigits(buf + 17, second, 2);
    n = 19;
    if (millis != 0) {
      buf[19] = '.';
      PutDigits(buf + 20, millis, 3);
      n = 23;
    }
  } else {
    n = static_cast<size_t>(std::snprintf(buf, sizeof(buf), "%04lld-%02d-%02dT%02d:%02d:%02d",
                                          static_cast<long long>(date.year), date.month, date.day,
                                          hour, minute, second));
    if (millis != 0)
      n += static_cast<size_t>(std::snprintf(buf + n, sizeof(buf) - n, ".%03d", millis));
  }
  std::string out;
  out.reserve(n + suffix.size());
  out.append(buf, n);
  out.append(suffix);
  return out;
}

}  // namespace

std::string FormatRfc3339(int64_t unix_ms, const TimeZone& zone) {
  const int64_t seconds = FloorDiv(unix_ms, 1000);
  const int millis = static_cast<int>(unix_ms - seconds * 1000);
  int32_t offset = zone.OffsetAt(seconds);
  offset -= offset % 60;  // RFC 3339 offsets have no seconds; truncate toward zero
  const int32_t magnitude = offset < 0 ? -offset : offset;
  char buf[16];
  const int n = std::snprintf(buf, sizeof(buf), "%c%02d:%02d", offset < 0 ? '-' : '+',
                              magnitude / 3600, magnitude / 60 % 60);
  return FormatLocal(seconds + offset, millis, std::string_view(buf, static_cast<size_t>(n)));
}

std::string FormatRfc3339Utc(int64_t unix_ms) {
  const int64_t seconds = FloorDiv(unix_ms, 1000);
  return FormatLocal(seconds, static_cast<int>(unix_ms - seconds * 1000), "Z");
}

Result<int64_t> ParseRfc3339(std::string_view text) {
  const std::string quoted =
      "'" + std::string(text.substr(0, 64)) + (text.size() > 64 ? "...'" : "'");
  auto fail = [&](const std::string& why) -> Status {
    return InvalidArgument("invalid_timestamp", "timestamp " + quoted +
                                                    " is not RFC 3339 (YYYY-MM-DDTHH:MM:SSZ or " +
                                                    "with an offset such as +08:00): " + why);
  };
  size_t pos = 0;
  // Reads exactly `width` digits.
  auto digits = [&](int width, int* out) {
    if (pos + static_cast<size_t>(width) > text.size()) return false;
    int value = 0;
    for (int i = 0; i < width; ++i) {
      const char c = text[pos + static_cast<size_t>(i)];
      if (c < '0' || c > '9') return false;
      value = value * 10 + (c - '0');
    }
    pos += static_cast<size_t>(width);
    *out = value;
    return true;
  };
  auto expect = [&](char c) {
    if (pos < text.size() && text[pos] == c) {
      ++pos;
      return true;
    }
    return false;
  };

  int year, month, day, hour, minute, second;
  if (!digits(4, &year)) return fail("expected a four-digit year at the start");
  if (!expect('-') || !digits(2, &month)) return fail("expected '-MM' after the year");
  if (!expect('-') || !digits(2, &day)) return fail("expected '-DD' after the month");
  if (pos >= text.size() || (text[pos] != 'T' && text[pos] != 't')) {
    return fail("expected 'T' between the date and the time");
  }
  ++pos;
  if (!digits(2, &hour)) return fail("expected 'HH' after 'T'");
  if (!expect(':') || !digits(2, &minute)) return fail("expected ':MM' after the hour");
  if (!expect(':') || !digits(2, &second))
    return fail("expected ':SS' after the minutes (seconds are required)");
  int millis = 0;
  if (expect('.')) {
    int count = 0;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
      if (count < 3) millis = millis * 10 + (text[pos] - '0');
      ++count;
      ++pos;
    }
    if (count == 0) return fail("expected digits after '.'");
    if (count > 9) return fail("the fraction has more than 9 digits");
    for (int i = count; i < 3; ++i) millis *= 10;
  }
  int offset_seconds = 0;
  if (pos < text.size() && (text[pos] == 'Z' || text[pos] == 'z')) {
    ++pos;
  } else if (pos < text.size() && (text[pos] == '+' || text[pos] == '-')) {
    const int sign = text[pos] == '-' ? -1 : 1;
    ++pos;
    int oh, om;
    if (!digits(2, &oh) || !expect(':') || !digits(2, &om)) {
      return fail("expected the offset as +HH:MM or -HH:MM");
    }
    if (oh > 23 || om > 59) return fail("offset out of range");
    offset_seconds = sign * (oh * 3600 + om * 60);
  } else {
    return fail("expected 'Z' or an offset such as +08:00 after the time");
  }
  if (pos != text.size()) return fail("unexpected text after the offset");
  if (month < 1 || month > 12) return fail("month " + std::to_string(month) + " is not 01-12");
  if (day < 1 || day > DaysInMonth(year, month)) {
    return fail("day " + std::to_string(day) + " does not exist in " + std::to_string(year) + "-" +
                (month < 10 ? "0" : "") + std::to_string(month));
  }
  if (hour > 23) return fail("hour " + std::to_string(hour) + " is not 00-23");
  if (minute > 59) return fail("minute " + std::to_string(minute) + " is not 00-59");
  if (second == 60) return fail("leap seconds (:60) cannot be represented in Unix time");
  if (second > 59) return fail("second " + std::to_string(second) + " is not 00-59");
  const int64_t local_seconds =
      DaysFromCivil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second;
  return (local_seconds - offset_seconds) * 1000 + millis;
}

}  // namespace ql
