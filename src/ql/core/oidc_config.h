#pragma once

// Single sign-on with OpenID Connect (DESIGN §9): what an operator configures (one provider per
// installation, in a JSON file given with --oidc-config), the claims a verified ID token gives,
// and the decisions made from them: which principal signs in, and which role bindings the
// provider's groups grant. Pure: no network, no store.
//
// The configuration file:
//   {
//     "name": "Company SSO",                        button label in the panel
//     "issuer": "https://id.example.com",           exactly as the provider's discovery says
//     "client_id": "qinglong",
//     "client_secret_file": "/etc/qinglong/oidc.secret",   optional (public client + PKCE)
//     "redirect_uri": "https://ql.example.com/api/v1/sign-in/oidc/callback",
//     "scopes": ["openid", "email", "profile"],    "openid" is required
//     "ca_file": "",                                PEM CAs for the provider (system store)
//     "allow_insecure_http": false,                 plain http only to a loopback provider
//     "principal_claim": "email",                   sub | email | preferred_username
//     "principals": {"alice@example.com": "alice"}, claim value -> principal name
//     "claim_is_name": false,                       else the claim value itself names it
//     "create_principals": false,                   just-in-time creation of a missing one
//     "groups_claim": "groups",
//     "groups": {"ops": [{"scope": "default", "role": "operator"}],
//                "admins": [{"scope": "installation", "role": "admin"}]}
//   }
// A principal is found by an explicit `principals` entry, or (claim_is_name) by the claim's
// value as its name; "email" is used only when the provider says it is verified. Group grants
// are managed: a binding the provider's groups made is changed or removed when the groups
// change at the next sign-in; a binding an admin made by hand is never touched.
//
// Errors: InvalidArgument `invalid_oidc_config` naming the field.

#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ql/core/governance.h"
#include "ql/core/status.h"

namespace ql {

struct OidcGrant {
  std::string scope;  // kInstallationScope or a project slug
  std::string role;   // owner | admin | operator | viewer
};

struct OidcConfig {
  std::string name = std::string("single sign-on");
  std::string issuer;
  std::string client_id;
  std::string client_secret_file;
  std::string client_secret;  // read from client_secret_file by the daemon
  std::string redirect_uri;
  std::vector<std::string> scopes = {"openid", "email", "profile"};
  std::string ca_file;
  bool allow_insecure_http = false;
  std::string principal_claim = std::string("email");
  std::map<std::string, std::string> principals;
  bool claim_is_name = false;
  bool create_principals = false;
  std::string groups_claim = std::string("groups");
  std::map<std::string, std::vector<OidcGrant>> groups;
};

// Parses and checks a configuration document (unknown fields are errors).
Result<OidcConfig> ParseOidcConfig(const nlohmann::json& document);

// What a verified ID token says about the person.
struct OidcClaims {
  std::string sub;
  std::string email;
  bool email_verified = false;
  std::string preferred_username;
  std::string name;
  std::vector<std::string> groups;
};

// The name of the principal the claims sign in as. PermissionDenied `oidc_no_principal` when
// the configured claim is missing (or an unverified email) or maps to no name.
Result<std::string> OidcPrincipalName(const OidcConfig& config, const OidcClaims& claims);

// The role the claims' groups grant in every scope the configuration mentions (kNone where none
// of the person's groups grants one): the highest grant per scope.
std::map<std::string, Role> OidcDesiredRoles(const OidcConfig& config, const OidcClaims& claims);

// Mutation ids of bindings written from a provider's groups start with this prefix: they are
// the ones a later sign-in may change.
inline constexpr std::string_view kOidcMutationPrefix = "oidc:";

}  // namespace ql

namespace ql {

// The identity provider as the sign-in needs it (implemented over the network by src/ql/oidc).
class OidcProvider {
 public:
  virtual ~OidcProvider() = default;
  // The provider's authorization URL for a new sign-in: the authorization code flow with PKCE
  // (S256 challenge of `code_verifier`), `state` and `nonce`. Unavailable `oidc_unavailable`
  // when the provider cannot be reached.
  virtual Result<std::string> AuthorizationUrl(const std::string& state, const std::string& nonce,
                                               const std::string& code_verifier) = 0;
  // Redeems an authorization code at the token endpoint and verifies the ID token (signature by
  // the provider's published keys, issuer, audience, expiry, nonce). PermissionDenied
  // `oidc_failed` with the reason in the message; Unavailable `oidc_unavailable`.
  virtual Result<OidcClaims> Redeem(const std::string& code, const std::string& code_verifier,
                                    const std::string& nonce) = 0;
};

}  // namespace ql
