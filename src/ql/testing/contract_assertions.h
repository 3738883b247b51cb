#pragma once

// Assertions shared by the parts of the repository contract (repository, retention, overlap):
// a Status or a Result must be ok, a Result's value is taken, an error has its code and reason.

#include <gtest/gtest.h>

#include <utility>

#include "ql/core/status.h"

namespace ql::testing {

inline Status StatusOfAny(const Status& status) { return status; }
template <typename T>
Status StatusOfAny(const Result<T>& result) {
  return result.status();
}

}  // namespace ql::testing

#define QL_ASSERT_OK(expr)                                                 \
  do {                                                                     \
    const ::ql::Status ql_status_ = ::ql::testing::StatusOfAny(expr);      \
    ASSERT_TRUE(ql_status_.ok()) << ql_status_.ToString();                 \
  } while (0)

#define QL_ASSERT_OK_AND_ASSIGN(lhs, expr) \
  QL_ASSERT_OK_AND_ASSIGN_IMPL_(QL_CONCAT_(ql_assert_result_, __LINE__), lhs, expr)
#define QL_ASSERT_OK_AND_ASSIGN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  ASSERT_TRUE(tmp.ok()) << tmp.status().ToString();   \
  lhs = std::move(tmp).value()

#define QL_EXPECT_ERROR(expr, want_code, want_reason)                 \
  do {                                                                \
    const ::ql::Status ql_st_ = ::ql::testing::StatusOfAny(expr);     \
    EXPECT_EQ(ql_st_.code(), want_code) << ql_st_.ToString();         \
    EXPECT_EQ(ql_st_.reason(), want_reason) << ql_st_.ToString();     \
  } while (0)
