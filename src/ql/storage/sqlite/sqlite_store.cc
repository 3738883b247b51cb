#include "ql/storage/sqlite/sqlite_store.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include "ql/core/canonical_json.h"
#include "ql/core/execution_plan.h"
#include "ql/core/idempotency_key.h"
#include "ql/core/ids.h"
#include "ql/core/migration_stream.h"
#include "ql/core/run_payloads.h"
#include "ql/core/states.h"
#include "ql/core/store_commands.h"
#include "ql/core/governance_store.h"
#include "ql/storage/sqlite/sqlite_db.h"
#include "ql/storage/sqlite/sqlite_governance.h"
#include "ql/storage/sqlite/sqlite_migrations.h"

namespace ql {
namespace {

using sqlite::Db;
using sqlite::Stmt;
using sqlite::Tx;
using sqlite::TxMode;

// ---------------------------------------------------------------------------------------------
// Row readers. Column lists and readers are kept side by side so they cannot drift apart.

constexpr char kProjectColumns[] =
    "p.id, p.slug, p.name, p.status, p.version, p.created_at_ms, p.updated_at_ms";

ProjectRecord ReadProject(const Stmt& s) {
  return ProjectRecord{s.Text(0), s.Text(1), s.Text(2), s.Text(3), s.Int(4), s.Int(5), s.Int(6)};
}

constexpr char kTaskHeadColumns[] =
    "h.project_id, h.task_id, h.current_revision, h.created_at_ms, h.updated_at_ms";

TaskHeadRecord ReadTaskHead(const Stmt& s) {
  return TaskHeadRecord{s.Text(0), s.Text(1), s.Int(2), s.Int(3), s.Int(4)};
}

constexpr char kTaskRevisionColumns[] =
    "tr.project_id, tr.task_id, tr.revision, tr.mutation_id, tr.name, tr.kind, tr.spec_json, "
    "tr.labels_json, tr.enabled, tr.content_digest, tr.created_at_ms";

TaskRevisionRecord ReadTaskRevision(const Stmt& s) {
  TaskRevisionRecord r;
  r.project_id = s.Text(0);
  r.task_id = s.Text(1);
  r.revision = s.Int(2);
  r.mutation_id = s.Text(3);
  r.name = s.Text(4);
  r.kind = s.Text(5);
  r.spec_json = s.Text(6);
  r.labels_json = s.Text(7);
  r.enabled = s.Bool(8);
  r.content_digest = s.Text(9);
  r.created_at_ms = s.Int(10);
  return r;
}

constexpr char kExecutionColumns[] =
    "e.id, e.project_id, e.task_id, e.task_revision, e.task_digest, e.executor_type, e.plan_json, "
    "e.plan_digest, e.created_at_ms";

ExecutionRevisionRecord ReadExecution(const Stmt& s) {
  ExecutionRevisionRecord r;
  r.id = s.Text(0);
  r.project_id = s.Text(1);
  r.task_id = s.Text(2);
  r.task_revision = s.Int(3);
  r.task_digest = s.Text(4);
  r.executor_type = s.Text(5);
  r.plan_json = s.Text(6);
  r.plan_digest = s.Text(7);
  r.created_at_ms = s.Int(8);
  return r;
}

constexpr char kTriggerHeadColumns[] =
    "th.project_id, th.trigger_id, th.task_id, th.current_revision, th.created_at_ms, "
    "th.updated_at_ms";

TriggerHeadRecord ReadTriggerHead(const Stmt& s) {
  return TriggerHeadRecord{s.Text(0), s.Text(1), s.Text(2), s.Int(3), s.Int(4), s.Int(5)};
}

constexpr char kTriggerRevisionColumns[] =
    "g.project_id, g.trigger_id, g.revision, g.mutation_id, g.task_id, g.task_revision, "
    "g.task_digest, g.expression, g.timezone, g.misfire, g.enabled, g.content_digest, "
    "g.created_at_ms";
constexpr int kTriggerRevisionColumnCount = 13;

TriggerRevisionRecord ReadTriggerRevision(const Stmt& s, int c = 0) {
  TriggerRevisionRecord r;
  r.project_id = s.Text(c + 0);
  r.trigger_id = s.Text(c + 1);
  r.revision = s.Int(c + 2);
  r.mutation_id = s.Text(c + 3);
  r.task_id = s.Text(c + 4);
  r.task_revision = s.Int(c + 5);
  r.task_digest = s.Text(c + 6);
  r.expression = s.Text(c + 7);
  r.timezone = s.Text(c + 8);
  r.misfire = s.Text(c + 9);
  r.enabled = s.Bool(c + 10);
  r.content_digest = s.Text(c + 11);
  r.created_at_ms = s.Int(c + 12);
  return r;
}

constexpr char kScheduleColumns[] =
    "s.project_id, s.trigger_id, s.trigger_revision, s.next_fire_at_ms, s.last_scheduled_at_ms, "
    "s.state_version, s.published_at_ms, s.exhausted, s.updated_at_ms";

ScheduleRecord ReadSchedule(const Stmt& s, int c = 0) {
  ScheduleRecord r;
  r.project_id = s.Text(c + 0);
  r.trigger_id = s.Text(c + 1);
  r.trigger_revision = s.Int(c + 2);
  r.next_fire_at_ms = s.OptInt(c + 3);
  r.last_scheduled_at_ms = s.OptInt(c + 4);
  r.state_version = s.Int(c + 5);
  r.published_at_ms = s.Int(c + 6);
  r.exhausted = s.Bool(c + 7);
  r.updated_at_ms = s.Int(c + 8);
  return r;
}

constexpr char kRunColumns[] =
    "r.id, r.project_id, r.task_id, r.task_revision, r.task_digest, r.execution_revision_id, "
    "r.trigger_id, r.trigger_revision, r.scheduled_for_ms, r.trigger_type, r.status, r.version, "
    "r.event_sequence, r.priority, r.idempotency_key, r.retry_of_run_id, r.created_at_ms, "
    "r.queued_at_ms, r.started_at_ms, r.finished_at_ms, r.retry_at_ms, "
    "r.cancel_requested_at_ms, r.cancel_reason, r.error_code, r.error_summary, r.exit_code, "
    "rp.max_attempts, rp.retry_on_lost, rp.safety, rp.backoff_base_ms, rp.backoff_max_ms";
constexpr char kRunFrom[] = " FROM runs r JOIN run_retry_policies rp ON rp.run_id = r.id";

std::optional<int> OptInt32(const Stmt& s, int column) {
  if (s.IsNull(column)) return std::nullopt;
  return static_cast<int>(s.Int(column));
}

RunRecord ReadRun(const Stmt& s) {
  RunRecord r;
  r.id = s.Text(0);
  r.project_id = s.Text(1);
  r.task_id = s.Text(2);
  r.task_revision = s.Int(3);
  r.task_digest = s.Text(4);
  r.execution_revision_id = s.Text(5);
  r.trigger_id = s.OptText(6);
  r.trigger_revision = s.OptInt(7);
  r.scheduled_for_ms = s.OptInt(8);
  r.trigger_type = s.Text(9);
  r.status = s.Text(10);
  r.version = s.Int(11);
  r.event_sequence = s.Int(12);
  r.priority = static_cast<int>(s.Int(13));
  r.idempotency_key = s.OptText(14);
  r.retry_of_run_id = s.OptText(15);
  r.created_at_ms = s.Int(16);
  r.queued_at_ms = s.OptInt(17);
  r.started_at_ms = s.OptInt(18);
  r.finished_at_ms = s.OptInt(19);
  r.retry_at_ms = s.OptInt(20);
  r.cancel_requested_at_ms = s.OptInt(21);
  r.cancel_reason = s.OptText(22);
  r.error_code = s.OptText(23);
  r.error_summary = s.OptText(24);
  r.exit_code = OptInt32(s, 25);
  r.retry_policy.max_attempts = static_cast<int>(s.Int(26));
  r.retry_policy.retry_on_lost = s.Bool(27);
  r.retry_policy.safety = s.Text(28);
  r.retry_policy.backoff_base_ms = s.Int(29);
  r.retry_policy.backoff_max_ms = s.Int(30);
  return r;
}

constexpr char kAttemptColumns[] =
    "a.id, a.run_id, a.attempt, a.status, a.executor_type, a.callback_sequence, a.pid, "
    "a.process_start_ticks, a.log_path, a.created_at_ms, a.started_at_ms, a.finished_at_ms, "
    "a.exit_code, a.error_code, a.error_summary";

AttemptRecord ReadAttempt(const Stmt& s) {
  AttemptRecord r;
  r.id = s.Text(0);
  r.run_id = s.Text(1);
  r.attempt = static_cast<int>(s.Int(2));
  r.status = s.Text(3);
  r.executor_type = s.Text(4);
  r.callback_sequence = s.Int(5);
  r.pid = s.OptInt(6);
  r.process_start_ticks = s.OptInt(7);
  r.log_path = s.OptText(8);
  r.created_at_ms = s.Int(9);
  r.started_at_ms = s.OptInt(10);
  r.finished_at_ms = s.OptInt(11);
  r.exit_code = OptInt32(s, 12);
  r.error_code = s.OptText(13);
  r.error_summary = s.OptText(14);
  return r;
}

constexpr char kEventColumns[] =
    "ev.run_id, ev.sequence, ev.type, ev.actor_type, ev.attempt_id, ev.dedupe_key, "
    "ev.payload_json, ev.created_at_ms";

EventRecord ReadEvent(const Stmt& s) {
  EventRecord r;
  r.run_id = s.Text(0);
  r.sequence = s.Int(1);
  r.type = s.Text(2);
  r.actor_type = s.Text(3);
  r.attempt_id = s.OptText(4);
  r.dedupe_key = s.OptText(5);
  r.payload_json = s.Text(6);
  r.created_at_ms = s.Int(7);
  return r;
}

// ---------------------------------------------------------------------------------------------
// Query helpers (callers hold the connection inside a transaction)

template <typename T, typename Reader, typename... Args>
Result<std::optional<T>> QueryOne(Db& db, const std::string& sql, Reader read,
                                  const Args&... args) {
  QL_ASSIGN_OR_RETURN(Stmt stmt, db.Prepare(sql));
  stmt.BindAll(args...);
  QL_ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return std::optional<T>();
  return std::optional<T>(read(stmt));
}

template <typename T, typename Reader, typename... Args>
Result<std::vector<T>> QueryAll(Db& db, const std::string& sql, Reader read, const Args&... args) {
  QL_ASSIGN_OR_RETURN(Stmt stmt, db.Prepare(sql));
  stmt.BindAll(args...);
  std::vector<T> out;
  for (;;) {
    QL_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) break;
    out.push_back(read(stmt));
  }
  return out;
}

template <typename... Args>
Status Execute(Db& db, const std::string& sql, const Args&... args) {
  QL_ASSIGN_OR_RETURN(Stmt stmt, db.Prepare(sql));
  stmt.BindAll(args...);
  return stmt.Run();
}

// Executes an UPDATE guarded by a compare-and-set; Conflict when no row matched.
template <typename... Args>
Status ExecuteCas(Db& db, const Status& on_miss, const std::string& sql, const Args&... args) {
  QL_RETURN_IF_ERROR(Execute(db, sql, args...));
  if (db.Changes() != 1) return on_miss;
  return Status();
}

Result<std::optional<ProjectRecord>> LoadProject(Db& db, const std::string& id) {
  static const std::string kSql =
      Cat({"SELECT ", kProjectColumns, " FROM projects p WHERE p.id = ?"});
  return QueryOne<ProjectRecord>(db, kSql, ReadProject, id);
}

// Returns the project when it exists and is active: NotFound / Conflict otherwise.
Status RequireActiveProject(Db& db, const std::string& project_id) {
  QL_ASSIGN_OR_RETURN(std::optional<ProjectRecord> project, LoadProject(db, project_id));
  if (!project.has_value()) {
    return NotFound("project_not_found", Cat({"project ", project_id, " does not exist"}));
  }
  if (project->status != kProjectActive) {
    return Conflict("project_inactive",
                    Cat({"project ", project_id, " is ", project->status, ", not active"}));
  }
  return Status();
}

Result<std::optional<TaskHeadRecord>> LoadTaskHead(Db& db, const std::string& task_id) {
  static const std::string kSql =
      Cat({"SELECT ", kTaskHeadColumns, " FROM task_heads h WHERE h.task_id = ?"});
  return QueryOne<TaskHeadRecord>(db, kSql, ReadTaskHead, task_id);
}

Result<std::optional<TaskRevisionRecord>> LoadTaskRevision(Db& db, const std::string& task_id,
                                                           int64_t revision) {
  static const std::string kSql = Cat({"SELECT ", kTaskRevisionColumns,
                                       " FROM task_revisions tr WHERE tr.task_id = ? AND "
                                       "tr.revision = ?"});
  return QueryOne<TaskRevisionRecord>(db, kSql, ReadTaskRevision, task_id, revision);
}

Result<std::optional<TaskRevisionRecord>> LoadTaskRevisionByMutation(Db& db,
                                                                     const std::string& mutation) {
  static const std::string kSql =
      Cat({"SELECT ", kTaskRevisionColumns, " FROM task_revisions tr WHERE tr.mutation_id = ?"});
  return QueryOne<TaskRevisionRecord>(db, kSql, ReadTaskRevision, mutation);
}

Result<std::optional<TriggerHeadRecord>> LoadTriggerHead(Db& db, const std::string& trigger_id) {
  static const std::string kSql =
      Cat({"SELECT ", kTriggerHeadColumns, " FROM trigger_heads th WHERE th.trigger_id = ?"});
  return QueryOne<TriggerHeadRecord>(db, kSql, ReadTriggerHead, trigger_id);
}

Result<std::optional<TriggerRevisionRecord>> LoadTriggerRevisionByMutation(
    Db& db, const std::string& mutation) {
  static const std::string kSql = Cat(
      {"SELECT ", kTriggerRevisionColumns, " FROM trigger_revisions g WHERE g.mutation_id = ?"});
  return QueryOne<TriggerRevisionRecord>(
      db, kSql, [](const Stmt& s) { return ReadTriggerRevision(s); }, mutation);
}

Result<std::optional<RunRecord>> LoadRun(Db& db, const std::string& run_id) {
  static const std::string kSql = Cat({"SELECT ", kRunColumns, kRunFrom, " WHERE r.id = ?"});
  return QueryOne<RunRecord>(db, kSql, ReadRun, run_id);
}

Result<RunRecord> RequireRun(Db& db, const std::string& run_id) {
  QL_ASSIGN_OR_RETURN(std::optional<RunRecord> run, LoadRun(db, run_id));
  if (!run.has_value()) return NotFound("run_not_found", Cat({"run ", run_id, " does not exist"}));
  return std::move(*run);
}

Result<std::optional<AttemptRecord>> LoadAttempt(Db& db, const std::string& attempt_id) {
  static const std::string kSql =
      Cat({"SELECT ", kAttemptColumns, " FROM run_attempts a WHERE a.id = ?"});
  return QueryOne<AttemptRecord>(db, kSql, ReadAttempt, attempt_id);
}

Result<std::optional<AttemptRecord>> LoadLatestAttempt(Db& db, const std::string& run_id) {
  static const std::string kSql = Cat({"SELECT ", kAttemptColumns,
                                       " FROM run_attempts a WHERE a.run_id = ? "
                                       "ORDER BY a.attempt DESC LIMIT 1"});
  return QueryOne<AttemptRecord>(db, kSql, ReadAttempt, run_id);
}

// Inserts one event at `sequence`; the attempt it names must belong to the run.
Status InsertEvent(Db& db, const std::string& run_id, int64_t sequence, const NewEvent& event,
                   const std::string& canonical_payload, int64_t now_ms) {
  if (event.attempt_id.has_value()) {
    static const std::string kOwner = "SELECT run_id FROM run_attempts WHERE id = ?";
    QL_ASSIGN_OR_RETURN(
        std::optional<std::string> owner,
        QueryOne<std::string>(
            db, kOwner, [](const Stmt& s) { return s.Text(0); }, *event.attempt_id));
    if (!owner.has_value() || *owner != run_id) {
      return InvalidArgument("attempt_not_in_run",
                             Cat({"event ", Quote(event.type), " names attempt ", *event.attempt_id,
                                  ", which is not an attempt of run ", run_id}));
    }
  }
  static const std::string kSql =
      "INSERT INTO run_events (run_id, sequence, type, actor_type, attempt_id, dedupe_key, "
      "payload_json, created_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)";
  return Execute(db, kSql, run_id, sequence, event.type, event.actor_type, event.attempt_id,
                 event.dedupe_key, canonical_payload, now_ms);
}

Result<std::string> CanonicalOf(const nlohmann::json& value) { return CanonicalJson(value); }

// Inserts a queued run with its claimed first attempt, its retry policy and the events
// run.created (sequence 1) and run.queued (sequence 2).
Status InsertQueuedRun(Db& db, const NewRun& run) {
  static const std::string kRun =
      "INSERT INTO runs (id, project_id, task_id, task_revision, task_digest, "
      "execution_revision_id, trigger_id, trigger_revision, scheduled_for_ms, trigger_type, "
      "status, version, event_sequence, priority, idempotency_key, retry_of_run_id, "
      "created_at_ms, queued_at_ms) "
      "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'queued', 1, 2, ?, ?, ?, ?, ?)";
  QL_RETURN_IF_ERROR(Execute(db, kRun, run.run_id, run.project_id, run.task_id, run.task_revision,
                             run.task_digest, run.execution_revision_id, run.trigger_id,
                             run.trigger_revision, run.scheduled_for_ms, run.trigger_type,
                             run.priority, run.idempotency_key, run.retry_of_run_id, run.now_ms,
                             run.now_ms));
  static const std::string kPolicy =
      "INSERT INTO run_retry_policies (run_id, max_attempts, retry_on_lost, safety, "
      "backoff_base_ms, backoff_max_ms) VALUES (?, ?, ?, ?, ?, ?)";
  QL_RETURN_IF_ERROR(Execute(db, kPolicy, run.run_id, run.retry_policy.max_attempts,
                             run.retry_policy.retry_on_lost, run.retry_policy.safety,
                             run.retry_policy.backoff_base_ms, run.retry_policy.backoff_max_ms));
  static const std::string kAttempt =
      "INSERT INTO run_attempts (id, run_id, attempt, status, executor_type, callback_sequence, "
      "created_at_ms) VALUES (?, ?, 1, 'claimed', ?, 0, ?)";
  QL_RETURN_IF_ERROR(
      Execute(db, kAttempt, run.attempt_id, run.run_id, run.executor_type, run.now_ms));

  QL_ASSIGN_OR_RETURN(std::string created_payload, RunCreatedPayload(run));
  NewEvent created_event{std::string(kEventRunCreated), run.actor_type, std::nullopt, std::nullopt,
                         created_payload};
  QL_RETURN_IF_ERROR(InsertEvent(db, run.run_id, 1, created_event, created_payload, run.now_ms));

  QL_ASSIGN_OR_RETURN(std::string queued_payload, RunQueuedPayload(1, run.executor_type));
  NewEvent queued_event{RunEventType(RunStatus::kQueued), run.actor_type, run.attempt_id,
                        std::nullopt, queued_payload};
  return InsertEvent(db, run.run_id, 2, queued_event, queued_payload, run.now_ms);
}

// Requires an execution revision `id` of (task, revision, executor type) with the task digest.
Result<bool> ExecutionRevisionMatches(Db& db, const NewRun& run) {
  static const std::string kSql =
      Cat({"SELECT ", kExecutionColumns, " FROM execution_revisions e WHERE e.id = ?"});
  QL_ASSIGN_OR_RETURN(
      std::optional<ExecutionRevisionRecord> exec,
      QueryOne<ExecutionRevisionRecord>(db, kSql, ReadExecution, run.execution_revision_id));
  return exec.has_value() && exec->task_id == run.task_id &&
         exec->task_revision == run.task_revision && exec->task_digest == run.task_digest &&
         exec->executor_type == run.executor_type && exec->project_id == run.project_id;
}

// The eligibility of a schedule row: active project, current enabled trigger revision pinning
// the task's current enabled revision and its digest, not exhausted.
constexpr char kEligibleSchedules[] =
    " FROM trigger_schedules s"
    " JOIN projects p ON p.id = s.project_id"
    " JOIN trigger_heads th ON th.trigger_id = s.trigger_id"
    " JOIN trigger_revisions g ON g.trigger_id = s.trigger_id AND g.revision = s.trigger_revision"
    " JOIN task_heads h ON h.task_id = g.task_id"
    " JOIN task_revisions tr ON tr.task_id = g.task_id AND tr.revision = g.task_revision"
    " WHERE s.exhausted = 0 AND p.status = 'active' AND th.current_revision = s.trigger_revision"
    " AND g.enabled = 1 AND h.current_revision = g.task_revision AND tr.enabled = 1"
    " AND tr.content_digest = g.task_digest";

// ---------------------------------------------------------------------------------------------
// Migrations

Status ReadHistory(Db& db, std::vector<SqliteHistoryRow>* out) {
  out->clear();
  QL_ASSIGN_OR_RETURN(
      std::optional<int64_t> has_history,
      QueryOne<int64_t>(db,
                        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = "
                        "'schema_migrations'",
                        [](const Stmt& s) { return s.Int(0); }));
  if (has_history.value_or(0) == 0) {
    QL_ASSIGN_OR_RETURN(
        std::optional<int64_t> objects,
        QueryOne<int64_t>(
            db, "SELECT count(*) FROM sqlite_master WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\'",
            [](const Stmt& s) { return s.Int(0); }));
    if (objects.value_or(0) != 0) {
      return Corrupt("migration_history_invalid",
                     "the database holds tables but no schema_migrations history; it was not "
                     "created by this store and is left untouched");
    }
    return Status();
  }
  Result<std::vector<SqliteHistoryRow>> rows = QueryAll<SqliteHistoryRow>(
      db,
      "SELECT id, stream, dialect, checksum, applied_at_ms FROM schema_migrations ORDER BY rowid",
      [](const Stmt& s) {
        return SqliteHistoryRow{s.Text(0), s.Text(1), s.Text(2), s.Text(3), s.Int(4)};
      });
  if (!rows.ok()) {
    if (rows.status().code() == StatusCode::kInternal) {
      return Corrupt("migration_history_invalid",
                     "schema_migrations does not have the columns id, stream, dialect, checksum "
                     "and applied_at_ms");
    }
    return rows.status();
  }
  *out = std::move(rows).value();
  return Status();
}

std::vector<HistoryRow> ToHistoryRows(const std::vector<SqliteHistoryRow>& rows) {
  std::vector<HistoryRow> out;
  out.reserve(rows.size());
  for (const SqliteHistoryRow& row : rows) {
    out.push_back(HistoryRow{row.id, row.checksum, row.stream, row.dialect});
  }
  return out;
}

Status CapabilityInvalid(std::string message) {
  return Corrupt("capability_invalid", std::move(message));
}

// Moves the capability row to `step` from exactly step.version - 1 (absent for version 1).
Status ApplyCapabilityStep(Db& db, const sqlite::SchemaCapability& step) {
  QL_ASSIGN_OR_RETURN(std::optional<int64_t> current,
                      QueryOne<int64_t>(
                          db, "SELECT version FROM schema_capabilities WHERE name = ?",
                          [](const Stmt& s) { return s.Int(0); }, step.name));
  const int64_t previous = step.version - 1;
  if (previous == 0) {
    if (current.has_value()) {
      return CapabilityInvalid(
          Cat({"capability ", step.name, " exists at version ", std::to_string(*current),
               " before migration ", step.migration_id, " creates version 1"}));
    }
    return Execute(db,
                   "INSERT INTO schema_capabilities (name, version, capability_map, migration_id) "
                   "VALUES (?, ?, ?, ?)",
                   step.name, step.version, step.capability_map, step.migration_id);
  }
  if (!current.has_value() || *current != previous) {
    return CapabilityInvalid(
        Cat({"capability ", step.name, " is at version ",
             current.has_value() ? std::to_string(*current) : "none", "; migration ",
             step.migration_id, " moves it only from version ", std::to_string(previous)}));
  }
  return ExecuteCas(db, CapabilityInvalid("capability row changed during migration"),
                    "UPDATE schema_capabilities SET version = ?, capability_map = ?, "
                    "migration_id = ? WHERE name = ? AND version = ?",
                    step.version, step.capability_map, step.migration_id, step.name, previous);
}

Result<std::vector<SqliteCapabilityRow>> ReadCapabilities(Db& db) {
  QL_ASSIGN_OR_RETURN(
      std::optional<int64_t> exists,
      QueryOne<int64_t>(db,
                        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = "
                        "'schema_capabilities'",
                        [](const Stmt& s) { return s.Int(0); }));
  if (exists.value_or(0) == 0) return std::vector<SqliteCapabilityRow>();
  return QueryAll<SqliteCapabilityRow>(
      db,
      "SELECT name, version, capability_map, migration_id FROM schema_capabilities ORDER BY name",
      [](const Stmt& s) {
        return SqliteCapabilityRow{s.Text(0), s.Int(1), s.Text(2), s.Text(3)};
      });
}

// Returns the capability step a database with `history` must hold: the last step written by
// an applied migration, or nullptr when none has been applied yet.
const sqlite::SchemaCapability* CapabilityAfter(const std::vector<SqliteHistoryRow>& history) {
  const sqlite::SchemaCapability* want = nullptr;
  for (const sqlite::SchemaCapability& step : sqlite::CapabilitySteps()) {
    for (const SqliteHistoryRow& row : history) {
      if (row.id == step.migration_id) want = &step;
    }
  }
  return want;
}

// Requires `rows` to be exactly `want` (no row at all when `want` is null).
Status CheckCapability(const std::vector<SqliteCapabilityRow>& rows,
                       const sqlite::SchemaCapability* want) {
  if (want == nullptr) {
    if (rows.empty()) return Status();
    return CapabilityInvalid(Cat({"capability ", Quote(rows.front().name), " version ",
                                  std::to_string(rows.front().version),
                                  " exists before the migration that creates it was applied"}));
  }
  if (rows.size() != 1) {
    return CapabilityInvalid(
        Cat({"expected exactly one capability row (", want->name, " version ",
             std::to_string(want->version), "), found ", std::to_string(rows.size())}));
  }
  const SqliteCapabilityRow& row = rows.front();
  if (row.name != want->name || row.version != want->version ||
      row.capability_map != want->capability_map || row.migration_id != want->migration_id) {
    return CapabilityInvalid(Cat(
        {"capability row is ", Quote(row.name), " version ", std::to_string(row.version), " from ",
         Quote(row.migration_id), " with map ", QuoteForMessage(row.capability_map, 200),
         "; this build needs ", want->name, " version ", std::to_string(want->version), " from ",
         want->migration_id, " with map ", want->capability_map}));
  }
  return Status();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Opening and migrating

SqliteStore::SqliteStore(std::unique_ptr<sqlite::Db> db)
    : db_(std::move(db)),
      governance_runner_(std::make_unique<sqlite::SqliteGovernanceRunner>(*db_)),
      governance_(std::make_unique<GovernanceStore>(*governance_runner_, SecureRandom())) {}

Status SqliteStore::Fence(const std::optional<PolicyFence>& fence, const std::string& project_id) {
  if (!fence.has_value()) return Status();
  std::unique_ptr<GovernanceTx> tx = sqlite::NewGovernanceTx(*db_);
  return CheckPolicyFence(*tx, *fence, project_id);
}

Status SqliteStore::FenceAnyStatus(const std::optional<PolicyFence>& fence,
                                   const std::string& project_id) {
  Status st = Fence(fence, project_id);
  // Cancelling stays possible in an archived project: it only stops work.
  if (st.code() == StatusCode::kConflict && st.reason() == "project_archived") return Status();
  return st;
}

SqliteStore::~SqliteStore() = default;

Result<std::unique_ptr<SqliteStore>> SqliteStore::Open(const SqliteOptions& options, Clock& clock) {
  const bool edge = options.profile == kSqliteProfileEdge;
  if (!edge && options.profile != kSqliteProfileStandalone) {
    return InvalidArgument(
        "invalid_profile",
        Cat({"SQLite profile must be edge or standalone, got ", Quote(options.profile)}));
  }
  if (options.path.empty()) {
    return InvalidArgument("invalid_sqlite_options", "the database path is empty");
  }
  if (options.busy_timeout_ms < 0 || options.max_busy_retries < 0) {
    return InvalidArgument("invalid_sqlite_options",
                           "busy_timeout_ms and max_busy_retries must not be negative");
  }
  QL_ASSIGN_OR_RETURN(std::unique_ptr<Db> db,
                      Db::Open(options.path, options.busy_timeout_ms, options.max_busy_retries));

  // Connection-scoped settings only: none of them writes to the file, so a refused database
  // stays byte-for-byte unchanged.
  const char* connection_pragmas =
      edge ? "PRAGMA foreign_keys = ON; PRAGMA synchronous = FULL; PRAGMA cache_size = -4096; "
             "PRAGMA mmap_size = 0;"
           : "PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL; PRAGMA cache_size = -16384;";
  QL_RETURN_IF_ERROR(db->WithConnection([&]() -> Status {
    QL_RETURN_IF_ERROR(db->ExecScript(connection_pragmas, "configuring the connection"));
    QL_ASSIGN_OR_RETURN(std::string fk, db->QueryText("PRAGMA foreign_keys", "reading pragmas"));
    if (fk != "1") {
      return Internal("foreign_keys_unsupported",
                      "this SQLite build cannot enforce foreign keys; the store needs them");
    }
    return Status();
  }));

  // The whole history is read and judged before anything is written.
  const MigrationStream& stream = sqlite::SqliteMainStream();
  std::vector<SqliteHistoryRow> history;
  std::vector<SqliteCapabilityRow> capabilities;
  QL_RETURN_IF_ERROR(
      db->Transact(TxMode::kRead, "reading the migration history", [&](Tx&) -> Status {
        QL_RETURN_IF_ERROR(ReadHistory(*db, &history));
        QL_ASSIGN_OR_RETURN(capabilities, ReadCapabilities(*db));
        return Status();
      }));
  QL_ASSIGN_OR_RETURN(std::vector<const Migration*> pending,
                      PendingMigrations(stream, ToHistoryRows(history)));
  QL_RETURN_IF_ERROR(CheckCapability(capabilities, CapabilityAfter(history)));

  // The journal mode is stored in the file, so it is set only once the file is known to be ours.
  const std::string journal_mode = edge ? "delete" : "wal";
  QL_RETURN_IF_ERROR(db->WithConnection([&]() -> Status {
    QL_ASSIGN_OR_RETURN(std::string mode, db->QueryText(edge ? "PRAGMA journal_mode = DELETE"
                                                             : "PRAGMA journal_mode = WAL",
                                                        "setting the journal mode"));
    if (mode != journal_mode && !(options.path == ":memory:" && mode == "memory")) {
      return Unavailable("journal_mode_unsupported",
                         Cat({"SQLite kept journal mode ", Quote(mode), " instead of ",
                              journal_mode, " for the ", options.profile, " profile"}));
    }
    return Status();
  }));

  for (const Migration* migration : pending) {
    QL_RETURN_IF_ERROR(db->Transact(
        TxMode::kWrite, Cat({"applying migration ", migration->id}), [&](Tx&) -> Status {
          // Another process may have migrated since the history was read: judge it again
          // under the write lock and skip what is already applied.
          QL_RETURN_IF_ERROR(ReadHistory(*db, &history));
          QL_ASSIGN_OR_RETURN(std::vector<const Migration*> now_pending,
                              PendingMigrations(stream, ToHistoryRows(history)));
          if (now_pending.empty() || now_pending.front() != migration) return Status();
          QL_RETURN_IF_ERROR(db->ExecScript(migration->sql, Cat({"migration ", migration->id})));
          QL_RETURN_IF_ERROR(Execute(*db,
                                     "INSERT INTO schema_migrations (id, stream, dialect, "
                                     "checksum, applied_at_ms) VALUES (?, ?, ?, ?, ?)",
                                     migration->id, stream.name, stream.dialect,
                                     migration->checksum, clock.NowMs()));
          for (const sqlite::SchemaCapability& step : sqlite::CapabilitySteps()) {
            if (step.migration_id == migration->id) {
              QL_RETURN_IF_ERROR(ApplyCapabilityStep(*db, step));
            }
          }
          return Status();
        }));
  }

  QL_RETURN_IF_ERROR(
      db->Transact(TxMode::kRead, "verifying the schema capability", [&](Tx&) -> Status {
        QL_ASSIGN_OR_RETURN(capabilities, ReadCapabilities(*db));
        return CheckCapability(capabilities, &sqlite::ExpectedCapability());
      }));
  return std::unique_ptr<SqliteStore>(new SqliteStore(std::move(db)));
}

Result<SqliteSettings> SqliteStore::Settings() {
  SqliteSettings out;
  QL_RETURN_IF_ERROR(db_->WithConnection([&]() -> Status {
    auto read_int = [&](std::string_view pragma, int64_t* value) -> Status {
      QL_ASSIGN_OR_RETURN(std::string text, db_->QueryText(pragma, "reading pragmas"));
      *value = std::stoll(text.empty() ? "0" : text);
      return Status();
    };
    QL_ASSIGN_OR_RETURN(out.journal_mode, db_->QueryText("PRAGMA journal_mode", "reading pragmas"));
    QL_RETURN_IF_ERROR(read_int("PRAGMA synchronous", &out.synchronous));
    QL_RETURN_IF_ERROR(read_int("PRAGMA cache_size", &out.cache_size));
    QL_RETURN_IF_ERROR(read_int("PRAGMA mmap_size", &out.mmap_size));
    int64_t fk = 0;
    QL_RETURN_IF_ERROR(read_int("PRAGMA foreign_keys", &fk));
    out.foreign_keys = fk != 0;
    return read_int("PRAGMA busy_timeout", &out.busy_timeout_ms);
  }));
  return out;
}

Result<std::vector<SqliteHistoryRow>> SqliteStore::History() {
  std::vector<SqliteHistoryRow> out;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kRead, "reading the migration history",
                                   [&](Tx&) { return ReadHistory(*db_, &out); }));
  return out;
}

