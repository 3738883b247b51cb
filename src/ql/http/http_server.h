#pragma once

// The event-driven HTTP/1.1 server under both QingLong listeners (the API and /worker/v1), on
// Boost.Beast and Asio. One I/O thread reads and writes every connection without blocking, so a
// slow or idle client holds memory and a descriptor, never a thread; requests are decided and
// answered on a small worker pool, where handlers may block on the store. Private to ql_http:
// no Beast type appears here (only http_server.cc and http_parse.h/.cc include it; the latter
// holds what the listener decides about a request's bytes, without sockets).
//
// Per connection: a deadline for the whole request head (TLS handshake included), a minimum
// body rate once the body starts, an idle timeout between keep-alive requests and a deadline
// for each answer's write. Global and per-address connection caps (one more is closed as soon as
// it is accepted). Requests on a connection are served one at a time in order (pipelining is
// safe: the next request is not parsed before the answer to the previous one is written).
// Refused by the server itself, each with a JSON error {"code", "message"} and the connection
// closed: a malformed request (400 bad_request), Content-Length together with
// Transfer-Encoding or a transfer coding other than chunked (400 bad_request), a target over
// max_target_bytes (414 uri_too_long), a head over max_head_bytes or more than max_headers
// fields (431), an Expect other than 100-continue (417), a body past max_body_bytes, chunked or
// not (413 body_too_large). `Range` is never honoured: every answer is whole. TLS listeners
// accept TLS 1.2 and later only.

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ql/core/status.h"
#include "ql/http/http_message.h"
#include "ql/http/listener_tls.h"

namespace ql::http {

struct ServerLimits {
  // Worker threads running admission and handlers.
  int workers = 4;
  // Connections open at once, and from one peer address; one accepted beyond either is closed
  // before anything is read from it.
  int max_connections = 4096;
  int max_connections_per_address = 512;
  // From a connection's accept (or the first byte of a later request) to the end of the request
  // head; a TLS handshake counts against the first.
  int head_timeout_ms = 10'000;
  // A keep-alive connection waiting for its next request is closed after this long.
  int idle_timeout_ms = 30'000;
  // A body must arrive at this rate at least, after `body_grace_ms`.
  int body_grace_ms = 10'000;
  size_t min_body_bytes_per_second = 1024;
  // Writing one answer (or one piece of a streamed answer).
  int write_timeout_ms = 10'000;
  size_t max_target_bytes = 4096;
  size_t max_head_bytes = 16 * 1024;
  size_t max_headers = 100;
  size_t max_body_bytes = size_t{1} << 20;
  // Added to every answer unless the answer sets the field itself.
  std::vector<std::pair<std::string, std::string>> default_headers;
};

struct ServerHandlers {
  // On the I/O thread, right after the head, for answers that need nothing but memory (never
  // block here): fills `res` and returns true to answer at once, or returns false. Optional.
  std::function<bool(const Request& req, Response& res)> immediate;
  // On a worker, before any body byte is read: fills `res` and returns false to refuse (the body
  // is never read; the connection is closed after the answer when one was announced), or
  // returns true to go on, optionally recording its decision in `req.decision`. Required.
  std::function<bool(Request& req, Response& res)> admit;
  // On a worker, with the whole body. Required.
  std::function<void(Request& req, Response& res)> handle;
  // After each answer was written or failed (for metrics). Optional.
  std::function<void(const Request& req, const Response& res)> answered;
};

class HttpServer {
 public:
  // Creates a server: plain HTTP, or TLS over `tls`'s certificate, key and optional client CA.
  // InvalidArgument `tls_file_unreadable` names a file that cannot be read, `tls_invalid` a
  // certificate or key OpenSSL refuses, `tls_unsupported` any `tls` in a build without TLS;
  // Unavailable `tls_library_unavailable` when the TLS library cannot be loaded.
  static Result<std::unique_ptr<HttpServer>> Create(const std::optional<ListenerTls>& tls,
                                                    ServerLimits limits, ServerHandlers handlers);
  ~HttpServer();  // stops
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds `host`:`port` (0 picks a free port; SO_REUSEADDR, never SO_REUSEPORT, so a second
  // server cannot share the port) and starts the I/O thread and workers. Unavailable
  // `listen_failed` when the address cannot be bound.
  Status Start(const std::string& host, int port);
  int port() const;
  // Connections open now, and requests between their head and the end of their answer.
  int connections() const;
  int requests() const;
  // Stops accepting, closes every connection, finishes the workers' current calls and joins
  // every thread. Idempotent.
  void Stop();

  struct Impl;  // defined in http_server.cc

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ql::http
