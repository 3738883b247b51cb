#pragma once

// The PostgreSQL store of the cluster profile: every repository port of ql/core/ports.h over
// schema ql3, with the same observable behaviour as SqliteStore (the repository contract suite
// runs on both). Management writes (projects, task and trigger revisions) go through a pool
// connected as ql3_admin; everything else through a pool connected as ql3_runtime.
//
// Concurrency: every write is one READ COMMITTED transaction. A change to one resource locks
// its row first (SELECT ... FOR NO KEY UPDATE, which still lets foreign-key checks of other
// transactions through) and compare-and-sets on the expected version, revision or status;
// rows are locked in the order project → head → schedule → run. Unique keys decide races
// between creators (task and trigger heads, run ids, idempotency keys, event sequences).

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ql/core/approval_ports.h"
#include "ql/core/approval_store.h"
#include "ql/core/artifact_store.h"
#include "ql/core/governance_ports.h"
#include "ql/core/governance_store.h"
#include "ql/core/next_fire_gate.h"
#include "ql/core/notification_store.h"
#include "ql/core/placement_ports.h"
#include "ql/core/ports.h"
#include "ql/core/retention.h"
#include "ql/core/secret_store.h"
#include "ql/core/status.h"
#include "ql/storage/postgres/pg_client.h"

