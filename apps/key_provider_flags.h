#pragma once

// The key provider flags shared by ql-cluster and ql-worker (docs/secret-providers.md).

#include <CLI/CLI.hpp>
#include <string>

#include "ql/secrets/configured_provider.h"

namespace ql {

// Adds --secret-key-file, --secret-key-exec, --secret-key-exec-arg, --secret-key-id and
// --secret-key-timeout-ms to `command`, filling `config`. `prefix` ("" or "new-") names a
// second provider (--new-secret-key-file, ...) for a rotation.
inline void AddKeyProviderFlags(CLI::App& command, secrets::KeyProviderConfig& config,
                                const std::string& prefix = "", const std::string& what = "") {
  const std::string of = what.empty() ? "" : " (" + what + ")";
  command.add_option("--" + prefix + "secret-key-file", config.key_file,
                     "Key file of the file key provider: 32 bytes, mode 0600" + of);
  command.add_option("--" + prefix + "secret-key-exec", config.exec,
                     "Helper command of the exec key provider" + of);
  command
      .add_option("--" + prefix + "secret-key-exec-arg", config.exec_args,
                  "One argument for the helper (repeatable)" + of)
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  command.add_option("--" + prefix + "secret-key-id", config.exec_key_id,
                     "Key id the helper wraps new data keys with" + of);
  command.add_option("--" + prefix + "secret-key-timeout-ms", config.exec_timeout_ms,
                     "How long one helper run may take (default 10000)" + of);
}

}  // namespace ql
