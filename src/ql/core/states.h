#pragma once

// Run and attempt state machines, their wire names and event type names, and the small closed
// vocabularies (executor, trigger and actor types) stored next to them. The allowed transitions
// are data (kRunTransitions, kAttemptTransitions) so that storage adapters, tests and
// documentation read the same table.

#include <array>
#include <optional>
#include <string>
#include <string_view>

#include "ql/core/status.h"

namespace ql {

enum class RunStatus {
  kCreated,
  kQueued,
  kDispatching,
  kRunning,
  kSucceeded,
  kFailed,
  kCancelled,
  kTimedOut,
  kRetryWait,
  kLost,
  // An approved run whose attempt was lost after it started: it may have had its effect, so
  // nothing retries it; an admin resolves it (succeeded, failed, or a new approved run).
  kRecoveryRequired,
  // A cron occurrence decided not to run at admission (the trigger's overlap policy or the
  // task's concurrency limit; error_code says which). It never had an attempt.
  kSkipped,
};

enum class AttemptStatus {
  kClaimed,
  kStarting,
  kRunning,
  kSucceeded,
  kFailed,
  kCancelled,
  kTimedOut,
  kLost,
};

// Every value of each enum, in declaration order, for exhaustive iteration.
inline constexpr std::array<RunStatus, 12> kAllRunStatuses = {
    RunStatus::kCreated,   RunStatus::kQueued, RunStatus::kDispatching,      RunStatus::kRunning,
    RunStatus::kSucceeded, RunStatus::kFailed, RunStatus::kCancelled,        RunStatus::kTimedOut,
    RunStatus::kRetryWait, RunStatus::kLost,   RunStatus::kRecoveryRequired, RunStatus::kSkipped,
};
inline constexpr std::array<AttemptStatus, 8> kAllAttemptStatuses = {
    AttemptStatus::kClaimed,   AttemptStatus::kStarting, AttemptStatus::kRunning,
    AttemptStatus::kSucceeded, AttemptStatus::kFailed,   AttemptStatus::kCancelled,
    AttemptStatus::kTimedOut,  AttemptStatus::kLost,
};

// Returns the wire name ("created", "retry_wait", "timed_out", ...) stored in the database and
// shown in the API.
std::string_view RunStatusName(RunStatus status);
std::string_view AttemptStatusName(AttemptStatus status);

// Returns the status with exactly this wire name (case-sensitive), or nullopt.
std::optional<RunStatus> ParseRunStatus(std::string_view name);
std::optional<AttemptStatus> ParseAttemptStatus(std::string_view name);

// Returns true for the end states whose rows never change again: succeeded, failed, cancelled,
// timed_out, skipped. A lost run is not terminal (it may still be retried, failed or cancelled), nor is
// a run that requires recovery (a resolution ends it).
bool IsTerminal(RunStatus status);
// Returns true for succeeded, failed, cancelled, timed_out and lost.
bool IsTerminal(AttemptStatus status);

template <typename S>
struct Transition {
  S from;
  S to;
};
using RunTransition = Transition<RunStatus>;
using AttemptTransition = Transition<AttemptStatus>;

// The complete list of legal run moves; any pair not listed is illegal (including a state to
// itself).
inline constexpr RunTransition kRunTransitions[] = {
    {RunStatus::kCreated, RunStatus::kQueued},
    {RunStatus::kCreated, RunStatus::kCancelled},
    // Admission recorded the occurrence but did not run it (overlap policy, concurrency limit).
    {RunStatus::kCreated, RunStatus::kSkipped},

    {RunStatus::kQueued, RunStatus::kDispatching},
    {RunStatus::kQueued, RunStatus::kCancelled},
    {RunStatus::kQueued, RunStatus::kTimedOut},

    {RunStatus::kDispatching, RunStatus::kRunning},
    {RunStatus::kDispatching, RunStatus::kRetryWait},
    {RunStatus::kDispatching, RunStatus::kFailed},
    {RunStatus::kDispatching, RunStatus::kCancelled},
    {RunStatus::kDispatching, RunStatus::kTimedOut},
    {RunStatus::kDispatching, RunStatus::kLost},
    {RunStatus::kDispatching, RunStatus::kRecoveryRequired},

    {RunStatus::kRunning, RunStatus::kRetryWait},
    {RunStatus::kRunning, RunStatus::kSucceeded},
    {RunStatus::kRunning, RunStatus::kFailed},
    {RunStatus::kRunning, RunStatus::kCancelled},
    {RunStatus::kRunning, RunStatus::kTimedOut},
    {RunStatus::kRunning, RunStatus::kLost},
    {RunStatus::kRunning, RunStatus::kRecoveryRequired},

    {RunStatus::kRetryWait, RunStatus::kQueued},
    {RunStatus::kRetryWait, RunStatus::kCancelled},
    {RunStatus::kRetryWait, RunStatus::kTimedOut},

    {RunStatus::kLost, RunStatus::kRetryWait},
    {RunStatus::kLost, RunStatus::kFailed},
    {RunStatus::kLost, RunStatus::kCancelled},
    {RunStatus::kLost, RunStatus::kRecoveryRequired},

    // Only a human resolution leaves it (a late worker result is refused: its attempt is lost);
    // a retry resolution fails this run and queues a new approved one.
    {RunStatus::kRecoveryRequired, RunStatus::kSucceeded},
    {RunStatus::kRecoveryRequired, RunStatus::kFailed},
};

// The complete list of legal attempt moves; every terminal attempt state has no outgoing move.
inline constexpr AttemptTransition kAttemptTransitions[] = {
    {AttemptStatus::kClaimed, AttemptStatus::kStarting},
    {AttemptStatus::kClaimed, AttemptStatus::kCancelled},
    {AttemptStatus::kClaimed, AttemptStatus::kLost},

    {AttemptStatus::kStarting, AttemptStatus::kRunning},
    {AttemptStatus::kStarting, AttemptStatus::kFailed},
    {AttemptStatus::kStarting, AttemptStatus::kCancelled},
    {AttemptStatus::kStarting, AttemptStatus::kTimedOut},
    {AttemptStatus::kStarting, AttemptStatus::kLost},

    {AttemptStatus::kRunning, AttemptStatus::kSucceeded},
    {AttemptStatus::kRunning, AttemptStatus::kFailed},
    {AttemptStatus::kRunning, AttemptStatus::kCancelled},
    {AttemptStatus::kRunning, AttemptStatus::kTimedOut},
    {AttemptStatus::kRunning, AttemptStatus::kLost},
};

// Returns true exactly when {from, to} is listed in kRunTransitions / kAttemptTransitions.
bool IsAllowed(RunStatus from, RunStatus to);
bool IsAllowed(AttemptStatus from, AttemptStatus to);

// Returns ok when the move is legal, else Conflict with reason "illegal_transition" and the
// message "run cannot move from <from> to <to>" (wire names).
Status CheckRunTransition(RunStatus from, RunStatus to);
// Returns ok when the move is legal, else Conflict with reason "illegal_transition" and the
// message "attempt cannot move from <from> to <to>" (wire names).
Status CheckAttemptTransition(AttemptStatus from, AttemptStatus to);

inline constexpr std::string_view kReasonIllegalTransition = "illegal_transition";

// Returns the event type recorded when a run enters `status`: "run.<wire name>".
std::string RunEventType(RunStatus status);
// Returns the event type recorded when an attempt enters `status`: "attempt.<wire name>".
std::string AttemptEventType(AttemptStatus status);

// Event types that are not (only) a state entry.
inline constexpr std::string_view kEventRunCreated = "run.created";
inline constexpr std::string_view kEventRunCancelRequested = "run.cancel_requested";
inline constexpr std::string_view kEventRunDispatching = "run.dispatching";
inline constexpr std::string_view kEventAttemptLateCallbackIgnored =
    "attempt.late_callback_ignored";
inline constexpr std::string_view kEventLogTruncated = "attempt.log_truncated";
// Processes a command left running at its end were ended with its run ({"processes": N}).
inline constexpr std::string_view kEventDescendantsEnded = "attempt.descendants_ended";
// A restarted daemon took an attempt back from its supervisor ({"pid", "running"}).
inline constexpr std::string_view kEventAdopted = "attempt.adopted";
// A remote worker was granted a lease on the attempt (payload: offer, session, generation).
inline constexpr std::string_view kEventAttemptLeased = "attempt.leased";
// A run that required recovery was resolved (payload: resolution, reason, resolved_by, and the
// new run of a retry); appended with the run's terminal state event in the same transaction.
inline constexpr std::string_view kEventRunRecoveryResolved = "run.recovery_resolved";

// Who runs an attempt.
enum class ExecutorType { kLocalProcess, kRemoteWorker };
inline constexpr std::array<ExecutorType, 2> kAllExecutorTypes = {ExecutorType::kLocalProcess,
                                                                  ExecutorType::kRemoteWorker};
// Returns "local_process" or "remote_worker".
std::string_view ExecutorTypeName(ExecutorType type);
// Returns the executor type with exactly this wire name, or nullopt.
std::optional<ExecutorType> ParseExecutorType(std::string_view name);

// What created a run. kApproved: a manual run a second principal approved (or the retry of
// one an admin resolved); once started it is never retried automatically.
enum class TriggerType { kCron, kManual, kApi, kApproved };
inline constexpr std::array<TriggerType, 4> kAllTriggerTypes = {
    TriggerType::kCron, TriggerType::kManual, TriggerType::kApi, TriggerType::kApproved};
// Returns "cron", "manual", "api" or "approved".
std::string_view TriggerTypeName(TriggerType type);
// Returns the trigger type with exactly this wire name, or nullopt.
std::optional<TriggerType> ParseTriggerType(std::string_view name);

// Who appended an event.
enum class ActorType { kScheduler, kDispatcher, kExecutor, kUser, kWorker, kRecovery };
inline constexpr std::array<ActorType, 6> kAllActorTypes = {
    ActorType::kScheduler, ActorType::kDispatcher, ActorType::kExecutor,
    ActorType::kUser,      ActorType::kWorker,     ActorType::kRecovery};
// Returns "scheduler", "dispatcher", "executor", "user", "worker" or "recovery".
std::string_view ActorTypeName(ActorType type);
// Returns the actor type with exactly this wire name, or nullopt.
std::optional<ActorType> ParseActorType(std::string_view name);

}  // namespace ql
