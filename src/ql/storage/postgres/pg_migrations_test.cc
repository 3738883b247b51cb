#include "ql/storage/postgres/pg_migrations.h"

#include <gtest/gtest.h>

#include <deque>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ql/storage/postgres/pg_audit.h"
#include "ql/storage/postgres/pg_client.h"
#include "ql/storage/postgres/pg_test_support.h"
#include "ql/testing/fake_clock.h"

namespace ql::pg {
namespace {

using testing::PgTestCluster;

// The id of the migration `offset` places after the last of `stream`, named `name`.
std::string NextId(const MigrationStream& stream, const std::string& name, size_t offset = 1) {
  std::string number = std::to_string(stream.migrations.size() + offset);
  return "pg-" + std::string(4 - number.size(), '0') + number + "-" + name;
}

// The compiled stream followed by test migrations (id, SQL).
MigrationStream WithMigrations(const std::vector<std::pair<std::string, std::string>>& extra) {
  MigrationStream stream = PostgresMainStream();
  for (const auto& [id, sql] : extra) {
    stream.migrations.push_back({id, MigrationChecksum(sql), sql});
  }
  return stream;
}

// The compiled capability steps followed by one step per (migration id, version). The ids are
// kept alive by a static store, since SchemaCapability holds views.
std::vector<SchemaCapability> StepsWith(
    const std::vector<std::pair<std::string, int64_t>>& extra) {
  static std::deque<std::string> ids;
  std::vector<SchemaCapability> steps(CapabilitySteps().begin(), CapabilitySteps().end());
  for (const auto& [id, version] : extra) {
    ids.push_back(id);
    steps.push_back({kControlCore, version, R"({"test":1})", ids.back()});
  }
  return steps;
}

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
      {"pg-0011-cron-runs-carry-their-key",
       "3b4f0beadbc30c3e2b169ad95fe0d8301440979505eb99c6a68279f214035790"},
      {"pg-0012-approvals", "f66a30177e0c6653ee79f924b0dd3173a30a795fcef52cdc9ff101c4699ee116"},
      {"pg-0013-retention", "6b4e38669ff1ef3cbbfa3da3907a94054ddbba95cec6ff7e59859f8d80c9bc8a"},
      {"pg-0014-secrets", "0aa2341da31b618d715b707ae010fae4f98348e7c8255965ca6cc1386e4ddc02"},
      {"pg-0015-approval-evidence-and-retries",
       "9597499b4e590ffadf2da67ba3f50b4177d5365e61d127d68c47f0fa239d94e8"},
      {"pg-0016-overlap", "63da25e085da73849e3e0e07f2b50f0f6a4ec1a6d2472fd90c2d457202fbd216"},
      {"pg-0017-names-and-tombstones",
       "b4a2fa22685ecc5262a29fc64b743dd6a9a4e48967a9a7076bcae0571e81119d"},
      {"pg-0018-trigger-jitter",
       "5d59886f1250c104228f46640fecd5f7e7d1797239e09c8e6a9595147daacd11"},
      {"pg-0019-compact-runs", "f315fbac9ed463d9f3323c77bd0ee5ce3cf927f42ea57ec03a3762f58445c73b"},
      {"pg-0020-sign-in", "58f450371e539260b5cb9aea2b5c553be8d1663c8a455e58e3adf88904bab7c4"},
      {"pg-0021-published-by", "a027ce1bd37c34b78e162e58c867e7533fcddf1624f9d5db4bbc22b17d261d09"},
      {"pg-0022-sign-in-policies",
       "6c7d4c4b00f5aa0d3b4e070348d4c6b9b399ba59c272d56a4b397b5d6ed175f0"},
      {"pg-0023-notifications", "ad0d62f14cc883bb94e00b47f22ff0a8605b7c613fcca891beb0948d4c31759f"},
      {"pg-0024-retry-on-timeout",
       "dea2c1bfbfc5b121bd55a08ccf698ab7fc907847b2f631c0c9ebc861b3e3b5a5"},
      {"pg-0025-migration-markers",
       "c17a91fe637fe3493fae0e4a140404b5bc448c8883a8cf202178a66dd5391fa1"},
      {"pg-0026-dump-stable-checks",
       "19acc0d78adaa8596fe5895fe3dffe9a65f099ecde75a287bee9115dff402d3b"},
      {"pg-0027-artifacts", "8ab36bfd50ae796dce4eaf08e35abf67e922d5d32ac05009046bb2ec9e227111"},
      {"pg-0028-worker-placement",
       "da26ca80ad943c1170d142aa953e9fb5b07fc43f2a0822de8daf698256223f67"},
      {"pg-0029-worker-credential-pools",
       "1c8d623a31917c6f6aa3ce5f1d157e1ada37a3af1f5d32af258ab9c725dd1d74"},
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

// The compact-runs migration moves every run's retry policy into its row, drops the stored key of cron runs (kept
// unique by their occurrence) and keeps the events already stored.
TEST_F(PostgresMigrateTest, CompactRunsKeepsThePoliciesKeysAndEventsOfExistingRuns) {
  const MigrationStream& full = PostgresMainStream();
  size_t compact = 0;
  while (compact < full.migrations.size() &&
         !full.migrations[compact].id.ends_with("-compact-runs")) {
    ++compact;
  }
  ASSERT_LT(compact, full.migrations.size());
  MigrationStream before = full;
  before.migrations.resize(compact);
  std::vector<SchemaCapability> before_steps;
  for (const SchemaCapability& step : CapabilitySteps()) {
    for (const Migration& m : before.migrations) {
      if (m.id == step.migration_id) before_steps.push_back(step);
    }
  }
  std::string db = cluster().NewEmptyDatabase();
  std::string url = cluster().Url(kMigrationRole, db);
  Result<MigrateReport> first = MigrateStream(url, before, before_steps, clock_);
  ASSERT_TRUE(first.ok()) << first.status().ToString();

  const std::string digest(64, 'a');
  const std::string p = "00000000-0000-7000-8000-000000000001";
  const std::string t = "00000000-0000-7000-8000-000000000002";
  const std::string g = "00000000-0000-7000-8000-000000000003";
  const std::string e = "00000000-0000-7000-8000-000000000004";
  const std::string cron = "00000000-0000-7000-8000-000000000005";
  const std::string manual = "00000000-0000-7000-8000-000000000006";
  const std::string plain = "00000000-0000-7000-8000-000000000007";
  const std::string cron_key = "ql3:cron:v1:" + g + ":1:60000";
  Query(db,
        "BEGIN; INSERT INTO ql3.projects (id, slug, name, status, version, created_at_ms, "
        "updated_at_ms) VALUES ('" + p + "', 'p', 'P', 'active', 1, 1, 1);"
        "INSERT INTO ql3.task_heads (task_id, project_id, current_revision, created_at_ms, "
        "updated_at_ms, name) VALUES ('" + t + "', '" + p + "', 1, 1, 1, 'job');"
        "INSERT INTO ql3.task_revisions (task_id, revision, project_id, mutation_id, name, kind, "
        "spec_json, labels_json, enabled, content_digest, created_at_ms) VALUES ('" + t +
        "', 1, '" + p + "', 'm1', 'job', 'k', '{}', '{}', true, '" + digest + "', 1);"
        "INSERT INTO ql3.execution_revisions (id, project_id, task_id, task_revision, "
        "executor_type, plan_json, plan_digest, task_digest, created_at_ms) VALUES ('" + e +
        "', '" + p + "', '" + t + "', 1, 'remote_worker', '{}', '" + digest + "', '" + digest +
        "', 1);"
        "INSERT INTO ql3.trigger_heads (trigger_id, project_id, task_id, current_revision, "
        "created_at_ms, updated_at_ms, name) VALUES ('" + g + "', '" + p + "', '" + t +
        "', 1, 1, 1, 'every');"
        "INSERT INTO ql3.trigger_revisions (trigger_id, revision, project_id, mutation_id, "
        "task_id, task_revision, task_digest, expression, timezone, misfire, enabled, "
        "content_digest, created_at_ms) VALUES ('" + g + "', 1, '" + p + "', 'm2', '" + t +
        "', 1, '" + digest + "', '* * * * *', 'UTC', 'skip', true, '" + digest + "', 1);"
        "INSERT INTO ql3.runs (id, project_id, task_id, task_revision, task_digest, "
        "execution_revision_id, trigger_id, trigger_revision, scheduled_for_ms, trigger_type, "
        "status, version, event_sequence, priority, idempotency_key, created_at_ms) VALUES "
        "('" + cron + "', '" + p + "', '" + t + "', 1, '" + digest + "', '" + e + "', '" + g +
        "', 1, 60000, 'cron', 'queued', 1, 2, 0, '" + cron_key + "', 5), "
        "('" + manual + "', '" + p + "', '" + t + "', 1, '" + digest + "', '" + e +
        "', NULL, NULL, NULL, 'manual', 'queued', 1, 1, 0, 'mine', 6), "
        "('" + plain + "', '" + p + "', '" + t + "', 1, '" + digest + "', '" + e +
        "', NULL, NULL, NULL, 'api', 'queued', 1, 1, 0, NULL, 7);"
        "INSERT INTO ql3.run_retry_policies (run_id, max_attempts, retry_on_lost, safety, "
        "backoff_base_ms, backoff_max_ms) VALUES ('" + cron + "', 3, true, 'idempotent', 500, "
        "4000), ('" + manual + "', 1, false, 'unknown', 0, 0), ('" + plain +
        "', 16, false, 'deduplicated', 1000, 86400000);"
        "INSERT INTO ql3.run_events (run_id, sequence, type, actor_type, payload_json, "
        "created_at_ms) VALUES ('" + cron + "', 1, 'run.created', 'scheduler', '{}', 5), ('" +
        cron + "', 2, 'run.queued', 'scheduler', '{}', 5), ('" + manual +
        "', 1, 'run.created', 'user', '{}', 6); COMMIT;");

  Result<MigrateReport> rest = Migrate(url, clock_);
  ASSERT_TRUE(rest.ok()) << rest.status().ToString();
  EXPECT_EQ(rest->applied.front(), full.migrations[compact].id);
  EXPECT_EQ(Query(db,
                  "SELECT string_agg(concat_ws('|', id, coalesce(idempotency_key, '-'), "
                  "retry_max_attempts, retry_on_lost, retry_safety, retry_backoff_base_ms, "
                  "retry_backoff_max_ms), ',' ORDER BY id) FROM ql3.runs"),
            cron + "|-|3|t|idempotent|500|4000," + manual + "|mine|1|f|unknown|0|0," + plain +
                "|-|16|f|deduplicated|1000|86400000\n");
  EXPECT_EQ(Query(db, "SELECT to_regclass('ql3.run_retry_policies') IS NULL"), "t\n");
  // Runs written before timeouts could be retried say they are not.
  EXPECT_EQ(Query(db, "SELECT count(*) FROM ql3.runs WHERE retry_on_timeout"), "0\n");
  EXPECT_EQ(Query(db, "SELECT string_agg(run_id || ':' || sequence, ',' ORDER BY run_id, "
                      "sequence) FROM ql3.run_events"),
            cron + ":1," + cron + ":2," + manual + ":1\n");
  // The occurrence stays taken: a second cron run of it is refused.
  Result<std::string> twice = cluster().server().Psql(
      db, "INSERT INTO ql3.runs (id, project_id, task_id, task_revision, task_digest, "
          "execution_revision_id, trigger_id, trigger_revision, scheduled_for_ms, trigger_type, "
          "status, version, event_sequence, priority, created_at_ms, retry_max_attempts, "
          "retry_on_lost, retry_safety, retry_backoff_base_ms, retry_backoff_max_ms) SELECT "
          "'00000000-0000-7000-8000-000000000008', project_id, task_id, task_revision, "
          "task_digest, execution_revision_id, trigger_id, trigger_revision, scheduled_for_ms, "
          "trigger_type, status, version, event_sequence, priority, created_at_ms, 1, false, "
          "'unknown', 0, 0 FROM ql3.runs WHERE id = '" + cron + "'");
  EXPECT_FALSE(twice.ok());
  EXPECT_NE(twice.status().ToString().find("runs_cron_occurrence_key"), std::string::npos)
      << twice.status().ToString();
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
  const std::string state_sql =
      "SELECT string_agg(id, ',' ORDER BY id) FROM ql3.schema_migrations;"
      "SELECT version || ' ' || migration_id FROM ql3.schema_capabilities";
  const std::string before = Query(db, state_sql);

  // A new migration after the code's last one: two statements that work, then one that fails.
  const std::string id = NextId(PostgresMainStream(), "fails-midway");
  const std::string good =
      "CREATE TABLE ql3.half_done (id text);\n"
      "INSERT INTO ql3.half_done VALUES ('x');\n";
  MigrationStream broken = WithMigrations({{id, good + "SELECT 1 / 0;\n"}});
  std::vector<SchemaCapability> steps = StepsWith({{id, ExpectedCapability().version + 1}});
  Result<MigrateReport> r = MigrateStream(url, broken, steps, clock_);
  ASSERT_FALSE(r.ok());
  // It failed in its own SQL (division by zero), not before running it.
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  EXPECT_EQ(r.status().reason(), "value_too_large");
  EXPECT_NE(r.status().message().find("migration " + id), std::string::npos)
      << r.status().ToString();
  EXPECT_EQ(Query(db, state_sql), before);
  EXPECT_EQ(Query(db, "SELECT to_regclass('ql3.half_done') IS NULL"), "t\n");

  // The same migration without the failing statement lands whole.
  MigrationStream fixed = WithMigrations({{id, good}});
  Result<MigrateReport> applied = MigrateStream(url, fixed, steps, clock_);
  ASSERT_TRUE(applied.ok()) << applied.status().ToString();
  EXPECT_EQ(applied->applied, std::vector<std::string>{id});
  EXPECT_EQ(Query(db, "SELECT id FROM ql3.half_done"), "x\n");
  EXPECT_EQ(Query(db, "SELECT version || ' ' || migration_id FROM ql3.schema_capabilities"),
            std::to_string(ExpectedCapability().version + 1) + " " + id + "\n");
}

// The capability row refers to its migration's history row through a deferred foreign key:
// checked at COMMIT, so both rows land in one transaction in either order, and a capability
// that names a migration the history does not hold never commits.
TEST_F(PostgresMigrateTest, TheCapabilityForeignKeyIsCheckedAtCommit) {
  std::string db = cluster().NewEmptyDatabase();
  std::string url = cluster().Url(kMigrationRole, db);
  ASSERT_TRUE(Migrate(url, clock_).ok());
  Result<std::unique_ptr<Connection>> conn = Connection::Open(url, {});
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  const std::string next = std::to_string(ExpectedCapability().version + 1);
  const std::string capability =
      "UPDATE ql3.schema_capabilities SET version = version + 1, migration_id = ";
  const std::string history =
      "INSERT INTO ql3.schema_migrations (id, stream, dialect, checksum, applied_at_ms) VALUES "
      "('pg-9999-later', 'postgresql-main', 'postgresql', repeat('a', 64), 1)";

  // Capability first, its history row later in the same transaction: commits.
  ASSERT_TRUE((*conn)->ExecScript("BEGIN", "begin").ok());
  ASSERT_TRUE((*conn)->ExecScript(capability + "'pg-9999-later'", "capability first").ok());
  ASSERT_TRUE((*conn)->ExecScript(history, "history second").ok());
  ASSERT_TRUE((*conn)->ExecScript("COMMIT", "commit", PgPhase::kCommit).ok());
  EXPECT_EQ(Query(db, "SELECT version || ' ' || migration_id FROM ql3.schema_capabilities"),
            next + " pg-9999-later\n");

  // A capability naming a migration no history row holds: the statement passes, COMMIT fails
  // and nothing of the transaction stays.
  ASSERT_TRUE((*conn)->ExecScript("BEGIN", "begin").ok());
  ASSERT_TRUE((*conn)->ExecScript(capability + "'pg-9998-never'", "dangling capability").ok());
  Status commit = (*conn)->ExecScript("COMMIT", "commit", PgPhase::kCommit);
  EXPECT_EQ(commit.code(), StatusCode::kCorrupt) << commit.ToString();
  EXPECT_EQ(commit.reason(), "capability_invalid");
  EXPECT_NE(commit.message().find("schema_capabilities_migration_fkey"), std::string::npos);
  EXPECT_EQ(Query(db, "SELECT version || ' ' || migration_id FROM ql3.schema_capabilities"),
            next + " pg-9999-later\n");
}

// A test-only pair around a non-transactional step: a table, then a unique index built
// concurrently (prepare), then a commit migration that checks the index is valid.
class PrepareCommitTest : public PostgresMigrateTest {
 protected:
  void SetUp() override {
    db_ = cluster().NewEmptyDatabase();
    url_ = cluster().Url(kMigrationRole, db_);
    ASSERT_TRUE(Migrate(url_, clock_).ok());
    const MigrationStream& main = PostgresMainStream();
    table_ = NextId(main, "test-items", 1);
    prepare_ = NextId(main, "test-items-name-index-prepare", 2);
    commit_ = NextId(main, "test-items-name-index-commit", 3);
    stream_ = WithMigrations({
        {table_,
         "CREATE TABLE ql3.test_items (id integer PRIMARY KEY, name text NOT NULL);\n"
         "INSERT INTO ql3.test_items SELECT g, 'item-' || g FROM generate_series(1, 500) g;\n"},
        {prepare_,
         "-- Outside any transaction, one statement at a time; running them again rebuilds.\n"
         "DROP INDEX CONCURRENTLY IF EXISTS ql3.test_items_name_idx;\n"
         "CREATE UNIQUE INDEX CONCURRENTLY test_items_name_idx ON ql3.test_items (name);\n"},
        {commit_,
         "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = "
         "i.indexrelid WHERE c.oid = to_regclass('ql3.test_items_name_idx') AND i.indisvalid) "
         "THEN RAISE EXCEPTION 'ql3.test_items_name_idx is missing or invalid'; END IF; END $$;\n"},
    });
    steps_ = StepsWith({{table_, ExpectedCapability().version + 1},
                        {commit_, ExpectedCapability().version + 2}});
  }

