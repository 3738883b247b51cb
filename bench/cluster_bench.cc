// Measures the cluster scheduler as an operator would see it: N schedule rows fall due in the
// same second and R `ql-cluster serve` replicas turn them into runs. It starts its own
// PostgreSQL 15 on loopback (durable defaults), migrates it, seeds the triggers, runs the
// replicas as real processes and reads every figure back from the database:
//   rate      occurrences admitted per second (N / (last admission − due time))
//   lag       p50 / p99 / max of run.created_at − scheduled_for (database clock)
//   raced     decisions that lost their fence (sum of the replicas' metrics)
//   dups      occurrences with more than one run (must be 0)
// Each cell is the median of --repeat runs. Prints one table and name=value lines.
//
//   cluster_bench --bin build/bin [--replicas 1,3] [--triggers 10000] [--repeat 3]
//                 [--durable on|off]

#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ql/core/clock.h"
#include "ql/engine/control_service.h"
#include "ql/storage/postgres/pg_client.h"
#include "ql/storage/postgres/pg_migrations.h"
#include "ql/storage/postgres/pg_store.h"
#include "ql/testing/postgres_server.h"

namespace {

using ql::Result;
using ql::Status;
using ql::testing::PostgresServer;
using Steady = std::chrono::steady_clock;

[[noreturn]] void Die(const std::string& what, const Status& status = Status()) {
  std::cerr << "cluster_bench: " << what << (status.ok() ? "" : ": " + status.ToString()) << "\n";
  std::exit(1);
}

template <typename T>
T Must(Result<T> r, const std::string& what) {
  if (!r.ok()) Die(what, r.status());
  return std::move(r).value();
}

std::vector<int> ParseList(const std::string& text) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::stoi(item));
  return out;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// A superuser session on one database.
class Sql {
 public:
  Sql(const PostgresServer& server, const std::string& db) {
    conn_ = Must(ql::pg::Connection::Open(server.Url(PostgresServer::kSuperuser, db), {}),
                 "connect as superuser");
  }
  void Run(const std::string& sql) {
    Status st = conn_->ExecScript(sql, "bench");
    if (!st.ok()) Die("SQL failed", st);
  }
  // Returns the first column of every row as double (NULL = 0).
  std::vector<double> Numbers(const std::string& sql) {
    ql::pg::Rows rows =
        Must(conn_->Exec("SELECT x::float8::text FROM (" + sql + ") q(x)", {}, "bench"), "query");
    std::vector<double> out;
    for (int i = 0; i < rows.size(); ++i) {
      out.push_back(rows.IsNull(i, 0) ? 0 : std::stod(*rows.OptText(i, 0)));
    }
    return out;
  }
  double Number(const std::string& sql) {
    std::vector<double> v = Numbers(sql);
    return v.empty() ? 0 : v[0];
  }

 private:
  std::unique_ptr<ql::pg::Connection> conn_;
};

struct Replica {
  pid_t pid = -1;
  int port = 0;
};

int FreePort() {
  static int next = 20000 + (getpid() % 1000) * 20;
  return next++;
}

