#include "ql/storage/sqlite/sqlite_retention.h"

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ql/core/governance_store.h"
#include "ql/core/store_commands.h"
#include "ql/storage/sqlite/sqlite_db.h"
#include "ql/storage/sqlite/sqlite_governance.h"
#include "ql/storage/sqlite/sqlite_store_rows.h"

namespace ql::sqlite {
namespace {

// The (K+1)-th newest run of a task: it and everything older is beyond keep_runs.
constexpr char kBeyondKeepSql[] =
    "SELECT created_at_ms, id FROM runs WHERE task_id = ?1 "
    "ORDER BY created_at_ms DESC, id DESC LIMIT 1 OFFSET ?2";

// Purgeable runs of one task, oldest first. ?2 is the age cutoff, (?3, ?4) the newest run
// beyond keep_runs (NULL when the task has no more than keep_runs). Since a run finishes after
// it is created, the created_at bound keeps the index range short.
const std::string& CandidatesSql() {
  static const std::string* const kSql = new std::string(
      std::string("SELECT r.id FROM runs r WHERE r.task_id = ?1 AND r.status IN ") +
      kPurgeableStatusesSql +
      " AND r.created_at_ms <= max(?2, coalesce(?3, ?2))"
      " AND (r.finished_at_ms < ?2 OR (r.created_at_ms, r.id) <= (?3, ?4))"
      " AND NOT EXISTS (SELECT 1 FROM runs x WHERE x.retry_of_run_id = r.id)"
      // Approved runs stay with their approval records (requests, actions, receipts,
      // resolutions): the record of who approved what outlives retention.
      " AND r.trigger_type <> 'approved'"
      " ORDER BY r.created_at_ms, r.id LIMIT ?5");
  return *kSql;
}

constexpr char kIds[] = "(SELECT value FROM json_each(?1))";

RetentionSettings ReadSettings(const Stmt& s, int c) {
  RetentionSettings out;
  if (!s.IsNull(c)) out.keep_days = static_cast<int>(s.Int(c));
  if (!s.IsNull(c + 1)) out.keep_runs = static_cast<int>(s.Int(c + 1));
  return out;
}

class SqliteRetention final : public RetentionRepository {
 public:
  explicit SqliteRetention(Db& db) : db_(db) {}

  Result<RetentionRecord> GetRetention(const std::string& project_id,
                                       const std::string& task_id) override {
    RetentionRecord out;
    QL_RETURN_IF_ERROR(db_.Transact(TxMode::kRead, "reading retention", [&](Tx&) -> Status {
      QL_ASSIGN_OR_RETURN(out, Load(project_id, task_id));
      return Status::Ok();
    }));
    return out;
  }

  Result<RetentionRecord> SetRetention(const SetRetentionCommand& cmd) override {
    QL_RETURN_IF_ERROR(ValidateRetentionSettings(cmd.settings));
    QL_RETURN_IF_ERROR(RequireText("audit_id", cmd.audit_id));
    RetentionRecord out;
    QL_RETURN_IF_ERROR(db_.Transact(TxMode::kWrite, "setting retention", [&](Tx&) -> Status {
      std::unique_ptr<GovernanceTx> gov = NewGovernanceTx(db_);
      if (cmd.fence.has_value()) {
        QL_RETURN_IF_ERROR(CheckPolicyFence(*gov, *cmd.fence, cmd.project_id));
      }
      QL_RETURN_IF_ERROR(Load(cmd.project_id, cmd.task_id).status());
      const RetentionSettings& s = cmd.settings;
      if (cmd.task_id.empty()) {
        QL_RETURN_IF_ERROR(Execute(
            db_,
            "INSERT INTO project_retention (project_id, keep_days, keep_runs, version, "
            "updated_at_ms) VALUES (?1, ?2, ?3, 1, ?4) ON CONFLICT (project_id) DO UPDATE SET "
            "keep_days = ?2, keep_runs = ?3, version = version + 1, updated_at_ms = ?4",
            cmd.project_id, s.keep_days, s.keep_runs, cmd.now_ms));
      } else {
        QL_RETURN_IF_ERROR(Execute(
            db_,
            "INSERT INTO task_retention (task_id, project_id, keep_days, keep_runs, version, "
            "updated_at_ms) VALUES (?1, ?2, ?3, ?4, 1, ?5) ON CONFLICT (task_id) DO UPDATE SET "
            "keep_days = ?3, keep_runs = ?4, version = version + 1, updated_at_ms = ?5",
            cmd.task_id, cmd.project_id, s.keep_days, s.keep_runs, cmd.now_ms));
      }
      QL_RETURN_IF_ERROR(gov->InsertAudit(RetentionAuditFact(cmd)));
      QL_ASSIGN_OR_RETURN(out, Load(cmd.project_id, cmd.task_id));
      return Status::Ok();
    }));
    return out;
  }

