// ql-cluster migrate / audit driven as an operator would, against a real PostgreSQL set up
// with deploy/postgres/roles.sql.

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "harness.h"
#include "ql/storage/postgres/pg_migrations.h"
#include "ql/testing/postgres_server.h"

namespace ql::itest {
namespace {

using ::ql::testing::PostgresServer;

const char kInsecure[] = "QL3_POSTGRES_ALLOW_INSECURE=true";

// The id of the last migration this build knows.
std::string LatestMigration() { return pg::PostgresMainStream().migrations.back().id; }

class ClusterCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto server = PostgresServer::Start();
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value().release();
    auto roles =
        server_->PsqlFile("postgres", std::string(QL_SOURCE_DIR) + "/deploy/postgres/roles.sql");
    ASSERT_TRUE(roles.ok()) << roles.status().ToString();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }

  // A URL with a password, so tests can check it is never printed.
  static std::string Url(const std::string& role) {
    return "postgresql://" + role + ":s3cret@127.0.0.1:" + std::to_string(server_->port()) +
           "/qinglong?sslmode=disable";
  }

  static CommandResult Cluster(std::vector<std::string> args,
                               std::vector<std::string> env = {kInsecure}) {
    args.insert(args.begin(), BinDir() + "/ql-cluster");
    CommandResult r = RunCommand(args, env, 60'000);
    EXPECT_EQ(r.out.find("s3cret"), std::string::npos) << r.out;
    EXPECT_EQ(r.err.find("s3cret"), std::string::npos) << r.err;
    return r;
  }

  static void Migrated() {
    CommandResult r = Cluster({"migrate", "--database-url", Url("ql3_migration")});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }

  static PostgresServer* server_;
};

PostgresServer* ClusterCliTest::server_ = nullptr;

TEST_F(ClusterCliTest, MigrateThenAuditIsReady) {
  CommandResult first = Cluster({"migrate", "--database-url", Url("ql3_migration")});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  // Either this test migrated the fresh database or an earlier test did.
  EXPECT_NE(first.out.find("grants applied"), std::string::npos) << first.out;
  CommandResult again = Cluster({"migrate", "--database-url", Url("ql3_migration")});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.out.find("schema already current: " + LatestMigration()), std::string::npos)
      << again.out;

  TempDir dir;
  std::string file = dir.path() + "/runtime.url";
  std::ofstream(file) << Url("ql3_runtime") << "\n";
  CommandResult audit = Cluster({"audit", "--database-url-file", file});
  EXPECT_EQ(audit.exit_code, 0) << audit.out << audit.err;
  EXPECT_EQ(audit.out, "ready\n");

  CommandResult from_env =
      Cluster({"audit"}, {kInsecure, "QL3_DATABASE_URL=" + Url("ql3_runtime")});
  EXPECT_EQ(from_env.exit_code, 0) << from_env.err;
}

TEST_F(ClusterCliTest, FreshMigrationPrintsEveryAppliedMigration) {
  ASSERT_TRUE(server_->Psql("postgres", "CREATE DATABASE fresh OWNER ql3_migration").ok());
  std::string url =
      "postgresql://ql3_migration:s3cret@127.0.0.1:" + std::to_string(server_->port()) +
      "/fresh?sslmode=disable";
  CommandResult r = Cluster({"migrate", "--database-url", url});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("applied pg-0001-schema-history\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("applied pg-0008-worker-leases\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("schema migrated: " + LatestMigration() + ", control-core v" +
                       std::to_string(pg::ExpectedCapability().version)),
            std::string::npos)
      << r.out;
}

