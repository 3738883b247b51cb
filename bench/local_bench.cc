// Measures ql-local as an operator would see it: idle memory, start-up time, admission
// throughput of a burst and scheduling lag. Prints one table and name=value lines.
//
//   local_bench [--bin DIR] [--triggers N] [--lag-triggers N] [--lag-seconds S] [--repeat 3]
//
// Memory, start-up and the burst are the median of --repeat runs on fresh data directories;
// the lag is one minute of 1,000 triggers (every occurrence in it counts).

#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct Daemon {
  pid_t pid = -1;
  std::string server;
  std::string token;
  int64_t ready_ms = 0;  // exec → /readyz 200
};

bool Ready(const std::string& server) {
  httplib::Client c(server);
  c.set_connection_timeout(0, 200'000);
  auto r = c.Get("/readyz");
  return r && r->status == 200;
}

Daemon Start(const std::string& bin, const std::string& data, const std::string& profile) {
  Daemon d;
  fs::remove(data + "/server.json");
  const auto t0 = Clock::now();
  d.pid = fork();
  if (d.pid == 0) {
    FILE* log = std::fopen((data + ".log").c_str(), "a");
    dup2(fileno(log), 1);
    dup2(fileno(log), 2);
    execl((bin + "/ql-local").c_str(), "ql-local", "serve", "--data", data.c_str(), "--listen",
          "127.0.0.1:0", "--profile", profile.c_str(), "--shutdown-wait", "0", nullptr);
    _exit(127);
  }
  for (;;) {
    std::ifstream in(data + "/server.json");
    if (in) {
      json j = json::parse(in, nullptr, false);
      if (!j.is_discarded() && j.contains("server")) {
        d.server = j["server"];
        if (Ready(d.server)) break;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    if (Clock::now() - t0 > std::chrono::seconds(60)) {
      std::cerr << "daemon did not become ready\n";
      std::exit(1);
    }
  }
  d.ready_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
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

// A field of /proc/PID/status in MiB: VmRSS (all resident pages), RssAnon (the process's own
// pages), RssFile (code and constants of the executable and its libraries, shared with the
// page cache).
double StatusMiB(pid_t pid, const std::string& field = "VmRSS:") {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) return std::stod(line.substr(field.size())) / 1024.0;
  }
  return -1;
}

json Post(httplib::Client& c, const std::string& path, const json& body) {
  auto r = c.Post(path.c_str(), body.dump(), "application/json");
  if (!r || r->status >= 300) {
    std::cerr << "POST " << path << " failed: " << (r ? r->body : "no response") << "\n";
    std::exit(1);
  }
  return json::parse(r->body);
}

std::unique_ptr<httplib::Client> Client(const Daemon& d) {
  auto c = std::make_unique<httplib::Client>(d.server);
  c->set_bearer_token_auth(d.token.c_str());
  c->set_keep_alive(false);  // one short connection per request, as scripts do
  c->set_read_timeout(30, 0);
  return c;
}

std::string AddTask(httplib::Client& c, const std::string& command) {
  json t = Post(c, "/api/v1/tasks",
                {{"name", "bench"}, {"spec", {{"command", {{"kind", "shell"}, {"command", command}}}}}});
  return t["id"];
}

void AddTriggers(httplib::Client& c, const std::string& task, int n,
                 const std::function<std::string(int)>& expr) {
  for (int i = 0; i < n; ++i) {
    Post(c, "/api/v1/triggers",
         {{"task_id", task}, {"expression", expr(i)}, {"timezone", "UTC"}, {"misfire", "skip"}});
  }
}

std::vector<std::vector<int64_t>> Query(const std::string& db, const std::string& sql) {
  std::vector<std::vector<int64_t>> rows;
  sqlite3* h = nullptr;
  sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READONLY, nullptr);
  sqlite3_busy_timeout(h, 5000);
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(h, sql.c_str(), -1, &st, nullptr) == SQLITE_OK) {
    while (sqlite3_step(st) == SQLITE_ROW) {
      std::vector<int64_t> row;
      for (int i = 0; i < sqlite3_column_count(st); ++i) row.push_back(sqlite3_column_int64(st, i));
      rows.push_back(row);
    }
  }
  sqlite3_finalize(st);
  sqlite3_close(h);
  return rows;
}

