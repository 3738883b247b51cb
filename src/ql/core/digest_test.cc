#include "ql/core/digest.h"

#include <gtest/gtest.h>

#include <string>

namespace ql {
namespace {

TEST(Sha256HexTest, MatchesFipsVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Sha256Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256HasherTest, DigestsPiecesAsOneInputAndStartsOver) {
  Sha256Hasher hasher;
  hasher.Update("ab");
  hasher.Update("");
  hasher.Update("c");
  EXPECT_EQ(hasher.FinishHex(), Sha256Hex("abc"));
  EXPECT_EQ(hasher.FinishHex(), Sha256Hex(""));
  for (int i = 0; i < 1000; ++i) hasher.Update(std::string(1000, 'a'));
  EXPECT_EQ(hasher.FinishHex(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(DomainDigestTest, HashesDomainZeroByteAndCanonicalBytes) {
  // printf 'qinglong/command@v1\0{}' | sha256sum
  EXPECT_EQ(DomainDigest("qinglong/command@v1", "{}"),
            "b8b09c564d841d54362f463493daa1f165684437e9f79b315f8f7079a2988f85");
  EXPECT_EQ(DomainDigest("qinglong/command@v1", "{}"),
            Sha256Hex(std::string("qinglong/command@v1\0{}", 22)));
}

TEST(DomainDigestTest, SeparatesDomains) {
  EXPECT_NE(DomainDigest("qinglong/command@v1", "{}"),
            DomainDigest("qinglong/execution-plan@v1", "{}"));
  EXPECT_NE(DomainDigest("ab", "c"), DomainDigest("a", "bc"));
  EXPECT_NE(DomainDigest("a", "{}"), Sha256Hex("a{}"));
}

TEST(ConstantTimeEqualsTest, ComparesBytes) {
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "xbc"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abcd"));
  EXPECT_FALSE(ConstantTimeEquals("", "a"));
  EXPECT_TRUE(ConstantTimeEquals(std::string_view("a\0b", 3), std::string_view("a\0b", 3)));
  EXPECT_FALSE(ConstantTimeEquals(std::string_view("a\0b", 3), std::string_view("a\0c", 3)));
}

TEST(IsSha256HexTest, AcceptsOnlySixtyFourLowercaseHexDigits) {
  const std::string digest = Sha256Hex("x");
  EXPECT_TRUE(IsSha256Hex(digest));
  EXPECT_FALSE(IsSha256Hex(digest.substr(1)));
  EXPECT_FALSE(IsSha256Hex(digest + "0"));
  std::string upper = digest;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  EXPECT_FALSE(IsSha256Hex(upper));
  EXPECT_FALSE(IsSha256Hex(std::string(63, 'a') + "g"));
  EXPECT_FALSE(IsSha256Hex(""));
}

}  // namespace
}  // namespace ql
