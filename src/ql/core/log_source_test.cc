#include "ql/core/log_source.h"

#include <gtest/gtest.h>

namespace ql {
namespace {

constexpr int64_t kMiB = 1024 * 1024;

TEST(AttemptLogCapTest, TheFirstAttemptGetsTheAttemptCap) {
  EXPECT_EQ(AttemptLogCap(8 * kMiB, 32 * kMiB, 0), 8 * kMiB);
}

TEST(AttemptLogCapTest, LaterAttemptsShareWhatIsLeftOfTheRunCap) {
  EXPECT_EQ(AttemptLogCap(8 * kMiB, 20 * kMiB, 8 * kMiB), 8 * kMiB);
  EXPECT_EQ(AttemptLogCap(8 * kMiB, 20 * kMiB, 16 * kMiB), 4 * kMiB);
}

TEST(AttemptLogCapTest, AnAttemptAfterTheRunCapStillKeepsItsHeadAndTail) {
  EXPECT_EQ(AttemptLogCap(8 * kMiB, 20 * kMiB, 20 * kMiB), kMinAttemptLogBytes);
  EXPECT_EQ(AttemptLogCap(8 * kMiB, 20 * kMiB, 90 * kMiB), kMinAttemptLogBytes);
  EXPECT_EQ(AttemptLogCap(1000, 20 * kMiB, 90 * kMiB), 1000) << "never above the attempt cap";
}

TEST(AttemptLogCapTest, NoRunCapLeavesTheAttemptCap) {
  EXPECT_EQ(AttemptLogCap(8 * kMiB, 0, 100 * kMiB), 8 * kMiB);
}

}  // namespace
}  // namespace ql
