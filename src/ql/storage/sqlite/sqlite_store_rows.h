#pragma once

// Row readers, column lists and row helpers shared by the SQLite store's files (internal to the
// adapter). Callers hold the connection inside a transaction.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ql/core/ports.h"
#include "ql/core/status.h"
#include "ql/storage/sqlite/sqlite_db.h"

namespace ql::sqlite {

// ---------------------------------------------------------------------------------------------
// Row readers. Column lists and readers are kept side by side so they cannot drift apart.

inline constexpr char kProjectColumns[] =
    "p.id, p.slug, p.name, p.status, p.version, p.created_at_ms, p.updated_at_ms";

ProjectRecord ReadProject(const Stmt& s);

inline constexpr char kTaskHeadColumns[] =
    "h.project_id, h.task_id, h.current_revision, h.created_at_ms, h.updated_at_ms, h.name, "
    "h.deleted_at_ms";

TaskHeadRecord ReadTaskHead(const Stmt& s);

inline constexpr char kTaskRevisionColumns[] =
    "tr.project_id, tr.task_id, tr.revision, tr.mutation_id, tr.name, tr.kind, tr.spec_json, "
    "tr.labels_json, tr.enabled, tr.content_digest, tr.created_at_ms, tr.approval_json, "
    "tr.concurrency, tr.published_by";

TaskRevisionRecord ReadTaskRevision(const Stmt& s);

inline constexpr char kExecutionColumns[] =
    "e.id, e.project_id, e.task_id, e.task_revision, e.task_digest, e.executor_type, e.plan_json, "
    "e.plan_digest, e.created_at_ms";

ExecutionRevisionRecord ReadExecution(const Stmt& s);

inline constexpr char kTriggerHeadColumns[] =
    "th.project_id, th.trigger_id, th.task_id, th.current_revision, th.created_at_ms, "
    "th.updated_at_ms, th.name, th.deleted_at_ms";

TriggerHeadRecord ReadTriggerHead(const Stmt& s);

inline constexpr char kTriggerRevisionColumns[] =
    "g.project_id, g.trigger_id, g.revision, g.mutation_id, g.task_id, g.task_revision, "
    "g.task_digest, g.expression, g.timezone, g.misfire, g.enabled, g.content_digest, "
    "g.created_at_ms, g.overlap, g.jitter_ms";
inline constexpr int kTriggerRevisionColumnCount = 15;

TriggerRevisionRecord ReadTriggerRevision(const Stmt& s, int c = 0);

inline constexpr char kScheduleColumns[] =
    "s.project_id, s.trigger_id, s.trigger_revision, s.next_fire_at_ms, s.last_scheduled_at_ms, "
    "s.state_version, s.published_at_ms, s.exhausted, s.updated_at_ms";

ScheduleRecord ReadSchedule(const Stmt& s, int c = 0);

inline constexpr char kRunColumns[] =
    "r.id, r.project_id, r.task_id, r.task_revision, r.task_digest, r.execution_revision_id, "
    "r.trigger_id, r.trigger_revision, r.scheduled_for_ms, r.trigger_type, r.status, r.version, "
    "r.event_sequence, r.priority, r.idempotency_key, r.retry_of_run_id, r.created_at_ms, "
    "r.queued_at_ms, r.started_at_ms, r.finished_at_ms, r.retry_at_ms, "
    "r.cancel_requested_at_ms, r.cancel_reason, r.error_code, r.error_summary, r.exit_code, "
    "rp.max_attempts, rp.retry_on_lost, rp.safety, rp.backoff_base_ms, rp.backoff_max_ms, "
    "rp.retry_on_timeout";
inline constexpr char kRunFrom[] = " FROM runs r JOIN run_retry_policies rp ON rp.run_id = r.id";

std::optional<int> OptInt32(const Stmt& s, int column);

RunRecord ReadRun(const Stmt& s);

inline constexpr char kAttemptColumns[] =
    "a.id, a.run_id, a.attempt, a.status, a.executor_type, a.callback_sequence, a.pid, "
    "a.process_start_ticks, a.log_path, a.created_at_ms, a.started_at_ms, a.finished_at_ms, "
    "a.exit_code, a.error_code, a.error_summary";

AttemptRecord ReadAttempt(const Stmt& s);

inline constexpr char kEventColumns[] =
    "ev.run_id, ev.sequence, ev.type, ev.actor_type, ev.attempt_id, ev.dedupe_key, "
    "ev.payload_json, ev.created_at_ms";

EventRecord ReadEvent(const Stmt& s);

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

Result<std::optional<ProjectRecord>> LoadProject(Db& db, const std::string& id);

// Returns the project when it exists and is active: NotFound / Conflict otherwise.
Status RequireActiveProject(Db& db, const std::string& project_id);

Result<std::optional<TaskHeadRecord>> LoadTaskHead(Db& db, const std::string& task_id);

Result<std::optional<TaskRevisionRecord>> LoadTaskRevision(Db& db, const std::string& task_id,
                                                           int64_t revision);

Result<std::optional<TaskRevisionRecord>> LoadTaskRevisionByMutation(Db& db,
                                                                     const std::string& mutation);

Result<std::optional<TriggerHeadRecord>> LoadTriggerHead(Db& db, const std::string& trigger_id);

Result<std::optional<TriggerRevisionRecord>> LoadTriggerRevisionByMutation(
    Db& db, const std::string& mutation);

Result<std::optional<RunRecord>> LoadRun(Db& db, const std::string& run_id);

Result<RunRecord> RequireRun(Db& db, const std::string& run_id);

Result<std::optional<AttemptRecord>> LoadAttempt(Db& db, const std::string& attempt_id);

Result<std::optional<AttemptRecord>> LoadLatestAttempt(Db& db, const std::string& run_id);

// Inserts one event at `sequence`; the attempt it names must belong to the run.
Status InsertEvent(Db& db, const std::string& run_id, int64_t sequence, const NewEvent& event,
                   const std::string& canonical_payload, int64_t now_ms);

Result<std::string> CanonicalOf(const nlohmann::json& value);

// Inserts a queued run with its claimed first attempt, its retry policy and the events
// run.created (sequence 1) and run.queued (sequence 2).
Status InsertQueuedRun(Db& db, const NewRun& run);

// Inserts a cron occurrence refused at admission as a skipped run (error_code `reason`) with
// its retry policy and the events run.created and run.skipped {reason}; no attempt.
Status InsertSkippedRun(Db& db, const NewRun& run, std::string_view reason,
                        const std::string& summary);

// Records a cancel intent with `reason` (payload: the run.cancel_requested event's canonical
// payload) on `run`, which has none yet: a run that has not started (created, queued,
// retry_wait) is cancelled at once with its attempt; a started run keeps its state until the
// executor honours the intent. A terminal run → Conflict run_terminal.
Status CancelRunInTx(Db& db, const RunRecord& run, const std::string& reason,
                     const std::string& actor_type, const std::string& payload, int64_t now_ms);

// Requires an execution revision `id` of (task, revision, executor type) with the task digest.
Result<bool> ExecutionRevisionMatches(Db& db, const NewRun& run);

// The eligibility of a schedule row: active project, current enabled trigger revision pinning
// the task's current enabled revision and its digest, not exhausted.
inline constexpr char kEligibleSchedules[] =
    " FROM trigger_schedules s"
    " JOIN projects p ON p.id = s.project_id"
    " JOIN trigger_heads th ON th.trigger_id = s.trigger_id"
    " JOIN trigger_revisions g ON g.trigger_id = s.trigger_id AND g.revision = s.trigger_revision"
    " JOIN task_heads h ON h.task_id = g.task_id"
    " JOIN task_revisions tr ON tr.task_id = g.task_id AND tr.revision = g.task_revision"
    " WHERE s.exhausted = 0 AND p.status = 'active' AND th.current_revision = s.trigger_revision"
    " AND g.enabled = 1 AND h.current_revision = g.task_revision AND tr.enabled = 1"
    " AND tr.content_digest = g.task_digest";

}  // namespace ql::sqlite
