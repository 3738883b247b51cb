#include "ql/testing/repository_contract.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "ql/core/canonical_json.h"
#include "ql/core/cron.h"
#include "ql/core/digest.h"
#include "ql/core/execution_plan.h"
#include "ql/core/idempotency_key.h"
#include "ql/core/ids.h"
#include "ql/core/states.h"
#include "ql/core/status.h"
#include "ql/core/task_spec.h"
#include "ql/testing/contract_assertions.h"

namespace ql::testing {

namespace internal {
bool LinkRepositoryContract() { return true; }
}  // namespace internal

void PrintTo(const StoreFactory& factory, std::ostream* os) { *os << factory.name; }

std::string StoreFactoryName(const ::testing::TestParamInfo<StoreFactory>& info) {
  return info.param.name;
}

namespace {

constexpr char kLocal[] = "local_process";

// Checks that `status` failed with `code` and the stable `reason`.
::testing::AssertionResult HasError(const Status& status, StatusCode code,
                                    std::string_view reason) {
  if (status.code() == code && status.reason() == reason) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "expected " << StatusCodeName(code) << " / " << reason << ", got "
         << StatusCodeName(status.code()) << " / " << status.ToString();
}

template <typename T>
::testing::AssertionResult HasError(const Result<T>& result, StatusCode code,
                                    std::string_view reason) {
  return HasError(result.status(), code, reason);
}

std::string Canonical(const nlohmann::json& value) {
  return ::ql::internal::CanonicalJsonLossy(value);
}

int64_t CountRuns(Store& store) {
  PageRequest page;
  page.limit = 1000;
  Result<Page<RunRecord>> runs = store.runs().ListRuns(RunFilter{}, page);
  return runs.ok() ? static_cast<int64_t>(runs->items.size()) : -1;
}

std::vector<std::string> EventTypes(const std::vector<EventRecord>& events) {
  std::vector<std::string> out;
  for (const EventRecord& event : events) out.push_back(event.type);
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Fixture helpers

void RepositoryContractTest::SetUp() {
  store_ = GetParam().make();
  ASSERT_NE(store_, nullptr) << "factory " << GetParam().name << " returned no store";
  QL_ASSERT_OK_AND_ASSIGN(
      project_, store_->projects().EnsureProject(NewId(), kDefaultProjectSlug, "Default", Now()));
}

std::string RepositoryContractTest::NewId() { return NewUuidV7(clock_.NowMs(), random_); }

int64_t RepositoryContractTest::PublicationClockMs() const {
  return GetParam().database_clock_ms ? GetParam().database_clock_ms() : Now();
}

PublishTaskCommand RepositoryContractTest::TaskCommand(const std::string& task_id,
                                                       std::optional<int64_t> expected,
                                                       const std::string& name, bool enabled) {
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
  r.spec_json = Canonical(
      {{"command", {{"command", "echo " + name}, {"kind", "shell"}, {"shell", "/bin/sh"}}},
       {"timeoutMs", 60000}});
  r.labels_json = "{}";
  r.enabled = enabled;
  r.content_digest = Sha256Hex(r.kind + "\n" + r.name + "\n" + r.spec_json + "\n" + r.labels_json +
                               (enabled ? "\n1" : "\n0"));
  if (enabled) {
    ExecutionRevisionRecord exec;
    exec.executor_type = kLocal;
    exec.task_digest = r.content_digest;
    exec.plan_json = Canonical({{"executorType", kLocal},
                                {"taskDigest", r.content_digest},
                                {"taskId", task_id},
                                {"taskRevision", revision}});
    exec.plan_digest = Sha256Hex(exec.plan_json);
    exec.id = ExecutionRevisionId(revision, exec.plan_digest);
    cmd.executions.push_back(exec);
  }
  return cmd;
}

Result<TaskRevisionRecord> RepositoryContractTest::PublishTask(const std::string& task_id,
                                                               std::optional<int64_t> expected,
                                                               const std::string& name,
                                                               bool enabled) {
  QL_ASSIGN_OR_RETURN(PublishTaskResult result, store_->definitions().PublishTaskRevision(
                                                    TaskCommand(task_id, expected, name, enabled)));
  return result.revision;
}

PublishTriggerCommand RepositoryContractTest::TriggerCommand(const std::string& trigger_id,
                                                             std::optional<int64_t> expected,
                                                             const TaskRevisionRecord& task,
                                                             bool enabled) {
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
  r.expression = "*/5 * * * *";
  r.timezone = "UTC";
  r.misfire = "skip";
  r.enabled = enabled;
  r.content_digest = Sha256Hex(r.task_id + "\n" + std::to_string(r.task_revision) + "\n" +
                               r.expression + "\n" + r.timezone + (enabled ? "\n1" : "\n0"));
  return cmd;
}

Result<TriggerRevisionRecord> RepositoryContractTest::PublishTrigger(
    const std::string& trigger_id, std::optional<int64_t> expected, const TaskRevisionRecord& task,
    bool enabled) {
  QL_ASSIGN_OR_RETURN(PublishTriggerResult result,
                      store_->definitions().PublishTriggerRevision(
                          TriggerCommand(trigger_id, expected, task, enabled)));
  return result.revision;
}

ScheduleAdvance RepositoryContractTest::MoveCursor(const DueSchedule& due,
                                                   std::optional<int64_t> cursor) {
  ScheduleAdvance advance;
  advance.trigger_id = due.schedule.trigger_id;
  advance.expected_trigger_revision = due.schedule.trigger_revision;
  advance.expected_state_version = due.schedule.state_version;
  advance.expected_next_fire_at_ms = due.schedule.next_fire_at_ms;
  advance.expected_task_revision = due.trigger.task_revision;
  advance.expected_task_digest = due.trigger.task_digest;
  advance.new_next_fire_at_ms = cursor;
  advance.exhausted = !cursor.has_value();
  advance.now_ms = Now();
  return advance;
}

Result<ScheduleAdvance> RepositoryContractTest::Admit(const DueSchedule& due,
                                                      std::optional<int64_t> next_cursor) {
  if (!due.schedule.next_fire_at_ms.has_value()) {
    return InvalidArgument("test_setup", "an uninitialised schedule has no occurrence to admit");
  }
  QL_ASSIGN_OR_RETURN(ExecutionRevisionRecord exec,
                      store_->definitions().FindExecutionRevision(
                          due.trigger.task_id, due.trigger.task_revision, kLocal));
  ScheduleAdvance advance = MoveCursor(due, next_cursor);
  NewRun run;
  run.run_id = NewId();
  run.attempt_id = NewId();
  run.project_id = due.schedule.project_id;
  run.task_id = due.trigger.task_id;
  run.task_revision = due.trigger.task_revision;
  run.task_digest = due.trigger.task_digest;
  run.execution_revision_id = exec.id;
  run.executor_type = kLocal;
  run.trigger_id = due.schedule.trigger_id;
  run.trigger_revision = due.schedule.trigger_revision;
  run.scheduled_for_ms = due.schedule.next_fire_at_ms;
  run.trigger_type = "cron";
  run.idempotency_key = CronIdempotencyKey(due.schedule.trigger_id, due.schedule.trigger_revision,
                                           *due.schedule.next_fire_at_ms);
  run.actor_type = "scheduler";
  run.now_ms = Now();
  advance.run = std::move(run);
  return advance;
}

Result<ScheduleAdvance> RepositoryContractTest::Admit(const DueSchedule& due) {
  if (!due.schedule.next_fire_at_ms.has_value()) {
    return InvalidArgument("test_setup", "an uninitialised schedule has no occurrence to admit");
  }
  QL_ASSIGN_OR_RETURN(int64_t next, NextFireOf(due, *due.schedule.next_fire_at_ms));
  return Admit(due, next);
}

Result<int64_t> RepositoryContractTest::NextFireOf(const DueSchedule& due, int64_t after_ms) {
  return NextFire(due.trigger.expression, due.trigger.timezone, after_ms);
}

Result<DueSchedule> RepositoryContractTest::DueRow(const std::string& trigger_id, int64_t now_ms) {
  QL_ASSIGN_OR_RETURN(std::vector<DueSchedule> due,
                      store_->schedules().ListDueSchedules(now_ms, 1000));
  for (DueSchedule& row : due) {
    if (row.schedule.trigger_id == trigger_id) return std::move(row);
  }
  return NotFound("test_setup", "trigger " + trigger_id + " is not due");
}

Result<NewRun> RepositoryContractTest::ManualRun(const TaskRevisionRecord& task) {
  QL_ASSIGN_OR_RETURN(ExecutionRevisionRecord exec, store_->definitions().FindExecutionRevision(
                                                        task.task_id, task.revision, kLocal));
  NewRun run;
  run.run_id = NewId();
  run.attempt_id = NewId();
  run.project_id = task.project_id;
  run.task_id = task.task_id;
  run.task_revision = task.revision;
  run.task_digest = task.content_digest;
  run.execution_revision_id = exec.id;
  run.executor_type = kLocal;
  run.trigger_type = "manual";
  run.actor_type = "user";
  run.now_ms = Now();
  return run;
}

Result<RunRecord> RepositoryContractTest::QueuedRun(int priority) {
  const std::string task_id = NewId();
  QL_ASSIGN_OR_RETURN(TaskRevisionRecord task, PublishTask(task_id, std::nullopt, "job-" + task_id));
  QL_ASSIGN_OR_RETURN(NewRun run, ManualRun(task));
  run.priority = priority;
  return store_->runs().CreateRun(run);
}

std::pair<RunTransitionCommand, RunTransitionCommand> RepositoryContractTest::StartTransitions(
    const RunRecord& run, const std::string& attempt_id) const {
  RunTransitionCommand dispatch;
  dispatch.run_id = run.id;
  dispatch.expected_version = run.version;
  dispatch.run_to = "dispatching";
  dispatch.attempt_id = attempt_id;
  dispatch.expected_attempt_status = "claimed";
  dispatch.attempt_to = "starting";
  dispatch.events = {NewEvent{"run.dispatching", "dispatcher", attempt_id, std::nullopt, "{}"}};
  dispatch.now_ms = Now();
  RunTransitionCommand start;
  start.run_id = run.id;
  start.expected_version = run.version + 1;
  start.run_to = "running";
  start.attempt_id = attempt_id;
  start.expected_attempt_status = "starting";
  start.attempt_to = "running";
  start.pid = 4242;
  start.started_at_ms = Now();
  start.attempt_started_at_ms = Now();
  start.events = {NewEvent{"run.running", "executor", attempt_id, std::nullopt, "{}"}};
  start.now_ms = Now();
  return {std::move(dispatch), std::move(start)};
}

Result<RunRecord> RepositoryContractTest::StartRun(const RunRecord& run) {
  QL_ASSIGN_OR_RETURN(std::vector<AttemptRecord> attempts, store_->runs().ListAttempts(run.id));
  auto [dispatch, start] = StartTransitions(run, attempts.back().id);
  QL_ASSIGN_OR_RETURN(RunRecord dispatched, store_->runs().ApplyTransition(dispatch));
  start.expected_version = dispatched.version;
  return store_->runs().ApplyTransition(start);
}

// ---------------------------------------------------------------------------------------------
// Projects

TEST_P(RepositoryContractTest, EnsureProjectCreatesOnceThenReturnsTheSameProject) {
  EXPECT_EQ(project().slug, kDefaultProjectSlug);
  EXPECT_EQ(project().status, "active");
  EXPECT_EQ(project().version, 1);
  EXPECT_EQ(project().created_at_ms, Now());

  clock().Advance(1000);
  QL_ASSERT_OK_AND_ASSIGN(ProjectRecord again, store().projects().EnsureProject(
                                                   NewId(), kDefaultProjectSlug, "Other", Now()));
  EXPECT_EQ(again.id, project().id);
  EXPECT_EQ(again.name, "Default");
  EXPECT_EQ(again.created_at_ms, project().created_at_ms);

  QL_ASSERT_OK_AND_ASSIGN(ProjectRecord by_id, store().projects().GetProject(project().id));
  EXPECT_EQ(by_id.slug, kDefaultProjectSlug);
  QL_ASSERT_OK_AND_ASSIGN(ProjectRecord by_slug,
                          store().projects().GetProjectBySlug(kDefaultProjectSlug));
  EXPECT_EQ(by_slug.id, project().id);
  QL_ASSERT_OK_AND_ASSIGN(std::vector<ProjectRecord> all, store().projects().ListProjects());
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].id, project().id);
}

TEST_P(RepositoryContractTest, UnknownProjectIsNotFound) {
  EXPECT_TRUE(
      HasError(store().projects().GetProject(NewId()), StatusCode::kNotFound, "project_not_found"));
  EXPECT_TRUE(HasError(store().projects().GetProjectBySlug("nope"), StatusCode::kNotFound,
                       "project_not_found"));
  EXPECT_TRUE(HasError(store().projects().EnsureProject("not-a-uuid", "second", "Second", Now()),
                       StatusCode::kInvalidArgument, "invalid_id"));
}

// ---------------------------------------------------------------------------------------------
// Tasks

TEST_P(RepositoryContractTest, PublishTaskCreatesRevisionOneWithItsExecutionRevision) {
  const std::string task_id = NewId();
  PublishTaskCommand cmd = TaskCommand(task_id, std::nullopt, "backup");
  QL_ASSERT_OK_AND_ASSIGN(PublishTaskResult result, store().definitions().PublishTaskRevision(cmd));
  EXPECT_FALSE(result.replayed);
  EXPECT_EQ(result.revision.revision, 1);
  EXPECT_EQ(result.revision.task_id, task_id);
  EXPECT_EQ(result.revision.project_id, project().id);
  EXPECT_EQ(result.revision.mutation_id, cmd.mutation_id);
  EXPECT_EQ(result.revision.created_at_ms, Now());

  QL_ASSERT_OK_AND_ASSIGN(TaskHeadRecord head, store().definitions().GetTaskHead(task_id));
  EXPECT_EQ(head.current_revision, 1);
  EXPECT_EQ(head.project_id, project().id);

  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord stored,
                          store().definitions().GetTaskRevision(task_id, 1));
  EXPECT_EQ(stored.name, "backup");
  EXPECT_EQ(stored.kind, cmd.revision.kind);
  EXPECT_EQ(stored.spec_json, cmd.revision.spec_json);
  EXPECT_EQ(stored.labels_json, "{}");
  EXPECT_TRUE(stored.enabled);
  EXPECT_EQ(stored.content_digest, cmd.revision.content_digest);

