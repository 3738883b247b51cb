#include "ql/engine/cluster_scheduler.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ql/core/ids.h"
#include "ql/core/rfc3339.h"
#include "ql/engine/control_service.h"
#include "ql/engine/round_loop.h"
#include "ql/storage/sqlite/sqlite_store.h"
#include "ql/testing/fake_clock.h"

// The coordinator and its loop over a schedule repository fake: the rows it claims come from a
// SQLite store (so definitions, digests and execution revisions are real), and the fake decides
// what claiming and committing do — throw, block, fail, retry — without a database.

namespace ql {
namespace {

using testing::FakeClock;
using testing::SeededRandom;

int64_t Ms(const char* rfc3339) { return *ParseRfc3339(rfc3339); }

// The value of one series in the Prometheus text of `metrics`; 0 when it has no sample yet.
double Sample(const Metrics& metrics, const std::string& series) {
  std::istringstream in(metrics.RenderPrometheus());
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  }
  return 0;
}

// Counts the random bytes drawn through it.
class CountingRandom final : public RandomSource {
 public:
  void Fill(std::span<std::uint8_t> out) override {
    bytes += static_cast<int64_t>(out.size());
    inner_.Fill(out);
  }
  int64_t bytes = 0;

 private:
  SeededRandom inner_{5};
};

// Every claim returns a claim of each row of `due` (database clock `now_ms`); commits apply
// everything unless a hook says otherwise.
class FakeClusterSchedules final : public ClusterScheduleRepository {
 public:
  Result<std::vector<ScheduleClaim>> ClaimDueSchedules(const ClaimRequest& request) override {
    const int now_inside = ++inside;
    max_inside = std::max(max_inside.load(), now_inside);
    ++claims;
    struct Leave {
      std::atomic<int>& n;
      ~Leave() { --n; }
    } leave{inside};
    if (on_claim) on_claim();
    std::vector<ScheduleClaim> out;
    for (const DueSchedule& d : due) {
      ScheduleClaim c;
      c.due = d;
      c.owner = request.owner;
      c.token = request.token;
      c.claim_version = 1;
      c.acquired_at_ms = now_ms;
      c.expires_at_ms = now_ms + request.lease_ms;
      out.push_back(c);
    }
    return out;
  }
  Result<AdvanceOutcome> CommitClaimDecision(const ClaimDecision& decision) override {
    if (on_single) return on_single(decision);
    Record({decision});
    return AdvanceOutcome::kApplied;
  }
  Result<std::vector<ClaimCommitResult>> CommitClaimDecisions(
      const std::vector<ClaimDecision>& decisions) override {
    if (on_batch) return on_batch(decisions);
    Record(decisions);
    return std::vector<ClaimCommitResult>(decisions.size(),
                                          ClaimCommitResult{outcome, Status::Ok()});
  }
  Result<std::optional<int64_t>> MsUntilNextDue() override { return std::optional<int64_t>(); }
  AdmissionRetryStats TakeAdmissionRetryStats() override {
    AdmissionRetryStats out = stats;
    stats = {};
    return out;
  }
  int64_t TakeNextFireMismatches() override { return std::exchange(mismatches, 0); }

  void Record(const std::vector<ClaimDecision>& decisions) {
    std::lock_guard<std::mutex> lock(mu);
    committed.insert(committed.end(), decisions.begin(), decisions.end());
  }

  std::vector<DueSchedule> due;
  int64_t now_ms = 0;
  AdvanceOutcome outcome = AdvanceOutcome::kApplied;
  std::function<void()> on_claim;
  std::function<Result<std::vector<ClaimCommitResult>>(const std::vector<ClaimDecision>&)>
      on_batch;
  std::function<Result<AdvanceOutcome>(const ClaimDecision&)> on_single;
  AdmissionRetryStats stats;
  int64_t mismatches = 0;
  std::atomic<int> claims{0};
  std::atomic<int> inside{0};
  std::atomic<int> max_inside{0};
  std::mutex mu;
  std::vector<ClaimDecision> committed;
};

class ClusterSchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ql-cluster-sched-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    clock_.SetNowMs(Ms("2026-06-01T12:00:00.250Z"));
    SqliteOptions options;
    options.path = dir_ + "/q.db";
    store_ = std::move(SqliteStore::Open(options, clock_).value());
    control_ = std::make_unique<ControlService>(*store_, clock_, random_, ControlOptions{});
    ASSERT_TRUE(control_->EnsureDefaultProject().ok());
    repo_.now_ms = clock_.NowMs();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A local_process task with one trigger; returns the trigger's row as a claim would see it,
  // its cursor set to `cursor` (empty: needs initialisation).
  DueSchedule Row(const std::string& expression, std::optional<int64_t> cursor) {
    TaskWrite task;
    task.body = {{"name", "t" + std::to_string(++tasks_)},
                 {"spec", {{"command", {{"kind", "shell"}, {"command", "true"}}}}}};
    Result<PublishedTask> published = control_->PublishTask(task);
    EXPECT_TRUE(published.ok()) << published.status().ToString();
    TriggerWrite write;
    write.task_id = published->task.head.task_id;
    write.expression = expression;
    write.timezone = "UTC";
    write.misfire = "skip";
    Result<PublishedTrigger> trigger = control_->AddTrigger(write);
    EXPECT_TRUE(trigger.ok()) << trigger.status().ToString();
    Result<std::vector<DueSchedule>> due = store_->schedules().ListDueSchedules(clock_.NowMs(), 256);
    EXPECT_TRUE(due.ok()) << due.status().ToString();
    for (DueSchedule& d : *due) {
      if (d.schedule.trigger_id != trigger->trigger.head.trigger_id) continue;
      d.schedule.next_fire_at_ms = cursor;
      return d;
    }
    ADD_FAILURE() << "the new trigger is not due";
    return DueSchedule{};
  }

