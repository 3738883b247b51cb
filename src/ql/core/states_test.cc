#include "ql/core/states.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

namespace ql {
namespace {

// DESIGN §2's run table, written out independently of kRunTransitions (by wire name).
const std::map<std::string, std::set<std::string>>& ExpectedRunMoves() {
  static const auto* moves = new std::map<std::string, std::set<std::string>>{
      // DESIGN §11: an occurrence refused at admission by an overlap or concurrency rule.
      {"created", {"queued", "cancelled", "skipped"}},
      {"queued", {"dispatching", "cancelled", "timed_out"}},
      {"dispatching",
       {"running", "retry_wait", "failed", "cancelled", "timed_out", "lost", "recovery_required"}},
      {"running",
       {"retry_wait", "succeeded", "failed", "cancelled", "timed_out", "lost",
        "recovery_required"}},
      {"retry_wait", {"queued", "cancelled", "timed_out"}},
      {"lost", {"retry_wait", "failed", "cancelled", "recovery_required"}},
      // DESIGN §9.1: an approved run lost after start waits for a resolution.
      {"recovery_required", {"succeeded", "failed"}},
  };
  return *moves;
}

const std::map<std::string, std::set<std::string>>& ExpectedAttemptMoves() {
  static const auto* moves = new std::map<std::string, std::set<std::string>>{
      {"claimed", {"starting", "cancelled", "lost"}},
      {"starting", {"running", "failed", "cancelled", "timed_out", "lost"}},
      {"running", {"succeeded", "failed", "cancelled", "timed_out", "lost"}},
  };
  return *moves;
}

bool Expected(const std::map<std::string, std::set<std::string>>& moves, std::string_view from,
              std::string_view to) {
  auto it = moves.find(std::string(from));
  return it != moves.end() && it->second.count(std::string(to)) > 0;
}

TEST(RunStateTest, WireNamesRoundTripAndAreDistinct) {
  std::set<std::string_view> names;
  for (RunStatus s : kAllRunStatuses) {
    std::string_view name = RunStatusName(s);
    EXPECT_TRUE(names.insert(name).second) << name;
    ASSERT_TRUE(ParseRunStatus(name).has_value()) << name;
    EXPECT_EQ(*ParseRunStatus(name), s);
  }
  EXPECT_EQ(names,
            (std::set<std::string_view>{"created", "queued", "dispatching", "running", "succeeded",
                                        "failed", "cancelled", "timed_out", "retry_wait", "lost",
                                        "recovery_required", "skipped"}));
}

TEST(RunStateTest, ParseRejectsNearMisses) {
  for (std::string_view bad : {"", "Created", "QUEUED", "timed-out", "timedout", "retry wait",
                               " running", "running ", "canceled", "claimed", "lost\n"}) {
    EXPECT_FALSE(ParseRunStatus(bad).has_value()) << "'" << bad << "'";
  }
}

TEST(AttemptStateTest, WireNamesRoundTripAndAreDistinct) {
  std::set<std::string_view> names;
  for (AttemptStatus s : kAllAttemptStatuses) {
    std::string_view name = AttemptStatusName(s);
    EXPECT_TRUE(names.insert(name).second) << name;
    ASSERT_TRUE(ParseAttemptStatus(name).has_value()) << name;
    EXPECT_EQ(*ParseAttemptStatus(name), s);
  }
  EXPECT_EQ(names, (std::set<std::string_view>{"claimed", "starting", "running", "succeeded",
                                               "failed", "cancelled", "timed_out", "lost"}));
  EXPECT_FALSE(ParseAttemptStatus("queued").has_value());
  EXPECT_FALSE(ParseAttemptStatus("retry_wait").has_value());
  EXPECT_FALSE(ParseAttemptStatus("Claimed").has_value());
}

TEST(RunStateTest, EveryPairIsAllowedExactlyWhenDesignTableListsIt) {
  int allowed = 0;
  for (RunStatus from : kAllRunStatuses) {
    for (RunStatus to : kAllRunStatuses) {
      bool want = Expected(ExpectedRunMoves(), RunStatusName(from), RunStatusName(to));
      EXPECT_EQ(IsAllowed(from, to), want) << RunStatusName(from) << " -> " << RunStatusName(to);
      Status st = CheckRunTransition(from, to);
      EXPECT_EQ(st.ok(), want);
      if (want) ++allowed;
    }
  }
  EXPECT_EQ(allowed, 29);
  // The data table holds each move once, so its size equals the number of legal pairs.
  EXPECT_EQ(std::size(kRunTransitions), 29u);
}

TEST(AttemptStateTest, EveryPairIsAllowedExactlyWhenDesignTableListsIt) {
  int allowed = 0;
  for (AttemptStatus from : kAllAttemptStatuses) {
    for (AttemptStatus to : kAllAttemptStatuses) {
      bool want = Expected(ExpectedAttemptMoves(), AttemptStatusName(from), AttemptStatusName(to));
      EXPECT_EQ(IsAllowed(from, to), want)
          << AttemptStatusName(from) << " -> " << AttemptStatusName(to);
      EXPECT_EQ(CheckAttemptTransition(from, to).ok(), want);
      if (want) ++allowed;
    }
  }
  EXPECT_EQ(allowed, 13);
  EXPECT_EQ(std::size(kAttemptTransitions), 13u);
}

TEST(RunStateTest, TerminalStatesAreExactlyTheFiveEndStatesAndHaveNoMoves) {
  std::set<std::string_view> terminal;
  for (RunStatus s : kAllRunStatuses) {
    if (IsTerminal(s)) terminal.insert(RunStatusName(s));
  }
  EXPECT_EQ(terminal,
            (std::set<std::string_view>{"succeeded", "failed", "cancelled", "timed_out",
                                        "skipped"}));
  EXPECT_FALSE(IsTerminal(RunStatus::kLost));
  EXPECT_FALSE(IsTerminal(RunStatus::kRetryWait));

  for (const RunTransition& t : kRunTransitions) {
    EXPECT_FALSE(IsTerminal(t.from)) << "terminal " << RunStatusName(t.from) << " has a move";
  }
  // Every non-terminal run state can still move somewhere, so no run can get stuck.
  for (RunStatus from : kAllRunStatuses) {
    if (IsTerminal(from)) continue;
    bool any = false;
    for (RunStatus to : kAllRunStatuses) any = any || IsAllowed(from, to);
    EXPECT_TRUE(any) << RunStatusName(from);
  }
  // A lost run has moves (retry, fail, cancel) although nothing else leads back to running.
  EXPECT_TRUE(IsAllowed(RunStatus::kLost, RunStatus::kRetryWait));
  EXPECT_FALSE(IsAllowed(RunStatus::kLost, RunStatus::kRunning));
}

TEST(RunStateTest, OnlyACreatedRunIsSkippedAndASkippedRunNeverMoves) {
  EXPECT_EQ(RunEventType(RunStatus::kSkipped), "run.skipped");
  EXPECT_TRUE(IsTerminal(RunStatus::kSkipped));
  for (RunStatus s : kAllRunStatuses) {
    EXPECT_EQ(IsAllowed(s, RunStatus::kSkipped), s == RunStatus::kCreated) << RunStatusName(s);
    EXPECT_FALSE(IsAllowed(RunStatus::kSkipped, s)) << RunStatusName(s);
  }
}

TEST(AttemptStateTest, TerminalStatesIncludeLostAndHaveNoMoves) {
  std::set<std::string_view> terminal;
  for (AttemptStatus s : kAllAttemptStatuses) {
    if (IsTerminal(s)) terminal.insert(AttemptStatusName(s));
  }
  EXPECT_EQ(terminal,
            (std::set<std::string_view>{"succeeded", "failed", "cancelled", "timed_out", "lost"}));
  for (const AttemptTransition& t : kAttemptTransitions) {
    EXPECT_FALSE(IsTerminal(t.from)) << "terminal " << AttemptStatusName(t.from) << " has a move";
  }
}

TEST(RunStateTest, NoStateMovesToItself) {
  for (RunStatus s : kAllRunStatuses) EXPECT_FALSE(IsAllowed(s, s)) << RunStatusName(s);
  for (AttemptStatus s : kAllAttemptStatuses) EXPECT_FALSE(IsAllowed(s, s)) << AttemptStatusName(s);
}

TEST(RunStateTest, IllegalMoveIsAConflictNamingBothStates) {
  Status st = CheckRunTransition(RunStatus::kSucceeded, RunStatus::kRunning);
  EXPECT_EQ(st.code(), StatusCode::kConflict);
  EXPECT_EQ(st.reason(), "illegal_transition");
  EXPECT_EQ(st.message(), "run cannot move from succeeded to running");

  st = CheckRunTransition(RunStatus::kQueued, RunStatus::kRetryWait);
  EXPECT_EQ(st.message(), "run cannot move from queued to retry_wait");

  EXPECT_TRUE(CheckRunTransition(RunStatus::kRunning, RunStatus::kTimedOut).ok());
}

TEST(AttemptStateTest, IllegalMoveIsAConflictNamingBothStates) {
  Status st = CheckAttemptTransition(AttemptStatus::kLost, AttemptStatus::kSucceeded);
  EXPECT_EQ(st.code(), StatusCode::kConflict);
  EXPECT_EQ(st.reason(), "illegal_transition");
  EXPECT_EQ(st.message(), "attempt cannot move from lost to succeeded");

  // A claimed attempt must start before it can finish.
  st = CheckAttemptTransition(AttemptStatus::kClaimed, AttemptStatus::kSucceeded);
  EXPECT_EQ(st.message(), "attempt cannot move from claimed to succeeded");
  EXPECT_TRUE(CheckAttemptTransition(AttemptStatus::kClaimed, AttemptStatus::kLost).ok());
}

TEST(StateEventTest, EventTypesFollowTheStateNames) {
  EXPECT_EQ(RunEventType(RunStatus::kQueued), "run.queued");
  EXPECT_EQ(RunEventType(RunStatus::kTimedOut), "run.timed_out");
  EXPECT_EQ(RunEventType(RunStatus::kRetryWait), "run.retry_wait");
  EXPECT_EQ(RunEventType(RunStatus::kCreated), kEventRunCreated);
  EXPECT_EQ(RunEventType(RunStatus::kDispatching), kEventRunDispatching);
  EXPECT_EQ(AttemptEventType(AttemptStatus::kClaimed), "attempt.claimed");
  EXPECT_EQ(AttemptEventType(AttemptStatus::kLost), "attempt.lost");
  EXPECT_EQ(kEventRunCreated, "run.created");
  EXPECT_EQ(kEventRunCancelRequested, "run.cancel_requested");
  EXPECT_EQ(kEventRunDispatching, "run.dispatching");
  EXPECT_EQ(kEventAttemptLateCallbackIgnored, "attempt.late_callback_ignored");
  EXPECT_EQ(kEventLogTruncated, "attempt.log_truncated");

  // State event types never collide with the extra event types.
  for (RunStatus s : kAllRunStatuses) {
    EXPECT_NE(RunEventType(s), kEventRunCancelRequested);
  }
  for (AttemptStatus s : kAllAttemptStatuses) {
    EXPECT_NE(AttemptEventType(s), kEventAttemptLateCallbackIgnored);
    EXPECT_NE(AttemptEventType(s), kEventLogTruncated);
  }
}

TEST(StateVocabularyTest, ExecutorTriggerAndActorTypesRoundTrip) {
  std::set<std::string_view> names;
  for (ExecutorType t : kAllExecutorTypes) {
    names.insert(ExecutorTypeName(t));
    EXPECT_EQ(ParseExecutorType(ExecutorTypeName(t)), t);
  }
  EXPECT_EQ(names, (std::set<std::string_view>{"local_process", "remote_worker"}));

  names.clear();
  for (TriggerType t : kAllTriggerTypes) {
    names.insert(TriggerTypeName(t));
    EXPECT_EQ(ParseTriggerType(TriggerTypeName(t)), t);
  }
  EXPECT_EQ(names, (std::set<std::string_view>{"cron", "manual", "api", "approved"}));

  names.clear();
  for (ActorType t : kAllActorTypes) {
    names.insert(ActorTypeName(t));
    EXPECT_EQ(ParseActorType(ActorTypeName(t)), t);
  }
  EXPECT_EQ(names, (std::set<std::string_view>{"scheduler", "dispatcher", "executor", "user",
                                               "worker", "recovery"}));

  EXPECT_FALSE(ParseExecutorType("local").has_value());
  EXPECT_FALSE(ParseExecutorType("Remote_Worker").has_value());
  EXPECT_FALSE(ParseTriggerType("CRON").has_value());
  EXPECT_FALSE(ParseTriggerType("").has_value());
  EXPECT_FALSE(ParseActorType("system").has_value());
}

}  // namespace
}  // namespace ql
