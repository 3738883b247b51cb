#include "ql/exec/confinement.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "ql/exec/posix_util.h"

namespace ql::exec {
namespace {

std::string ErrnoText(const std::string& what, int err) { return what + ": " + std::strerror(err); }

bool IsDirectory(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

// Writes `text` to the existing file `path` in one write. Returns 0 or the errno.
int WriteFileText(const std::string& path, const std::string& text) {
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  const ssize_t n = write(fd, text.data(), text.size());
  const int err = n == static_cast<ssize_t>(text.size()) ? 0 : (n < 0 ? errno : EIO);
  close(fd);
  return err;
}

std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The processes of this PID namespace (its own /proc) other than its init, zombies left out.
int LiveProcessesBesidesInit() {
  DIR* dir = opendir("/proc");
  if (dir == nullptr) return 0;
  int count = 0;
  while (const dirent* entry = readdir(dir)) {
    const char* name = entry->d_name;
    if (name[0] < '1' || name[0] > '9' || std::strcmp(name, "1") == 0) continue;
    if (std::strspn(name, "0123456789") != std::strlen(name)) continue;
    // /proc/N/stat: "N (comm) S ..."; the state follows the last ')'.
    const std::string stat = ReadSmallFile(std::string("/proc/") + name + "/stat");
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] == 'Z') continue;
    ++count;
  }
  closedir(dir);
  return count;
}

// Returns the value after `key ` on a line of a "key value" file (cgroup event files), or 0.
int64_t KeyedCount(const std::string& path, std::string_view key) {
  std::istringstream in(ReadSmallFile(path));
  std::string name;
  int64_t value = 0;
  while (in >> name >> value) {
    if (name == key) return value;
  }
  return 0;
}

std::string Bytes(int64_t b) {
  if (b % (1LL << 30) == 0) return std::to_string(b >> 30) + " GiB";
  if (b % (1LL << 20) == 0) return std::to_string(b >> 20) + " MiB";
  if (b % (1LL << 10) == 0) return std::to_string(b >> 10) + " KiB";
  return std::to_string(b) + " bytes";
}

// ---- In the confined child (the namespace's init) -------------------------------------------

struct ChildContext {
  const Confinement* c = nullptr;
  const char* executable = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  const char* directory = nullptr;
  int stdin_fd = -1;
  int output_fd = -1;
  int report_fd = -1;
  int go_fd = -1;
  uid_t outer_uid = 0;
  gid_t outer_gid = 0;
  bool probe = false;
};

void Report(int fd, const std::string& line) {
  const std::string text = line + "\n";
  (void)internal::WriteAll(fd, text.data(), text.size());
}

[[noreturn]] void Fail(const ChildContext& ctx, int err, const std::string& what) {
  Report(ctx.report_fd, "E " + std::to_string(err) + " " + what);
  _exit(127);
}

// Undoes the octal escapes (\040 for a space, ...) of /proc/self/mountinfo.
std::string Unescape(std::string_view field) {
  std::string out;
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size()) {
      bool octal = true;
      int value = 0;
      for (size_t k = 1; k <= 3; ++k) {
        const char d = field[i + k];
        if (d < '0' || d > '7') octal = false;
        value = value * 8 + (d - '0');
      }
      if (octal) {
        out.push_back(static_cast<char>(value));
        i += 3;
        continue;
      }
    }
    out.push_back(field[i]);
  }
  return out;
}

std::vector<std::string> MountPoints() {
  std::vector<std::string> points;
  std::istringstream in(ReadSmallFile("/proc/self/mountinfo"));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string id, parent, dev, root, point;
    if (fields >> id >> parent >> dev >> root >> point) points.push_back(Unescape(point));
  }
  return points;
}

// The per-mount flags a bind remount must repeat (in a user namespace the kernel refuses to
// clear the ones the host set), read from the mount at `path`.
unsigned long KeptFlags(const std::string& path) {
  struct statvfs st;
  if (statvfs(path.c_str(), &st) != 0) return 0;
  unsigned long flags = 0;
  if (st.f_flag & ST_NOSUID) flags |= MS_NOSUID;
  if (st.f_flag & ST_NODEV) flags |= MS_NODEV;
  if (st.f_flag & ST_NOEXEC) flags |= MS_NOEXEC;
  if (st.f_flag & ST_NOATIME) flags |= MS_NOATIME;
  if (st.f_flag & ST_NODIRATIME) flags |= MS_NODIRATIME;
  if (st.f_flag & ST_RELATIME) flags |= MS_RELATIME;
  if (st.f_flag & ST_RDONLY) flags |= MS_RDONLY;
  return flags;
}

// Every mount in `points` becomes read-only and nosuid (in this mount namespace only).
void ReadOnlyEverything(const ChildContext& ctx, const std::vector<std::string>& points) {
  for (const std::string& point : points) {
    const unsigned long flags = KeptFlags(point) | MS_RDONLY | MS_NOSUID;
    if (mount(nullptr, point.c_str(), nullptr, MS_REMOUNT | MS_BIND | flags, nullptr) == 0) {
      continue;
    }
    // Gone, out of reach, or covered by a later mount (then the path is no mount point): not
    // visible either way.
    if (errno == ENOENT || errno == EACCES || errno == EINVAL || errno == ENOTDIR) continue;
    Fail(ctx, errno, "cannot make " + point + " read-only");
  }
}

bool Below(const std::string& path, const std::string& dir) {
  return path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 &&
         (dir == "/" || path[dir.size()] == '/');
}

