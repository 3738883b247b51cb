#include "ql/storage/postgres/pg_cluster_schedules.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>

#include "ql/core/canonical_json.h"
#include "ql/core/execution_plan.h"
#include "ql/core/idempotency_key.h"
#include "ql/core/ids.h"
#include "ql/core/misfire.h"
#include "ql/core/store_commands.h"
#include "ql/core/task_spec.h"
#include "ql/storage/postgres/pg_governance.h"
#include "ql/storage/postgres/pg_run_rows.h"

namespace ql {
namespace {

using pg::P;
using pg::Rows;
using pg::Tx;

// The database clock in UTC milliseconds. Each statement that uses it reads it once.
constexpr char kClockMs[] = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

// How long before its claim's expiry an admission still commits. The reading right before
// COMMIT must leave at least this much of the lease: the transaction then lets its session sit
// idle only until the expiry, so a COMMIT that arrives later (a holder frozen between the two)
// finds its session ended and its transaction rolled back.
constexpr int64_t kCommitMarginMs = 250;
// The shortest idle-in-transaction bound an admission sets after locking its rows.
constexpr int64_t kMinIdleBoundMs = 1000;

// Locks the decisions' schedule rows in one order with one database-clock reading ($1 trigger
// ids). It also bounds how long this transaction may sit idle to the time left until the
// earliest claim expiry ($2), at least kMinIdleBoundMs and at most the session's bound ($3): a
// holder frozen while it holds the locks loses its session, and so the rows, by about the
// expiry, and other replicas take them over.
// The governance lock is taken shared first (pg_governance.h): an archive of the project either
// committed before and the definitions read next see it, or waits for this admission.
// The rows are reached by the addresses their claims wrote ($6, a TID scan), so a SERIALIZABLE
// admission predicate-locks only its own row versions and no page of an index that the other
// replicas' admissions write into; kLockByKey reaches them through the primary key instead.
// Nothing in it can be served by trigger_schedules_pkey, which the planner would otherwise pick
// for a small batch and so lock its leaf pages: each address is paired with its key ($6 and $1
// in one order), the key test is written `(...) IS TRUE`, which is no index condition, and the
// rows are locked in address order (every replica's admission locks in that one order; an
// order by key would be an ordered scan of the primary key).
#define QL_LOCK_SCHEDULES_HEAD                                                                  \
  "WITH fence AS MATERIALIZED (SELECT pg_advisory_xact_lock_shared($5::bigint) AS locked), "    \
  "clock AS MATERIALIZED (SELECT c.now_ms, set_config("                                         \
  "'idle_in_transaction_session_timeout', least(greatest($2::bigint - c.now_ms, $4::bigint), "  \
  "$3::bigint)::text, true) AS idle_bound FROM fence, (SELECT (extract(epoch FROM "             \
  "clock_timestamp()) * 1000)::bigint AS now_ms) c) "                                           \
  "SELECT s.trigger_id, s.project_id, s.trigger_revision, s.state_version, "                    \
  "s.next_fire_at_ms, s.exhausted, s.claim_owner, s.claim_token::text, "                        \
  "s.claim_version, s.claim_expires_at_ms, s.updated_at_ms, clock.now_ms, s.ctid::text "        \
  "FROM ql3.trigger_schedules s CROSS JOIN clock "
constexpr char kLockByAddress[] = QL_LOCK_SCHEDULES_HEAD
    "JOIN unnest($6::tid[], $1::text[]) AS v(at, trigger_id) ON s.ctid = v.at "
    "WHERE s.ctid = ANY($6::tid[]) AND (s.trigger_id = v.trigger_id) IS TRUE "
    "ORDER BY s.ctid FOR UPDATE OF s";
constexpr char kLockByKey[] = QL_LOCK_SCHEDULES_HEAD
    "WHERE s.trigger_id = ANY($1::text[]) ORDER BY s.trigger_id FOR UPDATE OF s";

// The fresh database-clock reading right before COMMIT; it lets the session sit idle only until
// the earliest claim expiry ($1) of the rows written.
constexpr char kCommitClock[] =
    "SELECT c.now_ms, set_config('idle_in_transaction_session_timeout', "
    "greatest($1::bigint - c.now_ms, 1)::text, true) FROM (SELECT "
    "(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms) c";

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

// The claim statement, in two parts around its LIMIT (a literal, so that the one plan a
// connection keeps is made for the batch size it serves).
constexpr char kClaimHead[] =
    "WITH clock AS MATERIALIZED (SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint "
    "AS now_ms), "
    "picked AS (SELECT s.trigger_id FROM ql3.trigger_schedules s CROSS JOIN clock" QL_ELIGIBLE_JOINS
    " WHERE" QL_ELIGIBLE_WHERE
    " AND (s.next_fire_at_ms IS NULL OR s.next_fire_at_ms <= clock.now_ms)"
    " AND (s.claim_owner IS NULL OR s.claim_expires_at_ms <= clock.now_ms)"
    " ORDER BY s.next_fire_at_ms NULLS FIRST, s.project_id, s.trigger_id"
    " LIMIT ";
constexpr char kClaimTail[] =
    " FOR UPDATE OF s SKIP LOCKED) "
    "UPDATE ql3.trigger_schedules s SET claim_owner = $1, claim_token = $2::uuid, "
    "claim_version = s.claim_version + 1, claim_expires_at_ms = clock.now_ms + $3::bigint, "
    "state_version = s.state_version + 1, updated_at_ms = clock.now_ms "
    "FROM picked, clock, ql3.trigger_revisions g "
    "LEFT JOIN ql3.execution_revisions e ON e.task_id = g.task_id AND "
    "e.task_revision = g.task_revision AND e.executor_type = $4 "
    "WHERE s.trigger_id = picked.trigger_id AND g.trigger_id = s.trigger_id AND "
    "g.revision = s.trigger_revision "
    "RETURNING s.project_id, s.trigger_id, s.trigger_revision, s.next_fire_at_ms, "
    "s.last_scheduled_at_ms, s.state_version, s.published_at_ms, s.exhausted, s.updated_at_ms, "
    "s.claim_version, s.claim_expires_at_ms, clock.now_ms, "
    "g.revision, g.mutation_id, g.task_id, g.task_revision, g.task_digest, g.expression, "
    "g.timezone, g.misfire, g.enabled, g.content_digest, g.created_at_ms, e.id, s.ctid::text, "
    "g.overlap, g.jitter_ms";

bool Before(const ScheduleClaim& a, const ScheduleClaim& b) {
  const auto& x = a.due.schedule;
  const auto& y = b.due.schedule;
  if (x.next_fire_at_ms.has_value() != y.next_fire_at_ms.has_value()) {
    return !x.next_fire_at_ms.has_value();
  }
  return std::tie(x.next_fire_at_ms, x.project_id, x.trigger_id) <
         std::tie(y.next_fire_at_ms, y.project_id, y.trigger_id);
}

// The plan of one row of execution_revisions read in the admission transaction parses, hashes
// to its digest and belongs to the row's task digest. Checked once per row and batch.
Status VerifyPlanRow(const Rows& rows, int i) {
  std::string task_digest = rows.Text(i, 4);
  std::string plan_text = rows.Text(i, 6);
  std::string plan_digest = rows.Text(i, 7);
  QL_RETURN_IF_ERROR(rows.status());
  QL_ASSIGN_OR_RETURN(nlohmann::json json, ParseJsonStrict(plan_text));
  QL_ASSIGN_OR_RETURN(ExecutionPlan plan, PlanFromJson(json));
  QL_RETURN_IF_ERROR(VerifyPlanDigest(plan, plan_digest));
  if (plan.task_digest != task_digest) {
    return Corrupt("digest_mismatch", "plan of another task digest");
  }
  return Status::Ok();
}

// The admission's own check of a pinned execution revision: row `i` is of the run's project,
// task revision, digest and executor type, and its plan passed VerifyPlanRow (`plan_ok`).
Status VerifyExecution(const Rows& rows, int i, const Status& plan_ok, const NewRun& run) {
  const bool matches = rows.Text(i, 1) == run.project_id && rows.Text(i, 2) == run.task_id &&
                       rows.Int(i, 3) == run.task_revision && rows.Text(i, 4) == run.task_digest &&
                       rows.Text(i, 5) == run.executor_type;
  QL_RETURN_IF_ERROR(rows.status());
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
  if (d.new_next_fire_at_ms.has_value() && s.next_fire_at_ms.has_value() &&
      *d.new_next_fire_at_ms <= *s.next_fire_at_ms) {
    return InvalidArgument("cursor_not_advancing",
                           "the new cursor " + std::to_string(*d.new_next_fire_at_ms) +
                               " of trigger " + s.trigger_id + " is not after its cursor " +
                               std::to_string(*s.next_fire_at_ms));
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
  // The claim commits without waiting for its WAL flush. A claim lost in a crash or failover
  // never existed: its random token matches no row, so the admission's full fence refuses it,
  // and the row is free to claim again. Admissions always commit durably. The statement runs
  // as a generic plan, made once per connection and batch size: it walks the due index in
  // claim order whatever the parameters, and planning its joins costs more than running them.
  const pg::TxOptions options{pg::Isolation::kReadCommitted, false, false, true};
  QL_RETURN_IF_ERROR(pool_.Transact(options, "claiming schedules", [&](Tx& tx) -> Status {
    claims.clear();
    QL_ASSIGN_OR_RETURN(Rows rows, tx.Exec(ClaimStatement(request.limit),
                                           {P(request.owner), P(request.token), P(request.lease_ms),
                                            P("remote_worker")}));
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
      c.row_address = rows.Text(i, 24);
      t.overlap = rows.Text(i, 25);
      t.jitter_ms = rows.Int(i, 26);
      c.owner = request.owner;
      c.token = request.token;
      claims.push_back(std::move(c));
    }
    return rows.status();
  }));
  std::sort(claims.begin(), claims.end(), Before);
  return claims;
}

std::string PostgresClusterSchedules::ClaimStatement(int limit) {
  return kClaimHead + std::to_string(limit) + kClaimTail;
}

Result<AdvanceOutcome> PostgresClusterSchedules::CommitClaimDecision(const ClaimDecision& d) {
  Result<std::vector<ClaimCommitResult>> batch = CommitClaimDecisions({d});
  if (!batch.ok()) {
    // Another writer took the occurrence's key first: this decision raced.
    if (batch.status().reason() == "idempotency_key_duplicate") return AdvanceOutcome::kRaced;
    return batch.status();
  }
  std::vector<ClaimCommitResult> results = std::move(batch).value();
  if (!results.front().error.ok()) return results.front().error;
  return results.front().outcome;
}

Result<std::vector<ClaimCommitResult>> PostgresClusterSchedules::CommitClaimDecisions(
    const std::vector<ClaimDecision>& decisions) {
  if (decisions.empty() || decisions.size() > 256) {
    return InvalidArgument("invalid_claim", "a batch holds 1..256 decisions");
  }
  std::vector<std::optional<std::string>> ids, addresses;
  int64_t earliest_claimed_expiry = INT64_MAX;
  // The rows are reached by the addresses their claims wrote while every claim has one.
  bool by_address = true;
  for (const ClaimDecision& d : decisions) {
    QL_RETURN_IF_ERROR(ValidateDecision(d));
    ids.push_back(d.claim.due.schedule.trigger_id);
    addresses.push_back(d.claim.row_address);
    by_address = by_address && !d.claim.row_address.empty();
    earliest_claimed_expiry = std::min(earliest_claimed_expiry, d.claim.expires_at_ms);
  }
  const int64_t session_idle_bound = pool_.options().session.idle_in_transaction_timeout_ms;
  // Whether the transaction looks for runs that already hold the occurrences' keys before it
  // inserts. It does not at first: the unique key refuses a second run anyway, and reading its
  // index pages would make a SERIALIZABLE admission conflict with every other replica's inserts
  // there. A refused insert reruns the transaction with the probe.
  bool probe_keys = false;
  std::vector<ClaimCommitResult> results;
  int attempts = 0;
  // Every statement reaches its rows by address or key. A sequential scan, which the planner
  // picks for some batch sizes and table states, would predicate-lock all of trigger_schedules
  // under SERIALIZABLE, and every other replica's cursor move would then conflict with it.
  pg::TxOptions options{isolation_ == AdmissionIsolation::kSerializable
                            ? pg::Isolation::kSerializable
                            : pg::Isolation::kReadCommitted,
                        false};
  options.keyed_access = true;
  const auto admit = [&](Tx& tx) -> Status {
    ++attempts;
    results.assign(decisions.size(), ClaimCommitResult{});
    std::vector<bool> go(decisions.size(), true);
    // The occurrence's key is taken already: advance past it without a run.
    std::vector<bool> already(decisions.size(), false);
    std::vector<pg::Param> lock_params = {pg::PArray(ids), P(earliest_claimed_expiry),
                                          P(std::max<int64_t>(session_idle_bound, 1)),
                                          P(kMinIdleBoundMs), P(pg::kGovernanceLockKey)};
    if (by_address) lock_params.push_back(pg::PArray(addresses));
    QL_ASSIGN_OR_RETURN(Rows rows,
                        tx.Exec(by_address ? kLockByAddress : kLockByKey, lock_params));
    std::map<std::string, int> row_of;
    for (int i = 0; i < rows.size(); ++i) row_of[rows.Text(i, 0)] = i;
    const int64_t now_ms = rows.empty() ? 0 : rows.Int(0, 11);
    QL_RETURN_IF_ERROR(rows.status());
    if (by_address && row_of.size() < std::set<std::optional<std::string>>(ids.begin(), ids.end())
                                          .size()) {
      // A row has a newer version than its claim wrote: look the rows up by key instead.
      return Busy("schedule_row_moved", "a claimed schedule row moved since its claim");
    }
    // The earliest stored claim expiry among the rows still to write.
    std::vector<int64_t> expiry(decisions.size(), 0);
    for (size_t k = 0; k < decisions.size(); ++k) {
      const ClaimDecision& d = decisions[k];
      const ScheduleClaim& c = d.claim;
      const ScheduleRecord& e = c.due.schedule;
      auto it = row_of.find(e.trigger_id);
      if (it == row_of.end()) {
        results[k].error =
            NotFound("schedule_not_found", "trigger " + e.trigger_id + " has no schedule");
        go[k] = false;
        continue;
      }
      const int i = it->second;
      const bool fence_holds =
          rows.Text(i, 1) == e.project_id && rows.Int(i, 2) == e.trigger_revision &&
          rows.Int(i, 3) == e.state_version && rows.OptInt(i, 4) == e.next_fire_at_ms &&
          !rows.Bool(i, 5) && rows.OptText(i, 6) == c.owner && rows.OptText(i, 7) == c.token &&
          rows.Int(i, 8) == c.claim_version && rows.OptInt(i, 9).value_or(0) > now_ms;
      if (now_ms < c.acquired_at_ms || (fence_holds && now_ms < rows.Int(i, 10))) {
        // The clock went backwards: fail closed for the whole batch, write nothing.
        return Corrupt("clock_regression",
                       "the database clock reads earlier than the claim's acquisition time");
      }
      go[k] = fence_holds;
      expiry[k] = rows.OptInt(i, 9).value_or(0);
    }
    QL_RETURN_IF_ERROR(rows.status());

    // The definitions each decision followed, read again after the locks; the trigger
    // revision's content is hashed again and must give its stored digest.
    QL_ASSIGN_OR_RETURN(
        Rows defs,
        tx.Exec("SELECT th.trigger_id, p.id, p.status, th.current_revision, g.enabled, "
                "g.task_id, g.task_revision, g.task_digest, h.current_revision, tr.enabled, "
                "tr.content_digest, g.expression, g.timezone, g.misfire, g.content_digest, "
                "g.overlap, tr.concurrency, g.jitter_ms "
                "FROM ql3.trigger_heads th "
                "JOIN ql3.projects p ON p.id = th.project_id "
                "JOIN ql3.trigger_revisions g ON g.trigger_id = th.trigger_id AND "
                "g.revision = th.current_revision "
                "JOIN ql3.task_heads h ON h.task_id = g.task_id "
                "JOIN ql3.task_revisions tr ON tr.task_id = g.task_id AND "
                "tr.revision = g.task_revision "
                "WHERE th.trigger_id = ANY($1::text[])",
                {pg::PArray(ids)}));
    std::map<std::string, int> def_of;
    for (int i = 0; i < defs.size(); ++i) def_of[defs.Text(i, 0)] = i;
    std::vector<std::optional<std::string>> exec_ids;
    // The overlap policy of each decision's trigger and the concurrency limit of its task.
    std::vector<std::string> overlap(decisions.size(), "allow");
    std::vector<std::optional<int64_t>> limit(decisions.size());
    for (size_t k = 0; k < decisions.size(); ++k) {
      if (!go[k]) continue;
      const ScheduleRecord& e = decisions[k].claim.due.schedule;
      const TriggerRevisionRecord& t = decisions[k].claim.due.trigger;
      auto it = def_of.find(e.trigger_id);
      const int i = it == def_of.end() ? -1 : it->second;
      go[k] = i >= 0 && defs.Text(i, 1) == e.project_id && defs.Text(i, 2) == "active" &&
              defs.Int(i, 3) == e.trigger_revision && defs.Bool(i, 4) &&
              defs.Text(i, 5) == t.task_id && defs.Int(i, 6) == t.task_revision &&
              defs.Text(i, 7) == t.task_digest && defs.Int(i, 8) == t.task_revision &&
              defs.Bool(i, 9) && defs.Text(i, 10) == t.task_digest;
      if (!go[k]) continue;
      TriggerRevisionRecord stored = t;
      stored.enabled = defs.Bool(i, 4);
      stored.task_id = defs.Text(i, 5);
      stored.task_revision = defs.Int(i, 6);
      stored.task_digest = defs.Text(i, 7);
      stored.expression = defs.Text(i, 11);
      stored.timezone = defs.Text(i, 12);
      stored.misfire = defs.Text(i, 13);
      stored.content_digest = defs.Text(i, 14);
      stored.overlap = defs.Text(i, 15);
      overlap[k] = stored.overlap;
      limit[k] = defs.OptInt(i, 16);
      stored.jitter_ms = defs.Int(i, 17);
      if (TriggerContentDigest(stored) != stored.content_digest ||
          TriggerContentDigest(t) != t.content_digest) {
        results[k].error = Corrupt("trigger_digest_mismatch",
                                   "trigger " + e.trigger_id + " revision " +
                                       std::to_string(e.trigger_revision) +
                                       " does not hash to its content digest");
        go[k] = false;
        continue;
      }
      // Another content under the same revision (the decision followed other content).
      go[k] = stored.content_digest == t.content_digest;
      if (go[k] && decisions[k].run.has_value()) {
        // The run's release time follows the stored revision's jitter window.
        if (Status release = RequireJitterRelease(*decisions[k].run, stored.jitter_ms);
            !release.ok()) {
          results[k].error = std::move(release);
          go[k] = false;
          continue;
        }
        // The cursor after the admitted occurrence, recomputed from the stored revision with
        // the stored acquisition time of the claim (the fence held) as the observation time.
        const ClaimDecision& d = decisions[k];
        if (Status next = next_fire_gate_.Check(stored, *e.next_fire_at_ms,
                                                rows.Int(row_of.at(e.trigger_id), 10),
                                                d.exhausted ? std::nullopt : d.new_next_fire_at_ms);
            !next.ok()) {
          results[k].error = std::move(next);
          go[k] = false;
          continue;
        }
        exec_ids.push_back(decisions[k].run->execution_revision_id);
      }
    }
    QL_RETURN_IF_ERROR(defs.status());

    // Each pinned execution revision must be a digest-valid plan; read each once.
    std::vector<const NewRun*> runs;
    if (!exec_ids.empty()) {
      QL_ASSIGN_OR_RETURN(
          Rows execs,
          tx.Exec("SELECT id, project_id, task_id, task_revision, task_digest, executor_type, "
                  "plan_json, plan_digest FROM ql3.execution_revisions "
                  "WHERE id = ANY($1::text[])",
                  {pg::PArray(exec_ids)}));
      std::map<std::string, int> exec_of;
      std::vector<Status> plan_ok;
      for (int i = 0; i < execs.size(); ++i) {
        exec_of[execs.Text(i, 0)] = i;
        plan_ok.push_back(VerifyPlanRow(execs, i));
      }
      QL_RETURN_IF_ERROR(execs.status());
      for (size_t k = 0; k < decisions.size(); ++k) {
        if (!go[k] || !decisions[k].run.has_value()) continue;
        const NewRun& run = *decisions[k].run;
        auto it = exec_of.find(run.execution_revision_id);
        Status valid =
            it == exec_of.end()
                ? Corrupt("execution_revision_invalid",
                          "execution revision " + run.execution_revision_id + " does not exist")
                : VerifyExecution(execs, it->second, plan_ok[it->second], run);
        if (!valid.ok()) {
          results[k].error = valid;
          go[k] = false;
          continue;
        }
        runs.push_back(&run);
      }
    }
    // An occurrence admitted already (its run exists) gets no second run; its cursor moves on
    // like an admission's, so the trigger does not stall on it. The unique occurrence index stays
    // the last word against a writer that has not committed yet.
    if (!runs.empty() && probe_keys) {
      std::vector<std::optional<std::string>> keys, triggers, revisions, scheduled;
      for (const NewRun* run : runs) {
        keys.push_back(run->idempotency_key);
        triggers.push_back(run->trigger_id);
        revisions.push_back(std::to_string(*run->trigger_revision));
        scheduled.push_back(std::to_string(*run->scheduled_for_ms));
      }
      // One probe of the unique occurrence index per occurrence (LATERAL ... LIMIT 1 keeps it
      // an index lookup whatever the statistics of `runs` say).
      QL_ASSIGN_OR_RETURN(
          Rows taken,
          tx.Exec("SELECT k.idempotency_key FROM unnest($1::text[], $2::text[], $3::bigint[], "
                  "$4::bigint[]) AS k(idempotency_key, trigger_id, trigger_revision, "
                  "scheduled_for_ms) CROSS JOIN LATERAL (SELECT 1 FROM ql3.runs r WHERE "
                  "r.trigger_type = 'cron' AND r.trigger_id = k.trigger_id AND "
                  "r.trigger_revision = k.trigger_revision AND "
                  "r.scheduled_for_ms = k.scheduled_for_ms LIMIT 1) hit",
                  {pg::PArray(keys), pg::PArray(triggers), pg::PArray(revisions),
                   pg::PArray(scheduled)}));
      std::set<std::string> admitted;
      for (int i = 0; i < taken.size(); ++i) admitted.insert(taken.Text(i, 0));
      QL_RETURN_IF_ERROR(taken.status());
      if (!admitted.empty()) {
        runs.clear();
        for (size_t k = 0; k < decisions.size(); ++k) {
          if (!go[k] || !decisions[k].run.has_value()) continue;
          if (admitted.count(*decisions[k].run->idempotency_key)) {
            already[k] = true;
          } else if (results[k].error.ok()) {
            runs.push_back(&*decisions[k].run);
          }
        }
      }
    }
    // The overlap policy and the concurrency limit (DESIGN §11). Only the occurrences of
    // triggers or tasks that set one read more, each a probe of a small partial index of the
    // unfinished runs; a refused occurrence is written as a skipped run instead.
    std::vector<bool> skipped(decisions.size(), false);
    std::vector<pg::SkippedRun> refused;
    if (!runs.empty()) {
      std::map<const NewRun*, size_t> decision_of;
      bool any_policy = false;
      for (size_t k = 0; k < decisions.size(); ++k) {
        if (!decisions[k].run.has_value()) continue;
        decision_of[&*decisions[k].run] = k;
        any_policy = any_policy || overlap[k] != "allow" || limit[k].has_value();
      }
      if (any_policy) {
        std::vector<const NewRun*> kept;
        // Runs of a task this batch admits but has not written yet.
        std::map<std::string, int64_t> unwritten;
        for (const NewRun* run : runs) {
          const size_t k = decision_of.at(run);
          QL_ASSIGN_OR_RETURN(
              std::optional<pg::SkippedRun> no,
              pg::ApplyOverlapInTx(tx, *run, overlap[k], limit[k], unwritten[run->task_id]));
          if (no.has_value()) {
            skipped[k] = true;
            refused.push_back(std::move(*no));
          } else {
            kept.push_back(run);
            ++unwritten[run->task_id];
          }
        }
        runs = std::move(kept);
      }
    }
    // Advance every schedule row under its full fence, forward only; the claim is cleared. Each
    // row is reached by the address the lock read (no index of the table serves the statement).
    std::vector<std::optional<std::string>> tid, cursor, exhausted, last, state, owner, token,
        version, at;
    int64_t earliest_expiry = INT64_MAX;
    for (size_t k = 0; k < decisions.size(); ++k) {
      if (!go[k]) continue;
      const ClaimDecision& d = decisions[k];
      tid.push_back(d.claim.due.schedule.trigger_id);
      cursor.push_back(d.new_next_fire_at_ms.has_value()
                           ? std::optional<std::string>(std::to_string(*d.new_next_fire_at_ms))
                           : std::nullopt);
      exhausted.push_back(d.exhausted ? "t" : "f");
      last.push_back(d.run.has_value() && !already[k]
                         ? std::optional<std::string>(std::to_string(*d.run->scheduled_for_ms))
                         : std::nullopt);
      state.push_back(std::to_string(d.claim.due.schedule.state_version));
      owner.push_back(d.claim.owner);
      token.push_back(d.claim.token);
      version.push_back(std::to_string(d.claim.claim_version));
      at.push_back(rows.Text(row_of[d.claim.due.schedule.trigger_id], 12));
      earliest_expiry = std::min(earliest_expiry, expiry[k]);
    }
    if (tid.empty()) return Status::Ok();
    QL_ASSIGN_OR_RETURN(
        Rows advanced,
        tx.Exec("UPDATE ql3.trigger_schedules s SET next_fire_at_ms = v.cursor, "
                "exhausted = v.exhausted, "
                "last_scheduled_at_ms = coalesce(v.last, s.last_scheduled_at_ms), "
                "state_version = s.state_version + 1, claim_owner = NULL, claim_token = NULL, "
                "claim_expires_at_ms = NULL, updated_at_ms = $9::bigint "
                "FROM unnest($1::text[], $2::bigint[], $3::boolean[], $4::bigint[], "
                "$5::bigint[], $6::text[], $7::uuid[], $8::bigint[], $10::tid[]) "
                "AS v(trigger_id, cursor, exhausted, last, state, owner, token, version, at) "
                "WHERE s.ctid = v.at AND (s.trigger_id = v.trigger_id) IS TRUE AND "
                "s.state_version = v.state AND "
                "s.claim_owner = v.owner AND s.claim_token = v.token AND "
                "s.claim_version = v.version AND s.claim_expires_at_ms > $9::bigint AND "
                "(s.next_fire_at_ms IS NULL OR v.cursor IS NULL OR "
                "v.cursor > s.next_fire_at_ms)",
                {pg::PArray(tid), pg::PArray(cursor), pg::PArray(exhausted), pg::PArray(last),
                 pg::PArray(state), pg::PArray(owner), pg::PArray(token), pg::PArray(version),
                 P(now_ms), pg::PArray(at)}));
    if (advanced.affected() != static_cast<int64_t>(tid.size())) {
      // Locked and checked above, so only a bug gets here; write nothing.
      return Conflict("schedule_raced", "a locked schedule row moved during its admission");
    }
    if (write_fault_) QL_RETURN_IF_ERROR(write_fault_("schedule", tx));
    // The runs go in last: the foreign-key checks of their attempts and events read index pages
    // that every replica's admissions insert into, and under SERIALIZABLE the shorter the time
    // from those reads to COMMIT, the less often a concurrent admission can commit in between
    // and make this one the pivot of a read/write cycle.
    QL_RETURN_IF_ERROR(pg::InsertQueuedRuns(tx, runs, now_ms));
    QL_RETURN_IF_ERROR(pg::InsertSkippedRuns(tx, refused, now_ms));
    if (write_fault_ && !(runs.empty() && refused.empty())) {
      QL_RETURN_IF_ERROR(write_fault_("run", tx));
    }

    // The fence is decided at COMMIT, not only at lock time: a holder that stalled inside this
    // transaction until its claim expired writes nothing, because another replica may take the
    // rows over from then on.
    QL_ASSIGN_OR_RETURN(Rows clock, tx.Exec(kCommitClock, {P(earliest_expiry)}));
    const int64_t commit_ms = clock.Int(0, 0);
    QL_RETURN_IF_ERROR(clock.status());
    if (commit_ms + kCommitMarginMs > earliest_expiry) {
      tx.RollbackOnly();
      return Status::Ok();  // every result stays kRaced
    }
    for (size_t k = 0; k < decisions.size(); ++k) {
      if (go[k]) {
        results[k].outcome = already[k]   ? AdvanceOutcome::kAlreadyAdmitted
                             : skipped[k] ? AdvanceOutcome::kSkipped
                                          : AdvanceOutcome::kApplied;
      }
    }
    return Status::Ok();
  };
  Status status;
  for (;;) {
    attempts = 0;
    status = pool_.Transact(options, "admitting a claimed occurrence", admit);
    retries_ += std::max(attempts - 1, 0);
    // Both reruns below repeat the whole transaction, so they count as retries too.
    if (by_address && status.reason() == "schedule_row_moved") {
      by_address = false;
    } else if (!probe_keys && status.reason() == "idempotency_key_duplicate") {
      probe_keys = true;
    } else {
      break;
    }
    ++retries_;
  }
  if (status.reason() == "retry_exhausted") ++retries_exhausted_;
  QL_RETURN_IF_ERROR(status);
  for (const ClaimCommitResult& result : results) {
    if (result.error.reason() == misfire::kReasonNextFireMismatch) next_fire_gate_.CountMismatch();
  }
  return results;
}

AdmissionRetryStats PostgresClusterSchedules::TakeAdmissionRetryStats() {
  return AdmissionRetryStats{retries_.exchange(0), retries_exhausted_.exchange(0)};
}

int64_t PostgresClusterSchedules::TakeNextFireMismatches() {
  return next_fire_gate_.TakeMismatches();
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
                    // A live claim sits only on a due row: read them through the due index.
                    "(SELECT min(s.claim_expires_at_ms) FROM ql3.trigger_schedules s "
                    "WHERE s.enabled AND NOT s.exhausted AND (s.next_fire_at_ms IS NULL OR "
                    "s.next_fire_at_ms <= clock.now_ms) AND s.claim_owner IS NOT NULL AND "
                    "s.claim_expires_at_ms > clock.now_ms), "
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
