-- Overlap policy and concurrency limit (DESIGN §11). A trigger revision says what admission
-- does while earlier runs of the trigger are unfinished (allow, forbid, replace); a task
-- revision may cap its unfinished runs. An occurrence refused by either rule is kept as a run in
-- the new terminal state skipped (error_code overlap or concurrency), so it is decided once.

ALTER TABLE trigger_revisions ADD COLUMN overlap TEXT NOT NULL DEFAULT 'allow'
  CHECK (overlap IN ('allow', 'forbid', 'replace'));
ALTER TABLE task_revisions ADD COLUMN concurrency INTEGER
  CHECK (concurrency IS NULL OR concurrency BETWEEN 1 AND 10000);

-- The runs table gains the state skipped. SQLite cannot change a CHECK constraint in place, so
-- the table is rebuilt as 0006 did; foreign keys are checked once, at COMMIT.
PRAGMA defer_foreign_keys = ON;

CREATE TEMP TABLE runs_copy AS SELECT * FROM runs;
DROP TABLE runs;

CREATE TABLE runs (
  id TEXT NOT NULL PRIMARY KEY,
  project_id TEXT NOT NULL REFERENCES projects (id),
  task_id TEXT NOT NULL,
  task_revision INTEGER NOT NULL,
  task_digest TEXT NOT NULL CHECK (length(task_digest) = 64),
  execution_revision_id TEXT NOT NULL REFERENCES execution_revisions (id),
  trigger_id TEXT,
  trigger_revision INTEGER,
  scheduled_for_ms INTEGER,
  trigger_type TEXT NOT NULL CHECK (trigger_type IN ('cron', 'manual', 'api', 'approved')),
  status TEXT NOT NULL CHECK (status IN ('created', 'queued', 'dispatching', 'running',
                                         'succeeded', 'failed', 'cancelled', 'timed_out',
                                         'retry_wait', 'lost', 'recovery_required',
                                         'skipped')),
  version INTEGER NOT NULL CHECK (version >= 1),
  event_sequence INTEGER NOT NULL CHECK (event_sequence >= 0),
  priority INTEGER NOT NULL,
  idempotency_key TEXT CHECK (idempotency_key IS NULL OR length(idempotency_key) >= 1),
  retry_of_run_id TEXT REFERENCES runs (id),
  created_at_ms INTEGER NOT NULL,
  queued_at_ms INTEGER,
  started_at_ms INTEGER,
  finished_at_ms INTEGER,
  retry_at_ms INTEGER,
  cancel_requested_at_ms INTEGER,
  cancel_reason TEXT,
  error_code TEXT,
  error_summary TEXT,
  exit_code INTEGER,
  UNIQUE (project_id, idempotency_key),
  CHECK (trigger_type <> 'cron' OR (trigger_id IS NOT NULL AND trigger_revision IS NOT NULL
                                    AND scheduled_for_ms IS NOT NULL)),
  FOREIGN KEY (task_id, task_revision) REFERENCES task_revisions (task_id, revision),
  FOREIGN KEY (trigger_id, trigger_revision) REFERENCES trigger_revisions (trigger_id, revision)
) STRICT;

INSERT INTO runs SELECT * FROM runs_copy;
DROP TABLE runs_copy;

CREATE INDEX runs_by_created ON runs (created_at_ms, id);
CREATE INDEX runs_by_project ON runs (project_id, created_at_ms, id);
CREATE INDEX runs_by_task ON runs (task_id, created_at_ms, id);
CREATE INDEX runs_by_trigger ON runs (trigger_id, created_at_ms, id)
  WHERE trigger_id IS NOT NULL;
CREATE INDEX runs_by_status ON runs (status, created_at_ms, id);
CREATE INDEX runs_dispatchable ON runs (priority DESC, queued_at_ms, id)
  WHERE status = 'queued' AND cancel_requested_at_ms IS NULL;
CREATE INDEX runs_retry_due ON runs (retry_at_ms, id) WHERE status = 'retry_wait';
CREATE INDEX runs_by_retry_of ON runs (retry_of_run_id);
-- The unfinished runs of one trigger or task: the admission's overlap and concurrency checks.
-- The predicate is exactly kUnfinishedRunSql (core/overlap.h), so the queries can use them.
CREATE INDEX runs_unfinished_by_trigger ON runs (trigger_id, id)
  WHERE status NOT IN ('succeeded', 'failed', 'cancelled', 'timed_out', 'skipped');
CREATE INDEX runs_unfinished_by_task ON runs (task_id, id)
  WHERE status NOT IN ('succeeded', 'failed', 'cancelled', 'timed_out', 'skipped');

CREATE TRIGGER runs_purge_finished_only BEFORE DELETE ON runs
WHEN OLD.status NOT IN ('succeeded', 'failed', 'cancelled', 'timed_out', 'skipped')
BEGIN
  SELECT RAISE(ABORT, 'only finished runs are purged');
END;

DROP TRIGGER run_events_purge_only;
CREATE TRIGGER run_events_purge_only BEFORE DELETE ON run_events
WHEN coalesce((SELECT status FROM runs WHERE id = OLD.run_id), '')
     NOT IN ('succeeded', 'failed', 'cancelled', 'timed_out', 'skipped')
BEGIN
  SELECT RAISE(ABORT, 'run events are append-only while their run is unfinished');
END;
