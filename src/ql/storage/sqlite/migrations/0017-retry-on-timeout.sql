-- A retry policy may retry an attempt that ran into its timeout (the executor ended it) as it
-- retries a failed one. Every policy written before says no, which is what happened before:
-- a timeout ended the run.

ALTER TABLE run_retry_policies ADD COLUMN retry_on_timeout INTEGER NOT NULL DEFAULT 0
  CHECK (retry_on_timeout IN (0, 1));
