#include "ql/exec/posix_util.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>

namespace ql::exec::internal {

void ResetSignalsForExec() {
  struct sigaction action = {};
  action.sa_handler = SIG_DFL;
  sigemptyset(&action.sa_mask);
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    sigaction(sig, &action, nullptr);  // fails harmlessly for the signals glibc reserves
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
}

void CloseDescriptorsFrom3Except(int keep) {
  if (keep < 3) {
    if (close_range(3, ~0U, 0) == 0) return;
  } else {
    bool ok = (keep == 3 || close_range(3, static_cast<unsigned>(keep) - 1, 0) == 0) &&
              close_range(static_cast<unsigned>(keep) + 1, ~0U, 0) == 0;
    if (ok) return;
  }
  // Kernels before 5.9 lack close_range; descriptors past this bound are not expected here.
  for (int fd = 3; fd < 65536; ++fd) {
    if (fd != keep) close(fd);
  }
}

bool WriteAll(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

ssize_t ReadFull(int fd, void* data, size_t size) {
  char* p = static_cast<char*>(data);
  size_t done = 0;
  while (done < size) {
    ssize_t n = read(fd, p + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return static_cast<ssize_t>(done);
}

int PrepareSpawn(posix_spawn_file_actions_t* actions, posix_spawnattr_t* attributes, int stdin_fd,
                 int output_fd, int directory, bool own_group) {
  posix_spawn_file_actions_init(actions);
  posix_spawnattr_init(attributes);
  sigset_t none;
  sigset_t every;
  sigemptyset(&none);
  sigfillset(&every);
  int setup = posix_spawn_file_actions_adddup2(actions, stdin_fd, 0);
  if (setup == 0) setup = posix_spawn_file_actions_adddup2(actions, output_fd, 1);
  if (setup == 0) setup = posix_spawn_file_actions_adddup2(actions, output_fd, 2);
  if (setup == 0 && directory >= 0) {
    setup = posix_spawn_file_actions_addfchdir_np(actions, directory);
  }
  const short flags = static_cast<short>(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                         (own_group ? POSIX_SPAWN_SETPGROUP : 0));
  if (setup == 0) setup = posix_spawnattr_setflags(attributes, flags);
  if (setup == 0 && own_group) setup = posix_spawnattr_setpgroup(attributes, 0);
  if (setup == 0) setup = posix_spawnattr_setsigmask(attributes, &none);
  if (setup == 0) setup = posix_spawnattr_setsigdefault(attributes, &every);
  return setup;
}

}  // namespace ql::exec::internal
