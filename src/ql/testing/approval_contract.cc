// The approval part of the repository contract (DESIGN §9.1): requests, approval with its
// atomic run creation and receipt, rejection, expiry, staleness, the policy fence of approvers,
// and the resolution of runs in recovery_required. Runs on every store through
// RepositoryContractTest.

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "ql/core/approval.h"
#include "ql/core/approval_ports.h"
#include "ql/core/canonical_json.h"
#include "ql/core/notification_store.h"
#include "ql/core/retention.h"
#include "ql/testing/contract_assertions.h"
#include "ql/testing/repository_contract.h"
#include "ql/testing/run_steps.h"

namespace ql::testing {

namespace internal {
bool LinkApprovalContract() { return true; }
}  // namespace internal

namespace {

#define QL_ASSERT_VALUE(lhs, expr)                                            \
  auto QL_CONCAT_(ql_value_, __LINE__) = (expr);                              \
  ASSERT_TRUE(QL_CONCAT_(ql_value_, __LINE__).ok())                           \
      << QL_CONCAT_(ql_value_, __LINE__).status().ToString();                 \
  lhs = std::move(QL_CONCAT_(ql_value_, __LINE__)).value()

// Returns the newest audit fact of `action` on `target_id`, or nullopt.
std::optional<AuditRecord> FindAudit(GovernanceRepository& gov, std::string_view action,
                                     const std::string& target_id) {
  Result<Page<AuditRecord>> audit = gov.ListAudit(PageRequest{std::nullopt, 100});
  if (!audit.ok()) return std::nullopt;
  for (const AuditRecord& fact : audit->items) {
    if (fact.action == action && fact.target_id == target_id) return fact;
  }
  return std::nullopt;
}

int64_t CountRuns(Store& store, const std::string& task_id) {
  RunFilter filter;
  filter.task_id = task_id;
  Result<Page<RunRecord>> runs = store.runs().ListRuns(filter, PageRequest{std::nullopt, 100});
  return runs.ok() ? static_cast<int64_t>(runs->items.size()) : -1;
}

}  // namespace

void ApprovalContract::SetUp() {
  GovernanceContract::SetUp();
  if (HasFatalFailure()) return;
  owner_ = Owner();
  Result<PrincipalRecord> op = AddPrincipal(owner_, "operator");
  ASSERT_TRUE(op.ok()) << op.status().ToString();
  operator_ = *op;
  Result<PrincipalRecord> admin = AddPrincipal(owner_, "approver");
  ASSERT_TRUE(admin.ok()) << admin.status().ToString();
  admin_ = *admin;
  ASSERT_TRUE(Grant(owner_, project().id, operator_, Role::kOperator).ok());
  ASSERT_TRUE(Grant(owner_, project().id, admin_, Role::kAdmin).ok());
}

Result<TaskRevisionRecord> ApprovalContract::PublishGuarded(const std::string& name,
                                                            const std::string& approver_role,
                                                            int64_t ttl_ms) {
  // Task names are unique in a project: each guarded task gets its own.
  const std::string task_id = NewId();
  PublishTaskCommand cmd = TaskCommand(task_id, std::nullopt, name + "-" + task_id);
  cmd.revision.approval_json = ::ql::internal::CanonicalJsonLossy(ApprovalPolicyToJson(
      ApprovalPolicy{true, *ParseRole(approver_role), ttl_ms}));
  QL_ASSIGN_OR_RETURN(PublishTaskResult result, store().definitions().PublishTaskRevision(cmd));
  return result.revision;
}

RequestApprovalCommand ApprovalContract::RequestCommand(const PrincipalRecord& requester,
                                                        const TaskRevisionRecord& task) {
  RequestApprovalCommand cmd;
  cmd.actor = Actor{requester.id, "req-request"};
  cmd.id = NewId();
  cmd.project_id = task.project_id;
  cmd.task_id = task.task_id;
  cmd.task_revision = task.revision;
  cmd.task_digest = task.content_digest;
  Result<ExecutionRevisionRecord> exec =
      store().definitions().FindExecutionRevision(task.task_id, task.revision, "local_process");
  if (exec.ok()) cmd.execution_revision_id = exec->id;
  cmd.now_ms = Now();
  return cmd;
}

ApproveCommand ApprovalContract::ApproveAs(const PrincipalRecord& approver,
                                           const std::string& request_id) {
  ApproveCommand cmd;
  cmd.actor = Actor{approver.id, "req-approve"};
  cmd.request_id = request_id;
  cmd.decision_id = NewId();
  cmd.action_id = NewId();
  cmd.receipt_id = NewId();
  cmd.run_id = NewId();
  cmd.attempt_id = NewId();
  cmd.executor_type = "local_process";
  cmd.now_ms = Now();
  return cmd;
}

Result<RunRecord> ApprovalContract::RecoveryRequiredRun() {
  return RecoveryRequiredRun("admin", operator_, admin_);
}

Result<RunRecord> ApprovalContract::RecoveryRequiredRun(const std::string& approver_role,
                                                        const PrincipalRecord& requester,
                                                        const PrincipalRecord& approver) {
  QL_ASSIGN_OR_RETURN(TaskRevisionRecord task, PublishGuarded("guarded", approver_role));
  QL_ASSIGN_OR_RETURN(RequestApprovalResult requested,
                      store().approvals().RequestApproval(RequestCommand(requester, task)));
  QL_ASSIGN_OR_RETURN(ApproveResult approved,
                      store().approvals().Approve(ApproveAs(approver, requested.request.id)));
  return LoseAfterStart(approved.run);
}

Result<RunRecord> ApprovalContract::LoseAfterStart(const RunRecord& queued) {
  return testing::LoseAfterStart(store().runs(), queued, Now());
}

ResolveRunCommand ApprovalContract::ResolveAs(const PrincipalRecord& actor,
                                              const std::string& run_id,
                                              const std::string& resolution) {
  ResolveRunCommand cmd;
  cmd.actor = Actor{actor.id, "req-resolve"};
  cmd.run_id = run_id;
  cmd.resolution = resolution;
  cmd.reason = "checked the target system by hand";
  if (resolution == kResolveRetry) {
    cmd.new_run_id = NewId();
    cmd.new_attempt_id = NewId();
  }
  cmd.now_ms = Now();
  return cmd;
}

TEST_P(ApprovalContract, RequestIsPendingAuditedAndReplayedByItsKey) {
  QL_ASSERT_VALUE(TaskRevisionRecord task, PublishGuarded("guarded", "owner", 3'600'000));
  RequestApprovalCommand cmd = RequestCommand(operator_, task);
  cmd.idempotency_key = "deploy-42";
  QL_ASSERT_VALUE(RequestApprovalResult first, store().approvals().RequestApproval(cmd));
  EXPECT_FALSE(first.replayed);
  const ApprovalRequestRecord& r = first.request;
  EXPECT_EQ(r.status, "pending");
  EXPECT_EQ(r.action, "run.create");
  EXPECT_EQ(r.requester_id, operator_.id);
  EXPECT_GE(r.requester_binding_version, 1);
  EXPECT_EQ(r.approver_role, "owner");
  EXPECT_EQ(r.expires_at_ms - r.created_at_ms, 3'600'000);
  EXPECT_EQ(r.payload_json, ApprovalPayloadCanonical(r));
  EXPECT_EQ(r.payload_digest, ApprovalPayloadDigest(r.payload_json));
  EXPECT_EQ(CountRuns(store(), task.task_id), 0);

  RequestApprovalCommand again = RequestCommand(operator_, task);
  again.idempotency_key = "deploy-42";
  QL_ASSERT_VALUE(RequestApprovalResult replay, store().approvals().RequestApproval(again));
  EXPECT_TRUE(replay.replayed);
  EXPECT_EQ(replay.request.id, r.id);

  QL_ASSERT_VALUE(TaskRevisionRecord other, PublishGuarded("other"));
  RequestApprovalCommand reused = RequestCommand(operator_, other);
  reused.idempotency_key = "deploy-42";
  QL_EXPECT_ERROR(store().approvals().RequestApproval(reused), StatusCode::kConflict,
                  "idempotency_key_reused");

  std::optional<AuditRecord> fact = FindAudit(gov(), "approval.request", r.id);
  ASSERT_TRUE(fact.has_value());
  EXPECT_EQ(fact->actor_id, operator_.id);
  EXPECT_EQ(fact->project_id, project().id);
}

TEST_P(ApprovalContract, RequestNeedsAGuardedCurrentTaskAndAnOperator) {
  QL_ASSERT_VALUE(TaskRevisionRecord plain, PublishTask(NewId(), std::nullopt, "plain"));
  QL_EXPECT_ERROR(store().approvals().RequestApproval(RequestCommand(operator_, plain)),
                  StatusCode::kConflict, "approval_not_required");
  QL_ASSERT_VALUE(TaskRevisionRecord task, PublishGuarded("guarded"));
  QL_ASSERT_VALUE(PrincipalRecord viewer, AddPrincipal(owner_, "viewer"));
  ASSERT_TRUE(Grant(owner_, project().id, viewer, Role::kViewer).ok());
  QL_EXPECT_ERROR(store().approvals().RequestApproval(RequestCommand(viewer, task)),
                  StatusCode::kPermissionDenied, "permission_denied");
  RequestApprovalCommand stale = RequestCommand(operator_, task);
  stale.task_revision = 2;
  QL_EXPECT_ERROR(store().approvals().RequestApproval(stale), StatusCode::kConflict,
                  "task_revision_not_current");
  QL_ASSERT_VALUE(Page<ApprovalRequestRecord> none,
                  store().approvals().ListApprovals({}, PageRequest{std::nullopt, 10}));
  EXPECT_TRUE(none.items.empty());
}

TEST_P(ApprovalContract, ApprovalCommitsRunAttemptEventsAndReceiptOnce) {
  QL_ASSERT_VALUE(TaskRevisionRecord task, PublishGuarded("guarded"));
  RequestApprovalCommand request = RequestCommand(operator_, task);
  request.priority = 7;
  QL_ASSERT_VALUE(RequestApprovalResult requested, store().approvals().RequestApproval(request));
  ApproveCommand approve = ApproveAs(admin_, requested.request.id);
  QL_ASSERT_VALUE(ApproveResult approved, store().approvals().Approve(approve));
  EXPECT_FALSE(approved.replayed);
  EXPECT_EQ(approved.run.id, approve.run_id);
  EXPECT_EQ(approved.run.status, "queued");
  EXPECT_EQ(approved.run.trigger_type, "approved");
  EXPECT_EQ(approved.run.priority, 7);
  EXPECT_EQ(approved.run.execution_revision_id, request.execution_revision_id);
  const ApprovalView& view = approved.approval;
  EXPECT_EQ(view.request.status, "approved");
  ASSERT_TRUE(view.decision.has_value());
  EXPECT_EQ(view.decision->decision, "approved");
  EXPECT_EQ(view.decision->decided_by, admin_.id);
  ASSERT_TRUE(view.action.has_value());
  EXPECT_EQ(view.action->status, "consumed");
  EXPECT_EQ(view.action->run_id, approve.run_id);
  EXPECT_EQ(view.action->payload_digest, requested.request.payload_digest);
  ASSERT_TRUE(view.receipt.has_value());
  EXPECT_EQ(view.receipt->request_id, requested.request.id);
  EXPECT_EQ(view.receipt->decision_id, view.decision->id);
  EXPECT_EQ(view.receipt->action_id, view.action->id);
  EXPECT_EQ(view.receipt->run_id, approve.run_id);

  QL_ASSERT_VALUE(std::vector<AttemptRecord> attempts, store().runs().ListAttempts(approve.run_id));
  ASSERT_EQ(attempts.size(), 1u);
  EXPECT_EQ(attempts[0].id, approve.attempt_id);
  EXPECT_EQ(attempts[0].status, "claimed");
  QL_ASSERT_VALUE(std::vector<EventRecord> events,
                  store().runs().ListEvents(approve.run_id, 0, 10));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].type, "run.created");
  EXPECT_EQ(events[1].type, "run.queued");

  // Approving again (a retry after a lost reply) returns the same receipt and no second run.
  QL_ASSERT_VALUE(ApproveResult again, store().approvals().Approve(ApproveAs(admin_,
                                                                             requested.request.id)));
  EXPECT_TRUE(again.replayed);
  EXPECT_EQ(again.approval.receipt->id, view.receipt->id);
  EXPECT_EQ(again.run.id, approve.run_id);
  EXPECT_EQ(CountRuns(store(), task.task_id), 1);

  QL_ASSERT_VALUE(ApprovalView shown, store().approvals().GetApproval(requested.request.id));
  EXPECT_EQ(shown.receipt->id, view.receipt->id);
  QL_ASSERT_VALUE(ApprovalReceiptRecord by_run, store().approvals().ReceiptOfRun(approve.run_id));
  EXPECT_EQ(by_run.id, view.receipt->id);
  std::optional<AuditRecord> fact = FindAudit(gov(), "approval.approve", requested.request.id);
  ASSERT_TRUE(fact.has_value());
  EXPECT_EQ(fact->actor_id, admin_.id);
}

