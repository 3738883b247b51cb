#include "ql/storage/postgres/pg_approvals.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ql/core/store_commands.h"
#include "ql/storage/postgres/pg_governance.h"
#include "ql/storage/postgres/pg_notifications.h"
#include "ql/storage/postgres/pg_run_rows.h"
#include "ql/storage/postgres/pg_store_rows.h"

namespace ql::pg {
namespace {

constexpr char kRequestColumns[] =
    "SELECT q.id, q.project_id, q.action, q.task_id, q.task_revision, q.task_digest, "
    "q.execution_revision_id, q.priority, q.idempotency_key, q.payload_json, q.payload_digest, "
    "q.requester_id, q.requester_binding_version, q.approver_role, q.status, q.created_at_ms, "
    "q.expires_at_ms, q.decided_at_ms, q.retry_of_run_id FROM approval_requests q ";

ApprovalRequestRecord ReadRequest(const Rows& r, int i) {
  ApprovalRequestRecord out;
  out.id = r.Text(i, 0);
  out.project_id = r.Text(i, 1);
  out.action = r.Text(i, 2);
  out.task_id = r.Text(i, 3);
  out.task_revision = r.Int(i, 4);
  out.task_digest = r.Text(i, 5);
  out.execution_revision_id = r.Text(i, 6);
  out.priority = static_cast<int>(r.Int(i, 7));
  out.idempotency_key = r.OptText(i, 8);
  out.payload_json = r.Text(i, 9);
  out.payload_digest = r.Text(i, 10);
  out.requester_id = r.Text(i, 11);
  out.requester_binding_version = r.Int(i, 12);
  out.approver_role = r.Text(i, 13);
  out.status = r.Text(i, 14);
  out.created_at_ms = r.Int(i, 15);
  out.expires_at_ms = r.Int(i, 16);
  out.decided_at_ms = r.OptInt(i, 17);
  out.retry_of_run_id = r.OptText(i, 18);
  return out;
}

constexpr char kDecisionColumns[] =
    "SELECT id, request_id, decision, decided_by, decider_binding_version, reason, "
    "decided_at_ms FROM approval_decisions ";

ApprovalDecisionRecord ReadDecision(const Rows& r, int i) {
  return ApprovalDecisionRecord{r.Text(i, 0),   r.Text(i, 1),    r.Text(i, 2), r.OptText(i, 3),
                                r.OptInt(i, 4), r.OptText(i, 5), r.Int(i, 6)};
}

constexpr char kActionColumns[] =
    "SELECT id, request_id, decision_id, action, payload_digest, status, run_id, consumed_at_ms "
    "FROM approved_actions ";

ApprovedActionRecord ReadAction(const Rows& r, int i) {
  return ApprovedActionRecord{r.Text(i, 0), r.Text(i, 1), r.Text(i, 2), r.Text(i, 3),
                              r.Text(i, 4), r.Text(i, 5), r.Text(i, 6), r.Int(i, 7)};
}

constexpr char kReceiptColumns[] =
    "SELECT id, request_id, decision_id, action_id, run_id, created_at_ms FROM approval_receipts ";

ApprovalReceiptRecord ReadReceipt(const Rows& r, int i) {
  return ApprovalReceiptRecord{r.Text(i, 0), r.Text(i, 1), r.Text(i, 2),
                               r.Text(i, 3), r.Text(i, 4), r.Int(i, 5)};
}

constexpr char kResolutionColumns[] =
    "SELECT run_id, resolution, reason, resolved_by, retry_run_id, created_at_ms "
    "FROM run_resolutions ";

RunResolutionRecord ReadResolution(const Rows& r, int i) {
  return RunResolutionRecord{r.Text(i, 0),    r.Text(i, 1),    r.Text(i, 2),
                             r.OptText(i, 3), r.OptText(i, 4), r.Int(i, 5)};
}

class PgApprovalTx final : public ApprovalTx {
 public:
  explicit PgApprovalTx(Tx& tx)
      : tx_(tx), governance_(NewGovernanceTx(tx)), notifications_(NewNotificationTx(tx)) {}

  GovernanceTx& governance() override { return *governance_; }
  NotificationTx& notifications() override { return *notifications_; }
  Result<int64_t> ClockMs(int64_t) override {
    QL_ASSIGN_OR_RETURN(Rows rows,
                        tx_.Exec("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint",
                                 {}));
    QL_RETURN_IF_ERROR(rows.ExpectRows(1));
    const int64_t now = rows.Int(0, 0);
    QL_RETURN_IF_ERROR(rows.status());
    return now;
  }

