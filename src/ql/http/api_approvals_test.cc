// The approval routes over real sockets against a real SQLite store (DESIGN §9.1, docs/api.md):
// the 202 of a guarded run request and its replay, listing and showing requests, approval with
// its receipt and run, refusals (self-approval, missing reason, unknown ids, decided requests)
// and the resolution of runs. Every refusal is checked to have changed nothing. Also: who
// changed a task or trigger (revision history and audit facts).

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ql/core/digest.h"
#include "ql/engine/control_service.h"
#include "ql/engine/log_reader.h"
#include "ql/engine/metrics.h"
#include "ql/http/api_server.h"
#include "ql/http/httplib_config.h"
#include "ql/storage/sqlite/sqlite_store.h"
#include "ql/testing/fake_clock.h"
#include "ql/testing/run_steps.h"
#include "ql/testing/test_principals.h"

namespace ql {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Answer {
  int status = 0;
  json body;
  std::string raw;
  bool replayed = false;
  std::string code() const { return body.is_object() ? body.value("code", "") : ""; }
};

class ApiApprovalsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "ql-approvals-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    fs::create_directories(dir_ / "log");
    SqliteOptions sqlite;
    sqlite.path = (dir_ / "ql.db").string();
    auto store = SqliteStore::Open(sqlite, clock_);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
    service_ = std::make_unique<ControlService>(*store_, clock_, random_, ControlOptions{});
    auto project = service_->EnsureDefaultProject();
    ASSERT_TRUE(project.ok()) << project.status().ToString();
    testing::TestPrincipals people(store_->governance(), clock_, random_);
    ASSERT_TRUE(people.Bootstrap().ok());
    // Each principal's bearer token is its name; the server sees only the digest.
    for (const auto& [name, role] :
         {std::pair{"ops", Role::kOperator}, std::pair{"amy", Role::kAdmin},
          std::pair{"vic", Role::kViewer}}) {
      auto added = people.Add(name, role, project->id);
      ASSERT_TRUE(added.ok()) << added.status().ToString();
      principals_[Sha256Hex(name)] = *added;
    }
    principals_[Sha256Hex("root")] = people.root();
    log_reader_ = std::make_unique<LogReader>((dir_ / "log").string());
    ApiServerOptions options;
    options.authenticate = [this](const std::string& digest) -> Result<Authentication> {
      auto it = principals_.find(digest);
      if (it == principals_.end()) return PermissionDenied("unauthorized", "unknown token");
      return Authentication{it->second, TokenRecord{"token-" + it->second.id, it->second.id}};
    };
    options.log_reader = log_reader_.get();
    server_ = std::make_unique<ApiServer>(*service_, metrics_, options);
    ASSERT_TRUE(server_->Start("127.0.0.1", 0).ok());
    server_->SetReady(true);

