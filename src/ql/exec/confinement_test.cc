// Confined commands through the real supervisor (this test binary's `supervise` subcommand, see
// executor_test.cc): what a command sees, who it runs as, and the limits that end it. As root
// (as CI runs) the host must allow the full level; the escape suite (tests/escape/) tries the
// same boundaries through the daemons.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "gtest/gtest.h"
#include "ql/exec/confinement.h"
#include "ql/exec/executor.h"

namespace ql::exec {
namespace {

const std::vector<std::string> kPrefix = {"/proc/self/exe", "supervise"};
constexpr uint32_t kUid = 1900000777;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Counts the host's processes whose argv[0] is `name`.
int ProcessesNamed(const std::string& name) {
  int found = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string pid = entry.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string cmdline = ReadAll("/proc/" + pid + "/cmdline");
    if (cmdline.substr(0, cmdline.find('\0')) == name) ++found;
  }
  return found;
}

class ConfinementTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { report_ = new IsolationReport(ProbeIsolation({})); }

  void SetUp() override {
    if (geteuid() == 0) {
      ASSERT_EQ(report_->level, "full") << report_->Summary();
    } else {
      ASSERT_NE(report_->Rank(), 0) << report_->Summary();
    }
    // Outside /tmp (every command has its own) and open to everyone: only the confinement keeps
    // a command from the "daemon's" files below.
    std::string pattern = std::filesystem::current_path().string() + "/ql_confine_test.XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
    chmod(root_.c_str(), 0755);
    std::filesystem::create_directories(root_ + "/data/work/task");
    std::filesystem::create_directories(root_ + "/other");
    std::ofstream(root_ + "/data/owner.token") << "owner-token-value\n";
    std::ofstream(root_ + "/other/secret.txt") << "other project's file\n";
    for (const char* dir : {"/data", "/data/work", "/other"}) chmod((root_ + dir).c_str(), 0755);
    chmod((root_ + "/data/owner.token").c_str(), 0644);
    if (geteuid() == 0) {
      ASSERT_EQ(chown((root_ + "/data/work/task").c_str(), kUid, kUid), 0);
    }
  }

  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }

  Confinement Base() const {
    Confinement c;
    c.mode = report_->mode;
    c.uid = c.gid = kUid;
    c.hidden_paths = {root_ + "/data", root_ + "/other"};
    c.own_directory = root_ + "/data/work/task";
    c.cgroups = report_->cgroups;
    return c;
  }

  // Runs `script` with `sh -c` confined by `c`; returns the outcome and fills `log`.
  Outcome Run(const std::string& script, const Confinement& c, std::string& log,
              int64_t timeout_ms = 20000, std::string working_directory = "") {
    return RunArgv({"/bin/sh", "-c", script}, c, log, timeout_ms, std::move(working_directory));
  }

  Outcome RunArgv(std::vector<std::string> argv, const Confinement& c, std::string& log,
                  int64_t timeout_ms = 20000, std::string working_directory = "") {
    LaunchSpec spec;
    spec.attempt_dir = root_ + "/run/a" + std::to_string(++n_);
    spec.argv = std::move(argv);
    spec.environment = {{"QL_RUN_ID", "r"}, {"QL_ATTEMPT_ID", "a"}};
    spec.working_directory =
        working_directory.empty() ? root_ + "/data/work/task" : working_directory;
    spec.timeout_ms = timeout_ms;
    spec.log_path = root_ + "/log/" + std::to_string(n_) + ".log";
    spec.log_cap_bytes = 1 << 20;
    spec.kill_grace_ms = 200;
    spec.confinement = c;
    std::filesystem::create_directories(root_ + "/log");
    Result<Supervision> s = Supervision::Launch(kPrefix, spec);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (!s.ok()) return Outcome{};
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms + 5000);
    Supervision::State state;
    while ((state = s->Poll()) == Supervision::State::kRunning &&
           std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(state, Supervision::State::kFinished);
    log = ReadAll(spec.log_path);
    return s->outcome().value_or(Outcome{});
  }

  static IsolationReport* report_;
  std::string root_;
  int n_ = 0;
};

IsolationReport* ConfinementTest::report_ = nullptr;

