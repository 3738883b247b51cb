#include "ql/secrets/envelope.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "ql/core/store_commands.h"
#include "ql/secrets/file_key_provider.h"

namespace ql::secrets {
namespace {

using ::testing::HasSubstr;

constexpr char kProject[] = "0190a5b2-7c3e-7a1b-8c4d-5e6f708192a5";
constexpr char kOtherProject[] = "0190a5b2-7c3e-7a1b-8c4d-5e6f708192a6";
constexpr char kValue[] = "sk_live_RECOGNISABLE_4242";

SecretRef Version(std::string name, int64_t version, std::string project = kProject) {
  return SecretRef{std::move(project), std::move(name), version};
}

std::unique_ptr<FileKeyProvider> NewProvider() {
  return std::move(FileKeyProvider::FromKey(SecretBytes::Random(32))).value();
}

// A provider that unwraps every data key to the same wrong key, as a misbehaving KMS would.
class WrongKeyProvider final : public KeyProvider {
 public:
  explicit WrongKeyProvider(KeyProvider& real) : real_(real) {}
  const std::string& key_id() const override { return real_.key_id(); }
  Result<WrappedKey> Wrap(const SecretBytes& data_key) override { return real_.Wrap(data_key); }
  Result<SecretBytes> Unwrap(const WrappedKey&) override { return SecretBytes::Random(32); }

 private:
  KeyProvider& real_;
};

class EnvelopeTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(InitializeSecrets().ok()); }

  SealedSecret Seal(const SecretRef& version, std::string_view value = kValue) {
    Result<SealedSecret> sealed = SealSecret(*provider_, version, value);
    EXPECT_TRUE(sealed.ok()) << sealed.status().ToString();
    return sealed.ok() ? *sealed : SealedSecret{};
  }

  std::unique_ptr<FileKeyProvider> provider_ = NewProvider();
};

TEST_F(EnvelopeTest, SealsAndUnsealsAVersion) {
  SealedSecret sealed = Seal(Version("API_KEY", 3));
  EXPECT_EQ(sealed.key.key_id, provider_->key_id());
  EXPECT_EQ(sealed.value.ciphertext.find(kValue), std::string::npos);
  Result<SecretBytes> value = UnsealSecret(*provider_, Version("API_KEY", 3), sealed);
  ASSERT_TRUE(value.ok()) << value.status().ToString();
  EXPECT_EQ(value->view(), kValue);
}

TEST_F(EnvelopeTest, EveryVersionHasItsOwnDataKey) {
  SealedSecret a = Seal(Version("API_KEY", 1));
  SealedSecret b = Seal(Version("API_KEY", 1));
  EXPECT_NE(a.value.ciphertext, b.value.ciphertext);
  Result<SecretBytes> key_a = provider_->Unwrap(a.key);
  Result<SecretBytes> key_b = provider_->Unwrap(b.key);
  ASSERT_TRUE(key_a.ok() && key_b.ok());
  EXPECT_EQ(key_a->size(), kDataKeyBytes);
  EXPECT_FALSE(*key_a == *key_b);
}

TEST_F(EnvelopeTest, BindsProjectNameAndVersion) {
  EXPECT_EQ(*SecretAssociatedData(Version("API_KEY", 3)),
            "qinglong/secret-value@v1\n{\"name\":\"API_KEY\",\"projectId\":\"" +
                std::string(kProject) + "\",\"version\":3}");
  SealedSecret sealed = Seal(Version("API_KEY", 3));
  for (const SecretRef& other : {Version("API_KEY", 2), Version("API_KEY", 4),
                                 Version("API_KEY2", 3), Version("API_KEY", 3, kOtherProject)}) {
    Status s = UnsealSecret(*provider_, other, sealed).status();
    EXPECT_EQ(s.code(), StatusCode::kCorrupt) << other.name << " " << *other.version;
    EXPECT_EQ(s.reason(), "secret_corrupt");
  }
}

