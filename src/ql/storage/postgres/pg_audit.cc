#include "ql/storage/postgres/pg_audit.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include "ql/core/migration_stream.h"
#include "ql/core/rfc3339.h"
#include "ql/storage/postgres/pg_migrations.h"

namespace ql::pg {
namespace {

Status Fail(std::string_view code, std::string message) {
  return Corrupt(std::string(code), std::move(message));
}

// The runtime role's privileges on every ql3 relation; grants.sql grants exactly these. DELETE
// on the run history tables (and the outbox rows of purged runs) is the retention purge's, and
// nothing else's.
const std::map<std::string, std::set<std::string>>& RuntimePrivileges() {
  static const auto* const kPrivileges = new std::map<std::string, std::set<std::string>>{
      {"schema_migrations", {"SELECT"}},
      {"schema_capabilities", {"SELECT"}},
      {"schema_migration_markers", {"SELECT"}},
      {"projects", {"SELECT"}},
      {"task_heads", {"SELECT"}},
      {"task_revisions", {"SELECT"}},
      {"execution_revisions", {"SELECT"}},
      {"trigger_heads", {"SELECT"}},
      {"trigger_revisions", {"SELECT"}},
      {"runs", {"SELECT", "INSERT", "UPDATE", "DELETE"}},
      {"run_attempts", {"SELECT", "INSERT", "UPDATE", "DELETE"}},
      {"run_events", {"SELECT", "INSERT", "DELETE"}},
      {"trigger_schedules", {"SELECT", "UPDATE"}},
      {"worker_credentials", {}},
      {"worker_sessions", {"SELECT", "INSERT", "UPDATE"}},
      {"run_dispatch_leases", {"SELECT", "INSERT", "UPDATE", "DELETE"}},
      {"installation", {"SELECT"}},
      {"principals", {"SELECT"}},
      {"api_tokens", {"SELECT"}},
      {"api_token_usage", {"SELECT", "INSERT", "UPDATE"}},
      {"role_bindings", {"SELECT"}},
      {"security_audit", {"INSERT"}},
      {"run_log_chunks", {"SELECT", "INSERT", "DELETE"}},
      {"approval_requests", {"SELECT", "INSERT", "UPDATE"}},
      {"approval_decisions", {"SELECT", "INSERT"}},
      {"approved_actions", {"SELECT", "INSERT"}},
      {"approval_receipts", {"SELECT", "INSERT"}},
      {"run_resolutions", {"SELECT", "INSERT"}},
      {"project_retention", {"SELECT"}},
      {"task_retention", {"SELECT"}},
      {"secrets", {"SELECT"}},
      {"secret_versions", {"SELECT"}},
      {"notification_channels", {"SELECT"}},
      {"notification_rules", {"SELECT"}},
      {"notification_rule_states", {"SELECT", "INSERT", "UPDATE"}},
      {"notification_channel_states", {"SELECT", "INSERT", "UPDATE"}},
      {"notification_outbox", {"SELECT", "INSERT", "UPDATE", "DELETE"}},
      {"artifact_chunks", {"SELECT"}},
      {"artifact_blobs", {"SELECT"}},
      {"artifact_blob_chunks", {"SELECT"}},
      {"artifact_uploads", {"SELECT"}},
      {"worker_pools", {"SELECT"}},
      {"worker_pool_grants", {"SELECT"}},
      {"worker_drains", {"SELECT"}},
      {"scripts", {"SELECT"}},
      {"script_versions", {"SELECT"}},
      {"script_version_files", {"SELECT"}},
  };
  return *kPrivileges;
}

// The worker-ingress role's privileges: worker authentication and sessions, nothing else (no
// definitions, schedules, runs, attempts or leases).
const std::map<std::string, std::set<std::string>>& WorkerIngressPrivileges() {
  static const auto* const kPrivileges = new std::map<std::string, std::set<std::string>>{
      {"schema_migrations", {"SELECT"}},
      {"schema_capabilities", {"SELECT"}},
      {"worker_credentials", {"SELECT"}},
      {"worker_sessions", {"SELECT", "INSERT", "UPDATE"}},
  };
  return *kPrivileges;
}

// The admin role's privileges: publishing definitions, creating and resetting schedule rows,
// minting credentials; no run, attempt, event, session or lease.
const std::map<std::string, std::set<std::string>>& AdminPrivileges() {
  static const auto* const kPrivileges = new std::map<std::string, std::set<std::string>>{
      {"schema_migrations", {"SELECT"}},
      {"schema_capabilities", {"SELECT"}},
      {"projects", {"SELECT", "INSERT", "UPDATE"}},
      {"task_heads", {"SELECT", "INSERT", "UPDATE"}},
      {"trigger_heads", {"SELECT", "INSERT", "UPDATE"}},
      {"trigger_schedules", {"SELECT", "INSERT", "UPDATE"}},
      {"worker_credentials", {"SELECT", "INSERT", "UPDATE"}},
      {"installation", {"SELECT", "INSERT", "UPDATE"}},
      {"principals", {"SELECT", "INSERT", "UPDATE"}},
      {"api_tokens", {"SELECT", "INSERT", "UPDATE"}},
      {"principal_passwords", {"SELECT", "INSERT", "UPDATE", "DELETE"}},
      {"oidc_logins", {"SELECT", "INSERT", "DELETE"}},
      {"api_token_usage", {"SELECT"}},
      {"role_bindings", {"SELECT", "INSERT"}},
      {"security_audit", {"SELECT", "INSERT"}},
      {"task_revisions", {"SELECT", "INSERT"}},
      {"execution_revisions", {"SELECT", "INSERT"}},
      {"trigger_revisions", {"SELECT", "INSERT"}},
      {"project_retention", {"SELECT", "INSERT", "UPDATE"}},
      {"task_retention", {"SELECT", "INSERT", "UPDATE"}},
      {"secrets", {"SELECT", "INSERT", "UPDATE"}},
      {"secret_versions", {"SELECT", "INSERT", "UPDATE"}},
      {"notification_channels", {"SELECT", "INSERT", "UPDATE"}},
      {"notification_rules", {"SELECT", "INSERT", "DELETE"}},
      {"notification_outbox", {"SELECT", "UPDATE"}},
      {"artifact_chunks", {"SELECT", "INSERT", "UPDATE", "DELETE"}},
      {"artifact_blobs", {"SELECT", "INSERT", "UPDATE", "DELETE"}},
      {"artifact_blob_chunks", {"SELECT", "INSERT", "UPDATE", "DELETE"}},
      {"artifact_uploads", {"SELECT", "INSERT", "UPDATE", "DELETE"}},
      {"scripts", {"SELECT", "INSERT", "UPDATE"}},
      {"script_versions", {"SELECT", "INSERT", "UPDATE", "DELETE"}},
      {"script_version_files", {"SELECT", "INSERT", "UPDATE", "DELETE"}},
      {"worker_pools", {"SELECT", "INSERT", "UPDATE"}},
      {"worker_pool_grants", {"SELECT", "INSERT", "UPDATE", "DELETE"}},
      {"worker_drains", {"SELECT", "INSERT", "UPDATE", "DELETE"}},
  };
  return *kPrivileges;
}

constexpr const char* kTablePrivileges[] = {"SELECT",   "INSERT",     "UPDATE", "DELETE",
                                            "TRUNCATE", "REFERENCES", "TRIGGER"};

std::string Join(const std::vector<std::string>& items, size_t max_items = 3) {
  std::string out;
  for (size_t i = 0; i < items.size() && i < max_items; ++i) {
    out += (i == 0 ? "" : "; ") + items[i];
  }
  if (items.size() > max_items)
    out += "; and " + std::to_string(items.size() - max_items) + " more";
  return out;
}

// Collects, for `role` (empty = the connected role), every table privilege on a ql3 relation
// that differs from `expected` and every EXECUTE on a ql3 function.
Status CollectPrivilegeFaults(Connection& conn, const std::string& role,
                              const std::map<std::string, std::set<std::string>>& expected,
                              std::vector<std::string>& faults) {
  // Effective table privileges (grants to PUBLIC and column grants included).
  // `role` empty = the connected role; else a role name passed as $1.
  const std::string who = role.empty() ? "" : "$1::name, ";
  std::string select = "SELECT c.relname::text";
  for (const char* priv : kTablePrivileges) {
    select += std::string(", has_table_privilege(") + who + "c.oid, '" + priv + "')";
    std::string p(priv);
    if (p == "SELECT" || p == "INSERT" || p == "UPDATE" || p == "REFERENCES") {
      select += ", has_any_column_privilege(" + who + "c.oid, '" + p + "')";
    } else {
      select += ", false";
    }
  }
  select +=
      " FROM pg_catalog.pg_class c WHERE c.relnamespace = 'ql3'::regnamespace "
      "AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S') ORDER BY 1";
  QL_ASSIGN_OR_RETURN(
      Rows tables,
      conn.Exec(select, role.empty() ? std::vector<Param>{} : std::vector<Param>{P(role)},
                "audit table privileges"));
  for (int i = 0; i < tables.size(); ++i) {
    std::string table = tables.Text(i, 0);
    auto it = expected.find(table);
    std::set<std::string> want = it == expected.end() ? std::set<std::string>() : it->second;
    for (size_t k = 0; k < std::size(kTablePrivileges); ++k) {
      bool has = tables.Bool(i, 1 + 2 * static_cast<int>(k)) ||
                 tables.Bool(i, 2 + 2 * static_cast<int>(k));
      bool wanted = want.count(kTablePrivileges[k]) > 0;
      if (has && !wanted)
        faults.push_back(std::string("has ") + kTablePrivileges[k] + " on " + table);
      if (!has && wanted)
        faults.push_back(std::string("lacks ") + kTablePrivileges[k] + " on " + table);
    }
  }
  QL_RETURN_IF_ERROR(tables.status());
  QL_ASSIGN_OR_RETURN(Rows functions,
                      conn.Exec("SELECT p.proname::text FROM pg_catalog.pg_proc p "
                                "WHERE p.pronamespace = 'ql3'::regnamespace "
                                "AND has_function_privilege(" +
                                    who + "p.oid, 'EXECUTE') ORDER BY 1",
                                role.empty() ? std::vector<Param>{} : std::vector<Param>{P(role)},
                                "audit function privileges"));
  for (int i = 0; i < functions.size(); ++i) {
    faults.push_back("has EXECUTE on function " + functions.Text(i, 0));
  }
  QL_RETURN_IF_ERROR(functions.status());
  return Status::Ok();
}

// Gate 1.
Status CheckServer(Connection& conn) {
  QL_ASSIGN_OR_RETURN(Rows rows, conn.Exec("SELECT current_setting('server_version_num')::bigint, "
                                           "pg_is_in_recovery(), "
                                           "current_setting('default_transaction_read_only'), "
                                           "current_setting('transaction_read_only')",
                                           {}, "audit server"));
  int64_t version = rows.Int(0, 0);
  bool recovery = rows.Bool(0, 1);
  std::string default_read_only = rows.Text(0, 2);
  std::string read_only = rows.Text(0, 3);
  QL_RETURN_IF_ERROR(rows.status());
  if (recovery) {
    return Fail(kServerInRecovery, "the server is in recovery (a standby), not a writable primary");
  }
  if (default_read_only != "off" || read_only != "off") {
    return Fail(kServerReadOnly,
                "the server is read-only (default_transaction_read_only or "
                "transaction_read_only is on)");
  }
  return CheckServerVersion(version);
}

// Gate 2.
Status CheckHistory(Connection& conn) { return CheckMigrationHistory(conn, PostgresMainStream()); }

// Gate 3.
Status CheckCapabilityGate(Connection& conn) {
  Result<std::vector<CapabilityRow>> rows = ReadCapabilities(conn);
  if (!rows.ok()) return rows.status();
  Status status = CheckCapability(*rows, &ExpectedCapability());
  if (!status.ok()) return Fail(kCapabilityInvalid, status.message());
  return Status::Ok();
}

Result<std::vector<std::string>> QueryCatalog(Connection& conn);

// Gate 4.
Status CheckCatalog(Connection& conn) {
  QL_ASSIGN_OR_RETURN(std::vector<std::string> actual, QueryCatalog(conn));
  std::vector<std::string> expected = ExpectedSchemaCatalog();
  std::vector<std::string> missing, extra;
  std::set_difference(expected.begin(), expected.end(), actual.begin(), actual.end(),
                      std::back_inserter(missing));
  std::set_difference(actual.begin(), actual.end(), expected.begin(), expected.end(),
                      std::back_inserter(extra));
  if (missing.empty() && extra.empty()) return Status::Ok();
  std::string message;
  if (!missing.empty()) message = "missing or changed: " + Join(missing);
  if (!extra.empty()) message += (message.empty() ? "" : " | ") + ("unexpected: " + Join(extra));
  return Fail(kSchemaContractInvalid, message);
}

// Checks role `name` as gate 5 checks the runtime role: no superuser or migration role, no
// CREATEDB/CREATEROLE/REPLICATION/BYPASSRLS, LOGIN and CONNECT on the database, no membership of
// any role (so no SET ROLE path, whatever INHERIT says), owns nothing, may create nothing,
// USAGE on ql3 and exactly `privileges`. A fault is Corrupt `code`.
Status CheckRole(Connection& conn, const std::string& name,
                 const std::map<std::string, std::set<std::string>>& privileges,
                 std::string_view code) {
  QL_ASSIGN_OR_RETURN(
      Rows role,
      conn.Exec("SELECT r.rolsuper, r.rolcreatedb, r.rolcreaterole, "
                "r.rolreplication, r.rolbypassrls, "
                "(SELECT count(*) FROM pg_catalog.pg_auth_members m WHERE m.member = r.oid), "
                "(SELECT d.datdba = r.oid FROM pg_catalog.pg_database d "
                " WHERE d.datname = current_database()), "
                "has_database_privilege(r.oid, current_database(), 'CREATE'), "
                "has_database_privilege(r.oid, current_database(), 'TEMPORARY'), "
                "r.rolcanlogin, has_database_privilege(r.oid, current_database(), 'CONNECT') "
                "FROM pg_catalog.pg_roles r WHERE r.rolname = $1",
                {P(name)}, "audit role"));
  if (role.size() == 0) return Fail(code, "role " + name + " is missing");
  QL_RETURN_IF_ERROR(role.ExpectRows(1));
  bool super = role.Bool(0, 0);
  bool createdb = role.Bool(0, 1), createrole = role.Bool(0, 2);
  bool replication = role.Bool(0, 3), bypassrls = role.Bool(0, 4);
  int64_t memberships = role.Int(0, 5);
  bool owns_database = role.Bool(0, 6);
  bool db_create = role.Bool(0, 7), db_temp = role.Bool(0, 8);
  bool login = role.Bool(0, 9), connect = role.Bool(0, 10);
  QL_RETURN_IF_ERROR(role.status());
  if (super) return Fail(code, "role " + name + " is a superuser");
  if (name == kMigrationRole) {
    return Fail(code, "the migration role " + name + " is used in place of a runtime role");
  }
  if (createdb || createrole || replication || bypassrls) {
    return Fail(code, "role " + name + " has CREATEDB, CREATEROLE, REPLICATION or BYPASSRLS");
  }
  if (!login) return Fail(code, "role " + name + " cannot log in (NOLOGIN)");
  if (!connect) return Fail(code, "role " + name + " may not CONNECT to the database");
  if (memberships != 0) {
    return Fail(code, "role " + name + " is a member of another role (a SET ROLE path)");
  }
  if (owns_database) return Fail(code, "role " + name + " owns the database");
  if (db_create || db_temp) {
    return Fail(code, "role " + name + " may create schemas or temporary tables in the database");
  }

  QL_ASSIGN_OR_RETURN(
      Rows owned,
      conn.Exec("SELECT kind || ' ' || name FROM ("
                " SELECT 'schema' AS kind, n.nspname::text AS name, n.nspowner AS owner "
                " FROM pg_catalog.pg_namespace n WHERE n.nspname = 'ql3' "
                " UNION ALL SELECT 'relation', c.relname::text, c.relowner "
                " FROM pg_catalog.pg_class c WHERE c.relnamespace = 'ql3'::regnamespace "
                " UNION ALL SELECT 'function', p.proname::text, p.proowner "
                " FROM pg_catalog.pg_proc p WHERE p.pronamespace = 'ql3'::regnamespace "
                " UNION ALL SELECT 'type', t.typname::text, t.typowner "
                " FROM pg_catalog.pg_type t WHERE t.typnamespace = 'ql3'::regnamespace) o "
                "WHERE pg_has_role($1::name, o.owner, 'MEMBER') ORDER BY 1 LIMIT 3",
                {P(name)}, "audit ownership"));
  if (owned.size() > 0) {
    std::string what = owned.Text(0, 0);
    QL_RETURN_IF_ERROR(owned.status());
    return Fail(code, "role " + name + " owns " + what);
  }

  QL_ASSIGN_OR_RETURN(
      Rows schemas,
      conn.Exec("SELECT n.nspname::text FROM pg_catalog.pg_namespace n "
                "WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') "
                "AND n.nspname NOT LIKE 'pg\\_toast%' AND n.nspname NOT LIKE 'pg\\_temp%' "
                "AND has_schema_privilege($1::name, n.oid, 'CREATE') ORDER BY 1",
                {P(name)}, "audit schema privileges"));
  if (schemas.size() > 0) {
    std::string schema = schemas.Text(0, 0);
    QL_RETURN_IF_ERROR(schemas.status());
    return Fail(code, "role " + name + " may create objects in schema " + schema);
  }
  QL_ASSIGN_OR_RETURN(Rows usage, conn.Exec("SELECT has_schema_privilege($1::name, 'ql3', 'USAGE')",
                                            {P(name)}, "audit schema privileges"));
  if (!usage.Bool(0, 0)) {
    QL_RETURN_IF_ERROR(usage.status());
    return Fail(code, "role " + name + " lacks USAGE on schema ql3");
  }

  std::vector<std::string> faults;
  QL_RETURN_IF_ERROR(CollectPrivilegeFaults(conn, name, privileges, faults));
  if (!faults.empty()) return Fail(code, "role " + name + " " + Join(faults));
  return Status::Ok();
}

// The migration role owns schema ql3: it logs in and connects, and holds no attribute beyond
// that and no membership of any role. A fault is Corrupt `migration_role_invalid`.
Status CheckMigrationRole(Connection& conn) {
  const std::string name = kMigrationRole;
  QL_ASSIGN_OR_RETURN(
      Rows role,
      conn.Exec("SELECT r.rolsuper, r.rolcreatedb OR r.rolcreaterole OR r.rolreplication OR "
                "r.rolbypassrls, r.rolcanlogin, "
                "(SELECT count(*) FROM pg_catalog.pg_auth_members m WHERE m.member = r.oid), "
                "has_database_privilege(r.oid, current_database(), 'CONNECT') "
                "FROM pg_catalog.pg_roles r WHERE r.rolname = $1",
                {P(name)}, "audit migration role"));
  if (role.size() == 0) return Fail(kMigrationRoleInvalid, "role " + name + " is missing");
  QL_RETURN_IF_ERROR(role.ExpectRows(1));
  const bool super = role.Bool(0, 0), attributes = role.Bool(0, 1), login = role.Bool(0, 2);
  const int64_t memberships = role.Int(0, 3);
  const bool connect = role.Bool(0, 4);
  QL_RETURN_IF_ERROR(role.status());
  if (super) return Fail(kMigrationRoleInvalid, "role " + name + " is a superuser");
  if (attributes) {
    return Fail(kMigrationRoleInvalid,
                "role " + name + " has CREATEDB, CREATEROLE, REPLICATION or BYPASSRLS");
  }
  if (!login) return Fail(kMigrationRoleInvalid, "role " + name + " cannot log in (NOLOGIN)");
  if (!connect) {
    return Fail(kMigrationRoleInvalid, "role " + name + " may not CONNECT to the database");
  }
  if (memberships != 0) {
    return Fail(kMigrationRoleInvalid,
                "role " + name + " is a member of another role (a SET ROLE path)");
  }
  return Status::Ok();
}

// Gate 5.
Status CheckRuntimeRole(Connection& conn) {
  QL_ASSIGN_OR_RETURN(Rows who, conn.Exec("SELECT current_user::text", {}, "audit runtime role"));
  QL_RETURN_IF_ERROR(who.ExpectRows(1));
  const std::string name = who.Text(0, 0);
  QL_RETURN_IF_ERROR(who.status());
  QL_RETURN_IF_ERROR(CheckRole(conn, name, RuntimePrivileges(), kRuntimeRoleInvalid));

  // The worker-ingress role faces the workers' network: it must hold exactly its own grants.
  QL_ASSIGN_OR_RETURN(Rows ingress, conn.Exec("SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_roles "
                                              "WHERE rolname = $1)",
                                              {P(kWorkerIngressRole)}, "audit roles"));
  QL_RETURN_IF_ERROR(ingress.ExpectRows(1));
  if (!ingress.Bool(0, 0)) {
    return Fail(kRuntimeRoleInvalid, std::string("role ") + kWorkerIngressRole + " is missing");
  }
  QL_RETURN_IF_ERROR(
      CheckRole(conn, kWorkerIngressRole, WorkerIngressPrivileges(), kRuntimeRoleInvalid));
  return CheckMigrationRole(conn);
}

// Gate 6.
Status CheckAdminRole(Connection& conn) {
  return CheckRole(conn, kAdminRole, AdminPrivileges(), kAdminRoleInvalid);
}

}  // namespace

Status CheckServerVersion(int64_t server_version_num) {
  if (server_version_num < kMinServerVersionNum || server_version_num > kMaxServerVersionNum) {
    return Fail(kServerVersionUnsupported, "PostgreSQL " +
                                               std::to_string(server_version_num / 10000) +
                                               " is not supported (15 to 18 are)");
  }
  return Status::Ok();
}

namespace {

// The catalog query; runs inside the caller's transaction with search_path pg_catalog.
Result<std::vector<std::string>> QueryCatalog(Connection& conn) {
  // Definitions are printed with schema-qualified names whatever the session's search_path.
  static constexpr char kSql[] = R"sql(
SELECT line FROM (
  SELECT 'relation ' || c.relname || ' kind=' || c.relkind::text AS line
  FROM pg_catalog.pg_class c
  WHERE c.relnamespace = 'ql3'::regnamespace AND c.relkind <> 'i'
  UNION ALL
  SELECT 'column ' || c.relname || '.' || a.attname || ' '
         || pg_catalog.format_type(a.atttypid, a.atttypmod)
         || CASE WHEN a.attnotnull THEN ' not null' ELSE ' null' END
         || coalesce(' default ' || pg_catalog.pg_get_expr(d.adbin, d.adrelid), '')
  FROM pg_catalog.pg_attribute a
  JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
  LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
  WHERE c.relnamespace = 'ql3'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
    AND a.attnum > 0 AND NOT a.attisdropped
  UNION ALL
  SELECT 'index ' || i.relname || ' ' || pg_catalog.pg_get_indexdef(i.oid)
  FROM pg_catalog.pg_class i
  WHERE i.relnamespace = 'ql3'::regnamespace AND i.relkind = 'i'
  UNION ALL
  SELECT 'constraint ' || c.relname || '.' || k.conname || ' '
         || pg_catalog.pg_get_constraintdef(k.oid)
         || CASE WHEN k.condeferrable THEN ' deferrable' ELSE '' END
         || CASE WHEN k.condeferred THEN ' initially-deferred' ELSE '' END
  FROM pg_catalog.pg_constraint k
  JOIN pg_catalog.pg_class c ON c.oid = k.conrelid
  WHERE c.relnamespace = 'ql3'::regnamespace
  UNION ALL
  SELECT 'trigger ' || c.relname || '.' || t.tgname || ' ' || pg_catalog.pg_get_triggerdef(t.oid)
  FROM pg_catalog.pg_trigger t
  JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid
  WHERE c.relnamespace = 'ql3'::regnamespace AND NOT t.tgisinternal
  UNION ALL
  SELECT 'function ' || p.proname || '(' || pg_catalog.pg_get_function_identity_arguments(p.oid)
         || ') source-md5=' || md5(p.prosrc)
  FROM pg_catalog.pg_proc p
  WHERE p.pronamespace = 'ql3'::regnamespace
  UNION ALL
  SELECT 'reloptions ' || c.relname || ' ' || array_to_string(c.reloptions, ',')
  FROM pg_catalog.pg_class c
  WHERE c.relnamespace = 'ql3'::regnamespace AND c.relkind <> 'i' AND c.reloptions IS NOT NULL
  UNION ALL
  SELECT 'row-security ' || c.relname || ' enabled=' || c.relrowsecurity::text
         || ' forced=' || c.relforcerowsecurity::text
  FROM pg_catalog.pg_class c
  WHERE c.relnamespace = 'ql3'::regnamespace AND (c.relrowsecurity OR c.relforcerowsecurity)
  UNION ALL
  SELECT 'policy ' || c.relname || '.' || p.polname
         || CASE WHEN p.polpermissive THEN ' permissive' ELSE ' restrictive' END
         || ' cmd=' || p.polcmd::text || ' roles='
         || (SELECT string_agg(CASE WHEN r.oid = 0 THEN 'public'
                                    ELSE pg_catalog.pg_get_userbyid(r.oid)::text END,
                               ',' ORDER BY 1)
             FROM unnest(p.polroles) AS r(oid))
         || coalesce(' using ' || pg_catalog.pg_get_expr(p.polqual, p.polrelid), '')
         || coalesce(' check ' || pg_catalog.pg_get_expr(p.polwithcheck, p.polrelid), '')
  FROM pg_catalog.pg_policy p
  JOIN pg_catalog.pg_class c ON c.oid = p.polrelid
  WHERE c.relnamespace = 'ql3'::regnamespace
  UNION ALL
  SELECT 'rule ' || c.relname || '.' || r.rulename || ' ' || pg_catalog.pg_get_ruledef(r.oid)
  FROM pg_catalog.pg_rewrite r
  JOIN pg_catalog.pg_class c ON c.oid = r.ev_class
  WHERE c.relnamespace = 'ql3'::regnamespace
  UNION ALL
  SELECT 'type ' || t.typname || ' kind=' || t.typtype::text
  FROM pg_catalog.pg_type t
  WHERE t.typnamespace = 'ql3'::regnamespace AND t.typrelid = 0 AND t.typelem = 0
) catalog ORDER BY line COLLATE "C"
)sql";
  QL_ASSIGN_OR_RETURN(Rows rows, conn.Exec(kSql, {}, "read schema catalog"));
  std::vector<std::string> lines;
  for (int i = 0; i < rows.size(); ++i) lines.push_back(rows.Text(i, 0));
  QL_RETURN_IF_ERROR(rows.status());
  std::sort(lines.begin(), lines.end());
  return lines;
}

}  // namespace