Result<std::vector<SqliteCapabilityRow>> SqliteStore::Capabilities() {
  std::vector<SqliteCapabilityRow> out;
  QL_RETURN_IF_ERROR(
      db_->Transact(TxMode::kRead, "reading the schema capability", [&](Tx&) -> Status {
        QL_ASSIGN_OR_RETURN(out, ReadCapabilities(*db_));
        return Status();
      }));
  return out;
}

// ---------------------------------------------------------------------------------------------
// Projects

Result<ProjectRecord> SqliteStore::EnsureProject(const std::string& id_if_new,
                                                 const std::string& slug, const std::string& name,
                                                 int64_t now_ms) {
  QL_RETURN_IF_ERROR(RequireText("project slug", slug));
  ProjectRecord out;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kWrite, "ensuring a project", [&](Tx&) -> Status {
    static const std::string kBySlug =
        Cat({"SELECT ", kProjectColumns, " FROM projects p WHERE p.slug = ?"});
    QL_ASSIGN_OR_RETURN(std::optional<ProjectRecord> existing,
                        QueryOne<ProjectRecord>(*db_, kBySlug, ReadProject, slug));
    if (existing.has_value()) {
      out = std::move(*existing);
      return Status();
    }
    QL_RETURN_IF_ERROR(ValidateId("project id", id_if_new));
    out = ProjectRecord{id_if_new, slug, name, std::string(kProjectActive), 1, now_ms, now_ms};
    return Execute(*db_,
                   "INSERT INTO projects (id, slug, name, status, version, created_at_ms, "
                   "updated_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?)",
                   out.id, out.slug, out.name, out.status, out.version, out.created_at_ms,
                   out.updated_at_ms);
  }));
  return out;
}

