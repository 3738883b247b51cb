#include "ql/storage/sqlite/sqlite_approvals.h"

#include <memory>
#include <string>
#include <utility>

#include "ql/core/store_commands.h"
#include "ql/storage/sqlite/sqlite_db.h"
#include "ql/storage/sqlite/sqlite_governance.h"
#include "ql/storage/sqlite/sqlite_notifications.h"
#include "ql/storage/sqlite/sqlite_store_rows.h"

namespace ql::sqlite {
namespace {

constexpr char kRequestColumns[] =
    "SELECT q.id, q.project_id, q.action, q.task_id, q.task_revision, q.task_digest, "
    "q.execution_revision_id, q.priority, q.idempotency_key, q.payload_json, q.payload_digest, "
    "q.requester_id, q.requester_binding_version, q.approver_role, q.status, q.created_at_ms, "
    "q.expires_at_ms, q.decided_at_ms, q.retry_of_run_id FROM approval_requests q ";

ApprovalRequestRecord ReadRequest(const Stmt& s) {
  ApprovalRequestRecord r;
  r.id = s.Text(0);
  r.project_id = s.Text(1);
  r.action = s.Text(2);
  r.task_id = s.Text(3);
  r.task_revision = s.Int(4);
  r.task_digest = s.Text(5);
  r.execution_revision_id = s.Text(6);
  r.priority = static_cast<int>(s.Int(7));
  r.idempotency_key = s.OptText(8);
  r.payload_json = s.Text(9);
  r.payload_digest = s.Text(10);
  r.requester_id = s.Text(11);
  r.requester_binding_version = s.Int(12);
  r.approver_role = s.Text(13);
  r.status = s.Text(14);
  r.created_at_ms = s.Int(15);
  r.expires_at_ms = s.Int(16);
  r.decided_at_ms = s.OptInt(17);
  r.retry_of_run_id = s.OptText(18);
  return r;
}

constexpr char kDecisionColumns[] =
    "SELECT id, request_id, decision, decided_by, decider_binding_version, reason, "
    "decided_at_ms FROM approval_decisions ";

ApprovalDecisionRecord ReadDecision(const Stmt& s) {
  return ApprovalDecisionRecord{s.Text(0),   s.Text(1),    s.Text(2), s.OptText(3),
                                s.OptInt(4), s.OptText(5), s.Int(6)};
}

constexpr char kActionColumns[] =
    "SELECT id, request_id, decision_id, action, payload_digest, status, run_id, consumed_at_ms "
    "FROM approved_actions ";

ApprovedActionRecord ReadAction(const Stmt& s) {
  return ApprovedActionRecord{s.Text(0), s.Text(1), s.Text(2), s.Text(3),
                              s.Text(4), s.Text(5), s.Text(6), s.Int(7)};
}

constexpr char kReceiptColumns[] =
    "SELECT id, request_id, decision_id, action_id, run_id, created_at_ms FROM approval_receipts ";

ApprovalReceiptRecord ReadReceipt(const Stmt& s) {
  return ApprovalReceiptRecord{s.Text(0), s.Text(1), s.Text(2), s.Text(3), s.Text(4), s.Int(5)};
}

constexpr char kResolutionColumns[] =
    "SELECT run_id, resolution, reason, resolved_by, retry_run_id, created_at_ms "
    "FROM run_resolutions ";

RunResolutionRecord ReadResolution(const Stmt& s) {
  return RunResolutionRecord{s.Text(0),    s.Text(1),    s.Text(2),
                             s.OptText(3), s.OptText(4), s.Int(5)};
}

class SqliteApprovalTx final : public ApprovalTx {
 public:
  explicit SqliteApprovalTx(Db& db)
      : db_(db), governance_(NewGovernanceTx(db)), notifications_(NewNotificationTx(db)) {}

  GovernanceTx& governance() override { return *governance_; }
  NotificationTx& notifications() override { return *notifications_; }
  Result<int64_t> ClockMs(int64_t command_now_ms) override { return command_now_ms; }