namespace ql {

struct CheckedTransition;  // ql/core/store_commands.h

struct PostgresStoreOptions {
  pg::PoolOptions runtime;               // connects as ql3_runtime
  std::optional<pg::PoolOptions> admin;  // connects as ql3_admin; management writes need it
};

class PostgresStore final : public Store,
                            public ProjectRepository,
                            public DefinitionRepository,
                            public ScheduleRepository,
                            public RunRepository {
 public:
  // Checks the URLs (pg::CheckDatabaseUrl with the QL3_POSTGRES_ALLOW_INSECURE policy; its
  // InvalidArgument is returned as is) and creates the pools (InvalidArgument
  // `invalid_pool_options`, or Unavailable when min_connections cannot be opened). The schema
  // is not checked here: the readiness auditor (pg_audit.h) does that before a replica serves.
  static Result<std::unique_ptr<PostgresStore>> Open(const PostgresStoreOptions& options);

  // Closes both pools.
  ~PostgresStore() override;
  PostgresStore(const PostgresStore&) = delete;
  PostgresStore& operator=(const PostgresStore&) = delete;

  // The pool of the runtime role (every read and every run / schedule write).
  pg::Pool& runtime_pool() { return *runtime_; }
  // The pool of the admin role, or nullptr when the store was opened without one.
  pg::Pool* admin_pool() { return admin_.get(); }

  // Store
  ProjectRepository& projects() override { return *this; }
  DefinitionRepository& definitions() override { return *this; }
  ScheduleRepository& schedules() override { return *this; }
  RunRepository& runs() override { return *this; }
  // Governance (pg_governance.h): reads and audit appends as the runtime role, writes and audit
  // reads as the admin role.
  GovernanceRepository& governance() override { return *governance_; }
  // Approvals (pg_approvals.h), all on the runtime pool.
  ApprovalRepository& approvals() override { return *approvals_; }
  // Retention (pg_retention.h): settings written as the admin role, the purge as the runtime
  // role.
  RetentionRepository& retention() override { return *retention_; }
  // Secrets (pg_secrets.h): reads as the runtime role, writes as the admin role.
  SecretRepository& secrets() override { return *secrets_; }
  // Notifications (pg_notifications.h): channel and rule writes and redeliveries as the admin
  // role; reads, the outbox and the delivery loop as the runtime role.
  NotificationRepository& notifications() override { return *notifications_; }
  // Artifacts (pg_artifacts.h): blobs, scripts and versions read as the runtime role; uploads,
  // pushes, deletions and the purge written as the admin role.
  ArtifactRepository& artifacts() override { return *artifacts_; }
  // Worker placement (pg_placement.h): pools, grants and drains written as the admin role;
  // sessions, leases and queued runs read as the runtime role. Only this store has workers.
  PlacementRepository& placement() { return *placement_; }

  // ProjectRepository. EnsureProject returns an existing project through the runtime pool;
  // creating one needs the admin pool, else Unavailable `admin_pool_missing`.
  Result<ProjectRecord> EnsureProject(const std::string& id_if_new, const std::string& slug,
                                      const std::string& name, int64_t now_ms) override;
  Result<ProjectRecord> GetProject(const std::string& project_id) override;
  Result<ProjectRecord> GetProjectBySlug(const std::string& slug) override;
  Result<std::vector<ProjectRecord>> ListProjects() override;

  // DefinitionRepository. Both publishes need the admin pool, else Unavailable
  // `admin_pool_missing` (after the command itself was validated).
  Result<PublishTaskResult> PublishTaskRevision(const PublishTaskCommand& cmd) override;
  Result<PublishTriggerResult> PublishTriggerRevision(const PublishTriggerCommand& cmd) override;
  Result<TaskHeadRecord> GetTaskHead(const std::string& task_id) override;
  Result<std::optional<TaskHeadRecord>> FindTaskByName(const std::string& project_id,
                                                       const std::string& name) override;
  Result<std::optional<TriggerHeadRecord>> FindTriggerByName(const std::string& project_id,
                                                             const std::string& name) override;
  Result<TaskRevisionRecord> GetTaskRevision(const std::string& task_id, int64_t revision) override;
  Result<Page<TaskRevisionRecord>> ListTasks(const std::string& project_id,
                                             const PageRequest& page) override;
  Result<std::vector<TaskRevisionRecord>> ListTaskRevisions(const std::string& task_id) override;
  Result<ExecutionRevisionRecord> GetExecutionRevision(const std::string& id) override;
  Result<ExecutionRevisionRecord> FindExecutionRevision(const std::string& task_id,
                                                        int64_t task_revision,
                                                        const std::string& executor_type) override;
  Result<TriggerHeadRecord> GetTriggerHead(const std::string& trigger_id) override;
  Result<TriggerRevisionRecord> GetTriggerRevision(const std::string& trigger_id,
                                                   int64_t revision) override;
  Result<Page<TriggerRevisionRecord>> ListTriggers(const std::string& project_id,
                                                   const std::optional<std::string>& task_id,
                                                   const PageRequest& page) override;
  Result<ScheduleRecord> GetSchedule(const std::string& trigger_id) override;
  Result<int64_t> CountEnabledTriggers(const std::optional<std::string>& project_id) override;
  Result<int64_t> CountStaleTriggers(const std::optional<std::string>& project_id) override;

  // ScheduleRepository
  Result<std::vector<DueSchedule>> ListDueSchedules(int64_t now_ms, int limit) override;
  Result<std::optional<int64_t>> EarliestDueAt() override;
  Result<AdvanceOutcome> ApplyScheduleAdvance(const ScheduleAdvance& advance) override;
  int64_t TakeNextFireMismatches() override;

  // RunRepository
  Result<RunRecord> CreateRun(const NewRun& run) override;
  Result<RunRecord> GetRun(const std::string& run_id) override;
  Result<RunRecord> FindRunByIdempotencyKey(const std::string& project_id,
                                            const std::string& key) override;
  Result<Page<RunRecord>> ListRuns(const RunFilter& filter, const PageRequest& page) override;
  Result<std::vector<AttemptRecord>> ListAttempts(const std::string& run_id) override;
  Result<std::pair<RunRecord, std::vector<AttemptRecord>>> GetRunWithAttempts(
      const std::string& run_id) override;
  Result<std::vector<EventRecord>> ListEvents(const std::string& run_id, int64_t after_sequence,
                                              int limit) override;
  Result<RunRecord> ApplyTransition(const RunTransitionCommand& transition) override;
  Result<RunRecord> ApplyTransitions(
      const std::vector<RunTransitionCommand>& transitions) override;
  Result<EventRecord> AppendEvent(const std::string& run_id, const NewEvent& event,
                                  int64_t now_ms) override;
  Result<RunRecord> RequestCancel(const std::string& run_id, const std::string& reason,
                                  std::string actor_type, int64_t now_ms,
                                  const std::optional<PolicyFence>& fence = {}) override;
  Result<std::vector<RunRecord>> ListDispatchable(const std::string& executor_type,
                                                  int limit, int64_t now_ms) override;
  Result<std::vector<RunRecord>> ListActive() override;
  Result<std::vector<RunRecord>> ListRetryDue(int64_t now_ms, int limit) override;
  Result<std::vector<std::pair<std::string, int64_t>>> CountRunsByStatus(
      const std::optional<std::string>& project_id) override;
  Result<int64_t> CountRunsInStatus(RunStatus status) override;

 private:
  PostgresStore(std::unique_ptr<pg::Pool> runtime, std::unique_ptr<pg::Pool> admin);

  // One transition of ApplyTransitions, in its transaction.
  Result<RunRecord> ApplyTransitionInTx(pg::Tx& tx, const RunTransitionCommand& t,
                                        const CheckedTransition& checked);
  // Runs `body` in a READ ONLY transaction on the runtime pool.
  Status Read(std::string_view operation, const std::function<Status(pg::Tx&)>& body);
  // Runs `body` in a read-write transaction on the runtime pool.
  Status Write(std::string_view operation, const std::function<Status(pg::Tx&)>& body);
  // Runs `body` in a read-write transaction on the admin pool; Unavailable
  // `admin_pool_missing` without one.
  Status AdminWrite(std::string_view operation, const std::function<Status(pg::Tx&)>& body);

  // The policy fence of a command (no-op without one), inside `tx`.
  Status Fence(pg::Tx& tx, const std::optional<PolicyFence>& fence, const std::string& project_id);

  std::unique_ptr<pg::Pool> runtime_;
  std::unique_ptr<pg::Pool> admin_;
  // Recomputes an admission's cursor from the stored trigger revision and counts refusals.
  NextFireGate next_fire_gate_;
  std::unique_ptr<GovernanceTxRunner> governance_runner_;
  std::unique_ptr<GovernanceRepository> governance_;
  std::unique_ptr<ApprovalTxRunner> approvals_runner_;
  std::unique_ptr<ApprovalRepository> approvals_;
  std::unique_ptr<RetentionRepository> retention_;
  std::unique_ptr<SecretTxRunner> secret_runner_;
  std::unique_ptr<SecretRepository> secrets_;
  std::unique_ptr<NotificationTxRunner> notification_runner_;
  std::unique_ptr<NotificationRepository> notifications_;
  std::unique_ptr<ArtifactTxRunner> artifact_runner_;
  std::unique_ptr<ArtifactRepository> artifacts_;
  std::unique_ptr<PlacementRepository> placement_;
};

}  // namespace ql
