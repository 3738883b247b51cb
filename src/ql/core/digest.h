#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace ql {

// Returns the SHA-256 of `bytes` as 64 lowercase hex digits.
std::string Sha256Hex(std::string_view bytes);

// Computes the SHA-256 of bytes given in pieces (a file read in chunks) without holding them.
class Sha256Hasher {
 public:
  Sha256Hasher();
  ~Sha256Hasher();
  Sha256Hasher(const Sha256Hasher&) = delete;
  Sha256Hasher& operator=(const Sha256Hasher&) = delete;

  // Adds `bytes` to the digested input.
  void Update(std::string_view bytes);
  // Returns the SHA-256 of everything added, as 64 lowercase hex digits, and starts over.
  std::string FinishHex();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Returns the SHA-256, as 64 lowercase hex digits, of `domain`, one 0x00 byte, then `canonical`.
// The domain (for example "qinglong/command@v1") keeps digests of different document kinds apart
// even when their encodings happen to coincide; it must not contain a 0x00 byte.
std::string DomainDigest(std::string_view domain, std::string_view canonical);

// Returns true when `a` and `b` hold the same bytes. For equal lengths the time taken does not
// depend on where they differ (for comparing secrets and token digests); lengths are not secret.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

// Returns true when `value` is exactly 64 lowercase hex digits (the form every digest here has).
bool IsSha256Hex(std::string_view value);

}  // namespace ql
