#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "ql/core/store_commands.h"
#include "ql/storage/sqlite/sqlite_db.h"
#include "ql/storage/sqlite/sqlite_governance.h"
#include "ql/storage/sqlite/sqlite_store.h"
#include "ql/storage/sqlite/sqlite_store_rows.h"

namespace ql {

using sqlite::Execute;
using sqlite::ExecuteCas;
using sqlite::kExecutionColumns;
using sqlite::kScheduleColumns;
using sqlite::kTaskHeadColumns;
using sqlite::kTriggerHeadColumns;
using sqlite::Db;
using sqlite::kTaskRevisionColumns;
using sqlite::kTriggerRevisionColumns;
using sqlite::LoadTaskHead;
using sqlite::LoadTaskRevision;
using sqlite::LoadTaskRevisionByMutation;
using sqlite::LoadTriggerHead;
using sqlite::LoadTriggerRevisionByMutation;
using sqlite::QueryAll;
using sqlite::QueryOne;
using sqlite::ReadExecution;
using sqlite::ReadSchedule;
using sqlite::ReadTaskRevision;
using sqlite::ReadTriggerRevision;
using sqlite::RequireActiveProject;
using sqlite::Stmt;
using sqlite::Tx;
using sqlite::TxMode;

namespace {

// Refuses `name` for the task or trigger `id` (`kind` "task" or "trigger"; an id of nothing
// yet for a new one) when another live head of that kind in the project holds it.
Status RequireFreeName(Db& db, std::string_view kind, const std::string& project_id,
                       const std::string& name, const std::string& id) {
  const std::string sql = Cat({"SELECT ", kind, "_id FROM ", kind, "_heads WHERE project_id = ? "
                               "AND name = ? AND deleted_at_ms IS NULL AND ", kind, "_id <> ?"});
  QL_ASSIGN_OR_RETURN(std::optional<std::string> holder,
                      QueryOne<std::string>(
                          db, sql, [](const Stmt& s) { return s.Text(0); }, project_id, name, id));
  if (!holder.has_value()) return Status();
  return Duplicate("name_duplicate", Cat({"a ", kind, " named ", Quote(name), " exists in project ",
                                          project_id, " (", kind, " ", *holder, ")"}));
}

// Appends `stored`, the next revision of an existing trigger head at `expected_revision`, and
// points the head (renamed when `name` is set, tombstoned when `deleted_at_ms` is) and its
// schedule row at it. The schedule keeps its cursor when `keep_cursor` (a repin changes nothing
// the cursor is computed from, so no occurrence is lost), else it restarts from this
// publication; the bumped state_version kills every decision taken on an older revision.
Status AppendTriggerRevision(Db& db, const TriggerRevisionRecord& stored,
                             int64_t expected_revision, const std::optional<std::string>& name,
                             std::optional<int64_t> deleted_at_ms, bool keep_cursor) {
  QL_RETURN_IF_ERROR(ExecuteCas(
      db, Conflict("revision_conflict", Cat({"trigger ", stored.trigger_id, " moved on"})),
      "UPDATE trigger_heads SET current_revision = ?, updated_at_ms = ?, "
      "name = coalesce(?, name), deleted_at_ms = coalesce(?, deleted_at_ms) "
      "WHERE trigger_id = ? AND current_revision = ?",
      stored.revision, stored.created_at_ms, name, deleted_at_ms, stored.trigger_id,
      expected_revision));
  QL_RETURN_IF_ERROR(
      Execute(db,
              "INSERT INTO trigger_revisions (trigger_id, revision, project_id, "
              "mutation_id, task_id, task_revision, task_digest, expression, "
              "timezone, misfire, enabled, content_digest, created_at_ms, overlap, jitter_ms) "
              "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
              stored.trigger_id, stored.revision, stored.project_id, stored.mutation_id,
              stored.task_id, stored.task_revision, stored.task_digest, stored.expression,
              stored.timezone, stored.misfire, stored.enabled, stored.content_digest,
              stored.created_at_ms, stored.overlap, stored.jitter_ms));
  return Execute(db,
                 "INSERT INTO trigger_schedules (trigger_id, project_id, "
                 "trigger_revision, next_fire_at_ms, last_scheduled_at_ms, "
                 "state_version, published_at_ms, exhausted, updated_at_ms) "
                 "VALUES (?1, ?2, ?3, NULL, NULL, 1, ?4, 0, ?4) "
                 "ON CONFLICT (trigger_id) DO UPDATE SET "
                 "trigger_revision = excluded.trigger_revision, "
                 "next_fire_at_ms = CASE WHEN ?5 THEN next_fire_at_ms END, "
                 "state_version = state_version + 1, "
                 "published_at_ms = CASE WHEN ?5 THEN published_at_ms "
                 "ELSE excluded.published_at_ms END, "
                 "exhausted = CASE WHEN ?5 THEN exhausted ELSE 0 END, "
                 "updated_at_ms = excluded.updated_at_ms",
                 stored.trigger_id, stored.project_id, stored.revision, stored.created_at_ms,
                 keep_cursor);
}

// The live triggers of `task_id` at their current revisions, by id.
Result<std::vector<TriggerRevisionRecord>> LiveTriggersOf(Db& db, const std::string& task_id) {
  static const std::string kSql =
      Cat({"SELECT ", kTriggerRevisionColumns,
           " FROM trigger_heads th JOIN trigger_revisions g ON g.trigger_id = th.trigger_id AND "
           "g.revision = th.current_revision WHERE th.task_id = ? AND th.deleted_at_ms IS NULL "
           "ORDER BY th.trigger_id"});
  return QueryAll<TriggerRevisionRecord>(
      db, kSql, [](const Stmt& s) { return ReadTriggerRevision(s); }, task_id);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Definitions

Result<PublishTaskResult> SqliteStore::PublishTaskRevision(const PublishTaskCommand& cmd) {
  QL_RETURN_IF_ERROR(ValidatePublishTask(cmd));
  const int64_t new_revision = cmd.expected_revision.value_or(0) + 1;
  const TaskRevisionRecord& content = cmd.revision;

  PublishTaskResult out;
  QL_RETURN_IF_ERROR(
      db_->Transact(TxMode::kWrite, "publishing a task revision", [&](Tx&) -> Status {
        QL_RETURN_IF_ERROR(Fence(cmd.fence, cmd.project_id));
        QL_ASSIGN_OR_RETURN(std::optional<TaskRevisionRecord> replay,
                            LoadTaskRevisionByMutation(*db_, cmd.mutation_id));
        if (replay.has_value()) {
          if (replay->task_id == cmd.task_id && replay->project_id == cmd.project_id &&
              replay->revision == new_revision &&
              replay->content_digest == content.content_digest) {
            out = PublishTaskResult{std::move(*replay), true};
            return Status();
          }
          return Conflict("mutation_id_reused",
                          Cat({"mutation id ", Quote(cmd.mutation_id), " was applied to task ",
                               replay->task_id, " revision ", std::to_string(replay->revision),
                               " with other content or another expected revision"}));
        }
        QL_ASSIGN_OR_RETURN(std::optional<TriggerRevisionRecord> other,
                            LoadTriggerRevisionByMutation(*db_, cmd.mutation_id));
        if (other.has_value()) {
          return Conflict("mutation_id_reused",
                          Cat({"mutation id ", Quote(cmd.mutation_id), " was applied to trigger ",
                               other->trigger_id}));
        }
        QL_RETURN_IF_ERROR(RequireActiveProject(*db_, cmd.project_id));
        QL_ASSIGN_OR_RETURN(std::optional<TaskHeadRecord> head, LoadTaskHead(*db_, cmd.task_id));
        if (!cmd.expected_revision.has_value()) {
          if (head.has_value()) {
            return Duplicate("duplicate_id",
                             Cat({"task ", cmd.task_id,
                                  " exists already; update it with its expected revision"}));
          }
          QL_RETURN_IF_ERROR(RequireFreeName(*db_, "task", cmd.project_id, content.name, ""));
          QL_RETURN_IF_ERROR(
              Execute(*db_,
                      "INSERT INTO task_heads (task_id, project_id, current_revision, "
                      "created_at_ms, updated_at_ms, name) VALUES (?, ?, 1, ?, ?, ?)",
                      cmd.task_id, cmd.project_id, cmd.now_ms, cmd.now_ms, content.name));
        } else {
          if (!head.has_value() || head->project_id != cmd.project_id) {
            return NotFound("task_not_found", Cat({"task ", cmd.task_id,
                                                   " does not exist in project ", cmd.project_id}));
          }
          const Status stale = Conflict(
              "revision_conflict",
              Cat({"task ", cmd.task_id, " is at revision ", std::to_string(head->current_revision),
                   ", not the expected ", std::to_string(*cmd.expected_revision)}));
          if (head->deleted_at_ms.has_value()) {
            return Conflict("task_deleted", Cat({"task ", cmd.task_id, " was deleted"}));
          }
          if (head->current_revision != *cmd.expected_revision) return stale;
          // A deleted task keeps its last name in the row, but no longer holds it.
          if (!cmd.tombstone) {
            QL_RETURN_IF_ERROR(
                RequireFreeName(*db_, "task", cmd.project_id, content.name, cmd.task_id));
          }
          QL_RETURN_IF_ERROR(ExecuteCas(
              *db_, stale,
              "UPDATE task_heads SET current_revision = ?, updated_at_ms = ?, name = ?, "
              "deleted_at_ms = ? WHERE task_id = ? AND current_revision = ?",
              new_revision, cmd.now_ms, content.name,
              cmd.tombstone ? std::optional<int64_t>(cmd.now_ms) : std::nullopt, cmd.task_id,
              *cmd.expected_revision));
        }
        TaskRevisionRecord stored = content;
        stored.project_id = cmd.project_id;
        stored.task_id = cmd.task_id;
        stored.revision = new_revision;
        stored.mutation_id = cmd.mutation_id;
        stored.created_at_ms = cmd.now_ms;
        QL_RETURN_IF_ERROR(Execute(*db_,
                                   "INSERT INTO task_revisions (task_id, revision, project_id, "
                                   "mutation_id, name, kind, spec_json, labels_json, enabled, "
                                   "content_digest, created_at_ms, approval_json, concurrency, "
                                   "published_by) "
                                   "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                                   stored.task_id, stored.revision, stored.project_id,
                                   stored.mutation_id, stored.name, stored.kind, stored.spec_json,
                                   stored.labels_json, stored.enabled, stored.content_digest,
                                   stored.created_at_ms, stored.approval_json,
                                   stored.concurrency, stored.published_by));
        if (cmd.audit.has_value()) {
          QL_RETURN_IF_ERROR(NewGovernanceTx(*db_)->InsertAudit(*cmd.audit));
        }
        for (const ExecutionRevisionRecord& exec : cmd.executions) {
          QL_RETURN_IF_ERROR(
              Execute(*db_,
                      "INSERT INTO execution_revisions (id, project_id, task_id, "
                      "task_revision, task_digest, executor_type, plan_json, "
                      "plan_digest, created_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                      exec.id, cmd.project_id, cmd.task_id, new_revision, exec.task_digest,
                      exec.executor_type, exec.plan_json, exec.plan_digest, cmd.now_ms));
        }
        std::vector<std::string> trigger_ids;
        if (cmd.repin_triggers || cmd.tombstone) {
          QL_ASSIGN_OR_RETURN(std::vector<TriggerRevisionRecord> triggers,
                              LiveTriggersOf(*db_, cmd.task_id));
          for (const TriggerRevisionRecord& trigger : triggers) {
            const std::optional<TriggerRevisionRecord> next =
                TriggerRevisionForTaskPublish(cmd, stored, trigger);
            if (!next.has_value()) continue;
            QL_RETURN_IF_ERROR(AppendTriggerRevision(
                *db_, *next, trigger.revision, std::nullopt,
                cmd.tombstone ? std::optional<int64_t>(cmd.now_ms) : std::nullopt,
                /*keep_cursor=*/!cmd.tombstone));
            trigger_ids.push_back(trigger.trigger_id);
          }
        }
        out = PublishTaskResult{std::move(stored), false, std::move(trigger_ids)};
        return Status();
      }));
  return out;
}

Result<PublishTriggerResult> SqliteStore::PublishTriggerRevision(const PublishTriggerCommand& cmd) {
  QL_RETURN_IF_ERROR(ValidatePublishTrigger(cmd));
  const TriggerRevisionRecord& content = cmd.revision;
  const int64_t new_revision = cmd.expected_revision.value_or(0) + 1;

  PublishTriggerResult out;
  QL_RETURN_IF_ERROR(
      db_->Transact(TxMode::kWrite, "publishing a trigger revision", [&](Tx&) -> Status {
        QL_RETURN_IF_ERROR(Fence(cmd.fence, cmd.project_id));
        QL_ASSIGN_OR_RETURN(std::optional<TriggerRevisionRecord> replay,
                            LoadTriggerRevisionByMutation(*db_, cmd.mutation_id));
        if (replay.has_value()) {
          if (replay->trigger_id == cmd.trigger_id && replay->project_id == cmd.project_id &&
              replay->revision == new_revision &&
              replay->content_digest == content.content_digest) {
            out = PublishTriggerResult{std::move(*replay), true};
            return Status();
          }
          return Conflict("mutation_id_reused",
                          Cat({"mutation id ", Quote(cmd.mutation_id), " was applied to trigger ",
                               replay->trigger_id, " revision ", std::to_string(replay->revision),
                               " with other content or another expected revision"}));
        }
        QL_ASSIGN_OR_RETURN(std::optional<TaskRevisionRecord> other,
                            LoadTaskRevisionByMutation(*db_, cmd.mutation_id));
        if (other.has_value()) {
          return Conflict("mutation_id_reused", Cat({"mutation id ", Quote(cmd.mutation_id),
                                                     " was applied to task ", other->task_id}));
        }
        QL_RETURN_IF_ERROR(RequireActiveProject(*db_, cmd.project_id));
        QL_ASSIGN_OR_RETURN(std::optional<TaskHeadRecord> task,
                            LoadTaskHead(*db_, content.task_id));
        if (!task.has_value() || task->project_id != cmd.project_id) {
          return NotFound("task_not_found", Cat({"task ", content.task_id,
                                                 " does not exist in project ", cmd.project_id}));
        }
        QL_ASSIGN_OR_RETURN(std::optional<TriggerHeadRecord> head,
                            LoadTriggerHead(*db_, cmd.trigger_id));
        if (head.has_value() && head->deleted_at_ms.has_value()) {
          return Conflict("trigger_deleted", Cat({"trigger ", cmd.trigger_id, " was deleted"}));
        }
        if (task->deleted_at_ms.has_value()) {
          return Conflict("task_deleted", Cat({"task ", content.task_id, " was deleted"}));
        }
        if (!cmd.expected_revision.has_value()) {
          if (head.has_value()) {
            return Duplicate("duplicate_id",
                             Cat({"trigger ", cmd.trigger_id,
                                  " exists already; update it with its expected revision"}));
          }
        } else {
          if (!head.has_value() || head->project_id != cmd.project_id) {
            return NotFound(
                "trigger_not_found",
                Cat({"trigger ", cmd.trigger_id, " does not exist in project ", cmd.project_id}));
          }
          if (head->task_id != content.task_id) {
            return Conflict("trigger_task_immutable",
                            Cat({"trigger ", cmd.trigger_id, " belongs to task ", head->task_id,
                                 " and cannot be rebound to task ", content.task_id}));
          }
          if (head->current_revision != *cmd.expected_revision) {
            return Conflict("revision_conflict",
                            Cat({"trigger ", cmd.trigger_id, " is at revision ",
                                 std::to_string(head->current_revision), ", not the expected ",
                                 std::to_string(*cmd.expected_revision)}));
          }
        }
        QL_ASSIGN_OR_RETURN(std::optional<TaskRevisionRecord> pinned,
                            LoadTaskRevision(*db_, content.task_id, content.task_revision));
        if (!pinned.has_value() || pinned->content_digest != content.task_digest) {
          return Conflict("trigger_pin_stale",
                          Cat({"trigger pins task ", content.task_id, " revision ",
                               std::to_string(content.task_revision), " with digest ",
                               content.task_digest, ", which that task does not have"}));
        }
        if (content.enabled && (pinned->revision != task->current_revision || !pinned->enabled)) {
          return Conflict(
              "trigger_pin_stale",
              Cat({"an enabled trigger must pin the current enabled revision of task ",
                   content.task_id, " (revision ", std::to_string(task->current_revision),
                   "), not revision ", std::to_string(content.task_revision),
                   pinned->enabled ? "" : ", which is disabled"}));
        }

        TriggerRevisionRecord stored = content;
        stored.project_id = cmd.project_id;
        stored.trigger_id = cmd.trigger_id;
        stored.revision = new_revision;
        stored.mutation_id = cmd.mutation_id;
        stored.created_at_ms = cmd.now_ms;
        const std::optional<std::string> rename =
            cmd.name.empty() ? std::nullopt : std::optional<std::string>(cmd.name);
        if (rename.has_value() && !cmd.tombstone) {
          QL_RETURN_IF_ERROR(
              RequireFreeName(*db_, "trigger", cmd.project_id, cmd.name, cmd.trigger_id));
        }
        if (!head.has_value()) {
          // Inserted at revision 1; AppendTriggerRevision below finds it there.
          QL_RETURN_IF_ERROR(Execute(*db_,
                                     "INSERT INTO trigger_heads (trigger_id, project_id, task_id, "
                                     "current_revision, created_at_ms, updated_at_ms, name) "
                                     "VALUES (?, ?, ?, 1, ?, ?, ?)",
                                     cmd.trigger_id, cmd.project_id, content.task_id, cmd.now_ms,
                                     cmd.now_ms, cmd.name));
        }
        // The schedule row follows the new revision from scratch: the cursor is recomputed from
        // this publication and the bumped state_version kills every decision taken before.
        QL_RETURN_IF_ERROR(AppendTriggerRevision(
            *db_, stored, head.has_value() ? *cmd.expected_revision : 1, rename,
            cmd.tombstone ? std::optional<int64_t>(cmd.now_ms) : std::nullopt,
            /*keep_cursor=*/false));
        if (cmd.audit.has_value()) {
          QL_RETURN_IF_ERROR(NewGovernanceTx(*db_)->InsertAudit(*cmd.audit));
        }
        out = PublishTriggerResult{std::move(stored), false};
        return Status();
      }));
  return out;
}

Result<TaskHeadRecord> SqliteStore::GetTaskHead(const std::string& task_id) {
  std::optional<TaskHeadRecord> out;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kRead, "reading a task", [&](Tx&) -> Status {
    QL_ASSIGN_OR_RETURN(out, LoadTaskHead(*db_, task_id));
    return Status();
  }));
  if (!out.has_value())
    return NotFound("task_not_found", Cat({"task ", task_id, " does not exist"}));
  return std::move(*out);
}

Result<std::optional<TaskHeadRecord>> SqliteStore::FindTaskByName(const std::string& project_id,
                                                                  const std::string& name) {
  std::optional<TaskHeadRecord> out;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kRead, "finding a task by name", [&](Tx&) -> Status {
    static const std::string kSql =
        Cat({"SELECT ", kTaskHeadColumns,
             " FROM task_heads h WHERE h.project_id = ? AND h.name = ? AND "
             "h.deleted_at_ms IS NULL"});
    QL_ASSIGN_OR_RETURN(out, QueryOne<TaskHeadRecord>(*db_, kSql, sqlite::ReadTaskHead,
                                                      project_id, name));
    return Status();
  }));
  return out;
}

