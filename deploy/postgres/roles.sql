-- QingLong cluster roles and database, for a DBA to run once as a PostgreSQL superuser:
--
--   psql -v ON_ERROR_STOP=1 -d postgres -f deploy/postgres/roles.sql
--
-- Creates four LOGIN roles, none of them superuser, and none able to create databases or
-- roles, replicate or bypass row-level security:
--   ql3_migration       owns the database and schema ql3; used only by `ql-cluster migrate`
--   ql3_runtime         the resident control plane (`ql-cluster serve --database-url`)
--   ql3_admin           publishes tasks and triggers, mints credentials (--admin-database-url)
--   ql3_worker_ingress  worker authentication and sessions only
-- The privileges of the last three are granted by `ql-cluster migrate`, exactly, after every
-- migration run. Set passwords afterwards (psql: \password ql3_runtime) or use certificates.
-- To use another database name, change `qinglong` below (three places).

CREATE ROLE ql3_migration LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS
  NOINHERIT;
CREATE ROLE ql3_runtime LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS
  NOINHERIT;
CREATE ROLE ql3_admin LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS
  NOINHERIT;
CREATE ROLE ql3_worker_ingress LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION
  NOBYPASSRLS NOINHERIT;

CREATE DATABASE qinglong OWNER ql3_migration ENCODING 'UTF8' TEMPLATE template0;

-- Only the four roles may connect; nobody but the owner may create schemas or temp tables.
REVOKE ALL ON DATABASE qinglong FROM PUBLIC;
GRANT CONNECT ON DATABASE qinglong TO ql3_runtime, ql3_admin, ql3_worker_ingress;
