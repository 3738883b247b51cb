#pragma once

// Values for the upgrade tests of both stores, which build a database at every earlier schema
// version with plain SQL and let the store migrate it: task revisions, plans and trigger
// revisions exactly as the publish path computes them (so the digests the current code checks
// on every read and admission hold), and a small template filler for the SQL that writes them.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "ql/core/records.h"
#include "ql/core/status.h"

namespace ql::testing {

// One task revision as ControlService publishes it, with its plan for one executor type.
struct PublishedRevision {
  TaskRevisionRecord revision;
  ExecutionRevisionRecord execution;  // empty id for a disabled revision (it has no plan)
  RetryPolicy retry_policy;           // the plan's snapshot, copied into every run
};

// Builds revision `revision` of task `task_id` in `project_id` from a task publish body
// (ParseTaskContent's form) at `created_at_ms`, with the plan for `executor_type` when enabled.
// Errors: those of ParseTaskContent and BuildExecutionPlan.
Result<PublishedRevision> PublishRevision(const std::string& project_id, const std::string& task_id,
                                          int64_t revision, const std::string& body_json,
                                          const std::string& executor_type, int64_t created_at_ms);

// Returns a trigger revision pinned to `task` with its content digest computed; `overlap` and
// `jitter_ms` as the trigger says (the defaults leave the digest as before they existed).
TriggerRevisionRecord PinTrigger(const TaskRevisionRecord& task, const std::string& trigger_id,
                                 int64_t revision, const std::string& expression,
                                 const std::string& timezone, const std::string& misfire,
                                 int64_t created_at_ms, const std::string& overlap = "allow",
                                 int64_t jitter_ms = 0);

// The times of the upgrade data. Cron cursors lie months before the test runs, so a scheduler
// finds them late: G1 (fire_once, every 5 minutes) admits its oldest missed occurrence kUpgradeC1
// once, G2 (skip, hourly) admits nothing.
inline constexpr int64_t kUpgradeC0 = 1'779'989'700'000;  // G1's occurrence run before the upgrade
inline constexpr int64_t kUpgradeC1 = 1'779'990'000'000;  // G1's cursor
inline constexpr int64_t kUpgradeC2 = 1'779'987'600'000;  // G2's cursor
inline constexpr int64_t kUpgradeG3At = 1'779'935'400'000;  // G3's occurrence kept as skipped

// The ids, definitions and derived values both stores' upgrade tests write, under short names
// for FillSql: ids ("P", "T1", "G1", "R1", "U1", ...), content digests "D<task>" and execution
// revision ids "X<task>" of the task revisions "T1r1", "T1r2", "T3", "T4", "T5" (published by
// U1), "T6" (disabled), the token digests "K1D".."K4D" of the tokens in `tokens`, the cron keys
// "KEYC0", "KEYG2", "KEYG3", the approval payloads "AR1P".."AR4P" and their digests "...PD"
// (AR3 retries R5), and a few digests ("SETUPD", "STATED", "RECOVERYD"); triggers G1 and G2 on
// T1r2, G3 (overlap forbid) and G4 (jitter 60 s) on T4.
struct UpgradeData {
  std::map<std::string, std::string> v;
  std::map<std::string, PublishedRevision> tasks;
  std::map<std::string, TriggerRevisionRecord> triggers;
  std::map<std::string, std::string> tokens;  // "K1" .. "K4": the token each digest is of
  const std::string& id(const std::string& name) const { return v.at(name); }
};

// Builds the data with plans for `executor_type`. Errors: those of PublishRevision.
Result<UpgradeData> MakeUpgradeData(const std::string& executor_type);

// A migration id as a test parameter's name: `0010-overlap` -> `0010_overlap` (gtest names
// take letters, digits and underscores).
std::string MigrationTestName(const std::string& migration_id);

// How a dialect writes true and false: SQLite's 1 and 0, PostgreSQL's true and false.
enum class SqlBooleans { kIntegers, kWords };

// Returns `value` as an SQL string literal (quotes doubled), or NULL.
std::string SqlText(const std::string& value);
std::string SqlText(const std::optional<std::string>& value);

// Returns the INSERTs of a task revision (with its head when `head`, named `name` and tombstoned
// at `deleted_at_ms` when the schema has names) and of its plan, over the columns the schema of
// the moment has: a column that came later (approval, concurrency, publisher) is written only
// when the revision sets it, so the same call fits every version that has what it sets.
std::string InsertTaskSql(const PublishedRevision& p, bool head,
                          const std::optional<std::string>& name,
                          std::optional<int64_t> deleted_at_ms, SqlBooleans booleans);

// Returns the INSERTs of a trigger head (named `name` when the schema has names) and its
// revision; overlap and jitter are written only when they are not the defaults.
std::string InsertTriggerSql(const TriggerRevisionRecord& t, const std::optional<std::string>& name,
                             SqlBooleans booleans);

// Replaces every `${name}` in `sql` by values[name] with each single quote doubled (templates
// put the quotes around it: '${name}'). A name without a value is left as is and reported by
// UnfilledName.
std::string FillSql(std::string_view sql, const std::map<std::string, std::string>& values);

// Returns the first `${name}` left in `sql`, or nullopt when there is none.
std::optional<std::string> UnfilledName(std::string_view sql);

}  // namespace ql::testing
