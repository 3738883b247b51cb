-- One schedule row per trigger head: the durable cursor shared by every replica, with the
-- four-part claim fence (owner, token, version, expiry) of the row-lease scheduler. Publishing a
-- trigger revision resets the row (cursor NULL, claim cleared, state and claim versions bumped),
-- so every claim taken on an older revision is dead. All times come from the database clock.

CREATE TABLE ql3.trigger_schedules (
  trigger_id text NOT NULL,
  project_id text NOT NULL,
  trigger_revision bigint NOT NULL,
  enabled boolean NOT NULL,
  next_fire_at_ms bigint,
  last_scheduled_at_ms bigint,
  state_version bigint NOT NULL,
  published_at_ms bigint NOT NULL,
  exhausted boolean NOT NULL,
  claim_owner text,
  claim_token uuid,
  claim_version bigint NOT NULL,
  claim_expires_at_ms bigint,
  updated_at_ms bigint NOT NULL,
  CONSTRAINT trigger_schedules_pkey PRIMARY KEY (trigger_id),
  CONSTRAINT trigger_schedules_state_version_check CHECK (state_version >= 1),
  CONSTRAINT trigger_schedules_claim_version_check CHECK (claim_version >= 0),
  CONSTRAINT trigger_schedules_claim_complete_check CHECK (
    (claim_owner IS NULL AND claim_token IS NULL AND claim_expires_at_ms IS NULL)
    OR (claim_owner IS NOT NULL AND claim_token IS NOT NULL AND claim_expires_at_ms IS NOT NULL)),
  CONSTRAINT trigger_schedules_claim_owner_check
    CHECK (claim_owner IS NULL OR length(claim_owner) BETWEEN 1 AND 128),
  CONSTRAINT trigger_schedules_claim_expiry_check
    CHECK (claim_expires_at_ms > updated_at_ms),
  CONSTRAINT trigger_schedules_head_fkey FOREIGN KEY (trigger_id)
    REFERENCES ql3.trigger_heads (trigger_id),
  CONSTRAINT trigger_schedules_project_fkey FOREIGN KEY (project_id) REFERENCES ql3.projects (id),
  CONSTRAINT trigger_schedules_revision_fkey FOREIGN KEY (trigger_id, trigger_revision)
    REFERENCES ql3.trigger_revisions (trigger_id, revision)
);

-- Claim order over the rows that can ever be due: NULL cursors (initialisation) first.
CREATE INDEX trigger_schedules_due
  ON ql3.trigger_schedules (next_fire_at_ms NULLS FIRST, project_id, trigger_id)
  WHERE enabled AND NOT exhausted;

-- Live claims by expiry: when the next claim frees up (the coordinator's idle sleep).
CREATE INDEX trigger_schedules_claims ON ql3.trigger_schedules (claim_expires_at_ms)
  WHERE claim_owner IS NOT NULL;
