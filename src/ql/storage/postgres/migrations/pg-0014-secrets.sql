-- Secrets by reference (DESIGN §10): a secret is (project, name) with append-only versions.
-- A version holds only sealed material: the value sealed under its own data key
-- (sealed_value), and that data key wrapped by a key provider (wrapped_key, key_id). Deleting a
-- secret clears key_id and wrapped_key of every version (crypto-shredding: the ciphertext that
-- stays can never be opened again) and keeps the secret's row as a tombstone. A rotation
-- replaces key_id and wrapped_key of live versions; nothing else of a version ever changes, and
-- no row is ever deleted (no role holds DELETE).

CREATE TABLE ql3.secrets (
  project_id text NOT NULL,
  name text NOT NULL,
  current_version bigint NOT NULL,
  status text NOT NULL,
  created_at_ms bigint NOT NULL,
  updated_at_ms bigint NOT NULL,
  deleted_at_ms bigint,
  CONSTRAINT secrets_pkey PRIMARY KEY (project_id, name),
  CONSTRAINT secrets_name_check CHECK (length(name) BETWEEN 1 AND 128),
  CONSTRAINT secrets_current_version_check CHECK (current_version >= 1),
  CONSTRAINT secrets_status_check CHECK (status IN ('active', 'deleted')),
  CONSTRAINT secrets_deleted_check CHECK ((status = 'deleted') = (deleted_at_ms IS NOT NULL)),
  CONSTRAINT secrets_project_fkey FOREIGN KEY (project_id) REFERENCES ql3.projects (id)
);

CREATE TABLE ql3.secret_versions (
  project_id text NOT NULL,
  name text NOT NULL,
  version bigint NOT NULL,
  key_id text,
  wrapped_key text,
  sealed_value text NOT NULL,
  created_by text NOT NULL,
  created_at_ms bigint NOT NULL,
  shredded_at_ms bigint,
  CONSTRAINT secret_versions_pkey PRIMARY KEY (project_id, name, version),
  CONSTRAINT secret_versions_version_check CHECK (version >= 1),
  CONSTRAINT secret_versions_key_id_check CHECK (length(key_id) BETWEEN 1 AND 256),
  CONSTRAINT secret_versions_wrapped_key_check CHECK (length(wrapped_key) BETWEEN 1 AND 4096),
  CONSTRAINT secret_versions_sealed_value_check CHECK (length(sealed_value) BETWEEN 1 AND 98304),
  CONSTRAINT secret_versions_shredded_check CHECK (
    (key_id IS NULL) = (wrapped_key IS NULL) AND (key_id IS NULL) = (shredded_at_ms IS NOT NULL)),
  CONSTRAINT secret_versions_secret_fkey FOREIGN KEY (project_id, name)
    REFERENCES ql3.secrets (project_id, name)
);

-- The rotation walks live wrapped keys in key order.
CREATE INDEX secret_versions_live ON ql3.secret_versions (project_id, name, version)
  WHERE key_id IS NOT NULL;

CREATE FUNCTION ql3.secret_versions_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.project_id IS DISTINCT FROM OLD.project_id OR NEW.name IS DISTINCT FROM OLD.name
     OR NEW.version IS DISTINCT FROM OLD.version
     OR NEW.sealed_value IS DISTINCT FROM OLD.sealed_value
     OR NEW.created_by IS DISTINCT FROM OLD.created_by
     OR NEW.created_at_ms IS DISTINCT FROM OLD.created_at_ms
     OR OLD.key_id IS NULL THEN
    RAISE EXCEPTION USING ERRCODE = 'QL001',
      MESSAGE = 'secret versions change only their wrapped key, and a shredded one never';
  END IF;
  RETURN NEW;
END;
$$;

CREATE TRIGGER secret_versions_sealed BEFORE UPDATE ON ql3.secret_versions
  FOR EACH ROW EXECUTE FUNCTION ql3.secret_versions_guard();

CREATE TRIGGER secret_versions_immutable BEFORE DELETE ON ql3.secret_versions
  FOR EACH ROW EXECUTE FUNCTION ql3.reject_change();

CREATE TRIGGER secrets_immutable BEFORE DELETE ON ql3.secrets
  FOR EACH ROW EXECUTE FUNCTION ql3.reject_change();
