#pragma once

// Repository ports: what the services and the engine need from storage. Every adapter
// (SQLite, PostgreSQL) implements these with the same observable behaviour, which the
// repository contract suite (src/ql/testing/repository_contract.h) states. Adapters map their
// driver errors to Status categories in one place; no SQL, driver code or constraint name ever
// crosses this boundary.
//
// Error conventions shared by every method:
//   InvalidArgument  the command itself is malformed (e.g. payload too large)
//   NotFound         a named project, task, trigger or run does not exist
//   Conflict         an expected version / revision / status did not hold (CAS lost)
//   Duplicate        a unique id, mutation id, idempotency key or dedupe key exists already
//   Busy             the store stayed locked past the bounded retry; try again later
//   Unavailable / OutcomeUnknown / Corrupt / Internal as in status.h
// Every `limit` (and PageRequest::limit) must be 1 .. 1000, else InvalidArgument (invalid_limit);
// a page key not issued by the same listing is InvalidArgument (invalid_page_key).

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ql/core/governance.h"
#include "ql/core/records.h"
#include "ql/core/states.h"
#include "ql/core/status.h"

namespace ql {

class ApprovalRepository;
class ArtifactRepository;
class GovernanceRepository;
class RetentionRepository;
class SecretRepository;
class NotificationRepository;

// The policy fence of one store command (DESIGN §9): inside the transaction that writes, the
// store re-reads the principal (it must be active), the command's project (active) and the
// principal's current bindings, and refuses with PermissionDenied (`permission_denied`,
// `principal_disabled`, `principal_not_found`) or Conflict `project_archived`, writing
// nothing. A command without a fence is the system's own (scheduler, recovery, bootstrap).
struct PolicyFence {
  std::string principal_id;
  Role required = Role::kOwner;  // the least effective role in the command's project
};

// ---------------------------------------------------------------------------------------------
// Projects

class ProjectRepository {
 public:
  virtual ~ProjectRepository() = default;
  // Returns the project with `slug`, creating it (active) when absent. Idempotent.
  virtual Result<ProjectRecord> EnsureProject(const std::string& id_if_new, const std::string& slug,
                                              const std::string& name, int64_t now_ms) = 0;
  // Returns the project or NotFound.
  virtual Result<ProjectRecord> GetProject(const std::string& project_id) = 0;
  virtual Result<ProjectRecord> GetProjectBySlug(const std::string& slug) = 0;
  virtual Result<std::vector<ProjectRecord>> ListProjects() = 0;
};

// ---------------------------------------------------------------------------------------------
// Tasks and triggers (management publisher + read-only source)

struct PublishTaskCommand {
  std::string project_id;
  std::string task_id;                       // new id when expected_revision is empty
  std::optional<int64_t> expected_revision;  // empty = create revision 1
  std::string mutation_id;                   // globally unique per write
  TaskRevisionRecord revision;  // content fields + digest; ids/revision filled by store
  // The plans to materialise with the revision (one per executor type); empty when disabled.
  std::vector<ExecutionRevisionRecord> executions;
  std::optional<PolicyFence> fence;
  int64_t now_ms = 0;
  // In the same transaction, publish for every live trigger of the task the next revision
  // pinning this one (keeping the trigger's schedule cursor, so no occurrence is lost). An
  // enabled trigger is repinned only when this revision is enabled.
  bool repin_triggers = false;
  // Delete the task: this (disabled) revision is its last, the head becomes a tombstone, and
  // every live trigger of the task is disabled and tombstoned in the same transaction.
  bool tombstone = false;
  // Written in the same transaction as the revision; not written again when the write is a
  // replay of its mutation id.
  std::optional<AuditRecord> audit;
};

struct PublishTaskResult {
  TaskRevisionRecord revision;
  bool replayed = false;  // the mutation id had been applied with identical content
  // The triggers given a new revision in the same transaction (repin or tombstone), by id.
  std::vector<std::string> trigger_ids;
};

struct PublishTriggerCommand {
  std::string project_id;
  std::string trigger_id;
  std::optional<int64_t> expected_revision;
  std::string mutation_id;
  TriggerRevisionRecord revision;  // content fields (pinned task revision + digest, cron spec)
  std::optional<PolicyFence> fence;
  int64_t now_ms = 0;
  // The head's name: required when creating; on an update, empty keeps the current name.
  std::string name;
  // Delete the trigger: this (disabled) revision is its last and the head becomes a tombstone.
  bool tombstone = false;
  // Written in the same transaction as the revision; not written again for a replay.
  std::optional<AuditRecord> audit;
};

struct PublishTriggerResult {
  TriggerRevisionRecord revision;
  bool replayed = false;
};

// Keyset page request: items after `after_key` (opaque, from the previous page), at most `limit`.
struct PageRequest {
  std::optional<std::string> after_key;
  int limit = 50;
};

template <typename T>
struct Page {
  std::vector<T> items;
  std::optional<std::string> next_key;  // present when more items may follow
};

class DefinitionRepository {
 public:
  virtual ~DefinitionRepository() = default;

