// ql-worker: the composition root of the worker profile. It picks the adapters (the POSIX
// supervisor, the HTTP control client), reads the real clock and owns the threads; it links no
// storage library.

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../config_file.h"
#include "../isolation_flags.h"
#include "../key_provider_flags.h"
#include "../log_flags.h"
#include "control_client.h"
#include "ql/core/clock.h"
#include "ql/core/placement.h"
#include "ql/core/rfc3339.h"
#include "ql/core/status.h"
#include "ql/exec/executor.h"
#include "ql/exec/launcher.h"
#include "ql/exec/supervision_runner.h"
#include "ql/secrets/store_sealer.h"
#include "ql_version.h"
#include "worker.h"

namespace fs = std::filesystem;

namespace ql::worker {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;
constexpr int kExitUnauthorized = 3;
constexpr int kExitFenced = 4;

struct Flags {
  std::string control;
  std::string token_file;
  int slots = 1;
  std::string work_dir = "./worker-data";
  int64_t log_cap_bytes = 16LL * 1024 * 1024;
  int64_t drain_timeout_ms = 60'000;
  int64_t script_cache_mib = 1024;
  std::string pool;  // empty: the pool the worker's credential is bound to
  std::vector<std::string> labels;
  ClientTls tls;
  bool allow_insecure_http = false;
  secrets::KeyProviderConfig secret_key;
  IsolationFlags isolation;
  LogFlags log;
};

// Writes one line of the worker's own narration to the daemon log.
void Say(EventLog& log, const std::string& line, LogLevel level = LogLevel::kInfo) {
  log.Write(level, "worker", {{"message", line}});
}

int Fail(int code, const Status& status) {
  std::cerr << "error: " << status.reason() << ": " << ql::WithConfigLine(status.message()) << "\n";
  return code;
}

// Returns the first line of `path` without surrounding whitespace. Errors (InvalidArgument):
// token_file_unreadable, token_invalid (empty, or whitespace/control bytes inside).
Result<std::string> ReadToken(const std::string& path, EventLog& log) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return InvalidArgument("token_file_unreadable",
                           "cannot read the token file " + path + ": " + std::strerror(errno));
  }
  std::string line;
  std::getline(in, line);
  const size_t begin = line.find_first_not_of(" \t\r\n");
  const size_t end = line.find_last_not_of(" \t\r\n");
  const std::string token = begin == std::string::npos ? "" : line.substr(begin, end - begin + 1);
  if (token.empty()) {
    return InvalidArgument("token_invalid", "the first line of " + path + " is empty");
  }
  for (unsigned char c : token) {
    if (c <= 0x20 || c == 0x7F) {
      return InvalidArgument("token_invalid",
                             "the token in " + path + " contains whitespace or control bytes");
    }
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && (st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    Say(log,
        "the token file " + path + " is accessible by group or others; restrict it with chmod 600",
        LogLevel::kWarn);
  }
  return token;
}

// Holds an exclusive lock on `<work_dir>/worker.lock` for the life of the process, so that two
// workers never share (and stop each other's commands in) one work directory.
Status LockWorkDir(const std::string& work_dir) {
  std::error_code ec;
  fs::create_directories(work_dir, ec);
  if (ec) return Internal("worker_dir_io", "cannot create " + work_dir + ": " + ec.message());
  const std::string path = work_dir + "/worker.lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return Internal("worker_dir_io", "cannot open " + path + ": " + std::strerror(errno));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK) {
      return Conflict("work_dir_in_use", "another ql-worker uses the work directory " + work_dir);
    }
    return Internal("worker_dir_io", "cannot lock " + path + ": " + std::strerror(err));
  }
  return Status::Ok();  // the descriptor stays open (and locked) until the process exits
}