// The backup precondition of migrate: the hook runs before anything is applied and only when
// something is pending; a hook that fails or overruns its bound leaves the schema untouched.
TEST_F(ClusterCliTest, BeforeMigrateMustSucceedBeforeAnythingIsApplied) {
  ASSERT_TRUE(server_->Psql("postgres", "CREATE DATABASE hooked OWNER ql3_migration").ok());
  const std::string url =
      "postgresql://ql3_migration:s3cret@127.0.0.1:" + std::to_string(server_->port()) +
      "/hooked?sslmode=disable";
  // "0" while nothing is applied (the first migration creates schema ql3).
  const auto applied = [&] {
    Result<std::string> out =
        server_->Psql("hooked", "SELECT count(*) FROM pg_namespace WHERE nspname = 'ql3'");
    if (!out.ok()) return out.status().ToString();
    while (!out->empty() && out->back() == '\n') out->pop_back();
    return *out;
  };
  TempDir dir;
  const std::string marker = dir.path() + "/pending";

  CommandResult failing = Cluster({"migrate", "--database-url", url, "--before-migrate", "exit 7"});
  EXPECT_EQ(failing.exit_code, 1) << failing.out << failing.err;
  EXPECT_NE(failing.err.find("before_migrate_failed: --before-migrate exited with status 7"),
            std::string::npos)
      << failing.err;
  EXPECT_EQ(applied(), "0");

  CommandResult slow = Cluster({"migrate", "--database-url", url, "--before-migrate", "sleep 30",
                                "--before-migrate-timeout", "1"});
  EXPECT_EQ(slow.exit_code, 1);
  EXPECT_NE(slow.err.find("ran longer than 1 s"), std::string::npos) << slow.err;
  EXPECT_EQ(applied(), "0");

  CommandResult ok = Cluster({"migrate", "--database-url", url, "--before-migrate",
                              "echo \"$QL_PENDING_MIGRATIONS\" > " + marker});
  ASSERT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  EXPECT_NE(applied(), "0");
  std::ifstream in(marker);
  std::string pending;
  std::getline(in, pending);
  EXPECT_EQ(pending.rfind("pg-0001-schema-history pg-0002", 0), 0u) << pending;

  // Nothing pending: the hook is not run.
  std::filesystem::remove(marker);
  CommandResult current =
      Cluster({"migrate", "--database-url", url, "--before-migrate", "touch " + marker});
  ASSERT_EQ(current.exit_code, 0) << current.err;
  EXPECT_FALSE(std::filesystem::exists(marker));

  CommandResult bad = Cluster({"migrate", "--database-url", url, "--before-migrate", "true",
                               "--before-migrate-timeout", "0"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("invalid_before_migrate_timeout"), std::string::npos) << bad.err;
}

TEST_F(ClusterCliTest, DriftIsNotReadyWithItsStableCode) {
  Migrated();
  ASSERT_TRUE(server_->Psql("qinglong", "GRANT DELETE ON ql3.projects TO ql3_runtime").ok());
  CommandResult r = Cluster({"audit", "--database-url", Url("ql3_runtime")});
  ASSERT_TRUE(server_->Psql("qinglong", "REVOKE DELETE ON ql3.projects FROM ql3_runtime").ok());
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.out.rfind("not ready: runtime_role_invalid: ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("DELETE on projects"), std::string::npos) << r.out;

  // Migrating again restores the exact grants.
  ASSERT_TRUE(server_->Psql("qinglong", "GRANT TRUNCATE ON ql3.runs TO ql3_runtime").ok());
  EXPECT_EQ(Cluster({"audit", "--database-url", Url("ql3_runtime")}).exit_code, 3);
  Migrated();
  EXPECT_EQ(Cluster({"audit", "--database-url", Url("ql3_runtime")}).exit_code, 0);
}

TEST_F(ClusterCliTest, TheSerializableDefaultAlsoAuditsThePredicateLockSettings) {
  Migrated();
  CommandResult bad = Cluster({"audit", "--database-url", Url("ql3_runtime"),
                               "--admission-isolation", "snapshot"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("invalid_admission_isolation"), std::string::npos) << bad.err;

  EXPECT_EQ(Cluster({"audit", "--database-url", Url("ql3_runtime"), "--admission-isolation",
                     "serializable"})
                .out,
            "ready\n");
  // Back to PostgreSQL's default page room: every tuple past the second of a page would lock
  // the whole page.
  const auto set_page_room = [&](const std::string& value) {
    ASSERT_TRUE(server_
                    ->Psql("qinglong", "ALTER SYSTEM SET max_pred_locks_per_page = " + value +
                                           "; SELECT pg_reload_conf();")
                    .ok());
    for (int i = 0; i < 50; ++i) {
      Result<std::string> shown = server_->Psql("qinglong", "SHOW max_pred_locks_per_page;");
      if (shown.ok() && shown->rfind(value, 0) == 0) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    FAIL() << "max_pred_locks_per_page never became " << value;
  };
  set_page_room("2");
  CommandResult serializable = Cluster({"audit", "--database-url", Url("ql3_runtime"),
                                        "--admission-isolation", "serializable"});
  CommandResult by_default = Cluster({"audit", "--database-url", Url("ql3_runtime")});
  CommandResult read_committed = Cluster({"audit", "--database-url", Url("ql3_runtime"),
                                          "--admission-isolation", "read-committed"});
  set_page_room("128");
  // As `serve`, which becomes ready and admits in smaller batches: ready, capped.
  EXPECT_EQ(serializable.exit_code, 0);
  EXPECT_EQ(serializable.out,
            "ready\ncapped: predicate_lock_room_insufficient: SERIALIZABLE admission needs room "
            "for tuple-level predicate locks: max_pred_locks_per_page is 2, needs 128 or more; "
            "ql-cluster serve admits in smaller batches until the settings are raised\n");
  EXPECT_EQ(by_default.exit_code, 0);
  EXPECT_EQ(by_default.out, serializable.out);
  // READ COMMITTED admission takes no predicate locks.
  EXPECT_EQ(read_committed.exit_code, 0) << read_committed.out;
  EXPECT_EQ(read_committed.out, "ready\n");
}

TEST_F(ClusterCliTest, WrongRolesAreRefused) {
  Migrated();
  CommandResult super = Cluster({"audit", "--database-url", Url(PostgresServer::kSuperuser)});
  EXPECT_EQ(super.exit_code, 3);
  EXPECT_NE(super.out.find("runtime_role_invalid"), std::string::npos) << super.out;
  CommandResult migration = Cluster({"audit", "--database-url", Url("ql3_migration")});
  EXPECT_EQ(migration.exit_code, 3);
  EXPECT_NE(migration.out.find("runtime_role_invalid"), std::string::npos);
  CommandResult runtime_migrates = Cluster({"migrate", "--database-url", Url("ql3_runtime")});
  EXPECT_EQ(runtime_migrates.exit_code, 2);
  EXPECT_NE(runtime_migrates.err.find("migration_role_invalid"), std::string::npos);
}

// One drift class: what is changed (as the superuser, in a freshly migrated database of its own)
// and the stable code and detail `ql-cluster audit` must print with exit code 3.
struct DriftCase {
  const char* name;
  const char* tamper;  // "%DB%" stands for the database's name
  const char* code;
  const char* detail;
  const char* undo = nullptr;  // roles are the server's, not the database's: put back after
};

const DriftCase kDriftCases[] = {
    {"history_gap",
     "DELETE FROM ql3.schema_migrations WHERE id = 'pg-0002-projects-and-definitions'",
     "migration_history_invalid", "migration_gap"},
    {"history_ahead",
     "INSERT INTO ql3.schema_migrations VALUES ('pg-0099-from-the-future', 'postgresql-main', "
     "'postgresql', repeat('a', 64), 0)",
     "migration_history_invalid", "pg-0099-from-the-future"},
    {"history_checksum",
     "UPDATE ql3.schema_migrations SET checksum = repeat('b', 64) WHERE id = 'pg-0003-run-core'",
     "migration_history_invalid", "migration_checksum_mismatch"},
    {"capability", "UPDATE ql3.schema_capabilities SET capability_map = '{\"runs\":1}'",
     "capability_invalid", "control-core"},
    {"extra_table", "CREATE TABLE ql3.shadow_runs (id text)", "schema_contract_invalid",
     "relation shadow_runs"},
    {"extra_column", "ALTER TABLE ql3.runs ADD COLUMN note text", "schema_contract_invalid",
     "column runs.note"},
    {"missing_index", "DROP INDEX ql3.runs_by_status", "schema_contract_invalid",
     "index runs_by_status"},
    {"missing_constraint", "ALTER TABLE ql3.runs DROP CONSTRAINT runs_status_check",
     "schema_contract_invalid", "constraint runs.runs_status_check"},
    {"missing_trigger", "DROP TRIGGER run_events_append_only ON ql3.run_events",
     "schema_contract_invalid", "run_events_append_only"},
    {"extra_rule", "CREATE RULE runs_keep AS ON DELETE TO ql3.runs DO INSTEAD NOTHING",
     "schema_contract_invalid", "rule runs.runs_keep"},
    {"row_security", "ALTER TABLE ql3.runs ENABLE ROW LEVEL SECURITY", "schema_contract_invalid",
     "row-security runs enabled=true"},
    {"extra_policy", "CREATE POLICY runs_all ON ql3.runs USING (true)", "schema_contract_invalid",
     "policy runs.runs_all"},
    {"reloptions", "ALTER TABLE ql3.trigger_schedules RESET (fillfactor)",
     "schema_contract_invalid", "reloptions trigger_schedules fillfactor=70"},
    {"runtime_extra_privilege", "GRANT DELETE ON ql3.projects TO ql3_runtime",
     "runtime_role_invalid", "has DELETE on projects"},
    {"runtime_missing_privilege", "REVOKE INSERT ON ql3.run_events FROM ql3_runtime",
     "runtime_role_invalid", "lacks INSERT on run_events"},
    {"ingress_extra_privilege", "GRANT SELECT ON ql3.runs TO ql3_worker_ingress",
     "runtime_role_invalid", "ql3_worker_ingress has SELECT on runs"},
    {"admin_extra_privilege", "GRANT UPDATE ON ql3.runs TO ql3_admin", "admin_role_invalid",
     "ql3_admin has UPDATE on runs"},
    {"admin_missing_privilege", "REVOKE INSERT ON ql3.trigger_revisions FROM ql3_admin",
     "admin_role_invalid", "ql3_admin lacks INSERT on trigger_revisions"},
    {"read_only_target", "ALTER DATABASE %DB% SET default_transaction_read_only = on",
     "server_read_only", "read-only"},
    // Each role's attributes, memberships (SET ROLE paths), LOGIN and CONNECT.
    {"runtime_attribute", "ALTER ROLE ql3_runtime CREATEDB", "runtime_role_invalid",
     "ql3_runtime has CREATEDB", "ALTER ROLE ql3_runtime NOCREATEDB"},
    {"ingress_attribute", "ALTER ROLE ql3_worker_ingress CREATEROLE", "runtime_role_invalid",
     "ql3_worker_ingress has CREATEDB, CREATEROLE", "ALTER ROLE ql3_worker_ingress NOCREATEROLE"},
    {"ingress_noinherit_member_of_runtime",
     "ALTER ROLE ql3_worker_ingress NOINHERIT; GRANT ql3_runtime TO ql3_worker_ingress",
     "runtime_role_invalid", "ql3_worker_ingress is a member of another role",
     "REVOKE ql3_runtime FROM ql3_worker_ingress; ALTER ROLE ql3_worker_ingress INHERIT"},
    {"ingress_nologin", "ALTER ROLE ql3_worker_ingress NOLOGIN", "runtime_role_invalid",
     "ql3_worker_ingress cannot log in", "ALTER ROLE ql3_worker_ingress LOGIN"},
    {"ingress_no_connect", "REVOKE CONNECT ON DATABASE %DB% FROM ql3_worker_ingress",
     "runtime_role_invalid", "ql3_worker_ingress may not CONNECT"},
    {"admin_member_of_runtime", "GRANT ql3_runtime TO ql3_admin", "admin_role_invalid",
     "ql3_admin is a member of another role", "REVOKE ql3_runtime FROM ql3_admin"},
    {"admin_nologin", "ALTER ROLE ql3_admin NOLOGIN", "admin_role_invalid",
     "ql3_admin cannot log in", "ALTER ROLE ql3_admin LOGIN"},
    {"admin_no_connect", "REVOKE CONNECT ON DATABASE %DB% FROM ql3_admin", "admin_role_invalid",
     "ql3_admin may not CONNECT"},
    {"migration_attribute", "ALTER ROLE ql3_migration BYPASSRLS", "migration_role_invalid",
     "ql3_migration has CREATEDB, CREATEROLE, REPLICATION or BYPASSRLS",
     "ALTER ROLE ql3_migration NOBYPASSRLS"},
    {"migration_member_of_admin", "GRANT ql3_admin TO ql3_migration", "migration_role_invalid",
     "ql3_migration is a member of another role", "REVOKE ql3_admin FROM ql3_migration"},
};

class ClusterCliDriftTest : public ClusterCliTest,
                            public ::testing::WithParamInterface<DriftCase> {};

TEST_P(ClusterCliDriftTest, EachDriftClassIsNotReadyWithItsStableCode) {
  const DriftCase& drift = GetParam();
  const std::string db = std::string("drift_") + drift.name;
  ASSERT_TRUE(server_->Psql("postgres", "CREATE DATABASE " + db +
                                            " OWNER ql3_migration;\nREVOKE ALL ON DATABASE " + db +
                                            " FROM PUBLIC;\nGRANT CONNECT ON DATABASE " + db +
                                            " TO ql3_runtime, ql3_admin, ql3_worker_ingress")
                  .ok());
  const auto url = [&](const std::string& role) {
    return "postgresql://" + role + ":s3cret@127.0.0.1:" + std::to_string(server_->port()) + "/" +
           db + "?sslmode=disable";
  };
  ASSERT_EQ(Cluster({"migrate", "--database-url", url("ql3_migration")}).exit_code, 0);
  CommandResult ready = Cluster({"audit", "--database-url", url("ql3_runtime")});
  ASSERT_EQ(ready.exit_code, 0) << ready.out << ready.err;

  std::string tamper = drift.tamper;
  if (size_t at = tamper.find("%DB%"); at != std::string::npos) tamper.replace(at, 4, db);
  ASSERT_TRUE(server_->Psql(db, tamper).ok()) << tamper;
  CommandResult r = Cluster({"audit", "--database-url", url("ql3_runtime")});
  if (drift.undo != nullptr) ASSERT_TRUE(server_->Psql(db, drift.undo).ok()) << drift.undo;
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_EQ(r.out.rfind(std::string("not ready: ") + drift.code + ": ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find(drift.detail), std::string::npos) << r.out;
}

INSTANTIATE_TEST_SUITE_P(DriftClasses, ClusterCliDriftTest, ::testing::ValuesIn(kDriftCases),
                         [](const ::testing::TestParamInfo<DriftCase>& info) {
                           return std::string(info.param.name);
                         });

TEST_F(ClusterCliTest, EveryConfiguredUrlMustLogInAsItsRole) {
  Migrated();
  CommandResult all = Cluster({"audit", "--database-url", Url("ql3_runtime"),
                               "--admin-database-url", Url("ql3_admin"), "--worker-database-url",
                               Url("ql3_worker_ingress")});
  EXPECT_EQ(all.exit_code, 0) << all.out << all.err;
  CommandResult migration_as_admin = Cluster({"audit", "--database-url", Url("ql3_runtime"),
                                              "--admin-database-url", Url("ql3_migration")});
  EXPECT_EQ(migration_as_admin.exit_code, 3);
  EXPECT_EQ(migration_as_admin.out,
            "not ready: admin_role_invalid: the URL connects as role ql3_migration, not "
            "ql3_admin\n");
  CommandResult runtime_as_worker = Cluster({"audit", "--database-url", Url("ql3_runtime"),
                                             "--worker-database-url", Url("ql3_runtime")});
  EXPECT_EQ(runtime_as_worker.exit_code, 3);
  EXPECT_NE(runtime_as_worker.out.find("worker_role_invalid"), std::string::npos)
      << runtime_as_worker.out;

  // serve refuses the same configuration before it opens anything.
  CommandResult serve = Cluster({"serve", "--database-url", Url("ql3_runtime"),
                                 "--admin-database-url", Url("ql3_migration"), "--listen",
                                 "127.0.0.1:0"});
  EXPECT_EQ(serve.exit_code, 3) << serve.out << serve.err;
  EXPECT_NE(serve.out.find("not ready: admin_role_invalid"), std::string::npos) << serve.out;
}

// A worker token is minted for a pool; minting one for a pool that serves no project says so,
// and a pool name the store would refuse is refused before anything is written.
TEST_F(ClusterCliTest, AWorkerTokenIsMintedForItsPool) {
  Migrated();
  CommandResult gpu = Cluster(
      {"worker-token", "create", "gpu-host", "--pool", "gpu", "--database-url", Url("ql3_admin")});
  ASSERT_EQ(gpu.exit_code, 0) << gpu.err;
  EXPECT_NE(gpu.out.find("gpu-host"), std::string::npos) << gpu.out;
  EXPECT_NE(gpu.out.find("for pool gpu"), std::string::npos) << gpu.out;
  EXPECT_NE(gpu.err.find("note: pool gpu serves no project yet"), std::string::npos) << gpu.err;
  CommandResult plain =
      Cluster({"worker-token", "create", "cpu-host", "--database-url", Url("ql3_admin")});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_NE(plain.out.find("for pool default"), std::string::npos) << plain.out;
  EXPECT_EQ(plain.err, "") << "the open default pool serves every project";
  for (const char* bad : {"Bad", "..x", "gpu/1", ""}) {
    SCOPED_TRACE(bad);
    CommandResult refused = Cluster(
        {"worker-token", "create", "bad-host", "--pool", bad, "--database-url", Url("ql3_admin")});
    EXPECT_EQ(refused.exit_code, 2) << refused.out << refused.err;
    EXPECT_EQ(refused.err.rfind("error: invalid_pool: ", 0), 0u) << refused.err;
  }
  Result<std::string> rows =
      server_->Psql("qinglong",
                    "SELECT string_agg(name || '=' || pool, ',' ORDER BY name) FROM "
                    "ql3.worker_credentials");
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  EXPECT_EQ(*rows, "cpu-host=default,gpu-host=gpu\n");
}

TEST_F(ClusterCliTest, ACredentialNameTakenTwiceIsADuplicateAndChangesNothing) {
  Migrated();
  for (const char* kind : {"token", "worker-token"}) {
    SCOPED_TRACE(kind);
    CommandResult first = Cluster({kind, "create", "ops-twice", "--database-url", Url("ql3_admin")});
    ASSERT_EQ(first.exit_code, 0) << first.err;
    CommandResult second =
        Cluster({kind, "create", "ops-twice", "--database-url", Url("ql3_admin")});
    EXPECT_EQ(second.exit_code, 1);
    EXPECT_EQ(second.err.rfind("error: name_duplicate: ", 0), 0u) << second.err;
    EXPECT_EQ(second.out, "");
  }
  Result<std::string> rows = server_->Psql(
      "qinglong",
      "SELECT (SELECT count(*) FROM ql3.principals WHERE name = 'ops-twice') || '|' || "
      "(SELECT count(*) FROM ql3.worker_credentials WHERE name = 'ops-twice')");
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  EXPECT_EQ(*rows, "1|1\n");
}

TEST_F(ClusterCliTest, BadUrlsAreRejectedWithoutBeingPrinted) {
  CommandResult insecure = Cluster({"audit", "--database-url", Url("ql3_runtime")}, {});
  EXPECT_EQ(insecure.exit_code, 2);
  EXPECT_NE(insecure.err.find("error: insecure_database_url: "), std::string::npos) << insecure.err;
  CommandResult missing = Cluster({"audit"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("database_url_missing"), std::string::npos) << missing.err;
  CommandResult malformed = Cluster({"migrate", "--database-url", "postgresql://x:s3cret@[::1"});
  EXPECT_EQ(malformed.exit_code, 2);
  EXPECT_NE(malformed.err.find("invalid_database_url"), std::string::npos) << malformed.err;
  CommandResult both =
      Cluster({"audit", "--database-url", Url("ql3_runtime"), "--database-url-file", "/x"});
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.err.find("database_url_ambiguous"), std::string::npos);
  CommandResult unreadable = Cluster({"audit", "--database-url-file", "/nonexistent/url"});
  EXPECT_EQ(unreadable.exit_code, 2);
  EXPECT_NE(unreadable.err.find("database_url_file_unreadable"), std::string::npos);
  CommandResult unreachable =
      Cluster({"audit", "--database-url",
               "postgresql://ql3_runtime:s3cret@127.0.0.1:1/qinglong?sslmode=disable"});
  EXPECT_EQ(unreachable.exit_code, 1);
  EXPECT_NE(unreachable.err.find("database_unavailable"), std::string::npos);
  CommandResult usage = Cluster({"frobnicate"});
  EXPECT_EQ(usage.exit_code, 2);
}

}  // namespace
}  // namespace ql::itest
