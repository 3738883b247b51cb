-- Retention (DESIGN §11): how long finished runs are kept, per project (the defaults of its
-- tasks) and per task (an empty setting inherits), and the one deletion path of run history.
-- The runtime role's purge deletes a finished run with its attempts, events, retry policy, log
-- chunks and dispatch leases in one transaction. The database holds it to that: a run is
-- deleted only once it has finished, and its append-only events and log chunks only while
-- their run is finished (they are never updated). No other role deletes anything.

CREATE TABLE ql3.project_retention (
  project_id text NOT NULL,
  keep_days integer,
  keep_runs integer,
  version bigint NOT NULL,
  updated_at_ms bigint NOT NULL,
  CONSTRAINT project_retention_pkey PRIMARY KEY (project_id),
  CONSTRAINT project_retention_keep_days_check
    CHECK (keep_days IS NULL OR keep_days BETWEEN 1 AND 36500),
  CONSTRAINT project_retention_keep_runs_check
    CHECK (keep_runs IS NULL OR keep_runs BETWEEN 1 AND 1000000),
  CONSTRAINT project_retention_version_check CHECK (version >= 1),
  CONSTRAINT project_retention_project_fkey FOREIGN KEY (project_id) REFERENCES ql3.projects (id)
);

CREATE TABLE ql3.task_retention (
  task_id text NOT NULL,
  project_id text NOT NULL,
  keep_days integer,
  keep_runs integer,
  version bigint NOT NULL,
  updated_at_ms bigint NOT NULL,
  CONSTRAINT task_retention_pkey PRIMARY KEY (task_id),
  CONSTRAINT task_retention_keep_days_check
    CHECK (keep_days IS NULL OR keep_days BETWEEN 1 AND 36500),
  CONSTRAINT task_retention_keep_runs_check
    CHECK (keep_runs IS NULL OR keep_runs BETWEEN 1 AND 1000000),
  CONSTRAINT task_retention_version_check CHECK (version >= 1),
  CONSTRAINT task_retention_task_fkey FOREIGN KEY (task_id) REFERENCES ql3.task_heads (task_id),
  CONSTRAINT task_retention_project_fkey FOREIGN KEY (project_id) REFERENCES ql3.projects (id)
);

-- Deleting a run looks up everything that still refers to it or to its attempts.
CREATE INDEX runs_by_retry_of ON ql3.runs (retry_of_run_id) WHERE retry_of_run_id IS NOT NULL;
CREATE INDEX run_events_by_attempt ON ql3.run_events (attempt_id) WHERE attempt_id IS NOT NULL;
CREATE INDEX run_log_chunks_by_run ON ql3.run_log_chunks (run_id);
CREATE INDEX run_dispatch_leases_by_run ON ql3.run_dispatch_leases (run_id);

-- Refuses to delete a row of a run that has not finished (events, log chunks).
CREATE FUNCTION ql3.reject_unfinished_purge() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM ql3.runs r WHERE r.id = OLD.run_id
                 AND r.status IN ('succeeded', 'failed', 'cancelled', 'timed_out')) THEN
    RAISE EXCEPTION USING ERRCODE = 'QL002',
      MESSAGE = TG_TABLE_NAME || ' rows go only with their finished run';
  END IF;
  RETURN OLD;
END;
$$;

-- Refuses to delete a run that has not finished.
CREATE FUNCTION ql3.reject_unfinished_run_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF OLD.status NOT IN ('succeeded', 'failed', 'cancelled', 'timed_out') THEN
    RAISE EXCEPTION USING ERRCODE = 'QL002', MESSAGE = 'only finished runs are purged';
  END IF;
  RETURN OLD;
END;
$$;

DROP TRIGGER run_events_append_only ON ql3.run_events;
CREATE TRIGGER run_events_append_only BEFORE UPDATE ON ql3.run_events
  FOR EACH ROW EXECUTE FUNCTION ql3.reject_change();
CREATE TRIGGER run_events_purge_only BEFORE DELETE ON ql3.run_events
  FOR EACH ROW EXECUTE FUNCTION ql3.reject_unfinished_purge();

DROP TRIGGER run_log_chunks_append_only ON ql3.run_log_chunks;
CREATE TRIGGER run_log_chunks_append_only BEFORE UPDATE ON ql3.run_log_chunks
  FOR EACH ROW EXECUTE FUNCTION ql3.reject_change();
CREATE TRIGGER run_log_chunks_purge_only BEFORE DELETE ON ql3.run_log_chunks
  FOR EACH ROW EXECUTE FUNCTION ql3.reject_unfinished_purge();

CREATE TRIGGER runs_purge_finished_only BEFORE DELETE ON ql3.runs
  FOR EACH ROW EXECUTE FUNCTION ql3.reject_unfinished_run_delete();
