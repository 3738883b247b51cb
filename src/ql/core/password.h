#pragma once

// Passwords of people (DESIGN §9, sign-in): the policy a new one must meet and the port that
// hashes and checks them (implemented with libsodium's Argon2id in ql_secrets).

#include <string>
#include <string_view>

#include "ql/core/status.h"

namespace ql {

inline constexpr size_t kMinPasswordBytes = 12;
inline constexpr size_t kMaxPasswordBytes = 256;

// Checks a new password: kMinPasswordBytes..kMaxPasswordBytes bytes of valid UTF-8, more than
// three distinct characters, not one of the commonest passwords and not the principal's name.
// InvalidArgument `password_too_short`, `password_too_long`, `password_invalid_utf8`,
// `password_too_common` (the message says why, never repeats the password).
Status CheckPasswordPolicy(std::string_view password, std::string_view principal_name);

class PasswordHasher {
 public:
  virtual ~PasswordHasher() = default;
  // Returns the encoded hash of `password` (algorithm, parameters and salt included).
  // Internal `password_hash_failed` when the hash cannot be made (out of memory).
  virtual Result<std::string> Hash(std::string_view password) = 0;
  // Returns whether `password` matches `hash`; false for a malformed hash.
  virtual bool Verify(const std::string& hash, std::string_view password) = 0;
  // The parameters new hashes are made with, for people ("argon2id m=19456 KiB t=2 p=1").
  virtual std::string Describe() const = 0;
};

}  // namespace ql