Result<std::vector<std::string>> ReadSchemaCatalog(Connection& conn) {
  QL_RETURN_IF_ERROR(conn.ExecScript("BEGIN READ ONLY; SET LOCAL search_path = pg_catalog",
                                     "read schema catalog"));
  Result<std::vector<std::string>> lines = QueryCatalog(conn);
  (void)conn.ExecScript("ROLLBACK", "read schema catalog");
  return lines;
}

std::vector<std::string> ExpectedSchemaCatalog() {
  std::vector<std::string> lines;
  for (const EmbeddedSql& file : EmbeddedMigrationFiles()) {
    if (file.id != "schema_contract") continue;
    std::istringstream in{std::string(file.sql)};
    std::string line;
    while (std::getline(in, line)) {
      if (!line.empty() && line[0] != '#') lines.push_back(line);
    }
  }
  std::sort(lines.begin(), lines.end());
  return lines;
}

std::vector<std::string> ExpectedRuntimePrivileges() {
  std::vector<std::string> out;
  for (const auto& [table, privs] : RuntimePrivileges()) {
    std::string line = table + ":";
    for (const char* p : kTablePrivileges) {
      if (privs.count(p)) line += std::string(" ") + p;
    }
    out.push_back(line);
  }
  return out;
}

Status CheckConnectedRole(Connection& conn, std::string_view role, std::string_view code) {
  QL_ASSIGN_OR_RETURN(Rows who, conn.Exec("SELECT current_user::text, session_user::text", {},
                                          "audit connected role"));
  QL_RETURN_IF_ERROR(who.ExpectRows(1));
  const std::string current = who.Text(0, 0);
  const std::string session = who.Text(0, 1);
  QL_RETURN_IF_ERROR(who.status());
  if (current != role || session != role) {
    return Fail(code, "the URL connects as role " + current + ", not " + std::string(role));
  }
  return Status::Ok();
}

