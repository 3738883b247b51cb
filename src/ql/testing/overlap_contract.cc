// The admission-policy part of the repository contract (DESIGN §11): a trigger's overlap policy
// (allow, forbid, replace) and a task's concurrency limit, decided by ApplyScheduleAdvance
// inside the admission transaction, a trigger's jitter window, which holds an admitted run in
// the queue until its release time, and the next fire time the admission recomputes from the
// stored trigger revision (next_fire_mismatch). Runs on every store through OverlapContract.

#include <string>
#include <vector>

#include "ql/core/jitter.h"
#include "ql/core/notification_store.h"
#include "ql/core/overlap.h"
#include "ql/core/task_spec.h"
#include "ql/testing/contract_assertions.h"
#include "ql/testing/repository_contract.h"

namespace ql::testing {

namespace internal {
bool LinkOverlapContract() { return true; }
}  // namespace internal

namespace {

std::vector<std::string> EventTypes(const std::vector<EventRecord>& events) {
  std::vector<std::string> out;
  for (const EventRecord& event : events) out.push_back(event.type);
  return out;
}

}  // namespace

Result<TaskRevisionRecord> OverlapContract::LimitedTask(std::optional<int64_t> concurrency) {
  PublishTaskCommand cmd = TaskCommand(NewId(), std::nullopt, "job");
  cmd.revision.concurrency = concurrency;
  QL_ASSIGN_OR_RETURN(PublishTaskResult result, store().definitions().PublishTaskRevision(cmd));
  return result.revision;
}

Result<std::string> OverlapContract::OverlapTrigger(const TaskRevisionRecord& task,
                                                    const std::string& overlap) {
  const std::string trigger_id = NewId();
  PublishTriggerCommand cmd = TriggerCommand(trigger_id, std::nullopt, task);
  cmd.revision.overlap = overlap;
  QL_RETURN_IF_ERROR(store().definitions().PublishTriggerRevision(cmd).status());
  QL_ASSIGN_OR_RETURN(DueSchedule fresh, DueRow(trigger_id, Now()));
  QL_ASSIGN_OR_RETURN(AdvanceOutcome outcome,
                      store().schedules().ApplyScheduleAdvance(MoveCursor(fresh, Now() + 1000)));
  if (outcome != AdvanceOutcome::kApplied) return Internal("test_setup", "cursor not set");
  return trigger_id;
}

Result<AdvanceOutcome> OverlapContract::Fire(const std::string& trigger_id, std::string& run_id) {
  QL_ASSIGN_OR_RETURN(ScheduleRecord schedule, store().definitions().GetSchedule(trigger_id));
  clock().SetNowMs(*schedule.next_fire_at_ms);
  QL_ASSIGN_OR_RETURN(DueSchedule due, DueRow(trigger_id, Now()));
  QL_ASSIGN_OR_RETURN(ScheduleAdvance advance, Admit(due));
  run_id = advance.run->run_id;
  return store().schedules().ApplyScheduleAdvance(advance);
}

Result<RunRecord> OverlapContract::Succeed(const RunRecord& running) {
  QL_ASSIGN_OR_RETURN(std::vector<AttemptRecord> attempts, store().runs().ListAttempts(running.id));
  RunTransitionCommand done;
  done.run_id = running.id;
  done.expected_version = running.version;
  done.run_to = "succeeded";
  done.exit_code = 0;
  done.attempt_id = attempts.back().id;
  done.expected_attempt_status = "running";
  done.attempt_to = "succeeded";
  done.attempt_exit_code = 0;
  done.events = {
      NewEvent{"attempt.succeeded", "executor", attempts.back().id, std::nullopt, "{}"},
      NewEvent{"run.succeeded", "executor", std::nullopt, std::nullopt, R"({"exit_code":0})"}};
  done.now_ms = Now();
  return store().runs().ApplyTransition(done);
}

Result<DueSchedule> OverlapContract::DueOccurrence(const std::string& misfire, int64_t late_by_ms) {
  const std::string trigger_id = NewId();
  QL_ASSIGN_OR_RETURN(TaskRevisionRecord task,
                      PublishTask(NewId(), std::nullopt, "job-of-" + trigger_id));
  PublishTriggerCommand cmd = TriggerCommand(trigger_id, std::nullopt, task);
  cmd.revision.misfire = misfire;
  cmd.revision.content_digest = TriggerContentDigest(cmd.revision);
  QL_RETURN_IF_ERROR(store().definitions().PublishTriggerRevision(cmd).status());
  QL_ASSIGN_OR_RETURN(DueSchedule fresh, DueRow(trigger_id, Now()));
  QL_ASSIGN_OR_RETURN(int64_t occurrence, NextFireOf(fresh, Now()));
  QL_ASSIGN_OR_RETURN(AdvanceOutcome outcome,
                      store().schedules().ApplyScheduleAdvance(MoveCursor(fresh, occurrence)));
  if (outcome != AdvanceOutcome::kApplied) return Internal("test_setup", "cursor not set");
  clock().SetNowMs(occurrence + late_by_ms);
  return DueRow(trigger_id, Now());
}

// An admission whose new cursor is not the next fire time the store recomputes from the stored
// revision is refused whole: no run, the cursor where it was, one refusal counted.
TEST_P(OverlapContract, AnAdmissionWhoseCursorSkipsAnOccurrenceIsRefusedAndCounted) {
  QL_ASSERT_OK_AND_ASSIGN(DueSchedule due, DueOccurrence("skip", 0));
  const std::string& trigger_id = due.schedule.trigger_id;
  const int64_t occurrence = *due.schedule.next_fire_at_ms;
  QL_ASSERT_OK_AND_ASSIGN(int64_t next, NextFireOf(due, occurrence));
  QL_ASSERT_OK_AND_ASSIGN(int64_t after_next, NextFireOf(due, next));
  EXPECT_EQ(store().schedules().TakeNextFireMismatches(), 0);

  // Past the next occurrence (skips it), short of it, and "never fires again".
  const std::vector<std::optional<int64_t>> wrongs = {after_next, next - 1000, std::nullopt};
  for (const std::optional<int64_t>& wrong : wrongs) {
    SCOPED_TRACE(wrong.has_value() ? std::to_string(*wrong) : "exhausted");
    QL_ASSERT_OK_AND_ASSIGN(ScheduleAdvance bad, Admit(due, wrong));
    QL_EXPECT_ERROR(store().schedules().ApplyScheduleAdvance(bad), StatusCode::kInvalidArgument,
                    "next_fire_mismatch");
    QL_ASSERT_OK_AND_ASSIGN(ScheduleRecord schedule, store().definitions().GetSchedule(trigger_id));
    EXPECT_EQ(schedule.next_fire_at_ms, occurrence);
    EXPECT_EQ(schedule.state_version, due.schedule.state_version);
    EXPECT_FALSE(schedule.exhausted);
    EXPECT_FALSE(schedule.last_scheduled_at_ms.has_value());
    QL_EXPECT_ERROR(store().runs().GetRun(bad.run->run_id), StatusCode::kNotFound, "run_not_found");
    EXPECT_EQ(store().schedules().TakeNextFireMismatches(), 1);
  }

  QL_ASSERT_OK_AND_ASSIGN(ScheduleAdvance good, Admit(due));
  EXPECT_EQ(good.new_next_fire_at_ms, next);
  QL_ASSERT_OK_AND_ASSIGN(AdvanceOutcome admitted, store().schedules().ApplyScheduleAdvance(good));
  EXPECT_EQ(admitted, AdvanceOutcome::kApplied);
  QL_ASSERT_OK_AND_ASSIGN(ScheduleRecord schedule, store().definitions().GetSchedule(trigger_id));
  EXPECT_EQ(schedule.next_fire_at_ms, next);
  EXPECT_EQ(schedule.last_scheduled_at_ms, occurrence);
  QL_ASSERT_OK_AND_ASSIGN(RunRecord run, store().runs().GetRun(good.run->run_id));
  EXPECT_EQ(run.status, "queued");
  EXPECT_EQ(run.scheduled_for_ms, occurrence);
  EXPECT_EQ(store().schedules().TakeNextFireMismatches(), 0);
}

// What the misfire decision legitimately stores after a gap: under fire_once a late occurrence
// moves the cursor past the observation time; under skip a late occurrence is never admitted.
TEST_P(OverlapContract, ALateAdmissionMayMoveTheCursorOnlyAsTheMisfirePolicyDoes) {
  const int64_t late_by = 20 * 60'000;  // later than any grace
  QL_ASSERT_OK_AND_ASSIGN(DueSchedule once, DueOccurrence("fire_once", late_by));
  const int64_t occurrence = *once.schedule.next_fire_at_ms;
  QL_ASSERT_OK_AND_ASSIGN(int64_t next, NextFireOf(once, occurrence));
  QL_ASSERT_OK_AND_ASSIGN(int64_t after_now, NextFireOf(once, Now()));
  ASSERT_LT(next, Now());
  // Stepping to the next occurrence would replay the backlog; stopping between skips one.
  for (int64_t wrong : {next, after_now - 300'000, after_now + 300'000}) {
    SCOPED_TRACE(wrong);
    QL_ASSERT_OK_AND_ASSIGN(ScheduleAdvance bad, Admit(once, wrong));
    QL_EXPECT_ERROR(store().schedules().ApplyScheduleAdvance(bad), StatusCode::kInvalidArgument,
                    "next_fire_mismatch");
  }
  EXPECT_EQ(store().schedules().TakeNextFireMismatches(), 3);
  QL_ASSERT_OK_AND_ASSIGN(ScheduleAdvance late, Admit(once, after_now));
  QL_ASSERT_OK_AND_ASSIGN(AdvanceOutcome admitted, store().schedules().ApplyScheduleAdvance(late));
  EXPECT_EQ(admitted, AdvanceOutcome::kApplied);
  QL_ASSERT_OK_AND_ASSIGN(ScheduleRecord schedule,
                          store().definitions().GetSchedule(once.schedule.trigger_id));
  EXPECT_EQ(schedule.next_fire_at_ms, after_now);
  EXPECT_EQ(schedule.last_scheduled_at_ms, occurrence);

  QL_ASSERT_OK_AND_ASSIGN(DueSchedule skipped, DueOccurrence("skip", late_by));
  QL_ASSERT_OK_AND_ASSIGN(int64_t skip_after_now, NextFireOf(skipped, Now()));
  for (int64_t any : {*skipped.schedule.next_fire_at_ms + 300'000, skip_after_now}) {
    QL_ASSERT_OK_AND_ASSIGN(ScheduleAdvance bad, Admit(skipped, any));
    QL_EXPECT_ERROR(store().schedules().ApplyScheduleAdvance(bad), StatusCode::kInvalidArgument,
                    "next_fire_mismatch");
  }
  EXPECT_EQ(store().schedules().TakeNextFireMismatches(), 2);
  // What the decision does instead: move the cursor past now without a run.
  QL_ASSERT_OK_AND_ASSIGN(AdvanceOutcome moved, store().schedules().ApplyScheduleAdvance(
                                                    MoveCursor(skipped, skip_after_now)));
  EXPECT_EQ(moved, AdvanceOutcome::kApplied);
  EXPECT_EQ(store().schedules().TakeNextFireMismatches(), 0);
}

TEST_P(OverlapContract, ForbidRecordsTheOccurrenceAsSkippedWhileARunOfTheTriggerIsUnfinished) {
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord task, LimitedTask(std::nullopt));
  QL_ASSERT_OK_AND_ASSIGN(std::string trigger_id, OverlapTrigger(task, "forbid"));
  std::string first, second, third, fourth;
  QL_ASSERT_OK_AND_ASSIGN(AdvanceOutcome admitted, Fire(trigger_id, first));
  EXPECT_EQ(admitted, AdvanceOutcome::kApplied);

  // Queued, not started: still unfinished.
  QL_ASSERT_OK_AND_ASSIGN(AdvanceOutcome refused, Fire(trigger_id, second));
  EXPECT_EQ(refused, AdvanceOutcome::kSkipped);
  QL_ASSERT_OK_AND_ASSIGN(RunRecord skipped, store().runs().GetRun(second));
  EXPECT_EQ(skipped.status, "skipped");
  EXPECT_EQ(skipped.error_code, "overlap");
  EXPECT_EQ(skipped.trigger_type, "cron");
  EXPECT_EQ(skipped.finished_at_ms, Now());
  EXPECT_FALSE(skipped.queued_at_ms.has_value());
  QL_ASSERT_OK_AND_ASSIGN(std::vector<AttemptRecord> attempts, store().runs().ListAttempts(second));
  EXPECT_TRUE(attempts.empty());
  QL_ASSERT_OK_AND_ASSIGN(std::vector<EventRecord> events, store().runs().ListEvents(second, 0, 10));
  EXPECT_EQ(EventTypes(events), (std::vector<std::string>{"run.created", "run.skipped"}));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].payload_json, R"({"reason":"overlap"})");
  // The skipped run holds the occurrence's key: the occurrence is decided once.
  QL_ASSERT_OK_AND_ASSIGN(RunRecord by_key, store().runs().FindRunByIdempotencyKey(
                                                project().id, *skipped.idempotency_key));
  EXPECT_EQ(by_key.id, second);

  // Running: still unfinished.
  QL_ASSERT_OK_AND_ASSIGN(RunRecord queued, store().runs().GetRun(first));
  QL_ASSERT_OK_AND_ASSIGN(RunRecord running, StartRun(queued));
  QL_ASSERT_OK_AND_ASSIGN(AdvanceOutcome again, Fire(trigger_id, third));
  EXPECT_EQ(again, AdvanceOutcome::kSkipped);

  // Finished: the next occurrence is admitted.
  QL_ASSERT_OK(Succeed(running));
  QL_ASSERT_OK_AND_ASSIGN(AdvanceOutcome after, Fire(trigger_id, fourth));
  EXPECT_EQ(after, AdvanceOutcome::kApplied);
  QL_ASSERT_OK_AND_ASSIGN(RunRecord next, store().runs().GetRun(fourth));
  EXPECT_EQ(next.status, "queued");
}

