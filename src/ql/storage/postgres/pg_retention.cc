#include "ql/storage/postgres/pg_retention.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ql/core/governance_store.h"
#include "ql/core/store_commands.h"
#include "ql/storage/postgres/pg_governance.h"
#include "ql/storage/postgres/pg_run_rows.h"
#include "ql/storage/postgres/pg_store_rows.h"

namespace ql::pg {
namespace {

const TxOptions kReadOnly{Isolation::kReadCommitted, /*read_only=*/true};
const TxOptions kReadWrite{Isolation::kReadCommitted, /*read_only=*/false};

// The (K+1)-th newest run of a task: it and everything older is beyond keep_runs.
constexpr char kBeyondKeepSql[] =
    "SELECT created_at_ms, id FROM runs WHERE task_id = $1 "
    "ORDER BY created_at_ms DESC, id DESC OFFSET $2 LIMIT 1";

// Purgeable runs of one task, oldest first, locked for the purge; rows another purge (or a
// writer) holds are skipped. $2 is the age cutoff, ($3, $4) the newest run beyond keep_runs
// (NULL when the task has no more than keep_runs). Since a run finishes after it is created,
// the created_at bound keeps the index range short.
const std::string& CandidatesSql() {
  static const std::string* const kSql = new std::string(
      std::string("SELECT r.id FROM runs r WHERE r.task_id = $1 AND r.status IN ") +
      kPurgeableStatusesSql +
      " AND r.created_at_ms <= greatest($2::bigint, coalesce($3::bigint, $2::bigint))"
      " AND (r.finished_at_ms < $2::bigint OR (r.created_at_ms, r.id) <= ($3::bigint, $4::text))"
      " AND NOT EXISTS (SELECT 1 FROM runs x WHERE x.retry_of_run_id = r.id)"
      // Approved runs stay with their approval records (requests, actions, receipts,
      // resolutions): the record of who approved what outlives retention.
      " AND r.trigger_type <> 'approved'"
      " ORDER BY r.created_at_ms, r.id LIMIT $5 FOR UPDATE OF r SKIP LOCKED");
  return *kSql;
}

constexpr char kSettingsColumns[] = "keep_days, keep_runs, version, updated_at_ms";

RetentionSettings ReadSettings(const Rows& r, int i, int c) {
  RetentionSettings out;
  if (std::optional<int64_t> v = r.OptInt(i, c); v.has_value()) out.keep_days = static_cast<int>(*v);
  if (std::optional<int64_t> v = r.OptInt(i, c + 1); v.has_value()) {
    out.keep_runs = static_cast<int>(*v);
  }
  return out;
}

Param PIds(const std::vector<std::string>& ids) {
  return PArray(std::vector<std::optional<std::string>>(ids.begin(), ids.end()));
}

class PgRetention final : public RetentionRepository {
 public:
  PgRetention(Pool& runtime, Pool* admin) : runtime_(runtime), admin_(admin) {}

  Result<RetentionRecord> GetRetention(const std::string& project_id,
                                       const std::string& task_id) override {
    RetentionRecord out;
    QL_RETURN_IF_ERROR(runtime_.Transact(kReadOnly, "reading retention", [&](Tx& tx) -> Status {
      QL_ASSIGN_OR_RETURN(out, Load(tx, project_id, task_id));
      return Status::Ok();
    }));
    return out;
  }

