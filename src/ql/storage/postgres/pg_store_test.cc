#include "ql/storage/postgres/pg_store.h"

#include <gtest/gtest.h>

#include <functional>
#include <latch>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ql/core/canonical_json.h"
#include "ql/core/cron.h"
#include "ql/core/digest.h"
#include "ql/core/execution_plan.h"
#include "ql/core/idempotency_key.h"
#include "ql/core/ids.h"
#include "ql/core/retention.h"
#include "ql/storage/postgres/pg_client.h"
#include "ql/storage/postgres/pg_migrations.h"
#include "ql/storage/postgres/pg_store_rows.h"
#include "ql/storage/postgres/pg_test_support.h"
#include "ql/testing/fake_clock.h"
#include "ql/testing/repository_contract.h"
#include "ql/testing/unique_index_contract.h"

namespace ql {
namespace {

using pg::testing::PgTestCluster;

constexpr char kLocal[] = "local_process";

// Options for a store on `database`: the runtime role, and the admin role unless told not to.
// Small pools: every contract test opens a store of its own.
PostgresStoreOptions StoreOptions(const std::string& database, bool with_admin = true) {
  PgTestCluster& cluster = PgTestCluster::Get();
  PostgresStoreOptions options;
  options.runtime.url = cluster.Url(pg::kRuntimeRole, database);
  options.runtime.max_connections = 3;
  if (with_admin) {
    pg::PoolOptions admin;
    admin.url = cluster.Url(pg::kAdminRole, database);
    admin.max_connections = 2;
    options.admin = admin;
  }
  return options;
}

std::unique_ptr<PostgresStore> OpenStore(const std::string& database, bool with_admin = true) {
  Result<std::unique_ptr<PostgresStore>> store =
      PostgresStore::Open(StoreOptions(database, with_admin));
  if (!store.ok()) {
    ADD_FAILURE() << store.status().ToString();
    return nullptr;
  }
  return std::move(store).value();
}

// Flips one bit in the middle of a stored artifact chunk as the superuser, with the triggers
// that keep chunks immutable switched off for that transaction only.
void CorruptChunk(Store& store, const std::string& chunk_digest) {
  auto* postgres = dynamic_cast<PostgresStore*>(&store);
  ASSERT_NE(postgres, nullptr) << "not a store of PostgresFactory";
  const std::string& url = postgres->runtime_pool().options().url;
  const size_t slash = url.rfind('/');
  ASSERT_NE(slash, std::string::npos) << url;
  const std::string database = url.substr(slash + 1, url.find('?', slash) - slash - 1);
  Result<std::string> changed = PgTestCluster::Get().server().Psql(
      database,
      "BEGIN;\nSET LOCAL session_replication_role = replica;\n"
      "UPDATE ql3.artifact_chunks SET bytes = set_byte(bytes, length(bytes) / 2, "
      "get_byte(bytes, length(bytes) / 2) # 1) WHERE digest = '" +
          chunk_digest + "' RETURNING 'changed';\nCOMMIT;\n");
  ASSERT_TRUE(changed.ok()) << changed.status().ToString();
  EXPECT_EQ(*changed, "changed\n") << "no chunk " << chunk_digest;
}

testing::StoreFactory PostgresFactory() {
  return testing::StoreFactory{
      .name = "postgres",
      .make = []() -> std::unique_ptr<Store> {
        return OpenStore(PgTestCluster::Get().NewDatabase());
      },
      .database_clock_ms = []() -> int64_t {
        Result<std::string> now = PgTestCluster::Get().server().Psql(
            "postgres", "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint");
        EXPECT_TRUE(now.ok()) << now.status().ToString();
        return now.ok() ? std::stoll(*now) : 0;
      },
      .corrupt_chunk = CorruptChunk};
}

}  // namespace
}  // namespace ql

QL_INSTANTIATE_REPOSITORY_CONTRACT(Postgres, ::ql::PostgresFactory());

namespace ql {
namespace {

::testing::AssertionResult HasError(const Status& status, StatusCode code,
                                    std::string_view reason) {
  if (status.code() == code && status.reason() == reason) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "expected " << StatusCodeName(code) << " / " << reason << ", got " << status.ToString();
}

template <typename T>
::testing::AssertionResult HasError(const Result<T>& result, StatusCode code,
                                    std::string_view reason) {
  return HasError(result.status(), code, reason);
}

// Runs `first` and `second` on two threads released together, and waits for both.
void RunTogether(const std::function<void()>& first, const std::function<void()>& second) {
  std::latch start(2);
  std::thread a([&] {
    start.arrive_and_wait();
    first();
  });
  std::thread b([&] {
    start.arrive_and_wait();
    second();
  });
  a.join();
  b.join();
}

constexpr int kRounds = 20;

// Two stores (two pools each) on one fresh database, and builders for valid commands.
class PgStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    database_ = PgTestCluster::Get().NewDatabase();
    a_ = OpenStore(database_);
    b_ = OpenStore(database_);
    ASSERT_NE(a_, nullptr);
    ASSERT_NE(b_, nullptr);
    Result<ProjectRecord> project =
        a_->EnsureProject(NewId(), kDefaultProjectSlug, "Default", Now());
    ASSERT_TRUE(project.ok()) << project.status().ToString();
    project_ = *project;
  }

  int64_t Now() const { return clock_.NowMs(); }
  // One reading of the database clock.
  int64_t DbNowMs() {
    return std::stoll(
        Psql("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint"));
  }
  std::string NewId() { return NewUuidV7(clock_.NowMs(), random_); }
  std::string Psql(const std::string& sql) {
    Result<std::string> out = PgTestCluster::Get().server().Psql(database_, sql);
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    return out.ok() ? *out : "";
  }

  PublishTaskCommand TaskCommand(const std::string& task_id, std::optional<int64_t> expected,
                                 const std::string& name) {
    PublishTaskCommand cmd;
    cmd.project_id = project_.id;
    cmd.task_id = task_id;
    cmd.expected_revision = expected;
    cmd.mutation_id = NewId();
    cmd.now_ms = Now();
    const int64_t revision = expected.value_or(0) + 1;
    TaskRevisionRecord& r = cmd.revision;
    r.name = name;
    r.kind = "qinglong/command@v1";
    r.spec_json = internal::CanonicalJsonLossy(
        {{"command", {{"command", "echo " + name}, {"kind", "shell"}, {"shell", "/bin/sh"}}},
         {"timeoutMs", 60000}});
    r.labels_json = "{}";
    r.enabled = true;
    r.content_digest = Sha256Hex(r.kind + "\n" + r.name + "\n" + r.spec_json);
    ExecutionRevisionRecord exec;
    exec.executor_type = kLocal;
    exec.task_digest = r.content_digest;
    exec.plan_json = internal::CanonicalJsonLossy({{"executorType", kLocal},
                                                   {"taskDigest", r.content_digest},
                                                   {"taskId", task_id},
                                                   {"taskRevision", revision}});
    exec.plan_digest = Sha256Hex(exec.plan_json);
    exec.id = ExecutionRevisionId(revision, exec.plan_digest);
    cmd.executions.push_back(exec);
    return cmd;
  }

