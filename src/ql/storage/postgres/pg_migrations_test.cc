#include "ql/storage/postgres/pg_migrations.h"

#include <gtest/gtest.h>

#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ql/storage/postgres/pg_client.h"
#include "ql/storage/postgres/pg_test_support.h"
#include "ql/testing/fake_clock.h"

namespace ql::pg {
namespace {

using testing::PgTestCluster;

// Once a migration has landed its id and checksum never change.
TEST(PostgresStreamTest, ChecksumsArePinned) {
  const std::map<std::string, std::string> pinned = {
      {"pg-0001-schema-history",
       "4c9e40453d588d602a09aa08bf45767039a2d31705c78f384cdec8f08a5b856a"},
      {"pg-0002-projects-and-definitions",
       "edb2a18d45bbad00253c720e560f48cefa8f2f364af01bdf9441dff5417efb8d"},
      {"pg-0003-run-core", "c0556564372c70a0c1441883e7e7d5abfe61f12e2861e608c0605890677d5c5d"},
      {"pg-0004-trigger-schedules",
       "d257c3b4066ad3025a099e9895162b96e630fc15cf55e19c2035b3788d31102e"},
      {"pg-0005-worker-dispatch",
       "04f324053023b24868ee91373e680b415dad405856a4d4948c1779be84a7d3cc"},
      {"pg-0006-api-credentials",
       "95e06af363812c7b1ce4c7f8fcc20dbde29106cfa0a97ca9fed97ff033f82e06"},
      {"pg-0007-run-logs", "b9099079d5a443373d0c10deaff1dd92334bb9b54ecbe6ee4661eb85cf7f2143"},
      {"pg-0008-worker-leases", "cf8e6bde5b8db6ebc9e96dbcbbfc5a34d1a7309b38d3606b511f85d519ba3fed"},
      {"pg-0009-heap-only-claims",
       "a0b71534bc2e9cc21c944edb5a14d299125e436b2c549cb7213a6cff6cdce566"},
      {"pg-0010-governance", "e4974702f84a0b10f57f6ef1830afb8548571dfb2fbea68665fa0fa95f9bfed0"},
  };
  const MigrationStream& stream = PostgresMainStream();
  ASSERT_TRUE(ValidateStream(stream).ok()) << ValidateStream(stream).ToString();
  ASSERT_EQ(stream.migrations.size(), pinned.size());
  for (const Migration& m : stream.migrations) {
    auto it = pinned.find(m.id);
    ASSERT_NE(it, pinned.end()) << m.id;
    EXPECT_EQ(m.checksum, it->second) << m.id;
  }
  EXPECT_EQ(stream.name, "postgresql-main");
  EXPECT_EQ(stream.dialect, "postgresql");
  EXPECT_FALSE(GrantsSql().empty());
}

TEST(PostgresStreamTest, CapabilityStepsFollowTheStream) {
  int64_t version = 0;
  for (const SchemaCapability& step : CapabilitySteps()) {
    EXPECT_EQ(step.name, kControlCore);
    EXPECT_EQ(step.version, ++version);
    bool known = false;
    for (const Migration& m : PostgresMainStream().migrations) known |= m.id == step.migration_id;
    EXPECT_TRUE(known) << step.migration_id;
  }
  EXPECT_EQ(ExpectedCapability().migration_id, PostgresMainStream().migrations.back().id);
}

class PostgresMigrateTest : public ::testing::Test {
 protected:
  PgTestCluster& cluster() { return PgTestCluster::Get(); }
  std::string Query(const std::string& db, const std::string& sql) {
    Result<std::string> out = cluster().server().Psql(db, sql);
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    return out.ok() ? *out : "";
  }
  ::ql::testing::FakeClock clock_;
};

TEST_F(PostgresMigrateTest, FreshDatabaseGetsTheWholeStreamThenNothing) {
  std::string db = cluster().NewEmptyDatabase();
  std::string url = cluster().Url(kMigrationRole, db);
  Result<MigrateReport> first = Migrate(url, clock_);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_EQ(first->applied.size(), PostgresMainStream().migrations.size());
  EXPECT_EQ(first->applied.front(), "pg-0001-schema-history");

  std::string history = Query(db,
                              "SELECT string_agg(id || ' ' || checksum, ',' ORDER BY id) "
                              "FROM ql3.schema_migrations");
  std::string want;
  for (const Migration& m : PostgresMainStream().migrations) {
    want += (want.empty() ? "" : ",") + m.id + " " + m.checksum;
  }
  EXPECT_EQ(history, want + "\n");
  EXPECT_EQ(Query(db,
                  "SELECT name || ' ' || version || ' ' || migration_id FROM "
                  "ql3.schema_capabilities"),
            "control-core " + std::to_string(ExpectedCapability().version) + " " +
                std::string(ExpectedCapability().migration_id) + "\n");
  EXPECT_EQ(Query(db, "SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'ql3'"),
            "ql3_migration\n");

  Result<MigrateReport> second = Migrate(url, clock_);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_TRUE(second->applied.empty());
}

TEST_F(PostgresMigrateTest, OnlyTheMigrationRoleMigrates) {
  std::string db = cluster().NewEmptyDatabase();
  Result<MigrateReport> r = Migrate(cluster().Url(kRuntimeRole, db), clock_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().reason(), "migration_role_invalid");
  EXPECT_EQ(Query(db, "SELECT count(*) FROM pg_namespace WHERE nspname = 'ql3'"), "0\n");
}

TEST_F(PostgresMigrateTest, HeldLockMakesASecondMigratorFailWithoutDdl) {
  std::string db = cluster().NewEmptyDatabase();
  std::string url = cluster().Url(kMigrationRole, db);
  Result<std::unique_ptr<Connection>> holder = Connection::Open(url, {});
  ASSERT_TRUE(holder.ok()) << holder.status().ToString();
  ASSERT_TRUE((*holder)->ExecScript("BEGIN", "hold").ok());
  ASSERT_TRUE(
      (*holder)->Exec("SELECT pg_advisory_xact_lock($1)", {P(kMigrationLockKey)}, "hold").ok());

  Result<MigrateReport> blocked = Migrate(url, clock_);
  ASSERT_FALSE(blocked.ok());
  EXPECT_EQ(blocked.status().code(), StatusCode::kBusy);
  EXPECT_EQ(blocked.status().reason(), "migration_lock_held");
  EXPECT_EQ(Query(db, "SELECT count(*) FROM pg_namespace WHERE nspname = 'ql3'"), "0\n");

  ASSERT_TRUE((*holder)->ExecScript("COMMIT", "release").ok());
  Result<MigrateReport> after = Migrate(url, clock_);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(after->applied.size(), PostgresMainStream().migrations.size());
}

TEST_F(PostgresMigrateTest, ConcurrentMigratorsConvergeOnOneHistory) {
  std::string db = cluster().NewEmptyDatabase();
  std::string url = cluster().Url(kMigrationRole, db);
  auto run = [&] {
    ::ql::testing::FakeClock clock;
    return Migrate(url, clock);
  };
  auto a = std::async(std::launch::async, run);
  auto b = std::async(std::launch::async, run);
  Result<MigrateReport> ra = a.get();
  Result<MigrateReport> rb = b.get();
  size_t applied = 0;
  for (const Result<MigrateReport>* r : {&ra, &rb}) {
    if (r->ok()) {
      applied += (*r)->applied.size();
    } else {
      EXPECT_EQ(r->status().reason(), "migration_lock_held") << r->status().ToString();
    }
  }
  EXPECT_TRUE(ra.ok() || rb.ok());
  // Every migration was applied exactly once, by one migrator or the other.
  EXPECT_EQ(applied, PostgresMainStream().migrations.size());
  EXPECT_EQ(Query(db, "SELECT count(*) FROM ql3.schema_migrations"),
            std::to_string(PostgresMainStream().migrations.size()) + "\n");
}

TEST_F(PostgresMigrateTest, AFailingMigrationLeavesHistoryAndCapabilityUnchanged) {
  std::string db = cluster().NewEmptyDatabase();
  std::string url = cluster().Url(kMigrationRole, db);
  ASSERT_TRUE(Migrate(url, clock_).ok());
  std::string before = Query(db,
                             "SELECT string_agg(id, ',' ORDER BY id) FROM ql3.schema_migrations;"
                             "SELECT version FROM ql3.schema_capabilities");

  MigrationStream broken = PostgresMainStream();
  std::string sql =
      "CREATE TABLE ql3.half_done (id text);\n"
      "INSERT INTO ql3.half_done VALUES ('x');\n"
      "SELECT 1 / 0;\n";
  broken.migrations.push_back({"pg-0008-fails-midway", MigrationChecksum(sql), sql});
  std::vector<SchemaCapability> steps(CapabilitySteps().begin(), CapabilitySteps().end());
  steps.push_back(
      {kControlCore, ExpectedCapability().version + 1, R"({"x":1})", "pg-0008-fails-midway"});
  Result<MigrateReport> r = MigrateStream(url, broken, steps, clock_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(Query(db,
                  "SELECT string_agg(id, ',' ORDER BY id) FROM ql3.schema_migrations;"
                  "SELECT version FROM ql3.schema_capabilities"),
            before);
  EXPECT_EQ(Query(db, "SELECT to_regclass('ql3.half_done') IS NULL"), "t\n");
}

TEST_F(PostgresMigrateTest, TamperedHistoryIsRefusedBeforeAnyChange) {
  std::string db = cluster().NewEmptyDatabase();
  std::string url = cluster().Url(kMigrationRole, db);
  ASSERT_TRUE(Migrate(url, clock_).ok());
  Query(db,
        "UPDATE ql3.schema_migrations SET checksum = repeat('0', 64) "
        "WHERE id = 'pg-0002-projects-and-definitions'");
  Result<MigrateReport> r = Migrate(url, clock_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorrupt);
  EXPECT_EQ(r.status().reason(), "migration_checksum_mismatch");
}

}  // namespace
}  // namespace ql::pg
