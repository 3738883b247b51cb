#include "ql/storage/postgres/pg_cluster_schedules.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <future>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "ql/core/canonical_json.h"
#include "ql/core/cron.h"
#include "ql/core/digest.h"
#include "ql/core/execution_plan.h"
#include "ql/core/ids.h"
#include "ql/core/jitter.h"
#include "ql/core/rfc3339.h"
#include "ql/core/task_spec.h"
#include "ql/engine/cluster_recovery.h"
#include "ql/engine/cluster_scheduler.h"
#include "ql/engine/control_service.h"
#include "ql/engine/metrics.h"
#include "ql/engine/schedule_decider.h"
#include "ql/storage/postgres/pg_client.h"
#include "ql/storage/postgres/pg_cluster_recovery.h"
#include "ql/storage/postgres/pg_governance.h"
#include "ql/storage/postgres/pg_migrations.h"
#include "ql/storage/postgres/pg_store.h"
#include "ql/storage/postgres/pg_test_support.h"
#include "ql/testing/fake_clock.h"
#include "ql/testing/postgres_server.h"

namespace ql {
namespace {

using nlohmann::json;
using pg::testing::PgTestCluster;

constexpr char kRemote[] = "remote_worker";
constexpr char kEverySecond[] = "* * * * * *";
constexpr char kYearly[] = "0 0 1 1 *";
constexpr int64_t kGraceMs = 30'000;
// A project id that sorts before every UUIDv7 made today.
constexpr char kEarlyProjectId[] = "00000000-0000-7000-8000-000000000001";

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

const char* OutcomeName(AdvanceOutcome outcome) {
  switch (outcome) {
    case AdvanceOutcome::kApplied:
      return "applied";
    case AdvanceOutcome::kRaced:
      return "raced";
    case AdvanceOutcome::kAlreadyAdmitted:
      return "already admitted";
  }
  return "?";
}

std::string IsolationName(const ::testing::TestParamInfo<AdmissionIsolation>& info) {
  return info.param == AdmissionIsolation::kSerializable ? "Serializable" : "ReadCommitted";
}

::testing::AssertionResult Outcome(const Result<AdvanceOutcome>& result, AdvanceOutcome expected) {
  if (!result.ok()) return ::testing::AssertionFailure() << result.status().ToString();
  if (*result == expected) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "outcome " << OutcomeName(*result);
}

int64_t NewYear(int year) {
  return ParseRfc3339(std::to_string(year) + "-01-01T00:00:00Z").value();
}

int64_t NextFireAfter(const std::string& expression, int64_t after_ms) {
  return CronSchedule::Create(expression, "UTC").value().NextAfter(after_ms).value();
}

// The value of one series in the Prometheus text of `metrics`; 0 when it has no sample yet.
double Sample(const Metrics& metrics, const std::string& series) {
  std::istringstream in(metrics.RenderPrometheus());
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  }
  return 0;
}

json TaskBody(const std::string& name, const std::string& command) {
  return json{{"name", name}, {"spec", {{"command", {{"kind", "shell"}, {"command", command}}}}}};
}

std::vector<std::string> TriggerIds(const std::vector<ScheduleClaim>& claims) {
  std::vector<std::string> ids;
  for (const ScheduleClaim& c : claims) ids.push_back(c.due.schedule.trigger_id);
  return ids;
}

ClusterSchedulerOptions SchedulerOptions(const std::string& owner) {
  ClusterSchedulerOptions options;
  options.owner = owner;
  options.grace_ms = kGraceMs;
  options.executor_type = kRemote;
  return options;
}

std::unique_ptr<PostgresStore> OpenStore(const std::string& database) {
  PgTestCluster& cluster = PgTestCluster::Get();
  PostgresStoreOptions options;
  options.runtime.url = cluster.Url(pg::kRuntimeRole, database);
  options.runtime.max_connections = 3;
  pg::PoolOptions admin;
  admin.url = cluster.Url(pg::kAdminRole, database);
  admin.max_connections = 2;
  options.admin = admin;
  Result<std::unique_ptr<PostgresStore>> store = PostgresStore::Open(options);
  if (!store.ok()) {
    ADD_FAILURE() << store.status().ToString();
    return nullptr;
  }
  return std::move(store).value();
}

// One fresh database with two replicas: stores A and B (separate pools), each with its own
// schedule repository admitting under the isolation the test is instantiated with, and the
// management service (remote_worker, 30 s grace) publishing tasks and triggers through store
// A, so digests and execution revisions are real. Every test runs under both isolations.
class ClusterScheduleTest : public ::testing::TestWithParam<AdmissionIsolation> {
 protected:
  void SetUp() override {
    database_ = PgTestCluster::Get().NewDatabase();
    store_a_ = OpenStore(database_);
    store_b_ = OpenStore(database_);
    ASSERT_NE(store_a_, nullptr);
    ASSERT_NE(store_b_, nullptr);
    Result<std::unique_ptr<pg::Connection>> su = OpenSuperuser();
    ASSERT_TRUE(su.ok()) << su.status().ToString();
    su_ = std::move(su).value();
    ControlOptions options;
    options.executor_type = kRemote;
    options.grace_ms = kGraceMs;
    ASSERT_TRUE(ControlService::ValidateOptions(options).ok());
    control_ = std::make_unique<ControlService>(*store_a_, SystemClock(), random_, options);
    Result<ProjectRecord> project = control_->EnsureDefaultProject();
    ASSERT_TRUE(project.ok()) << project.status().ToString();
    project_ = *project;
    a_ = std::make_unique<PostgresClusterSchedules>(store_a_->runtime_pool(), GetParam());
    b_ = std::make_unique<PostgresClusterSchedules>(store_b_->runtime_pool(), GetParam());
    decider_ =
        std::make_unique<ScheduleDecider>(store_a_->definitions(), random_, kRemote, kGraceMs);
  }

  Result<std::unique_ptr<pg::Connection>> OpenSuperuser() {
    return pg::Connection::Open(
        PgTestCluster::Get().Url(::ql::testing::PostgresServer::kSuperuser, database_), {});
  }

  // Runs `sql` as the superuser. A SELECT returns its rows as psql prints them unaligned (one
  // line per row, columns joined by '|', NULL empty, booleans t/f); anything else (one or more
  // statements) returns "".
  std::string Sql(const std::string& sql) {
    if (sql.rfind("SELECT", 0) != 0) {
      Status done = su_->ExecScript(sql, "changing rows as the superuser");
      EXPECT_TRUE(done.ok()) << sql << ": " << done.ToString();
      return "";
    }
    const std::string text =
        "SELECT coalesce(string_agg(line, E'\\n' ORDER BY n), '') FROM (SELECT "
        "row_number() OVER () AS n, (SELECT string_agg(CASE json_typeof(v) WHEN 'null' THEN '' "
        "WHEN 'boolean' THEN left(v::text, 1) WHEN 'string' THEN v #>> '{}' ELSE v::text END, "
        "'|' ORDER BY o) FROM json_each(row_to_json(q)) WITH ORDINALITY AS e(k, v, o)) AS line "
        "FROM (" +
        sql + ") q) lines";
    Result<pg::Rows> rows = su_->Exec(text, {}, "reading rows as the superuser");
    EXPECT_TRUE(rows.ok()) << sql << ": " << rows.status().ToString();
    if (!rows.ok()) return "";
    std::string out = rows->Text(0, 0);
    EXPECT_TRUE(rows->status().ok()) << rows->status().ToString();
    return out;
  }
  int64_t SqlInt(const std::string& sql) { return std::strtoll(Sql(sql).c_str(), nullptr, 10); }

