#pragma once

// Management use-cases of QingLong over the repository ports: publishing tasks and triggers,
// previewing fire times, starting, cancelling and retrying runs, and reading everything back.
// Profile-neutral: ql-local runs it over SQLite with executor type "local_process", ql-cluster
// over PostgreSQL with "remote_worker". It never sees SQL and never spawns anything.
//
// Every method validates its whole input before it writes; a rejected call changes nothing.
// Errors carry a stable reason and a message naming the field and value at fault:
//   InvalidArgument  invalid_id, invalid_mutation_id, invalid_expected_revision, invalid_limit,
//                    invalid_cursor, invalid_count, invalid_status, invalid_priority,
//                    invalid_idempotency_key, invalid_cancel_reason, invalid_after, every
//                    task_* / spec_* / retry_* reason of the task body, every cron_* /
//                    timezone_* reason, invalid_misfire_policy
//   NotFound         task_not_found, trigger_not_found, run_not_found, attempt_not_found
//   Conflict         task_disabled, trigger_pin_stale, run_not_terminal, run_already_terminal,
//                    idempotency_key_reused, revision_conflict, mutation_id_reused,
//                    execution_revision_missing, plus the store's own conflict reasons
//   Duplicate        (from the store) an id that exists already
//   Busy / Unavailable / OutcomeUnknown / Corrupt / Internal  passed through from the store

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ql/core/approval_ports.h"
#include "ql/core/clock.h"
#include "ql/core/execution_plan.h"
#include "ql/core/ports.h"
#include "ql/core/records.h"
#include "ql/core/status.h"
#include "ql/engine/governance_service.h"
#include "ql/engine/retention_service.h"