  Result<RetentionRecord> SetRetention(const SetRetentionCommand& cmd) override {
    QL_RETURN_IF_ERROR(ValidateRetentionSettings(cmd.settings));
    QL_RETURN_IF_ERROR(RequireText("audit_id", cmd.audit_id));
    if (admin_ == nullptr) {
      return Unavailable("admin_pool_missing",
                         "setting retention needs the admin database URL (--admin-database-url)");
    }
    RetentionRecord out;
    QL_RETURN_IF_ERROR(admin_->Transact(kReadWrite, "setting retention", [&](Tx& tx) -> Status {
      std::unique_ptr<GovernanceTx> gov = NewGovernanceTx(tx);
      if (cmd.fence.has_value()) {
        QL_RETURN_IF_ERROR(CheckPolicyFence(*gov, *cmd.fence, cmd.project_id));
      }
      QL_RETURN_IF_ERROR(Load(tx, cmd.project_id, cmd.task_id).status());
      const RetentionSettings& s = cmd.settings;
      if (cmd.task_id.empty()) {
        QL_RETURN_IF_ERROR(Execute(
            tx,
            "INSERT INTO project_retention (project_id, keep_days, keep_runs, version, "
            "updated_at_ms) VALUES ($1, $2, $3, 1, $4) ON CONFLICT (project_id) DO UPDATE SET "
            "keep_days = $2, keep_runs = $3, version = project_retention.version + 1, "
            "updated_at_ms = $4",
            {P(cmd.project_id), P(s.keep_days), P(s.keep_runs), P(cmd.now_ms)}));
      } else {
        QL_RETURN_IF_ERROR(Execute(
            tx,
            "INSERT INTO task_retention (task_id, project_id, keep_days, keep_runs, version, "
            "updated_at_ms) VALUES ($1, $2, $3, $4, 1, $5) ON CONFLICT (task_id) DO UPDATE SET "
            "keep_days = $3, keep_runs = $4, version = task_retention.version + 1, "
            "updated_at_ms = $5",
            {P(cmd.task_id), P(cmd.project_id), P(s.keep_days), P(s.keep_runs), P(cmd.now_ms)}));
      }
      QL_RETURN_IF_ERROR(gov->InsertAudit(RetentionAuditFact(cmd)));
      QL_ASSIGN_OR_RETURN(out, Load(tx, cmd.project_id, cmd.task_id));
      return Status::Ok();
    }));
    return out;
  }

  Result<std::vector<RetentionScope>> ListRetentionScopes(const std::string& after_task_id,
                                                          int limit) override {
    QL_RETURN_IF_ERROR(RequireLimit("limit", limit));
    std::vector<RetentionScope> out;
    QL_RETURN_IF_ERROR(runtime_.Transact(kReadOnly, "listing retention", [&](Tx& tx) -> Status {
      QL_ASSIGN_OR_RETURN(
          out, QueryAll<RetentionScope>(
                   tx,
                   "SELECT h.project_id, h.task_id, pr.keep_days, pr.keep_runs, t.keep_days, "
                   "t.keep_runs FROM task_heads h "
                   "LEFT JOIN project_retention pr ON pr.project_id = h.project_id "
                   "LEFT JOIN task_retention t ON t.task_id = h.task_id "
                   "WHERE h.task_id > $1 ORDER BY h.task_id LIMIT $2",
                   {P(after_task_id), P(limit)}, [](const Rows& r, int i) {
                     return RetentionScope{r.Text(i, 0), r.Text(i, 1), ReadSettings(r, i, 2),
                                           ReadSettings(r, i, 4)};
                   }));
      return Status::Ok();
    }));
    return out;
  }