TEST_P(ApprovalContract, ARequestThatRetriesARunLinksTheApprovedRunToIt) {
  QL_ASSERT_VALUE(TaskRevisionRecord task, PublishGuarded("guarded"));
  QL_ASSERT_VALUE(RequestApprovalResult first,
                  store().approvals().RequestApproval(RequestCommand(operator_, task)));
  QL_ASSERT_VALUE(ApproveResult original,
                  store().approvals().Approve(ApproveAs(admin_, first.request.id)));
  RequestApprovalCommand retry = RequestCommand(operator_, task);
  retry.retry_of_run_id = original.run.id;
  QL_ASSERT_VALUE(RequestApprovalResult requested, store().approvals().RequestApproval(retry));
  EXPECT_EQ(requested.request.retry_of_run_id, original.run.id);
  // What is approved names the retried run: it is part of the action's payload and digest.
  EXPECT_NE(requested.request.payload_json.find(original.run.id), std::string::npos);
  EXPECT_NE(requested.request.payload_digest, first.request.payload_digest);
  QL_ASSERT_VALUE(ApprovalView shown, store().approvals().GetApproval(requested.request.id));
  EXPECT_EQ(shown.request.retry_of_run_id, original.run.id);
  QL_ASSERT_VALUE(ApproveResult approved,
                  store().approvals().Approve(ApproveAs(admin_, requested.request.id)));
  EXPECT_EQ(approved.run.retry_of_run_id, original.run.id);
  EXPECT_FALSE(original.run.retry_of_run_id.has_value());
  QL_ASSERT_VALUE(RunRecord stored, store().runs().GetRun(approved.run.id));
  EXPECT_EQ(stored.retry_of_run_id, original.run.id);
}

