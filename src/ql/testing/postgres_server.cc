#include "ql/testing/postgres_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace ql::testing {
namespace {

namespace fs = std::filesystem;

struct Output {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs argv (argv[0] is a path) and collects its output, bounded by `timeout_ms`.
Output Run(const std::vector<std::string>& argv, int timeout_ms = 120'000) {
  Output result;
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return result;
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    return result;
  }
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out_pipe[1], 1);
    ::dup2(err_pipe[1], 2);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  int open_fds = 2;
  char buf[16384];
  while (open_fds > 0 && std::chrono::steady_clock::now() < deadline) {
    if (::poll(fds, 2, 100) <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n <= 0) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      } else {
        sinks[i]->append(buf, static_cast<size_t>(n));
      }
    }
  }
  for (pollfd& f : fds) {
    if (f.fd >= 0) ::close(f.fd);
  }
  if (open_fds > 0) ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

// Returns a port that was free on 127.0.0.1 a moment ago.
int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    socklen_t len = sizeof addr;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

std::string Tail(const std::string& path, size_t bytes = 2000) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  return s.size() > bytes ? s.substr(s.size() - bytes) : s;
}

// Prefixes argv so the command runs as `user` (when set) through runuser.
std::vector<std::string> As(const std::string& user, std::vector<std::string> argv) {
  if (user.empty()) return argv;
  std::vector<std::string> wrapped = {"/usr/sbin/runuser", "-u", user, "--"};
  wrapped.insert(wrapped.end(), argv.begin(), argv.end());
  return wrapped;
}

Status ChownTree(const std::string& path, const std::string& user) {
  if (user.empty()) return Status::Ok();
  passwd* pw = ::getpwnam(user.c_str());
  if (pw == nullptr) return Unavailable("postgres_user_missing", "no system user " + user);
  if (::chown(path.c_str(), pw->pw_uid, pw->pw_gid) != 0) {
    return Internal("chown_failed", "cannot hand " + path + " to " + user);
  }
  return Status::Ok();
}

}  // namespace

std::string FindPostgresBinDir() {
  if (const char* dir = std::getenv("QL_TEST_PG_BINDIR"); dir != nullptr && *dir != '\0') {
    return dir;
  }
  std::string best;
  int best_major = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/usr/lib/postgresql", ec)) {
    int major = std::atoi(entry.path().filename().c_str());
    fs::path bin = entry.path() / "bin";
    if (major > best_major && fs::exists(bin / "initdb") && fs::exists(bin / "pg_ctl")) {
      best_major = major;
      best = bin.string();
    }
  }
  return best;
}

Result<std::unique_ptr<PostgresServer>> PostgresServer::Start(
    const PostgresServerOptions& options) {
  std::unique_ptr<PostgresServer> server(new PostgresServer());
  server->bin_dir_ = FindPostgresBinDir();
  if (server->bin_dir_.empty()) {
    return Unavailable("postgres_not_installed",
                       "no PostgreSQL server binaries under /usr/lib/postgresql/*/bin; run "
                       "scripts/install-deps.sh");
  }
  if (::geteuid() == 0) server->run_as_ = "postgres";
  char tmpl[] = "/tmp/ql-pg-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return Internal("mkdtemp_failed", "cannot create a temp dir");
  server->root_dir_ = tmpl;
  server->data_dir_ = server->root_dir_ + "/data";
  QL_RETURN_IF_ERROR(ChownTree(server->root_dir_, server->run_as_));

  Output init = Run(
      As(server->run_as_, {server->bin_dir_ + "/initdb", "-D", server->data_dir_, "-U", kSuperuser,
                           "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"}));
  if (init.exit_code != 0) {
    return Unavailable("postgres_initdb_failed", "initdb failed: " + init.err.substr(0, 2000));
  }
  {
    std::ofstream conf(server->data_dir_ + "/postgresql.conf", std::ios::app);
    conf << "\nlisten_addresses = '127.0.0.1'\n"
         << "unix_socket_directories = '" << server->root_dir_ << "'\n"
         << "max_connections = 200\n"
         << "shared_buffers = 128MB\n"
         << "log_min_messages = warning\n"
         // The predicate-lock room a SERIALIZABLE admission of a 256-row batch needs without
         // escalating to page or relation locks (docs/design-notes.md).
         << "max_pred_locks_per_transaction = 1024\nmax_pred_locks_per_page = 128\n";
    if (options.fast) {
      conf << "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n";
    }
    if (options.replication) {
      conf << "wal_level = replica\nmax_wal_senders = 4\nhot_standby = on\n";
    }
    for (const std::string& s : options.settings) conf << s << "\n";
    std::ofstream hba(server->data_dir_ + "/pg_hba.conf", std::ios::app);
    if (options.replication) hba << "host replication all 127.0.0.1/32 trust\n";
  }
  server->port_ = FreePort();
  QL_RETURN_IF_ERROR(server->StartProcess());
  return server;
}

