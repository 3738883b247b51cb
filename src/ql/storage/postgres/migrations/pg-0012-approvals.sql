-- Approvals and approved actions (DESIGN §9.1, seed ADR-0037 stage 5). A task revision may
-- carry an approval policy; a manual run of such a revision is an approval request until a
-- second principal decides it. Approval consumes the action: one decision, one approved action,
-- one run and one receipt per request, each made unique here so a second one is impossible by
-- construction. An approved run lost after it started waits in the run state recovery_required
-- for a human resolution, kept in run_resolutions. Decisions, actions, receipts and resolutions
-- are append-only (the runtime role may not UPDATE them).

ALTER TABLE ql3.task_revisions ADD COLUMN approval_json text;

ALTER TABLE ql3.runs DROP CONSTRAINT runs_status_check;
ALTER TABLE ql3.runs ADD CONSTRAINT runs_status_check
  CHECK (status IN ('created', 'queued', 'dispatching', 'running', 'succeeded', 'failed',
                    'cancelled', 'timed_out', 'retry_wait', 'lost', 'recovery_required'));
ALTER TABLE ql3.runs DROP CONSTRAINT runs_trigger_type_check;
ALTER TABLE ql3.runs ADD CONSTRAINT runs_trigger_type_check
  CHECK (trigger_type IN ('cron', 'manual', 'api', 'approved'));

CREATE TABLE ql3.approval_requests (
  id text NOT NULL,
  project_id text NOT NULL,
  action text NOT NULL,
  task_id text NOT NULL,
  task_revision bigint NOT NULL,
  task_digest text NOT NULL,
  execution_revision_id text NOT NULL,
  priority integer NOT NULL,
  idempotency_key text,
  payload_json text NOT NULL,
  payload_digest text NOT NULL,
  requester_id text NOT NULL,
  requester_binding_version bigint NOT NULL,
  approver_role text NOT NULL,
  status text NOT NULL,
  created_at_ms bigint NOT NULL,
  expires_at_ms bigint NOT NULL,
  decided_at_ms bigint,
  CONSTRAINT approval_requests_pkey PRIMARY KEY (id),
  CONSTRAINT approval_requests_idempotency_key_key UNIQUE (project_id, idempotency_key),
  CONSTRAINT approval_requests_action_check CHECK (action IN ('run.create')),
  CONSTRAINT approval_requests_task_digest_check CHECK (task_digest ~ '^[0-9a-f]{64}$'),
  CONSTRAINT approval_requests_payload_digest_check CHECK (payload_digest ~ '^[0-9a-f]{64}$'),
  CONSTRAINT approval_requests_idempotency_key_check
    CHECK (idempotency_key IS NULL OR length(idempotency_key) >= 1),
  CONSTRAINT approval_requests_binding_version_check CHECK (requester_binding_version >= 0),
  CONSTRAINT approval_requests_approver_role_check CHECK (approver_role IN ('admin', 'owner')),
  CONSTRAINT approval_requests_status_check
    CHECK (status IN ('pending', 'approved', 'rejected', 'expired')),
  CONSTRAINT approval_requests_project_fkey FOREIGN KEY (project_id) REFERENCES ql3.projects (id),
  CONSTRAINT approval_requests_task_revision_fkey FOREIGN KEY (task_id, task_revision)
    REFERENCES ql3.task_revisions (task_id, revision),
  CONSTRAINT approval_requests_execution_revision_fkey FOREIGN KEY (execution_revision_id)
    REFERENCES ql3.execution_revisions (id),
  CONSTRAINT approval_requests_requester_fkey FOREIGN KEY (requester_id)
    REFERENCES ql3.principals (id)
);

CREATE INDEX approval_requests_by_project ON ql3.approval_requests (project_id, id);
CREATE INDEX approval_requests_pending ON ql3.approval_requests (expires_at_ms, id)
  WHERE status = 'pending';

