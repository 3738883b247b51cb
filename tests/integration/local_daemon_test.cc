// End-to-end tests of ql-local driven through the ql client, as a user would.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <thread>

#include "harness.h"
#include "ql/core/jitter.h"
#include "ql/core/rfc3339.h"
#include "ql/testing/test_pki.h"

namespace ql::itest {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

class LocalDaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_ = tmp_.path() + "/data";
    daemon_ = std::make_unique<LocalDaemon>(data_, profile());
    ASSERT_TRUE(daemon_->Start()) << daemon_->log();
  }
  void TearDown() override {
    if (daemon_ && daemon_->running()) daemon_->Stop();
    // Supervised commands outlive the daemon by design; end any a test left behind.
    RunCommand({"/usr/bin/pkill", "-KILL", "-f", tmp_.path()});
  }
  virtual std::string profile() const { return "standalone"; }

  std::string AddTask(const std::string& name, const std::string& shell,
                      const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"task", "add", name, "--shell", shell};
    args.insert(args.end(), extra.begin(), extra.end());
    CommandResult r = daemon_->Ql(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return Trim(r.out);
  }

  std::string AddTrigger(const std::string& task_id, const std::string& cron,
                         const std::string& tz = "UTC", const std::string& misfire = "skip") {
    CommandResult r = daemon_->Ql(
        {"trigger", "add", task_id, "--cron", cron, "--tz", tz, "--misfire", misfire});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return Trim(r.out);
  }

  json Runs(const std::vector<std::string>& filter = {}) {
    std::vector<std::string> args = {"run", "list", "--limit", "500", "--json"};
    args.insert(args.end(), filter.begin(), filter.end());
    CommandResult r = daemon_->Ql(args);
    if (r.exit_code != 0) return json::array();
    json j = json::parse(r.out, nullptr, false);
    return j.is_object() && j["items"].is_array() ? j["items"] : json::array();
  }

  json Run(const std::string& run_id) {
    CommandResult r = daemon_->Ql({"run", "show", run_id, "--json"});
    json j = json::parse(r.out, nullptr, false);
    return j.is_discarded() ? json::object() : j;
  }

  std::string WaitForStatus(const std::string& run_id, const std::set<std::string>& wanted,
                            seconds timeout = seconds(20)) {
    std::string status;
    WaitFor(
        [&] {
          status = Run(run_id).value("status", "");
          return wanted.count(status) > 0;
        },
        timeout);
    return status;
  }

  std::string Db() const { return data_ + "/db/qinglong.db"; }

  TempDir tmp_;
  std::string data_;
  std::unique_ptr<LocalDaemon> daemon_;
};

TEST_F(LocalDaemonTest, EverySecondTriggerRunsSucceedWithTheirOutputInLogs) {
  const std::string task = AddTask("hello", "echo hello-from-$QL_RUN_ID");
  ASSERT_FALSE(task.empty());
  const std::string trigger = AddTrigger(task, "* * * * * *");
  ASSERT_FALSE(trigger.empty());

  ASSERT_TRUE(WaitFor(
      [&] {
        int ok = 0;
        for (const json& r : Runs({"--trigger", trigger})) ok += r["status"] == "succeeded";
        return ok >= 3;
      },
      seconds(20)))
      << daemon_->log();

  for (const json& r : Runs({"--trigger", trigger})) {
    EXPECT_EQ(r["task_id"], task);
    EXPECT_EQ(r["trigger_id"], trigger);
    ASSERT_TRUE(r["scheduled_for"].is_string());
    if (r["status"] != "succeeded") continue;
    EXPECT_EQ(r["exit_code"], 0);
    CommandResult log = daemon_->Ql({"run", "log", r["id"].get<std::string>()});
    EXPECT_EQ(log.exit_code, 0) << log.err;
    EXPECT_NE(log.out.find("hello-from-" + r["id"].get<std::string>()), std::string::npos)
        << log.out;
  }
  // Each occurrence is one run: scheduled times are distinct whole seconds.
  std::set<std::string> scheduled;
  json runs = Runs({"--trigger", trigger});
  for (const json& r : runs) scheduled.insert(r["scheduled_for"].get<std::string>());
  EXPECT_EQ(scheduled.size(), runs.size());
}