TEST_P(ApprovalContract, SelfApprovalAndTooLowARoleAreRefusedWithNothingWritten) {
  QL_ASSERT_VALUE(TaskRevisionRecord task, PublishGuarded("guarded", "owner"));
  QL_ASSERT_VALUE(RequestApprovalResult requested,
                  store().approvals().RequestApproval(RequestCommand(admin_, task)));
  // The admin asked: the approver must be another principal with the owner role.
  QL_EXPECT_ERROR(store().approvals().Approve(ApproveAs(admin_, requested.request.id)),
                  StatusCode::kPermissionDenied, "permission_denied");
  QL_EXPECT_ERROR(store().approvals().Approve(ApproveAs(operator_, requested.request.id)),
                  StatusCode::kPermissionDenied, "permission_denied");
  QL_ASSERT_VALUE(RequestApprovalResult own,
                  store().approvals().RequestApproval(RequestCommand(owner_, task)));
  QL_EXPECT_ERROR(store().approvals().Approve(ApproveAs(owner_, own.request.id)),
                  StatusCode::kPermissionDenied, "approval_self");
  QL_EXPECT_ERROR(store().approvals().Approve(ApproveAs(owner_, NewId())), StatusCode::kNotFound,
                  "approval_not_found");
  QL_ASSERT_VALUE(ApprovalView still, store().approvals().GetApproval(own.request.id));
  EXPECT_EQ(still.request.status, "pending");
  EXPECT_FALSE(still.decision.has_value());
  EXPECT_EQ(CountRuns(store(), task.task_id), 0);
  // The owner approves the admin's request.
  QL_ASSERT_VALUE(ApproveResult approved,
                  store().approvals().Approve(ApproveAs(owner_, requested.request.id)));
  EXPECT_EQ(approved.run.status, "queued");
}

