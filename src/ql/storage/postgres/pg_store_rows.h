#pragma once

// Row readers, column lists and row helpers shared by the PostgreSQL store's files (internal to
// the adapter). Every decoded row is checked: a drifted column fails the call closed with Corrupt.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ql/core/ports.h"
#include "ql/core/status.h"
#include "ql/core/store_commands.h"
#include "ql/storage/postgres/pg_client.h"

namespace ql::pg {

using Params = std::vector<Param>;

// ---------------------------------------------------------------------------------------------
// Row readers. Column lists and readers are kept side by side so they cannot drift apart; the
// typed getters record any drift, which the query helpers turn into Corrupt.

inline constexpr char kProjectColumns[] =
    "p.id, p.slug, p.name, p.status, p.version, p.created_at_ms, p.updated_at_ms";

ProjectRecord ReadProject(const Rows& r, int i);

inline constexpr char kTaskHeadColumns[] =
    "h.project_id, h.task_id, h.current_revision, h.created_at_ms, h.updated_at_ms, h.name, "
    "h.deleted_at_ms";

TaskHeadRecord ReadTaskHead(const Rows& r, int i);

inline constexpr char kTaskRevisionColumns[] =
    "tr.project_id, tr.task_id, tr.revision, tr.mutation_id, tr.name, tr.kind, tr.spec_json, "
    "tr.labels_json, tr.enabled, tr.content_digest, tr.created_at_ms, tr.approval_json, "
    "tr.concurrency, tr.published_by";

TaskRevisionRecord ReadTaskRevision(const Rows& r, int i);

inline constexpr char kExecutionColumns[] =
    "e.id, e.project_id, e.task_id, e.task_revision, e.task_digest, e.executor_type, e.plan_json, "
    "e.plan_digest, e.created_at_ms";

ExecutionRevisionRecord ReadExecution(const Rows& r, int i);

inline constexpr char kTriggerHeadColumns[] =
    "th.project_id, th.trigger_id, th.task_id, th.current_revision, th.created_at_ms, "
    "th.updated_at_ms, th.name, th.deleted_at_ms";

TriggerHeadRecord ReadTriggerHead(const Rows& r, int i);

inline constexpr char kTriggerRevisionColumns[] =
    "g.project_id, g.trigger_id, g.revision, g.mutation_id, g.task_id, g.task_revision, "
    "g.task_digest, g.expression, g.timezone, g.misfire, g.enabled, g.content_digest, "
    "g.created_at_ms, g.overlap, g.jitter_ms";

TriggerRevisionRecord ReadTriggerRevision(const Rows& r, int i, int c = 0);

inline constexpr char kScheduleColumns[] =
    "s.project_id, s.trigger_id, s.trigger_revision, s.next_fire_at_ms, s.last_scheduled_at_ms, "
    "s.state_version, s.published_at_ms, s.exhausted, s.updated_at_ms";
inline constexpr int kScheduleColumnCount = 9;

ScheduleRecord ReadSchedule(const Rows& r, int i);

// The run columns ReadRun reads. A cron run stores no idempotency key: its key is rebuilt here
// as CronIdempotencyKey (core/idempotency_key.h) builds it.
inline constexpr char kRunColumns[] =
    "r.id, r.project_id, r.task_id, r.task_revision, r.task_digest, r.execution_revision_id, "
    "r.trigger_id, r.trigger_revision, r.scheduled_for_ms, r.trigger_type, r.status, r.version, "
    "r.event_sequence, r.priority, coalesce(r.idempotency_key, CASE WHEN r.trigger_type = "
    "'cron' THEN 'ql3:cron:v1:' || r.trigger_id || ':' || r.trigger_revision || ':' || "
    "r.scheduled_for_ms END), r.retry_of_run_id, r.created_at_ms, "
    "r.queued_at_ms, r.started_at_ms, r.finished_at_ms, r.retry_at_ms, "
    "r.cancel_requested_at_ms, r.cancel_reason, r.error_code, r.error_summary, r.exit_code, "
    "r.retry_max_attempts, r.retry_on_lost, r.retry_safety, r.retry_backoff_base_ms, "
    "r.retry_backoff_max_ms, r.retry_on_timeout";
inline constexpr char kRunFrom[] = " FROM runs r";

std::optional<int> OptInt32(const Rows& r, int i, int column);

RunRecord ReadRun(const Rows& r, int i);

inline constexpr char kAttemptColumns[] =
    "a.id, a.run_id, a.attempt, a.status, a.executor_type, a.callback_sequence, a.pid, "
    "a.process_start_ticks, a.log_path, a.created_at_ms, a.started_at_ms, a.finished_at_ms, "
    "a.exit_code, a.error_code, a.error_summary";

AttemptRecord ReadAttempt(const Rows& r, int i);

inline constexpr char kEventColumns[] =
    "ev.run_id, ev.sequence, ev.type, ev.actor_type, ev.attempt_id, ev.dedupe_key, "
    "ev.payload_json, ev.created_at_ms";

EventRecord ReadEvent(const Rows& r, int i);

// ---------------------------------------------------------------------------------------------
// Query helpers (inside a transaction). Every decoded row is checked: a drifted column fails
// the whole call closed with Corrupt.

template <typename T, typename Reader>
Result<std::optional<T>> QueryOne(Tx& tx, std::string_view sql, const Params& params, Reader read) {
  QL_ASSIGN_OR_RETURN(Rows rows, tx.Exec(sql, params));
  if (rows.empty()) return std::optional<T>();
  QL_RETURN_IF_ERROR(rows.ExpectRows(1));
  T value = read(rows, 0);
  QL_RETURN_IF_ERROR(rows.status());
  return std::optional<T>(std::move(value));
}

template <typename T, typename Reader>
Result<std::vector<T>> QueryAll(Tx& tx, std::string_view sql, const Params& params, Reader read) {
  QL_ASSIGN_OR_RETURN(Rows rows, tx.Exec(sql, params));
  std::vector<T> out;
  out.reserve(rows.size());
  for (int i = 0; i < rows.size(); ++i) out.push_back(read(rows, i));
  QL_RETURN_IF_ERROR(rows.status());
  return out;
}

// Runs `sql` and reads all its rows at once with `read(rows)`, checking every cell.
template <typename Reader>
auto Query(Tx& tx, std::string_view sql, const Params& params, Reader read)
    -> Result<decltype(read(std::declval<const Rows&>()))> {
  QL_ASSIGN_OR_RETURN(Rows rows, tx.Exec(sql, params));
  auto out = read(rows);
  QL_RETURN_IF_ERROR(rows.status());
  return out;
}

// The first of `rows`, if any.
template <typename T>
std::optional<T> First(std::vector<T> rows) {
  if (rows.empty()) return std::nullopt;
  return std::move(rows.front());
}

Status Execute(Tx& tx, std::string_view sql, const Params& params);

// Executes an UPDATE guarded by a compare-and-set; `on_miss` when no row matched.
Status ExecuteCas(Tx& tx, const Status& on_miss, std::string_view sql, const Params& params);

// How a load locks the row it finds (nothing is locked when there is no row).
enum class Lock { kNone, kShare, kUpdate };

std::string_view LockClause(Lock lock);

Result<std::optional<ProjectRecord>> LoadProject(Tx& tx, const std::string& id,
                                                 Lock lock = Lock::kNone);

Result<std::optional<ProjectRecord>> LoadProjectBySlug(Tx& tx, const std::string& slug);

// NotFound / Conflict unless `project` exists and is active.
Status RequireActiveProject(const std::optional<ProjectRecord>& project,
                            const std::string& project_id);

Result<std::optional<TaskHeadRecord>> LoadTaskHead(Tx& tx, const std::string& task_id,
                                                   Lock lock = Lock::kNone);

Result<std::optional<TaskRevisionRecord>> LoadTaskRevision(Tx& tx, const std::string& task_id,
                                                           int64_t revision);

Result<std::optional<TaskRevisionRecord>> LoadTaskRevisionByMutation(Tx& tx,
                                                                     const std::string& mutation);

Result<std::optional<TriggerHeadRecord>> LoadTriggerHead(Tx& tx, const std::string& trigger_id,
                                                         Lock lock = Lock::kNone);

Result<std::optional<TriggerRevisionRecord>> LoadTriggerRevisionByMutation(
    Tx& tx, const std::string& mutation);

// One page of the run listing: the runs `filter` selects, newest first by (created_at_ms, id),
// after `after`, at most `limit`. One statement text per filter combination, each walking an
// index of runs backwards: runs_by_project (the API scopes every listing to a project),
// runs_by_task, runs_by_trigger or runs_by_status, which end at created_at_ms (the runs of one
// millisecond are sorted by id after the walk; PgStoreTest EveryRunListingOfTheApiWalksAnIndex).
struct RunListing {
  std::string sql;
  Params params;
};
RunListing RunListingQuery(const RunFilter& filter, const std::optional<RunPosition>& after,
                           int limit);

// Loads the run of `project_id` with idempotency key `key`: a cron run by the occurrence its
// key names (a cron run stores no key), any other by its stored key.
Result<std::optional<RunRecord>> LoadRunByIdempotencyKey(Tx& tx, const std::string& project_id,
                                                         const std::string& key);

// Loads a run; with Lock::kUpdate the run row stays locked until the end of
// the transaction, so every change of one run is serialised on that row.
Result<std::optional<RunRecord>> LoadRun(Tx& tx, const std::string& run_id,
                                         Lock lock = Lock::kNone);

Result<RunRecord> RequireRun(Tx& tx, const std::string& run_id, Lock lock = Lock::kNone);

Result<std::optional<AttemptRecord>> LoadAttempt(Tx& tx, const std::string& attempt_id);

// The statements LoadRun / RequireRun and LoadAttempt run, for Tx::Prefetch.
Statement LoadRunStatement(const std::string& run_id, Lock lock = Lock::kNone);
Statement LoadAttemptStatement(const std::string& attempt_id);

Result<std::optional<AttemptRecord>> LoadLatestAttempt(Tx& tx, const std::string& run_id);

// Inserts one event at `sequence`; the attempt it names must belong to the run.
Status InsertEvent(Tx& tx, const std::string& run_id, int64_t sequence, const NewEvent& event,
                   const std::string& canonical_payload, int64_t now_ms);

// Returns true when InsertEvents(…, verified_attempt_id, …) looks nothing up first: every event
// names no attempt or `verified_attempt_id`.
bool EventsNeedNoLookUp(const std::vector<PreparedEvent>& events,
                        const std::optional<std::string>& verified_attempt_id);
// The statement InsertEvents runs for a non-empty `events`, for Tx::Prefetch.
Statement EventsInsertStatement(const std::string& run_id, int64_t after_sequence,
                                const std::vector<PreparedEvent>& events, int64_t now_ms);

// Inserts `events` at the sequences after `after_sequence`, in one statement. An attempt an
// event names must belong to the run; `verified_attempt_id`, an attempt this transaction has
// already read as the run's, is not looked up again.
Status InsertEvents(Tx& tx, const std::string& run_id, int64_t after_sequence,
                    const std::vector<PreparedEvent>& events,
                    const std::optional<std::string>& verified_attempt_id, int64_t now_ms);

// True when execution revision `run.execution_revision_id` is the plan of (task, revision,
// executor type) with the run's task digest in the run's project.
Result<bool> ExecutionRevisionMatches(Tx& tx, const NewRun& run);

// The eligibility of a schedule row: active project, current enabled trigger revision pinning
// the task's current enabled revision and its digest, not exhausted. `s.enabled AND NOT
// s.exhausted` is the predicate of the partial index trigger_schedules_due; the joins re-check
// what the row's `enabled` copy summarises.
inline constexpr char kEligibleSchedules[] =
    " FROM trigger_schedules s"
    " JOIN projects p ON p.id = s.project_id"
    " JOIN trigger_heads th ON th.trigger_id = s.trigger_id"
    " JOIN trigger_revisions g ON g.trigger_id = s.trigger_id AND g.revision = s.trigger_revision"
    " JOIN task_heads h ON h.task_id = g.task_id"
    " JOIN task_revisions tr ON tr.task_id = g.task_id AND tr.revision = g.task_revision"
    " WHERE s.enabled AND NOT s.exhausted AND p.status = 'active'"
    " AND th.current_revision = s.trigger_revision AND g.enabled"
    " AND h.current_revision = g.task_revision AND tr.enabled"
    " AND tr.content_digest = g.task_digest";

}  // namespace ql::pg