TEST_F(LocalDaemonTest, CrashWhileRunningNeverAdmitsTwiceAndReconcilesTheAttempt) {
  const std::string task = AddTask("slow", "sleep 2; echo finished");
  const std::string trigger = AddTrigger(task, "*/3 * * * * *", "UTC", "fire_once");
  std::string running_id;
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const json& r : Runs({"--trigger", trigger})) {
          if (r["status"] == "running") running_id = r["id"];
        }
        return !running_id.empty();
      },
      seconds(20)))
      << daemon_->log();

  daemon_->Kill();
  std::this_thread::sleep_for(milliseconds(500));
  ASSERT_TRUE(daemon_->Start()) << daemon_->log();

  // The command kept running under its supervisor and its outcome is recorded after restart.
  EXPECT_EQ(WaitForStatus(running_id, {"succeeded", "failed", "lost"}), "succeeded")
      << daemon_->log();
  CommandResult log = daemon_->Ql({"run", "log", running_id});
  EXPECT_NE(log.out.find("finished"), std::string::npos);

  // Scheduling resumes: more occurrences after the restart.
  const size_t before = Runs({"--trigger", trigger}).size();
  ASSERT_TRUE(WaitFor([&] { return Runs({"--trigger", trigger}).size() >= before + 2; },
                      seconds(15)));
  daemon_->Stop();

  EXPECT_TRUE(SqliteQuery(Db(),
                          "SELECT idempotency_key, COUNT(*) FROM runs WHERE idempotency_key IS "
                          "NOT NULL GROUP BY idempotency_key HAVING COUNT(*) > 1")
                  .empty());
  EXPECT_TRUE(SqliteQuery(Db(),
                          "SELECT run_id, COUNT(*) FROM run_attempts GROUP BY run_id "
                          "HAVING COUNT(*) > 1")
                  .empty());
}

TEST_F(LocalDaemonTest, CommandPastItsTimeoutEndsTimedOut) {
  const std::string task = AddTask("sleeper", "sleep 30", {"--timeout", "1s"});
  CommandResult start = daemon_->Ql({"run", "start", task});
  ASSERT_EQ(start.exit_code, 0) << start.err;
  const std::string run_id = Trim(start.out);
  EXPECT_EQ(WaitForStatus(run_id, {"timed_out", "failed", "succeeded"}, seconds(15)),
            "timed_out");
}

TEST_F(LocalDaemonTest, CancelEndsARunningCommandCancelled) {
  const std::string task = AddTask("long", "sleep 29.5; echo never");
  CommandResult start = daemon_->Ql({"run", "start", task});
  ASSERT_EQ(start.exit_code, 0) << start.err;
  const std::string run_id = Trim(start.out);
  ASSERT_EQ(WaitForStatus(run_id, {"running"}), "running");
  CommandResult cancel = daemon_->Ql({"run", "cancel", run_id});
  ASSERT_EQ(cancel.exit_code, 0) << cancel.err;
  EXPECT_EQ(WaitForStatus(run_id, {"cancelled", "failed", "succeeded"}), "cancelled");
  // Nothing of the command's process group survives.
  EXPECT_EQ(RunCommand({"/usr/bin/pgrep", "-f", "sleep 29.5"}).out, "");
}

TEST_F(LocalDaemonTest, AChildStartedWithSetsidDoesNotOutliveItsRun) {
  // `setsid sh -c 'sleep ...' &` leaves the run's process group and session; the command waits
  // until it has, so the group's signals cannot end it by chance.
  auto escaping = [&](const std::string& name, const std::string& then) {
    const std::string seconds = "301." + std::to_string(getpid()) + std::to_string(name.size());
    const std::string file = "./" + name;  // in the task's own directory
    const std::string shell = "setsid sh -c 'touch " + file + "; exec sleep " + seconds +
                              "' & while [ ! -e " + file + " ]; do sleep 0.01; done; " + then;
    return std::make_pair(AddTask(name, shell), "sleep " + seconds);
  };
  auto [finishes, finishes_sleep] = escaping("finishes", "echo started");
  CommandResult start = daemon_->Ql({"run", "start", finishes});
  ASSERT_EQ(start.exit_code, 0) << start.err;
  const std::string finished_run = Trim(start.out);
  EXPECT_EQ(WaitForStatus(finished_run, {"succeeded", "failed"}), "succeeded");
  EXPECT_EQ(RunCommand({"/usr/bin/pgrep", "-f", finishes_sleep}).out, "");
  // The run's events say so, before the attempt's end.
  std::vector<std::string> types;
  json ended;
  const json finished = Run(finished_run);
  for (const json& e : finished["events"]) {
    types.push_back(e["type"]);
    if (e["type"] == "attempt.descendants_ended") ended = e["payload"];
  }
  ASSERT_TRUE(ended.is_object()) << json(types).dump();
  EXPECT_GE(ended.value("processes", 0), 1) << json(types).dump();
  auto at = [&](const std::string& type) {
    return std::find(types.begin(), types.end(), type) - types.begin();
  };
  EXPECT_LT(at("attempt.descendants_ended"), at("attempt.succeeded")) << json(types).dump();

  auto [cancelled, cancelled_sleep] = escaping("cancelled-one", "sleep 30");
  start = daemon_->Ql({"run", "start", cancelled});
  ASSERT_EQ(start.exit_code, 0) << start.err;
  const std::string cancelled_run = Trim(start.out);
  ASSERT_TRUE(WaitFor(
      [&] {
        return !RunCommand({"/usr/bin/pgrep", "-f", cancelled_sleep}).out.empty();
      },
      seconds(20)));
  ASSERT_EQ(daemon_->Ql({"run", "cancel", cancelled_run}).exit_code, 0);
  EXPECT_EQ(WaitForStatus(cancelled_run, {"cancelled", "failed", "succeeded"}), "cancelled");
  EXPECT_EQ(RunCommand({"/usr/bin/pgrep", "-f", cancelled_sleep}).out, "");
}

