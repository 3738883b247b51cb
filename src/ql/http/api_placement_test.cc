// /api/v1/pools and /api/v1/workers, and the `waiting` of a queued run, over a real SQLite
// governance store and an in-memory placement repository (testing/fake_placement.h), sent the
// way someone crossing the boundary would: every project role on every route, names that are no
// pool, limits and weights out of range, fields no route takes, a server without workers. Each
// refusal is checked by its status and code and by the repository having seen nothing; the
// installation admin's writes are checked by what reached the repository and by the shape of
// the answer.

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "httplib_config.h"
#include "ql/core/digest.h"
#include "ql/core/governance.h"
#include "ql/core/ids.h"
#include "ql/core/placement.h"
#include "ql/core/rfc3339.h"
#include "ql/engine/control_service.h"
#include "ql/engine/log_reader.h"
#include "ql/engine/metrics.h"
#include "ql/engine/placement_service.h"
#include "ql/engine/token_authenticator.h"
#include "ql/http/api_server.h"
#include "ql/storage/sqlite/sqlite_store.h"
#include "ql/testing/fake_clock.h"
#include "ql/testing/fake_placement.h"

namespace ql {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Reply {
  int status = 0;
  json body;
  std::string raw;
  std::string code() const { return body.is_object() ? body.value("code", "") : ""; }
};

struct Request {
  std::string method;
  std::string path;
  std::string body;
};

// The keys of a JSON object.
std::set<std::string> Keys(const json& object) {
  std::set<std::string> out;
  if (!object.is_object()) return out;
  for (const auto& [key, value] : object.items()) out.insert(key);
  return out;
}

const std::set<std::string> kPoolKeys = {"name",        "configured", "serves_all_projects",
                                         "max_running", "grants",     "live_workers",
                                         "running"};
const std::set<std::string> kGrantKeys = {"pool",       "project_id", "max_running", "weight",
                                          "created_by", "created_at", "updated_at"};
const std::set<std::string> kWorkerKeys = {
    "id",         "name",       "created_at", "revoked",         "drained",
    "drained_at", "live",       "running",    "running_runs",    "pool",
    "labels",     "version",    "slots",      "available_slots", "last_seen",
    "session_id", "generation", "state"};

class ApiPlacementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "ql-placement-XXXXXX").string();
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
    default_id_ = project->id;
    log_reader_ = std::make_unique<LogReader>((dir_ / "log").string());
    authenticator_ = std::make_unique<TokenAuthenticator>(store_->governance(), clock_);

    BootstrapCommand boot;
    boot.principal_id = Id();
    boot.name = "root";
    boot.token_id = Id();
    boot.token_digest = Sha256Hex("root-token-0123456789");
    boot.mutation_id = "bootstrap";
    boot.now_ms = clock_.NowMs();
    auto booted = store_->governance().Bootstrap(boot);
    ASSERT_TRUE(booted.ok()) << booted.status().ToString();
    root_ = "root-token-0123456789";

    // The pools and the worker an installation would have: the open default pool, pool gpu
    // granted to the default project, and worker w1 with a live session in gpu.
    placement_repo_.AddPool("default", /*serves_all_projects=*/true);
    placement_repo_.AddPool("gpu", /*serves_all_projects=*/false);
    PoolGrantRecord grant;
    grant.pool = "gpu";
    grant.project_id = default_id_;
    grant.created_by = "system";
    placement_repo_.AddGrant(grant);
    WorkerRecord worker;
    worker.id = Id();
    worker.name = "w1";
    worker.pool = "gpu";
    worker.created_at_ms = clock_.NowMs();
    WorkerSessionRecord session;
    session.id = Id();
    session.worker_id = worker.id;
    session.generation = 2;
    session.status = "active";
    session.max_concurrent_runs = 4;
    session.available_slots = 3;
    session.heartbeat_at_ms = clock_.NowMs();
    session.expires_at_ms = clock_.NowMs() + 30000;
    session.placement = Placement{"gpu", {{"arch", "arm64"}}};
    session.agent_version = "0.1.0";
    worker.session = session;
    worker.live = true;
    worker.running_run_ids = {"019ca86a-3a60-78bc-be53-37cf59c55371"};
    worker_id_ = worker.id;
    placement_repo_.AddWorker(worker);
    placement_ =
        std::make_unique<PlacementService>(placement_repo_, service_->governance(), clock_);

    options_.authenticate = [this](const std::string& digest) -> Result<Authentication> {
      return authenticator_->Authenticate(digest);
    };
    options_.log_reader = log_reader_.get();
    options_.placement = placement_.get();
    server_ = std::make_unique<ApiServer>(*service_, metrics_, options_);
    ASSERT_TRUE(server_->Start("127.0.0.1", 0).ok());
    server_->SetReady(true);

    Reply beta = Send(root_, {"POST", "/api/v1/projects", json{{"slug", "beta"}}.dump()});
    ASSERT_EQ(beta.status, 201) << beta.raw;
    beta_id_ = beta.body.value("id", "");
    // Installation admin (not owner), and every role of the default project.
    iadmin_ = AddMember("iadmin", std::string(kInstallationScope), Role::kAdmin);
    project_roles_ = {{"powner", AddMember("powner", default_id_, Role::kOwner)},
                      {"padmin", AddMember("padmin", default_id_, Role::kAdmin)},
                      {"operator", AddMember("operator", default_id_, Role::kOperator)},
                      {"viewer", AddMember("viewer", default_id_, Role::kViewer)},
                      {"nobody", AddMember("nobody", "", Role::kNone)}};
    beta_viewer_ = AddMember("beta-viewer", beta_id_, Role::kViewer);
  }

  void TearDown() override {
    bare_server_.reset();
    server_.reset();
    placement_.reset();
    authenticator_.reset();
    service_.reset();
    store_.reset();
    fs::remove_all(dir_);
  }

  std::string Id() { return NewUuidV7(clock_.NowMs(), random_); }

  // Creates principal `name` with a token, bound to `role` in `scope` (none for kNone); returns
  // the token.
  std::string AddMember(const std::string& name, const std::string& scope, Role role) {
    CreatePrincipalCommand principal;
    principal.id = Id();
    principal.name = name;
    principal.now_ms = clock_.NowMs();
    auto created = store_->governance().CreatePrincipal(principal);
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    ids_[name] = principal.id;
    const std::string token = "tok-" + Id();
    CreateTokenCommand cmd;
    cmd.id = Id();
    cmd.principal_id = principal.id;
    cmd.token_digest = Sha256Hex(token);
    cmd.now_ms = clock_.NowMs();
    EXPECT_TRUE(store_->governance().CreateToken(cmd).ok());
    if (role != Role::kNone) {
      WriteBindingCommand bind;
      bind.scope = scope;
      bind.subject_id = principal.id;
      bind.role = std::string(RoleName(role));
      bind.mutation_id = Id();
      bind.now_ms = clock_.NowMs();
      auto written = store_->governance().WriteBinding(bind);
      EXPECT_TRUE(written.ok()) << written.status().ToString();
    }
    return token;
  }

  Reply Send(const std::string& token, const Request& request, int port = 0,
             const std::string& request_id = "") {
    httplib::Client client("127.0.0.1", port != 0 ? port : server_->port());
    client.set_read_timeout(15, 0);
    httplib::Headers headers = {{"Authorization", "Bearer " + token}};
    if (!request_id.empty()) headers.emplace("X-Request-Id", request_id);
    client.set_default_headers(headers);
    httplib::Result result =
        request.method == "GET"
            ? client.Get(request.path.c_str())
            : client.Post(request.path.c_str(), request.body, "application/json");
    Reply reply;
    if (!result) return reply;
    reply.status = result->status;
    reply.raw = result->body;
    reply.body = json::parse(result->body, nullptr, false);
    return reply;
  }

  // One well-formed request per pools and workers route, by route name; an installation admin
  // gets 200 from each.
  static std::vector<std::pair<std::string, Request>> Routes() {
    return {
        {"pools.list", {"GET", "/api/v1/pools", ""}},
        {"pools.get", {"GET", "/api/v1/pools/gpu", ""}},
        {"pools.set", {"POST", "/api/v1/pools/gpu", R"({"serves_all_projects":true})"}},
        {"pools.grant",
         {"POST", "/api/v1/pools/gpu/grants", R"({"project":"default","max_running":2})"}},
        {"pools.revoke", {"POST", "/api/v1/pools/gpu/revoke", R"({"project":"default"})"}},
        {"workers.list", {"GET", "/api/v1/workers", ""}},
        {"workers.get", {"GET", "/api/v1/workers/w1", ""}},
        {"workers.drain", {"POST", "/api/v1/workers/w1/drain", "{}"}},
        {"workers.resume", {"POST", "/api/v1/workers/w1/resume", ""}},
    };
  }

  // The default project's queued run of a fresh task, created by the installation owner.
  std::string QueuedRun() {
    const json task = {{"name", "job-" + Id()},
                       {"spec", {{"command", {{"kind", "shell"}, {"command", "true"}}}}}};
    Reply created = Send(root_, {"POST", "/api/v1/tasks", task.dump()});
    EXPECT_EQ(created.status, 201) << created.raw;
    Reply run = Send(
        root_, {"POST", "/api/v1/runs", json{{"task_id", created.body.value("id", "")}}.dump()});
    EXPECT_EQ(run.status, 201) << run.raw;
    EXPECT_EQ(run.body.value("status", ""), "queued") << run.raw;
    return run.body.value("id", "");
  }

  // Checks that the repository saw nothing since the fixture set it up.
  void ExpectUntouched() {
    EXPECT_EQ(placement_repo_.writes(), 0);
    EXPECT_TRUE(placement_repo_.grants().empty());
    EXPECT_TRUE(placement_repo_.revokes().empty());
    EXPECT_TRUE(placement_repo_.sets().empty());
    EXPECT_TRUE(placement_repo_.drains().empty());
    const std::optional<PoolRecord> gpu = placement_repo_.pool("gpu");
    ASSERT_TRUE(gpu.has_value());
    EXPECT_FALSE(gpu->serves_all_projects);
    EXPECT_FALSE(gpu->max_running.has_value());
    EXPECT_EQ(gpu->version, 1);
    ASSERT_EQ(gpu->grants.size(), 1u);
    EXPECT_EQ(gpu->grants.front().project_id, default_id_);
    EXPECT_FALSE(gpu->grants.front().max_running.has_value());
    EXPECT_EQ(gpu->grants.front().weight, 1);
    const std::optional<WorkerRecord> w1 = placement_repo_.worker(worker_id_);
    ASSERT_TRUE(w1.has_value());
    EXPECT_FALSE(w1->drained_at_ms.has_value());
  }

  fs::path dir_;
  testing::FakeClock clock_{1'780'000'000'000};
  testing::SeededRandom random_{31};
  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<ControlService> service_;
  std::unique_ptr<LogReader> log_reader_;
  std::unique_ptr<TokenAuthenticator> authenticator_;
  testing::FakePlacementRepository placement_repo_;
  std::unique_ptr<PlacementService> placement_;
  Metrics metrics_;
  ApiServerOptions options_;
  std::unique_ptr<ApiServer> server_;
  Metrics bare_metrics_;
  std::unique_ptr<ApiServer> bare_server_;  // the same server without placement
  std::string default_id_;
  std::string beta_id_;
  std::string worker_id_;
  std::string root_;
  std::string iadmin_;
  std::string beta_viewer_;
  std::vector<std::pair<std::string, std::string>> project_roles_;  // name, token
  std::map<std::string, std::string> ids_;                          // principal name -> id
};

