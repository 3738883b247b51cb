#include "ql/engine/control_service.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>

#include "ql/core/rfc3339.h"
#include "ql/core/secret_ref.h"
#include "ql/core/states.h"
#include "ql/engine/script_retention.h"
#include "ql/storage/sqlite/sqlite_store.h"
#include "ql/testing/fake_clock.h"
#include "ql/testing/test_principals.h"

namespace ql {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

int64_t At(const char* rfc3339) { return ParseRfc3339(rfc3339).value(); }

json ShellTask(const std::string& name, const std::string& command = "echo hi") {
  return json{{"name", name}, {"spec", {{"command", {{"kind", "shell"}, {"command", command}}}}}};
}

class ControlServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "ql-control-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    SqliteOptions options;
    options.path = (dir_ / "ql.db").string();
    auto store = SqliteStore::Open(options, clock_);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
    ControlOptions control;
    control.grace_ms = 300'000;
    service_ = std::make_unique<ControlService>(*store_, clock_, random_, control);
    ASSERT_TRUE(service_->EnsureDefaultProject().ok());
  }
  void TearDown() override {
    service_.reset();
    store_.reset();
    fs::remove_all(dir_);
  }

  TaskView CreateTask(const json& body) {
    auto created = service_->PublishTask(TaskWrite{body, std::nullopt});
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    return created.ok() ? created->task : TaskView{};
  }

  TriggerView CreateTrigger(const std::string& task_id, const std::string& expression,
                            const std::string& zone, const std::string& misfire = "skip") {
    TriggerWrite write;
    write.task_id = task_id;
    write.expression = expression;
    write.timezone = zone;
    write.misfire = misfire;
    auto created = service_->AddTrigger(write);
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    return created.ok() ? created->trigger : TriggerView{};
  }

  // A summary of everything the management API can change, to prove rejected calls change
  // nothing.
  std::string Snapshot() {
    std::string out;
    auto tasks = store_->definitions().ListTasks(project_id(), PageRequest{std::nullopt, 500});
    for (const auto& t : tasks->items) {
      out += "task " + t.task_id + " r" + std::to_string(t.revision) + "\n";
      auto revisions = store_->definitions().ListTaskRevisions(t.task_id);
      out += "  revisions " + std::to_string(revisions->size()) + "\n";
    }
    auto triggers = store_->definitions().ListTriggers(project_id(), std::nullopt,
                                                       PageRequest{std::nullopt, 500});
    for (const auto& t : triggers->items) {
      out += "trigger " + t.trigger_id + " r" + std::to_string(t.revision) +
             (t.enabled ? " on" : " off") + " pin " + std::to_string(t.task_revision) + "\n";
    }
    RunFilter filter;
    auto runs = store_->runs().ListRuns(filter, PageRequest{std::nullopt, 500});
    for (const auto& r : runs->items) {
      out += "run " + r.id + " " + r.status + " v" + std::to_string(r.version) + "\n";
    }
    return out;
  }

  std::string project_id() { return service_->EnsureDefaultProject()->id; }

  fs::path dir_;
  testing::FakeClock clock_{At("2026-01-01T00:00:00Z")};
  testing::SeededRandom random_{42};
  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<ControlService> service_;
};

TEST_F(ControlServiceTest, PublishesTaskWithExecutionRevision) {
  auto created = service_->PublishTask(TaskWrite{ShellTask("backup"), std::nullopt});
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_FALSE(created->replayed);
  const TaskView& task = created->task;
  EXPECT_EQ(task.head.current_revision, 1);
  EXPECT_EQ(task.revision.name, "backup");
  EXPECT_TRUE(task.revision.enabled);
  EXPECT_EQ(task.revision.content_digest.size(), 64u);
  auto execution =
      store_->definitions().FindExecutionRevision(task.head.task_id, 1, "local_process");
  ASSERT_TRUE(execution.ok()) << execution.status().ToString();
  EXPECT_THAT(execution->id, HasSubstr("qltd:v1:1:"));

  auto fetched = service_->GetTask(task.head.task_id);
  ASSERT_TRUE(fetched.ok());
  EXPECT_EQ(fetched->revision.content_digest, task.revision.content_digest);
}

