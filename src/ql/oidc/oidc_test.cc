#include <gtest/gtest.h>
#include <openssl/bio.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "ql/oidc/discovery.h"
#include "ql/oidc/id_token.h"
#include "ql/oidc/jose.h"
#include "ql/oidc/pkce.h"

namespace ql::oidc {
namespace {

using nlohmann::json;

// --- A small JWS signer over real keys generated at test time ---------------------------------

std::string Bn(const EVP_PKEY* pkey, const char* name, int pad = 0) {
  BIGNUM* bn = nullptr;
  EXPECT_EQ(EVP_PKEY_get_bn_param(pkey, name, &bn), 1) << name;
  std::string out(pad > 0 ? pad : BN_num_bytes(bn), '\0');
  if (pad > 0) {
    BN_bn2binpad(bn, reinterpret_cast<unsigned char*>(out.data()), pad);
  } else {
    BN_bn2bin(bn, reinterpret_cast<unsigned char*>(out.data()));
  }
  BN_free(bn);
  return out;
}

json RsaJwk(const EVP_PKEY* pkey, const std::string& kid) {
  return {{"kty", "RSA"},
          {"kid", kid},
          {"use", "sig"},
          {"n", Base64UrlEncode(Bn(pkey, OSSL_PKEY_PARAM_RSA_N))},
          {"e", Base64UrlEncode(Bn(pkey, OSSL_PKEY_PARAM_RSA_E))}};
}

json EcJwk(const EVP_PKEY* pkey, const std::string& crv, const std::string& kid) {
  const int half = crv == "P-256" ? 32 : 48;
  return {{"kty", "EC"},
          {"crv", crv},
          {"kid", kid},
          {"x", Base64UrlEncode(Bn(pkey, OSSL_PKEY_PARAM_EC_PUB_X, half))},
          {"y", Base64UrlEncode(Bn(pkey, OSSL_PKEY_PARAM_EC_PUB_Y, half))}};
}

json EdJwk(const EVP_PKEY* pkey, const std::string& kid) {
  std::string x(32, '\0');
  size_t size = x.size();
  EXPECT_EQ(EVP_PKEY_get_raw_public_key(pkey, reinterpret_cast<unsigned char*>(x.data()), &size),
            1);
  return {{"kty", "OKP"}, {"crv", "Ed25519"}, {"kid", kid}, {"x", Base64UrlEncode(x)}};
}

// Signs `input` with `pkey` the way JWS algorithm `alg` does (ECDSA as raw r || s).
std::string Sign(EVP_PKEY* pkey, const std::string& alg, const std::string& input) {
  const char* md = nullptr;
  if (alg.ends_with("256")) md = "SHA256";
  if (alg.ends_with("384")) md = "SHA384";
  if (alg.ends_with("512")) md = "SHA512";
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_PKEY_CTX* pctx = nullptr;
  EXPECT_EQ(EVP_DigestSignInit_ex(ctx, &pctx, alg == "EdDSA" ? nullptr : md, nullptr, nullptr, pkey,
                                  nullptr),
            1);
  if (alg.starts_with("PS")) {
    EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING);
    EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, RSA_PSS_SALTLEN_DIGEST);
  }
  size_t size = 0;
  const auto* data = reinterpret_cast<const unsigned char*>(input.data());
  EXPECT_EQ(EVP_DigestSign(ctx, nullptr, &size, data, input.size()), 1);
  std::string sig(size, '\0');
  EXPECT_EQ(
      EVP_DigestSign(ctx, reinterpret_cast<unsigned char*>(sig.data()), &size, data, input.size()),
      1);
  sig.resize(size);
  EVP_MD_CTX_free(ctx);
  if (!alg.starts_with("ES")) return sig;
  const int half = alg == "ES256" ? 32 : 48;
  const auto* der = reinterpret_cast<const unsigned char*>(sig.data());
  ECDSA_SIG* ecdsa = d2i_ECDSA_SIG(nullptr, &der, static_cast<long>(sig.size()));
  std::string raw(2 * half, '\0');
  BN_bn2binpad(ECDSA_SIG_get0_r(ecdsa), reinterpret_cast<unsigned char*>(raw.data()), half);
  BN_bn2binpad(ECDSA_SIG_get0_s(ecdsa), reinterpret_cast<unsigned char*>(raw.data()) + half, half);
  ECDSA_SIG_free(ecdsa);
  return raw;
}

std::string Jws(const std::string& header_text, const std::string& payload_text, EVP_PKEY* pkey,
                const std::string& alg) {
  const std::string input = Base64UrlEncode(header_text) + "." + Base64UrlEncode(payload_text);
  return input + "." + Base64UrlEncode(Sign(pkey, alg, input));
}

std::string Jws(const json& header, const json& payload, EVP_PKEY* pkey) {
  return Jws(header.dump(), payload.dump(), pkey, header.at("alg").get<std::string>());
}

class RandomBytes final : public RandomSource {
 public:
  void Fill(std::span<std::uint8_t> out) override {
    for (std::uint8_t& b : out) b = next_++;
  }

 private:
  std::uint8_t next_ = 0;
};

class OidcTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    rsa_ = EVP_PKEY_Q_keygen(nullptr, nullptr, "RSA", size_t{2048});
    p256_ = EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256");
    p384_ = EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-384");
    ed_ = EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519");
    ASSERT_NE(rsa_, nullptr);
    ASSERT_NE(p256_, nullptr);
    ASSERT_NE(p384_, nullptr);
    ASSERT_NE(ed_, nullptr);
  }
  static void TearDownTestSuite() {
    for (EVP_PKEY* key : {rsa_, p256_, p384_, ed_}) EVP_PKEY_free(key);
  }

  static json JwksDocument() {
    return {{"keys",
             {RsaJwk(rsa_, "rsa-1"), EcJwk(p256_, "P-256", "ec-256"),
              EcJwk(p384_, "P-384", "ec-384"), EdJwk(ed_, "ed-1")}}};
  }
  static JwkSet Keys() {
    Result<JwkSet> keys = ParseJwks(JwksDocument());
    EXPECT_TRUE(keys.ok()) << keys.status().ToString();
    return *keys;
  }

  static std::string Reason(const Result<VerifiedJws>& result) { return result.status().reason(); }

  static inline EVP_PKEY* rsa_ = nullptr;
  static inline EVP_PKEY* p256_ = nullptr;
  static inline EVP_PKEY* p384_ = nullptr;
  static inline EVP_PKEY* ed_ = nullptr;
  const std::vector<JwsAlg> all_ = SupportedJwsAlgs();
  const json payload_ = {{"iss", "https://idp.example"}, {"sub", "alice"}};
};

// --- base64url --------------------------------------------------------------------------------

TEST(Base64UrlTest, RoundTripsAndRefusesAnythingButStrictUnpaddedBase64Url) {
  EXPECT_EQ(Base64UrlEncode("hello"), "aGVsbG8");
  EXPECT_EQ(Base64UrlEncode("\xfb\xff"), "-_8");
  EXPECT_EQ(*Base64UrlDecode("aGVsbG8"), "hello");
  EXPECT_EQ(*Base64UrlDecode("-_8"), "\xfb\xff");
  EXPECT_EQ(*Base64UrlDecode(""), "");
  for (const char* bad : {"aGVsbG8=", "+/8", "aGVs bG8", "A", "AB", "aGVsbG8\n", "aGV$"}) {
    const Result<std::string> decoded = Base64UrlDecode(bad);
    ASSERT_FALSE(decoded.ok()) << bad;
    EXPECT_EQ(decoded.status().reason(), "oidc_base64_invalid");
  }
}

// --- JWS --------------------------------------------------------------------------------------

TEST_F(OidcTest, VerifiesEverySupportedAlgorithm) {
  const JwkSet keys = Keys();
  const struct {
    const char* alg;
    const char* kid;
    EVP_PKEY* key;
  } cases[] = {{"RS256", "rsa-1", rsa_},   {"RS384", "rsa-1", rsa_}, {"RS512", "rsa-1", rsa_},
               {"PS256", "rsa-1", rsa_},   {"PS384", "rsa-1", rsa_}, {"ES256", "ec-256", p256_},
               {"ES384", "ec-384", p384_}, {"EdDSA", "ed-1", ed_}};
  for (const auto& c : cases) {
    const std::string token =
        Jws({{"alg", c.alg}, {"kid", c.kid}, {"typ", "JWT"}}, payload_, c.key);
    const Result<VerifiedJws> verified = VerifyJws(token, keys, all_);
    ASSERT_TRUE(verified.ok()) << c.alg << ": " << verified.status().ToString();
    EXPECT_EQ(verified->payload, payload_);
    EXPECT_EQ(JwsAlgName(verified->alg), c.alg);
    EXPECT_EQ(verified->kid, c.kid);
  }
}

TEST_F(OidcTest, EcdsaSignaturesOfEveryShapeConvertToDer) {
  // r and s with the top bit set need a DER sign byte; ones with leading zero bytes are shorter.
  const JwkSet keys = Keys();
  for (int i = 0; i < 64; ++i) {
    json payload = payload_;
    payload["i"] = i;
    EXPECT_TRUE(
        VerifyJws(Jws({{"alg", "ES256"}, {"kid", "ec-256"}}, payload, p256_), keys, all_).ok());
    EXPECT_TRUE(
        VerifyJws(Jws({{"alg", "ES384"}, {"kid", "ec-384"}}, payload, p384_), keys, all_).ok());
  }
  // A DER signature where JOSE wants raw r || s is refused.
  const std::string token = Jws({{"alg", "ES256"}, {"kid", "ec-256"}}, payload_, p256_);
  const std::string input = token.substr(0, token.rfind('.'));
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  ASSERT_EQ(EVP_DigestSignInit_ex(ctx, nullptr, "SHA256", nullptr, nullptr, p256_, nullptr), 1);
  std::string der(128, '\0');
  size_t size = der.size();
  ASSERT_EQ(EVP_DigestSign(ctx, reinterpret_cast<unsigned char*>(der.data()), &size,
                           reinterpret_cast<const unsigned char*>(input.data()), input.size()),
            1);
  EVP_MD_CTX_free(ctx);
  der.resize(size);
  EXPECT_EQ(Reason(VerifyJws(input + "." + Base64UrlEncode(der), keys, all_)),
            "oidc_signature_invalid");
}

