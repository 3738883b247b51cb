#pragma once

// An in-memory PlacementRepository (placement_ports.h) for tests above the port (the HTTP API,
// PlacementService): pools, grants and workers kept in maps, every call recorded so a test can
// check what reached the store and that a refused request reached nothing. It decides nothing
// the real stores decide (projects, fences, audit): those are the stores' contract tests'.

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ql/core/placement_ports.h"
#include "ql/core/status.h"

namespace ql::testing {

class FakePlacementRepository final : public PlacementRepository {
 public:
  // Adds or replaces pool `name` (version 1: configured).
  void AddPool(const std::string& name, bool serves_all_projects) {
    std::lock_guard<std::mutex> lock(mu_);
    PoolRecord pool;
    pool.name = name;
    pool.serves_all_projects = serves_all_projects;
    pool.version = 1;
    pools_[name] = std::move(pool);
  }

  // Adds (or replaces) a grant of its pool, creating the pool when it has no record.
  void AddGrant(const PoolGrantRecord& grant) {
    std::lock_guard<std::mutex> lock(mu_);
    PoolRecord& pool = PoolLocked(grant.pool);
    std::erase_if(pool.grants,
                  [&](const PoolGrantRecord& g) { return g.project_id == grant.project_id; });
    pool.grants.push_back(grant);
  }

  // Adds or replaces a worker (found by its id or its name).
  void AddWorker(WorkerRecord worker) {
    std::lock_guard<std::mutex> lock(mu_);
    workers_[worker.id] = std::move(worker);
  }

  // What ExplainWaiting answers for every run id it is asked about (its run_id set to the id);
  // nullopt: nothing (as for a run that is not a queued remote run).
  void SetWaiting(std::optional<WaitingReason> waiting) {
    std::lock_guard<std::mutex> lock(mu_);
    waiting_ = std::move(waiting);
  }