  TaskRevisionRecord PublishTask(const std::string& name) {
    Result<PublishTaskResult> published =
        a_->PublishTaskRevision(TaskCommand(NewId(), std::nullopt, name));
    EXPECT_TRUE(published.ok()) << published.status().ToString();
    return published.ok() ? published->revision : TaskRevisionRecord{};
  }

  PublishTriggerCommand TriggerCommand(const std::string& trigger_id,
                                       std::optional<int64_t> expected,
                                       const TaskRevisionRecord& task) {
    PublishTriggerCommand cmd;
    cmd.project_id = project_.id;
    cmd.trigger_id = trigger_id;
    cmd.expected_revision = expected;
    cmd.mutation_id = NewId();
    cmd.now_ms = Now();
    if (!expected.has_value()) cmd.name = "trigger-" + trigger_id;
    TriggerRevisionRecord& r = cmd.revision;
    r.task_id = task.task_id;
    r.task_revision = task.revision;
    r.task_digest = task.content_digest;
    r.expression = "* * * * *";
    r.timezone = "UTC";
    r.misfire = "skip";
    r.enabled = true;
    r.content_digest = Sha256Hex(trigger_id + std::to_string(expected.value_or(0)));
    return cmd;
  }

  NewRun ManualRun(const TaskRevisionRecord& task) {
    NewRun run;
    run.run_id = NewId();
    run.attempt_id = NewId();
    run.project_id = task.project_id;
    run.task_id = task.task_id;
    run.task_revision = task.revision;
    run.task_digest = task.content_digest;
    run.execution_revision_id = ExecutionRevisionId(
        task.revision, Sha256Hex(internal::CanonicalJsonLossy({{"executorType", kLocal},
                                                               {"taskDigest", task.content_digest},
                                                               {"taskId", task.task_id},
                                                               {"taskRevision", task.revision}})));
    run.executor_type = kLocal;
    run.trigger_type = "manual";
    run.actor_type = "user";
    run.now_ms = Now();
    return run;
  }

  // The due row of `trigger_id` at `now_ms` as store A lists it.
  std::optional<DueSchedule> DueRow(const std::string& trigger_id, int64_t now_ms) {
    Result<std::vector<DueSchedule>> due = a_->ListDueSchedules(now_ms, 1000);
    EXPECT_TRUE(due.ok()) << due.status().ToString();
    if (!due.ok()) return std::nullopt;
    for (DueSchedule& row : *due) {
      if (row.schedule.trigger_id == trigger_id) return std::move(row);
    }
    return std::nullopt;
  }

  ScheduleAdvance MoveCursor(const DueSchedule& due, int64_t cursor) {
    ScheduleAdvance advance;
    advance.trigger_id = due.schedule.trigger_id;
    advance.expected_trigger_revision = due.schedule.trigger_revision;
    advance.expected_state_version = due.schedule.state_version;
    advance.expected_next_fire_at_ms = due.schedule.next_fire_at_ms;
    advance.expected_task_revision = due.trigger.task_revision;
    advance.expected_task_digest = due.trigger.task_digest;
    advance.new_next_fire_at_ms = cursor;
    advance.now_ms = Now();
    return advance;
  }

  // The next fire time of `due`'s trigger revision after its cursor: the cursor the scheduler
  // stores when it admits that occurrence inside its grace.
  static int64_t NextAfterCursor(const DueSchedule& due) {
    Result<int64_t> next = NextFire(due.trigger.expression, due.trigger.timezone,
                                    due.schedule.next_fire_at_ms.value_or(0));
    EXPECT_TRUE(next.ok()) << next.status().ToString();
    return next.ok() ? *next : 0;
  }

  // Admits the occurrence at `due`'s cursor with a run of its own ids.
  ScheduleAdvance Admit(const DueSchedule& due, const TaskRevisionRecord& task,
                        int64_t next_cursor) {
    ScheduleAdvance advance = MoveCursor(due, next_cursor);
    NewRun run = ManualRun(task);
    run.trigger_type = "cron";
    run.actor_type = "scheduler";
    run.trigger_id = due.schedule.trigger_id;
    run.trigger_revision = due.schedule.trigger_revision;
    run.scheduled_for_ms = due.schedule.next_fire_at_ms;
    run.idempotency_key = CronIdempotencyKey(due.schedule.trigger_id, due.schedule.trigger_revision,
                                             due.schedule.next_fire_at_ms.value_or(0));
    advance.run = std::move(run);
    return advance;
  }

  std::string database_;
  std::unique_ptr<PostgresStore> a_;
  std::unique_ptr<PostgresStore> b_;
  ProjectRecord project_;
  testing::FakeClock clock_;
  testing::SeededRandom random_{424242};
};

// ---------------------------------------------------------------------------------------------
// Two connections racing on one resource

TEST_F(PgStoreTest, ConcurrentTransitionsOfOneVersionHaveExactlyOneWinner) {
  TaskRevisionRecord task = PublishTask("job");
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    Result<RunRecord> queued = a_->CreateRun(ManualRun(task));
    ASSERT_TRUE(queued.ok()) << queued.status().ToString();
    Result<std::vector<AttemptRecord>> attempts = a_->ListAttempts(queued->id);
    ASSERT_TRUE(attempts.ok()) << attempts.status().ToString();
    RunTransitionCommand dispatch;
    dispatch.run_id = queued->id;
    dispatch.expected_version = queued->version;
    dispatch.run_to = "dispatching";
    dispatch.attempt_id = attempts->front().id;
    dispatch.expected_attempt_status = "claimed";
    dispatch.attempt_to = "starting";
    dispatch.events = {
        NewEvent{"run.dispatching", "dispatcher", attempts->front().id, std::nullopt, "{}"}};
    dispatch.now_ms = Now();

    std::optional<Result<RunRecord>> from_a;
    std::optional<Result<RunRecord>> from_b;
    RunTogether([&] { from_a = a_->ApplyTransition(dispatch); },
                [&] { from_b = b_->ApplyTransition(dispatch); });
    ASSERT_NE(from_a->ok(), from_b->ok())
        << from_a->status().ToString() << " / " << from_b->status().ToString();
    const Result<RunRecord>& loser = from_a->ok() ? *from_b : *from_a;
    EXPECT_TRUE(HasError(loser, StatusCode::kConflict, "version_conflict"));

    Result<RunRecord> after = a_->GetRun(queued->id);
    ASSERT_TRUE(after.ok()) << after.status().ToString();
    EXPECT_EQ(after->status, "dispatching");
    EXPECT_EQ(after->version, queued->version + 1);
    EXPECT_EQ(after->event_sequence, queued->event_sequence + 1);
    Result<std::vector<EventRecord>> events = a_->ListEvents(queued->id, 0, 100);
    ASSERT_TRUE(events.ok()) << events.status().ToString();
    EXPECT_EQ(events->size(), 3u);
  }
}