TEST_F(OidcTest, WithoutKidUsesTheOnlyKeyThatFitsAndRefusesAChoice) {
  const JwkSet keys = Keys();
  EXPECT_TRUE(VerifyJws(Jws({{"alg", "ES256"}}, payload_, p256_), keys, all_).ok());
  EXPECT_TRUE(VerifyJws(Jws({{"alg", "EdDSA"}}, payload_, ed_), keys, all_).ok());

  EVP_PKEY* other = EVP_PKEY_Q_keygen(nullptr, nullptr, "RSA", size_t{2048});
  json document = JwksDocument();
  document["keys"].push_back(RsaJwk(other, "rsa-2"));
  const Result<JwkSet> two_rsa = ParseJwks(document);
  ASSERT_TRUE(two_rsa.ok());
  EXPECT_EQ(Reason(VerifyJws(Jws({{"alg", "RS256"}}, payload_, rsa_), *two_rsa, all_)),
            "oidc_key_ambiguous");
  EXPECT_TRUE(
      VerifyJws(Jws({{"alg", "RS256"}, {"kid", "rsa-2"}}, payload_, other), *two_rsa, all_).ok());
  EVP_PKEY_free(other);

  const Result<JwkSet> only_ed = ParseJwks({{"keys", {EdJwk(ed_, "ed-1")}}});
  ASSERT_TRUE(only_ed.ok());
  const Result<VerifiedJws> none_fits =
      VerifyJws(Jws({{"alg", "ES256"}}, payload_, p256_), *only_ed, all_);
  EXPECT_EQ(Reason(none_fits), "oidc_key_unknown");
  EXPECT_EQ(none_fits.status().code(), StatusCode::kNotFound);
}

TEST_F(OidcTest, RefusesTamperedHeaderPayloadAndSignature) {
  const JwkSet keys = Keys();
  for (const auto& [alg, kid, key] :
       {std::tuple{"RS256", "rsa-1", rsa_}, std::tuple{"ES256", "ec-256", p256_},
        std::tuple{"EdDSA", "ed-1", ed_}}) {
    const json header = {{"alg", alg}, {"kid", kid}};
    const std::string token = Jws(header, payload_, key);
    const size_t first = token.find('.');
    const size_t second = token.find('.', first + 1);
    json other_payload = payload_;
    other_payload["sub"] = "mallory";
    json other_header = header;
    other_header["typ"] = "JWT";

    const std::string new_payload =
        token.substr(0, first + 1) + Base64UrlEncode(other_payload.dump()) + token.substr(second);
    const std::string new_header = Base64UrlEncode(other_header.dump()) + token.substr(first);
    std::string signature = *Base64UrlDecode(token.substr(second + 1));
    signature[signature.size() / 2] ^= 0x01;
    const std::string new_signature = token.substr(0, second + 1) + Base64UrlEncode(signature);

    EXPECT_EQ(Reason(VerifyJws(new_payload, keys, all_)), "oidc_signature_invalid") << alg;
    EXPECT_EQ(Reason(VerifyJws(new_header, keys, all_)), "oidc_signature_invalid") << alg;
    EXPECT_EQ(Reason(VerifyJws(new_signature, keys, all_)), "oidc_signature_invalid") << alg;
    EXPECT_EQ(Reason(VerifyJws(token.substr(0, second + 1), keys, all_)), "oidc_signature_invalid")
        << alg;
  }
}

TEST_F(OidcTest, RefusesUnsignedTokens) {
  const JwkSet keys = Keys();
  for (const char* alg : {"none", "None", "NONE"}) {
    const std::string token =
        Base64UrlEncode(json{{"alg", alg}}.dump()) + "." + Base64UrlEncode(payload_.dump()) + ".";
    const Result<VerifiedJws> result = VerifyJws(token, keys, all_);
    EXPECT_EQ(Reason(result), "oidc_alg_refused") << alg;
    EXPECT_EQ(result.status().message().find("alice"), std::string::npos);
  }
}

TEST_F(OidcTest, RefusesHmacSignedWithThePublicKeyAsSecret) {
  BIO* bio = BIO_new(BIO_s_mem());
  ASSERT_EQ(PEM_write_bio_PUBKEY(bio, rsa_), 1);
  char* pem_data = nullptr;
  const long pem_size = BIO_get_mem_data(bio, &pem_data);
  const std::string pem(pem_data, pem_size);
  BIO_free(bio);
  const std::string input = Base64UrlEncode(json{{"alg", "HS256"}, {"kid", "rsa-1"}}.dump()) + "." +
                            Base64UrlEncode(payload_.dump());
  unsigned char mac[EVP_MAX_MD_SIZE];
  size_t mac_size = 0;
  ASSERT_NE(EVP_Q_mac(nullptr, "HMAC", nullptr, "SHA256", nullptr, pem.data(), pem.size(),
                      reinterpret_cast<const unsigned char*>(input.data()), input.size(), mac,
                      sizeof mac, &mac_size),
            nullptr);
  const std::string token =
      input + "." + Base64UrlEncode(std::string(reinterpret_cast<char*>(mac), mac_size));
  EXPECT_EQ(Reason(VerifyJws(token, Keys(), all_)), "oidc_alg_refused");
  // Every HS* is refused before any key is looked at.
  for (const char* alg : {"HS384", "HS512", "hs256"}) {
    const std::string other =
        Base64UrlEncode(json{{"alg", alg}}.dump()) + token.substr(token.find('.'));
    EXPECT_EQ(Reason(VerifyJws(other, Keys(), all_)), "oidc_alg_refused") << alg;
  }
}

