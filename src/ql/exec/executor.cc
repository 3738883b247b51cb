#include "ql/exec/executor.h"

#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <string_view>

#include "ql/exec/attempt_files.h"
#include "ql/exec/launcher.h"
#include "ql/exec/posix_util.h"

namespace ql::exec {
namespace {

using internal::ErrnoMessage;
using internal::PathIn;

constexpr char kDefaultPath[] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
constexpr size_t kMaxRecordBytes = 64 * 1024;

Status BadSpec(std::string message) { return InvalidArgument("exec_bad_spec", std::move(message)); }

bool HasNul(const std::string& s) { return s.find('\0') != std::string::npos; }

// Returns `path` made absolute against the current directory, or "" when that fails.
std::string Absolute(const std::string& path) {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::absolute(path, ec);
  if (ec) return "";
  return p.lexically_normal().string();
}

std::string HomeOfCurrentUser() {
  struct passwd entry;
  struct passwd* found = nullptr;
  char buffer[4096];
  if (getpwuid_r(geteuid(), &entry, buffer, sizeof(buffer), &found) == 0 && found != nullptr &&
      found->pw_dir != nullptr && found->pw_dir[0] != '\0') {
    return found->pw_dir;
  }
  return "/";
}

// Checks `spec` and rewrites it into the form stored in spec.json: absolute paths, the working
// directory resolved, and the command's final environment.
Status ResolveSpec(LaunchSpec& spec) {
  if (spec.attempt_dir.empty() || HasNul(spec.attempt_dir)) {
    return BadSpec("attempt_dir is empty or contains a NUL byte");
  }
  if (spec.argv.empty() || spec.argv[0].empty()) return BadSpec("argv is empty");
  for (size_t i = 0; i < spec.argv.size(); ++i) {
    if (HasNul(spec.argv[i])) return BadSpec("argv[" + std::to_string(i) + "] contains a NUL byte");
  }
  std::set<std::string> names;
  for (const auto& [name, value] : spec.environment) {
    if (name.empty() || name.find('=') != std::string::npos || HasNul(name)) {
      return BadSpec("environment name '" + name + "' is empty or contains '=' or a NUL byte");
    }
    if (HasNul(value)) return BadSpec("environment value of " + name + " contains a NUL byte");
    if (!names.insert(name).second) return BadSpec("environment name " + name + " is repeated");
  }
  for (const char* required : {"QL_RUN_ID", "QL_ATTEMPT_ID"}) {
    if (!names.contains(required)) return BadSpec(std::string("environment lacks ") + required);
  }
  for (const auto& [name, value] : spec.secret_environment) {
    if (name.empty() || name.find('=') != std::string::npos || HasNul(name)) {
      return BadSpec("secret environment name '" + name +
                     "' is empty or contains '=' or a NUL byte");
    }
    if (name == "QL_RUN_ID" || name == "QL_ATTEMPT_ID" || name == "PATH" || name == "HOME") {
      return BadSpec("secret environment name " + name + " is reserved");
    }
    if (HasNul(value)) {
      return BadSpec("secret environment value of " + name + " contains a NUL byte");
    }
    if (!names.insert(name).second) return BadSpec("environment name " + name + " is repeated");
  }
  if (internal::EncodedSecretsSize(spec) > internal::kMaxSecretsBytes) {
    return BadSpec("secret_environment and mask_values hold more than " +
                   std::to_string(internal::kMaxSecretsBytes) + " bytes");
  }
  if (!names.contains("PATH")) spec.environment.emplace_back("PATH", kDefaultPath);
  std::string working_directory = spec.working_directory.value_or(spec.default_working_directory);
  if (!names.contains("HOME")) {
    // A confined command cannot see the daemon's home; its working directory is its own.
    spec.environment.emplace_back("HOME", spec.confinement.mode == Confinement::Mode::kHost
                                              ? HomeOfCurrentUser()
                                              : Absolute(working_directory));
  }
  for (const std::string& path : spec.confinement.hidden_paths) {
    if (path.empty() || path.front() != '/' || HasNul(path)) {
      return BadSpec("confinement hidden path '" + path + "' is not absolute");
    }
  }
  for (const std::string& path : spec.confinement.writable_paths) {
    if (path.empty() || path.front() != '/' || HasNul(path)) {
      return BadSpec("confinement writable path '" + path + "' is not absolute");
    }
  }
  for (const std::string& path : spec.confinement.read_only_paths) {
    if (path.empty() || path.front() != '/' || HasNul(path)) {
      return BadSpec("confinement read-only path '" + path + "' is not absolute");
    }
  }
  if (working_directory.empty() || HasNul(working_directory)) {
    return BadSpec(spec.working_directory ? "working_directory is empty or contains a NUL byte"
                                          : "working_directory is absent and "
                                            "default_working_directory is empty");
  }
  if (spec.timeout_ms <= 0) {
    return BadSpec("timeout_ms must be positive, got " + std::to_string(spec.timeout_ms));
  }
  if (spec.log_path.empty() || HasNul(spec.log_path)) {
    return BadSpec("log_path is empty or contains a NUL byte");
  }
  if (spec.log_cap_bytes < 0) {
    return BadSpec("log_cap_bytes must not be negative, got " + std::to_string(spec.log_cap_bytes));
  }
  if (spec.kill_grace_ms < 0) {
    return BadSpec("kill_grace_ms must not be negative, got " + std::to_string(spec.kill_grace_ms));
  }
  spec.attempt_dir = Absolute(spec.attempt_dir);
  spec.log_path = Absolute(spec.log_path);
  spec.working_directory = Absolute(working_directory);
  spec.default_working_directory.clear();
  if (spec.attempt_dir.empty() || spec.log_path.empty() || spec.working_directory->empty()) {
    return BadSpec("cannot make attempt_dir, log_path or working_directory absolute");
  }
  return Status::Ok();
}

Status CreateDirectories(const std::filesystem::path& dir, std::string_view what) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return Internal("exec_io_error", "cannot create " + std::string(what) + " " + dir.string() +
                                         ": " + ec.message());
  }
  return Status::Ok();
}

