-- A retry policy may retry an attempt that ran into its timeout (the executor ended it) as it
-- retries a failed one. Every run written before says no, which is what happened before: a
-- timeout ended the run. Adding a column with a constant default rewrites no rows.

ALTER TABLE ql3.runs ADD COLUMN retry_on_timeout boolean NOT NULL DEFAULT false;
