#pragma once

// PasswordHasher over libsodium's Argon2id (crypto_pwhash_str_alg, ARGON2ID13). Parameters
// follow OWASP's recommendation for Argon2id — 19 MiB of memory, 2 passes, 1 lane — which an
// edge device can afford; they are encoded in every hash, so raising them later leaves old
// hashes verifiable. At most two hashes run at once (a burst of sign-ins queues instead of
// taking 19 MiB each).

#include <cstddef>
#include <cstdint>
#include <semaphore>
#include <string>
#include <string_view>

#include "ql/core/password.h"

namespace ql {

class SodiumPasswordHasher final : public PasswordHasher {
 public:
  static constexpr uint64_t kOpsLimit = 2;
  static constexpr size_t kMemLimitBytes = size_t{19} * 1024 * 1024;

  SodiumPasswordHasher();
  Result<std::string> Hash(std::string_view password) override;
  bool Verify(const std::string& hash, std::string_view password) override;
  std::string Describe() const override;

 private:
  std::counting_semaphore<2> running_{2};
};

}  // namespace ql
