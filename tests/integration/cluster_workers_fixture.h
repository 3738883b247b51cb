#pragma once

// The fixture of the tests that run real `ql-cluster serve` replicas with real `ql-worker`s: a
// migrated PostgreSQL per test, credentials minted with `ql-cluster`, and helpers to publish
// tasks, start runs and wait for them through a replica's API.

#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cluster_harness.h"
#include "harness.h"
#include "ql/testing/postgres_server.h"

namespace ql::itest {

using nlohmann::json;
using ::ql::testing::PostgresServer;

inline constexpr char kInsecure[] = "QL3_POSTGRES_ALLOW_INSECURE=true";

class ClusterWorkersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = StartMigratedPostgres();
    ASSERT_NE(server_, nullptr);
    api_token_ = Mint("token", "itest");
  }

  // On failure, shows what the processes printed and what the runs recorded.
  void TearDown() override {
    if (!HasFailure()) return;
    for (const auto& entry : std::filesystem::directory_iterator(dir_.path())) {
      if (entry.path().extension() != ".log") continue;
      std::ifstream in(entry.path());
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (text.size() > 4000) text = "..." + text.substr(text.size() - 4000);
      std::cout << "---- " << entry.path().filename().string() << "\n" << text << "\n";
    }
    Result<std::string> events = server_->Psql(
        "qinglong",
        "SELECT e.run_id || ' ' || e.sequence || ' ' || e.type || ' ' || e.payload_json FROM "
        "ql3.run_events e ORDER BY e.run_id, e.sequence");
    if (events.ok()) std::cout << "---- events\n" << *events << "\n";
  }

  std::string Url(const std::string& role) const { return server_->Url(role, "qinglong"); }

  // Mints a credential with `ql-cluster token|worker-token create` and returns the token.
  std::string Mint(const std::string& kind, const std::string& name, const std::string& pool = "") {
    return MintCredential(*server_, kind, name, pool);
  }

  std::string TokenFile(const std::string& name, const std::string& token) {
    const std::string path = dir_.path() + "/" + name + ".token";
    std::ofstream(path) << token << "\n";
    ::chmod(path.c_str(), 0600);
    return path;
  }

  std::vector<std::string> ReplicaArgs(bool admin) const {
    std::vector<std::string> args = {"--database-url",          Url("ql3_runtime"),
                                     "--worker-database-url",   Url("ql3_worker_ingress"),
                                     "--worker-lease-ms",       "3000",
                                     "--worker-session-ttl-ms", "6000",
                                     "--worker-heartbeat-ms",   "1000",
                                     "--recovery-interval-ms",  "1000"};
    if (admin) {
      args.push_back("--admin-database-url");
      args.push_back(Url("ql3_admin"));
    }
    return args;
  }

  std::string Exchange() const { return dir_.path() + "/exchange"; }

  // Starts ql-worker `name` with a token minted for it: for the pool `extra` names with --pool
  // (the default pool without one).
  std::unique_ptr<ChildProcess> StartWorker(const std::string& name, const Replica& replica,
                                            int slots = 2, const std::string& ca_file = "",
                                            const std::vector<std::string>& extra = {}) {
    std::string pool;
    for (size_t i = 0; i + 1 < extra.size(); ++i) {
      if (extra[i] == "--pool") pool = extra[i + 1];
    }
    return StartWorkerWithToken(name, replica, Mint("worker-token", name, pool), slots, ca_file,
                                extra);
  }

  std::unique_ptr<ChildProcess> StartWorkerWithToken(const std::string& name,
                                                     const Replica& replica,
                                                     const std::string& token, int slots = 2,
                                                     const std::string& ca_file = "",
                                                     const std::vector<std::string>& extra = {}) {
    auto worker = std::make_unique<ChildProcess>(dir_.path() + "/" + name + ".log");
    std::vector<std::string> argv = {
        BinDir() + "/ql-worker", "--control", replica.worker_url(),  "--token-file",
        TokenFile(name, token),  "--slots",   std::to_string(slots), "--work-dir",
        dir_.path() + "/" + name};
    if (!ca_file.empty()) argv.insert(argv.end(), {"--ca-file", ca_file});
    // Commands run confined; they leave what a test checks in the exchange directory.
    MakeExchangeDirectory(Exchange());
    argv.insert(argv.end(), {"--command-writable", Exchange()});
    argv.insert(argv.end(), extra.begin(), extra.end());
    worker->Spawn(argv);
    return worker;
  }

  // Calls the API with `token` (the installation owner's when empty).
  json Api(const Replica& r, const std::string& method, const std::string& path,
           const json& body = json(), const std::string& token = "") {
    httplib::Client client(r.url());
    if (!r.ca_file().empty()) client.set_ca_cert_path(r.ca_file().c_str());
    client.set_bearer_token_auth(token.empty() ? api_token_.c_str() : token.c_str());
    client.set_keep_alive(false);
    client.set_read_timeout(30, 0);
    auto res = method == "GET" ? client.Get(path.c_str())
                               : client.Post(path.c_str(), body.dump(), "application/json");
    EXPECT_TRUE(res && res->status < 300) << path << " " << (res ? res->body : "no response");
    return res ? json::parse(res->body, nullptr, false) : json();
  }

  std::string Task(const Replica& r, const std::string& name, const std::string& command,
                   json extra_spec = json::object(), json retry = json()) {
    json spec{{"command", {{"kind", "shell"}, {"command", command}}}};
    spec.update(extra_spec);
    json body{{"name", name}, {"spec", spec}};
    if (!retry.is_null()) body["retry"] = retry;
    json task = Api(r, "POST", "/api/v1/tasks", body);
    return task.value("id", "");
  }

  std::string Start(const Replica& r, const std::string& task_id) {
    return Api(r, "POST", "/api/v1/runs", {{"task_id", task_id}}).value("id", "");
  }

  std::string Status(const Replica& r, const std::string& run_id) {
    return Api(r, "GET", "/api/v1/runs/" + run_id).value("status", "");
  }

  // Waits until the run reaches `status` (at most `seconds`).
  bool WaitStatus(const Replica& r, const std::string& run_id, const std::string& status,
                  int seconds) {
    return WaitFor([&] { return Status(r, run_id) == status; }, std::chrono::seconds(seconds));
  }

  CommandResult Ql(const Replica& r, std::vector<std::string> args) {
    args.insert(args.begin(), BinDir() + "/ql");
    return RunCommand(args, {"QL_SERVER=" + r.url(), "QL_TOKEN=" + api_token_}, 30'000);
  }

  int64_t Count(const std::string& sql) {
    Result<std::string> out = server_->Psql("qinglong", sql);
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    return out.ok() && !out->empty() ? std::stoll(*out) : -1;
  }

  // Publishes a task running `command` that requires approval (its retry policy would retry a
  // lost attempt at once); an operator requests a run and the installation owner approves it
  // through `r`. `run_id` is the approved run.
  void ApproveGuardedRun(const Replica& r, const std::string& command, std::string& run_id) {
    json body{{"name", "guarded"},
              {"spec", {{"command", {{"kind", "shell"}, {"command", command}}}}},
              {"retry",
               {{"max_attempts", 3},
                {"retry_on_lost", true},
                {"safety", "idempotent"},
                {"backoff_base_ms", 0},
                {"backoff_max_ms", 0}}},
              {"approval", {{"required", true}}}};
    const std::string task_id = Api(r, "POST", "/api/v1/tasks", body).value("id", "");
    ASSERT_FALSE(task_id.empty());
    Api(r, "POST", "/api/v1/principals", {{"name", "ops"}});
    Api(r, "POST", "/api/v1/projects/default/bindings",
        {{"principal", "ops"}, {"role", "operator"}});
    const std::string ops_token =
        Api(r, "POST", "/api/v1/tokens", {{"principal", "ops"}}).value("token", "");
    ASSERT_FALSE(ops_token.empty());
    const json requested =
        Api(r, "POST", "/api/v1/tasks/" + task_id + "/runs", json::object(), ops_token);
    ASSERT_EQ(requested.value("code", ""), "approval_required") << requested.dump();
    const json approved =
        Api(r, "POST", "/api/v1/approvals/" + requested.value("approval_id", "") + "/approve",
            json::object());
    run_id = approved.value("run", json::object()).value("id", "");
    ASSERT_FALSE(run_id.empty()) << approved.dump();
  }

  // The number of lines in `path` (0 when it does not exist).
  static int LineCount(const std::string& path) {
    std::ifstream in(path);
    int n = 0;
    for (std::string line; std::getline(in, line);) ++n;
    return n;
  }

  std::string Log(const std::string& name) const { return dir_.path() + "/" + name + ".log"; }

  TempDir dir_;
  std::unique_ptr<PostgresServer> server_;
  std::string api_token_;
};

}  // namespace ql::itest
