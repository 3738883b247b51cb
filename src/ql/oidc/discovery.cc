#include "ql/oidc/discovery.h"

#include <algorithm>
#include <cctype>

#include "ql/core/http_endpoint.h"

namespace ql::oidc {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

Status MetadataInvalid(const std::string& why) {
  return InvalidArgument("oidc_provider_metadata_invalid", "the provider metadata " + why);
}

// Checks that `url` is an absolute http(s) URL with a host, no user info, no fragment and no
// whitespace or control characters, and that plain http is only used for allowed loopback.
// `reason_invalid` is the code for a URL that is not one at all.
Status CheckUrl(std::string_view url, std::string_view what, bool allow_http_loopback,
                const char* reason_invalid) {
  const auto invalid = [&](std::string_view why) {
    return InvalidArgument(reason_invalid, std::string(what) + " " + std::string(why));
  };
  for (char c : url) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) {
      return invalid("contains whitespace or a control character");
    }
  }
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos) return invalid("is not an absolute URL");
  const std::string scheme = Lower(url.substr(0, scheme_end));
  if (scheme != "https" && scheme != "http") return invalid("is not an http(s) URL");
  if (url.find('#') != std::string_view::npos) return invalid("has a fragment");
  const std::string_view rest = url.substr(scheme_end + 3);
  const std::string_view authority = rest.substr(0, rest.find_first_of("/?"));
  if (authority.find('@') != std::string_view::npos) return invalid("has user info");
  std::string_view host = authority;
  std::string_view port;
  if (!authority.empty() && authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return invalid("has an unclosed IPv6 address");
    host = authority.substr(1, close - 1);
    const std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return invalid("has text after its IPv6 address");
      port = after.substr(1);
      if (port.empty()) return invalid("has an empty port");
    }
  } else if (const size_t colon = authority.find(':'); colon != std::string_view::npos) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
    if (port.empty()) return invalid("has an empty port");
  }
  if (host.empty()) return invalid("has no host");
  if (port.find_first_not_of("0123456789") != std::string_view::npos || port.size() > 5) {
    return invalid("has a port that is not a number");
  }
  if (scheme == "http" && !(allow_http_loopback && IsLoopbackHost(host))) {
    return InvalidArgument("oidc_provider_url_insecure",
                           std::string(what) +
                               " is plain http; only https is accepted (http only on loopback "
                               "when that is explicitly allowed)");
  }
  return Status::Ok();
}

// Reads the required or optional string member `name` and checks it as an endpoint URL.
Result<std::optional<std::string>> Endpoint(const nlohmann::json& document, const char* name,
                                            bool required, bool allow_http_loopback) {
  const auto it = document.find(name);
  if (it == document.end() || it->is_null()) {
    if (required) return MetadataInvalid(std::string("has no \"") + name + "\"");
    return std::optional<std::string>();
  }
  if (!it->is_string())
    return MetadataInvalid(std::string("member \"") + name + "\" is not a string");
  const std::string url = it->get<std::string>();
  QL_RETURN_IF_ERROR(CheckUrl(url, std::string("the provider's ") + name, allow_http_loopback,
                              "oidc_provider_url_invalid"));
  return std::optional<std::string>(url);
}

// Reads the array of strings `name`; nullopt when absent.
Result<std::optional<std::vector<std::string>>> StringList(const nlohmann::json& document,
                                                           const char* name) {
  const auto it = document.find(name);
  if (it == document.end() || it->is_null()) return std::optional<std::vector<std::string>>();
  const Status wrong =
      MetadataInvalid(std::string("member \"") + name + "\" is not an array of strings");
  if (!it->is_array()) return wrong;
  std::vector<std::string> values;
  for (const nlohmann::json& value : *it) {
    if (!value.is_string()) return wrong;
    values.push_back(value.get<std::string>());
  }
  return std::optional<std::vector<std::string>>(std::move(values));
}

bool Contains(const std::vector<std::string>& values, std::string_view value) {
  return std::find(values.begin(), values.end(), value) != values.end();
}

// Returns true for an RFC 6749 scope token: one or more of %x21 / %x23-5B / %x5D-7E.
bool IsScopeToken(std::string_view scope) {
  if (scope.empty()) return false;
  for (char c : scope) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x21 || u > 0x7e || c == '"' || c == '\\') return false;
  }
  return true;
}

}  // namespace

