#pragma once

// The claim checks of an OpenID Connect ID Token (OpenID Connect Core 1.0 §3.1.3.7) on a payload
// whose signature VerifyJws has already verified, and the claims QingLong uses from it.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ql/core/status.h"

namespace ql::oidc {

// The longest `sub` accepted, in bytes (OpenID Connect Core §2).
inline constexpr size_t kMaxSubjectBytes = 255;
// A token issued longer ago than this (plus the leeway) is refused even if it has not expired.
inline constexpr int64_t kMaxIdTokenAgeS = 600;

// What the relying party expects of an ID Token.
struct IdTokenExpectations {
  std::string issuer;     // the provider's issuer, compared byte for byte with `iss`
  std::string client_id;  // must be in `aud`, and equal `azp` when that is present
  std::string nonce;      // the nonce sent in the authorization request; must not be empty
  int64_t now_ms = 0;     // the current time (from the caller's Clock)
  int64_t leeway_s = 60;  // allowed clock skew for exp, iat, nbf and auth_time
  // When the request asked for max_age: `auth_time` is then required and must be no older.
  std::optional<int64_t> max_age_s;
};

// The claims QingLong uses; `payload` keeps the rest.
struct IdTokenClaims {
  std::string sub;
  std::optional<std::string> email;
  bool email_verified = false;  // true only for `true` (or the string "true")
  std::optional<std::string> preferred_username;
  std::optional<std::string> name;
  std::vector<std::string> groups;  // from an array of strings, or a single string
  nlohmann::json payload;
};

// Checks `payload` (a verified ID Token's claims) against `expected` and returns its claims.
// Times are NumericDates (seconds, fractions allowed). Returns InvalidArgument with
//   `oidc_expectation_invalid`     expected.nonce, issuer or client_id is empty, or the leeway
//                                  is negative (a caller bug);
//   `oidc_token_issuer_mismatch`   `iss` missing or not exactly expected.issuer;
//   `oidc_token_audience_mismatch` `aud` (a string or an array of strings) lacks client_id;
//   `oidc_token_azp_mismatch`      `azp` present and not client_id, or missing when `aud` has
//                                  several entries;
//   `oidc_token_expired`           `exp` missing, or at or before now - leeway;
//   `oidc_token_iat_invalid`       `iat` missing, after now + leeway, or more than
//                                  kMaxIdTokenAgeS + leeway ago;
//   `oidc_token_not_yet_valid`     `nbf` after now + leeway;
//   `oidc_token_nonce_mismatch`    `nonce` missing or not expected.nonce (compared in constant
//                                  time);
//   `oidc_token_auth_too_old`      max_age_s is set and `auth_time` is missing or too old;
//   `oidc_token_sub_invalid`       `sub` missing, empty, not a string or over kMaxSubjectBytes;
//   `oidc_token_claim_invalid`     a claim used here has the wrong type (the message names it).
Result<IdTokenClaims> ValidateIdToken(const nlohmann::json& payload,
                                      const IdTokenExpectations& expected);

}  // namespace ql::oidc