TEST_F(PgStoreTest, TheDatabaseRefusesASecondRunOfOneCronOccurrence) {
  TaskRevisionRecord task = PublishTask("keyed job");
  const std::string trigger_id = NewId();
  ASSERT_TRUE(a_->PublishTriggerRevision(TriggerCommand(trigger_id, std::nullopt, task)).ok());
  std::optional<DueSchedule> fresh = DueRow(trigger_id, Now());
  ASSERT_TRUE(fresh.has_value());
  const int64_t fire = Now() + 60'000;
  ASSERT_TRUE(a_->ApplyScheduleAdvance(MoveCursor(*fresh, fire)).ok());
  std::optional<DueSchedule> due = DueRow(trigger_id, fire);
  ASSERT_TRUE(due.has_value());
  ScheduleAdvance admit = Admit(*due, task, NextAfterCursor(*due));
  ASSERT_TRUE(a_->ApplyScheduleAdvance(admit).ok());
  // A cron run stores no key: it is rebuilt from the occurrence when read.
  EXPECT_EQ(Psql("SELECT idempotency_key IS NULL FROM ql3.runs WHERE id = '" +
                 admit.run->run_id + "'"),
            "t\n");
  Result<RunRecord> run = a_->GetRun(admit.run->run_id);
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->idempotency_key, admit.run->idempotency_key);
  Result<RunRecord> found =
      a_->FindRunByIdempotencyKey(project_.id, *admit.run->idempotency_key);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(found->id, admit.run->run_id);
  // The runtime role may write runs, but not a second run of the occurrence (the unique index
  // runs_cron_occurrence_key), nor a stored key on a cron run.
  Result<std::unique_ptr<pg::Connection>> conn =
      pg::Connection::Open(PgTestCluster::Get().Url(pg::kRuntimeRole, database_), {});
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  Result<pg::Rows> copied = (*conn)->Exec(
      "INSERT INTO ql3.runs (id, project_id, task_id, task_revision, task_digest, "
      "execution_revision_id, trigger_id, trigger_revision, scheduled_for_ms, trigger_type, "
      "status, version, event_sequence, priority, created_at_ms, retry_max_attempts, "
      "retry_on_lost, retry_safety, retry_backoff_base_ms, retry_backoff_max_ms) SELECT $2, "
      "project_id, task_id, task_revision, task_digest, execution_revision_id, trigger_id, "
      "trigger_revision, scheduled_for_ms, trigger_type, status, version, event_sequence, "
      "priority, created_at_ms, retry_max_attempts, retry_on_lost, retry_safety, "
      "retry_backoff_base_ms, retry_backoff_max_ms FROM ql3.runs WHERE id = $1",
      {pg::P(admit.run->run_id), pg::P(NewId())}, "copying a run");
  ASSERT_FALSE(copied.ok());
  EXPECT_EQ(copied.status().code(), StatusCode::kDuplicate);
  EXPECT_EQ(copied.status().reason(), "idempotency_key_duplicate");
  Result<pg::Rows> keyed = (*conn)->Exec(
      "UPDATE ql3.runs SET idempotency_key = 'other' WHERE id = $1", {pg::P(admit.run->run_id)},
      "storing a key");
  ASSERT_FALSE(keyed.ok());
  EXPECT_EQ(keyed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(keyed.status().reason(), "cron_key_stored");
}

