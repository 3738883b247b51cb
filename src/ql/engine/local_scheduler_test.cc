#include "ql/engine/local_scheduler.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <atomic>
#include <filesystem>
#include <set>
#include <thread>

#include "ql/core/idempotency_key.h"
#include "ql/core/rfc3339.h"
#include "ql/engine/control_service.h"
#include "ql/engine/round_loop.h"
#include "ql/storage/sqlite/sqlite_store.h"
#include "ql/testing/fake_clock.h"

namespace ql {
namespace {

using testing::FakeClock;
using testing::SeededRandom;

int64_t Ms(const char* rfc3339) { return *ParseRfc3339(rfc3339); }

class LocalSchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ql-sched-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    clock_.SetNowMs(Ms("2026-06-01T12:00:00.250Z"));
    SqliteOptions options;
    options.path = dir_ + "/q.db";
    store_ = std::move(SqliteStore::Open(options, clock_).value());
    control_ = std::make_unique<ControlService>(*store_, clock_, random_, ControlOptions{});
    ASSERT_TRUE(control_->EnsureDefaultProject().ok());
    options_.page_size = 16;
    options_.cadence_ms = 1000;
    options_.grace_ms = 300'000;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  LocalScheduler MakeScheduler() {
    return LocalScheduler(store_->schedules(), store_->definitions(), clock_, random_, metrics_,
                          options_);
  }

  std::string AddTask(const std::string& name = "t") {
    TaskWrite write;
    write.body = {{"name", name},
                  {"spec", {{"command", {{"kind", "shell"}, {"command", "true"}}}}}};
    Result<PublishedTask> task = control_->PublishTask(write);
    EXPECT_TRUE(task.ok()) << task.status().ToString();
    return task->task.head.task_id;
  }

  std::string AddTrigger(const std::string& task_id, const std::string& expr,
                         const std::string& misfire = "skip") {
    TriggerWrite write;
    write.task_id = task_id;
    write.expression = expr;
    write.timezone = "UTC";
    write.misfire = misfire;
    Result<PublishedTrigger> trigger = control_->AddTrigger(write);
    EXPECT_TRUE(trigger.ok()) << trigger.status().ToString();
    return trigger->trigger.head.trigger_id;
  }

  std::vector<RunRecord> Runs(const std::string& trigger_id) {
    RunFilter filter;
    filter.trigger_id = trigger_id;
    PageRequest page;
    page.limit = 500;
    auto runs = store_->runs().ListRuns(filter, page);
    EXPECT_TRUE(runs.ok());
    std::vector<RunRecord> items = runs->items;
    std::sort(items.begin(), items.end(), [](const RunRecord& a, const RunRecord& b) {
      return *a.scheduled_for_ms < *b.scheduled_for_ms;
    });
    return items;
  }

  RoundReport Round(LocalScheduler& s) {
    Result<RoundReport> r = s.RunRound();
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : RoundReport{};
  }

  std::string dir_;
  FakeClock clock_;
  SeededRandom random_{7};
  Metrics metrics_;
  LocalSchedulerOptions options_;
  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<ControlService> control_;
};

TEST_F(LocalSchedulerTest, FirstRoundInitialisesTheCursorWithoutARun) {
  const std::string trigger = AddTrigger(AddTask(), "0 * * * * *");
  LocalScheduler scheduler = MakeScheduler();
  RoundReport r = Round(scheduler);
  EXPECT_EQ(r.initialized, 1);
  EXPECT_EQ(r.admitted, 0);
  EXPECT_TRUE(Runs(trigger).empty());
  ScheduleRecord s = *store_->definitions().GetSchedule(trigger);
  EXPECT_EQ(s.next_fire_at_ms, Ms("2026-06-01T12:01:00Z"));
}

