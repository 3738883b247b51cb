// Next-fire throughput: CronSchedule::NextAfter for common expressions in a zone without DST
// (Asia/Shanghai) and one with it (America/New_York). Each iteration asks for the fire after the
// previous one, as the scheduler does when it advances a cursor. Also the cost of the check every
// admission makes of its new cursor (NextFireGate).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <iostream>

#include "ql/core/cron.h"
#include "ql/core/next_fire_gate.h"

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

// The admission's recomputation of the next fire time from the stored revision (a cached
// parse, the next fire after the occurrence, the comparison), as each admission pays it.
void BM_AdmissionNextFireCheck(benchmark::State& state) {
  ql::TriggerRevisionRecord stored;
  stored.trigger_id = "0190a6a0-0000-7000-8000-000000000001";
  stored.revision = 1;
  stored.expression = "*/5 * * * *";
  stored.timezone = "America/New_York";
  stored.misfire = "skip";
  ql::NextFireGate gate;
  int64_t occurrence = kStartMs;
  for (auto _ : state) {
    const int64_t next = occurrence + 300'000;
    ql::Status checked = gate.Check(stored, occurrence, occurrence, next);
    if (!checked.ok()) {
      state.SkipWithError(checked.ToString().c_str());
      return;
    }
    occurrence = next < kStartMs + 100LL * 365 * 86400000 ? next : kStartMs;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_AdmissionNextFireCheck);

}  // namespace

BENCHMARK_MAIN();
