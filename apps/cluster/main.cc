// ql-cluster: the composition root of the cluster profile (PostgreSQL). Subcommands:
//   serve         run one control-plane replica (serve.h)
//   migrate       bring the database to the code's schema, as ql3_migration
//   audit         the read-only readiness audit, as the runtime role
//   token         mint or revoke an API credential, as ql3_admin
//   worker-token  mint or revoke a worker credential, as ql3_admin
//   catalog       print the catalog of schema ql3 the auditor compares (maintenance)
//   rotate-secret-key  re-wrap every secret's data key under a new key, as ql3_admin
// Exit codes: 0 success, 1 failure (database unreachable, lock held, ...), 2 invalid input,
// 3 not ready (the audit failed; the stable code is printed).

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../config_file.h"
#include "../key_provider_flags.h"
#include "database_url.h"
#include "ql/core/clock.h"
#include "ql/core/placement.h"
#include "ql/secrets/store_sealer.h"
#include "ql/storage/postgres/pg_audit.h"
#include "ql/storage/postgres/pg_client.h"
#include "ql/storage/postgres/pg_credentials.h"
#include "ql/storage/postgres/pg_migrations.h"
#include "ql/storage/postgres/pg_store.h"
#include "ql_version.h"
#include "serve.h"

namespace ql::cluster {
namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNotReady = 3;

int Fail(const Status& status) {
  std::cerr << "error: " << status.reason() << ": " << WithConfigLine(status.message()) << "\n";
  return status.code() == StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
}

void AddUrlOptions(CLI::App* cmd, UrlSource& source, const std::string& description) {
  cmd->add_option("--database-url", source.flag_value, description);
  cmd->add_option("--database-url-file", source.file_path,
                  "read the database URL from this file instead");
}

// The backup precondition of `migrate` (ADR-0037): an operator's command, run through /bin/sh
// with QL_PENDING_MIGRATIONS (the ids, space-separated) before anything is applied, in a process
// group of its own, bounded by `timeout_s` (then SIGTERM, and SIGKILL 5 s later). Ok when it
// exits 0; otherwise Conflict `before_migrate_failed` naming how it ended.
Status RunBeforeMigrate(const std::string& command, int timeout_s,
                        const std::vector<std::string>& pending) {
  std::string ids;
  for (const std::string& id : pending) ids += (ids.empty() ? "" : " ") + id;
  const pid_t child = ::fork();
  if (child < 0) {
    return Conflict("before_migrate_failed",
                    std::string("cannot start --before-migrate: ") + std::strerror(errno));
  }
  if (child == 0) {
    ::setpgid(0, 0);
    ::setenv("QL_PENDING_MIGRATIONS", ids.c_str(), 1);
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::setpgid(child, child);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  int status = 0;
  bool timed_out = false;
  for (;;) {
    const pid_t done = ::waitpid(child, &status, WNOHANG);
    if (done == child) break;
    if (done < 0 && errno != EINTR) {
      return Conflict("before_migrate_failed", "lost track of --before-migrate");
    }
    if (!timed_out && std::chrono::steady_clock::now() >= deadline) {
      timed_out = true;
      ::kill(-child, SIGTERM);
      std::thread([child] {
        std::this_thread::sleep_for(std::chrono::seconds(5));
        ::kill(-child, SIGKILL);
      }).detach();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (timed_out) {
    return Conflict("before_migrate_failed", "--before-migrate ran longer than " +
                                                 std::to_string(timeout_s) +
                                                 " s and was stopped; nothing was migrated");
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status::Ok();
  const std::string how = WIFEXITED(status)
                              ? "exited with status " + std::to_string(WEXITSTATUS(status))
                              : "was ended by signal " + std::to_string(WTERMSIG(status));
  return Conflict("before_migrate_failed", "--before-migrate " + how + "; nothing was migrated");
}

int Migrate(const UrlSource& source, const std::string& before_migrate,
            int before_migrate_timeout_s) {
  Result<std::string> url = ResolveDatabaseUrl(source);
  if (!url.ok()) return Fail(url.status());
  if (before_migrate_timeout_s < 1 || before_migrate_timeout_s > 86'400) {
    return Fail(InvalidArgument("invalid_before_migrate_timeout",
                                "--before-migrate-timeout must be 1..86400 seconds, got " +
                                    std::to_string(before_migrate_timeout_s)));
  }
  if (!before_migrate.empty()) {
    // Run only when there is something to apply: a current schema needs no backup first.
    Result<std::vector<std::string>> pending = pg::PendingMigrationIds(*url);
    if (!pending.ok()) return Fail(pending.status());
    if (!pending->empty()) {
      std::cout << "before migrating " << pending->size()
                << " migration(s): running --before-migrate\n"
                << std::flush;
      if (Status st = RunBeforeMigrate(before_migrate, before_migrate_timeout_s, *pending);
          !st.ok()) {
        return Fail(st);
      }
    }
  }
  Result<pg::MigrateReport> report = pg::Migrate(*url, SystemClock());
  if (!report.ok()) return Fail(report.status());
  for (const std::string& id : report->applied) std::cout << "applied " << id << "\n";
  const pg::SchemaCapability& cap = pg::ExpectedCapability();
  std::cout << (report->applied.empty() ? "schema already current: " : "schema migrated: ")
            << pg::PostgresMainStream().migrations.back().id << ", " << cap.name << " v"
            << cap.version << "; grants applied\n";
  return 0;
}

// The runtime URL is required; the admin and worker-ingress URLs are checked when given.
struct AuditCommand {
  UrlSource runtime{"", "", "QL3_DATABASE_URL", "--database-url"};
  UrlSource admin{"", "", "", "--admin-database-url"};
  UrlSource worker{"", "", "", "--worker-database-url"};
  std::string admission_isolation = "serializable";
};

int Audit(const AuditCommand& command) {
  if (command.admission_isolation != "serializable" &&
      command.admission_isolation != "read-committed") {
    return Fail(InvalidArgument("invalid_admission_isolation",
                                "--admission-isolation must be serializable or read-committed"));
  }
  Result<std::string> url = ResolveDatabaseUrl(command.runtime);
  if (!url.ok()) return Fail(url.status());
  Result<std::string> admin = ResolveOptionalDatabaseUrl(command.admin);
  if (!admin.ok()) return Fail(admin.status());
  Result<std::string> worker = ResolveOptionalDatabaseUrl(command.worker);
  if (!worker.ok()) return Fail(worker.status());
  pg::ReadinessProbe probe(pg::ReadinessUrls{*url, *admin, *worker}, "qinglong-audit");
  Status status = probe.Check();
  // Without the predicate-lock room, `serve` still becomes ready and admits in smaller
  // SERIALIZABLE batches; the audit says the same (ready, capped) rather than "not ready".
  Status room;
  if (status.ok() && command.admission_isolation == "serializable") {
    Result<pg::PredicateLockSettings> settings = probe.ReadPredicateLocks();
    if (settings.ok()) {
      room = pg::PredicateLockRoomVerdict(*settings);
    } else {
      status = settings.status();
    }
  }
  if (status.ok()) {
    std::cout << "ready\n";
    if (!room.ok()) {
      std::cout << "capped: " << room.reason() << ": " << room.message()
                << "; ql-cluster serve admits in smaller batches until the settings are raised\n";
    }
    return 0;
  }
  if (status.code() != StatusCode::kCorrupt) return Fail(status);
  std::cout << "not ready: " << status.reason() << ": " << status.message() << "\n";
  return kExitNotReady;
}

int Catalog(const UrlSource& source) {
  Result<std::string> url = ResolveDatabaseUrl(source);
  if (!url.ok()) return Fail(url.status());
  Result<std::unique_ptr<pg::Connection>> conn = pg::Connection::Open(*url, {});
  if (!conn.ok()) return Fail(conn.status());
  Result<std::vector<std::string>> lines = pg::ReadSchemaCatalog(**conn);
  if (!lines.ok()) return Fail(lines.status());
  for (const std::string& line : *lines) std::cout << line << "\n";
  return 0;
}

struct CredentialCommand {
  UrlSource url{"", "", "QL3_ADMIN_DATABASE_URL", "--database-url"};
  std::string name;
  std::string pool = "default";  // worker credentials: the pool its sessions register in
};

// Mints (or revokes) a credential as the admin role. A minted token is printed once, alone on
// the last line, so scripts can take it with `tail -n 1`.
int Credential(pg::CredentialKind kind, const CredentialCommand& command, bool revoke) {
  if (Status st = pg::ValidateCredentialName(command.name); !st.ok()) return Fail(st);
  if (kind == pg::CredentialKind::kWorker) {
    if (Status st = ValidatePoolName("invalid_pool", "--pool", command.pool); !st.ok()) {
      return Fail(st);
    }
  }
  Result<std::string> url = ResolveDatabaseUrl(command.url);
  if (!url.ok()) return Fail(url.status());
  pg::PoolOptions options;
  options.url = *url;
  options.max_connections = 1;
  options.session.application_name = "qinglong-admin";
  Result<std::unique_ptr<pg::Pool>> pool = pg::Pool::Create(options);
  if (!pool.ok()) return Fail(pool.status());
  const char* what = kind == pg::CredentialKind::kApi ? "API" : "worker";
  if (kind == pg::CredentialKind::kApi) {
    if (revoke) {
      if (Status st = pg::RevokeApiTokens(**pool, command.name, SystemClock()); !st.ok()) {
        return Fail(st);
      }
      std::cout << "revoked every API token of principal " << command.name << "\n";
      return 0;
    }
    Result<pg::MintedApiToken> minted =
        pg::MintApiToken(**pool, command.name, SystemClock(), SecureRandom());
    if (!minted.ok()) return Fail(minted.status());
    std::cout << "principal " << minted->name << " (id " << minted->principal_id << ") "
              << (minted->owner ? "is the installation owner"
                                : "has no role yet (grant one with ql role grant)")
              << "; token " << minted->token_id
              << " is shown once and stored only as its SHA-256 digest:\n"
              << minted->token << "\n";
    return 0;
  }
  if (revoke) {
    if (Status st = pg::RevokeCredential(**pool, kind, command.name, SystemClock()); !st.ok()) {
      return Fail(st);
    }
    std::cout << "revoked " << what << " credential " << command.name << "\n";
    return 0;
  }
  Result<pg::MintedCredential> minted =
      pg::MintCredential(**pool, kind, command.name, SystemClock(), SecureRandom(), command.pool);
  if (!minted.ok()) return Fail(minted.status());
  std::cout << "minted " << what << " credential " << minted->name << " (id " << minted->id
            << ") for pool " << command.pool
            << "; the token is shown once and stored only as its SHA-256 digest:\n"
            << minted->token << "\n";
  if (kind == pg::CredentialKind::kWorker) {
    // Its worker would wait for runs no one can send it; say so while the operator is here.
    Result<bool> serves = pg::PoolServesAProject(**pool, command.pool);
    if (serves.ok() && !*serves) {
      std::cerr << "note: pool " << command.pool
                << " serves no project yet; its workers take no run until an installation "
                   "admin grants one (ql pool grant "
                << command.pool << " --project P)\n";
    }
  }
  return 0;
}

struct RotateCommand {
  UrlSource url{"", "", "QL3_ADMIN_DATABASE_URL", "--database-url"};
  secrets::KeyProviderConfig from;
  secrets::KeyProviderConfig to;
};

// Re-wraps every live data key from `from` to `to` as the admin role; ciphertexts are not
// touched, and a rerun after an interruption finishes the job (docs/secret-providers.md).
int RotateSecretKey(const RotateCommand& command) {
  Result<std::string> url = ResolveDatabaseUrl(command.url);
  if (!url.ok()) return Fail(url.status());
  auto from = secrets::OpenConfiguredKeyProvider(command.from, SystemClock());
  if (!from.ok()) return Fail(from.status());
  auto to = secrets::OpenConfiguredKeyProvider(command.to, SystemClock());
  if (!to.ok()) return Fail(to.status());
  if (!*from || !*to) {
    return Fail(InvalidArgument("key_provider_bad_config",
                                "give the current key (--secret-key-file or --secret-key-exec) "
                                "and the new one (--new-secret-key-file or "
                                "--new-secret-key-exec)"));
  }
  PostgresStoreOptions options;
  for (pg::PoolOptions* pool : {&options.runtime, &options.admin.emplace()}) {
    pool->url = *url;
    pool->max_connections = 1;
    pool->session.application_name = "qinglong-admin";
  }
  Result<std::unique_ptr<PostgresStore>> store = PostgresStore::Open(options);
  if (!store.ok()) return Fail(store.status());
  Result<secrets::RotationReport> report =
      secrets::RotateSecretKeys((*store)->secrets(), **from, **to, SystemClock());
  if (!report.ok()) return Fail(report.status());
  std::cout << "secret key rotated to " << (*to)->key_id() << ": " << report->rewrapped
            << " data keys re-wrapped, " << report->skipped << " already current, "
            << report->raced << " changed meanwhile; restart replicas and workers with the new "
            << "key\n";
  return 0;
}

void AddCredentialCommands(CLI::App* parent, CredentialCommand& command, bool& revoke,
                           const std::string& what, bool pooled) {
  parent->require_subcommand(1);
  for (const char* verb : {"create", "revoke"}) {
    CLI::App* sub = parent->add_subcommand(verb, std::string(verb) + " " + what);
    sub->add_option("name", command.name, "the credential's name")->required();
    AddUrlOptions(sub, command.url, "the admin role's URL (or QL3_ADMIN_DATABASE_URL)");
    if (std::string(verb) == "revoke") sub->callback([&revoke] { revoke = true; });
    if (pooled && std::string(verb) == "create") {
      sub->add_option("--pool", command.pool,
                      "the worker pool this credential's worker registers in, and no other "
                      "(default \"default\")");
    }
  }
}

int Main(int argc, char** argv) {
  CLI::App app{"ql-cluster: the QingLong control plane on PostgreSQL"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("ql-cluster ") + ql::kProjectVersion);

  ServeConfig serve_config;
  CLI::App* serve = app.add_subcommand("serve", "run one control-plane replica");
  AddUrlOptions(serve, serve_config.runtime_url, "the runtime role's URL (or QL3_DATABASE_URL)");
  serve->add_option("--admin-database-url", serve_config.admin_url.flag_value,
                    "the admin role's URL for management writes (or QL3_ADMIN_DATABASE_URL)");
  serve->add_option("--admin-database-url-file", serve_config.admin_url.file_path,
                    "read the admin URL from this file instead");
  serve->add_option("--listen", serve_config.listen, "HOST:PORT (default 127.0.0.1:5800)");
  serve->add_option("--tls-cert", serve_config.security.tls_cert,
                    "PEM certificate chain: serve HTTPS on both listeners (with --tls-key)");
  serve->add_option("--tls-key", serve_config.security.tls_key, "PEM private key of --tls-cert");
  serve->add_option("--tls-client-ca", serve_config.security.tls_client_ca,
                    "PEM CAs: require a client certificate one of them signed");
  serve->add_flag("--allow-insecure-http", serve_config.security.allow_insecure_http,
                  "Allow plain HTTP on a non-loopback --listen / --worker-listen address");
  serve->add_option("--session-idle", serve_config.session_idle_s,
                    "Seconds a panel session may go unused before it ends (default 1800)")
      ->check(CLI::Range(int64_t{10}, int64_t{7} * 24 * 3600));
  serve->add_option("--session-lifetime", serve_config.session_lifetime_s,
                    "Seconds a panel session lasts at most (default 43200)")
      ->check(CLI::Range(int64_t{10}, int64_t{30} * 24 * 3600));
  serve->add_option("--oidc-config", serve_config.oidc_config,
                    "Single sign-on: an OpenID Connect provider's JSON configuration "
                    "(docs/sign-in.md)");
  serve->add_option("--owner", serve_config.owner,
                    "claim owner name (default host:pid:random; must be unique per process)");
  serve->add_option("--claims-per-round", serve_config.claims_per_round,
                    "schedule rows claimed per round, 1..256 (default 16)");
  serve->add_option("--max-claims-per-round", serve_config.max_claims_per_round,
                    "while rounds come back full the batch doubles up to this, "
                    "--claims-per-round..256 (default 256)");
  serve->add_option("--lease-ms", serve_config.lease_ms,
                    "claim lease, 1000..60000 ms (default 30000)");
  serve->add_option("--cadence-ms", serve_config.cadence_ms,
                    "longest idle sleep, 100..60000 ms (default 1000)");
  serve->add_option("--grace-ms", serve_config.grace_ms,
                    "misfire grace, 0..300000 ms (default 30000)");
  serve->add_option("--recovery-interval-ms", serve_config.recovery_interval_ms,
                    "recovery cycle period, 1000..600000 ms (default 5000)");
  AddNotifyFlags(*serve, serve_config.notify);
  AddArtifactFlags(*serve, serve_config.scripts);
  AddLogFlags(*serve, serve_config.log);
  serve->add_option("--retention-interval-ms", serve_config.retention_interval_ms,
                    "pause after a retention round that found nothing more to purge, "
                    "100..86400000 ms (default 60000)");
  serve->add_option("--pool-max", serve_config.pool_max, "runtime pool size, 2..256 (default 8)");
  serve->add_option("--admission-isolation", serve_config.admission_isolation,
                    "serializable (default) or read-committed (explicit row locks and fences)");
  serve->add_option("--worker-database-url", serve_config.worker_url.flag_value,
                    "the worker-ingress role's URL (or QL3_WORKER_DATABASE_URL); enables the "
                    "worker listener");
  serve->add_option("--worker-database-url-file", serve_config.worker_url.file_path,
                    "a file holding the worker-ingress role's URL");
  serve->add_option("--worker-listen", serve_config.worker_listen,
                    "HOST:PORT of the worker listener (default 127.0.0.1:5801)");
  serve->add_option("--worker-lease-ms", serve_config.worker_lease_ms,
                    "run lease of a worker, 1000..600000 (default 30000)");
  serve->add_option("--worker-session-ttl-ms", serve_config.worker_session_ttl_ms,
                    "worker session lifetime without heartbeat, 1000..600000 (default 30000)");
  serve->add_option("--worker-heartbeat-ms", serve_config.worker_heartbeat_ms,
                    "heartbeat interval told to workers (default 5000)");
  serve->add_option("--worker-log-cap-bytes", serve_config.worker_log_cap_bytes,
                    "output kept per remote attempt, head and tail (default 8388608)");
  serve->add_option("--worker-run-log-cap-bytes", serve_config.worker_run_log_cap_bytes,
                    "output kept over all attempts of a remote run; 0: none (default 33554432)");
  serve->add_option("--shutdown-wait", serve_config.shutdown_wait_s,
                    "seconds to drain the scheduler on SIGTERM, 1..600 (default 10)");

  UrlSource migrate_url{"", "", "QL3_MIGRATION_DATABASE_URL", "--database-url"};
  CLI::App* migrate = app.add_subcommand(
      "migrate", "apply the postgresql-main migrations and grants (as ql3_migration)");
  AddUrlOptions(migrate, migrate_url, "the migration role's URL (or QL3_MIGRATION_DATABASE_URL)");
  std::string before_migrate;
  int before_migrate_timeout_s = 3600;
  migrate->add_option("--before-migrate", before_migrate,
                      "a command (run by /bin/sh) that must succeed before pending migrations "
                      "are applied, e.g. a pg_dump; QL_PENDING_MIGRATIONS names them");
  migrate->add_option("--before-migrate-timeout", before_migrate_timeout_s,
                      "seconds --before-migrate may run (default 3600)");

  AuditCommand audit_command;
  CLI::App* audit =
      app.add_subcommand("audit",
                         "check readiness read-only, as the runtime role (exit 3 when "
                         "not ready)");
  AddUrlOptions(audit, audit_command.runtime, "the runtime role's URL (or QL3_DATABASE_URL)");
  audit->add_option("--admin-database-url", audit_command.admin.flag_value,
                    "also check that this URL logs in as ql3_admin");
  audit->add_option("--worker-database-url", audit_command.worker.flag_value,
                    "also check that this URL logs in as ql3_worker_ingress");
  audit->add_option("--admission-isolation", audit_command.admission_isolation,
                    "serializable (default: also checks the server's predicate-lock settings) or "
                    "read-committed");

  UrlSource catalog_url{"", "", "QL3_DATABASE_URL", "--database-url"};
  CLI::App* catalog = app.add_subcommand(
      "catalog", "print the catalog of schema ql3 that the audit compares (maintenance)");
  AddUrlOptions(catalog, catalog_url, "any role's URL (or QL3_DATABASE_URL)");

  CredentialCommand api_token, worker_token;
  bool api_revoke = false, worker_revoke = false;
  CLI::App* token = app.add_subcommand("token", "API credentials (as ql3_admin)");
  AddCredentialCommands(token, api_token, api_revoke, "an API credential", false);
  CLI::App* worker = app.add_subcommand("worker-token", "worker credentials (as ql3_admin)");
  AddCredentialCommands(worker, worker_token, worker_revoke, "a worker credential", true);

  RotateCommand rotate_command;
  CLI::App* rotate = app.add_subcommand(
      "rotate-secret-key",
      "re-wrap every secret's data key from one key provider to another (as ql3_admin)");
  AddUrlOptions(rotate, rotate_command.url, "the admin role's URL (or QL3_ADMIN_DATABASE_URL)");
  AddKeyProviderFlags(*rotate, rotate_command.from, "", "the current key");
  AddKeyProviderFlags(*rotate, rotate_command.to, "new-", "the key to rotate to");
  AddKeyProviderFlags(*serve, serve_config.secret_key, "",
                      "seals secret values written through the API");

  // One file (/etc/qinglong/ql-cluster.conf) for serve and audit: audit skips serve's flags it
  // does not take.
  std::string serve_config_file, audit_config_file;
  AddConfigFlag(*serve, serve_config_file);
  AddConfigFlag(*audit, audit_config_file);
  ConfigTarget config_target;
  const std::string verb = argc > 1 ? argv[1] : "";
  if (verb == "serve" || verb == "audit") {
    config_target.command = verb == "serve" ? serve : audit;
    config_target.also_known = verb == "serve" ? nullptr : serve;
    config_target.first_arg = 2;
    config_target.usage = "ql-cluster " + verb;
    config_target.groups = {{"database-url", "database-url-file"},
                            {"admin-database-url", "admin-database-url-file"},
                            {"worker-database-url", "worker-database-url-file"}};
    config_target.environment = {{"database-url", "QL3_DATABASE_URL"},
                                 {"admin-database-url", "QL3_ADMIN_DATABASE_URL"},
                                 {"worker-database-url", "QL3_WORKER_DATABASE_URL"}};
  }
  if (int exit = ParseWithConfigFile(app, argc, argv, config_target, kExitUsage); exit >= 0) {
    return exit;
  }
  if (*serve) return Serve(serve_config);
  if (*token) return Credential(pg::CredentialKind::kApi, api_token, api_revoke);
  if (*worker) return Credential(pg::CredentialKind::kWorker, worker_token, worker_revoke);
  if (*migrate) return Migrate(migrate_url, before_migrate, before_migrate_timeout_s);
  if (*audit) return Audit(audit_command);
  if (*catalog) return Catalog(catalog_url);
  if (*rotate) return RotateSecretKey(rotate_command);
  return kExitUsage;
}

}  // namespace
}  // namespace ql::cluster

int main(int argc, char** argv) { return ql::cluster::Main(argc, argv); }
