#include "ql/engine/local_dispatcher.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "ql/core/store_commands.h"
#include "ql/engine/control_service.h"
#include "ql/engine/secret_service.h"
#include "ql/storage/sqlite/sqlite_store.h"
#include "ql/testing/fake_clock.h"
#include "ql/testing/test_principals.h"

namespace ql {
namespace {

using testing::FakeClock;
using testing::SeededRandom;

// What a test controls about one fake attempt.
struct FakeProcess {
  AttemptLaunch launch;
  std::optional<AttemptOutcome> outcome;
  bool truncated = false;
  int cancel_requests = 0;
};

class FakeHandle final : public AttemptHandle {
 public:
  explicit FakeHandle(std::shared_ptr<FakeProcess> p) : p_(std::move(p)) {}
  std::optional<AttemptOutcome> Poll() override { return p_->outcome; }
  bool LogTruncated() const override { return p_->truncated; }
  Status RequestCancel() override {
    ++p_->cancel_requests;
    return Status::Ok();
  }
  int64_t pid() const override { return 4242; }
  int64_t process_start_ticks() const override { return 99; }

 private:
  std::shared_ptr<FakeProcess> p_;
};

class FakeRunner final : public AttemptRunner {
 public:
  Result<std::unique_ptr<AttemptHandle>> Launch(const AttemptLaunch& launch) override {
    auto p = std::make_shared<FakeProcess>();
    p->launch = launch;
    processes[launch.attempt_id] = p;
    order.push_back(launch.attempt_id);
    return std::unique_ptr<AttemptHandle>(new FakeHandle(p));
  }
  Result<std::unique_ptr<AttemptHandle>> Adopt(const std::string& attempt_id) override {
    auto it = processes.find(attempt_id);
    if (it == processes.end()) return NotFound("exec_attempt_not_found", attempt_id);
    return std::unique_ptr<AttemptHandle>(new FakeHandle(it->second));
  }
  std::map<std::string, std::shared_ptr<FakeProcess>> processes;
  std::vector<std::string> order;
};

// Log sizes by attempt id, as a test sets them.
class FakeLogSizes final : public LogSource {
 public:
  Result<LogChunk> ReadLog(const AttemptRecord&, int64_t, size_t) const override {
    return LogChunk{};
  }
  Result<int64_t> LogSize(const AttemptRecord& attempt) const override {
    auto it = sizes.find(attempt.id);
    return it == sizes.end() ? 0 : it->second;
  }
  std::map<std::string, int64_t> sizes;
};

AttemptOutcome Exited(int code) {
  AttemptOutcome o;
  o.kind = AttemptOutcome::Kind::kExited;
  o.exit_code = code;
  return o;
}

class LocalDispatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ql-disp-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    SqliteOptions options;
    options.path = dir_ + "/q.db";
    store_ = std::move(SqliteStore::Open(options, clock_).value());
    control_ = std::make_unique<ControlService>(*store_, clock_, random_, ControlOptions{});
    ASSERT_TRUE(control_->EnsureDefaultProject().ok());
    options_.max_concurrency = 1;
    options_.log_cap_bytes = 1024;
    options_.log_root = dir_ + "/log";
    TaskWrite write;
    write.body = {{"name", "t"},
                  {"spec",
                   {{"command", {{"kind", "shell"}, {"command", "echo hi"}}},
                    {"environment", {{"GREETING", "hello"}}},
                    {"timeoutMs", 5000}}}};
    task_id_ = control_->PublishTask(write)->task.head.task_id;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  LocalDispatcher Make() {
    return LocalDispatcher(store_->runs(), store_->definitions(), runner_, clock_, random_,
                           metrics_, options_);
  }
  std::string Start() {
    StartRunRequest request;
    request.task_id = task_id_;
    Result<StartedRun> run = control_->StartRun(request);
    EXPECT_TRUE(run.ok()) << run.status().ToString();
    return run->run.id;
  }
  RunRecord Get(const std::string& id) { return *store_->runs().GetRun(id); }
  std::vector<std::string> EventTypes(const std::string& id) {
    std::vector<std::string> types;
    for (const EventRecord& e : *store_->runs().ListEvents(id, 0, 100)) types.push_back(e.type);
    return types;
  }
  std::shared_ptr<FakeProcess> Process(const std::string& run_id) {
    for (auto& [attempt, p] : runner_.processes) {
      if (p->launch.run_id == run_id) return p;
    }
    return nullptr;
  }
  void Tick(LocalDispatcher& d) {
    Result<TickReport> r = d.Tick();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->errors, 0);
  }

