#pragma once

// The processes descended from one process, found through /proc, and signals sent to them
// without hitting a process that merely reuses a pid (internal to the supervisor).

#include <sys/types.h>

#include <vector>

namespace ql::exec::internal {

// One process below the root of a walk.
struct Descendant {
  pid_t pid = 0;
  pid_t ppid = 0;
  pid_t pgrp = 0;
  char state = '?';  // as in /proc/<pid>/stat; 'Z' is a zombie
};

// Returns every process descended from `root` (children, their children, ...), zombies
// included, by following /proc/<pid>/task/<tid>/children down from `root` (or, on a kernel
// without those files, by reading the parent pid in each /proc/<pid>/stat). A process forked after the walk
// read its parent is not included; a caller that must end them all walks again.
std::vector<Descendant> Descendants(pid_t root);

// Sends `sig` to each of `processes` that is not a zombie, skipping members of process group
// `skip_group` (pass 0 to skip none). Each is opened as a pidfd first and its parent read again
// after, so a pid reused by a process outside the walk's tree is never signalled. Returns how
// many were signalled.
int SignalDescendants(const std::vector<Descendant>& processes, pid_t root, int sig,
                      pid_t skip_group);

// Reaps every exited child of the calling process except `keep` (whose zombie the caller still
// needs). Returns how many were reaped.
int ReapChildrenExcept(pid_t keep);

}  // namespace ql::exec::internal