Status CheckMigrationHistory(Connection& conn, const MigrationStream& stream) {
  Result<std::vector<HistoryRow>> history = ReadHistory(conn);
  if (!history.ok()) {
    if (history.status().code() == StatusCode::kCorrupt) {
      return Fail(kMigrationHistoryInvalid, history.status().message());
    }
    return history.status();
  }
  Result<std::vector<const Migration*>> pending = PendingMigrations(stream, *history);
  if (!pending.ok()) {
    return Fail(kMigrationHistoryInvalid,
                pending.status().reason() + ": " + pending.status().message());
  }
  if (pending->empty()) return Status::Ok();
  const Migration& next = *pending->front();
  std::string message = "migration " + next.id +
                        " has not been applied (run ql-cluster migrate); " +
                        std::to_string(pending->size()) + " pending";
  if (IsPrepareMigration(next.id)) {
    QL_ASSIGN_OR_RETURN(std::vector<MigrationMarker> markers, ReadMigrationMarkers(conn));
    for (const MigrationMarker& marker : markers) {
      if (marker.id != next.id) continue;
      message += "; it was started at " + FormatRfc3339Utc(marker.started_at_ms) +
                 " and stopped after " + std::to_string(marker.statements_run) + " of " +
                 std::to_string(marker.statements) +
                 " statements (migrating again runs them again, then lands the pair)";
    }
  }
  return Fail(kMigrationHistoryInvalid, message);
}

