#include "ql/http/http_parse.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/beast/http/error.hpp>
#include <string>
#include <string_view>

#include "ql/http/http_server.h"
#include "ql/testing/raw_http.h"

namespace ql::http {
namespace {

namespace bhttp = boost::beast::http;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// Feeds `bytes` (a whole head) to a parser prepared for `limits`; returns the parser's error.
boost::beast::error_code FeedHead(RequestParser& parser, std::string_view bytes,
                                  const ServerLimits& limits) {
  PrepareParser(parser, limits);
  boost::beast::error_code ec;
  parser.put(boost::asio::buffer(bytes.data(), bytes.size()), ec);
  return ec;
}

// What the listener makes of a head that the parser reads without error.
std::optional<Refusal> DecideHead(std::string_view head, const ServerLimits& limits = {},
                                  Request* out = nullptr) {
  RequestParser parser;
  const boost::beast::error_code ec = FeedHead(parser, head, limits);
  EXPECT_FALSE(ec) << ec.message() << " for " << head;
  EXPECT_TRUE(parser.is_header_done()) << head;
  Request req;
  std::optional<Refusal> refusal = RequestFromHead(parser, limits, &req);
  if (out != nullptr) *out = std::move(req);
  return refusal;
}

TEST(HttpParseTest, AnAcceptedHeadBecomesARequest) {
  Request req;
  EXPECT_FALSE(
      DecideHead("POST /api/v1/runs?status=failed&q=a+b HTTP/1.1\r\nHost: x\r\n"
                 "Content-Length: 0012\r\nExpect: 100-Continue\r\n\r\n",
                 {}, &req));
  EXPECT_EQ(req.method, "POST");
  EXPECT_EQ(req.target, "/api/v1/runs?status=failed&q=a+b");
  EXPECT_EQ(req.path, "/api/v1/runs");
  EXPECT_EQ(req.Param("q"), "a b");
  EXPECT_EQ(req.Header("content-length"), "0012");
  EXPECT_TRUE(req.DeclaresBody());
  EXPECT_TRUE(ExpectsContinue(req));
  EXPECT_FALSE(DecideHead("POST / HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n"));
}

TEST(HttpParseTest, TheListenerRefusesHeadsInOrder) {
  ServerLimits limits;
  limits.max_target_bytes = 16;
  limits.max_headers = 3;
  Request req;
  std::optional<Refusal> refusal = DecideHead(
      "HEAD /aaaaaaaaaaaaaaaaaaaa HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n", limits, &req);
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->status, 414);
  EXPECT_EQ(refusal->code, "uri_too_long");
  EXPECT_EQ(req.method, "HEAD") << "a refused HEAD is answered without a body";
  refusal = DecideHead("GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n", limits);
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->status, 431);
  EXPECT_EQ(refusal->code, "too_many_headers");
  refusal = DecideHead("GET /a?x=%zz HTTP/1.1\r\n\r\n", limits);
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->status, 400);
  EXPECT_THAT(refusal->message, HasSubstr("percent-escapes"));
  refusal = DecideHead("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", limits);
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->status, 400);
  EXPECT_THAT(refusal->message, HasSubstr("chunked"));
  refusal = DecideHead("POST / HTTP/1.1\r\nExpect: 200-ok\r\n\r\n", limits);
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->status, 417);
  EXPECT_EQ(refusal->code, "expectation_failed");
}

// Found by fuzz/http_request_fuzzer (corpus/http_request/crash-repeated-content-length):
// Beast accepts a Content-Length repeated with the same value, in two fields or as a list, and
// frames the body by it, while admission and the worker listener read the field as text.
TEST(HttpParseTest, RepeatedOrListedContentLengthsAreRefused) {
  for (std::string_view framing : {"Content-Length: 4\r\nContent-Length: 4\r\n",
                                   "Content-Length: 4, 4\r\n", "Content-Length: 4,4\r\n"}) {
    const std::string head =
        "POST /api/v1/tasks HTTP/1.1\r\nHost: x\r\n" + std::string(framing) + "\r\n";
    const std::optional<Refusal> refusal = DecideHead(head);
    ASSERT_TRUE(refusal) << framing;
    EXPECT_EQ(refusal->status, 400) << framing;
    EXPECT_EQ(refusal->code, "bad_request") << framing;
  }
}

