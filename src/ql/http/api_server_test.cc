#include "ql/http/api_server.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ql/core/digest.h"
#include "ql/core/ids.h"
#include "ql/core/rfc3339.h"
#include "ql/engine/token_authenticator.h"
#include "ql/http/httplib_config.h"
#include "ql/http/openapi_document.h"
#include "ql/storage/sqlite/sqlite_store.h"
#include "ql/testing/fake_clock.h"
#include "ql/testing/raw_http.h"
#include "ql/testing/test_pki.h"

namespace ql {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::ConnectLoopback;
using testing::Exchange;
using testing::Exchanged;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::ReadAnswer;

constexpr char kToken[] = "owner-token-0123456789abcdef";

int64_t At(const char* rfc3339) { return ParseRfc3339(rfc3339).value(); }

struct Reply {
  int status = 0;
  json body;
  std::string raw;
  httplib::Headers headers;
  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? std::string() : it->second;
  }
  std::string code() const { return body.is_object() ? body.value("code", "") : ""; }
};

Reply ToReply(const httplib::Result& result) {
  Reply reply;
  if (!result) {
    reply.status = -1;
    return reply;
  }
  reply.status = result->status;
  reply.raw = result->body;
  reply.headers = result->headers;
  reply.body = json::parse(result->body, nullptr, false);
  return reply;
}

// Sends `request` as is on a new connection and returns everything the server answers until it
// closes the connection or `wait_ms` pass without data.
std::string RawExchange(int port, const std::string& request, int wait_ms = 2000) {
  return testing::Exchange(port, request, wait_ms).answer;
}

size_t CountOf(const std::string& text, const std::string& needle) {
  size_t count = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++count;
  }
  return count;
}

std::string ShellTaskBody(const std::string& name, const std::string& command = "echo hi") {
  return json{{"name", name}, {"spec", {{"command", {{"kind", "shell"}, {"command", command}}}}}}
      .dump();
}

class ApiServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "ql-api-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    fs::create_directories(dir_ / "log");
    SqliteOptions sqlite;
    sqlite.path = (dir_ / "ql.db").string();
    auto store = SqliteStore::Open(sqlite, clock_);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
    service_ = std::make_unique<ControlService>(*store_, clock_, random_, ControlOptions{});
    ASSERT_TRUE(service_->EnsureDefaultProject().ok());
    log_reader_ = std::make_unique<LogReader>((dir_ / "log").string());
    owner_ = Bootstrap(kToken);
    authenticator_ = std::make_unique<TokenAuthenticator>(store_->governance(), clock_);
  }

  // Bootstraps the installation owner with `token`; returns its principal.
  PrincipalRecord Bootstrap(const std::string& token) {
    BootstrapCommand cmd;
    cmd.principal_id = NewUuidV7(clock_.NowMs(), random_);
    cmd.token_id = NewUuidV7(clock_.NowMs(), random_);
    cmd.token_digest = Sha256Hex(token);
    cmd.mutation_id = "bootstrap:" + cmd.principal_id;
    cmd.now_ms = clock_.NowMs();
    Result<BootstrapResult> booted = store_->governance().Bootstrap(cmd);
    EXPECT_TRUE(booted.ok()) << booted.status().ToString();
    return booted.ok() ? booted->principal : PrincipalRecord{};
  }

  void TearDown() override {
    server_.reset();
    authenticator_.reset();
    service_.reset();
    store_.reset();
    fs::remove_all(dir_);
  }

  ApiServerOptions DefaultOptions() {
    ApiServerOptions options;
    options.authenticate = [this](const std::string& digest) {
      return authenticator_->Authenticate(digest);
    };
    options.log_reader = log_reader_.get();
    options.max_follow_ms = 20'000;
    options.follow_poll_ms = 20;
    return options;
  }

  void StartServer(ApiServerOptions options) {
    server_ = std::make_unique<ApiServer>(*service_, metrics_, std::move(options));
    Status started = server_->Start("127.0.0.1", 0);
    ASSERT_TRUE(started.ok()) << started.ToString();
    ASSERT_GT(server_->port(), 0);
    server_->SetReady(true);
  }
  void StartServer() { StartServer(DefaultOptions()); }

  std::unique_ptr<httplib::Client> NewClient(bool auth = true) {
    auto client = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    client->set_read_timeout(15, 0);
    if (auth) client->set_default_headers({{"Authorization", std::string("Bearer ") + kToken}});
    return client;
  }

  Reply Get(const std::string& path) {
    auto client = NewClient();
    return ToReply(client->Get(path.c_str()));
  }
  Reply Post(const std::string& path, const std::string& body) {
    auto client = NewClient();
    return ToReply(client->Post(path.c_str(), body, "application/json"));
  }

  std::string CreateTask(const std::string& name = "task") {
    Reply reply = Post("/api/v1/tasks", ShellTaskBody(name));
    EXPECT_EQ(reply.status, 201) << reply.raw;
    return reply.body.value("id", "");
  }
  std::string CreateTrigger(const std::string& task_id, const std::string& expression,
                            const std::string& zone) {
    Reply reply =
        Post("/api/v1/triggers",
             json{{"task_id", task_id}, {"expression", expression}, {"timezone", zone}}.dump());
    EXPECT_EQ(reply.status, 201) << reply.raw;
    return reply.body.value("id", "");
  }
  std::string StartRun(const std::string& task_id) {
    Reply reply = Post("/api/v1/runs", json{{"task_id", task_id}}.dump());
    EXPECT_EQ(reply.status, 201) << reply.raw;
    return reply.body.value("id", "");
  }

  // Moves a queued run to dispatching with its attempt starting and `log_path` recorded, as
  // the dispatcher does.
  void StartAttempt(const std::string& run_id, const std::string& log_path) {
    RunRecord run = store_->runs().GetRun(run_id).value();
    AttemptRecord attempt = store_->runs().ListAttempts(run_id).value().back();
    RunTransitionCommand t;
    t.run_id = run_id;
    t.expected_version = run.version;
    t.run_to = "dispatching";
    t.attempt_id = attempt.id;
    t.expected_attempt_status = "claimed";
    t.attempt_to = "starting";
    t.log_path = log_path;
    t.now_ms = clock_.NowMs();
    auto applied = store_->runs().ApplyTransition(t);
    ASSERT_TRUE(applied.ok()) << applied.status().ToString();
  }
  void Advance(const std::string& run_id, const std::string& run_to,
               const std::string& attempt_from, const std::string& attempt_to) {
    RunRecord run = store_->runs().GetRun(run_id).value();
    AttemptRecord attempt = store_->runs().ListAttempts(run_id).value().back();
    RunTransitionCommand t;
    t.run_id = run_id;
    t.expected_version = run.version;
    t.run_to = run_to;
    t.attempt_id = attempt.id;
    t.expected_attempt_status = attempt_from;
    t.attempt_to = attempt_to;
    if (run_to == "succeeded") {
      t.exit_code = 0;
      t.attempt_exit_code = 0;
      t.finished_at_ms = clock_.NowMs();
      t.attempt_finished_at_ms = clock_.NowMs();
    }
    t.now_ms = clock_.NowMs();
    auto applied = store_->runs().ApplyTransition(t);
    ASSERT_TRUE(applied.ok()) << applied.status().ToString();
  }

  // Everything the API can change, rendered as text, to prove rejected requests change nothing.
  std::string Snapshot() {
    const std::string project = service_->EnsureDefaultProject()->id;
    std::string out;
    auto tasks = store_->definitions().ListTasks(project, PageRequest{std::nullopt, 500});
    for (const auto& t : tasks->items) {
      out += "task " + t.task_id + " r" + std::to_string(t.revision) + " revisions " +
             std::to_string(store_->definitions().ListTaskRevisions(t.task_id)->size()) + "\n";
    }
    auto triggers =
        store_->definitions().ListTriggers(project, std::nullopt, PageRequest{std::nullopt, 500});
    for (const auto& t : triggers->items) {
      auto schedule = store_->definitions().GetSchedule(t.trigger_id);
      out += "trigger " + t.trigger_id + " r" + std::to_string(t.revision) +
             (t.enabled ? " on" : " off") + " pin " + std::to_string(t.task_revision) + " state " +
             std::to_string(schedule.ok() ? schedule->state_version : -1) + "\n";
    }
    auto runs = store_->runs().ListRuns(RunFilter{}, PageRequest{std::nullopt, 500});
    for (const auto& r : runs->items) {
      out += "run " + r.id + " " + r.status + " v" + std::to_string(r.version) + " events " +
             std::to_string(store_->runs().ListEvents(r.id, 0, 500)->size()) + "\n";
    }
    return out;
  }

  fs::path dir_;
  testing::FakeClock clock_{At("2026-01-01T00:00:00Z")};
  testing::SeededRandom random_{7};
  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<ControlService> service_;
  std::unique_ptr<LogReader> log_reader_;
  PrincipalRecord owner_;
  std::unique_ptr<TokenAuthenticator> authenticator_;
  Metrics metrics_;
  std::unique_ptr<ApiServer> server_;
};

TEST_F(ApiServerTest, ReadinessFollowsSetReadyAndWithdrawal) {
  server_ = std::make_unique<ApiServer>(*service_, metrics_, DefaultOptions());
  ASSERT_TRUE(server_->Start("127.0.0.1", 0).ok());
  EXPECT_EQ(Get("/livez").status, 200);
  Reply not_ready = Get("/readyz");
  EXPECT_EQ(not_ready.status, 503);
  EXPECT_EQ(not_ready.code(), "not_ready");

  server_->SetReady(true);
  EXPECT_EQ(Get("/readyz").status, 200);
  EXPECT_EQ(Get("/api/v1/status").status, 200);

  // Readiness is a living signal: a later verdict with its own code, and back.
  server_->SetReadiness(Unavailable("database_unavailable", "the database cannot be reached"));
  Reply lost = Get("/readyz");
  EXPECT_EQ(lost.status, 503);
  EXPECT_EQ(lost.code(), "database_unavailable");
  EXPECT_EQ(Get("/api/v1/status").body.value("ready", true), false);
  server_->SetReadiness(Corrupt("server_read_only", "the server is read-only"));
  EXPECT_EQ(Get("/readyz").code(), "server_read_only");
  server_->SetReadiness(Status::Ok());
  EXPECT_EQ(Get("/readyz").status, 200);

  server_->WithdrawAdmission();
  Reply withdrawn = Get("/readyz");
  EXPECT_EQ(withdrawn.status, 503);
  EXPECT_EQ(withdrawn.code(), "shutting_down");
  // Withdrawal is for good: a later verdict does not reopen admission.
  server_->SetReadiness(Status::Ok());
  server_->SetReady(true);
  EXPECT_EQ(Get("/readyz").code(), "shutting_down");
  Reply api = Get("/api/v1/tasks");
  EXPECT_EQ(api.status, 503);
  EXPECT_EQ(api.code(), "shutting_down");
  Reply post = Post("/api/v1/tasks", ShellTaskBody("late"));
  EXPECT_EQ(post.status, 503);
  EXPECT_EQ(Get("/livez").status, 200);
  EXPECT_EQ(Get("/metrics").status, 200);
  server_->Stop();
  server_->Stop();  // idempotent
}

TEST_F(ApiServerTest, RejectsMissingOrWrongTokens) {
  StartServer();
  const std::string before = Snapshot();
  const std::vector<std::string> headers = {"", "Bearer wrong-token-0123456789abcdef",
                                            std::string("Basic ") + kToken, "Bearer ",
                                            std::string("Bearer ") + kToken + "x"};
  for (const std::string& header : headers) {
    auto client = NewClient(/*auth=*/false);
    if (!header.empty()) client->set_default_headers({{"Authorization", header}});
    Reply get = ToReply(client->Get("/api/v1/tasks"));
    EXPECT_EQ(get.status, 401) << header;
    EXPECT_EQ(get.code(), "unauthorized") << header;
    EXPECT_EQ(get.Header("WWW-Authenticate"), "Bearer");
    Reply post = ToReply(client->Post("/api/v1/tasks", ShellTaskBody("x"), "application/json"));
    EXPECT_EQ(post.status, 401) << header;
  }
  auto lower = NewClient(false);
  lower->set_default_headers({{"Authorization", std::string("bearer ") + kToken}});
  EXPECT_EQ(ToReply(lower->Get("/api/v1/tasks")).status, 200);
  auto anonymous = NewClient(false);
  EXPECT_EQ(ToReply(anonymous->Get("/metrics")).status, 200);
  EXPECT_EQ(ToReply(anonymous->Get("/livez")).status, 200);
  EXPECT_EQ(Snapshot(), before);
}

TEST_F(ApiServerTest, StoredCredentialsAreCheckedByDigest) {
  const std::string minted = "cluster-credential-0123456789abcdef";
  const std::string revoked = "revoked-credential-0123456789abcdef";
  std::atomic<bool> store_down{false};
  ApiServerOptions options = DefaultOptions();
  options.authenticate = [&](const std::string& digest) -> Result<Authentication> {
    EXPECT_TRUE(IsSha256Hex(digest));
    if (store_down) return Unavailable("database_unavailable", "down");
    if (digest != Sha256Hex(minted)) return PermissionDenied("unauthorized", "unknown token");
    return Authentication{owner_, TokenRecord{}};
  };
  StartServer(std::move(options));
  auto with = [&](const std::string& token) {
    auto client = NewClient(false);
    client->set_default_headers({{"Authorization", "Bearer " + token}});
    return ToReply(client->Get("/api/v1/tasks"));
  };
  EXPECT_EQ(with(minted).status, 200);
  EXPECT_EQ(with(revoked).status, 401);
  EXPECT_EQ(with(kToken).status, 401);  // this store knows only `minted`
  EXPECT_EQ(with(std::string(600, 'a')).status, 401);
  store_down = true;
  Reply unavailable = with(minted);
  EXPECT_EQ(unavailable.status, 503);
  EXPECT_EQ(unavailable.code(), "credentials_unavailable");
}

