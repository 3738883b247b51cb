#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "ql/core/governance_store.h"
#include "ql/core/store_commands.h"
#include "ql/storage/postgres/pg_governance.h"
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

namespace {

// Refuses `name` for the task or trigger `id` (`kind` "task" or "trigger") when another live
// head of that kind in the project holds it; the partial unique indexes *_heads_live_name
// decide between concurrent writers.
Status RequireFreeName(Tx& tx, std::string_view kind, const std::string& project_id,
                       const std::string& name, const std::string& id) {
  const std::string sql = Cat({"SELECT ", kind, "_id FROM ", kind, "_heads WHERE project_id = $1 "
                               "AND name = $2 AND deleted_at_ms IS NULL AND ", kind, "_id <> $3"});
  QL_ASSIGN_OR_RETURN(std::optional<std::string> holder,
                      QueryOne<std::string>(tx, sql, {P(project_id), P(name), P(id)},
                                            [](const Rows& r, int i) { return r.Text(i, 0); }));
  if (!holder.has_value()) return Status();
  return Duplicate("name_duplicate", Cat({"a ", kind, " named ", Quote(name), " exists in project ",
                                          project_id, " (", kind, " ", *holder, ")"}));
}

// Appends `stored`, the next revision of an existing trigger head at `expected_revision`, and
// points the head (renamed when `name` is set, tombstoned when `deleted_at_ms` is) and its
// schedule row at it. The schedule keeps its cursor when `keep_cursor` (a repin changes nothing
// the cursor is computed from, so no occurrence is lost), else it restarts from this
// publication, whose time is one reading of the database clock, never the node's. Either way
// the bumped state_version kills every decision taken before, and the bumped claim_version with
// the cleared claim fences every claim taken on an older revision. last_scheduled_at_ms
// describes the trigger's history and is kept (as SQLite).
Status AppendTriggerRevision(Tx& tx, const TriggerRevisionRecord& stored,
                             std::optional<int64_t> expected_revision,
                             const std::optional<std::string>& name,
                             std::optional<int64_t> deleted_at_ms, bool keep_cursor) {
  if (expected_revision.has_value()) {
    QL_RETURN_IF_ERROR(ExecuteCas(
        tx, Conflict("revision_conflict", Cat({"trigger ", stored.trigger_id, " moved on"})),
        "UPDATE trigger_heads SET current_revision = $1, updated_at_ms = $2, "
        "name = coalesce($3, name), deleted_at_ms = coalesce($4, deleted_at_ms) "
        "WHERE trigger_id = $5 AND current_revision = $6",
        {P(stored.revision), P(stored.created_at_ms), P(name), P(deleted_at_ms),
         P(stored.trigger_id), P(*expected_revision)}));
  }
  QL_RETURN_IF_ERROR(Execute(
      tx,
      "INSERT INTO trigger_revisions (trigger_id, revision, project_id, mutation_id, task_id, "
      "task_revision, task_digest, expression, timezone, misfire, enabled, content_digest, "
      "created_at_ms, overlap, jitter_ms) "
      "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)",
      {P(stored.trigger_id), P(stored.revision), P(stored.project_id), P(stored.mutation_id),
       P(stored.task_id), P(stored.task_revision), P(stored.task_digest), P(stored.expression),
       P(stored.timezone), P(stored.misfire), P(stored.enabled), P(stored.content_digest),
       P(stored.created_at_ms), P(stored.overlap), P(stored.jitter_ms)}));
  return Execute(
      tx,
      "INSERT INTO trigger_schedules (trigger_id, project_id, trigger_revision, enabled, "
      "next_fire_at_ms, last_scheduled_at_ms, state_version, published_at_ms, exhausted, "
      "claim_owner, claim_token, claim_version, claim_expires_at_ms, updated_at_ms) "
      "SELECT $1, $2, $3, $4, NULL, NULL, 1, c.now_ms, false, NULL, NULL, 0, NULL, c.now_ms "
      "FROM (SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms) c "
      "ON CONFLICT (trigger_id) DO UPDATE SET "
      "trigger_revision = excluded.trigger_revision, enabled = excluded.enabled, "
      "next_fire_at_ms = CASE WHEN $5 THEN trigger_schedules.next_fire_at_ms END, "
      "state_version = trigger_schedules.state_version + 1, "
      "published_at_ms = CASE WHEN $5 THEN trigger_schedules.published_at_ms "
      "ELSE excluded.published_at_ms END, "
      "exhausted = CASE WHEN $5 THEN trigger_schedules.exhausted ELSE false END, "
      "claim_owner = NULL, claim_token = NULL, claim_version = trigger_schedules.claim_version + 1, "
      "claim_expires_at_ms = NULL, updated_at_ms = excluded.updated_at_ms",
      {P(stored.trigger_id), P(stored.project_id), P(stored.revision), P(stored.enabled),
       P(keep_cursor)});
}

// The live triggers of `task_id` at their current revisions, by id, their heads locked for
// update (after the task head, as every publish locks them).
Result<std::vector<TriggerRevisionRecord>> LockLiveTriggersOf(Tx& tx, const std::string& task_id) {
  static const std::string kSql =
      Cat({"SELECT ", kTriggerRevisionColumns,
           " FROM trigger_heads th JOIN trigger_revisions g ON g.trigger_id = th.trigger_id AND "
           "g.revision = th.current_revision WHERE th.task_id = $1 AND th.deleted_at_ms IS NULL "
           "ORDER BY th.trigger_id FOR UPDATE OF th"});
  return QueryAll<TriggerRevisionRecord>(
      tx, kSql, {P(task_id)}, [](const Rows& r, int i) { return ReadTriggerRevision(r, i); });
}

}  // namespace

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
                                  "created_at_ms, updated_at_ms, name) "
                                  "VALUES ($1, $2, 1, $3, $3, $4) ON CONFLICT DO NOTHING",
                                  {P(cmd.task_id), P(cmd.project_id), P(cmd.now_ms),
                                   P(content.name)}));
      // Nothing inserted: a concurrent creator of this very task committed first (its replay,
      // or a duplicate id), or another live task holds the name. The insert waited for that
      // writer's outcome, so the statements below see it.
      if (inserted.affected() != 1) {
        QL_ASSIGN_OR_RETURN(bool concurrent_replay, replayed());
        if (concurrent_replay) return Status();
        QL_ASSIGN_OR_RETURN(std::optional<TaskHeadRecord> now_head,
                            LoadTaskHead(tx, cmd.task_id, Lock::kNone));
        if (now_head.has_value()) return exists;
        QL_RETURN_IF_ERROR(RequireFreeName(tx, "task", cmd.project_id, content.name, cmd.task_id));
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
      if (head->deleted_at_ms.has_value()) {
        return Conflict("task_deleted", Cat({"task ", cmd.task_id, " was deleted"}));
      }
      if (head->current_revision != *cmd.expected_revision) return stale;
      // A deleted task keeps its last name in the row, but no longer holds it.
      if (!cmd.tombstone) {
        QL_RETURN_IF_ERROR(RequireFreeName(tx, "task", cmd.project_id, content.name, cmd.task_id));
      }
      QL_RETURN_IF_ERROR(ExecuteCas(
          tx, stale,
          "UPDATE task_heads SET current_revision = $1, updated_at_ms = $2, name = $3, "
          "deleted_at_ms = $4 WHERE task_id = $5 AND current_revision = $6",
          {P(new_revision), P(cmd.now_ms), P(content.name),
           P(cmd.tombstone ? std::optional<int64_t>(cmd.now_ms) : std::nullopt), P(cmd.task_id),
           P(*cmd.expected_revision)}));
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
        "concurrency, published_by) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
        {P(stored.task_id), P(stored.revision), P(stored.project_id), P(stored.mutation_id),
         P(stored.name), P(stored.kind), P(stored.spec_json), P(stored.labels_json),
         P(stored.enabled), P(stored.content_digest), P(stored.created_at_ms),
         P(stored.approval_json), P(stored.concurrency), P(stored.published_by)}));
    if (cmd.audit.has_value()) QL_RETURN_IF_ERROR(NewGovernanceTx(tx)->InsertAudit(*cmd.audit));
    for (const ExecutionRevisionRecord& exec : cmd.executions) {
      QL_RETURN_IF_ERROR(Execute(
          tx,
          // The pool and labels a grant filters on are read from the stored plan itself.
          "INSERT INTO execution_revisions (id, project_id, task_id, "
          "task_revision, task_digest, executor_type, plan_json, "
          "plan_digest, created_at_ms, pool, required_labels) "
          "VALUES ($1, $2, $3, $4, $5, $6, $7::text, $8, $9, "
          "coalesce($7::text::jsonb #>> '{placement,pool}', 'default'), "
          "coalesce($7::text::jsonb #> '{placement,labels}', '{}'::jsonb))",
          {P(exec.id), P(cmd.project_id), P(cmd.task_id), P(new_revision), P(exec.task_digest),
           P(exec.executor_type), P(exec.plan_json), P(exec.plan_digest), P(cmd.now_ms)}));
    }
    std::vector<std::string> trigger_ids;
    if (cmd.repin_triggers || cmd.tombstone) {
      QL_ASSIGN_OR_RETURN(std::vector<TriggerRevisionRecord> triggers,
                          LockLiveTriggersOf(tx, cmd.task_id));
      for (const TriggerRevisionRecord& trigger : triggers) {
        const std::optional<TriggerRevisionRecord> next =
            TriggerRevisionForTaskPublish(cmd, stored, trigger);
        if (!next.has_value()) continue;
        QL_RETURN_IF_ERROR(AppendTriggerRevision(
            tx, *next, trigger.revision, std::nullopt,
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
    if (head.has_value() && head->deleted_at_ms.has_value()) {
      return Conflict("trigger_deleted", Cat({"trigger ", cmd.trigger_id, " was deleted"}));
    }
    if (task->deleted_at_ms.has_value()) {
      return Conflict("task_deleted", Cat({"task ", content.task_id, " was deleted"}));
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

    const std::optional<std::string> rename =
        cmd.name.empty() ? std::nullopt : std::optional<std::string>(cmd.name);
    if (!head.has_value()) {
      // The primary key decides between concurrent creators (see PublishTaskRevision).
      QL_ASSIGN_OR_RETURN(
          Rows inserted,
          tx.Exec("INSERT INTO trigger_heads (trigger_id, project_id, task_id, "
                  "current_revision, created_at_ms, updated_at_ms, name) "
                  "VALUES ($1, $2, $3, 1, $4, $4, $5) ON CONFLICT DO NOTHING",
                  {P(cmd.trigger_id), P(cmd.project_id), P(content.task_id), P(cmd.now_ms),
                   P(cmd.name)}));
      // As for tasks: a concurrent creator of this trigger, or a live trigger with the name.
      if (inserted.affected() != 1) {
        QL_ASSIGN_OR_RETURN(bool concurrent_replay, replayed());
        if (concurrent_replay) return Status();
        QL_ASSIGN_OR_RETURN(std::optional<TriggerHeadRecord> now_head,
                            LoadTriggerHead(tx, cmd.trigger_id, Lock::kNone));
        if (now_head.has_value()) return exists;
        QL_RETURN_IF_ERROR(RequireFreeName(tx, "trigger", cmd.project_id, cmd.name, cmd.trigger_id));
        return exists;
      }
    } else if (rename.has_value() && !cmd.tombstone) {
      QL_RETURN_IF_ERROR(RequireFreeName(tx, "trigger", cmd.project_id, cmd.name, cmd.trigger_id));
    }
    TriggerRevisionRecord stored = content;
    stored.project_id = cmd.project_id;
    stored.trigger_id = cmd.trigger_id;
    stored.revision = new_revision;
    stored.mutation_id = cmd.mutation_id;
    stored.created_at_ms = cmd.now_ms;
    // The schedule row follows the new revision from scratch: the cursor is recomputed from
    // this publication.
    QL_RETURN_IF_ERROR(AppendTriggerRevision(
        tx, stored, head.has_value() ? cmd.expected_revision : std::nullopt, rename,
        cmd.tombstone ? std::optional<int64_t>(cmd.now_ms) : std::nullopt,
        /*keep_cursor=*/false));
    if (cmd.audit.has_value()) QL_RETURN_IF_ERROR(NewGovernanceTx(tx)->InsertAudit(*cmd.audit));
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

Result<std::optional<TaskHeadRecord>> PostgresStore::FindTaskByName(
    const std::string& project_id, const std::string& name) {
  std::optional<TaskHeadRecord> out;
  QL_RETURN_IF_ERROR(Read("finding a task by name", [&](Tx& tx) -> Status {
    static const std::string kSql =
        Cat({"SELECT ", pg::kTaskHeadColumns,
             " FROM task_heads h WHERE h.project_id = $1 AND h.name = $2 AND "
             "h.deleted_at_ms IS NULL"});
    QL_ASSIGN_OR_RETURN(
        out, QueryOne<TaskHeadRecord>(tx, kSql, {P(project_id), P(name)}, pg::ReadTaskHead));
    return Status();
  }));
  return out;
}

Result<std::optional<TriggerHeadRecord>> PostgresStore::FindTriggerByName(
    const std::string& project_id, const std::string& name) {
  std::optional<TriggerHeadRecord> out;
  QL_RETURN_IF_ERROR(Read("finding a trigger by name", [&](Tx& tx) -> Status {
    static const std::string kSql =
        Cat({"SELECT ", pg::kTriggerHeadColumns,
             " FROM trigger_heads th WHERE th.project_id = $1 AND th.name = $2 AND "
             "th.deleted_at_ms IS NULL"});
    QL_ASSIGN_OR_RETURN(out, QueryOne<TriggerHeadRecord>(tx, kSql, {P(project_id), P(name)},
                                                         pg::ReadTriggerHead));
    return Status();
  }));
  return out;
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
             "tr.revision = h.current_revision WHERE h.project_id = $1 AND "
             "h.deleted_at_ms IS NULL ORDER BY h.task_id LIMIT $2"});
    static const std::string kAfter =
        Cat({"SELECT ", kTaskRevisionColumns,
             " FROM task_heads h JOIN task_revisions tr ON tr.task_id = h.task_id AND "
             "tr.revision = h.current_revision WHERE h.project_id = $1 AND "
             "h.deleted_at_ms IS NULL AND h.task_id > $2 ORDER BY h.task_id LIMIT $3"});
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
                         "WHERE th.project_id = $1 AND th.deleted_at_ms IS NULL"});
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

Result<int64_t> PostgresStore::CountEnabledTriggers(const std::optional<std::string>& project_id) {
  int64_t out = 0;
  QL_RETURN_IF_ERROR(Read("counting triggers", [&](Tx& tx) -> Status {
    QL_ASSIGN_OR_RETURN(
        std::optional<int64_t> count,
        QueryOne<int64_t>(tx,
                          "SELECT count(*) FROM trigger_heads th JOIN trigger_revisions g ON "
                          "g.trigger_id = th.trigger_id AND g.revision = th.current_revision "
                          "JOIN projects p ON p.id = th.project_id "
                          "WHERE g.enabled AND p.status = 'active' AND "
                          "($1::text IS NULL OR th.project_id::text = $1)",
                          {project_id.has_value() ? pg::P(*project_id) : pg::Param{}},
                          [](const Rows& r, int i) { return r.Int(i, 0); }));
    out = count.value_or(0);
    return Status();
  }));
  return out;
}

Result<int64_t> PostgresStore::CountStaleTriggers(const std::optional<std::string>& project_id) {
  int64_t out = 0;
  QL_RETURN_IF_ERROR(Read("counting stale triggers", [&](Tx& tx) -> Status {
    QL_ASSIGN_OR_RETURN(
        std::optional<int64_t> count,
        QueryOne<int64_t>(tx,
                          "SELECT count(*) FROM trigger_heads th JOIN trigger_revisions g ON "
                          "g.trigger_id = th.trigger_id AND g.revision = th.current_revision "
                          "JOIN projects p ON p.id = th.project_id "
                          "JOIN task_heads h ON h.task_id = g.task_id "
                          "JOIN task_revisions tr ON tr.task_id = h.task_id AND "
                          "tr.revision = h.current_revision "
                          "WHERE g.enabled AND p.status = 'active' AND "
                          "(g.task_revision <> h.current_revision OR NOT tr.enabled OR "
                          "tr.content_digest <> g.task_digest) AND "
                          "($1::text IS NULL OR th.project_id::text = $1)",
                          {project_id.has_value() ? pg::P(*project_id) : pg::Param{}},
                          [](const Rows& r, int i) { return r.Int(i, 0); }));
    out = count.value_or(0);
    return Status();
  }));
  return out;
}

}  // namespace ql