// A skipped occurrence's notification is written by the admission that skips it.
TEST_P(OverlapContract, ASkippedOccurrenceWritesItsNotificationInTheAdmission) {
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord task, LimitedTask(std::nullopt));
  QL_ASSERT_OK_AND_ASSIGN(std::string trigger_id, OverlapTrigger(task, "forbid"));
  CreateChannelCommand channel;
  channel.channel = ChannelRecord{
      NewId(), project().id, "ops",       "webhook", R"({"url":"https://example.test/h"})",
      "",      Now(),        std::nullopt};
  QL_ASSERT_OK_AND_ASSIGN(ChannelRecord ops, store().notifications().CreateChannel(channel));
  CreateRuleCommand rule;
  rule.rule.id = NewId();
  rule.rule.project_id = project().id;
  rule.rule.channel_id = ops.id;
  rule.rule.event = "skipped";
  rule.rule.mode = "every";
  rule.rule.created_at_ms = Now();
  QL_ASSERT_OK(store().notifications().CreateRule(rule));
  std::string first, second;
  QL_ASSERT_OK(Fire(trigger_id, first));
  QL_ASSERT_OK_AND_ASSIGN(AdvanceOutcome refused, Fire(trigger_id, second));
  ASSERT_EQ(refused, AdvanceOutcome::kSkipped);
  QL_ASSERT_OK_AND_ASSIGN(std::vector<OutboxRecord> rows,
                          store().notifications().ListDeliveries(DeliveryFilter{project().id}));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].event, "skipped");
  EXPECT_EQ(rows[0].run_id, second);
  EXPECT_EQ(rows[0].id, OutboxId(rule.rule.id, "skipped", second));
}

