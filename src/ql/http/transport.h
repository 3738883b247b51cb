#pragma once

// Connection-level rules shared by the API and worker listeners: a bounded worker pool, a cap
// on open connections, timeouts, and an admission gate that decides from the request line and
// headers alone, before any body byte is read. Private to ql_http (it exposes httplib types).

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>

#include "ql/core/status.h"
#include "ql/http/httplib_config.h"
#include "ql/http/listener_tls.h"

namespace ql::transport {

struct Limits {
  // Worker threads; each serves one connection at a time.
  int threads = 4;
  // Connections accepted and not yet closed (queued for a worker or being served). A connection
  // accepted beyond it is closed at once, before anything is read from it.
  int max_connections = 256;
  int read_timeout_ms = 10'000;
  int write_timeout_ms = 10'000;
  // Largest body a request may declare when it asks `Expect: 100-continue`; a larger one gets
  // 413 body_too_large instead of 100 Continue.
  size_t max_body_bytes = size_t{1} << 20;
};

// Decides admission from the request line and headers: returns Handled with the rejection in
// `res`, or Unhandled to let the request through to its handler (which may then read the body).
// Called on worker threads; must not read the body.
using Gate = std::function<httplib::Server::HandlerResponse(const httplib::Request& req,
                                                            httplib::Response& res)>;

// A worker pool that counts the connections it holds (queued or being served) in `connections`
// and refuses one beyond `max_connections`, which the server then closes unread.
class ConnectionPool final : public httplib::TaskQueue {
 public:
  ConnectionPool(size_t threads, int max_connections, std::atomic<int>& connections);
  bool enqueue(std::function<void()> fn) override;
  void shutdown() override;

 private:
  httplib::ThreadPool pool_;
  const int max_connections_;
  std::atomic<int>& connections_;
};

// Returns true when the request announces a body: a Content-Length other than 0, or a
// Transfer-Encoding.
bool DeclaresBody(const httplib::Request& req);

// Answers `status` with the JSON error {"code", "message"}.
void SendError(httplib::Response& res, int status, std::string_view code, std::string_view message);

// Configures `server` with `limits`: the ConnectionPool (counting in `connections`, which must
// outlive the server), read and write timeouts, SO_REUSEADDR (not httplib's SO_REUSEPORT, which
// would let a second server share the port), and `gate` before any body is read:
// - for `Expect: 100-continue`, before the 100 is sent: a rejection is the final answer, and a
//   declared body over limits.max_body_bytes gets 413 body_too_large;
// - as the pre-routing handler of every request.
// A rejected request whose body was not read ends its connection after the answer, so unread
// bytes are never parsed as the next request. Call before the server starts.
void Configure(httplib::Server& server, const Limits& limits, std::atomic<int>& connections,
               Gate gate);

// Returns a plain server, or with `tls` a TLS server over its certificate, key and optional
// client CA. InvalidArgument `tls_file_unreadable` names a file that cannot be read,
// `tls_invalid` a certificate or key OpenSSL refuses (wrong format, key not matching), and
// `tls_unsupported` any `tls` in a build without TLS.
Result<std::unique_ptr<httplib::Server>> NewServer(const std::optional<ListenerTls>& tls);

}  // namespace ql::transport