TEST_F(ApiServerTest, TaskLifecycle) {
  StartServer();
  Reply created = Post("/api/v1/tasks", ShellTaskBody("backup", "tar czf /tmp/b.tgz /etc"));
  ASSERT_EQ(created.status, 201) << created.raw;
  const std::string id = created.body["id"];
  EXPECT_EQ(created.body["revision"], 1);
  EXPECT_EQ(created.body["name"], "backup");
  EXPECT_EQ(created.body["spec"]["command"]["kind"], "shell");
  EXPECT_EQ(created.body["spec"]["command"]["shell"], "/bin/sh");  // default written out
  EXPECT_EQ(created.body["created_at"], "2026-01-01T00:00:00Z");
  EXPECT_EQ(created.body["retry"]["max_attempts"], 1);
  EXPECT_EQ(created.Header("Content-Type"), "application/json");

  Reply fetched = Get("/api/v1/tasks/" + id);
  ASSERT_EQ(fetched.status, 200);
  EXPECT_EQ(fetched.body["content_digest"], created.body["content_digest"]);

  json update = json::parse(ShellTaskBody("backup", "echo v2"));
  update["expected_revision"] = 1;
  Reply revised = Post("/api/v1/tasks/" + id + "/revisions", update.dump());
  ASSERT_EQ(revised.status, 201) << revised.raw;
  EXPECT_EQ(revised.body["revision"], 2);

  const std::string before = Snapshot();
  Reply stale = Post("/api/v1/tasks/" + id + "/revisions", update.dump());
  EXPECT_EQ(stale.status, 409);
  EXPECT_EQ(stale.code(), "revision_conflict");
  EXPECT_EQ(Snapshot(), before);

  Reply history = Get("/api/v1/tasks/" + id + "/revisions");
  ASSERT_EQ(history.status, 200);
  ASSERT_EQ(history.body["items"].size(), 2u);
  EXPECT_EQ(history.body["items"][0]["revision"], 2);

  // Replay with a mutation id answers 200 with the stored task.
  json keyed = json::parse(ShellTaskBody("keyed"));
  keyed["mutation_id"] = "create-keyed";
  Reply first = Post("/api/v1/tasks", keyed.dump());
  ASSERT_EQ(first.status, 201);
  Reply replay = Post("/api/v1/tasks", keyed.dump());
  EXPECT_EQ(replay.status, 200);
  EXPECT_EQ(replay.Header("X-QL-Replayed"), "true");
  EXPECT_EQ(replay.body["id"], first.body["id"]);

  json retrying = json::parse(ShellTaskBody("retrying"));
  retrying["retry"] = {{"max_attempts", 4}, {"backoff_base_ms", 500}};
  Reply with_retry = Post("/api/v1/tasks", retrying.dump());
  ASSERT_EQ(with_retry.status, 201) << with_retry.raw;
  EXPECT_EQ(with_retry.body["retry"]["max_attempts"], 4);
  EXPECT_EQ(with_retry.body["retry"]["backoff_base_ms"], 500);
  Reply retry_run = Post("/api/v1/runs", json{{"task_id", with_retry.body["id"]}}.dump());
  EXPECT_EQ(retry_run.body["retry_policy"]["max_attempts"], 4);

  Reply list = Get("/api/v1/tasks?limit=1");
  ASSERT_EQ(list.status, 200);
  ASSERT_EQ(list.body["items"].size(), 1u);
  ASSERT_TRUE(list.body["next_cursor"].is_string());
  Reply next = Get("/api/v1/tasks?limit=1&cursor=" + list.body["next_cursor"].get<std::string>());
  ASSERT_EQ(next.status, 200);
  ASSERT_EQ(next.body["items"].size(), 1u);
  EXPECT_NE(next.body["items"][0]["id"], list.body["items"][0]["id"]);

  Reply projects = Get("/api/v1/projects");
  ASSERT_EQ(projects.status, 200);
  EXPECT_EQ(projects.body["items"][0]["slug"], "default");
}

TEST_F(ApiServerTest, RetentionSettingsInheritAndPatch) {
  StartServer();
  Reply defaults = Get("/api/v1/projects/default/retention");
  ASSERT_EQ(defaults.status, 200) << defaults.raw;
  EXPECT_TRUE(defaults.body["keep_days"].is_null());
  EXPECT_TRUE(defaults.body["updated_at"].is_null());
  EXPECT_EQ(defaults.body["effective"], (json{{"keep_days", 30}, {"keep_runs", 1000}}));

  Reply project = Post("/api/v1/projects/default/retention", R"({"keep_days":7})");
  ASSERT_EQ(project.status, 200) << project.raw;
  EXPECT_EQ(project.body["keep_days"], 7);
  EXPECT_EQ(project.body["version"], 1);

  Reply created = Post("/api/v1/tasks", ShellTaskBody("noisy"));
  ASSERT_EQ(created.status, 201);
  const std::string task = "/api/v1/tasks/" + created.body["id"].get<std::string>() + "/retention";
  Reply task_set = Post(task, R"({"keep_runs":5})");
  ASSERT_EQ(task_set.status, 200) << task_set.raw;
  EXPECT_EQ(task_set.body["task_id"], created.body["id"]);
  EXPECT_EQ(task_set.body["effective"], (json{{"keep_days", 7}, {"keep_runs", 5}}));

  // A field left out is kept; null inherits again.
  Reply patched = Post(task, R"({"keep_days":2})");
  EXPECT_EQ(patched.body["effective"], (json{{"keep_days", 2}, {"keep_runs", 5}}));
  Reply cleared = Post(task, R"({"keep_runs":null})");
  EXPECT_EQ(cleared.body["effective"], (json{{"keep_days", 2}, {"keep_runs", 1000}}));
  EXPECT_EQ(Get(task).body, cleared.body);

  const std::string before = Snapshot();
  Reply zero = Post(task, R"({"keep_days":0})");
  EXPECT_EQ(zero.status, 400);
  EXPECT_EQ(zero.code(), "invalid_keep_days");
  EXPECT_EQ(Post(task, R"({"keep_runs":"many"})").code(), "invalid_type");
  EXPECT_EQ(Post(task, R"({"keep":1})").code(), "unknown_field");
  EXPECT_EQ(Snapshot(), before);
  EXPECT_EQ(Get("/api/v1/tasks/0190d5d0-0000-7000-8000-000000000000/retention").status, 404);
}

// DESIGN §11: tasks and triggers answer to their names, names are unique among the live ones,
// a revision can repin the task's triggers, and a deletion leaves tombstones.
TEST_F(ApiServerTest, NamesAddressTasksAndTriggersAndDeletionLeavesTombstones) {
  StartServer();
  const std::string task = CreateTask("backup");
  Reply twin = Post("/api/v1/tasks", ShellTaskBody("backup"));
  EXPECT_EQ(twin.status, 409) << twin.raw;
  EXPECT_EQ(twin.body["code"], "name_duplicate");
  Reply bad_name = Post("/api/v1/tasks", ShellTaskBody("a/b"));
  EXPECT_EQ(bad_name.status, 400) << bad_name.raw;
  EXPECT_EQ(bad_name.body["code"], "task_invalid_name");
  Reply uuid_name = Post("/api/v1/tasks", ShellTaskBody(task));
  EXPECT_EQ(uuid_name.body["code"], "task_invalid_name") << uuid_name.raw;

  Reply by_name = Get("/api/v1/tasks/backup");
  ASSERT_EQ(by_name.status, 200) << by_name.raw;
  EXPECT_EQ(by_name.body["id"], task);
  EXPECT_TRUE(by_name.body["deleted_at"].is_null());
  Reply unknown = Get("/api/v1/tasks/nosuch");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(unknown.body["code"], "task_not_found");
  EXPECT_NE(unknown.body["message"].get<std::string>().find("nosuch"), std::string::npos);

  Reply trigger = Post("/api/v1/triggers", json{{"task_id", "backup"},
                                                {"expression", "*/5 * * * *"},
                                                {"timezone", "UTC"},
                                                {"name", "nightly"}}
                                               .dump());
  ASSERT_EQ(trigger.status, 201) << trigger.raw;
  EXPECT_EQ(trigger.body["name"], "nightly");
  EXPECT_EQ(trigger.body["task_id"], task);
  Reply unnamed = Post("/api/v1/triggers",
                       json{{"task_id", task}, {"expression", "0 * * * *"}, {"timezone", "UTC"}}
                           .dump());
  ASSERT_EQ(unnamed.status, 201) << unnamed.raw;
  EXPECT_EQ(unnamed.body["name"],
            "backup-" + unnamed.body["id"].get<std::string>().substr(24));
  Reply same = Post("/api/v1/triggers", json{{"task_id", task},
                                             {"expression", "0 * * * *"},
                                             {"timezone", "UTC"},
                                             {"name", "nightly"}}
                                            .dump());
  EXPECT_EQ(same.status, 409) << same.raw;
  EXPECT_EQ(same.body["code"], "name_duplicate");
  EXPECT_EQ(Get("/api/v1/triggers/nightly").body["id"], trigger.body["id"]);
  EXPECT_EQ(Get("/api/v1/triggers?task_id=backup").body["items"].size(), 2u);
  Reply renamed = Post("/api/v1/triggers/nightly/revisions",
                       json{{"expected_revision", 1}, {"name", "every-5-min"}}.dump());
  ASSERT_EQ(renamed.status, 201) << renamed.raw;
  EXPECT_EQ(renamed.body["name"], "every-5-min");
  EXPECT_EQ(Get("/api/v1/triggers/nightly").status, 404);

  // A revision with repin_triggers keeps both triggers active; without, they go stale.
  json edit = json::parse(ShellTaskBody("backup", "echo v2"));
  edit["expected_revision"] = 1;
  edit["repin_triggers"] = true;
  Reply v2 = Post("/api/v1/tasks/backup/revisions", edit.dump());
  ASSERT_EQ(v2.status, 201) << v2.raw;
  EXPECT_EQ(v2.body["repinned_triggers"].size(), 2u);
  EXPECT_EQ(v2.body["stale_triggers"], 0);
  EXPECT_EQ(Get("/api/v1/triggers/every-5-min").body["state"], "active");
  edit["expected_revision"] = 2;
  edit["repin_triggers"] = "yes";
  EXPECT_EQ(Post("/api/v1/tasks/backup/revisions", edit.dump()).body["code"], "invalid_type");
  edit.erase("repin_triggers");
  Reply v3 = Post("/api/v1/tasks/backup/revisions", edit.dump());
  ASSERT_EQ(v3.status, 201) << v3.raw;
  EXPECT_EQ(v3.body["stale_triggers"], 2);
  EXPECT_EQ(Get("/api/v1/triggers/every-5-min").body["state"], "pin_stale");
  EXPECT_EQ(Get("/api/v1/status").body["stale_triggers"], 2);

  // Deleting a trigger, then the task with its other trigger.
  auto client = NewClient();
  Reply gone = ToReply(client->Delete("/api/v1/triggers/every-5-min"));
  ASSERT_EQ(gone.status, 200) << gone.raw;
  EXPECT_EQ(gone.body["state"], "deleted");
  EXPECT_TRUE(gone.body["deleted_at"].is_string());
  Reply again = ToReply(client->Delete(
      ("/api/v1/triggers/" + trigger.body["id"].get<std::string>()).c_str()));
  EXPECT_EQ(again.status, 200) << again.raw;
  EXPECT_EQ(again.Header("X-QL-Replayed"), "true");
  EXPECT_EQ(Post("/api/v1/triggers/" + trigger.body["id"].get<std::string>() + "/enable", "{}")
                .body["code"],
            "trigger_deleted");
  Reply deleted = ToReply(client->Delete("/api/v1/tasks/backup"));
  ASSERT_EQ(deleted.status, 200) << deleted.raw;
  EXPECT_EQ(deleted.body["id"], task);
  EXPECT_TRUE(deleted.body["deleted_at"].is_string());
  EXPECT_EQ(deleted.body["enabled"], false);
  EXPECT_EQ(deleted.body["deleted_triggers"],
            json::array({unnamed.body["id"].get<std::string>()}));
  EXPECT_EQ(Get("/api/v1/tasks/" + task).body["deleted_at"], deleted.body["deleted_at"]);
  EXPECT_EQ(Get("/api/v1/tasks/backup").status, 404);
  EXPECT_TRUE(Get("/api/v1/tasks").body["items"].empty());
  EXPECT_TRUE(Get("/api/v1/triggers").body["items"].empty());
  Reply run = Post("/api/v1/runs", json{{"task_id", task}}.dump());
  EXPECT_EQ(run.status, 409) << run.raw;
  EXPECT_EQ(run.body["code"], "task_deleted");
  edit["expected_revision"] = 4;
  EXPECT_EQ(Post("/api/v1/tasks/" + task + "/revisions", edit.dump()).body["code"],
            "task_deleted");
  EXPECT_EQ(ToReply(client->Delete("/api/v1/tasks/nosuch")).body["code"], "task_not_found");
  // The name is free again.
  EXPECT_NE(CreateTask("backup"), task);
}