  const ExecutionRevisionRecord& want = cmd.executions[0];
  QL_ASSERT_OK_AND_ASSIGN(ExecutionRevisionRecord exec,
                          store().definitions().GetExecutionRevision(want.id));
  EXPECT_EQ(exec.task_id, task_id);
  EXPECT_EQ(exec.task_revision, 1);
  EXPECT_EQ(exec.project_id, project().id);
  EXPECT_EQ(exec.task_digest, stored.content_digest);
  EXPECT_EQ(exec.plan_json, want.plan_json);
  EXPECT_EQ(exec.plan_digest, want.plan_digest);
  QL_ASSERT_OK_AND_ASSIGN(ExecutionRevisionRecord found,
                          store().definitions().FindExecutionRevision(task_id, 1, kLocal));
  EXPECT_EQ(found.id, want.id);
  EXPECT_TRUE(HasError(store().definitions().FindExecutionRevision(task_id, 1, "remote_worker"),
                       StatusCode::kNotFound, "execution_revision_not_found"));
}

TEST_P(RepositoryContractTest, TaskUpdateAppendsRevisionAndKeepsOldOnesUnchanged) {
  const std::string task_id = NewId();
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord first, PublishTask(task_id, std::nullopt, "v1"));
  clock().Advance(1000);
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord second, PublishTask(task_id, 1, "v2"));
  EXPECT_EQ(second.revision, 2);
  EXPECT_NE(second.content_digest, first.content_digest);

  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord old,
                          store().definitions().GetTaskRevision(task_id, 1));
  EXPECT_EQ(old.name, "v1");
  EXPECT_EQ(old.content_digest, first.content_digest);
  EXPECT_EQ(old.created_at_ms, first.created_at_ms);
  EXPECT_EQ(old.mutation_id, first.mutation_id);

  QL_ASSERT_OK_AND_ASSIGN(TaskHeadRecord head, store().definitions().GetTaskHead(task_id));
  EXPECT_EQ(head.current_revision, 2);
  EXPECT_EQ(head.updated_at_ms, Now());

  QL_ASSERT_OK_AND_ASSIGN(std::vector<TaskRevisionRecord> history,
                          store().definitions().ListTaskRevisions(task_id));
  ASSERT_EQ(history.size(), 2u);
  EXPECT_EQ(history[0].revision, 2);  // newest first
  EXPECT_EQ(history[1].revision, 1);
  // Each revision keeps its own execution revision.
  QL_ASSERT_OK(store().definitions().FindExecutionRevision(task_id, 1, kLocal));
  QL_ASSERT_OK(store().definitions().FindExecutionRevision(task_id, 2, kLocal));
  EXPECT_TRUE(HasError(store().definitions().GetTaskRevision(task_id, 3), StatusCode::kNotFound,
                       "task_revision_not_found"));
}

TEST_P(RepositoryContractTest, ReplayedTaskMutationReturnsTheStoredRevision) {
  const std::string task_id = NewId();
  PublishTaskCommand cmd = TaskCommand(task_id, std::nullopt, "nightly");
  QL_ASSERT_OK_AND_ASSIGN(PublishTaskResult first, store().definitions().PublishTaskRevision(cmd));
  clock().Advance(5000);
  cmd.now_ms = Now();
  QL_ASSERT_OK_AND_ASSIGN(PublishTaskResult replay, store().definitions().PublishTaskRevision(cmd));
  EXPECT_TRUE(replay.replayed);
  EXPECT_EQ(replay.revision.revision, 1);
  EXPECT_EQ(replay.revision.created_at_ms, first.revision.created_at_ms);
  QL_ASSERT_OK_AND_ASSIGN(std::vector<TaskRevisionRecord> history,
                          store().definitions().ListTaskRevisions(task_id));
  EXPECT_EQ(history.size(), 1u);
}

// "Who changed this job?": a task revision names its publisher, and every task and trigger
// write is an audit fact written in the same transaction (once: a replay adds none).
TEST_P(RepositoryContractTest, DefinitionWritesNameTheirPublisherAndAreAuditedOnce) {
  auto fact = [&](const std::string& action, const std::string& target_kind,
                  const std::string& target_id) {
    AuditRecord a;
    a.id = NewId();
    a.at_ms = Now();
    a.actor_id = "principal-alice";
    a.action = action;
    a.target_kind = target_kind;
    a.target_id = target_id;
    a.project_id = project().id;
    a.outcome = "ok";
    a.code = "ok";
    a.request_id = "req-1";
    return a;
  };
  auto facts_of = [&](const std::string& target_id) {
    std::vector<AuditRecord> out;
    Result<Page<AuditRecord>> audit =
        store().governance().ListAudit(PageRequest{std::nullopt, 200});
    EXPECT_TRUE(audit.ok()) << audit.status().ToString();
    if (audit.ok()) {
      for (const AuditRecord& a : audit->items) {
        if (a.target_id == target_id) out.push_back(a);
      }
    }
    return out;
  };
  const std::string task_id = NewId();
  PublishTaskCommand cmd = TaskCommand(task_id, std::nullopt, "nightly");
  cmd.revision.published_by = "principal-alice";
  cmd.audit = fact("task.create", "task", task_id);
  QL_ASSERT_OK_AND_ASSIGN(PublishTaskResult first, store().definitions().PublishTaskRevision(cmd));
  EXPECT_EQ(first.revision.published_by, std::optional<std::string>("principal-alice"));
  cmd.audit->id = NewId();  // a retry of the same write carries a new fact id
  QL_ASSERT_OK_AND_ASSIGN(PublishTaskResult replay, store().definitions().PublishTaskRevision(cmd));
  EXPECT_TRUE(replay.replayed);
  std::vector<AuditRecord> facts = facts_of(task_id);
  ASSERT_EQ(facts.size(), 1u);
  EXPECT_EQ(facts[0].action, "task.create");
  EXPECT_EQ(facts[0].actor_id, std::optional<std::string>("principal-alice"));
  EXPECT_EQ(facts[0].request_id, "req-1");

  // A revision the system writes names nobody.
  PublishTaskCommand second = TaskCommand(task_id, 1, "nightly-2");
  QL_ASSERT_OK(store().definitions().PublishTaskRevision(second));
  QL_ASSERT_OK_AND_ASSIGN(std::vector<TaskRevisionRecord> history,
                          store().definitions().ListTaskRevisions(task_id));
  ASSERT_EQ(history.size(), 2u);
  for (const TaskRevisionRecord& r : history) {
    EXPECT_EQ(r.published_by, r.revision == 1 ? std::optional<std::string>("principal-alice")
                                              : std::nullopt)
        << "revision " << r.revision;
  }
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord read,
                          store().definitions().GetTaskRevision(task_id, 1));
  EXPECT_EQ(read.published_by, std::optional<std::string>("principal-alice"));

  // A trigger write is a fact too; a write refused (revision conflict) is none.
  const std::string trigger_id = NewId();
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord current,
                          store().definitions().GetTaskRevision(task_id, 2));
  PublishTriggerCommand trigger = TriggerCommand(trigger_id, std::nullopt, current);
  trigger.audit = fact("trigger.create", "trigger", trigger_id);
  QL_ASSERT_OK(store().definitions().PublishTriggerRevision(trigger));
  PublishTriggerCommand stale = TriggerCommand(trigger_id, 7, current);
  stale.audit = fact("trigger.revise", "trigger", trigger_id);
  EXPECT_FALSE(store().definitions().PublishTriggerRevision(stale).ok());
  facts = facts_of(trigger_id);
  ASSERT_EQ(facts.size(), 1u);
  EXPECT_EQ(facts[0].action, "trigger.create");
}

TEST_P(RepositoryContractTest, ReusedTaskMutationWithDriftIsConflict) {
  const std::string task_id = NewId();
  PublishTaskCommand cmd = TaskCommand(task_id, std::nullopt, "nightly");
  QL_ASSERT_OK(store().definitions().PublishTaskRevision(cmd));

  PublishTaskCommand drift = TaskCommand(task_id, 1, "changed");
  drift.mutation_id = cmd.mutation_id;
  EXPECT_TRUE(HasError(store().definitions().PublishTaskRevision(drift), StatusCode::kConflict,
                       "mutation_id_reused"));
  // Same content under the same mutation id but for another task is drift too.
  PublishTaskCommand elsewhere = cmd;
  elsewhere.task_id = NewId();
  EXPECT_TRUE(HasError(store().definitions().PublishTaskRevision(elsewhere), StatusCode::kConflict,
                       "mutation_id_reused"));
  QL_ASSERT_OK_AND_ASSIGN(TaskHeadRecord head, store().definitions().GetTaskHead(task_id));
  EXPECT_EQ(head.current_revision, 1);
}

TEST_P(RepositoryContractTest, WrongExpectedRevisionIsConflictAndWritesNothing) {
  const std::string task_id = NewId();
  QL_ASSERT_OK(PublishTask(task_id, std::nullopt, "v1"));
  QL_ASSERT_OK(PublishTask(task_id, 1, "v2"));
  PublishTaskCommand stale = TaskCommand(task_id, 1, "v2-bis");
  EXPECT_TRUE(HasError(store().definitions().PublishTaskRevision(stale), StatusCode::kConflict,
                       "revision_conflict"));
  QL_ASSERT_OK_AND_ASSIGN(std::vector<TaskRevisionRecord> history,
                          store().definitions().ListTaskRevisions(task_id));
  EXPECT_EQ(history.size(), 2u);
  EXPECT_TRUE(HasError(store().definitions().GetExecutionRevision(stale.executions[0].id),
                       StatusCode::kNotFound, "execution_revision_not_found"));
}

TEST_P(RepositoryContractTest, CreatingAnExistingTaskIsDuplicate) {
  const std::string task_id = NewId();
  QL_ASSERT_OK(PublishTask(task_id, std::nullopt, "first"));
  // A second create of the same id (two clients racing) with its own mutation id.
  EXPECT_TRUE(HasError(
      store().definitions().PublishTaskRevision(TaskCommand(task_id, std::nullopt, "second")),
      StatusCode::kDuplicate, "duplicate_id"));
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord stored,
                          store().definitions().GetTaskRevision(task_id, 1));
  EXPECT_EQ(stored.name, "first");
}

TEST_P(RepositoryContractTest, UpdatingAMissingTaskOrProjectIsNotFound) {
  EXPECT_TRUE(HasError(store().definitions().PublishTaskRevision(TaskCommand(NewId(), 1, "x")),
                       StatusCode::kNotFound, "task_not_found"));
  PublishTaskCommand cmd = TaskCommand(NewId(), std::nullopt, "x");
  cmd.project_id = NewId();
  EXPECT_TRUE(HasError(store().definitions().PublishTaskRevision(cmd), StatusCode::kNotFound,
                       "project_not_found"));
  EXPECT_TRUE(HasError(store().definitions().GetTaskHead(NewId()), StatusCode::kNotFound,
                       "task_not_found"));
  EXPECT_TRUE(HasError(store().definitions().ListTaskRevisions(NewId()), StatusCode::kNotFound,
                       "task_not_found"));
}

TEST_P(RepositoryContractTest, DisabledTaskRevisionHasNoExecutionRevision) {
  const std::string task_id = NewId();
  PublishTaskCommand with_plan = TaskCommand(task_id, std::nullopt, "off", /*enabled=*/true);
  with_plan.revision.enabled = false;
  EXPECT_TRUE(HasError(store().definitions().PublishTaskRevision(with_plan),
                       StatusCode::kInvalidArgument, "execution_for_disabled_revision"));
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord off,
                          PublishTask(task_id, std::nullopt, "off", /*enabled=*/false));
  EXPECT_FALSE(off.enabled);
  EXPECT_TRUE(HasError(store().definitions().FindExecutionRevision(task_id, 1, kLocal),
                       StatusCode::kNotFound, "execution_revision_not_found"));
}

TEST_P(RepositoryContractTest, ListTasksPagesCurrentRevisionsByTaskId) {
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    ids.push_back(NewId());
    QL_ASSERT_OK(PublishTask(ids.back(), std::nullopt, "task" + std::to_string(i)));
  }
  QL_ASSERT_OK(PublishTask(ids[2], 1, "task2-v2"));
  std::sort(ids.begin(), ids.end());

  std::vector<TaskRevisionRecord> seen;
  PageRequest page;
  page.limit = 2;
  int pages = 0;
  for (;;) {
    QL_ASSERT_OK_AND_ASSIGN(Page<TaskRevisionRecord> result,
                            store().definitions().ListTasks(project().id, page));
    ++pages;
    seen.insert(seen.end(), result.items.begin(), result.items.end());
    if (!result.next_key.has_value()) break;
    page.after_key = result.next_key;
    ASSERT_LT(pages, 10);
  }
  EXPECT_EQ(pages, 3);
  ASSERT_EQ(seen.size(), 5u);
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(seen[i].task_id, ids[i]);
  for (const TaskRevisionRecord& task : seen) {
    EXPECT_EQ(task.revision, task.name.rfind("task2", 0) == 0 ? 2 : 1) << task.name;
  }
  page.after_key = "definitely not a key";
  EXPECT_TRUE(HasError(store().definitions().ListTasks(project().id, page),
                       StatusCode::kInvalidArgument, "invalid_page_key"));
}

// ---------------------------------------------------------------------------------------------
// Triggers