Result<ProviderMetadata> ParseProviderMetadata(const nlohmann::json& document,
                                               std::string_view configured_issuer,
                                               bool allow_http_loopback) {
  QL_RETURN_IF_ERROR(CheckUrl(configured_issuer, "the configured issuer", allow_http_loopback,
                              "oidc_issuer_invalid"));
  if (configured_issuer.find('?') != std::string_view::npos) {
    return InvalidArgument("oidc_issuer_invalid", "the configured issuer has a query");
  }
  if (!document.is_object()) return MetadataInvalid("is not a JSON object");
  const auto issuer = document.find("issuer");
  if (issuer == document.end() || !issuer->is_string()) {
    return MetadataInvalid("has no \"issuer\" string");
  }
  // OpenID Connect Discovery §4.3: exactly the issuer the discovery URL was built from, so a
  // provider cannot speak for another (mix-up), and tokens are checked against the same string.
  if (issuer->get<std::string>() != configured_issuer) {
    return InvalidArgument("oidc_provider_issuer_mismatch",
                           "the provider metadata's issuer is not exactly the configured issuer " +
                               std::string(configured_issuer) +
                               " (scheme, host, path and trailing slash must all match)");
  }
  ProviderMetadata metadata;
  metadata.issuer = issuer->get<std::string>();
  QL_ASSIGN_OR_RETURN(std::optional<std::string> authorization,
                      Endpoint(document, "authorization_endpoint", true, allow_http_loopback));
  QL_ASSIGN_OR_RETURN(std::optional<std::string> token,
                      Endpoint(document, "token_endpoint", true, allow_http_loopback));
  QL_ASSIGN_OR_RETURN(std::optional<std::string> jwks,
                      Endpoint(document, "jwks_uri", true, allow_http_loopback));
  metadata.authorization_endpoint = std::move(*authorization);
  metadata.token_endpoint = std::move(*token);
  metadata.jwks_uri = std::move(*jwks);
  QL_ASSIGN_OR_RETURN(metadata.userinfo_endpoint,
                      Endpoint(document, "userinfo_endpoint", false, allow_http_loopback));
  QL_ASSIGN_OR_RETURN(metadata.end_session_endpoint,
                      Endpoint(document, "end_session_endpoint", false, allow_http_loopback));

  QL_ASSIGN_OR_RETURN(std::optional<std::vector<std::string>> response_types,
                      StringList(document, "response_types_supported"));
  if (!response_types.has_value()) return MetadataInvalid("has no \"response_types_supported\"");
  if (!Contains(*response_types, "code")) {
    return InvalidArgument("oidc_provider_code_flow_unsupported",
                           "the provider does not support response type \"code\"");
  }
  QL_ASSIGN_OR_RETURN(std::optional<std::vector<std::string>> challenge_methods,
                      StringList(document, "code_challenge_methods_supported"));
  if (challenge_methods.has_value() && !Contains(*challenge_methods, "S256")) {
    return InvalidArgument("oidc_provider_pkce_unsupported",
                           "the provider lists code_challenge_methods_supported without S256");
  }
  QL_ASSIGN_OR_RETURN(std::optional<std::vector<std::string>> algs,
                      StringList(document, "id_token_signing_alg_values_supported"));
  for (const std::string& name : algs.value_or(std::vector<std::string>{"RS256"})) {
    const std::optional<JwsAlg> alg = ParseJwsAlg(name);
    if (alg.has_value() && std::find(metadata.allowed_algs.begin(), metadata.allowed_algs.end(),
                                     *alg) == metadata.allowed_algs.end()) {
      metadata.allowed_algs.push_back(*alg);
    }
  }
  if (metadata.allowed_algs.empty()) {
    return InvalidArgument("oidc_provider_no_usable_alg",
                           "the provider signs ID tokens with none of RS256, RS384, RS512, PS256, "
                           "PS384, ES256, ES384, EdDSA");
  }
  QL_ASSIGN_OR_RETURN(std::optional<std::vector<std::string>> auth_methods,
                      StringList(document, "token_endpoint_auth_methods_supported"));
  metadata.token_endpoint_auth_methods =
      auth_methods.value_or(std::vector<std::string>{"client_secret_basic"});
  return metadata;
}

Result<std::string> AuthorizationUrl(const ProviderMetadata& metadata, std::string_view client_id,
                                     std::string_view redirect_uri,
                                     const std::vector<std::string>& scopes, std::string_view state,
                                     std::string_view nonce, std::string_view code_challenge) {
  const auto invalid = [](std::string_view why) {
    return InvalidArgument("oidc_authorization_request_invalid",
                           "the authorization request " + std::string(why));
  };
  if (client_id.empty() || redirect_uri.empty() || state.empty() || nonce.empty() ||
      code_challenge.empty()) {
    return invalid("needs a client id, redirect URI, state, nonce and code challenge");
  }
  std::string scope = Contains(scopes, "openid") ? "" : "openid";
  for (const std::string& s : scopes) {
    if (!IsScopeToken(s)) return invalid("has an empty scope or one with a space or quote");
    if (!scope.empty()) scope += ' ';
    scope += s;
  }
  std::string url = metadata.authorization_endpoint;
  // RFC 6749 §3.1: a query the endpoint already has is kept.
  if (url.find('?') == std::string::npos) {
    url += '?';
  } else if (url.back() != '?' && url.back() != '&') {
    url += '&';
  }
  const std::pair<std::string_view, std::string_view> params[] = {
      {"response_type", "code"},
      {"client_id", client_id},
      {"redirect_uri", redirect_uri},
      {"scope", scope},
      {"state", state},
      {"nonce", nonce},
      {"code_challenge", code_challenge},
      {"code_challenge_method", "S256"},
  };
  bool first = true;
  for (const auto& [name, value] : params) {
    if (!first) url += '&';
    first = false;
    url += name;
    url += '=';
    url += PercentEncode(value);
  }
  return url;
}

}  // namespace ql::oidc
