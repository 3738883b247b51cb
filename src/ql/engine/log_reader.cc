#include "ql/engine/log_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <system_error>

namespace ql {
namespace {

namespace fs = std::filesystem;

std::string CanonicalOrSelf(const std::string& path) {
  std::error_code ec;
  fs::path canonical = fs::weakly_canonical(fs::path(path), ec);
  if (ec) return fs::path(path).lexically_normal().string();
  return canonical.string();
}

bool IsWithin(const std::string& root, const std::string& path) {
  if (root == "/") return !path.empty() && path[0] == '/';
  return path.size() > root.size() + 1 && path.compare(0, root.size(), root) == 0 &&
         path[root.size()] == '/';
}

LogChunk Empty(int64_t offset, bool exists) {
  LogChunk chunk;
  chunk.next_offset = offset;
  chunk.eof = true;
  chunk.exists = exists;
  return chunk;
}

}  // namespace

LogReader::LogReader(std::string log_root) : root_(CanonicalOrSelf(log_root)) {
  while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
}

Result<std::optional<std::string>> LogReader::Resolve(const AttemptRecord& attempt) const {
  if (!attempt.log_path.has_value() || attempt.log_path->empty()) {
    return std::optional<std::string>();
  }
  const std::string& raw = *attempt.log_path;
  if (raw.find('\0') != std::string::npos) {
    return Corrupt("log_path_invalid", "log path of attempt " + attempt.id + " contains NUL");
  }
  fs::path requested(raw);
  if (requested.is_relative()) requested = fs::path(root_) / requested;

  // Resolve symlinks before the containment check so a link inside the root cannot point out.
  std::error_code ec;
  const bool present = fs::exists(requested, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) {
    return Unavailable("log_unreadable",
                       "cannot inspect log of attempt " + attempt.id + ": " + ec.message());
  }
  const std::string resolved = CanonicalOrSelf(requested.string());
  if (!IsWithin(root_, resolved)) {
    return Corrupt("log_path_invalid",
                   "log path of attempt " + attempt.id + " is outside the log root " + root_);
  }
  if (!present) return std::optional<std::string>();
  return std::optional<std::string>(resolved);
}

Result<int64_t> LogReader::LogSize(const AttemptRecord& attempt) const {
  QL_ASSIGN_OR_RETURN(std::optional<std::string> resolved, Resolve(attempt));
  if (!resolved.has_value()) return int64_t{0};
  struct stat st {};
  if (::lstat(resolved->c_str(), &st) != 0) {
    if (errno == ENOENT) return int64_t{0};
    return Unavailable("log_unreadable",
                       "cannot inspect log of attempt " + attempt.id + ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) {
    return Corrupt("log_path_invalid",
                   "log path of attempt " + attempt.id + " is not a regular file");
  }
  return static_cast<int64_t>(st.st_size);
}

Result<LogChunk> LogReader::ReadLog(const AttemptRecord& attempt, int64_t offset,
                                    size_t max_bytes) const {
  if (offset < 0) {
    return InvalidArgument("invalid_offset",
                           "log offset must be >= 0, got " + std::to_string(offset));
  }
  QL_ASSIGN_OR_RETURN(std::optional<std::string> found, Resolve(attempt));
  if (!found.has_value()) return Empty(offset, false);
  const std::string& resolved = *found;

  const int fd = ::open(resolved.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    if (errno == ENOENT) return Empty(offset, false);
    return Unavailable("log_unreadable",
                       "cannot open log of attempt " + attempt.id + ": " + std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Corrupt("log_path_invalid",
                   "log path of attempt " + attempt.id + " is not a regular file");
  }
  const int64_t size = st.st_size;
  if (offset >= size) {
    ::close(fd);
    LogChunk chunk = Empty(offset, true);
    chunk.size = size;
    return chunk;
  }
  const size_t want = static_cast<size_t>(std::min<int64_t>(
      size - offset, static_cast<int64_t>(std::min(max_bytes, kMaxLogChunkBytes))));
  LogChunk chunk;
  chunk.exists = true;
  chunk.size = size;
  chunk.data.resize(want);
  size_t got = 0;
  while (got < want) {
    const ssize_t n = ::pread(fd, chunk.data.data() + got, want - got,
                              static_cast<off_t>(offset + static_cast<int64_t>(got)));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return Unavailable("log_unreadable",
                         "cannot read log of attempt " + attempt.id + ": " + std::strerror(err));
    }
    if (n == 0) break;  // the file shrank after fstat; return what is there
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  chunk.data.resize(got);
  chunk.next_offset = offset + static_cast<int64_t>(got);
  chunk.eof = chunk.next_offset >= size;
  return chunk;
}

}  // namespace ql