namespace ql {

// Bounds shared by the service and the HTTP API.
inline constexpr int kDefaultPageLimit = 50;
inline constexpr int kMaxPageLimit = 500;
inline constexpr int kDefaultPreviewCount = 5;
inline constexpr int kMaxPreviewCount = 100;
inline constexpr int kMinRunPriority = -1000;
inline constexpr int kMaxRunPriority = 1000;
inline constexpr size_t kMaxMutationIdBytes = 128;
inline constexpr size_t kMaxIdempotencyKeyBytes = 128;
inline constexpr size_t kMaxCancelReasonChars = 256;

struct ControlOptions {
  // Executor type of the execution revisions published with enabled tasks and of the attempts
  // of manual runs: "local_process" (ql-local) or "remote_worker" (ql-cluster).
  std::string executor_type = "local_process";
  // The scheduler's misfire grace; previews apply the same misfire decision with it, so they
  // show exactly the occurrences the scheduler will admit.
  int64_t grace_ms = 300'000;
  // Display name of the default project created on first start.
  std::string default_project_name = "Default";
};

struct TaskOverview;  // below TriggerView

// A task head with its current revision.
struct TaskView {
  TaskHeadRecord head;
  TaskRevisionRecord revision;
  // The retry policy runs of this revision snapshot, read from its execution revision; empty
  // for a disabled revision, which has none.
  std::optional<RetryPolicy> retry;
  // Set by ListTasks and GetTask (not by writes).
  std::shared_ptr<const TaskOverview> overview;
};

// Filters of the cron list (ListTasks); each one given narrows it.
struct TaskListQuery {
  std::optional<std::string> text;  // in the name, ignoring ASCII case
  // A label KEY=VALUE, or KEY alone: the task has the key.
  std::optional<std::string> label;
  // The status of the task's last run (a run status), or "none": it never ran.
  std::optional<std::string> last_status;
};

// A publish body: {"name", "kind"?, "spec", "labels"?, "enabled"?, "retry"?}. `mutation_id`
// makes the write idempotent: replaying it with identical content returns the stored revision.
// For a create, the task id is derived from (project, mutation id), so a replayed create
// returns the same task. Absent, a fresh mutation id is generated.
struct TaskWrite {
  nlohmann::json body;
  std::optional<std::string> mutation_id;
  // For a new revision: repin every live trigger of the task to it in the same transaction.
  bool repin_triggers = false;
};

struct PublishedTask {
  TaskView task;
  bool replayed = false;
  // The triggers given a revision in the same transaction (repinned, or deleted with the task).
  std::vector<std::string> trigger_ids;
  // After a new revision: the task's enabled triggers that now admit nothing until repinned.
  int64_t stale_triggers = 0;
};

// What a trigger does now, as the scheduler sees it:
//   active      enabled and pinned to the task's current enabled revision: it admits runs;
//   disabled    the trigger is disabled;
//   pin_stale   enabled, but the task was republished (or disabled) since: admits nothing
//               until it is repinned;
//   exhausted   enabled and current, but the expression has no fire time left.
struct TriggerView {
  TriggerHeadRecord head;
  TriggerRevisionRecord revision;
  std::optional<ScheduleRecord> schedule;
  std::string state;
  // The pinned task revision is not the task's current revision, or that one is disabled.
  bool pin_stale = false;
  // The next occurrence the scheduler will admit (set only when state is active).
  std::optional<int64_t> next_fire_at_ms;
};

// What the cron list shows of a task beside its revision: its schedules, its last run and its
// next fire.
struct TaskOverview {
  std::vector<TriggerView> triggers;  // the live triggers of the task, by id
  std::optional<RunRecord> last_run;  // the task's newest run, whatever its status
  // The earliest next fire of the task's active triggers.
  std::optional<int64_t> next_fire_at_ms;
};

// A new trigger. The trigger pins the task's current (enabled) revision and digest.
struct TriggerWrite {
  std::string task_id;
  std::string expression;
  std::string timezone;
  std::string misfire = "skip";
  // "allow" | "forbid" | "replace" (core/overlap.h); anything else → invalid_overlap_policy.
  std::string overlap = "allow";
  // Deterministic jitter window (core/jitter.h), 0 .. 1 h; else invalid_jitter.
  int64_t jitter_ms = 0;
  bool enabled = true;
  // As for TaskWrite: replaying a create with the same mutation id returns the same trigger.
  std::optional<std::string> mutation_id;
  // Unique among the project's live triggers; default: the task's name and the last 12 hex
  // digits of the trigger's id.
  std::optional<std::string> name;
};

// What `EditTrigger` changes; a field left empty keeps the current revision's value.
struct TriggerEdit {
  std::optional<std::string> expression;
  std::optional<std::string> timezone;
  std::optional<std::string> misfire;
  std::optional<std::string> overlap;
  std::optional<int64_t> jitter_ms;
  std::optional<std::string> name;  // renames the trigger (its head; no schedule change)
};

struct PublishedTrigger {
  TriggerView trigger;
  bool replayed = false;
};

struct TriggerPreview {
  TriggerView trigger;
  // Occurrences in the order the scheduler admits them, starting from its durable cursor.
  // Computed even when the trigger is not active (then nothing is admitted: see `state`).
  std::vector<int64_t> fire_times_ms;
};

struct CronPreview {
  std::string expression;  // canonical: fields joined by single spaces
  std::string timezone;    // canonical IANA name
  std::vector<int64_t> fire_times_ms;
};

// A keyset page request. `cursor` is a next_cursor returned by the same listing.
struct PageQuery {
  std::optional<std::string> cursor;
  int limit = kDefaultPageLimit;
};

template <typename T>
struct PageResult {
  std::vector<T> items;
  std::optional<std::string> next_cursor;
};

struct RunQuery {
  std::optional<std::string> task_id;
  std::optional<std::string> trigger_id;
  std::optional<std::string> status;
  // Runs created at or after `since_ms` and before `until_ms`.
  std::optional<int64_t> since_ms;
  std::optional<int64_t> until_ms;
};

struct StartRunRequest {
  std::string task_id;
  // Unique per project; a second start with the same key returns the first run when it names
  // the same task, else Conflict idempotency_key_reused. Keys starting with "ql3:" are
  // reserved for cron occurrences.
  std::optional<std::string> idempotency_key;
  std::optional<int> priority;  // kMinRunPriority .. kMaxRunPriority, default 0
};

// A started run, or — for a task whose revision requires approval — the approval request it
// became instead (then `run` is empty).
struct StartedRun {
  RunRecord run;
  bool replayed = false;
  std::optional<ApprovalRequestRecord> approval;
};

struct RunView {
  RunRecord run;
  std::vector<AttemptRecord> attempts;
  // The artifacts the run's pinned plan names (its script's version), for `ql run show`.
  std::vector<ScriptPin> artifacts;
};

struct StatusSummary {
  ProjectRecord project;
  std::string executor_type;
  int64_t now_ms = 0;
  // Every run status (wire name) with its count, in state-machine order, zeros included.
  std::vector<std::pair<std::string, int64_t>> runs_by_status;
  int64_t enabled_triggers = 0;
  int64_t stale_triggers = 0;  // enabled, but admitting nothing until repinned
};

class ControlService {
 public:
  // `store`, `clock` and `random` must outlive the service. Thread-safe: every method may be
  // called concurrently (the store serialises its own transactions).
  ControlService(Store& store, Clock& clock, RandomSource& random, ControlOptions options);

