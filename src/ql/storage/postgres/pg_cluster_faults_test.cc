// Fault, multi-replica and failover proof of the cluster scheduler (DESIGN §5.2, §8 items 3–4):
// several independent replicas (each its own PostgresStore with its own pools, its own owner
// and its own scheduler thread) admit every-second cron occurrences against a real PostgreSQL
// while a replica dies holding claims, backends are terminated, COMMIT replies are lost and a
// streaming standby is promoted. Every test ends with the same check in the database: each
// trigger has exactly one run per scheduled second, with no gap from its first fire time to a
// settled second, and each run has exactly one attempt and exactly the two events run.created
// and run.queued.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ql/core/clock.h"
#include "ql/core/ids.h"
#include "ql/engine/cluster_recovery.h"
#include "ql/engine/cluster_scheduler.h"
#include "ql/engine/control_service.h"
#include "ql/engine/metrics.h"
#include "ql/engine/round_loop.h"
#include "ql/storage/postgres/pg_audit.h"
#include "ql/storage/postgres/pg_client.h"
#include "ql/storage/postgres/pg_cluster_recovery.h"
#include "ql/storage/postgres/pg_cluster_schedules.h"
#include "ql/storage/postgres/pg_migrations.h"
#include "ql/storage/postgres/pg_store.h"
#include "ql/storage/postgres/pg_test_support.h"
#include "ql/testing/fake_clock.h"
#include "ql/testing/postgres_server.h"