Replica StartReplica(const std::string& bin, const std::string& url, const std::string& log) {
  Replica r;
  r.port = FreePort();
  r.pid = fork();
  if (r.pid == 0) {
    FILE* out = std::fopen(log.c_str(), "a");
    dup2(fileno(out), 1);
    dup2(fileno(out), 2);
    std::string listen = "127.0.0.1:" + std::to_string(r.port);
    execl((bin + "/ql-cluster").c_str(), "ql-cluster", "serve", "--database-url", url.c_str(),
          "--listen", listen.c_str(), nullptr);
    _exit(127);
  }
  const auto t0 = Steady::now();
  while (true) {
    httplib::Client c("127.0.0.1", r.port);
    c.set_connection_timeout(0, 200'000);
    auto res = c.Get("/readyz");
    if (res && res->status == 200) break;
    if (Steady::now() - t0 > std::chrono::seconds(60))
      Die("replica did not become ready; see " + log);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return r;
}

double ScrapeRaced(const Replica& r) {
  httplib::Client c("127.0.0.1", r.port);
  auto res = c.Get("/metrics");
  if (!res) return 0;
  std::stringstream ss(res->body);
  std::string line;
  const std::string key = "ql_scheduler_occurrences_total{outcome=\"raced\"} ";
  while (std::getline(ss, line)) {
    if (line.rfind(key, 0) == 0) return std::stod(line.substr(key.size()));
  }
  return 0;
}

void StopReplica(Replica& r) {
  if (r.pid <= 0) return;
  kill(r.pid, SIGTERM);
  int st = 0;
  waitpid(r.pid, &st, 0);
  r.pid = -1;
}

struct Figures {
  double rate = 0, p50 = 0, p99 = 0, max = 0, raced = 0, dups = 0, seconds = 0;
};

// Builds database `tmpl` with `n` triggers whose cursors sit far in the future.
void BuildTemplate(PostgresServer& server, const std::string& tmpl, int n) {
  Sql postgres(server, "postgres");
  postgres.Run("CREATE DATABASE " + tmpl + " OWNER ql3_migration");
  ql::Clock& clock = ql::SystemClock();
  Must(ql::pg::Migrate(server.Url("ql3_migration", tmpl), clock), "migrate");
  ql::PostgresStoreOptions options;
  options.runtime.url = server.Url("ql3_runtime", tmpl);
  options.admin = ql::pg::PoolOptions{};
  options.admin->url = server.Url("ql3_admin", tmpl);
  {
    auto store = Must(ql::PostgresStore::Open(options), "open store");
    ql::ControlOptions control_options;
    control_options.executor_type = "remote_worker";
    ql::ControlService control(*store, clock, ql::SecureRandom(), control_options);
    Must(control.EnsureDefaultProject(), "default project");
    ql::TaskWrite task;
    task.body = {{"name", "bench"},
                 {"spec", {{"command", {{"kind", "shell"}, {"command", "true"}}}}}};
    auto published = Must(control.PublishTask(task), "publish task");
    ql::TriggerWrite trigger;
    trigger.task_id = published.task.head.task_id;
    trigger.expression = "0 0 0 1 1 *";  // yearly: exactly one occurrence per trigger here
    trigger.timezone = "UTC";
    trigger.misfire = "fire_once";
    Must(control.AddTrigger(trigger), "publish trigger");
  }
  // n - 1 clones of the trigger (same content, so the same valid digest), cursors parked.
  Sql sql(server, tmpl);
  sql.Run(
      "BEGIN;"
      "CREATE TEMP TABLE clone AS SELECT gen_random_uuid()::text AS id, "
      "gen_random_uuid()::text AS mutation FROM generate_series(2, " +
      std::to_string(n) +
      ");"
      "INSERT INTO ql3.trigger_heads SELECT c.id, h.project_id, h.task_id, 1, h.created_at_ms, "
      "h.updated_at_ms FROM clone c, ql3.trigger_heads h;"
      "INSERT INTO ql3.trigger_revisions SELECT c.id, 1, r.project_id, c.mutation, r.task_id, "
      "r.task_revision, r.task_digest, r.expression, r.timezone, r.misfire, r.enabled, "
      "r.content_digest, r.created_at_ms FROM clone c, ql3.trigger_revisions r;"
      "INSERT INTO ql3.trigger_schedules SELECT c.id, s.project_id, 1, true, NULL, NULL, 1, "
      "s.published_at_ms, false, NULL, NULL, 0, NULL, s.updated_at_ms "
      "FROM clone c, ql3.trigger_schedules s WHERE s.trigger_id <> c.id;"
      "UPDATE ql3.trigger_schedules SET next_fire_at_ms = 4102444800000;"  // 2100-01-01
      "COMMIT;");
  sql.Run("VACUUM ANALYZE");
  if (sql.Number("SELECT count(*) FROM ql3.trigger_schedules") != n) Die("seeding failed");
}

Figures RunOnce(PostgresServer& server, const std::string& bin, const std::string& tmpl,
                const std::string& db, int replicas, int n) {
  Sql postgres(server, "postgres");
  postgres.Run("CREATE DATABASE " + db + " TEMPLATE " + tmpl + " OWNER ql3_migration");
  postgres.Run("REVOKE ALL ON DATABASE " + db + " FROM PUBLIC; GRANT CONNECT ON DATABASE " + db +
               " TO ql3_runtime, ql3_admin, ql3_worker_ingress");
  std::vector<Replica> running;
  for (int i = 0; i < replicas; ++i) {
    running.push_back(
        StartReplica(bin, server.Url("ql3_runtime", db), "/tmp/ql-cluster-bench-" + db + ".log"));
  }
  Sql sql(server, db);
  // Every row falls due at the same instant, two seconds from now by the database clock.
  const double due =
      sql.Number("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint + 2000");
  sql.Run("UPDATE ql3.trigger_schedules SET next_fire_at_ms = " +
          std::to_string(static_cast<int64_t>(due)));
  const auto deadline = Steady::now() + std::chrono::seconds(300);
  while (sql.Number("SELECT count(*) FROM ql3.runs") < n) {
    if (Steady::now() > deadline) Die("not every occurrence was admitted in 300 s");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  Figures f;
  for (Replica& r : running) f.raced += ScrapeRaced(r);
  for (Replica& r : running) StopReplica(r);
  const double last = sql.Number("SELECT max(created_at_ms) FROM ql3.runs");
  f.seconds = (last - due) / 1000.0;
  f.rate = n / std::max(f.seconds, 0.001);
  f.p50 = sql.Number(
              "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY created_at_ms - "
              "scheduled_for_ms) FROM ql3.runs") /
          1000.0;
  f.p99 = sql.Number(
              "SELECT percentile_cont(0.99) WITHIN GROUP (ORDER BY created_at_ms - "
              "scheduled_for_ms) FROM ql3.runs") /
          1000.0;
  f.max = sql.Number("SELECT max(created_at_ms - scheduled_for_ms) FROM ql3.runs") / 1000.0;
  f.dups = sql.Number(
      "SELECT count(*) FROM (SELECT trigger_id, scheduled_for_ms FROM ql3.runs "
      "GROUP BY 1, 2 HAVING count(*) > 1) d");
  if (sql.Number("SELECT count(*) FROM ql3.runs r WHERE (SELECT count(*) FROM ql3.run_events e "
                 "WHERE e.run_id = r.id) <> 2 OR (SELECT count(*) FROM ql3.run_attempts a "
                 "WHERE a.run_id = r.id) <> 1") != 0) {
    Die("a run without exactly one attempt and two events");
  }
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  std::string bin = "build/bin";
  std::vector<int> replicas = {1, 3};
  std::vector<int> triggers = {10000};
  int repeat = 3;
  bool durable = true;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--bin")
      bin = argv[i + 1];
    else if (flag == "--replicas")
      replicas = ParseList(argv[i + 1]);
    else if (flag == "--triggers")
      triggers = ParseList(argv[i + 1]);
    else if (flag == "--repeat")
      repeat = std::stoi(argv[i + 1]);
    else if (flag == "--durable")
      durable = std::string(argv[i + 1]) != "off";
    else
      Die("unknown flag " + flag);
  }
  setenv("QL3_POSTGRES_ALLOW_INSECURE", "true", 1);
  ql::testing::PostgresServerOptions options;
  options.fast = !durable;  // durable commits (fsync) unless --durable off
  auto server = Must(PostgresServer::Start(options), "start PostgreSQL");
  Must(server->PsqlFile("postgres", std::string(QL_SOURCE_DIR) + "/deploy/postgres/roles.sql"),
       "create roles");

  std::printf("%-9s %-9s %12s %9s %9s %9s %7s %5s\n", "triggers", "replicas", "admitted/s",
              "p50 lag", "p99 lag", "max lag", "raced", "dups");
  std::vector<std::string> machine;
  int db_serial = 0;
  for (int n : triggers) {
    const std::string tmpl = "bench_tmpl_" + std::to_string(n);
    BuildTemplate(*server, tmpl, n);
    for (int r : replicas) {
      std::vector<double> rate, p50, p99, max, raced, dups;
      for (int k = 0; k < repeat; ++k) {
        Figures f = RunOnce(*server, bin, tmpl, "bench_run_" + std::to_string(++db_serial), r, n);
        rate.push_back(f.rate);
        p50.push_back(f.p50);
        p99.push_back(f.p99);
        max.push_back(f.max);
        raced.push_back(f.raced);
        dups.push_back(f.dups);
      }
      std::printf("%-9d %-9d %12.0f %8.3fs %8.3fs %8.3fs %7.0f %5.0f\n", n, r, Median(rate),
                  Median(p50), Median(p99), Median(max), Median(raced),
                  *std::max_element(dups.begin(), dups.end()));
      const std::string key = "cluster_" + std::to_string(r) + "_replicas_" + std::to_string(n);
      machine.push_back(key + "_admitted_per_s=" + std::to_string(static_cast<int>(Median(rate))));
      machine.push_back(key + "_lag_p50_s=" + std::to_string(Median(p50)));
      machine.push_back(key + "_lag_p99_s=" + std::to_string(Median(p99)));
      machine.push_back(
          key + "_duplicates=" +
          std::to_string(static_cast<int>(*std::max_element(dups.begin(), dups.end()))));
    }
  }
  for (const std::string& line : machine) std::printf("%s\n", line.c_str());
  return 0;
}
