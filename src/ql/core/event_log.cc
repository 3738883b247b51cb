#include "ql/core/event_log.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "ql/core/canonical_json.h"
#include "ql/core/rfc3339.h"

namespace ql {
namespace {

// RFC 3339 UTC with exactly three digits of milliseconds, so lines sort and align.
std::string Timestamp(int64_t unix_ms) {
  int64_t seconds = unix_ms / 1000;
  int64_t millis = unix_ms % 1000;
  if (millis < 0) {
    millis += 1000;
    seconds -= 1;
  }
  std::string text = FormatRfc3339Utc(seconds * 1000);  // "...:SSZ"
  if (!text.empty() && text.back() == 'Z') text.pop_back();
  char fraction[8];
  std::snprintf(fraction, sizeof fraction, ".%03dZ", static_cast<int>(millis));
  return text + fraction;
}

std::string Name(std::string_view name) {
  if (name.empty()) return "_";
  std::string out(name);
  for (char& c : out) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '_' || c == '.' || c == '-';
    if (!plain) c = '_';
  }
  return out;
}

bool IsControl(unsigned char c) { return c < 0x20 || c == 0x7f; }

// A value is written as it is when it is plain; otherwise quoted and escaped the way error
// messages quote values (control characters, quotes and invalid UTF-8 escaped), so no value can
// split a line or pass for another field.
void AppendTextValue(std::string& out, std::string_view value) {
  bool quote = value.empty() || !IsValidUtf8(value);
  for (const char c : value) {
    const auto u = static_cast<unsigned char>(c);
    if (IsControl(u) || c == ' ' || c == '"' || c == '=' || c == '\\') {
      quote = true;
      break;
    }
  }
  if (!quote) {
    out += value;
    return;
  }
  out += QuoteForMessage(value, value.size());
}

std::string TextLine(int64_t unix_ms, LogLevel level, std::string_view event,
                     std::span<const LogField> fields) {
  std::string out = Timestamp(unix_ms);
  out += ' ';
  out += LogLevelName(level);
  out += ' ';
  out += Name(event);
  for (const LogField& field : fields) {
    out += ' ';
    out += Name(field.key);
    out += '=';
    if (const auto* text = std::get_if<std::string>(&field.value)) {
      AppendTextValue(out, *text);
    } else if (const auto* number = std::get_if<int64_t>(&field.value)) {
      out += std::to_string(*number);
    } else {
      out += std::get<bool>(field.value) ? "true" : "false";
    }
  }
  return out;
}

std::string JsonLine(int64_t unix_ms, LogLevel level, std::string_view event,
                     std::span<const LogField> fields) {
  nlohmann::ordered_json line;
  line["ts"] = Timestamp(unix_ms);
  line["level"] = std::string(LogLevelName(level));
  line["event"] = Name(event);
  for (const LogField& field : fields) {
    std::string key = field.key.empty() ? std::string("_") : field.key;
    // The three keys of every line keep their meaning; a field never overwrites them.
    while (key == "ts" || key == "level" || key == "event" || line.contains(key)) key += '_';
    std::visit([&](const auto& value) { line[key] = value; }, field.value);
  }
  // Control characters are escaped by the encoder (\n, \u0000, ...); bytes that are not UTF-8
  // are replaced rather than thrown on.
  return line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace

std::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
  }
  return "info";
}

std::optional<LogLevel> ParseLogLevel(std::string_view name) {
  for (LogLevel level : {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarn, LogLevel::kError}) {
    if (name == LogLevelName(level)) return level;
  }
  return std::nullopt;
}

std::optional<LogFormat> ParseLogFormat(std::string_view name) {
  if (name == "text") return LogFormat::kText;
  if (name == "json") return LogFormat::kJson;
  return std::nullopt;
}

std::string FormatLogLine(LogFormat format, int64_t unix_ms, LogLevel level, std::string_view event,
                          std::span<const LogField> fields) {
  return format == LogFormat::kJson ? JsonLine(unix_ms, level, event, fields)
                                    : TextLine(unix_ms, level, event, fields);
}

void MemoryLogSink::WriteLine(std::string_view line) {
  std::lock_guard<std::mutex> lock(mu_);
  lines_.emplace_back(line);
}

std::vector<std::string> MemoryLogSink::lines() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lines_;
}

EventLog::EventLog(const Clock& clock, LogSink& sink, LogFormat format, LogLevel min_level)
    : clock_(clock), sink_(sink), format_(format), min_level_(min_level) {}

void EventLog::Write(LogLevel level, std::string_view event, std::span<const LogField> fields) {
  if (!Enabled(level)) return;
  sink_.WriteLine(FormatLogLine(format_, clock_.NowMs(), level, event, fields));
}

}  // namespace ql