TEST_F(ConfinementTest, RunsAsTheProjectUidWithoutPrivileges) {
  std::string log;
  Outcome o = Run("id -u; id -g; grep -E '^(NoNewPrivs|CapEff|CapBnd):' /proc/self/status", Base(),
                  log);
  ASSERT_EQ(o.kind, OutcomeKind::kExited) << o.message;
  EXPECT_EQ(o.exit_code, 0) << log;
  EXPECT_NE(log.find(std::to_string(kUid) + "\n" + std::to_string(kUid) + "\n"), std::string::npos)
      << log;
  EXPECT_NE(log.find("NoNewPrivs:\t1"), std::string::npos) << log;
  EXPECT_NE(log.find("CapEff:\t0000000000000000"), std::string::npos) << log;
  EXPECT_NE(log.find("CapBnd:\t0000000000000000"), std::string::npos) << log;
  EXPECT_NE(o.confinement.find("uid " + std::to_string(kUid)), std::string::npos) << o.confinement;
}

TEST_F(ConfinementTest, HiddenPathsAreEmptyAndTheWorkingDirectoryIsWritable) {
  std::string log;
  Outcome o = Run(
      "cat ../../owner.token; cat " + root_ + "/data/owner.token; ls -A " + root_ +
          "/other; echo made > here.txt && cat here.txt; touch /etc/planted 2>&1 || echo ro-etc;"
          "touch ../planted 2>&1 || echo ro-data; echo t > /tmp/t && echo tmp-ok",
      Base(), log);
  ASSERT_EQ(o.kind, OutcomeKind::kExited) << o.message;
  EXPECT_EQ(log.find("owner-token-value"), std::string::npos) << log;
  EXPECT_EQ(log.find("secret.txt"), std::string::npos) << log;
  EXPECT_NE(log.find("made\n"), std::string::npos) << log;
  EXPECT_NE(log.find("ro-etc"), std::string::npos) << log;
  EXPECT_NE(log.find("ro-data"), std::string::npos) << log;
  EXPECT_NE(log.find("tmp-ok"), std::string::npos) << log;
  EXPECT_EQ(ReadAll(root_ + "/data/work/task/here.txt"), "made\n");
  EXPECT_FALSE(std::filesystem::exists("/etc/planted"));
  EXPECT_FALSE(std::filesystem::exists(root_ + "/data/work/planted"));
  EXPECT_FALSE(std::filesystem::exists("/tmp/t")) << "/tmp is private";
}

TEST_F(ConfinementTest, SeesOnlyItsOwnProcesses) {
  std::string log;
  Outcome o = Run("ls /proc | grep -c '^[0-9]'; kill -0 " + std::to_string(getpid()) +
                      " 2>&1 || echo no-daemon",
                  Base(), log);
  ASSERT_EQ(o.kind, OutcomeKind::kExited) << o.message;
  // init, sh, ls, grep (and maybe a subshell): nothing of the host's.
  const int seen = std::atoi(log.c_str());
  EXPECT_GE(seen, 2) << log;
  EXPECT_LE(seen, 6) << log;
  EXPECT_NE(log.find("no-daemon"), std::string::npos) << log;
}

TEST_F(ConfinementTest, NoProcessOutlivesTheCommand) {
  std::string log;
  const std::string marker = "ql-confine-left-behind-" + std::to_string(getpid());
  Outcome o = Run("setsid sh -c 'exec -a " + marker + " sleep 300' & sleep 0.2; echo started",
                  Base(), log);
  ASSERT_EQ(o.kind, OutcomeKind::kExited) << o.message;
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(ProcessesNamed(marker), 0) << "a process of the attempt outlived it";
}

TEST_F(ConfinementTest, NetworkNoneLeavesOnlyLoopback) {
  Confinement c = Base();
  c.network = false;
  std::string log;
  Outcome o = Run("echo $(ls /sys/class/net); echo $(tail -n +3 /proc/net/dev | cut -d: -f1);"
                  "cat /sys/class/net/lo/operstate", c, log);
  ASSERT_EQ(o.kind, OutcomeKind::kExited) << o.message;
  // Both views name the loopback interface only, and it is up.
  EXPECT_EQ(log, "lo\nlo\nunknown\n") << log;
  std::string shared;
  o = Run("tail -n +3 /proc/net/dev | wc -l", Base(), shared);
  EXPECT_GT(std::atoi(shared.c_str()), 1) << "by default the host's interfaces are there";
}

