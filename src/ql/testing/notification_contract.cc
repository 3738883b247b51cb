// The notifications part of the repository contract (DESIGN §14): channels and rules under the
// policy fence, the outbox row committed by the transition that causes it, the rules' state
// (notify on a change, count what was held back, one recovered message), and the leases of the
// delivery loop (one holder at a time, a dead holder's row taken over, a late record refused).

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ql/core/notification_store.h"
#include "ql/testing/contract_assertions.h"
#include "ql/testing/repository_contract.h"

namespace ql::testing {

namespace internal {
bool LinkNotificationContract() { return true; }
}  // namespace internal

namespace {

#define QL_EXPECT_ERROR(expr, want_code, want_reason)             \
  do {                                                            \
    const ::ql::Status ql_st_ = (expr).status();                  \
    EXPECT_EQ(ql_st_.code(), want_code) << ql_st_.ToString();     \
    EXPECT_EQ(ql_st_.reason(), want_reason) << ql_st_.ToString(); \
  } while (0)

nlohmann::json Payload(const OutboxRecord& row) { return nlohmann::json::parse(row.payload_json); }

}  // namespace

void NotificationContract::SetUp() {
  GovernanceContract::SetUp();
  owner_ = Owner();
}

NotificationRepository& NotificationContract::notify() { return store().notifications(); }

Result<ChannelRecord> NotificationContract::Channel(const std::string& name,
                                                    const std::string& config) {
  CreateChannelCommand cmd;
  cmd.actor = Actor{owner_.id, "req-channel-" + name};
  cmd.fence = PolicyFence{owner_.id, Role::kAdmin};
  cmd.channel.id = NewId();
  cmd.channel.project_id = project().id;
  cmd.channel.name = name;
  cmd.channel.type = "webhook";
  cmd.channel.config_json = config;
  cmd.channel.created_at_ms = Now();
  clock().Advance(1);
  return notify().CreateChannel(cmd);
}

Result<RuleRecord> NotificationContract::Rule(const ChannelRecord& channel,
                                              const std::string& event,
                                              std::optional<std::string> task_id,
                                              const std::string& mode, int64_t min_interval_ms) {
  CreateRuleCommand cmd;
  cmd.actor = Actor{owner_.id, "req-rule"};
  cmd.fence = PolicyFence{owner_.id, Role::kAdmin};
  cmd.rule.id = NewId();
  cmd.rule.project_id = project().id;
  cmd.rule.channel_id = channel.id;
  cmd.rule.event = event;
  cmd.rule.task_id = std::move(task_id);
  cmd.rule.mode = mode;
  cmd.rule.min_interval_ms = min_interval_ms;
  cmd.rule.created_at_ms = Now();
  clock().Advance(1);
  return notify().CreateRule(cmd);
}

Result<RunRecord> NotificationContract::Ended(const TaskRevisionRecord& task,
                                              const std::string& status) {
  QL_ASSIGN_OR_RETURN(NewRun run, ManualRun(task));
  QL_ASSIGN_OR_RETURN(RunRecord created, store().runs().CreateRun(run));
  QL_ASSIGN_OR_RETURN(RunRecord running, StartRun(created));
  QL_ASSIGN_OR_RETURN(std::vector<AttemptRecord> attempts, store().runs().ListAttempts(run.run_id));
  RunTransitionCommand done;
  done.run_id = run.run_id;
  done.expected_version = running.version;
  done.run_to = status;
  done.attempt_id = attempts.back().id;
  done.expected_attempt_status = "running";
  done.attempt_to = status;
  if (status != "succeeded") done.exit_code = 3;
  done.events = {NewEvent{"attempt." + status, "executor", attempts.back().id, std::nullopt, "{}"},
                 NewEvent{"run." + status, "executor", attempts.back().id, std::nullopt, "{}"}};
  done.now_ms = Now();
  QL_ASSIGN_OR_RETURN(RunRecord finished, store().runs().ApplyTransition(done));
  clock().Advance(1000);
  return finished;
}

std::vector<OutboxRecord> NotificationContract::Outbox() {
  Result<std::vector<OutboxRecord>> rows =
      notify().ListDeliveries(DeliveryFilter{project().id, false, 1000});
  EXPECT_TRUE(rows.ok()) << rows.status().ToString();
  return rows.ok() ? *rows : std::vector<OutboxRecord>{};
}

TEST_P(NotificationContract, ChannelsAndRulesAreFencedNamedOnceAndGoTogether) {
  QL_ASSERT_OK_AND_ASSIGN(ChannelRecord ops, Channel("ops"));
  EXPECT_EQ(ops.config_json, R"({"url":"https://example.test/h"})");
  QL_EXPECT_ERROR(Channel("ops"), StatusCode::kDuplicate, "channel_name_duplicate");
  QL_EXPECT_ERROR(Channel("bad name"), StatusCode::kInvalidArgument, "channel_name_invalid");
  QL_EXPECT_ERROR(Channel("nourl", "{}"), StatusCode::kInvalidArgument, "channel_config_invalid");

  // A viewer cannot add a channel; nothing is written.
  Result<PrincipalRecord> viewer = AddPrincipal(owner_, "vera");
  ASSERT_TRUE(viewer.ok());
  ASSERT_TRUE(Grant(owner_, project().id, *viewer, Role::kViewer).ok());
  CreateChannelCommand denied;
  denied.actor = Actor{viewer->id, "req-denied"};
  denied.fence = PolicyFence{viewer->id, Role::kAdmin};
  denied.channel = ChannelRecord{
      NewId(), project().id, "sneaky",    "webhook", R"({"url":"https://example.test/x"})",
      "",      Now(),        std::nullopt};
  QL_EXPECT_ERROR(notify().CreateChannel(denied), StatusCode::kPermissionDenied,
                  "permission_denied");
  QL_ASSERT_OK_AND_ASSIGN(std::vector<ChannelRecord> listed, notify().ListChannels(project().id));
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].name, "ops");

