#include "ql/storage/postgres/pg_run_rows.h"

#include <optional>
#include <string>

#include "ql/core/run_payloads.h"
#include "ql/core/states.h"

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

}  // namespace

Status InsertQueuedRuns(Tx& tx, const std::vector<const NewRun*>& runs, int64_t now_ms) {
  if (runs.empty()) return Status::Ok();
  Column id, project, task, task_revision, task_digest, execution, trigger, trigger_revision,
      scheduled, trigger_type, priority, key, retry_of, max_attempts, retry_on_lost, safety,
      backoff_base, backoff_max, attempt, executor, actor, created, queued;
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
    trigger_type.push_back(run->trigger_type);
    priority.push_back(std::to_string(run->priority));
    key.push_back(run->idempotency_key);
    retry_of.push_back(run->retry_of_run_id);
    max_attempts.push_back(std::to_string(policy.max_attempts));
    retry_on_lost.push_back(policy.retry_on_lost ? "t" : "f");
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
  // a policy or event key, whichever order the executor runs the CTEs in.
  static constexpr char kSql[] =
      "WITH v AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], "
      "$5::text[], $6::text[], $7::text[], $8::bigint[], $9::bigint[], $10::text[], "
      "$11::integer[], $12::text[], $13::text[], $14::integer[], $15::boolean[], $16::text[], "
      "$17::bigint[], $18::bigint[], $19::text[], $20::text[], $21::text[], $22::text[], "
      "$23::text[]) AS v(id, project_id, task_id, task_revision, task_digest, execution, "
      "trigger_id, trigger_revision, scheduled, trigger_type, priority, key, retry_of, "
      "max_attempts, retry_on_lost, safety, backoff_base, backoff_max, attempt_id, executor, "
      "actor, created, queued)), "
      "r AS (INSERT INTO ql3.runs (id, project_id, task_id, task_revision, task_digest, "
      "execution_revision_id, trigger_id, trigger_revision, scheduled_for_ms, trigger_type, "
      "status, version, event_sequence, priority, idempotency_key, retry_of_run_id, "
      "created_at_ms, queued_at_ms) SELECT id, project_id, task_id, task_revision, task_digest, "
      "execution, trigger_id, trigger_revision, scheduled, trigger_type, 'queued', 1, 2, "
      "priority, key, retry_of, $24::bigint, $24::bigint FROM v RETURNING id), "
      "p AS (INSERT INTO ql3.run_retry_policies (run_id, max_attempts, retry_on_lost, safety, "
      "backoff_base_ms, backoff_max_ms) SELECT id, max_attempts, retry_on_lost, safety, "
      "backoff_base, backoff_max FROM v JOIN r USING (id) RETURNING run_id), "
      "a AS (INSERT INTO ql3.run_attempts (id, run_id, attempt, status, executor_type, "
      "callback_sequence, created_at_ms) SELECT attempt_id, id, 1, 'claimed', executor, 0, "
      "$24::bigint FROM v JOIN r USING (id) RETURNING id) "
      "INSERT INTO ql3.run_events (run_id, sequence, type, actor_type, attempt_id, dedupe_key, "
      "payload_json, created_at_ms) "
      "SELECT id, 1, $25::text, actor, NULL, NULL, created, $24::bigint FROM v JOIN r USING (id) "
      "UNION ALL SELECT id, 2, $26::text, actor, attempt_id, NULL, queued, $24::bigint "
      "FROM v JOIN r USING (id)";
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
                   P(RunEventType(RunStatus::kQueued))})
      .status();
}

Status InsertQueuedRun(Tx& tx, const NewRun& run, int64_t now_ms) {
  return InsertQueuedRuns(tx, {&run}, now_ms);
}

}  // namespace ql::pg
