// Measures the cluster profile as an operator would see it, against its own PostgreSQL 15 on
// loopback (durable defaults), in one run so the figures can be compared:
//
//   ceiling    what PostgreSQL itself can do: pgbench runs the admission's writes (one schedule
//              UPDATE; run, retry policy, attempt and two events INSERTed, exactly the rows an
//              admission writes) one occurrence per transaction and 16 per transaction, at
//              SERIALIZABLE and READ COMMITTED, with 4 and 16 clients; occurrences per second.
//   admission  N schedule rows fall due in the same second and R real `ql-cluster serve`
//              replicas turn them into runs: occurrences per second, lag from scheduled time to
//              admission (p50 / p99 / max, database clock), raced decisions, retried
//              transactions, duplicates (checked in the database, must be 0), dead tuples;
//              with the default admission isolation (SERIALIZABLE, the seed's) for every
//              replica count, and READ COMMITTED (explicit locks) with the most replicas; with
//              both, the ratio of their median rates.
//   claim      the claim transaction's latency (p50 / p99 of 300 claims of 16 rows) with
//              1,000,000 schedule rows of which 100,000 are due, each claimed batch then
//              advanced (untimed) as an admission would; and its plan (EXPLAIN ANALYZE).
//   takeover   a replica holding claims is SIGKILLed: seconds from the kill to the first
//              admission of one of its rows by another replica (the lease, plus a round).
//   dispatch   trivial runs (`true`) admitted at once and run by 2 real `ql-worker`s x 2 slots
//              on 2 replicas: runs per second, lease -> end p50 / p99, slot time per run,
//              busy CPU time of the machine per run, queue depth, runs leased more than once
//              (must be 0); each repeat runs the commands confined (--isolation auto) and
//              unconfined (--isolation off) in turn and prints both rows, their ratio and the
//              set-up time per attempt (the slot time difference).
//   fairness   project A's --fairness-runs (5,000) cron runs of `true` fall due at once on 1
//              replica with 2 real `ql-worker`s x 2 slots (pool `default`); once all are queued,
//              project B (created in-process through the governance service, with a task
//              `true`) starts 50 manual runs, one every 200 ms, while A's backlog drains: B's
//              queue wait (lease granted - run queued) p50 / p99 / max, A's queued backlog as
//              each B run starts (median, min), A's own queue wait p50, runs not succeeded and
//              extra attempts or leases (both must be 0). Retention keeps every run; every run
//              is waited for to its end: 65-80 s on 2 cores.
//   boundary   10,000 triggers on `* * * * *`, 3 replicas, 3 minute boundaries: lag from the
//              boundary to the COMMIT of each run row (track_commit_timestamp), p50/p99/max.
//   storage    bytes each admitted run adds to the run tables, indexes included.
//   retention  --retention-runs finished runs 60 days old (one attempt, four events, two log
//              chunks each) and R real replicas whose retention jobs purge them: runs purged
//              per second; then the admission burst (N due at once, R replicas) twice on that
//              history, while the replicas purge it and with retention keeping everything:
//              lag p50 / p99 of both.
//
// Every cell of ceiling, admission, claim, takeover, dispatch and retention is the median of
// --repeat runs (default 3); fairness, boundary and storage run once. Prints tables, then
// name=value lines.
//
//   cluster_bench --bin build/bin
//                 [--phases ceiling,admission,claim,takeover,dispatch,fairness,boundary,storage,
//                           retention]
//                 [--retention-runs 100000] [--dispatch-runs 2000] [--fairness-runs 5000]
//                 [--boundary-triggers 10000] [--boundaries 3]
//                 [--replicas 1,2,3] [--triggers 10000,100000] [--repeat 3] [--durable on|off]
//                 [--claim-rows 1000000] [--ceiling-seconds 6] [--pg-setting name=value]...
//                 [--isolations read-committed,serializable]
//
// QL_BENCH_TRACE=1 prints progress, the replicas' CPU time and, with
// --pg-setting "shared_preload_libraries = 'pg_stat_statements'", the costliest statements.

#include <fcntl.h>
#include <httplib.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ql/core/clock.h"
#include "ql/core/ids.h"
#include "ql/engine/control_service.h"
#include "ql/storage/postgres/pg_client.h"
#include "ql/storage/postgres/pg_cluster_schedules.h"
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

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5));
  return v[i];
}

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
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
  // Returns the first column of every row as text (NULL = "").
  std::vector<std::string> Texts(const std::string& sql) {
    ql::pg::Rows rows =
        Must(conn_->Exec("SELECT x::text FROM (" + sql + ") q(x)", {}, "bench"), "query");
    std::vector<std::string> out;
    for (int i = 0; i < rows.size(); ++i) out.push_back(rows.OptText(i, 0).value_or(""));
    return out;
  }
  // Runs a statement that returns text rows as it is (EXPLAIN) and returns the first column.
  std::vector<std::string> Lines(const std::string& sql) {
    ql::pg::Rows rows = Must(conn_->Exec(sql, {}, "bench"), "statement");
    std::vector<std::string> out;
    for (int i = 0; i < rows.size(); ++i) out.push_back(rows.OptText(i, 0).value_or(""));
    return out;
  }
  double Number(const std::string& sql) {
    std::vector<std::string> v = Texts(sql);
    return v.empty() || v[0].empty() ? 0 : std::stod(v[0]);
  }
  std::string Text(const std::string& sql) {
    std::vector<std::string> v = Texts(sql);
    return v.empty() ? "" : v[0];
  }

 private:
  std::unique_ptr<ql::pg::Connection> conn_;
};

// ---------------------------------------------------------------------------------------------
// Replicas

struct Replica {
  pid_t pid = -1;
  int port = 0;
};

// Listener ports below Linux's ephemeral range (32768..60999), which outgoing connections use.
int FreePort() {
  static int next = 20000 + (getpid() % 600) * 20;
  if (next >= 32000) next = 20000;
  return next++;
}

// Starts `argv` with stdout and stderr appended to `log`; returns its pid.
pid_t Spawn(std::vector<std::string> argv, const std::string& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    FILE* out = std::fopen(log.c_str(), "a");
    dup2(fileno(out), 1);
    dup2(fileno(out), 2);
    std::vector<char*> raw;
    for (auto& a : argv) raw.push_back(a.data());
    raw.push_back(nullptr);
    execv(raw[0], raw.data());
    _exit(127);
  }
  return pid;
}

// The key file of every replica (a replica is not ready without a key provider): 32 random
// bytes, mode 0600, removed when the benchmark exits.
const std::string& BenchKeyFile() {
  static const struct KeyFile {
    std::string path = "/tmp/ql-cluster-bench-" + std::to_string(getpid()) + ".key";
    KeyFile() {
      const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      std::ifstream random("/dev/urandom", std::ios::binary);
      char key[32];
      if (fd < 0 || !random.read(key, sizeof key) || write(fd, key, sizeof key) != sizeof key) {
        Die("cannot write the key file " + path);
      }
      close(fd);
    }
    ~KeyFile() { unlink(path.c_str()); }
  } key_file;
  return key_file.path;
}

Replica SpawnReplica(const std::string& bin, const std::string& url, const std::string& log,
                     const std::vector<std::string>& extra) {
  Replica r;
  r.port = FreePort();
  std::vector<std::string> argv = {bin + "/ql-cluster", "serve",
                                   "--database-url",    url,
                                   "--listen",          "127.0.0.1:" + std::to_string(r.port),
                                   "--secret-key-file", BenchKeyFile()};
  argv.insert(argv.end(), extra.begin(), extra.end());
  r.pid = Spawn(argv, log);
  return r;
}

