-- One schedule row per trigger head: the durable cursor of the local scheduler. A new trigger
-- revision resets the row (cursor NULL, state_version + 1); every decision advances it with a
-- compare-and-set on state_version.

CREATE TABLE trigger_schedules (
  trigger_id TEXT NOT NULL PRIMARY KEY REFERENCES trigger_heads (trigger_id),
  project_id TEXT NOT NULL REFERENCES projects (id),
  trigger_revision INTEGER NOT NULL,
  next_fire_at_ms INTEGER,
  last_scheduled_at_ms INTEGER,
  state_version INTEGER NOT NULL CHECK (state_version >= 1),
  published_at_ms INTEGER NOT NULL,
  exhausted INTEGER NOT NULL CHECK (exhausted IN (0, 1)),
  updated_at_ms INTEGER NOT NULL,
  FOREIGN KEY (trigger_id, trigger_revision) REFERENCES trigger_revisions (trigger_id, revision)
) STRICT;

-- Due rows in decision order: NULL cursors (initialisation) sort first.
CREATE INDEX trigger_schedules_due
  ON trigger_schedules (next_fire_at_ms, project_id, trigger_id)
  WHERE exhausted = 0;