Result<std::optional<TriggerHeadRecord>> SqliteStore::FindTriggerByName(
    const std::string& project_id, const std::string& name) {
  std::optional<TriggerHeadRecord> out;
  QL_RETURN_IF_ERROR(
      db_->Transact(TxMode::kRead, "finding a trigger by name", [&](Tx&) -> Status {
        static const std::string kSql =
            Cat({"SELECT ", kTriggerHeadColumns,
                 " FROM trigger_heads th WHERE th.project_id = ? AND th.name = ? AND "
                 "th.deleted_at_ms IS NULL"});
        QL_ASSIGN_OR_RETURN(out, QueryOne<TriggerHeadRecord>(*db_, kSql, sqlite::ReadTriggerHead,
                                                             project_id, name));
        return Status();
      }));
  return out;
}

Result<TaskRevisionRecord> SqliteStore::GetTaskRevision(const std::string& task_id,
                                                        int64_t revision) {
  std::optional<TaskRevisionRecord> out;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kRead, "reading a task revision", [&](Tx&) -> Status {
    QL_ASSIGN_OR_RETURN(out, LoadTaskRevision(*db_, task_id, revision));
    return Status();
  }));
  if (!out.has_value()) {
    return NotFound("task_revision_not_found",
                    Cat({"task ", task_id, " has no revision ", std::to_string(revision)}));
  }
  return std::move(*out);
}