Result<ProjectRecord> SqliteStore::GetProject(const std::string& project_id) {
  std::optional<ProjectRecord> out;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kRead, "reading a project", [&](Tx&) -> Status {
    QL_ASSIGN_OR_RETURN(out, LoadProject(*db_, project_id));
    return Status();
  }));
  if (!out.has_value()) {
    return NotFound("project_not_found", Cat({"project ", project_id, " does not exist"}));
  }
  return std::move(*out);
}

Result<ProjectRecord> SqliteStore::GetProjectBySlug(const std::string& slug) {
  std::optional<ProjectRecord> out;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kRead, "reading a project", [&](Tx&) -> Status {
    static const std::string kSql =
        Cat({"SELECT ", kProjectColumns, " FROM projects p WHERE p.slug = ?"});
    QL_ASSIGN_OR_RETURN(out, QueryOne<ProjectRecord>(*db_, kSql, ReadProject, slug));
    return Status();
  }));
  if (!out.has_value()) {
    return NotFound("project_not_found", Cat({"no project has slug ", Quote(slug)}));
  }
  return std::move(*out);
}

Result<std::vector<ProjectRecord>> SqliteStore::ListProjects() {
  std::vector<ProjectRecord> out;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kRead, "listing projects", [&](Tx&) -> Status {
    static const std::string kSql =
        Cat({"SELECT ", kProjectColumns, " FROM projects p ORDER BY p.slug"});
    QL_ASSIGN_OR_RETURN(out, QueryAll<ProjectRecord>(*db_, kSql, ReadProject));
    return Status();
  }));
  return out;
}