namespace ql {
namespace {

using nlohmann::json;
using pg::testing::PgTestCluster;
using ::ql::testing::PostgresServer;
using ::ql::testing::PostgresServerOptions;

constexpr char kEverySecond[] = "* * * * * *";
constexpr char kAdmissionOp[] = "admitting a claimed occurrence";
// The misfire grace of every replica and of the publisher: the largest allowed (5 min). It is
// longer than any outage these tests cause (a dead replica's lease, a burst of terminated
// backends, a failover) and than any backlog a loaded machine builds up, so each missed
// occurrence is still inside the grace when a replica reaches it and is admitted, in order,
// under the default `skip` policy. An outage longer than the grace would legitimately leave
// gaps (`skip` moves the cursor past now; `fire_once` admits only the oldest missed occurrence),
// so the gap check is sound only because the grace covers the outage; every test also asserts
// that no replica skipped anything.
constexpr int64_t kGraceMs = 300'000;
// Generous bounds for waits on a loaded two-core machine; the assertions themselves are exact.
constexpr int64_t kWarmUpWaitMs = 30'000;
constexpr int64_t kCatchUpWaitMs = 90'000;

// The database clock in UTC milliseconds, as the scheduler's statements read it.
constexpr char kDbNowSql[] = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

void SleepMs(int64_t ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Polls `done` every `poll_ms` until it holds or `timeout_ms` passed; returns its last value.
bool WaitFor(const std::function<bool()>& done, int64_t timeout_ms, int64_t poll_ms = 100) {
  const int64_t deadline = SteadyMs() + timeout_ms;
  while (true) {
    if (done()) return true;
    if (SteadyMs() >= deadline) return false;
    SleepMs(poll_ms);
  }
}

// A PostgreSQL array literal of plain tokens (ids are UUIDs, numbers are digits).
template <typename T>
std::string ArrayLiteral(const std::vector<T>& values) {
  std::ostringstream out;
  out << "{";
  for (size_t i = 0; i < values.size(); ++i) out << (i ? "," : "") << values[i];
  out << "}";
  return out.str();
}

// ---------------------------------------------------------------------------------------------
// Probe: SQL as the superuser on a pool of its own. The backend killer terminates ql3_runtime
// backends only, so the probe keeps working through the storm.

using Table = std::vector<std::vector<std::string>>;

class Probe {
 public:
  static std::unique_ptr<Probe> Open(const std::string& url) {
    pg::PoolOptions options;
    options.url = url;
    options.max_connections = 2;
    options.acquire_timeout_ms = 10'000;
    options.session.application_name = "qinglong-test-probe";
    Result<std::unique_ptr<pg::Pool>> pool = pg::Pool::Create(options);
    if (!pool.ok()) {
      ADD_FAILURE() << "probe pool: " << pool.status().ToString();
      return nullptr;
    }
    return std::unique_ptr<Probe>(new Probe(std::move(pool).value()));
  }

  // Runs `sql`, whose `columns` columns are all text (the SQL casts them); NULL reads as "".
  Result<Table> Query(const std::string& sql, int columns,
                      const std::vector<pg::Param>& params = {}, bool read_only = true) {
    Table table;
    Status st = pool_->Transact({pg::Isolation::kReadCommitted, read_only}, "test probe",
                                [&](pg::Tx& tx) -> Status {
                                  table.clear();
                                  QL_ASSIGN_OR_RETURN(pg::Rows rows, tx.Exec(sql, params));
                                  for (int r = 0; r < rows.size(); ++r) {
                                    std::vector<std::string> row;
                                    for (int c = 0; c < columns; ++c) {
                                      row.push_back(rows.OptText(r, c).value_or(""));
                                    }
                                    table.push_back(std::move(row));
                                  }
                                  return rows.status();
                                });
    if (!st.ok()) return st;
    return table;
  }

  // The single bigint `sql` selects (cast to text by the caller's SQL).
  int64_t Int(const std::string& sql, const std::vector<pg::Param>& params = {}) {
    Result<Table> table = Query(sql, 1, params);
    EXPECT_TRUE(table.ok()) << table.status().ToString() << "\n" << sql;
    if (!table.ok() || table->size() != 1 || table->front().front().empty()) {
      ADD_FAILURE() << "no single value from: " << sql;
      return -1;
    }
    return std::stoll(table->front().front());
  }

  int64_t NowMs() { return Int(std::string("SELECT ") + kDbNowSql + "::text"); }

  // The scheduled second that is due now by the database clock: every replica can have
  // admitted it once it has caught up.
  int64_t DueSecond() { return NowMs() / 1000 * 1000; }

 private:
  explicit Probe(std::unique_ptr<pg::Pool> pool) : pool_(std::move(pool)) {}

  std::unique_ptr<pg::Pool> pool_;
};

// ---------------------------------------------------------------------------------------------
// Publisher: the management side (runtime and admin pools) publishing every-second triggers.

class Publisher {
 public:
  static std::unique_ptr<Publisher> Open(const std::string& runtime_url,
                                         const std::string& admin_url) {
    PostgresStoreOptions options;
    options.runtime.url = runtime_url;
    options.runtime.max_connections = 2;
    pg::PoolOptions admin;
    admin.url = admin_url;
    admin.max_connections = 2;
    options.admin = admin;
    Result<std::unique_ptr<PostgresStore>> store = PostgresStore::Open(options);
    if (!store.ok()) {
      ADD_FAILURE() << "publisher store: " << store.status().ToString();
      return nullptr;
    }
    auto publisher = std::unique_ptr<Publisher>(new Publisher(std::move(store).value()));
    Result<ProjectRecord> project = publisher->control_->EnsureDefaultProject();
    if (!project.ok()) {
      ADD_FAILURE() << "default project: " << project.status().ToString();
      return nullptr;
    }
    return publisher;
  }

  // Publishes one remote-worker task and `count` enabled every-second UTC triggers on it.
  std::vector<std::string> PublishEverySecond(int count) {
    std::vector<std::string> ids;
    Result<PublishedTask> task = control_->PublishTask(
        TaskWrite{json{{"name", "every second"},
                       {"spec", {{"command", {{"kind", "shell"}, {"command", "echo tick"}}}}}},
                  std::nullopt});
    EXPECT_TRUE(task.ok()) << task.status().ToString();
    if (!task.ok()) return ids;
    for (int i = 0; i < count; ++i) {
      TriggerWrite write;
      write.task_id = task->task.head.task_id;
      write.expression = kEverySecond;
      write.timezone = "UTC";
      write.misfire = "skip";
      Result<PublishedTrigger> trigger = control_->AddTrigger(write);
      EXPECT_TRUE(trigger.ok()) << trigger.status().ToString();
      if (!trigger.ok()) return ids;
      ids.push_back(trigger->trigger.head.trigger_id);
    }
    return ids;
  }

 private:
  explicit Publisher(std::unique_ptr<PostgresStore> store) : store_(std::move(store)) {
    ControlOptions options;
    options.executor_type = "remote_worker";
    options.grace_ms = kGraceMs;
    control_ = std::make_unique<ControlService>(*store_, SystemClock(), SecureRandom(), options);
  }

  std::unique_ptr<PostgresStore> store_;
  std::unique_ptr<ControlService> control_;
};

// ---------------------------------------------------------------------------------------------
// Replica: its own PostgresStore (runtime role only), PostgresClusterSchedules and
// ClusterScheduler with a unique owner, driven by its own thread: RunRound, then sleep
// NextDelayMs (a failed round sleeps the cadence), until stopped.

class Replica {
 public:
  static std::unique_ptr<Replica> Open(const std::string& owner, const std::string& runtime_url,
                                       int64_t lease_ms, AdmissionIsolation isolation) {
    PostgresStoreOptions options;
    options.runtime.url = runtime_url;
    options.runtime.max_connections = 2;
    options.runtime.session.application_name = "qinglong-" + owner;
    Result<std::unique_ptr<PostgresStore>> store = PostgresStore::Open(options);
    if (!store.ok()) {
      ADD_FAILURE() << owner << " store: " << store.status().ToString();
      return nullptr;
    }
    ClusterSchedulerOptions scheduler;
    scheduler.owner = owner;
    scheduler.lease_ms = lease_ms;
    scheduler.grace_ms = kGraceMs;
    scheduler.cadence_ms = 500;
    scheduler.claims_per_round = 16;
    Status valid = ClusterScheduler::ValidateOptions(scheduler);
    if (!valid.ok()) {
      ADD_FAILURE() << valid.ToString();
      return nullptr;
    }
    return std::unique_ptr<Replica>(new Replica(std::move(store).value(), scheduler, isolation));
  }

  ~Replica() { Stop(); }

  void Start() {
    thread_ = std::thread([this] { loop_->Run(); });
  }

  // Stops the loop: the round in progress stops before its next commit. Bounded by the
  // session's statement, lock and connect timeouts.
  void Stop() {
    if (!thread_.joinable()) return;
    scheduler_->RequestStop();
    loop_->Stop();
    thread_.join();
  }

  const std::string& owner() const { return owner_; }
  pg::Pool& pool() { return store_->runtime_pool(); }
  int64_t admitted() const { return admitted_; }
  int64_t skipped() const { return skipped_; }
  int64_t decision_errors() const { return decision_errors_; }
  int64_t failed_rounds() const { return failed_rounds_; }

  std::string Summary() const {
    std::ostringstream out;
    out << owner_ << ": rounds=" << loop_->rounds() << " admitted=" << admitted_
        << " initialized=" << initialized_ << " skipped=" << skipped_ << " raced=" << raced_
        << " decision_errors=" << decision_errors_ << " failed_rounds=" << failed_rounds_;
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [reason, n] : errors_by_reason_) out << " [" << reason << " x" << n << "]";
    return out.str();
  }

 private:
  Replica(std::unique_ptr<PostgresStore> store, const ClusterSchedulerOptions& options,
          AdmissionIsolation isolation)
      : owner_(options.owner),
        store_(std::move(store)),
        schedules_(store_->runtime_pool(), isolation),
        scheduler_(std::make_unique<ClusterScheduler>(schedules_, store_->definitions(),
                                                      SecureRandom(), metrics_, options)),
        loop_(std::make_unique<RoundLoop>([this] { return Round(); }, sleeper_)) {}

  int64_t Round() {
    const int64_t cadence = scheduler_->options().cadence_ms;
    Result<RoundReport> round = scheduler_->RunRound();
    if (!round.ok()) {
      ++failed_rounds_;
      Note(round.status());
      return cadence;
    }
    admitted_ += round->admitted;
    initialized_ += round->initialized;
    skipped_ += round->skipped;
    raced_ += round->raced;
    decision_errors_ += round->errors;
    if (!round->first_error.ok()) Note(round->first_error);
    Result<int64_t> next = scheduler_->NextDelayMs(*round);
    if (!next.ok()) {
      Note(next.status());
      return cadence;
    }
    return *next;
  }

  void Note(const Status& status) {
    std::lock_guard<std::mutex> lock(mu_);
    ++errors_by_reason_[std::string(StatusCodeName(status.code())) + "/" + status.reason()];
  }

  std::string owner_;
  std::unique_ptr<PostgresStore> store_;
  PostgresClusterSchedules schedules_;
  Metrics metrics_;
  std::unique_ptr<ClusterScheduler> scheduler_;
  ConditionSleeper sleeper_;
  std::unique_ptr<RoundLoop> loop_;
  std::thread thread_;
  std::atomic<int64_t> admitted_{0};
  std::atomic<int64_t> initialized_{0};
  std::atomic<int64_t> skipped_{0};
  std::atomic<int64_t> raced_{0};
  std::atomic<int64_t> decision_errors_{0};
  std::atomic<int64_t> failed_rounds_{0};
  mutable std::mutex mu_;
  std::map<std::string, int64_t> errors_by_reason_;
};

using Replicas = std::vector<std::unique_ptr<Replica>>;

void StopAll(Replicas& replicas) {
  for (auto& r : replicas) r->Stop();
}

int64_t TotalAdmitted(const Replicas& replicas) {
  int64_t total = 0;
  for (const auto& r : replicas) total += r->admitted();
  return total;
}

void Report(const std::string& test, const Replicas& replicas) {
  for (const auto& r : replicas) std::cout << "[" << test << "] " << r->Summary() << "\n";
  std::cout << std::flush;
}

// Prints how long each phase of a test took: the machine is shared, and this tells a slow run
// from a stuck one.
class Phases {
 public:
  explicit Phases(std::string test) : test_(std::move(test)), last_(SteadyMs()) {}
  ~Phases() { std::cout << "[" << test_ << "] phases:" << out_.str() << "\n" << std::flush; }
  void Mark(const std::string& phase) {
    const int64_t now = SteadyMs();
    out_ << " " << phase << "=" << now - last_ << "ms";
    last_ = now;
  }