Result<Page<TaskRevisionRecord>> SqliteStore::ListTasks(const std::string& project_id,
                                                        const PageRequest& page) {
  QL_RETURN_IF_ERROR(RequireLimit("page limit", page.limit));
  std::optional<std::string> after;
  if (page.after_key.has_value()) {
    QL_ASSIGN_OR_RETURN(after, DecodeIdKey("tasks", *page.after_key));
  }
  Page<TaskRevisionRecord> out;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kRead, "listing tasks", [&](Tx&) -> Status {
    static const std::string kSql =
        Cat({"SELECT ", kTaskRevisionColumns,
             " FROM task_heads h JOIN task_revisions tr ON tr.task_id = h.task_id AND "
             "tr.revision = h.current_revision WHERE h.project_id = ?1 AND "
             "h.deleted_at_ms IS NULL AND (?2 IS NULL OR h.task_id > ?2) ORDER BY h.task_id "
             "LIMIT ?3"});
    QL_ASSIGN_OR_RETURN(out.items, QueryAll<TaskRevisionRecord>(*db_, kSql, ReadTaskRevision,
                                                                project_id, after, page.limit + 1));
    return Status();
  }));
  if (out.items.size() > static_cast<size_t>(page.limit)) {
    out.items.resize(page.limit);
    out.next_key = EncodeIdKey("tasks", out.items.back().task_id);
  }
  return out;
}

