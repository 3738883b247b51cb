#pragma once

// How a command is confined: its own user, mount, PID and IPC namespaces (and network, when
// asked), the host read-only, the daemon's files hidden, a private /tmp, no privileges, and
// limits through cgroups (v2 or v1) with rlimits as the floor. See README.md, "Confinement".

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ql/core/status.h"

namespace ql::exec {

// Limits of one attempt; an absent value is no limit.
struct CommandLimits {
  std::optional<int64_t> memory_bytes;  // cgroup memory (swap included), else RLIMIT_AS
  std::optional<int64_t> pids;          // cgroup pids (processes and threads)
  std::optional<int64_t> cpu_seconds;   // RLIMIT_CPU of each process (SIGXCPU, then SIGKILL)
  std::optional<int64_t> open_files;    // RLIMIT_NOFILE of each process

  bool operator==(const CommandLimits&) const = default;
};

// Where the attempt's cgroups are made: one parent directory per controller. Empty: none.
struct CgroupPlan {
  int version = 0;            // 0: no cgroup, 1: v1 hierarchies, 2: the unified hierarchy
  std::string unified;        // v2: parent directory (holds one directory per attempt)
  std::string memory;         // v1: parent directory in the memory hierarchy
  std::string pids;           // v1: parent directory in the pids hierarchy

  bool operator==(const CgroupPlan&) const = default;
};

// How one attempt's command is run (part of spec.json).
struct Confinement {
  enum class Mode {
    kHost,            // as the daemon, without namespaces (isolation off or impossible here)
    kRootNamespaces,  // the daemon is root: namespaces set up as root, then the project's uid/gid
    kUserNamespace,   // the daemon is not root: a user namespace maps the project's uid onto it
  };
  Mode mode = Mode::kHost;
  // The command's uid and gid: on the host with kRootNamespaces, as seen inside the user
  // namespace with kUserNamespace (mapped onto the daemon's own). Unused with kHost.
  uint32_t uid = 0;
  uint32_t gid = 0;
  // Absolute paths (files or directories) the command must not see: an empty read-only tmpfs
  // covers a directory, an empty file a file. The working directory and `writable_paths` are
  // bound back in when they lie below one.
  std::vector<std::string> hidden_paths;
  // Absolute directories the command may write besides its working directory; the rest of the
  // host is read-only. Refused (a spawn failure) when one lies in a hidden path or contains a
  // mount point, a hidden path or a private /tmp.
  std::vector<std::string> writable_paths;
  // Absolute directories shown to the command read-only even when they lie in a hidden path (a
  // script's materialised version): bound back at the same path, read-only, nosuid, nodev.
  std::vector<std::string> read_only_paths;
  // The task's own directory, made by the daemon (resolved, absolute): writable even below a
  // hidden path. Any other working directory is writable only when the command's uid owns it,
  // else read-only; one in a hidden path is refused.
  std::string own_directory;
  // False: a network namespace of its own with only a loopback interface.
  bool network = true;
  CommandLimits limits;
  CgroupPlan cgroups;

  bool operator==(const Confinement&) const = default;
};

// Returns "host", "root-namespaces" or "user-namespace".
std::string_view ConfinementModeName(Confinement::Mode mode);
std::optional<Confinement::Mode> ParseConfinementMode(std::string_view name);

// Says in one line how a command under `c` runs (for the run's record and `ql run show`), e.g.
// "uid 1900000001, namespaces mnt+pid+ipc+net, host read-only, memory 1 GiB (cgroup v1), pids
// 512 (cgroup v1), open files 1024".
std::string DescribeConfinement(const Confinement& c);

// What this host allows, found once when a daemon starts (ProbeIsolation).
struct IsolationReport {
  // "full" (root: an own uid per project and namespaces), "user-namespace" (not root: namespaces
  // in a user namespace, one uid), "rlimits" (no namespaces possible: only rlimits) or "off" (the
  // installation turned isolation off).
  std::string level;
  Confinement::Mode mode = Confinement::Mode::kHost;
  // Why the level is not "full" (empty when it is).
  std::string reason;
  CgroupPlan cgroups;
  // How limits are enforced: "cgroup v2", "cgroup v1" or "rlimits", and why not cgroups.
  std::string limits;
  // The installation lets tasks ask to run unconfined (--allow-unconfined-tasks); said in
  // Summary().
  bool unconfined_tasks_allowed = false;
  // 0 for "off" and "rlimits", 1 for "user-namespace", 2 for "full": the value of the
  // ql_command_isolation_level metric.
  int Rank() const;
  // One line for the start-up banner, `ql status` and `/readyz`.
  std::string Summary() const;
};

struct IsolationOptions {
  bool enabled = true;  // false: level "off", commands run as the daemon
  // The cgroup directory name made under each hierarchy's root for the attempts' cgroups.
  std::string cgroup_name = "qinglong";
};

// Finds what this host allows: tries the namespaces (and, as root, cgroups) in a child process
// and returns the strongest level that works, with the reason for anything weaker. Never fails:
// the daemon starts at any level and says which.
IsolationReport ProbeIsolation(const IsolationOptions& options);

// Allocates each project a uid (and the same gid) from a range, stable across restarts: the
// assignments are kept in a file (one "project_id uid" line each) under a lock.
class ProjectUids {
 public:
  // `file` holds the assignments; [first, last] is the range. Errors: InvalidArgument
  // `invalid_uid_range` when the range is empty, includes 0 or exceeds 2^31 - 2.
  static Result<ProjectUids> Open(std::string file, uint32_t first, uint32_t last);
  // Returns the project's uid, assigning the lowest free one on first use. Errors: Internal
  // `uid_store_io` (the file), Conflict `uid_range_exhausted`,
  // InvalidArgument `invalid_project_id` (not one plain token).
  Result<uint32_t> UidOf(const std::string& project_id);