TEST_F(ControlServiceTest, RunsSnapshotTheTaskRetryPolicy) {
  json body = ShellTask("retrying");
  body["retry"] = {{"max_attempts", 3},
                   {"retry_on_lost", true},
                   {"safety", "idempotent"},
                   {"backoff_base_ms", 2000},
                   {"backoff_max_ms", 30000}};
  TaskView task = CreateTask(body);
  ASSERT_TRUE(task.retry.has_value());
  EXPECT_EQ(task.retry->max_attempts, 3);
  auto run = service_->StartRun(StartRunRequest{task.head.task_id, {}, {}});
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_EQ(run->run.retry_policy.max_attempts, 3);
  EXPECT_TRUE(run->run.retry_policy.retry_on_lost);
  EXPECT_EQ(run->run.retry_policy.safety, "idempotent");
  EXPECT_EQ(run->run.retry_policy.backoff_base_ms, 2000);
  EXPECT_EQ(run->run.retry_policy.backoff_max_ms, 30000);

  // A new revision without a policy goes back to the default for its runs; old runs keep theirs.
  auto revised = service_->PublishTaskRevision(task.head.task_id, 1,
                                               TaskWrite{ShellTask("retrying"), std::nullopt});
  ASSERT_TRUE(revised.ok());
  EXPECT_EQ(revised->task.retry->max_attempts, 1);
  auto later = service_->StartRun(StartRunRequest{task.head.task_id, {}, {}});
  ASSERT_TRUE(later.ok());
  EXPECT_EQ(later->run.retry_policy.max_attempts, 1);
  EXPECT_EQ(service_->GetRun(run->run.id)->run.retry_policy.max_attempts, 3);
}

TEST_F(ControlServiceTest, ReplayedCreateReturnsTheSameTaskAndDriftIsAConflict) {
  TaskWrite write{ShellTask("nightly"), std::string("create-nightly-1")};
  auto first = service_->PublishTask(write);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  clock_.Advance(1000);
  auto again = service_->PublishTask(write);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(again->replayed);
  EXPECT_EQ(again->task.head.task_id, first->task.head.task_id);

  const std::string before = Snapshot();
  auto drift = service_->PublishTask(
      TaskWrite{ShellTask("nightly", "echo other"), std::string("create-nightly-1")});
  ASSERT_FALSE(drift.ok());
  EXPECT_EQ(drift.status().code(), StatusCode::kConflict);
  EXPECT_EQ(Snapshot(), before);
}

TEST_F(ControlServiceTest, RevisionNeedsTheCurrentExpectedRevision) {
  TaskView task = CreateTask(ShellTask("a"));
  auto second =
      service_->PublishTaskRevision(task.head.task_id, 1, TaskWrite{ShellTask("a2"), std::nullopt});
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(second->task.revision.revision, 2);

  const std::string before = Snapshot();
  auto stale =
      service_->PublishTaskRevision(task.head.task_id, 1, TaskWrite{ShellTask("a3"), std::nullopt});
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.status().code(), StatusCode::kConflict);
  EXPECT_EQ(stale.status().reason(), "revision_conflict");
  EXPECT_EQ(Snapshot(), before);

  auto history = service_->TaskHistory(task.head.task_id);
  ASSERT_TRUE(history.ok());
  ASSERT_EQ(history->size(), 2u);
  EXPECT_EQ((*history)[0].revision, 2);  // newest first
}

TEST_F(ControlServiceTest, RejectsInvalidTaskBodiesWithoutWriting) {
  CreateTask(ShellTask("keep"));
  const std::string before = Snapshot();
  struct Case {
    json body;
    std::string reason;
  };
  const Case cases[] = {
      {json{{"name", "x"}}, "task_missing_field"},
      {json{{"name", "x"},
            {"spec", {{"command", {{"kind", "shell"}, {"command", "ls"}}}}},
            {"colour", "red"}},
       "task_unknown_field"},
      {json{{"name", 5}, {"spec", {{"command", {{"kind", "shell"}, {"command", "ls"}}}}}},
       "task_invalid_name"},
      {json{{"name", "x"}, {"spec", {{"command", {{"kind", "argv"}, {"file", "relative"}}}}}},
       "spec_invalid_path"},
      {json{{"name", "x"},
            {"spec", {{"command", {{"kind", "shell"}, {"command", "ls"}}}, {"timeoutMs", 0}}}},
       "spec_timeout_out_of_range"},
      {json{{"name", "x"},
            {"spec", {{"command", {{"kind", "shell"}, {"command", "ls"}}}}},
            {"retry", {{"max_attempts", 17}}}},
       "retry_out_of_range"},
      {json{{"name", "x"},
            {"spec", {{"command", {{"kind", "shell"}, {"command", "ls"}}}}},
            {"retry", {{"tries", 2}}}},
       "retry_unknown_field"},
      {json{{"name", "x"},
            {"spec", {{"command", {{"kind", "shell"}, {"command", "ls"}}}}},
            {"retry", {{"retry_on_lost", true}}}},
       "retry_lost_requires_safety"},
      {json{{"name", "x"},
            {"spec", {{"command", {{"kind", "shell"}, {"command", "ls"}}}}},
            {"retry", {{"backoff_base_ms", 5000}, {"backoff_max_ms", 1000}}}},
       "retry_out_of_range"},
      {json::array(), "task_invalid_type"},
  };
  for (const Case& c : cases) {
    auto result = service_->PublishTask(TaskWrite{c.body, std::nullopt});
    ASSERT_FALSE(result.ok()) << c.body.dump();
    EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument) << c.body.dump();
    EXPECT_EQ(result.status().reason(), c.reason)
        << c.body.dump() << " -> " << result.status().ToString();
  }
  // A SecretRef of another project's secret: a task may only use its own project's secrets.
  Result<std::string> foreign =
      EncodeSecretRef(SecretRef{"019ca869-5000-784e-9a8e-3849b4090010", "token", std::nullopt});
  ASSERT_TRUE(foreign.ok()) << foreign.status().ToString();
  json foreign_body = ShellTask("foreign");
  foreign_body["spec"]["environment"] = json{{"TOKEN", *foreign}};
  auto cross = service_->PublishTask(TaskWrite{foreign_body, std::nullopt});
  EXPECT_EQ(cross.status().reason(), "secret_ref_other_project") << cross.status().ToString();
  EXPECT_NE(cross.status().message().find("TOKEN"), std::string::npos);
  auto bad_mutation = service_->PublishTask(TaskWrite{ShellTask("y"), std::string("has space")});
  EXPECT_EQ(bad_mutation.status().reason(), "invalid_mutation_id");
  // Not an id, so a name, and no task has it.
  auto bad_id = service_->PublishTaskRevision("not-a-uuid", 1, TaskWrite{ShellTask("y"), {}});
  EXPECT_EQ(bad_id.status().reason(), "task_not_found");
  auto empty_id = service_->PublishTaskRevision("", 1, TaskWrite{ShellTask("y"), {}});
  EXPECT_EQ(empty_id.status().reason(), "invalid_id");
  EXPECT_EQ(Snapshot(), before);
}