 private:
  std::string test_;
  int64_t last_;
  std::ostringstream out_;
};

// ---------------------------------------------------------------------------------------------
// Database checks

// Every trigger is initialised and has at least one run.
bool WarmedUp(Probe& probe) {
  return probe.Int(
             "SELECT count(*)::text FROM ql3.trigger_schedules s WHERE s.next_fire_at_ms IS NULL "
             "OR NOT EXISTS (SELECT 1 FROM ql3.runs r WHERE r.trigger_id = s.trigger_id)") == 0;
}

// Every trigger's cursor has moved past `through_ms`: its occurrences up to there are decided.
bool CaughtUp(Probe& probe, int64_t through_ms) {
  return probe.Int(
             "SELECT count(*)::text FROM ql3.trigger_schedules WHERE next_fire_at_ms IS NULL OR "
             "next_fire_at_ms <= $1",
             {pg::P(through_ms)}) == 0;
}

// Waits until every cursor passed `through_ms`; a failure names the stragglers.
void ExpectCaughtUp(Probe& probe, int64_t through_ms) {
  if (WaitFor([&] { return CaughtUp(probe, through_ms); }, kCatchUpWaitMs, 200)) return;
  Result<Table> behind = probe.Query(
      "SELECT trigger_id, next_fire_at_ms::text, coalesce(claim_owner, '-'), "
      "coalesce(claim_expires_at_ms::text, '-') FROM ql3.trigger_schedules WHERE "
      "next_fire_at_ms IS NULL OR next_fire_at_ms <= $1 ORDER BY trigger_id LIMIT 5",
      4, {pg::P(through_ms)});
  std::ostringstream out;
  if (behind.ok()) {
    for (const auto& row : *behind)
      out << "\n  " << row[0] << " cursor=" << row[1] << " owner=" << row[2]
          << " expires=" << row[3];
  }
  ADD_FAILURE() << "replicas did not reach " << through_ms << " within " << kCatchUpWaitMs
                << " ms; behind:" << out.str();
}

// The invariant every test ends with, over the whole history of the database:
//   - no (trigger, scheduled second) has more or fewer than one run;
//   - each run has exactly one attempt (claimed, remote_worker) and exactly two events
//     (1 run.created, 2 run.queued), and is a queued cron run;
//   - each of the `triggers` triggers has runs on whole seconds, one per second without a gap,
//     from the first fire time after its publication up to at least `through_ms`.
// Returns the number of runs.
int64_t ExpectExactlyOncePerOccurrence(Probe& probe, size_t triggers, int64_t through_ms) {
  EXPECT_EQ(probe.Int("SELECT count(*)::text FROM ql3.trigger_schedules"),
            static_cast<int64_t>(triggers));
  Result<Table> duplicates = probe.Query(
      "SELECT trigger_id, scheduled_for_ms::text, count(*)::text FROM ql3.runs GROUP BY 1, 2 "
      "HAVING count(*) <> 1 ORDER BY 1, 2 LIMIT 10",
      3);
  EXPECT_TRUE(duplicates.ok()) << duplicates.status().ToString();
  if (duplicates.ok()) {
    for (const auto& row : *duplicates) {
      ADD_FAILURE() << "trigger " << row[0] << " second " << row[1] << " has " << row[2] << " runs";
    }
  }
  EXPECT_EQ(probe.Int("SELECT count(*)::text FROM ql3.runs r WHERE "
                      "(SELECT count(*) FROM ql3.run_attempts a WHERE a.run_id = r.id) <> 1 OR "
                      "EXISTS (SELECT 1 FROM ql3.run_events e WHERE e.run_id = r.id)"),
            0)
      << "runs without exactly one attempt, or with stored admission events (a cron "
         "admission's are derived from the run row)";
  EXPECT_EQ(
      probe.Int(
          "SELECT count(*)::text FROM ql3.runs r WHERE r.status <> 'queued' OR "
          "r.trigger_type <> 'cron' OR r.scheduled_for_ms IS NULL OR r.scheduled_for_ms % 1000 "
          "<> 0 OR NOT EXISTS (SELECT 1 FROM ql3.run_attempts a WHERE a.run_id = r.id AND "
          "a.attempt = 1 AND a.status = 'claimed' AND a.executor_type = 'remote_worker') OR "
          "r.event_sequence <> 2"),
      0)
      << "runs that are not a queued cron run on a whole second with a claimed remote_worker "
         "attempt, after run.created and run.queued";
  Result<Table> gaps = probe.Query(
      "WITH per AS (SELECT trigger_id, min(scheduled_for_ms) AS first_ms, "
      "max(scheduled_for_ms) AS last_ms, count(*) AS n, count(DISTINCT scheduled_for_ms) AS d "
      "FROM ql3.runs GROUP BY trigger_id) "
      "SELECT s.trigger_id, coalesce(per.first_ms::text, '-'), coalesce(per.last_ms::text, '-'), "
      "coalesce(per.n::text, '0'), ((s.published_at_ms / 1000 + 1) * 1000)::text "
      "FROM ql3.trigger_schedules s LEFT JOIN per ON per.trigger_id = s.trigger_id "
      "WHERE per.trigger_id IS NULL OR per.n <> per.d OR "
      "per.n <> (per.last_ms - per.first_ms) / 1000 + 1 OR "
      "per.first_ms <> (s.published_at_ms / 1000 + 1) * 1000 OR per.last_ms < $1 "
      "ORDER BY s.trigger_id LIMIT 10",
      5, {pg::P(through_ms)});
  EXPECT_TRUE(gaps.ok()) << gaps.status().ToString();
  if (gaps.ok()) {
    for (const auto& row : *gaps) {
      ADD_FAILURE() << "trigger " << row[0] << ": runs " << row[3] << " from " << row[1] << " to "
                    << row[2] << "; expected one per second from " << row[4] << " through at least "
                    << through_ms;
    }
  }
  return probe.Int("SELECT count(*)::text FROM ql3.runs");
}

// ---------------------------------------------------------------------------------------------
// A replica that claims a batch and dies without committing a decision.

struct HeldClaims {
  std::string owner;
  std::vector<std::string> trigger_ids;
  std::vector<int64_t> cursors;   // the claimed occurrence of each row
  std::vector<int64_t> versions;  // claim_version of each row
  int64_t acquired_at_ms = 0;
  int64_t expires_at_ms = 0;

