// The daemon logs of the cluster profile (README "Daemon log"): a replica says how remote runs
// ended and what a recovery cycle settled; a replica and a worker reopen their --log-file on
// SIGHUP, and the worker's supervisor launcher holds neither log file; a slow request is logged
// past --slow-request-ms.

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cluster_harness.h"
#include "cluster_workers_fixture.h"
#include "harness.h"

namespace ql::itest {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;

class ClusterDaemonLogTest : public ClusterWorkersTest {
 protected:
  // The arguments of a replica writing JSON lines to `file`.
  std::vector<std::string> LoggingReplicaArgs(const std::string& file) const {
    std::vector<std::string> args = ReplicaArgs(/*admin=*/true);
    args.insert(args.end(), {"--log-format", "json", "--log-file", file});
    return args;
  }
};

// Returns the first JSON line of the file at `path` whose event is `event` and whose `key` starts
// with `value` (any value when `key` is empty), or null.
json FindEvent(const std::string& path, const std::string& event, const std::string& key = "",
               const std::string& value = "") {
  std::istringstream in(ReadFile(path));
  for (std::string line; std::getline(in, line);) {
    json j = json::parse(line, nullptr, false);
    if (!j.is_object() || j.value("event", "") != event) continue;
    if (key.empty()) return j;
    if (j.contains(key) && j[key].is_string() && j[key].get<std::string>().find(value) == 0) {
      return j;
    }
  }
  return nullptr;
}

// Waits (at most 30 s) for FindEvent to find the line; returns it, or null.
json WaitEvent(const std::string& path, const std::string& event, const std::string& key = "",
               const std::string& value = "") {
  json found;
  WaitFor(
      [&] {
        found = FindEvent(path, event, key, value);
        return !found.is_null();
      },
      seconds(30));
  return found;
}

// The files process `pid` has open, as /proc shows them.
std::vector<std::string> OpenFiles(pid_t pid) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& fd : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    std::error_code link_ec;
    const fs::path target = fs::read_symlink(fd.path(), link_ec);
    if (!link_ec) files.push_back(target.string());
  }
  return files;
}

// The children of process `pid` (of all its threads).
std::vector<pid_t> Children(pid_t pid) {
  std::vector<pid_t> children;
  std::error_code ec;
  for (const auto& task : fs::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    std::istringstream in(ReadFile(task.path().string() + "/children"));
    for (pid_t child; in >> child;) children.push_back(child);
  }
  return children;
}

bool Holds(pid_t pid, const std::string& path) {
  for (const std::string& file : OpenFiles(pid)) {
    if (file == path) return true;
  }
  return false;
}

TEST_F(ClusterDaemonLogTest, TheReplicaSaysHowRemoteRunsEndedAndWhatRecoverySettled) {
  const std::string file = Log("replica-daemon");
  Replica a("replica-a", Log("a"));
  ASSERT_TRUE(a.Start(LoggingReplicaArgs(file)));
  std::unique_ptr<ChildProcess> victim = StartWorker("victim", a, 3);
  const std::string fail = Task(a, "fail", "echo oops; exit 3");
  const std::string slow = Task(a, "slow", "sleep 30", {{"timeoutMs", 1500}});
  const std::string endless = Task(a, "endless", "sleep 60");
  const std::string failed_run = Start(a, fail);
  const std::string timed_out_run = Start(a, slow);
  const std::string lost_run = Start(a, endless);
  ASSERT_TRUE(WaitStatus(a, failed_run, "failed", 30)) << Status(a, failed_run);
  ASSERT_TRUE(WaitStatus(a, timed_out_run, "timed_out", 30)) << Status(a, timed_out_run);

  const json failed = WaitEvent(file, "run.failed", "run", failed_run);
  ASSERT_FALSE(failed.is_null()) << ReadFile(file);
  EXPECT_EQ(failed["level"], "warn");
  EXPECT_EQ(failed["task"], fail);
  EXPECT_EQ(failed["exit"], 3);
  EXPECT_EQ(failed["attempt"], 1);
  const json timed_out = WaitEvent(file, "run.timed_out", "run", timed_out_run);
  ASSERT_FALSE(timed_out.is_null()) << ReadFile(file);
  EXPECT_EQ(timed_out["level"], "warn");
  EXPECT_EQ(timed_out["task"], slow);

  // The worker dies under a running command: after the lease (3 s) the recovery cycle (every
  // second) finds the attempt lost, ends the run (no retry) and says so.
  ASSERT_TRUE(WaitStatus(a, lost_run, "running", 30)) << Status(a, lost_run);
  EXPECT_TRUE(FindEvent(file, "recovery.round").is_null()) << "nothing to settle yet";
  victim->Kill();
  ASSERT_TRUE(WaitStatus(a, lost_run, "failed", 60)) << Status(a, lost_run);
  const json lost = WaitEvent(file, "run.lost", "run", lost_run);
  ASSERT_FALSE(lost.is_null()) << ReadFile(file);
  EXPECT_EQ(lost["then"], "failed");
  const json round = WaitEvent(file, "recovery.round");
  ASSERT_FALSE(round.is_null()) << ReadFile(file);
  EXPECT_EQ(round["level"], "info");
  EXPECT_GE(round["lost"].get<int64_t>(), 1);
  EXPECT_EQ(round["errors"], 0);
  EXPECT_EQ(a.Stop(), 0);
}

