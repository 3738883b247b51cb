#include "ql/core/oidc_config.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "ql/core/http_endpoint.h"

namespace ql {
namespace {

using nlohmann::json;

Status ConfigError(const std::string& message) {
  return InvalidArgument("invalid_oidc_config", message);
}

Result<std::string> StringField(const json& doc, const char* name, bool required,
                                const std::string& fallback = std::string()) {
  if (!doc.contains(name)) {
    if (required) return ConfigError(std::string(name) + " is required");
    return fallback;
  }
  const json& v = doc.at(name);
  if (!v.is_string() || (required && v.get<std::string>().empty())) {
    return ConfigError(std::string(name) + " must be a" + (required ? " non-empty" : "") +
                       " string");
  }
  if (v.get<std::string>().size() > 2048) return ConfigError(std::string(name) + " is too long");
  return v.get<std::string>();
}

Result<bool> BoolField(const json& doc, const char* name) {
  if (!doc.contains(name)) return false;
  if (!doc.at(name).is_boolean()) return ConfigError(std::string(name) + " must be true or false");
  return doc.at(name).get<bool>();
}

// An http(s) URL; plain http only when allowed and the host is loopback.
Status CheckUrl(const char* field, const std::string& url, bool allow_insecure_http) {
  Result<HttpEndpoint> endpoint = ParseHttpEndpoint(url, "");
  if (!endpoint.ok() || (url.rfind("https://", 0) != 0 && url.rfind("http://", 0) != 0)) {
    return ConfigError(std::string(field) + " must be an http(s) URL: " +
                       (endpoint.ok() ? std::string("no scheme") : endpoint.status().message()));
  }
  if (!endpoint->tls && !(allow_insecure_http && IsLoopbackHost(endpoint->host))) {
    return ConfigError(std::string(field) +
                       " must be https (plain http only to a loopback provider with "
                       "allow_insecure_http)");
  }
  return Status();
}

}  // namespace

Result<OidcConfig> ParseOidcConfig(const json& doc) {
  if (!doc.is_object()) return ConfigError("the configuration must be a JSON object");
  static const std::set<std::string> kFields = {"name",
                                                "issuer",
                                                "client_id",
                                                "client_secret_file",
                                                "redirect_uri",
                                                "scopes",
                                                "ca_file",
                                                "allow_insecure_http",
                                                "principal_claim",
                                                "principals",
                                                "claim_is_name",
                                                "create_principals",
                                                "groups_claim",
                                                "groups"};
  for (const auto& [key, value] : doc.items()) {
    if (kFields.count(key) == 0) return ConfigError("unknown field \"" + key.substr(0, 64) + "\"");
  }
  OidcConfig out;
  QL_ASSIGN_OR_RETURN(out.name, StringField(doc, "name", false, out.name));
  if (out.name.empty() || out.name.size() > 64) return ConfigError("name must be 1-64 bytes");
  QL_ASSIGN_OR_RETURN(out.issuer, StringField(doc, "issuer", true));
  QL_ASSIGN_OR_RETURN(out.client_id, StringField(doc, "client_id", true));
  QL_ASSIGN_OR_RETURN(out.client_secret_file, StringField(doc, "client_secret_file", false));
  QL_ASSIGN_OR_RETURN(out.redirect_uri, StringField(doc, "redirect_uri", true));
  QL_ASSIGN_OR_RETURN(out.ca_file, StringField(doc, "ca_file", false));
  QL_ASSIGN_OR_RETURN(out.allow_insecure_http, BoolField(doc, "allow_insecure_http"));
  QL_RETURN_IF_ERROR(CheckUrl("issuer", out.issuer, out.allow_insecure_http));
  QL_RETURN_IF_ERROR(CheckUrl("redirect_uri", out.redirect_uri, true));
  if (out.redirect_uri.find("/api/v1/sign-in/oidc/callback") == std::string::npos) {
    return ConfigError("redirect_uri must end in /api/v1/sign-in/oidc/callback");
  }
  if (doc.contains("scopes")) {
    const json& scopes = doc.at("scopes");
    if (!scopes.is_array() || scopes.empty() || scopes.size() > 20) {
      return ConfigError("scopes must be a list of 1-20 strings");
    }
    out.scopes.clear();
    for (const json& s : scopes) {
      if (!s.is_string() || s.get<std::string>().empty() ||
          s.get<std::string>().find_first_of(" \"\\") != std::string::npos) {
        return ConfigError("every scope must be a non-empty string without spaces");
      }
      out.scopes.push_back(s.get<std::string>());
    }
  }
  if (std::find(out.scopes.begin(), out.scopes.end(), "openid") == out.scopes.end()) {
    return ConfigError("scopes must include openid");
  }
  QL_ASSIGN_OR_RETURN(out.principal_claim,
                      StringField(doc, "principal_claim", false, out.principal_claim));
  if (out.principal_claim != "sub" && out.principal_claim != "email" &&
      out.principal_claim != "preferred_username") {
    return ConfigError("principal_claim is sub, email or preferred_username");
  }
  if (doc.contains("principals")) {
    const json& principals = doc.at("principals");
    if (!principals.is_object()) return ConfigError("principals must map claim values to names");
    for (const auto& [value, name] : principals.items()) {
      if (!name.is_string() || !ValidatePrincipalName(name.get<std::string>()).ok()) {
        return ConfigError("principals[\"" + value.substr(0, 64) + "\"] must be a principal name");
      }
      out.principals[value] = name.get<std::string>();
    }
  }
  QL_ASSIGN_OR_RETURN(out.claim_is_name, BoolField(doc, "claim_is_name"));
  QL_ASSIGN_OR_RETURN(out.create_principals, BoolField(doc, "create_principals"));
  QL_ASSIGN_OR_RETURN(out.groups_claim, StringField(doc, "groups_claim", false, out.groups_claim));
  if (doc.contains("groups")) {
    const json& groups = doc.at("groups");
    if (!groups.is_object()) return ConfigError("groups must map group names to grants");
    for (const auto& [group, grants] : groups.items()) {
      const std::string where = "groups[\"" + group.substr(0, 64) + "\"]";
      if (!grants.is_array()) return ConfigError(where + " must be a list of grants");
      for (const json& g : grants) {
        if (!g.is_object() || g.size() != 2 || !g.contains("scope") || !g.contains("role") ||
            !g.at("scope").is_string() || !g.at("role").is_string()) {
          return ConfigError(where + ": a grant is {\"scope\": ..., \"role\": ...}");
        }
        OidcGrant grant{g.at("scope").get<std::string>(), g.at("role").get<std::string>()};
        Result<Role> role = ParseRole(grant.role);
        if (!role.ok() || *role == Role::kNone) {
          return ConfigError(where + ": role is owner, admin, operator or viewer");
        }
        if (grant.scope == kInstallationScope) {
          if (*role < Role::kAdmin) {
            return ConfigError(where + ": the installation scope knows only owner and admin");
          }
        } else if (!ValidateProjectSlug(grant.scope).ok()) {
          return ConfigError(where + ": scope is \"installation\" or a project's name");
        }
        out.groups[group].push_back(std::move(grant));
      }
    }
  }
  return out;
}

Result<std::string> OidcPrincipalName(const OidcConfig& config, const OidcClaims& claims) {
  std::string value;
  if (config.principal_claim == "sub") {
    value = claims.sub;
  } else if (config.principal_claim == "email") {
    if (claims.email_verified) value = claims.email;
  } else {
    value = claims.preferred_username;
  }
  if (value.empty()) {
    return PermissionDenied("oidc_no_principal",
                            "the provider gave no " + config.principal_claim +
                                (config.principal_claim == "email" ? " (verified)" : "") +
                                " claim to find the principal by");
  }
  if (auto it = config.principals.find(value); it != config.principals.end()) return it->second;
  if (config.claim_is_name && ValidatePrincipalName(value).ok()) return value;
  return PermissionDenied("oidc_no_principal",
                          "no principal is configured for this " + config.principal_claim);
}

std::map<std::string, Role> OidcDesiredRoles(const OidcConfig& config, const OidcClaims& claims) {
  std::map<std::string, Role> out;
  for (const auto& [group, grants] : config.groups) {
    for (const OidcGrant& g : grants) out.emplace(g.scope, Role::kNone);
  }
  for (const std::string& group : claims.groups) {
    auto it = config.groups.find(group);
    if (it == config.groups.end()) continue;
    for (const OidcGrant& g : it->second) {
      Result<Role> parsed = ParseRole(g.role);
      const Role role = parsed.ok() ? *parsed : Role::kNone;
      Role& held = out[g.scope];
      held = std::max(held, role);
    }
  }
  return out;
}

}  // namespace ql
