#pragma once

// The retention job of DESIGN §11, run by every daemon (ql-local, each ql-cluster replica): it
// walks the tasks in id order and purges, task by task, the finished runs that retention no
// longer keeps (core/retention.h), one bounded batch per transaction. A round is bounded too:
// it stops after `max_runs_per_round` purged runs and the next round continues where it
// stopped, so a large backlog is worked off in slices that leave the store to the schedulers in
// between. Several replicas may run it at once: the store skips rows another purge holds. While
// the daemon's scheduler has a backlog the job yields to it, so a purge does not stretch an
// admission burst; but after yielding for `max_yield_ms` without a break it runs one whole
// round anyway, so a scheduler that never catches up cannot stop retention for good.

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "ql/core/artifact_store.h"
#include "ql/core/clock.h"
#include "ql/core/event_log.h"
#include "ql/core/retention.h"
#include "ql/core/status.h"
#include "ql/engine/diagnostics.h"
#include "ql/engine/metrics.h"

namespace ql {

struct RetentionJobOptions {
  int batch_size = 100;            // runs per purge transaction, 1 .. kMaxPurgeBatch
  int max_runs_per_round = 1000;   // a round stops once it purged this many
  int64_t interval_ms = 60'000;    // sleep after a round that found nothing more to do
  int64_t continue_ms = 1'000;     // sleep after a round that stopped at its bound
  int64_t yield_ms = 250;          // sleep after a round that yielded to the scheduler
  int64_t max_yield_ms = 10'000;   // yielding this long without a break: the next round runs
  // Asked before each purge transaction: true while the scheduler has a backlog (its last
  // round found more due rows than it took, so it goes straight into the next one). The round
  // then stops before that transaction and the next one continues from there. Unset: never.
  std::function<bool()> scheduler_backlog;
  // Called after each committed batch (e.g. to delete the local log files and attempt
  // directories of the purged attempts). Its failures are its own to report.
  std::function<void(const PurgeResult&)> on_purged;
  // The daemon log: one `retention.round` line (info) for each round of RunLoopRound that
  // purged something or met errors (warn), with its counts. Must outlive the job; null: none.
  EventLog* event_log = nullptr;
  // Purges the script library once (script_retention.h), at most every `artifact_interval_ms`,
  // from RunLoopRound; unset: never. Counted in ql_retention_purged_script_versions_total and
  // ql_retention_purged_artifact_bytes_total, logged as `retention.artifacts`.
  std::function<Result<PurgeArtifactsResult>()> purge_artifacts;
  int64_t artifact_interval_ms = 10 * 60 * 1000;
};

struct RetentionRound {
  int64_t runs = 0;
  int64_t events = 0;
  int64_t log_chunks = 0;
  int tasks = 0;           // tasks looked at
  bool bounded = false;    // stopped at max_runs_per_round; the next round continues
  bool yielded = false;    // stopped because the scheduler had a backlog; the next continues
  int errors = 0;          // tasks whose purge failed; the walk went on past them
  Status first_error;      // the first of those failures (ok when none)
};

class RetentionJob {
 public:
  // `retention`, `clock`, `random` and `metrics` must outlive the job.
  RetentionJob(RetentionRepository& retention, Clock& clock, RandomSource& random,
               Metrics& metrics, RetentionJobOptions options);

  // Validates the options: InvalidArgument `invalid_retention_options`.
  static Status ValidateOptions(const RetentionJobOptions& options);

  // Runs one round from where the last one stopped. Counts purged runs, events and log chunks
  // in ql_retention_purged_{runs,events,log_chunks}_total, failed batches in
  // ql_retention_errors_total and rounds that yielded to the scheduler in
  // ql_retention_yields_total; returns the first store error after counting it (the next
  // round starts over from the same task).
  Result<RetentionRound> RunRound();

  // Returns how long to sleep after `round`.
  int64_t NextDelayMs(const RetentionRound& round) const;

  // Purges the script library when `purge_artifacts` is set and its interval has passed;
  // returns whether it ran. Errors: the purge's.
  Result<bool> PurgeArtifactsIfDue();

  // Runs one round as a RoundLoop round: returns the delay before the next one, and hands an
  // error to `diagnostics` (component "retention") before waiting the interval.
  int64_t RunLoopRound(const DiagnosticLog& diagnostics);

 private:
  RetentionRepository& retention_;
  Clock& clock_;
  RandomSource& random_;
  Metrics& metrics_;
  RetentionJobOptions options_;
  std::mutex mu_;            // rounds never overlap
  std::string after_task_;   // the walk's cursor: tasks after this one come next
  std::optional<int64_t> yielding_since_ms_;  // the first yield of the current unbroken run
  std::optional<int64_t> artifacts_purged_at_ms_;  // the last purge of the script library
};

}  // namespace ql
