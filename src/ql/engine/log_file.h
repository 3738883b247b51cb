#pragma once

// The daemon log's destination: standard error (journald takes it from there) or a file that a
// rotation renames away and the daemon reopens on SIGHUP.

#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "ql/core/event_log.h"
#include "ql/core/status.h"

namespace ql {

class LogFile final : public LogSink {
 public:
  // Returns a sink writing to standard error when `path` is empty, else appending to `path`
  // (created 0640 when missing). Internal `log_file_io` when the file cannot be opened.
  static Result<std::unique_ptr<LogFile>> Open(const std::string& path);
  ~LogFile() override;
  LogFile(const LogFile&) = delete;
  LogFile& operator=(const LogFile&) = delete;

  // Writes `line` and a line feed in one append, so lines of several threads never interleave.
  // A failed write is dropped: the log never stops the daemon.
  void WriteLine(std::string_view line) override;
  // Opens the path again and writes to the new file from now on (after the old one was renamed
  // or removed); a no-op for standard error. On failure the old file stays in use and Internal
  // `log_file_io` is returned.
  Status Reopen();
  const std::string& path() const { return path_; }

 private:
  LogFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}

  const std::string path_;
  std::mutex mu_;
  int fd_;
};

}  // namespace ql