TEST_P(RepositoryContractTest, PublishTriggerPinsTheCurrentRevisionAndCreatesItsSchedule) {
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord task, PublishTask(NewId(), std::nullopt, "job"));
  const std::string trigger_id = NewId();
  const int64_t published_after = PublicationClockMs();
  QL_ASSERT_OK_AND_ASSIGN(TriggerRevisionRecord trigger,
                          PublishTrigger(trigger_id, std::nullopt, task));
  EXPECT_EQ(trigger.revision, 1);
  EXPECT_EQ(trigger.task_revision, 1);
  EXPECT_EQ(trigger.task_digest, task.content_digest);

  QL_ASSERT_OK_AND_ASSIGN(TriggerHeadRecord head, store().definitions().GetTriggerHead(trigger_id));
  EXPECT_EQ(head.task_id, task.task_id);
  EXPECT_EQ(head.current_revision, 1);
  QL_ASSERT_OK_AND_ASSIGN(TriggerRevisionRecord stored,
                          store().definitions().GetTriggerRevision(trigger_id, 1));
  EXPECT_EQ(stored.expression, "*/5 * * * *");
  EXPECT_EQ(stored.timezone, "UTC");
  EXPECT_EQ(stored.misfire, "skip");

  QL_ASSERT_OK_AND_ASSIGN(ScheduleRecord schedule, store().definitions().GetSchedule(trigger_id));
  EXPECT_EQ(schedule.trigger_revision, 1);
  EXPECT_FALSE(schedule.next_fire_at_ms.has_value());
  EXPECT_FALSE(schedule.last_scheduled_at_ms.has_value());
  EXPECT_GE(schedule.published_at_ms, published_after);
  EXPECT_LE(schedule.published_at_ms, PublicationClockMs());
  EXPECT_FALSE(schedule.exhausted);
  QL_ASSERT_OK_AND_ASSIGN(int64_t enabled, store().definitions().CountEnabledTriggers(std::nullopt));
  EXPECT_EQ(enabled, 1);
  EXPECT_EQ(*store().definitions().CountEnabledTriggers(project().id), 1);
  EXPECT_EQ(*store().definitions().CountEnabledTriggers(NewId()), 0) << "another project's";

  QL_ASSERT_OK_AND_ASSIGN(Page<TriggerRevisionRecord> listed,
                          store().definitions().ListTriggers(project().id, task.task_id, {}));
  ASSERT_EQ(listed.items.size(), 1u);
  EXPECT_EQ(listed.items[0].trigger_id, trigger_id);
  QL_ASSERT_OK_AND_ASSIGN(Page<TriggerRevisionRecord> other_task,
                          store().definitions().ListTriggers(project().id, NewId(), {}));
  EXPECT_TRUE(other_task.items.empty());
}

TEST_P(RepositoryContractTest, TriggerPinningAStaleOrDisabledRevisionIsConflict) {
  const std::string task_id = NewId();
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord v1, PublishTask(task_id, std::nullopt, "v1"));
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord v2, PublishTask(task_id, 1, "v2"));
  EXPECT_TRUE(HasError(
      store().definitions().PublishTriggerRevision(TriggerCommand(NewId(), std::nullopt, v1)),
      StatusCode::kConflict, "trigger_pin_stale"));
  PublishTriggerCommand wrong_digest = TriggerCommand(NewId(), std::nullopt, v2);
  wrong_digest.revision.task_digest = v1.content_digest;
  EXPECT_TRUE(HasError(store().definitions().PublishTriggerRevision(wrong_digest),
                       StatusCode::kConflict, "trigger_pin_stale"));
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord v3, PublishTask(task_id, 2, "v3", /*enabled=*/false));
  EXPECT_TRUE(HasError(
      store().definitions().PublishTriggerRevision(TriggerCommand(NewId(), std::nullopt, v3)),
      StatusCode::kConflict, "trigger_pin_stale"));
  // A disabled trigger may keep pointing at an older revision.
  QL_ASSERT_OK(PublishTrigger(NewId(), std::nullopt, v1, /*enabled=*/false));
  QL_ASSERT_OK_AND_ASSIGN(int64_t enabled, store().definitions().CountEnabledTriggers(std::nullopt));
  EXPECT_EQ(enabled, 0);
}

TEST_P(RepositoryContractTest, TriggerIsNeverReboundToAnotherTask) {
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord a, PublishTask(NewId(), std::nullopt, "a"));
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord b, PublishTask(NewId(), std::nullopt, "b"));
  const std::string trigger_id = NewId();
  QL_ASSERT_OK(PublishTrigger(trigger_id, std::nullopt, a));
  EXPECT_TRUE(
      HasError(store().definitions().PublishTriggerRevision(TriggerCommand(trigger_id, 1, b)),
               StatusCode::kConflict, "trigger_task_immutable"));
  EXPECT_TRUE(HasError(
      store().definitions().PublishTriggerRevision(TriggerCommand(trigger_id, std::nullopt, a)),
      StatusCode::kDuplicate, "duplicate_id"));
  EXPECT_TRUE(
      HasError(store().definitions().PublishTriggerRevision(TriggerCommand(trigger_id, 2, a)),
               StatusCode::kConflict, "revision_conflict"));
}

TEST_P(RepositoryContractTest, ReplayedTriggerMutationReturnsStoredRevision) {
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord task, PublishTask(NewId(), std::nullopt, "job"));
  const std::string trigger_id = NewId();
  PublishTriggerCommand cmd = TriggerCommand(trigger_id, std::nullopt, task);
  QL_ASSERT_OK(store().definitions().PublishTriggerRevision(cmd));
  QL_ASSERT_OK_AND_ASSIGN(ScheduleRecord before, store().definitions().GetSchedule(trigger_id));
  QL_ASSERT_OK_AND_ASSIGN(PublishTriggerResult replay,
                          store().definitions().PublishTriggerRevision(cmd));
  EXPECT_TRUE(replay.replayed);
  EXPECT_EQ(replay.revision.revision, 1);
  QL_ASSERT_OK_AND_ASSIGN(ScheduleRecord after, store().definitions().GetSchedule(trigger_id));
  EXPECT_EQ(after.state_version, before.state_version);  // a replay resets nothing

  PublishTriggerCommand drift = cmd;
  drift.revision.misfire = "fire_once";
  drift.revision.content_digest = Sha256Hex("fire_once");
  EXPECT_TRUE(HasError(store().definitions().PublishTriggerRevision(drift), StatusCode::kConflict,
                       "mutation_id_reused"));
}

TEST_P(RepositoryContractTest, NewTriggerRevisionResetsTheSchedule) {
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord task, PublishTask(NewId(), std::nullopt, "job"));
  const std::string trigger_id = NewId();
  QL_ASSERT_OK(PublishTrigger(trigger_id, std::nullopt, task));
  QL_ASSERT_OK_AND_ASSIGN(DueSchedule due, DueRow(trigger_id, Now()));
  QL_ASSERT_OK_AND_ASSIGN(AdvanceOutcome outcome, store().schedules().ApplyScheduleAdvance(
                                                      MoveCursor(due, Now() + 60'000)));
  ASSERT_EQ(outcome, AdvanceOutcome::kApplied);
  QL_ASSERT_OK_AND_ASSIGN(ScheduleRecord initialised,
                          store().definitions().GetSchedule(trigger_id));
  ASSERT_TRUE(initialised.next_fire_at_ms.has_value());

  clock().Advance(10'000);
  const int64_t republished_after = PublicationClockMs();
  QL_ASSERT_OK_AND_ASSIGN(TriggerRevisionRecord second, PublishTrigger(trigger_id, 1, task));
  EXPECT_EQ(second.revision, 2);
  QL_ASSERT_OK_AND_ASSIGN(ScheduleRecord reset, store().definitions().GetSchedule(trigger_id));
  EXPECT_EQ(reset.trigger_revision, 2);
  EXPECT_FALSE(reset.next_fire_at_ms.has_value());
  EXPECT_GT(reset.state_version, initialised.state_version);
  EXPECT_GE(reset.published_at_ms, republished_after);
  EXPECT_LE(reset.published_at_ms, PublicationClockMs());
  // A decision taken on the old revision is dead.
  QL_ASSERT_OK_AND_ASSIGN(AdvanceOutcome late,
                          store().schedules().ApplyScheduleAdvance(MoveCursor(due, Now())));
  EXPECT_EQ(late, AdvanceOutcome::kRaced);
}

TEST_P(RepositoryContractTest, RepublishedTaskParksTheTriggerUntilItIsRepinned) {
  const std::string task_id = NewId();
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord v1, PublishTask(task_id, std::nullopt, "v1"));
  const std::string trigger_id = NewId();
  QL_ASSERT_OK(PublishTrigger(trigger_id, std::nullopt, v1));
  QL_ASSERT_OK(DueRow(trigger_id, Now()));

  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord v2, PublishTask(task_id, 1, "v2"));
  QL_ASSERT_OK_AND_ASSIGN(std::vector<DueSchedule> due,
                          store().schedules().ListDueSchedules(Now() + 3'600'000, 100));
  EXPECT_TRUE(due.empty());
  QL_ASSERT_OK_AND_ASSIGN(std::optional<int64_t> earliest, store().schedules().EarliestDueAt());
  EXPECT_FALSE(earliest.has_value());

  QL_ASSERT_OK(PublishTrigger(trigger_id, 1, v2));
  QL_ASSERT_OK_AND_ASSIGN(DueSchedule repinned, DueRow(trigger_id, Now()));
  EXPECT_EQ(repinned.trigger.task_revision, 2);
  EXPECT_FALSE(repinned.schedule.next_fire_at_ms.has_value());
}

// ---------------------------------------------------------------------------------------------
// Names and tombstones (DESIGN §11)

TEST_P(RepositoryContractTest, TaskNamesAreUniqueAmongTheLiveTasksOfAProject) {
  const std::string first = NewId();
  QL_ASSERT_OK(PublishTask(first, std::nullopt, "backup"));
  const std::string second = NewId();
  QL_EXPECT_ERROR(PublishTask(second, std::nullopt, "backup"), StatusCode::kDuplicate,
                  "name_duplicate");
  QL_EXPECT_ERROR(store().definitions().GetTaskHead(second), StatusCode::kNotFound,
                  "task_not_found");
  QL_ASSERT_OK(PublishTask(second, std::nullopt, "report"));
  // A revision may not take another task's name, but keeps or changes its own.
  QL_EXPECT_ERROR(PublishTask(second, 1, "backup"), StatusCode::kDuplicate, "name_duplicate");
  QL_ASSERT_OK(PublishTask(first, 1, "backup"));
  QL_ASSERT_OK(PublishTask(first, 2, "backup-old"));
  QL_ASSERT_OK(PublishTask(second, 1, "backup"));

  QL_ASSERT_OK_AND_ASSIGN(std::optional<TaskHeadRecord> found,
                          store().definitions().FindTaskByName(project().id, "backup"));
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->task_id, second);
  EXPECT_EQ(found->name, "backup");
  QL_ASSERT_OK_AND_ASSIGN(TaskHeadRecord head, store().definitions().GetTaskHead(first));
  EXPECT_EQ(head.name, "backup-old");
  QL_ASSERT_OK_AND_ASSIGN(found, store().definitions().FindTaskByName(project().id, "report"));
  EXPECT_FALSE(found.has_value());
}

TEST_P(RepositoryContractTest, TriggerNamesAreRequiredUniqueAndRenamedByARevision) {
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord task, PublishTask(NewId(), std::nullopt, "job"));
  PublishTriggerCommand unnamed = TriggerCommand(NewId(), std::nullopt, task);
  unnamed.name.clear();
  QL_EXPECT_ERROR(store().definitions().PublishTriggerRevision(unnamed),
                  StatusCode::kInvalidArgument, "missing_field");
  PublishTriggerCommand nightly = TriggerCommand(NewId(), std::nullopt, task);
  nightly.name = "nightly";
  QL_ASSERT_OK(store().definitions().PublishTriggerRevision(nightly));
  PublishTriggerCommand twin = TriggerCommand(NewId(), std::nullopt, task);
  twin.name = "nightly";
  QL_EXPECT_ERROR(store().definitions().PublishTriggerRevision(twin), StatusCode::kDuplicate,
                  "name_duplicate");
  QL_EXPECT_ERROR(store().definitions().GetTriggerHead(twin.trigger_id), StatusCode::kNotFound,
                  "trigger_not_found");

  // An update without a name keeps it; with one it renames.
  QL_ASSERT_OK(PublishTrigger(nightly.trigger_id, 1, task));
  QL_ASSERT_OK_AND_ASSIGN(TriggerHeadRecord head,
                          store().definitions().GetTriggerHead(nightly.trigger_id));
  EXPECT_EQ(head.name, "nightly");
  PublishTriggerCommand rename = TriggerCommand(nightly.trigger_id, 2, task);
  rename.name = "hourly";
  QL_ASSERT_OK(store().definitions().PublishTriggerRevision(rename));
  QL_ASSERT_OK_AND_ASSIGN(std::optional<TriggerHeadRecord> found,
                          store().definitions().FindTriggerByName(project().id, "hourly"));
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->trigger_id, nightly.trigger_id);
  QL_ASSERT_OK_AND_ASSIGN(found, store().definitions().FindTriggerByName(project().id, "nightly"));
  EXPECT_FALSE(found.has_value());
  QL_ASSERT_OK(store().definitions().PublishTriggerRevision(twin));
}

