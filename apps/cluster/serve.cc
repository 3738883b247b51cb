#include "serve.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string_view>
#include <thread>

#include "../config_file.h"
#include "../log_flags.h"
#include "../oidc_config_file.h"
#include "ql/core/clock.h"
#include "ql/core/ids.h"
#include "ql/core/misfire.h"
#include "ql/engine/cluster_recovery.h"
#include "ql/engine/cluster_scheduler.h"
#include "ql/engine/control_service.h"
#include "ql/engine/metrics.h"
#include "ql/engine/notification_delivery.h"
#include "ql/engine/notification_service.h"
#include "ql/engine/oidc_sign_in.h"
#include "ql/engine/outage_log.h"
#include "ql/engine/placement_service.h"
#include "ql/engine/retention_job.h"
#include "ql/engine/round_loop.h"
#include "ql/engine/script_retention.h"
#include "ql/engine/script_service.h"
#include "ql/engine/secret_service.h"
#include "ql/engine/sign_in_service.h"
#include "ql/engine/token_authenticator.h"
#include "ql/engine/worker_service.h"
#include "ql/http/api_server.h"
#include "ql/http/listen_address.h"
#include "ql/http/panel_assets.h"
#include "ql/http/worker_api_server.h"
#include "ql/notify/curl_sender.h"
#include "ql/oidc/client/http_provider.h"
#include "ql/panel/embedded_panel.h"
#include "ql/secrets/checked_key_provider.h"
#include "ql/secrets/password_hasher.h"
#include "ql/secrets/sealed_box.h"
#include "ql/secrets/store_sealer.h"
#include "ql/storage/postgres/pg_audit.h"
#include "ql/storage/postgres/pg_cluster_recovery.h"
#include "ql/storage/postgres/pg_cluster_schedules.h"
#include "ql/storage/postgres/pg_credentials.h"
#include "ql/storage/postgres/pg_log_source.h"
#include "ql/storage/postgres/pg_store.h"
#include "ql/storage/postgres/pg_worker.h"
#include "ql_version.h"

namespace ql::cluster {
namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNotReady = 3;
// A verified API credential is trusted this long before it is looked up again, so a
// revocation takes effect within this bound.
constexpr int kRecoveryStartAttempts = 10;
// The readiness audit reruns this often while the replica is ready, and this often while it is
// not (so /readyz returns to 200 about a second after the database does).
constexpr int64_t kReadinessIntervalMs = 5000;
constexpr int64_t kNotReadyIntervalMs = 1000;
// A runtime transaction idle this long is ended by the server, so a replica frozen inside its
// admission releases the schedule rows it locked about when its claims expire: the bound is the
// claim lease, capped at this.
constexpr int64_t kMaxIdleInTransactionMs = 10'000;

int Fail(int code, const Status& status) {
  std::cerr << "error: " << status.reason() << ": " << WithConfigLine(status.message()) << "\n";
  return code;
}

// Low-sensitivity diagnostics: a component, a reason and a message; never a URL or a token.
// One daemon log line each.
DiagnosticLog Diagnostics(EventLog& log) {
  return [&log](std::string_view component, const Status& status) {
    log.Warn("diagnostic",
             {{"component", component}, {"code", status.reason()}, {"message", status.message()}});
  };
}

// The options of one of the replica's loops: exceptions counted and logged, the loop goes on.
RoundLoopOptions LoopOptions(const char* name, Metrics& metrics, EventLog& log) {
  RoundLoopOptions options;
  options.name = name;
  options.metrics = &metrics;
  options.diagnostics = Diagnostics(log);
  return options;
}

std::string DefaultOwner() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  std::string name = std::string(host).substr(0, 64);
  if (name.empty()) name = "replica";
  return name + ":" + std::to_string(::getpid()) + ":" + RandomHex(SecureRandom(), 4);
}

pg::PoolOptions PoolFor(const std::string& url, const std::string& app, int max) {
  pg::PoolOptions options;
  options.url = url;
  options.max_connections = max;
  options.min_connections = 1;
  options.session.application_name = app;
  return options;
}

}  // namespace