TEST(HttpParseTest, ParserErrorsAreRefusedOrEndTheConnection) {
  ServerLimits limits;
  limits.max_head_bytes = 64;
  RequestParser parser;
  boost::beast::error_code ec =
      FeedHead(parser, "GET / HTTP/1.1\r\nX-Long: " + std::string(100, 'x') + "\r\n\r\n", limits);
  ASSERT_EQ(ec, bhttp::error::header_limit);
  std::optional<Refusal> refusal = RefusalForHeadError(ec, limits);
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->status, 431);
  EXPECT_EQ(refusal->code, "headers_too_large");

  for (std::string_view framing :
       {"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n",
        "Content-Length: 4\r\nContent-Length: 5\r\n", "Content-Length: -1\r\n"}) {
    RequestParser conflicting;
    ec = FeedHead(conflicting, "POST / HTTP/1.1\r\n" + std::string(framing) + "\r\n", {});
    refusal = RefusalForHeadError(ec, {});
    ASSERT_TRUE(refusal) << framing << ec.message();
    EXPECT_EQ(refusal->status, 400) << framing;
    EXPECT_THAT(refusal->message, HasSubstr("Content-Length or Transfer-Encoding")) << framing;
  }
  EXPECT_FALSE(RefusalForHeadError(bhttp::error::end_of_stream, {}));
  EXPECT_FALSE(RefusalForHeadError(bhttp::error::partial_message, {}));
  EXPECT_FALSE(RefusalForHeadError(boost::asio::error::connection_reset, {}));

  refusal = RefusalForBodyError(bhttp::error::body_limit, {});
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->status, 413);
  refusal = RefusalForBodyError(bhttp::error::bad_chunk, {});
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->status, 400);
  EXPECT_FALSE(RefusalForBodyError(bhttp::error::partial_message, {}));
}

TEST(HttpParseTest, ADeclaredLengthOverTheLimitIsRefusedBeforeTheBody) {
  ServerLimits limits;
  limits.max_body_bytes = 10;
  RequestParser parser;
  ASSERT_FALSE(FeedHead(parser, "POST / HTTP/1.1\r\nContent-Length: 11\r\n\r\n", limits));
  std::optional<Refusal> refusal = StartBody(parser, limits);
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->status, 413);
  EXPECT_EQ(refusal->code, "body_too_large");
  RequestParser fits;
  ASSERT_FALSE(FeedHead(fits, "POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\n", limits));
  EXPECT_FALSE(StartBody(fits, limits));
}

class HttpServerParseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerHandlers handlers;
    handlers.admit = [](Request&, Response&) { return true; };
    handlers.handle = [](Request& req, Response& res) {
      res.SetContent("handled " + req.method + " " + req.path, "text/plain");
    };
    Result<std::unique_ptr<HttpServer>> server =
        HttpServer::Create(std::nullopt, ServerLimits{}, std::move(handlers));
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
    ASSERT_TRUE(server_->Start("127.0.0.1", 0).ok());
  }

  std::unique_ptr<HttpServer> server_;
};

TEST_F(HttpServerParseTest, TheServerRefusesARepeatedContentLength) {
  const testing::Exchanged answer =
      testing::Exchange(server_->port(),
                        "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nContent-Length: 4\r\n"
                        "\r\nGET /livez HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_THAT(answer.answer, StartsWith("HTTP/1.1 400"));
  EXPECT_THAT(answer.answer, HasSubstr("bad_request"));
  EXPECT_THAT(answer.answer, ::testing::Not(HasSubstr("handled")));
  EXPECT_TRUE(answer.closed);
}

// A refusal is answered for the request it refuses: after a HEAD on the same connection, a GET
// refused with 414 still gets its JSON body (it used to be sent as to the HEAD: a length and no
// body).
TEST_F(HttpServerParseTest, ARefusalAfterAHeadCarriesItsBody) {
  const testing::Exchanged answer = testing::Exchange(
      server_->port(), "HEAD /a HTTP/1.1\r\nHost: x\r\n\r\nGET /" + std::string(5000, 'a') +
                           " HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_THAT(answer.answer, StartsWith("HTTP/1.1 200"));
  EXPECT_THAT(answer.answer, HasSubstr("HTTP/1.1 414"));
  EXPECT_THAT(answer.answer, HasSubstr("\"code\":\"uri_too_long\""));
  EXPECT_TRUE(answer.closed);
}

}  // namespace
}  // namespace ql::http
