#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "ql/core/governance_store.h"
#include "ql/core/store_commands.h"
#include "ql/storage/postgres/pg_store.h"
#include "ql/storage/postgres/pg_store_rows.h"

namespace ql {

using pg::Execute;
using pg::ExecuteCas;
using pg::kExecutionColumns;
using pg::kScheduleColumns;
using pg::kTaskRevisionColumns;
using pg::kTriggerRevisionColumns;
using pg::LoadProject;
using pg::LoadTaskHead;
using pg::LoadTaskRevision;
using pg::LoadTaskRevisionByMutation;
using pg::LoadTriggerHead;
using pg::LoadTriggerRevisionByMutation;
using pg::Lock;
using pg::P;
using pg::Params;
using pg::QueryAll;
using pg::QueryOne;
using pg::ReadExecution;
using pg::ReadSchedule;
using pg::ReadTaskRevision;
using pg::ReadTriggerRevision;
using pg::RequireActiveProject;
using pg::Rows;
using pg::Tx;

// ---------------------------------------------------------------------------------------------
// Definitions

Result<PublishTaskResult> PostgresStore::PublishTaskRevision(const PublishTaskCommand& cmd) {
  QL_RETURN_IF_ERROR(ValidatePublishTask(cmd));
  const int64_t new_revision = cmd.expected_revision.value_or(0) + 1;
  const TaskRevisionRecord& content = cmd.revision;

  PublishTaskResult out;
  QL_RETURN_IF_ERROR(AdminWrite("publishing a task revision", [&](Tx& tx) -> Status {
    out = PublishTaskResult{};
    QL_RETURN_IF_ERROR(Fence(tx, cmd.fence, cmd.project_id));
    // Locks first (project, then head), so everything read below is what this transaction
    // commits against: a concurrent publish of the same task waits here and then sees the
    // winner's revision, or its mutation id when it was the same request.
    QL_ASSIGN_OR_RETURN(std::optional<ProjectRecord> project,
                        LoadProject(tx, cmd.project_id, Lock::kShare));
    QL_ASSIGN_OR_RETURN(std::optional<TaskHeadRecord> head,
                        LoadTaskHead(tx, cmd.task_id, Lock::kUpdate));

    // Returns true (and sets `out`) when the mutation id was applied with this content.
    auto replayed = [&]() -> Result<bool> {
      QL_ASSIGN_OR_RETURN(std::optional<TaskRevisionRecord> replay,
                          LoadTaskRevisionByMutation(tx, cmd.mutation_id));
      if (replay.has_value()) {
        if (replay->task_id == cmd.task_id && replay->project_id == cmd.project_id &&
            replay->revision == new_revision && replay->content_digest == content.content_digest) {
          out = PublishTaskResult{std::move(*replay), true};
          return true;
        }
        return Conflict("mutation_id_reused",
                        Cat({"mutation id ", Quote(cmd.mutation_id), " was applied to task ",
                             replay->task_id, " revision ", std::to_string(replay->revision),
                             " with other content or another expected revision"}));
      }
      QL_ASSIGN_OR_RETURN(std::optional<TriggerRevisionRecord> other,
                          LoadTriggerRevisionByMutation(tx, cmd.mutation_id));
      if (other.has_value()) {
        return Conflict("mutation_id_reused", Cat({"mutation id ", Quote(cmd.mutation_id),
                                                   " was applied to trigger ", other->trigger_id}));
      }
      return false;
    };
    QL_ASSIGN_OR_RETURN(bool replay, replayed());
    if (replay) return Status();
    QL_RETURN_IF_ERROR(RequireActiveProject(project, cmd.project_id));

    const Status exists = Duplicate(
        "duplicate_id",
        Cat({"task ", cmd.task_id, " exists already; update it with its expected revision"}));
    if (!cmd.expected_revision.has_value()) {
      if (head.has_value()) return exists;
      // No row to lock yet: the primary key decides between concurrent creators. The insert
      // waits for a concurrent creator's outcome; when it committed, this request is either
      // its replay or a duplicate.
      QL_ASSIGN_OR_RETURN(Rows inserted,
                          tx.Exec("INSERT INTO task_heads (task_id, project_id, current_revision, "
                                  "created_at_ms, updated_at_ms) VALUES ($1, $2, 1, $3, $3) "
                                  "ON CONFLICT (task_id) DO NOTHING",
                                  {P(cmd.task_id), P(cmd.project_id), P(cmd.now_ms)}));
      if (inserted.affected() != 1) {
        QL_ASSIGN_OR_RETURN(bool concurrent_replay, replayed());
        if (concurrent_replay) return Status();
        return exists;
      }
    } else {
      if (!head.has_value() || head->project_id != cmd.project_id) {
        return NotFound("task_not_found",
                        Cat({"task ", cmd.task_id, " does not exist in project ", cmd.project_id}));
      }
      const Status stale = Conflict(
          "revision_conflict",
          Cat({"task ", cmd.task_id, " is at revision ", std::to_string(head->current_revision),
               ", not the expected ", std::to_string(*cmd.expected_revision)}));
      if (head->current_revision != *cmd.expected_revision) return stale;
      QL_RETURN_IF_ERROR(
          ExecuteCas(tx, stale,
                     "UPDATE task_heads SET current_revision = $1, "
                     "updated_at_ms = $2 WHERE task_id = $3 AND "
                     "current_revision = $4",
                     {P(new_revision), P(cmd.now_ms), P(cmd.task_id), P(*cmd.expected_revision)}));
    }
    TaskRevisionRecord stored = content;
    stored.project_id = cmd.project_id;
    stored.task_id = cmd.task_id;
    stored.revision = new_revision;
    stored.mutation_id = cmd.mutation_id;
    stored.created_at_ms = cmd.now_ms;
    QL_RETURN_IF_ERROR(Execute(
        tx,
        "INSERT INTO task_revisions (task_id, revision, project_id, mutation_id, name, kind, "
        "spec_json, labels_json, enabled, content_digest, created_at_ms, approval_json, "
        "concurrency) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
        {P(stored.task_id), P(stored.revision), P(stored.project_id), P(stored.mutation_id),
         P(stored.name), P(stored.kind), P(stored.spec_json), P(stored.labels_json),
         P(stored.enabled), P(stored.content_digest), P(stored.created_at_ms),
         P(stored.approval_json), P(stored.concurrency)}));
    for (const ExecutionRevisionRecord& exec : cmd.executions) {
      QL_RETURN_IF_ERROR(Execute(
          tx,
          "INSERT INTO execution_revisions (id, project_id, task_id, "
          "task_revision, task_digest, executor_type, plan_json, "
          "plan_digest, created_at_ms) "
          "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
          {P(exec.id), P(cmd.project_id), P(cmd.task_id), P(new_revision), P(exec.task_digest),
           P(exec.executor_type), P(exec.plan_json), P(exec.plan_digest), P(cmd.now_ms)}));
    }
    out = PublishTaskResult{std::move(stored), false};
    return Status();
  }));
  return out;
}

Result<PublishTriggerResult> PostgresStore::PublishTriggerRevision(
    const PublishTriggerCommand& cmd) {
  QL_RETURN_IF_ERROR(ValidatePublishTrigger(cmd));
  const TriggerRevisionRecord& content = cmd.revision;
  const int64_t new_revision = cmd.expected_revision.value_or(0) + 1;

  PublishTriggerResult out;
  QL_RETURN_IF_ERROR(AdminWrite("publishing a trigger revision", [&](Tx& tx) -> Status {
    out = PublishTriggerResult{};
    QL_RETURN_IF_ERROR(Fence(tx, cmd.fence, cmd.project_id));
    // Lock order: project, task head (shared: a task publish must not move the pinned revision
    // under this check), trigger head, and at the end the schedule row.
    QL_ASSIGN_OR_RETURN(std::optional<ProjectRecord> project,
                        LoadProject(tx, cmd.project_id, Lock::kShare));
    QL_ASSIGN_OR_RETURN(std::optional<TaskHeadRecord> task,
                        LoadTaskHead(tx, content.task_id, Lock::kShare));
    QL_ASSIGN_OR_RETURN(std::optional<TriggerHeadRecord> head,
                        LoadTriggerHead(tx, cmd.trigger_id, Lock::kUpdate));

    auto replayed = [&]() -> Result<bool> {
      QL_ASSIGN_OR_RETURN(std::optional<TriggerRevisionRecord> replay,
                          LoadTriggerRevisionByMutation(tx, cmd.mutation_id));
      if (replay.has_value()) {
        if (replay->trigger_id == cmd.trigger_id && replay->project_id == cmd.project_id &&
            replay->revision == new_revision && replay->content_digest == content.content_digest) {
          out = PublishTriggerResult{std::move(*replay), true};
          return true;
        }
        return Conflict("mutation_id_reused",
                        Cat({"mutation id ", Quote(cmd.mutation_id), " was applied to trigger ",
                             replay->trigger_id, " revision ", std::to_string(replay->revision),
                             " with other content or another expected revision"}));
      }
      QL_ASSIGN_OR_RETURN(std::optional<TaskRevisionRecord> other,
                          LoadTaskRevisionByMutation(tx, cmd.mutation_id));
      if (other.has_value()) {
        return Conflict("mutation_id_reused", Cat({"mutation id ", Quote(cmd.mutation_id),
                                                   " was applied to task ", other->task_id}));
      }
      return false;
    };
    QL_ASSIGN_OR_RETURN(bool replay, replayed());
    if (replay) return Status();
    QL_RETURN_IF_ERROR(RequireActiveProject(project, cmd.project_id));
    if (!task.has_value() || task->project_id != cmd.project_id) {
      return NotFound("task_not_found", Cat({"task ", content.task_id,
                                             " does not exist in project ", cmd.project_id}));
    }
    const Status exists = Duplicate(
        "duplicate_id",
        Cat({"trigger ", cmd.trigger_id, " exists already; update it with its expected revision"}));
    if (!cmd.expected_revision.has_value()) {
      if (head.has_value()) return exists;
    } else {
      if (!head.has_value() || head->project_id != cmd.project_id) {
        return NotFound("trigger_not_found", Cat({"trigger ", cmd.trigger_id,
                                                  " does not exist in project ", cmd.project_id}));
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
                        LoadTaskRevision(tx, content.task_id, content.task_revision));
    if (!pinned.has_value() || pinned->content_digest != content.task_digest) {
      return Conflict("trigger_pin_stale",
                      Cat({"trigger pins task ", content.task_id, " revision ",
                           std::to_string(content.task_revision), " with digest ",
                           content.task_digest, ", which that task does not have"}));
    }
    if (content.enabled && (pinned->revision != task->current_revision || !pinned->enabled)) {
      return Conflict("trigger_pin_stale",
                      Cat({"an enabled trigger must pin the current enabled revision of task ",
                           content.task_id, " (revision ", std::to_string(task->current_revision),
                           "), not revision ", std::to_string(content.task_revision),
                           pinned->enabled ? "" : ", which is disabled"}));
    }

    if (!head.has_value()) {
      // The primary key decides between concurrent creators (see PublishTaskRevision).
      QL_ASSIGN_OR_RETURN(
          Rows inserted,
          tx.Exec("INSERT INTO trigger_heads (trigger_id, project_id, task_id, "
                  "current_revision, created_at_ms, updated_at_ms) "
                  "VALUES ($1, $2, $3, 1, $4, $4) "
                  "ON CONFLICT (trigger_id) DO NOTHING",
                  {P(cmd.trigger_id), P(cmd.project_id), P(content.task_id), P(cmd.now_ms)}));
      if (inserted.affected() != 1) {
        QL_ASSIGN_OR_RETURN(bool concurrent_replay, replayed());
        if (concurrent_replay) return Status();
        return exists;
      }
    } else {
      QL_RETURN_IF_ERROR(ExecuteCas(
          tx, Conflict("revision_conflict", Cat({"trigger ", cmd.trigger_id, " moved on"})),
          "UPDATE trigger_heads SET current_revision = $1, updated_at_ms = $2 "
          "WHERE trigger_id = $3 AND current_revision = $4",
          {P(new_revision), P(cmd.now_ms), P(cmd.trigger_id), P(*cmd.expected_revision)}));
    }
    TriggerRevisionRecord stored = content;
    stored.project_id = cmd.project_id;
    stored.trigger_id = cmd.trigger_id;
    stored.revision = new_revision;
    stored.mutation_id = cmd.mutation_id;
    stored.created_at_ms = cmd.now_ms;
    QL_RETURN_IF_ERROR(Execute(
        tx,
        "INSERT INTO trigger_revisions (trigger_id, revision, project_id, mutation_id, task_id, "
        "task_revision, task_digest, expression, timezone, misfire, enabled, content_digest, "
        "created_at_ms, overlap) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
        {P(stored.trigger_id), P(stored.revision), P(stored.project_id), P(stored.mutation_id),
         P(stored.task_id), P(stored.task_revision), P(stored.task_digest), P(stored.expression),
         P(stored.timezone), P(stored.misfire), P(stored.enabled), P(stored.content_digest),
         P(stored.created_at_ms), P(stored.overlap)}));
    // The schedule row follows the new revision from scratch: the cursor is recomputed from
    // this publication, the bumped state_version kills every decision taken before, and the
    // bumped claim_version with the cleared claim fences every claim taken on an older
    // revision. last_scheduled_at_ms describes the trigger's history and is kept (as SQLite).
    // The publication time initialises the cursor, so it is one reading of the database
    // clock, never the node's.
    QL_RETURN_IF_ERROR(Execute(
        tx,
        "INSERT INTO trigger_schedules (trigger_id, project_id, trigger_revision, enabled, "
        "next_fire_at_ms, last_scheduled_at_ms, state_version, published_at_ms, exhausted, "
        "claim_owner, claim_token, claim_version, claim_expires_at_ms, updated_at_ms) "
        "SELECT $1, $2, $3, $4, NULL, NULL, 1, c.now_ms, false, NULL, NULL, 0, NULL, c.now_ms "
        "FROM (SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms) c "
        "ON CONFLICT (trigger_id) DO UPDATE SET "
        "trigger_revision = excluded.trigger_revision, enabled = excluded.enabled, "
        "next_fire_at_ms = NULL, state_version = trigger_schedules.state_version + 1, "
        "published_at_ms = excluded.published_at_ms, exhausted = false, claim_owner = NULL, "
        "claim_token = NULL, claim_version = trigger_schedules.claim_version + 1, "
        "claim_expires_at_ms = NULL, updated_at_ms = excluded.updated_at_ms",
        {P(stored.trigger_id), P(stored.project_id), P(stored.revision), P(stored.enabled)}));
    out = PublishTriggerResult{std::move(stored), false};
    return Status();
  }));
  return out;
}

Result<TaskHeadRecord> PostgresStore::GetTaskHead(const std::string& task_id) {
  std::optional<TaskHeadRecord> out;
  QL_RETURN_IF_ERROR(Read("reading a task", [&](Tx& tx) -> Status {
    QL_ASSIGN_OR_RETURN(out, LoadTaskHead(tx, task_id));
    return Status();
  }));
  if (!out.has_value()) {
    return NotFound("task_not_found", Cat({"task ", task_id, " does not exist"}));
  }
  return std::move(*out);
}

Result<TaskRevisionRecord> PostgresStore::GetTaskRevision(const std::string& task_id,
                                                          int64_t revision) {
  std::optional<TaskRevisionRecord> out;
  QL_RETURN_IF_ERROR(Read("reading a task revision", [&](Tx& tx) -> Status {
    QL_ASSIGN_OR_RETURN(out, LoadTaskRevision(tx, task_id, revision));
    return Status();
  }));
  if (!out.has_value()) {
    return NotFound("task_revision_not_found",
                    Cat({"task ", task_id, " has no revision ", std::to_string(revision)}));
  }
  return std::move(*out);
}

Result<Page<TaskRevisionRecord>> PostgresStore::ListTasks(const std::string& project_id,
                                                          const PageRequest& page) {
  QL_RETURN_IF_ERROR(RequireLimit("page limit", page.limit));
  std::optional<std::string> after;
  if (page.after_key.has_value()) {
    QL_ASSIGN_OR_RETURN(after, DecodeIdKey("tasks", *page.after_key));
  }
  Page<TaskRevisionRecord> out;
  QL_RETURN_IF_ERROR(Read("listing tasks", [&](Tx& tx) -> Status {
    static const std::string kFirst =
        Cat({"SELECT ", kTaskRevisionColumns,
             " FROM task_heads h JOIN task_revisions tr ON tr.task_id = h.task_id AND "
             "tr.revision = h.current_revision WHERE h.project_id = $1 ORDER BY h.task_id "
             "LIMIT $2"});
    static const std::string kAfter =
        Cat({"SELECT ", kTaskRevisionColumns,
             " FROM task_heads h JOIN task_revisions tr ON tr.task_id = h.task_id AND "
             "tr.revision = h.current_revision WHERE h.project_id = $1 AND h.task_id > $2 "
             "ORDER BY h.task_id LIMIT $3"});
    if (after.has_value()) {
      QL_ASSIGN_OR_RETURN(out.items, QueryAll<TaskRevisionRecord>(
                                         tx, kAfter, {P(project_id), P(*after), P(page.limit + 1)},
                                         ReadTaskRevision));
    } else {
      QL_ASSIGN_OR_RETURN(
          out.items, QueryAll<TaskRevisionRecord>(tx, kFirst, {P(project_id), P(page.limit + 1)},
                                                  ReadTaskRevision));
    }
    return Status();
  }));
  if (out.items.size() > static_cast<size_t>(page.limit)) {
    out.items.resize(page.limit);
    out.next_key = EncodeIdKey("tasks", out.items.back().task_id);
  }
  return out;
}

Result<std::vector<TaskRevisionRecord>> PostgresStore::ListTaskRevisions(
    const std::string& task_id) {
  std::vector<TaskRevisionRecord> out;
  bool exists = false;
  QL_RETURN_IF_ERROR(Read("listing task revisions", [&](Tx& tx) -> Status {
    QL_ASSIGN_OR_RETURN(std::optional<TaskHeadRecord> head, LoadTaskHead(tx, task_id));
    exists = head.has_value();
    static const std::string kSql = Cat({"SELECT ", kTaskRevisionColumns,
                                         " FROM task_revisions tr WHERE tr.task_id = $1 "
                                         "ORDER BY tr.revision DESC"});
    QL_ASSIGN_OR_RETURN(out,
                        QueryAll<TaskRevisionRecord>(tx, kSql, {P(task_id)}, ReadTaskRevision));
    return Status();
  }));
  if (!exists) return NotFound("task_not_found", Cat({"task ", task_id, " does not exist"}));
  return out;
}

Result<ExecutionRevisionRecord> PostgresStore::GetExecutionRevision(const std::string& id) {
  std::optional<ExecutionRevisionRecord> out;
  QL_RETURN_IF_ERROR(Read("reading an execution revision", [&](Tx& tx) -> Status {
    static const std::string kSql =
        Cat({"SELECT ", kExecutionColumns, " FROM execution_revisions e WHERE e.id = $1"});
    QL_ASSIGN_OR_RETURN(out, QueryOne<ExecutionRevisionRecord>(tx, kSql, {P(id)}, ReadExecution));
    return Status();
  }));
  if (!out.has_value()) {
    return NotFound("execution_revision_not_found",
                    Cat({"execution revision ", Quote(id), " does not exist"}));
  }
  return std::move(*out);
}

Result<ExecutionRevisionRecord> PostgresStore::FindExecutionRevision(
    const std::string& task_id, int64_t task_revision, const std::string& executor_type) {
  std::optional<ExecutionRevisionRecord> out;
  QL_RETURN_IF_ERROR(Read("reading an execution revision", [&](Tx& tx) -> Status {
    static const std::string kSql =
        Cat({"SELECT ", kExecutionColumns,
             " FROM execution_revisions e WHERE e.task_id = $1 AND e.task_revision = $2 AND "
             "e.executor_type = $3"});
    QL_ASSIGN_OR_RETURN(
        out, QueryOne<ExecutionRevisionRecord>(
                 tx, kSql, {P(task_id), P(task_revision), P(executor_type)}, ReadExecution));
    return Status();
  }));
  if (!out.has_value()) {
    return NotFound("execution_revision_not_found",
                    Cat({"task ", task_id, " revision ", std::to_string(task_revision),
                         " has no execution revision for executor ", Quote(executor_type)}));
  }
  return std::move(*out);
}

Result<TriggerHeadRecord> PostgresStore::GetTriggerHead(const std::string& trigger_id) {
  std::optional<TriggerHeadRecord> out;
  QL_RETURN_IF_ERROR(Read("reading a trigger", [&](Tx& tx) -> Status {
    QL_ASSIGN_OR_RETURN(out, LoadTriggerHead(tx, trigger_id));
    return Status();
  }));
  if (!out.has_value()) {
    return NotFound("trigger_not_found", Cat({"trigger ", trigger_id, " does not exist"}));
  }
  return std::move(*out);
}

Result<TriggerRevisionRecord> PostgresStore::GetTriggerRevision(const std::string& trigger_id,
                                                                int64_t revision) {
  std::optional<TriggerRevisionRecord> out;
  QL_RETURN_IF_ERROR(Read("reading a trigger revision", [&](Tx& tx) -> Status {
    static const std::string kSql =
        Cat({"SELECT ", kTriggerRevisionColumns,
             " FROM trigger_revisions g WHERE g.trigger_id = $1 AND g.revision = $2"});
    QL_ASSIGN_OR_RETURN(out, QueryOne<TriggerRevisionRecord>(
                                 tx, kSql, {P(trigger_id), P(revision)},
                                 [](const Rows& r, int i) { return ReadTriggerRevision(r, i); }));
    return Status();
  }));
  if (!out.has_value()) {
    return NotFound("trigger_revision_not_found",
                    Cat({"trigger ", trigger_id, " has no revision ", std::to_string(revision)}));
  }
  return std::move(*out);
}

Result<Page<TriggerRevisionRecord>> PostgresStore::ListTriggers(
    const std::string& project_id, const std::optional<std::string>& task_id,
    const PageRequest& page) {
  QL_RETURN_IF_ERROR(RequireLimit("page limit", page.limit));
  std::optional<std::string> after;
  if (page.after_key.has_value()) {
    QL_ASSIGN_OR_RETURN(after, DecodeIdKey("triggers", *page.after_key));
  }
  // One statement text per combination, each able to use an index in order.
  std::string sql = Cat({"SELECT ", kTriggerRevisionColumns,
                         " FROM trigger_heads th JOIN trigger_revisions g ON g.trigger_id = "
                         "th.trigger_id AND g.revision = th.current_revision "
                         "WHERE th.project_id = $1"});
  Params params = {P(project_id)};
  if (task_id.has_value()) {
    params.push_back(P(*task_id));
    sql += " AND th.task_id = $" + std::to_string(params.size());
  }
  if (after.has_value()) {
    params.push_back(P(*after));
    sql += " AND th.trigger_id > $" + std::to_string(params.size());
  }
  params.push_back(P(page.limit + 1));
  sql += " ORDER BY th.trigger_id LIMIT $" + std::to_string(params.size());

  Page<TriggerRevisionRecord> out;
  QL_RETURN_IF_ERROR(Read("listing triggers", [&](Tx& tx) -> Status {
    QL_ASSIGN_OR_RETURN(out.items,
                        QueryAll<TriggerRevisionRecord>(tx, sql, params, [](const Rows& r, int i) {
                          return ReadTriggerRevision(r, i);
                        }));
    return Status();
  }));
  if (out.items.size() > static_cast<size_t>(page.limit)) {
    out.items.resize(page.limit);
    out.next_key = EncodeIdKey("triggers", out.items.back().trigger_id);
  }
  return out;
}

Result<ScheduleRecord> PostgresStore::GetSchedule(const std::string& trigger_id) {
  std::optional<ScheduleRecord> out;
  QL_RETURN_IF_ERROR(Read("reading a schedule", [&](Tx& tx) -> Status {
    static const std::string kSql =
        Cat({"SELECT ", kScheduleColumns, " FROM trigger_schedules s WHERE s.trigger_id = $1"});
    QL_ASSIGN_OR_RETURN(out, QueryOne<ScheduleRecord>(tx, kSql, {P(trigger_id)}, ReadSchedule));
    return Status();
  }));
  if (!out.has_value()) {
    return NotFound("schedule_not_found", Cat({"trigger ", trigger_id, " has no schedule"}));
  }
  return std::move(*out);
}

Result<int64_t> PostgresStore::CountEnabledTriggers() {
  int64_t out = 0;
  QL_RETURN_IF_ERROR(Read("counting triggers", [&](Tx& tx) -> Status {
    QL_ASSIGN_OR_RETURN(
        std::optional<int64_t> count,
        QueryOne<int64_t>(tx,
                          "SELECT count(*) FROM trigger_heads th JOIN trigger_revisions g ON "
                          "g.trigger_id = th.trigger_id AND g.revision = th.current_revision "
                          "JOIN projects p ON p.id = th.project_id "
                          "WHERE g.enabled AND p.status = 'active'",
                          {}, [](const Rows& r, int i) { return r.Int(i, 0); }));
    out = count.value_or(0);
    return Status();
  }));
  return out;
}

}  // namespace ql