  // Validates the options: executor type known, grace 0 .. 5 min.
  static Status ValidateOptions(const ControlOptions& options);

  // Returns the default project, creating it on first call. Idempotent.
  Result<ProjectRecord> EnsureDefaultProject();
  // Lists the projects the caller holds a role in (all of them for the system or an
  // installation admin).
  Result<std::vector<ProjectRecord>> ListProjects(const Caller& caller = {});

  // Creates a task (revision 1) in the default project. When the body is enabled, the
  // execution revision for the configured executor type is published in the same transaction.
  Result<PublishedTask> PublishTask(const TaskWrite& write, const Caller& caller = {});
  // Appends revision expected_revision + 1 to `task_id`; Conflict revision_conflict when the
  // task's current revision is not `expected_revision`.
  Result<PublishedTask> PublishTaskRevision(const std::string& task_id, int64_t expected_revision,
                                            const TaskWrite& write, const Caller& caller = {});
  Result<TaskView> GetTask(const std::string& task_id, const Caller& caller = {});
  // Deletes a task: a last, disabled revision, the head kept as a tombstone with its history
  // (until retention) and its name freed, and every live trigger of the task deleted with it,
  // in one transaction. Deleting a deleted task answers it again (replayed).
  Result<PublishedTask> DeleteTask(const std::string& task_ref, const Caller& caller = {});
  // The id of the task `ref` names: a canonical id as it is, anything else as the name of a live
  // task of the caller's project (NotFound task_not_found when none has it).
  Result<std::string> ResolveTaskRef(const std::string& ref, const Caller& caller = {});
  Result<std::string> ResolveTriggerRef(const std::string& ref, const Caller& caller = {});
  // The cron list: the project's live tasks by id, each with its overview, narrowed by `query`
  // (a page holds up to `page.limit` matching tasks; its cursor continues after the last task
  // examined). InvalidArgument invalid_label, invalid_text, invalid_status.
  Result<PageResult<TaskView>> ListTasks(const PageQuery& page, const Caller& caller = {},
                                         const TaskListQuery& query = {});
  // Publishes the next revision of a task with `enabled` changed, everything else kept (a
  // disabled revision has no retry policy of its own: enabling takes the last enabled
  // revision's), and, when enabling, repins the task's triggers in the same transaction so they
  // fire again. A no-op (replayed) when the task already is in that state.
  Result<PublishedTask> SetTaskEnabled(const std::string& task_ref, bool enabled,
                                       const Caller& caller = {});
  // Returns every revision of the task, newest first.
  Result<std::vector<TaskRevisionRecord>> TaskHistory(const std::string& task_id,
                                                      const Caller& caller = {});

