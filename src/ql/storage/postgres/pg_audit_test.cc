#include "ql/storage/postgres/pg_audit.h"

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "ql/storage/postgres/pg_client.h"
#include "ql/storage/postgres/pg_migrations.h"
#include "ql/storage/postgres/pg_test_support.h"
#include "ql/testing/postgres_server.h"

namespace ql::pg {
namespace {

using testing::PgTestCluster;

TEST(ServerVersionTest, OnlyMajorsFifteenToEighteenAreSupported) {
  EXPECT_EQ(CheckServerVersion(140012).reason(), "server_version_unsupported");
  EXPECT_TRUE(CheckServerVersion(150000).ok());
  EXPECT_TRUE(CheckServerVersion(150018).ok());
  EXPECT_TRUE(CheckServerVersion(180003).ok());
  EXPECT_EQ(CheckServerVersion(190000).reason(), "server_version_unsupported");
  EXPECT_EQ(CheckServerVersion(0).reason(), "server_version_unsupported");
}

// The predicate-lock room SERIALIZABLE admission needs, read from the server's settings.
TEST(PredicateLockRoomTest, PostgresDefaultsAreShortAndEachShortSettingIsNamed) {
  ::ql::testing::PostgresServerOptions options;
  // PostgreSQL's own defaults (the test servers raise them).
  options.settings = {"max_pred_locks_per_transaction = 64", "max_pred_locks_per_relation = -2",
                      "max_pred_locks_per_page = 2"};
  Result<std::unique_ptr<::ql::testing::PostgresServer>> started =
      ::ql::testing::PostgresServer::Start(options);
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  ::ql::testing::PostgresServer& server = **started;
  const auto check = [&]() -> Status {
    Result<std::unique_ptr<Connection>> conn =
        Connection::Open(server.Url(::ql::testing::PostgresServer::kSuperuser, "postgres"), {});
    if (!conn.ok()) return conn.status();
    return CheckPredicateLockRoom(**conn);
  };
  Status defaults = check();
  EXPECT_EQ(defaults.code(), StatusCode::kCorrupt) << defaults.ToString();
  EXPECT_EQ(defaults.reason(), "predicate_lock_room_insufficient");
  EXPECT_NE(defaults.message().find("max_pred_locks_per_transaction is 64, needs 1024"),
            std::string::npos)
      << defaults.ToString();
  EXPECT_NE(defaults.message().find("max_pred_locks_per_relation is -2 (so 32), needs 512"),
            std::string::npos)
      << defaults.ToString();
  EXPECT_NE(defaults.message().find("max_pred_locks_per_page is 2, needs 128"), std::string::npos)
      << defaults.ToString();

  // The shared test server has the room: 1024, -2 (so 512), 128.
  const std::string db = PgTestCluster::Get().NewDatabase();
  Result<std::unique_ptr<Connection>> conn =
      Connection::Open(PgTestCluster::Get().Url(kRuntimeRole, db), {});
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  EXPECT_TRUE(CheckPredicateLockRoom(**conn).ok());
}

TEST(PredicateLockRoomTest, WithoutTheRoomAdmissionBatchesStayUnderHalfTheRelationThreshold) {
  PredicateLockSettings defaults{64, -2, 2};
  EXPECT_EQ(defaults.PerRelation(), 32);
  EXPECT_EQ(ClaimsWithinPredicateLockRoom(defaults, 256), 16);
  EXPECT_EQ(ClaimsWithinPredicateLockRoom(defaults, 8), 8);
  PredicateLockSettings explicit_relation{64, 100, 2};
  EXPECT_EQ(ClaimsWithinPredicateLockRoom(explicit_relation, 256), 50);
  PredicateLockSettings room{1024, -2, 128};
  EXPECT_EQ(room.PerRelation(), 512);
  EXPECT_EQ(ClaimsWithinPredicateLockRoom(room, 256), 256);
  PredicateLockSettings tiny{1, 1, 1};
  EXPECT_EQ(ClaimsWithinPredicateLockRoom(tiny, 256), 1);
}

class AuditTest : public ::testing::Test {
 protected:
  void SetUp() override { db_ = PgTestCluster::Get().NewDatabase(); }

  // Changes the database as the superuser.
  void Tamper(const std::string& sql) {
    Result<std::string> r = PgTestCluster::Get().server().Psql(db_, sql);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }

  Status AuditAs(const std::string& role) {
    Result<std::unique_ptr<Connection>> conn =
        Connection::Open(PgTestCluster::Get().Url(role, db_), {});
    if (!conn.ok()) return conn.status();
    return AuditReadiness(**conn);
  }

  // Expects the runtime audit to fail with `code` and a message containing `detail`.
  void ExpectNotReady(const std::string& code, const std::string& detail,
                      const std::string& role = kRuntimeRole) {
    Status status = AuditAs(role);
    EXPECT_EQ(status.code(), StatusCode::kCorrupt) << status.ToString();
    EXPECT_EQ(status.reason(), code) << status.ToString();
    EXPECT_NE(status.message().find(detail), std::string::npos) << status.ToString();
    EXPECT_EQ(status.message().find("postgresql://"), std::string::npos);
  }

  std::string db_;
};

TEST_F(AuditTest, FreshlyMigratedDatabaseIsReady) {
  Status status = AuditAs(kRuntimeRole);
  EXPECT_TRUE(status.ok()) << status.ToString();
}

// The catalog a fresh migration produces is exactly schema_contract.txt. When a migration
// changes the schema on purpose, copy the file this test writes over schema_contract.txt.
TEST_F(AuditTest, SchemaContractMatchesAFreshMigration) {
  Result<std::unique_ptr<Connection>> conn =
      Connection::Open(PgTestCluster::Get().Url(kRuntimeRole, db_), {});
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  Result<std::vector<std::string>> actual = ReadSchemaCatalog(**conn);
  ASSERT_TRUE(actual.ok()) << actual.status().ToString();
  EXPECT_GT(actual->size(), 100u);
  if (*actual != ExpectedSchemaCatalog()) {
    std::string path = ::testing::TempDir() + "schema_contract.actual.txt";
    std::ofstream out(path);
    out << "# The exact catalog of schema ql3 the readiness auditor expects (one object per\n"
           "# line). Regenerate from the test SchemaContractMatchesAFreshMigration.\n";
    for (const std::string& line : *actual) out << line << "\n";
    ADD_FAILURE() << "schema catalog differs from schema_contract.txt; actual written to " << path;
  }
}

TEST_F(AuditTest, HistoryGapIsDetected) {
  Tamper("DELETE FROM ql3.schema_migrations WHERE id = 'pg-0002-projects-and-definitions'");
  ExpectNotReady("migration_history_invalid", "migration_gap");
}

TEST_F(AuditTest, UnknownAheadMigrationIsDetected) {
  Tamper(
      "INSERT INTO ql3.schema_migrations VALUES ('pg-0099-from-the-future', "
      "'postgresql-main', 'postgresql', repeat('a', 64), 0)");
  ExpectNotReady("migration_history_invalid", "pg-0099-from-the-future");
}

TEST_F(AuditTest, ChangedChecksumIsDetected) {
  Tamper(
      "UPDATE ql3.schema_migrations SET checksum = repeat('b', 64) "
      "WHERE id = 'pg-0003-run-core'");
  ExpectNotReady("migration_history_invalid", "migration_checksum_mismatch");
}

TEST_F(AuditTest, WrongStreamIsDetected) {
  Tamper(
      "ALTER TABLE ql3.schema_migrations DROP CONSTRAINT schema_migrations_stream_check;"
      "UPDATE ql3.schema_migrations SET stream = 'sqlite-main' "
      "WHERE id = 'pg-0001-schema-history'");
  ExpectNotReady("migration_history_invalid", "migration_wrong_stream");
}

TEST_F(AuditTest, MissingMigrationIsDetected) {
  Tamper(
      "UPDATE ql3.schema_capabilities SET migration_id = 'pg-0004-trigger-schedules';"
      "DELETE FROM ql3.schema_migrations WHERE id = 'pg-0005-worker-dispatch'");
  ExpectNotReady("migration_history_invalid", "pg-0005-worker-dispatch");
}

TEST_F(AuditTest, AlteredCapabilityIsDetected) {
  Tamper("UPDATE ql3.schema_capabilities SET capability_map = '{\"runs\":1}'");
  ExpectNotReady("capability_invalid", "control-core");
}

TEST_F(AuditTest, MissingCapabilityIsDetected) {
  Tamper("DELETE FROM ql3.schema_capabilities");
  ExpectNotReady("capability_invalid", "found 0");
}

TEST_F(AuditTest, ExtraTableIsDrift) {
  Tamper("CREATE TABLE ql3.shadow_runs (id text)");
  ExpectNotReady("schema_contract_invalid", "relation shadow_runs");
}

TEST_F(AuditTest, ExtraColumnIsDrift) {
  Tamper("ALTER TABLE ql3.runs ADD COLUMN note text");
  ExpectNotReady("schema_contract_invalid", "column runs.note");
}

TEST_F(AuditTest, ChangedColumnTypeIsDrift) {
  Tamper("ALTER TABLE ql3.runs ALTER COLUMN priority TYPE bigint");
  ExpectNotReady("schema_contract_invalid", "column runs.priority");
}

TEST_F(AuditTest, DroppedIndexIsDrift) {
  Tamper("DROP INDEX ql3.runs_by_status");
  ExpectNotReady("schema_contract_invalid", "index runs_by_status");
}

TEST_F(AuditTest, DroppedCheckIsDrift) {
  Tamper("ALTER TABLE ql3.runs DROP CONSTRAINT runs_status_check");
  ExpectNotReady("schema_contract_invalid", "constraint runs.runs_status_check");
}

TEST_F(AuditTest, DroppedForeignKeyIsDrift) {
  Tamper("ALTER TABLE ql3.run_events DROP CONSTRAINT run_events_run_fkey");
  ExpectNotReady("schema_contract_invalid", "run_events_run_fkey");
}

TEST_F(AuditTest, DroppedImmutabilityTriggerIsDrift) {
  Tamper("DROP TRIGGER run_events_append_only ON ql3.run_events");
  ExpectNotReady("schema_contract_invalid", "run_events_append_only");
}

TEST_F(AuditTest, OneExtraPrivilegeFails) {
  Tamper("GRANT DELETE ON ql3.task_heads TO ql3_runtime");
  ExpectNotReady("runtime_role_invalid", "has DELETE on task_heads");
}

// The purge's DELETE grants are part of the exact list: one missing is as wrong as one extra.
TEST_F(AuditTest, AMissingPurgePrivilegeFails) {
  Tamper("REVOKE DELETE ON ql3.run_log_chunks FROM ql3_runtime");
  ExpectNotReady("runtime_role_invalid", "lacks DELETE on run_log_chunks");
}

TEST_F(AuditTest, WorkerIngressRoleHoldsOnlyCredentialsAndSessions) {
  // Freshly migrated: the ingress role may read credentials and keep sessions, nothing more.
  Result<std::string> privileges = PgTestCluster::Get().server().Psql(
      db_,
      "SELECT string_agg(c.relname || ':' || p.priv, ',' ORDER BY c.relname, p.priv) "
      "FROM pg_class c CROSS JOIN (VALUES ('SELECT'), ('INSERT'), ('UPDATE'), ('DELETE')) "
      "AS p(priv) WHERE c.relnamespace = 'ql3'::regnamespace AND c.relkind = 'r' "
      "AND has_table_privilege('ql3_worker_ingress', c.oid, p.priv)");
  ASSERT_TRUE(privileges.ok()) << privileges.status().ToString();
  EXPECT_NE(privileges->find("worker_sessions:UPDATE"), std::string::npos) << *privileges;
  for (const char* table : {"runs", "run_attempts", "run_dispatch_leases", "trigger_schedules",
                            "task_revisions", "execution_revisions", "trigger_revisions"}) {
    EXPECT_EQ(privileges->find(std::string(table) + ":"), std::string::npos)
        << table << " in " << *privileges;
  }
  EXPECT_TRUE(AuditAs(kRuntimeRole).ok());
}

TEST_F(AuditTest, AWorkerIngressPrivilegeOnLeasesFails) {
  Tamper("GRANT UPDATE ON ql3.run_dispatch_leases TO ql3_worker_ingress");
  ExpectNotReady("runtime_role_invalid", "ql3_worker_ingress has UPDATE on run_dispatch_leases");
}

TEST_F(AuditTest, AWorkerIngressPrivilegeOnSchedulesFails) {
  Tamper("GRANT SELECT ON ql3.trigger_schedules TO ql3_worker_ingress");
  ExpectNotReady("runtime_role_invalid", "ql3_worker_ingress has SELECT on trigger_schedules");
}

TEST_F(AuditTest, OneMissingPrivilegeFails) {
  Tamper("REVOKE INSERT ON ql3.run_events FROM ql3_runtime");
  ExpectNotReady("runtime_role_invalid", "lacks INSERT on run_events");
}

TEST_F(AuditTest, ColumnGrantCountsAsAPrivilege) {
  Tamper("GRANT UPDATE (name) ON ql3.projects TO ql3_runtime");
  ExpectNotReady("runtime_role_invalid", "has UPDATE on projects");
}

TEST_F(AuditTest, InsertOnSchedulesIsOnePrivilegeTooMany) {
  Tamper("GRANT INSERT ON ql3.trigger_schedules TO PUBLIC");
  ExpectNotReady("runtime_role_invalid", "has INSERT on trigger_schedules");
}

TEST_F(AuditTest, MigrationRoleAsRuntimeFails) {
  ExpectNotReady("runtime_role_invalid", "migration role", kMigrationRole);
}

TEST_F(AuditTest, SuperuserAsRuntimeFails) {
  ExpectNotReady("runtime_role_invalid", "superuser", ::ql::testing::PostgresServer::kSuperuser);
}

TEST_F(AuditTest, AdminRoleAsRuntimeFails) {
  ExpectNotReady("runtime_role_invalid", "has INSERT on api_tokens", kAdminRole);
}

TEST_F(AuditTest, MembershipInAnotherRoleFails) {
  Tamper("GRANT ql3_admin TO ql3_runtime");
  Status status = AuditAs(kRuntimeRole);
  Tamper("REVOKE ql3_admin FROM ql3_runtime");  // roles are cluster-wide: undo at once
  EXPECT_EQ(status.reason(), "runtime_role_invalid") << status.ToString();
  EXPECT_NE(status.message().find("member"), std::string::npos) << status.ToString();
}

TEST_F(AuditTest, CreateOnTheDatabaseFails) {
  Tamper("GRANT CREATE ON DATABASE " + db_ + " TO ql3_runtime");
  ExpectNotReady("runtime_role_invalid", "create schemas");
}

TEST_F(AuditTest, ReadOnlyTargetIsNotReady) {
  Tamper("ALTER DATABASE " + db_ + " SET default_transaction_read_only = on");
  ExpectNotReady("server_read_only", "read-only");
}

TEST_F(AuditTest, ExtraRuleIsDrift) {
  Tamper("CREATE RULE runs_keep AS ON DELETE TO ql3.runs DO INSTEAD NOTHING");
  ExpectNotReady("schema_contract_invalid", "rule runs.runs_keep");
}

TEST_F(AuditTest, RowLevelSecurityIsDrift) {
  Tamper("ALTER TABLE ql3.runs ENABLE ROW LEVEL SECURITY");
  ExpectNotReady("schema_contract_invalid", "row-security runs enabled=true");
}

TEST_F(AuditTest, ExtraPolicyIsDrift) {
  Tamper("CREATE POLICY runs_mine ON ql3.runs FOR SELECT TO ql3_runtime USING (priority > 0)");
  ExpectNotReady("schema_contract_invalid",
                 "policy runs.runs_mine permissive cmd=r roles=ql3_runtime using (priority > 0)");
}

TEST_F(AuditTest, ChangedFillfactorIsDrift) {
  Tamper("ALTER TABLE ql3.trigger_schedules SET (fillfactor = 100)");
  ExpectNotReady("schema_contract_invalid", "reloptions trigger_schedules fillfactor=70");
}

TEST_F(AuditTest, OneExtraAdminPrivilegeFails) {
  Tamper("GRANT DELETE ON ql3.projects TO ql3_admin");
  ExpectNotReady("admin_role_invalid", "role ql3_admin has DELETE on projects");
}

TEST_F(AuditTest, OneMissingAdminPrivilegeFails) {
  Tamper("REVOKE INSERT ON ql3.role_bindings FROM ql3_admin");
  ExpectNotReady("admin_role_invalid", "role ql3_admin lacks INSERT on role_bindings");
}

TEST_F(AuditTest, AnAdminPrivilegeOnRunsFails) {
  Tamper("GRANT SELECT ON ql3.runs TO ql3_admin");
  ExpectNotReady("admin_role_invalid", "role ql3_admin has SELECT on runs");
}

TEST_F(AuditTest, TheProbeAuditsEveryUrlAndReconnectsAfterALostConnection) {
  ReadinessUrls urls{PgTestCluster::Get().Url(kRuntimeRole, db_),
                     PgTestCluster::Get().Url(kAdminRole, db_),
                     PgTestCluster::Get().Url(kWorkerIngressRole, db_)};
  ReadinessProbe probe(urls, "ql-probe-" + db_);
  ASSERT_TRUE(probe.Check().ok());
  // Its kept connections are ended: the next check reconnects instead of reporting an outage.
  Tamper("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = "
         "'ql-probe-" + db_ + "'");
  Status after = probe.Check();
  EXPECT_TRUE(after.ok()) << after.ToString();
  Tamper("GRANT SELECT ON ql3.runs TO ql3_admin");
  EXPECT_EQ(probe.Check().reason(), "admin_role_invalid");
  Tamper("REVOKE SELECT ON ql3.runs FROM ql3_admin");
  EXPECT_TRUE(probe.Check().ok());

  urls.admin = PgTestCluster::Get().Url(kMigrationRole, db_);
  EXPECT_EQ(ReadinessProbe(urls, "ql-probe").Check().reason(), "admin_role_invalid");
  urls.admin = "";
  urls.worker = PgTestCluster::Get().Url(kRuntimeRole, db_);
  EXPECT_EQ(ReadinessProbe(urls, "ql-probe").Check().reason(), "worker_role_invalid");
  urls.runtime = "postgresql://ql3_runtime@127.0.0.1:1/x?sslmode=disable";
  EXPECT_EQ(ReadinessProbe(urls, "ql-probe").Check().reason(), "database_unavailable");
}

TEST_F(AuditTest, ConnectedRoleMustBeTheConfiguredOne) {
  Result<std::unique_ptr<Connection>> migration =
      Connection::Open(PgTestCluster::Get().Url(kMigrationRole, db_), {});
  ASSERT_TRUE(migration.ok()) << migration.status().ToString();
  Status as_admin = CheckConnectedRole(**migration, kAdminRole, kAdminRoleInvalid);
  EXPECT_EQ(as_admin.code(), StatusCode::kCorrupt);
  EXPECT_EQ(as_admin.reason(), "admin_role_invalid");
  EXPECT_NE(as_admin.message().find("connects as role ql3_migration, not ql3_admin"),
            std::string::npos)
      << as_admin.ToString();
  Result<std::unique_ptr<Connection>> admin =
      Connection::Open(PgTestCluster::Get().Url(kAdminRole, db_), {});
  ASSERT_TRUE(admin.ok()) << admin.status().ToString();
  EXPECT_TRUE(CheckConnectedRole(**admin, kAdminRole, kAdminRoleInvalid).ok());
  EXPECT_EQ(CheckConnectedRole(**admin, kWorkerIngressRole, kWorkerRoleInvalid).reason(),
            "worker_role_invalid");
}

TEST_F(AuditTest, RuntimeRoleCannotRunDdlWhileItsAuditSucceeds) {
  ASSERT_TRUE(AuditAs(kRuntimeRole).ok());
  Result<std::unique_ptr<Connection>> conn =
      Connection::Open(PgTestCluster::Get().Url(kRuntimeRole, db_), {});
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  for (const char* ddl : {"CREATE TABLE ql3.intruder (a int)", "CREATE TABLE intruder (a int)",
                          "CREATE TABLE public.intruder (a int)", "CREATE SCHEMA intruder",
                          "ALTER TABLE ql3.runs ADD COLUMN x int", "DROP TABLE ql3.runs",
                          "CREATE TEMP TABLE intruder (a int)"}) {
    Status status = (*conn)->ExecScript(ddl, "ddl");
    EXPECT_EQ(status.reason(), "insufficient_privilege") << ddl << ": " << status.ToString();
  }
  // DELETE exists only on run history, for the purge.
  for (const char* table : {"ql3.task_revisions", "ql3.security_audit", "ql3.projects"}) {
    Status delete_status = (*conn)->ExecScript(std::string("DELETE FROM ") + table, "delete");
    EXPECT_EQ(delete_status.reason(), "insufficient_privilege") << delete_status.ToString();
  }
  EXPECT_TRUE(AuditAs(kRuntimeRole).ok());
}

}  // namespace
}  // namespace ql::pg
