-- Deterministic jitter (DESIGN §11). A trigger revision may spread its runs over a window after
-- each occurrence; 0 (every revision written before) means none. The offset of an occurrence
-- is computed from the trigger and the occurrence (core/jitter.h) and lands in the run's
-- queued_at_ms, which dispatch already orders by.

ALTER TABLE trigger_revisions ADD COLUMN jitter_ms INTEGER NOT NULL DEFAULT 0
  CHECK (jitter_ms BETWEEN 0 AND 3600000);
