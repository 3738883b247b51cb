-- Deterministic jitter (DESIGN §11). A trigger revision may spread its runs over a window after
-- each occurrence; 0 (every revision written before) means none. The offset of an occurrence
-- is computed from the trigger and the occurrence (core/jitter.h) and lands in the run's
-- queued_at_ms, which dispatch already orders by. Adding a column with a constant default
-- rewrites no rows.

ALTER TABLE ql3.trigger_revisions ADD COLUMN jitter_ms bigint NOT NULL DEFAULT 0;
ALTER TABLE ql3.trigger_revisions ADD CONSTRAINT trigger_revisions_jitter_ms_check
  CHECK (jitter_ms BETWEEN 0 AND 3600000);
