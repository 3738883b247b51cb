#pragma once

// Small POSIX helpers shared by Launch (daemon side) and the supervisor. The functions marked
// async-signal-safe may be called between fork() and exec() in a multithreaded process.

#include <spawn.h>
#include <sys/types.h>

namespace ql::exec::internal {

// Resets every signal's disposition to SIG_DFL and unblocks all signals, so a child does not
// inherit ignored signals (SIGPIPE, SIGCHLD, ...) or a blocked mask across exec.
// Async-signal-safe.
void ResetSignalsForExec();

// Closes every descriptor >= 3 except `keep` (pass -1 to keep none). Async-signal-safe.
void CloseDescriptorsFrom3Except(int keep);

// Writes all of `size` bytes, retrying on EINTR and short writes; returns false on error.
// Async-signal-safe.
bool WriteAll(int fd, const void* data, size_t size);

// Reads exactly `size` bytes unless EOF comes first; returns the number read or -1 on error.
ssize_t ReadFull(int fd, void* data, size_t size);

// Prepares a posix_spawn of a command: `stdin_fd` becomes its 0 and `output_fd` its 1 and 2,
// every signal at its default and an empty mask; with `directory` >= 0 it changes there, with
// `own_group` it leads a new process group. Returns 0 or the error number; `actions` and
// `attributes` are initialised either way and must be destroyed by the caller.
int PrepareSpawn(posix_spawn_file_actions_t* actions, posix_spawnattr_t* attributes, int stdin_fd,
                 int output_fd, int directory, bool own_group);

}  // namespace ql::exec::internal