// The table above is every pools and workers route the server has: a new one fails here until
// it is added, and so is checked below for who may call it.
TEST_F(ApiPlacementTest, TheRouteTableServesExactlyThesePlacementRoutes) {
  std::set<std::string> served;
  for (const ApiRoute& route : ApiRoutes()) {
    if (route.pattern.starts_with("/api/v1/pools") ||
        route.pattern.starts_with("/api/v1/workers")) {
      served.insert(route.name);
      EXPECT_EQ(route.permission, "installation_admin") << route.name;
    }
  }
  std::set<std::string> sampled;
  for (const auto& [name, request] : Routes()) sampled.insert(name);
  EXPECT_EQ(served, sampled);
}

TEST_F(ApiPlacementTest, EveryProjectRoleIsRefusedOnEveryRouteAndNothingReachesTheRepository) {
  for (const auto& [member, token] : project_roles_) {
    for (const auto& [name, request] : Routes()) {
      SCOPED_TRACE(member + " " + name);
      const Reply reply = Send(token, request);
      EXPECT_EQ(reply.status, 403) << reply.raw;
      EXPECT_EQ(reply.code(), "permission_denied") << reply.raw;
      EXPECT_NE(reply.body.value("message", "").find("installation"), std::string::npos)
          << reply.raw;
    }
  }
  // Not a read either: the decision comes before the store is asked anything.
  EXPECT_EQ(placement_repo_.reads(), 0);
  ExpectUntouched();
}