TEST_F(ControlServiceTest, ListsTasksInPagesWithCursors) {
  for (int i = 0; i < 5; ++i) CreateTask(ShellTask("task" + std::to_string(i)));
  std::vector<std::string> seen;
  PageQuery page;
  page.limit = 2;
  for (int guard = 0; guard < 10; ++guard) {
    auto listed = service_->ListTasks(page);
    ASSERT_TRUE(listed.ok()) << listed.status().ToString();
    for (const auto& t : listed->items) seen.push_back(t.head.task_id);
    if (!listed->next_cursor.has_value()) break;
    page.cursor = listed->next_cursor;
  }
  EXPECT_EQ(seen.size(), 5u);
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));

  page.cursor = "not a cursor";
  EXPECT_EQ(service_->ListTasks(page).status().reason(), "invalid_cursor");
  page.cursor = std::nullopt;
  page.limit = 0;
  EXPECT_EQ(service_->ListTasks(page).status().reason(), "invalid_limit");
  page.limit = 501;
  EXPECT_EQ(service_->ListTasks(page).status().reason(), "invalid_limit");
}

TEST_F(ControlServiceTest, TriggerStoresCanonicalZoneAndExpression) {
  TaskView task = CreateTask(ShellTask("t"));
  TriggerView trigger = CreateTrigger(task.head.task_id, "0   9 * * MON-FRI", "US/Eastern");
  EXPECT_EQ(trigger.revision.timezone, "America/New_York");
  EXPECT_EQ(trigger.revision.expression, "0 9 * * MON-FRI");
  EXPECT_EQ(trigger.revision.task_revision, 1);
  EXPECT_EQ(trigger.revision.task_digest, task.revision.content_digest);
  EXPECT_EQ(trigger.state, "active");
  // 2026-01-01 is a Thursday: 09:00 EST = 14:00Z.
  EXPECT_EQ(trigger.next_fire_at_ms, At("2026-01-01T14:00:00Z"));
}

TEST_F(ControlServiceTest, RejectsInvalidTriggersWithoutWriting) {
  TaskView task = CreateTask(ShellTask("t"));
  const std::string before = Snapshot();
  struct Case {
    std::string expression, zone, misfire, reason;
  };
  const Case cases[] = {
      {"61 * * * *", "UTC", "skip", "cron_value_out_of_range"},
      {"@daily", "UTC", "skip", "cron_macro_unsupported"},
      {"0 0 30 2 *", "UTC", "skip", "cron_never_fires"},
      {"* * *", "UTC", "skip", "cron_field_count"},
      {"0 0 * * *", "Mars/Olympus", "skip", "timezone_unknown"},
      {"0 0 * * *", "", "skip", "timezone_required"},
      {"0 0 * * *", "UTC", "sometimes", "invalid_misfire_policy"},
  };
  for (const Case& c : cases) {
    TriggerWrite write;
    write.task_id = task.head.task_id;
    write.expression = c.expression;
    write.timezone = c.zone;
    write.misfire = c.misfire;
    auto result = service_->AddTrigger(write);
    ASSERT_FALSE(result.ok()) << c.expression;
    EXPECT_EQ(result.status().reason(), c.reason) << result.status().ToString();
  }
  TriggerWrite missing_task;
  missing_task.task_id = "01890000-0000-7000-8000-000000000000";
  missing_task.expression = "0 0 * * *";
  missing_task.timezone = "UTC";
  EXPECT_EQ(service_->AddTrigger(missing_task).status().reason(), "task_not_found");
  EXPECT_EQ(Snapshot(), before);
}