  // Creates a trigger on the task's current revision. The expression and zone are validated
  // with the scheduler's own cron code and the zone is stored under its canonical name.
  // Conflict task_disabled when the task's current revision is disabled.
  Result<PublishedTrigger> AddTrigger(const TriggerWrite& write, const Caller& caller = {});
  // Publishes a revision with `enabled` changed; a no-op (returned as replayed) when the
  // trigger already is in that state. Enabling a trigger whose pin is stale is Conflict
  // trigger_pin_stale: repin it first.
  Result<PublishedTrigger> SetTriggerEnabled(const std::string& trigger_id, bool enabled,
                                             const Caller& caller = {});
  // Publishes a revision pinning the task's current revision and digest (enabled state kept);
  // a no-op (replayed) when the pin is already current. Conflict task_disabled when the trigger
  // is enabled and the task's current revision is disabled.
  Result<PublishedTrigger> RepinTrigger(const std::string& trigger_id, const Caller& caller = {});
  // Publishes the next revision of a trigger with `edit` applied (expression, zone, misfire or
  // overlap policy, jitter), the rest as it was, if the trigger is still at `expected_revision` (else
  // Conflict revision_conflict). The schedule follows the new revision from its publication:
  // the cursor is recomputed, so no occurrence of the old expression is admitted after it.
  // An edit that changes nothing answers the current trigger (replayed).
  Result<PublishedTrigger> EditTrigger(const std::string& trigger_id, int64_t expected_revision,
                                       const TriggerEdit& edit, const Caller& caller = {});
  Result<TriggerView> GetTrigger(const std::string& trigger_id, const Caller& caller = {});
  // Deletes a trigger: a last, disabled revision and the head kept as a tombstone.
  Result<PublishedTrigger> DeleteTrigger(const std::string& trigger_ref,
                                         const Caller& caller = {});
  Result<PageResult<TriggerView>> ListTriggers(const std::optional<std::string>& task_id,
                                               const PageQuery& page, const Caller& caller = {});
  // Returns the next `count` (1 .. kMaxPreviewCount) occurrences the scheduler will admit,
  // starting from the durable cursor (or, before initialisation, from the revision's
  // publication time) and applying the misfire policy at the current time.
  Result<TriggerPreview> PreviewTrigger(const std::string& trigger_id, int count,
                                        const Caller& caller = {});
  // Returns the first `count` fire times of `expression` in `timezone` strictly after
  // `from_ms` (default: now), fewer when the expression runs out.
  Result<CronPreview> PreviewCron(const std::string& expression, const std::string& timezone,
                                  std::optional<int64_t> from_ms, int count);

