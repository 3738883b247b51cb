// People sign in over real sockets against a real SQLite store and real Argon2id: passwords,
// sessions as HttpOnly cookies with CSRF defence, lock-out, no account enumeration, sessions
// that end, and the password routes.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "ql/core/digest.h"
#include "ql/core/ids.h"
#include "ql/core/rfc3339.h"
#include "ql/core/totp.h"
#include "ql/engine/control_service.h"
#include "ql/engine/log_reader.h"
#include "ql/engine/metrics.h"
#include "ql/engine/sign_in_service.h"
#include "ql/engine/token_authenticator.h"
#include "ql/http/api_server.h"
#include "ql/http/httplib_config.h"
#include "ql/secrets/password_hasher.h"
#include "ql/storage/sqlite/sqlite_store.h"
#include "ql/testing/fake_clock.h"

namespace ql {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kOwnerToken[] = "owner-token-0123456789abcdef";
constexpr char kAlicePassword[] = "correct horse battery staple";

struct Answer {
  int status = 0;
  json body;
  httplib::Headers headers;
  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? std::string() : it->second;
  }
  std::string code() const { return body.is_object() ? body.value("code", "") : ""; }
};

class ApiSignInTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "ql-signin-XXXXXX").string();
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
    BootstrapCommand boot;
    boot.principal_id = NewUuidV7(clock_.NowMs(), random_);
    boot.token_id = NewUuidV7(clock_.NowMs(), random_);
    boot.token_digest = Sha256Hex(kOwnerToken);
    boot.mutation_id = "bootstrap";
    boot.now_ms = clock_.NowMs();
    ASSERT_TRUE(store_->governance().Bootstrap(boot).ok());
    authenticator_ = std::make_unique<TokenAuthenticator>(store_->governance(), clock_);
    SignInOptions sign_in_options;
    sign_in_options.lock_after = 5;
    // Short enough that an idle bound under the once-a-minute use record is exercised.
    sign_in_options.panel_idle_ms = 40'000;
    sign_in_service_ = std::make_unique<SignInService>(service_->governance(), hasher_, clock_,
                                                       random_, sign_in_options);
    ApiServerOptions options;
    options.authenticate = [this](const std::string& digest) {
      return authenticator_->Authenticate(digest);
    };
    options.log_reader = log_reader_.get();
    options.sign_in = sign_in_service_.get();
    options.forget_token = [this](const std::string& digest) { authenticator_->Forget(digest); };
    server_ = std::make_unique<ApiServer>(*service_, metrics_, options);
    ASSERT_TRUE(server_->Start("127.0.0.1", 0).ok());
    server_->SetReady(true);
    // Alice, a viewer of the default project, with a password set by the owner.
    ASSERT_EQ(
        Call("POST", "/api/v1/principals", json{{"name", "alice"}}, Bearer(kOwnerToken)).status,
        201);
    ASSERT_EQ(Call("POST", "/api/v1/projects/default/bindings",
                   json{{"principal", "alice"}, {"role", "viewer"}}, Bearer(kOwnerToken))
                  .status,
              201);
    Answer set = Call("POST", "/api/v1/principals/alice/password",
                      json{{"new_password", kAlicePassword}}, Bearer(kOwnerToken));
    ASSERT_EQ(set.status, 200) << set.body.dump();
  }

  void TearDown() override {
    server_.reset();
    fs::remove_all(dir_);
  }

  static httplib::Headers Bearer(const std::string& token) {
    return {{"Authorization", "Bearer " + token}};
  }

  Answer Call(const std::string& method, const std::string& path, const json& body,
              const httplib::Headers& headers = {}) {
    httplib::Client client("127.0.0.1", server_->port());
    client.set_read_timeout(10, 0);
    httplib::Result result =
        method == "GET" ? client.Get(path.c_str(), headers)
                        : client.Post(path.c_str(), headers, body.is_null() ? "" : body.dump(),
                                      "application/json");
    Answer out;
    if (!result) return out;
    out.status = result->status;
    out.headers = result->headers;
    out.body = json::parse(result->body, nullptr, false);
    return out;
  }

  Answer SignIn(const std::string& name, const std::string& password,
                const std::string& client = "panel") {
    return Call("POST", "/api/v1/sign-in",
                json{{"name", name}, {"password", password}, {"client", client}});
  }

  // The session cookie ("ql_session=...") of a panel sign-in's Set-Cookie.
  static std::string CookieOf(const Answer& answer) {
    const std::string set = answer.Header("Set-Cookie");
    return set.substr(0, set.find(';'));
  }

  fs::path dir_;
  testing::FakeClock clock_{ParseRfc3339("2026-01-01T00:00:00Z").value()};
  testing::SeededRandom random_{11};
  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<ControlService> service_;
  std::unique_ptr<LogReader> log_reader_;
  std::unique_ptr<TokenAuthenticator> authenticator_;
  SodiumPasswordHasher hasher_;
  std::unique_ptr<SignInService> sign_in_service_;
  Metrics metrics_;
  std::unique_ptr<ApiServer> server_;
};

