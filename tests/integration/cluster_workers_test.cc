// Remote execution end to end: real `ql-cluster serve` replicas and real `ql-worker`s against a
// PostgreSQL the test starts. Runs succeed with their output in `ql run log`, fail with their
// exit code, time out, are cancelled on the worker, and survive a worker killed mid-run; an
// approved run whose worker is killed after the start waits for a human and never runs twice; a
// script pushed once runs byte for byte on every worker that fetches it.

#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cluster_harness.h"
#include "cluster_workers_fixture.h"
#include "harness.h"
#include "ql/testing/postgres_server.h"
#include "ql/testing/test_pki.h"

namespace ql::itest {
namespace {

TEST_F(ClusterWorkersTest, TwoReplicasAndTwoWorkersRunScheduledAndManualRunsToTheirEnds) {
  Replica a("replica-a", Log("a")), b("replica-b", Log("b"));
  ASSERT_TRUE(a.Start(ReplicaArgs(/*admin=*/true)));
  ASSERT_TRUE(b.Start(ReplicaArgs(false)));
  std::unique_ptr<ChildProcess> w1 = StartWorker("w1", a);
  std::unique_ptr<ChildProcess> w2 = StartWorker("w2", b);

  // The command is told its run's context by the control plane, through the offer.
  const std::string hello =
      Task(a, "hello", "echo hello from $QL_RUN_ID as $QL_TASK_NAME in $TZ $LANG");
  ASSERT_FALSE(hello.empty());
  json trigger =
      Api(a, "POST", "/api/v1/triggers",
          {{"task_id", hello}, {"expression", "* * * * * *"}, {"timezone", "Asia/Shanghai"}});
  const std::string fail = Task(a, "fail", "echo oops $TZ $QL_PROJECT; exit 3");
  const std::string slow = Task(a, "slow", "sleep 30", {{"timeoutMs", 1500}});
  const std::string endless = Task(a, "endless", "sleep 60");

  const std::string failed_run = Start(b, fail);
  const std::string slow_run = Start(a, slow);
  const std::string cancel_run = Start(b, endless);
  ASSERT_TRUE(WaitStatus(a, cancel_run, "running", 30)) << Status(a, cancel_run);
  CommandResult cancel = Ql(b, {"run", "cancel", cancel_run});
  EXPECT_EQ(cancel.exit_code, 0) << cancel.out << cancel.err;

  std::this_thread::sleep_for(std::chrono::seconds(5));
  Api(a, "POST", "/api/v1/triggers/" + trigger.value("id", "") + "/disable", json::object());

  EXPECT_TRUE(WaitStatus(a, failed_run, "failed", 30)) << Status(a, failed_run);
  EXPECT_EQ(Api(a, "GET", "/api/v1/runs/" + failed_run).value("exit_code", json()), json(3));
  EXPECT_TRUE(WaitStatus(a, slow_run, "timed_out", 30)) << Status(a, slow_run);
  EXPECT_TRUE(WaitStatus(b, cancel_run, "cancelled", 30)) << Status(b, cancel_run);

  // Every admitted occurrence ran once and succeeded, with its output in `ql run log`.
  const std::string trigger_runs =
      "FROM ql3.runs WHERE trigger_id = '" + trigger.value("id", "") + "'";
  ASSERT_TRUE(WaitFor(
      [&] {
        return Count("SELECT count(*) " + trigger_runs + " AND status NOT IN ('succeeded')") == 0;
      },
      std::chrono::seconds(30)))
      << Count("SELECT count(*) " + trigger_runs + " AND status NOT IN ('succeeded')");
  EXPECT_GE(Count("SELECT count(*) " + trigger_runs), 3);
  Result<std::string> one = server_->Psql("qinglong", "SELECT id " + trigger_runs + " LIMIT 1");
  ASSERT_TRUE(one.ok());
  while (!one->empty() && (one->back() == '\n' || one->back() == ' ')) one->pop_back();
  CommandResult log = Ql(a, {"run", "log", *one});
  EXPECT_EQ(log.exit_code, 0) << log.err;
  EXPECT_EQ(log.out, "hello from " + *one + " as hello in Asia/Shanghai C.UTF-8\n");
  CommandResult failed_log = Ql(b, {"run", "log", failed_run});
  EXPECT_EQ(failed_log.out, "oops UTC default\n");

  // Both workers took part, every run had one attempt, and no lease is left granted.
  EXPECT_EQ(Count("SELECT count(DISTINCT s.credential_id) FROM ql3.run_dispatch_leases l JOIN "
                  "ql3.worker_sessions s ON s.id = l.worker_session_id"),
            2);
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.run_attempts WHERE attempt > 1"), 0);
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.run_dispatch_leases WHERE status = 'granted'"), 0);
  EXPECT_EQ(w1->Stop(), 0);
  EXPECT_EQ(w2->Stop(), 0);
  EXPECT_EQ(a.Stop(), 0);
  EXPECT_EQ(b.Stop(), 0);
}

// Retention on the cluster (DESIGN §11), as tests/integration/local_retention_test.cc proves
// it for ql-local: once a task keeps fewer runs, the replicas' retention jobs delete the older
// runs with their attempts, events, retry policies, dispatch leases and log chunks; the newer
// runs and the runs of other tasks stay intact with their logs, and the purge is counted and
// audited. An attempt's files (its record directory and log file) belong to the worker, which
// removes them once the attempt has ended; its output lives on in ql3.run_log_chunks.
// Workers fetch what they run (docs/worker-protocol.md "Blobs"): a script pushed once through
// the CLI runs on one worker and then on another, each fetching the pinned version from the
// control plane into its own cache; both runs name the same digest and print the same bytes.
TEST_F(ClusterWorkersTest, AScriptPushedOnceRunsByteIdenticallyOnTwoWorkers) {
  Replica a("replica-a", Log("a")), b("replica-b", Log("b"));
  ASSERT_TRUE(a.Start(ReplicaArgs(/*admin=*/true)));
  ASSERT_TRUE(b.Start(ReplicaArgs(false)));
  const std::string source = dir_.path() + "/greet.sh";
  const std::string bytes = "echo \"greet v1 $*\"\nsha256sum < \"$0\"\n";
  std::ofstream(source, std::ios::binary) << bytes;
  CommandResult pushed = Ql(a, {"script", "push", "greet", source});
  ASSERT_EQ(pushed.exit_code, 0) << pushed.out << pushed.err;
  CommandResult shown = Ql(a, {"--json", "script", "show", "greet"});
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  const std::string digest = json::parse(shown.out)["version"].value("digest", "");
  CommandResult sum = RunCommand({"/bin/sh", "-c", "sha256sum < '" + source + "'"});
  ASSERT_EQ(digest, sum.out.substr(0, 64));
  const std::string task_id =
      Api(a, "POST", "/api/v1/tasks",
          {{"name", "greeter"},
           {"spec",
            {{"command", {{"kind", "script"}, {"script", "greet"}, {"args", {"a", "b"}}}}}}})
          .value("id", "");
  ASSERT_FALSE(task_id.empty());

  // One run on each worker, one after the other, each through its own replica.
  std::unique_ptr<ChildProcess> w1 = StartWorker("w1", a, 1);
  const std::string first = Start(a, task_id);
  ASSERT_TRUE(WaitStatus(a, first, "succeeded", 30)) << Status(a, first);
  EXPECT_EQ(w1->Stop(), 0);
  std::unique_ptr<ChildProcess> w2 = StartWorker("w2", b, 1);
  const std::string second = Start(b, task_id);
  ASSERT_TRUE(WaitStatus(b, second, "succeeded", 30)) << Status(b, second);
  EXPECT_EQ(Count("SELECT count(DISTINCT s.credential_id) FROM ql3.run_dispatch_leases l JOIN "
                  "ql3.worker_sessions s ON s.id = l.worker_session_id WHERE l.run_id IN ('" +
                  first + "', '" + second + "')"),
            2);

  // The pinned bytes ran on both: the output names the digest of the file the command ran.
  const std::string expected = "greet v1 a b\n" + digest + "  -\n";
  CommandResult log1 = Ql(a, {"run", "log", first});
  CommandResult log2 = Ql(b, {"run", "log", second});
  EXPECT_EQ(log1.out, expected) << log1.err;
  EXPECT_EQ(log2.out, expected) << log2.err;
  CommandResult show1 = Ql(a, {"--json", "run", "show", first});
  ASSERT_EQ(show1.exit_code, 0) << show1.err;
  const json artifacts1 = json::parse(show1.out)["artifacts"];
  const json artifacts2 = Api(b, "GET", "/api/v1/runs/" + second)["artifacts"];
  ASSERT_EQ(artifacts1.size(), 1u) << show1.out;
  EXPECT_EQ(artifacts1[0]["digest"], digest);
  EXPECT_EQ(artifacts1[0]["version"], 1);
  EXPECT_EQ(artifacts2, artifacts1);
  // Each worker fetched the version into its own cache, byte for byte.
  for (const std::string worker : {"w1", "w2"}) {
    EXPECT_EQ(ReadFile(dir_.path() + "/" + worker + "/scripts/" + digest + "/greet.sh"), bytes)
        << worker;
  }
  EXPECT_EQ(w2->Stop(), 0);
  EXPECT_EQ(a.Stop(), 0);
  EXPECT_EQ(b.Stop(), 0);
}

// Placement (DESIGN §6.6): workers register in pools with labels; a pool serves only the
// projects granted to it. A script pushed once runs on two workers of two pools, byte for byte;
// a worker of a pool not granted to the run's project never receives it (the run says why it
// waits) until the grant, and a run needing a label no worker has waits with the reason. A
// worker token is bound to its pool: a token of another pool cannot register in blue.
TEST_F(ClusterWorkersTest, PoolsPlaceRunsOnlyOnWorkersOfPoolsGrantedToTheirProject) {
  Replica a("replica-a", Log("a"));
  ASSERT_TRUE(a.Start(ReplicaArgs(/*admin=*/true)));
  Api(a, "POST", "/api/v1/projects", {{"slug", "team-b"}, {"name", "Team B"}});
  for (const char* pool : {"blue", "green"}) {
    Api(a, "POST", std::string("/api/v1/pools/") + pool + "/grants", {{"project", "default"}});
  }
  Api(a, "POST", "/api/v1/pools/other/grants", {{"project", "team-b"}});
  const std::string source = dir_.path() + "/greet.sh";
  const std::string bytes = "echo \"greet $*\"\nsha256sum < \"$0\"\n";
  std::ofstream(source, std::ios::binary) << bytes;
  CommandResult pushed = Ql(a, {"script", "push", "greet", source});
  ASSERT_EQ(pushed.exit_code, 0) << pushed.out << pushed.err;
  auto script_task = [&](const std::string& name, const json& placement) {
    return Api(a, "POST", "/api/v1/tasks",
               {{"name", name},
                {"spec",
                 {{"command", {{"kind", "script"}, {"script", "greet"}, {"args", {name}}}},
                  {"placement", placement}}}})
        .value("id", "");
  };
  const std::string on_blue =
      script_task("on-blue", {{"pool", "blue"}, {"labels", {{"arch", "x86"}}}});
  const std::string on_green = script_task("on-green", {{"pool", "green"}});
  const std::string on_other = script_task("on-other", {{"pool", "other"}});
  const std::string needs_arm =
      script_task("needs-arm", {{"pool", "blue"}, {"labels", {{"arch", "arm64"}}}});
  ASSERT_FALSE(on_blue.empty() || on_green.empty() || on_other.empty() || needs_arm.empty());

  std::unique_ptr<ChildProcess> blue = StartWorker(
      "blue", a, 2, "", {"--pool", "blue", "--label", "arch=x86", "--label", "os=linux"});
  std::unique_ptr<ChildProcess> green = StartWorker("green", a, 2, "", {"--pool", "green"});
  std::unique_ptr<ChildProcess> other = StartWorker("other", a, 2, "", {"--pool", "other"});
  const std::string blue_run = Start(a, on_blue);
  const std::string green_run = Start(a, on_green);
  const std::string other_run = Start(a, on_other);
  const std::string arm_run = Start(a, needs_arm);
  ASSERT_TRUE(WaitStatus(a, blue_run, "succeeded", 30)) << Status(a, blue_run);
  ASSERT_TRUE(WaitStatus(a, green_run, "succeeded", 30)) << Status(a, green_run);

  // Each ran on its own pool's worker, the same pinned bytes on both.
  auto holder = [&](const std::string& run) {
    Result<std::string> out =
        server_->Psql("qinglong",
                      "SELECT c.name FROM ql3.run_dispatch_leases l JOIN ql3.worker_sessions s ON "
                      "s.id = l.worker_session_id JOIN ql3.worker_credentials c ON c.id = "
                      "s.credential_id WHERE l.run_id = '" +
                          run + "'");
    std::string name = out.ok() ? *out : "";
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    return name;
  };
  EXPECT_EQ(holder(blue_run), "blue");
  EXPECT_EQ(holder(green_run), "green");
  CommandResult sum = RunCommand({"/bin/sh", "-c", "sha256sum < '" + source + "'"});
  const std::string digest = sum.out.substr(0, 64);
  EXPECT_EQ(Ql(a, {"run", "log", blue_run}).out, "greet on-blue\n" + digest + "  -\n");
  EXPECT_EQ(Ql(a, {"run", "log", green_run}).out, "greet on-green\n" + digest + "  -\n");
  EXPECT_EQ(Api(a, "GET", "/api/v1/runs/" + blue_run)["artifacts"],
            Api(a, "GET", "/api/v1/runs/" + green_run)["artifacts"]);
  for (const std::string worker : {"blue", "green"}) {
    EXPECT_EQ(ReadFile(dir_.path() + "/" + worker + "/scripts/" + digest + "/greet.sh"), bytes)
        << worker;
  }

  // The worker of pool `other` pulls all along but is never handed the default project's run;
  // the run and the label-less one say why they wait.
  std::this_thread::sleep_for(std::chrono::seconds(4));
  EXPECT_EQ(Status(a, other_run), "queued");
  EXPECT_EQ(Status(a, arm_run), "queued");
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.run_dispatch_leases WHERE run_id IN ('" + other_run +
                  "', '" + arm_run + "')"),
            0);
  const json other_waiting = Api(a, "GET", "/api/v1/runs/" + other_run)["waiting"];
  EXPECT_EQ(other_waiting.value("reason", ""), "waiting_for_worker") << other_waiting;
  EXPECT_EQ(other_waiting.value("pool", ""), "other");
  EXPECT_EQ(other_waiting.value("detail", ""), "pool other does not serve this project");
  const json arm_waiting = Api(a, "GET", "/api/v1/runs/" + arm_run)["waiting"];
  EXPECT_EQ(arm_waiting.value("detail", ""), "no live worker in pool blue has the labels")
      << arm_waiting;
  EXPECT_EQ(arm_waiting["labels"], (json{{"arch", "arm64"}}));
  // The metric counts both, by pool (the recovery loop refreshes it).
  ASSERT_TRUE(WaitFor(
      [&] {
        httplib::Client client(a.url());
        auto res = client.Get("/metrics");
        return res &&
               res->body.find("ql_runs_waiting_for_worker{pool=\"other\"} 1") !=
                   std::string::npos &&
               res->body.find("ql_runs_waiting_for_worker{pool=\"blue\"} 1") != std::string::npos;
      },
      std::chrono::seconds(15)));