TEST_F(ApiPlacementTest, AnInstallationAdminIsAllowedOnEveryRoute) {
  for (const auto& [name, request] : Routes()) {
    SCOPED_TRACE(name);
    const Reply reply = Send(iadmin_, request);
    EXPECT_EQ(reply.status, 200) << reply.raw;
  }
  EXPECT_EQ(placement_repo_.writes(), 5);
}

TEST_F(ApiPlacementTest, AServerWithoutWorkersAnswers503OnEveryRouteAndRunsCarryNoWaiting) {
  ApiServerOptions bare = options_;
  bare.placement = nullptr;
  bare_server_ = std::make_unique<ApiServer>(*service_, bare_metrics_, bare);
  ASSERT_TRUE(bare_server_->Start("127.0.0.1", 0).ok());
  bare_server_->SetReady(true);
  placement_repo_.SetWaiting(
      WaitingReason{"", "waiting_for_worker", Placement{"gpu", {}}, "no live worker in pool gpu"});
  for (const std::string& token : {root_, iadmin_, project_roles_.back().second}) {
    for (const auto& [name, request] : Routes()) {
      SCOPED_TRACE(name);
      const Reply reply = Send(token, request, bare_server_->port());
      EXPECT_EQ(reply.status, 503) << reply.raw;
      EXPECT_EQ(reply.code(), "workers_unavailable") << reply.raw;
    }
  }
  const std::string run_id = QueuedRun();
  const Reply run = Send(root_, {"GET", "/api/v1/runs/" + run_id, ""}, bare_server_->port());
  ASSERT_EQ(run.status, 200) << run.raw;
  EXPECT_EQ(run.body.value("status", ""), "queued");
  EXPECT_FALSE(run.body.contains("waiting")) << run.raw;
  EXPECT_EQ(placement_repo_.reads(), 0);
  EXPECT_TRUE(placement_repo_.explained().empty());
  ExpectUntouched();
}

