#include "ql/storage/postgres/pg_store_rows.h"

#include <charconv>

#include "ql/core/idempotency_key.h"
#include "ql/core/store_commands.h"

namespace ql::pg {

ProjectRecord ReadProject(const Rows& r, int i) {
  return ProjectRecord{r.Text(i, 0), r.Text(i, 1), r.Text(i, 2), r.Text(i, 3),
                       r.Int(i, 4),  r.Int(i, 5),  r.Int(i, 6)};
}

TaskHeadRecord ReadTaskHead(const Rows& r, int i) {
  return TaskHeadRecord{r.Text(i, 0), r.Text(i, 1), r.Int(i, 2),   r.Int(i, 3),
                        r.Int(i, 4),  r.Text(i, 5), r.OptInt(i, 6)};
}

TaskRevisionRecord ReadTaskRevision(const Rows& r, int i) {
  TaskRevisionRecord out;
  out.project_id = r.Text(i, 0);
  out.task_id = r.Text(i, 1);
  out.revision = r.Int(i, 2);
  out.mutation_id = r.Text(i, 3);
  out.name = r.Text(i, 4);
  out.kind = r.Text(i, 5);
  out.spec_json = r.Text(i, 6);
  out.labels_json = r.Text(i, 7);
  out.enabled = r.Bool(i, 8);
  out.content_digest = r.Text(i, 9);
  out.created_at_ms = r.Int(i, 10);
  out.approval_json = r.OptText(i, 11);
  out.concurrency = r.OptInt(i, 12);
  out.published_by = r.OptText(i, 13);
  return out;
}

ExecutionRevisionRecord ReadExecution(const Rows& r, int i) {
  ExecutionRevisionRecord out;
  out.id = r.Text(i, 0);
  out.project_id = r.Text(i, 1);
  out.task_id = r.Text(i, 2);
  out.task_revision = r.Int(i, 3);
  out.task_digest = r.Text(i, 4);
  out.executor_type = r.Text(i, 5);
  out.plan_json = r.Text(i, 6);
  out.plan_digest = r.Text(i, 7);
  out.created_at_ms = r.Int(i, 8);
  return out;
}

TriggerHeadRecord ReadTriggerHead(const Rows& r, int i) {
  return TriggerHeadRecord{r.Text(i, 0), r.Text(i, 1), r.Text(i, 2), r.Int(i, 3),
                           r.Int(i, 4),  r.Int(i, 5),  r.Text(i, 6), r.OptInt(i, 7)};
}

TriggerRevisionRecord ReadTriggerRevision(const Rows& r, int i, int c) {
  TriggerRevisionRecord out;
  out.project_id = r.Text(i, c + 0);
  out.trigger_id = r.Text(i, c + 1);
  out.revision = r.Int(i, c + 2);
  out.mutation_id = r.Text(i, c + 3);
  out.task_id = r.Text(i, c + 4);
  out.task_revision = r.Int(i, c + 5);
  out.task_digest = r.Text(i, c + 6);
  out.expression = r.Text(i, c + 7);
  out.timezone = r.Text(i, c + 8);
  out.misfire = r.Text(i, c + 9);
  out.enabled = r.Bool(i, c + 10);
  out.content_digest = r.Text(i, c + 11);
  out.created_at_ms = r.Int(i, c + 12);
  out.overlap = r.Text(i, c + 13);
  out.jitter_ms = r.Int(i, c + 14);
  return out;
}

ScheduleRecord ReadSchedule(const Rows& r, int i) {
  ScheduleRecord out;
  out.project_id = r.Text(i, 0);
  out.trigger_id = r.Text(i, 1);
  out.trigger_revision = r.Int(i, 2);
  out.next_fire_at_ms = r.OptInt(i, 3);
  out.last_scheduled_at_ms = r.OptInt(i, 4);
  out.state_version = r.Int(i, 5);
  out.published_at_ms = r.Int(i, 6);
  out.exhausted = r.Bool(i, 7);
  out.updated_at_ms = r.Int(i, 8);
  return out;
}

std::optional<int> OptInt32(const Rows& r, int i, int column) {
  std::optional<int64_t> value = r.OptInt(i, column);
  if (!value.has_value()) return std::nullopt;
  return static_cast<int>(*value);
}

RunRecord ReadRun(const Rows& r, int i) {
  RunRecord out;
  out.id = r.Text(i, 0);
  out.project_id = r.Text(i, 1);
  out.task_id = r.Text(i, 2);
  out.task_revision = r.Int(i, 3);
  out.task_digest = r.Text(i, 4);
  out.execution_revision_id = r.Text(i, 5);
  out.trigger_id = r.OptText(i, 6);
  out.trigger_revision = r.OptInt(i, 7);
  out.scheduled_for_ms = r.OptInt(i, 8);
  out.trigger_type = r.Text(i, 9);
  out.status = r.Text(i, 10);
  out.version = r.Int(i, 11);
  out.event_sequence = r.Int(i, 12);
  out.priority = static_cast<int>(r.Int(i, 13));
  out.idempotency_key = r.OptText(i, 14);
  out.retry_of_run_id = r.OptText(i, 15);
  out.created_at_ms = r.Int(i, 16);
  out.queued_at_ms = r.OptInt(i, 17);
  out.started_at_ms = r.OptInt(i, 18);
  out.finished_at_ms = r.OptInt(i, 19);
  out.retry_at_ms = r.OptInt(i, 20);
  out.cancel_requested_at_ms = r.OptInt(i, 21);
  out.cancel_reason = r.OptText(i, 22);
  out.error_code = r.OptText(i, 23);
  out.error_summary = r.OptText(i, 24);
  out.exit_code = OptInt32(r, i, 25);
  out.retry_policy.max_attempts = static_cast<int>(r.Int(i, 26));
  out.retry_policy.retry_on_lost = r.Bool(i, 27);
  out.retry_policy.safety = r.Text(i, 28);
  out.retry_policy.backoff_base_ms = r.Int(i, 29);
  out.retry_policy.backoff_max_ms = r.Int(i, 30);
  out.retry_policy.retry_on_timeout = r.Bool(i, 31);
  return out;
}

AttemptRecord ReadAttempt(const Rows& r, int i) {
  AttemptRecord out;
  out.id = r.Text(i, 0);
  out.run_id = r.Text(i, 1);
  out.attempt = static_cast<int>(r.Int(i, 2));
  out.status = r.Text(i, 3);
  out.executor_type = r.Text(i, 4);
  out.callback_sequence = r.Int(i, 5);
  out.pid = r.OptInt(i, 6);
  out.process_start_ticks = r.OptInt(i, 7);
  out.log_path = r.OptText(i, 8);
  out.created_at_ms = r.Int(i, 9);
  out.started_at_ms = r.OptInt(i, 10);
  out.finished_at_ms = r.OptInt(i, 11);
  out.exit_code = OptInt32(r, i, 12);
  out.error_code = r.OptText(i, 13);
  out.error_summary = r.OptText(i, 14);
  return out;
}

EventRecord ReadEvent(const Rows& r, int i) {
  EventRecord out;
  out.run_id = r.Text(i, 0);
  out.sequence = r.Int(i, 1);
  out.type = r.Text(i, 2);
  out.actor_type = r.Text(i, 3);
  out.attempt_id = r.OptText(i, 4);
  out.dedupe_key = r.OptText(i, 5);
  out.payload_json = r.Text(i, 6);
  out.created_at_ms = r.Int(i, 7);
  return out;
}

Status Execute(Tx& tx, std::string_view sql, const Params& params) {
  return tx.Exec(sql, params).status();
}

// Executes an UPDATE guarded by a compare-and-set; `on_miss` when no row matched.
Status ExecuteCas(Tx& tx, const Status& on_miss, std::string_view sql, const Params& params) {
  QL_ASSIGN_OR_RETURN(Rows rows, tx.Exec(sql, params));
  if (rows.affected() != 1) return on_miss;
  return Status();
}

std::string_view LockClause(Lock lock) {
  switch (lock) {
    case Lock::kShare:
      return " FOR SHARE";
    case Lock::kUpdate:
      // Not FOR UPDATE: the key never changes, and foreign-key checks of other transactions
      // (FOR KEY SHARE) must not wait for this one.
      return " FOR NO KEY UPDATE";
    case Lock::kNone:
      break;
  }
  return "";
}

Result<std::optional<ProjectRecord>> LoadProject(Tx& tx, const std::string& id, Lock lock) {
  return QueryOne<ProjectRecord>(
      tx, Cat({"SELECT ", kProjectColumns, " FROM projects p WHERE p.id = $1", LockClause(lock)}),
      {P(id)}, ReadProject);
}

Result<std::optional<ProjectRecord>> LoadProjectBySlug(Tx& tx, const std::string& slug) {
  static const std::string kSql =
      Cat({"SELECT ", kProjectColumns, " FROM projects p WHERE p.slug = $1"});
  return QueryOne<ProjectRecord>(tx, kSql, {P(slug)}, ReadProject);
}

// NotFound / Conflict unless `project` exists and is active.
Status RequireActiveProject(const std::optional<ProjectRecord>& project,
                            const std::string& project_id) {
  if (!project.has_value()) {
    return NotFound("project_not_found", Cat({"project ", project_id, " does not exist"}));
  }
  if (project->status != kProjectActive) {
    return Conflict("project_inactive",
                    Cat({"project ", project_id, " is ", project->status, ", not active"}));
  }
  return Status();
}

Result<std::optional<TaskHeadRecord>> LoadTaskHead(Tx& tx, const std::string& task_id, Lock lock) {
  return QueryOne<TaskHeadRecord>(
      tx,
      Cat({"SELECT ", kTaskHeadColumns, " FROM task_heads h WHERE h.task_id = $1",
           LockClause(lock)}),
      {P(task_id)}, ReadTaskHead);
}

Result<std::optional<TaskRevisionRecord>> LoadTaskRevision(Tx& tx, const std::string& task_id,
                                                           int64_t revision) {
  static const std::string kSql = Cat({"SELECT ", kTaskRevisionColumns,
                                       " FROM task_revisions tr WHERE tr.task_id = $1 AND "
                                       "tr.revision = $2"});
  return QueryOne<TaskRevisionRecord>(tx, kSql, {P(task_id), P(revision)}, ReadTaskRevision);
}

Result<std::optional<TaskRevisionRecord>> LoadTaskRevisionByMutation(Tx& tx,
                                                                     const std::string& mutation) {
  static const std::string kSql =
      Cat({"SELECT ", kTaskRevisionColumns, " FROM task_revisions tr WHERE tr.mutation_id = $1"});
  return QueryOne<TaskRevisionRecord>(tx, kSql, {P(mutation)}, ReadTaskRevision);
}

Result<std::optional<TriggerHeadRecord>> LoadTriggerHead(Tx& tx, const std::string& trigger_id,
                                                         Lock lock) {
  return QueryOne<TriggerHeadRecord>(
      tx,
      Cat({"SELECT ", kTriggerHeadColumns, " FROM trigger_heads th WHERE th.trigger_id = $1",
           LockClause(lock)}),
      {P(trigger_id)}, ReadTriggerHead);
}

Result<std::optional<TriggerRevisionRecord>> LoadTriggerRevisionByMutation(
    Tx& tx, const std::string& mutation) {
  static const std::string kSql = Cat(
      {"SELECT ", kTriggerRevisionColumns, " FROM trigger_revisions g WHERE g.mutation_id = $1"});
  return QueryOne<TriggerRevisionRecord>(
      tx, kSql, {P(mutation)}, [](const Rows& r, int i) { return ReadTriggerRevision(r, i); });
}

namespace {

// The occurrence a cron run's idempotency key names: what follows the prefix, split at its last
// two colons, when CronIdempotencyKey of the parts gives the key back.
std::optional<CronKeyParts> CronOccurrenceOfKey(const std::string& key) {
  if (!key.starts_with(kCronIdempotencyKeyPrefix)) return std::nullopt;
  const size_t last = key.rfind(':');
  const size_t middle = last == 0 ? std::string::npos : key.rfind(':', last - 1);
  if (middle == std::string::npos || middle < kCronIdempotencyKeyPrefix.size()) {
    return std::nullopt;
  }
  CronKeyParts parts;
  parts.trigger_id = key.substr(kCronIdempotencyKeyPrefix.size(),
                                middle - kCronIdempotencyKeyPrefix.size());
  const std::string revision = key.substr(middle + 1, last - middle - 1);
  const std::string scheduled = key.substr(last + 1);
  auto number = [](const std::string& text, int64_t& out) {
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    return ec == std::errc() && end == text.data() + text.size();
  };
  if (!number(revision, parts.trigger_revision) || !number(scheduled, parts.scheduled_for_ms) ||
      CronIdempotencyKey(parts.trigger_id, parts.trigger_revision, parts.scheduled_for_ms) !=
          key) {
    return std::nullopt;
  }
  return parts;
}

}  // namespace

RunListing RunListingQuery(const RunFilter& filter, const std::optional<RunPosition>& after,
                           int limit) {
  RunListing out;
  out.sql = Cat({"SELECT ", kRunColumns, kRunFrom, " WHERE true"});
  auto add = [&](std::string_view condition, std::string_view op, Param param) {
    out.params.push_back(std::move(param));
    out.sql += Cat({" AND ", condition, " ", op, " $", std::to_string(out.params.size())});
  };
  if (filter.project_id.has_value()) add("r.project_id", "=", P(*filter.project_id));
  if (filter.task_id.has_value()) add("r.task_id", "=", P(*filter.task_id));
  if (filter.trigger_id.has_value()) add("r.trigger_id", "=", P(*filter.trigger_id));
  if (filter.status.has_value()) add("r.status", "=", P(*filter.status));
  if (filter.created_from_ms.has_value()) {
    add("r.created_at_ms", ">=", P(*filter.created_from_ms));
  }
  if (filter.created_before_ms.has_value()) {
    add("r.created_at_ms", "<", P(*filter.created_before_ms));
  }
  if (filter.id_range.has_value()) {
    add("r.id", ">=", P(filter.id_range->first));
    add("r.id", "<=", P(filter.id_range->second));
  }
  if (after.has_value()) {
    out.params.push_back(P(after->created_at_ms));
    out.params.push_back(P(after->id));
    out.sql += Cat({" AND (r.created_at_ms, r.id) < ($", std::to_string(out.params.size() - 1),
                    ", $", std::to_string(out.params.size()), ")"});
  }
  out.params.push_back(P(limit));
  out.sql +=
      " ORDER BY r.created_at_ms DESC, r.id DESC LIMIT $" + std::to_string(out.params.size());
  return out;
}

Result<std::optional<RunRecord>> LoadRunByIdempotencyKey(Tx& tx, const std::string& project_id,
                                                         const std::string& key) {
  // A cron run stores no key: it is found by its occurrence (runs_cron_occurrence_key).
  if (std::optional<CronKeyParts> parts = CronOccurrenceOfKey(key); parts.has_value()) {
    static const std::string kCron =
        Cat({"SELECT ", kRunColumns, kRunFrom,
             " WHERE r.trigger_type = 'cron' AND r.trigger_id = $1 AND r.trigger_revision = $2 "
             "AND r.scheduled_for_ms = $3 AND r.project_id = $4"});
    QL_ASSIGN_OR_RETURN(std::optional<RunRecord> cron,
                        QueryOne<RunRecord>(tx, kCron,
                                            {P(parts->trigger_id), P(parts->trigger_revision),
                                             P(parts->scheduled_for_ms), P(project_id)},
                                            ReadRun));
    if (cron.has_value()) return cron;
  }
  static const std::string kSql = Cat(
      {"SELECT ", kRunColumns, kRunFrom, " WHERE r.project_id = $1 AND r.idempotency_key = $2"});
  return QueryOne<RunRecord>(tx, kSql, {P(project_id), P(key)}, ReadRun);
}

// Loads a run; with Lock::kUpdate the run row (not its policy) stays locked until the end of
// the transaction, so every change of one run is serialised on that row.
Statement LoadRunStatement(const std::string& run_id, Lock lock) {
  static const std::string kSql = Cat({"SELECT ", kRunColumns, kRunFrom, " WHERE r.id = $1"});
  static const std::string kLocked =
      Cat({"SELECT ", kRunColumns, kRunFrom, " WHERE r.id = $1 FOR NO KEY UPDATE OF r"});
  return {lock == Lock::kUpdate ? kLocked : kSql, {P(run_id)}};
}

Result<std::optional<RunRecord>> LoadRun(Tx& tx, const std::string& run_id, Lock lock) {
  const Statement s = LoadRunStatement(run_id, lock);
  return QueryOne<RunRecord>(tx, s.sql, s.params, ReadRun);
}

Result<RunRecord> RequireRun(Tx& tx, const std::string& run_id, Lock lock) {
  QL_ASSIGN_OR_RETURN(std::optional<RunRecord> run, LoadRun(tx, run_id, lock));
  if (!run.has_value()) return NotFound("run_not_found", Cat({"run ", run_id, " does not exist"}));
  return std::move(*run);
}

Statement LoadAttemptStatement(const std::string& attempt_id) {
  static const std::string kSql =
      Cat({"SELECT ", kAttemptColumns, " FROM run_attempts a WHERE a.id = $1"});
  return {kSql, {P(attempt_id)}};
}

Result<std::optional<AttemptRecord>> LoadAttempt(Tx& tx, const std::string& attempt_id) {
  const Statement s = LoadAttemptStatement(attempt_id);
  return QueryOne<AttemptRecord>(tx, s.sql, s.params, ReadAttempt);
}

Result<std::optional<AttemptRecord>> LoadLatestAttempt(Tx& tx, const std::string& run_id) {
  static const std::string kSql = Cat({"SELECT ", kAttemptColumns,
                                       " FROM run_attempts a WHERE a.run_id = $1 "
                                       "ORDER BY a.attempt DESC LIMIT 1"});
  return QueryOne<AttemptRecord>(tx, kSql, {P(run_id)}, ReadAttempt);
}

namespace {

// Refuses an event that names an attempt of another run (attempt_not_in_run).
Status RequireAttemptOfRun(Tx& tx, const std::string& run_id, const NewEvent& event) {
  if (!event.attempt_id.has_value()) return Status::Ok();
  QL_ASSIGN_OR_RETURN(std::optional<std::string> owner,
                      QueryOne<std::string>(tx, "SELECT run_id FROM run_attempts WHERE id = $1",
                                            {P(*event.attempt_id)},
                                            [](const Rows& r, int i) { return r.Text(i, 0); }));
  if (owner.has_value() && *owner == run_id) return Status::Ok();
  return InvalidArgument("attempt_not_in_run",
                         Cat({"event ", Quote(event.type), " names attempt ", *event.attempt_id,
                              ", which is not an attempt of run ", run_id}));
}

constexpr char kInsertEventRow[] =
    "INSERT INTO run_events (run_id, sequence, type, actor_type, attempt_id, dedupe_key, "
    "payload_json, created_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";

Status InsertEventRow(Tx& tx, const std::string& run_id, int64_t sequence, const NewEvent& event,
                      const std::string& canonical_payload, int64_t now_ms) {
  return Execute(tx, kInsertEventRow,
                 {P(run_id), P(sequence), P(event.type), P(event.actor_type), P(event.attempt_id),
                  P(event.dedupe_key), P(canonical_payload), P(now_ms)});
}

}  // namespace

// Inserts one event at `sequence`; the attempt it names must belong to the run.
Status InsertEvent(Tx& tx, const std::string& run_id, int64_t sequence, const NewEvent& event,
                   const std::string& canonical_payload, int64_t now_ms) {
  QL_RETURN_IF_ERROR(RequireAttemptOfRun(tx, run_id, event));
  return InsertEventRow(tx, run_id, sequence, event, canonical_payload, now_ms);
}

bool EventsNeedNoLookUp(const std::vector<PreparedEvent>& events,
                        const std::optional<std::string>& verified_attempt_id) {
  return std::all_of(events.begin(), events.end(), [&](const PreparedEvent& prepared) {
    return !prepared.event->attempt_id.has_value() ||
           prepared.event->attempt_id == verified_attempt_id;
  });
}

Status InsertEvents(Tx& tx, const std::string& run_id, int64_t after_sequence,
                    const std::vector<PreparedEvent>& events,
                    const std::optional<std::string>& verified_attempt_id, int64_t now_ms) {
  for (const PreparedEvent& prepared : events) {
    if (prepared.event->attempt_id != verified_attempt_id) {
      QL_RETURN_IF_ERROR(RequireAttemptOfRun(tx, run_id, *prepared.event));
    }
  }
  if (events.empty()) return Status::Ok();
  const Statement insert = EventsInsertStatement(run_id, after_sequence, events, now_ms);
  return Execute(tx, insert.sql, insert.params);
}

Statement EventsInsertStatement(const std::string& run_id, int64_t after_sequence,
                                const std::vector<PreparedEvent>& events, int64_t now_ms) {
  if (events.size() == 1) {
    const NewEvent& event = *events.front().event;
    return {kInsertEventRow,
            {P(run_id), P(after_sequence + 1), P(event.type), P(event.actor_type),
             P(event.attempt_id), P(event.dedupe_key), P(events.front().payload), P(now_ms)}};
  }
  std::vector<std::optional<std::string>> sequence, type, actor, attempt, dedupe, payload;
  for (const PreparedEvent& prepared : events) {
    const NewEvent& event = *prepared.event;
    sequence.push_back(std::to_string(after_sequence + 1 + static_cast<int64_t>(type.size())));
    type.push_back(event.type);
    actor.push_back(event.actor_type);
    attempt.push_back(event.attempt_id);
    dedupe.push_back(event.dedupe_key);
    payload.push_back(prepared.payload);
  }
  return {"INSERT INTO run_events (run_id, sequence, type, actor_type, attempt_id, "
          "dedupe_key, payload_json, created_at_ms) SELECT $1, v.sequence, v.type, "
          "v.actor_type, v.attempt_id, v.dedupe_key, v.payload_json, $2 FROM "
          "unnest($3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[], "
          "$8::text[]) AS v(sequence, type, actor_type, attempt_id, dedupe_key, "
          "payload_json)",
          {P(run_id), P(now_ms), PArray(sequence), PArray(type), PArray(actor), PArray(attempt),
           PArray(dedupe), PArray(payload)}};
}

// True when execution revision `run.execution_revision_id` is the plan of (task, revision,
// executor type) with the run's task digest in the run's project.
Result<bool> ExecutionRevisionMatches(Tx& tx, const NewRun& run) {
  static const std::string kSql =
      Cat({"SELECT ", kExecutionColumns, " FROM execution_revisions e WHERE e.id = $1"});
  QL_ASSIGN_OR_RETURN(
      std::optional<ExecutionRevisionRecord> exec,
      QueryOne<ExecutionRevisionRecord>(tx, kSql, {P(run.execution_revision_id)}, ReadExecution));
  return exec.has_value() && exec->task_id == run.task_id &&
         exec->task_revision == run.task_revision && exec->task_digest == run.task_digest &&
         exec->executor_type == run.executor_type && exec->project_id == run.project_id;
}

}  // namespace ql::pg