TEST_F(OidcTest, RefusesAlgorithmsOutsideTheAllowedAndSupportedSets) {
  const JwkSet keys = Keys();
  const std::string rs256 = Jws({{"alg", "RS256"}, {"kid", "rsa-1"}}, payload_, rsa_);
  EXPECT_EQ(Reason(VerifyJws(rs256, keys, {JwsAlg::kEs256})), "oidc_alg_not_allowed");
  EXPECT_EQ(Reason(VerifyJws(rs256, keys, {})), "oidc_alg_not_allowed");
  const std::string es512 =
      Base64UrlEncode(json{{"alg", "ES512"}}.dump()) + rs256.substr(rs256.find('.'));
  EXPECT_EQ(Reason(VerifyJws(es512, keys, all_)), "oidc_alg_unsupported");
  const std::string no_alg =
      Base64UrlEncode(json{{"kid", "rsa-1"}}.dump()) + rs256.substr(rs256.find('.'));
  EXPECT_EQ(Reason(VerifyJws(no_alg, keys, all_)), "oidc_token_malformed");
}

TEST_F(OidcTest, RefusesAKeyThatDoesNotFitTheAlgorithm) {
  const JwkSet keys = Keys();
  // An ES256 header naming the RSA key: the kty does not fit.
  EXPECT_EQ(
      Reason(VerifyJws(Jws({{"alg", "ES256"}, {"kid", "rsa-1"}}, payload_, p256_), keys, all_)),
      "oidc_key_alg_mismatch");
  // ES384 naming the P-256 key: the curve does not fit.
  EXPECT_EQ(
      Reason(VerifyJws(Jws({{"alg", "ES384"}, {"kid", "ec-256"}}, payload_, p384_), keys, all_)),
      "oidc_key_alg_mismatch");
  // The key's own alg says RS256; a PS256 token under it is refused.
  json document = JwksDocument();
  document["keys"][0]["alg"] = "RS256";
  const Result<JwkSet> pinned = ParseJwks(document);
  ASSERT_TRUE(pinned.ok());
  EXPECT_TRUE(
      VerifyJws(Jws({{"alg", "RS256"}, {"kid", "rsa-1"}}, payload_, rsa_), *pinned, all_).ok());
  EXPECT_EQ(
      Reason(VerifyJws(Jws({{"alg", "PS256"}, {"kid", "rsa-1"}}, payload_, rsa_), *pinned, all_)),
      "oidc_key_alg_mismatch");
}

TEST_F(OidcTest, AnUnknownKidIsNotFoundSoTheCallerCanRefetch) {
  const Result<VerifiedJws> result =
      VerifyJws(Jws({{"alg", "RS256"}, {"kid", "rotated"}}, payload_, rsa_), Keys(), all_);
  EXPECT_EQ(Reason(result), "oidc_key_unknown");
  EXPECT_EQ(result.status().code(), StatusCode::kNotFound);
  EXPECT_NE(result.status().message().find("\"rotated\""), std::string::npos);
}

TEST_F(OidcTest, RefusesCritHeaders) {
  const std::string token =
      Jws({{"alg", "RS256"}, {"kid", "rsa-1"}, {"crit", {"exp"}}, {"exp", 1}}, payload_, rsa_);
  EXPECT_EQ(Reason(VerifyJws(token, Keys(), all_)), "oidc_token_crit_unsupported");
}

TEST_F(OidcTest, RefusesMalformedCompactSerialisations) {
  const JwkSet keys = Keys();
  const std::string token = Jws({{"alg", "RS256"}, {"kid", "rsa-1"}}, payload_, rsa_);
  const std::string header = token.substr(0, token.find('.'));
  EXPECT_EQ(Reason(VerifyJws(token + ".AAAA", keys, all_)), "oidc_token_malformed");
  EXPECT_EQ(Reason(VerifyJws(token + ".", keys, all_)), "oidc_token_malformed");
  EXPECT_EQ(Reason(VerifyJws(token + ".a.b", keys, all_)), "oidc_token_malformed");  // JWE
  EXPECT_EQ(Reason(VerifyJws(token.substr(0, token.rfind('.')), keys, all_)),
            "oidc_token_malformed");
  EXPECT_EQ(Reason(VerifyJws("", keys, all_)), "oidc_token_malformed");
  EXPECT_EQ(Reason(VerifyJws(token + " ", keys, all_)), "oidc_token_malformed");
  EXPECT_EQ(Reason(VerifyJws(token + "=", keys, all_)), "oidc_token_malformed");
  EXPECT_EQ(Reason(VerifyJws(header + "=" + token.substr(header.size()), keys, all_)),
            "oidc_token_malformed");
  std::string bad_payload = token;
  bad_payload[header.size() + 3] = '+';
  EXPECT_EQ(Reason(VerifyJws(bad_payload, keys, all_)), "oidc_token_malformed");

  // A header that repeats "alg" is not read at all.
  const std::string twice =
      Jws(R"({"alg":"RS256","kid":"rsa-1","alg":"none"})", payload_.dump(), rsa_, "RS256");
  EXPECT_EQ(Reason(VerifyJws(twice, keys, all_)), "oidc_token_malformed");
  // A signed payload that is not a JSON object, or repeats a claim.
  EXPECT_EQ(
      Reason(VerifyJws(Jws(R"({"alg":"RS256","kid":"rsa-1"})", "[1]", rsa_, "RS256"), keys, all_)),
      "oidc_token_malformed");
  EXPECT_EQ(Reason(VerifyJws(Jws(R"({"alg":"RS256","kid":"rsa-1"})",
                                 R"({"sub":"alice","sub":"bob"})", rsa_, "RS256"),
                             keys, all_)),
            "oidc_token_malformed");
  EXPECT_EQ(Reason(VerifyJws(
                Jws(R"({"alg":"RS256","kid":"rsa-1"})", R"({"sub":"alice"} x)", rsa_, "RS256"),
                keys, all_)),
            "oidc_token_malformed");
}