// ---------------------------------------------------------------------------------------------
// Definitions

Result<PublishTaskResult> SqliteStore::PublishTaskRevision(const PublishTaskCommand& cmd) {
  QL_RETURN_IF_ERROR(ValidatePublishTask(cmd));
  const int64_t new_revision = cmd.expected_revision.value_or(0) + 1;
  const TaskRevisionRecord& content = cmd.revision;

  PublishTaskResult out;
  QL_RETURN_IF_ERROR(
      db_->Transact(TxMode::kWrite, "publishing a task revision", [&](Tx&) -> Status {
        QL_RETURN_IF_ERROR(Fence(cmd.fence, cmd.project_id));
        QL_ASSIGN_OR_RETURN(std::optional<TaskRevisionRecord> replay,
                            LoadTaskRevisionByMutation(*db_, cmd.mutation_id));
        if (replay.has_value()) {
          if (replay->task_id == cmd.task_id && replay->project_id == cmd.project_id &&
              replay->revision == new_revision &&
              replay->content_digest == content.content_digest) {
            out = PublishTaskResult{std::move(*replay), true};
            return Status();
          }
          return Conflict("mutation_id_reused",
                          Cat({"mutation id ", Quote(cmd.mutation_id), " was applied to task ",
                               replay->task_id, " revision ", std::to_string(replay->revision),
                               " with other content or another expected revision"}));
        }
        QL_ASSIGN_OR_RETURN(std::optional<TriggerRevisionRecord> other,
                            LoadTriggerRevisionByMutation(*db_, cmd.mutation_id));
        if (other.has_value()) {
          return Conflict("mutation_id_reused",
                          Cat({"mutation id ", Quote(cmd.mutation_id), " was applied to trigger ",
                               other->trigger_id}));
        }
        QL_RETURN_IF_ERROR(RequireActiveProject(*db_, cmd.project_id));
        QL_ASSIGN_OR_RETURN(std::optional<TaskHeadRecord> head, LoadTaskHead(*db_, cmd.task_id));
        if (!cmd.expected_revision.has_value()) {
          if (head.has_value()) {
            return Duplicate("duplicate_id",
                             Cat({"task ", cmd.task_id,
                                  " exists already; update it with its expected revision"}));
          }
          QL_RETURN_IF_ERROR(
              Execute(*db_,
                      "INSERT INTO task_heads (task_id, project_id, current_revision, "
                      "created_at_ms, updated_at_ms) VALUES (?, ?, 1, ?, ?)",
                      cmd.task_id, cmd.project_id, cmd.now_ms, cmd.now_ms));
        } else {
          if (!head.has_value() || head->project_id != cmd.project_id) {
            return NotFound("task_not_found", Cat({"task ", cmd.task_id,
                                                   " does not exist in project ", cmd.project_id}));
          }
          const Status stale = Conflict(
              "revision_conflict",
              Cat({"task ", cmd.task_id, " is at revision ", std::to_string(head->current_revision),
                   ", not the expected ", std::to_string(*cmd.expected_revision)}));
          if (head->current_revision != *cmd.expected_revision) return stale;
          QL_RETURN_IF_ERROR(
              ExecuteCas(*db_, stale,
                         "UPDATE task_heads SET current_revision = ?, updated_at_ms = ? "
                         "WHERE task_id = ? AND current_revision = ?",
                         new_revision, cmd.now_ms, cmd.task_id, *cmd.expected_revision));
        }
        TaskRevisionRecord stored = content;
        stored.project_id = cmd.project_id;
        stored.task_id = cmd.task_id;
        stored.revision = new_revision;
        stored.mutation_id = cmd.mutation_id;
        stored.created_at_ms = cmd.now_ms;
        QL_RETURN_IF_ERROR(Execute(*db_,
                                   "INSERT INTO task_revisions (task_id, revision, project_id, "
                                   "mutation_id, name, kind, spec_json, labels_json, enabled, "
                                   "content_digest, created_at_ms) "
                                   "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                                   stored.task_id, stored.revision, stored.project_id,
                                   stored.mutation_id, stored.name, stored.kind, stored.spec_json,
                                   stored.labels_json, stored.enabled, stored.content_digest,
                                   stored.created_at_ms));
        for (const ExecutionRevisionRecord& exec : cmd.executions) {
          QL_RETURN_IF_ERROR(
              Execute(*db_,
                      "INSERT INTO execution_revisions (id, project_id, task_id, "
                      "task_revision, task_digest, executor_type, plan_json, "
                      "plan_digest, created_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                      exec.id, cmd.project_id, cmd.task_id, new_revision, exec.task_digest,
                      exec.executor_type, exec.plan_json, exec.plan_digest, cmd.now_ms));
        }
        out = PublishTaskResult{std::move(stored), false};
        return Status();
      }));
  return out;
}

Result<PublishTriggerResult> SqliteStore::PublishTriggerRevision(const PublishTriggerCommand& cmd) {
  QL_RETURN_IF_ERROR(ValidatePublishTrigger(cmd));
  const TriggerRevisionRecord& content = cmd.revision;
  const int64_t new_revision = cmd.expected_revision.value_or(0) + 1;

  PublishTriggerResult out;
  QL_RETURN_IF_ERROR(
      db_->Transact(TxMode::kWrite, "publishing a trigger revision", [&](Tx&) -> Status {
        QL_RETURN_IF_ERROR(Fence(cmd.fence, cmd.project_id));
        QL_ASSIGN_OR_RETURN(std::optional<TriggerRevisionRecord> replay,
                            LoadTriggerRevisionByMutation(*db_, cmd.mutation_id));
        if (replay.has_value()) {
          if (replay->trigger_id == cmd.trigger_id && replay->project_id == cmd.project_id &&
              replay->revision == new_revision &&
              replay->content_digest == content.content_digest) {
            out = PublishTriggerResult{std::move(*replay), true};
            return Status();
          }
          return Conflict("mutation_id_reused",
                          Cat({"mutation id ", Quote(cmd.mutation_id), " was applied to trigger ",
                               replay->trigger_id, " revision ", std::to_string(replay->revision),
                               " with other content or another expected revision"}));
        }
        QL_ASSIGN_OR_RETURN(std::optional<TaskRevisionRecord> other,
                            LoadTaskRevisionByMutation(*db_, cmd.mutation_id));
        if (other.has_value()) {
          return Conflict("mutation_id_reused", Cat({"mutation id ", Quote(cmd.mutation_id),
                                                     " was applied to task ", other->task_id}));
        }
        QL_RETURN_IF_ERROR(RequireActiveProject(*db_, cmd.project_id));
        QL_ASSIGN_OR_RETURN(std::optional<TaskHeadRecord> task,
                            LoadTaskHead(*db_, content.task_id));
        if (!task.has_value() || task->project_id != cmd.project_id) {
          return NotFound("task_not_found", Cat({"task ", content.task_id,
                                                 " does not exist in project ", cmd.project_id}));
        }
        QL_ASSIGN_OR_RETURN(std::optional<TriggerHeadRecord> head,
                            LoadTriggerHead(*db_, cmd.trigger_id));
        if (!cmd.expected_revision.has_value()) {
          if (head.has_value()) {
            return Duplicate("duplicate_id",
                             Cat({"trigger ", cmd.trigger_id,
                                  " exists already; update it with its expected revision"}));
          }
        } else {
          if (!head.has_value() || head->project_id != cmd.project_id) {
            return NotFound(
                "trigger_not_found",
                Cat({"trigger ", cmd.trigger_id, " does not exist in project ", cmd.project_id}));
          }
          if (head->task_id != content.task_id) {
            return Conflict("trigger_task_immutable",
                            Cat({"trigger ", cmd.trigger_id, " belongs to task ", head->task_id,
                                 " and cannot be rebound to task ", content.task_id}));
          }
          if (head->current_revision != *cmd.expected_revision) {
            return Conflict("revision_conflict",
                            Cat({"trigger ", cmd.trigger_id, " is at revision ",
                                 std::to_string(head->current_revision), ", not the expected ",
                                 std::to_string(*cmd.expected_revision)}));
          }
        }
        QL_ASSIGN_OR_RETURN(std::optional<TaskRevisionRecord> pinned,
                            LoadTaskRevision(*db_, content.task_id, content.task_revision));
        if (!pinned.has_value() || pinned->content_digest != content.task_digest) {
          return Conflict("trigger_pin_stale",
                          Cat({"trigger pins task ", content.task_id, " revision ",
                               std::to_string(content.task_revision), " with digest ",
                               content.task_digest, ", which that task does not have"}));
        }
        if (content.enabled && (pinned->revision != task->current_revision || !pinned->enabled)) {
          return Conflict(
              "trigger_pin_stale",
              Cat({"an enabled trigger must pin the current enabled revision of task ",
                   content.task_id, " (revision ", std::to_string(task->current_revision),
                   "), not revision ", std::to_string(content.task_revision),
                   pinned->enabled ? "" : ", which is disabled"}));
        }

        if (!head.has_value()) {
          QL_RETURN_IF_ERROR(Execute(*db_,
                                     "INSERT INTO trigger_heads (trigger_id, project_id, task_id, "
                                     "current_revision, created_at_ms, updated_at_ms) "
                                     "VALUES (?, ?, ?, 1, ?, ?)",
                                     cmd.trigger_id, cmd.project_id, content.task_id, cmd.now_ms,
                                     cmd.now_ms));
        } else {
          QL_RETURN_IF_ERROR(ExecuteCas(
              *db_, Conflict("revision_conflict", Cat({"trigger ", cmd.trigger_id, " moved on"})),
              "UPDATE trigger_heads SET current_revision = ?, updated_at_ms = ? "
              "WHERE trigger_id = ? AND current_revision = ?",
              new_revision, cmd.now_ms, cmd.trigger_id, *cmd.expected_revision));
        }
        TriggerRevisionRecord stored = content;
        stored.project_id = cmd.project_id;
        stored.trigger_id = cmd.trigger_id;
        stored.revision = new_revision;
        stored.mutation_id = cmd.mutation_id;
        stored.created_at_ms = cmd.now_ms;
        QL_RETURN_IF_ERROR(
            Execute(*db_,
                    "INSERT INTO trigger_revisions (trigger_id, revision, project_id, "
                    "mutation_id, task_id, task_revision, task_digest, expression, "
                    "timezone, misfire, enabled, content_digest, created_at_ms) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    stored.trigger_id, stored.revision, stored.project_id, stored.mutation_id,
                    stored.task_id, stored.task_revision, stored.task_digest, stored.expression,
                    stored.timezone, stored.misfire, stored.enabled, stored.content_digest,
                    stored.created_at_ms));
        // The schedule row follows the new revision from scratch: the cursor is recomputed from
        // this publication and the bumped state_version kills every decision taken before.
        QL_RETURN_IF_ERROR(Execute(*db_,
                                   "INSERT INTO trigger_schedules (trigger_id, project_id, "
                                   "trigger_revision, next_fire_at_ms, last_scheduled_at_ms, "
                                   "state_version, published_at_ms, exhausted, updated_at_ms) "
                                   "VALUES (?1, ?2, ?3, NULL, NULL, 1, ?4, 0, ?4) "
                                   "ON CONFLICT (trigger_id) DO UPDATE SET "
                                   "trigger_revision = excluded.trigger_revision, "
                                   "next_fire_at_ms = NULL, state_version = state_version + 1, "
                                   "published_at_ms = excluded.published_at_ms, exhausted = 0, "
                                   "updated_at_ms = excluded.updated_at_ms",
                                   stored.trigger_id, stored.project_id, stored.revision,
                                   cmd.now_ms));
        out = PublishTriggerResult{std::move(stored), false};
        return Status();
      }));
  return out;
}