TEST_F(ApiSignInTest, APasswordSignInGivesAnHttpOnlyStrictCookieThatNeedsCsrfToWrite) {
  const Answer signed_in = SignIn("alice", kAlicePassword);
  ASSERT_EQ(signed_in.status, 200) << signed_in.body.dump();
  const std::string set_cookie = signed_in.Header("Set-Cookie");
  EXPECT_THAT(set_cookie, StartsWith("ql_session=qls_"));
  EXPECT_THAT(set_cookie, HasSubstr("HttpOnly"));
  EXPECT_THAT(set_cookie, HasSubstr("SameSite=Strict"));
  EXPECT_THAT(set_cookie, HasSubstr("Path=/"));
  EXPECT_FALSE(signed_in.body.contains("token")) << "the panel's session stays in the cookie";
  const std::string csrf = signed_in.body.value("csrf_token", "");
  ASSERT_EQ(csrf.size(), 32u);
  const httplib::Headers cookie = {{"Cookie", CookieOf(signed_in)}};

  // Reads work with the cookie alone.
  const Answer who = Call("GET", "/api/v1/whoami", nullptr, cookie);
  ASSERT_EQ(who.status, 200) << who.body.dump();
  EXPECT_EQ(who.body["principal"]["name"], "alice");
  EXPECT_EQ(who.body["session"]["kind"], "session");
  EXPECT_EQ(who.body["session"]["csrf_token"], csrf);

  // A write by cookie without the CSRF token, with a wrong one, or from another site is refused
  // before anything is done.
  const json token_body = json::object();
  EXPECT_EQ(Call("POST", "/api/v1/tokens", token_body, cookie).code(), "csrf_failed");
  httplib::Headers wrong = cookie;
  wrong.emplace("X-QL-CSRF", std::string(32, '0'));
  EXPECT_EQ(Call("POST", "/api/v1/tokens", token_body, wrong).code(), "csrf_failed");
  httplib::Headers cross = cookie;
  cross.emplace("X-QL-CSRF", csrf);
  cross.emplace("Sec-Fetch-Site", "cross-site");
  EXPECT_EQ(Call("POST", "/api/v1/tokens", token_body, cross).code(), "csrf_failed");
  httplib::Headers good = cookie;
  good.emplace("X-QL-CSRF", csrf);
  good.emplace("Sec-Fetch-Site", "same-origin");
  EXPECT_EQ(Call("POST", "/api/v1/tokens", token_body, good).status, 201);

  // Signing out ends the session; the cookie is cleared.
  const Answer out = Call("POST", "/api/v1/sign-out", json::object(), good);
  EXPECT_EQ(out.status, 200) << out.body.dump();
  EXPECT_THAT(out.Header("Set-Cookie"), HasSubstr("Max-Age=0"));
  clock_.Advance(3'000);  // past the authentication cache
  EXPECT_EQ(Call("GET", "/api/v1/whoami", nullptr, cookie).status, 401);
}

TEST_F(ApiSignInTest, WrongPasswordsAndUnknownNamesGetOneAnswerAndLockTheAccount) {
  const Answer unknown = SignIn("nobody", "whatever whatever");
  const Answer wrong = SignIn("alice", "not her password");
  EXPECT_EQ(unknown.status, 401);
  EXPECT_EQ(wrong.status, 401);
  EXPECT_EQ(unknown.body, wrong.body) << "no account enumeration";
  EXPECT_EQ(unknown.code(), "sign_in_failed");

  // Both take an Argon2id check: their times are alike.
  auto timed = [&](const std::string& name) {
    const auto start = std::chrono::steady_clock::now();
    SignIn(name, "wrong wrong wrong");
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
        .count();
  };
  double unknown_ms = 0, known_ms = 0;
  for (int i = 0; i < 2; ++i) {
    unknown_ms += timed("nobody");
    known_ms += timed("alice");
  }
  EXPECT_GT(unknown_ms, 0.4 * known_ms);
  EXPECT_LT(unknown_ms, 2.5 * known_ms);

  // Alice has had 3 wrong attempts (1 + 2); two more lock her out (lock_after 5), and then her
  // right password fails the same way.
  EXPECT_EQ(SignIn("alice", "still wrong").status, 401);
  EXPECT_EQ(SignIn("alice", "still wrong").status, 401);
  const Answer locked = SignIn("alice", kAlicePassword);
  EXPECT_EQ(locked.status, 401);
  EXPECT_EQ(locked.body, wrong.body);
  // After the lock (15 minutes) she gets in.
  clock_.Advance(15 * 60 * 1000 + 1);
  EXPECT_EQ(SignIn("alice", kAlicePassword).status, 200);
  // Every attempt and the lock-out are audit facts.
  const Answer audit = Call("GET", "/api/v1/audit?limit=200", nullptr, Bearer(kOwnerToken));
  ASSERT_EQ(audit.status, 200) << audit.body.dump();
  int failed = 0, lockouts = 0, ok = 0;
  for (const json& fact : audit.body["items"]) {
    if (fact["action"] == "auth.sign_in" && fact["outcome"] == "failed") ++failed;
    if (fact["action"] == "auth.sign_in" && fact["outcome"] == "ok") ++ok;
    if (fact["action"] == "auth.lockout") ++lockouts;
  }
  EXPECT_EQ(failed, 6);  // five wrong, one while locked
  EXPECT_EQ(lockouts, 1);
  EXPECT_EQ(ok, 1);
}

TEST_F(ApiSignInTest, AnotherSitesFormCannotSignAnyoneIn) {
  // A cross-site form post (text/plain can carry a JSON-looking body) and a cross-site fetch are
  // refused before the password is looked at; the server's own page and programs get in.
  httplib::Client client("127.0.0.1", server_->port());
  const std::string body =
      json{{"name", "alice"}, {"password", kAlicePassword}, {"client", "panel"}}.dump();
  httplib::Result form =
      client.Post("/api/v1/sign-in", {{"Sec-Fetch-Site", "cross-site"}}, body, "text/plain");
  ASSERT_TRUE(form);
  EXPECT_EQ(form->status, 403);
  EXPECT_TRUE(form->get_header_value("Set-Cookie").empty());
  httplib::Result plain = client.Post("/api/v1/sign-in", body, "text/plain");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->status, 403);
  httplib::Result cross =
      client.Post("/api/v1/sign-in", {{"Sec-Fetch-Site", "same-site"}}, body, "application/json");
  ASSERT_TRUE(cross);
  EXPECT_EQ(cross->status, 403);
  httplib::Result own =
      client.Post("/api/v1/sign-in", {{"Sec-Fetch-Site", "same-origin"}}, body, "application/json");
  ASSERT_TRUE(own);
  EXPECT_EQ(own->status, 200);
}

