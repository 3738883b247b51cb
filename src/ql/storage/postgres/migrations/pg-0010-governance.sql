-- Governance (DESIGN §9): principals with their API tokens, the installation scope above the
-- projects, append-only role bindings per scope, and the security audit. Every API credential
-- minted before becomes a service principal of the same name, bound as installation owner (it
-- could do everything until now), with its token; the credential table is then dropped.

CREATE TABLE ql3.installation (
  id text NOT NULL,
  version bigint NOT NULL,
  created_at_ms bigint NOT NULL,
  updated_at_ms bigint NOT NULL,
  CONSTRAINT installation_pkey PRIMARY KEY (id),
  CONSTRAINT installation_id_check CHECK (id = 'installation'),
  CONSTRAINT installation_version_check CHECK (version >= 1)
);

CREATE TABLE ql3.principals (
  id text NOT NULL,
  kind text NOT NULL,
  name text NOT NULL,
  status text NOT NULL,
  version bigint NOT NULL,
  created_at_ms bigint NOT NULL,
  updated_at_ms bigint NOT NULL,
  CONSTRAINT principals_pkey PRIMARY KEY (id),
  CONSTRAINT principals_name_key UNIQUE (name),
  CONSTRAINT principals_kind_check CHECK (kind IN ('user', 'service')),
  CONSTRAINT principals_name_check CHECK (length(name) BETWEEN 1 AND 128),
  CONSTRAINT principals_status_check CHECK (status IN ('active', 'disabled')),
  CONSTRAINT principals_version_check CHECK (version >= 1)
);

CREATE TABLE ql3.api_tokens (
  id text NOT NULL,
  principal_id text NOT NULL,
  token_digest text NOT NULL,
  created_at_ms bigint NOT NULL,
  expires_at_ms bigint,
  revoked_at_ms bigint,
  CONSTRAINT api_tokens_pkey PRIMARY KEY (id),
  CONSTRAINT api_tokens_token_digest_key UNIQUE (token_digest),
  CONSTRAINT api_tokens_token_digest_check CHECK (token_digest ~ '^[0-9a-f]{64}$'),
  CONSTRAINT api_tokens_principal_fkey FOREIGN KEY (principal_id) REFERENCES ql3.principals (id)
);

CREATE INDEX api_tokens_by_principal ON ql3.api_tokens (principal_id, id);

-- Written by the runtime role, which may not change a token itself.
CREATE TABLE ql3.api_token_usage (
  token_id text NOT NULL,
  last_used_at_ms bigint NOT NULL,
  CONSTRAINT api_token_usage_pkey PRIMARY KEY (token_id),
  CONSTRAINT api_token_usage_token_fkey FOREIGN KEY (token_id) REFERENCES ql3.api_tokens (id)
);

CREATE TABLE ql3.role_bindings (
  scope text NOT NULL,
  subject_id text NOT NULL,
  version bigint NOT NULL,
  role text NOT NULL,
  mutation_id text NOT NULL,
  changed_by text NOT NULL,
  created_at_ms bigint NOT NULL,
  CONSTRAINT role_bindings_pkey PRIMARY KEY (scope, subject_id, version),
  CONSTRAINT role_bindings_mutation_id_key UNIQUE (mutation_id),
  CONSTRAINT role_bindings_scope_check CHECK (length(scope) >= 1),
  CONSTRAINT role_bindings_version_check CHECK (version >= 1),
  CONSTRAINT role_bindings_role_check CHECK (role IN ('owner', 'admin', 'operator', 'viewer', 'none')),
  CONSTRAINT role_bindings_mutation_id_check CHECK (length(mutation_id) >= 1),
  CONSTRAINT role_bindings_subject_fkey FOREIGN KEY (subject_id) REFERENCES ql3.principals (id)
);

CREATE INDEX role_bindings_by_subject ON ql3.role_bindings (subject_id, scope, version);

CREATE TRIGGER role_bindings_immutable BEFORE UPDATE OR DELETE ON ql3.role_bindings
  FOR EACH ROW EXECUTE FUNCTION ql3.reject_change();

CREATE TABLE ql3.security_audit (
  id text NOT NULL,
  at_ms bigint NOT NULL,
  actor_id text,
  action text NOT NULL,
  target_kind text NOT NULL,
  target_id text NOT NULL,
  project_id text,
  outcome text NOT NULL,
  code text NOT NULL,
  request_id text NOT NULL,
  CONSTRAINT security_audit_pkey PRIMARY KEY (id),
  CONSTRAINT security_audit_action_check CHECK (length(action) BETWEEN 1 AND 64),
  CONSTRAINT security_audit_outcome_check CHECK (outcome IN ('ok', 'denied', 'failed'))
);

CREATE TRIGGER security_audit_immutable BEFORE UPDATE OR DELETE ON ql3.security_audit
  FOR EACH ROW EXECUTE FUNCTION ql3.reject_change();

INSERT INTO ql3.installation (id, version, created_at_ms, updated_at_ms)
SELECT 'installation', 1, c.at, c.at
FROM (SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS at) c;

INSERT INTO ql3.principals (id, kind, name, status, version, created_at_ms, updated_at_ms)
SELECT id, 'service', name, 'active', 1, created_at_ms, created_at_ms FROM ql3.api_credentials;

INSERT INTO ql3.api_tokens (id, principal_id, token_digest, created_at_ms, revoked_at_ms)
SELECT id, id, token_digest, created_at_ms, revoked_at_ms FROM ql3.api_credentials;

INSERT INTO ql3.role_bindings (scope, subject_id, version, role, mutation_id, changed_by,
                               created_at_ms)
SELECT 'installation', id, 1, 'owner', 'pg-0010:' || id, id, created_at_ms
FROM ql3.api_credentials WHERE revoked_at_ms IS NULL;

DROP TABLE ql3.api_credentials;