// Creates the directories of `path` below `root` (a fresh tmpfs) so that it can be a mount point.
void MakeMountPoint(const ChildContext& ctx, const std::string& root, const std::string& path) {
  size_t at = root.size();
  while (at < path.size()) {
    size_t next = path.find('/', at + 1);
    if (next == std::string::npos) next = path.size();
    const std::string dir = path.substr(0, next);
    if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
      Fail(ctx, errno, "cannot make mount point " + dir);
    }
    at = next;
  }
}

void BindWritable(const ChildContext& ctx, int fd, const std::string& target,
                  const std::vector<std::string>& hidden_dirs) {
  // Mount points are made below the deepest cover the target lies in.
  const std::string* cover = nullptr;
  for (const std::string& hidden : hidden_dirs) {
    if (Below(target, hidden) && (cover == nullptr || hidden.size() > cover->size())) {
      cover = &hidden;
    }
  }
  if (cover != nullptr) MakeMountPoint(ctx, *cover, target);
  const std::string source = "/proc/self/fd/" + std::to_string(fd);
  if (mount(source.c_str(), target.c_str(), nullptr, MS_BIND, nullptr) != 0) {
    Fail(ctx, errno, "cannot bind " + target);
  }
  const unsigned long flags = (KeptFlags(target) & ~MS_RDONLY) | MS_NOSUID;
  if (mount(nullptr, target.c_str(), nullptr, MS_REMOUNT | MS_BIND | flags, nullptr) != 0) {
    Fail(ctx, errno, "cannot make " + target + " writable");
  }
}

// Binds the directory `fd` names back at `target`, read-only (a script's version in the data
// directory, say), below the deepest cover it lies in.
void BindReadOnly(const ChildContext& ctx, int fd, const std::string& target,
                  const std::vector<std::string>& hidden_dirs) {
  const std::string* cover = nullptr;
  for (const std::string& hidden : hidden_dirs) {
    if (Below(target, hidden) && (cover == nullptr || hidden.size() > cover->size())) {
      cover = &hidden;
    }
  }
  if (cover != nullptr) MakeMountPoint(ctx, *cover, target);
  const std::string source = "/proc/self/fd/" + std::to_string(fd);
  if (mount(source.c_str(), target.c_str(), nullptr, MS_BIND, nullptr) != 0) {
    Fail(ctx, errno, "cannot bind " + target);
  }
  const unsigned long flags = KeptFlags(target) | MS_RDONLY | MS_NOSUID | MS_NODEV;
  if (mount(nullptr, target.c_str(), nullptr, MS_REMOUNT | MS_BIND | flags, nullptr) != 0) {
    Fail(ctx, errno, "cannot make " + target + " read-only");
  }
}

// Covers `path`: a directory with an empty tmpfs (kept writable until the mount points below
// it are made, see `covers`), anything else but a symlink with /dev/null, read-only.
void Hide(const ChildContext& ctx, const std::string& path, std::vector<std::string>& covers) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return;  // nothing there to see
  if (S_ISDIR(st.st_mode)) {
    if (mount("tmpfs", path.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
              "mode=0755,size=64k") != 0) {
      Fail(ctx, errno, "cannot hide " + path);
    }
    covers.push_back(path);
  } else if (!S_ISLNK(st.st_mode)) {
    if (mount("/dev/null", path.c_str(), nullptr, MS_BIND, nullptr) != 0) {
      Fail(ctx, errno, "cannot hide " + path);
    }
    const unsigned long flags = KeptFlags(path) | MS_RDONLY | MS_NOSUID | MS_NOEXEC;
    if (mount(nullptr, path.c_str(), nullptr, MS_REMOUNT | MS_BIND | flags, nullptr) != 0) {
      Fail(ctx, errno, "cannot hide " + path);
    }
  }
}

// Returns the path an O_PATH descriptor names, symlinks resolved, or "".
std::string RealPathOf(int fd) {
  char buffer[PATH_MAX + 1];
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = readlink(link.c_str(), buffer, PATH_MAX);
  if (n <= 0) return "";
  return std::string(buffer, static_cast<size_t>(n));
}

bool AtOrBelow(const std::string& path, const std::string& dir) {
  return path == dir || Below(path, dir);
}

// One directory bound back read-write: opened (and resolved) before anything is covered.
struct Writable {
  int fd = -1;
  std::string real;
};