TEST_F(ApiPlacementTest, NamesThatAreNoPoolAreRefusedAndChangeNothing) {
  const std::string too_long(64, 'a');
  for (const std::string& pool :
       {std::string("Bad"), std::string("-x"), std::string("_x"), std::string("..x"),
        std::string("a%20b"), std::string("gpu%00"), std::string("g%C3%A9"), too_long}) {
    SCOPED_TRACE(pool);
    const std::vector<Request> requests = {
        {"GET", "/api/v1/pools/" + pool, ""},
        {"POST", "/api/v1/pools/" + pool, R"({"serves_all_projects":true})"},
        {"POST", "/api/v1/pools/" + pool + "/grants", R"({"project":"default"})"},
        {"POST", "/api/v1/pools/" + pool + "/revoke", R"({"project":"default"})"}};
    for (const Request& request : requests) {
      const Reply reply = Send(iadmin_, request);
      EXPECT_EQ(reply.status, 400) << request.method << " " << request.path << " " << reply.raw;
      EXPECT_EQ(reply.code(), "invalid_pool") << reply.raw;
    }
  }
  // A name that climbs or is no segment reaches no route at all.
  for (const std::string& pool :
       {std::string("..%2Fx"), std::string("%2E%2E"), std::string(".."), std::string("x%2F")}) {
    SCOPED_TRACE(pool);
    const Reply reply =
        Send(iadmin_, {"POST", "/api/v1/pools/" + pool + "/grants", R"({"project":"default"})"});
    EXPECT_EQ(reply.status, 404) << reply.raw;
    EXPECT_EQ(reply.code(), "route_not_found") << reply.raw;
  }
  EXPECT_EQ(placement_repo_.reads(), 0);
  ExpectUntouched();
  // 63 characters is a name: the store is asked, and knows no such pool.
  const Reply longest = Send(iadmin_, {"GET", "/api/v1/pools/" + std::string(63, 'a'), ""});
  EXPECT_EQ(longest.status, 404) << longest.raw;
  EXPECT_EQ(longest.code(), "pool_not_found") << longest.raw;
}