  Result<std::vector<RetentionScope>> ListRetentionScopes(const std::string& after_task_id,
                                                          int limit) override {
    QL_RETURN_IF_ERROR(RequireLimit("limit", limit));
    std::vector<RetentionScope> out;
    QL_RETURN_IF_ERROR(db_.Transact(TxMode::kRead, "listing retention", [&](Tx&) -> Status {
      QL_ASSIGN_OR_RETURN(
          out, QueryAll<RetentionScope>(
                   db_,
                   "SELECT h.project_id, h.task_id, pr.keep_days, pr.keep_runs, t.keep_days, "
                   "t.keep_runs FROM task_heads h "
                   "LEFT JOIN project_retention pr ON pr.project_id = h.project_id "
                   "LEFT JOIN task_retention t ON t.task_id = h.task_id "
                   "WHERE h.task_id > ?1 ORDER BY h.task_id LIMIT ?2",
                   [](const Stmt& s) {
                     return RetentionScope{s.Text(0), s.Text(1), ReadSettings(s, 2),
                                           ReadSettings(s, 4)};
                   },
                   after_task_id, limit));
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
    QL_RETURN_IF_ERROR(db_.Transact(TxMode::kWrite, "purging runs", [&](Tx&) -> Status {
      out = PurgeResult();
      using Marker = std::pair<int64_t, std::string>;
      auto read_marker = [](const Stmt& s) { return Marker(s.Int(0), s.Text(1)); };
      QL_ASSIGN_OR_RETURN(std::optional<Marker> beyond,
                          QueryOne<Marker>(db_, kBeyondKeepSql, read_marker, sel.task_id,
                                           sel.keep_runs));
      std::optional<int64_t> beyond_created;
      std::optional<std::string> beyond_id;
      if (beyond.has_value()) {
        beyond_created = beyond->first;
        beyond_id = beyond->second;
      }
      QL_ASSIGN_OR_RETURN(out.run_ids, QueryAll<std::string>(
                                           db_, CandidatesSql(),
                                           [](const Stmt& s) { return s.Text(0); }, sel.task_id,
                                           sel.finished_before_ms, beyond_created, beyond_id,
                                           sel.limit));
      if (out.run_ids.empty()) return Status::Ok();
      const std::string ids = nlohmann::json(out.run_ids).dump();
      auto read_attempt = [](const Stmt& s) {
        return PurgedAttempt{s.Text(0), s.Text(1), s.OptText(2)};
      };
      QL_ASSIGN_OR_RETURN(
          out.attempts,
          QueryAll<PurgedAttempt>(
              db_,
              Cat({"SELECT id, run_id, log_path FROM run_attempts WHERE run_id IN ", kIds,
                   " ORDER BY run_id, attempt"}),
              read_attempt, ids));
      QL_RETURN_IF_ERROR(Execute(db_, Cat({"DELETE FROM run_events WHERE run_id IN ", kIds}), ids));
      out.events = db_.Changes();
      QL_RETURN_IF_ERROR(
          Execute(db_, Cat({"DELETE FROM run_attempts WHERE run_id IN ", kIds}), ids));
      QL_RETURN_IF_ERROR(
          Execute(db_, Cat({"DELETE FROM run_retry_policies WHERE run_id IN ", kIds}), ids));
      // Sent and dead notifications go with their runs; those still owed are delivered first.
      QL_RETURN_IF_ERROR(Execute(db_,
                                 Cat({"DELETE FROM notification_outbox WHERE run_id IN ", kIds,
                                      " AND status IN ('delivered', 'dead')"}),
                                 ids));
      QL_RETURN_IF_ERROR(Execute(db_, Cat({"DELETE FROM runs WHERE id IN ", kIds}), ids));
      if (db_.Changes() != static_cast<int64_t>(out.run_ids.size())) {
        return Internal("purge_incomplete", "a selected run was not deleted");
      }
      return NewGovernanceTx(db_)->InsertAudit(sel.audit);
    }));
    return out;
  }

 private:
  // Loads the stored settings after checking the project (and the task in it) exist.
  Result<RetentionRecord> Load(const std::string& project_id, const std::string& task_id) {
    QL_ASSIGN_OR_RETURN(std::optional<ProjectRecord> project, LoadProject(db_, project_id));
    if (!project.has_value()) {
      return NotFound("project_not_found", Cat({"project ", project_id, " does not exist"}));
    }
    RetentionRecord out;
    out.project_id = project_id;
    out.task_id = task_id;
    auto read = [&](const Stmt& s) {
      RetentionRecord r = out;
      r.settings = ReadSettings(s, 0);
      r.version = s.Int(2);
      r.updated_at_ms = s.Int(3);
      return r;
    };
    std::optional<RetentionRecord> stored;
    if (task_id.empty()) {
      QL_ASSIGN_OR_RETURN(stored, QueryOne<RetentionRecord>(
                                      db_,
                                      "SELECT keep_days, keep_runs, version, updated_at_ms "
                                      "FROM project_retention WHERE project_id = ?1",
                                      read, project_id));
    } else {
      QL_ASSIGN_OR_RETURN(std::optional<TaskHeadRecord> head, LoadTaskHead(db_, task_id));
      if (!head.has_value() || head->project_id != project_id) {
        return NotFound("task_not_found",
                        Cat({"task ", task_id, " does not exist in project ", project_id}));
      }
      QL_ASSIGN_OR_RETURN(stored, QueryOne<RetentionRecord>(
                                      db_,
                                      "SELECT keep_days, keep_runs, version, updated_at_ms "
                                      "FROM task_retention WHERE task_id = ?1",
                                      read, task_id));
    }
    return stored.value_or(out);
  }

  Db& db_;
};

}  // namespace

std::unique_ptr<RetentionRepository> NewSqliteRetention(Db& db) {
  return std::make_unique<SqliteRetention>(db);
}

}  // namespace ql::sqlite
