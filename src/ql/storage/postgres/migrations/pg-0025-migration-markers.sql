-- The marker of a prepare/commit pair in progress (a migration whose statements cannot run in a
-- transaction, such as CREATE INDEX CONCURRENTLY). The migrator writes a pair's row in its own
-- transaction before the prepare migration's first statement, counts each statement that
-- completed, and deletes the row in the transaction that writes the pair's two history rows, so
-- schema_migrations only ever holds migrations that ran whole. A row here means: the pair was
-- started and has not landed (a migrator died or failed in between); migrating again runs its
-- statements again, then the commit migration.

CREATE TABLE ql3.schema_migration_markers (
  id text NOT NULL,
  checksum text NOT NULL,
  statements integer NOT NULL,
  statements_run integer NOT NULL,
  started_at_ms bigint NOT NULL,
  updated_at_ms bigint NOT NULL,
  CONSTRAINT schema_migration_markers_pkey PRIMARY KEY (id),
  CONSTRAINT schema_migration_markers_id_check CHECK (id ~ '^pg-[0-9]{4}-[a-z0-9-]+-prepare$'),
  CONSTRAINT schema_migration_markers_checksum_check CHECK (checksum ~ '^[0-9a-f]{64}$'),
  CONSTRAINT schema_migration_markers_statements_check
    CHECK (statements >= 0 AND statements_run BETWEEN 0 AND statements)
);
