-- Migration history of stream sqlite-main and the schema capability row.
--
-- The runner writes one schema_migrations row in the same transaction as each migration, and
-- moves the capability row only from its exact previous version in the migration that
-- declares the next one. A database holds the history of its own stream only.

CREATE TABLE schema_migrations (
  id TEXT NOT NULL PRIMARY KEY,
  stream TEXT NOT NULL CHECK (stream = 'sqlite-main'),
  dialect TEXT NOT NULL CHECK (dialect = 'sqlite'),
  checksum TEXT NOT NULL CHECK (length(checksum) = 64),
  applied_at_ms INTEGER NOT NULL
) STRICT;

CREATE TABLE schema_capabilities (
  name TEXT NOT NULL PRIMARY KEY CHECK (name = 'local-control-core'),
  version INTEGER NOT NULL CHECK (version >= 1),
  capability_map TEXT NOT NULL,
  migration_id TEXT NOT NULL REFERENCES schema_migrations (id)
) STRICT;
