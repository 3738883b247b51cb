#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ql/core/clock.h"
#include "ql/core/status.h"
#include "ql/secrets/key_provider.h"

namespace ql::secrets {

inline constexpr int64_t kDefaultKeyProviderTimeoutMs = 10'000;
// The helper's answer is read up to this size; a longer one is a protocol error.
inline constexpr size_t kMaxKeyProviderReplyBytes = 64 * 1024;
// Bytes of the helper's stderr quoted in a key_provider_failed message.
inline constexpr size_t kMaxKeyProviderStderrQuoted = 512;

struct ExecKeyProviderOptions {
  // The helper's argv; argv[0] is an absolute path or a name looked up in PATH. The helper gets
  // this process's environment, its own process group and one request per run.
  std::vector<std::string> command;
  // The key Wrap asks for (see ValidateKeyId); Unwrap asks for the key id stored with the
  // wrapped key, so the helper can still unwrap under keys it rotated away from.
  std::string key_id;
  // How long one helper run may take before its process group is killed.
  int64_t timeout_ms = kDefaultKeyProviderTimeoutMs;
};

// The `exec` key provider: runs an external helper per wrap or unwrap, speaking the JSON
// protocol of docs/secret-providers.md on stdin/stdout, so a cloud KMS or a Vault CLI can hold
// the key. The request is written before the helper starts (it fits the pipe), so a helper that
// exits early cannot stall or signal this process. Each call is independent; thread-safe.
//
// Errors of Wrap and Unwrap (each message names the helper):
//   Unavailable `key_provider_timeout`   no answer within timeout_ms; the group was SIGKILLed;
//   Unavailable `key_provider_failed`    the helper could not start, exited with a status other
//                                        than 0 (the status and the start of its stderr are in
//                                        the message) or was killed by a signal;
//   Corrupt `key_provider_protocol`      exit 0 but stdout is not one JSON object with the
//                                        expected base64 field, the wrapped key is empty or
//                                        over kMaxWrappedKeyBytes, or an unwrapped key is not
//                                        kDataKeyBytes long.
// The helper's stdout is never quoted: it may hold key material.
class ExecKeyProvider final : public KeyProvider {
 public:
  // Errors: InvalidArgument `key_provider_bad_config` (empty command or argument with a NUL
  // byte, timeout not in 1..600000 ms) and `key_id_invalid`.
  static Result<std::unique_ptr<ExecKeyProvider>> Create(ExecKeyProviderOptions options,
                                                         Clock& clock);

  const std::string& key_id() const override { return options_.key_id; }
  Result<WrappedKey> Wrap(const SecretBytes& data_key) override;
  Result<SecretBytes> Unwrap(const WrappedKey& wrapped) override;

 private:
  ExecKeyProvider(ExecKeyProviderOptions options, Clock& clock)
      : options_(std::move(options)), clock_(clock) {}

  ExecKeyProviderOptions options_;
  Clock& clock_;
};

}  // namespace ql::secrets
