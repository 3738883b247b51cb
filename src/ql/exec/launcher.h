#pragma once

// A small single-threaded process that starts supervisors by fork alone. Re-executing the
// caller's binary for every attempt (Supervision::Launch's default) costs a dynamic link of
// the whole program per attempt and a fork of the caller, however many threads and pages it
// has; the launcher is forked once, before the caller starts any thread, and each supervisor
// is then a fork of it that runs SupervisorMain() directly. The supervisor it starts is the
// same as a re-executed one: its own session, detached (reparented away), the start pipe as
// internal::kReadyFd, the secrets memory file (or /dev/null) as stdin, every other descriptor
// closed, default signal dispositions with the cancel signals blocked.

#include <sys/types.h>

#include <memory>
#include <mutex>
#include <string>

#include "ql/core/status.h"

namespace ql::exec {

class SupervisorLauncher {
 public:
  // Forks the launcher. Call it before the process starts any thread, and before it reads
  // anything it would not hand to a command's supervisor (tokens, keys): the launcher and every
  // supervisor carry a copy of the memory the caller had here. Errors: Internal
  // `exec_spawn_failed`.
  static Result<std::unique_ptr<SupervisorLauncher>> Start();

  // Closes the channel; the launcher exits. Supervisors already started are not affected.
  ~SupervisorLauncher();
  SupervisorLauncher(const SupervisorLauncher&) = delete;
  SupervisorLauncher& operator=(const SupervisorLauncher&) = delete;

  // Starts a supervisor for `attempt_dir`: it gets `ready_fd` as internal::kReadyFd and
  // `secrets_fd` (or /dev/null when -1) as stdin. Returns once the launcher has forked it (or
  // written a StartFailure to `ready_fd`); the caller then waits on the start pipe as it does
  // for a re-executed supervisor. Thread-safe. Errors: Unavailable `exec_launcher_gone` when
  // the launcher cannot be reached (the caller falls back to re-executing).
  Status Spawn(const std::string& attempt_dir, int ready_fd, int secrets_fd);

  pid_t pid() const { return pid_; }

 private:
  SupervisorLauncher(int socket, pid_t pid) : socket_(socket), pid_(pid) {}

  std::mutex mu_;
  int socket_ = -1;
  pid_t pid_ = 0;
};

namespace internal {

// What a start pipe carries when the supervisor could not be started.
struct StartFailure {
  enum Stage : int { kFork = 1, kExec = 2 };
  int stage;
  int error;
};

}  // namespace internal

}  // namespace ql::exec