TEST_P(ApprovalContract, RejectionEndsTheRequestWithItsReason) {
  QL_ASSERT_VALUE(TaskRevisionRecord task, PublishGuarded("guarded"));
  QL_ASSERT_VALUE(RequestApprovalResult requested,
                  store().approvals().RequestApproval(RequestCommand(operator_, task)));
  RejectCommand reject{Actor{admin_.id, "req-reject"}, requested.request.id, NewId(), "", Now()};
  QL_EXPECT_ERROR(store().approvals().Reject(reject), StatusCode::kInvalidArgument,
                  "invalid_reason");
  reject.reason = "not during the freeze";
  QL_ASSERT_VALUE(ApprovalView rejected, store().approvals().Reject(reject));
  EXPECT_EQ(rejected.request.status, "rejected");
  ASSERT_TRUE(rejected.decision.has_value());
  EXPECT_EQ(rejected.decision->reason, "not during the freeze");
  QL_EXPECT_ERROR(store().approvals().Approve(ApproveAs(admin_, requested.request.id)),
                  StatusCode::kConflict, "approval_rejected");
  EXPECT_EQ(CountRuns(store(), task.task_id), 0);
  ApprovalFilter pending;
  pending.status = "pending";
  QL_ASSERT_VALUE(Page<ApprovalRequestRecord> listed,
                  store().approvals().ListApprovals(pending, PageRequest{std::nullopt, 10}));
  EXPECT_TRUE(listed.items.empty());
  pending.status = "rejected";
  QL_ASSERT_VALUE(listed, store().approvals().ListApprovals(pending, PageRequest{std::nullopt, 10}));
  ASSERT_EQ(listed.items.size(), 1u);
  pending.status = "maybe";
  QL_EXPECT_ERROR(store().approvals().ListApprovals(pending, PageRequest{std::nullopt, 10}),
                  StatusCode::kInvalidArgument, "invalid_status");
}

TEST_P(ApprovalContract, ExpiredRequestsAreNeitherApprovedNorKeptPending) {
  QL_ASSERT_VALUE(TaskRevisionRecord task, PublishGuarded("guarded", "admin", kMinApprovalTtlMs));
  QL_ASSERT_VALUE(RequestApprovalResult requested,
                  store().approvals().RequestApproval(RequestCommand(operator_, task)));
  // Past the TTL on every store's clock: the fake one and the database's.
  clock().Advance(2 * kMinApprovalTtlMs);
  std::this_thread::sleep_for(std::chrono::milliseconds(kMinApprovalTtlMs + 100));
  QL_EXPECT_ERROR(store().approvals().Approve(ApproveAs(admin_, requested.request.id)),
                  StatusCode::kConflict, "approval_expired");
  EXPECT_EQ(CountRuns(store(), task.task_id), 0);
  QL_ASSERT_VALUE(int expired, store().approvals().ExpireDue(10, Now()));
  EXPECT_EQ(expired, 1);
  QL_ASSERT_VALUE(ApprovalView view, store().approvals().GetApproval(requested.request.id));
  EXPECT_EQ(view.request.status, "expired");
  ASSERT_TRUE(view.decision.has_value());
  EXPECT_EQ(view.decision->decision, "expired");
  EXPECT_FALSE(view.decision->decided_by.has_value());
  QL_ASSERT_VALUE(expired, store().approvals().ExpireDue(10, Now()));
  EXPECT_EQ(expired, 0);
  std::optional<AuditRecord> fact = FindAudit(gov(), "approval.expire", requested.request.id);
  ASSERT_TRUE(fact.has_value());
  EXPECT_FALSE(fact->actor_id.has_value());
}