  // Appends a task revision and, in the same transaction, its execution revisions.
  // Replaying the same mutation id with the same task, expected revision and digest returns the
  // stored revision with replayed=true; any drift is Conflict (reason mutation_id_reused).
  // Wrong expected revision → Conflict (revision_conflict); creating an existing task id →
  // Duplicate; updating a missing task → NotFound; inactive project → Conflict.
  virtual Result<PublishTaskResult> PublishTaskRevision(const PublishTaskCommand& cmd) = 0;

  // Appends a trigger revision and resets its schedule row in the same transaction (cursor
  // empty, state_version bumped, published_at = now). An enabled revision must pin the task's
  // current, enabled revision and its digest, else Conflict (trigger_pin_stale). A trigger is
  // never rebound to another task: Conflict (trigger_task_immutable). Replays as for tasks.
  virtual Result<PublishTriggerResult> PublishTriggerRevision(const PublishTriggerCommand& cmd) = 0;

  virtual Result<TaskHeadRecord> GetTaskHead(const std::string& task_id) = 0;
  // The live (not deleted) task or trigger of `project_id` named `name`, if any.
  virtual Result<std::optional<TaskHeadRecord>> FindTaskByName(const std::string& project_id,
                                                               const std::string& name) = 0;
  virtual Result<std::optional<TriggerHeadRecord>> FindTriggerByName(
      const std::string& project_id, const std::string& name) = 0;
  // Returns one revision of a task; NotFound when absent.
  virtual Result<TaskRevisionRecord> GetTaskRevision(const std::string& task_id,
                                                     int64_t revision) = 0;
  // Lists the current revisions of a project's live task heads ordered by task id.
  virtual Result<Page<TaskRevisionRecord>> ListTasks(const std::string& project_id,
                                                     const PageRequest& page) = 0;
  // Lists every revision of a task, newest first.
  virtual Result<std::vector<TaskRevisionRecord>> ListTaskRevisions(const std::string& task_id) = 0;
  virtual Result<ExecutionRevisionRecord> GetExecutionRevision(const std::string& id) = 0;
  // Returns the execution revision of (task, revision, executor type); NotFound when absent.
  virtual Result<ExecutionRevisionRecord> FindExecutionRevision(
      const std::string& task_id, int64_t task_revision, const std::string& executor_type) = 0;