  Result<PurgeResult> PurgeRuns(const PurgeSelection& sel) override {
    if (sel.limit < 1 || sel.limit > kMaxPurgeBatch) {
      return InvalidArgument("invalid_limit", Cat({"purge limit must be 1..",
                                                   std::to_string(kMaxPurgeBatch)}));
    }
    PurgeResult out;
    QL_RETURN_IF_ERROR(runtime_.Transact(kReadWrite, "purging runs", [&](Tx& tx) -> Status {
      out = PurgeResult();
      using Marker = std::pair<int64_t, std::string>;
      auto read_marker = [](const Rows& r, int i) { return Marker(r.Int(i, 0), r.Text(i, 1)); };
      QL_ASSIGN_OR_RETURN(
          std::optional<Marker> beyond,
          QueryOne<Marker>(tx, kBeyondKeepSql, {P(sel.task_id), P(sel.keep_runs)}, read_marker));
      std::optional<int64_t> beyond_created;
      std::optional<std::string> beyond_id;
      if (beyond.has_value()) {
        beyond_created = beyond->first;
        beyond_id = beyond->second;
      }
      QL_ASSIGN_OR_RETURN(out.run_ids,
                          QueryAll<std::string>(tx, CandidatesSql(),
                                                {P(sel.task_id), P(sel.finished_before_ms),
                                                 P(beyond_created), P(beyond_id), P(sel.limit)},
                                                [](const Rows& r, int i) { return r.Text(i, 0); }));
      if (out.run_ids.empty()) return Status::Ok();
      const Param runs = PIds(out.run_ids);
      auto read_attempt = [](const Rows& r, int i) {
        return PurgedAttempt{r.Text(i, 0), r.Text(i, 1), r.OptText(i, 2)};
      };
      QL_ASSIGN_OR_RETURN(out.attempts,
                          QueryAll<PurgedAttempt>(tx,
                                                  "SELECT id, run_id, log_path FROM run_attempts "
                                                  "WHERE run_id = ANY($1::text[]) "
                                                  "ORDER BY run_id, attempt",
                                                  {runs}, read_attempt));
      std::vector<std::string> attempt_ids;
      for (const PurgedAttempt& a : out.attempts) attempt_ids.push_back(a.id);
      const Param attempts = PIds(attempt_ids);
      QL_ASSIGN_OR_RETURN(
          Rows chunks,
          tx.Exec("DELETE FROM run_log_chunks WHERE attempt_id = ANY($1::text[])", {attempts}));
      out.log_chunks = chunks.affected();
      QL_RETURN_IF_ERROR(Execute(
          tx, "DELETE FROM run_dispatch_leases WHERE attempt_id = ANY($1::text[])", {attempts}));
      QL_ASSIGN_OR_RETURN(const int64_t derived, CountDerivedAdmissionEvents(tx, runs));
      QL_ASSIGN_OR_RETURN(Rows events,
                          tx.Exec("DELETE FROM run_events WHERE run_id = ANY($1::text[])", {runs}));
      out.events = events.affected() + derived;
      QL_RETURN_IF_ERROR(
          Execute(tx, "DELETE FROM run_attempts WHERE run_id = ANY($1::text[])", {runs}));
      // Sent and dead notifications go with their runs; those still owed are delivered first.
      QL_RETURN_IF_ERROR(Execute(tx,
                                 "DELETE FROM ql3.notification_outbox WHERE run_id = "
                                 "ANY($1::text[]) AND status IN ('delivered', 'dead')",
                                 {runs}));
      QL_ASSIGN_OR_RETURN(Rows deleted, tx.Exec("DELETE FROM runs WHERE id = ANY($1::text[])",
                                                {runs}));
      if (deleted.affected() != static_cast<int64_t>(out.run_ids.size())) {
        return Internal("purge_incomplete", "a selected run was not deleted");
      }
      return NewGovernanceTx(tx)->InsertAudit(sel.audit);
    }));
    return out;
  }

 private:
  // Loads the stored settings after checking the project (and the task in it) exist.
  Result<RetentionRecord> Load(Tx& tx, const std::string& project_id,
                               const std::string& task_id) {
    QL_ASSIGN_OR_RETURN(std::optional<ProjectRecord> project, LoadProject(tx, project_id));
    if (!project.has_value()) {
      return NotFound("project_not_found", Cat({"project ", project_id, " does not exist"}));
    }
    RetentionRecord out;
    out.project_id = project_id;
    out.task_id = task_id;
    auto read = [&](const Rows& r, int i) {
      RetentionRecord record = out;
      record.settings = ReadSettings(r, i, 0);
      record.version = r.Int(i, 2);
      record.updated_at_ms = r.Int(i, 3);
      return record;
    };
    std::optional<RetentionRecord> stored;
    if (task_id.empty()) {
      QL_ASSIGN_OR_RETURN(
          stored, QueryOne<RetentionRecord>(tx,
                                            Cat({"SELECT ", kSettingsColumns,
                                                 " FROM project_retention WHERE project_id = $1"}),
                                            {P(project_id)}, read));
    } else {
      QL_ASSIGN_OR_RETURN(std::optional<TaskHeadRecord> head, LoadTaskHead(tx, task_id));
      if (!head.has_value() || head->project_id != project_id) {
        return NotFound("task_not_found",
                        Cat({"task ", task_id, " does not exist in project ", project_id}));
      }
      QL_ASSIGN_OR_RETURN(
          stored, QueryOne<RetentionRecord>(
                      tx, Cat({"SELECT ", kSettingsColumns, " FROM task_retention WHERE task_id = $1"}),
                      {P(task_id)}, read));
    }
    return stored.value_or(out);
  }

  Pool& runtime_;
  Pool* admin_;
};

}  // namespace

std::unique_ptr<RetentionRepository> NewPgRetention(Pool& runtime, Pool* admin) {
  return std::make_unique<PgRetention>(runtime, admin);
}

}  // namespace ql::pg