  ClusterSchedulerOptions Options() {
    ClusterSchedulerOptions options;
    options.owner = "replica-a";
    options.executor_type = "local_process";
    options.grace_ms = 30'000;
    return options;
  }

  std::string dir_;
  FakeClock clock_;
  SeededRandom random_{7};
  Metrics metrics_;
  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<ControlService> control_;
  FakeClusterSchedules repo_;
  int tasks_ = 0;
};

TEST_F(ClusterSchedulerTest, RunIdentityIsAllocatedOnlyForAnAdmission) {
  const int64_t now = clock_.NowMs();
  repo_.due = {Row("0 0 1 1 *", std::nullopt),                   // initialize
               Row("0 0 1 1 *", Ms("2020-01-01T00:00:00Z")),     // far behind: skip
               Row("* * * * * *", now / 1000 * 1000 - 1'000)};  // due: admit
  // What one claim token and one run identity (run id + attempt id) cost in random bytes.
  CountingRandom probe;
  (void)NewUuidV7(now, probe);
  const int64_t uuid_bytes = probe.bytes;

  CountingRandom random;
  ClusterScheduler scheduler(repo_, store_->definitions(), random, metrics_, Options());
  repo_.due = {repo_.due[0], repo_.due[1]};
  Result<RoundReport> quiet = scheduler.RunRound();
  ASSERT_TRUE(quiet.ok()) << quiet.status().ToString();
  EXPECT_EQ(quiet->initialized, 1);
  EXPECT_EQ(quiet->skipped, 1);
  const int64_t token_bytes = random.bytes;  // only the round's claim token
  EXPECT_EQ(token_bytes, 16);
  for (const ClaimDecision& d : repo_.committed) EXPECT_FALSE(d.run.has_value());

  // One admission among them: exactly one run id and one attempt id more.
  repo_.due = {Row("0 0 1 1 *", std::nullopt), Row("* * * * * *", now / 1000 * 1000 - 1'000)};
  repo_.committed.clear();
  random.bytes = 0;
  Result<RoundReport> admitting = scheduler.RunRound();
  ASSERT_TRUE(admitting.ok()) << admitting.status().ToString();
  EXPECT_EQ(admitting->admitted, 1);
  EXPECT_EQ(admitting->initialized, 1);
  EXPECT_EQ(random.bytes, token_bytes + 2 * uuid_bytes);
  int runs = 0;
  for (const ClaimDecision& d : repo_.committed) runs += d.run.has_value() ? 1 : 0;
  EXPECT_EQ(runs, 1);

  // An admission that races is counted as raced, never as admitted.
  repo_.outcome = AdvanceOutcome::kRaced;
  Result<RoundReport> raced = scheduler.RunRound();
  ASSERT_TRUE(raced.ok()) << raced.status().ToString();
  EXPECT_EQ(raced->raced, 2);
  EXPECT_EQ(raced->admitted, 0);
  EXPECT_EQ(Sample(metrics_, R"(ql_scheduler_occurrences_total{outcome="raced"})"), 2);
  EXPECT_EQ(Sample(metrics_, R"(ql_scheduler_occurrences_total{outcome="admit"})"), 1);
}

TEST_F(ClusterSchedulerTest, RoundRowsAreCountedInRowBuckets) {
  for (int i = 0; i < 3; ++i) repo_.due.push_back(Row("0 0 1 1 *", std::nullopt));
  ClusterScheduler scheduler(repo_, store_->definitions(), random_, metrics_, Options());
  Result<RoundReport> round = scheduler.RunRound();
  ASSERT_TRUE(round.ok()) << round.status().ToString();
  EXPECT_EQ(round->rows, 3);
  EXPECT_EQ(Sample(metrics_, R"(ql_scheduler_round_rows_bucket{le="2"})"), 0);
  EXPECT_EQ(Sample(metrics_, R"(ql_scheduler_round_rows_bucket{le="4"})"), 1);
  EXPECT_EQ(Sample(metrics_, R"(ql_scheduler_round_rows_bucket{le="1024"})"), 1);
}

TEST_F(ClusterSchedulerTest, RoundsOfOneSchedulerNeverOverlap) {
  repo_.due = {Row("0 0 1 1 *", std::nullopt)};
  ClusterScheduler scheduler(repo_, store_->definitions(), random_, metrics_, Options());
  std::mutex mu;
  std::condition_variable cv;
  bool entered = false;
  bool release = false;
  repo_.on_claim = [&] {
    std::unique_lock<std::mutex> lock(mu);
    if (entered) return;  // only the first claim blocks
    entered = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
  };
  Result<RoundReport> first = Internal("not_run", "");
  std::thread running([&] { first = scheduler.RunRound(); });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return entered; });
  }
  // A second caller while the first round is inside its claim.
  Result<RoundReport> second = scheduler.RunRound();
  EXPECT_EQ(second.status().code(), StatusCode::kBusy);
  EXPECT_EQ(second.status().reason(), "round_in_progress");
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  running.join();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->initialized, 1);
  EXPECT_EQ(repo_.claims.load(), 1);
  EXPECT_EQ(repo_.max_inside.load(), 1);
  // Once it has ended, the next round runs.
  EXPECT_TRUE(scheduler.RunRound().ok());
  EXPECT_EQ(repo_.claims.load(), 2);
}

