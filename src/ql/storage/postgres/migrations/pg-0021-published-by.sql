-- Who published each task revision (the revision history answers "who changed this job?").
-- Revisions written before this migration, and those the system writes itself, name nobody.
-- Each task and trigger write is also an audit fact (security_audit), written in the same
-- transaction. A nullable column without a default rewrites no rows.

ALTER TABLE ql3.task_revisions ADD COLUMN published_by text;
ALTER TABLE ql3.task_revisions ADD CONSTRAINT task_revisions_published_by_check
  CHECK (published_by IS NULL OR length(published_by) BETWEEN 1 AND 128);
