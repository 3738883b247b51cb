#include "ql/exec/process_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "ql/exec/process_identity.h"

namespace ql::exec::internal {
namespace {

// The number a /proc directory entry is named by (a pid or tid), or 0 for any other entry.
long NumericName(const char* name) {
  char* end = nullptr;
  const long number = strtol(name, &end, 10);
  return number > 0 && end != name && *end == '\0' ? number : 0;
}

// Every process on the system as (pid, its stat), read once.
std::vector<ProcessStat> AllProcesses() {
  std::vector<ProcessStat> all;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return all;
  while (dirent* entry = readdir(proc)) {
    const long pid = NumericName(entry->d_name);
    if (pid == 0) continue;
    std::optional<ProcessStat> stat = ReadProcessStat(static_cast<pid_t>(pid));
    if (stat) all.push_back(*stat);
  }
  closedir(proc);
  return all;
}

// Whether this kernel lists each thread's children in /proc/<pid>/task/<tid>/children
// (CONFIG_PROC_CHILDREN, Linux 3.5+).
bool HaveChildrenFiles() {
  static const bool have = [] {
    char path[64];
    std::snprintf(path, sizeof(path), "/proc/self/task/%ld/children",
                  static_cast<long>(syscall(SYS_gettid)));
    return access(path, R_OK) == 0;
  }();
  return have;
}

// The pids listed as children of any thread of `pid` (none when it is gone).
std::vector<pid_t> ChildrenOf(pid_t pid) {
  std::vector<pid_t> out;
  char path[96];
  std::snprintf(path, sizeof(path), "/proc/%d/task", static_cast<int>(pid));
  DIR* tasks = opendir(path);
  if (tasks == nullptr) return out;
  while (dirent* entry = readdir(tasks)) {
    const long tid = NumericName(entry->d_name);
    if (tid == 0) continue;
    std::snprintf(path, sizeof(path), "/proc/%d/task/%ld/children", static_cast<int>(pid), tid);
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;  // the thread ended meanwhile
    std::string text;
    char buffer[512];
    for (ssize_t n; (n = read(fd, buffer, sizeof(buffer))) != 0;) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) break;
      text.append(buffer, static_cast<size_t>(n));
    }
    close(fd);
    const char* at = text.c_str();
    while (*at != '\0') {
      char* next = nullptr;
      const long child = strtol(at, &next, 10);
      if (next == at) break;
      if (child > 0) out.push_back(static_cast<pid_t>(child));
      at = next;
    }
  }
  closedir(tasks);
  return out;
}

// Every process below `root`, breadth first; `children_of(pid)` lists a process's children.
template <typename ChildrenFn>
std::vector<Descendant> Walk(pid_t root, ChildrenFn children_of) {
  std::vector<Descendant> out;
  std::vector<pid_t> parents = {root};
  std::set<pid_t> seen = {root};
  while (!parents.empty()) {
    const pid_t parent = parents.back();
    parents.pop_back();
    for (const Descendant& d : children_of(parent)) {
      if (!seen.insert(d.pid).second) continue;
      out.push_back(d);
      parents.push_back(d.pid);
    }
  }
  return out;
}

Descendant Of(const ProcessStat& s) { return Descendant{s.pid, s.ppid, s.pgrp, s.state}; }

// Descendants of `root` found by following the children files down from it: a few small reads
// instead of one per process on the system.
std::vector<Descendant> WalkChildren(pid_t root) {
  return Walk(root, [](pid_t parent) {
    std::vector<Descendant> children;
    for (pid_t child : ChildrenOf(parent)) {
      if (std::optional<ProcessStat> s = ReadProcessStat(child)) children.push_back(Of(*s));
    }
    return children;
  });
}

// Descendants of `root` from one read of every process's stat (kernels without children files).
std::vector<Descendant> ScanAll(pid_t root) {
  std::multimap<pid_t, Descendant> by_parent;
  for (const ProcessStat& stat : AllProcesses()) by_parent.emplace(stat.ppid, Of(stat));
  return Walk(root, [&by_parent](pid_t parent) {
    std::vector<Descendant> children;
    auto [begin, end] = by_parent.equal_range(parent);
    for (auto it = begin; it != end; ++it) children.push_back(it->second);
    return children;
  });
}

int PidfdOpen(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

int PidfdSendSignal(int pidfd, int sig) {
  return static_cast<int>(syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}

}  // namespace

std::vector<Descendant> Descendants(pid_t root) {
  if (!HaveChildrenFiles()) return ScanAll(root);
  // A children file can skip a child while one of its siblings exits during the read (proc(5)),
  // so a walk that finds nothing is confirmed by a second one.
  std::vector<Descendant> found = WalkChildren(root);
  return found.empty() ? WalkChildren(root) : found;
}

int SignalDescendants(const std::vector<Descendant>& processes, pid_t root, int sig,
                      pid_t skip_group) {
  std::set<pid_t> tree = {root};
  for (const Descendant& d : processes) tree.insert(d.pid);
  int signalled = 0;
  for (const Descendant& d : processes) {
    if (d.state == 'Z' || d.state == 'X' || (skip_group != 0 && d.pgrp == skip_group)) continue;
    const int pidfd = PidfdOpen(d.pid);
    if (pidfd < 0 && errno != ENOSYS) continue;  // gone already
    // Read after the pidfd pins the process: if the pid was reused, the new process's parent is
    // not in the tree (or the new process is itself a descendant, which is as well).
    std::optional<ProcessStat> now = ReadProcessStat(d.pid);
    const bool ours = now && tree.count(now->ppid) > 0;
    if (ours) {
      // Without pidfds (Linux before 5.3) the check above narrows the race without closing it.
      const int sent = pidfd >= 0 ? PidfdSendSignal(pidfd, sig) : kill(d.pid, sig);
      if (sent == 0) ++signalled;
    }
    if (pidfd >= 0) close(pidfd);
  }
  return signalled;
}

int ReapChildrenExcept(pid_t keep) {
  int reaped = 0;
  for (const Descendant& d : Descendants(getpid())) {
    if (d.ppid != getpid() || d.pid == keep || d.state != 'Z') continue;
    int status = 0;
    if (waitpid(d.pid, &status, WNOHANG) == d.pid) ++reaped;
  }
  return reaped;
}

}  // namespace ql::exec::internal
