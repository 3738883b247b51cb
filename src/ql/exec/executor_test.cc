#include "ql/exec/executor.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "ql/exec/attempt_files.h"
#include "ql/exec/launcher.h"
#include "ql/exec/supervision_runner.h"

namespace ql::exec {
namespace {

using Clock = std::chrono::steady_clock;
using State = Supervision::State;

// The test binary doubles as the supervisor executable (see main below).
const std::vector<std::string> kSupervisorPrefix = {"/proc/self/exe", "supervise"};

int64_t MsSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Returns the pids of live (non-zombie) processes for which `wanted(pid, stat)` holds.
template <typename F>
std::vector<pid_t> LiveProcesses(F wanted) {
  std::vector<pid_t> found;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return found;
  while (dirent* entry = readdir(proc)) {
    pid_t pid = static_cast<pid_t>(atoi(entry->d_name));
    if (pid <= 0) continue;
    std::optional<ProcessStat> stat = ReadProcessStat(pid);
    if (stat && stat->state != 'Z' && stat->state != 'X' && wanted(pid, *stat)) {
      found.push_back(pid);
    }
  }
  closedir(proc);
  return found;
}

// Returns the pids of live (non-zombie) processes in process group `pgid`.
std::vector<pid_t> LiveMembersOfGroup(pid_t pgid) {
  return LiveProcesses([pgid](pid_t, const ProcessStat& stat) { return stat.pgrp == pgid; });
}

// Returns the pids of live (non-zombie) processes whose command line is exactly `argv`.
std::vector<pid_t> LiveProcessesRunning(const std::vector<std::string>& argv) {
  std::string wanted;
  for (const std::string& a : argv) wanted += a + '\0';
  return LiveProcesses([&wanted](pid_t pid, const ProcessStat&) {
    return ReadFile("/proc/" + std::to_string(pid) + "/cmdline") == wanted;
  });
}

// Waits up to `timeout_ms` for `done` to hold.
template <typename F>
bool WaitUntil(F done, int64_t timeout_ms = 3000) {
  Clock::time_point start = Clock::now();
  while (!done()) {
    if (MsSince(start) > timeout_ms) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

class ExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/ql_exec_test.XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    root_ = pattern;
  }

  void TearDown() override {
    // Ends anything a failed test left running, then removes the files.
    for (const std::string& dir : launched_) {
      Result<Supervision> s = Supervision::Adopt(dir);
      if (s.ok()) (void)s->Kill();
    }
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }

  LaunchSpec Spec(std::vector<std::string> argv) {
    LaunchSpec spec;
    spec.attempt_dir = root_ + "/attempts/a" + std::to_string(++attempts_);
    spec.argv = std::move(argv);
    spec.environment = {{"QL_RUN_ID", "run-1"}, {"QL_ATTEMPT_ID", "attempt-1"}};
    spec.default_working_directory = root_;
    spec.timeout_ms = 10000;
    spec.log_path = root_ + "/log/task/run-" + std::to_string(attempts_) + ".log";
    spec.log_cap_bytes = 1 << 20;
    spec.kill_grace_ms = 200;
    return spec;
  }

  Supervision Launch(const LaunchSpec& spec) {
    Result<Supervision> s = Supervision::Launch(kSupervisorPrefix, spec);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (!s.ok()) std::abort();
    launched_.push_back(s->attempt_dir());
    return std::move(s).value();
  }

  // Polls until the attempt is no longer running; returns the last state.
  static State WaitForEnd(Supervision& s, int64_t timeout_ms = 5000) {
    State state = s.Poll();
    WaitUntil([&] { return (state = s.Poll()) != State::kRunning; }, timeout_ms);
    return state;
  }

  // Expects Launch to refuse `spec` as exec_bad_spec with `words` in the message, writing nothing.
  void ExpectRejected(const LaunchSpec& spec, const std::string& words) {
    Result<Supervision> s = Supervision::Launch(kSupervisorPrefix, spec);
    ASSERT_FALSE(s.ok()) << words;
    EXPECT_EQ(s.status().reason(), "exec_bad_spec");
    EXPECT_NE(s.status().message().find(words), std::string::npos) << s.status().message();
    EXPECT_FALSE(std::filesystem::exists(spec.attempt_dir)) << "nothing is written";
  }

  // Launches `spec`, waits for it to finish and returns the outcome.
  Outcome Run(const LaunchSpec& spec) {
    Supervision s = Launch(spec);
    EXPECT_EQ(WaitForEnd(s), State::kFinished);
    return s.outcome().value_or(Outcome{});
  }

  std::string root_;
  int attempts_ = 0;
  std::vector<std::string> launched_;
};

TEST_F(ExecutorTest, EchoGoesToTheLogAndExitZeroIsRecorded) {
  LaunchSpec spec = Spec({"/bin/echo", "hello", "world"});
  Outcome o = Run(spec);
  EXPECT_EQ(o.kind, OutcomeKind::kExited);
  EXPECT_EQ(o.exit_code, 0);
  EXPECT_FALSE(o.signal.has_value());
  EXPECT_EQ(ReadFile(spec.log_path), "hello world\n");
  EXPECT_EQ(o.log_bytes_written, 12);
  EXPECT_EQ(o.output_bytes, 12);
  EXPECT_FALSE(o.log_truncated);
  EXPECT_GT(o.started_at_ms, 0);
  EXPECT_GE(o.finished_at_ms, o.started_at_ms);
}

TEST_F(ExecutorTest, NonZeroExitCodeIsRecorded) {
  Outcome o = Run(Spec({"/bin/sh", "-c", "exit 3"}));
  EXPECT_EQ(o.kind, OutcomeKind::kExited);
  EXPECT_EQ(o.exit_code, 3);
  EXPECT_EQ(o.message, "exited with code 3");
}

TEST_F(ExecutorTest, StderrIsCapturedWithStdoutAndStdinIsEmpty) {
  LaunchSpec spec = Spec({"/bin/sh", "-c", "echo out; echo err >&2; cat; echo end"});
  Outcome o = Run(spec);
  EXPECT_EQ(o.exit_code, 0);
  EXPECT_EQ(ReadFile(spec.log_path), "out\nerr\nend\n");
}

TEST_F(ExecutorTest, LogIsAppendedAcrossAttempts) {
  LaunchSpec first = Spec({"/bin/echo", "one"});
  LaunchSpec second = Spec({"/bin/echo", "two"});
  second.log_path = first.log_path;
  Run(first);
  Run(second);
  EXPECT_EQ(ReadFile(first.log_path), "one\ntwo\n");
}

TEST_F(ExecutorTest, SelfSignalIsRecordedAsSignaled) {
  Outcome o = Run(Spec({"/bin/sh", "-c", "kill -USR1 $$"}));
  EXPECT_EQ(o.kind, OutcomeKind::kSignaled);
  EXPECT_EQ(o.signal, SIGUSR1);
  EXPECT_FALSE(o.exit_code.has_value());
}

TEST_F(ExecutorTest, EnvironmentIsThePlanPlusIdsPathAndHome) {
  setenv("QL_EXEC_TEST_DAEMON_ONLY", "1", 1);
  LaunchSpec spec = Spec({"/usr/bin/env"});
  spec.environment.emplace_back("PLAN_VAR", "a b = c");
  Run(spec);
  std::set<std::string> lines;
  std::istringstream log(ReadFile(spec.log_path));
  for (std::string line; std::getline(log, line);) lines.insert(line.substr(0, line.find('=')));
  EXPECT_EQ(lines,
            (std::set<std::string>{"QL_RUN_ID", "QL_ATTEMPT_ID", "PLAN_VAR", "PATH", "HOME"}));
  std::string text = ReadFile(spec.log_path);
  EXPECT_NE(text.find("QL_RUN_ID=run-1\n"), std::string::npos);
  EXPECT_NE(text.find("QL_ATTEMPT_ID=attempt-1\n"), std::string::npos);
  EXPECT_NE(text.find("PLAN_VAR=a b = c\n"), std::string::npos);
  EXPECT_NE(text.find("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"),
            std::string::npos);
  unsetenv("QL_EXEC_TEST_DAEMON_ONLY");
}

TEST_F(ExecutorTest, PlanPathAndHomeAreKept) {
  LaunchSpec spec = Spec({"/usr/bin/env"});
  spec.environment.emplace_back("PATH", "/bin");
  spec.environment.emplace_back("HOME", "/nonexistent-home");
  Run(spec);
  std::string text = ReadFile(spec.log_path);
  EXPECT_NE(text.find("PATH=/bin\n"), std::string::npos) << text;
  EXPECT_NE(text.find("HOME=/nonexistent-home\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("/usr/local/sbin"), std::string::npos) << text;
}

TEST_F(ExecutorTest, BareCommandNameIsFoundInPath) {
  LaunchSpec spec = Spec({"echo", "found"});
  Outcome o = Run(spec);
  EXPECT_EQ(o.exit_code, 0) << o.message;
  EXPECT_EQ(ReadFile(spec.log_path), "found\n");
}

TEST_F(ExecutorTest, WorkingDirectoryIsHonouredAndDefaulted) {
  std::string wd = std::filesystem::canonical(root_).string() + "/work dir";
  std::filesystem::create_directories(wd);
  LaunchSpec spec = Spec({"/bin/pwd", "-P"});
  spec.working_directory = wd;
  Run(spec);
  EXPECT_EQ(ReadFile(spec.log_path), wd + "\n");

  LaunchSpec defaulted = Spec({"/bin/pwd", "-P"});
  defaulted.default_working_directory = wd;
  Run(defaulted);
  EXPECT_EQ(ReadFile(defaulted.log_path), wd + "\n");
}

TEST_F(ExecutorTest, TimeoutStopsTheCommandWithSigterm) {
  LaunchSpec spec = Spec({"/bin/sleep", "30"});
  spec.timeout_ms = 300;
  Clock::time_point start = Clock::now();
  Outcome o = Run(spec);
  int64_t elapsed = MsSince(start);
  EXPECT_EQ(o.kind, OutcomeKind::kTimedOut);
  EXPECT_EQ(o.signal, SIGTERM);
  EXPECT_GE(elapsed, 300);
  EXPECT_LT(elapsed, 300 + 200 + 500);
  EXPECT_GE(o.finished_at_ms - o.started_at_ms, 300);
}

TEST_F(ExecutorTest, CommandIgnoringSigtermIsKilledAfterTheGrace) {
  LaunchSpec spec = Spec({"/bin/sh", "-c", "trap '' TERM; sleep 30"});
  spec.timeout_ms = 200;
  spec.kill_grace_ms = 300;
  Clock::time_point start = Clock::now();
  Supervision s = Launch(spec);
  ASSERT_EQ(WaitForEnd(s), State::kFinished);
  int64_t elapsed = MsSince(start);
  const Outcome& o = *s.outcome();
  EXPECT_EQ(o.kind, OutcomeKind::kTimedOut);
  EXPECT_EQ(o.signal, SIGKILL);
  EXPECT_GE(elapsed, 200 + 300);
  EXPECT_LT(elapsed, 200 + 300 + 700);
  ASSERT_TRUE(s.command().has_value());
  EXPECT_TRUE(LiveMembersOfGroup(s.command()->pid).empty());
}

TEST_F(ExecutorTest, CancelEndsTheWholeProcessGroup) {
  LaunchSpec spec = Spec({"/bin/sh", "-c", "sleep 30 & sleep 30"});
  spec.kill_grace_ms = 2000;
  Supervision s = Launch(spec);
  ASSERT_TRUE(s.command().has_value()) << "known as soon as Launch returns";
  EXPECT_EQ(s.Poll(), State::kRunning);
  pid_t pgid = s.command()->pid;
  ASSERT_TRUE(WaitUntil([&] { return LiveMembersOfGroup(pgid).size() >= 3; }))
      << "the shell and both sleeps should run";

  Clock::time_point start = Clock::now();
  ASSERT_TRUE(s.RequestCancel().ok());
  ASSERT_TRUE(s.RequestCancel().ok());  // idempotent
  ASSERT_EQ(WaitForEnd(s), State::kFinished);
  EXPECT_LT(MsSince(start), 1000) << "SIGTERM ends sleep; the grace must not be waited out";
  EXPECT_EQ(s.outcome()->kind, OutcomeKind::kCancelled);
  EXPECT_EQ(s.outcome()->signal, SIGTERM);
  EXPECT_TRUE(WaitUntil([&] { return LiveMembersOfGroup(pgid).empty(); }, 1000));
  EXPECT_TRUE(s.RequestCancel().ok());  // after the end: still fine, nothing to do
}

TEST_F(ExecutorTest, LeftoversOfAFinishedCommandAreStopped) {
  // The background sleep holds the output pipe; the attempt must not wait 30 s for it.
  LaunchSpec spec = Spec({"/bin/sh", "-c", "sleep 30 & echo started"});
  Clock::time_point start = Clock::now();
  Supervision s = Launch(spec);
  ASSERT_EQ(WaitForEnd(s), State::kFinished);
  EXPECT_LT(MsSince(start), 1000);
  EXPECT_EQ(s.outcome()->kind, OutcomeKind::kExited);
  EXPECT_EQ(s.outcome()->exit_code, 0);
  EXPECT_EQ(ReadFile(spec.log_path), "started\n");
  EXPECT_TRUE(WaitUntil([&] { return LiveMembersOfGroup(s.command()->pid).empty(); }, 1000));
}

// A sleep whose command line no other test or process uses: `sleep 300.<pid><n>`.
std::string UniqueSleep(int n) { return "300." + std::to_string(getpid()) + std::to_string(n); }

// A shell command that starts `inner` with setsid in the background, in a session and process
// group of its own, and waits until `inner` has touched `file`, so the escape has happened
// before the command goes on with `then`.
std::string EscapeAndThen(const std::string& inner, const std::string& file,
                          const std::string& then) {
  return "setsid sh -c '" + inner + "' & while [ ! -e " + file + " ]; do sleep 0.01; done; " + then;
}

TEST_F(ExecutorTest, ADaemonisingChildInItsOwnSessionEndsWithTheAttempt) {
  // The escaped sleep still holds the output pipe.
  const std::string seconds = UniqueSleep(1);
  const std::string file = root_ + "/escaped1";
  LaunchSpec spec =
      Spec({"/bin/sh", "-c",
            EscapeAndThen("touch " + file + "; exec sleep " + seconds, file, "echo started")});
  Clock::time_point start = Clock::now();
  Supervision s = Launch(spec);
  ASSERT_EQ(WaitForEnd(s), State::kFinished);
  EXPECT_LT(MsSince(start), 1000) << "the attempt must not wait for the escaped child";
  EXPECT_EQ(s.outcome()->kind, OutcomeKind::kExited);
  EXPECT_EQ(s.outcome()->exit_code, 0);
  EXPECT_EQ(ReadFile(spec.log_path), "started\n");
  EXPECT_TRUE(LiveProcessesRunning({"sleep", seconds}).empty()) << "gone when the result is";
}

TEST_F(ExecutorTest, ADoubleForkedDaemonWithoutTheOutputPipeEndsWithTheAttempt) {
  // The classic daemon: fork, setsid, fork again, the middle exits, the output goes elsewhere.
  // Its parent is gone, so the sleep is nobody's child in the attempt any more.
  const std::string seconds = UniqueSleep(2);
  const std::string file = root_ + "/escaped2";
  LaunchSpec spec =
      Spec({"/bin/sh", "-c",
            EscapeAndThen("sleep " + seconds + " </dev/null >/dev/null 2>&1 & touch " + file, file,
                          "echo started")});
  Supervision s = Launch(spec);
  ASSERT_EQ(WaitForEnd(s), State::kFinished);
  EXPECT_EQ(s.outcome()->exit_code, 0);
  EXPECT_TRUE(LiveProcessesRunning({"sleep", seconds}).empty());
}

TEST_F(ExecutorTest, CancelEndsAChildThatLeftTheSession) {
  const std::string seconds = UniqueSleep(3);
  const std::string file = root_ + "/escaped3";
  LaunchSpec spec = Spec(
      {"/bin/sh", "-c",
       EscapeAndThen("sleep " + seconds + " >/dev/null 2>&1 & touch " + file, file, "sleep 30")});
  spec.kill_grace_ms = 2000;
  Supervision s = Launch(spec);
  ASSERT_TRUE(WaitUntil([&] { return !LiveProcessesRunning({"sleep", seconds}).empty(); }));
  const pid_t escaped = LiveProcessesRunning({"sleep", seconds}).front();
  ASSERT_NE(ReadProcessStat(escaped)->pgrp, s.command()->pid) << "it left the attempt's group";
  Clock::time_point start = Clock::now();
  ASSERT_TRUE(s.RequestCancel().ok());
  ASSERT_EQ(WaitForEnd(s), State::kFinished);
  EXPECT_LT(MsSince(start), 1000) << "SIGTERM reaches it; the grace is not waited out";
  EXPECT_EQ(s.outcome()->kind, OutcomeKind::kCancelled);
  EXPECT_TRUE(LiveProcessesRunning({"sleep", seconds}).empty());
}

TEST_F(ExecutorTest, AChildIgnoringSigtermOutsideTheGroupIsKilled) {
  const std::string seconds = UniqueSleep(4);
  const std::string file = root_ + "/escaped4";
  LaunchSpec spec = Spec({"/bin/sh", "-c",
                          EscapeAndThen("trap \"\" TERM; touch " + file + "; exec sleep " +
                                            seconds + " >/dev/null 2>&1",
                                        file, "echo started")});
  Supervision s = Launch(spec);
  ASSERT_EQ(WaitForEnd(s), State::kFinished);
  EXPECT_EQ(s.outcome()->exit_code, 0);
  EXPECT_TRUE(LiveProcessesRunning({"sleep", seconds}).empty());
}

TEST_F(ExecutorTest, LogIsCappedWhileOutputKeepsDraining) {
  LaunchSpec spec = Spec({"/bin/sh", "-c", "yes | head -c 10000000"});
  spec.log_cap_bytes = 64 * 1024;
  Outcome o = Run(spec);
  EXPECT_EQ(o.kind, OutcomeKind::kExited);
  EXPECT_EQ(o.exit_code, 0);
  EXPECT_TRUE(o.log_truncated);
  EXPECT_EQ(o.truncated_at_bytes, 64 * 1024);
  EXPECT_EQ(o.log_bytes_written, 64 * 1024);
  EXPECT_EQ(o.log_bytes_dropped, 10000000 - 64 * 1024);
  EXPECT_EQ(o.output_bytes, 10000000);

  std::string half;
  for (int i = 0; i < 16 * 1024; ++i) half += "y\n";
  const std::string expected = half + "--- qinglong: 9934464 bytes truncated ---\n" + half;
  std::string log = ReadFile(spec.log_path);
  EXPECT_EQ(log.size(), expected.size());
  EXPECT_TRUE(log == expected) << "log differs from 32 KiB of head, the marker and 32 KiB of tail";
}

TEST_F(ExecutorTest, TruncationKeepsTheHeadAndTheLastLinesOfAFailingCommand) {
  LaunchSpec spec = Spec({"/bin/sh", "-c",
                          "echo 'starting up'; seq 1 400000; echo 'ERROR: disk full' >&2; exit 1"});
  spec.log_cap_bytes = 100 * 1000;
  Outcome o = Run(spec);
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_TRUE(o.log_truncated);
  const std::string log = ReadFile(spec.log_path);
  EXPECT_TRUE(log.starts_with("starting up\n1\n2\n3\n")) << log.substr(0, 40);
  EXPECT_TRUE(log.ends_with("\n399999\n400000\nERROR: disk full\n")) << log.substr(log.size() - 80);
  const std::string marker = "--- qinglong: " + std::to_string(o.log_bytes_dropped) +
                             " bytes truncated ---\n";
  const size_t at = log.find(marker);
  ASSERT_NE(at, std::string::npos);
  // The head is half the cap and ends mid-line, so the marker starts a line of its own.
  EXPECT_EQ(at, 50u * 1000 + 1);
  EXPECT_EQ(log[at - 1], '\n');
  EXPECT_EQ(o.log_bytes_written + o.log_bytes_dropped, o.output_bytes);
  EXPECT_EQ(log.size(), static_cast<size_t>(o.log_bytes_written) + marker.size() + 1);
  EXPECT_LE(o.log_bytes_written, spec.log_cap_bytes);
  // The tail starts with a whole line: its first two lines are consecutive numbers.
  const std::string tail = log.substr(at + marker.size());
  const size_t first_end = tail.find('\n');
  const int first = std::stoi(tail.substr(0, first_end));
  const int second = std::stoi(tail.substr(first_end + 1));
  EXPECT_EQ(second, first + 1) << tail.substr(0, 20);
}

TEST_F(ExecutorTest, TheHeadOfATruncatedLogSurvivesTheSupervisor) {
  LaunchSpec spec = Spec({"/bin/sh", "-c", "seq 1 100000; sleep 30"});
  spec.log_cap_bytes = 1000;
  Supervision s = Launch(spec);
  ASSERT_TRUE(WaitUntil([&] { return s.LogTruncated(); }));
  // The supervisor dies first (Kill() ends the command's group first, and a supervisor that
  // sees its command end in that moment writes the tail before its own SIGKILL arrives).
  ASSERT_EQ(kill(s.supervisor().pid, SIGKILL), 0);
  ASSERT_TRUE(s.Kill().ok());  // the orphaned command
  EXPECT_EQ(WaitForEnd(s), State::kLost);
  const std::string log = ReadFile(spec.log_path);
  EXPECT_EQ(log.size(), 500u);
  EXPECT_TRUE(log.starts_with("1\n2\n3\n"));
}

TEST_F(ExecutorTest, MarkerStartsOnItsOwnLine) {
  LaunchSpec spec = Spec({"/bin/sh", "-c", "printf 'abcdefgh'"});
  spec.log_cap_bytes = 5;
  Outcome o = Run(spec);
  EXPECT_EQ(ReadFile(spec.log_path), "abc\n--- qinglong: 3 bytes truncated ---\ngh");
  EXPECT_EQ(o.output_bytes, 8);
}

TEST_F(ExecutorTest, TruncationIsVisibleWhileTheCommandRuns) {
  LaunchSpec spec = Spec({"/bin/sh", "-c", "head -c 100000 /dev/zero; sleep 30"});
  spec.log_cap_bytes = 1000;
  Supervision s = Launch(spec);
  ASSERT_TRUE(WaitUntil([&] { return s.LogTruncated(); }));
  EXPECT_EQ(s.Poll(), State::kRunning);
  ASSERT_TRUE(s.RequestCancel().ok());
  ASSERT_EQ(WaitForEnd(s), State::kFinished);
  EXPECT_EQ(s.outcome()->kind, OutcomeKind::kCancelled);
  EXPECT_TRUE(s.outcome()->log_truncated);
  // The cancel may come before the command wrote all of its output.
  const Outcome& o = *s.outcome();
  EXPECT_EQ(o.log_bytes_written + o.log_bytes_dropped, o.output_bytes);
  EXPECT_EQ(ReadFile(spec.log_path),
            std::string(500, '\0') + "\n--- qinglong: " + std::to_string(o.log_bytes_dropped) +
                " bytes truncated ---\n" + std::string(500, '\0'));
}

TEST_F(ExecutorTest, MissingExecutableIsASpawnFailure) {
  Outcome o = Run(Spec({"/nonexistent/qinglong-command"}));
  EXPECT_EQ(o.kind, OutcomeKind::kSpawnFailed);
  EXPECT_EQ(o.message, "cannot execute /nonexistent/qinglong-command: No such file or directory");
  EXPECT_FALSE(o.exit_code.has_value());

  Outcome not_in_path = Run(Spec({"qinglong-no-such-command"}));
  EXPECT_EQ(not_in_path.kind, OutcomeKind::kSpawnFailed);
  EXPECT_NE(not_in_path.message.find("not found in PATH"), std::string::npos);
}

TEST_F(ExecutorTest, NonExecutableFileIsASpawnFailure) {
  std::string script = root_ + "/script.sh";
  std::ofstream(script) << "#!/bin/sh\necho hi\n";
  chmod(script.c_str(), 0644);
  Outcome o = Run(Spec({script}));
  EXPECT_EQ(o.kind, OutcomeKind::kSpawnFailed);
  EXPECT_EQ(o.message, "cannot execute " + script + ": Permission denied");
}

TEST_F(ExecutorTest, BadWorkingDirectoryIsASpawnFailure) {
  LaunchSpec spec = Spec({"/bin/true"});
  spec.working_directory = root_ + "/missing";
  Outcome o = Run(spec);
  EXPECT_EQ(o.kind, OutcomeKind::kSpawnFailed);
  EXPECT_EQ(o.message,
            "cannot change to working directory " + root_ + "/missing: No such file or directory");
}

TEST_F(ExecutorTest, AdoptAfterRestartSeesTheRunningCommandAndItsOutcome) {
  LaunchSpec spec = Spec({"/bin/sh", "-c", "sleep 0.3; echo done"});
  std::string dir;
  {
    Supervision launched = Launch(spec);
    dir = launched.attempt_dir();
  }  // the daemon "crashes": its object is gone, the supervisor is not
  Result<Supervision> adopted = Supervision::Adopt(dir);
  ASSERT_TRUE(adopted.ok()) << adopted.status().ToString();
  EXPECT_EQ(adopted->Poll(), State::kRunning);
  EXPECT_TRUE(IsSameProcessAlive(adopted->supervisor()));
  ASSERT_TRUE(WaitUntil([&] { return adopted->Poll() != State::kRunning; }));
  EXPECT_EQ(adopted->Poll(), State::kFinished);
  EXPECT_EQ(adopted->outcome()->kind, OutcomeKind::kExited);
  EXPECT_EQ(adopted->outcome()->exit_code, 0);
  EXPECT_EQ(ReadFile(spec.log_path), "done\n");

  Result<Supervision> again = Supervision::Adopt(dir);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->Poll(), State::kFinished);
  EXPECT_EQ(again->outcome(), adopted->outcome());
  EXPECT_EQ(again->supervisor(), adopted->supervisor());
}

TEST_F(ExecutorTest, KilledSupervisorIsLostAndKillEndsTheOrphan) {
  LaunchSpec spec = Spec({"/bin/sleep", "30"});
  Supervision s = Launch(spec);
  ASSERT_TRUE(WaitUntil([&] { return s.Poll() == State::kRunning && s.command().has_value(); }));
  ProcessIdentity command = *s.command();
  ASSERT_EQ(kill(s.supervisor().pid, SIGKILL), 0);
  ASSERT_TRUE(WaitUntil([&] { return s.Poll() == State::kLost; }, 2000));
  EXPECT_TRUE(IsSameProcessAlive(command)) << "the command outlives its supervisor";

  Result<Supervision> adopted = Supervision::Adopt(s.attempt_dir());
  ASSERT_TRUE(adopted.ok());
  EXPECT_EQ(adopted->Poll(), State::kLost);
  EXPECT_EQ(adopted->command(), command);
  EXPECT_TRUE(adopted->Kill().ok());
  EXPECT_TRUE(WaitUntil([&] { return !IsSameProcessAlive(command); }, 1000));
  EXPECT_TRUE(s.RequestCancel().ok());
}

TEST_F(ExecutorTest, KillEndsSupervisorAndCommand) {
  Supervision s = Launch(Spec({"/bin/sh", "-c", "sleep 30 & sleep 30"}));
  ASSERT_TRUE(WaitUntil([&] { return s.Poll() == State::kRunning && s.command().has_value(); }));
  pid_t pgid = s.command()->pid;
  ASSERT_TRUE(s.Kill().ok());
  EXPECT_NE(WaitForEnd(s, 2000), State::kRunning);
  EXPECT_FALSE(IsSameProcessAlive(s.supervisor()));
  EXPECT_TRUE(WaitUntil([&] { return LiveMembersOfGroup(pgid).empty(); }, 1000));
}

TEST_F(ExecutorTest, InvalidSpecsAreRejectedWithTheField) {
  LaunchSpec spec = Spec({});
  ExpectRejected(spec, "argv");
  spec = Spec({"/bin/true"});
  spec.environment = {{"QL_RUN_ID", "r"}};
  ExpectRejected(spec, "QL_ATTEMPT_ID");
  spec = Spec({"/bin/true"});
  spec.environment.emplace_back("QL_RUN_ID", "again");
  ExpectRejected(spec, "QL_RUN_ID is repeated");
  spec = Spec({"/bin/true"});
  spec.environment.emplace_back("A=B", "x");
  ExpectRejected(spec, "'A=B'");
  spec = Spec({"/bin/true"});
  spec.timeout_ms = 0;
  ExpectRejected(spec, "timeout_ms");
  spec = Spec({"/bin/true"});
  spec.default_working_directory.clear();
  ExpectRejected(spec, "default_working_directory");
  spec = Spec({"/bin/true"});
  spec.log_cap_bytes = -1;
  ExpectRejected(spec, "log_cap_bytes");
  spec = Spec({std::string("/bin/true\0x", 11)});
  ExpectRejected(spec, "argv[0]");
}

// Returns the files under `dir` whose contents hold `needle`.
std::vector<std::string> FilesHolding(const std::string& dir, const std::string& needle) {
  std::vector<std::string> hits;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file() && ReadFile(entry.path()).find(needle) != std::string::npos) {
      hits.push_back(entry.path());
    }
  }
  return hits;
}

constexpr char kSecret[] = "s3cr3t-VALUE-4242";

TEST_F(ExecutorTest, SecretEnvironmentReachesTheCommandButNoFileAndIsMasked) {
  LaunchSpec spec = Spec({"/bin/sh", "-c",
                          "echo \"token=$API_TOKEN\"; env | grep API_TOKEN; "
                          "printf '%s' \"$API_TOKEN\" | wc -c"});
  spec.secret_environment = {{"API_TOKEN", kSecret}};
  Outcome o = Run(spec);
  EXPECT_EQ(o.exit_code, 0) << o.message;
  EXPECT_EQ(ReadFile(spec.log_path), "token=***\nAPI_TOKEN=***\n17\n");
  EXPECT_EQ(o.output_bytes, 55);       // what the command wrote
  EXPECT_EQ(o.log_bytes_written, 27);  // what the log keeps
  EXPECT_EQ(FilesHolding(root_, kSecret), std::vector<std::string>{});
  EXPECT_EQ(ReadFile(spec.attempt_dir + "/spec.json").find("[\"API_TOKEN\""), std::string::npos);
}

// The command line a process runs, NUL-separated as /proc shows it.
std::string CmdlineOf(pid_t pid) { return ReadFile("/proc/" + std::to_string(pid) + "/cmdline"); }

TEST_F(ExecutorTest, ALauncherForksTheSupervisorWhichRunsTheCommandAsAReExecutedOneWould) {
  Result<std::unique_ptr<SupervisorLauncher>> launcher = SupervisorLauncher::Start();
  ASSERT_TRUE(launcher.ok()) << launcher.status().ToString();
  LaunchSpec spec = Spec({"/bin/sh", "-c",
                          "echo \"$QL_RUN_ID token=$API_TOKEN\"; cat; sleep 5"});
  spec.secret_environment = {{"API_TOKEN", kSecret}};
  Result<Supervision> s = Supervision::Launch(kSupervisorPrefix, spec, launcher->get());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  launched_.push_back(s->attempt_dir());
  // A fork of the launcher, itself a fork of this process: the same command line, not a
  // re-execution with `supervise`; detached from the caller and from the launcher.
  const pid_t supervisor = s->supervisor().pid;
  EXPECT_EQ(CmdlineOf(supervisor), CmdlineOf(getpid()));
  EXPECT_EQ(CmdlineOf(supervisor).find("supervise"), std::string::npos);
  std::optional<ProcessStat> stat = ReadProcessStat(supervisor);
  ASSERT_TRUE(stat.has_value());
  EXPECT_NE(stat->ppid, getpid());
  EXPECT_NE(stat->ppid, (*launcher)->pid());
  EXPECT_EQ(stat->pgrp, supervisor) << "its own session and group";
  ASSERT_TRUE(s->command().has_value());
  // (The masker holds back the bytes after the last mask match until more output or the end.)
  ASSERT_TRUE(WaitUntil([&] { return ReadFile(spec.log_path).find("***") != std::string::npos; }));
  ASSERT_TRUE(s->RequestCancel().ok());
  EXPECT_EQ(WaitForEnd(*s), State::kFinished);
  EXPECT_EQ(s->outcome()->kind, OutcomeKind::kCancelled);
  // The secret came through its memory file and is masked; stdin was otherwise empty.
  EXPECT_EQ(ReadFile(spec.log_path), "run-1 token=***\n");
  EXPECT_EQ(FilesHolding(root_, kSecret), std::vector<std::string>{});

  // Without secrets stdin is /dev/null, and the exit code is recorded.
  LaunchSpec plain = Spec({"/bin/sh", "-c", "cat; echo done; exit 3"});
  Result<Supervision> second = Supervision::Launch(kSupervisorPrefix, plain, launcher->get());
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  launched_.push_back(second->attempt_dir());
  EXPECT_EQ(WaitForEnd(*second), State::kFinished);
  EXPECT_EQ(second->outcome()->exit_code, 3);
  EXPECT_EQ(ReadFile(plain.log_path), "done\n");
}

TEST_F(ExecutorTest, WithItsLauncherGoneASupervisorIsReExecuted) {
  Result<std::unique_ptr<SupervisorLauncher>> launcher = SupervisorLauncher::Start();
  ASSERT_TRUE(launcher.ok()) << launcher.status().ToString();
  ASSERT_EQ(kill((*launcher)->pid(), SIGKILL), 0);
  ASSERT_TRUE(WaitUntil([&] {
    std::optional<ProcessStat> stat = ReadProcessStat((*launcher)->pid());
    return !stat.has_value() || stat->state == 'Z';
  }));
  LaunchSpec spec = Spec({"/bin/sh", "-c", "echo up; sleep 5"});
  Result<Supervision> s = Supervision::Launch(kSupervisorPrefix, spec, launcher->get());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  launched_.push_back(s->attempt_dir());
  EXPECT_NE(CmdlineOf(s->supervisor().pid).find("supervise"), std::string::npos)
      << "re-executed with its subcommand";
  ASSERT_TRUE(WaitUntil([&] { return ReadFile(spec.log_path) == "up\n"; }));
  ASSERT_TRUE(s->RequestCancel().ok());
  EXPECT_EQ(WaitForEnd(*s), State::kFinished);
  EXPECT_EQ(s->outcome()->kind, OutcomeKind::kCancelled);
}

TEST_F(ExecutorTest, MaskValuesAreHiddenAcrossReads) {
  // The value reaches the supervisor in two reads, split inside the value.
  LaunchSpec spec = Spec({"/bin/sh", "-c",
                          "printf 'abc-s3cr3t-VA'; sleep 0.3; printf 'LUE-4242-def\\n'; "
                          "printf 'tail s3cr3t-VALUE-424'"});
  spec.mask_values = {kSecret, "", "no"};
  Outcome o = Run(spec);
  EXPECT_EQ(o.exit_code, 0) << o.message;
  EXPECT_EQ(ReadFile(spec.log_path), "abc-***-def\ntail s3cr3t-VALUE-424");
  EXPECT_EQ(FilesHolding(root_, kSecret), std::vector<std::string>{});
}

TEST_F(ExecutorTest, ValuesShorterThanFourBytesAreNotMasked) {
  LaunchSpec spec = Spec({"/bin/echo", "on abc abcd"});
  spec.mask_values = {"on", "abc", "abcd"};
  Run(spec);
  EXPECT_EQ(ReadFile(spec.log_path), "on abc ***\n");
}

TEST_F(ExecutorTest, TheLogCapCountsMaskedBytes) {
  LaunchSpec spec = Spec({"/bin/sh", "-c", "printf '%s%s' \"$T\" \"$T\"; printf '0123456789'"});
  spec.secret_environment = {{"T", kSecret}};
  spec.log_cap_bytes = 10;
  Outcome o = Run(spec);
  EXPECT_TRUE(o.log_truncated);
  EXPECT_EQ(ReadFile(spec.log_path), "***01\n--- qinglong: 3 bytes truncated ---\n56789");
}

TEST_F(ExecutorTest, SecretsAreMaskedInTheTailAcrossReads) {
  LaunchSpec spec = Spec({"/bin/sh", "-c",
                          "seq 1 20000; printf 'end s3cr3t-VA'; sleep 0.3; "
                          "printf 'LUE-4242 done\\n'"});
  spec.mask_values = {kSecret};
  spec.log_cap_bytes = 2000;
  Outcome o = Run(spec);
  EXPECT_TRUE(o.log_truncated);
  EXPECT_TRUE(ReadFile(spec.log_path).ends_with("\n20000\nend *** done\n"));
  EXPECT_EQ(FilesHolding(root_, kSecret), std::vector<std::string>{});
}

TEST_F(ExecutorTest, SupervisionRunnerPassesSecretsAndMaskValues) {
  SupervisionRunner runner(kSupervisorPrefix, root_ + "/runs", root_);
  AttemptLaunch launch;
  launch.run_id = "run-1";
  launch.attempt_id = "attempt-7";
  launch.task_id = "task-1";
  launch.argv = {"/bin/sh", "-c", "echo \"$API_TOKEN and also-a-public-value\""};
  launch.environment = {{"QL_RUN_ID", "run-1"}, {"QL_ATTEMPT_ID", "attempt-7"}};
  launch.secret_environment = {{"API_TOKEN", kSecret}};
  launch.mask_values = {"also-a-public-value"};
  launch.timeout_ms = 10000;
  launch.log_path = root_ + "/log/runner.log";
  launch.log_cap_bytes = 1 << 20;
  Result<std::unique_ptr<AttemptHandle>> handle = runner.Launch(launch);
  ASSERT_TRUE(handle.ok()) << handle.status().ToString();
  launched_.push_back(root_ + "/runs/attempt-7");
  std::optional<AttemptOutcome> outcome;
  ASSERT_TRUE(WaitUntil([&] { return (outcome = (*handle)->Poll()).has_value(); }, 5000));
  EXPECT_EQ(outcome->kind, AttemptOutcome::Kind::kExited) << outcome->message;
  EXPECT_EQ(ReadFile(launch.log_path), "*** and ***\n");
  EXPECT_EQ(FilesHolding(root_, kSecret), std::vector<std::string>{});
}

TEST_F(ExecutorTest, ARunnerWithoutResultFsyncsSaysSoInEverySpec) {
  for (bool fsync_results : {true, false}) {
    SupervisionRunner runner(kSupervisorPrefix, root_ + "/runs", root_, nullptr, fsync_results);
    AttemptLaunch launch;
    launch.run_id = "run-1";
    launch.attempt_id = fsync_results ? "attempt-fsynced" : "attempt-unsynced";
    launch.task_id = "task-1";
    launch.argv = {"/bin/sh", "-c", "exit 3"};
    launch.environment = {{"QL_RUN_ID", "run-1"}, {"QL_ATTEMPT_ID", launch.attempt_id}};
    launch.timeout_ms = 10000;
    launch.log_path = root_ + "/log/" + launch.attempt_id + ".log";
    launch.log_cap_bytes = 1 << 20;
    Result<std::unique_ptr<AttemptHandle>> handle = runner.Launch(launch);
    ASSERT_TRUE(handle.ok()) << handle.status().ToString();
    const std::string dir = root_ + "/runs/" + launch.attempt_id;
    launched_.push_back(dir);
    std::optional<AttemptOutcome> outcome;
    ASSERT_TRUE(WaitUntil([&] { return (outcome = (*handle)->Poll()).has_value(); }, 5000));
    EXPECT_EQ(outcome->kind, AttemptOutcome::Kind::kExited) << outcome->message;
    EXPECT_EQ(outcome->exit_code, 3);
    Result<LaunchSpec> spec = internal::DecodeSpec(ReadFile(dir + "/spec.json"), "spec.json");
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    EXPECT_EQ(spec->fsync_result, fsync_results);
  }
  // A spec.json written before the field existed asks for an fsynced result.
  Result<LaunchSpec> older = internal::DecodeSpec(
      R"({"argv":["/bin/true"],"environment":[],"working_directory":"/","timeout_ms":1,)"
      R"("log_path":"/tmp/x.log","log_cap_bytes":1,"kill_grace_ms":1})",
      "spec.json");
  ASSERT_TRUE(older.ok()) << older.status().ToString();
  EXPECT_TRUE(older->fsync_result);
}

TEST_F(ExecutorTest, BadSecretEnvironmentIsRejected) {
  for (const char* reserved : {"PATH", "HOME", "QL_RUN_ID", "QL_ATTEMPT_ID"}) {
    LaunchSpec spec = Spec({"/bin/true"});
    spec.secret_environment = {{reserved, "value"}};
    ExpectRejected(spec, std::string(reserved) + " is reserved");
  }
  LaunchSpec spec = Spec({"/bin/true"});
  spec.environment.emplace_back("TOKEN", "public");
  spec.secret_environment = {{"TOKEN", "secret"}};
  ExpectRejected(spec, "TOKEN is repeated");
  spec = Spec({"/bin/true"});
  spec.secret_environment = {{"A=B", "secret"}};
  ExpectRejected(spec, "'A=B'");
  spec = Spec({"/bin/true"});
  spec.secret_environment = {{"A", std::string("x\0y", 3)}};
  ExpectRejected(spec, "value of A");
  spec = Spec({"/bin/true"});
  spec.mask_values = {std::string(1024 * 1024 + 1, 'm')};
  ExpectRejected(spec, "more than 1048576 bytes");
}

TEST_F(ExecutorTest, AnAttemptDirectoryIsLaunchedOnce) {
  LaunchSpec spec = Spec({"/bin/true"});
  Run(spec);
  Result<Supervision> again = Supervision::Launch(kSupervisorPrefix, spec);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().reason(), "exec_attempt_exists");
}