TEST_F(ApiPlacementTest, OutOfRangeValuesUnknownFieldsAndAMissingProjectChangeNothing) {
  struct Case {
    Request request;
    int status;
    std::string code;
  };
  const std::string grants = "/api/v1/pools/gpu/grants";
  const std::string set = "/api/v1/pools/gpu";
  const std::string revoke = "/api/v1/pools/gpu/revoke";
  const std::vector<Case> cases = {
      {{"POST", grants, R"({"project":"default","max_running":0})"}, 400, "invalid_max_running"},
      {{"POST", grants, R"({"project":"default","max_running":-1})"}, 400, "invalid_max_running"},
      {{"POST", grants, R"({"project":"default","max_running":100001})"},
       400,
       "invalid_max_running"},
      {{"POST", grants, R"({"project":"default","weight":0})"}, 400, "invalid_weight"},
      {{"POST", grants, R"({"project":"default","weight":101})"}, 400, "invalid_weight"},
      {{"POST", grants, R"({"project":"default","weight":-5})"}, 400, "invalid_weight"},
      {{"POST", grants, R"({"project":"default","weight":"2"})"}, 400, "invalid_type"},
      {{"POST", grants, R"({"project":"default","max_running":1.5})"},
       400,
       "json_number_unsupported"},
      {{"POST", grants, R"({"max_running":1})"}, 400, "missing_field"},
      {{"POST", grants, R"({})"}, 400, "missing_field"},
      {{"POST", grants, ""}, 400, "invalid_json"},
      {{"POST", grants, R"({"project":5})"}, 400, "invalid_type"},
      {{"POST", grants, R"({"project":"default","pool":"other"})"}, 400, "unknown_field"},
      {{"POST", grants, R"({"project":"default","serves_all_projects":true})"},
       400,
       "unknown_field"},
      {{"POST", grants, R"({"project":"no-such-project"})"}, 404, "project_not_found"},
      {{"POST", set, R"({"max_running":0})"}, 400, "invalid_max_running"},
      {{"POST", set, R"({"max_running":100001})"}, 400, "invalid_max_running"},
      {{"POST", set, R"({"serves_all_projects":true,"max_running":0})"},
       400,
       "invalid_max_running"},
      {{"POST", set, R"({})"}, 400, "invalid_argument"},
      {{"POST", set, R"({"open":true})"}, 400, "unknown_field"},
      {{"POST", set, R"({"serves_all_projects":"yes"})"}, 400, "invalid_type"},
      {{"POST", set, R"({"max_running":"5"})"}, 400, "invalid_type"},
      {{"POST", revoke, R"({})"}, 400, "missing_field"},
      {{"POST", revoke, R"({"project":"default","weight":1})"}, 400, "unknown_field"},
      {{"POST", revoke, R"({"project":"no-such-project"})"}, 404, "project_not_found"},
      {{"POST", "/api/v1/workers/w1/drain", R"({"force":true})"}, 400, "unknown_field"},
      {{"POST", "/api/v1/workers/w1/drain", "[]"}, 400, "invalid_json"},
      {{"POST", "/api/v1/workers/w1/resume", R"({"worker":"w1"})"}, 400, "unknown_field"},
      {{"GET", "/api/v1/pools?pool=gpu", ""}, 400, "unknown_parameter"},
      {{"GET", "/api/v1/workers?state=live", ""}, 400, "unknown_parameter"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.request.method + " " + c.request.path + " " + c.request.body);
    const Reply reply = Send(iadmin_, c.request);
    EXPECT_EQ(reply.status, c.status) << reply.raw;
    EXPECT_EQ(reply.code(), c.code) << reply.raw;
  }
  ExpectUntouched();

  // The bounds themselves are accepted.
  for (const std::string& body :
       {std::string(R"({"project":"default","max_running":1,"weight":1})"),
        std::string(R"({"project":"default","max_running":100000,"weight":100})")}) {
    const Reply reply = Send(iadmin_, {"POST", grants, body});
    EXPECT_EQ(reply.status, 200) << body << " " << reply.raw;
  }
  const Reply widest = Send(iadmin_, {"POST", set, R"({"max_running":100000})"});
  EXPECT_EQ(widest.status, 200) << widest.raw;
  EXPECT_EQ(placement_repo_.writes(), 3);
}

TEST_F(ApiPlacementTest, AnInstallationAdminsGrantReachesTheRepositoryWithItsValues) {
  clock_.Advance(1234);
  const Reply reply = Send(
      iadmin_,
      {"POST", "/api/v1/pools/batch/grants", R"({"project":"beta","max_running":3,"weight":2})"}, 0,
      "req-grant-1");
  ASSERT_EQ(reply.status, 200) << reply.raw;
  const std::vector<GrantPoolCommand> grants = placement_repo_.grants();
  ASSERT_EQ(grants.size(), 1u);
  const GrantPoolCommand& cmd = grants.front();
  EXPECT_EQ(cmd.pool, "batch");
  EXPECT_EQ(cmd.project_id, beta_id_) << "the slug is resolved to the project's id";
  EXPECT_EQ(cmd.max_running, std::optional<int64_t>(3));
  EXPECT_EQ(cmd.weight, 2);
  EXPECT_EQ(cmd.actor.principal_id, ids_["iadmin"]);
  EXPECT_EQ(cmd.actor.request_id, "req-grant-1");
  ASSERT_TRUE(cmd.fence.has_value()) << "a principal's write is fenced by its installation role";
  EXPECT_EQ(cmd.fence->principal_id, ids_["iadmin"]);
  EXPECT_EQ(cmd.fence->required, Role::kAdmin);
  EXPECT_EQ(cmd.now_ms, clock_.NowMs());

  EXPECT_EQ(Keys(reply.body), kGrantKeys) << reply.raw;
  EXPECT_EQ(reply.body["pool"], "batch");
  EXPECT_EQ(reply.body["project_id"], beta_id_);
  EXPECT_EQ(reply.body["max_running"], 3);
  EXPECT_EQ(reply.body["weight"], 2);
  EXPECT_EQ(reply.body["created_by"], ids_["iadmin"]);
  EXPECT_EQ(reply.body["created_at"], FormatRfc3339Utc(clock_.NowMs()));
  EXPECT_EQ(reply.body["updated_at"], FormatRfc3339Utc(clock_.NowMs()));

  // By id, with neither limit nor weight: no limit, weight 1.
  const Reply by_id =
      Send(iadmin_, {"POST", "/api/v1/pools/batch/grants", json{{"project", default_id_}}.dump()});
  ASSERT_EQ(by_id.status, 200) << by_id.raw;
  ASSERT_EQ(placement_repo_.grants().size(), 2u);
  const GrantPoolCommand plain = placement_repo_.grants().back();
  EXPECT_EQ(plain.project_id, default_id_);
  EXPECT_FALSE(plain.max_running.has_value());
  EXPECT_EQ(plain.weight, 1);
  EXPECT_TRUE(by_id.body["max_running"].is_null()) << by_id.raw;
  EXPECT_EQ(by_id.body["weight"], 1);
}

