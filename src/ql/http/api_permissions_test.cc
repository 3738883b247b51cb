// Every API route against every role (DESIGN §9): a table of sample requests, one per route, is
// sent with the token of a principal holding no role, viewer, operator, admin and owner of the
// project, and installation owner. A route missing from the table fails the test, so a new
// route cannot ship without its permission being checked.

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "httplib_config.h"
#include "ql/core/digest.h"
#include "ql/core/governance.h"
#include "ql/core/ids.h"
#include "ql/engine/control_service.h"
#include "ql/engine/log_reader.h"
#include "ql/engine/metrics.h"
#include "ql/engine/sign_in_service.h"
#include "ql/engine/token_authenticator.h"
#include "ql/http/api_server.h"
#include "ql/secrets/file_key_provider.h"
#include "ql/secrets/password_hasher.h"
#include "ql/secrets/store_sealer.h"
#include "ql/storage/sqlite/sqlite_store.h"
#include "ql/testing/fake_clock.h"
#include "ql/testing/fake_placement.h"
#include "ql/testing/raw_http.h"

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

// One principal with a token and the role it holds.
struct Member {
  std::string name;
  PrincipalRecord principal;
  std::string token;
  int level = 0;  // 0 none, 1 viewer, 2 operator, 3 admin, 4 project owner, 5 installation owner
};

// A request to send: method, path, body.
struct Sample {
  std::string method;
  std::string path;
  std::string body;
};

// Spellings of `target`'s path that a lenient router might take for it: a trailing slash, a
// doubled slash, a dot segment, an escaped slash, another case of its first literal segment.
std::vector<std::string> PathVariants(const std::string& target) {
  const size_t question = target.find('?');
  const std::string path = target.substr(0, question);
  const std::string query = question == std::string::npos ? "" : target.substr(question);
  const size_t last = path.rfind('/');
  const bool api = path.rfind("/api/v1/", 0) == 0;
  const size_t literal = api ? 8 : 1;  // the first segment after the prefix
  std::string upper = path;
  upper[literal] = static_cast<char>(std::toupper(static_cast<unsigned char>(upper[literal])));
  return {path + "/" + query,
          path.substr(0, last) + "/" + path.substr(last) + query,
          path.substr(0, last) + "/." + path.substr(last) + query,
          (last == 0 ? "/%2F" : path.substr(0, last) + "%2F") + path.substr(last + 1) + query,
          upper + query};
}

class ApiPermissionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "ql-perm-XXXXXX").string();
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
    ASSERT_TRUE(project.ok());
    project_id_ = project->id;
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
    members_.push_back({"root", booted->principal, "root-token-0123456789", 5});
    const std::vector<std::pair<std::string, Role>> roles = {{"nobody", Role::kNone},
                                                             {"viewer", Role::kViewer},
                                                             {"operator", Role::kOperator},
                                                             {"admin", Role::kAdmin},
                                                             {"powner", Role::kOwner}};
    for (const auto& [name, role] : roles) {
      Member m{name, AddPrincipal(name), "", static_cast<int>(role)};
      m.token = AddToken(m.principal.id);
      if (role != Role::kNone) Grant(project_id_, m.principal.id, role);
      members_.push_back(m);
    }

    ApiServerOptions options;
    options.authenticate = [this](const std::string& digest) -> Result<Authentication> {
      if (store_down_.load()) return Unavailable("store_down", "the credential store is down");
      return authenticator_->Authenticate(digest);
    };
    options.log_reader = log_reader_.get();
    ASSERT_TRUE(secrets::InitializeSecrets().ok());
    secret_key_ = std::move(secrets::FileKeyProvider::FromKey(secrets::SecretBytes::Random(32)))
                      .value();
    sealer_ = std::make_unique<secrets::EnvelopeSealer>(*secret_key_);
    secret_service_ =
        std::make_unique<SecretService>(*store_, service_->governance(), sealer_.get(), clock_);
    options.secrets = secret_service_.get();
    script_service_ =
        std::make_unique<ScriptService>(*store_, service_->governance(), clock_, ArtifactLimits{});
    options.scripts = script_service_.get();
    notify_service_ = std::make_unique<NotificationService>(*store_, service_->governance(),
                                                            *service_, clock_, random_);
    options.notify = notify_service_.get();
    sign_in_ = std::make_unique<SignInService>(service_->governance(), hasher_, clock_, random_);
    options.sign_in = sign_in_.get();
    // Pools and workers over an in-memory store: the open default pool and one worker.
    placement_repo_.AddPool("default", /*serves_all_projects=*/true);
    WorkerRecord worker;
    worker.id = Id();
    worker.name = "w1";
    worker.created_at_ms = clock_.NowMs();
    placement_repo_.AddWorker(worker);
    placement_ =
        std::make_unique<PlacementService>(placement_repo_, service_->governance(), clock_);
    options.placement = placement_.get();
    server_ = std::make_unique<ApiServer>(*service_, metrics_, options);
    ASSERT_TRUE(server_->Start("127.0.0.1", 0).ok());
    server_->SetReady(true);
  }

  void TearDown() override {
    server_.reset();
    authenticator_.reset();
    service_.reset();
    store_.reset();
    fs::remove_all(dir_);
  }

  std::string Id() { return NewUuidV7(clock_.NowMs(), random_); }

  PrincipalRecord AddPrincipal(const std::string& name) {
    CreatePrincipalCommand cmd;
    cmd.id = Id();
    cmd.name = name;
    cmd.now_ms = clock_.NowMs();
    auto created = store_->governance().CreatePrincipal(cmd);
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    return created.ok() ? *created : PrincipalRecord{};
  }

  std::string AddToken(const std::string& principal_id) {
    const std::string token = "tok-" + Id();
    CreateTokenCommand cmd;
    cmd.id = Id();
    cmd.principal_id = principal_id;
    cmd.token_digest = Sha256Hex(token);
    cmd.now_ms = clock_.NowMs();
    EXPECT_TRUE(store_->governance().CreateToken(cmd).ok());
    last_token_id_ = cmd.id;
    return token;
  }

  void Grant(const std::string& scope, const std::string& principal_id, Role role) {
    WriteBindingCommand cmd;
    cmd.scope = scope;
    cmd.subject_id = principal_id;
    cmd.role = std::string(RoleName(role));
    cmd.mutation_id = Id();
    cmd.now_ms = clock_.NowMs();
    auto written = store_->governance().WriteBinding(cmd);
    EXPECT_TRUE(written.ok()) << written.status().ToString();
  }

  Reply Send(const std::string& token, const Sample& sample) {
    httplib::Client client("127.0.0.1", server_->port());
    client.set_read_timeout(15, 0);
    client.set_default_headers({{"Authorization", "Bearer " + token}});
    httplib::Result result =
        sample.method == "GET"      ? client.Get(sample.path.c_str())
        : sample.method == "PUT"    ? client.Put(sample.path.c_str(), sample.body, "application/json")
        : sample.method == "DELETE" ? client.Delete(sample.path.c_str())
                                    : client.Post(sample.path.c_str(), sample.body, "application/json");
    Reply reply;
    if (!result) return reply;
    reply.status = result->status;
    reply.raw = result->body;
    reply.body = json::parse(result->body, nullptr, false);
    return reply;
  }

  Reply AsRoot(const Sample& sample) { return Send(members_.front().token, sample); }

  // A blob of the default project, uploaded by the system.
  BlobDescriptor script_blob() {
    Result<BlobDescriptor> blob = script_service_->Upload(Caller{}, "echo hi\n");
    EXPECT_TRUE(blob.ok()) << blob.status().ToString();
    return blob.ok() ? *blob : BlobDescriptor{};
  }
  // Pushes file script `name` of the default project as the system; returns its name.
  std::string PushedScript(const std::string& name = "sample") {
    const BlobDescriptor blob = script_blob();
    ScriptPush push;
    push.kind = "file";
    push.files = {ScriptFile{"run.sh", blob.digest, blob.size, false}};
    Result<PushScriptResult> pushed = script_service_->Push(Caller{}, name, push);
    EXPECT_TRUE(pushed.ok()) << pushed.status().ToString();
    return name;
  }

  fs::path dir_;
  testing::FakeClock clock_{1'780'000'000'000};
  testing::SeededRandom random_{11};
  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<ControlService> service_;
  std::unique_ptr<secrets::FileKeyProvider> secret_key_;
  std::unique_ptr<secrets::EnvelopeSealer> sealer_;
  std::unique_ptr<SecretService> secret_service_;
  std::unique_ptr<ScriptService> script_service_;
  std::unique_ptr<NotificationService> notify_service_;
  SodiumPasswordHasher hasher_;
  std::unique_ptr<SignInService> sign_in_;
  testing::FakePlacementRepository placement_repo_;
  std::unique_ptr<PlacementService> placement_;
  std::unique_ptr<LogReader> log_reader_;
  std::unique_ptr<TokenAuthenticator> authenticator_;
  Metrics metrics_;
  std::unique_ptr<ApiServer> server_;
  std::string project_id_;
  std::vector<Member> members_;
  std::string last_token_id_;
  std::atomic<bool> store_down_{false};

  const Member& M(const std::string& name) const {
    for (const Member& m : members_) {
      if (m.name == name) return m;
    }
    ADD_FAILURE() << "no member " << name;
    return members_.front();
  }
  int TaskCount() {
    return static_cast<int>(service_->ListTasks(PageQuery{}, Caller{}).value().items.size());
  }
  int TokensOf(const std::string& principal_id) {
    return static_cast<int>(store_->governance().ListTokens(principal_id).value().size());
  }
  // Sends the request line and headers of a POST with `token`, waits until the server has read
  // them, runs `meanwhile` and only then sends `body`; returns the raw answer.
  std::string PostWithLateBody(const std::string& token, const std::string& path,
                               const std::string& body, const std::function<void()>& meanwhile) {
    const int fd = testing::ConnectLoopback(server_->port());
    const std::string head = "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " +
                             token + "\r\nContent-Type: application/json\r\nContent-Length: " +
                             std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
    testing::SendAll(fd, head.data(), head.size());
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    meanwhile();
    testing::SendAll(fd, body.data(), body.size());
    const std::string answer = testing::ReadAnswer(fd, 5000).answer;
    ::close(fd);
    return answer;
  }
};

std::string TaskBody(const std::string& name) {
  return json{{"name", name}, {"spec", {{"command", {{"kind", "shell"}, {"command", "true"}}}}}}
      .dump();
}

// Whether `member` may call a route of `permission`.
bool Allowed(const std::string& permission, const Member& member) {
  if (permission == "public" || permission == "authenticated" || permission == "self") {
    return true;
  }
  if (permission == "installation_admin") return member.level == 5;
  static const std::map<std::string, int> kLevels = {
      {"viewer", 1}, {"operator", 2}, {"admin", 3}, {"owner", 4}};
  auto it = kLevels.find(permission);
  EXPECT_NE(it, kLevels.end()) << "unknown permission " << permission;
  return it != kLevels.end() && member.level >= it->second;
}

