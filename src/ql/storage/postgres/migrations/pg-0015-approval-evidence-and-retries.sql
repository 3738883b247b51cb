-- Approvals, second step (DESIGN §9.1). Automatic evidence resolution: an approved run in
-- recovery_required may be resolved by its lost attempt's own late report instead of by a
-- person. Such a resolution has no resolver (resolved_by is NULL, the reason says what the
-- evidence was) and is never a retry.

ALTER TABLE ql3.run_resolutions ALTER COLUMN resolved_by DROP NOT NULL;
ALTER TABLE ql3.run_resolutions ADD CONSTRAINT run_resolutions_resolver_check
  CHECK (resolved_by IS NOT NULL OR resolution <> 'retry');

-- A retry of a run whose task requires approval is an approval request; the request keeps the
-- run it retries so that the approved run records retry_of_run_id. A plain reference, no
-- foreign key: retention may purge the retried run while the request stays.
ALTER TABLE ql3.approval_requests ADD COLUMN retry_of_run_id text;