TEST_F(ApiPlacementTest, AnInstallationAdminsRevokeAndSetReachTheRepositoryWithTheirValues) {
  const Reply revoked = Send(
      iadmin_, {"POST", "/api/v1/pools/gpu/revoke", R"({"project":"default"})"}, 0, "req-revoke-1");
  ASSERT_EQ(revoked.status, 200) << revoked.raw;
  ASSERT_EQ(placement_repo_.revokes().size(), 1u);
  const RevokePoolCommand revoke = placement_repo_.revokes().front();
  EXPECT_EQ(revoke.pool, "gpu");
  EXPECT_EQ(revoke.project_id, default_id_);
  EXPECT_EQ(revoke.actor.principal_id, ids_["iadmin"]);
  EXPECT_EQ(revoke.actor.request_id, "req-revoke-1");
  ASSERT_TRUE(revoke.fence.has_value());
  EXPECT_EQ(revoke.fence->required, Role::kAdmin);
  // The answer is the pool as it now is.
  EXPECT_EQ(Keys(revoked.body), kPoolKeys) << revoked.raw;
  EXPECT_EQ(revoked.body["name"], "gpu");
  EXPECT_EQ(revoked.body["grants"], json::array()) << revoked.raw;
  // Nothing left to revoke.
  const Reply again =
      Send(iadmin_, {"POST", "/api/v1/pools/gpu/revoke", R"({"project":"default"})"});
  EXPECT_EQ(again.status, 404) << again.raw;
  EXPECT_EQ(again.code(), "pool_grant_not_found") << again.raw;

  const Reply opened =
      Send(iadmin_, {"POST", "/api/v1/pools/gpu", R"({"serves_all_projects":true})"});
  ASSERT_EQ(opened.status, 200) << opened.raw;
  ASSERT_EQ(placement_repo_.sets().size(), 1u);
  const SetPoolCommand open = placement_repo_.sets().front();
  EXPECT_EQ(open.pool, "gpu");
  EXPECT_EQ(open.serves_all_projects, std::optional<bool>(true));
  EXPECT_FALSE(open.max_running.has_value()) << "an absent max_running is left as it is";
  EXPECT_EQ(open.actor.principal_id, ids_["iadmin"]);
  EXPECT_EQ(Keys(opened.body), kPoolKeys) << opened.raw;
  EXPECT_EQ(opened.body["configured"], true);
  EXPECT_EQ(opened.body["serves_all_projects"], true);
  EXPECT_TRUE(opened.body["max_running"].is_null());

  const Reply limited = Send(iadmin_, {"POST", "/api/v1/pools/gpu", R"({"max_running":7})"});
  ASSERT_EQ(limited.status, 200) << limited.raw;
  ASSERT_EQ(placement_repo_.sets().size(), 2u);
  const SetPoolCommand limit = placement_repo_.sets().back();
  EXPECT_FALSE(limit.serves_all_projects.has_value());
  ASSERT_TRUE(limit.max_running.has_value());
  EXPECT_EQ(*limit.max_running, std::optional<int64_t>(7));
  EXPECT_EQ(limited.body["max_running"], 7);
  EXPECT_EQ(limited.body["serves_all_projects"], true);

  // A pool no one configured yet is created by a set, serving only its grants.
  const Reply fresh = Send(iadmin_, {"POST", "/api/v1/pools/fresh", R"({"max_running":1})"});
  ASSERT_EQ(fresh.status, 200) << fresh.raw;
  EXPECT_EQ(fresh.body["name"], "fresh");
  EXPECT_EQ(fresh.body["serves_all_projects"], false);
}

