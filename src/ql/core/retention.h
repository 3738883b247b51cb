#pragma once

// Retention (DESIGN §11): how long finished runs are kept, and the one deletion path of run
// history. A project holds the defaults of its tasks, a task may override them; a setting left
// empty inherits (task → project → built-in default). A run is purged — with its attempts,
// events, retry policy, log chunks and dispatch leases — once it has finished and either
// finished more than keep_days ago or is beyond the newest keep_runs runs of its task. A run
// that has not finished is never purged, and neither is one that a kept run retries (manual
// retries point at the run they retry, so a retry chain goes from its newest end).
//
// The rules live here once; each store only selects and deletes the rows (RetentionRepository)
// and the retention job (engine/retention_job.h) walks the tasks in bounded batches.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ql/core/governance.h"
#include "ql/core/ports.h"
#include "ql/core/status.h"

namespace ql {

inline constexpr int kDefaultKeepDays = 30;
inline constexpr int kDefaultKeepRuns = 1000;
inline constexpr int kMaxKeepDays = 36500;
inline constexpr int kMaxKeepRuns = 1'000'000;
// The largest number of runs one purge transaction deletes.
inline constexpr int kMaxPurgeBatch = 1000;
inline constexpr int64_t kDayMs = 86'400'000;

// The audit action of one purge batch and of a retention change.
inline constexpr std::string_view kAuditRunsPurge = "runs.purge";
inline constexpr std::string_view kAuditRetentionSet = "retention.set";

// The run statuses a purge may delete (a run never leaves one of them), as an SQL list.
inline constexpr char kPurgeableStatusesSql[] =
    "('succeeded', 'failed', 'cancelled', 'timed_out', 'skipped')";

// Retention settings as stored; an empty field inherits.
struct RetentionSettings {
  std::optional<int> keep_days;  // 1 .. kMaxKeepDays
  std::optional<int> keep_runs;  // 1 .. kMaxKeepRuns
  bool operator==(const RetentionSettings&) const = default;
};

// The stored settings of a project (task_id empty) or of one task. version 0: never set.
struct RetentionRecord {
  std::string project_id;
  std::string task_id;
  RetentionSettings settings;
  int64_t version = 0;
  int64_t updated_at_ms = 0;
};

struct SetRetentionCommand {
  std::string project_id;
  std::string task_id;  // empty: the project's defaults
  RetentionSettings settings;
  // Needs admin in the project (checked inside the write); empty: the system.
  std::optional<PolicyFence> fence;
  std::string request_id;  // for the audit fact
  std::string audit_id;    // the id of the audit fact (a UUIDv7)
  int64_t now_ms = 0;
};

// Returns the audit fact of `cmd`: action retention.set, the fence's principal as actor,
// target the project (task_id empty) or the task.
AuditRecord RetentionAuditFact(const SetRetentionCommand& cmd);

// What applies to a task after inheritance.
struct EffectiveRetention {
  int keep_days = kDefaultKeepDays;
  int keep_runs = kDefaultKeepRuns;
  bool operator==(const EffectiveRetention&) const = default;
};

// Returns InvalidArgument `invalid_keep_days` / `invalid_keep_runs` for a value out of range.
Status ValidateRetentionSettings(const RetentionSettings& settings);

// Returns the task's settings over the project's over the built-in defaults.
EffectiveRetention ResolveRetention(const RetentionSettings& project,
                                    const RetentionSettings& task);

// One task to consider, with its project's and its own stored settings.
struct RetentionScope {
  std::string project_id;
  std::string task_id;
  RetentionSettings project;
  RetentionSettings task;
};

// What one purge transaction deletes: at most `limit` runs of `task_id`, oldest first, each
// finished, not retried by another run, and either finished before `finished_before_ms` or
// beyond the newest `keep_runs` runs of the task (all statuses count towards keep_runs).
struct PurgeSelection {
  std::string project_id;
  std::string task_id;
  int64_t finished_before_ms = 0;
  int keep_runs = kDefaultKeepRuns;
  int limit = 100;
  // Appended in the same transaction when at least one run is deleted.
  AuditRecord audit;
};

// Returns the selection of `scope` at `now_ms` (limit 1 .. kMaxPurgeBatch) with its audit fact
// (system actor, action runs.purge, target the task) stamped `audit_id`.
PurgeSelection PlanPurge(const RetentionScope& scope, int64_t now_ms, int limit,
                         const std::string& audit_id);

// One deleted attempt, for the files that belong to it (a local log, an attempt directory).
struct PurgedAttempt {
  std::string id;
  std::string run_id;
  std::optional<std::string> log_path;
};

struct PurgeResult {
  std::vector<std::string> run_ids;
  std::vector<PurgedAttempt> attempts;
  int64_t events = 0;
  int64_t log_chunks = 0;
};

class RetentionRepository {
 public:
  virtual ~RetentionRepository() = default;

  // Returns the stored settings of a project (task_id empty) or of a task of that project
  // (version 0 and empty settings when never set). NotFound `project_not_found`,
  // `task_not_found` (also for a task of another project).
  virtual Result<RetentionRecord> GetRetention(const std::string& project_id,
                                               const std::string& task_id) = 0;
  // Replaces the stored settings (version + 1) and appends an audit fact retention.set in the
  // same transaction, after the policy fence (admin in the project; an archived project is
  // Conflict `project_archived`). Errors: those of ValidateRetentionSettings and GetRetention.
  virtual Result<RetentionRecord> SetRetention(const SetRetentionCommand& cmd) = 0;

  // Lists the tasks with id > `after_task_id` in id order, at most `limit`, with their stored
  // and their project's stored settings.
  virtual Result<std::vector<RetentionScope>> ListRetentionScopes(const std::string& after_task_id,
                                                                  int limit) = 0;

  // Deletes the runs of `selection` with everything that belongs to them, in one transaction,
  // and appends selection.audit when it deleted any. Runs another purge holds are skipped
  // (PostgreSQL: SKIP LOCKED). Returns what was deleted (nothing: an empty result).
  // InvalidArgument `invalid_limit` for a limit outside 1 .. kMaxPurgeBatch.
  virtual Result<PurgeResult> PurgeRuns(const PurgeSelection& selection) = 0;
};

}  // namespace ql