Result<TaskHeadRecord> SqliteStore::GetTaskHead(const std::string& task_id) {
  std::optional<TaskHeadRecord> out;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kRead, "reading a task", [&](Tx&) -> Status {
    QL_ASSIGN_OR_RETURN(out, LoadTaskHead(*db_, task_id));
    return Status();
  }));
  if (!out.has_value())
    return NotFound("task_not_found", Cat({"task ", task_id, " does not exist"}));
  return std::move(*out);
}

Result<TaskRevisionRecord> SqliteStore::GetTaskRevision(const std::string& task_id,
                                                        int64_t revision) {
  std::optional<TaskRevisionRecord> out;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kRead, "reading a task revision", [&](Tx&) -> Status {
    QL_ASSIGN_OR_RETURN(out, LoadTaskRevision(*db_, task_id, revision));
    return Status();
  }));
  if (!out.has_value()) {
    return NotFound("task_revision_not_found",
                    Cat({"task ", task_id, " has no revision ", std::to_string(revision)}));
  }
  return std::move(*out);
}

Result<Page<TaskRevisionRecord>> SqliteStore::ListTasks(const std::string& project_id,
                                                        const PageRequest& page) {
  QL_RETURN_IF_ERROR(RequireLimit("page limit", page.limit));
  std::optional<std::string> after;
  if (page.after_key.has_value()) {
    QL_ASSIGN_OR_RETURN(after, DecodeIdKey("tasks", *page.after_key));
  }
  Page<TaskRevisionRecord> out;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kRead, "listing tasks", [&](Tx&) -> Status {
    static const std::string kSql =
        Cat({"SELECT ", kTaskRevisionColumns,
             " FROM task_heads h JOIN task_revisions tr ON tr.task_id = h.task_id AND "
             "tr.revision = h.current_revision WHERE h.project_id = ?1 AND (?2 IS NULL OR "
             "h.task_id > ?2) ORDER BY h.task_id LIMIT ?3"});
    QL_ASSIGN_OR_RETURN(out.items, QueryAll<TaskRevisionRecord>(*db_, kSql, ReadTaskRevision,
                                                                project_id, after, page.limit + 1));
    return Status();
  }));
  if (out.items.size() > static_cast<size_t>(page.limit)) {
    out.items.resize(page.limit);
    out.next_key = EncodeIdKey("tasks", out.items.back().task_id);
  }
  return out;
}

Result<std::vector<TaskRevisionRecord>> SqliteStore::ListTaskRevisions(const std::string& task_id) {
  std::vector<TaskRevisionRecord> out;
  bool exists = false;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kRead, "listing task revisions", [&](Tx&) -> Status {
    QL_ASSIGN_OR_RETURN(std::optional<TaskHeadRecord> head, LoadTaskHead(*db_, task_id));
    exists = head.has_value();
    static const std::string kSql = Cat({"SELECT ", kTaskRevisionColumns,
                                         " FROM task_revisions tr WHERE tr.task_id = ? "
                                         "ORDER BY tr.revision DESC"});
    QL_ASSIGN_OR_RETURN(out, QueryAll<TaskRevisionRecord>(*db_, kSql, ReadTaskRevision, task_id));
    return Status();
  }));
  if (!exists) return NotFound("task_not_found", Cat({"task ", task_id, " does not exist"}));
  return out;
}

Result<ExecutionRevisionRecord> SqliteStore::GetExecutionRevision(const std::string& id) {
  std::optional<ExecutionRevisionRecord> out;
  QL_RETURN_IF_ERROR(
      db_->Transact(TxMode::kRead, "reading an execution revision", [&](Tx&) -> Status {
        static const std::string kSql =
            Cat({"SELECT ", kExecutionColumns, " FROM execution_revisions e WHERE e.id = ?"});
        QL_ASSIGN_OR_RETURN(out, QueryOne<ExecutionRevisionRecord>(*db_, kSql, ReadExecution, id));
        return Status();
      }));
  if (!out.has_value()) {
    return NotFound("execution_revision_not_found",
                    Cat({"execution revision ", Quote(id), " does not exist"}));
  }
  return std::move(*out);
}

Result<ExecutionRevisionRecord> SqliteStore::FindExecutionRevision(
    const std::string& task_id, int64_t task_revision, const std::string& executor_type) {
  std::optional<ExecutionRevisionRecord> out;
  QL_RETURN_IF_ERROR(
      db_->Transact(TxMode::kRead, "reading an execution revision", [&](Tx&) -> Status {
        static const std::string kSql =
            Cat({"SELECT ", kExecutionColumns,
                 " FROM execution_revisions e WHERE e.task_id = ? AND e.task_revision = ? AND "
                 "e.executor_type = ?"});
        QL_ASSIGN_OR_RETURN(out,
                            QueryOne<ExecutionRevisionRecord>(*db_, kSql, ReadExecution, task_id,
                                                              task_revision, executor_type));
        return Status();
      }));
  if (!out.has_value()) {
    return NotFound("execution_revision_not_found",
                    Cat({"task ", task_id, " revision ", std::to_string(task_revision),
                         " has no execution revision for executor ", Quote(executor_type)}));
  }
  return std::move(*out);
}

Result<TriggerHeadRecord> SqliteStore::GetTriggerHead(const std::string& trigger_id) {
  std::optional<TriggerHeadRecord> out;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kRead, "reading a trigger", [&](Tx&) -> Status {
    QL_ASSIGN_OR_RETURN(out, LoadTriggerHead(*db_, trigger_id));
    return Status();
  }));
  if (!out.has_value()) {
    return NotFound("trigger_not_found", Cat({"trigger ", trigger_id, " does not exist"}));
  }
  return std::move(*out);
}

Result<TriggerRevisionRecord> SqliteStore::GetTriggerRevision(const std::string& trigger_id,
                                                              int64_t revision) {
  std::optional<TriggerRevisionRecord> out;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kRead, "reading a trigger revision", [&](Tx&) -> Status {
    static const std::string kSql =
        Cat({"SELECT ", kTriggerRevisionColumns,
             " FROM trigger_revisions g WHERE g.trigger_id = ? AND g.revision = ?"});
    QL_ASSIGN_OR_RETURN(out, QueryOne<TriggerRevisionRecord>(
                                 *db_, kSql, [](const Stmt& s) { return ReadTriggerRevision(s); },
                                 trigger_id, revision));
    return Status();
  }));
  if (!out.has_value()) {
    return NotFound("trigger_revision_not_found",
                    Cat({"trigger ", trigger_id, " has no revision ", std::to_string(revision)}));
  }
  return std::move(*out);
}

Result<Page<TriggerRevisionRecord>> SqliteStore::ListTriggers(
    const std::string& project_id, const std::optional<std::string>& task_id,
    const PageRequest& page) {
  QL_RETURN_IF_ERROR(RequireLimit("page limit", page.limit));
  std::optional<std::string> after;
  if (page.after_key.has_value()) {
    QL_ASSIGN_OR_RETURN(after, DecodeIdKey("triggers", *page.after_key));
  }
  Page<TriggerRevisionRecord> out;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kRead, "listing triggers", [&](Tx&) -> Status {
    static const std::string kSql =
        Cat({"SELECT ", kTriggerRevisionColumns,
             " FROM trigger_heads th JOIN trigger_revisions g ON g.trigger_id = th.trigger_id AND "
             "g.revision = th.current_revision WHERE th.project_id = ?1 AND (?2 IS NULL OR "
             "th.task_id = ?2) AND (?3 IS NULL OR th.trigger_id > ?3) ORDER BY th.trigger_id "
             "LIMIT ?4"});
    QL_ASSIGN_OR_RETURN(
        out.items, QueryAll<TriggerRevisionRecord>(
                       *db_, kSql, [](const Stmt& s) { return ReadTriggerRevision(s); }, project_id,
                       task_id, after, page.limit + 1));
    return Status();
  }));
  if (out.items.size() > static_cast<size_t>(page.limit)) {
    out.items.resize(page.limit);
    out.next_key = EncodeIdKey("triggers", out.items.back().trigger_id);
  }
  return out;
}

Result<ScheduleRecord> SqliteStore::GetSchedule(const std::string& trigger_id) {
  std::optional<ScheduleRecord> out;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kRead, "reading a schedule", [&](Tx&) -> Status {
    static const std::string kSql =
        Cat({"SELECT ", kScheduleColumns, " FROM trigger_schedules s WHERE s.trigger_id = ?"});
    QL_ASSIGN_OR_RETURN(out,
                        QueryOne<ScheduleRecord>(
                            *db_, kSql, [](const Stmt& s) { return ReadSchedule(s); }, trigger_id));
    return Status();
  }));
  if (!out.has_value()) {
    return NotFound("schedule_not_found", Cat({"trigger ", trigger_id, " has no schedule"}));
  }
  return std::move(*out);
}

