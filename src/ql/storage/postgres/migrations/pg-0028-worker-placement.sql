-- Worker placement (DESIGN §6.6; docs/worker-protocol.md "Pools and labels"). A worker session
-- registers in one pool with labels; a task's plan names the pool and the labels it needs, copied
-- from the plan into its execution revision so a grant filters on columns. A pool serves the
-- projects granted to it, or every project when it is open (the `default` pool, created open, is
-- where every worker and task is unless they name another). A grant row may cap the project's
-- running leases in the pool and weigh its share; a pool may cap its own. An operator's drain is
-- kept per worker credential, so a new session of a drained worker gets no runs either.

ALTER TABLE ql3.worker_sessions
  ADD COLUMN pool text NOT NULL DEFAULT 'default',
  ADD COLUMN labels jsonb NOT NULL DEFAULT '{}'::jsonb,
  ADD COLUMN agent_version text NOT NULL DEFAULT '';
ALTER TABLE ql3.worker_sessions
  ADD CONSTRAINT worker_sessions_pool_check CHECK (pool ~ '^[a-z0-9][a-z0-9_-]{0,62}$');
ALTER TABLE ql3.worker_sessions
  ADD CONSTRAINT worker_sessions_labels_check CHECK (jsonb_typeof(labels) = 'object');
ALTER TABLE ql3.worker_sessions
  ADD CONSTRAINT worker_sessions_agent_version_check CHECK (length(agent_version) <= 64);

ALTER TABLE ql3.execution_revisions
  ADD COLUMN pool text NOT NULL DEFAULT 'default',
  ADD COLUMN required_labels jsonb NOT NULL DEFAULT '{}'::jsonb;
ALTER TABLE ql3.execution_revisions
  ADD CONSTRAINT execution_revisions_pool_check CHECK (pool ~ '^[a-z0-9][a-z0-9_-]{0,62}$');
ALTER TABLE ql3.execution_revisions
  ADD CONSTRAINT execution_revisions_required_labels_check
    CHECK (jsonb_typeof(required_labels) = 'object');

CREATE TABLE ql3.worker_pools (
  name text NOT NULL,
  serves_all_projects boolean NOT NULL,
  max_running integer,
  version bigint NOT NULL,
  created_at_ms bigint NOT NULL,
  updated_at_ms bigint NOT NULL,
  CONSTRAINT worker_pools_pkey PRIMARY KEY (name),
  CONSTRAINT worker_pools_name_check CHECK (name ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
  CONSTRAINT worker_pools_max_running_check
    CHECK (max_running IS NULL OR max_running >= 1 AND max_running <= 100000),
  CONSTRAINT worker_pools_version_check CHECK (version >= 1)
);

INSERT INTO ql3.worker_pools (name, serves_all_projects, max_running, version, created_at_ms,
                              updated_at_ms)
VALUES ('default', true, NULL, 1, (extract(epoch FROM now()) * 1000)::bigint,
        (extract(epoch FROM now()) * 1000)::bigint);

CREATE TABLE ql3.worker_pool_grants (
  pool text NOT NULL,
  project_id text NOT NULL,
  max_running integer,
  weight integer NOT NULL,
  created_by text NOT NULL,
  created_at_ms bigint NOT NULL,
  updated_at_ms bigint NOT NULL,
  CONSTRAINT worker_pool_grants_pkey PRIMARY KEY (pool, project_id),
  CONSTRAINT worker_pool_grants_max_running_check
    CHECK (max_running IS NULL OR max_running >= 1 AND max_running <= 100000),
  CONSTRAINT worker_pool_grants_weight_check CHECK (weight >= 1 AND weight <= 100),
  CONSTRAINT worker_pool_grants_pool_fkey FOREIGN KEY (pool) REFERENCES ql3.worker_pools (name),
  CONSTRAINT worker_pool_grants_project_fkey FOREIGN KEY (project_id)
    REFERENCES ql3.projects (id)
);

CREATE TABLE ql3.worker_drains (
  credential_id text NOT NULL,
  requested_by text NOT NULL,
  requested_at_ms bigint NOT NULL,
  CONSTRAINT worker_drains_pkey PRIMARY KEY (credential_id),
  CONSTRAINT worker_drains_credential_fkey FOREIGN KEY (credential_id)
    REFERENCES ql3.worker_credentials (id)
);

-- Fair shares pick each project's next runs in dispatch order.
CREATE INDEX runs_dispatchable_by_project ON ql3.runs (project_id, priority DESC, queued_at_ms, id)
  WHERE status = 'queued' AND cancel_requested_at_ms IS NULL;