TEST_F(ApiServerTest, TriggersAndNewYorkDaylightSavingPreview) {
  StartServer();
  const std::string task = CreateTask();
  Reply created = Post("/api/v1/triggers", json{{"task_id", task},
                                                {"expression", "30 2 * * *"},
                                                {"timezone", "US/Eastern"},
                                                {"misfire", "fire_once"}}
                                               .dump());
  ASSERT_EQ(created.status, 201) << created.raw;
  const std::string trigger = created.body["id"];
  EXPECT_EQ(created.body["timezone"], "America/New_York");
  EXPECT_EQ(created.body["state"], "active");
  EXPECT_EQ(created.body["next_fire_at"], "2026-01-01T07:30:00Z");
  EXPECT_EQ(created.body["next_fire_at_local"], "2026-01-01T02:30:00-05:00");
  EXPECT_EQ(created.body["overlap"], "allow");
  Reply forbid = Post("/api/v1/triggers", json{{"task_id", CreateTask("guarded")},
                                               {"expression", "0 3 * * *"},
                                               {"timezone", "UTC"},
                                               {"overlap", "forbid"}}
                                              .dump());
  ASSERT_EQ(forbid.status, 201) << forbid.raw;
  EXPECT_EQ(forbid.body["overlap"], "forbid");
  // A new revision of the trigger keeps its policy.
  Reply forbid_off =
      Post("/api/v1/triggers/" + forbid.body["id"].get<std::string>() + "/disable", "");
  ASSERT_EQ(forbid_off.status, 200) << forbid_off.raw;
  EXPECT_EQ(forbid_off.body["overlap"], "forbid");
  EXPECT_EQ(forbid_off.body["revision"], 2);

  Reply cron =
      Get("/api/v1/cron/next?expression=30%202%20*%20*%20*&timezone=America/New_York"
          "&from=2026-03-07T00:00:00Z&count=3");
  ASSERT_EQ(cron.status, 200) << cron.raw;
  ASSERT_EQ(cron.body["fire_times"].size(), 3u);
  EXPECT_EQ(cron.body["fire_times"][0]["at"], "2026-03-07T07:30:00Z");
  EXPECT_EQ(cron.body["fire_times"][0]["local"], "2026-03-07T02:30:00-05:00");
  // 02:30 does not exist on 2026-03-08: it fires at the first instant after the gap.
  EXPECT_EQ(cron.body["fire_times"][1]["at"], "2026-03-08T07:00:00Z");
  EXPECT_EQ(cron.body["fire_times"][1]["local"], "2026-03-08T03:00:00-04:00");
  EXPECT_EQ(cron.body["fire_times"][2]["local"], "2026-03-09T02:30:00-04:00");

  Reply next = Get("/api/v1/triggers/" + trigger + "/next?count=2");
  ASSERT_EQ(next.status, 200) << next.raw;
  EXPECT_EQ(next.body["admitting"], true);
  EXPECT_EQ(next.body["overlap"], "allow");
  EXPECT_EQ(next.body["fire_times"][0]["at"], "2026-01-01T07:30:00Z");
  EXPECT_EQ(next.body["fire_times"][1]["at"], "2026-01-02T07:30:00Z");

  Reply listed = Get("/api/v1/triggers?task_id=" + task);
  ASSERT_EQ(listed.status, 200);
  ASSERT_EQ(listed.body["items"].size(), 1u);
  Reply other = Get("/api/v1/triggers?task_id=" + CreateTask("other"));
  EXPECT_EQ(other.body["items"].size(), 0u);

  Reply disabled = Post("/api/v1/triggers/" + trigger + "/disable", "");
  ASSERT_EQ(disabled.status, 200) << disabled.raw;
  EXPECT_EQ(disabled.body["state"], "disabled");
  EXPECT_EQ(disabled.body["next_fire_at"], nullptr);
  Reply preview_off = Get("/api/v1/triggers/" + trigger + "/next");
  EXPECT_EQ(preview_off.body["admitting"], false);

  json update = json::parse(ShellTaskBody("task", "echo v2"));
  update["expected_revision"] = 1;
  ASSERT_EQ(Post("/api/v1/tasks/" + task + "/revisions", update.dump()).status, 201);
  Reply refused = Post("/api/v1/triggers/" + trigger + "/enable", "{}");
  EXPECT_EQ(refused.status, 409);
  EXPECT_EQ(refused.code(), "trigger_pin_stale");
  Reply repinned = Post("/api/v1/triggers/" + trigger + "/repin", "{}");
  ASSERT_EQ(repinned.status, 200) << repinned.raw;
  EXPECT_EQ(repinned.body["task_revision"], 2);
  Reply enabled = Post("/api/v1/triggers/" + trigger + "/enable", "");
  ASSERT_EQ(enabled.status, 200);
  EXPECT_EQ(enabled.body["state"], "active");
  EXPECT_EQ(enabled.body["revision"], 4);
  Reply got = Get("/api/v1/triggers/" + trigger);
  EXPECT_EQ(got.body["revision"], 4);
}

TEST_F(ApiServerTest, ATriggerIsEditedInPlaceAndItsScheduleFollowsTheNewExpression) {
  StartServer();
  const std::string task = CreateTask();
  Reply created = Post("/api/v1/triggers", json{{"task_id", task},
                                                {"expression", "30 2 * * *"},
                                                {"timezone", "UTC"}}
                                               .dump());
  ASSERT_EQ(created.status, 201) << created.raw;
  const std::string trigger = created.body["id"];
  const std::string path = "/api/v1/triggers/" + trigger + "/revisions";

  // Bad input is refused with its code and changes nothing.
  const std::string before = Snapshot();
  EXPECT_EQ(Post(path, R"({"expression":"0 4 * * *"})").code(), "missing_field");
  EXPECT_EQ(Post(path, R"({"expected_revision":1,"expression":"61 * * * *"})").code(),
            "cron_value_out_of_range");
  EXPECT_EQ(Post(path, R"({"expected_revision":1,"timezone":"Mars/Olympus"})").code(),
            "timezone_unknown");
  EXPECT_EQ(Post(path, R"({"expected_revision":1,"overlap":"queue"})").code(),
            "invalid_overlap_policy");
  EXPECT_EQ(Post(path, R"({"expected_revision":1,"jitter_ms":7200000})").code(), "invalid_jitter");
  EXPECT_EQ(Post(path, R"({"expected_revision":1,"jitter_ms":1.5})").code(),
            "json_number_unsupported");
  EXPECT_EQ(Post(path, R"({"expected_revision":1,"task_id":"x"})").code(), "unknown_field");
  Reply stale = Post(path, R"({"expected_revision":7,"expression":"0 4 * * *"})");
  EXPECT_EQ(stale.status, 409);
  EXPECT_EQ(stale.code(), "revision_conflict");
  EXPECT_EQ(Snapshot(), before);

  Reply edited = Post(path, json{{"expected_revision", 1},
                                 {"expression", "0 4 * * *"},
                                 {"timezone", "Asia/Shanghai"},
                                 {"overlap", "forbid"}}
                                .dump());
  ASSERT_EQ(edited.status, 201) << edited.raw;
  EXPECT_EQ(edited.body["id"], trigger);
  EXPECT_EQ(edited.body["revision"], 2);
  EXPECT_EQ(edited.body["expression"], "0 4 * * *");
  EXPECT_EQ(edited.body["timezone"], "Asia/Shanghai");
  EXPECT_EQ(edited.body["overlap"], "forbid");
  EXPECT_EQ(edited.body["misfire"], created.body["misfire"]);
  EXPECT_EQ(edited.body["task_revision"], created.body["task_revision"]);
  // 04:00 in Shanghai is 20:00 UTC the day before: the next fire follows the new expression.
  Reply next = Get("/api/v1/triggers/" + trigger + "/next?count=1");
  ASSERT_EQ(next.status, 200) << next.raw;
  EXPECT_EQ(next.body["fire_times"][0]["at"], "2026-01-01T20:00:00Z");
  // The same edit again changes nothing.
  Reply again = Post(path, json{{"expected_revision", 2}, {"expression", "0 4 * * *"}}.dump());
  EXPECT_EQ(again.status, 200) << again.raw;
  EXPECT_EQ(again.body["revision"], 2);
}

TEST_F(ApiServerTest, ATriggerCarriesItsJitterWindowThroughCreateEditAndPreview) {
  StartServer();
  const std::string task = CreateTask();
  Reply plain = Post("/api/v1/triggers",
                     json{{"task_id", task}, {"expression", "0 * * * *"}, {"timezone", "UTC"}}.dump());
  ASSERT_EQ(plain.status, 201) << plain.raw;
  EXPECT_EQ(plain.body["jitter_ms"], 0);
  Reply created = Post("/api/v1/triggers", json{{"task_id", task},
                                                {"expression", "0 * * * *"},
                                                {"timezone", "UTC"},
                                                {"jitter_ms", 30000}}
                                               .dump());
  ASSERT_EQ(created.status, 201) << created.raw;
  EXPECT_EQ(created.body["jitter_ms"], 30000);
  // The window is part of the revision's content: same expression, another digest.
  EXPECT_NE(created.body["content_digest"], plain.body["content_digest"]);
  const std::string trigger = created.body["id"];
  Reply preview = Get("/api/v1/triggers/" + trigger + "/next?count=1");
  ASSERT_EQ(preview.status, 200) << preview.raw;
  EXPECT_EQ(preview.body["jitter_ms"], 30000);
  Reply edited = Post("/api/v1/triggers/" + trigger + "/revisions",
                      json{{"expected_revision", 1}, {"jitter_ms", 0}}.dump());
  ASSERT_EQ(edited.status, 201) << edited.raw;
  EXPECT_EQ(edited.body["revision"], 2);
  EXPECT_EQ(edited.body["jitter_ms"], 0);
  // Without a window the content hashes as it did before windows existed.
  EXPECT_EQ(edited.body["content_digest"], plain.body["content_digest"]);
  EXPECT_EQ(Get("/api/v1/triggers/" + trigger).body["jitter_ms"], 0);
}

TEST_F(ApiServerTest, RunsLifecycle) {
  StartServer();
  const std::string a = CreateTask("a");
  const std::string b = CreateTask("b");
  std::vector<std::string> a_runs;
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(1000);
    a_runs.push_back(StartRun(a));
  }
  clock_.Advance(1000);
  Reply keyed = Post("/api/v1/runs",
                     json{{"task_id", b}, {"idempotency_key", "deploy-1"}, {"priority", 3}}.dump());
  ASSERT_EQ(keyed.status, 201) << keyed.raw;
  EXPECT_EQ(keyed.body["trigger_type"], "manual");
  EXPECT_EQ(keyed.body["status"], "queued");
  EXPECT_EQ(keyed.body["priority"], 3);
  EXPECT_EQ(keyed.body["scheduled_for"], nullptr);
  EXPECT_EQ(keyed.body["created_at"], "2026-01-01T00:00:04Z");
  Reply replay = Post("/api/v1/runs", json{{"task_id", b}, {"idempotency_key", "deploy-1"}}.dump());
  EXPECT_EQ(replay.status, 200);
  EXPECT_EQ(replay.body["id"], keyed.body["id"]);
  Reply reused = Post("/api/v1/runs", json{{"task_id", a}, {"idempotency_key", "deploy-1"}}.dump());
  EXPECT_EQ(reused.status, 409);
  EXPECT_EQ(reused.code(), "idempotency_key_reused");

  Reply page1 = Get("/api/v1/runs?task_id=" + a + "&limit=2");
  ASSERT_EQ(page1.status, 200) << page1.raw;
  ASSERT_EQ(page1.body["items"].size(), 2u);
  EXPECT_EQ(page1.body["items"][0]["id"], a_runs[2]);
  ASSERT_TRUE(page1.body["next_cursor"].is_string());
  Reply page2 = Get("/api/v1/runs?task_id=" + a +
                    "&limit=2&cursor=" + page1.body["next_cursor"].get<std::string>());
  ASSERT_EQ(page2.status, 200);
  ASSERT_EQ(page2.body["items"].size(), 1u);
  EXPECT_EQ(page2.body["items"][0]["id"], a_runs[0]);
  EXPECT_EQ(page2.body["next_cursor"], nullptr);
  EXPECT_FALSE(page1.body["items"][0].contains("short_id"));
  // Asked for, each run carries the shortest prefix no other run of the project has (the runs
  // here were created within seconds, so they share more than 8 characters), and it addresses
  // the run.
  Reply short_ids = Get("/api/v1/runs?task_id=" + a + "&short_ids=true");
  ASSERT_EQ(short_ids.status, 200) << short_ids.raw;
  ASSERT_EQ(short_ids.body["items"].size(), 3u);
  for (const json& item : short_ids.body["items"]) {
    const std::string prefix = item.value("short_id", "");
    EXPECT_GT(prefix.size(), 8u) << item.dump();
    EXPECT_TRUE(item["id"].get<std::string>().starts_with(prefix)) << item.dump();
    Reply by_prefix = Get("/api/v1/runs/" + prefix);
    ASSERT_EQ(by_prefix.status, 200) << by_prefix.raw;
    EXPECT_EQ(by_prefix.body["id"], item["id"]);
  }

  Reply run = Get("/api/v1/runs/" + a_runs[0]);
  ASSERT_EQ(run.status, 200);
  for (const char* field :
       {"id", "project_id", "task_id", "task_revision", "trigger_id", "trigger_revision",
        "trigger_type", "status", "scheduled_for", "exit_code", "error_code", "created_at",
        "started_at", "finished_at", "retry_of_run_id", "attempts"}) {
    EXPECT_TRUE(run.body.contains(field)) << field;
  }
  ASSERT_EQ(run.body["attempts"].size(), 1u);
  EXPECT_EQ(run.body["attempts"][0]["status"], "claimed");

  Reply cancelled = Post("/api/v1/runs/" + a_runs[0] + "/cancel", json{{"reason", "oops"}}.dump());
  ASSERT_EQ(cancelled.status, 200) << cancelled.raw;
  EXPECT_EQ(cancelled.body["status"], "cancelled");
  EXPECT_EQ(cancelled.body["cancel_reason"], "oops");
  Reply again = Post("/api/v1/runs/" + a_runs[0] + "/cancel", "");
  EXPECT_EQ(again.status, 409);
  EXPECT_EQ(again.code(), "run_already_terminal");

  Reply by_status = Get("/api/v1/runs?status=cancelled");
  ASSERT_EQ(by_status.body["items"].size(), 1u);

  Reply retried = Post("/api/v1/runs/" + a_runs[0] + "/retry", "");
  ASSERT_EQ(retried.status, 201) << retried.raw;
  EXPECT_EQ(retried.body["retry_of_run_id"], a_runs[0]);
  Reply not_terminal = Post("/api/v1/runs/" + a_runs[1] + "/retry", "{}");
  EXPECT_EQ(not_terminal.status, 409);
  EXPECT_EQ(not_terminal.code(), "run_not_terminal");

  Reply events = Get("/api/v1/runs/" + a_runs[0] + "/events");
  ASSERT_EQ(events.status, 200);
  std::vector<std::string> types;
  for (const auto& e : events.body["items"]) types.push_back(e["type"]);
  EXPECT_THAT(types, ::testing::Contains("run.cancel_requested"));
  const int64_t last = events.body["next_after"];
  Reply after = Get("/api/v1/runs/" + a_runs[0] + "/events?after=" + std::to_string(last));
  EXPECT_EQ(after.body["items"].size(), 0u);

  Reply status = Get("/api/v1/status");
  ASSERT_EQ(status.status, 200);
  EXPECT_EQ(status.body["runs_by_status"]["cancelled"], 1);
  EXPECT_EQ(status.body["runs_by_status"]["queued"], 4);
  EXPECT_EQ(status.body["ready"], true);
}