TEST_F(LocalSchedulerTest, AdmitsOnTimeOccurrenceAtomicallyWithItsEvents) {
  const std::string trigger = AddTrigger(AddTask(), "0 * * * * *");
  LocalScheduler scheduler = MakeScheduler();
  Round(scheduler);
  clock_.SetNowMs(Ms("2026-06-01T12:01:00.010Z"));
  RoundReport r = Round(scheduler);
  EXPECT_EQ(r.admitted, 1);
  std::vector<RunRecord> runs = Runs(trigger);
  ASSERT_EQ(runs.size(), 1u);
  const RunRecord& run = runs[0];
  EXPECT_EQ(run.status, "queued");
  EXPECT_EQ(run.trigger_type, "cron");
  EXPECT_EQ(run.scheduled_for_ms, Ms("2026-06-01T12:01:00Z"));
  EXPECT_EQ(*run.idempotency_key, CronIdempotencyKey(trigger, 1, Ms("2026-06-01T12:01:00Z")));
  auto attempts = *store_->runs().ListAttempts(run.id);
  ASSERT_EQ(attempts.size(), 1u);
  EXPECT_EQ(attempts[0].status, "claimed");
  EXPECT_EQ(attempts[0].executor_type, "local_process");
  auto events = *store_->runs().ListEvents(run.id, 0, 10);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].type, "run.created");
  EXPECT_EQ(events[1].type, "run.queued");
  EXPECT_EQ(store_->definitions().GetSchedule(trigger)->next_fire_at_ms,
            Ms("2026-06-01T12:02:00Z"));
  // Observing the same instant again admits nothing more.
  EXPECT_EQ(Round(scheduler).admitted, 0);
  EXPECT_EQ(Runs(trigger).size(), 1u);
}

TEST_F(LocalSchedulerTest, OccurrencesInsideTheGraceAreEachAdmittedOnceInOrder) {
  const std::string trigger = AddTrigger(AddTask(), "0 * * * * *");
  LocalScheduler scheduler = MakeScheduler();
  Round(scheduler);
  clock_.SetNowMs(Ms("2026-06-01T12:04:30Z"));  // 12:01, 12:02, 12:03, 12:04 are due
  int admitted = 0;
  for (int i = 0; i < 10; ++i) {
    RoundReport r = Round(scheduler);
    admitted += r.admitted;
    if (i < 3) {
      EXPECT_TRUE(r.still_due);
      EXPECT_EQ(*scheduler.NextDelayMs(r), 0);
    }
  }
  EXPECT_EQ(admitted, 4);
  std::vector<RunRecord> runs = Runs(trigger);
  ASSERT_EQ(runs.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(runs[i].scheduled_for_ms, Ms("2026-06-01T12:01:00Z") + i * 60'000);
  }
}

TEST_F(LocalSchedulerTest, ACursorOnAnAdmittedOccurrenceMovesPastItInsteadOfStalling) {
  const std::string trigger = AddTrigger(AddTask(), "0 * * * * *");
  LocalScheduler scheduler = MakeScheduler();
  Round(scheduler);
  clock_.SetNowMs(Ms("2026-06-01T12:01:00.010Z"));
  ASSERT_EQ(Round(scheduler).admitted, 1);
  // The cursor is put back onto the occurrence that has its run.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir_ + "/q.db").c_str(), &db), SQLITE_OK);
  const std::string back = "UPDATE trigger_schedules SET next_fire_at_ms = " +
                           std::to_string(Ms("2026-06-01T12:01:00Z")) + " WHERE trigger_id = '" +
                           trigger + "'";
  EXPECT_EQ(sqlite3_exec(db, back.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);

  // One round moves the cursor past it without a second run; the next occurrence is admitted.
  RoundReport r = Round(scheduler);
  EXPECT_EQ(r.already_admitted, 1);
  EXPECT_EQ(r.raced, 0);
  EXPECT_EQ(r.admitted, 0);
  EXPECT_EQ(Runs(trigger).size(), 1u);
  EXPECT_EQ(store_->definitions().GetSchedule(trigger)->next_fire_at_ms,
            Ms("2026-06-01T12:02:00Z"));
  clock_.SetNowMs(Ms("2026-06-01T12:02:00.010Z"));
  EXPECT_EQ(Round(scheduler).admitted, 1);
  EXPECT_EQ(Runs(trigger).size(), 2u);
}

TEST_F(LocalSchedulerTest, SkipPolicyAdmitsNothingAfterLongDowntime) {
  const std::string trigger = AddTrigger(AddTask(), "0 * * * * *", "skip");
  LocalScheduler scheduler = MakeScheduler();
  Round(scheduler);
  clock_.SetNowMs(Ms("2026-06-01T15:00:30Z"));
  RoundReport r = Round(scheduler);
  EXPECT_EQ(r.skipped, 1);
  EXPECT_TRUE(Runs(trigger).empty());
  EXPECT_EQ(store_->definitions().GetSchedule(trigger)->next_fire_at_ms,
            Ms("2026-06-01T15:01:00Z"));
}

TEST_F(LocalSchedulerTest, FireOnceAdmitsOnlyTheOldestMissedOccurrence) {
  const std::string trigger = AddTrigger(AddTask(), "0 * * * * *", "fire_once");
  LocalScheduler scheduler = MakeScheduler();
  Round(scheduler);
  clock_.SetNowMs(Ms("2026-06-01T15:00:30Z"));
  for (int i = 0; i < 5; ++i) Round(scheduler);
  std::vector<RunRecord> runs = Runs(trigger);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].scheduled_for_ms, Ms("2026-06-01T12:01:00Z"));
  EXPECT_EQ(store_->definitions().GetSchedule(trigger)->next_fire_at_ms,
            Ms("2026-06-01T15:01:00Z"));
}