TEST_F(ApiSignInTest, TheStoredHashIsArgon2idWithItsParameters) {
  Result<PrincipalRecord> alice = store_->governance().FindPrincipalByName("alice");
  ASSERT_TRUE(alice.ok());
  Result<std::optional<PasswordRecord>> stored = store_->governance().GetPassword(alice->id);
  ASSERT_TRUE(stored.ok() && stored->has_value());
  EXPECT_THAT((*stored)->hash, StartsWith("$argon2id$v=19$m=19456,t=2,p=1$"));
  EXPECT_EQ((*stored)->hash.find(kAlicePassword), std::string::npos);
}

TEST_F(ApiSignInTest, PasswordsFollowThePolicyAndAChangeEndsTheOtherSessions) {
  const Answer first = SignIn("alice", kAlicePassword, "cli");
  ASSERT_EQ(first.status, 200);
  const std::string first_token = first.body["token"];
  EXPECT_TRUE(first.Header("Set-Cookie").empty());
  const Answer second = SignIn("alice", kAlicePassword, "cli");
  const std::string second_token = second.body["token"];
  // Sessions are listed with the current one marked.
  const Answer sessions = Call("GET", "/api/v1/sessions", nullptr, Bearer(second_token));
  ASSERT_EQ(sessions.status, 200);
  ASSERT_EQ(sessions.body["items"].size(), 2u);
  int current = 0;
  for (const json& s : sessions.body["items"]) current += s["current"].get<bool>() ? 1 : 0;
  EXPECT_EQ(current, 1);

  for (const auto& [password, code] : std::vector<std::pair<std::string, std::string>>{
           {"short", "password_too_short"},
           {"password1234", "password_too_common"},
           {"aaaaaaaaaaaaaaaa", "password_too_common"}}) {
    const Answer refused =
        Call("POST", "/api/v1/password",
             json{{"current_password", kAlicePassword}, {"new_password", password}},
             Bearer(second_token));
    EXPECT_EQ(refused.status, 400) << password;
    EXPECT_EQ(refused.code(), code) << password;
  }
  const Answer wrong_current =
      Call("POST", "/api/v1/password",
           json{{"current_password", "not it at all"}, {"new_password", "a new long phrase 42"}},
           Bearer(second_token));
  EXPECT_EQ(wrong_current.code(), "wrong_password");
  const Answer changed =
      Call("POST", "/api/v1/password",
           json{{"current_password", kAlicePassword}, {"new_password", "a new long phrase 42"}},
           Bearer(second_token));
  ASSERT_EQ(changed.status, 200) << changed.body.dump();
  clock_.Advance(3'000);
  EXPECT_EQ(Call("GET", "/api/v1/whoami", nullptr, Bearer(first_token)).status, 401);
  EXPECT_EQ(Call("GET", "/api/v1/whoami", nullptr, Bearer(second_token)).status, 200);
  EXPECT_EQ(SignIn("alice", kAlicePassword).status, 401);
  EXPECT_EQ(SignIn("alice", "a new long phrase 42").status, 200);
}

TEST_F(ApiSignInTest, AnAdminResetEndsSessionsAndCanRequireAChange) {
  const Answer before = SignIn("alice", kAlicePassword, "cli");
  ASSERT_EQ(before.status, 200);
  // Alice (a viewer) may not reset anyone's password, her own through the admin route included.
  EXPECT_EQ(Call("POST", "/api/v1/principals/owner/password",
                 json{{"new_password", "take over the owner"}}, Bearer(before.body["token"]))
                .status,
            403);
  const Answer reset = Call("POST", "/api/v1/principals/alice/password",
                            json{{"new_password", "temporary phrase 1"}, {"require_change", true}},
                            Bearer(kOwnerToken));
  ASSERT_EQ(reset.status, 200) << reset.body.dump();
  clock_.Advance(3'000);
  EXPECT_EQ(Call("GET", "/api/v1/whoami", nullptr, Bearer(before.body["token"])).status, 401);
  const Answer after = SignIn("alice", "temporary phrase 1");
  ASSERT_EQ(after.status, 200);
  EXPECT_TRUE(after.body["must_change_password"].get<bool>());
}

TEST_F(ApiSignInTest, APanelSessionEndsWhenIdleOrWhenThePrincipalIsDisabled) {
  const Answer signed_in = SignIn("alice", kAlicePassword);
  const httplib::Headers cookie = {{"Cookie", CookieOf(signed_in)}};
  ASSERT_EQ(Call("GET", "/api/v1/whoami", nullptr, cookie).status, 200);
  // 30 minutes unused: over.
  clock_.Advance(30 * 60 * 1000 + 1);
  EXPECT_EQ(Call("GET", "/api/v1/whoami", nullptr, cookie).status, 401);
  // A fresh session, then the principal is disabled: out within the 2 s bound.
  const Answer again = SignIn("alice", kAlicePassword);
  const httplib::Headers cookie2 = {{"Cookie", CookieOf(again)}};
  ASSERT_EQ(Call("GET", "/api/v1/whoami", nullptr, cookie2).status, 200);
  ASSERT_EQ(
      Call("POST", "/api/v1/principals/alice/disable", json::object(), Bearer(kOwnerToken)).status,
      200);
  clock_.Advance(2'001);
  EXPECT_EQ(Call("GET", "/api/v1/whoami", nullptr, cookie2).status, 401);
}

TEST_F(ApiSignInTest, ASecondFactorIsAskedForOnceEnrolledAndRecoveryCodesWorkOnce) {
  const Answer first = SignIn("alice", kAlicePassword, "cli");
  ASSERT_EQ(first.status, 200);
  const httplib::Headers alice = Bearer(first.body["token"]);
  const Answer enrol = Call("POST", "/api/v1/totp/enrol", json::object(), alice);
  ASSERT_EQ(enrol.status, 200) << enrol.body.dump();
  EXPECT_THAT(enrol.body["otpauth_uri"].get<std::string>(),
              StartsWith("otpauth://totp/QingLong:alice?secret="));
  std::string secret;
  ASSERT_TRUE(Base32Decode(enrol.body["secret"].get<std::string>(), &secret));
  // Pending until confirmed: a password alone still signs in; a wrong code does not confirm.
  EXPECT_EQ(SignIn("alice", kAlicePassword).status, 200);
  EXPECT_EQ(Call("POST", "/api/v1/totp/confirm", json{{"code", "000000"}}, alice).code(),
            "totp_invalid");
  const Answer confirmed =
      Call("POST", "/api/v1/totp/confirm", json{{"code", TotpCode(secret, clock_.NowMs())}}, alice);
  ASSERT_EQ(confirmed.status, 200) << confirmed.body.dump();
  ASSERT_EQ(confirmed.body["recovery_codes"].size(), 10u);
  const std::string recovery = confirmed.body["recovery_codes"][0];

  auto sign_in = [&](const std::string& code) {
    return Call(
        "POST", "/api/v1/sign-in",
        json{{"name", "alice"}, {"password", kAlicePassword}, {"client", "cli"}, {"totp", code}});
  };
  // The right password alone is not enough now.
  EXPECT_EQ(SignIn("alice", kAlicePassword, "cli").code(), "totp_required");
  // A code from the confirmed step is spent; a wrong one fails like a wrong password.
  EXPECT_EQ(sign_in(TotpCode(secret, clock_.NowMs())).code(), "sign_in_failed");
  EXPECT_EQ(sign_in("123456").code(), "sign_in_failed");
  clock_.Advance(kTotpStepMs);
  const std::string fresh = TotpCode(secret, clock_.NowMs());
  EXPECT_EQ(sign_in(fresh).status, 200);
  EXPECT_EQ(sign_in(fresh).code(), "sign_in_failed") << "a code is never accepted twice";
  // A recovery code works once, typed in any case with or without its dash.
  std::string typed = recovery;
  typed.erase(typed.find('-'), 1);
  for (char& c : typed) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  EXPECT_EQ(sign_in(typed).status, 200);
  EXPECT_EQ(sign_in(recovery).code(), "sign_in_failed");
  // An admin's reset (a lost device) removes the second factor.
  ASSERT_EQ(Call("POST", "/api/v1/principals/alice/password",
                 json{{"new_password", "after the lost phone 1"}}, Bearer(kOwnerToken))
                .status,
            200);
  EXPECT_EQ(SignIn("alice", "after the lost phone 1").status, 200);
}

TEST_F(ApiSignInTest, ARequiredPasswordChangeRestrictsTheSessionUntilItIsDone) {
  ASSERT_EQ(Call("POST", "/api/v1/principals/alice/password",
                 json{{"new_password", "temporary phrase 1"}, {"require_change", true}},
                 Bearer(kOwnerToken))
                .status,
            200);
  const Answer signed_in = SignIn("alice", "temporary phrase 1", "cli");
  ASSERT_EQ(signed_in.status, 200) << signed_in.body.dump();
  EXPECT_EQ(signed_in.body["restriction"], "password_change");
  const httplib::Headers alice = Bearer(signed_in.body["token"]);
  // Nothing but what lifts it: reads and writes alike are refused before their handler runs.
  for (const char* path : {"/api/v1/tasks", "/api/v1/runs", "/api/v1/sessions"}) {
    const Answer refused = Call("GET", path, nullptr, alice);
    EXPECT_EQ(refused.status, 403) << path;
    EXPECT_EQ(refused.code(), "password_change_required") << path;
  }
  EXPECT_EQ(Call("POST", "/api/v1/totp/enrol", json::object(), alice).code(),
            "password_change_required");
  const Answer who = Call("GET", "/api/v1/whoami", nullptr, alice);
  ASSERT_EQ(who.status, 200);
  EXPECT_EQ(who.body["session"]["restriction"], "password_change");
  ASSERT_EQ(
      Call("POST", "/api/v1/password",
           json{{"current_password", "temporary phrase 1"}, {"new_password", "my own phrase 22"}},
           alice)
          .status,
      200);
  // The same session carries on, at once.
  EXPECT_EQ(Call("GET", "/api/v1/whoami", nullptr, alice).body["session"]["restriction"], nullptr);
  EXPECT_EQ(Call("GET", "/api/v1/tasks", nullptr, alice).status, 200);
}

TEST_F(ApiSignInTest, AnInstallationCanRequireASecondFactorForAdmins) {
  const Answer viewer = SignIn("alice", kAlicePassword, "cli");
  ASSERT_EQ(viewer.status, 200);
  EXPECT_EQ(Call("GET", "/api/v1/settings", nullptr, Bearer(viewer.body["token"])).status, 403);
  EXPECT_EQ(Call("POST", "/api/v1/settings", json{{"require_second_factor", "everyone"}},
                 Bearer(viewer.body["token"]))
                .status,
            403);
  EXPECT_EQ(Call("POST", "/api/v1/settings", json{{"require_second_factor", "maybe"}},
                 Bearer(kOwnerToken))
                .code(),
            "invalid_setting");
  const Answer set = Call("POST", "/api/v1/settings", json{{"require_second_factor", "admins"}},
                          Bearer(kOwnerToken));
  ASSERT_EQ(set.status, 200) << set.body.dump();
  EXPECT_EQ(
      Call("GET", "/api/v1/settings", nullptr, Bearer(kOwnerToken)).body["require_second_factor"],
      "admins");
  // A viewer is not asked; an admin of a project is.
  EXPECT_EQ(SignIn("alice", kAlicePassword, "cli").body["restriction"], nullptr);
  ASSERT_EQ(Call("POST", "/api/v1/projects/default/bindings",
                 json{{"principal", "alice"}, {"role", "admin"}}, Bearer(kOwnerToken))
                .status,
            201);
  const Answer admin = SignIn("alice", kAlicePassword, "cli");
  ASSERT_EQ(admin.status, 200);
  EXPECT_EQ(admin.body["restriction"], "totp_enrolment");
  const httplib::Headers alice = Bearer(admin.body["token"]);
  EXPECT_EQ(Call("GET", "/api/v1/tasks", nullptr, alice).code(), "totp_enrolment_required");
  const Answer enrol = Call("POST", "/api/v1/totp/enrol", json::object(), alice);
  ASSERT_EQ(enrol.status, 200) << enrol.body.dump();
  std::string secret;
  ASSERT_TRUE(Base32Decode(enrol.body["secret"].get<std::string>(), &secret));
  ASSERT_EQ(
      Call("POST", "/api/v1/totp/confirm", json{{"code", TotpCode(secret, clock_.NowMs())}}, alice)
          .status,
      200);
  EXPECT_EQ(Call("GET", "/api/v1/tasks", nullptr, alice).status, 200);
  const Answer who = Call("GET", "/api/v1/whoami", nullptr, alice);
  EXPECT_EQ(who.body["password_set"], true);
  EXPECT_EQ(who.body["totp_enabled"], true);
  // Required: it cannot be removed.
  EXPECT_EQ(Call("POST", "/api/v1/totp/disable", json{{"current_password", kAlicePassword}}, alice)
                .code(),
            "second_factor_required");
}

TEST_F(ApiSignInTest, TheSetUpCodeGivesTheOwnerAFirstPasswordOnce) {
  EXPECT_EQ(Call("GET", "/api/v1/sign-in/methods", nullptr).body,
            (json{{"password", true}, {"oidc", nullptr}, {"setup", false}}));
  Result<std::string> code = sign_in_service_->IssueSetupCode(60'000);
  ASSERT_TRUE(code.ok()) << code.status().ToString();
  ASSERT_EQ(code->size(), 19u) << *code;  // XXXX-XXXX-XXXX-XXXX
  EXPECT_TRUE(Call("GET", "/api/v1/sign-in/methods", nullptr).body["setup"].get<bool>());
  auto setup = [&](const std::string& typed, const std::string& password) {
    return Call("POST", "/api/v1/setup",
                json{{"code", typed}, {"password", password}, {"client", "panel"}});
  };
  EXPECT_EQ(setup("AAAA-BBBB-CCCC-DDDD", "the owner's phrase 1").code(), "setup_code_invalid");
  // A password the policy refuses does not spend the code.
  EXPECT_EQ(setup(*code, "short").status, 400);
  std::string typed = *code;
  for (char& c : typed) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const Answer done = setup(typed, "the owner's phrase 1");
  ASSERT_EQ(done.status, 200) << done.body.dump();
  EXPECT_EQ(done.body["principal"]["name"], "owner");
  EXPECT_THAT(done.Header("Set-Cookie"), HasSubstr("HttpOnly; SameSite=Strict"));
  EXPECT_EQ(Call("GET", "/api/v1/whoami", nullptr, {{"Cookie", CookieOf(done)}}).status, 200);
  EXPECT_EQ(setup(*code, "the owner's phrase 2").code(), "setup_code_invalid");
  EXPECT_FALSE(Call("GET", "/api/v1/sign-in/methods", nullptr).body["setup"].get<bool>());
  EXPECT_EQ(SignIn("owner", "the owner's phrase 1").status, 200);
  // Once the owner has a password, no new code is issued.
  code = sign_in_service_->IssueSetupCode(60'000);
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, "");
}

TEST_F(ApiSignInTest, ASessionInUseNeverIdlesOutEvenWithAShortIdleBound) {
  const Answer signed_in = SignIn("alice", kAlicePassword);
  const httplib::Headers cookie = {{"Cookie", CookieOf(signed_in)}};
  // Used every 25 s, past the 40 s bound counted from the sign-in.
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(Call("GET", "/api/v1/whoami", nullptr, cookie).status, 200) << "use " << i;
    clock_.Advance(25'000);
  }
  ASSERT_EQ(Call("GET", "/api/v1/whoami", nullptr, cookie).status, 200);
  // Then left alone for longer than the bound: over.
  clock_.Advance(41'000);
  EXPECT_EQ(Call("GET", "/api/v1/whoami", nullptr, cookie).status, 401);
}

TEST_F(ApiSignInTest, TakingARoleAwayEndsThePrincipalsSessions) {
  const Answer signed_in = SignIn("alice", kAlicePassword);
  const httplib::Headers cookie = {{"Cookie", CookieOf(signed_in)}};
  ASSERT_EQ(Call("GET", "/api/v1/whoami", nullptr, cookie).status, 200);
  ASSERT_EQ(Call("POST", "/api/v1/projects/default/bindings",
                 json{{"principal", "alice"}, {"role", "none"}}, Bearer(kOwnerToken))
                .status,
            201);
  clock_.Advance(2'001);
  EXPECT_EQ(Call("GET", "/api/v1/whoami", nullptr, cookie).status, 401);
}

TEST_F(ApiSignInTest, RemovingAPasswordEndsSessionsAndPasswordSignIns) {
  const Answer signed_in = SignIn("alice", kAlicePassword);
  const httplib::Headers cookie = {{"Cookie", CookieOf(signed_in)}};
  ASSERT_EQ(Call("GET", "/api/v1/whoami", nullptr, cookie).status, 200);
  // Only an installation admin: alice cannot remove her own through the admin route.
  httplib::Client client("127.0.0.1", server_->port());
  auto remove = [&](const httplib::Headers& headers) {
    httplib::Result r = client.Delete("/api/v1/principals/alice/password", headers);
    return r ? r->status : 0;
  };
  const Answer cli = SignIn("alice", kAlicePassword, "cli");
  EXPECT_EQ(remove(Bearer(cli.body["token"])), 403);
  EXPECT_EQ(remove(Bearer(kOwnerToken)), 200);
  EXPECT_EQ(remove(Bearer(kOwnerToken)), 404) << "nothing left to remove";
  clock_.Advance(2'001);
  EXPECT_EQ(Call("GET", "/api/v1/whoami", nullptr, cookie).status, 401);
  EXPECT_EQ(SignIn("alice", kAlicePassword).code(), "sign_in_failed");
}

}  // namespace
}  // namespace ql
