#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "ql/core/status.h"

namespace ql::secrets {

// Initializes libsodium (thread-safe, idempotent). Call once at start, before any other function
// of this library and before threads are started. Errors: Internal `secret_init_failed`.
Status InitializeSecrets();

// A fixed-size buffer for plaintext (secret values, data keys, key-file keys) that is wiped with
// sodium_memzero when it is destroyed or overwritten by a move. Move-only, never reallocates, so
// no stray copy of its bytes is left behind by the container itself. Callers that copy the bytes
// out (for example into a command's environment) own the wiping of their copies.
class SecretBytes {
 public:
  SecretBytes() = default;
  // Returns `size` zero bytes.
  explicit SecretBytes(size_t size);
  // Returns a copy of `bytes`.
  static SecretBytes CopyOf(std::string_view bytes);
  // Returns `size` random bytes from the kernel's CSPRNG (randombytes_buf).
  static SecretBytes Random(size_t size);

  SecretBytes(SecretBytes&& other) noexcept;
  SecretBytes& operator=(SecretBytes&& other) noexcept;
  SecretBytes(const SecretBytes&) = delete;
  SecretBytes& operator=(const SecretBytes&) = delete;
  ~SecretBytes();

  uint8_t* data() { return data_.get(); }
  const uint8_t* data() const { return data_.get(); }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::string_view view() const { return {reinterpret_cast<const char*>(data_.get()), size_}; }
  // Compares in constant time for equal sizes.
  bool operator==(const SecretBytes& other) const;

 private:
  void Wipe();

  std::unique_ptr<uint8_t[]> data_;
  size_t size_ = 0;
};

}  // namespace ql::secrets