  std::string dir_;
  FakeClock clock_;
  SeededRandom random_{11};
  Metrics metrics_;
  FakeRunner runner_;
  LocalDispatcherOptions options_;
  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<ControlService> control_;
  std::string task_id_;
};

TEST_F(LocalDispatcherTest, LaunchesThePinnedPlanAndRecordsSuccess) {
  const std::string run = Start();
  LocalDispatcher d = Make();
  Tick(d);
  RunRecord r = Get(run);
  EXPECT_EQ(r.status, "running");
  auto p = Process(run);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->launch.argv, (std::vector<std::string>{"/bin/sh", "-c", "echo hi"}));
  EXPECT_EQ(p->launch.timeout_ms, 5000);
  EXPECT_EQ(p->launch.log_path, dir_ + "/log/" + task_id_ + "/" + run + "/1.log");
  std::map<std::string, std::string> env(p->launch.environment.begin(),
                                         p->launch.environment.end());
  EXPECT_EQ(env["GREETING"], "hello");
  EXPECT_EQ(env["QL_RUN_ID"], run);
  EXPECT_EQ(env["QL_ATTEMPT_ID"], p->launch.attempt_id);
  auto attempts = *store_->runs().ListAttempts(run);
  EXPECT_EQ(attempts[0].status, "running");
  EXPECT_EQ(attempts[0].pid, 4242);
  // The stored path is relative to the log root, so the data directory can move.
  EXPECT_EQ(attempts[0].log_path, task_id_ + "/" + run + "/1.log");

  p->outcome = Exited(0);
  Tick(d);
  r = Get(run);
  EXPECT_EQ(r.status, "succeeded");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(r.finished_at_ms.has_value());
  EXPECT_EQ(EventTypes(run),
            (std::vector<std::string>{"run.created", "run.queued", "run.dispatching",
                                      "attempt.starting", "attempt.running", "run.running",
                                      "attempt.succeeded", "run.succeeded"}));
}

TEST_F(LocalDispatcherTest, NonZeroExitFailsWithTheExitCode) {
  const std::string run = Start();
  LocalDispatcher d = Make();
  Tick(d);
  Process(run)->outcome = Exited(3);
  Tick(d);
  RunRecord r = Get(run);
  EXPECT_EQ(r.status, "failed");
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.error_code, "exit_status");
}

TEST_F(LocalDispatcherTest, ConcurrencyIsBounded) {
  const std::string a = Start();
  clock_.Advance(1);
  const std::string b = Start();
  clock_.Advance(1);
  const std::string c = Start();
  LocalDispatcher d = Make();
  Tick(d);
  Tick(d);
  EXPECT_EQ(runner_.order.size(), 1u);
  EXPECT_EQ(d.active(), 1);
  runner_.processes[runner_.order[0]]->outcome = Exited(0);
  Tick(d);
  EXPECT_EQ(runner_.order.size(), 2u);
  // FIFO among equal priorities.
  EXPECT_EQ(runner_.processes[runner_.order[0]]->launch.run_id, a);
  EXPECT_EQ(runner_.processes[runner_.order[1]]->launch.run_id, b);
}

TEST_F(LocalDispatcherTest, CancelReachesTheProcessAndEndsCancelled) {
  const std::string run = Start();
  LocalDispatcher d = Make();
  Tick(d);
  ASSERT_TRUE(control_->CancelRun(run, std::string("test")).ok());
  Tick(d);
  auto p = Process(run);
  EXPECT_EQ(p->cancel_requests, 1);
  Tick(d);
  EXPECT_EQ(p->cancel_requests, 1);  // asked once
  AttemptOutcome cancelled;
  cancelled.kind = AttemptOutcome::Kind::kCancelled;
  p->outcome = cancelled;
  Tick(d);
  EXPECT_EQ(Get(run).status, "cancelled");
}

TEST_F(LocalDispatcherTest, ACommittedCancelIntentWinsOverALaterCompletion) {
  const std::string run = Start();
  LocalDispatcher d = Make();
  Tick(d);
  ASSERT_TRUE(control_->CancelRun(run, std::nullopt).ok());
  Process(run)->outcome = Exited(0);  // the command finished before it saw the cancel
  Tick(d);
  EXPECT_EQ(Get(run).status, "cancelled");
}