TEST_F(ExecutorTest, UnstartableSupervisorIsAnErrorAndLeavesNoSpec) {
  LaunchSpec spec = Spec({"/bin/true"});
  Result<Supervision> s = Supervision::Launch({"/nonexistent/ql-local", "supervise"}, spec);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().reason(), "exec_spawn_failed");
  EXPECT_NE(s.status().message().find("No such file or directory"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(spec.attempt_dir + "/spec.json"));
}

TEST_F(ExecutorTest, AdoptRejectsDirectoriesWithoutAProvableSupervisor) {
  Result<Supervision> none = Supervision::Adopt(root_ + "/nothing");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().reason(), "exec_attempt_not_found");

  std::filesystem::create_directories(root_ + "/half");
  std::ofstream(root_ + "/half/spec.json") << "{}";
  Result<Supervision> half = Supervision::Adopt(root_ + "/half");
  ASSERT_FALSE(half.ok());
  EXPECT_EQ(half.status().reason(), "exec_supervisor_unknown");

  std::ofstream(root_ + "/half/result.json") << "{\"outcome\": \"exited\"}";
  Result<Supervision> corrupt = Supervision::Adopt(root_ + "/half");
  ASSERT_FALSE(corrupt.ok());
  EXPECT_EQ(corrupt.status().reason(), "exec_corrupt_record");
  EXPECT_NE(corrupt.status().message().find("log_bytes_written"), std::string::npos)
      << corrupt.status().message();
}

TEST_F(ExecutorTest, OutcomeKindNamesRoundTrip) {
  for (OutcomeKind kind : {OutcomeKind::kExited, OutcomeKind::kSignaled, OutcomeKind::kTimedOut,
                           OutcomeKind::kCancelled, OutcomeKind::kSpawnFailed}) {
    EXPECT_EQ(ParseOutcomeKind(OutcomeKindName(kind)), kind);
  }
  EXPECT_EQ(OutcomeKindName(OutcomeKind::kTimedOut), "timed_out");
  EXPECT_FALSE(ParseOutcomeKind("lost").has_value());
}

}  // namespace
}  // namespace ql::exec

// The supervisor runs as this binary's `supervise` subcommand, as it does under the daemons.
int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "supervise") return ql::exec::SupervisorMain(argv[2]);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
