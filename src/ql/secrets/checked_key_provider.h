#pragma once

// The key provider of a daemon that is not ready without a working one (ADR-0037: cluster-control
// refuses readiness while its Secret/KMS provider is missing). It opens the configured provider
// when first checked and, while that fails, at every later check, so a key file that is mounted
// or fixed (chmod 600) later is picked up without a restart; once open, the provider is kept.

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "ql/core/clock.h"
#include "ql/core/status.h"
#include "ql/secrets/configured_provider.h"
#include "ql/secrets/key_provider.h"

namespace ql::secrets {

class CheckedKeyProvider final : public KeyProvider {
 public:
  // A passing check is trusted this long before the provider is probed again.
  inline static constexpr int64_t kDefaultRecheckMs = 60'000;

  // Checks the shape of `config` (ValidateKeyProviderConfig) and returns a provider that has not
  // opened anything yet. Errors: those of ValidateKeyProviderConfig (a usage error).
  static Result<std::unique_ptr<CheckedKeyProvider>> Create(
      KeyProviderConfig config, Clock& clock, int64_t recheck_ms = kDefaultRecheckMs);

  // Returns whether the provider works: Ok when one is configured, it opened, and a fresh random
  // data key wrapped and unwrapped to the same bytes. A passing verdict is kept for `recheck_ms`
  // (an exec helper then runs twice a minute, not at every readiness round); after a failing one
  // every call probes again, opening the provider first when it is not open. Thread-safe; checks
  // run one at a time. Errors: Unavailable `secret_key_provider_missing` when neither a key file
  // nor a helper is configured; those of FileKeyProvider::Open (`secret_key_file_missing`,
  // `secret_key_file_mode`, ...) and of Wrap and Unwrap (`key_provider_failed`,
  // `key_provider_timeout`, `key_provider_protocol`, ...); Corrupt `key_provider_protocol` when
  // the unwrapped key is not the key that was wrapped.
  Status Check();

  // The open provider's key id; empty before it opened.
  const std::string& key_id() const override;
  // As the open provider's. Before it opened: the error that kept it from opening (Unavailable
  // `secret_key_provider_missing` before the first Check).
  Result<WrappedKey> Wrap(const SecretBytes& data_key) override;
  Result<SecretBytes> Unwrap(const WrappedKey& wrapped) override;

 private:
  CheckedKeyProvider(KeyProviderConfig config, Clock& clock, int64_t recheck_ms);
  Status Probe();
  Status NotOpen() const;

  const KeyProviderConfig config_;
  Clock& clock_;
  const int64_t recheck_ms_;
  std::mutex check_mu_;  // serializes Check
  std::unique_ptr<KeyProvider> owned_;            // set once, under check_mu_
  std::atomic<KeyProvider*> open_{nullptr};       // owned_, published once it opened
  Status verdict_;                                // of the last probe, under check_mu_
  int64_t checked_at_ms_ = 0;                     // monotonic, under check_mu_
  bool checked_ = false;                          // under check_mu_
  mutable std::mutex open_error_mu_;
  Status open_error_;  // why it is not open, under open_error_mu_
};

}  // namespace ql::secrets
