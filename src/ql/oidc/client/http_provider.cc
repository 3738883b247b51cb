#include "ql/oidc/client/http_provider.h"

#include <httplib.h>

#include <utility>

#include "ql/core/http_endpoint.h"
#include "ql/oidc/id_token.h"
#include "ql/oidc/pkce.h"

namespace ql::oidc {
namespace {

using nlohmann::json;

Status Unreachable(const std::string& message) {
  return Unavailable("oidc_unavailable", "the single sign-on provider " + message);
}

Status Refused(const std::string& message) { return PermissionDenied("oidc_failed", message); }

// Splits "http[s]://host[:port]/path?query" into the part a client connects to and the rest.
Result<std::pair<std::string, std::string>> SplitUrl(const std::string& url) {
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos) return Refused("not a URL: " + url.substr(0, 128));
  const size_t path_at = url.find_first_of("/?#", scheme_end + 3);
  std::string origin = url.substr(0, path_at);
  std::string rest = path_at == std::string::npos ? std::string("/") : url.substr(path_at);
  if (rest[0] != '/') rest = "/" + rest;
  if (const size_t hash = rest.find('#'); hash != std::string::npos) rest.resize(hash);
  return std::make_pair(std::move(origin), std::move(rest));
}

}  // namespace

HttpProvider::HttpProvider(OidcConfig config, Clock& clock)
    : config_(std::move(config)), clock_(clock) {}

Result<json> HttpProvider::Exchange(const std::string& url, const std::string& what,
                                    const std::string& form_body) {
  Result<HttpEndpoint> endpoint = ParseHttpEndpoint(url, "");
  if (!endpoint.ok()) return Refused(what + " URL is invalid: " + endpoint.status().message());
  if (!endpoint->tls && !(config_.allow_insecure_http && IsLoopbackHost(endpoint->host))) {
    return Refused(what + " must be https: " + url.substr(0, 128));
  }
  QL_ASSIGN_OR_RETURN(auto parts, SplitUrl(url));
  httplib::Client client(endpoint->SchemeHostPort());
#ifdef CPPHTTPLIB_OPENSSL_SUPPORT
  if (endpoint->tls) {
    client.enable_server_certificate_verification(true);
    if (!config_.ca_file.empty()) client.set_ca_cert_path(config_.ca_file.c_str());
  }
#endif
  client.set_connection_timeout(5, 0);
  client.set_read_timeout(10, 0);
  client.set_write_timeout(10, 0);
  client.set_follow_location(false);
  httplib::Headers headers{{"Accept", "application/json"}, {"User-Agent", "QingLong"}};
  if (!form_body.empty() && !config_.client_secret.empty()) {
    // client_secret_basic: both halves form-encoded first (RFC 6749 §2.3.1).
    client.set_basic_auth(httplib::detail::encode_query_param(config_.client_id),
                          httplib::detail::encode_query_param(config_.client_secret));
  }
  httplib::Result answer = form_body.empty() ? client.Get(parts.second, headers)
                                             : client.Post(parts.second, headers, form_body,
                                                           "application/x-www-form-urlencoded");
  if (!answer) {
    return Unreachable("could not be reached for its " + what + " (" +
                       httplib::to_string(answer.error()) + ")");
  }
  if (answer->body.size() > kMaxResponseBytes) {
    return Refused("the provider's " + what + " is larger than 1 MiB");
  }
  json body = json::parse(answer->body, nullptr, false);
  if (answer->status != 200) {
    std::string detail;
    if (body.is_object() && body.contains("error") && body["error"].is_string()) {
      detail = ": " + body["error"].get<std::string>().substr(0, 64);
    }
    if (answer->status >= 500) {
      return Unreachable("answered HTTP " + std::to_string(answer->status) + " for its " + what);
    }
    return Refused("the provider refused the " + what + " (HTTP " + std::to_string(answer->status) +
                   detail + ")");
  }
  if (!body.is_object()) return Refused("the provider's " + what + " is not a JSON object");
  return body;
}

Result<ProviderMetadata> HttpProvider::Metadata() {
  const int64_t now = clock_.NowMs();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (metadata_.has_value() && now - metadata_at_ms_ < kCacheMs) return *metadata_;
  }
  std::string base = config_.issuer;
  while (!base.empty() && base.back() == '/') base.pop_back();
  QL_ASSIGN_OR_RETURN(json document, Exchange(base + "/.well-known/openid-configuration",
                                              "discovery document", ""));
  Result<ProviderMetadata> metadata =
      ParseProviderMetadata(document, config_.issuer, config_.allow_insecure_http);
  if (!metadata.ok()) {
    return Refused("the provider's discovery document is unusable: " + metadata.status().message());
  }
  std::lock_guard<std::mutex> lock(mu_);
  metadata_ = *metadata;
  metadata_at_ms_ = now;
  return metadata;
}