TEST_F(OidcTest, RefusesDeeplyNestedPayloads) {
  std::string deep = R"({"sub":"alice","x":)" + std::string(40, '[') + std::string(40, ']') + "}";
  EXPECT_EQ(
      Reason(VerifyJws(Jws(R"({"alg":"RS256","kid":"rsa-1"})", deep, rsa_, "RS256"), Keys(), all_)),
      "oidc_token_malformed");
  std::string shallow =
      R"({"sub":"alice","x":)" + std::string(20, '[') + std::string(20, ']') + "}";
  EXPECT_TRUE(
      VerifyJws(Jws(R"({"alg":"RS256","kid":"rsa-1"})", shallow, rsa_, "RS256"), Keys(), all_)
          .ok());
}

TEST_F(OidcTest, RefusesOversizeTokens) {
  json big = payload_;
  big["pad"] = std::string(kMaxJwsBytes, 'x');
  const std::string token = Jws({{"alg", "RS256"}, {"kid", "rsa-1"}}, big, rsa_);
  EXPECT_EQ(Reason(VerifyJws(token, Keys(), all_)), "oidc_token_too_large");
}

// --- JWKS -------------------------------------------------------------------------------------

TEST_F(OidcTest, JwksRefusesSmallRsaModuli) {
  EVP_PKEY* small = EVP_PKEY_Q_keygen(nullptr, nullptr, "RSA", size_t{1024});
  ASSERT_NE(small, nullptr);
  json document = JwksDocument();
  document["keys"].push_back(RsaJwk(small, "weak"));
  EVP_PKEY_free(small);
  const Result<JwkSet> keys = ParseJwks(document);
  ASSERT_FALSE(keys.ok());
  EXPECT_EQ(keys.status().reason(), "oidc_jwk_key_too_small");
  EXPECT_NE(keys.status().message().find("1024"), std::string::npos);
}

TEST_F(OidcTest, JwksRefusesAPointOffTheCurve) {
  json document = JwksDocument();
  std::string y = *Base64UrlDecode(document["keys"][1]["y"].get<std::string>());
  y.back() ^= 0x01;
  document["keys"][1]["y"] = Base64UrlEncode(y);
  const Result<JwkSet> keys = ParseJwks(document);
  ASSERT_FALSE(keys.ok());
  EXPECT_EQ(keys.status().reason(), "oidc_jwk_point_invalid");

  json short_x = JwksDocument();
  short_x["keys"][2]["x"] = Base64UrlEncode(std::string(47, 'x'));
  EXPECT_EQ(ParseJwks(short_x).status().reason(), "oidc_jwk_invalid");
}

TEST_F(OidcTest, JwksSkipsKeysNotForSigningAndRefusesMalformedSets) {
  json document = {{"keys",
                    {{{"kty", "oct"}, {"k", "c2VjcmV0"}, {"kid", "rsa-1"}},
                     {{"kty", "EC"}, {"crv", "P-521"}, {"x", "AA"}, {"y", "AA"}},
                     RsaJwk(rsa_, "enc-key")}}};
  document["keys"][2]["use"] = "enc";
  EXPECT_EQ(ParseJwks(document).status().reason(), "oidc_jwks_no_keys");
  document["keys"].push_back(EdJwk(ed_, "ed-1"));
  const Result<JwkSet> keys = ParseJwks(document);
  ASSERT_TRUE(keys.ok()) << keys.status().ToString();
  ASSERT_EQ(keys->keys.size(), 1u);
  EXPECT_EQ(keys->keys[0].kid, "ed-1");
  // The symmetric key that shares the RSA key's kid is never a candidate.
  EXPECT_EQ(
      Reason(VerifyJws(Jws({{"alg", "RS256"}, {"kid", "rsa-1"}}, payload_, rsa_), *keys, all_)),
      "oidc_key_unknown");

  EXPECT_EQ(ParseJwks(json::array()).status().reason(), "oidc_jwks_invalid");
  EXPECT_EQ(ParseJwks({{"keys", "x"}}).status().reason(), "oidc_jwks_invalid");
  EXPECT_EQ(ParseJwks({{"keys", {{{"kty", "RSA"}, {"n", "AQAB"}}}}}).status().reason(),
            "oidc_jwk_invalid");
  EXPECT_EQ(
      ParseJwks({{"keys", {{{"kty", "RSA"}, {"n", "AQ==B"}, {"e", "AQAB"}}}}}).status().reason(),
      "oidc_jwk_invalid");
}

// --- ID token claims --------------------------------------------------------------------------

constexpr int64_t kNowMs = 1'700'000'000'000;
constexpr int64_t kNowS = kNowMs / 1000;