  QL_ASSERT_OK_AND_ASSIGN(RuleRecord rule, Rule(ops, "failed", std::nullopt));
  ChannelRecord ghost = ops;
  ghost.id = NewId();
  QL_EXPECT_ERROR(Rule(ghost, "failed", std::nullopt), StatusCode::kNotFound, "channel_not_found");
  QL_EXPECT_ERROR(Rule(ops, "failed", NewId()), StatusCode::kNotFound, "task_not_found");
  QL_EXPECT_ERROR(Rule(ops, "exploded", std::nullopt), StatusCode::kInvalidArgument,
                  "notify_event_invalid");
  QL_EXPECT_ERROR(Rule(ops, "late", std::nullopt, "every"), StatusCode::kInvalidArgument,
                  "notify_threshold_invalid");

  // Deleting the channel takes its rules with it and frees the name.
  QL_ASSERT_OK(notify()
                   .DeleteChannel(DeleteNotifyCommand{Actor{owner_.id, "req-rm"},
                                                      PolicyFence{owner_.id, Role::kAdmin},
                                                      project().id, ops.id, Now()})
                   .status());
  QL_ASSERT_OK_AND_ASSIGN(std::vector<RuleRecord> rules, notify().ListRules(project().id));
  EXPECT_TRUE(rules.empty());
  QL_EXPECT_ERROR(notify().GetChannelByName(project().id, "ops"), StatusCode::kNotFound,
                  "channel_not_found");
  EXPECT_TRUE(Channel("ops").ok());
  (void)rule;
}