  virtual Result<TriggerHeadRecord> GetTriggerHead(const std::string& trigger_id) = 0;
  virtual Result<TriggerRevisionRecord> GetTriggerRevision(const std::string& trigger_id,
                                                           int64_t revision) = 0;
  // Lists current revisions of a project's live triggers (optionally of one task) ordered by
  // trigger id.
  virtual Result<Page<TriggerRevisionRecord>> ListTriggers(
      const std::string& project_id, const std::optional<std::string>& task_id,
      const PageRequest& page) = 0;
  virtual Result<ScheduleRecord> GetSchedule(const std::string& trigger_id) = 0;
  // Counts the enabled triggers of active projects (of `project_id` only, when given).
  virtual Result<int64_t> CountEnabledTriggers(const std::optional<std::string>& project_id) = 0;
  // Counts the enabled triggers of active projects (of `project_id` only, when given) whose pin
  // is stale (the task was republished or disabled since): they admit nothing until repinned.
  virtual Result<int64_t> CountStaleTriggers(const std::optional<std::string>& project_id) = 0;
};

// ---------------------------------------------------------------------------------------------
// Schedules (local scheduler)

// A new run with its first claimed attempt, created atomically with its events.
struct NewRun {
  std::string run_id;
  std::string attempt_id;
  std::string project_id;
  std::string task_id;
  int64_t task_revision = 0;
  std::string task_digest;
  std::string execution_revision_id;
  std::string executor_type;  // local_process | remote_worker
  std::optional<std::string> trigger_id;
  std::optional<int64_t> trigger_revision;
  std::optional<int64_t> scheduled_for_ms;
  // A cron run of a trigger with jitter (core/jitter.h): the run's queued_at is the later of
  // this and now_ms, and no dispatcher takes a run before its queued_at.
  std::optional<int64_t> release_at_ms;
  std::string trigger_type;  // cron | manual | api
  int priority = 0;
  std::optional<std::string> idempotency_key;
  std::optional<std::string> retry_of_run_id;
  RetryPolicy retry_policy;
  std::string actor_type = "scheduler";
  // Manual runs: the principal starting it (CreateRun checks it in its transaction).
  std::optional<PolicyFence> fence;
  int64_t now_ms = 0;
};

// The outcome of one decision applied to one schedule row.
struct ScheduleAdvance {
  std::string trigger_id;
  // Everything the decision was based on; any drift at commit time → raced, nothing written.
  int64_t expected_trigger_revision = 0;
  int64_t expected_state_version = 0;
  std::optional<int64_t> expected_next_fire_at_ms;
  int64_t expected_task_revision = 0;
  std::string expected_task_digest;
  // What to write.
  std::optional<int64_t> new_next_fire_at_ms;  // empty with exhausted=true: no fire time left
  bool exhausted = false;
  std::optional<NewRun> run;  // admitted occurrence (cron run + claimed attempt + 2 events)
  int64_t now_ms = 0;
};

// What one schedule decision became. kApplied: written. kRaced: nothing written (the fence or a
// definition moved). kAlreadyAdmitted (cluster admissions only): the occurrence's idempotency
// key was taken already, so no run was written, but the cursor moved past the occurrence under
// the full fence and the claim was cleared; without it such a cursor would stall its trigger.
// kSkipped: written, but the occurrence became a run in state skipped (the trigger's overlap
// policy `forbid` or the task's concurrency limit, DESIGN §11) instead of a queued run.
enum class AdvanceOutcome { kApplied, kRaced, kAlreadyAdmitted, kSkipped };

class ScheduleRepository {
 public:
  virtual ~ScheduleRepository() = default;
  // Returns at most `limit` eligible rows (active project, current enabled trigger revision
  // pinning the task's current enabled revision, not exhausted) that need initialisation or are
  // due at `now_ms`, ordered by next_fire_at_ms with empty cursors first, then project, trigger.
  virtual Result<std::vector<DueSchedule>> ListDueSchedules(int64_t now_ms, int limit) = 0;
  // Returns the earliest cursor among eligible rows (an uninitialised row counts as 0), or
  // empty when there is none.
  virtual Result<std::optional<int64_t>> EarliestDueAt() = 0;
  // Applies one decision atomically: re-verifies project, trigger head and revision, schedule
  // version and cursor, task head, revision and digest, and the execution revision; on any drift
  // returns kRaced and writes nothing. Otherwise inserts the run, its claimed attempt, its retry
  // policy and events run.created + run.queued, and advances the cursor with state_version + 1.
  // A second admission of the same idempotency key is impossible (unique key): when a run holds
  // the occurrence's key already, no run is written, the cursor advances as decided and the
  // outcome is kAlreadyAdmitted, so a cursor left on an admitted occurrence does not stall.
  // The trigger revision's overlap policy and the task revision's concurrency limit are decided
  // here too, against the unfinished runs (any non-terminal state) as they stand: under
  // `forbid` while a run of the trigger is unfinished, or when the task has as many unfinished
  // runs as its limit allows, the occurrence is written as a run in state skipped (error_code
  // overlap / concurrency, events run.created + run.skipped, no attempt) and the outcome is
  // kSkipped; under `replace` the trigger's unfinished runs get a cancel intent with reason
  // "replaced" (those not started are cancelled at once) before the new run is queued.
  // The admitted run must be the cron occurrence at expected_next_fire_at_ms of the expected
  // trigger and task revisions, keyed CronIdempotencyKey(...), else InvalidArgument; a trigger
  // without a schedule row is NotFound.
  // An admission's new cursor is recomputed in the transaction from the stored trigger
  // revision (NextFireGate, with now_ms as the observation time): the next fire time after the
  // occurrence, or under fire_once the next after now_ms. Any other cursor (exhausted or not)
  // is InvalidArgument `next_fire_mismatch`, nothing is written, and the refusal is counted
  // (TakeNextFireMismatches). A raced advance is kRaced before this check.
  virtual Result<AdvanceOutcome> ApplyScheduleAdvance(const ScheduleAdvance& advance) = 0;
  // Returns the admissions refused with `next_fire_mismatch` since the last call and resets
  // the count.
  virtual int64_t TakeNextFireMismatches() { return 0; }
};

// ---------------------------------------------------------------------------------------------
// Cluster schedules (row-lease scheduler of DESIGN §5.2)
//
// Replicas share schedule rows through short claims. Every time here comes from the database
// clock: claim commands carry owner, token and lease length only, never a node's time.

struct ClaimRequest {
  std::string owner;          // the replica, 1..128 bytes
  std::string token;          // canonical UUID chosen by the replica for this round
  int limit = 16;             // 1..256 rows
  int64_t lease_ms = 30'000;  // 1 s .. 60 s
};

// One claimed row: the schedule as it stands after the claim (state_version bumped), the
// trigger revision it follows, the pinned execution revision of the claim's executor type, and
// the four-part fence with the database-clock acquisition time.
struct ScheduleClaim {
  DueSchedule due;
  std::string execution_revision_id;  // "" when the task revision has none (admits nothing)
  std::string owner;
  std::string token;
  int64_t claim_version = 0;
  int64_t acquired_at_ms = 0;  // the database clock reading of the claim statement
  int64_t expires_at_ms = 0;
  // Where the store wrote the claimed row version (PostgreSQL: its ctid). A hint that lets the
  // admission reach the row without an index; "" or a stale address only costs a lookup by key.
  std::string row_address;
};

// What to commit for one claim: the decision taken with acquired_at_ms as "now".
struct ClaimDecision {
  ScheduleClaim claim;
  std::optional<int64_t> new_next_fire_at_ms;  // stored cursor (kExhaustedCursorMs when none)
  bool exhausted = false;
  std::optional<NewRun> run;  // a remote_worker cron run; its timestamps come from the database
};

// Whole-transaction reruns of admission transactions (serialization failures, deadlocks).
struct AdmissionRetryStats {
  int64_t retries = 0;    // reruns
  int64_t exhausted = 0;  // admissions that failed because their reruns ran out
};

// What became of one decision of a committed batch.
struct ClaimCommitResult {
  AdvanceOutcome outcome = AdvanceOutcome::kRaced;
  Status error;  // not ok: this decision was not written because of it (e.g. Corrupt)
};

class ClusterScheduleRepository {
 public:
  virtual ~ClusterScheduleRepository() = default;
  // Claims at most `limit` rows in one statement that reads the database clock once: rows of
  // active projects whose enabled trigger revision pins the task's current enabled revision,
  // due or needing initialisation, with no live claim (none, or expired by the database clock),
  // in order next_fire_at_ms NULLS FIRST, project_id, trigger_id, skipping rows locked by
  // others. Each row gets owner, token, claim_version + 1, expiry = now + lease, state_version
  // + 1 and updated_at = now; the claim commits at once. InvalidArgument for a bad request.
  virtual Result<std::vector<ScheduleClaim>> ClaimDueSchedules(const ClaimRequest& request) = 0;
  // Commits one decision in one transaction that re-locks and re-verifies project, trigger and
  // task revisions and digests, the schedule's revision, state and cursor, the full claim fence
  // against a fresh database-clock reading (a reading before the acquisition time is Corrupt
  // `clock_regression`), and the digest of the pinned execution revision; then writes the
  // queued run, its claimed attempt, retry policy and events run.created + run.queued, and
  // advances the schedule under the full fence, clearing the claim. Any drift, a lost fence, a
  // claim that expired (by a database-clock reading at lock time, and again by one taken right
  // before COMMIT) → kRaced with nothing written. A new cursor that does not move forward is
  // InvalidArgument `cursor_not_advancing`. A trigger revision whose stored content does not
  // hash to its digest is Corrupt `trigger_digest_mismatch`. An admission's new cursor is
  // recomputed from the stored trigger revision with the claim's stored acquisition time as the
  // observation time (as ScheduleRepository::ApplyScheduleAdvance does): any other cursor is
  // InvalidArgument `next_fire_mismatch`, nothing is written for it, its claim stays until it
  // expires, and the refusal is counted (TakeNextFireMismatches). An occurrence whose
  // idempotency key is taken already → kAlreadyAdmitted: the cursor moves on, the claim is
  // cleared, no run.
  virtual Result<AdvanceOutcome> CommitClaimDecision(const ClaimDecision& decision) = 0;
  // Commits several decisions of one claim batch in one transaction with exactly the checks of
  // CommitClaimDecision, row by row: a decision that raced or whose definitions are corrupt is
  // left out (nothing written for it) while the others commit. Returns one result per decision
  // in order. A claim found expired by the reading right before COMMIT rolls the whole batch
  // back: every decision that would have been written comes back kRaced. A failure of the
  // transaction itself (e.g. a key taken by another writer) is returned as a whole and nothing
  // is written; the caller may then commit one by one.
  virtual Result<std::vector<ClaimCommitResult>> CommitClaimDecisions(
      const std::vector<ClaimDecision>& decisions) = 0;
  // Returns how long until the earliest eligible cursor by the database clock (0 when one is
  // due or needs initialisation; may be negative), or empty when no row is eligible.
  virtual Result<std::optional<int64_t>> MsUntilNextDue() = 0;
  // Returns the whole-transaction reruns of admissions since the last call and resets them.
  virtual AdmissionRetryStats TakeAdmissionRetryStats() { return {}; }
  // Returns the admissions refused with `next_fire_mismatch` since the last call (each counted
  // once, whether it was committed alone or in a batch) and resets the count.
  virtual int64_t TakeNextFireMismatches() { return 0; }
};

// Recovery of the cluster (DESIGN §5.2): what a replica inspects at startup and periodically.
struct RecoveryCandidate {
  std::string run_id;
  std::string attempt_id;  // the run's latest attempt
  std::string run_status;
  std::string attempt_status;
  bool lease_live = false;     // a granted dispatch lease not expired by the database clock
  bool never_started = false;  // the attempt never reported starting (no start, no callback)
};

// Which runs a recovery cycle inspects.
enum class RecoveryScope {
  kAll,          // every non-terminal run (startup: any drift is found before admission)
  kBeyondQueue,  // created, dispatching, running, lost: the runs a cycle may have to settle.
                 // Queued runs are the pull's business (for them a cycle only counts), so a
                 // deep queue does not make every periodic cycle walk it.
};

class ClusterRecoveryRepository {
 public:
  virtual ~ClusterRecoveryRepository() = default;
  // Lists at most `limit` non-terminal runs (created, queued, dispatching, running, lost) whose
  // latest attempt is a remote_worker attempt, in run id order after `after_run_id`, except a
  // pristine admission: a queued run without cancel intent, with queued_at, whose latest attempt
  // is a claimed remote_worker attempt with every worker, session, lease, offer, callback,
  // start, result and error field still at its admission value and no lease row. Any drift
  // makes a run a candidate (fail closed). kBeyondQueue leaves queued runs out.
  virtual Result<std::vector<RecoveryCandidate>> ListRecoveryCandidates(
      const std::string& after_run_id, int limit, RecoveryScope scope = RecoveryScope::kAll) = 0;
};

// ---------------------------------------------------------------------------------------------
// Runs, attempts, events

struct NewEvent {
  std::string type;
  std::string actor_type;
  std::optional<std::string> attempt_id;
  std::optional<std::string> dedupe_key;
  std::string payload_json = "{}";
};

// The full fence of a remote worker's run lease (DESIGN §6). A transition carrying one applies
// only while the lease holds: it exists under this offer id for the transition's attempt, is
// granted, belongs to this session and generation, the session is the worker's and not fenced, the
// token digest is equal and the lease has not expired by the store's clock. Errors: NotFound
// `lease_not_found`, Conflict `lease_fenced` (session, generation, token, attempt or a released
// lease), Conflict `lease_expired`.
struct LeaseFence {
  std::string worker_id;  // the credential the caller authenticated with
  std::string offer_id;
  std::string session_id;
  int64_t generation = 0;
  std::string token_digest;  // SHA-256 hex of the worker's lease token
};

// One state transition of a run (and optionally of one of its attempts), applied as one
// transaction: the move must be legal (core/states.h), the run CASes on expected_version
// (version + 1), the attempt CASes on its expected status, events are appended with consecutive
// sequence numbers. Fields set here overwrite the stored ones.
struct RunTransitionCommand {
  std::string run_id;
  int64_t expected_version = 0;
  std::optional<std::string> run_to;  // RunStatus wire name; empty = keep

