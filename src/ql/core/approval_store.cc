#include "ql/core/approval_store.h"

#include <mutex>
#include <nlohmann/json.hpp>
#include <utility>

#include "ql/core/canonical_json.h"
#include "ql/core/ids.h"
#include "ql/core/states.h"
#include "ql/core/store_commands.h"

namespace ql {
namespace {

constexpr std::string_view kApprovalListing = "approvals";

Status RequestNotFound(const std::string& id) {
  return NotFound("approval_not_found", "approval request " + id + " does not exist");
}

Result<ApprovalRequestRecord> RequireRequest(ApprovalTx& tx, const std::string& id, bool lock) {
  QL_ASSIGN_OR_RETURN(std::optional<ApprovalRequestRecord> request, tx.LoadRequest(id, lock));
  if (!request.has_value()) return RequestNotFound(id);
  return std::move(*request);
}

Result<RoleBindingRecord> BindingOrNone(GovernanceTx& gov, const std::string& scope,
                                        const std::string& subject) {
  QL_ASSIGN_OR_RETURN(std::optional<RoleBindingRecord> b, gov.LoadCurrentBinding(scope, subject));
  if (!b.has_value()) return RoleBindingRecord{scope, subject, 0, "none", "", "", 0};
  return std::move(*b);
}

Role RoleIn(const RoleBindingRecord& binding) {
  Result<Role> role = ParseRole(binding.role);
  return role.ok() ? *role : Role::kNone;
}

// Returns the version of the binding that gives `principal` its effective role in the project:
// the project binding, unless the installation binding carries a higher role.
Result<int64_t> GrantingBindingVersion(GovernanceTx& gov, const std::string& principal,
                                       const std::string& project_id) {
  QL_ASSIGN_OR_RETURN(RoleBindingRecord project, BindingOrNone(gov, project_id, principal));
  QL_ASSIGN_OR_RETURN(RoleBindingRecord installation,
                      BindingOrNone(gov, std::string(kInstallationScope), principal));
  const Role from_installation = EffectiveProjectRole(RoleIn(installation), Role::kNone);
  return from_installation > RoleIn(project) ? installation.version : project.version;
}

// Refuses unless `revision` is the task's current enabled revision with this digest.
Result<TaskRevisionRecord> RequireCurrentRevision(ApprovalTx& tx, const std::string& project_id,
                                                  const std::string& task_id, int64_t revision,
                                                  const std::string& digest,
                                                  std::string_view reason) {
  QL_ASSIGN_OR_RETURN(std::optional<TaskHeadRecord> head, tx.LoadTaskHead(task_id));
  if (!head.has_value() || head->project_id != project_id) {
    return NotFound("task_not_found",
                    Cat({"task ", task_id, " does not exist in project ", project_id}));
  }
  QL_ASSIGN_OR_RETURN(std::optional<TaskRevisionRecord> current,
                      tx.LoadTaskRevision(task_id, head->current_revision));
  if (head->current_revision != revision || !current.has_value() || !current->enabled ||
      current->content_digest != digest) {
    return Conflict(std::string(reason), Cat({"task ", task_id, " revision ", std::to_string(revision),
                                 " with digest ", digest,
                                 " is not the task's current enabled revision (",
                                 std::to_string(head->current_revision), ")"}));
  }
  return std::move(*current);
}

Result<ApprovalView> ViewOf(ApprovalTx& tx, ApprovalRequestRecord request) {
  ApprovalView view;
  QL_ASSIGN_OR_RETURN(view.decision, tx.LoadDecision(request.id));
  QL_ASSIGN_OR_RETURN(view.action, tx.LoadAction(request.id));
  QL_ASSIGN_OR_RETURN(view.receipt, tx.LoadReceipt(request.id));
  view.request = std::move(request);
  return view;
}

// Refuses a decision on a request that is no longer pending or has expired by `now_ms`.
Status RequireUndecided(const ApprovalRequestRecord& request, int64_t now_ms) {
  if (request.status == kApprovalApproved) {
    return Conflict("approval_already_approved",
                    "approval request " + request.id + " was approved already");
  }
  if (request.status == kApprovalRejected) {
    return Conflict("approval_rejected", "approval request " + request.id + " was rejected");
  }
  if (request.status == kApprovalExpired || request.expires_at_ms <= now_ms) {
    return Conflict("approval_expired", "approval request " + request.id + " has expired");
  }
  return Status::Ok();
}

// How far a retry resolution follows retry_of_run_id back to the approval it re-runs.
constexpr int kMaxRetryChain = 64;

// Returns the principal whose request authorised `run`: the requester of its receipt's request,
// or, for the retry of a resolved run, of the run it retries; nullopt when none is found.
Result<std::optional<std::string>> OriginalRequester(ApprovalTx& tx, RunRecord run) {
  for (int hop = 0; hop < kMaxRetryChain; ++hop) {
    QL_ASSIGN_OR_RETURN(std::optional<ApprovalReceiptRecord> receipt, tx.LoadReceiptByRun(run.id));
    if (receipt.has_value()) {
      QL_ASSIGN_OR_RETURN(std::optional<ApprovalRequestRecord> request,
                          tx.LoadRequest(receipt->request_id, /*lock=*/false));
      if (!request.has_value()) return std::optional<std::string>();
      return std::optional<std::string>(request->requester_id);
    }
    if (!run.retry_of_run_id.has_value()) break;
    QL_ASSIGN_OR_RETURN(std::optional<RunRecord> previous,
                        tx.LoadRun(*run.retry_of_run_id, /*lock=*/false));
    if (!previous.has_value()) break;
    run = std::move(*previous);
  }
  return std::optional<std::string>();
}

// A retry resolution executes the approved action again, so it passes the same policy as an
// approval: the approver role of the run's revision (at least admin, which every resolution
// needs) and a principal other than the one who requested the original run.
Status RequireRetryAuthority(ApprovalTx& tx, const RunRecord& run, const Actor& actor) {
  Role required = RequiredRole(Action::kApprove);
  QL_ASSIGN_OR_RETURN(std::optional<TaskRevisionRecord> revision,
                      tx.LoadTaskRevision(run.task_id, run.task_revision));
  if (revision.has_value()) {
    QL_ASSIGN_OR_RETURN(std::optional<ApprovalPolicy> policy, RequiredApproval(*revision));
    if (policy.has_value() && policy->approver_role > required) required = policy->approver_role;
  }
  QL_RETURN_IF_ERROR(
      CheckPolicyFence(tx.governance(), PolicyFence{actor.principal_id, required}, run.project_id));
  QL_ASSIGN_OR_RETURN(std::optional<std::string> requester, OriginalRequester(tx, run));
  if (requester.has_value() && *requester == actor.principal_id) {
    return PermissionDenied("approval_self", "run " + run.id +
                                                 " was requested by the same principal; another "
                                                 "one must authorise running it again");
  }
  return Status::Ok();
}

Status RequireResolution(std::string_view resolution) {
  if (resolution == kResolveSucceeded || resolution == kResolveFailed ||
      resolution == kResolveRetry) {
    return Status::Ok();
  }
  return InvalidArgument("invalid_resolution", "resolution " + QuoteForMessage(resolution) +
                                                   " is not succeeded, failed or retry");
}

// Refuses to resolve a run that is not in recovery_required (`how`: "by hand", "from evidence").
Status RequireRecoveryRequired(const RunRecord& run, RunStatus from, std::string_view how) {
  if (from == RunStatus::kRecoveryRequired) return Status::Ok();
  return Conflict("run_not_recovery_required", "run " + run.id + " is " + run.status +
                                                   "; only a run in recovery_required is resolved " +
                                                   std::string(how));
}

// Ends `run` (in recovery_required) as `to`: run.recovery_resolved with `payload` and run.<to>
// events, the terminal run row, the resolution row and the audit fact, in the caller's
// transaction.
Status WriteResolution(ApprovalTx& tx, const RunRecord& run, RunStatus to, ActorType actor_type,
                       const std::optional<std::string>& attempt_id, const nlohmann::json& payload,
                       const std::optional<std::string>& error_code, const std::string& summary,
                       const RunResolutionRecord& resolution, const AuditRecord& fact,
                       int64_t now) {
  QL_ASSIGN_OR_RETURN(std::string resolved_payload,
                      CanonicalEventPayload(kEventRunRecoveryResolved, payload.dump()));
  const std::string actor(ActorTypeName(actor_type));
  int64_t sequence = run.event_sequence;
  QL_RETURN_IF_ERROR(tx.InsertEvent(run.id, ++sequence,
                                    NewEvent{std::string(kEventRunRecoveryResolved), actor,
                                             attempt_id, std::nullopt, resolved_payload},
                                    resolved_payload, now));
  QL_RETURN_IF_ERROR(tx.InsertEvent(
      run.id, ++sequence, NewEvent{RunEventType(to), actor, attempt_id, std::nullopt, "{}"}, "{}",
      now));
  QL_RETURN_IF_ERROR(tx.FinishRun(run.id, run.version, std::string(RunStatusName(to)), sequence,
                                  now, error_code, summary));
  QL_RETURN_IF_ERROR(tx.InsertResolution(resolution));
  QL_RETURN_IF_ERROR(NotifyRunOutcomeInTx(
      tx.notifications(), run.project_id, run.task_id,
      [&]() -> Result<RunRecord> {
        QL_ASSIGN_OR_RETURN(std::optional<RunRecord> moved, tx.LoadRun(run.id, false));
        if (!moved.has_value()) return Internal("run_missing", "the resolved run vanished");
        return *moved;
      },
      to, now));
  return tx.governance().InsertAudit(fact);
}

// The name of principal `id` for a message (its id when it has none or is gone).
Result<std::string> PrincipalName(GovernanceTx& gov, const std::optional<std::string>& id) {
  if (!id.has_value()) return std::string();
  QL_ASSIGN_OR_RETURN(std::optional<PrincipalRecord> principal, gov.LoadPrincipal(*id));
  return principal.has_value() && !principal->name.empty() ? principal->name : *id;
}

// Writes the notifications of a change of `request` (phase requested, approved, rejected or
// expired) in the transaction that makes it.
Status NotifyApproval(ApprovalTx& tx, const ApprovalRequestRecord& request, std::string_view phase,
                      const std::optional<std::string>& decided_by,
                      const std::optional<std::string>& reason,
                      const std::optional<std::string>& run_id, int64_t now) {
  return NotifyApprovalInTx(
      tx.notifications(), request.project_id, request.task_id, [&]() -> Result<ApprovalOutcome> {
        ApprovalOutcome o;
        o.approval_id = request.id;
        o.project_id = request.project_id;
        o.task_id = request.task_id;
        QL_ASSIGN_OR_RETURN(std::optional<std::string> task,
                            tx.notifications().TaskName(request.task_id));
        o.task_name = task.value_or(request.task_id);
        o.phase = std::string(phase);
        QL_ASSIGN_OR_RETURN(o.requester, PrincipalName(tx.governance(), request.requester_id));
        o.approver_role = request.approver_role;
        if (decided_by.has_value()) {
          QL_ASSIGN_OR_RETURN(o.decided_by, PrincipalName(tx.governance(), decided_by));
        }
        o.reason = reason;
        o.run_id = run_id;
        o.expires_at_ms = request.expires_at_ms;
        o.now_ms = now;
        return o;
      });
}

}  // namespace

ApprovalStore::ApprovalStore(ApprovalTxRunner& runner, RandomSource& random)
    : runner_(runner), random_(random) {}

AuditRecord ApprovalStore::Fact(const Actor& actor, std::string_view action,
                                std::string_view target_kind, const std::string& target_id,
                                const std::string& project_id, int64_t now_ms) {
  std::string id;
  {
    std::lock_guard<std::mutex> lock(random_mu_);
    id = NewUuidV7(now_ms, random_);
  }
  return SucceededFact(std::move(id), actor, action, target_kind, target_id, project_id, now_ms);
}

Result<RequestApprovalResult> ApprovalStore::RequestApproval(const RequestApprovalCommand& cmd) {
  QL_RETURN_IF_ERROR(ValidateId("request id", cmd.id));
  QL_RETURN_IF_ERROR(ValidateId("principal id", cmd.actor.principal_id));
  QL_RETURN_IF_ERROR(ValidateId("project id", cmd.project_id));
  QL_RETURN_IF_ERROR(ValidateId("task id", cmd.task_id));
  QL_RETURN_IF_ERROR(RequireRevision("task revision", cmd.task_revision));
  QL_RETURN_IF_ERROR(RequireDigest("task digest", cmd.task_digest));
  QL_RETURN_IF_ERROR(RequireText("execution revision", cmd.execution_revision_id));
  if (cmd.idempotency_key.has_value()) {
    QL_RETURN_IF_ERROR(RequireText("idempotency key", *cmd.idempotency_key));
  }
  if (cmd.retry_of_run_id.has_value()) {
    QL_RETURN_IF_ERROR(ValidateId("retried run id", *cmd.retry_of_run_id));
  }
  RequestApprovalResult out;
  const std::function<Status(ApprovalTx&)> request = [&](ApprovalTx& tx) -> Status {
    GovernanceTx& gov = tx.governance();
    QL_RETURN_IF_ERROR(CheckPolicyFence(
        gov, PolicyFence{cmd.actor.principal_id, RequiredRole(Action::kOperateRuns)},
        cmd.project_id));
    if (cmd.idempotency_key.has_value()) {
      QL_ASSIGN_OR_RETURN(std::optional<ApprovalRequestRecord> same,
                          tx.LoadRequestByKey(cmd.project_id, *cmd.idempotency_key));
      if (same.has_value()) {
        if (same->task_id != cmd.task_id) {
          return Conflict("idempotency_key_reused", "idempotency_key " +
                                                        Quote(*cmd.idempotency_key) +
                                                        " already names approval request " +
                                                        same->id + " of task " + same->task_id);
        }
        out = RequestApprovalResult{std::move(*same), true};
        return Status::Ok();
      }
    }
    QL_ASSIGN_OR_RETURN(TaskRevisionRecord revision,
                        RequireCurrentRevision(tx, cmd.project_id, cmd.task_id, cmd.task_revision,
                                               cmd.task_digest, "task_revision_not_current"));
    QL_ASSIGN_OR_RETURN(std::optional<ApprovalPolicy> policy, RequiredApproval(revision));
    if (!policy.has_value()) {
      return Conflict("approval_not_required", "task " + cmd.task_id + " revision " +
                                                   std::to_string(cmd.task_revision) +
                                                   " needs no approval to run");
    }
    QL_ASSIGN_OR_RETURN(bool exec_ok,
                        tx.ExecutionRevisionMatches(cmd.execution_revision_id, cmd.task_id,
                                                    cmd.task_revision, cmd.task_digest));
    if (!exec_ok) {
      return Conflict("execution_revision_missing",
                      "execution revision " + Quote(cmd.execution_revision_id) +
                          " is not a plan of task " + cmd.task_id + " revision " +
                          std::to_string(cmd.task_revision));
    }
    QL_ASSIGN_OR_RETURN(const int64_t now, tx.ClockMs(cmd.now_ms));
    ApprovalRequestRecord r;
    r.id = cmd.id;
    r.project_id = cmd.project_id;
    r.action = std::string(kApprovalActionRunCreate);
    r.task_id = cmd.task_id;
    r.task_revision = cmd.task_revision;
    r.task_digest = cmd.task_digest;
    r.execution_revision_id = cmd.execution_revision_id;
    r.priority = cmd.priority;
    r.idempotency_key = cmd.idempotency_key;
    r.retry_of_run_id = cmd.retry_of_run_id;
    r.payload_json = ApprovalPayloadCanonical(r);
    r.payload_digest = ApprovalPayloadDigest(r.payload_json);
    r.requester_id = cmd.actor.principal_id;
    QL_ASSIGN_OR_RETURN(r.requester_binding_version,
                        GrantingBindingVersion(gov, r.requester_id, r.project_id));
    r.approver_role = std::string(RoleName(policy->approver_role));
    r.status = std::string(kApprovalPending);
    r.created_at_ms = now;
    r.expires_at_ms = now + policy->ttl_ms;
    QL_RETURN_IF_ERROR(tx.InsertRequest(r));
    QL_RETURN_IF_ERROR(
        gov.InsertAudit(Fact(cmd.actor, "approval.request", "approval", r.id, r.project_id, now)));
    QL_RETURN_IF_ERROR(
        NotifyApproval(tx, r, "requested", std::nullopt, std::nullopt, std::nullopt, now));
    out = RequestApprovalResult{std::move(r), false};
    return Status::Ok();
  };
  Status st = runner_.Run(ApprovalTxKind::kWrite, "requesting an approval", request);
  if (st.code() == StatusCode::kDuplicate && st.reason() == "idempotency_key_duplicate" &&
      cmd.idempotency_key.has_value()) {
    // A concurrent request with the same key committed first: this one is its replay.
    st = runner_.Run(ApprovalTxKind::kWrite, "requesting an approval", request);
  }
  QL_RETURN_IF_ERROR(st);
  return out;
}

Result<ApprovalView> ApprovalStore::GetApproval(const std::string& request_id) {
  QL_RETURN_IF_ERROR(ValidateId("approval id", request_id));
  ApprovalView out;
  QL_RETURN_IF_ERROR(runner_.Run(ApprovalTxKind::kRead, "reading an approval",
                                 [&](ApprovalTx& tx) -> Status {
                                   QL_ASSIGN_OR_RETURN(ApprovalRequestRecord request,
                                                       RequireRequest(tx, request_id, false));
                                   QL_ASSIGN_OR_RETURN(out, ViewOf(tx, std::move(request)));
                                   return Status::Ok();
                                 }));
  return out;
}

Result<Page<ApprovalRequestRecord>> ApprovalStore::ListApprovals(const ApprovalFilter& filter,
                                                                 const PageRequest& page) {
  QL_RETURN_IF_ERROR(RequireLimit("limit", page.limit));
  if (filter.status.has_value()) QL_RETURN_IF_ERROR(ValidateApprovalStatus(*filter.status));
  if (filter.project_id.has_value()) QL_RETURN_IF_ERROR(ValidateId("project id", *filter.project_id));
  std::optional<std::string> before;
  if (page.after_key.has_value()) {
    QL_ASSIGN_OR_RETURN(before, DecodeIdKey(kApprovalListing, *page.after_key));
  }
  Page<ApprovalRequestRecord> out;
  QL_RETURN_IF_ERROR(runner_.Run(ApprovalTxKind::kRead, "listing approvals",
                                 [&](ApprovalTx& tx) -> Status {
                                   QL_ASSIGN_OR_RETURN(out.items,
                                                       tx.ListRequests(filter, before,
                                                                       page.limit + 1));
                                   return Status::Ok();
                                 }));
  if (static_cast<int>(out.items.size()) > page.limit) {
    out.items.resize(page.limit);
    out.next_key = EncodeIdKey(kApprovalListing, out.items.back().id);
  }
  return out;
}

Result<ApproveResult> ApprovalStore::Approve(const ApproveCommand& cmd) {
  QL_RETURN_IF_ERROR(ValidateId("approval id", cmd.request_id));
  QL_RETURN_IF_ERROR(ValidateId("principal id", cmd.actor.principal_id));
  for (const auto& [field, id] : {std::pair{"decision id", &cmd.decision_id},
                                  std::pair{"action id", &cmd.action_id},
                                  std::pair{"receipt id", &cmd.receipt_id},
                                  std::pair{"run id", &cmd.run_id},
                                  std::pair{"attempt id", &cmd.attempt_id}}) {
    QL_RETURN_IF_ERROR(ValidateId(field, *id));
  }
  QL_RETURN_IF_ERROR(RequireExecutorType(cmd.executor_type));
  QL_RETURN_IF_ERROR(RequireRetryPolicy(cmd.retry_policy));
  ApproveResult out;
  QL_RETURN_IF_ERROR(runner_.Run(
      ApprovalTxKind::kWrite, "approving a request", [&](ApprovalTx& tx) -> Status {
        GovernanceTx& gov = tx.governance();
        // The governance lock comes first (CheckPolicyFence), then the request row, in the
        // same order as every other decider, so two approvals cannot deadlock.
        QL_RETURN_IF_ERROR(gov.EnterFence());
        QL_ASSIGN_OR_RETURN(ApprovalRequestRecord request,
                            RequireRequest(tx, cmd.request_id, /*lock=*/true));
        QL_ASSIGN_OR_RETURN(Role approver_role, ParseRole(request.approver_role));
        QL_RETURN_IF_ERROR(CheckPolicyFence(
            gov, PolicyFence{cmd.actor.principal_id, approver_role}, request.project_id));
        if (cmd.actor.principal_id == request.requester_id) {
          return PermissionDenied("approval_self",
                                  "approval request " + request.id +
                                      " was made by the same principal; another one must "
                                      "approve it");
        }
        if (request.status == kApprovalApproved) {
          QL_ASSIGN_OR_RETURN(out.approval, ViewOf(tx, std::move(request)));
          if (!out.approval.receipt.has_value()) {
            return Corrupt("receipt_missing",
                           "approved request " + cmd.request_id + " has no receipt");
          }
          QL_ASSIGN_OR_RETURN(std::optional<RunRecord> run,
                              tx.LoadRun(out.approval.receipt->run_id, false));
          if (!run.has_value()) {
            return Corrupt("receipt_run_missing",
                           "the run of approval request " + cmd.request_id + " is missing");
          }
          out.run = std::move(*run);
          out.replayed = true;
          return Status::Ok();
        }
        QL_ASSIGN_OR_RETURN(const int64_t now, tx.ClockMs(cmd.now_ms));
        QL_RETURN_IF_ERROR(RequireUndecided(request, now));
        // The payload must still be the task's current revision and plan, bit for bit.
        QL_RETURN_IF_ERROR(RequireCurrentRevision(tx, request.project_id, request.task_id,
                                                  request.task_revision, request.task_digest,
                                                  "approval_stale")
                               .status());
        QL_ASSIGN_OR_RETURN(bool exec_ok, tx.ExecutionRevisionMatches(
                                              request.execution_revision_id, request.task_id,
                                              request.task_revision, request.task_digest));
        const std::string payload = ApprovalPayloadCanonical(request);
        if (!exec_ok || payload != request.payload_json ||
            ApprovalPayloadDigest(payload) != request.payload_digest) {
          return Conflict("approval_stale", "the action of approval request " + request.id +
                                                " no longer matches its task");
        }
        QL_ASSIGN_OR_RETURN(int64_t approver_version,
                            GrantingBindingVersion(gov, cmd.actor.principal_id,
                                                   request.project_id));
        ApprovalDecisionRecord decision{cmd.decision_id,
                                        request.id,
                                        std::string(kApprovalApproved),
                                        cmd.actor.principal_id,
                                        approver_version,
                                        std::nullopt,
                                        now};
        NewRun run;
        run.run_id = cmd.run_id;
        run.attempt_id = cmd.attempt_id;
        run.project_id = request.project_id;
        run.task_id = request.task_id;
        run.task_revision = request.task_revision;
        run.task_digest = request.task_digest;
        run.execution_revision_id = request.execution_revision_id;
        run.executor_type = cmd.executor_type;
        run.trigger_type = std::string(TriggerTypeName(TriggerType::kApproved));
        run.priority = request.priority;
        run.idempotency_key = request.idempotency_key;
        run.retry_policy = cmd.retry_policy;
        run.actor_type = std::string(ActorTypeName(ActorType::kUser));
        run.now_ms = now;
        if (request.retry_of_run_id.has_value()) {
          // The link is kept while the retried run is (retention may have purged it since).
          QL_ASSIGN_OR_RETURN(std::optional<RunRecord> retried,
                              tx.LoadRun(*request.retry_of_run_id, /*lock=*/false));
          if (retried.has_value()) run.retry_of_run_id = request.retry_of_run_id;
        }
        QL_RETURN_IF_ERROR(ValidateNewRun(run));
        ApprovedActionRecord action{cmd.action_id,         request.id,
                                    cmd.decision_id,       request.action,
                                    request.payload_digest, "consumed",
                                    cmd.run_id,            now};
        ApprovalReceiptRecord receipt{cmd.receipt_id, request.id, cmd.decision_id,
                                      cmd.action_id,  cmd.run_id, now};
        QL_RETURN_IF_ERROR(tx.DecideRequest(request.id, std::string(kApprovalApproved), now));
        QL_RETURN_IF_ERROR(tx.InsertDecision(decision));
        QL_RETURN_IF_ERROR(tx.InsertQueuedRun(run, now));
        QL_RETURN_IF_ERROR(tx.InsertAction(action));
        QL_RETURN_IF_ERROR(tx.InsertReceipt(receipt));
        QL_RETURN_IF_ERROR(gov.InsertAudit(
            Fact(cmd.actor, "approval.approve", "approval", request.id, request.project_id, now)));
        QL_RETURN_IF_ERROR(NotifyApproval(tx, request, kApprovalApproved, cmd.actor.principal_id,
                                          std::nullopt, cmd.run_id, now));
        request.status = std::string(kApprovalApproved);
        request.decided_at_ms = now;
        QL_ASSIGN_OR_RETURN(std::optional<RunRecord> created, tx.LoadRun(cmd.run_id, false));
        if (!created.has_value()) return Internal("run_missing", "the approved run vanished");
        out.approval = ApprovalView{std::move(request), std::move(decision), std::move(action),
                                    std::move(receipt)};
        out.run = std::move(*created);
        return Status::Ok();
      }));
  return out;
}

Result<ApprovalView> ApprovalStore::Reject(const RejectCommand& cmd) {
  QL_RETURN_IF_ERROR(ValidateId("approval id", cmd.request_id));
  QL_RETURN_IF_ERROR(ValidateId("principal id", cmd.actor.principal_id));
  QL_RETURN_IF_ERROR(ValidateId("decision id", cmd.decision_id));
  QL_RETURN_IF_ERROR(ValidateApprovalReason(cmd.reason));
  ApprovalView out;
  QL_RETURN_IF_ERROR(runner_.Run(
      ApprovalTxKind::kWrite, "rejecting a request", [&](ApprovalTx& tx) -> Status {
        GovernanceTx& gov = tx.governance();
        QL_RETURN_IF_ERROR(gov.EnterFence());
        QL_ASSIGN_OR_RETURN(ApprovalRequestRecord request,
                            RequireRequest(tx, cmd.request_id, /*lock=*/true));
        // The requester may withdraw its own request; anyone else needs the approver role.
        QL_ASSIGN_OR_RETURN(Role approver_role, ParseRole(request.approver_role));
        const Role required = cmd.actor.principal_id == request.requester_id
                                  ? RequiredRole(Action::kOperateRuns)
                                  : approver_role;
        QL_RETURN_IF_ERROR(CheckPolicyFence(gov, PolicyFence{cmd.actor.principal_id, required},
                                            request.project_id));
        if (request.status == kApprovalRejected) {
          QL_ASSIGN_OR_RETURN(out, ViewOf(tx, std::move(request)));
          return Status::Ok();
        }
        QL_ASSIGN_OR_RETURN(const int64_t now, tx.ClockMs(cmd.now_ms));
        QL_RETURN_IF_ERROR(RequireUndecided(request, now));
        QL_ASSIGN_OR_RETURN(int64_t version,
                            GrantingBindingVersion(gov, cmd.actor.principal_id,
                                                   request.project_id));
        ApprovalDecisionRecord decision{cmd.decision_id,
                                        request.id,
                                        std::string(kApprovalRejected),
                                        cmd.actor.principal_id,
                                        version,
                                        cmd.reason,
                                        now};
        QL_RETURN_IF_ERROR(tx.DecideRequest(request.id, std::string(kApprovalRejected), now));
        QL_RETURN_IF_ERROR(tx.InsertDecision(decision));
        QL_RETURN_IF_ERROR(gov.InsertAudit(
            Fact(cmd.actor, "approval.reject", "approval", request.id, request.project_id, now)));
        QL_RETURN_IF_ERROR(NotifyApproval(tx, request, kApprovalRejected, cmd.actor.principal_id,
                                          cmd.reason, std::nullopt, now));
        request.status = std::string(kApprovalRejected);
        request.decided_at_ms = now;
        out = ApprovalView{std::move(request), std::move(decision), std::nullopt, std::nullopt};
        return Status::Ok();
      }));
  return out;
}

Result<int> ApprovalStore::ExpireDue(int limit, int64_t now_ms) {
  QL_RETURN_IF_ERROR(RequireLimit("limit", limit));
  int expired = 0;
  QL_RETURN_IF_ERROR(runner_.Run(
      ApprovalTxKind::kWrite, "expiring approvals", [&](ApprovalTx& tx) -> Status {
        expired = 0;
        QL_RETURN_IF_ERROR(tx.governance().EnterFence());
        QL_ASSIGN_OR_RETURN(const int64_t now, tx.ClockMs(now_ms));
        QL_ASSIGN_OR_RETURN(std::vector<ApprovalRequestRecord> due,
                            tx.LockExpiredPending(now, limit));
        for (const ApprovalRequestRecord& request : due) {
          std::string decision_id;
          {
            std::lock_guard<std::mutex> lock(random_mu_);
            decision_id = NewUuidV7(now, random_);
          }
          QL_RETURN_IF_ERROR(tx.DecideRequest(request.id, std::string(kApprovalExpired), now));
          QL_RETURN_IF_ERROR(tx.InsertDecision(ApprovalDecisionRecord{
              decision_id, request.id, std::string(kApprovalExpired), std::nullopt, std::nullopt,
              std::nullopt, now}));
          QL_RETURN_IF_ERROR(tx.governance().InsertAudit(
              Fact(Actor{}, "approval.expire", "approval", request.id, request.project_id, now)));
          QL_RETURN_IF_ERROR(NotifyApproval(tx, request, kApprovalExpired, std::nullopt,
                                            std::nullopt, std::nullopt, now));
          ++expired;
        }
        return Status::Ok();
      }));
  return expired;
}

Result<ResolveRunResult> ApprovalStore::ResolveRun(const ResolveRunCommand& cmd) {
  QL_RETURN_IF_ERROR(ValidateId("run id", cmd.run_id));
  QL_RETURN_IF_ERROR(ValidateId("principal id", cmd.actor.principal_id));
  QL_RETURN_IF_ERROR(RequireResolution(cmd.resolution));
  QL_RETURN_IF_ERROR(ValidateApprovalReason(cmd.reason));
  const bool retry = cmd.resolution == kResolveRetry;
  if (retry) {
    QL_RETURN_IF_ERROR(ValidateId("new run id", cmd.new_run_id));
    QL_RETURN_IF_ERROR(ValidateId("new attempt id", cmd.new_attempt_id));
  }
  ResolveRunResult out;
  QL_RETURN_IF_ERROR(runner_.Run(
      ApprovalTxKind::kWrite, "resolving a run", [&](ApprovalTx& tx) -> Status {
        GovernanceTx& gov = tx.governance();
        QL_RETURN_IF_ERROR(gov.EnterFence());
        QL_ASSIGN_OR_RETURN(std::optional<RunRecord> run, tx.LoadRun(cmd.run_id, /*lock=*/true));
        if (!run.has_value()) {
          return NotFound("run_not_found", "run " + cmd.run_id + " does not exist");
        }
        QL_RETURN_IF_ERROR(CheckPolicyFence(
            gov, PolicyFence{cmd.actor.principal_id, RequiredRole(Action::kApprove)},
            run->project_id));
        if (retry) QL_RETURN_IF_ERROR(RequireRetryAuthority(tx, *run, cmd.actor));
        QL_ASSIGN_OR_RETURN(std::optional<RunResolutionRecord> earlier,
                            tx.LoadResolution(run->id));
        if (earlier.has_value()) {
          if (earlier->resolution != cmd.resolution) {
            return Conflict("run_already_resolved", "run " + run->id + " was resolved as " +
                                                        earlier->resolution + " already");
          }
          out.resolution = std::move(*earlier);
          out.run = std::move(*run);
          if (out.resolution.retry_run_id.has_value()) {
            QL_ASSIGN_OR_RETURN(out.retry_run, tx.LoadRun(*out.resolution.retry_run_id, false));
          }
          out.replayed = true;
          return Status::Ok();
        }
        QL_ASSIGN_OR_RETURN(RunStatus from, StoredRunStatus(*run));
        QL_RETURN_IF_ERROR(RequireRecoveryRequired(*run, from, "by hand"));
        const RunStatus to = cmd.resolution == kResolveSucceeded ? RunStatus::kSucceeded
                                                                 : RunStatus::kFailed;
        QL_RETURN_IF_ERROR(CheckRunTransition(from, to));
        QL_ASSIGN_OR_RETURN(const int64_t now, tx.ClockMs(cmd.now_ms));
        RunResolutionRecord resolution{run->id,         cmd.resolution, cmd.reason,
                                       cmd.actor.principal_id, std::nullopt, now};
        if (retry) {
          QL_ASSIGN_OR_RETURN(std::optional<AttemptRecord> latest, tx.LoadLatestAttempt(run->id));
          if (!latest.has_value()) {
            return Corrupt("run_without_attempt", "run " + run->id + " has no attempt");
          }
          NewRun next;
          next.run_id = cmd.new_run_id;
          next.attempt_id = cmd.new_attempt_id;
          next.project_id = run->project_id;
          next.task_id = run->task_id;
          next.task_revision = run->task_revision;
          next.task_digest = run->task_digest;
          next.execution_revision_id = run->execution_revision_id;
          next.executor_type = latest->executor_type;
          next.trigger_type = std::string(TriggerTypeName(TriggerType::kApproved));
          next.priority = run->priority;
          next.retry_of_run_id = run->id;
          next.retry_policy = run->retry_policy;
          next.actor_type = std::string(ActorTypeName(ActorType::kUser));
          next.now_ms = now;
          QL_RETURN_IF_ERROR(ValidateNewRun(next));
          QL_RETURN_IF_ERROR(tx.InsertQueuedRun(next, now));
          resolution.retry_run_id = next.run_id;
        }
        nlohmann::json payload = {{"reason", cmd.reason},
                                  {"resolution", cmd.resolution},
                                  {"resolved_by", cmd.actor.principal_id}};
        if (resolution.retry_run_id.has_value()) payload["retry_run_id"] = *resolution.retry_run_id;
        std::optional<std::string> error_code;
        if (to == RunStatus::kFailed) {
          error_code = retry ? "recovery_retried" : "recovery_resolved_failed";
        }
        QL_RETURN_IF_ERROR(WriteResolution(
            tx, *run, to, ActorType::kUser, std::nullopt, payload, error_code,
            "resolved by hand: " + cmd.reason, resolution,
            Fact(cmd.actor, "run.resolve", "run", run->id, run->project_id, now), now));
        QL_ASSIGN_OR_RETURN(run, tx.LoadRun(cmd.run_id, false));
        out.run = std::move(*run);
        if (resolution.retry_run_id.has_value()) {
          QL_ASSIGN_OR_RETURN(out.retry_run, tx.LoadRun(*resolution.retry_run_id, false));
        }
        out.resolution = std::move(resolution);
        return Status::Ok();
      }));
  return out;
}

Result<ResolveRunResult> ApprovalStore::ResolveFromEvidence(const EvidenceResolutionCommand& cmd) {
  QL_RETURN_IF_ERROR(ValidateId("run id", cmd.run_id));
  QL_RETURN_IF_ERROR(ValidateId("attempt id", cmd.attempt_id));
  const std::string reason = "resolved from evidence: " + cmd.evidence;
  QL_RETURN_IF_ERROR(ValidateApprovalReason(reason));
  ResolveRunResult out;
  QL_RETURN_IF_ERROR(runner_.Run(
      ApprovalTxKind::kWrite, "resolving a run from evidence", [&](ApprovalTx& tx) -> Status {
        QL_ASSIGN_OR_RETURN(std::optional<RunRecord> run, tx.LoadRun(cmd.run_id, /*lock=*/true));
        if (!run.has_value()) {
          return NotFound("run_not_found", "run " + cmd.run_id + " does not exist");
        }
        QL_ASSIGN_OR_RETURN(std::optional<RunResolutionRecord> earlier,
                            tx.LoadResolution(run->id));
        if (earlier.has_value()) {  // a human (or earlier evidence) resolved it first
          out.resolution = std::move(*earlier);
          out.run = std::move(*run);
          out.replayed = true;
          return Status::Ok();
        }
        QL_ASSIGN_OR_RETURN(RunStatus from, StoredRunStatus(*run));
        QL_RETURN_IF_ERROR(RequireRecoveryRequired(*run, from, "from evidence"));
        QL_ASSIGN_OR_RETURN(std::optional<AttemptRecord> latest, tx.LoadLatestAttempt(run->id));
        if (!latest.has_value() || latest->id != cmd.attempt_id ||
            latest->status != AttemptStatusName(AttemptStatus::kLost)) {
          return Conflict("evidence_attempt_mismatch",
                          "attempt " + cmd.attempt_id + " is not the lost latest attempt of run " +
                              run->id);
        }
        const RunStatus to = cmd.succeeded ? RunStatus::kSucceeded : RunStatus::kFailed;
        QL_RETURN_IF_ERROR(CheckRunTransition(from, to));
        QL_ASSIGN_OR_RETURN(const int64_t now, tx.ClockMs(cmd.now_ms));
        const std::string resolution(cmd.succeeded ? kResolveSucceeded : kResolveFailed);
        RunResolutionRecord record{run->id, resolution, reason, std::nullopt, std::nullopt, now};
        const nlohmann::json payload = {{"reason", reason},
                                        {"resolution", resolution},
                                        {"resolved_by", nullptr},
                                        {"attempt_id", cmd.attempt_id}};
        std::optional<std::string> error_code;
        if (to == RunStatus::kFailed) error_code = "recovery_evidence_failed";
        QL_RETURN_IF_ERROR(WriteResolution(
            tx, *run, to, ActorType::kRecovery, cmd.attempt_id, payload, error_code, reason,
            record, Fact(Actor{}, "run.resolve", "run", run->id, run->project_id, now), now));
        QL_ASSIGN_OR_RETURN(run, tx.LoadRun(cmd.run_id, false));
        out.run = std::move(*run);
        out.resolution = std::move(record);
        return Status::Ok();
      }));
  return out;
}

Result<RunResolutionRecord> ApprovalStore::GetResolution(const std::string& run_id) {
  QL_RETURN_IF_ERROR(ValidateId("run id", run_id));
  std::optional<RunResolutionRecord> out;
  QL_RETURN_IF_ERROR(runner_.Run(ApprovalTxKind::kRead, "reading a resolution",
                                 [&](ApprovalTx& tx) -> Status {
                                   QL_ASSIGN_OR_RETURN(out, tx.LoadResolution(run_id));
                                   return Status::Ok();
                                 }));
  if (!out.has_value()) {
    return NotFound("resolution_not_found", "run " + run_id + " has no resolution");
  }
  return std::move(*out);
}

Result<ApprovalReceiptRecord> ApprovalStore::ReceiptOfRun(const std::string& run_id) {
  QL_RETURN_IF_ERROR(ValidateId("run id", run_id));
  std::optional<ApprovalReceiptRecord> out;
  QL_RETURN_IF_ERROR(runner_.Run(ApprovalTxKind::kRead, "reading a receipt",
                                 [&](ApprovalTx& tx) -> Status {
                                   QL_ASSIGN_OR_RETURN(out, tx.LoadReceiptByRun(run_id));
                                   return Status::Ok();
                                 }));
  if (!out.has_value()) {
    return NotFound("receipt_not_found", "run " + run_id + " has no approval receipt");
  }
  return std::move(*out);
}

}  // namespace ql
