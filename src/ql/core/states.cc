#include "ql/core/states.h"

#include <algorithm>

namespace ql {
namespace {

// Parses by comparing against every value's wire name, so each enum has one source of names.
template <typename E, std::size_t N, typename NameFn>
std::optional<E> ParseByName(const std::array<E, N>& all, std::string_view name, NameFn name_of) {
  for (E value : all) {
    if (name_of(value) == name) return value;
  }
  return std::nullopt;
}

template <typename S, std::size_t N>
bool InTable(const Transition<S> (&table)[N], S from, S to) {
  return std::any_of(std::begin(table), std::end(table),
                     [&](const Transition<S>& t) { return t.from == from && t.to == to; });
}

}  // namespace

std::string_view RunStatusName(RunStatus status) {
  switch (status) {
    case RunStatus::kCreated:
      return "created";
    case RunStatus::kQueued:
      return "queued";
    case RunStatus::kDispatching:
      return "dispatching";
    case RunStatus::kRunning:
      return "running";
    case RunStatus::kSucceeded:
      return "succeeded";
    case RunStatus::kFailed:
      return "failed";
    case RunStatus::kCancelled:
      return "cancelled";
    case RunStatus::kTimedOut:
      return "timed_out";
    case RunStatus::kRetryWait:
      return "retry_wait";
    case RunStatus::kLost:
      return "lost";
    case RunStatus::kRecoveryRequired:
      return "recovery_required";
    case RunStatus::kSkipped:
      return "skipped";
  }
  return "unknown";
}

std::string_view AttemptStatusName(AttemptStatus status) {
  switch (status) {
    case AttemptStatus::kClaimed:
      return "claimed";
    case AttemptStatus::kStarting:
      return "starting";
    case AttemptStatus::kRunning:
      return "running";
    case AttemptStatus::kSucceeded:
      return "succeeded";
    case AttemptStatus::kFailed:
      return "failed";
    case AttemptStatus::kCancelled:
      return "cancelled";
    case AttemptStatus::kTimedOut:
      return "timed_out";
    case AttemptStatus::kLost:
      return "lost";
  }
  return "unknown";
}

std::optional<RunStatus> ParseRunStatus(std::string_view name) {
  return ParseByName(kAllRunStatuses, name, RunStatusName);
}

std::optional<AttemptStatus> ParseAttemptStatus(std::string_view name) {
  return ParseByName(kAllAttemptStatuses, name, AttemptStatusName);
}

bool IsTerminal(RunStatus status) {
  switch (status) {
    case RunStatus::kSucceeded:
    case RunStatus::kFailed:
    case RunStatus::kCancelled:
    case RunStatus::kTimedOut:
    case RunStatus::kSkipped:
      return true;
    default:
      return false;
  }
}

bool IsTerminal(AttemptStatus status) {
  switch (status) {
    case AttemptStatus::kSucceeded:
    case AttemptStatus::kFailed:
    case AttemptStatus::kCancelled:
    case AttemptStatus::kTimedOut:
    case AttemptStatus::kLost:
      return true;
    default:
      return false;
  }
}

bool IsAllowed(RunStatus from, RunStatus to) { return InTable(kRunTransitions, from, to); }

bool IsAllowed(AttemptStatus from, AttemptStatus to) {
  return InTable(kAttemptTransitions, from, to);
}

Status CheckRunTransition(RunStatus from, RunStatus to) {
  if (IsAllowed(from, to)) return Status::Ok();
  return Conflict(std::string(kReasonIllegalTransition),
                  "run cannot move from " + std::string(RunStatusName(from)) + " to " +
                      std::string(RunStatusName(to)));
}

Status CheckAttemptTransition(AttemptStatus from, AttemptStatus to) {
  if (IsAllowed(from, to)) return Status::Ok();
  return Conflict(std::string(kReasonIllegalTransition),
                  "attempt cannot move from " + std::string(AttemptStatusName(from)) + " to " +
                      std::string(AttemptStatusName(to)));
}

std::string RunEventType(RunStatus status) { return "run." + std::string(RunStatusName(status)); }

std::string AttemptEventType(AttemptStatus status) {
  return "attempt." + std::string(AttemptStatusName(status));
}

std::string_view ExecutorTypeName(ExecutorType type) {
  switch (type) {
    case ExecutorType::kLocalProcess:
      return "local_process";
    case ExecutorType::kRemoteWorker:
      return "remote_worker";
  }
  return "unknown";
}

std::optional<ExecutorType> ParseExecutorType(std::string_view name) {
  return ParseByName(kAllExecutorTypes, name, ExecutorTypeName);
}

std::string_view TriggerTypeName(TriggerType type) {
  switch (type) {
    case TriggerType::kCron:
      return "cron";
    case TriggerType::kManual:
      return "manual";
    case TriggerType::kApi:
      return "api";
    case TriggerType::kApproved:
      return "approved";
  }
  return "unknown";
}

std::optional<TriggerType> ParseTriggerType(std::string_view name) {
  return ParseByName(kAllTriggerTypes, name, TriggerTypeName);
}

std::string_view ActorTypeName(ActorType type) {
  switch (type) {
    case ActorType::kScheduler:
      return "scheduler";
    case ActorType::kDispatcher:
      return "dispatcher";
    case ActorType::kExecutor:
      return "executor";
    case ActorType::kUser:
      return "user";
    case ActorType::kWorker:
      return "worker";
    case ActorType::kRecovery:
      return "recovery";
  }
  return "unknown";
}

std::optional<ActorType> ParseActorType(std::string_view name) {
  return ParseByName(kAllActorTypes, name, ActorTypeName);
}

}  // namespace ql
