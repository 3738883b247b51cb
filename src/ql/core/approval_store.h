#pragma once

// The approval repository written once over a store's primitives, as governance_store.h is: a
// store implements ApprovalTx (row reads and writes inside one of its transactions, no
// decisions) and ApprovalTxRunner; ApprovalStore holds every rule — the policy fence, self
// approval, expiry, staleness, replays, the run it creates, resolutions and audit facts — so
// SQLite and PostgreSQL cannot decide differently.

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ql/core/approval.h"
#include "ql/core/approval_ports.h"
#include "ql/core/clock.h"
#include "ql/core/governance_store.h"
#include "ql/core/notification_store.h"
#include "ql/core/ports.h"
#include "ql/core/records.h"
#include "ql/core/status.h"

namespace ql {

// Row primitives inside one transaction. Loads return nullopt for a missing row; writes return
// the store's mapped errors. Nothing here decides anything.
class ApprovalTx {
 public:
  virtual ~ApprovalTx() = default;

  // The governance primitives of the same transaction (policy fence, audit facts).
  virtual GovernanceTx& governance() = 0;
  // The notification primitives of the same transaction (the outbox rows a request or a
  // decision writes).
  virtual NotificationTx& notifications() = 0;
  // Returns the store's clock: the database clock in PostgreSQL, `command_now_ms` in SQLite.
  virtual Result<int64_t> ClockMs(int64_t command_now_ms) = 0;

  virtual Result<std::optional<TaskHeadRecord>> LoadTaskHead(const std::string& task_id) = 0;
  virtual Result<std::optional<TaskRevisionRecord>> LoadTaskRevision(const std::string& task_id,
                                                                     int64_t revision) = 0;
  // True when execution revision `id` is the plan of (task, revision) with `task_digest`.
  virtual Result<bool> ExecutionRevisionMatches(const std::string& id, const std::string& task_id,
                                                int64_t task_revision,
                                                const std::string& task_digest) = 0;

  // Loads a request; `lock` holds its row against other deciders until the end of the
  // transaction.
  virtual Result<std::optional<ApprovalRequestRecord>> LoadRequest(const std::string& id,
                                                                   bool lock) = 0;
  virtual Result<std::optional<ApprovalRequestRecord>> LoadRequestByKey(
      const std::string& project_id, const std::string& idempotency_key) = 0;
  // Lists requests with id < before_id (all when empty), newest first, at most `limit`.
  virtual Result<std::vector<ApprovalRequestRecord>> ListRequests(
      const ApprovalFilter& filter, const std::optional<std::string>& before_id, int limit) = 0;
  // Locks and returns at most `limit` pending requests with expires_at_ms <= now_ms (skipping
  // rows other transactions hold).
  virtual Result<std::vector<ApprovalRequestRecord>> LockExpiredPending(int64_t now_ms,
                                                                        int limit) = 0;
  virtual Status InsertRequest(const ApprovalRequestRecord& request) = 0;
  // Sets status and decided_at where the status is still pending; Conflict otherwise.
  virtual Status DecideRequest(const std::string& id, const std::string& status,
                               int64_t decided_at_ms) = 0;

  virtual Result<std::optional<ApprovalDecisionRecord>> LoadDecision(
      const std::string& request_id) = 0;
  virtual Status InsertDecision(const ApprovalDecisionRecord& decision) = 0;
  virtual Result<std::optional<ApprovedActionRecord>> LoadAction(
      const std::string& request_id) = 0;
  virtual Status InsertAction(const ApprovedActionRecord& action) = 0;
  virtual Result<std::optional<ApprovalReceiptRecord>> LoadReceipt(
      const std::string& request_id) = 0;
  virtual Result<std::optional<ApprovalReceiptRecord>> LoadReceiptByRun(
      const std::string& run_id) = 0;
  virtual Status InsertReceipt(const ApprovalReceiptRecord& receipt) = 0;

  // Inserts a queued run with its claimed first attempt, retry policy and events run.created
  // and run.queued, every timestamp `now_ms`.
  virtual Status InsertQueuedRun(const NewRun& run, int64_t now_ms) = 0;
  // Loads a run; `lock` holds its row until the end of the transaction.
  virtual Result<std::optional<RunRecord>> LoadRun(const std::string& run_id, bool lock) = 0;
  virtual Result<std::optional<AttemptRecord>> LoadLatestAttempt(const std::string& run_id) = 0;
  virtual Status InsertEvent(const std::string& run_id, int64_t sequence, const NewEvent& event,
                             const std::string& canonical_payload, int64_t now_ms) = 0;
  // Ends a run: status, version + 1, event_sequence, finished_at and the error fields, where the
  // version is still `expected_version`; Conflict `version_conflict` otherwise.
  virtual Status FinishRun(const std::string& run_id, int64_t expected_version,
                           const std::string& status, int64_t event_sequence,
                           int64_t finished_at_ms, const std::optional<std::string>& error_code,
                           const std::optional<std::string>& error_summary) = 0;

  virtual Result<std::optional<RunResolutionRecord>> LoadResolution(
      const std::string& run_id) = 0;
  virtual Status InsertResolution(const RunResolutionRecord& resolution) = 0;
};

enum class ApprovalTxKind { kRead, kWrite };

class ApprovalTxRunner {
 public:
  virtual ~ApprovalTxRunner() = default;
  // Runs `body` in one transaction of `kind`, committing when it returns ok.
  virtual Status Run(ApprovalTxKind kind, std::string_view operation,
                     const std::function<Status(ApprovalTx&)>& body) = 0;
};

class ApprovalStore final : public ApprovalRepository {
 public:
  // `runner` and `random` must outlive the store (`random` makes the ids of audit facts).
  ApprovalStore(ApprovalTxRunner& runner, RandomSource& random);

  Result<RequestApprovalResult> RequestApproval(const RequestApprovalCommand& cmd) override;
  Result<ApprovalView> GetApproval(const std::string& request_id) override;
  Result<Page<ApprovalRequestRecord>> ListApprovals(const ApprovalFilter& filter,
                                                    const PageRequest& page) override;
  Result<ApproveResult> Approve(const ApproveCommand& cmd) override;
  Result<ApprovalView> Reject(const RejectCommand& cmd) override;
  Result<int> ExpireDue(int limit, int64_t now_ms) override;
  Result<ResolveRunResult> ResolveRun(const ResolveRunCommand& cmd) override;
  Result<ResolveRunResult> ResolveFromEvidence(const EvidenceResolutionCommand& cmd) override;
  Result<RunResolutionRecord> GetResolution(const std::string& run_id) override;
  Result<ApprovalReceiptRecord> ReceiptOfRun(const std::string& run_id) override;

 private:
  // An audit fact of a successful approval write.
  AuditRecord Fact(const Actor& actor, std::string_view action, std::string_view target_kind,
                   const std::string& target_id, const std::string& project_id, int64_t now_ms);

  ApprovalTxRunner& runner_;
  RandomSource& random_;
  std::mutex random_mu_;
};

}  // namespace ql