TEST_P(RepositoryContractTest, ATaskRevisionThatRepinsMovesEveryLiveTriggerAndKeepsItsCursor) {
  const std::string task_id = NewId();
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord v1, PublishTask(task_id, std::nullopt, "v1"));
  const std::string enabled_id = NewId();
  const std::string disabled_id = NewId();
  QL_ASSERT_OK(PublishTrigger(enabled_id, std::nullopt, v1));
  QL_ASSERT_OK(PublishTrigger(disabled_id, std::nullopt, v1, /*enabled=*/false));
  // The enabled trigger's cursor points at an occurrence that is due and not yet admitted.
  QL_ASSERT_OK_AND_ASSIGN(DueSchedule due, DueRow(enabled_id, Now()));
  const int64_t occurrence = Now() - 1'000;
  ASSERT_EQ(store().schedules().ApplyScheduleAdvance(MoveCursor(due, occurrence)).value(),
            AdvanceOutcome::kApplied);
  QL_ASSERT_OK_AND_ASSIGN(DueSchedule pending, DueRow(enabled_id, Now()));

  clock().Advance(5'000);
  PublishTaskCommand edit = TaskCommand(task_id, 1, "v2");
  edit.repin_triggers = true;
  QL_ASSERT_OK_AND_ASSIGN(PublishTaskResult v2,
                          store().definitions().PublishTaskRevision(edit));
  EXPECT_EQ(v2.trigger_ids, (std::vector<std::string>{std::min(enabled_id, disabled_id),
                                                      std::max(enabled_id, disabled_id)}));
  QL_EXPECT_ERROR(store().definitions().GetTaskRevision(task_id, 3), StatusCode::kNotFound,
                  "task_revision_not_found");
  for (const std::string& id : {enabled_id, disabled_id}) {
    QL_ASSERT_OK_AND_ASSIGN(TriggerRevisionRecord pinned,
                            store().definitions().GetTriggerRevision(id, 2));
    EXPECT_EQ(pinned.task_revision, 2);
    EXPECT_EQ(pinned.task_digest, v2.revision.content_digest);
    EXPECT_EQ(pinned.enabled, id == enabled_id);
    EXPECT_EQ(pinned.content_digest, TriggerContentDigest(pinned));
  }
  // The occurrence is still the next one to admit, now under the new pin; a decision taken on
  // the old revision is dead.
  QL_ASSERT_OK_AND_ASSIGN(DueSchedule repinned, DueRow(enabled_id, Now()));
  EXPECT_EQ(repinned.schedule.next_fire_at_ms, occurrence);
  EXPECT_EQ(repinned.schedule.trigger_revision, 2);
  EXPECT_EQ(repinned.trigger.task_revision, 2);
  EXPECT_GT(repinned.schedule.state_version, pending.schedule.state_version);
  EXPECT_EQ(store().schedules().ApplyScheduleAdvance(MoveCursor(pending, Now())).value(),
            AdvanceOutcome::kRaced);
  QL_ASSERT_OK_AND_ASSIGN(int64_t stale, store().definitions().CountStaleTriggers(std::nullopt));
  EXPECT_EQ(stale, 0);

  // A disabled revision cannot be pinned by an enabled trigger: that one goes stale.
  PublishTaskCommand off = TaskCommand(task_id, 2, "v3", /*enabled=*/false);
  off.repin_triggers = true;
  QL_ASSERT_OK_AND_ASSIGN(PublishTaskResult v3, store().definitions().PublishTaskRevision(off));
  EXPECT_EQ(v3.trigger_ids, std::vector<std::string>{disabled_id});
  QL_ASSERT_OK_AND_ASSIGN(stale, store().definitions().CountStaleTriggers(std::nullopt));
  EXPECT_EQ(stale, 1);
  EXPECT_EQ(*store().definitions().CountStaleTriggers(project().id), 1);
  EXPECT_EQ(*store().definitions().CountStaleTriggers(NewId()), 0) << "another project's";
}

TEST_P(RepositoryContractTest, ADeletedTaskIsATombstoneWithItsTriggersAndFreesItsName) {
  const std::string task_id = NewId();
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord v1, PublishTask(task_id, std::nullopt, "backup"));
  const std::string trigger_id = NewId();
  QL_ASSERT_OK(PublishTrigger(trigger_id, std::nullopt, v1));
  QL_ASSERT_OK(DueRow(trigger_id, Now()));

  PublishTaskCommand enabled_tombstone = TaskCommand(task_id, 1, "backup");
  enabled_tombstone.tombstone = true;
  QL_EXPECT_ERROR(store().definitions().PublishTaskRevision(enabled_tombstone),
                  StatusCode::kInvalidArgument, "invalid_tombstone");
  PublishTaskCommand tombstone = TaskCommand(task_id, 1, "backup", /*enabled=*/false);
  tombstone.tombstone = true;
  QL_ASSERT_OK_AND_ASSIGN(PublishTaskResult deleted,
                          store().definitions().PublishTaskRevision(tombstone));
  EXPECT_EQ(deleted.trigger_ids, std::vector<std::string>{trigger_id});

  QL_ASSERT_OK_AND_ASSIGN(TaskHeadRecord head, store().definitions().GetTaskHead(task_id));
  EXPECT_EQ(head.deleted_at_ms, Now());
  EXPECT_EQ(head.current_revision, 2);
  QL_ASSERT_OK_AND_ASSIGN(TriggerHeadRecord trigger,
                          store().definitions().GetTriggerHead(trigger_id));
  EXPECT_EQ(trigger.deleted_at_ms, Now());
  QL_ASSERT_OK_AND_ASSIGN(TriggerRevisionRecord last,
                          store().definitions().GetTriggerRevision(trigger_id, 2));
  EXPECT_FALSE(last.enabled);
  // History stays readable; listings, names and the scheduler no longer see them.
  QL_ASSERT_OK(store().definitions().GetTaskRevision(task_id, 1));
  QL_ASSERT_OK_AND_ASSIGN(Page<TaskRevisionRecord> tasks,
                          store().definitions().ListTasks(project().id, PageRequest{}));
  EXPECT_TRUE(tasks.items.empty());
  QL_ASSERT_OK_AND_ASSIGN(Page<TriggerRevisionRecord> triggers,
                          store().definitions().ListTriggers(project().id, std::nullopt,
                                                             PageRequest{}));
  EXPECT_TRUE(triggers.items.empty());
  QL_ASSERT_OK_AND_ASSIGN(std::vector<DueSchedule> due,
                          store().schedules().ListDueSchedules(Now() + 3'600'000, 100));
  EXPECT_TRUE(due.empty());
  QL_ASSERT_OK_AND_ASSIGN(std::optional<TaskHeadRecord> by_name,
                          store().definitions().FindTaskByName(project().id, "backup"));
  EXPECT_FALSE(by_name.has_value());

  // Nothing is published over a tombstone, and no trigger is created on one.
  QL_EXPECT_ERROR(PublishTask(task_id, 2, "backup"), StatusCode::kConflict, "task_deleted");
  QL_EXPECT_ERROR(PublishTrigger(trigger_id, 2, v1, /*enabled=*/false), StatusCode::kConflict,
                  "trigger_deleted");
  QL_EXPECT_ERROR(PublishTrigger(NewId(), std::nullopt, v1, /*enabled=*/false),
                  StatusCode::kConflict, "task_deleted");
  // The name is free again.
  QL_ASSERT_OK(PublishTask(NewId(), std::nullopt, "backup"));
}

// ---------------------------------------------------------------------------------------------
// Due schedules and advances

