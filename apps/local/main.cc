// ql-local: the composition root of the edge and standalone profiles. It is the only place that
// picks adapters (SQLite, POSIX supervisor, HTTP) and owns threads and sleeps.

#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>

#include "../artifact_flags.h"
#include "../config_file.h"
#include "../isolation_flags.h"
#include "../log_flags.h"
#include "../notify_flags.h"
#include "../oidc_config_file.h"
#include "backup.h"
#include "notify_loader.h"
#include "oidc_loader.h"
#include "ql/core/clock.h"
#include "ql/core/digest.h"
#include "ql/core/governance_ports.h"
#include "ql/core/ids.h"
#include "ql/engine/control_service.h"
#include "ql/engine/local_dispatcher.h"
#include "ql/engine/local_scheduler.h"
#include "ql/engine/log_reader.h"
#include "ql/engine/metrics.h"
#include "ql/engine/notification_delivery.h"
#include "ql/engine/notification_service.h"
#include "ql/engine/oidc_sign_in.h"
#include "ql/engine/outage_log.h"
#include "ql/engine/retention_job.h"
#include "ql/engine/round_loop.h"
#include "ql/engine/script_retention.h"
#include "ql/engine/sign_in_service.h"
#include "ql/engine/token_authenticator.h"
#include "ql/exec/executor.h"
#include "ql/exec/purged_files.h"
#include "ql/exec/supervision_runner.h"
#include "ql/http/api_server.h"
#include "ql/http/listen_address.h"
#include "ql/http/panel_assets.h"
#include "ql/panel/embedded_panel.h"
#include "ql/secrets/file_key_provider.h"
#include "ql/secrets/password_hasher.h"
#include "ql/secrets/sealed_box.h"
#include "ql/secrets/secret_bytes.h"
#include "ql/secrets/store_sealer.h"
#include "ql/storage/sqlite/sqlite_store.h"
#include "ql_version.h"
#include "resident_pages.h"

namespace fs = std::filesystem;

namespace ql::local {
namespace {

constexpr int kExitUsage = 2;
constexpr int kExitFailure = 1;
constexpr int64_t kDispatcherTickMs = 200;
// How often pending approval requests are checked for expiry.
constexpr int64_t kApprovalSweepMs = 5'000;

struct ServeConfig {
  std::string data_dir = "./data";
  std::string profile;
  std::string listen = "127.0.0.1:5700";
  ListenSecurityFlags security;
  int shutdown_wait_s = 30;
  int retention_interval_s = 60;
  // The panel's sessions: how long one may go unused, and how long it lasts at most.
  int64_t session_idle_s = 30 * 60;
  int64_t session_lifetime_s = 12 * 3600;
  std::string oidc_config;  // single sign-on configuration file (empty: none)
  IsolationFlags isolation;
  NotifyFlags notify;
  ArtifactFlags scripts;
  LogFlags log;
};

int Fail(int code, const Status& status) {
  std::cerr << "error: " << status.reason() << ": " << ql::WithConfigLine(status.message()) << "\n";
  return code;
}

// One of the daemon's loops: a round that throws is counted, written to the daemon log and the
// loop goes on.
RoundLoopOptions LoopOptions(const char* name, Metrics& metrics, EventLog& log) {
  RoundLoopOptions options;
  options.name = name;
  options.metrics = &metrics;
  options.diagnostics = [&log](std::string_view component, const Status& status) {
    log.Warn("diagnostic",
             {{"component", component}, {"code", status.reason()}, {"message", status.message()}});
  };
  return options;
}

// Reads the owner token, creating it (0600, 256 random bits) on first start.
Result<std::string> EnsureOwnerToken(const fs::path& path, bool& created) {
  created = false;
  std::ifstream in(path);
  if (in) {
    std::string token;
    std::getline(in, token);
    if (token.size() < 32) {
      return Corrupt("owner_token_invalid", "owner token file " + path.string() + " is damaged");
    }
    return token;
  }
  const std::string token = RandomHex(SecureRandom(), 32);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    return Internal("owner_token_io", "cannot create " + path.string() + ": " + strerror(errno));
  }
  const std::string line = token + "\n";
  const bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()) &&
                  ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) return Internal("owner_token_io", "cannot write " + path.string());
  created = true;
  return token;
}