class IdTokenTest : public ::testing::Test {
 protected:
  json Claims() const {
    return {{"iss", "https://idp.example"},
            {"aud", "ql-client"},
            {"sub", "248289761001"},
            {"exp", kNowS + 300},
            {"iat", kNowS - 5},
            {"nonce", "n-0S6_WzA2Mj"},
            {"email", "alice@example.com"},
            {"email_verified", true},
            {"preferred_username", "alice"},
            {"name", "Alice"},
            {"groups", {"ops", "dev"}}};
  }
  std::string Reason(const json& claims) const {
    return ValidateIdToken(claims, expected_).status().reason();
  }

  IdTokenExpectations expected_{.issuer = "https://idp.example",
                                .client_id = "ql-client",
                                .nonce = "n-0S6_WzA2Mj",
                                .now_ms = kNowMs,
                                .leeway_s = 60,
                                .max_age_s = std::nullopt};
};

TEST_F(IdTokenTest, AcceptsAValidTokenAndReturnsItsClaims) {
  const Result<IdTokenClaims> claims = ValidateIdToken(Claims(), expected_);
  ASSERT_TRUE(claims.ok()) << claims.status().ToString();
  EXPECT_EQ(claims->sub, "248289761001");
  EXPECT_EQ(claims->email, "alice@example.com");
  EXPECT_TRUE(claims->email_verified);
  EXPECT_EQ(claims->preferred_username, "alice");
  EXPECT_EQ(claims->name, "Alice");
  EXPECT_EQ(claims->groups, (std::vector<std::string>{"ops", "dev"}));
  EXPECT_EQ(claims->payload, Claims());

  json single = Claims();
  single["groups"] = "ops";
  single["email_verified"] = "true";
  single["aud"] = {"ql-client"};
  single.erase("name");
  single["exp"] = kNowS + 0.5;  // NumericDates may carry fractions
  const Result<IdTokenClaims> other = ValidateIdToken(single, expected_);
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  EXPECT_EQ(other->groups, std::vector<std::string>{"ops"});
  EXPECT_TRUE(other->email_verified);
  EXPECT_FALSE(other->name.has_value());
}

TEST_F(IdTokenTest, ChecksIssuerAudienceAndAuthorizedParty) {
  json c = Claims();
  c["iss"] = "https://idp.example/";
  EXPECT_EQ(Reason(c), "oidc_token_issuer_mismatch");
  c.erase("iss");
  EXPECT_EQ(Reason(c), "oidc_token_issuer_mismatch");

  c = Claims();
  c["aud"] = "other-client";
  EXPECT_EQ(Reason(c), "oidc_token_audience_mismatch");
  c["aud"] = json::array();
  EXPECT_EQ(Reason(c), "oidc_token_audience_mismatch");
  c.erase("aud");
  EXPECT_EQ(Reason(c), "oidc_token_audience_mismatch");
  c["aud"] = {"ql-client", 5};
  EXPECT_EQ(Reason(c), "oidc_token_claim_invalid");

  c["aud"] = {"ql-client", "other-client"};
  EXPECT_EQ(Reason(c), "oidc_token_azp_mismatch");
  c["azp"] = "other-client";
  EXPECT_EQ(Reason(c), "oidc_token_azp_mismatch");
  c["azp"] = "ql-client";
  EXPECT_TRUE(ValidateIdToken(c, expected_).ok());
  c["aud"] = "ql-client";
  c["azp"] = "other-client";
  EXPECT_EQ(Reason(c), "oidc_token_azp_mismatch");
}

TEST_F(IdTokenTest, ChecksTimesWithLeeway) {
  json c = Claims();
  c["exp"] = kNowS - 61;
  EXPECT_EQ(Reason(c), "oidc_token_expired");
  c["exp"] = kNowS - 59;  // within the leeway
  EXPECT_TRUE(ValidateIdToken(c, expected_).ok());
  c.erase("exp");
  EXPECT_EQ(Reason(c), "oidc_token_expired");
  c["exp"] = "tomorrow";
  EXPECT_EQ(Reason(c), "oidc_token_claim_invalid");

  c = Claims();
  c["iat"] = kNowS + 61;
  EXPECT_EQ(Reason(c), "oidc_token_iat_invalid");
  c["iat"] = kNowS + 59;
  EXPECT_TRUE(ValidateIdToken(c, expected_).ok());
  c["iat"] = kNowS - kMaxIdTokenAgeS - 61;
  EXPECT_EQ(Reason(c), "oidc_token_iat_invalid");
  c.erase("iat");
  EXPECT_EQ(Reason(c), "oidc_token_iat_invalid");

  c = Claims();
  c["nbf"] = kNowS + 120;
  EXPECT_EQ(Reason(c), "oidc_token_not_yet_valid");
  c["nbf"] = kNowS + 30;
  EXPECT_TRUE(ValidateIdToken(c, expected_).ok());

  IdTokenExpectations strict = expected_;
  strict.max_age_s = 300;
  c = Claims();
  EXPECT_EQ(ValidateIdToken(c, strict).status().reason(), "oidc_token_auth_too_old");
  c["auth_time"] = kNowS - 1000;
  EXPECT_EQ(ValidateIdToken(c, strict).status().reason(), "oidc_token_auth_too_old");
  c["auth_time"] = kNowS - 200;
  EXPECT_TRUE(ValidateIdToken(c, strict).ok());
}