// `ql pool set P --no-max-running` sends {"max_running": null}: a change to no limit, not an
// absent field (docs/api.md, docs/openapi.json).
TEST_F(ApiPlacementTest, ANullMaxRunningRemovesThePoolsLimit) {
  ASSERT_EQ(Send(iadmin_, {"POST", "/api/v1/pools/gpu", R"({"max_running":7})"}).status, 200);
  const Reply cleared = Send(iadmin_, {"POST", "/api/v1/pools/gpu", R"({"max_running":null})"});
  ASSERT_EQ(cleared.status, 200) << cleared.raw;
  ASSERT_EQ(placement_repo_.sets().size(), 2u);
  const SetPoolCommand clear = placement_repo_.sets().back();
  ASSERT_TRUE(clear.max_running.has_value()) << "null is a change, not an absent field";
  EXPECT_FALSE(clear.max_running->has_value());
  EXPECT_FALSE(clear.serves_all_projects.has_value());
  EXPECT_TRUE(cleared.body["max_running"].is_null()) << cleared.raw;
  // null is no boolean.
  const Reply open =
      Send(iadmin_, {"POST", "/api/v1/pools/gpu", R"({"serves_all_projects":null})"});
  EXPECT_EQ(open.status, 400) << open.raw;
  EXPECT_EQ(open.code(), "invalid_type") << open.raw;
  EXPECT_EQ(placement_repo_.sets().size(), 2u);
}

TEST_F(ApiPlacementTest, AnInstallationAdminsDrainAndResumeReachTheRepository) {
  clock_.Advance(5000);
  const Reply drained = Send(iadmin_, {"POST", "/api/v1/workers/w1/drain", ""}, 0, "req-drain");
  ASSERT_EQ(drained.status, 200) << drained.raw;
  ASSERT_EQ(placement_repo_.drains().size(), 1u);
  const DrainWorkerCommand drain = placement_repo_.drains().front();
  EXPECT_EQ(drain.worker, "w1");
  EXPECT_TRUE(drain.drain);
  EXPECT_EQ(drain.actor.principal_id, ids_["iadmin"]);
  EXPECT_EQ(drain.actor.request_id, "req-drain");
  ASSERT_TRUE(drain.fence.has_value());
  EXPECT_EQ(drain.fence->required, Role::kAdmin);
  EXPECT_EQ(drain.now_ms, clock_.NowMs());
  EXPECT_EQ(Keys(drained.body), kWorkerKeys) << drained.raw;
  EXPECT_EQ(drained.body["id"], worker_id_);
  EXPECT_EQ(drained.body["name"], "w1");
  EXPECT_EQ(drained.body["drained"], true);
  EXPECT_EQ(drained.body["drained_at"], FormatRfc3339Utc(clock_.NowMs()));
  EXPECT_EQ(drained.body["state"], "drained");
  EXPECT_EQ(drained.body["pool"], "gpu");
  EXPECT_EQ(drained.body["labels"], json({{"arch", "arm64"}}));
  EXPECT_EQ(drained.body["slots"], 4);
  EXPECT_EQ(drained.body["available_slots"], 3);
  EXPECT_EQ(drained.body["generation"], 2);
  EXPECT_EQ(drained.body["running"], 1);

  // By id, with an empty object for a body.
  const Reply resumed = Send(iadmin_, {"POST", "/api/v1/workers/" + worker_id_ + "/resume", "{}"});
  ASSERT_EQ(resumed.status, 200) << resumed.raw;
  ASSERT_EQ(placement_repo_.drains().size(), 2u);
  const DrainWorkerCommand resume = placement_repo_.drains().back();
  EXPECT_EQ(resume.worker, worker_id_);
  EXPECT_FALSE(resume.drain);
  EXPECT_EQ(resumed.body["drained"], false);
  EXPECT_TRUE(resumed.body["drained_at"].is_null());
  EXPECT_EQ(resumed.body["state"], "active");

  const Reply unknown = Send(iadmin_, {"POST", "/api/v1/workers/w9/drain", ""});
  EXPECT_EQ(unknown.status, 404) << unknown.raw;
  EXPECT_EQ(unknown.code(), "worker_not_found") << unknown.raw;
}