Result<std::unique_ptr<PostgresServer>> PostgresServer::StartStandby(
    const PostgresServer& primary) {
  std::unique_ptr<PostgresServer> server(new PostgresServer());
  server->bin_dir_ = primary.bin_dir_;
  server->run_as_ = primary.run_as_;
  char tmpl[] = "/tmp/ql-pg-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return Internal("mkdtemp_failed", "cannot create a temp dir");
  server->root_dir_ = tmpl;
  server->data_dir_ = server->root_dir_ + "/data";
  QL_RETURN_IF_ERROR(ChownTree(server->root_dir_, server->run_as_));
  // --checkpoint=fast: the default (spread) backup checkpoint is paced over
  // checkpoint_completion_target × checkpoint_timeout, minutes even on an idle server.
  Output backup =
      Run(As(server->run_as_, {server->bin_dir_ + "/pg_basebackup", "-D", server->data_dir_, "-h",
                               "127.0.0.1", "-p", std::to_string(primary.port_), "-U", kSuperuser,
                               "-R", "-X", "stream", "--checkpoint=fast", "--no-sync"}));
  if (backup.exit_code != 0) {
    return Unavailable("postgres_basebackup_failed",
                       "pg_basebackup failed: " + backup.err.substr(0, 2000));
  }
  {
    std::ofstream conf(server->data_dir_ + "/postgresql.conf", std::ios::app);
    conf << "\nunix_socket_directories = '" << server->root_dir_ << "'\n";
  }
  server->port_ = FreePort();
  QL_RETURN_IF_ERROR(server->StartProcess());
  return server;
}

Status PostgresServer::StartProcess() {
  Output start =
      Run(As(run_as_, {bin_dir_ + "/pg_ctl", "-D", data_dir_, "-l", root_dir_ + "/server.log", "-w",
                       "-t", "60", "-o", "-p " + std::to_string(port_), "start"}));
  if (start.exit_code != 0) {
    return Unavailable("postgres_start_failed",
                       "pg_ctl start failed: " + start.err + Tail(root_dir_ + "/server.log"));
  }
  running_ = true;
  return Status::Ok();
}

PostgresServer::~PostgresServer() {
  if (running_) {
    (void)Run(
        As(run_as_, {bin_dir_ + "/pg_ctl", "-D", data_dir_, "-m", "immediate", "-w", "stop"}));
  }
  if (!root_dir_.empty()) {
    std::error_code ec;
    fs::remove_all(root_dir_, ec);
  }
}

std::string PostgresServer::Url(const std::string& user, const std::string& database) const {
  return "postgresql://" + user + "@127.0.0.1:" + std::to_string(port_) + "/" + database +
         "?sslmode=disable";
}

Result<std::string> PostgresServer::PsqlAs(const std::string& user, const std::string& database,
                                           const std::string& sql) const {
  static std::atomic<int> counter{0};
  std::string file = root_dir_ + "/q" + std::to_string(::getpid()) + "-" +
                     std::to_string(counter.fetch_add(1)) + ".sql";
  {
    std::ofstream out(file);
    out << sql;
  }
  Output r =
      Run({bin_dir_ + "/psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1",
           "-p", std::to_string(port_), "-U", user, "-d", database, "-f", file});
  std::error_code ec;
  fs::remove(file, ec);
  if (r.exit_code != 0) return Internal("psql_failed", "psql: " + r.err.substr(0, 2000));
  return r.out;
}

Result<std::string> PostgresServer::Psql(const std::string& database,
                                         const std::string& sql) const {
  return PsqlAs(kSuperuser, database, sql);
}

Result<std::string> PostgresServer::PsqlFile(const std::string& database,
                                             const std::string& path) const {
  Output r =
      Run({bin_dir_ + "/psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1",
           "-p", std::to_string(port_), "-U", kSuperuser, "-d", database, "-f", path});
  if (r.exit_code != 0) return Internal("psql_failed", "psql: " + r.err.substr(0, 2000));
  return r.out;
}

Result<std::string> PostgresServer::PgDump(const std::string& database) const {
  Output r = Run({bin_dir_ + "/pg_dump", "-h", "127.0.0.1", "-p", std::to_string(port_), "-U",
                  kSuperuser, "-d", database});
  if (r.exit_code != 0) return Internal("pg_dump_failed", "pg_dump: " + r.err.substr(0, 2000));
  return r.out;
}

Status PostgresServer::Stop() {
  if (!running_) return Status::Ok();
  Output r = Run(As(run_as_, {bin_dir_ + "/pg_ctl", "-D", data_dir_, "-m", "fast", "-w", "stop"}));
  if (r.exit_code != 0) return Internal("postgres_stop_failed", "pg_ctl stop: " + r.err);
  running_ = false;
  return Status::Ok();
}

Status PostgresServer::Restart() {
  if (running_) return Status::Ok();
  return StartProcess();
}

Status PostgresServer::Promote() {
  Output r = Run(As(run_as_, {bin_dir_ + "/pg_ctl", "-D", data_dir_, "-w", "promote"}));
  if (r.exit_code != 0) return Internal("postgres_promote_failed", "pg_ctl promote: " + r.err);
  return Status::Ok();
}

}  // namespace ql::testing