TEST_F(ControlServiceTest, CronErrorMessageNamesTheFieldAndToken) {
  auto preview = service_->PreviewCron("0 25 * * *", "UTC", std::nullopt, 3);
  ASSERT_FALSE(preview.ok());
  EXPECT_EQ(preview.status().reason(), "cron_value_out_of_range");
  EXPECT_THAT(preview.status().message(), HasSubstr("hour"));
  EXPECT_THAT(preview.status().message(), HasSubstr("25"));
}

TEST_F(ControlServiceTest, DisabledTaskCannotGetTriggersOrRuns) {
  json body = ShellTask("off");
  body["enabled"] = false;
  TaskView task = CreateTask(body);
  EXPECT_FALSE(
      store_->definitions().FindExecutionRevision(task.head.task_id, 1, "local_process").ok());
  TriggerWrite write;
  write.task_id = task.head.task_id;
  write.expression = "0 0 * * *";
  write.timezone = "UTC";
  EXPECT_EQ(service_->AddTrigger(write).status().reason(), "task_disabled");
  EXPECT_EQ(service_->StartRun(StartRunRequest{task.head.task_id, {}, {}}).status().reason(),
            "task_disabled");
}

TEST_F(ControlServiceTest, RepublishedTaskLeavesTriggerStaleUntilRepinned) {
  TaskView task = CreateTask(ShellTask("t"));
  TriggerView trigger = CreateTrigger(task.head.task_id, "0 * * * *", "UTC");
  ASSERT_TRUE(service_
                  ->PublishTaskRevision(task.head.task_id, 1,
                                        TaskWrite{ShellTask("t", "echo v2"), std::nullopt})
                  .ok());
  auto stale = service_->GetTrigger(trigger.head.trigger_id);
  ASSERT_TRUE(stale.ok());
  EXPECT_TRUE(stale->pin_stale);
  EXPECT_EQ(stale->state, "pin_stale");
  EXPECT_FALSE(stale->next_fire_at_ms.has_value());

  // Disable, then enabling again is refused while the pin is stale.
  auto disabled = service_->SetTriggerEnabled(trigger.head.trigger_id, false);
  ASSERT_TRUE(disabled.ok()) << disabled.status().ToString();
  EXPECT_EQ(disabled->trigger.revision.revision, 2);
  EXPECT_EQ(disabled->trigger.state, "disabled");
  const std::string before = Snapshot();
  EXPECT_EQ(service_->SetTriggerEnabled(trigger.head.trigger_id, true).status().reason(),
            "trigger_pin_stale");
  EXPECT_EQ(Snapshot(), before);

  auto repinned = service_->RepinTrigger(trigger.head.trigger_id);
  ASSERT_TRUE(repinned.ok()) << repinned.status().ToString();
  EXPECT_EQ(repinned->trigger.revision.task_revision, 2);
  EXPECT_EQ(repinned->trigger.revision.revision, 3);
  auto enabled = service_->SetTriggerEnabled(trigger.head.trigger_id, true);
  ASSERT_TRUE(enabled.ok()) << enabled.status().ToString();
  EXPECT_EQ(enabled->trigger.state, "active");
  EXPECT_EQ(enabled->trigger.revision.revision, 4);

  // Repeating a state change is a no-op that publishes nothing.
  auto again = service_->SetTriggerEnabled(trigger.head.trigger_id, true);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->replayed);
  EXPECT_EQ(again->trigger.revision.revision, 4);
  auto repin_again = service_->RepinTrigger(trigger.head.trigger_id);
  ASSERT_TRUE(repin_again.ok());
  EXPECT_TRUE(repin_again->replayed);
}

TEST_F(ControlServiceTest, PreviewCronFollowsNewYorkDaylightSaving) {
  // Spring forward on 2026-03-08: 02:30 does not exist and fires at 03:00 EDT.
  auto spring =
      service_->PreviewCron("30 2 * * *", "America/New_York", At("2026-03-07T00:00:00Z"), 3);
  ASSERT_TRUE(spring.ok()) << spring.status().ToString();
  EXPECT_THAT(spring->fire_times_ms,
              ElementsAre(At("2026-03-07T07:30:00Z"), At("2026-03-08T07:00:00Z"),
                          At("2026-03-09T06:30:00Z")));
  // Fall back on 2026-11-01: 01:30 happens twice and fires once, at its first instant.
  auto fall =
      service_->PreviewCron("30 1 * * *", "America/New_York", At("2026-10-31T12:00:00Z"), 3);
  ASSERT_TRUE(fall.ok());
  EXPECT_THAT(fall->fire_times_ms,
              ElementsAre(At("2026-11-01T05:30:00Z"), At("2026-11-02T06:30:00Z"),
                          At("2026-11-03T06:30:00Z")));
  EXPECT_EQ(service_->PreviewCron("* * * * *", "UTC", std::nullopt, 0).status().reason(),
            "invalid_count");
  EXPECT_EQ(service_->PreviewCron("* * * * *", "UTC", std::nullopt, 101).status().reason(),
            "invalid_count");
}

