-- A cron run carries its occurrence's idempotency key. The unique index on (project_id,
-- idempotency_key) is what makes a second admission of one occurrence impossible; a cron run
-- without a key would slip past it, so the database refuses one.

ALTER TABLE ql3.runs ADD CONSTRAINT runs_cron_key_check
  CHECK (trigger_type <> 'cron' OR idempotency_key IS NOT NULL);