TEST_F(LocalSchedulerTest, RepublishedTaskStopsItsTriggerUntilRepinned) {
  const std::string task = AddTask();
  const std::string trigger = AddTrigger(task, "0 * * * * *");
  LocalScheduler scheduler = MakeScheduler();
  Round(scheduler);
  TaskWrite write;
  write.body = {{"name", "t"}, {"spec", {{"command", {{"kind", "shell"}, {"command", "false"}}}}}};
  ASSERT_TRUE(control_->PublishTaskRevision(task, 1, write).ok());
  clock_.SetNowMs(Ms("2026-06-01T12:01:00.100Z"));
  EXPECT_EQ(Round(scheduler).rows, 0);
  EXPECT_TRUE(Runs(trigger).empty());

  ASSERT_TRUE(control_->RepinTrigger(trigger).ok());
  Round(scheduler);  // re-initialises after the new revision
  clock_.SetNowMs(Ms("2026-06-01T12:02:00.100Z"));
  Round(scheduler);
  std::vector<RunRecord> runs = Runs(trigger);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].task_revision, 2);
  EXPECT_EQ(runs[0].trigger_revision, 2);
}

// A store that republishes the trigger between the scheduler's read and its write.
class RacingSchedules final : public ScheduleRepository {
 public:
  RacingSchedules(ScheduleRepository& inner, std::function<void()> race)
      : inner_(inner), race_(std::move(race)) {}
  Result<std::vector<DueSchedule>> ListDueSchedules(int64_t now_ms, int limit) override {
    return inner_.ListDueSchedules(now_ms, limit);
  }
  Result<std::optional<int64_t>> EarliestDueAt() override { return inner_.EarliestDueAt(); }
  Result<AdvanceOutcome> ApplyScheduleAdvance(const ScheduleAdvance& advance) override {
    if (race_) race_();
    race_ = nullptr;
    return inner_.ApplyScheduleAdvance(advance);
  }

 private:
  ScheduleRepository& inner_;
  std::function<void()> race_;
};