Status AuditReadiness(Connection& conn) {
  QL_RETURN_IF_ERROR(CheckServer(conn));
  QL_RETURN_IF_ERROR(conn.ExecScript(
      "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET LOCAL search_path = pg_catalog; "
      "SET LOCAL statement_timeout = 30000; SET LOCAL lock_timeout = 5000",
      "readiness audit"));
  auto gates = [&]() -> Status {
    QL_RETURN_IF_ERROR(CheckHistory(conn));
    QL_RETURN_IF_ERROR(CheckCapabilityGate(conn));
    QL_RETURN_IF_ERROR(CheckCatalog(conn));
    QL_RETURN_IF_ERROR(CheckRuntimeRole(conn));
    return CheckAdminRole(conn);
  };
  Status status = gates();
  if (conn.InTransaction()) (void)conn.ExecScript("ROLLBACK", "readiness audit");
  return status;
}

int64_t PredicateLockSettings::PerRelation() const {
  return per_relation_setting < 0 ? per_transaction / -per_relation_setting
                                  : per_relation_setting;
}

Result<PredicateLockSettings> ReadPredicateLockSettings(Connection& conn) {
  QL_ASSIGN_OR_RETURN(
      Rows rows, conn.Exec("SELECT current_setting('max_pred_locks_per_transaction')::bigint, "
                           "current_setting('max_pred_locks_per_relation')::bigint, "
                           "current_setting('max_pred_locks_per_page')::bigint",
                           {}, "audit predicate lock settings"));
  QL_RETURN_IF_ERROR(rows.ExpectRows(1));
  PredicateLockSettings settings;
  settings.per_transaction = rows.Int(0, 0);
  settings.per_relation_setting = rows.Int(0, 1);
  settings.per_page = rows.Int(0, 2);
  QL_RETURN_IF_ERROR(rows.status());
  return settings;
}