TEST_F(ApiPlacementTest, ReadsAnswerTheDocumentedShapes) {
  const Reply pools = Send(iadmin_, {"GET", "/api/v1/pools", ""});
  ASSERT_EQ(pools.status, 200) << pools.raw;
  EXPECT_EQ(Keys(pools.body), std::set<std::string>{"items"});
  ASSERT_EQ(pools.body["items"].size(), 2u) << pools.raw;
  for (const json& pool : pools.body["items"]) EXPECT_EQ(Keys(pool), kPoolKeys) << pool;
  const Reply gpu = Send(iadmin_, {"GET", "/api/v1/pools/gpu", ""});
  ASSERT_EQ(gpu.status, 200) << gpu.raw;
  EXPECT_EQ(gpu.body["serves_all_projects"], false);
  ASSERT_EQ(gpu.body["grants"].size(), 1u);
  EXPECT_EQ(Keys(gpu.body["grants"][0]), kGrantKeys);
  EXPECT_EQ(gpu.body["grants"][0]["project_id"], default_id_);
  const Reply none = Send(iadmin_, {"GET", "/api/v1/pools/none", ""});
  EXPECT_EQ(none.status, 404) << none.raw;
  EXPECT_EQ(none.code(), "pool_not_found");

  const Reply workers = Send(iadmin_, {"GET", "/api/v1/workers", ""});
  ASSERT_EQ(workers.status, 200) << workers.raw;
  ASSERT_EQ(workers.body["items"].size(), 1u) << workers.raw;
  EXPECT_EQ(Keys(workers.body["items"][0]), kWorkerKeys);
  EXPECT_EQ(workers.body["items"][0]["state"], "active");
  const Reply w1 = Send(iadmin_, {"GET", "/api/v1/workers/w1", ""});
  ASSERT_EQ(w1.status, 200) << w1.raw;
  EXPECT_EQ(w1.body["id"], worker_id_);
  const Reply w9 = Send(iadmin_, {"GET", "/api/v1/workers/w9", ""});
  EXPECT_EQ(w9.status, 404) << w9.raw;
  EXPECT_EQ(w9.code(), "worker_not_found");
  EXPECT_EQ(placement_repo_.writes(), 0);
}

TEST_F(ApiPlacementTest, AQueuedRunSaysWhyItWaitsAndOnlyWhileQueued) {
  placement_repo_.SetWaiting(WaitingReason{"", "waiting_for_worker",
                                           Placement{"gpu", {{"arch", "arm64"}}},
                                           "no live worker in pool gpu has the labels"});
  const std::string run_id = QueuedRun();
  ASSERT_FALSE(run_id.empty());
  const std::string viewer = project_roles_[3].second;
  ASSERT_EQ(project_roles_[3].first, "viewer");
  // A viewer of the run's project reads why it waits; by a prefix, the store is asked by id.
  const Reply queued = Send(viewer, {"GET", "/api/v1/runs/" + run_id.substr(0, 23), ""});
  ASSERT_EQ(queued.status, 200) << queued.raw;
  EXPECT_EQ(queued.body.value("status", ""), "queued");
  ASSERT_TRUE(queued.body.contains("waiting")) << queued.raw;
  EXPECT_EQ(queued.body["waiting"], json({{"reason", "waiting_for_worker"},
                                          {"pool", "gpu"},
                                          {"labels", {{"arch", "arm64"}}},
                                          {"detail", "no live worker in pool gpu has the labels"}}))
      << queued.raw;
  EXPECT_EQ(placement_repo_.explained(), std::vector<std::string>{run_id});

  // Someone who may not read the run learns nothing, and the store is not asked.
  const Reply hidden = Send(beta_viewer_, {"GET", "/api/v1/runs/" + run_id, ""});
  EXPECT_EQ(hidden.status, 404) << hidden.raw;
  EXPECT_EQ(hidden.raw.find("waiting"), std::string::npos) << hidden.raw;
  EXPECT_EQ(placement_repo_.explained().size(), 1u);

  // An eligible worker exists: the run waits for a slot only, and says nothing.
  placement_repo_.SetWaiting(WaitingReason{"", "", Placement{"gpu", {{"arch", "arm64"}}}, ""});
  const Reply eligible = Send(viewer, {"GET", "/api/v1/runs/" + run_id, ""});
  ASSERT_EQ(eligible.status, 200) << eligible.raw;
  EXPECT_FALSE(eligible.body.contains("waiting")) << eligible.raw;
  EXPECT_EQ(placement_repo_.explained().size(), 2u);

  // Once it is no longer queued, the store is not asked and the run carries no waiting.
  placement_repo_.SetWaiting(
      WaitingReason{"", "waiting_for_worker", Placement{"gpu", {}}, "no live worker in pool gpu"});
  const Reply cancelled = Send(root_, {"POST", "/api/v1/runs/" + run_id + "/cancel", "{}"});
  ASSERT_EQ(cancelled.status, 200) << cancelled.raw;
  ASSERT_EQ(cancelled.body.value("status", ""), "cancelled") << cancelled.raw;
  const Reply ended = Send(viewer, {"GET", "/api/v1/runs/" + run_id, ""});
  ASSERT_EQ(ended.status, 200) << ended.raw;
  EXPECT_FALSE(ended.body.contains("waiting")) << ended.raw;
  EXPECT_EQ(placement_repo_.explained().size(), 2u);
  EXPECT_EQ(placement_repo_.writes(), 0);
}

}  // namespace
}  // namespace ql
