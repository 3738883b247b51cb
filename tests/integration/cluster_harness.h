#pragma once

// Processes of the cluster profile for integration tests: `ql-cluster serve` replicas and
// `ql-worker`s, each started with fork/exec, its output appended to a log file, killed at the
// end of the test at the latest.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "harness.h"
#include "ql/testing/postgres_server.h"

namespace ql::itest {

// A port for a listener: below Linux's ephemeral range (32768..60999), so no outgoing
// connection (libpq, HTTP clients) can be holding it, and free to bind right now. Successive
// calls never return the same port.
inline int FreePort() {
  static int next = 20000 + (::getpid() % 600) * 20;
  for (int tries = 0; tries < 12000; ++tries) {
    const int port = next++;
    if (next >= 32000) next = 20000;
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    ::close(fd);
    if (free) return port;
  }
  return 0;
}

// One child process running a QingLong binary.
class ChildProcess {
 public:
  explicit ChildProcess(std::string log) : log_(std::move(log)) {}
  ~ChildProcess() { Kill(); }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  void Spawn(std::vector<std::string> argv) {
    pid_ = ::fork();
    if (pid_ == 0) {
      int fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::setenv("QL3_POSTGRES_ALLOW_INSECURE", "true", 1);
      std::vector<char*> raw;
      for (auto& a : argv) raw.push_back(a.data());
      raw.push_back(nullptr);
      ::execv(raw[0], raw.data());
      ::_exit(127);
    }
  }
  void Kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  // Sends `signal` (SIGSTOP freezes, SIGCONT thaws) without waiting.
  void Signal(int signal) {
    if (pid_ > 0) ::kill(pid_, signal);
  }
  // SIGTERM, then waits; returns the exit status (128 + signal when killed by one).
  int Stop() {
    if (pid_ <= 0) return -1;
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  // Waits up to `timeout` for the process to exit on its own; returns its exit status, or -1
  // when it is still running.
  int WaitExit(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (pid_ > 0) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      if (std::chrono::steady_clock::now() > deadline) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  const std::string& log() const { return log_; }

 private:
  std::string log_;
  pid_t pid_ = -1;
};

// The key file (32 random bytes, mode 0600) of the replicas of this test process that are not
// given a key provider of their own: a replica is not ready without one (ADR-0037).
inline const std::string& ClusterKeyFile() {
  static const TempDir dir;
  static const std::string path = [] {
    const std::string file = dir.path() + "/cluster.key";
    const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    const int random = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    char key[32];
    const bool written = fd >= 0 && random >= 0 && ::read(random, key, sizeof key) == sizeof key &&
                         ::write(fd, key, sizeof key) == sizeof key;
    if (fd >= 0) ::close(fd);
    if (random >= 0) ::close(random);
    if (!written) ADD_FAILURE() << "cannot write the cluster key file " << file;
    return file;
  }();
  return path;
}

// One `ql-cluster serve` replica on free ports (API and worker listener). Unless its arguments
// name a key provider (or OmitKeyProvider was called) it gets --secret-key-file ClusterKeyFile().
class Replica {
 public:
  Replica(std::string name, std::string log) : name_(std::move(name)), process_(std::move(log)) {}

  // Serves https with the test PKI's server certificate; clients verify it with `ca_file`.
  void UseTls(std::string cert, std::string key, std::string ca_file) {
    tls_cert_ = std::move(cert);
    tls_key_ = std::move(key);
    ca_file_ = std::move(ca_file);
  }

  // Starts the replica without a key provider of the harness's: it serves not ready (code
  // secret_key_provider_missing) unless its arguments name one.
  void OmitKeyProvider() { omit_key_provider_ = true; }

  // Starts the replica and waits (at most 30 s) until /readyz answers 200.
  bool Start(const std::vector<std::string>& args) {
    Spawn(args);
    return WaitFor([&] { return HttpGetStatus(url() + "/readyz", ca_file_) == 200; },
                   std::chrono::seconds(30));
  }
  // Starts the replica and waits (at most 30 s) until it serves HTTP (/livez 200), ready or not.
  bool StartServing(const std::vector<std::string>& args) {
    Spawn(args);
    return WaitFor([&] { return HttpGetStatus(url() + "/livez", ca_file_) == 200; },
                   std::chrono::seconds(30));
  }
  void Kill() { process_.Kill(); }
  void Freeze() { process_.Signal(SIGSTOP); }
  void Thaw() { process_.Signal(SIGCONT); }
  void Signal(int signal) { process_.Signal(signal); }
  int Stop() { return process_.Stop(); }
  std::string url() const { return scheme() + "127.0.0.1:" + std::to_string(port_); }
  std::string worker_url() const { return scheme() + "127.0.0.1:" + std::to_string(worker_port_); }
  const std::string& ca_file() const { return ca_file_; }
  const std::string& name() const { return name_; }
  int port() const { return port_; }
  int worker_port() const { return worker_port_; }
  pid_t pid() const { return process_.pid(); }

 private:
  std::string scheme() const { return tls_cert_.empty() ? "http://" : "https://"; }

  void Spawn(const std::vector<std::string>& args) {
    port_ = FreePort();
    worker_port_ = FreePort();
    std::vector<std::string> argv = {BinDir() + "/ql-cluster",
                                     "serve",
                                     "--listen",
                                     "127.0.0.1:" + std::to_string(port_),
                                     "--worker-listen",
                                     "127.0.0.1:" + std::to_string(worker_port_),
                                     "--owner",
                                     name_};
    if (!tls_cert_.empty()) {
      argv.insert(argv.end(), {"--tls-cert", tls_cert_, "--tls-key", tls_key_});
    }
    argv.insert(argv.end(), args.begin(), args.end());
    const bool keyed = std::any_of(args.begin(), args.end(), [](const std::string& arg) {
      return arg == "--secret-key-file" || arg == "--secret-key-exec";
    });
    if (!keyed && !omit_key_provider_) {
      argv.insert(argv.end(), {"--secret-key-file", ClusterKeyFile()});
    }
    process_.Spawn(argv);
  }

  std::string name_;
  ChildProcess process_;
  int port_ = 0;
  int worker_port_ = 0;
  std::string tls_cert_;
  std::string tls_key_;
  std::string ca_file_;
  bool omit_key_provider_ = false;
};

// Starts a throwaway PostgreSQL with the roles of deploy/postgres/roles.sql and database
// qinglong migrated by `ql-cluster migrate`; nullptr (with a test failure) when that fails.
inline std::unique_ptr<::ql::testing::PostgresServer> StartMigratedPostgres() {
  auto server = ::ql::testing::PostgresServer::Start();
  if (!server.ok()) {
    ADD_FAILURE() << server.status().ToString();
    return nullptr;
  }
  auto roles =
      (*server)->PsqlFile("postgres", std::string(QL_SOURCE_DIR) + "/deploy/postgres/roles.sql");
  if (!roles.ok()) {
    ADD_FAILURE() << roles.status().ToString();
    return nullptr;
  }
  CommandResult migrated = RunCommand({BinDir() + "/ql-cluster", "migrate", "--database-url",
                                       (*server)->Url("ql3_migration", "qinglong")},
                                      {"QL3_POSTGRES_ALLOW_INSECURE=true"}, 60'000);
  if (migrated.exit_code != 0) {
    ADD_FAILURE() << migrated.err;
    return nullptr;
  }
  return std::move(server).value();
}

// Mints a credential of database qinglong on `server` with `ql-cluster token|worker-token
// create NAME` (`kind` "token" or "worker-token"; a worker token for `pool` when given) and
// returns the token (the last line).
inline std::string MintCredential(const ::ql::testing::PostgresServer& server,
                                  const std::string& kind, const std::string& name,
                                  const std::string& pool = "") {
  std::vector<std::string> argv = {
      BinDir() + "/ql-cluster",           kind, "create", name, "--database-url",
      server.Url("ql3_admin", "qinglong")};
  if (!pool.empty()) argv.insert(argv.end(), {"--pool", pool});
  CommandResult r = RunCommand(argv, {"QL3_POSTGRES_ALLOW_INSECURE=true"}, 60'000);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::string out = r.out;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out.substr(out.rfind('\n') + 1);
}

}  // namespace ql::itest
