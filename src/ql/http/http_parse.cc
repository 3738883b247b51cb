#include "ql/http/http_parse.h"

#include <boost/beast/http/error.hpp>
#include <cstdint>
#include <string_view>
#include <utility>

#include "ql/core/canonical_json.h"

namespace ql::http {
namespace {

namespace bhttp = boost::beast::http;

// True for an error of the HTTP parser about the bytes received (not the connection ending).
bool IsParseError(const boost::beast::error_code& ec) {
  return ec && ec.category() == bhttp::make_error_code(bhttp::error::end_of_stream).category() &&
         ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message;
}

constexpr std::string_view kBadFraming =
    "the request's Content-Length or Transfer-Encoding is invalid (both together, repeated or not "
    "a number)";

Refusal MakeRefusal(int status, std::string code, std::string_view message) {
  return Refusal{status, std::move(code), std::string(message)};
}

}  // namespace

void PrepareParser(RequestParser& parser, const ServerLimits& limits) {
  parser.header_limit(static_cast<std::uint32_t>(limits.max_head_bytes));
  parser.body_limit(boost::none);
}

std::optional<Refusal> RefusalForHeadError(const boost::beast::error_code& ec,
                                           const ServerLimits& limits) {
  if (ec == bhttp::error::header_limit) {
    return MakeRefusal(
        431, "headers_too_large",
        "the request head exceeds " + std::to_string(limits.max_head_bytes) + " bytes");
  }
  if (ec == bhttp::error::bad_transfer_encoding || ec == bhttp::error::bad_content_length ||
      ec == bhttp::error::multiple_content_length) {
    return MakeRefusal(400, "bad_request", kBadFraming);
  }
  if (IsParseError(ec)) return MakeRefusal(400, "bad_request", "the request is not valid HTTP/1.1");
  return std::nullopt;
}

std::optional<Refusal> RequestFromHead(const RequestParser& parser, const ServerLimits& limits,
                                       Request* req) {
  const auto& head = parser.get();
  req->method = std::string(head.method_string());
  const size_t target_size = head.target().size();
  if (target_size > limits.max_target_bytes) {
    return MakeRefusal(
        414, "uri_too_long",
        "request target exceeds " + std::to_string(limits.max_target_bytes) + " bytes");
  }
  size_t fields = 0;
  for (auto it = head.begin(); it != head.end(); ++it) ++fields;
  if (fields > limits.max_headers) {
    return MakeRefusal(
        431, "too_many_headers",
        "a request may carry at most " + std::to_string(limits.max_headers) + " headers");
  }
  req->target = std::string(head.target());
  req->headers.reserve(fields);
  for (const auto& field : head) {
    req->headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  }
  // Beast also accepts a Content-Length repeated with one value, in several fields or as a list
  // ("4, 4"), and frames the body by it; admission and the worker listener read the first field
  // as one number. Only one field of digits is accepted, so all of them read the same length.
  size_t lengths = 0;
  bool digits = true;
  for (const auto& [name, value] : req->headers) {
    if (!EqualsIgnoreCase(name, "Content-Length")) continue;
    ++lengths;
    digits = digits && !value.empty() && value.find_first_not_of("0123456789") == std::string::npos;
  }
  if (lengths > 1 || !digits) {
    return MakeRefusal(400, "bad_request", kBadFraming);
  }
  if (!SplitTarget(req->target, &req->path, &req->params)) {
    return MakeRefusal(400, "bad_request",
                       "the request target must be a path with an optional query of valid "
                       "percent-escapes");
  }
  if (req->HasHeader("Transfer-Encoding") &&
      !EqualsIgnoreCase(req->Header("Transfer-Encoding"), "chunked")) {
    return MakeRefusal(400, "bad_request", "the only transfer coding accepted is chunked");
  }
  const std::string expect = req->Header("Expect");
  if (!expect.empty() && !ExpectsContinue(*req)) {
    return MakeRefusal(417, "expectation_failed",
                       "only Expect: 100-continue is supported, got " + QuoteForMessage(expect));
  }
  return std::nullopt;
}

bool ExpectsContinue(const Request& req) {
  return EqualsIgnoreCase(req.Header("Expect"), "100-continue");
}

std::optional<Refusal> StartBody(RequestParser& parser, const ServerLimits& limits) {
  const auto declared = parser.content_length();
  if (declared.has_value() && *declared > limits.max_body_bytes) {
    return MakeRefusal(413, "body_too_large",
                       "request body of " + std::to_string(*declared) +
                           " bytes exceeds the limit of " + std::to_string(limits.max_body_bytes) +
                           " bytes");
  }
  parser.body_limit(limits.max_body_bytes);
  return std::nullopt;
}

std::optional<Refusal> RefusalForBodyError(const boost::beast::error_code& ec,
                                           const ServerLimits& limits) {
  if (ec == bhttp::error::body_limit) {
    return MakeRefusal(
        413, "body_too_large",
        "request body exceeds the limit of " + std::to_string(limits.max_body_bytes) + " bytes");
  }
  if (IsParseError(ec)) {
    return MakeRefusal(400, "bad_request", "the request body is not valid (chunked) HTTP/1.1");
  }
  return std::nullopt;
}

}  // namespace ql::http