TEST_P(ApprovalContract, ARepublishedTaskMakesThePendingRequestStale) {
  QL_ASSERT_VALUE(TaskRevisionRecord task, PublishGuarded("guarded"));
  QL_ASSERT_VALUE(RequestApprovalResult requested,
                  store().approvals().RequestApproval(RequestCommand(operator_, task)));
  PublishTaskCommand next = TaskCommand(task.task_id, task.revision, "guarded-v2");
  ASSERT_TRUE(store().definitions().PublishTaskRevision(next).ok());
  QL_EXPECT_ERROR(store().approvals().Approve(ApproveAs(admin_, requested.request.id)),
                  StatusCode::kConflict, "approval_stale");
  QL_ASSERT_VALUE(ApprovalView view, store().approvals().GetApproval(requested.request.id));
  EXPECT_EQ(view.request.status, "pending");
  EXPECT_EQ(CountRuns(store(), task.task_id), 0);
}

TEST_P(ApprovalContract, ARevokedApproverOrAnArchivedProjectApprovesNothing) {
  QL_ASSERT_VALUE(TaskRevisionRecord task, PublishGuarded("guarded"));
  QL_ASSERT_VALUE(RequestApprovalResult requested,
                  store().approvals().RequestApproval(RequestCommand(operator_, task)));
  ASSERT_TRUE(Grant(owner_, project().id, admin_, Role::kNone).ok());
  QL_EXPECT_ERROR(store().approvals().Approve(ApproveAs(admin_, requested.request.id)),
                  StatusCode::kPermissionDenied, "permission_denied");
  ASSERT_TRUE(gov().ArchiveProject(Actor{owner_.id, "req"}, project().id, Now()).ok());
  QL_EXPECT_ERROR(store().approvals().Approve(ApproveAs(owner_, requested.request.id)),
                  StatusCode::kConflict, "project_archived");
  QL_ASSERT_VALUE(ApprovalView view, store().approvals().GetApproval(requested.request.id));
  EXPECT_EQ(view.request.status, "pending");
  EXPECT_FALSE(view.receipt.has_value());
  EXPECT_EQ(CountRuns(store(), task.task_id), 0);
}

TEST_P(ApprovalContract, RecoveryRequiredRunsLeaveOnlyByAResolution) {
  QL_ASSERT_VALUE(RunRecord run, RecoveryRequiredRun());
  EXPECT_EQ(run.status, "recovery_required");
  // No automatic move leaves it: neither a retry nor a requeue.
  RunTransitionCommand retry;
  retry.run_id = run.id;
  retry.expected_version = run.version;
  retry.run_to = "retry_wait";
  retry.retry_at_ms = Now();
  retry.now_ms = Now();
  QL_EXPECT_ERROR(store().runs().ApplyTransition(retry), StatusCode::kConflict,
                  "illegal_transition");
  QL_EXPECT_ERROR(store().approvals().ResolveRun(ResolveAs(operator_, run.id, "succeeded")),
                  StatusCode::kPermissionDenied, "permission_denied");
  ResolveRunCommand bad = ResolveAs(admin_, run.id, "maybe");
  QL_EXPECT_ERROR(store().approvals().ResolveRun(bad), StatusCode::kInvalidArgument,
                  "invalid_resolution");

  QL_ASSERT_VALUE(ResolveRunResult resolved,
                  store().approvals().ResolveRun(ResolveAs(admin_, run.id, "succeeded")));
  EXPECT_FALSE(resolved.replayed);
  EXPECT_EQ(resolved.run.status, "succeeded");
  EXPECT_EQ(resolved.resolution.resolved_by, admin_.id);
  QL_ASSERT_VALUE(std::vector<EventRecord> events,
                  store().runs().ListEvents(run.id, run.event_sequence, 10));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].type, "run.recovery_resolved");
  EXPECT_EQ(events[1].type, "run.succeeded");
  QL_ASSERT_VALUE(ResolveRunResult replay,
                  store().approvals().ResolveRun(ResolveAs(admin_, run.id, "succeeded")));
  EXPECT_TRUE(replay.replayed);
  QL_EXPECT_ERROR(store().approvals().ResolveRun(ResolveAs(admin_, run.id, "failed")),
                  StatusCode::kConflict, "run_already_resolved");
  std::optional<AuditRecord> fact = FindAudit(gov(), "run.resolve", run.id);
  ASSERT_TRUE(fact.has_value());
  EXPECT_EQ(fact->actor_id, admin_.id);

  QL_ASSERT_VALUE(RunRecord queued, QueuedRun());
  QL_EXPECT_ERROR(store().approvals().ResolveRun(ResolveAs(admin_, queued.id, "failed")),
                  StatusCode::kConflict, "run_not_recovery_required");
}