TEST_P(RepositoryContractTest, DueListingPutsUninitialisedFirstThenOrdersByTime) {
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord task, PublishTask(NewId(), std::nullopt, "job"));
  const int64_t t0 = Now();
  std::vector<std::string> triggers;
  for (int i = 0; i < 4; ++i) {
    triggers.push_back(NewId());
    QL_ASSERT_OK(PublishTrigger(triggers.back(), std::nullopt, task));
  }
  // triggers[0] → t0+30s, [1] → t0+10s, [2] stays uninitialised, [3] → t0+1h.
  const std::vector<std::optional<int64_t>> cursors = {t0 + 30'000, t0 + 10'000, std::nullopt,
                                                       t0 + 3'600'000};
  for (int i = 0; i < 4; ++i) {
    if (!cursors[i].has_value()) continue;
    QL_ASSERT_OK_AND_ASSIGN(DueSchedule due, DueRow(triggers[i], t0));
    QL_ASSERT_OK_AND_ASSIGN(AdvanceOutcome outcome,
                            store().schedules().ApplyScheduleAdvance(MoveCursor(due, cursors[i])));
    ASSERT_EQ(outcome, AdvanceOutcome::kApplied);
  }
  QL_ASSERT_OK_AND_ASSIGN(std::vector<DueSchedule> due,
                          store().schedules().ListDueSchedules(t0 + 60'000, 10));
  ASSERT_EQ(due.size(), 3u);
  EXPECT_EQ(due[0].schedule.trigger_id, triggers[2]);
  EXPECT_EQ(due[1].schedule.trigger_id, triggers[1]);
  EXPECT_EQ(due[2].schedule.trigger_id, triggers[0]);
  EXPECT_EQ(due[1].trigger.trigger_id, triggers[1]);
  EXPECT_EQ(due[1].trigger.task_id, task.task_id);

  QL_ASSERT_OK_AND_ASSIGN(std::vector<DueSchedule> limited,
                          store().schedules().ListDueSchedules(t0 + 60'000, 2));
  ASSERT_EQ(limited.size(), 2u);
  EXPECT_EQ(limited[0].schedule.trigger_id, triggers[2]);
  EXPECT_EQ(limited[1].schedule.trigger_id, triggers[1]);

  QL_ASSERT_OK_AND_ASSIGN(std::optional<int64_t> earliest, store().schedules().EarliestDueAt());
  EXPECT_EQ(earliest, 0);  // an uninitialised row is due at once
  QL_ASSERT_OK_AND_ASSIGN(DueSchedule pending, DueRow(triggers[2], t0));
  QL_ASSERT_OK(store().schedules().ApplyScheduleAdvance(MoveCursor(pending, t0 + 20'000)));
  QL_ASSERT_OK_AND_ASSIGN(earliest, store().schedules().EarliestDueAt());
  EXPECT_EQ(earliest, t0 + 10'000);
}

TEST_P(RepositoryContractTest, DisabledOrExhaustedTriggersAreNeverDue) {
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord task, PublishTask(NewId(), std::nullopt, "job"));
  QL_ASSERT_OK(PublishTrigger(NewId(), std::nullopt, task, /*enabled=*/false));
  const std::string trigger_id = NewId();
  QL_ASSERT_OK(PublishTrigger(trigger_id, std::nullopt, task));
  QL_ASSERT_OK_AND_ASSIGN(DueSchedule due, DueRow(trigger_id, Now()));
  QL_ASSERT_OK_AND_ASSIGN(AdvanceOutcome outcome,
                          store().schedules().ApplyScheduleAdvance(MoveCursor(due, std::nullopt)));
  ASSERT_EQ(outcome, AdvanceOutcome::kApplied);
  QL_ASSERT_OK_AND_ASSIGN(ScheduleRecord schedule, store().definitions().GetSchedule(trigger_id));
  EXPECT_TRUE(schedule.exhausted);
  QL_ASSERT_OK_AND_ASSIGN(std::vector<DueSchedule> rows,
                          store().schedules().ListDueSchedules(Now() + 86'400'000, 100));
  EXPECT_TRUE(rows.empty());
  QL_ASSERT_OK_AND_ASSIGN(std::optional<int64_t> earliest, store().schedules().EarliestDueAt());
  EXPECT_FALSE(earliest.has_value());
}

TEST_P(RepositoryContractTest, InitialisingAdvanceSetsCursorAndBumpsStateVersion) {
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord task, PublishTask(NewId(), std::nullopt, "job"));
  const std::string trigger_id = NewId();
  QL_ASSERT_OK(PublishTrigger(trigger_id, std::nullopt, task));
  QL_ASSERT_OK_AND_ASSIGN(DueSchedule due, DueRow(trigger_id, Now()));
  clock().Advance(5);
  QL_ASSERT_OK_AND_ASSIGN(AdvanceOutcome outcome, store().schedules().ApplyScheduleAdvance(
                                                      MoveCursor(due, Now() + 300'000)));
  EXPECT_EQ(outcome, AdvanceOutcome::kApplied);
  QL_ASSERT_OK_AND_ASSIGN(ScheduleRecord schedule, store().definitions().GetSchedule(trigger_id));
  EXPECT_EQ(schedule.next_fire_at_ms, Now() + 300'000);
  EXPECT_EQ(schedule.state_version, due.schedule.state_version + 1);
  EXPECT_EQ(schedule.updated_at_ms, Now());
  EXPECT_FALSE(schedule.last_scheduled_at_ms.has_value());
  EXPECT_EQ(CountRuns(store()), 0);
}

TEST_P(RepositoryContractTest, AdmissionWritesOneQueuedRunOneClaimedAttemptAndTwoEvents) {
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord task, PublishTask(NewId(), std::nullopt, "job"));
  const std::string trigger_id = NewId();
  QL_ASSERT_OK(PublishTrigger(trigger_id, std::nullopt, task));
  QL_ASSERT_OK_AND_ASSIGN(DueSchedule fresh, DueRow(trigger_id, Now()));
  const int64_t fire = Now() + 60'000;
  QL_ASSERT_OK(store().schedules().ApplyScheduleAdvance(MoveCursor(fresh, fire)));
  clock().SetNowMs(fire + 250);
  QL_ASSERT_OK_AND_ASSIGN(DueSchedule due, DueRow(trigger_id, Now()));
  QL_ASSERT_OK_AND_ASSIGN(int64_t next, NextFireOf(due, fire));
  QL_ASSERT_OK_AND_ASSIGN(ScheduleAdvance advance, Admit(due));
  advance.run->retry_policy.max_attempts = 2;
  advance.run->retry_policy.retry_on_timeout = true;
  QL_ASSERT_OK_AND_ASSIGN(AdvanceOutcome outcome,
                          store().schedules().ApplyScheduleAdvance(advance));
  ASSERT_EQ(outcome, AdvanceOutcome::kApplied);

  QL_ASSERT_OK_AND_ASSIGN(RunRecord run, store().runs().GetRun(advance.run->run_id));
  EXPECT_EQ(run.status, "queued");
  EXPECT_EQ(run.version, 1);
  EXPECT_EQ(run.event_sequence, 2);
  EXPECT_EQ(run.trigger_type, "cron");
  EXPECT_EQ(run.trigger_id, trigger_id);
  EXPECT_EQ(run.trigger_revision, 1);
  EXPECT_EQ(run.scheduled_for_ms, fire);
  EXPECT_EQ(run.idempotency_key, CronIdempotencyKey(trigger_id, 1, fire));
  EXPECT_EQ(run.task_id, task.task_id);
  EXPECT_EQ(run.task_revision, 1);
  EXPECT_EQ(run.task_digest, task.content_digest);
  EXPECT_EQ(run.execution_revision_id, advance.run->execution_revision_id);
  EXPECT_EQ(run.created_at_ms, Now());
  EXPECT_EQ(run.queued_at_ms, Now());
  EXPECT_FALSE(run.cancel_requested_at_ms.has_value());
  EXPECT_TRUE(run.retry_policy.retry_on_timeout);
  EXPECT_EQ(run.retry_policy, advance.run->retry_policy);

  QL_ASSERT_OK_AND_ASSIGN(std::vector<AttemptRecord> attempts, store().runs().ListAttempts(run.id));
  ASSERT_EQ(attempts.size(), 1u);
  EXPECT_EQ(attempts[0].id, advance.run->attempt_id);
  EXPECT_EQ(attempts[0].attempt, 1);
  EXPECT_EQ(attempts[0].status, "claimed");
  EXPECT_EQ(attempts[0].executor_type, kLocal);

  QL_ASSERT_OK_AND_ASSIGN(std::vector<EventRecord> events,
                          store().runs().ListEvents(run.id, 0, 100));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].sequence, 1);
  EXPECT_EQ(events[0].type, "run.created");
  EXPECT_EQ(events[1].sequence, 2);
  EXPECT_EQ(events[1].type, "run.queued");
  for (const EventRecord& event : events) {
    EXPECT_EQ(event.actor_type, "scheduler");
    EXPECT_EQ(event.created_at_ms, Now());
    QL_ASSERT_OK_AND_ASSIGN(nlohmann::json payload, ParseJsonStrict(event.payload_json));
    EXPECT_TRUE(payload.is_object());
  }

  QL_ASSERT_OK_AND_ASSIGN(ScheduleRecord schedule, store().definitions().GetSchedule(trigger_id));
  EXPECT_EQ(schedule.next_fire_at_ms, next);
  EXPECT_EQ(schedule.last_scheduled_at_ms, fire);
  EXPECT_EQ(schedule.state_version, due.schedule.state_version + 1);
  EXPECT_EQ(CountRuns(store()), 1);
  QL_ASSERT_OK_AND_ASSIGN(std::vector<RunRecord> dispatchable,
                          store().runs().ListDispatchable(kLocal, 10, Now()));
  ASSERT_EQ(dispatchable.size(), 1u);
  EXPECT_EQ(dispatchable[0].id, run.id);
}

TEST_P(RepositoryContractTest, AdvanceIsRacedOnEveryDriftAndWritesNothing) {
  enum Drift { kStateVersion, kCursor, kTriggerRevision, kTaskRevision, kTaskDigest };
  for (int kind = kStateVersion; kind <= kTaskDigest; ++kind) {
    SCOPED_TRACE("drift kind " + std::to_string(kind));
    const std::string task_id = NewId();
    QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord task,
                            PublishTask(task_id, std::nullopt, "job" + std::to_string(kind)));
    const std::string trigger_id = NewId();
    QL_ASSERT_OK(PublishTrigger(trigger_id, std::nullopt, task));
    QL_ASSERT_OK_AND_ASSIGN(DueSchedule fresh, DueRow(trigger_id, Now()));
    const int64_t fire = Now() + 1000;
    QL_ASSERT_OK(store().schedules().ApplyScheduleAdvance(MoveCursor(fresh, fire)));
    clock().SetNowMs(fire);
    QL_ASSERT_OK_AND_ASSIGN(DueSchedule due, DueRow(trigger_id, Now()));
    QL_ASSERT_OK_AND_ASSIGN(ScheduleAdvance advance, Admit(due, fire + 1000));

    switch (kind) {
      case kStateVersion:
        advance.expected_state_version -= 1;
        break;
      case kCursor:
        advance.expected_next_fire_at_ms = fire - 1;
        advance.run->scheduled_for_ms = fire - 1;
        advance.run->idempotency_key = CronIdempotencyKey(trigger_id, 1, fire - 1);
        break;
      case kTriggerRevision:
        // Someone republished the trigger after the row was read.
        QL_ASSERT_OK(PublishTrigger(trigger_id, 1, task));
        break;
      case kTaskRevision:
        // Someone republished the task: the pinned revision is no longer current.
        QL_ASSERT_OK(PublishTask(task_id, 1, "job-v2"));
        break;
      case kTaskDigest:
        advance.expected_task_digest = Sha256Hex("another digest");
        advance.run->task_digest = advance.expected_task_digest;
        break;
    }
    QL_ASSERT_OK_AND_ASSIGN(ScheduleRecord before, store().definitions().GetSchedule(trigger_id));
    const int64_t runs_before = CountRuns(store());
    QL_ASSERT_OK_AND_ASSIGN(AdvanceOutcome outcome,
                            store().schedules().ApplyScheduleAdvance(advance));
    EXPECT_EQ(outcome, AdvanceOutcome::kRaced);
    QL_ASSERT_OK_AND_ASSIGN(ScheduleRecord after, store().definitions().GetSchedule(trigger_id));
    EXPECT_EQ(after.state_version, before.state_version);
    EXPECT_EQ(after.next_fire_at_ms, before.next_fire_at_ms);
    EXPECT_EQ(after.updated_at_ms, before.updated_at_ms);
    EXPECT_EQ(CountRuns(store()), runs_before);
    EXPECT_TRUE(HasError(store().runs().GetRun(advance.run->run_id), StatusCode::kNotFound,
                         "run_not_found"));
  }
}

TEST_P(RepositoryContractTest, SameOccurrenceIsAdmittedAtMostOnce) {
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord task, PublishTask(NewId(), std::nullopt, "job"));
  const std::string trigger_id = NewId();
  QL_ASSERT_OK(PublishTrigger(trigger_id, std::nullopt, task));
  QL_ASSERT_OK_AND_ASSIGN(DueSchedule fresh, DueRow(trigger_id, Now()));
  const int64_t fire = Now() + 1000;
  QL_ASSERT_OK(store().schedules().ApplyScheduleAdvance(MoveCursor(fresh, fire)));
  clock().SetNowMs(fire);
  QL_ASSERT_OK_AND_ASSIGN(DueSchedule due, DueRow(trigger_id, Now()));
  QL_ASSERT_OK_AND_ASSIGN(ScheduleAdvance first, Admit(due));
  QL_ASSERT_OK_AND_ASSIGN(AdvanceOutcome applied, store().schedules().ApplyScheduleAdvance(first));
  ASSERT_EQ(applied, AdvanceOutcome::kApplied);
  // The cursor is moved back onto the admitted occurrence (by hand, say).
  QL_ASSERT_OK_AND_ASSIGN(DueSchedule moved_on, DueRow(trigger_id, *first.new_next_fire_at_ms));
  QL_ASSERT_OK(store().schedules().ApplyScheduleAdvance(MoveCursor(moved_on, fire)));

  QL_ASSERT_OK_AND_ASSIGN(DueSchedule again, DueRow(trigger_id, Now()));
  EXPECT_EQ(again.schedule.next_fire_at_ms, fire);
  QL_ASSERT_OK_AND_ASSIGN(ScheduleAdvance second, Admit(again));
  ASSERT_EQ(second.run->idempotency_key, first.run->idempotency_key);
  QL_ASSERT_OK_AND_ASSIGN(AdvanceOutcome already,
                          store().schedules().ApplyScheduleAdvance(second));
  EXPECT_EQ(already, AdvanceOutcome::kAlreadyAdmitted);
  EXPECT_EQ(CountRuns(store()), 1);
  QL_ASSERT_OK_AND_ASSIGN(RunRecord stored, store().runs().FindRunByIdempotencyKey(
                                                project().id, *first.run->idempotency_key));
  EXPECT_EQ(stored.id, first.run->run_id);
  // No second run, but the cursor moved past the admitted occurrence instead of staying on it
  // (and racing on it every round); the last admission stays the first run's.
  QL_ASSERT_OK_AND_ASSIGN(ScheduleRecord schedule, store().definitions().GetSchedule(trigger_id));
  EXPECT_EQ(schedule.state_version, again.schedule.state_version + 1);
  EXPECT_EQ(schedule.next_fire_at_ms, first.new_next_fire_at_ms);
  EXPECT_EQ(schedule.last_scheduled_at_ms, fire);
}

// ---------------------------------------------------------------------------------------------
// Runs

TEST_P(RepositoryContractTest, CreateRunQueuesAManualRunWithItsAttemptAndEvents) {
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord task, PublishTask(NewId(), std::nullopt, "job"));
  QL_ASSERT_OK_AND_ASSIGN(NewRun new_run, ManualRun(task));
  new_run.priority = 7;
  new_run.retry_policy.max_attempts = 3;
  new_run.retry_policy.retry_on_lost = true;
  new_run.retry_policy.retry_on_timeout = true;
  new_run.retry_policy.safety = "idempotent";
  new_run.retry_policy.backoff_base_ms = 2000;
  new_run.retry_policy.backoff_max_ms = 30'000;
  QL_ASSERT_OK_AND_ASSIGN(RunRecord run, store().runs().CreateRun(new_run));
  EXPECT_EQ(run.id, new_run.run_id);
  EXPECT_EQ(run.status, "queued");
  EXPECT_EQ(run.trigger_type, "manual");
  EXPECT_FALSE(run.trigger_id.has_value());
  EXPECT_EQ(run.priority, 7);
  EXPECT_EQ(run.version, 1);
  EXPECT_EQ(run.event_sequence, 2);
  EXPECT_EQ(run.retry_policy.max_attempts, 3);
  EXPECT_TRUE(run.retry_policy.retry_on_lost);
  EXPECT_TRUE(run.retry_policy.retry_on_timeout);
  EXPECT_EQ(run.retry_policy.safety, "idempotent");
  EXPECT_EQ(run.retry_policy.backoff_base_ms, 2000);
  EXPECT_EQ(run.retry_policy.backoff_max_ms, 30'000);
  QL_ASSERT_OK_AND_ASSIGN(std::vector<EventRecord> events,
                          store().runs().ListEvents(run.id, 0, 10));
  EXPECT_EQ(EventTypes(events), (std::vector<std::string>{"run.created", "run.queued"}));
  EXPECT_EQ(events[0].actor_type, "user");
  QL_ASSERT_OK_AND_ASSIGN(std::vector<AttemptRecord> attempts, store().runs().ListAttempts(run.id));
  ASSERT_EQ(attempts.size(), 1u);
  EXPECT_EQ(attempts[0].status, "claimed");
  EXPECT_TRUE(HasError(store().runs().GetRun(NewId()), StatusCode::kNotFound, "run_not_found"));
}

TEST_P(RepositoryContractTest, IdempotencyKeyIsUniquePerProject) {
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord task, PublishTask(NewId(), std::nullopt, "job"));
  QL_ASSERT_OK_AND_ASSIGN(NewRun first, ManualRun(task));
  first.idempotency_key = "client-key-1";
  QL_ASSERT_OK(store().runs().CreateRun(first));
  QL_ASSERT_OK_AND_ASSIGN(NewRun second, ManualRun(task));
  second.idempotency_key = "client-key-1";
  EXPECT_TRUE(HasError(store().runs().CreateRun(second), StatusCode::kDuplicate,
                       "idempotency_key_duplicate"));
  EXPECT_EQ(CountRuns(store()), 1);
  QL_ASSERT_OK_AND_ASSIGN(RunRecord found,
                          store().runs().FindRunByIdempotencyKey(project().id, "client-key-1"));
  EXPECT_EQ(found.id, first.run_id);
  EXPECT_TRUE(HasError(store().runs().FindRunByIdempotencyKey(project().id, "other"),
                       StatusCode::kNotFound, "run_not_found"));

  // The same key in another project is another run.
  QL_ASSERT_OK_AND_ASSIGN(ProjectRecord other,
                          store().projects().EnsureProject(NewId(), "other", "Other", Now()));
  PublishTaskCommand cmd = TaskCommand(NewId(), std::nullopt, "elsewhere");
  cmd.project_id = other.id;
  QL_ASSERT_OK_AND_ASSIGN(PublishTaskResult published,
                          store().definitions().PublishTaskRevision(cmd));
  QL_ASSERT_OK_AND_ASSIGN(NewRun third, ManualRun(published.revision));
  third.idempotency_key = "client-key-1";
  QL_ASSERT_OK(store().runs().CreateRun(third));
  EXPECT_EQ(CountRuns(store()), 2);
}

TEST_P(RepositoryContractTest, CreateRunRejectsDuplicateIdsAndStalePins) {
  const std::string task_id = NewId();
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord v1, PublishTask(task_id, std::nullopt, "v1"));
  QL_ASSERT_OK_AND_ASSIGN(NewRun run, ManualRun(v1));
  QL_ASSERT_OK(store().runs().CreateRun(run));
  NewRun same_id = run;
  same_id.attempt_id = NewId();
  EXPECT_TRUE(HasError(store().runs().CreateRun(same_id), StatusCode::kDuplicate, "duplicate_id"));

  QL_ASSERT_OK_AND_ASSIGN(NewRun stale, ManualRun(v1));
  QL_ASSERT_OK(PublishTask(task_id, 1, "v2"));
  EXPECT_TRUE(HasError(store().runs().CreateRun(stale), StatusCode::kConflict,
                       "task_revision_not_current"));

  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord v2, store().definitions().GetTaskRevision(task_id, 2));
  QL_ASSERT_OK_AND_ASSIGN(NewRun no_plan, ManualRun(v2));
  no_plan.execution_revision_id = ExecutionRevisionId(2, Sha256Hex("no such plan"));
  EXPECT_TRUE(HasError(store().runs().CreateRun(no_plan), StatusCode::kConflict,
                       "execution_revision_missing"));
  EXPECT_EQ(CountRuns(store()), 1);
}

// ---------------------------------------------------------------------------------------------
// Transitions

TEST_P(RepositoryContractTest, LegalTransitionsBumpVersionAndAppendConsecutiveEvents) {
  QL_ASSERT_OK_AND_ASSIGN(RunRecord queued, QueuedRun());
  clock().Advance(100);
  QL_ASSERT_OK_AND_ASSIGN(RunRecord running, StartRun(queued));
  EXPECT_EQ(running.status, "running");
  EXPECT_EQ(running.version, 3);
  EXPECT_EQ(running.event_sequence, 4);
  EXPECT_EQ(running.started_at_ms, Now());
  QL_ASSERT_OK_AND_ASSIGN(std::vector<AttemptRecord> attempts,
                          store().runs().ListAttempts(queued.id));
  EXPECT_EQ(attempts[0].status, "running");
  EXPECT_EQ(attempts[0].pid, 4242);

  clock().Advance(100);
  RunTransitionCommand finish;
  finish.run_id = queued.id;
  finish.expected_version = running.version;
  finish.run_to = "succeeded";
  finish.exit_code = 0;
  finish.attempt_id = attempts[0].id;
  finish.expected_attempt_status = "running";
  finish.attempt_to = "succeeded";
  finish.attempt_exit_code = 0;
  finish.events = {
      NewEvent{"attempt.succeeded", "executor", attempts[0].id, std::nullopt, "{}"},
      NewEvent{"run.succeeded", "executor", std::nullopt, std::nullopt, R"({"exit_code":0})"}};
  finish.now_ms = Now();
  QL_ASSERT_OK_AND_ASSIGN(RunRecord done, store().runs().ApplyTransition(finish));
  EXPECT_EQ(done.status, "succeeded");
  EXPECT_EQ(done.version, 4);
  EXPECT_EQ(done.event_sequence, 6);
  EXPECT_EQ(done.exit_code, 0);
  EXPECT_EQ(done.finished_at_ms, Now());
  QL_ASSERT_OK_AND_ASSIGN(attempts, store().runs().ListAttempts(queued.id));
  EXPECT_EQ(attempts[0].status, "succeeded");
  EXPECT_EQ(attempts[0].exit_code, 0);
  EXPECT_EQ(attempts[0].finished_at_ms, Now());

  QL_ASSERT_OK_AND_ASSIGN(std::vector<EventRecord> events,
                          store().runs().ListEvents(queued.id, 0, 100));
  ASSERT_EQ(events.size(), 6u);
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i].sequence, int64_t(i) + 1);
  EXPECT_EQ(EventTypes(events),
            (std::vector<std::string>{"run.created", "run.queued", "run.dispatching", "run.running",
                                      "attempt.succeeded", "run.succeeded"}));
  QL_ASSERT_OK_AND_ASSIGN(std::vector<EventRecord> tail,
                          store().runs().ListEvents(queued.id, 4, 1));
  ASSERT_EQ(tail.size(), 1u);
  EXPECT_EQ(tail[0].sequence, 5);

  // A finished run never changes again.
  RunTransitionCommand touch;
  touch.run_id = queued.id;
  touch.expected_version = done.version;
  touch.error_summary = "late";
  touch.now_ms = Now();
  EXPECT_TRUE(
      HasError(store().runs().ApplyTransition(touch), StatusCode::kConflict, "run_terminal"));
}