TEST_P(OverlapContract, ReplaceCancelsTheUnfinishedRunOfTheTriggerAndQueuesTheNewOne) {
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord task, LimitedTask(std::nullopt));
  QL_ASSERT_OK_AND_ASSIGN(std::string trigger_id, OverlapTrigger(task, "replace"));
  std::string first, second, third;
  QL_ASSERT_OK_AND_ASSIGN(AdvanceOutcome one, Fire(trigger_id, first));
  ASSERT_EQ(one, AdvanceOutcome::kApplied);

  // A queued run has not started: it is cancelled at once.
  QL_ASSERT_OK_AND_ASSIGN(AdvanceOutcome two, Fire(trigger_id, second));
  EXPECT_EQ(two, AdvanceOutcome::kApplied);
  QL_ASSERT_OK_AND_ASSIGN(RunRecord cancelled, store().runs().GetRun(first));
  EXPECT_EQ(cancelled.status, "cancelled");
  EXPECT_EQ(cancelled.cancel_reason, "replaced");
  QL_ASSERT_OK_AND_ASSIGN(RunRecord queued, store().runs().GetRun(second));
  EXPECT_EQ(queued.status, "queued");

  // A running run gets the cancel intent its executor honours, and the new run is queued.
  QL_ASSERT_OK_AND_ASSIGN(RunRecord running, StartRun(queued));
  QL_ASSERT_OK_AND_ASSIGN(AdvanceOutcome three, Fire(trigger_id, third));
  EXPECT_EQ(three, AdvanceOutcome::kApplied);
  QL_ASSERT_OK_AND_ASSIGN(RunRecord intent, store().runs().GetRun(second));
  EXPECT_EQ(intent.status, "running");
  EXPECT_EQ(intent.cancel_requested_at_ms, Now());
  EXPECT_EQ(intent.cancel_reason, "replaced");
  QL_ASSERT_OK_AND_ASSIGN(std::vector<EventRecord> events, store().runs().ListEvents(second, 0, 20));
  EXPECT_EQ(EventTypes(events).back(), "run.cancel_requested");
  QL_ASSERT_OK_AND_ASSIGN(RunRecord newest, store().runs().GetRun(third));
  EXPECT_EQ(newest.status, "queued");
}