  CommandResult shown = Ql(a, {"run", "show", other_run});
  EXPECT_NE(shown.out.find("waiting_for_worker: pool other: pool other does not serve this "
                           "project"),
            std::string::npos)
      << shown.out << shown.err;
  // A token minted for pool `other` claims pool blue and the label the waiting run needs: the
  // registration is refused, the worker exits, and the run is still nobody's.
  std::unique_ptr<ChildProcess> thief =
      StartWorkerWithToken("thief", a, Mint("worker-token", "thief", "other"), 2, "",
                           {"--pool", "blue", "--label", "arch=arm64"});
  const int thief_exit = thief->WaitExit(std::chrono::seconds(30));
  EXPECT_GT(thief_exit, 0) << "a worker registered in a pool its token is not bound to";
  EXPECT_NE(ReadFile(thief->log()).find("pool_not_allowed"), std::string::npos)
      << ReadFile(thief->log());
  EXPECT_EQ(Status(a, arm_run), "queued");
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.run_dispatch_leases WHERE run_id = '" + arm_run + "'"),
            0);
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.worker_sessions s JOIN ql3.worker_credentials c ON "
                  "c.id = s.credential_id WHERE c.name = 'thief'"),
            0);
  // Granted to the project, the pool's worker takes the run.
  CommandResult granted = Ql(a, {"pool", "grant", "other", "--project", "default"});
  ASSERT_EQ(granted.exit_code, 0) << granted.out << granted.err;
  ASSERT_TRUE(WaitStatus(a, other_run, "succeeded", 30)) << Status(a, other_run);
  EXPECT_EQ(holder(other_run), "other");
  CommandResult listed = Ql(a, {"worker", "list"});
  EXPECT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_NE(listed.out.find("arch=x86,os=linux"), std::string::npos) << listed.out;
  const json workers = Api(a, "GET", "/api/v1/workers")["items"];
  ASSERT_EQ(workers.size(), 4u) << workers;
  EXPECT_EQ(workers[0].value("name", ""), "blue");
  EXPECT_EQ(workers[0].value("pool", ""), "blue");
  EXPECT_EQ(workers[0]["labels"], (json{{"arch", "x86"}, {"os", "linux"}}));
  EXPECT_EQ(workers[0].value("state", ""), "active");
  EXPECT_EQ(workers[3].value("name", ""), "thief");
  EXPECT_EQ(workers[3].value("pool", ""), "other");
  EXPECT_EQ(workers[3].value("state", ""), "never_connected");
  EXPECT_EQ(Status(a, arm_run), "queued");
  EXPECT_EQ(blue->Stop(), 0);
  EXPECT_EQ(green->Stop(), 0);
  EXPECT_EQ(other->Stop(), 0);
  EXPECT_EQ(a.Stop(), 0);
}