TEST_F(LocalDispatcherTest, TimeoutEndsTimedOut) {
  const std::string run = Start();
  LocalDispatcher d = Make();
  Tick(d);
  AttemptOutcome timed_out;
  timed_out.kind = AttemptOutcome::Kind::kTimedOut;
  Process(run)->outcome = timed_out;
  Tick(d);
  EXPECT_EQ(Get(run).status, "timed_out");
}

// A timed-out attempt is retried like a failed one only when the task's retry policy says
// retry_on_timeout; otherwise the timeout ends the run, attempts left or not.
TEST_F(LocalDispatcherTest, ATimeoutIsRetriedOnlyWhenThePolicySaysRetryOnTimeout) {
  AttemptOutcome timed_out;
  timed_out.kind = AttemptOutcome::Kind::kTimedOut;
  auto publish = [&](const std::string& name, nlohmann::json retry) {
    TaskWrite write;
    write.body = {
        {"name", name},
        {"spec", {{"command", {{"kind", "shell"}, {"command", "sleep 9"}}}, {"timeoutMs", 1000}}},
        {"retry", std::move(retry)}};
    Result<PublishedTask> task = control_->PublishTask(write);
    EXPECT_TRUE(task.ok()) << task.status().ToString();
    task_id_ = task->task.head.task_id;
  };
  LocalDispatcher d = Make();

  publish("plain", {{"max_attempts", 2}, {"backoff_base_ms", 0}, {"backoff_max_ms", 0}});
  const std::string plain = Start();
  EXPECT_FALSE(Get(plain).retry_policy.retry_on_timeout);
  Tick(d);
  Process(plain)->outcome = timed_out;
  Tick(d);
  Tick(d);
  EXPECT_EQ(Get(plain).status, "timed_out");
  EXPECT_EQ(store_->runs().ListAttempts(plain)->size(), 1u);

  publish("retried", {{"max_attempts", 2},
                      {"retry_on_timeout", true},
                      {"backoff_base_ms", 500},
                      {"backoff_max_ms", 500}});
  const std::string retried = Start();
  EXPECT_TRUE(Get(retried).retry_policy.retry_on_timeout);
  Tick(d);
  Process(retried)->outcome = timed_out;
  Tick(d);
  RunRecord waiting = Get(retried);
  EXPECT_EQ(waiting.status, "retry_wait");
  EXPECT_EQ(waiting.retry_at_ms, clock_.NowMs() + 500);  // the backoff of a failed attempt
  clock_.Advance(500);
  Tick(d);
  std::vector<AttemptRecord> attempts = *store_->runs().ListAttempts(retried);
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_EQ(attempts[0].status, "timed_out");
  EXPECT_EQ(attempts[1].status, "running");
  // The last attempt timing out ends the run: max_attempts bounds timeouts as it bounds failures.
  runner_.processes[runner_.order.back()]->outcome = timed_out;
  Tick(d);
  EXPECT_EQ(Get(retried).status, "timed_out");
  EXPECT_EQ(store_->runs().ListAttempts(retried)->size(), 2u);
}

TEST_F(LocalDispatcherTest, LogTruncationIsRecordedOnceWhileRunning) {
  const std::string run = Start();
  LocalDispatcher d = Make();
  Tick(d);
  Process(run)->truncated = true;
  Tick(d);
  Tick(d);
  auto types = EventTypes(run);
  EXPECT_EQ(std::count(types.begin(), types.end(), "attempt.log_truncated"), 1);
  EXPECT_EQ(Get(run).status, "running");
}