    json task{{"name", "deploy"},
              {"spec", {{"command", {{"kind", "shell"}, {"command", "true"}}}}},
              {"approval", {{"required", true}}}};
    Answer published = Call("root", "POST", "/api/v1/tasks", task.dump());
    ASSERT_EQ(published.status, 201) << published.raw;
    task_id_ = published.body["id"];
  }

  void TearDown() override {
    server_.reset();
    service_.reset();
    store_.reset();
    fs::remove_all(dir_);
  }

  Answer Call(const std::string& who, const std::string& method, const std::string& path,
              const std::string& body = "{}") {
    httplib::Client client("127.0.0.1", server_->port());
    client.set_read_timeout(15, 0);
    client.set_default_headers({{"Authorization", "Bearer " + who}});
    httplib::Result result = method == "GET" ? client.Get(path.c_str())
                             : method == "DELETE"
                                 ? client.Delete(path.c_str())
                                 : client.Post(path.c_str(), body, "application/json");
    Answer answer;
    if (!result) return answer;
    answer.status = result->status;
    answer.raw = result->body;
    answer.body = json::parse(result->body, nullptr, false);
    answer.replayed = result->get_header_value("X-QL-Replayed") == "true";
    return answer;
  }

  // Requests a run of the guarded task as ops; returns the request's id.
  std::string Request(const std::string& key = "") {
    json body = json::object();
    if (!key.empty()) body["idempotency_key"] = key;
    Answer requested = Call("ops", "POST", "/api/v1/tasks/" + task_id_ + "/runs", body.dump());
    EXPECT_EQ(requested.status, 202) << requested.raw;
    return requested.body.value("approval_id", "");
  }

  // What a refusal must leave alone: the request as stored (status, decision, receipt) and the
  // number of runs.
  std::string Snapshot(const std::string& approval_id) {
    Answer shown = Call("root", "GET", "/api/v1/approvals/" + approval_id);
    Answer runs = Call("root", "GET", "/api/v1/runs");
    return shown.raw + "\n" + std::to_string(runs.body["items"].size());
  }

  fs::path dir_;
  testing::FakeClock clock_{1'780'000'000'000};
  testing::SeededRandom random_{23};
  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<ControlService> service_;
  std::unique_ptr<LogReader> log_reader_;
  Metrics metrics_;
  std::unique_ptr<ApiServer> server_;
  std::map<std::string, PrincipalRecord> principals_;  // by token digest
  std::string task_id_;
};

TEST_F(ApiApprovalsTest, ARunOfAGuardedTaskIsARequestAnsweredWith202AndReplayedByItsKey) {
  Answer first =
      Call("ops", "POST", "/api/v1/tasks/" + task_id_ + "/runs", R"({"idempotency_key":"d-1"})");
  ASSERT_EQ(first.status, 202) << first.raw;
  EXPECT_EQ(first.code(), "approval_required");
  EXPECT_FALSE(first.replayed);
  const std::string id = first.body["approval_id"];
  EXPECT_EQ(first.body["approval"]["id"], id);
  EXPECT_EQ(first.body["approval"]["status"], "pending");
  EXPECT_EQ(first.body["approval"]["task_id"], task_id_);
  EXPECT_EQ(first.body["approval"]["requester_id"], principals_[Sha256Hex("ops")].id);
  EXPECT_EQ(first.body["approval"]["approver_role"], "admin");
  EXPECT_NE(first.body["message"].get<std::string>().find(id), std::string::npos) << first.raw;

  Answer again =
      Call("ops", "POST", "/api/v1/tasks/" + task_id_ + "/runs", R"({"idempotency_key":"d-1"})");
  ASSERT_EQ(again.status, 202) << again.raw;
  EXPECT_TRUE(again.replayed);
  EXPECT_EQ(again.body["approval_id"], id);
  EXPECT_EQ(again.body["approval"], first.body["approval"]);
  // The generic route answers alike; no run exists before the approval.
  Answer generic = Call("ops", "POST", "/api/v1/runs",
                        json{{"task_id", task_id_}, {"idempotency_key", "d-1"}}.dump());
  ASSERT_EQ(generic.status, 202) << generic.raw;
  EXPECT_EQ(generic.body["approval_id"], id);
  EXPECT_EQ(Call("root", "GET", "/api/v1/runs").body["items"].size(), 0u);

  Answer pending = Call("vic", "GET", "/api/v1/approvals?status=pending");
  ASSERT_EQ(pending.status, 200) << pending.raw;
  ASSERT_EQ(pending.body["items"].size(), 1u) << pending.raw;
  EXPECT_EQ(pending.body["items"][0]["id"], id);
  EXPECT_EQ(Call("vic", "GET", "/api/v1/approvals?status=approved").body["items"].size(), 0u);
  Answer bad_filter = Call("vic", "GET", "/api/v1/approvals?status=maybe");
  EXPECT_EQ(bad_filter.status, 400) << bad_filter.raw;
  EXPECT_EQ(bad_filter.code(), "invalid_status");

  Answer shown = Call("vic", "GET", "/api/v1/approvals/" + id);
  ASSERT_EQ(shown.status, 200) << shown.raw;
  EXPECT_EQ(shown.body["status"], "pending");
  EXPECT_EQ(shown.body["idempotency_key"], "d-1");
  EXPECT_TRUE(shown.body["decision"].is_null());
  EXPECT_TRUE(shown.body["action"].is_null());
  EXPECT_TRUE(shown.body["receipt"].is_null());
}

