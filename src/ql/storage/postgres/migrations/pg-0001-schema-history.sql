-- Schema ql3 with the migration history of stream postgresql-main and the schema capability
-- row.
--
-- The migrator writes one schema_migrations row in the same transaction as each migration, and
-- moves the capability row only from its exact previous version in the migration that declares
-- the next one. The capability row references its history row through a deferred foreign key,
-- so a capability version can only commit together with the migration that declares it.

CREATE SCHEMA ql3;

CREATE TABLE ql3.schema_migrations (
  id text NOT NULL,
  stream text NOT NULL,
  dialect text NOT NULL,
  checksum text NOT NULL,
  applied_at_ms bigint NOT NULL,
  CONSTRAINT schema_migrations_pkey PRIMARY KEY (id),
  CONSTRAINT schema_migrations_stream_check CHECK (stream = 'postgresql-main'),
  CONSTRAINT schema_migrations_dialect_check CHECK (dialect = 'postgresql'),
  CONSTRAINT schema_migrations_checksum_check CHECK (checksum ~ '^[0-9a-f]{64}$')
);

CREATE TABLE ql3.schema_capabilities (
  name text NOT NULL,
  version bigint NOT NULL,
  capability_map text NOT NULL,
  migration_id text NOT NULL,
  CONSTRAINT schema_capabilities_pkey PRIMARY KEY (name),
  CONSTRAINT schema_capabilities_name_check CHECK (name = 'control-core'),
  CONSTRAINT schema_capabilities_version_check CHECK (version >= 1),
  CONSTRAINT schema_capabilities_migration_fkey FOREIGN KEY (migration_id)
    REFERENCES ql3.schema_migrations (id) DEFERRABLE INITIALLY DEFERRED
);

-- Immutable and append-only tables reject UPDATE and DELETE with this trigger function.
CREATE FUNCTION ql3.reject_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'QL001', MESSAGE = TG_TABLE_NAME || ' rows are immutable';
END;
$$;
