-- The exact privileges of the non-owner roles on schema ql3, applied by `ql-cluster migrate`
-- after the migrations, in one transaction: everything is revoked first, then granted, so a
-- privilege added by hand is removed. The readiness auditor checks ql3_runtime against the
-- same list (pg_audit.cc). ql3_runtime deletes only the rows of run history (with the
-- delivered and dead notifications of those runs), for the retention purge (the one deletion
-- path of history; triggers let it delete finished runs only); ql3_admin deletes only sign-in
-- state, notification rules and artifacts (the purge of old script versions and of what nothing
-- references). No role but the owner ever gets TRUNCATE, REFERENCES, TRIGGER or CREATE.

REVOKE ALL ON SCHEMA ql3 FROM PUBLIC, ql3_runtime, ql3_admin, ql3_worker_ingress;
REVOKE ALL ON ALL TABLES IN SCHEMA ql3 FROM PUBLIC, ql3_runtime, ql3_admin, ql3_worker_ingress;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA ql3 FROM PUBLIC, ql3_runtime, ql3_admin, ql3_worker_ingress;

GRANT USAGE ON SCHEMA ql3 TO ql3_runtime, ql3_admin, ql3_worker_ingress;

-- ql3_runtime: the resident control plane.
GRANT SELECT ON ql3.schema_migrations, ql3.schema_capabilities, ql3.projects, ql3.task_heads,
  ql3.task_revisions, ql3.execution_revisions, ql3.trigger_heads, ql3.trigger_revisions
  TO ql3_runtime;
GRANT SELECT, INSERT, UPDATE ON ql3.runs, ql3.run_attempts, ql3.worker_sessions,
  ql3.run_dispatch_leases TO ql3_runtime;
GRANT SELECT, INSERT ON ql3.run_events, ql3.run_log_chunks TO ql3_runtime;
-- Governance: authentication and the policy fence read; audit facts are written, never read.
GRANT SELECT ON ql3.installation, ql3.principals, ql3.api_tokens, ql3.role_bindings
  TO ql3_runtime;
-- Retention: the settings are read, and the purge deletes finished runs with what they own.
GRANT SELECT ON ql3.project_retention, ql3.task_retention TO ql3_runtime;
GRANT DELETE ON ql3.runs, ql3.run_attempts, ql3.run_events, ql3.run_log_chunks,
  ql3.run_dispatch_leases TO ql3_runtime;
GRANT SELECT, INSERT, UPDATE ON ql3.api_token_usage TO ql3_runtime;
GRANT INSERT ON ql3.security_audit TO ql3_runtime;
GRANT SELECT, UPDATE ON ql3.trigger_schedules TO ql3_runtime;
-- Approvals: requests change state once (pending to a decision); decisions, approved actions,
-- receipts and resolutions are appended, never changed.
GRANT SELECT, INSERT, UPDATE ON ql3.approval_requests TO ql3_runtime;
GRANT SELECT, INSERT ON ql3.approval_decisions, ql3.approved_actions, ql3.approval_receipts,
  ql3.run_resolutions TO ql3_runtime;
-- Secrets: read (sealed) to put into a worker's lease; written by the admin role only.
GRANT SELECT ON ql3.secrets, ql3.secret_versions TO ql3_runtime;
-- Notifications: a run transition or a cron admission reads the rules and channels and writes
-- the rules' and channels' state and the outbox row in its own transaction; the delivery loop
-- claims and records outbox rows; the retention purge deletes the delivered and dead rows of
-- the runs it deletes. Channels and rules are project configuration, written by the admin role
-- only (as definitions and secrets are). The tables came with pg-0023; a schema migrated only
-- part of the way (an upgrade test) has none yet.
DO $$
BEGIN
  IF to_regclass('ql3.notification_outbox') IS NOT NULL THEN
    GRANT SELECT ON ql3.notification_channels, ql3.notification_rules TO ql3_runtime;
    GRANT SELECT, INSERT, UPDATE ON ql3.notification_rule_states,
      ql3.notification_channel_states TO ql3_runtime;
    GRANT SELECT, INSERT, UPDATE, DELETE ON ql3.notification_outbox TO ql3_runtime;
  END IF;
END
$$;

