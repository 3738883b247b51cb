#pragma once

// JOSE for an OpenID Connect relying party: base64url, public JSON Web Keys (RFC 7517/7518/8037)
// and the verification of compact JWS signatures (RFC 7515) with a fixed list of asymmetric
// algorithms. Pure: no network; the caller fetches the JWKS and hands it in.
//
// Token contents never appear in an error message: only the header's `alg` and `kid`, quoted and
// cut short.

#include <cstddef>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ql/core/status.h"

namespace ql::oidc {

// The largest compact JWS VerifyJws looks at, in bytes.
inline constexpr size_t kMaxJwsBytes = 64 * 1024;
// The most keys ParseJwks accepts in one set.
inline constexpr size_t kMaxJwks = 64;
// RSA moduli outside these bounds (in bits) are refused.
inline constexpr int kMinRsaBits = 2048;
inline constexpr int kMaxRsaBits = 8192;

// The signature algorithms this library verifies. HS* (a shared secret) and `none` have no
// enumerator: they can never be allowed.
enum class JwsAlg { kRs256, kRs384, kRs512, kPs256, kPs384, kEs256, kEs384, kEdDsa };

// Returns the JOSE name of `alg` ("RS256", ..., "EdDSA").
std::string_view JwsAlgName(JwsAlg alg);

// Returns the algorithm named `name` (exact, case-sensitive), or nullopt for any name this library
// does not verify (including "none" and every HS*).
std::optional<JwsAlg> ParseJwsAlg(std::string_view name);

// Returns every algorithm this library verifies, in enumerator order.
std::vector<JwsAlg> SupportedJwsAlgs();

// Returns `bytes` as unpadded base64url (RFC 4648 §5).
std::string Base64UrlEncode(std::string_view bytes);

// Returns the bytes of unpadded base64url `text`. Returns InvalidArgument `oidc_base64_invalid`
// for padding, a character outside the alphabet, a dangling character or non-zero trailing bits.
Result<std::string> Base64UrlDecode(std::string_view text);

enum class JwkType { kRsa, kEc, kOkp };

// The OpenSSL key behind a Jwk; defined in jose.cc so no OpenSSL type leaks into this header.
struct JwkKeyMaterial;

// One public signing key of a JWKS.
struct Jwk {
  JwkType kty = JwkType::kRsa;
  std::string crv;  // "P-256", "P-384" (EC), "Ed25519" (OKP); empty for RSA
  std::string kid;  // empty when the key has none
  std::string alg;  // the key's own `alg`, empty when absent
  int bits = 0;     // modulus size for RSA, field size for EC, 256 for Ed25519
  std::shared_ptr<const JwkKeyMaterial> material;
};

// A provider's signing keys. Immutable once parsed: one set may be shared by several threads
// verifying at once, and replaced as a whole when the JWKS is fetched again.
struct JwkSet {
  std::vector<Jwk> keys;
};

// Parses a JWKS document ({"keys": [...]}) into its public signing keys. Keys with a `use` other
// than "sig", a `key_ops` without "verify", or a kty/crv this library does not verify (oct,
// P-521, X25519, ...) are skipped. A key of a supported kind that is malformed fails the whole
// set, since the provider's keys are then not what they claim to be:
//   InvalidArgument `oidc_jwks_invalid`     the document is not an object with a `keys` array,
//                                            or holds more than kMaxJwks keys;
//   InvalidArgument `oidc_jwk_invalid`      a member is missing, of the wrong type, not
//                                            base64url or of the wrong length (message names
//                                            the key's index or kid and the member);
//   InvalidArgument `oidc_jwk_key_too_small` an RSA modulus below kMinRsaBits (or above
//                                            kMaxRsaBits), or an unusable exponent;
//   InvalidArgument `oidc_jwk_point_invalid` an EC point that is not on the named curve;
//   InvalidArgument `oidc_jwks_no_keys`     no usable signing key is left.
Result<JwkSet> ParseJwks(const nlohmann::json& jwks);

// A JWS whose signature verified.
struct VerifiedJws {
  nlohmann::json header;   // a JSON object
  nlohmann::json payload;  // a JSON object
  JwsAlg alg = JwsAlg::kRs256;
  std::string kid;  // the header's kid, empty when absent
};

// Verifies compact JWS `compact` (header.payload.signature) against `keys` and returns its header
// and payload. The header's alg must be one of `allowed_algs`; the key is the one whose kid
// matches the header's kid, or, when the header has no kid, the only key that fits the alg.
// Returns
//   InvalidArgument `oidc_token_too_large`        more than kMaxJwsBytes;
//   InvalidArgument `oidc_token_malformed`        not three base64url parts, a header or payload
//                                                 that is not a JSON object (duplicate keys
//                                                 included), an alg or kid that is not a string;
//   InvalidArgument `oidc_alg_refused`            alg `none` or any HS* (a public key is never
//                                                 an HMAC secret);
//   InvalidArgument `oidc_alg_unsupported`        any other alg this library does not verify;
//   InvalidArgument `oidc_alg_not_allowed`        a supported alg missing from `allowed_algs`;
//   InvalidArgument `oidc_token_crit_unsupported` a `crit` header (no extension is understood);
//   NotFound        `oidc_key_unknown`            no key with the header's kid, or no key of the
//                                                 alg's type when there is no kid: refetch the
//                                                 JWKS once and retry;
//   InvalidArgument `oidc_key_alg_mismatch`       the kid names a key whose type, curve or own
//                                                 alg does not fit the header's alg;
//   InvalidArgument `oidc_key_ambiguous`          more than one key fits;
//   InvalidArgument `oidc_signature_invalid`      the signature does not verify.
Result<VerifiedJws> VerifyJws(std::string_view compact, const JwkSet& keys,
                              const std::vector<JwsAlg>& allowed_algs);

}  // namespace ql::oidc
