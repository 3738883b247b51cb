#include "ql/exec/process_identity.h"

#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>

#include "ql/exec/posix_util.h"

namespace ql::exec {
namespace {

// Reads up to `size` bytes of a small file into `buffer`; returns the length or -1.
ssize_t ReadSmall(const char* path, char* buffer, size_t size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = internal::ReadFull(fd, buffer, size);
  close(fd);
  return n;
}

template <typename T>
bool ParseNumber(std::string_view token, T& out) {
  auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), out);
  return ec == std::errc() && end == token.data() + token.size();
}

}  // namespace

std::optional<ProcessStat> ParseProcessStat(std::string_view text) {
  size_t open_paren = text.find('(');
  size_t close_paren = text.rfind(')');
  if (open_paren == std::string_view::npos || close_paren == std::string_view::npos ||
      close_paren < open_paren || open_paren == 0) {
    return std::nullopt;
  }
  ProcessStat stat;
  std::string_view pid_token = text.substr(0, open_paren);
  while (!pid_token.empty() && pid_token.back() == ' ') pid_token.remove_suffix(1);
  if (!ParseNumber(pid_token, stat.pid)) return std::nullopt;

  // Fields after the command name, numbered as in proc(5): state is field 3.
  std::string_view rest = text.substr(close_paren + 1);
  int field = 2;
  while (!rest.empty() && field < 22) {
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    size_t end = rest.find_first_of(" \n");
    std::string_view token = rest.substr(0, end);
    rest.remove_prefix(end == std::string_view::npos ? rest.size() : end);
    if (token.empty()) break;
    ++field;
    if (field == 3) {
      if (token.size() != 1) return std::nullopt;
      stat.state = token[0];
    } else if (field == 4) {
      if (!ParseNumber(token, stat.ppid)) return std::nullopt;
    } else if (field == 5) {
      if (!ParseNumber(token, stat.pgrp)) return std::nullopt;
    } else if (field == 22) {
      if (!ParseNumber(token, stat.start_time_ticks)) return std::nullopt;
    }
  }
  if (field < 22) return std::nullopt;
  return stat;
}

std::optional<ProcessStat> ReadProcessStat(pid_t pid) {
  if (pid <= 0) return std::nullopt;
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  char buffer[1024];
  ssize_t n = ReadSmall(path, buffer, sizeof(buffer));
  if (n <= 0) return std::nullopt;
  return ParseProcessStat(std::string_view(buffer, static_cast<size_t>(n)));
}

std::optional<ProcessIdentity> ReadProcessIdentity(pid_t pid) {
  std::optional<ProcessStat> stat = ReadProcessStat(pid);
  if (!stat) return std::nullopt;
  return ProcessIdentity{stat->pid, stat->start_time_ticks};
}

bool IsSameProcessPresent(const ProcessIdentity& identity) {
  std::optional<ProcessStat> stat = ReadProcessStat(identity.pid);
  return stat && stat->start_time_ticks == identity.start_time_ticks;
}

bool IsSameProcessAlive(const ProcessIdentity& identity) {
  std::optional<ProcessStat> stat = ReadProcessStat(identity.pid);
  return stat && stat->start_time_ticks == identity.start_time_ticks && stat->state != 'Z' &&
         stat->state != 'X' && stat->state != 'x';
}

std::string ReadBootId() {
  char buffer[128];
  ssize_t n = ReadSmall("/proc/sys/kernel/random/boot_id", buffer, sizeof(buffer));
  if (n <= 0) return "";
  std::string id(buffer, static_cast<size_t>(n));
  while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
  return id;
}

}  // namespace ql::exec