void SetUpFileSystem(const ChildContext& ctx, std::string& working_directory) {
  const Confinement& c = *ctx.c;
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    Fail(ctx, errno, "cannot make the mounts private");
  }
  static constexpr const char* kPrivate[] = {"/tmp", "/var/tmp", "/dev/shm"};
  auto hidden_above = [&](const std::string& real) -> const std::string* {
    for (const std::string& hidden : c.hidden_paths) {
      if (AtOrBelow(real, hidden)) return &hidden;
    }
    return nullptr;
  };
  // What a command may write is decided on resolved paths, before anything is covered: a link
  // (planted by an earlier command, say) cannot lead a bind into what is hidden.
  std::vector<Writable> writable;
  if (!ctx.probe) {
    const int wd = open(ctx.directory, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (wd < 0) Fail(ctx, errno, std::string("cannot change to working directory ") + ctx.directory);
    working_directory = RealPathOf(wd);
    if (working_directory.empty()) Fail(ctx, errno, "cannot resolve " + std::string(ctx.directory));
    struct stat st;
    if (fstat(wd, &st) != 0) Fail(ctx, errno, "cannot stat " + working_directory);
    // The task's own directory (made by the daemon) or one its uid owns is writable; any other
    // stays read-only, as the host's permissions would have it.
    const bool own = !c.own_directory.empty() && working_directory == c.own_directory;
    if (!own && hidden_above(working_directory) != nullptr) {
      Fail(ctx, EACCES, "working directory " + std::string(ctx.directory) + " lies in " +
                            *hidden_above(working_directory) + ", which commands must not see");
    }
    if (own || st.st_uid == c.uid) {
      writable.push_back({wd, working_directory});
    } else {
      close(wd);
      for (const char* tmp : kPrivate) {
        if (AtOrBelow(working_directory, tmp)) {
          Fail(ctx, ENOENT, "working directory " + std::string(ctx.directory) + " is below " +
                                tmp + ", which is private to each command (give a directory "
                                      "its project's uid owns)");
        }
      }
    }
  }
  for (const std::string& path : c.writable_paths) {
    const int fd = open(path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) Fail(ctx, errno, "cannot open writable path " + path);
    const std::string real = RealPathOf(fd);
    if (real.empty() || hidden_above(real) != nullptr) {
      Fail(ctx, EACCES, "writable path " + path + " lies in a path commands must not see");
    }
    writable.push_back({fd, real});
  }
  // Directories shown read-only (resolved before anything is covered, like the writable ones).
  std::vector<Writable> read_only;
  for (const std::string& path : c.read_only_paths) {
    const int fd = open(path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) Fail(ctx, errno, "cannot open read-only path " + path);
    const std::string real = RealPathOf(fd);
    if (real.empty()) Fail(ctx, errno, "cannot resolve " + path);
    read_only.push_back({fd, real});
  }
  // A bind is not recursive: whatever is mounted or hidden below a writable directory would
  // come back into view as the bare directory under it, writable. Such a directory is refused.
  const std::vector<std::string> points = MountPoints();
  for (const Writable& w : writable) {
    auto refuse = [&](const std::string& inside) {
      Fail(ctx, EACCES, "cannot make " + w.real + " writable: it contains " + inside);
    };
    for (const std::string& point : points) {
      if (Below(point, w.real)) refuse("the mount point " + point);
    }
    for (const std::string& hidden : c.hidden_paths) {
      if (Below(hidden, w.real)) refuse(hidden + ", which commands must not see");
    }
    for (const char* tmp : kPrivate) {
      if (Below(tmp, w.real)) refuse(tmp);
    }
  }

  ReadOnlyEverything(ctx, points);

  // Directories covered by a tmpfs of ours: mount points for what is bound back are made in
  // them. The private /tmp stays writable; the other covers become read-only at the end.
  std::vector<std::string> hidden_dirs;
  std::vector<std::string> covers;
  for (const char* tmp : kPrivate) {
    if (!IsDirectory(tmp)) continue;
    if (mount("tmpfs", tmp, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777") != 0) {
      Fail(ctx, errno, std::string("cannot mount a private ") + tmp);
    }
    covers.push_back(tmp);
  }

  // As root the command gets a uid of its own, which cannot pass a directory closed to others
  // (the quick start's data directory below /root, say) on the way to its working directory.
  // Such a directory is covered by an empty tmpfs holding only the way through: nothing in it was
  // visible to that uid anyway.
  if (c.mode == Confinement::Mode::kRootNamespaces) {
    std::vector<Writable> shown = writable;
    shown.insert(shown.end(), read_only.begin(), read_only.end());
    for (const Writable& w : shown) {
      const std::string& target = w.real;
      for (size_t slash = target.find('/', 1); slash != std::string::npos;
           slash = target.find('/', slash + 1)) {
        const std::string dir = target.substr(0, slash);
        struct stat st;
        if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) break;
        const bool passable = (st.st_mode & S_IXOTH) ||
                              (st.st_uid == c.uid && (st.st_mode & S_IXUSR)) ||
                              (st.st_gid == c.gid && (st.st_mode & S_IXGRP));
        if (passable) continue;
        if (mount("tmpfs", dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                  "mode=0755,size=64k") != 0) {
          Fail(ctx, errno, "cannot cover " + dir);
        }
        hidden_dirs.push_back(dir);
        break;  // what lies below is the cover's now
      }
    }
  }
  for (const std::string& path : c.hidden_paths) Hide(ctx, path, hidden_dirs);
  covers.insert(covers.end(), hidden_dirs.begin(), hidden_dirs.end());
  for (const Writable& w : writable) {
    BindWritable(ctx, w.fd, w.real, covers);
    close(w.fd);
  }
  for (const Writable& r : read_only) {
    BindReadOnly(ctx, r.fd, r.real, covers);
    close(r.fd);
  }
  for (const std::string& dir : hidden_dirs) {
    if (mount(nullptr, dir.c_str(), nullptr,
              MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) {
      Fail(ctx, errno, "cannot make the cover of " + dir + " read-only");
    }
  }
  // The namespace's own /proc: only the attempt's processes are in it.
  if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) {
    Fail(ctx, errno, "cannot mount /proc");
  }
  // Without the host's network, /sys must not list the host's interfaces either: a sysfs of the
  // attempt's network namespace, read-only.
  if (!c.network && IsDirectory("/sys") &&
      mount("sysfs", "/sys", "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) {
    Fail(ctx, errno, "cannot mount /sys");
  }
}

void LoopbackUp(const ChildContext& ctx) {
  const int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) Fail(ctx, errno, "cannot open a socket for the loopback interface");
  ifreq request{};
  std::strncpy(request.ifr_name, "lo", IFNAMSIZ - 1);
  if (ioctl(s, SIOCGIFFLAGS, &request) != 0) Fail(ctx, errno, "cannot read the loopback flags");
  request.ifr_flags |= IFF_UP;
  if (ioctl(s, SIOCSIFFLAGS, &request) != 0) Fail(ctx, errno, "cannot bring up loopback");
  close(s);
}