// First start, or while the owner has no password: a one-time set-up code in `path` (0600),
// valid for 24 hours, with which the owner chooses a password. An unexpired code whose file is
// still there is kept; once the owner has a password the file is removed. Returns the code, or
// "" when none is needed.
Result<std::string> EnsureSetupCode(SignInService& sign_in, const fs::path& path) {
  std::error_code ec;
  std::ifstream in(path);
  std::string kept;
  if (in) std::getline(in, kept);
  in.close();
  QL_ASSIGN_OR_RETURN(const bool pending, sign_in.SetupPending());
  if (pending && !kept.empty() && sign_in.IsSetupCode(kept)) return kept;
  QL_ASSIGN_OR_RETURN(std::string code, sign_in.IssueSetupCode(24LL * 3600 * 1000));
  if (code.empty()) {
    fs::remove(path, ec);
    return code;
  }
  const fs::path temporary = path.string() + ".tmp";
  fs::remove(temporary, ec);
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    return Internal("setup_code_io",
                    "cannot create " + temporary.string() + ": " + strerror(errno));
  }
  const std::string line = code + "\n";
  const bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()) &&
                  ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || std::rename(temporary.c_str(), path.c_str()) != 0) {
    return Internal("setup_code_io", "cannot write " + path.string());
  }
  return code;
}

// Describes the daemon that holds the lock on `data`, from its server.json (or, while it is still
// starting, the pid it wrote into the lock file).
std::string DescribeHolder(const fs::path& data, const fs::path& lock_path) {
  std::ifstream server_file(data / "server.json");
  const nlohmann::json server = nlohmann::json::parse(server_file, nullptr, false);
  if (server.is_object() && server.value("server", "") != "") {
    return "pid " + std::to_string(server.value("pid", 0)) + ", serving " +
           server.value("server", "");
  }
  std::ifstream lock_file(lock_path);
  std::string pid;
  std::getline(lock_file, pid);
  return pid.empty() ? std::string("still starting") : "pid " + pid + ", still starting";
}

// Takes the exclusive lock of the data directory (`<data>/ql-local.lock`, flock) for the life of
// the process and writes this pid into it. Conflict `data_dir_in_use` naming the holder when
// another process has it; Internal `data_dir_io` when the file cannot be opened or locked.
Status LockDataDir(const fs::path& data) {
  const fs::path path = data / "ql-local.lock";
  // O_CLOEXEC: supervisors, which outlive the daemon, must not inherit (and keep) the lock.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return Internal("data_dir_io", "cannot open " + path.string() + ": " + strerror(errno));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK) {
      return Conflict("data_dir_in_use", "another ql-local (" + DescribeHolder(data, path) +
                                             ") uses the data directory " + data.string());
    }
    return Internal("data_dir_io", "cannot lock " + path.string() + ": " + strerror(err));
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    std::cerr << "warning: cannot record the pid in " << path.string() << "\n";
  }
  return Status::Ok();  // the descriptor stays open (and locked) until the process exits
}

Status WriteServerFile(const fs::path& path, const std::string& url) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << "{\"server\":\"" << url << "\",\"pid\":" << ::getpid() << "}\n";
    if (!out) return Internal("server_file_io", "cannot write " + tmp.string());
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return Internal("server_file_io", "cannot write " + path.string() + ": " + ec.message());
  return Status::Ok();
}

