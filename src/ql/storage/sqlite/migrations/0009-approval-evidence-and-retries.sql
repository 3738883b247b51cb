-- Approvals, second step (DESIGN §9.1). Automatic evidence resolution: an approved run in
-- recovery_required may be resolved by its lost attempt's own late report instead of by a
-- person. Such a resolution has no resolver (resolved_by is NULL, the reason says what the
-- evidence was) and is never a retry.
-- SQLite cannot drop a NOT NULL in place, so the table is rebuilt; nothing refers to it.

CREATE TEMP TABLE run_resolutions_copy AS SELECT * FROM run_resolutions;
DROP TABLE run_resolutions;

CREATE TABLE run_resolutions (
  run_id TEXT NOT NULL PRIMARY KEY REFERENCES runs (id),
  resolution TEXT NOT NULL CHECK (resolution IN ('succeeded', 'failed', 'retry')),
  reason TEXT NOT NULL CHECK (length(reason) >= 1),
  resolved_by TEXT REFERENCES principals (id),
  retry_run_id TEXT UNIQUE REFERENCES runs (id),
  created_at_ms INTEGER NOT NULL,
  CHECK ((resolution = 'retry') = (retry_run_id IS NOT NULL)),
  CHECK (resolved_by IS NOT NULL OR resolution <> 'retry')
) STRICT;

INSERT INTO run_resolutions SELECT * FROM run_resolutions_copy;
DROP TABLE run_resolutions_copy;

CREATE TRIGGER run_resolutions_no_update BEFORE UPDATE ON run_resolutions
BEGIN
  SELECT RAISE(ABORT, 'run resolutions are append-only');
END;

-- A retry of a run whose task requires approval is an approval request; the request keeps the
-- run it retries so that the approved run records retry_of_run_id. A plain reference, no
-- foreign key: retention may purge the retried run while the request stays.
ALTER TABLE approval_requests ADD COLUMN retry_of_run_id TEXT;