TEST_P(OverlapContract, ConcurrencyLimitSkipsCronOccurrencesWhileTheTaskIsAtItsLimit) {
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord task, LimitedTask(1));
  EXPECT_EQ(task.concurrency, 1);
  QL_ASSERT_OK_AND_ASSIGN(std::string trigger_id, OverlapTrigger(task, "allow"));
  // A manual run counts against the limit (it is not limited itself).
  QL_ASSERT_OK_AND_ASSIGN(NewRun manual, ManualRun(task));
  QL_ASSERT_OK(store().runs().CreateRun(manual));
  std::string first, second, third;
  QL_ASSERT_OK_AND_ASSIGN(AdvanceOutcome refused, Fire(trigger_id, first));
  EXPECT_EQ(refused, AdvanceOutcome::kSkipped);
  QL_ASSERT_OK_AND_ASSIGN(RunRecord skipped, store().runs().GetRun(first));
  EXPECT_EQ(skipped.status, "skipped");
  EXPECT_EQ(skipped.error_code, "concurrency");
  QL_ASSERT_OK_AND_ASSIGN(std::vector<EventRecord> events, store().runs().ListEvents(first, 0, 10));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].payload_json, R"({"reason":"concurrency"})");

  QL_ASSERT_OK(store().runs().RequestCancel(manual.run_id, "test", "user", Now(), std::nullopt));
  QL_ASSERT_OK_AND_ASSIGN(AdvanceOutcome admitted, Fire(trigger_id, second));
  EXPECT_EQ(admitted, AdvanceOutcome::kApplied);
  // Under `allow` the trigger's own queued run is what holds the limit now.
  QL_ASSERT_OK_AND_ASSIGN(AdvanceOutcome again, Fire(trigger_id, third));
  EXPECT_EQ(again, AdvanceOutcome::kSkipped);
}