struct BadRequest {
  std::string method;
  std::string path;  // "{task}", "{trigger}", "{run}" are replaced
  std::string body;
  int status;
  std::string code;
};

TEST_F(ApiServerTest, EveryBadInputGetsItsCodeAndChangesNothing) {
  StartServer();
  const std::string task = CreateTask();
  const std::string trigger = CreateTrigger(task, "0 * * * *", "UTC");
  const std::string run = StartRun(task);
  const std::string missing = "01890000-0000-7000-8000-000000000000";
  const std::string spec = R"("spec":{"command":{"kind":"shell","command":"ls"}})";
  const std::vector<BadRequest> cases = {
      // tasks.create
      {"POST", "/api/v1/tasks", "not json", 400, "invalid_json"},
      {"POST", "/api/v1/tasks", "", 400, "invalid_json"},
      {"POST", "/api/v1/tasks", "[1]", 400, "invalid_json"},
      {"POST", "/api/v1/tasks", R"({"name":"a","name":"b",)" + spec + "}", 400,
       "json_duplicate_key"},
      {"POST", "/api/v1/tasks", R"({"name":"a",)" + spec + R"(,"colour":"red"})", 400,
       "task_unknown_field"},
      {"POST", "/api/v1/tasks", R"({"name":7,)" + spec + "}", 400, "task_invalid_name"},
      {"POST", "/api/v1/tasks", R"({"name":"a"})", 400, "task_missing_field"},
      {"POST", "/api/v1/tasks", R"({"name":"a","enabled":"yes",)" + spec + "}", 400,
       "task_invalid_type"},
      {"POST", "/api/v1/tasks", R"({"name":"a","mutation_id":5,)" + spec + "}", 400,
       "invalid_type"},
      {"POST", "/api/v1/tasks", R"({"name":"a","spec":{"command":{"kind":"argv","file":"ls"}}})",
       400, "spec_invalid_path"},
      {"POST", "/api/v1/tasks", R"({"name":"a","spec":{"command":{"kind":"exec"}}})", 400,
       "spec_invalid_command_kind"},
      {"POST", "/api/v1/tasks",
       R"({"name":"a","spec":{"command":{"kind":"shell","command":"ls"},"timeoutMs":0}})", 400,
       "spec_timeout_out_of_range"},
      {"POST", "/api/v1/tasks",
       R"({"name":"a","spec":{"command":{"kind":"shell","command":"ls"},"environment":{"QL3_X":"1"}}})",
       400, "spec_invalid_env_name"},
      {"POST", "/api/v1/tasks",
       R"({"name":"a","spec":{"command":{"kind":"shell","command":"ls"},"timeoutMs":1.5}})", 400,
       "json_number_unsupported"},
      {"POST", "/api/v1/tasks", R"({"name":"a",)" + spec + R"(,"retry":{"max_attempts":0}})", 400,
       "retry_out_of_range"},
      {"POST", "/api/v1/tasks", R"({"name":"a",)" + spec + R"(,"concurrency":0})", 400,
       "invalid_concurrency"},
      {"POST", "/api/v1/tasks", R"({"name":"a",)" + spec + R"(,"concurrency":"2"})", 400,
       "invalid_concurrency"},
      // tasks.revisions.create
      {"POST", "/api/v1/tasks/{task}/revisions", R"({"name":"a",)" + spec + "}", 400,
       "missing_field"},
      {"POST", "/api/v1/tasks/{task}/revisions",
       R"({"expected_revision":"1","name":"a",)" + spec + "}", 400, "invalid_type"},
      {"POST", "/api/v1/tasks/{task}/revisions",
       R"({"expected_revision":0,"name":"a",)" + spec + "}", 400, "invalid_expected_revision"},
      {"POST", "/api/v1/tasks/nope/revisions", R"({"expected_revision":1,"name":"a",)" + spec + "}",
       404, "task_not_found"},
      {"POST", "/api/v1/tasks/{task}/revisions",
       R"({"expected_revision":1,"repin_triggers":1,"name":"a",)" + spec + "}", 400,
       "invalid_type"},
      {"POST", "/api/v1/tasks/" + missing + "/revisions",
       R"({"expected_revision":1,"name":"a",)" + spec + "}", 404, "task_not_found"},
      // tasks.list / tasks.get
      {"GET", "/api/v1/tasks?limit=0", "", 400, "invalid_limit"},
      {"GET", "/api/v1/tasks?limit=501", "", 400, "invalid_limit"},
      {"GET", "/api/v1/tasks?limit=ten", "", 400, "invalid_limit"},
      {"GET", "/api/v1/tasks?limit=+5", "", 400, "invalid_limit"},
      {"GET", "/api/v1/tasks?cursor=zzzz", "", 400, "invalid_cursor"},
      {"GET", "/api/v1/tasks?colour=red", "", 400, "unknown_parameter"},
      {"GET", "/api/v1/tasks?limit=1&limit=2", "", 400, "duplicate_parameter"},
      {"GET", "/api/v1/tasks/not-a-uuid", "", 404, "task_not_found"},
      {"GET", "/api/v1/tasks/" + missing, "", 404, "task_not_found"},
      {"GET", "/api/v1/tasks/" + missing + "/revisions", "", 404, "task_not_found"},
      // triggers.create
      {"POST", "/api/v1/triggers",
       R"({"task_id":"{task}","expression":"0 25 * * *","timezone":"UTC"})", 400,
       "cron_value_out_of_range"},
      {"POST", "/api/v1/triggers", R"({"task_id":"{task}","expression":"@daily","timezone":"UTC"})",
       400, "cron_macro_unsupported"},
      {"POST", "/api/v1/triggers",
       R"({"task_id":"{task}","expression":"0 0 * * *","timezone":"Mars/Base"})", 400,
       "timezone_unknown"},
      {"POST", "/api/v1/triggers",
       R"({"task_id":"{task}","expression":"0 0 * * *","timezone":"+08:00"})", 400,
       "timezone_invalid"},
      {"POST", "/api/v1/triggers", R"({"task_id":"{task}","expression":"0 0 * * *"})", 400,
       "missing_field"},
      {"POST", "/api/v1/triggers", R"({"task_id":"{task}","expression":5,"timezone":"UTC"})", 400,
       "invalid_type"},
      {"POST", "/api/v1/triggers",
       R"({"task_id":"{task}","expression":"0 0 * * *","timezone":"UTC","misfire":"later"})", 400,
       "invalid_misfire_policy"},
      {"POST", "/api/v1/triggers",
       R"({"task_id":"{task}","expression":"0 0 * * *","timezone":"UTC","overlap":"queue"})", 400,
       "invalid_overlap_policy"},
      {"POST", "/api/v1/triggers",
       R"({"task_id":"{task}","expression":"0 0 * * *","timezone":"UTC","overlap":1})", 400,
       "invalid_type"},
      {"POST", "/api/v1/triggers",
       R"({"task_id":"{task}","expression":"0 0 * * *","timezone":"UTC","jitter_ms":-1})", 400,
       "invalid_jitter"},
      {"POST", "/api/v1/triggers",
       R"({"task_id":"{task}","expression":"0 0 * * *","timezone":"UTC","jitter_ms":3600001})", 400,
       "invalid_jitter"},
      {"POST", "/api/v1/triggers",
       R"({"task_id":"{task}","expression":"0 0 * * *","timezone":"UTC","jitter_ms":"30s"})", 400,
       "invalid_type"},
      {"POST", "/api/v1/triggers",
       R"({"task_id":"{task}","expression":"0 0 * * *","timezone":"UTC","enabled":1})", 400,
       "invalid_type"},
      {"POST", "/api/v1/triggers",
       R"({"task_id":"{task}","expression":"0 0 * * *","timezone":"UTC","every":"day"})", 400,
       "unknown_field"},
      {"POST", "/api/v1/triggers",
       R"({"task_id":")" + missing + R"(","expression":"0 0 * * *","timezone":"UTC"})", 404,
       "task_not_found"},
      // triggers.*
      {"GET", "/api/v1/triggers?task_id=bad", "", 404, "task_not_found"},
      {"GET", "/api/v1/triggers?limit=0", "", 400, "invalid_limit"},
      {"GET", "/api/v1/triggers/" + missing, "", 404, "trigger_not_found"},
      {"POST", "/api/v1/triggers/{trigger}/disable", R"({"now":true})", 400, "unknown_field"},
      {"POST", "/api/v1/triggers/{trigger}/enable?x=1", "", 400, "unknown_parameter"},
      {"POST", "/api/v1/triggers/" + missing + "/repin", "", 404, "trigger_not_found"},
      {"GET", "/api/v1/triggers/{trigger}/next?count=0", "", 400, "invalid_count"},
      {"GET", "/api/v1/triggers/{trigger}/next?count=101", "", 400, "invalid_count"},
      // cron.next
      {"GET", "/api/v1/cron/next?timezone=UTC", "", 400, "missing_parameter"},
      {"GET", "/api/v1/cron/next?expression=0%200%20*%20*%20*", "", 400, "missing_parameter"},
      {"GET", "/api/v1/cron/next?expression=0%200%20*%20*&timezone=UTC", "", 400,
       "cron_field_count"},
      {"GET", "/api/v1/cron/next?expression=0%200%20*%20*%20*&timezone=UTC&from=yesterday", "", 400,
       "invalid_timestamp"},
      // runs
      {"GET", "/api/v1/runs?status=done", "", 400, "invalid_status"},
      {"GET", "/api/v1/runs?task_id=x", "", 404, "task_not_found"},
      {"GET", "/api/v1/runs?trigger_id=x", "", 404, "trigger_not_found"},
      {"GET", "/api/v1/runs?task_id=", "", 400, "invalid_id"},
      {"GET", "/api/v1/runs?limit=-1", "", 400, "invalid_limit"},
      {"GET", "/api/v1/runs?short_ids=yes", "", 400, "invalid_short_ids"},
      {"GET", "/api/v1/runs?cursor=dGFza3M6eA", "", 400, "invalid_cursor"},  // a tasks cursor
      {"POST", "/api/v1/runs", "{}", 400, "missing_field"},
      {"POST", "/api/v1/runs", R"({"task_id":"{task}","priority":"high"})", 400, "invalid_type"},
      {"POST", "/api/v1/runs", R"({"task_id":"{task}","priority":5000})", 400, "invalid_priority"},
      {"POST", "/api/v1/runs", R"({"task_id":"{task}","idempotency_key":""})", 400,
       "invalid_idempotency_key"},
      {"POST", "/api/v1/runs", R"({"task_id":"{task}","when":"now"})", 400, "unknown_field"},
      {"POST", "/api/v1/runs", R"({"task_id":")" + missing + R"("})", 404, "task_not_found"},
      {"GET", "/api/v1/runs/" + missing, "", 404, "run_not_found"},
      {"GET", "/api/v1/runs/{run}/events?after=-1", "", 400, "invalid_after"},
      {"GET", "/api/v1/runs/{run}/events?limit=0", "", 400, "invalid_limit"},
      {"GET", "/api/v1/runs/{run}/log?offset=-1", "", 400, "invalid_offset"},
      {"GET", "/api/v1/runs/{run}/log?follow=maybe", "", 400, "invalid_follow"},
      {"GET", "/api/v1/runs/{run}/log?attempt=0", "", 400, "invalid_attempt"},
      {"GET", "/api/v1/runs/{run}/log?attempt=9", "", 404, "attempt_not_found"},
      {"POST", "/api/v1/runs/{run}/cancel", R"({"reason":5})", 400, "invalid_type"},
      {"POST", "/api/v1/runs/{run}/cancel", R"({"reason":""})", 400, "invalid_cancel_reason"},
      {"POST", "/api/v1/runs/{run}/retry", R"({"again":true})", 400, "unknown_field"},
      {"POST", "/api/v1/runs/{run}/retry", "", 409, "run_not_terminal"},
      {"POST", "/api/v1/runs/" + missing + "/cancel", "", 404, "run_not_found"},
      {"GET", "/api/v1/runs?since=yesterday", "", 400, "invalid_time"},
      {"GET", "/api/v1/runs?since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z", "", 400,
       "invalid_time_range"},
      // a run by id prefix: 8 characters or more of an id's form
      {"GET", "/api/v1/runs/0123456", "", 400, "invalid_id"},
      {"GET", "/api/v1/runs/0123456G", "", 400, "invalid_id"},
      {"GET", "/api/v1/runs/01234567_", "", 400, "invalid_id"},
      {"GET", "/api/v1/runs/012345678", "", 400, "invalid_id"},  // a dash belongs there
      {"GET", "/api/v1/runs/ffffffff", "", 404, "run_not_found"},
      {"POST", "/api/v1/runs/ffffffff-ffff/cancel", "", 404, "run_not_found"},
      // the cron list's filters
      {"GET", "/api/v1/tasks?last_status=exploded", "", 400, "invalid_status"},
      {"GET", "/api/v1/tasks?q=", "", 400, "invalid_text"},
      {"GET", "/api/v1/tasks?label==x", "", 400, "invalid_label"},
      {"POST", "/api/v1/tasks/{task}/enable", R"({"now":true})", 400, "unknown_field"},
      {"POST", "/api/v1/tasks/nosuch/disable", "", 404, "task_not_found"},
      // routing
      {"GET", "/api/v1/nothing", "", 404, "route_not_found"},
      {"GET", "/api/v1/tasks/", "", 404, "route_not_found"},
      {"GET", "/nothing", "", 404, "route_not_found"},
      {"DELETE", "/api/v1/runs/{run}", "", 405, "method_not_allowed"},
      // tasks.delete / triggers.delete
      {"DELETE", "/api/v1/tasks/nosuch", "", 404, "task_not_found"},
      {"DELETE", "/api/v1/tasks/" + missing, "", 404, "task_not_found"},
      {"DELETE", "/api/v1/tasks/{task}?colour=red", "", 400, "unknown_parameter"},
      {"DELETE", "/api/v1/triggers/nosuch", "", 404, "trigger_not_found"},
      {"DELETE", "/api/v1/triggers/{trigger}?x=1", "", 400, "unknown_parameter"},
      {"PUT", "/api/v1/tasks", "{}", 405, "method_not_allowed"},
      {"POST", "/api/v1/status", "{}", 405, "method_not_allowed"},
  };
  const std::string before = Snapshot();
  auto client = NewClient();
  for (BadRequest c : cases) {
    for (auto* s : {&c.path, &c.body}) {
      for (const auto& [placeholder, value] : {std::pair<std::string, std::string>{"{task}", task},
                                               {"{trigger}", trigger},
                                               {"{run}", run}}) {
        for (size_t at = s->find(placeholder); at != std::string::npos; at = s->find(placeholder)) {
          s->replace(at, placeholder.size(), value);
        }
      }
    }
    httplib::Result result =
        c.method == "GET"    ? client->Get(c.path.c_str())
        : c.method == "POST" ? client->Post(c.path.c_str(), c.body, "application/json")
        : c.method == "PUT"  ? client->Put(c.path.c_str(), c.body, "application/json")
                             : client->Delete(c.path.c_str());
    Reply reply = ToReply(result);
    EXPECT_EQ(reply.status, c.status)
        << c.method << " " << c.path << " " << c.body << " -> " << reply.raw;
    EXPECT_EQ(reply.code(), c.code)
        << c.method << " " << c.path << " " << c.body << " -> " << reply.raw;
    EXPECT_FALSE(reply.body.value("message", "").empty()) << c.path;
  }
  // Bodies that are not plain JSON text.
  const std::string gzip =
      RawExchange(server_->port(),
                  std::string("POST /api/v1/runs HTTP/1.1\r\nHost: x\r\nConnection: close\r\n") +
                      "Authorization: Bearer " + kToken +
                      "\r\nContent-Encoding: gzip\r\nContent-Length: 2\r\n\r\n{}");
  EXPECT_THAT(gzip, ::testing::StartsWith("HTTP/1.1 415"));
  EXPECT_THAT(gzip, HasSubstr("unsupported_media_type"));
  std::string many_headers = "GET /api/v1/tasks HTTP/1.1\r\nHost: x\r\nConnection: close\r\n";
  for (int i = 0; i < 100; ++i) many_headers += "X-Filler-" + std::to_string(i) + ": 1\r\n";
  EXPECT_THAT(RawExchange(server_->port(), many_headers + "\r\n"),
              ::testing::StartsWith("HTTP/1.1 431"));
  EXPECT_EQ(Snapshot(), before);

  // Messages name the problem precisely.
  Reply cron =
      Post("/api/v1/triggers",
           json{{"task_id", task}, {"expression", "0 25 * * *"}, {"timezone", "UTC"}}.dump());
  EXPECT_THAT(cron.body["message"].get<std::string>(), HasSubstr("hour"));
  EXPECT_THAT(cron.body["message"].get<std::string>(), HasSubstr("25"));
  Reply unknown = Post("/api/v1/runs", json{{"task_id", task}, {"when", "now"}}.dump());
  EXPECT_THAT(unknown.body["message"].get<std::string>(), HasSubstr("when"));
  Reply method = ToReply(client->Delete(("/api/v1/runs/" + run).c_str()));
  EXPECT_EQ(method.Header("Allow"), "GET");
}

