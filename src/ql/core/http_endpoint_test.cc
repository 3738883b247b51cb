#include "ql/core/http_endpoint.h"

#include <gtest/gtest.h>

namespace ql {
namespace {

TEST(HttpEndpointTest, HttpsDefaultsToPort443AndKeepsItsScheme) {
  Result<HttpEndpoint> e = ParseHttpEndpoint("https://ql.example/prefix/", "--token");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_TRUE(e->tls);
  EXPECT_EQ(e->port, 443);
  EXPECT_EQ(e->url, "https://ql.example:443/prefix");
  EXPECT_EQ(e->SchemeHostPort(), "https://ql.example:443");

  Result<HttpEndpoint> v6 = ParseHttpEndpoint("https://[::1]:5800", "--token");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->SchemeHostPort(), "https://[::1]:5800");

  Result<HttpEndpoint> bare = ParseHttpEndpoint("127.0.0.1:5700", "--token");
  ASSERT_TRUE(bare.ok());
  EXPECT_FALSE(bare->tls);
  EXPECT_EQ(ParseHttpEndpoint("ftp://x:1", "--token").status().reason(), "invalid_url");
}

TEST(HttpEndpointTest, LoopbackIsLocalhost127Slash8AndV6One) {
  for (const char* host : {"localhost", "LOCALHOST", "127.0.0.1", "127.1.2.3", "::1", "[::1]"}) {
    EXPECT_TRUE(IsLoopbackHost(host)) << host;
  }
  for (const char* host : {"0.0.0.0", "::", "10.0.0.5", "128.0.0.1", "ql.example", "", "[::]",
                           "localhost.example", "::ffff:10.0.0.1"}) {
    EXPECT_FALSE(IsLoopbackHost(host)) << host;
  }
}

TEST(HttpEndpointTest, PlainHttpOffLoopbackNeedsTheExplicitFlag) {
  Status refused = CheckPlainHttpAllowed("10.0.0.5", false, false, "--control http://10.0.0.5:1",
                                         "--allow-insecure-http");
  EXPECT_EQ(refused.reason(), "insecure_http_refused");
  EXPECT_NE(refused.message().find("--control http://10.0.0.5:1"), std::string::npos);
  EXPECT_NE(refused.message().find("--allow-insecure-http"), std::string::npos);
  EXPECT_TRUE(CheckPlainHttpAllowed("10.0.0.5", false, true, "x", "--f").ok());
  EXPECT_TRUE(CheckPlainHttpAllowed("10.0.0.5", true, false, "x", "--f").ok());
  EXPECT_TRUE(CheckPlainHttpAllowed("127.0.0.1", false, false, "x", "--f").ok());
  EXPECT_EQ(CheckPlainHttpAllowed("0.0.0.0", false, false, "x", "--f").reason(),
            "insecure_http_refused");
}

}  // namespace
}  // namespace ql