  // One reading of the database clock, as the repository reads it.
  int64_t DbNowMs() {
    Result<pg::Rows> rows =
        su_->Exec("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint", {},
                  "reading the database clock");
    EXPECT_TRUE(rows.ok()) << rows.status().ToString();
    return rows.ok() ? rows->Int(0, 0) : 0;
  }
  // A whole second of the database clock at least `ago_ms` in the past.
  int64_t SecondAgo(int64_t ago_ms) { return (DbNowMs() - ago_ms) / 1000 * 1000; }
  // Sleeps until the database clock reads later than `ms`.
  void WaitForDbClockPast(int64_t ms) {
    for (int i = 0; i < 200 && DbNowMs() <= ms; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    ASSERT_GT(DbNowMs(), ms);
  }

  static std::string Where(const std::string& trigger_id) {
    return " FROM ql3.trigger_schedules WHERE trigger_id = '" + trigger_id + "'";
  }
  // Every column of one schedule row / of all of them, as text.
  std::string ScheduleRow(const std::string& trigger_id) {
    return Sql("SELECT s::text FROM ql3.trigger_schedules s WHERE trigger_id = '" + trigger_id +
               "'");
  }
  std::string Schedules() {
    return Sql("SELECT s::text FROM ql3.trigger_schedules s ORDER BY trigger_id");
  }
  // What admissions write: runs|attempts|stored events (a cron admission stores none: its
  // events are derived from the run row).
  std::string Written() {
    return Sql(
        "SELECT (SELECT count(*) FROM ql3.runs), (SELECT count(*) FROM ql3.run_attempts), "
        "(SELECT count(*) FROM ql3.run_events)");
  }
  void SetCursor(const std::string& trigger_id, int64_t cursor_ms) {
    Sql("UPDATE ql3.trigger_schedules SET next_fire_at_ms = " + std::to_string(cursor_ms) +
        " WHERE trigger_id = '" + trigger_id + "'");
  }

  TaskView NewTask(const std::string& name, const std::optional<json>& retry = std::nullopt) {
    json body = TaskBody(name, "echo " + name);
    if (retry.has_value()) body["retry"] = *retry;
    Result<PublishedTask> published = control_->PublishTask(TaskWrite{body, std::nullopt});
    EXPECT_TRUE(published.ok()) << published.status().ToString();
    return published.ok() ? published->task : TaskView{};
  }
  std::string NewTrigger(const TaskView& task, const std::string& expression,
                         const std::string& misfire = "skip",
                         const std::string& overlap = "allow", int64_t jitter_ms = 0) {
    TriggerWrite write;
    write.task_id = task.head.task_id;
    write.expression = expression;
    write.timezone = "UTC";
    write.misfire = misfire;
    write.overlap = overlap;
    write.jitter_ms = jitter_ms;
    Result<PublishedTrigger> published = control_->AddTrigger(write);
    EXPECT_TRUE(published.ok()) << published.status().ToString();
    return published.ok() ? published->trigger.head.trigger_id : "";
  }
  std::string ExecutionId(const TaskView& task, int64_t revision = 1) {
    Result<ExecutionRevisionRecord> execution =
        store_a_->FindExecutionRevision(task.head.task_id, revision, kRemote);
    EXPECT_TRUE(execution.ok()) << execution.status().ToString();
    return execution.ok() ? execution->id : "";
  }

  // A task with its remote_worker plan and an enabled trigger in project `project_id`,
  // published through the store: the management service writes the default project only.
  std::string TriggerInProject(const std::string& project_id, const std::string& expression) {
    const int64_t now = SystemClock().NowMs();
    Result<ProjectRecord> project = store_a_->EnsureProject(project_id, "second", "Second", now);
    EXPECT_TRUE(project.ok()) << project.status().ToString();
    Result<TaskContent> content = ParseTaskContent(TaskBody("elsewhere", "echo elsewhere"));
    EXPECT_TRUE(content.ok()) << content.status().ToString();
    if (!project.ok() || !content.ok()) return "";
    const std::string task_id = NewUuidV7(now, random_);
    const std::string digest = TaskContentDigest(*content);
    Result<ExecutionPlan> plan = BuildExecutionPlan(task_id, 1, *content, digest, kRemote);
    EXPECT_TRUE(plan.ok()) << plan.status().ToString();
    if (!plan.ok()) return "";
    PublishTaskCommand task;
    task.project_id = project_id;
    task.task_id = task_id;
    task.mutation_id = NewUuidV7(now, random_);
    task.now_ms = now;
    task.revision.name = content->name;
    task.revision.kind = content->kind;
    task.revision.spec_json = internal::CanonicalJsonLossy(CommandSpecToJson(content->spec));
    task.revision.labels_json = "{}";
    task.revision.enabled = true;
    task.revision.content_digest = digest;
    ExecutionRevisionRecord execution;
    execution.project_id = project_id;
    execution.task_id = task_id;
    execution.task_revision = 1;
    execution.task_digest = digest;
    execution.executor_type = kRemote;
    execution.plan_json = PlanCanonical(*plan);
    execution.plan_digest = PlanDigest(*plan);
    execution.id = ExecutionRevisionId(1, execution.plan_digest);
    execution.created_at_ms = now;
    task.executions.push_back(execution);
    Result<PublishTaskResult> published = store_a_->PublishTaskRevision(task);
    EXPECT_TRUE(published.ok()) << published.status().ToString();
    PublishTriggerCommand trigger;
    trigger.project_id = project_id;
    trigger.trigger_id = NewUuidV7(now, random_);
    trigger.mutation_id = NewUuidV7(now, random_);
    trigger.now_ms = now;
    trigger.name = "trigger-" + trigger.trigger_id;
    TriggerRevisionRecord& r = trigger.revision;
    r.task_id = task_id;
    r.task_revision = 1;
    r.task_digest = digest;
    r.expression = expression;
    r.timezone = "UTC";
    r.misfire = "skip";
    r.enabled = true;
    r.content_digest = Sha256Hex(trigger.trigger_id + "\n" + expression);
    Result<PublishTriggerResult> added = store_a_->PublishTriggerRevision(trigger);
    EXPECT_TRUE(added.ok()) << added.status().ToString();
    return trigger.trigger_id;
  }

  // A random (version 4) UUID: a round's claim token.
  std::string Uuid4() {
    std::string hex = RandomHex(random_, 16);
    hex[12] = '4';
    hex[16] = 'a';
    return hex.substr(0, 8) + "-" + hex.substr(8, 4) + "-" + hex.substr(12, 4) + "-" +
           hex.substr(16, 4) + "-" + hex.substr(20, 12);
  }
  ClaimRequest Request(const std::string& owner, int limit = 16, int64_t lease_ms = 30'000) {
    return ClaimRequest{owner, Uuid4(), limit, lease_ms};
  }
  std::vector<ScheduleClaim> Claim(PostgresClusterSchedules& schedules,
                                   const ClaimRequest& request) {
    Result<std::vector<ScheduleClaim>> claims = schedules.ClaimDueSchedules(request);
    EXPECT_TRUE(claims.ok()) << claims.status().ToString();
    return claims.ok() ? std::move(claims).value() : std::vector<ScheduleClaim>{};
  }
  // Claims and expects exactly the row of `trigger_id` back.
  std::optional<ScheduleClaim> ClaimOnly(PostgresClusterSchedules& schedules,
                                         const std::string& trigger_id, const std::string& owner,
                                         int64_t lease_ms = 30'000) {
    std::vector<ScheduleClaim> claims = Claim(schedules, Request(owner, 16, lease_ms));
    if (claims.size() != 1 || claims[0].due.schedule.trigger_id != trigger_id) {
      ADD_FAILURE() << "expected exactly the claim of " << trigger_id << ", got " << claims.size()
                    << " claims";
      return std::nullopt;
    }
    return claims[0];
  }
  // The decision the coordinator takes for `claim` (its acquisition time as "now").
  ClaimDecision Decide(const ScheduleClaim& claim) {
    ClaimDecision decision;
    decision.claim = claim;
    Result<DecidedRow> row = decider_->Decide(claim.due, claim.acquired_at_ms);
    EXPECT_TRUE(row.ok()) << row.status().ToString();
    if (!row.ok()) return decision;
    decision.new_next_fire_at_ms = row->new_next_fire_at_ms;
    decision.exhausted = row->exhausted;
    decision.run = row->run;
    return decision;
  }

  // A due every-second trigger of a new task `name` (cursor two whole seconds back or more),
  // claimed by replica A with `lease_ms` and decided: an admission.
  struct Claimed {
    std::string trigger;
    int64_t cursor = 0;
    ScheduleClaim claim;
    ClaimDecision decision;
  };
  std::optional<Claimed> ClaimedAdmission(const std::string& name, int64_t lease_ms = 30'000) {
    Claimed out;
    out.trigger = NewTrigger(NewTask(name), kEverySecond);
    out.cursor = SecondAgo(2'000);
    SetCursor(out.trigger, out.cursor);
    std::optional<ScheduleClaim> claim = ClaimOnly(*a_, out.trigger, "replica-a", lease_ms);
    if (!claim.has_value()) return std::nullopt;
    out.claim = *claim;
    out.decision = Decide(*claim);
    if (!out.decision.run.has_value()) {
      ADD_FAILURE() << "the claim of " << out.trigger << " decided no admission";
      return std::nullopt;
    }
    return out;
  }

  std::string database_;
  std::unique_ptr<PostgresStore> store_a_;
  std::unique_ptr<PostgresStore> store_b_;
  std::unique_ptr<pg::Connection> su_;
  testing::SeededRandom random_{20260722};
  std::unique_ptr<ControlService> control_;
  ProjectRecord project_;
  std::unique_ptr<PostgresClusterSchedules> a_;
  std::unique_ptr<PostgresClusterSchedules> b_;
  std::unique_ptr<ScheduleDecider> decider_;
};

// ---------------------------------------------------------------------------------------------
// Claims

TEST_P(ClusterScheduleTest, ClaimsInCursorOrderAndSkipsRowsLockedByOthers) {
  TaskView task = NewTask("ordered");
  const std::string fresh = NewTrigger(task, kYearly);  // never initialised: cursor NULL
  std::string tie_low = NewTrigger(task, kYearly);
  std::string tie_high = NewTrigger(task, kYearly);
  const std::string oldest = NewTrigger(task, kYearly);
  const std::string future = NewTrigger(task, kYearly);
  const std::string early_project = TriggerInProject(kEarlyProjectId, kYearly);
  ASSERT_FALSE(early_project.empty());
  if (tie_high < tie_low) std::swap(tie_low, tie_high);
  ASSERT_LT(std::string(kEarlyProjectId), project_.id);
  ASSERT_GT(early_project, tie_high);  // its project, not its trigger id, puts it first
  const int64_t now = DbNowMs();
  SetCursor(tie_low, now - 5'000);
  SetCursor(tie_high, now - 5'000);
  SetCursor(early_project, now - 5'000);
  SetCursor(oldest, now - 10'000);
  SetCursor(future, now + 3'600'000);

  // Another session holds the oldest due row in an open transaction.
  Result<std::unique_ptr<pg::Connection>> holder = OpenSuperuser();
  ASSERT_TRUE(holder.ok()) << holder.status().ToString();
  ASSERT_TRUE((*holder)->ExecScript("BEGIN", "holding a schedule row").ok());
  Result<pg::Rows> locked =
      (*holder)->Exec("SELECT trigger_id FROM trigger_schedules WHERE trigger_id = $1 FOR UPDATE",
                      {pg::P(oldest)}, "locking a schedule row");
  ASSERT_TRUE(locked.ok()) << locked.status().ToString();
  ASSERT_EQ(locked->size(), 1);

  const auto started = std::chrono::steady_clock::now();
  std::vector<ScheduleClaim> first = Claim(*a_, Request("replica-a", 3));
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now() - started)
                          .count();
  EXPECT_LT(waited, 1500) << "the claim waited for a row another session holds";
  EXPECT_EQ(TriggerIds(first), (std::vector<std::string>{fresh, early_project, tie_low}));
  ASSERT_EQ(first.size(), 3u);
  EXPECT_FALSE(first[0].due.schedule.next_fire_at_ms.has_value());
  EXPECT_EQ(first[1].due.schedule.project_id, kEarlyProjectId);
  ASSERT_TRUE((*holder)->ExecScript("ROLLBACK", "releasing the schedule row").ok());

  // Once released, the skipped row is claimable again, and it comes first by its cursor.
  std::vector<ScheduleClaim> second = Claim(*b_, Request("replica-b", 256));
  EXPECT_EQ(TriggerIds(second), (std::vector<std::string>{oldest, tie_high}));
  EXPECT_TRUE(Claim(*a_, Request("replica-c", 256)).empty());
  EXPECT_EQ(Sql("SELECT trigger_id, coalesce(claim_owner, '-') FROM ql3.trigger_schedules "
                "ORDER BY next_fire_at_ms NULLS FIRST, project_id, trigger_id"),
            fresh + "|replica-a\n" + oldest + "|replica-b\n" + early_project + "|replica-a\n" +
                tie_low + "|replica-a\n" + tie_high + "|replica-b\n" + future + "|-");
}

TEST_P(ClusterScheduleTest, AClaimWritesTheFenceWithOneDatabaseClockReading) {
  // A claim command names owner, token, limit and lease, and no time of any node: this binding
  // stops compiling if a field is ever added to it.
  static_assert(std::is_aggregate_v<ClaimRequest>);
  {
    ClaimRequest probe = Request("replica-a");
    auto& [owner, token, limit, lease_ms] = probe;
    EXPECT_EQ(owner, "replica-a");
    EXPECT_TRUE(IsCanonicalUuid(token));
    EXPECT_EQ(limit, 16);
    EXPECT_EQ(lease_ms, 30'000);
  }
  TaskView task = NewTask("claimed");
  const std::string trigger = NewTrigger(task, kEverySecond);
  const int64_t state_before = SqlInt("SELECT state_version" + Where(trigger));
  const int64_t version_before = SqlInt("SELECT claim_version" + Where(trigger));

  const ClaimRequest request = Request("replica-a", 16, 45'000);
  const int64_t t0 = DbNowMs();
  std::vector<ScheduleClaim> claims = Claim(*a_, request);
  const int64_t t1 = DbNowMs();
  ASSERT_EQ(claims.size(), 1u);
  const ScheduleClaim& c = claims[0];
  EXPECT_GE(c.acquired_at_ms, t0);
  EXPECT_LE(c.acquired_at_ms, t1);
  EXPECT_LT(t1 - c.acquired_at_ms, 1000);
  EXPECT_EQ(c.owner, "replica-a");
  EXPECT_EQ(c.token, request.token);
  EXPECT_EQ(c.claim_version, version_before + 1);
  EXPECT_EQ(c.expires_at_ms, c.acquired_at_ms + 45'000);
  EXPECT_EQ(c.due.schedule.trigger_id, trigger);
  EXPECT_EQ(c.due.schedule.project_id, project_.id);
  EXPECT_EQ(c.due.schedule.state_version, state_before + 1);
  EXPECT_EQ(c.due.schedule.updated_at_ms, c.acquired_at_ms);
  EXPECT_FALSE(c.due.schedule.next_fire_at_ms.has_value());
  EXPECT_EQ(c.due.trigger.revision, 1);
  EXPECT_EQ(c.due.trigger.task_id, task.head.task_id);
  EXPECT_EQ(c.due.trigger.task_digest, task.revision.content_digest);
  EXPECT_EQ(c.execution_revision_id, ExecutionId(task));
  EXPECT_EQ(Sql("SELECT claim_owner, claim_token, claim_version, claim_expires_at_ms, "
                "state_version, updated_at_ms, next_fire_at_ms IS NULL" +
                Where(trigger)),
            "replica-a|" + request.token + "|" + std::to_string(version_before + 1) + "|" +
                std::to_string(c.acquired_at_ms + 45'000) + "|" + std::to_string(state_before + 1) +
                "|" + std::to_string(c.acquired_at_ms) + "|t");

  // Malformed requests write nothing, although a row is there to claim.
  const std::string other = NewTrigger(task, kEverySecond);
  const std::string snapshot = Schedules();
  std::string upper = Uuid4();
  for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  const std::vector<ClaimRequest> invalid = {
      {"", Uuid4(), 16, 30'000},
      {std::string(129, 'r'), Uuid4(), 16, 30'000},
      {"replica-b", "not-a-uuid", 16, 30'000},
      {"replica-b", upper, 16, 30'000},
      {"replica-b", Uuid4(), 0, 30'000},
      {"replica-b", Uuid4(), 257, 30'000},
      {"replica-b", Uuid4(), 16, 999},
      {"replica-b", Uuid4(), 16, 60'001},
  };
  for (const ClaimRequest& bad : invalid) {
    SCOPED_TRACE("owner of " + std::to_string(bad.owner.size()) + " bytes, token " + bad.token +
                 ", limit " + std::to_string(bad.limit) + ", lease " +
                 std::to_string(bad.lease_ms));
    EXPECT_TRUE(
        HasError(b_->ClaimDueSchedules(bad), StatusCode::kInvalidArgument, "invalid_claim"));
  }
  EXPECT_EQ(Schedules(), snapshot);
  // The bounds themselves are valid.
  std::vector<ScheduleClaim> valid = Claim(*b_, {std::string(128, 'r'), Uuid4(), 256, 60'000});
  EXPECT_EQ(TriggerIds(valid), std::vector<std::string>{other});
}

TEST_P(ClusterScheduleTest, AnotherReplicaTakesOverOnlyAfterTheDatabaseClockPassesTheExpiry) {
  TaskView task = NewTask("taken over");
  const std::string trigger = NewTrigger(task, kEverySecond);
  const int64_t cursor = SecondAgo(2'000);
  SetCursor(trigger, cursor);
  std::optional<ScheduleClaim> held = ClaimOnly(*a_, trigger, "replica-a", 1'000);
  ASSERT_TRUE(held.has_value());
  // Replica B, right away: the row's lease is live.
  EXPECT_TRUE(Claim(*b_, Request("replica-b")).empty());
  ClaimDecision from_a = Decide(*held);
  ASSERT_TRUE(from_a.run.has_value());
  EXPECT_EQ(from_a.run->scheduled_for_ms, cursor);

  WaitForDbClockPast(held->expires_at_ms);
  std::vector<ScheduleClaim> taken = Claim(*b_, Request("replica-b"));
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].due.schedule.trigger_id, trigger);
  EXPECT_EQ(taken[0].owner, "replica-b");
  EXPECT_EQ(taken[0].claim_version, held->claim_version + 1);
  EXPECT_EQ(taken[0].due.schedule.state_version, held->due.schedule.state_version + 1);
  EXPECT_EQ(taken[0].due.schedule.next_fire_at_ms, cursor);
  EXPECT_GE(taken[0].acquired_at_ms, held->expires_at_ms);

  // The first holder's decision is dead: raced, nothing written.
  const std::string after_takeover = ScheduleRow(trigger);
  EXPECT_TRUE(Outcome(a_->CommitClaimDecision(from_a), AdvanceOutcome::kRaced));
  EXPECT_EQ(ScheduleRow(trigger), after_takeover);
  EXPECT_EQ(Written(), "0|0|0");
  // The new holder admits the occurrence.
  EXPECT_TRUE(Outcome(b_->CommitClaimDecision(Decide(taken[0])), AdvanceOutcome::kApplied));
  EXPECT_EQ(Sql("SELECT scheduled_for_ms FROM ql3.runs"), std::to_string(cursor));
}

// ---------------------------------------------------------------------------------------------
// The fence

TEST_P(ClusterScheduleTest, EveryBrokenFenceRacesAndWritesNothing) {
  TaskView task = NewTask("fenced");
  const std::string trigger = NewTrigger(task, kEverySecond);
  const int64_t cursor = SecondAgo(2'000);
  SetCursor(trigger, cursor);
  std::optional<ScheduleClaim> claim = ClaimOnly(*a_, trigger, "replica-a", 60'000);
  ASSERT_TRUE(claim.has_value());
  const ClaimDecision valid = Decide(*claim);
  ASSERT_TRUE(valid.run.has_value());
  const std::string claimed_row = ScheduleRow(trigger);

  struct Drift {
    std::string name;
    std::function<void(ClaimDecision&)> apply;
  };
  const std::vector<Drift> drifts = {
      {"another owner", [](ClaimDecision& d) { d.claim.owner = "replica-b"; }},
      {"another token", [this](ClaimDecision& d) { d.claim.token = Uuid4(); }},
      {"a newer claim version", [](ClaimDecision& d) { ++d.claim.claim_version; }},
      {"the state before the claim",
       [](ClaimDecision& d) { --d.claim.due.schedule.state_version; }},
      {"a later state", [](ClaimDecision& d) { ++d.claim.due.schedule.state_version; }},
      {"another cursor",
       [&](ClaimDecision& d) {
         // A consistent decision about the previous second: only the stored cursor differs.
         d.claim.due.schedule.next_fire_at_ms = cursor - 1'000;
         d.run->scheduled_for_ms = cursor - 1'000;
         d.run->idempotency_key = "ql3:cron:v1:" + trigger + ":1:" + std::to_string(cursor - 1'000);
         d.new_next_fire_at_ms = cursor;
       }},
  };
  for (const Drift& drift : drifts) {
    SCOPED_TRACE(drift.name);
    ClaimDecision decision = valid;
    drift.apply(decision);
    EXPECT_TRUE(Outcome(a_->CommitClaimDecision(decision), AdvanceOutcome::kRaced));
    EXPECT_EQ(ScheduleRow(trigger), claimed_row);
    EXPECT_EQ(Written(), "0|0|0");
  }
  // The untouched decision still holds its fence.
  EXPECT_TRUE(Outcome(a_->CommitClaimDecision(valid), AdvanceOutcome::kApplied));
  EXPECT_EQ(Written(), "1|1|0");
}

TEST_P(ClusterScheduleTest, AnExpiredClaimRacesAndWritesNothing) {
  TaskView task = NewTask("expired");
  const std::string trigger = NewTrigger(task, kEverySecond);
  SetCursor(trigger, SecondAgo(2'000));
  std::optional<ScheduleClaim> claim = ClaimOnly(*a_, trigger, "replica-a", 1'000);
  ASSERT_TRUE(claim.has_value());
  const ClaimDecision decision = Decide(*claim);
  ASSERT_TRUE(decision.run.has_value());
  WaitForDbClockPast(claim->expires_at_ms);
  // Nobody took the row over: it still names replica-a, but the database clock says the lease
  // is over.
  const std::string expired_row = ScheduleRow(trigger);
  EXPECT_EQ(Sql("SELECT claim_owner" + Where(trigger)), "replica-a");
  EXPECT_TRUE(Outcome(a_->CommitClaimDecision(decision), AdvanceOutcome::kRaced));
  EXPECT_EQ(ScheduleRow(trigger), expired_row);
  EXPECT_EQ(Written(), "0|0|0");
  std::vector<ScheduleClaim> again = Claim(*b_, Request("replica-b"));
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].claim_version, claim->claim_version + 1);
}

// ---------------------------------------------------------------------------------------------
// Decisions

TEST_P(ClusterScheduleTest, SkipMovesAFarBehindCursorPastTheClaimTimeWithoutARun) {
  TaskView task = NewTask("skipped");
  const std::string trigger = NewTrigger(task, kYearly, "skip");
  SetCursor(trigger, NewYear(2020));
  std::optional<ScheduleClaim> claim = ClaimOnly(*a_, trigger, "replica-a");
  ASSERT_TRUE(claim.has_value());
  const ClaimDecision decision = Decide(*claim);
  EXPECT_FALSE(decision.run.has_value());
  const int64_t next = NextFireAfter(kYearly, claim->acquired_at_ms);
  EXPECT_EQ(decision.new_next_fire_at_ms, next);
  EXPECT_TRUE(Outcome(a_->CommitClaimDecision(decision), AdvanceOutcome::kApplied));
  EXPECT_EQ(Sql("SELECT next_fire_at_ms, last_scheduled_at_ms IS NULL, state_version, "
                "claim_owner IS NULL, claim_token IS NULL, claim_expires_at_ms IS NULL, "
                "claim_version" +
                Where(trigger)),
            std::to_string(next) + "|t|" + std::to_string(claim->due.schedule.state_version + 1) +
                "|t|t|t|" + std::to_string(claim->claim_version));
  EXPECT_EQ(Written(), "0|0|0");

  // A coordinator round takes the same decision for another far-behind row and counts it.
  const std::string other = NewTrigger(task, kYearly, "skip");
  SetCursor(other, NewYear(2021));
  Metrics metrics;
  testing::SeededRandom random(7);
  ClusterScheduler scheduler(*b_, store_b_->definitions(), random, metrics,
                             SchedulerOptions("replica-b"));
  const int64_t before = DbNowMs();
  Result<RoundReport> report = scheduler.RunRound();
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->rows, 1);
  EXPECT_EQ(report->skipped, 1);
  EXPECT_EQ(report->admitted, 0);
  EXPECT_EQ(report->errors, 0) << report->first_error.ToString();
  EXPECT_EQ(Sample(metrics, R"(ql_scheduler_occurrences_total{outcome="skip"})"), 1);
  EXPECT_EQ(SqlInt("SELECT next_fire_at_ms" + Where(other)), NextFireAfter(kYearly, before));
  EXPECT_EQ(Sql("SELECT claim_owner IS NULL" + Where(other)), "t");
  EXPECT_EQ(Written(), "0|0|0");
}

TEST_P(ClusterScheduleTest, FireOnceAdmitsOnlyTheOldestMissedOccurrence) {
  TaskView task = NewTask("fired once");
  const std::string trigger = NewTrigger(task, kYearly, "fire_once");
  const int64_t oldest = NewYear(2020);
  SetCursor(trigger, oldest);
  std::optional<ScheduleClaim> claim = ClaimOnly(*a_, trigger, "replica-a");
  ASSERT_TRUE(claim.has_value());
  const ClaimDecision decision = Decide(*claim);
  ASSERT_TRUE(decision.run.has_value());
  const int64_t next = NextFireAfter(kYearly, claim->acquired_at_ms);
  EXPECT_EQ(decision.new_next_fire_at_ms, next);
  EXPECT_TRUE(Outcome(a_->CommitClaimDecision(decision), AdvanceOutcome::kApplied));
  EXPECT_EQ(Sql("SELECT scheduled_for_ms FROM ql3.runs"), std::to_string(oldest));
  EXPECT_EQ(Sql("SELECT next_fire_at_ms, last_scheduled_at_ms" + Where(trigger)),
            std::to_string(next) + "|" + std::to_string(oldest));
  // The years missed since are never replayed: nothing is due any more.
  EXPECT_TRUE(Claim(*b_, Request("replica-b", 256)).empty());
  Result<std::optional<int64_t>> until = b_->MsUntilNextDue();
  ASSERT_TRUE(until.ok()) << until.status().ToString();
  ASSERT_TRUE(until->has_value());
  EXPECT_GT(**until, 0);
  EXPECT_EQ(Written(), "1|1|0");
}

// ---------------------------------------------------------------------------------------------
// Admission

TEST_P(ClusterScheduleTest, AnAdmissionWritesRunAttemptEventsPolicyAndCursorAtOnce) {
  TaskView task = NewTask("admitted");
  const std::string trigger = NewTrigger(task, kEverySecond);
  const int64_t cursor = SecondAgo(2'000);
  SetCursor(trigger, cursor);
  std::optional<ScheduleClaim> claim = ClaimOnly(*a_, trigger, "replica-a");
  ASSERT_TRUE(claim.has_value());
  ClaimDecision decision = Decide(*claim);
  ASSERT_TRUE(decision.run.has_value());
  decision.run->now_ms = 1;  // the rows' times come from the database clock, never from here
  const int64_t t0 = DbNowMs();
  EXPECT_TRUE(Outcome(a_->CommitClaimDecision(decision), AdvanceOutcome::kApplied));
  const int64_t t1 = DbNowMs();
  EXPECT_EQ(Written(), "1|1|0");

  const NewRun& run = *decision.run;
  const std::string key = "ql3:cron:v1:" + trigger + ":1:" + std::to_string(cursor);
  EXPECT_EQ(Sql("SELECT id, status, trigger_type, trigger_id, trigger_revision, "
                "scheduled_for_ms, idempotency_key IS NULL, execution_revision_id, task_id, "
                "task_revision, task_digest, version, event_sequence, priority, "
                "cancel_requested_at_ms IS NULL, started_at_ms IS NULL FROM ql3.runs"),
            run.run_id + "|queued|cron|" + trigger + "|1|" + std::to_string(cursor) + "|t|" +
                ExecutionId(task) + "|" + task.head.task_id + "|1|" +
                task.revision.content_digest + "|1|2|0|t|t");
  // The key is not stored but rebuilt from the occurrence.
  Result<RunRecord> read = store_a_->GetRun(run.run_id);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->idempotency_key, key);
  const int64_t created = SqlInt("SELECT created_at_ms FROM ql3.runs");
  EXPECT_GE(created, t0);
  EXPECT_LE(created, t1);
  EXPECT_GE(created, claim->acquired_at_ms);
  const std::string at = std::to_string(created);
  EXPECT_EQ(Sql("SELECT queued_at_ms FROM ql3.runs"), at);
  EXPECT_EQ(Sql("SELECT id, attempt, status, executor_type, callback_sequence, created_at_ms, "
                "worker_id IS NULL, worker_session_id IS NULL, lease_expires_at_ms IS NULL, "
                "offer_id IS NULL, started_at_ms IS NULL FROM ql3.run_attempts"),
            run.attempt_id + "|1|claimed|remote_worker|0|" + at + "|t|t|t|t|t");
  EXPECT_EQ(Sql("SELECT count(*) FROM ql3.run_events"), "0");
  Result<std::vector<EventRecord>> events = store_a_->ListEvents(run.run_id, 0, 10);
  ASSERT_TRUE(events.ok()) << events.status().ToString();
  ASSERT_EQ(events->size(), 2u);
  EXPECT_EQ((*events)[0].type, "run.created");
  EXPECT_EQ((*events)[0].actor_type, "scheduler");
  EXPECT_EQ((*events)[0].attempt_id, std::nullopt);
  EXPECT_EQ(std::to_string((*events)[0].created_at_ms), at);
  EXPECT_EQ((*events)[1].type, "run.queued");
  EXPECT_EQ((*events)[1].actor_type, "scheduler");
  EXPECT_EQ((*events)[1].attempt_id, run.attempt_id);
  EXPECT_EQ((*events)[1].payload_json, R"({"attempt":1,"executor_type":"remote_worker"})");
  EXPECT_EQ(std::to_string((*events)[1].created_at_ms), at);
  EXPECT_EQ(Sql("SELECT retry_max_attempts, retry_on_lost, retry_safety, retry_backoff_base_ms, "
                "retry_backoff_max_ms, idempotency_key IS NULL FROM ql3.runs"),
            "1|f|unknown|1000|60000|t");
  EXPECT_EQ(Sql("SELECT next_fire_at_ms, last_scheduled_at_ms, state_version, claim_version, "
                "claim_owner IS NULL, claim_token IS NULL, claim_expires_at_ms IS NULL, "
                "updated_at_ms" +
                Where(trigger)),
            std::to_string(cursor + 1'000) + "|" + std::to_string(cursor) + "|" +
                std::to_string(claim->due.schedule.state_version + 1) + "|" +
                std::to_string(claim->claim_version) + "|t|t|t|" + at);
}

TEST_P(ClusterScheduleTest, AWriteFaultInsideTheAdmissionRollsEverythingBack) {
  TaskView task = NewTask("faulted");
  const std::string trigger = NewTrigger(task, kEverySecond);
  SetCursor(trigger, SecondAgo(2'000));
  std::optional<ScheduleClaim> claim = ClaimOnly(*a_, trigger, "replica-a");
  ASSERT_TRUE(claim.has_value());
  const ClaimDecision decision = Decide(*claim);
  ASSERT_TRUE(decision.run.has_value());
  const std::string claimed_row = ScheduleRow(trigger);
  for (const std::string step : {"run", "schedule"}) {
    SCOPED_TRACE("fault at " + step);
    int faults = 0;
    a_->SetWriteFaultForTesting([&](std::string_view at, pg::Tx&) -> Status {
      if (at != step) return Status::Ok();
      ++faults;
      return Unavailable("injected_write_fault", "the write of the " + step + " failed");
    });
    EXPECT_TRUE(HasError(a_->CommitClaimDecision(decision), StatusCode::kUnavailable,
                         "injected_write_fault"));
    EXPECT_EQ(faults, 1);
    EXPECT_EQ(Written(), "0|0|0");
    EXPECT_EQ(ScheduleRow(trigger), claimed_row);
  }
  a_->SetWriteFaultForTesting(nullptr);
  EXPECT_TRUE(Outcome(a_->CommitClaimDecision(decision), AdvanceOutcome::kApplied));
  EXPECT_EQ(Written(), "1|1|0");
}

TEST_P(ClusterScheduleTest, AnAdmissionReachesItsRowsByAddressAndNeverLocksAWholeTable) {
  constexpr int kTriggers = 40;
  TaskView task = NewTask("keyed");
  for (int i = 0; i < kTriggers; ++i) {
    const std::string trigger = NewTrigger(task, kEverySecond);
    ASSERT_FALSE(trigger.empty());
    SetCursor(trigger, SecondAgo(2'000));
  }
  // A small table with fresh statistics: a scan of its few pages looks cheaper to the planner
  // than 40 lookups by address, and under SERIALIZABLE a scan predicate-locks the whole table,
  // so that every other replica's cursor move would conflict with this admission.
  Sql("ANALYZE ql3.trigger_schedules");
  std::vector<ScheduleClaim> claims = Claim(*a_, Request("replica-a", kTriggers, 30'000));
  ASSERT_EQ(claims.size(), static_cast<size_t>(kTriggers));
  std::vector<ClaimDecision> decisions;
  for (const ScheduleClaim& claim : claims) decisions.push_back(Decide(claim));
  int64_t table_locks = -1, index_locks = -1, row_locks = -1;
  a_->SetWriteFaultForTesting([&](std::string_view at, pg::Tx& tx) -> Status {
    if (at != "run") return Status::Ok();
    QL_ASSIGN_OR_RETURN(
        pg::Rows rows,
        tx.Exec("SELECT count(*) FILTER (WHERE relation = 'ql3.trigger_schedules'::regclass AND "
                "locktype <> 'tuple'), count(*) FILTER (WHERE relation = "
                "'ql3.trigger_schedules_pkey'::regclass), count(*) FILTER (WHERE relation = "
                "'ql3.trigger_heads'::regclass AND locktype = 'tuple') FROM pg_locks WHERE "
                "mode = 'SIReadLock' AND pid = pg_backend_pid()"));
    table_locks = rows.Int(0, 0);
    index_locks = rows.Int(0, 1);
    row_locks = rows.Int(0, 2);
    return rows.status();
  });
  Result<std::vector<ClaimCommitResult>> results = a_->CommitClaimDecisions(decisions);
  a_->SetWriteFaultForTesting(nullptr);
  ASSERT_TRUE(results.ok()) << results.status().ToString();
  for (const ClaimCommitResult& r : *results) EXPECT_EQ(r.outcome, AdvanceOutcome::kApplied);
  EXPECT_EQ(table_locks, 0) << "the admission scanned trigger_schedules";
  EXPECT_EQ(index_locks, 0) << "the admission reached its rows through trigger_schedules_pkey";
  // Under SERIALIZABLE it does predicate-lock what it reads (here: the trigger heads it checks
  // again; its own schedule row versions are released once it writes them); READ COMMITTED
  // takes no predicate locks.
  EXPECT_EQ(row_locks, GetParam() == AdmissionIsolation::kSerializable ? kTriggers : 0);
}

TEST_P(ClusterScheduleTest, ACursorThatDoesNotMoveForwardIsRefused) {
  std::optional<Claimed> claimed = ClaimedAdmission("backwards");
  ASSERT_TRUE(claimed.has_value());
  const std::string& trigger = claimed->trigger;
  const int64_t cursor = claimed->cursor;
  const ClaimDecision& valid = claimed->decision;
  const std::string claimed_row = ScheduleRow(trigger);
  for (int64_t to : {cursor, cursor - 1'000}) {
    SCOPED_TRACE("new cursor " + std::to_string(to));
    ClaimDecision decision = valid;
    decision.new_next_fire_at_ms = to;
    EXPECT_TRUE(HasError(a_->CommitClaimDecision(decision), StatusCode::kInvalidArgument,
                         "cursor_not_advancing"));
    EXPECT_EQ(ScheduleRow(trigger), claimed_row);
    EXPECT_EQ(Written(), "0|0|0");
  }
  EXPECT_TRUE(Outcome(a_->CommitClaimDecision(valid), AdvanceOutcome::kApplied));
}

TEST_P(ClusterScheduleTest, ACursorOtherThanTheStoredRevisionsNextFireIsRefusedAndCounted) {
  std::optional<Claimed> claimed = ClaimedAdmission("skipping");
  ASSERT_TRUE(claimed.has_value());
  const std::string& trigger = claimed->trigger;
  const ClaimDecision& valid = claimed->decision;
  ASSERT_EQ(valid.new_next_fire_at_ms, claimed->cursor + 1'000);
  const std::string claimed_row = ScheduleRow(trigger);
  EXPECT_EQ(a_->TakeNextFireMismatches(), 0);
  // Skipping the next second's occurrence, or declaring the trigger exhausted.
  for (bool exhausted : {false, true}) {
    SCOPED_TRACE(exhausted ? "exhausted" : "skipping");
    ClaimDecision decision = valid;
    if (exhausted) {
      decision.new_next_fire_at_ms.reset();
      decision.exhausted = true;
    } else {
      decision.new_next_fire_at_ms = claimed->cursor + 2'000;
    }
    EXPECT_TRUE(HasError(a_->CommitClaimDecision(decision), StatusCode::kInvalidArgument,
                         "next_fire_mismatch"));
    EXPECT_EQ(ScheduleRow(trigger), claimed_row);  // the claim stays until it expires
    EXPECT_EQ(Written(), "0|0|0");
    EXPECT_EQ(a_->TakeNextFireMismatches(), 1);
  }

  // In a batch only the refused decision is left out, and it is counted once.
  std::optional<Claimed> other = ClaimedAdmission("on-time");
  ASSERT_TRUE(other.has_value());
  ClaimDecision skipping = valid;
  skipping.new_next_fire_at_ms = claimed->cursor + 2'000;
  Result<std::vector<ClaimCommitResult>> results =
      a_->CommitClaimDecisions({skipping, other->decision});
  ASSERT_TRUE(results.ok()) << results.status().ToString();
  ASSERT_EQ(results->size(), 2u);
  EXPECT_TRUE(HasError((*results)[0].error, StatusCode::kInvalidArgument, "next_fire_mismatch"));
  EXPECT_TRUE((*results)[1].error.ok()) << (*results)[1].error.ToString();
  EXPECT_EQ((*results)[1].outcome, AdvanceOutcome::kApplied);
  EXPECT_EQ(ScheduleRow(trigger), claimed_row);
  EXPECT_EQ(Written(), "1|1|0");
  EXPECT_EQ(a_->TakeNextFireMismatches(), 1);

  EXPECT_TRUE(Outcome(a_->CommitClaimDecision(valid), AdvanceOutcome::kApplied));
  EXPECT_EQ(Written(), "2|2|0");
  EXPECT_EQ(SqlInt("SELECT next_fire_at_ms" + Where(trigger)), claimed->cursor + 1'000);
  EXPECT_EQ(a_->TakeNextFireMismatches(), 0);
}

TEST_P(ClusterScheduleTest, ATriggerRevisionThatNoLongerHashesToItsDigestAdmitsNothing) {
  std::optional<Claimed> claimed = ClaimedAdmission("retimed", 60'000);
  ASSERT_TRUE(claimed.has_value());
  const std::string& trigger = claimed->trigger;
  const ScheduleClaim* claim = &claimed->claim;
  const ClaimDecision& decision = claimed->decision;
  const std::string claimed_row = ScheduleRow(trigger);
  auto rewrite = [&](const std::string& set) {
    Sql("ALTER TABLE ql3.trigger_revisions DISABLE TRIGGER trigger_revisions_immutable;\n"
        "UPDATE ql3.trigger_revisions SET " +
        set + " WHERE trigger_id = '" + trigger +
        "';\n"
        "ALTER TABLE ql3.trigger_revisions ENABLE TRIGGER trigger_revisions_immutable;");
  };
  // The stored content changed under its digest: corrupt.
  rewrite("expression = '*/2 * * * * *'");
  EXPECT_TRUE(HasError(a_->CommitClaimDecision(decision), StatusCode::kCorrupt,
                       "trigger_digest_mismatch"));
  EXPECT_EQ(ScheduleRow(trigger), claimed_row);
  EXPECT_EQ(Written(), "0|0|0");
  // Other content with its own valid digest under the same revision: not what the decision
  // followed, so it raced.
  TriggerRevisionRecord other = claim->due.trigger;
  other.expression = "*/2 * * * * *";
  rewrite("content_digest = '" + TriggerContentDigest(other) + "'");
  EXPECT_TRUE(Outcome(a_->CommitClaimDecision(decision), AdvanceOutcome::kRaced));
  EXPECT_EQ(ScheduleRow(trigger), claimed_row);
  EXPECT_EQ(Written(), "0|0|0");
  // The decision's own content, restored, admits.
  rewrite("expression = '" + std::string(kEverySecond) + "', content_digest = '" +
          claim->due.trigger.content_digest + "'");
  EXPECT_TRUE(Outcome(a_->CommitClaimDecision(decision), AdvanceOutcome::kApplied));
  EXPECT_EQ(Written(), "1|1|0");
}

TEST_P(ClusterScheduleTest, AJitteredOccurrenceIsAdmittedOnlyWithItsOwnReleaseTime) {
  const std::string trigger =
      NewTrigger(NewTask("jittered"), kEverySecond, "skip", "allow", /*jitter_ms=*/30'000);
  SetCursor(trigger, SecondAgo(2'000));
  std::optional<ScheduleClaim> claim = ClaimOnly(*a_, trigger, "replica-a", 30'000);
  ASSERT_TRUE(claim.has_value());
  const ClaimDecision decision = Decide(*claim);
  ASSERT_TRUE(decision.run.has_value());
  ASSERT_TRUE(decision.run->scheduled_for_ms.has_value());
  const int64_t occurrence = *decision.run->scheduled_for_ms;
  const int64_t release = occurrence + JitterOffsetMs(trigger, occurrence, 30'000);
  EXPECT_EQ(decision.run->release_at_ms, release);
  const std::string claimed_row = ScheduleRow(trigger);
  // A decision whose release time is not the stored revision's offset admits nothing.
  for (std::optional<int64_t> wrong : {std::optional<int64_t>(), std::optional<int64_t>(release + 1)}) {
    ClaimDecision bad = decision;
    bad.run->release_at_ms = wrong;
    EXPECT_TRUE(HasError(a_->CommitClaimDecision(bad), StatusCode::kInvalidArgument,
                         "invalid_schedule_advance"));
    EXPECT_EQ(ScheduleRow(trigger), claimed_row);
    EXPECT_EQ(Written(), "0|0|0");
  }
  EXPECT_TRUE(Outcome(a_->CommitClaimDecision(decision), AdvanceOutcome::kApplied));
  EXPECT_EQ(Written(), "1|1|0");
  // Admitted on time, queued until its release time.
  EXPECT_EQ(Sql("SELECT queued_at_ms >= " + std::to_string(release) + " FROM ql3.runs WHERE id = '" +
                decision.run->run_id + "'"),
            "t");
}

TEST_P(ClusterScheduleTest, AHolderStalledInsideItsAdmissionPastItsExpiryAdmitsNothing) {
  std::optional<Claimed> claimed = ClaimedAdmission("stalled holder", 1'000);
  ASSERT_TRUE(claimed.has_value());
  const std::string& trigger = claimed->trigger;
  const ScheduleClaim* claim = &claimed->claim;
  const ClaimDecision& decision = claimed->decision;
  const std::string claimed_row = ScheduleRow(trigger);
  // Everything is written and every lock-time check held; then the holder stalls inside the
  // transaction (busy, so no idle bound ends it) until the database clock passes the expiry.
  int64_t woke_ms = 0;
  a_->SetWriteFaultForTesting([&](std::string_view step, pg::Tx& tx) -> Status {
    if (step != "run") return Status::Ok();
    QL_ASSIGN_OR_RETURN(
        pg::Rows slept,
        tx.Exec("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint FROM "
                "pg_sleep(greatest($1::bigint - (extract(epoch FROM clock_timestamp()) * "
                "1000)::bigint + 200, 0) / 1000.0)",
                {pg::P(claim->expires_at_ms)}));
    woke_ms = slept.Int(0, 0);
    return slept.status();
  });
  EXPECT_TRUE(Outcome(a_->CommitClaimDecision(decision), AdvanceOutcome::kRaced));
  EXPECT_GT(woke_ms, claim->expires_at_ms);
  EXPECT_EQ(ScheduleRow(trigger), claimed_row);
  EXPECT_EQ(Written(), "0|0|0");
  a_->SetWriteFaultForTesting(nullptr);
  // The rows are free for the next holder, which admits the occurrence once.
  std::optional<ScheduleClaim> taken = ClaimOnly(*b_, trigger, "replica-b");
  ASSERT_TRUE(taken.has_value());
  EXPECT_TRUE(Outcome(b_->CommitClaimDecision(Decide(*taken)), AdvanceOutcome::kApplied));
  EXPECT_EQ(Written(), "1|1|0");
}

TEST_P(ClusterScheduleTest, AFrozenHolderLosesItsRowsToAnotherReplicaWithinTheLeasePlusTwoSeconds) {
  constexpr int64_t kLeaseMs = 2'000;
  std::optional<Claimed> claimed = ClaimedAdmission("frozen holder", kLeaseMs);
  ASSERT_TRUE(claimed.has_value());
  const std::string& trigger = claimed->trigger;
  const int64_t cursor = claimed->cursor;
  const ScheduleClaim* claim = &claimed->claim;
  const ClaimDecision& decision = claimed->decision;
  // The holder freezes with its rows locked and its transaction open, idle, until well past
  // the expiry (as a SIGSTOPped process would).
  std::atomic<bool> frozen{false};
  a_->SetWriteFaultForTesting([&](std::string_view step, pg::Tx&) -> Status {
    if (step != "run") return Status::Ok();
    frozen = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(kLeaseMs + 4'000));
    return Status::Ok();
  });
  Result<AdvanceOutcome> holder = Internal("not_run", "the holder did not run");
  std::thread holding([&] { holder = a_->CommitClaimDecision(decision); });
  while (!frozen) std::this_thread::sleep_for(std::chrono::milliseconds(5));

  // Another replica keeps trying; it gets the row once the holder's session is gone.
  std::optional<ScheduleClaim> taken;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (!taken.has_value() && std::chrono::steady_clock::now() < deadline) {
    std::vector<ScheduleClaim> got = Claim(*b_, Request("replica-b", 16, 30'000));
    if (!got.empty()) taken = got.front();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  holding.join();
  ASSERT_TRUE(taken.has_value()) << "nobody took the frozen holder's row over";
  EXPECT_EQ(taken->due.schedule.trigger_id, trigger);
  EXPECT_GE(taken->acquired_at_ms, claim->expires_at_ms);
  std::cout << "[frozen-holder] lease " << kLeaseMs << " ms; taken over "
            << taken->acquired_at_ms - claim->expires_at_ms << " ms after the expiry\n";
  EXPECT_LE(taken->acquired_at_ms, claim->expires_at_ms + 2'000)
      << "taken over " << taken->acquired_at_ms - claim->expires_at_ms
      << " ms after the expiry";
  // The frozen holder admitted nothing: its session ended (or its COMMIT reading saw the
  // expiry) and everything it wrote was rolled back.
  EXPECT_FALSE(holder.ok() && *holder == AdvanceOutcome::kApplied);
  EXPECT_EQ(Written(), "0|0|0");
  EXPECT_TRUE(Outcome(b_->CommitClaimDecision(Decide(*taken)), AdvanceOutcome::kApplied));
  EXPECT_EQ(Sql("SELECT scheduled_for_ms FROM ql3.runs"), std::to_string(cursor));
}

TEST_P(ClusterScheduleTest, ACorruptExecutionRevisionAdmitsNothing) {
  TaskView task = NewTask("tampered");
  const std::string trigger = NewTrigger(task, kEverySecond);
  // A second trigger of the task, not due yet (the service refuses triggers on a corrupt plan).
  const std::string other = NewTrigger(task, kEverySecond);
  SetCursor(other, DbNowMs() + 3'600'000);
  SetCursor(trigger, SecondAgo(2'000));
  std::optional<ScheduleClaim> claim = ClaimOnly(*a_, trigger, "replica-a");
  ASSERT_TRUE(claim.has_value());
  // Decided (and the plan verified and cached by the decider) before the corruption.
  const ClaimDecision decision = Decide(*claim);
  ASSERT_TRUE(decision.run.has_value());
  const std::string execution = ExecutionId(task);
  Sql("ALTER TABLE ql3.execution_revisions DISABLE TRIGGER execution_revisions_immutable;\n"
      "UPDATE ql3.execution_revisions SET plan_json = replace(plan_json, 'echo tampered', "
      "'echo altered') WHERE id = '" +
      execution +
      "';\n"
      "ALTER TABLE ql3.execution_revisions ENABLE TRIGGER execution_revisions_immutable;");
  ASSERT_EQ(Sql("SELECT count(*) FROM ql3.execution_revisions WHERE plan_json LIKE "
                "'%echo altered%'"),
            "1");
  const std::string claimed_row = ScheduleRow(trigger);
  EXPECT_TRUE(HasError(a_->CommitClaimDecision(decision), StatusCode::kCorrupt,
                       "execution_revision_invalid"));
  EXPECT_EQ(ScheduleRow(trigger), claimed_row);
  EXPECT_EQ(Written(), "0|0|0");

  // A fresh coordinator reads the plan anew for another trigger of the task: the round counts
  // the error and admits nothing; the failed row keeps the round's claim until it expires.
  const int64_t other_cursor = SecondAgo(2'000);
  SetCursor(other, other_cursor);
  Metrics metrics;
  testing::SeededRandom random(11);
  ClusterScheduler scheduler(*b_, store_b_->definitions(), random, metrics,
                             SchedulerOptions("replica-b"));
  Result<RoundReport> report = scheduler.RunRound();
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->rows, 1);
  EXPECT_EQ(report->errors, 1);
  EXPECT_EQ(report->admitted, 0);
  EXPECT_EQ(report->first_error.code(), StatusCode::kCorrupt) << report->first_error.ToString();
  EXPECT_EQ(Sample(metrics, "ql_scheduler_errors_total"), 1);
  EXPECT_EQ(Written(), "0|0|0");
  EXPECT_EQ(Sql("SELECT claim_owner, next_fire_at_ms" + Where(other)),
            "replica-b|" + std::to_string(other_cursor));
  // No spinning on the failed row: the next round waits.
  Result<int64_t> delay = scheduler.NextDelayMs(*report);
  ASSERT_TRUE(delay.ok()) << delay.status().ToString();
  EXPECT_GT(*delay, 0);
}

TEST_P(ClusterScheduleTest, AStaleTaskPinAdmitsNothingUntilTheTriggerIsRepinned) {
  TaskView task = NewTask("republished");
  const std::string trigger = NewTrigger(task, kEverySecond);
  SetCursor(trigger, SecondAgo(2'000));
  std::optional<ScheduleClaim> claim = ClaimOnly(*a_, trigger, "replica-a", 60'000);
  ASSERT_TRUE(claim.has_value());
  const ClaimDecision decision = Decide(*claim);
  ASSERT_TRUE(decision.run.has_value());
  Result<PublishedTask> republished = control_->PublishTaskRevision(
      task.head.task_id, 1, TaskWrite{TaskBody("republished", "echo revision 2"), std::nullopt});
  ASSERT_TRUE(republished.ok()) << republished.status().ToString();
  ASSERT_EQ(republished->task.revision.revision, 2);

  const std::string claimed_row = ScheduleRow(trigger);
  EXPECT_TRUE(Outcome(a_->CommitClaimDecision(decision), AdvanceOutcome::kRaced));
  EXPECT_EQ(ScheduleRow(trigger), claimed_row);
  EXPECT_EQ(Written(), "0|0|0");

  // Let the claim's lease end (as the database clock would): the row is due and unclaimed, but
  // its pin is stale, so no replica claims it and nothing is due.
  Sql("UPDATE ql3.trigger_schedules SET claim_expires_at_ms = updated_at_ms + 1" +
      std::string(" WHERE trigger_id = '") + trigger + "'");
  EXPECT_TRUE(Claim(*b_, Request("replica-b", 256)).empty());
  Result<std::optional<int64_t>> until = b_->MsUntilNextDue();
  ASSERT_TRUE(until.ok()) << until.status().ToString();
  EXPECT_FALSE(until->has_value());
  Result<TriggerView> view = control_->GetTrigger(trigger);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_EQ(view->state, "pin_stale");

  // Repinned, the trigger follows the new task revision from scratch.
  Result<PublishedTrigger> repinned = control_->RepinTrigger(trigger);
  ASSERT_TRUE(repinned.ok()) << repinned.status().ToString();
  std::vector<ScheduleClaim> again = Claim(*b_, Request("replica-b"));
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].due.schedule.trigger_id, trigger);
  EXPECT_EQ(again[0].due.schedule.trigger_revision, 2);
  EXPECT_EQ(again[0].due.trigger.task_revision, 2);
  EXPECT_FALSE(again[0].due.schedule.next_fire_at_ms.has_value());
  EXPECT_EQ(again[0].claim_version, claim->claim_version + 2);  // the publish, then this claim
  EXPECT_EQ(again[0].execution_revision_id, ExecutionId(task, 2));
}

TEST_P(ClusterScheduleTest, AnAcquisitionTimeAheadOfTheDatabaseClockFailsClosed) {
  TaskView task = NewTask("regressed");
  const std::string trigger = NewTrigger(task, kEverySecond);
  SetCursor(trigger, SecondAgo(2'000));
  std::optional<ScheduleClaim> claim = ClaimOnly(*a_, trigger, "replica-a");
  ASSERT_TRUE(claim.has_value());
  const ClaimDecision decision = Decide(*claim);
  ASSERT_TRUE(decision.run.has_value());
  ClaimDecision ahead = decision;
  ahead.claim.acquired_at_ms += 3'600'000;
  const std::string claimed_row = ScheduleRow(trigger);
  EXPECT_TRUE(HasError(a_->CommitClaimDecision(ahead), StatusCode::kCorrupt, "clock_regression"));
  EXPECT_EQ(ScheduleRow(trigger), claimed_row);
  EXPECT_EQ(Written(), "0|0|0");
  EXPECT_TRUE(Outcome(a_->CommitClaimDecision(decision), AdvanceOutcome::kApplied));
}

TEST_P(ClusterScheduleTest, APublishFromANodeWhoseClockIsADayAheadInitialisesFromTheDatabase) {
  // A management node whose clock runs a day ahead of the database publishes the trigger.
  testing::FakeClock node(DbNowMs() + 86'400'000);
  ControlOptions options;
  options.executor_type = kRemote;
  options.grace_ms = kGraceMs;
  ControlService skewed(*store_a_, node, random_, options);
  Result<PublishedTask> task =
      skewed.PublishTask(TaskWrite{TaskBody("skewed", "echo skewed"), std::nullopt});
  ASSERT_TRUE(task.ok()) << task.status().ToString();
  TriggerWrite write;
  write.task_id = task->task.head.task_id;
  write.expression = "* * * * *";
  write.timezone = "UTC";
  write.misfire = "skip";
  const int64_t before = DbNowMs();
  Result<PublishedTrigger> trigger = skewed.AddTrigger(write);
  const int64_t after = DbNowMs();
  ASSERT_TRUE(trigger.ok()) << trigger.status().ToString();
  const std::string id = trigger->trigger.head.trigger_id;
  const int64_t published = SqlInt("SELECT published_at_ms" + Where(id));
  EXPECT_GE(published, before);
  EXPECT_LE(published, after);
  EXPECT_EQ(SqlInt("SELECT updated_at_ms" + Where(id)), published);

  // The cursor is initialised to the first minute after the database's publication time, not a
  // day later, and the claim is the first that can admit it.
  std::optional<ScheduleClaim> claim = ClaimOnly(*a_, id, "replica-a");
  ASSERT_TRUE(claim.has_value());
  const ClaimDecision init = Decide(*claim);
  EXPECT_FALSE(init.run.has_value());
  ASSERT_TRUE(init.new_next_fire_at_ms.has_value());
  EXPECT_EQ(*init.new_next_fire_at_ms, NextFireAfter("* * * * *", published));
  EXPECT_LE(*init.new_next_fire_at_ms, claim->acquired_at_ms + 60'000);
  EXPECT_TRUE(Outcome(a_->CommitClaimDecision(init), AdvanceOutcome::kApplied));
  EXPECT_EQ(SqlInt("SELECT next_fire_at_ms" + Where(id)), *init.new_next_fire_at_ms);
}

TEST_P(ClusterScheduleTest, AnAdmittedOccurrenceIsNotAdmittedAgainAndItsCursorMovesOn) {
  TaskView task = NewTask("once");
  const std::string trigger = NewTrigger(task, kEverySecond);
  const int64_t cursor = SecondAgo(2'000);
  SetCursor(trigger, cursor);
  std::optional<ScheduleClaim> claim = ClaimOnly(*a_, trigger, "replica-a");
  ASSERT_TRUE(claim.has_value());
  const ClaimDecision first = Decide(*claim);
  ASSERT_TRUE(first.run.has_value());
  EXPECT_TRUE(Outcome(a_->CommitClaimDecision(first), AdvanceOutcome::kApplied));

  // The cursor is forced back onto the admitted occurrence, and it is claimed and decided
  // again with every fence intact.
  SetCursor(trigger, cursor);
  std::optional<ScheduleClaim> replay = ClaimOnly(*b_, trigger, "replica-b");
  ASSERT_TRUE(replay.has_value());
  const ClaimDecision second = Decide(*replay);
  ASSERT_TRUE(second.run.has_value());
  EXPECT_EQ(second.run->idempotency_key, first.run->idempotency_key);
  EXPECT_NE(second.run->run_id, first.run->run_id);
  // No second run; the cursor moves past the occurrence and the claim is cleared, so the
  // trigger goes on with its next occurrence instead of racing on this one forever.
  EXPECT_TRUE(Outcome(b_->CommitClaimDecision(second), AdvanceOutcome::kAlreadyAdmitted));
  EXPECT_EQ(Sql("SELECT id FROM ql3.runs"), first.run->run_id);
  EXPECT_EQ(Written(), "1|1|0");
  EXPECT_EQ(Sql("SELECT next_fire_at_ms, last_scheduled_at_ms, state_version, claim_owner IS NULL, "
                "claim_token IS NULL, claim_expires_at_ms IS NULL" +
                Where(trigger)),
            std::to_string(cursor + 1'000) + "|" + std::to_string(cursor) + "|" +
                std::to_string(replay->due.schedule.state_version + 1) + "|t|t|t");
}

// DESIGN §11 in the cluster admission: the overlap policy and the concurrency limit are decided
// in the batch transaction, against the runs as they stand and those the batch admits.
TEST_P(ClusterScheduleTest, ForbidSkipsAndReplaceCancelsInTheClusterAdmission) {
  const std::string forbid = NewTrigger(NewTask("forbid"), kEverySecond, "skip", "forbid");
  const std::string replace = NewTrigger(NewTask("replace"), kEverySecond, "skip", "replace");
  const int64_t cursor = SecondAgo(3'000);
  SetCursor(forbid, cursor);
  SetCursor(replace, cursor);
  std::vector<ClaimDecision> first;
  for (const ScheduleClaim& claim : Claim(*a_, Request("replica-a"))) first.push_back(Decide(claim));
  ASSERT_EQ(first.size(), 2u);
  Result<std::vector<ClaimCommitResult>> one = a_->CommitClaimDecisions(first);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  for (const ClaimCommitResult& r : *one) EXPECT_EQ(r.outcome, AdvanceOutcome::kApplied);

  // The next occurrences, while both first runs are still queued.
  std::vector<ClaimDecision> second;
  for (const ScheduleClaim& claim : Claim(*b_, Request("replica-b"))) {
    second.push_back(Decide(claim));
  }
  ASSERT_EQ(second.size(), 2u);
  Result<std::vector<ClaimCommitResult>> two = b_->CommitClaimDecisions(second);
  ASSERT_TRUE(two.ok()) << two.status().ToString();
  for (size_t k = 0; k < second.size(); ++k) {
    const std::string& trigger = second[k].claim.due.schedule.trigger_id;
    const std::string run_id = second[k].run->run_id;
    const std::string before = first[0].claim.due.schedule.trigger_id == trigger
                                   ? first[0].run->run_id
                                   : first[1].run->run_id;
    if (trigger == forbid) {
      EXPECT_EQ((*two)[k].outcome, AdvanceOutcome::kSkipped);
      EXPECT_EQ(Sql("SELECT status, error_code, (SELECT count(*) FROM ql3.run_attempts a WHERE "
                    "a.run_id = r.id) FROM ql3.runs r WHERE r.id = '" + run_id + "'"),
                "skipped|overlap|0");
      EXPECT_EQ(Sql("SELECT status FROM ql3.runs WHERE id = '" + before + "'"), "queued");
    } else {
      EXPECT_EQ((*two)[k].outcome, AdvanceOutcome::kApplied);
      EXPECT_EQ(Sql("SELECT status, cancel_reason FROM ql3.runs WHERE id = '" + before + "'"),
                "cancelled|replaced");
      EXPECT_EQ(Sql("SELECT status FROM ql3.runs WHERE id = '" + run_id + "'"), "queued");
    }
  }
}

TEST_P(ClusterScheduleTest, AConcurrencyLimitCountsTheRunsTheSameBatchAdmits) {
  json body = TaskBody("limited", "echo limited");
  body["concurrency"] = 1;
  Result<PublishedTask> task = control_->PublishTask(TaskWrite{body, std::nullopt});
  ASSERT_TRUE(task.ok()) << task.status().ToString();
  const std::string a = NewTrigger(task->task, kEverySecond);
  const std::string b = NewTrigger(task->task, kEverySecond);
  SetCursor(a, SecondAgo(2'000));
  SetCursor(b, SecondAgo(2'000));
  std::vector<ClaimDecision> decisions;
  for (const ScheduleClaim& claim : Claim(*a_, Request("replica-a"))) {
    decisions.push_back(Decide(claim));
  }
  ASSERT_EQ(decisions.size(), 2u);
  Result<std::vector<ClaimCommitResult>> done = a_->CommitClaimDecisions(decisions);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ((*done)[0].outcome, AdvanceOutcome::kApplied);
  EXPECT_EQ((*done)[1].outcome, AdvanceOutcome::kSkipped);
  EXPECT_EQ(Sql("SELECT string_agg(status || ':' || coalesce(error_code, '-'), ',' ORDER BY "
                "status) FROM ql3.runs"),
            "queued:-,skipped:concurrency");
}

TEST_P(ClusterScheduleTest, ACoordinatorMovesACursorOffAnAdmittedOccurrenceAndCountsIt) {
  TaskView task = NewTask("stalled");
  const std::string trigger = NewTrigger(task, kEverySecond);
  const int64_t cursor = SecondAgo(5'000);
  SetCursor(trigger, cursor);
  Metrics metrics;
  testing::SeededRandom random(17);
  ClusterScheduler scheduler(*a_, store_a_->definitions(), random, metrics,
                             SchedulerOptions("replica-a"));
  Result<RoundReport> admitted = scheduler.RunRound();
  ASSERT_TRUE(admitted.ok()) << admitted.status().ToString();
  ASSERT_EQ(admitted->admitted, 1) << admitted->first_error.ToString();

  SetCursor(trigger, cursor);  // back onto the admitted occurrence
  Result<RoundReport> moved = scheduler.RunRound();
  ASSERT_TRUE(moved.ok()) << moved.status().ToString();
  EXPECT_EQ(moved->already_admitted, 1);
  EXPECT_EQ(moved->raced, 0);
  EXPECT_EQ(moved->admitted, 0);
  EXPECT_EQ(moved->errors, 0) << moved->first_error.ToString();
  EXPECT_TRUE(moved->still_due);
  EXPECT_EQ(Sample(metrics, R"(ql_scheduler_occurrences_total{outcome="already_admitted"})"), 1);
  EXPECT_EQ(SqlInt("SELECT next_fire_at_ms" + Where(trigger)), cursor + 1'000);

  // The next round admits the next occurrence.
  Result<RoundReport> next = scheduler.RunRound();
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ(next->admitted, 1) << next->first_error.ToString();
  EXPECT_EQ(Sql("SELECT string_agg(scheduled_for_ms::text, ',' ORDER BY scheduled_for_ms) FROM "
                "ql3.runs"),
            std::to_string(cursor) + "," + std::to_string(cursor + 1'000));
}

// ---------------------------------------------------------------------------------------------
// Coordinators

TEST_P(ClusterScheduleTest, ABurstDoublesTheBatchWhileRoundsComeBackFullThenShrinksIt) {
  constexpr int kTriggers = 40;
  TaskView task = NewTask("burst");
  for (int i = 0; i < kTriggers; ++i) ASSERT_FALSE(NewTrigger(task, kYearly).empty());
  testing::SeededRandom random(3);
  Metrics metrics;
  ClusterSchedulerOptions options = SchedulerOptions("burst");
  options.claims_per_round = 4;
  options.max_claims_per_round = 16;
  ASSERT_TRUE(ClusterScheduler::ValidateOptions(options).ok());
  ClusterScheduler scheduler(*a_, store_a_->definitions(), random, metrics, options);
  // Every row needs its first decision (initialisation) now: 4, 8, 16, then 12 left.
  std::vector<int> rows;
  for (int round = 0; round < 5; ++round) {
    Result<RoundReport> report = scheduler.RunRound();
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    rows.push_back(report->rows);
  }
  EXPECT_EQ(rows, (std::vector<int>{4, 8, 16, 12, 0}));
  // A bad bound is refused with its name.
  options.max_claims_per_round = 2;
  EXPECT_EQ(ClusterScheduler::ValidateOptions(options).reason(), "invalid_scheduler_option");
  options.max_claims_per_round = 257;
  EXPECT_EQ(ClusterScheduler::ValidateOptions(options).reason(), "invalid_scheduler_option");
}

// Delegates to a repository; runs `before_commit` before each batch commit.
class PausingSchedules final : public ClusterScheduleRepository {
 public:
  PausingSchedules(ClusterScheduleRepository& inner, std::function<void()> before_commit)
      : inner_(inner), before_commit_(std::move(before_commit)) {}
  Result<std::vector<ScheduleClaim>> ClaimDueSchedules(const ClaimRequest& request) override {
    return inner_.ClaimDueSchedules(request);
  }
  Result<AdvanceOutcome> CommitClaimDecision(const ClaimDecision& decision) override {
    return inner_.CommitClaimDecision(decision);
  }
  Result<std::vector<ClaimCommitResult>> CommitClaimDecisions(
      const std::vector<ClaimDecision>& decisions) override {
    if (before_commit_) before_commit_();
    return inner_.CommitClaimDecisions(decisions);
  }
  Result<std::optional<int64_t>> MsUntilNextDue() override { return inner_.MsUntilNextDue(); }

 private:
  ClusterScheduleRepository& inner_;
  std::function<void()> before_commit_;
};

TEST_P(ClusterScheduleTest, ACoordinatorWhoseClaimsWereTakenOverCountsThemRaced) {
  constexpr int kTriggers = 3;
  TaskView task = NewTask("raced");
  const int64_t cursor = SecondAgo(2'000);
  for (int i = 0; i < kTriggers; ++i) SetCursor(NewTrigger(task, kEverySecond), cursor);
  Metrics metrics_a, metrics_b;
  testing::SeededRandom random_a(21), random_b(22);
  ClusterSchedulerOptions options_b = SchedulerOptions("replica-b");
  ClusterScheduler b(*b_, store_b_->definitions(), random_b, metrics_b, options_b);
  // Replica A decides, then stalls past its 1 s lease before committing; meanwhile replica B
  // claims the expired rows and admits them.
  Result<RoundReport> round_b = Internal("not_run", "");
  int64_t a_expiry = 0;
  PausingSchedules paused(*a_, [&] {
    a_expiry = SqlInt("SELECT max(claim_expires_at_ms) FROM ql3.trigger_schedules");
    WaitForDbClockPast(a_expiry);
    round_b = b.RunRound();
  });
  ClusterSchedulerOptions options_a = SchedulerOptions("replica-a");
  options_a.lease_ms = 1'000;
  ClusterScheduler a(paused, store_a_->definitions(), random_a, metrics_a, options_a);
  Result<RoundReport> round_a = a.RunRound();
  ASSERT_TRUE(round_a.ok()) << round_a.status().ToString();
  ASSERT_TRUE(round_b.ok()) << round_b.status().ToString();
  // The interleaving the test claims: B claimed after A's claims expired and admitted all.
  EXPECT_EQ(round_b->rows, kTriggers);
  EXPECT_EQ(round_b->admitted, kTriggers) << round_b->first_error.ToString();
  EXPECT_GT(a_expiry, 0);
  EXPECT_EQ(round_a->rows, kTriggers);
  EXPECT_EQ(round_a->raced, kTriggers);
  EXPECT_EQ(round_a->admitted, 0);
  EXPECT_EQ(round_a->errors, 0) << round_a->first_error.ToString();
  EXPECT_EQ(Sample(metrics_a, R"(ql_scheduler_occurrences_total{outcome="raced"})"), kTriggers);
  EXPECT_EQ(Sample(metrics_b, R"(ql_scheduler_occurrences_total{outcome="admit"})"), kTriggers);
  EXPECT_EQ(Sql("SELECT count(*), count(DISTINCT trigger_id), min(scheduled_for_ms), "
                "max(scheduled_for_ms) FROM ql3.runs"),
            std::to_string(kTriggers) + "|" + std::to_string(kTriggers) + "|" +
                std::to_string(cursor) + "|" + std::to_string(cursor));
}

TEST_P(ClusterScheduleTest, WholeTransactionRerunsOfAdmissionsAreCounted) {
  std::optional<Claimed> claimed = ClaimedAdmission("rerun");
  ASSERT_TRUE(claimed.has_value());
  const std::string& trigger = claimed->trigger;
  const ClaimDecision& decision = claimed->decision;
  // Two serialization failures, then the admission goes through.
  int failures = 0;
  a_->SetWriteFaultForTesting([&](std::string_view step, pg::Tx&) -> Status {
    if (step != "run" || failures >= 2) return Status::Ok();
    ++failures;
    return Busy("serialization_failure", "injected");
  });
  EXPECT_TRUE(Outcome(a_->CommitClaimDecision(decision), AdvanceOutcome::kApplied));
  AdmissionRetryStats stats = a_->TakeAdmissionRetryStats();
  EXPECT_EQ(stats.retries, 2);
  EXPECT_EQ(stats.exhausted, 0);
  EXPECT_EQ(a_->TakeAdmissionRetryStats().retries, 0);  // taken means reset
  // Failures that never stop exhaust the reruns (the next second is due already).
  std::optional<ScheduleClaim> again = ClaimOnly(*a_, trigger, "replica-a");
  ASSERT_TRUE(again.has_value());
  a_->SetWriteFaultForTesting([](std::string_view step, pg::Tx&) -> Status {
    return step == "run" ? Busy("serialization_failure", "injected") : Status::Ok();
  });
  EXPECT_TRUE(HasError(a_->CommitClaimDecision(Decide(*again)), StatusCode::kUnavailable,
                       "retry_exhausted"));
  stats = a_->TakeAdmissionRetryStats();
  EXPECT_GE(stats.retries, 1);
  EXPECT_EQ(stats.exhausted, 1);
  a_->SetWriteFaultForTesting(nullptr);
}

TEST_P(ClusterScheduleTest, TwoCoordinatorsAdmitEverySecondOfEveryTriggerExactlyOnce) {
  constexpr int kTriggers = 10;
  TaskView task = NewTask("every second");
  for (int i = 0; i < kTriggers; ++i) ASSERT_FALSE(NewTrigger(task, kEverySecond).empty());

  struct Replica {
    std::string owner;
    PostgresClusterSchedules* schedules;
    PostgresStore* store;
    uint64_t seed;
    Metrics metrics{};
    RoundReport total{};
    int rounds = 0;
    Status error{};
  };
  Replica replicas[2] = {{"replica-a", a_.get(), store_a_.get(), 1},
                         {"replica-b", b_.get(), store_b_.get(), 2}};
  std::atomic<bool> stop{false};
  auto loop = [&stop](Replica& r) {
    testing::SeededRandom random(r.seed);
    ClusterSchedulerOptions options = SchedulerOptions(r.owner);
    options.claims_per_round = 4;  // smaller than the row count: full pages, back-to-back rounds
    r.error = ClusterScheduler::ValidateOptions(options);
    if (!r.error.ok()) return;
    ClusterScheduler scheduler(*r.schedules, r.store->definitions(), random, r.metrics, options);
    while (!stop) {
      Result<RoundReport> report = scheduler.RunRound();
      if (!report.ok()) {
        r.error = report.status();
        return;
      }
      ++r.rounds;
      r.total.rows += report->rows;
      r.total.initialized += report->initialized;
      r.total.admitted += report->admitted;
      r.total.skipped += report->skipped;
      r.total.raced += report->raced;
      r.total.errors += report->errors;
      if (r.total.first_error.ok()) r.total.first_error = report->first_error;
      Result<int64_t> delay = scheduler.NextDelayMs(*report);
      if (!delay.ok()) {
        r.error = delay.status();
        return;
      }
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(*delay);
      while (!stop && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
  };
  std::thread first(loop, std::ref(replicas[0]));
  std::thread second(loop, std::ref(replicas[1]));
  std::this_thread::sleep_for(std::chrono::milliseconds(4'000));
  stop = true;
  first.join();
  second.join();
  const int64_t stopped = DbNowMs();

  RoundReport total;
  double admit_samples = 0;
  double initialize_samples = 0;
  for (const Replica& r : replicas) {
    SCOPED_TRACE(r.owner);
    EXPECT_TRUE(r.error.ok()) << r.error.ToString();
    EXPECT_EQ(r.total.errors, 0) << r.total.first_error.ToString();
    EXPECT_GT(r.rounds, 0);
    EXPECT_EQ(Sample(r.metrics, "ql_scheduler_rounds_total"), r.rounds);
    total.initialized += r.total.initialized;
    total.admitted += r.total.admitted;
    total.skipped += r.total.skipped;
    total.raced += r.total.raced;
    admit_samples += Sample(r.metrics, R"(ql_scheduler_occurrences_total{outcome="admit"})");
    initialize_samples +=
        Sample(r.metrics, R"(ql_scheduler_occurrences_total{outcome="initialize"})");
  }
  EXPECT_EQ(total.initialized, kTriggers);
  EXPECT_EQ(total.skipped, 0);
  EXPECT_EQ(total.raced, 0);
  EXPECT_EQ(initialize_samples, kTriggers);
  const int64_t runs = SqlInt("SELECT count(*) FROM ql3.runs");
  EXPECT_EQ(total.admitted, runs);
  EXPECT_EQ(admit_samples, runs);
  EXPECT_EQ(Written(), std::to_string(runs) + "|" + std::to_string(runs) + "|0");
  EXPECT_EQ(Sql("SELECT count(*) FROM (SELECT trigger_id, scheduled_for_ms FROM ql3.runs "
                "GROUP BY 1, 2 HAVING count(*) > 1) d"),
            "0");
  EXPECT_EQ(Sql("SELECT count(*) FROM ql3.trigger_schedules WHERE claim_owner IS NOT NULL"), "0");

  // Per trigger: the first second after its publication, then every second without a gap, up
  // to within a round of the end.
  const std::string rows =
      Sql("SELECT s.published_at_ms, count(r.id), count(DISTINCT r.scheduled_for_ms), "
          "min(r.scheduled_for_ms), max(r.scheduled_for_ms), s.last_scheduled_at_ms, "
          "s.next_fire_at_ms FROM ql3.trigger_schedules s LEFT JOIN ql3.runs r ON "
          "r.trigger_id = s.trigger_id GROUP BY s.trigger_id ORDER BY s.trigger_id");
  std::istringstream lines(rows);
  int checked = 0;
  for (std::string line; std::getline(lines, line); ++checked) {
    SCOPED_TRACE(line);
    std::vector<int64_t> f;
    std::istringstream fields(line);
    for (std::string cell; std::getline(fields, cell, '|');) {
      f.push_back(std::strtoll(cell.c_str(), nullptr, 10));
    }
    ASSERT_EQ(f.size(), 7u);
    const int64_t published = f[0], count = f[1], distinct = f[2], min = f[3], max = f[4];
    EXPECT_EQ(min, NextFireAfter(kEverySecond, published));
    EXPECT_EQ(distinct, count);
    EXPECT_EQ(count, (max - min) / 1000 + 1);
    EXPECT_GE(count, 3);
    EXPECT_GE(max, stopped - 2'500);
    EXPECT_EQ(f[5], max);
    EXPECT_EQ(f[6], max + 1'000);
  }
  EXPECT_EQ(checked, kTriggers);
}

// ---------------------------------------------------------------------------------------------
// Recovery

class ClusterRecoveryTest : public ClusterScheduleTest {
 protected:
  void SetUp() override {
    ClusterScheduleTest::SetUp();
    if (HasFatalFailure()) return;
    candidates_ = std::make_unique<PostgresClusterRecovery>(store_a_->runtime_pool());
    recovery_ =
        std::make_unique<ClusterRecovery>(*candidates_, *store_a_, clock_, random_, metrics_);
  }

  // Admits the New Year occurrence of `year` of a yearly fire_once trigger; returns the run.
  std::string AdmitRun(const std::string& trigger, int year) {
    SetCursor(trigger, NewYear(year));
    std::optional<ScheduleClaim> claim = ClaimOnly(*a_, trigger, "replica-a");
    if (!claim.has_value()) return "";
    const ClaimDecision decision = Decide(*claim);
    EXPECT_TRUE(decision.run.has_value());
    if (!decision.run.has_value()) return "";
    EXPECT_TRUE(Outcome(a_->CommitClaimDecision(decision), AdvanceOutcome::kApplied));
    return decision.run->run_id;
  }

  std::string AttemptOf(const std::string& run_id) {
    return Sql("SELECT id FROM ql3.run_attempts WHERE run_id = '" + run_id +
               "' ORDER BY attempt DESC LIMIT 1");
  }

  // Moves a queued run to dispatching with its attempt starting, as a dispatcher would.
  void StartDispatching(const std::string& run_id) {
    Result<RunRecord> run = store_a_->GetRun(run_id);
    ASSERT_TRUE(run.ok()) << run.status().ToString();
    const std::string attempt = AttemptOf(run_id);
    RunTransitionCommand t;
    t.run_id = run_id;
    t.expected_version = run->version;
    t.run_to = "dispatching";
    t.attempt_id = attempt;
    t.expected_attempt_status = "claimed";
    t.attempt_to = "starting";
    t.events = {NewEvent{"run.dispatching", "dispatcher", attempt, std::nullopt, "{}"}};
    t.now_ms = clock_.NowMs();
    Result<RunRecord> moved = store_a_->ApplyTransition(t);
    ASSERT_TRUE(moved.ok()) << moved.status().ToString();
  }

  std::vector<RecoveryCandidate> Candidates() {
    Result<std::vector<RecoveryCandidate>> listed = candidates_->ListRecoveryCandidates("", 1000);
    EXPECT_TRUE(listed.ok()) << listed.status().ToString();
    return listed.ok() ? std::move(listed).value() : std::vector<RecoveryCandidate>{};
  }
  RecoveryReport RunOnce() {
    Result<RecoveryReport> report = recovery_->RunOnce();
    EXPECT_TRUE(report.ok()) << report.status().ToString();
    if (!report.ok()) return RecoveryReport{};
    EXPECT_EQ(report->errors, 0) << report->first_error.ToString();
    return *report;
  }
  std::string RunRow(const std::string& run_id) {
    return Sql("SELECT r::text FROM ql3.runs r WHERE id = '" + run_id + "'") + "\n" +
           Sql("SELECT a::text FROM ql3.run_attempts a WHERE run_id = '" + run_id +
               "' ORDER BY attempt") +
           "\n" + EventTypes(run_id);
  }
  // The run's events as the store lists them (a cron run's admission events are derived).
  std::string EventTypes(const std::string& run_id) {
    Result<std::vector<EventRecord>> events = store_a_->ListEvents(run_id, 0, 1000);
    if (!events.ok()) return events.status().ToString();
    std::string out;
    for (const EventRecord& e : *events) out += (out.empty() ? "" : ",") + e.type;
    return out;
  }

  // The node clock of recovery (settlement times, retry backoff), moved by hand.
  testing::FakeClock clock_{SystemClock().NowMs()};
  Metrics metrics_;
  std::unique_ptr<PostgresClusterRecovery> candidates_;
  std::unique_ptr<ClusterRecovery> recovery_;
};

TEST_P(ClusterRecoveryTest, APristineAdmissionIsNoCandidateAndAnyDriftMakesItOne) {
  TaskView task = NewTask("pristine");
  const std::string trigger = NewTrigger(task, kYearly, "fire_once");
  const std::string run = AdmitRun(trigger, 2020);
  ASSERT_FALSE(run.empty());
  const std::string attempt = AttemptOf(run);
  EXPECT_TRUE(Candidates().empty());
  RecoveryReport report = RunOnce();
  EXPECT_EQ(report.candidates, 0);
  const std::string pristine = RunRow(run);

  // Every field a worker, a lease or an executor would touch, one at a time.
  const std::string on_attempt = "UPDATE ql3.run_attempts SET ";
  const std::string on_run = "UPDATE ql3.runs SET ";
  const std::string attempt_where = " WHERE id = '" + attempt + "'";
  const std::string run_where = " WHERE id = '" + run + "'";
  const std::vector<std::pair<std::string, std::string>> drifts = {
      {on_attempt + "worker_id = 'worker-1'", on_attempt + "worker_id = NULL"},
      {on_attempt + "worker_session_id = 'session-1'", on_attempt + "worker_session_id = NULL"},
      {on_attempt + "session_generation = 1", on_attempt + "session_generation = NULL"},
      {on_attempt + "lease_expires_at_ms = 1", on_attempt + "lease_expires_at_ms = NULL"},
      {on_attempt + "pid = 4242", on_attempt + "pid = NULL"},
      {on_attempt + "process_start_ticks = 1", on_attempt + "process_start_ticks = NULL"},
      {on_attempt + "log_path = '/tmp/x.log'", on_attempt + "log_path = NULL"},
      {on_attempt + "started_at_ms = 1", on_attempt + "started_at_ms = NULL"},
      {on_attempt + "finished_at_ms = 1", on_attempt + "finished_at_ms = NULL"},
      {on_attempt + "exit_code = 0", on_attempt + "exit_code = NULL"},
      {on_attempt + "error_code = 'x'", on_attempt + "error_code = NULL"},
      {on_attempt + "error_summary = 'x'", on_attempt + "error_summary = NULL"},
      {on_attempt + "callback_sequence = 1", on_attempt + "callback_sequence = 0"},
      {on_run + "cancel_requested_at_ms = 1", on_run + "cancel_requested_at_ms = NULL"},
  };
  for (const auto& [drift, restore] : drifts) {
    SCOPED_TRACE(drift);
    const std::string where = drift.rfind(on_run, 0) == 0 ? run_where : attempt_where;
    Sql(drift + where);
    std::vector<RecoveryCandidate> found = Candidates();
    ASSERT_EQ(found.size(), 1u);
    EXPECT_EQ(found[0].run_id, run);
    Sql(restore + where);
    EXPECT_TRUE(Candidates().empty());
  }
  EXPECT_EQ(RunRow(run), pristine);

  // An offer id drifted in: a candidate that never started, which the next pull may grant
  // again; recovery leaves the run itself alone.
  Sql(on_attempt + "offer_id = 'offer-1'" + attempt_where);
  std::vector<RecoveryCandidate> found = Candidates();
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].run_id, run);
  EXPECT_EQ(found[0].attempt_id, attempt);
  EXPECT_EQ(found[0].run_status, "queued");
  EXPECT_EQ(found[0].attempt_status, "claimed");
  EXPECT_FALSE(found[0].lease_live);
  EXPECT_TRUE(found[0].never_started);
  const std::string drifted = RunRow(run);
  report = RunOnce();
  EXPECT_EQ(report.candidates, 1);
  EXPECT_EQ(report.redispatch, 1);
  EXPECT_EQ(report.lost + report.settled + report.stuck + report.live + report.requeued, 0);
  EXPECT_EQ(RunRow(run), drifted);
  EXPECT_EQ(EventTypes(run), "run.created,run.queued");
  EXPECT_EQ(Sample(metrics_, R"(ql_recovery_runs{action="redispatch"})"), 1);
}

TEST_P(ClusterRecoveryTest, PeriodicCyclesLeaveTheQueueToThePullAndStillSettleStartedWork) {
  TaskView task = NewTask("scoped");
  const std::string queued = AdmitRun(NewTrigger(task, kYearly, "fire_once"), 2020);
  const std::string started = AdmitRun(NewTrigger(task, kYearly, "fire_once"), 2020);
  ASSERT_FALSE(queued.empty());
  ASSERT_FALSE(started.empty());
  // A drifted queued run: a candidate at startup only.
  Sql("UPDATE ql3.run_attempts SET offer_id = 'offer-1' WHERE run_id = '" + queued + "'");
  StartDispatching(started);
  auto ids = [&](RecoveryScope scope) {
    Result<std::vector<RecoveryCandidate>> listed =
        candidates_->ListRecoveryCandidates("", 1000, scope);
    EXPECT_TRUE(listed.ok()) << listed.status().ToString();
    std::set<std::string> out;
    if (listed.ok()) {
      for (const RecoveryCandidate& c : *listed) out.insert(c.run_id);
    }
    return out;
  };
  EXPECT_EQ(ids(RecoveryScope::kAll), (std::set<std::string>{queued, started}));
  EXPECT_EQ(ids(RecoveryScope::kBeyondQueue), (std::set<std::string>{started}));

  Result<RecoveryReport> report = recovery_->RunOnce(256, RecoveryScope::kBeyondQueue);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->candidates, 1);
  EXPECT_EQ(report->lost, 1);
  EXPECT_EQ(report->redispatch, 0);
  EXPECT_EQ(Sql("SELECT status FROM ql3.runs WHERE id = '" + started + "'"), "failed");
  EXPECT_EQ(Sql("SELECT status FROM ql3.runs WHERE id = '" + queued + "'"), "queued");
}

TEST_P(ClusterRecoveryTest, StartedWorkWithoutALeaseIsLostAndFailsWithoutARetryPolicy) {
  TaskView task = NewTask("abandoned");
  const std::string trigger = NewTrigger(task, kYearly, "fire_once");
  const std::string run = AdmitRun(trigger, 2020);
  ASSERT_FALSE(run.empty());
  StartDispatching(run);
  std::vector<RecoveryCandidate> found = Candidates();
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].run_status, "dispatching");
  EXPECT_EQ(found[0].attempt_status, "starting");
  EXPECT_FALSE(found[0].lease_live);

  RecoveryReport report = RunOnce();
  EXPECT_EQ(report.candidates, 1);
  EXPECT_EQ(report.lost, 1);
  EXPECT_EQ(report.requeued, 0);
  EXPECT_EQ(Sql("SELECT status, error_code, finished_at_ms IS NOT NULL FROM ql3.runs"),
            "failed|attempt_lost|t");
  EXPECT_EQ(Sql("SELECT attempt, status FROM ql3.run_attempts"), "1|lost");
  EXPECT_EQ(EventTypes(run),
            "run.created,run.queued,run.dispatching,attempt.lost,run.lost,run.failed");
  EXPECT_TRUE(Candidates().empty());
  const std::string settled = RunRow(run);
  report = RunOnce();
  EXPECT_EQ(report.candidates, 0);
  EXPECT_EQ(RunRow(run), settled);
}

TEST_P(ClusterRecoveryTest, LostWorkRetriesAsAttemptTwoOnceItsBackoffPasses) {
  TaskView task = NewTask("retried", json{{"max_attempts", 2},
                                          {"retry_on_lost", true},
                                          {"safety", "idempotent"},
                                          {"backoff_base_ms", 1000},
                                          {"backoff_max_ms", 1000}});
  ASSERT_TRUE(task.retry.has_value());
  EXPECT_EQ(task.retry->max_attempts, 2);
  const std::string trigger = NewTrigger(task, kYearly, "fire_once");
  const std::string run = AdmitRun(trigger, 2020);
  ASSERT_FALSE(run.empty());
  EXPECT_EQ(Sql("SELECT retry_max_attempts, retry_on_lost, retry_safety, retry_backoff_base_ms, "
                "retry_backoff_max_ms FROM ql3.runs"),
            "2|t|idempotent|1000|1000");
  StartDispatching(run);

  RecoveryReport report = RunOnce();
  EXPECT_EQ(report.lost, 1);
  EXPECT_EQ(report.requeued, 0);
  EXPECT_EQ(Sql("SELECT status, retry_at_ms FROM ql3.runs"),
            "retry_wait|" + std::to_string(clock_.NowMs() + 1'000));
  EXPECT_EQ(EventTypes(run),
            "run.created,run.queued,run.dispatching,attempt.lost,run.lost,run.retry_wait");
  // Not yet: the backoff has not passed.
  clock_.Advance(999);
  report = RunOnce();
  EXPECT_EQ(report.candidates, 0);
  EXPECT_EQ(report.requeued, 0);
  EXPECT_EQ(Sql("SELECT status FROM ql3.runs"), "retry_wait");

  clock_.Advance(1);
  report = RunOnce();
  EXPECT_EQ(report.requeued, 1);
  EXPECT_EQ(Sql("SELECT status FROM ql3.runs"), "queued");
  EXPECT_EQ(Sql("SELECT attempt, status, executor_type FROM ql3.run_attempts ORDER BY attempt"),
            "1|lost|remote_worker\n2|claimed|remote_worker");
  EXPECT_EQ(EventTypes(run),
            "run.created,run.queued,run.dispatching,attempt.lost,run.lost,run.retry_wait,"
            "run.queued");
  // Attempt 2 is a fresh admission for the dispatcher, not abandoned work.
  EXPECT_TRUE(Candidates().empty());
}

TEST_P(ClusterRecoveryTest, ALiveLeaseIsLeftAloneUntilTheDatabaseClockEndsIt) {
  TaskView task = NewTask("leased");
  const std::string trigger = NewTrigger(task, kYearly, "fire_once");
  const std::string run = AdmitRun(trigger, 2020);
  ASSERT_FALSE(run.empty());
  StartDispatching(run);
  const std::string attempt = AttemptOf(run);
  const std::string now = std::to_string(DbNowMs());
  const std::string hour_later = std::to_string(DbNowMs() + 3'600'000);
  Sql("INSERT INTO ql3.worker_credentials (id, name, token_digest, created_at_ms) VALUES "
      "('credential-1', 'worker-1', repeat('a', 64), " +
      now +
      ");\n"
      "INSERT INTO ql3.worker_sessions (id, credential_id, generation, status, "
      "capabilities_json, max_concurrent_runs, available_slots, version, heartbeat_at_ms, "
      "expires_at_ms, created_at_ms, updated_at_ms) VALUES ('session-1', 'credential-1', 1, "
      "'active', '{}', 1, 0, 1, " +
      now + ", " + hour_later + ", " + now + ", " + now +
      ");\n"
      "INSERT INTO ql3.run_dispatch_leases (attempt_id, run_id, worker_session_id, "
      "session_generation, offer_id, token_digest, lease_version, status, granted_at_ms, "
      "renewed_at_ms, expires_at_ms) VALUES ('" +
      attempt + "', '" + run + "', 'session-1', 1, 'offer-1', repeat('b', 64), 1, 'granted', " +
      now + ", " + now + ", " + hour_later +
      ");\n"
      "UPDATE ql3.run_attempts SET worker_id = 'worker-1', worker_session_id = 'session-1', "
      "session_generation = 1, offer_id = 'offer-1', lease_expires_at_ms = " +
      hour_later + " WHERE id = '" + attempt + "';");
  std::vector<RecoveryCandidate> found = Candidates();
  ASSERT_EQ(found.size(), 1u);
  EXPECT_TRUE(found[0].lease_live);
  const std::string leased = RunRow(run);
  RecoveryReport report = RunOnce();
  EXPECT_EQ(report.candidates, 1);
  EXPECT_EQ(report.live, 1);
  EXPECT_EQ(report.lost, 0);
  EXPECT_EQ(RunRow(run), leased);
  EXPECT_EQ(Sample(metrics_, R"(ql_recovery_runs{action="live"})"), 1);

  // The same lease, expired by the database clock: the attempt is lost and the run fails.
  Sql("UPDATE ql3.run_dispatch_leases SET expires_at_ms = " + std::to_string(DbNowMs() - 1'000) +
      ", renewed_at_ms = " + std::to_string(DbNowMs() - 2'000) + " WHERE attempt_id = '" + attempt +
      "'");
  found = Candidates();
  ASSERT_EQ(found.size(), 1u);
  EXPECT_FALSE(found[0].lease_live);
  report = RunOnce();
  EXPECT_EQ(report.live, 0);
  EXPECT_EQ(report.lost, 1);
  EXPECT_EQ(Sql("SELECT status FROM ql3.runs"), "failed");
  EXPECT_EQ(EventTypes(run),
            "run.created,run.queued,run.dispatching,attempt.lost,run.lost,run.failed");
}

// Archive vs. a cron admission in flight (DESIGN §9), forced into the contended interleaving: a
// barrier holds the governance lock, the archive queues on it, then the admission queues behind
// the archive (pg_locks shows both), and the barrier lets them go in that order.
TEST_P(ClusterScheduleTest, AnArchiveThatCommitsFirstStopsAnAdmissionInFlight) {
  std::optional<Claimed> c = ClaimedAdmission("archived-while-admitting");
  ASSERT_TRUE(c.has_value());
  auto barrier = pg::Connection::Open(PgTestCluster::Get().Url(pg::kAdminRole, database_), {});
  ASSERT_TRUE(barrier.ok()) << barrier.status().ToString();
  ASSERT_TRUE((*barrier)->Exec("BEGIN", {}, "barrier").ok());
  ASSERT_TRUE((*barrier)
                  ->Exec("SELECT pg_advisory_xact_lock($1)", {pg::P(pg::kGovernanceLockKey)},
                         "barrier")
                  .ok());
  const auto queued = [&](int n) {
    const std::string sql =
        "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
        "WHERE l.locktype = 'advisory' AND NOT l.granted AND d.datname = '" + database_ + "'";
    for (int i = 0; i < 500; ++i) {
      Result<std::string> out = PgTestCluster::Get().server().Psql("postgres", sql);
      if (out.ok() && !out->empty() && std::stoll(*out) == n) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  };
  auto archive = std::async(std::launch::async, [&] {
    return store_a_->governance().ArchiveProject(Actor{}, project_.id, SystemClock().NowMs());
  });
  ASSERT_TRUE(queued(1)) << "the archive did not queue on the governance lock";
  auto admit = std::async(std::launch::async, [&] { return a_->CommitClaimDecision(c->decision); });
  ASSERT_TRUE(queued(2)) << "the admission did not queue behind the archive";
  ASSERT_TRUE((*barrier)->Exec("COMMIT", {}, "barrier").ok());
  ASSERT_TRUE(archive.get().ok());
  Result<AdvanceOutcome> admitted = admit.get();
  ASSERT_TRUE(admitted.ok()) << admitted.status().ToString();
  // READ COMMITTED reads the definitions after the lock and sees the archive. SERIALIZABLE's
  // snapshot predates the lock wait, but the run's foreign key locks the project row the archive
  // updated after that snapshot: a serialization failure, and the rerun sees the archive.
  EXPECT_EQ(*admitted, AdvanceOutcome::kRaced);
  RunFilter of_trigger;
  of_trigger.trigger_id = c->trigger;
  Result<Page<RunRecord>> runs = store_a_->runs().ListRuns(of_trigger, {});
  ASSERT_TRUE(runs.ok());
  EXPECT_TRUE(runs->items.empty());
}

INSTANTIATE_TEST_SUITE_P(Isolations, ClusterScheduleTest,
                         ::testing::Values(AdmissionIsolation::kSerializable,
                                           AdmissionIsolation::kReadCommitted),
                         IsolationName);
INSTANTIATE_TEST_SUITE_P(Isolations, ClusterRecoveryTest,
                         ::testing::Values(AdmissionIsolation::kSerializable,
                                           AdmissionIsolation::kReadCommitted),
                         IsolationName);

}  // namespace
}  // namespace ql
