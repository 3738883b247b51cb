// Feeds the input as the bytes a client sends on one connection to the HTTP listener's parsing
// path: Boost.Beast's parser reads each request head and body as http_server.cc does, and
// http_parse.h turns them into http::Request values or the listener's own refusals. Every
// request is admitted, so pipelined requests after it are read too, up to the first refusal or
// a request that ends the connection.
//
// Invariants:
// - a refusal is one of the listener's own (400 bad_request, 413 body_too_large, 414
//   uri_too_long, 417 expectation_failed, 431 headers_too_large / too_many_headers) with a
//   non-empty UTF-8 message; an error that is not a refusal is the end of the input;
// - an accepted request respects every limit, its path is the target up to '?', its framing is
//   what the parser uses: a Transfer-Encoding is exactly `chunked` and the body is chunked, a
//   Content-Length is one field of digits equal to the parser's length and to the body's size,
//   never both; a request that does not declare a body has none to read (else its bytes would
//   be read as the next request when admission refuses it);
// - the bytes delivered one at a time or in pieces give the same requests and the same refusal
//   as delivered at once (except that a malformed head without its end may be refused with 400
//   in one and wait for more in the other);
// - stricter limits accept a prefix of what the default limits accept, request for request;
// - an accepted request written out again (with a Content-Length body) reads back the same.

#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/system/system_error.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fuzz_check.h"
#include "ql/core/canonical_json.h"
#include "ql/http/http_message.h"
#include "ql/http/http_parse.h"

namespace {

namespace bhttp = boost::beast::http;
using ql::http::Refusal;
using ql::http::Request;
using ql::http::ServerLimits;

// A connection's bytes as a synchronous stream: each read returns the next piece, of a size
// taken in turn from `pieces` (empty: everything that fits).
class PieceStream {
 public:
  PieceStream(std::string_view data, std::vector<size_t> pieces)
      : data_(data), pieces_(std::move(pieces)) {}

  template <class MutableBufferSequence>
  size_t read_some(const MutableBufferSequence& buffers, boost::system::error_code& ec) {
    if (pos_ == data_.size()) {
      ec = boost::asio::error::eof;
      return 0;
    }
    size_t want = data_.size() - pos_;
    if (!pieces_.empty()) want = std::min(want, pieces_[next_++ % pieces_.size()]);
    const size_t n =
        boost::asio::buffer_copy(buffers, boost::asio::buffer(data_.data() + pos_, want));
    pos_ += n;
    ec = {};
    return n;
  }

  template <class MutableBufferSequence>
  size_t read_some(const MutableBufferSequence& buffers) {
    boost::system::error_code ec;
    const size_t n = read_some(buffers, ec);
    if (ec) throw boost::system::system_error(ec);
    return n;
  }

