#include "ql/storage/postgres/pg_worker.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "ql/core/canonical_json.h"
#include "ql/core/digest.h"
#include "ql/core/states.h"

namespace ql::pg {
namespace {

constexpr char kNowSql[] = "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint";

Result<int64_t> DatabaseNow(Tx& tx) {
  QL_ASSIGN_OR_RETURN(Rows rows, tx.Exec(kNowSql));
  QL_RETURN_IF_ERROR(rows.ExpectRows(1));
  const int64_t now = rows.Int(0, 0);
  QL_RETURN_IF_ERROR(rows.status());
  return now;
}

std::string ByteaLiteral(std::string_view data) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "\\x";
  out.reserve(2 + data.size() * 2);
  for (unsigned char c : data) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

// The statement LockOwnSession runs.
Statement LockSessionStatement(const std::string& session_id, std::string_view lock) {
  return {std::string("SELECT ") + kSessionColumns + " FROM ql3.worker_sessions WHERE id = $1 " +
              std::string(lock),
          {P(session_id)}};
}

// Locks the session row and checks that it is this worker's current one.
Result<WorkerSessionRecord> LockOwnSession(Tx& tx, const std::string& worker_id,
                                           const std::string& session_id, int64_t generation,
                                           std::string_view lock) {
  const Statement select = LockSessionStatement(session_id, lock);
  QL_ASSIGN_OR_RETURN(Rows rows, tx.Exec(select.sql, select.params));
  if (rows.empty()) {
    return NotFound("session_not_found", "no worker session " + session_id);
  }
  WorkerSessionRecord s = ReadSession(rows, 0, 0);
  QL_RETURN_IF_ERROR(rows.status());
  if (s.worker_id != worker_id) {
    return NotFound("session_not_found", "no worker session " + session_id + " of this worker");
  }
  if (s.status == "fenced" || s.generation != generation) {
    return Conflict("session_fenced", "session " + session_id + " generation " +
                                          std::to_string(generation) +
                                          " is fenced by a newer session of this worker");
  }
  return s;
}

// The statement with which AppendRunEvent takes the run's next event sequence.
Statement NextEventSequenceStatement(const std::string& run_id, bool bump_version) {
  return {bump_version ? "UPDATE ql3.runs SET event_sequence = event_sequence + 1, "
                         "version = version + 1 WHERE id = $1 RETURNING event_sequence"
                       : "UPDATE ql3.runs SET event_sequence = event_sequence + 1 "
                         "WHERE id = $1 RETURNING event_sequence",
          {P(run_id)}};
}

// Appends one event to a locked run, bumping its event sequence (and its version when asked).
Status AppendRunEvent(Tx& tx, const std::string& run_id, bool bump_version, std::string_view type,
                      std::string_view actor, const std::optional<std::string>& attempt_id,
                      const std::optional<std::string>& dedupe, const nlohmann::json& payload,
                      int64_t now_ms) {
  QL_ASSIGN_OR_RETURN(std::string canonical, CanonicalJson(payload));
  const Statement next = NextEventSequenceStatement(run_id, bump_version);
  QL_ASSIGN_OR_RETURN(Rows seq, tx.Exec(next.sql, next.params));
  QL_RETURN_IF_ERROR(seq.ExpectRows(1));
  const int64_t sequence = seq.Int(0, 0);
  QL_RETURN_IF_ERROR(seq.status());
  return tx
      .Exec(
          "INSERT INTO ql3.run_events (run_id, sequence, type, actor_type, attempt_id, "
          "dedupe_key, payload_json, created_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
          {P(run_id), P(sequence), P(type), P(actor), P(attempt_id), P(dedupe), P(canonical),
           P(now_ms)})
      .status();
}

// The statement CancelledOffers runs.
Statement CancelledOffersStatement(const std::string& worker_id, const std::string& session_id) {
  return {"SELECT l.offer_id FROM ql3.run_dispatch_leases l "
          "JOIN ql3.worker_sessions s ON s.id = l.worker_session_id "
          "JOIN ql3.runs r ON r.id = l.run_id "
          "WHERE l.worker_session_id = $1 AND s.credential_id = $2 AND l.status = 'granted' "
          "AND r.cancel_requested_at_ms IS NOT NULL ORDER BY l.offer_id",
          {P(session_id), P(worker_id)}};
}

// The offer ids of the session's granted leases whose run has a cancel intent.
Result<std::vector<std::string>> CancelledOffers(Tx& tx, const std::string& worker_id,
                                                 const std::string& session_id) {
  const Statement select = CancelledOffersStatement(worker_id, session_id);
  QL_ASSIGN_OR_RETURN(Rows r, tx.Exec(select.sql, select.params));
  std::vector<std::string> out;
  for (int i = 0; i < r.size(); ++i) out.push_back(r.Text(i, 0));
  QL_RETURN_IF_ERROR(r.status());
  return out;
}

constexpr char kGrantedColumns[] =
    "SELECT l.offer_id, r.id, a.id, a.attempt, r.project_id, r.task_id, r.task_revision, "
    "r.task_digest, r.execution_revision_id, e.plan_json, e.plan_digest, l.lease_version, "
    "l.expires_at_ms, r.version FROM ql3.run_dispatch_leases l "
    "JOIN ql3.run_attempts a ON a.id = l.attempt_id JOIN ql3.runs r ON r.id = l.run_id "
    "JOIN ql3.execution_revisions e ON e.id = r.execution_revision_id ";

GrantedLease ReadGranted(const Rows& r, int i) {
  GrantedLease g;
  g.offer_id = r.Text(i, 0);
  g.run_id = r.Text(i, 1);
  g.attempt_id = r.Text(i, 2);
  g.attempt = static_cast<int>(r.Int(i, 3));
  g.project_id = r.Text(i, 4);
  g.task_id = r.Text(i, 5);
  g.task_revision = r.Int(i, 6);
  g.task_digest = r.Text(i, 7);
  g.execution_revision_id = r.Text(i, 8);
  g.plan_json = r.Text(i, 9);
  g.plan_digest = r.Text(i, 10);
  g.lease_version = r.Int(i, 11);
  g.lease_expires_at_ms = r.Int(i, 12);
  g.run_version = r.Int(i, 13);
  return g;
}

// The projects one candidate query looks at (the least served first; the next ones if too few
// runs).
constexpr int kMaxProjectsPerGrant = 64;

// The runs one grant takes, in grant order (DESIGN §6.6). Only runs whose plan names the
// session's pool and labels it carries, of projects its pool serves (open to every project, or
// granted), within the pool's and each project's limit of live leases in the pool, and none if
// an operator drained the worker. Projects take turns by share: the next run goes to the
// project with the fewest live leases in the pool per unit of weight (ties: the older queued
// head), so one project's backlog never queues ahead of another's new runs; within a project,
// by priority then FIFO. The pool's advisory lock (shared, or exclusive for a pool with a limit)
// orders the grant against changes to the pool and its grants; the chosen runs are locked FOR
// UPDATE SKIP LOCKED.
Result<std::vector<std::pair<std::string, std::string>>> ChooseRuns(
    Tx& tx, const std::string& worker_id, const WorkerSessionRecord& session, int64_t capacity,
    int64_t now) {
  std::vector<std::pair<std::string, std::string>> out;
  const std::string& name = session.placement.pool;
  const Statement drain = {"SELECT 1 FROM ql3.worker_drains WHERE credential_id = $1",
                           {P(worker_id)}};
  const Statement pool_row = {
      "SELECT serves_all_projects, max_running FROM ql3.worker_pools WHERE name = $1", {P(name)}};
  const Statement grant_rows = {
      "SELECT project_id, max_running, weight FROM "
      "ql3.worker_pool_grants WHERE pool = $1 ORDER BY project_id",
      {P(name)}};
  // The pool and its grants in one round trip: whether the pool has a limit.
  tx.Prefetch({pool_row, grant_rows});
  QL_ASSIGN_OR_RETURN(Rows first_pool, tx.Exec(pool_row.sql, pool_row.params));
  QL_ASSIGN_OR_RETURN(Rows first_grants, tx.Exec(grant_rows.sql, grant_rows.params));
  if (first_pool.empty()) return out;  // a pool nobody configured serves no project
  auto has_limit = [](const Rows& pool, const Rows& grants) {
    bool limited = !pool.IsNull(0, 1);
    for (int i = 0; i < grants.size(); ++i) limited = limited || !grants.IsNull(i, 1);
    return limited;
  };
  const bool exclusive = has_limit(first_pool, first_grants);
  QL_RETURN_IF_ERROR(first_grants.status());
  // The pool's lock, then everything read again under it. Every change to the pool or its grants
  // (pg_placement.cc) holds the lock exclusively: a revoke waits for the grants in flight, and a
  // grant after it reads it. A pool with a limit is granted under the exclusive lock, so its
  // live-lease counts cannot be overtaken.
  const Statement lock = {exclusive ? "SELECT pg_advisory_xact_lock(hashtextextended("
                                      "'ql3.pool:' || $1, 0))"
                                    : "SELECT pg_advisory_xact_lock_shared(hashtextextended("
                                      "'ql3.pool:' || $1, 0))",
                          {P(name)}};
  // Live leases in the pool, per project.
  const Statement live_rows = {
      "SELECT r.project_id, count(*) FROM ql3.run_dispatch_leases l "
      "JOIN ql3.worker_sessions s ON s.id = l.worker_session_id "
      "JOIN ql3.runs r ON r.id = l.run_id WHERE l.status = 'granted' "
      "AND l.expires_at_ms > $2 AND s.pool = $1 GROUP BY r.project_id",
      {P(name), P(now)}};
  // The projects with queued runs (a loose scan of the per-project dispatch index).
  const Statement queued_rows = {
      "WITH RECURSIVE p(id) AS ("
      "(SELECT project_id FROM ql3.runs WHERE status = 'queued' AND "
      "cancel_requested_at_ms IS NULL ORDER BY project_id LIMIT 1) UNION ALL "
      "SELECT (SELECT r.project_id FROM ql3.runs r WHERE r.status = 'queued' AND "
      "r.cancel_requested_at_ms IS NULL AND r.project_id > p.id ORDER BY r.project_id "
      "LIMIT 1) FROM p WHERE p.id IS NOT NULL) SELECT id FROM p WHERE id IS NOT NULL",
      {}};
  tx.Prefetch({lock, drain, pool_row, grant_rows, live_rows, queued_rows});
  QL_RETURN_IF_ERROR(tx.Exec(lock.sql, lock.params).status());
  // An operator's drain takes the lock exclusively too, so one that has returned is seen here.
  QL_ASSIGN_OR_RETURN(Rows drained, tx.Exec(drain.sql, drain.params));
  QL_RETURN_IF_ERROR(drained.status());
  if (!drained.empty()) return out;
  QL_ASSIGN_OR_RETURN(Rows pool, tx.Exec(pool_row.sql, pool_row.params));
  QL_ASSIGN_OR_RETURN(Rows grants, tx.Exec(grant_rows.sql, grant_rows.params));
  QL_ASSIGN_OR_RETURN(Rows live, tx.Exec(live_rows.sql, live_rows.params));
  QL_ASSIGN_OR_RETURN(Rows queued, tx.Exec(queued_rows.sql, queued_rows.params));
  if (pool.empty()) return out;
  // A limit set between the two reads: this pull takes nothing, the next one locks for it.
  if (has_limit(pool, grants) && !exclusive) return out;
  struct Share {
    std::optional<int64_t> max_running;
    int64_t weight = 1;
    int64_t live = 0;
    int64_t taken = 0;
  };
  std::map<std::string, Share> shares;
  for (int i = 0; i < grants.size(); ++i) {
    Share& share = shares[grants.Text(i, 0)];
    if (!grants.IsNull(i, 1)) share.max_running = grants.Int(i, 1);
    share.weight = grants.Int(i, 2);
  }
  QL_RETURN_IF_ERROR(grants.status());
  const bool serves_all = pool.Bool(0, 0);
  const int64_t pool_max = pool.IsNull(0, 1) ? -1 : pool.Int(0, 1);
  QL_RETURN_IF_ERROR(pool.status());
  int64_t pool_live = 0;
  for (int i = 0; i < live.size(); ++i) {
    const int64_t n = live.Int(i, 1);
    pool_live += n;
    auto it = shares.find(live.Text(i, 0));
    if (it != shares.end()) {
      it->second.live = n;
    } else if (serves_all) {
      shares[live.Text(i, 0)].live = n;
    }
  }
  QL_RETURN_IF_ERROR(live.status());
  if (pool_max >= 0) capacity = std::min(capacity, pool_max - pool_live);
  if (capacity <= 0) return out;

  struct Candidate {
    std::string project;
    int64_t room = 0;  // how many this project may still take in the pool
  };
  std::vector<Candidate> projects;
  for (int i = 0; i < queued.size(); ++i) {
    const std::string project = queued.Text(i, 0);
    auto it = shares.find(project);
    if (it == shares.end()) {
      if (!serves_all) continue;  // not granted to this pool
      it = shares.emplace(project, Share()).first;
    }
    const Share& share = it->second;
    const int64_t room = share.max_running.has_value()
                             ? std::min(capacity, *share.max_running - share.live)
                             : capacity;
    if (room > 0) projects.push_back({project, room});
  }
  QL_RETURN_IF_ERROR(queued.status());
  if (projects.empty()) return out;
  std::sort(projects.begin(), projects.end(), [&](const Candidate& a, const Candidate& b) {
    const Share& x = shares.at(a.project);
    const Share& y = shares.at(b.project);
    // live/weight ascending, compared without division.
    const int64_t l = x.live * y.weight;
    const int64_t r = y.live * x.weight;
    return l != r ? l < r : a.project < b.project;
  });
  // Each project's runs in its own order, then taken by turns. The projects are looked at
  // kMaxProjectsPerGrant at a time, the least served first, until enough runs are found: a
  // project with queued runs this session cannot take (another pool, labels, held) yields none,
  // and the next ones are looked at.
  std::map<std::string, std::vector<std::tuple<int64_t, std::string, std::string>>> runs;
  int64_t found = 0;
  for (size_t first = 0; first < projects.size() && found < capacity;
       first += kMaxProjectsPerGrant) {
    std::vector<std::optional<std::string>> ids;
    std::vector<std::optional<std::string>> rooms;
    for (size_t i = first; i < projects.size() && i < first + kMaxProjectsPerGrant; ++i) {
      ids.push_back(projects[i].project);
      rooms.push_back(std::to_string(projects[i].room));
    }
    QL_ASSIGN_OR_RETURN(
        Rows candidates,
        tx.Exec("SELECT c.project_id, c.run_id, c.attempt_id, c.queued_at_ms FROM "
                "unnest($1::text[], $2::text[]::int[]) AS p(id, room) CROSS JOIN LATERAL ("
                "SELECT r.project_id, r.id AS run_id, a.id AS attempt_id, r.queued_at_ms "
                "FROM ql3.runs r "
                "JOIN ql3.execution_revisions e ON e.id = r.execution_revision_id "
                "JOIN LATERAL (SELECT x.id, x.status, x.executor_type, x.started_at_ms "
                "FROM ql3.run_attempts x WHERE x.run_id = r.id ORDER BY x.attempt DESC "
                "LIMIT 1) a ON true "
                "LEFT JOIN ql3.run_dispatch_leases l ON l.attempt_id = a.id "
                "WHERE r.project_id = p.id AND r.status = 'queued' "
                "AND r.cancel_requested_at_ms IS NULL "
                // A jittered cron run is held until its queued time, the later of its
                // admission and release time on the database clock. Other runs are never
                // held, whatever the clock of the node that queued them said.
                "AND (r.queued_at_ms <= $3 OR r.queued_at_ms <= r.created_at_ms) "
                "AND a.status = 'claimed' AND a.executor_type = 'remote_worker' "
                "AND e.pool = $4 AND e.required_labels <@ $5::jsonb "
                "AND EXISTS (SELECT 1 FROM ql3.projects q WHERE q.id = r.project_id "
                "AND q.status = 'active') "
                "AND (l.attempt_id IS NULL OR l.status <> 'granted' OR "
                "(l.expires_at_ms <= $3 AND a.started_at_ms IS NULL)) "
                "ORDER BY r.priority DESC, r.queued_at_ms, r.id "
                "LIMIT p.room FOR UPDATE OF r SKIP LOCKED) c",
                {PArray(ids), PArray(rooms), P(now), P(session.placement.pool),
                 P(nlohmann::json(session.placement.labels).dump())}));
    for (int i = 0; i < candidates.size(); ++i) {
      runs[candidates.Text(i, 0)].emplace_back(candidates.Int(i, 3), candidates.Text(i, 1),
                                               candidates.Text(i, 2));
    }
    found += candidates.size();
    QL_RETURN_IF_ERROR(candidates.status());
  }
  std::map<std::string, size_t> cursor;
  while (static_cast<int64_t>(out.size()) < capacity) {
    const std::string* best = nullptr;
    for (const auto& [project, list] : runs) {
      if (cursor[project] >= list.size()) continue;
      if (best == nullptr) {
        best = &project;
        continue;
      }
      const Share& x = shares.at(project);
      const Share& y = shares.at(*best);
      const int64_t l = (x.live + x.taken) * y.weight;
      const int64_t r = (y.live + y.taken) * x.weight;
      const int64_t head_x = std::get<0>(list[cursor[project]]);
      const int64_t head_y = std::get<0>(runs.at(*best)[cursor[*best]]);
      if (l < r || (l == r && head_x < head_y)) best = &project;
    }
    if (best == nullptr) break;
    const auto& [queued_at, run_id, attempt_id] = runs.at(*best)[cursor[*best]++];
    out.emplace_back(run_id, attempt_id);
    ++shares.at(*best).taken;
  }
  return out;
}

}  // namespace

const char kSessionColumns[] =
    "id, credential_id, generation, status, max_concurrent_runs, available_slots, version, "
    "heartbeat_at_ms, expires_at_ms, pool, labels::text, agent_version";

std::map<std::string, std::string> LabelsFromText(const std::string& text) {
  std::map<std::string, std::string> out;
  const nlohmann::json labels = nlohmann::json::parse(text, nullptr, false);
  if (!labels.is_object()) return out;
  for (const auto& [key, value] : labels.items()) {
    if (value.is_string()) out[key] = value.get<std::string>();
  }
  return out;
}

WorkerSessionRecord ReadSession(const Rows& r, int i, int first) {
  WorkerSessionRecord s;
  s.id = r.Text(i, first + 0);
  s.worker_id = r.Text(i, first + 1);
  s.generation = r.Int(i, first + 2);
  s.status = r.Text(i, first + 3);
  s.max_concurrent_runs = static_cast<int>(r.Int(i, first + 4));
  s.available_slots = static_cast<int>(r.Int(i, first + 5));
  s.version = r.Int(i, first + 6);
  s.heartbeat_at_ms = r.Int(i, first + 7);
  s.expires_at_ms = r.Int(i, first + 8);
  s.placement.pool = r.Text(i, first + 9);
  s.placement.labels = LabelsFromText(r.Text(i, first + 10));
  s.agent_version = r.Text(i, first + 11);
  return s;
}

// ---------------------------------------------------------------------------------------------
// Lease fence

std::vector<Statement> VerifyLeaseStatements(const LeaseFence& fence) {
  return {{"SELECT l.attempt_id, l.run_id, l.worker_session_id, l.session_generation, "
           "l.token_digest, l.status, l.expires_at_ms, l.lease_version, s.credential_id, "
           "s.status FROM ql3.run_dispatch_leases l "
           "JOIN ql3.worker_sessions s ON s.id = l.worker_session_id "
           "WHERE l.offer_id = $1 FOR UPDATE OF l FOR KEY SHARE OF s",
           {P(fence.offer_id)}},
          {kNowSql, {}}};
}

Result<VerifiedLease> VerifyLease(Tx& tx, const LeaseFence& fence) {
  const Statement lock = VerifyLeaseStatements(fence).front();
  QL_ASSIGN_OR_RETURN(Rows rows, tx.Exec(lock.sql, lock.params));
  if (rows.empty()) return NotFound("lease_not_found", "no lease has offer id " + fence.offer_id);
  VerifiedLease out;
  out.attempt_id = rows.Text(0, 0);
  out.run_id = rows.Text(0, 1);
  const std::string session_id = rows.Text(0, 2);
  const int64_t generation = rows.Int(0, 3);
  const std::string digest = rows.Text(0, 4);
  const std::string status = rows.Text(0, 5);
  const int64_t expires = rows.Int(0, 6);
  out.lease_version = rows.Int(0, 7);
  const std::string worker_id = rows.Text(0, 8);
  const std::string session_status = rows.Text(0, 9);
  QL_RETURN_IF_ERROR(rows.status());
  const std::string lease = "lease " + fence.offer_id;
  if (worker_id != fence.worker_id || session_id != fence.session_id ||
      generation != fence.generation) {
    return Conflict("lease_fenced", lease + " is held by another worker session");
  }
  if (session_status == "fenced") {
    return Conflict("session_fenced",
                    "session " + session_id + " is fenced by a newer session of this worker");
  }
  if (!ConstantTimeEquals(digest, fence.token_digest)) {
    return Conflict("lease_fenced", lease + " was granted under another lease token");
  }
  if (status != "granted") {
    return Conflict("attempt_finished", "the attempt of " + lease + " has ended");
  }
  QL_ASSIGN_OR_RETURN(out.now_ms, DatabaseNow(tx));
  if (expires <= out.now_ms) {
    return Conflict("lease_expired", lease + " expired by the database clock");
  }
  return out;
}

Statement ReleaseLeaseStatement(const std::string& attempt_id, int64_t now_ms) {
  return {"UPDATE ql3.run_dispatch_leases SET status = 'released', released_at_ms = $2 "
          "WHERE attempt_id = $1 AND status = 'granted'",
          {P(attempt_id), P(now_ms)}};
}

Status ReleaseLease(Tx& tx, const std::string& attempt_id, int64_t now_ms) {
  const Statement release = ReleaseLeaseStatement(attempt_id, now_ms);
  return tx.Exec(release.sql, release.params).status();
}

// ---------------------------------------------------------------------------------------------
// Sessions (worker-ingress role)

Result<std::string> PostgresWorkerSessions::AuthenticateWorker(const std::string& token_digest) {
  std::optional<std::string> id;
  QL_RETURN_IF_ERROR(pool_.Transact(
      {Isolation::kReadCommitted, true}, "authenticating a worker", [&](Tx& tx) -> Status {
        QL_ASSIGN_OR_RETURN(Rows rows,
                            tx.Exec("SELECT id FROM ql3.worker_credentials WHERE token_digest = "
                                    "$1 AND revoked_at_ms IS NULL",
                                    {P(token_digest)}));
        if (!rows.empty()) id = rows.Text(0, 0);
        return rows.status();
      }));
  if (!id.has_value()) return NotFound("unauthorized", "the worker token is unknown or revoked");
  return *id;
}

Result<WorkerSessionRecord> PostgresWorkerSessions::RegisterSession(
    const RegisterSessionCommand& c) {
  WorkerSessionRecord out;
  QL_RETURN_IF_ERROR(pool_.Transact({}, "registering a worker session", [&](Tx& tx) -> Status {
    // Registrations of one worker are serialised, so generations are consecutive.
    QL_RETURN_IF_ERROR(
        tx.Exec("SELECT pg_advisory_xact_lock(hashtextextended('ql3.worker:' || $1, 0))",
                {P(c.worker_id)})
            .status());
    // The credential decides the pool: a worker that names another is refused, one that names
    // none registers in its credential's.
    QL_ASSIGN_OR_RETURN(Rows bound,
                        tx.Exec("SELECT pool FROM ql3.worker_credentials WHERE id = $1 AND "
                                "revoked_at_ms IS NULL",
                                {P(c.worker_id)}));
    if (bound.empty()) {
      QL_RETURN_IF_ERROR(bound.status());
      return NotFound("unauthorized", "the worker token is unknown or revoked");
    }
    const std::string pool = bound.Text(0, 0);
    QL_RETURN_IF_ERROR(bound.status());
    if (!c.placement.pool.empty() && c.placement.pool != pool) {
      return PermissionDenied("pool_not_allowed",
                              "this worker's credential is bound to pool '" + pool +
                                  "'; it cannot register in pool '" + c.placement.pool +
                                  "' (mint a token for that pool with ql-cluster worker-token "
                                  "create NAME --pool " +
                                  c.placement.pool + ")");
    }
    QL_ASSIGN_OR_RETURN(int64_t now, DatabaseNow(tx));
    QL_ASSIGN_OR_RETURN(Rows last, tx.Exec("SELECT coalesce(max(generation), 0) FROM "
                                           "ql3.worker_sessions WHERE credential_id = $1",
                                           {P(c.worker_id)}));
    QL_RETURN_IF_ERROR(last.ExpectRows(1));
    const int64_t generation = last.Int(0, 0) + 1;
    QL_RETURN_IF_ERROR(last.status());
    // FOR UPDATE, the one lock that conflicts with the FOR KEY SHARE a lease step holds on its
    // session (VerifyLease): the fence waits for the steps in flight, and a step after it reads
    // the session fenced. The UPDATE alone would take FOR NO KEY UPDATE and pass them by.
    QL_RETURN_IF_ERROR(tx.Exec("SELECT 1 FROM ql3.worker_sessions WHERE credential_id = $1 AND "
                               "status <> 'fenced' FOR UPDATE",
                               {P(c.worker_id)})
                           .status());
    QL_RETURN_IF_ERROR(tx.Exec("UPDATE ql3.worker_sessions SET status = 'fenced', "
                               "available_slots = 0, version = version + 1, updated_at_ms = $2 "
                               "WHERE credential_id = $1 AND status <> 'fenced'",
                               {P(c.worker_id), P(now)})
                           .status());
    QL_ASSIGN_OR_RETURN(
        Rows rows,
        tx.Exec(std::string("INSERT INTO ql3.worker_sessions (id, credential_id, generation, "
                            "status, capabilities_json, max_concurrent_runs, available_slots, "
                            "version, heartbeat_at_ms, expires_at_ms, created_at_ms, "
                            "updated_at_ms, pool, labels, agent_version) VALUES ($1, $2, $3, "
                            "'active', $4, $5, $6, 1, $7, $8, $7, $7, $9, $10::jsonb, $11) "
                            "RETURNING ") +
                    kSessionColumns,
                {P(c.session_id), P(c.worker_id), P(generation), P(c.capabilities_json),
                 P(c.max_concurrent_runs), P(c.available_slots), P(now), P(now + c.ttl_ms), P(pool),
                 P(nlohmann::json(c.placement.labels).dump()), P(c.agent_version)}));
    QL_RETURN_IF_ERROR(rows.ExpectRows(1));
    out = ReadSession(rows, 0, 0);
    return rows.status();
  }));
  return out;
}

Result<WorkerSessionRecord> PostgresWorkerSessions::Heartbeat(const std::string& worker_id,
                                                              const std::string& session_id,
                                                              int64_t generation,
                                                              int available_slots, int64_t ttl_ms) {
  WorkerSessionRecord out;
  QL_RETURN_IF_ERROR(pool_.Transact({}, "recording a worker heartbeat", [&](Tx& tx) -> Status {
    QL_ASSIGN_OR_RETURN(WorkerSessionRecord s,
                        LockOwnSession(tx, worker_id, session_id, generation, "FOR NO KEY UPDATE"));
    if (s.status == "offline") {
      return Conflict("session_expired",
                      "session " + session_id + " is offline; register a new session");
    }
    if (available_slots > s.max_concurrent_runs) {
      return InvalidArgument("invalid_argument", "available_slots " +
                                                     std::to_string(available_slots) +
                                                     " exceeds max_concurrent_runs " +
                                                     std::to_string(s.max_concurrent_runs));
    }
    QL_ASSIGN_OR_RETURN(int64_t now, DatabaseNow(tx));
    QL_ASSIGN_OR_RETURN(
        Rows rows,
        tx.Exec(std::string("UPDATE ql3.worker_sessions SET heartbeat_at_ms = $2, "
                            "expires_at_ms = $3, available_slots = CASE WHEN status = 'active' "
                            "THEN $4 ELSE 0 END, version = version + 1, updated_at_ms = $2 "
                            "WHERE id = $1 RETURNING ") +
                    kSessionColumns,
                {P(session_id), P(now), P(now + ttl_ms), P(available_slots)}));
    QL_RETURN_IF_ERROR(rows.ExpectRows(1));
    out = ReadSession(rows, 0, 0);
    return rows.status();
  }));
  return out;
}

Result<WorkerSessionRecord> PostgresWorkerSessions::SetSessionStatus(const std::string& worker_id,
                                                                     const std::string& session_id,
                                                                     int64_t generation,
                                                                     const std::string& status) {
  if (status != "draining" && status != "offline") {
    return InvalidArgument("invalid_argument", "a session can only be set draining or offline");
  }
  WorkerSessionRecord out;
  QL_RETURN_IF_ERROR(pool_.Transact({}, "changing a worker session", [&](Tx& tx) -> Status {
    QL_ASSIGN_OR_RETURN(WorkerSessionRecord s,
                        LockOwnSession(tx, worker_id, session_id, generation, "FOR NO KEY UPDATE"));
    if (s.status == "offline" && status == "draining") {
      return Conflict("session_expired",
                      "session " + session_id + " is offline; register a new session");
    }
    if (s.status == status) {
      out = s;
      return Status::Ok();
    }
    QL_ASSIGN_OR_RETURN(int64_t now, DatabaseNow(tx));
    QL_ASSIGN_OR_RETURN(
        Rows rows,
        tx.Exec(std::string("UPDATE ql3.worker_sessions SET status = $2, available_slots = 0, "
                            "version = version + 1, updated_at_ms = $3 WHERE id = $1 "
                            "RETURNING ") +
                    kSessionColumns,
                {P(session_id), P(status), P(now)}));
    QL_RETURN_IF_ERROR(rows.ExpectRows(1));
    out = ReadSession(rows, 0, 0);
    return rows.status();
  }));
  return out;
}

// ---------------------------------------------------------------------------------------------
// Leases (runtime role)

Result<LeaseGrant> PostgresRunLeases::GrantLeases(const PullCommand& c) {
  LeaseGrant out;
  // A grant does not wait for its WAL flush: one lost in a crash is a lease the worker cannot
  // start (`starting` answers lease_not_found, and nothing runs), and the durable `starting`
  // of a grant that survived flushes the WAL past it first.
  TxOptions grant;
  grant.durable_commit = false;
  // The look-ups by offer id (`= ANY` of a short array) were planned afresh on every call under
  // the default plan cache mode; the generic plans are the same index scans.
  grant.generic_plans = true;
  QL_RETURN_IF_ERROR(pool_.Transact(grant, "granting run leases", [&](Tx& tx) -> Status {
    out = LeaseGrant();
    // Proposals naming an existing lease: a replay of a lost answer, or a fence violation.
    std::vector<std::optional<std::string>> ids;
    for (const OfferProposal& p : c.offers) ids.push_back(p.offer_id);
    const Statement existing_leases = {
        "SELECT l.offer_id, l.worker_session_id, l.session_generation, l.token_digest, "
        "l.status, l.expires_at_ms, a.status FROM ql3.run_dispatch_leases l "
        "JOIN ql3.run_attempts a ON a.id = l.attempt_id WHERE l.offer_id = ANY($1::text[])",
        {PArray(ids)}};
    // The session's lock, the clock after it and the proposals' leases in one round trip.
    tx.Prefetch({LockSessionStatement(c.session_id, "FOR NO KEY UPDATE"), {kNowSql, {}},
                 existing_leases});
    // The session row stays locked: grants of one session are serialised, so the live-lease
    // count below cannot be overtaken.
    QL_ASSIGN_OR_RETURN(
        WorkerSessionRecord session,
        LockOwnSession(tx, c.worker_id, c.session_id, c.generation, "FOR NO KEY UPDATE"));
    QL_ASSIGN_OR_RETURN(int64_t now, DatabaseNow(tx));
    // Only a drain stops a worker; an offline or expired session is replaced or extended.
    if (session.status == "draining") {
      return Conflict("session_inactive",
                      "session " + c.session_id + " is draining; it takes no runs");
    }
    if (session.status != "active") {
      return Conflict("session_expired", "session " + c.session_id + " is " + session.status +
                                             "; register a new session");
    }
    if (session.expires_at_ms <= now) {
      return Conflict("session_expired", "session " + c.session_id +
                                             " expired by the database clock; a heartbeat "
                                             "extends it");
    }

    QL_ASSIGN_OR_RETURN(Rows existing, tx.Exec(existing_leases.sql, existing_leases.params));
    std::vector<std::optional<std::string>> replayed;
    for (int i = 0; i < existing.size(); ++i) {
      const std::string offer = existing.Text(i, 0);
      const auto proposal =
          std::find_if(c.offers.begin(), c.offers.end(),
                       [&](const OfferProposal& p) { return p.offer_id == offer; });
      const bool same = existing.Text(i, 1) == c.session_id && existing.Int(i, 2) == c.generation &&
                        ConstantTimeEquals(existing.Text(i, 3), proposal->token_digest);
      if (!same) {
        return Conflict("lease_fenced", "offer id " + offer + " is taken by another lease");
      }
      if (existing.Text(i, 4) == "granted" && existing.Int(i, 5) > now &&
          existing.Text(i, 6) == "claimed") {
        replayed.push_back(offer);
      }
      // Anything else (started, ended, expired) was answered before; the offer is not repeated.
    }
    QL_RETURN_IF_ERROR(existing.status());

    QL_ASSIGN_OR_RETURN(
        Rows live, tx.Exec("SELECT count(*) FROM ql3.run_dispatch_leases WHERE "
                           "worker_session_id = $1 AND status = 'granted' AND expires_at_ms > $2",
                           {P(c.session_id), P(now)}));
    QL_RETURN_IF_ERROR(live.ExpectRows(1));
    const int64_t live_count = live.Int(0, 0);
    QL_RETURN_IF_ERROR(live.status());
    std::vector<const OfferProposal*> fresh;  // proposals naming no lease yet
    for (const OfferProposal& p : c.offers) {
      bool taken = false;
      for (int i = 0; i < existing.size(); ++i) taken = taken || existing.Text(i, 0) == p.offer_id;
      if (!taken) fresh.push_back(&p);
    }
    const int64_t capacity = std::min<int64_t>(
        {static_cast<int64_t>(fresh.size()), static_cast<int64_t>(c.available_slots),
         static_cast<int64_t>(session.max_concurrent_runs) - live_count});

    std::vector<std::optional<std::string>> granted = replayed;
    std::vector<std::pair<std::string, std::string>> chosen;  // (run, attempt), in grant order
    if (capacity > 0) {
      QL_ASSIGN_OR_RETURN(chosen, ChooseRuns(tx, c.worker_id, session, capacity, now));
    }
    if (!chosen.empty()) {
      size_t next = 0;
      for (size_t i = 0; i < chosen.size() && next < fresh.size(); ++i) {
        const std::string& run_id = chosen[i].first;
        const std::string& attempt_id = chosen[i].second;
        const OfferProposal& p = *fresh[next];
        const int64_t expires = now + c.lease_ttl_ms;
        QL_ASSIGN_OR_RETURN(
            Rows lease,
            tx.Exec("INSERT INTO ql3.run_dispatch_leases (attempt_id, run_id, worker_session_id, "
                    "session_generation, offer_id, token_digest, lease_version, status, "
                    "granted_at_ms, renewed_at_ms, expires_at_ms, released_at_ms) "
                    "VALUES ($1, $2, $3, $4, $5, $6, 1, 'granted', $7, $7, $8, NULL) "
                    "ON CONFLICT (attempt_id) DO UPDATE SET "
                    "worker_session_id = EXCLUDED.worker_session_id, "
                    "session_generation = EXCLUDED.session_generation, "
                    "offer_id = EXCLUDED.offer_id, token_digest = EXCLUDED.token_digest, "
                    "lease_version = ql3.run_dispatch_leases.lease_version + 1, "
                    "status = 'granted', granted_at_ms = EXCLUDED.granted_at_ms, "
                    "renewed_at_ms = EXCLUDED.renewed_at_ms, "
                    "expires_at_ms = EXCLUDED.expires_at_ms, released_at_ms = NULL "
                    "WHERE ql3.run_dispatch_leases.status <> 'granted' "
                    "OR ql3.run_dispatch_leases.expires_at_ms <= $7 "
                    "RETURNING lease_version",
                    {P(attempt_id), P(run_id), P(c.session_id), P(c.generation), P(p.offer_id),
                     P(p.token_digest), P(now), P(expires)}));
        if (lease.empty()) continue;  // renewed by its holder since the candidate was read
        const int64_t version = lease.Int(0, 0);
        QL_RETURN_IF_ERROR(lease.status());
        const Statement holder = {
            "UPDATE ql3.run_attempts SET worker_id = $2, worker_session_id = $3, "
            "session_generation = $4, lease_expires_at_ms = $5, offer_id = $6 "
            "WHERE id = $1 AND status = 'claimed'",
            {P(attempt_id), P(c.worker_id), P(c.session_id), P(c.generation), P(expires),
             P(p.offer_id)}};
        // The attempt's holder and the run's next event sequence in one round trip.
        tx.Prefetch({holder, NextEventSequenceStatement(run_id, true)});
        QL_RETURN_IF_ERROR(tx.Exec(holder.sql, holder.params).status());
        QL_RETURN_IF_ERROR(AppendRunEvent(tx, run_id, true, kEventAttemptLeased, "dispatcher",
                                          attempt_id, std::nullopt,
                                          {{"offer_id", p.offer_id},
                                           {"session_id", c.session_id},
                                           {"generation", c.generation},
                                           {"lease_version", version}},
                                          now));
        granted.push_back(p.offer_id);
        ++next;
      }
    }
    const Statement answer = {std::string(kGrantedColumns) +
                                  "WHERE l.offer_id = ANY($1::text[]) ORDER BY r.priority DESC, "
                                  "r.queued_at_ms, r.id",
                              {PArray(granted)}};
    // The cancelled leases and the granted ones in one round trip.
    if (!granted.empty()) {
      tx.Prefetch({CancelledOffersStatement(c.worker_id, c.session_id), answer});
    }
    QL_ASSIGN_OR_RETURN(out.cancelled, CancelledOffers(tx, c.worker_id, c.session_id));
    if (granted.empty()) return Status::Ok();
    QL_ASSIGN_OR_RETURN(Rows rows, tx.Exec(answer.sql, answer.params));
    for (int i = 0; i < rows.size(); ++i) {
      GrantedLease g = ReadGranted(rows, i);
      g.replay = std::find(replayed.begin(), replayed.end(), g.offer_id) != replayed.end();
      out.granted.push_back(std::move(g));
    }
    return rows.status();
  }));
  return out;
}

Result<LeaseRenewal> PostgresRunLeases::RenewLease(const LeaseFence& fence, int64_t ttl_ms) {
  LeaseRenewal out;
  QL_RETURN_IF_ERROR(pool_.Transact({}, "renewing a run lease", [&](Tx& tx) -> Status {
    QL_ASSIGN_OR_RETURN(VerifiedLease lease, VerifyLease(tx, fence));
    const int64_t expires = lease.now_ms + ttl_ms;
    QL_ASSIGN_OR_RETURN(
        Rows rows, tx.Exec("UPDATE ql3.run_dispatch_leases SET lease_version = lease_version + 1, "
                           "renewed_at_ms = $2, expires_at_ms = $3 WHERE attempt_id = $1 "
                           "RETURNING lease_version",
                           {P(lease.attempt_id), P(lease.now_ms), P(expires)}));
    QL_RETURN_IF_ERROR(rows.ExpectRows(1));
    out.lease_version = rows.Int(0, 0);
    out.lease_expires_at_ms = expires;
    QL_RETURN_IF_ERROR(rows.status());
    QL_RETURN_IF_ERROR(tx.Exec("UPDATE ql3.run_attempts SET lease_expires_at_ms = $2 WHERE id = $1",
                               {P(lease.attempt_id), P(expires)})
                           .status());
    QL_ASSIGN_OR_RETURN(Rows run, tx.Exec("SELECT cancel_requested_at_ms IS NOT NULL FROM "
                                          "ql3.runs WHERE id = $1",
                                          {P(lease.run_id)}));
    QL_RETURN_IF_ERROR(run.ExpectRows(1));
    out.cancel_requested = run.Bool(0, 0);
    return run.status();
  }));
  return out;
}

Result<LeaseLogAppend> PostgresRunLeases::AppendLeaseLog(const LeaseFence& fence, int64_t offset,
                                                         std::string_view data, int64_t cap_bytes,
                                                         int64_t now_ms) {
  LeaseLogAppend out;
  QL_RETURN_IF_ERROR(pool_.Transact({}, "appending a run log chunk", [&](Tx& tx) -> Status {
    // Lock order: the run before the lease.
    QL_ASSIGN_OR_RETURN(Rows owner, tx.Exec("SELECT run_id FROM ql3.run_dispatch_leases WHERE "
                                            "offer_id = $1",
                                            {P(fence.offer_id)}));
    if (owner.empty())
      return NotFound("lease_not_found", "no lease has offer id " + fence.offer_id);
    const std::string run_id = owner.Text(0, 0);
    QL_RETURN_IF_ERROR(owner.status());
    QL_RETURN_IF_ERROR(
        tx.Exec("SELECT 1 FROM ql3.runs WHERE id = $1 FOR NO KEY UPDATE", {P(run_id)}).status());
    QL_ASSIGN_OR_RETURN(VerifiedLease lease, VerifyLease(tx, fence));
    QL_ASSIGN_OR_RETURN(Rows truncated,
                        tx.Exec("SELECT 1 FROM ql3.run_events WHERE run_id = $1 AND "
                                "dedupe_key = $2",
                                {P(run_id), P("log_truncated:" + lease.attempt_id)}));
    QL_RETURN_IF_ERROR(truncated.status());
    const int64_t end_of_data = offset + static_cast<int64_t>(data.size());
    if (!truncated.empty()) {
      out = {end_of_data, true};
      return Status::Ok();
    }
    QL_ASSIGN_OR_RETURN(Rows last, tx.Exec("SELECT byte_offset, octet_length(data) FROM "
                                           "ql3.run_log_chunks WHERE attempt_id = $1 ORDER BY "
                                           "byte_offset DESC LIMIT 1",
                                           {P(lease.attempt_id)}));
    int64_t held = 0;
    if (!last.empty()) held = last.Int(0, 0) + last.Int(0, 1);
    QL_RETURN_IF_ERROR(last.status());
    if (offset < held) {
      // Only the very chunk stored at this offset, sent again after a lost answer, is accepted.
      QL_ASSIGN_OR_RETURN(Rows same, tx.Exec("SELECT data FROM ql3.run_log_chunks WHERE "
                                             "attempt_id = $1 AND byte_offset = $2",
                                             {P(lease.attempt_id), P(offset)}));
      if (!same.empty() && same.Bytes(0, 0) == data) {
        out = {end_of_data, false};
        return same.status();
      }
    }
    if (offset != held) {
      return Conflict("log_offset_mismatch", "the log of lease " + fence.offer_id + " holds " +
                                                 std::to_string(held) + " bytes, not " +
                                                 std::to_string(offset));
    }
    const int64_t room = std::max<int64_t>(0, cap_bytes - held);
    const int64_t keep = std::min<int64_t>(room, static_cast<int64_t>(data.size()));
    if (keep > 0) {
      QL_RETURN_IF_ERROR(
          tx.Exec("INSERT INTO ql3.run_log_chunks (attempt_id, byte_offset, run_id, data, "
                  "created_at_ms) VALUES ($1, $2, $3, $4::bytea, $5)",
                  {P(lease.attempt_id), P(held), P(run_id),
                   P(ByteaLiteral(data.substr(0, static_cast<size_t>(keep)))), P(now_ms)})
              .status());
    }
    out = {end_of_data, false};
    if (keep < static_cast<int64_t>(data.size())) {
      out.truncated = true;
      QL_RETURN_IF_ERROR(AppendRunEvent(tx, run_id, false, kEventLogTruncated, "worker",
                                        lease.attempt_id, "log_truncated:" + lease.attempt_id,
                                        {{"cap_bytes", cap_bytes}}, now_ms));
    }
    return Status::Ok();
  }));
  return out;
}

Result<LeaseState> PostgresRunLeases::GetLeaseState(const std::string& offer_id) {
  std::optional<LeaseState> out;
  QL_RETURN_IF_ERROR(pool_.Transact(
      {Isolation::kReadCommitted, true}, "reading a run lease", [&](Tx& tx) -> Status {
        QL_ASSIGN_OR_RETURN(
            Rows r,
            tx.Exec("SELECT l.offer_id, l.run_id, l.attempt_id, s.credential_id, "
                    "l.worker_session_id, l.session_generation, l.token_digest, l.status, "
                    "a.status, r.status, a.exit_code, r.cancel_requested_at_ms IS NOT NULL, "
                    "r.version "
                    "FROM ql3.run_dispatch_leases l "
                    "JOIN ql3.worker_sessions s ON s.id = l.worker_session_id "
                    "JOIN ql3.run_attempts a ON a.id = l.attempt_id "
                    "JOIN ql3.runs r ON r.id = l.run_id WHERE l.offer_id = $1",
                    {P(offer_id)}));
        if (r.empty()) return r.status();
        LeaseState s;
        s.offer_id = r.Text(0, 0);
        s.run_id = r.Text(0, 1);
        s.attempt_id = r.Text(0, 2);
        s.worker_id = r.Text(0, 3);
        s.session_id = r.Text(0, 4);
        s.generation = r.Int(0, 5);
        s.token_digest = r.Text(0, 6);
        s.lease_status = r.Text(0, 7);
        s.attempt_status = r.Text(0, 8);
        s.run_status = r.Text(0, 9);
        if (std::optional<int64_t> code = r.OptInt(0, 10)) s.exit_code = static_cast<int>(*code);
        s.cancel_requested = r.Bool(0, 11);
        s.run_version = r.Int(0, 12);
        out = std::move(s);
        return r.status();
      }));
  if (!out.has_value()) return NotFound("lease_not_found", "no lease has offer id " + offer_id);
  return *out;
}

Result<std::vector<std::string>> PostgresRunLeases::ListCancelledOffers(
    const std::string& worker_id, const std::string& session_id) {
  std::vector<std::string> out;
  QL_RETURN_IF_ERROR(pool_.Transact(
      {Isolation::kReadCommitted, true}, "listing cancelled leases", [&](Tx& tx) -> Status {
        QL_ASSIGN_OR_RETURN(out, CancelledOffers(tx, worker_id, session_id));
        return Status::Ok();
      }));
  return out;
}

Result<std::vector<OverdueRun>> PostgresRunLeases::ListOverdueRuns(int64_t grace_ms, int limit) {
  std::vector<OverdueRun> out;
  QL_RETURN_IF_ERROR(pool_.Transact(
      {Isolation::kReadCommitted, true}, "listing overdue runs", [&](Tx& tx) -> Status {
        out.clear();
        QL_ASSIGN_OR_RETURN(
            Rows r,
            tx.Exec("SELECT r.id, a.id FROM ql3.runs r "
                    "JOIN LATERAL (SELECT x.id, x.status, x.executor_type, x.started_at_ms "
                    "FROM ql3.run_attempts x WHERE x.run_id = r.id ORDER BY x.attempt DESC "
                    "LIMIT 1) a ON true "
                    "JOIN ql3.execution_revisions e ON e.id = r.execution_revision_id "
                    "WHERE r.status IN ('dispatching', 'running') "
                    "AND a.executor_type = 'remote_worker' AND a.status = 'running' "
                    "AND a.started_at_ms + (e.plan_json::jsonb ->> 'timeoutMs')::bigint + $1 < "
                    "(extract(epoch FROM clock_timestamp()) * 1000)::bigint "
                    "ORDER BY r.id LIMIT $2",
                    {P(grace_ms), P(limit)}));
        for (int i = 0; i < r.size(); ++i) out.push_back({r.Text(i, 0), r.Text(i, 1)});
        return r.status();
      }));
  return out;
}

}  // namespace ql::pg
