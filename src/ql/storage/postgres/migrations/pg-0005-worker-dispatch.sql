-- Remote workers: credentials (stored as SHA-256 digests only), sessions with a generation that
-- fences every older session of the same worker, and the dispatch lease of a run attempt, bound
-- to worker, session, generation and attempt, with the digest of the worker-chosen lease token.

CREATE TABLE ql3.worker_credentials (
  id text NOT NULL,
  name text NOT NULL,
  token_digest text NOT NULL,
  created_at_ms bigint NOT NULL,
  revoked_at_ms bigint,
  CONSTRAINT worker_credentials_pkey PRIMARY KEY (id),
  CONSTRAINT worker_credentials_name_key UNIQUE (name),
  CONSTRAINT worker_credentials_token_digest_key UNIQUE (token_digest),
  CONSTRAINT worker_credentials_name_check CHECK (length(name) BETWEEN 1 AND 128),
  CONSTRAINT worker_credentials_token_digest_check CHECK (token_digest ~ '^[0-9a-f]{64}$')
);

CREATE TABLE ql3.worker_sessions (
  id text NOT NULL,
  credential_id text NOT NULL,
  generation bigint NOT NULL,
  status text NOT NULL,
  capabilities_json text NOT NULL,
  max_concurrent_runs integer NOT NULL,
  available_slots integer NOT NULL,
  version bigint NOT NULL,
  heartbeat_at_ms bigint NOT NULL,
  expires_at_ms bigint NOT NULL,
  created_at_ms bigint NOT NULL,
  updated_at_ms bigint NOT NULL,
  CONSTRAINT worker_sessions_pkey PRIMARY KEY (id),
  CONSTRAINT worker_sessions_generation_key UNIQUE (credential_id, generation),
  CONSTRAINT worker_sessions_generation_check CHECK (generation >= 1),
  CONSTRAINT worker_sessions_status_check
    CHECK (status IN ('active', 'draining', 'offline', 'fenced')),
  CONSTRAINT worker_sessions_capabilities_check CHECK (octet_length(capabilities_json) <= 16384),
  CONSTRAINT worker_sessions_slots_check
    CHECK (max_concurrent_runs BETWEEN 1 AND 1024
           AND available_slots BETWEEN 0 AND max_concurrent_runs),
  CONSTRAINT worker_sessions_version_check CHECK (version >= 1),
  CONSTRAINT worker_sessions_credential_fkey FOREIGN KEY (credential_id)
    REFERENCES ql3.worker_credentials (id)
);

CREATE TABLE ql3.run_dispatch_leases (
  attempt_id text NOT NULL,
  run_id text NOT NULL,
  worker_session_id text NOT NULL,
  session_generation bigint NOT NULL,
  offer_id text NOT NULL,
  token_digest text NOT NULL,
  lease_version bigint NOT NULL,
  status text NOT NULL,
  granted_at_ms bigint NOT NULL,
  renewed_at_ms bigint NOT NULL,
  expires_at_ms bigint NOT NULL,
  released_at_ms bigint,
  CONSTRAINT run_dispatch_leases_pkey PRIMARY KEY (attempt_id),
  CONSTRAINT run_dispatch_leases_offer_key UNIQUE (offer_id),
  CONSTRAINT run_dispatch_leases_token_digest_check CHECK (token_digest ~ '^[0-9a-f]{64}$'),
  CONSTRAINT run_dispatch_leases_version_check CHECK (lease_version >= 1),
  CONSTRAINT run_dispatch_leases_status_check
    CHECK (status IN ('granted', 'released', 'expired')),
  CONSTRAINT run_dispatch_leases_expiry_check CHECK (expires_at_ms > renewed_at_ms),
  CONSTRAINT run_dispatch_leases_attempt_fkey FOREIGN KEY (attempt_id)
    REFERENCES ql3.run_attempts (id),
  CONSTRAINT run_dispatch_leases_run_fkey FOREIGN KEY (run_id) REFERENCES ql3.runs (id),
  CONSTRAINT run_dispatch_leases_session_fkey FOREIGN KEY (worker_session_id)
    REFERENCES ql3.worker_sessions (id)
);

CREATE INDEX run_dispatch_leases_expiry ON ql3.run_dispatch_leases (expires_at_ms, attempt_id)
  WHERE status = 'granted';
