#include "ql/storage/sqlite/sqlite_store_rows.h"

#include <algorithm>

#include "ql/core/canonical_json.h"
#include "ql/core/notification_store.h"
#include "ql/core/run_payloads.h"
#include "ql/core/states.h"
#include "ql/core/store_commands.h"
#include "ql/storage/sqlite/sqlite_notifications.h"

namespace ql::sqlite {

ProjectRecord ReadProject(const Stmt& s) {
  return ProjectRecord{s.Text(0), s.Text(1), s.Text(2), s.Text(3), s.Int(4), s.Int(5), s.Int(6)};
}

TaskHeadRecord ReadTaskHead(const Stmt& s) {
  return TaskHeadRecord{s.Text(0), s.Text(1), s.Int(2),  s.Int(3),
                        s.Int(4),  s.Text(5), s.OptInt(6)};
}

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
  r.approval_json = s.OptText(11);
  r.concurrency = s.OptInt(12);
  r.published_by = s.OptText(13);
  return r;
}

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

TriggerHeadRecord ReadTriggerHead(const Stmt& s) {
  return TriggerHeadRecord{s.Text(0), s.Text(1), s.Text(2), s.Int(3),
                           s.Int(4),  s.Int(5),  s.Text(6), s.OptInt(7)};
}

TriggerRevisionRecord ReadTriggerRevision(const Stmt& s, int c) {
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
  r.overlap = s.Text(c + 13);
  r.jitter_ms = s.Int(c + 14);
  return r;
}

ScheduleRecord ReadSchedule(const Stmt& s, int c) {
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
  r.retry_policy.retry_on_timeout = s.Bool(31);
  return r;
}

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

namespace {

// Inserts the retry policy snapshot of a new run.
Status InsertRetryPolicy(Db& db, const NewRun& run) {
  static const std::string kPolicy =
      "INSERT INTO run_retry_policies (run_id, max_attempts, retry_on_lost, safety, "
      "backoff_base_ms, backoff_max_ms, retry_on_timeout) VALUES (?, ?, ?, ?, ?, ?, ?)";
  return Execute(db, kPolicy, run.run_id, run.retry_policy.max_attempts,
                 run.retry_policy.retry_on_lost, run.retry_policy.safety,
                 run.retry_policy.backoff_base_ms, run.retry_policy.backoff_max_ms,
                 run.retry_policy.retry_on_timeout);
}

}  // namespace

