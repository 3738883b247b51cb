// The sign-in's own decisions around a provider: the answer must return to the browser that
// started it and is good once, claims map to a principal, and group grants are brought in line
// at every sign-in without touching what an admin granted by hand. The provider here only
// returns the claims it is told to; the real flow against a real provider is
// tests/oidc/oidc_sign_in_test.py.

#include "ql/engine/oidc_sign_in.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "ql/core/digest.h"
#include "ql/core/ids.h"
#include "ql/core/rfc3339.h"
#include "ql/engine/control_service.h"
#include "ql/storage/sqlite/sqlite_store.h"
#include "ql/testing/fake_clock.h"

namespace ql {
namespace {

namespace fs = std::filesystem;

class ClaimsProvider final : public OidcProvider {
 public:
  Result<std::string> AuthorizationUrl(const std::string& state, const std::string& nonce,
                                       const std::string& code_verifier) override {
    last_verifier = code_verifier;
    verifier_by_nonce[nonce] = code_verifier;
    return "https://id.example.com/auth?state=" + state;
  }
  // Like a provider: a code is good with the verifier and nonce of the request it answered.
  Result<OidcClaims> Redeem(const std::string& code, const std::string& code_verifier,
                            const std::string& nonce) override {
    auto it = verifier_by_nonce.find(nonce);
    if (code != "good-code" || it == verifier_by_nonce.end() || it->second != code_verifier) {
      return PermissionDenied("oidc_failed", "the provider refused the code");
    }
    return claims;
  }
  OidcClaims claims;
  std::string last_verifier;
  std::map<std::string, std::string> verifier_by_nonce;
};

// Passwords play no part here.
class NoHasher final : public PasswordHasher {
 public:
  Result<std::string> Hash(std::string_view) override { return std::string("$argon2id$x"); }
  bool Verify(const std::string&, std::string_view) override { return false; }
  std::string Describe() const override { return "none"; }
};

class OidcSignInTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "ql-oidc-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    SqliteOptions sqlite;
    sqlite.path = (dir_ / "ql.db").string();
    auto store = SqliteStore::Open(sqlite, clock_);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
    control_ = std::make_unique<ControlService>(*store_, clock_, random_, ControlOptions{});
    ASSERT_TRUE(control_->EnsureDefaultProject().ok());
    BootstrapCommand boot;
    boot.principal_id = NewUuidV7(clock_.NowMs(), random_);
    boot.token_id = NewUuidV7(clock_.NowMs(), random_);
    boot.token_digest = Sha256Hex("owner-token");
    boot.mutation_id = "bootstrap";
    boot.now_ms = clock_.NowMs();
    Result<BootstrapResult> booted = store_->governance().Bootstrap(boot);
    ASSERT_TRUE(booted.ok());
    owner_ = Caller{booted->principal.id, "", "req"};
    ASSERT_TRUE(control_->governance().AddPrincipal(owner_, "alice", "user").ok());
    sign_in_ = std::make_unique<SignInService>(control_->governance(), hasher_, clock_, random_);
    nlohmann::json config{
        {"issuer", "https://id.example.com"},
        {"client_id", "qinglong"},
        {"redirect_uri", "https://ql.example.com/api/v1/sign-in/oidc/callback"},
        {"principals", {{"alice@example.com", "alice"}}},
        {"groups",
         {{"ops", nlohmann::json::array({{{"scope", "default"}, {"role", "operator"}}})},
          {"admins", nlohmann::json::array({{{"scope", "installation"}, {"role", "admin"}}})}}}};
    Result<OidcConfig> parsed = ParseOidcConfig(config);
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    oidc_ = std::make_unique<OidcSignIn>(*parsed, provider_, control_->governance(), *sign_in_,
                                         clock_, random_);
    provider_.claims.sub = "alice-sub";
    provider_.claims.email = "alice@example.com";
    provider_.claims.email_verified = true;
    provider_.claims.groups = {"ops"};
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A whole sign-in from the same browser.
  Result<SignedIn> SignInOnce() {
    QL_ASSIGN_OR_RETURN(OidcSignIn::Started started, oidc_->Begin(SessionClient::kPanel));
    OidcSignIn::Outcome outcome =
        oidc_->Finish(started.state, started.state, "good-code", std::nullopt, "127.0.0.1", "req");
    if (!outcome.status.ok()) return outcome.status;
    return outcome.signed_in;
  }

