#include "ql/storage/postgres/pg_store.h"

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include "ql/core/canonical_json.h"
#include "ql/core/execution_plan.h"
#include "ql/core/idempotency_key.h"
#include "ql/core/ids.h"
#include "ql/core/states.h"
#include "ql/core/store_commands.h"
#include "ql/core/governance_store.h"
#include "ql/storage/postgres/pg_governance.h"
#include "ql/storage/postgres/pg_run_rows.h"
#include "ql/storage/postgres/pg_worker.h"

namespace ql {
namespace {

using pg::P;
using pg::Rows;
using pg::Tx;
using Params = std::vector<pg::Param>;

// ---------------------------------------------------------------------------------------------
// Row readers. Column lists and readers are kept side by side so they cannot drift apart; the
// typed getters record any drift, which the query helpers turn into Corrupt.

constexpr char kProjectColumns[] =
    "p.id, p.slug, p.name, p.status, p.version, p.created_at_ms, p.updated_at_ms";

ProjectRecord ReadProject(const Rows& r, int i) {
  return ProjectRecord{r.Text(i, 0), r.Text(i, 1), r.Text(i, 2), r.Text(i, 3),
                       r.Int(i, 4),  r.Int(i, 5),  r.Int(i, 6)};
}

constexpr char kTaskHeadColumns[] =
    "h.project_id, h.task_id, h.current_revision, h.created_at_ms, h.updated_at_ms";

TaskHeadRecord ReadTaskHead(const Rows& r, int i) {
  return TaskHeadRecord{r.Text(i, 0), r.Text(i, 1), r.Int(i, 2), r.Int(i, 3), r.Int(i, 4)};
}

constexpr char kTaskRevisionColumns[] =
    "tr.project_id, tr.task_id, tr.revision, tr.mutation_id, tr.name, tr.kind, tr.spec_json, "
    "tr.labels_json, tr.enabled, tr.content_digest, tr.created_at_ms";

TaskRevisionRecord ReadTaskRevision(const Rows& r, int i) {
  TaskRevisionRecord out;
  out.project_id = r.Text(i, 0);
  out.task_id = r.Text(i, 1);
  out.revision = r.Int(i, 2);
  out.mutation_id = r.Text(i, 3);
  out.name = r.Text(i, 4);
  out.kind = r.Text(i, 5);
  out.spec_json = r.Text(i, 6);
  out.labels_json = r.Text(i, 7);
  out.enabled = r.Bool(i, 8);
  out.content_digest = r.Text(i, 9);
  out.created_at_ms = r.Int(i, 10);
  return out;
}

constexpr char kExecutionColumns[] =
    "e.id, e.project_id, e.task_id, e.task_revision, e.task_digest, e.executor_type, e.plan_json, "
    "e.plan_digest, e.created_at_ms";

ExecutionRevisionRecord ReadExecution(const Rows& r, int i) {
  ExecutionRevisionRecord out;
  out.id = r.Text(i, 0);
  out.project_id = r.Text(i, 1);
  out.task_id = r.Text(i, 2);
  out.task_revision = r.Int(i, 3);
  out.task_digest = r.Text(i, 4);
  out.executor_type = r.Text(i, 5);
  out.plan_json = r.Text(i, 6);
  out.plan_digest = r.Text(i, 7);
  out.created_at_ms = r.Int(i, 8);
  return out;
}

constexpr char kTriggerHeadColumns[] =
    "th.project_id, th.trigger_id, th.task_id, th.current_revision, th.created_at_ms, "
    "th.updated_at_ms";

TriggerHeadRecord ReadTriggerHead(const Rows& r, int i) {
  return TriggerHeadRecord{r.Text(i, 0), r.Text(i, 1), r.Text(i, 2),
                           r.Int(i, 3),  r.Int(i, 4),  r.Int(i, 5)};
}

constexpr char kTriggerRevisionColumns[] =
    "g.project_id, g.trigger_id, g.revision, g.mutation_id, g.task_id, g.task_revision, "
    "g.task_digest, g.expression, g.timezone, g.misfire, g.enabled, g.content_digest, "
    "g.created_at_ms";

TriggerRevisionRecord ReadTriggerRevision(const Rows& r, int i, int c = 0) {
  TriggerRevisionRecord out;
  out.project_id = r.Text(i, c + 0);
  out.trigger_id = r.Text(i, c + 1);
  out.revision = r.Int(i, c + 2);
  out.mutation_id = r.Text(i, c + 3);
  out.task_id = r.Text(i, c + 4);
  out.task_revision = r.Int(i, c + 5);
  out.task_digest = r.Text(i, c + 6);
  out.expression = r.Text(i, c + 7);
  out.timezone = r.Text(i, c + 8);
  out.misfire = r.Text(i, c + 9);
  out.enabled = r.Bool(i, c + 10);
  out.content_digest = r.Text(i, c + 11);
  out.created_at_ms = r.Int(i, c + 12);
  return out;
}

constexpr char kScheduleColumns[] =
    "s.project_id, s.trigger_id, s.trigger_revision, s.next_fire_at_ms, s.last_scheduled_at_ms, "
    "s.state_version, s.published_at_ms, s.exhausted, s.updated_at_ms";
constexpr int kScheduleColumnCount = 9;

ScheduleRecord ReadSchedule(const Rows& r, int i) {
  ScheduleRecord out;
  out.project_id = r.Text(i, 0);
  out.trigger_id = r.Text(i, 1);
  out.trigger_revision = r.Int(i, 2);
  out.next_fire_at_ms = r.OptInt(i, 3);
  out.last_scheduled_at_ms = r.OptInt(i, 4);
  out.state_version = r.Int(i, 5);
  out.published_at_ms = r.Int(i, 6);
  out.exhausted = r.Bool(i, 7);
  out.updated_at_ms = r.Int(i, 8);
  return out;
}

constexpr char kRunColumns[] =
    "r.id, r.project_id, r.task_id, r.task_revision, r.task_digest, r.execution_revision_id, "
    "r.trigger_id, r.trigger_revision, r.scheduled_for_ms, r.trigger_type, r.status, r.version, "
    "r.event_sequence, r.priority, r.idempotency_key, r.retry_of_run_id, r.created_at_ms, "
    "r.queued_at_ms, r.started_at_ms, r.finished_at_ms, r.retry_at_ms, "
    "r.cancel_requested_at_ms, r.cancel_reason, r.error_code, r.error_summary, r.exit_code, "
    "rp.max_attempts, rp.retry_on_lost, rp.safety, rp.backoff_base_ms, rp.backoff_max_ms";
constexpr char kRunFrom[] = " FROM runs r JOIN run_retry_policies rp ON rp.run_id = r.id";

std::optional<int> OptInt32(const Rows& r, int i, int column) {
  std::optional<int64_t> value = r.OptInt(i, column);
  if (!value.has_value()) return std::nullopt;
  return static_cast<int>(*value);
}

RunRecord ReadRun(const Rows& r, int i) {
  RunRecord out;
  out.id = r.Text(i, 0);
  out.project_id = r.Text(i, 1);
  out.task_id = r.Text(i, 2);
  out.task_revision = r.Int(i, 3);
  out.task_digest = r.Text(i, 4);
  out.execution_revision_id = r.Text(i, 5);
  out.trigger_id = r.OptText(i, 6);
  out.trigger_revision = r.OptInt(i, 7);
  out.scheduled_for_ms = r.OptInt(i, 8);
  out.trigger_type = r.Text(i, 9);
  out.status = r.Text(i, 10);
  out.version = r.Int(i, 11);
  out.event_sequence = r.Int(i, 12);
  out.priority = static_cast<int>(r.Int(i, 13));
  out.idempotency_key = r.OptText(i, 14);
  out.retry_of_run_id = r.OptText(i, 15);
  out.created_at_ms = r.Int(i, 16);
  out.queued_at_ms = r.OptInt(i, 17);
  out.started_at_ms = r.OptInt(i, 18);
  out.finished_at_ms = r.OptInt(i, 19);
  out.retry_at_ms = r.OptInt(i, 20);
  out.cancel_requested_at_ms = r.OptInt(i, 21);
  out.cancel_reason = r.OptText(i, 22);
  out.error_code = r.OptText(i, 23);
  out.error_summary = r.OptText(i, 24);
  out.exit_code = OptInt32(r, i, 25);
  out.retry_policy.max_attempts = static_cast<int>(r.Int(i, 26));
  out.retry_policy.retry_on_lost = r.Bool(i, 27);
  out.retry_policy.safety = r.Text(i, 28);
  out.retry_policy.backoff_base_ms = r.Int(i, 29);
  out.retry_policy.backoff_max_ms = r.Int(i, 30);
  return out;
}

constexpr char kAttemptColumns[] =
    "a.id, a.run_id, a.attempt, a.status, a.executor_type, a.callback_sequence, a.pid, "
    "a.process_start_ticks, a.log_path, a.created_at_ms, a.started_at_ms, a.finished_at_ms, "
    "a.exit_code, a.error_code, a.error_summary";

AttemptRecord ReadAttempt(const Rows& r, int i) {
  AttemptRecord out;
  out.id = r.Text(i, 0);
  out.run_id = r.Text(i, 1);
  out.attempt = static_cast<int>(r.Int(i, 2));
  out.status = r.Text(i, 3);
  out.executor_type = r.Text(i, 4);
  out.callback_sequence = r.Int(i, 5);
  out.pid = r.OptInt(i, 6);
  out.process_start_ticks = r.OptInt(i, 7);
  out.log_path = r.OptText(i, 8);
  out.created_at_ms = r.Int(i, 9);
  out.started_at_ms = r.OptInt(i, 10);
  out.finished_at_ms = r.OptInt(i, 11);
  out.exit_code = OptInt32(r, i, 12);
  out.error_code = r.OptText(i, 13);
  out.error_summary = r.OptText(i, 14);
  return out;
}

constexpr char kEventColumns[] =
    "ev.run_id, ev.sequence, ev.type, ev.actor_type, ev.attempt_id, ev.dedupe_key, "
    "ev.payload_json, ev.created_at_ms";

EventRecord ReadEvent(const Rows& r, int i) {
  EventRecord out;
  out.run_id = r.Text(i, 0);
  out.sequence = r.Int(i, 1);
  out.type = r.Text(i, 2);
  out.actor_type = r.Text(i, 3);
  out.attempt_id = r.OptText(i, 4);
  out.dedupe_key = r.OptText(i, 5);
  out.payload_json = r.Text(i, 6);
  out.created_at_ms = r.Int(i, 7);
  return out;
}

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

Status Execute(Tx& tx, std::string_view sql, const Params& params) {
  return tx.Exec(sql, params).status();
}

// Executes an UPDATE guarded by a compare-and-set; `on_miss` when no row matched.
Status ExecuteCas(Tx& tx, const Status& on_miss, std::string_view sql, const Params& params) {
  QL_ASSIGN_OR_RETURN(Rows rows, tx.Exec(sql, params));
  if (rows.affected() != 1) return on_miss;
  return Status();
}

// How a load locks the row it finds (nothing is locked when there is no row).
enum class Lock { kNone, kShare, kUpdate };

std::string_view LockClause(Lock lock) {
  switch (lock) {
    case Lock::kShare:
      return " FOR SHARE";
    case Lock::kUpdate:
      // Not FOR UPDATE: the key never changes, and foreign-key checks of other transactions
      // (FOR KEY SHARE) must not wait for this one.
      return " FOR NO KEY UPDATE";
    case Lock::kNone:
      break;
  }
  return "";
}

Result<std::optional<ProjectRecord>> LoadProject(Tx& tx, const std::string& id,
                                                 Lock lock = Lock::kNone) {
  return QueryOne<ProjectRecord>(
      tx, Cat({"SELECT ", kProjectColumns, " FROM projects p WHERE p.id = $1", LockClause(lock)}),
      {P(id)}, ReadProject);
}

Result<std::optional<ProjectRecord>> LoadProjectBySlug(Tx& tx, const std::string& slug) {
  static const std::string kSql =
      Cat({"SELECT ", kProjectColumns, " FROM projects p WHERE p.slug = $1"});
  return QueryOne<ProjectRecord>(tx, kSql, {P(slug)}, ReadProject);
}

// NotFound / Conflict unless `project` exists and is active.
Status RequireActiveProject(const std::optional<ProjectRecord>& project,
                            const std::string& project_id) {
  if (!project.has_value()) {
    return NotFound("project_not_found", Cat({"project ", project_id, " does not exist"}));
  }
  if (project->status != kProjectActive) {
    return Conflict("project_inactive",
                    Cat({"project ", project_id, " is ", project->status, ", not active"}));
  }
  return Status();
}

Result<std::optional<TaskHeadRecord>> LoadTaskHead(Tx& tx, const std::string& task_id,
                                                   Lock lock = Lock::kNone) {
  return QueryOne<TaskHeadRecord>(
      tx,
      Cat({"SELECT ", kTaskHeadColumns, " FROM task_heads h WHERE h.task_id = $1",
           LockClause(lock)}),
      {P(task_id)}, ReadTaskHead);
}

Result<std::optional<TaskRevisionRecord>> LoadTaskRevision(Tx& tx, const std::string& task_id,
                                                           int64_t revision) {
  static const std::string kSql = Cat({"SELECT ", kTaskRevisionColumns,
                                       " FROM task_revisions tr WHERE tr.task_id = $1 AND "
                                       "tr.revision = $2"});
  return QueryOne<TaskRevisionRecord>(tx, kSql, {P(task_id), P(revision)}, ReadTaskRevision);
}

Result<std::optional<TaskRevisionRecord>> LoadTaskRevisionByMutation(Tx& tx,
                                                                     const std::string& mutation) {
  static const std::string kSql =
      Cat({"SELECT ", kTaskRevisionColumns, " FROM task_revisions tr WHERE tr.mutation_id = $1"});
  return QueryOne<TaskRevisionRecord>(tx, kSql, {P(mutation)}, ReadTaskRevision);
}

Result<std::optional<TriggerHeadRecord>> LoadTriggerHead(Tx& tx, const std::string& trigger_id,
                                                         Lock lock = Lock::kNone) {
  return QueryOne<TriggerHeadRecord>(
      tx,
      Cat({"SELECT ", kTriggerHeadColumns, " FROM trigger_heads th WHERE th.trigger_id = $1",
           LockClause(lock)}),
      {P(trigger_id)}, ReadTriggerHead);
}

Result<std::optional<TriggerRevisionRecord>> LoadTriggerRevisionByMutation(
    Tx& tx, const std::string& mutation) {
  static const std::string kSql = Cat(
      {"SELECT ", kTriggerRevisionColumns, " FROM trigger_revisions g WHERE g.mutation_id = $1"});
  return QueryOne<TriggerRevisionRecord>(
      tx, kSql, {P(mutation)}, [](const Rows& r, int i) { return ReadTriggerRevision(r, i); });
}

// Loads a run; with Lock::kUpdate the run row (not its policy) stays locked until the end of
// the transaction, so every change of one run is serialised on that row.
Result<std::optional<RunRecord>> LoadRun(Tx& tx, const std::string& run_id,
                                         Lock lock = Lock::kNone) {
  static const std::string kSql = Cat({"SELECT ", kRunColumns, kRunFrom, " WHERE r.id = $1"});
  static const std::string kLocked =
      Cat({"SELECT ", kRunColumns, kRunFrom, " WHERE r.id = $1 FOR NO KEY UPDATE OF r"});
  return QueryOne<RunRecord>(tx, lock == Lock::kUpdate ? kLocked : kSql, {P(run_id)}, ReadRun);
}

Result<RunRecord> RequireRun(Tx& tx, const std::string& run_id, Lock lock = Lock::kNone) {
  QL_ASSIGN_OR_RETURN(std::optional<RunRecord> run, LoadRun(tx, run_id, lock));
  if (!run.has_value()) return NotFound("run_not_found", Cat({"run ", run_id, " does not exist"}));
  return std::move(*run);
}

Result<std::optional<AttemptRecord>> LoadAttempt(Tx& tx, const std::string& attempt_id) {
  static const std::string kSql =
      Cat({"SELECT ", kAttemptColumns, " FROM run_attempts a WHERE a.id = $1"});
  return QueryOne<AttemptRecord>(tx, kSql, {P(attempt_id)}, ReadAttempt);
}

Result<std::optional<AttemptRecord>> LoadLatestAttempt(Tx& tx, const std::string& run_id) {
  static const std::string kSql = Cat({"SELECT ", kAttemptColumns,
                                       " FROM run_attempts a WHERE a.run_id = $1 "
                                       "ORDER BY a.attempt DESC LIMIT 1"});
  return QueryOne<AttemptRecord>(tx, kSql, {P(run_id)}, ReadAttempt);
}

// Inserts one event at `sequence`; the attempt it names must belong to the run.
Status InsertEvent(Tx& tx, const std::string& run_id, int64_t sequence, const NewEvent& event,
                   const std::string& canonical_payload, int64_t now_ms) {
  if (event.attempt_id.has_value()) {
    QL_ASSIGN_OR_RETURN(std::optional<std::string> owner,
                        QueryOne<std::string>(tx, "SELECT run_id FROM run_attempts WHERE id = $1",
                                              {P(*event.attempt_id)},
                                              [](const Rows& r, int i) { return r.Text(i, 0); }));
    if (!owner.has_value() || *owner != run_id) {
      return InvalidArgument("attempt_not_in_run",
                             Cat({"event ", Quote(event.type), " names attempt ", *event.attempt_id,
                                  ", which is not an attempt of run ", run_id}));
    }
  }
  return Execute(tx,
                 "INSERT INTO run_events (run_id, sequence, type, actor_type, attempt_id, "
                 "dedupe_key, payload_json, created_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                 {P(run_id), P(sequence), P(event.type), P(event.actor_type), P(event.attempt_id),
                  P(event.dedupe_key), P(canonical_payload), P(now_ms)});
}

// True when execution revision `run.execution_revision_id` is the plan of (task, revision,
// executor type) with the run's task digest in the run's project.
Result<bool> ExecutionRevisionMatches(Tx& tx, const NewRun& run) {
  static const std::string kSql =
      Cat({"SELECT ", kExecutionColumns, " FROM execution_revisions e WHERE e.id = $1"});
  QL_ASSIGN_OR_RETURN(
      std::optional<ExecutionRevisionRecord> exec,
      QueryOne<ExecutionRevisionRecord>(tx, kSql, {P(run.execution_revision_id)}, ReadExecution));
  return exec.has_value() && exec->task_id == run.task_id &&
         exec->task_revision == run.task_revision && exec->task_digest == run.task_digest &&
         exec->executor_type == run.executor_type && exec->project_id == run.project_id;
}

// The eligibility of a schedule row: active project, current enabled trigger revision pinning
// the task's current enabled revision and its digest, not exhausted. `s.enabled AND NOT
// s.exhausted` is the predicate of the partial index trigger_schedules_due; the joins re-check
// what the row's `enabled` copy summarises.
constexpr char kEligibleSchedules[] =
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

const pg::TxOptions kReadOnly{pg::Isolation::kReadCommitted, /*read_only=*/true};
const pg::TxOptions kReadWrite{pg::Isolation::kReadCommitted, /*read_only=*/false};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Opening

PostgresStore::PostgresStore(std::unique_ptr<pg::Pool> runtime, std::unique_ptr<pg::Pool> admin)
    : runtime_(std::move(runtime)),
      admin_(std::move(admin)),
      governance_runner_(std::make_unique<pg::PgGovernanceRunner>(*runtime_, admin_.get())),
      governance_(std::make_unique<GovernanceStore>(*governance_runner_, SecureRandom())) {}

Status PostgresStore::Fence(pg::Tx& tx, const std::optional<PolicyFence>& fence,
                            const std::string& project_id) {
  if (!fence.has_value()) return Status();
  std::unique_ptr<GovernanceTx> governance = pg::NewGovernanceTx(tx);
  return CheckPolicyFence(*governance, *fence, project_id);
}

PostgresStore::~PostgresStore() {
  if (admin_ != nullptr) admin_->Close();
  runtime_->Close();
}

Result<std::unique_ptr<PostgresStore>> PostgresStore::Open(const PostgresStoreOptions& options) {
  const bool allow_insecure = pg::InsecureAllowedByEnvironment();
  pg::PoolOptions runtime = options.runtime;
  QL_ASSIGN_OR_RETURN(runtime.url, pg::CheckDatabaseUrl(options.runtime.url, allow_insecure));
  std::optional<pg::PoolOptions> admin = options.admin;
  if (admin.has_value()) {
    QL_ASSIGN_OR_RETURN(admin->url, pg::CheckDatabaseUrl(options.admin->url, allow_insecure));
  }
  QL_ASSIGN_OR_RETURN(std::unique_ptr<pg::Pool> runtime_pool, pg::Pool::Create(runtime));
  std::unique_ptr<pg::Pool> admin_pool;
  if (admin.has_value()) {
    QL_ASSIGN_OR_RETURN(admin_pool, pg::Pool::Create(*admin));
  }
  return std::unique_ptr<PostgresStore>(
      new PostgresStore(std::move(runtime_pool), std::move(admin_pool)));
}

Status PostgresStore::Read(std::string_view operation, const std::function<Status(pg::Tx&)>& body) {
  return runtime_->Transact(kReadOnly, operation, body);
}

Status PostgresStore::Write(std::string_view operation,
                            const std::function<Status(pg::Tx&)>& body) {
  return runtime_->Transact(kReadWrite, operation, body);
}

Status PostgresStore::AdminWrite(std::string_view operation,
                                 const std::function<Status(pg::Tx&)>& body) {
  if (admin_ == nullptr) {
    return Unavailable("admin_pool_missing",
                       Cat({operation, " needs the admin database URL (--admin-database-url)"}));
  }
  return admin_->Transact(kReadWrite, operation, body);
}

// ---------------------------------------------------------------------------------------------
// Projects

Result<ProjectRecord> PostgresStore::EnsureProject(const std::string& id_if_new,
                                                   const std::string& slug, const std::string& name,
                                                   int64_t now_ms) {
  QL_RETURN_IF_ERROR(RequireText("project slug", slug));
  // The common case (the project exists) needs no admin role.
  std::optional<ProjectRecord> existing;
  QL_RETURN_IF_ERROR(Read("ensuring a project", [&](Tx& tx) -> Status {
    QL_ASSIGN_OR_RETURN(existing, LoadProjectBySlug(tx, slug));
    return Status();
  }));
  if (existing.has_value()) return std::move(*existing);
  QL_RETURN_IF_ERROR(ValidateId("project id", id_if_new));

  ProjectRecord out;
  QL_RETURN_IF_ERROR(AdminWrite("ensuring a project", [&](Tx& tx) -> Status {
    out = ProjectRecord{id_if_new, slug, name, std::string(kProjectActive), 1, now_ms, now_ms};
    // A concurrent creator of the same slug makes this insert wait for its outcome; once it
    // has committed, its project is the answer.
    QL_ASSIGN_OR_RETURN(Rows inserted,
                        tx.Exec("INSERT INTO projects (id, slug, name, status, version, "
                                "created_at_ms, updated_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7) "
                                "ON CONFLICT (slug) DO NOTHING",
                                {P(out.id), P(out.slug), P(out.name), P(out.status), P(out.version),
                                 P(out.created_at_ms), P(out.updated_at_ms)}));
    if (inserted.affected() == 1) return Status();
    QL_ASSIGN_OR_RETURN(std::optional<ProjectRecord> winner, LoadProjectBySlug(tx, slug));
    if (!winner.has_value()) {
      return Internal("project_vanished",
                      Cat({"project ", Quote(slug), " conflicted on insert but cannot be read"}));
    }
    out = std::move(*winner);
    return Status();
  }));
  return out;
}

Result<ProjectRecord> PostgresStore::GetProject(const std::string& project_id) {
  std::optional<ProjectRecord> out;
  QL_RETURN_IF_ERROR(Read("reading a project", [&](Tx& tx) -> Status {
    QL_ASSIGN_OR_RETURN(out, LoadProject(tx, project_id));
    return Status();
  }));
  if (!out.has_value()) {
    return NotFound("project_not_found", Cat({"project ", project_id, " does not exist"}));
  }
  return std::move(*out);
}

Result<ProjectRecord> PostgresStore::GetProjectBySlug(const std::string& slug) {
  std::optional<ProjectRecord> out;
  QL_RETURN_IF_ERROR(Read("reading a project", [&](Tx& tx) -> Status {
    QL_ASSIGN_OR_RETURN(out, LoadProjectBySlug(tx, slug));
    return Status();
  }));
  if (!out.has_value()) {
    return NotFound("project_not_found", Cat({"no project has slug ", Quote(slug)}));
  }
  return std::move(*out);
}

Result<std::vector<ProjectRecord>> PostgresStore::ListProjects() {
  std::vector<ProjectRecord> out;
  QL_RETURN_IF_ERROR(Read("listing projects", [&](Tx& tx) -> Status {
    // Byte order, as SQLite sorts, whatever the database's collation.
    static const std::string kSql =
        Cat({"SELECT ", kProjectColumns, " FROM projects p ORDER BY p.slug COLLATE \"C\""});
    QL_ASSIGN_OR_RETURN(out, QueryAll<ProjectRecord>(tx, kSql, {}, ReadProject));
    return Status();
  }));
  return out;
}

// ---------------------------------------------------------------------------------------------
// Definitions

Result<PublishTaskResult> PostgresStore::PublishTaskRevision(const PublishTaskCommand& cmd) {
  QL_RETURN_IF_ERROR(ValidatePublishTask(cmd));
  const int64_t new_revision = cmd.expected_revision.value_or(0) + 1;
  const TaskRevisionRecord& content = cmd.revision;

  PublishTaskResult out;
  QL_RETURN_IF_ERROR(AdminWrite("publishing a task revision", [&](Tx& tx) -> Status {
    out = PublishTaskResult{};
    QL_RETURN_IF_ERROR(Fence(tx, cmd.fence, cmd.project_id));
    // Locks first (project, then head), so everything read below is what this transaction
    // commits against: a concurrent publish of the same task waits here and then sees the
    // winner's revision, or its mutation id when it was the same request.
    QL_ASSIGN_OR_RETURN(std::optional<ProjectRecord> project,
                        LoadProject(tx, cmd.project_id, Lock::kShare));
    QL_ASSIGN_OR_RETURN(std::optional<TaskHeadRecord> head,
                        LoadTaskHead(tx, cmd.task_id, Lock::kUpdate));

    // Returns true (and sets `out`) when the mutation id was applied with this content.
    auto replayed = [&]() -> Result<bool> {
      QL_ASSIGN_OR_RETURN(std::optional<TaskRevisionRecord> replay,
                          LoadTaskRevisionByMutation(tx, cmd.mutation_id));
      if (replay.has_value()) {
        if (replay->task_id == cmd.task_id && replay->project_id == cmd.project_id &&
            replay->revision == new_revision && replay->content_digest == content.content_digest) {
          out = PublishTaskResult{std::move(*replay), true};
          return true;
        }
        return Conflict("mutation_id_reused",
                        Cat({"mutation id ", Quote(cmd.mutation_id), " was applied to task ",
                             replay->task_id, " revision ", std::to_string(replay->revision),
                             " with other content or another expected revision"}));
      }
      QL_ASSIGN_OR_RETURN(std::optional<TriggerRevisionRecord> other,
                          LoadTriggerRevisionByMutation(tx, cmd.mutation_id));
      if (other.has_value()) {
        return Conflict("mutation_id_reused", Cat({"mutation id ", Quote(cmd.mutation_id),
                                                   " was applied to trigger ", other->trigger_id}));
      }
      return false;
    };
    QL_ASSIGN_OR_RETURN(bool replay, replayed());
    if (replay) return Status();
    QL_RETURN_IF_ERROR(RequireActiveProject(project, cmd.project_id));

    const Status exists = Duplicate(
        "duplicate_id",
        Cat({"task ", cmd.task_id, " exists already; update it with its expected revision"}));
    if (!cmd.expected_revision.has_value()) {
      if (head.has_value()) return exists;
      // No row to lock yet: the primary key decides between concurrent creators. The insert
      // waits for a concurrent creator's outcome; when it committed, this request is either
      // its replay or a duplicate.
      QL_ASSIGN_OR_RETURN(Rows inserted,
                          tx.Exec("INSERT INTO task_heads (task_id, project_id, current_revision, "
                                  "created_at_ms, updated_at_ms) VALUES ($1, $2, 1, $3, $3) "
                                  "ON CONFLICT (task_id) DO NOTHING",
                                  {P(cmd.task_id), P(cmd.project_id), P(cmd.now_ms)}));
      if (inserted.affected() != 1) {
        QL_ASSIGN_OR_RETURN(bool concurrent_replay, replayed());
        if (concurrent_replay) return Status();
        return exists;
      }
    } else {
      if (!head.has_value() || head->project_id != cmd.project_id) {
        return NotFound("task_not_found",
                        Cat({"task ", cmd.task_id, " does not exist in project ", cmd.project_id}));
      }
      const Status stale = Conflict(
          "revision_conflict",
          Cat({"task ", cmd.task_id, " is at revision ", std::to_string(head->current_revision),
               ", not the expected ", std::to_string(*cmd.expected_revision)}));
      if (head->current_revision != *cmd.expected_revision) return stale;
      QL_RETURN_IF_ERROR(
          ExecuteCas(tx, stale,
                     "UPDATE task_heads SET current_revision = $1, "
                     "updated_at_ms = $2 WHERE task_id = $3 AND "
                     "current_revision = $4",
                     {P(new_revision), P(cmd.now_ms), P(cmd.task_id), P(*cmd.expected_revision)}));
    }
    TaskRevisionRecord stored = content;
    stored.project_id = cmd.project_id;
    stored.task_id = cmd.task_id;
    stored.revision = new_revision;
    stored.mutation_id = cmd.mutation_id;
    stored.created_at_ms = cmd.now_ms;
    QL_RETURN_IF_ERROR(Execute(
        tx,
        "INSERT INTO task_revisions (task_id, revision, project_id, mutation_id, name, kind, "
        "spec_json, labels_json, enabled, content_digest, created_at_ms) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
        {P(stored.task_id), P(stored.revision), P(stored.project_id), P(stored.mutation_id),
         P(stored.name), P(stored.kind), P(stored.spec_json), P(stored.labels_json),
         P(stored.enabled), P(stored.content_digest), P(stored.created_at_ms)}));
    for (const ExecutionRevisionRecord& exec : cmd.executions) {
      QL_RETURN_IF_ERROR(Execute(
          tx,
          "INSERT INTO execution_revisions (id, project_id, task_id, "
          "task_revision, task_digest, executor_type, plan_json, "
          "plan_digest, created_at_ms) "
          "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
          {P(exec.id), P(cmd.project_id), P(cmd.task_id), P(new_revision), P(exec.task_digest),
           P(exec.executor_type), P(exec.plan_json), P(exec.plan_digest), P(cmd.now_ms)}));
    }
    out = PublishTaskResult{std::move(stored), false};
    return Status();
  }));
  return out;
}

Result<PublishTriggerResult> PostgresStore::PublishTriggerRevision(
    const PublishTriggerCommand& cmd) {
  QL_RETURN_IF_ERROR(ValidatePublishTrigger(cmd));
  const TriggerRevisionRecord& content = cmd.revision;
  const int64_t new_revision = cmd.expected_revision.value_or(0) + 1;

  PublishTriggerResult out;
  QL_RETURN_IF_ERROR(AdminWrite("publishing a trigger revision", [&](Tx& tx) -> Status {
    out = PublishTriggerResult{};
    QL_RETURN_IF_ERROR(Fence(tx, cmd.fence, cmd.project_id));
    // Lock order: project, task head (shared: a task publish must not move the pinned revision
    // under this check), trigger head, and at the end the schedule row.
    QL_ASSIGN_OR_RETURN(std::optional<ProjectRecord> project,
                        LoadProject(tx, cmd.project_id, Lock::kShare));
    QL_ASSIGN_OR_RETURN(std::optional<TaskHeadRecord> task,
                        LoadTaskHead(tx, content.task_id, Lock::kShare));
    QL_ASSIGN_OR_RETURN(std::optional<TriggerHeadRecord> head,
                        LoadTriggerHead(tx, cmd.trigger_id, Lock::kUpdate));

    auto replayed = [&]() -> Result<bool> {
      QL_ASSIGN_OR_RETURN(std::optional<TriggerRevisionRecord> replay,
                          LoadTriggerRevisionByMutation(tx, cmd.mutation_id));
      if (replay.has_value()) {
        if (replay->trigger_id == cmd.trigger_id && replay->project_id == cmd.project_id &&
            replay->revision == new_revision && replay->content_digest == content.content_digest) {
          out = PublishTriggerResult{std::move(*replay), true};
          return true;
        }
        return Conflict("mutation_id_reused",
                        Cat({"mutation id ", Quote(cmd.mutation_id), " was applied to trigger ",
                             replay->trigger_id, " revision ", std::to_string(replay->revision),
                             " with other content or another expected revision"}));
      }
      QL_ASSIGN_OR_RETURN(std::optional<TaskRevisionRecord> other,
                          LoadTaskRevisionByMutation(tx, cmd.mutation_id));
      if (other.has_value()) {
        return Conflict("mutation_id_reused", Cat({"mutation id ", Quote(cmd.mutation_id),
                                                   " was applied to task ", other->task_id}));
      }
      return false;
    };
    QL_ASSIGN_OR_RETURN(bool replay, replayed());
    if (replay) return Status();
    QL_RETURN_IF_ERROR(RequireActiveProject(project, cmd.project_id));
    if (!task.has_value() || task->project_id != cmd.project_id) {
      return NotFound("task_not_found", Cat({"task ", content.task_id,
                                             " does not exist in project ", cmd.project_id}));
    }
    const Status exists = Duplicate(
        "duplicate_id",
        Cat({"trigger ", cmd.trigger_id, " exists already; update it with its expected revision"}));
    if (!cmd.expected_revision.has_value()) {
      if (head.has_value()) return exists;
    } else {
      if (!head.has_value() || head->project_id != cmd.project_id) {
        return NotFound("trigger_not_found", Cat({"trigger ", cmd.trigger_id,
                                                  " does not exist in project ", cmd.project_id}));
      }
      if (head->task_id != content.task_id) {
        return Conflict("trigger_task_immutable",
                        Cat({"trigger ", cmd.trigger_id, " belongs to task ", head->task_id,
                             " and cannot be rebound to task ", content.task_id}));
      }
      if (head->current_revision != *cmd.expected_revision) {
        return Conflict("revision_conflict",
                        Cat({"trigger ", cmd.trigger_id, " is at revision ",
                             std::to_string(head->current_revision), ", not the expected ",
                             std::to_string(*cmd.expected_revision)}));
      }
    }
    QL_ASSIGN_OR_RETURN(std::optional<TaskRevisionRecord> pinned,
                        LoadTaskRevision(tx, content.task_id, content.task_revision));
    if (!pinned.has_value() || pinned->content_digest != content.task_digest) {
      return Conflict("trigger_pin_stale",
                      Cat({"trigger pins task ", content.task_id, " revision ",
                           std::to_string(content.task_revision), " with digest ",
                           content.task_digest, ", which that task does not have"}));
    }
    if (content.enabled && (pinned->revision != task->current_revision || !pinned->enabled)) {
      return Conflict("trigger_pin_stale",
                      Cat({"an enabled trigger must pin the current enabled revision of task ",
                           content.task_id, " (revision ", std::to_string(task->current_revision),
                           "), not revision ", std::to_string(content.task_revision),
                           pinned->enabled ? "" : ", which is disabled"}));
    }

    if (!head.has_value()) {
      // The primary key decides between concurrent creators (see PublishTaskRevision).
      QL_ASSIGN_OR_RETURN(
          Rows inserted,
          tx.Exec("INSERT INTO trigger_heads (trigger_id, project_id, task_id, "
                  "current_revision, created_at_ms, updated_at_ms) "
                  "VALUES ($1, $2, $3, 1, $4, $4) "
                  "ON CONFLICT (trigger_id) DO NOTHING",
                  {P(cmd.trigger_id), P(cmd.project_id), P(content.task_id), P(cmd.now_ms)}));
      if (inserted.affected() != 1) {
        QL_ASSIGN_OR_RETURN(bool concurrent_replay, replayed());
        if (concurrent_replay) return Status();
        return exists;
      }
    } else {
      QL_RETURN_IF_ERROR(ExecuteCas(
          tx, Conflict("revision_conflict", Cat({"trigger ", cmd.trigger_id, " moved on"})),
          "UPDATE trigger_heads SET current_revision = $1, updated_at_ms = $2 "
          "WHERE trigger_id = $3 AND current_revision = $4",
          {P(new_revision), P(cmd.now_ms), P(cmd.trigger_id), P(*cmd.expected_revision)}));
    }
    TriggerRevisionRecord stored = content;
    stored.project_id = cmd.project_id;
    stored.trigger_id = cmd.trigger_id;
    stored.revision = new_revision;
    stored.mutation_id = cmd.mutation_id;
    stored.created_at_ms = cmd.now_ms;
    QL_RETURN_IF_ERROR(Execute(
        tx,
        "INSERT INTO trigger_revisions (trigger_id, revision, project_id, mutation_id, task_id, "
        "task_revision, task_digest, expression, timezone, misfire, enabled, content_digest, "
        "created_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
        {P(stored.trigger_id), P(stored.revision), P(stored.project_id), P(stored.mutation_id),
         P(stored.task_id), P(stored.task_revision), P(stored.task_digest), P(stored.expression),
         P(stored.timezone), P(stored.misfire), P(stored.enabled), P(stored.content_digest),
         P(stored.created_at_ms)}));
    // The schedule row follows the new revision from scratch: the cursor is recomputed from
    // this publication, the bumped state_version kills every decision taken before, and the
    // bumped claim_version with the cleared claim fences every claim taken on an older
    // revision. last_scheduled_at_ms describes the trigger's history and is kept (as SQLite).
    QL_RETURN_IF_ERROR(Execute(
        tx,
        "INSERT INTO trigger_schedules (trigger_id, project_id, trigger_revision, enabled, "
        "next_fire_at_ms, last_scheduled_at_ms, state_version, published_at_ms, exhausted, "
        "claim_owner, claim_token, claim_version, claim_expires_at_ms, updated_at_ms) "
        "VALUES ($1, $2, $3, $4, NULL, NULL, 1, $5, false, NULL, NULL, 0, NULL, $5) "
        "ON CONFLICT (trigger_id) DO UPDATE SET "
        "trigger_revision = excluded.trigger_revision, enabled = excluded.enabled, "
        "next_fire_at_ms = NULL, state_version = trigger_schedules.state_version + 1, "
        "published_at_ms = excluded.published_at_ms, exhausted = false, claim_owner = NULL, "
        "claim_token = NULL, claim_version = trigger_schedules.claim_version + 1, "
        "claim_expires_at_ms = NULL, updated_at_ms = excluded.updated_at_ms",
        {P(stored.trigger_id), P(stored.project_id), P(stored.revision), P(stored.enabled),
         P(cmd.now_ms)}));
    out = PublishTriggerResult{std::move(stored), false};
    return Status();
  }));
  return out;
}

Result<TaskHeadRecord> PostgresStore::GetTaskHead(const std::string& task_id) {
  std::optional<TaskHeadRecord> out;
  QL_RETURN_IF_ERROR(Read("reading a task", [&](Tx& tx) -> Status {
    QL_ASSIGN_OR_RETURN(out, LoadTaskHead(tx, task_id));
    return Status();
  }));
  if (!out.has_value()) {
    return NotFound("task_not_found", Cat({"task ", task_id, " does not exist"}));
  }
  return std::move(*out);
}

Result<TaskRevisionRecord> PostgresStore::GetTaskRevision(const std::string& task_id,
                                                          int64_t revision) {
  std::optional<TaskRevisionRecord> out;
  QL_RETURN_IF_ERROR(Read("reading a task revision", [&](Tx& tx) -> Status {
    QL_ASSIGN_OR_RETURN(out, LoadTaskRevision(tx, task_id, revision));
    return Status();
  }));
  if (!out.has_value()) {
    return NotFound("task_revision_not_found",
                    Cat({"task ", task_id, " has no revision ", std::to_string(revision)}));
  }
  return std::move(*out);
}

Result<Page<TaskRevisionRecord>> PostgresStore::ListTasks(const std::string& project_id,
                                                          const PageRequest& page) {
  QL_RETURN_IF_ERROR(RequireLimit("page limit", page.limit));
  std::optional<std::string> after;
  if (page.after_key.has_value()) {
    QL_ASSIGN_OR_RETURN(after, DecodeIdKey("tasks", *page.after_key));
  }
  Page<TaskRevisionRecord> out;
  QL_RETURN_IF_ERROR(Read("listing tasks", [&](Tx& tx) -> Status {
    static const std::string kFirst =
        Cat({"SELECT ", kTaskRevisionColumns,
             " FROM task_heads h JOIN task_revisions tr ON tr.task_id = h.task_id AND "
             "tr.revision = h.current_revision WHERE h.project_id = $1 ORDER BY h.task_id "
             "LIMIT $2"});
    static const std::string kAfter =
        Cat({"SELECT ", kTaskRevisionColumns,
             " FROM task_heads h JOIN task_revisions tr ON tr.task_id = h.task_id AND "
             "tr.revision = h.current_revision WHERE h.project_id = $1 AND h.task_id > $2 "
             "ORDER BY h.task_id LIMIT $3"});
    if (after.has_value()) {
      QL_ASSIGN_OR_RETURN(out.items, QueryAll<TaskRevisionRecord>(
                                         tx, kAfter, {P(project_id), P(*after), P(page.limit + 1)},
                                         ReadTaskRevision));
    } else {
      QL_ASSIGN_OR_RETURN(
          out.items, QueryAll<TaskRevisionRecord>(tx, kFirst, {P(project_id), P(page.limit + 1)},
                                                  ReadTaskRevision));
    }
    return Status();
  }));
  if (out.items.size() > static_cast<size_t>(page.limit)) {
    out.items.resize(page.limit);
    out.next_key = EncodeIdKey("tasks", out.items.back().task_id);
  }
  return out;
}

Result<std::vector<TaskRevisionRecord>> PostgresStore::ListTaskRevisions(
    const std::string& task_id) {
  std::vector<TaskRevisionRecord> out;
  bool exists = false;
  QL_RETURN_IF_ERROR(Read("listing task revisions", [&](Tx& tx) -> Status {
    QL_ASSIGN_OR_RETURN(std::optional<TaskHeadRecord> head, LoadTaskHead(tx, task_id));
    exists = head.has_value();
    static const std::string kSql = Cat({"SELECT ", kTaskRevisionColumns,
                                         " FROM task_revisions tr WHERE tr.task_id = $1 "
                                         "ORDER BY tr.revision DESC"});
    QL_ASSIGN_OR_RETURN(out,
                        QueryAll<TaskRevisionRecord>(tx, kSql, {P(task_id)}, ReadTaskRevision));
    return Status();
  }));
  if (!exists) return NotFound("task_not_found", Cat({"task ", task_id, " does not exist"}));
  return out;
}

Result<ExecutionRevisionRecord> PostgresStore::GetExecutionRevision(const std::string& id) {
  std::optional<ExecutionRevisionRecord> out;
  QL_RETURN_IF_ERROR(Read("reading an execution revision", [&](Tx& tx) -> Status {
    static const std::string kSql =
        Cat({"SELECT ", kExecutionColumns, " FROM execution_revisions e WHERE e.id = $1"});
    QL_ASSIGN_OR_RETURN(out, QueryOne<ExecutionRevisionRecord>(tx, kSql, {P(id)}, ReadExecution));
    return Status();
  }));
  if (!out.has_value()) {
    return NotFound("execution_revision_not_found",
                    Cat({"execution revision ", Quote(id), " does not exist"}));
  }
  return std::move(*out);
}

Result<ExecutionRevisionRecord> PostgresStore::FindExecutionRevision(
    const std::string& task_id, int64_t task_revision, const std::string& executor_type) {
  std::optional<ExecutionRevisionRecord> out;
  QL_RETURN_IF_ERROR(Read("reading an execution revision", [&](Tx& tx) -> Status {
    static const std::string kSql =
        Cat({"SELECT ", kExecutionColumns,
             " FROM execution_revisions e WHERE e.task_id = $1 AND e.task_revision = $2 AND "
             "e.executor_type = $3"});
    QL_ASSIGN_OR_RETURN(
        out, QueryOne<ExecutionRevisionRecord>(
                 tx, kSql, {P(task_id), P(task_revision), P(executor_type)}, ReadExecution));
    return Status();
  }));
  if (!out.has_value()) {
    return NotFound("execution_revision_not_found",
                    Cat({"task ", task_id, " revision ", std::to_string(task_revision),
                         " has no execution revision for executor ", Quote(executor_type)}));
  }
  return std::move(*out);
}

Result<TriggerHeadRecord> PostgresStore::GetTriggerHead(const std::string& trigger_id) {
  std::optional<TriggerHeadRecord> out;
  QL_RETURN_IF_ERROR(Read("reading a trigger", [&](Tx& tx) -> Status {
    QL_ASSIGN_OR_RETURN(out, LoadTriggerHead(tx, trigger_id));
    return Status();
  }));
  if (!out.has_value()) {
    return NotFound("trigger_not_found", Cat({"trigger ", trigger_id, " does not exist"}));
  }
  return std::move(*out);
}

Result<TriggerRevisionRecord> PostgresStore::GetTriggerRevision(const std::string& trigger_id,
                                                                int64_t revision) {
  std::optional<TriggerRevisionRecord> out;
  QL_RETURN_IF_ERROR(Read("reading a trigger revision", [&](Tx& tx) -> Status {
    static const std::string kSql =
        Cat({"SELECT ", kTriggerRevisionColumns,
             " FROM trigger_revisions g WHERE g.trigger_id = $1 AND g.revision = $2"});
    QL_ASSIGN_OR_RETURN(out, QueryOne<TriggerRevisionRecord>(
                                 tx, kSql, {P(trigger_id), P(revision)},
                                 [](const Rows& r, int i) { return ReadTriggerRevision(r, i); }));
    return Status();
  }));
  if (!out.has_value()) {
    return NotFound("trigger_revision_not_found",
                    Cat({"trigger ", trigger_id, " has no revision ", std::to_string(revision)}));
  }
  return std::move(*out);
}

Result<Page<TriggerRevisionRecord>> PostgresStore::ListTriggers(
    const std::string& project_id, const std::optional<std::string>& task_id,
    const PageRequest& page) {
  QL_RETURN_IF_ERROR(RequireLimit("page limit", page.limit));
  std::optional<std::string> after;
  if (page.after_key.has_value()) {
    QL_ASSIGN_OR_RETURN(after, DecodeIdKey("triggers", *page.after_key));
  }
  // One statement text per combination, each able to use an index in order.
  std::string sql = Cat({"SELECT ", kTriggerRevisionColumns,
                         " FROM trigger_heads th JOIN trigger_revisions g ON g.trigger_id = "
                         "th.trigger_id AND g.revision = th.current_revision "
                         "WHERE th.project_id = $1"});
  Params params = {P(project_id)};
  if (task_id.has_value()) {
    params.push_back(P(*task_id));
    sql += " AND th.task_id = $" + std::to_string(params.size());
  }
  if (after.has_value()) {
    params.push_back(P(*after));
    sql += " AND th.trigger_id > $" + std::to_string(params.size());
  }
  params.push_back(P(page.limit + 1));
  sql += " ORDER BY th.trigger_id LIMIT $" + std::to_string(params.size());

  Page<TriggerRevisionRecord> out;
  QL_RETURN_IF_ERROR(Read("listing triggers", [&](Tx& tx) -> Status {
    QL_ASSIGN_OR_RETURN(out.items,
                        QueryAll<TriggerRevisionRecord>(tx, sql, params, [](const Rows& r, int i) {
                          return ReadTriggerRevision(r, i);
                        }));
    return Status();
  }));
  if (out.items.size() > static_cast<size_t>(page.limit)) {
    out.items.resize(page.limit);
    out.next_key = EncodeIdKey("triggers", out.items.back().trigger_id);
  }
  return out;
}

Result<ScheduleRecord> PostgresStore::GetSchedule(const std::string& trigger_id) {
  std::optional<ScheduleRecord> out;
  QL_RETURN_IF_ERROR(Read("reading a schedule", [&](Tx& tx) -> Status {
    static const std::string kSql =
        Cat({"SELECT ", kScheduleColumns, " FROM trigger_schedules s WHERE s.trigger_id = $1"});
    QL_ASSIGN_OR_RETURN(out, QueryOne<ScheduleRecord>(tx, kSql, {P(trigger_id)}, ReadSchedule));
    return Status();
  }));
  if (!out.has_value()) {
    return NotFound("schedule_not_found", Cat({"trigger ", trigger_id, " has no schedule"}));
  }
  return std::move(*out);
}

Result<int64_t> PostgresStore::CountEnabledTriggers() {
  int64_t out = 0;
  QL_RETURN_IF_ERROR(Read("counting triggers", [&](Tx& tx) -> Status {
    QL_ASSIGN_OR_RETURN(
        std::optional<int64_t> count,
        QueryOne<int64_t>(tx,
                          "SELECT count(*) FROM trigger_heads th JOIN trigger_revisions g ON "
                          "g.trigger_id = th.trigger_id AND g.revision = th.current_revision "
                          "JOIN projects p ON p.id = th.project_id "
                          "WHERE g.enabled AND p.status = 'active'",
                          {}, [](const Rows& r, int i) { return r.Int(i, 0); }));
    out = count.value_or(0);
    return Status();
  }));
  return out;
}

// ---------------------------------------------------------------------------------------------
// Schedules

Result<std::vector<DueSchedule>> PostgresStore::ListDueSchedules(int64_t now_ms, int limit) {
  QL_RETURN_IF_ERROR(RequireLimit("due schedule limit", limit));
  std::vector<DueSchedule> out;
  QL_RETURN_IF_ERROR(Read("listing due schedules", [&](Tx& tx) -> Status {
    // NULLS FIRST: uninitialised rows lead, as in SQLite and in the index order.
    static const std::string kSql =
        Cat({"SELECT ", kScheduleColumns, ", ", kTriggerRevisionColumns, kEligibleSchedules,
             " AND (s.next_fire_at_ms IS NULL OR s.next_fire_at_ms <= $1)"
             " ORDER BY s.next_fire_at_ms NULLS FIRST, s.project_id, s.trigger_id LIMIT $2"});
    QL_ASSIGN_OR_RETURN(
        out, QueryAll<DueSchedule>(tx, kSql, {P(now_ms), P(limit)}, [](const Rows& r, int i) {
          return DueSchedule{ReadSchedule(r, i), ReadTriggerRevision(r, i, kScheduleColumnCount)};
        }));
    return Status();
  }));
  return out;
}

Result<std::optional<int64_t>> PostgresStore::EarliestDueAt() {
  std::optional<int64_t> out;
  QL_RETURN_IF_ERROR(Read("reading the earliest due time", [&](Tx& tx) -> Status {
    static const std::string kSql =
        Cat({"SELECT min(coalesce(s.next_fire_at_ms, 0))", kEligibleSchedules});
    QL_ASSIGN_OR_RETURN(std::optional<std::optional<int64_t>> row,
                        QueryOne<std::optional<int64_t>>(
                            tx, kSql, {}, [](const Rows& r, int i) { return r.OptInt(i, 0); }));
    out = row.has_value() ? *row : std::nullopt;
    return Status();
  }));
  return out;
}

Result<AdvanceOutcome> PostgresStore::ApplyScheduleAdvance(const ScheduleAdvance& advance) {
  QL_RETURN_IF_ERROR(ValidateId("trigger_id", advance.trigger_id));
  QL_RETURN_IF_ERROR(
      RequireRevision("expected_trigger_revision", advance.expected_trigger_revision));
  QL_RETURN_IF_ERROR(RequireRevision("expected_task_revision", advance.expected_task_revision));
  QL_RETURN_IF_ERROR(RequireDigest("expected_task_digest", advance.expected_task_digest));
  if (!advance.exhausted && !advance.new_next_fire_at_ms.has_value()) {
    return InvalidArgument("invalid_schedule_advance",
                           "a schedule advance must set the new cursor unless it is exhausted");
  }
  if (advance.run.has_value()) {
    const NewRun& run = *advance.run;
    QL_RETURN_IF_ERROR(ValidateNewRun(run));
    // The admitted occurrence is exactly the cursor the decision read, under its own key.
    if (run.trigger_type != TriggerTypeName(TriggerType::kCron) ||
        run.trigger_id != advance.trigger_id ||
        run.trigger_revision != advance.expected_trigger_revision ||
        run.task_revision != advance.expected_task_revision ||
        run.task_digest != advance.expected_task_digest ||
        !advance.expected_next_fire_at_ms.has_value() ||
        run.scheduled_for_ms != advance.expected_next_fire_at_ms) {
      return InvalidArgument("invalid_schedule_advance",
                             "an admitted run must be a cron run of the advanced trigger revision, "
                             "its pinned task revision and digest, scheduled for the expected "
                             "cursor");
    }
    const std::string key = CronIdempotencyKey(
        advance.trigger_id, advance.expected_trigger_revision, *advance.expected_next_fire_at_ms);
    if (run.idempotency_key != key) {
      return InvalidArgument(std::string(kReasonInvalidIdempotencyKey),
                             Cat({"a cron run must carry idempotency key ", key}));
    }
  }

  AdvanceOutcome out = AdvanceOutcome::kRaced;
  QL_RETURN_IF_ERROR(Write("advancing a schedule", [&](Tx& tx) -> Status {
    out = AdvanceOutcome::kRaced;
    // The schedule row is locked first: a publish of the trigger (which rewrites this row) and
    // a competing advance wait for this transaction, or this one waits for them. The state is
    // then read by a separate statement, whose fresh READ COMMITTED snapshot includes whatever
    // committed before the lock was granted.
    QL_ASSIGN_OR_RETURN(Rows locked, tx.Exec("SELECT s.trigger_id FROM trigger_schedules s "
                                             "WHERE s.trigger_id = $1 FOR NO KEY UPDATE",
                                             {P(advance.trigger_id)}));
    if (locked.empty()) {
      return NotFound("schedule_not_found",
                      Cat({"trigger ", advance.trigger_id, " has no schedule"}));
    }
    // Everything the decision was based on. The project, trigger and task rows are not
    // locked: the runtime role may not lock them (row locks need UPDATE), and none is needed.
    // Trigger publishes serialise on the schedule row, and the writers of projects and task
    // heads read nothing this transaction writes, so committing on what this snapshot shows
    // orders this advance before them.
    static const std::string kState =
        "SELECT s.project_id, s.trigger_revision, s.state_version, s.next_fire_at_ms, "
        "s.exhausted, s.enabled, p.status, th.current_revision, g.enabled, g.task_id, "
        "g.task_revision, g.task_digest, h.current_revision, tr.enabled, tr.content_digest "
        "FROM trigger_schedules s "
        "JOIN projects p ON p.id = s.project_id "
        "JOIN trigger_heads th ON th.trigger_id = s.trigger_id "
        "JOIN trigger_revisions g ON g.trigger_id = s.trigger_id AND "
        "g.revision = s.trigger_revision "
        "JOIN task_heads h ON h.task_id = g.task_id "
        "JOIN task_revisions tr ON tr.task_id = h.task_id AND tr.revision = h.current_revision "
        "WHERE s.trigger_id = $1";
    QL_ASSIGN_OR_RETURN(Rows state, tx.Exec(kState, {P(advance.trigger_id)}));
    if (state.empty()) {
      return NotFound("schedule_not_found",
                      Cat({"trigger ", advance.trigger_id, " has no schedule"}));
    }
    QL_RETURN_IF_ERROR(state.ExpectRows(1));
    const std::string project_id = state.Text(0, 0);
    const std::string task_id = state.Text(0, 9);
    const bool unchanged = state.Int(0, 1) == advance.expected_trigger_revision &&
                           state.Int(0, 2) == advance.expected_state_version &&
                           state.OptInt(0, 3) == advance.expected_next_fire_at_ms &&
                           !state.Bool(0, 4) && state.Bool(0, 5) &&
                           state.Text(0, 6) == kProjectActive &&
                           state.Int(0, 7) == advance.expected_trigger_revision &&
                           state.Bool(0, 8) && state.Int(0, 10) == advance.expected_task_revision &&
                           state.Text(0, 11) == advance.expected_task_digest &&
                           state.Int(0, 12) == advance.expected_task_revision &&
                           state.Bool(0, 13) && state.Text(0, 14) == advance.expected_task_digest;
    QL_RETURN_IF_ERROR(state.status());
    if (!unchanged) {
      tx.RollbackOnly();
      return Status();
    }

    std::optional<int64_t> last_scheduled;
    if (advance.run.has_value()) {
      const NewRun& run = *advance.run;
      if (run.project_id != project_id || run.task_id != task_id) {
        return InvalidArgument("invalid_schedule_advance",
                               Cat({"the admitted run must belong to project ", project_id,
                                    " and task ", task_id, " of trigger ", advance.trigger_id}));
      }
      QL_ASSIGN_OR_RETURN(bool exec_ok, ExecutionRevisionMatches(tx, run));
      QL_ASSIGN_OR_RETURN(
          std::optional<int64_t> taken,
          QueryOne<int64_t>(tx, "SELECT 1 FROM runs WHERE project_id = $1 AND idempotency_key = $2",
                            {P(run.project_id), P(*run.idempotency_key)},
                            [](const Rows& r, int i) { return r.Int(i, 0); }));
      if (!exec_ok || taken.has_value()) {
        tx.RollbackOnly();
        return Status();
      }
      Status inserted = pg::InsertQueuedRun(tx, run, run.now_ms);
      if (inserted.reason() == "idempotency_key_duplicate") {
        // Admitted meanwhile under the unique key. The failed statement aborted the
        // transaction: nothing more runs in it, the runner rolls it back.
        tx.RollbackOnly();
        return Status();
      }
      QL_RETURN_IF_ERROR(inserted);
      last_scheduled = run.scheduled_for_ms;
    }
    // The claim columns belong to the row-lease scheduler and stay as they are, except that a
    // claim that has expired by now is cleared (and its version bumped, fencing its holder):
    // a claim must outlive updated_at_ms (trigger_schedules_claim_expiry_check).
    QL_ASSIGN_OR_RETURN(
        Rows moved,
        tx.Exec("UPDATE trigger_schedules SET next_fire_at_ms = $1, exhausted = $2, "
                "last_scheduled_at_ms = coalesce($3, last_scheduled_at_ms), "
                "state_version = state_version + 1, updated_at_ms = $4, "
                "claim_owner = CASE WHEN claim_expires_at_ms <= $4 THEN NULL "
                "ELSE claim_owner END, "
                "claim_token = CASE WHEN claim_expires_at_ms <= $4 THEN NULL "
                "ELSE claim_token END, "
                "claim_version = CASE WHEN claim_expires_at_ms <= $4 THEN claim_version + 1 "
                "ELSE claim_version END, "
                "claim_expires_at_ms = CASE WHEN claim_expires_at_ms <= $4 THEN NULL "
                "ELSE claim_expires_at_ms END "
                "WHERE trigger_id = $5 AND state_version = $6",
                {P(advance.new_next_fire_at_ms), P(advance.exhausted), P(last_scheduled),
                 P(advance.now_ms), P(advance.trigger_id), P(advance.expected_state_version)}));
    if (moved.affected() != 1) {
      tx.RollbackOnly();
      return Status();
    }
    out = AdvanceOutcome::kApplied;
    return Status();
  }));
  return out;
}

// ---------------------------------------------------------------------------------------------
// Runs

Result<RunRecord> PostgresStore::CreateRun(const NewRun& run) {
  QL_RETURN_IF_ERROR(ValidateNewRun(run));
  if (run.trigger_type == TriggerTypeName(TriggerType::kCron)) {
    return InvalidArgument("invalid_trigger_type",
                           "cron runs are admitted only through a schedule advance");
  }
  RunRecord out;
  QL_RETURN_IF_ERROR(Write("creating a run", [&](Tx& tx) -> Status {
    QL_RETURN_IF_ERROR(Fence(tx, run.fence, run.project_id));
    // Read without row locks (the runtime role may not lock definitions); a publish that
    // commits after this snapshot reads nothing written here, so the run is ordered before it.
    // Concurrent creators of the same run id or idempotency key meet in the unique keys.
    QL_ASSIGN_OR_RETURN(std::optional<ProjectRecord> project, LoadProject(tx, run.project_id));
    QL_RETURN_IF_ERROR(RequireActiveProject(project, run.project_id));
    QL_ASSIGN_OR_RETURN(std::optional<TaskHeadRecord> head, LoadTaskHead(tx, run.task_id));
    if (!head.has_value() || head->project_id != run.project_id) {
      return NotFound("task_not_found",
                      Cat({"task ", run.task_id, " does not exist in project ", run.project_id}));
    }
    QL_ASSIGN_OR_RETURN(std::optional<TaskRevisionRecord> current,
                        LoadTaskRevision(tx, run.task_id, head->current_revision));
    if (head->current_revision != run.task_revision || !current.has_value() || !current->enabled ||
        current->content_digest != run.task_digest) {
      return Conflict(
          "task_revision_not_current",
          Cat({"task ", run.task_id, " revision ", std::to_string(run.task_revision),
               " with digest ", run.task_digest, " is not the task's current enabled revision (",
               std::to_string(head->current_revision), ")"}));
    }
    QL_ASSIGN_OR_RETURN(bool exec_ok, ExecutionRevisionMatches(tx, run));
    if (!exec_ok) {
      return Conflict("execution_revision_missing",
                      Cat({"execution revision ", Quote(run.execution_revision_id), " of task ",
                           run.task_id, " revision ", std::to_string(run.task_revision),
                           " for executor ", run.executor_type, " does not exist"}));
    }
    if (run.retry_of_run_id.has_value()) {
      QL_ASSIGN_OR_RETURN(std::optional<RunRecord> original, LoadRun(tx, *run.retry_of_run_id));
      if (!original.has_value()) {
        return NotFound("run_not_found",
                        Cat({"run ", *run.retry_of_run_id, " to retry does not exist"}));
      }
    }
    QL_RETURN_IF_ERROR(pg::InsertQueuedRun(tx, run, run.now_ms));
    QL_ASSIGN_OR_RETURN(out, RequireRun(tx, run.run_id));
    return Status();
  }));
  return out;
}

Result<RunRecord> PostgresStore::GetRun(const std::string& run_id) {
  RunRecord out;
  QL_RETURN_IF_ERROR(Read("reading a run", [&](Tx& tx) -> Status {
    QL_ASSIGN_OR_RETURN(out, RequireRun(tx, run_id));
    return Status();
  }));
  return out;
}

Result<RunRecord> PostgresStore::FindRunByIdempotencyKey(const std::string& project_id,
                                                         const std::string& key) {
  std::optional<RunRecord> out;
  QL_RETURN_IF_ERROR(Read("reading a run", [&](Tx& tx) -> Status {
    static const std::string kSql = Cat(
        {"SELECT ", kRunColumns, kRunFrom, " WHERE r.project_id = $1 AND r.idempotency_key = $2"});
    QL_ASSIGN_OR_RETURN(out, QueryOne<RunRecord>(tx, kSql, {P(project_id), P(key)}, ReadRun));
    return Status();
  }));
  if (!out.has_value()) {
    return NotFound("run_not_found",
                    Cat({"project ", project_id, " has no run with idempotency key ", Quote(key)}));
  }
  return std::move(*out);
}

Result<Page<RunRecord>> PostgresStore::ListRuns(const RunFilter& filter, const PageRequest& page) {
  QL_RETURN_IF_ERROR(RequireLimit("page limit", page.limit));
  if (filter.status.has_value() && !ParseRunStatus(*filter.status).has_value()) {
    return InvalidArgument("invalid_status",
                           Cat({"run status filter ", Quote(*filter.status), " is not a status"}));
  }
  std::optional<RunPosition> after;
  if (page.after_key.has_value()) {
    QL_ASSIGN_OR_RETURN(after, DecodeRunKey(*page.after_key));
  }
  // One statement text per filter combination, each able to walk its index backwards.
  std::string sql = Cat({"SELECT ", kRunColumns, kRunFrom, " WHERE true"});
  Params params;
  auto add = [&](std::string_view condition, pg::Param param) {
    params.push_back(std::move(param));
    sql += Cat({" AND ", condition, " = $", std::to_string(params.size())});
  };
  if (filter.project_id.has_value()) add("r.project_id", P(*filter.project_id));
  if (filter.task_id.has_value()) add("r.task_id", P(*filter.task_id));
  if (filter.trigger_id.has_value()) add("r.trigger_id", P(*filter.trigger_id));
  if (filter.status.has_value()) add("r.status", P(*filter.status));
  if (after.has_value()) {
    params.push_back(P(after->created_at_ms));
    params.push_back(P(after->id));
    sql += Cat({" AND (r.created_at_ms, r.id) < ($", std::to_string(params.size() - 1), ", $",
                std::to_string(params.size()), ")"});
  }
  params.push_back(P(page.limit + 1));
  sql += " ORDER BY r.created_at_ms DESC, r.id DESC LIMIT $" + std::to_string(params.size());

  Page<RunRecord> out;
  QL_RETURN_IF_ERROR(Read("listing runs", [&](Tx& tx) -> Status {
    QL_ASSIGN_OR_RETURN(out.items, QueryAll<RunRecord>(tx, sql, params, ReadRun));
    return Status();
  }));
  if (out.items.size() > static_cast<size_t>(page.limit)) {
    out.items.resize(page.limit);
    out.next_key = EncodeRunKey(out.items.back());
  }
  return out;
}

Result<std::vector<AttemptRecord>> PostgresStore::ListAttempts(const std::string& run_id) {
  std::vector<AttemptRecord> out;
  QL_RETURN_IF_ERROR(Read("listing attempts", [&](Tx& tx) -> Status {
    QL_RETURN_IF_ERROR(RequireRun(tx, run_id).status());
    static const std::string kSql = Cat({"SELECT ", kAttemptColumns,
                                         " FROM run_attempts a WHERE a.run_id = $1 "
                                         "ORDER BY a.attempt"});
    QL_ASSIGN_OR_RETURN(out, QueryAll<AttemptRecord>(tx, kSql, {P(run_id)}, ReadAttempt));
    return Status();
  }));
  return out;
}

Result<std::vector<EventRecord>> PostgresStore::ListEvents(const std::string& run_id,
                                                           int64_t after_sequence, int limit) {
  QL_RETURN_IF_ERROR(RequireLimit("event limit", limit));
  std::vector<EventRecord> out;
  QL_RETURN_IF_ERROR(Read("listing events", [&](Tx& tx) -> Status {
    QL_RETURN_IF_ERROR(RequireRun(tx, run_id).status());
    static const std::string kSql =
        Cat({"SELECT ", kEventColumns,
             " FROM run_events ev WHERE ev.run_id = $1 AND ev.sequence > $2 "
             "ORDER BY ev.sequence LIMIT $3"});
    QL_ASSIGN_OR_RETURN(
        out, QueryAll<EventRecord>(tx, kSql, {P(run_id), P(after_sequence), P(limit)}, ReadEvent));
    return Status();
  }));
  return out;
}

Result<RunRecord> PostgresStore::ApplyTransition(const RunTransitionCommand& t) {
  QL_RETURN_IF_ERROR(ValidateId("run_id", t.run_id));
  std::optional<RunStatus> run_to;
  if (t.run_to.has_value()) {
    run_to = ParseRunStatus(*t.run_to);
    if (!run_to.has_value()) {
      return InvalidArgument("invalid_status",
                             Cat({"run_to ", Quote(*t.run_to), " is not a run status"}));
    }
  }
  std::optional<AttemptStatus> attempt_to;
  if (t.attempt_to.has_value()) {
    attempt_to = ParseAttemptStatus(*t.attempt_to);
    if (!attempt_to.has_value()) {
      return InvalidArgument("invalid_status", Cat({"attempt_to ", Quote(*t.attempt_to),
                                                    " is not an attempt status"}));
    }
  }
  std::optional<AttemptStatus> expected_attempt;
  if (t.expected_attempt_status.has_value()) {
    expected_attempt = ParseAttemptStatus(*t.expected_attempt_status);
    if (!expected_attempt.has_value()) {
      return InvalidArgument("invalid_status",
                             Cat({"expected_attempt_status ", Quote(*t.expected_attempt_status),
                                  " is not an attempt status"}));
    }
  }
  const bool attempt_fields = t.pid.has_value() || t.process_start_ticks.has_value() ||
                              t.log_path.has_value() || t.attempt_started_at_ms.has_value() ||
                              t.attempt_finished_at_ms.has_value() ||
                              t.attempt_exit_code.has_value() || t.attempt_error_code.has_value() ||
                              t.attempt_error_summary.has_value();
  if ((attempt_to.has_value() || expected_attempt.has_value() || attempt_fields ||
       t.lease.has_value()) &&
      !t.attempt_id.has_value()) {
    return InvalidArgument("attempt_id_required",
                           "an attempt status or attempt field update needs attempt_id");
  }
  if (t.attempt_id.has_value()) QL_RETURN_IF_ERROR(ValidateId("attempt_id", *t.attempt_id));
  if (attempt_to.has_value() && !expected_attempt.has_value()) {
    return InvalidArgument("expected_attempt_status_required",
                           "an attempt status change needs expected_attempt_status");
  }
  if (t.new_attempt_id.has_value()) {
    QL_RETURN_IF_ERROR(ValidateId("new_attempt_id", *t.new_attempt_id));
    if (run_to != RunStatus::kQueued) {
      return InvalidArgument("invalid_transition",
                             "a new attempt is added only when the run moves back to queued");
    }
  }
  if (run_to == RunStatus::kRetryWait && !t.retry_at_ms.has_value()) {
    return InvalidArgument("retry_at_required", "a move to retry_wait needs retry_at_ms");
  }
  QL_ASSIGN_OR_RETURN(std::vector<PreparedEvent> events, PrepareEvents(t.events));

  RunRecord out;
  QL_RETURN_IF_ERROR(Write("applying a run transition", [&](Tx& tx) -> Status {
    // The run row stays locked to the end: a competing transition of the same run waits here
    // and then reads the winner's version.
    QL_ASSIGN_OR_RETURN(RunRecord run, RequireRun(tx, t.run_id, Lock::kUpdate));
    if (t.lease.has_value()) {
      QL_ASSIGN_OR_RETURN(pg::VerifiedLease lease, pg::VerifyLease(tx, *t.lease));
      if (lease.attempt_id != t.attempt_id || lease.run_id != run.id) {
        return Conflict("lease_fenced",
                        Cat({"lease ", t.lease->offer_id, " is not a lease of this attempt"}));
      }
    }
    const Status version_conflict = Conflict(
        "version_conflict", Cat({"run ", run.id, " is at version ", std::to_string(run.version),
                                 ", not the expected ", std::to_string(t.expected_version)}));
    if (run.version != t.expected_version) return version_conflict;
    QL_ASSIGN_OR_RETURN(RunStatus from, StoredRunStatus(run));
    const Status cancel_wins =
        Conflict("cancel_requested",
                 Cat({"run ", run.id, " has a cancel request; it can only stop as cancelled"}));
    if (run_to.has_value()) {
      QL_RETURN_IF_ERROR(CheckRunTransition(from, *run_to));
      if (run.cancel_requested_at_ms.has_value() && IsCancelBlocked(*run_to)) return cancel_wins;
    } else if (IsTerminal(from)) {
      return Conflict("run_terminal",
                      Cat({"run ", run.id, " is ", run.status, "; finished runs never change"}));
    }

    if (t.attempt_id.has_value()) {
      QL_ASSIGN_OR_RETURN(std::optional<AttemptRecord> attempt, LoadAttempt(tx, *t.attempt_id));
      if (!attempt.has_value() || attempt->run_id != run.id) {
        return NotFound("attempt_not_found",
                        Cat({"run ", run.id, " has no attempt ", *t.attempt_id}));
      }
      QL_ASSIGN_OR_RETURN(AttemptStatus current, StoredAttemptStatus(*attempt));
      const Status status_conflict =
          Conflict("attempt_status_conflict",
                   Cat({"attempt ", attempt->id, " is ", attempt->status, ", not the expected ",
                        t.expected_attempt_status.value_or(attempt->status)}));
      if (expected_attempt.has_value() && *expected_attempt != current) return status_conflict;
      if (attempt_to.has_value()) {
        QL_RETURN_IF_ERROR(CheckAttemptTransition(current, *attempt_to));
        if (run.cancel_requested_at_ms.has_value() && IsCancelBlocked(*attempt_to)) {
          return cancel_wins;
        }
      } else if (IsTerminal(current) && attempt_fields) {
        return Conflict("attempt_terminal", Cat({"attempt ", attempt->id, " is ", attempt->status,
                                                 "; finished attempts never change"}));
      }
      if (attempt_to.has_value() || attempt_fields) {
        const AttemptStatus next = attempt_to.value_or(current);
        std::optional<int64_t> finished = t.attempt_finished_at_ms;
        if (attempt_to.has_value() && IsTerminal(*attempt_to) && !finished.has_value()) {
          finished = t.now_ms;
        }
        QL_RETURN_IF_ERROR(ExecuteCas(
            tx, status_conflict,
            "UPDATE run_attempts SET status = $1, pid = coalesce($2, pid), "
            "process_start_ticks = coalesce($3, process_start_ticks), "
            "log_path = coalesce($4, log_path), started_at_ms = coalesce($5, started_at_ms), "
            "finished_at_ms = coalesce($6, finished_at_ms), exit_code = coalesce($7, exit_code), "
            "error_code = coalesce($8, error_code), "
            "error_summary = coalesce($9, error_summary) "
            "WHERE id = $10 AND run_id = $11 AND status = $12",
            {P(AttemptStatusName(next)), P(t.pid), P(t.process_start_ticks), P(t.log_path),
             P(t.attempt_started_at_ms), P(finished), P(t.attempt_exit_code),
             P(t.attempt_error_code), P(t.attempt_error_summary), P(attempt->id), P(run.id),
             P(AttemptStatusName(current))}));
        if (IsTerminal(next)) QL_RETURN_IF_ERROR(pg::ReleaseLease(tx, attempt->id, t.now_ms));
      }
    }

    if (t.new_attempt_id.has_value()) {
      QL_ASSIGN_OR_RETURN(std::optional<AttemptRecord> latest, LoadLatestAttempt(tx, run.id));
      if (!latest.has_value()) {
        return Corrupt("run_without_attempt", Cat({"run ", run.id, " has no attempt"}));
      }
      QL_ASSIGN_OR_RETURN(AttemptStatus latest_status, StoredAttemptStatus(*latest));
      if (!IsTerminal(latest_status)) {
        return Conflict("attempt_not_terminal",
                        Cat({"attempt ", std::to_string(latest->attempt), " of run ", run.id,
                             " is still ", latest->status}));
      }
      if (latest->attempt + 1 > run.retry_policy.max_attempts) {
        return Conflict("retry_attempts_exhausted",
                        Cat({"run ", run.id, " has used all ",
                             std::to_string(run.retry_policy.max_attempts), " attempts"}));
      }
      QL_RETURN_IF_ERROR(Execute(tx,
                                 "INSERT INTO run_attempts (id, run_id, attempt, status, "
                                 "executor_type, callback_sequence, created_at_ms) "
                                 "VALUES ($1, $2, $3, 'claimed', $4, 0, $5)",
                                 {P(*t.new_attempt_id), P(run.id), P(latest->attempt + 1),
                                  P(latest->executor_type), P(t.now_ms)}));
    }

    int64_t sequence = run.event_sequence;
    for (const PreparedEvent& event : events) {
      QL_RETURN_IF_ERROR(
          InsertEvent(tx, run.id, ++sequence, *event.event, event.payload, t.now_ms));
    }

    const RunStatus next = run_to.value_or(from);
    std::optional<int64_t> queued_at;
    if (run_to == RunStatus::kQueued) queued_at = t.now_ms;
    std::optional<int64_t> finished = t.finished_at_ms;
    if (run_to.has_value() && IsTerminal(*run_to) && !finished.has_value()) finished = t.now_ms;
    QL_RETURN_IF_ERROR(ExecuteCas(
        tx, version_conflict,
        "UPDATE runs SET status = $1, version = version + 1, event_sequence = $2, "
        "queued_at_ms = coalesce($3, queued_at_ms), started_at_ms = coalesce($4, started_at_ms), "
        "finished_at_ms = coalesce($5, finished_at_ms), retry_at_ms = coalesce($6, retry_at_ms), "
        "exit_code = coalesce($7, exit_code), error_code = coalesce($8, error_code), "
        "error_summary = coalesce($9, error_summary) WHERE id = $10 AND version = $11",
        {P(RunStatusName(next)), P(sequence), P(queued_at), P(t.started_at_ms), P(finished),
         P(t.retry_at_ms), P(t.exit_code), P(t.error_code), P(t.error_summary), P(run.id),
         P(t.expected_version)}));
    QL_ASSIGN_OR_RETURN(out, RequireRun(tx, run.id));
    return Status();
  }));
  return out;
}

Result<EventRecord> PostgresStore::AppendEvent(const std::string& run_id, const NewEvent& event,
                                               int64_t now_ms) {
  QL_RETURN_IF_ERROR(ValidateId("run_id", run_id));
  const std::vector<NewEvent> one = {event};
  QL_ASSIGN_OR_RETURN(std::vector<PreparedEvent> prepared, PrepareEvents(one));
  EventRecord out;
  QL_RETURN_IF_ERROR(Write("appending an event", [&](Tx& tx) -> Status {
    QL_ASSIGN_OR_RETURN(RunRecord run, RequireRun(tx, run_id, Lock::kUpdate));
    const int64_t sequence = run.event_sequence + 1;
    QL_RETURN_IF_ERROR(InsertEvent(tx, run.id, sequence, event, prepared.front().payload, now_ms));
    QL_RETURN_IF_ERROR(ExecuteCas(
        tx, Conflict("event_sequence_conflict", Cat({"run ", run.id, " gained an event"})),
        "UPDATE runs SET event_sequence = $1 WHERE id = $2 AND event_sequence = $3",
        {P(sequence), P(run.id), P(run.event_sequence)}));
    out = EventRecord{run.id,
                      sequence,
                      event.type,
                      event.actor_type,
                      event.attempt_id,
                      event.dedupe_key,
                      prepared.front().payload,
                      now_ms};
    return Status();
  }));
  return out;
}

Result<RunRecord> PostgresStore::RequestCancel(const std::string& run_id, const std::string& reason,
                                               std::string actor_type, int64_t now_ms,
                                               const std::optional<PolicyFence>& fence) {
  QL_RETURN_IF_ERROR(ValidateId("run_id", run_id));
  QL_RETURN_IF_ERROR(RequireActorType(actor_type));
  QL_ASSIGN_OR_RETURN(std::string reason_json, CanonicalJson(nlohmann::json{{"reason", reason}}));
  QL_ASSIGN_OR_RETURN(std::string payload,
                      CanonicalEventPayload(kEventRunCancelRequested, reason_json));
  RunRecord out;
  QL_RETURN_IF_ERROR(Write("requesting a cancel", [&](Tx& tx) -> Status {
    if (fence.has_value()) {
      // The fence's shared lock comes before the run's row lock (the governance lock order).
      QL_ASSIGN_OR_RETURN(RunRecord before, RequireRun(tx, run_id));
      Status st = Fence(tx, fence, before.project_id);
      // Cancelling stays possible in an archived project: it only stops work.
      if (!st.ok() && st.reason() != "project_archived") return st;
    }
    QL_ASSIGN_OR_RETURN(RunRecord run, RequireRun(tx, run_id, Lock::kUpdate));
    if (run.cancel_requested_at_ms.has_value()) {  // the first intent wins
      out = std::move(run);
      return Status();
    }
    QL_ASSIGN_OR_RETURN(RunStatus from, StoredRunStatus(run));
    if (IsTerminal(from)) {
      return Conflict("run_terminal",
                      Cat({"run ", run.id, " is ", run.status, "; there is nothing to cancel"}));
    }
    int64_t sequence = run.event_sequence;
    const NewEvent requested{std::string(kEventRunCancelRequested), actor_type, std::nullopt,
                             std::nullopt, payload};
    QL_RETURN_IF_ERROR(InsertEvent(tx, run.id, ++sequence, requested, payload, now_ms));

    RunStatus next = from;
    std::optional<int64_t> finished;
    if (from == RunStatus::kCreated || from == RunStatus::kQueued ||
        from == RunStatus::kRetryWait) {
      // Not started: nothing will observe the intent later, so the run stops here.
      QL_ASSIGN_OR_RETURN(std::optional<AttemptRecord> latest, LoadLatestAttempt(tx, run.id));
      if (latest.has_value()) {
        QL_ASSIGN_OR_RETURN(AttemptStatus current, StoredAttemptStatus(*latest));
        if (!IsTerminal(current)) {
          QL_RETURN_IF_ERROR(CheckAttemptTransition(current, AttemptStatus::kCancelled));
          QL_RETURN_IF_ERROR(ExecuteCas(
              tx, Conflict("attempt_status_conflict", Cat({"attempt ", latest->id, " moved on"})),
              "UPDATE run_attempts SET status = 'cancelled', "
              "finished_at_ms = coalesce(finished_at_ms, $1) WHERE id = $2 AND status = $3",
              {P(now_ms), P(latest->id), P(AttemptStatusName(current))}));
          QL_RETURN_IF_ERROR(pg::ReleaseLease(tx, latest->id, now_ms));
          const NewEvent cancelled{AttemptEventType(AttemptStatus::kCancelled), actor_type,
                                   latest->id, std::nullopt, "{}"};
          QL_RETURN_IF_ERROR(InsertEvent(tx, run.id, ++sequence, cancelled, "{}", now_ms));
        }
      }
      QL_RETURN_IF_ERROR(CheckRunTransition(from, RunStatus::kCancelled));
      next = RunStatus::kCancelled;
      finished = now_ms;
      const NewEvent cancelled{RunEventType(RunStatus::kCancelled), actor_type, std::nullopt,
                               std::nullopt, "{}"};
      QL_RETURN_IF_ERROR(InsertEvent(tx, run.id, ++sequence, cancelled, "{}", now_ms));
    }
    QL_RETURN_IF_ERROR(
        ExecuteCas(tx, Conflict("version_conflict", Cat({"run ", run.id, " moved on"})),
                   "UPDATE runs SET status = $1, version = version + 1, event_sequence = $2, "
                   "cancel_requested_at_ms = $3, cancel_reason = $4, "
                   "finished_at_ms = coalesce($5, finished_at_ms) WHERE id = $6 AND version = $7",
                   {P(RunStatusName(next)), P(sequence), P(now_ms), P(reason), P(finished),
                    P(run.id), P(run.version)}));
    QL_ASSIGN_OR_RETURN(out, RequireRun(tx, run.id));
    return Status();
  }));
  return out;
}

namespace {

// Joins each run with its retry policy and its latest attempt as `a`.
constexpr char kWithPolicyAndLatestAttempt[] =
    " JOIN run_retry_policies rp ON rp.run_id = r.id"
    " JOIN run_attempts a ON a.run_id = r.id"
    " AND a.attempt = (SELECT max(x.attempt) FROM run_attempts x WHERE x.run_id = r.id)";

}  // namespace

Result<std::vector<RunRecord>> PostgresStore::ListDispatchable(const std::string& executor_type,
                                                               int limit) {
  QL_RETURN_IF_ERROR(RequireExecutorType(executor_type));
  QL_RETURN_IF_ERROR(RequireLimit("dispatch limit", limit));
  std::vector<RunRecord> out;
  QL_RETURN_IF_ERROR(Read("listing dispatchable runs", [&](Tx& tx) -> Status {
    // The predicate and order are those of the partial index runs_dispatchable.
    static const std::string kSql =
        Cat({"SELECT ", kRunColumns, " FROM runs r", kWithPolicyAndLatestAttempt,
             " WHERE r.status = 'queued' AND r.cancel_requested_at_ms IS NULL"
             " AND a.status = 'claimed' AND a.executor_type = $1"
             // An archived project's queue is cancelled, never dispatched.
             " AND EXISTS (SELECT 1 FROM projects p WHERE p.id = r.project_id"
             " AND p.status = 'active')"
             " ORDER BY r.priority DESC, r.queued_at_ms, r.id LIMIT $2"});
    QL_ASSIGN_OR_RETURN(out, QueryAll<RunRecord>(tx, kSql, {P(executor_type), P(limit)}, ReadRun));
    return Status();
  }));
  return out;
}

Result<std::vector<RunRecord>> PostgresStore::ListActive() {
  std::vector<RunRecord> out;
  QL_RETURN_IF_ERROR(Read("listing active runs", [&](Tx& tx) -> Status {
    static const std::string kSql = Cat({"SELECT ", kRunColumns, kRunFrom,
                                         " WHERE r.status IN ('dispatching', 'running', 'lost')"
                                         " ORDER BY r.created_at_ms, r.id"});
    QL_ASSIGN_OR_RETURN(out, QueryAll<RunRecord>(tx, kSql, {}, ReadRun));
    return Status();
  }));
  return out;
}

Result<std::vector<RunRecord>> PostgresStore::ListRetryDue(int64_t now_ms, int limit) {
  QL_RETURN_IF_ERROR(RequireLimit("retry limit", limit));
  std::vector<RunRecord> out;
  QL_RETURN_IF_ERROR(Read("listing retry-due runs", [&](Tx& tx) -> Status {
    static const std::string kSql = Cat({"SELECT ", kRunColumns, kRunFrom,
                                         " WHERE r.status = 'retry_wait' AND r.retry_at_ms <= $1"
                                         " ORDER BY r.retry_at_ms, r.id LIMIT $2"});
    QL_ASSIGN_OR_RETURN(out, QueryAll<RunRecord>(tx, kSql, {P(now_ms), P(limit)}, ReadRun));
    return Status();
  }));
  return out;
}

Result<std::vector<std::pair<std::string, int64_t>>> PostgresStore::CountRunsByStatus() {
  std::vector<std::pair<std::string, int64_t>> out;
  QL_RETURN_IF_ERROR(Read("counting runs", [&](Tx& tx) -> Status {
    QL_ASSIGN_OR_RETURN(
        out,
        (QueryAll<std::pair<std::string, int64_t>>(
            tx,
            "SELECT status, count(*) FROM runs GROUP BY status "
            "ORDER BY status COLLATE \"C\"",
            {}, [](const Rows& r, int i) { return std::make_pair(r.Text(i, 0), r.Int(i, 1)); })));
    return Status();
  }));
  return out;
}

}  // namespace ql