TEST_P(RepositoryContractTest, AnEventNamingAnotherRunsAttemptIsRefusedAndChangesNothing) {
  QL_ASSERT_OK_AND_ASSIGN(RunRecord queued, QueuedRun());
  QL_ASSERT_OK_AND_ASSIGN(RunRecord other, QueuedRun());
  QL_ASSERT_OK_AND_ASSIGN(std::vector<AttemptRecord> own, store().runs().ListAttempts(queued.id));
  QL_ASSERT_OK_AND_ASSIGN(std::vector<AttemptRecord> foreign,
                          store().runs().ListAttempts(other.id));
  // Alone, after an event of the run's own attempt, and before one.
  for (const std::vector<std::string>& named :
       {std::vector<std::string>{foreign[0].id},
        std::vector<std::string>{own[0].id, foreign[0].id},
        std::vector<std::string>{foreign[0].id, own[0].id}}) {
    RunTransitionCommand dispatch;
    dispatch.run_id = queued.id;
    dispatch.expected_version = queued.version;
    dispatch.run_to = "dispatching";
    dispatch.attempt_id = own[0].id;
    dispatch.expected_attempt_status = "claimed";
    dispatch.attempt_to = "starting";
    for (const std::string& attempt : named) {
      dispatch.events.push_back(
          NewEvent{"run.dispatching", "dispatcher", attempt, std::nullopt, "{}"});
    }
    dispatch.now_ms = Now();
    EXPECT_TRUE(HasError(store().runs().ApplyTransition(dispatch), StatusCode::kInvalidArgument,
                         "attempt_not_in_run"))
        << named.size() << " event(s)";
  }
  QL_ASSERT_OK_AND_ASSIGN(RunRecord after, store().runs().GetRun(queued.id));
  EXPECT_EQ(after.status, "queued");
  EXPECT_EQ(after.version, queued.version);
  EXPECT_EQ(after.event_sequence, queued.event_sequence);
  QL_ASSERT_OK_AND_ASSIGN(std::vector<AttemptRecord> attempts,
                          store().runs().ListAttempts(queued.id));
  EXPECT_EQ(attempts[0].status, "claimed");
  QL_ASSERT_OK_AND_ASSIGN(std::vector<EventRecord> own_events,
                          store().runs().ListEvents(queued.id, 0, 100));
  EXPECT_EQ(static_cast<int64_t>(own_events.size()), queued.event_sequence);
}

TEST_P(RepositoryContractTest, ARunIsReadWithItsAttemptsAsGetRunAndListAttemptsReadThem) {
  QL_ASSERT_OK_AND_ASSIGN(RunRecord queued, QueuedRun());
  clock().Advance(100);
  QL_ASSERT_OK_AND_ASSIGN(RunRecord running, StartRun(queued));
  QL_ASSERT_OK_AND_ASSIGN(auto both, store().runs().GetRunWithAttempts(queued.id));
  QL_ASSERT_OK_AND_ASSIGN(RunRecord alone, store().runs().GetRun(queued.id));
  QL_ASSERT_OK_AND_ASSIGN(std::vector<AttemptRecord> attempts,
                          store().runs().ListAttempts(queued.id));
  EXPECT_EQ(both.first.version, running.version);
  EXPECT_EQ(both.first.status, "running");
  EXPECT_EQ(both.first.version, alone.version);
  EXPECT_EQ(both.first.event_sequence, alone.event_sequence);
  ASSERT_EQ(both.second.size(), attempts.size());
  ASSERT_EQ(both.second.size(), 1u);
  EXPECT_EQ(both.second[0].id, attempts[0].id);
  EXPECT_EQ(both.second[0].status, "running");
  EXPECT_EQ(both.second[0].pid, 4242);
  EXPECT_TRUE(HasError(store().runs().GetRunWithAttempts(NewId()), StatusCode::kNotFound,
                       "run_not_found"));
}

TEST_P(RepositoryContractTest, IllegalMoveIsConflictAndChangesNothing) {
  QL_ASSERT_OK_AND_ASSIGN(RunRecord queued, QueuedRun());
  RunTransitionCommand jump;
  jump.run_id = queued.id;
  jump.expected_version = queued.version;
  jump.run_to = "succeeded";
  jump.events = {NewEvent{"run.succeeded", "executor", std::nullopt, std::nullopt, "{}"}};
  jump.now_ms = Now();
  EXPECT_TRUE(HasError(store().runs().ApplyTransition(jump), StatusCode::kConflict,
                       kReasonIllegalTransition));
  QL_ASSERT_OK_AND_ASSIGN(RunRecord after, store().runs().GetRun(queued.id));
  EXPECT_EQ(after.status, "queued");
  EXPECT_EQ(after.version, queued.version);
  EXPECT_EQ(after.event_sequence, queued.event_sequence);
  QL_ASSERT_OK_AND_ASSIGN(std::vector<EventRecord> events,
                          store().runs().ListEvents(queued.id, 0, 100));
  EXPECT_EQ(events.size(), 2u);

  RunTransitionCommand bogus = jump;
  bogus.run_to = "finished";
  EXPECT_TRUE(HasError(store().runs().ApplyTransition(bogus), StatusCode::kInvalidArgument,
                       "invalid_status"));
}

TEST_P(RepositoryContractTest, StaleVersionIsConflict) {
  QL_ASSERT_OK_AND_ASSIGN(RunRecord queued, QueuedRun());
  QL_ASSERT_OK_AND_ASSIGN(RunRecord running, StartRun(queued));
  RunTransitionCommand stale;
  stale.run_id = queued.id;
  stale.expected_version = queued.version;  // two moves behind
  stale.run_to = "failed";
  stale.now_ms = Now();
  EXPECT_TRUE(
      HasError(store().runs().ApplyTransition(stale), StatusCode::kConflict, "version_conflict"));
  QL_ASSERT_OK_AND_ASSIGN(RunRecord after, store().runs().GetRun(queued.id));
  EXPECT_EQ(after.status, "running");
  EXPECT_EQ(after.version, running.version);
}

TEST_P(RepositoryContractTest, ATransitionSequenceIsAppliedWholeOrNotAtAll) {
  QL_ASSERT_OK_AND_ASSIGN(RunRecord queued, QueuedRun());
  QL_ASSERT_OK_AND_ASSIGN(std::vector<AttemptRecord> attempts,
                          store().runs().ListAttempts(queued.id));
  auto [dispatch, start] = StartTransitions(queued, attempts[0].id);

  // The second names a version the first does not leave: neither is applied.
  RunTransitionCommand behind = start;
  behind.expected_version = queued.version;
  EXPECT_TRUE(HasError(store().runs().ApplyTransitions({dispatch, behind}), StatusCode::kConflict,
                       "version_conflict"));
  QL_ASSERT_OK_AND_ASSIGN(auto unchanged, store().runs().GetRunWithAttempts(queued.id));
  EXPECT_EQ(unchanged.first.status, "queued");
  EXPECT_EQ(unchanged.first.version, queued.version);
  EXPECT_EQ(unchanged.second[0].status, "claimed");
  QL_ASSERT_OK_AND_ASSIGN(std::vector<EventRecord> before,
                          store().runs().ListEvents(queued.id, 0, 100));

  // In order, each on the state the one before left: both land, with their events.
  QL_ASSERT_OK_AND_ASSIGN(RunRecord running, store().runs().ApplyTransitions({dispatch, start}));
  EXPECT_EQ(running.status, "running");
  EXPECT_EQ(running.version, queued.version + 2);
  QL_ASSERT_OK_AND_ASSIGN(auto after, store().runs().GetRunWithAttempts(queued.id));
  EXPECT_EQ(after.second[0].status, "running");
  EXPECT_EQ(after.second[0].pid, 4242);
  QL_ASSERT_OK_AND_ASSIGN(std::vector<EventRecord> events,
                          store().runs().ListEvents(queued.id, 0, 100));
  ASSERT_EQ(events.size(), before.size() + 2);
  EXPECT_EQ(events[before.size()].type, "run.dispatching");
  EXPECT_EQ(events[before.size() + 1].type, "run.running");

  // A sequence of two runs, or of none, is refused before anything is read.
  RunTransitionCommand other = start;
  other.run_id = NewId();
  EXPECT_TRUE(HasError(store().runs().ApplyTransitions({start, other}),
                       StatusCode::kInvalidArgument, "invalid_transition"));
  EXPECT_TRUE(HasError(store().runs().ApplyTransitions({}), StatusCode::kInvalidArgument,
                       "invalid_transition"));
}

TEST_P(RepositoryContractTest, AttemptStatusIsComparedAndSet) {
  QL_ASSERT_OK_AND_ASSIGN(RunRecord queued, QueuedRun());
  QL_ASSERT_OK_AND_ASSIGN(std::vector<AttemptRecord> attempts,
                          store().runs().ListAttempts(queued.id));
  RunTransitionCommand t;
  t.run_id = queued.id;
  t.expected_version = queued.version;
  t.run_to = "dispatching";
  t.attempt_id = attempts[0].id;
  t.expected_attempt_status = "starting";  // it is claimed
  t.attempt_to = "running";
  t.now_ms = Now();
  EXPECT_TRUE(HasError(store().runs().ApplyTransition(t), StatusCode::kConflict,
                       "attempt_status_conflict"));
  t.expected_attempt_status = "claimed";
  t.attempt_to = "succeeded";  // claimed cannot finish without running
  EXPECT_TRUE(
      HasError(store().runs().ApplyTransition(t), StatusCode::kConflict, kReasonIllegalTransition));
  QL_ASSERT_OK_AND_ASSIGN(RunRecord after, store().runs().GetRun(queued.id));
  EXPECT_EQ(after.status, "queued");
  EXPECT_EQ(after.version, queued.version);
  QL_ASSERT_OK_AND_ASSIGN(attempts, store().runs().ListAttempts(queued.id));
  EXPECT_EQ(attempts[0].status, "claimed");
}