-- Artifacts (pg-0027): chunks, blobs and scripts are read to serve a blob or a script version
-- (a worker's lease names one); uploads, pushes, deletions and the purge are written by the
-- admin role only. A schema migrated only part of the way (an upgrade test) has none yet.
DO $$
BEGIN
  IF to_regclass('ql3.scripts') IS NOT NULL THEN
    GRANT SELECT ON ql3.artifact_chunks, ql3.artifact_blobs, ql3.artifact_blob_chunks,
      ql3.artifact_uploads, ql3.scripts, ql3.script_versions, ql3.script_version_files
      TO ql3_runtime;
  END IF;
END
$$;

-- Placement (pg-0028): the grant reads pools, grants and drains to decide which runs a session
-- may take; pools, grants and drains are installation configuration, written by the admin role
-- only. A session records the pool it names; only the pool's row and grants give it meaning.
DO $$
BEGIN
  IF to_regclass('ql3.worker_pools') IS NOT NULL THEN
    GRANT SELECT ON ql3.worker_pools, ql3.worker_pool_grants, ql3.worker_drains TO ql3_runtime;
    GRANT SELECT, INSERT, UPDATE ON ql3.worker_pools TO ql3_admin;
    GRANT SELECT, INSERT, UPDATE, DELETE ON ql3.worker_pool_grants, ql3.worker_drains
      TO ql3_admin;
  END IF;
END
$$;

-- The markers of prepare/commit pairs in progress (pg-0025): the readiness audit reads them to
-- say that a pending pair was started and interrupted. A schema migrated only part of the way
-- (an upgrade test) has no marker table yet.
DO $$
BEGIN
  IF to_regclass('ql3.schema_migration_markers') IS NOT NULL THEN
    GRANT SELECT ON ql3.schema_migration_markers TO ql3_runtime;
  END IF;
END
$$;

-- ql3_admin: publishes definitions, creates and resets schedule rows, mints credentials.
GRANT SELECT ON ql3.schema_migrations, ql3.schema_capabilities TO ql3_admin;
GRANT SELECT, INSERT, UPDATE ON ql3.projects, ql3.task_heads, ql3.trigger_heads,
  ql3.trigger_schedules, ql3.worker_credentials TO ql3_admin;
-- ql3_admin: governance writes (principals, tokens, bindings under the scope's row lock) and
-- the audit, which it alone reads.
GRANT SELECT, INSERT, UPDATE ON ql3.installation, ql3.principals, ql3.api_tokens TO ql3_admin;
-- Password hashes are read and written by the admin role only (sign-in runs there). The table
-- came with pg-0020; a schema migrated only part of the way (an upgrade test) has none yet.
DO $$
BEGIN
  IF to_regclass('ql3.principal_passwords') IS NOT NULL THEN
    GRANT SELECT, INSERT, UPDATE, DELETE ON ql3.principal_passwords TO ql3_admin;
  END IF;
  -- OpenID Connect sign-ins in progress (pg-0022): written, read and removed by the admin role.
  IF to_regclass('ql3.oidc_logins') IS NOT NULL THEN
    GRANT SELECT, INSERT, DELETE ON ql3.oidc_logins TO ql3_admin;
  END IF;
END
$$;
GRANT SELECT ON ql3.api_token_usage TO ql3_admin;
GRANT SELECT, INSERT ON ql3.role_bindings, ql3.security_audit TO ql3_admin;
GRANT SELECT, INSERT ON ql3.task_revisions, ql3.execution_revisions, ql3.trigger_revisions
  TO ql3_admin;
-- ql3_admin: retention settings of projects and tasks.
GRANT SELECT, INSERT, UPDATE ON ql3.project_retention, ql3.task_retention TO ql3_admin;
-- ql3_admin: secret versions, their shredding and their rotation.
GRANT SELECT, INSERT, UPDATE ON ql3.secrets, ql3.secret_versions TO ql3_admin;
-- ql3_admin: notification channels (created, then deleted as a tombstone) and rules (deleted
-- outright), and redelivery of a delivered or dead outbox row, each with its audit fact
-- (pg-0023, as above).
DO $$
BEGIN
  IF to_regclass('ql3.notification_outbox') IS NOT NULL THEN
    GRANT SELECT, INSERT, UPDATE ON ql3.notification_channels TO ql3_admin;
    GRANT SELECT, INSERT, DELETE ON ql3.notification_rules TO ql3_admin;
    GRANT SELECT, UPDATE ON ql3.notification_outbox TO ql3_admin;
  END IF;
END
$$;

-- ql3_admin: artifacts (pg-0027, as above): chunks and blobs stored as they are uploaded,
-- uploads recorded, script versions appended, and the purge of old versions and of what
-- nothing references; a script's row is never deleted (a deleted script is a tombstone).
DO $$
BEGIN
  IF to_regclass('ql3.scripts') IS NOT NULL THEN
    GRANT SELECT, INSERT, UPDATE, DELETE ON ql3.artifact_chunks, ql3.artifact_blobs,
      ql3.artifact_blob_chunks, ql3.artifact_uploads, ql3.script_versions,
      ql3.script_version_files TO ql3_admin;
    GRANT SELECT, INSERT, UPDATE ON ql3.scripts TO ql3_admin;
  END IF;
END
$$;

-- ql3_worker_ingress: worker authentication and sessions, nothing else.
GRANT SELECT ON ql3.schema_migrations, ql3.schema_capabilities TO ql3_worker_ingress;
GRANT SELECT ON ql3.worker_credentials TO ql3_worker_ingress;
GRANT SELECT, INSERT, UPDATE ON ql3.worker_sessions TO ql3_worker_ingress;
