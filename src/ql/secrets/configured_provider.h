#pragma once

// The key provider a daemon is configured with: a key file or an exec helper
// (docs/secret-providers.md), as ql-cluster and ql-worker take them on their command line.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ql/core/clock.h"
#include "ql/core/status.h"
#include "ql/secrets/exec_key_provider.h"
#include "ql/secrets/key_provider.h"

namespace ql::secrets {

struct KeyProviderConfig {
  std::string key_file;                // --secret-key-file PATH
  std::string exec;                    // --secret-key-exec PATH: the helper
  std::vector<std::string> exec_args;  // --secret-key-exec-arg ARG, repeatable
  std::string exec_key_id;             // --secret-key-id ID: the key the helper wraps with
  int64_t exec_timeout_ms = kDefaultKeyProviderTimeoutMs;  // --secret-key-timeout-ms
};

// Returns ok when `config` is well formed, reading neither the key file nor running the helper.
// Errors: InvalidArgument `key_provider_conflict` (both a key file and a helper),
// `key_provider_bad_config` (a helper without --secret-key-id, helper flags without a helper, or
// options ExecKeyProvider::Create refuses) and `key_id_invalid`.
Status ValidateKeyProviderConfig(const KeyProviderConfig& config, Clock& clock);

// Returns the configured provider, or null when neither a key file nor a helper is configured
// (the daemon then holds no secrets). Calls InitializeSecrets. Errors: InvalidArgument
// `key_provider_conflict` (both a key file and a helper), `key_provider_bad_config` (a helper
// without --secret-key-id, or helper flags without a helper), and those of FileKeyProvider::Open
// and ExecKeyProvider::Create.
Result<std::unique_ptr<KeyProvider>> OpenConfiguredKeyProvider(const KeyProviderConfig& config,
                                                               Clock& clock);

}  // namespace ql::secrets
