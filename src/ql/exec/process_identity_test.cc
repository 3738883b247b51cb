#include "ql/exec/process_identity.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace ql::exec {
namespace {

// Forks a child that runs `body` and then exits; returns its pid.
template <typename F>
pid_t ForkChild(F body) {
  pid_t pid = fork();
  if (pid == 0) {
    body();
    _exit(0);
  }
  return pid;
}

void Reap(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
}

// Waits up to a second for `pid` to reach `state`.
bool WaitForState(pid_t pid, char state) {
  for (int i = 0; i < 200; ++i) {
    std::optional<ProcessStat> stat = ReadProcessStat(pid);
    if (stat && stat->state == state) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

TEST(ParseProcessStatTest, CountsFieldsFromTheLastParenthesis) {
  std::string line =
      "4242 (a) (b c) x) S 1 4200 4200 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654321 "
      "1000 200 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n";
  std::optional<ProcessStat> stat = ParseProcessStat(line);
  ASSERT_TRUE(stat.has_value());
  EXPECT_EQ(stat->pid, 4242);
  EXPECT_EQ(stat->state, 'S');
  EXPECT_EQ(stat->ppid, 1);
  EXPECT_EQ(stat->pgrp, 4200);
  EXPECT_EQ(stat->start_time_ticks, 987654321u);
}

TEST(ParseProcessStatTest, RejectsTruncatedOrMalformedLines) {
  EXPECT_FALSE(ParseProcessStat("").has_value());
  EXPECT_FALSE(ParseProcessStat("12 (sh) S 1 12 12").has_value());
  EXPECT_FALSE(ParseProcessStat("12 sh S 1 12 12 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5").has_value());
  EXPECT_FALSE(
      ParseProcessStat("x (sh) S 1 12 12 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 1").has_value());
  EXPECT_FALSE(
      ParseProcessStat("12 (sh) S 1 12 12 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 abc 1").has_value());
}

TEST(ProcessIdentityTest, ReadsSelf) {
  std::optional<ProcessIdentity> self = ReadProcessIdentity(getpid());
  ASSERT_TRUE(self.has_value());
  EXPECT_EQ(self->pid, getpid());
  EXPECT_GT(self->start_time_ticks, 0u);
  EXPECT_TRUE(IsSameProcessAlive(*self));
  std::optional<ProcessStat> stat = ReadProcessStat(getpid());
  ASSERT_TRUE(stat.has_value());
  EXPECT_EQ(stat->pgrp, getpgrp());
  EXPECT_EQ(stat->start_time_ticks, self->start_time_ticks);
}

TEST(ProcessIdentityTest, WrongStartTimeIsNotTheSameProcess) {
  std::optional<ProcessIdentity> self = ReadProcessIdentity(getpid());
  ASSERT_TRUE(self.has_value());
  ProcessIdentity reused{self->pid, self->start_time_ticks + 1};
  EXPECT_FALSE(IsSameProcessAlive(reused));
  EXPECT_FALSE(IsSameProcessPresent(reused));
}

TEST(ProcessIdentityTest, DeadPidHasNoIdentity) {
  pid_t pid = ForkChild([] {});
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(WaitForState(pid, 'Z'));
  std::optional<ProcessIdentity> zombie = ReadProcessIdentity(pid);
  ASSERT_TRUE(zombie.has_value());
  // A zombie still holds its pid (safe to signal) but is not alive.
  EXPECT_TRUE(IsSameProcessPresent(*zombie));
  EXPECT_FALSE(IsSameProcessAlive(*zombie));
  Reap(pid);
  EXPECT_FALSE(ReadProcessIdentity(pid).has_value());
  EXPECT_FALSE(IsSameProcessPresent(*zombie));
  EXPECT_FALSE(ReadProcessIdentity(-1).has_value());
  EXPECT_FALSE(ReadProcessIdentity(0).has_value());
}

TEST(ProcessIdentityTest, ReadsAProcessWhoseNameHasSpacesAndParentheses) {
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t pid = ForkChild([&] {
    prctl(PR_SET_NAME, "x) y (z", 0, 0, 0);
    char c = 'r';
    (void)!write(ready[1], &c, 1);
    pause();
  });
  ASSERT_GT(pid, 0);
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  close(ready[0]);
  close(ready[1]);
  std::optional<ProcessStat> stat = ReadProcessStat(pid);
  kill(pid, SIGKILL);
  Reap(pid);
  ASSERT_TRUE(stat.has_value());
  EXPECT_EQ(stat->pid, pid);
  EXPECT_EQ(stat->pgrp, getpgrp());
  EXPECT_TRUE(stat->state == 'S' || stat->state == 'R') << stat->state;
  EXPECT_GE(stat->start_time_ticks, ReadProcessIdentity(getpid())->start_time_ticks);
}

TEST(ProcessIdentityTest, BootIdIsAUuid) {
  std::string id = ReadBootId();
  EXPECT_EQ(id.size(), 36u) << id;
  EXPECT_EQ(id, ReadBootId());
}

}  // namespace
}  // namespace ql::exec