Result<JwkSet> HttpProvider::Keys(const ProviderMetadata& metadata, bool refresh) {
  const int64_t now = clock_.NowMs();
  {
    std::lock_guard<std::mutex> lock(mu_);
    const bool fresh = keys_.has_value() && now - keys_at_ms_ < kCacheMs;
    const bool may_refetch = !keys_.has_value() || now - keys_at_ms_ >= kKeyRefetchMs;
    if (fresh && (!refresh || !may_refetch)) return *keys_;
  }
  QL_ASSIGN_OR_RETURN(json document, Exchange(metadata.jwks_uri, "signing keys", ""));
  Result<JwkSet> keys = ParseJwks(document);
  if (!keys.ok()) {
    return Refused("the provider's signing keys are unusable: " + keys.status().message());
  }
  std::lock_guard<std::mutex> lock(mu_);
  keys_ = *keys;
  keys_at_ms_ = now;
  return keys;
}

Status HttpProvider::Check() { return Metadata().status(); }

Result<std::string> HttpProvider::AuthorizationUrl(const std::string& state,
                                                   const std::string& nonce,
                                                   const std::string& code_verifier) {
  QL_ASSIGN_OR_RETURN(ProviderMetadata metadata, Metadata());
  QL_ASSIGN_OR_RETURN(std::string challenge, CodeChallengeS256(code_verifier));
  return oidc::AuthorizationUrl(metadata, config_.client_id, config_.redirect_uri, config_.scopes,
                                state, nonce, challenge);
}

Result<OidcClaims> HttpProvider::Redeem(const std::string& code, const std::string& code_verifier,
                                        const std::string& nonce) {
  if (code.empty() || code.size() > 2048) return Refused("the provider's code is missing");
  QL_ASSIGN_OR_RETURN(ProviderMetadata metadata, Metadata());
  using httplib::detail::encode_query_param;
  std::string form = "grant_type=authorization_code&code=" + encode_query_param(code) +
                     "&redirect_uri=" + encode_query_param(config_.redirect_uri) +
                     "&code_verifier=" + encode_query_param(code_verifier);
  // A public client (no secret) names itself in the body.
  if (config_.client_secret.empty()) form += "&client_id=" + encode_query_param(config_.client_id);
  QL_ASSIGN_OR_RETURN(json tokens, Exchange(metadata.token_endpoint, "token request", form));
  if (!tokens.contains("id_token") || !tokens["id_token"].is_string()) {
    return Refused("the provider's token answer has no id_token");
  }
  const std::string id_token = tokens["id_token"].get<std::string>();
  QL_ASSIGN_OR_RETURN(JwkSet keys, Keys(metadata, false));
  Result<VerifiedJws> verified = VerifyJws(id_token, keys, metadata.allowed_algs);
  if (!verified.ok() && verified.status().reason() == "oidc_key_unknown") {
    QL_ASSIGN_OR_RETURN(keys, Keys(metadata, true));
    verified = VerifyJws(id_token, keys, metadata.allowed_algs);
  }
  if (!verified.ok()) return Refused("the ID token is not valid: " + verified.status().message());
  IdTokenExpectations expected;
  expected.issuer = metadata.issuer;
  expected.client_id = config_.client_id;
  expected.nonce = nonce;
  expected.now_ms = clock_.NowMs();
  Result<IdTokenClaims> claims = ValidateIdToken(verified->payload, expected);
  if (!claims.ok()) return Refused("the ID token is not valid: " + claims.status().message());
  OidcClaims out;
  out.sub = claims->sub;
  out.email = claims->email.value_or("");
  out.email_verified = claims->email_verified;
  out.preferred_username = claims->preferred_username.value_or("");
  out.name = claims->name.value_or("");
  out.groups = claims->groups;
  // A groups claim under another name.
  if (config_.groups_claim != "groups") {
    out.groups.clear();
    const json& payload = claims->payload;
    if (payload.contains(config_.groups_claim)) {
      const json& g = payload[config_.groups_claim];
      if (g.is_string()) out.groups.push_back(g.get<std::string>());
      if (g.is_array()) {
        for (const json& item : g) {
          if (item.is_string()) out.groups.push_back(item.get<std::string>());
        }
      }
    }
  }
  return out;
}

}  // namespace ql::oidc
