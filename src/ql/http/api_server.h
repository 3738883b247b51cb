#pragma once

// The HTTP API of QingLong (docs/api.md): /livez, /readyz, /metrics and the authenticated
// JSON API under /api/v1 over a ControlService. One listener thread plus a small worker pool;
// hard bounds on request line, headers, body size, in-flight requests, timeouts and log-follow
// duration. Every rejected request gets a JSON error {"code", "message"} and changes nothing.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "ql/core/status.h"
#include "ql/engine/control_service.h"
#include "ql/engine/log_reader.h"
#include "ql/engine/metrics.h"

namespace ql {

struct ApiServerOptions {
  // The owner's bearer token (at least 16 bytes). Only its SHA-256 digest is kept; requests
  // are compared against the digest in constant time.
  std::string owner_token;
  // Verifies a bearer token that is not the owner's, by the lowercase hex SHA-256 digest of the
  // token (the only form a credential store keeps; ql-cluster reads its api_credentials table).
  // true = a live credential, false = unknown or revoked; an error answers 503
  // credentials_unavailable. Called from worker threads. With a verifier, owner_token may be
  // empty (no owner token then).
  std::function<Result<bool>(const std::string& token_digest)> credential_verifier;
  // Largest request body accepted; larger ones get 413 body_too_large.
  size_t max_body_bytes = size_t{1} << 20;
  // Requests accepted (queued or being served) at once; beyond it /api/v1 answers 503
  // overloaded until load drops.
  int max_in_flight = 64;
  // Connections open at once (queued or being served), more than max_in_flight; one accepted
  // beyond it is closed before anything is read from it.
  int max_connections = 256;
  // Concurrent `follow=true` log streams; each holds a worker thread while it streams.
  int max_log_followers = 2;
  // Worker threads serving requests.
  int threads = 4;
  int read_timeout_ms = 10'000;
  int write_timeout_ms = 10'000;
  // A log follow stream ends after this long even when the run is still going.
  int64_t max_follow_ms = 10 * 60 * 1000;
  // How often a follow stream looks for new log bytes and run completion.
  int64_t follow_poll_ms = 200;
  // Reads run logs for GET /api/v1/runs/{id}/log; required, must outlive the server.
  const LogSource* log_reader = nullptr;
};

class ApiServer {
 public:
  // `service` and `metrics` must outlive the server.
  ApiServer(ControlService& service, Metrics& metrics, ApiServerOptions options);
  ~ApiServer();  // stops the server
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  // Validates the options, binds `host`:`port` (0 picks a free port) and starts serving on a
  // listener thread of its own. /readyz answers 503 until SetReady(true). Errors:
  // InvalidArgument (owner_token_too_short, invalid_server_options), Unavailable listen_failed
  // when the address cannot be bound, Conflict already_started.
  Status Start(const std::string& host, int port);
  // Returns the bound port (after Start).
  int port() const;
  // Marks the process ready (or not); /readyz reflects it until admission is withdrawn.
  void SetReady(bool ready);
  // Withdraws admission for good: /readyz answers 503 and every /api/v1 call 503
  // shutting_down; running log follow streams end. /livez and /metrics keep answering.
  void WithdrawAdmission();
  // Withdraws admission, stops accepting connections and joins the listener and workers.
  // Idempotent.
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ql
