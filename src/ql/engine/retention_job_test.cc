#include "ql/engine/retention_job.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "ql/testing/fake_clock.h"

namespace ql {
namespace {

// Tasks t0..tN-1 with a number of purgeable runs each; every purge takes up to its limit.
class FakeRetention final : public RetentionRepository {
 public:
  Result<RetentionRecord> GetRetention(const std::string&, const std::string&) override {
    return RetentionRecord{};
  }
  Result<RetentionRecord> SetRetention(const SetRetentionCommand&) override {
    return RetentionRecord{};
  }
  Result<std::vector<RetentionScope>> ListRetentionScopes(const std::string& after,
                                                          int limit) override {
    std::vector<RetentionScope> out;
    for (auto it = runs.upper_bound(after); it != runs.end() && static_cast<int>(out.size()) < limit;
         ++it) {
      out.push_back(RetentionScope{"p", it->first, {}, {}});
    }
    return out;
  }
  Result<PurgeResult> PurgeRuns(const PurgeSelection& selection) override {
    selections.push_back(selection);
    if (fail_task == selection.task_id) return Unavailable("database_unavailable", "down");
    PurgeResult out;
    int& left = runs[selection.task_id];
    for (; left > 0 && static_cast<int>(out.run_ids.size()) < selection.limit; --left) {
      out.run_ids.push_back(selection.task_id + "-run-" + std::to_string(left));
      out.events += 3;
    }
    return out;
  }

  std::map<std::string, int> runs;  // task id → purgeable runs left
  std::string fail_task;
  std::vector<PurgeSelection> selections;
};

class RetentionJobTest : public ::testing::Test {
 protected:
  RetentionJob Job(int batch, int per_round) {
    RetentionJobOptions options;
    options.batch_size = batch;
    options.max_runs_per_round = per_round;
    options.on_purged = [this](const PurgeResult& r) { purged_batches_.push_back(r); };
    EXPECT_TRUE(RetentionJob::ValidateOptions(options).ok());
    return RetentionJob(store_, clock_, random_, metrics_, options);
  }