int64_t Scalar(const std::string& db, const std::string& sql) {
  auto rows = Query(db, sql);
  return rows.empty() || rows[0].empty() ? 0 : rows[0][0];
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

double Percentile(std::vector<int64_t> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t idx = static_cast<size_t>(p * (v.size() - 1) + 0.5);
  return static_cast<double>(v[std::min(idx, v.size() - 1)]);
}

}  // namespace

int main(int argc, char** argv) {
  std::string bin = "build/bin";
  int triggers = 10'000;
  int lag_triggers = 1'000;
  int lag_seconds = 60;
  int repeat = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--bin") bin = argv[i + 1];
    else if (a == "--triggers") triggers = std::stoi(argv[i + 1]);
    else if (a == "--lag-triggers") lag_triggers = std::stoi(argv[i + 1]);
    else if (a == "--lag-seconds") lag_seconds = std::stoi(argv[i + 1]);
    else if (a == "--repeat") repeat = std::max(1, std::stoi(argv[i + 1]));
  }
  char tmpl[] = "/tmp/ql-bench-XXXXXX";
  const std::string root = mkdtemp(tmpl);

  // Sections 1 and 2 run --repeat times (fresh data directories); each figure is the median.
  std::vector<double> rss_idle_0s, rss_idle_ns, anon_idle_ns, ready_mss, rates, firsts, lasts,
      admitteds;
  int64_t duplicates = 0;  // summed over the repeats: must stay 0
  for (int k = 0; k < repeat; ++k) {
    // 1. Edge: idle RSS with 0 and N triggers, and start-up time with N triggers. The triggers
    // are published through a standalone start of the same data directory (WAL: no fsync per
    // publish), then the edge daemon starts on it.
    const std::string edge = root + "/edge" + std::to_string(k);
    Daemon d = Start(bin, edge, "edge");
    std::this_thread::sleep_for(std::chrono::seconds(2));
    rss_idle_0s.push_back(StatusMiB(d.pid));
    Stop(d);
    d = Start(bin, edge, "standalone");
    {
      auto c = Client(d);
      const std::string task = AddTask(*c, "true");
      AddTriggers(*c, task, triggers, [](int) { return "0 0 0 1 1 *"; });
    }
    Stop(d);
    d = Start(bin, edge, "edge");
    ready_mss.push_back(static_cast<double>(d.ready_ms));
    const std::string edge_db = edge + "/db/qinglong.db";
    while (Scalar(edge_db, "SELECT COUNT(*) FROM trigger_schedules WHERE next_fire_at_ms IS NULL") > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    std::this_thread::sleep_for(std::chrono::seconds(6));  // one idle edge cadence
    rss_idle_ns.push_back(StatusMiB(d.pid));
    anon_idle_ns.push_back(StatusMiB(d.pid, "RssAnon:"));
    Stop(d);

    // 2. Standalone: N triggers due in the same second.
    const std::string sa = root + "/standalone" + std::to_string(k);
    d = Start(bin, sa, "standalone");
    const std::string sa_db = sa + "/db/qinglong.db";
    int64_t due_ms = 0;
    {
      // Every trigger fires at second 0 of every minute; the first minute boundary after all of
      // them exist is the burst that is measured.
      auto c = Client(d);
      const std::string task = AddTask(*c, "true");
      const int64_t t0 = NowMs();
      AddTriggers(*c, task, triggers, [](int) { return "0 * * * * *"; });
      std::cerr << "created " << triggers << " triggers in " << NowMs() - t0 << " ms\n";
      due_ms = ((NowMs() + 2000) / 60'000 + 1) * 60'000;
    }
    while (Scalar(sa_db, "SELECT COUNT(*) FROM runs WHERE scheduled_for_ms = " +
                             std::to_string(due_ms)) < triggers &&
           NowMs() < due_ms + 120'000) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    auto burst = Query(sa_db, "SELECT COUNT(*), MIN(created_at_ms), MAX(created_at_ms) FROM runs "
                              "WHERE scheduled_for_ms = " + std::to_string(due_ms));
    const int64_t admitted = burst[0][0];
    const int64_t first = burst[0][1], last = burst[0][2];
    const double burst_s = std::max<int64_t>(last - due_ms, 1) / 1000.0;
    admitteds.push_back(static_cast<double>(admitted));
    firsts.push_back(static_cast<double>(first - due_ms));
    lasts.push_back(static_cast<double>(last - due_ms));
    rates.push_back(admitted / burst_s);
    duplicates += Scalar(
        sa_db, "SELECT COUNT(*) FROM (SELECT idempotency_key FROM runs WHERE idempotency_key IS NOT "
               "NULL GROUP BY idempotency_key HAVING COUNT(*) > 1)");
    Stop(d);
  }
  const double rss_idle_0 = Median(rss_idle_0s), rss_idle_n = Median(rss_idle_ns);
  const double ready_ms = Median(ready_mss), admission_rate = Median(rates);

  // 3. Standalone: lag with triggers spread over the minute.
  const std::string lag = root + "/lag";
  Daemon d = Start(bin, lag, "standalone");
  const std::string lag_db = lag + "/db/qinglong.db";
  int64_t measure_from = 0;
  {
    auto c = Client(d);
    const std::string task = AddTask(*c, "true");
    AddTriggers(*c, task, lag_triggers, [](int i) { return std::to_string(i % 60) + " * * * * *"; });
    measure_from = NowMs() + 2000;
  }
  std::this_thread::sleep_for(std::chrono::seconds(lag_seconds + 2));
  std::vector<int64_t> lags;
  for (const auto& row : Query(lag_db, "SELECT created_at_ms - scheduled_for_ms FROM runs WHERE "
                                       "scheduled_for_ms >= " + std::to_string(measure_from))) {
    lags.push_back(row[0]);
  }
  Stop(d);

  std::printf("%-58s %12s\n", "figure", "value");
  std::printf("%-58s %9.2f MiB\n", "edge idle RSS, 0 triggers", rss_idle_0);
  std::printf("%-58s %9.2f MiB\n", ("edge idle RSS, " + std::to_string(triggers) + " triggers").c_str(), rss_idle_n);
  std::printf("%-58s %9.2f MiB\n", "  of which anonymous (heap, stacks)", Median(anon_idle_ns));
  std::printf("%-58s %9.0f ms\n", ("edge start to /readyz 200, " + std::to_string(triggers) + " triggers").c_str(), ready_ms);
  std::printf("%-58s %9.0f /s\n", ("standalone admission, " + std::to_string(triggers) + " due at once").c_str(), admission_rate);
  std::printf("%-58s %9.0f ms\n", "  scheduled time to last admission", Median(lasts));
  std::printf("%-58s %9.0f ms\n", "  scheduled time to first admission", Median(firsts));
  std::printf("%-58s %9.0f\n", "  occurrences admitted", Median(admitteds));
  std::printf("%-58s %9lld\n", "  duplicate idempotency keys", (long long)duplicates);
  std::printf("%-58s %9.0f ms\n", ("lag p50, " + std::to_string(lag_triggers) + " triggers over the minute").c_str(), Percentile(lags, 0.5));
  std::printf("%-58s %9.0f ms\n", "lag p99", Percentile(lags, 0.99));
  std::printf("%-58s %9.0f ms\n", "lag max", Percentile(lags, 1.0));
  std::printf("%-58s %9zu\n", "  occurrences measured", lags.size());
  std::printf("edge_idle_rss_0_mib=%.2f\n", rss_idle_0);
  std::printf("edge_idle_rss_%d_mib=%.2f\n", triggers, rss_idle_n);
  std::printf("edge_idle_rss_anon_%d_mib=%.2f\n", triggers, Median(anon_idle_ns));
  std::printf("edge_ready_ms_%d=%.0f\n", triggers, ready_ms);
  std::printf("standalone_admission_per_s=%.0f\n", admission_rate);
  std::printf("standalone_burst_duplicates=%lld\n", (long long)duplicates);
  std::printf("lag_p50_ms=%.0f\nlag_p99_ms=%.0f\n", Percentile(lags, 0.5), Percentile(lags, 0.99));
  fs::remove_all(root);
  return 0;
}