Result<int64_t> SqliteStore::CountEnabledTriggers() {
  int64_t out = 0;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kRead, "counting triggers", [&](Tx&) -> Status {
    QL_ASSIGN_OR_RETURN(
        std::optional<int64_t> count,
        QueryOne<int64_t>(*db_,
                          "SELECT count(*) FROM trigger_heads th JOIN trigger_revisions g ON "
                          "g.trigger_id = th.trigger_id AND g.revision = th.current_revision "
                          "JOIN projects p ON p.id = th.project_id "
                          "WHERE g.enabled = 1 AND p.status = 'active'",
                          [](const Stmt& s) { return s.Int(0); }));
    out = count.value_or(0);
    return Status();
  }));
  return out;
}

// ---------------------------------------------------------------------------------------------
// Schedules

Result<std::vector<DueSchedule>> SqliteStore::ListDueSchedules(int64_t now_ms, int limit) {
  QL_RETURN_IF_ERROR(RequireLimit("due schedule limit", limit));
  std::vector<DueSchedule> out;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kRead, "listing due schedules", [&](Tx&) -> Status {
    static const std::string kSql =
        Cat({"SELECT ", kScheduleColumns, ", ", kTriggerRevisionColumns, kEligibleSchedules,
             " AND (s.next_fire_at_ms IS NULL OR s.next_fire_at_ms <= ?)"
             " ORDER BY s.next_fire_at_ms, s.project_id, s.trigger_id LIMIT ?"});
    QL_ASSIGN_OR_RETURN(out,
                        QueryAll<DueSchedule>(
                            *db_, kSql,
                            [](const Stmt& s) {
                              return DueSchedule{ReadSchedule(s, 0), ReadTriggerRevision(s, 9)};
                            },
                            now_ms, limit));
    return Status();
  }));
  return out;
}

Result<std::optional<int64_t>> SqliteStore::EarliestDueAt() {
  std::optional<int64_t> out;
  QL_RETURN_IF_ERROR(
      db_->Transact(TxMode::kRead, "reading the earliest due time", [&](Tx&) -> Status {
        static const std::string kSql =
            Cat({"SELECT min(coalesce(s.next_fire_at_ms, 0))", kEligibleSchedules});
        QL_ASSIGN_OR_RETURN(std::optional<std::optional<int64_t>> row,
                            QueryOne<std::optional<int64_t>>(
                                *db_, kSql, [](const Stmt& s) { return s.OptInt(0); }));
        out = row.has_value() ? *row : std::nullopt;
        return Status();
      }));
  return out;
}

Result<AdvanceOutcome> SqliteStore::ApplyScheduleAdvance(const ScheduleAdvance& advance) {
  QL_RETURN_IF_ERROR(ValidateId("trigger_id", advance.trigger_id));
  QL_RETURN_IF_ERROR(
      RequireRevision("expected_trigger_revision", advance.expected_trigger_revision));
  QL_RETURN_IF_ERROR(RequireRevision("expected_task_revision", advance.expected_task_revision));
  QL_RETURN_IF_ERROR(RequireDigest("expected_task_digest", advance.expected_task_digest));
  if (!advance.exhausted && !advance.new_next_fire_at_ms.has_value()) {
    return InvalidArgument("invalid_schedule_advance",
                           "a schedule advance must set the new cursor unless it is exhausted");
  }
  if (advance.run.has_value()) {
    const NewRun& run = *advance.run;
    QL_RETURN_IF_ERROR(ValidateNewRun(run));
    // The admitted occurrence is exactly the cursor the decision read, under its own key.
    if (run.trigger_type != TriggerTypeName(TriggerType::kCron) ||
        run.trigger_id != advance.trigger_id ||
        run.trigger_revision != advance.expected_trigger_revision ||
        run.task_revision != advance.expected_task_revision ||
        run.task_digest != advance.expected_task_digest ||
        !advance.expected_next_fire_at_ms.has_value() ||
        run.scheduled_for_ms != advance.expected_next_fire_at_ms) {
      return InvalidArgument("invalid_schedule_advance",
                             "an admitted run must be a cron run of the advanced trigger revision, "
                             "its pinned task revision and digest, scheduled for the expected "
                             "cursor");
    }
    const std::string key = CronIdempotencyKey(
        advance.trigger_id, advance.expected_trigger_revision, *advance.expected_next_fire_at_ms);
    if (run.idempotency_key != key) {
      return InvalidArgument(std::string(kReasonInvalidIdempotencyKey),
                             Cat({"a cron run must carry idempotency key ", key}));
    }
  }

  AdvanceOutcome out = AdvanceOutcome::kRaced;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kWrite, "advancing a schedule", [&](Tx& tx) -> Status {
    out = AdvanceOutcome::kRaced;
    // Everything the decision was based on, read again under the write lock.
    static const std::string kState =
        "SELECT s.project_id, s.trigger_revision, s.state_version, s.next_fire_at_ms, "
        "s.exhausted, p.status, th.current_revision, g.enabled, g.task_id, g.task_revision, "
        "g.task_digest, h.current_revision, tr.enabled, tr.content_digest "
        "FROM trigger_schedules s "
        "JOIN projects p ON p.id = s.project_id "
        "JOIN trigger_heads th ON th.trigger_id = s.trigger_id "
        "JOIN trigger_revisions g ON g.trigger_id = s.trigger_id AND "
        "g.revision = s.trigger_revision "
        "JOIN task_heads h ON h.task_id = g.task_id "
        "JOIN task_revisions tr ON tr.task_id = h.task_id AND tr.revision = h.current_revision "
        "WHERE s.trigger_id = ?";
    std::string project_id;
    std::string task_id;
    bool unchanged = false;
    {
      QL_ASSIGN_OR_RETURN(Stmt state, db_->Prepare(kState));
      state.BindAll(advance.trigger_id);
      QL_ASSIGN_OR_RETURN(bool found, state.Step());
      if (!found) {
        return NotFound("schedule_not_found",
                        Cat({"trigger ", advance.trigger_id, " has no schedule"}));
      }
      project_id = state.Text(0);
      task_id = state.Text(8);
      unchanged = state.Int(1) == advance.expected_trigger_revision &&
                  state.Int(2) == advance.expected_state_version &&
                  state.OptInt(3) == advance.expected_next_fire_at_ms && state.Int(4) == 0 &&
                  state.Text(5) == kProjectActive &&
                  state.Int(6) == advance.expected_trigger_revision && state.Int(7) == 1 &&
                  state.Int(9) == advance.expected_task_revision &&
                  state.Text(10) == advance.expected_task_digest &&
                  state.Int(11) == advance.expected_task_revision && state.Int(12) == 1 &&
                  state.Text(13) == advance.expected_task_digest;
    }
    if (!unchanged) {
      tx.RollbackOnly();
      return Status();
    }

    std::optional<int64_t> last_scheduled;
    if (advance.run.has_value()) {
      const NewRun& run = *advance.run;
      if (run.project_id != project_id || run.task_id != task_id) {
        return InvalidArgument("invalid_schedule_advance",
                               Cat({"the admitted run must belong to project ", project_id,
                                    " and task ", task_id, " of trigger ", advance.trigger_id}));
      }
      QL_ASSIGN_OR_RETURN(bool exec_ok, ExecutionRevisionMatches(*db_, run));
      QL_ASSIGN_OR_RETURN(
          std::optional<int64_t> taken,
          QueryOne<int64_t>(
              *db_, "SELECT 1 FROM runs WHERE project_id = ? AND idempotency_key = ?",
              [](const Stmt& s) { return s.Int(0); }, run.project_id, *run.idempotency_key));
      if (!exec_ok || taken.has_value()) {
        tx.RollbackOnly();
        return Status();
      }
      Status inserted = InsertQueuedRun(*db_, run);
      if (inserted.reason() == "idempotency_key_duplicate") {
        tx.RollbackOnly();
        return Status();
      }
      QL_RETURN_IF_ERROR(inserted);
      last_scheduled = run.scheduled_for_ms;
    }
    Status cas = ExecuteCas(*db_, Conflict("schedule_raced", "the schedule row moved on"),
                            "UPDATE trigger_schedules SET next_fire_at_ms = ?, exhausted = ?, "
                            "last_scheduled_at_ms = coalesce(?, last_scheduled_at_ms), "
                            "state_version = state_version + 1, updated_at_ms = ? "
                            "WHERE trigger_id = ? AND state_version = ?",
                            advance.new_next_fire_at_ms, advance.exhausted, last_scheduled,
                            advance.now_ms, advance.trigger_id, advance.expected_state_version);
    if (cas.reason() == "schedule_raced") {
      tx.RollbackOnly();
      return Status();
    }
    QL_RETURN_IF_ERROR(cas);
    out = AdvanceOutcome::kApplied;
    return Status();
  }));
  return out;
}

// ---------------------------------------------------------------------------------------------
// Runs

Result<RunRecord> SqliteStore::CreateRun(const NewRun& run) {
  QL_RETURN_IF_ERROR(ValidateNewRun(run));
  if (run.trigger_type == TriggerTypeName(TriggerType::kCron)) {
    return InvalidArgument("invalid_trigger_type",
                           "cron runs are admitted only through a schedule advance");
  }
  RunRecord out;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kWrite, "creating a run", [&](Tx&) -> Status {
    QL_RETURN_IF_ERROR(Fence(run.fence, run.project_id));
    QL_RETURN_IF_ERROR(RequireActiveProject(*db_, run.project_id));
    QL_ASSIGN_OR_RETURN(std::optional<TaskHeadRecord> head, LoadTaskHead(*db_, run.task_id));
    if (!head.has_value() || head->project_id != run.project_id) {
      return NotFound("task_not_found",
                      Cat({"task ", run.task_id, " does not exist in project ", run.project_id}));
    }
    QL_ASSIGN_OR_RETURN(std::optional<TaskRevisionRecord> current,
                        LoadTaskRevision(*db_, run.task_id, head->current_revision));
    if (head->current_revision != run.task_revision || !current.has_value() || !current->enabled ||
        current->content_digest != run.task_digest) {
      return Conflict(
          "task_revision_not_current",
          Cat({"task ", run.task_id, " revision ", std::to_string(run.task_revision),
               " with digest ", run.task_digest, " is not the task's current enabled revision (",
               std::to_string(head->current_revision), ")"}));
    }
    QL_ASSIGN_OR_RETURN(bool exec_ok, ExecutionRevisionMatches(*db_, run));
    if (!exec_ok) {
      return Conflict("execution_revision_missing",
                      Cat({"execution revision ", Quote(run.execution_revision_id), " of task ",
                           run.task_id, " revision ", std::to_string(run.task_revision),
                           " for executor ", run.executor_type, " does not exist"}));
    }
    if (run.retry_of_run_id.has_value()) {
      QL_ASSIGN_OR_RETURN(std::optional<RunRecord> original, LoadRun(*db_, *run.retry_of_run_id));
      if (!original.has_value()) {
        return NotFound("run_not_found",
                        Cat({"run ", *run.retry_of_run_id, " to retry does not exist"}));
      }
    }
    QL_RETURN_IF_ERROR(InsertQueuedRun(*db_, run));
    QL_ASSIGN_OR_RETURN(out, RequireRun(*db_, run.run_id));
    return Status();
  }));
  return out;
}

