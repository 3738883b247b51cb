-- The Artifact store (DESIGN §14; core/artifact_store.h). Chunks are content-addressed pieces
-- of blobs (SHA-256 of their bytes), stored once whoever holds them; a blob is an ordered list
-- of chunks named by the SHA-256 of all its bytes. A project holds a blob by uploading it
-- (artifact_uploads) or through a script version naming it. A chunk's bytes never change;
-- script versions and their files are append-only, and retention deletes old unpinned ones,
-- then what nothing references after a grace period (touched_at_ms is refreshed by every write
-- that needs the row). A script's row is never deleted: a deleted script stays as a tombstone.

CREATE TABLE ql3.artifact_chunks (
  digest text NOT NULL,
  size bigint NOT NULL,
  bytes bytea NOT NULL,
  touched_at_ms bigint NOT NULL,
  CONSTRAINT artifact_chunks_pkey PRIMARY KEY (digest),
  CONSTRAINT artifact_chunks_digest_check CHECK (digest ~ '^[0-9a-f]{64}$'),
  CONSTRAINT artifact_chunks_size_check CHECK (size BETWEEN 1 AND 16777216),
  CONSTRAINT artifact_chunks_bytes_check CHECK (length(bytes) = size)
);

CREATE TABLE ql3.artifact_blobs (
  digest text NOT NULL,
  size bigint NOT NULL,
  chunk_count bigint NOT NULL,
  touched_at_ms bigint NOT NULL,
  CONSTRAINT artifact_blobs_pkey PRIMARY KEY (digest),
  CONSTRAINT artifact_blobs_digest_check CHECK (digest ~ '^[0-9a-f]{64}$'),
  CONSTRAINT artifact_blobs_size_check CHECK (size >= 0),
  CONSTRAINT artifact_blobs_chunk_count_check CHECK (chunk_count >= 0)
);

CREATE TABLE ql3.artifact_blob_chunks (
  blob_digest text NOT NULL,
  seq bigint NOT NULL,
  chunk_digest text NOT NULL,
  CONSTRAINT artifact_blob_chunks_pkey PRIMARY KEY (blob_digest, seq),
  CONSTRAINT artifact_blob_chunks_seq_check CHECK (seq >= 0),
  CONSTRAINT artifact_blob_chunks_blob_fkey FOREIGN KEY (blob_digest)
    REFERENCES ql3.artifact_blobs (digest) ON DELETE CASCADE,
  CONSTRAINT artifact_blob_chunks_chunk_fkey FOREIGN KEY (chunk_digest)
    REFERENCES ql3.artifact_chunks (digest)
);

-- The purge of unreferenced chunks looks up the blobs that list one.
CREATE INDEX artifact_blob_chunks_chunk ON ql3.artifact_blob_chunks (chunk_digest);

CREATE TABLE ql3.artifact_uploads (
  project_id text NOT NULL,
  digest text NOT NULL,
  touched_at_ms bigint NOT NULL,
  CONSTRAINT artifact_uploads_pkey PRIMARY KEY (project_id, digest),
  CONSTRAINT artifact_uploads_project_fkey FOREIGN KEY (project_id) REFERENCES ql3.projects (id),
  CONSTRAINT artifact_uploads_blob_fkey FOREIGN KEY (digest)
    REFERENCES ql3.artifact_blobs (digest)
);

CREATE INDEX artifact_uploads_digest ON ql3.artifact_uploads (digest);

CREATE TABLE ql3.scripts (
  project_id text NOT NULL,
  name text NOT NULL,
  latest_version bigint NOT NULL,
  status text NOT NULL,
  created_at_ms bigint NOT NULL,
  updated_at_ms bigint NOT NULL,
  deleted_at_ms bigint,
  CONSTRAINT scripts_pkey PRIMARY KEY (project_id, name),
  CONSTRAINT scripts_name_check CHECK (length(name) BETWEEN 1 AND 128),
  CONSTRAINT scripts_latest_version_check CHECK (latest_version >= 1),
  CONSTRAINT scripts_status_check CHECK (status IN ('active', 'deleted')),
  CONSTRAINT scripts_deleted_check CHECK ((status = 'deleted') = (deleted_at_ms IS NOT NULL)),
  CONSTRAINT scripts_project_fkey FOREIGN KEY (project_id) REFERENCES ql3.projects (id)
);