// Each partial unique index of the schema (schema_contract.txt), violated for real: a copy of a
// row that the index holds, with a new primary key, is refused with the stable code the
// repository contract expects of both stores (testing::kConditionalUniqueIndexes), naming the
// index; the same copy moved outside the index's predicate is accepted. Every partial unique
// index of the contract has a case here, so a new one cannot be left out.
TEST_F(PgStoreTest, EveryPartialUniqueIndexMapsItsViolationToTheContractsCode) {
  // The rows the indexes hold: a live task and trigger, a run with a client key, a cron run, an
  // event with a dedupe key, a live notification channel.
  const TaskRevisionRecord task = PublishTask("named job");
  const std::string trigger_id = NewId();
  ASSERT_TRUE(a_->PublishTriggerRevision(TriggerCommand(trigger_id, std::nullopt, task)).ok());
  NewRun keyed = ManualRun(task);
  keyed.idempotency_key = "client-key";
  ASSERT_TRUE(a_->CreateRun(keyed).ok());
  // The cron run is the keyed run made an occurrence of the trigger (a cron run stores no key).
  const std::string cron_run_id = NewId();
  const std::string channel_id = NewId();
  Psql("INSERT INTO ql3.runs SELECT (jsonb_populate_record(r, jsonb_build_object('id', '" +
       cron_run_id + "', 'trigger_type', 'cron', 'trigger_id', '" + trigger_id +
       "', 'trigger_revision', 1, 'scheduled_for_ms', 60000, 'idempotency_key', NULL))).* "
       "FROM ql3.runs r WHERE id = '" +
       keyed.run_id +
       "';"
       "INSERT INTO ql3.run_events SELECT (jsonb_populate_record(e, jsonb_build_object("
       "'sequence', 100, 'dedupe_key', 'once'))).* FROM ql3.run_events e WHERE run_id = '" +
       keyed.run_id +
       "' AND sequence = 1;"
       "INSERT INTO ql3.notification_channels (id, project_id, name, type, config_json, "
       "created_by, created_at_ms) VALUES ('" +
       channel_id + "', '" + project_.id + "', 'ops', 'webhook', '{}', 'test', 1)");

  // For each index: the table, which row to copy, what makes the copy a second entry of the
  // index (a new primary key) and what moves it outside the index's predicate.
  struct Case {
    std::string table;
    std::string row;  // a WHERE clause on alias t
    std::string duplicate;
    std::string outside;
  };
  const std::string copy_id = NewId();
  // A JSON object setting `key` to the copy's id, followed by `more` members.
  auto id = [&](const std::string& key, const std::string& more = "") {
    return "{\"" + key + "\": \"" + copy_id + "\"" + more + "}";
  };
  const std::map<std::string, Case> cases = {
      {"runs_idempotency_key_key",
       {"runs", "t.id = '" + keyed.run_id + "'", id("id"),
        id("id", ", \"idempotency_key\": null")}},
      {"runs_cron_occurrence_key",
       {"runs", "t.id = '" + cron_run_id + "'", id("id"),
        id("id", ", \"trigger_type\": \"manual\"")}},
      {"run_events_dedupe_key_key",
       {"run_events", "t.run_id = '" + keyed.run_id + "' AND t.sequence = 100",
        "{\"sequence\": 101}", "{\"sequence\": 101, \"dedupe_key\": null}"}},
      {"task_heads_live_name",
       {"task_heads", "t.task_id = '" + task.task_id + "'", id("task_id"),
        id("task_id", ", \"deleted_at_ms\": 1")}},
      {"trigger_heads_live_name",
       {"trigger_heads", "t.trigger_id = '" + trigger_id + "'", id("trigger_id"),
        id("trigger_id", ", \"deleted_at_ms\": 1")}},
      {"notification_channels_live_name",
       {"notification_channels", "t.id = '" + channel_id + "'", id("id"),
        id("id", ", \"deleted_at_ms\": 1")}},
  };

  // Every partial unique index of the contract has its case and its expected code.
  std::string_view contract;
  for (const pg::EmbeddedSql& file : pg::EmbeddedMigrationFiles()) {
    if (file.id == "schema_contract") contract = file.sql;
  }
  std::set<std::string> partial;
  std::istringstream lines{std::string(contract)};
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::string kind, name, create, unique;
    fields >> kind >> name >> create >> unique;
    if (kind == "index" && unique == "UNIQUE" && line.find(" WHERE ") != std::string::npos) {
      partial.insert(name);
    }
  }
  std::set<std::string> covered, expected;
  for (const auto& [index, c] : cases) covered.insert(index);
  for (const testing::ConditionalUniqueIndex& index : testing::kConditionalUniqueIndexes) {
    expected.insert(std::string(index.postgres_index));
  }
  EXPECT_EQ(covered, partial) << "a partial unique index of the contract without a case here";
  EXPECT_EQ(expected, partial) << "a partial unique index without an expected code";

  // Each copy runs in a transaction of its own, rolled back: the rows stay as they are (and a
  // deferred foreign key of a copied head is never checked).
  Result<std::unique_ptr<pg::Connection>> conn =
      pg::Connection::Open(PgTestCluster::Get().Url(pg::kMigrationRole, database_), {});
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  auto copy = [&](const Case& c, const std::string& overrides) -> Status {
    if (Status st = (*conn)->ExecScript("BEGIN", "begin"); !st.ok()) return st;
    Result<pg::Rows> inserted = (*conn)->Exec(
        "INSERT INTO ql3." + c.table + " SELECT (jsonb_populate_record(t, $1::jsonb)).* FROM ql3." +
            c.table + " t WHERE " + c.row,
        {pg::P(overrides)}, "copying a row");
    Status rollback = (*conn)->ExecScript("ROLLBACK", "rollback");
    if (!inserted.ok()) return inserted.status();
    if (inserted->affected() != 1)
      return Internal("no_row", "copied " + std::to_string(inserted->affected()));
    return rollback;
  };
  for (const testing::ConditionalUniqueIndex& index : testing::kConditionalUniqueIndexes) {
    SCOPED_TRACE(std::string(index.postgres_index));
    auto c = cases.find(std::string(index.postgres_index));
    ASSERT_NE(c, cases.end());
    const Status refused = copy(c->second, c->second.duplicate);
    EXPECT_TRUE(HasError(refused, index.code, index.reason));
    EXPECT_NE(refused.message().find(index.postgres_index), std::string::npos)
        << refused.ToString();
    const Status outside = copy(c->second, c->second.outside);
    EXPECT_TRUE(outside.ok()) << outside.ToString();
  }
}

TEST_F(PgStoreTest, ConcurrentAdmissionsOfOneOccurrenceAdmitExactlyOneRun) {
  TaskRevisionRecord task = PublishTask("cron job");
  const std::string trigger_id = NewId();
  ASSERT_TRUE(a_->PublishTriggerRevision(TriggerCommand(trigger_id, std::nullopt, task)).ok());
  std::optional<DueSchedule> fresh = DueRow(trigger_id, Now());
  ASSERT_TRUE(fresh.has_value());
  int64_t fire = Now() + 60'000;
  Result<AdvanceOutcome> initialised = a_->ApplyScheduleAdvance(MoveCursor(*fresh, fire));
  ASSERT_TRUE(initialised.ok()) << initialised.status().ToString();

  const int64_t far = Now() + 365LL * 24 * 3600 * 1000;
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    std::optional<DueSchedule> due = DueRow(trigger_id, far);
    ASSERT_TRUE(due.has_value());
    ASSERT_EQ(due->schedule.next_fire_at_ms, fire);
    ScheduleAdvance first = Admit(*due, task, NextAfterCursor(*due));
    ScheduleAdvance second = Admit(*due, task, NextAfterCursor(*due));
    ASSERT_EQ(first.run->idempotency_key, second.run->idempotency_key);
    ASSERT_NE(first.run->run_id, second.run->run_id);

    std::optional<Result<AdvanceOutcome>> from_a;
    std::optional<Result<AdvanceOutcome>> from_b;
    RunTogether([&] { from_a = a_->ApplyScheduleAdvance(first); },
                [&] { from_b = b_->ApplyScheduleAdvance(second); });
    ASSERT_TRUE(from_a->ok()) << from_a->status().ToString();
    ASSERT_TRUE(from_b->ok()) << from_b->status().ToString();
    ASSERT_NE(**from_a, **from_b);  // one kApplied, one kRaced

    Result<RunRecord> admitted =
        a_->FindRunByIdempotencyKey(project_.id, *first.run->idempotency_key);
    ASSERT_TRUE(admitted.ok()) << admitted.status().ToString();
    const ScheduleAdvance& winner = **from_a == AdvanceOutcome::kApplied ? first : second;
    const ScheduleAdvance& loser = **from_a == AdvanceOutcome::kApplied ? second : first;
    EXPECT_EQ(admitted->id, winner.run->run_id);
    EXPECT_TRUE(HasError(a_->GetRun(loser.run->run_id), StatusCode::kNotFound, "run_not_found"));
    RunFilter by_trigger;
    by_trigger.trigger_id = trigger_id;
    PageRequest page;
    page.limit = 1000;
    Result<Page<RunRecord>> runs = a_->ListRuns(by_trigger, page);
    ASSERT_TRUE(runs.ok()) << runs.status().ToString();
    EXPECT_EQ(runs->items.size(), static_cast<size_t>(round + 1));

    Result<ScheduleRecord> schedule = a_->GetSchedule(trigger_id);
    ASSERT_TRUE(schedule.ok()) << schedule.status().ToString();
    EXPECT_EQ(schedule->state_version, due->schedule.state_version + 1);
    EXPECT_EQ(schedule->last_scheduled_at_ms, fire);
    fire += 60'000;
  }
}