void SetLimit(const ChildContext& ctx, int resource, rlim_t soft, rlim_t hard, const char* what) {
  rlimit limit{soft, hard};
  if (setrlimit(resource, &limit) != 0) Fail(ctx, errno, std::string("cannot set ") + what);
}

void ApplyRlimits(const ChildContext& ctx) {
  const Confinement& c = *ctx.c;
  SetLimit(ctx, RLIMIT_CORE, 0, 0, "the core size limit");
  if (c.limits.open_files) {
    const auto n = static_cast<rlim_t>(*c.limits.open_files);
    SetLimit(ctx, RLIMIT_NOFILE, n, n, "the open files limit");
  }
  if (c.limits.cpu_seconds) {
    const auto n = static_cast<rlim_t>(*c.limits.cpu_seconds);
    SetLimit(ctx, RLIMIT_CPU, n, n + 1, "the CPU time limit");
  }
  // The floor where no cgroup enforces a limit.
  if (c.limits.memory_bytes && c.cgroups.version == 0) {
    const auto n = static_cast<rlim_t>(*c.limits.memory_bytes);
    SetLimit(ctx, RLIMIT_AS, n, n, "the address space limit");
  }
  // Processes are counted per uid and user namespace: as root that is the project's uid on the
  // whole host, in a user namespace the attempt's own processes.
  if (c.limits.pids && c.cgroups.version == 0 && c.mode != Confinement::Mode::kHost) {
    const auto n = static_cast<rlim_t>(*c.limits.pids);
    SetLimit(ctx, RLIMIT_NPROC, n, n, "the process limit");
  }
}

void WriteIdMaps(const ChildContext& ctx) {
  const Confinement& c = *ctx.c;
  if (int err = WriteFileText("/proc/self/setgroups", "deny"); err != 0) {
    Fail(ctx, err, "cannot deny setgroups in the user namespace");
  }
  if (int err = WriteFileText("/proc/self/uid_map", std::to_string(c.uid) + " " +
                                                        std::to_string(ctx.outer_uid) + " 1");
      err != 0) {
    Fail(ctx, err, "cannot write the uid map");
  }
  if (int err = WriteFileText("/proc/self/gid_map", std::to_string(c.gid) + " " +
                                                        std::to_string(ctx.outer_gid) + " 1");
      err != 0) {
    Fail(ctx, err, "cannot write the gid map");
  }
}

int LastCapability() {
  int last = CAP_LAST_CAP;
  std::string text = ReadSmallFile("/proc/sys/kernel/cap_last_cap");
  int value = 0;
  if (std::from_chars(text.data(), text.data() + text.size(), value).ec == std::errc()) {
    last = value;
  }
  return last;
}

void DropPrivileges(const ChildContext& ctx) {
  const Confinement& c = *ctx.c;
  const int last = LastCapability();
  for (int cap = 0; cap <= last; ++cap) {
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) {
      Fail(ctx, errno, "cannot drop capability " + std::to_string(cap) + " from the bounding set");
    }
  }
  (void)prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  if (c.mode == Confinement::Mode::kRootNamespaces) {
    if (setgroups(0, nullptr) != 0) Fail(ctx, errno, "cannot clear supplementary groups");
    if (setresgid(c.gid, c.gid, c.gid) != 0) Fail(ctx, errno, "cannot set gid");
    if (setresuid(c.uid, c.uid, c.uid) != 0) Fail(ctx, errno, "cannot set uid");
  }
  // In a user namespace the creator keeps every capability in it until told otherwise.
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capset, &header, data) != 0) Fail(ctx, errno, "cannot clear capabilities");
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) Fail(ctx, errno, "cannot set no_new_privs");
  if (getuid() == 0 || geteuid() == 0) Fail(ctx, EPERM, "still uid 0 after dropping privileges");
}

// Closes every descriptor of this process but 0-2 and `keep`: the init is a fork of the
// supervisor and must not hold its files (the start pipe Launch waits on, the log, the signalfd).
void CloseAllBut(std::vector<int> keep) {
  std::sort(keep.begin(), keep.end());
  unsigned int from = 3;
  for (int fd : keep) {
    if (fd < 3) continue;
    if (static_cast<unsigned int>(fd) > from &&
        syscall(SYS_close_range, from, static_cast<unsigned int>(fd) - 1, 0) != 0) {
      for (unsigned int f = from; f < static_cast<unsigned int>(fd); ++f) close(static_cast<int>(f));
    }
    from = static_cast<unsigned int>(fd) + 1;
  }
  if (syscall(SYS_close_range, from, ~0U, 0) != 0) {
    const long max = sysconf(_SC_OPEN_MAX);
    for (long f = from; f < (max > 0 ? max : 1024); ++f) close(static_cast<int>(f));
  }
}

