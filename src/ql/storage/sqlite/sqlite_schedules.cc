#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ql/core/idempotency_key.h"
#include "ql/core/ids.h"
#include "ql/core/misfire.h"
#include "ql/core/overlap.h"
#include "ql/core/states.h"
#include "ql/core/store_commands.h"
#include "ql/storage/sqlite/sqlite_db.h"
#include "ql/storage/sqlite/sqlite_store.h"
#include "ql/storage/sqlite/sqlite_store_rows.h"

namespace ql {

using sqlite::ExecuteCas;
using sqlite::ExecutionRevisionMatches;
using sqlite::Db;
using sqlite::InsertQueuedRun;
using sqlite::InsertSkippedRun;
using sqlite::kEligibleSchedules;
using sqlite::kScheduleColumns;
using sqlite::kTriggerRevisionColumns;
using sqlite::QueryAll;
using sqlite::QueryOne;
using sqlite::ReadSchedule;
using sqlite::ReadTriggerRevision;
using sqlite::Stmt;
using sqlite::Tx;
using sqlite::TxMode;

namespace {

// Why admission recorded an occurrence as skipped.
struct Refusal {
  std::string_view reason;  // kSkipReasonOverlap | kSkipReasonConcurrency
  std::string summary;
};

Result<std::vector<RunRecord>> UnfinishedRunsOfTrigger(Db& db, const std::string& trigger_id) {
  // Repeats the predicate of the partial index runs_unfinished_by_trigger.
  static const std::string kSql =
      Cat({"SELECT ", sqlite::kRunColumns, sqlite::kRunFrom,
           " WHERE r.trigger_id = ? AND r.", kUnfinishedRunSql, " ORDER BY r.id"});
  return QueryAll<RunRecord>(db, kSql, sqlite::ReadRun, trigger_id);
}

Result<int64_t> UnfinishedRunCountOfTask(Db& db, const std::string& task_id) {
  static const std::string kSql = Cat(
      {"SELECT count(*) FROM runs r WHERE r.task_id = ? AND r.", kUnfinishedRunSql});
  QL_ASSIGN_OR_RETURN(std::optional<int64_t> n,
                      QueryOne<int64_t>(db, kSql, [](const Stmt& s) { return s.Int(0); },
                                        task_id));
  return n.value_or(0);
}

// The overlap policy and concurrency limit of one admitted occurrence, decided in the admission
// transaction: returns the refusal when the occurrence is to be recorded as skipped; under
// `replace` it first cancels (reason "replaced") the trigger's unfinished runs. Triggers under
// `allow` of tasks without a limit read nothing.
Result<std::optional<Refusal>> ApplyOverlap(Db& db, const NewRun& run, const std::string& overlap,
                                            std::optional<int64_t> concurrency) {
  QL_ASSIGN_OR_RETURN(OverlapPolicy policy, ParseOverlapPolicy(overlap));
  if (policy == OverlapPolicy::kAllow && !concurrency.has_value()) return std::optional<Refusal>();
  std::vector<RunRecord> previous;
  if (policy != OverlapPolicy::kAllow) {
    QL_ASSIGN_OR_RETURN(previous, UnfinishedRunsOfTrigger(db, *run.trigger_id));
  }
  if (policy == OverlapPolicy::kForbid && !previous.empty()) {
    return std::optional<Refusal>(Refusal{
        kSkipReasonOverlap, Cat({"run ", previous.front().id, " of trigger ", *run.trigger_id,
                                 " is ", previous.front().status})});
  }
  if (concurrency.has_value()) {
    QL_ASSIGN_OR_RETURN(int64_t busy, UnfinishedRunCountOfTask(db, run.task_id));
    // The runs a `replace` occurrence cancels make room for it.
    if (policy == OverlapPolicy::kReplace) busy -= static_cast<int64_t>(previous.size());
    if (busy >= *concurrency) {
      return std::optional<Refusal>(
          Refusal{kSkipReasonConcurrency,
                  Cat({"task ", run.task_id, " has ", std::to_string(busy),
                       " unfinished run(s); its concurrency limit is ",
                       std::to_string(*concurrency)})});
    }
  }
  if (policy == OverlapPolicy::kReplace) {
    QL_ASSIGN_OR_RETURN(std::string reason_json,
                        sqlite::CanonicalOf(nlohmann::json{{"reason", kCancelReasonReplaced}}));
    QL_ASSIGN_OR_RETURN(std::string payload,
                        CanonicalEventPayload(kEventRunCancelRequested, reason_json));
    for (const RunRecord& old : previous) {
      if (old.cancel_requested_at_ms.has_value()) continue;  // the first intent wins
      QL_RETURN_IF_ERROR(sqlite::CancelRunInTx(db, old, std::string(kCancelReasonReplaced),
                                               run.actor_type, payload, run.now_ms));
    }
  }
  return std::optional<Refusal>();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Schedules

Result<std::vector<DueSchedule>> SqliteStore::ListDueSchedules(int64_t now_ms, int limit) {
  QL_RETURN_IF_ERROR(RequireLimit("due schedule limit", limit));
  std::vector<DueSchedule> out;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kRead, "listing due schedules", [&](Tx&) -> Status {
    static const std::string kSql =
        Cat({"SELECT ", kScheduleColumns, ", ", kTriggerRevisionColumns, kEligibleSchedules,
             " AND (s.next_fire_at_ms IS NULL OR s.next_fire_at_ms <= ?)"
             " ORDER BY s.next_fire_at_ms, s.project_id, s.trigger_id LIMIT ?"});
    QL_ASSIGN_OR_RETURN(out,
                        QueryAll<DueSchedule>(
                            *db_, kSql,
                            [](const Stmt& s) {
                              return DueSchedule{ReadSchedule(s, 0), ReadTriggerRevision(s, 9)};
                            },
                            now_ms, limit));
    return Status();
  }));
  return out;
}

Result<std::optional<int64_t>> SqliteStore::EarliestDueAt() {
  std::optional<int64_t> out;
  QL_RETURN_IF_ERROR(
      db_->Transact(TxMode::kRead, "reading the earliest due time", [&](Tx&) -> Status {
        static const std::string kSql =
            Cat({"SELECT min(coalesce(s.next_fire_at_ms, 0))", kEligibleSchedules});
        QL_ASSIGN_OR_RETURN(std::optional<std::optional<int64_t>> row,
                            QueryOne<std::optional<int64_t>>(
                                *db_, kSql, [](const Stmt& s) { return s.OptInt(0); }));
        out = row.has_value() ? *row : std::nullopt;
        return Status();
      }));
  return out;
}

Result<AdvanceOutcome> SqliteStore::ApplyScheduleAdvance(const ScheduleAdvance& advance) {
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
  Status status = db_->Transact(TxMode::kWrite, "advancing a schedule", [&](Tx& tx) -> Status {
    out = AdvanceOutcome::kRaced;
    // Everything the decision was based on, read again under the write lock.
    static const std::string kState =
        "SELECT s.project_id, s.trigger_revision, s.state_version, s.next_fire_at_ms, "
        "s.exhausted, p.status, th.current_revision, g.enabled, g.task_id, g.task_revision, "
        "g.task_digest, h.current_revision, tr.enabled, tr.content_digest, g.overlap, "
        "tr.concurrency, g.jitter_ms, g.expression, g.timezone, g.misfire "
        "FROM trigger_schedules s "
        "JOIN projects p ON p.id = s.project_id "
        "JOIN trigger_heads th ON th.trigger_id = s.trigger_id "
        "JOIN trigger_revisions g ON g.trigger_id = s.trigger_id AND "
        "g.revision = s.trigger_revision "
        "JOIN task_heads h ON h.task_id = g.task_id "
        "JOIN task_revisions tr ON tr.task_id = h.task_id AND tr.revision = h.current_revision "
        "WHERE s.trigger_id = ?";
    std::string project_id;
    std::string task_id;
    std::string overlap;
    std::optional<int64_t> concurrency;
    int64_t jitter_ms = 0;
    TriggerRevisionRecord stored;  // what NextFireGate reads of the stored revision
    bool unchanged = false;
    {
      QL_ASSIGN_OR_RETURN(Stmt state, db_->Prepare(kState));
      state.BindAll(advance.trigger_id);
      QL_ASSIGN_OR_RETURN(bool found, state.Step());
      if (!found) {
        return NotFound("schedule_not_found",
                        Cat({"trigger ", advance.trigger_id, " has no schedule"}));
      }
      project_id = state.Text(0);
      task_id = state.Text(8);
      overlap = state.Text(14);
      concurrency = state.OptInt(15);
      jitter_ms = state.Int(16);
      stored.trigger_id = advance.trigger_id;
      stored.revision = state.Int(1);
      stored.expression = state.Text(17);
      stored.timezone = state.Text(18);
      stored.misfire = state.Text(19);
      unchanged = state.Int(1) == advance.expected_trigger_revision &&
                  state.Int(2) == advance.expected_state_version &&
                  state.OptInt(3) == advance.expected_next_fire_at_ms && state.Int(4) == 0 &&
                  state.Text(5) == kProjectActive &&
                  state.Int(6) == advance.expected_trigger_revision && state.Int(7) == 1 &&
                  state.Int(9) == advance.expected_task_revision &&
                  state.Text(10) == advance.expected_task_digest &&
                  state.Int(11) == advance.expected_task_revision && state.Int(12) == 1 &&
                  state.Text(13) == advance.expected_task_digest;
    }
    if (!unchanged) {
      tx.RollbackOnly();
      return Status();
    }
    if (advance.run.has_value()) {
      // The cursor after the admitted occurrence, recomputed from the revision just read.
      QL_RETURN_IF_ERROR(
          next_fire_gate_.Check(stored, *advance.expected_next_fire_at_ms, advance.now_ms,
                                advance.exhausted ? std::nullopt : advance.new_next_fire_at_ms));
    }

    std::optional<int64_t> last_scheduled;
    // An occurrence admitted already gets no second run; the cursor still moves past it, so
    // the trigger does not stall on it.
    bool already = false;
    bool skipped = false;
    if (advance.run.has_value()) {
      const NewRun& run = *advance.run;
      if (run.project_id != project_id || run.task_id != task_id) {
        return InvalidArgument("invalid_schedule_advance",
                               Cat({"the admitted run must belong to project ", project_id,
                                    " and task ", task_id, " of trigger ", advance.trigger_id}));
      }
      QL_RETURN_IF_ERROR(RequireJitterRelease(run, jitter_ms));
      QL_ASSIGN_OR_RETURN(bool exec_ok, ExecutionRevisionMatches(*db_, run));
      QL_ASSIGN_OR_RETURN(
          std::optional<int64_t> taken,
          QueryOne<int64_t>(
              *db_, "SELECT 1 FROM runs WHERE project_id = ? AND idempotency_key = ?",
              [](const Stmt& s) { return s.Int(0); }, run.project_id, *run.idempotency_key));
      if (!exec_ok) {
        tx.RollbackOnly();
        return Status();
      }
      already = taken.has_value();
    }
    if (advance.run.has_value() && !already) {
      const NewRun& run = *advance.run;
      QL_ASSIGN_OR_RETURN(std::optional<Refusal> refused,
                          ApplyOverlap(*db_, run, overlap, concurrency));
      Status inserted = refused.has_value()
                            ? InsertSkippedRun(*db_, run, refused->reason, refused->summary)
                            : InsertQueuedRun(*db_, run);
      skipped = refused.has_value();
      if (inserted.reason() == "idempotency_key_duplicate") {
        tx.RollbackOnly();
        return Status();
      }
      QL_RETURN_IF_ERROR(inserted);
      last_scheduled = run.scheduled_for_ms;
    }
    Status cas = ExecuteCas(*db_, Conflict("schedule_raced", "the schedule row moved on"),
                            "UPDATE trigger_schedules SET next_fire_at_ms = ?, exhausted = ?, "
                            "last_scheduled_at_ms = coalesce(?, last_scheduled_at_ms), "
                            "state_version = state_version + 1, updated_at_ms = ? "
                            "WHERE trigger_id = ? AND state_version = ?",
                            advance.new_next_fire_at_ms, advance.exhausted, last_scheduled,
                            advance.now_ms, advance.trigger_id, advance.expected_state_version);
    if (cas.reason() == "schedule_raced") {
      tx.RollbackOnly();
      return Status();
    }
    QL_RETURN_IF_ERROR(cas);
    out = already   ? AdvanceOutcome::kAlreadyAdmitted
          : skipped ? AdvanceOutcome::kSkipped
                    : AdvanceOutcome::kApplied;
    return Status();
  });
  if (status.reason() == misfire::kReasonNextFireMismatch) next_fire_gate_.CountMismatch();
  QL_RETURN_IF_ERROR(status);
  return out;
}

int64_t SqliteStore::TakeNextFireMismatches() { return next_fire_gate_.TakeMismatches(); }

}  // namespace ql
