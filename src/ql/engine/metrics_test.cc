#include "ql/engine/metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace ql {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(MetricsTest, RendersCountersWithHelpTypeAndLabelsInOrder) {
  Metrics m;
  m.Describe("ql_occurrences_total", "counter", "Cron occurrences by outcome.");
  m.Increment("ql_occurrences_total", "outcome=\"skip\"");
  m.Increment("ql_occurrences_total", "outcome=\"admit\"", 3);
  m.Increment("ql_occurrences_total", "outcome=\"admit\"");
  const std::string text = m.RenderPrometheus();
  EXPECT_THAT(text, HasSubstr("# HELP ql_occurrences_total Cron occurrences by outcome.\n"
                              "# TYPE ql_occurrences_total counter\n"
                              "ql_occurrences_total{outcome=\"admit\"} 4\n"
                              "ql_occurrences_total{outcome=\"skip\"} 1\n"));
}

TEST(MetricsTest, DescribedCounterWithoutSamplesRendersZero) {
  Metrics m;
  m.Describe("ql_claim_rounds_total", "counter", "Rounds.");
  EXPECT_THAT(m.RenderPrometheus(), HasSubstr("# TYPE ql_claim_rounds_total counter\n"
                                              "ql_claim_rounds_total 0\n"));
}

TEST(MetricsTest, GaugesKeepTheLastValue) {
  Metrics m;
  m.Describe("ql_due_backlog", "gauge", "Due rows.");
  m.SetGauge("ql_due_backlog", "", 12);
  m.SetGauge("ql_due_backlog", "", 2.5);
  m.SetGauge("ql_runs", "status=\"queued\"", 7);
  const std::string text = m.RenderPrometheus();
  EXPECT_THAT(text, HasSubstr("# TYPE ql_due_backlog gauge\nql_due_backlog 2.5\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE ql_runs gauge\nql_runs{status=\"queued\"} 7\n"));
}

TEST(MetricsTest, HistogramBucketsAreCumulativeWithSumAndCount) {
  Metrics m;
  m.Describe("ql_schedule_lag_seconds", "histogram", "Lag.");
  m.Observe("ql_schedule_lag_seconds", 0.00390625);  // first bucket
  m.Observe("ql_schedule_lag_seconds", 0.25);        // le 0.25 (bounds are inclusive)
  m.Observe("ql_schedule_lag_seconds", 0.5);         // le 0.5
  m.Observe("ql_schedule_lag_seconds", 120);         // only +Inf
  const std::string text = m.RenderPrometheus();
  EXPECT_THAT(text, HasSubstr("# TYPE ql_schedule_lag_seconds histogram\n"
                              "ql_schedule_lag_seconds_bucket{le=\"0.005\"} 1\n"
                              "ql_schedule_lag_seconds_bucket{le=\"0.01\"} 1\n"
                              "ql_schedule_lag_seconds_bucket{le=\"0.025\"} 1\n"
                              "ql_schedule_lag_seconds_bucket{le=\"0.05\"} 1\n"
                              "ql_schedule_lag_seconds_bucket{le=\"0.1\"} 1\n"
                              "ql_schedule_lag_seconds_bucket{le=\"0.25\"} 2\n"
                              "ql_schedule_lag_seconds_bucket{le=\"0.5\"} 3\n"
                              "ql_schedule_lag_seconds_bucket{le=\"1\"} 3\n"
                              "ql_schedule_lag_seconds_bucket{le=\"2.5\"} 3\n"
                              "ql_schedule_lag_seconds_bucket{le=\"5\"} 3\n"
                              "ql_schedule_lag_seconds_bucket{le=\"10\"} 3\n"
                              "ql_schedule_lag_seconds_bucket{le=\"30\"} 3\n"
                              "ql_schedule_lag_seconds_bucket{le=\"60\"} 3\n"
                              "ql_schedule_lag_seconds_bucket{le=\"+Inf\"} 4\n"
                              "ql_schedule_lag_seconds_sum 120.75390625\n"
                              "ql_schedule_lag_seconds_count 4\n"));
}

TEST(MetricsTest, AHistogramCanCountRowsInItsOwnBuckets) {
  Metrics m;
  m.DescribeHistogram("ql_round_rows", "Rows.", Metrics::kRowBuckets);
  m.Observe("ql_round_rows", 0);     // le 0
  m.Observe("ql_round_rows", 3);     // le 4
  m.Observe("ql_round_rows", 200);   // le 256
  m.Observe("ql_round_rows", 5000);  // only +Inf
  const std::string text = m.RenderPrometheus();
  std::string buckets;
  const int cumulative[] = {1, 1, 1, 2, 2, 2, 2, 2, 2, 3, 3, 3};
  for (size_t i = 0; i < std::size(Metrics::kRowBuckets); ++i) {
    buckets += "ql_round_rows_bucket{le=\"" + std::to_string(static_cast<int>(Metrics::kRowBuckets[i])) +
               "\"} " + std::to_string(cumulative[i]) + "\n";
  }
  EXPECT_EQ(Metrics::kRowBuckets[11], 1024);
  EXPECT_THAT(text, HasSubstr("# HELP ql_round_rows Rows.\n# TYPE ql_round_rows histogram\n" +
                              buckets + "ql_round_rows_bucket{le=\"+Inf\"} 4\n" +
                              "ql_round_rows_sum 5203\nql_round_rows_count 4\n"));
  // Other histograms keep the seconds buckets.
  m.Observe("ql_lag_seconds", 0.2);
  EXPECT_THAT(m.RenderPrometheus(), HasSubstr("ql_lag_seconds_bucket{le=\"0.005\"} 0\n"));
}

