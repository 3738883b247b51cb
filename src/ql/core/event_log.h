#pragma once

// The daemon log: one line per significant event (a run failed, the database is unreachable,
// readiness changed, ...), in a text form for people or as one JSON object per line for a log
// collector. Callers name the event (`run.failed`) and give fields; they never put a token, a
// cookie, a request body, a secret value or a command's output into one.

#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "ql/core/clock.h"

namespace ql {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };
enum class LogFormat { kText, kJson };

// Returns "debug", "info", "warn" or "error".
std::string_view LogLevelName(LogLevel level);
// Parses a level name (as LogLevelName spells it); nullopt for anything else.
std::optional<LogLevel> ParseLogLevel(std::string_view name);
// Parses "text" or "json"; nullopt for anything else.
std::optional<LogFormat> ParseLogFormat(std::string_view name);

// One field of an event: a name and a string, integer or boolean value.
struct LogField {
  LogField(std::string_view name, std::string_view text) : key(name), value(std::string(text)) {}
  LogField(std::string_view name, const char* text) : key(name), value(std::string(text)) {}
  LogField(std::string_view name, const std::string& text) : key(name), value(text) {}
  LogField(std::string_view name, bool flag) : key(name), value(flag) {}
  template <typename T>
  requires(std::integral<T> && !std::same_as<T, bool>) LogField(std::string_view name, T number)
      : key(name), value(static_cast<int64_t>(number)) {}

  std::string key;
  std::variant<std::string, int64_t, bool> value;
};

// Formats one event as one line, without its line feed. The line never holds a line feed, a
// carriage return or another control character, whatever the event and fields contain.
// Text: `2026-12-07T06:31:45.428Z warn run.failed run=... attempt=2 code=exit_status`, names
// reduced to [A-Za-z0-9_.-] (anything else becomes '_'), a value quoted ("...", with \" \\ \n
// \r \t and \xHH escapes) when it is empty or holds a space, '"', '=', '\' or a control
// character. JSON: {"ts":"...","level":"...","event":"...", then the fields in order}; a field
// named ts, level or event is written with a trailing '_'; bytes that are not UTF-8 become
// U+FFFD.
std::string FormatLogLine(LogFormat format, int64_t unix_ms, LogLevel level, std::string_view event,
                          std::span<const LogField> fields);

// Where formatted lines go. Implementations are thread-safe and write each line whole.
class LogSink {
 public:
  virtual ~LogSink() = default;
  // Writes `line` followed by a line feed.
  virtual void WriteLine(std::string_view line) = 0;
};

// Keeps every line in memory (tests, and a daemon that logs nowhere yet). Thread-safe.
class MemoryLogSink final : public LogSink {
 public:
  void WriteLine(std::string_view line) override;
  // Returns a copy of the lines written so far.
  std::vector<std::string> lines() const;

 private:
  mutable std::mutex mu_;
  std::vector<std::string> lines_;
};

// Formats events at or above a level and hands them to a sink, stamped with the clock's time.
// Thread-safe; `clock` and `sink` must outlive it.
class EventLog {
 public:
  EventLog(const Clock& clock, LogSink& sink, LogFormat format = LogFormat::kText,
           LogLevel min_level = LogLevel::kInfo);

  // Returns true when events of `level` are written.
  bool Enabled(LogLevel level) const { return level >= min_level_; }
  // Writes one line for `event` when `level` is enabled.
  void Write(LogLevel level, std::string_view event, std::span<const LogField> fields);
  void Write(LogLevel level, std::string_view event, std::initializer_list<LogField> fields) {
    Write(level, event, std::span<const LogField>(fields.begin(), fields.size()));
  }
  void Debug(std::string_view event, std::initializer_list<LogField> fields = {}) {
    Write(LogLevel::kDebug, event, fields);
  }
  void Info(std::string_view event, std::initializer_list<LogField> fields = {}) {
    Write(LogLevel::kInfo, event, fields);
  }
  void Warn(std::string_view event, std::initializer_list<LogField> fields = {}) {
    Write(LogLevel::kWarn, event, fields);
  }
  void Error(std::string_view event, std::initializer_list<LogField> fields = {}) {
    Write(LogLevel::kError, event, fields);
  }

 private:
  const Clock& clock_;
  LogSink& sink_;
  const LogFormat format_;
  const LogLevel min_level_;
};

}  // namespace ql
