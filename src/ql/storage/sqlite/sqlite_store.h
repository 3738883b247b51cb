#pragma once

// The SQLite store of the local profiles (edge, standalone): every repository port of
// ql/core/ports.h over one SQLite file, with the sqlite-main migration stream applied on open.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ql/core/approval_ports.h"
#include "ql/core/approval_store.h"
#include "ql/core/artifact_store.h"
#include "ql/core/clock.h"
#include "ql/core/governance_ports.h"
#include "ql/core/governance_store.h"
#include "ql/core/next_fire_gate.h"
#include "ql/core/notification_store.h"
#include "ql/core/ports.h"
#include "ql/core/retention.h"
#include "ql/core/secret_store.h"
#include "ql/core/status.h"

namespace ql {

struct CheckedTransition;  // ql/core/store_commands.h

namespace sqlite {
class Db;
}  // namespace sqlite

inline constexpr char kSqliteProfileEdge[] = "edge";
inline constexpr char kSqliteProfileStandalone[] = "standalone";

struct SqliteOptions {
  std::string path;
  // "edge": rollback journal (journal_mode=DELETE), synchronous=FULL, 4 MiB page cache, no mmap.
  // "standalone": journal_mode=WAL, synchronous=NORMAL, 16 MiB page cache.
  std::string profile = kSqliteProfileStandalone;
  // How long one attempt waits for another connection's lock.
  int busy_timeout_ms = 5000;
  // How many times a transaction that found the database locked is rerun before Busy.
  int max_busy_retries = 5;
};

// The connection settings in effect, read back from SQLite.
struct SqliteSettings {
  std::string journal_mode;  // "delete" | "wal"
  int64_t synchronous = 0;   // 1 = NORMAL, 2 = FULL
  int64_t cache_size = 0;    // negative: KiB
  int64_t mmap_size = 0;
  bool foreign_keys = false;
  int64_t busy_timeout_ms = 0;
};

// One migration history row as stored.
struct SqliteHistoryRow {
  std::string id;
  std::string stream;
  std::string dialect;
  std::string checksum;
  int64_t applied_at_ms = 0;
};

// The capability row as stored.
struct SqliteCapabilityRow {
  std::string name;
  int64_t version = 0;
  std::string capability_map;
  std::string migration_id;
};

class SqliteStore final : public Store,
                          public ProjectRepository,
                          public DefinitionRepository,
                          public ScheduleRepository,
                          public RunRepository {
 public:
  // Opens the database at `options.path` (created when absent) and brings it to the code's
  // schema. The whole migration history is read and checked first (PendingMigrations): a
  // database that is newer than the code, tampered with, gapped or of another stream is refused
  // with Corrupt and the core's reason (`migration_unknown`, `migration_checksum_mismatch`,
  // `migration_gap`, `migration_wrong_stream`, ...) without changing the file; a file holding
  // tables but no history is Corrupt `migration_history_invalid`. Pending migrations are then
  // applied, each in one BEGIN IMMEDIATE transaction together with its history row and its
  // capability step. Finally the capability row must equal ExpectedCapability(), else Corrupt
  // `capability_invalid`. Other errors: InvalidArgument `invalid_profile` /
  // `invalid_sqlite_options`, Unavailable when the file cannot be opened, Busy when another
  // process holds the write lock past the bounded retries. `clock` stamps applied_at_ms.
  static Result<std::unique_ptr<SqliteStore>> Open(const SqliteOptions& options, Clock& clock);

  ~SqliteStore() override;
  SqliteStore(const SqliteStore&) = delete;
  SqliteStore& operator=(const SqliteStore&) = delete;

  // Returns the connection settings in effect (to verify the profile).
  Result<SqliteSettings> Settings();
  // Returns the migration history in apply order.
  Result<std::vector<SqliteHistoryRow>> History();
  // Returns the capability rows.
  Result<std::vector<SqliteCapabilityRow>> Capabilities();

  // Store
  ProjectRepository& projects() override { return *this; }
  DefinitionRepository& definitions() override { return *this; }
  ScheduleRepository& schedules() override { return *this; }
  RunRepository& runs() override { return *this; }
  GovernanceRepository& governance() override { return *governance_; }
  ApprovalRepository& approvals() override { return *approvals_; }
  RetentionRepository& retention() override { return *retention_; }
  SecretRepository& secrets() override { return *secrets_; }
  NotificationRepository& notifications() override { return *notifications_; }
  ArtifactRepository& artifacts() override { return *artifacts_; }

  // ProjectRepository
  Result<ProjectRecord> EnsureProject(const std::string& id_if_new, const std::string& slug,
                                      const std::string& name, int64_t now_ms) override;
  Result<ProjectRecord> GetProject(const std::string& project_id) override;
  Result<ProjectRecord> GetProjectBySlug(const std::string& slug) override;
  Result<std::vector<ProjectRecord>> ListProjects() override;

  // DefinitionRepository
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
  explicit SqliteStore(std::unique_ptr<sqlite::Db> db);

  // One transition of ApplyTransitions, inside its transaction.
  Result<RunRecord> ApplyTransitionInTx(const RunTransitionCommand& t,
                                        const CheckedTransition& checked);

  // The policy fence of a command (no-op without one), inside the caller's transaction.
  Status Fence(const std::optional<PolicyFence>& fence, const std::string& project_id);
  // As Fence, but an archived project does not refuse (cancels stop work, so they stay allowed).
  Status FenceAnyStatus(const std::optional<PolicyFence>& fence, const std::string& project_id);

  std::unique_ptr<sqlite::Db> db_;
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
};

}  // namespace ql
