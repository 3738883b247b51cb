#include "ql/core/status.h"

#include <gtest/gtest.h>

namespace ql {
namespace {

Result<int> Half(int v) {
  if (v % 2 != 0) return InvalidArgument("odd_value", "value " + std::to_string(v) + " is odd");
  return v / 2;
}

Result<int> Quarter(int v) {
  QL_ASSIGN_OR_RETURN(int h, Half(v));
  return Half(h);
}

TEST(StatusTest, OkByDefault) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.ToString(), "ok");
}

TEST(StatusTest, CarriesCategoryReasonAndMessage) {
  Status s = Conflict("version_conflict", "expected version 3, found 4");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kConflict);
  EXPECT_EQ(StatusCodeName(s.code()), "conflict");
  EXPECT_EQ(s.ToString(), "version_conflict: expected version 3, found 4");
}

TEST(ResultTest, PropagatesErrorsThroughAssignOrReturn) {
  EXPECT_EQ(*Quarter(8), 2);
  Result<int> r = Quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().reason(), "odd_value");
  EXPECT_EQ(r.status().message(), "value 3 is odd");
}

}  // namespace
}  // namespace ql
