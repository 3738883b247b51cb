#pragma once

// OpenID Provider metadata (OpenID Connect Discovery 1.0 §3, RFC 8414) checked against the
// configured issuer, and the authorization request URL of the code flow with PKCE.

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ql/core/status.h"
#include "ql/oidc/jose.h"

namespace ql::oidc {

// What a relying party uses from a provider's metadata, checked.
struct ProviderMetadata {
  std::string issuer;
  std::string authorization_endpoint;
  std::string token_endpoint;
  std::string jwks_uri;
  std::optional<std::string> userinfo_endpoint;
  std::optional<std::string> end_session_endpoint;
  // The provider's ID token signing algorithms that this library verifies (never empty).
  std::vector<JwsAlg> allowed_algs;
  // token_endpoint_auth_methods_supported, or its default ["client_secret_basic"].
  std::vector<std::string> token_endpoint_auth_methods;
};

// Checks `document` (the provider's /.well-known/openid-configuration) and returns what we use.
// Every endpoint must be an absolute https URL without a fragment or user info; plain http is
// accepted only when `allow_http_loopback` and the host is loopback (localhost, 127.0.0.0/8,
// ::1), for a provider on the same machine. Returns InvalidArgument with
//   `oidc_issuer_invalid`                 `configured_issuer` is not an absolute http(s) URL with
//                                         a host, or has user info, a query or a fragment;
//   `oidc_provider_metadata_invalid`      not an object, a required member (authorization_endpoint,
//                                         token_endpoint, jwks_uri, response_types_supported) is
//                                         missing, or a member has the wrong type;
//   `oidc_provider_issuer_mismatch`       `issuer` differs from `configured_issuer` in any byte
//                                         (a trailing slash included);
//   `oidc_provider_url_insecure`          the configured issuer or an endpoint is not https (and
//                                         not allowed loopback http);
//   `oidc_provider_url_invalid`           an endpoint is not an absolute URL with a host, or has a
//                                         fragment or user info;
//   `oidc_provider_code_flow_unsupported` response_types_supported lacks "code";
//   `oidc_provider_pkce_unsupported`      code_challenge_methods_supported is present without S256;
//   `oidc_provider_no_usable_alg`         id_token_signing_alg_values_supported (default
//                                         ["RS256"]) names no algorithm this library verifies.
Result<ProviderMetadata> ParseProviderMetadata(const nlohmann::json& document,
                                               std::string_view configured_issuer,
                                               bool allow_http_loopback);

// Returns the authorization request URL of the code flow: the metadata's authorization endpoint
// (keeping any query it already has) with response_type=code, client_id, redirect_uri, scope
// (`scopes` joined by spaces, "openid" first when missing), state, nonce, code_challenge and
// code_challenge_method=S256, every value percent-encoded. Returns InvalidArgument
// `oidc_authorization_request_invalid` when client_id, redirect_uri, state, nonce or
// code_challenge is empty or a scope is empty or contains a space.
Result<std::string> AuthorizationUrl(const ProviderMetadata& metadata, std::string_view client_id,
                                     std::string_view redirect_uri,
                                     const std::vector<std::string>& scopes, std::string_view state,
                                     std::string_view nonce, std::string_view code_challenge);

}  // namespace ql::oidc