Result<std::vector<TaskRevisionRecord>> SqliteStore::ListTaskRevisions(const std::string& task_id) {
  std::vector<TaskRevisionRecord> out;
  bool exists = false;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kRead, "listing task revisions", [&](Tx&) -> Status {
    QL_ASSIGN_OR_RETURN(std::optional<TaskHeadRecord> head, LoadTaskHead(*db_, task_id));
    exists = head.has_value();
    static const std::string kSql = Cat({"SELECT ", kTaskRevisionColumns,
                                         " FROM task_revisions tr WHERE tr.task_id = ? "
                                         "ORDER BY tr.revision DESC"});
    QL_ASSIGN_OR_RETURN(out, QueryAll<TaskRevisionRecord>(*db_, kSql, ReadTaskRevision, task_id));
    return Status();
  }));
  if (!exists) return NotFound("task_not_found", Cat({"task ", task_id, " does not exist"}));
  return out;
}

Result<ExecutionRevisionRecord> SqliteStore::GetExecutionRevision(const std::string& id) {
  std::optional<ExecutionRevisionRecord> out;
  QL_RETURN_IF_ERROR(
      db_->Transact(TxMode::kRead, "reading an execution revision", [&](Tx&) -> Status {
        static const std::string kSql =
            Cat({"SELECT ", kExecutionColumns, " FROM execution_revisions e WHERE e.id = ?"});
        QL_ASSIGN_OR_RETURN(out, QueryOne<ExecutionRevisionRecord>(*db_, kSql, ReadExecution, id));
        return Status();
      }));
  if (!out.has_value()) {
    return NotFound("execution_revision_not_found",
                    Cat({"execution revision ", Quote(id), " does not exist"}));
  }
  return std::move(*out);
}