TEST_P(ApprovalContract, TheLostAttemptsLateReportResolvesTheRunOnceAndAHumanAfterItLoses) {
  QL_ASSERT_VALUE(RunRecord run, RecoveryRequiredRun());
  QL_ASSERT_VALUE(std::vector<AttemptRecord> attempts, store().runs().ListAttempts(run.id));
  EvidenceResolutionCommand evidence;
  evidence.run_id = run.id;
  evidence.attempt_id = "0190d1b2-0000-7000-8000-00000000dead";
  evidence.succeeded = false;
  evidence.evidence = "worker w1 reported exit code 3 after its lease ended";
  evidence.now_ms = Now();
  // Evidence about another attempt resolves nothing.
  QL_EXPECT_ERROR(store().approvals().ResolveFromEvidence(evidence), StatusCode::kConflict,
                  "evidence_attempt_mismatch");
  QL_ASSERT_VALUE(RunRecord unchanged, store().runs().GetRun(run.id));
  EXPECT_EQ(unchanged.status, "recovery_required");

  evidence.attempt_id = attempts.back().id;
  QL_ASSERT_VALUE(ResolveRunResult resolved, store().approvals().ResolveFromEvidence(evidence));
  EXPECT_FALSE(resolved.replayed);
  EXPECT_EQ(resolved.run.status, "failed");
  EXPECT_EQ(resolved.run.error_code, "recovery_evidence_failed");
  EXPECT_EQ(resolved.resolution.resolution, "failed");
  EXPECT_FALSE(resolved.resolution.resolved_by.has_value());
  EXPECT_NE(resolved.resolution.reason.find("exit code 3"), std::string::npos);
  QL_ASSERT_VALUE(std::vector<EventRecord> events,
                  store().runs().ListEvents(run.id, run.event_sequence, 10));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].type, "run.recovery_resolved");
  EXPECT_EQ(events[0].actor_type, "recovery");
  EXPECT_EQ(events[1].type, "run.failed");
  std::optional<AuditRecord> fact = FindAudit(gov(), "run.resolve", run.id);
  ASSERT_TRUE(fact.has_value());
  EXPECT_FALSE(fact->actor_id.has_value());

  // Exactly one resolution: the same evidence again and a human afterwards change nothing.
  QL_ASSERT_VALUE(ResolveRunResult again, store().approvals().ResolveFromEvidence(evidence));
  EXPECT_TRUE(again.replayed);
  QL_EXPECT_ERROR(store().approvals().ResolveRun(ResolveAs(admin_, run.id, "succeeded")),
                  StatusCode::kConflict, "run_already_resolved");
  QL_ASSERT_VALUE(RunResolutionRecord stored, store().approvals().GetResolution(run.id));
  EXPECT_FALSE(stored.resolved_by.has_value());
  EXPECT_EQ(stored.resolution, "failed");

  // A run a human resolved first takes no evidence.
  QL_ASSERT_VALUE(RunRecord second, RecoveryRequiredRun());
  QL_ASSERT_VALUE(std::vector<AttemptRecord> second_attempts,
                  store().runs().ListAttempts(second.id));
  QL_ASSERT_VALUE(ResolveRunResult by_hand,
                  store().approvals().ResolveRun(ResolveAs(admin_, second.id, "succeeded")));
  evidence.run_id = second.id;
  evidence.attempt_id = second_attempts.back().id;
  QL_ASSERT_VALUE(ResolveRunResult late, store().approvals().ResolveFromEvidence(evidence));
  EXPECT_TRUE(late.replayed);
  EXPECT_EQ(late.resolution.resolved_by, admin_.id);
  QL_ASSERT_VALUE(RunRecord kept, store().runs().GetRun(second.id));
  EXPECT_EQ(kept.status, "succeeded");
}