using internal::StartFailure;

// Reads the start pipe to EOF: Ok once the supervisor has recorded itself (or is gone), or the
// StartFailure a launcher step wrote.
Status AwaitStart(int start_read, const std::string& supervisor) {
  StartFailure r{};
  ssize_t n = internal::ReadFull(start_read, &r, sizeof(r));
  close(start_read);
  if (n == static_cast<ssize_t>(sizeof(r))) {
    return Internal("exec_spawn_failed",
                    r.stage == StartFailure::kFork
                        ? ErrnoMessage("cannot fork the supervisor", r.error)
                        : ErrnoMessage("cannot execute supervisor " + supervisor, r.error));
  }
  return Status::Ok();
}

// Starts the supervisor of `attempt_dir` through `launcher` (a fork, no exec). Unavailable
// `exec_launcher_gone` when the launcher cannot be reached; nothing was started then.
Status StartThroughLauncher(SupervisorLauncher& launcher, const std::string& attempt_dir,
                            int secrets_fd) {
  int start[2];
  if (pipe2(start, O_CLOEXEC) != 0) {
    return Internal("exec_spawn_failed", ErrnoMessage("cannot create a pipe", errno));
  }
  Status sent = launcher.Spawn(attempt_dir, start[1], secrets_fd);
  close(start[1]);
  if (!sent.ok()) {
    close(start[0]);
    return sent;
  }
  return AwaitStart(start[0], "(forked by the launcher)");
}