Result<ExecutionRevisionRecord> SqliteStore::FindExecutionRevision(
    const std::string& task_id, int64_t task_revision, const std::string& executor_type) {
  std::optional<ExecutionRevisionRecord> out;
  QL_RETURN_IF_ERROR(
      db_->Transact(TxMode::kRead, "reading an execution revision", [&](Tx&) -> Status {
        static const std::string kSql =
            Cat({"SELECT ", kExecutionColumns,
                 " FROM execution_revisions e WHERE e.task_id = ? AND e.task_revision = ? AND "
                 "e.executor_type = ?"});
        QL_ASSIGN_OR_RETURN(out,
                            QueryOne<ExecutionRevisionRecord>(*db_, kSql, ReadExecution, task_id,
                                                              task_revision, executor_type));
        return Status();
      }));
  if (!out.has_value()) {
    return NotFound("execution_revision_not_found",
                    Cat({"task ", task_id, " revision ", std::to_string(task_revision),
                         " has no execution revision for executor ", Quote(executor_type)}));
  }
  return std::move(*out);
}

Result<TriggerHeadRecord> SqliteStore::GetTriggerHead(const std::string& trigger_id) {
  std::optional<TriggerHeadRecord> out;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kRead, "reading a trigger", [&](Tx&) -> Status {
    QL_ASSIGN_OR_RETURN(out, LoadTriggerHead(*db_, trigger_id));
    return Status();
  }));
  if (!out.has_value()) {
    return NotFound("trigger_not_found", Cat({"trigger ", trigger_id, " does not exist"}));
  }
  return std::move(*out);
}

