// The supervisor process: runs one attempt's command and records its outcome (see executor.h).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <set>

#include "ql/core/clock.h"
#include "ql/exec/attempt_files.h"
#include "ql/exec/confinement.h"
#include "ql/exec/executor.h"
#include "ql/exec/head_tail_log.h"
#include "ql/exec/log_masker.h"
#include "ql/exec/posix_util.h"
#include "ql/exec/process_tree.h"

namespace ql::exec {
namespace {

using internal::ErrnoMessage;
using internal::PathIn;

constexpr size_t kReadBufferBytes = 64 * 1024;
// Reads per wake-up before timers and signals are looked at again, so a command that writes
// without pause cannot starve its own timeout.
constexpr int kMaxReadsPerWakeup = 16;
// After the group got SIGKILL, how long output is still drained: only a process that left the
// group can still hold the pipe then, and it must not keep the attempt open.
constexpr int64_t kDrainAfterKillMs = 1000;
constexpr size_t kMaxSpecBytes = 1024 * 1024;
// How long the supervisor keeps killing what is left of the attempt before it writes the result
// anyway (a process in uninterruptible sleep dies only when its I/O returns).
constexpr int64_t kEndDescendantsMs = 2000;
constexpr int64_t kEndDescendantsPauseMs = 5;
constexpr int64_t kNever = INT64_MAX;

// Static so the supervisor's stack stays small; one supervisor runs one command.
char g_read_buffer[kReadBufferBytes];

// Returns the full path of `name` searched in `path_value` (a PATH string), or "" if none is an
// executable regular file. Names containing '/' are returned unchanged.
std::string FindExecutable(const std::string& name, const std::string& path_value) {
  if (name.find('/') != std::string::npos) return name;
  size_t begin = 0;
  while (begin <= path_value.size()) {
    size_t end = path_value.find(':', begin);
    if (end == std::string::npos) end = path_value.size();
    std::string dir = path_value.substr(begin, end - begin);
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    struct stat st;
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
    begin = end + 1;
  }
  return "";
}

class Supervisor {
 public:
  explicit Supervisor(std::string attempt_dir)
      : dir_(std::move(attempt_dir)), clock_(SystemClock()) {}

  int Run();

 private:
  enum class StopReason { kNone, kTimeout, kCancel };

  // Takes over the start pipe Launch waits on (see internal::kReadyFd), if started by Launch.
  void TakeReadyFd();
  // Reads the attempt's secrets from stdin when Launch passed them (see
  // internal::kSecretsOnStdinVariable), then points stdin at /dev/null.
  void TakeSecrets();
  // Closes the start pipe: Launch returns and finds supervisor.json or result.json written.
  void SignalReady();
  // Starts the command; on failure fills outcome_ as kSpawnFailed and returns false.
  bool Spawn();
  void Supervise();
  // Signals the command's process group and every other process descended from the supervisor:
  // those that left the group (setpgid) or the session (setsid), and those orphaned by their
  // parent, which the kernel hands to the supervisor because it is their subreaper.
  void SignalAttempt(int sig);
  // SIGKILLs every descendant until none is left alive (bounded by kEndDescendantsMs), reaping
  // the orphans among them, so no process of the attempt outlives its result.
  void EndDescendants();
  // Sends SIGTERM to the group (once) and arms the SIGKILL that follows after the grace.
  void BeginStop(int64_t now);
  void HandleSignals(int64_t now);
  void CheckLeaderExit();
  void DrainOutput();
  // Masks freshly read output and keeps what is final; FlushOutput() keeps the rest at the end
  // and writes the log's tail.
  void MaskAndKeep(const char* data, size_t size);
  void FlushOutput();
  // Hands masked output to the head+tail log; records the truncation the moment it begins.
  void KeepOutput(const char* data, size_t size);
  void LogWriteFailed();
  void FinishOutcome();
  void SpawnFailed(std::string message) {
    outcome_.kind = OutcomeKind::kSpawnFailed;
    outcome_.message = std::move(message);
    outcome_.started_at_ms = outcome_.finished_at_ms = clock_.NowMs();
  }
  bool WriteSupervisorRecord();
  bool WriteResult();
  // Starts the command through StartConfined (namespaces, identity, limits); returns 0, or
  // fills outcome_ as kSpawnFailed and returns -1.
  int SpawnConfined(const std::string& executable, char* const argv[], char* const envp[],
                    int devnull, int output_write);
  // Once the confining child exited: the command's own status from its report, and which limit
  // (if any) ended it.
  void ReadConfinedEnd();
  void ClassifyLimit();

