// The daemon log of ql-local (README "Daemon log"): JSON lines on stderr, the events of a run
// that fails, an access log that never carries a credential, a --log-file reopened on SIGHUP and
// slow requests past --slow-request-ms.

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "harness.h"

namespace ql::itest {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using std::chrono::seconds;

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Returns the first JSON line of `text` whose event is `event` and whose `key` is `value` (any
// value when `key` is empty), or null.
json FindEvent(const std::string& text, const std::string& event, const std::string& key = "",
               const std::string& value = "") {
  for (const std::string& line : Lines(text)) {
    json j = json::parse(line, nullptr, false);
    if (!j.is_object() || j.value("event", "") != event) continue;
    if (key.empty() || (j.contains(key) && j[key].is_string() && j[key] == value)) return j;
  }
  return nullptr;
}

// Starts a run of a new task whose command fails with exit status 3; returns the run's id.
std::string StartFailingRun(LocalDaemon& daemon, const std::string& name) {
  CommandResult task = daemon.Ql({"task", "add", name, "--shell", "echo oops; exit 3"});
  EXPECT_EQ(task.exit_code, 0) << task.err;
  CommandResult run = daemon.Ql({"run", "start", Trim(task.out)});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  return Trim(run.out);
}

TEST(LocalDaemonLogTest, JsonLinesOnStderrSayWhenARunFails) {
  TempDir dir;
  LocalDaemon daemon(dir.path() + "/data");
  daemon.set_separate_stderr(true);
  ASSERT_TRUE(daemon.Start({"--log-format", "json"})) << daemon.log() << daemon.err();
  const std::string run_id = StartFailingRun(daemon, "boom");
  ASSERT_FALSE(run_id.empty());
  json failed;
  ASSERT_TRUE(WaitFor(
      [&] {
        failed = FindEvent(daemon.err(), "run.failed", "run", run_id);
        return !failed.is_null();
      },
      seconds(10)))
      << daemon.err();
  EXPECT_EQ(failed["level"], "warn");
  EXPECT_EQ(failed["code"], "exit_status");
  EXPECT_EQ(failed["exit"], 3);
  EXPECT_EQ(failed["attempt"], 1);
  EXPECT_TRUE(failed["ts"].is_string());
  EXPECT_EQ(daemon.Stop(), 0);
  // Every line of stderr is one JSON object; the banner stays on stdout.
  const std::string err = daemon.err();
  for (const std::string& line : Lines(err)) {
    EXPECT_TRUE(json::parse(line, nullptr, false).is_object()) << line;
  }
  EXPECT_FALSE(FindEvent(err, "daemon.started").is_null()) << err;
  EXPECT_FALSE(FindEvent(err, "daemon.stopping").is_null()) << err;
  EXPECT_NE(daemon.log().find("listening on"), std::string::npos);
  EXPECT_EQ(daemon.log().find("\"event\""), std::string::npos) << daemon.log();
}

TEST(LocalDaemonLogTest, TheAccessLogNeverCarriesACredential) {
  TempDir dir;
  LocalDaemon daemon(dir.path() + "/data");
  daemon.set_separate_stderr(true);
  ASSERT_TRUE(daemon.Start({"--log-format", "json", "--access-log"})) << daemon.err();
  const std::string token = Trim(ReadFile(daemon.data_dir() + "/owner.token"));
  const std::string wrong = "wrong-token-5f3c9a1d7e";
  const std::string query = "query-secret-8b2e4f6a";
  const std::string cookie = "cookie-secret-1d9c7b3a";
  const std::string url = daemon.server() + "/api/v1/runs?token=" + query + "&limit=5";
  for (const std::string& bearer : {token, wrong}) {
    CommandResult r =
        RunCommand({"/usr/bin/curl", "-s", "-o", "/dev/null", "-H",
                    "Authorization: Bearer " + bearer, "-H", "Cookie: ql_session=" + cookie, url});
    EXPECT_EQ(r.exit_code, 0) << r.err;
  }
  ASSERT_TRUE(WaitFor(
      [&] {
        int seen = 0;
        for (const std::string& line : Lines(daemon.err())) {
          if (line.find("\"http.request\"") != std::string::npos &&
              line.find("/api/v1/runs") != std::string::npos) {
            ++seen;
          }
        }
        return seen >= 2;
      },
      seconds(10)))
      << daemon.err();
  const std::string err = daemon.err();
  for (const std::string& secret : {token, wrong, query, cookie}) {
    EXPECT_EQ(FindLeak(err, secret), "") << "leaked " << secret << " in:\n" << err;
  }
  const json answered = FindEvent(err, "http.request", "principal", "owner");
  ASSERT_FALSE(answered.is_null()) << err;
  EXPECT_EQ(answered["path"], "/api/v1/runs");
  EXPECT_EQ(answered["query"], "limit,token");
  EXPECT_EQ(answered["status"], 400);  // runs.list knows no `token` parameter
  EXPECT_EQ(answered["method"], "GET");
  EXPECT_EQ(answered["remote"], "127.0.0.1");
  EXPECT_TRUE(answered["ms"].is_number());
  EXPECT_GT(answered["bytes"].get<int64_t>(), 0);
}

TEST(LocalDaemonLogTest, SighupReopensTheLogFileAfterARotation) {
  TempDir dir;
  LocalDaemon daemon(dir.path() + "/data");
  const std::string file = dir.path() + "/ql-local.log";
  ASSERT_TRUE(daemon.Start({"--log-file", file, "--log-format", "json"})) << daemon.log();
  ASSERT_TRUE(
      WaitFor([&] { return !FindEvent(ReadFile(file), "daemon.started").is_null(); }, seconds(10)))
      << ReadFile(file);
  // What a rotation does: rename the file, then tell the daemon.
  const std::string rotated = file + ".1";
  fs::rename(file, rotated);
  ASSERT_EQ(::kill(daemon.pid(), SIGHUP), 0);
  ASSERT_TRUE(
      WaitFor([&] { return !FindEvent(ReadFile(file), "log.reopened").is_null(); }, seconds(10)))
      << ReadFile(rotated);
  const std::string run_id = StartFailingRun(daemon, "after-rotation");
  ASSERT_FALSE(run_id.empty());
  ASSERT_TRUE(
      WaitFor([&] { return !FindEvent(ReadFile(file), "run.failed", "run", run_id).is_null(); },
              seconds(10)))
      << ReadFile(file);
  EXPECT_TRUE(FindEvent(ReadFile(rotated), "run.failed").is_null()) << ReadFile(rotated);
  EXPECT_FALSE(FindEvent(ReadFile(rotated), "daemon.started").is_null());
  EXPECT_EQ(daemon.Stop(), 0);  // SIGHUP did not stop it
  EXPECT_FALSE(FindEvent(ReadFile(file), "daemon.stopping").is_null());
}

// --slow-request-ms: a request that took the threshold or longer (a client sending its body
// late) is one http.slow_request line, a quicker one is none, and 0 logs none at all.
TEST(LocalDaemonLogTest, ARequestSlowerThanTheThresholdIsLogged) {
  for (const std::string threshold : {"300", "0"}) {
    SCOPED_TRACE("--slow-request-ms " + threshold);
    TempDir dir;
    LocalDaemon daemon(dir.path() + "/data");
    daemon.set_separate_stderr(true);
    ASSERT_TRUE(daemon.Start({"--log-format", "json", "--slow-request-ms", threshold}))
        << daemon.err();
    const std::string token = Trim(ReadFile(daemon.data_dir() + "/owner.token"));
    const int port = std::stoi(daemon.server().substr(daemon.server().rfind(':') + 1));
    EXPECT_GT(SlowBodyRequest(port, "POST", "/api/v1/tasks", "{}", token, 0), 0);
    EXPECT_GT(SlowBodyRequest(port, "POST", "/api/v1/triggers", "{}", token, 800), 0);
    EXPECT_EQ(daemon.Stop(), 0);
    const std::string err = daemon.err();
    const json slow = FindEvent(err, "http.slow_request", "path", "/api/v1/triggers");
    EXPECT_TRUE(FindEvent(err, "http.slow_request", "path", "/api/v1/tasks").is_null()) << err;
    if (threshold == "0") {
      EXPECT_TRUE(FindEvent(err, "http.slow_request").is_null()) << err;
      continue;
    }
    ASSERT_FALSE(slow.is_null()) << err;
    EXPECT_EQ(slow["level"], "warn");
    EXPECT_EQ(slow["method"], "POST");
    EXPECT_EQ(slow["principal"], "owner");
    EXPECT_GE(slow["ms"].get<int64_t>(), 300);
  }
}

TEST(LocalDaemonLogTest, ABadLogFlagIsAUsageError) {
  TempDir dir;
  for (const std::vector<std::string>& flags :
       std::vector<std::vector<std::string>>{{"--log-format", "yaml"},
                                             {"--log-level", "verbose"},
                                             {"--slow-request-ms", "3600001"},
                                             {"--log-file", dir.path() + "/missing/dir/x.log"}}) {
    std::vector<std::string> argv = {BinDir() + "/ql-local", "serve",    "--data",
                                     dir.path() + "/data",   "--listen", "127.0.0.1:0"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    CommandResult r = RunCommand(argv);
    EXPECT_EQ(r.exit_code, 2) << flags[0] << ": " << r.err;
    EXPECT_NE(r.err.find(flags[0]), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace ql::itest