TEST_F(ControlServiceTest, TriggerPreviewAppliesTheMisfirePolicyLikeTheScheduler) {
  TaskView task = CreateTask(ShellTask("t"));
  TriggerView skip = CreateTrigger(task.head.task_id, "0 * * * *", "UTC", "skip");
  TriggerView once = CreateTrigger(task.head.task_id, "0 * * * *", "UTC", "fire_once");
  // Published at 00:00; the first occurrence is 01:00. At 01:10 it is 10 min late, beyond the
  // 5 min grace: `skip` drops it, `fire_once` still admits it once.
  clock_.SetNowMs(At("2026-01-01T01:10:00Z"));
  auto skipped = service_->PreviewTrigger(skip.head.trigger_id, 2);
  ASSERT_TRUE(skipped.ok()) << skipped.status().ToString();
  EXPECT_THAT(skipped->fire_times_ms,
              ElementsAre(At("2026-01-01T02:00:00Z"), At("2026-01-01T03:00:00Z")));
  auto fired = service_->PreviewTrigger(once.head.trigger_id, 2);
  ASSERT_TRUE(fired.ok());
  EXPECT_THAT(fired->fire_times_ms,
              ElementsAre(At("2026-01-01T01:00:00Z"), At("2026-01-01T02:00:00Z")));
  // Inside the grace the late occurrence is still admitted under `skip`.
  clock_.SetNowMs(At("2026-01-01T01:03:00Z"));
  auto in_grace = service_->PreviewTrigger(skip.head.trigger_id, 1);
  ASSERT_TRUE(in_grace.ok());
  EXPECT_THAT(in_grace->fire_times_ms, ElementsAre(At("2026-01-01T01:00:00Z")));
  auto view = service_->GetTrigger(skip.head.trigger_id);
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->next_fire_at_ms, At("2026-01-01T01:00:00Z"));
}

TEST_F(ControlServiceTest, ManualRunsReplayByIdempotencyKey) {
  TaskView task = CreateTask(ShellTask("t"));
  TaskView other = CreateTask(ShellTask("u"));
  auto first = service_->StartRun(StartRunRequest{task.head.task_id, "deploy-42", 5});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_FALSE(first->replayed);
  EXPECT_EQ(first->run.status, "queued");
  EXPECT_EQ(first->run.trigger_type, "manual");
  EXPECT_EQ(first->run.priority, 5);
  EXPECT_EQ(first->run.task_revision, 1);
  EXPECT_FALSE(first->run.trigger_id.has_value());

  auto view = service_->GetRun(first->run.id);
  ASSERT_TRUE(view.ok());
  ASSERT_EQ(view->attempts.size(), 1u);
  EXPECT_EQ(view->attempts[0].status, "claimed");
  EXPECT_EQ(view->attempts[0].executor_type, "local_process");

  auto replay = service_->StartRun(StartRunRequest{task.head.task_id, "deploy-42", 5});
  ASSERT_TRUE(replay.ok());
  EXPECT_TRUE(replay->replayed);
  EXPECT_EQ(replay->run.id, first->run.id);

  const std::string before = Snapshot();
  auto reused = service_->StartRun(StartRunRequest{other.head.task_id, "deploy-42", {}});
  EXPECT_EQ(reused.status().reason(), "idempotency_key_reused");
  EXPECT_EQ(
      service_->StartRun(StartRunRequest{task.head.task_id, "ql3:cron:v1:x", {}}).status().reason(),
      "invalid_idempotency_key");
  EXPECT_EQ(service_->StartRun(StartRunRequest{task.head.task_id, {}, 1001}).status().reason(),
            "invalid_priority");
  EXPECT_EQ(service_->StartRun(StartRunRequest{"nope", {}, {}}).status().reason(),
            "task_not_found");
  EXPECT_EQ(service_->StartRun(StartRunRequest{"", {}, {}}).status().reason(), "invalid_id");
  EXPECT_EQ(Snapshot(), before);
}