TEST_F(IdTokenTest, ChecksNonceAndSubject) {
  json c = Claims();
  c["nonce"] = "n-0S6_WzA2Mk";
  EXPECT_EQ(Reason(c), "oidc_token_nonce_mismatch");
  c["nonce"] = "n-0S6_WzA2M";
  EXPECT_EQ(Reason(c), "oidc_token_nonce_mismatch");
  c.erase("nonce");
  EXPECT_EQ(Reason(c), "oidc_token_nonce_mismatch");

  c = Claims();
  c.erase("sub");
  EXPECT_EQ(Reason(c), "oidc_token_sub_invalid");
  c["sub"] = "";
  EXPECT_EQ(Reason(c), "oidc_token_sub_invalid");
  c["sub"] = 42;
  EXPECT_EQ(Reason(c), "oidc_token_sub_invalid");
  c["sub"] = std::string(kMaxSubjectBytes + 1, 'a');
  EXPECT_EQ(Reason(c), "oidc_token_sub_invalid");
  c["sub"] = std::string(kMaxSubjectBytes, 'a');
  EXPECT_TRUE(ValidateIdToken(c, expected_).ok());

  c = Claims();
  c["groups"] = {"ops", 1};
  EXPECT_EQ(Reason(c), "oidc_token_claim_invalid");

  IdTokenExpectations no_nonce = expected_;
  no_nonce.nonce.clear();
  EXPECT_EQ(ValidateIdToken(Claims(), no_nonce).status().reason(), "oidc_expectation_invalid");
}

// --- PKCE -------------------------------------------------------------------------------------

