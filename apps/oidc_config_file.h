#pragma once

// The single sign-on configuration file (--oidc-config, ql-local and ql-cluster): a JSON
// document (src/ql/core/oidc_config.h) whose client secret is read from its own file, which must
// not be readable by group or others.

#include <sys/stat.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "ql/core/oidc_config.h"
#include "ql/core/status.h"

namespace ql {

inline Result<OidcConfig> LoadOidcConfigFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return InvalidArgument("invalid_oidc_config", "cannot read --oidc-config " + path);
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json document = nlohmann::json::parse(text.str(), nullptr, false);
  if (document.is_discarded()) {
    return InvalidArgument("invalid_oidc_config", path + " is not JSON");
  }
  Result<OidcConfig> config = ParseOidcConfig(document);
  if (!config.ok()) {
    return InvalidArgument("invalid_oidc_config", path + ": " + config.status().message());
  }
  if (!config->client_secret_file.empty()) {
    struct stat st {};
    if (::stat(config->client_secret_file.c_str(), &st) != 0) {
      return InvalidArgument("invalid_oidc_config",
                             "cannot read client_secret_file " + config->client_secret_file);
    }
    if ((st.st_mode & 077) != 0) {
      return InvalidArgument("invalid_oidc_config", "client_secret_file " +
                                                        config->client_secret_file +
                                                        " is readable by others (chmod 600)");
    }
    std::ifstream secret(config->client_secret_file);
    std::getline(secret, config->client_secret);
    if (config->client_secret.empty()) {
      return InvalidArgument("invalid_oidc_config",
                             "client_secret_file " + config->client_secret_file + " is empty");
    }
  }
  return config;
}

}  // namespace ql
