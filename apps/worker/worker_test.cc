// The real Worker against an in-process fake control plane (an httplib::Server on loopback that
// records every call and answers as scripted per test) and the real SupervisionRunner running
// real commands.

#include "worker.h"

#include <absl/strings/escaping.h>
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "control_client.h"
#include "ql/core/clock.h"
#include "ql/core/digest.h"
#include "ql/core/log_source.h"
#include "ql/exec/executor.h"
#include "ql/exec/process_identity.h"
#include "ql/exec/supervision_runner.h"

namespace ql::worker {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr char kToken[] = "worker-token-for-tests-0123456789abcdef";
constexpr char kSessionId[] = "01900000-0000-7000-8000-0000000000aa";

std::string TestUuid(int kind, int n) {
  char buffer[40];
  std::snprintf(buffer, sizeof buffer, "%08x-0000-7000-8000-%012x", kind, n);
  return buffer;
}

int64_t NowMs() { return SystemClock().MonotonicMs(); }

// One request the fake control plane received.
struct Call {
  std::string step;      // register, heartbeat, drain, offline, pull, or a lease step
  std::string offer_id;  // lease calls only
  std::string session_id;  // session calls only (heartbeat, drain, offline): from the path
  json body;
  std::string authorization;
  int64_t at_ms = 0;  // monotonic
};

// What the fake answers; `drop` closes the connection after the headers, so the answer is lost.
// A blob's answer has the blob's bytes as `body`, a JSON string sent as the bytes it holds.
struct Reply {
  int status = 200;
  json body = json::object();
  bool drop = false;
};

json Error(const std::string& code) {
  return json{{"code", code}, {"message", "scripted " + code}};
}

// Polls `done` every 5 ms until it holds or `timeout_ms` pass; returns whether it held.
bool WaitUntil(const std::function<bool()>& done, int64_t timeout_ms) {
  const int64_t until = NowMs() + timeout_ms;
  while (!done()) {
    if (NowMs() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// A control plane that leases queued runs to the pulls, keeps their output, and records
// everything. Its default answers follow docs/worker-protocol.md; a test overrides any step.
class FakeControlPlane {
 public:
  using Override = std::function<Reply(const Call& call, int nth, Reply default_reply)>;

  explicit FakeControlPlane(int64_t lease_ttl_ms = 3000, int64_t heartbeat_interval_ms = 200)
      : lease_ttl_ms_(lease_ttl_ms), heartbeat_interval_ms_(heartbeat_interval_ms) {
    server_.Post(R"(/worker/v1/.*)",
                 [this](const httplib::Request& req, httplib::Response& res) { Handle(req, res); });
    server_.Get(R"(/worker/v1/leases/.*)",
                [this](const httplib::Request& req, httplib::Response& res) { Handle(req, res); });
    server_.set_tcp_nodelay(true);  // as the control plane's listener (httplib_config.h)
    port_ = server_.bind_to_any_port("127.0.0.1");
    // The socket listens from bind on; connections wait in the backlog until accepted.
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }

  ~FakeControlPlane() {
    server_.stop();
    thread_.join();
  }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // Queues a run for the next pull; returns its run id.
  std::string AddRun(std::vector<std::string> argv, json environment = json::object(),
                     int64_t timeout_ms = 60'000) {
    std::lock_guard<std::mutex> lock(mu_);
    ++runs_;
    json plan{{"argv", argv},
              {"environment", environment},
              {"working_directory", nullptr},
              {"timeout_ms", timeout_ms}};
    queue_.push_back({TestUuid(1, runs_), TestUuid(2, runs_), plan});
    return TestUuid(1, runs_);
  }

  // Queues a script command's run: `argv` is [/usr/bin/env, interpreter, args...] and `script`
  // the plan's pin (null: a plan that names none).
  std::string AddScriptRun(std::vector<std::string> argv, json script) {
    std::lock_guard<std::mutex> lock(mu_);
    ++runs_;
    json plan{{"argv", argv},
              {"environment", json::object()},
              {"working_directory", nullptr},
              {"timeout_ms", 60'000}};
    if (!script.is_null()) plan["script"] = script;
    queue_.push_back({TestUuid(1, runs_), TestUuid(2, runs_), plan});
    return TestUuid(1, runs_);
  }

  // Serves `bytes` as the blob of their digest (GET .../blobs/{digest}); returns the digest.
  std::string AddBlob(const std::string& bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string digest = Sha256Hex(bytes);
    blobs_[digest] = bytes;
    return digest;
  }

  // The current session's state as the database has it: "active", "expired" (a pull answers
  // session_expired until a heartbeat extends it) or "offline" (pulls and heartbeats answer
  // session_expired until the worker registers a new session).
  void SetSessionState(const std::string& state) {
    std::lock_guard<std::mutex> lock(mu_);
    session_state_ = state;
  }

  // The log cap the next offers name (0: the field is left out).
  void SetOfferLogCap(int64_t cap) {
    std::lock_guard<std::mutex> lock(mu_);
    offer_log_cap_ = cap;
  }

  void SetOverride(const std::string& step, Override fn) {
    std::lock_guard<std::mutex> lock(mu_);
    overrides_[step] = std::move(fn);
  }

  // Runs `hold` on every call of `step` before the call is recorded or answered (without the
  // fake's lock), so a test can make a request arrive later than others sent after it.
  void SetHold(const std::string& step, std::function<void(const Call&)> hold) {
    std::lock_guard<std::mutex> lock(hold_mu_);
    holds_[step] = std::move(hold);
  }

  std::vector<Call> Calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }

  std::vector<Call> CallsOf(const std::string& step) const {
    std::vector<Call> out;
    for (Call& call : Calls()) {
      if (call.step == step) out.push_back(std::move(call));
    }
    return out;
  }

  // Polls the recorded calls until `done` holds; false after `timeout_ms`.
  bool WaitFor(const std::function<bool(const std::vector<Call>&)>& done, int64_t timeout_ms) {
    const int64_t deadline = NowMs() + timeout_ms;
    while (NowMs() < deadline) {
      if (done(Calls())) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return done(Calls());
  }

  bool WaitForStep(const std::string& step, int64_t timeout_ms) {
    return WaitFor(
        [&](const std::vector<Call>& calls) {
          for (const Call& c : calls) {
            if (c.step == step) return true;
          }
          return false;
        },
        timeout_ms);
  }

  // Returns the output of the run the fake queued as `run_id`, once it was reported.
  std::string OutputOfRun(const std::string& run_id) const {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [offer_id, grant] : grants_) {
      if (grant.offer.value("run_id", "") != run_id) continue;
      auto it = output_.find(offer_id);
      return it == output_.end() ? "" : it->second;
    }
    return "";
  }

  // Returns the `complete` call of the run the fake queued as `run_id` (step empty: none yet).
  Call CompleteOf(const std::string& run_id) const {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [offer_id, grant] : grants_) {
      if (grant.offer.value("run_id", "") != run_id) continue;
      for (const Call& c : calls_) {
        if (c.step == "complete" && c.offer_id == offer_id) return c;
      }
    }
    return Call{};
  }

  // Returns the output the control plane holds for the offer.
  std::string OutputOf(const std::string& offer_id) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = output_.find(offer_id);
    return it == output_.end() ? "" : it->second;
  }

 private:
  struct Queued {
    std::string run_id;
    std::string attempt_id;
    json plan;
  };
  struct Grant {
    std::string lease_token;
    json offer;
    std::string session_id;  // the session that pulled it
  };

  void Handle(const httplib::Request& req, httplib::Response& res) {
    Call call;
    call.body = json::parse(req.body, nullptr, false);
    if (req.method == "GET") {
      // A blob request names its lease in the query and the X-QL-Lease-Token header.
      call.body = json{{"session_id", req.get_param_value("session_id")},
                       {"generation", req.get_param_value("generation")},
                       {"lease_token", req.get_header_value("X-QL-Lease-Token")}};
    }
    call.authorization = req.get_header_value("Authorization");
    call.at_ms = NowMs();
    const std::string& path = req.path;
    const std::string leases = "/worker/v1/leases/";
    if (path == "/worker/v1/sessions") {
      call.step = "register";
    } else if (path == "/worker/v1/pull") {
      call.step = "pull";
    } else if (path.rfind(leases, 0) == 0) {
      const std::string rest = path.substr(leases.size());
      call.offer_id = rest.substr(0, rest.find('/'));
      call.step = rest.substr(rest.find('/') + 1);
      if (call.step.rfind("blobs/", 0) == 0) {
        call.body["digest"] = call.step.substr(6);
        call.step = "blob";
      }
    } else {
      call.step = path.substr(path.rfind('/') + 1);
      const std::string sessions = "/worker/v1/sessions/";
      if (path.rfind(sessions, 0) == 0) {
        const std::string rest = path.substr(sessions.size());
        call.session_id = rest.substr(0, rest.find('/'));
      }
    }
    std::function<void(const Call&)> hold;
    {
      std::lock_guard<std::mutex> lock(hold_mu_);
      auto it = holds_.find(call.step);
      if (it != holds_.end()) hold = it->second;
    }
    if (hold) {
      hold(call);
      call.at_ms = NowMs();
    }
    Reply reply;
    {
      std::lock_guard<std::mutex> lock(mu_);
      calls_.push_back(call);
      int nth = 0;
      for (const Call& c : calls_) nth += c.step == call.step ? 1 : 0;
      reply = Default(call);
      auto it = overrides_.find(call.step);
      if (it != overrides_.end()) reply = it->second(call, nth, reply);
    }
    res.status = reply.status;
    if (reply.drop) {
      res.set_content_provider(
          64, "application/json",
          [](size_t /*offset*/, size_t /*length*/, httplib::DataSink& /*sink*/) { return false; });
      return;
    }
    if (call.step == "blob" && reply.body.is_string()) {
      const std::string bytes = reply.body.get<std::string>();
      res.set_header("X-QL-Digest", call.body.value("digest", ""));
      res.set_header("X-QL-Size", std::to_string(bytes.size()));
      res.set_content(bytes, "application/octet-stream");
      return;
    }
    res.set_content(reply.body.dump(), "application/json");
  }

  // The protocol's answers; called with mu_ held.
  Reply Default(const Call& call) {
    const json& b = call.body;
    if (call.step == "register") {
      ++generation_;
      session_id_ = generation_ == 1 ? kSessionId : TestUuid(6, generation_);
      session_state_ = "active";
      return {201, json{{"session_id", session_id_},
                        {"generation", generation_},
                        {"status", "active"},
                        {"expires_at_ms", 1790000030000},
                        {"session_ttl_ms", 30000},
                        {"heartbeat_interval_ms", heartbeat_interval_ms_},
                        {"lease_ttl_ms", lease_ttl_ms_}}};
    }
    if (call.step == "heartbeat") {
      if (call.session_id != session_id_) return {409, Error("session_fenced")};
      if (session_state_ == "offline") return {409, Error("session_expired")};
      session_state_ = "active";
      return {200, json{{"status", "active"}, {"expires_at_ms", 1790000030000}, {"cancel", {}}}};
    }
    if (call.step == "drain") return {200, json{{"status", "draining"}}};
    if (call.step == "offline") return {200, json{{"status", "offline"}}};
    if (call.step == "pull") {
      if (session_state_ != "active") return {409, Error("session_expired")};
      json offers = json::array();
      const int64_t slots = b.value("available_slots", 0);
      for (const json& proposal : b.at("offers")) {
        const std::string offer_id = proposal.at("offer_id");
        const std::string token = proposal.at("lease_token");
        auto granted = grants_.find(offer_id);
        if (granted != grants_.end()) {
          if (granted->second.lease_token != token) return {409, Error("lease_fenced")};
          offers.push_back(granted->second.offer);
          continue;
        }
        if (queue_.empty() || static_cast<int64_t>(offers.size()) >= slots) continue;
        const Queued run = queue_.front();
        queue_.pop_front();
        json offer{{"offer_id", offer_id},
                   {"run_id", run.run_id},
                   {"attempt_id", run.attempt_id},
                   {"attempt", 1},
                   {"project_id", TestUuid(3, 1)},
                   {"task_id", TestUuid(4, 1)},
                   {"task_revision", 1},
                   {"execution_revision_id", TestUuid(5, 1)},
                   {"lease_version", 1},
                   {"lease_expires_at_ms", 1790000030000},
                   {"lease_ttl_ms", lease_ttl_ms_},
                   {"plan", run.plan}};
        if (offer_log_cap_ > 0) offer["log_cap_bytes"] = offer_log_cap_;
        grants_[offer_id] = Grant{token, offer, b.value("session_id", "")};
        offers.push_back(offer);
      }
      return {200, json{{"offers", offers}, {"cancel", json::array()}}};
    }
    // Lease calls: the lease must be one this plane granted, with its token.
    auto granted = grants_.find(call.offer_id);
    if (granted == grants_.end()) return {404, Error("lease_not_found")};
    if (b.value("lease_token", "") != granted->second.lease_token ||
        b.value("session_id", "") != granted->second.session_id) {
      return {409, Error("lease_fenced")};
    }
    if (call.step == "blob") {
      if (b.value("generation", "") != std::to_string(generation_)) {
        return {409, Error("lease_fenced")};
      }
      auto blob = blobs_.find(b.value("digest", ""));
      if (blob == blobs_.end()) return {404, Error("artifact_not_found")};
      return {200, json(blob->second)};
    }
    if (call.step == "starting") return {200, json{{"status", "starting"}}};
    if (call.step == "running") return {200, json{{"status", "running"}}};
    if (call.step == "renew") {
      return {200, json{{"lease_version", 2},
                        {"lease_expires_at_ms", 1790000030000},
                        {"cancel_requested", false}}};
    }
    if (call.step == "log") {
      std::string& held = output_[call.offer_id];
      const int64_t offset = b.at("offset");
      std::string data;
      if (!absl::Base64Unescape(b.at("data").get<std::string>(), &data)) {
        return {400, Error("invalid_argument")};
      }
      if (offset == static_cast<int64_t>(held.size())) held += data;
      return {200, json{{"next_offset", held.size()}, {"truncated", false}}};
    }
    if (call.step == "complete") {
      const bool ok = b.value("outcome", "") == "exited" && b.value("exit_code", json()) == 0;
      return {200, json{{"run_status", ok ? "succeeded" : "failed"},
                        {"attempt_status", ok ? "succeeded" : "failed"}}};
    }
    return {404, Error("not_found")};
  }

  const int64_t lease_ttl_ms_;
  int64_t offer_log_cap_ = 0;
  const int64_t heartbeat_interval_ms_;
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;

  std::mutex hold_mu_;
  std::map<std::string, std::function<void(const Call&)>> holds_;
  mutable std::mutex mu_;
  std::vector<Call> calls_;
  std::map<std::string, Override> overrides_;
  std::deque<Queued> queue_;
  int runs_ = 0;
  std::map<std::string, Grant> grants_;
  std::map<std::string, std::string> output_;
  std::map<std::string, std::string> blobs_;  // by digest
  int generation_ = 0;
  std::string session_id_;
  std::string session_state_ = "active";
};

// A Worker with short intervals over a temporary work directory, run on its own thread.
class WorkerUnderTest {
 public:
  explicit WorkerUnderTest(const FakeControlPlane& fake,
                           const std::function<void(WorkerOptions&)>& adjust = nullptr) {
    char pattern[] = "/tmp/ql_worker_test_XXXXXX";
    work_dir_ = ::mkdtemp(pattern);
    WorkerOptions options;
    options.slots = 1;
    options.work_dir = work_dir_;
    options.poll_interval_ms = 100;
    options.pull_interval_ms = 200;
    options.retry_initial_ms = 100;
    options.retry_max_ms = 400;
    options.stop_wait_ms = 8000;
    options.drain_timeout_ms = 5000;
    options.capabilities = {{"labels", {"linux"}}};
    options.log = [](const std::string& line) { std::cerr << "  [worker] " << line << "\n"; };
    if (adjust) adjust(options);
    ControlClientOptions client_options;
    client_options.read_timeout_ms = 5000;
    client_ = std::make_unique<ControlClient>(*ParseControlUrl(fake.url()), kToken, client_options);
    runner_ = std::make_unique<exec::SupervisionRunner>(
        std::vector<std::string>{"/proc/self/exe", "supervise"}, RunRootOf(work_dir_),
        WorkRootOf(work_dir_));
    worker_ = std::make_unique<Worker>(options, *client_, *runner_, SystemClock(), SecureRandom());
    thread_ = std::thread([this] {
      status_ = worker_->Run();
      returned_ = true;
    });
  }

  ~WorkerUnderTest() {
    if (thread_.joinable()) {
      worker_->RequestDrain();
      thread_.join();
    }
    std::error_code ec;
    fs::remove_all(work_dir_, ec);
  }

  // Returns true once Run() has returned, waiting at most `timeout_ms`.
  bool WaitReturned(int64_t timeout_ms) {
    const int64_t deadline = NowMs() + timeout_ms;
    while (!returned_ && NowMs() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return returned_;
  }

  // Drains the worker and returns what Run() returned.
  Status Drain() {
    worker_->RequestDrain();
    thread_.join();
    return status_;
  }

  Status Join() {
    thread_.join();
    return status_;
  }

  const std::string& work_dir() const { return work_dir_; }

 private:
  std::string work_dir_;
  std::unique_ptr<ControlClient> client_;
  std::unique_ptr<exec::SupervisionRunner> runner_;
  std::unique_ptr<Worker> worker_;
  std::thread thread_;
  std::atomic<bool> returned_{false};
  Status status_;
};

std::vector<std::string> LeaseSteps(const std::vector<Call>& calls, bool with_renew = false) {
  std::vector<std::string> steps;
  for (const Call& c : calls) {
    if (c.offer_id.empty() || (c.step == "renew" && !with_renew)) continue;
    steps.push_back(c.step);
  }
  return steps;
}

// Returns true once the process `pid` no longer runs (gone, or a zombie nobody reaped).
bool ProcessEnds(pid_t pid, int64_t timeout_ms) {
  const int64_t deadline = NowMs() + timeout_ms;
  while (NowMs() < deadline) {
    std::optional<exec::ProcessStat> stat = exec::ReadProcessStat(pid);
    if (!stat || stat->state == 'Z' || stat->state == 'X') return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// Waits for `path` to hold a pid written by the command; 0 when it does not appear.
pid_t ReadPidFile(const std::string& path, int64_t timeout_ms) {
  const int64_t deadline = NowMs() + timeout_ms;
  while (NowMs() < deadline) {
    std::ifstream in(path);
    long pid = 0;
    if (in >> pid && pid > 0) return static_cast<pid_t>(pid);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return 0;
}

TEST(WorkerTest, ACommandThatEndsAtOnceReportsItsStartWithItsEnd) {
  FakeControlPlane fake;
  fake.AddRun({"/bin/sh", "-c", "echo hello; exit 3"});
  WorkerUnderTest worker(fake);
  ASSERT_TRUE(fake.WaitForStep("complete", 15000));
  ASSERT_TRUE(worker.Drain().ok());
  // No `running` of its own: `complete` carries the pid the start would have reported.
  EXPECT_EQ(LeaseSteps(fake.Calls()), (std::vector<std::string>{"starting", "log", "complete"}));
  const Call complete = fake.CallsOf("complete").at(0);
  EXPECT_GT(complete.body.value("pid", int64_t{0}), 0);
  EXPECT_EQ(complete.body["outcome"], "exited");
  EXPECT_EQ(complete.body["exit_code"], 3);
  EXPECT_EQ(fake.CallsOf("log").at(0).body["data"], "aGVsbG8K");  // base64 of "hello\n"
}

TEST(WorkerTest, ReportsStartRunOutputAndExitInOrder) {
  FakeControlPlane fake;
  // Outlives the moment a command is given to end before its start is reported.
  fake.AddRun({"/bin/sh", "-c", "sleep 0.2; echo hello; exit 3"});
  WorkerUnderTest worker(fake);
  ASSERT_TRUE(fake.WaitForStep("complete", 15000));
  ASSERT_TRUE(worker.Drain().ok());

  const std::vector<Call> calls = fake.Calls();
  for (const Call& c : calls) EXPECT_EQ(c.authorization, std::string("Bearer ") + kToken);
  ASSERT_FALSE(calls.empty());
  EXPECT_EQ(calls.front().step, "register");
  EXPECT_EQ(calls.front().body["max_concurrent_runs"], 1);
  EXPECT_EQ(calls.front().body["available_slots"], 1);
  EXPECT_EQ(calls.front().body["capabilities"], json({{"labels", {"linux"}}}));

  EXPECT_EQ(LeaseSteps(calls),
            (std::vector<std::string>{"starting", "running", "log", "complete"}));
  const std::vector<Call> pulls = fake.CallsOf("pull");
  ASSERT_FALSE(pulls.empty());
  const json& proposal = pulls.front().body["offers"][0];
  EXPECT_EQ(pulls.front().body["session_id"], kSessionId);
  EXPECT_EQ(pulls.front().body["generation"], 1);
  EXPECT_EQ(proposal["lease_token"].get<std::string>().size(), 64u);
  EXPECT_EQ(proposal["lease_token"].get<std::string>().find_first_not_of("0123456789abcdef"),
            std::string::npos);

  const Call running = fake.CallsOf("running").at(0);
  EXPECT_GT(running.body["pid"].get<int64_t>(), 0);
  EXPECT_EQ(running.offer_id, proposal["offer_id"]);
  EXPECT_EQ(running.body["lease_token"], proposal["lease_token"]);
  EXPECT_EQ(running.body["session_id"], kSessionId);
  const Call log = fake.CallsOf("log").at(0);
  EXPECT_EQ(log.body["offset"], 0);
  EXPECT_EQ(log.body["data"], "aGVsbG8K");  // base64 of "hello\n"
  const Call complete = fake.CallsOf("complete").at(0);
  EXPECT_EQ(complete.body["outcome"], "exited");
  EXPECT_EQ(complete.body["exit_code"], 3);
  EXPECT_FALSE(complete.body.contains("signal"));
  EXPECT_EQ(complete.body["log_truncated"], false);
  EXPECT_FALSE(complete.body.contains("pid")) << "the start was reported on its own";

  // The drain ends with the session offline, after the last report.
  std::vector<std::string> session_steps;
  for (const Call& c : calls) {
    if (c.step != "heartbeat" && c.step != "pull") session_steps.push_back(c.step);
  }
  ASSERT_GE(session_steps.size(), 3u);
  EXPECT_EQ(session_steps[session_steps.size() - 3], "complete");
  EXPECT_EQ(session_steps[session_steps.size() - 2], "drain");
  EXPECT_EQ(session_steps.back(), "offline");
  // Nothing of the attempt is left behind locally once it is reported.
  EXPECT_TRUE(fs::is_empty(RunRootOf(worker.work_dir())));
  EXPECT_TRUE(fs::is_empty(LogRootOf(worker.work_dir())));
}

TEST(WorkerTest, CommandSeesPlanEnvironmentAndRunIds) {
  FakeControlPlane fake;
  const std::string run_id = fake.AddRun(
      {"/bin/sh", "-c", R"(printf '%s|%s|%s' "$GREETING" "$QL_RUN_ID" "$QL_ATTEMPT_ID")"},
      json{{"GREETING", "hi there"}});
  WorkerUnderTest worker(fake);
  ASSERT_TRUE(fake.WaitForStep("complete", 15000));
  ASSERT_TRUE(worker.Drain().ok());
  const Call complete = fake.CallsOf("complete").at(0);
  EXPECT_EQ(complete.body["exit_code"], 0);
  EXPECT_EQ(fake.OutputOf(complete.offer_id), "hi there|" + run_id + "|" + TestUuid(2, 1));
}

TEST(WorkerTest, CommandWithoutWorkingDirectoryRunsInItsTasksPrivateDirectory) {
  FakeControlPlane fake;
  fake.AddRun({"/bin/sh", "-c", "pwd"});
  WorkerUnderTest worker(fake);
  ASSERT_TRUE(fake.WaitForStep("complete", 15000));
  ASSERT_TRUE(worker.Drain().ok());
  const Call complete = fake.CallsOf("complete").at(0);
  EXPECT_EQ(complete.body["exit_code"], 0);
  const std::string task_dir = WorkRootOf(worker.work_dir()) + "/" + TestUuid(4, 1);
  EXPECT_EQ(fake.OutputOf(complete.offer_id), task_dir + "\n");
  struct stat st {};
  ASSERT_EQ(::stat(task_dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
}

TEST(WorkerTest, ShipsOutputInChunksAtTheControlPlanesOffsets) {
  FakeControlPlane fake;
  // 600 000 bytes: more than two 256 KiB chunks.
  fake.AddRun({"/bin/sh", "-c", "head -c 600000 /dev/zero | tr '\\0' x"});
  WorkerUnderTest worker(fake);
  ASSERT_TRUE(fake.WaitForStep("complete", 15000));
  ASSERT_TRUE(worker.Drain().ok());
  const std::vector<Call> logs = fake.CallsOf("log");
  ASSERT_GE(logs.size(), 3u);
  int64_t expected_offset = 0;
  for (const Call& log : logs) {
    std::string data;
    ASSERT_TRUE(absl::Base64Unescape(log.body["data"].get<std::string>(), &data));
    EXPECT_LE(data.size(), kMaxLogChunkBytes);
    EXPECT_EQ(log.body["offset"], expected_offset);
    expected_offset += static_cast<int64_t>(data.size());
  }
  const std::string output = fake.OutputOf(logs.front().offer_id);
  EXPECT_EQ(output, std::string(600000, 'x'));
}

TEST(WorkerTest, KeepsHeadAndTailWithinTheOffersLogCap) {
  FakeControlPlane fake;
  fake.SetOfferLogCap(2000);
  fake.AddRun({"/bin/sh", "-c", "seq 1 100000; echo 'ERROR: the last line'; exit 3"});
  WorkerUnderTest worker(fake);
  ASSERT_TRUE(fake.WaitForStep("complete", 15000));
  ASSERT_TRUE(worker.Drain().ok());
  const std::vector<Call> logs = fake.CallsOf("log");
  ASSERT_FALSE(logs.empty());
  const std::string output = fake.OutputOf(logs.front().offer_id);
  EXPECT_LE(output.size(), 2000u) << "the marker line fits in the offer's cap";
  EXPECT_GE(output.size(), 2000u - kLogMarkerRoomBytes);
  EXPECT_TRUE(output.starts_with("1\n2\n3\n")) << output.substr(0, 20);
  EXPECT_NE(output.find(" bytes truncated ---\n"), std::string::npos);
  EXPECT_TRUE(output.ends_with("\n100000\nERROR: the last line\n"))
      << output.substr(output.size() - 40);
  EXPECT_EQ(SupervisorLogCap(16 << 20, 0), 16 << 20);
  EXPECT_EQ(SupervisorLogCap(16 << 20, 8 << 20), (8 << 20) - kLogMarkerRoomBytes);
  EXPECT_EQ(SupervisorLogCap(1000, 8 << 20), 1000);
}

TEST(WorkerTest, CancelRequestedOnRenewEndsTheCommandAsCancelled) {
  FakeControlPlane fake(/*lease_ttl_ms=*/900);  // renewals every 300 ms
  fake.AddRun({"/bin/sh", "-c", "exec sleep 30"});
  fake.SetOverride("renew", [](const Call&, int, Reply reply) {
    reply.body["cancel_requested"] = true;
    return reply;
  });
  WorkerUnderTest worker(fake);
  ASSERT_TRUE(fake.WaitForStep("renew", 10000));
  const int64_t renewed_at = fake.CallsOf("renew").at(0).at_ms;
  ASSERT_TRUE(fake.WaitForStep("complete", 10000));
  const Call complete = fake.CallsOf("complete").at(0);
  EXPECT_EQ(complete.body["outcome"], "cancelled");
  EXPECT_LT(complete.at_ms - renewed_at, 5000);
  ASSERT_TRUE(worker.Drain().ok());
}

TEST(WorkerTest, ExpiredLeaseKillsTheCommandAndReportsNothingMore) {
  FakeControlPlane fake(/*lease_ttl_ms=*/900);
  char pattern[] = "/tmp/ql_worker_pid_XXXXXX";
  const std::string pid_dir = ::mkdtemp(pattern);
  const std::string pid_file = pid_dir + "/pid";
  fake.AddRun({"/bin/sh", "-c", "echo $$ > " + pid_file + "; exec sleep 30"});
  fake.SetOverride("renew", [](const Call&, int, Reply) {
    return Reply{409, Error("lease_expired")};
  });
  WorkerUnderTest worker(fake);
  const pid_t pid = ReadPidFile(pid_file, 10000);
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(fake.WaitForStep("renew", 10000));
  EXPECT_TRUE(ProcessEnds(pid, 10000));
  // The slot is free again: a later pull offers it, and by then nothing was reported.
  const int64_t renewed_at = fake.CallsOf("renew").at(0).at_ms;
  ASSERT_TRUE(fake.WaitFor(
      [&](const std::vector<Call>& calls) {
        for (const Call& c : calls) {
          if (c.step == "pull" && c.at_ms > renewed_at && c.body["available_slots"] == 1) {
            return true;
          }
        }
        return false;
      },
      10000));
  EXPECT_TRUE(fake.CallsOf("complete").empty());
  const std::vector<Call> calls = fake.Calls();
  for (const Call& c : calls) {
    if (!c.offer_id.empty() && c.at_ms > renewed_at) ADD_FAILURE() << "late " << c.step;
  }
  EXPECT_EQ(fake.CallsOf("renew").size(), 1u);
  ASSERT_TRUE(worker.Drain().ok());
  std::error_code ec;
  fs::remove_all(pid_dir, ec);
}

TEST(WorkerTest, LostPullAnswerIsRetriedWithTheSameOffers) {
  FakeControlPlane fake;
  fake.AddRun({"/bin/sh", "-c", "exit 0"});
  // The first pull is granted but its answer never arrives.
  fake.SetOverride("pull", [](const Call&, int nth, Reply reply) {
    reply.drop = nth == 1;
    return reply;
  });
  WorkerUnderTest worker(fake);
  ASSERT_TRUE(fake.WaitForStep("complete", 15000));
  ASSERT_TRUE(worker.Drain().ok());
  const std::vector<Call> pulls = fake.CallsOf("pull");
  ASSERT_GE(pulls.size(), 2u);
  EXPECT_EQ(pulls[1].body["offers"], pulls[0].body["offers"]);
  const Call starting = fake.CallsOf("starting").at(0);
  EXPECT_EQ(starting.offer_id, pulls[0].body["offers"][0]["offer_id"]);
  EXPECT_EQ(starting.body["lease_token"], pulls[0].body["offers"][0]["lease_token"]);
  EXPECT_EQ(fake.CallsOf("starting").size(), 1u);
  EXPECT_EQ(fake.CallsOf("complete").at(0).body["exit_code"], 0);
}

TEST(WorkerTest, UnauthorizedRegistrationEndsRunPromptly) {
  FakeControlPlane fake;
  fake.SetOverride("register", [](const Call&, int, Reply) {
    return Reply{401, Error("unauthorized")};
  });
  const int64_t started = NowMs();
  WorkerUnderTest worker(fake);
  ASSERT_TRUE(worker.WaitReturned(3000));
  const Status status = worker.Join();
  EXPECT_LT(NowMs() - started, 3000);
  EXPECT_TRUE(IsUnauthorized(status)) << status.ToString();
  const std::vector<Call> calls = fake.Calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].step, "register");
}

TEST(WorkerTest, FencedSessionStopsEveryCommandWithoutReports) {
  FakeControlPlane fake(/*lease_ttl_ms=*/30000, /*heartbeat_interval_ms=*/200);
  char pattern[] = "/tmp/ql_worker_pid_XXXXXX";
  const std::string pid_dir = ::mkdtemp(pattern);
  const std::string pid_file = pid_dir + "/pid";
  fake.AddRun({"/bin/sh", "-c", "echo $$ > " + pid_file + "; exec sleep 30"});
  std::atomic<bool> fence{false};
  fake.SetOverride("heartbeat", [&fence](const Call&, int, Reply reply) {
    return fence ? Reply{409, Error("session_fenced")} : reply;
  });
  WorkerUnderTest worker(fake);
  const pid_t pid = ReadPidFile(pid_file, 10000);
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(fake.WaitForStep("running", 10000));
  fence = true;
  ASSERT_TRUE(worker.WaitReturned(10000));
  const Status status = worker.Join();
  EXPECT_TRUE(IsSessionLost(status)) << status.ToString();
  EXPECT_TRUE(ProcessEnds(pid, 5000));
  EXPECT_TRUE(fake.CallsOf("complete").empty());
  EXPECT_TRUE(fake.CallsOf("offline").empty());
  std::error_code ec;
  fs::remove_all(pid_dir, ec);
}

// The chaos finding: after an outage the session had expired, and a pull that reached the
// control plane before any heartbeat made the whole fleet drain and exit. Heartbeats here are
// too rare to help; the worker itself must extend the session and keep running runs.
TEST(WorkerTest, AnExpiredSessionIsExtendedByAHeartbeatAndTheWorkerKeepsRunning) {
  FakeControlPlane fake(/*lease_ttl_ms=*/3000, /*heartbeat_interval_ms=*/60'000);
  WorkerUnderTest worker(fake);
  ASSERT_TRUE(fake.WaitForStep("pull", 10000));
  fake.SetSessionState("expired");
  fake.AddRun({"/bin/sh", "-c", "echo after the outage"});
  ASSERT_TRUE(fake.WaitForStep("complete", 10000));
  EXPECT_FALSE(worker.WaitReturned(300)) << "the worker stopped on an expired session";
  const Call complete = fake.CallsOf("complete").at(0);
  EXPECT_EQ(complete.body["outcome"], "exited");
  EXPECT_EQ(fake.OutputOf(complete.offer_id), "after the outage\n");
  EXPECT_EQ(fake.CallsOf("register").size(), 1u);  // the same session, extended
  EXPECT_FALSE(fake.CallsOf("heartbeat").empty());
  EXPECT_TRUE(fake.CallsOf("drain").empty());
  // Runs keep coming.
  fake.AddRun({"/bin/sh", "-c", "echo next"});
  ASSERT_TRUE(fake.WaitFor([](const std::vector<Call>& calls) {
    return std::count_if(calls.begin(), calls.end(),
                         [](const Call& c) { return c.step == "complete"; }) == 2;
  }, 10000));
  EXPECT_TRUE(worker.Drain().ok());
}

TEST(WorkerTest, AnOfflineSessionIsReplacedOnceItsRunsEndedAndTheWorkerKeepsRunning) {
  FakeControlPlane fake(/*lease_ttl_ms=*/3000, /*heartbeat_interval_ms=*/200);
  fake.AddRun({"/bin/sh", "-c", "sleep 1; echo first"});
  WorkerUnderTest worker(fake, [](WorkerOptions& o) { o.slots = 2; });
  ASSERT_TRUE(fake.WaitForStep("running", 10000));
  fake.SetSessionState("offline");
  fake.AddRun({"/bin/sh", "-c", "echo second"});
  ASSERT_TRUE(fake.WaitFor([](const std::vector<Call>& calls) {
    return std::count_if(calls.begin(), calls.end(),
                         [](const Call& c) { return c.step == "complete"; }) == 2;
  }, 15000));
  EXPECT_FALSE(worker.WaitReturned(300)) << "the worker stopped on an offline session";
  const std::vector<Call> registers = fake.CallsOf("register");
  const std::vector<Call> completes = fake.CallsOf("complete");
  ASSERT_EQ(registers.size(), 2u);
  // The run leased under the offline session was reported under it before the new session
  // (which fences the old one) was registered; the next run went to the new session.
  EXPECT_EQ(completes[0].body["session_id"], kSessionId);
  EXPECT_EQ(completes[0].body["outcome"], "exited");
  EXPECT_LE(completes[0].at_ms, registers[1].at_ms);
  EXPECT_EQ(completes[1].body["session_id"], TestUuid(6, 2));
  EXPECT_EQ(fake.OutputOf(completes[1].offer_id), "second\n");
  EXPECT_TRUE(fake.CallsOf("drain").empty());
  EXPECT_TRUE(worker.Drain().ok());
  EXPECT_EQ(fake.CallsOf("offline").back().body["generation"], 2);
}

// A heartbeat of the offline session, sent just before the worker registered its new session
// but arriving after, is answered session_fenced: the newer session is the worker's own, so it
// must not stop. Once the session is offline the fake holds the latest heartbeat of the old
// session until a newer one arrives (which releases it) or the new session is registered; the
// main thread's own renewal heartbeat is thus released by the heartbeat thread's next beat, and
// the beat held last is answered after the registration.
TEST(WorkerTest, AFencedAnswerToAHeartbeatOfTheSessionItReplacedDoesNotStopTheWorker) {
  FakeControlPlane fake(/*lease_ttl_ms=*/3000, /*heartbeat_interval_ms=*/100);
  std::atomic<bool> offline{false};
  std::atomic<int> tickets{0};
  std::atomic<int> held_past_registration{0};
  fake.SetHold("heartbeat", [&](const Call& call) {
    if (!offline || call.session_id != kSessionId) return;
    const int ticket = ++tickets;
    auto registered = [&] { return fake.CallsOf("register").size() >= 2; };
    WaitUntil([&] { return tickets != ticket || registered(); }, 5000);
    if (tickets == ticket && registered()) ++held_past_registration;
  });
  WorkerUnderTest worker(fake);
  ASSERT_TRUE(fake.WaitForStep("pull", 10000));
  offline = true;
  fake.SetSessionState("offline");
  ASSERT_TRUE(fake.WaitFor([](const std::vector<Call>& calls) {
    return std::count_if(calls.begin(), calls.end(),
                         [](const Call& c) { return c.step == "register"; }) == 2;
  }, 10000));
  fake.AddRun({"/bin/sh", "-c", "echo after"});
  ASSERT_TRUE(fake.WaitForStep("complete", 10000));
  EXPECT_FALSE(worker.WaitReturned(300)) << "the worker stopped on its own old session";
  // The interleaving happened: an old-session heartbeat was answered after the registration
  // of the new session (so session_fenced).
  EXPECT_EQ(held_past_registration.load(), 1);
  const std::vector<Call> beats = fake.CallsOf("heartbeat");
  const std::vector<Call> registers = fake.CallsOf("register");
  EXPECT_TRUE(std::any_of(beats.begin(), beats.end(), [&](const Call& c) {
    return c.session_id == kSessionId && c.at_ms >= registers[1].at_ms;
  }));
  EXPECT_TRUE(worker.Drain().ok());
}

TEST(WorkerTest, DrainCancelsCommandsStillRunningAtTheTimeoutAndGoesOffline) {
  FakeControlPlane fake;
  fake.AddRun({"/bin/sh", "-c", "exec sleep 30"});
  WorkerUnderTest worker(fake, [](WorkerOptions& o) { o.drain_timeout_ms = 500; });
  ASSERT_TRUE(fake.WaitForStep("running", 10000));
  const int64_t drain_requested = NowMs();
  ASSERT_TRUE(worker.Drain().ok());
  EXPECT_LT(NowMs() - drain_requested, 8000);
  const std::vector<Call> calls = fake.Calls();
  std::vector<std::string> tail;
  bool after_drain = false;
  for (const Call& c : calls) {
    after_drain = after_drain || c.step == "drain";
    if (after_drain && c.step != "heartbeat" && c.step != "renew") tail.push_back(c.step);
  }
  EXPECT_EQ(tail, (std::vector<std::string>{"drain", "complete", "offline"}));
  EXPECT_EQ(fake.CallsOf("complete").at(0).body["outcome"], "cancelled");
}

TEST(WorkerTest, DrainLetsRunningCommandsFinish) {
  FakeControlPlane fake;
  fake.AddRun({"/bin/sh", "-c", "sleep 1; echo done"});
  WorkerUnderTest worker(fake);
  ASSERT_TRUE(fake.WaitForStep("running", 10000));
  ASSERT_TRUE(worker.Drain().ok());
  const Call complete = fake.CallsOf("complete").at(0);
  EXPECT_EQ(complete.body["outcome"], "exited");
  EXPECT_EQ(complete.body["exit_code"], 0);
  EXPECT_EQ(fake.OutputOf(complete.offer_id), "done\n");
  // No pull after the drain call.
  bool drained = false;
  for (const Call& c : fake.Calls()) {
    drained = drained || c.step == "drain";
    if (drained) {
      EXPECT_NE(c.step, "pull");
    }
  }
}

TEST(WorkerTest, AShortCommandIsReportedSoonAfterItsEndNotAtThePollInterval) {
  FakeControlPlane fake;
  fake.AddRun({"/bin/sh", "-c", "sleep 0.2"});
  WorkerUnderTest worker(fake, [](WorkerOptions& o) { o.poll_interval_ms = 5000; });
  ASSERT_TRUE(fake.WaitForStep("complete", 15000));
  const int64_t ran_ms =
      fake.CallsOf("complete").at(0).at_ms - fake.CallsOf("running").at(0).at_ms;
  // The command takes 200 ms; its end is noticed by polls that start at a few milliseconds
  // and back off, not by the 5 s poll interval.
  EXPECT_GE(ran_ms, 150);
  EXPECT_LT(ran_ms, 1500);
  EXPECT_TRUE(worker.Drain().ok());
}

// The pin of a file script `name`.sh holding `bytes` (served by `fake`).
json FilePin(FakeControlPlane& fake, const std::string& name, const std::string& bytes) {
  return json{{"name", name},
              {"version", 1},
              {"digest", fake.AddBlob(bytes)},
              {"kind", "file"},
              {"entry", name + ".sh"}};
}

// Waits for the `complete` of the fake's run `run_id` and returns it.
Call AwaitComplete(FakeControlPlane& fake, const std::string& run_id) {
  EXPECT_TRUE(fake.WaitFor(
      [&](const std::vector<Call>&) { return !fake.CompleteOf(run_id).step.empty(); }, 15000))
      << "run " << run_id << " was not reported";
  return fake.CompleteOf(run_id);
}

TEST(WorkerTest, AScriptRunsThePinnedBytesAndADamagedCacheEntryIsFetchedAgain) {
  FakeControlPlane fake;
  const std::string bytes = "echo \"pinned bytes ran with $*\"\nsha256sum < \"$0\"\n";
  const json pin = FilePin(fake, "greet", bytes);
  const std::string digest = pin["digest"];
  const std::string first = fake.AddScriptRun({"/usr/bin/env", "sh", "a", "b c"}, pin);
  WorkerUnderTest worker(fake);
  const Call done = AwaitComplete(fake, first);
  EXPECT_EQ(done.body["outcome"], "exited");
  EXPECT_EQ(done.body["exit_code"], 0);
  const std::string expected = "pinned bytes ran with a b c\n" + digest + "  -\n";
  EXPECT_EQ(fake.OutputOfRun(first), expected);
  // Fetched under the lease, after `starting` and before the command's start.
  const std::vector<Call> fetches = fake.CallsOf("blob");
  ASSERT_EQ(fetches.size(), 1u);
  EXPECT_EQ(fetches[0].body["digest"], digest);
  EXPECT_EQ(fetches[0].offer_id, done.offer_id);
  EXPECT_EQ(fetches[0].body["session_id"], kSessionId);
  EXPECT_EQ(fetches[0].body["generation"], "1");
  EXPECT_EQ(fetches[0].body["lease_token"].get<std::string>().size(), 64u);
  std::vector<std::string> steps;
  for (const Call& c : fake.Calls()) {
    if (c.offer_id == done.offer_id && c.step != "renew") steps.push_back(c.step);
  }
  ASSERT_GE(steps.size(), 3u);
  EXPECT_EQ(steps[0], "starting");
  EXPECT_EQ(steps[1], "blob");

  // The version stays in the cache, read-only: the next run of it fetches nothing.
  const std::string entry = ScriptsRootOf(worker.work_dir()) + "/" + digest;
  const std::string file = entry + "/greet.sh";
  struct stat st {};
  ASSERT_EQ(::stat(file.c_str(), &st), 0) << file;
  EXPECT_EQ(st.st_mode & 0222, 0u);
  const std::string second = fake.AddScriptRun({"/usr/bin/env", "sh", "again"}, pin);
  AwaitComplete(fake, second);
  EXPECT_EQ(fake.OutputOfRun(second), "pinned bytes ran with again\n" + digest + "  -\n");
  EXPECT_EQ(fake.CallsOf("blob").size(), 1u);

  // Damaged on disk: never run, fetched again, and the pinned bytes run.
  ASSERT_EQ(::chmod(entry.c_str(), 0755), 0);
  ASSERT_EQ(::chmod(file.c_str(), 0644), 0);
  std::ofstream(file, std::ios::trunc) << "echo tampered\n";
  const std::string third = fake.AddScriptRun({"/usr/bin/env", "sh", "once more"}, pin);
  AwaitComplete(fake, third);
  EXPECT_EQ(fake.OutputOfRun(third), "pinned bytes ran with once more\n" + digest + "  -\n");
  EXPECT_EQ(fake.CallsOf("blob").size(), 2u);
  std::ifstream in(file);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()),
            bytes);
  ASSERT_TRUE(worker.Drain().ok());
}

TEST(WorkerTest, ATreeScriptRunsItsEntryBesideItsOtherFiles) {
  FakeControlPlane fake;
  const std::string main_sh = ". \"$(dirname \"$0\")/lib/util.sh\"; util \"$@\"\n";
  const std::string util_sh = "util() { echo \"from util: $*\"; }\n";
  Result<std::string> manifest = EncodeTreeManifest(
      {{"main.sh", false, static_cast<int64_t>(main_sh.size()), fake.AddBlob(main_sh)},
       {"lib/util.sh", false, static_cast<int64_t>(util_sh.size()), fake.AddBlob(util_sh)}});
  ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
  const json pin{{"name", "pkg"},
                 {"version", 2},
                 {"digest", fake.AddBlob(*manifest)},
                 {"kind", "tree"},
                 {"entry", "main.sh"}};
  const std::string run = fake.AddScriptRun({"/usr/bin/env", "sh", "x"}, pin);
  WorkerUnderTest worker(fake);
  const Call done = AwaitComplete(fake, run);
  EXPECT_EQ(done.body["exit_code"], 0) << done.body.dump();
  EXPECT_EQ(fake.OutputOfRun(run), "from util: x\n");
  EXPECT_EQ(fake.CallsOf("blob").size(), 3u) << "the manifest and its two files";
  ASSERT_TRUE(worker.Drain().ok());
}

TEST(WorkerTest, AScriptThatCannotBeFetchedRightNeverRuns) {
  FakeControlPlane fake;
  char pattern[] = "/tmp/ql_worker_ran_XXXXXX";
  const std::string marker_dir = ::mkdtemp(pattern);
  const std::string body = "touch " + marker_dir + "/ran\n";
  // Not served at all; served with other bytes than its digest's.
  const json missing{{"name", "gone"},
                     {"version", 1},
                     {"digest", Sha256Hex("bytes the control plane does not have")},
                     {"kind", "file"},
                     {"entry", "gone.sh"}};
  const std::string unavailable = fake.AddScriptRun({"/usr/bin/env", "sh"}, missing);
  const json damaged = FilePin(fake, "damaged", body);
  fake.SetOverride("blob", [](const Call&, int, Reply reply) {
    if (reply.body.is_string()) reply.body = "#" + reply.body.get<std::string>().substr(1);
    return reply;
  });
  const std::string corrupt = fake.AddScriptRun({"/usr/bin/env", "sh"}, damaged);
  // A pin that is not one (a kind no version has): refused, never run.
  json bad_pin = FilePin(fake, "bad", body);
  bad_pin["kind"] = "zip";
  const std::string unpinned = fake.AddScriptRun({"/usr/bin/env", "sh"}, bad_pin);
  WorkerUnderTest worker(fake);
  const Call not_fetched = AwaitComplete(fake, unavailable);
  EXPECT_EQ(not_fetched.body["outcome"], "spawn_failed");
  EXPECT_EQ(not_fetched.body["error_code"], "artifact_unavailable");
  EXPECT_NE(not_fetched.body["message"].get<std::string>().find("gone@1"), std::string::npos)
      << not_fetched.body.dump();
  const Call not_verified = AwaitComplete(fake, corrupt);
  EXPECT_EQ(not_verified.body["outcome"], "spawn_failed");
  EXPECT_EQ(not_verified.body["error_code"], "artifact_corrupt");
  const Call refused = AwaitComplete(fake, unpinned);
  EXPECT_EQ(refused.body["outcome"], "spawn_failed");
  EXPECT_EQ(refused.body["error_code"], "script_plan_invalid");
  ASSERT_TRUE(worker.Drain().ok());
  EXPECT_TRUE(fake.CallsOf("running").empty());
  EXPECT_FALSE(fs::exists(marker_dir + "/ran")) << "a command ran";
  EXPECT_TRUE(fs::is_empty(ScriptsRootOf(worker.work_dir()))) << "nothing unverified is kept";
  std::error_code ec;
  fs::remove_all(marker_dir, ec);
}

TEST(ControlUrlTest, AcceptsHttpAndHttpsAndRefusesOthers) {
  Result<ControlEndpoint> plain = ParseControlUrl("http://10.0.0.5:5801/");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->host, "10.0.0.5");
  EXPECT_EQ(plain->port, 5801);
  EXPECT_EQ(plain->base_path, "");
  Result<ControlEndpoint> bare = ParseControlUrl("[::1]:5801");
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->host, "::1");
  EXPECT_EQ(bare->url, "http://[::1]:5801");
  Result<ControlEndpoint> tls = ParseControlUrl("https://x:1");
  ASSERT_TRUE(tls.ok());
  EXPECT_TRUE(tls->tls);
  EXPECT_EQ(ParseControlUrl("ftp://x:1").status().reason(), "invalid_control_url");
  EXPECT_EQ(ParseControlUrl("http://x:99999").status().reason(), "invalid_control_url");
  EXPECT_EQ(ParseControlUrl("").status().reason(), "invalid_control_url");
}

TEST(ControlClientTest, MapsTransportFailureAndServerErrors) {
  // A port nobody listens on: bind one and close it again.
  int port = 0;
  {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
    port = ntohs(address.sin_port);
    ::close(fd);
  }
  ControlClient unreachable(*ParseControlUrl("http://127.0.0.1:" + std::to_string(port)), kToken);
  const Status down = unreachable.Drain(SessionRef{kSessionId, 1});
  EXPECT_EQ(down.code(), StatusCode::kUnavailable);
  EXPECT_EQ(down.reason(), "control_unreachable");
  EXPECT_EQ(down.message().find(kToken), std::string::npos);

  FakeControlPlane fake;
  fake.SetOverride("drain", [](const Call&, int, Reply) { return Reply{503, Error("draining")}; });
  fake.SetOverride("offline", [](const Call&, int, Reply) {
    return Reply{409, Error("session_fenced")};
  });
  ControlClient client(*ParseControlUrl(fake.url()), kToken);
  const Status busy = client.Drain(SessionRef{kSessionId, 1});
  EXPECT_EQ(busy.code(), StatusCode::kUnavailable);
  EXPECT_EQ(busy.reason(), "draining");
  const Status fenced = client.Offline(SessionRef{kSessionId, 1});
  EXPECT_EQ(fenced.code(), StatusCode::kConflict);
  EXPECT_TRUE(IsSessionLost(fenced));
}

TEST(ControlClientTest, CallsOnAKeptConnectionDoNotWaitForDelayedAcknowledgements) {
  FakeControlPlane fake;
  ControlClient client(*ParseControlUrl(fake.url()), kToken);
  std::vector<int64_t> took;
  for (int i = 0; i < 21; ++i) {
    const int64_t t0 = NowMs();
    ASSERT_TRUE(client.Drain(SessionRef{kSessionId, 1}).ok());
    took.push_back(NowMs() - t0);
  }
  // A request is written as head and body; with Nagle's algorithm on, the body waits for the
  // peer's delayed acknowledgement of the head (40 ms on Linux) on every call after the first.
  std::sort(took.begin(), took.end());
  EXPECT_LT(took[took.size() / 2], 20) << "median call took " << took[took.size() / 2] << " ms";
}

}  // namespace
}  // namespace ql::worker

// The supervisor runs as this binary's `supervise` subcommand, as it does under ql-worker.
int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "supervise") return ql::exec::SupervisorMain(argv[2]);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