TEST_F(ApiServerTest, OversizeBodiesAre413AndChangeNothing) {
  StartServer();
  const std::string before = Snapshot();
  std::string big = R"({"name":"big","spec":{"command":{"kind":"shell","command":")";
  big.append((1 << 20) + 10, 'x');
  big += R"("}}})";
  Reply sized = Post("/api/v1/tasks", big);
  EXPECT_EQ(sized.status, 413);
  EXPECT_EQ(sized.code(), "body_too_large");

  // A chunked body has no length up front: it is cut off while being read.
  auto client = NewClient();
  size_t sent = 0;
  Reply chunked = ToReply(client->Post(
      "/api/v1/tasks",
      [&](size_t, httplib::DataSink& sink) {
        if (sent >= (size_t{3} << 20)) {
          sink.done();
          return true;
        }
        std::string piece(64 * 1024, ' ');
        sent += piece.size();
        return sink.write(piece.data(), piece.size());
      },
      "application/json"));
  if (chunked.status != -1) {  // the server may close before the client finishes sending
    EXPECT_EQ(chunked.status, 413);
    EXPECT_EQ(chunked.code(), "body_too_large");
  }

  // A client that sends "Expect: 100-continue" gets the 413 before sending anything.
  const std::string answer =
      RawExchange(server_->port(),
                  std::string("POST /api/v1/tasks HTTP/1.1\r\nHost: x\r\nConnection: close\r\n") +
                      "Authorization: Bearer " + kToken +
                      "\r\nContent-Type: application/json\r\n"
                      "Content-Length: 2000000\r\nExpect: 100-continue\r\n\r\n");
  EXPECT_THAT(answer, ::testing::StartsWith("HTTP/1.1 413"));
  EXPECT_THAT(answer, HasSubstr("body_too_large"));
  EXPECT_THAT(answer, ::testing::Not(HasSubstr("100 Continue")));

  // A declared length far past the limit is refused without reading the body.
  const std::string huge = RawExchange(
      server_->port(),
      std::string("POST /api/v1/tasks HTTP/1.1\r\nHost: x\r\nConnection: close\r\n") +
          "Authorization: Bearer " + kToken + "\r\nContent-Length: 1000000000\r\n\r\n{");
  EXPECT_THAT(huge, ::testing::StartsWith("HTTP/1.1 413"));
  EXPECT_EQ(Snapshot(), before);
  // The server is still healthy afterwards.
  EXPECT_THAT(RawExchange(server_->port(), "GARBAGE\r\n\r\n", 300), HasSubstr("bad_request"));
  EXPECT_EQ(Get("/api/v1/tasks").status, 200);
}

// The API's own description is public and is exactly the document kept in the repository.
TEST_F(ApiServerTest, TheOpenApiDocumentIsServedWithoutAToken) {
  StartServer();
  auto client = NewClient(false);
  Reply reply = ToReply(client->Get("/api/v1/openapi.json"));
  ASSERT_EQ(reply.status, 200) << reply.raw;
  EXPECT_THAT(reply.Header("Content-Type"), HasSubstr("application/json"));
  EXPECT_EQ(reply.raw, std::string(http::OpenApiDocument()));
  const nlohmann::json doc = nlohmann::json::parse(reply.raw, nullptr, false);
  ASSERT_TRUE(doc.is_object());
  EXPECT_EQ(doc.value("openapi", ""), "3.1.0");
  EXPECT_EQ(ToReply(client->Get("/api/v1/openapi.json?x=1")).status, 400);
}

TEST_F(ApiServerTest, MetricsAreExposedAsPrometheusText) {
  StartServer();
  ASSERT_EQ(Get("/livez").status, 200);
  ASSERT_EQ(Get("/api/v1/tasks/nope").status, 404);
  metrics_.Describe("ql_occurrences_total", "counter", "Occurrences by outcome.");
  metrics_.Increment("ql_occurrences_total", "outcome=\"admit\"", 2);
  auto client = NewClient(false);
  // A request is counted by the server's logger after its answer is sent, so the count of the
  // last request may land a moment after the client has read that answer.
  Reply reply;
  for (int i = 0; i < 100; ++i) {
    reply = ToReply(client->Get("/metrics"));
    if (reply.raw.find("route=\"tasks.get\",code=\"404\"") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(reply.status, 200);
  EXPECT_THAT(reply.Header("Content-Type"), HasSubstr("text/plain; version=0.0.4"));
  EXPECT_THAT(reply.raw, HasSubstr("# TYPE ql_http_requests_total counter\n"));
  EXPECT_THAT(reply.raw, HasSubstr("ql_http_requests_total{route=\"livez\",code=\"200\"} 1\n"));
  EXPECT_THAT(reply.raw, HasSubstr("ql_http_requests_total{route=\"tasks.get\",code=\"404\"} 1\n"));
  EXPECT_THAT(reply.raw, HasSubstr("ql_occurrences_total{outcome=\"admit\"} 2\n"));
  EXPECT_THAT(reply.raw, HasSubstr("# TYPE ql_http_in_flight gauge\n"));
}

TEST_F(ApiServerTest, MetricsCarryTheQueueDepthTheProcessAndTheBuild) {
  ApiServerOptions options = DefaultOptions();
  options.version = "9.8.7";
  StartServer(options);
  Reply empty = Get("/metrics");
  EXPECT_THAT(empty.raw, HasSubstr("# TYPE ql_runs_queued gauge\nql_runs_queued 0\n"));
  const std::string task = CreateTask();
  StartRun(task);
  StartRun(task);
  Reply two = Get("/metrics");
  EXPECT_THAT(two.raw, HasSubstr("\nql_runs_queued 2\n"));
  EXPECT_THAT(two.raw, HasSubstr("\nql_build_info{version=\"9.8.7\"} 1\n"));
  EXPECT_THAT(two.raw, HasSubstr("\nprocess_resident_memory_bytes "));
  EXPECT_THAT(two.raw, HasSubstr("\nprocess_cpu_seconds_total "));
  EXPECT_THAT(two.raw, HasSubstr("\nprocess_open_fds "));
  EXPECT_THAT(two.raw, HasSubstr("\nprocess_start_time_seconds "));
  EXPECT_THAT(two.raw, HasSubstr("\nql_metrics_rejected_samples_total 0\n"));
}

// A viewer finds the lines of a log that contain a text, with where they are; bad queries are
// refused with their codes.
TEST_F(ApiServerTest, SearchesARunsLog) {
  StartServer();
  const std::string task = CreateTask();
  const std::string run = StartRun(task);
  const fs::path log = dir_ / "log" / "search.log";
  {
    std::ofstream out(log);
    out << "fetching\nERROR timeout talking to db\nretrying\nan error again\n";
  }
  StartAttempt(run, log.string());
  Reply found = Get("/api/v1/runs/" + run + "/log/search?q=error");
  ASSERT_EQ(found.status, 200) << found.raw;
  ASSERT_EQ(found.body["matches"].size(), 2u) << found.raw;
  EXPECT_EQ(found.body["matches"][0]["line"], 2);
  EXPECT_EQ(found.body["matches"][0]["offset"], 9);
  EXPECT_EQ(found.body["matches"][0]["text"], "ERROR timeout talking to db");
  EXPECT_EQ(found.body["matches"][1]["line"], 4);
  EXPECT_EQ(found.body["more"], false);
  EXPECT_EQ(found.body["complete"], true);
  EXPECT_EQ(found.body["attempt"], 1);
  Reply one = Get("/api/v1/runs/" + run + "/log/search?q=error&limit=1");
  ASSERT_EQ(one.body["matches"].size(), 1u);
  EXPECT_EQ(one.body["more"], true);
  EXPECT_EQ(Get("/api/v1/runs/" + run + "/log/search").body["code"], "missing_parameter");
  EXPECT_EQ(Get("/api/v1/runs/" + run + "/log/search?q=").body["code"], "invalid_query");
  EXPECT_EQ(Get("/api/v1/runs/" + run + "/log/search?q=a&limit=0").body["code"], "invalid_limit");
  EXPECT_EQ(Get("/api/v1/runs/" + run + "/log/search?q=a&attempt=9").status, 404);
  EXPECT_EQ(Get("/api/v1/runs/" + run + "/log/search?q=a&offset=1").body["code"],
            "unknown_parameter");
}

TEST_F(ApiServerTest, ReadsAndFollowsRunLogs) {
  StartServer();
  const std::string task = CreateTask();
  const std::string run = StartRun(task);
  const fs::path log = dir_ / "log" / "run.log";
  {
    std::ofstream out(log);
    out << "line1\n";
  }
  StartAttempt(run, log.string());

  Reply chunk = Get("/api/v1/runs/" + run + "/log?offset=0&limit=3");
  ASSERT_EQ(chunk.status, 200) << chunk.raw;
  EXPECT_EQ(chunk.raw, "lin");
  EXPECT_EQ(chunk.Header("X-QL-Log-Next-Offset"), "3");
  EXPECT_EQ(chunk.Header("X-QL-Log-Eof"), "false");
  EXPECT_EQ(chunk.Header("X-QL-Attempt"), "1");
  Reply rest = Get("/api/v1/runs/" + run + "/log?offset=3");
  EXPECT_EQ(rest.raw, "e1\n");
  EXPECT_EQ(rest.Header("X-QL-Log-Eof"), "true");

  // Follow: bytes appended while the run goes on arrive, and the stream ends once the run is
  // finished and the file is drained.
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    {
      std::ofstream out(log, std::ios::app);
      out << "line2\n";
    }
    Advance(run, "running", "starting", "running");
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    {
      std::ofstream out(log, std::ios::app);
      out << "line3\n";
    }
    Advance(run, "succeeded", "running", "succeeded");
  });
  auto client = NewClient();
  std::string streamed;
  const auto start = std::chrono::steady_clock::now();
  auto result = client->Get(("/api/v1/runs/" + run + "/log?follow=true").c_str(),
                            [&](const char* data, size_t length) {
                              streamed.append(data, length);
                              return true;
                            });
  const auto elapsed = std::chrono::steady_clock::now() - start;
  writer.join();
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 200);
  EXPECT_EQ(streamed, "line1\nline2\nline3\n");
  EXPECT_LT(elapsed, std::chrono::seconds(10));

  // A follow of a finished run returns what is left and ends at once.
  Reply finished = Get("/api/v1/runs/" + run + "/log?follow=true&offset=12");
  EXPECT_EQ(finished.status, 200);
  EXPECT_EQ(finished.raw, "line3\n");
}

