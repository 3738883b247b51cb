// The retention part of the repository contract (DESIGN §11): settings that inherit from the
// project to its tasks under the policy fence, and the purge of finished runs with everything
// that belongs to them. Runs on every store through RepositoryContractTest.

#include <algorithm>
#include <string>
#include <vector>

#include "ql/core/governance.h"
#include "ql/core/retention.h"
#include "ql/testing/contract_assertions.h"
#include "ql/testing/repository_contract.h"

namespace ql::testing {

namespace internal {
bool LinkRetentionContract() { return true; }
}  // namespace internal

namespace {

bool Contains(const std::vector<std::string>& ids, const std::string& id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace

Result<RunRecord> RetentionContract::FinishedRun(const TaskRevisionRecord& task,
                                                 std::optional<std::string> retry_of) {
  QL_ASSIGN_OR_RETURN(NewRun run, ManualRun(task));
  run.retry_of_run_id = std::move(retry_of);
  QL_ASSIGN_OR_RETURN(RunRecord created, store().runs().CreateRun(run));
  QL_ASSIGN_OR_RETURN(RunRecord running, StartRun(created));
  QL_ASSIGN_OR_RETURN(std::vector<AttemptRecord> attempts, store().runs().ListAttempts(run.run_id));
  RunTransitionCommand done;
  done.run_id = run.run_id;
  done.expected_version = running.version;
  done.run_to = "succeeded";
  done.attempt_id = attempts.back().id;
  done.expected_attempt_status = "running";
  done.attempt_to = "succeeded";
  done.log_path = "task/" + run.run_id + ".log";
  done.events = {NewEvent{"attempt.succeeded", "executor", attempts.back().id, std::nullopt, "{}"},
                 NewEvent{"run.succeeded", "executor", attempts.back().id, std::nullopt, "{}"}};
  done.now_ms = Now();
  QL_ASSIGN_OR_RETURN(RunRecord finished, store().runs().ApplyTransition(done));
  clock().Advance(1);
  return finished;
}

SetRetentionCommand RetentionContract::Settings(const std::string& task_id,
                                                std::optional<int> keep_days,
                                                std::optional<int> keep_runs) {
  SetRetentionCommand cmd;
  cmd.project_id = project().id;
  cmd.task_id = task_id;
  cmd.settings.keep_days = keep_days;
  cmd.settings.keep_runs = keep_runs;
  cmd.request_id = "req-retention";
  cmd.audit_id = NewId();
  cmd.now_ms = Now();
  return cmd;
}

Result<PurgeResult> RetentionContract::Purge(const TaskRevisionRecord& task, int keep_days,
                                             int keep_runs, int limit) {
  RetentionScope scope{task.project_id, task.task_id, {}, {keep_days, keep_runs}};
  return retention().PurgeRuns(PlanPurge(scope, Now(), limit, NewId()));
}

TEST_P(RetentionContract, SettingsInheritFromTheProjectAndAreAudited) {
  const PrincipalRecord owner = Owner();
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord task, PublishTask(NewId(), std::nullopt, "job"));

  QL_ASSERT_OK_AND_ASSIGN(RetentionRecord unset, retention().GetRetention(project().id, ""));
  EXPECT_EQ(unset.version, 0);
  EXPECT_EQ(unset.settings, RetentionSettings{});

  SetRetentionCommand project_cmd = Settings("", 7, std::nullopt);
  project_cmd.fence = PolicyFence{owner.id, Role::kAdmin};
  QL_ASSERT_OK_AND_ASSIGN(RetentionRecord set, retention().SetRetention(project_cmd));
  EXPECT_EQ(set.version, 1);
  EXPECT_EQ(set.settings.keep_days, 7);
  EXPECT_FALSE(set.settings.keep_runs.has_value());
  EXPECT_EQ(set.updated_at_ms, Now());

  clock().Advance(5);
  SetRetentionCommand task_cmd = Settings(task.task_id, std::nullopt, 3);
  task_cmd.fence = PolicyFence{owner.id, Role::kAdmin};
  QL_ASSERT_OK_AND_ASSIGN(RetentionRecord task_set, retention().SetRetention(task_cmd));
  EXPECT_EQ(task_set.task_id, task.task_id);
  EXPECT_EQ(task_set.settings.keep_runs, 3);
  task_cmd.settings.keep_runs = 4;
  task_cmd.audit_id = NewId();
  QL_ASSERT_OK_AND_ASSIGN(task_set, retention().SetRetention(task_cmd));
  EXPECT_EQ(task_set.version, 2);
  EXPECT_EQ(task_set.settings.keep_runs, 4);

  QL_ASSERT_OK_AND_ASSIGN(std::vector<RetentionScope> scopes,
                          retention().ListRetentionScopes("", 100));
  ASSERT_EQ(scopes.size(), 1u);
  EXPECT_EQ(scopes[0].task_id, task.task_id);
  EXPECT_EQ(scopes[0].project_id, project().id);
  EXPECT_EQ(ResolveRetention(scopes[0].project, scopes[0].task), (EffectiveRetention{7, 4}));
  QL_ASSERT_OK_AND_ASSIGN(scopes, retention().ListRetentionScopes(task.task_id, 100));
  EXPECT_TRUE(scopes.empty());

  // Both writes left their fact, newest first.
  QL_ASSERT_OK_AND_ASSIGN(Page<AuditRecord> audit, gov().ListAudit(PageRequest{}));
  ASSERT_GE(audit.items.size(), 3u);
  EXPECT_EQ(audit.items[0].action, kAuditRetentionSet);
  EXPECT_EQ(audit.items[0].target_kind, "task");
  EXPECT_EQ(audit.items[0].target_id, task.task_id);
  EXPECT_EQ(audit.items[0].actor_id, owner.id);
  EXPECT_EQ(audit.items[2].target_kind, "project");
  EXPECT_EQ(audit.items[2].request_id, "req-retention");
}

TEST_P(RetentionContract, SettingsAreValidatedAndFenced) {
  const PrincipalRecord owner = Owner();
  QL_ASSERT_OK_AND_ASSIGN(PrincipalRecord viewer, AddPrincipal(owner, "viewer"));
  ASSERT_TRUE(Grant(owner, project().id, viewer, Role::kViewer).ok());
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord task, PublishTask(NewId(), std::nullopt, "job"));