TEST_F(ConfinementTest, MemoryLimitEndsTheCommandWithItsCode) {
  if (report_->cgroups.version == 0) GTEST_SKIP() << "no cgroup: " << report_->limits;
  Confinement c = Base();
  c.limits.memory_bytes = 64 << 20;
  std::string log;
  // The shell holds 256 MiB in a variable.
  Outcome o = Run("x=$(head -c 268435456 /dev/zero | tr '\\0' a); echo survived", c, log);
  EXPECT_EQ(o.error_code, "memory_limit_exceeded") << o.message << "\n" << log;
}

TEST_F(ConfinementTest, PidsLimitEndsAForkBombWithItsCode) {
  if (report_->cgroups.version == 0) GTEST_SKIP() << "no cgroup: " << report_->limits;
  Confinement c = Base();
  c.limits.pids = 16;
  std::string log;
  Outcome o = Run("i=0; while [ $i -lt 64 ]; do sleep 5 & i=$((i+1)); done; wait", c, log);
  EXPECT_EQ(o.error_code, "pids_limit_exceeded") << o.message << "\n" << log;
  EXPECT_NE(o.exit_code.value_or(0), 0);
}

TEST_F(ConfinementTest, OpenFilesLimitHolds) {
  Confinement c = Base();
  c.limits.open_files = 32;
  std::string log;
  Outcome o = Run("ulimit -n", c, log);
  ASSERT_EQ(o.kind, OutcomeKind::kExited) << o.message;
  EXPECT_EQ(log, "32\n");
}

TEST_F(ConfinementTest, AMissingExecutableIsASpawnFailure) {
  std::string log;
  Outcome o = RunArgv({"/nonexistent/tool"}, Base(), log);
  EXPECT_EQ(o.kind, OutcomeKind::kSpawnFailed);
  EXPECT_NE(o.message.find("cannot execute /nonexistent/tool"), std::string::npos) << o.message;
  EXPECT_EQ(o.error_code, "") << "the command's failure, not the confinement's";
}

TEST_F(ConfinementTest, AWorkingDirectoryThatCannotBeEnteredIsNamed) {
  std::string log;
  Outcome o = Run("true", Base(), log);
  ASSERT_EQ(o.kind, OutcomeKind::kExited);
  std::filesystem::remove_all(root_ + "/data/work/task");
  o = Run("true", Base(), log);
  EXPECT_EQ(o.kind, OutcomeKind::kSpawnFailed);
  EXPECT_NE(o.message.find("cannot change to working directory"), std::string::npos) << o.message;
}

// A working directory that resolves into a hidden path is refused, however it is named: by its
// path or through a link a command left in its own directory.
TEST_F(ConfinementTest, AWorkingDirectoryInAHiddenPathIsRefused) {
  std::string log;
  ASSERT_EQ(symlink("../..", (root_ + "/data/work/task/up").c_str()), 0);
  for (const std::string& wd : {root_ + "/data", root_ + "/data/work/task/up", root_ + "/other"}) {
    Outcome o = Run("cat owner.token; echo ran", Base(), log, 20000, wd);
    EXPECT_EQ(o.kind, OutcomeKind::kSpawnFailed) << wd << ": " << log;
    EXPECT_NE(o.message.find("which commands must not see"), std::string::npos) << o.message;
    EXPECT_EQ(log.find("owner-token-value"), std::string::npos);
  }
}

// A working directory the command's uid does not own stays read-only; one it owns is writable;
// "/" (which holds every mount) never becomes writable.
TEST_F(ConfinementTest, OnlyAnOwnedWorkingDirectoryIsWritable) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to hand a directory to another uid";
  const std::string outside = std::filesystem::current_path().string() + "/ql-confine-" +
                              std::to_string(getpid());
  std::filesystem::create_directories(outside + "/open");
  std::filesystem::create_directories(outside + "/owned");
  chmod(outside.c_str(), 0755);
  chmod((outside + "/open").c_str(), 01777);  // world-writable on the host
  ASSERT_EQ(chown((outside + "/owned").c_str(), kUid, kUid), 0);
  std::string log;
  Outcome o = Run("touch " + outside + "/open/from-root 2>/dev/null && echo wrote; pwd", Base(),
                  log, 20000, "/");
  ASSERT_EQ(o.kind, OutcomeKind::kExited) << o.message;
  EXPECT_EQ(log, "/\n");
  o = Run("touch here 2>/dev/null && echo wrote; pwd", Base(), log, 20000, outside + "/open");
  ASSERT_EQ(o.kind, OutcomeKind::kExited) << o.message;
  EXPECT_EQ(log, outside + "/open\n");
  o = Run("touch here && echo wrote", Base(), log, 20000, outside + "/owned");
  ASSERT_EQ(o.kind, OutcomeKind::kExited) << o.message;
  EXPECT_EQ(log, "wrote\n");
  EXPECT_FALSE(std::filesystem::exists(outside + "/open/from-root"));
  EXPECT_FALSE(std::filesystem::exists(outside + "/open/here"));
  EXPECT_TRUE(std::filesystem::exists(outside + "/owned/here"));
  std::filesystem::remove_all(outside);
}