TEST_F(LocalDispatcherTest, RecoveryWatchesSurvivorsRecordsFinishedAndLosesVanished) {
  const std::string survivor = Start();
  options_.max_concurrency = 3;
  const std::string finished = Start();
  const std::string vanished = Start();
  {
    LocalDispatcher before = Make();
    Tick(before);
  }
  // The daemon "restarts": a new dispatcher over the same store and processes.
  Process(finished)->outcome = Exited(0);
  runner_.processes.erase(Process(vanished)->launch.attempt_id);
  LocalDispatcher after = Make();
  ASSERT_TRUE(after.Recover().ok());
  EXPECT_EQ(after.active(), 1);
  EXPECT_EQ(Get(survivor).status, "running");
  EXPECT_EQ(Get(finished).status, "succeeded");
  RunRecord lost = Get(vanished);
  EXPECT_EQ(lost.status, "failed");
  EXPECT_EQ(lost.error_code, "attempt_lost");
  auto attempts = *store_->runs().ListAttempts(vanished);
  EXPECT_EQ(attempts.back().status, "lost");
  auto types = EventTypes(vanished);
  EXPECT_NE(std::find(types.begin(), types.end(), "run.lost"), types.end());
  // Nothing was relaunched: recovery never bulk-resets.
  EXPECT_EQ(runner_.order.size(), 3u);
}

TEST_F(LocalDispatcherTest, AutomaticRetryAddsAttemptTwoOnTheSameRunAfterTheBackoff) {
  TaskWrite write;
  write.body = {{"name", "flaky"},
                {"spec", {{"command", {{"kind", "shell"}, {"command", "exit 1"}}}}},
                {"retry", {{"max_attempts", 2}, {"backoff_base_ms", 2000}}}};
  task_id_ = control_->PublishTask(write)->task.head.task_id;
  const std::string run = Start();
  EXPECT_EQ(Get(run).retry_policy.max_attempts, 2);
  LocalDispatcher d = Make();
  Tick(d);
  runner_.processes[runner_.order[0]]->outcome = Exited(1);
  Tick(d);
  RunRecord waiting = Get(run);
  EXPECT_EQ(waiting.status, "retry_wait");
  EXPECT_EQ(waiting.retry_at_ms, clock_.NowMs() + 2000);

  clock_.Advance(1999);
  Tick(d);
  EXPECT_EQ(runner_.order.size(), 1u);  // not before the backoff
  clock_.Advance(1);
  Tick(d);  // promoted to queued with attempt 2, then launched
  ASSERT_EQ(runner_.order.size(), 2u);
  auto attempts = *store_->runs().ListAttempts(run);
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_EQ(attempts[0].status, "failed");
  EXPECT_EQ(attempts[1].attempt, 2);
  EXPECT_EQ(attempts[1].status, "running");

  runner_.processes[runner_.order[1]]->outcome = Exited(1);
  Tick(d);
  RunRecord failed = Get(run);
  EXPECT_EQ(failed.status, "failed");  // attempts exhausted: no third attempt
  EXPECT_EQ(failed.exit_code, 1);
  EXPECT_EQ(store_->runs().ListAttempts(run)->size(), 2u);
}

TEST_F(LocalDispatcherTest, EachAttemptHasItsOwnLogWithinWhatTheRunCapLeaves) {
  constexpr int64_t kMiB = 1024 * 1024;
  TaskWrite write;
  write.body = {{"name", "noisy"},
                {"spec", {{"command", {{"kind", "shell"}, {"command", "exit 1"}}}}},
                {"retry", {{"max_attempts", 4}, {"backoff_base_ms", 1000}}}};
  task_id_ = control_->PublishTask(write)->task.head.task_id;
  FakeLogSizes logs;
  options_.log_cap_bytes = 8 * kMiB;
  options_.run_log_cap_bytes = 20 * kMiB;
  options_.logs = &logs;
  const std::string run = Start();
  LocalDispatcher d = Make();
  std::vector<int64_t> caps;
  std::vector<std::string> paths;
  for (int attempt = 1; attempt <= 4; ++attempt) {
    Tick(d);
    ASSERT_EQ(runner_.order.size(), static_cast<size_t>(attempt));
    FakeProcess& p = *runner_.processes[runner_.order.back()];
    caps.push_back(p.launch.log_cap_bytes);
    paths.push_back(p.launch.log_path);
    logs.sizes[p.launch.attempt_id] = p.launch.log_cap_bytes;  // each filled its cap
    if (attempt == 3) {
      p.truncated = true;
      Tick(d);
    }
    p.outcome = Exited(1);
    Tick(d);
    clock_.Advance(60'000);
  }
  EXPECT_EQ(caps, (std::vector<int64_t>{8 * kMiB, 8 * kMiB, 4 * kMiB, kMinAttemptLogBytes}));
  const std::string dir = dir_ + "/log/" + task_id_ + "/" + run + "/";
  EXPECT_EQ(paths, (std::vector<std::string>{dir + "1.log", dir + "2.log", dir + "3.log",
                                             dir + "4.log"}));
  for (const EventRecord& e : *store_->runs().ListEvents(run, 0, 100)) {
    if (e.type == "attempt.log_truncated") {
      EXPECT_EQ(e.payload_json, R"({"cap_bytes":4194304})") << "the attempt's own cap";
    }
  }
  EXPECT_EQ(Get(run).status, "failed");
}

TEST(RetryBackoffTest, DoublesUpToTheMaximum) {
  RetryPolicy p;
  p.backoff_base_ms = 1000;
  p.backoff_max_ms = 5000;
  EXPECT_EQ(RetryBackoffMs(p, 2), 1000);
  EXPECT_EQ(RetryBackoffMs(p, 3), 2000);
  EXPECT_EQ(RetryBackoffMs(p, 4), 4000);
  EXPECT_EQ(RetryBackoffMs(p, 5), 5000);
  EXPECT_EQ(RetryBackoffMs(p, 16), 5000);
}

}  // namespace
}  // namespace ql