TEST_F(ClusterWorkersTest, ANotReadyReplicaHandsNoRunToItsWorkerUntilItIsReady) {
  Replica a("replica-a", Log("a")), b("replica-b", Log("b"));
  ASSERT_TRUE(a.Start(ReplicaArgs(/*admin=*/true)));
  // b's key file is not there yet: b serves, not ready (secret_key_file_missing), and is the
  // only replica its worker knows.
  const std::string late_key = dir_.path() + "/late.key";
  std::vector<std::string> b_args = ReplicaArgs(false);
  b_args.insert(b_args.end(), {"--secret-key-file", late_key});
  ASSERT_TRUE(b.StartServing(b_args));
  std::unique_ptr<ChildProcess> w = StartWorker("w1", b);
  const std::string run = Start(a, Task(a, "hello", "echo granted"));
  ASSERT_FALSE(run.empty());
  // The worker pulls all along; the run stays queued while b is not ready.
  std::this_thread::sleep_for(std::chrono::seconds(4));
  EXPECT_EQ(Status(a, run), "queued") << "a replica that is not ready granted a lease";
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.run_dispatch_leases"), 0);
  // The key appears: b turns ready (it rechecks every second) and hands the run out.
  std::filesystem::copy_file(ClusterKeyFile(), late_key);
  EXPECT_TRUE(WaitStatus(a, run, "succeeded", 30)) << Status(a, run);
}