[[noreturn]] void ChildMain(const ChildContext& ctx) {
  CloseAllBut({ctx.report_fd, ctx.go_fd, ctx.stdin_fd, ctx.output_fd});
  // The supervisor's end of the attempt: when it dies, so does the namespace (and everything in
  // it), so no confined process ever runs unwatched.
  (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
  setpgid(0, 0);
  const Confinement& c = *ctx.c;
  const bool host = c.mode == Confinement::Mode::kHost;
  // A process writes its own id maps only while it is dumpable (the files of a non-dumpable
  // one belong to root); right after, it is made non-dumpable, so the command can neither trace
  // it nor read its memory or environment (a copy of the supervisor's) through /proc.
  if (c.mode == Confinement::Mode::kUserNamespace) WriteIdMaps(ctx);
  (void)prctl(PR_SET_DUMPABLE, 0);
  std::string working_directory = ctx.directory == nullptr ? "" : ctx.directory;
  if (!host) SetUpFileSystem(ctx, working_directory);
  if (!c.network && !host) LoopbackUp(ctx);
  ApplyRlimits(ctx);
  if (!host) DropPrivileges(ctx);
  if (chdir(working_directory.c_str()) != 0 && !ctx.probe) {
    Fail(ctx, errno, std::string("cannot change to working directory ") + ctx.directory);
  }
  // The supervisor moves this process into the attempt's cgroup while it sets up (a cgroup v1
  // migration waits for an RCU grace period, about a millisecond): the command is started only
  // once that is done, so it and everything it starts are counted from their first instruction.
  char go = 0;
  if (internal::ReadFull(ctx.go_fd, &go, 1) != 1 || go != 'g') _exit(127);
  close(ctx.go_fd);
  if (ctx.probe) {
    Report(ctx.report_fd, "X");
    _exit(0);
  }
  // posix_spawn (a vfork-like clone): no copy of this process's page tables for the command.
  // Its child keeps this process group, gets every signal at its default and an empty mask,
  // stdin and the output pipe, and this working directory; an exec failure is returned here.
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attributes;
  const int setup = internal::PrepareSpawn(&actions, &attributes, ctx.stdin_fd, ctx.output_fd,
                                           /*directory=*/-1, /*own_group=*/false);
  if (setup != 0) Fail(ctx, setup, "cannot set up the command's start");
  pid_t command = -1;
  const int spawned =
      posix_spawn(&command, ctx.executable, &actions, &attributes, ctx.argv, ctx.envp);
  if (spawned != 0) {
    Report(ctx.report_fd, "E " + std::to_string(spawned) + " cannot execute " + ctx.executable);
    _exit(127);
  }
  close(ctx.stdin_fd);
  close(ctx.output_fd);
  Report(ctx.report_fd, "X");
  // The init of the namespace: reaps every orphan; when the command ends, it ends, and the
  // kernel ends whatever the command left behind (how many is reported with the status).
  while (true) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, 0);
    if (pid == command) {
      Report(ctx.report_fd,
             "S " + std::to_string(status) + " " + std::to_string(LiveProcessesBesidesInit()));
      _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    }
    if (pid < 0 && errno != EINTR) _exit(127);
  }
}

}  // namespace

std::string_view ConfinementModeName(Confinement::Mode mode) {
  switch (mode) {
    case Confinement::Mode::kHost:
      return "host";
    case Confinement::Mode::kRootNamespaces:
      return "root-namespaces";
    case Confinement::Mode::kUserNamespace:
      return "user-namespace";
  }
  return "host";
}

std::optional<Confinement::Mode> ParseConfinementMode(std::string_view name) {
  for (auto mode : {Confinement::Mode::kHost, Confinement::Mode::kRootNamespaces,
                    Confinement::Mode::kUserNamespace}) {
    if (ConfinementModeName(mode) == name) return mode;
  }
  return std::nullopt;
}

std::string DescribeConfinement(const Confinement& c) {
  const std::string cgroup = c.cgroups.version == 0
                                 ? std::string("rlimit")
                                 : "cgroup v" + std::to_string(c.cgroups.version);
  std::string out;
  if (c.mode == Confinement::Mode::kHost) {
    out = "unconfined: as the daemon's user, no namespaces";
  } else {
    out = "uid " + std::to_string(c.uid) +
          (c.mode == Confinement::Mode::kUserNamespace ? " (user namespace)" : "") +
          ", namespaces mnt+pid+ipc" + (c.network ? "" : "+net (no network)") +
          ", host read-only, daemon files hidden, private /tmp, no_new_privs, no capabilities";
  }
  if (c.limits.memory_bytes) {
    out += ", memory " + Bytes(*c.limits.memory_bytes) + " (" +
           (c.cgroups.version ? cgroup : std::string("rlimit AS")) + ")";
  }
  if (c.limits.pids) {
    std::string how = "not enforced";
    if (c.cgroups.version != 0) {
      how = cgroup;
    } else if (c.mode == Confinement::Mode::kRootNamespaces) {
      how = "rlimit NPROC of the project's uid";
    } else if (c.mode == Confinement::Mode::kUserNamespace) {
      how = "rlimit NPROC in the user namespace";
    }
    out += ", pids " + std::to_string(*c.limits.pids) + " (" + how + ")";
  }
  if (c.limits.cpu_seconds) out += ", cpu " + std::to_string(*c.limits.cpu_seconds) + " s";
  if (c.limits.open_files) out += ", open files " + std::to_string(*c.limits.open_files);
  return out;
}

int IsolationReport::Rank() const {
  if (level == "full") return 2;
  if (level == "user-namespace") return 1;
  return 0;
}

std::string IsolationReport::Summary() const {
  std::string out = "command isolation: " + level;
  if (!reason.empty()) out += " (" + reason + ")";
  out += "; limits: " + limits;
  if (unconfined_tasks_allowed) {
    out += "; tasks may ask to run unconfined, as the daemon's user (--allow-unconfined-tasks)";
  }
  return out;
}

// ---- Project uids ----------------------------------------------------------------------------

Result<std::pair<uint32_t, uint32_t>> ParseUidRange(std::string_view text) {
  auto bad = [&] {
    return InvalidArgument("invalid_uid_range",
                           "uid range '" + std::string(text.substr(0, 64)) +
                               "' must be FIRST-LAST with 0 < FIRST <= LAST < 2147483647");
  };
  const size_t dash = text.find('-');
  if (dash == std::string_view::npos) return bad();
  uint64_t first = 0;
  uint64_t last = 0;
  auto a = std::from_chars(text.data(), text.data() + dash, first);
  auto b = std::from_chars(text.data() + dash + 1, text.data() + text.size(), last);
  if (a.ec != std::errc() || a.ptr != text.data() + dash || b.ec != std::errc() ||
      b.ptr != text.data() + text.size() || first == 0 || first > last || last >= 2147483647) {
    return bad();
  }
  return std::pair<uint32_t, uint32_t>(static_cast<uint32_t>(first), static_cast<uint32_t>(last));
}

