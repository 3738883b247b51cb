#include "ql/storage/postgres/pg_placement.h"

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "ql/core/governance_ports.h"
#include "ql/core/governance_store.h"
#include "ql/core/ids.h"
#include "ql/storage/postgres/pg_governance.h"
#include "ql/storage/postgres/pg_worker.h"

namespace ql::pg {
namespace {

std::optional<int64_t> OptionalInt(const Rows& r, int row, int column) {
  if (r.IsNull(row, column)) return std::nullopt;
  return r.Int(row, column);
}

constexpr char kGrantColumns[] =
    "pool, project_id, max_running, weight, created_by, created_at_ms, updated_at_ms";

PoolGrantRecord ReadGrant(const Rows& r, int i) {
  PoolGrantRecord g;
  g.pool = r.Text(i, 0);
  g.project_id = r.Text(i, 1);
  g.max_running = OptionalInt(r, i, 2);
  g.weight = r.Int(i, 3);
  g.created_by = r.Text(i, 4);
  g.created_at_ms = r.Int(i, 5);
  g.updated_at_ms = r.Int(i, 6);
  return g;
}

// The installation fence of a placement write (none for the system).
Status Fence(GovernanceTx& gov, const std::optional<PolicyFence>& fence) {
  if (!fence) return Status::Ok();
  return CheckInstallationFence(gov, *fence);
}

// The project a grant names: it must exist and be active.
Status RequireActiveProject(Tx& tx, const std::string& project_id) {
  QL_ASSIGN_OR_RETURN(Rows rows, tx.Exec("SELECT slug, status FROM ql3.projects WHERE id = $1 "
                                         "FOR KEY SHARE",
                                         {P(project_id)}));
  if (rows.empty()) return NotFound("project_not_found", "no project " + project_id);
  const std::string slug = rows.Text(0, 0);
  const std::string status = rows.Text(0, 1);
  QL_RETURN_IF_ERROR(rows.status());
  if (status != "active") return Conflict("project_archived", "project " + slug + " is archived");
  return Status::Ok();
}

// Takes the pool's lock exclusively (pg_worker.cc ChooseRuns takes it shared): the grants in
// flight finish first, and every grant after this change commits reads it.
Status LockPool(Tx& tx, const std::string& pool) {
  return tx.Exec("SELECT pg_advisory_xact_lock(hashtextextended('ql3.pool:' || $1, 0))", {P(pool)})
      .status();
}

// Creates the pool's row (serving only its grants) unless it has one.
Status EnsurePool(Tx& tx, const std::string& pool, int64_t now_ms) {
  return tx
      .Exec(
          "INSERT INTO ql3.worker_pools (name, serves_all_projects, max_running, version, "
          "created_at_ms, updated_at_ms) VALUES ($1, false, NULL, 1, $2, $2) "
          "ON CONFLICT (name) DO NOTHING",
          {P(pool), P(now_ms)})
      .status();
}

// Who a grant or drain row names as its author.
std::string ActorName(const Actor& actor) {
  return actor.principal_id.empty() ? std::string("system") : actor.principal_id;
}

// The live, undrained sessions: what can take a run now.
constexpr char kLiveSessionsCte[] =
    "live AS (SELECT s.pool, s.labels FROM ql3.worker_sessions s WHERE s.status = 'active' "
    "AND s.expires_at_ms > (extract(epoch FROM clock_timestamp()) * 1000)::bigint AND NOT "
    "EXISTS (SELECT 1 FROM ql3.worker_drains d WHERE d.credential_id = s.credential_id))";

}  // namespace

Result<Pool*> PostgresPlacement::Admin() {
  if (admin_ == nullptr) {
    return Unavailable("admin_pool_missing",
                       "worker placement needs the admin role's database connection");
  }
  return admin_;
}

std::string PostgresPlacement::NewAuditId(int64_t now_ms) {
  std::lock_guard<std::mutex> lock(random_mu_);
  return NewUuidV7(now_ms, random_);
}

Result<std::vector<PoolRecord>> PostgresPlacement::ReadPools(
    const std::optional<std::string>& name) {
  std::vector<PoolRecord> out;
  QL_RETURN_IF_ERROR(runtime_.Transact(
      {Isolation::kRepeatableRead, true}, "reading worker pools", [&](Tx& tx) -> Status {
        out.clear();
        const Param filter = P(name);
        const Statement pools = {
            "SELECT name, serves_all_projects, max_running, version FROM ql3.worker_pools "
            "WHERE $1::text IS NULL OR name = $1 ORDER BY name",
            {filter}};
        const Statement grants = {std::string("SELECT ") + kGrantColumns +
                                      " FROM ql3.worker_pool_grants WHERE $1::text IS NULL OR "
                                      "pool = $1 ORDER BY pool, project_id",
                                  {filter}};
        // Pools named by live sessions, configured or not, with their live workers; and the
        // live leases per pool.
        const Statement workers = {
            "SELECT pool, count(*) FROM ql3.worker_sessions WHERE status = 'active' AND "
            "expires_at_ms > (extract(epoch FROM clock_timestamp()) * 1000)::bigint AND "
            "($1::text IS NULL OR pool = $1) GROUP BY pool ORDER BY pool",
            {filter}};
        const Statement running = {
            "SELECT s.pool, count(*) FROM ql3.run_dispatch_leases l JOIN ql3.worker_sessions s "
            "ON s.id = l.worker_session_id WHERE l.status = 'granted' AND l.expires_at_ms > "
            "(extract(epoch FROM clock_timestamp()) * 1000)::bigint AND ($1::text IS NULL OR "
            "s.pool = $1) GROUP BY s.pool",
            {filter}};
        tx.Prefetch({pools, grants, workers, running});
        std::map<std::string, PoolRecord> by_name;
        QL_ASSIGN_OR_RETURN(Rows p, tx.Exec(pools.sql, pools.params));
        for (int i = 0; i < p.size(); ++i) {
          PoolRecord& pool = by_name[p.Text(i, 0)];
          pool.name = p.Text(i, 0);
          pool.serves_all_projects = p.Bool(i, 1);
          pool.max_running = OptionalInt(p, i, 2);
          pool.version = p.Int(i, 3);
        }
        QL_RETURN_IF_ERROR(p.status());
        QL_ASSIGN_OR_RETURN(Rows g, tx.Exec(grants.sql, grants.params));
        for (int i = 0; i < g.size(); ++i) by_name[g.Text(i, 0)].grants.push_back(ReadGrant(g, i));
        QL_RETURN_IF_ERROR(g.status());
        QL_ASSIGN_OR_RETURN(Rows w, tx.Exec(workers.sql, workers.params));
        for (int i = 0; i < w.size(); ++i) {
          PoolRecord& pool = by_name[w.Text(i, 0)];
          pool.name = w.Text(i, 0);
          pool.live_workers = w.Int(i, 1);
        }
        QL_RETURN_IF_ERROR(w.status());
        QL_ASSIGN_OR_RETURN(Rows r, tx.Exec(running.sql, running.params));
        for (int i = 0; i < r.size(); ++i) {
          PoolRecord& pool = by_name[r.Text(i, 0)];
          pool.name = r.Text(i, 0);
          pool.running = r.Int(i, 1);
        }
        QL_RETURN_IF_ERROR(r.status());
        for (auto& [unused, pool] : by_name) out.push_back(std::move(pool));
        return Status::Ok();
      }));
  return out;
}

Result<std::vector<PoolRecord>> PostgresPlacement::ListPools() { return ReadPools(std::nullopt); }

Result<PoolRecord> PostgresPlacement::GetPool(const std::string& name) {
  QL_ASSIGN_OR_RETURN(std::vector<PoolRecord> pools, ReadPools(name));
  if (pools.empty()) return NotFound("pool_not_found", "no worker pool " + name);
  return pools.front();
}

Result<PoolGrantRecord> PostgresPlacement::GrantPool(const GrantPoolCommand& cmd) {
  QL_ASSIGN_OR_RETURN(Pool * admin, Admin());
  PoolGrantRecord out;
  const std::string audit_id = NewAuditId(cmd.now_ms);
  QL_RETURN_IF_ERROR(admin->Transact({}, "granting a worker pool", [&](Tx& tx) -> Status {
    std::unique_ptr<GovernanceTx> gov = NewGovernanceTx(tx);
    QL_RETURN_IF_ERROR(Fence(*gov, cmd.fence));
    QL_RETURN_IF_ERROR(LockPool(tx, cmd.pool));
    QL_RETURN_IF_ERROR(RequireActiveProject(tx, cmd.project_id));
    QL_RETURN_IF_ERROR(EnsurePool(tx, cmd.pool, cmd.now_ms));
    QL_ASSIGN_OR_RETURN(
        Rows rows,
        tx.Exec(std::string("INSERT INTO ql3.worker_pool_grants (pool, project_id, max_running, "
                            "weight, created_by, created_at_ms, updated_at_ms) VALUES ($1, $2, "
                            "$3, $4, $5, $6, $6) ON CONFLICT (pool, project_id) DO UPDATE SET "
                            "max_running = EXCLUDED.max_running, weight = EXCLUDED.weight, "
                            "updated_at_ms = EXCLUDED.updated_at_ms RETURNING ") +
                    kGrantColumns,
                {P(cmd.pool), P(cmd.project_id), P(cmd.max_running), P(cmd.weight),
                 P(ActorName(cmd.actor)), P(cmd.now_ms)}));
    QL_RETURN_IF_ERROR(rows.ExpectRows(1));
    out = ReadGrant(rows, 0);
    QL_RETURN_IF_ERROR(rows.status());
    return gov->InsertAudit(SucceededFact(audit_id, cmd.actor, "pool.grant", "pool", cmd.pool,
                                          cmd.project_id, cmd.now_ms));
  }));
  return out;
}

Status PostgresPlacement::RevokePool(const RevokePoolCommand& cmd) {
  QL_ASSIGN_OR_RETURN(Pool * admin, Admin());
  const std::string audit_id = NewAuditId(cmd.now_ms);
  return admin->Transact({}, "revoking a worker pool", [&](Tx& tx) -> Status {
    std::unique_ptr<GovernanceTx> gov = NewGovernanceTx(tx);
    QL_RETURN_IF_ERROR(Fence(*gov, cmd.fence));
    QL_RETURN_IF_ERROR(LockPool(tx, cmd.pool));
    // Under the pool's lock (LockPool): no run of the project is granted to the pool after the
    // revoke returns.
    QL_ASSIGN_OR_RETURN(Rows rows, tx.Exec("DELETE FROM ql3.worker_pool_grants WHERE pool = $1 "
                                           "AND project_id = $2 RETURNING pool",
                                           {P(cmd.pool), P(cmd.project_id)}));
    if (rows.empty()) {
      return NotFound("pool_grant_not_found",
                      "pool " + cmd.pool + " is not granted to project " + cmd.project_id);
    }
    QL_RETURN_IF_ERROR(rows.status());
    return gov->InsertAudit(SucceededFact(audit_id, cmd.actor, "pool.revoke", "pool", cmd.pool,
                                          cmd.project_id, cmd.now_ms));
  });
}

Result<PoolRecord> PostgresPlacement::SetPool(const SetPoolCommand& cmd) {
  QL_ASSIGN_OR_RETURN(Pool * admin, Admin());
  const std::string audit_id = NewAuditId(cmd.now_ms);
  QL_RETURN_IF_ERROR(admin->Transact({}, "changing a worker pool", [&](Tx& tx) -> Status {
    std::unique_ptr<GovernanceTx> gov = NewGovernanceTx(tx);
    QL_RETURN_IF_ERROR(Fence(*gov, cmd.fence));
    QL_RETURN_IF_ERROR(LockPool(tx, cmd.pool));
    QL_RETURN_IF_ERROR(EnsurePool(tx, cmd.pool, cmd.now_ms));
    const bool set_max = cmd.max_running.has_value();
    const std::optional<int64_t> max = set_max ? *cmd.max_running : std::nullopt;
    QL_RETURN_IF_ERROR(
        tx.Exec("UPDATE ql3.worker_pools SET serves_all_projects = coalesce($2, "
                "serves_all_projects), max_running = CASE WHEN $3 THEN $4 ELSE max_running END, "
                "version = version + 1, updated_at_ms = $5 WHERE name = $1",
                {P(cmd.pool), P(cmd.serves_all_projects), P(set_max), P(max), P(cmd.now_ms)})
            .status());
    return gov->InsertAudit(
        SucceededFact(audit_id, cmd.actor, "pool.set", "pool", cmd.pool, std::nullopt, cmd.now_ms));
  }));
  return GetPool(cmd.pool);
}

Result<std::vector<WorkerRecord>> PostgresPlacement::ReadWorkers(
    const std::optional<std::string>& name_or_id) {
  QL_ASSIGN_OR_RETURN(Pool * admin, Admin());
  std::vector<WorkerRecord> out;
  // Names and drains as the admin role (the runtime role never reads credentials).
  QL_RETURN_IF_ERROR(
      admin->Transact({Isolation::kReadCommitted, true}, "reading workers", [&](Tx& tx) -> Status {
        out.clear();
        QL_ASSIGN_OR_RETURN(
            Rows rows, tx.Exec("SELECT c.id, c.name, c.created_at_ms, c.revoked_at_ms, "
                               "d.requested_at_ms, c.pool FROM ql3.worker_credentials c LEFT JOIN "
                               "ql3.worker_drains d ON d.credential_id = c.id WHERE $1::text IS "
                               "NULL OR c.name = $1 OR c.id = $1 ORDER BY c.name",
                               {P(name_or_id)}));
        for (int i = 0; i < rows.size(); ++i) {
          WorkerRecord w;
          w.id = rows.Text(i, 0);
          w.name = rows.Text(i, 1);
          w.created_at_ms = rows.Int(i, 2);
          w.revoked_at_ms = OptionalInt(rows, i, 3);
          w.drained_at_ms = OptionalInt(rows, i, 4);
          w.pool = rows.Text(i, 5);
          out.push_back(std::move(w));
        }
        return rows.status();
      }));
  if (out.empty()) return out;
  std::vector<std::optional<std::string>> ids;
  for (const WorkerRecord& w : out) ids.push_back(w.id);
  // Sessions and leases as the runtime role.
  QL_RETURN_IF_ERROR(runtime_.Transact(
      {Isolation::kRepeatableRead, true}, "reading worker sessions", [&](Tx& tx) -> Status {
        const Statement sessions = {
            std::string("SELECT DISTINCT ON (credential_id) ") + kSessionColumns +
                ", (status = 'active' AND expires_at_ms > (extract(epoch FROM "
                "clock_timestamp()) * 1000)::bigint) FROM ql3.worker_sessions WHERE "
                "credential_id = ANY($1::text[]) ORDER BY credential_id, generation DESC",
            {PArray(ids)}};
        const Statement leases = {
            "SELECT s.credential_id, l.run_id FROM ql3.run_dispatch_leases l JOIN "
            "ql3.worker_sessions s ON s.id = l.worker_session_id WHERE l.status = 'granted' AND "
            "l.expires_at_ms > (extract(epoch FROM clock_timestamp()) * 1000)::bigint AND "
            "s.credential_id = ANY($1::text[]) ORDER BY l.granted_at_ms, l.run_id",
            {PArray(ids)}};
        tx.Prefetch({sessions, leases});
        std::map<std::string, WorkerRecord*> by_id;
        for (WorkerRecord& w : out) {
          w.session.reset();
          w.live = false;
          w.running_run_ids.clear();
          by_id[w.id] = &w;
        }
        QL_ASSIGN_OR_RETURN(Rows s, tx.Exec(sessions.sql, sessions.params));
        for (int i = 0; i < s.size(); ++i) {
          WorkerSessionRecord session = ReadSession(s, i, 0);
          WorkerRecord* w = by_id.at(session.worker_id);
          w->live = s.Bool(i, 12);
          w->session = std::move(session);
        }
        QL_RETURN_IF_ERROR(s.status());
        QL_ASSIGN_OR_RETURN(Rows l, tx.Exec(leases.sql, leases.params));
        for (int i = 0; i < l.size(); ++i) {
          by_id.at(l.Text(i, 0))->running_run_ids.push_back(l.Text(i, 1));
        }
        return l.status();
      }));
  return out;
}

Result<std::vector<WorkerRecord>> PostgresPlacement::ListWorkers() {
  return ReadWorkers(std::nullopt);
}

Result<WorkerRecord> PostgresPlacement::GetWorker(const std::string& name_or_id) {
  QL_ASSIGN_OR_RETURN(std::vector<WorkerRecord> workers, ReadWorkers(name_or_id));
  if (workers.empty()) return NotFound("worker_not_found", "no worker " + name_or_id);
  return workers.front();
}

Result<WorkerRecord> PostgresPlacement::DrainWorker(const DrainWorkerCommand& cmd) {
  QL_ASSIGN_OR_RETURN(Pool * admin, Admin());
  const std::string audit_id = NewAuditId(cmd.now_ms);
  std::string id;
  QL_RETURN_IF_ERROR(admin->Transact({}, "draining a worker", [&](Tx& tx) -> Status {
    std::unique_ptr<GovernanceTx> gov = NewGovernanceTx(tx);
    QL_RETURN_IF_ERROR(Fence(*gov, cmd.fence));
    QL_ASSIGN_OR_RETURN(Rows found,
                        tx.Exec("SELECT id, pool FROM ql3.worker_credentials WHERE name = $1 OR "
                                "id = $1 ORDER BY (name = $1) DESC LIMIT 1 FOR KEY SHARE",
                                {P(cmd.worker)}));
    if (found.empty()) return NotFound("worker_not_found", "no worker " + cmd.worker);
    id = found.Text(0, 0);
    const std::string pool = found.Text(0, 1);
    QL_RETURN_IF_ERROR(found.status());
    // The worker's sessions are in its credential's pool: a drain waits for that pool's pulls in
    // flight, and every pull after it reads the drain under the lock (ChooseRuns).
    QL_RETURN_IF_ERROR(LockPool(tx, pool));
    if (cmd.drain) {
      QL_RETURN_IF_ERROR(tx.Exec("INSERT INTO ql3.worker_drains (credential_id, requested_by, "
                                 "requested_at_ms) VALUES ($1, $2, $3) ON CONFLICT "
                                 "(credential_id) DO NOTHING",
                                 {P(id), P(ActorName(cmd.actor)), P(cmd.now_ms)})
                             .status());
    } else {
      QL_RETURN_IF_ERROR(
          tx.Exec("DELETE FROM ql3.worker_drains WHERE credential_id = $1", {P(id)}).status());
    }
    return gov->InsertAudit(SucceededFact(audit_id, cmd.actor,
                                          cmd.drain ? "worker.drain" : "worker.resume", "worker",
                                          id, std::nullopt, cmd.now_ms));
  }));
  return GetWorker(id);
}

namespace {

// The live, undrained sessions, and per queued remote run: its pool, labels, project, whether
// its pool is configured and serves the project, and whether a live worker of the pool (and
// one with its labels) exists.
const std::string kWaitingSql =
    std::string("WITH ") + kLiveSessionsCte +
    " SELECT r.id, e.pool, e.required_labels::text, "
    "EXISTS (SELECT 1 FROM ql3.worker_pools p WHERE p.name = e.pool), "
    "(EXISTS (SELECT 1 FROM ql3.worker_pools p WHERE p.name = e.pool AND "
    "p.serves_all_projects) OR EXISTS (SELECT 1 FROM ql3.worker_pool_grants g WHERE g.pool = "
    "e.pool AND g.project_id = r.project_id)), "
    "EXISTS (SELECT 1 FROM live WHERE live.pool = e.pool), "
    "EXISTS (SELECT 1 FROM live WHERE live.pool = e.pool AND live.labels @> e.required_labels) "
    "FROM ql3.runs r JOIN ql3.execution_revisions e ON e.id = r.execution_revision_id "
    "WHERE r.status = 'queued' AND r.cancel_requested_at_ms IS NULL AND "
    "e.executor_type = 'remote_worker' AND ";

WaitingReason ReadWaiting(const Rows& r, int i) {
  WaitingReason w;
  w.run_id = r.Text(i, 0);
  w.placement.pool = r.Text(i, 1);
  w.placement.labels = LabelsFromText(r.Text(i, 2));
  const bool configured = r.Bool(i, 3);
  const bool served = r.Bool(i, 4);
  const bool pool_live = r.Bool(i, 5);
  const bool eligible = r.Bool(i, 6);
  if (!configured) {
    w.detail = "pool " + w.placement.pool + " is not configured (ql pool grant " +
               w.placement.pool + " --project ...)";
  } else if (!served) {
    w.detail = "pool " + w.placement.pool + " does not serve this project";
  } else if (!pool_live) {
    w.detail = "no live worker in pool " + w.placement.pool;
  } else if (!eligible) {
    w.detail = "no live worker in pool " + w.placement.pool + " has the labels";
  }
  if (!w.detail.empty()) w.reason = "waiting_for_worker";
  return w;
}

}  // namespace

Result<std::vector<WaitingReason>> PostgresPlacement::ExplainWaiting(
    const std::vector<std::string>& run_ids) {
  std::vector<WaitingReason> out;
  if (run_ids.empty()) return out;
  std::vector<std::optional<std::string>> ids(run_ids.begin(), run_ids.end());
  QL_RETURN_IF_ERROR(runtime_.Transact(
      {Isolation::kRepeatableRead, true}, "explaining waiting runs", [&](Tx& tx) -> Status {
        out.clear();
        QL_ASSIGN_OR_RETURN(Rows r, tx.Exec(kWaitingSql + "r.id = ANY($1::text[])", {PArray(ids)}));
        for (int i = 0; i < r.size(); ++i) out.push_back(ReadWaiting(r, i));
        return r.status();
      }));
  return out;
}

Result<std::vector<WaitingCount>> PostgresPlacement::CountWaiting() {
  std::vector<WaitingCount> out;
  QL_RETURN_IF_ERROR(runtime_.Transact(
      {Isolation::kRepeatableRead, true}, "counting waiting runs", [&](Tx& tx) -> Status {
        out.clear();
        // Grouped first, so the checks run once per pool, labels and project, not per run.
        QL_ASSIGN_OR_RETURN(
            Rows r,
            tx.Exec(std::string("WITH ") + kLiveSessionsCte +
                    ", q AS (SELECT e.pool, e.required_labels, r.project_id, count(*) AS n FROM "
                    "ql3.runs r JOIN ql3.execution_revisions e ON e.id = r.execution_revision_id "
                    "WHERE r.status = 'queued' AND r.cancel_requested_at_ms IS NULL AND "
                    "e.executor_type = 'remote_worker' GROUP BY 1, 2, 3) "
                    "SELECT q.pool, sum(q.n)::bigint FROM q WHERE NOT ("
                    "(EXISTS (SELECT 1 FROM ql3.worker_pools p WHERE p.name = q.pool AND "
                    "p.serves_all_projects) OR EXISTS (SELECT 1 FROM ql3.worker_pool_grants g "
                    "WHERE g.pool = q.pool AND g.project_id = q.project_id)) AND EXISTS (SELECT "
                    "1 FROM live WHERE live.pool = q.pool AND live.labels @> q.required_labels)) "
                    "GROUP BY q.pool ORDER BY q.pool"));
        for (int i = 0; i < r.size(); ++i) out.push_back({r.Text(i, 0), r.Int(i, 1)});
        return r.status();
      }));
  return out;
}

}  // namespace ql::pg
