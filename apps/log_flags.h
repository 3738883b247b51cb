#pragma once

// The daemon log flags shared by ql-local, ql-cluster serve and ql-worker (README "Daemon
// log"), and the log they open.

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>

#include "ql/core/clock.h"
#include "ql/core/event_log.h"
#include "ql/core/status.h"
#include "ql/engine/log_file.h"

namespace ql {

struct LogFlags {
  std::string format = "text";
  std::string level = "info";
  std::string file;  // empty: standard error
  bool access_log = false;
  // An HTTP answer that took this long or longer is logged as http.slow_request; 0: never.
  int64_t slow_request_ms = 1000;
};

// The largest --slow-request-ms: an hour.
inline constexpr int64_t kMaxSlowRequestMs = 3'600'000;

// Adds --log-format, --log-level, --log-file and (for a daemon with an HTTP API, when
// `with_access_log`) --access-log and --slow-request-ms to `command`, filling `flags`. Values are
// checked by OpenDaemonLog, so that a bad one is refused with a message naming its flag.
inline void AddLogFlags(CLI::App& command, LogFlags& flags, bool with_access_log = true) {
  command.add_option("--log-format", flags.format,
                     "Daemon log lines as text or json (one object per line; default text)");
  command.add_option("--log-level", flags.level,
                     "Least level written to the daemon log: debug, info, warn or error "
                     "(default info)");
  command.add_option("--log-file", flags.file,
                     "Append the daemon log to this file instead of standard error; SIGHUP "
                     "reopens it (after rotation)");
  if (with_access_log) {
    command.add_flag("--access-log", flags.access_log,
                     "Also log one line per HTTP request (method, path without the query's "
                     "values, status, bytes, duration, address, principal; never a token or "
                     "body)");
    command.add_option("--slow-request-ms", flags.slow_request_ms,
                       "Log an HTTP request that took this many milliseconds or more as "
                       "http.slow_request (warn); 0 never (default 1000)");
  }
}

// The daemon log of a composition root: where lines go and the log that formats them.
struct DaemonLog {
  std::unique_ptr<LogFile> file;
  std::unique_ptr<EventLog> log;
};

// Checks `flags` and opens the log. InvalidArgument naming the flag (`invalid_log_format`,
// `invalid_log_level`, `invalid_log_file`, `invalid_slow_request_ms`) otherwise: a usage error.
inline Result<DaemonLog> OpenDaemonLog(const LogFlags& flags, const Clock& clock) {
  const std::optional<LogFormat> format = ParseLogFormat(flags.format);
  if (!format) {
    return InvalidArgument("invalid_log_format",
                           "--log-format must be text or json, got '" + flags.format + "'");
  }
  const std::optional<LogLevel> level = ParseLogLevel(flags.level);
  if (!level) {
    return InvalidArgument(
        "invalid_log_level",
        "--log-level must be debug, info, warn or error, got '" + flags.level + "'");
  }
  if (flags.slow_request_ms < 0 || flags.slow_request_ms > kMaxSlowRequestMs) {
    return InvalidArgument("invalid_slow_request_ms", "--slow-request-ms must be 0 (never) to " +
                                                          std::to_string(kMaxSlowRequestMs) +
                                                          ", got " +
                                                          std::to_string(flags.slow_request_ms));
  }
  Result<std::unique_ptr<LogFile>> file = LogFile::Open(flags.file);
  if (!file.ok()) {
    return InvalidArgument("invalid_log_file", "--log-file: " + file.status().message());
  }
  DaemonLog daemon_log;
  daemon_log.file = std::move(file).value();
  daemon_log.log = std::make_unique<EventLog>(clock, *daemon_log.file, *format, *level);
  return daemon_log;
}

// Reopens the log's file (SIGHUP) and says so in the new file, or in the old one when the path
// cannot be opened.
inline void ReopenDaemonLog(DaemonLog& daemon_log) {
  if (Status st = daemon_log.file->Reopen(); !st.ok()) {
    daemon_log.log->Error("log.reopen_failed", {{"code", st.reason()}, {"message", st.message()}});
    return;
  }
  daemon_log.log->Info("log.reopened", {{"path", daemon_log.file->path()}});
}

}  // namespace ql