  QL_EXPECT_ERROR(retention().SetRetention(Settings("", 0, std::nullopt)),
                  StatusCode::kInvalidArgument, "invalid_keep_days");
  QL_EXPECT_ERROR(retention().SetRetention(Settings("", std::nullopt, kMaxKeepRuns + 1)),
                  StatusCode::kInvalidArgument, "invalid_keep_runs");
  QL_EXPECT_ERROR(retention().SetRetention(Settings(NewId(), 1, 1)), StatusCode::kNotFound,
                  "task_not_found");
  QL_EXPECT_ERROR(retention().GetRetention(NewId(), ""), StatusCode::kNotFound,
                  "project_not_found");

  SetRetentionCommand denied = Settings(task.task_id, 1, 1);
  denied.fence = PolicyFence{viewer.id, Role::kAdmin};
  QL_EXPECT_ERROR(retention().SetRetention(denied), StatusCode::kPermissionDenied,
                  "permission_denied");
  QL_ASSERT_OK_AND_ASSIGN(RetentionRecord unchanged,
                          retention().GetRetention(project().id, task.task_id));
  EXPECT_EQ(unchanged.version, 0);
}

TEST_P(RetentionContract, PurgeDeletesOldFinishedRunsWithEverythingTheyOwn) {
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord task, PublishTask(NewId(), std::nullopt, "job"));
  QL_ASSERT_OK_AND_ASSIGN(RunRecord old_done, FinishedRun(task));
  QL_ASSERT_OK_AND_ASSIGN(NewRun queued_run, ManualRun(task));
  QL_ASSERT_OK_AND_ASSIGN(RunRecord old_queued, store().runs().CreateRun(queued_run));
  QL_ASSERT_OK_AND_ASSIGN(NewRun manual, ManualRun(task));
  QL_ASSERT_OK_AND_ASSIGN(RunRecord old_running, store().runs().CreateRun(manual));
  QL_ASSERT_OK_AND_ASSIGN(old_running, StartRun(old_running));
  clock().Advance(3 * kDayMs);
  QL_ASSERT_OK_AND_ASSIGN(RunRecord recent, FinishedRun(task));
  clock().Advance(kDayMs);

  QL_ASSERT_OK_AND_ASSIGN(std::vector<AttemptRecord> old_attempts,
                          store().runs().ListAttempts(old_done.id));
  QL_ASSERT_OK_AND_ASSIGN(PurgeResult purged, Purge(task, 2, 1000));
  EXPECT_EQ(purged.run_ids, std::vector<std::string>{old_done.id});
  ASSERT_EQ(purged.attempts.size(), 1u);
  EXPECT_EQ(purged.attempts[0].id, old_attempts[0].id);
  EXPECT_EQ(purged.attempts[0].run_id, old_done.id);
  EXPECT_EQ(purged.attempts[0].log_path, "task/" + old_done.id + ".log");
  EXPECT_EQ(purged.events, old_done.event_sequence);