TEST_F(ClusterSchedulerTest, AThrowingStoreIsCountedLoggedAndTheLoopGoesOn) {
  repo_.due = {Row("0 0 1 1 *", std::nullopt)};
  std::atomic<int> calls{0};
  repo_.on_claim = [&] {
    if (++calls == 2) throw std::runtime_error("injected: the store threw");
  };
  ClusterScheduler scheduler(repo_, store_->definitions(), random_, metrics_, Options());
  std::mutex mu;
  std::vector<std::string> lines;
  RoundLoopOptions options;
  options.name = "scheduler";
  options.metrics = &metrics_;
  options.error_delay_ms = 1;
  options.diagnostics = [&](std::string_view component, const Status& status) {
    std::lock_guard<std::mutex> lock(mu);
    lines.push_back(std::string(component) + ": " + status.reason() + ": " + status.message());
  };
  ConditionSleeper sleeper;
  RoundLoop loop(
      [&]() -> int64_t {
        Result<RoundReport> round = scheduler.RunRound();
        EXPECT_TRUE(round.ok()) << round.status().ToString();
        return 1;
      },
      sleeper, options);
  std::thread thread([&] { loop.Run(); });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (repo_.claims.load() < 5 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  loop.Stop();
  thread.join();
  EXPECT_GE(repo_.claims.load(), 5) << "the loop did not go on after the exception";
  EXPECT_EQ(loop.exceptions(), 1);
  EXPECT_EQ(Sample(metrics_, R"(ql_loop_exceptions_total{loop="scheduler"})"), 1);
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].rfind("scheduler: loop_exception: a round threw (injected: the store threw)",
                           0),
            0u)
      << lines[0];
}

TEST(RoundLoopGuardTest, AnythingThrownIsCaughtAndTheNextRoundRuns) {
  ConditionSleeper sleeper;
  Metrics metrics;
  RoundLoopOptions options;
  options.name = "dispatcher";
  options.metrics = &metrics;
  options.error_delay_ms = 1;
  std::atomic<int> rounds{0};
  RoundLoop loop(
      [&]() -> int64_t {
        const int n = ++rounds;
        if (n == 1) throw 42;  // not even a std::exception
        if (n == 2) throw std::bad_alloc();
        return 1;
      },
      sleeper, options);
  std::thread thread([&] { loop.Run(); });
  while (rounds < 4) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  loop.Stop();
  thread.join();
  EXPECT_EQ(loop.exceptions(), 2);
  EXPECT_EQ(Sample(metrics, R"(ql_loop_exceptions_total{loop="dispatcher"})"), 2);
}