int Serve(const Flags& flags, const std::string& self_exe) {
  if (flags.slots < 1 || flags.slots > 1024) {
    return Fail(kExitUsage, InvalidArgument("invalid_slots", "--slots must be 1..1024, got " +
                                                                 std::to_string(flags.slots)));
  }
  if (flags.log_cap_bytes < 1 || flags.log_cap_bytes > (int64_t{1} << 40)) {
    return Fail(kExitUsage,
                InvalidArgument("invalid_log_cap", "--log-cap-bytes must be 1..2^40, got " +
                                                       std::to_string(flags.log_cap_bytes)));
  }
  if (flags.drain_timeout_ms < 0 || flags.drain_timeout_ms > 24LL * 3600 * 1000) {
    return Fail(kExitUsage, InvalidArgument("invalid_drain_timeout",
                                            "--drain-timeout-ms must be 0..86400000, got " +
                                                std::to_string(flags.drain_timeout_ms)));
  }
  if (flags.script_cache_mib < 1 || flags.script_cache_mib > (int64_t{1} << 20)) {
    return Fail(kExitUsage, InvalidArgument("invalid_script_cache",
                                            "--script-cache-mib must be 1..1048576, got " +
                                                std::to_string(flags.script_cache_mib)));
  }
  Placement placement;
  placement.pool = flags.pool;
  if (!flags.pool.empty()) {
    if (Status st = ValidatePoolName("invalid_pool", "--pool", flags.pool); !st.ok()) {
      return Fail(kExitUsage, st);
    }
  }
  for (const std::string& label : flags.labels) {
    Result<std::pair<std::string, std::string>> parsed =
        ParseLabelAssignment("invalid_label", label);
    if (!parsed.ok()) return Fail(kExitUsage, parsed.status());
    placement.labels[parsed->first] = parsed->second;
  }
  if (placement.labels.size() > static_cast<size_t>(kMaxPlacementLabels)) {
    return Fail(kExitUsage,
                InvalidArgument("invalid_label", "at most " + std::to_string(kMaxPlacementLabels) +
                                                     " --label flags"));
  }
  if (flags.work_dir.empty()) {
    return Fail(kExitUsage, InvalidArgument("invalid_work_dir", "--work-dir is empty"));
  }
  Result<DaemonLog> daemon_log = OpenDaemonLog(flags.log, SystemClock());
  if (!daemon_log.ok()) return Fail(kExitUsage, daemon_log.status());
  EventLog& log = *daemon_log->log;
  Result<ControlEndpoint> endpoint = ParseControlUrl(flags.control);
  if (!endpoint.ok()) return Fail(kExitUsage, endpoint.status());
  if (Status st = CheckPlainHttpAllowed(endpoint->host, endpoint->tls, flags.allow_insecure_http,
                                        "--control " + endpoint->url, "--allow-insecure-http");
      !st.ok()) {
    return Fail(kExitUsage, st);
  }
  if (flags.tls.cert_file.empty() != flags.tls.key_file.empty()) {
    return Fail(kExitUsage,
                InvalidArgument("tls_flags_incomplete",
                                "a client certificate needs both --client-cert and --client-key"));
  }
  // The supervisor launcher is forked before anything secret is read and before any thread
  // starts: each attempt's supervisor is a fork of it instead of a re-execution of this binary.
  // Without it (it cannot be forked, or dies) supervisors are re-executed as before.
  std::unique_ptr<exec::SupervisorLauncher> launcher;
  if (Result<std::unique_ptr<exec::SupervisorLauncher>> started = exec::SupervisorLauncher::Start();
      started.ok()) {
    launcher = std::move(*started);
  } else {
    Say(log, "supervisors are re-executed: " + started.status().ToString(), LogLevel::kWarn);
  }
  Result<std::string> token = ReadToken(flags.token_file, log);
  if (!token.ok()) return Fail(kExitUsage, token.status());

  const std::string work_dir = fs::absolute(flags.work_dir).lexically_normal().string();
  if (Status st = LockWorkDir(work_dir); !st.ok()) return Fail(kExitFailure, st);

  // Signals are taken synchronously by one thread; every other thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);  // reopens the --log-file
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  // The worker's own key provider opens the sealed secrets of its leases; without one a run that
  // uses a secret fails with secret_unavailable.
  Result<std::unique_ptr<secrets::KeyProvider>> key_provider =
      secrets::OpenConfiguredKeyProvider(flags.secret_key, SystemClock());
  if (!key_provider.ok()) return Fail(kExitUsage, key_provider.status());
  std::unique_ptr<secrets::EnvelopeSealer> sealer;
  if (*key_provider) sealer = std::make_unique<secrets::EnvelopeSealer>(**key_provider);

  WorkerOptions options;
  options.sealer = sealer.get();
  options.slots = flags.slots;
  options.work_dir = work_dir;
  options.log_cap_bytes = flags.log_cap_bytes;
  options.drain_timeout_ms = flags.drain_timeout_ms;
  options.script_cache_bytes = flags.script_cache_mib << 20;
  options.software_version = kProjectVersion;
  options.capabilities = {{"labels", flags.labels}};
  options.placement = placement;
  options.log = [&log](const std::string& line) { Say(log, line); };

  // A result is only ever reported by the incarnation that started its attempt (a new one
  // stops what an earlier one left), so it need not survive a power loss: no fsync per run.
  exec::SupervisionRunner runner({self_exe, "supervise"}, RunRootOf(work_dir),
                                 WorkRootOf(work_dir), launcher.get(), /*fsync_results=*/false);
  // Commands never see this worker's token, key and TLS files or its work directory (other
  // runs' records, logs and directories); as root each project's commands get a uid of their own.
  Result<exec::RunnerIsolation> isolation = BuildIsolation(
      flags.isolation, "standalone", work_dir + "/command-uids",
      {work_dir, flags.token_file, flags.secret_key.key_file, flags.tls.key_file,
       flags.tls.cert_file, flags.tls.ca_file});
  if (!isolation.ok()) {
    return Fail(isolation.status().code() == StatusCode::kInvalidArgument ? kExitUsage
                                                                          : kExitFailure,
                isolation.status());
  }
  Say(log, isolation->report.Summary());
  runner.SetIsolation(std::move(isolation).value());
  ControlClientOptions client_options;
  client_options.user_agent = std::string("ql-worker/") + kProjectVersion;
  client_options.tls = flags.tls;
  ControlClient control(*endpoint, *token, client_options);
  Worker worker(options, control, runner, SystemClock(), SecureRandom());

  std::atomic<bool> finished{false};
  std::thread signal_thread([&] {
    bool draining = false;
    const timespec tick{0, 200'000'000};
    while (!finished) {
      const int received = sigtimedwait(&signals, nullptr, &tick);
      if (received < 0) continue;
      if (received == SIGHUP) {
        ReopenDaemonLog(*daemon_log);  // after a rotation renamed the file
        continue;
      }
      if (draining) {
        Say(log, std::string("received ") + strsignal(received) + " again; still draining");
        continue;
      }
      draining = true;
      Say(log, std::string("received ") + strsignal(received) + "; draining");
      worker.RequestDrain();
    }
  });

  Say(log, "starting: control plane " + endpoint->url + ", " + std::to_string(flags.slots) +
               " slot(s), work directory " + work_dir);
  const Status st = worker.Run();
  finished = true;
  signal_thread.join();
  if (st.ok()) return kExitOk;
  if (IsUnauthorized(st)) return Fail(kExitUnauthorized, st);
  if (IsSessionLost(st)) return Fail(kExitFenced, st);
  return Fail(kExitFailure, st);
}

}  // namespace
}  // namespace ql::worker

