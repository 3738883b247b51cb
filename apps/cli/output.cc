#include "output.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <utility>

#include "ql/core/rfc3339.h"

namespace ql::cli {
namespace {

constexpr uint32_t kInvalid = 0xFFFFFFFF;

// Decodes one UTF-8 code point at `text[i]`, advancing `i`. Returns kInvalid (advancing one
// byte) for a malformed, overlong or surrogate sequence.
uint32_t NextCodePoint(std::string_view text, size_t& i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  if (lead < 0x80) {
    ++i;
    return lead;
  }
  size_t length = 0;
  uint32_t cp = 0;
  uint32_t min = 0;
  if ((lead & 0xE0) == 0xC0) {
    length = 2, cp = lead & 0x1F, min = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3, cp = lead & 0x0F, min = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4, cp = lead & 0x07, min = 0x10000;
  } else {
    ++i;
    return kInvalid;
  }
  if (i + length > text.size()) {
    ++i;
    return kInvalid;
  }
  for (size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) {
      ++i;
      return kInvalid;
    }
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    ++i;
    return kInvalid;
  }
  i += length;
  return cp;
}

bool InRanges(uint32_t cp, const std::pair<uint32_t, uint32_t>* ranges, size_t count) {
  for (size_t k = 0; k < count; ++k) {
    if (cp >= ranges[k].first && cp <= ranges[k].second) return true;
  }
  return false;
}

// East Asian Wide (W) and Fullwidth (F) blocks, as terminals render them.
constexpr std::pair<uint32_t, uint32_t> kWide[] = {
    {0x1100, 0x115F},   {0x2E80, 0x303E},   {0x3041, 0x33FF},   {0x3400, 0x4DBF},
    {0x4E00, 0x9FFF},   {0xA000, 0xA4CF},   {0xA960, 0xA97F},   {0xAC00, 0xD7A3},
    {0xF900, 0xFAFF},   {0xFE30, 0xFE4F},   {0xFF00, 0xFF60},   {0xFFE0, 0xFFE6},
    {0x1F300, 0x1F64F}, {0x1F900, 0x1F9FF}, {0x20000, 0x2FFFD}, {0x30000, 0x3FFFD},
};

// Combining marks and zero-width characters.
constexpr std::pair<uint32_t, uint32_t> kZeroWidth[] = {
    {0x0300, 0x036F}, {0x1AB0, 0x1AFF}, {0x1DC0, 0x1DFF}, {0x200B, 0x200D},
    {0x20D0, 0x20FF}, {0xFE00, 0xFE0F}, {0xFE20, 0xFE2F},
};

size_t CodePointWidth(uint32_t cp) {
  if (cp == kInvalid) return 1;
  if (InRanges(cp, kZeroWidth, std::size(kZeroWidth))) return 0;
  if (InRanges(cp, kWide, std::size(kWide))) return 2;
  return 1;
}

// Control characters, and the bidirectional overrides that can make text display in a different
// order than it is stored.
bool NeedsEscape(uint32_t cp) {
  return cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0x9F) || (cp >= 0x202A && cp <= 0x202E) ||
         (cp >= 0x2066 && cp <= 0x2069);
}

std::string Escape(uint32_t cp) {
  switch (cp) {
    case '\n':
      return "\\n";
    case '\r':
      return "\\r";
    case '\t':
      return "\\t";
    default:
      break;
  }
  char buf[16];
  if (cp <= 0xFF) {
    std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(cp));
  } else {
    std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
  }
  return buf;
}

struct Unit {
  std::string_view suffix;
  int64_t ms;
};

// Largest first; "ms" is tried before "m" when parsing.
constexpr std::array<Unit, 5> kUnits = {{
    {"d", 86'400'000},
    {"h", 3'600'000},
    {"m", 60'000},
    {"s", 1'000},
    {"ms", 1},
}};

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

Table::Table(std::vector<std::string> headers) : headers_(std::move(headers)) {}

void Table::AddRow(std::vector<std::string> cells) {
  cells.resize(headers_.size());
  for (std::string& cell : cells) cell = PrintableCell(cell);
  rows_.push_back(std::move(cells));
}

void Table::Print(std::ostream& out) const {
  std::vector<size_t> widths(headers_.size(), 0);
  const auto measure = [&](const std::vector<std::string>& row) {
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], DisplayWidth(row[c]));
  };
  measure(headers_);
  for (const auto& row : rows_) measure(row);

  const auto print_row = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      if (c > 0) line += "  ";
      line += row[c];
      if (c + 1 < row.size()) line.append(widths[c] - DisplayWidth(row[c]), ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << '\n';
  };
  print_row(headers_);
  for (const auto& row : rows_) print_row(row);
}

