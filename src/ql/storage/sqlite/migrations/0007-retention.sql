-- Retention (DESIGN §11): how long finished runs are kept, per project (the defaults of its
-- tasks) and per task (an empty setting inherits), and the one deletion path of run history.
-- A run is deleted only once it has finished, and its append-only events only while their run
-- is finished: purge is the only way history goes, and it never touches an unfinished run.

CREATE TABLE project_retention (
  project_id TEXT NOT NULL PRIMARY KEY REFERENCES projects (id),
  keep_days INTEGER CHECK (keep_days IS NULL OR keep_days BETWEEN 1 AND 36500),
  keep_runs INTEGER CHECK (keep_runs IS NULL OR keep_runs BETWEEN 1 AND 1000000),
  version INTEGER NOT NULL CHECK (version >= 1),
  updated_at_ms INTEGER NOT NULL
) STRICT;

CREATE TABLE task_retention (
  task_id TEXT NOT NULL PRIMARY KEY REFERENCES task_heads (task_id),
  project_id TEXT NOT NULL REFERENCES projects (id),
  keep_days INTEGER CHECK (keep_days IS NULL OR keep_days BETWEEN 1 AND 36500),
  keep_runs INTEGER CHECK (keep_runs IS NULL OR keep_runs BETWEEN 1 AND 1000000),
  version INTEGER NOT NULL CHECK (version >= 1),
  updated_at_ms INTEGER NOT NULL
) STRICT;

-- Deleting a run looks up what still refers to it: a retry of it, events of its attempts.
CREATE INDEX runs_by_retry_of ON runs (retry_of_run_id);
CREATE INDEX run_events_by_attempt ON run_events (attempt_id);

DROP TRIGGER run_events_no_delete;

CREATE TRIGGER run_events_purge_only BEFORE DELETE ON run_events
WHEN coalesce((SELECT status FROM runs WHERE id = OLD.run_id), '')
     NOT IN ('succeeded', 'failed', 'cancelled', 'timed_out')
BEGIN
  SELECT RAISE(ABORT, 'run events are append-only while their run is unfinished');
END;

CREATE TRIGGER runs_purge_finished_only BEFORE DELETE ON runs
WHEN OLD.status NOT IN ('succeeded', 'failed', 'cancelled', 'timed_out')
BEGIN
  SELECT RAISE(ABORT, 'only finished runs are purged');
END;