Result<RunRecord> SqliteStore::GetRun(const std::string& run_id) {
  RunRecord out;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kRead, "reading a run", [&](Tx&) -> Status {
    QL_ASSIGN_OR_RETURN(out, RequireRun(*db_, run_id));
    return Status();
  }));
  return out;
}

Result<RunRecord> SqliteStore::FindRunByIdempotencyKey(const std::string& project_id,
                                                       const std::string& key) {
  std::optional<RunRecord> out;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kRead, "reading a run", [&](Tx&) -> Status {
    static const std::string kSql = Cat(
        {"SELECT ", kRunColumns, kRunFrom, " WHERE r.project_id = ? AND r.idempotency_key = ?"});
    QL_ASSIGN_OR_RETURN(out, QueryOne<RunRecord>(*db_, kSql, ReadRun, project_id, key));
    return Status();
  }));
  if (!out.has_value()) {
    return NotFound("run_not_found",
                    Cat({"project ", project_id, " has no run with idempotency key ", Quote(key)}));
  }
  return std::move(*out);
}

Result<Page<RunRecord>> SqliteStore::ListRuns(const RunFilter& filter, const PageRequest& page) {
  QL_RETURN_IF_ERROR(RequireLimit("page limit", page.limit));
  if (filter.status.has_value() && !ParseRunStatus(*filter.status).has_value()) {
    return InvalidArgument("invalid_status",
                           Cat({"run status filter ", Quote(*filter.status), " is not a status"}));
  }
  std::optional<RunPosition> after;
  if (page.after_key.has_value()) {
    QL_ASSIGN_OR_RETURN(after, DecodeRunKey(*page.after_key));
  }
  // One statement text per filter combination, each able to walk its index backwards.
  std::string sql = Cat({"SELECT ", kRunColumns, kRunFrom, " WHERE 1 = 1"});
  if (filter.project_id.has_value()) sql += " AND r.project_id = ?";
  if (filter.task_id.has_value()) sql += " AND r.task_id = ?";
  if (filter.trigger_id.has_value()) sql += " AND r.trigger_id = ?";
  if (filter.status.has_value()) sql += " AND r.status = ?";
  if (after.has_value()) sql += " AND (r.created_at_ms, r.id) < (?, ?)";
  sql += " ORDER BY r.created_at_ms DESC, r.id DESC LIMIT ?";

  Page<RunRecord> out;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kRead, "listing runs", [&](Tx&) -> Status {
    QL_ASSIGN_OR_RETURN(Stmt stmt, db_->Prepare(sql));
    int index = 0;
    if (filter.project_id.has_value()) stmt.Bind(++index, *filter.project_id);
    if (filter.task_id.has_value()) stmt.Bind(++index, *filter.task_id);
    if (filter.trigger_id.has_value()) stmt.Bind(++index, *filter.trigger_id);
    if (filter.status.has_value()) stmt.Bind(++index, *filter.status);
    if (after.has_value()) {
      stmt.Bind(++index, after->created_at_ms);
      stmt.Bind(++index, after->id);
    }
    stmt.Bind(++index, page.limit + 1);
    out.items.clear();
    for (;;) {
      QL_ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) break;
      out.items.push_back(ReadRun(stmt));
    }
    return Status();
  }));
  if (out.items.size() > static_cast<size_t>(page.limit)) {
    out.items.resize(page.limit);
    out.next_key = EncodeRunKey(out.items.back());
  }
  return out;
}

Result<std::vector<AttemptRecord>> SqliteStore::ListAttempts(const std::string& run_id) {
  std::vector<AttemptRecord> out;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kRead, "listing attempts", [&](Tx&) -> Status {
    QL_RETURN_IF_ERROR(RequireRun(*db_, run_id).status());
    static const std::string kSql = Cat(
        {"SELECT ", kAttemptColumns, " FROM run_attempts a WHERE a.run_id = ? ORDER BY a.attempt"});
    QL_ASSIGN_OR_RETURN(out, QueryAll<AttemptRecord>(*db_, kSql, ReadAttempt, run_id));
    return Status();
  }));
  return out;
}

Result<std::vector<EventRecord>> SqliteStore::ListEvents(const std::string& run_id,
                                                         int64_t after_sequence, int limit) {
  QL_RETURN_IF_ERROR(RequireLimit("event limit", limit));
  std::vector<EventRecord> out;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kRead, "listing events", [&](Tx&) -> Status {
    QL_RETURN_IF_ERROR(RequireRun(*db_, run_id).status());
    static const std::string kSql =
        Cat({"SELECT ", kEventColumns,
             " FROM run_events ev WHERE ev.run_id = ? AND ev.sequence > ? ORDER BY ev.sequence "
             "LIMIT ?"});
    QL_ASSIGN_OR_RETURN(
        out, QueryAll<EventRecord>(*db_, kSql, ReadEvent, run_id, after_sequence, limit));
    return Status();
  }));
  return out;
}

Result<RunRecord> SqliteStore::ApplyTransition(const RunTransitionCommand& t) {
  QL_RETURN_IF_ERROR(ValidateId("run_id", t.run_id));
  if (t.lease.has_value()) {
    return InvalidArgument("lease_unsupported",
                           "the embedded store runs attempts locally and has no worker leases");
  }
  std::optional<RunStatus> run_to;
  if (t.run_to.has_value()) {
    run_to = ParseRunStatus(*t.run_to);
    if (!run_to.has_value()) {
      return InvalidArgument("invalid_status",
                             Cat({"run_to ", Quote(*t.run_to), " is not a run status"}));
    }
  }
  std::optional<AttemptStatus> attempt_to;
  if (t.attempt_to.has_value()) {
    attempt_to = ParseAttemptStatus(*t.attempt_to);
    if (!attempt_to.has_value()) {
      return InvalidArgument("invalid_status", Cat({"attempt_to ", Quote(*t.attempt_to),
                                                    " is not an attempt status"}));
    }
  }
  std::optional<AttemptStatus> expected_attempt;
  if (t.expected_attempt_status.has_value()) {
    expected_attempt = ParseAttemptStatus(*t.expected_attempt_status);
    if (!expected_attempt.has_value()) {
      return InvalidArgument("invalid_status",
                             Cat({"expected_attempt_status ", Quote(*t.expected_attempt_status),
                                  " is not an attempt status"}));
    }
  }
  const bool attempt_fields = t.pid.has_value() || t.process_start_ticks.has_value() ||
                              t.log_path.has_value() || t.attempt_started_at_ms.has_value() ||
                              t.attempt_finished_at_ms.has_value() ||
                              t.attempt_exit_code.has_value() || t.attempt_error_code.has_value() ||
                              t.attempt_error_summary.has_value();
  if ((attempt_to.has_value() || expected_attempt.has_value() || attempt_fields) &&
      !t.attempt_id.has_value()) {
    return InvalidArgument("attempt_id_required",
                           "an attempt status or attempt field update needs attempt_id");
  }
  if (t.attempt_id.has_value()) QL_RETURN_IF_ERROR(ValidateId("attempt_id", *t.attempt_id));
  if (attempt_to.has_value() && !expected_attempt.has_value()) {
    return InvalidArgument("expected_attempt_status_required",
                           "an attempt status change needs expected_attempt_status");
  }
  if (t.new_attempt_id.has_value()) {
    QL_RETURN_IF_ERROR(ValidateId("new_attempt_id", *t.new_attempt_id));
    if (run_to != RunStatus::kQueued) {
      return InvalidArgument("invalid_transition",
                             "a new attempt is added only when the run moves back to queued");
    }
  }
  if (run_to == RunStatus::kRetryWait && !t.retry_at_ms.has_value()) {
    return InvalidArgument("retry_at_required", "a move to retry_wait needs retry_at_ms");
  }
  QL_ASSIGN_OR_RETURN(std::vector<PreparedEvent> events, PrepareEvents(t.events));

  RunRecord out;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kWrite, "applying a run transition", [&](Tx&) -> Status {
    QL_ASSIGN_OR_RETURN(RunRecord run, RequireRun(*db_, t.run_id));
    const Status version_conflict = Conflict(
        "version_conflict", Cat({"run ", run.id, " is at version ", std::to_string(run.version),
                                 ", not the expected ", std::to_string(t.expected_version)}));
    if (run.version != t.expected_version) return version_conflict;
    QL_ASSIGN_OR_RETURN(RunStatus from, StoredRunStatus(run));
    const Status cancel_wins =
        Conflict("cancel_requested",
                 Cat({"run ", run.id, " has a cancel request; it can only stop as cancelled"}));
    if (run_to.has_value()) {
      QL_RETURN_IF_ERROR(CheckRunTransition(from, *run_to));
      if (run.cancel_requested_at_ms.has_value() && IsCancelBlocked(*run_to)) return cancel_wins;
    } else if (IsTerminal(from)) {
      return Conflict("run_terminal",
                      Cat({"run ", run.id, " is ", run.status, "; finished runs never change"}));
    }

    if (t.attempt_id.has_value()) {
      QL_ASSIGN_OR_RETURN(std::optional<AttemptRecord> attempt, LoadAttempt(*db_, *t.attempt_id));
      if (!attempt.has_value() || attempt->run_id != run.id) {
        return NotFound("attempt_not_found",
                        Cat({"run ", run.id, " has no attempt ", *t.attempt_id}));
      }
      QL_ASSIGN_OR_RETURN(AttemptStatus current, StoredAttemptStatus(*attempt));
      const Status status_conflict =
          Conflict("attempt_status_conflict",
                   Cat({"attempt ", attempt->id, " is ", attempt->status, ", not the expected ",
                        t.expected_attempt_status.value_or(attempt->status)}));
      if (expected_attempt.has_value() && *expected_attempt != current) return status_conflict;
      if (attempt_to.has_value()) {
        QL_RETURN_IF_ERROR(CheckAttemptTransition(current, *attempt_to));
        if (run.cancel_requested_at_ms.has_value() && IsCancelBlocked(*attempt_to)) {
          return cancel_wins;
        }
      } else if (IsTerminal(current) && attempt_fields) {
        return Conflict("attempt_terminal", Cat({"attempt ", attempt->id, " is ", attempt->status,
                                                 "; finished attempts never change"}));
      }
      if (attempt_to.has_value() || attempt_fields) {
        const AttemptStatus next = attempt_to.value_or(current);
        std::optional<int64_t> finished = t.attempt_finished_at_ms;
        if (attempt_to.has_value() && IsTerminal(*attempt_to) && !finished.has_value()) {
          finished = t.now_ms;
        }
        static const std::string kUpdateAttempt =
            "UPDATE run_attempts SET status = ?, pid = coalesce(?, pid), "
            "process_start_ticks = coalesce(?, process_start_ticks), "
            "log_path = coalesce(?, log_path), started_at_ms = coalesce(?, started_at_ms), "
            "finished_at_ms = coalesce(?, finished_at_ms), exit_code = coalesce(?, exit_code), "
            "error_code = coalesce(?, error_code), error_summary = coalesce(?, error_summary) "
            "WHERE id = ? AND run_id = ? AND status = ?";
        QL_RETURN_IF_ERROR(
            ExecuteCas(*db_, status_conflict, kUpdateAttempt, AttemptStatusName(next), t.pid,
                       t.process_start_ticks, t.log_path, t.attempt_started_at_ms, finished,
                       t.attempt_exit_code, t.attempt_error_code, t.attempt_error_summary,
                       attempt->id, run.id, AttemptStatusName(current)));
      }
    }

    if (t.new_attempt_id.has_value()) {
      QL_ASSIGN_OR_RETURN(std::optional<AttemptRecord> latest, LoadLatestAttempt(*db_, run.id));
      if (!latest.has_value()) {
        return Corrupt("run_without_attempt", Cat({"run ", run.id, " has no attempt"}));
      }
      QL_ASSIGN_OR_RETURN(AttemptStatus latest_status, StoredAttemptStatus(*latest));
      if (!IsTerminal(latest_status)) {
        return Conflict("attempt_not_terminal",
                        Cat({"attempt ", std::to_string(latest->attempt), " of run ", run.id,
                             " is still ", latest->status}));
      }
      if (latest->attempt + 1 > run.retry_policy.max_attempts) {
        return Conflict("retry_attempts_exhausted",
                        Cat({"run ", run.id, " has used all ",
                             std::to_string(run.retry_policy.max_attempts), " attempts"}));
      }
      QL_RETURN_IF_ERROR(Execute(*db_,
                                 "INSERT INTO run_attempts (id, run_id, attempt, status, "
                                 "executor_type, callback_sequence, created_at_ms) "
                                 "VALUES (?, ?, ?, 'claimed', ?, 0, ?)",
                                 *t.new_attempt_id, run.id, latest->attempt + 1,
                                 latest->executor_type, t.now_ms));
    }

    int64_t sequence = run.event_sequence;
    for (const PreparedEvent& event : events) {
      QL_RETURN_IF_ERROR(
          InsertEvent(*db_, run.id, ++sequence, *event.event, event.payload, t.now_ms));
    }

    const RunStatus next = run_to.value_or(from);
    std::optional<int64_t> queued_at;
    if (run_to == RunStatus::kQueued) queued_at = t.now_ms;
    std::optional<int64_t> finished = t.finished_at_ms;
    if (run_to.has_value() && IsTerminal(*run_to) && !finished.has_value()) finished = t.now_ms;
    static const std::string kUpdateRun =
        "UPDATE runs SET status = ?, version = version + 1, event_sequence = ?, "
        "queued_at_ms = coalesce(?, queued_at_ms), started_at_ms = coalesce(?, started_at_ms), "
        "finished_at_ms = coalesce(?, finished_at_ms), retry_at_ms = coalesce(?, retry_at_ms), "
        "exit_code = coalesce(?, exit_code), error_code = coalesce(?, error_code), "
        "error_summary = coalesce(?, error_summary) WHERE id = ? AND version = ?";
    QL_RETURN_IF_ERROR(ExecuteCas(*db_, version_conflict, kUpdateRun, RunStatusName(next), sequence,
                                  queued_at, t.started_at_ms, finished, t.retry_at_ms, t.exit_code,
                                  t.error_code, t.error_summary, run.id, t.expected_version));
    QL_ASSIGN_OR_RETURN(out, RequireRun(*db_, run.id));
    return Status();
  }));
  return out;
}

