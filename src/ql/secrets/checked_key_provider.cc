#include "ql/secrets/checked_key_provider.h"

#include <utility>

namespace ql::secrets {
namespace {

Status Missing() {
  return Unavailable("secret_key_provider_missing",
                     "no key provider is configured: a replica is not ready without one; start "
                     "it with --secret-key-file or --secret-key-exec (docs/secret-providers.md)");
}

}  // namespace

Result<std::unique_ptr<CheckedKeyProvider>> CheckedKeyProvider::Create(KeyProviderConfig config,
                                                                       Clock& clock,
                                                                       int64_t recheck_ms) {
  QL_RETURN_IF_ERROR(ValidateKeyProviderConfig(config, clock));
  return std::unique_ptr<CheckedKeyProvider>(
      new CheckedKeyProvider(std::move(config), clock, recheck_ms));
}

CheckedKeyProvider::CheckedKeyProvider(KeyProviderConfig config, Clock& clock,
                                       int64_t recheck_ms)
    : config_(std::move(config)), clock_(clock), recheck_ms_(recheck_ms), open_error_(Missing()) {}

Status CheckedKeyProvider::Check() {
  std::lock_guard<std::mutex> lock(check_mu_);
  const int64_t now = clock_.MonotonicMs();
  if (checked_ && verdict_.ok() && now - checked_at_ms_ < recheck_ms_) return verdict_;
  verdict_ = Probe();
  checked_at_ms_ = now;
  checked_ = true;
  return verdict_;
}

Status CheckedKeyProvider::Probe() {
  if (config_.key_file.empty() && config_.exec.empty()) return Missing();
  if (owned_ == nullptr) {
    Result<std::unique_ptr<KeyProvider>> opened = OpenConfiguredKeyProvider(config_, clock_);
    if (!opened.ok()) {
      std::lock_guard<std::mutex> lock(open_error_mu_);
      open_error_ = opened.status();
      return opened.status();
    }
    owned_ = std::move(opened).value();
    open_ = owned_.get();
  }
  const SecretBytes data_key = SecretBytes::Random(kDataKeyBytes);
  QL_ASSIGN_OR_RETURN(WrappedKey wrapped, owned_->Wrap(data_key));
  QL_ASSIGN_OR_RETURN(SecretBytes unwrapped, owned_->Unwrap(wrapped));
  if (!(unwrapped == data_key)) {
    return Corrupt("key_provider_protocol",
                   "the key provider unwrapped a data key it had just wrapped to other bytes");
  }
  return Status::Ok();
}

Status CheckedKeyProvider::NotOpen() const {
  std::lock_guard<std::mutex> lock(open_error_mu_);
  return open_error_;
}

const std::string& CheckedKeyProvider::key_id() const {
  static const std::string kNone;
  KeyProvider* open = open_.load();
  return open != nullptr ? open->key_id() : kNone;
}

Result<WrappedKey> CheckedKeyProvider::Wrap(const SecretBytes& data_key) {
  KeyProvider* open = open_.load();
  if (open == nullptr) return NotOpen();
  return open->Wrap(data_key);
}

Result<SecretBytes> CheckedKeyProvider::Unwrap(const WrappedKey& wrapped) {
  KeyProvider* open = open_.load();
  if (open == nullptr) return NotOpen();
  return open->Unwrap(wrapped);
}

}  // namespace ql::secrets