TEST_P(OverlapContract, AllowWithoutALimitAdmitsOverlappingOccurrences) {
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord task, LimitedTask(std::nullopt));
  QL_ASSERT_OK_AND_ASSIGN(std::string trigger_id, OverlapTrigger(task, "allow"));
  std::string first, second;
  QL_ASSERT_OK_AND_ASSIGN(AdvanceOutcome one, Fire(trigger_id, first));
  QL_ASSERT_OK_AND_ASSIGN(AdvanceOutcome two, Fire(trigger_id, second));
  EXPECT_EQ(one, AdvanceOutcome::kApplied);
  EXPECT_EQ(two, AdvanceOutcome::kApplied);
  QL_ASSERT_OK_AND_ASSIGN(RunRecord a, store().runs().GetRun(first));
  QL_ASSERT_OK_AND_ASSIGN(RunRecord b, store().runs().GetRun(second));
  EXPECT_EQ(a.status, "queued");
  EXPECT_EQ(b.status, "queued");
}

TEST_P(OverlapContract, TheStoresRefuseAnUnknownPolicyOrLimit) {
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord task, LimitedTask(std::nullopt));
  PublishTriggerCommand trigger = TriggerCommand(NewId(), std::nullopt, task);
  trigger.revision.overlap = "sometimes";
  Status bad_policy = store().definitions().PublishTriggerRevision(trigger).status();
  EXPECT_EQ(bad_policy.reason(), "invalid_overlap_policy") << bad_policy.ToString();
  PublishTaskCommand limited = TaskCommand(NewId(), std::nullopt, "job");
  limited.revision.concurrency = 0;
  Status bad_limit = store().definitions().PublishTaskRevision(limited).status();
  EXPECT_EQ(bad_limit.reason(), "invalid_concurrency") << bad_limit.ToString();
}