TEST_P(RepositoryContractTest, CancelIntentWinsOverALaterCompletion) {
  QL_ASSERT_OK_AND_ASSIGN(RunRecord queued, QueuedRun());
  QL_ASSERT_OK_AND_ASSIGN(RunRecord running, StartRun(queued));
  clock().Advance(50);
  QL_ASSERT_OK_AND_ASSIGN(RunRecord requested,
                          store().runs().RequestCancel(queued.id, "operator", "user", Now()));
  EXPECT_EQ(requested.status, "running");  // the executor stops it
  EXPECT_EQ(requested.cancel_requested_at_ms, Now());
  EXPECT_EQ(requested.cancel_reason, "operator");
  EXPECT_EQ(requested.version, running.version + 1);

  QL_ASSERT_OK_AND_ASSIGN(std::vector<AttemptRecord> attempts,
                          store().runs().ListAttempts(queued.id));
  RunTransitionCommand complete;
  complete.run_id = queued.id;
  complete.expected_version = requested.version;
  complete.run_to = "succeeded";
  complete.attempt_id = attempts[0].id;
  complete.expected_attempt_status = "running";
  complete.attempt_to = "succeeded";
  complete.now_ms = Now();
  EXPECT_TRUE(HasError(store().runs().ApplyTransition(complete), StatusCode::kConflict,
                       "cancel_requested"));
  // Each side is checked on its own: the run alone, the attempt alone, and a retry.
  RunTransitionCommand run_only = complete;
  run_only.attempt_id.reset();
  run_only.expected_attempt_status.reset();
  run_only.attempt_to.reset();
  EXPECT_TRUE(HasError(store().runs().ApplyTransition(run_only), StatusCode::kConflict,
                       "cancel_requested"));
  RunTransitionCommand attempt_only = complete;
  attempt_only.run_to.reset();
  EXPECT_TRUE(HasError(store().runs().ApplyTransition(attempt_only), StatusCode::kConflict,
                       "cancel_requested"));
  RunTransitionCommand retry = run_only;
  retry.run_to = "retry_wait";
  retry.retry_at_ms = Now() + 1000;
  EXPECT_TRUE(
      HasError(store().runs().ApplyTransition(retry), StatusCode::kConflict, "cancel_requested"));

  RunTransitionCommand cancel = complete;
  cancel.run_to = "cancelled";
  cancel.attempt_to = "cancelled";
  cancel.events = {NewEvent{"run.cancelled", "executor", std::nullopt, std::nullopt, "{}"}};
  QL_ASSERT_OK_AND_ASSIGN(RunRecord cancelled, store().runs().ApplyTransition(cancel));
  EXPECT_EQ(cancelled.status, "cancelled");
  QL_ASSERT_OK_AND_ASSIGN(attempts, store().runs().ListAttempts(queued.id));
  EXPECT_EQ(attempts[0].status, "cancelled");
}

TEST_P(RepositoryContractTest, CancellingAQueuedRunCancelsItAndItsAttempt) {
  QL_ASSERT_OK_AND_ASSIGN(RunRecord queued, QueuedRun());
  clock().Advance(10);
  QL_ASSERT_OK_AND_ASSIGN(RunRecord cancelled,
                          store().runs().RequestCancel(queued.id, "not needed", "user", Now()));
  EXPECT_EQ(cancelled.status, "cancelled");
  EXPECT_EQ(cancelled.finished_at_ms, Now());
  EXPECT_EQ(cancelled.cancel_requested_at_ms, Now());
  QL_ASSERT_OK_AND_ASSIGN(std::vector<AttemptRecord> attempts,
                          store().runs().ListAttempts(queued.id));
  EXPECT_EQ(attempts[0].status, "cancelled");
  QL_ASSERT_OK_AND_ASSIGN(std::vector<EventRecord> events,
                          store().runs().ListEvents(queued.id, 0, 100));
  EXPECT_EQ(EventTypes(events),
            (std::vector<std::string>{"run.created", "run.queued", "run.cancel_requested",
                                      "attempt.cancelled", "run.cancelled"}));
  EXPECT_EQ(cancelled.event_sequence, 5);

  // A second request is a no-op: the first intent wins.
  clock().Advance(10);
  QL_ASSERT_OK_AND_ASSIGN(RunRecord again,
                          store().runs().RequestCancel(queued.id, "again", "user", Now()));
  EXPECT_EQ(again.cancel_reason, "not needed");
  EXPECT_EQ(again.version, cancelled.version);
  QL_ASSERT_OK_AND_ASSIGN(events, store().runs().ListEvents(queued.id, 0, 100));
  EXPECT_EQ(events.size(), 5u);
  QL_ASSERT_OK_AND_ASSIGN(std::vector<RunRecord> dispatchable,
                          store().runs().ListDispatchable(kLocal, 10, Now()));
  EXPECT_TRUE(dispatchable.empty());
}

TEST_P(RepositoryContractTest, CancellingAFinishedRunIsConflict) {
  QL_ASSERT_OK_AND_ASSIGN(RunRecord queued, QueuedRun());
  QL_ASSERT_OK_AND_ASSIGN(RunRecord running, StartRun(queued));
  RunTransitionCommand fail;
  fail.run_id = queued.id;
  fail.expected_version = running.version;
  fail.run_to = "failed";
  fail.error_code = "exit_nonzero";
  fail.now_ms = Now();
  QL_ASSERT_OK(store().runs().ApplyTransition(fail));
  EXPECT_TRUE(HasError(store().runs().RequestCancel(queued.id, "late", "user", Now()),
                       StatusCode::kConflict, "run_terminal"));
  EXPECT_TRUE(HasError(store().runs().RequestCancel(NewId(), "x", "user", Now()),
                       StatusCode::kNotFound, "run_not_found"));
}

TEST_P(RepositoryContractTest, AutomaticRetryAddsTheNextAttemptUpToTheLimit) {
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord task, PublishTask(NewId(), std::nullopt, "flaky"));
  QL_ASSERT_OK_AND_ASSIGN(NewRun new_run, ManualRun(task));
  new_run.retry_policy.max_attempts = 2;
  QL_ASSERT_OK_AND_ASSIGN(RunRecord queued, store().runs().CreateRun(new_run));

  RunRecord current = queued;
  for (int attempt = 1; attempt <= 2; ++attempt) {
    SCOPED_TRACE("attempt " + std::to_string(attempt));
    QL_ASSERT_OK_AND_ASSIGN(RunRecord running, StartRun(current));
    QL_ASSERT_OK_AND_ASSIGN(std::vector<AttemptRecord> attempts,
                            store().runs().ListAttempts(queued.id));
    ASSERT_EQ(attempts.size(), static_cast<size_t>(attempt));
    RunTransitionCommand wait;
    wait.run_id = queued.id;
    wait.expected_version = running.version;
    wait.run_to = "retry_wait";
    wait.retry_at_ms = Now() + 1000;
    wait.attempt_id = attempts.back().id;
    wait.expected_attempt_status = "running";
    wait.attempt_to = "failed";
    wait.attempt_exit_code = 1;
    wait.now_ms = Now();
    QL_ASSERT_OK_AND_ASSIGN(RunRecord waiting, store().runs().ApplyTransition(wait));
    EXPECT_EQ(waiting.retry_at_ms, Now() + 1000);

    QL_ASSERT_OK_AND_ASSIGN(std::vector<RunRecord> not_yet,
                            store().runs().ListRetryDue(Now() + 999, 10));
    EXPECT_TRUE(not_yet.empty());
    QL_ASSERT_OK_AND_ASSIGN(std::vector<RunRecord> due,
                            store().runs().ListRetryDue(Now() + 1000, 10));
    ASSERT_EQ(due.size(), 1u);
    EXPECT_EQ(due[0].id, queued.id);

    clock().Advance(1000);
    RunTransitionCommand requeue;
    requeue.run_id = queued.id;
    requeue.expected_version = waiting.version;
    requeue.run_to = "queued";
    requeue.new_attempt_id = NewId();
    requeue.now_ms = Now();
    if (attempt == 2) {
      EXPECT_TRUE(HasError(store().runs().ApplyTransition(requeue), StatusCode::kConflict,
                           "retry_attempts_exhausted"));
      break;
    }
    QL_ASSERT_OK_AND_ASSIGN(current, store().runs().ApplyTransition(requeue));
    EXPECT_EQ(current.status, "queued");
    EXPECT_EQ(current.queued_at_ms, Now());
    QL_ASSERT_OK_AND_ASSIGN(attempts, store().runs().ListAttempts(queued.id));
    ASSERT_EQ(attempts.size(), 2u);
    EXPECT_EQ(attempts[0].status, "failed");
    EXPECT_EQ(attempts[1].attempt, 2);
    EXPECT_EQ(attempts[1].status, "claimed");
    EXPECT_EQ(attempts[1].id, *requeue.new_attempt_id);
    QL_ASSERT_OK_AND_ASSIGN(std::vector<RunRecord> dispatchable,
                            store().runs().ListDispatchable(kLocal, 10, Now()));
    ASSERT_EQ(dispatchable.size(), 1u);
    EXPECT_EQ(dispatchable[0].id, queued.id);
  }
}

// ---------------------------------------------------------------------------------------------
// Events

TEST_P(RepositoryContractTest, AppendedEventsAreConsecutiveAndDedupeKeysUnique) {
  QL_ASSERT_OK_AND_ASSIGN(RunRecord run, QueuedRun());
  QL_ASSERT_OK_AND_ASSIGN(
      EventRecord first,
      store().runs().AppendEvent(
          run.id, NewEvent{"attempt.log_truncated", "executor", std::nullopt, "log-1", "{}"},
          Now()));
  EXPECT_EQ(first.sequence, 3);
  EXPECT_EQ(first.dedupe_key, "log-1");
  QL_ASSERT_OK_AND_ASSIGN(
      EventRecord second,
      store().runs().AppendEvent(
          run.id, NewEvent{"attempt.log_truncated", "executor", std::nullopt, "log-2", "{}"},
          Now()));
  EXPECT_EQ(second.sequence, 4);
  EXPECT_TRUE(HasError(
      store().runs().AppendEvent(
          run.id, NewEvent{"attempt.log_truncated", "executor", std::nullopt, "log-1", "{}"},
          Now()),
      StatusCode::kDuplicate, "dedupe_key_duplicate"));
  QL_ASSERT_OK_AND_ASSIGN(RunRecord after, store().runs().GetRun(run.id));
  EXPECT_EQ(after.event_sequence, 4);
  EXPECT_EQ(after.version, run.version);  // an event alone is not a transition
  QL_ASSERT_OK_AND_ASSIGN(std::vector<EventRecord> events,
                          store().runs().ListEvents(run.id, 0, 100));
  EXPECT_EQ(events.size(), 4u);
  EXPECT_TRUE(
      HasError(store().runs().AppendEvent(
                   NewId(), NewEvent{"x.y", "user", std::nullopt, std::nullopt, "{}"}, Now()),
               StatusCode::kNotFound, "run_not_found"));
}

TEST_P(RepositoryContractTest, EventPayloadIsACanonicalObjectOfAtMost16KiB) {
  QL_ASSERT_OK_AND_ASSIGN(RunRecord run, QueuedRun());
  const std::string overhead = R"({"p":""})";
  const std::string at_limit =
      R"({"p":")" + std::string(kMaxEventPayloadBytes - overhead.size(), 'x') + R"("})";
  ASSERT_EQ(at_limit.size(), 16384u);
  QL_ASSERT_OK(store().runs().AppendEvent(
      run.id, NewEvent{"attempt.note", "executor", std::nullopt, std::nullopt, at_limit}, Now()));
  const std::string over =
      R"({"p":")" + std::string(kMaxEventPayloadBytes - overhead.size() + 1, 'x') + R"("})";
  EXPECT_TRUE(HasError(
      store().runs().AppendEvent(
          run.id, NewEvent{"attempt.note", "executor", std::nullopt, std::nullopt, over}, Now()),
      StatusCode::kInvalidArgument, "event_payload_too_large"));
  EXPECT_TRUE(HasError(
      store().runs().AppendEvent(
          run.id, NewEvent{"attempt.note", "executor", std::nullopt, std::nullopt, "[1,2]"}, Now()),
      StatusCode::kInvalidArgument, "event_payload_invalid"));
  QL_ASSERT_OK_AND_ASSIGN(
      EventRecord canonical,
      store().runs().AppendEvent(
          run.id,
          NewEvent{"attempt.note", "executor", std::nullopt, std::nullopt, R"({ "b": 1, "a": 2 })"},
          Now()));
  EXPECT_EQ(canonical.payload_json, R"({"a":2,"b":1})");
  QL_ASSERT_OK_AND_ASSIGN(std::vector<EventRecord> events,
                          store().runs().ListEvents(run.id, 0, 100));
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[2].payload_json, at_limit);
  EXPECT_EQ(events[3].payload_json, R"({"a":2,"b":1})");

  // A transition carrying an oversized payload writes nothing at all.
  RunTransitionCommand t;
  t.run_id = run.id;
  t.expected_version = run.version;
  t.run_to = "cancelled";
  t.events = {NewEvent{"run.cancelled", "user", std::nullopt, std::nullopt, over}};
  t.now_ms = Now();
  EXPECT_TRUE(HasError(store().runs().ApplyTransition(t), StatusCode::kInvalidArgument,
                       "event_payload_too_large"));
  QL_ASSERT_OK_AND_ASSIGN(RunRecord after, store().runs().GetRun(run.id));
  EXPECT_EQ(after.status, "queued");
}