Result<TriggerRevisionRecord> SqliteStore::GetTriggerRevision(const std::string& trigger_id,
                                                              int64_t revision) {
  std::optional<TriggerRevisionRecord> out;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kRead, "reading a trigger revision", [&](Tx&) -> Status {
    static const std::string kSql =
        Cat({"SELECT ", kTriggerRevisionColumns,
             " FROM trigger_revisions g WHERE g.trigger_id = ? AND g.revision = ?"});
    QL_ASSIGN_OR_RETURN(out, QueryOne<TriggerRevisionRecord>(
                                 *db_, kSql, [](const Stmt& s) { return ReadTriggerRevision(s); },
                                 trigger_id, revision));
    return Status();
  }));
  if (!out.has_value()) {
    return NotFound("trigger_revision_not_found",
                    Cat({"trigger ", trigger_id, " has no revision ", std::to_string(revision)}));
  }
  return std::move(*out);
}

Result<Page<TriggerRevisionRecord>> SqliteStore::ListTriggers(
    const std::string& project_id, const std::optional<std::string>& task_id,
    const PageRequest& page) {
  QL_RETURN_IF_ERROR(RequireLimit("page limit", page.limit));
  std::optional<std::string> after;
  if (page.after_key.has_value()) {
    QL_ASSIGN_OR_RETURN(after, DecodeIdKey("triggers", *page.after_key));
  }
  Page<TriggerRevisionRecord> out;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kRead, "listing triggers", [&](Tx&) -> Status {
    static const std::string kSql =
        Cat({"SELECT ", kTriggerRevisionColumns,
             " FROM trigger_heads th JOIN trigger_revisions g ON g.trigger_id = th.trigger_id AND "
             "g.revision = th.current_revision WHERE th.project_id = ?1 AND "
             "th.deleted_at_ms IS NULL AND (?2 IS NULL OR th.task_id = ?2) AND "
             "(?3 IS NULL OR th.trigger_id > ?3) ORDER BY th.trigger_id LIMIT ?4"});
    QL_ASSIGN_OR_RETURN(
        out.items, QueryAll<TriggerRevisionRecord>(
                       *db_, kSql, [](const Stmt& s) { return ReadTriggerRevision(s); }, project_id,
                       task_id, after, page.limit + 1));
    return Status();
  }));
  if (out.items.size() > static_cast<size_t>(page.limit)) {
    out.items.resize(page.limit);
    out.next_key = EncodeIdKey("triggers", out.items.back().trigger_id);
  }
  return out;
}

