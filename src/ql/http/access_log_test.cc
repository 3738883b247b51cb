#include "ql/http/access_log.h"

#include <gtest/gtest.h>

#include <string>

namespace ql::http {
namespace {

TEST(AccessLogTest, CarriesNoTokenCookieQueryValueOrBody) {
  Request req;
  req.method = "POST";
  req.target = "/api/v1/runs?token=query-secret&limit=5&token=again";
  req.path = "/api/v1/runs";
  req.params = {{"token", "query-secret"}, {"limit", "5"}, {"token", "again"}};
  req.headers = {{"Authorization", "Bearer header-secret"},
                 {"Cookie", "ql_session=cookie-secret"},
                 {"X-Csrf-Token", "csrf-secret"}};
  req.body = R"({"password":"body-secret"})";
  req.remote_address = "192.0.2.7";
  const std::vector<LogField> fields = AccessLogFields(req, 201, 42, 7, "runs.start", "alice");
  for (LogFormat format : {LogFormat::kText, LogFormat::kJson}) {
    const std::string line = FormatLogLine(format, 0, LogLevel::kInfo, "http.request", fields);
    for (const char* secret : {"query-secret", "again", "header-secret", "cookie-secret",
                               "csrf-secret", "body-secret", "Bearer", "ql_session"}) {
      EXPECT_EQ(line.find(secret), std::string::npos) << secret << " in " << line;
    }
  }
  EXPECT_EQ(FormatLogLine(LogFormat::kText, 0, LogLevel::kInfo, "http.request", fields),
            "1970-01-01T00:00:00.000Z info http.request method=POST path=/api/v1/runs "
            "query=limit,token status=201 bytes=42 ms=7 remote=192.0.2.7 route=runs.start "
            "principal=alice");
}

TEST(AccessLogTest, AnUnknownPrincipalAndNoQueryAreLeftOut) {
  Request req;
  req.method = "GET";
  req.path = std::string(300, 'a');
  const std::string line = FormatLogLine(LogFormat::kText, 0, LogLevel::kInfo, "http.request",
                                         AccessLogFields(req, 404, 0, 0, "none", ""));
  EXPECT_EQ(line.find("principal="), std::string::npos);
  EXPECT_EQ(line.find("query="), std::string::npos);
  EXPECT_NE(line.find("path=" + std::string(256, 'a') + "... "), std::string::npos);
}

}  // namespace
}  // namespace ql::http
