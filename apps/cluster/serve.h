#pragma once

// `ql-cluster serve`: one control-plane replica. Any number of them share one PostgreSQL with
// no leader.

#include <cstdint>
#include <string>

#include "../artifact_flags.h"
#include "../log_flags.h"
#include "../notify_flags.h"
#include "database_url.h"
#include "ql/http/listen_address.h"
#include "ql/secrets/configured_provider.h"

namespace ql::cluster {

struct ServeConfig {
  UrlSource runtime_url{"", "", "QL3_DATABASE_URL", "--database-url"};
  UrlSource admin_url{"", "", "QL3_ADMIN_DATABASE_URL", "--admin-database-url"};
  std::string listen = "127.0.0.1:5800";
  // TLS of both listeners (API and workers), and the plain-HTTP policy off loopback.
  ListenSecurityFlags security;
  std::string owner;  // claim owner; default host:pid:random
  std::string oidc_config;  // single sign-on configuration file (empty: none)
  NotifyFlags notify;
  ArtifactFlags scripts;
  LogFlags log;
  int claims_per_round = 16;
  int max_claims_per_round = 256;  // a burst grows the batch up to this
  int64_t lease_ms = 30'000;
  int64_t cadence_ms = 1000;
  int64_t grace_ms = 30'000;
  int64_t recovery_interval_ms = 5000;
  int64_t retention_interval_ms = 60'000;  // sleep after a retention round that found no more
  int pool_max = 8;
  int shutdown_wait_s = 10;
  // The panel's sessions: how long one may go unused, and how long it lasts at most.
  int64_t session_idle_s = 30 * 60;
  int64_t session_lifetime_s = 12 * 3600;
  std::string admission_isolation = "serializable";  // or "read-committed"
  // Remote workers: the listener runs when the worker-ingress role's URL is configured.
  UrlSource worker_url{"", "", "QL3_WORKER_DATABASE_URL", "--worker-database-url"};
  std::string worker_listen = "127.0.0.1:5801";
  int64_t worker_lease_ms = 30'000;
  int64_t worker_session_ttl_ms = 30'000;
  int64_t worker_heartbeat_ms = 5'000;
  int64_t worker_log_cap_bytes = 8 * 1024 * 1024;
  int64_t worker_run_log_cap_bytes = 32 * 1024 * 1024;
  // Seals secret values written through the API; replicas never open a value (workers do). The
  // replica is not ready without a working one (ADR-0037).
  secrets::KeyProviderConfig secret_key;
};

// Runs the replica until SIGTERM or SIGINT. Start order: configuration validated before any
// connection → readiness audit (and the admin and worker-ingress URLs log in as their roles) →
// startup recovery converged → scheduler and recovery lifecycles → worker listener (when
// configured) → HTTP admission (/readyz 200). The key provider is the second gate: without one
// (`secret_key_provider_missing`), or with one that cannot be opened or fails a wrap/unwrap round
// trip (its own code), the replica serves not ready — /readyz 503 with the code, writes refused,
// no admission, retention or notifications — and checks it again every second. While serving,
// the audit reruns every 5 s (every second while it fails; the key provider's round trip at most
// once a minute while it passes) and /readyz answers 503 with its code until it passes again. The
// runtime pool's idle_in_transaction_session_timeout is lease_ms capped at 10 s. Stop order:
// withdraw admission → stop and drain the scheduler (bounded) → stop HTTP → close the pools. Exit
// codes: 0 after a clean stop, 1 failure, 2 invalid configuration, 3 the audit found the database
// not ready.
int Serve(const ServeConfig& config);

}  // namespace ql::cluster