TEST_P(ApprovalContract, ARetryResolutionFailsTheRunAndQueuesALinkedApprovedRun) {
  QL_ASSERT_VALUE(RunRecord run, RecoveryRequiredRun());
  ResolveRunCommand cmd = ResolveAs(admin_, run.id, "retry");
  QL_ASSERT_VALUE(ResolveRunResult resolved, store().approvals().ResolveRun(cmd));
  EXPECT_EQ(resolved.run.status, "failed");
  EXPECT_EQ(resolved.run.error_code, "recovery_retried");
  ASSERT_TRUE(resolved.retry_run.has_value());
  EXPECT_EQ(resolved.retry_run->id, cmd.new_run_id);
  EXPECT_EQ(resolved.retry_run->status, "queued");
  EXPECT_EQ(resolved.retry_run->trigger_type, "approved");
  EXPECT_EQ(resolved.retry_run->retry_of_run_id, run.id);
  EXPECT_EQ(resolved.retry_run->execution_revision_id, run.execution_revision_id);
  EXPECT_EQ(resolved.resolution.retry_run_id, cmd.new_run_id);
  QL_ASSERT_VALUE(RunResolutionRecord stored, store().approvals().GetResolution(run.id));
  EXPECT_EQ(stored.resolution, "retry");
  // Archived projects resolve nothing.
  QL_ASSERT_VALUE(RunRecord second, RecoveryRequiredRun());
  ASSERT_TRUE(gov().ArchiveProject(Actor{owner_.id, "req"}, project().id, Now()).ok());
  QL_EXPECT_ERROR(store().approvals().ResolveRun(ResolveAs(admin_, second.id, "failed")),
                  StatusCode::kConflict, "project_archived");
}

// A retry runs the approved action again, so it passes the approval's policy: the task's
// approver role, and never the principal who requested the run (also through earlier retries).
TEST_P(ApprovalContract, ARetryResolutionNeedsTheApproverRoleAndAnotherPrincipal) {
  // The admin requested this run (the owner approved it): the admin may not re-run it.
  QL_ASSERT_VALUE(RunRecord own, RecoveryRequiredRun("admin", admin_, owner_));
  QL_EXPECT_ERROR(store().approvals().ResolveRun(ResolveAs(admin_, own.id, "retry")),
                  StatusCode::kPermissionDenied, "approval_self");
  QL_ASSERT_VALUE(RunRecord still, store().runs().GetRun(own.id));
  EXPECT_EQ(still.status, "recovery_required");
  EXPECT_FALSE(FindAudit(gov(), "run.resolve", own.id).has_value());
  // Without a new execution the requester may still settle what it knows.
  QL_ASSERT_VALUE(ResolveRunResult failed,
                  store().approvals().ResolveRun(ResolveAs(admin_, own.id, "failed")));
  EXPECT_EQ(failed.run.status, "failed");

  // A task approved by owners is re-run only by an owner.
  QL_ASSERT_VALUE(RunRecord guarded, RecoveryRequiredRun("owner", operator_, owner_));
  QL_EXPECT_ERROR(store().approvals().ResolveRun(ResolveAs(admin_, guarded.id, "retry")),
                  StatusCode::kPermissionDenied, "permission_denied");
  QL_ASSERT_VALUE(ResolveRunResult retried,
                  store().approvals().ResolveRun(ResolveAs(owner_, guarded.id, "retry")));
  ASSERT_TRUE(retried.retry_run.has_value());
  EXPECT_EQ(retried.resolution.resolved_by, owner_.id);

  // The retry of a retry still knows who requested the original run.
  QL_ASSERT_VALUE(RunRecord waiting, LoseAfterStart(*retried.retry_run));
  ASSERT_EQ(waiting.status, "recovery_required");
  ASSERT_TRUE(Grant(owner_, project().id, operator_, Role::kOwner).ok());
  QL_EXPECT_ERROR(store().approvals().ResolveRun(ResolveAs(operator_, waiting.id, "retry")),
                  StatusCode::kPermissionDenied, "approval_self");
}

// Retention never purges an approved run: its approval records (action, receipt, resolution)
// refer to it and outlive the run history around them.
TEST_P(ApprovalContract, AnApprovedRunOutlivesRetention) {
  QL_ASSERT_VALUE(RunRecord run, RecoveryRequiredRun());
  QL_ASSERT_VALUE(ResolveRunResult resolved,
                  store().approvals().ResolveRun(ResolveAs(admin_, run.id, "failed")));
  ASSERT_EQ(resolved.run.status, "failed");
  clock().Advance(3 * 86'400'000);
  RetentionScope scope{run.project_id, run.task_id, {}, {1, 1}};
  QL_ASSERT_VALUE(PurgeResult purged,
                  store().retention().PurgeRuns(PlanPurge(scope, Now(), 100, NewId())));
  EXPECT_TRUE(purged.run_ids.empty());
  QL_ASSERT_VALUE(RunRecord kept, store().runs().GetRun(run.id));
  EXPECT_EQ(kept.status, "failed");
  QL_ASSERT_VALUE(RunResolutionRecord resolution, store().approvals().GetResolution(run.id));
  EXPECT_EQ(resolution.resolution, "failed");
}