TEST_F(ApiServerTest, ALogReadServesExactlyTheAttemptAskedForAndTheLatestByDefault) {
  StartServer();
  json body = json::parse(ShellTaskBody("retried", "exit 1"));
  body["retry"] = {{"max_attempts", 2}};
  Reply task = Post("/api/v1/tasks", body.dump());
  ASSERT_EQ(task.status, 201) << task.raw;
  const std::string run = StartRun(task.body.value("id", ""));
  fs::create_directories(dir_ / "log" / "t" / run);
  const fs::path first = dir_ / "log" / "t" / run / "1.log";
  const fs::path second = dir_ / "log" / "t" / run / "2.log";
  std::ofstream(first) << "first attempt\nERROR one\n";
  std::ofstream(second) << "second\n";
  StartAttempt(run, first.string());
  Advance(run, "running", "starting", "running");
  // Attempt 1 fails; attempt 2 is created on the same run and starts with its own log.
  RunTransitionCommand failed;
  failed.run_id = run;
  failed.expected_version = store_->runs().GetRun(run).value().version;
  failed.run_to = "retry_wait";
  failed.retry_at_ms = clock_.NowMs();
  failed.attempt_id = store_->runs().ListAttempts(run).value().back().id;
  failed.expected_attempt_status = "running";
  failed.attempt_to = "failed";
  failed.now_ms = clock_.NowMs();
  ASSERT_TRUE(store_->runs().ApplyTransition(failed).ok());
  RunTransitionCommand retry;
  retry.run_id = run;
  retry.expected_version = store_->runs().GetRun(run).value().version;
  retry.run_to = "queued";
  retry.new_attempt_id = NewUuidV7(clock_.NowMs(), random_);
  retry.now_ms = clock_.NowMs();
  Result<RunRecord> retried = store_->runs().ApplyTransition(retry);
  ASSERT_TRUE(retried.ok()) << retried.status().ToString();
  StartAttempt(run, second.string());

  Reply one = Get("/api/v1/runs/" + run + "/log?attempt=1");
  ASSERT_EQ(one.status, 200) << one.raw;
  EXPECT_EQ(one.raw, "first attempt\nERROR one\n");
  EXPECT_EQ(one.Header("X-QL-Attempt"), "1");
  EXPECT_EQ(one.Header("X-QL-Log-Size"), "24");
  Reply two = Get("/api/v1/runs/" + run + "/log?attempt=2");
  EXPECT_EQ(two.raw, "second\n");
  EXPECT_EQ(two.Header("X-QL-Attempt"), "2");
  Reply latest = Get("/api/v1/runs/" + run + "/log");
  EXPECT_EQ(latest.raw, "second\n");
  EXPECT_EQ(latest.Header("X-QL-Attempt"), "2");
  EXPECT_EQ(latest.Header("X-QL-Log-Size"), "7");
}

TEST_F(ApiServerTest, LogPathOutsideTheLogRootIsRefused) {
  StartServer();
  const std::string run = StartRun(CreateTask());
  {
    std::ofstream out(dir_ / "secret");
    out << "secret";
  }
  StartAttempt(run, (dir_ / "secret").string());
  Reply reply = Get("/api/v1/runs/" + run + "/log");
  EXPECT_EQ(reply.status, 500);
  EXPECT_EQ(reply.code(), "log_path_invalid");
  EXPECT_THAT(reply.raw, ::testing::Not(HasSubstr("secret")));
}