int Serve(const ServeConfig& config, const std::string& self_exe) {
  Clock& clock = SystemClock();
  RandomSource& random = SecureRandom();

  std::string profile = config.profile;
  if (profile.empty()) {
    const char* env = std::getenv("QL_DEPLOYMENT_PROFILE");
    profile = env != nullptr && *env != '\0' ? env : "standalone";
  }
  Result<LocalSchedulerOptions> scheduler_options = LocalSchedulerOptionsForProfile(profile);
  if (!scheduler_options.ok()) return Fail(kExitUsage, scheduler_options.status());
  Result<LocalDispatcherOptions> dispatcher_options = LocalDispatcherOptionsForProfile(profile);
  if (!dispatcher_options.ok()) return Fail(kExitUsage, dispatcher_options.status());
  if (profile == "edge") {
    // One malloc arena for every thread: the edge daemon's few threads allocate little, and
    // each extra arena keeps pages of its own.
    ::mallopt(M_ARENA_MAX, 1);
  }
  Result<std::pair<std::string, int>> listen = ParseListenAddress(config.listen);
  if (!listen.ok()) return Fail(kExitUsage, listen.status());
  Result<std::optional<ListenerTls>> tls =
      DecideListenSecurity(listen->first, config.security, "--listen");
  if (!tls.ok()) return Fail(kExitUsage, tls.status());
  if (config.retention_interval_s < 1 || config.retention_interval_s > 86'400) {
    return Fail(kExitUsage, InvalidArgument("invalid_retention_interval",
                                            "--retention-interval must be 1..86400 seconds"));
  }
  if (config.shutdown_wait_s < 0 || config.shutdown_wait_s > 3600) {
    return Fail(kExitUsage, InvalidArgument("invalid_shutdown_wait",
                                            "--shutdown-wait must be 0..3600 seconds"));
  }
  Result<DaemonLog> daemon_log = OpenDaemonLog(config.log, clock);
  if (!daemon_log.ok()) return Fail(kExitUsage, daemon_log.status());
  EventLog& log = *daemon_log->log;

  // Signals are taken synchronously by the main thread; every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);  // reopens the --log-file
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  const fs::path data = fs::absolute(config.data_dir).lexically_normal();
  std::error_code ec;
  fs::create_directories(data, ec);
  if (ec) {
    return Fail(kExitFailure,
                Internal("data_dir_io", "cannot create " + data.string() + ": " + ec.message()));
  }
  // One daemon per data directory: nothing else in it is touched before the lock is held.
  if (Status st = LockDataDir(data); !st.ok()) {
    return Fail(st.code() == StatusCode::kConflict ? kExitUsage : kExitFailure, st);
  }
  // server.json belongs to the lock holder; one left by a holder that was killed is stale.
  fs::remove(data / "server.json", ec);
  for (const fs::path& dir : {data / "db", data / "log", data / "run"}) {
    fs::create_directories(dir, ec);
    if (ec) {
      return Fail(kExitFailure,
                  Internal("data_dir_io", "cannot create " + dir.string() + ": " + ec.message()));
    }
  }
  fs::permissions(data, fs::perms::owner_all, fs::perm_options::replace, ec);

  bool token_created = false;
  Result<std::string> token = EnsureOwnerToken(data / "owner.token", token_created);
  if (!token.ok()) return Fail(kExitFailure, token.status());

  // The key that wraps secret values' data keys; a damaged or readable-by-others key file stops
  // the start rather than being replaced, since replacing it would lose every secret.
  if (Status st = secrets::InitializeSecrets(); !st.ok()) return Fail(kExitFailure, st);
  bool key_created = false;
  Result<std::unique_ptr<secrets::FileKeyProvider>> secret_key =
      secrets::FileKeyProvider::OpenOrCreate((data / "secret.key").string(), &key_created);
  if (!secret_key.ok()) return Fail(kExitFailure, secret_key.status());

  SqliteOptions store_options;
  store_options.path = (data / "db" / "qinglong.db").string();
  store_options.profile = profile;
  Result<std::unique_ptr<SqliteStore>> store = SqliteStore::Open(store_options, clock);
  if (!store.ok()) return Fail(kExitFailure, store.status());

  Metrics metrics;
  ControlOptions control_options;
  control_options.executor_type = "local_process";
  ControlService control(**store, clock, random, control_options);
  if (Result<ProjectRecord> project = control.EnsureDefaultProject(); !project.ok()) {
    return Fail(kExitFailure, project.status());
  }
  // The owner token belongs to the installation owner, bootstrapped on first start.
  {
    const int64_t now = clock.NowMs();
    BootstrapCommand bootstrap;
    bootstrap.principal_id = NewUuidV7(now, random);
    bootstrap.token_id = NewUuidV7(now, random);
    bootstrap.token_digest = Sha256Hex(*token);
    bootstrap.mutation_id = "bootstrap:" + bootstrap.principal_id;
    bootstrap.now_ms = now;
    Result<BootstrapResult> booted = (*store)->governance().Bootstrap(bootstrap);
    if (!booted.ok() && booted.status().reason() != "already_bootstrapped") {
      return Fail(kExitFailure, booted.status());
    }
  }
  TokenAuthenticator authenticator((*store)->governance(), clock);

  // Reconcile what an earlier incarnation left running before anything new is scheduled.
  // Commands without a working directory start in data/work/<task_id>, never beside
  // owner.token.
  exec::SupervisionRunner runner({self_exe, "supervise"}, (data / "run").string(),
                                 (data / "work").string());
  // Commands never see the data directory (database, owner.token, secret.key, logs, other
  // tasks' directories) or the TLS files; as root each project's commands get a uid of their own.
  Result<exec::RunnerIsolation> isolation =
      BuildIsolation(config.isolation, profile, (data / "command-uids").string(),
                     {data.string(), config.security.tls_key, config.security.tls_cert,
                      config.security.tls_client_ca});
  if (!isolation.ok()) {
    return Fail(
        isolation.status().code() == StatusCode::kInvalidArgument ? kExitUsage : kExitFailure,
        isolation.status());
  }
  const exec::IsolationReport isolation_report = isolation->report;
  runner.SetIsolation(std::move(isolation).value());
  // Secret values are opened only here, right before a command starts, and masked in its log.
  secrets::EnvelopeSealer sealer(**secret_key);
  SecretService secret_service(**store, control.governance(), &sealer, clock);
  LogReader log_reader((data / "log").string());
  LocalDispatcherOptions dopts = *dispatcher_options;
  dopts.log_root = (data / "log").string();
  dopts.logs = &log_reader;
  dopts.secrets = &(*store)->secrets();
  dopts.sealer = &sealer;
  dopts.projects = &(*store)->projects();
  dopts.event_log = &log;
  // Script versions run from a verified, read-only cache in the data directory (hidden from
  // commands; each attempt sees only its own version, bound back read-only).
  std::error_code canonical_error;
  ScriptCache script_cache(fs::weakly_canonical(data / "scripts", canonical_error).string(),
                           int64_t{1} << 30);
  dopts.script_cache = &script_cache;
  dopts.artifacts = &(*store)->artifacts();
  LocalDispatcher dispatcher((*store)->runs(), (*store)->definitions(), runner, clock, random,
                             metrics, dopts);
  if (Status st = dispatcher.Recover(); !st.ok()) return Fail(kExitFailure, st);

  LocalScheduler scheduler((*store)->schedules(), (*store)->definitions(), clock, random, metrics,
                           *scheduler_options);
  ConditionSleeper scheduler_sleeper;
  ConditionSleeper dispatcher_sleeper;
  scheduler.SetOnAdmitted([&] { dispatcher_sleeper.Wake(); });
  OutageLog scheduler_outage("scheduler", &log, clock);
  RoundLoop scheduler_loop(
      [&]() -> int64_t {
        Result<RoundReport> round = scheduler.RunRound();
        scheduler_outage.Observe(round.status());
        if (!round.ok()) {
          log.Warn("diagnostic", {{"component", "scheduler"},
                                  {"code", round.status().reason()},
                                  {"message", round.status().message()}});
          return scheduler_options->cadence_ms;
        }
        Result<int64_t> next = scheduler.NextDelayMs(*round);
        return next.ok() ? *next : scheduler_options->cadence_ms;
      },
      scheduler_sleeper, LoopOptions("scheduler", metrics, log));
  std::atomic<bool> launching{true};
  int64_t next_expiry_ms = 0;
  RoundLoop dispatcher_loop(
      [&]() -> int64_t {
        Result<TickReport> tick = dispatcher.Tick(launching.load());
        if (!tick.ok()) {
          log.Warn("diagnostic", {{"component", "dispatcher"},
                                  {"code", tick.status().reason()},
                                  {"message", tick.status().message()}});
        }
        // Pending approvals past their expiry are swept every few seconds.
        if (clock.NowMs() >= next_expiry_ms) {
          next_expiry_ms = clock.NowMs() + kApprovalSweepMs;
          Result<int> expired = control.ExpireApprovals(256);
          if (!expired.ok()) {
            log.Warn("diagnostic", {{"component", "approvals"},
                                    {"code", expired.status().reason()},
                                    {"message", expired.status().message()}});
          }
        }
        return kDispatcherTickMs;
      },
      dispatcher_sleeper, LoopOptions("dispatcher", metrics, log));
  // Retention: purged runs take their log files and attempt directories with them.
  RetentionJobOptions retention_options;
  retention_options.interval_ms = int64_t{config.retention_interval_s} * 1000;
  retention_options.on_purged = [&](const PurgeResult& purged) {
    const exec::PurgedFiles files =
        exec::RemovePurgedFiles(purged, (data / "log").string(), (data / "run").string());
    if (files.errors > 0) {
      log.Warn("retention.files_left", {{"files", files.errors}});
    }
  };
  retention_options.event_log = &log;
  retention_options.purge_artifacts = [&]() {
    return PurgeScripts(**store, clock, ArtifactRetention{});
  };
  RetentionJob retention((*store)->retention(), clock, random, metrics, retention_options);
  // Notifications: the outbox rows commit with the run changes; this loop sends them. The
  // sender module is opened on the first due row.
  NotificationService notify_service(**store, control.governance(), control, clock, random);
  NotificationDeliveryOptions notify_options =
      DeliveryOptions(config.notify, "ql-local:" + RandomHex(random, 8));
  notify_options.logs = &log_reader;
  NotificationDelivery notify_delivery(
      **store, &sealer,
      [allow = config.notify.allow_loopback] { return LoadNotificationSender(allow); }, clock,
      metrics, notify_options);
  ConditionSleeper notify_sleeper;
  const RoundLoopOptions notify_loop_options = LoopOptions("notifications", metrics, log);
  RoundLoop notify_loop(
      [&] { return notify_delivery.RunLoopRound(notify_loop_options.diagnostics); }, notify_sleeper,
      notify_loop_options);
  ConditionSleeper retention_sleeper;
  const RoundLoopOptions retention_loop_options = LoopOptions("retention", metrics, log);
  RoundLoop retention_loop(
      [&] { return retention.RunLoopRound(retention_loop_options.diagnostics); }, retention_sleeper,
      retention_loop_options);
  std::thread scheduler_thread([&] { scheduler_loop.Run(); });
  std::thread dispatcher_thread([&] { dispatcher_loop.Run(); });
  std::thread retention_thread([&] { retention_loop.Run(); });
  std::thread notify_thread([&] { notify_loop.Run(); });
  // Ends the loops above, for a start that fails from here on.
  auto stop_loops = [&] {
    scheduler_loop.Stop();
    dispatcher_loop.Stop();
    retention_loop.Stop();
    notify_loop.Stop();
    scheduler_thread.join();
    dispatcher_thread.join();
    retention_thread.join();
    notify_thread.join();
  };

  ApiServerOptions api_options;
  api_options.authenticate = [&](const std::string& digest) {
    return authenticator.Authenticate(digest);
  };
  api_options.forget_token = [&](const std::string& digest) { authenticator.Forget(digest); };
  api_options.log_reader = &log_reader;
  api_options.tls = *tls;
  const PanelAssets panel(EmbeddedPanelFiles());
  api_options.panel = &panel;
  api_options.secrets = &secret_service;
  ScriptService script_service(**store, control.governance(), clock,
                               ArtifactLimitsOf(config.scripts));
  api_options.scripts = &script_service;
  api_options.notify = &notify_service;
  api_options.event_log = &log;
  api_options.access_log = config.log.access_log;
  api_options.slow_request_ms = config.log.slow_request_ms;
  // People sign in with a password (Argon2id); the session is a token like any other.
  SodiumPasswordHasher password_hasher;
  SignInOptions sign_in_options;
  sign_in_options.panel_idle_ms = config.session_idle_s * 1000;
  sign_in_options.panel_session_ms = config.session_lifetime_s * 1000;
  // The set-up code is single use: once the owner has chosen a password, its file goes.
  sign_in_options.on_setup_complete = [setup_file = data / "setup.code"] {
    std::error_code ignored;
    fs::remove(setup_file, ignored);
  };
  SignInService sign_in(control.governance(), password_hasher, clock, random, sign_in_options);
  api_options.sign_in = &sign_in;
  Result<std::string> setup_code = EnsureSetupCode(sign_in, data / "setup.code");
  if (!setup_code.ok()) {
    stop_loops();
    return Fail(kExitFailure, setup_code.status());
  }
  // Single sign-on, when configured: the provider client is loaded from its module now.
  std::unique_ptr<OidcProvider> oidc_provider;
  std::unique_ptr<OidcSignIn> oidc;
  if (!config.oidc_config.empty()) {
    Result<OidcConfig> oidc_config = LoadOidcConfigFile(config.oidc_config);
    Result<std::unique_ptr<OidcProvider>> provider =
        oidc_config.ok() ? LoadOidcProvider(*oidc_config, clock)
                         : Result<std::unique_ptr<OidcProvider>>(oidc_config.status());
    if (!provider.ok()) {
      stop_loops();
      return Fail(
          provider.status().code() == StatusCode::kInvalidArgument ? kExitUsage : kExitFailure,
          provider.status());
    }
    oidc_provider = std::move(provider).value();
    oidc = std::make_unique<OidcSignIn>(*oidc_config, *oidc_provider, control.governance(), sign_in,
                                        clock, random,
                                        [](const std::string& key, const std::string& token) {
                                          return secrets::SealToPublicKey(key, token);
                                        });
    api_options.oidc = oidc.get();
  }
  api_options.version = kProjectVersion;
  api_options.isolation_level = isolation_report.level;
  api_options.isolation_detail = isolation_report.Summary();
  metrics.SetGauge("ql_command_isolation_level", "level=\"" + isolation_report.level + "\"",
                   isolation_report.Rank());
  ApiServer api(control, metrics, api_options);
  if (Status st = api.Start(listen->first, listen->second); !st.ok()) {
    stop_loops();
    return Fail(st.code() == StatusCode::kInvalidArgument ? kExitUsage : kExitFailure, st);
  }
  const std::string url = std::string(tls->has_value() ? "https://" : "http://") + listen->first +
                          ":" + std::to_string(api.port());
  if (Status st = WriteServerFile(data / "server.json", url); !st.ok()) {
    std::cerr << "warning: " << st.message() << "\n";
  }
  // Start-up (migrations, recovery) leaves freed heap behind: give it back to the system, so an
  // idle edge daemon holds only what it uses.
  ::malloc_trim(0);
  if (profile == "edge") {
    // Likewise the code start-up ran: the idle daemon's resident set is what it runs from now on.
    ql::local::ReleaseReadOnlyFilePages();
  }
  std::cout << "ql-local " << profile << " listening on " << url << "\n"
            << "data directory: " << data.string() << "\n"
            << (panel.size() > 0 ? "web panel: " + url + "/\n" : std::string())
            << "owner API token: " << (data / "owner.token").string()
            << (token_created ? " (created)" : "") << "\n"
            << (setup_code->empty()
                    ? std::string()
                    : "set-up code: " + (data / "setup.code").string() +
                          " (single use, 24 h): choose the owner's password in the web panel "
                          "or with ql setup --code CODE\n")
            << "secret key: " << (data / "secret.key").string() << " (" << (*secret_key)->key_id()
            << (key_created ? ", created" : "") << ")\n"
            << isolation_report.Summary() << "\n"
            << (oidc != nullptr ? "single sign-on: " + oidc->name() + "\n" : std::string())
            << std::flush;
  log.Info(
      "daemon.started",
      {{"daemon", "ql-local"}, {"version", kProjectVersion}, {"profile", profile}, {"url", url}});
  // Ready only once the banner is out, so whoever waits for /readyz can read it.
  api.SetReady(true);

  int received = 0;
  for (;;) {
    if (sigwait(&signals, &received) != 0) continue;
    if (received != SIGHUP) break;
    ReopenDaemonLog(*daemon_log);  // after a rotation renamed the file
  }
  std::cout << "stopping (signal " << received << ")\n" << std::flush;
  log.Info("daemon.stopping", {{"signal", received}});

  // Stop order: withdraw admission, stop the scheduler, let running commands finish within the
  // bound (they keep running under their supervisors past it and are adopted on the next start),
  // stop HTTP, close storage.
  api.WithdrawAdmission();
  scheduler_loop.Stop();
  scheduler_thread.join();
  retention_loop.Stop();
  retention_thread.join();
  launching = false;
  dispatcher_sleeper.Wake();
  const int64_t deadline = clock.MonotonicMs() + int64_t{config.shutdown_wait_s} * 1000;
  while (dispatcher.active() > 0 && clock.MonotonicMs() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  dispatcher_loop.Stop();
  dispatcher_thread.join();
  // Notifications of the runs that just ended are sent on the next start when not now.
  notify_loop.Stop();
  notify_thread.join();
  if (dispatcher.active() > 0) {
    std::cout << dispatcher.active()
              << " command(s) still running; they will be reconciled on the next start\n";
    log.Info("daemon.left_running", {{"attempts", dispatcher.active()}});
  }
  api.Stop();
  fs::remove(data / "server.json", ec);
  return 0;
}

}  // namespace
// Re-wraps every stored data key under a new key file (docs/secret-providers.md, Rotation):
// data/secret.key.next is created (or reused by a rerun), every data key is re-wrapped to it,
// the old key is kept as data/secret.key.old and the new one atomically replaces
// data/secret.key. Needs the daemon stopped (it holds the data directory's lock). A rerun after
// an interruption finishes the job.
int RotateSecretKey(const std::string& data_dir) {
  const fs::path data = fs::absolute(data_dir).lexically_normal();
  const fs::path current = data / "secret.key";
  const fs::path next = data / "secret.key.next";
  const fs::path old = data / "secret.key.old";
  if (Status st = LockDataDir(data); !st.ok()) {
    return Fail(st.code() == StatusCode::kConflict ? kExitUsage : kExitFailure, st);
  }
  if (Status st = secrets::InitializeSecrets(); !st.ok()) return Fail(kExitFailure, st);
  auto from = secrets::FileKeyProvider::Open(current.string());
  if (!from.ok()) return Fail(kExitFailure, from.status());
  auto to = secrets::FileKeyProvider::OpenOrCreate(next.string());
  if (!to.ok()) return Fail(kExitFailure, to.status());
  SqliteOptions store_options;
  store_options.path = (data / "db" / "qinglong.db").string();
  auto store = SqliteStore::Open(store_options, SystemClock());
  if (!store.ok()) return Fail(kExitFailure, store.status());
  Result<secrets::RotationReport> report =
      secrets::RotateSecretKeys((*store)->secrets(), **from, **to, SystemClock());
  if (!report.ok()) return Fail(kExitFailure, report.status());
  // The old key stays readable beside the new one until the operator removes it; the swap is
  // one rename, so data/secret.key is always a complete key.
  std::error_code ec;
  const fs::path old_tmp = data / "secret.key.old.tmp";
  fs::remove(old_tmp, ec);
  fs::create_hard_link(current, old_tmp, ec);
  if (!ec) fs::rename(old_tmp, old, ec);
  if (!ec) fs::rename(next, current, ec);
  if (ec) {
    return Fail(kExitFailure, Internal("secret_key_file_io",
                                       "data keys were re-wrapped but the key files could not "
                                       "be swapped (run again): " +
                                           ec.message()));
  }
  std::cout << "secret key rotated: " << (*from)->key_id() << " -> " << (*to)->key_id() << " ("
            << report->rewrapped << " data keys re-wrapped, " << report->skipped
            << " already current); the old key is kept as " << old.string() << "\n";
  return 0;
}

}  // namespace ql::local

