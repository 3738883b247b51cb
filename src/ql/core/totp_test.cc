#include "ql/core/totp.h"

#include <gtest/gtest.h>

namespace ql {
namespace {

// RFC 6238 Appendix B: the SHA-1 seed "12345678901234567890", 8-digit codes; the 6-digit code
// is the last six digits of each.
TEST(TotpTest, MatchesTheRfc6238TestVectors) {
  const std::string seed = "12345678901234567890";
  EXPECT_EQ(TotpCode(seed, 59'000), "287082");                 // 94287082
  EXPECT_EQ(TotpCode(seed, 1'111'111'109'000), "081804");      // 07081804
  EXPECT_EQ(TotpCode(seed, 1'111'111'111'000), "050471");      // 14050471
  EXPECT_EQ(TotpCode(seed, 1'234'567'890'000), "005924");      // 89005924
  EXPECT_EQ(TotpCode(seed, 2'000'000'000'000), "279037");      // 69279037
  EXPECT_EQ(TotpCode(seed, 20'000'000'000'000), "353130");     // 65353130
}

TEST(TotpTest, AcceptsOneStepEitherSideAndNothingElse) {
  const std::string seed = "12345678901234567890";
  const int64_t now = 1'234'567'890'000;
  const std::string code = TotpCode(seed, now);
  EXPECT_EQ(TotpMatch(seed, code, now), now / kTotpStepMs);
  EXPECT_EQ(TotpMatch(seed, code, now + kTotpStepMs), now / kTotpStepMs);
  EXPECT_EQ(TotpMatch(seed, code, now - kTotpStepMs), now / kTotpStepMs);
  EXPECT_EQ(TotpMatch(seed, code, now + 2 * kTotpStepMs), -1);
  EXPECT_EQ(TotpMatch(seed, "12345", now), -1);
  EXPECT_EQ(TotpMatch(seed, "12345a", now), -1);
}

TEST(TotpTest, Base32RoundTripsAndTheUriNamesTheAccount) {
  const std::string bytes = "12345678901234567890";
  EXPECT_EQ(Base32Encode(bytes), "GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ");
  std::string back;
  ASSERT_TRUE(Base32Decode("gezd gnbv gy3t qojq gezd gnbv gy3t qojq", &back));
  EXPECT_EQ(back, bytes);
  EXPECT_FALSE(Base32Decode("GEZ1", &back));
  EXPECT_EQ(TotpUri("QingLong", "alice", bytes),
            "otpauth://totp/QingLong:alice?secret=GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ"
            "&issuer=QingLong&algorithm=SHA1&digits=6&period=30");
}

}  // namespace
}  // namespace ql