TEST_F(EnvelopeTest, TamperingIsCorruptNeverGarbage) {
  const SecretRef version = Version("API_KEY", 1);
  SealedSecret sealed = Seal(version);
  auto reason_after = [&](auto tamper) {
    SealedSecret copy = sealed;
    tamper(copy);
    Result<SecretBytes> value = UnsealSecret(*provider_, version, copy);
    return value.status().reason();
  };
  for (size_t i = 0; i < sealed.value.ciphertext.size(); ++i) {
    EXPECT_EQ(reason_after([i](SealedSecret& s) { s.value.ciphertext[i] ^= 1; }), "secret_corrupt")
        << i;
  }
  EXPECT_EQ(reason_after([](SealedSecret& s) { s.value.nonce[0] ^= 1; }), "secret_corrupt");
  for (size_t i = 0; i < sealed.key.ciphertext.size(); ++i) {
    EXPECT_EQ(reason_after([i](SealedSecret& s) { s.key.ciphertext[i] ^= 1; }), "secret_corrupt")
        << i;
  }
  // A wrapped key of another version opens its own data key, which does not open this value.
  SealedSecret other = Seal(version);
  EXPECT_EQ(reason_after([&](SealedSecret& s) { s.key = other.key; }), "secret_corrupt");
}

TEST_F(EnvelopeTest, WrongKeyIsCorruptOrUnknownNeverGarbage) {
  const SecretRef version = Version("API_KEY", 1);
  SealedSecret sealed = Seal(version);
  WrongKeyProvider wrong(*provider_);
  Status s = UnsealSecret(wrong, version, sealed).status();
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_EQ(s.reason(), "secret_corrupt");
  // Another key file: the key id tells it apart before any decryption is tried.
  std::unique_ptr<FileKeyProvider> other = NewProvider();
  s = UnsealSecret(*other, version, sealed).status();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.reason(), "secret_key_unknown");
  EXPECT_THAT(s.message(), HasSubstr(provider_->key_id()));
  EXPECT_THAT(s.message(), HasSubstr(other->key_id()));
}

TEST_F(EnvelopeTest, RefusesBadInput) {
  EXPECT_EQ(SealSecret(*provider_, Version("API_KEY", 1), "").status().reason(),
            "secret_value_empty");
  EXPECT_EQ(
      SealSecret(*provider_, Version("API_KEY", 1), std::string(kMaxSecretValueBytes + 1, 'x'))
          .status()
          .reason(),
      "secret_value_too_large");
  EXPECT_TRUE(
      SealSecret(*provider_, Version("API_KEY", 1), std::string(kMaxSecretValueBytes, 'x')).ok());
  SecretRef current{kProject, "API_KEY", std::nullopt};
  EXPECT_EQ(SealSecret(*provider_, current, kValue).status().reason(), "secret_version_required");
  EXPECT_EQ(SealSecret(*provider_, Version("9bad", 1), kValue).status().reason(),
            "secret_name_invalid");
  EXPECT_EQ(SealSecret(*provider_, Version("A", 0), kValue).status().reason(),
            "secret_ref_version_invalid");
  EXPECT_EQ(SealSecret(*provider_, Version("A", 1, "nope"), kValue).status().reason(),
            "secret_ref_project_invalid");
  SealedSecret sealed = Seal(Version("API_KEY", 1));
  EXPECT_EQ(UnsealSecret(*provider_, current, sealed).status().reason(), "secret_version_required");
}

TEST_F(EnvelopeTest, RecordRoundTripsAsOneText) {
  SealedSecret sealed = Seal(Version("API_KEY", 1));
  const std::string text = EncodeSealedSecret(sealed);
  EXPECT_TRUE(text.starts_with("qlseal:v1:"));
  EXPECT_EQ(text.find(kValue), std::string::npos);
  for (char c : text) EXPECT_TRUE(c > 0x20 && c < 0x7f) << static_cast<int>(c);
  Result<SealedSecret> decoded = DecodeSealedSecret(text);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(*decoded, sealed);
  EXPECT_EQ(UnsealSecret(*provider_, Version("API_KEY", 1), *decoded)->view(), kValue);
}

