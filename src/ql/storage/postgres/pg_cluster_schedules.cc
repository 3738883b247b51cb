#include "ql/storage/postgres/pg_cluster_schedules.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "ql/core/canonical_json.h"
#include "ql/core/execution_plan.h"
#include "ql/core/idempotency_key.h"
#include "ql/core/ids.h"
#include "ql/storage/postgres/pg_run_rows.h"

namespace ql {
namespace {

using pg::P;
using pg::Rows;
using pg::Tx;

// The database clock in UTC milliseconds. Each statement that uses it reads it once.
constexpr char kClockMs[] = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

// A schedule row is eligible when its project is active and its current, enabled trigger
// revision pins the task's current enabled revision and digest.
#define QL_ELIGIBLE_JOINS                                                          \
  " JOIN ql3.projects p ON p.id = s.project_id"                                    \
  " JOIN ql3.trigger_heads th ON th.trigger_id = s.trigger_id"                     \
  " JOIN ql3.trigger_revisions g ON g.trigger_id = s.trigger_id AND g.revision = " \
  "s.trigger_revision"                                                             \
  " JOIN ql3.task_heads h ON h.task_id = g.task_id"                                \
  " JOIN ql3.task_revisions tr ON tr.task_id = g.task_id AND tr.revision = g.task_revision"
#define QL_ELIGIBLE_WHERE                                                                     \
  " s.enabled AND NOT s.exhausted AND p.status = 'active' AND th.current_revision = "         \
  "s.trigger_revision AND g.enabled AND h.current_revision = g.task_revision AND tr.enabled " \
  "AND tr.content_digest = g.task_digest"

constexpr char kClaimSql[] =
    "WITH clock AS MATERIALIZED (SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint "
    "AS now_ms), "
    "picked AS (SELECT s.trigger_id FROM ql3.trigger_schedules s CROSS JOIN clock" QL_ELIGIBLE_JOINS
    " WHERE" QL_ELIGIBLE_WHERE
    " AND (s.next_fire_at_ms IS NULL OR s.next_fire_at_ms <= clock.now_ms)"
    " AND (s.claim_owner IS NULL OR s.claim_expires_at_ms <= clock.now_ms)"
    " ORDER BY s.next_fire_at_ms NULLS FIRST, s.project_id, s.trigger_id"
    " LIMIT $3 FOR UPDATE OF s SKIP LOCKED) "
    "UPDATE ql3.trigger_schedules s SET claim_owner = $1, claim_token = $2::uuid, "
    "claim_version = s.claim_version + 1, claim_expires_at_ms = clock.now_ms + $4::bigint, "
    "state_version = s.state_version + 1, updated_at_ms = clock.now_ms "
    "FROM picked, clock, ql3.trigger_revisions g "
    "LEFT JOIN ql3.execution_revisions e ON e.task_id = g.task_id AND "
    "e.task_revision = g.task_revision AND e.executor_type = $5 "
    "WHERE s.trigger_id = picked.trigger_id AND g.trigger_id = s.trigger_id AND "
    "g.revision = s.trigger_revision "
    "RETURNING s.project_id, s.trigger_id, s.trigger_revision, s.next_fire_at_ms, "
    "s.last_scheduled_at_ms, s.state_version, s.published_at_ms, s.exhausted, s.updated_at_ms, "
    "s.claim_version, s.claim_expires_at_ms, clock.now_ms, "
    "g.revision, g.mutation_id, g.task_id, g.task_revision, g.task_digest, g.expression, "
    "g.timezone, g.misfire, g.enabled, g.content_digest, g.created_at_ms, e.id";

bool Before(const ScheduleClaim& a, const ScheduleClaim& b) {
  const auto& x = a.due.schedule;
  const auto& y = b.due.schedule;
  if (x.next_fire_at_ms.has_value() != y.next_fire_at_ms.has_value()) {
    return !x.next_fire_at_ms.has_value();
  }
  return std::tie(x.next_fire_at_ms, x.project_id, x.trigger_id) <
         std::tie(y.next_fire_at_ms, y.project_id, y.trigger_id);
}

// The admission's own check of the pinned execution revision: present, of this task revision
// and executor type, its plan parses and hashes to its digest, and belongs to the task digest.
Status VerifyExecution(Tx& tx, const NewRun& run) {
  QL_ASSIGN_OR_RETURN(
      Rows rows, tx.Exec("SELECT project_id, task_id, task_revision, task_digest, executor_type, "
                         "plan_json, plan_digest FROM ql3.execution_revisions WHERE id = $1",
                         {P(run.execution_revision_id)}));
  if (rows.empty()) {
    return Corrupt("execution_revision_invalid",
                   "execution revision " + run.execution_revision_id + " does not exist");
  }
  const bool matches = rows.Text(0, 0) == run.project_id && rows.Text(0, 1) == run.task_id &&
                       rows.Int(0, 2) == run.task_revision && rows.Text(0, 3) == run.task_digest &&
                       rows.Text(0, 4) == run.executor_type;
  std::string plan_text = rows.Text(0, 5);
  std::string plan_digest = rows.Text(0, 6);
  QL_RETURN_IF_ERROR(rows.status());
  Status plan_ok = [&]() -> Status {
    QL_ASSIGN_OR_RETURN(nlohmann::json json, ParseJsonStrict(plan_text));
    QL_ASSIGN_OR_RETURN(ExecutionPlan plan, PlanFromJson(json));
    QL_RETURN_IF_ERROR(VerifyPlanDigest(plan, plan_digest));
    if (plan.task_digest != run.task_digest) {
      return Corrupt("digest_mismatch", "plan of another task digest");
    }
    return Status::Ok();
  }();
  if (!matches || !plan_ok.ok()) {
    return Corrupt("execution_revision_invalid",
                   "execution revision " + run.execution_revision_id +
                       " is not a digest-valid plan of the pinned task revision" +
                       (plan_ok.ok() ? "" : ": " + plan_ok.reason()));
  }
  return Status::Ok();
}

// Checks the command itself; nothing here reads the database.
Status ValidateDecision(const ClaimDecision& d) {
  const ScheduleClaim& c = d.claim;
  const ScheduleRecord& s = c.due.schedule;
  QL_RETURN_IF_ERROR(ValidateId("trigger_id", s.trigger_id));
  if (!IsCanonicalUuid(c.token) || c.owner.empty() || c.claim_version < 1) {
    return InvalidArgument("invalid_claim", "a decision must carry the claim's full fence");
  }
  if (!d.exhausted && !d.new_next_fire_at_ms.has_value()) {
    return InvalidArgument("invalid_schedule_advance",
                           "a decision must set the new cursor unless the schedule is exhausted");
  }
  if (d.run.has_value()) {
    const NewRun& run = *d.run;
    const TriggerRevisionRecord& t = c.due.trigger;
    if (run.trigger_type != "cron" || run.trigger_id != s.trigger_id ||
        run.trigger_revision != s.trigger_revision || run.task_id != t.task_id ||
        run.task_revision != t.task_revision || run.task_digest != t.task_digest ||
        run.project_id != s.project_id || !s.next_fire_at_ms.has_value() ||
        run.scheduled_for_ms != s.next_fire_at_ms || run.attempt_id.empty() || run.run_id.empty()) {
      return InvalidArgument("invalid_schedule_advance",
                             "an admitted run must be the cron occurrence at the claimed cursor "
                             "of the claimed trigger revision and its pinned task revision");
    }
    if (run.idempotency_key !=
        CronIdempotencyKey(s.trigger_id, s.trigger_revision, *s.next_fire_at_ms)) {
      return InvalidArgument("invalid_idempotency_key",
                             "a cron run must carry the occurrence's idempotency key");
    }
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<ScheduleClaim>> PostgresClusterSchedules::ClaimDueSchedules(
    const ClaimRequest& request) {
  if (request.owner.empty() || request.owner.size() > 128 || !IsCanonicalUuid(request.token) ||
      request.limit < 1 || request.limit > 256 || request.lease_ms < 1000 ||
      request.lease_ms > 60'000) {
    return InvalidArgument("invalid_claim",
                           "a claim needs an owner of 1..128 bytes, a canonical UUID token, a "
                           "limit of 1..256 and a lease of 1000..60000 ms");
  }
  std::vector<ScheduleClaim> claims;
  QL_RETURN_IF_ERROR(pool_.Transact({}, "claiming schedules", [&](Tx& tx) -> Status {
    claims.clear();
    QL_ASSIGN_OR_RETURN(Rows rows,
                        tx.Exec(kClaimSql, {P(request.owner), P(request.token), P(request.limit),
                                            P(request.lease_ms), P("remote_worker")}));
    for (int i = 0; i < rows.size(); ++i) {
      ScheduleClaim c;
      ScheduleRecord& s = c.due.schedule;
      s.project_id = rows.Text(i, 0);
      s.trigger_id = rows.Text(i, 1);
      s.trigger_revision = rows.Int(i, 2);
      s.next_fire_at_ms = rows.OptInt(i, 3);
      s.last_scheduled_at_ms = rows.OptInt(i, 4);
      s.state_version = rows.Int(i, 5);
      s.published_at_ms = rows.Int(i, 6);
      s.exhausted = rows.Bool(i, 7);
      s.updated_at_ms = rows.Int(i, 8);
      c.claim_version = rows.Int(i, 9);
      c.expires_at_ms = rows.Int(i, 10);
      c.acquired_at_ms = rows.Int(i, 11);
      TriggerRevisionRecord& t = c.due.trigger;
      t.project_id = s.project_id;
      t.trigger_id = s.trigger_id;
      t.revision = rows.Int(i, 12);
      t.mutation_id = rows.Text(i, 13);
      t.task_id = rows.Text(i, 14);
      t.task_revision = rows.Int(i, 15);
      t.task_digest = rows.Text(i, 16);
      t.expression = rows.Text(i, 17);
      t.timezone = rows.Text(i, 18);
      t.misfire = rows.Text(i, 19);
      t.enabled = rows.Bool(i, 20);
      t.content_digest = rows.Text(i, 21);
      t.created_at_ms = rows.Int(i, 22);
      c.execution_revision_id = rows.OptText(i, 23).value_or("");
      c.owner = request.owner;
      c.token = request.token;
      claims.push_back(std::move(c));
    }
    return rows.status();
  }));
  std::sort(claims.begin(), claims.end(), Before);
  return claims;
}

Result<AdvanceOutcome> PostgresClusterSchedules::CommitClaimDecision(const ClaimDecision& d) {
  QL_RETURN_IF_ERROR(ValidateDecision(d));
  const ScheduleClaim& c = d.claim;
  const ScheduleRecord& expected = c.due.schedule;
  const TriggerRevisionRecord& t = c.due.trigger;
  AdvanceOutcome outcome = AdvanceOutcome::kRaced;
  bool duplicate_key = false;
  Status st = pool_.Transact(
      {pg::Isolation::kSerializable, false}, "admitting a claimed occurrence",
      [&](Tx& tx) -> Status {
        outcome = AdvanceOutcome::kRaced;
        duplicate_key = false;
        // Re-lock the schedule row; the same statement reads the database clock afresh.
        QL_ASSIGN_OR_RETURN(
            Rows row,
            tx.Exec(std::string("SELECT project_id, trigger_revision, state_version, "
                                "next_fire_at_ms, exhausted, claim_owner, claim_token::text, "
                                "claim_version, claim_expires_at_ms, updated_at_ms, ") +
                        kClockMs + " FROM ql3.trigger_schedules WHERE trigger_id = $1 FOR UPDATE",
                    {P(expected.trigger_id)}));
        if (row.empty()) {
          return NotFound("schedule_not_found",
                          "trigger " + expected.trigger_id + " has no schedule");
        }
        const int64_t now_ms = row.Int(0, 10);
        const int64_t row_updated = row.Int(0, 9);
        const bool fence_holds =
            row.Text(0, 0) == expected.project_id && row.Int(0, 1) == expected.trigger_revision &&
            row.Int(0, 2) == expected.state_version &&
            row.OptInt(0, 3) == expected.next_fire_at_ms && !row.Bool(0, 4) &&
            row.OptText(0, 5) == c.owner && row.OptText(0, 6) == c.token &&
            row.Int(0, 7) == c.claim_version && row.OptInt(0, 8).value_or(0) > now_ms;
        QL_RETURN_IF_ERROR(row.status());
        if (now_ms < c.acquired_at_ms || (fence_holds && now_ms < row_updated)) {
          return Corrupt("clock_regression",
                         "the database clock reads earlier than the claim's acquisition time");
        }
        if (!fence_holds) {
          tx.RollbackOnly();
          return Status::Ok();
        }
        // The definitions the decision followed, as this serializable snapshot sees them.
        QL_ASSIGN_OR_RETURN(
            Rows defs,
            tx.Exec(
                "SELECT p.status, th.current_revision, g.enabled, g.task_id, "
                "g.task_revision, g.task_digest, h.current_revision, tr.enabled, "
                "tr.content_digest "
                "FROM ql3.projects p, ql3.trigger_heads th, ql3.trigger_revisions g, "
                "ql3.task_heads h, ql3.task_revisions tr "
                "WHERE p.id = $1 AND th.trigger_id = $2 AND g.trigger_id = $2 AND "
                "g.revision = $3 AND h.task_id = g.task_id AND tr.task_id = g.task_id AND "
                "tr.revision = g.task_revision",
                {P(expected.project_id), P(expected.trigger_id), P(expected.trigger_revision)}));
        const bool current = defs.size() == 1 && defs.Text(0, 0) == "active" &&
                             defs.Int(0, 1) == expected.trigger_revision && defs.Bool(0, 2) &&
                             defs.Text(0, 3) == t.task_id && defs.Int(0, 4) == t.task_revision &&
                             defs.Text(0, 5) == t.task_digest &&
                             defs.Int(0, 6) == t.task_revision && defs.Bool(0, 7) &&
                             defs.Text(0, 8) == t.task_digest;
        QL_RETURN_IF_ERROR(defs.status());
        if (!current) {
          tx.RollbackOnly();
          return Status::Ok();
        }
        std::optional<int64_t> last_scheduled;
        if (d.run.has_value()) {
          QL_RETURN_IF_ERROR(VerifyExecution(tx, *d.run));
          Status inserted = pg::InsertQueuedRun(tx, *d.run, now_ms);
          if (inserted.reason() == "idempotency_key_duplicate") {
            duplicate_key = true;
            return inserted;  // the transaction is aborted; report raced below
          }
          QL_RETURN_IF_ERROR(inserted);
          if (write_fault_) QL_RETURN_IF_ERROR(write_fault_("run"));
          last_scheduled = d.run->scheduled_for_ms;
        }
        QL_ASSIGN_OR_RETURN(
            Rows advanced,
            tx.Exec("UPDATE ql3.trigger_schedules SET next_fire_at_ms = $2, exhausted = $3, "
                    "last_scheduled_at_ms = coalesce($4, last_scheduled_at_ms), "
                    "state_version = state_version + 1, claim_owner = NULL, claim_token = NULL, "
                    "claim_expires_at_ms = NULL, updated_at_ms = $5 "
                    "WHERE trigger_id = $1 AND state_version = $6 AND claim_owner = $7 AND "
                    "claim_token = $8::uuid AND claim_version = $9 AND claim_expires_at_ms > $5",
                    {P(expected.trigger_id), P(d.new_next_fire_at_ms), P(d.exhausted),
                     P(last_scheduled), P(now_ms), P(expected.state_version), P(c.owner),
                     P(c.token), P(c.claim_version)}));
        if (advanced.affected() != 1) {
          tx.RollbackOnly();
          return Status::Ok();
        }
        if (write_fault_) QL_RETURN_IF_ERROR(write_fault_("schedule"));
        outcome = AdvanceOutcome::kApplied;
        return Status::Ok();
      });
  if (duplicate_key) return AdvanceOutcome::kRaced;
  if (!st.ok()) return st;
  return outcome;
}

Result<std::optional<int64_t>> PostgresClusterSchedules::MsUntilNextDue() {
  std::optional<int64_t> until;
  QL_RETURN_IF_ERROR(pool_.Transact(
      {pg::Isolation::kReadCommitted, true}, "reading next due", [&](Tx& tx) -> Status {
        QL_ASSIGN_OR_RETURN(
            Rows rows,
            tx.Exec("WITH clock AS MATERIALIZED (SELECT (extract(epoch FROM clock_timestamp()) * "
                    "1000)::bigint AS now_ms) "
                    "SELECT (SELECT coalesce(s.next_fire_at_ms, 0) FROM ql3.trigger_schedules "
                    "s" QL_ELIGIBLE_JOINS " WHERE" QL_ELIGIBLE_WHERE
                    " AND (s.claim_owner IS NULL OR s.claim_expires_at_ms <= clock.now_ms)"
                    " ORDER BY s.next_fire_at_ms NULLS FIRST, s.project_id, s.trigger_id LIMIT 1), "
                    "(SELECT min(s.claim_expires_at_ms) FROM ql3.trigger_schedules s "
                    "WHERE s.claim_owner IS NOT NULL AND s.claim_expires_at_ms > clock.now_ms "
                    "AND s.enabled AND NOT s.exhausted), "
                    "clock.now_ms FROM clock"));
        std::optional<int64_t> next = rows.OptInt(0, 0);
        std::optional<int64_t> claim_frees = rows.OptInt(0, 1);
        int64_t now_ms = rows.Int(0, 2);
        QL_RETURN_IF_ERROR(rows.status());
        if (next.has_value()) until = *next - now_ms;
        if (claim_frees.has_value()) {
          int64_t frees = *claim_frees - now_ms;
          until = until.has_value() ? std::min(*until, frees) : frees;
        }
        return Status::Ok();
      }));
  return until;
}

}  // namespace ql