Result<EventRecord> SqliteStore::AppendEvent(const std::string& run_id, const NewEvent& event,
                                             int64_t now_ms) {
  QL_RETURN_IF_ERROR(ValidateId("run_id", run_id));
  const std::vector<NewEvent> one = {event};
  QL_ASSIGN_OR_RETURN(std::vector<PreparedEvent> prepared, PrepareEvents(one));
  EventRecord out;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kWrite, "appending an event", [&](Tx&) -> Status {
    QL_ASSIGN_OR_RETURN(RunRecord run, RequireRun(*db_, run_id));
    const int64_t sequence = run.event_sequence + 1;
    QL_RETURN_IF_ERROR(
        InsertEvent(*db_, run.id, sequence, event, prepared.front().payload, now_ms));
    QL_RETURN_IF_ERROR(ExecuteCas(
        *db_, Conflict("event_sequence_conflict", Cat({"run ", run.id, " gained an event"})),
        "UPDATE runs SET event_sequence = ? WHERE id = ? AND event_sequence = ?", sequence, run.id,
        run.event_sequence));
    out = EventRecord{run.id,
                      sequence,
                      event.type,
                      event.actor_type,
                      event.attempt_id,
                      event.dedupe_key,
                      prepared.front().payload,
                      now_ms};
    return Status();
  }));
  return out;
}

Result<RunRecord> SqliteStore::RequestCancel(const std::string& run_id, const std::string& reason,
                                             std::string actor_type, int64_t now_ms,
                                             const std::optional<PolicyFence>& fence) {
  QL_RETURN_IF_ERROR(ValidateId("run_id", run_id));
  QL_RETURN_IF_ERROR(RequireActorType(actor_type));
  QL_ASSIGN_OR_RETURN(std::string reason_json, CanonicalOf(nlohmann::json{{"reason", reason}}));
  QL_ASSIGN_OR_RETURN(std::string payload,
                      CanonicalEventPayload(kEventRunCancelRequested, reason_json));
  RunRecord out;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kWrite, "requesting a cancel", [&](Tx&) -> Status {
    QL_ASSIGN_OR_RETURN(RunRecord run, RequireRun(*db_, run_id));
    QL_RETURN_IF_ERROR(FenceAnyStatus(fence, run.project_id));
    if (run.cancel_requested_at_ms.has_value()) {  // the first intent wins
      out = std::move(run);
      return Status();
    }
    QL_ASSIGN_OR_RETURN(RunStatus from, StoredRunStatus(run));
    if (IsTerminal(from)) {
      return Conflict("run_terminal",
                      Cat({"run ", run.id, " is ", run.status, "; there is nothing to cancel"}));
    }
    int64_t sequence = run.event_sequence;
    const NewEvent requested{std::string(kEventRunCancelRequested), actor_type, std::nullopt,
                             std::nullopt, payload};
    QL_RETURN_IF_ERROR(InsertEvent(*db_, run.id, ++sequence, requested, payload, now_ms));

    RunStatus next = from;
    std::optional<int64_t> finished;
    if (from == RunStatus::kCreated || from == RunStatus::kQueued ||
        from == RunStatus::kRetryWait) {
      // Not started: nothing will observe the intent later, so the run stops here.
      QL_ASSIGN_OR_RETURN(std::optional<AttemptRecord> latest, LoadLatestAttempt(*db_, run.id));
      if (latest.has_value()) {
        QL_ASSIGN_OR_RETURN(AttemptStatus current, StoredAttemptStatus(*latest));
        if (!IsTerminal(current)) {
          QL_RETURN_IF_ERROR(CheckAttemptTransition(current, AttemptStatus::kCancelled));
          QL_RETURN_IF_ERROR(ExecuteCas(
              *db_, Conflict("attempt_status_conflict", Cat({"attempt ", latest->id, " moved on"})),
              "UPDATE run_attempts SET status = 'cancelled', "
              "finished_at_ms = coalesce(finished_at_ms, ?) WHERE id = ? AND status = ?",
              now_ms, latest->id, AttemptStatusName(current)));
          const NewEvent cancelled{AttemptEventType(AttemptStatus::kCancelled), actor_type,
                                   latest->id, std::nullopt, "{}"};
          QL_RETURN_IF_ERROR(InsertEvent(*db_, run.id, ++sequence, cancelled, "{}", now_ms));
        }
      }
      QL_RETURN_IF_ERROR(CheckRunTransition(from, RunStatus::kCancelled));
      next = RunStatus::kCancelled;
      finished = now_ms;
      const NewEvent cancelled{RunEventType(RunStatus::kCancelled), actor_type, std::nullopt,
                               std::nullopt, "{}"};
      QL_RETURN_IF_ERROR(InsertEvent(*db_, run.id, ++sequence, cancelled, "{}", now_ms));
    }
    QL_RETURN_IF_ERROR(
        ExecuteCas(*db_, Conflict("version_conflict", Cat({"run ", run.id, " moved on"})),
                   "UPDATE runs SET status = ?, version = version + 1, event_sequence = ?, "
                   "cancel_requested_at_ms = ?, cancel_reason = ?, "
                   "finished_at_ms = coalesce(?, finished_at_ms) WHERE id = ? AND version = ?",
                   RunStatusName(next), sequence, now_ms, reason, finished, run.id, run.version));
    QL_ASSIGN_OR_RETURN(out, RequireRun(*db_, run.id));
    return Status();
  }));
  return out;
}

namespace {

// Joins each run with its retry policy and its latest attempt as `a`.
constexpr char kWithPolicyAndLatestAttempt[] =
    " JOIN run_retry_policies rp ON rp.run_id = r.id"
    " JOIN run_attempts a ON a.run_id = r.id"
    " AND a.attempt = (SELECT max(x.attempt) FROM run_attempts x WHERE x.run_id = r.id)";

}  // namespace

Result<std::vector<RunRecord>> SqliteStore::ListDispatchable(const std::string& executor_type,
                                                             int limit) {
  QL_RETURN_IF_ERROR(RequireExecutorType(executor_type));
  QL_RETURN_IF_ERROR(RequireLimit("dispatch limit", limit));
  std::vector<RunRecord> out;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kRead, "listing dispatchable runs", [&](Tx&) -> Status {
    static const std::string kSql =
        // The partial index holds exactly the queued rows in dispatch order: nothing to sort.
        Cat({"SELECT ", kRunColumns, " FROM runs r INDEXED BY runs_dispatchable",
             kWithPolicyAndLatestAttempt,
             " WHERE r.status = 'queued' AND r.cancel_requested_at_ms IS NULL"
             " AND a.status = 'claimed' AND a.executor_type = ?"
             // An archived project's queue is cancelled, never dispatched.
             " AND EXISTS (SELECT 1 FROM projects p WHERE p.id = r.project_id"
             " AND p.status = 'active')"
             " ORDER BY r.priority DESC, r.queued_at_ms, r.id LIMIT ?"});
    QL_ASSIGN_OR_RETURN(out, QueryAll<RunRecord>(*db_, kSql, ReadRun, executor_type, limit));
    return Status();
  }));
  return out;
}

Result<std::vector<RunRecord>> SqliteStore::ListActive() {
  std::vector<RunRecord> out;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kRead, "listing active runs", [&](Tx&) -> Status {
    static const std::string kSql = Cat({"SELECT ", kRunColumns, kRunFrom,
                                         " WHERE r.status IN ('dispatching', 'running', 'lost')"
                                         " ORDER BY r.created_at_ms, r.id"});
    QL_ASSIGN_OR_RETURN(out, QueryAll<RunRecord>(*db_, kSql, ReadRun));
    return Status();
  }));
  return out;
}

Result<std::vector<RunRecord>> SqliteStore::ListRetryDue(int64_t now_ms, int limit) {
  QL_RETURN_IF_ERROR(RequireLimit("retry limit", limit));
  std::vector<RunRecord> out;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kRead, "listing retry-due runs", [&](Tx&) -> Status {
    static const std::string kSql = Cat({"SELECT ", kRunColumns,
                                         " FROM runs r INDEXED BY runs_retry_due"
                                         " JOIN run_retry_policies rp ON rp.run_id = r.id"
                                         " WHERE r.status = 'retry_wait' AND r.retry_at_ms <= ?"
                                         " ORDER BY r.retry_at_ms, r.id LIMIT ?"});
    QL_ASSIGN_OR_RETURN(out, QueryAll<RunRecord>(*db_, kSql, ReadRun, now_ms, limit));
    return Status();
  }));
  return out;
}

Result<std::vector<std::pair<std::string, int64_t>>> SqliteStore::CountRunsByStatus() {
  std::vector<std::pair<std::string, int64_t>> out;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kRead, "counting runs", [&](Tx&) -> Status {
    QL_ASSIGN_OR_RETURN(
        out, (QueryAll<std::pair<std::string, int64_t>>(
                 *db_, "SELECT status, count(*) FROM runs GROUP BY status ORDER BY status",
                 [](const Stmt& s) { return std::make_pair(s.Text(0), s.Int(1)); })));
    return Status();
  }));
  return out;
}

}  // namespace ql
