#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>

#include "ql/core/canonical_json.h"
#include "ql/core/governance_store.h"
#include "ql/core/idempotency_key.h"
#include "ql/core/ids.h"
#include "ql/core/notification_store.h"
#include "ql/core/states.h"
#include "ql/core/store_commands.h"
#include "ql/storage/postgres/pg_notifications.h"
#include "ql/storage/postgres/pg_run_rows.h"
#include "ql/storage/postgres/pg_store.h"
#include "ql/storage/postgres/pg_store_rows.h"
#include "ql/storage/postgres/pg_worker.h"

namespace ql {

using pg::EventsInsertStatement;
using pg::EventsNeedNoLookUp;
using pg::Execute;
using pg::ExecuteCas;
using pg::ExecutionRevisionMatches;
using pg::InsertEvent;
using pg::kAttemptColumns;
using pg::kEventColumns;
using pg::kRunColumns;
using pg::kRunFrom;
using pg::LoadAttempt;
using pg::LoadAttemptStatement;
using pg::LoadLatestAttempt;
using pg::LoadProject;
using pg::LoadRun;
using pg::LoadRunStatement;
using pg::LoadTaskHead;
using pg::LoadTaskRevision;
using pg::Lock;
using pg::P;
using pg::Params;
using pg::QueryAll;
using pg::QueryOne;
using pg::ReadAttempt;
using pg::ReadEvent;
using pg::ReadRun;
using pg::RequireActiveProject;
using pg::RequireRun;
using pg::Rows;
using pg::Statement;
using pg::Tx;

// ---------------------------------------------------------------------------------------------
// Runs

Result<RunRecord> PostgresStore::CreateRun(const NewRun& run) {
  QL_RETURN_IF_ERROR(ValidateNewRun(run));
  if (run.trigger_type == TriggerTypeName(TriggerType::kCron)) {
    return InvalidArgument("invalid_trigger_type",
                           "cron runs are admitted only through a schedule advance");
  }
  RunRecord out;
  QL_RETURN_IF_ERROR(Write("creating a run", [&](Tx& tx) -> Status {
    QL_RETURN_IF_ERROR(Fence(tx, run.fence, run.project_id));
    // Read without row locks (the runtime role may not lock definitions); a publish that
    // commits after this snapshot reads nothing written here, so the run is ordered before it.
    // Concurrent creators of the same run id or idempotency key meet in the unique keys.
    QL_ASSIGN_OR_RETURN(std::optional<ProjectRecord> project, LoadProject(tx, run.project_id));
    QL_RETURN_IF_ERROR(RequireActiveProject(project, run.project_id));
    QL_ASSIGN_OR_RETURN(std::optional<TaskHeadRecord> head, LoadTaskHead(tx, run.task_id));
    if (!head.has_value() || head->project_id != run.project_id) {
      return NotFound("task_not_found",
                      Cat({"task ", run.task_id, " does not exist in project ", run.project_id}));
    }
    QL_ASSIGN_OR_RETURN(std::optional<TaskRevisionRecord> current,
                        LoadTaskRevision(tx, run.task_id, head->current_revision));
    if (head->current_revision != run.task_revision || !current.has_value() || !current->enabled ||
        current->content_digest != run.task_digest) {
      return Conflict(
          "task_revision_not_current",
          Cat({"task ", run.task_id, " revision ", std::to_string(run.task_revision),
               " with digest ", run.task_digest, " is not the task's current enabled revision (",
               std::to_string(head->current_revision), ")"}));
    }
    QL_ASSIGN_OR_RETURN(bool exec_ok, ExecutionRevisionMatches(tx, run));
    if (!exec_ok) {
      return Conflict("execution_revision_missing",
                      Cat({"execution revision ", Quote(run.execution_revision_id), " of task ",
                           run.task_id, " revision ", std::to_string(run.task_revision),
                           " for executor ", run.executor_type, " does not exist"}));
    }
    if (run.retry_of_run_id.has_value()) {
      QL_ASSIGN_OR_RETURN(std::optional<RunRecord> original, LoadRun(tx, *run.retry_of_run_id));
      if (!original.has_value()) {
        return NotFound("run_not_found",
                        Cat({"run ", *run.retry_of_run_id, " to retry does not exist"}));
      }
    }
    if (run.idempotency_key.has_value() &&
        run.idempotency_key->starts_with(kCronIdempotencyKeyPrefix)) {
      // A cron run's key is not stored, so the unique key cannot meet it: look for it.
      QL_ASSIGN_OR_RETURN(std::optional<RunRecord> taken,
                          pg::LoadRunByIdempotencyKey(tx, run.project_id, *run.idempotency_key));
      if (taken.has_value()) {
        return Duplicate("idempotency_key_duplicate",
                         Cat({"idempotency key ", Quote(*run.idempotency_key),
                              " is taken by run ", taken->id}));
      }
    }
    QL_RETURN_IF_ERROR(pg::InsertQueuedRun(tx, run, run.now_ms));
    QL_ASSIGN_OR_RETURN(out, RequireRun(tx, run.run_id));
    return Status();
  }));
  return out;
}

Result<RunRecord> PostgresStore::GetRun(const std::string& run_id) {
  RunRecord out;
  QL_RETURN_IF_ERROR(Read("reading a run", [&](Tx& tx) -> Status {
    QL_ASSIGN_OR_RETURN(out, RequireRun(tx, run_id));
    return Status();
  }));
  return out;
}

Result<RunRecord> PostgresStore::FindRunByIdempotencyKey(const std::string& project_id,
                                                         const std::string& key) {
  std::optional<RunRecord> out;
  QL_RETURN_IF_ERROR(Read("reading a run", [&](Tx& tx) -> Status {
    QL_ASSIGN_OR_RETURN(out, pg::LoadRunByIdempotencyKey(tx, project_id, key));
    return Status();
  }));
  if (!out.has_value()) {
    return NotFound("run_not_found",
                    Cat({"project ", project_id, " has no run with idempotency key ", Quote(key)}));
  }
  return std::move(*out);
}

Result<Page<RunRecord>> PostgresStore::ListRuns(const RunFilter& filter, const PageRequest& page) {
  QL_RETURN_IF_ERROR(RequireLimit("page limit", page.limit));
  if (filter.status.has_value() && !ParseRunStatus(*filter.status).has_value()) {
    return InvalidArgument("invalid_status",
                           Cat({"run status filter ", Quote(*filter.status), " is not a status"}));
  }
  std::optional<RunPosition> after;
  if (page.after_key.has_value()) {
    QL_ASSIGN_OR_RETURN(after, DecodeRunKey(*page.after_key));
  }
  const pg::RunListing listing = pg::RunListingQuery(filter, after, page.limit + 1);
  Page<RunRecord> out;
  QL_RETURN_IF_ERROR(Read("listing runs", [&](Tx& tx) -> Status {
    QL_ASSIGN_OR_RETURN(out.items,
                        QueryAll<RunRecord>(tx, listing.sql, listing.params, ReadRun));
    return Status();
  }));
  if (out.items.size() > static_cast<size_t>(page.limit)) {
    out.items.resize(page.limit);
    out.next_key = EncodeRunKey(out.items.back());
  }
  return out;
}

Result<std::vector<AttemptRecord>> PostgresStore::ListAttempts(const std::string& run_id) {
  QL_ASSIGN_OR_RETURN(auto both, GetRunWithAttempts(run_id));
  return std::move(both.second);
}

Result<std::pair<RunRecord, std::vector<AttemptRecord>>> PostgresStore::GetRunWithAttempts(
    const std::string& run_id) {
  std::pair<RunRecord, std::vector<AttemptRecord>> out;
  QL_RETURN_IF_ERROR(Read("reading a run and its attempts", [&](Tx& tx) -> Status {
    QL_ASSIGN_OR_RETURN(out.first, RequireRun(tx, run_id));
    static const std::string kSql = Cat({"SELECT ", kAttemptColumns,
                                         " FROM run_attempts a WHERE a.run_id = $1 "
                                         "ORDER BY a.attempt"});
    QL_ASSIGN_OR_RETURN(out.second, QueryAll<AttemptRecord>(tx, kSql, {P(run_id)}, ReadAttempt));
    return Status();
  }));
  return out;
}

Result<std::vector<EventRecord>> PostgresStore::ListEvents(const std::string& run_id,
                                                           int64_t after_sequence, int limit) {
  QL_RETURN_IF_ERROR(RequireLimit("event limit", limit));
  std::vector<EventRecord> out;
  QL_RETURN_IF_ERROR(Read("listing events", [&](Tx& tx) -> Status {
    QL_ASSIGN_OR_RETURN(RunRecord run, RequireRun(tx, run_id));
    QL_ASSIGN_OR_RETURN(out, pg::DeriveAdmissionEvents(tx, run));
    std::erase_if(out, [&](const EventRecord& e) { return e.sequence <= after_sequence; });
    static const std::string kSql =
        Cat({"SELECT ", kEventColumns,
             " FROM run_events ev WHERE ev.run_id = $1 AND ev.sequence > $2 "
             "ORDER BY ev.sequence LIMIT $3"});
    QL_ASSIGN_OR_RETURN(std::vector<EventRecord> stored,
                        QueryAll<EventRecord>(tx, kSql, {P(run_id), P(after_sequence), P(limit)},
                                              ReadEvent));
    for (EventRecord& e : stored) out.push_back(std::move(e));
    if (out.size() > static_cast<size_t>(limit)) out.resize(limit);
    return Status();
  }));
  return out;
}

Result<RunRecord> PostgresStore::ApplyTransition(const RunTransitionCommand& t) {
  return ApplyTransitions({t});
}

Result<RunRecord> PostgresStore::ApplyTransitions(
    const std::vector<RunTransitionCommand>& transitions) {
  QL_ASSIGN_OR_RETURN(std::vector<CheckedTransition> checked, CheckTransitions(transitions));
  RunRecord out;
  QL_RETURN_IF_ERROR(Write("applying a run transition", [&](Tx& tx) -> Status {
    for (size_t i = 0; i < transitions.size(); ++i) {
      QL_ASSIGN_OR_RETURN(out, ApplyTransitionInTx(tx, transitions[i], checked[i]));
    }
    return Status();
  }));
  return out;
}

Result<RunRecord> PostgresStore::ApplyTransitionInTx(Tx& tx, const RunTransitionCommand& t,
                                                     const CheckedTransition& checked) {
  // The reads below go to the server in one round trip, in the order they run (the run's lock
  // first, then the lease's and the clock after both): each is then answered from there.
  std::vector<Statement> reads = {LoadRunStatement(t.run_id, Lock::kUpdate)};
  if (t.lease.has_value()) {
    for (Statement& s : pg::VerifyLeaseStatements(*t.lease)) reads.push_back(std::move(s));
  }
  if (t.attempt_id.has_value()) reads.push_back(LoadAttemptStatement(*t.attempt_id));
  tx.Prefetch(reads);
  // The run row stays locked to the end: a competing transition of the same run waits here
  // and then reads the winner's version.
  QL_ASSIGN_OR_RETURN(RunRecord run, RequireRun(tx, t.run_id, Lock::kUpdate));
  if (t.lease.has_value()) {
    QL_ASSIGN_OR_RETURN(pg::VerifiedLease lease, pg::VerifyLease(tx, *t.lease));
    if (lease.attempt_id != t.attempt_id || lease.run_id != run.id) {
      return Conflict("lease_fenced",
                      Cat({"lease ", t.lease->offer_id, " is not a lease of this attempt"}));
    }
  }
  QL_ASSIGN_OR_RETURN(RunMove move, DecideRunMove(run, t, checked));
  std::optional<AttemptRecord> loaded_attempt;
  std::optional<AttemptMove> attempt_move;
  if (t.attempt_id.has_value()) {
    QL_ASSIGN_OR_RETURN(loaded_attempt, LoadAttempt(tx, *t.attempt_id));
    QL_ASSIGN_OR_RETURN(attempt_move, DecideAttemptMove(run, loaded_attempt, t, checked));
  }
  // The attempt read above (its UPDATE also matched the run) needs no second look-up.
  const std::optional<std::string> verified_attempt =
      loaded_attempt.has_value() && loaded_attempt->run_id == run.id
          ? std::optional<std::string>(loaded_attempt->id)
          : std::nullopt;
  const int64_t sequence = run.event_sequence + static_cast<int64_t>(checked.events.size());
  Statement update_attempt;
  if (attempt_move.has_value()) {
    update_attempt = {
        "UPDATE run_attempts SET status = $1, pid = coalesce($2, pid), "
        "process_start_ticks = coalesce($3, process_start_ticks), "
        "log_path = coalesce($4, log_path), started_at_ms = coalesce($5, started_at_ms), "
        "finished_at_ms = coalesce($6, finished_at_ms), exit_code = coalesce($7, exit_code), "
        "error_code = coalesce($8, error_code), error_summary = coalesce($9, error_summary) "
        "WHERE id = $10 AND run_id = $11 AND status = $12",
        {P(AttemptStatusName(attempt_move->next)), P(t.pid), P(t.process_start_ticks),
         P(t.log_path), P(t.attempt_started_at_ms), P(attempt_move->finished_at_ms),
         P(t.attempt_exit_code), P(t.attempt_error_code), P(t.attempt_error_summary),
         P(loaded_attempt->id), P(run.id), P(AttemptStatusName(attempt_move->current))}};
  }
  const bool releases = attempt_move.has_value() && IsTerminal(attempt_move->next);
  static const std::string kUpdateRun = Cat(
      {"UPDATE runs r SET status = $1, version = version + 1, event_sequence = $2, "
       "queued_at_ms = coalesce($3, queued_at_ms), started_at_ms = coalesce($4, started_at_ms), "
       "finished_at_ms = coalesce($5, finished_at_ms), retry_at_ms = coalesce($6, retry_at_ms), "
       "exit_code = coalesce($7, exit_code), error_code = coalesce($8, error_code), "
       "error_summary = coalesce($9, error_summary) WHERE r.id = $10 AND r.version = $11 "
       "RETURNING ",
       kRunColumns});
  const Statement update_run = {
      kUpdateRun,
      {P(RunStatusName(move.next)), P(sequence), P(move.queued_at_ms), P(t.started_at_ms),
       P(move.finished_at_ms), P(t.retry_at_ms), P(t.exit_code), P(t.error_code),
       P(t.error_summary), P(run.id), P(t.expected_version)}};
  // When every write is known up front (no new attempt to number, no event's attempt to look
  // up) they go to the server in one round trip too; a compare-and-set that misses below still
  // fails the transition, and the transaction rolls back whatever ran after it.
  if (!t.new_attempt_id.has_value() && EventsNeedNoLookUp(checked.events, verified_attempt)) {
    std::vector<Statement> writes;
    if (attempt_move.has_value()) writes.push_back(update_attempt);
    if (releases) writes.push_back(pg::ReleaseLeaseStatement(loaded_attempt->id, t.now_ms));
    if (!checked.events.empty()) {
      writes.push_back(
          EventsInsertStatement(run.id, run.event_sequence, checked.events, t.now_ms));
    }
    writes.push_back(update_run);
    tx.Prefetch(writes);
  }

  if (attempt_move.has_value()) {
    QL_RETURN_IF_ERROR(
        ExecuteCas(tx, attempt_move->on_miss, update_attempt.sql, update_attempt.params));
    if (releases) QL_RETURN_IF_ERROR(pg::ReleaseLease(tx, loaded_attempt->id, t.now_ms));
  }

  if (t.new_attempt_id.has_value()) {
    QL_ASSIGN_OR_RETURN(std::optional<AttemptRecord> latest, LoadLatestAttempt(tx, run.id));
    QL_ASSIGN_OR_RETURN(int number, DecideNewAttempt(run, latest));
    QL_RETURN_IF_ERROR(Execute(tx,
                               "INSERT INTO run_attempts (id, run_id, attempt, status, "
                               "executor_type, callback_sequence, created_at_ms) "
                               "VALUES ($1, $2, $3, 'claimed', $4, 0, $5)",
                               {P(*t.new_attempt_id), P(run.id), P(number),
                                P(latest->executor_type), P(t.now_ms)}));
  }

  QL_RETURN_IF_ERROR(InsertEvents(tx, run.id, run.event_sequence, checked.events,
                                  verified_attempt, t.now_ms));
  QL_ASSIGN_OR_RETURN(Rows updated, tx.Exec(update_run.sql, update_run.params));
  if (updated.empty()) return move.on_miss;
  RunRecord moved = ReadRun(updated, 0);
  QL_RETURN_IF_ERROR(updated.status());
  if (move.next != move.from) {
    // The outbox row commits with the state change that causes it.
    QL_RETURN_IF_ERROR(
        NotifyRunOutcomeInTx(*pg::NewNotificationTx(tx), moved, move.next, t.now_ms));
  }
  return moved;
}

Result<EventRecord> PostgresStore::AppendEvent(const std::string& run_id, const NewEvent& event,
                                               int64_t now_ms) {
  QL_RETURN_IF_ERROR(ValidateId("run_id", run_id));
  const std::vector<NewEvent> one = {event};
  QL_ASSIGN_OR_RETURN(std::vector<PreparedEvent> prepared, PrepareEvents(one));
  EventRecord out;
  QL_RETURN_IF_ERROR(Write("appending an event", [&](Tx& tx) -> Status {
    QL_ASSIGN_OR_RETURN(RunRecord run, RequireRun(tx, run_id, Lock::kUpdate));
    const int64_t sequence = run.event_sequence + 1;
    QL_RETURN_IF_ERROR(InsertEvent(tx, run.id, sequence, event, prepared.front().payload, now_ms));
    QL_RETURN_IF_ERROR(ExecuteCas(
        tx, Conflict("event_sequence_conflict", Cat({"run ", run.id, " gained an event"})),
        "UPDATE runs SET event_sequence = $1 WHERE id = $2 AND event_sequence = $3",
        {P(sequence), P(run.id), P(run.event_sequence)}));
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

Result<RunRecord> PostgresStore::RequestCancel(const std::string& run_id, const std::string& reason,
                                               std::string actor_type, int64_t now_ms,
                                               const std::optional<PolicyFence>& fence) {
  QL_RETURN_IF_ERROR(ValidateId("run_id", run_id));
  QL_RETURN_IF_ERROR(RequireActorType(actor_type));
  QL_ASSIGN_OR_RETURN(std::string reason_json, CanonicalJson(nlohmann::json{{"reason", reason}}));
  QL_ASSIGN_OR_RETURN(std::string payload,
                      CanonicalEventPayload(kEventRunCancelRequested, reason_json));
  RunRecord out;
  QL_RETURN_IF_ERROR(Write("requesting a cancel", [&](Tx& tx) -> Status {
    if (fence.has_value()) {
      // The fence's shared lock comes before the run's row lock (the governance lock order).
      QL_ASSIGN_OR_RETURN(RunRecord before, RequireRun(tx, run_id));
      Status st = Fence(tx, fence, before.project_id);
      // Cancelling stays possible in an archived project: it only stops work.
      if (!st.ok() && st.reason() != "project_archived") return st;
    }
    QL_ASSIGN_OR_RETURN(RunRecord run, RequireRun(tx, run_id, Lock::kUpdate));
    if (run.cancel_requested_at_ms.has_value()) {  // the first intent wins
      out = std::move(run);
      return Status();
    }
    QL_RETURN_IF_ERROR(pg::CancelRunInTx(tx, run, reason, actor_type, payload, now_ms));
    QL_ASSIGN_OR_RETURN(out, RequireRun(tx, run.id));
    return Status();
  }));
  return out;
}

namespace {

// Joins each run with its latest attempt as `a`.
constexpr char kWithLatestAttempt[] =
    " JOIN run_attempts a ON a.run_id = r.id"
    " AND a.attempt = (SELECT max(x.attempt) FROM run_attempts x WHERE x.run_id = r.id)";

}  // namespace

Result<std::vector<RunRecord>> PostgresStore::ListDispatchable(const std::string& executor_type,
                                                               int limit, int64_t now_ms) {
  QL_RETURN_IF_ERROR(RequireExecutorType(executor_type));
  QL_RETURN_IF_ERROR(RequireLimit("dispatch limit", limit));
  std::vector<RunRecord> out;
  QL_RETURN_IF_ERROR(Read("listing dispatchable runs", [&](Tx& tx) -> Status {
    // The predicate and order are those of the partial index runs_dispatchable.
    static const std::string kSql =
        Cat({"SELECT ", kRunColumns, " FROM runs r", kWithLatestAttempt,
             " WHERE r.status = 'queued' AND r.cancel_requested_at_ms IS NULL"
             " AND a.status = 'claimed' AND a.executor_type = $1"
             // An archived project's queue is cancelled, never dispatched.
             " AND EXISTS (SELECT 1 FROM projects p WHERE p.id = r.project_id"
             " AND p.status = 'active')"
             // A jittered cron run is held until its queued time (its release time when it
             // was admitted before it); other runs are never held.
             " AND (r.queued_at_ms <= $3 OR r.queued_at_ms <= r.created_at_ms)"
             " ORDER BY r.priority DESC, r.queued_at_ms, r.id LIMIT $2"});
    QL_ASSIGN_OR_RETURN(
        out, QueryAll<RunRecord>(tx, kSql, {P(executor_type), P(limit), P(now_ms)}, ReadRun));
    return Status();
  }));
  return out;
}

Result<std::vector<RunRecord>> PostgresStore::ListActive() {
  std::vector<RunRecord> out;
  QL_RETURN_IF_ERROR(Read("listing active runs", [&](Tx& tx) -> Status {
    static const std::string kSql = Cat({"SELECT ", kRunColumns, kRunFrom,
                                         " WHERE r.status IN ('dispatching', 'running', 'lost')"
                                         " ORDER BY r.created_at_ms, r.id"});
    QL_ASSIGN_OR_RETURN(out, QueryAll<RunRecord>(tx, kSql, {}, ReadRun));
    return Status();
  }));
  return out;
}

Result<std::vector<RunRecord>> PostgresStore::ListRetryDue(int64_t now_ms, int limit) {
  QL_RETURN_IF_ERROR(RequireLimit("retry limit", limit));
  std::vector<RunRecord> out;
  QL_RETURN_IF_ERROR(Read("listing retry-due runs", [&](Tx& tx) -> Status {
    static const std::string kSql = Cat({"SELECT ", kRunColumns, kRunFrom,
                                         " WHERE r.status = 'retry_wait' AND r.retry_at_ms <= $1"
                                         " ORDER BY r.retry_at_ms, r.id LIMIT $2"});
    QL_ASSIGN_OR_RETURN(out, QueryAll<RunRecord>(tx, kSql, {P(now_ms), P(limit)}, ReadRun));
    return Status();
  }));
  return out;
}

Result<std::vector<std::pair<std::string, int64_t>>> PostgresStore::CountRunsByStatus(
    const std::optional<std::string>& project_id) {
  std::vector<std::pair<std::string, int64_t>> out;
  QL_RETURN_IF_ERROR(Read("counting runs", [&](Tx& tx) -> Status {
    QL_ASSIGN_OR_RETURN(
        out,
        (QueryAll<std::pair<std::string, int64_t>>(
            tx,
            project_id.has_value()
                ? "SELECT status, count(*) FROM runs WHERE project_id = $1 GROUP BY status "
                  "ORDER BY status COLLATE \"C\""
                : "SELECT status, count(*) FROM runs GROUP BY status "
                  "ORDER BY status COLLATE \"C\"",
            project_id.has_value() ? pg::Params{pg::P(*project_id)} : pg::Params{},
            [](const Rows& r, int i) { return std::make_pair(r.Text(i, 0), r.Int(i, 1)); })));
    return Status();
  }));
  return out;
}

Result<int64_t> PostgresStore::CountRunsInStatus(RunStatus status) {
  int64_t out = 0;
  QL_RETURN_IF_ERROR(Read("counting runs", [&](Tx& tx) -> Status {
    QL_ASSIGN_OR_RETURN(std::vector<int64_t> rows,
                        QueryAll<int64_t>(tx, "SELECT count(*) FROM runs WHERE status = $1",
                                          {P(std::string(RunStatusName(status)))},
                                          [](const Rows& r, int i) { return r.Int(i, 0); }));
    out = rows.empty() ? 0 : rows.front();
    return Status();
  }));
  return out;
}

}  // namespace ql