TEST_F(ApiApprovalsTest, TheRequesterIsRefusedAndAnAdminsApprovalReturnsOneReceiptAndOneRun) {
  const std::string id = Request();
  const std::string before = Snapshot(id);
  Answer self = Call("ops", "POST", "/api/v1/approvals/" + id + "/approve");
  EXPECT_EQ(self.status, 403) << self.raw;
  EXPECT_EQ(self.code(), "approval_self");
  EXPECT_EQ(Snapshot(id), before);

  Answer approved = Call("amy", "POST", "/api/v1/approvals/" + id + "/approve");
  ASSERT_EQ(approved.status, 201) << approved.raw;
  EXPECT_FALSE(approved.replayed);
  EXPECT_EQ(approved.body["status"], "approved");
  EXPECT_EQ(approved.body["decision"]["decision"], "approved");
  EXPECT_EQ(approved.body["decision"]["decided_by"], principals_[Sha256Hex("amy")].id);
  const json receipt = approved.body["receipt"];
  ASSERT_TRUE(receipt.is_object()) << approved.raw;
  const std::string run_id = approved.body["run"]["id"];
  EXPECT_EQ(receipt["request_id"], id);
  EXPECT_EQ(receipt["run_id"], run_id);
  EXPECT_EQ(receipt["decision_id"], approved.body["decision"]["id"]);
  EXPECT_EQ(receipt["action_id"], approved.body["action"]["id"]);
  EXPECT_EQ(approved.body["action"]["status"], "consumed");
  EXPECT_EQ(approved.body["run"]["status"], "queued");
  EXPECT_EQ(approved.body["run"]["trigger_type"], "approved");
  Answer run = Call("vic", "GET", "/api/v1/runs/" + run_id);
  ASSERT_EQ(run.body["attempts"].size(), 1u) << run.raw;
  EXPECT_EQ(run.body["attempts"][0]["status"], "claimed");

  // Approving again, by the same admin or another, returns the same receipt and run.
  for (const std::string who : {"amy", "root"}) {
    SCOPED_TRACE(who);
    Answer again = Call(who, "POST", "/api/v1/approvals/" + id + "/approve");
    ASSERT_EQ(again.status, 200) << again.raw;
    EXPECT_TRUE(again.replayed);
    EXPECT_EQ(again.body["receipt"], receipt);
    EXPECT_EQ(again.body["run"]["id"], run_id);
  }
  Answer runs = Call("root", "GET", "/api/v1/runs");
  ASSERT_EQ(runs.body["items"].size(), 1u) << runs.raw;
  EXPECT_EQ(runs.body["items"][0]["id"], run_id);
  Answer shown = Call("vic", "GET", "/api/v1/approvals/" + id);
  EXPECT_EQ(shown.body["status"], "approved");
  EXPECT_EQ(shown.body["receipt"], receipt);
  EXPECT_EQ(Call("vic", "GET", "/api/v1/approvals?status=pending").body["items"].size(), 0u);

  // A decided request is not rejected afterwards.
  const std::string after = Snapshot(id);
  Answer reject = Call("amy", "POST", "/api/v1/approvals/" + id + "/reject",
                       json{{"reason", "too late"}}.dump());
  EXPECT_EQ(reject.status, 409) << reject.raw;
  EXPECT_EQ(reject.code(), "approval_already_approved");
  EXPECT_EQ(Snapshot(id), after);
}