int main(int argc, char** argv) {
  // The supervisor subcommand runs before any other setup: no threads, no storage.
  if (argc == 3 && std::string(argv[1]) == "supervise") {
    return ql::exec::SupervisorMain(argv[2]);
  }
  CLI::App app{"ql-local: the QingLong daemon for one machine (edge and standalone profiles)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("ql-local ") + ql::kProjectVersion);
  ql::local::ServeConfig config;
  CLI::App* serve = app.add_subcommand("serve", "Schedule, run, record and serve tasks");
  serve->add_option("--data", config.data_dir, "Data directory (default ./data)");
  serve->add_option("--profile", config.profile,
                    "Deployment profile: edge or standalone (default standalone, or "
                    "$QL_DEPLOYMENT_PROFILE)");
  serve->add_option("--listen", config.listen,
                    "HOST:PORT to serve HTTP on (default 127.0.0.1:5700)");
  serve->add_option("--tls-cert", config.security.tls_cert,
                    "PEM certificate chain: serve HTTPS (with --tls-key)");
  serve->add_option("--tls-key", config.security.tls_key, "PEM private key of --tls-cert");
  serve->add_option("--tls-client-ca", config.security.tls_client_ca,
                    "PEM CAs: require a client certificate one of them signed");
  serve->add_flag("--allow-insecure-http", config.security.allow_insecure_http,
                  "Allow plain HTTP on a non-loopback --listen address");
  serve->add_option("--shutdown-wait", config.shutdown_wait_s,
                    "Seconds to let running commands finish on SIGTERM (default 30)");
  AddIsolationFlags(*serve, config.isolation);
  serve->add_option("--oidc-config", config.oidc_config,
                    "Single sign-on: an OpenID Connect provider's JSON configuration "
                    "(docs/sign-in.md); needs libql-oidc.so beside ql-local");
  serve->add_option("--session-idle", config.session_idle_s,
                    "Seconds a panel session may go unused before it ends (default 1800)")
      ->check(CLI::Range(int64_t{10}, int64_t{7} * 24 * 3600));
  serve->add_option("--session-lifetime", config.session_lifetime_s,
                    "Seconds a panel session lasts at most (default 43200)")
      ->check(CLI::Range(int64_t{10}, int64_t{30} * 24 * 3600));
  AddNotifyFlags(*serve, config.notify);
  AddArtifactFlags(*serve, config.scripts);
  AddLogFlags(*serve, config.log);
  serve->add_option("--retention-interval", config.retention_interval_s,
                    "Seconds between retention rounds that found nothing more to purge "
                    "(default 60)");
  std::string rotate_data = "data";
  CLI::App* rotate = app.add_subcommand(
      "rotate-secret-key", "Re-wrap every secret's data key under a new key (daemon stopped)");
  rotate->add_option("--data", rotate_data, "Data directory (default ./data)");
  ql::local::BackupCommands backup_commands(app);
  std::string config_file;
  ql::AddConfigFlag(*serve, config_file);
  ql::ConfigTarget config_target;
  if (argc > 1 && std::string(argv[1]) == "serve") {
    config_target.command = serve;
    config_target.usage = "ql-local serve";
    config_target.first_arg = 2;
    config_target.environment = {{"profile", "QL_DEPLOYMENT_PROFILE"}};
  }
  if (int exit = ql::ParseWithConfigFile(app, argc, argv, config_target, ql::local::kExitUsage);
      exit >= 0) {
    return exit;
  }
  if (rotate->parsed()) return ql::local::RotateSecretKey(rotate_data);
  if (backup_commands.parsed()) return backup_commands.Run();
  std::error_code ec;
  std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) self = argv[0];
  return ql::local::Serve(config, self);
}
