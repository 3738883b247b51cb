-- Runs with their attempts, append-only events and retry policy snapshots. A cron occurrence
-- carries its idempotency key under a per-project unique constraint, so it is admitted at most
-- once by construction. Attempts carry the projection of the remote worker that holds them
-- (worker, session, generation, lease, offer) next to the local process identity.

CREATE TABLE ql3.runs (
  id text NOT NULL,
  project_id text NOT NULL,
  task_id text NOT NULL,
  task_revision bigint NOT NULL,
  task_digest text NOT NULL,
  execution_revision_id text NOT NULL,
  trigger_id text,
  trigger_revision bigint,
  scheduled_for_ms bigint,
  trigger_type text NOT NULL,
  status text NOT NULL,
  version bigint NOT NULL,
  event_sequence bigint NOT NULL,
  priority integer NOT NULL,
  idempotency_key text,
  retry_of_run_id text,
  created_at_ms bigint NOT NULL,
  queued_at_ms bigint,
  started_at_ms bigint,
  finished_at_ms bigint,
  retry_at_ms bigint,
  cancel_requested_at_ms bigint,
  cancel_reason text,
  error_code text,
  error_summary text,
  exit_code integer,
  CONSTRAINT runs_pkey PRIMARY KEY (id),
  CONSTRAINT runs_idempotency_key_key UNIQUE (project_id, idempotency_key),
  CONSTRAINT runs_task_digest_check CHECK (task_digest ~ '^[0-9a-f]{64}$'),
  CONSTRAINT runs_trigger_type_check CHECK (trigger_type IN ('cron', 'manual', 'api')),
  CONSTRAINT runs_status_check CHECK (status IN ('created', 'queued', 'dispatching', 'running',
    'succeeded', 'failed', 'cancelled', 'timed_out', 'retry_wait', 'lost')),
  CONSTRAINT runs_version_check CHECK (version >= 1),
  CONSTRAINT runs_event_sequence_check CHECK (event_sequence >= 0),
  CONSTRAINT runs_idempotency_key_check
    CHECK (idempotency_key IS NULL OR length(idempotency_key) >= 1),
  CONSTRAINT runs_cron_occurrence_check CHECK (trigger_type <> 'cron' OR (trigger_id IS NOT NULL
    AND trigger_revision IS NOT NULL AND scheduled_for_ms IS NOT NULL)),
  CONSTRAINT runs_project_fkey FOREIGN KEY (project_id) REFERENCES ql3.projects (id),
  CONSTRAINT runs_execution_revision_fkey FOREIGN KEY (execution_revision_id)
    REFERENCES ql3.execution_revisions (id),
  CONSTRAINT runs_retry_of_run_fkey FOREIGN KEY (retry_of_run_id) REFERENCES ql3.runs (id),
  CONSTRAINT runs_task_revision_fkey FOREIGN KEY (task_id, task_revision)
    REFERENCES ql3.task_revisions (task_id, revision),
  CONSTRAINT runs_trigger_revision_fkey FOREIGN KEY (trigger_id, trigger_revision)
    REFERENCES ql3.trigger_revisions (trigger_id, revision)
);

-- Keyset paging, newest first, unfiltered and per filter.
CREATE INDEX runs_by_created ON ql3.runs (created_at_ms, id);
CREATE INDEX runs_by_project ON ql3.runs (project_id, created_at_ms, id);
CREATE INDEX runs_by_task ON ql3.runs (task_id, created_at_ms, id);
CREATE INDEX runs_by_trigger ON ql3.runs (trigger_id, created_at_ms, id)
  WHERE trigger_id IS NOT NULL;
CREATE INDEX runs_by_status ON ql3.runs (status, created_at_ms, id);
-- Dispatch order: priority (high first), then FIFO by queued time.
CREATE INDEX runs_dispatchable ON ql3.runs (priority DESC, queued_at_ms, id)
  WHERE status = 'queued' AND cancel_requested_at_ms IS NULL;
CREATE INDEX runs_retry_due ON ql3.runs (retry_at_ms, id) WHERE status = 'retry_wait';
CREATE INDEX runs_active ON ql3.runs (status, id)
  WHERE status IN ('dispatching', 'running', 'lost');