TEST_F(ControlServiceTest, CancelAndRetry) {
  TaskView task = CreateTask(ShellTask("t"));
  auto run = service_->StartRun(StartRunRequest{task.head.task_id, {}, {}});
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(service_->RetryRun(run->run.id).status().reason(), "run_not_terminal");

  auto cancelled = service_->CancelRun(run->run.id, std::string("no longer needed"));
  ASSERT_TRUE(cancelled.ok()) << cancelled.status().ToString();
  EXPECT_EQ(cancelled->status, "cancelled");
  EXPECT_EQ(cancelled->cancel_reason, "no longer needed");
  EXPECT_EQ(service_->CancelRun(run->run.id, std::nullopt).status().reason(),
            "run_already_terminal");
  EXPECT_EQ(service_->CancelRun(run->run.id, std::string("bad\nreason")).status().reason(),
            "invalid_cancel_reason");

  auto retried = service_->RetryRun(run->run.id);
  ASSERT_TRUE(retried.ok()) << retried.status().ToString();
  EXPECT_NE(retried->run.id, run->run.id);
  EXPECT_EQ(retried->run.retry_of_run_id, run->run.id);
  EXPECT_EQ(retried->run.status, "queued");

  auto events = service_->ListRunEvents(run->run.id, 0, 100);
  ASSERT_TRUE(events.ok());
  std::vector<std::string> types;
  for (const auto& e : *events) types.push_back(e.type);
  EXPECT_THAT(types, ::testing::Contains("run.cancel_requested"));
  EXPECT_EQ(service_->ListRunEvents(run->run.id, -1, 10).status().reason(), "invalid_after");
  EXPECT_EQ(service_->GetRun("01890000-0000-7000-8000-000000000000").status().reason(),
            "run_not_found");
}

// A prefix several runs share is refused naming each with its task and creation time; the
// prefixes ShortRunIds gives are unique in the project, runs of other tasks included.
TEST_F(ControlServiceTest, RunPrefixesAreUniqueInTheProjectAndAmbiguityNamesTheCandidates) {
  TaskView a = CreateTask(ShellTask("alpha"));
  TaskView b = CreateTask(ShellTask("beta"));
  auto first = service_->StartRun(StartRunRequest{a.head.task_id, {}, {}});
  auto second = service_->StartRun(StartRunRequest{b.head.task_id, {}, {}});
  clock_.Advance(120'000);
  auto later = service_->StartRun(StartRunRequest{a.head.task_id, {}, {}});
  ASSERT_TRUE(first.ok() && second.ok() && later.ok());
  const std::string x = first->run.id, y = second->run.id, z = later->run.id;
  ASSERT_EQ(x.substr(0, 8), y.substr(0, 8));  // the same millisecond
  ASSERT_NE(x.substr(0, 8), z.substr(0, 8));

  Result<std::string> ambiguous = service_->ResolveRunRef(x.substr(0, 8));
  ASSERT_EQ(ambiguous.status().reason(), "run_ref_ambiguous");
  const std::string created = FormatRfc3339Utc(first->run.created_at_ms);
  EXPECT_THAT(ambiguous.status().message(),
              AllOf(HasSubstr("matches 2 runs"),
                    HasSubstr(x + " (task \"alpha\", created " + created + ")"),
                    HasSubstr(y + " (task \"beta\", created " + created + ")"),
                    HasSubstr("give more characters")));
  EXPECT_EQ(service_->ResolveRunRef(z.substr(0, 8)).value(), z);

  // Listed alone, alpha's first run still gets a prefix beta's run does not share.
  RunQuery query;
  query.task_id = a.head.task_id;
  auto listed = service_->ListRuns(query, PageQuery{});
  ASSERT_TRUE(listed.ok());
  auto prefixes = service_->ShortRunIds(listed->items);
  ASSERT_TRUE(prefixes.ok()) << prefixes.status().ToString();
  ASSERT_EQ(prefixes->size(), 2u);
  EXPECT_GT(prefixes->at(x).size(), 8u);
  EXPECT_EQ(service_->ResolveRunRef(prefixes->at(x)).value(), x);
  EXPECT_EQ(prefixes->at(z), z.substr(0, 8));
  EXPECT_EQ(service_->ResolveRunRef(prefixes->at(z)).value(), z);
}

TEST_F(ControlServiceTest, ListsRunsWithFiltersAndPages) {
  TaskView a = CreateTask(ShellTask("a"));
  TaskView b = CreateTask(ShellTask("b"));
  std::vector<std::string> a_runs;
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(1000);
    a_runs.push_back(service_->StartRun(StartRunRequest{a.head.task_id, {}, {}})->run.id);
  }
  clock_.Advance(1000);
  auto b_run = service_->StartRun(StartRunRequest{b.head.task_id, {}, {}});
  ASSERT_TRUE(service_->CancelRun(b_run->run.id, std::nullopt).ok());

  RunQuery query;
  query.task_id = a.head.task_id;
  PageQuery page;
  page.limit = 2;
  auto first = service_->ListRuns(query, page);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_EQ(first->items.size(), 2u);
  EXPECT_EQ(first->items[0].id, a_runs[2]);  // newest first
  ASSERT_TRUE(first->next_cursor.has_value());
  page.cursor = first->next_cursor;
  auto second = service_->ListRuns(query, page);
  ASSERT_TRUE(second.ok());
  ASSERT_EQ(second->items.size(), 1u);
  EXPECT_EQ(second->items[0].id, a_runs[0]);

  RunQuery cancelled;
  cancelled.status = "cancelled";
  auto only = service_->ListRuns(cancelled, PageQuery{});
  ASSERT_TRUE(only.ok());
  ASSERT_EQ(only->items.size(), 1u);
  EXPECT_EQ(only->items[0].id, b_run->run.id);

  RunQuery bad_status;
  bad_status.status = "done";
  EXPECT_EQ(service_->ListRuns(bad_status, PageQuery{}).status().reason(), "invalid_status");
  // A cursor of another listing is refused.
  PageQuery tasks_page;
  tasks_page.limit = 1;
  auto tasks = service_->ListTasks(tasks_page);
  ASSERT_TRUE(tasks->next_cursor.has_value());
  PageQuery foreign;
  foreign.cursor = tasks->next_cursor;
  EXPECT_EQ(service_->ListRuns(RunQuery{}, foreign).status().reason(), "invalid_cursor");

  auto status = service_->GetStatus();
  ASSERT_TRUE(status.ok());
  int64_t queued = 0, cancelled_count = 0;
  for (const auto& [name, count] : status->runs_by_status) {
    if (name == "queued") queued = count;
    if (name == "cancelled") cancelled_count = count;
  }
  EXPECT_EQ(queued, 3);
  EXPECT_EQ(cancelled_count, 1);
  // Every run status is listed, with 0 where no run has it (recovery_required and skipped
  // included).
  EXPECT_EQ(status->runs_by_status.size(), kAllRunStatuses.size());
  EXPECT_EQ(status->runs_by_status.size(), 12u);
}

}  // namespace
}  // namespace ql