size_t DisplayWidth(std::string_view text) {
  size_t width = 0;
  for (size_t i = 0; i < text.size();) width += CodePointWidth(NextCodePoint(text, i));
  return width;
}

std::string PrintableCell(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t start = i;
    const uint32_t cp = NextCodePoint(text, i);
    if (cp == kInvalid) {
      out += Escape(static_cast<unsigned char>(text[start]));
    } else if (NeedsEscape(cp)) {
      out += Escape(cp);
    } else {
      out.append(text.substr(start, i - start));
    }
  }
  return out;
}

std::string Ellipsize(std::string_view text, size_t max_width) {
  if (DisplayWidth(text) <= max_width) return std::string(text);
  if (max_width == 0) return "";
  std::string out;
  size_t width = 0;
  for (size_t i = 0; i < text.size();) {
    const size_t start = i;
    const size_t w = CodePointWidth(NextCodePoint(text, i));
    if (width + w > max_width - 1) break;
    width += w;
    out.append(text.substr(start, i - start));
  }
  return out + "…";
}

CliResult<int64_t> DurationFlag(const std::string& flag, const std::string& text) {
  std::optional<int64_t> ms = ParseDurationMs(text);
  if (!ms) {
    return CliError::Usage("invalid_duration",
                           flag + " '" + text +
                               "' is not a duration: use a whole number with a unit (500ms, 30s, "
                               "5m, 2h, 1d), parts such as 1h30m, or plain milliseconds");
  }
  return *ms;
}

CliResult<int64_t> SecondsFlag(const std::string& flag, const std::string& text) {
  const bool plain = !text.empty() && std::all_of(text.begin(), text.end(), IsDigit);
  // A plain number is read as seconds through the same parser, which also bounds it.
  const std::optional<int64_t> ms = ParseDurationMs(plain ? text + "s" : text);
  if (!ms || *ms % 1000 != 0) {
    return CliError::Usage("invalid_duration",
                           flag + " '" + text +
                               "' is not a duration in whole seconds: use a whole number of "
                               "seconds (90) or one with a unit (90s, 10m, 2h, 1d, 1h30m)");
  }
  return *ms / 1000;
}

std::optional<int64_t> ParseDurationMs(std::string_view text) {
  if (text.empty()) return std::nullopt;
  if (std::all_of(text.begin(), text.end(), IsDigit)) {
    int64_t value = 0;
    for (char c : text) {
      if (__builtin_mul_overflow(value, 10, &value) ||
          __builtin_add_overflow(value, c - '0', &value)) {
        return std::nullopt;
      }
    }
    return value;
  }
  int64_t total = 0;
  size_t next_unit = 0;  // units must appear in decreasing order, each at most once
  size_t i = 0;
  while (i < text.size()) {
    if (!IsDigit(text[i])) return std::nullopt;
    int64_t value = 0;
    while (i < text.size() && IsDigit(text[i])) {
      if (__builtin_mul_overflow(value, 10, &value) ||
          __builtin_add_overflow(value, text[i] - '0', &value)) {
        return std::nullopt;
      }
      ++i;
    }
    const std::string_view rest = text.substr(i);
    size_t unit = kUnits.size();
    if (rest.starts_with("ms")) {
      unit = 4;
    } else {
      for (size_t u = 0; u < 4; ++u) {
        if (rest.starts_with(kUnits[u].suffix)) unit = u;
      }
    }
    if (unit == kUnits.size() || unit < next_unit) return std::nullopt;
    i += kUnits[unit].suffix.size();
    next_unit = unit + 1;
    int64_t part = 0;
    if (__builtin_mul_overflow(value, kUnits[unit].ms, &part) ||
        __builtin_add_overflow(total, part, &total)) {
      return std::nullopt;
    }
  }
  return total;
}

std::string FormatDurationMs(int64_t ms) {
  if (ms < 0) return std::to_string(ms) + "ms";
  if (ms == 0) return "0ms";
  std::string out;
  for (const Unit& unit : kUnits) {
    if (ms >= unit.ms) {
      out += std::to_string(ms / unit.ms);
      out += unit.suffix;
      ms %= unit.ms;
    }
  }
  return out;
}

std::string FormatElapsedMs(int64_t ms) {
  if (ms < 0) ms = 0;
  char buf[64];
  if (ms < 1'000) {
    std::snprintf(buf, sizeof(buf), "%lldms", static_cast<long long>(ms));
  } else if (ms < 60'000) {
    std::snprintf(buf, sizeof(buf), "%lld.%llds", static_cast<long long>(ms / 1000),
                  static_cast<long long>(ms % 1000 / 100));
  } else if (ms < 3'600'000) {
    const long long s = ms / 1000;
    std::snprintf(buf, sizeof(buf), "%lldm%02llds", s / 60, s % 60);
  } else if (ms < 86'400'000) {
    const long long m = ms / 60'000;
    std::snprintf(buf, sizeof(buf), "%lldh%02lldm", m / 60, m % 60);
  } else {
    const long long h = ms / 3'600'000;
    std::snprintf(buf, sizeof(buf), "%lldd%02lldh", h / 24, h % 24);
  }
  return buf;
}

