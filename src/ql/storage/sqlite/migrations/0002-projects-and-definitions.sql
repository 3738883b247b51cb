-- Projects and published definitions: task heads with their immutable revisions and execution
-- plans, trigger heads with their immutable revisions. A head and its first revision reference
-- each other, so those foreign keys are checked at commit.

CREATE TABLE projects (
  id TEXT NOT NULL PRIMARY KEY,
  slug TEXT NOT NULL UNIQUE CHECK (length(slug) >= 1),
  name TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('active', 'archived')),
  version INTEGER NOT NULL CHECK (version >= 1),
  created_at_ms INTEGER NOT NULL,
  updated_at_ms INTEGER NOT NULL
) STRICT;

CREATE TABLE task_heads (
  task_id TEXT NOT NULL PRIMARY KEY,
  project_id TEXT NOT NULL REFERENCES projects (id),
  current_revision INTEGER NOT NULL CHECK (current_revision >= 1),
  created_at_ms INTEGER NOT NULL,
  updated_at_ms INTEGER NOT NULL,
  FOREIGN KEY (task_id, current_revision) REFERENCES task_revisions (task_id, revision)
    DEFERRABLE INITIALLY DEFERRED
) STRICT;

CREATE INDEX task_heads_by_project ON task_heads (project_id, task_id);

CREATE TABLE task_revisions (
  task_id TEXT NOT NULL REFERENCES task_heads (task_id) DEFERRABLE INITIALLY DEFERRED,
  revision INTEGER NOT NULL CHECK (revision >= 1),
  project_id TEXT NOT NULL REFERENCES projects (id),
  mutation_id TEXT NOT NULL UNIQUE CHECK (length(mutation_id) >= 1),
  name TEXT NOT NULL,
  kind TEXT NOT NULL CHECK (length(kind) >= 1),
  spec_json TEXT NOT NULL,
  labels_json TEXT NOT NULL,
  enabled INTEGER NOT NULL CHECK (enabled IN (0, 1)),
  content_digest TEXT NOT NULL CHECK (length(content_digest) = 64),
  created_at_ms INTEGER NOT NULL,
  PRIMARY KEY (task_id, revision)
) STRICT;

CREATE TRIGGER task_revisions_no_update BEFORE UPDATE ON task_revisions
BEGIN
  SELECT RAISE(ABORT, 'task revisions are immutable');
END;

CREATE TRIGGER task_revisions_no_delete BEFORE DELETE ON task_revisions
BEGIN
  SELECT RAISE(ABORT, 'task revisions are immutable');
END;

CREATE TABLE execution_revisions (
  id TEXT NOT NULL PRIMARY KEY,
  project_id TEXT NOT NULL REFERENCES projects (id),
  task_id TEXT NOT NULL,
  task_revision INTEGER NOT NULL,
  task_digest TEXT NOT NULL CHECK (length(task_digest) = 64),
  executor_type TEXT NOT NULL CHECK (executor_type IN ('local_process', 'remote_worker')),
  plan_json TEXT NOT NULL,
  plan_digest TEXT NOT NULL CHECK (length(plan_digest) = 64),
  created_at_ms INTEGER NOT NULL,
  UNIQUE (task_id, task_revision, executor_type),
  FOREIGN KEY (task_id, task_revision) REFERENCES task_revisions (task_id, revision)
) STRICT;

CREATE TRIGGER execution_revisions_no_update BEFORE UPDATE ON execution_revisions
BEGIN
  SELECT RAISE(ABORT, 'execution revisions are immutable');
END;

CREATE TRIGGER execution_revisions_no_delete BEFORE DELETE ON execution_revisions
BEGIN
  SELECT RAISE(ABORT, 'execution revisions are immutable');
END;

CREATE TABLE trigger_heads (
  trigger_id TEXT NOT NULL PRIMARY KEY,
  project_id TEXT NOT NULL REFERENCES projects (id),
  task_id TEXT NOT NULL REFERENCES task_heads (task_id),
  current_revision INTEGER NOT NULL CHECK (current_revision >= 1),
  created_at_ms INTEGER NOT NULL,
  updated_at_ms INTEGER NOT NULL,
  FOREIGN KEY (trigger_id, current_revision) REFERENCES trigger_revisions (trigger_id, revision)
    DEFERRABLE INITIALLY DEFERRED
) STRICT;

CREATE INDEX trigger_heads_by_project ON trigger_heads (project_id, trigger_id);
CREATE INDEX trigger_heads_by_task ON trigger_heads (task_id, trigger_id);

CREATE TABLE trigger_revisions (
  trigger_id TEXT NOT NULL REFERENCES trigger_heads (trigger_id) DEFERRABLE INITIALLY DEFERRED,
  revision INTEGER NOT NULL CHECK (revision >= 1),
  project_id TEXT NOT NULL REFERENCES projects (id),
  mutation_id TEXT NOT NULL UNIQUE CHECK (length(mutation_id) >= 1),
  task_id TEXT NOT NULL,
  task_revision INTEGER NOT NULL,
  task_digest TEXT NOT NULL CHECK (length(task_digest) = 64),
  expression TEXT NOT NULL CHECK (length(expression) >= 1),
  timezone TEXT NOT NULL CHECK (length(timezone) >= 1),
  misfire TEXT NOT NULL CHECK (misfire IN ('skip', 'fire_once')),
  enabled INTEGER NOT NULL CHECK (enabled IN (0, 1)),
  content_digest TEXT NOT NULL CHECK (length(content_digest) = 64),
  created_at_ms INTEGER NOT NULL,
  PRIMARY KEY (trigger_id, revision),
  FOREIGN KEY (task_id, task_revision) REFERENCES task_revisions (task_id, revision)
) STRICT;

CREATE TRIGGER trigger_revisions_no_update BEFORE UPDATE ON trigger_revisions
BEGIN
  SELECT RAISE(ABORT, 'trigger revisions are immutable');
END;

CREATE TRIGGER trigger_revisions_no_delete BEFORE DELETE ON trigger_revisions
BEGIN
  SELECT RAISE(ABORT, 'trigger revisions are immutable');
END;