TEST_P(RepositoryContractTest, WrittenEventsNeverChange) {
  QL_ASSERT_OK_AND_ASSIGN(RunRecord queued, QueuedRun());
  QL_ASSERT_OK_AND_ASSIGN(std::vector<EventRecord> before,
                          store().runs().ListEvents(queued.id, 0, 100));
  clock().Advance(1000);
  QL_ASSERT_OK(StartRun(queued));
  QL_ASSERT_OK(store().runs().RequestCancel(queued.id, "stop", "user", Now()));
  QL_ASSERT_OK_AND_ASSIGN(std::vector<EventRecord> after,
                          store().runs().ListEvents(queued.id, 0, 100));
  ASSERT_GT(after.size(), before.size());
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(after[i].sequence, before[i].sequence);
    EXPECT_EQ(after[i].type, before[i].type);
    EXPECT_EQ(after[i].actor_type, before[i].actor_type);
    EXPECT_EQ(after[i].attempt_id, before[i].attempt_id);
    EXPECT_EQ(after[i].payload_json, before[i].payload_json);
    EXPECT_EQ(after[i].created_at_ms, before[i].created_at_ms);
  }
}

// ---------------------------------------------------------------------------------------------
// Listings

TEST_P(RepositoryContractTest, ListRunsPagesNewestFirstWithoutGapsOrRepeats) {
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord task, PublishTask(NewId(), std::nullopt, "job"));
  std::vector<RunRecord> created;
  for (int i = 0; i < 7; ++i) {
    if (i % 3 != 1) clock().Advance(1000);  // some runs share a creation millisecond
    QL_ASSERT_OK_AND_ASSIGN(NewRun run, ManualRun(task));
    QL_ASSERT_OK_AND_ASSIGN(RunRecord stored, store().runs().CreateRun(run));
    created.push_back(stored);
  }
  std::sort(created.begin(), created.end(), [](const RunRecord& a, const RunRecord& b) {
    return std::tie(a.created_at_ms, a.id) > std::tie(b.created_at_ms, b.id);
  });

  std::vector<std::string> seen;
  PageRequest page;
  page.limit = 3;
  int pages = 0;
  for (;;) {
    QL_ASSERT_OK_AND_ASSIGN(Page<RunRecord> result, store().runs().ListRuns(RunFilter{}, page));
    ++pages;
    EXPECT_LE(result.items.size(), 3u);
    for (const RunRecord& run : result.items) seen.push_back(run.id);
    if (!result.next_key.has_value()) break;
    page.after_key = result.next_key;
    ASSERT_LT(pages, 10);
  }
  EXPECT_EQ(pages, 3);
  ASSERT_EQ(seen.size(), created.size());
  for (size_t i = 0; i < created.size(); ++i) EXPECT_EQ(seen[i], created[i].id);
  EXPECT_EQ(std::set<std::string>(seen.begin(), seen.end()).size(), seen.size());
}

TEST_P(RepositoryContractTest, ListRunsFiltersByProjectTaskTriggerAndStatus) {
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord a, PublishTask(NewId(), std::nullopt, "a"));
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord b, PublishTask(NewId(), std::nullopt, "b"));
  QL_ASSERT_OK_AND_ASSIGN(NewRun a1, ManualRun(a));
  QL_ASSERT_OK(store().runs().CreateRun(a1));
  QL_ASSERT_OK_AND_ASSIGN(NewRun a2, ManualRun(a));
  QL_ASSERT_OK(store().runs().CreateRun(a2));
  QL_ASSERT_OK_AND_ASSIGN(NewRun b1, ManualRun(b));
  QL_ASSERT_OK(store().runs().CreateRun(b1));
  QL_ASSERT_OK(store().runs().RequestCancel(a2.run_id, "x", "user", Now()));
  // One cron run of task b.
  const std::string trigger_id = NewId();
  QL_ASSERT_OK(PublishTrigger(trigger_id, std::nullopt, b));
  QL_ASSERT_OK_AND_ASSIGN(DueSchedule fresh, DueRow(trigger_id, Now()));
  QL_ASSERT_OK(store().schedules().ApplyScheduleAdvance(MoveCursor(fresh, Now())));
  QL_ASSERT_OK_AND_ASSIGN(DueSchedule due, DueRow(trigger_id, Now()));
  QL_ASSERT_OK_AND_ASSIGN(ScheduleAdvance admit, Admit(due));
  QL_ASSERT_OK(store().schedules().ApplyScheduleAdvance(admit));

  auto ids = [&](const RunFilter& filter) -> std::set<std::string> {
    PageRequest page;
    page.limit = 100;
    Result<Page<RunRecord>> result = store().runs().ListRuns(filter, page);
    std::set<std::string> out;
    if (!result.ok()) {
      ADD_FAILURE() << result.status().ToString();
      return out;
    }
    for (const RunRecord& run : result->items) out.insert(run.id);
    return out;
  };
  RunFilter by_task;
  by_task.task_id = a.task_id;
  EXPECT_EQ(ids(by_task), (std::set<std::string>{a1.run_id, a2.run_id}));
  RunFilter by_status;
  by_status.status = "cancelled";
  EXPECT_EQ(ids(by_status), (std::set<std::string>{a2.run_id}));
  RunFilter by_trigger;
  by_trigger.trigger_id = trigger_id;
  EXPECT_EQ(ids(by_trigger), (std::set<std::string>{admit.run->run_id}));
  RunFilter by_project;
  by_project.project_id = project().id;
  EXPECT_EQ(ids(by_project).size(), 4u);
  RunFilter combined;
  combined.task_id = b.task_id;
  combined.status = "queued";
  EXPECT_EQ(ids(combined), (std::set<std::string>{b1.run_id, admit.run->run_id}));
  RunFilter other_project;
  other_project.project_id = NewId();
  EXPECT_TRUE(ids(other_project).empty());
  RunFilter bad_status;
  bad_status.status = "done";
  EXPECT_TRUE(HasError(store().runs().ListRuns(bad_status, PageRequest{}),
                       StatusCode::kInvalidArgument, "invalid_status"));
}

TEST_P(RepositoryContractTest, ListRunsByCreationTimeAndIdRange) {
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord task, PublishTask(NewId(), std::nullopt, "job"));
  std::vector<RunRecord> created;
  for (int i = 0; i < 3; ++i) {
    clock().Advance(1000);
    QL_ASSERT_OK_AND_ASSIGN(NewRun run, ManualRun(task));
    QL_ASSERT_OK_AND_ASSIGN(RunRecord stored, store().runs().CreateRun(run));
    created.push_back(stored);
  }
  auto ids = [&](const RunFilter& filter) -> std::vector<std::string> {
    Result<Page<RunRecord>> result =
        store().runs().ListRuns(filter, PageRequest{std::nullopt, 100});
    std::vector<std::string> out;
    if (!result.ok()) {
      ADD_FAILURE() << result.status().ToString();
      return out;
    }
    for (const RunRecord& run : result->items) out.push_back(run.id);
    return out;
  };
  RunFilter from_second;
  from_second.created_from_ms = created[1].created_at_ms;  // inclusive
  EXPECT_EQ(ids(from_second), (std::vector<std::string>{created[2].id, created[1].id}));
  RunFilter before_second;
  before_second.created_before_ms = created[1].created_at_ms;  // exclusive
  EXPECT_EQ(ids(before_second), (std::vector<std::string>{created[0].id}));
  RunFilter window;
  window.created_from_ms = created[1].created_at_ms;
  window.created_before_ms = created[2].created_at_ms;
  EXPECT_EQ(ids(window), (std::vector<std::string>{created[1].id}));

  // An id range is the runs a prefix names: the prefix completed with 0s and with fs.
  const std::string& id = created[1].id;
  auto range_of = [](const std::string& prefix) {
    const std::string low = "00000000-0000-0000-0000-000000000000";
    const std::string high = "ffffffff-ffff-ffff-ffff-ffffffffffff";
    return std::pair{prefix + low.substr(prefix.size()), prefix + high.substr(prefix.size())};
  };
  RunFilter exact;
  exact.id_range = range_of(id.substr(0, 30));
  EXPECT_EQ(ids(exact), (std::vector<std::string>{id}));
  RunFilter whole;
  whole.id_range = range_of(id);
  EXPECT_EQ(ids(whole), (std::vector<std::string>{id}));
  RunFilter none;
  none.id_range = range_of("ffffffff-ffff-ffff-ffff-fffffff");
  EXPECT_TRUE(ids(none).empty());
}

TEST_P(RepositoryContractTest, MalformedPageKeyIsInvalidArgument) {
  QL_ASSERT_OK(QueuedRun());
  QL_ASSERT_OK(QueuedRun());
  PageRequest page;
  page.limit = 1;
  QL_ASSERT_OK_AND_ASSIGN(Page<RunRecord> first, store().runs().ListRuns(RunFilter{}, page));
  ASSERT_TRUE(first.next_key.has_value());
  QL_ASSERT_OK_AND_ASSIGN(Page<TaskRevisionRecord> tasks,
                          store().definitions().ListTasks(project().id, page));
  ASSERT_TRUE(tasks.next_key.has_value());

  for (const std::string& key : {std::string("!!!"), std::string(""), *tasks.next_key,
                                 first.next_key->substr(0, first.next_key->size() - 3)}) {
    SCOPED_TRACE("key " + key);
    page.after_key = key;
    EXPECT_TRUE(HasError(store().runs().ListRuns(RunFilter{}, page), StatusCode::kInvalidArgument,
                         "invalid_page_key"));
  }
  page.after_key = first.next_key;
  page.limit = 0;
  EXPECT_TRUE(HasError(store().runs().ListRuns(RunFilter{}, page), StatusCode::kInvalidArgument,
                       "invalid_limit"));
}

TEST_P(RepositoryContractTest, DispatchOrderIsPriorityThenFifo) {
  std::vector<std::string> ids;
  for (int priority : {0, 5, 0, 5}) {
    clock().Advance(10);
    QL_ASSERT_OK_AND_ASSIGN(RunRecord run, QueuedRun(priority));
    ids.push_back(run.id);
  }
  QL_ASSERT_OK_AND_ASSIGN(std::vector<RunRecord> order,
                          store().runs().ListDispatchable(kLocal, 10, Now()));
  ASSERT_EQ(order.size(), 4u);
  EXPECT_EQ(order[0].id, ids[1]);
  EXPECT_EQ(order[1].id, ids[3]);
  EXPECT_EQ(order[2].id, ids[0]);
  EXPECT_EQ(order[3].id, ids[2]);
  QL_ASSERT_OK_AND_ASSIGN(std::vector<RunRecord> limited,
                          store().runs().ListDispatchable(kLocal, 2, Now()));
  ASSERT_EQ(limited.size(), 2u);
  EXPECT_EQ(limited[1].id, ids[3]);
  QL_ASSERT_OK_AND_ASSIGN(std::vector<RunRecord> remote,
                          store().runs().ListDispatchable("remote_worker", 10, Now()));
  EXPECT_TRUE(remote.empty());

  // Started and cancelled runs leave the queue.
  QL_ASSERT_OK_AND_ASSIGN(RunRecord first, store().runs().GetRun(ids[1]));
  QL_ASSERT_OK(StartRun(first));
  QL_ASSERT_OK(store().runs().RequestCancel(ids[0], "x", "user", Now()));
  QL_ASSERT_OK_AND_ASSIGN(order, store().runs().ListDispatchable(kLocal, 10, Now()));
  ASSERT_EQ(order.size(), 2u);
  EXPECT_EQ(order[0].id, ids[3]);
  EXPECT_EQ(order[1].id, ids[2]);
}

TEST_P(RepositoryContractTest, ActiveRunsAndStatusCounts) {
  QL_ASSERT_OK_AND_ASSIGN(RunRecord a, QueuedRun());
  clock().Advance(1);
  QL_ASSERT_OK_AND_ASSIGN(RunRecord b, QueuedRun());
  clock().Advance(1);
  QL_ASSERT_OK_AND_ASSIGN(RunRecord c, QueuedRun());
  clock().Advance(1);
  QL_ASSERT_OK_AND_ASSIGN(RunRecord d, QueuedRun());
  QL_ASSERT_OK(StartRun(a));
  QL_ASSERT_OK(store().runs().RequestCancel(c.id, "x", "user", Now()));
  // A run whose process vanished: lost, with a lost (terminal) attempt, still needs recovery.
  QL_ASSERT_OK_AND_ASSIGN(RunRecord running, StartRun(d));
  QL_ASSERT_OK_AND_ASSIGN(std::vector<AttemptRecord> attempts, store().runs().ListAttempts(d.id));
  RunTransitionCommand lose;
  lose.run_id = d.id;
  lose.expected_version = running.version;
  lose.run_to = "lost";
  lose.attempt_id = attempts[0].id;
  lose.expected_attempt_status = "running";
  lose.attempt_to = "lost";
  lose.now_ms = Now();
  QL_ASSERT_OK(store().runs().ApplyTransition(lose));

  QL_ASSERT_OK_AND_ASSIGN(std::vector<RunRecord> active, store().runs().ListActive());
  ASSERT_EQ(active.size(), 2u);
  EXPECT_EQ(active[0].id, a.id);
  EXPECT_EQ(active[1].id, d.id);
  QL_ASSERT_OK_AND_ASSIGN(auto counts, store().runs().CountRunsByStatus(std::nullopt));
  std::map<std::string, int64_t> by_status(counts.begin(), counts.end());
  EXPECT_EQ(by_status["running"], 1);
  EXPECT_EQ(by_status["queued"], 1);
  EXPECT_EQ(by_status["cancelled"], 1);
  EXPECT_EQ(by_status["lost"], 1);
  EXPECT_EQ(by_status.size(), 4u);
  // Counted for one project: every run here is the contract project's; another has none.
  QL_ASSERT_OK_AND_ASSIGN(auto mine, store().runs().CountRunsByStatus(project().id));
  EXPECT_EQ(mine, counts);
  QL_ASSERT_OK_AND_ASSIGN(auto none, store().runs().CountRunsByStatus(NewId()));
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(*store().runs().CountRunsInStatus(RunStatus::kQueued), 1);
  EXPECT_EQ(*store().runs().CountRunsInStatus(RunStatus::kLost), 1);
  EXPECT_EQ(*store().runs().CountRunsInStatus(RunStatus::kSucceeded), 0);
  EXPECT_EQ(b.status, "queued");
}

}  // namespace ql::testing