// The namespace's init is not dumpable: the command cannot read its environment or memory,
// which are a copy of the supervisor's.
TEST_F(ConfinementTest, TheInitsEnvironmentIsOutOfReach) {
  std::string log;
  Outcome o = Run("cat /proc/1/environ >/dev/null 2>&1 && echo read-environ;"
                  "head -c 1 /proc/1/mem >/dev/null 2>&1 && echo read-mem; echo done",
                  Base(), log);
  ASSERT_EQ(o.kind, OutcomeKind::kExited) << o.message;
  EXPECT_EQ(log, "done\n");
}

// Launch returns once the command runs, not when it ends (the namespace's init holds none of the
// supervisor's files), and a cancel ends the command and everything in its namespace.
TEST_F(ConfinementTest, LaunchReturnsWhileTheCommandRunsAndCancelEndsIt) {
  LaunchSpec spec;
  spec.attempt_dir = root_ + "/run/long";
  spec.argv = {"/bin/sh", "-c", "sleep 30 & sleep 30"};
  spec.environment = {{"QL_RUN_ID", "r"}, {"QL_ATTEMPT_ID", "a"}};
  spec.working_directory = root_ + "/data/work/task";
  spec.timeout_ms = 60000;
  spec.log_path = root_ + "/long.log";
  spec.log_cap_bytes = 1 << 20;
  spec.kill_grace_ms = 200;
  spec.confinement = Base();
  const auto start = std::chrono::steady_clock::now();
  Result<Supervision> s = Supervision::Launch(kPrefix, spec);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  EXPECT_EQ(s->Poll(), Supervision::State::kRunning);
  ASSERT_TRUE(s->RequestCancel().ok());
  Supervision::State state;
  for (int i = 0; i < 1000 && (state = s->Poll()) == Supervision::State::kRunning; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(state, Supervision::State::kFinished);
  EXPECT_EQ(s->outcome()->kind, OutcomeKind::kCancelled) << s->outcome()->message;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST(ProjectUidsTest, AssignsStableUidsFromTheRange) {
  char pattern[] = "/tmp/ql_uids_test.XXXXXX";
  ASSERT_NE(mkdtemp(pattern), nullptr);
  const std::string file = std::string(pattern) + "/uids";
  Result<ProjectUids> uids = ProjectUids::Open(file, 5000, 5001);
  ASSERT_TRUE(uids.ok());
  EXPECT_EQ(*uids->UidOf("p1"), 5000u);
  EXPECT_EQ(*uids->UidOf("p2"), 5001u);
  EXPECT_EQ(*uids->UidOf("p1"), 5000u);
  Result<ProjectUids> again = ProjectUids::Open(file, 5000, 5001);
  EXPECT_EQ(*again->UidOf("p2"), 5001u) << "stable across opens";
  Result<uint32_t> full = again->UidOf("p3");
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.status().reason(), "uid_range_exhausted");
  EXPECT_EQ(again->UidOf("../x").status().reason(), "invalid_project_id");
  EXPECT_EQ(ParseUidRange("0-5").status().reason(), "invalid_uid_range");
  EXPECT_EQ(ParseUidRange("10-5").status().reason(), "invalid_uid_range");
  EXPECT_EQ(*ParseUidRange("10-20"), (std::pair<uint32_t, uint32_t>(10, 20)));
  std::filesystem::remove_all(pattern);
}

}  // namespace
}  // namespace ql::exec