  FakeRetention store_;
  testing::FakeClock clock_;
  testing::SeededRandom random_{7};
  Metrics metrics_;
  std::vector<PurgeResult> purged_batches_;
};

TEST_F(RetentionJobTest, RoundsAreBoundedAndContinueWhereTheyStopped) {
  for (int i = 0; i < 150; ++i) store_.runs["t" + std::to_string(1000 + i)] = 0;
  store_.runs["t1000"] = 5;
  store_.runs["t1149"] = 7;
  RetentionJob job = Job(/*batch=*/2, /*per_round=*/4);

  Result<RetentionRound> first = job.RunRound();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->runs, 4);
  EXPECT_TRUE(first->bounded);
  EXPECT_EQ(job.NextDelayMs(*first), 1'000);

  Result<RetentionRound> second = job.RunRound();
  ASSERT_TRUE(second.ok());
  // t1000's last run, then two batches of t1149 (past the 100-task page): a round ends at the
  // first batch that reaches its bound.
  EXPECT_EQ(second->runs, 5);
  EXPECT_TRUE(second->bounded);
  EXPECT_EQ(store_.runs["t1000"], 0);

  Result<RetentionRound> third = job.RunRound();
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(third->runs, 3);
  EXPECT_FALSE(third->bounded);
  EXPECT_EQ(job.NextDelayMs(*third), 60'000);
  EXPECT_EQ(store_.runs["t1149"], 0);
  EXPECT_EQ(purged_batches_.size(), 7u);  // batches of at most 2, only those that purged

  // Each batch carries its own audit fact for its task.
  EXPECT_EQ(store_.selections.front().audit.action, kAuditRunsPurge);
  EXPECT_EQ(store_.selections.front().audit.target_id, "t1000");
  EXPECT_NE(store_.selections[0].audit.id, store_.selections[1].audit.id);

  const std::string text = metrics_.RenderPrometheus();
  EXPECT_NE(text.find("ql_retention_purged_runs_total 12"), std::string::npos) << text;
  EXPECT_NE(text.find("ql_retention_purged_events_total 36"), std::string::npos) << text;
}

TEST_F(RetentionJobTest, ATaskThatCannotBePurgedIsCountedAndSkippedAndRetriedNextWalk) {
  store_.runs = {{"a", 1}, {"b", 3}, {"c", 1}};
  store_.fail_task = "b";
  RetentionJob job = Job(10, 100);
  Result<RetentionRound> first = job.RunRound();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->runs, 2);  // a and c: the failing task does not hold up the ones after it
  EXPECT_EQ(first->tasks, 3);
  EXPECT_EQ(first->errors, 1);
  EXPECT_EQ(first->first_error.reason(), "database_unavailable");
  EXPECT_EQ(store_.runs["c"], 0);
  EXPECT_NE(metrics_.RenderPrometheus().find("ql_retention_errors_total 1"), std::string::npos);

  store_.fail_task.clear();
  Result<RetentionRound> next = job.RunRound();
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->runs, 3);  // b, retried by the next walk
  EXPECT_EQ(next->errors, 0);
  EXPECT_EQ(store_.runs["b"], 0);
}

TEST_F(RetentionJobTest, ARoundYieldsWhileTheSchedulerHasABacklogAndContinuesAfterIt) {
  store_.runs = {{"a", 3}, {"b", 2}};
  int batches_before_backlog = 0;  // purge transactions the scheduler lets through
  RetentionJobOptions options;
  options.batch_size = 2;
  options.max_runs_per_round = 100;
  options.scheduler_backlog = [&] {
    return static_cast<int>(store_.selections.size()) >= batches_before_backlog;
  };
  RetentionJob job(store_, clock_, random_, metrics_, options);

  Result<RetentionRound> busy = job.RunRound();
  ASSERT_TRUE(busy.ok()) << busy.status().ToString();
  EXPECT_TRUE(busy->yielded);
  EXPECT_EQ(busy->runs, 0);
  EXPECT_TRUE(store_.selections.empty());  // not one purge transaction while admissions wait
  EXPECT_EQ(job.NextDelayMs(*busy), 250);

  // The backlog comes back after one batch: the round stops there, mid-task.
  batches_before_backlog = 1;
  Result<RetentionRound> interrupted = job.RunRound();
  ASSERT_TRUE(interrupted.ok());
  EXPECT_TRUE(interrupted->yielded);
  EXPECT_EQ(interrupted->runs, 2);
  EXPECT_EQ(store_.runs["a"], 1);

  batches_before_backlog = 100;
  Result<RetentionRound> caught_up = job.RunRound();
  ASSERT_TRUE(caught_up.ok());
  EXPECT_FALSE(caught_up->yielded);
  EXPECT_EQ(caught_up->runs, 3);  // the rest of a, then b
  EXPECT_EQ(store_.selections[1].task_id, "a");  // it went on with a, where it had stopped
  EXPECT_EQ(job.NextDelayMs(*caught_up), 60'000);
  EXPECT_NE(metrics_.RenderPrometheus().find("ql_retention_yields_total 2"), std::string::npos);
}

TEST_F(RetentionJobTest, ABacklogThatNeverEndsSlowsRetentionDownButCannotStopIt) {
  store_.runs = {{"a", 5}};
  RetentionJobOptions options;
  options.batch_size = 2;
  options.max_runs_per_round = 4;
  options.max_yield_ms = 10'000;
  options.scheduler_backlog = [] { return true; };
  RetentionJob job(store_, clock_, random_, metrics_, options);

  for (int i = 0; i < 3; ++i) {
    Result<RetentionRound> busy = job.RunRound();
    ASSERT_TRUE(busy.ok());
    EXPECT_TRUE(busy->yielded);
    clock_.Advance(3'000);  // 0, 3 and 6 s into the backlog: still inside the window
  }
  EXPECT_TRUE(store_.selections.empty());
  clock_.Advance(1'000);  // 10 s of yielding: the next round runs to its bound
  Result<RetentionRound> forced = job.RunRound();
  ASSERT_TRUE(forced.ok());
  EXPECT_FALSE(forced->yielded);
  EXPECT_EQ(forced->runs, 4);
  // And the window starts over: the round after it yields again.
  Result<RetentionRound> again = job.RunRound();
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->yielded);
  EXPECT_EQ(store_.runs["a"], 1);
}

TEST_F(RetentionJobTest, OptionsAreValidated) {
  RetentionJobOptions options;
  options.batch_size = 0;
  EXPECT_EQ(RetentionJob::ValidateOptions(options).reason(), "invalid_retention_options");
  options.batch_size = 100;
  options.max_runs_per_round = 50;
  EXPECT_EQ(RetentionJob::ValidateOptions(options).reason(), "invalid_retention_options");
  options.max_runs_per_round = 1000;
  options.yield_ms = -1;
  EXPECT_EQ(RetentionJob::ValidateOptions(options).reason(), "invalid_retention_options");
}

}  // namespace
}  // namespace ql
