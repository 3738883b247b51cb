#include "ql/secrets/secret_bytes.h"

#include <sodium.h>

#include <cstring>
#include <utility>

namespace ql::secrets {

Status InitializeSecrets() {
  // 0: initialized now, 1: already initialized, -1: failure (no usable entropy source).
  if (sodium_init() < 0) {
    return Internal("secret_init_failed", "libsodium could not be initialized");
  }
  return Status::Ok();
}

SecretBytes::SecretBytes(size_t size) : data_(new uint8_t[size]()), size_(size) {}

SecretBytes SecretBytes::CopyOf(std::string_view bytes) {
  SecretBytes out(bytes.size());
  if (!bytes.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

SecretBytes SecretBytes::Random(size_t size) {
  SecretBytes out(size);
  randombytes_buf(out.data(), size);
  return out;
}

SecretBytes::SecretBytes(SecretBytes&& other) noexcept
    : data_(std::move(other.data_)), size_(std::exchange(other.size_, 0)) {}

SecretBytes& SecretBytes::operator=(SecretBytes&& other) noexcept {
  if (this != &other) {
    Wipe();
    data_ = std::move(other.data_);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

SecretBytes::~SecretBytes() { Wipe(); }

void SecretBytes::Wipe() {
  if (data_ != nullptr && size_ > 0) sodium_memzero(data_.get(), size_);
  data_.reset();
  size_ = 0;
}

bool SecretBytes::operator==(const SecretBytes& other) const {
  return size_ == other.size_ && (size_ == 0 || sodium_memcmp(data(), other.data(), size_) == 0);
}

}  // namespace ql::secrets