  std::optional<std::string> attempt_id;
  std::optional<std::string> expected_attempt_status;
  std::optional<std::string> attempt_to;

  // Run field updates.
  std::optional<int64_t> started_at_ms;
  std::optional<int64_t> finished_at_ms;
  std::optional<int64_t> retry_at_ms;
  std::optional<int> exit_code;
  std::optional<std::string> error_code;
  std::optional<std::string> error_summary;
  // Attempt field updates.
  std::optional<int64_t> pid;
  std::optional<int64_t> process_start_ticks;
  std::optional<std::string> log_path;
  std::optional<int64_t> attempt_started_at_ms;
  std::optional<int64_t> attempt_finished_at_ms;
  std::optional<int> attempt_exit_code;
  std::optional<std::string> attempt_error_code;
  std::optional<std::string> attempt_error_summary;

  // A new claimed attempt N+1 (automatic retry: retry_wait → queued).
  std::optional<std::string> new_attempt_id;

  // Set by remote-worker calls: the transition holds only under this lease (needs attempt_id;
  // stores without remote workers answer InvalidArgument `lease_unsupported`). Whenever an
  // attempt moves to a terminal status its granted lease is released, fenced or not.
  std::optional<LeaseFence> lease;

  std::vector<NewEvent> events;
  int64_t now_ms = 0;
};

struct RunFilter {
  std::optional<std::string> project_id;
  std::optional<std::string> task_id;
  std::optional<std::string> trigger_id;
  std::optional<std::string> status;
  // Runs created at or after `created_from_ms` and before `created_before_ms`.
  std::optional<int64_t> created_from_ms;
  std::optional<int64_t> created_before_ms;
  // Runs whose id lies in [first, last] (both canonical ids): the runs an id prefix names,
  // first and last being the prefix completed with 0s and with fs.
  std::optional<std::pair<std::string, std::string>> id_range;
};

class RunRepository {
 public:
  virtual ~RunRepository() = default;
  // Creates a queued run with its claimed attempt, retry policy and events run.created +
  // run.queued (manual / api runs). The task revision must be the current enabled one and the
  // execution revision must exist: Conflict otherwise. Duplicate when the idempotency key (per
  // project) or the run id exists.
  virtual Result<RunRecord> CreateRun(const NewRun& run) = 0;
  virtual Result<RunRecord> GetRun(const std::string& run_id) = 0;
  virtual Result<RunRecord> FindRunByIdempotencyKey(const std::string& project_id,
                                                    const std::string& key) = 0;
  // Lists runs newest first (created_at desc, id desc) with keyset paging.
  virtual Result<Page<RunRecord>> ListRuns(const RunFilter& filter, const PageRequest& page) = 0;
  // Lists a run's attempts in attempt order.
  virtual Result<std::vector<AttemptRecord>> ListAttempts(const std::string& run_id) = 0;
  // The run and its attempts (in attempt order) from one read: GetRun and ListAttempts without
  // a change in between. NotFound `run_not_found`.
  virtual Result<std::pair<RunRecord, std::vector<AttemptRecord>>> GetRunWithAttempts(
      const std::string& run_id) = 0;
  // Lists events with sequence > after_sequence in order, at most `limit`.
  virtual Result<std::vector<EventRecord>> ListEvents(const std::string& run_id,
                                                      int64_t after_sequence, int limit) = 0;