  std::string History() {
    return Query(db_, "SELECT string_agg(id, ',' ORDER BY id) FROM ql3.schema_migrations WHERE "
                      "id > '" + std::string(PostgresMainStream().migrations.back().id) + "'");
  }
  std::string Capability() {
    return Query(db_, "SELECT version || ' ' || migration_id FROM ql3.schema_capabilities");
  }
  // "valid", "invalid" or "none".
  std::string Index() {
    return Query(db_,
                 "SELECT coalesce((SELECT CASE WHEN i.indisvalid THEN 'valid' ELSE 'invalid' END "
                 "FROM pg_index i WHERE i.indexrelid = to_regclass('ql3.test_items_name_idx')), "
                 "'none')");
  }
  // "prepare-id run/total" per marker, one per line.
  std::string Markers() {
    return Query(db_,
                 "SELECT string_agg(id || ' ' || statements_run || '/' || statements, "
                 "',' ORDER BY id) FROM ql3.schema_migration_markers");
  }
  // Gate 2 of the readiness audit against the test stream, as the runtime role.
  Status Audit() {
    Result<std::unique_ptr<Connection>> conn =
        Connection::Open(cluster().Url(kRuntimeRole, db_), {});
    if (!conn.ok()) return conn.status();
    return CheckMigrationHistory(**conn, stream_);
  }
  // The test stream's pending migrations, as the migrator reads them.
  std::vector<std::string> Pending() {
    Result<std::unique_ptr<Connection>> conn = Connection::Open(url_, {});
    EXPECT_TRUE(conn.ok()) << conn.status().ToString();
    if (!conn.ok()) return {"?"};
    Result<std::vector<HistoryRow>> history = ReadHistory(**conn);
    EXPECT_TRUE(history.ok()) << history.status().ToString();
    if (!history.ok()) return {"?"};
    Result<std::vector<const Migration*>> pending = PendingMigrations(stream_, *history);
    EXPECT_TRUE(pending.ok()) << pending.status().ToString();
    if (!pending.ok()) return {"?"};
    std::vector<std::string> ids;
    for (const Migration* m : *pending) ids.push_back(m->id);
    return ids;
  }
  Result<MigrateReport> CrashAt(const std::string& point) {
    return MigrateStream(url_, stream_, steps_, clock_, {}, [point](std::string_view at) {
      return at == point ? Unavailable("crashed", "the migrator died at " + point) : Status::Ok();
    });
  }

