#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ql::exec {

// Names one process incarnation: a pid alone is reused by the kernel, the pair with the start
// time (clock ticks since boot, /proc/<pid>/stat field 22) is not within one boot.
struct ProcessIdentity {
  pid_t pid = 0;
  uint64_t start_time_ticks = 0;

  bool operator==(const ProcessIdentity&) const = default;
};

// The fields of /proc/<pid>/stat this library needs.
struct ProcessStat {
  pid_t pid = 0;
  char state = '?';  // R, S, D, T, Z (zombie), X (dead), ...
  pid_t ppid = 0;
  pid_t pgrp = 0;
  uint64_t start_time_ticks = 0;
};

// Parses the contents of a /proc/<pid>/stat file. The command name (field 2) may contain spaces
// and parentheses, so fields are counted from the last ')'. Returns nullopt when malformed.
std::optional<ProcessStat> ParseProcessStat(std::string_view text);

// Reads /proc/<pid>/stat. Returns nullopt when the process does not exist (a zombie still
// exists) or the file cannot be read or parsed.
std::optional<ProcessStat> ReadProcessStat(pid_t pid);

// Returns the identity of `pid`, or nullopt when it does not exist (zombies are still returned).
std::optional<ProcessIdentity> ReadProcessIdentity(pid_t pid);

// Returns true when `identity` is running or a zombie with the same start time: its pid (and, for
// a group leader, its process group id) cannot have been reused, so it is safe to signal.
bool IsSameProcessPresent(const ProcessIdentity& identity);

// Returns true when `identity` names a live process: the pid exists, is not a zombie, and has the
// same start time (which guards against pid reuse).
bool IsSameProcessAlive(const ProcessIdentity& identity);

// Returns the kernel boot id (/proc/sys/kernel/random/boot_id), or "" when unavailable. Start
// times are only comparable between identities recorded under the same boot id.
std::string ReadBootId();

}  // namespace ql::exec
