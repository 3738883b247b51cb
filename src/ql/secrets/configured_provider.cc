#include "ql/secrets/configured_provider.h"

#include <utility>

#include "ql/secrets/file_key_provider.h"
#include "ql/secrets/secret_bytes.h"

namespace ql::secrets {

Result<std::unique_ptr<KeyProvider>> OpenConfiguredKeyProvider(const KeyProviderConfig& config,
                                                               Clock& clock) {
  QL_RETURN_IF_ERROR(InitializeSecrets());
  if (!config.key_file.empty() && !config.exec.empty()) {
    return InvalidArgument("key_provider_conflict",
                           "give either --secret-key-file or --secret-key-exec, not both");
  }
  if (config.exec.empty() && (!config.exec_args.empty() || !config.exec_key_id.empty())) {
    return InvalidArgument("key_provider_bad_config",
                           "--secret-key-exec-arg and --secret-key-id need --secret-key-exec");
  }
  if (!config.key_file.empty()) {
    QL_ASSIGN_OR_RETURN(std::unique_ptr<FileKeyProvider> file,
                        FileKeyProvider::Open(config.key_file));
    return std::unique_ptr<KeyProvider>(std::move(file));
  }
  if (config.exec.empty()) return std::unique_ptr<KeyProvider>();
  if (config.exec_key_id.empty()) {
    return InvalidArgument("key_provider_bad_config",
                           "--secret-key-exec needs --secret-key-id (the key it wraps with)");
  }
  ExecKeyProviderOptions options;
  options.command.push_back(config.exec);
  options.command.insert(options.command.end(), config.exec_args.begin(), config.exec_args.end());
  options.key_id = config.exec_key_id;
  options.timeout_ms = config.exec_timeout_ms;
  QL_ASSIGN_OR_RETURN(std::unique_ptr<ExecKeyProvider> exec,
                      ExecKeyProvider::Create(std::move(options), clock));
  return std::unique_ptr<KeyProvider>(std::move(exec));
}

}  // namespace ql::secrets
