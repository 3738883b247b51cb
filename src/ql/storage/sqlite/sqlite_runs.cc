#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "ql/core/ids.h"
#include "ql/core/states.h"
#include "ql/core/store_commands.h"
#include "ql/storage/sqlite/sqlite_db.h"
#include "ql/storage/sqlite/sqlite_notifications.h"
#include "ql/storage/sqlite/sqlite_store.h"
#include "ql/storage/sqlite/sqlite_store_rows.h"

namespace ql {

using sqlite::CancelRunInTx;
using sqlite::CanonicalOf;
using sqlite::Execute;
using sqlite::ExecuteCas;
using sqlite::ExecutionRevisionMatches;
using sqlite::InsertEvent;
using sqlite::InsertQueuedRun;
using sqlite::kAttemptColumns;
using sqlite::kEventColumns;
using sqlite::kRunColumns;
using sqlite::kRunFrom;
using sqlite::LoadAttempt;
using sqlite::LoadLatestAttempt;
using sqlite::LoadRun;
using sqlite::LoadTaskHead;
using sqlite::LoadTaskRevision;
using sqlite::QueryAll;
using sqlite::QueryOne;
using sqlite::ReadAttempt;
using sqlite::ReadEvent;
using sqlite::ReadRun;
using sqlite::RequireActiveProject;
using sqlite::RequireRun;
using sqlite::Stmt;
using sqlite::Tx;
using sqlite::TxMode;

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
  if (filter.created_from_ms.has_value()) sql += " AND r.created_at_ms >= ?";
  if (filter.created_before_ms.has_value()) sql += " AND r.created_at_ms < ?";
  if (filter.id_range.has_value()) sql += " AND r.id >= ? AND r.id <= ?";
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
    if (filter.created_from_ms.has_value()) stmt.Bind(++index, *filter.created_from_ms);
    if (filter.created_before_ms.has_value()) stmt.Bind(++index, *filter.created_before_ms);
    if (filter.id_range.has_value()) {
      stmt.Bind(++index, filter.id_range->first);
      stmt.Bind(++index, filter.id_range->second);
    }
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
  QL_ASSIGN_OR_RETURN(auto both, GetRunWithAttempts(run_id));
  return std::move(both.second);
}

