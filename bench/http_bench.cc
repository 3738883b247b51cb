// Measures ql-local's HTTP listener as a hostile crowd would test it, and optionally another
// build side by side (the previous server): latency of /livez and of an authenticated
// GET /api/v1/runs while thousands of slow-loris and idle keep-alive connections are held open,
// memory taken by a crowd of anonymous uploads, and authenticated read throughput.
//
//   ql_http_bench --bin DIR [--baseline-bin DIR] [--slow 2000] [--idle 500] [--uploads 1000]
//                 [--samples 200] [--seconds 2] [--rounds 7] [--clients 4]
//
// Read throughput is measured in --rounds rounds of --seconds each, alternating between the two
// builds (both daemons started side by side), and each build's figure is the median of its
// rounds: on a shared, noisy machine both builds see the same disturbances.
//
// Every figure is measured in this run; a request that gets no answer within 2 s counts as
// 2000 ms. Prints a table and name=value lines (`_baseline` for the other build, `_ratio` =
// this build / baseline).

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kTimeoutMs = 2000;

struct Daemon {
  pid_t pid = -1;
  int port = 0;
  std::string token;
  std::string data;
};

// Connects to 127.0.0.1:port from `source` (a 127.0.0.x address); -1 on failure.
int Connect(int port, const std::string& source = "127.0.0.1") {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  sockaddr_in local{};
  local.sin_family = AF_INET;
  ::inet_pton(AF_INET, source.c_str(), &local.sin_addr);
  sockaddr_in remote{};
  remote.sin_family = AF_INET;
  remote.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &remote.sin_addr);
  if ((source != "127.0.0.1" && ::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof local)) ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&remote), sizeof remote) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool SendAll(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

// Reads one HTTP/1.1 answer with a Content-Length (or until close); returns its status, or -1.
int ReadAnswer(int fd, int timeout_ms, std::string* body = nullptr) {
  std::string in;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  size_t head_end = std::string::npos;
  size_t length = 0;
  for (;;) {
    if (head_end == std::string::npos) {
      head_end = in.find("\r\n\r\n");
      if (head_end != std::string::npos) {
        std::string head = in.substr(0, head_end);
        for (auto& c : head) c = static_cast<char>(std::tolower(c));
        const size_t at = head.find("content-length:");
        length = at == std::string::npos ? 0 : std::stoul(head.substr(at + 15));
      }
    }
    if (head_end != std::string::npos && in.size() >= head_end + 4 + length) break;
    const int left = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
    if (left <= 0) return -1;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, left) <= 0) return -1;
    char buf[16384];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    in.append(buf, static_cast<size_t>(n));
  }
  if (in.size() < 12 || in.compare(0, 9, "HTTP/1.1 ") != 0) return -1;
  if (body != nullptr && head_end != std::string::npos) *body = in.substr(head_end + 4);
  return std::stoi(in.substr(9, 3));
}

// One request on a new connection; returns its time in ms (kTimeoutMs when unanswered).
double Timed(int port, const std::string& request) {
  const auto start = Clock::now();
  const int fd = Connect(port);
  int status = -1;
  if (fd >= 0) {
    if (SendAll(fd, request)) status = ReadAnswer(fd, kTimeoutMs);
    ::close(fd);
  }
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  return status == 200 ? ms : kTimeoutMs;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  return v[i];
}

double RssMiB(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  }
  return -1;
}