  size_t size() const { return trigger_ids.size(); }
  bool Contains(const std::string& id) const {
    return std::find(trigger_ids.begin(), trigger_ids.end(), id) != trigger_ids.end();
  }
  // $1..$3 for kClaimedRows, $4 the owner, $5 the expiry.
  std::vector<pg::Param> Params() const {
    std::vector<pg::Param> params = RowParams();
    params.push_back(pg::P(owner));
    params.push_back(pg::P(expires_at_ms));
    return params;
  }
  std::vector<pg::Param> RowParams() const {
    return {pg::P(ArrayLiteral(trigger_ids)), pg::P(ArrayLiteral(cursors)),
            pg::P(ArrayLiteral(versions))};
  }
};

// The claimed rows as a relation c(trigger_id, cursor_ms, version) over HeldClaims::Params.
constexpr char kClaimedRows[] =
    "SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS c(trigger_id, cursor_ms, "
    "version)";

// Opens a store of its own as `owner` on `runtime_url`, claims up to `limit` due rows with
// ClaimDueSchedules directly (retrying while the live replicas win the race for them) and
// closes its pool without committing any decision: the claims stay in the database until
// they expire by the database clock.
HeldClaims ClaimAndDie(const std::string& owner, const std::string& runtime_url, int limit,
                       int64_t lease_ms) {
  HeldClaims held;
  held.owner = owner;
  PostgresStoreOptions options;
  options.runtime.url = runtime_url;
  options.runtime.max_connections = 1;
  Result<std::unique_ptr<PostgresStore>> store = PostgresStore::Open(options);
  if (!store.ok()) {
    ADD_FAILURE() << owner << " store: " << store.status().ToString();
    return held;
  }
  PostgresClusterSchedules schedules((*store)->runtime_pool());
  std::vector<ScheduleClaim> claims;
  const bool claimed = WaitFor(
      [&] {
        ClaimRequest request{owner, NewUuidV7(SystemClock().NowMs(), SecureRandom()), limit,
                             lease_ms};
        Result<std::vector<ScheduleClaim>> got = schedules.ClaimDueSchedules(request);
        EXPECT_TRUE(got.ok()) << got.status().ToString();
        if (!got.ok()) return true;
        claims = std::move(got).value();
        return !claims.empty();
      },
      // The live replicas claim each second's rows within a few milliseconds of the boundary:
      // only a tight poll gets a share.
      20'000, 1);
  (*store)->runtime_pool().Close();  // the replica dies: no decision is ever committed
  EXPECT_TRUE(claimed) << owner << " never won a due row";
  for (const ScheduleClaim& c : claims) {
    EXPECT_TRUE(c.due.schedule.next_fire_at_ms.has_value()) << "claimed an uninitialised row";
    EXPECT_EQ(c.owner, owner);
    EXPECT_EQ(c.expires_at_ms, c.acquired_at_ms + lease_ms);
    held.trigger_ids.push_back(c.due.schedule.trigger_id);
    held.cursors.push_back(c.due.schedule.next_fire_at_ms.value_or(0));
    held.versions.push_back(c.claim_version);
    held.acquired_at_ms = c.acquired_at_ms;
    held.expires_at_ms = c.expires_at_ms;
  }
  return held;
}

// The claims as the database holds them: every row still owned by the dead owner with its
// claim version and the expiry the claim statement returned.
int64_t RowsStillHeld(Probe& probe, const HeldClaims& held) {
  return probe.Int(std::string("WITH c AS (") + kClaimedRows +
                       ") SELECT count(*)::text FROM ql3.trigger_schedules s JOIN c ON "
                       "c.trigger_id = s.trigger_id WHERE s.claim_owner = $4 AND "
                       "s.claim_version = c.version AND s.claim_expires_at_ms = $5",
                   held.Params());
}

struct ExpiryWatch {
  int readings_before_expiry = 0;
  int64_t last_reading_before_expiry_ms = 0;
};

// Watches the held rows until the database clock passes their expiry (or `timeout_ms`). One
// statement reads the clock and the rows: its snapshot is older than its clock reading, so at
// any reading before the expiry the rows must still be held by the dead owner (no takeover can
// have committed: a takeover reads the clock at or after the expiry before it commits). At every
// reading, no run of a held occurrence (scheduled at or after the claimed cursor) may exist with
// a creation time before the expiry.
ExpiryWatch WatchUntilExpiry(Probe& probe, const HeldClaims& held, int64_t timeout_ms) {
  ExpiryWatch watch;
  const std::string sql =
      std::string("WITH clock AS MATERIALIZED (SELECT ") + kDbNowSql + " AS now_ms), c AS (" +
      kClaimedRows +
      ") SELECT clock.now_ms::text, "
      "(SELECT count(*) FROM ql3.trigger_schedules s JOIN c ON c.trigger_id = s.trigger_id "
      "WHERE s.claim_owner = $4 AND s.claim_version = c.version AND "
      "s.claim_expires_at_ms = $5)::text, "
      "(SELECT count(*) FROM ql3.runs r JOIN c ON c.trigger_id = r.trigger_id WHERE "
      "r.scheduled_for_ms >= c.cursor_ms AND r.created_at_ms < $5)::text FROM clock";
  const int64_t deadline = SteadyMs() + timeout_ms;
  while (true) {
    Result<Table> row = probe.Query(sql, 3, held.Params());
    EXPECT_TRUE(row.ok()) << row.status().ToString();
    if (!row.ok()) return watch;
    const int64_t now_ms = std::stoll((*row)[0][0]);
    const int64_t still_held = std::stoll((*row)[0][1]);
    const int64_t early_runs = std::stoll((*row)[0][2]);
    EXPECT_EQ(early_runs, 0) << "a held occurrence was admitted before the claim expired (db "
                             << now_ms << ", expiry " << held.expires_at_ms << ")";
    if (now_ms >= held.expires_at_ms) return watch;
    EXPECT_EQ(still_held, static_cast<int64_t>(held.size()))
        << "a held row was claimed by someone else " << held.expires_at_ms - now_ms
        << " ms before its claim expired";
    ++watch.readings_before_expiry;
    watch.last_reading_before_expiry_ms = now_ms;
    if (SteadyMs() >= deadline) {
      ADD_FAILURE() << "the claim did not expire within " << timeout_ms << " ms";
      return watch;
    }
    SleepMs(100);
  }
}

// After the expiry: each held occurrence has exactly one run, created at or after the expiry,
// and each held row was claimed again (its claim version moved on). Returns the earliest
// takeover admission time minus the expiry.
int64_t ExpectTakenOverAfterExpiry(Probe& probe, const HeldClaims& held) {
  Result<Table> rows = probe.Query(
      std::string("WITH c AS (") + kClaimedRows +
          ") SELECT c.trigger_id, (SELECT count(*) FROM ql3.runs r WHERE r.trigger_id = "
          "c.trigger_id AND r.scheduled_for_ms = c.cursor_ms)::text, "
          "coalesce((SELECT min(r.created_at_ms) FROM ql3.runs r WHERE r.trigger_id = "
          "c.trigger_id AND r.scheduled_for_ms = c.cursor_ms)::text, ''), "
          "(s.claim_version > c.version)::text FROM c JOIN ql3.trigger_schedules s ON "
          "s.trigger_id = c.trigger_id",
      4, held.RowParams());
  EXPECT_TRUE(rows.ok()) << rows.status().ToString();
  if (!rows.ok()) return -1;
  EXPECT_EQ(rows->size(), held.size());
  int64_t first = INT64_MAX;
  for (const auto& row : *rows) {
    SCOPED_TRACE("held trigger " + row[0]);
    EXPECT_EQ(row[1], "1") << "the held occurrence must have exactly one run";
    if (row[2].empty()) {
      ADD_FAILURE() << "the held occurrence was never admitted";
      continue;
    }
    const int64_t created = std::stoll(row[2]);
    EXPECT_GE(created, held.expires_at_ms) << "admitted before the claim's expiry";
    EXPECT_EQ(row[3], "true") << "the row was never claimed again after the expiry";
    first = std::min(first, created);
  }
  return first == INT64_MAX ? -1 : first - held.expires_at_ms;
}

// ---------------------------------------------------------------------------------------------
// Tests 1–4: a fresh database on the shared test server per test, under each admission
// isolation.

class ClusterFaultsTest : public ::testing::TestWithParam<AdmissionIsolation> {
 protected:
  void SetUp() override {
    PgTestCluster& cluster = PgTestCluster::Get();
    database_ = cluster.NewDatabase();
    runtime_url_ = cluster.Url(pg::kRuntimeRole, database_);
    publisher_ = Publisher::Open(runtime_url_, cluster.Url(pg::kAdminRole, database_));
    ASSERT_NE(publisher_, nullptr);
    probe_ = Probe::Open(cluster.Url(PostgresServer::kSuperuser, database_));
    ASSERT_NE(probe_, nullptr);
  }

  void StartReplicas(const std::vector<std::string>& owners, int64_t lease_ms) {
    for (const std::string& owner : owners) {
      std::unique_ptr<Replica> replica =
          Replica::Open(owner, runtime_url_, lease_ms, GetParam());
      ASSERT_NE(replica, nullptr);
      replica->Start();
      replicas_.push_back(std::move(replica));
    }
  }

  void TearDown() override { StopAll(replicas_); }

  std::string database_;
  std::string runtime_url_;
  std::unique_ptr<Publisher> publisher_;
  std::unique_ptr<Probe> probe_;
  Replicas replicas_;
};

TEST_P(ClusterFaultsTest, ThreeReplicasAdmitEveryOccurrenceOfTwoHundredTriggersExactlyOnce) {
  Phases phases("three-replicas");
  const std::vector<std::string> triggers = publisher_->PublishEverySecond(200);
  ASSERT_EQ(triggers.size(), 200u);
  phases.Mark("publish");
  StartReplicas({"replica-1", "replica-2", "replica-3"}, 5000);
  SleepMs(8000);
  phases.Mark("run");
  const int64_t through = probe_->DueSecond();
  ExpectCaughtUp(*probe_, through);
  phases.Mark("catch_up");
  StopAll(replicas_);
  Report("three-replicas", replicas_);

  const int64_t runs = ExpectExactlyOncePerOccurrence(*probe_, triggers.size(), through);
  // No connection is cut here: a decision either commits and is reported as admitted, or fails
  // (say, serialization retries exhausted) and rolls back whole. So runs and reports match.
  EXPECT_EQ(runs, TotalAdmitted(replicas_));
  for (const auto& r : replicas_) {
    EXPECT_GT(r->admitted(), 0) << r->owner() << " admitted nothing";
    EXPECT_EQ(r->skipped(), 0) << r->owner();
  }
  std::cout << "[three-replicas] runs=" << runs << " through=" << through << "\n";
}

TEST_P(ClusterFaultsTest, AReplicaKilledHoldingClaimsIsTakenOverOnlyAfterTheDatabaseExpiry) {
  Phases phases("killed-holding-claims");
  const std::vector<std::string> triggers = publisher_->PublishEverySecond(24);
  ASSERT_EQ(triggers.size(), 24u);
  phases.Mark("publish");
  StartReplicas({"replica-b", "replica-c"}, 3000);
  ASSERT_TRUE(WaitFor([&] { return WarmedUp(*probe_); }, kWarmUpWaitMs));
  phases.Mark("warm_up");

  // Replica A claims a batch (lease 3 s) and dies, as after SIGKILL: it never commits.
  HeldClaims held = ClaimAndDie("replica-a", runtime_url_, 8, 3000);
  ASSERT_GT(held.size(), 0u);
  EXPECT_EQ(held.expires_at_ms, held.acquired_at_ms + 3000);
  // The claims as the database stores them.
  EXPECT_EQ(RowsStillHeld(*probe_, held), static_cast<int64_t>(held.size()));

  phases.Mark("claim");
  ExpiryWatch watch = WatchUntilExpiry(*probe_, held, 20'000);
  EXPECT_GT(watch.readings_before_expiry, 2) << "the watch must see the claim held";
  phases.Mark("watch");
  SleepMs(1500);
  const int64_t through = probe_->DueSecond();
  ExpectCaughtUp(*probe_, through);
  phases.Mark("catch_up");
  StopAll(replicas_);
  Report("killed-holding-claims", replicas_);

  const int64_t takeover_ms = ExpectTakenOverAfterExpiry(*probe_, held);
  const int64_t runs = ExpectExactlyOncePerOccurrence(*probe_, triggers.size(), through);
  EXPECT_EQ(runs, TotalAdmitted(replicas_));
  for (const auto& r : replicas_) {
    EXPECT_GT(r->admitted(), 0) << r->owner();
    EXPECT_EQ(r->skipped(), 0) << r->owner();
  }
  std::cout << "[killed-holding-claims] held=" << held.size()
            << " readings_before_expiry=" << watch.readings_before_expiry
            << " last_reading_before_expiry="
            << held.expires_at_ms - watch.last_reading_before_expiry_ms
            << "ms takeover_after_expiry=" << takeover_ms << "ms runs=" << runs << "\n";
}

TEST_P(ClusterFaultsTest, TerminatedBackendsMidRoundLeaveExactlyOneRunPerOccurrence) {
  Phases phases("terminated-backends");
  const std::vector<std::string> triggers = publisher_->PublishEverySecond(100);
  ASSERT_EQ(triggers.size(), 100u);
  phases.Mark("publish");
  constexpr int64_t kLeaseMs = 2000;
  StartReplicas({"replica-1", "replica-2", "replica-3"}, kLeaseMs);
  ASSERT_TRUE(WaitFor([&] { return WarmedUp(*probe_); }, kWarmUpWaitMs));
  phases.Mark("warm_up");

  // Terminates every ql3_runtime backend of this database every ~300 ms for ~5 s: claims,
  // decisions and COMMITs die mid-flight (a COMMIT cut off leaves the outcome unknown).
  std::unique_ptr<Probe> killer =
      Probe::Open(PgTestCluster::Get().Url(PostgresServer::kSuperuser, database_));
  ASSERT_NE(killer, nullptr);
  int64_t terminated = 0;
  int bursts = 0;
  const int64_t storm_end = SteadyMs() + 5000;
  while (SteadyMs() < storm_end) {
    Result<Table> killed = killer->Query(
        "SELECT count(*) FILTER (WHERE t)::text FROM (SELECT pg_terminate_backend(pid) AS t "
        "FROM pg_stat_activity WHERE usename = 'ql3_runtime' AND datname = current_database() "
        "AND pid <> pg_backend_pid()) k",
        1, {}, /*read_only=*/false);
    ASSERT_TRUE(killed.ok()) << killed.status().ToString();
    terminated += std::stoll((*killed)[0][0]);
    ++bursts;
    SleepMs(300);
  }
  phases.Mark("storm");
  // Then a clean stretch: every claim left by a dead backend expires (lease) and is taken over.
  SleepMs(kLeaseMs + 2000);
  const int64_t through = probe_->DueSecond();
  ExpectCaughtUp(*probe_, through);
  phases.Mark("clean_and_catch_up");
  StopAll(replicas_);
  Report("terminated-backends", replicas_);

  const int64_t runs = ExpectExactlyOncePerOccurrence(*probe_, triggers.size(), through);
  int64_t failures = 0;
  int64_t replaced = 0;
  for (const auto& r : replicas_) {
    EXPECT_EQ(r->skipped(), 0) << r->owner();
    failures += r->decision_errors() + r->failed_rounds();
    replaced += r->pool().ended_idle_connections();
  }
  EXPECT_GT(terminated, 0);
  // A backend ended mid-round fails the round; one ended between rounds is found by the pool
  // before its next use and replaced. Either way the storm reached the replicas.
  EXPECT_GT(failures + replaced, 0) << "the storm must have hit the replicas";
  // A COMMIT whose reply was cut off may have committed: the replicas saw at most every run.
  EXPECT_LE(TotalAdmitted(replicas_), runs);
  std::cout << "[terminated-backends] bursts=" << bursts << " terminated=" << terminated
            << " replica_failures=" << failures << " replaced_connections=" << replaced
            << " runs=" << runs << " admitted_seen=" << TotalAdmitted(replicas_) << "\n";
}

TEST_P(ClusterFaultsTest, ALostCommitReplyOfAnAdmissionConvergesToOneRunPerOccurrence) {
  Phases phases("lost-commit-reply");
  const std::vector<std::string> triggers = publisher_->PublishEverySecond(60);
  ASSERT_EQ(triggers.size(), 60u);
  phases.Mark("publish");
  StartReplicas({"replica-x", "replica-y", "replica-z"}, 3000);
  ASSERT_TRUE(WaitFor([&] { return WarmedUp(*probe_); }, kWarmUpWaitMs));
  phases.Mark("warm_up");

  // From now on every cursor is initialised, so each COMMIT of an admission transaction admits
  // runs. Replica X loses the reply of every other one: the runs and the advanced cursors are
  // committed, X sees OutcomeUnknown (and must not admit those occurrences again).
  std::atomic<int64_t> commits{0};
  std::atomic<int64_t> lost{0};
  replicas_[0]->pool().SetCommitFaultForTesting([&](std::string_view operation) -> Status {
    if (operation != kAdmissionOp) return Status::Ok();
    if (commits.fetch_add(1) % 2 != 0) return Status::Ok();
    ++lost;
    return pg::StatusFromPg("", "", true, operation, pg::PgPhase::kCommit);
  });
  SleepMs(6000);
  phases.Mark("run");
  const int64_t through = probe_->DueSecond();
  ExpectCaughtUp(*probe_, through);
  phases.Mark("catch_up");
  StopAll(replicas_);
  replicas_[0]->pool().SetCommitFaultForTesting(nullptr);
  Report("lost-commit-reply", replicas_);

  const int64_t runs = ExpectExactlyOncePerOccurrence(*probe_, triggers.size(), through);
  EXPECT_GT(lost.load(), 0) << "replica X never admitted after the fault was set";
  // Accounting: a run no replica reported is one committed by a transaction whose reply was
  // lost; such a transaction admits at most a round's claims (exactly one when every occurrence
  // is committed on its own), and the lost replies did hide committed runs.
  const int64_t unseen = runs - TotalAdmitted(replicas_);
  EXPECT_GT(unseen, 0) << "no lost reply hid a committed run";
  EXPECT_LE(unseen, lost.load() * 16) << "runs appeared that no admission accounts for";
  EXPECT_GT(replicas_[0]->admitted(), 0) << replicas_[0]->Summary();
  for (const auto& r : replicas_) EXPECT_EQ(r->skipped(), 0) << r->owner();
  std::cout << "[lost-commit-reply] x_commits=" << commits.load() << " lost=" << lost.load()
            << " unseen_runs=" << unseen << " runs=" << runs << "\n";
}

// ---------------------------------------------------------------------------------------------
// Test 5: physical failover with a claim held across the promotion.

// Each test starts a primary of its own that streams its WAL, and a standby of it.
class ClusterFailoverTest : public ::testing::TestWithParam<AdmissionIsolation> {
 protected:
  // The primary with the roles and the schema, then a streaming standby of it.
  void StartPrimaryAndStandby() {
    ::setenv(pg::kAllowInsecureEnv, "true", 1);
    PostgresServerOptions server_options;
    server_options.replication = true;
    Result<std::unique_ptr<PostgresServer>> started = PostgresServer::Start(server_options);
    ASSERT_TRUE(started.ok()) << started.status().ToString();
    primary_ = std::move(started).value();
    ASSERT_TRUE(
        primary_->PsqlFile("postgres", std::string(QL_SOURCE_DIR) + "/deploy/postgres/roles.sql")
            .ok());
    ::ql::testing::FakeClock clock;
    Result<pg::MigrateReport> migrated =
        pg::Migrate(primary_->Url(pg::kMigrationRole, db), clock);
    ASSERT_TRUE(migrated.ok()) << migrated.status().ToString();
    Result<std::unique_ptr<PostgresServer>> standby = PostgresServer::StartStandby(*primary_);
    ASSERT_TRUE(standby.ok()) << standby.status().ToString();
    standby_ = std::move(standby).value();
  }

  // Publishes `count` every-second triggers through the primary.
  std::vector<std::string> PublishOnPrimary(int count) {
    std::unique_ptr<Publisher> publisher =
        Publisher::Open(primary_->Url(pg::kRuntimeRole, db), primary_->Url(pg::kAdminRole, db));
    if (publisher == nullptr) return {};
    return publisher->PublishEverySecond(count);
  }

  // Replica P on the primary (lease 2 s), started, once every trigger has a run as `probe` sees
  // it; null after a failure.
  std::unique_ptr<Replica> StartWarmReplicaOnPrimary(Probe& probe) {
    std::unique_ptr<Replica> p =
        Replica::Open("replica-p", primary_->Url(pg::kRuntimeRole, db), 2000, GetParam());
    if (p == nullptr) return nullptr;
    p->Start();
    if (!WaitFor([&] { return WarmedUp(probe); }, kWarmUpWaitMs)) {
      ADD_FAILURE() << "replica-p did not warm up within " << kWarmUpWaitMs << " ms";
      return nullptr;
    }
    return p;
  }

  // Promotes the standby and waits until it has left recovery; returns a probe on it, or null
  // after a failure.
  std::unique_ptr<Probe> PromoteStandby() {
    Status promoted = standby_->Promote();
    if (!promoted.ok()) {
      ADD_FAILURE() << promoted.ToString();
      return nullptr;
    }
    std::unique_ptr<Probe> probe = Probe::Open(standby_->Url(PostgresServer::kSuperuser, db));
    if (probe == nullptr) return nullptr;
    if (!WaitFor(
            [&] {
              Result<Table> in_recovery =
                  probe->Query("SELECT CASE WHEN pg_is_in_recovery() THEN 't' ELSE 'f' END", 1);
              return in_recovery.ok() && (*in_recovery)[0][0] == "f";
            },
            30'000, 100)) {
      ADD_FAILURE() << "the promoted standby never left recovery";
      return nullptr;
    }
    return probe;
  }

  const std::string db = "qinglong";
  std::unique_ptr<PostgresServer> primary_;
  std::unique_ptr<PostgresServer> standby_;
};

TEST_P(ClusterFailoverTest, APromotedStandbyHonoursAClaimHeldAcrossFailoverAndAdmitsTheRest) {
  Phases phases("failover");
  ASSERT_NO_FATAL_FAILURE(StartPrimaryAndStandby());
  phases.Mark("primary_and_standby");
  PostgresServer* primary = primary_.get();
  PostgresServer* standby = standby_.get();
  // A standby is not ready for a replica: the audit names it as such.
  const auto audit_standby = [&]() -> Status {
    Result<std::unique_ptr<pg::Connection>> conn =
        pg::Connection::Open(standby->Url(pg::kRuntimeRole, db), {});
    if (!conn.ok()) return conn.status();
    return pg::AuditReadiness(**conn);
  };
  EXPECT_EQ(audit_standby().reason(), "server_in_recovery");

  const std::vector<std::string> triggers = PublishOnPrimary(20);
  ASSERT_EQ(triggers.size(), 20u);
  phases.Mark("publish");
  std::unique_ptr<Probe> old_primary_probe =
      Probe::Open(primary->Url(PostgresServer::kSuperuser, db));
  ASSERT_NE(old_primary_probe, nullptr);

  // A replica on the primary admits while A claims a batch with a long lease and dies with it.
  std::unique_ptr<Replica> p = StartWarmReplicaOnPrimary(*old_primary_probe);
  ASSERT_NE(p, nullptr);
  phases.Mark("warm_up");
  constexpr int64_t kLeaseMs = 8000;
  HeldClaims held = ClaimAndDie("replica-a", primary->Url(pg::kRuntimeRole, db), 6, kLeaseMs);
  ASSERT_GT(held.size(), 0u);
  ASSERT_LT(held.size(), triggers.size());
  EXPECT_EQ(RowsStillHeld(*old_primary_probe, held), static_cast<int64_t>(held.size()));

  // The claim reaches the standby by WAL replay before the primary goes away.
  const std::string replayed_sql =
      "SELECT count(*) FROM ql3.trigger_schedules WHERE claim_owner = 'replica-a' AND "
      "claim_expires_at_ms = " +
      std::to_string(held.expires_at_ms) + ";";
  ASSERT_TRUE(WaitFor(
      [&] {
        Result<std::string> out = standby->Psql(db, replayed_sql);
        return out.ok() && std::stoll(*out) == static_cast<int64_t>(held.size());
      },
      20'000, 100))
      << "the claim was not replayed on the standby";
  phases.Mark("claim_and_replay");
  const int64_t remaining_at_fence = held.expires_at_ms - old_primary_probe->NowMs();
  EXPECT_EQ(old_primary_probe->Int(
                "SELECT count(*)::text FROM ql3.runs r WHERE r.trigger_id = ANY($1::text[]) AND "
                "r.created_at_ms >= $2",
                {pg::P(ArrayLiteral(held.trigger_ids)), pg::P(held.acquired_at_ms)}),
            0);
  old_primary_probe.reset();

  // The primary dies; its replica with it. The standby is promoted.
  ASSERT_TRUE(primary->Stop().ok());
  p->Stop();
  const int64_t promote_started = SteadyMs();
  std::unique_ptr<Probe> probe = PromoteStandby();
  ASSERT_NE(probe, nullptr);
  const int64_t promote_took = SteadyMs() - promote_started;
  phases.Mark("stop_and_promote");
  const int64_t promoted_at = probe->NowMs();
  const int64_t remaining_at_promotion = held.expires_at_ms - promoted_at;
  // The held rows, as the new primary has them.
  EXPECT_EQ(RowsStillHeld(*probe, held), static_cast<int64_t>(held.size()));

  // Two fresh replicas on the new primary.
  Replicas replicas;
  for (const char* owner : {"replica-q", "replica-r"}) {
    std::unique_ptr<Replica> replica =
        Replica::Open(owner, standby->Url(pg::kRuntimeRole, db), 2000, GetParam());
    ASSERT_NE(replica, nullptr);
    replica->Start();
    replicas.push_back(std::move(replica));
  }
  ExpiryWatch watch = WatchUntilExpiry(*probe, held, 30'000);
  phases.Mark("watch");
  // The unclaimed triggers did not wait for the held claim: each got a run on the new primary
  // before the held claim expired. (P's own claims, cut off by the failover, expire within
  // its 2 s lease, well inside A's remaining lease; on a machine too slow to leave 3 s of that
  // lease after the promotion only the weaker "some were admitted first" is checked.)
  const int64_t unclaimed = static_cast<int64_t>(triggers.size() - held.size());
  const int64_t admitted_before_expiry = probe->Int(
      "SELECT count(DISTINCT trigger_id)::text FROM ql3.runs WHERE NOT (trigger_id = "
      "ANY($1::text[])) AND created_at_ms >= $2 AND created_at_ms < $3",
      {pg::P(ArrayLiteral(held.trigger_ids)), pg::P(promoted_at), pg::P(held.expires_at_ms)});
  if (remaining_at_promotion >= 3000) {
    EXPECT_EQ(admitted_before_expiry, unclaimed);
  } else if (remaining_at_promotion >= 1000) {
    EXPECT_GT(admitted_before_expiry, 0);
    std::cout << "[failover] note: only " << remaining_at_promotion
              << " ms of the held lease were left at promotion\n";
  }
  SleepMs(1500);
  const int64_t through = probe->DueSecond();
  ExpectCaughtUp(*probe, through);
  phases.Mark("catch_up");
  StopAll(replicas);
  Report("failover", replicas);
  std::cout << "[failover] " << p->Summary() << "\n";

  EXPECT_TRUE(audit_standby().ok()) << "the promoted standby is not ready";
  const int64_t takeover_ms = ExpectTakenOverAfterExpiry(*probe, held);
  const int64_t runs = ExpectExactlyOncePerOccurrence(*probe, triggers.size(), through);
  // Every run created on the new primary is an admission its replicas saw committed.
  EXPECT_EQ(probe->Int("SELECT count(*)::text FROM ql3.runs WHERE created_at_ms >= $1",
                       {pg::P(promoted_at)}),
            TotalAdmitted(replicas));
  EXPECT_GT(watch.readings_before_expiry, 0);
  for (const auto& r : replicas) {
    EXPECT_GT(r->admitted(), 0) << r->owner();
    EXPECT_EQ(r->skipped(), 0) << r->owner();
  }
  EXPECT_EQ(p->skipped(), 0);
  std::cout << "[failover] held=" << held.size() << " remaining_at_fence=" << remaining_at_fence
            << "ms remaining_at_promotion=" << remaining_at_promotion
            << "ms promote_took=" << promote_took
            << "ms readings_before_expiry=" << watch.readings_before_expiry
            << " unclaimed_admitted_before_expiry=" << admitted_before_expiry << "/" << unclaimed
            << " takeover_after_expiry=" << takeover_ms << "ms runs=" << runs << "\n";
}

// Test 6 (ADR-0105's HA drill): a replica loses the COMMIT reply of admissions that did commit;
// the committed facts reach the standby by WAL replay; the primary dies and the standby is
// promoted; a fresh control plane's startup recovery on the new primary leaves every admitted
// run to the dispatcher (pristine queued runs with their claimed attempt are not abandoned
// work), and fresh replicas admit the rest: one run per occurrence, none admitted twice.
TEST_P(ClusterFailoverTest, LostCommitRepliesReplayedOnAPromotedStandbyStayAdmittedOnceThroughRecovery) {
  Phases phases("lost-commit-failover");
  ASSERT_NO_FATAL_FAILURE(StartPrimaryAndStandby());
  phases.Mark("primary_and_standby");
  PostgresServer* primary = primary_.get();
  PostgresServer* standby = standby_.get();

  const std::vector<std::string> triggers = PublishOnPrimary(20);
  ASSERT_EQ(triggers.size(), 20u);
  std::unique_ptr<Probe> old_primary_probe =
      Probe::Open(primary->Url(PostgresServer::kSuperuser, db));
  ASSERT_NE(old_primary_probe, nullptr);

  // Replica P admits on the primary; once warmed up it loses the reply of every other
  // admission COMMIT: the runs and cursors are committed, P sees the outcome as unknown.
  std::unique_ptr<Replica> p = StartWarmReplicaOnPrimary(*old_primary_probe);
  ASSERT_NE(p, nullptr);
  phases.Mark("warm_up");
  std::atomic<int64_t> commits{0};
  std::atomic<int64_t> lost{0};
  p->pool().SetCommitFaultForTesting([&](std::string_view operation) -> Status {
    if (operation != kAdmissionOp) return Status::Ok();
    if (commits.fetch_add(1) % 2 != 0) return Status::Ok();
    ++lost;
    return pg::StatusFromPg("", "", true, operation, pg::PgPhase::kCommit);
  });
  ASSERT_TRUE(WaitFor([&] { return lost.load() >= 4; }, 30'000));
  p->Stop();
  p->pool().SetCommitFaultForTesting(nullptr);
  phases.Mark("lost_replies");
  const int64_t runs_on_primary = old_primary_probe->Int("SELECT count(*)::text FROM ql3.runs");
  const int64_t unseen_on_primary = runs_on_primary - p->admitted();
  EXPECT_GT(unseen_on_primary, 0) << "no lost reply hid a committed run";

  // Every committed fact, the ones behind lost replies included, is replayed on the standby
  // before the primary goes away.
  Result<std::string> primary_lsn = primary->Psql(db, "SELECT pg_current_wal_lsn();");
  ASSERT_TRUE(primary_lsn.ok()) << primary_lsn.status().ToString();
  std::string lsn = *primary_lsn;
  while (!lsn.empty() && std::isspace(static_cast<unsigned char>(lsn.back()))) lsn.pop_back();
  ASSERT_TRUE(WaitFor(
      [&] {
        Result<std::string> replayed = standby->Psql(
            db, "SELECT pg_last_wal_replay_lsn() >= '" + lsn + "'::pg_lsn;");
        return replayed.ok() && replayed->rfind('t', 0) == 0;
      },
      20'000, 100))
      << "the standby did not replay the primary's WAL up to " << lsn;
  old_primary_probe.reset();
  ASSERT_TRUE(primary->Stop().ok());
  std::unique_ptr<Probe> probe = PromoteStandby();
  ASSERT_NE(probe, nullptr);
  phases.Mark("replay_and_promote");
  EXPECT_EQ(probe->Int("SELECT count(*)::text FROM ql3.runs"), runs_on_primary)
      << "the new primary does not hold every run the old one committed";

  // A fresh control plane's startup recovery on the new primary: nothing the replica
  // admitted — whether or not it saw the COMMIT — is abandoned work.
  {
    PostgresStoreOptions options;
    options.runtime.url = standby->Url(pg::kRuntimeRole, db);
    options.runtime.max_connections = 2;
    Result<std::unique_ptr<PostgresStore>> store = PostgresStore::Open(options);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    Result<std::unique_ptr<pg::Connection>> conn =
        pg::Connection::Open(standby->Url(pg::kRuntimeRole, db), {});
    ASSERT_TRUE(conn.ok()) << conn.status().ToString();
    EXPECT_TRUE(pg::AuditReadiness(**conn).ok()) << "the promoted standby is not ready";
    PostgresClusterRecovery source((*store)->runtime_pool());
    Metrics metrics;
    ClusterRecovery recovery(source, (*store)->runs(), SystemClock(), SecureRandom(), metrics);
    Result<RecoveryReport> report = recovery.RunOnce();
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    EXPECT_EQ(report->errors, 0) << report->first_error.ToString();
    EXPECT_EQ(report->candidates, 0) << "startup recovery took pristine admissions for abandoned";
    EXPECT_EQ(report->lost + report->settled + report->requeued + report->stuck, 0);
  }
  phases.Mark("startup_recovery");

  // Fresh replicas on the new primary take over P's claims after their expiry and admit on.
  const int64_t promoted_at = probe->NowMs();
  Replicas replicas;
  for (const char* owner : {"replica-q", "replica-r"}) {
    std::unique_ptr<Replica> replica =
        Replica::Open(owner, standby->Url(pg::kRuntimeRole, db), 2000, GetParam());
    ASSERT_NE(replica, nullptr);
    replica->Start();
    replicas.push_back(std::move(replica));
  }
  SleepMs(4000);
  const int64_t through = probe->DueSecond();
  ExpectCaughtUp(*probe, through);
  phases.Mark("catch_up");
  StopAll(replicas);
  Report("lost-commit-failover", replicas);
  std::cout << "[lost-commit-failover] " << p->Summary() << "\n";

  const int64_t runs = ExpectExactlyOncePerOccurrence(*probe, triggers.size(), through);
  EXPECT_EQ(probe->Int("SELECT count(*)::text FROM ql3.trigger_schedules WHERE claim_owner = "
                       "'replica-p'"),
            0)
      << "a claim of the failed replica was never cleared";
  EXPECT_EQ(probe->Int("SELECT count(*)::text FROM ql3.runs WHERE created_at_ms >= $1",
                       {pg::P(promoted_at)}),
            TotalAdmitted(replicas));
  EXPECT_EQ(runs, runs_on_primary + TotalAdmitted(replicas));
  for (const auto& r : replicas) EXPECT_EQ(r->skipped(), 0) << r->owner();
  EXPECT_EQ(p->skipped(), 0);
  std::cout << "[lost-commit-failover] p_commits=" << commits.load() << " lost=" << lost.load()
            << " unseen_on_primary=" << unseen_on_primary << " runs_on_primary=" << runs_on_primary
            << " runs=" << runs << "\n";
}

std::string IsolationName(const ::testing::TestParamInfo<AdmissionIsolation>& info) {
  return info.param == AdmissionIsolation::kSerializable ? "Serializable" : "ReadCommitted";
}

INSTANTIATE_TEST_SUITE_P(Isolations, ClusterFaultsTest,
                         ::testing::Values(AdmissionIsolation::kSerializable,
                                           AdmissionIsolation::kReadCommitted),
                         IsolationName);
INSTANTIATE_TEST_SUITE_P(Isolations, ClusterFailoverTest,
                         ::testing::Values(AdmissionIsolation::kSerializable,
                                           AdmissionIsolation::kReadCommitted),
                         IsolationName);

}  // namespace
}  // namespace ql
