// Upgrades of a populated database. Migration 0006-approvals rebuilds the runs table (SQLite
// cannot change a CHECK constraint in place), so a database of the release before it, holding
// runs with attempts, events and retry policies, is migrated by SqliteStore::Open and checked
// for every row, index, trigger and foreign key it held.

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "ql/storage/sqlite/sqlite_db.h"
#include "ql/storage/sqlite/sqlite_migrations.h"
#include "ql/storage/sqlite/sqlite_store.h"
#include "ql/storage/sqlite/sqlite_test_support.h"

namespace ql {
namespace {

constexpr std::string_view kLastBeforeApprovals = "0005-governance";

// A project with one task (two revisions), its plans, a cron trigger with its schedule, a
// principal; and runs of every kind the release before 0006 could hold, each with its retry
// policy: cron and manual, queued, running, retried, finished, cancelled, lost, waiting for a
// retry, a retry of another run, with their attempts and events.
constexpr char kReleaseFiveData[] = R"sql(
INSERT INTO projects VALUES ('p1', 'default', 'Default', 'active', 1, 1000, 1000);
INSERT INTO task_heads VALUES ('t1', 'p1', 2, 1000, 2000);
INSERT INTO task_revisions (task_id, revision, project_id, mutation_id, name, kind, spec_json,
                            labels_json, enabled, content_digest, created_at_ms)
VALUES ('t1', 1, 'p1', 'm-t1-1', 'backup', 'shell', '{"command":"true"}', '{}', 1,
        printf('%064d', 1), 1000),
       ('t1', 2, 'p1', 'm-t1-2', 'backup', 'shell', '{"command":"false"}', '{"tier":"a"}', 1,
        printf('%064d', 2), 2000);
INSERT INTO execution_revisions VALUES
  ('x1', 'p1', 't1', 1, printf('%064d', 1), 'local_process', '{"v":1}', printf('%064d', 11), 1000),
  ('x2', 'p1', 't1', 2, printf('%064d', 2), 'local_process', '{"v":2}', printf('%064d', 12), 2000);
INSERT INTO trigger_heads VALUES ('g1', 'p1', 't1', 1, 1000, 1000);
INSERT INTO trigger_revisions VALUES ('g1', 1, 'p1', 'm-g1-1', 't1', 1, printf('%064d', 1),
  '*/5 * * * *', 'UTC', 'skip', 1, printf('%064d', 21), 1000);
INSERT INTO trigger_schedules VALUES ('g1', 'p1', 1, 9000, 8700, 3, 1000, 0, 8700);
INSERT INTO principals VALUES ('u1', 'user', 'ops', 'active', 1, 1000, 1000);
INSERT INTO runs (id, project_id, task_id, task_revision, task_digest, execution_revision_id,
                  trigger_id, trigger_revision, scheduled_for_ms, trigger_type, status, version,
                  event_sequence, priority, idempotency_key, retry_of_run_id, created_at_ms,
                  queued_at_ms, started_at_ms, finished_at_ms, retry_at_ms,
                  cancel_requested_at_ms, cancel_reason, error_code, error_summary, exit_code)
VALUES
  ('r1', 'p1', 't1', 1, printf('%064d', 1), 'x1', 'g1', 1, 3000, 'cron', 'succeeded', 7, 6, 0,
   'cron:g1:3000', NULL, 3000, 3000, 3001, 3100, NULL, NULL, NULL, NULL, NULL, 0),
  ('r2', 'p1', 't1', 2, printf('%064d', 2), 'x2', NULL, NULL, NULL, 'manual', 'failed', 5, 4, 5,
   'deploy-1', NULL, 4000, 4000, 4001, 4050, NULL, NULL, NULL, 'exit_nonzero', 'exit 1', 1),
  ('r3', 'p1', 't1', 2, printf('%064d', 2), 'x2', NULL, NULL, NULL, 'api', 'running', 3, 3, 0,
   NULL, 'r2', 5000, 5000, 5001, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
  ('r4', 'p1', 't1', 1, printf('%064d', 1), 'x1', 'g1', 1, 6000, 'cron', 'queued', 1, 2, 0,
   'cron:g1:6000', NULL, 6000, 6000, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
  ('r5', 'p1', 't1', 2, printf('%064d', 2), 'x2', NULL, NULL, NULL, 'manual', 'cancelled', 4, 3,
   -3, NULL, NULL, 6500, 6500, 6501, 6600, NULL, 6550, 'not today', 'cancelled', NULL, NULL),
  ('r6', 'p1', 't1', 1, printf('%064d', 1), 'x1', 'g1', 1, 7000, 'cron', 'retry_wait', 5, 4, 0,
   'cron:g1:7000', NULL, 7000, 7000, 7001, NULL, 7600, NULL, NULL, 'exit_nonzero', 'exit 2',
   2),
  ('r7', 'p1', 't1', 1, printf('%064d', 1), 'x1', 'g1', 1, 8000, 'cron', 'lost', 4, 3, 0,
   'cron:g1:8000', NULL, 8000, 8000, 8001, 8400, NULL, NULL, NULL, 'attempt_lost', 'gone',
   NULL);
INSERT INTO run_attempts (id, run_id, attempt, status, executor_type, callback_sequence, pid,
                          process_start_ticks, log_path, created_at_ms, started_at_ms,
                          finished_at_ms, exit_code, error_code, error_summary)
VALUES
  ('a1', 'r1', 1, 'failed', 'local_process', 2, 101, 55, 'r1/1.log', 3000, 3001, 3010, 1,
   'exit_nonzero', 'exit 1'),
  ('a2', 'r1', 2, 'succeeded', 'local_process', 2, 102, 56, 'r1/2.log', 3011, 3012, 3100, 0,
   NULL, NULL),
  ('a3', 'r2', 1, 'failed', 'local_process', 1, 103, 57, 'r2/1.log', 4000, 4001, 4050, 1,
   'exit_nonzero', 'exit 1'),
  ('a4', 'r3', 1, 'running', 'local_process', 1, 104, 58, 'r3/1.log', 5000, 5001, NULL, NULL,
   NULL, NULL),
  ('a5', 'r4', 1, 'claimed', 'local_process', 0, NULL, NULL, NULL, 6000, NULL, NULL, NULL,
   NULL, NULL),
  ('a6', 'r5', 1, 'cancelled', 'local_process', 1, 105, 59, 'r5/1.log', 6500, 6501, 6600,
   NULL, 'cancelled', NULL),
  ('a7', 'r6', 1, 'failed', 'local_process', 1, 106, 60, 'r6/1.log', 7000, 7001, 7100, 2,
   'exit_nonzero', 'exit 2'),
  ('a8', 'r7', 1, 'lost', 'local_process', 1, 107, 61, 'r7/1.log', 8000, 8001, 8400, NULL,
   'attempt_lost', 'gone');
INSERT INTO run_events VALUES
  ('r1', 1, 'run.created', 'scheduler', NULL, 'created', '{}', 3000),
  ('r1', 2, 'run.queued', 'scheduler', 'a1', NULL, '{}', 3000),
  ('r1', 3, 'run.running', 'executor', 'a1', NULL, '{"pid":101}', 3001),
  ('r1', 4, 'attempt.failed', 'executor', 'a1', 'a1:exit', '{"exit_code":1}', 3010),
  ('r1', 5, 'run.running', 'executor', 'a2', NULL, '{"pid":102}', 3012),
  ('r1', 6, 'run.succeeded', 'executor', 'a2', 'a2:exit', '{"exit_code":0}', 3100),
  ('r2', 1, 'run.created', 'user', NULL, NULL, '{}', 4000),
  ('r2', 2, 'run.queued', 'user', 'a3', NULL, '{}', 4000),
  ('r2', 3, 'run.running', 'dispatcher', 'a3', NULL, '{}', 4001),
  ('r2', 4, 'run.failed', 'executor', 'a3', NULL, '{"exit_code":1}', 4050),
  ('r3', 1, 'run.created', 'user', NULL, NULL, '{"retry_of":"r2"}', 5000),
  ('r3', 2, 'run.queued', 'user', 'a4', NULL, '{}', 5000),
  ('r3', 3, 'run.running', 'executor', 'a4', NULL, '{}', 5001),
  ('r4', 1, 'run.created', 'scheduler', NULL, NULL, '{}', 6000),
  ('r4', 2, 'run.queued', 'scheduler', 'a5', NULL, '{}', 6000),
  ('r5', 1, 'run.created', 'user', NULL, NULL, '{}', 6500),
  ('r5', 2, 'run.running', 'executor', 'a6', NULL, '{}', 6501),
  ('r5', 3, 'run.cancelled', 'user', 'a6', NULL, '{"reason":"not today"}', 6600),
  ('r6', 1, 'run.created', 'scheduler', NULL, NULL, '{}', 7000),
  ('r6', 2, 'run.queued', 'scheduler', 'a7', NULL, '{}', 7000),
  ('r6', 3, 'run.running', 'executor', 'a7', NULL, '{}', 7001),
  ('r6', 4, 'run.retry_wait', 'executor', 'a7', NULL, '{"retry_at_ms":7600}', 7100),
  ('r7', 1, 'run.created', 'scheduler', NULL, NULL, '{}', 8000),
  ('r7', 2, 'run.running', 'executor', 'a8', NULL, '{}', 8001),
  ('r7', 3, 'run.lost', 'recovery', 'a8', NULL, '{}', 8400);
INSERT INTO run_retry_policies VALUES
  ('r1', 3, 0, 'unknown', 0, 0),
  ('r2', 1, 0, 'unknown', 1000, 60000),
  ('r3', 1, 0, 'unknown', 0, 0),
  ('r4', 2, 0, 'unknown', 0, 0),
  ('r5', 1, 0, 'unknown', 0, 0),
  ('r6', 4, 1, 'idempotent', 500, 5000),
  ('r7', 2, 1, 'deduplicated', 0, 100);
)sql";

using sqlite::testing::MigrateUpTo;
using sqlite::testing::Split;

class SqliteUpgradeTest : public sqlite::testing::SqliteUpgradeFixture {};

TEST_F(SqliteUpgradeTest, ADatabaseOfTheReleaseBeforeApprovalsKeepsEveryRunAttemptAndEvent) {
  Connect();
  Status migrated = MigrateUpTo(*db_, kLastBeforeApprovals);
  ASSERT_TRUE(migrated.ok()) << migrated.ToString();
  ASSERT_EQ(Query("SELECT max(id) FROM schema_migrations"), kLastBeforeApprovals);
  ASSERT_EQ(Query("SELECT count(*) FROM sqlite_master WHERE name = 'approval_requests'"), "0");
  Status filled = db_->Transact(sqlite::TxMode::kWrite, "filling", [&](sqlite::Tx&) {
    return db_->ExecScript(kReleaseFiveData, "filling");
  });
  ASSERT_TRUE(filled.ok()) << filled.ToString();
  ASSERT_EQ(Query("PRAGMA foreign_key_check"), "");

  // What the release-five database holds, table by table, over its own columns.
  struct Table {
    std::string name;
    std::string columns;
    std::string rows;
    std::string count;
    std::string foreign_keys;
  };
  std::vector<Table> tables;
  for (const std::string& name :
       Split(Query("SELECT group_concat(name, ',') FROM (SELECT name FROM sqlite_master WHERE "
                   "type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' AND name NOT LIKE "
                   "'schema\\_%' ESCAPE '\\' ORDER BY name)"),
             ',')) {
    const std::string columns = Columns(name);
    tables.push_back(Table{name, columns, Rows(name, columns),
                           Query("SELECT count(*) FROM " + name), ForeignKeys(name)});
  }
  ASSERT_GE(tables.size(), 10u);
  const std::set<std::string> objects_before = IndexesAndTriggers();
  ASSERT_EQ(Query("SELECT count(*) FROM runs"), "7");
  ASSERT_EQ(Query("SELECT count(*) FROM run_events"), "25");

  // The store migrates it to the latest schema.
  std::unique_ptr<SqliteStore> store = UpgradeByTheStore();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(Query("SELECT max(id) FROM schema_migrations"),
            sqlite::SqliteMainStream().migrations.back().id);
  EXPECT_EQ(Query("PRAGMA integrity_check"), "ok");
  EXPECT_EQ(Query("PRAGMA foreign_key_check"), "");
  for (const Table& table : tables) {
    SCOPED_TRACE("table " + table.name);
    EXPECT_EQ(Query("SELECT count(*) FROM " + table.name), table.count);
    EXPECT_EQ(Rows(table.name, table.columns), table.rows);
    EXPECT_EQ(ForeignKeys(table.name), table.foreign_keys);
  }
  // Every index and trigger is still there, word for word, but the one 0007-retention replaces
  // on purpose (events of finished runs may be purged).
  const std::set<std::string> objects_after = IndexesAndTriggers();
  for (const std::string& object : objects_before) {
    if (object.rfind("trigger run_events_no_delete ", 0) == 0) continue;
    EXPECT_TRUE(objects_after.count(object) == 1) << "lost: " << object;
  }
  EXPECT_EQ(Query("SELECT count(*) FROM sqlite_master WHERE name = 'run_events_purge_only'"), "1");
  // The rebuilt runs table takes the new state.
  EXPECT_NE(Query("SELECT sql FROM sqlite_master WHERE name = 'runs'").find("recovery_required"),
            std::string::npos);

  // The append-only rules still hold in the database itself.
  EXPECT_FALSE(Exec("UPDATE run_events SET type = 'x' WHERE run_id = 'r1'").ok());
  EXPECT_FALSE(Exec("DELETE FROM run_events WHERE run_id = 'r3'").ok());
  EXPECT_FALSE(Exec("UPDATE task_revisions SET name = 'x' WHERE task_id = 't1'").ok());
  EXPECT_FALSE(Exec("DELETE FROM runs WHERE id = 'r4'").ok());
  EXPECT_FALSE(Exec("PRAGMA foreign_keys = ON; DELETE FROM run_attempts WHERE id = 'a4'").ok());
  EXPECT_EQ(Query("SELECT count(*) FROM run_events"), "25");

  // And the store reads the old runs as it reads its own.
  for (const char* id : {"r1", "r2", "r3", "r4", "r5", "r6", "r7"}) {
    SCOPED_TRACE("run " + std::string(id));
    Result<RunRecord> run = store->runs().GetRun(id);
    ASSERT_TRUE(run.ok()) << run.status().ToString();
    Result<std::vector<AttemptRecord>> attempts = store->runs().ListAttempts(id);
    ASSERT_TRUE(attempts.ok()) << attempts.status().ToString();
    EXPECT_FALSE(attempts->empty());
  }
  EXPECT_EQ(store->runs().GetRun("r3")->retry_of_run_id, "r2");
  EXPECT_EQ(store->runs().GetRun("r1")->status, "succeeded");
  EXPECT_EQ(store->runs().ListAttempts("r1")->size(), 2u);
  // Policies written before timeouts could be retried say they are not.
  EXPECT_FALSE(store->runs().GetRun("r6")->retry_policy.retry_on_timeout);
}

// Log paths were absolute before 0018: the upgrade keeps what follows the log root, in the
// per-attempt layout and in the per-run one before it, so a moved data directory reads its logs.
TEST_F(SqliteUpgradeTest, TheRelativeLogPathsUpgradeStripsTheLogRootOfAbsolutePaths) {
  Connect();
  ASSERT_TRUE(MigrateUpTo(*db_, kLastBeforeApprovals).ok());
  Status filled = db_->Transact(sqlite::TxMode::kWrite, "filling", [&](sqlite::Tx&) {
    return db_->ExecScript(kReleaseFiveData, "filling");
  });
  ASSERT_TRUE(filled.ok()) << filled.ToString();
  Status migrated = MigrateUpTo(*db_, "0017-retry-on-timeout", kLastBeforeApprovals);
  ASSERT_TRUE(migrated.ok()) << migrated.ToString();
  ASSERT_EQ(Query("SELECT max(id) FROM schema_migrations"), "0017-retry-on-timeout");
  ASSERT_TRUE(Exec(R"sql(
UPDATE run_attempts SET log_path = '/srv/ql/data/log/t1/r1/1.log' WHERE id = 'a1';
UPDATE run_attempts SET log_path = '/srv/ql/data/log/t1/r1/2.log' WHERE id = 'a2';
UPDATE run_attempts SET log_path = '/old place/data/log/t1/r2.log' WHERE id = 'a3';
UPDATE run_attempts SET log_path = '/elsewhere/r5.log' WHERE id = 'a6';
UPDATE run_attempts SET log_path = '/srv/ql/data/log/t1/r6/9.log' WHERE id = 'a7';
)sql")
                  .ok());

  std::unique_ptr<SqliteStore> store = UpgradeByTheStore();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(Rows("run_attempts", "id,log_path"),
            "'a1'|'t1/r1/1.log'\n"
            "'a2'|'t1/r1/2.log'\n"
            "'a3'|'t1/r2.log'\n"
            "'a4'|'r3/1.log'\n"  // already relative
            "'a5'|NULL\n"
            "'a6'|'/elsewhere/r5.log'\n"             // not a path the dispatcher wrote
            "'a7'|'/srv/ql/data/log/t1/r6/9.log'\n"  // not this attempt's file name
            "'a8'|'r7/1.log'");
  Result<std::vector<AttemptRecord>> attempts = store->runs().ListAttempts("r1");
  ASSERT_TRUE(attempts.ok()) << attempts.status().ToString();
  ASSERT_EQ(attempts->size(), 2u);
  EXPECT_EQ((*attempts)[0].log_path, "t1/r1/1.log");
  EXPECT_EQ(Query("SELECT version FROM schema_capabilities"),
            std::to_string(sqlite::ExpectedCapability().version));
}

// Names were not unique before 0011: the upgrade keeps the oldest task's name, suffixes the
// later ones with their id, names every trigger after its task, and the names are unique from
// then on.
TEST_F(SqliteUpgradeTest, TheNamesUpgradeMakesDuplicateTaskNamesUniqueAndNamesEveryTrigger) {
  Connect();
  Status migrated = MigrateUpTo(*db_, "0010-overlap");
  ASSERT_TRUE(migrated.ok()) << migrated.ToString();
  Status filled = db_->Transact(sqlite::TxMode::kWrite, "filling", [&](sqlite::Tx&) {
    return db_->ExecScript(R"sql(
INSERT INTO projects VALUES ('p1', 'default', 'Default', 'active', 1, 1000, 1000);
INSERT INTO task_heads VALUES ('t1', 'p1', 1, 1000, 1000), ('t2', 'p1', 1, 2000, 2000),
                              ('t3', 'p1', 1, 1500, 1500);
INSERT INTO task_revisions (task_id, revision, project_id, mutation_id, name, kind, spec_json,
                            labels_json, enabled, content_digest, created_at_ms)
VALUES ('t1', 1, 'p1', 'm1', 'backup', 'shell', '{}', '{}', 1, printf('%064d', 1), 1000),
       ('t2', 1, 'p1', 'm2', 'backup', 'shell', '{}', '{}', 1, printf('%064d', 2), 2000),
       ('t3', 1, 'p1', 'm3', 'report', 'shell', '{}', '{}', 1, printf('%064d', 3), 1500);
INSERT INTO trigger_heads VALUES
  ('019ca86a-3a60-7030-b07d-fbea6f6f7e52', 'p1', 't1', 1, 1000, 1000),
  ('019ca86a-3a60-7030-b07d-000000000001', 'p1', 't2', 1, 2000, 2000);
INSERT INTO trigger_revisions (trigger_id, revision, project_id, mutation_id, task_id,
                               task_revision, task_digest, expression, timezone, misfire,
                               enabled, content_digest, created_at_ms)
VALUES ('019ca86a-3a60-7030-b07d-fbea6f6f7e52', 1, 'p1', 'g1', 't1', 1, printf('%064d', 1),
        '* * * * *', 'UTC', 'skip', 1, printf('%064d', 21), 1000),
       ('019ca86a-3a60-7030-b07d-000000000001', 1, 'p1', 'g2', 't2', 1, printf('%064d', 2),
        '* * * * *', 'UTC', 'skip', 1, printf('%064d', 22), 2000);
)sql",
                           "filling");
  });
  ASSERT_TRUE(filled.ok()) << filled.ToString();

  std::unique_ptr<SqliteStore> store = UpgradeByTheStore();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(Rows("task_heads", "task_id,name,deleted_at_ms"),
            "'t1'|'backup'|NULL\n't2'|'backup-t2'|NULL\n't3'|'report'|NULL");
  EXPECT_EQ(Rows("trigger_heads", "task_id,name"),
            "'t1'|'backup-fbea6f6f7e52'\n't2'|'backup-t2-000000000001'");
  // The oldest keeps the name; the other is reachable by its new one.
  Result<std::optional<TaskHeadRecord>> backup =
      store->definitions().FindTaskByName("p1", "backup");
  ASSERT_TRUE(backup.ok()) << backup.status().ToString();
  ASSERT_TRUE(backup->has_value());
  EXPECT_EQ((*backup)->task_id, "t1");
  Result<std::optional<TriggerHeadRecord>> trigger =
      store->definitions().FindTriggerByName("p1", "backup-t2-000000000001");
  ASSERT_TRUE(trigger.ok()) << trigger.status().ToString();
  ASSERT_TRUE(trigger->has_value());
  EXPECT_EQ((*trigger)->task_id, "t2");
  // From now on the database refuses a second live holder of a name.
  EXPECT_FALSE(Exec("UPDATE task_heads SET name = 'backup' WHERE task_id = 't3'").ok());
  EXPECT_TRUE(
      Exec("UPDATE task_heads SET deleted_at_ms = 5000 WHERE task_id = 't1'; "
           "UPDATE task_heads SET name = 'backup' WHERE task_id = 't3'")
          .ok());
}

}  // namespace
}  // namespace ql
