#include "ql/engine/retention_job.h"

#include <vector>

#include "ql/core/ids.h"

namespace ql {
namespace {

constexpr int kScopePage = 100;

}  // namespace

RetentionJob::RetentionJob(RetentionRepository& retention, Clock& clock, RandomSource& random,
                           Metrics& metrics, RetentionJobOptions options)
    : retention_(retention),
      clock_(clock),
      random_(random),
      metrics_(metrics),
      options_(std::move(options)) {
  metrics_.Describe("ql_retention_purged_script_versions_total", "counter",
                    "Script versions removed by retention.");
  metrics_.Describe("ql_retention_purged_artifact_bytes_total", "counter",
                    "Bytes of artifact chunks removed by retention (nothing referenced them).");
  metrics_.Describe("ql_retention_purged_runs_total", "counter",
                    "Finished runs deleted by retention.");
  metrics_.Describe("ql_retention_purged_events_total", "counter",
                    "Run events deleted with their runs by retention.");
  metrics_.Describe("ql_retention_purged_log_chunks_total", "counter",
                    "Stored log chunks deleted with their runs by retention.");
  metrics_.Describe("ql_retention_errors_total", "counter", "Retention batches that failed.");
  metrics_.Describe("ql_retention_yields_total", "counter",
                    "Retention rounds that stopped because the scheduler had a backlog.");
}

Status RetentionJob::ValidateOptions(const RetentionJobOptions& options) {
  if (options.batch_size < 1 || options.batch_size > kMaxPurgeBatch ||
      options.max_runs_per_round < options.batch_size || options.interval_ms < 1 ||
      options.continue_ms < 0 || options.yield_ms < 0 || options.max_yield_ms < 0) {
    return InvalidArgument("invalid_retention_options",
                           "retention needs 1 <= batch size <= " + std::to_string(kMaxPurgeBatch) +
                               " <= runs per round, and a positive interval");
  }
  return Status::Ok();
}

Result<RetentionRound> RetentionJob::RunRound() {
  std::lock_guard<std::mutex> lock(mu_);
  RetentionRound round;
  // After yielding for max_yield_ms without a break, this round does not yield: a scheduler
  // that never catches up slows retention down to one round per window instead of stopping it.
  const bool may_yield = !yielding_since_ms_.has_value() ||
                         clock_.NowMs() - *yielding_since_ms_ < options_.max_yield_ms;
  if (!may_yield) yielding_since_ms_.reset();
  for (;;) {
    Result<std::vector<RetentionScope>> scopes =
        retention_.ListRetentionScopes(after_task_, kScopePage);
    if (!scopes.ok()) {
      metrics_.Increment("ql_retention_errors_total");
      return scopes.status();
    }
    for (const RetentionScope& scope : *scopes) {
      ++round.tasks;
      for (;;) {
        if (may_yield && options_.scheduler_backlog && options_.scheduler_backlog()) {
          // Admissions first: continue with this task once the scheduler has caught up.
          round.yielded = true;
          if (!yielding_since_ms_.has_value()) yielding_since_ms_ = clock_.NowMs();
          metrics_.Increment("ql_retention_yields_total");
          return round;
        }
        const int64_t now = clock_.NowMs();
        Result<PurgeResult> purged = retention_.PurgeRuns(
            PlanPurge(scope, now, options_.batch_size, NewUuidV7(now, random_)));
        if (!purged.ok()) {
          // One task that cannot be purged (a damaged row, a trigger refusing) must not stop
          // retention for every task after it: count it and go on; the next walk retries it.
          metrics_.Increment("ql_retention_errors_total");
          if (round.errors++ == 0) round.first_error = purged.status();
          break;
        }
        const int64_t runs = static_cast<int64_t>(purged->run_ids.size());
        if (runs > 0) {
          round.runs += runs;
          round.events += purged->events;
          round.log_chunks += purged->log_chunks;
          metrics_.Increment("ql_retention_purged_runs_total", {}, runs);
          metrics_.Increment("ql_retention_purged_events_total", {}, purged->events);
          metrics_.Increment("ql_retention_purged_log_chunks_total", {}, purged->log_chunks);
          if (options_.on_purged) options_.on_purged(*purged);
        }
        if (round.runs >= options_.max_runs_per_round) {
          // Continue with this task next round: it may have more.
          round.bounded = true;
          if (may_yield) yielding_since_ms_.reset();
          return round;
        }
        if (runs < options_.batch_size) break;
      }
      after_task_ = scope.task_id;
    }
    if (static_cast<int>(scopes->size()) < kScopePage) {
      after_task_.clear();  // the walk is complete; the next round starts over
      if (may_yield) yielding_since_ms_.reset();
      return round;
    }
  }
}

int64_t RetentionJob::NextDelayMs(const RetentionRound& round) const {
  if (round.yielded) return options_.yield_ms;
  return round.bounded ? options_.continue_ms : options_.interval_ms;
}

Result<bool> RetentionJob::PurgeArtifactsIfDue() {
  if (!options_.purge_artifacts) return false;
  const int64_t now = clock_.NowMs();
  if (artifacts_purged_at_ms_ && now - *artifacts_purged_at_ms_ < options_.artifact_interval_ms) {
    return false;
  }
  artifacts_purged_at_ms_ = now;
  Result<PurgeArtifactsResult> purged = options_.purge_artifacts();
  if (!purged.ok()) {
    metrics_.Increment("ql_retention_errors_total");
    return purged.status();
  }
  metrics_.Increment("ql_retention_purged_script_versions_total", {}, purged->versions);
  metrics_.Increment("ql_retention_purged_artifact_bytes_total", {}, purged->chunk_bytes);
  if (options_.event_log != nullptr &&
      (purged->versions > 0 || purged->blobs > 0 || purged->chunks > 0)) {
    options_.event_log->Write(LogLevel::kInfo, "retention.artifacts",
                              {{"versions", purged->versions},
                               {"uploads", purged->uploads},
                               {"blobs", purged->blobs},
                               {"chunks", purged->chunks},
                               {"bytes", purged->chunk_bytes}});
  }
  return true;
}

int64_t RetentionJob::RunLoopRound(const DiagnosticLog& diagnostics) {
  if (Result<bool> artifacts = PurgeArtifactsIfDue(); !artifacts.ok() && diagnostics) {
    diagnostics("retention (scripts)", artifacts.status());
  }
  Result<RetentionRound> round = RunRound();
  if (!round.ok()) {
    if (diagnostics) diagnostics("retention", round.status());
    return options_.interval_ms;
  }
  if (options_.event_log != nullptr && (round->runs > 0 || round->errors > 0)) {
    std::vector<LogField> fields = {{"runs", round->runs},
                                    {"events", round->events},
                                    {"log_chunks", round->log_chunks},
                                    {"tasks", round->tasks},
                                    {"more", round->bounded || round->yielded},
                                    {"errors", round->errors}};
    if (round->errors > 0) fields.emplace_back("code", round->first_error.reason());
    options_.event_log->Write(round->errors > 0 ? LogLevel::kWarn : LogLevel::kInfo,
                              "retention.round", fields);
  }
  if (round->errors > 0 && diagnostics) {
    diagnostics("retention: " + std::to_string(round->errors) + " task(s) could not be purged",
                round->first_error);
  }
  return NextDelayMs(*round);
}

}  // namespace ql
