#include "ql/http/http_message.h"

#include <gtest/gtest.h>

namespace ql::http {
namespace {

TEST(HttpMessageTest, TargetsSplitIntoARawPathAndDecodedParameters) {
  std::string path;
  std::multimap<std::string, std::string> params;
  ASSERT_TRUE(SplitTarget("/api/v1/runs/a%2Fb?status=failed&q=a+b%20c&flag&&x=%E4%BD%A0", &path,
                          &params));
  EXPECT_EQ(path, "/api/v1/runs/a%2Fb") << "the path is never decoded";
  EXPECT_EQ(params.find("status")->second, "failed");
  EXPECT_EQ(params.find("q")->second, "a b c");
  EXPECT_EQ(params.find("flag")->second, "");
  EXPECT_EQ(params.find("x")->second, "\xE4\xBD\xA0");
  EXPECT_EQ(params.size(), 4u);
  ASSERT_TRUE(SplitTarget("/a?x=1&x=2", &path, &params));
  EXPECT_EQ(params.count("x"), 2u);
  // Not origin-form, or a broken escape: refused.
  EXPECT_FALSE(SplitTarget("http://host/a", &path, &params));
  EXPECT_FALSE(SplitTarget("*", &path, &params));
  EXPECT_FALSE(SplitTarget("/a?x=%zz", &path, &params));
  EXPECT_FALSE(SplitTarget("/a?x=%4", &path, &params));
}

TEST(HttpMessageTest, PercentDecodingIsStrict) {
  EXPECT_EQ(PercentDecode("a%2Fb", false), "a/b");
  EXPECT_EQ(PercentDecode("a+b", false), "a+b");
  EXPECT_EQ(PercentDecode("a+b", true), "a b");
  EXPECT_FALSE(PercentDecode("%", false).has_value());
  EXPECT_FALSE(PercentDecode("%g0", false).has_value());
  EXPECT_FALSE(PercentDecode("ab%2", false).has_value());
}

TEST(HttpMessageTest, HeadersAreFoundIgnoringCaseAndBodiesAreDeclared) {
  Request req;
  req.headers = {{"content-length", "0"}, {"X-Thing", "1"}};
  EXPECT_EQ(req.Header("Content-Length"), "0");
  EXPECT_FALSE(req.DeclaresBody());
  req.headers = {{"Transfer-Encoding", "chunked"}};
  EXPECT_TRUE(req.DeclaresBody());
  Response res;
  res.SetHeader("Cache-Control", "no-store");
  res.SetHeader("cache-control", "public");
  EXPECT_EQ(res.headers.size(), 1u);
  EXPECT_EQ(res.Header("CACHE-CONTROL"), "public");
  res.EraseHeader("Cache-Control");
  EXPECT_FALSE(res.HasHeader("cache-control"));
  EXPECT_EQ(StatusReason(431), "Request Header Fields Too Large");
}

}  // namespace
}  // namespace ql::http