  Result<std::optional<TaskHeadRecord>> LoadTaskHead(const std::string& task_id) override {
    return pg::LoadTaskHead(tx_, task_id);
  }
  Result<std::optional<TaskRevisionRecord>> LoadTaskRevision(const std::string& task_id,
                                                             int64_t revision) override {
    return pg::LoadTaskRevision(tx_, task_id, revision);
  }
  Result<bool> ExecutionRevisionMatches(const std::string& id, const std::string& task_id,
                                        int64_t task_revision,
                                        const std::string& task_digest) override {
    QL_ASSIGN_OR_RETURN(Rows rows,
                        tx_.Exec("SELECT 1 FROM execution_revisions WHERE id = $1 AND "
                                 "task_id = $2 AND task_revision = $3 AND task_digest = $4",
                                 {P(id), P(task_id), P(task_revision), P(task_digest)}));
    return !rows.empty();
  }

  Result<std::optional<ApprovalRequestRecord>> LoadRequest(const std::string& id,
                                                           bool lock) override {
    static const std::string kSql = std::string(kRequestColumns) + "WHERE q.id = $1";
    static const std::string kLocked = kSql + " FOR UPDATE";
    return QueryOne<ApprovalRequestRecord>(tx_, lock ? kLocked : kSql, {P(id)}, ReadRequest);
  }
  Result<std::optional<ApprovalRequestRecord>> LoadRequestByKey(
      const std::string& project_id, const std::string& key) override {
    static const std::string kSql =
        std::string(kRequestColumns) + "WHERE q.project_id = $1 AND q.idempotency_key = $2";
    return QueryOne<ApprovalRequestRecord>(tx_, kSql, {P(project_id), P(key)}, ReadRequest);
  }
  Result<std::vector<ApprovalRequestRecord>> ListRequests(
      const ApprovalFilter& filter, const std::optional<std::string>& before_id,
      int limit) override {
    static const std::string kSql =
        std::string(kRequestColumns) +
        "WHERE ($1::text IS NULL OR q.project_id = $1) AND ($2::text IS NULL OR q.status = $2) "
        "AND ($3::text IS NULL OR q.id < $3) ORDER BY q.id DESC LIMIT $4";
    return QueryAll<ApprovalRequestRecord>(
        tx_, kSql,
        {P(filter.project_id), P(filter.status), P(before_id), P(static_cast<int64_t>(limit))},
        ReadRequest);
  }
  Result<std::vector<ApprovalRequestRecord>> LockExpiredPending(int64_t now_ms,
                                                                int limit) override {
    static const std::string kSql =
        std::string(kRequestColumns) +
        "WHERE q.status = 'pending' AND q.expires_at_ms <= $1 ORDER BY q.expires_at_ms, q.id "
        "LIMIT $2 FOR UPDATE SKIP LOCKED";
    return QueryAll<ApprovalRequestRecord>(tx_, kSql, {P(now_ms), P(static_cast<int64_t>(limit))},
                                           ReadRequest);
  }
  Status InsertRequest(const ApprovalRequestRecord& r) override {
    return Execute(tx_,
                   "INSERT INTO approval_requests (id, project_id, action, task_id, "
                   "task_revision, task_digest, execution_revision_id, priority, "
                   "idempotency_key, payload_json, payload_digest, requester_id, "
                   "requester_binding_version, approver_role, status, created_at_ms, "
                   "expires_at_ms, decided_at_ms, retry_of_run_id) VALUES ($1, $2, $3, $4, $5, "
                   "$6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)",
                   {P(r.id), P(r.project_id), P(r.action), P(r.task_id), P(r.task_revision),
                    P(r.task_digest), P(r.execution_revision_id),
                    P(static_cast<int64_t>(r.priority)), P(r.idempotency_key), P(r.payload_json),
                    P(r.payload_digest), P(r.requester_id), P(r.requester_binding_version),
                    P(r.approver_role), P(r.status), P(r.created_at_ms), P(r.expires_at_ms),
                    P(r.decided_at_ms), P(r.retry_of_run_id)});
  }
  Status DecideRequest(const std::string& id, const std::string& status,
                       int64_t decided_at_ms) override {
    return ExecuteCas(tx_, Conflict("approval_decided", "approval request " + id + " was decided"),
                      "UPDATE approval_requests SET status = $1, decided_at_ms = $2 "
                      "WHERE id = $3 AND status = 'pending'",
                      {P(status), P(decided_at_ms), P(id)});
  }

