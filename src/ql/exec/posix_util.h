#pragma once

// Small POSIX helpers shared by Launch (daemon side) and the supervisor. The functions marked
// async-signal-safe may be called between fork() and exec() in a multithreaded process.

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

}  // namespace ql::exec::internal
