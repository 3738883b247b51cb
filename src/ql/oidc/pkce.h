#pragma once

// Proof Key for Code Exchange (RFC 7636, S256 only) and the random `state` and `nonce` values of
// an authorization request. Randomness comes from an injected RandomSource.

#include <cstddef>
#include <string>
#include <string_view>

#include "ql/core/clock.h"
#include "ql/core/status.h"

namespace ql::oidc {

// Random bytes behind each verifier, state and nonce: 256 bits, 43 base64url characters.
inline constexpr size_t kRandomValueBytes = 32;

// Returns a new code verifier: kRandomValueBytes from `random` as unpadded base64url (43
// characters of the RFC 7636 unreserved set).
std::string NewCodeVerifier(RandomSource& random);

// Returns BASE64URL(SHA-256(verifier)), the S256 code challenge of `verifier`. Returns
// InvalidArgument `oidc_pkce_verifier_invalid` for a verifier that is not 43 to 128 characters
// of A-Z a-z 0-9 - . _ ~, or Internal `oidc_crypto_failed` when the digest fails.
Result<std::string> CodeChallengeS256(std::string_view verifier);

// Returns a new `state` value (kRandomValueBytes from `random`, unpadded base64url).
std::string NewState(RandomSource& random);

// Returns a new `nonce` value (kRandomValueBytes from `random`, unpadded base64url).
std::string NewNonce(RandomSource& random);

}  // namespace ql::oidc