// Starts `args` as a detached supervisor and waits until it has recorded itself and its command
// (or the command's spawn failure): an intermediate child forks it and exits at once, so the
// supervisor is reparented away from the caller and never needs reaping. The supervisor holds
// the write end of the start pipe as fd internal::kReadyFd and closes it once its files are
// written, so EOF here means "recorded, or gone". Between fork and exec only async-signal-safe
// calls are made, as the caller may have threads.
// When `secrets_fd` is not -1 the supervisor gets it as stdin and is told so in its environment
// (internal::kSecretsOnStdinVariable); otherwise its stdin is /dev/null.
Status StartDetached(const std::vector<std::string>& args, int secrets_fd) {
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const std::string ready_prefix = std::string(internal::kReadyFdVariable) + "=";
  const std::string ready_entry = ready_prefix + std::to_string(internal::kReadyFd);
  const std::string secrets_prefix = std::string(internal::kSecretsOnStdinVariable) + "=";
  const std::string secrets_entry = secrets_prefix + "1";
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::string_view(*e).starts_with(ready_prefix)) continue;
    if (std::string_view(*e).starts_with(secrets_prefix)) continue;
    envp.push_back(*e);
  }
  envp.push_back(const_cast<char*>(ready_entry.c_str()));
  if (secrets_fd >= 0) envp.push_back(const_cast<char*>(secrets_entry.c_str()));
  envp.push_back(nullptr);

  int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (devnull < 0)
    return Internal("exec_spawn_failed", ErrnoMessage("cannot open /dev/null", errno));
  int start[2];
  if (pipe2(start, O_CLOEXEC) != 0) {
    int err = errno;
    close(devnull);
    return Internal("exec_spawn_failed", ErrnoMessage("cannot create a pipe", err));
  }
  // Blocked across exec, so a cancel sent before the supervisor is ready stays pending.
  sigset_t cancel_signals;
  sigemptyset(&cancel_signals);
  sigaddset(&cancel_signals, SIGTERM);
  sigaddset(&cancel_signals, SIGINT);

  pid_t middle = fork();
  if (middle < 0) {
    int err = errno;
    close(devnull);
    close(start[0]);
    close(start[1]);
    return Internal("exec_spawn_failed", ErrnoMessage("cannot fork", err));
  }
  if (middle == 0) {
    // _Fork runs no atfork handlers: this child of a possibly multithreaded process may only make
    // async-signal-safe calls.
    pid_t supervisor = _Fork();
    if (supervisor == 0) {
      setsid();
      internal::ResetSignalsForExec();
      sigprocmask(SIG_SETMASK, &cancel_signals, nullptr);
      // Move both descriptors above kReadyFd so the dup2 calls below cannot clobber them.
      int ready = fcntl(start[1], F_DUPFD_CLOEXEC, internal::kReadyFd + 1);
      int null_fd = fcntl(devnull, F_DUPFD_CLOEXEC, internal::kReadyFd + 1);
      int in_fd =
          secrets_fd >= 0 ? fcntl(secrets_fd, F_DUPFD_CLOEXEC, internal::kReadyFd + 1) : null_fd;
      if (ready >= 0 && null_fd >= 0 && in_fd >= 0 && dup2(in_fd, 0) == 0 &&
          dup2(null_fd, 1) == 1 && dup2(null_fd, 2) == 2 &&
          dup2(ready, internal::kReadyFd) == internal::kReadyFd) {
        internal::CloseDescriptorsFrom3Except(internal::kReadyFd);
        execve(argv[0], argv.data(), envp.data());
        ready = internal::kReadyFd;
      }
      StartFailure r{StartFailure::kExec, errno};
      internal::WriteAll(ready >= 0 ? ready : start[1], &r, sizeof(r));
      _exit(127);
    }
    if (supervisor < 0) {
      StartFailure r{StartFailure::kFork, errno};
      internal::WriteAll(start[1], &r, sizeof(r));
    }
    _exit(0);
  }
  close(devnull);
  close(start[1]);
  int status = 0;
  while (waitpid(middle, &status, 0) < 0 && errno == EINTR) {
  }
  return AwaitStart(start[0], args[0]);
}

// Returns an anonymous memory file (never on disk) holding the secrets of `spec`, positioned at
// its start, or -1 when the spec has none. The encoded copy is wiped once written.
Result<int> SecretsMemfd(const LaunchSpec& spec) {
  std::string payload = internal::EncodeSecrets(spec);
  if (payload.empty()) return -1;
  auto wipe = [&payload] { explicit_bzero(payload.data(), payload.size()); };
  int fd = memfd_create("ql-attempt-secrets", MFD_CLOEXEC);
  if (fd < 0) {
    wipe();
    return Internal("exec_spawn_failed", ErrnoMessage("cannot create a memory file", errno));
  }
  bool written =
      internal::WriteAll(fd, payload.data(), payload.size()) && lseek(fd, 0, SEEK_SET) == 0;
  int err = errno;
  wipe();
  if (!written) {
    close(fd);
    return Internal("exec_spawn_failed", ErrnoMessage("cannot write the attempt's secrets", err));
  }
  return fd;
}

