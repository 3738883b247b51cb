-- A worker credential is bound to one pool (docs/worker-protocol.md "Pools and labels"): the
-- operator names it when minting the token (`ql-cluster worker-token create NAME --pool P`), and
-- a session registers in that pool only, so holding one worker token never reaches the runs and
-- sealed secrets of projects served by another pool. A credential that registered before keeps
-- the pool of its newest session; one that never did is in the default pool.

ALTER TABLE ql3.worker_credentials ADD COLUMN pool text NOT NULL DEFAULT 'default';
ALTER TABLE ql3.worker_credentials
  ADD CONSTRAINT worker_credentials_pool_check CHECK (pool ~ '^[a-z0-9][a-z0-9_-]{0,62}$');

UPDATE ql3.worker_credentials c
   SET pool = s.pool
  FROM (SELECT DISTINCT ON (credential_id) credential_id, pool
          FROM ql3.worker_sessions
         ORDER BY credential_id, generation DESC) s
 WHERE s.credential_id = c.id;

-- Every session registered from now on is in its credential's pool, whichever replica (of
-- whichever version) writes it: a replica of an older version that still accepts a registration
-- in another pool during a rolling upgrade is refused by the database. Sessions from before stay
-- as they were (NOT VALID: an older, fenced session may have been in another pool).
ALTER TABLE ql3.worker_credentials
  ADD CONSTRAINT worker_credentials_id_pool_key UNIQUE (id, pool);
ALTER TABLE ql3.worker_sessions
  ADD CONSTRAINT worker_sessions_credential_pool_fkey FOREIGN KEY (credential_id, pool)
    REFERENCES ql3.worker_credentials (id, pool) NOT VALID;
