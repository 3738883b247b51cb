#include "ql/secrets/aead.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "ql/secrets/secret_bytes.h"

namespace ql::secrets {
namespace {

constexpr char kAd[] = "qinglong/test\nproject=1 name=A version=1";

class AeadTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(InitializeSecrets().ok()); }
  SecretBytes key_ = SecretBytes::Random(kAeadKeyBytes);
};

TEST_F(AeadTest, RoundTripsWithAFreshNonceEachTime) {
  const std::string value = "cookie=abc123; token=xyz";
  Result<AeadBox> a = AeadSeal(key_, value, kAd);
  Result<AeadBox> b = AeadSeal(key_, value, kAd);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->nonce.size(), kAeadNonceBytes);
  EXPECT_EQ(a->ciphertext.size(), value.size() + kAeadTagBytes);
  EXPECT_NE(a->nonce, b->nonce);
  EXPECT_NE(a->ciphertext, b->ciphertext);
  EXPECT_EQ(a->ciphertext.find(value), std::string::npos);
  Result<SecretBytes> opened = AeadOpen(key_, *a, kAd, "test value");
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  EXPECT_EQ(opened->view(), value);
  EXPECT_EQ(AeadOpen(key_, *b, kAd, "test value")->view(), value);
}

TEST_F(AeadTest, EveryFlippedByteIsCorruptNeverGarbage) {
  Result<AeadBox> box = AeadSeal(key_, "a secret value", kAd);
  ASSERT_TRUE(box.ok());
  for (size_t i = 0; i < box->ciphertext.size(); ++i) {
    AeadBox tampered = *box;
    tampered.ciphertext[i] ^= 0x01;
    Status s = AeadOpen(key_, tampered, kAd, "test value").status();
    EXPECT_EQ(s.code(), StatusCode::kCorrupt) << "ciphertext byte " << i;
    EXPECT_EQ(s.reason(), "secret_corrupt") << "ciphertext byte " << i;
  }
  for (size_t i = 0; i < box->nonce.size(); ++i) {
    AeadBox tampered = *box;
    tampered.nonce[i] ^= 0x80;
    EXPECT_EQ(AeadOpen(key_, tampered, kAd, "v").status().reason(), "secret_corrupt") << i;
  }
  AeadBox cut = *box;
  cut.ciphertext.pop_back();
  EXPECT_EQ(AeadOpen(key_, cut, kAd, "v").status().reason(), "secret_corrupt");
  cut.ciphertext.resize(kAeadTagBytes - 1);
  EXPECT_EQ(AeadOpen(key_, cut, kAd, "v").status().reason(), "secret_corrupt");
  AeadBox short_nonce = *box;
  short_nonce.nonce.pop_back();
  EXPECT_EQ(AeadOpen(key_, short_nonce, kAd, "v").status().reason(), "secret_corrupt");
}

TEST_F(AeadTest, WrongAssociatedDataOrKeyIsCorrupt) {
  Result<AeadBox> box = AeadSeal(key_, "a secret value", kAd);
  ASSERT_TRUE(box.ok());
  Status s = AeadOpen(key_, *box, "qinglong/test\nproject=1 name=A version=2", "secret A").status();
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_EQ(s.reason(), "secret_corrupt");
  EXPECT_THAT(s.message(), ::testing::HasSubstr("secret A"));
  EXPECT_EQ(AeadOpen(key_, *box, "", "v").status().reason(), "secret_corrupt");
  SecretBytes other = SecretBytes::Random(kAeadKeyBytes);
  EXPECT_EQ(AeadOpen(other, *box, kAd, "v").status().reason(), "secret_corrupt");
}

TEST_F(AeadTest, RefusesKeysOfTheWrongSize) {
  SecretBytes short_key = SecretBytes::Random(16);
  EXPECT_EQ(AeadSeal(short_key, "x", kAd).status().reason(), "secret_bad_key");
  AeadBox box = *AeadSeal(key_, "x", kAd);
  EXPECT_EQ(AeadOpen(short_key, box, kAd, "v").status().reason(), "secret_bad_key");
}

TEST(SecretBytesTest, CopiesComparesAndEmptiesWhenMoved) {
  ASSERT_TRUE(InitializeSecrets().ok());
  SecretBytes a = SecretBytes::CopyOf("value");
  EXPECT_EQ(a.view(), "value");
  EXPECT_TRUE(a == SecretBytes::CopyOf("value"));
  EXPECT_FALSE(a == SecretBytes::CopyOf("valuE"));
  EXPECT_FALSE(a == SecretBytes::CopyOf("value2"));
  SecretBytes b = std::move(a);
  EXPECT_EQ(b.view(), "value");
  EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move): moved-from state is specified
  EXPECT_EQ(SecretBytes(3).view(), std::string(3, '\0'));
  EXPECT_FALSE(SecretBytes::Random(32) == SecretBytes::Random(32));
}

}  // namespace
}  // namespace ql::secrets