CREATE TABLE ql3.approval_decisions (
  id text NOT NULL,
  request_id text NOT NULL,
  decision text NOT NULL,
  decided_by text,
  decider_binding_version bigint,
  reason text,
  decided_at_ms bigint NOT NULL,
  CONSTRAINT approval_decisions_pkey PRIMARY KEY (id),
  CONSTRAINT approval_decisions_request_key UNIQUE (request_id),
  CONSTRAINT approval_decisions_decision_check
    CHECK (decision IN ('approved', 'rejected', 'expired')),
  CONSTRAINT approval_decisions_decider_check CHECK (decision = 'expired' OR decided_by IS NOT NULL),
  CONSTRAINT approval_decisions_request_fkey FOREIGN KEY (request_id)
    REFERENCES ql3.approval_requests (id),
  CONSTRAINT approval_decisions_decider_fkey FOREIGN KEY (decided_by) REFERENCES ql3.principals (id)
);

CREATE TABLE ql3.approved_actions (
  id text NOT NULL,
  request_id text NOT NULL,
  decision_id text NOT NULL,
  action text NOT NULL,
  payload_digest text NOT NULL,
  status text NOT NULL,
  run_id text NOT NULL,
  consumed_at_ms bigint NOT NULL,
  CONSTRAINT approved_actions_pkey PRIMARY KEY (id),
  CONSTRAINT approved_actions_request_key UNIQUE (request_id),
  CONSTRAINT approved_actions_decision_key UNIQUE (decision_id),
  CONSTRAINT approved_actions_run_key UNIQUE (run_id),
  CONSTRAINT approved_actions_action_check CHECK (action IN ('run.create')),
  CONSTRAINT approved_actions_payload_digest_check CHECK (payload_digest ~ '^[0-9a-f]{64}$'),
  CONSTRAINT approved_actions_status_check CHECK (status IN ('consumed')),
  CONSTRAINT approved_actions_request_fkey FOREIGN KEY (request_id)
    REFERENCES ql3.approval_requests (id),
  CONSTRAINT approved_actions_decision_fkey FOREIGN KEY (decision_id)
    REFERENCES ql3.approval_decisions (id),
  CONSTRAINT approved_actions_run_fkey FOREIGN KEY (run_id) REFERENCES ql3.runs (id)
);

CREATE TABLE ql3.approval_receipts (
  id text NOT NULL,
  request_id text NOT NULL,
  decision_id text NOT NULL,
  action_id text NOT NULL,
  run_id text NOT NULL,
  created_at_ms bigint NOT NULL,
  CONSTRAINT approval_receipts_pkey PRIMARY KEY (id),
  CONSTRAINT approval_receipts_request_key UNIQUE (request_id),
  CONSTRAINT approval_receipts_decision_key UNIQUE (decision_id),
  CONSTRAINT approval_receipts_action_key UNIQUE (action_id),
  CONSTRAINT approval_receipts_run_key UNIQUE (run_id),
  CONSTRAINT approval_receipts_request_fkey FOREIGN KEY (request_id)
    REFERENCES ql3.approval_requests (id),
  CONSTRAINT approval_receipts_decision_fkey FOREIGN KEY (decision_id)
    REFERENCES ql3.approval_decisions (id),
  CONSTRAINT approval_receipts_action_fkey FOREIGN KEY (action_id)
    REFERENCES ql3.approved_actions (id),
  CONSTRAINT approval_receipts_run_fkey FOREIGN KEY (run_id) REFERENCES ql3.runs (id)
);

CREATE TABLE ql3.run_resolutions (
  run_id text NOT NULL,
  resolution text NOT NULL,
  reason text NOT NULL,
  resolved_by text NOT NULL,
  retry_run_id text,
  created_at_ms bigint NOT NULL,
  CONSTRAINT run_resolutions_pkey PRIMARY KEY (run_id),
  CONSTRAINT run_resolutions_retry_run_key UNIQUE (retry_run_id),
  CONSTRAINT run_resolutions_resolution_check
    CHECK (resolution IN ('succeeded', 'failed', 'retry')),
  CONSTRAINT run_resolutions_reason_check CHECK (length(reason) >= 1),
  CONSTRAINT run_resolutions_retry_check CHECK ((resolution = 'retry') = (retry_run_id IS NOT NULL)),
  CONSTRAINT run_resolutions_run_fkey FOREIGN KEY (run_id) REFERENCES ql3.runs (id),
  CONSTRAINT run_resolutions_resolver_fkey FOREIGN KEY (resolved_by) REFERENCES ql3.principals (id),
  CONSTRAINT run_resolutions_retry_run_fkey FOREIGN KEY (retry_run_id) REFERENCES ql3.runs (id)
);
