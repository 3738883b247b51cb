-- Projects and published definitions: task heads with their immutable revisions and execution
-- plans, trigger heads with their immutable revisions. A head and its first revision reference
-- each other, so those foreign keys are checked at commit.

CREATE TABLE ql3.projects (
  id text NOT NULL,
  slug text NOT NULL,
  name text NOT NULL,
  status text NOT NULL,
  version bigint NOT NULL,
  created_at_ms bigint NOT NULL,
  updated_at_ms bigint NOT NULL,
  CONSTRAINT projects_pkey PRIMARY KEY (id),
  CONSTRAINT projects_slug_key UNIQUE (slug),
  CONSTRAINT projects_slug_check CHECK (length(slug) >= 1),
  CONSTRAINT projects_status_check CHECK (status IN ('active', 'archived')),
  CONSTRAINT projects_version_check CHECK (version >= 1)
);

CREATE TABLE ql3.task_heads (
  task_id text NOT NULL,
  project_id text NOT NULL,
  current_revision bigint NOT NULL,
  created_at_ms bigint NOT NULL,
  updated_at_ms bigint NOT NULL,
  CONSTRAINT task_heads_pkey PRIMARY KEY (task_id),
  CONSTRAINT task_heads_current_revision_check CHECK (current_revision >= 1),
  CONSTRAINT task_heads_project_fkey FOREIGN KEY (project_id) REFERENCES ql3.projects (id)
);

CREATE INDEX task_heads_by_project ON ql3.task_heads (project_id, task_id);

CREATE TABLE ql3.task_revisions (
  task_id text NOT NULL,
  revision bigint NOT NULL,
  project_id text NOT NULL,
  mutation_id text NOT NULL,
  name text NOT NULL,
  kind text NOT NULL,
  spec_json text NOT NULL,
  labels_json text NOT NULL,
  enabled boolean NOT NULL,
  content_digest text NOT NULL,
  created_at_ms bigint NOT NULL,
  CONSTRAINT task_revisions_pkey PRIMARY KEY (task_id, revision),
  CONSTRAINT task_revisions_mutation_id_key UNIQUE (mutation_id),
  CONSTRAINT task_revisions_revision_check CHECK (revision >= 1),
  CONSTRAINT task_revisions_mutation_id_check CHECK (length(mutation_id) >= 1),
  CONSTRAINT task_revisions_kind_check CHECK (length(kind) >= 1),
  CONSTRAINT task_revisions_content_digest_check CHECK (content_digest ~ '^[0-9a-f]{64}$'),
  CONSTRAINT task_revisions_head_fkey FOREIGN KEY (task_id)
    REFERENCES ql3.task_heads (task_id) DEFERRABLE INITIALLY DEFERRED,
  CONSTRAINT task_revisions_project_fkey FOREIGN KEY (project_id) REFERENCES ql3.projects (id)
);

ALTER TABLE ql3.task_heads
  ADD CONSTRAINT task_heads_current_revision_fkey FOREIGN KEY (task_id, current_revision)
    REFERENCES ql3.task_revisions (task_id, revision) DEFERRABLE INITIALLY DEFERRED;

CREATE TRIGGER task_revisions_immutable BEFORE UPDATE OR DELETE ON ql3.task_revisions
  FOR EACH ROW EXECUTE FUNCTION ql3.reject_change();

CREATE TABLE ql3.execution_revisions (
  id text NOT NULL,
  project_id text NOT NULL,
  task_id text NOT NULL,
  task_revision bigint NOT NULL,
  task_digest text NOT NULL,
  executor_type text NOT NULL,
  plan_json text NOT NULL,
  plan_digest text NOT NULL,
  created_at_ms bigint NOT NULL,
  CONSTRAINT execution_revisions_pkey PRIMARY KEY (id),
  CONSTRAINT execution_revisions_task_executor_key UNIQUE (task_id, task_revision, executor_type),
  CONSTRAINT execution_revisions_task_digest_check CHECK (task_digest ~ '^[0-9a-f]{64}$'),
  CONSTRAINT execution_revisions_executor_type_check
    CHECK (executor_type IN ('local_process', 'remote_worker')),
  CONSTRAINT execution_revisions_plan_digest_check CHECK (plan_digest ~ '^[0-9a-f]{64}$'),
  CONSTRAINT execution_revisions_project_fkey FOREIGN KEY (project_id) REFERENCES ql3.projects (id),
  CONSTRAINT execution_revisions_task_revision_fkey FOREIGN KEY (task_id, task_revision)
    REFERENCES ql3.task_revisions (task_id, revision)
);