namespace ql {
namespace {

// Manual runs of a task that requires approval, with an operator who requests and an admin.
class ControlServiceApprovalTest : public ControlServiceTest {
 protected:
  void SetUp() override {
    ControlServiceTest::SetUp();
    if (HasFatalFailure()) return;
    testing::TestPrincipals people(store_->governance(), clock_, random_);
    ASSERT_TRUE(people.Bootstrap().ok());
    ops_ = people.Add("ops", Role::kOperator, project_id()).value();
    amy_ = people.Add("amy", Role::kAdmin, project_id()).value();
    json body = ShellTask("guarded");
    body["approval"] = {{"required", true}};
    task_id_ = CreateTask(body).head.task_id;
  }
  Result<StartedRun> Request(const std::string& key) {
    StartRunRequest request;
    request.task_id = task_id_;
    request.idempotency_key = key;
    return service_->StartRun(request, Caller{ops_.id, "", "req"});
  }

  PrincipalRecord ops_;
  PrincipalRecord amy_;
  std::string task_id_;
};

TEST_F(ControlServiceApprovalTest, AReplayedKeyAnswersWithWhatBecameOfItsRequest) {
  Result<StartedRun> first = Request("deploy-1");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_TRUE(first->approval.has_value());
  Result<StartedRun> pending = Request("deploy-1");
  ASSERT_TRUE(pending.ok()) << pending.status().ToString();
  EXPECT_TRUE(pending->replayed);
  EXPECT_EQ(pending->approval->id, first->approval->id);

  ASSERT_TRUE(service_->Reject(first->approval->id, "not today", Caller{amy_.id, "", "r"}).ok());
  Result<StartedRun> rejected = Request("deploy-1");
  EXPECT_EQ(rejected.status().reason(), "approval_rejected") << rejected.status().ToString();
  EXPECT_THAT(rejected.status().message(), HasSubstr(first->approval->id));

  Result<StartedRun> second = Request("deploy-2");
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  clock_.Advance(kDefaultApprovalTtlMs);
  ASSERT_EQ(service_->ExpireApprovals(10).value(), 1);
  EXPECT_EQ(Request("deploy-2").status().reason(), "approval_expired");

  // An approved request's key names its run, which a replay returns.
  Result<StartedRun> third = Request("deploy-3");
  ASSERT_TRUE(third.ok()) << third.status().ToString();
  Result<ApproveResult> approved = service_->Approve(third->approval->id, Caller{amy_.id, "", "a"});
  ASSERT_TRUE(approved.ok()) << approved.status().ToString();
  Result<StartedRun> run = Request("deploy-3");
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_TRUE(run->replayed);
  EXPECT_FALSE(run->approval.has_value());
  EXPECT_EQ(run->run.id, approved->run.id);
}

TEST_F(ControlServiceApprovalTest, RetryingARunOfAGuardedTaskRequestsApproval) {
  Result<StartedRun> requested = Request("deploy-1");
  ASSERT_TRUE(requested.ok()) << requested.status().ToString();
  Result<ApproveResult> approved =
      service_->Approve(requested->approval->id, Caller{amy_.id, "", "a"});
  ASSERT_TRUE(approved.ok()) << approved.status().ToString();
  ASSERT_TRUE(
      service_->CancelRun(approved->run.id, std::string("stop"), Caller{ops_.id, "", "c"}).ok());
  Result<StartedRun> retry = service_->RetryRun(approved->run.id, Caller{ops_.id, "", "r"});
  ASSERT_TRUE(retry.ok()) << retry.status().ToString();
  ASSERT_TRUE(retry->approval.has_value());
  EXPECT_EQ(retry->approval->status, "pending");
  EXPECT_EQ(retry->approval->requester_id, ops_.id);
  EXPECT_EQ(retry->approval->retry_of_run_id, approved->run.id);
  // Once approved, the new run says which run it retries.
  Result<ApproveResult> second = service_->Approve(retry->approval->id, Caller{amy_.id, "", "a2"});
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(second->run.retry_of_run_id, approved->run.id);
}

// Pushes `text` as the next version of file script `name` in the default project (the system
// writes, no fence) and returns the version.
ScriptVersionRecord PushScriptText(Store& store, const std::string& project_id,
                                   const std::string& name, const std::string& text,
                                   int64_t now_ms) {
  BeginUploadCommand upload;
  upload.project_id = project_id;
  upload.now_ms = now_ms;
  std::unique_ptr<BlobUpload> writer = store.artifacts().BeginUpload(upload);
  EXPECT_TRUE(writer->Write(text).ok());
  Result<BlobDescriptor> blob = writer->Finish();
  EXPECT_TRUE(blob.ok()) << blob.status().ToString();
  PushScriptCommand push;
  push.project_id = project_id;
  push.name = name;
  push.kind = std::string(kScriptKindFile);
  push.files = {ScriptFile{name + ".sh", blob->digest, blob->size, false}};
  push.now_ms = now_ms;
  Result<PushScriptResult> pushed = store.artifacts().PushScript(push);
  EXPECT_TRUE(pushed.ok()) << pushed.status().ToString();
  return pushed->version;
}

json ScriptTask(const std::string& name, json command) {
  command["kind"] = "script";
  return json{{"name", name}, {"spec", {{"command", command}}}};
}

TEST_F(ControlServiceTest, AScriptTaskIsPinnedWhenPublishedAndKeepsItsVersionFromRetention) {
  const std::string project = service_->EnsureDefaultProject()->id;
  const ScriptVersionRecord v1 =
      PushScriptText(*store_, project, "hello", "echo 1\n", clock_.NowMs());
  const ScriptVersionRecord v2 =
      PushScriptText(*store_, project, "hello", "echo 2\n", clock_.NowMs());
  // Named without a version: the latest, pinned by digest with the interpreter its entry implies.
  TaskView latest = CreateTask(ScriptTask("latest", {{"script", "hello"}}));
  json spec = json::parse(latest.revision.spec_json);
  EXPECT_EQ(spec["command"]["version"], 2);
  EXPECT_EQ(spec["command"]["digest"], v2.digest);
  EXPECT_EQ(spec["command"]["entry"], "hello.sh");
  EXPECT_EQ(spec["command"]["interpreter"], "sh");
  TaskView old = CreateTask(ScriptTask("old", {{"script", "hello"}, {"version", 1}}));
  EXPECT_EQ(json::parse(old.revision.spec_json)["command"]["digest"], v1.digest);
  // A digest that is not the version's is refused, as are names nothing holds.
  auto wrong = service_->PublishTask(
      TaskWrite{ScriptTask("wrong", {{"script", "hello"}, {"version", 1}, {"digest", v2.digest}}),
                std::nullopt});
  EXPECT_EQ(wrong.status().reason(), "script_digest_mismatch");
  EXPECT_EQ(service_->PublishTask(TaskWrite{ScriptTask("none", {{"script", "nope"}}), std::nullopt})
                .status()
                .reason(),
            "script_not_found");

  // A month later, with a third version: both pinned versions stay, the task's deletion frees
  // its version.
  PushScriptText(*store_, project, "hello", "echo 3\n", clock_.NowMs());
  clock_.Advance(int64_t{31} * 24 * 60 * 60 * 1000);
  Result<std::vector<ScriptVersionKey>> pins = PinnedScriptVersions(*store_);
  ASSERT_TRUE(pins.ok()) << pins.status().ToString();
  EXPECT_EQ(pins->size(), 2u);
  Result<PurgeArtifactsResult> kept = PurgeScripts(*store_, clock_, ArtifactRetention{});
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_EQ(kept->versions, 0);
  ASSERT_TRUE(service_->DeleteTask(old.head.task_id).ok());
  Result<PurgeArtifactsResult> freed = PurgeScripts(*store_, clock_, ArtifactRetention{});
  ASSERT_TRUE(freed.ok()) << freed.status().ToString();
  EXPECT_EQ(freed->versions, 1);
  EXPECT_EQ(store_->artifacts().GetScriptVersion(project, "hello", 1).status().reason(),
            "script_version_not_found");
  EXPECT_TRUE(store_->artifacts().GetScriptVersion(project, "hello", 2).ok());
}

}  // namespace
}  // namespace ql