namespace ql {
namespace {

// Seals by encoding (the dispatcher's part is looking up and opening, not the crypto), binding
// the version like the real envelope does; refuses to open anything under another key id.
class FakeSealer final : public SecretSealer {
 public:
  const std::string& key_id() const override { return key_id_; }
  Result<SealedSecretValue> Seal(const SecretRef& v, std::string_view value) override {
    return SealedSecretValue{key_id_, Base64UrlEncode("wrapped"),
                             Base64UrlEncode(std::to_string(*v.version) + ":" + std::string(value))};
  }
  Result<std::string> Open(const SecretRef& v, const SealedSecretValue& sealed) override {
    if (sealed.key_id != key_id_) return NotFound("secret_key_unknown", "other key");
    std::string text = Base64UrlDecode(sealed.sealed_value).value_or("");
    const std::string prefix = std::to_string(*v.version) + ":";
    if (!text.starts_with(prefix)) return Corrupt("secret_corrupt", "other version");
    return text.substr(prefix.size());
  }
  std::string key_id_ = "fake:1";
};

class LocalDispatcherSecretsTest : public LocalDispatcherTest {
 protected:
  // Publishes a task whose API_KEY names secret `name` of the default project.
  void UseSecret(const std::string& name) {
    Result<ProjectRecord> project = control_->EnsureDefaultProject();
    ASSERT_TRUE(project.ok());
    project_id_ = project->id;
    const std::string ref = EncodeSecretRef(SecretRef{project_id_, name, {}}).value();
    TaskWrite write;
    write.body = {{"name", "uses-secret"},
                  {"spec",
                   {{"command", {{"kind", "shell"}, {"command", "echo $API_KEY"}}},
                    {"environment", {{"API_KEY", ref}, {"PLAIN", "public"}}}}}};
    Result<PublishedTask> published = control_->PublishTask(write);
    ASSERT_TRUE(published.ok()) << published.status().ToString();
    task_id_ = published->task.head.task_id;
  }
  SecretService Secrets() {
    return SecretService(*store_, control_->governance(), &sealer_, clock_);
  }
  FakeSealer sealer_;
  std::string project_id_;
};

TEST_F(LocalDispatcherSecretsTest, ResolvesSecretsIntoTheSecretEnvironmentRightBeforeLaunch) {
  UseSecret("API_KEY");
  ASSERT_TRUE(Secrets().Set(Caller{}, "API_KEY", "first-value").ok());
  ASSERT_TRUE(Secrets().Set(Caller{}, "API_KEY", "current-value-42").ok());
  const std::string run = Start();
  options_.secrets = &store_->secrets();
  options_.sealer = &sealer_;
  LocalDispatcher d = Make();
  Tick(d);
  std::shared_ptr<FakeProcess> p = Process(run);
  ASSERT_NE(p, nullptr);
  using Env = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(p->launch.secret_environment, (Env{{"API_KEY", "current-value-42"}}));
  EXPECT_EQ(p->launch.mask_values, std::vector<std::string>{"current-value-42"});
  for (const auto& [name, value] : p->launch.environment) EXPECT_NE(name, "API_KEY");
  EXPECT_EQ(Get(run).status, "running");
}

TEST_F(LocalDispatcherSecretsTest, AMissingOrDeletedSecretFailsTheRunWithSecretNotFound) {
  UseSecret("MISSING");
  options_.secrets = &store_->secrets();
  options_.sealer = &sealer_;
  const std::string missing = Start();
  LocalDispatcher d = Make();
  Tick(d);
  EXPECT_EQ(Process(missing), nullptr);
  EXPECT_EQ(Get(missing).status, "failed");
  EXPECT_EQ(Get(missing).error_code, "secret_not_found");

  ASSERT_TRUE(Secrets().Set(Caller{}, "MISSING", "now-it-exists").ok());
  ASSERT_TRUE(Secrets().Remove(Caller{}, "MISSING").ok());
  const std::string deleted = Start();
  Tick(d);
  EXPECT_EQ(Process(deleted), nullptr);
  EXPECT_EQ(Get(deleted).error_code, "secret_not_found");
}

TEST_F(LocalDispatcherSecretsTest, SecretsThatCannotBeOpenedFailTheRunAsUnavailable) {
  UseSecret("API_KEY");
  ASSERT_TRUE(Secrets().Set(Caller{}, "API_KEY", "value-under-old-key").ok());
  options_.secrets = &store_->secrets();
  options_.sealer = &sealer_;
  sealer_.key_id_ = "fake:2";  // the key was replaced
  const std::string run = Start();
  LocalDispatcher d = Make();
  Tick(d);
  EXPECT_EQ(Process(run), nullptr);
  EXPECT_EQ(Get(run).error_code, "secret_unavailable");
  EXPECT_EQ(Get(run).error_summary.value_or("").find("value-under-old-key"), std::string::npos);

  // A daemon without a secret store never runs the command with the ref as its value.
  options_.secrets = nullptr;
  LocalDispatcher bare = Make();
  const std::string unresolved = Start();
  Tick(bare);
  EXPECT_EQ(Process(unresolved), nullptr);
  EXPECT_EQ(Get(unresolved).error_code, "secret_unavailable");
}

}  // namespace
}  // namespace ql