TEST_F(LocalDaemonTest, FailingCommandRecordsItsExitCode) {
  const std::string task = AddTask("fails", "echo oops >&2; exit 7");
  CommandResult start = daemon_->Ql({"run", "start", task});
  ASSERT_EQ(start.exit_code, 0) << start.err;
  const std::string run_id = Trim(start.out);
  EXPECT_EQ(WaitForStatus(run_id, {"failed", "succeeded"}), "failed");
  EXPECT_EQ(Run(run_id)["exit_code"], 7);
  EXPECT_NE(daemon_->Ql({"run", "log", run_id}).out.find("oops"), std::string::npos);
}

TEST_F(LocalDaemonTest, InvalidCronZoneAndSpecAreRejectedWithTheirCodes) {
  const std::string task = AddTask("ok", "true");
  CommandResult bad_cron = daemon_->Ql({"trigger", "add", task, "--cron", "0 0 30 2 *", "--tz",
                                        "UTC"});
  EXPECT_NE(bad_cron.exit_code, 0);
  EXPECT_NE(bad_cron.err.find("cron_never_fires"), std::string::npos) << bad_cron.err;

  CommandResult macro = daemon_->Ql({"trigger", "add", task, "--cron", "@daily", "--tz", "UTC"});
  EXPECT_NE(macro.err.find("cron_macro_unsupported"), std::string::npos) << macro.err;

  CommandResult bad_zone =
      daemon_->Ql({"trigger", "add", task, "--cron", "* * * * *", "--tz", "Mars/Olympus"});
  EXPECT_NE(bad_zone.exit_code, 0);
  EXPECT_NE(bad_zone.err.find("timezone_unknown"), std::string::npos) << bad_zone.err;

  CommandResult bad_timeout = daemon_->Ql({"task", "add", "t", "--shell", "true", "--timeout",
                                           "400d"});
  EXPECT_NE(bad_timeout.exit_code, 0);
  EXPECT_NE(bad_timeout.err.find("spec_timeout_out_of_range"), std::string::npos)
      << bad_timeout.err;

  // Nothing was created by the rejected requests.
  EXPECT_EQ(SqliteQuery(Db(), "SELECT COUNT(*) FROM trigger_heads"),
            std::vector<std::string>{"0"});
  EXPECT_EQ(SqliteQuery(Db(), "SELECT COUNT(*) FROM task_heads"), std::vector<std::string>{"1"});
}

TEST_F(LocalDaemonTest, SigtermStopsWithinTheBoundAndTheNextStartAdoptsTheCommand) {
  daemon_->Stop();
  ASSERT_TRUE(daemon_->Start({"--shutdown-wait", "1"})) << daemon_->log();
  const std::string task = AddTask("outlives", "sleep 3; echo survived");
  CommandResult start = daemon_->Ql({"run", "start", task});
  ASSERT_EQ(start.exit_code, 0) << start.err;
  const std::string run_id = Trim(start.out);
  ASSERT_EQ(WaitForStatus(run_id, {"running"}), "running");

  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(daemon_->Stop(), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, seconds(5));

  ASSERT_TRUE(daemon_->Start()) << daemon_->log();
  EXPECT_EQ(WaitForStatus(run_id, {"succeeded", "failed", "lost"}), "succeeded") << daemon_->log();
  EXPECT_NE(daemon_->Ql({"run", "log", run_id}).out.find("survived"), std::string::npos);
  // The adoption is on the run's record.
  int adopted = 0;
  const json run = Run(run_id);
  for (const json& e : run["events"]) {
    if (e["type"] != "attempt.adopted") continue;
    ++adopted;
    EXPECT_EQ(e["payload"]["running"], true) << e.dump();
    EXPECT_GT(e["payload"].value("pid", 0), 0) << e.dump();
  }
  EXPECT_EQ(adopted, 1) << run["events"].dump();
}