  std::string db_, url_, table_, prepare_, commit_;
  MigrationStream stream_;
  std::vector<SchemaCapability> steps_;
};

TEST_F(PrepareCommitTest, ThePairBuildsItsIndexOutsideATransactionThenCommits) {
  Result<MigrateReport> r = MigrateStream(url_, stream_, steps_, clock_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->applied, (std::vector<std::string>{table_, prepare_, commit_}));
  EXPECT_EQ(History(), table_ + "," + prepare_ + "," + commit_ + "\n");
  EXPECT_EQ(Capability(), std::to_string(ExpectedCapability().version + 2) + " " + commit_ + "\n");
  EXPECT_EQ(Index(), "valid\n");
  EXPECT_EQ(Markers(), "\n");  // landed: no pair in progress
  EXPECT_TRUE(Audit().ok()) << Audit().ToString();
  Result<MigrateReport> again = MigrateStream(url_, stream_, steps_, clock_);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(again->applied.empty());
  // A capability step cannot name the prepare half.
  std::vector<SchemaCapability> wrong = StepsWith({{prepare_, ExpectedCapability().version + 1}});
  EXPECT_EQ(MigrateStream(url_, stream_, wrong, clock_).status().reason(),
            "capability_step_invalid");
}

// The seed's rule: a history row only once every step of its migration has run. A migrator that
// dies after the prepare statements leaves both halves pending, with the marker alone saying
// the pair was started; migrating again lands the pair with exactly one row each.
TEST_F(PrepareCommitTest, ACrashAfterThePrepareStepLeavesNoHistoryRowAndMigratingAgainLandsIt) {
  const std::string v1 = std::to_string(ExpectedCapability().version + 1) + " " + table_ + "\n";
  // Crash with the index built and the commit migration not applied.
  Result<MigrateReport> crashed = CrashAt("prepared");
  EXPECT_EQ(crashed.status().reason(), "crashed");
  EXPECT_EQ(History(), table_ + "\n");  // no row for the prepare migration
  EXPECT_EQ(Markers(), prepare_ + " 2/2\n");
  EXPECT_EQ(Capability(), v1);
  EXPECT_EQ(Index(), "valid\n");
  // The audit and the migrator report the pair as pending, not applied.
  Status audit = Audit();
  EXPECT_EQ(audit.reason(), "migration_history_invalid");
  EXPECT_NE(audit.message().find("migration " + prepare_ + " has not been applied"),
            std::string::npos)
      << audit.ToString();
  EXPECT_NE(audit.message().find("2 pending"), std::string::npos) << audit.ToString();
  EXPECT_NE(audit.message().find("stopped after 2 of 2 statements"), std::string::npos)
      << audit.ToString();
  EXPECT_EQ(Pending(), (std::vector<std::string>{prepare_, commit_}));

  Result<MigrateReport> recovered = MigrateStream(url_, stream_, steps_, clock_);
  ASSERT_TRUE(recovered.ok()) << recovered.status().ToString();
  EXPECT_EQ(recovered->applied, (std::vector<std::string>{prepare_, commit_}));
  EXPECT_EQ(History(), table_ + "," + prepare_ + "," + commit_ + "\n");
  EXPECT_EQ(Query(db_, "SELECT count(*) FROM ql3.schema_migrations WHERE id = '" + prepare_ + "'"),
            "1\n");
  EXPECT_EQ(Markers(), "\n");
  EXPECT_EQ(Index(), "valid\n");
  EXPECT_EQ(Capability(), std::to_string(ExpectedCapability().version + 2) + " " + commit_ + "\n");
  EXPECT_TRUE(Pending().empty());
}

TEST_F(PrepareCommitTest, ACrashBeforeTheStatementsRunsThemOnTheNextMigration) {
  Result<MigrateReport> crashed = CrashAt("marked");
  EXPECT_EQ(crashed.status().reason(), "crashed");
  EXPECT_EQ(History(), table_ + "\n");
  EXPECT_EQ(Markers(), prepare_ + " 0/2\n");
  EXPECT_EQ(Index(), "none\n");
  EXPECT_NE(Audit().message().find("stopped after 0 of 2 statements"), std::string::npos)
      << Audit().ToString();
  Result<MigrateReport> recovered = MigrateStream(url_, stream_, steps_, clock_);
  ASSERT_TRUE(recovered.ok()) << recovered.status().ToString();
  EXPECT_EQ(recovered->applied, (std::vector<std::string>{prepare_, commit_}));
  EXPECT_EQ(Index(), "valid\n");
  EXPECT_EQ(Markers(), "\n");
  EXPECT_EQ(Capability(), std::to_string(ExpectedCapability().version + 2) + " " + commit_ + "\n");
}

TEST_F(PrepareCommitTest, ACrashBetweenTwoStatementsIsCountedAndRecovered) {
  Result<MigrateReport> crashed = CrashAt("statement 1");  // the DROP ran, the CREATE did not
  EXPECT_EQ(crashed.status().reason(), "crashed");
  EXPECT_EQ(History(), table_ + "\n");
  EXPECT_EQ(Markers(), prepare_ + " 1/2\n");
  EXPECT_EQ(Index(), "none\n");
  Result<MigrateReport> recovered = MigrateStream(url_, stream_, steps_, clock_);
  ASSERT_TRUE(recovered.ok()) << recovered.status().ToString();
  EXPECT_EQ(recovered->applied, (std::vector<std::string>{prepare_, commit_}));
  EXPECT_EQ(History(), table_ + "," + prepare_ + "," + commit_ + "\n");
  EXPECT_EQ(Index(), "valid\n");
  EXPECT_EQ(Markers(), "\n");
}

TEST_F(PrepareCommitTest, AFailedConcurrentBuildLeavesAnInvalidIndexThatTheNextRunRebuilds) {
  ASSERT_EQ(CrashAt("marked").status().reason(), "crashed");
  Query(db_, "INSERT INTO ql3.test_items VALUES (501, 'item-1')");  // a duplicate name
  Result<MigrateReport> failed = MigrateStream(url_, stream_, steps_, clock_);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().reason(), "unknown_constraint") << failed.status().ToString();
  EXPECT_EQ(Index(), "invalid\n");  // what CREATE INDEX CONCURRENTLY leaves behind
  EXPECT_EQ(History(), table_ + "\n");
  EXPECT_EQ(Markers(), prepare_ + " 1/2\n");  // the DROP ran, the CREATE failed
  EXPECT_EQ(Capability(), std::to_string(ExpectedCapability().version + 1) + " " + table_ + "\n");

