#pragma once

// The part of the HTTP listener (http_server.cc) that needs no socket: how the request head and
// body that Boost.Beast's parser read become an http::Request, and which requests the listener
// refuses by itself. The server calls these functions on what a connection delivered; the unit
// tests and fuzz/http_request_fuzzer.cc call them on bytes of their own. Private to ql_http.

#include <boost/beast/core/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cstddef>
#include <optional>
#include <string>

#include "ql/http/http_message.h"
#include "ql/http/http_server.h"

namespace ql::http {

using RequestParser = boost::beast::http::request_parser<boost::beast::http::string_body>;

// The most bytes a connection buffers while it reads (the head limit is well below it).
inline constexpr size_t kReadBufferBytes = 64 * 1024;

// An answer the listener gives by itself, with the JSON error {"code", "message"}; the
// connection is closed after it.
struct Refusal {
  int status = 400;
  std::string code;
  std::string message;
};

// Readies a new parser for the next request head: the head may hold at most
// `limits.max_head_bytes`, and the body has no limit until the request is admitted (a declared
// length over the limit is answered only after admission, so an anonymous client learns nothing
// but 401).
void PrepareParser(RequestParser& parser, const ServerLimits& limits);

// Returns the refusal for an error met while reading a request head: 431 headers_too_large past
// the head limit, 400 bad_request for Content-Length with Transfer-Encoding, conflicting or
// malformed lengths, or anything else that is not HTTP/1.1. Returns nullopt when the error is
// the connection's (closed, timed out, nothing or only part of a head sent): the connection is
// then closed without an answer.
std::optional<Refusal> RefusalForHeadError(const boost::beast::error_code& ec,
                                           const ServerLimits& limits);

// Fills `req` (method, target, path, params, headers; nothing else) from the head `parser` has
// read in full, and returns nullopt; or returns the refusal, checked in this order: 414
// uri_too_long for a target over `limits.max_target_bytes`, 431 too_many_headers for more than
// `limits.max_headers` fields, 400 bad_request for a Content-Length that is not exactly one
// field of decimal digits, a target that is not a path with a query of valid percent-escapes,
// or a transfer coding other than exactly `chunked`, 417 expectation_failed for an Expect other
// than 100-continue. `req->method` is set before any check, so a refusal of a HEAD request is
// answered without a body. Once this returns nullopt, a request with no body to read has
// `req->DeclaresBody()` false and a request with one has it true.
std::optional<Refusal> RequestFromHead(const RequestParser& parser, const ServerLimits& limits,
                                       Request* req);

// Returns true when the accepted request `req` asks for `100 Continue` before its body.
bool ExpectsContinue(const Request& req);

// Called once the request is admitted, before any body byte is read: returns 413
// body_too_large when the declared Content-Length exceeds `limits.max_body_bytes`; otherwise
// limits the body (chunked or not) to `limits.max_body_bytes` and returns nullopt.
std::optional<Refusal> StartBody(RequestParser& parser, const ServerLimits& limits);

// Returns the refusal for an error met while reading a body: 413 body_too_large past the body
// limit, 400 bad_request for a malformed (chunked) body. Returns nullopt when the error is the
// connection's: it is then closed without an answer.
std::optional<Refusal> RefusalForBodyError(const boost::beast::error_code& ec,
                                           const ServerLimits& limits);

}  // namespace ql::http
