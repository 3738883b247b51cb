#include "ql/exec/supervision_runner.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace ql::exec {
namespace {

namespace fs = std::filesystem;

TEST(SupervisionRunnerTest, TaskIdThatIsNotOnePathComponentNamesNoWorkingDirectory) {
  std::string tmpl = (fs::temp_directory_path() / "ql-runner-XXXXXX").string();
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  const fs::path dir = tmpl;
  SupervisionRunner runner({"/bin/false"}, (dir / "run").string(), (dir / "work").string());
  for (const std::string& task_id :
       std::vector<std::string>{"", "..", "../escape", "a/b", std::string(129, 'a')}) {
    AttemptLaunch launch;
    launch.attempt_id = "attempt-1";
    launch.task_id = task_id;
    launch.argv = {"/bin/true"};
    auto launched = runner.Launch(launch);
    ASSERT_FALSE(launched.ok()) << task_id;
    EXPECT_EQ(launched.status().reason(), "invalid_task_id") << task_id;
  }
  // Nothing was created for them, and no supervisor was started.
  EXPECT_FALSE(fs::exists(dir / "work"));
  EXPECT_FALSE(fs::exists(dir / "escape"));
  EXPECT_FALSE(fs::exists(dir / "run"));
  fs::remove_all(dir);
}

// Runs `script` through `runner` as an attempt of project "p1" with the task's `limits` and
// `network`; returns the attempt's outcome and fills `log`.
std::optional<AttemptOutcome> RunThrough(SupervisionRunner& runner, const fs::path& dir,
                                         const std::string& attempt, const std::string& script,
                                         const TaskLimits& limits, bool network, std::string& log,
                                         Status* launch_error = nullptr, bool unconfined = false) {
  AttemptLaunch launch;
  launch.run_id = "run-" + attempt;
  launch.attempt_id = attempt;
  launch.project_id = "p1";
  launch.task_id = "task-1";
  launch.argv = {"/bin/sh", "-c", script};
  launch.environment = {{"QL_RUN_ID", launch.run_id}, {"QL_ATTEMPT_ID", attempt}};
  launch.timeout_ms = 20000;
  launch.log_path = (dir / "log" / (attempt + ".log")).string();
  launch.log_cap_bytes = 1 << 20;
  launch.limits = limits;
  launch.network = network;
  launch.unconfined = unconfined;
  fs::create_directories(dir / "log");
  auto handle = runner.Launch(launch);
  if (!handle.ok()) {
    if (launch_error != nullptr) *launch_error = handle.status();
    return std::nullopt;
  }
  std::optional<AttemptOutcome> outcome;
  for (int i = 0; i < 2000 && !(outcome = (*handle)->Poll()); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::ifstream in(launch.log_path);
  std::stringstream text;
  text << in.rdbuf();
  log = text.str();
  return outcome;
}

// A task asks for less than the installation allows, never for more; no network needs
// namespaces, and a host without them refuses such a run instead of running it networked.
TEST(SupervisionRunnerTest, TaskLimitsOnlyLowerTheInstallationsAndNoNetworkNeedsNamespaces) {
  std::string tmpl = (fs::temp_directory_path() / "ql-runner-XXXXXX").string();
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  const fs::path dir = tmpl;
  SupervisionRunner runner({"/proc/self/exe", "supervise"}, (dir / "run").string(),
                           (dir / "work").string());
  RunnerIsolation host;
  host.report.level = "off";
  host.report.mode = Confinement::Mode::kHost;
  host.limits.open_files = 100;
  runner.SetIsolation(host);
  std::string log;
  TaskLimits asks_less;
  asks_less.open_files = 40;
  std::optional<AttemptOutcome> o = RunThrough(runner, dir, "a1", "ulimit -n", asks_less, true, log);
  ASSERT_TRUE(o.has_value());
  EXPECT_EQ(o->kind, AttemptOutcome::Kind::kExited) << o->message;
  EXPECT_EQ(log, "40\n");
  TaskLimits asks_more;
  asks_more.open_files = 5000;
  o = RunThrough(runner, dir, "a2", "ulimit -n", asks_more, true, log);
  ASSERT_TRUE(o.has_value());
  EXPECT_EQ(log, "100\n") << "the installation's limit is the ceiling";
  Status refused;
  o = RunThrough(runner, dir, "a3", "true", {}, /*network=*/false, log, &refused);
  EXPECT_FALSE(o.has_value());
  EXPECT_EQ(refused.reason(), "confinement_unavailable") << refused.ToString();
  EXPECT_FALSE(fs::exists(dir / "run" / "a3")) << "nothing was started";
  fs::remove_all(dir);
}

// A task that asks to run unconfined is refused unless the installation allows it.
TEST(SupervisionRunnerTest, UnconfinedTasksNeedTheInstallationsConsent) {
  std::string tmpl = (fs::temp_directory_path() / "ql-runner-XXXXXX").string();
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  const fs::path dir = tmpl;
  SupervisionRunner runner({"/proc/self/exe", "supervise"}, (dir / "run").string(),
                           (dir / "work").string());
  RunnerIsolation isolation;
  isolation.report = ProbeIsolation({});
  isolation.uids = std::make_shared<ProjectUids>(
      *ProjectUids::Open((dir / "uids").string(), 1900000100, 1900000200));
  runner.SetIsolation(isolation);
  std::string log;
  Status refused;
  EXPECT_FALSE(RunThrough(runner, dir, "u1", "id -u", {}, true, log, &refused, true));
  EXPECT_EQ(refused.reason(), "confinement_unavailable") << refused.ToString();
  EXPECT_NE(refused.message().find("--allow-unconfined-tasks"), std::string::npos);
  isolation.allow_unconfined = true;
  runner.SetIsolation(isolation);
  std::optional<AttemptOutcome> o = RunThrough(runner, dir, "u2", "id -u", {}, true, log, nullptr, true);
  ASSERT_TRUE(o.has_value());
  EXPECT_EQ(o->kind, AttemptOutcome::Kind::kExited) << o->message;
  EXPECT_EQ(log, std::to_string(geteuid()) + "\n") << "as the daemon's user";
  // The same runner confines a task that does not ask.
  o = RunThrough(runner, dir, "u3", "id -u", {}, true, log);
  ASSERT_TRUE(o.has_value());
  if (isolation.report.Rank() > 0) EXPECT_EQ(log, "1900000100\n");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ql::exec
