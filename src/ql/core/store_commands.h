#pragma once

// The rules every store applies to a command before it opens a transaction, the reading of the
// run and attempt statuses it has stored, and the opaque page keys of its listings. SqliteStore
// and PostgresStore both call these, so the two profiles accept and refuse the same commands with
// the same reasons and messages, and issue byte-identical page keys. Every error is
// InvalidArgument unless a declaration says otherwise.

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ql/core/ports.h"
#include "ql/core/records.h"
#include "ql/core/states.h"
#include "ql/core/status.h"

namespace ql {

// Largest page or batch any listing returns at once.
inline constexpr int kMaxListLimit = 1000;
// The stored status of a project that accepts new definitions and runs.
inline constexpr std::string_view kProjectActive = "active";

// Returns the concatenation of `parts`, in order.
std::string Cat(std::initializer_list<std::string_view> parts);

// Returns `value` quoted and shortened for an error message (QuoteForMessage with its default
// length).
std::string Quote(std::string_view value);

// ---------------------------------------------------------------------------------------------
// Validation of commands

// Returns ok unless `value` is empty: `missing_field`, naming `field`.
Status RequireText(std::string_view field, std::string_view value);

// Returns ok when `value` is 64 lowercase hex digits; otherwise `invalid_digest`.
Status RequireDigest(std::string_view field, std::string_view value);

// Returns ok when `revision` is 1 .. kMaxTaskRevision; otherwise `invalid_revision`.
Status RequireRevision(std::string_view field, int64_t revision);

// Returns ok when `limit` is 1 .. kMaxListLimit; otherwise `invalid_limit`.
Status RequireLimit(std::string_view field, int limit);

// Returns ok when `text` is exactly the canonical encoding of a JSON document (of an object when
// `object` is set), so every store returns the bytes the digests were computed over. Errors:
// `invalid_json` (not strict JSON, not an object when one is required, or not encodable),
// `json_not_canonical` (valid but not byte-identical to its canonical form).
Status RequireCanonicalJson(std::string_view field, std::string_view text, bool object);

// Returns the canonical encoding of the payload of an event of type `type`, which must be a JSON
// object of at most kMaxEventPayloadBytes bytes once canonical. Unlike RequireCanonicalJson the
// input need not be canonical already. Errors: `event_payload_invalid` (not strict JSON or not an
// object), `event_payload_too_large`.
Result<std::string> CanonicalEventPayload(std::string_view type, std::string_view payload);

// Returns ok when `value` is local_process or remote_worker; otherwise `invalid_executor_type`.
Status RequireExecutorType(std::string_view value);

// Returns ok when `value` is scheduler, dispatcher, executor, user, worker or recovery;
// otherwise `invalid_actor_type`.
Status RequireActorType(std::string_view value);

// Returns ok when `policy` has 1 .. 16 attempts, a known safety (unknown, idempotent,
// deduplicated) and 0 <= backoff base <= backoff max <= 24 h; otherwise `invalid_retry_policy`.
Status RequireRetryPolicy(const RetryPolicy& policy);

// An event of a command, checked, with its payload in canonical form.
struct PreparedEvent {
  const NewEvent* event;  // points into the vector given to PrepareEvents
  std::string payload;    // canonical
};

// Checks the events of one transition, in order, and returns them with canonical payloads. Each
// needs a type (`missing_field`), a known actor type, a canonical attempt id when it names one
// (`invalid_id`), a non-empty dedupe key when it has one, and a payload CanonicalEventPayload
// accepts. Returns Duplicate `dedupe_key_duplicate` when two events carry the same dedupe key.
// The result points into `events`, which must outlive it.
Result<std::vector<PreparedEvent>> PrepareEvents(const std::vector<NewEvent>& events);

// Checks a new run before it is stored: canonical ids (`invalid_id`), revisions, the task
// digest, a non-empty execution revision id, executor, trigger (`invalid_trigger_type`) and
// actor types, a non-empty idempotency key when there is one, the retry policy, and
// `invalid_id` when run_id equals attempt_id.
Status ValidateNewRun(const NewRun& run);

// Checks, inside an admission transaction, that the release time of an admitted cron run is
// exactly its occurrence plus the jitter offset of the stored trigger revision (`jitter_ms`;
// no release time when it is 0): InvalidArgument `invalid_schedule_advance` otherwise.
Status RequireJitterRelease(const NewRun& run, int64_t jitter_ms);

// Checks a task publish before it is stored: canonical ids, a mutation id, an expected
// revision below the last one, kind, canonical spec, labels and approval policy, the content
// digest, and each execution revision (known and unique executor type, plan digest, pinned to
// the revision's digest, id `ExecutionRevisionId(new revision, plan digest)`, canonical plan); a
// disabled revision has none (`execution_for_disabled_revision`).
Status ValidatePublishTask(const PublishTaskCommand& cmd);

// Checks a trigger publish before it is stored: canonical ids, a mutation id, an expected
// revision below the last one, the pinned task id, revision and digest, a non-empty expression
// and zone, misfire skip | fire_once (`invalid_misfire_policy`), the content digest, a name
// when creating, and a tombstone only as a disabled revision of an existing trigger
// (`invalid_tombstone`; the same rule applies to tasks in ValidatePublishTask).
Status ValidatePublishTrigger(const PublishTriggerCommand& cmd);

// The revision a store writes for a live trigger of a task published with repin_triggers or
// tombstone, in the same transaction: `current` pinning `task_revision`/`task_digest` with
// `enabled`, numbered next, its mutation id derived from the task publish's (so a replay of
// that publish finds it), created at `now_ms`, with its content digest.
TriggerRevisionRecord DerivedTriggerRevision(const TriggerRevisionRecord& current,
                                             int64_t task_revision, const std::string& task_digest,
                                             bool enabled, const std::string& task_mutation_id,
                                             int64_t now_ms);

// What a task publish `cmd`, which stored `task`, does to one live trigger of the task at its
// current revision `trigger`: with tombstone, its last revision (disabled, pin kept); with
// repin_triggers, its revision pinning `task` (none for an enabled trigger when `task` is
// disabled: that one goes stale); otherwise none.
std::optional<TriggerRevisionRecord> TriggerRevisionForTaskPublish(
    const PublishTaskCommand& cmd, const TaskRevisionRecord& task,
    const TriggerRevisionRecord& trigger);

// ---------------------------------------------------------------------------------------------
// Stored state

// Returns the status a stored run holds, or Corrupt `stored_status_invalid` for an unknown name.
Result<RunStatus> StoredRunStatus(const RunRecord& run);

// Returns the status a stored attempt holds, or Corrupt `stored_status_invalid` for an unknown
// name.
Result<AttemptStatus> StoredAttemptStatus(const AttemptRecord& attempt);

// Returns true when a run with a cancel request may not move to `to`: it may still be
// dispatched, run or be lost, but it stops only as cancelled, so it neither succeeds, fails nor
// times out and is never queued again (queued, retry_wait).
bool IsCancelBlocked(RunStatus to);

// Returns true when an attempt of a run with a cancel request may not move to `to`: succeeded,
// failed or timed_out.
bool IsCancelBlocked(AttemptStatus to);

// ---------------------------------------------------------------------------------------------
// Run transitions: the rules of RunRepository::ApplyTransition, decided here once; the stores
// only read and write the rows.

// A RunTransitionCommand whose fields were checked by CheckTransitionCommand.
struct CheckedTransition {
  std::optional<RunStatus> run_to;
  std::optional<AttemptStatus> attempt_to;
  std::optional<AttemptStatus> expected_attempt;
  bool attempt_fields = false;  // the command updates an attempt field
  std::vector<PreparedEvent> events;
};

// Checks a transition before any row is read: status names (`invalid_status`), attempt_id with
// any attempt change or lease (`attempt_id_required`), ids, expected_attempt_status with an
// attempt move (`expected_attempt_status_required`), a new attempt only with a move back to
// queued (`invalid_transition`), retry_at_ms with retry_wait (`retry_at_required`), the events.
Result<CheckedTransition> CheckTransitionCommand(const RunTransitionCommand& t);

// Checks a sequence for ApplyTransitions: each command as above, at least one, all of one run
// (`invalid_transition`).
Result<std::vector<CheckedTransition>> CheckTransitions(
    const std::vector<RunTransitionCommand>& transitions);

// The run-row update a transition decided.
struct RunMove {
  RunStatus from;
  RunStatus next;
  std::optional<int64_t> queued_at_ms;    // set when the run moves to queued
  std::optional<int64_t> finished_at_ms;  // the command's, or now when the run ends
  Status on_miss;                         // the version conflict the compare-and-set answers
};

// Decides whether stored `run` takes transition `t` inside the transaction: the expected
// version (`version_conflict`), a legal move (CheckRunTransition), a cancel request blocking it
// (`cancel_requested`), or no change at all of a finished run (`run_terminal`).
Result<RunMove> DecideRunMove(const RunRecord& run, const RunTransitionCommand& t,
                              const CheckedTransition& checked);

// The attempt-row update a transition decided.
struct AttemptMove {
  AttemptStatus current;
  AttemptStatus next;
  std::optional<int64_t> finished_at_ms;  // the command's, or now when the attempt ends
  Status on_miss;                         // the status conflict the compare-and-set answers
};

// Decides the named attempt's part of transition `t` of `run` (`attempt`: the row of
// t.attempt_id, nullopt when there is none): the attempt must belong to the run
// (`attempt_not_found`), hold the expected status (`attempt_status_conflict`), move legally
// (CheckAttemptTransition), not be blocked by a cancel request (`cancel_requested`), and a
// finished attempt takes no field update (`attempt_terminal`). Returns nullopt when the attempt
// row does not change.
Result<std::optional<AttemptMove>> DecideAttemptMove(const RunRecord& run,
                                                     const std::optional<AttemptRecord>& attempt,
                                                     const RunTransitionCommand& t,
                                                     const CheckedTransition& checked);

// Decides whether a new attempt may follow `latest`, the run's highest attempt: it must exist
// (Corrupt `run_without_attempt`), be finished (`attempt_not_terminal`) and the retry policy
// must allow one more (`retry_attempts_exhausted`). Returns the new attempt's number.
Result<int> DecideNewAttempt(const RunRecord& run, const std::optional<AttemptRecord>& latest);

// ---------------------------------------------------------------------------------------------
// Page keys: opaque keyset positions, unpadded base64url of "<listing>:<position>". A key is
// accepted only by the listing that issued it.

// Returns `in` in unpadded base64url (RFC 4648 §5).
std::string Base64UrlEncode(std::string_view in);

// Returns the bytes of unpadded base64url `in`, or nullopt when it holds a character outside the
// alphabet, padding, a dangling character or non-zero trailing bits.
std::optional<std::string> Base64UrlDecode(std::string_view in);

// Returns the InvalidArgument `invalid_page_key` for a key that `listing` did not issue.
Status InvalidPageKey(std::string_view listing);

// Returns the page key of listing `listing` positioned after the row with id `id`.
std::string EncodeIdKey(std::string_view listing, std::string_view id);

// Returns the id a key from EncodeIdKey(`listing`, id) holds; `invalid_page_key` for any other
// key, including one of another listing or one whose id is not a canonical UUID.
Result<std::string> DecodeIdKey(std::string_view listing, std::string_view key);

// A position in the run listing, which is ordered by (created_at_ms, id).
struct RunPosition {
  int64_t created_at_ms = 0;
  std::string id;
};

// Returns the key of the run listing positioned after `run`.
std::string EncodeRunKey(const RunRecord& run);

// Returns the position an EncodeRunKey key holds; `invalid_page_key` ("runs") for any other key,
// including a time that is not a decimal int64 or an id that is not a canonical UUID.
Result<RunPosition> DecodeRunKey(std::string_view key);

}  // namespace ql