  Query(db_, "DELETE FROM ql3.test_items WHERE id = 501");
  Result<MigrateReport> recovered = MigrateStream(url_, stream_, steps_, clock_);
  ASSERT_TRUE(recovered.ok()) << recovered.status().ToString();
  EXPECT_EQ(recovered->applied, (std::vector<std::string>{prepare_, commit_}));
  EXPECT_EQ(Index(), "valid\n");
  EXPECT_EQ(Markers(), "\n");
}

// Before the marker table, a prepare migration's history row was written ahead of its
// statements and stood for the pair in progress. Such a history is still read: the statements
// run again, then the commit migration alone, and the prepare row stays the one there was.
TEST_F(PrepareCommitTest, AHistoryWrittenTheEarlierWayIsStillCompleted) {
  ASSERT_EQ(CrashAt("marked").status().reason(), "crashed");
  Query(db_,
        "BEGIN; DELETE FROM ql3.schema_migration_markers; "
        "INSERT INTO ql3.schema_migrations (id, stream, dialect, checksum, applied_at_ms) "
        "VALUES ('" +
            prepare_ + "', 'postgresql-main', 'postgresql', '" +
            stream_.migrations[stream_.migrations.size() - 2].checksum + "', 1); COMMIT;");
  EXPECT_EQ(History(), table_ + "," + prepare_ + "\n");
  EXPECT_EQ(Pending(), std::vector<std::string>{commit_});
  Result<MigrateReport> recovered = MigrateStream(url_, stream_, steps_, clock_);
  ASSERT_TRUE(recovered.ok()) << recovered.status().ToString();
  EXPECT_EQ(recovered->applied, std::vector<std::string>{commit_});
  EXPECT_EQ(History(), table_ + "," + prepare_ + "," + commit_ + "\n");
  EXPECT_EQ(
      Query(db_, "SELECT applied_at_ms FROM ql3.schema_migrations WHERE id = '" + prepare_ + "'"),
      "1\n");
  EXPECT_EQ(Index(), "valid\n");
  EXPECT_EQ(Markers(), "\n");
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
