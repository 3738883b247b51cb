#include "ql/engine/log_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ql {
namespace {

Result<int> OpenForAppend(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
  if (fd < 0) {
    return Internal("log_file_io", "cannot open the log file " + path + ": " + strerror(errno));
  }
  return fd;
}

}  // namespace

Result<std::unique_ptr<LogFile>> LogFile::Open(const std::string& path) {
  if (path.empty()) return std::unique_ptr<LogFile>(new LogFile("", STDERR_FILENO));
  QL_ASSIGN_OR_RETURN(const int fd, OpenForAppend(path));
  return std::unique_ptr<LogFile>(new LogFile(path, fd));
}

LogFile::~LogFile() {
  if (!path_.empty() && fd_ >= 0) ::close(fd_);
}

void LogFile::WriteLine(std::string_view line) {
  std::string whole(line);
  whole += '\n';
  std::lock_guard<std::mutex> lock(mu_);
  size_t written = 0;
  while (written < whole.size()) {
    const ssize_t n = ::write(fd_, whole.data() + written, whole.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    written += static_cast<size_t>(n);
  }
}

Status LogFile::Reopen() {
  if (path_.empty()) return Status::Ok();
  QL_ASSIGN_OR_RETURN(const int fd, OpenForAppend(path_));
  std::lock_guard<std::mutex> lock(mu_);
  ::close(fd_);
  fd_ = fd;
  return Status::Ok();
}

}  // namespace ql
