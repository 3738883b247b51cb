#pragma once

// The approval port (DESIGN §9.1): requests for actions that need a second person, their
// decisions, the approved actions they create and the resolution of approved runs whose fate is
// unknown. Same observable behaviour in every store (the repository contract suite states it).
// Every write is fenced (CheckPolicyFence) in its own transaction and appends its audit fact in
// that transaction; a refused write changes nothing.
//
// Errors beyond ports.h's and governance_ports.h's conventions:
//   NotFound          approval_not_found, task_not_found, run_not_found
//   PermissionDenied  approval_self (the requester approves its own request)
//   Conflict          approval_not_required, approval_stale (the task moved on since the
//                     request), approval_expired, approval_rejected, approval_already_approved,
//                     idempotency_key_reused, run_not_recovery_required, run_already_resolved,
//                     project_archived

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ql/core/approval.h"
#include "ql/core/governance_ports.h"
#include "ql/core/ports.h"
#include "ql/core/records.h"
#include "ql/core/status.h"

namespace ql {

// A manual run of a task revision that requires approval. The requester needs the operator
// role; the store re-reads the task and refuses a revision that is no longer current and
// enabled (task_revision_not_current) or that requires no approval (approval_not_required).
struct RequestApprovalCommand {
  Actor actor;     // the requester; never the system
  std::string id;  // canonical UUID of the new request
  std::string project_id;
  std::string task_id;
  int64_t task_revision = 0;
  std::string task_digest;
  std::string execution_revision_id;
  int priority = 0;
  std::optional<std::string> idempotency_key;
  std::optional<std::string> retry_of_run_id;  // set when the request retries that run
  int64_t now_ms = 0;  // SQLite's clock; PostgreSQL reads its own
};

struct RequestApprovalResult {
  ApprovalRequestRecord request;
  bool replayed = false;  // the idempotency key named this request already
};

// A request with everything decided about it.
struct ApprovalView {
  ApprovalRequestRecord request;
  std::optional<ApprovalDecisionRecord> decision;
  std::optional<ApprovedActionRecord> action;
  std::optional<ApprovalReceiptRecord> receipt;
};

// Approves a pending request and, in the same transaction, consumes its action: the queued run
// with its claimed attempt and events. The ids are the caller's, used only when the approval
// is new.
struct ApproveCommand {
  Actor actor;
  std::string request_id;
  std::string decision_id;
  std::string action_id;
  std::string receipt_id;
  std::string run_id;
  std::string attempt_id;
  std::string executor_type;  // of the run's attempt
  RetryPolicy retry_policy;   // snapshot of the pinned execution revision's plan
  int64_t now_ms = 0;
};

struct ApproveResult {
  ApprovalView approval;  // with decision, action and receipt
  RunRecord run;
  bool replayed = false;  // approved before: the same receipt, no second run
};

struct RejectCommand {
  Actor actor;
  std::string request_id;
  std::string decision_id;
  std::string reason;
  int64_t now_ms = 0;
};

// Resolves a run in recovery_required. A retry fails the run and creates a new approved run of
// the same execution revision with retry_of_run_id set.
struct ResolveRunCommand {
  Actor actor;
  std::string run_id;
  std::string resolution;  // succeeded | failed | retry
  std::string reason;
  std::string new_run_id;      // retry only
  std::string new_attempt_id;  // retry only
  int64_t now_ms = 0;
};

// Resolves a run in recovery_required from evidence of its outcome: the lost attempt's own
// report arriving late (its worker outlived its lease and says how the command ended).
struct EvidenceResolutionCommand {
  std::string run_id;
  std::string attempt_id;  // the lost attempt the evidence is about: the run's latest
  bool succeeded = false;  // the command exited 0
  std::string evidence;    // what was reported, for the reason and the event
  int64_t now_ms = 0;
};

struct ResolveRunResult {
  RunResolutionRecord resolution;
  RunRecord run;
  std::optional<RunRecord> retry_run;
  bool replayed = false;  // resolved the same way before: nothing written
};

struct ApprovalFilter {
  std::optional<std::string> project_id;
  std::optional<std::string> status;
};

class ApprovalRepository {
 public:
  virtual ~ApprovalRepository() = default;

  // Creates a pending request (audited approval.request) expiring after the revision's policy
  // TTL on the store's clock. The same idempotency key in the project returns the stored request
  // (replayed) when it names the same task, else Conflict idempotency_key_reused.
  virtual Result<RequestApprovalResult> RequestApproval(const RequestApprovalCommand& cmd) = 0;
  virtual Result<ApprovalView> GetApproval(const std::string& request_id) = 0;
  // Lists requests newest first (by id, which is time-ordered) with keyset paging.
  virtual Result<Page<ApprovalRequestRecord>> ListApprovals(const ApprovalFilter& filter,
                                                            const PageRequest& page) = 0;
  // In one transaction: the approver's policy fence with the request's approver role, a
  // different principal than the requester (approval_self), the request pending and unexpired
  // by the store's clock, the task's current enabled revision, digest and execution revision
  // still the payload's (approval_stale); then the decision, the consumed action, the queued run
  // with its claimed attempt and run.created + run.queued, the receipt, and the audit fact
  // approval.approve. An approved request returns its receipt again (replayed).
  virtual Result<ApproveResult> Approve(const ApproveCommand& cmd) = 0;
  // Rejects a pending request with a reason (approver role; the requester may withdraw its own).
  // A rejected request returns as it is; an approved or expired one is Conflict.
  virtual Result<ApprovalView> Reject(const RejectCommand& cmd) = 0;
  // Expires up to `limit` pending requests whose expiry passed by the store's clock, each with
  // its decision and audit fact approval.expire. Returns how many.
  virtual Result<int> ExpireDue(int limit, int64_t now_ms) = 0;
  // Resolves a run in recovery_required (admin in its project): the resolution, the run's
  // terminal state with run.recovery_resolved and run.<state>, the retry's new run and the audit
  // fact run.resolve commit together. The same resolution again returns it (replayed).
  virtual Result<ResolveRunResult> ResolveRun(const ResolveRunCommand& cmd) = 0;
  // Resolves a run in recovery_required from the late report of its lost latest attempt, in the
  // same transaction shape as ResolveRun (no principal: resolved_by empty, audit fact
  // run.resolve without an actor). A run resolved before (by hand or by evidence) returns that
  // resolution with replayed set and nothing written: exactly one resolution wins. A run not in
  // recovery_required → Conflict run_not_recovery_required; another attempt → Conflict
  // evidence_attempt_mismatch.
  virtual Result<ResolveRunResult> ResolveFromEvidence(const EvidenceResolutionCommand& cmd) = 0;
  // Returns the resolution of a run, NotFound `resolution_not_found` when it has none.
  virtual Result<RunResolutionRecord> GetResolution(const std::string& run_id) = 0;
  // Returns the receipt whose run is `run_id`, NotFound `receipt_not_found` when it has none.
  virtual Result<ApprovalReceiptRecord> ReceiptOfRun(const std::string& run_id) = 0;
};

}  // namespace ql
