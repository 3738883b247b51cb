#include "ql/storage/postgres/pg_run_rows.h"

#include <string>

#include "ql/core/run_payloads.h"
#include "ql/core/states.h"

namespace ql::pg {

Status InsertQueuedRun(Tx& tx, const NewRun& run, int64_t now_ms) {
  QL_ASSIGN_OR_RETURN(std::string created, RunCreatedPayload(run));
  QL_ASSIGN_OR_RETURN(std::string queued, RunQueuedPayload(1, run.executor_type));
  // One round trip: the run, its policy, its attempt and both events.
  static constexpr char kSql[] =
      "WITH r AS (INSERT INTO ql3.runs (id, project_id, task_id, task_revision, task_digest, "
      "execution_revision_id, trigger_id, trigger_revision, scheduled_for_ms, trigger_type, "
      "status, version, event_sequence, priority, idempotency_key, retry_of_run_id, "
      "created_at_ms, queued_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 'queued', "
      "1, 2, $11, $12, $13, $14, $14) RETURNING id), "
      "p AS (INSERT INTO ql3.run_retry_policies (run_id, max_attempts, retry_on_lost, safety, "
      "backoff_base_ms, backoff_max_ms) SELECT id, $15::integer, $16::boolean, $17::text, "
      "$18::bigint, $19::bigint FROM r RETURNING "
      "run_id), "
      "a AS (INSERT INTO ql3.run_attempts (id, run_id, attempt, status, executor_type, "
      "callback_sequence, created_at_ms) SELECT $20::text, id, 1, 'claimed', $21::text, 0, "
      "$14::bigint FROM r "
      "RETURNING id) "
      "INSERT INTO ql3.run_events (run_id, sequence, type, actor_type, attempt_id, dedupe_key, "
      "payload_json, created_at_ms) "
      "SELECT r.id, 1, $22::text, $23::text, NULL, NULL, $24::text, $14::bigint FROM r "
      "UNION ALL SELECT r.id, 2, $25::text, $23::text, a.id, NULL, $26::text, $14::bigint FROM r, "
      "a";
  const RetryPolicy& policy = run.retry_policy;
  return tx
      .Exec(kSql, {P(run.run_id),
                   P(run.project_id),
                   P(run.task_id),
                   P(run.task_revision),
                   P(run.task_digest),
                   P(run.execution_revision_id),
                   P(run.trigger_id),
                   P(run.trigger_revision),
                   P(run.scheduled_for_ms),
                   P(run.trigger_type),
                   P(run.priority),
                   P(run.idempotency_key),
                   P(run.retry_of_run_id),
                   P(now_ms),
                   P(policy.max_attempts),
                   P(policy.retry_on_lost),
                   P(policy.safety),
                   P(policy.backoff_base_ms),
                   P(policy.backoff_max_ms),
                   P(run.attempt_id),
                   P(run.executor_type),
                   P(kEventRunCreated),
                   P(run.actor_type),
                   P(created),
                   P(RunEventType(RunStatus::kQueued)),
                   P(queued)})
      .status();
}

}  // namespace ql::pg