TEST_F(PgStoreTest, AnAdmissionRacingATriggerPublishIsAppliedFirstOrRaced) {
  TaskRevisionRecord task = PublishTask("cron job");
  const std::string trigger_id = NewId();
  ASSERT_TRUE(a_->PublishTriggerRevision(TriggerCommand(trigger_id, std::nullopt, task)).ok());
  const int64_t far = Now() + 365LL * 24 * 3600 * 1000;
  int applied = 0;
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const int64_t revision = round + 1;
    // Initialise the cursor of the current revision, then race its first occurrence against
    // the publication of the next revision.
    std::optional<DueSchedule> fresh = DueRow(trigger_id, Now());
    ASSERT_TRUE(fresh.has_value());
    ASSERT_EQ(fresh->schedule.trigger_revision, revision);
    const int64_t fire = Now() + 1000 * (round + 1);
    Result<AdvanceOutcome> initialised = a_->ApplyScheduleAdvance(MoveCursor(*fresh, fire));
    ASSERT_TRUE(initialised.ok()) << initialised.status().ToString();
    std::optional<DueSchedule> due = DueRow(trigger_id, far);
    ASSERT_TRUE(due.has_value());
    ScheduleAdvance admit = Admit(*due, task, NextAfterCursor(*due));
    PublishTriggerCommand next = TriggerCommand(trigger_id, revision, task);

    std::optional<Result<AdvanceOutcome>> advanced;
    std::optional<Result<PublishTriggerResult>> published;
    RunTogether([&] { advanced = a_->ApplyScheduleAdvance(admit); },
                [&] { published = b_->PublishTriggerRevision(next); });
    ASSERT_TRUE(advanced->ok()) << advanced->status().ToString();
    ASSERT_TRUE(published->ok()) << published->status().ToString();
    EXPECT_EQ((*published)->revision.revision, revision + 1);

    Result<RunRecord> run = a_->GetRun(admit.run->run_id);
    Result<ScheduleRecord> schedule = a_->GetSchedule(trigger_id);
    ASSERT_TRUE(schedule.ok()) << schedule.status().ToString();
    EXPECT_EQ(schedule->trigger_revision, revision + 1);
    EXPECT_FALSE(schedule->next_fire_at_ms.has_value());
    if (**advanced == AdvanceOutcome::kApplied) {
      ++applied;
      ASSERT_TRUE(run.ok()) << run.status().ToString();
      EXPECT_EQ(run->trigger_revision, revision);
      EXPECT_EQ(schedule->state_version, due->schedule.state_version + 2);
    } else {
      EXPECT_TRUE(HasError(run, StatusCode::kNotFound, "run_not_found"));
      EXPECT_EQ(schedule->state_version, due->schedule.state_version + 1);
    }
  }
  RunFilter by_trigger;
  by_trigger.trigger_id = trigger_id;
  PageRequest page;
  page.limit = 1000;
  Result<Page<RunRecord>> runs = a_->ListRuns(by_trigger, page);
  ASSERT_TRUE(runs.ok()) << runs.status().ToString();
  EXPECT_EQ(runs->items.size(), static_cast<size_t>(applied));
}

TEST_F(PgStoreTest, ConcurrentCreatesWithOneIdempotencyKeyCreateOneRun) {
  TaskRevisionRecord task = PublishTask("job");
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    NewRun first = ManualRun(task);
    NewRun second = ManualRun(task);
    first.idempotency_key = second.idempotency_key = "client-key-" + std::to_string(round);

    std::optional<Result<RunRecord>> from_a;
    std::optional<Result<RunRecord>> from_b;
    RunTogether([&] { from_a = a_->CreateRun(first); }, [&] { from_b = b_->CreateRun(second); });
    ASSERT_NE(from_a->ok(), from_b->ok())
        << from_a->status().ToString() << " / " << from_b->status().ToString();
    const Result<RunRecord>& winner = from_a->ok() ? *from_a : *from_b;
    const Result<RunRecord>& loser = from_a->ok() ? *from_b : *from_a;
    EXPECT_TRUE(HasError(loser, StatusCode::kDuplicate, "idempotency_key_duplicate"));

    Result<RunRecord> found = b_->FindRunByIdempotencyKey(project_.id, *first.idempotency_key);
    ASSERT_TRUE(found.ok()) << found.status().ToString();
    EXPECT_EQ(found->id, winner->id);
  }
  Result<std::vector<std::pair<std::string, int64_t>>> counts = a_->CountRunsByStatus(std::nullopt);
  ASSERT_TRUE(counts.ok()) << counts.status().ToString();
  ASSERT_EQ(counts->size(), 1u);
  EXPECT_EQ(counts->front(), std::make_pair(std::string("queued"), int64_t{kRounds}));
}

TEST_F(PgStoreTest, ConcurrentPublishesOfOneExpectedRevisionHaveExactlyOneWinner) {
  const std::string task_id = NewId();
  ASSERT_TRUE(a_->PublishTaskRevision(TaskCommand(task_id, std::nullopt, "v1")).ok());
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const int64_t expected = round + 1;
    PublishTaskCommand first = TaskCommand(task_id, expected, "a" + std::to_string(round));
    PublishTaskCommand second = TaskCommand(task_id, expected, "b" + std::to_string(round));

    std::optional<Result<PublishTaskResult>> from_a;
    std::optional<Result<PublishTaskResult>> from_b;
    RunTogether([&] { from_a = a_->PublishTaskRevision(first); },
                [&] { from_b = b_->PublishTaskRevision(second); });
    ASSERT_NE(from_a->ok(), from_b->ok())
        << from_a->status().ToString() << " / " << from_b->status().ToString();
    const Result<PublishTaskResult>& winner = from_a->ok() ? *from_a : *from_b;
    const Result<PublishTaskResult>& loser = from_a->ok() ? *from_b : *from_a;
    EXPECT_TRUE(HasError(loser, StatusCode::kConflict, "revision_conflict"));
    EXPECT_FALSE(winner->replayed);
    EXPECT_EQ(winner->revision.revision, expected + 1);

    Result<TaskHeadRecord> head = a_->GetTaskHead(task_id);
    ASSERT_TRUE(head.ok()) << head.status().ToString();
    EXPECT_EQ(head->current_revision, expected + 1);
    Result<TaskRevisionRecord> stored = a_->GetTaskRevision(task_id, expected + 1);
    ASSERT_TRUE(stored.ok()) << stored.status().ToString();
    EXPECT_EQ(stored->name, winner->revision.name);
  }
  Result<std::vector<TaskRevisionRecord>> history = a_->ListTaskRevisions(task_id);
  ASSERT_TRUE(history.ok()) << history.status().ToString();
  EXPECT_EQ(history->size(), static_cast<size_t>(kRounds + 1));
}