 private:
  std::string_view data_;
  std::vector<size_t> pieces_;
  size_t pos_ = 0;
  size_t next_ = 0;
};

struct Connection {
  std::vector<Request> requests;   // accepted, with their bodies, in order
  std::optional<Refusal> refusal;  // the listener's answer that ended the connection, if any
};

bool AllDigits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

void CheckRefusal(const Refusal& r) {
  static const std::set<std::pair<int, std::string>> kKnown = {
      {400, "bad_request"},        {413, "body_too_large"},    {414, "uri_too_long"},
      {417, "expectation_failed"}, {431, "headers_too_large"}, {431, "too_many_headers"}};
  QL_FUZZ_CHECK(kKnown.count({r.status, r.code}) == 1, r.code);
  QL_FUZZ_CHECK(!r.message.empty() && ql::IsValidUtf8(r.message), r.message);
}

// Checks an accepted head against the parser that read it.
void CheckHead(const ql::http::RequestParser& parser, const ServerLimits& limits,
               const Request& req) {
  const auto& head = parser.get();
  QL_FUZZ_CHECK(req.method == head.method_string(), req.method);
  QL_FUZZ_CHECK(req.target == head.target(), req.target);
  QL_FUZZ_CHECK(req.target.size() <= limits.max_target_bytes, req.target);
  QL_FUZZ_CHECK(req.headers.size() <= limits.max_headers, "too many headers accepted");
  QL_FUZZ_CHECK(!req.path.empty() && req.path[0] == '/', req.target);
  QL_FUZZ_CHECK(req.path == req.target.substr(0, req.target.find('?')), req.target);

  size_t lengths = 0;
  size_t codings = 0;
  for (const auto& [name, value] : req.headers) {
    if (ql::http::EqualsIgnoreCase(name, "Content-Length")) ++lengths;
    if (ql::http::EqualsIgnoreCase(name, "Transfer-Encoding")) ++codings;
  }
  QL_FUZZ_CHECK(lengths == 0 || codings == 0, "Content-Length with Transfer-Encoding accepted");
  QL_FUZZ_CHECK(codings <= 1, "repeated Transfer-Encoding accepted");
  QL_FUZZ_CHECK(parser.chunked() == (codings == 1), "chunked framing and the header disagree");
  if (codings == 1) {
    QL_FUZZ_CHECK(ql::http::EqualsIgnoreCase(req.Header("Transfer-Encoding"), "chunked"),
                  req.Header("Transfer-Encoding"));
  }
  QL_FUZZ_CHECK(lengths <= 1, "repeated Content-Length accepted");
  if (lengths == 1) {
    const std::string value = req.Header("Content-Length");
    QL_FUZZ_CHECK(AllDigits(value), "Content-Length " + ql::QuoteForMessage(value) + " accepted");
    QL_FUZZ_CHECK(parser.content_length().has_value(), value);
    QL_FUZZ_CHECK(std::to_string(*parser.content_length()) ==
                      value.substr(std::min(value.find_first_not_of('0'), value.size() - 1)),
                  value);
  }
  // Admission refusing a request that declares no body keeps the connection: a body the parser
  // still expects would then be read as the next request.
  if (!req.DeclaresBody()) QL_FUZZ_CHECK(parser.is_done(), "a body follows an undeclared body");
  const std::string expect = req.Header("Expect");
  QL_FUZZ_CHECK(expect.empty() || ql::http::ExpectsContinue(req), expect);
}

// Reads requests from `bytes` as one connection of the listener would, every request admitted.
Connection Serve(std::string_view bytes, const ServerLimits& limits, std::vector<size_t> pieces) {
  Connection out;
  PieceStream stream(bytes, std::move(pieces));
  boost::beast::flat_buffer buffer{ql::http::kReadBufferBytes};
  for (int n = 0; n < 64; ++n) {
    ql::http::RequestParser parser;
    ql::http::PrepareParser(parser, limits);
    boost::beast::error_code ec;
    bhttp::read_header(stream, buffer, parser, ec);
    if (ec) {
      out.refusal = ql::http::RefusalForHeadError(ec, limits);
      if (!out.refusal) {
        QL_FUZZ_CHECK(ec == bhttp::error::end_of_stream || ec == bhttp::error::partial_message,
                      ec.message());
      }
      break;
    }
    Request req;
    out.refusal = ql::http::RequestFromHead(parser, limits, &req);
    if (out.refusal) break;
    CheckHead(parser, limits, req);
    out.refusal = ql::http::StartBody(parser, limits);
    if (out.refusal) break;
    while (!parser.is_done()) {
      bhttp::read_some(stream, buffer, parser, ec);
      if (ec) break;
    }
    if (ec) {
      out.refusal = ql::http::RefusalForBodyError(ec, limits);
      if (!out.refusal) {
        QL_FUZZ_CHECK(ec == bhttp::error::partial_message || ec == bhttp::error::end_of_stream,
                      ec.message());
      }
      break;
    }
    req.body = std::move(parser.get().body());
    QL_FUZZ_CHECK(req.body.size() <= limits.max_body_bytes, "body over the limit accepted");
    if (req.HasHeader("Content-Length")) {
      QL_FUZZ_CHECK(std::to_string(req.body.size()) == std::to_string(*parser.content_length()),
                    "body size differs from Content-Length");
    }
    const bool keep_alive = parser.get().keep_alive();
    out.requests.push_back(std::move(req));
    if (!keep_alive) break;
  }
  if (out.refusal) CheckRefusal(*out.refusal);
  return out;
}

bool SameRequest(const Request& a, const Request& b) {
  return a.method == b.method && a.target == b.target && a.path == b.path && a.params == b.params &&
         a.headers == b.headers && a.body == b.body;
}

bool SameRefusal(const std::optional<Refusal>& a, const std::optional<Refusal>& b) {
  if (a.has_value() != b.has_value()) return false;
  return !a || (a->status == b->status && a->code == b->code && a->message == b->message);
}

std::string Describe(const std::optional<Refusal>& r) {
  return r ? std::to_string(r->status) + " " + r->code + " (" + r->message + ")" : "none";
}

bool IsFraming(std::string_view name) {
  return ql::http::EqualsIgnoreCase(name, "Content-Length") ||
         ql::http::EqualsIgnoreCase(name, "Transfer-Encoding");
}

// Writes `req` out again with its body framed by a Content-Length.
std::string Serialize(const Request& req) {
  std::string out = req.method + " " + req.target + " HTTP/1.1\r\n";
  for (const auto& [name, value] : req.headers) {
    if (!IsFraming(name)) out += name + ": " + value + "\r\n";
  }
  out += "Content-Length: " + std::to_string(req.body.size()) + "\r\n\r\n" + req.body;
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const ServerLimits defaults;
  ServerLimits small;
  small.max_target_bytes = 64;
  small.max_head_bytes = 512;
  small.max_headers = 8;
  small.max_body_bytes = 64;

  const Connection whole = Serve(bytes, defaults, {});
  const Connection bytewise = Serve(bytes, defaults, {1});
  const Connection pieces = Serve(bytes, defaults, {3, 1, 7, 2, 13, 5});
  for (const Connection* other : {&bytewise, &pieces}) {
    QL_FUZZ_CHECK(other->requests.size() == whole.requests.size(),
                  "delivery in pieces changes the number of requests read");
    for (size_t i = 0; i < whole.requests.size(); ++i) {
      QL_FUZZ_CHECK(SameRequest(other->requests[i], whole.requests[i]),
                    "delivery in pieces changes request " + std::to_string(i));
    }
    // Beast parses a start line or fields at once when it has them whole, but once it has
    // seen part of one it waits for the end of the head: a malformed head that never ends is
    // refused (400) or waits for more (and times out unanswered) depending on how its bytes
    // were split. Either way nothing is served.
    const bool waited_for_more =
        (!other->refusal && whole.refusal && whole.refusal->status == 400) ||
        (!whole.refusal && other->refusal && other->refusal->status == 400);
    QL_FUZZ_CHECK(SameRefusal(other->refusal, whole.refusal) || waited_for_more,
                  "delivery in pieces changes the refusal: " + Describe(other->refusal) +
                      " instead of " + Describe(whole.refusal));
  }

  const Connection strict = Serve(bytes, small, {2, 5});
  QL_FUZZ_CHECK(strict.requests.size() <= whole.requests.size(),
                "stricter limits accept more requests");
  for (size_t i = 0; i < strict.requests.size(); ++i) {
    QL_FUZZ_CHECK(SameRequest(strict.requests[i], whole.requests[i]),
                  "stricter limits change request " + std::to_string(i));
  }

  ServerLimits roomy = defaults;
  roomy.max_headers = defaults.max_headers + 1;  // the Content-Length written out
  roomy.max_head_bytes = 2 * defaults.max_head_bytes;
  for (const Request& req : whole.requests) {
    const Connection again = Serve(Serialize(req), roomy, {});
    QL_FUZZ_CHECK(again.requests.size() == 1 && !again.refusal,
                  "an accepted request written out again is not accepted");
    Request expected = req;
    std::erase_if(expected.headers, [](const auto& field) { return IsFraming(field.first); });
    Request got = again.requests[0];
    std::erase_if(got.headers, [](const auto& field) { return IsFraming(field.first); });
    QL_FUZZ_CHECK(SameRequest(got, expected), "an accepted request reads back differently");
  }
  return 0;
}
