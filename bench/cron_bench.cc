// Next-fire throughput: CronSchedule::NextAfter for common expressions in a zone without DST
// (Asia/Shanghai) and one with it (America/New_York). Each iteration asks for the fire after the
// previous one, as the scheduler does when it advances a cursor.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <iostream>

#include "ql/core/cron.h"

namespace {

constexpr int64_t kStartMs = 1767225600000;  // 2026-01-01T00:00:00Z

void BM_NextAfter(benchmark::State& state, const char* expression, const char* zone) {
  ql::Result<ql::CronSchedule> schedule = ql::CronSchedule::Create(expression, zone);
  if (!schedule.ok()) {
    state.SkipWithError(schedule.status().ToString().c_str());
    return;
  }
  int64_t after = kStartMs;
  for (auto _ : state) {
    std::optional<int64_t> next = schedule->NextAfter(after);
    // Restart from 2026 rather than walking toward year 9999 on very long runs.
    after = (next && *next < kStartMs + 100LL * 365 * 86400000) ? *next : kStartMs;
    benchmark::DoNotOptimize(after);
  }
  state.SetItemsProcessed(state.iterations());
}

BENCHMARK_CAPTURE(BM_NextAfter, every_5_min / Shanghai, "*/5 * * * *", "Asia/Shanghai");
BENCHMARK_CAPTURE(BM_NextAfter, every_5_min / New_York, "*/5 * * * *", "America/New_York");
BENCHMARK_CAPTURE(BM_NextAfter, daily_02_30 / Shanghai, "0 30 2 * * *", "Asia/Shanghai");
BENCHMARK_CAPTURE(BM_NextAfter, daily_02_30 / New_York, "0 30 2 * * *", "America/New_York");
BENCHMARK_CAPTURE(BM_NextAfter, weekdays_09 / Shanghai, "0 0 9 * * MON-FRI", "Asia/Shanghai");
BENCHMARK_CAPTURE(BM_NextAfter, weekdays_09 / New_York, "0 0 9 * * MON-FRI", "America/New_York");

// Parsing plus zone lookup, as done when a trigger is published.
void BM_CreateSchedule(benchmark::State& state) {
  for (auto _ : state) {
    ql::Result<ql::CronSchedule> schedule =
        ql::CronSchedule::Create("0 0 9 * * MON-FRI", "America/New_York");
    benchmark::DoNotOptimize(schedule.ok());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_CreateSchedule);

}  // namespace

BENCHMARK_MAIN();
