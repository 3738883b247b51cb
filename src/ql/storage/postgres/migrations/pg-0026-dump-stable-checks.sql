-- Backups restore word for word. pg_dump writes a CHECK constraint as PostgreSQL prints it, and
-- pg_restore parses that text again; the parser flattens a chain of ANDs, so a constraint whose
-- ANDs were nested (two BETWEENs joined by AND) comes back with the same meaning but another
-- text, and the readiness audit, which compares the catalog exactly, refused every restored
-- database. The constraint is written again as one flat chain, which prints and parses back
-- the same.

ALTER TABLE ql3.worker_sessions DROP CONSTRAINT worker_sessions_slots_check;
ALTER TABLE ql3.worker_sessions ADD CONSTRAINT worker_sessions_slots_check
  CHECK (max_concurrent_runs >= 1 AND max_concurrent_runs <= 1024 AND available_slots >= 0
         AND available_slots <= max_concurrent_runs);
