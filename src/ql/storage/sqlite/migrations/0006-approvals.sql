-- Approvals and approved actions (DESIGN §9.1). A task revision may carry an approval policy;
-- a manual run of such a revision is an approval request until a second principal decides it.
-- Approval consumes the action: one decision, one approved action, one run and one receipt per
-- request (unique keys make a second one impossible). An approved run lost after it started
-- waits in the new run state recovery_required for a human resolution, which is kept here too.
-- Decisions, actions, receipts and resolutions are append-only.

ALTER TABLE task_revisions ADD COLUMN approval_json TEXT;

-- The runs table gains the state recovery_required and the trigger type approved. SQLite cannot
-- change a CHECK constraint in place, so the table is rebuilt: copied aside, dropped and created
-- again; foreign keys are checked once, at COMMIT, when every run is back.
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
                                         'retry_wait', 'lost', 'recovery_required')),
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

CREATE TABLE approval_requests (
  id TEXT NOT NULL PRIMARY KEY,
  project_id TEXT NOT NULL REFERENCES projects (id),
  action TEXT NOT NULL CHECK (action IN ('run.create')),
  task_id TEXT NOT NULL,
  task_revision INTEGER NOT NULL,
  task_digest TEXT NOT NULL CHECK (length(task_digest) = 64),
  execution_revision_id TEXT NOT NULL REFERENCES execution_revisions (id),
  priority INTEGER NOT NULL,
  idempotency_key TEXT CHECK (idempotency_key IS NULL OR length(idempotency_key) >= 1),
  payload_json TEXT NOT NULL,
  payload_digest TEXT NOT NULL CHECK (length(payload_digest) = 64),
  requester_id TEXT NOT NULL REFERENCES principals (id),
  requester_binding_version INTEGER NOT NULL CHECK (requester_binding_version >= 0),
  approver_role TEXT NOT NULL CHECK (approver_role IN ('admin', 'owner')),
  status TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'rejected', 'expired')),
  created_at_ms INTEGER NOT NULL,
  expires_at_ms INTEGER NOT NULL,
  decided_at_ms INTEGER,
  UNIQUE (project_id, idempotency_key),
  FOREIGN KEY (task_id, task_revision) REFERENCES task_revisions (task_id, revision)
) STRICT;

CREATE INDEX approval_requests_by_project ON approval_requests (project_id, id);
CREATE INDEX approval_requests_pending ON approval_requests (expires_at_ms, id)
  WHERE status = 'pending';

CREATE TABLE approval_decisions (
  id TEXT NOT NULL PRIMARY KEY,
  request_id TEXT NOT NULL UNIQUE REFERENCES approval_requests (id),
  decision TEXT NOT NULL CHECK (decision IN ('approved', 'rejected', 'expired')),
  decided_by TEXT REFERENCES principals (id),
  decider_binding_version INTEGER,
  reason TEXT,
  decided_at_ms INTEGER NOT NULL,
  CHECK (decision = 'expired' OR decided_by IS NOT NULL)
) STRICT;

CREATE TABLE approved_actions (
  id TEXT NOT NULL PRIMARY KEY,
  request_id TEXT NOT NULL UNIQUE REFERENCES approval_requests (id),
  decision_id TEXT NOT NULL UNIQUE REFERENCES approval_decisions (id),
  action TEXT NOT NULL CHECK (action IN ('run.create')),
  payload_digest TEXT NOT NULL CHECK (length(payload_digest) = 64),
  status TEXT NOT NULL CHECK (status IN ('consumed')),
  run_id TEXT NOT NULL UNIQUE REFERENCES runs (id),
  consumed_at_ms INTEGER NOT NULL
) STRICT;

CREATE TABLE approval_receipts (
  id TEXT NOT NULL PRIMARY KEY,
  request_id TEXT NOT NULL UNIQUE REFERENCES approval_requests (id),
  decision_id TEXT NOT NULL UNIQUE REFERENCES approval_decisions (id),
  action_id TEXT NOT NULL UNIQUE REFERENCES approved_actions (id),
  run_id TEXT NOT NULL UNIQUE REFERENCES runs (id),
  created_at_ms INTEGER NOT NULL
) STRICT;

CREATE TABLE run_resolutions (
  run_id TEXT NOT NULL PRIMARY KEY REFERENCES runs (id),
  resolution TEXT NOT NULL CHECK (resolution IN ('succeeded', 'failed', 'retry')),
  reason TEXT NOT NULL CHECK (length(reason) >= 1),
  resolved_by TEXT NOT NULL REFERENCES principals (id),
  retry_run_id TEXT UNIQUE REFERENCES runs (id),
  created_at_ms INTEGER NOT NULL,
  CHECK ((resolution = 'retry') = (retry_run_id IS NOT NULL))
) STRICT;

CREATE TRIGGER approval_decisions_no_update BEFORE UPDATE ON approval_decisions
BEGIN
  SELECT RAISE(ABORT, 'approval decisions are append-only');
END;
CREATE TRIGGER approved_actions_no_update BEFORE UPDATE ON approved_actions
BEGIN
  SELECT RAISE(ABORT, 'approved actions are append-only');
END;
CREATE TRIGGER approval_receipts_no_update BEFORE UPDATE ON approval_receipts
BEGIN
  SELECT RAISE(ABORT, 'approval receipts are append-only');
END;
CREATE TRIGGER run_resolutions_no_update BEFORE UPDATE ON run_resolutions
BEGIN
  SELECT RAISE(ABORT, 'run resolutions are append-only');
END;