int main(int argc, char** argv) {
  // The supervisor subcommand runs before any other setup: no threads, no network.
  if (argc == 3 && std::string(argv[1]) == "supervise") {
    return ql::exec::SupervisorMain(argv[2]);
  }
  CLI::App app{
      "ql-worker: runs commands leased from a QingLong control plane (cluster profile). "
      "SIGTERM or SIGINT drains it."};
  app.set_version_flag("--version", std::string("ql-worker ") + ql::kProjectVersion);
  ql::worker::Flags flags;
  app.add_option("--control", flags.control,
                 "Worker listener of the control plane, https://HOST:PORT (http:// on "
                 "loopback)")
      ->required();
  app.add_option("--ca-file", flags.tls.ca_file,
                 "PEM CAs to verify the control plane with (default: the system store)");
  app.add_option("--client-cert", flags.tls.cert_file,
                 "PEM client certificate to present (with --client-key)");
  app.add_option("--client-key", flags.tls.key_file, "PEM private key of --client-cert");
  app.add_flag("--allow-insecure-http", flags.allow_insecure_http,
               "Allow plain http to a non-loopback control plane (tokens in clear text)");
  app.add_option("--token-file", flags.token_file,
                 "File whose first line is the worker token (from `ql-cluster worker-token "
                 "create`)")
      ->required();
  AddIsolationFlags(app, flags.isolation);
  app.add_option("--slots", flags.slots, "Commands run at once, 1..1024 (default 1)");
  app.add_option("--work-dir", flags.work_dir,
                 "Directory for attempt records and output (default ./worker-data)");
  app.add_option("--log-cap-bytes", flags.log_cap_bytes,
                 "Output kept and shipped per attempt (default 16777216)");
  app.add_option("--drain-timeout-ms", flags.drain_timeout_ms,
                 "How long running commands may finish after SIGTERM before they are cancelled "
                 "(default 60000)");
  app.add_option("--script-cache-mib", flags.script_cache_mib,
                 "Script versions kept in <work-dir>/scripts for later runs, MiB (default 1024)");
  app.add_option("--pool", flags.pool,
                 "The worker pool this worker takes runs of: its token's pool (ql-cluster "
                 "worker-token create NAME --pool P), which it may name here and may not "
                 "change; a pool serves only the projects granted to it (ql pool grant)");
  app.add_option("--label", flags.labels,
                 "KEY=VALUE a task may require of its worker (repeatable, at most 16)");
  ql::AddKeyProviderFlags(app, flags.secret_key, "", "opens the secrets of leased runs");
  // No HTTP listener, so no access log.
  ql::AddLogFlags(app, flags.log, /*with_access_log=*/false);
  std::string config_file;
  ql::AddConfigFlag(app, config_file);
  ql::ConfigTarget config_target;
  config_target.command = &app;
  config_target.usage = "ql-worker";
  if (int exit = ql::ParseWithConfigFile(app, argc, argv, config_target, ql::worker::kExitUsage);
      exit >= 0) {
    return exit;
  }
  std::error_code ec;
  std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) self = argv[0];
  return ql::worker::Serve(flags, self);
}
