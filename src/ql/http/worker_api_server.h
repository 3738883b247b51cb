#pragma once

// The worker listener of ql-cluster (docs/worker-protocol.md): POST-only JSON routes under
// /worker/v1 over a WorkerService, separate from the API listener so the two can be exposed to
// different networks. Every call is authenticated by its worker token; bounded body size,
// threads and timeouts; errors are {"code", "message"} and change nothing.

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "ql/core/status.h"
#include "ql/engine/metrics.h"
#include "ql/engine/worker_service.h"
#include "ql/http/listener_tls.h"

namespace ql {

struct WorkerApiServerOptions {
  size_t max_body_bytes = size_t{1} << 20;
  int threads = 8;
  // Connections open at once (queued or being served); one accepted beyond it is closed before
  // anything is read from it.
  int max_connections = 256;
  int read_timeout_ms = 10'000;
  int write_timeout_ms = 10'000;
  // Serve HTTPS with these files; plain HTTP when unset.
  std::optional<ListenerTls> tls;
};

class WorkerApiServer {
 public:
  // `service` and `metrics` must outlive the server.
  WorkerApiServer(WorkerService& service, Metrics& metrics, WorkerApiServerOptions options = {});
  ~WorkerApiServer();
  WorkerApiServer(const WorkerApiServer&) = delete;
  WorkerApiServer& operator=(const WorkerApiServer&) = delete;

  // Binds host:port (0 = a free port) and serves on a thread of its own. Unavailable
  // `listen_failed` when the address cannot be bound.
  Status Start(const std::string& host, int port);
  int port() const;
  // From now on every call answers 503 shutting_down (workers retry on another replica).
  void WithdrawAdmission();
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ql