// Two tasks created at once under one name: the partial unique index over live names lets
// exactly one in; the other writes nothing and is told the name is taken, whichever statement of
// it met the winner (the insert waiting on the index, or the check after it).
TEST_F(PgStoreTest, ConcurrentCreatesOfTwoTasksUnderOneNameLeaveOneTask) {
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const std::string name = "twin-" + std::to_string(round);
    PublishTaskCommand first = TaskCommand(NewId(), std::nullopt, name);
    PublishTaskCommand second = TaskCommand(NewId(), std::nullopt, name);
    std::optional<Result<PublishTaskResult>> from_a;
    std::optional<Result<PublishTaskResult>> from_b;
    RunTogether([&] { from_a = a_->PublishTaskRevision(first); },
                [&] { from_b = b_->PublishTaskRevision(second); });
    ASSERT_NE(from_a->ok(), from_b->ok())
        << from_a->status().ToString() << " / " << from_b->status().ToString();
    const Result<PublishTaskResult>& loser = from_a->ok() ? *from_b : *from_a;
    EXPECT_TRUE(HasError(loser, StatusCode::kDuplicate, "name_duplicate"));
    const std::string& lost = from_a->ok() ? second.task_id : first.task_id;
    EXPECT_EQ(a_->GetTaskHead(lost).status().reason(), "task_not_found");
    Result<std::optional<TaskHeadRecord>> holder = a_->FindTaskByName(project_.id, name);
    ASSERT_TRUE(holder.ok() && holder->has_value());
    EXPECT_EQ((*holder)->task_id, from_a->ok() ? first.task_id : second.task_id);
  }
}

TEST_F(PgStoreTest, ConcurrentCreatesOfOneTaskAreOneRevisionAndAReplayOrADuplicate) {
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const std::string task_id = NewId();
    // Each round its own task, so its own name (names are unique among live tasks).
    const std::string name = "same-" + std::to_string(round);
    PublishTaskCommand first = TaskCommand(task_id, std::nullopt, name);
    // Even rounds: one request sent twice (a client retry); odd rounds: two clients.
    const bool same_request = round % 2 == 0;
    PublishTaskCommand second = same_request ? first : TaskCommand(task_id, std::nullopt, name);

    std::optional<Result<PublishTaskResult>> from_a;
    std::optional<Result<PublishTaskResult>> from_b;
    RunTogether([&] { from_a = a_->PublishTaskRevision(first); },
                [&] { from_b = b_->PublishTaskRevision(second); });
    if (same_request) {
      ASSERT_TRUE(from_a->ok()) << from_a->status().ToString();
      ASSERT_TRUE(from_b->ok()) << from_b->status().ToString();
      EXPECT_NE((*from_a)->replayed, (*from_b)->replayed);
      EXPECT_EQ((*from_a)->revision.mutation_id, (*from_b)->revision.mutation_id);
    } else {
      ASSERT_NE(from_a->ok(), from_b->ok())
          << from_a->status().ToString() << " / " << from_b->status().ToString();
      const Result<PublishTaskResult>& loser = from_a->ok() ? *from_b : *from_a;
      EXPECT_TRUE(HasError(loser, StatusCode::kDuplicate, "duplicate_id"));
    }
    Result<std::vector<TaskRevisionRecord>> history = a_->ListTaskRevisions(task_id);
    ASSERT_TRUE(history.ok()) << history.status().ToString();
    EXPECT_EQ(history->size(), 1u);
  }
}

// ---------------------------------------------------------------------------------------------
// Roles

TEST_F(PgStoreTest, WithoutTheAdminPoolManagementWritesAreUnavailable) {
  std::unique_ptr<PostgresStore> runtime_only = OpenStore(database_, /*with_admin=*/false);
  ASSERT_NE(runtime_only, nullptr);
  EXPECT_EQ(runtime_only->admin_pool(), nullptr);
  EXPECT_NE(a_->admin_pool(), nullptr);

  PublishTaskCommand cmd = TaskCommand(NewId(), std::nullopt, "job");
  Result<PublishTaskResult> refused = runtime_only->PublishTaskRevision(cmd);
  EXPECT_TRUE(HasError(refused, StatusCode::kUnavailable, "admin_pool_missing"));
  EXPECT_NE(refused.status().message().find("--admin-database-url"), std::string::npos)
      << refused.status().message();
  EXPECT_TRUE(
      HasError(runtime_only->GetTaskHead(cmd.task_id), StatusCode::kNotFound, "task_not_found"));

  TaskRevisionRecord task = PublishTask("published by the admin");
  EXPECT_TRUE(
      HasError(runtime_only->PublishTriggerRevision(TriggerCommand(NewId(), std::nullopt, task)),
               StatusCode::kUnavailable, "admin_pool_missing"));
  // An existing project is found through the runtime role; a new one needs the admin role.
  Result<ProjectRecord> existing =
      runtime_only->EnsureProject(NewId(), kDefaultProjectSlug, "Default", Now());
  ASSERT_TRUE(existing.ok()) << existing.status().ToString();
  EXPECT_EQ(existing->id, project_.id);
  EXPECT_TRUE(HasError(runtime_only->EnsureProject(NewId(), "second", "Second", Now()),
                       StatusCode::kUnavailable, "admin_pool_missing"));
  // Runs need only the runtime role.
  Result<RunRecord> run = runtime_only->CreateRun(ManualRun(task));
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_EQ(run->status, "queued");
}

TEST_F(PgStoreTest, TheRuntimeRoleCannotWriteDefinitionsDeleteOrCreate) {
  Result<std::unique_ptr<pg::Connection>> conn =
      pg::Connection::Open(PgTestCluster::Get().Url(pg::kRuntimeRole, database_), {});
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  auto refused = [&](const std::string& sql) {
    SCOPED_TRACE(sql);
    Result<pg::Rows> rows = (*conn)->Exec(sql, {}, "probing a privilege");
    EXPECT_TRUE(HasError(rows, StatusCode::kInternal, "insufficient_privilege"));
  };
  refused(
      "INSERT INTO trigger_schedules (trigger_id, project_id, trigger_revision, enabled, "
      "state_version, published_at_ms, exhausted, claim_version, updated_at_ms) "
      "VALUES ('t', 'p', 1, true, 1, 0, false, 0, 0)");
  // DELETE exists only on run history, for the retention purge.
  refused("DELETE FROM task_heads");
  refused("DELETE FROM trigger_schedules");
  refused("DELETE FROM security_audit");
  refused("UPDATE task_heads SET updated_at_ms = 0");
  refused("INSERT INTO task_revisions (task_id) VALUES ('t')");
  refused("CREATE TABLE ql3.x (a int)");
  refused("CREATE TABLE x (a int)");
  // Row locks need UPDATE: the runtime role cannot lock definitions, which is why admissions
  // and run creation re-verify them without locks (see ApplyScheduleAdvance).
  refused("SELECT id FROM projects FOR SHARE");
  // What it may do.
  Result<pg::Rows> runs = (*conn)->Exec("SELECT count(*) FROM runs", {}, "counting runs");
  EXPECT_TRUE(runs.ok()) << runs.status().ToString();
}

