-- Governance (DESIGN §9): principals with their API tokens, the installation scope above the
-- projects, append-only role bindings per scope, and the security audit. Role bindings and
-- audit facts are never changed or deleted; a revocation is a new binding version with role
-- 'none'. Tokens are kept only as the SHA-256 digest of the secret.

CREATE TABLE installation (
  id TEXT NOT NULL PRIMARY KEY CHECK (id = 'installation'),
  version INTEGER NOT NULL CHECK (version >= 1),
  created_at_ms INTEGER NOT NULL,
  updated_at_ms INTEGER NOT NULL
) STRICT;

INSERT INTO installation (id, version, created_at_ms, updated_at_ms)
VALUES ('installation', 1, CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER),
        CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));

CREATE TABLE principals (
  id TEXT NOT NULL PRIMARY KEY,
  kind TEXT NOT NULL CHECK (kind IN ('user', 'service')),
  name TEXT NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 128),
  status TEXT NOT NULL CHECK (status IN ('active', 'disabled')),
  version INTEGER NOT NULL CHECK (version >= 1),
  created_at_ms INTEGER NOT NULL,
  updated_at_ms INTEGER NOT NULL
) STRICT;

CREATE TABLE api_tokens (
  id TEXT NOT NULL PRIMARY KEY,
  principal_id TEXT NOT NULL REFERENCES principals (id),
  token_digest TEXT NOT NULL UNIQUE CHECK (length(token_digest) = 64),
  created_at_ms INTEGER NOT NULL,
  expires_at_ms INTEGER,
  revoked_at_ms INTEGER,
  last_used_at_ms INTEGER
) STRICT;

CREATE INDEX api_tokens_by_principal ON api_tokens (principal_id, id);

CREATE TABLE role_bindings (
  scope TEXT NOT NULL CHECK (length(scope) >= 1),
  subject_id TEXT NOT NULL REFERENCES principals (id),
  version INTEGER NOT NULL CHECK (version >= 1),
  role TEXT NOT NULL CHECK (role IN ('owner', 'admin', 'operator', 'viewer', 'none')),
  mutation_id TEXT NOT NULL UNIQUE CHECK (length(mutation_id) >= 1),
  changed_by TEXT NOT NULL,
  created_at_ms INTEGER NOT NULL,
  PRIMARY KEY (scope, subject_id, version)
) STRICT;

CREATE INDEX role_bindings_by_subject ON role_bindings (subject_id, scope, version);

CREATE TRIGGER role_bindings_no_update BEFORE UPDATE ON role_bindings
BEGIN
  SELECT RAISE(ABORT, 'role bindings are append-only');
END;

CREATE TRIGGER role_bindings_no_delete BEFORE DELETE ON role_bindings
BEGIN
  SELECT RAISE(ABORT, 'role bindings are append-only');
END;

CREATE TABLE security_audit (
  id TEXT NOT NULL PRIMARY KEY,
  at_ms INTEGER NOT NULL,
  actor_id TEXT,
  action TEXT NOT NULL CHECK (length(action) BETWEEN 1 AND 64),
  target_kind TEXT NOT NULL,
  target_id TEXT NOT NULL,
  project_id TEXT,
  outcome TEXT NOT NULL CHECK (outcome IN ('ok', 'denied', 'failed')),
  code TEXT NOT NULL,
  request_id TEXT NOT NULL
) STRICT;

CREATE TRIGGER security_audit_no_update BEFORE UPDATE ON security_audit
BEGIN
  SELECT RAISE(ABORT, 'security audit facts are append-only');
END;

CREATE TRIGGER security_audit_no_delete BEFORE DELETE ON security_audit
BEGIN
  SELECT RAISE(ABORT, 'security audit facts are append-only');
END;