TEST_F(ApiPermissionsTest, EveryRouteRefusesEveryRoleBelowItsPermission) {
  // Objects the samples address, created by the installation owner.
  Reply task = AsRoot({"POST", "/api/v1/tasks", TaskBody("subject")});
  ASSERT_EQ(task.status, 201) << task.raw;
  const std::string task_id = task.body["id"];
  Reply trigger = AsRoot({"POST", "/api/v1/triggers",
                          json{{"task_id", task_id},
                               {"expression", "0 0 * * *"},
                               {"timezone", "UTC"}}
                              .dump()});
  ASSERT_EQ(trigger.status, 201) << trigger.raw;
  const std::string trigger_id = trigger.body["id"];
  Reply run = AsRoot({"POST", "/api/v1/runs", json{{"task_id", task_id}}.dump()});
  ASSERT_EQ(run.status, 201) << run.raw;
  const std::string run_id = run.body["id"];
  // A task whose runs need approval, with a request by the operator (so every approver of the
  // sample is another principal).
  json guarded_body = json::parse(TaskBody("guarded"));
  guarded_body["approval"] = {{"required", true}};
  Reply guarded = AsRoot({"POST", "/api/v1/tasks", guarded_body.dump()});
  ASSERT_EQ(guarded.status, 201) << guarded.raw;
  const std::string guarded_id = guarded.body["id"];
  Reply requested = Send(members_[3].token, {"POST", "/api/v1/tasks/" + guarded_id + "/runs", "{}"});
  ASSERT_EQ(members_[3].name, "operator");
  ASSERT_EQ(requested.status, 202) << requested.raw;
  EXPECT_EQ(requested.code(), "approval_required");
  const std::string approval_id = requested.body["approval_id"];

  int counter = 0;
  const auto fresh = [&] { return "p" + std::to_string(++counter); };
  // The channel the notification samples test, add rules to and redeliver through.
  const std::string hook = "perm-hook";
  ASSERT_TRUE(
      notify_service_->AddChannel(Caller{}, hook, "webhook", R"({"url":"https://e.test/h"})").ok());
  // One sample per route name; a lambda because some need fresh state per call.
  const std::map<std::string, std::function<Sample(const Member&)>> samples = {
      {"livez",
       [](const Member&) {
         return Sample{"GET", "/livez", ""};
       }},
      {"readyz",
       [](const Member&) {
         return Sample{"GET", "/readyz", ""};
       }},
      {"metrics",
       [](const Member&) {
         return Sample{"GET", "/metrics", ""};
       }},
      {"openapi",
       [](const Member&) {
         return Sample{"GET", "/api/v1/openapi.json", ""};
       }},
      {"whoami",
       [](const Member&) {
         return Sample{"GET", "/api/v1/whoami", ""};
       }},
      {"projects.list",
       [](const Member&) {
         return Sample{"GET", "/api/v1/projects", ""};
       }},
      {"projects.create",
       [&](const Member&) {
         return Sample{"POST", "/api/v1/projects", json{{"slug", fresh()}}.dump()};
       }},
      {"projects.get",
       [](const Member&) {
         return Sample{"GET", "/api/v1/projects/default", ""};
       }},
      {"projects.archive",
       [](const Member&) {
         return Sample{"POST", "/api/v1/projects/default/archive", "{}"};
       }},
      {"projects.bindings.list",
       [](const Member&) {
         return Sample{"GET", "/api/v1/projects/default/bindings", ""};
       }},
      {"projects.bindings.write",
       [&](const Member&) {
         const PrincipalRecord p = AddPrincipal(fresh());
         return Sample{"POST", "/api/v1/projects/default/bindings",
                       json{{"principal", p.name}, {"role", "viewer"}}.dump()};
       }},
      {"installation.bindings.list",
       [](const Member&) {
         return Sample{"GET", "/api/v1/installation/bindings", ""};
       }},
      {"installation.bindings.write",
       [&](const Member&) {
         const PrincipalRecord p = AddPrincipal(fresh());
         return Sample{"POST", "/api/v1/installation/bindings",
                       json{{"principal", p.name}, {"role", "admin"}}.dump()};
       }},
      {"principals.list",
       [](const Member&) {
         return Sample{"GET", "/api/v1/principals", ""};
       }},
      {"principals.create",
       [&](const Member&) {
         return Sample{"POST", "/api/v1/principals", json{{"name", fresh()}}.dump()};
       }},
      {"principals.get",
       [](const Member& m) {
         return Sample{"GET", "/api/v1/principals/" + m.name, ""};
       }},
      {"principals.disable",
       [&](const Member&) {
         return Sample{"POST", "/api/v1/principals/" + AddPrincipal(fresh()).name + "/disable",
                       "{}"};
       }},
      {"principals.enable",
       [&](const Member&) {
         return Sample{"POST", "/api/v1/principals/" + AddPrincipal(fresh()).name + "/enable",
                       "{}"};
       }},
      {"tokens.list",
       [](const Member&) {
         return Sample{"GET", "/api/v1/tokens", ""};
       }},
      {"tokens.create",
       [](const Member&) {
         return Sample{"POST", "/api/v1/tokens", "{}"};
       }},
      {"tokens.revoke",
       [&](const Member& m) {
         AddToken(m.principal.id);
         return Sample{"POST", "/api/v1/tokens/" + last_token_id_ + "/revoke", "{}"};
       }},
      {"audit.list",
       [](const Member&) {
         return Sample{"GET", "/api/v1/audit", ""};
       }},
      {"sign_in",
       [](const Member&) {
         return Sample{"POST", "/api/v1/sign-in", R"({"name":"nobody"})"};
       }},
      {"sign_out",
       [](const Member&) {
         return Sample{"POST", "/api/v1/sign-out", "{}"};
       }},
      {"sign_in.methods",
       [](const Member&) {
         return Sample{"GET", "/api/v1/sign-in/methods", ""};
       }},
      {"sign_in.oidc",
       [](const Member&) {
         return Sample{"GET", "/api/v1/sign-in/oidc", ""};
       }},
      {"sign_in.oidc_callback",
       [](const Member&) {
         return Sample{"GET", "/api/v1/sign-in/oidc/callback", ""};
       }},
      {"setup",
       [](const Member&) {
         return Sample{"POST", "/api/v1/setup", R"({"code":"AAAA","password":"x"})"};
       }},
      {"settings.get",
       [](const Member&) {
         return Sample{"GET", "/api/v1/settings", ""};
       }},
      {"settings.write",
       [](const Member&) {
         return Sample{"POST", "/api/v1/settings", R"({"require_second_factor":"off"})"};
       }},
      {"sessions.list",
       [](const Member&) {
         return Sample{"GET", "/api/v1/sessions", ""};
       }},
      {"sessions.revoke",
       [&](const Member& m) {
         AddToken(m.principal.id);
         return Sample{"POST", "/api/v1/sessions/" + last_token_id_ + "/revoke", "{}"};
       }},
      {"password.change",
       [](const Member&) {
         return Sample{"POST", "/api/v1/password", R"({"new_password":"short"})"};
       }},
      {"totp.enrol",
       [](const Member&) {
         return Sample{"POST", "/api/v1/totp/enrol", "{}"};
       }},
      {"totp.confirm",
       [](const Member&) {
         return Sample{"POST", "/api/v1/totp/confirm", R"({"code":"000000"})"};
       }},
      {"totp.disable",
       [](const Member&) {
         return Sample{"POST", "/api/v1/totp/disable", "{}"};
       }},
      {"principals.password",
       [&](const Member&) {
         const PrincipalRecord p = AddPrincipal(fresh());
         return Sample{"POST", "/api/v1/principals/" + p.name + "/password",
                       R"({"new_password":"a long enough phrase 9"})"};
       }},
      {"principals.password.remove",
       [&](const Member&) {
         const PrincipalRecord p = AddPrincipal(fresh());
         SetPasswordCommand set;
         set.actor = Actor{"", "setup"};
         set.principal_id = p.id;
         set.hash = "$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNo";
         set.now_ms = 1;
         EXPECT_TRUE(store_->governance().SetPassword(set).ok());
         return Sample{"DELETE", "/api/v1/principals/" + p.name + "/password", ""};
       }},
      {"tasks.create",
       [&](const Member&) {
         return Sample{"POST", "/api/v1/tasks", TaskBody(fresh())};
       }},
      {"tasks.list",
       [](const Member&) {
         return Sample{"GET", "/api/v1/tasks", ""};
       }},
      {"tasks.get",
       [&](const Member&) {
         return Sample{"GET", "/api/v1/tasks/" + task_id, ""};
       }},
      {"tasks.revisions.create",
       [&](const Member&) {
         auto head = store_->definitions().GetTaskHead(task_id);
         json body = json::parse(TaskBody("subject"));
         body["expected_revision"] = head.ok() ? head->current_revision : 1;
         return Sample{"POST", "/api/v1/tasks/" + task_id + "/revisions", body.dump()};
       }},
      {"tasks.delete",
       [&](const Member&) {
         Reply doomed = AsRoot({"POST", "/api/v1/tasks", TaskBody(fresh())});
         EXPECT_EQ(doomed.status, 201) << doomed.raw;
         return Sample{"DELETE", "/api/v1/tasks/" + doomed.body.value("id", ""), ""};
       }},
      {"tasks.enable",
       [&](const Member&) {
         json body = json::parse(TaskBody(fresh()));
         body["enabled"] = false;
         Reply off = AsRoot({"POST", "/api/v1/tasks", body.dump()});
         EXPECT_EQ(off.status, 201) << off.raw;
         return Sample{"POST", "/api/v1/tasks/" + off.body.value("id", "") + "/enable", "{}"};
       }},
      {"tasks.disable",
       [&](const Member&) {
         Reply on = AsRoot({"POST", "/api/v1/tasks", TaskBody(fresh())});
         EXPECT_EQ(on.status, 201) << on.raw;
         return Sample{"POST", "/api/v1/tasks/" + on.body.value("id", "") + "/disable", "{}"};
       }},
      {"tasks.revisions.list",
       [&](const Member&) {
         return Sample{"GET", "/api/v1/tasks/" + task_id + "/revisions", ""};
       }},
      {"triggers.create",
       [&](const Member&) {
         return Sample{"POST", "/api/v1/triggers",
                       json{{"task_id", task_id}, {"expression", "0 1 * * *"}, {"timezone", "UTC"}}
                           .dump()};
       }},
      {"triggers.list",
       [](const Member&) {
         return Sample{"GET", "/api/v1/triggers", ""};
       }},
      {"triggers.get",
       [&](const Member&) {
         return Sample{"GET", "/api/v1/triggers/" + trigger_id, ""};
       }},
      {"triggers.enable",
       [&](const Member&) {
         return Sample{"POST", "/api/v1/triggers/" + trigger_id + "/enable", "{}"};
       }},
      {"triggers.disable",
       [&](const Member&) {
         return Sample{"POST", "/api/v1/triggers/" + trigger_id + "/disable", "{}"};
       }},
      {"triggers.repin",
       [&](const Member&) {
         return Sample{"POST", "/api/v1/triggers/" + trigger_id + "/repin", "{}"};
       }},
      {"triggers.revisions.create",
       [&](const Member&) {
         auto head = store_->definitions().GetTriggerHead(trigger_id);
         json body{{"expected_revision", head.ok() ? head->current_revision : 1},
                   {"expression", "0 2 * * *"}};
         return Sample{"POST", "/api/v1/triggers/" + trigger_id + "/revisions", body.dump()};
       }},
      {"triggers.delete",
       [&](const Member&) {
         Reply doomed = AsRoot({"POST", "/api/v1/triggers",
                                json{{"task_id", task_id},
                                     {"expression", "0 3 * * *"},
                                     {"timezone", "UTC"}}
                                    .dump()});
         EXPECT_EQ(doomed.status, 201) << doomed.raw;
         return Sample{"DELETE", "/api/v1/triggers/" + doomed.body.value("id", ""), ""};
       }},
      {"triggers.next",
       [&](const Member&) {
         return Sample{"GET", "/api/v1/triggers/" + trigger_id + "/next", ""};
       }},
      {"cron.next",
       [](const Member&) {
         return Sample{"GET", "/api/v1/cron/next?expression=0+0+*+*+*&timezone=UTC", ""};
       }},
      {"runs.list",
       [](const Member&) {
         return Sample{"GET", "/api/v1/runs", ""};
       }},
      {"runs.create",
       [&](const Member&) {
         return Sample{"POST", "/api/v1/runs", json{{"task_id", task_id}}.dump()};
       }},
      {"runs.get",
       [&](const Member&) {
         return Sample{"GET", "/api/v1/runs/" + run_id, ""};
       }},
      {"runs.events",
       [&](const Member&) {
         return Sample{"GET", "/api/v1/runs/" + run_id + "/events", ""};
       }},
      {"runs.log",
       [&](const Member&) {
         return Sample{"GET", "/api/v1/runs/" + run_id + "/log", ""};
       }},
      {"runs.log.search",
       [&](const Member&) {
         return Sample{"GET", "/api/v1/runs/" + run_id + "/log/search?q=x", ""};
       }},
      {"runs.cancel",
       [&](const Member&) {
         return Sample{"POST", "/api/v1/runs/" + run_id + "/cancel", "{}"};
       }},
      {"runs.retry",
       [&](const Member&) {
         return Sample{"POST", "/api/v1/runs/" + run_id + "/retry", "{}"};
       }},
      {"status",
       [](const Member&) {
         return Sample{"GET", "/api/v1/status", ""};
       }},
      {"runs.resolve",
       [&](const Member&) {
         return Sample{"POST", "/api/v1/runs/" + run_id + "/resolve",
                       json{{"resolution", "failed"}, {"reason", "checked"}}.dump()};
       }},
      {"tasks.runs.create",
       [&](const Member&) {
         return Sample{"POST", "/api/v1/tasks/" + task_id + "/runs", "{}"};
       }},
      {"approvals.list",
       [](const Member&) {
         return Sample{"GET", "/api/v1/approvals", ""};
       }},
      {"approvals.get",
       [&](const Member&) {
         return Sample{"GET", "/api/v1/approvals/" + approval_id, ""};
       }},
      {"approvals.approve",
       [&](const Member&) {
         return Sample{"POST", "/api/v1/approvals/" + approval_id + "/approve", "{}"};
       }},
      {"approvals.reject",
       [&](const Member&) {
         return Sample{"POST", "/api/v1/approvals/" + approval_id + "/reject",
                       json{{"reason", "not now"}}.dump()};
       }},
      {"projects.retention.get",
       [](const Member&) {
         return Sample{"GET", "/api/v1/projects/default/retention", ""};
       }},
      {"projects.retention.set",
       [](const Member&) {
         return Sample{"POST", "/api/v1/projects/default/retention", R"({"keep_days":60})"};
       }},
      {"tasks.retention.get",
       [&](const Member&) {
         return Sample{"GET", "/api/v1/tasks/" + task_id + "/retention", ""};
       }},
      {"tasks.retention.set",
       [&](const Member&) {
         return Sample{"POST", "/api/v1/tasks/" + task_id + "/retention", R"({"keep_runs":50})"};
       }},
      {"notify.channels.list",
       [](const Member&) {
         return Sample{"GET", "/api/v1/notify/channels", ""};
       }},
      {"notify.channels.create",
       [&](const Member&) {
         return Sample{"POST", "/api/v1/notify/channels",
                       json{{"name", fresh()},
                            {"type", "webhook"},
                            {"config", {{"url", "https://example.test/hook"}}}}
                           .dump()};
       }},
      {"notify.channels.delete",
       [&](const Member&) {
         const std::string name = fresh();
         EXPECT_TRUE(
             notify_service_->AddChannel(Caller{}, name, "webhook", R"({"url":"https://e.test/h"})")
                 .ok());
         return Sample{"DELETE", "/api/v1/notify/channels/" + name, ""};
       }},
      {"notify.channels.test",
       [&](const Member&) {
         return Sample{"POST", "/api/v1/notify/channels/" + hook + "/test", "{}"};
       }},
      {"notify.rules.list",
       [](const Member&) {
         return Sample{"GET", "/api/v1/notify/rules", ""};
       }},
      {"notify.rules.create",
       [&](const Member&) {
         return Sample{"POST", "/api/v1/notify/rules",
                       json{{"channel", hook}, {"event", "failed"}}.dump()};
       }},
      {"notify.rules.delete",
       [&](const Member&) {
         Result<RuleRecord> rule = notify_service_->AddRule(Caller{}, {hook, "recovered"});
         EXPECT_TRUE(rule.ok()) << rule.status().ToString();
         return Sample{"DELETE", "/api/v1/notify/rules/" + (rule.ok() ? rule->id : ""), ""};
       }},
      {"notify.deliveries.list",
       [](const Member&) {
         return Sample{"GET", "/api/v1/notify/deliveries", ""};
       }},
      {"notify.deliveries.redeliver",
       [&](const Member&) {
         // A dead test message: queued, claimed and given up.
         Result<OutboxRecord> row = notify_service_->TestChannel(Caller{}, hook);
         EXPECT_TRUE(row.ok()) << row.status().ToString();
         Result<std::vector<ClaimedDelivery>> claimed =
             store_->notifications().ClaimDueDeliveries("perm", clock_.NowMs(), 60'000, 100);
         EXPECT_TRUE(claimed.ok());
         for (const ClaimedDelivery& c : *claimed) {
           EXPECT_TRUE(store_->notifications()
                           .RecordDelivery(DeliveryResult{c.row.id, "perm", false, std::nullopt,
                                                          500, "refused", 1, clock_.NowMs()})
                           .ok());
         }
         return Sample{
             "POST", "/api/v1/notify/deliveries/" + (row.ok() ? row->id : "") + "/redeliver", "{}"};
       }},
      {"secrets.list",
       [](const Member&) {
         return Sample{"GET", "/api/v1/secrets", ""};
       }},
      {"secrets.put",
       [&](const Member&) {
         return Sample{"PUT", "/api/v1/secrets/" + fresh(), json{{"value", "v4lue"}}.dump()};
       }},
      {"secrets.delete",
       [&](const Member&) {
         const std::string name = fresh();
         EXPECT_TRUE(secret_service_->Set(Caller{}, name, "v4lue").ok());
         return Sample{"DELETE", "/api/v1/secrets/" + name, ""};
       }},
      {"blobs.upload",
       [](const Member&) {
         return Sample{"POST", "/api/v1/blobs", "bytes"};
       }},
      {"blobs.compose",
       [](const Member&) {
         return Sample{"POST", "/api/v1/blobs/compose", json{{"pieces", json::array()}}.dump()};
       }},
      {"blobs.get",
       [&](const Member&) {
         return Sample{"GET", "/api/v1/blobs/" + script_blob().digest, ""};
       }},
      {"scripts.list",
       [](const Member&) {
         return Sample{"GET", "/api/v1/scripts", ""};
       }},
      {"scripts.get",
       [&](const Member&) {
         return Sample{"GET", "/api/v1/scripts/" + PushedScript(), ""};
       }},
      {"scripts.versions.list",
       [&](const Member&) {
         return Sample{"GET", "/api/v1/scripts/" + PushedScript() + "/versions", ""};
       }},
      {"scripts.content",
       [&](const Member&) {
         return Sample{"GET", "/api/v1/scripts/" + PushedScript() + "/content", ""};
       }},
      {"scripts.push",
       [&](const Member&) {
         const BlobDescriptor blob = script_blob();
         return Sample{
             "POST", "/api/v1/scripts/" + fresh() + "/versions",
             json{{"kind", "file"},
                  {"files",
                   json::array(
                       {json{{"path", "run.sh"}, {"digest", blob.digest}, {"size", blob.size}}})}}
                 .dump()};
       }},
      {"scripts.delete",
       [&](const Member&) {
         return Sample{"DELETE", "/api/v1/scripts/" + PushedScript(fresh()), ""};
       }},
      {"pools.list",
       [](const Member&) {
         return Sample{"GET", "/api/v1/pools", ""};
       }},
      {"pools.get",
       [](const Member&) {
         return Sample{"GET", "/api/v1/pools/default", ""};
       }},
      {"pools.set",
       [&](const Member&) {
         return Sample{"POST", "/api/v1/pools/" + fresh(),
                       R"({"serves_all_projects":true,"max_running":5})"};
       }},
      {"pools.grant",
       [&](const Member&) {
         return Sample{"POST", "/api/v1/pools/" + fresh() + "/grants",
                       R"({"project":"default","max_running":2,"weight":3})"};
       }},
      {"pools.revoke",
       [&](const Member&) {
         PoolGrantRecord grant;
         grant.pool = fresh();
         grant.project_id = project_id_;
         placement_repo_.AddGrant(grant);
         return Sample{"POST", "/api/v1/pools/" + grant.pool + "/revoke",
                       R"({"project":"default"})"};
       }},
      {"workers.list",
       [](const Member&) {
         return Sample{"GET", "/api/v1/workers", ""};
       }},
      {"workers.get",
       [](const Member&) {
         return Sample{"GET", "/api/v1/workers/w1", ""};
       }},
      {"workers.drain",
       [](const Member&) {
         return Sample{"POST", "/api/v1/workers/w1/drain", "{}"};
       }},
      {"workers.resume",
       [](const Member&) {
         return Sample{"POST", "/api/v1/workers/w1/resume", ""};
       }},
  };

  std::vector<ApiRoute> routes = ApiRoutes();
  // Archiving the project ends every other write there: check it last.
  std::stable_partition(routes.begin(), routes.end(),
                        [](const ApiRoute& r) { return r.name != "projects.archive"; });
  for (const ApiRoute& route : routes) {
    SCOPED_TRACE(route.method + " " + route.pattern + " (" + route.permission + ")");
    auto sample = samples.find(route.name);
    if (sample == samples.end()) {
      ADD_FAILURE() << "route " << route.name << " has no permission sample in this test";
      continue;
    }
    for (const Member& member : members_) {
      SCOPED_TRACE("as " + member.name);
      const Sample request = sample->second(member);
      // The same request spelt otherwise reaches no route, whoever asks: the matcher that
      // authorizes is the one that dispatches, and it knows only the canonical path.
      for (const std::string& variant : PathVariants(request.path)) {
        const Reply other = Send(member.token, Sample{request.method, variant, request.body});
        EXPECT_EQ(other.status, 404) << variant << " " << other.raw;
        EXPECT_EQ(other.code(), "route_not_found") << variant << " " << other.raw;
      }
      const Reply reply = Send(member.token, request);
      ASSERT_GT(reply.status, 0) << "no answer";
      if (Allowed(route.permission, member)) {
        EXPECT_NE(reply.status, 401) << reply.raw;
        EXPECT_NE(reply.status, 403) << reply.raw;
        if (member.level > 0) {
          EXPECT_NE(reply.code(), "hidden") << reply.raw;
        }
      } else {
        // A principal with no role in the project does not learn that an object exists.
        EXPECT_TRUE(reply.status == 403 || (reply.status == 404 && member.level == 0))
            << reply.status << " " << reply.raw;
        if (reply.status == 403 && route.name == "approvals.approve" &&
            member.principal.id == members_[3].principal.id) {
          // The requester is refused as such before its role is weighed.
          EXPECT_EQ(reply.code(), "approval_self") << reply.raw;
        } else if (reply.status == 403) {
          EXPECT_EQ(reply.code(), "permission_denied") << reply.raw;
          EXPECT_NE(reply.body.value("message", "").find("role"), std::string::npos) << reply.raw;
        }
      }
    }
  }
}

TEST_F(ApiPermissionsTest, AViewerCannotReadAnotherProjectsRunsOrLogs) {
  Reply other = AsRoot({"POST", "/api/v1/projects", json{{"slug", "other"}}.dump()});
  ASSERT_EQ(other.status, 201) << other.raw;
  Reply task = AsRoot({"POST", "/api/v1/tasks?project=other", TaskBody("secret-job")});
  ASSERT_EQ(task.status, 201) << task.raw;
  EXPECT_EQ(task.body["project_id"], other.body["id"]);
  Reply run = AsRoot({"POST", "/api/v1/runs?project=other",
                      json{{"task_id", task.body["id"]}}.dump()});
  ASSERT_EQ(run.status, 201) << run.raw;
  const std::string run_id = run.body["id"];

  const Member& viewer = members_[2];
  ASSERT_EQ(viewer.name, "viewer");
  EXPECT_EQ(Send(viewer.token, {"GET", "/api/v1/runs/" + run_id, ""}).status, 404);
  EXPECT_EQ(Send(viewer.token, {"GET", "/api/v1/runs/" + run_id + "/log", ""}).status, 404);
  EXPECT_EQ(Send(viewer.token, {"GET", "/api/v1/runs/" + run_id + "/events", ""}).status, 404);
  Reply listed = Send(viewer.token, {"GET", "/api/v1/runs?project=other", ""});
  EXPECT_EQ(listed.status, 403) << listed.raw;
  EXPECT_EQ(listed.code(), "permission_denied");
  // Its own project's listing does not show the other project's run either.
  Reply own = Send(viewer.token, {"GET", "/api/v1/runs", ""});
  ASSERT_EQ(own.status, 200) << own.raw;
  for (const json& r : own.body["items"]) EXPECT_NE(r["id"], run_id);
  // And the project list shows only its own project.
  Reply projects = Send(viewer.token, {"GET", "/api/v1/projects", ""});
  ASSERT_EQ(projects.status, 200);
  ASSERT_EQ(projects.body["items"].size(), 1u);
  EXPECT_EQ(projects.body["items"][0]["slug"], "default");
}

TEST_F(ApiPermissionsTest, DenialsAndFailedAuthenticationsAreAudited) {
  const Member& viewer = members_[2];
  // Audit ids are ordered by their millisecond: make these two the newest.
  clock_.Advance(1000);
  EXPECT_EQ(Send(viewer.token, {"POST", "/api/v1/tasks", TaskBody("nope")}).status, 403);
  EXPECT_EQ(Send("wrong-token-000000", {"GET", "/api/v1/tasks", ""}).status, 401);
  Reply audit = AsRoot({"GET", "/api/v1/audit?limit=10", ""});
  ASSERT_EQ(audit.status, 200) << audit.raw;
  bool denied = false;
  bool failed = false;
  for (const json& fact : audit.body["items"]) {
    if (fact["action"] == "permission.denied" && fact["actor_id"] == viewer.principal.id) {
      denied = true;
      EXPECT_EQ(fact["code"], "permission_denied");
    }
    if (fact["action"] == "auth.failed") {
      failed = true;
      EXPECT_TRUE(fact["actor_id"].is_null());
    }
    // No fact ever carries a token.
    EXPECT_EQ(fact.dump().find("wrong-token"), std::string::npos);
    EXPECT_EQ(fact.dump().find(viewer.token), std::string::npos);
  }
  EXPECT_TRUE(denied) << audit.raw;
  EXPECT_TRUE(failed) << audit.raw;
}

}  // namespace
}  // namespace ql

namespace ql {
namespace {

// The QingLong 2.x class of bug: a token that dies while its body is in flight must not leave
// the request acting as the system. A principal without any role mints itself a 2.5 s token,
// then asks with it for a token of the installation owner and sends the body 4 s late.
TEST_F(ApiPermissionsTest, ATokenThatExpiresWhileItsBodyIsInFlightIsRefusedAndWritesNothing) {
  Reply minted = Send(M("nobody").token, {"POST", "/api/v1/tokens", R"({"expires_in_ms":2500})"});
  ASSERT_EQ(minted.status, 201) << minted.raw;
  const std::string short_token = minted.body.value("token", "");
  const int owner_tokens = TokensOf(M("root").principal.id);
  const std::string answer = PostWithLateBody(short_token, "/api/v1/tokens",
                                              R"({"principal":"root"})",
                                              [&] { clock_.Advance(4000); });
  EXPECT_NE(answer.find("HTTP/1.1 401"), std::string::npos) << answer;
  EXPECT_NE(answer.find("expired or was revoked while the request was in flight"),
            std::string::npos)
      << answer;
  EXPECT_EQ(TokensOf(M("root").principal.id), owner_tokens) << "no token of the owner was made";
}

TEST_F(ApiPermissionsTest, ATokenRevokedWhileItsBodyIsInFlightIsRefused) {
  const std::string token = AddToken(M("admin").principal.id);
  const std::string token_id = last_token_id_;
  const int before = TaskCount();
  const std::string answer =
      PostWithLateBody(token, "/api/v1/tasks", TaskBody("late"), [&] {
        ASSERT_TRUE(store_->governance().RevokeToken(Actor{}, token_id, clock_.NowMs()).ok());
        clock_.Advance(2500);  // past the authentication cache's bound
      });
  EXPECT_NE(answer.find("HTTP/1.1 401"), std::string::npos) << answer;
  EXPECT_EQ(TaskCount(), before);
}

TEST_F(ApiPermissionsTest, ACredentialStoreFailingWhileTheBodyIsInFlightAnswers503AndWritesNothing) {
  const int before = TaskCount();
  const std::string answer = PostWithLateBody(M("admin").token, "/api/v1/tasks",
                                              TaskBody("late"), [&] { store_down_ = true; });
  store_down_ = false;
  EXPECT_NE(answer.find("HTTP/1.1 503"), std::string::npos) << answer;
  EXPECT_NE(answer.find("credentials_unavailable"), std::string::npos) << answer;
  EXPECT_EQ(TaskCount(), before);
}

// Minting or revoking a token of another principal needs a rank at least that principal's.
TEST_F(ApiPermissionsTest, AnInstallationAdminMintsAndRevokesNoTokenOfAHigherRank) {
  Member iadmin{"iadmin", AddPrincipal("iadmin"), "", 5};
  iadmin.token = AddToken(iadmin.principal.id);
  Grant(std::string(kInstallationScope), iadmin.principal.id, Role::kAdmin);
  const int owner_tokens = TokensOf(M("root").principal.id);
  Reply for_owner = Send(iadmin.token, {"POST", "/api/v1/tokens", R"({"principal":"root"})"});
  EXPECT_EQ(for_owner.status, 403) << for_owner.raw;
  EXPECT_EQ(for_owner.body.value("code", ""), "rank_too_low") << for_owner.raw;
  Reply for_project_owner =
      Send(iadmin.token, {"POST", "/api/v1/tokens", R"({"principal":"powner"})"});
  EXPECT_EQ(for_project_owner.status, 403) << for_project_owner.raw;
  EXPECT_EQ(TokensOf(M("root").principal.id), owner_tokens);
  const std::string root_token_id =
      store_->governance().ListTokens(M("root").principal.id).value().front().id;
  Reply revoke =
      Send(iadmin.token, {"POST", "/api/v1/tokens/" + root_token_id + "/revoke", "{}"});
  EXPECT_EQ(revoke.status, 403) << revoke.raw;
  EXPECT_FALSE(
      store_->governance().ListTokens(M("root").principal.id).value().front().revoked_at_ms);
  // Below its rank it may.
  Reply for_viewer = Send(iadmin.token, {"POST", "/api/v1/tokens", R"({"principal":"viewer"})"});
  EXPECT_EQ(for_viewer.status, 201) << for_viewer.raw;
  // The installation owner may mint for anyone.
  Reply by_owner = AsRoot({"POST", "/api/v1/tokens", R"({"principal":"iadmin"})"});
  EXPECT_EQ(by_owner.status, 201) << by_owner.raw;
}

// A token minted with a token expires no later than it.
TEST_F(ApiPermissionsTest, AChildTokenNeverOutlivesItsParent) {
  Reply parent =
      Send(M("viewer").token, {"POST", "/api/v1/tokens", R"({"expires_in_ms":60000})"});
  ASSERT_EQ(parent.status, 201) << parent.raw;
  const std::string parent_expiry = parent.body.value("expires_at", "");
  ASSERT_FALSE(parent_expiry.empty()) << parent.raw;
  const std::string parent_token = parent.body.value("token", "");
  for (const std::string& body :
       {std::string("{}"), std::string(R"({"expires_in_ms":86400000})")}) {
    Reply child = Send(parent_token, {"POST", "/api/v1/tokens", body});
    ASSERT_EQ(child.status, 201) << child.raw;
    EXPECT_EQ(child.body.value("expires_at", ""), parent_expiry) << child.raw;
  }
  Reply shorter =
      Send(parent_token, {"POST", "/api/v1/tokens", R"({"expires_in_ms":1000})"});
  ASSERT_EQ(shorter.status, 201);
  EXPECT_NE(shorter.body.value("expires_at", ""), parent_expiry);
}

}  // namespace
}  // namespace ql

namespace ql {
namespace {

// A principal hammering a route it may not call cannot grow the audit without bound: at most 20
// refusals a second become facts, and the rest are counted in one `suppressed` fact.
TEST_F(ApiPermissionsTest, RefusalsAreAuditedAtABoundedRateAndTheRestAreCounted) {
  clock_.Advance(5000);
  auto count = [&](const std::string& action) {
    PageRequest request;
    request.limit = 1000;
    Page<AuditRecord> page = store_->governance().ListAudit(request).value();
    int n = 0;
    std::string last_target;
    for (const AuditRecord& fact : page.items) {
      if (fact.action == action) {
        ++n;
        if (last_target.empty()) last_target = fact.target_id;
      }
    }
    return std::make_pair(n, last_target);
  };
  const int before = count("permission.denied").first;
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(Send(M("viewer").token, {"POST", "/api/v1/tasks", TaskBody("nope")}).status, 403);
  }
  EXPECT_EQ(count("permission.denied").first - before, 20);
  clock_.Advance(1000);
  EXPECT_EQ(Send(M("viewer").token, {"POST", "/api/v1/tasks", TaskBody("nope")}).status, 403);
  const auto [summaries, left_out] = count("permission.denied.suppressed");
  EXPECT_EQ(summaries, 1);
  EXPECT_EQ(left_out, "30") << "every refusal is accounted for";
  EXPECT_EQ(count("permission.denied").first - before, 21);
}

}  // namespace
}  // namespace ql

namespace ql {
namespace {

// Status counts what the caller may see: the runs and triggers of the project it asked about.
// Enabling an enabled task (or disabling a disabled one) changes nothing, but the answer is
// still the admin's to have: a lower role is refused before the no-op is known.
TEST_F(ApiPermissionsTest, ANoOpEnableIsRefusedBelowAdminLikeAnyOther) {
  Reply task = AsRoot({"POST", "/api/v1/tasks", TaskBody("already-on")});
  ASSERT_EQ(task.status, 201) << task.raw;
  const std::string path = "/api/v1/tasks/" + task.body.value("id", "") + "/enable";
  for (const Member& member : members_) {
    Reply reply = Send(member.token, {"POST", path, "{}"});
    if (member.level >= 3) {
      EXPECT_EQ(reply.status, 200) << member.name << ": " << reply.raw;
    } else {
      EXPECT_EQ(reply.status, member.level == 0 ? 404 : 403) << member.name << ": " << reply.raw;
    }
  }
}

TEST_F(ApiPermissionsTest, StatusCountsOnlyTheProjectAskedAbout) {
  ASSERT_EQ(AsRoot({"POST", "/api/v1/projects", R"({"slug":"hidden"})"}).status, 201);
  Reply task = AsRoot({"POST", "/api/v1/tasks?project=hidden", TaskBody("secretive")});
  ASSERT_EQ(task.status, 201) << task.raw;
  const std::string task_id = task.body.value("id", "");
  for (int i = 0; i < 3; ++i) {
    Reply run = AsRoot({"POST", "/api/v1/runs?project=hidden",
                        json{{"task_id", task_id}}.dump()});
    ASSERT_EQ(run.status, 201) << run.raw;
  }
  ASSERT_EQ(AsRoot({"POST", "/api/v1/triggers?project=hidden",
                    json{{"task_id", task_id}, {"expression", "* * * * *"}, {"timezone", "UTC"}}
                        .dump()})
                .status,
            201);
  Reply seen = Send(M("viewer").token, {"GET", "/api/v1/status", ""});
  ASSERT_EQ(seen.status, 200) << seen.raw;
  EXPECT_EQ(seen.body.value("runs_total", -1), 0) << seen.raw;
  EXPECT_EQ(seen.body.value("enabled_triggers", -1), 0) << seen.raw;
  Reply there = AsRoot({"GET", "/api/v1/status?project=hidden", ""});
  EXPECT_EQ(there.body.value("runs_total", -1), 3) << there.raw;
  EXPECT_EQ(there.body.value("enabled_triggers", -1), 1) << there.raw;
}

}  // namespace
}  // namespace ql