TEST(PkceTest, MatchesRfc7636AndMakesWellFormedVerifiers) {
  // RFC 7636 Appendix B.
  EXPECT_EQ(*CodeChallengeS256("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM");
  RandomBytes random;
  const std::string verifier = NewCodeVerifier(random);
  EXPECT_EQ(verifier.size(), 43u);
  EXPECT_EQ(verifier.find_first_not_of(
                "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~"),
            std::string::npos);
  EXPECT_EQ(*Base64UrlDecode(verifier), std::string("\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a"
                                                    "\x0b\x0c\x0d\x0e\x0f\x10\x11\x12\x13\x14\x15"
                                                    "\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f",
                                                    32));
  EXPECT_TRUE(CodeChallengeS256(verifier).ok());
  const std::string state = NewState(random);
  const std::string nonce = NewNonce(random);
  EXPECT_EQ(state.size(), 43u);
  EXPECT_NE(state, nonce);
  EXPECT_NE(state, verifier);
  EXPECT_EQ(CodeChallengeS256("short").status().reason(), "oidc_pkce_verifier_invalid");
  EXPECT_EQ(CodeChallengeS256(std::string(43, '+')).status().reason(),
            "oidc_pkce_verifier_invalid");
  EXPECT_EQ(CodeChallengeS256(std::string(129, 'a')).status().reason(),
            "oidc_pkce_verifier_invalid");
  EXPECT_TRUE(CodeChallengeS256(std::string(128, '~')).ok());
}

// --- Discovery --------------------------------------------------------------------------------

json Metadata(const std::string& base = "https://idp.example") {
  return {{"issuer", base},
          {"authorization_endpoint", base + "/authorize"},
          {"token_endpoint", base + "/token"},
          {"jwks_uri", base + "/jwks"},
          {"userinfo_endpoint", base + "/userinfo"},
          {"response_types_supported", {"code", "id_token"}},
          {"code_challenge_methods_supported", {"plain", "S256"}},
          {"id_token_signing_alg_values_supported", {"HS256", "RS256", "ES256", "ES512", "none"}}};
}

std::string MetadataReason(const json& document, const std::string& issuer = "https://idp.example",
                           bool allow_http_loopback = false) {
  return ParseProviderMetadata(document, issuer, allow_http_loopback).status().reason();
}

TEST(DiscoveryTest, AcceptsValidMetadataAndKeepsOnlyVerifiableAlgorithms) {
  const Result<ProviderMetadata> metadata =
      ParseProviderMetadata(Metadata(), "https://idp.example", false);
  ASSERT_TRUE(metadata.ok()) << metadata.status().ToString();
  EXPECT_EQ(metadata->token_endpoint, "https://idp.example/token");
  EXPECT_EQ(metadata->jwks_uri, "https://idp.example/jwks");
  EXPECT_EQ(metadata->userinfo_endpoint, "https://idp.example/userinfo");
  EXPECT_EQ(metadata->allowed_algs, (std::vector<JwsAlg>{JwsAlg::kRs256, JwsAlg::kEs256}));
  EXPECT_EQ(metadata->token_endpoint_auth_methods, std::vector<std::string>{"client_secret_basic"});

  json defaults = Metadata();
  defaults.erase("id_token_signing_alg_values_supported");
  defaults.erase("code_challenge_methods_supported");
  const Result<ProviderMetadata> with_defaults =
      ParseProviderMetadata(defaults, "https://idp.example", false);
  ASSERT_TRUE(with_defaults.ok());
  EXPECT_EQ(with_defaults->allowed_algs, std::vector<JwsAlg>{JwsAlg::kRs256});

  json hmac_only = Metadata();
  hmac_only["id_token_signing_alg_values_supported"] = {"HS256", "none"};
  EXPECT_EQ(MetadataReason(hmac_only), "oidc_provider_no_usable_alg");
}

TEST(DiscoveryTest, RefusesAnIssuerThatIsNotExactlyTheConfiguredOne) {
  EXPECT_EQ(MetadataReason(Metadata(), "https://idp.example/"), "oidc_provider_issuer_mismatch");
  EXPECT_EQ(MetadataReason(Metadata("https://idp.example/"), "https://idp.example"),
            "oidc_provider_issuer_mismatch");
  EXPECT_EQ(MetadataReason(Metadata("https://evil.example"), "https://idp.example"),
            "oidc_provider_issuer_mismatch");
  EXPECT_EQ(MetadataReason(Metadata(), "https://idp.example?x=1"), "oidc_issuer_invalid");
  EXPECT_EQ(MetadataReason(Metadata(), "idp.example"), "oidc_issuer_invalid");
}

TEST(DiscoveryTest, RefusesPlainHttpOffLoopback) {
  json document = Metadata();
  document["token_endpoint"] = "http://idp.example/token";
  EXPECT_EQ(MetadataReason(document), "oidc_provider_url_insecure");
  EXPECT_EQ(MetadataReason(document, "https://idp.example", true), "oidc_provider_url_insecure");
  EXPECT_EQ(MetadataReason(Metadata("http://10.0.0.5:8080"), "http://10.0.0.5:8080", true),
            "oidc_provider_url_insecure");

  for (const std::string base :
       {"http://127.0.0.1:5556/dex", "http://localhost:8080", "http://[::1]:9000/realms/ql"}) {
    EXPECT_EQ(MetadataReason(Metadata(base), base, false), "oidc_provider_url_insecure") << base;
    EXPECT_TRUE(ParseProviderMetadata(Metadata(base), base, true).ok()) << base;
  }
  document = Metadata();
  document["jwks_uri"] = "https://user@idp.example/jwks";
  EXPECT_EQ(MetadataReason(document), "oidc_provider_url_invalid");
  document["jwks_uri"] = "https://idp.example/jwks#x";
  EXPECT_EQ(MetadataReason(document), "oidc_provider_url_invalid");
  document["jwks_uri"] = "/jwks";
  EXPECT_EQ(MetadataReason(document), "oidc_provider_url_invalid");
}

TEST(DiscoveryTest, RefusesProvidersWithoutTheCodeFlowOrS256) {
  json document = Metadata();
  document["code_challenge_methods_supported"] = {"plain"};
  EXPECT_EQ(MetadataReason(document), "oidc_provider_pkce_unsupported");
  document = Metadata();
  document["response_types_supported"] = {"id_token", "token id_token"};
  EXPECT_EQ(MetadataReason(document), "oidc_provider_code_flow_unsupported");
  document.erase("response_types_supported");
  EXPECT_EQ(MetadataReason(document), "oidc_provider_metadata_invalid");
  document = Metadata();
  document.erase("jwks_uri");
  EXPECT_EQ(MetadataReason(document), "oidc_provider_metadata_invalid");
  document = Metadata();
  document["token_endpoint"] = 5;
  EXPECT_EQ(MetadataReason(document), "oidc_provider_metadata_invalid");
  EXPECT_EQ(MetadataReason(json::array()), "oidc_provider_metadata_invalid");
}

TEST(DiscoveryTest, AuthorizationUrlEncodesValuesAndKeepsAnExistingQuery) {
  ProviderMetadata metadata;
  metadata.authorization_endpoint = "https://idp.example/authorize";
  const Result<std::string> url =
      AuthorizationUrl(metadata, "ql client", "https://ql.example/cb?a=1&b=2", {"email", "groups"},
                       "st&ate", "non ce", "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM");
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  EXPECT_EQ(*url,
            "https://idp.example/authorize?response_type=code&client_id=ql%20client"
            "&redirect_uri=https%3A%2F%2Fql.example%2Fcb%3Fa%3D1%26b%3D2"
            "&scope=openid%20email%20groups&state=st%26ate&nonce=non%20ce"
            "&code_challenge=E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
            "&code_challenge_method=S256");

  metadata.authorization_endpoint = "https://idp.example/authorize?tenant=a%20b";
  const Result<std::string> kept = AuthorizationUrl(metadata, "c", "https://ql.example/cb",
                                                    {"profile", "openid"}, "s", "n", "x");
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(*kept,
            "https://idp.example/authorize?tenant=a%20b&response_type=code&client_id=c"
            "&redirect_uri=https%3A%2F%2Fql.example%2Fcb&scope=profile%20openid&state=s&nonce=n"
            "&code_challenge=x&code_challenge_method=S256");

  metadata.authorization_endpoint = "https://idp.example/authorize?";
  EXPECT_TRUE(AuthorizationUrl(metadata, "c", "https://r", {}, "s", "n", "x")
                  ->starts_with("https://idp.example/authorize?response_type=code&"));
  EXPECT_EQ(AuthorizationUrl(metadata, "c", "https://r", {"a b"}, "s", "n", "x").status().reason(),
            "oidc_authorization_request_invalid");
  EXPECT_EQ(AuthorizationUrl(metadata, "c", "https://r", {}, "", "n", "x").status().reason(),
            "oidc_authorization_request_invalid");
}

}  // namespace
}  // namespace ql::oidc