int Serve(const ServeConfig& config) {
  Clock& clock = SystemClock();
  RandomSource& random = SecureRandom();

  // Configuration first: nothing connects until all of it holds.
  Result<std::string> runtime_url = ResolveDatabaseUrl(config.runtime_url);
  if (!runtime_url.ok()) return Fail(kExitUsage, runtime_url.status());
  Result<std::string> admin_url = ResolveOptionalDatabaseUrl(config.admin_url);
  if (!admin_url.ok()) return Fail(kExitUsage, admin_url.status());
  Result<std::pair<std::string, int>> listen = ParseListenAddress(config.listen);
  if (!listen.ok()) return Fail(kExitUsage, listen.status());
  Result<std::string> worker_url = ResolveOptionalDatabaseUrl(config.worker_url);
  if (!worker_url.ok()) return Fail(kExitUsage, worker_url.status());
  Result<std::pair<std::string, int>> worker_listen = ParseListenAddress(config.worker_listen);
  if (!worker_listen.ok()) return Fail(kExitUsage, worker_listen.status());
  Result<std::optional<ListenerTls>> tls =
      DecideListenSecurity(listen->first, config.security, "--listen");
  if (!tls.ok()) return Fail(kExitUsage, tls.status());
  if (!worker_url->empty()) {
    Result<std::optional<ListenerTls>> worker_tls =
        DecideListenSecurity(worker_listen->first, config.security, "--worker-listen");
    if (!worker_tls.ok()) return Fail(kExitUsage, worker_tls.status());
  }
  const std::string scheme = tls->has_value() ? "https://" : "http://";
  WorkerServiceOptions worker_options;
  worker_options.lease_ttl_ms = config.worker_lease_ms;
  worker_options.session_ttl_ms = config.worker_session_ttl_ms;
  worker_options.heartbeat_interval_ms = config.worker_heartbeat_ms;
  worker_options.log_cap_bytes = config.worker_log_cap_bytes;
  worker_options.run_log_cap_bytes = config.worker_run_log_cap_bytes;
  if (Status st = ValidateWorkerServiceOptions(worker_options); !st.ok()) {
    return Fail(kExitUsage, st);
  }
  ClusterSchedulerOptions scheduler_options;
  scheduler_options.owner = config.owner.empty() ? DefaultOwner() : config.owner;
  scheduler_options.claims_per_round = config.claims_per_round;
  scheduler_options.max_claims_per_round = config.max_claims_per_round;
  scheduler_options.lease_ms = config.lease_ms;
  scheduler_options.cadence_ms = config.cadence_ms;
  scheduler_options.grace_ms = config.grace_ms;
  if (Status st = ClusterScheduler::ValidateOptions(scheduler_options); !st.ok()) {
    return Fail(kExitUsage, st);
  }
  if (config.recovery_interval_ms < 1000 || config.recovery_interval_ms > 600'000) {
    return Fail(kExitUsage, InvalidArgument("invalid_recovery_interval",
                                            "--recovery-interval-ms must be 1000..600000"));
  }
  if (config.retention_interval_ms < 100 || config.retention_interval_ms > 86'400'000) {
    return Fail(kExitUsage, InvalidArgument("invalid_retention_interval",
                                            "--retention-interval-ms must be 100..86400000"));
  }
  if (config.pool_max < 2 || config.pool_max > 256) {
    return Fail(kExitUsage, InvalidArgument("invalid_pool_max", "--pool-max must be 2..256"));
  }
  if (config.admission_isolation != "serializable" &&
      config.admission_isolation != "read-committed") {
    return Fail(kExitUsage,
                InvalidArgument("invalid_admission_isolation",
                                "--admission-isolation must be serializable or read-committed"));
  }
  if (config.shutdown_wait_s < 1 || config.shutdown_wait_s > 600) {
    return Fail(kExitUsage,
                InvalidArgument("invalid_shutdown_wait", "--shutdown-wait must be 1..600 s"));
  }
  Result<DaemonLog> daemon_log = OpenDaemonLog(config.log, clock);
  if (!daemon_log.ok()) return Fail(kExitUsage, daemon_log.status());
  EventLog& log = *daemon_log->log;
  const DiagnosticLog diagnose = Diagnostics(log);

  // The key provider seals values written through the API and opens notification credentials.
  // ADR-0037: no ready without it. Malformed flags are a usage error; a provider that is missing,
  // cannot be opened or fails its round trip keeps the replica not ready (no writes) with its
  // code until a later check passes.
  Result<std::unique_ptr<secrets::CheckedKeyProvider>> key_provider =
      secrets::CheckedKeyProvider::Create(config.secret_key, clock);
  if (!key_provider.ok()) return Fail(kExitUsage, key_provider.status());
  secrets::EnvelopeSealer sealer(**key_provider);

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);  // reopens the --log-file
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  PostgresStoreOptions store_options;
  store_options.runtime = PoolFor(*runtime_url, "qinglong-runtime", config.pool_max);
  store_options.runtime.session.idle_in_transaction_timeout_ms =
      static_cast<int>(std::min(scheduler_options.lease_ms, kMaxIdleInTransactionMs));
  if (!admin_url->empty()) {
    store_options.admin = PoolFor(*admin_url, "qinglong-admin", std::max(2, config.pool_max / 4));
  }
  Result<std::unique_ptr<PostgresStore>> opened = PostgresStore::Open(store_options);
  if (!opened.ok()) return Fail(kExitFailure, opened.status());
  std::unique_ptr<PostgresStore> store = std::move(opened).value();

  // The readiness audit, as the runtime role, and the roles of the other URLs, before anything
  // else touches the schema.
  pg::ReadinessProbe readiness(pg::ReadinessUrls{*runtime_url, *admin_url, *worker_url},
                               "qinglong-readiness");
  if (Status audit = readiness.Check(); !audit.ok()) {
    if (audit.code() == StatusCode::kCorrupt) {
      std::cout << "not ready: " << audit.reason() << ": " << audit.message() << "\n";
      return kExitNotReady;
    }
    return Fail(kExitFailure, audit);
  }
  // SERIALIZABLE admission without the predicate-lock room the design notes ask for still
  // admits, in batches small enough that their locks stay on rows and pages, not whole tables.
  if (config.admission_isolation == "serializable") {
    Result<pg::PredicateLockSettings> settings = readiness.ReadPredicateLocks();
    if (!settings.ok()) return Fail(kExitFailure, settings.status());
    if (Status room = pg::PredicateLockRoomVerdict(*settings); !room.ok()) {
      const int cap = pg::ClaimsWithinPredicateLockRoom(
          *settings,
          std::max(scheduler_options.max_claims_per_round, scheduler_options.claims_per_round));
      scheduler_options.max_claims_per_round = cap;
      scheduler_options.claims_per_round = std::min(scheduler_options.claims_per_round, cap);
      diagnose("admission", room);
      log.Warn("admission.capped", {{"max_claims_per_round", cap},
                                    {"message",
                                     "SERIALIZABLE in smaller batches until the "
                                     "predicate-lock settings are raised (then "
                                     "restart)"}});
    }
  }

  // The database passed; the key provider is the replica's other gate.
  const Status key_verdict = (*key_provider)->Check();
  if (!key_verdict.ok()) {
    std::cout << "not ready: " << key_verdict.reason() << ": " << key_verdict.message() << "\n";
  }

  Metrics metrics;
  ControlOptions control_options;
  control_options.executor_type = "remote_worker";
  control_options.grace_ms = scheduler_options.grace_ms;
  ControlService control(*store, clock, random, control_options);
  if (Result<ProjectRecord> project = control.EnsureDefaultProject(); !project.ok()) {
    if (project.status().reason() == "admin_pool_missing") {
      return Fail(kExitFailure,
                  Unavailable("default_project_missing",
                              "the default project does not exist yet; start one replica with "
                              "--admin-database-url once to create it"));
    }
    return Fail(kExitFailure, project.status());
  }

  // Startup recovery must converge before this replica admits anything. It also ends remote
  // runs that outlived their timeout by more than a lease, whatever their worker says.
  PostgresClusterRecovery recovery_source(store->runtime_pool());
  pg::PostgresRunLeases leases(store->runtime_pool());
  ClusterRecovery recovery(recovery_source, store->runs(), clock, random, metrics, &log);
  recovery.EnforceTimeouts(leases, worker_options.lease_ttl_ms);
  // Leases carry the sealed versions of their plans' secrets, looked up as the runtime role.
  worker_options.secrets = &store->secrets();
  PostgresLogSource logs(store->runtime_pool());
  worker_options.logs = &logs;
  worker_options.approvals = &store->approvals();
  worker_options.definitions = &store->definitions();
  worker_options.projects = &store->projects();
  worker_options.event_log = &log;
  // Workers fetch the script versions their runs execute, read as the runtime role.
  worker_options.artifacts = &store->artifacts();
  for (int attempt = 1;; ++attempt) {
    Result<RecoveryReport> report = recovery.RunOnce();
    if (report.ok() && report->errors == 0) {
      std::cout << "recovery: " << report->candidates << " candidate(s), " << report->lost
                << " lost, " << report->settled << " settled, " << report->requeued << " requeued, "
                << report->stuck << " stuck\n";
      break;
    }
    Status why = report.ok() ? report->first_error : report.status();
    if (attempt >= kRecoveryStartAttempts) return Fail(kExitFailure, why);
    diagnose("recovery", why);
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }

  PostgresClusterSchedules schedules(store->runtime_pool(),
                                     config.admission_isolation == "serializable"
                                         ? AdmissionIsolation::kSerializable
                                         : AdmissionIsolation::kReadCommitted);
  ClusterScheduler scheduler(schedules, store->definitions(), random, metrics, scheduler_options);
  scheduler.SetDiagnostics(diagnose);
  metrics.Describe("ql_db_transaction_retries", "gauge",
                   "Whole transactions of the runtime pool rerun after a serialization failure, "
                   "a deadlock or a lost COMMIT reply of a read-only transaction, since start.");
  // Set after each scheduler round: true when the next round follows at once (a full page, rows
  // still due). Retention yields while it is.
  std::atomic<bool> scheduler_backlog{false};
  // Not ready means no writes (ADR-0037): while the readiness audit (the database, then the key
  // provider) fails, this replica admits no occurrence, purges nothing and sends no notification,
  // and its API refuses writes; the recovery loop and the workers' reports go on, so what already
  // runs still ends and is recorded. Other replicas take over the schedule as this one's claims
  // expire.
  std::atomic<bool> audit_passed{key_verdict.ok()};
  ConditionSleeper scheduler_sleeper;
  OutageLog scheduler_outage("scheduler", &log, clock);
  OutageLog recovery_outage("recovery", &log, clock);
  RoundLoop scheduler_loop(
      [&]() -> int64_t {
        if (!audit_passed.load()) {
          scheduler_backlog = false;
          return kNotReadyIntervalMs;
        }
        Result<RoundReport> round = scheduler.RunRound();
        scheduler_outage.Observe(round.status());
        metrics.SetGauge("ql_db_transaction_retries", "",
                         static_cast<double>(store->runtime_pool().retries()));
        if (!round.ok()) {
          diagnose("scheduler", round.status());
          scheduler_backlog = false;
          return scheduler_options.cadence_ms;
        }
        if (!round->first_error.ok()) diagnose("scheduler", round->first_error);
        Result<int64_t> next = scheduler.NextDelayMs(*round);
        scheduler_backlog = next.ok() && *next == 0;
        return next.ok() ? *next : scheduler_options.cadence_ms;
      },
      scheduler_sleeper, LoopOptions("scheduler", metrics, log));
  ConditionSleeper recovery_sleeper;
  metrics.Describe("ql_runs_waiting_for_worker", "gauge",
                   "Queued remote runs no live worker may take (pool not serving the project, "
                   "no live worker in the pool, or none with the labels), by pool");
  std::set<std::string> waiting_pools;  // the pools the gauge reported last
  RoundLoop recovery_loop(
      [&]() -> int64_t {
        // Why runs wait for a worker, for the metric (a pool whose runs found one goes to 0).
        if (Result<std::vector<WaitingCount>> waiting = store->placement().CountWaiting();
            waiting.ok()) {
          std::set<std::string> reported;
          for (const WaitingCount& w : *waiting) {
            metrics.SetGauge("ql_runs_waiting_for_worker", "pool=\"" + w.pool + "\"",
                             static_cast<double>(w.runs));
            reported.insert(w.pool);
          }
          for (const std::string& pool : waiting_pools) {
            if (!reported.contains(pool)) {
              metrics.SetGauge("ql_runs_waiting_for_worker", "pool=\"" + pool + "\"", 0);
            }
          }
          waiting_pools = std::move(reported);
        } else {
          diagnose("placement", waiting.status());
        }
        // Startup looked at every run; later cycles settle what went beyond the queue.
        Result<RecoveryReport> report = recovery.RunOnce(256, RecoveryScope::kBeyondQueue);
        recovery_outage.Observe(report.status());
        // Pending approvals past their expiry (database clock) are swept with recovery.
        Result<int> expired = control.ExpireApprovals(256);
        if (!expired.ok()) diagnose("approval expiry", expired.status());
        if (!report.ok()) {
          diagnose("recovery", report.status());
        } else if (!report->first_error.ok()) {
          diagnose("recovery", report->first_error);
        }
        return config.recovery_interval_ms;
      },
      recovery_sleeper, LoopOptions("recovery", metrics, log));
  // Retention: every replica purges; replicas skip the rows another one holds. A replica's purge
  // waits while its scheduler has a backlog.
  RetentionJobOptions retention_options;
  retention_options.interval_ms = config.retention_interval_ms;
  retention_options.scheduler_backlog = [&] { return scheduler_backlog.load(); };
  retention_options.event_log = &log;
  retention_options.purge_artifacts = [&]() {
    return PurgeScripts(*store, clock, ArtifactRetention{});
  };
  RetentionJob retention(store->retention(), clock, random, metrics, retention_options);
  ConditionSleeper retention_sleeper;
  RoundLoop retention_loop(
      [&]() -> int64_t {
        return audit_passed.load() ? retention.RunLoopRound(diagnose) : kNotReadyIntervalMs;
      },
      retention_sleeper, LoopOptions("retention", metrics, log));
  // Notifications: every replica delivers; a row is leased to one replica at a time (SKIP
  // LOCKED), and a replica that dies mid-send leaves it to another once the lease runs out.
  // The replica opens the channel's credentials (signing keys, bot tokens) right before sending.
  NotificationDelivery notify_delivery(
      *store, &sealer,
      [allow = config.notify.allow_loopback]() -> Result<std::unique_ptr<NotificationSender>> {
        notify::CurlSenderOptions options;
        options.allow_loopback = allow;
        return std::unique_ptr<NotificationSender>(std::make_unique<notify::CurlSender>(options));
      },
      clock, metrics,
      [&] {
        NotificationDeliveryOptions options =
            DeliveryOptions(config.notify, scheduler_options.owner);
        options.logs = &logs;
        return options;
      }());
  ConditionSleeper notify_sleeper;
  RoundLoop notify_loop(
      [&]() -> int64_t {
        return audit_passed.load() ? notify_delivery.RunLoopRound(diagnose) : kNotReadyIntervalMs;
      },
      notify_sleeper, LoopOptions("notifications", metrics, log));
  std::thread scheduler_thread([&] { scheduler_loop.Run(); });
  std::thread retention_thread([&] { retention_loop.Run(); });
  std::thread notify_thread([&] { notify_loop.Run(); });
  std::thread recovery_thread([&] {
    recovery_sleeper.SleepFor(config.recovery_interval_ms);
    recovery_loop.Run();
  });
  ConditionSleeper readiness_sleeper;
  std::thread readiness_thread;  // started once admission opens
  auto stop_lifecycles = [&] {
    scheduler.RequestStop();
    scheduler_loop.Stop();
    recovery_loop.Stop();
    retention_loop.Stop();
    notify_loop.Stop();
    readiness_sleeper.Stop();
    // Bounded: a round stops before its next commit; the wait covers the one in flight.
    auto joined = std::async(std::launch::async, [&] {
      scheduler_thread.join();
      recovery_thread.join();
      retention_thread.join();
      notify_thread.join();
      if (readiness_thread.joinable()) readiness_thread.join();
    });
    if (joined.wait_for(std::chrono::seconds(config.shutdown_wait_s)) !=
        std::future_status::ready) {
      std::cerr << "stop: the scheduler did not drain within " << config.shutdown_wait_s
                << " s; its claims expire and are taken over\n";
      std::_Exit(kExitFailure);
    }
  };

  // The worker listener: authentication and sessions through the worker-ingress role, leases
  // through the runtime role.
  std::unique_ptr<pg::Pool> ingress_pool;
  std::unique_ptr<pg::PostgresWorkerSessions> worker_sessions;
  std::unique_ptr<WorkerService> workers;
  std::unique_ptr<WorkerApiServer> worker_api;
  if (!worker_url->empty()) {
    Result<std::unique_ptr<pg::Pool>> pool =
        pg::Pool::Create(PoolFor(*worker_url, "qinglong-worker-ingress", config.pool_max));
    if (!pool.ok()) {
      stop_lifecycles();
      return Fail(kExitFailure, pool.status());
    }
    ingress_pool = std::move(pool).value();
    worker_sessions = std::make_unique<pg::PostgresWorkerSessions>(*ingress_pool);
    workers = std::make_unique<WorkerService>(*worker_sessions, leases, store->runs(), clock,
                                              random, metrics, worker_options);
    workers->SetGranting(key_verdict.ok());  // the readiness loop keeps it with the audit
    WorkerApiServerOptions worker_api_options;
    worker_api_options.tls = *tls;
    worker_api = std::make_unique<WorkerApiServer>(*workers, metrics, worker_api_options);
    if (Status st = worker_api->Start(worker_listen->first, worker_listen->second); !st.ok()) {
      stop_lifecycles();
      return Fail(st.code() == StatusCode::kInvalidArgument ? kExitUsage : kExitFailure, st);
    }
    std::cout << "workers: listening on " << scheme << worker_listen->first << ":"
              << worker_api->port() << "\n";
  } else {
    std::cout << "workers: no --worker-database-url; the worker listener is off\n";
  }

  TokenAuthenticator authenticator(store->governance(), SystemClock());
  ApiServerOptions api_options;
  api_options.authenticate = [&](const std::string& digest) {
    return authenticator.Authenticate(digest);
  };
  api_options.forget_token = [&](const std::string& digest) { authenticator.Forget(digest); };
  api_options.log_reader = &logs;
  api_options.tls = *tls;
  const PanelAssets panel(EmbeddedPanelFiles());
  api_options.panel = &panel;
  SecretService secret_service(*store, control.governance(), &sealer, clock);
  api_options.secrets = &secret_service;
  ScriptService script_service(*store, control.governance(), clock,
                               ArtifactLimitsOf(config.scripts));
  api_options.scripts = &script_service;
  PlacementService placement_service(store->placement(), control.governance(), clock);
  api_options.placement = &placement_service;
  NotificationService notify_service(*store, control.governance(), control, clock, random);
  api_options.notify = &notify_service;
  // People sign in with a password (Argon2id); the session is a token like any other.
  SodiumPasswordHasher password_hasher;
  SignInOptions sign_in_options;
  sign_in_options.panel_idle_ms = config.session_idle_s * 1000;
  sign_in_options.panel_session_ms = config.session_lifetime_s * 1000;
  SignInService sign_in(control.governance(), password_hasher, clock, random, sign_in_options);
  api_options.sign_in = &sign_in;
  // Single sign-on, when configured; every replica gets the same file, and a sign-in started
  // on one replica may finish on another (its state is in the store).
  std::unique_ptr<oidc::HttpProvider> oidc_provider;
  std::unique_ptr<OidcSignIn> oidc;
  if (!config.oidc_config.empty()) {
    Result<OidcConfig> oidc_config = LoadOidcConfigFile(config.oidc_config);
    if (!oidc_config.ok()) {
      stop_lifecycles();
      return Fail(kExitUsage, oidc_config.status());
    }
    oidc_provider = std::make_unique<oidc::HttpProvider>(*oidc_config, clock);
    if (Status st = oidc_provider->Check(); !st.ok()) {
      diagnose("single sign-on: the provider is not reachable yet", st);
    }
    oidc = std::make_unique<OidcSignIn>(*oidc_config, *oidc_provider, control.governance(), sign_in,
                                        clock, random,
                                        [](const std::string& key, const std::string& token) {
                                          return secrets::SealToPublicKey(key, token);
                                        });
    api_options.oidc = oidc.get();
  }
  api_options.version = kProjectVersion;
  api_options.event_log = &log;
  api_options.access_log = config.log.access_log;
  api_options.slow_request_ms = config.log.slow_request_ms;
  ApiServer api(control, metrics, api_options);
  api.SetWritable(key_verdict);  // before the first request can arrive
  if (Status st = api.Start(listen->first, listen->second); !st.ok()) {
    stop_lifecycles();
    return Fail(st.code() == StatusCode::kInvalidArgument ? kExitUsage : kExitFailure, st);
  }
  api.SetReadiness(key_verdict);
  metrics.Describe("ql_ready", "gauge",
                   "1 while the last readiness audit passed (/readyz 200), else 0.");
  metrics.SetGauge("ql_ready", "", key_verdict.ok() ? 1 : 0);
  RoundLoop readiness_loop(
      [&]() -> int64_t {
        // The database first; the key provider only when it passed (its first failing gate is
        // the code).
        Status verdict = readiness.Check();
        if (verdict.ok()) verdict = (*key_provider)->Check();
        // A change is logged (`readiness.changed`) by SetReadiness.
        api.SetReadiness(verdict);
        api.SetWritable(verdict);
        if (workers) workers->SetGranting(verdict.ok());
        audit_passed = verdict.ok();
        metrics.SetGauge("ql_ready", "", verdict.ok() ? 1 : 0);
        return verdict.ok() ? kReadinessIntervalMs : kNotReadyIntervalMs;
      },
      readiness_sleeper, LoopOptions("readiness", metrics, log));
  readiness_thread = std::thread([&] {
    readiness_sleeper.SleepFor(key_verdict.ok() ? kReadinessIntervalMs : kNotReadyIntervalMs);
    readiness_loop.Run();
  });
  std::cout << "ql-cluster replica " << scheduler_options.owner << " listening on " << scheme
            << listen->first << ":" << api.port()
            << (admin_url->empty() ? " (read-only management: no --admin-database-url)" : "")
            << "\n"
            << std::flush;

  log.Info("daemon.started", {{"daemon", "ql-cluster"},
                              {"version", kProjectVersion},
                              {"owner", scheduler_options.owner},
                              {"port", api.port()}});

  int received = 0;
  for (;;) {
    if (sigwait(&signals, &received) != 0) continue;
    if (received != SIGHUP) break;
    ReopenDaemonLog(*daemon_log);  // after a rotation renamed the file
  }
  std::cout << "stopping (signal " << received << ")\n" << std::flush;
  log.Info("daemon.stopping", {{"signal", received}});
  api.WithdrawAdmission();
  if (worker_api) worker_api->WithdrawAdmission();
  stop_lifecycles();
  api.Stop();
  if (worker_api) worker_api->Stop();
  if (ingress_pool) ingress_pool->Close();
  store.reset();  // closes both pools
  return 0;
}

}  // namespace ql::cluster
