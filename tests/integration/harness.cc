#include "harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

namespace fs = std::filesystem;

namespace ql::itest {

std::string BinDir() {
  if (const char* dir = std::getenv("QL_BIN_DIR")) return dir;
  return QL_BIN_DIR;  // set by CMake
}

TempDir::TempDir() {
  char tmpl[] = "/tmp/ql-itest-XXXXXX";
  path_ = ::mkdtemp(tmpl);
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

CommandResult RunCommand(const std::vector<std::string>& argv,
                         const std::vector<std::string>& extra_env, int timeout_ms) {
  CommandResult result;
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) return result;
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out_pipe[1], 1);
    ::dup2(err_pipe[1], 2);
    for (const std::string& e : extra_env) ::putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  int open_fds = 2;
  char buf[65536];
  while (open_fds > 0 && std::chrono::steady_clock::now() < deadline) {
    if (::poll(fds, 2, 100) <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP))) continue;
      ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n <= 0) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      } else {
        (i == 0 ? result.out : result.err).append(buf, n);
      }
    }
  }
  if (open_fds > 0) ::kill(pid, SIGKILL);
  for (auto& f : fds) {
    if (f.fd >= 0) ::close(f.fd);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

bool WaitFor(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return condition();
}

namespace {

std::string Base64(const std::string& in, bool url) {
  const char* alphabet = url ? "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
                             : "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 3 <= in.size(); i += 3) {
    const uint32_t n = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    for (int shift = 18; shift >= 0; shift -= 6) out += alphabet[(n >> shift) & 63];
  }
  return out;  // a trailing partial group depends on what follows: left out
}

}  // namespace

std::vector<std::string> LeakForms(const std::string& value) {
  std::vector<std::string> forms = {value};
  std::string hex;
  for (unsigned char c : value) {
    static const char* digits = "0123456789abcdef";
    hex += digits[c >> 4];
    hex += digits[c & 15];
  }
  forms.push_back(hex);
  for (bool url : {false, true}) {
    for (size_t lead = 0; lead < 3; ++lead) {
      // `lead` bytes of something else before the value: the first group mixes them in.
      std::string encoded = Base64(std::string(lead, '\0') + value, url);
      if (lead > 0) encoded = encoded.substr(std::min<size_t>(4, encoded.size()));
      if (encoded.size() >= 16) forms.push_back(encoded);
    }
  }
  return forms;
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::string FindLeak(const std::string& text, const std::string& value) {
  for (const std::string& form : LeakForms(value)) {
    if (text.find(form) != std::string::npos) return form;
  }
  return "";
}

int SlowBodyRequest(int port, const std::string& method, const std::string& path,
                    const std::string& body, const std::string& token, int pause_ms) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const timeval timeout{15, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  std::string head =
      method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" +
      "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  if (!token.empty()) head += "Authorization: Bearer " + token + "\r\n";
  head += "\r\n";
  const auto send_all = [fd](const std::string& bytes) {
    return ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
  };
  std::string answer;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 && send_all(head)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
    if (send_all(body)) {
      char buffer[4096];
      ssize_t n;
      while (answer.find("\r\n") == std::string::npos &&
             (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0) {
        answer.append(buffer, static_cast<size_t>(n));
      }
    }
  }
  ::close(fd);
  // HTTP/1.1 200 OK
  if (answer.rfind("HTTP/1.1 ", 0) != 0 || answer.size() < 12) return 0;
  return std::atoi(answer.substr(9, 3).c_str());
}

int HttpGetStatus(const std::string& url, const std::string& ca_file) {
  // url = http[s]://host:port/path
  const size_t scheme_end = url.find("://") + 3;
  const size_t slash = url.find('/', scheme_end);
  httplib::Client client(url.substr(0, slash));
  if (!ca_file.empty()) client.set_ca_cert_path(ca_file.c_str());
  client.set_connection_timeout(1, 0);
  client.set_read_timeout(2, 0);
  auto res = client.Get(slash == std::string::npos ? "/" : url.substr(slash));
  return res ? res->status : 0;
}

LocalDaemon::LocalDaemon(std::string data_dir, std::string profile)
    : data_dir_(std::move(data_dir)), profile_(std::move(profile)) {}

LocalDaemon::~LocalDaemon() {
  if (pid_ > 0) Kill();
}

bool LocalDaemon::Start(const std::vector<std::string>& extra_args) {
  fs::create_directories(data_dir_);
  fs::remove(data_dir_ + "/server.json");
  pid_ = ::fork();
  if (pid_ == 0) {
    ::setpgid(0, 0);
    int fd = ::open((data_dir_ + "/../daemon.log").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    if (separate_stderr_) {
      const int err =
          ::open((data_dir_ + "/../daemon.err").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      ::dup2(err, 2);
    }
    std::vector<std::string> argv = {BinDir() + "/ql-local", "serve",      "--data", data_dir_,
                                     "--listen",             "127.0.0.1:0", "--profile", profile_};
    argv.insert(argv.end(), extra_args.begin(), extra_args.end());
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  const bool ready = WaitFor(
      [&] {
        std::ifstream in(data_dir_ + "/server.json");
        if (!in) return false;
        auto j = nlohmann::json::parse(in, nullptr, false);
        if (j.is_discarded() || !j.contains("server")) return false;
        server_ = j["server"].get<std::string>();
        return HttpGetStatus(server_ + "/readyz", ca_file_) == 200;
      },
      std::chrono::seconds(20));
  return ready;
}

void LocalDaemon::Kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
}

int LocalDaemon::Stop() {
  if (pid_ <= 0) return -1;
  ::kill(pid_, SIGTERM);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string LocalDaemon::log() const {
  std::ifstream in(data_dir_ + "/../daemon.log");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string LocalDaemon::err() const { return ReadFile(data_dir_ + "/../daemon.err"); }

CommandResult LocalDaemon::Ql(std::vector<std::string> args) const {
  std::vector<std::string> argv = {BinDir() + "/ql"};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv, {"QL_DATA_DIR=" + data_dir_});
}

std::vector<std::string> SqliteQuery(const std::string& db_path, const std::string& sql) {
  std::vector<std::string> rows;
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(db);
    return rows;
  }
  sqlite3_busy_timeout(db, 5000);
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK) {
    while (sqlite3_step(stmt) == SQLITE_ROW) {
      std::string row;
      for (int i = 0; i < sqlite3_column_count(stmt); ++i) {
        if (i > 0) row += "|";
        const unsigned char* text = sqlite3_column_text(stmt, i);
        row += text ? reinterpret_cast<const char*>(text) : "NULL";
      }
      rows.push_back(row);
    }
  }
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return rows;
}

void MakeExchangeDirectory(const std::string& dir) {
  std::filesystem::create_directories(dir);
  std::filesystem::permissions(dir, std::filesystem::perms::all | std::filesystem::perms::sticky_bit,
                               std::filesystem::perm_options::replace);
}

}  // namespace ql::itest
