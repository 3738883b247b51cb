#include "ql/exec/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "ql/exec/attempt_files.h"
#include "ql/exec/executor.h"
#include "ql/exec/posix_util.h"

namespace ql::exec {
namespace {

// One request: the attempt directory as the payload (at most PATH_MAX bytes), the start pipe's
// write end and optionally the secrets memory file as SCM_RIGHTS. One reply: one byte, after
// the intermediate child was reaped.
constexpr size_t kMaxRequestBytes = 4096;

bool SendRequest(int socket, std::string_view attempt_dir, int ready_fd, int secrets_fd) {
  const int count = secrets_fd >= 0 ? 2 : 1;
  alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))] = {};
  iovec iov{const_cast<char*>(attempt_dir.data()), attempt_dir.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = CMSG_SPACE(count * sizeof(int));
  cmsghdr* header = CMSG_FIRSTHDR(&msg);
  header->cmsg_level = SOL_SOCKET;
  header->cmsg_type = SCM_RIGHTS;
  header->cmsg_len = CMSG_LEN(count * sizeof(int));
  const int fds[2] = {ready_fd, secrets_fd};
  std::memcpy(CMSG_DATA(header), fds, count * sizeof(int));
  ssize_t sent;
  do {
    sent = sendmsg(socket, &msg, MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  return sent == static_cast<ssize_t>(attempt_dir.size());
}

// The supervisor, forked from the launcher's intermediate child: set up as a re-executed one
// would be, then SupervisorMain() in this process image.
[[noreturn]] void BecomeSupervisor(const std::string& attempt_dir, int ready_fd, int secrets_fd) {
  setsid();
  internal::ResetSignalsForExec();
  sigset_t cancel_signals;
  sigemptyset(&cancel_signals);
  sigaddset(&cancel_signals, SIGTERM);
  sigaddset(&cancel_signals, SIGINT);
  sigprocmask(SIG_SETMASK, &cancel_signals, nullptr);
  const int floor = internal::kReadyFd + 1;
  int ready = fcntl(ready_fd, F_DUPFD_CLOEXEC, floor);
  int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  int null_high = null_fd >= 0 ? fcntl(null_fd, F_DUPFD_CLOEXEC, floor) : -1;
  int in_fd = secrets_fd >= 0 ? fcntl(secrets_fd, F_DUPFD_CLOEXEC, floor) : null_high;
  if (ready < 0 || null_high < 0 || in_fd < 0 || dup2(in_fd, 0) != 0 || dup2(null_high, 1) != 1 ||
      dup2(null_high, 2) != 2 || dup2(ready, internal::kReadyFd) != internal::kReadyFd) {
    internal::StartFailure failure{internal::StartFailure::kExec, errno};
    internal::WriteAll(ready >= 0 ? ready : ready_fd, &failure, sizeof(failure));
    _exit(127);
  }
  internal::CloseDescriptorsFrom3Except(internal::kReadyFd);
  setenv(std::string(internal::kReadyFdVariable).c_str(),
         std::to_string(internal::kReadyFd).c_str(), 1);
  if (secrets_fd >= 0) {
    setenv(std::string(internal::kSecretsOnStdinVariable).c_str(), "1", 1);
  } else {
    unsetenv(std::string(internal::kSecretsOnStdinVariable).c_str());
  }
  _exit(SupervisorMain(attempt_dir));
}

// The launcher's loop: one supervisor per request until the channel closes.
[[noreturn]] void Serve(int socket) {
  // Nothing of the caller's but the channel: its descriptors stay with the caller.
  internal::CloseDescriptorsFrom3Except(socket);
  signal(SIGPIPE, SIG_IGN);
  while (true) {
    char payload[kMaxRequestBytes];
    alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))] = {};
    iovec iov{payload, sizeof(payload)};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ssize_t n = recvmsg(socket, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) _exit(0);  // the caller closed the channel or is gone
    int fds[2] = {-1, -1};
    int count = 0;
    for (cmsghdr* h = CMSG_FIRSTHDR(&msg); h != nullptr; h = CMSG_NXTHDR(&msg, h)) {
      if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS) continue;
      const int got = static_cast<int>((h->cmsg_len - CMSG_LEN(0)) / sizeof(int));
      for (int k = 0; k < got; ++k) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(h) + k * sizeof(int), sizeof(int));
        if (count < 2) {
          fds[count++] = fd;
        } else {
          close(fd);
        }
      }
    }
    const bool whole = (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) == 0;
    if (count >= 1 && whole) {
      const std::string attempt_dir(payload, static_cast<size_t>(n));
      pid_t middle = fork();
      if (middle == 0) {
        pid_t supervisor = fork();
        if (supervisor == 0) BecomeSupervisor(attempt_dir, fds[0], fds[1]);
        if (supervisor < 0) {
          internal::StartFailure failure{internal::StartFailure::kFork, errno};
          internal::WriteAll(fds[0], &failure, sizeof(failure));
        }
        _exit(0);
      }
      if (middle < 0) {
        internal::StartFailure failure{internal::StartFailure::kFork, errno};
        internal::WriteAll(fds[0], &failure, sizeof(failure));
      } else {
        int status = 0;
        while (waitpid(middle, &status, 0) < 0 && errno == EINTR) {
        }
      }
    }
    for (int k = 0; k < count; ++k) close(fds[k]);
    const char done = whole && count >= 1 ? 1 : 0;
    if (!internal::WriteAll(socket, &done, 1)) _exit(0);
  }
}

}  // namespace

Result<std::unique_ptr<SupervisorLauncher>> SupervisorLauncher::Start() {
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
    return Internal("exec_spawn_failed",
                    internal::ErrnoMessage("cannot create the launcher's channel", errno));
  }
  pid_t pid = fork();
  if (pid < 0) {
    int err = errno;
    close(pair[0]);
    close(pair[1]);
    return Internal("exec_spawn_failed",
                    internal::ErrnoMessage("cannot fork the supervisor launcher", err));
  }
  if (pid == 0) {
    close(pair[0]);
    Serve(pair[1]);
  }
  close(pair[1]);
  return std::unique_ptr<SupervisorLauncher>(new SupervisorLauncher(pair[0], pid));
}

SupervisorLauncher::~SupervisorLauncher() {
  if (socket_ >= 0) close(socket_);
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
}

Status SupervisorLauncher::Spawn(const std::string& attempt_dir, int ready_fd, int secrets_fd) {
  if (attempt_dir.empty() || attempt_dir.size() > kMaxRequestBytes) {
    return InvalidArgument("exec_bad_spec", "the attempt directory path is empty or too long");
  }
  std::lock_guard<std::mutex> lock(mu_);
  char done = 0;
  if (!SendRequest(socket_, attempt_dir, ready_fd, secrets_fd) ||
      internal::ReadFull(socket_, &done, 1) != 1 || done != 1) {
    return Unavailable("exec_launcher_gone", "the supervisor launcher cannot be reached");
  }
  return Status::Ok();
}

}  // namespace ql::exec