Result<ScheduleRecord> SqliteStore::GetSchedule(const std::string& trigger_id) {
  std::optional<ScheduleRecord> out;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kRead, "reading a schedule", [&](Tx&) -> Status {
    static const std::string kSql =
        Cat({"SELECT ", kScheduleColumns, " FROM trigger_schedules s WHERE s.trigger_id = ?"});
    QL_ASSIGN_OR_RETURN(out,
                        QueryOne<ScheduleRecord>(
                            *db_, kSql, [](const Stmt& s) { return ReadSchedule(s); }, trigger_id));
    return Status();
  }));
  if (!out.has_value()) {
    return NotFound("schedule_not_found", Cat({"trigger ", trigger_id, " has no schedule"}));
  }
  return std::move(*out);
}

Result<int64_t> SqliteStore::CountEnabledTriggers(const std::optional<std::string>& project_id) {
  int64_t out = 0;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kRead, "counting triggers", [&](Tx&) -> Status {
    QL_ASSIGN_OR_RETURN(
        std::optional<int64_t> count,
        QueryOne<int64_t>(*db_,
                          "SELECT count(*) FROM trigger_heads th JOIN trigger_revisions g ON "
                          "g.trigger_id = th.trigger_id AND g.revision = th.current_revision "
                          "JOIN projects p ON p.id = th.project_id "
                          "WHERE g.enabled = 1 AND p.status = 'active' AND "
                          "(?1 IS NULL OR th.project_id = ?1)",
                          [](const Stmt& s) { return s.Int(0); }, project_id));
    out = count.value_or(0);
    return Status();
  }));
  return out;
}

Result<int64_t> SqliteStore::CountStaleTriggers(const std::optional<std::string>& project_id) {
  int64_t out = 0;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kRead, "counting stale triggers", [&](Tx&) -> Status {
    QL_ASSIGN_OR_RETURN(
        std::optional<int64_t> count,
        QueryOne<int64_t>(*db_,
                          "SELECT count(*) FROM trigger_heads th JOIN trigger_revisions g ON "
                          "g.trigger_id = th.trigger_id AND g.revision = th.current_revision "
                          "JOIN projects p ON p.id = th.project_id "
                          "JOIN task_heads h ON h.task_id = g.task_id "
                          "JOIN task_revisions tr ON tr.task_id = h.task_id AND "
                          "tr.revision = h.current_revision "
                          "WHERE g.enabled = 1 AND p.status = 'active' AND "
                          "(g.task_revision <> h.current_revision OR tr.enabled = 0 OR "
                          "tr.content_digest <> g.task_digest) AND "
                          "(?1 IS NULL OR th.project_id = ?1)",
                          [](const Stmt& s) { return s.Int(0); }, project_id));
    out = count.value_or(0);
    return Status();
  }));
  return out;
}

}  // namespace ql
