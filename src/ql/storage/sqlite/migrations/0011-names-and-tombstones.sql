-- Names and tombstones (DESIGN §11). Tasks and triggers are addressed by id or by a name unique
-- among the live ones of their project, and can be deleted: a deleted head stays as a tombstone
-- (deleted_at_ms set) with its revisions and runs until retention, and its name is free again.
-- A task head carries its current revision's name; a trigger's name lives only on its head.

ALTER TABLE task_heads ADD COLUMN name TEXT NOT NULL DEFAULT '';
ALTER TABLE task_heads ADD COLUMN deleted_at_ms INTEGER;
ALTER TABLE trigger_heads ADD COLUMN name TEXT NOT NULL DEFAULT '';
ALTER TABLE trigger_heads ADD COLUMN deleted_at_ms INTEGER;

UPDATE task_heads SET name = (
  SELECT tr.name FROM task_revisions tr
  WHERE tr.task_id = task_heads.task_id AND tr.revision = task_heads.current_revision);

-- Names were not unique before: the oldest task keeps its name, later ones get their id
-- appended (their next revision may rename them).
CREATE TEMP TABLE renamed_tasks AS
  SELECT h.task_id FROM task_heads h WHERE EXISTS (
    SELECT 1 FROM task_heads o WHERE o.project_id = h.project_id AND o.name = h.name AND
      (o.created_at_ms < h.created_at_ms OR
       (o.created_at_ms = h.created_at_ms AND o.task_id < h.task_id)));
UPDATE task_heads SET name = name || '-' || task_id
  WHERE task_id IN (SELECT task_id FROM renamed_tasks);
DROP TABLE renamed_tasks;

-- A trigger is named after its task and the last 12 hex digits of its id (as a new trigger
-- created without a name), or the whole id if that is taken.
UPDATE trigger_heads SET name = (
  SELECT h.name FROM task_heads h WHERE h.task_id = trigger_heads.task_id) || '-' ||
  substr(trigger_id, 25, 12);
CREATE TEMP TABLE renamed_triggers AS
  SELECT t.trigger_id FROM trigger_heads t WHERE EXISTS (
    SELECT 1 FROM trigger_heads o WHERE o.project_id = t.project_id AND o.name = t.name AND
      o.trigger_id < t.trigger_id);
UPDATE trigger_heads SET name = (
  SELECT h.name FROM task_heads h WHERE h.task_id = trigger_heads.task_id) || '-' || trigger_id
  WHERE trigger_id IN (SELECT trigger_id FROM renamed_triggers);
DROP TABLE renamed_triggers;

CREATE UNIQUE INDEX task_heads_live_name ON task_heads (project_id, name)
  WHERE deleted_at_ms IS NULL;
CREATE UNIQUE INDEX trigger_heads_live_name ON trigger_heads (project_id, name)
  WHERE deleted_at_ms IS NULL;
