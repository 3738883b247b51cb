#pragma once

// The HTTP API of QingLong (docs/api.md): /livez, /readyz, /metrics, the authenticated JSON
// API under /api/v1 over a ControlService, and the web panel's files when given. An
// event-driven listener (http_server.h: one I/O thread, so slow and idle clients hold no
// thread) plus a small worker pool; hard bounds on request line, headers, body size and rate,
// connections, in-flight requests, timeouts and log-follow duration. Every rejected request
// gets a JSON error {"code", "message"} and changes nothing.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ql/core/clock.h"
#include "ql/core/event_log.h"
#include "ql/core/governance_ports.h"
#include "ql/core/status.h"
#include "ql/engine/control_service.h"
#include "ql/engine/log_reader.h"
#include "ql/engine/metrics.h"
#include "ql/engine/notification_service.h"
#include "ql/engine/oidc_sign_in.h"
#include "ql/engine/placement_service.h"
#include "ql/engine/script_service.h"
#include "ql/engine/secret_service.h"
#include "ql/engine/sign_in_service.h"
#include "ql/http/listener_tls.h"
#include "ql/http/panel_assets.h"

namespace ql {

struct ApiServerOptions {
  // Finds the principal of a bearer token by the token's lowercase hex SHA-256 digest (the only
  // form a store keeps; see TokenAuthenticator): PermissionDenied for an unknown, revoked or
  // expired token or a disabled principal (401 unauthorized), any other error 503
  // credentials_unavailable. Called from worker threads; required.
  std::function<Result<Authentication>(const std::string& token_digest)> authenticate;
  // Largest request body accepted; larger ones get 413 body_too_large.
  size_t max_body_bytes = size_t{1} << 20;
  // Requests between their head and the end of their answer at once; beyond it /api/v1
  // answers 503 overloaded until load drops.
  int max_in_flight = 64;
  // Connections open at once, more than max_in_flight, and from one peer address (at most
  // max_connections); one accepted beyond either is closed before anything is read from it. Idle and slow connections cost
  // memory (a few KiB) and a descriptor each, never a thread.
  int max_connections = 4096;
  int max_connections_per_address = 512;
  // Concurrent `follow=true` log streams; each holds a worker thread while it looks for news.
  int max_log_followers = 2;
  // Worker threads deciding and serving requests.
  int threads = 4;
  // The whole request head (TLS handshake included) must arrive within it; a body gets it as
  // a grace period, then must keep up min_body_bytes_per_second.
  int read_timeout_ms = 10'000;
  size_t min_body_bytes_per_second = 1024;
  // A keep-alive connection with no new request is closed after this long.
  int idle_timeout_ms = 30'000;
  int write_timeout_ms = 10'000;
  // A log follow stream ends after this long even when the run is still going.
  int64_t max_follow_ms = 10 * 60 * 1000;
  // How often a follow stream looks for new log bytes and run completion.
  int64_t follow_poll_ms = 200;
  // Reads run logs for GET /api/v1/runs/{id}/log; required, must outlive the server.
  const LogSource* log_reader = nullptr;
  // Serve HTTPS with these files; plain HTTP when unset.
  std::optional<ListenerTls> tls;
  // The web panel served at "/" and under "/ui/" (GET and HEAD, no token); null or empty serves
  // none, and those paths answer 404 route_not_found. Must outlive the server.
  const PanelAssets* panel = nullptr;
  // Serves /api/v1/secrets; without it those routes answer 503 secrets_unavailable. Must
  // outlive the server.
  SecretService* secrets = nullptr;
  // Serves /api/v1/scripts and /api/v1/blobs; without it those routes answer 503
  // scripts_unavailable. Must outlive the server.
  ScriptService* scripts = nullptr;
  // Serves /api/v1/pools and /api/v1/workers, and says why a queued remote run waits; without
  // it those routes answer 503 workers_unavailable. Must outlive the server.
  PlacementService* placement = nullptr;
  // Serves /api/v1/notify; without it those routes answer 503 notifications_unavailable.
  NotificationService* notify = nullptr;
  // Serves sign-in, sign-out, sessions and passwords; without it those routes answer 503
  // sign_in_unavailable. Must outlive the server.
  SignInService* sign_in = nullptr;
  // Signs people in through an OpenID Connect provider (/api/v1/sign-in/oidc); without it those
  // routes answer 404 oidc_not_configured. Must outlive the server.
  OidcSignIn* oidc = nullptr;
  // Forgets what authentication remembered of a token (by digest) after a write changed it (a
  // session's restriction lifted), so the next request sees the change. Optional.
  std::function<void(const std::string& token_digest)> forget_token;
  // The build's version, in ql_build_info{version="..."} on /metrics.
  std::string version = "unknown";
  // How this daemon confines commands (IsolationReport): "full", "user-namespace", "rlimits",
  // "off", or empty for a server that runs none; shown by /readyz and /api/v1/status with the
  // one-line detail.
  std::string isolation_level;
  std::string isolation_detail;
  // The daemon log (must outlive the server): `readiness.changed` when readiness flips or its
  // code changes, `http.slow_request` (warn) for an answer that took slow_request_ms or more
  // (0: never), and with `access_log` one `http.request` line (info) per answer. Both carry
  // method, path, the query's parameter names, status, bytes, ms, remote address, route and
  // principal name (access_log.h); never a header, cookie, token, query value or body.
  EventLog* event_log = nullptr;
  bool access_log = false;
  int64_t slow_request_ms = 1000;
  // Times requests for the log; null: the system clock.
  const Clock* clock = nullptr;
};

// One route of the API as the route table declares it, for documentation and tests.
struct ApiRoute {
  std::string method;
  std::string pattern;
  std::string name;
  std::string permission;  // see docs/api.md: public, authenticated, viewer, operator, ...
};

// Returns every route the API serves, in table order.
std::vector<ApiRoute> ApiRoutes();

class ApiServer {
 public:
  // `service` and `metrics` must outlive the server.
  ApiServer(ControlService& service, Metrics& metrics, ApiServerOptions options);
  ~ApiServer();  // stops the server
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  // Validates the options, binds `host`:`port` (0 picks a free port) and starts serving on a
  // listener thread of its own. /readyz answers 503 until SetReady(true). Errors:
  // InvalidArgument invalid_server_options, Unavailable listen_failed
  // when the address cannot be bound, Conflict already_started.
  Status Start(const std::string& host, int port);
  // Returns the bound port (after Start).
  int port() const;
  // Marks the process ready (or not ready, code `not_ready`); /readyz reflects it until
  // admission is withdrawn.
  void SetReady(bool ready);
  // Ok marks the process ready; any other status makes /readyz answer 503 with the status's
  // reason as code and its message, e.g. `database_unavailable` or an audit code. Callable from
  // any thread at any time; after WithdrawAdmission /readyz stays `shutting_down` whatever is set.
  void SetReadiness(const Status& readiness);
  // Not ready means no writes (ADR-0037): while `verdict` (the readiness audit's) is not Ok,
  // every API route but a read (GET) answers 503 with the verdict's reason as code, before its
  // body is read; reads keep working. Ok lets writes through again. Callable from any thread.
  void SetWritable(const Status& verdict);
  // Withdraws admission for good: /readyz answers 503 and every /api/v1 call 503
  // shutting_down; running log follow streams end. /livez and /metrics keep answering.
  void WithdrawAdmission();
  // Withdraws admission, stops accepting connections and joins the listener and workers.
  // Idempotent.
  void Stop();

  // Opaque outside api_server.cc; public so that the route table there can name its handlers.
  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ql