  // Applies a transition (see RunTransitionCommand). Illegal move or lost CAS → Conflict; a
  // transition into succeeded / failed / timed_out / retry_wait / queued after a committed cancel
  // intent → Conflict (cancel_requested): the cancel wins, and so does it over an attempt moving
  // into succeeded / failed / timed_out. A payload over 16 KiB → InvalidArgument. Also: a terminal
  // run never changes (Conflict run_terminal); retry_wait needs retry_at_ms; new_attempt_id needs
  // run_to queued, a terminal latest attempt and an attempt left under max_attempts (Conflict
  // retry_attempts_exhausted). Entering queued stamps queued_at = now; entering a terminal state
  // stamps finished_at = now unless the command sets it (for the attempt likewise).
  virtual Result<RunRecord> ApplyTransition(const RunTransitionCommand& transition) = 0;
  // Applies transitions of one run in order in one transaction, each checked as by
  // ApplyTransition against the state the one before it left (so each names the version that
  // one produced); all or none. Returns the run as the last left it.
  virtual Result<RunRecord> ApplyTransitions(
      const std::vector<RunTransitionCommand>& transitions) = 0;

  // Appends one event without changing state (e.g. attempt.log_truncated). A dedupe key seen
  // before on this run → Duplicate. Events are immutable once written.
  virtual Result<EventRecord> AppendEvent(const std::string& run_id, const NewEvent& event,
                                          int64_t now_ms) = 0;