  Result<std::optional<TaskHeadRecord>> LoadTaskHead(const std::string& task_id) override {
    return sqlite::LoadTaskHead(db_, task_id);
  }
  Result<std::optional<TaskRevisionRecord>> LoadTaskRevision(const std::string& task_id,
                                                             int64_t revision) override {
    return sqlite::LoadTaskRevision(db_, task_id, revision);
  }
  Result<bool> ExecutionRevisionMatches(const std::string& id, const std::string& task_id,
                                        int64_t task_revision,
                                        const std::string& task_digest) override {
    QL_ASSIGN_OR_RETURN(
        std::optional<int64_t> found,
        QueryOne<int64_t>(db_,
                          "SELECT 1 FROM execution_revisions WHERE id = ? AND task_id = ? "
                          "AND task_revision = ? AND task_digest = ?",
                          [](const Stmt& s) { return s.Int(0); }, id, task_id, task_revision,
                          task_digest));
    return found.has_value();
  }

  Result<std::optional<ApprovalRequestRecord>> LoadRequest(const std::string& id, bool) override {
    static const std::string kSql = std::string(kRequestColumns) + "WHERE q.id = ?";
    return QueryOne<ApprovalRequestRecord>(db_, kSql, ReadRequest, id);
  }
  Result<std::optional<ApprovalRequestRecord>> LoadRequestByKey(
      const std::string& project_id, const std::string& key) override {
    static const std::string kSql =
        std::string(kRequestColumns) + "WHERE q.project_id = ? AND q.idempotency_key = ?";
    return QueryOne<ApprovalRequestRecord>(db_, kSql, ReadRequest, project_id, key);
  }
  Result<std::vector<ApprovalRequestRecord>> ListRequests(
      const ApprovalFilter& filter, const std::optional<std::string>& before_id,
      int limit) override {
    static const std::string kSql =
        std::string(kRequestColumns) +
        "WHERE (?1 IS NULL OR q.project_id = ?1) AND (?2 IS NULL OR q.status = ?2) "
        "AND (?3 IS NULL OR q.id < ?3) ORDER BY q.id DESC LIMIT ?4";
    return QueryAll<ApprovalRequestRecord>(db_, kSql, ReadRequest, filter.project_id,
                                           filter.status, before_id, limit);
  }
  Result<std::vector<ApprovalRequestRecord>> LockExpiredPending(int64_t now_ms,
                                                                int limit) override {
    static const std::string kSql =
        std::string(kRequestColumns) +
        "WHERE q.status = 'pending' AND q.expires_at_ms <= ? ORDER BY q.expires_at_ms, q.id "
        "LIMIT ?";
    return QueryAll<ApprovalRequestRecord>(db_, kSql, ReadRequest, now_ms, limit);
  }
  Status InsertRequest(const ApprovalRequestRecord& r) override {
    return Execute(db_,
                   "INSERT INTO approval_requests (id, project_id, action, task_id, "
                   "task_revision, task_digest, execution_revision_id, priority, "
                   "idempotency_key, payload_json, payload_digest, requester_id, "
                   "requester_binding_version, approver_role, status, created_at_ms, "
                   "expires_at_ms, decided_at_ms, retry_of_run_id) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   r.id, r.project_id, r.action, r.task_id, r.task_revision, r.task_digest,
                   r.execution_revision_id, r.priority, r.idempotency_key, r.payload_json,
                   r.payload_digest, r.requester_id, r.requester_binding_version,
                   r.approver_role, r.status, r.created_at_ms, r.expires_at_ms, r.decided_at_ms,
                   r.retry_of_run_id);
  }
  Status DecideRequest(const std::string& id, const std::string& status,
                       int64_t decided_at_ms) override {
    return ExecuteCas(db_,
                      Conflict("approval_decided", "approval request " + id + " was decided"),
                      "UPDATE approval_requests SET status = ?, decided_at_ms = ? "
                      "WHERE id = ? AND status = 'pending'",
                      status, decided_at_ms, id);
  }

