#pragma once

// Time-based one-time passwords (RFC 6238 over RFC 4226 HOTP): HMAC-SHA1, 30-second steps,
// 6 digits — what every authenticator app speaks — and the base32 secrets and otpauth:// URIs
// they are enrolled with.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ql {

inline constexpr int64_t kTotpStepMs = 30'000;

// The 6-digit code of `secret` (raw bytes) for the 30-second step holding `unix_ms`.
std::string TotpCode(std::string_view secret, int64_t unix_ms);

// Returns the step (unix_ms / 30 s) `code` is valid for within one step either side of
// `unix_ms`, or -1 when it matches none (or is not 6 digits). Comparisons take the same time
// whatever the code.
int64_t TotpMatch(std::string_view secret, std::string_view code, int64_t unix_ms);

// RFC 4648 base32 without padding (the form authenticator apps take), and back (case and
// spaces ignored); Decode returns false for any other character.
std::string Base32Encode(std::string_view bytes);
bool Base32Decode(std::string_view text, std::string* bytes);

// otpauth://totp/ISSUER:ACCOUNT?secret=...&issuer=ISSUER&algorithm=SHA1&digits=6&period=30
std::string TotpUri(std::string_view issuer, std::string_view account, std::string_view secret);

}  // namespace ql
