#include "ql/secrets/password_hasher.h"

#include <sodium.h>

#include <cstring>

namespace ql {

SodiumPasswordHasher::SodiumPasswordHasher() { (void)sodium_init(); }

Result<std::string> SodiumPasswordHasher::Hash(std::string_view password) {
  char out[crypto_pwhash_STRBYTES];
  running_.acquire();
  const int rc = crypto_pwhash_str_alg(out, password.data(), password.size(), kOpsLimit,
                                       kMemLimitBytes, crypto_pwhash_ALG_ARGON2ID13);
  running_.release();
  if (rc != 0) {
    return Internal("password_hash_failed", "the password could not be hashed (out of memory)");
  }
  return std::string(out);
}

bool SodiumPasswordHasher::Verify(const std::string& hash, std::string_view password) {
  if (hash.size() >= crypto_pwhash_STRBYTES || hash.rfind("$argon2id$", 0) != 0) return false;
  running_.acquire();
  const int rc = crypto_pwhash_str_verify(hash.c_str(), password.data(), password.size());
  running_.release();
  return rc == 0;
}

std::string SodiumPasswordHasher::Describe() const {
  return "argon2id m=" + std::to_string(kMemLimitBytes / 1024) +
         " KiB t=" + std::to_string(kOpsLimit) + " p=1";
}

}  // namespace ql