TEST_F(ApiServerTest, FollowersAreBoundedAndEndOnWithdrawal) {
  ApiServerOptions options = DefaultOptions();
  options.max_log_followers = 1;
  StartServer(options);
  const std::string run = StartRun(CreateTask());
  std::thread follower([&] {
    auto client = NewClient();
    auto result = client->Get(("/api/v1/runs/" + run + "/log?follow=true").c_str());
    EXPECT_TRUE(result);
  });
  // Wait until the first stream holds the only follower slot.
  bool following = false;
  for (int i = 0; i < 250 && !following; ++i) {
    following = Get("/metrics").raw.find("ql_http_log_followers 1\n") != std::string::npos;
    if (!following) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(following);
  if (following) {
    Reply second = Get("/api/v1/runs/" + run + "/log?follow=true");
    EXPECT_EQ(second.status, 503);
    EXPECT_EQ(second.code(), "overloaded");
  }
  const auto start = std::chrono::steady_clock::now();
  server_->WithdrawAdmission();
  follower.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST_F(ApiServerTest, InFlightBoundAnswersOverloaded) {
  ApiServerOptions options = DefaultOptions();
  options.max_in_flight = 2;
  options.threads = 4;
  StartServer(options);
  // Connections that never send a request cost no worker and are not requests in flight.
  std::vector<int> idle;
  for (int i = 0; i < 3; ++i) {
    const int fd = ConnectLoopback(server_->port());
    ASSERT_GE(fd, 0);
    idle.push_back(fd);
  }
  EXPECT_EQ(Get("/api/v1/tasks").status, 200);
  // Admitted requests whose bodies are still on their way are in flight.
  const std::string head = std::string("POST /api/v1/tasks HTTP/1.1\r\nHost: x\r\n") +
                           "Authorization: Bearer " + kToken +
                           "\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{";
  for (int i = 0; i < 3; ++i) {
    const int fd = ConnectLoopback(server_->port());
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::send(fd, head.data(), head.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(head.size()));
    idle.push_back(fd);
  }
  Reply reply;
  for (int i = 0; i < 100; ++i) {
    reply = Get("/api/v1/tasks");
    if (reply.status == 503) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(reply.status, 503);
  EXPECT_EQ(reply.code(), "overloaded");
  EXPECT_EQ(reply.Header("Retry-After"), "1");
  for (int fd : idle) ::close(fd);
  Reply recovered;
  for (int i = 0; i < 200; ++i) {
    recovered = Get("/api/v1/tasks");
    if (recovered.status == 200) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(recovered.status, 200);
}

TEST_F(ApiServerTest, StartValidatesOptions) {
  ApiServerOptions no_authentication = DefaultOptions();
  no_authentication.authenticate = nullptr;
  ApiServer a(*service_, metrics_, no_authentication);
  EXPECT_EQ(a.Start("127.0.0.1", 0).reason(), "invalid_server_options");

  ApiServerOptions no_reader = DefaultOptions();
  no_reader.log_reader = nullptr;
  ApiServer b(*service_, metrics_, no_reader);
  EXPECT_EQ(b.Start("127.0.0.1", 0).reason(), "invalid_server_options");

  StartServer();
  ApiServer c(*service_, metrics_, DefaultOptions());
  Status taken = c.Start("127.0.0.1", server_->port());
  EXPECT_EQ(taken.code(), StatusCode::kUnavailable);
  EXPECT_EQ(taken.reason(), "listen_failed");
  EXPECT_EQ(server_->Start("127.0.0.1", 0).reason(), "already_started");
}

TEST_F(ApiServerTest, AnonymousBodiesAreRefusedFromTheHeadersAndNeverRead) {
  StartServer();
  const std::string before = Snapshot();
  // The body is itself a request: had the server kept the connection after refusing without
  // reading, it would answer it as the next request.
  const std::string smuggled = "GET /livez HTTP/1.1\r\nHost: x\r\n\r\n";
  Exchanged refused =
      Exchange(server_->port(),
               "POST /api/v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               "Content-Length: " +
                   std::to_string(smuggled.size()) + "\r\n\r\n" + smuggled);
  EXPECT_THAT(refused.answer, ::testing::StartsWith("HTTP/1.1 401"));
  EXPECT_THAT(refused.answer, HasSubstr("Connection: close"));
  EXPECT_EQ(CountOf(refused.answer, "HTTP/1.1 "), 1u) << refused.answer;
  EXPECT_TRUE(refused.closed);

  // A declared body that never comes: the answer does not wait for it.
  const auto start = std::chrono::steady_clock::now();
  Exchanged unsent = Exchange(server_->port(),
                              "POST /api/v1/tasks HTTP/1.1\r\nHost: x\r\n"
                              "Content-Length: 20971520\r\n\r\n",
                              5000);
  EXPECT_THAT(unsent.answer, ::testing::StartsWith("HTTP/1.1 401"));
  EXPECT_TRUE(unsent.closed);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));

  // Expect: 100-continue without a token: 401 instead of 100, and the connection ends.
  Exchanged asked = Exchange(server_->port(),
                             "POST /api/v1/tasks HTTP/1.1\r\nHost: x\r\n"
                             "Content-Type: application/json\r\nContent-Length: 100\r\n"
                             "Expect: 100-continue\r\n\r\n",
                             5000);
  EXPECT_THAT(asked.answer, ::testing::StartsWith("HTTP/1.1 401"));
  EXPECT_THAT(asked.answer, HasSubstr("unauthorized"));
  EXPECT_THAT(asked.answer, ::testing::Not(HasSubstr("100 Continue")));
  EXPECT_TRUE(asked.closed);

  // Expectations other than 100-continue get 417.
  Exchanged other =
      Exchange(server_->port(), std::string("POST /api/v1/tasks HTTP/1.1\r\nHost: x\r\n") +
                                    "Authorization: Bearer " + kToken +
                                    "\r\nContent-Length: 2\r\nExpect: "
                                    "sometime\r\n\r\n{}");
  EXPECT_THAT(other.answer, ::testing::StartsWith("HTTP/1.1 417"));
  EXPECT_THAT(other.answer, HasSubstr("expectation_failed"));
  EXPECT_EQ(Snapshot(), before);

  // With the token the client is invited to send its body, which is then served.
  const int fd = ConnectLoopback(server_->port());
  ASSERT_GE(fd, 0);
  const std::string body = ShellTaskBody("asked-first");
  const std::string head = std::string("POST /api/v1/tasks HTTP/1.1\r\nHost: x\r\n") +
                           "Authorization: Bearer " + kToken +
                           "\r\nContent-Type: application/json\r\nConnection: close\r\n"
                           "Content-Length: " +
                           std::to_string(body.size()) + "\r\nExpect: 100-continue\r\n\r\n";
  ASSERT_EQ(::send(fd, head.data(), head.size(), MSG_NOSIGNAL), static_cast<ssize_t>(head.size()));
  Exchanged invited = ReadAnswer(fd, 500);
  EXPECT_THAT(invited.answer, ::testing::StartsWith("HTTP/1.1 100 Continue"));
  ASSERT_EQ(::send(fd, body.data(), body.size(), MSG_NOSIGNAL), static_cast<ssize_t>(body.size()));
  Exchanged created = ReadAnswer(fd, 2000);
  ::close(fd);
  EXPECT_THAT(created.answer, ::testing::StartsWith("HTTP/1.1 201"));
}

TEST_F(ApiServerTest, OverlongRequestLinesAndHeaderSectionsEndTheConnection) {
  StartServer();
  const std::string auth = std::string("Authorization: Bearer ") + kToken + "\r\n";
  // Past the request-line limit but within the line limit: 414, then the connection ends.
  Exchanged long_uri =
      Exchange(server_->port(), "GET /" + std::string(5000, 'a') + " HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_THAT(long_uri.answer, ::testing::StartsWith("HTTP/1.1 414"));
  EXPECT_THAT(long_uri.answer, HasSubstr("uri_too_long"));
  EXPECT_TRUE(long_uri.closed);
  // Past the head limit: nothing more is read; 431 and the connection ends.
  Exchanged huge_uri = Exchange(
      server_->port(), "GET /" + std::string(8u << 20, 'a') + " HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_THAT(huge_uri.answer, ::testing::StartsWith("HTTP/1.1 431"));
  EXPECT_THAT(huge_uri.answer, HasSubstr("headers_too_large"));
  EXPECT_TRUE(huge_uri.closed);
  // One header line past the head limit.
  Exchanged long_header =
      Exchange(server_->port(), "GET /api/v1/status HTTP/1.1\r\nHost: x\r\n" + auth +
                                    "X-Long: " + std::string(17000, 'b') + "\r\n\r\n");
  EXPECT_THAT(long_header.answer, ::testing::StartsWith("HTTP/1.1 431"));
  EXPECT_TRUE(long_header.closed);
  // Header lines each within the limit, together past the header-section limit.
  std::string bulky = "GET /api/v1/status HTTP/1.1\r\nHost: x\r\n" + auth;
  for (int i = 0; i < 20; ++i) {
    bulky += "X-Bulk-" + std::to_string(i) + ": " + std::string(4000, 'c') + "\r\n";
  }
  Exchanged bulky_answer = Exchange(server_->port(), bulky + "\r\n");
  EXPECT_THAT(bulky_answer.answer, ::testing::StartsWith("HTTP/1.1 431"));
  EXPECT_TRUE(bulky_answer.closed);
  // More header lines than a request may carry.
  std::string many = "GET /api/v1/status HTTP/1.1\r\nHost: x\r\n" + auth;
  for (int i = 0; i < 200; ++i) many += "X-" + std::to_string(i) + ": 1\r\n";
  Exchanged many_answer = Exchange(server_->port(), many + "\r\n");
  EXPECT_THAT(many_answer.answer, ::testing::StartsWith("HTTP/1.1 431"));
  EXPECT_TRUE(many_answer.closed);
  // The same request within the limits is served.
  EXPECT_THAT(Exchange(server_->port(), "GET /api/v1/status HTTP/1.1\r\nHost: x\r\n" + auth +
                                            "Connection: close\r\n\r\n")
                  .answer,
              ::testing::StartsWith("HTTP/1.1 200"));
}

TEST_F(ApiServerTest, ConnectionsBeyondTheCapAreClosedUnread) {
  ApiServerOptions options = DefaultOptions();
  options.threads = 2;
  options.max_log_followers = 1;
  options.max_in_flight = 1;
  options.max_connections = 2;
  options.read_timeout_ms = 5000;
  StartServer(options);
  // Two connections that started a request and stall hold both connection slots.
  std::vector<int> stalled;
  for (int i = 0; i < 2; ++i) {
    const int fd = ConnectLoopback(server_->port());
    ASSERT_GE(fd, 0);
    const std::string partial = "GET /livez HTTP/1.1\r\n";
    ASSERT_EQ(::send(fd, partial.data(), partial.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(partial.size()));
    stalled.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto start = std::chrono::steady_clock::now();
  Exchanged third = Exchange(server_->port(), "GET /livez HTTP/1.1\r\nHost: x\r\n\r\n", 3000);
  EXPECT_EQ(third.answer, "");
  EXPECT_TRUE(third.closed);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  for (int fd : stalled) ::close(fd);
  Reply recovered;
  for (int i = 0; i < 100; ++i) {
    recovered = Get("/livez");
    if (recovered.status == 200) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(recovered.status, 200);

  ApiServerOptions too_few = DefaultOptions();
  too_few.max_connections = too_few.max_in_flight;
  ApiServer refused(*service_, metrics_, too_few);
  EXPECT_EQ(refused.Start("127.0.0.1", 0).reason(), "invalid_server_options");
}

// ---------------------------------------------------------------------------------------------
// TLS

class ApiServerTlsTest : public ApiServerTest {
 protected:
  void SetUp() override {
    ApiServerTest::SetUp();
    fs::create_directories(dir_ / "pki");
    Result<testing::TestPki> pki = testing::MakeTestPki((dir_ / "pki").string());
    ASSERT_TRUE(pki.ok()) << pki.status().ToString();
    pki_ = *pki;
  }

  ApiServerOptions TlsOptions(const std::string& client_ca = "") {
    ApiServerOptions options = DefaultOptions();
    options.tls = ListenerTls{pki_.server_cert, pki_.server_key, client_ca};
    return options;
  }

  // An https client of the server that verifies it with `ca`.
  std::unique_ptr<httplib::Client> TlsClient(const std::string& ca, const std::string& cert = "",
                                             const std::string& key = "") {
    auto client = std::make_unique<httplib::Client>(
        "https://127.0.0.1:" + std::to_string(server_->port()), cert, key);
    client->enable_server_certificate_verification(true);
    client->set_ca_cert_path(ca.c_str());
    client->set_connection_timeout(5, 0);
    client->set_read_timeout(5, 0);
    client->set_default_headers({{"Authorization", std::string("Bearer ") + kToken}});
    return client;
  }

  testing::TestPki pki_;
};

TEST_F(ApiServerTlsTest, ServesHttpsToAClientThatTrustsItsCa) {
  StartServer(TlsOptions());
  httplib::Result result = TlsClient(pki_.ca_cert)->Get("/api/v1/status");
  ASSERT_TRUE(result) << httplib::to_string(result.error());
  EXPECT_EQ(result->status, 200) << result->body;
}

TEST_F(ApiServerTlsTest, AClientWithAnotherCaRefusesTheServer) {
  StartServer(TlsOptions());
  httplib::Result result = TlsClient(pki_.other_ca_cert)->Get("/api/v1/status");
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error(), httplib::Error::SSLServerVerification);
}

TEST_F(ApiServerTlsTest, HostNamesAreCheckedAgainstSubjectAltNamesOnly) {
  auto client_for = [&](const std::string& host) {
    auto client = std::make_unique<httplib::Client>(
        "https://" + host + ":" + std::to_string(server_->port()));
    client->enable_server_certificate_verification(true);
    client->set_ca_cert_path(pki_.ca_cert.c_str());
    client->set_connection_timeout(5, 0);
    client->set_read_timeout(5, 0);
    return client;
  };
  // The CA signed both; only the one naming localhost in its SANs is accepted for localhost.
  StartServer(TlsOptions());
  httplib::Result named = client_for("localhost")->Get("/livez");
  ASSERT_TRUE(named) << httplib::to_string(named.error());
  EXPECT_EQ(named->status, 200);
  server_.reset();
  ApiServerOptions cn_only = DefaultOptions();
  cn_only.tls = ListenerTls{pki_.cn_only_cert, pki_.cn_only_key, ""};
  StartServer(cn_only);
  httplib::Result common_name = client_for("localhost")->Get("/livez");
  ASSERT_FALSE(common_name);
  EXPECT_EQ(common_name.error(), httplib::Error::SSLServerVerification);
}

TEST_F(ApiServerTlsTest, PlainHttpOnTheTlsPortGetsNoAnswer) {
  StartServer(TlsOptions());
  Reply reply = ToReply(NewClient()->Get("/api/v1/status"));
  EXPECT_EQ(reply.status, -1) << reply.raw;
}

TEST_F(ApiServerTlsTest, AClientCaRequiresAClientCertificateItSigned) {
  StartServer(TlsOptions(pki_.ca_cert));
  httplib::Result without = TlsClient(pki_.ca_cert)->Get("/api/v1/status");
  EXPECT_FALSE(without);
  httplib::Result with =
      TlsClient(pki_.ca_cert, pki_.client_cert, pki_.client_key)->Get("/api/v1/status");
  ASSERT_TRUE(with) << httplib::to_string(with.error());
  EXPECT_EQ(with->status, 200) << with->body;
}

TEST_F(ApiServerTlsTest, UnusableTlsFilesFailTheStartWithTheirCode) {
  ApiServerOptions missing = DefaultOptions();
  missing.tls = ListenerTls{(dir_ / "pki" / "absent.pem").string(), pki_.server_key, ""};
  ApiServer a(*service_, metrics_, missing);
  Status st = a.Start("127.0.0.1", 0);
  EXPECT_EQ(st.reason(), "tls_file_unreadable") << st.ToString();
  EXPECT_THAT(st.message(), HasSubstr("absent.pem"));

  ApiServerOptions mismatched = DefaultOptions();
  mismatched.tls = ListenerTls{pki_.server_cert, pki_.client_key, ""};
  ApiServer b(*service_, metrics_, mismatched);
  EXPECT_EQ(b.Start("127.0.0.1", 0).reason(), "tls_invalid");
}

// A panel of three files, as ql_panel embeds them.
constexpr PanelFile kPanelFiles[] = {
    {"/", "text/html; charset=utf-8", "<!doctype html><title>panel</title>", false},
    {"/ui/0123456789abcdef/app.js", "text/javascript; charset=utf-8", "export const x = 1;\n",
     true},
    {"/ui/0123456789abcdef/panel.css", "text/css; charset=utf-8", "body{}", true},
};

TEST_F(ApiServerTest, ServesThePanelWithoutATokenUnderStrictHeaders) {
  const PanelAssets panel(kPanelFiles);
  ApiServerOptions options = DefaultOptions();
  options.panel = &panel;
  StartServer(std::move(options));
  auto client = NewClient(/*auth=*/false);

  Reply page = ToReply(client->Get("/"));
  EXPECT_EQ(page.status, 200);
  EXPECT_EQ(page.raw, "<!doctype html><title>panel</title>");
  EXPECT_EQ(page.Header("Content-Type"), "text/html; charset=utf-8");
  EXPECT_EQ(page.Header("Content-Security-Policy"), kPanelContentSecurityPolicy);
  EXPECT_THAT(page.Header("Content-Security-Policy"), Not(HasSubstr("unsafe-inline")));
  EXPECT_EQ(page.Header("X-Content-Type-Options"), "nosniff");
  EXPECT_EQ(page.Header("Cache-Control"), "no-cache");
  EXPECT_EQ(page.headers.count("Cache-Control"), 1u);
  EXPECT_EQ(page.Header("Referrer-Policy"), "no-referrer");
  EXPECT_EQ(page.Header("X-Frame-Options"), "DENY");

  Reply script = ToReply(client->Get("/ui/0123456789abcdef/app.js"));
  EXPECT_EQ(script.status, 200);
  EXPECT_EQ(script.raw, "export const x = 1;\n");
  EXPECT_EQ(script.Header("Content-Type"), "text/javascript; charset=utf-8");
  EXPECT_EQ(script.Header("Cache-Control"), "public, max-age=31536000, immutable");
  EXPECT_EQ(script.headers.count("Cache-Control"), 1u);

  Reply head = ToReply(client->Head("/ui/0123456789abcdef/panel.css"));
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.raw, "");
  EXPECT_EQ(head.Header("Content-Type"), "text/css; charset=utf-8");

  // Only exact paths: another bundle hash, a directory or a query-less variant is not a file.
  for (const char* path : {"/ui/ffffffffffffffff/app.js", "/ui/0123456789abcdef/",
                           "/ui/0123456789abcdef", "/index.html", "/ui/../"}) {
    Reply missing = ToReply(client->Get(path));
    EXPECT_EQ(missing.status, 404) << path;
    EXPECT_EQ(missing.code(), "route_not_found") << path;
    EXPECT_EQ(missing.Header("Cache-Control"), "no-store") << path;
  }
  Reply posted = ToReply(client->Post("/", "{}", "application/json"));
  EXPECT_EQ(posted.status, 405);
  EXPECT_EQ(posted.code(), "method_not_allowed");
  EXPECT_EQ(posted.Header("Allow"), "GET, HEAD");

  // The API keeps its own rules beside the panel.
  Reply api = ToReply(client->Get("/api/v1/tasks"));
  EXPECT_EQ(api.status, 401);
  Reply unknown = Get("/api/v1/no-such-route");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(unknown.code(), "route_not_found");

  Reply metrics = ToReply(client->Get("/metrics"));
  EXPECT_THAT(metrics.raw, HasSubstr("ql_http_requests_total{route=\"panel\",code=\"200\"} 3"));
}

TEST_F(ApiServerTest, WithoutAPanelTheRootIsNotARoute) {
  const PanelAssets empty(std::span<const PanelFile>{});
  ApiServerOptions options = DefaultOptions();
  options.panel = &empty;
  StartServer(std::move(options));
  Reply root = ToReply(NewClient(false)->Get("/"));
  EXPECT_EQ(root.status, 404);
  EXPECT_EQ(root.code(), "route_not_found");
  EXPECT_EQ(root.Header("Content-Security-Policy"), "");
}

// API answers, successes and errors alike (httplib's own included), are never cached and
// never sniffed.
TEST_F(ApiServerTest, ApiAnswersAreNoStoreAndNoSniff) {
  StartServer();
  std::vector<Reply> replies = {Get("/api/v1/status"),
                                Get("/api/v1/tasks/not-an-id"),
                                ToReply(NewClient(false)->Get("/api/v1/status")),
                                Get("/api/v1/nope"),
                                ToReply(NewClient(false)->Get("/readyz")),
                                ToReply(NewClient(false)->Get("/metrics"))};
  for (const Reply& reply : replies) {
    EXPECT_EQ(reply.Header("Cache-Control"), "no-store") << reply.status << " " << reply.raw;
    EXPECT_EQ(reply.headers.count("Cache-Control"), 1u);
    EXPECT_EQ(reply.Header("X-Content-Type-Options"), "nosniff") << reply.status;
  }
  EXPECT_EQ(replies[0].status, 200);
  EXPECT_EQ(replies[1].status, 404);
  EXPECT_EQ(replies[2].status, 401);
  const std::string malformed = RawExchange(server_->port(), "GARBAGE\r\n\r\n");
  EXPECT_THAT(malformed, HasSubstr("Cache-Control: no-store"));
  EXPECT_THAT(malformed, HasSubstr("X-Content-Type-Options: nosniff"));
}

}  // namespace
}  // namespace ql

namespace ql {
namespace {

// A follower whose token is revoked is cut off within the authentication cache's bound, even
// though the run goes on.
TEST_F(ApiServerTest, AFollowEndsOnceItsTokenIsRevoked) {
  StartServer();
  const std::string task = CreateTask();
  const std::string run = StartRun(task);
  const fs::path log = dir_ / "log" / "revoked.log";
  std::ofstream(log) << "before\n";
  StartAttempt(run, log.string());
  Advance(run, "running", "starting", "running");
  const std::string follower_token = "follower-token-0123456789";
  CreateTokenCommand mint;
  mint.id = NewUuidV7(clock_.NowMs(), random_);
  mint.principal_id = owner_.id;
  mint.token_digest = Sha256Hex(follower_token);
  mint.now_ms = clock_.NowMs();
  ASSERT_TRUE(store_->governance().CreateToken(mint).ok());

  std::atomic<bool> revoked{false};
  std::thread revoker([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ASSERT_TRUE(store_->governance().RevokeToken(Actor{}, mint.id, clock_.NowMs()).ok());
    clock_.Advance(2500);  // past the authentication cache's bound
    revoked = true;
  });
  httplib::Client client("127.0.0.1", server_->port());
  client.set_read_timeout(15, 0);
  client.set_default_headers({{"Authorization", "Bearer " + follower_token}});
  std::string streamed;
  const auto start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point ended;
  auto result = client.Get(("/api/v1/runs/" + run + "/log?follow=true").c_str(),
                           [&](const char* data, size_t length) {
                             streamed.append(data, length);
                             return true;
                           });
  ended = std::chrono::steady_clock::now();
  revoker.join();
  ASSERT_TRUE(result);
  EXPECT_TRUE(revoked.load()) << "the stream ended before the revocation: " << streamed;
  EXPECT_EQ(streamed, "before\n");
  // The run is still running: only the revocation ended the stream, well before max_follow_ms.
  EXPECT_EQ(store_->runs().GetRun(run).value().status, "running");
  EXPECT_LT(ended - start, std::chrono::seconds(5)) << "max_follow_ms is 20 s";
}


// ---------------------------------------------------------------------------------------------
// Hostile clients: what a client that sends slowly, oddly or too much gets, and what it cannot
// take from the others.

// Connects to 127.0.0.1:`port` from the loopback address `source` (127.0.0.x); -1 on failure.
int ConnectFrom(const char* source, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in local{};
  local.sin_family = AF_INET;
  ::inet_pton(AF_INET, source, &local.sin_addr);
  sockaddr_in remote{};
  remote.sin_family = AF_INET;
  remote.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &remote.sin_addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&remote), sizeof remote) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Milliseconds a fresh GET of `path` takes to answer `status`, or -1 for another answer.
int64_t TimedGet(int port, const std::string& path, const std::string& extra = "") {
  const auto start = std::chrono::steady_clock::now();
  const Exchanged answer = Exchange(
      port, "GET " + path + " HTTP/1.1\r\nHost: x\r\n" + extra + "Connection: close\r\n\r\n", 5000);
  if (answer.answer.rfind("HTTP/1.1 200", 0) != 0) return -1;
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               start)
      .count();
}

TEST_F(ApiServerTest, SlowClientsDoNotDelayLivezOrTheApi) {
  ApiServerOptions options = DefaultOptions();
  options.threads = 2;  // far fewer workers than slow clients
  options.max_log_followers = 1;
  StartServer(options);
  const std::string auth = std::string("Authorization: Bearer ") + kToken + "\r\n";
  std::vector<int> slow;
  // Heads that never end, and admitted bodies that never come.
  for (int i = 0; i < 64; ++i) {
    const int fd = ConnectLoopback(server_->port());
    ASSERT_GE(fd, 0);
    const std::string partial = "GET /api/v1/tasks HTTP/1.1\r\nHost: x\r\nX-Slow: ";
    ASSERT_EQ(::send(fd, partial.data(), partial.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(partial.size()));
    slow.push_back(fd);
  }
  for (int i = 0; i < 16; ++i) {
    const int fd = ConnectLoopback(server_->port());
    ASSERT_GE(fd, 0);
    const std::string head = "POST /api/v1/tasks HTTP/1.1\r\nHost: x\r\n" + auth +
                             "Content-Type: application/json\r\nContent-Length: 5000\r\n\r\n{";
    ASSERT_EQ(::send(fd, head.data(), head.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(head.size()));
    slow.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  // Every slow client keeps trickling while the others are served.
  std::atomic<bool> done{false};
  std::thread trickle([&] {
    while (!done.load()) {
      for (int fd : slow) (void)::send(fd, "a", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  std::vector<int64_t> livez;
  std::vector<int64_t> tasks;
  for (int i = 0; i < 20; ++i) {
    livez.push_back(TimedGet(server_->port(), "/livez"));
    tasks.push_back(TimedGet(server_->port(), "/api/v1/tasks", auth));
  }
  done = true;
  trickle.join();
  for (int fd : slow) ::close(fd);
  for (size_t i = 0; i < livez.size(); ++i) {
    EXPECT_GE(livez[i], 0) << "request " << i;
    EXPECT_LT(livez[i], 500) << "request " << i;
    EXPECT_GE(tasks[i], 0) << "request " << i;
    EXPECT_LT(tasks[i], 1000) << "request " << i;
  }
}

TEST_F(ApiServerTest, AHeadOrBodyThatTricklesIsCutOffAtItsDeadline) {
  ApiServerOptions options = DefaultOptions();
  options.read_timeout_ms = 1000;
  options.min_body_bytes_per_second = 1000;
  StartServer(options);
  const std::string before = Snapshot();
  // A head that never ends, one byte per 100 ms: each byte arrives in time, the head does not.
  {
    const int fd = ConnectLoopback(server_->port());
    ASSERT_GE(fd, 0);
    const auto start = std::chrono::steady_clock::now();
    const std::string line = "GET /livez HTTP/1.1\r\nX-Slow: ";
    ASSERT_GT(::send(fd, line.data(), line.size(), MSG_NOSIGNAL), 0);
    bool closed = false;
    while (!closed && std::chrono::steady_clock::now() - start < std::chrono::seconds(6)) {
      closed = ::send(fd, "b", 1, MSG_NOSIGNAL) < 0;
      char byte;
      if (!closed && ::recv(fd, &byte, 1, MSG_DONTWAIT) == 0) closed = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ::close(fd);
    EXPECT_TRUE(closed);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  }
  // An admitted body at 50 bytes/s: cut off once it falls behind 1000 bytes/s after the grace.
  {
    const int fd = ConnectLoopback(server_->port());
    ASSERT_GE(fd, 0);
    const auto start = std::chrono::steady_clock::now();
    const std::string head = std::string("POST /api/v1/tasks HTTP/1.1\r\nHost: x\r\n") +
                             "Authorization: Bearer " + kToken +
                             "\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n";
    ASSERT_GT(::send(fd, head.data(), head.size(), MSG_NOSIGNAL), 0);
    bool closed = false;
    while (!closed && std::chrono::steady_clock::now() - start < std::chrono::seconds(8)) {
      closed = ::send(fd, "          ", 10, MSG_NOSIGNAL) < 0;
      char byte;
      if (!closed && ::recv(fd, &byte, 1, MSG_DONTWAIT) == 0) closed = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    ::close(fd);
    EXPECT_TRUE(closed);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(4));
  }
  EXPECT_EQ(Snapshot(), before);
}

TEST_F(ApiServerTest, AnIdleKeepAliveConnectionIsClosed) {
  ApiServerOptions options = DefaultOptions();
  options.idle_timeout_ms = 300;
  StartServer(options);
  const int fd = ConnectLoopback(server_->port());
  ASSERT_GE(fd, 0);
  const std::string request = "GET /livez HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_GT(::send(fd, request.data(), request.size(), MSG_NOSIGNAL), 0);
  const auto start = std::chrono::steady_clock::now();
  const Exchanged answer = ReadAnswer(fd, 3000);
  ::close(fd);
  EXPECT_THAT(answer.answer, ::testing::StartsWith("HTTP/1.1 200"));
  EXPECT_TRUE(answer.closed);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(2000));
}

TEST_F(ApiServerTest, AmbiguousOrUnboundedBodiesAreRefused) {
  StartServer();
  const std::string before = Snapshot();
  const std::string auth = std::string("Authorization: Bearer ") + kToken + "\r\n";
  // Content-Length together with Transfer-Encoding: which one frames the body is exactly what
  // a smuggling proxy and the server would disagree on.
  for (const std::string& framing :
       {std::string("Content-Length: 4\r\nTransfer-Encoding: chunked\r\n"),
        std::string("Transfer-Encoding: chunked\r\nContent-Length: 4\r\n"),
        std::string("Transfer-Encoding: gzip\r\n"),
        std::string("Transfer-Encoding: gzip, chunked\r\n"),
        std::string("Content-Length: 4\r\nContent-Length: 5\r\n")}) {
    const Exchanged answer =
        Exchange(server_->port(), "POST /api/v1/tasks HTTP/1.1\r\nHost: x\r\n" + auth +
                                      "Content-Type: application/json\r\n" + framing +
                                      "\r\n0\r\n\r\nGET /livez HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_THAT(answer.answer, ::testing::StartsWith("HTTP/1.1 400")) << framing;
    EXPECT_THAT(answer.answer, HasSubstr("bad_request")) << framing;
    EXPECT_EQ(CountOf(answer.answer, "HTTP/1.1 "), 1u) << framing << answer.answer;
    EXPECT_TRUE(answer.closed) << framing;
  }
  // A chunked body is bounded on every method, DELETE included.
  std::string chunked = "DELETE /api/v1/tasks/nope HTTP/1.1\r\nHost: x\r\n" + auth +
                        "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
  const std::string piece(64 * 1024, ' ');
  for (int i = 0; i < 40; ++i) chunked += "10000\r\n" + piece + "\r\n";
  chunked += "0\r\n\r\n";
  const Exchanged bounded = Exchange(server_->port(), chunked, 5000);
  EXPECT_THAT(bounded.answer, ::testing::StartsWith("HTTP/1.1 413"));
  EXPECT_THAT(bounded.answer, HasSubstr("body_too_large"));
  EXPECT_TRUE(bounded.closed);
  EXPECT_EQ(Snapshot(), before);
}

TEST_F(ApiServerTest, PipelinedRequestsAreAnsweredInOrder) {
  StartServer();
  const std::string auth = std::string("Authorization: Bearer ") + kToken + "\r\n";
  const Exchanged answer = Exchange(
      server_->port(), "GET /livez HTTP/1.1\r\nHost: x\r\n\r\n"
                       "GET /api/v1/tasks/nope HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n"
                       "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  const size_t first = answer.answer.find("HTTP/1.1 200");
  const size_t second = answer.answer.find("HTTP/1.1 404");
  const size_t third = answer.answer.find("HTTP/1.1 200", first + 1);
  ASSERT_NE(first, std::string::npos) << answer.answer;
  ASSERT_NE(second, std::string::npos) << answer.answer;
  ASSERT_NE(third, std::string::npos) << answer.answer;
  EXPECT_LT(first, second);
  EXPECT_LT(second, third);
  EXPECT_THAT(answer.answer, HasSubstr("\"status\":\"ready\""));
  EXPECT_TRUE(answer.closed);
}

TEST_F(ApiServerTest, OnePeerCannotTakeEveryConnection) {
  ApiServerOptions options = DefaultOptions();
  options.max_connections_per_address = 2;
  StartServer(options);
  std::vector<int> held;
  for (int i = 0; i < 2; ++i) {
    const int fd = ConnectFrom("127.0.0.1", server_->port());
    ASSERT_GE(fd, 0);
    held.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // A third from the same address is closed unread; another address is served.
  const int third = ConnectFrom("127.0.0.1", server_->port());
  ASSERT_GE(third, 0);
  const std::string request = "GET /livez HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  (void)::send(third, request.data(), request.size(), MSG_NOSIGNAL);
  const Exchanged refused = ReadAnswer(third, 2000);
  ::close(third);
  EXPECT_EQ(refused.answer, "");
  EXPECT_TRUE(refused.closed);
  const int other = ConnectFrom("127.0.0.2", server_->port());
  ASSERT_GE(other, 0);
  ASSERT_GT(::send(other, request.data(), request.size(), MSG_NOSIGNAL), 0);
  const Exchanged served = ReadAnswer(other, 2000);
  ::close(other);
  EXPECT_THAT(served.answer, ::testing::StartsWith("HTTP/1.1 200"));
  for (int fd : held) ::close(fd);
}

TEST_F(ApiServerTest, ManyRangesAnswerTheWholeResourceOnce) {
  const std::string big(22 * 1024, 'p');
  const PanelFile files[] = {{"/", "text/html; charset=utf-8", big, false}};
  const PanelAssets panel(files);
  ApiServerOptions options = DefaultOptions();
  options.panel = &panel;
  StartServer(options);
  std::string ranges = "bytes=0-";
  for (int i = 0; i < 2700; ++i) ranges += ",0-" + std::to_string(i % 1000);
  const Exchanged answer =
      Exchange(server_->port(), "GET / HTTP/1.1\r\nHost: x\r\nRange: " + ranges +
                                    "\r\nConnection: close\r\n\r\n", 3000);
  EXPECT_THAT(answer.answer, ::testing::StartsWith("HTTP/1.1 200"));
  EXPECT_THAT(answer.answer, Not(HasSubstr("multipart/byteranges")));
  EXPECT_LE(answer.answer.size(), big.size() + 1024);
  EXPECT_THAT(answer.answer, HasSubstr(big));
}

TEST_F(ApiServerTest, PathVariantsNeverReachARoute) {
  StartServer();
  const std::string auth = std::string("Authorization: Bearer ") + kToken + "\r\n";
  ASSERT_EQ(TimedGet(server_->port(), "/api/v1/tasks", auth) >= 0, true);
  for (const char* variant_text :
       {"/api/v1/tasks/", "/api/v1//tasks", "//api/v1/tasks", "/api/v1/./tasks",
        "/api/v1/x/../tasks", "/API/v1/tasks", "/api/V1/tasks", "/api/v1/Tasks",
        "/api/v1/tasks%2F", "/api/v1/%74asks", "/api%2Fv1/tasks", "/api/v1/tasks;x",
        "/api/v1/tasks/%2e%2e", "/api/v1/tasks/%2E", "/api/v1/tasks/a%2Fb", "/api/v1/tasks/%zz",
        "/api/v1/principals/%2e%2e/tokens", "/livez/", "/LIVEZ", "/%6civez"}) {
    const std::string variant = variant_text;
    for (const std::string& who : {auth, std::string()}) {
      const Exchanged answer = Exchange(
          server_->port(), "GET " + variant + " HTTP/1.1\r\nHost: x\r\n" + who +
                               "Connection: close\r\n\r\n");
      const bool api = variant.rfind("/api/v1/", 0) == 0;
      if (api && who.empty()) {
        EXPECT_THAT(answer.answer, ::testing::StartsWith("HTTP/1.1 401")) << variant;
      } else {
        EXPECT_THAT(answer.answer, ::testing::StartsWith("HTTP/1.1 404")) << variant;
        EXPECT_THAT(answer.answer, HasSubstr("route_not_found")) << variant;
      }
    }
  }
}

}  // namespace
}  // namespace ql