TEST_F(ApiApprovalsTest, ARejectionNeedsAReasonAndEndsTheRequest) {
  const std::string id = Request();
  const std::string before = Snapshot(id);
  Answer missing = Call("amy", "POST", "/api/v1/approvals/" + id + "/reject", "{}");
  EXPECT_EQ(missing.status, 400) << missing.raw;
  EXPECT_EQ(missing.code(), "missing_field");
  EXPECT_NE(missing.body.value("message", "").find("reason"), std::string::npos) << missing.raw;
  Answer empty = Call("amy", "POST", "/api/v1/approvals/" + id + "/reject", R"({"reason":""})");
  EXPECT_EQ(empty.status, 400) << empty.raw;
  EXPECT_EQ(empty.code(), "invalid_reason");
  Answer unknown_field =
      Call("amy", "POST", "/api/v1/approvals/" + id + "/reject", R"({"reason":"no","why":"x"})");
  EXPECT_EQ(unknown_field.status, 400) << unknown_field.raw;
  Answer viewer = Call("vic", "POST", "/api/v1/approvals/" + id + "/reject", R"({"reason":"no"})");
  EXPECT_EQ(viewer.status, 403) << viewer.raw;
  EXPECT_EQ(viewer.code(), "permission_denied");
  EXPECT_EQ(Snapshot(id), before);

  Answer rejected =
      Call("amy", "POST", "/api/v1/approvals/" + id + "/reject", R"({"reason":"change freeze"})");
  ASSERT_EQ(rejected.status, 200) << rejected.raw;
  EXPECT_EQ(rejected.body["status"], "rejected");
  EXPECT_EQ(rejected.body["decision"]["decision"], "rejected");
  EXPECT_EQ(rejected.body["decision"]["reason"], "change freeze");
  EXPECT_TRUE(rejected.body["receipt"].is_null());

  const std::string after = Snapshot(id);
  Answer approve = Call("amy", "POST", "/api/v1/approvals/" + id + "/approve");
  EXPECT_EQ(approve.status, 409) << approve.raw;
  EXPECT_EQ(approve.code(), "approval_rejected");
  EXPECT_EQ(Snapshot(id), after);
}

TEST_F(ApiApprovalsTest, AnUnknownRequestIsNotFoundOnEveryRoute) {
  const std::string id = Request();
  const std::string before = Snapshot(id);
  const std::string unknown = "0190f7a1-0000-7000-8000-000000000000";
  for (const auto& [method, path, body] :
       {std::tuple{"GET", "/api/v1/approvals/" + unknown, std::string("{}")},
        std::tuple{"POST", "/api/v1/approvals/" + unknown + "/approve", std::string("{}")},
        std::tuple{"POST", "/api/v1/approvals/" + unknown + "/reject",
                   std::string(R"({"reason":"no"})")}}) {
    SCOPED_TRACE(path);
    Answer answer = Call("amy", method, path, body);
    EXPECT_EQ(answer.status, 404) << answer.raw;
    EXPECT_EQ(answer.code(), "approval_not_found");
  }
  Answer malformed = Call("amy", "POST", "/api/v1/approvals/not-an-id/approve");
  EXPECT_EQ(malformed.status, 400) << malformed.raw;
  EXPECT_EQ(Snapshot(id), before);
}