void WaitReady(const Replica& r, const std::string& log) {
  const auto t0 = Steady::now();
  while (true) {
    httplib::Client c("127.0.0.1", r.port);
    c.set_connection_timeout(0, 200'000);
    auto res = c.Get("/readyz");
    if (res && res->status == 200) return;
    if (Steady::now() - t0 > std::chrono::seconds(60)) {
      Die("replica did not become ready; see " + log);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

double Scrape(const Replica& r, const std::string& series) {
  httplib::Client c("127.0.0.1", r.port);
  auto res = c.Get("/metrics");
  if (!res) return 0;
  std::stringstream ss(res->body);
  std::string line;
  while (std::getline(ss, line)) {
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  }
  return 0;
}

void StopReplica(Replica& r, int sig = SIGTERM) {
  if (r.pid <= 0) return;
  kill(r.pid, sig);
  int st = 0;
  waitpid(r.pid, &st, 0);
  r.pid = -1;
}

// ---------------------------------------------------------------------------------------------
// Databases

// Builds database `tmpl` with `n` triggers on `expression` whose cursors sit far in the future.
void BuildTemplate(PostgresServer& server, const std::string& tmpl, int n,
                   const std::string& expression = "0 0 0 1 1 *") {
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
    // By default yearly: exactly one occurrence per trigger here.
    trigger.expression = expression;
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
      "h.updated_at_ms, h.name || '-' || c.id, NULL FROM clone c, ql3.trigger_heads h;"
      "INSERT INTO ql3.trigger_revisions SELECT c.id, 1, r.project_id, c.mutation, r.task_id, "
      "r.task_revision, r.task_digest, r.expression, r.timezone, r.misfire, r.enabled, "
      "r.content_digest, r.created_at_ms FROM clone c, ql3.trigger_revisions r;"
      "INSERT INTO ql3.trigger_schedules SELECT c.id, s.project_id, 1, true, NULL, NULL, 1, "
      "s.published_at_ms, false, NULL, NULL, 0, NULL, s.updated_at_ms "
      "FROM clone c, ql3.trigger_schedules s WHERE s.trigger_id <> c.id;"
      "UPDATE ql3.trigger_schedules SET next_fire_at_ms = 4102444800000;"  // 2100-01-01
      "COMMIT;");
  // Only the tables seeded here: the run tables stay as a fresh migration leaves them (never
  // analyzed). Statistics of an empty, analyzed `runs` would make PostgreSQL plan its foreign
  // key checks as sequential scans for as long as a connection lives, which no deployment with
  // history sees.
  sql.Run(
      "VACUUM ANALYZE ql3.trigger_schedules, ql3.trigger_heads, ql3.trigger_revisions, "
      "ql3.projects, ql3.task_heads, ql3.task_revisions, ql3.execution_revisions");
  if (sql.Number("SELECT count(*) FROM ql3.trigger_schedules") != n) Die("seeding failed");
}

void CopyDatabase(PostgresServer& server, const std::string& tmpl, const std::string& db) {
  Sql postgres(server, "postgres");
  postgres.Run("CREATE DATABASE " + db + " TEMPLATE " + tmpl + " OWNER ql3_migration");
  postgres.Run("REVOKE ALL ON DATABASE " + db + " FROM PUBLIC; GRANT CONNECT ON DATABASE " + db +
               " TO ql3_runtime, ql3_admin, ql3_worker_ingress");
}

void DropDatabase(PostgresServer& server, const std::string& db) {
  Sql postgres(server, "postgres");
  postgres.Run("DROP DATABASE IF EXISTS " + db + " WITH (FORCE)");
}

std::string BenchLog(const std::string& db) { return "/tmp/ql-cluster-bench-" + db + ".log"; }

// Copies `tmpl` to `db` and starts `replicas` replicas with default flags on it; returns them
// once each is ready. Their output goes to BenchLog(db).
std::vector<Replica> StartOnCopy(PostgresServer& server, const std::string& bin,
                                 const std::string& tmpl, const std::string& db, int replicas) {
  CopyDatabase(server, tmpl, db);
  std::vector<Replica> running;
  for (int i = 0; i < replicas; ++i) {
    running.push_back(SpawnReplica(bin, server.Url("ql3_runtime", db), BenchLog(db), {}));
  }
  for (const Replica& r : running) WaitReady(r, BenchLog(db));
  return running;
}

// ---------------------------------------------------------------------------------------------
// Ceiling (pgbench)

// The admission's writes for `batch` occurrences in one transaction at `isolation`; each client
// works on its own slice of the schedule rows, as claimed rows are disjoint.
std::string AdmissionScript(Sql& sql, int batch, const std::string& isolation, int slice) {
  const std::string project = sql.Text("SELECT project_id FROM ql3.trigger_schedules LIMIT 1");
  const std::string task = sql.Text("SELECT task_id FROM ql3.execution_revisions LIMIT 1");
  const std::string digest = sql.Text("SELECT task_digest FROM ql3.execution_revisions LIMIT 1");
  const std::string exec = sql.Text("SELECT id FROM ql3.execution_revisions LIMIT 1");
  const std::string ids = "b.n BETWEEN :base AND :base + " + std::to_string(batch - 1);
  std::ostringstream s;
  s << "\\set base :client_id * " << slice << " + random(0, " << slice - batch << ")\n"
    << "BEGIN ISOLATION LEVEL " << isolation << ";\n"
    << "UPDATE ql3.trigger_schedules s SET next_fire_at_ms = s.next_fire_at_ms + 1000, "
       "last_scheduled_at_ms = s.next_fire_at_ms, state_version = s.state_version + 1, "
       "claim_owner = NULL, claim_token = NULL, claim_expires_at_ms = NULL, "
       "updated_at_ms = s.updated_at_ms + 1 FROM public.bench_ids b WHERE "
    << ids << " AND s.trigger_id = b.trigger_id;\n"
    << "WITH v AS (SELECT gen_random_uuid()::text AS id, gen_random_uuid()::text AS attempt_id, "
       "b.trigger_id, s.last_scheduled_at_ms AS scheduled FROM public.bench_ids b JOIN "
       "ql3.trigger_schedules s USING (trigger_id) WHERE "
    << ids
    << "), r AS (INSERT INTO ql3.runs (id, project_id, task_id, task_revision, task_digest, "
       "execution_revision_id, trigger_id, trigger_revision, scheduled_for_ms, trigger_type, "
       "status, version, event_sequence, priority, retry_of_run_id, created_at_ms, "
       "queued_at_ms, retry_max_attempts, retry_on_lost, retry_safety, retry_backoff_base_ms, "
       "retry_backoff_max_ms) SELECT id, '"
    << project << "', '" << task << "', 1, '" << digest << "', '" << exec
    << "', trigger_id, 1, scheduled, 'cron', "
       "'queued', 1, 2, 0, NULL, 0, 0, 1, false, 'unknown', 0, 0 FROM v RETURNING id) "
       "INSERT INTO ql3.run_attempts (id, run_id, attempt, status, executor_type, "
       "callback_sequence, created_at_ms) SELECT attempt_id, id, 1, 'claimed', 'remote_worker', "
       "0, 0 FROM v JOIN r USING (id);\n"
    << "COMMIT;\n";
  return s.str();
}

struct CeilingCell {
  int batch;
  std::string isolation;
  int clients;
  std::vector<double> rates;  // occurrences per second, one per repetition
  std::vector<double> failed;
};

// Runs pgbench once; returns {occurrences per second, failed transactions}.
std::pair<double, double> Pgbench(const PostgresServer& server, const std::string& db,
                                  const std::string& script, int batch, int clients, int seconds) {
  const std::string path = "/tmp/ql-bench-admission-" + std::to_string(getpid()) + ".sql";
  std::ofstream(path) << script;
  const std::string out_path = path + ".out";
  const std::string cmd = ql::testing::FindPostgresBinDir() + "/pgbench -n -h 127.0.0.1 -p " +
                          std::to_string(server.port()) + " -U " + PostgresServer::kSuperuser +
                          " -c " + std::to_string(clients) + " -j 2 -T " + std::to_string(seconds) +
                          " --max-tries=1000 -f " + path + " " + db + " > " + out_path + " 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    std::ifstream in(out_path);
    std::cerr << in.rdbuf();
    Die("pgbench failed");
  }
  std::ifstream in(out_path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::smatch m;
  double tps = 0, failed = 0;
  if (std::regex_search(text, m, std::regex(R"(tps = ([0-9.]+) \(without initial)"))) {
    tps = std::stod(m[1]);
  } else {
    std::cerr << text;
    Die("pgbench printed no tps");
  }
  if (std::regex_search(text, m, std::regex(R"(number of failed transactions: ([0-9]+))"))) {
    failed = std::stod(m[1]);
  }
  std::remove(path.c_str());
  std::remove(out_path.c_str());
  return {tps * batch, failed};
}

// With QL_BENCH_TRACE set and pg_stat_statements preloaded (--pg-setting
// "shared_preload_libraries = 'pg_stat_statements'"), a phase ends with the statements that
// took the most server time.
bool StartStatementTrace(Sql& sql) {
  if (std::getenv("QL_BENCH_TRACE") == nullptr) return false;
  if (sql.Texts("SELECT current_setting('shared_preload_libraries')")
          .front()
          .find("pg_stat_statements") == std::string::npos) {
    return false;
  }
  sql.Run("CREATE EXTENSION IF NOT EXISTS pg_stat_statements; SELECT pg_stat_statements_reset()");
  return true;
}

void PrintStatementTrace(Sql& sql) {
  for (const std::string& line : sql.Texts(
           "SELECT lpad(calls::text, 7) || ' calls ' || lpad(plans::text, 7) || ' plans ' || "
           "lpad(round(total_exec_time)::text, 7) || "
           "' ms ' || lpad(round(mean_exec_time::numeric, 3)::text, 9) || ' ms/call  plan ' || "
           "lpad(round(mean_plan_time::numeric, 3)::text, 8) || ' ms  ' || "
           "left(regexp_replace(query, '\\s+', ' ', 'g'), 140) FROM pg_stat_statements "
           "ORDER BY total_exec_time + total_plan_time DESC LIMIT 40")) {
    std::cerr << line << "\n";
  }
}

// ---------------------------------------------------------------------------------------------
// Admission burst

struct Burst {
  double rate = 0, p50 = 0, p99 = 0, max = 0, raced = 0, retried = 0, dups = 0, seconds = 0;
  std::map<std::string, double> dead;  // table → dead tuples after the burst
  double purged = 0;     // older (manual) runs that retention deleted during the burst
  double remaining = 0;  // older runs still there when the burst was admitted
};

// The runs a burst admits; older runs seeded for the retention phase are manual.
constexpr char kBurstRuns[] = "ql3.runs WHERE trigger_type = 'cron'";
constexpr char kOldRuns[] = "SELECT count(*) FROM ql3.runs WHERE trigger_type = 'manual'";

// `before_start` runs on the copied database before any replica starts.
Burst RunBurst(PostgresServer& server, const std::string& bin, const std::string& tmpl,
               const std::string& db, int replicas, int n, const std::string& isolation,
               const std::function<void(Sql&)>& before_start = {}) {
  CopyDatabase(server, tmpl, db);
  if (before_start) {
    Sql setup(server, db);
    before_start(setup);
  }
  std::vector<Replica> running;
  const std::string log = "/tmp/ql-cluster-bench-" + db + ".log";
  for (int i = 0; i < replicas; ++i) {
    running.push_back(SpawnReplica(bin, server.Url("ql3_runtime", db), log,
                                   {"--admission-isolation", isolation}));
  }
  for (const Replica& r : running) WaitReady(r, log);
  Sql sql(server, db);
  // Every row falls due at the same instant, two seconds from now by the database clock.
  const double due =
      sql.Number("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint + 2000");
  sql.Run("UPDATE ql3.trigger_schedules SET next_fire_at_ms = " +
          std::to_string(static_cast<int64_t>(due)));
  const auto deadline = Steady::now() + std::chrono::seconds(600);
  const bool trace = std::getenv("QL_BENCH_TRACE") != nullptr;
  const bool statements = StartStatementTrace(sql);
  const double old_at_due = sql.Number(kOldRuns);
  // Polls a probe at the front of the due index (cheap) rather than counting runs, so the
  // bench does not compete with the replicas for the database's CPU; the figures come from the
  // rows' own times afterwards.
  const std::string still_due =
      "SELECT count(*) FROM (SELECT 1 FROM ql3.trigger_schedules WHERE enabled AND NOT exhausted "
      "AND next_fire_at_ms <= " +
      std::to_string(static_cast<int64_t>(due)) + " LIMIT 1) d";
  for (bool pending = true; pending;) {
    if (Steady::now() > deadline) Die("not every occurrence was admitted in 600 s; see " + log);
    std::this_thread::sleep_for(std::chrono::milliseconds(trace ? 250 : 100));
    pending = sql.Number(still_due) > 0;
    if (trace) {
      const double admitted = sql.Number("SELECT count(*) FROM ql3.runs");
      std::cerr << "t="
                << Fixed(sql.Number("SELECT (extract(epoch FROM clock_timestamp()) * "
                                    "1000)::bigint") -
                             due,
                         0)
                << "ms admitted=" << admitted << "\n";
    }
  }
  if (statements) PrintStatementTrace(sql);
  Burst f;
  f.remaining = sql.Number(kOldRuns);
  f.purged = old_at_due - f.remaining;
  if (sql.Number(std::string("SELECT count(*) FROM ") + kBurstRuns) != n) {
    Die("the burst did not admit every row");
  }
  if (trace) {
    for (const Replica& r : running) {
      std::ifstream stat("/proc/" + std::to_string(r.pid) + "/stat");
      std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
      std::stringstream fields(text.substr(text.rfind(')') + 2));
      std::vector<std::string> v{std::istream_iterator<std::string>(fields), {}};
      if (v.size() > 12) {
        std::cerr << "replica " << r.pid << " cpu "
                  << (std::stod(v[11]) + std::stod(v[12])) / sysconf(_SC_CLK_TCK) << " s\n";
      }
    }
  }
  for (Replica& r : running) {
    f.raced += Scrape(r, "ql_scheduler_occurrences_total{outcome=\"raced\"}");
    f.retried += Scrape(r, "ql_db_transaction_retries");
  }
  for (Replica& r : running) StopReplica(r);
  const std::string runs = kBurstRuns;
  const double last = sql.Number("SELECT max(created_at_ms) FROM " + runs);
  f.seconds = (last - due) / 1000.0;
  f.rate = n / std::max(f.seconds, 0.001);
  f.p50 = sql.Number(
              "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY created_at_ms - "
              "scheduled_for_ms) FROM " + runs) /
          1000.0;
  f.p99 = sql.Number(
              "SELECT percentile_cont(0.99) WITHIN GROUP (ORDER BY created_at_ms - "
              "scheduled_for_ms) FROM " + runs) /
          1000.0;
  f.max = sql.Number("SELECT max(created_at_ms - scheduled_for_ms) FROM " + runs) / 1000.0;
  f.dups = sql.Number("SELECT count(*) FROM (SELECT trigger_id, scheduled_for_ms FROM " + runs +
                      " GROUP BY 1, 2 HAVING count(*) > 1) d");
  // A cron admission stores no events: they are derived from the run row.
  if (sql.Number("SELECT count(*) FROM ql3.runs r WHERE r.trigger_type = 'cron' AND (EXISTS "
                 "(SELECT 1 FROM ql3.run_events e WHERE e.run_id = r.id) OR (SELECT count(*) "
                 "FROM ql3.run_attempts a WHERE a.run_id = r.id) <> 1)") != 0) {
    Die("a run without exactly one attempt, or with stored admission events");
  }
  // The replicas flushed their statistics when they exited.
  for (const char* table : {"trigger_schedules", "runs", "run_attempts", "run_events"}) {
    f.dead[table] = sql.Number(std::string("SELECT n_dead_tup FROM pg_stat_user_tables WHERE "
                                           "schemaname = 'ql3' AND relname = '") +
                               table + "'");
  }
  DropDatabase(server, db);
  return f;
}

// ---------------------------------------------------------------------------------------------
// Claim latency with many rows

struct ClaimFigures {
  double p50_ms = 0, p99_ms = 0;
  std::vector<std::string> plan;
  bool uses_index = false;
};

ClaimFigures MeasureClaims(PostgresServer& server, const std::string& db, int rows, int due) {
  Sql sql(server, db);
  const double now = sql.Number("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint");
  sql.Run("UPDATE ql3.trigger_schedules SET next_fire_at_ms = " +
          std::to_string(static_cast<int64_t>(now - 1000)) +
          " WHERE trigger_id IN (SELECT trigger_id FROM ql3.trigger_schedules ORDER BY "
          "trigger_id LIMIT " +
          std::to_string(due) + ")");
  sql.Run("VACUUM ANALYZE");
  ClaimFigures f;
  // The plan, executed and rolled back.
  std::string statement(ql::PostgresClusterSchedules::ClaimStatement(16));
  // As the replicas run it: a generic plan, prepared once per connection.
  sql.Run(
      "BEGIN; SET LOCAL plan_cache_mode = force_generic_plan; PREPARE claim(text, uuid, bigint, "
      "text) AS " +
      statement + ";");
  for (const std::string& line :
       sql.Lines("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY ON) EXECUTE claim('explain', "
                 "gen_random_uuid(), 30000, 'remote_worker')")) {
    f.plan.push_back(line);
    if (line.find("Index Scan using trigger_schedules_due") != std::string::npos ||
        line.find("Index Only Scan using trigger_schedules_due") != std::string::npos) {
      f.uses_index = true;
    }
  }
  sql.Run("ROLLBACK;");
  if (sql.Number("SELECT count(*) FROM ql3.trigger_schedules") != rows) Die("claim rows drifted");

  ql::pg::PoolOptions pool_options;
  pool_options.url = server.Url("ql3_runtime", db);
  pool_options.max_connections = 2;
  auto pool = Must(ql::pg::Pool::Create(pool_options), "runtime pool");
  ql::PostgresClusterSchedules schedules(*pool);
  std::vector<double> latencies;
  const bool statements = StartStatementTrace(sql);
  for (int i = 0; i < 300; ++i) {
    ql::ClaimRequest request;
    request.owner = "bench";
    request.token = ql::NewUuidV7(ql::SystemClock().NowMs(), ql::SecureRandom());
    request.limit = 16;
    const auto t0 = Steady::now();
    auto claims = Must(schedules.ClaimDueSchedules(request), "claim");
    latencies.push_back(std::chrono::duration<double, std::milli>(Steady::now() - t0).count());
    if (claims.size() != 16) Die("a claim came back short");
    // Untimed: the rows move on as an admission would move them (cursor advanced, claim
    // cleared), so the next claim meets the due index as a running cluster leaves it.
    sql.Run(
        "UPDATE ql3.trigger_schedules SET next_fire_at_ms = 4102444800000, claim_owner = NULL, "
        "claim_token = NULL, claim_expires_at_ms = NULL, state_version = state_version + 1 "
        "WHERE claim_owner = 'bench'");
  }
  if (statements) PrintStatementTrace(sql);
  f.p50_ms = Percentile(latencies, 0.5);
  f.p99_ms = Percentile(latencies, 0.99);
  return f;
}

// ---------------------------------------------------------------------------------------------
// Takeover

struct Takeover {
  double seconds = 0;  // kill → first admission of a victim's row by the survivor
  int held = 0;
};

Takeover MeasureTakeover(PostgresServer& server, const std::string& bin, const std::string& tmpl,
                         const std::string& db, int64_t lease_ms) {
  CopyDatabase(server, tmpl, db);
  const std::string log = "/tmp/ql-cluster-bench-" + db + ".log";
  const std::vector<std::string> args = {"--lease-ms", std::to_string(lease_ms),
                                         "--claims-per-round", "256"};
  Sql sql(server, db);
  Replica victim = SpawnReplica(bin, server.Url("ql3_runtime", db), log, args);
  WaitReady(victim, log);
  sql.Run(
      "UPDATE ql3.trigger_schedules SET next_fire_at_ms = "
      "(extract(epoch FROM clock_timestamp()) * 1000)::bigint + 500");
  Takeover t;
  double killed_at = 0;
  const auto deadline = Steady::now() + std::chrono::seconds(60);
  while (Steady::now() < deadline) {
    if (sql.Number("SELECT count(*) FROM ql3.trigger_schedules WHERE claim_owner IS NOT NULL") >
        0) {
      StopReplica(victim, SIGKILL);
      killed_at = sql.Number("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint");
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (killed_at == 0) Die("the victim never held a claim");
  sql.Run(
      "CREATE TABLE public.bench_held AS SELECT trigger_id, next_fire_at_ms FROM "
      "ql3.trigger_schedules WHERE claim_owner IS NOT NULL");
  t.held = static_cast<int>(sql.Number("SELECT count(*) FROM public.bench_held"));
  Replica survivor = SpawnReplica(bin, server.Url("ql3_runtime", db), log, args);
  WaitReady(survivor, log);
  const std::string first_admission =
      "SELECT min(r.created_at_ms) FROM ql3.runs r JOIN public.bench_held h ON h.trigger_id = "
      "r.trigger_id AND h.next_fire_at_ms = r.scheduled_for_ms";
  while (sql.Number(first_admission) == 0) {
    if (Steady::now() > deadline + std::chrono::seconds(60)) Die("no takeover; see " + log);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  t.seconds = (sql.Number(first_admission) - killed_at) / 1000.0;
  StopReplica(survivor);
  DropDatabase(server, db);
  return t;
}

// ---------------------------------------------------------------------------------------------
// Dispatch

// Runs `argv` to its end and returns its standard output.
std::string Capture(const std::vector<std::string>& argv) {
  std::string cmd;
  for (const std::string& a : argv) cmd += "'" + a + "' ";
  FILE* pipe = popen((cmd + "2>&1").c_str(), "r");
  if (pipe == nullptr) Die("cannot run " + argv.front());
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, n);
  if (pclose(pipe) != 0) Die(argv.front() + " failed: " + out);
  return out;
}

// Returns the CPU time the machine has spent busy since boot, all cores together: every field of
// /proc/stat's first line except idle, iowait and steal.
double BusyCpuSeconds() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  in >> cpu;
  double busy = 0;
  for (int field = 0; field < 8; ++field) {
    double ticks = 0;
    if (!(in >> ticks)) break;
    if (field != 3 && field != 4 && field != 7) busy += ticks;  // idle, iowait, steal
  }
  return busy / static_cast<double>(sysconf(_SC_CLK_TCK));
}

pid_t SpawnWorker(const std::string& bin, int port, const std::string& token_file, int slots,
                  const std::string& work_dir, const std::string& log,
                  const std::string& isolation = "auto") {
  return Spawn(
      {bin + "/ql-worker", "--control", "http://127.0.0.1:" + std::to_string(port), "--token-file",
       token_file, "--slots", std::to_string(slots), "--work-dir", work_dir, "--isolation",
       isolation},
      log);
}

// Retention keeps every run of every project: a phase that counts its ended runs must not see a
// replica's purge take some of them (a task keeps 1,000 runs by default).
void KeepEveryRun(Sql& sql) {
  sql.Run(
      "INSERT INTO ql3.project_retention (project_id, keep_days, keep_runs, version, "
      "updated_at_ms) SELECT id, 36500, 1000000, 1, 0 FROM ql3.projects");
}

struct Dispatch {
  double rate = 0;                // runs ended per second, first lease → last end
  double p50_ms = 0, p99_ms = 0;  // per run: lease granted → run ended
  double slot_ms = 0;             // slot time per run: slots × window / runs
  double cpu_ms = 0;              // busy CPU time of the whole machine per run (/proc/stat)
  double max_queued = 0;          // queued runs, the largest sample
  double succeeded = 0, extra_attempts = 0;
};

// Real `ql-cluster serve` replicas with worker listeners and real `ql-worker`s (spread over
// the replicas' listeners), all logging to one file.
struct Fleet {
  std::vector<Replica> replicas;
  std::vector<pid_t> workers;
  std::string dir;  // the workers' token files and work directories
  std::string log;
};

// Starts `replicas` replicas on `db`, then `workers` workers with `slots` slots each and the
// given --isolation; returns once every replica is ready and every worker has a session.
Fleet StartFleet(PostgresServer& server, const std::string& bin, const std::string& db,
                 int replicas, int workers, int slots, const std::string& isolation) {
  Fleet fleet;
  fleet.log = BenchLog(db);
  std::vector<int> worker_ports;
  for (int i = 0; i < replicas; ++i) {
    const int worker_port = FreePort();
    worker_ports.push_back(worker_port);
    fleet.replicas.push_back(
        SpawnReplica(bin, server.Url("ql3_runtime", db), fleet.log,
                     {"--worker-database-url", server.Url("ql3_worker_ingress", db),
                      "--worker-listen", "127.0.0.1:" + std::to_string(worker_port)}));
  }
  for (const Replica& r : fleet.replicas) WaitReady(r, fleet.log);
  char dir_template[] = "/tmp/ql-bench-workers-XXXXXX";
  fleet.dir = mkdtemp(dir_template);
  for (int i = 0; i < workers; ++i) {
    const std::string name = "bench-worker-" + std::to_string(i);
    std::string out = Capture({bin + "/ql-cluster", "worker-token", "create", name,
                               "--database-url", server.Url("ql3_admin", db)});
    while (!out.empty() && out.back() == '\n') out.pop_back();
    const std::string token_file = fleet.dir + "/" + name + ".token";
    std::ofstream(token_file) << out.substr(out.rfind('\n') + 1) << "\n";
    chmod(token_file.c_str(), 0600);
    fleet.workers.push_back(SpawnWorker(bin, worker_ports[i % replicas], token_file, slots,
                                        fleet.dir + "/" + name, fleet.log, isolation));
  }
  Sql sql(server, db);
  const auto deadline = Steady::now() + std::chrono::seconds(600);
  while (sql.Number("SELECT count(*) FROM ql3.worker_sessions WHERE status = 'active'") < workers) {
    if (Steady::now() > deadline) Die("the workers did not register; see " + fleet.log);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return fleet;
}

// Stops the workers (SIGTERM, waited for), then the replicas; removes the workers' directory.
void StopFleet(Fleet& fleet) {
  for (pid_t pid : fleet.workers) {
    kill(pid, SIGTERM);
    int st = 0;
    waitpid(pid, &st, 0);
  }
  fleet.workers.clear();
  for (Replica& r : fleet.replicas) StopReplica(r);
  std::error_code ec;
  std::filesystem::remove_all(fleet.dir, ec);
}

// `runs` occurrences of a trivial command (`true`) fall due in the same second; `replicas`
// real `ql-cluster serve` replicas admit them and `workers` real `ql-worker`s with `slots` slots
// each (spread over the replicas' worker listeners) run them to their ends.
// `isolation` is the workers' --isolation: "auto" confines every command (the default), "off"
// runs it as the worker's user.
Dispatch RunDispatch(PostgresServer& server, const std::string& bin, const std::string& tmpl,
                     const std::string& db, int replicas, int workers, int slots, int runs,
                     const std::string& isolation = "auto") {
  CopyDatabase(server, tmpl, db);
  {
    Sql setup(server, db);
    // The runs belong to one task: more than --dispatch-runs 1000 would outgrow what a task
    // keeps by default.
    KeepEveryRun(setup);
  }
  Fleet fleet = StartFleet(server, bin, db, replicas, workers, slots, isolation);
  const std::string& log = fleet.log;
  Sql sql(server, db);
  const auto deadline = Steady::now() + std::chrono::seconds(600);
  // `runs` rows fall due one second from now by the database clock; the rest stay parked.
  sql.Run(
      "UPDATE ql3.trigger_schedules SET next_fire_at_ms = "
      "(extract(epoch FROM clock_timestamp()) * 1000)::bigint + 1000 WHERE trigger_id IN "
      "(SELECT trigger_id FROM ql3.trigger_schedules ORDER BY trigger_id LIMIT " +
      std::to_string(runs) + ")");
  Dispatch f;
  const bool trace = std::getenv("QL_BENCH_TRACE") != nullptr;
  const bool statements = StartStatementTrace(sql);
  const double busy_before = BusyCpuSeconds();
  for (double ended = 0; ended < runs;) {
    if (Steady::now() > deadline) Die("not every run ended in 600 s; see " + log);
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    f.max_queued =
        std::max(f.max_queued, sql.Number("SELECT count(*) FROM ql3.runs WHERE status = "
                                          "'queued' AND cancel_requested_at_ms IS NULL"));
    ended = sql.Number("SELECT count(*) FROM ql3.runs WHERE finished_at_ms IS NOT NULL");
    if (trace) std::cerr << "ended=" << ended << " max_queued=" << f.max_queued << "\n";
  }
  // Every process of the machine counts: both replicas, both workers with their supervisors and
  // commands, PostgreSQL, and this bench's own polling.
  f.cpu_ms = 1000.0 * (BusyCpuSeconds() - busy_before) / runs;
  if (statements) PrintStatementTrace(sql);
  StopFleet(fleet);
  const std::string per_run =
      "SELECT r.finished_at_ms - l.granted_at_ms FROM ql3.runs r JOIN "
      "ql3.run_dispatch_leases l ON l.run_id = r.id";
  const double first = sql.Number("SELECT min(granted_at_ms) FROM ql3.run_dispatch_leases");
  const double last = sql.Number("SELECT max(finished_at_ms) FROM ql3.runs");
  const double window_s = std::max(last - first, 1.0) / 1000.0;
  f.rate = runs / window_s;
  f.slot_ms = 1000.0 * window_s * workers * slots / runs;
  f.p50_ms = sql.Number("SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY x) FROM (" + per_run +
                        ") q(x)");
  f.p99_ms = sql.Number("SELECT percentile_cont(0.99) WITHIN GROUP (ORDER BY x) FROM (" + per_run +
                        ") q(x)");
  f.succeeded = sql.Number("SELECT count(*) FROM ql3.runs WHERE status = 'succeeded'");
  // Exactly once: one attempt per run, leased once.
  f.extra_attempts =
      sql.Number("SELECT count(*) FROM ql3.run_attempts") - runs +
      sql.Number("SELECT count(*) FROM ql3.run_events WHERE type = 'attempt.leased'") - runs;
  DropDatabase(server, db);
  return f;
}

// ---------------------------------------------------------------------------------------------
// Fair shares between projects

struct Fairness {
  double b_p50_ms = 0, b_p99_ms = 0, b_max_ms = 0;  // B's runs: queued → lease granted
  double a_p50_ms = 0;                              // A's runs, the same
  double a_backlog_median = 0, a_backlog_min = 0;   // A's queued runs as each B run starts
  double not_succeeded = 0, extra_attempts = 0;
};

// Project A (the default project of `tmpl`, whose `a_runs` triggers run `true`) has every
// occurrence fall due at once; once all are queued, project B (created here, in-process, with a
// task `true`) starts `b_runs` manual runs, one every `gap_ms`, while A's backlog drains through
// 1 replica and 2 real `ql-worker`s x 2 slots in pool `default` (which serves every project,
// weight 1). Every run is then waited for to its end.
Fairness RunFairness(PostgresServer& server, const std::string& bin, const std::string& tmpl,
                     const std::string& db, int a_runs, int b_runs, int gap_ms) {
  CopyDatabase(server, tmpl, db);
  const bool trace = std::getenv("QL_BENCH_TRACE") != nullptr;
  Sql sql(server, db);
  const std::string a = sql.Text("SELECT project_id FROM ql3.trigger_schedules LIMIT 1");
  std::string b;
  std::vector<double> backlog;  // A's queued runs, sampled as each B run starts
  {
    // The bench's own store and control service, as BuildTemplate opens them: project B, its
    // task and its runs are written as `ql-cluster serve` would write them for the system.
    ql::Clock& clock = ql::SystemClock();
    ql::PostgresStoreOptions options;
    options.runtime.url = server.Url("ql3_runtime", db);
    options.admin = ql::pg::PoolOptions{};
    options.admin->url = server.Url("ql3_admin", db);
    auto store = Must(ql::PostgresStore::Open(options), "open store");
    ql::ControlOptions control_options;
    control_options.executor_type = "remote_worker";
    ql::ControlService control(*store, clock, ql::SecureRandom(), control_options);
    const ql::Caller system;  // no principal: the system itself
    b = Must(control.governance().CreateProject(system, "bench-b", "Bench B"), "create project B")
            .id;
    ql::Caller in_b;
    in_b.project = b;
    ql::TaskWrite task;
    task.body = {{"name", "bench-b"},
                 {"spec", {{"command", {{"kind", "shell"}, {"command", "true"}}}}}};
    ql::StartRunRequest start;
    start.task_id = Must(control.PublishTask(task, in_b), "publish B's task").task.head.task_id;
    // All of A's runs belong to one task, beyond the 1,000 a task keeps by default.
    KeepEveryRun(sql);

    Fleet fleet = StartFleet(server, bin, db, 1, 2, 2, "auto");
    const auto deadline = Steady::now() + std::chrono::seconds(600);
    // Every A occurrence falls due one second from now by the database clock.
    const std::string due = Fixed(
        sql.Number("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint + 1000"), 0);
    sql.Run("UPDATE ql3.trigger_schedules SET next_fire_at_ms = " + due);
    // A probe at the front of the due index, as in RunBurst: empty once all are queued.
    const std::string still_due =
        "SELECT count(*) FROM (SELECT 1 FROM ql3.trigger_schedules WHERE enabled AND NOT "
        "exhausted AND next_fire_at_ms <= " +
        due + " LIMIT 1) d";
    const std::string a_queued = "SELECT count(*) FROM ql3.runs WHERE project_id = '" + a +
                                 "' AND status = 'queued' AND cancel_requested_at_ms IS NULL";
    do {
      if (Steady::now() > deadline) {
        Die("A's occurrences were not admitted in 600 s; see " + fleet.log);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    } while (sql.Number(still_due) > 0);
    if (trace) std::cerr << "fairness: A admitted, " << sql.Number(a_queued) << " queued\n";
    // B's runs at a steady pace, each start on its own tick whatever the previous one cost.
    const auto first = Steady::now();
    for (int i = 0; i < b_runs; ++i) {
      std::this_thread::sleep_until(first + i * std::chrono::milliseconds(gap_ms));
      backlog.push_back(sql.Number(a_queued));
      Must(control.StartRun(start), "start a run of B");
    }
    const int runs = a_runs + b_runs;
    for (double ended = 0; ended < runs;) {
      if (Steady::now() > deadline) {
        Die(Fixed(ended, 0) + " of " + std::to_string(runs) + " runs ended in 600 s; see " +
            fleet.log);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
      ended = sql.Number("SELECT count(*) FROM ql3.runs WHERE finished_at_ms IS NOT NULL");
      if (trace) std::cerr << "fairness: ended=" << ended << "\n";
    }
    StopFleet(fleet);
  }
  Fairness f;
  f.a_backlog_median = Median(backlog);
  f.a_backlog_min = *std::min_element(backlog.begin(), backlog.end());
  // Queue wait: the run queued (its admission or manual start) → its lease granted.
  auto wait = [&](const std::string& aggregate, const std::string& project) {
    return sql.Number("SELECT " + aggregate +
                      " FROM (SELECT l.granted_at_ms - r.queued_at_ms FROM ql3.runs r JOIN "
                      "ql3.run_dispatch_leases l ON l.run_id = r.id WHERE r.project_id = '" +
                      project + "') q(x)");
  };
  f.b_p50_ms = wait("percentile_cont(0.5) WITHIN GROUP (ORDER BY x)", b);
  f.b_p99_ms = wait("percentile_cont(0.99) WITHIN GROUP (ORDER BY x)", b);
  f.b_max_ms = wait("max(x)", b);
  f.a_p50_ms = wait("percentile_cont(0.5) WITHIN GROUP (ORDER BY x)", a);
  const int runs = a_runs + b_runs;
  if (sql.Number("SELECT count(*) FROM ql3.runs WHERE project_id = '" + b + "'") != b_runs) {
    Die("project B does not have its " + std::to_string(b_runs) + " runs");
  }
  f.not_succeeded = runs - sql.Number("SELECT count(*) FROM ql3.runs WHERE status = 'succeeded'");
  // Exactly once: one attempt per run, leased once.
  f.extra_attempts =
      sql.Number("SELECT count(*) FROM ql3.run_attempts") - runs +
      sql.Number("SELECT count(*) FROM ql3.run_events WHERE type = 'attempt.leased'") - runs;
  DropDatabase(server, db);
  return f;
}

// ---------------------------------------------------------------------------------------------
// Minute boundary

struct Boundary {
  double p50 = 0, p99 = 0, max = 0;  // seconds, boundary → COMMIT of the run row
  std::vector<double> rates;         // admissions per second, one per boundary
  double dups = 0, admitted = 0;
};

// `n` triggers on `* * * * *` and `replicas` real replicas with the default admission isolation;
// lag of every occurrence of `boundaries` consecutive minute boundaries, from the boundary to
// the commit timestamp of its run row (track_commit_timestamp).
Boundary RunBoundaries(PostgresServer& server, const std::string& bin, const std::string& tmpl,
                       const std::string& db, int replicas, int n, int boundaries) {
  const std::string log = BenchLog(db);
  std::vector<Replica> running = StartOnCopy(server, bin, tmpl, db, replicas);
  Sql sql(server, db);
  // The first boundary at least 5 s away by the database clock.
  const int64_t first = static_cast<int64_t>(sql.Number(
      "SELECT (ceil(((extract(epoch FROM clock_timestamp()) * 1000)::bigint + 5000) / 60000.0) "
      "* 60000)::bigint"));
  const int64_t last = first + int64_t{60'000} * (boundaries - 1);
  sql.Run("UPDATE ql3.trigger_schedules SET next_fire_at_ms = " + std::to_string(first));
  const std::string still_due =
      "SELECT count(*) FROM (SELECT 1 FROM ql3.trigger_schedules WHERE enabled AND NOT exhausted "
      "AND next_fire_at_ms <= " +
      std::to_string(last) + " LIMIT 1) d";
  const auto deadline = Steady::now() + std::chrono::seconds(120 + 60 * boundaries);
  while (sql.Number(still_due) > 0) {
    if (Steady::now() > deadline) Die("boundaries not admitted in time; see " + log);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  for (Replica& r : running) StopReplica(r);
  Boundary b;
  const std::string lag =
      "SELECT (extract(epoch FROM pg_xact_commit_timestamp(xmin)) * 1000 - scheduled_for_ms) / "
      "1000.0 AS lag FROM ql3.runs WHERE scheduled_for_ms BETWEEN " +
      std::to_string(first) + " AND " + std::to_string(last);
  b.p50 =
      sql.Number("SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY lag) FROM (" + lag + ") q");
  b.p99 =
      sql.Number("SELECT percentile_cont(0.99) WITHIN GROUP (ORDER BY lag) FROM (" + lag + ") q");
  b.max = sql.Number("SELECT max(lag) FROM (" + lag + ") q");
  b.admitted = sql.Number("SELECT count(*) FROM (" + lag + ") q");
  for (const std::string& rate : sql.Texts(
           "SELECT count(*) / greatest(max(lag), 0.001) FROM (SELECT scheduled_for_ms, (extract("
           "epoch FROM pg_xact_commit_timestamp(xmin)) * 1000 - scheduled_for_ms) / 1000.0 AS lag "
           "FROM ql3.runs WHERE scheduled_for_ms BETWEEN " +
           std::to_string(first) + " AND " + std::to_string(last) +
           ") q GROUP BY scheduled_for_ms ORDER BY scheduled_for_ms")) {
    b.rates.push_back(std::stod(rate));
  }
  b.dups = sql.Number(
      "SELECT count(*) FROM (SELECT trigger_id, scheduled_for_ms FROM ql3.runs "
      "GROUP BY 1, 2 HAVING count(*) > 1) d");
  DropDatabase(server, db);
  return b;
}

// ---------------------------------------------------------------------------------------------
// Storage per admitted run

// The run tables, whose growth an admission causes.
constexpr char kRunTables[] =
    "('runs', 'run_attempts', 'run_events', 'run_dispatch_leases', 'run_log_chunks')";

// Returns relation → bytes (pg_relation_size, TOAST included with its table) of the run tables
// and each of their indexes.
std::map<std::string, double> RunRelationSizes(Sql& sql) {
  std::map<std::string, double> out;
  for (const std::string& line : sql.Texts(
           std::string("SELECT c.relname || '=' || (pg_relation_size(c.oid) + CASE WHEN "
                       "c.reltoastrelid <> 0 THEN pg_total_relation_size(c.reltoastrelid) ELSE 0 "
                       "END) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                       "LEFT JOIN pg_index i ON i.indexrelid = c.oid LEFT JOIN pg_class t ON "
                       "t.oid = i.indrelid WHERE n.nspname = 'ql3' AND coalesce(t.relname, "
                       "c.relname) IN ") +
           kRunTables + " AND c.relkind IN ('r', 'i')")) {
    const size_t eq = line.rfind('=');
    out[line.substr(0, eq)] = std::stod(line.substr(eq + 1));
  }
  return out;
}

// `n` occurrences fall due at once and one replica admits them; returns relation → bytes each
// admitted run added (pg_total_relation_size of the run tables, indexes included, before any
// vacuum or retention), "total" for the sum.
std::map<std::string, double> MeasureStorage(PostgresServer& server, const std::string& bin,
                                             const std::string& tmpl, const std::string& db,
                                             int n) {
  CopyDatabase(server, tmpl, db);
  Sql sql(server, db);
  const std::string total =
      std::string(
          "SELECT sum(pg_total_relation_size(('ql3.' || relname)::regclass)) FROM "
          "pg_class WHERE relnamespace = 'ql3'::regnamespace AND relkind = 'r' AND "
          "relname IN ") +
      kRunTables;
  const double total_before = sql.Number(total);
  const std::map<std::string, double> before = RunRelationSizes(sql);
  const std::string log = "/tmp/ql-cluster-bench-" + db + ".log";
  Replica replica = SpawnReplica(bin, server.Url("ql3_runtime", db), log, {});
  WaitReady(replica, log);
  const int64_t due = static_cast<int64_t>(
      sql.Number("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint + 1000"));
  sql.Run("UPDATE ql3.trigger_schedules SET next_fire_at_ms = " + std::to_string(due));
  const auto deadline = Steady::now() + std::chrono::seconds(600);
  while (sql.Number("SELECT count(*) FROM (SELECT 1 FROM ql3.trigger_schedules WHERE "
                    "next_fire_at_ms <= " +
                    std::to_string(due) + " LIMIT 1) d") > 0) {
    if (Steady::now() > deadline) Die("the storage burst was not admitted; see " + log);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  StopReplica(replica);
  if (sql.Number("SELECT count(*) FROM ql3.runs") != n) Die("the storage burst admitted wrong");
  std::map<std::string, double> out;
  for (const auto& [relation, bytes] : RunRelationSizes(sql)) {
    const auto it = before.find(relation);
    out[relation] = (bytes - (it == before.end() ? 0 : it->second)) / n;
  }
  out["total"] = (sql.Number(total) - total_before) / n;
  DropDatabase(server, db);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Retention

constexpr int kOldRunChunks = 2;  // log chunks of 1 KiB per seeded run

// Builds database `db` from `tmpl` with `runs` finished runs of its task, created and finished
// 60 days ago (beyond the default keep_days of 30): each with its retry policy, one attempt,
// four events and kOldRunChunks log chunks, as a worker's run leaves them. The run tables are
// analyzed, as a deployment with that history would have them.
void BuildRetentionTemplate(PostgresServer& server, const std::string& tmpl,
                            const std::string& db, int runs) {
  CopyDatabase(server, tmpl, db);
  Sql sql(server, db);
  const std::string task = sql.Text("SELECT task_id FROM ql3.execution_revisions LIMIT 1");
  const std::string project = sql.Text("SELECT project_id FROM ql3.task_heads LIMIT 1");
  const std::string digest = sql.Text("SELECT task_digest FROM ql3.execution_revisions LIMIT 1");
  const std::string exec = sql.Text("SELECT id FROM ql3.execution_revisions LIMIT 1");
  const std::string base =
      "((extract(epoch FROM clock_timestamp()) * 1000)::bigint - 60::bigint * 86400000)";
  sql.Run(
      "BEGIN;"
      "CREATE TEMP TABLE old AS SELECT gen_random_uuid()::text AS id, gen_random_uuid()::text AS "
      "attempt_id, " + base + " + g * 10 AS at FROM generate_series(1, " + std::to_string(runs) +
      ") g;"
      "INSERT INTO ql3.runs (id, project_id, task_id, task_revision, task_digest, "
      "execution_revision_id, trigger_type, status, version, event_sequence, priority, "
      "created_at_ms, queued_at_ms, started_at_ms, finished_at_ms, exit_code, "
      "retry_max_attempts, retry_on_lost, retry_safety, retry_backoff_base_ms, "
      "retry_backoff_max_ms) SELECT id, '" +
      project + "', '" + task + "', 1, '" + digest + "', '" + exec +
      "', 'manual', 'succeeded', 4, 4, 0, at, at, at + 1, at + 5, 0, 1, false, 'unknown', 0, 0 "
      "FROM old;"
      "INSERT INTO ql3.run_attempts (id, run_id, attempt, status, executor_type, "
      "callback_sequence, created_at_ms, started_at_ms, finished_at_ms, exit_code) SELECT "
      "attempt_id, id, 1, 'succeeded', 'remote_worker', 0, at, at + 1, at + 5, 0 FROM old;"
      "INSERT INTO ql3.run_events (run_id, sequence, type, actor_type, attempt_id, payload_json, "
      "created_at_ms) SELECT id, e.seq, e.type, e.actor, CASE WHEN e.seq > 1 THEN attempt_id "
      "END, '{}', at FROM old, (VALUES (1, 'run.created', 'user'), (2, 'run.queued', 'user'), "
      "(3, 'attempt.started', 'worker'), (4, 'run.succeeded', 'worker')) e(seq, type, actor);"
      "INSERT INTO ql3.run_log_chunks (attempt_id, byte_offset, run_id, data, created_at_ms) "
      "SELECT attempt_id, (c - 1) * 1024, id, convert_to(repeat('a log line of 32 bytes, "
      "more.\n', 32), 'UTF8'), at FROM old, generate_series(1, " +
      std::to_string(kOldRunChunks) + ") c;"
      "COMMIT;");
  sql.Run(
      "VACUUM ANALYZE ql3.runs, ql3.run_attempts, ql3.run_events, ql3.run_log_chunks");
  if (sql.Number(kOldRuns) != runs) Die("seeding old runs failed");
}

struct PurgeFigures {
  double runs_per_s = 0, chunks_per_s = 0, seconds = 0;
};

// `replicas` real replicas start on a copy of `tmpl` (seeded by BuildRetentionTemplate) and
// their retention jobs purge every old run. The rate is taken from the purge's own audit facts
// (one per committed batch): runs after the first batch / first → last batch commit.
PurgeFigures MeasurePurge(PostgresServer& server, const std::string& bin, const std::string& tmpl,
                          const std::string& db, int replicas, int runs) {
  const std::string log = BenchLog(db);
  std::vector<Replica> running = StartOnCopy(server, bin, tmpl, db, replicas);
  Sql sql(server, db);
  const auto deadline = Steady::now() + std::chrono::seconds(900);
  while (sql.Number(kOldRuns) > 0) {
    if (Steady::now() > deadline) Die("retention did not purge the old runs in 900 s; see " + log);
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  double chunks = 0;
  for (Replica& r : running) chunks += Scrape(r, "ql_retention_purged_log_chunks_total");
  for (Replica& r : running) StopReplica(r);
  if (chunks != static_cast<double>(runs) * kOldRunChunks) Die("the purge missed log chunks");
  const std::string facts = "FROM ql3.security_audit WHERE action = 'runs.purge'";
  const double batches = sql.Number("SELECT count(*) " + facts);
  const double first = sql.Number("SELECT min(at_ms) " + facts);
  const double last = sql.Number("SELECT max(at_ms) " + facts);
  PurgeFigures f;
  f.seconds = std::max(last - first, 1.0) / 1000.0;
  f.runs_per_s = runs * (batches - 1) / batches / f.seconds;
  f.chunks_per_s = f.runs_per_s * kOldRunChunks;
  DropDatabase(server, db);
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  std::string bin = "build/bin";
  std::set<std::string> phases = {"ceiling",  "admission", "claim",   "takeover", "dispatch",
                                  "fairness", "boundary",  "storage", "retention"};
  std::vector<int> replicas = {1, 2, 3};
  std::vector<int> triggers = {10000, 100000};
  int repeat = 3;
  bool durable = true;
  int claim_rows = 1'000'000;
  int ceiling_seconds = 6;
  int dispatch_runs = 2000;
  int fairness_runs = 5000;
  int boundary_triggers = 10'000;
  int boundaries = 3;
  int retention_runs = 100'000;
  std::vector<std::string> pg_settings;
  std::vector<std::string> isolations = {"serializable", "read-committed"};
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    std::string value = argv[i + 1];
    if (flag == "--bin") {
      bin = value;
    } else if (flag == "--phases") {
      phases.clear();
      std::stringstream ss(value);
      for (std::string p; std::getline(ss, p, ',');) phases.insert(p);
    } else if (flag == "--replicas") {
      replicas = ParseList(value);
    } else if (flag == "--triggers") {
      triggers = ParseList(value);
    } else if (flag == "--repeat") {
      repeat = std::stoi(value);
    } else if (flag == "--durable") {
      durable = value != "off";
    } else if (flag == "--claim-rows") {
      claim_rows = std::stoi(value);
    } else if (flag == "--boundary-triggers") {
      boundary_triggers = std::stoi(value);
    } else if (flag == "--boundaries") {
      boundaries = std::stoi(value);
    } else if (flag == "--retention-runs") {
      retention_runs = std::stoi(value);
    } else if (flag == "--dispatch-runs") {
      dispatch_runs = std::stoi(value);
    } else if (flag == "--fairness-runs") {
      fairness_runs = std::stoi(value);
    } else if (flag == "--ceiling-seconds") {
      ceiling_seconds = std::stoi(value);
    } else if (flag == "--isolations") {
      isolations.clear();
      std::stringstream ss(value);
      for (std::string p; std::getline(ss, p, ',');) isolations.push_back(p);
    } else if (flag == "--pg-setting") {
      pg_settings.push_back(value);
    } else {
      Die("unknown flag " + flag);
    }
  }
  setenv("QL3_POSTGRES_ALLOW_INSECURE", "true", 1);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // tables appear as they are measured
  ql::testing::PostgresServerOptions options;
  options.fast = !durable;  // durable commits (fsync) unless --durable off
  options.settings = pg_settings;
  // The boundary phase reads each run row's commit time.
  if (phases.count("boundary")) options.settings.push_back("track_commit_timestamp = on");
  auto server = Must(PostgresServer::Start(options), "start PostgreSQL");
  Must(server->PsqlFile("postgres", std::string(QL_SOURCE_DIR) + "/deploy/postgres/roles.sql"),
       "create roles");
  std::vector<std::string> machine;
  auto emit = [&](const std::string& name, const std::string& value) {
    machine.push_back(name + "=" + value);
  };
  std::map<int, std::string> templates;
  auto template_for = [&](int n) {
    if (!templates.count(n)) {
      templates[n] = "bench_tmpl_" + std::to_string(n);
      BuildTemplate(*server, templates[n], n);
    }
    return templates[n];
  };
  int serial = 0;

  // Ceiling first, on the largest burst's schedule rows.
  double best_batched = 0;
  if (phases.count("ceiling")) {
    const int rows = *std::max_element(triggers.begin(), triggers.end());
    const std::string db = "bench_ceiling";
    CopyDatabase(*server, template_for(std::max(rows, 16 * 64)), db);
    Sql sql(*server, db);
    sql.Run(
        "CREATE TABLE public.bench_ids AS SELECT (row_number() OVER (ORDER BY trigger_id) - "
        "1)::int "
        "AS n, trigger_id FROM ql3.trigger_schedules; CREATE UNIQUE INDEX ON public.bench_ids (n); "
        "ANALYZE public.bench_ids");
    std::vector<CeilingCell> cells;
    for (int batch : {1, 16}) {
      for (const std::string iso : {"SERIALIZABLE", "READ COMMITTED"}) {
        for (int clients : {4, 16}) cells.push_back({batch, iso, clients, {}, {}});
      }
    }
    for (int k = 0; k < repeat; ++k) {
      for (CeilingCell& c : cells) {
        const int slice = std::max(rows, 16 * 64) / 16;
        auto [rate, failed] =
            Pgbench(*server, db, AdmissionScript(sql, c.batch, c.isolation, slice), c.batch,
                    c.clients, ceiling_seconds);
        c.rates.push_back(rate);
        c.failed.push_back(failed);
      }
    }
    std::printf("== raw ceiling: the admission's writes through pgbench (median of %d) ==\n",
                repeat);
    std::printf("%-16s %-15s %8s %14s %16s\n", "per transaction", "isolation", "clients",
                "occurrences/s", "failed tx (max)");
    for (const CeilingCell& c : cells) {
      const double rate = Median(c.rates);
      std::printf("%-16d %-15s %8d %14.0f %16.0f\n", c.batch, c.isolation.c_str(), c.clients, rate,
                  *std::max_element(c.failed.begin(), c.failed.end()));
      const std::string iso = c.isolation == "SERIALIZABLE" ? "serializable" : "read_committed";
      emit("ceiling_" + std::to_string(c.batch) + "_per_tx_" + iso + "_" +
               std::to_string(c.clients) + "_clients_per_s",
           Fixed(rate, 0));
      if (c.batch == 16) best_batched = std::max(best_batched, rate);
    }
    emit("ceiling_best_batched_per_s", Fixed(best_batched, 0));
    DropDatabase(*server, db);
  }

  if (phases.count("admission")) {
    std::printf("== cluster admission: N due in the same second, R replicas (median of %d) ==\n",
                repeat);
    std::printf("%-9s %-9s %-15s %12s %9s %9s %9s %7s %8s %5s %9s\n", "triggers", "replicas",
                "isolation", "admitted/s", "p50 lag", "p99 lag", "max lag", "raced", "retried",
                "dups", "/ceiling");
    std::map<std::string, double> dead_after;
    for (int n : triggers) {
      const std::string tmpl = template_for(n);
      std::map<std::string, double> rate_of;  // isolation → median rate with the most replicas
      for (const std::string& isolation : isolations) {
        // The default (first) isolation with every replica count, the others with the most.
        for (int r : replicas) {
          if (isolation != isolations.front() && r != replicas.back()) continue;
          std::vector<double> rate, p50, p99, max, raced, retried;
          double dups = 0;
          for (int k = 0; k < repeat; ++k) {
            Burst f = RunBurst(*server, bin, tmpl, "bench_run_" + std::to_string(++serial), r, n,
                               isolation);
            rate.push_back(f.rate);
            p50.push_back(f.p50);
            p99.push_back(f.p99);
            max.push_back(f.max);
            raced.push_back(f.raced);
            retried.push_back(f.retried);
            dups = std::max(dups, f.dups);
            if (n == triggers.front() && r == replicas.back() && isolation == isolations.front()) {
              dead_after = f.dead;
            }
          }
          if (r == replicas.back()) rate_of[isolation] = Median(rate);
          const double ratio = best_batched > 0 ? Median(rate) / best_batched : 0;
          std::printf("%-9d %-9d %-15s %12.0f %8.3fs %8.3fs %8.3fs %7.0f %8.0f %5.0f %9s\n", n, r,
                      isolation.c_str(), Median(rate), Median(p50), Median(p99), Median(max),
                      Median(raced), Median(retried), dups,
                      best_batched > 0 ? Fixed(ratio, 2).c_str() : "-");
          std::string key = "cluster_" + std::to_string(r) + "_replicas_" + std::to_string(n);
          if (isolation != isolations.front()) {
            key += "_" + std::regex_replace(isolation, std::regex("-"), "_");
          }
          emit(key + "_admitted_per_s", Fixed(Median(rate), 0));
          emit(key + "_lag_p50_s", Fixed(Median(p50), 3));
          emit(key + "_lag_p99_s", Fixed(Median(p99), 3));
          emit(key + "_lag_max_s", Fixed(Median(max), 3));
          emit(key + "_raced", Fixed(Median(raced), 0));
          emit(key + "_retried", Fixed(Median(retried), 0));
          emit(key + "_duplicates", Fixed(dups, 0));
          if (best_batched > 0) emit(key + "_ratio_to_batched_ceiling", Fixed(ratio, 3));
          if (n == triggers.front() && r == 3 && best_batched > 0 &&
              isolation == isolations.front()) {
            emit("cluster_3_replicas_ratio_to_batched_ceiling", Fixed(ratio, 3));
          }
        }
      }
      if (rate_of.count("serializable") && rate_of.count("read-committed") &&
          rate_of["read-committed"] > 0) {
        const double ratio = rate_of["serializable"] / rate_of["read-committed"];
        std::printf("%-9d %-9d serializable / read-committed admitted/s: %.2f\n", n,
                    replicas.back(), ratio);
        emit("cluster_" + std::to_string(replicas.back()) + "_replicas_" + std::to_string(n) +
                 "_serializable_to_read_committed",
             Fixed(ratio, 3));
      }
    }
    std::printf("dead tuples after a %d-trigger burst with %d replicas:", triggers.front(),
                replicas.back());
    for (const auto& [table, dead] : dead_after) {
      std::printf(" %s=%.0f", table.c_str(), dead);
      emit("dead_tuples_" + table, Fixed(dead, 0));
    }
    std::printf("\n");
  }

  if (phases.count("claim")) {
    const int due = std::min(claim_rows, 100'000);
    std::printf("== claim latency: %d schedule rows, %d due (300 claims of 16) ==\n", claim_rows,
                due);
    const std::string tmpl = template_for(claim_rows);
    std::vector<double> p50, p99;
    ClaimFigures last;
    for (int k = 0; k < repeat; ++k) {
      const std::string db = "bench_claim_" + std::to_string(++serial);
      CopyDatabase(*server, tmpl, db);
      last = MeasureClaims(*server, db, claim_rows, due);
      p50.push_back(last.p50_ms);
      p99.push_back(last.p99_ms);
      DropDatabase(*server, db);
    }
    std::printf("claim p50 %.2f ms, p99 %.2f ms; plan%s:\n", Median(p50), Median(p99),
                last.uses_index ? " (uses trigger_schedules_due)" : " (NO due index)");
    for (const std::string& line : last.plan) std::printf("    %s\n", line.c_str());
    emit("claim_rows", std::to_string(claim_rows));
    emit("claim_p50_ms", Fixed(Median(p50), 2));
    emit("claim_p99_ms", Fixed(Median(p99), 2));
    emit("claim_uses_due_index", last.uses_index ? "1" : "0");
  }

  if (phases.count("dispatch")) {
    std::printf(
        "== dispatch: %d trivial runs (`true`), %d replicas, %d workers x %d slots, commands "
        "confined and unconfined in turn (median of %d) ==\n",
        dispatch_runs, 2, 2, 2, repeat);
    // Index 0: confined (--isolation auto, the default); 1: --isolation off. Interleaved, so
    // both see the same machine.
    std::vector<double> rate[2], p50[2], p99[2], slot[2], cpu[2], queued[2];
    double failed = 0, extra = 0;
    for (int k = 0; k < repeat; ++k) {
      for (int mode = 0; mode < 2; ++mode) {
        Dispatch d = RunDispatch(*server, bin, template_for(dispatch_runs),
                                 "bench_dispatch_" + std::to_string(++serial), 2, 2, 2,
                                 dispatch_runs, mode == 0 ? "auto" : "off");
        rate[mode].push_back(d.rate);
        p50[mode].push_back(d.p50_ms);
        p99[mode].push_back(d.p99_ms);
        slot[mode].push_back(d.slot_ms);
        cpu[mode].push_back(d.cpu_ms);
        queued[mode].push_back(d.max_queued);
        failed = std::max(failed, dispatch_runs - d.succeeded);
        extra = std::max(extra, d.extra_attempts);
      }
    }
    for (int mode = 0; mode < 2; ++mode) {
      std::printf(
          "%s: %.0f runs/s; per run lease -> end p50 %.1f ms, p99 %.1f ms; slot time per run "
          "%.1f ms; machine CPU per run %.2f ms; queue depth max %.0f\n",
          mode == 0 ? "confined  " : "unconfined", Median(rate[mode]), Median(p50[mode]),
          Median(p99[mode]), Median(slot[mode]), Median(cpu[mode]), Median(queued[mode]));
    }
    const double ratio = Median(rate[1]) > 0 ? Median(rate[0]) / Median(rate[1]) : 0;
    std::printf(
        "confined / unconfined rate %.2fx; isolation set-up per attempt (slot time difference) "
        "%.1f ms, machine CPU %.2f ms; not succeeded %.0f; extra attempts or leases %.0f\n",
        ratio, Median(slot[0]) - Median(slot[1]), Median(cpu[0]) - Median(cpu[1]), failed, extra);
    emit("dispatch_runs_per_s", Fixed(Median(rate[0]), 0));
    emit("dispatch_unconfined_runs_per_s", Fixed(Median(rate[1]), 0));
    emit("dispatch_isolation_ratio", Fixed(ratio, 2));
    emit("dispatch_isolation_setup_ms_per_run", Fixed(Median(slot[0]) - Median(slot[1]), 1));
    emit("dispatch_lease_to_end_p50_ms", Fixed(Median(p50[0]), 1));
    emit("dispatch_lease_to_end_p99_ms", Fixed(Median(p99[0]), 1));
    emit("dispatch_slot_ms_per_run", Fixed(Median(slot[0]), 1));
    emit("dispatch_cpu_ms_per_run", Fixed(Median(cpu[0]), 2));
    emit("dispatch_queue_depth_max", Fixed(Median(queued[0]), 0));
    emit("dispatch_not_succeeded", Fixed(failed, 0));
    emit("dispatch_extra_attempts", Fixed(extra, 0));
  }

  if (phases.count("fairness")) {
    constexpr int kBRuns = 50;
    constexpr int kGapMs = 200;
    std::printf(
        "== fairness: project A's %d cron runs of `true` queued at once; project B starts %d "
        "manual runs of `true`, one every %d ms; 1 replica, 2 workers x 2 slots ==\n",
        fairness_runs, kBRuns, kGapMs);
    const auto began = Steady::now();
    const Fairness f =
        RunFairness(*server, bin, template_for(fairness_runs),
                    "bench_fairness_" + std::to_string(++serial), fairness_runs, kBRuns, kGapMs);
    std::printf(
        "fairness: B queue wait p50 %.0f ms, p99 %.0f ms, max %.0f ms (target p99 <= 2000 ms) "
        "beside A's backlog median %.0f (min %.0f) queued runs; A wait p50 %.0f ms; not "
        "succeeded %.0f; extra attempts or leases %.0f; %.0f s\n",
        f.b_p50_ms, f.b_p99_ms, f.b_max_ms, f.a_backlog_median, f.a_backlog_min, f.a_p50_ms,
        f.not_succeeded, f.extra_attempts,
        std::chrono::duration<double>(Steady::now() - began).count());
    emit("fairness_b_wait_p50_ms", Fixed(f.b_p50_ms, 0));
    emit("fairness_b_wait_p99_ms", Fixed(f.b_p99_ms, 0));
    emit("fairness_b_wait_max_ms", Fixed(f.b_max_ms, 0));
    emit("fairness_a_backlog_median", Fixed(f.a_backlog_median, 0));
    emit("fairness_a_backlog_min", Fixed(f.a_backlog_min, 0));
    emit("fairness_a_wait_p50_ms", Fixed(f.a_p50_ms, 0));
    emit("fairness_not_succeeded", Fixed(f.not_succeeded, 0));
    emit("fairness_extra_attempts", Fixed(f.extra_attempts, 0));
  }

  if (phases.count("boundary")) {
    std::printf("== minute boundary: %d triggers on * * * * *, 3 replicas, %d boundaries ==\n",
                boundary_triggers, boundaries);
    const std::string tmpl = "bench_tmpl_minutely_" + std::to_string(boundary_triggers);
    BuildTemplate(*server, tmpl, boundary_triggers, "* * * * *");
    Boundary b = RunBoundaries(*server, bin, tmpl, "bench_boundary_" + std::to_string(++serial), 3,
                               boundary_triggers, boundaries);
    std::string rates;
    for (double r : b.rates) rates += (rates.empty() ? "" : ", ") + Fixed(r, 0);
    std::printf(
        "lag boundary -> COMMIT p50 %.3f s, p99 %.3f s, max %.3f s over %.0f runs "
        "(target p99 <= 1.5 s); admitted/s per boundary: %s; duplicates %.0f\n",
        b.p50, b.p99, b.max, b.admitted, rates.c_str(), b.dups);
    emit("boundary_lag_p50_s", Fixed(b.p50, 3));
    emit("boundary_lag_p99_s", Fixed(b.p99, 3));
    emit("boundary_lag_max_s", Fixed(b.max, 3));
    emit("boundary_duplicates", Fixed(b.dups, 0));
  }

  if (phases.count("storage")) {
    const int n = triggers.front();
    std::printf("== storage: bytes per admitted run (%d admitted, run tables with indexes) ==\n",
                n);
    std::map<std::string, double> bytes = MeasureStorage(
        *server, bin, template_for(n), "bench_storage_" + std::to_string(++serial), n);
    std::vector<std::pair<double, std::string>> largest;
    for (const auto& [relation, b] : bytes) {
      if (relation != "total" && b >= 1) largest.push_back({b, relation});
    }
    std::sort(largest.rbegin(), largest.rend());
    std::printf("%.0f bytes per admitted run (target <= 1536):", bytes["total"]);
    for (const auto& [b, relation] : largest) std::printf(" %s=%.0f", relation.c_str(), b);
    std::printf("\n");
    emit("storage_bytes_per_run", Fixed(bytes["total"], 0));
  }

  if (phases.count("takeover")) {
    constexpr int64_t kLeaseMs = 5000;
    std::printf("== takeover: SIGKILL of a replica holding claims (lease %.1f s) ==\n",
                kLeaseMs / 1000.0);
    std::vector<double> seconds;
    int held = 0;
    for (int k = 0; k < repeat; ++k) {
      Takeover t = MeasureTakeover(*server, bin, template_for(triggers.front()),
                                   "bench_takeover_" + std::to_string(++serial), kLeaseMs);
      seconds.push_back(t.seconds);
      held = t.held;
    }
    std::printf("takeover %.2f s after the kill (victim held %d claims; target <= %.1f s)\n",
                Median(seconds), held, kLeaseMs / 1000.0 + 2);
    emit("takeover_lease_s", Fixed(kLeaseMs / 1000.0, 1));
    emit("takeover_s", Fixed(Median(seconds), 2));
  }

  if (phases.count("retention")) {
    const int n = triggers.front();
    const int r = replicas.back();
    const std::string& isolation = isolations.front();
    std::printf(
        "== retention: %d finished runs 60 days old (%d log chunks each), %d replicas purge "
        "them; a %d-trigger burst on that history (%s, median of %d) ==\n",
        retention_runs, kOldRunChunks, r, n, isolation.c_str(), repeat);
    const std::string tmpl = "bench_tmpl_retention";
    BuildRetentionTemplate(*server, template_for(n), tmpl, retention_runs);
    std::vector<double> rate, seconds, held_p50, held_p99, held_max, purging_p50, purging_p99,
        purging_max, purged, remaining;
    // Retention keeps everything: the project keeps the longest time and the most runs.
    auto hold = [](Sql& sql) {
      sql.Run(
          "INSERT INTO ql3.project_retention (project_id, keep_days, keep_runs, version, "
          "updated_at_ms) SELECT id, 36500, 1000000, 1, 0 FROM ql3.projects");
    };
    for (int k = 0; k < repeat; ++k) {
      PurgeFigures p = MeasurePurge(*server, bin, tmpl,
                                    "bench_purge_" + std::to_string(++serial), r, retention_runs);
      rate.push_back(p.runs_per_s);
      seconds.push_back(p.seconds);
      Burst held = RunBurst(*server, bin, tmpl, "bench_run_" + std::to_string(++serial), r, n,
                            isolation, hold);
      held_p50.push_back(held.p50);
      held_p99.push_back(held.p99);
      held_max.push_back(held.max);
      Burst purging =
          RunBurst(*server, bin, tmpl, "bench_run_" + std::to_string(++serial), r, n, isolation);
      purging_p50.push_back(purging.p50);
      purging_p99.push_back(purging.p99);
      purging_max.push_back(purging.max);
      purged.push_back(purging.purged);
      remaining.push_back(purging.remaining);
      if (held.dups + purging.dups > 0) Die("a burst admitted an occurrence twice");
    }
    std::printf("purge %.0f runs/s (%.0f log chunks/s) over %.1f s\n", Median(rate),
                Median(rate) * kOldRunChunks, Median(seconds));
    std::printf("%-22s %9s %9s %9s %14s\n", "burst", "p50 lag", "p99 lag", "max lag",
                "purged during");
    std::printf("%-22s %8.3fs %8.3fs %8.3fs %14s\n", "retention keeps all", Median(held_p50),
                Median(held_p99), Median(held_max), "-");
    std::printf("%-22s %8.3fs %8.3fs %8.3fs %14.0f\n", "while purging", Median(purging_p50),
                Median(purging_p99), Median(purging_max), Median(purged));
    if (Median(remaining) == 0) {
      std::printf("(the purge ended before the burst did: raise --retention-runs)\n");
    }
    emit("retention_purge_runs_per_s", Fixed(Median(rate), 0));
    emit("retention_burst_lag_p50_s", Fixed(Median(held_p50), 3));
    emit("retention_burst_lag_p99_s", Fixed(Median(held_p99), 3));
    emit("retention_burst_while_purging_lag_p50_s", Fixed(Median(purging_p50), 3));
    emit("retention_burst_while_purging_lag_p99_s", Fixed(Median(purging_p99), 3));
    emit("retention_burst_while_purging_purged_runs", Fixed(Median(purged), 0));
    DropDatabase(*server, tmpl);
  }

  for (const std::string& line : machine) std::printf("%s\n", line.c_str());
  return 0;
}