TEST_F(LocalSchedulerTest, DriftBetweenDecisionAndCommitIsRacedAndWritesNothing) {
  const std::string trigger = AddTrigger(AddTask(), "0 * * * * *");
  LocalScheduler init = MakeScheduler();
  Round(init);
  clock_.SetNowMs(Ms("2026-06-01T12:01:00.100Z"));
  RacingSchedules racing(store_->schedules(), [&] {
    ASSERT_TRUE(control_->SetTriggerEnabled(trigger, false).ok());
    ASSERT_TRUE(control_->SetTriggerEnabled(trigger, true).ok());
  });
  LocalScheduler scheduler(racing, store_->definitions(), clock_, random_, metrics_, options_);
  RoundReport r = Round(scheduler);
  EXPECT_EQ(r.raced, 1);
  EXPECT_EQ(r.admitted, 0);
  EXPECT_TRUE(Runs(trigger).empty());
  EXPECT_NE(metrics_.RenderPrometheus().find("ql_scheduler_occurrences_total{outcome=\"raced\"} 1"),
            std::string::npos);
}

// A store in front of which the decisions about one trigger skip its next occurrence, as a
// faulty decision would.
class SkippingSchedules final : public ScheduleRepository {
 public:
  SkippingSchedules(ScheduleRepository& inner, std::string trigger_id)
      : inner_(inner), trigger_id_(std::move(trigger_id)) {}
  Result<std::vector<DueSchedule>> ListDueSchedules(int64_t now_ms, int limit) override {
    return inner_.ListDueSchedules(now_ms, limit);
  }
  Result<std::optional<int64_t>> EarliestDueAt() override { return inner_.EarliestDueAt(); }
  Result<AdvanceOutcome> ApplyScheduleAdvance(const ScheduleAdvance& advance) override {
    ScheduleAdvance changed = advance;
    if (advance.trigger_id == trigger_id_ && advance.run.has_value()) {
      *changed.new_next_fire_at_ms += 60'000;
    }
    return inner_.ApplyScheduleAdvance(changed);
  }
  int64_t TakeNextFireMismatches() override { return inner_.TakeNextFireMismatches(); }

 private:
  ScheduleRepository& inner_;
  std::string trigger_id_;
};

TEST_F(LocalSchedulerTest, AnAdmissionRefusedForItsCursorIsCountedAndStallsNoOtherTrigger) {
  const std::string task = AddTask();
  const std::string a = AddTrigger(task, "0 * * * * *");
  const std::string b = AddTrigger(task, "0 * * * * *");
  // Rows due at one time come in trigger id order: the refused one comes first.
  const std::string skipping = std::min(a, b);
  const std::string other = std::max(a, b);
  SkippingSchedules schedules(store_->schedules(), skipping);
  LocalScheduler scheduler(schedules, store_->definitions(), clock_, random_, metrics_, options_);
  EXPECT_EQ(Round(scheduler).initialized, 2);
  clock_.SetNowMs(Ms("2026-06-01T12:01:00.100Z"));
  RoundReport r = Round(scheduler);
  EXPECT_EQ(r.next_fire_mismatches, 1);
  EXPECT_EQ(r.errors, 1);
  EXPECT_EQ(r.admitted, 1);
  EXPECT_TRUE(Runs(skipping).empty());
  EXPECT_EQ(store_->definitions().GetSchedule(skipping)->next_fire_at_ms,
            Ms("2026-06-01T12:01:00Z"));
  ASSERT_EQ(Runs(other).size(), 1u);
  EXPECT_EQ(store_->definitions().GetSchedule(other)->next_fire_at_ms, Ms("2026-06-01T12:02:00Z"));
  const std::string text = metrics_.RenderPrometheus();
  EXPECT_NE(text.find("# TYPE ql_scheduler_next_fire_mismatches_total counter\n"
                      "ql_scheduler_next_fire_mismatches_total 1\n"),
            std::string::npos)
      << text;
}