  // Starts a manual run of the task's current enabled revision with its execution revision.
  Result<StartedRun> StartRun(const StartRunRequest& request, const Caller& caller = {});
  // Creates a new manual run of the task's current enabled revision with retry_of_run_id set;
  // only for runs in a terminal state (Conflict run_not_terminal otherwise).
  Result<StartedRun> RetryRun(const std::string& run_id, const Caller& caller = {});
  // Records a cancel intent (the first one wins). Conflict run_already_terminal for terminal
  // runs. `reason` defaults to "user"; at most kMaxCancelReasonChars characters.
  Result<RunRecord> CancelRun(const std::string& run_id, const std::optional<std::string>& reason,
                              const Caller& caller = {});
  Result<RunView> GetRun(const std::string& run_id, const Caller& caller = {});
  // Names to show beside ids: of tasks, triggers and principals by id. An id nothing is known
  // of is left out. For callers that read the objects naming these ids already.
  struct DisplayNames {
    std::map<std::string, std::string> tasks;
    std::map<std::string, std::string> triggers;
    std::map<std::string, std::string> principals;
  };
  Result<DisplayNames> NamesOf(const std::set<std::string>& task_ids,
                               const std::set<std::string>& trigger_ids,
                               const std::set<std::string>& principal_ids);
  // The id of the run `ref` names: a canonical id as it is; a prefix of at least 8 characters
  // of one (lowercase hex, dashes where an id has them) as the one run of the caller's project
  // whose id starts with it. InvalidArgument invalid_id; NotFound run_not_found; Conflict
  // run_ref_ambiguous (the message names up to 5 of the runs it matches, newest first, each with
  // its task's name and creation time).
  Result<std::string> ResolveRunRef(const std::string& ref, const Caller& caller = {});
  // Returns, by id, the shortest prefix of each of `runs` (runs the caller listed) of at least 8
  // characters that no other run of its project starts with, so ResolveRunRef resolves it: what
  // tables show for a run. Reads each distinct 8-character window of the project's runs once; a
  // run in a window of more than 5000 runs gets its whole id.
  Result<std::map<std::string, std::string>> ShortRunIds(const std::vector<RunRecord>& runs,
                                                         const Caller& caller = {});
  Result<PageResult<RunRecord>> ListRuns(const RunQuery& query, const PageQuery& page,
                                         const Caller& caller = {});
  // Returns events with sequence > after_sequence (>= 0), at most `limit` (1 .. kMaxPageLimit).
  Result<std::vector<EventRecord>> ListRunEvents(const std::string& run_id, int64_t after_sequence,
                                                 int limit, const Caller& caller = {});
  // Returns the run's latest attempt; NotFound attempt_not_found when it has none.
  Result<AttemptRecord> LatestAttempt(const std::string& run_id, const Caller& caller = {});

  // Approvals (DESIGN §9.1). Starting a run of a task whose revision requires approval creates
  // an approval request instead (StartedRun::approval); the caller must be a principal
  // (PermissionDenied principal_required for the system).
  // Lists the approval requests of the caller's project, newest first, optionally by status.
  Result<PageResult<ApprovalRequestRecord>> ListApprovals(const std::optional<std::string>& status,
                                                          const PageQuery& page,
                                                          const Caller& caller = {});
  Result<ApprovalView> GetApproval(const std::string& request_id, const Caller& caller = {});
  // Approves a request: the run is created in the same transaction (see ApprovalRepository).
  Result<ApproveResult> Approve(const std::string& request_id, const Caller& caller = {});
  Result<ApprovalView> Reject(const std::string& request_id, const std::string& reason,
                              const Caller& caller = {});
  // Resolves a run in recovery_required as succeeded, failed or retry (admin).
  Result<ResolveRunResult> ResolveRun(const std::string& run_id, const std::string& resolution,
                                      const std::string& reason, const Caller& caller = {});
  // Expires up to `limit` pending requests past their expiry (the sweeper).
  Result<int> ExpireApprovals(int limit);

  // Returns run counts by status and the number of enabled triggers.
  Result<StatusSummary> GetStatus(const Caller& caller = {});
  // Counts the queued runs of every project, for the queue-depth gauge of /metrics (which no
  // caller owns: it carries no project or run id).
  Result<int64_t> CountQueuedRuns();

  const ControlOptions& options() const { return options_; }
  // Governance use-cases and the authorization every method here asks.
  GovernanceService& governance() { return governance_; }
  RetentionService& retention() { return retention_; }

