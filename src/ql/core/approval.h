#pragma once

// Approvals and approved actions (DESIGN §9.1): a task revision may require a second person to
// approve each manual run. The records here are what both stores keep; the rules that write them
// are in approval_store.h. Everything here is pure.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "ql/core/governance.h"
#include "ql/core/records.h"
#include "ql/core/status.h"

namespace ql {

inline constexpr int64_t kDefaultApprovalTtlMs = int64_t{24} * 60 * 60 * 1000;
inline constexpr int64_t kMinApprovalTtlMs = 1000;
inline constexpr int64_t kMaxApprovalTtlMs = int64_t{30} * 24 * 60 * 60 * 1000;
inline constexpr size_t kMaxApprovalReasonChars = 512;

// The approval policy of a task revision: manual runs of it wait for a principal other than the
// requester who holds `approver_role` (admin or owner) in the project, within `ttl_ms`.
struct ApprovalPolicy {
  bool required = true;
  Role approver_role = Role::kAdmin;
  int64_t ttl_ms = kDefaultApprovalTtlMs;
  bool operator==(const ApprovalPolicy&) const = default;
};

// Parses {"required": bool, "approver_role": "admin" | "owner", "ttl_ms": int} (each optional,
// defaults as in ApprovalPolicy). Errors are InvalidArgument: approval_invalid_type,
// approval_unknown_field, approval_invalid_role (another role), approval_ttl_out_of_range
// (outside kMinApprovalTtlMs .. kMaxApprovalTtlMs).
Result<ApprovalPolicy> ParseApprovalPolicy(const nlohmann::json& value);

// Returns the normalised object with every field present.
nlohmann::json ApprovalPolicyToJson(const ApprovalPolicy& policy);

// Returns the policy a stored task revision carries when it requires approval, nullopt when it
// requires none; Corrupt `approval_policy_invalid` for a stored policy that does not parse.
Result<std::optional<ApprovalPolicy>> RequiredApproval(const TaskRevisionRecord& revision);

// The only action that needs approval today.
inline constexpr std::string_view kApprovalActionRunCreate = "run.create";

// Request states: pending until approved, rejected or expired; none of those changes again.
inline constexpr std::string_view kApprovalPending = "pending";
inline constexpr std::string_view kApprovalApproved = "approved";
inline constexpr std::string_view kApprovalRejected = "rejected";
inline constexpr std::string_view kApprovalExpired = "expired";

// Returns ok for pending, approved, rejected or expired; InvalidArgument `invalid_status`.
Status ValidateApprovalStatus(std::string_view status);

// One request to run an action that needs approval.
struct ApprovalRequestRecord {
  std::string id;
  std::string project_id;
  std::string action;  // kApprovalActionRunCreate
  std::string task_id;
  int64_t task_revision = 0;
  std::string task_digest;
  std::string execution_revision_id;
  int priority = 0;
  std::optional<std::string> idempotency_key;  // unique per project when set
  std::string payload_json;    // canonical action payload (ApprovalPayloadCanonical)
  std::string payload_digest;  // ApprovalPayloadDigest of payload_json
  std::string requester_id;
  int64_t requester_binding_version = 0;  // of the binding that let the requester ask
  std::string approver_role;              // admin | owner
  std::string status;
  int64_t created_at_ms = 0;
  int64_t expires_at_ms = 0;  // database clock in the cluster
  std::optional<int64_t> decided_at_ms;
  // The run this request retries (POST /runs/{id}/retry of a guarded task): the approved run
  // records it as retry_of_run_id. A plain reference (no foreign key): retention may purge it.
  std::optional<std::string> retry_of_run_id;
};

// The decision on a request: approved or rejected by a principal, or expired by the sweeper.
struct ApprovalDecisionRecord {
  std::string id;
  std::string request_id;
  std::string decision;  // approved | rejected | expired
  std::optional<std::string> decided_by;
  std::optional<int64_t> decider_binding_version;
  std::optional<std::string> reason;
  int64_t decided_at_ms = 0;
};

// The approved action, consumed by the run it created in the approval's transaction.
struct ApprovedActionRecord {
  std::string id;
  std::string request_id;
  std::string decision_id;
  std::string action;
  std::string payload_digest;
  std::string status;  // consumed
  std::string run_id;
  int64_t consumed_at_ms = 0;
};

// Links request, decision, action and run; one per request.
struct ApprovalReceiptRecord {
  std::string id;
  std::string request_id;
  std::string decision_id;
  std::string action_id;
  std::string run_id;
  int64_t created_at_ms = 0;
};

// How an admin resolved a run that required recovery.
inline constexpr std::string_view kResolveSucceeded = "succeeded";
inline constexpr std::string_view kResolveFailed = "failed";
inline constexpr std::string_view kResolveRetry = "retry";

struct RunResolutionRecord {
  std::string run_id;
  std::string resolution;  // succeeded | failed | retry
  std::string reason;
  // The admin who resolved it; empty when the attempt's own late report resolved it
  // (automatic evidence resolution; `reason` then says what the evidence was).
  std::optional<std::string> resolved_by;
  std::optional<std::string> retry_run_id;  // the new approved run of a retry
  int64_t created_at_ms = 0;
};

// Returns the canonical action payload of a run.create request: project, task, pinned revision,
// its digest, the execution revision and the run's priority and idempotency key.
std::string ApprovalPayloadCanonical(const ApprovalRequestRecord& request);

// Returns DomainDigest("qinglong/approval-action@v1", payload).
std::string ApprovalPayloadDigest(std::string_view payload);

// Validates a decision or resolution reason: 1 .. kMaxApprovalReasonChars characters of valid
// UTF-8 without control characters; InvalidArgument `invalid_reason`.
Status ValidateApprovalReason(std::string_view reason);

}  // namespace ql