CREATE TABLE ql3.run_attempts (
  id text NOT NULL,
  run_id text NOT NULL,
  attempt integer NOT NULL,
  status text NOT NULL,
  executor_type text NOT NULL,
  callback_sequence bigint NOT NULL,
  pid bigint,
  process_start_ticks bigint,
  log_path text,
  worker_id text,
  worker_session_id text,
  session_generation bigint,
  lease_expires_at_ms bigint,
  offer_id text,
  created_at_ms bigint NOT NULL,
  started_at_ms bigint,
  finished_at_ms bigint,
  exit_code integer,
  error_code text,
  error_summary text,
  CONSTRAINT run_attempts_pkey PRIMARY KEY (id),
  CONSTRAINT run_attempts_run_attempt_key UNIQUE (run_id, attempt),
  CONSTRAINT run_attempts_attempt_check CHECK (attempt >= 1),
  CONSTRAINT run_attempts_status_check CHECK (status IN ('claimed', 'starting', 'running',
    'succeeded', 'failed', 'cancelled', 'timed_out', 'lost')),
  CONSTRAINT run_attempts_executor_type_check
    CHECK (executor_type IN ('local_process', 'remote_worker')),
  CONSTRAINT run_attempts_callback_sequence_check CHECK (callback_sequence >= 0),
  CONSTRAINT run_attempts_run_fkey FOREIGN KEY (run_id) REFERENCES ql3.runs (id)
);

CREATE TABLE ql3.run_events (
  run_id text NOT NULL,
  sequence bigint NOT NULL,
  type text NOT NULL,
  actor_type text NOT NULL,
  attempt_id text,
  dedupe_key text,
  payload_json text NOT NULL,
  created_at_ms bigint NOT NULL,
  CONSTRAINT run_events_pkey PRIMARY KEY (run_id, sequence),
  CONSTRAINT run_events_dedupe_key_key UNIQUE (run_id, dedupe_key),
  CONSTRAINT run_events_sequence_check CHECK (sequence >= 1),
  CONSTRAINT run_events_type_check CHECK (length(type) >= 1),
  CONSTRAINT run_events_actor_type_check CHECK (actor_type IN ('scheduler', 'dispatcher',
    'executor', 'user', 'worker', 'recovery')),
  CONSTRAINT run_events_dedupe_key_check CHECK (dedupe_key IS NULL OR length(dedupe_key) >= 1),
  CONSTRAINT run_events_payload_check CHECK (octet_length(payload_json) <= 16384),
  CONSTRAINT run_events_run_fkey FOREIGN KEY (run_id) REFERENCES ql3.runs (id),
  CONSTRAINT run_events_attempt_fkey FOREIGN KEY (attempt_id) REFERENCES ql3.run_attempts (id)
);

CREATE TRIGGER run_events_append_only BEFORE UPDATE OR DELETE ON ql3.run_events
  FOR EACH ROW EXECUTE FUNCTION ql3.reject_change();

CREATE TABLE ql3.run_retry_policies (
  run_id text NOT NULL,
  max_attempts integer NOT NULL,
  retry_on_lost boolean NOT NULL,
  safety text NOT NULL,
  backoff_base_ms bigint NOT NULL,
  backoff_max_ms bigint NOT NULL,
  CONSTRAINT run_retry_policies_pkey PRIMARY KEY (run_id),
  CONSTRAINT run_retry_policies_max_attempts_check CHECK (max_attempts BETWEEN 1 AND 16),
  CONSTRAINT run_retry_policies_safety_check
    CHECK (safety IN ('unknown', 'idempotent', 'deduplicated')),
  CONSTRAINT run_retry_policies_backoff_base_check
    CHECK (backoff_base_ms BETWEEN 0 AND 86400000),
  CONSTRAINT run_retry_policies_backoff_max_check
    CHECK (backoff_max_ms BETWEEN backoff_base_ms AND 86400000),
  CONSTRAINT run_retry_policies_run_fkey FOREIGN KEY (run_id) REFERENCES ql3.runs (id)
);