std::string JsonText(const nlohmann::json& object, std::string_view key,
                     std::string_view fallback) {
  if (!object.is_object()) return std::string(fallback);
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return std::string(fallback);
  if (it->is_string()) return it->get<std::string>();
  if (it->is_boolean()) return it->get<bool>() ? "true" : "false";
  return it->dump();
}

std::string JsonElapsed(const nlohmann::json& object, std::string_view from_key,
                        std::string_view to_key, std::string_view fallback) {
  const std::string from = JsonText(object, from_key, "");
  const std::string to = JsonText(object, to_key, "");
  if (from.empty() || to.empty()) return std::string(fallback);
  Result<int64_t> a = ParseRfc3339(from);
  Result<int64_t> b = ParseRfc3339(to);
  if (!a.ok() || !b.ok()) return std::string(fallback);
  return FormatElapsedMs(*b - *a);
}

std::string ShellQuote(std::string_view word) {
  const bool plain = !word.empty() && std::all_of(word.begin(), word.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           std::string_view("_@%+=:,./-").find(c) != std::string_view::npos;
  });
  if (plain) return std::string(word);
  std::string out = "'";
  for (char c : word) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string CommandSummary(const nlohmann::json& spec) {
  if (!spec.is_object() || !spec.contains("command") || !spec["command"].is_object()) return "?";
  const nlohmann::json& command = spec["command"];
  const std::string kind = JsonText(command, "kind", "");
  if (kind == "shell") {
    const std::string shell = JsonText(command, "shell", "/bin/sh");
    const std::string text = JsonText(command, "command", "");
    return shell == "/bin/sh" ? text : shell.substr(shell.rfind('/') + 1) + ": " + text;
  }
  if (kind == "argv") {
    std::string out = ShellQuote(JsonText(command, "file", ""));
    if (command.contains("args") && command["args"].is_array()) {
      for (const nlohmann::json& arg : command["args"]) {
        out += ' ';
        out += ShellQuote(arg.is_string() ? arg.get<std::string>() : arg.dump());
      }
    }
    return out;
  }
  if (kind == "script") {
    // script NAME@VERSION (interpreter entry, sha256 prefix) ARGS...
    std::string out = "script " + JsonText(command, "script", "");
    if (command.contains("version")) out += "@" + JsonText(command, "version", "");
    if (command.contains("entry")) {
      out += " (" + JsonText(command, "interpreter", "?") + " " + JsonText(command, "entry", "");
      const std::string digest = JsonText(command, "digest", "");
      if (!digest.empty()) out += ", sha256 " + digest.substr(0, 12);
      out += ")";
    }
    if (command.contains("args") && command["args"].is_array()) {
      for (const nlohmann::json& arg : command["args"]) {
        out += ' ';
        out += ShellQuote(arg.is_string() ? arg.get<std::string>() : arg.dump());
      }
    }
    return out;
  }
  return "?";
}

}  // namespace ql::cli

namespace ql::cli {
namespace {

std::vector<std::string> SplitFields(std::string_view text) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
    const size_t start = i;
    while (i < text.size() && text[i] != ' ' && text[i] != '\t') ++i;
    if (i > start) out.emplace_back(text.substr(start, i - start));
  }
  return out;
}

// A plain decimal number of at most two digits within [0, max].
std::optional<int> SmallNumber(const std::string& text, int max) {
  if (text.empty() || text.size() > 2 ||
      text.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  const int value = std::stoi(text);
  return value <= max ? std::optional<int>(value) : std::nullopt;
}

// "*/N" → N.
std::optional<int> Step(const std::string& text, int max) {
  if (!text.starts_with("*/")) return std::nullopt;
  return SmallNumber(text.substr(2), max);
}

std::string TwoDigits(int value) {
  char buffer[8];
  std::snprintf(buffer, sizeof buffer, "%02d", value);
  return buffer;
}

// Days of the week as written ("1-5", "MON-FRI", "0,6", "SAT,SUN") in words, or "".
std::string WeekdaysInWords(const std::string& field) {
  static constexpr std::array<const char*, 8> kNames = {"Sun", "Mon", "Tue", "Wed",
                                                        "Thu", "Fri", "Sat", "Sun"};
  static constexpr std::array<const char*, 8> kUpper = {"SUN", "MON", "TUE", "WED",
                                                        "THU", "FRI", "SAT", "SUN"};
  auto day = [&](std::string token) -> std::optional<int> {
    for (char& c : token) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    for (int i = 0; i < 7; ++i) {
      if (token == kUpper[i]) return i;
    }
    return SmallNumber(token, 7);
  };
  std::string out;
  size_t start = 0;
  while (start <= field.size()) {
    const size_t comma = std::min(field.find(',', start), field.size());
    const std::string part = field.substr(start, comma - start);
    std::string words;
    if (const size_t dash = part.find('-'); dash != std::string::npos) {
      auto from = day(part.substr(0, dash));
      auto to = day(part.substr(dash + 1));
      if (!from || !to) return "";
      words = std::string(kNames[*from]) + "-" + kNames[*to];
    } else {
      auto one = day(part);
      if (!one) return "";
      words = kNames[*one];
    }
    out += (out.empty() ? "" : ", ") + words;
    start = comma + 1;
  }
  return out;
}

}  // namespace