CREATE TRIGGER execution_revisions_immutable BEFORE UPDATE OR DELETE ON ql3.execution_revisions
  FOR EACH ROW EXECUTE FUNCTION ql3.reject_change();

CREATE TABLE ql3.trigger_heads (
  trigger_id text NOT NULL,
  project_id text NOT NULL,
  task_id text NOT NULL,
  current_revision bigint NOT NULL,
  created_at_ms bigint NOT NULL,
  updated_at_ms bigint NOT NULL,
  CONSTRAINT trigger_heads_pkey PRIMARY KEY (trigger_id),
  CONSTRAINT trigger_heads_current_revision_check CHECK (current_revision >= 1),
  CONSTRAINT trigger_heads_project_fkey FOREIGN KEY (project_id) REFERENCES ql3.projects (id),
  CONSTRAINT trigger_heads_task_fkey FOREIGN KEY (task_id) REFERENCES ql3.task_heads (task_id)
);

CREATE INDEX trigger_heads_by_project ON ql3.trigger_heads (project_id, trigger_id);
CREATE INDEX trigger_heads_by_task ON ql3.trigger_heads (task_id, trigger_id);

CREATE TABLE ql3.trigger_revisions (
  trigger_id text NOT NULL,
  revision bigint NOT NULL,
  project_id text NOT NULL,
  mutation_id text NOT NULL,
  task_id text NOT NULL,
  task_revision bigint NOT NULL,
  task_digest text NOT NULL,
  expression text NOT NULL,
  timezone text NOT NULL,
  misfire text NOT NULL,
  enabled boolean NOT NULL,
  content_digest text NOT NULL,
  created_at_ms bigint NOT NULL,
  CONSTRAINT trigger_revisions_pkey PRIMARY KEY (trigger_id, revision),
  CONSTRAINT trigger_revisions_mutation_id_key UNIQUE (mutation_id),
  CONSTRAINT trigger_revisions_revision_check CHECK (revision >= 1),
  CONSTRAINT trigger_revisions_mutation_id_check CHECK (length(mutation_id) >= 1),
  CONSTRAINT trigger_revisions_task_digest_check CHECK (task_digest ~ '^[0-9a-f]{64}$'),
  CONSTRAINT trigger_revisions_expression_check CHECK (length(expression) >= 1),
  CONSTRAINT trigger_revisions_timezone_check CHECK (length(timezone) >= 1),
  CONSTRAINT trigger_revisions_misfire_check CHECK (misfire IN ('skip', 'fire_once')),
  CONSTRAINT trigger_revisions_content_digest_check CHECK (content_digest ~ '^[0-9a-f]{64}$'),
  CONSTRAINT trigger_revisions_head_fkey FOREIGN KEY (trigger_id)
    REFERENCES ql3.trigger_heads (trigger_id) DEFERRABLE INITIALLY DEFERRED,
  CONSTRAINT trigger_revisions_project_fkey FOREIGN KEY (project_id) REFERENCES ql3.projects (id),
  CONSTRAINT trigger_revisions_task_revision_fkey FOREIGN KEY (task_id, task_revision)
    REFERENCES ql3.task_revisions (task_id, revision)
);

ALTER TABLE ql3.trigger_heads
  ADD CONSTRAINT trigger_heads_current_revision_fkey FOREIGN KEY (trigger_id, current_revision)
    REFERENCES ql3.trigger_revisions (trigger_id, revision) DEFERRABLE INITIALLY DEFERRED;

CREATE TRIGGER trigger_revisions_immutable BEFORE UPDATE OR DELETE ON ql3.trigger_revisions
  FOR EACH ROW EXECUTE FUNCTION ql3.reject_change();
