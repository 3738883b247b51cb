-- The Artifact store (DESIGN §14; core/artifact_store.h). Chunks are content-addressed pieces
-- of blobs (SHA-256 of their bytes), stored once whoever holds them; a blob is an ordered list
-- of chunks named by the SHA-256 of all its bytes. A project holds a blob by uploading it
-- (artifact_uploads) or through a script version naming it. Script versions are append-only;
-- retention deletes old unpinned ones, then what nothing references after a grace period
-- (touched_at_ms is refreshed by every write that needs the row).

CREATE TABLE artifact_chunks (
  digest TEXT PRIMARY KEY CHECK (length(digest) = 64),
  size INTEGER NOT NULL CHECK (size BETWEEN 1 AND 16777216),
  bytes BLOB NOT NULL CHECK (length(bytes) = size),
  touched_at_ms INTEGER NOT NULL
) STRICT;

CREATE TABLE artifact_blobs (
  digest TEXT PRIMARY KEY CHECK (length(digest) = 64),
  size INTEGER NOT NULL CHECK (size >= 0),
  chunk_count INTEGER NOT NULL CHECK (chunk_count >= 0),
  touched_at_ms INTEGER NOT NULL
) STRICT;

CREATE TABLE artifact_blob_chunks (
  blob_digest TEXT NOT NULL REFERENCES artifact_blobs (digest) ON DELETE CASCADE,
  seq INTEGER NOT NULL CHECK (seq >= 0),
  chunk_digest TEXT NOT NULL REFERENCES artifact_chunks (digest),
  PRIMARY KEY (blob_digest, seq)
) STRICT;

CREATE INDEX artifact_blob_chunks_chunk ON artifact_blob_chunks (chunk_digest);

CREATE TABLE artifact_uploads (
  project_id TEXT NOT NULL REFERENCES projects (id),
  digest TEXT NOT NULL REFERENCES artifact_blobs (digest),
  touched_at_ms INTEGER NOT NULL,
  PRIMARY KEY (project_id, digest)
) STRICT;

CREATE INDEX artifact_uploads_digest ON artifact_uploads (digest);

CREATE TABLE scripts (
  project_id TEXT NOT NULL REFERENCES projects (id),
  name TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 128),
  latest_version INTEGER NOT NULL CHECK (latest_version >= 1),
  status TEXT NOT NULL CHECK (status IN ('active', 'deleted')),
  created_at_ms INTEGER NOT NULL,
  updated_at_ms INTEGER NOT NULL,
  deleted_at_ms INTEGER,
  PRIMARY KEY (project_id, name),
  CHECK ((status = 'deleted') = (deleted_at_ms IS NOT NULL))
) STRICT;

CREATE TABLE script_versions (
  project_id TEXT NOT NULL,
  name TEXT NOT NULL,
  version INTEGER NOT NULL CHECK (version >= 1),
  kind TEXT NOT NULL CHECK (kind IN ('file', 'tree')),
  digest TEXT NOT NULL REFERENCES artifact_blobs (digest),
  size INTEGER NOT NULL CHECK (size >= 0),
  entry TEXT NOT NULL CHECK (length(entry) BETWEEN 1 AND 1024),
  created_by TEXT NOT NULL,
  created_at_ms INTEGER NOT NULL,
  PRIMARY KEY (project_id, name, version),
  FOREIGN KEY (project_id, name) REFERENCES scripts (project_id, name)
) STRICT;

CREATE INDEX script_versions_digest ON script_versions (digest);
CREATE INDEX script_versions_created ON script_versions (created_at_ms);

CREATE TABLE script_version_files (
  project_id TEXT NOT NULL,
  name TEXT NOT NULL,
  version INTEGER NOT NULL,
  path TEXT NOT NULL CHECK (length(path) BETWEEN 1 AND 1024),
  digest TEXT NOT NULL REFERENCES artifact_blobs (digest),
  size INTEGER NOT NULL CHECK (size >= 0),
  executable INTEGER NOT NULL CHECK (executable IN (0, 1)),
  PRIMARY KEY (project_id, name, version, path),
  FOREIGN KEY (project_id, name, version) REFERENCES script_versions (project_id, name, version)
    ON DELETE CASCADE
) STRICT;

CREATE INDEX script_version_files_digest ON script_version_files (digest);

CREATE TRIGGER script_versions_append_only BEFORE UPDATE ON script_versions
BEGIN
  SELECT RAISE(ABORT, 'script versions are append-only');
END;

CREATE TRIGGER script_version_files_append_only BEFORE UPDATE ON script_version_files
BEGIN
  SELECT RAISE(ABORT, 'script versions are append-only');
END;

CREATE TRIGGER artifact_chunks_immutable BEFORE UPDATE OF digest, size, bytes ON artifact_chunks
BEGIN
  SELECT RAISE(ABORT, 'chunks are immutable');
END;

CREATE TRIGGER scripts_no_delete BEFORE DELETE ON scripts
BEGIN
  SELECT RAISE(ABORT, 'a deleted script stays as a tombstone');
END;
