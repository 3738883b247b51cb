#include "ql/storage/postgres/pg_run_rows.h"

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "ql/core/canonical_json.h"
#include "ql/core/notification_store.h"
#include "ql/core/overlap.h"
#include "ql/core/run_payloads.h"
#include "ql/core/states.h"
#include "ql/core/store_commands.h"
#include "ql/storage/postgres/pg_notifications.h"
#include "ql/storage/postgres/pg_store_rows.h"
#include "ql/storage/postgres/pg_worker.h"

namespace ql::pg {
namespace {

using Column = std::vector<std::optional<std::string>>;

template <typename T>
std::optional<std::string> Text(const std::optional<T>& v) {
  if (!v.has_value()) return std::nullopt;
  if constexpr (std::is_same_v<T, std::string>) {
    return *v;
  } else {
    return std::to_string(*v);
  }
}

// A cron run stores no idempotency key (kRunColumns rebuilds it; runs_cron_occurrence_key keeps
// its occurrence unique) and, admitted by the scheduler, no admission events
// (DeriveAdmissionEvents rebuilds them).
#define KEY_UNLESS_CRON "CASE WHEN trigger_type = 'cron' THEN NULL ELSE key END"
#define STORES_ADMISSION_EVENTS "(trigger_type <> 'cron' OR actor <> 'scheduler')"

}  // namespace

Status InsertQueuedRuns(Tx& tx, const std::vector<const NewRun*>& runs, int64_t now_ms) {
  if (runs.empty()) return Status::Ok();
  Column id, project, task, task_revision, task_digest, execution, trigger, trigger_revision,
      scheduled, trigger_type, priority, key, retry_of, max_attempts, retry_on_lost, safety,
      backoff_base, backoff_max, attempt, executor, actor, created, queued, release,
      retry_on_timeout;
  for (const NewRun* run : runs) {
    QL_ASSIGN_OR_RETURN(std::string created_payload, RunCreatedPayload(*run));
    QL_ASSIGN_OR_RETURN(std::string queued_payload, RunQueuedPayload(1, run->executor_type));
    const RetryPolicy& policy = run->retry_policy;
    id.push_back(run->run_id);
    project.push_back(run->project_id);
    task.push_back(run->task_id);
    task_revision.push_back(std::to_string(run->task_revision));
    task_digest.push_back(run->task_digest);
    execution.push_back(run->execution_revision_id);
    trigger.push_back(run->trigger_id);
    trigger_revision.push_back(Text(run->trigger_revision));
    scheduled.push_back(Text(run->scheduled_for_ms));
    release.push_back(Text(run->release_at_ms));
    trigger_type.push_back(run->trigger_type);
    priority.push_back(std::to_string(run->priority));
    key.push_back(run->idempotency_key);
    retry_of.push_back(run->retry_of_run_id);
    max_attempts.push_back(std::to_string(policy.max_attempts));
    retry_on_lost.push_back(policy.retry_on_lost ? "t" : "f");
    retry_on_timeout.push_back(policy.retry_on_timeout ? "t" : "f");
    safety.push_back(policy.safety);
    backoff_base.push_back(std::to_string(policy.backoff_base_ms));
    backoff_max.push_back(std::to_string(policy.backoff_max_ms));
    attempt.push_back(run->attempt_id);
    executor.push_back(run->executor_type);
    actor.push_back(run->actor_type);
    created.push_back(std::move(created_payload));
    queued.push_back(std::move(queued_payload));
  }
  // One round trip for every row of every run. Every dependent insert reads the runs insert's
  // RETURNING, so a reused run id always fails on runs_pkey first (duplicate_id) and never on
  // an attempt or event key, whichever order the executor runs the CTEs in.
  static constexpr char kSql[] =
      "WITH v AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], "
      "$5::text[], $6::text[], $7::text[], $8::bigint[], $9::bigint[], $10::text[], "
      "$11::integer[], $12::text[], $13::text[], $14::integer[], $15::boolean[], $16::text[], "
      "$17::bigint[], $18::bigint[], $19::text[], $20::text[], $21::text[], $22::text[], "
      "$23::text[], $27::bigint[], $28::boolean[]) AS v(id, project_id, task_id, task_revision, "
      "task_digest, execution, trigger_id, trigger_revision, scheduled, trigger_type, priority, "
      "key, retry_of, max_attempts, retry_on_lost, safety, backoff_base, backoff_max, "
      "attempt_id, executor, actor, created, queued, release, retry_on_timeout)), "
      "r AS (INSERT INTO ql3.runs (id, project_id, task_id, task_revision, task_digest, "
      "execution_revision_id, trigger_id, trigger_revision, scheduled_for_ms, trigger_type, "
      "status, version, event_sequence, priority, idempotency_key, retry_of_run_id, "
      "created_at_ms, queued_at_ms, retry_max_attempts, retry_on_lost, retry_safety, "
      "retry_backoff_base_ms, retry_backoff_max_ms, retry_on_timeout) SELECT id, project_id, "
      "task_id, task_revision, task_digest, execution, trigger_id, trigger_revision, scheduled, "
      "trigger_type, 'queued', 1, 2, priority, " KEY_UNLESS_CRON ", retry_of, $24::bigint, "
      "greatest($24::bigint, release), max_attempts, retry_on_lost, safety, backoff_base, "
      "backoff_max, retry_on_timeout FROM v RETURNING id), "
      "a AS (INSERT INTO ql3.run_attempts (id, run_id, attempt, status, executor_type, "
      "callback_sequence, created_at_ms) SELECT attempt_id, id, 1, 'claimed', executor, 0, "
      "$24::bigint FROM v JOIN r USING (id) RETURNING id) "
      "INSERT INTO ql3.run_events (run_id, sequence, type, actor_type, attempt_id, dedupe_key, "
      "payload_json, created_at_ms) "
      "SELECT id, 1, $25::text, actor, NULL, NULL, created, $24::bigint FROM v JOIN r USING (id) "
      "WHERE " STORES_ADMISSION_EVENTS " UNION ALL SELECT id, 2, $26::text, actor, attempt_id, "
      "NULL, queued, $24::bigint FROM v JOIN r USING (id) WHERE " STORES_ADMISSION_EVENTS;
  return tx
      .Exec(kSql, {PArray(id),
                   PArray(project),
                   PArray(task),
                   PArray(task_revision),
                   PArray(task_digest),
                   PArray(execution),
                   PArray(trigger),
                   PArray(trigger_revision),
                   PArray(scheduled),
                   PArray(trigger_type),
                   PArray(priority),
                   PArray(key),
                   PArray(retry_of),
                   PArray(max_attempts),
                   PArray(retry_on_lost),
                   PArray(safety),
                   PArray(backoff_base),
                   PArray(backoff_max),
                   PArray(attempt),
                   PArray(executor),
                   PArray(actor),
                   PArray(created),
                   PArray(queued),
                   P(now_ms),
                   P(kEventRunCreated),
                   P(RunEventType(RunStatus::kQueued)),
                   PArray(release),
                   PArray(retry_on_timeout)})
      .status();
}

Result<std::vector<EventRecord>> DeriveAdmissionEvents(Tx& tx, const RunRecord& run) {
  std::vector<EventRecord> out;
  if (run.trigger_type != TriggerTypeName(TriggerType::kCron)) return out;
  QL_ASSIGN_OR_RETURN(
      Rows rows,
      tx.Exec("SELECT EXISTS (SELECT 1 FROM run_events WHERE run_id = $1 AND sequence = 1), "
              "a.id, a.executor_type FROM (SELECT 1) one LEFT JOIN run_attempts a "
              "ON a.run_id = $1 AND a.attempt = 1",
              {P(run.id)}));
  const bool stored = rows.Bool(0, 0);
  const std::optional<std::string> attempt_id = rows.OptText(0, 1);
  const std::optional<std::string> executor = rows.OptText(0, 2);
  QL_RETURN_IF_ERROR(rows.status());
  if (stored) return out;
  NewRun admitted;
  admitted.task_revision = run.task_revision;
  admitted.trigger_type = run.trigger_type;
  admitted.trigger_id = run.trigger_id;
  admitted.trigger_revision = run.trigger_revision;
  admitted.scheduled_for_ms = run.scheduled_for_ms;
  admitted.retry_of_run_id = run.retry_of_run_id;
  EventRecord created;
  created.run_id = run.id;
  created.sequence = 1;
  created.type = std::string(kEventRunCreated);
  created.actor_type = std::string(ActorTypeName(ActorType::kScheduler));
  QL_ASSIGN_OR_RETURN(created.payload_json, RunCreatedPayload(admitted));
  created.created_at_ms = run.created_at_ms;
  EventRecord second = created;
  second.sequence = 2;
  if (attempt_id.has_value()) {
    second.type = RunEventType(RunStatus::kQueued);
    second.attempt_id = attempt_id;
    QL_ASSIGN_OR_RETURN(second.payload_json, RunQueuedPayload(1, executor.value_or("")));
  } else {
    second.type = RunEventType(RunStatus::kSkipped);
    QL_ASSIGN_OR_RETURN(second.payload_json, RunSkippedPayload(run.error_code.value_or("")));
  }
  out.push_back(std::move(created));
  out.push_back(std::move(second));
  return out;
}

Result<int64_t> CountDerivedAdmissionEvents(Tx& tx, const Param& run_ids) {
  QL_ASSIGN_OR_RETURN(
      Rows rows,
      tx.Exec("SELECT 2 * count(*) FROM runs r WHERE r.id = ANY($1::text[]) AND "
              "r.trigger_type = 'cron' AND NOT EXISTS (SELECT 1 FROM run_events e "
              "WHERE e.run_id = r.id AND e.sequence = 1)",
              {run_ids}));
  const int64_t count = rows.Int(0, 0);
  QL_RETURN_IF_ERROR(rows.status());
  return count;
}

Status CancelRunInTx(Tx& tx, const RunRecord& run, const std::string& reason,
                     const std::string& actor_type, const std::string& payload, int64_t now_ms) {
  QL_ASSIGN_OR_RETURN(RunStatus from, StoredRunStatus(run));
  if (IsTerminal(from)) {
    return Conflict("run_terminal",
                    Cat({"run ", run.id, " is ", run.status, "; there is nothing to cancel"}));
  }
  int64_t sequence = run.event_sequence;
  const NewEvent requested{std::string(kEventRunCancelRequested), actor_type, std::nullopt,
                           std::nullopt, payload};
  QL_RETURN_IF_ERROR(InsertEvent(tx, run.id, ++sequence, requested, payload, now_ms));

  RunStatus next = from;
  std::optional<int64_t> finished;
  if (from == RunStatus::kCreated || from == RunStatus::kQueued ||
      from == RunStatus::kRetryWait) {
    // Not started: nothing will observe the intent later, so the run stops here.
    QL_ASSIGN_OR_RETURN(std::optional<AttemptRecord> latest, LoadLatestAttempt(tx, run.id));
    if (latest.has_value()) {
      QL_ASSIGN_OR_RETURN(AttemptStatus current, StoredAttemptStatus(*latest));
      if (!IsTerminal(current)) {
        QL_RETURN_IF_ERROR(CheckAttemptTransition(current, AttemptStatus::kCancelled));
        QL_RETURN_IF_ERROR(ExecuteCas(
            tx, Conflict("attempt_status_conflict", Cat({"attempt ", latest->id, " moved on"})),
            "UPDATE run_attempts SET status = 'cancelled', "
            "finished_at_ms = coalesce(finished_at_ms, $1) WHERE id = $2 AND status = $3",
            {P(now_ms), P(latest->id), P(AttemptStatusName(current))}));
        QL_RETURN_IF_ERROR(pg::ReleaseLease(tx, latest->id, now_ms));
        const NewEvent cancelled{AttemptEventType(AttemptStatus::kCancelled), actor_type,
                                 latest->id, std::nullopt, "{}"};
        QL_RETURN_IF_ERROR(InsertEvent(tx, run.id, ++sequence, cancelled, "{}", now_ms));
      }
    }
    QL_RETURN_IF_ERROR(CheckRunTransition(from, RunStatus::kCancelled));
    next = RunStatus::kCancelled;
    finished = now_ms;
    const NewEvent cancelled{RunEventType(RunStatus::kCancelled), actor_type, std::nullopt,
                             std::nullopt, "{}"};
    QL_RETURN_IF_ERROR(InsertEvent(tx, run.id, ++sequence, cancelled, "{}", now_ms));
  }
  QL_RETURN_IF_ERROR(
      ExecuteCas(tx, Conflict("version_conflict", Cat({"run ", run.id, " moved on"})),
                 "UPDATE runs SET status = $1, version = version + 1, event_sequence = $2, "
                 "cancel_requested_at_ms = $3, cancel_reason = $4, "
                 "finished_at_ms = coalesce($5, finished_at_ms) WHERE id = $6 AND version = $7",
                 {P(RunStatusName(next)), P(sequence), P(now_ms), P(reason), P(finished),
                  P(run.id), P(run.version)}));
  return Status::Ok();
}

Status InsertSkippedRuns(Tx& tx, const std::vector<SkippedRun>& runs, int64_t now_ms) {
  if (runs.empty()) return Status::Ok();
  Column id, project, task, task_revision, task_digest, execution, trigger, trigger_revision,
      scheduled, trigger_type, priority, key, reason, summary, max_attempts, retry_on_lost, safety,
      backoff_base, backoff_max, actor, created, skipped, retry_on_timeout;
  for (const SkippedRun& s : runs) {
    const NewRun& run = *s.run;
    QL_ASSIGN_OR_RETURN(std::string created_payload, RunCreatedPayload(run));
    QL_ASSIGN_OR_RETURN(std::string skipped_payload, RunSkippedPayload(s.reason));
    const RetryPolicy& policy = run.retry_policy;
    id.push_back(run.run_id);
    project.push_back(run.project_id);
    task.push_back(run.task_id);
    task_revision.push_back(std::to_string(run.task_revision));
    task_digest.push_back(run.task_digest);
    execution.push_back(run.execution_revision_id);
    trigger.push_back(run.trigger_id);
    trigger_revision.push_back(Text(run.trigger_revision));
    scheduled.push_back(Text(run.scheduled_for_ms));
    trigger_type.push_back(run.trigger_type);
    priority.push_back(std::to_string(run.priority));
    key.push_back(run.idempotency_key);
    reason.push_back(std::string(s.reason));
    summary.push_back(s.summary);
    max_attempts.push_back(std::to_string(policy.max_attempts));
    retry_on_lost.push_back(policy.retry_on_lost ? "t" : "f");
    retry_on_timeout.push_back(policy.retry_on_timeout ? "t" : "f");
    safety.push_back(policy.safety);
    backoff_base.push_back(std::to_string(policy.backoff_base_ms));
    backoff_max.push_back(std::to_string(policy.backoff_max_ms));
    actor.push_back(run.actor_type);
    created.push_back(std::move(created_payload));
    skipped.push_back(std::move(skipped_payload));
  }
  // As InsertQueuedRuns, without the attempt: the dependent inserts read the runs insert's
  // RETURNING.
  static constexpr char kSql[] =
      "WITH v AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], "
      "$5::text[], $6::text[], $7::text[], $8::bigint[], $9::bigint[], $10::text[], "
      "$11::integer[], $12::text[], $13::text[], $14::text[], $15::integer[], $16::boolean[], "
      "$17::text[], $18::bigint[], $19::bigint[], $20::text[], $21::text[], $22::text[], "
      "$26::boolean[]) AS v(id, project_id, task_id, task_revision, task_digest, execution, "
      "trigger_id, trigger_revision, scheduled, trigger_type, priority, key, reason, summary, "
      "max_attempts, retry_on_lost, safety, backoff_base, backoff_max, actor, created, skipped, "
      "retry_on_timeout)), "
      "r AS (INSERT INTO ql3.runs (id, project_id, task_id, task_revision, task_digest, "
      "execution_revision_id, trigger_id, trigger_revision, scheduled_for_ms, trigger_type, "
      "status, version, event_sequence, priority, idempotency_key, created_at_ms, "
      "finished_at_ms, error_code, error_summary, retry_max_attempts, retry_on_lost, "
      "retry_safety, retry_backoff_base_ms, retry_backoff_max_ms, retry_on_timeout) SELECT id, "
      "project_id, task_id, task_revision, task_digest, execution, trigger_id, trigger_revision, "
      "scheduled, trigger_type, 'skipped', 1, 2, priority, " KEY_UNLESS_CRON
      ", $23::bigint, $23::bigint, reason, summary, max_attempts, retry_on_lost, safety, "
      "backoff_base, backoff_max, retry_on_timeout FROM v RETURNING id) "
      "INSERT INTO ql3.run_events (run_id, sequence, type, actor_type, attempt_id, dedupe_key, "
      "payload_json, created_at_ms) "
      "SELECT id, 1, $24::text, actor, NULL, NULL, created, $23::bigint FROM v JOIN r USING (id) "
      "WHERE " STORES_ADMISSION_EVENTS " UNION ALL SELECT id, 2, $25::text, actor, NULL, NULL, "
      "skipped, $23::bigint FROM v JOIN r USING (id) WHERE " STORES_ADMISSION_EVENTS;
  const Status inserted = tx.Exec(kSql, {PArray(id),
                                         PArray(project),
                                         PArray(task),
                                         PArray(task_revision),
                                         PArray(task_digest),
                                         PArray(execution),
                                         PArray(trigger),
                                         PArray(trigger_revision),
                                         PArray(scheduled),
                                         PArray(trigger_type),
                                         PArray(priority),
                                         PArray(key),
                                         PArray(reason),
                                         PArray(summary),
                                         PArray(max_attempts),
                                         PArray(retry_on_lost),
                                         PArray(safety),
                                         PArray(backoff_base),
                                         PArray(backoff_max),
                                         PArray(actor),
                                         PArray(created),
                                         PArray(skipped),
                                         P(now_ms),
                                         P(kEventRunCreated),
                                         P(RunEventType(RunStatus::kSkipped)),
                                         PArray(retry_on_timeout)})
                              .status();
  QL_RETURN_IF_ERROR(inserted);
  // The skips' notifications commit with them.
  std::unique_ptr<NotificationTx> notifications = NewNotificationTx(tx);
  for (const SkippedRun& s : runs) {
    QL_RETURN_IF_ERROR(NotifyRunOutcomeInTx(
        *notifications, s.run->project_id, s.run->task_id,
        [&] { return RequireRun(tx, s.run->run_id); }, RunStatus::kSkipped, now_ms));
  }
  return Status::Ok();
}

Result<std::optional<SkippedRun>> ApplyOverlapInTx(Tx& tx, const NewRun& run,
                                                   const std::string& overlap,
                                                   std::optional<int64_t> concurrency,
                                                   int64_t unwritten) {
  QL_ASSIGN_OR_RETURN(OverlapPolicy policy, ParseOverlapPolicy(overlap));
  std::optional<SkippedRun> none;
  if (policy == OverlapPolicy::kAllow && !concurrency.has_value()) return none;
  std::vector<RunRecord> previous;
  if (policy == OverlapPolicy::kForbid) {
    // One probe of the partial index runs_unfinished (task_id, trigger_id, id): a trigger's
    // runs are its task's.
    static const std::string kSql =
        Cat({"SELECT ", kRunColumns, kRunFrom, " WHERE r.task_id = $1 AND r.trigger_id = $2 AND r.",
             kUnfinishedRunSql, " ORDER BY r.id LIMIT 1"});
    QL_ASSIGN_OR_RETURN(previous, QueryAll<RunRecord>(tx, kSql, {P(run.task_id), P(run.trigger_id)},
                                                      ReadRun));
    if (!previous.empty()) {
      return std::optional<SkippedRun>(
          SkippedRun{&run, kSkipReasonOverlap,
                     Cat({"run ", previous.front().id, " of trigger ", *run.trigger_id, " is ",
                          previous.front().status})});
    }
  } else if (policy == OverlapPolicy::kReplace) {
    // Locked, so a run that finishes meanwhile is read as it ends up (and left alone).
    static const std::string kSql =
        Cat({"SELECT ", kRunColumns, kRunFrom, " WHERE r.task_id = $1 AND r.trigger_id = $2 AND r.",
             kUnfinishedRunSql, " ORDER BY r.id FOR UPDATE OF r"});
    QL_ASSIGN_OR_RETURN(previous, QueryAll<RunRecord>(tx, kSql, {P(run.task_id), P(run.trigger_id)},
                                                      ReadRun));
  }
  if (concurrency.has_value()) {
    static const std::string kCount = Cat(
        {"SELECT count(*) FROM runs r WHERE r.task_id = $1 AND r.", kUnfinishedRunSql});
    QL_ASSIGN_OR_RETURN(Rows rows, tx.Exec(kCount, {P(run.task_id)}));
    int64_t busy = rows.Int(0, 0) + unwritten;
    QL_RETURN_IF_ERROR(rows.status());
    // The runs a `replace` occurrence cancels make room for it.
    busy -= static_cast<int64_t>(previous.size());
    if (busy >= *concurrency) {
      return std::optional<SkippedRun>(SkippedRun{
          &run, kSkipReasonConcurrency,
          Cat({"task ", run.task_id, " has ", std::to_string(busy),
               " unfinished run(s); its concurrency limit is ", std::to_string(*concurrency)})});
    }
  }
  if (!previous.empty()) {
    QL_ASSIGN_OR_RETURN(std::string reason_json,
                        CanonicalJson(nlohmann::json{{"reason", kCancelReasonReplaced}}));
    QL_ASSIGN_OR_RETURN(std::string payload,
                        CanonicalEventPayload(kEventRunCancelRequested, reason_json));
    for (const RunRecord& old : previous) {
      if (old.cancel_requested_at_ms.has_value()) continue;  // the first intent wins
      QL_RETURN_IF_ERROR(CancelRunInTx(tx, old, std::string(kCancelReasonReplaced),
                                       run.actor_type, payload, run.now_ms));
    }
  }
  return none;
}

Status InsertQueuedRun(Tx& tx, const NewRun& run, int64_t now_ms) {
  return InsertQueuedRuns(tx, {&run}, now_ms);
}

}  // namespace ql::pg
