#include "ql/core/oidc_config.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace ql {
namespace {

using nlohmann::json;

json Minimal() {
  return json{{"issuer", "https://id.example.com"},
              {"client_id", "qinglong"},
              {"redirect_uri", "https://ql.example.com/api/v1/sign-in/oidc/callback"}};
}

std::string ErrorOf(const json& doc) {
  Result<OidcConfig> config = ParseOidcConfig(doc);
  return config.ok() ? std::string("ok")
                     : config.status().reason() + ": " + config.status().message();
}

TEST(OidcConfigTest, AMinimalConfigurationTakesTheDefaults) {
  Result<OidcConfig> config = ParseOidcConfig(Minimal());
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->principal_claim, "email");
  EXPECT_EQ(config->scopes, (std::vector<std::string>{"openid", "email", "profile"}));
  EXPECT_FALSE(config->create_principals);
  EXPECT_FALSE(config->claim_is_name);
  EXPECT_FALSE(config->allow_insecure_http);
}

TEST(OidcConfigTest, EveryMistakeIsNamed) {
  auto with = [](const char* key, json value) {
    json doc = Minimal();
    doc[key] = std::move(value);
    return ErrorOf(doc);
  };
  EXPECT_EQ(ErrorOf(json::array()), "invalid_oidc_config: the configuration must be a JSON object");
  json missing = Minimal();
  missing.erase("client_id");
  EXPECT_EQ(ErrorOf(missing), "invalid_oidc_config: client_id is required");
  EXPECT_EQ(with("clientid", "x"), "invalid_oidc_config: unknown field \"clientid\"");
  EXPECT_NE(with("issuer", "http://id.example.com").find("must be https"), std::string::npos);
  // Plain http only to a loopback provider, and only when allowed.
  EXPECT_NE(with("issuer", "http://127.0.0.1:9000").find("must be https"), std::string::npos);
  json loopback = Minimal();
  loopback["issuer"] = "http://127.0.0.1:9000";
  loopback["allow_insecure_http"] = true;
  EXPECT_EQ(ErrorOf(loopback), "ok");
  loopback["issuer"] = "http://10.0.0.1:9000";
  EXPECT_NE(ErrorOf(loopback).find("must be https"), std::string::npos);
  EXPECT_EQ(with("redirect_uri", "https://ql.example.com/elsewhere"),
            "invalid_oidc_config: redirect_uri must end in /api/v1/sign-in/oidc/callback");
  EXPECT_EQ(with("scopes", json{"email"}), "invalid_oidc_config: scopes must include openid");
  EXPECT_EQ(with("scopes", json{"openid", "a b"}),
            "invalid_oidc_config: every scope must be a non-empty string without spaces");
  EXPECT_EQ(with("principal_claim", "name"),
            "invalid_oidc_config: principal_claim is sub, email or preferred_username");
  EXPECT_EQ(with("principals", json{{"a@example.com", "not a name"}}),
            "invalid_oidc_config: principals[\"a@example.com\"] must be a principal name");
  EXPECT_EQ(with("create_principals", "yes"),
            "invalid_oidc_config: create_principals must be true or false");
  EXPECT_EQ(
      with("groups", json{{"ops", json::array({json{{"scope", "default"}, {"role", "god"}}})}}),
      "invalid_oidc_config: groups[\"ops\"]: role is owner, admin, operator or viewer");
  EXPECT_EQ(
      with("groups",
           json{{"ops", json::array({json{{"scope", "installation"}, {"role", "operator"}}})}}),
      "invalid_oidc_config: groups[\"ops\"]: the installation scope knows only owner and admin");
  EXPECT_EQ(
      with("groups", json{{"ops", json::array({json{{"scope", "Bad Slug"}, {"role", "viewer"}}})}}),
      "invalid_oidc_config: groups[\"ops\"]: scope is \"installation\" or a project's name");
}

OidcConfig Config(const json& extra) {
  json doc = Minimal();
  doc.update(extra);
  Result<OidcConfig> config = ParseOidcConfig(doc);
  EXPECT_TRUE(config.ok()) << config.status().ToString();
  return config.ok() ? *config : OidcConfig{};
}

TEST(OidcConfigTest, APrincipalIsFoundByAnExplicitEntryOrByItsNameWhenAllowed) {
  const OidcConfig by_email = Config(json{{"principals", {{"alice@example.com", "alice"}}}});
  OidcClaims claims;
  claims.sub = "s1";
  claims.email = "alice@example.com";
  claims.preferred_username = "mallory";
  // An email the provider has not verified names nobody.
  EXPECT_EQ(OidcPrincipalName(by_email, claims).status().reason(), "oidc_no_principal");
  claims.email_verified = true;
  EXPECT_EQ(*OidcPrincipalName(by_email, claims), "alice");
  claims.email = "bob@example.com";
  EXPECT_EQ(OidcPrincipalName(by_email, claims).status().reason(), "oidc_no_principal");

  const OidcConfig by_username =
      Config(json{{"principal_claim", "preferred_username"}, {"claim_is_name", true}});
  EXPECT_EQ(*OidcPrincipalName(by_username, claims), "mallory");
  claims.preferred_username = "not a valid name";
  EXPECT_EQ(OidcPrincipalName(by_username, claims).status().reason(), "oidc_no_principal");
  const OidcConfig by_sub = Config(json{{"principal_claim", "sub"}});
  EXPECT_EQ(OidcPrincipalName(by_sub, claims).status().reason(), "oidc_no_principal")
      << "without claim_is_name the claim's value is not taken as a name";
}

TEST(OidcConfigTest, GroupsGrantTheHighestRolePerScopeAndNoneElsewhere) {
  const OidcConfig config =
      Config(json{{"groups",
                   {{"ops", json::array({json{{"scope", "default"}, {"role", "operator"}}})},
                    {"leads", json::array({json{{"scope", "default"}, {"role", "admin"}},
                                           json{{"scope", "installation"}, {"role", "admin"}}})},
                    {"audit", json::array({json{{"scope", "reports"}, {"role", "viewer"}}})}}}});
  OidcClaims claims;
  claims.groups = {"ops", "leads", "unknown"};
  const std::map<std::string, Role> roles = OidcDesiredRoles(config, claims);
  EXPECT_EQ(roles, (std::map<std::string, Role>{{"default", Role::kAdmin},
                                                {"installation", Role::kAdmin},
                                                {"reports", Role::kNone}}));
  claims.groups = {};
  EXPECT_EQ(
      OidcDesiredRoles(config, claims),
      (std::map<std::string, Role>{
          {"default", Role::kNone}, {"installation", Role::kNone}, {"reports", Role::kNone}}));
}

}  // namespace
}  // namespace ql
