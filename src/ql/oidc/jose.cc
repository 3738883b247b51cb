#include "ql/oidc/jose.h"

#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/rsa.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <set>
#include <utility>

#include "ql/core/canonical_json.h"
#include "ql/core/store_commands.h"

namespace ql::oidc {

struct JwkKeyMaterial {
  explicit JwkKeyMaterial(EVP_PKEY* key) : pkey(key) {}
  ~JwkKeyMaterial() { EVP_PKEY_free(pkey); }
  JwkKeyMaterial(const JwkKeyMaterial&) = delete;
  JwkKeyMaterial& operator=(const JwkKeyMaterial&) = delete;

  EVP_PKEY* pkey;
};

namespace {

// Nesting deeper than this in a JOSE header, a JWK or a token payload is refused.
constexpr int kMaxJoseJsonDepth = 32;

struct PkeyCtxFree {
  void operator()(EVP_PKEY_CTX* p) const { EVP_PKEY_CTX_free(p); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
struct MdCtxFree {
  void operator()(EVP_MD_CTX* p) const { EVP_MD_CTX_free(p); }
};
struct ParamBldFree {
  void operator()(OSSL_PARAM_BLD* p) const { OSSL_PARAM_BLD_free(p); }
};
struct ParamFree {
  void operator()(OSSL_PARAM* p) const { OSSL_PARAM_free(p); }
};
struct BnFree {
  void operator()(BIGNUM* p) const { BN_free(p); }
};
using PkeyCtxPtr = std::unique_ptr<EVP_PKEY_CTX, PkeyCtxFree>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;
using MdCtxPtr = std::unique_ptr<EVP_MD_CTX, MdCtxFree>;
using ParamBldPtr = std::unique_ptr<OSSL_PARAM_BLD, ParamBldFree>;
using ParamPtr = std::unique_ptr<OSSL_PARAM, ParamFree>;
using BnPtr = std::unique_ptr<BIGNUM, BnFree>;

// Leaves no OpenSSL error behind for unrelated code to find later.
struct ClearOpensslErrors {
  ~ClearOpensslErrors() { ERR_clear_error(); }
};

const unsigned char* Bytes(std::string_view s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

constexpr std::array<std::pair<JwsAlg, std::string_view>, 8> kAlgNames = {{
    {JwsAlg::kRs256, "RS256"},
    {JwsAlg::kRs384, "RS384"},
    {JwsAlg::kRs512, "RS512"},
    {JwsAlg::kPs256, "PS256"},
    {JwsAlg::kPs384, "PS384"},
    {JwsAlg::kEs256, "ES256"},
    {JwsAlg::kEs384, "ES384"},
    {JwsAlg::kEdDsa, "EdDSA"},
}};

// --- JSON -------------------------------------------------------------------------------------

// Parses `text` as one JSON object with unique keys per object (a repeated "alg" or "aud" must
// not be read one way here and another way elsewhere) and bounded depth. Numbers keep their
// JSON form: NumericDate claims may carry fractions.
std::optional<nlohmann::json> ParseJoseObject(std::string_view text) {
  std::vector<std::set<std::string>> open_objects;
  bool refused = false;
  const nlohmann::json::parser_callback_t check =
      [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
        using Event = nlohmann::json::parse_event_t;
        if (depth > kMaxJoseJsonDepth) refused = true;
        switch (event) {
          case Event::object_start:
            open_objects.emplace_back();
            break;
          case Event::object_end:
            if (!open_objects.empty()) open_objects.pop_back();
            break;
          case Event::key:
            if (open_objects.empty() || !parsed.is_string() ||
                !open_objects.back().insert(parsed.get<std::string>()).second) {
              refused = true;
            }
            break;
          default:
            break;
        }
        return true;
      };
  nlohmann::json value = nlohmann::json::parse(text.begin(), text.end(), check,
                                               /*allow_exceptions=*/false);
  if (refused || value.is_discarded() || !value.is_object()) return std::nullopt;
  return value;
}

// --- Keys -------------------------------------------------------------------------------------

std::string KeyName(size_t index, std::string_view kid) {
  if (kid.empty()) return "key #" + std::to_string(index);
  return "key #" + std::to_string(index) + " (kid " + QuoteForMessage(kid, 40) + ")";
}

Status JwkInvalid(const std::string& key_name, std::string_view what) {
  return InvalidArgument("oidc_jwk_invalid", "JWKS " + key_name + ": " + std::string(what));
}

// Reads the base64url member `name` of `jwk`.
Result<std::string> Member(const nlohmann::json& jwk, const char* name,
                           const std::string& key_name) {
  const auto it = jwk.find(name);
  if (it == jwk.end() || !it->is_string()) {
    return JwkInvalid(key_name, std::string("member \"") + name + "\" is missing or not a string");
  }
  Result<std::string> bytes = Base64UrlDecode(it->get<std::string>());
  if (!bytes.ok()) {
    return JwkInvalid(key_name, std::string("member \"") + name + "\" is not unpadded base64url");
  }
  return bytes;
}

// Builds a public key of OpenSSL type `type` ("RSA", "EC", "ED25519") from `params`, or null.
PkeyPtr FromData(const char* type, OSSL_PARAM* params) {
  PkeyCtxPtr ctx(EVP_PKEY_CTX_new_from_name(nullptr, type, nullptr));
  if (ctx == nullptr || EVP_PKEY_fromdata_init(ctx.get()) != 1) return nullptr;
  EVP_PKEY* pkey = nullptr;
  if (EVP_PKEY_fromdata(ctx.get(), &pkey, EVP_PKEY_PUBLIC_KEY, params) != 1) return nullptr;
  return PkeyPtr(pkey);
}

// Runs OpenSSL's public-key validation: for EC the point is on the curve and of the group's
// order; for RSA the modulus is odd and composite with no small factor and the exponent is odd.
bool PublicKeyValid(EVP_PKEY* pkey) {
  PkeyCtxPtr ctx(EVP_PKEY_CTX_new_from_pkey(nullptr, pkey, nullptr));
  return ctx != nullptr && EVP_PKEY_public_check(ctx.get()) == 1;
}

Result<PkeyPtr> RsaKey(const nlohmann::json& jwk, const std::string& key_name, int* bits) {
  QL_ASSIGN_OR_RETURN(const std::string n, Member(jwk, "n", key_name));
  QL_ASSIGN_OR_RETURN(const std::string e, Member(jwk, "e", key_name));
  if (e.empty() || e.size() > 8) return JwkInvalid(key_name, "exponent \"e\" has a bad length");
  BnPtr bn_n(BN_bin2bn(Bytes(n), static_cast<int>(n.size()), nullptr));
  BnPtr bn_e(BN_bin2bn(Bytes(e), static_cast<int>(e.size()), nullptr));
  if (bn_n == nullptr || bn_e == nullptr) return Internal("oidc_crypto_failed", "BN_bin2bn failed");
  *bits = BN_num_bits(bn_n.get());
  if (*bits < kMinRsaBits || *bits > kMaxRsaBits) {
    return InvalidArgument("oidc_jwk_key_too_small",
                           "JWKS " + key_name + ": RSA modulus of " + std::to_string(*bits) +
                               " bits; between " + std::to_string(kMinRsaBits) + " and " +
                               std::to_string(kMaxRsaBits) + " bits are accepted");
  }
  ParamBldPtr bld(OSSL_PARAM_BLD_new());
  if (bld == nullptr || OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_RSA_N, bn_n.get()) != 1 ||
      OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_RSA_E, bn_e.get()) != 1) {
    return Internal("oidc_crypto_failed", "building RSA key parameters failed");
  }
  ParamPtr params(OSSL_PARAM_BLD_to_param(bld.get()));
  if (params == nullptr)
    return Internal("oidc_crypto_failed", "building RSA key parameters failed");
  PkeyPtr pkey = FromData("RSA", params.get());
  if (pkey == nullptr || !PublicKeyValid(pkey.get())) {
    return InvalidArgument("oidc_jwk_key_too_small",
                           "JWKS " + key_name +
                               ": not a usable RSA public key (the exponent must be odd and above "
                               "65536, the modulus odd and without small factors)");
  }
  return pkey;
}

Result<PkeyPtr> EcKey(const nlohmann::json& jwk, const std::string& key_name, std::string_view crv,
                      int* bits) {
  const size_t field_bytes = crv == "P-256" ? 32 : 48;
  QL_ASSIGN_OR_RETURN(const std::string x, Member(jwk, "x", key_name));
  QL_ASSIGN_OR_RETURN(const std::string y, Member(jwk, "y", key_name));
  if (x.size() != field_bytes || y.size() != field_bytes) {
    return JwkInvalid(key_name, "coordinates \"x\" and \"y\" must be " +
                                    std::to_string(field_bytes) + " bytes each for " +
                                    std::string(crv));
  }
  *bits = static_cast<int>(field_bytes * 8);
  std::string point = "\x04" + x + y;  // SEC 1 uncompressed form
  ParamBldPtr bld(OSSL_PARAM_BLD_new());
  const char* group = crv == "P-256" ? "prime256v1" : "secp384r1";
  if (bld == nullptr ||
      OSSL_PARAM_BLD_push_utf8_string(bld.get(), OSSL_PKEY_PARAM_GROUP_NAME, group, 0) != 1 ||
      OSSL_PARAM_BLD_push_octet_string(bld.get(), OSSL_PKEY_PARAM_PUB_KEY, point.data(),
                                       point.size()) != 1) {
    return Internal("oidc_crypto_failed", "building EC key parameters failed");
  }
  ParamPtr params(OSSL_PARAM_BLD_to_param(bld.get()));
  if (params == nullptr) return Internal("oidc_crypto_failed", "building EC key parameters failed");
  // OpenSSL refuses an off-curve point while importing it; the explicit check also covers the
  // point at infinity and the subgroup order.
  PkeyPtr pkey = FromData("EC", params.get());
  if (pkey == nullptr || !PublicKeyValid(pkey.get())) {
    return InvalidArgument(
        "oidc_jwk_point_invalid",
        "JWKS " + key_name + ": the point (x, y) is not on curve " + std::string(crv));
  }
  return pkey;
}

Result<PkeyPtr> Ed25519Key(const nlohmann::json& jwk, const std::string& key_name, int* bits) {
  QL_ASSIGN_OR_RETURN(const std::string x, Member(jwk, "x", key_name));
  if (x.size() != 32) return JwkInvalid(key_name, "member \"x\" must be 32 bytes for Ed25519");
  *bits = 256;
  ParamBldPtr bld(OSSL_PARAM_BLD_new());
  if (bld == nullptr || OSSL_PARAM_BLD_push_octet_string(bld.get(), OSSL_PKEY_PARAM_PUB_KEY,
                                                         x.data(), x.size()) != 1) {
    return Internal("oidc_crypto_failed", "building Ed25519 key parameters failed");
  }
  ParamPtr params(OSSL_PARAM_BLD_to_param(bld.get()));
  if (params == nullptr) {
    return Internal("oidc_crypto_failed", "building Ed25519 key parameters failed");
  }
  PkeyPtr pkey = FromData("ED25519", params.get());
  if (pkey == nullptr || !PublicKeyValid(pkey.get())) {
    return JwkInvalid(key_name, "not a usable Ed25519 public key");
  }
  return pkey;
}

// Returns false when `jwk` is not meant for verifying signatures.
bool ForSignatures(const nlohmann::json& jwk) {
  const auto use = jwk.find("use");
  if (use != jwk.end() && !(use->is_string() && use->get<std::string>() == "sig")) return false;
  const auto ops = jwk.find("key_ops");
  if (ops != jwk.end()) {
    if (!ops->is_array()) return false;
    return std::find(ops->begin(), ops->end(), nlohmann::json("verify")) != ops->end();
  }
  return true;
}

// Parses the JWK at `index`; nullopt when it is of a kind this library skips.
Result<std::optional<Jwk>> ParseJwk(const nlohmann::json& jwk, size_t index) {
  if (!jwk.is_object()) return JwkInvalid(KeyName(index, ""), "not a JSON object");
  if (!ForSignatures(jwk)) return std::optional<Jwk>();
  Jwk key;
  const auto kid = jwk.find("kid");
  if (kid != jwk.end()) {
    if (!kid->is_string()) return JwkInvalid(KeyName(index, ""), "member \"kid\" is not a string");
    key.kid = kid->get<std::string>();
  }
  const std::string key_name = KeyName(index, key.kid);
  const auto alg = jwk.find("alg");
  if (alg != jwk.end()) {
    if (!alg->is_string()) return JwkInvalid(key_name, "member \"alg\" is not a string");
    key.alg = alg->get<std::string>();
  }
  const auto kty = jwk.find("kty");
  if (kty == jwk.end() || !kty->is_string()) {
    return JwkInvalid(key_name, "member \"kty\" is missing or not a string");
  }
  const std::string type = kty->get<std::string>();
  std::string crv;
  if (type == "EC" || type == "OKP") {
    const auto it = jwk.find("crv");
    if (it == jwk.end() || !it->is_string()) {
      return JwkInvalid(key_name, "member \"crv\" is missing or not a string");
    }
    crv = it->get<std::string>();
  }
  Result<PkeyPtr> pkey = PkeyPtr();
  if (type == "RSA") {
    key.kty = JwkType::kRsa;
    pkey = RsaKey(jwk, key_name, &key.bits);
  } else if (type == "EC" && (crv == "P-256" || crv == "P-384")) {
    key.kty = JwkType::kEc;
    pkey = EcKey(jwk, key_name, crv, &key.bits);
  } else if (type == "OKP" && crv == "Ed25519") {
    key.kty = JwkType::kOkp;
    pkey = Ed25519Key(jwk, key_name, &key.bits);
  } else {
    return std::optional<Jwk>();  // oct, P-521, X25519, ...: never used to verify here
  }
  if (!pkey.ok()) return pkey.status();
  key.crv = crv;
  key.material = std::make_shared<const JwkKeyMaterial>(pkey->release());
  return std::optional<Jwk>(std::move(key));
}

// --- Verification -----------------------------------------------------------------------------

bool KeyFits(const Jwk& key, JwsAlg alg) {
  if (!key.alg.empty() && key.alg != JwsAlgName(alg)) return false;
  switch (alg) {
    case JwsAlg::kRs256:
    case JwsAlg::kRs384:
    case JwsAlg::kRs512:
    case JwsAlg::kPs256:
    case JwsAlg::kPs384:
      return key.kty == JwkType::kRsa;
    case JwsAlg::kEs256:
      return key.kty == JwkType::kEc && key.crv == "P-256";
    case JwsAlg::kEs384:
      return key.kty == JwkType::kEc && key.crv == "P-384";
    case JwsAlg::kEdDsa:
      return key.kty == JwkType::kOkp && key.crv == "Ed25519";
  }
  return false;
}

const char* DigestName(JwsAlg alg) {
  switch (alg) {
    case JwsAlg::kRs256:
    case JwsAlg::kPs256:
    case JwsAlg::kEs256:
      return "SHA256";
    case JwsAlg::kRs384:
    case JwsAlg::kPs384:
    case JwsAlg::kEs384:
      return "SHA384";
    case JwsAlg::kRs512:
      return "SHA512";
    case JwsAlg::kEdDsa:
      return nullptr;  // Ed25519 hashes internally
  }
  return nullptr;
}

// Returns the DER INTEGER holding unsigned big-endian `magnitude`.
std::string DerInteger(std::string_view magnitude) {
  while (magnitude.size() > 1 && magnitude.front() == '\0') magnitude.remove_prefix(1);
  std::string content(magnitude);
  if (content.empty() || (static_cast<unsigned char>(content.front()) & 0x80) != 0) {
    content.insert(content.begin(), '\0');
  }
  return std::string("\x02", 1) + static_cast<char>(content.size()) + content;
}

// Converts a JOSE ECDSA signature (r || s, each `half` bytes) to the DER ECDSA-Sig-Value that
// EVP verifies; nullopt when the length is wrong. With P-384 the whole value stays under 128
// bytes, so every length fits the short form.
std::optional<std::string> EcdsaRawToDer(std::string_view raw, size_t half) {
  if (raw.size() != 2 * half) return std::nullopt;
  const std::string body = DerInteger(raw.substr(0, half)) + DerInteger(raw.substr(half));
  return std::string("\x30", 1) + static_cast<char>(body.size()) + body;
}

bool SignatureVerifies(const Jwk& key, JwsAlg alg, std::string_view signing_input,
                       std::string_view signature) {
  const ClearOpensslErrors clear_errors;
  std::string der;
  if (alg == JwsAlg::kEs256 || alg == JwsAlg::kEs384) {
    std::optional<std::string> converted =
        EcdsaRawToDer(signature, alg == JwsAlg::kEs256 ? 32 : 48);
    if (!converted.has_value()) return false;
    der = std::move(*converted);
    signature = der;
  }
  MdCtxPtr md_ctx(EVP_MD_CTX_new());
  if (md_ctx == nullptr) return false;
  EVP_PKEY_CTX* pkey_ctx = nullptr;  // owned by md_ctx
  const char* digest = DigestName(alg);
  if (EVP_DigestVerifyInit_ex(md_ctx.get(), &pkey_ctx, digest, nullptr, nullptr, key.material->pkey,
                              nullptr) != 1) {
    return false;
  }
  if (key.kty == JwkType::kRsa) {
    const bool pss = alg == JwsAlg::kPs256 || alg == JwsAlg::kPs384;
    if (EVP_PKEY_CTX_set_rsa_padding(pkey_ctx, pss ? RSA_PKCS1_PSS_PADDING : RSA_PKCS1_PADDING) !=
        1) {
      return false;
    }
    // RFC 7518 §3.5: MGF1 with the same hash, and a salt as long as the hash.
    if (pss && (EVP_PKEY_CTX_set_rsa_mgf1_md_name(pkey_ctx, digest, nullptr) != 1 ||
                EVP_PKEY_CTX_set_rsa_pss_saltlen(pkey_ctx, RSA_PSS_SALTLEN_DIGEST) != 1)) {
      return false;
    }
  }
  return EVP_DigestVerify(md_ctx.get(), Bytes(signature), signature.size(), Bytes(signing_input),
                          signing_input.size()) == 1;
}

Status Malformed(std::string_view what) {
  return InvalidArgument("oidc_token_malformed", "the token " + std::string(what));
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Checks the header's alg against what may be verified and returns it.
Result<JwsAlg> CheckAlg(const nlohmann::json& header, const std::vector<JwsAlg>& allowed_algs) {
  const auto it = header.find("alg");
  if (it == header.end() || !it->is_string()) {
    return Malformed("header has no \"alg\" string");
  }
  const std::string name = it->get<std::string>();
  const std::string lower = Lower(name);
  if (lower == "none") {
    return InvalidArgument("oidc_alg_refused",
                           "the token is unsigned (alg \"none\"); only signed tokens are accepted");
  }
  if (lower.rfind("hs", 0) == 0) {
    return InvalidArgument("oidc_alg_refused",
                           "the token's alg " + QuoteForMessage(name, 20) +
                               " is an HMAC; a provider's public key is never used as a secret");
  }
  const std::optional<JwsAlg> alg = ParseJwsAlg(name);
  if (!alg.has_value()) {
    return InvalidArgument("oidc_alg_unsupported",
                           "the token's alg " + QuoteForMessage(name, 20) + " is not supported");
  }
  if (std::find(allowed_algs.begin(), allowed_algs.end(), *alg) == allowed_algs.end()) {
    return InvalidArgument("oidc_alg_not_allowed", "the token's alg " + std::string(name) +
                                                       " is not among the provider's allowed "
                                                       "signing algorithms");
  }
  return *alg;
}

Result<const Jwk*> SelectKey(const JwkSet& keys, JwsAlg alg, const std::string* kid) {
  const std::string alg_name(JwsAlgName(alg));
  std::vector<const Jwk*> fitting;
  if (kid != nullptr) {
    bool named = false;
    for (const Jwk& key : keys.keys) {
      if (key.kid != *kid) continue;
      named = true;
      if (KeyFits(key, alg)) fitting.push_back(&key);
    }
    const std::string quoted = QuoteForMessage(*kid, 40);
    if (!named) return NotFound("oidc_key_unknown", "no key in the JWKS has kid " + quoted);
    if (fitting.empty()) {
      return InvalidArgument("oidc_key_alg_mismatch",
                             "the key with kid " + quoted + " does not fit alg " + alg_name);
    }
    if (fitting.size() > 1) {
      return InvalidArgument("oidc_key_ambiguous",
                             "several keys with kid " + quoted + " fit alg " + alg_name);
    }
    return fitting.front();
  }
  for (const Jwk& key : keys.keys) {
    if (KeyFits(key, alg)) fitting.push_back(&key);
  }
  if (fitting.empty()) {
    return NotFound("oidc_key_unknown",
                    "the token has no kid and no key in the JWKS fits alg " + alg_name);
  }
  if (fitting.size() > 1) {
    return InvalidArgument("oidc_key_ambiguous", "the token has no kid and " +
                                                     std::to_string(fitting.size()) +
                                                     " keys in the JWKS fit alg " + alg_name);
  }
  return fitting.front();
}

}  // namespace

std::string_view JwsAlgName(JwsAlg alg) {
  for (const auto& [value, name] : kAlgNames) {
    if (value == alg) return name;
  }
  return "";
}

std::optional<JwsAlg> ParseJwsAlg(std::string_view name) {
  for (const auto& [value, known] : kAlgNames) {
    if (known == name) return value;
  }
  return std::nullopt;
}

std::vector<JwsAlg> SupportedJwsAlgs() {
  std::vector<JwsAlg> algs;
  for (const auto& entry : kAlgNames) algs.push_back(entry.first);
  return algs;
}

std::string Base64UrlEncode(std::string_view bytes) { return ::ql::Base64UrlEncode(bytes); }

Result<std::string> Base64UrlDecode(std::string_view text) {
  std::optional<std::string> bytes = ::ql::Base64UrlDecode(text);
  if (!bytes.has_value()) {
    return InvalidArgument("oidc_base64_invalid",
                           "not unpadded base64url (RFC 4648 §5): a character outside A-Z a-z "
                           "0-9 - _, padding, or a dangling final character");
  }
  return std::move(*bytes);
}

Result<JwkSet> ParseJwks(const nlohmann::json& jwks) {
  const auto invalid = [](const std::string& why) {
    return InvalidArgument("oidc_jwks_invalid", "the JWKS " + why);
  };
  if (!jwks.is_object()) return invalid("is not a JSON object");
  const auto list = jwks.find("keys");
  if (list == jwks.end() || !list->is_array()) return invalid("has no \"keys\" array");
  if (list->size() > kMaxJwks) {
    return invalid("holds " + std::to_string(list->size()) + " keys; at most " +
                   std::to_string(kMaxJwks) + " are accepted");
  }
  const ClearOpensslErrors clear_errors;
  JwkSet set;
  for (size_t i = 0; i < list->size(); ++i) {
    QL_ASSIGN_OR_RETURN(std::optional<Jwk> key, ParseJwk((*list)[i], i));
    if (key.has_value()) set.keys.push_back(std::move(*key));
  }
  if (set.keys.empty()) {
    return InvalidArgument("oidc_jwks_no_keys",
                           "the JWKS holds no RSA, P-256, P-384 or Ed25519 signing key");
  }
  return set;
}

Result<VerifiedJws> VerifyJws(std::string_view compact, const JwkSet& keys,
                              const std::vector<JwsAlg>& allowed_algs) {
  if (compact.size() > kMaxJwsBytes) {
    return InvalidArgument("oidc_token_too_large",
                           "the token is " + std::to_string(compact.size()) + " bytes; at most " +
                               std::to_string(kMaxJwsBytes) + " are accepted");
  }
  const size_t first = compact.find('.');
  const size_t second = first == std::string_view::npos ? first : compact.find('.', first + 1);
  if (second == std::string_view::npos || compact.find('.', second + 1) != std::string_view::npos) {
    const size_t parts = std::count(compact.begin(), compact.end(), '.') + 1;
    return Malformed("has " + std::to_string(parts) +
                     " dot-separated parts; a compact JWS has exactly 3");
  }
  const Result<std::string> header_bytes = Base64UrlDecode(compact.substr(0, first));
  if (!header_bytes.ok()) return Malformed("header is not unpadded base64url");
  std::optional<nlohmann::json> header = ParseJoseObject(*header_bytes);
  if (!header.has_value()) {
    return Malformed("header is not a JSON object (with unique keys)");
  }
  QL_ASSIGN_OR_RETURN(const JwsAlg alg, CheckAlg(*header, allowed_algs));
  if (header->contains("crit")) {
    return InvalidArgument("oidc_token_crit_unsupported",
                           "the token's header has \"crit\"; no JWS extension is supported");
  }
  VerifiedJws verified;
  verified.alg = alg;
  const auto kid = header->find("kid");
  if (kid != header->end()) {
    if (!kid->is_string()) return Malformed("header's \"kid\" is not a string");
    verified.kid = kid->get<std::string>();
  }
  const Result<std::string> payload_bytes =
      Base64UrlDecode(compact.substr(first + 1, second - first - 1));
  if (!payload_bytes.ok()) return Malformed("payload is not unpadded base64url");
  const Result<std::string> signature = Base64UrlDecode(compact.substr(second + 1));
  if (!signature.ok()) return Malformed("signature is not unpadded base64url");

  QL_ASSIGN_OR_RETURN(const Jwk* key,
                      SelectKey(keys, alg, kid != header->end() ? &verified.kid : nullptr));
  if (!SignatureVerifies(*key, alg, compact.substr(0, second), *signature)) {
    return InvalidArgument("oidc_signature_invalid",
                           "the token's " + std::string(JwsAlgName(alg)) +
                               " signature does not verify with the key " +
                               (key->kid.empty() ? std::string("without kid")
                                                 : "with kid " + QuoteForMessage(key->kid, 40)));
  }
  std::optional<nlohmann::json> payload = ParseJoseObject(*payload_bytes);
  if (!payload.has_value()) return Malformed("payload is not a JSON object (with unique keys)");
  verified.header = std::move(*header);
  verified.payload = std::move(*payload);
  return verified;
}

}  // namespace ql::oidc