TEST_P(NotificationContract, AFailingTaskNotifiesOnceOnTheChangeAndOnceWhenItRecovers) {
  QL_ASSERT_OK_AND_ASSIGN(ChannelRecord ops, Channel("ops"));
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord task, PublishAs(owner_, "backup"));
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord other, PublishAs(owner_, "other"));
  QL_ASSERT_OK(Rule(ops, "failed", task.task_id).status());
  QL_ASSERT_OK(Rule(ops, "recovered", std::nullopt).status());

  // A success of a task that never failed says nothing.
  QL_ASSERT_OK(Ended(task, "succeeded").status());
  EXPECT_TRUE(Outbox().empty());

  // The first failure writes its row in the same transition; the next ones do not.
  QL_ASSERT_OK_AND_ASSIGN(RunRecord first, Ended(task, "failed"));
  std::vector<OutboxRecord> rows = Outbox();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].event, "failed");
  EXPECT_EQ(rows[0].run_id, first.id);
  EXPECT_EQ(rows[0].status, "pending");
  EXPECT_EQ(rows[0].id, OutboxId(*rows[0].rule_id, "failed", first.id));
  EXPECT_EQ(Payload(rows[0])["task_name"], "backup");
  EXPECT_EQ(Payload(rows[0])["exit_code"], 3);
  EXPECT_EQ(Payload(rows[0])["suppressed"], 0);
  QL_ASSERT_OK(Ended(task, "timed_out").status());  // a timeout is a failure too
  QL_ASSERT_OK(Ended(task, "failed").status());
  EXPECT_EQ(Outbox().size(), 1u);

  // Another task's failure is not this rule's business (the recovered rule counts it).
  QL_ASSERT_OK(Ended(other, "failed").status());
  EXPECT_EQ(Outbox().size(), 1u);

  // The first success after three failures: one recovered message saying so.
  QL_ASSERT_OK_AND_ASSIGN(RunRecord fixed, Ended(task, "succeeded"));
  rows = Outbox();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].event, "recovered");
  EXPECT_EQ(rows[0].run_id, fixed.id);
  EXPECT_EQ(Payload(rows[0])["failures"], 3);
  QL_ASSERT_OK(Ended(task, "succeeded").status());
  EXPECT_EQ(Outbox().size(), 2u);

  // Failing again is a new change of state.
  QL_ASSERT_OK(Ended(task, "failed").status());
  EXPECT_EQ(Outbox().size(), 3u);
}

