#include "ql/exec/process_tree.h"

#include <dirent.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>

#include "ql/exec/process_identity.h"

namespace ql::exec::internal {
namespace {

// Every process on the system as (pid, its stat), read once.
std::vector<ProcessStat> AllProcesses() {
  std::vector<ProcessStat> all;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return all;
  while (dirent* entry = readdir(proc)) {
    char* end = nullptr;
    const long pid = strtol(entry->d_name, &end, 10);
    if (pid <= 0 || end == entry->d_name || *end != '\0') continue;
    std::optional<ProcessStat> stat = ReadProcessStat(static_cast<pid_t>(pid));
    if (stat) all.push_back(*stat);
  }
  closedir(proc);
  return all;
}

int PidfdOpen(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

int PidfdSendSignal(int pidfd, int sig) {
  return static_cast<int>(syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}

}  // namespace

std::vector<Descendant> Descendants(pid_t root) {
  std::multimap<pid_t, const ProcessStat*> children;
  const std::vector<ProcessStat> all = AllProcesses();
  for (const ProcessStat& stat : all) children.emplace(stat.ppid, &stat);
  std::vector<Descendant> out;
  std::vector<pid_t> parents = {root};
  std::set<pid_t> seen = {root};
  while (!parents.empty()) {
    const pid_t parent = parents.back();
    parents.pop_back();
    auto [begin, end] = children.equal_range(parent);
    for (auto it = begin; it != end; ++it) {
      const ProcessStat& s = *it->second;
      if (!seen.insert(s.pid).second) continue;
      out.push_back(Descendant{s.pid, s.ppid, s.pgrp, s.state});
      parents.push_back(s.pid);
    }
  }
  return out;
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