  QL_EXPECT_ERROR(store().runs().GetRun(old_done.id), StatusCode::kNotFound, "run_not_found");
  EXPECT_EQ(store().runs().ListAttempts(old_done.id).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store().runs().ListEvents(old_done.id, 0, 100).status().code(),
            StatusCode::kNotFound);
  std::vector<EventRecord> events;
  // Unfinished runs and a run inside the window stay, with their events.
  for (const RunRecord& kept : {old_queued, old_running, recent}) {
    QL_ASSERT_OK_AND_ASSIGN(RunRecord again, store().runs().GetRun(kept.id));
    QL_ASSERT_OK_AND_ASSIGN(events, store().runs().ListEvents(kept.id, 0, 100));
    EXPECT_EQ(static_cast<int64_t>(events.size()), again.event_sequence);
  }

  // The batch left one audit fact naming the task; a batch with nothing to do leaves none.
  QL_ASSERT_OK_AND_ASSIGN(Page<AuditRecord> audit, gov().ListAudit(PageRequest{}));
  ASSERT_FALSE(audit.items.empty());
  EXPECT_EQ(audit.items[0].action, kAuditRunsPurge);
  EXPECT_EQ(audit.items[0].target_id, task.task_id);
  EXPECT_EQ(audit.items[0].project_id, project().id);
  EXPECT_FALSE(audit.items[0].actor_id.has_value());
  QL_ASSERT_OK_AND_ASSIGN(purged, Purge(task, 2, 1000));
  EXPECT_TRUE(purged.run_ids.empty());
  QL_ASSERT_OK_AND_ASSIGN(Page<AuditRecord> after, gov().ListAudit(PageRequest{}));
  EXPECT_EQ(after.items.size(), audit.items.size());
}

TEST_P(RetentionContract, PurgeKeepsTheNewestRunsOfATaskInBoundedBatches) {
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord task, PublishTask(NewId(), std::nullopt, "job"));
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord other, PublishTask(NewId(), std::nullopt, "other"));
  std::vector<RunRecord> runs;
  for (int i = 0; i < 5; ++i) {
    QL_ASSERT_OK_AND_ASSIGN(RunRecord run, FinishedRun(task));
    runs.push_back(run);
  }
  QL_ASSERT_OK_AND_ASSIGN(RunRecord other_run, FinishedRun(other));
  // The newest run is unfinished: it counts towards keep_runs but is never purged.
  QL_ASSERT_OK_AND_ASSIGN(NewRun manual, ManualRun(task));
  QL_ASSERT_OK_AND_ASSIGN(RunRecord queued, store().runs().CreateRun(manual));

  QL_ASSERT_OK_AND_ASSIGN(PurgeResult first, Purge(task, 30, 2, /*limit=*/2));
  EXPECT_EQ(first.run_ids, (std::vector<std::string>{runs[0].id, runs[1].id}));
  QL_ASSERT_OK_AND_ASSIGN(PurgeResult second, Purge(task, 30, 2, /*limit=*/2));
  EXPECT_EQ(second.run_ids, (std::vector<std::string>{runs[2].id, runs[3].id}));
  QL_ASSERT_OK_AND_ASSIGN(PurgeResult third, Purge(task, 30, 2, /*limit=*/2));
  EXPECT_TRUE(third.run_ids.empty());

  for (const RunRecord& kept : {runs[4], queued, other_run}) {
    EXPECT_TRUE(store().runs().GetRun(kept.id).ok()) << kept.id;
  }
  QL_EXPECT_ERROR(retention().PurgeRuns(PlanPurge({}, Now(), kMaxPurgeBatch + 1, NewId())),
                  StatusCode::kInvalidArgument, "invalid_limit");
}

TEST_P(RetentionContract, ARetriedRunGoesOnlyAfterTheRunThatRetriesIt) {
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord task, PublishTask(NewId(), std::nullopt, "job"));
  QL_ASSERT_OK_AND_ASSIGN(RunRecord original, FinishedRun(task));
  QL_ASSERT_OK_AND_ASSIGN(RunRecord retry, FinishedRun(task, original.id));

  // Beyond keep_runs, but a kept run points at it.
  QL_ASSERT_OK_AND_ASSIGN(PurgeResult purged, Purge(task, 30, 1));
  EXPECT_TRUE(purged.run_ids.empty());

  // Both old: the retry goes first, the original with the next batch.
  clock().Advance(31 * kDayMs);
  QL_ASSERT_OK_AND_ASSIGN(purged, Purge(task, 30, 1000));
  EXPECT_EQ(purged.run_ids, std::vector<std::string>{retry.id});
  QL_ASSERT_OK_AND_ASSIGN(purged, Purge(task, 30, 1000));
  EXPECT_EQ(purged.run_ids, std::vector<std::string>{original.id});
  EXPECT_FALSE(Contains(purged.run_ids, retry.id));
}

}  // namespace ql::testing