namespace ql {
namespace {

// Approved runs (DESIGN §9.1): a guarded task whose retry policy would retry a lost attempt, an
// operator who requests and an admin who approves.
class LocalDispatcherApprovalTest : public LocalDispatcherTest {
 protected:
  void SetUp() override {
    LocalDispatcherTest::SetUp();
    if (HasFatalFailure()) return;
    testing::TestPrincipals people(store_->governance(), clock_, random_);
    ASSERT_TRUE(people.Bootstrap().ok());
    const std::string project = control_->EnsureDefaultProject()->id;
    ops_ = people.Add("ops", Role::kOperator, project).value();
    amy_ = people.Add("amy", Role::kAdmin, project).value();
    TaskWrite write;
    write.body = {{"name", "guarded"},
                  {"spec", {{"command", {{"kind", "shell"}, {"command", "true"}}}}},
                  {"retry",
                   {{"max_attempts", 3},
                    {"retry_on_lost", true},
                    {"safety", "idempotent"},
                    {"backoff_base_ms", 0},
                    {"backoff_max_ms", 0}}},
                  {"approval", {{"required", true}}}};
    Result<PublishedTask> task = control_->PublishTask(write);
    ASSERT_TRUE(task.ok()) << task.status().ToString();
    task_id_ = task->task.head.task_id;
  }

  // Requests a run as the operator and approves it as the admin; returns the queued run.
  std::string Approved() {
    StartRunRequest request;
    request.task_id = task_id_;
    Result<StartedRun> requested = control_->StartRun(request, Caller{ops_.id, "", "req"});
    EXPECT_TRUE(requested.ok() && requested->approval.has_value()) << requested.status().ToString();
    if (!requested.ok() || !requested->approval.has_value()) return "";
    Result<ApproveResult> approved =
        control_->Approve(requested->approval->id, Caller{amy_.id, "", "approve"});
    EXPECT_TRUE(approved.ok()) << approved.status().ToString();
    return approved.ok() ? approved->run.id : "";
  }