TEST_F(ApiApprovalsTest, OnlyARunInRecoveryRequiredIsResolvedAndOnlyByAnAdmin) {
  const std::string id = Request();
  Answer approved = Call("amy", "POST", "/api/v1/approvals/" + id + "/approve");
  ASSERT_EQ(approved.status, 201) << approved.raw;
  const std::string run_id = approved.body["run"]["id"];
  const std::string resolve = "/api/v1/runs/" + run_id + "/resolve";
  const auto run_now = [&] { return Call("root", "GET", "/api/v1/runs/" + run_id).raw; };

  // A queued run is not resolved by hand.
  std::string before = run_now();
  Answer queued = Call("amy", "POST", resolve, R"({"resolution":"failed","reason":"checked"})");
  EXPECT_EQ(queued.status, 409) << queued.raw;
  EXPECT_EQ(queued.code(), "run_not_recovery_required");
  EXPECT_EQ(run_now(), before);

  Result<RunRecord> stored = store_->runs().GetRun(run_id);
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  Result<RunRecord> lost = testing::LoseAfterStart(store_->runs(), *stored, clock_.NowMs());
  ASSERT_TRUE(lost.ok()) << lost.status().ToString();
  before = run_now();
  const std::map<std::string, std::pair<int, std::string>> refused = {
      {R"({"resolution":"maybe","reason":"checked"})", {400, "invalid_resolution"}},
      {R"({"as":"failed","reason":"checked"})", {400, "unknown_field"}},
      {R"({"resolution":"failed"})", {400, "missing_field"}},
      {R"({"resolution":"failed","reason":""})", {400, "invalid_reason"}},
  };
  for (const auto& [body, expected] : refused) {
    SCOPED_TRACE(body);
    Answer answer = Call("amy", "POST", resolve, body);
    EXPECT_EQ(answer.status, expected.first) << answer.raw;
    EXPECT_EQ(answer.code(), expected.second) << answer.raw;
  }
  Answer by_operator = Call("ops", "POST", resolve, R"({"resolution":"failed","reason":"x"})");
  EXPECT_EQ(by_operator.status, 403) << by_operator.raw;
  EXPECT_EQ(by_operator.code(), "permission_denied");
  Answer unknown = Call("amy", "POST", "/api/v1/runs/0190f7a1-0000-7000-8000-000000000000/resolve",
                        R"({"resolution":"failed","reason":"checked"})");
  EXPECT_EQ(unknown.status, 404) << unknown.raw;
  EXPECT_EQ(unknown.code(), "run_not_found");
  EXPECT_EQ(run_now(), before);
  EXPECT_EQ(Call("root", "GET", "/api/v1/runs/" + run_id).body["status"], "recovery_required");

  Answer resolved =
      Call("amy", "POST", resolve, R"({"resolution":"succeeded","reason":"log shows done"})");
  ASSERT_EQ(resolved.status, 200) << resolved.raw;
  EXPECT_FALSE(resolved.replayed);
  EXPECT_EQ(resolved.body["resolution"], "succeeded");
  EXPECT_EQ(resolved.body["resolved_by"], principals_[Sha256Hex("amy")].id);
  EXPECT_EQ(resolved.body["run"]["status"], "succeeded");
  EXPECT_TRUE(resolved.body["retry_run"].is_null());
  Answer again =
      Call("amy", "POST", resolve, R"({"resolution":"succeeded","reason":"log shows done"})");
  ASSERT_EQ(again.status, 200) << again.raw;
  EXPECT_TRUE(again.replayed);
  EXPECT_EQ(again.body["created_at"], resolved.body["created_at"]);
  before = run_now();
  Answer other = Call("amy", "POST", resolve, R"({"resolution":"failed","reason":"no"})");
  EXPECT_EQ(other.status, 409) << other.raw;
  EXPECT_EQ(other.code(), "run_already_resolved");
  EXPECT_EQ(run_now(), before);
}

}  // namespace
}  // namespace ql