TEST_F(ClusterWorkersTest, RetentionPurgesOldRunsWithTheirChunksAndKeepsEverythingNewer) {
  CommandResult bad = RunCommand({BinDir() + "/ql-cluster", "serve", "--database-url",
                                  Url("ql3_runtime"), "--retention-interval-ms", "50"},
                                 {kInsecure}, 30'000);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("error: invalid_retention_interval: "), std::string::npos) << bad.err;

  Replica a("replica-a", Log("a")), b("replica-b", Log("b"));
  std::vector<std::string> args_a = ReplicaArgs(/*admin=*/true);
  std::vector<std::string> args_b = ReplicaArgs(false);
  for (auto* args : {&args_a, &args_b}) {
    args->insert(args->end(), {"--retention-interval-ms", "200"});
  }
  ASSERT_TRUE(a.Start(args_a));
  ASSERT_TRUE(b.Start(args_b));
  std::unique_ptr<ChildProcess> worker = StartWorker("w1", a);

  const std::string chatty = Task(a, "chatty", "echo out-$QL_RUN_ID");
  const std::string other = Task(a, "other", "echo other-$QL_RUN_ID");
  ASSERT_FALSE(chatty.empty());
  ASSERT_FALSE(other.empty());
  std::vector<std::string> runs;
  for (int i = 0; i < 4; ++i) {
    runs.push_back(Start(i % 2 ? b : a, chatty));
    ASSERT_TRUE(WaitStatus(a, runs.back(), "succeeded", 30)) << Status(a, runs.back());
  }
  const std::string other_run = Start(a, other);
  ASSERT_TRUE(WaitStatus(a, other_run, "succeeded", 30)) << Status(a, other_run);
  runs.push_back(other_run);

  auto in = [](const std::string& run) { return " WHERE run_id = '" + run + "'"; };
  int64_t purged_chunks = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    const int64_t chunks = Count("SELECT count(*) FROM ql3.run_log_chunks" + in(runs[i]));
    ASSERT_GE(chunks, 1) << runs[i];
    if (i < 2) purged_chunks += chunks;
    Result<std::string> attempt =
        server_->Psql("qinglong", "SELECT id FROM ql3.run_attempts" + in(runs[i]));
    ASSERT_TRUE(attempt.ok());
    const std::string id = attempt->substr(0, attempt->find('\n'));
    const std::string files = dir_.path() + "/w1";
    EXPECT_TRUE(WaitFor(
        [&] {
          return !std::filesystem::exists(files + "/run/" + id) &&
                 !std::filesystem::exists(files + "/log/" + id + ".log");
        },
        std::chrono::seconds(10)))
        << id;
  }

  // chatty keeps its 2 newest runs from now on; nothing else changes.
  CommandResult set = Ql(a, {"task", "set", chatty, "--keep-runs", "2"});
  ASSERT_EQ(set.exit_code, 0) << set.err;
  ASSERT_TRUE(WaitFor(
      [&] { return Count("SELECT count(*) FROM ql3.runs WHERE task_id = '" + chatty + "'") == 2; },
      std::chrono::seconds(20)));

  for (int i = 0; i < 2; ++i) {
    for (const char* table :
         {"runs", "run_attempts", "run_events", "run_log_chunks", "run_dispatch_leases"}) {
      const std::string where =
          std::string(table) == "runs" ? " WHERE id = '" + runs[i] + "'" : in(runs[i]);
      EXPECT_EQ(Count(std::string("SELECT count(*) FROM ql3.") + table + where), 0)
          << table << " still holds purged run " << runs[i];
    }
    EXPECT_NE(Ql(a, {"run", "log", runs[i]}).exit_code, 0);
  }
  // The newer runs of chatty and the run of the other task are intact, logs included.
  for (size_t i = 2; i < runs.size(); ++i) {
    EXPECT_EQ(Status(a, runs[i]), "succeeded");
    EXPECT_EQ(Count("SELECT count(*) FROM ql3.run_attempts" + in(runs[i])), 1);
    EXPECT_GE(Count("SELECT count(*) FROM ql3.run_events" + in(runs[i])), 3);
    EXPECT_GE(Count("SELECT count(*) FROM ql3.run_log_chunks" + in(runs[i])), 1);
    EXPECT_EQ(Count("SELECT count(*) FROM ql3.run_dispatch_leases" + in(runs[i])), 1);
    CommandResult log = Ql(i % 2 ? b : a, {"run", "log", runs[i]});
    EXPECT_EQ(log.exit_code, 0) << log.err;
    EXPECT_EQ(log.out, (runs[i] == other_run ? "other-" : "out-") + runs[i] + "\n");
  }

  // Counted by whichever replica purged, and audited.
  auto metric = [](const Replica& r, const std::string& series) {
    CommandResult text = RunCommand({"/usr/bin/curl", "-s", r.url() + "/metrics"});
    const size_t at = text.out.find("\n" + series + " ");
    return at == std::string::npos ? 0.0 : std::stod(text.out.substr(at + series.size() + 2));
  };
  EXPECT_EQ(metric(a, "ql_retention_purged_runs_total") +
                metric(b, "ql_retention_purged_runs_total"),
            2);
  EXPECT_EQ(metric(a, "ql_retention_purged_log_chunks_total") +
                metric(b, "ql_retention_purged_log_chunks_total"),
            purged_chunks);
  EXPECT_GE(Count("SELECT count(*) FROM ql3.security_audit WHERE action = 'runs.purge' AND "
                  "target_id = '" +
                  chatty + "'"),
            1);
  EXPECT_EQ(worker->Stop(), 0);
  EXPECT_EQ(a.Stop(), 0);
  EXPECT_EQ(b.Stop(), 0);
}