TEST(MetricsTest, BucketsCannotChangeUnderSamplesAndMustIncrease) {
  Metrics m;
  m.Observe("ql_round_rows", 3);  // seconds buckets, fixed by the first sample
  m.DescribeHistogram("ql_round_rows", "Rows.", Metrics::kRowBuckets);
  const double descending[] = {2, 1};
  m.DescribeHistogram("ql_other_rows", "Rows.", descending);
  const std::string text = m.RenderPrometheus();
  EXPECT_THAT(text, HasSubstr("ql_round_rows_bucket{le=\"5\"} 1\n"));
  EXPECT_THAT(text, Not(HasSubstr("ql_other_rows")));
  EXPECT_THAT(text, HasSubstr("ql_metrics_rejected_samples_total 2\n"));
  // The same buckets again only change the help text.
  Metrics same;
  same.DescribeHistogram("ql_round_rows", "Rows.", Metrics::kRowBuckets);
  same.Observe("ql_round_rows", 1);
  same.DescribeHistogram("ql_round_rows", "Rows per round.", Metrics::kRowBuckets);
  EXPECT_THAT(same.RenderPrometheus(), HasSubstr("# HELP ql_round_rows Rows per round.\n"));
  EXPECT_THAT(same.RenderPrometheus(), HasSubstr("ql_round_rows_count 1\n"));
  EXPECT_THAT(same.RenderPrometheus(), HasSubstr("ql_metrics_rejected_samples_total 0\n"));
}

TEST(MetricsTest, ACounterKeptElsewhereIsSetAndNeverGoesBack) {
  Metrics m;
  m.Describe("process_cpu_seconds_total", "counter", "CPU.");
  m.SetCounter("process_cpu_seconds_total", "", 1.25);
  m.SetCounter("process_cpu_seconds_total", "", 0.5);  // backwards: rejected
  m.Increment("process_cpu_seconds_total");            // the same series counted here: rejected
  EXPECT_THAT(m.RenderPrometheus(), HasSubstr("# TYPE process_cpu_seconds_total counter\n"
                                              "process_cpu_seconds_total 1.25\n"));
  EXPECT_THAT(m.RenderPrometheus(), HasSubstr("ql_metrics_rejected_samples_total 2\n"));
}

TEST(MetricsTest, EscapesHelpText) {
  Metrics m;
  m.Describe("ql_x_total", "counter", "a\\b\nc");
  EXPECT_THAT(m.RenderPrometheus(), HasSubstr("# HELP ql_x_total a\\\\b\\nc\n"));
}

TEST(MetricsTest, RejectsInvalidSamplesWithoutBreakingTheText) {
  Metrics m;
  m.Increment("bad name");                         // space in name
  m.Increment("9starts_with_digit");               // digit first
  m.Increment("ql_ok_total", "outcome=admit");     // unquoted value
  m.Increment("ql_ok_total", "outcome=\"a\nb\"");  // raw newline
  m.Increment("ql_ok_total", "", -1);              // counters never go down
  m.SetGauge("ql_ok_total", "", 1);                // the name is a counter since the call above
  m.Increment("ql_ok_total");
  m.SetGauge("ql_ok_total", "", 1);
  m.Observe("ql_lag_seconds", std::nan(""));
  m.Describe("ql_y", "summary", "unsupported type");
  const std::string text = m.RenderPrometheus();
  EXPECT_THAT(text, Not(HasSubstr("bad name")));
  EXPECT_THAT(text, Not(HasSubstr("9starts")));
  EXPECT_THAT(text, HasSubstr("ql_ok_total 1\n"));
  EXPECT_THAT(text, Not(HasSubstr("outcome=admit")));
  EXPECT_THAT(text, Not(HasSubstr("ql_lag_seconds")));
  EXPECT_THAT(text, Not(HasSubstr("ql_y")));
  // 4 invalid names/labels + negative counter + 2 gauge-on-counter + NaN + unknown type.
  EXPECT_THAT(text, HasSubstr("ql_metrics_rejected_samples_total 9\n"));
}

TEST(MetricsTest, AcceptsEscapedQuotesAndSeveralLabels) {
  Metrics m;
  m.Increment("ql_x_total", "a=\"q\\\"uote\",b=\"2\"");
  EXPECT_THAT(m.RenderPrometheus(), HasSubstr("ql_x_total{a=\"q\\\"uote\",b=\"2\"} 1\n"));
}

TEST(MetricsTest, ConcurrentIncrementsAreAllCounted) {
  Metrics m;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&m] {
      for (int i = 0; i < 1000; ++i) {
        m.Increment("ql_parallel_total", "k=\"v\"");
        m.Observe("ql_parallel_seconds", 0.01);
      }
    });
  }
  for (auto& t : threads) t.join();
  const std::string text = m.RenderPrometheus();
  EXPECT_THAT(text, HasSubstr("ql_parallel_total{k=\"v\"} 4000\n"));
  EXPECT_THAT(text, HasSubstr("ql_parallel_seconds_count 4000\n"));
}

}  // namespace
}  // namespace ql
