#include "ql/core/jitter.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>

namespace ql {
namespace {

constexpr char kTrigger[] = "0190c6a4-3c2e-7d41-8e0f-2a9b5c7d1e33";
// 2026-01-01T12:00:00Z.
constexpr int64_t kNoon = 1767268800000;

TEST(JitterTest, OffsetsArePinnedSoEveryReplicaAndVersionAgrees) {
  // Computed independently: SHA-256("qinglong/jitter@v1" 0x00 "<trigger>\n<ms>"), first 8 bytes
  // as a big-endian integer, modulo jitter + 1.
  EXPECT_EQ(JitterOffsetMs(kTrigger, kNoon, 30'000), 17'995);
  EXPECT_EQ(JitterOffsetMs(kTrigger, kNoon + 60'000, 30'000), 28'911);
  EXPECT_EQ(JitterOffsetMs(kTrigger, kNoon, 1), 0);
}

TEST(JitterTest, NoWindowMeansNoOffset) {
  EXPECT_EQ(JitterOffsetMs(kTrigger, kNoon, 0), 0);
  EXPECT_EQ(JitterOffsetMs(kTrigger, kNoon, -5), 0);
}

TEST(JitterTest, OffsetsStayInsideTheWindowAndSpreadOverIt) {
  constexpr int64_t kWindow = 30'000;
  std::set<int64_t> seen;
  int64_t low_half = 0;
  for (int64_t minute = 0; minute < 2000; ++minute) {
    const int64_t offset = JitterOffsetMs(kTrigger, kNoon + minute * 60'000, kWindow);
    ASSERT_GE(offset, 0);
    ASSERT_LE(offset, kWindow);
    EXPECT_EQ(offset, JitterOffsetMs(kTrigger, kNoon + minute * 60'000, kWindow)) << "unstable";
    seen.insert(offset);
    if (offset < kWindow / 2) ++low_half;
  }
  // Two thousand occurrences spread over the window, not bunched at one end.
  EXPECT_GT(seen.size(), 1900u);
  EXPECT_GT(low_half, 850);
  EXPECT_LT(low_half, 1150);
  // Another trigger on the same occurrence gets its own offset.
  EXPECT_NE(JitterOffsetMs("0190c6a4-3c2e-7d41-8e0f-2a9b5c7d1e34", kNoon, kWindow),
            JitterOffsetMs(kTrigger, kNoon, kWindow));
}

TEST(JitterTest, WindowIsZeroToOneHour) {
  EXPECT_TRUE(ValidateJitterMs(0).ok());
  EXPECT_TRUE(ValidateJitterMs(kMaxJitterMs).ok());
  for (int64_t bad : {int64_t{-1}, kMaxJitterMs + 1}) {
    Status s = ValidateJitterMs(bad);
    EXPECT_EQ(s.reason(), "invalid_jitter") << bad;
    EXPECT_NE(s.message().find(std::to_string(bad)), std::string::npos) << s.message();
  }
}

}  // namespace
}  // namespace ql