Status CheckPredicateLockRoom(Connection& conn) {
  QL_ASSIGN_OR_RETURN(PredicateLockSettings settings, ReadPredicateLockSettings(conn));
  return PredicateLockRoomVerdict(settings);
}

Status PredicateLockRoomVerdict(const PredicateLockSettings& settings) {
  const int64_t per_relation = settings.PerRelation();
  std::string faults;
  const auto need = [&](const char* setting, int64_t value, int64_t minimum,
                        const std::string& shown) {
    if (value >= minimum) return;
    faults += std::string(faults.empty() ? "" : "; ") + setting + " is " + shown + ", needs " +
              std::to_string(minimum) + " or more";
  };
  need("max_pred_locks_per_transaction", settings.per_transaction, kMinPredLocksPerTransaction,
       std::to_string(settings.per_transaction));
  need("max_pred_locks_per_relation", per_relation, kMinPredLocksPerRelation,
       settings.per_relation_setting < 0
           ? std::to_string(settings.per_relation_setting) + " (so " +
                 std::to_string(per_relation) + ")"
           : std::to_string(per_relation));
  need("max_pred_locks_per_page", settings.per_page, kMinPredLocksPerPage,
       std::to_string(settings.per_page));
  if (faults.empty()) return Status::Ok();
  return Fail(kPredicateLockRoomInsufficient,
              "SERIALIZABLE admission needs room for tuple-level predicate locks: " + faults);
}

