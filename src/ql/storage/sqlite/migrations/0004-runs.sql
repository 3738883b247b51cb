-- Runs with their attempts, append-only events and retry policy snapshots. A cron occurrence
-- carries its idempotency key under a per-project unique index, so it is admitted at most once
-- by construction.

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
  trigger_type TEXT NOT NULL CHECK (trigger_type IN ('cron', 'manual', 'api')),
  status TEXT NOT NULL CHECK (status IN ('created', 'queued', 'dispatching', 'running',
                                         'succeeded', 'failed', 'cancelled', 'timed_out',
                                         'retry_wait', 'lost')),
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

-- Keyset paging, newest first, unfiltered and per filter.
CREATE INDEX runs_by_created ON runs (created_at_ms, id);
CREATE INDEX runs_by_project ON runs (project_id, created_at_ms, id);
CREATE INDEX runs_by_task ON runs (task_id, created_at_ms, id);
CREATE INDEX runs_by_trigger ON runs (trigger_id, created_at_ms, id)
  WHERE trigger_id IS NOT NULL;
CREATE INDEX runs_by_status ON runs (status, created_at_ms, id);
-- Dispatch order: priority (high first), then FIFO by queued time.
CREATE INDEX runs_dispatchable ON runs (priority DESC, queued_at_ms, id)
  WHERE status = 'queued' AND cancel_requested_at_ms IS NULL;
CREATE INDEX runs_retry_due ON runs (retry_at_ms, id) WHERE status = 'retry_wait';

CREATE TABLE run_attempts (
  id TEXT NOT NULL PRIMARY KEY,
  run_id TEXT NOT NULL REFERENCES runs (id),
  attempt INTEGER NOT NULL CHECK (attempt >= 1),
  status TEXT NOT NULL CHECK (status IN ('claimed', 'starting', 'running', 'succeeded',
                                         'failed', 'cancelled', 'timed_out', 'lost')),
  executor_type TEXT NOT NULL CHECK (executor_type IN ('local_process', 'remote_worker')),
  callback_sequence INTEGER NOT NULL CHECK (callback_sequence >= 0),
  pid INTEGER,
  process_start_ticks INTEGER,
  log_path TEXT,
  created_at_ms INTEGER NOT NULL,
  started_at_ms INTEGER,
  finished_at_ms INTEGER,
  exit_code INTEGER,
  error_code TEXT,
  error_summary TEXT,
  UNIQUE (run_id, attempt)
) STRICT;

CREATE TABLE run_events (
  run_id TEXT NOT NULL REFERENCES runs (id),
  sequence INTEGER NOT NULL CHECK (sequence >= 1),
  type TEXT NOT NULL CHECK (length(type) >= 1),
  actor_type TEXT NOT NULL CHECK (actor_type IN ('scheduler', 'dispatcher', 'executor', 'user',
                                                 'worker', 'recovery')),
  attempt_id TEXT REFERENCES run_attempts (id),
  dedupe_key TEXT CHECK (dedupe_key IS NULL OR length(dedupe_key) >= 1),
  payload_json TEXT NOT NULL CHECK (length(CAST(payload_json AS BLOB)) <= 16384),
  created_at_ms INTEGER NOT NULL,
  PRIMARY KEY (run_id, sequence),
  UNIQUE (run_id, dedupe_key)
) STRICT;

CREATE TRIGGER run_events_no_update BEFORE UPDATE ON run_events
BEGIN
  SELECT RAISE(ABORT, 'run events are append-only');
END;

CREATE TRIGGER run_events_no_delete BEFORE DELETE ON run_events
BEGIN
  SELECT RAISE(ABORT, 'run events are append-only');
END;

CREATE TABLE run_retry_policies (
  run_id TEXT NOT NULL PRIMARY KEY REFERENCES runs (id),
  max_attempts INTEGER NOT NULL CHECK (max_attempts BETWEEN 1 AND 16),
  retry_on_lost INTEGER NOT NULL CHECK (retry_on_lost IN (0, 1)),
  safety TEXT NOT NULL CHECK (safety IN ('unknown', 'idempotent', 'deduplicated')),
  backoff_base_ms INTEGER NOT NULL CHECK (backoff_base_ms BETWEEN 0 AND 86400000),
  backoff_max_ms INTEGER NOT NULL CHECK (backoff_max_ms BETWEEN backoff_base_ms AND 86400000)
) STRICT;
