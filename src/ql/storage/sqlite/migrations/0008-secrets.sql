-- Secrets by reference (DESIGN §10): a secret is (project, name) with append-only versions.
-- A version holds only sealed material: the value sealed under its own data key
-- (sealed_value), and that data key wrapped by a key provider (wrapped_key, key_id). Deleting a
-- secret clears key_id and wrapped_key of every version (crypto-shredding: the ciphertext that
-- stays can never be opened again) and keeps the secret's row as a tombstone. Nothing else of a
-- version ever changes, and no row is ever deleted.

CREATE TABLE secrets (
  project_id TEXT NOT NULL REFERENCES projects (id),
  name TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 128),
  current_version INTEGER NOT NULL CHECK (current_version >= 1),
  status TEXT NOT NULL CHECK (status IN ('active', 'deleted')),
  created_at_ms INTEGER NOT NULL,
  updated_at_ms INTEGER NOT NULL,
  deleted_at_ms INTEGER,
  PRIMARY KEY (project_id, name),
  CHECK ((status = 'deleted') = (deleted_at_ms IS NOT NULL))
) STRICT;

CREATE TABLE secret_versions (
  project_id TEXT NOT NULL,
  name TEXT NOT NULL,
  version INTEGER NOT NULL CHECK (version >= 1),
  key_id TEXT CHECK (length(key_id) BETWEEN 1 AND 256),
  wrapped_key TEXT CHECK (length(wrapped_key) BETWEEN 1 AND 4096),
  sealed_value TEXT NOT NULL CHECK (length(sealed_value) BETWEEN 1 AND 98304),
  created_by TEXT NOT NULL,
  created_at_ms INTEGER NOT NULL,
  shredded_at_ms INTEGER,
  PRIMARY KEY (project_id, name, version),
  FOREIGN KEY (project_id, name) REFERENCES secrets (project_id, name),
  CHECK ((key_id IS NULL) = (wrapped_key IS NULL)),
  CHECK ((key_id IS NULL) = (shredded_at_ms IS NOT NULL))
) STRICT;

-- The rotation walks live wrapped keys in key order.
CREATE INDEX secret_versions_live ON secret_versions (project_id, name, version)
  WHERE key_id IS NOT NULL;

CREATE TRIGGER secret_versions_sealed_value_fixed
BEFORE UPDATE OF project_id, name, version, sealed_value, created_by, created_at_ms
ON secret_versions
BEGIN
  SELECT RAISE(ABORT, 'secret versions are append-only');
END;

CREATE TRIGGER secret_versions_shredding_is_final
BEFORE UPDATE OF key_id, wrapped_key ON secret_versions
WHEN OLD.key_id IS NULL
BEGIN
  SELECT RAISE(ABORT, 'a shredded secret version stays shredded');
END;

CREATE TRIGGER secret_versions_no_delete BEFORE DELETE ON secret_versions
BEGIN
  SELECT RAISE(ABORT, 'secret versions are append-only');
END;

CREATE TRIGGER secrets_no_delete BEFORE DELETE ON secrets
BEGIN
  SELECT RAISE(ABORT, 'a deleted secret stays as a tombstone');
END;