// The notifications of approvals commit with the request, the decision or the resolution
// that causes them: a request and each decision write a row (a request again within the rule's
// interval is held back and counted), a refused decision writes nothing, and a run resolved by
// hand is a run outcome like any other.
TEST_P(ApprovalContract, RequestsDecisionsAndResolutionsWriteTheirNotificationsInTheirTransaction) {
  NotificationRepository& notify = store().notifications();
  const PolicyFence fence{owner_.id, Role::kAdmin};
  QL_ASSERT_VALUE(ChannelRecord channel, notify.CreateChannel(CreateChannelCommand{
                                             Actor{owner_.id, "req-channel"}, fence,
                                             ChannelRecord{NewId(), project().id, "asks", "webhook",
                                                           R"({"url":"https://example.test/h"})",
                                                           "", Now(), std::nullopt}}));
  QL_ASSERT_VALUE(TaskRevisionRecord task, PublishGuarded("guarded"));
  RuleRecord approvals{NewId(), project().id, channel.id,   "approval", task.task_id,
                       "every", 60'000,       std::nullopt, "",         Now()};
  QL_ASSERT_OK(notify.CreateRule(CreateRuleCommand{Actor{owner_.id, "req-rule"}, fence, approvals})
                   .status());
  RuleRecord failures{NewId(), project().id, channel.id, "failed", std::nullopt, "change",
                      0,       std::nullopt, "",         Now()};
  QL_ASSERT_OK(
      notify.CreateRule(CreateRuleCommand{Actor{owner_.id, "req-rule"}, fence, failures}).status());
  const auto rows = [&] {
    Result<std::vector<OutboxRecord>> listed =
        notify.ListDeliveries(DeliveryFilter{project().id, false, 100});
    EXPECT_TRUE(listed.ok()) << listed.status().ToString();
    return listed.ok() ? *listed : std::vector<OutboxRecord>{};
  };
  const auto facts = [](const OutboxRecord& row) {
    return nlohmann::json::parse(row.payload_json);
  };
  // The row of an approval phase or a run event (rows written in one millisecond have no order).
  const auto find = [&](const std::string& what) {
    for (const OutboxRecord& row : rows()) {
      if (row.event == what || facts(row).value("phase", "") == what) return row;
    }
    ADD_FAILURE() << "no " << what << " row";
    return OutboxRecord{};
  };

  QL_ASSERT_VALUE(RequestApprovalResult first,
                  store().approvals().RequestApproval(RequestCommand(operator_, task)));
  std::vector<OutboxRecord> written = rows();
  ASSERT_EQ(written.size(), 1u);
  EXPECT_EQ(written[0].event, "approval");
  EXPECT_EQ(written[0].id, OutboxId(approvals.id, "approval", first.request.id + ":requested"));
  EXPECT_EQ(facts(written[0])["phase"], "requested");
  EXPECT_EQ(facts(written[0])["requester"], "operator");
  EXPECT_EQ(facts(written[0])["task_name"], task.name);
  EXPECT_EQ(facts(written[0])["approval_id"], first.request.id);

  // A second request within the rule's minute is held back.
  QL_ASSERT_VALUE(RequestApprovalResult second,
                  store().approvals().RequestApproval(RequestCommand(operator_, task)));
  EXPECT_EQ(rows().size(), 1u);

  // A refused decision (the operator who asked cannot approve) writes nothing.
  QL_EXPECT_ERROR(store().approvals().Approve(ApproveAs(operator_, first.request.id)),
                  StatusCode::kPermissionDenied, "permission_denied");
  EXPECT_EQ(rows().size(), 1u);

  // Decisions always go, with the decider's name, the run, the reason and the held-back count.
  QL_ASSERT_VALUE(ApproveResult approved,
                  store().approvals().Approve(ApproveAs(admin_, first.request.id)));
  ASSERT_EQ(rows().size(), 2u);
  const OutboxRecord yes = find("approved");
  EXPECT_EQ(facts(yes)["decided_by"], "approver");
  EXPECT_EQ(facts(yes)["run_id"], approved.run.id);
  EXPECT_EQ(facts(yes)["suppressed"], 1);
  EXPECT_EQ(yes.run_id, approved.run.id);
  RejectCommand reject{Actor{admin_.id, "req-reject"}, second.request.id, NewId(),
                       "not during the freeze", Now()};
  QL_ASSERT_OK(store().approvals().Reject(reject).status());
  ASSERT_EQ(rows().size(), 3u);
  const OutboxRecord no = find("rejected");
  EXPECT_EQ(facts(no)["reason"], "not during the freeze");
  EXPECT_EQ(facts(no)["approval_id"], second.request.id);

  // A run an operator resolves as failed is a failure the `failed` rule hears of.
  QL_ASSERT_VALUE(RunRecord stuck, LoseAfterStart(approved.run));
  ASSERT_EQ(stuck.status, "recovery_required");
  EXPECT_EQ(rows().size(), 3u);
  QL_ASSERT_OK(store().approvals().ResolveRun(ResolveAs(admin_, stuck.id, "failed")).status());
  ASSERT_EQ(rows().size(), 4u);
  const OutboxRecord failed = find("failed");
  EXPECT_EQ(failed.run_id, stuck.id);
  EXPECT_EQ(facts(failed)["run_status"], "failed");
}

}  // namespace ql::testing