TEST_P(NotificationContract, AnEveryRuleHoldsBackWithinItsIntervalAndSaysHowMany) {
  QL_ASSERT_OK_AND_ASSIGN(ChannelRecord ops, Channel("ops"));
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord task, PublishAs(owner_, "poll"));
  QL_ASSERT_OK(Rule(ops, "succeeded", task.task_id, "every", 10'000).status());
  for (int i = 0; i < 4; ++i) QL_ASSERT_OK(Ended(task, "succeeded").status());  // 1 s apart
  ASSERT_EQ(Outbox().size(), 1u);
  clock().Advance(10'000);
  QL_ASSERT_OK(Ended(task, "succeeded").status());
  std::vector<OutboxRecord> rows = Outbox();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(Payload(rows[0])["suppressed"], 3);
}

TEST_P(NotificationContract, AChannelSendsAtMostItsRatePerMinute) {
  QL_ASSERT_OK_AND_ASSIGN(
      ChannelRecord ops, Channel("ops", R"({"rate_per_minute":2,"url":"https://example.test/h"})"));
  std::vector<TaskRevisionRecord> tasks;
  for (int i = 0; i < 4; ++i) {
    QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord t, PublishAs(owner_, "t" + std::to_string(i)));
    tasks.push_back(t);
  }
  QL_ASSERT_OK(Rule(ops, "failed", std::nullopt).status());
  for (const TaskRevisionRecord& t : tasks) QL_ASSERT_OK(Ended(t, "failed").status());
  EXPECT_EQ(Outbox().size(), 2u);
  // The held-back changes are still owed: the next failure of those tasks after the window
  // notifies.
  clock().Advance(kChannelRateWindowMs);
  QL_ASSERT_OK(Ended(tasks[3], "failed").status());
  std::vector<OutboxRecord> rows = Outbox();
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].task_id, tasks[3].task_id);
  EXPECT_EQ(Payload(rows[0])["suppressed"], 1);
}

TEST_P(NotificationContract, OneHolderAtATimeADeadHoldersRowIsTakenOverAndALateRecordRefused) {
  QL_ASSERT_OK_AND_ASSIGN(ChannelRecord ops, Channel("ops"));
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord task, PublishAs(owner_, "job"));
  QL_ASSERT_OK(Rule(ops, "failed", std::nullopt).status());
  QL_ASSERT_OK(Ended(task, "failed").status());

  QL_ASSERT_OK_AND_ASSIGN(std::vector<ClaimedDelivery> a,
                          notify().ClaimDueDeliveries("replica-a", Now(), 30'000, 10));
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].row.attempts, 1);
  EXPECT_EQ(a[0].channel.name, "ops");
  // Held: another claimer gets nothing.
  QL_ASSERT_OK_AND_ASSIGN(std::vector<ClaimedDelivery> b,
                          notify().ClaimDueDeliveries("replica-b", Now() + 29'000, 30'000, 10));
  EXPECT_TRUE(b.empty());
  // A failed attempt schedules the next one; it is not due before then.
  DeliveryResult failed{a[0].row.id, "replica-a",           false, Now() + 5'000,
                        503,         "Service Unavailable", 12,    Now()};
  QL_ASSERT_OK_AND_ASSIGN(OutboxRecord retry, notify().RecordDelivery(failed));
  EXPECT_EQ(retry.status, "pending");
  EXPECT_EQ(retry.last_status_code, 503);
  QL_ASSERT_OK_AND_ASSIGN(b, notify().ClaimDueDeliveries("replica-b", Now() + 4'999, 30'000, 10));
  EXPECT_TRUE(b.empty());
  QL_ASSERT_OK_AND_ASSIGN(b, notify().ClaimDueDeliveries("replica-b", Now() + 5'000, 30'000, 10));
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].row.attempts, 2);

  // replica-b dies holding it: once the lease runs out replica-c takes it over, with the same
  // id (the receiver's idempotency key).
  QL_ASSERT_OK_AND_ASSIGN(std::vector<ClaimedDelivery> c,
                          notify().ClaimDueDeliveries("replica-c", Now() + 35'000, 30'000, 10));
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].row.id, a[0].row.id);
  EXPECT_EQ(c[0].row.attempts, 3);
  // replica-b's late answer is refused and changes nothing.
  DeliveryResult late{b[0].row.id, "replica-b",  true, std::nullopt,
                      200,         std::nullopt, 5,    Now() + 36'000};
  QL_EXPECT_ERROR(notify().RecordDelivery(late), StatusCode::kConflict, "delivery_lease_lost");
  DeliveryResult ok{c[0].row.id, "replica-c",  true, std::nullopt,
                    200,         std::nullopt, 7,    Now() + 36'000};
  QL_ASSERT_OK_AND_ASSIGN(OutboxRecord done, notify().RecordDelivery(ok));
  EXPECT_EQ(done.status, "delivered");
  EXPECT_EQ(done.delivered_at_ms, Now() + 36'000);

  // Redelivery makes it due again with a fresh budget; a pending row cannot be redelivered.
  const DeleteNotifyCommand again{Actor{owner_.id, "req-again"},
                                  PolicyFence{owner_.id, Role::kOperator}, project().id, done.id,
                                  Now() + 40'000};
  QL_ASSERT_OK_AND_ASSIGN(OutboxRecord pending, notify().Redeliver(again, 3'600'000));
  EXPECT_EQ(pending.status, "pending");
  EXPECT_EQ(pending.attempts, 0);
  QL_EXPECT_ERROR(notify().Redeliver(again, 3'600'000), StatusCode::kConflict, "delivery_pending");
}

// A holder extends its lease before a late send; the row is then not due to anyone else until
// the new end. Once another claimer has taken a row over, or it was settled, renewing it is
// refused and changes nothing.
TEST_P(NotificationContract, AHolderRenewsItsLeaseAndATakenOverRowCannotBeRenewed) {
  QL_ASSERT_OK_AND_ASSIGN(ChannelRecord ops, Channel("ops"));
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord task, PublishAs(owner_, "job"));
  QL_ASSERT_OK(Rule(ops, "failed", std::nullopt).status());
  QL_ASSERT_OK(Ended(task, "failed").status());
  const int64_t t0 = Now();
  QL_ASSERT_OK_AND_ASSIGN(std::vector<ClaimedDelivery> a,
                          notify().ClaimDueDeliveries("replica-a", t0, 30'000, 10));
  ASSERT_EQ(a.size(), 1u);
  QL_ASSERT_OK_AND_ASSIGN(OutboxRecord renewed, notify().RenewDeliveryLease(
                                                    a[0].row.id, "replica-a", t0 + 20'000, 30'000));
  EXPECT_EQ(renewed.lease_until_ms, t0 + 50'000);
  EXPECT_EQ(renewed.attempts, 1);
  // Past the first lease but within the renewed one: nobody else gets it.
  QL_ASSERT_OK_AND_ASSIGN(std::vector<ClaimedDelivery> b,
                          notify().ClaimDueDeliveries("replica-b", t0 + 49'999, 30'000, 10));
  EXPECT_TRUE(b.empty());
  // Another holder cannot renew it, and an unknown row is not anyone's.
  QL_EXPECT_ERROR(notify().RenewDeliveryLease(a[0].row.id, "replica-b", t0 + 21'000, 30'000),
                  StatusCode::kConflict, "delivery_lease_lost");
  QL_EXPECT_ERROR(notify().RenewDeliveryLease(NewId(), "replica-a", t0 + 21'000, 30'000),
                  StatusCode::kConflict, "delivery_lease_lost");
  // Once the renewed lease ran out replica-b takes it over; replica-a's renewal is refused.
  QL_ASSERT_OK_AND_ASSIGN(b, notify().ClaimDueDeliveries("replica-b", t0 + 50'000, 30'000, 10));
  ASSERT_EQ(b.size(), 1u);
  QL_EXPECT_ERROR(notify().RenewDeliveryLease(a[0].row.id, "replica-a", t0 + 50'001, 30'000),
                  StatusCode::kConflict, "delivery_lease_lost");
  QL_ASSERT_OK_AND_ASSIGN(OutboxRecord still, notify().GetDelivery(project().id, a[0].row.id));
  EXPECT_EQ(still.lease_owner, "replica-b");
  EXPECT_EQ(still.lease_until_ms, t0 + 80'000);
  // A settled row is nobody's to renew.
  QL_ASSERT_OK(notify()
                   .RecordDelivery(DeliveryResult{b[0].row.id, "replica-b", true, std::nullopt, 200,
                                                  std::nullopt, 4, t0 + 50'010})
                   .status());
  QL_EXPECT_ERROR(notify().RenewDeliveryLease(a[0].row.id, "replica-b", t0 + 50'020, 30'000),
                  StatusCode::kConflict, "delivery_lease_lost");
}

// Rows of no run are purged once settled and old; rows still owed, and rows of a run (which
// retention purges with the run), stay.
TEST_P(NotificationContract, SettledRowsOfNoRunArePurgedWhenOld) {
  QL_ASSERT_OK_AND_ASSIGN(ChannelRecord ops, Channel("ops"));
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord task, PublishAs(owner_, "job"));
  QL_ASSERT_OK(Rule(ops, "failed", std::nullopt).status());
  QL_ASSERT_OK(Ended(task, "failed").status());
  const auto test_row = [&](const std::string& id) {
    OutboxRecord row;
    row.id = id;
    row.project_id = project().id;
    row.channel_id = ops.id;
    row.event = "test";
    row.payload_json = R"({"channel":"ops"})";
    row.status = "pending";
    row.next_attempt_at_ms = Now();
    row.deadline_at_ms = Now() + 3'600'000;
    row.created_at_ms = Now();
    return row;
  };
  const std::string sent_id = NewId();
  QL_ASSERT_OK(notify().EnqueueDelivery(test_row(sent_id)).status());
  QL_ASSERT_OK_AND_ASSIGN(std::vector<ClaimedDelivery> claimed,
                          notify().ClaimDueDeliveries("replica-a", Now(), 30'000, 10));
  ASSERT_EQ(claimed.size(), 2u);
  for (const ClaimedDelivery& c : claimed) {
    QL_ASSERT_OK(notify()
                     .RecordDelivery(DeliveryResult{c.row.id, "replica-a", true, std::nullopt, 200,
                                                    std::nullopt, 3, Now()})
                     .status());
  }
  QL_ASSERT_OK(notify().EnqueueDelivery(test_row(NewId())).status());  // still owed
  // Not old enough: nothing goes.
  QL_ASSERT_OK_AND_ASSIGN(int purged, notify().PurgeRunlessDeliveries(Now(), 100));
  EXPECT_EQ(purged, 0);
  EXPECT_EQ(Outbox().size(), 3u);
  QL_ASSERT_OK_AND_ASSIGN(purged, notify().PurgeRunlessDeliveries(Now() + 1, 100));
  EXPECT_EQ(purged, 1);
  std::vector<OutboxRecord> rows = Outbox();
  ASSERT_EQ(rows.size(), 2u);
  for (const OutboxRecord& row : rows) {
    EXPECT_NE(row.id, sent_id);
    EXPECT_TRUE(row.run_id.has_value() || row.status == "pending") << row.id;
  }
}

TEST_P(NotificationContract, ARowOfADeletedChannelGoesDeadInsteadOfBeingSent) {
  QL_ASSERT_OK_AND_ASSIGN(ChannelRecord ops, Channel("ops"));
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord task, PublishAs(owner_, "job"));
  QL_ASSERT_OK(Rule(ops, "failed", std::nullopt).status());
  QL_ASSERT_OK(Ended(task, "failed").status());
  QL_ASSERT_OK(notify()
                   .DeleteChannel(DeleteNotifyCommand{Actor{owner_.id, "req-rm"},
                                                      PolicyFence{owner_.id, Role::kAdmin},
                                                      project().id, ops.id, Now()})
                   .status());
  QL_ASSERT_OK_AND_ASSIGN(std::vector<ClaimedDelivery> claimed,
                          notify().ClaimDueDeliveries("replica-a", Now(), 30'000, 10));
  EXPECT_TRUE(claimed.empty());
  std::vector<OutboxRecord> rows = Outbox();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].status, "dead");
  EXPECT_EQ(rows[0].last_error, "the channel was deleted");
}

TEST_P(NotificationContract, LateAndMissingRulesAreSweptOncePerRunAndPerSilence) {
  QL_ASSERT_OK_AND_ASSIGN(ChannelRecord ops, Channel("ops"));
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord task, PublishAs(owner_, "nightly"));
  const auto rule = [&](const std::string& event, int64_t threshold_ms) {
    CreateRuleCommand cmd;
    cmd.actor = Actor{owner_.id, "req-" + event};
    cmd.fence = PolicyFence{owner_.id, Role::kAdmin};
    cmd.rule.id = NewId();
    cmd.rule.project_id = project().id;
    cmd.rule.channel_id = ops.id;
    cmd.rule.event = event;
    cmd.rule.task_id = task.task_id;
    cmd.rule.mode = "every";
    cmd.rule.threshold_ms = threshold_ms;
    cmd.rule.created_at_ms = Now();
    return notify().CreateRule(cmd);
  };
  const int64_t t0 = Now();
  QL_ASSERT_OK(rule("late", 60'000));
  QL_ASSERT_OK(rule("missing", 120'000));
  QL_ASSERT_OK_AND_ASSIGN(NewRun run, ManualRun(task));
  QL_ASSERT_OK(store().runs().CreateRun(run));

  // Nothing is late before the threshold; then the queued run once, however often it is swept.
  QL_ASSERT_OK_AND_ASSIGN(int written, notify().SweepOverdue(t0 + 59'000));
  EXPECT_EQ(written, 0);
  QL_ASSERT_OK_AND_ASSIGN(written, notify().SweepOverdue(t0 + 61'000));
  EXPECT_EQ(written, 1);
  QL_ASSERT_OK_AND_ASSIGN(written, notify().SweepOverdue(t0 + 62'000));
  EXPECT_EQ(written, 0);
  std::vector<OutboxRecord> rows = Outbox();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].event, "late");
  EXPECT_EQ(rows[0].run_id, run.run_id);
  EXPECT_EQ(Payload(rows[0])["phase"], "queued");

  // No success since the rule was added: one missing message per silence.
  QL_ASSERT_OK_AND_ASSIGN(written, notify().SweepOverdue(t0 + 121'000));
  EXPECT_EQ(written, 1);
  QL_ASSERT_OK_AND_ASSIGN(written, notify().SweepOverdue(t0 + 300'000));
  EXPECT_EQ(written, 0);
  rows = Outbox();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].event, "missing");
  EXPECT_EQ(rows[0].task_id, task.task_id);
  EXPECT_FALSE(Payload(rows[0]).contains("last_success_at_ms"));

  // A success starts a new silence, told once it outlasts the threshold.
  clock().Advance(400'000);
  QL_ASSERT_OK_AND_ASSIGN(RunRecord ok, Ended(task, "succeeded"));
  const int64_t success_at = *ok.finished_at_ms;
  QL_ASSERT_OK_AND_ASSIGN(written, notify().SweepOverdue(success_at + 119'000));
  EXPECT_EQ(written, 0);
  QL_ASSERT_OK_AND_ASSIGN(written, notify().SweepOverdue(success_at + 121'000));
  EXPECT_EQ(written, 1);
  rows = Outbox();
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(Payload(rows[0])["last_success_at_ms"], success_at);
}

}  // namespace ql::testing