namespace ql {
namespace {

// An approval policy cannot be side-stepped by someone who may not approve: publishing a
// revision of a guarded task (which could drop the policy), creating, editing or repinning a
// trigger of it, or enabling that trigger needs the approvers' role; disabling does not.
TEST_F(ApiApprovalsTest, OnlyThoseWhoMayApproveChangeWhatRunsAGuardedTaskWithoutApproval) {
  // Approved by owners: an admin may neither add a cron trigger nor drop the policy.
  json vault{{"name", "vault"},
             {"spec", {{"command", {{"kind", "shell"}, {"command", "true"}}}}},
             {"approval", {{"required", true}, {"approver_role", "owner"}}}};
  Answer published = Call("root", "POST", "/api/v1/tasks", vault.dump());
  ASSERT_EQ(published.status, 201) << published.raw;
  const std::string vault_id = published.body["id"];
  const json cron{{"task_id", vault_id}, {"expression", "* * * * *"}, {"timezone", "UTC"}};
  Answer trigger = Call("amy", "POST", "/api/v1/triggers", cron.dump());
  EXPECT_EQ(trigger.status, 403) << trigger.raw;
  EXPECT_NE(trigger.body.value("message", "").find("owner"), std::string::npos) << trigger.raw;
  json unguarded{{"name", "vault"},
                 {"spec", {{"command", {{"kind", "shell"}, {"command", "true"}}}}},
                 {"expected_revision", 1}};
  Answer dropped =
      Call("amy", "POST", "/api/v1/tasks/" + vault_id + "/revisions", unguarded.dump());
  EXPECT_EQ(dropped.status, 403) << dropped.raw;
  EXPECT_EQ(Call("root", "GET", "/api/v1/tasks/" + vault_id).body["revision"], 1);
  EXPECT_EQ(Call("root", "GET", "/api/v1/triggers").body["items"].size(), 0u);
  // The owner may.
  Answer by_owner = Call("root", "POST", "/api/v1/triggers", cron.dump());
  ASSERT_EQ(by_owner.status, 201) << by_owner.raw;
  const std::string trigger_id = by_owner.body["id"];
  Answer edited = Call("amy", "POST", "/api/v1/triggers/" + trigger_id + "/revisions",
                       json{{"expected_revision", 1}, {"expression", "*/5 * * * *"}}.dump());
  EXPECT_EQ(edited.status, 403) << edited.raw;

  // Approved by admins (the default): an operator may disable the trigger, not enable it again.
  const json deploy_cron{
      {"task_id", task_id_}, {"expression", "* * * * *"}, {"timezone", "UTC"}, {"enabled", false}};
  Answer deploy_trigger = Call("root", "POST", "/api/v1/triggers", deploy_cron.dump());
  ASSERT_EQ(deploy_trigger.status, 201) << deploy_trigger.raw;
  const std::string deploy_trigger_id = deploy_trigger.body["id"];
  Answer enabled = Call("ops", "POST", "/api/v1/triggers/" + deploy_trigger_id + "/enable");
  EXPECT_EQ(enabled.status, 403) << enabled.raw;
  EXPECT_EQ(Call("root", "GET", "/api/v1/triggers/" + deploy_trigger_id).body["enabled"], false);
  EXPECT_EQ(Call("amy", "POST", "/api/v1/triggers/" + deploy_trigger_id + "/enable").status, 200);
  EXPECT_EQ(Call("ops", "POST", "/api/v1/triggers/" + deploy_trigger_id + "/disable").status, 200);
}

TEST_F(ApiApprovalsTest, RetryingARunOfAGuardedTaskWaitsForApproval) {
  Answer approved = Call("amy", "POST", "/api/v1/approvals/" + Request() + "/approve");
  ASSERT_EQ(approved.status, 201) << approved.raw;
  const std::string run_id = approved.body["run"]["id"];
  Result<RunRecord> stored = store_->runs().GetRun(run_id);
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  ASSERT_TRUE(testing::LoseAfterStart(store_->runs(), *stored, clock_.NowMs()).ok());
  ASSERT_EQ(Call("amy", "POST", "/api/v1/runs/" + run_id + "/resolve",
                 R"({"resolution":"failed","reason":"host lost"})")
                .status,
            200);
  Answer retried = Call("ops", "POST", "/api/v1/runs/" + run_id + "/retry");
  ASSERT_EQ(retried.status, 202) << retried.raw;
  EXPECT_EQ(retried.code(), "approval_required");
  const std::string approval_id = retried.body.value("approval_id", "");
  Answer pending = Call("vic", "GET", "/api/v1/approvals/" + approval_id);
  ASSERT_EQ(pending.status, 200) << pending.raw;
  EXPECT_EQ(pending.body["status"], "pending") << pending.raw;
}

// "Who changed this job?": every task and trigger write is an audit fact naming its actor, and
// the revision history names who published each revision; a refused write is no such fact.
TEST_F(ApiApprovalsTest, TaskAndTriggerWritesAreAuditFactsWithTheirActor) {
  const std::string amy = principals_[Sha256Hex("amy")].id;
  const std::string ops = principals_[Sha256Hex("ops")].id;
  const std::string root = principals_[Sha256Hex("root")].id;
  json nightly{{"name", "nightly"},
               {"spec", {{"command", {{"kind", "shell"}, {"command", "true"}}}}}};
  Answer created = Call("amy", "POST", "/api/v1/tasks", nightly.dump());
  ASSERT_EQ(created.status, 201) << created.raw;
  const std::string task_id = created.body["id"];
  EXPECT_EQ(created.body["published_by"], amy);
  nightly["expected_revision"] = 1;
  nightly["labels"] = {{"team", "ops"}};
  ASSERT_EQ(Call("root", "POST", "/api/v1/tasks/" + task_id + "/revisions", nightly.dump()).status,
            201);
  Answer cron =
      Call("amy", "POST", "/api/v1/triggers",
           json{{"task_id", task_id}, {"expression", "0 3 * * *"}, {"timezone", "UTC"}}.dump());
  ASSERT_EQ(cron.status, 201) << cron.raw;
  const std::string trigger_id = cron.body["id"];
  ASSERT_EQ(Call("ops", "POST", "/api/v1/triggers/" + trigger_id + "/disable").status, 200);
  ASSERT_EQ(Call("amy", "POST", "/api/v1/triggers/" + trigger_id + "/enable").status, 200);
  ASSERT_EQ(Call("amy", "POST", "/api/v1/triggers/" + trigger_id + "/revisions",
                 json{{"expected_revision", 3}, {"expression", "0 4 * * *"}}.dump())
                .status,
            201);
  // Refused: a viewer may not disable, a stale edit conflicts.
  EXPECT_EQ(Call("vic", "POST", "/api/v1/triggers/" + trigger_id + "/disable").status, 403);
  EXPECT_EQ(Call("amy", "POST", "/api/v1/triggers/" + trigger_id + "/revisions",
                 json{{"expected_revision", 1}, {"expression", "0 5 * * *"}}.dump())
                .status,
            409);
  ASSERT_EQ(Call("amy", "DELETE", "/api/v1/triggers/" + trigger_id).status, 200);
  ASSERT_EQ(Call("amy", "DELETE", "/api/v1/tasks/" + task_id).status, 200);

  Answer history = Call("vic", "GET", "/api/v1/tasks/" + task_id + "/revisions");
  ASSERT_EQ(history.status, 200) << history.raw;
  std::map<int64_t, std::string> published_by;
  for (const json& r : history.body["items"]) {
    published_by[r["revision"].get<int64_t>()] = r["published_by"].get<std::string>();
  }
  EXPECT_EQ(published_by, (std::map<int64_t, std::string>{{1, amy}, {2, root}, {3, amy}}));

  Answer audit = Call("root", "GET", "/api/v1/audit?limit=200");
  ASSERT_EQ(audit.status, 200) << audit.raw;
  std::vector<std::tuple<std::string, std::string, std::string>> facts;  // action, actor, target
  for (const json& a : audit.body["items"]) {
    if (a["target_id"] != task_id && a["target_id"] != trigger_id) continue;
    EXPECT_EQ(a["outcome"], "ok") << a.dump();
    facts.emplace_back(a["action"],
                       a["actor_id"].is_string() ? a["actor_id"].get<std::string>() : "",
                       a["target_id"]);
  }
  std::sort(facts.begin(), facts.end());
  using Fact = std::tuple<std::string, std::string, std::string>;
  std::vector<Fact> want{
      Fact{"task.create", amy, task_id},       Fact{"task.revise", root, task_id},
      Fact{"trigger.create", amy, trigger_id}, Fact{"trigger.disable", ops, trigger_id},
      Fact{"trigger.enable", amy, trigger_id}, Fact{"trigger.revise", amy, trigger_id},
      Fact{"trigger.delete", amy, trigger_id}, Fact{"task.delete", amy, task_id}};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(facts, want);
}

}  // namespace
}  // namespace ql