  Result<std::optional<ApprovalDecisionRecord>> LoadDecision(
      const std::string& request_id) override {
    static const std::string kSql = std::string(kDecisionColumns) + "WHERE request_id = $1";
    return QueryOne<ApprovalDecisionRecord>(tx_, kSql, {P(request_id)}, ReadDecision);
  }
  Status InsertDecision(const ApprovalDecisionRecord& d) override {
    return Execute(tx_,
                   "INSERT INTO approval_decisions (id, request_id, decision, decided_by, "
                   "decider_binding_version, reason, decided_at_ms) "
                   "VALUES ($1, $2, $3, $4, $5, $6, $7)",
                   {P(d.id), P(d.request_id), P(d.decision), P(d.decided_by),
                    P(d.decider_binding_version), P(d.reason), P(d.decided_at_ms)});
  }
  Result<std::optional<ApprovedActionRecord>> LoadAction(const std::string& request_id) override {
    static const std::string kSql = std::string(kActionColumns) + "WHERE request_id = $1";
    return QueryOne<ApprovedActionRecord>(tx_, kSql, {P(request_id)}, ReadAction);
  }
  Status InsertAction(const ApprovedActionRecord& a) override {
    return Execute(tx_,
                   "INSERT INTO approved_actions (id, request_id, decision_id, action, "
                   "payload_digest, status, run_id, consumed_at_ms) "
                   "VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                   {P(a.id), P(a.request_id), P(a.decision_id), P(a.action), P(a.payload_digest),
                    P(a.status), P(a.run_id), P(a.consumed_at_ms)});
  }
  Result<std::optional<ApprovalReceiptRecord>> LoadReceipt(
      const std::string& request_id) override {
    static const std::string kSql = std::string(kReceiptColumns) + "WHERE request_id = $1";
    return QueryOne<ApprovalReceiptRecord>(tx_, kSql, {P(request_id)}, ReadReceipt);
  }
  Result<std::optional<ApprovalReceiptRecord>> LoadReceiptByRun(
      const std::string& run_id) override {
    static const std::string kSql = std::string(kReceiptColumns) + "WHERE run_id = $1";
    return QueryOne<ApprovalReceiptRecord>(tx_, kSql, {P(run_id)}, ReadReceipt);
  }
  Status InsertReceipt(const ApprovalReceiptRecord& r) override {
    return Execute(tx_,
                   "INSERT INTO approval_receipts (id, request_id, decision_id, action_id, "
                   "run_id, created_at_ms) VALUES ($1, $2, $3, $4, $5, $6)",
                   {P(r.id), P(r.request_id), P(r.decision_id), P(r.action_id), P(r.run_id),
                    P(r.created_at_ms)});
  }

  Status InsertQueuedRun(const NewRun& run, int64_t now_ms) override {
    return pg::InsertQueuedRun(tx_, run, now_ms);
  }
  Result<std::optional<RunRecord>> LoadRun(const std::string& run_id, bool lock) override {
    return pg::LoadRun(tx_, run_id, lock ? Lock::kUpdate : Lock::kNone);
  }
  Result<std::optional<AttemptRecord>> LoadLatestAttempt(const std::string& run_id) override {
    return pg::LoadLatestAttempt(tx_, run_id);
  }
  Status InsertEvent(const std::string& run_id, int64_t sequence, const NewEvent& event,
                     const std::string& payload, int64_t now_ms) override {
    return pg::InsertEvent(tx_, run_id, sequence, event, payload, now_ms);
  }
  Status FinishRun(const std::string& run_id, int64_t expected_version, const std::string& status,
                   int64_t event_sequence, int64_t finished_at_ms,
                   const std::optional<std::string>& error_code,
                   const std::optional<std::string>& error_summary) override {
    return ExecuteCas(tx_, Conflict("version_conflict", "run " + run_id + " moved on"),
                      "UPDATE runs SET status = $1, version = version + 1, event_sequence = $2, "
                      "finished_at_ms = $3, error_code = $4, error_summary = $5 "
                      "WHERE id = $6 AND version = $7",
                      {P(status), P(event_sequence), P(finished_at_ms), P(error_code),
                       P(error_summary), P(run_id), P(expected_version)});
  }

  Result<std::optional<RunResolutionRecord>> LoadResolution(const std::string& run_id) override {
    static const std::string kSql = std::string(kResolutionColumns) + "WHERE run_id = $1";
    return QueryOne<RunResolutionRecord>(tx_, kSql, {P(run_id)}, ReadResolution);
  }
  Status InsertResolution(const RunResolutionRecord& r) override {
    return Execute(tx_,
                   "INSERT INTO run_resolutions (run_id, resolution, reason, resolved_by, "
                   "retry_run_id, created_at_ms) VALUES ($1, $2, $3, $4, $5, $6)",
                   {P(r.run_id), P(r.resolution), P(r.reason), P(r.resolved_by),
                    P(r.retry_run_id), P(r.created_at_ms)});
  }

 private:
  Tx& tx_;
  std::unique_ptr<GovernanceTx> governance_;
  std::unique_ptr<NotificationTx> notifications_;
};

}  // namespace

Status PgApprovalRunner::Run(ApprovalTxKind kind, std::string_view operation,
                             const std::function<Status(ApprovalTx&)>& body) {
  TxOptions options;
  options.read_only = kind == ApprovalTxKind::kRead;
  return runtime_.Transact(options, operation, [&](Tx& tx) {
    PgApprovalTx approvals(tx);
    return body(approvals);
  });
}

}  // namespace ql::pg