 private:
  // An execution revision with its verified plan.
  struct PinnedPlan {
    ExecutionRevisionRecord record;
    ExecutionPlan plan;
  };
  // Returns the digest-verified execution revision of an enabled task revision for the
  // configured executor type; empty for a disabled revision or when none exists.
  Result<std::optional<PinnedPlan>> PlanOf(const TaskRevisionRecord& revision);
  Result<std::string> ProjectId();
  // The project the caller names (the default one when it names none).
  Result<std::string> ProjectIdFor(const Caller& caller);
  // Authorizes `action` in `project_id`; a caller that may not even see the project gets
  // `not_found` (reads of one object) instead of a refusal.
  Status Allow(const Caller& caller, const std::string& project_id, Action action,
               std::string_view target, const Status& not_found, Role at_least = Role::kNone);
  // The policy fence a store command carries for the caller (none for the system).
  static std::optional<PolicyFence> FenceOf(const Caller& caller, Action action,
                                            Role at_least = Role::kNone);
  // The role that changing what runs `revision`'s task without a person's approval needs
  // (publishing a revision, creating, editing, repinning or enabling a trigger): kNone, or the
  // approvers' role when the revision asks for approval, so that the policy cannot be side-
  // stepped by someone who may not approve.
  static Result<Role> ApproverFloor(const TaskRevisionRecord& revision);
  std::string NewId();
  std::string DerivedId(std::string_view kind, const std::string& project_id,
                        const std::string& mutation_id);
  Result<std::string> MutationIdOrNew(const std::optional<std::string>& mutation_id);
  Result<PublishedTask> Publish(const std::string& project_id, const std::string& task_id,
                                std::optional<int64_t> expected_revision,
                                const std::string& mutation_id, const TaskContent& requested,
                                const Caller& caller, bool repin_triggers, bool tombstone);
  // Pins a script command of `content` to the version it names in `project_id` (the latest
  // when none): version, digest, kind, entry and interpreter. Errors: script_not_found,
  // script_version_not_found, script_digest_mismatch, script_entry_invalid,
  // script_interpreter_required.
  Status PinScript(const std::string& project_id, TaskContent& content);
  Result<TaskView> ViewOf(const TaskRevisionRecord& revision);
  // The task's live triggers, last run and next fire (the caller may read the task).
  Result<std::shared_ptr<const TaskOverview>> OverviewOf(const std::string& project_id,
                                                         const std::string& task_id);
  // The audit fact of a task or trigger write by `caller` (target_kind "task" or "trigger").
  AuditRecord DefinitionFact(const Caller& caller, std::string_view action,
                             std::string_view target_kind, const std::string& target_id,
                             const std::string& project_id, int64_t now_ms);
  Result<TriggerView> ViewOf(const TriggerHeadRecord& head, const TriggerRevisionRecord& revision);
  // Publishes `next` over revision `expected_revision` (default: `current`'s), fenced for
  // `action`, which the caller has authorized; a trigger that moved on is revision_conflict.
  // `audit_action` names the audit fact written with it (trigger.revise, trigger.enable, ...).
  Result<PublishedTrigger> PublishTriggerRevisionOf(
      const TriggerView& current, TriggerRevisionRecord next, const Caller& caller,
      std::string_view audit_action, Action action,
      std::optional<int64_t> expected_revision = std::nullopt,
      const std::string& name = "", bool tombstone = false, Role at_least = Role::kNone);
  // The approver floor of the task a trigger pins (its current revision).
  Result<Role> TriggerFloor(const TriggerView& trigger);
  Result<std::vector<int64_t>> AdmissionPreview(const TriggerView& view, int count);
  // Turns a manual run of a revision that requires approval into an approval request (one that
  // carries `retry_of` when it retries that run).
  Result<StartedRun> RequestApproval(const TaskView& task, const PinnedPlan& plan,
                                     const std::optional<std::string>& idempotency_key,
                                     int priority, const std::optional<std::string>& retry_of,
                                     const Caller& caller);
  // Returns the request, authorized for `action` in its project (NotFound when hidden).
  Result<ApprovalRequestRecord> AllowedRequest(const std::string& request_id, Action action,
                                               std::string_view target, const Caller& caller);
  static Actor ActorOf(const Caller& caller);
  Result<StartedRun> CreateManualRun(const std::string& task_id,
                                     const std::optional<std::string>& idempotency_key,
                                     int priority, const std::optional<std::string>& retry_of,
                                     const Caller& caller);

  Store& store_;
  Clock& clock_;
  RandomSource& random_;
  ControlOptions options_;
  std::mutex random_mu_;  // random sources need not be thread-safe
  std::mutex project_mu_;
  std::optional<ProjectRecord> project_;  // guarded by project_mu_
  GovernanceService governance_;
  RetentionService retention_;
};

}  // namespace ql