  // The calls that reached the repository, in order.
  std::vector<GrantPoolCommand> grants() const { return Copy(grants_); }
  std::vector<RevokePoolCommand> revokes() const { return Copy(revokes_); }
  std::vector<SetPoolCommand> sets() const { return Copy(sets_); }
  std::vector<DrainWorkerCommand> drains() const { return Copy(drains_); }
  std::vector<std::string> explained() const { return Copy(explained_); }
  // How many writes (grant, revoke, set, drain) and reads (every other call) were made.
  int writes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int>(grants_.size() + revokes_.size() + sets_.size() + drains_.size());
  }
  int reads() const {
    std::lock_guard<std::mutex> lock(mu_);
    return reads_;
  }
  std::optional<PoolRecord> pool(const std::string& name) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pools_.find(name);
    return it == pools_.end() ? std::nullopt : std::optional<PoolRecord>(it->second);
  }
  std::optional<WorkerRecord> worker(const std::string& id) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = workers_.find(id);
    return it == workers_.end() ? std::nullopt : std::optional<WorkerRecord>(it->second);
  }

  Result<std::vector<PoolRecord>> ListPools() override {
    std::lock_guard<std::mutex> lock(mu_);
    ++reads_;
    std::vector<PoolRecord> out;
    for (const auto& [name, pool] : pools_) out.push_back(pool);
    return out;
  }

  Result<PoolRecord> GetPool(const std::string& name) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++reads_;
    auto it = pools_.find(name);
    if (it == pools_.end()) return NotFound("pool_not_found", "no worker pool " + name);
    return it->second;
  }

  Result<PoolGrantRecord> GrantPool(const GrantPoolCommand& cmd) override {
    std::lock_guard<std::mutex> lock(mu_);
    grants_.push_back(cmd);
    PoolRecord& pool = PoolLocked(cmd.pool);
    for (PoolGrantRecord& g : pool.grants) {
      if (g.project_id != cmd.project_id) continue;
      g.max_running = cmd.max_running;
      g.weight = cmd.weight;
      g.updated_at_ms = cmd.now_ms;
      return g;
    }
    PoolGrantRecord grant;
    grant.pool = cmd.pool;
    grant.project_id = cmd.project_id;
    grant.max_running = cmd.max_running;
    grant.weight = cmd.weight;
    grant.created_by = cmd.actor.principal_id.empty() ? "system" : cmd.actor.principal_id;
    grant.created_at_ms = cmd.now_ms;
    grant.updated_at_ms = cmd.now_ms;
    pool.grants.push_back(grant);
    return grant;
  }

  Status RevokePool(const RevokePoolCommand& cmd) override {
    std::lock_guard<std::mutex> lock(mu_);
    revokes_.push_back(cmd);
    auto it = pools_.find(cmd.pool);
    if (it != pools_.end()) {
      std::vector<PoolGrantRecord>& grants = it->second.grants;
      for (auto g = grants.begin(); g != grants.end(); ++g) {
        if (g->project_id != cmd.project_id) continue;
        grants.erase(g);
        return Status::Ok();
      }
    }
    return NotFound("pool_grant_not_found",
                    "pool " + cmd.pool + " is not granted to project " + cmd.project_id);
  }

  Result<PoolRecord> SetPool(const SetPoolCommand& cmd) override {
    std::lock_guard<std::mutex> lock(mu_);
    sets_.push_back(cmd);
    PoolRecord& pool = PoolLocked(cmd.pool);
    if (cmd.serves_all_projects.has_value()) pool.serves_all_projects = *cmd.serves_all_projects;
    if (cmd.max_running.has_value()) pool.max_running = *cmd.max_running;
    ++pool.version;
    return pool;
  }

  Result<std::vector<WorkerRecord>> ListWorkers() override {
    std::lock_guard<std::mutex> lock(mu_);
    ++reads_;
    std::vector<WorkerRecord> out;
    for (const auto& [id, worker] : workers_) out.push_back(worker);
    return out;
  }

  Result<WorkerRecord> GetWorker(const std::string& name_or_id) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++reads_;
    WorkerRecord* found = FindWorkerLocked(name_or_id);
    if (found == nullptr) return NotFound("worker_not_found", "no worker " + name_or_id);
    return *found;
  }

  Result<WorkerRecord> DrainWorker(const DrainWorkerCommand& cmd) override {
    std::lock_guard<std::mutex> lock(mu_);
    drains_.push_back(cmd);
    WorkerRecord* found = FindWorkerLocked(cmd.worker);
    if (found == nullptr) return NotFound("worker_not_found", "no worker " + cmd.worker);
    if (cmd.drain) {
      if (!found->drained_at_ms.has_value()) found->drained_at_ms = cmd.now_ms;
    } else {
      found->drained_at_ms.reset();
    }
    return *found;
  }

  Result<std::vector<WaitingReason>> ExplainWaiting(
      const std::vector<std::string>& run_ids) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++reads_;
    std::vector<WaitingReason> out;
    for (const std::string& id : run_ids) {
      explained_.push_back(id);
      if (!waiting_.has_value()) continue;
      out.push_back(*waiting_);
      out.back().run_id = id;
    }
    return out;
  }

  Result<std::vector<WaitingCount>> CountWaiting() override {
    std::lock_guard<std::mutex> lock(mu_);
    ++reads_;
    return std::vector<WaitingCount>();
  }

 private:
  template <typename T>
  std::vector<T> Copy(const std::vector<T>& v) const {
    std::lock_guard<std::mutex> lock(mu_);
    return v;
  }

  // The pool's record, created serving only its grants when it has none (as the stores do).
  PoolRecord& PoolLocked(const std::string& name) {
    auto [it, inserted] = pools_.try_emplace(name);
    if (inserted) {
      it->second.name = name;
      it->second.version = 1;
    }
    return it->second;
  }

  WorkerRecord* FindWorkerLocked(const std::string& name_or_id) {
    auto it = workers_.find(name_or_id);
    if (it != workers_.end()) return &it->second;
    for (auto& [id, worker] : workers_) {
      if (worker.name == name_or_id) return &worker;
    }
    return nullptr;
  }

  mutable std::mutex mu_;
  std::map<std::string, PoolRecord> pools_;
  std::map<std::string, WorkerRecord> workers_;  // by id
  std::optional<WaitingReason> waiting_;
  std::vector<GrantPoolCommand> grants_;
  std::vector<RevokePoolCommand> revokes_;
  std::vector<SetPoolCommand> sets_;
  std::vector<DrainWorkerCommand> drains_;
  std::vector<std::string> explained_;
  int reads_ = 0;
};

}  // namespace ql::testing