TEST_P(OverlapContract, AJitteredRunIsAdmittedOnTimeAndDispatchedOnlyFromItsReleaseTime) {
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord task, LimitedTask(std::nullopt));
  const std::string trigger_id = NewId();
  PublishTriggerCommand cmd = TriggerCommand(trigger_id, std::nullopt, task);
  cmd.revision.jitter_ms = 30'000;
  cmd.revision.content_digest = TriggerContentDigest(cmd.revision);
  QL_ASSERT_OK(store().definitions().PublishTriggerRevision(cmd));
  QL_ASSERT_OK_AND_ASSIGN(TriggerRevisionRecord stored,
                          store().definitions().GetTriggerRevision(trigger_id, 1));
  EXPECT_EQ(stored.jitter_ms, 30'000);
  QL_ASSERT_OK_AND_ASSIGN(DueSchedule fresh, DueRow(trigger_id, Now()));
  EXPECT_EQ(fresh.trigger.jitter_ms, 30'000);
  QL_ASSERT_OK_AND_ASSIGN(AdvanceOutcome set,
                          store().schedules().ApplyScheduleAdvance(MoveCursor(fresh, Now() + 1000)));
  ASSERT_EQ(set, AdvanceOutcome::kApplied);

  QL_ASSERT_OK_AND_ASSIGN(ScheduleRecord schedule, store().definitions().GetSchedule(trigger_id));
  const int64_t occurrence = *schedule.next_fire_at_ms;
  const int64_t release = occurrence + JitterOffsetMs(trigger_id, occurrence, 30'000);
  clock().SetNowMs(occurrence);
  QL_ASSERT_OK_AND_ASSIGN(DueSchedule due, DueRow(trigger_id, Now()));
  QL_ASSERT_OK_AND_ASSIGN(ScheduleAdvance advance, Admit(due));

  // The release time must be exactly the occurrence plus the trigger's offset.
  for (std::optional<int64_t> wrong : {std::optional<int64_t>(), std::optional<int64_t>(release + 1)}) {
    ScheduleAdvance bad = advance;
    bad.run->release_at_ms = wrong;
    Result<AdvanceOutcome> refused = store().schedules().ApplyScheduleAdvance(bad);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().reason(), "invalid_schedule_advance");
  }
  QL_ASSERT_OK_AND_ASSIGN(ScheduleRecord unchanged, store().definitions().GetSchedule(trigger_id));
  EXPECT_EQ(unchanged.next_fire_at_ms, occurrence);

  advance.run->release_at_ms = release;
  QL_ASSERT_OK_AND_ASSIGN(AdvanceOutcome admitted,
                          store().schedules().ApplyScheduleAdvance(advance));
  ASSERT_EQ(admitted, AdvanceOutcome::kApplied);
  QL_ASSERT_OK_AND_ASSIGN(RunRecord run, store().runs().GetRun(advance.run->run_id));
  EXPECT_EQ(run.status, "queued");
  EXPECT_EQ(run.scheduled_for_ms, occurrence);
  EXPECT_EQ(run.created_at_ms, occurrence);
  EXPECT_EQ(run.queued_at_ms, release);

  auto dispatchable = [&](int64_t now_ms) {
    Result<std::vector<RunRecord>> listed = store().runs().ListDispatchable("local_process", 10, now_ms);
    EXPECT_TRUE(listed.ok()) << listed.status().message();
    return listed.ok() && !listed->empty() && listed->front().id == run.id;
  };
  if (release > occurrence) EXPECT_FALSE(dispatchable(release - 1)) << "released early";
  EXPECT_TRUE(dispatchable(release));

  // Admitted late (after its release time), a run is queued at once.
  const int64_t second = *advance.new_next_fire_at_ms;
  clock().SetNowMs(second);
  QL_ASSERT_OK_AND_ASSIGN(DueSchedule late, DueRow(trigger_id, Now()));
  QL_ASSERT_OK_AND_ASSIGN(ScheduleAdvance late_advance, Admit(late));
  late_advance.run->release_at_ms = second + JitterOffsetMs(trigger_id, second, 30'000);
  clock().SetNowMs(second + 35'000);
  late_advance.run->now_ms = Now();
  QL_ASSERT_OK_AND_ASSIGN(AdvanceOutcome late_admitted,
                          store().schedules().ApplyScheduleAdvance(late_advance));
  ASSERT_EQ(late_admitted, AdvanceOutcome::kApplied);
  QL_ASSERT_OK_AND_ASSIGN(RunRecord late_run, store().runs().GetRun(late_advance.run->run_id));
  EXPECT_EQ(late_run.queued_at_ms, Now());
}

TEST_P(OverlapContract, ATriggerWithoutJitterTakesNoReleaseTimeAndAWindowIsBounded) {
  QL_ASSERT_OK_AND_ASSIGN(TaskRevisionRecord task, LimitedTask(std::nullopt));
  QL_ASSERT_OK_AND_ASSIGN(std::string trigger_id, OverlapTrigger(task, "allow"));
  QL_ASSERT_OK_AND_ASSIGN(ScheduleRecord schedule, store().definitions().GetSchedule(trigger_id));
  clock().SetNowMs(*schedule.next_fire_at_ms);
  QL_ASSERT_OK_AND_ASSIGN(DueSchedule due, DueRow(trigger_id, Now()));
  QL_ASSERT_OK_AND_ASSIGN(ScheduleAdvance advance, Admit(due));
  advance.run->release_at_ms = Now() + 500;
  Result<AdvanceOutcome> refused = store().schedules().ApplyScheduleAdvance(advance);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().reason(), "invalid_schedule_advance");

  for (int64_t bad : {int64_t{-1}, kMaxJitterMs + 1}) {
    PublishTriggerCommand cmd = TriggerCommand(NewId(), std::nullopt, task);
    cmd.revision.jitter_ms = bad;
    cmd.revision.content_digest = TriggerContentDigest(cmd.revision);
    Result<PublishTriggerResult> published = store().definitions().PublishTriggerRevision(cmd);
    ASSERT_FALSE(published.ok()) << bad;
    EXPECT_EQ(published.status().reason(), "invalid_jitter");
  }
}

}  // namespace ql::testing