  // Alice's role in `scope` (installation or a project id), "none" when she has none.
  std::string RoleIn(const std::string& scope) {
    Result<std::vector<RoleBindingRecord>> bindings = store_->governance().ListBindings(scope);
    EXPECT_TRUE(bindings.ok());
    Result<PrincipalRecord> alice = store_->governance().FindPrincipalByName("alice");
    for (const RoleBindingRecord& b : *bindings) {
      if (b.subject_id == alice->id) return b.role;
    }
    return "none";
  }
  std::string DefaultProject() { return control_->governance().ResolveProject("default")->id; }

  fs::path dir_;
  testing::FakeClock clock_{ParseRfc3339("2026-01-01T00:00:00Z").value()};
  testing::SeededRandom random_{7};
  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<ControlService> control_;
  Caller owner_;
  NoHasher hasher_;
  std::unique_ptr<SignInService> sign_in_;
  ClaimsProvider provider_;
  std::unique_ptr<OidcSignIn> oidc_;
};

TEST_F(OidcSignInTest, TheAnswerMustComeBackToTheBrowserThatStartedItAndIsGoodOnce) {
  Result<OidcSignIn::Started> started = oidc_->Begin(SessionClient::kPanel);
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  EXPECT_EQ(started->state.size(), 64u);
  EXPECT_EQ(provider_.last_verifier.size(), 64u);
  // Another browser (no cookie, or another sign-in's state) is refused before the code is used.
  EXPECT_EQ(oidc_->Finish(started->state, "", "good-code", std::nullopt, "a", "r").status.reason(),
            "oidc_state_invalid");
  EXPECT_EQ(oidc_->Finish(started->state, std::string(64, '0'), "good-code", std::nullopt, "a", "r")
                .status.reason(),
            "oidc_state_invalid");
  // An answer naming another issuer (a mix-up) is refused, and spends the state.
  Result<OidcSignIn::Started> mixed = oidc_->Begin(SessionClient::kPanel);
  ASSERT_TRUE(mixed.ok());
  EXPECT_EQ(oidc_
                ->Finish(mixed->state, mixed->state, "good-code",
                         std::string("https://evil.example.com"), "a", "r")
                .status.reason(),
            "oidc_failed");
  OidcSignIn::Outcome outcome =
      oidc_->Finish(started->state, started->state, "good-code",
                    std::string("https://id.example.com"), "127.0.0.1", "r");
  ASSERT_TRUE(outcome.status.ok()) << outcome.status.ToString();
  EXPECT_FALSE(outcome.cli);
  const SignedIn* signed_in = &outcome.signed_in;
  EXPECT_EQ(signed_in->principal.name, "alice");
  EXPECT_EQ(signed_in->session.record.kind, "session");
  EXPECT_EQ(signed_in->session.record.label, "oidc panel from 127.0.0.1");
  EXPECT_TRUE(
      store_->governance().Authenticate(Sha256Hex(signed_in->session.token), clock_.NowMs()).ok());
  // Replayed: the state was taken.
  EXPECT_EQ(oidc_->Finish(started->state, started->state, "good-code", std::nullopt, "a", "r")
                .status.reason(),
            "oidc_state_invalid");
  // Too late.
  started = oidc_->Begin(SessionClient::kPanel);
  clock_.Advance(OidcSignIn::kLoginTtlMs);
  EXPECT_EQ(oidc_->Finish(started->state, started->state, "good-code", std::nullopt, "a", "r")
                .status.reason(),
            "oidc_state_invalid");
}

TEST_F(OidcSignInTest, ClaimsWithoutAPrincipalSignNobodyIn) {
  provider_.claims.email = "mallory@example.com";
  EXPECT_EQ(SignInOnce().status().reason(), "oidc_no_principal");
  provider_.claims.email = "alice@example.com";
  provider_.claims.email_verified = false;
  EXPECT_EQ(SignInOnce().status().reason(), "oidc_no_principal");
}

TEST_F(OidcSignInTest, GroupGrantsFollowTheGroupsButNeverTouchAHandMadeBinding) {
  ASSERT_TRUE(SignInOnce().ok());
  EXPECT_EQ(RoleIn(DefaultProject()), "operator");
  EXPECT_EQ(RoleIn("installation"), "none");
  provider_.claims.groups = {"ops", "admins"};
  ASSERT_TRUE(SignInOnce().ok());
  EXPECT_EQ(RoleIn("installation"), "admin");
  // Leaving a group takes its grant away at the next sign-in.
  provider_.claims.groups = {};
  Result<SignedIn> left = SignInOnce();
  ASSERT_TRUE(left.ok()) << left.status().ToString();
  EXPECT_EQ(RoleIn(DefaultProject()), "none");
  EXPECT_EQ(RoleIn("installation"), "none");
  // An admin makes alice a viewer by hand: the groups never change that binding.
  ASSERT_TRUE(control_->governance()
                  .WriteBinding(owner_, "default", "alice", "viewer", NewUuidV7(1, random_))
                  .ok());
  provider_.claims.groups = {"ops"};
  ASSERT_TRUE(SignInOnce().ok());
  EXPECT_EQ(RoleIn(DefaultProject()), "viewer");
}

TEST_F(OidcSignInTest, ADisabledPrincipalIsRefusedAndItsBindingsStay) {
  ASSERT_TRUE(control_->governance().SetPrincipalStatus(owner_, "alice", "disabled").ok());
  provider_.claims.groups = {"ops", "admins"};
  EXPECT_EQ(SignInOnce().status().reason(), "principal_disabled");
  EXPECT_EQ(RoleIn(DefaultProject()), "none");
  EXPECT_EQ(RoleIn("installation"), "none");
}

TEST_F(OidcSignInTest, QlLoginGetsItsTokenSealedToItsKeyAtItsLoopbackPort) {
  EXPECT_EQ(oidc_->Begin(SessionClient::kCli, 40000, std::string(43, 'k')).status().reason(),
            "oidc_cli_unsupported");
  OidcConfig config =
      ParseOidcConfig(
          nlohmann::json{{"issuer", "https://id.example.com"},
                         {"client_id", "qinglong"},
                         {"redirect_uri", "https://ql.example.com/api/v1/sign-in/oidc/callback"},
                         {"principals", {{"alice@example.com", "alice"}}}})
          .value();
  OidcSignIn cli_capable(
      config, provider_, control_->governance(), *sign_in_, clock_, random_,
      [](const std::string& key, const std::string& token) -> Result<std::string> {
        if (key.size() != 43) {
          return InvalidArgument("invalid_public_key", "not a key");
        }
        return "sealed(" + key + "," + token + ")";
      });
  EXPECT_EQ(cli_capable.Begin(SessionClient::kCli, 80, std::string(43, 'k')).status().reason(),
            "invalid_cli_port");
  EXPECT_EQ(
      cli_capable.Begin(SessionClient::kCli, std::nullopt, std::string(43, 'k')).status().reason(),
      "invalid_cli_port");
  EXPECT_EQ(cli_capable.Begin(SessionClient::kCli, 40000, "short").status().reason(),
            "invalid_public_key");
  Result<OidcSignIn::Started> started =
      cli_capable.Begin(SessionClient::kCli, 40000, std::string(43, 'k'));
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  OidcSignIn::Outcome outcome = cli_capable.Finish(started->state, started->state, "good-code",
                                                   std::nullopt, "127.0.0.1", "r");
  ASSERT_TRUE(outcome.status.ok()) << outcome.status.ToString();
  EXPECT_TRUE(outcome.cli);
  EXPECT_EQ(outcome.cli_port, 40000);
  EXPECT_EQ(outcome.signed_in.session.token, "") << "only the sealed token leaves";
  EXPECT_EQ(outcome.signed_in.session.record.label, "oidc ql login from 127.0.0.1");
  ASSERT_EQ(outcome.sealed_token.rfind("sealed(" + std::string(43, 'k') + ",qls_", 0), 0u);
  // A failure after the state was recognised still knows where to send the answer.
  started = cli_capable.Begin(SessionClient::kCli, 40001, std::string(43, 'k'));
  outcome = cli_capable.Finish(started->state, started->state, "bad-code", std::nullopt, "a", "r");
  EXPECT_EQ(outcome.status.reason(), "oidc_failed");
  EXPECT_TRUE(outcome.cli);
  EXPECT_EQ(outcome.cli_port, 40001);
}

}  // namespace
}  // namespace ql