TEST_F(ClusterWorkersTest, AWorkerKilledMidRunLosesItsAttemptAndTheRetryRunsElsewhere) {
  Replica a("replica-a", Log("a"));
  ASSERT_TRUE(a.Start(ReplicaArgs(/*admin=*/true)));
  const std::string retried =
      Task(a, "retried", "sleep 4; echo attempt $QL_ATTEMPT_ID done", json::object(),
           {{"max_attempts", 2},
            {"retry_on_lost", true},
            {"safety", "idempotent"},
            {"backoff_base_ms", 0},
            {"backoff_max_ms", 0}});
  const std::string once = Task(a, "once", "sleep 4");
  std::unique_ptr<ChildProcess> victim = StartWorker("victim", a, 2);
  const std::string retried_run = Start(a, retried);
  const std::string once_run = Start(a, once);
  ASSERT_TRUE(WaitStatus(a, retried_run, "running", 30));
  ASSERT_TRUE(WaitStatus(a, once_run, "running", 30));
  victim->Kill();
  std::unique_ptr<ChildProcess> survivor = StartWorker("survivor", a, 2);

  // Lease (3 s) + recovery cycle (1 s) + the command (4 s), with room for a loaded machine.
  EXPECT_TRUE(WaitStatus(a, retried_run, "succeeded", 60)) << Status(a, retried_run);
  EXPECT_TRUE(WaitStatus(a, once_run, "failed", 60)) << Status(a, once_run);
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.run_attempts WHERE run_id = '" + retried_run + "'"), 2);
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.run_attempts WHERE run_id = '" + retried_run +
                  "' AND attempt = 1 AND status = 'lost'"),
            1);
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.run_attempts WHERE run_id = '" + once_run +
                  "' AND status = 'lost'"),
            1);
  EXPECT_EQ(Api(a, "GET", "/api/v1/runs/" + once_run).value("error_code", ""), "attempt_lost");
  // Never two live leases on one run.
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.run_dispatch_leases WHERE status = 'granted'"), 0);
  EXPECT_EQ(survivor->Stop(), 0);
  EXPECT_EQ(a.Stop(), 0);
}

// The approval commits the run with its claimed attempt in the database, so a replica killed
// right after approving it loses nothing: another replica hands the run to a worker, which
// runs it once on that attempt.
TEST_F(ClusterWorkersTest, AnApprovedRunWhoseReplicaWasKilledBeforeDispatchRunsOnceElsewhere) {
  Replica a("replica-a", Log("a")), b("replica-b", Log("b"));
  ASSERT_TRUE(a.Start(ReplicaArgs(/*admin=*/true)));
  const std::string ran = Exchange() + "/ran.txt";
  std::string run_id;
  ASSERT_NO_FATAL_FAILURE(ApproveGuardedRun(a, "echo ran >> " + ran, run_id));
  a.Kill();  // no worker has seen the run yet
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.run_dispatch_leases WHERE run_id = '" + run_id + "'"),
            0);
  ASSERT_TRUE(b.Start(ReplicaArgs(false)));
  std::unique_ptr<ChildProcess> worker = StartWorker("w1", b, 1);
  ASSERT_TRUE(WaitStatus(b, run_id, "succeeded", 60)) << Status(b, run_id);
  EXPECT_EQ(LineCount(ran), 1);
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.run_attempts WHERE run_id = '" + run_id + "'"), 1);
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.run_events WHERE run_id = '" + run_id +
                  "' AND type = 'run.recovery_required'"),
            0);
  EXPECT_EQ(worker->Stop(), 0);
  EXPECT_EQ(b.Stop(), 0);
}

// An approved run is never executed twice (DESIGN §9.1): its worker dies after the command
// started, and once the lease expires the run waits in recovery_required for a human, although
// its retry policy would retry a lost attempt at once and another worker is waiting.
TEST_F(ClusterWorkersTest, AnApprovedRunWhoseWorkerDiedAfterTheStartWaitsForAHuman) {
  Replica a("replica-a", Log("a"));
  ASSERT_TRUE(a.Start(ReplicaArgs(/*admin=*/true)));
  const std::string ran = Exchange() + "/ran.txt";
  std::string run_id;
  ASSERT_NO_FATAL_FAILURE(ApproveGuardedRun(a, "echo ran >> " + ran + "; sleep 20", run_id));

  std::unique_ptr<ChildProcess> victim = StartWorker("victim", a, 1);
  ASSERT_TRUE(WaitStatus(a, run_id, "running", 30)) << Status(a, run_id);
  const auto lines = [&] { return LineCount(ran); };
  ASSERT_TRUE(WaitFor([&] { return lines() == 1; }, std::chrono::seconds(30)));
  victim->Kill();
  std::unique_ptr<ChildProcess> survivor = StartWorker("survivor", a, 1);

  // Lease (3 s) + recovery cycle (1 s), with room for a loaded machine.
  ASSERT_TRUE(WaitStatus(a, run_id, "recovery_required", 60)) << Status(a, run_id);
  // Well past another lease, several recovery cycles and a retry backoff of zero: nothing ran
  // it again.
  std::this_thread::sleep_for(std::chrono::seconds(8));
  EXPECT_EQ(Status(a, run_id), "recovery_required");
  EXPECT_EQ(lines(), 1);
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.run_attempts WHERE run_id = '" + run_id + "'"), 1);
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.run_attempts WHERE run_id = '" + run_id +
                  "' AND status = 'lost'"),
            1);
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.run_dispatch_leases WHERE run_id = '" + run_id + "'"),
            1);
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.run_events WHERE run_id = '" + run_id +
                  "' AND type = 'run.recovery_required'"),
            1);
  EXPECT_EQ(survivor->Stop(), 0);
  EXPECT_EQ(a.Stop(), 0);
}