TEST_F(EnvelopeTest, MalformedRecordsAreCorrupt) {
  const std::string text = EncodeSealedSecret(Seal(Version("API_KEY", 1)));
  const std::string body = text.substr(kSealedSecretPrefix.size());
  const std::string key_id = Base64UrlEncode(provider_->key_id());
  const std::string wrapped = Base64UrlEncode(std::string(72, 'w'));
  const std::string nonce = Base64UrlEncode(std::string(kAeadNonceBytes, 'n'));
  const std::string ct = Base64UrlEncode(std::string(kAeadTagBytes, 'c'));
  ASSERT_TRUE(DecodeSealedSecret("qlseal:v1:" + key_id + ":" + wrapped + ":" + nonce + ":" + ct)
                  .ok());  // the smallest well-formed record: an empty value's tag
  for (const std::string& bad : std::initializer_list<std::string>{
           "", "qlseal:v2:" + body, "QLSEAL:v1:" + body, body, text + ":", text + ":AAAA",
           "qlseal:v1:" + key_id + ":" + wrapped + ":" + nonce,
           text + "=",                                        // padding
           "qlseal:v1::" + wrapped + ":" + nonce + ":" + ct,  // empty key id
           "qlseal:v1:" + Base64UrlEncode("a b") + ":" + wrapped + ":" + nonce + ":" + ct,
           "qlseal:v1:" + key_id + "::" + nonce + ":" + ct,  // empty wrapped key
           "qlseal:v1:" + key_id + ":" + Base64UrlEncode(std::string(2049, 'w')) + ":" + nonce +
               ":" + ct,
           "qlseal:v1:" + key_id + ":" + wrapped + ":" + Base64UrlEncode("short") + ":" + ct,
           "qlseal:v1:" + key_id + ":" + wrapped + ":" + nonce + ":" +
               Base64UrlEncode(std::string(kAeadTagBytes - 1, 'c')),
           "qlseal:v1:" + key_id + ":" + wrapped + ":" + nonce + ":" + ct + "!"}) {
    Result<SealedSecret> decoded = DecodeSealedSecret(bad);
    EXPECT_EQ(decoded.status().code(), StatusCode::kCorrupt) << bad;
    EXPECT_EQ(decoded.status().reason(), "secret_corrupt") << bad;
  }
}

TEST_F(EnvelopeTest, RotationRewrapsDataKeysWithoutTouchingCiphertext) {
  const SecretRef version = Version("API_KEY", 1);
  SealedSecret sealed = Seal(version);
  std::unique_ptr<FileKeyProvider> next = NewProvider();
  Result<WrappedKey> rewrapped = RewrapDataKey(*provider_, *next, sealed.key);
  ASSERT_TRUE(rewrapped.ok()) << rewrapped.status().ToString();
  EXPECT_EQ(rewrapped->key_id, next->key_id());
  EXPECT_NE(rewrapped->ciphertext, sealed.key.ciphertext);

  SealedSecret rotated{*rewrapped, sealed.value};
  EXPECT_EQ(UnsealSecret(*next, version, rotated)->view(), kValue);
  EXPECT_EQ(UnsealSecret(*provider_, version, rotated).status().reason(), "secret_key_unknown");
  // Running the rotation again leaves the already rotated key as it is.
  Result<WrappedKey> again = RewrapDataKey(*provider_, *next, *rewrapped);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *rewrapped);
  // A damaged wrapped key is reported, not rewrapped into something that can never open.
  WrappedKey damaged = sealed.key;
  damaged.ciphertext[30] ^= 1;
  EXPECT_EQ(RewrapDataKey(*provider_, *next, damaged).status().reason(), "secret_corrupt");
  // A key the old provider does not hold.
  std::unique_ptr<FileKeyProvider> stranger = NewProvider();
  EXPECT_EQ(RewrapDataKey(*stranger, *next, sealed.key).status().reason(), "secret_key_unknown");
}

}  // namespace
}  // namespace ql::secrets