 private:
  ProjectUids(std::string file, uint32_t first, uint32_t last)
      : file_(std::move(file)), first_(first), last_(last) {}
  std::string file_;
  uint32_t first_;
  uint32_t last_;
  // Assignments never change once made (the file is only appended to): what this process has
  // read is kept, so a launch of a known project touches no file.
  std::shared_ptr<std::mutex> mu_ = std::make_shared<std::mutex>();
  std::shared_ptr<std::map<std::string, uint32_t>> known_ =
      std::make_shared<std::map<std::string, uint32_t>>();
};

// Parses "FIRST-LAST" (decimal uids). Errors: InvalidArgument `invalid_uid_range`.
Result<std::pair<uint32_t, uint32_t>> ParseUidRange(std::string_view text);

namespace internal {

// An attempt's cgroup: created before the command starts, read and removed after it ended.
class AttemptCgroup {
 public:
  // Creates `<parent>/<name>` in each hierarchy of `plan` and writes the limits. Errors: Internal
  // `cgroup_setup_failed` naming the file.
  static Result<AttemptCgroup> Create(const CgroupPlan& plan, const std::string& name,
                                      const CommandLimits& limits);
  // Moves `pid` into the cgroup(s). Errors: Internal `cgroup_setup_failed`.
  Status Attach(pid_t pid) const;
  // Counts since creation: processes killed for memory, forks refused for the pids limit.
  int64_t OomKills() const;
  int64_t PidsRefused() const;
  // Removes the directories (once empty; retried briefly). Best effort.
  void Remove() const;
  // Removes the directories now if they are empty, else from a detached child process that
  // retries for up to 2 s, so the caller need not wait for the last processes to leave.
  void RemoveSoon() const;

 private:
  std::vector<std::string> dirs_;  // one per hierarchy
  std::string memory_dir_;
  std::string pids_dir_;
  int version_ = 0;
};

// Starts `argv` (execve of `executable`) confined by `c`: a child in new namespaces sets up the
// file system, drops privileges and runs the command as its own child (it stays the namespace's
// init and reaps; when the command ends, every process left in the namespace ends with it).
// Returns the child's pid (also the process group of the command) and a descriptor on which the
// child reports, one line each: "X" once the command runs, "E <errno> <what>" when it could not be
// started, "S <wait status>" when the command ended.
struct ConfinedStart {
  pid_t pid = -1;
  int report_fd = -1;
};
// `stdin_fd`/`output_fd` become the command's 0 and 1+2; `directory` is its working directory.
// `before_run` is called in the parent after the child exists and before it sets anything up
// (cgroup attachment); an error there kills the child. Errors: Internal `exec_spawn_failed`.
Result<ConfinedStart> StartConfined(const Confinement& c, const std::string& executable,
                                    char* const argv[], char* const envp[],
                                    const std::string& directory, int stdin_fd, int output_fd,
                                    const AttemptCgroup* cgroup);

// Reads one report line ("X", "E ...", "S ...") from `fd`, blocking; "" at EOF.
std::string ReadReportLine(int fd);

}  // namespace internal
}  // namespace ql::exec