// Only a drain stops a worker: a session that expired during a database outage is extended,
// one marked offline is replaced by a new registration, and runs keep running either way.
TEST_F(ClusterWorkersTest, AWorkerWhoseSessionExpiredOrWentOfflineKeepsRunningRuns) {
  Replica a("replica-a", Log("a"));
  ASSERT_TRUE(a.Start(ReplicaArgs(/*admin=*/true)));
  std::unique_ptr<ChildProcess> worker = StartWorker("w1", a);
  const std::string echo = Task(a, "echo", "echo ok");
  const std::string before = Start(a, echo);
  ASSERT_TRUE(WaitStatus(a, before, "succeeded", 30)) << Status(a, before);

  // An outage longer than the session TTL (6 s): the session expires by the database clock.
  ASSERT_TRUE(server_->Stop().ok());
  std::this_thread::sleep_for(std::chrono::seconds(8));
  ASSERT_TRUE(server_->Restart().ok());
  ASSERT_TRUE(WaitFor([&] { return HttpGetStatus(a.url() + "/readyz") == 200; },
                      std::chrono::seconds(30)));
  const std::string after_outage = Start(a, echo);
  EXPECT_TRUE(WaitStatus(a, after_outage, "succeeded", 60)) << Status(a, after_outage);
  EXPECT_EQ(worker->WaitExit(std::chrono::milliseconds(0)), -1) << "the worker exited";

  // The session is set offline behind the worker's back: it registers a new one.
  ASSERT_TRUE(
      server_->Psql("qinglong", "UPDATE ql3.worker_sessions SET status = 'offline' WHERE "
                                "status = 'active'")
          .ok());
  const std::string after_offline = Start(a, echo);
  EXPECT_TRUE(WaitStatus(a, after_offline, "succeeded", 60)) << Status(a, after_offline);
  EXPECT_EQ(worker->WaitExit(std::chrono::milliseconds(0)), -1) << "the worker exited";
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.worker_sessions WHERE status = 'active' AND "
                  "generation = 2"),
            1);
  EXPECT_EQ(worker->Stop(), 0);
  EXPECT_EQ(a.Stop(), 0);
}

TEST_F(ClusterWorkersTest, WrongOrRevokedWorkerTokensAreRefusedAndChangeNothing) {
  Replica a("replica-a", Log("a"));
  ASSERT_TRUE(a.Start(ReplicaArgs(/*admin=*/true)));
  const std::string token = Mint("worker-token", "revoked-one");
  httplib::Client client("127.0.0.1", a.worker_port());
  client.set_keep_alive(false);
  const std::string body = R"({"max_concurrent_runs": 1, "available_slots": 1})";
  client.set_bearer_token_auth(
      "ql3_0000000000000000000000000000000000000000000000000000000000000000");
  auto wrong = client.Post("/worker/v1/sessions", body, "application/json");
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401);
  EXPECT_NE(wrong->body.find("unauthorized"), std::string::npos);
  CommandResult revoke = RunCommand({BinDir() + "/ql-cluster", "worker-token", "revoke",
                                     "revoked-one", "--database-url", Url("ql3_admin")},
                                    {kInsecure}, 60'000);
  ASSERT_EQ(revoke.exit_code, 0) << revoke.err;
  client.set_bearer_token_auth(token.c_str());
  auto revoked = client.Post("/worker/v1/sessions", body, "application/json");
  ASSERT_TRUE(revoked);
  EXPECT_EQ(revoked->status, 401);
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.worker_sessions"), 0);

  // A worker with a revoked token exits with a clear error and takes nothing.
  ChildProcess worker(dir_.path() + "/revoked.log");
  worker.Spawn({BinDir() + "/ql-worker", "--control", a.worker_url(), "--token-file",
                TokenFile("revoked", token), "--work-dir", dir_.path() + "/revoked"});
  EXPECT_EQ(worker.WaitExit(std::chrono::seconds(20)), 3);
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.worker_sessions"), 0);
  EXPECT_EQ(a.Stop(), 0);
}

TEST_F(ClusterWorkersTest, WithoutWorkersRunsWaitQueuedAndTheGaugeCountsThem) {
  Replica a("replica-a", Log("a"));
  ASSERT_TRUE(a.Start(ReplicaArgs(/*admin=*/true)));
  const std::string task = Task(a, "waiting", "true");
  const std::string first = Start(a, task);
  const std::string second = Start(a, task);
  ASSERT_EQ(Status(a, first), "queued");
  ASSERT_EQ(Status(a, second), "queued");
  CommandResult metrics = RunCommand({"/usr/bin/curl", "-s", a.url() + "/metrics"});
  EXPECT_NE(metrics.out.find("\nql_runs_queued 2\n"), std::string::npos) << metrics.out;
  EXPECT_NE(metrics.out.find("\nql_build_info{version=\""), std::string::npos) << metrics.out;
  EXPECT_NE(metrics.out.find("\nprocess_open_fds "), std::string::npos) << metrics.out;
  EXPECT_EQ(a.Stop(), 0);
}