// Inserts a queued run with its claimed first attempt, its retry policy and the events
// run.created (sequence 1) and run.queued (sequence 2).
Status InsertQueuedRun(Db& db, const NewRun& run) {
  static const std::string kRun =
      "INSERT INTO runs (id, project_id, task_id, task_revision, task_digest, "
      "execution_revision_id, trigger_id, trigger_revision, scheduled_for_ms, trigger_type, "
      "status, version, event_sequence, priority, idempotency_key, retry_of_run_id, "
      "created_at_ms, queued_at_ms) "
      "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'queued', 1, 2, ?, ?, ?, ?, ?)";
  // A jittered cron run waits in the queue until its release time.
  const int64_t queued_at = std::max(run.now_ms, run.release_at_ms.value_or(run.now_ms));
  QL_RETURN_IF_ERROR(Execute(db, kRun, run.run_id, run.project_id, run.task_id, run.task_revision,
                             run.task_digest, run.execution_revision_id, run.trigger_id,
                             run.trigger_revision, run.scheduled_for_ms, run.trigger_type,
                             run.priority, run.idempotency_key, run.retry_of_run_id, run.now_ms,
                             queued_at));
  QL_RETURN_IF_ERROR(InsertRetryPolicy(db, run));
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

// Records a cancel intent on `run` (no intent yet): a run that has not started is cancelled
// at once with its claimed attempt; a started one keeps running until its executor honours it.
Status CancelRunInTx(Db& db, const RunRecord& run, const std::string& reason,
                     const std::string& actor_type, const std::string& payload, int64_t now_ms) {
  QL_ASSIGN_OR_RETURN(RunStatus from, StoredRunStatus(run));
  if (IsTerminal(from)) {
    return Conflict("run_terminal",
                    Cat({"run ", run.id, " is ", run.status, "; there is nothing to cancel"}));
  }
  int64_t sequence = run.event_sequence;
  const NewEvent requested{std::string(kEventRunCancelRequested), actor_type, std::nullopt,
                           std::nullopt, payload};
  QL_RETURN_IF_ERROR(InsertEvent(db, run.id, ++sequence, requested, payload, now_ms));

  RunStatus next = from;
  std::optional<int64_t> finished;
  if (from == RunStatus::kCreated || from == RunStatus::kQueued ||
      from == RunStatus::kRetryWait) {
    // Not started: nothing will observe the intent later, so the run stops here.
    QL_ASSIGN_OR_RETURN(std::optional<AttemptRecord> latest, LoadLatestAttempt(db, run.id));
    if (latest.has_value()) {
      QL_ASSIGN_OR_RETURN(AttemptStatus current, StoredAttemptStatus(*latest));
      if (!IsTerminal(current)) {
        QL_RETURN_IF_ERROR(CheckAttemptTransition(current, AttemptStatus::kCancelled));
        QL_RETURN_IF_ERROR(ExecuteCas(
            db, Conflict("attempt_status_conflict", Cat({"attempt ", latest->id, " moved on"})),
            "UPDATE run_attempts SET status = 'cancelled', "
            "finished_at_ms = coalesce(finished_at_ms, ?) WHERE id = ? AND status = ?",
            now_ms, latest->id, AttemptStatusName(current)));
        const NewEvent cancelled{AttemptEventType(AttemptStatus::kCancelled), actor_type,
                                 latest->id, std::nullopt, "{}"};
        QL_RETURN_IF_ERROR(InsertEvent(db, run.id, ++sequence, cancelled, "{}", now_ms));
      }
    }
    QL_RETURN_IF_ERROR(CheckRunTransition(from, RunStatus::kCancelled));
    next = RunStatus::kCancelled;
    finished = now_ms;
    const NewEvent cancelled{RunEventType(RunStatus::kCancelled), actor_type, std::nullopt,
                             std::nullopt, "{}"};
    QL_RETURN_IF_ERROR(InsertEvent(db, run.id, ++sequence, cancelled, "{}", now_ms));
  }
  QL_RETURN_IF_ERROR(
      ExecuteCas(db, Conflict("version_conflict", Cat({"run ", run.id, " moved on"})),
                 "UPDATE runs SET status = ?, version = version + 1, event_sequence = ?, "
                 "cancel_requested_at_ms = ?, cancel_reason = ?, "
                 "finished_at_ms = coalesce(?, finished_at_ms) WHERE id = ? AND version = ?",
                 RunStatusName(next), sequence, now_ms, reason, finished, run.id, run.version));
  return Status();
}

// Inserts a cron occurrence that admission refused: the run in state skipped with its retry
// policy, no attempt, and the events run.created (sequence 1) and run.skipped {reason}
// (sequence 2). It keeps the occurrence's idempotency key, so the occurrence is decided once.
Status InsertSkippedRun(Db& db, const NewRun& run, std::string_view reason,
                        const std::string& summary) {
  static const std::string kRun =
      "INSERT INTO runs (id, project_id, task_id, task_revision, task_digest, "
      "execution_revision_id, trigger_id, trigger_revision, scheduled_for_ms, trigger_type, "
      "status, version, event_sequence, priority, idempotency_key, retry_of_run_id, "
      "created_at_ms, finished_at_ms, error_code, error_summary) "
      "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'skipped', 1, 2, ?, ?, ?, ?, ?, ?, ?)";
  QL_RETURN_IF_ERROR(Execute(db, kRun, run.run_id, run.project_id, run.task_id, run.task_revision,
                             run.task_digest, run.execution_revision_id, run.trigger_id,
                             run.trigger_revision, run.scheduled_for_ms, run.trigger_type,
                             run.priority, run.idempotency_key, run.retry_of_run_id, run.now_ms,
                             run.now_ms, std::string(reason), summary));
  QL_RETURN_IF_ERROR(InsertRetryPolicy(db, run));
  QL_ASSIGN_OR_RETURN(std::string created_payload, RunCreatedPayload(run));
  NewEvent created_event{std::string(kEventRunCreated), run.actor_type, std::nullopt, std::nullopt,
                         created_payload};
  QL_RETURN_IF_ERROR(InsertEvent(db, run.run_id, 1, created_event, created_payload, run.now_ms));
  QL_ASSIGN_OR_RETURN(std::string skipped_payload, RunSkippedPayload(reason));
  NewEvent skipped_event{RunEventType(RunStatus::kSkipped), run.actor_type, std::nullopt,
                         std::nullopt, skipped_payload};
  QL_RETURN_IF_ERROR(InsertEvent(db, run.run_id, 2, skipped_event, skipped_payload, run.now_ms));
  // The skip's notification commits with it.
  return NotifyRunOutcomeInTx(
      *NewNotificationTx(db), run.project_id, run.task_id,
      [&] { return RequireRun(db, run.run_id); }, RunStatus::kSkipped, run.now_ms);
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

}  // namespace ql::sqlite