Status SignalFailed(std::string_view what, pid_t pid, int sig, int err) {
  return Internal("exec_signal_failed",
                  ErrnoMessage("cannot send signal " + std::to_string(sig) + " to " +
                                   std::string(what) + " " + std::to_string(pid),
                               err));
}

}  // namespace

std::string_view OutcomeKindName(OutcomeKind kind) {
  switch (kind) {
    case OutcomeKind::kExited:
      return "exited";
    case OutcomeKind::kSignaled:
      return "signaled";
    case OutcomeKind::kTimedOut:
      return "timed_out";
    case OutcomeKind::kCancelled:
      return "cancelled";
    case OutcomeKind::kSpawnFailed:
      return "spawn_failed";
  }
  return "spawn_failed";
}

std::optional<OutcomeKind> ParseOutcomeKind(std::string_view name) {
  for (OutcomeKind kind : {OutcomeKind::kExited, OutcomeKind::kSignaled, OutcomeKind::kTimedOut,
                           OutcomeKind::kCancelled, OutcomeKind::kSpawnFailed}) {
    if (OutcomeKindName(kind) == name) return kind;
  }
  return std::nullopt;
}

Result<Supervision> Supervision::Launch(const std::vector<std::string>& supervisor_argv_prefix,
                                        const LaunchSpec& launch_spec,
                                        SupervisorLauncher* launcher) {
  if (supervisor_argv_prefix.empty() || supervisor_argv_prefix[0].empty()) {
    return BadSpec("the supervisor argv prefix is empty");
  }
  LaunchSpec spec = launch_spec;
  QL_RETURN_IF_ERROR(ResolveSpec(spec));
  QL_ASSIGN_OR_RETURN(std::string spec_json, internal::EncodeSpec(spec));

  QL_RETURN_IF_ERROR(CreateDirectories(spec.attempt_dir, "attempt directory"));
  QL_RETURN_IF_ERROR(
      CreateDirectories(std::filesystem::path(spec.log_path).parent_path(), "log directory"));
  std::string spec_path = PathIn(spec.attempt_dir, internal::kSpecFile);
  if (internal::FileExists(spec_path)) {
    return Duplicate("exec_attempt_exists",
                     "attempt directory " + spec.attempt_dir + " was already launched");
  }
  QL_RETURN_IF_ERROR(
      internal::WriteFileAtomically(spec_path, spec_json, internal::Durability::kAtomic));

  std::vector<std::string> args = supervisor_argv_prefix;
  args.push_back(spec.attempt_dir);
  Result<int> secrets_fd = SecretsMemfd(spec);
  if (!secrets_fd.ok()) {
    unlink(spec_path.c_str());
    return secrets_fd.status();
  }
  Status started = launcher != nullptr
                       ? StartThroughLauncher(*launcher, spec.attempt_dir, *secrets_fd)
                       : StartDetached(args, *secrets_fd);
  // With a launcher that is gone, the supervisor is re-executed.
  if (started.reason() == "exec_launcher_gone") started = StartDetached(args, *secrets_fd);
  if (*secrets_fd >= 0) close(*secrets_fd);
  Result<Supervision> adopted =
      started.ok() ? Adopt(spec.attempt_dir) : Result<Supervision>(started);
  if (!adopted.ok()) {
    // The supervisor is gone without a trace, so nothing runs for this attempt; leave the
    // directory looking unlaunched.
    unlink(spec_path.c_str());
    if (adopted.status().reason() != "exec_supervisor_unknown") return adopted.status();
    return Internal(
        "exec_spawn_failed",
        "the supervisor " + args[0] + " exited before recording itself in " + spec.attempt_dir);
  }
  return adopted;
}