// What a rotation does (rename, then SIGHUP) with a replica and a worker: each goes on in a new
// file at the path, and afterwards no process holds a rotated file open — not the daemons, and
// not the worker's supervisor launcher, forked after the worker opened its log and holding no
// descriptor of it. A request slower than --slow-request-ms is one of the replica's new lines.
TEST_F(ClusterDaemonLogTest, SighupReopensTheLogFilesOfAReplicaAndAWorker) {
  const std::string replica_file = Log("replica-daemon");
  const std::string worker_file = Log("worker-daemon");
  std::vector<std::string> args = LoggingReplicaArgs(replica_file);
  args.insert(args.end(), {"--slow-request-ms", "200"});
  Replica a("replica-a", Log("a"));
  ASSERT_TRUE(a.Start(args));
  std::unique_ptr<ChildProcess> worker =
      StartWorker("w1", a, 1, "", {"--log-format", "json", "--log-file", worker_file});
  ASSERT_FALSE(WaitEvent(replica_file, "daemon.started").is_null()) << ReadFile(replica_file);
  ASSERT_FALSE(WaitEvent(worker_file, "worker", "message", "registered session").is_null())
      << ReadFile(worker_file);
  const std::vector<pid_t> launchers = Children(worker->pid());
  ASSERT_FALSE(launchers.empty()) << "the worker has no supervisor launcher";

  const std::string rotated_replica = replica_file + ".1";
  const std::string rotated_worker = worker_file + ".1";
  fs::rename(replica_file, rotated_replica);
  fs::rename(worker_file, rotated_worker);
  a.Signal(SIGHUP);
  worker->Signal(SIGHUP);
  ASSERT_FALSE(WaitEvent(replica_file, "log.reopened").is_null()) << ReadFile(rotated_replica);
  ASSERT_FALSE(WaitEvent(worker_file, "log.reopened").is_null()) << ReadFile(rotated_worker);

  // A client that sends its body 600 ms after the head.
  EXPECT_GT(SlowBodyRequest(a.port(), "POST", "/api/v1/tasks", "{}", api_token_, 600), 0);
  const json slow = WaitEvent(replica_file, "http.slow_request", "path", "/api/v1/tasks");
  ASSERT_FALSE(slow.is_null()) << ReadFile(replica_file);
  EXPECT_EQ(slow["level"], "warn");
  EXPECT_GE(slow["ms"].get<int64_t>(), 200);
  EXPECT_EQ(slow["principal"], "itest");
  EXPECT_TRUE(FindEvent(rotated_replica, "http.slow_request").is_null());

  EXPECT_FALSE(Holds(a.pid(), rotated_replica)) << "the replica still holds its rotated log";
  EXPECT_FALSE(Holds(worker->pid(), rotated_worker)) << "the worker still holds its rotated log";
  for (const pid_t launcher : launchers) {
    for (const std::string& path : {rotated_worker, worker_file}) {
      EXPECT_FALSE(Holds(launcher, path)) << "process " << launcher << " holds " << path;
    }
  }

  // SIGHUP stopped neither; their last lines land in the new files.
  EXPECT_EQ(worker->Stop(), 0);
  EXPECT_EQ(a.Stop(), 0);
  EXPECT_FALSE(FindEvent(worker_file, "worker", "message", "received").is_null())
      << ReadFile(worker_file);
  EXPECT_TRUE(FindEvent(rotated_worker, "worker", "message", "received").is_null());
  EXPECT_FALSE(FindEvent(replica_file, "daemon.stopping").is_null()) << ReadFile(replica_file);
  EXPECT_TRUE(FindEvent(rotated_replica, "daemon.stopping").is_null());
}

}  // namespace
}  // namespace ql::itest
