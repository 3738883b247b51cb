-- Overlap policy and concurrency limit (DESIGN §11). A trigger revision says what admission
-- does while earlier runs of the trigger are unfinished (allow, forbid, replace); a task
-- revision may cap its unfinished runs. An occurrence refused by either rule is kept as a run in
-- the new terminal state skipped (error_code overlap or concurrency), so it is decided once.

ALTER TABLE ql3.trigger_revisions ADD COLUMN overlap text NOT NULL DEFAULT 'allow';
ALTER TABLE ql3.trigger_revisions ADD CONSTRAINT trigger_revisions_overlap_check
  CHECK (overlap IN ('allow', 'forbid', 'replace'));
ALTER TABLE ql3.task_revisions ADD COLUMN concurrency integer;
ALTER TABLE ql3.task_revisions ADD CONSTRAINT task_revisions_concurrency_check
  CHECK (concurrency IS NULL OR concurrency BETWEEN 1 AND 10000);

ALTER TABLE ql3.runs DROP CONSTRAINT runs_status_check;
ALTER TABLE ql3.runs ADD CONSTRAINT runs_status_check
  CHECK (status IN ('created', 'queued', 'dispatching', 'running', 'succeeded', 'failed',
                    'cancelled', 'timed_out', 'retry_wait', 'lost', 'recovery_required',
                    'skipped'));

-- The unfinished runs of one trigger or task: the admission's overlap and concurrency checks,
-- made only for triggers and tasks that set a policy. They hold only unfinished rows, so they
-- stay small however long the history is. The predicate is kUnfinishedRunSql (core/overlap.h).
CREATE INDEX runs_unfinished_by_trigger ON ql3.runs (trigger_id, id)
  WHERE status NOT IN ('succeeded', 'failed', 'cancelled', 'timed_out', 'skipped');
CREATE INDEX runs_unfinished_by_task ON ql3.runs (task_id, id)
  WHERE status NOT IN ('succeeded', 'failed', 'cancelled', 'timed_out', 'skipped');

-- A skipped run is finished: the purge may delete it and what it owns.
CREATE OR REPLACE FUNCTION ql3.reject_unfinished_purge() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM ql3.runs r WHERE r.id = OLD.run_id
                 AND r.status IN ('succeeded', 'failed', 'cancelled', 'timed_out', 'skipped')) THEN
    RAISE EXCEPTION USING ERRCODE = 'QL002',
      MESSAGE = TG_TABLE_NAME || ' rows go only with their finished run';
  END IF;
  RETURN OLD;
END;
$$;

CREATE OR REPLACE FUNCTION ql3.reject_unfinished_run_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF OLD.status NOT IN ('succeeded', 'failed', 'cancelled', 'timed_out', 'skipped') THEN
    RAISE EXCEPTION USING ERRCODE = 'QL002', MESSAGE = 'only finished runs are purged';
  END IF;
  RETURN OLD;
END;
$$;