  std::string dir_;
  Clock& clock_;
  LaunchSpec spec_;
  internal::AttemptSecrets secrets_;
  std::string secrets_error_;  // set when secrets were passed but could not be read
  LogMasker masker_;
  std::string masked_;  // scratch for masked output
  ProcessIdentity self_;
  std::string boot_id_;
  int64_t started_at_ms_ = 0;

  int ready_fd_ = -1;
  int log_fd_ = -1;
  std::optional<internal::HeadTailLog> log_;  // set once log_fd_ is open
  int output_fd_ = -1;  // read end of the command's stdout+stderr pipe; -1 after EOF
  int signal_fd_ = -1;
  pid_t command_pid_ = -1;  // also the command's process group id
  // Set when the command runs under a confining child (StartConfined): its report pipe, which
  // carries the command's own wait status, and the attempt's cgroup.
  int report_fd_ = -1;
  std::optional<internal::AttemptCgroup> cgroup_;
  std::optional<ProcessIdentity> command_;

  StopReason stop_reason_ = StopReason::kNone;
  bool leader_exited_ = false;
  bool term_sent_ = false;
  bool kill_sent_ = false;
  int64_t kill_at_ = kNever;      // monotonic ms
  int64_t drain_until_ = kNever;  // monotonic ms
  bool log_failed_ = false;
  Outcome outcome_;
};

int Supervisor::Run() {
  // Cancel (SIGTERM, SIGINT) and child signals are read from a signalfd; Launch already blocked the
  // cancel signals so one sent during start-up is still pending here.
  sigset_t handled;
  sigemptyset(&handled);
  for (int sig : {SIGTERM, SIGINT, SIGCHLD}) sigaddset(&handled, sig);
  sigprocmask(SIG_BLOCK, &handled, nullptr);
  signal(SIGPIPE, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  setsid();  // already a session leader when started by Launch; needed when run by hand
  // Orphaned descendants (a daemon's double fork, a parent that exits before its setsid child)
  // become the supervisor's children instead of PID 1's, so they stay in reach. Without it
  // (not Linux 3.4+) only processes whose parents are alive can be found.
  (void)prctl(PR_SET_CHILD_SUBREAPER, 1);
  // Every path used from here on is absolute, and the supervisor must not pin the directory (or
  // mount) it was started from.
  if (!dir_.empty() && dir_.front() != '/') {
    std::error_code ec;
    std::string absolute = std::filesystem::absolute(dir_, ec).string();
    if (!ec) dir_ = absolute;
  }
  [[maybe_unused]] int ignored = chdir("/");  // a failure only keeps that directory busy

  TakeReadyFd();
  TakeSecrets();
  self_ = ReadProcessIdentity(getpid()).value_or(ProcessIdentity{getpid(), 0});
  boot_id_ = ReadBootId();
  started_at_ms_ = clock_.NowMs();
  if (!WriteSupervisorRecord()) return 1;  // Launch sees it exit without a record

  signal_fd_ = signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK);
  if (signal_fd_ < 0) {
    SpawnFailed(ErrnoMessage("supervisor: cannot create a signalfd", errno));
  } else if (Spawn()) {
    WriteSupervisorRecord();  // best effort: without it the command is only known by the result
    SignalReady();
    Supervise();
    FlushOutput();
    EndDescendants();
    int status = 0;
    while (waitpid(command_pid_, &status, 0) < 0 && errno == EINTR) {
    }
    ReadConfinedEnd();
    FinishOutcome();
    ClassifyLimit();
  }
  bool written = WriteResult();
  SignalReady();
  // After the result: the processes of the namespace may take a moment to leave the cgroup, and
  // the attempt's end must not wait for that.
  if (cgroup_) cgroup_->RemoveSoon();
  return written ? 0 : 1;
}

void Supervisor::TakeReadyFd() {
  const char* value = getenv(internal::kReadyFdVariable.data());
  if (value == nullptr) return;
  std::string expected = std::to_string(internal::kReadyFd);
  bool ours = expected == value && fcntl(internal::kReadyFd, F_GETFD) >= 0;
  unsetenv(internal::kReadyFdVariable.data());
  if (!ours) return;
  ready_fd_ = internal::kReadyFd;
  fcntl(ready_fd_, F_SETFD, FD_CLOEXEC);  // the command must not hold Launch's pipe open
}

void Supervisor::TakeSecrets() {
  const char* value = getenv(internal::kSecretsOnStdinVariable.data());
  const bool passed = value != nullptr && std::string_view(value) == "1";
  unsetenv(internal::kSecretsOnStdinVariable.data());
  if (!passed) return;
  std::string payload;
  char buffer[4096];
  while (true) {
    ssize_t n = read(0, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      secrets_error_ = ErrnoMessage("supervisor: cannot read the attempt's secrets", errno);
    }
    if (n <= 0) break;
    payload.append(buffer, static_cast<size_t>(n));
    if (payload.size() > internal::kMaxSecretsBytes) {
      secrets_error_ = "supervisor: the attempt's secrets exceed " +
                       std::to_string(internal::kMaxSecretsBytes) + " bytes";
      break;
    }
  }
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull >= 0) {
    dup2(devnull, 0);
    close(devnull);
  }
  if (secrets_error_.empty()) {
    Result<internal::AttemptSecrets> secrets = internal::DecodeSecrets(payload);
    if (secrets.ok()) {
      secrets_ = std::move(secrets).value();
    } else {
      secrets_error_ = "supervisor: " + secrets.status().message();
    }
  }
  explicit_bzero(payload.data(), payload.size());
  explicit_bzero(buffer, sizeof(buffer));
  // The values stay in memory for the life of the command: the masker needs them.
  std::vector<std::string> mask = secrets_.mask_values;
  for (const auto& [name, value] : secrets_.environment) mask.push_back(value);
  masker_ = LogMasker(std::move(mask));
}

void Supervisor::SignalReady() {
  if (ready_fd_ < 0) return;
  close(ready_fd_);
  ready_fd_ = -1;
}

bool Supervisor::Spawn() {
  Result<std::optional<std::string>> text =
      internal::ReadFileIfExists(PathIn(dir_, internal::kSpecFile), kMaxSpecBytes);
  if (!text.ok() || !text->has_value()) {
    SpawnFailed("supervisor: cannot read spec.json: " +
                (text.ok() ? std::string("it does not exist") : text.status().message()));
    return false;
  }
  Result<LaunchSpec> spec = internal::DecodeSpec(**text, internal::kSpecFile);
  if (!spec.ok()) {
    SpawnFailed("supervisor: " + spec.status().message());
    return false;
  }
  spec_ = std::move(spec).value();
  // A command must never run without the secrets it was given, or with its log unmasked.
  if (!secrets_error_.empty()) {
    SpawnFailed(secrets_error_);
    return false;
  }
  if (spec_.argv.empty() || !spec_.working_directory) {
    SpawnFailed("supervisor: spec.json has no argv or working directory");
    return false;
  }

  log_fd_ = open(spec_.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (log_fd_ < 0) {
    SpawnFailed(ErrnoMessage("cannot open log file " + spec_.log_path, errno));
    return false;
  }
  log_.emplace(log_fd_, spec_.log_cap_bytes);

  std::string path_value;
  std::vector<std::string> env_strings;
  env_strings.reserve(spec_.environment.size());
  for (const auto& [name, value] : spec_.environment) {
    if (name == "PATH") path_value = value;
    env_strings.push_back(name + "=" + value);
  }
  for (const auto& [name, value] : secrets_.environment) env_strings.push_back(name + "=" + value);
  std::string executable = FindExecutable(spec_.argv[0], path_value);
  if (executable.empty()) {
    SpawnFailed("cannot execute " + spec_.argv[0] + ": not found in PATH " + path_value);
    return false;
  }
  std::vector<char*> argv;
  for (std::string& a : spec_.argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  // The command is started with posix_spawn (a vfork-like clone: this process's memory is not
  // copied, which a fork would do for every attempt). Its child joins a new process group, gets
  // the default disposition and an empty mask for every signal, /dev/null as stdin, the output
  // pipe as stdout and stderr, and the working directory opened here.
  const std::string& working_directory = *spec_.working_directory;
  const int directory = open(working_directory.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (directory < 0) {
    SpawnFailed(ErrnoMessage("cannot change to working directory " + working_directory, errno));
    return false;
  }
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  int output[2] = {-1, -1};
  if (devnull < 0 || pipe2(output, O_CLOEXEC) != 0) {
    const int err = errno;
    close(directory);
    if (devnull >= 0) close(devnull);
    SpawnFailed(ErrnoMessage("supervisor: cannot set up the command's descriptors", err));
    return false;
  }
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attributes;
  const int setup = internal::PrepareSpawn(&actions, &attributes, devnull, output[1], directory,
                                           /*own_group=*/true);

  outcome_.started_at_ms = clock_.NowMs();
  const Confinement& confinement = spec_.confinement;
  if (confinement != Confinement{}) {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
    close(directory);
    const int started =
        SpawnConfined(executable, argv.data(), envp.data(), devnull, output[1]);
    for (std::string& e : env_strings) explicit_bzero(e.data(), e.size());
    for (auto& [name, value] : secrets_.environment) explicit_bzero(value.data(), value.size());
    close(devnull);
    close(output[1]);
    if (started != 0) {
      close(output[0]);
      return false;
    }
    output_fd_ = output[0];
    fcntl(output_fd_, F_SETFL, fcntl(output_fd_, F_GETFL) | O_NONBLOCK);
    command_ = ReadProcessIdentity(command_pid_);
    if (!command_) command_ = ProcessIdentity{command_pid_, 0};
    outcome_.confinement = DescribeConfinement(confinement);
    return true;
  }
  pid_t pid = -1;
  const int spawned =
      setup != 0 ? setup
                 : posix_spawn(&pid, executable.c_str(), &actions, &attributes, argv.data(),
                               envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  // The command has its own copy of its environment now; this process keeps none of the secrets
  // it does not need for masking.
  for (std::string& e : env_strings) explicit_bzero(e.data(), e.size());
  for (auto& [name, value] : secrets_.environment) explicit_bzero(value.data(), value.size());
  close(devnull);
  close(output[1]);
  if (spawned != 0) {
    close(output[0]);
    // The child's change of directory and its exec report failures alike; a directory this
    // process cannot enter either is named as the cause.
    const bool enterable = faccessat(directory, "", X_OK, AT_EMPTY_PATH | AT_EACCESS) == 0;
    close(directory);
    SpawnFailed(setup != 0 ? ErrnoMessage("supervisor: cannot set up the command's start", setup)
                : !enterable
                    ? ErrnoMessage("cannot change to working directory " + working_directory,
                                   spawned)
                    : ErrnoMessage("cannot execute " + executable, spawned));
    return false;
  }
  close(directory);
  command_pid_ = pid;  // also the process group id: the child joined its own group before exec

  output_fd_ = output[0];
  fcntl(output_fd_, F_SETFL, fcntl(output_fd_, F_GETFL) | O_NONBLOCK);
  command_ = ReadProcessIdentity(pid);
  if (!command_) command_ = ProcessIdentity{pid, 0};
  return true;
}

int Supervisor::SpawnConfined(const std::string& executable, char* const argv[],
                              char* const envp[], int devnull, int output_write) {
  const Confinement& c = spec_.confinement;
  if (c.cgroups.version != 0) {
    const std::string name = std::filesystem::path(dir_).filename().string();
    Result<internal::AttemptCgroup> cgroup = internal::AttemptCgroup::Create(c.cgroups, name, c.limits);
    if (!cgroup.ok()) {
      SpawnFailed(cgroup.status().message());
      outcome_.error_code = "cgroup_setup_failed";
      return -1;
    }
    cgroup_ = std::move(cgroup).value();
  }
  Result<internal::ConfinedStart> started =
      internal::StartConfined(c, executable, argv, envp, *spec_.working_directory, devnull,
                              output_write, cgroup_ ? &*cgroup_ : nullptr);
  if (!started.ok()) {
    if (cgroup_) cgroup_->Remove();
    SpawnFailed(started.status().message());
    // Only the confinement's own codes: the worker protocol carries no other on a spawn failure.
    outcome_.error_code = started.status().reason() == "cgroup_setup_failed"
                              ? "cgroup_setup_failed"
                              : "confinement_failed";
    return -1;
  }
  // The child answers once the command runs ("X") or could not be started ("E errno what").
  const std::string line = internal::ReadReportLine(started->report_fd);
  if (line == "X") {
    command_pid_ = started->pid;
    report_fd_ = started->report_fd;
    return 0;
  }
  close(started->report_fd);
  while (waitpid(started->pid, nullptr, 0) < 0 && errno == EINTR) {
  }
  if (cgroup_) cgroup_->Remove();
  if (line.rfind("E ", 0) == 0) {
    const size_t space = line.find(' ', 2);
    const int err = std::atoi(line.substr(2, space - 2).c_str());
    const std::string what = space == std::string::npos ? line : line.substr(space + 1);
    SpawnFailed(ErrnoMessage(what, err));
    // Failures of the command itself read as before; the rest are the confinement's own.
    if (what.rfind("cannot execute ", 0) != 0 &&
        what.rfind("cannot change to working directory ", 0) != 0) {
      outcome_.error_code = "confinement_failed";
    }
  } else {
    SpawnFailed("the confining child ended before the command started");
    outcome_.error_code = "confinement_failed";
  }
  return -1;
}

void Supervisor::ReadConfinedEnd() {
  if (report_fd_ < 0) return;
  // The child wrote the command's status just before it exited; nothing else holds the pipe.
  pollfd fd{report_fd_, POLLIN, 0};
  while (poll(&fd, 1, 200) > 0) {
    const std::string line = internal::ReadReportLine(report_fd_);
    if (line.empty()) break;
    if (line.rfind("S ", 0) != 0) continue;
    // "S <status> <processes left>": the namespace's init ended what the command left behind.
    const int status = std::atoi(line.c_str() + 2);
    if (const size_t space = line.find(' ', 2); space != std::string::npos) {
      outcome_.descendants_ended += std::max(0, std::atoi(line.c_str() + space + 1));
    }
    if (WIFEXITED(status)) {
      outcome_.exit_code = WEXITSTATUS(status);
      outcome_.signal.reset();
    } else if (WIFSIGNALED(status)) {
      outcome_.signal = WTERMSIG(status);
      outcome_.exit_code.reset();
    }
    break;
  }
  close(report_fd_);
  report_fd_ = -1;
}

void Supervisor::ClassifyLimit() {
  const bool failed = (outcome_.exit_code && *outcome_.exit_code != 0) || outcome_.signal;
  if (!failed || stop_reason_ != StopReason::kNone) return;
  const CommandLimits& limits = spec_.confinement.limits;
  if (cgroup_ && cgroup_->OomKills() > 0) {
    outcome_.error_code = "memory_limit_exceeded";
    outcome_.message = "memory limit of " + std::to_string(limits.memory_bytes.value_or(0)) +
                       " bytes exceeded; " + outcome_.message;
  } else if (cgroup_ && cgroup_->PidsRefused() > 0) {
    outcome_.error_code = "pids_limit_exceeded";
    outcome_.message = "process limit of " + std::to_string(limits.pids.value_or(0)) +
                       " reached (a fork was refused); " + outcome_.message;
  } else if (limits.cpu_seconds && outcome_.signal &&
             (*outcome_.signal == SIGXCPU || *outcome_.signal == SIGKILL)) {
    outcome_.error_code = "cpu_limit_exceeded";
    outcome_.message = "CPU time limit of " + std::to_string(*limits.cpu_seconds) +
                       " s exceeded; " + outcome_.message;
  }
}

void Supervisor::SignalAttempt(int sig) {
  kill(-command_pid_, sig);
  internal::SignalDescendants(internal::Descendants(getpid()), getpid(), sig,
                              /*skip_group=*/command_pid_);
}

void Supervisor::EndDescendants() {
  const int64_t until = clock_.MonotonicMs() + kEndDescendantsMs;
  std::set<pid_t> ended;
  while (true) {
    internal::ReapChildrenExcept(command_pid_);
    std::vector<internal::Descendant> left = internal::Descendants(getpid());
    std::erase_if(left, [](const internal::Descendant& d) { return d.state == 'Z'; });
    for (const internal::Descendant& d : left) ended.insert(d.pid);
    outcome_.descendants_ended = static_cast<int64_t>(ended.size());
    if (left.empty() || clock_.MonotonicMs() >= until) return;
    internal::SignalDescendants(left, getpid(), SIGKILL, /*skip_group=*/0);
    usleep(kEndDescendantsPauseMs * 1000);
  }
}

void Supervisor::BeginStop(int64_t now) {
  if (term_sent_) return;
  SignalAttempt(SIGTERM);
  term_sent_ = true;
  kill_at_ = now + spec_.kill_grace_ms;
}

void Supervisor::HandleSignals(int64_t now) {
  signalfd_siginfo info;
  while (read(signal_fd_, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
    if (info.ssi_signo == SIGCHLD) {
      // CheckLeaderExit looks at the command every turn; other children are orphans handed over
      // by the kernel, reaped here so their zombies do not pile up.
      internal::ReapChildrenExcept(command_pid_);
      continue;
    }
    // A cancel only counts while the command runs and nothing else is stopping it.
    if (!leader_exited_ && stop_reason_ == StopReason::kNone) {
      stop_reason_ = StopReason::kCancel;
      BeginStop(now);
    }
  }
}

void Supervisor::CheckLeaderExit() {
  if (leader_exited_) return;
  // WNOWAIT leaves the leader a zombie until the end, which keeps its pid, and so the group id,
  // from being reused while the rest of the group is still signalled.
  siginfo_t info = {};
  if (waitid(P_PID, command_pid_, &info, WEXITED | WNOHANG | WNOWAIT) != 0) return;
  if (info.si_pid != command_pid_) return;
  leader_exited_ = true;
  outcome_.finished_at_ms = clock_.NowMs();
  if (info.si_code == CLD_EXITED) {
    outcome_.exit_code = info.si_status;
  } else {
    outcome_.signal = info.si_status;
  }
}

void Supervisor::LogWriteFailed() {
  if (log_failed_) return;
  log_failed_ = true;
  outcome_.message = ErrnoMessage("log write failed", errno);
}

void Supervisor::MaskAndKeep(const char* data, size_t size) {
  outcome_.output_bytes += static_cast<int64_t>(size);
  if (!masker_.active()) {
    KeepOutput(data, size);
    return;
  }
  masked_.clear();
  masker_.Write(std::string_view(data, size), masked_);
  KeepOutput(masked_.data(), masked_.size());
}

void Supervisor::FlushOutput() {
  masked_.clear();
  masker_.Finish(masked_);
  KeepOutput(masked_.data(), masked_.size());
  if (!log_) return;
  if (!log_->Finish()) LogWriteFailed();
  outcome_.log_bytes_written = log_->kept_bytes();
  outcome_.log_bytes_dropped = log_->dropped_bytes();
}

void Supervisor::KeepOutput(const char* data, size_t size) {
  if (!log_ || size == 0) return;
  const bool was_truncated = log_->truncated();
  if (!log_->Append(std::string_view(data, size))) LogWriteFailed();
  outcome_.log_bytes_written = log_->kept_bytes();
  if (was_truncated || !log_->truncated()) return;
  outcome_.log_truncated = true;
  outcome_.truncated_at_bytes = spec_.log_cap_bytes;
  // Lets the daemon record the truncation while the command still runs. If this write fails the
  // result still carries the truncation; the daemon only learns it later.
  (void)internal::WriteFileAtomically(PathIn(dir_, internal::kTruncatedFile),
                                      std::to_string(spec_.log_cap_bytes) + "\n",
                                      internal::Durability::kAtomic);
}

void Supervisor::DrainOutput() {
  for (int i = 0; i < kMaxReadsPerWakeup && output_fd_ >= 0; ++i) {
    ssize_t n = read(output_fd_, g_read_buffer, sizeof(g_read_buffer));
    if (n > 0) {
      MaskAndKeep(g_read_buffer, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    close(output_fd_);  // EOF, or an error that no retry will fix
    output_fd_ = -1;
  }
}

// Runs until the command (the group leader) has exited and the rest of its group is gone. An
// attempt owns its process group: whatever is left in it when the leader exits gets SIGTERM,
// and SIGKILL once the output pipe closes or the kill grace ends.
void Supervisor::Supervise() {
  const int64_t start = clock_.MonotonicMs();
  const int64_t deadline = start + spec_.timeout_ms;
  while (true) {
    CheckLeaderExit();
    int64_t now = clock_.MonotonicMs();
    if (leader_exited_) BeginStop(now);
    if (!leader_exited_ && stop_reason_ == StopReason::kNone && now >= deadline) {
      stop_reason_ = StopReason::kTimeout;
      BeginStop(now);
    }
    if (!kill_sent_ && now >= kill_at_) {
      SignalAttempt(SIGKILL);
      kill_sent_ = true;
    }
    if (leader_exited_) {
      if (output_fd_ < 0) {
        if (!kill_sent_) SignalAttempt(SIGKILL);
        return;
      }
      if (kill_sent_ && drain_until_ == kNever) drain_until_ = now + kDrainAfterKillMs;
      if (now >= drain_until_) return;
    }

    int64_t wake = kNever;
    if (!leader_exited_ && stop_reason_ == StopReason::kNone) wake = deadline;
    if (!kill_sent_) wake = std::min(wake, kill_at_);
    wake = std::min(wake, drain_until_);
    int timeout = wake == kNever ? -1 : static_cast<int>(std::clamp<int64_t>(wake - now, 0, 60000));
    pollfd fds[2] = {{signal_fd_, POLLIN, 0}, {output_fd_, POLLIN, 0}};
    int ready = poll(fds, output_fd_ >= 0 ? 2 : 1, timeout);
    if (ready <= 0) continue;
    if (fds[0].revents != 0) HandleSignals(clock_.MonotonicMs());
    if (output_fd_ >= 0 && fds[1].revents != 0) DrainOutput();
  }
}

void Supervisor::FinishOutcome() {
  std::string detail;
  if (outcome_.exit_code) {
    detail = "exited with code " + std::to_string(*outcome_.exit_code);
  } else if (outcome_.signal) {
    const char* name = sigdescr_np(*outcome_.signal);
    detail = "ended by signal " + std::to_string(*outcome_.signal) +
             (name ? " (" + std::string(name) + ")" : "");
  }
  switch (stop_reason_) {
    case StopReason::kTimeout:
      outcome_.kind = OutcomeKind::kTimedOut;
      detail = "timed out after " + std::to_string(spec_.timeout_ms) + " ms; " + detail;
      break;
    case StopReason::kCancel:
      outcome_.kind = OutcomeKind::kCancelled;
      detail = "cancelled; " + detail;
      break;
    case StopReason::kNone:
      outcome_.kind = outcome_.exit_code ? OutcomeKind::kExited : OutcomeKind::kSignaled;
      break;
  }
  // A log write failure was recorded first and matters more than the summary.
  outcome_.message = outcome_.message.empty() ? detail : outcome_.message + "; " + detail;
}

bool Supervisor::WriteSupervisorRecord() {
  internal::SupervisorRecord record{self_, boot_id_, command_, started_at_ms_};
  return internal::WriteFileAtomically(PathIn(dir_, internal::kSupervisorFile),
                                       internal::EncodeSupervisor(record),
                                       internal::Durability::kAtomic)
      .ok();
}

bool Supervisor::WriteResult() {
  internal::ResultRecord record{outcome_, self_, boot_id_};
  return internal::WriteFileAtomically(PathIn(dir_, internal::kResultFile),
                                       internal::EncodeResult(record),
                                       spec_.fsync_result ? internal::Durability::kPowerLossSafe
                                                          : internal::Durability::kAtomic)
      .ok();
}

}  // namespace

int SupervisorMain(const std::string& attempt_dir) {
  Supervisor supervisor(attempt_dir);
  return supervisor.Run();
}

}  // namespace ql::exec