// The runtime role's DELETE is held to the purge by the database itself: an unfinished run and
// its events and log chunks cannot be deleted, and a finished run goes with everything it owns.
TEST_F(PgStoreTest, TheDatabaseLetsOnlyFinishedRunsBePurged) {
  const TaskRevisionRecord task = PublishTask("purged");
  Result<RunRecord> run = a_->CreateRun(ManualRun(task));
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  Result<std::vector<AttemptRecord>> attempts = a_->ListAttempts(run->id);
  ASSERT_TRUE(attempts.ok()) << attempts.status().ToString();
  Psql("INSERT INTO ql3.run_log_chunks VALUES ('" + attempts->front().id + "', 0, '" + run->id +
       "', 'out', 1)");

  Result<std::unique_ptr<pg::Connection>> conn =
      pg::Connection::Open(PgTestCluster::Get().Url(pg::kRuntimeRole, database_), {});
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  auto exec = [&](const std::string& sql) {
    return (*conn)->Exec(sql, {pg::P(run->id)}, "probing the purge path").status();
  };
  EXPECT_TRUE(HasError(exec("DELETE FROM run_events WHERE run_id = $1"), StatusCode::kConflict,
                       "run_not_finished"));
  EXPECT_TRUE(HasError(exec("DELETE FROM run_log_chunks WHERE run_id = $1"),
                       StatusCode::kConflict, "run_not_finished"));
  EXPECT_TRUE(HasError(exec("DELETE FROM runs WHERE id = $1"), StatusCode::kConflict,
                       "run_not_finished"));

  ASSERT_TRUE(a_->RequestCancel(run->id, "test", "user", Now()).ok());

  RetentionScope scope{project_.id, task.task_id, {}, {1, 1000}};
  Result<PurgeResult> purged =
      a_->retention().PurgeRuns(PlanPurge(scope, Now() + 2 * kDayMs, 10, NewId()));
  ASSERT_TRUE(purged.ok()) << purged.status().ToString();
  EXPECT_EQ(purged->run_ids, std::vector<std::string>{run->id});
  EXPECT_EQ(purged->log_chunks, 1);
  EXPECT_EQ(Psql("SELECT (SELECT count(*) FROM ql3.runs) + (SELECT count(*) FROM ql3.run_attempts)"
                 " + (SELECT count(*) FROM ql3.run_events) + (SELECT count(*) FROM "
                 "ql3.run_log_chunks)"),
            "0\n");
}

// Every listing the API offers (GET /v1/runs: always one project, optionally a task, a trigger
// and a status, first page or after a cursor) walks an index of runs on a realistic, ANALYZE'd
// history: the planner's own choice, no planner settings changed.
TEST_F(PgStoreTest, EveryRunListingOfTheApiWalksAnIndex) {
  std::vector<TaskRevisionRecord> tasks;
  std::vector<std::string> triggers;
  for (int t = 0; t < 8; ++t) {
    tasks.push_back(PublishTask("listed " + std::to_string(t)));
    for (int g = 0; g < 3; ++g) {
      triggers.push_back(NewId());
      ASSERT_TRUE(
          a_->PublishTriggerRevision(TriggerCommand(triggers.back(), std::nullopt, tasks.back()))
              .ok());
    }
  }
  // 60,000 runs over 24 triggers of 8 tasks, one in three manual (no trigger); most finished,
  // a few queued, running, failed or skipped.
  Psql(
      "WITH t AS (SELECT row_number() OVER (ORDER BY g.trigger_id) - 1 AS k, g.trigger_id, "
      "g.task_id, g.revision, g.task_revision, r.content_digest AS task_digest, e.id AS exec FROM "
      "ql3.trigger_revisions g JOIN ql3.task_revisions r ON r.task_id = g.task_id AND "
      "r.revision = g.task_revision JOIN ql3.execution_revisions e ON e.task_id = g.task_id AND "
      "e.task_revision = g.task_revision) "
      "INSERT INTO ql3.runs (id, project_id, task_id, task_revision, task_digest, "
      "execution_revision_id, trigger_id, trigger_revision, scheduled_for_ms, trigger_type, "
      "status, version, event_sequence, priority, idempotency_key, created_at_ms, "
      "retry_max_attempts, retry_on_lost, retry_safety, retry_backoff_base_ms, "
      "retry_backoff_max_ms) SELECT gen_random_uuid()::text, '" +
      project_.id +
      "', t.task_id, t.task_revision, t.task_digest, t.exec, "
      "CASE WHEN i % 3 = 0 THEN NULL ELSE t.trigger_id END, "
      "CASE WHEN i % 3 = 0 THEN NULL ELSE t.revision END, "
      "CASE WHEN i % 3 = 0 THEN NULL ELSE i * 1000 END, "
      "CASE WHEN i % 3 = 0 THEN 'manual' ELSE 'cron' END, "
      "CASE WHEN i % 100 < 90 THEN 'succeeded' WHEN i % 100 < 95 THEN 'failed' "
      "WHEN i % 100 < 97 THEN 'skipped' WHEN i % 100 < 99 THEN 'queued' ELSE 'running' END, "
      "1, 2, 0, CASE WHEN i % 6 = 0 THEN 'key-' || i END, 1700000000000 + i * 1000, 1, false, "
      "'unknown', 1000, 60000 FROM generate_series(1, 60000) i JOIN t ON t.k = i % 24");
  Psql("ANALYZE ql3.runs");

  Result<std::unique_ptr<pg::Connection>> conn =
      pg::Connection::Open(PgTestCluster::Get().Url(pg::kRuntimeRole, database_), {});
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  const RunPosition middle{1700000000000 + 30000 * 1000, "01890000-0000-7000-8000-000000000000"};
  int listings = 0;
  for (int mask = 0; mask < 8; ++mask) {
    for (const char* status : {"succeeded", "queued"}) {
      if (!(mask & 4) && std::string(status) != "succeeded") continue;
      for (const std::optional<RunPosition>& after :
           {std::optional<RunPosition>(), std::optional<RunPosition>(middle)}) {
        RunFilter filter;
        filter.project_id = project_.id;
        if (mask & 1) filter.task_id = tasks[2].task_id;
        if (mask & 2) filter.trigger_id = triggers[7];  // a trigger of tasks[2]
        if (mask & 4) filter.status = status;
        const pg::RunListing listing = pg::RunListingQuery(filter, after, 51);
        Result<pg::Rows> plan = (*conn)->Exec("EXPLAIN " + listing.sql, listing.params, "explain");
        ASSERT_TRUE(plan.ok()) << plan.status().ToString();
        std::string text;
        for (int i = 0; i < plan->size(); ++i) text += plan->Text(i, 0) + "\n";
        SCOPED_TRACE(listing.sql + "\n" + text);
        EXPECT_EQ(text.find("Seq Scan"), std::string::npos);
        EXPECT_TRUE(text.find("Index Scan") != std::string::npos ||
                    text.find("Index Only Scan") != std::string::npos)
            << "the listing does not walk an index";
        EXPECT_NE(text.find(" on runs"), std::string::npos);
        ++listings;
      }
    }
  }
  EXPECT_EQ(listings, 24);
}