TEST_F(ClusterWorkersTest, TlsListenersServeWorkersAndQlThatTrustTheirCaAndNoOneElse) {
  std::filesystem::create_directories(dir_.path() + "/pki");
  Result<::ql::testing::TestPki> pki = ::ql::testing::MakeTestPki(dir_.path() + "/pki");
  ASSERT_TRUE(pki.ok()) << pki.status().ToString();
  Replica a("replica-a", Log("a"));
  a.UseTls(pki->server_cert, pki->server_key, pki->ca_cert);
  ASSERT_TRUE(a.Start(ReplicaArgs(/*admin=*/true)));
  ASSERT_EQ(a.url().rfind("https://", 0), 0u);

  // A worker that trusts the CA runs a run to its end over https.
  std::unique_ptr<ChildProcess> trusting = StartWorker("trusting", a, 1, pki->ca_cert);
  const std::string task = Task(a, "hello", "echo hello over tls");
  ASSERT_FALSE(task.empty());
  const std::string run = Start(a, task);
  EXPECT_TRUE(WaitStatus(a, run, "succeeded", 30)) << Status(a, run);

  // `ql` with the CA reads the log; with another CA it refuses the server and says why.
  CommandResult log = Ql(a, {"--ca-file", pki->ca_cert, "run", "log", run});
  EXPECT_EQ(log.exit_code, 0) << log.err;
  EXPECT_EQ(log.out, "hello over tls\n");
  CommandResult untrusted = Ql(a, {"--ca-file", pki->other_ca_cert, "run", "log", run});
  EXPECT_EQ(untrusted.exit_code, 1) << untrusted.out;
  EXPECT_NE(untrusted.err.find("tls_verification_failed"), std::string::npos) << untrusted.err;

  // A worker with another CA never registers: the one session is the trusting worker's.
  std::unique_ptr<ChildProcess> untrusting = StartWorker("untrusting", a, 1, pki->other_ca_cert);
  std::this_thread::sleep_for(std::chrono::seconds(3));
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.worker_sessions"), 1);
  std::ifstream in(Log("untrusting"));
  const std::string said((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(said.find("SSLServerVerification"), std::string::npos) << said;

  // Plain http off loopback is refused before anything connects, unless explicitly allowed.
  CommandResult worker_plain =
      RunCommand({BinDir() + "/ql-worker", "--control", "http://10.255.255.1:5801", "--token-file",
                  TokenFile("plain", "ql3_x"), "--work-dir", dir_.path() + "/plain"},
                 {}, 10'000);
  EXPECT_EQ(worker_plain.exit_code, 2);
  EXPECT_NE(worker_plain.err.find("insecure_http_refused"), std::string::npos) << worker_plain.err;
  CommandResult ql_plain = RunCommand(
      {BinDir() + "/ql", "--server", "http://10.255.255.1:5700", "--token", "t", "status"}, {},
      10'000);
  EXPECT_EQ(ql_plain.exit_code, 2);
  EXPECT_NE(ql_plain.err.find("insecure_http_refused"), std::string::npos) << ql_plain.err;
  CommandResult serve_plain =
      RunCommand({BinDir() + "/ql-cluster", "serve", "--listen", "0.0.0.0:0", "--database-url",
                  Url("ql3_runtime")},
                 {kInsecure}, 10'000);
  EXPECT_EQ(serve_plain.exit_code, 2);
  EXPECT_NE(serve_plain.err.find("insecure_http_refused"), std::string::npos) << serve_plain.err;

  untrusting->Kill();
  EXPECT_EQ(trusting->Stop(), 0);
  EXPECT_EQ(a.Stop(), 0);
}

// Secrets in the cluster (DESIGN §10): the replica seals the value it is given and puts only
// sealed material into the lease; a worker without the key cannot run the task
// (secret_unavailable), one with it can, and the command gets the value (it writes its digest)
// while no row of the database, no API answer, no event and no log of a replica or a worker
// holds it.
TEST_F(ClusterWorkersTest, SecretsReachOnlyTheCommandOfAWorkerHoldingTheKey) {
  const std::string key = dir_.path() + "/secret.key";
  ASSERT_EQ(RunCommand({"/bin/sh", "-c", "head -c 32 /dev/urandom > '" + key + "' && chmod 600 '" +
                                             key + "'"})
                .exit_code,
            0);
  std::vector<std::string> args = ReplicaArgs(/*admin=*/true);
  args.insert(args.end(), {"--secret-key-file", key});
  Replica a("replica-a", Log("a"));
  ASSERT_TRUE(a.Start(args));

  const std::string value = "qlproof-cluster-" + std::to_string(::getpid()) + "-" +
                            std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
  std::vector<std::string> answers;
  CommandResult set = RunCommand(
      {"/bin/sh", "-c", "printf %s \"$QL_TEST_VALUE\" | \"$0\" secret set API_KEY",
       BinDir() + "/ql"},
      {"QL_SERVER=" + a.url(), "QL_TOKEN=" + api_token_, "QL_TEST_VALUE=" + value});
  ASSERT_EQ(set.exit_code, 0) << set.err;
  answers.push_back(set.out + set.err);
  const std::string out = Exchange() + "/digest";
  CommandResult task = Ql(a, {"task", "add", "uses-secret", "--secret-env", "TOKEN=API_KEY",
                              "--shell",
                              "echo \"token=$TOKEN\"; printf %s \"$TOKEN\" | sha256sum | "
                              "cut -c1-64 > '" + out + "'"});
  ASSERT_EQ(task.exit_code, 0) << task.err;
  const std::string task_id = task.out.substr(0, task.out.find('\n'));
  CommandResult missing_task =
      Ql(a, {"task", "add", "uses-nothing", "--secret-env", "TOKEN=NEVER_SET", "--shell", "true"});
  ASSERT_EQ(missing_task.exit_code, 0) << missing_task.err;

  // A worker without the key: the run fails, and the command never starts.
  std::unique_ptr<ChildProcess> keyless = StartWorker("keyless", a);
  const std::string refused = Start(a, task_id);
  ASSERT_TRUE(WaitStatus(a, refused, "failed", 30)) << Status(a, refused);
  EXPECT_EQ(Api(a, "GET", "/api/v1/runs/" + refused).value("error_code", ""),
            "secret_unavailable");
  EXPECT_FALSE(std::filesystem::exists(out));
  // A missing secret fails at lease time, before any worker sees the run.
  const std::string missing =
      Start(a, missing_task.out.substr(0, missing_task.out.find('\n')));
  ASSERT_TRUE(WaitStatus(a, missing, "failed", 30)) << Status(a, missing);
  EXPECT_EQ(Api(a, "GET", "/api/v1/runs/" + missing).value("error_code", ""), "secret_not_found");
  EXPECT_EQ(keyless->Stop(), 0);

  // A worker with the key runs it.
  std::unique_ptr<ChildProcess> keyed = StartWorker("keyed", a, 1, "", {"--secret-key-file", key});
  const std::string run = Start(a, task_id);
  ASSERT_TRUE(WaitStatus(a, run, "succeeded", 30)) << Status(a, run);
  CommandResult sum = RunCommand({"/bin/sh", "-c", "printf %s \"$V\" | sha256sum | cut -c1-64"},
                                 {"V=" + value});
  std::ifstream digest(out);
  std::string written;
  std::getline(digest, written);
  EXPECT_EQ(written + "\n", sum.out);
  CommandResult log = Ql(a, {"run", "log", run});
  EXPECT_EQ(log.out, "token=***\n");
  answers.push_back(log.out);
  for (const std::string& path : std::vector<std::string>{
           "/api/v1/secrets", "/api/v1/tasks", "/api/v1/tasks/" + task_id, "/api/v1/runs",
        "/api/v1/runs/" + run, "/api/v1/runs/" + run + "/events?limit=100", "/api/v1/audit",
        "/api/v1/status"}) {
    answers.push_back(Api(a, "GET", path).dump());
  }
  EXPECT_EQ(keyed->Stop(), 0);
  EXPECT_EQ(a.Stop(), 0);

  // Every row of every table of schema ql3, as text.
  Result<std::string> tables = server_->Psql(
      "qinglong", "SELECT tablename FROM pg_tables WHERE schemaname = 'ql3' ORDER BY 1");
  ASSERT_TRUE(tables.ok()) << tables.status().ToString();
  std::istringstream names(*tables);
  int scanned = 0;
  for (std::string table; std::getline(names, table);) {
    if (table.empty()) continue;
    Result<std::string> rows = server_->Psql("qinglong", "SELECT t::text FROM ql3." + table + " t");
    ASSERT_TRUE(rows.ok()) << table << ": " << rows.status().ToString();
    EXPECT_EQ(FindLeak(*rows, value), "") << table;
    ++scanned;
  }
  EXPECT_GE(scanned, 20);
  // And the whole database as a backup would hold it.
  Result<std::string> dump = server_->PgDump("qinglong");
  ASSERT_TRUE(dump.ok()) << dump.status().ToString();
  EXPECT_NE(dump->find("CREATE TABLE ql3.secret_versions"), std::string::npos);
  EXPECT_EQ(FindLeak(*dump, value), "");
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.secret_versions WHERE key_id IS NOT NULL"), 1);
  for (const std::string& answer : answers) {
    EXPECT_EQ(FindLeak(answer, value), "") << answer;
  }
  // The logs of the replica and both workers, and every file a worker kept.
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir_.path())) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(FindLeak(text, value), "") << entry.path();
  }

  // Rotation re-wraps the data key under a new key and leaves the ciphertext as it was; then a
  // replica and a worker holding only the new key run the task again.
  const std::string new_key = dir_.path() + "/secret-2.key";
  ASSERT_EQ(RunCommand({"/bin/sh", "-c", "head -c 32 /dev/urandom > '" + new_key +
                                             "' && chmod 600 '" + new_key + "'"})
                .exit_code,
            0);
  auto envelope = [&] {
    Result<std::string> row =
        server_->Psql("qinglong", "SELECT key_id || ' ' || sealed_value FROM ql3.secret_versions");
    return row.ok() ? *row : row.status().ToString();
  };
  const std::string sealed_before = envelope();
  CommandResult rotated =
      RunCommand({BinDir() + "/ql-cluster", "rotate-secret-key", "--database-url",
                  Url("ql3_admin"), "--secret-key-file", key, "--new-secret-key-file", new_key},
                 {kInsecure}, 60'000);
  ASSERT_EQ(rotated.exit_code, 0) << rotated.err;
  EXPECT_NE(rotated.out.find("1 data keys re-wrapped"), std::string::npos) << rotated.out;
  const std::string sealed_after = envelope();
  EXPECT_NE(sealed_before.substr(0, sealed_before.find(' ')),
            sealed_after.substr(0, sealed_after.find(' ')));
  EXPECT_EQ(sealed_before.substr(sealed_before.find(' ')),
            sealed_after.substr(sealed_after.find(' ')));
  std::vector<std::string> new_args = ReplicaArgs(/*admin=*/true);
  new_args.insert(new_args.end(), {"--secret-key-file", new_key});
  Replica b("replica-b", Log("b"));
  ASSERT_TRUE(b.Start(new_args));
  std::filesystem::remove(out);
  std::unique_ptr<ChildProcess> rekeyed =
      StartWorker("rekeyed", b, 1, "", {"--secret-key-file", new_key});
  const std::string again = Start(b, task_id);
  ASSERT_TRUE(WaitStatus(b, again, "succeeded", 30)) << Status(b, again);
  std::ifstream digest_again(out);
  std::string written_again;
  std::getline(digest_again, written_again);
  EXPECT_EQ(written_again + "\n", sum.out);
  EXPECT_EQ(rotated.out.find(value), std::string::npos);
  EXPECT_EQ(rekeyed->Stop(), 0);
  EXPECT_EQ(b.Stop(), 0);
}

}  // namespace
}  // namespace ql::itest