CREATE TABLE ql3.script_versions (
  project_id text NOT NULL,
  name text NOT NULL,
  version bigint NOT NULL,
  kind text NOT NULL,
  digest text NOT NULL,
  size bigint NOT NULL,
  entry text NOT NULL,
  created_by text NOT NULL,
  created_at_ms bigint NOT NULL,
  CONSTRAINT script_versions_pkey PRIMARY KEY (project_id, name, version),
  CONSTRAINT script_versions_version_check CHECK (version >= 1),
  CONSTRAINT script_versions_kind_check CHECK (kind IN ('file', 'tree')),
  CONSTRAINT script_versions_size_check CHECK (size >= 0),
  CONSTRAINT script_versions_entry_check CHECK (length(entry) BETWEEN 1 AND 1024),
  CONSTRAINT script_versions_script_fkey FOREIGN KEY (project_id, name)
    REFERENCES ql3.scripts (project_id, name),
  CONSTRAINT script_versions_blob_fkey FOREIGN KEY (digest) REFERENCES ql3.artifact_blobs (digest)
);

-- Who holds a blob, and the retention's scan by age.
CREATE INDEX script_versions_digest ON ql3.script_versions (digest);
CREATE INDEX script_versions_created ON ql3.script_versions (created_at_ms);

CREATE TABLE ql3.script_version_files (
  project_id text NOT NULL,
  name text NOT NULL,
  version bigint NOT NULL,
  path text NOT NULL,
  digest text NOT NULL,
  size bigint NOT NULL,
  executable boolean NOT NULL,
  CONSTRAINT script_version_files_pkey PRIMARY KEY (project_id, name, version, path),
  CONSTRAINT script_version_files_path_check CHECK (length(path) BETWEEN 1 AND 1024),
  CONSTRAINT script_version_files_size_check CHECK (size >= 0),
  CONSTRAINT script_version_files_version_fkey FOREIGN KEY (project_id, name, version)
    REFERENCES ql3.script_versions (project_id, name, version) ON DELETE CASCADE,
  CONSTRAINT script_version_files_blob_fkey FOREIGN KEY (digest)
    REFERENCES ql3.artifact_blobs (digest)
);

CREATE INDEX script_version_files_digest ON ql3.script_version_files (digest);

-- A chunk's bytes are what its digest names: only its touched time changes.
CREATE FUNCTION ql3.artifact_chunks_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'QL001', MESSAGE = 'chunks are immutable';
END;
$$;

CREATE TRIGGER artifact_chunks_immutable BEFORE UPDATE OF digest, size, bytes
  ON ql3.artifact_chunks FOR EACH ROW EXECUTE FUNCTION ql3.artifact_chunks_guard();

-- Script versions and their files are written once; retention deletes them whole.
CREATE FUNCTION ql3.script_versions_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'QL001', MESSAGE = 'script versions are append-only';
END;
$$;

CREATE TRIGGER script_versions_append_only BEFORE UPDATE ON ql3.script_versions
  FOR EACH ROW EXECUTE FUNCTION ql3.script_versions_guard();

CREATE TRIGGER script_version_files_append_only BEFORE UPDATE ON ql3.script_version_files
  FOR EACH ROW EXECUTE FUNCTION ql3.script_versions_guard();

CREATE TRIGGER scripts_immutable BEFORE DELETE ON ql3.scripts
  FOR EACH ROW EXECUTE FUNCTION ql3.reject_change();