  // Moves `run` and its latest attempt as a daemon that stops right after would leave them.
  bool Move(const std::string& run, const std::string& run_to, const std::string& attempt_from,
            const std::string& attempt_to, const std::vector<std::string>& events) {
    auto attempts = *store_->runs().ListAttempts(run);
    RunTransitionCommand t;
    t.run_id = run;
    t.expected_version = Get(run).version;
    t.run_to = run_to;
    t.attempt_id = attempts.back().id;
    t.expected_attempt_status = attempt_from;
    t.attempt_to = attempt_to;
    if (attempt_to == "lost") t.error_code = "attempt_lost";
    for (const std::string& type : events) {
      t.events.push_back(MakeRunEvent(type, "dispatcher", attempts.back().id));
    }
    t.now_ms = clock_.NowMs();
    Result<RunRecord> moved = store_->runs().ApplyTransition(t);
    EXPECT_TRUE(moved.ok()) << moved.status().ToString();
    return moved.ok();
  }

  // Checks that `run` waits for a human after its loss: recovery_required with its event, one
  // lost attempt, and no new attempt however long the dispatcher goes on.
  void ExpectWaitsForRecovery(LocalDispatcher& d, const std::string& run, size_t launches) {
    RunRecord r = Get(run);
    EXPECT_EQ(r.status, "recovery_required");
    EXPECT_EQ(r.error_code, "attempt_lost");
    EXPECT_FALSE(r.finished_at_ms.has_value());
    auto types = EventTypes(run);
    EXPECT_EQ(std::count(types.begin(), types.end(), "run.recovery_required"), 1);
    EXPECT_EQ(std::count(types.begin(), types.end(), "run.retry_wait"), 0);
    for (int i = 0; i < 3; ++i) {
      clock_.Advance(60'000);
      Tick(d);
    }
    EXPECT_EQ(Get(run).status, "recovery_required");
    auto attempts = *store_->runs().ListAttempts(run);
    ASSERT_EQ(attempts.size(), 1u);
    EXPECT_EQ(attempts[0].status, "lost");
    EXPECT_EQ(runner_.order.size(), launches);
  }

  // Checks that `run` succeeded with its one attempt and never waited for a human.
  void ExpectSucceededOnFirstAttempt(const std::string& run) {
  EXPECT_EQ(Get(run).status, "succeeded");
  auto attempts = *store_->runs().ListAttempts(run);
  ASSERT_EQ(attempts.size(), 1u);
  EXPECT_EQ(attempts[0].status, "succeeded");
  auto types = EventTypes(run);
  EXPECT_EQ(std::count(types.begin(), types.end(), "run.recovery_required"), 0);
  }

  PrincipalRecord ops_;
  PrincipalRecord amy_;
};

TEST_F(LocalDispatcherApprovalTest, AnApprovedRunWhoseProcessVanishedWaitsForRecovery) {
  const std::string run = Approved();
  {
    LocalDispatcher before = Make();
    Tick(before);
  }
  ASSERT_EQ(Get(run).status, "running");
  runner_.processes.erase(runner_.order[0]);  // the supervisor and its child are gone
  LocalDispatcher after = Make();
  ASSERT_TRUE(after.Recover().ok());
  ExpectWaitsForRecovery(after, run, 1);
}

TEST_F(LocalDispatcherApprovalTest, AnApprovedRunStoppedBetweenDispatchAndSpawnWaitsForRecovery) {
  // The daemon recorded dispatching and may or may not have spawned the command.
  const std::string run = Approved();
  ASSERT_TRUE(Move(run, "dispatching", "claimed", "starting", {"run.dispatching"}));
  LocalDispatcher after = Make();
  ASSERT_TRUE(after.Recover().ok());
  ExpectWaitsForRecovery(after, run, 0);
}

TEST_F(LocalDispatcherApprovalTest, AnApprovedRunLeftLostByACrashGoesToRecoveryOnRestart) {
  // The daemon stopped between recording the loss and settling the run.
  const std::string run = Approved();
  {
    LocalDispatcher before = Make();
    Tick(before);
  }
  ASSERT_TRUE(Move(run, "lost", "running", "lost", {"attempt.lost", "run.lost"}));
  LocalDispatcher after = Make();
  ASSERT_TRUE(after.Recover().ok());
  ExpectWaitsForRecovery(after, run, 1);
}

TEST_F(LocalDispatcherApprovalTest, AnApprovedRunThatEndedWhileTheDaemonWasDownSettlesFromItsEvidence) {
  // The supervisor outlived the daemon and recorded the command's exit: that record is evidence
  // of the outcome, so the restart settles the run from it and no human is asked.
  const std::string run = Approved();
  {
    LocalDispatcher before = Make();
    Tick(before);
  }
  ASSERT_EQ(Get(run).status, "running");
  runner_.processes[runner_.order[0]]->outcome = Exited(0);
  LocalDispatcher after = Make();
  ASSERT_TRUE(after.Recover().ok());
  ExpectSucceededOnFirstAttempt(run);
  EXPECT_EQ(runner_.order.size(), 1u);  // settled, never relaunched
}

TEST_F(LocalDispatcherApprovalTest, AnApprovedRunClaimedButNeverStartedIsTakenOverNormally) {
  const std::string run = Approved();
  // The daemon stopped before launching it; the next incarnation starts it as any queued run.
  LocalDispatcher after = Make();
  ASSERT_TRUE(after.Recover().ok());
  EXPECT_EQ(Get(run).status, "queued");
  Tick(after);
  ASSERT_EQ(runner_.order.size(), 1u);
  runner_.processes[runner_.order[0]]->outcome = Exited(0);
  Tick(after);
  ExpectSucceededOnFirstAttempt(run);
}

TEST_F(LocalDispatcherApprovalTest, AFailedExitOfAnApprovedRunStillRetriesByItsPolicy) {
  // Only a loss has an unknown effect; a reported exit follows the retry policy as usual.
  const std::string run = Approved();
  LocalDispatcher d = Make();
  Tick(d);
  runner_.processes[runner_.order[0]]->outcome = Exited(1);
  Tick(d);
  EXPECT_EQ(Get(run).status, "retry_wait");
}

// The lines of `sink` that contain `needle`.
std::vector<std::string> LinesWith(const MemoryLogSink& sink, const std::string& needle) {
  std::vector<std::string> found;
  for (const std::string& line : sink.lines()) {
    if (line.find(needle) != std::string::npos) found.push_back(line);
  }
  return found;
}

TEST_F(LocalDispatcherTest, TheDaemonLogSaysHowRunsEnded) {
  MemoryLogSink sink;
  EventLog log(clock_, sink, LogFormat::kText, LogLevel::kDebug);
  options_.event_log = &log;
  const std::string run = Start();
  LocalDispatcher d = Make();
  Tick(d);
  AttemptOutcome failed = Exited(3);
  failed.descendants_ended = 2;
  Process(run)->outcome = failed;
  Tick(d);
  EXPECT_EQ(LinesWith(sink, " run.failed "),
            (std::vector<std::string>{"2026-01-01T00:00:00.000Z warn run.failed run=" + run +
                                      " task=" + task_id_ +
                                      " attempt=1 code=exit_status exit=3 message=\"command "
                                      "exited with status 3\""}));
  EXPECT_EQ(LinesWith(sink, " attempt.descendants_ended ").size(), 1u);
  EXPECT_NE(LinesWith(sink, " attempt.descendants_ended ")[0].find("processes=2"),
            std::string::npos);

  const std::string timed_out = Start();
  Tick(d);
  AttemptOutcome late;
  late.kind = AttemptOutcome::Kind::kTimedOut;
  Process(timed_out)->outcome = late;
  Tick(d);
  ASSERT_EQ(LinesWith(sink, " warn run.timed_out run=" + timed_out).size(), 1u);
}

TEST_F(LocalDispatcherTest, TheDaemonLogSaysWhatRecoveryAdoptedAndLost) {
  MemoryLogSink sink;
  EventLog log(clock_, sink);
  options_.max_concurrency = 2;
  const std::string survivor = Start();
  const std::string vanished = Start();
  {
    LocalDispatcher before = Make();
    Tick(before);
  }
  EXPECT_TRUE(sink.lines().empty());
  runner_.processes.erase(Process(vanished)->launch.attempt_id);
  options_.event_log = &log;
  LocalDispatcher after = Make();
  ASSERT_TRUE(after.Recover().ok());
  EXPECT_EQ(LinesWith(sink, " info attempt.adopted run=" + survivor).size(), 1u);
  EXPECT_NE(LinesWith(sink, "attempt.adopted")[0].find("pid=4242 running=true"), std::string::npos);
  const std::vector<std::string> lost = LinesWith(sink, " warn run.lost run=" + vanished);
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_NE(lost[0].find("then=failed"), std::string::npos) << lost[0];
}

}  // namespace
}  // namespace ql