std::string NameOr(const nlohmann::json& object, std::string_view name_key,
                   std::string_view id_key) {
  const std::string name = JsonText(object, name_key, "");
  return name.empty() ? JsonText(object, id_key) : name;
}

std::string KeyValueList(const nlohmann::json& object) {
  if (!object.is_object()) return "";
  std::string out;
  for (const auto& [key, value] : object.items()) {
    if (!out.empty()) out += ",";
    out +=
        key + "=" +
        (value.is_string() ? value.get<std::string>()
                           : value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  return out;
}

std::string DescribeCron(std::string_view expression) {
  std::vector<std::string> f = SplitFields(expression);
  if (f.size() == 6) {
    // Seconds: "0" is the 5-field form; "*" and "*/N" with nothing else set describe alone.
    if (f[0] != "0") {
      if (f[1] != "*" || f[2] != "*" || f[3] != "*" || f[4] != "*" || f[5] != "*") return "";
      if (f[0] == "*") return "every second";
      if (auto n = Step(f[0], 59)) return "every " + std::to_string(*n) + " seconds";
      return "";
    }
    f.erase(f.begin());
  }
  if (f.size() != 5 || f[3] != "*") return "";
  const std::string& minute = f[0];
  const std::string& hour = f[1];
  const std::string& day = f[2];
  const std::string& weekday = f[4];
  // Which days.
  std::string days;
  if (day == "*" && weekday == "*") {
    days = "";
  } else if (day == "*") {
    const std::string words = WeekdaysInWords(weekday);
    if (words.empty()) return "";
    days = " on " + words;
  } else if (weekday == "*") {
    auto d = SmallNumber(day, 31);
    if (!d || *d == 0) return "";
    days = " on day " + std::to_string(*d) + " of the month";
  } else {
    return "";
  }
  // Which times of those days.
  const auto m = SmallNumber(minute, 59);
  const auto h = SmallNumber(hour, 23);
  if (m && h) {
    return (days.empty() ? "daily at " : "at ") + TwoDigits(*h) + ":" + TwoDigits(*m) + days;
  }
  if (!days.empty()) {
    // Every-so-often schedules on some days only read better as the expression.
    if (!(m && hour == "*")) return "";
  }
  if (minute == "*" && hour == "*") return "every minute" + days;
  if (auto n = Step(minute, 59); n && hour == "*") {
    return "every " + std::to_string(*n) + " minutes" + days;
  }
  if (m && hour == "*") return "hourly at :" + TwoDigits(*m) + days;
  if (auto n = Step(hour, 23); n && m) {
    return "every " + std::to_string(*n) + " hours at :" + TwoDigits(*m);
  }
  return "";
}

std::string RelativeTime(std::string_view iso, int64_t now_ms, std::string_view fallback) {
  const Result<int64_t> at = ParseRfc3339(iso);
  if (!at.ok()) return std::string(fallback);
  const int64_t delta = *at - now_ms;
  if (delta > -1000 && delta < 1000) return "now";
  // Seconds are enough past a minute: "4m12s", "3h05m".
  const int64_t rounded = std::llabs(delta) / 1000 * 1000;
  const std::string span = FormatElapsedMs(rounded);
  return delta > 0 ? "in " + span : span + " ago";
}

std::vector<std::string> ShortIds(const std::vector<std::string>& ids,
                                  const std::vector<std::string>& unique) {
  size_t shortest = 8;
  for (const std::string& prefix : unique) shortest = std::max(shortest, prefix.size());
  for (size_t length = shortest;; ++length) {
    std::vector<std::string> cut;
    for (const std::string& id : ids) cut.push_back(id.substr(0, length));
    std::vector<std::string> sorted = cut;
    std::sort(sorted.begin(), sorted.end());
    const bool distinct = std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end();
    const bool on_dash =
        std::any_of(cut.begin(), cut.end(), [](const std::string& c) { return c.ends_with('-'); });
    if ((distinct && !on_dash) || length >= 36) return cut;
  }
}

}  // namespace ql::cli