Result<Supervision> Supervision::Adopt(const std::string& attempt_dir) {
  std::string dir = Absolute(attempt_dir);
  if (dir.empty()) return NotFound("exec_attempt_not_found", "cannot resolve " + attempt_dir);
  QL_ASSIGN_OR_RETURN(
      std::optional<std::string> supervisor_text,
      internal::ReadFileIfExists(PathIn(dir, internal::kSupervisorFile), kMaxRecordBytes));
  QL_ASSIGN_OR_RETURN(
      std::optional<std::string> result_text,
      internal::ReadFileIfExists(PathIn(dir, internal::kResultFile), kMaxRecordBytes));
  if (!supervisor_text && !result_text) {
    if (!internal::FileExists(PathIn(dir, internal::kSpecFile))) {
      return NotFound("exec_attempt_not_found", dir + " holds no launched attempt (no spec.json)");
    }
    return NotFound("exec_supervisor_unknown",
                    dir + " was launched but its supervisor never recorded itself");
  }
  std::optional<internal::SupervisorRecord> supervisor_record;
  if (supervisor_text) {
    QL_ASSIGN_OR_RETURN(supervisor_record,
                        internal::DecodeSupervisor(*supervisor_text, internal::kSupervisorFile));
  }
  std::optional<internal::ResultRecord> result_record;
  if (result_text) {
    QL_ASSIGN_OR_RETURN(result_record, internal::DecodeResult(*result_text, internal::kResultFile));
  }
  const ProcessIdentity& identity =
      supervisor_record ? supervisor_record->supervisor : result_record->supervisor;
  const std::string& recorded_boot =
      supervisor_record ? supervisor_record->boot_id : result_record->boot_id;
  std::string boot = ReadBootId();

  Supervision s(dir, identity);
  s.same_boot_ = boot.empty() || recorded_boot.empty() || boot == recorded_boot;
  if (s.same_boot_ && supervisor_record) s.command_ = supervisor_record->command;
  if (result_record) s.outcome_ = result_record->outcome;
  return s;
}

void Supervision::RefreshCommand() {
  if (command_ || !same_boot_) return;
  Result<std::optional<std::string>> text =
      internal::ReadFileIfExists(PathIn(attempt_dir_, internal::kSupervisorFile), kMaxRecordBytes);
  if (!text.ok() || !text->has_value()) return;
  Result<internal::SupervisorRecord> record =
      internal::DecodeSupervisor(**text, internal::kSupervisorFile);
  if (record.ok()) command_ = record->command;
}

Supervision::State Supervision::Poll() {
  if (outcome_) return State::kFinished;
  // Liveness is read before the result: the supervisor writes the result before it exits, so a
  // supervisor seen dead here has left any result it will ever write.
  bool alive = same_boot_ && IsSameProcessAlive(supervisor_);
  RefreshCommand();
  Result<std::optional<std::string>> text =
      internal::ReadFileIfExists(PathIn(attempt_dir_, internal::kResultFile), kMaxRecordBytes);
  if (text.ok() && text->has_value()) {
    Result<internal::ResultRecord> record = internal::DecodeResult(**text, internal::kResultFile);
    if (!record.ok()) return State::kLost;
    outcome_ = record->outcome;
    return State::kFinished;
  }
  return alive ? State::kRunning : State::kLost;
}

bool Supervision::LogTruncated() const {
  if (outcome_) return outcome_->log_truncated;
  return internal::FileExists(PathIn(attempt_dir_, internal::kTruncatedFile));
}

Status Supervision::RequestCancel() {
  if (outcome_ || !same_boot_ || !IsSameProcessAlive(supervisor_)) return Status::Ok();
  if (kill(supervisor_.pid, SIGTERM) != 0 && errno != ESRCH) {
    return SignalFailed("supervisor", supervisor_.pid, SIGTERM, errno);
  }
  return Status::Ok();
}

Status Supervision::Kill() {
  if (!same_boot_) return Status::Ok();
  RefreshCommand();
  // The group first, while a live supervisor still holds the command unreaped: its pid, and so
  // the group id, cannot have been reused.
  if (command_ && IsSameProcessPresent(*command_)) {
    if (kill(-command_->pid, SIGKILL) != 0 && errno != ESRCH) {
      return SignalFailed("process group", command_->pid, SIGKILL, errno);
    }
  }
  if (IsSameProcessPresent(supervisor_)) {
    if (kill(supervisor_.pid, SIGKILL) != 0 && errno != ESRCH) {
      return SignalFailed("supervisor", supervisor_.pid, SIGKILL, errno);
    }
  }
  return Status::Ok();
}

}  // namespace ql::exec
