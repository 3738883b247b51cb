#include <cstdint>
#include <string>

#include "ql/core/idempotency_key.h"
#include "ql/core/ids.h"
#include "ql/core/misfire.h"
#include "ql/core/states.h"
#include "ql/core/store_commands.h"
#include "ql/storage/postgres/pg_run_rows.h"
#include "ql/storage/postgres/pg_store.h"
#include "ql/storage/postgres/pg_store_rows.h"

namespace ql {

using pg::ExecutionRevisionMatches;
using pg::kEligibleSchedules;
using pg::kScheduleColumnCount;
using pg::kScheduleColumns;
using pg::kTriggerRevisionColumns;
using pg::P;
using pg::QueryAll;
using pg::QueryOne;
using pg::ReadSchedule;
using pg::ReadTriggerRevision;
using pg::Rows;
using pg::Tx;

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
  Status status = Write("advancing a schedule", [&](Tx& tx) -> Status {
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
        "g.task_revision, g.task_digest, h.current_revision, tr.enabled, tr.content_digest, "
        "g.overlap, tr.concurrency, g.jitter_ms, g.expression, g.timezone, g.misfire "
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
    const std::string overlap = state.Text(0, 15);
    const std::optional<int64_t> concurrency = state.OptInt(0, 16);
    const int64_t jitter_ms = state.Int(0, 17);
    TriggerRevisionRecord stored;  // what NextFireGate reads of the stored revision
    stored.trigger_id = advance.trigger_id;
    stored.revision = state.Int(0, 1);
    stored.expression = state.Text(0, 18);
    stored.timezone = state.Text(0, 19);
    stored.misfire = state.Text(0, 20);
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
      QL_ASSIGN_OR_RETURN(bool exec_ok, ExecutionRevisionMatches(tx, run));
      QL_ASSIGN_OR_RETURN(
          std::optional<int64_t> taken,
          QueryOne<int64_t>(tx,
                            "SELECT 1 FROM runs WHERE trigger_type = 'cron' AND trigger_id = $1 "
                            "AND trigger_revision = $2 AND scheduled_for_ms = $3",
                            {P(run.trigger_id), P(run.trigger_revision), P(run.scheduled_for_ms)},
                            [](const Rows& r, int i) { return r.Int(i, 0); }));
      if (!exec_ok) {
        tx.RollbackOnly();
        return Status();
      }
      already = taken.has_value();
    }
    if (advance.run.has_value() && !already) {
      const NewRun& run = *advance.run;
      QL_ASSIGN_OR_RETURN(std::optional<pg::SkippedRun> refused,
                          pg::ApplyOverlapInTx(tx, run, overlap, concurrency));
      skipped = refused.has_value();
      Status inserted = skipped ? pg::InsertSkippedRuns(tx, {*refused}, run.now_ms)
                                : pg::InsertQueuedRun(tx, run, run.now_ms);
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
    out = already   ? AdvanceOutcome::kAlreadyAdmitted
          : skipped ? AdvanceOutcome::kSkipped
                    : AdvanceOutcome::kApplied;
    return Status();
  });
  if (status.reason() == misfire::kReasonNextFireMismatch) next_fire_gate_.CountMismatch();
  QL_RETURN_IF_ERROR(status);
  return out;
}

int64_t PostgresStore::TakeNextFireMismatches() { return next_fire_gate_.TakeMismatches(); }

}  // namespace ql
