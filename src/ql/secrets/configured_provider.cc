#include "ql/secrets/configured_provider.h"

#include <utility>

#include "ql/secrets/file_key_provider.h"
#include "ql/secrets/secret_bytes.h"

namespace ql::secrets {
namespace {

// The checks that need neither the key file nor the helper.
Status CheckFlags(const KeyProviderConfig& config) {
  if (!config.key_file.empty() && !config.exec.empty()) {
    return InvalidArgument("key_provider_conflict",
                           "give either --secret-key-file or --secret-key-exec, not both");
  }
  if (config.exec.empty() && (!config.exec_args.empty() || !config.exec_key_id.empty())) {
    return InvalidArgument("key_provider_bad_config",
                           "--secret-key-exec-arg and --secret-key-id need --secret-key-exec");
  }
  if (!config.exec.empty() && config.exec_key_id.empty()) {
    return InvalidArgument("key_provider_bad_config",
                           "--secret-key-exec needs --secret-key-id (the key it wraps with)");
  }
  return Status::Ok();
}

// Creating an exec provider starts nothing: it only checks the options.
Result<std::unique_ptr<ExecKeyProvider>> CreateExec(const KeyProviderConfig& config, Clock& clock) {
  ExecKeyProviderOptions options;
  options.command.push_back(config.exec);
  options.command.insert(options.command.end(), config.exec_args.begin(), config.exec_args.end());
  options.key_id = config.exec_key_id;
  options.timeout_ms = config.exec_timeout_ms;
  return ExecKeyProvider::Create(std::move(options), clock);
}

}  // namespace

Status ValidateKeyProviderConfig(const KeyProviderConfig& config, Clock& clock) {
  QL_RETURN_IF_ERROR(CheckFlags(config));
  if (!config.exec.empty()) return CreateExec(config, clock).status();
  return Status::Ok();
}

Result<std::unique_ptr<KeyProvider>> OpenConfiguredKeyProvider(const KeyProviderConfig& config,
                                                               Clock& clock) {
  QL_RETURN_IF_ERROR(InitializeSecrets());
  QL_RETURN_IF_ERROR(CheckFlags(config));
  if (!config.key_file.empty()) {
    QL_ASSIGN_OR_RETURN(std::unique_ptr<FileKeyProvider> file,
                        FileKeyProvider::Open(config.key_file));
    return std::unique_ptr<KeyProvider>(std::move(file));
  }
  if (config.exec.empty()) return std::unique_ptr<KeyProvider>();
  QL_ASSIGN_OR_RETURN(std::unique_ptr<ExecKeyProvider> exec, CreateExec(config, clock));
  return std::unique_ptr<KeyProvider>(std::move(exec));
}

}  // namespace ql::secrets