Daemon Start(const std::string& bin, const std::string& data) {
  Daemon d;
  d.data = data;
  fs::remove_all(data);
  fs::create_directories(data);
  d.pid = fork();
  if (d.pid == 0) {
    FILE* log = std::fopen((data + ".log").c_str(), "w");
    dup2(fileno(log), 1);
    dup2(fileno(log), 2);
    execl((bin + "/ql-local").c_str(), "ql-local", "serve", "--data", data.c_str(), "--listen",
          "127.0.0.1:0", "--shutdown-wait", "0", nullptr);
    _exit(127);
  }
  const auto t0 = Clock::now();
  for (;;) {
    std::ifstream in(data + "/server.json");
    if (in) {
      json j = json::parse(in, nullptr, false);
      if (!j.is_discarded() && j.contains("server")) {
        const std::string server = j["server"];
        d.port = std::stoi(server.substr(server.rfind(':') + 1));
        const int fd = Connect(d.port);
        if (fd >= 0) {
          SendAll(fd, "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
          const int status = ReadAnswer(fd, 500);
          ::close(fd);
          if (status == 200) break;
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (Clock::now() - t0 > std::chrono::seconds(60)) {
      std::cerr << "ql-local in " << bin << " did not become ready (see " << data << ".log)\n";
      std::exit(1);
    }
  }
  std::ifstream tok(data + "/owner.token");
  std::getline(tok, d.token);
  return d;
}

void Stop(Daemon& d) {
  if (d.pid <= 0) return;
  kill(d.pid, SIGTERM);
  int st = 0;
  waitpid(d.pid, &st, 0);
  d.pid = -1;
}

std::string Request(const std::string& method, const std::string& path, const std::string& token,
                    const std::string& body = "", bool close = true) {
  std::string r = method + " " + path + " HTTP/1.1\r\nHost: bench\r\n";
  if (!token.empty()) r += "Authorization: Bearer " + token + "\r\n";
  if (!body.empty()) {
    r += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n";
  }
  if (close) r += "Connection: close\r\n";
  return r + "\r\n" + body;
}

// Holds `count` connections of one kind open until `stop`, spread over loopback source
// addresses (at most 200 per address), reopening any the server closes.
class Crowd {
 public:
  // `opening` is sent on each new connection (a partial head, or a whole request whose answer
  // is then left unread); with `trickle`, one more header byte follows every `trickle_ms`.
  Crowd(int port, int count, int first_address, std::string opening, int trickle_ms)
      : port_(port), opening_(std::move(opening)), trickle_ms_(trickle_ms) {
    for (int i = 0; i < count; ++i) {
      sources_.push_back("127.0.0." + std::to_string(first_address + i / 200));
    }
    fds_.assign(sources_.size(), -1);
    thread_ = std::thread([this] { Run(); });
  }
  ~Crowd() {
    stop_ = true;
    thread_.join();
    for (int fd : fds_) {
      if (fd >= 0) ::close(fd);
    }
  }
  // Connections open now.
  int open() const { return open_.load(); }
  int64_t reopened() const { return reopened_.load(); }

 private:
  void Run() {
    auto last_trickle = Clock::now();
    while (!stop_.load()) {
      int open = 0;
      for (size_t i = 0; i < fds_.size() && !stop_.load(); ++i) {
        if (fds_[i] >= 0) {
          char buf[4096];
          const ssize_t n = ::recv(fds_[i], buf, sizeof buf, MSG_DONTWAIT);
          if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
            ::close(fds_[i]);
            fds_[i] = -1;
            ++reopened_;
          }
        }
        if (fds_[i] < 0) {
          fds_[i] = Connect(port_, sources_[i]);
          if (fds_[i] >= 0 && !SendAll(fds_[i], opening_)) {
            ::close(fds_[i]);
            fds_[i] = -1;
          }
        }
        if (fds_[i] >= 0) ++open;
      }
      open_ = open;
      if (trickle_ms_ > 0 &&
          Clock::now() - last_trickle > std::chrono::milliseconds(trickle_ms_)) {
        for (int fd : fds_) {
          if (fd >= 0) (void)::send(fd, "x", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        }
        last_trickle = Clock::now();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  int port_;
  std::string opening_;
  int trickle_ms_;
  std::vector<std::string> sources_;
  std::vector<int> fds_;
  std::atomic<bool> stop_{false};
  std::atomic<int> open_{0};
  std::atomic<int64_t> reopened_{0};
  std::thread thread_;
};

struct Figures {
  double livez_p50 = 0, livez_p99 = 0, runs_p50 = 0, runs_p99 = 0;  // quiet
  double livez_p50_load = 0, livez_p99_load = 0, runs_p50_load = 0, runs_p99_load = 0;
  int slow_open = 0, idle_open = 0;
  double upload_rss_delta = 0;
  double crowd_rss_delta = 0;  // with the slow and idle connections held
  int uploads_open = 0;
  double read_rps = 0;
  double idle_rss = 0;
};

void Latencies(const Daemon& d, int samples, double* lp50, double* lp99, double* rp50,
               double* rp99) {
  std::vector<double> livez, runs;
  const std::string livez_req = Request("GET", "/livez", "");
  const std::string runs_req = Request("GET", "/api/v1/runs?limit=20", d.token);
  for (int i = 0; i < samples; ++i) {
    livez.push_back(Timed(d.port, livez_req));
    runs.push_back(Timed(d.port, runs_req));
  }
  *lp50 = Percentile(livez, 0.5);
  *lp99 = Percentile(livez, 0.99);
  *rp50 = Percentile(runs, 0.5);
  *rp99 = Percentile(runs, 0.99);
}

// Authenticated GETs on keep-alive connections from `clients` threads for `seconds`.
double ReadThroughput(const Daemon& d, int clients, int seconds) {
  std::atomic<int64_t> done{0};
  std::atomic<bool> stop{false};
  const std::string req = Request("GET", "/api/v1/runs?limit=20", d.token, "", false);
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&] {
      int fd = -1;
      while (!stop.load()) {
        if (fd < 0) fd = Connect(d.port);
        if (fd < 0) continue;
        if (!SendAll(fd, req) || ReadAnswer(fd, kTimeoutMs) != 200) {
          ::close(fd);
          fd = -1;
          continue;
        }
        ++done;
      }
      if (fd >= 0) ::close(fd);
    });
  }
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  stop = true;
  for (auto& t : threads) t.join();
  return static_cast<double>(done.load()) / seconds;
}

// Starts a daemon and gives it some history to list: one task and 20 runs of it.
Daemon StartWithHistory(const std::string& bin, const std::string& data) {
  Daemon d = Start(bin, data);
  const std::string task = json{{"name", "bench"},
                                {"spec", {{"command", {{"kind", "shell"}, {"command", "true"}}}}}}
                               .dump();
  std::string task_id;
  {
    const int fd = Connect(d.port);
    SendAll(fd, Request("POST", "/api/v1/tasks", d.token, task));
    std::string body;
    ReadAnswer(fd, 5000, &body);
    ::close(fd);
    task_id = json::parse(body, nullptr, false).value("id", "");
  }
  for (int i = 0; i < 20 && !task_id.empty(); ++i) {
    const int fd = Connect(d.port);
    SendAll(fd, Request("POST", "/api/v1/runs", d.token, json{{"task_id", task_id}}.dump()));
    ReadAnswer(fd, 5000);
    ::close(fd);
  }
  std::this_thread::sleep_for(std::chrono::seconds(2));
  return d;
}

Figures Measure(const std::string& bin, const std::string& data, int slow, int idle, int uploads,
                int samples) {
  Figures f;
  Daemon d = StartWithHistory(bin, data);
  f.idle_rss = RssMiB(d.pid);
  Latencies(d, samples, &f.livez_p50, &f.livez_p99, &f.runs_p50, &f.runs_p99);
  {
    // Anonymous uploads: a 1 MiB body announced, 16 KiB sent, the rest never comes.
    const double before = RssMiB(d.pid);
    std::string opening = "POST /api/v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: "
                          "application/json\r\nContent-Length: 1048576\r\n\r\n";
    opening.append(16 * 1024, ' ');
    Crowd upload_crowd(d.port, uploads, 150, opening, 0);
    double peak = before;
    for (int i = 0; i < 20; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      peak = std::max(peak, RssMiB(d.pid));
    }
    f.uploads_open = upload_crowd.open();
    f.upload_rss_delta = peak - before;
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));
  {
    // Slow-loris: heads that grow by one byte a second and never end.
    const double before = RssMiB(d.pid);
    Crowd slow_crowd(d.port, slow, 10, "GET /api/v1/runs HTTP/1.1\r\nHost: x\r\nX-Slow: ", 1000);
    // Idle keep-alive: one request answered, then nothing (the answer is left unread).
    Crowd idle_crowd(d.port, idle, 100, Request("GET", "/livez", "", "", false), 0);
    std::this_thread::sleep_for(std::chrono::seconds(3));
    f.slow_open = slow_crowd.open();
    f.idle_open = idle_crowd.open();
    Latencies(d, samples, &f.livez_p50_load, &f.livez_p99_load, &f.runs_p50_load,
              &f.runs_p99_load);
    f.slow_open = std::min(f.slow_open, slow_crowd.open());
    f.idle_open = std::min(f.idle_open, idle_crowd.open());
    f.crowd_rss_delta = RssMiB(d.pid) - before;
  }
  Stop(d);
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  std::string bin = "build/bin", baseline;
  int slow = 2000, idle = 500, uploads = 1000, samples = 200, seconds = 2, rounds = 7, clients = 4;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--bin") bin = value;
    else if (flag == "--baseline-bin") baseline = value;
    else if (flag == "--slow") slow = std::stoi(value);
    else if (flag == "--idle") idle = std::stoi(value);
    else if (flag == "--uploads") uploads = std::stoi(value);
    else if (flag == "--samples") samples = std::stoi(value);
    else if (flag == "--seconds")
      seconds = std::max(1, std::stoi(value));
    else if (flag == "--rounds")
      rounds = std::max(1, std::stoi(value));
    else if (flag == "--clients") clients = std::stoi(value);
    else {
      std::cerr << "unknown flag " << flag << "\n";
      return 2;
    }
  }
  rlimit files{};
  ::getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = files.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &files);
  ::signal(SIGPIPE, SIG_IGN);
  const std::string dir = (fs::temp_directory_path() / ("ql-http-bench-" +
                                                         std::to_string(::getpid())))
                              .string();
  std::map<std::string, Figures> runs;
  runs["this"] = Measure(bin, dir + "/this", slow, idle, uploads, samples);
  if (!baseline.empty()) {
    runs["baseline"] = Measure(baseline, dir + "/baseline", slow, idle, uploads, samples);
  }
  {
    // Read throughput: both daemons up, rounds alternating between them (the first build of a
    // round alternates too), the median of each build's rounds.
    std::map<std::string, Daemon> readers;
    std::map<std::string, std::vector<double>> rates;
    readers["this"] = StartWithHistory(bin, dir + "/this-reads");
    if (!baseline.empty())
      readers["baseline"] = StartWithHistory(baseline, dir + "/baseline-reads");
    for (int r = 0; r < rounds; ++r) {
      std::vector<std::string> order;
      for (const auto& [name, d] : readers) order.push_back(name);
      if (r % 2 == 1) std::reverse(order.begin(), order.end());
      for (const std::string& name : order) {
        rates[name].push_back(ReadThroughput(readers[name], clients, seconds));
      }
    }
    for (auto& [name, d] : readers) {
      Stop(d);
      std::vector<double>& v = rates[name];
      std::printf("read/s of %s, round by round:", name.c_str());
      for (double rate : v) std::printf(" %.0f", rate);
      std::printf("\n");
      std::sort(v.begin(), v.end());
      runs[name].read_rps = v[v.size() / 2];
    }
  }
  std::printf("%-10s %8s %8s %8s %8s | %8s %8s %8s %8s | %6s %6s | %8s %7s | %9s\n", "build",
              "livez50", "livez99", "runs50", "runs99", "livez50*", "livez99*", "runs50*",
              "runs99*", "slow", "idle", "uploadMiB", "uploads", "read/s");
  for (const auto& [name, f] : runs) {
    std::printf(
        "%-10s %8.2f %8.2f %8.2f %8.2f | %8.2f %8.2f %8.2f %8.2f | %6d %6d | %8.2f %7d | %9.0f\n",
        name.c_str(), f.livez_p50, f.livez_p99, f.runs_p50, f.runs_p99, f.livez_p50_load,
        f.livez_p99_load, f.runs_p50_load, f.runs_p99_load, f.slow_open, f.idle_open,
        f.upload_rss_delta, f.uploads_open, f.read_rps);
  }
  std::printf(
      "(ms; * = while the slow and idle connections are held open; slow/idle/uploads = "
      "connections the server kept open; read/s = median of %d rounds of %d s)\n",
      rounds, seconds);
  for (const auto& [name, f] : runs) {
    const std::string suffix = name == "this" ? "" : "_" + name;
    std::printf("http_livez_p99_ms%s=%.2f\n", suffix.c_str(), f.livez_p99);
    std::printf("http_runs_p99_ms%s=%.2f\n", suffix.c_str(), f.runs_p99);
    std::printf("http_livez_p99_ms_under_slow_clients%s=%.2f\n", suffix.c_str(),
                f.livez_p99_load);
    std::printf("http_runs_p99_ms_under_slow_clients%s=%.2f\n", suffix.c_str(), f.runs_p99_load);
    std::printf("http_slow_connections_held%s=%d\n", suffix.c_str(), f.slow_open);
    std::printf("http_idle_connections_held%s=%d\n", suffix.c_str(), f.idle_open);
    std::printf("http_upload_rss_delta_mib%s=%.2f\n", suffix.c_str(), f.upload_rss_delta);
    std::printf("http_slow_idle_rss_delta_mib%s=%.2f\n", suffix.c_str(), f.crowd_rss_delta);
    std::printf("http_read_requests_per_s%s=%.0f\n", suffix.c_str(), f.read_rps);
    std::printf("http_idle_rss_mib%s=%.2f\n", suffix.c_str(), f.idle_rss);
  }
  if (runs.count("baseline") != 0) {
    const Figures& a = runs["this"];
    const Figures& b = runs["baseline"];
    std::printf("http_read_requests_per_s_ratio=%.2f\n", a.read_rps / b.read_rps);
    std::printf("http_livez_p99_under_slow_clients_ratio=%.3f\n",
                a.livez_p99_load / b.livez_p99_load);
  }
  fs::remove_all(dir);
  return 0;
}