TEST_F(LocalDaemonTest, CommandWithoutWorkingDirectoryRunsInItsTasksPrivateDirectory) {
  const std::string task = AddTask("where", "pwd; ls -A");
  CommandResult start = daemon_->Ql({"run", "start", task});
  ASSERT_EQ(start.exit_code, 0) << start.err;
  const std::string run_id = Trim(start.out);
  ASSERT_EQ(WaitForStatus(run_id, {"succeeded", "failed"}), "succeeded");
  CommandResult log = daemon_->Ql({"run", "log", run_id});
  ASSERT_EQ(log.exit_code, 0) << log.err;
  // The directory is the task's own and empty: nothing of the data directory is in sight.
  const std::string task_dir =
      std::filesystem::canonical(data_).string() + "/work/" + task;
  EXPECT_EQ(log.out, task_dir + "\n") << log.out;
  struct stat st {};
  ASSERT_EQ(::stat(task_dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
}

TEST_F(LocalDaemonTest, SecondDaemonOnTheSameDataDirectoryExits2AndTheFirstKeepsServing) {
  std::ifstream before_file(data_ + "/server.json");
  const std::string before((std::istreambuf_iterator<char>(before_file)),
                           std::istreambuf_iterator<char>());
  ASSERT_FALSE(before.empty());
  CommandResult second = RunCommand({BinDir() + "/ql-local", "serve", "--data", data_,
                                     "--listen", "127.0.0.1:0"},
                                    {}, 10'000);
  EXPECT_EQ(second.exit_code, 2) << second.out << second.err;
  EXPECT_NE(second.err.find("data_dir_in_use"), std::string::npos) << second.err;
  EXPECT_NE(second.err.find("pid " + std::to_string(daemon_->pid())), std::string::npos)
      << second.err;
  EXPECT_NE(second.err.find(daemon_->server()), std::string::npos) << second.err;
  // server.json is the first daemon's, untouched, and the first daemon still serves.
  std::ifstream after_file(data_ + "/server.json");
  const std::string after((std::istreambuf_iterator<char>(after_file)),
                          std::istreambuf_iterator<char>());
  EXPECT_EQ(after, before);
  EXPECT_EQ(HttpGetStatus(daemon_->server() + "/readyz"), 200);
  const std::string task = AddTask("still-served", "echo ok");
  EXPECT_FALSE(task.empty());
  // Once the first has stopped, the directory is free again.
  EXPECT_EQ(daemon_->Stop(), 0);
  EXPECT_FALSE(std::filesystem::exists(data_ + "/server.json"));
  ASSERT_TRUE(daemon_->Start()) << daemon_->log();
}

TEST_F(LocalDaemonTest, MetricsNameTheBuildAndDescribeTheProcessAndTheQueue) {
  CommandResult version = RunCommand({BinDir() + "/ql-local", "--version"});
  ASSERT_EQ(version.out.rfind("ql-local ", 0), 0u) << version.out;
  const std::string built = Trim(version.out.substr(9));
  CommandResult metrics = RunCommand({"/usr/bin/curl", "-s", daemon_->server() + "/metrics"});
  EXPECT_NE(metrics.out.find("\nql_build_info{version=\"" + built + "\"} 1\n"), std::string::npos)
      << metrics.out;
  EXPECT_NE(metrics.out.find("\nql_runs_queued 0\n"), std::string::npos) << metrics.out;
  for (const char* name : {"process_resident_memory_bytes", "process_cpu_seconds_total",
                           "process_open_fds", "process_start_time_seconds"}) {
    EXPECT_NE(metrics.out.find(std::string("\n") + name + " "), std::string::npos) << name;
  }
}

class EdgeDaemonTest : public LocalDaemonTest {
 protected:
  std::string profile() const override { return "edge"; }
};

TEST_F(EdgeDaemonTest, NoisyCommandHitsTheLogCapAndTheTruncationIsRecorded) {
  const std::string task = AddTask("noisy", "head -c 6000000 /dev/zero | tr '\\000' a; echo");
  CommandResult start = daemon_->Ql({"run", "start", task});
  ASSERT_EQ(start.exit_code, 0) << start.err;
  const std::string run_id = Trim(start.out);
  ASSERT_EQ(WaitForStatus(run_id, {"succeeded", "failed"}), "succeeded");
  json run = Run(run_id);
  bool truncated = false;
  for (const json& e : run["events"]) truncated |= e["type"] == "attempt.log_truncated";
  EXPECT_TRUE(truncated) << run.dump();
  const auto size = std::filesystem::file_size(data_ + "/log/" + task + "/" + run_id + "/1.log");
  EXPECT_GE(size, 2u * 1024 * 1024);
  EXPECT_LT(size, 2u * 1024 * 1024 + 1024);
}

TEST_F(EdgeDaemonTest, EachRetryHasItsOwnBoundedLogEndingInItsError) {
  // Over 3 MB per attempt against the edge caps (2 MiB per attempt, 8 MiB per run), five
  // attempts, each failing with a last line of its own.
  const std::string task =
      AddTask("retried", "echo \"starting $QL_ATTEMPT_ID\"; seq 1 500000; "
                         "echo \"FATAL: attempt $QL_ATTEMPT_ID failed\"; exit 1",
              {"--max-attempts", "5", "--backoff", "100ms", "--backoff-max", "100ms"});
  CommandResult start = daemon_->Ql({"run", "start", task});
  ASSERT_EQ(start.exit_code, 0) << start.err;
  const std::string run_id = Trim(start.out);
  ASSERT_EQ(WaitForStatus(run_id, {"failed", "succeeded"}, seconds(60)), "failed")
      << daemon_->log();
  json run = Run(run_id);
  ASSERT_EQ(run["attempts"].size(), 5u) << run.dump();

  constexpr uintmax_t kAttemptCap = 2u * 1024 * 1024;
  uintmax_t total = 0;
  for (const json& attempt : run["attempts"]) {
    const int n = attempt["attempt"].get<int>();
    const std::string id = attempt["id"].get<std::string>();
    const std::string path =
        data_ + "/log/" + task + "/" + run_id + "/" + std::to_string(n) + ".log";
    const uintmax_t size = std::filesystem::file_size(path);
    total += size;
    // The first four take (about) the attempt cap, the fourth what the first three left of the
    // run cap (their marker lines count too); the fifth keeps the 64 KiB floor.
    EXPECT_LE(size, (n < 5 ? kAttemptCap : 64u * 1024) + 64) << n;
    EXPECT_GE(size, (n < 5 ? kAttemptCap - 512 : 64u * 1024 - 64)) << n;

    // The API (through ql run log --attempt N) serves exactly this attempt's file.
    CommandResult log = daemon_->Ql({"run", "log", run_id, "--attempt", std::to_string(n)});
    ASSERT_EQ(log.exit_code, 0) << log.err;
    std::ifstream in(path, std::ios::binary);
    const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_TRUE(log.out == file) << n << ": " << log.out.size() << " bytes, file " << file.size();
    EXPECT_EQ(log.out.rfind("starting " + id + "\n1\n2\n", 0), 0u) << n;
    EXPECT_NE(log.out.find(" bytes truncated ---\n"), std::string::npos) << n;
    const std::string last = "\n500000\nFATAL: attempt " + id + " failed\n";
    EXPECT_TRUE(log.out.ends_with(last)) << n << ": " << log.out.substr(log.out.size() - 60);
    EXPECT_EQ(log.out.find("FATAL"), log.out.size() - last.size() + 8) << "only its own error";

    CommandResult tail =
        daemon_->Ql({"run", "log", run_id, "--attempt", std::to_string(n), "--tail", "2"});
    ASSERT_EQ(tail.exit_code, 0) << tail.err;
    EXPECT_EQ(tail.out, "500000\nFATAL: attempt " + id + " failed\n");
  }
  EXPECT_LE(total, 8u * 1024 * 1024 + 64u * 1024 + 5 * 64);
  // Without --attempt the latest attempt is served.
  const std::string latest = run["attempts"][4]["id"].get<std::string>();
  CommandResult tail = daemon_->Ql({"run", "log", run_id, "--tail", "1"});
  EXPECT_EQ(tail.out, "FATAL: attempt " + latest + " failed\n");
  CommandResult bad = daemon_->Ql({"run", "log", run_id, "--tail", "0"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--tail must be a positive integer"), std::string::npos) << bad.err;

  int truncations = 0;
  for (const json& e : run["events"]) truncations += e["type"] == "attempt.log_truncated";
  EXPECT_EQ(truncations, 5) << run.dump();
}

// Which shared objects a running process has mapped, by file name (e.g. "libssl.so.3").
std::set<std::string> MappedLibraries(pid_t pid) {
  std::set<std::string> out;
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  std::string line;
  while (std::getline(maps, line)) {
    const size_t slash = line.rfind('/');
    if (slash != std::string::npos) out.insert(line.substr(slash + 1));
  }
  return out;
}

bool MapsTls(const std::set<std::string>& libraries) {
  return std::any_of(libraries.begin(), libraries.end(), [](const std::string& name) {
    return name.rfind("libssl.so", 0) == 0 || name.rfind("libcrypto.so", 0) == 0;
  });
}

// An edge daemon on plain loopback HTTP never maps OpenSSL; one given a certificate opens it and
// serves HTTPS that ql verifies with the CA (and refuses without it).
TEST(LocalDaemonTls, TheTlsLibraryIsMappedOnlyWhenServingTls) {
  TempDir tmp;
  LocalDaemon plain(tmp.path() + "/plain", "edge");
  ASSERT_TRUE(plain.Start()) << plain.log();
  EXPECT_EQ(plain.server().rfind("http://", 0), 0u) << plain.server();
  EXPECT_FALSE(MapsTls(MappedLibraries(plain.pid())));
  EXPECT_EQ(plain.Ql({"status"}).exit_code, 0);
  EXPECT_FALSE(MapsTls(MappedLibraries(plain.pid())));
  plain.Stop();

  const std::string pki_dir = tmp.path() + "/pki";
  std::filesystem::create_directories(pki_dir);
  Result<testing::TestPki> pki = testing::MakeTestPki(pki_dir);
  ASSERT_TRUE(pki.ok()) << pki.status().ToString();
  LocalDaemon tls(tmp.path() + "/tls", "edge");
  tls.set_ca_file(pki->ca_cert);
  ASSERT_TRUE(tls.Start({"--tls-cert", pki->server_cert, "--tls-key", pki->server_key}))
      << tls.log();
  EXPECT_EQ(tls.server().rfind("https://", 0), 0u) << tls.server();
  EXPECT_TRUE(MapsTls(MappedLibraries(tls.pid())));
  CommandResult trusted = tls.Ql({"--ca-file", pki->ca_cert, "status"});
  EXPECT_EQ(trusted.exit_code, 0) << trusted.err;
  CommandResult other = tls.Ql({"--ca-file", pki->other_ca_cert, "status"});
  EXPECT_NE(other.exit_code, 0);
  EXPECT_NE(other.err.find("tls_verification_failed"), std::string::npos) << other.err;
}

TEST(LocalDaemonStartup, UnknownProfileIsAUsageError) {
  TempDir tmp;
  CommandResult r = RunCommand(
      {BinDir() + "/ql-local", "serve", "--data", tmp.path() + "/d", "--profile", "cloud"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown_profile"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(tmp.path() + "/d/db/qinglong.db"));
}

TEST(LocalDaemonStartup, CreatesTheSecretKeyOnceAndRefusesAnExposedOne) {
  TempDir tmp;
  const std::string data = tmp.path() + "/d";
  const std::string key_path = data + "/secret.key";
  std::string key;
  {
    LocalDaemon daemon(data, "edge");
    ASSERT_TRUE(daemon.Start()) << daemon.log();
    EXPECT_NE(daemon.log().find("secret key: " + key_path + " (file:"), std::string::npos)
        << daemon.log();
    EXPECT_NE(daemon.log().find(", created)"), std::string::npos) << daemon.log();
    EXPECT_EQ(daemon.Stop(), 0);
    namespace fs = std::filesystem;
    ASSERT_TRUE(fs::is_regular_file(key_path));
    EXPECT_EQ(fs::file_size(key_path), 32u);
    EXPECT_EQ(fs::status(key_path).permissions(), fs::perms::owner_read | fs::perms::owner_write);
    std::ifstream in(key_path, std::ios::binary);
    key.assign(std::istreambuf_iterator<char>(in), {});
  }
  {
    LocalDaemon daemon(data, "edge");
    ASSERT_TRUE(daemon.Start()) << daemon.log();
    // The daemon's output accumulates across starts in the same data directory.
    const std::string log = daemon.log();
    EXPECT_NE(log.find("secret key: ", log.find("secret key: ") + 1), std::string::npos) << log;
    EXPECT_EQ(log.find(", created)", log.find(", created)") + 1), std::string::npos) << log;
    EXPECT_EQ(daemon.Stop(), 0);
    std::ifstream in(key_path, std::ios::binary);
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), key) << "the key is kept";
  }
  std::filesystem::permissions(key_path, std::filesystem::perms::group_read,
                               std::filesystem::perm_options::add);
  CommandResult r = RunCommand({BinDir() + "/ql-local", "serve", "--data", data, "--listen",
                                "127.0.0.1:0", "--profile", "edge"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("secret_key_file_mode"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("chmod 600"), std::string::npos) << r.err;
}

TEST_F(LocalDaemonTest, ForbidNeverRunsTwoRunsOfATriggerAtOnceAndRecordsTheSkips) {
  const std::string task = AddTask("slow", "sleep 3");
  CommandResult add = daemon_->Ql({"trigger", "add", task, "--cron", "* * * * * *", "--tz", "UTC",
                                   "--overlap", "forbid"});
  ASSERT_EQ(add.exit_code, 0) << add.err;
  const std::string trigger = Trim(add.out);
  const std::set<std::string> unfinished = {"created",  "queued", "dispatching",      "running",
                                            "retry_wait", "lost", "recovery_required"};
  int samples = 0;
  const auto end = std::chrono::steady_clock::now() + seconds(8);
  while (std::chrono::steady_clock::now() < end) {
    int busy = 0;
    for (const json& r : Runs({"--trigger", trigger})) busy += unfinished.count(r["status"]);
    EXPECT_LE(busy, 1) << Runs({"--trigger", trigger}).dump();
    ++samples;
    std::this_thread::sleep_for(milliseconds(400));
  }
  EXPECT_GE(samples, 8);
  json skipped = Runs({"--trigger", trigger, "--status", "skipped"});
  ASSERT_FALSE(skipped.empty()) << Runs({"--trigger", trigger}).dump();
  for (const json& r : skipped) {
    EXPECT_EQ(r["status"], "skipped");
    EXPECT_EQ(r["error_code"], "overlap");
  }
  int succeeded = 0;
  for (const json& r : Runs({"--trigger", trigger})) succeeded += r["status"] == "succeeded";
  EXPECT_GE(succeeded, 1);
}

// DESIGN §11: a task edited by name keeps its every-second trigger firing — the edit repins the
// trigger in its own transaction, so no occurrence is missed — until --no-repin leaves it stale
// (said by the edit and by `ql status`), and `ql task rm` ends it for good.
TEST_F(LocalDaemonTest, EditingATaskByNameKeepsItsTriggerFiringWithoutAMissedOccurrence) {
  ASSERT_FALSE(AddTask("tick", "echo v1").empty());
  CommandResult add = daemon_->Ql({"trigger", "add", "tick", "--name", "tick-each-second",
                                   "--cron", "* * * * * *", "--tz", "UTC"});
  ASSERT_EQ(add.exit_code, 0) << add.err;
  const std::string trigger = Trim(add.out);
  auto runs = [&] { return Runs({"--trigger", "tick-each-second"}); };
  ASSERT_TRUE(WaitFor([&] { return runs().size() >= 2; }, seconds(10))) << daemon_->log();

  for (int version = 2; version <= 6; ++version) {
    CommandResult edit =
        daemon_->Ql({"task", "edit", "tick", "--shell", "echo v" + std::to_string(version)});
    ASSERT_EQ(edit.exit_code, 0) << edit.err;
    EXPECT_EQ(Trim(edit.out), std::to_string(version));
    EXPECT_EQ(edit.err.find("pin an older revision"), std::string::npos)
        << edit.err;                                                       // nothing went stale
    EXPECT_NE(edit.err.find("command: "), std::string::npos) << edit.err;  // what changed
    std::this_thread::sleep_for(milliseconds(700));
  }
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const json& r : runs()) {
          if (r["task_revision"] == 6 && r["status"] == "succeeded") return true;
        }
        return false;
      },
      seconds(10)))
      << runs().dump();
  // One run for every second from the first occurrence to the last: no gap, no double.
  std::set<int64_t> seconds_admitted;
  const json all = runs();
  for (const json& r : all) {
    Result<int64_t> at = ParseRfc3339(r["scheduled_for"].get<std::string>());
    ASSERT_TRUE(at.ok());
    seconds_admitted.insert(*at / 1000);
  }
  EXPECT_EQ(seconds_admitted.size(), all.size());
  ASSERT_GE(seconds_admitted.size(), 5u);
  EXPECT_EQ(*seconds_admitted.rbegin() - *seconds_admitted.begin() + 1,
            static_cast<int64_t>(seconds_admitted.size()))
      << all.dump();
  CommandResult status = daemon_->Ql({"status"});
  EXPECT_EQ(status.out.find("stale triggers"), std::string::npos) << status.out;

  // --no-repin leaves the trigger on revision 6: the edit and `ql status` say so.
  CommandResult stale = daemon_->Ql({"task", "edit", "tick", "--no-repin", "--shell", "echo v7"});
  ASSERT_EQ(stale.exit_code, 0) << stale.err;
  EXPECT_NE(stale.err.find("1 trigger of this task still pin"), std::string::npos) << stale.err;
  status = daemon_->Ql({"status"});
  EXPECT_NE(status.out.find("stale triggers"), std::string::npos) << status.out;
  CommandResult show = daemon_->Ql({"trigger", "show", "tick-each-second", "--json"});
  ASSERT_EQ(show.exit_code, 0) << show.err;
  EXPECT_EQ(json::parse(show.out)["state"], "pin_stale");

  // Deleting the task by name deletes its trigger: nothing is admitted from then on.
  CommandResult rm = daemon_->Ql({"task", "rm", "tick"});
  ASSERT_EQ(rm.exit_code, 0) << rm.err;
  EXPECT_NE(rm.out.find(trigger + " deleted (trigger)"), std::string::npos) << rm.out;
  show = daemon_->Ql({"trigger", "show", trigger, "--json"});
  ASSERT_EQ(show.exit_code, 0) << show.err;
  EXPECT_EQ(json::parse(show.out)["state"], "deleted");
  EXPECT_NE(daemon_->Ql({"trigger", "show", "tick-each-second"}).exit_code, 0);
  const size_t before = Runs({"--trigger", trigger}).size();
  std::this_thread::sleep_for(seconds(2));
  EXPECT_EQ(Runs({"--trigger", trigger}).size(), before);
  CommandResult run = daemon_->Ql({"run", "start", "tick"});
  EXPECT_NE(run.exit_code, 0);
  // The name is free again.
  EXPECT_FALSE(AddTask("tick", "echo again").empty());
}

TEST_F(LocalDaemonTest, AJitteredTriggerStartsEachRunNoEarlierThanItsOccurrencePlusItsOffset) {
  ASSERT_FALSE(AddTask("spread", "true").empty());
  CommandResult add = daemon_->Ql({"trigger", "add", "spread", "--cron", "* * * * * *", "--tz",
                                   "UTC", "--jitter", "3s"});
  ASSERT_EQ(add.exit_code, 0) << add.err;
  const std::string trigger = Trim(add.out);
  CommandResult show = daemon_->Ql({"trigger", "show", trigger});
  EXPECT_NE(show.out.find("up to 3s after each occurrence"), std::string::npos) << show.out;
  auto finished = [&] {
    std::vector<json> out;
    for (const json& r : Runs({"--trigger", trigger})) {
      if (r["status"] == "succeeded") out.push_back(r);
    }
    return out;
  };
  ASSERT_TRUE(WaitFor([&] { return finished().size() >= 8; }, seconds(30))) << daemon_->log();
  auto at = [](const json& value) {
    Result<int64_t> ms = ParseRfc3339(value.get<std::string>());
    EXPECT_TRUE(ms.ok()) << value;
    return ms.ok() ? *ms : int64_t{0};
  };
  std::set<int64_t> offsets;
  int64_t latest_start = 0;
  for (const json& r : finished()) {
    const int64_t scheduled = at(r["scheduled_for"]);
    const int64_t release = scheduled + JitterOffsetMs(trigger, scheduled, 3000);
    // Admitted on time, held in the queue until the occurrence's release time.
    EXPECT_LT(at(r["created_at"]) - scheduled, 1000) << r.dump();
    EXPECT_GE(at(r["queued_at"]), release) << r.dump();
    EXPECT_GE(at(r["started_at"]), release) << "started before its release time: " << r.dump();
    offsets.insert(release - scheduled);
    latest_start = std::max(latest_start, at(r["started_at"]) - scheduled);
  }
  // The offsets differ from occurrence to occurrence and some reach well into the window.
  EXPECT_GE(offsets.size(), 6u);
  EXPECT_GT(latest_start, 1000);
}

TEST_F(LocalDaemonTest, ReplaceCancelsTheRunningRunOfTheTrigger) {
  const std::string task = AddTask("long", "sleep 30");
  CommandResult add = daemon_->Ql({"trigger", "add", task, "--cron", "*/3 * * * * *", "--tz",
                                   "UTC", "--overlap", "replace"});
  ASSERT_EQ(add.exit_code, 0) << add.err;
  const std::string trigger = Trim(add.out);
  std::string first;
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const json& r : Runs({"--trigger", trigger})) {
          if (r["status"] == "running") first = r["id"].get<std::string>();
        }
        return !first.empty();
      },
      seconds(15)))
      << daemon_->log();
  EXPECT_EQ(WaitForStatus(first, {"cancelled", "failed", "succeeded"}, seconds(15)), "cancelled");
  EXPECT_EQ(Run(first)["cancel_reason"], "replaced");
  // The occurrence that replaced it runs.
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const json& r : Runs({"--trigger", trigger})) {
          if (r["id"] != first && r["status"] == "running") return true;
        }
        return false;
      },
      seconds(15)));
  CommandResult trigger_json = daemon_->Ql({"trigger", "show", trigger, "--json"});
  EXPECT_EQ(json::parse(trigger_json.out, nullptr, false).value("overlap", ""), "replace");
}

TEST_F(LocalDaemonTest, AnInvalidConcurrencyIsRefusedWithItsCode) {
  CommandResult bad = daemon_->Ql({"task", "add", "t", "--shell", "true", "--concurrency", "0"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("invalid_concurrency"), std::string::npos) << bad.err;
  const std::string task = AddTask("limited", "true", {"--concurrency", "2"});
  CommandResult shown = daemon_->Ql({"task", "show", task, "--json"});
  EXPECT_EQ(json::parse(shown.out, nullptr, false).value("concurrency", 0), 2) << shown.out;
}

}  // namespace
}  // namespace ql::itest