Result<ProjectUids> ProjectUids::Open(std::string file, uint32_t first, uint32_t last) {
  if (first == 0 || first > last || last >= 2147483647) {
    return InvalidArgument("invalid_uid_range", "the command uid range must be within 1..2147483646");
  }
  return ProjectUids(std::move(file), first, last);
}

Result<uint32_t> ProjectUids::UidOf(const std::string& project_id) {
  constexpr char kPlain[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_";
  if (project_id.empty() || project_id.size() > 128 ||
      project_id.find_first_not_of(kPlain) != std::string::npos) {
    return InvalidArgument("invalid_project_id", "project id cannot name a command uid");
  }
  std::lock_guard<std::mutex> lock(*mu_);
  if (auto it = known_->find(project_id); it != known_->end()) return it->second;
  const int fd = open(file_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return Internal("uid_store_io", ErrnoText("cannot open " + file_, errno));
  if (flock(fd, LOCK_EX) != 0) {
    const int err = errno;
    close(fd);
    return Internal("uid_store_io", ErrnoText("cannot lock " + file_, err));
  }
  std::string text;
  char buffer[4096];
  ssize_t n;
  while ((n = read(fd, buffer, sizeof(buffer))) > 0) text.append(buffer, static_cast<size_t>(n));
  std::istringstream in(text);
  std::string id;
  uint64_t uid = 0;
  std::vector<uint32_t> used;
  while (in >> id >> uid) {
    if (id == project_id && uid >= first_ && uid <= last_) {
      close(fd);
      (*known_)[project_id] = static_cast<uint32_t>(uid);
      return static_cast<uint32_t>(uid);
    }
    used.push_back(static_cast<uint32_t>(uid));
  }
  std::sort(used.begin(), used.end());
  uint32_t candidate = first_;
  for (uint32_t u : used) {
    if (u == candidate) ++candidate;
    if (u > candidate) break;
  }
  if (candidate > last_ || candidate < first_) {
    close(fd);
    return Conflict("uid_range_exhausted", "every uid of " + std::to_string(first_) + "-" +
                                               std::to_string(last_) + " is assigned");
  }
  const std::string line = project_id + " " + std::to_string(candidate) + "\n";
  const bool ok = lseek(fd, 0, SEEK_END) >= 0 && internal::WriteAll(fd, line.data(), line.size()) &&
                  fsync(fd) == 0;
  const int err = errno;
  close(fd);
  if (!ok) return Internal("uid_store_io", ErrnoText("cannot write " + file_, err));
  (*known_)[project_id] = candidate;
  return candidate;
}

// ---- Cgroups ---------------------------------------------------------------------------------

namespace internal {

Result<AttemptCgroup> AttemptCgroup::Create(const CgroupPlan& plan, const std::string& name,
                                            const CommandLimits& limits) {
  AttemptCgroup g;
  g.version_ = plan.version;
  auto make = [&](const std::string& parent) -> Result<std::string> {
    const std::string dir = parent + "/" + name;
    if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
      return Internal("cgroup_setup_failed", ErrnoText("cannot create cgroup " + dir, errno));
    }
    g.dirs_.push_back(dir);
    return dir;
  };
  auto set = [&](const std::string& file, const std::string& value) -> Status {
    if (int err = WriteFileText(file, value); err != 0) {
      g.Remove();
      return Internal("cgroup_setup_failed", ErrnoText("cannot write " + value + " to " + file, err));
    }
    return Status::Ok();
  };
  if (plan.version == 2) {
    QL_ASSIGN_OR_RETURN(std::string dir, make(plan.unified));
    g.memory_dir_ = g.pids_dir_ = dir;
    if (limits.memory_bytes) {
      QL_RETURN_IF_ERROR(set(dir + "/memory.max", std::to_string(*limits.memory_bytes)));
      if (Exists(dir + "/memory.swap.max")) QL_RETURN_IF_ERROR(set(dir + "/memory.swap.max", "0"));
    }
    if (limits.pids) QL_RETURN_IF_ERROR(set(dir + "/pids.max", std::to_string(*limits.pids)));
  } else if (plan.version == 1) {
    if (!plan.memory.empty()) {
      QL_ASSIGN_OR_RETURN(g.memory_dir_, make(plan.memory));
      if (limits.memory_bytes) {
        const std::string value = std::to_string(*limits.memory_bytes);
        QL_RETURN_IF_ERROR(set(g.memory_dir_ + "/memory.limit_in_bytes", value));
        if (Exists(g.memory_dir_ + "/memory.memsw.limit_in_bytes")) {
          QL_RETURN_IF_ERROR(set(g.memory_dir_ + "/memory.memsw.limit_in_bytes", value));
        }
      }
    }
    if (!plan.pids.empty()) {
      QL_ASSIGN_OR_RETURN(g.pids_dir_, make(plan.pids));
      if (limits.pids) {
        QL_RETURN_IF_ERROR(set(g.pids_dir_ + "/pids.max", std::to_string(*limits.pids)));
      }
    }
  }
  return g;
}

Status AttemptCgroup::Attach(pid_t pid) const {
  for (const std::string& dir : dirs_) {
    if (int err = WriteFileText(dir + "/cgroup.procs", std::to_string(pid)); err != 0) {
      return Internal("cgroup_setup_failed", ErrnoText("cannot move the command into " + dir, err));
    }
  }
  return Status::Ok();
}

int64_t AttemptCgroup::OomKills() const {
  if (memory_dir_.empty()) return 0;
  if (version_ == 2) return KeyedCount(memory_dir_ + "/memory.events", "oom_kill");
  const int64_t kills = KeyedCount(memory_dir_ + "/memory.oom_control", "oom_kill");
  if (kills > 0) return kills;
  // Kernels before 4.13 do not count kills; an OOM still in progress is the best sign left.
  return KeyedCount(memory_dir_ + "/memory.oom_control", "under_oom") > 0 ? 1 : 0;
}

int64_t AttemptCgroup::PidsRefused() const {
  if (pids_dir_.empty()) return 0;
  return KeyedCount(pids_dir_ + "/pids.events", "max");
}

void AttemptCgroup::Remove() const {
  for (const std::string& dir : dirs_) {
    for (int i = 0; i < 2000; ++i) {
      if (rmdir(dir.c_str()) == 0 || errno == ENOENT) break;
      if (errno != EBUSY) break;
      usleep(1000);
    }
  }
}

void AttemptCgroup::RemoveSoon() const {
  bool busy = false;
  for (const std::string& dir : dirs_) {
    if (rmdir(dir.c_str()) != 0 && errno == EBUSY) busy = true;
  }
  if (!busy) return;
  const pid_t helper = fork();
  if (helper == 0) {
    Remove();
    _exit(0);
  }
  if (helper < 0) Remove();  // no process to hand it to: wait here
}

// ---- Starting a confined command -------------------------------------------------------------

std::string ReadReportLine(int fd) {
  std::string line;
  char c;
  while (true) {
    const ssize_t n = read(fd, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return line;
    if (c == '\n') return line.empty() ? std::string(" ") : line;
    line.push_back(c);
    if (line.size() > 4096) return line;
  }
}

namespace {

Result<ConfinedStart> Start(const Confinement& c, const std::string& executable, char* const argv[],
                            char* const envp[], const std::string& directory, int stdin_fd,
                            int output_fd, const AttemptCgroup* cgroup, bool probe) {
  if (c.mode == Confinement::Mode::kUserNamespace && geteuid() == 0) {
    // Its only mapped uid would be root's own (see ProbeIsolation).
    return Internal("confinement_failed", "a user-namespace confinement cannot start as root");
  }
  int report[2];
  int go[2];
  if (pipe2(report, O_CLOEXEC) != 0) {
    return Internal("exec_spawn_failed", ErrnoText("cannot create a pipe", errno));
  }
  if (pipe2(go, O_CLOEXEC) != 0) {
    const int err = errno;
    close(report[0]);
    close(report[1]);
    return Internal("exec_spawn_failed", ErrnoText("cannot create a pipe", err));
  }
  ChildContext ctx;
  ctx.c = &c;
  ctx.executable = executable.c_str();
  ctx.argv = argv;
  ctx.envp = envp;
  ctx.directory = directory.c_str();
  ctx.stdin_fd = stdin_fd;
  ctx.output_fd = output_fd;
  ctx.report_fd = report[1];
  ctx.go_fd = go[0];
  ctx.outer_uid = geteuid();
  ctx.outer_gid = getegid();
  ctx.probe = probe;

  // kHost (isolation off or impossible, limits only): a plain fork.
  unsigned long flags = 0;
  if (c.mode != Confinement::Mode::kHost) {
    flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS;
    if (c.mode == Confinement::Mode::kUserNamespace) flags |= CLONE_NEWUSER;
    if (!c.network) flags |= CLONE_NEWNET;
  }
  // A fork with namespaces: the child starts as PID 1 of its own PID namespace.
  const long pid = syscall(SYS_clone, flags | SIGCHLD, nullptr, nullptr, nullptr, nullptr);
  if (pid == 0) {
    close(report[0]);
    close(go[1]);
    ChildMain(ctx);
  }
  const int clone_err = errno;
  close(report[1]);
  close(go[0]);
  if (pid < 0) {
    close(report[0]);
    close(go[1]);
    return Internal("exec_spawn_failed", ErrnoText("cannot create the command's namespaces",
                                                   clone_err));
  }
  const pid_t child = static_cast<pid_t>(pid);
  setpgid(child, child);
  Status attached = cgroup != nullptr ? cgroup->Attach(child) : Status::Ok();
  if (!attached.ok()) {
    kill(child, SIGKILL);
    while (waitpid(child, nullptr, 0) < 0 && errno == EINTR) {
    }
    close(report[0]);
    close(go[1]);
    return attached;
  }
  const char g = 'g';
  (void)WriteAll(go[1], &g, 1);
  close(go[1]);
  return ConfinedStart{child, report[0]};
}

}  // namespace

Result<ConfinedStart> StartConfined(const Confinement& c, const std::string& executable,
                                    char* const argv[], char* const envp[],
                                    const std::string& directory, int stdin_fd, int output_fd,
                                    const AttemptCgroup* cgroup) {
  return Start(c, executable, argv, envp, directory, stdin_fd, output_fd, cgroup, false);
}

}  // namespace internal

// ---- Probe -----------------------------------------------------------------------------------

namespace {

// Runs the set-up of `c` without a command, from a forked child (the daemon may have threads by
// now; a raw clone is only safe from a single-threaded process). Returns "" when it worked, else
// why not.
std::string TrySetUp(const Confinement& c) {
  int answer[2];
  if (pipe2(answer, O_CLOEXEC) != 0) return ErrnoText("cannot create a pipe", errno);
  const pid_t helper = fork();
  if (helper < 0) {
    const int err = errno;
    close(answer[0]);
    close(answer[1]);
    return ErrnoText("cannot fork", err);
  }
  if (helper == 0) {
    close(answer[0]);
    std::string why;
    Result<internal::ConfinedStart> s =
        internal::Start(c, "", nullptr, nullptr, "/", -1, -1, nullptr, true);
    if (!s.ok()) {
      why = s.status().message();
    } else {
      const std::string line = internal::ReadReportLine(s->report_fd);
      int status = 0;
      while (waitpid(s->pid, &status, 0) < 0 && errno == EINTR) {
      }
      if (line.rfind("E ", 0) == 0) {
        const size_t space = line.find(' ', 2);
        const int err = std::atoi(line.substr(2, space - 2).c_str());
        why = (space == std::string::npos ? line : line.substr(space + 1)) + ": " +
              std::strerror(err);
      } else if (line != "X") {
        why = "the set-up child ended without a report";
      }
    }
    (void)internal::WriteAll(answer[1], why.data(), why.size());
    _exit(0);
  }
  close(answer[1]);
  std::string why;
  char buffer[512];
  ssize_t n;
  while ((n = read(answer[0], buffer, sizeof(buffer))) != 0) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    why.append(buffer, static_cast<size_t>(n));
  }
  close(answer[0]);
  int status = 0;
  while (waitpid(helper, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return "the probe process failed";
  return why;
}

// Prepares the parent cgroup(s) as root; returns the plan or why none.
CgroupPlan PlanCgroups(const IsolationOptions& options, std::string& why) {
  CgroupPlan plan;
  if (geteuid() != 0) {
    why = "cgroups need the daemon to run as root";
    return plan;
  }
  const std::string root = "/sys/fs/cgroup";
  auto probe_plan = [&](CgroupPlan candidate) -> bool {
    Result<internal::AttemptCgroup> g = internal::AttemptCgroup::Create(
        candidate, "probe-" + std::to_string(getpid()), CommandLimits{1 << 30, 4096, {}, {}});
    if (!g.ok()) {
      why = g.status().message();
      return false;
    }
    g->Remove();
    return true;
  };
  // The unified hierarchy, when it has the controllers (a cgroup v2 host).
  for (const std::string& unified : {root, root + "/unified"}) {
    const std::string controllers = ReadSmallFile(unified + "/cgroup.controllers");
    if (controllers.find("memory") == std::string::npos ||
        controllers.find("pids") == std::string::npos) {
      continue;
    }
    const std::string parent = unified + "/" + options.cgroup_name;
    (void)WriteFileText(unified + "/cgroup.subtree_control", "+memory +pids");
    if (mkdir(parent.c_str(), 0755) != 0 && errno != EEXIST) {
      why = ErrnoText("cannot create " + parent, errno);
      continue;
    }
    if (int err = WriteFileText(parent + "/cgroup.subtree_control", "+memory +pids"); err != 0) {
      why = ErrnoText("cannot enable memory and pids in " + parent, err);
      continue;
    }
    CgroupPlan candidate;
    candidate.version = 2;
    candidate.unified = parent;
    if (probe_plan(candidate)) return candidate;
  }
  // v1 hierarchies (still what some hosts mount).
  if (Exists(root + "/memory/memory.limit_in_bytes") && Exists(root + "/pids/cgroup.procs")) {
    CgroupPlan candidate;
    candidate.version = 1;
    candidate.memory = root + "/memory/" + options.cgroup_name;
    candidate.pids = root + "/pids/" + options.cgroup_name;
    bool made = true;
    for (const std::string& dir : {candidate.memory, candidate.pids}) {
      if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
        why = ErrnoText("cannot create " + dir, errno);
        made = false;
      }
    }
    if (made && probe_plan(candidate)) return candidate;
  } else if (why.empty()) {
    why = "no cgroup hierarchy with the memory and pids controllers";
  }
  return plan;
}

}  // namespace

IsolationReport ProbeIsolation(const IsolationOptions& options) {
  IsolationReport report;
  if (!options.enabled) {
    report.level = "off";
    report.mode = Confinement::Mode::kHost;
    report.reason = "turned off by the installation (--isolation off): commands run as the "
                    "daemon's user and see its files";
    report.limits = "rlimits";
    return report;
  }
  std::string cgroup_why;
  report.cgroups = PlanCgroups(options, cgroup_why);
  report.limits = report.cgroups.version == 0
                      ? "rlimits (" + cgroup_why + ")"
                      : "cgroup v" + std::to_string(report.cgroups.version);

  Confinement trial;
  trial.uid = 65534;
  trial.gid = 65534;
  if (geteuid() == 0) {
    trial.mode = Confinement::Mode::kRootNamespaces;
    const std::string why = TrySetUp(trial);
    if (why.empty()) {
      report.level = "full";
      report.mode = trial.mode;
      return report;
    }
    // A user namespace made by root maps its uid onto root's own: the command would own every
    // root file of the host. Root confines with namespaces of its own or not at all.
    report.level = "rlimits";
    report.mode = Confinement::Mode::kHost;
    report.reason = "as root: " + why + " — commands run as root and can read the daemon's files";
    return report;
  }
  trial.mode = Confinement::Mode::kUserNamespace;
  trial.uid = 1000;
  trial.gid = 1000;
  std::string userns_why = TrySetUp(trial);
  if (userns_why.empty()) {
    report.level = "user-namespace";
    report.mode = trial.mode;
    report.reason = "the daemon is not root: one uid, mapped in a user namespace";
    return report;
  }
  report.level = "rlimits";
  report.mode = Confinement::Mode::kHost;
  report.reason = "user namespace: " + userns_why +
                  " — commands run as the daemon's user and can read its files";
  return report;
}

}  // namespace ql::exec