TEST_F(ClusterSchedulerTest, TheSlowPathIsCountedAndReportedOnce) {
  const int64_t now = clock_.NowMs();
  repo_.due = {Row("* * * * * *", now / 1000 * 1000 - 1'000),
               Row("* * * * * *", now / 1000 * 1000 - 1'000)};
  repo_.stats = {3, 1};  // reruns the repository saw during this round
  repo_.on_batch = [](const std::vector<ClaimDecision>&) -> Result<std::vector<ClaimCommitResult>> {
    return Unavailable("retry_exhausted", "admitting: serialization_failure persisted");
  };
  std::vector<std::string> lines;
  ClusterScheduler scheduler(repo_, store_->definitions(), random_, metrics_, Options());
  scheduler.SetDiagnostics([&](std::string_view component, const Status& status) {
    lines.push_back(std::string(component) + ": " + status.reason() + ": " + status.message());
  });
  Result<RoundReport> report = scheduler.RunRound();
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->admitted, 2);  // one by one
  EXPECT_TRUE(report->committed_one_by_one);
  EXPECT_EQ(report->admission_retries, 3);
  EXPECT_EQ(report->admission_retries_exhausted, 1);
  EXPECT_EQ(Sample(metrics_, "ql_scheduler_admission_retries_total"), 3);
  EXPECT_EQ(Sample(metrics_, "ql_scheduler_admission_retries_exhausted_total"), 1);
  EXPECT_EQ(Sample(metrics_, "ql_scheduler_batch_fallbacks_total"), 1);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0],
            "scheduler: admission_slow_path: a batch of 2 decision(s): 3 whole-transaction "
            "rerun(s), 1 transaction(s) out of reruns; committed one by one after "
            "retry_exhausted: admitting: serialization_failure persisted");

  // A round on the fast path adds nothing and logs nothing.
  repo_.on_batch = nullptr;
  ASSERT_TRUE(scheduler.RunRound().ok());
  EXPECT_EQ(Sample(metrics_, "ql_scheduler_batch_fallbacks_total"), 1);
  EXPECT_EQ(lines.size(), 1u);
}

TEST_F(ClusterSchedulerTest, AnAdmissionRefusedForItsCursorIsCountedAsAnErrorAndAMismatch) {
  const int64_t now = clock_.NowMs();
  repo_.due = {Row("* * * * * *", now / 1000 * 1000 - 1'000),
               Row("* * * * * *", now / 1000 * 1000 - 1'000)};
  repo_.on_batch =
      [&](const std::vector<ClaimDecision>& decisions) -> Result<std::vector<ClaimCommitResult>> {
    std::vector<ClaimCommitResult> results(decisions.size());
    results[0].error = InvalidArgument("next_fire_mismatch", "the store recomputed another");
    results[1].outcome = AdvanceOutcome::kApplied;
    repo_.mismatches = 1;  // what the store counted for this batch
    return results;
  };
  ClusterScheduler scheduler(repo_, store_->definitions(), random_, metrics_, Options());
  EXPECT_EQ(Sample(metrics_, "ql_scheduler_next_fire_mismatches_total"), 0);
  Result<RoundReport> report = scheduler.RunRound();
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->admitted, 1);
  EXPECT_EQ(report->errors, 1);
  EXPECT_EQ(report->next_fire_mismatches, 1);
  EXPECT_EQ(report->first_error.reason(), "next_fire_mismatch");
  EXPECT_EQ(Sample(metrics_, "ql_scheduler_next_fire_mismatches_total"), 1);
  EXPECT_EQ(Sample(metrics_, "ql_scheduler_errors_total"), 1);
}

TEST_F(ClusterSchedulerTest, StoppingEndsARoundCommittingOneByOneWithinItsBound) {
  const int64_t now = clock_.NowMs();
  for (int i = 0; i < 64; ++i) repo_.due.push_back(Row("* * * * * *", now / 1000 * 1000 - 1'000));
  repo_.on_batch = [](const std::vector<ClaimDecision>&) -> Result<std::vector<ClaimCommitResult>> {
    return Unavailable("database_unavailable", "the batch failed");
  };
  std::atomic<int> singles{0};
  repo_.on_single = [&](const ClaimDecision&) -> Result<AdvanceOutcome> {
    ++singles;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // 64 of them: 12.8 s
    return AdvanceOutcome::kApplied;
  };
  ClusterSchedulerOptions options = Options();
  options.claims_per_round = 64;
  ClusterScheduler scheduler(repo_, store_->definitions(), random_, metrics_, options);
  ConditionSleeper sleeper;
  RoundLoop loop([&]() -> int64_t { return scheduler.RunRound().ok() ? 1000 : 1000; }, sleeper);
  std::thread thread([&] { loop.Run(); });
  while (singles < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const auto stop_at = std::chrono::steady_clock::now();
  scheduler.RequestStop();
  loop.Stop();
  thread.join();
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now() - stop_at)
                          .count();
  EXPECT_LT(waited, 10'000);
  EXPECT_LT(waited, 1'000) << "the stop waited for more than the commit in flight";
  EXPECT_LT(singles.load(), 64);
  EXPECT_EQ(loop.rounds(), 1);
}

}  // namespace
}  // namespace ql