  Result<std::optional<ApprovalDecisionRecord>> LoadDecision(
      const std::string& request_id) override {
    static const std::string kSql = std::string(kDecisionColumns) + "WHERE request_id = ?";
    return QueryOne<ApprovalDecisionRecord>(db_, kSql, ReadDecision, request_id);
  }
  Status InsertDecision(const ApprovalDecisionRecord& d) override {
    return Execute(db_,
                   "INSERT INTO approval_decisions (id, request_id, decision, decided_by, "
                   "decider_binding_version, reason, decided_at_ms) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?)",
                   d.id, d.request_id, d.decision, d.decided_by, d.decider_binding_version,
                   d.reason, d.decided_at_ms);
  }
  Result<std::optional<ApprovedActionRecord>> LoadAction(const std::string& request_id) override {
    static const std::string kSql = std::string(kActionColumns) + "WHERE request_id = ?";
    return QueryOne<ApprovedActionRecord>(db_, kSql, ReadAction, request_id);
  }
  Status InsertAction(const ApprovedActionRecord& a) override {
    return Execute(db_,
                   "INSERT INTO approved_actions (id, request_id, decision_id, action, "
                   "payload_digest, status, run_id, consumed_at_ms) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                   a.id, a.request_id, a.decision_id, a.action, a.payload_digest, a.status,
                   a.run_id, a.consumed_at_ms);
  }
  Result<std::optional<ApprovalReceiptRecord>> LoadReceipt(
      const std::string& request_id) override {
    static const std::string kSql = std::string(kReceiptColumns) + "WHERE request_id = ?";
    return QueryOne<ApprovalReceiptRecord>(db_, kSql, ReadReceipt, request_id);
  }
  Result<std::optional<ApprovalReceiptRecord>> LoadReceiptByRun(
      const std::string& run_id) override {
    static const std::string kSql = std::string(kReceiptColumns) + "WHERE run_id = ?";
    return QueryOne<ApprovalReceiptRecord>(db_, kSql, ReadReceipt, run_id);
  }
  Status InsertReceipt(const ApprovalReceiptRecord& r) override {
    return Execute(db_,
                   "INSERT INTO approval_receipts (id, request_id, decision_id, action_id, "
                   "run_id, created_at_ms) VALUES (?, ?, ?, ?, ?, ?)",
                   r.id, r.request_id, r.decision_id, r.action_id, r.run_id, r.created_at_ms);
  }

  Status InsertQueuedRun(const NewRun& run, int64_t) override {
    return sqlite::InsertQueuedRun(db_, run);
  }
  Result<std::optional<RunRecord>> LoadRun(const std::string& run_id, bool) override {
    return sqlite::LoadRun(db_, run_id);
  }
  Result<std::optional<AttemptRecord>> LoadLatestAttempt(const std::string& run_id) override {
    return sqlite::LoadLatestAttempt(db_, run_id);
  }
  Status InsertEvent(const std::string& run_id, int64_t sequence, const NewEvent& event,
                     const std::string& payload, int64_t now_ms) override {
    return sqlite::InsertEvent(db_, run_id, sequence, event, payload, now_ms);
  }
  Status FinishRun(const std::string& run_id, int64_t expected_version, const std::string& status,
                   int64_t event_sequence, int64_t finished_at_ms,
                   const std::optional<std::string>& error_code,
                   const std::optional<std::string>& error_summary) override {
    return ExecuteCas(db_, Conflict("version_conflict", "run " + run_id + " moved on"),
                      "UPDATE runs SET status = ?, version = version + 1, event_sequence = ?, "
                      "finished_at_ms = ?, error_code = ?, error_summary = ? "
                      "WHERE id = ? AND version = ?",
                      status, event_sequence, finished_at_ms, error_code, error_summary, run_id,
                      expected_version);
  }

  Result<std::optional<RunResolutionRecord>> LoadResolution(const std::string& run_id) override {
    static const std::string kSql = std::string(kResolutionColumns) + "WHERE run_id = ?";
    return QueryOne<RunResolutionRecord>(db_, kSql, ReadResolution, run_id);
  }
  Status InsertResolution(const RunResolutionRecord& r) override {
    return Execute(db_,
                   "INSERT INTO run_resolutions (run_id, resolution, reason, resolved_by, "
                   "retry_run_id, created_at_ms) VALUES (?, ?, ?, ?, ?, ?)",
                   r.run_id, r.resolution, r.reason, r.resolved_by, r.retry_run_id,
                   r.created_at_ms);
  }

 private:
  Db& db_;
  std::unique_ptr<GovernanceTx> governance_;
  std::unique_ptr<NotificationTx> notifications_;
};

}  // namespace

Status SqliteApprovalRunner::Run(ApprovalTxKind kind, std::string_view operation,
                                 const std::function<Status(ApprovalTx&)>& body) {
  const TxMode mode = kind == ApprovalTxKind::kRead ? TxMode::kRead : TxMode::kWrite;
  return db_.Transact(mode, operation, [&](Tx&) {
    SqliteApprovalTx tx(db_);
    return body(tx);
  });
}

}  // namespace ql::sqlite