// ---------------------------------------------------------------------------------------------
// Schedule rows

TEST_F(PgStoreTest, PublishResetsTheClaimAndAdvancesKeepOnlyALiveClaim) {
  // The node clock starts at the database clock; the publication times come from the latter.
  clock_.SetNowMs(DbNowMs());
  TaskRevisionRecord task = PublishTask("job");
  const std::string trigger_id = NewId();
  ASSERT_TRUE(a_->PublishTriggerRevision(TriggerCommand(trigger_id, std::nullopt, task)).ok());
  const std::string where = " FROM ql3.trigger_schedules WHERE trigger_id = '" + trigger_id + "'";
  EXPECT_EQ(Psql("SELECT enabled, state_version, claim_version, claim_owner IS NULL" + where),
            "t|1|0|t\n");

  // A live claim of the row-lease scheduler survives a local-style advance.
  const int64_t claim_expiry = Now() + 30'000;
  Psql(
      "UPDATE ql3.trigger_schedules SET claim_owner = 'replica-1', claim_token = "
      "gen_random_uuid(), claim_version = 7, claim_expires_at_ms = " +
      std::to_string(claim_expiry) + " WHERE trigger_id = '" + trigger_id + "'");
  std::optional<DueSchedule> due = DueRow(trigger_id, Now());
  ASSERT_TRUE(due.has_value());
  Result<AdvanceOutcome> moved = a_->ApplyScheduleAdvance(MoveCursor(*due, Now() + 60'000));
  ASSERT_TRUE(moved.ok()) << moved.status().ToString();
  EXPECT_EQ(*moved, AdvanceOutcome::kApplied);
  EXPECT_EQ(Psql("SELECT claim_owner, claim_version, claim_expires_at_ms" + where),
            "replica-1|7|" + std::to_string(claim_expiry) + "\n");

  // An expired one is cleared and fenced (a claim must outlive updated_at_ms).
  clock_.Advance(60'000);
  due = DueRow(trigger_id, Now());
  ASSERT_TRUE(due.has_value());
  moved = a_->ApplyScheduleAdvance(MoveCursor(*due, Now() + 60'000));
  ASSERT_TRUE(moved.ok()) << moved.status().ToString();
  EXPECT_EQ(*moved, AdvanceOutcome::kApplied);
  EXPECT_EQ(Psql("SELECT claim_owner IS NULL, claim_token IS NULL, claim_expires_at_ms IS NULL, "
                 "claim_version, updated_at_ms" +
                 where),
            "t|t|t|8|" + std::to_string(Now()) + "\n");

  // A new revision clears any claim, bumps both versions and copies `enabled`.
  Psql(
      "UPDATE ql3.trigger_schedules SET claim_owner = 'replica-2', claim_token = "
      "gen_random_uuid(), claim_expires_at_ms = " +
      std::to_string(Now() + 30'000) + " WHERE trigger_id = '" + trigger_id + "'");
  // It is published by a node whose clock is a day ahead of the database's: the publication
  // time, which initialises the cursor, is still the database's.
  PublishTriggerCommand off = TriggerCommand(trigger_id, 1, task);
  off.revision.enabled = false;
  off.now_ms = DbNowMs() + 86'400'000;
  const int64_t before = DbNowMs();
  ASSERT_TRUE(a_->PublishTriggerRevision(off).ok());
  const int64_t after = DbNowMs();
  EXPECT_EQ(Psql("SELECT enabled, trigger_revision, state_version, claim_version, "
                 "claim_owner IS NULL, claim_token IS NULL, claim_expires_at_ms IS NULL, "
                 "next_fire_at_ms IS NULL, published_at_ms = updated_at_ms, "
                 "published_at_ms BETWEEN " +
                 std::to_string(before) + " AND " + std::to_string(after) + where),
            "f|2|4|9|t|t|t|t|t|t\n");
  EXPECT_FALSE(DueRow(trigger_id, Now() + 3'600'000).has_value());
}

// ---------------------------------------------------------------------------------------------
// Decoding

TEST_F(PgStoreTest, AnIntegerBeyondTheSafeRangeFailsClosed) {
  TaskRevisionRecord task = PublishTask("job");
  Result<RunRecord> run = a_->CreateRun(ManualRun(task));
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  Psql("UPDATE ql3.runs SET version = 9007199254740993 WHERE id = '" + run->id + "'");
  EXPECT_TRUE(HasError(a_->GetRun(run->id), StatusCode::kCorrupt, "integer_out_of_range"));
  EXPECT_TRUE(HasError(a_->ListRuns(RunFilter{}, PageRequest{}), StatusCode::kCorrupt,
                       "integer_out_of_range"));
  RunTransitionCommand cancel;
  cancel.run_id = run->id;
  cancel.expected_version = run->version;
  cancel.run_to = "cancelled";
  cancel.now_ms = Now();
  EXPECT_TRUE(HasError(a_->ApplyTransition(cancel), StatusCode::kCorrupt, "integer_out_of_range"));
  // The largest safe value still reads back.
  Psql("UPDATE ql3.runs SET version = 9007199254740991 WHERE id = '" + run->id + "'");
  Result<RunRecord> safe = a_->GetRun(run->id);
  ASSERT_TRUE(safe.ok()) << safe.status().ToString();
  EXPECT_EQ(safe->version, 9007199254740991);
}

TEST_F(PgStoreTest, OpenRefusesAnInsecureUrlUnlessAllowed) {
  PostgresStoreOptions options = StoreOptions(database_);
  ::unsetenv(pg::kAllowInsecureEnv);
  Result<std::unique_ptr<PostgresStore>> refused = PostgresStore::Open(options);
  ::setenv(pg::kAllowInsecureEnv, "true", 1);
  EXPECT_TRUE(HasError(refused, StatusCode::kInvalidArgument, "insecure_database_url"));
  options.runtime.url = "postgresql://[broken";
  EXPECT_TRUE(
      HasError(PostgresStore::Open(options), StatusCode::kInvalidArgument, "invalid_database_url"));
}

}  // namespace
}  // namespace ql
