-- Compact runs: what each admitted run costs in the run tables, indexes included.
--  * A run's retry policy snapshot lives in five narrow columns of the run row instead of a
--    table with one row (and one index entry) per run.
--  * A cron run stores no idempotency key: its key is CronIdempotencyKey(trigger_id,
--    trigger_revision, scheduled_for_ms), rebuilt when read. The exactly-once guarantee of
--    admission is the unique index runs_cron_occurrence_key on those three columns of cron
--    runs; other keys stay unique per project in runs_idempotency_key_key, which now holds only
--    runs that carry a key.
--  * The admission events of a cron run (run.created, and run.queued or run.skipped) are not
--    stored: they are derived from the run row and its first attempt when read. Runs admitted
--    before this migration keep their stored events.
--  * Only events with a dedupe key enter run_events_dedupe_key_key.
--  * Listing indexes: every run listing is scoped to a project, so runs_by_created goes. The
--    listings' indexes end at created_at_ms: a listing walks one backwards and orders the runs
--    of one millisecond by id (an incremental sort of a few rows), and the runs an admission
--    batch writes at one millisecond share one deduplicated index entry. The overlap and
--    concurrency checks share one index of unfinished runs by (task_id, trigger_id, id)
--    instead of one by trigger and one by task.

ALTER TABLE ql3.runs
  ADD COLUMN retry_max_attempts smallint,
  ADD COLUMN retry_backoff_base_ms integer,
  ADD COLUMN retry_backoff_max_ms integer,
  ADD COLUMN retry_on_lost boolean,
  ADD COLUMN retry_safety text;

ALTER TABLE ql3.runs DROP CONSTRAINT runs_cron_key_check;

UPDATE ql3.runs r SET retry_max_attempts = p.max_attempts,
    retry_backoff_base_ms = p.backoff_base_ms, retry_backoff_max_ms = p.backoff_max_ms,
    retry_on_lost = p.retry_on_lost, retry_safety = p.safety,
    idempotency_key = CASE WHEN r.trigger_type = 'cron' THEN NULL ELSE r.idempotency_key END
  FROM ql3.run_retry_policies p WHERE p.run_id = r.id;

-- A run without a policy row cannot exist (every writer inserted both); refuse one loudly.
DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM ql3.runs WHERE retry_max_attempts IS NULL) THEN
    RAISE EXCEPTION 'a run has no retry policy row';
  END IF;
END
$$;

DROP TABLE ql3.run_retry_policies;

ALTER TABLE ql3.runs
  ALTER COLUMN retry_max_attempts SET NOT NULL,
  ALTER COLUMN retry_backoff_base_ms SET NOT NULL,
  ALTER COLUMN retry_backoff_max_ms SET NOT NULL,
  ALTER COLUMN retry_on_lost SET NOT NULL,
  ALTER COLUMN retry_safety SET NOT NULL,
  ADD CONSTRAINT runs_retry_max_attempts_check CHECK (retry_max_attempts BETWEEN 1 AND 16),
  ADD CONSTRAINT runs_retry_backoff_base_check
    CHECK (retry_backoff_base_ms BETWEEN 0 AND 86400000),
  ADD CONSTRAINT runs_retry_backoff_max_check
    CHECK (retry_backoff_max_ms >= retry_backoff_base_ms AND retry_backoff_max_ms <= 86400000),
  ADD CONSTRAINT runs_retry_safety_check
    CHECK (retry_safety IN ('unknown', 'idempotent', 'deduplicated'));

ALTER TABLE ql3.runs ADD CONSTRAINT runs_cron_key_check
  CHECK (trigger_type <> 'cron' OR idempotency_key IS NULL);
ALTER TABLE ql3.runs DROP CONSTRAINT runs_idempotency_key_key;
CREATE UNIQUE INDEX runs_idempotency_key_key ON ql3.runs (project_id, idempotency_key)
  WHERE idempotency_key IS NOT NULL;
CREATE UNIQUE INDEX runs_cron_occurrence_key ON ql3.runs
  (trigger_id, trigger_revision, scheduled_for_ms) WHERE trigger_type = 'cron';

ALTER TABLE ql3.run_events DROP CONSTRAINT run_events_dedupe_key_key;
CREATE UNIQUE INDEX run_events_dedupe_key_key ON ql3.run_events (run_id, dedupe_key)
  WHERE dedupe_key IS NOT NULL;

DROP INDEX ql3.runs_by_created;
DROP INDEX ql3.runs_by_project;
DROP INDEX ql3.runs_by_task;
DROP INDEX ql3.runs_by_trigger;
DROP INDEX ql3.runs_by_status;
CREATE INDEX runs_by_project ON ql3.runs (project_id, created_at_ms);
CREATE INDEX runs_by_task ON ql3.runs (task_id, created_at_ms);
CREATE INDEX runs_by_trigger ON ql3.runs (trigger_id, created_at_ms)
  WHERE trigger_id IS NOT NULL;
CREATE INDEX runs_by_status ON ql3.runs (status, created_at_ms);
DROP INDEX ql3.runs_unfinished_by_trigger;
DROP INDEX ql3.runs_unfinished_by_task;
-- The predicate is kUnfinishedRunSql (core/overlap.h).
CREATE INDEX runs_unfinished ON ql3.runs (task_id, trigger_id, id)
  WHERE status NOT IN ('succeeded', 'failed', 'cancelled', 'timed_out', 'skipped');