int ClaimsWithinPredicateLockRoom(const PredicateLockSettings& settings, int wanted) {
  const int64_t room = std::max<int64_t>(1, settings.PerRelation() / 2);
  return static_cast<int>(std::min<int64_t>(wanted, room));
}

ReadinessProbe::ReadinessProbe(ReadinessUrls urls, std::string application_name)
    : urls_(std::move(urls)) {
  session_.application_name = std::move(application_name);
}

ReadinessProbe::~ReadinessProbe() = default;

Status ReadinessProbe::On(std::unique_ptr<Connection>& conn, const std::string& url,
                          const std::function<Status(Connection&)>& check) {
  const bool reused = conn != nullptr && conn->Reusable();
  if (!reused) {
    conn.reset();
    QL_ASSIGN_OR_RETURN(conn, Connection::Open(url, session_));
  }
  Status status = check(*conn);
  if (!status.ok() && status.code() != StatusCode::kCorrupt) {
    conn.reset();
    // A kept connection may have been ended meanwhile (a terminated backend, a restart): the
    // verdict is the one of a fresh connection.
    if (reused) return On(conn, url, check);
  }
  return status;
}

Result<PredicateLockSettings> ReadinessProbe::ReadPredicateLocks() {
  PredicateLockSettings settings;
  QL_RETURN_IF_ERROR(On(runtime_, urls_.runtime, [&](Connection& conn) -> Status {
    QL_ASSIGN_OR_RETURN(settings, ReadPredicateLockSettings(conn));
    return Status::Ok();
  }));
  return settings;
}

Status ReadinessProbe::Check() {
  QL_RETURN_IF_ERROR(On(runtime_, urls_.runtime, &AuditReadiness));
  if (!urls_.admin.empty()) {
    QL_RETURN_IF_ERROR(On(admin_, urls_.admin, [](Connection& conn) {
      return CheckConnectedRole(conn, kAdminRole, kAdminRoleInvalid);
    }));
  }
  if (!urls_.worker.empty()) {
    QL_RETURN_IF_ERROR(On(worker_, urls_.worker, [](Connection& conn) {
      return CheckConnectedRole(conn, kWorkerIngressRole, kWorkerRoleInvalid);
    }));
  }
  return Status::Ok();
}

}  // namespace ql::pg