  // Records a cancel intent (first one wins; later ones are no-ops returning the run) and
  // appends run.cancel_requested. Runs that have not started (created, queued, retry_wait) move
  // to cancelled in the same transaction with their claimed attempt. Terminal runs → Conflict.
  // With a fence, the principal is checked in the run's project first (a user's cancel);
  // without one it is the system's (e.g. cancelling the queue of an archived project).
  virtual Result<RunRecord> RequestCancel(const std::string& run_id, const std::string& reason,
                                          std::string actor_type, int64_t now_ms,
                                          const std::optional<PolicyFence>& fence = {}) = 0;

  // Lists queued runs whose latest attempt is a claimed attempt of `executor_type`, that carry
  // no cancel intent and whose queued time is not after `now_ms` (a jittered cron run waits for
  // its release time), by priority (high first) then queued time, at most `limit`.
  virtual Result<std::vector<RunRecord>> ListDispatchable(const std::string& executor_type,
                                                          int limit, int64_t now_ms) = 0;
  // Lists runs in dispatching, running or lost (what startup reconciliation must inspect).
  virtual Result<std::vector<RunRecord>> ListActive() = 0;
  // Lists retry_wait runs whose retry_at_ms ≤ now.
  virtual Result<std::vector<RunRecord>> ListRetryDue(int64_t now_ms, int limit) = 0;
  // Counts runs by status (of `project_id` only, when given).
  virtual Result<std::vector<std::pair<std::string, int64_t>>> CountRunsByStatus(
      const std::optional<std::string>& project_id) = 0;
  // Counts the runs in `status` alone: a walk of that status's range of the runs_by_status
  // index, so its cost follows the number of such runs, not of all runs (read at every scrape).
  virtual Result<int64_t> CountRunsInStatus(RunStatus status) = 0;
};

// Everything a resident process needs, from one store.
class Store {
 public:
  virtual ~Store() = default;
  virtual ProjectRepository& projects() = 0;
  virtual DefinitionRepository& definitions() = 0;
  virtual ScheduleRepository& schedules() = 0;
  virtual RunRepository& runs() = 0;
  virtual GovernanceRepository& governance() = 0;
  virtual ApprovalRepository& approvals() = 0;
  // Retention settings and the purge of finished runs (core/retention.h).
  virtual RetentionRepository& retention() = 0;
  // Secrets (secret_store.h): sealed versions only.
  virtual SecretRepository& secrets() = 0;
  // Notification channels, rules and the outbox (notification_store.h).
  virtual NotificationRepository& notifications() = 0;
  // Blobs, chunks and scripts (artifact_store.h).
  virtual ArtifactRepository& artifacts() = 0;
};

}  // namespace ql