TEST_F(LocalSchedulerTest, PagesAreBoundedAndAFullPageStartsTheNextRoundAtOnce) {
  const std::string task = AddTask();
  for (int i = 0; i < 20; ++i) AddTrigger(task, "0 * * * * *");
  options_.page_size = 16;
  LocalScheduler scheduler = MakeScheduler();
  RoundReport first = Round(scheduler);
  EXPECT_EQ(first.rows, 16);
  EXPECT_TRUE(first.page_full);
  EXPECT_EQ(*scheduler.NextDelayMs(first), 0);
  RoundReport second = Round(scheduler);
  EXPECT_EQ(second.rows, 4);
  EXPECT_FALSE(second.page_full);
  // Next due time is 12:01:00, 59.75 s away: the idle sleep is capped by the cadence.
  EXPECT_EQ(*scheduler.NextDelayMs(second), 1000);
  clock_.SetNowMs(Ms("2026-06-01T12:00:59.700Z"));
  EXPECT_EQ(*scheduler.NextDelayMs(second), 300);  // wakes for the due time, not a cadence late
}

TEST_F(LocalSchedulerTest, RoundRowsAreCountedInRowBuckets) {
  const std::string task = AddTask();
  for (int i = 0; i < 20; ++i) AddTrigger(task, "0 * * * * *");
  LocalScheduler scheduler = MakeScheduler();
  EXPECT_EQ(Round(scheduler).rows, 16);
  const std::string text = metrics_.RenderPrometheus();
  EXPECT_NE(text.find("ql_scheduler_round_rows_bucket{le=\"8\"} 0\n"
                      "ql_scheduler_round_rows_bucket{le=\"16\"} 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("ql_scheduler_round_rows_bucket{le=\"1024\"} 1\n"), std::string::npos);
}

TEST_F(LocalSchedulerTest, ProfilesHaveTheirBounds) {
  EXPECT_EQ(LocalSchedulerOptionsForProfile("edge")->page_size, 4);
  EXPECT_EQ(LocalSchedulerOptionsForProfile("edge")->cadence_ms, 5000);
  EXPECT_EQ(LocalSchedulerOptionsForProfile("standalone")->page_size, 16);
  EXPECT_EQ(LocalSchedulerOptionsForProfile("standalone")->grace_ms, 300'000);
  EXPECT_EQ(LocalSchedulerOptionsForProfile("cloud").status().reason(), "unknown_profile");
  LocalSchedulerOptions bad;
  bad.page_size = 257;
  EXPECT_FALSE(LocalScheduler::ValidateOptions(bad).ok());
}

// A sleeper that never sleeps in real time but counts how often it was asked to.
class CountingSleeper final : public Sleeper {
 public:
  void SleepFor(int64_t) override { ++sleeps; }
  void Wake() override {}
  void Stop() override { stop = true; }
  bool stopped() const override { return stop; }
  std::atomic<bool> stop{false};
  std::atomic<int> sleeps{0};
};

TEST(RoundLoopTest, RoundsNeverOverlapAndStopWaitsOnlyForTheRoundInProgress) {
  CountingSleeper sleeper;
  std::atomic<int> inside{0};
  std::atomic<int> max_inside{0};
  std::atomic<int> rounds{0};
  RoundLoop loop(
      [&]() -> int64_t {
        int now = ++inside;
        max_inside = std::max(max_inside.load(), now);
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        --inside;
        return ++rounds % 2 == 0 ? 0 : 10;
      },
      sleeper);
  std::thread runner([&] { loop.Run(); });
  while (rounds < 20) std::this_thread::yield();
  const auto stop_at = std::chrono::steady_clock::now();
  loop.Stop();
  runner.join();
  const auto waited = std::chrono::steady_clock::now() - stop_at;
  EXPECT_EQ(max_inside.load(), 1);
  EXPECT_LT(waited, std::chrono::milliseconds(500));
  // Rounds returning 0 start the next round without sleeping.
  EXPECT_LE(sleeper.sleeps.load(), rounds.load() / 2 + 1);
}

}  // namespace
}  // namespace ql