Result<std::pair<RunRecord, std::vector<AttemptRecord>>> SqliteStore::GetRunWithAttempts(
    const std::string& run_id) {
  std::pair<RunRecord, std::vector<AttemptRecord>> out;
  QL_RETURN_IF_ERROR(
      db_->Transact(TxMode::kRead, "reading a run and its attempts", [&](Tx&) -> Status {
        QL_ASSIGN_OR_RETURN(out.first, RequireRun(*db_, run_id));
        static const std::string kSql = Cat({"SELECT ", kAttemptColumns,
                                             " FROM run_attempts a WHERE a.run_id = ? ORDER BY "
                                             "a.attempt"});
        QL_ASSIGN_OR_RETURN(out.second, QueryAll<AttemptRecord>(*db_, kSql, ReadAttempt, run_id));
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
  return ApplyTransitions({t});
}

Result<RunRecord> SqliteStore::ApplyTransitions(
    const std::vector<RunTransitionCommand>& transitions) {
  for (const RunTransitionCommand& t : transitions) {
    if (t.lease.has_value()) {
      return InvalidArgument("lease_unsupported",
                             "the embedded store runs attempts locally and has no worker leases");
    }
  }
  QL_ASSIGN_OR_RETURN(std::vector<CheckedTransition> checked, CheckTransitions(transitions));
  RunRecord out;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kWrite, "applying a run transition", [&](Tx&) -> Status {
    for (size_t i = 0; i < transitions.size(); ++i) {
      QL_ASSIGN_OR_RETURN(out, ApplyTransitionInTx(transitions[i], checked[i]));
    }
    return Status();
  }));
  return out;
}

Result<RunRecord> SqliteStore::ApplyTransitionInTx(const RunTransitionCommand& t,
                                                   const CheckedTransition& checked) {
  QL_ASSIGN_OR_RETURN(RunRecord run, RequireRun(*db_, t.run_id));
  QL_ASSIGN_OR_RETURN(RunMove move, DecideRunMove(run, t, checked));
  if (t.attempt_id.has_value()) {
    QL_ASSIGN_OR_RETURN(std::optional<AttemptRecord> attempt, LoadAttempt(*db_, *t.attempt_id));
    QL_ASSIGN_OR_RETURN(std::optional<AttemptMove> attempt_move,
                        DecideAttemptMove(run, attempt, t, checked));
    if (attempt_move.has_value()) {
      static const std::string kUpdateAttempt =
          "UPDATE run_attempts SET status = ?, pid = coalesce(?, pid), "
          "process_start_ticks = coalesce(?, process_start_ticks), "
          "log_path = coalesce(?, log_path), started_at_ms = coalesce(?, started_at_ms), "
          "finished_at_ms = coalesce(?, finished_at_ms), exit_code = coalesce(?, exit_code), "
          "error_code = coalesce(?, error_code), error_summary = coalesce(?, error_summary) "
          "WHERE id = ? AND run_id = ? AND status = ?";
      QL_RETURN_IF_ERROR(ExecuteCas(
          *db_, attempt_move->on_miss, kUpdateAttempt, AttemptStatusName(attempt_move->next),
          t.pid, t.process_start_ticks, t.log_path, t.attempt_started_at_ms,
          attempt_move->finished_at_ms, t.attempt_exit_code, t.attempt_error_code,
          t.attempt_error_summary, attempt->id, run.id,
          AttemptStatusName(attempt_move->current)));
    }
  }

  if (t.new_attempt_id.has_value()) {
    QL_ASSIGN_OR_RETURN(std::optional<AttemptRecord> latest, LoadLatestAttempt(*db_, run.id));
    QL_ASSIGN_OR_RETURN(int number, DecideNewAttempt(run, latest));
    QL_RETURN_IF_ERROR(Execute(*db_,
                               "INSERT INTO run_attempts (id, run_id, attempt, status, "
                               "executor_type, callback_sequence, created_at_ms) "
                               "VALUES (?, ?, ?, 'claimed', ?, 0, ?)",
                               *t.new_attempt_id, run.id, number, latest->executor_type,
                               t.now_ms));
  }

  int64_t sequence = run.event_sequence;
  for (const PreparedEvent& event : checked.events) {
    QL_RETURN_IF_ERROR(
        InsertEvent(*db_, run.id, ++sequence, *event.event, event.payload, t.now_ms));
  }

  static const std::string kUpdateRun =
      "UPDATE runs SET status = ?, version = version + 1, event_sequence = ?, "
      "queued_at_ms = coalesce(?, queued_at_ms), started_at_ms = coalesce(?, started_at_ms), "
      "finished_at_ms = coalesce(?, finished_at_ms), retry_at_ms = coalesce(?, retry_at_ms), "
      "exit_code = coalesce(?, exit_code), error_code = coalesce(?, error_code), "
      "error_summary = coalesce(?, error_summary) WHERE id = ? AND version = ?";
  QL_RETURN_IF_ERROR(ExecuteCas(*db_, move.on_miss, kUpdateRun, RunStatusName(move.next),
                                sequence, move.queued_at_ms, t.started_at_ms,
                                move.finished_at_ms, t.retry_at_ms, t.exit_code, t.error_code,
                                t.error_summary, run.id, t.expected_version));
  QL_ASSIGN_OR_RETURN(RunRecord moved, RequireRun(*db_, run.id));
  if (move.next != move.from) {
    // The outbox row commits with the state change that causes it.
    QL_RETURN_IF_ERROR(
        NotifyRunOutcomeInTx(*sqlite::NewNotificationTx(*db_), moved, move.next, t.now_ms));
  }
  return moved;
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
    QL_RETURN_IF_ERROR(CancelRunInTx(*db_, run, reason, actor_type, payload, now_ms));
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
                                                             int limit, int64_t now_ms) {
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
             // A jittered cron run is released at its queued time.
             " AND r.queued_at_ms <= ?"
             " ORDER BY r.priority DESC, r.queued_at_ms, r.id LIMIT ?"});
    QL_ASSIGN_OR_RETURN(out,
                        QueryAll<RunRecord>(*db_, kSql, ReadRun, executor_type, now_ms, limit));
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

Result<std::vector<std::pair<std::string, int64_t>>> SqliteStore::CountRunsByStatus(
    const std::optional<std::string>& project_id) {
  std::vector<std::pair<std::string, int64_t>> out;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kRead, "counting runs", [&](Tx&) -> Status {
    auto read = [](const Stmt& s) { return std::make_pair(s.Text(0), s.Int(1)); };
    if (project_id.has_value()) {
      QL_ASSIGN_OR_RETURN(out, (QueryAll<std::pair<std::string, int64_t>>(
                                   *db_,
                                   "SELECT status, count(*) FROM runs WHERE project_id = ? "
                                   "GROUP BY status ORDER BY status",
                                   read, *project_id)));
      return Status();
    }
    QL_ASSIGN_OR_RETURN(
        out, (QueryAll<std::pair<std::string, int64_t>>(
                 *db_, "SELECT status, count(*) FROM runs GROUP BY status ORDER BY status",
                 read)));
    return Status();
  }));
  return out;
}

Result<int64_t> SqliteStore::CountRunsInStatus(RunStatus status) {
  int64_t out = 0;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kRead, "counting runs", [&](Tx&) -> Status {
    QL_ASSIGN_OR_RETURN(
        std::vector<int64_t> rows,
        QueryAll<int64_t>(
            *db_, "SELECT count(*) FROM runs WHERE status = ?",
            [](const Stmt& s) { return s.Int(0); }, std::string(RunStatusName(status))));
    out = rows.empty() ? 0 : rows.front();
    return Status();
  }));
  return out;
}

}  // namespace ql
