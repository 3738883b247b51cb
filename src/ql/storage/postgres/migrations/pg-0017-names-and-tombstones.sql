-- Names and tombstones (DESIGN §11). Tasks and triggers are addressed by id or by a name unique
-- among the live ones of their project, and can be deleted: a deleted head stays as a tombstone
-- (deleted_at_ms set) with its revisions and runs until retention, and its name is free again.
-- A task head carries its current revision's name; a trigger's name lives only on its head.

ALTER TABLE ql3.task_heads ADD COLUMN name text;
ALTER TABLE ql3.task_heads ADD COLUMN deleted_at_ms bigint;
ALTER TABLE ql3.trigger_heads ADD COLUMN name text;
ALTER TABLE ql3.trigger_heads ADD COLUMN deleted_at_ms bigint;

UPDATE ql3.task_heads h SET name = tr.name FROM ql3.task_revisions tr
  WHERE tr.task_id = h.task_id AND tr.revision = h.current_revision;

-- Names were not unique before: the oldest task keeps its name, later ones get their id
-- appended (their next revision may rename them).
UPDATE ql3.task_heads h SET name = h.name || '-' || h.task_id
  FROM (SELECT task_id, row_number() OVER (PARTITION BY project_id, name
                                           ORDER BY created_at_ms, task_id) AS n
        FROM ql3.task_heads) d
  WHERE d.task_id = h.task_id AND d.n > 1;

-- A trigger is named after its task and the last 12 hex digits of its id (as a new trigger
-- created without a name), or the whole id if that is taken.
UPDATE ql3.trigger_heads t SET name = h.name || '-' || substr(t.trigger_id, 25, 12)
  FROM ql3.task_heads h WHERE h.task_id = t.task_id;
UPDATE ql3.trigger_heads t SET name = h.name || '-' || t.trigger_id
  FROM (SELECT trigger_id, row_number() OVER (PARTITION BY project_id, name
                                              ORDER BY trigger_id) AS n
        FROM ql3.trigger_heads) d, ql3.task_heads h
  WHERE d.trigger_id = t.trigger_id AND d.n > 1 AND h.task_id = t.task_id;

ALTER TABLE ql3.task_heads ALTER COLUMN name SET NOT NULL;
ALTER TABLE ql3.trigger_heads ALTER COLUMN name SET NOT NULL;
ALTER TABLE ql3.task_heads ADD CONSTRAINT task_heads_name_check CHECK (length(name) >= 1);
ALTER TABLE ql3.trigger_heads ADD CONSTRAINT trigger_heads_name_check CHECK (length(name) >= 1);
CREATE UNIQUE INDEX task_heads_live_name ON ql3.task_heads (project_id, name)
  WHERE deleted_at_ms IS NULL;
CREATE UNIQUE INDEX trigger_heads_live_name ON ql3.trigger_heads (project_id, name)
  WHERE deleted_at_ms IS NULL;
