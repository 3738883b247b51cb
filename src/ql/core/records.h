#pragma once

// Plain records exchanged between services and repositories. All times are UTC milliseconds.
// JSON-valued columns are carried as canonical JSON text so every store returns the same bytes.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ql {

// The project every installation has from first start.
inline constexpr char kDefaultProjectSlug[] = "default";

struct ProjectRecord {
  std::string id;
  std::string slug;
  std::string name;
  std::string status;  // "active" | "archived"
  int64_t version = 0;
  int64_t created_at_ms = 0;
  int64_t updated_at_ms = 0;
};

struct TaskHeadRecord {
  std::string project_id;
  std::string task_id;
  int64_t current_revision = 0;
  int64_t created_at_ms = 0;
  int64_t updated_at_ms = 0;
  // The task's address within its project: the current revision's name, unique among the
  // project's live tasks (a database upgrade that found duplicates suffixed the later ones).
  std::string name;
  // Set when the task was deleted: a tombstone that admits and starts nothing, kept with its
  // history until retention; its name is free again.
  std::optional<int64_t> deleted_at_ms;
};

// One immutable task revision. `spec_json` and `labels_json` are canonical JSON;
// `content_digest` is TaskContentDigest over (kind, name, spec, labels, enabled).
struct TaskRevisionRecord {
  std::string project_id;
  std::string task_id;
  int64_t revision = 0;
  std::string mutation_id;
  std::string name;
  std::string kind;
  std::string spec_json;
  std::string labels_json;
  bool enabled = true;
  std::string content_digest;
  int64_t created_at_ms = 0;
  // Canonical JSON of the revision's approval policy (core/approval.h), absent when manual runs
  // need none. Covered by the content digest, not part of the execution plan.
  std::optional<std::string> approval_json;
  // At most this many unfinished runs of the task before a cron occurrence is skipped (reason
  // "concurrency"); absent = unlimited. Covered by the content digest, not part of the plan.
  std::optional<int64_t> concurrency;
  // The principal who published this revision; absent: the system (or a revision written
  // before this was recorded). Not covered by the content digest.
  std::optional<std::string> published_by;
};

// The frozen plan of one enabled task revision for one executor type.
struct ExecutionRevisionRecord {
  std::string id;  // "qltd:v1:<revision>:<plan digest>"
  std::string project_id;
  std::string task_id;
  int64_t task_revision = 0;
  std::string task_digest;
  std::string executor_type;  // "local_process" | "remote_worker"
  std::string plan_json;      // canonical JSON of the ExecutionPlan
  std::string plan_digest;
  int64_t created_at_ms = 0;
};

struct TriggerHeadRecord {
  std::string project_id;
  std::string trigger_id;
  std::string task_id;
  int64_t current_revision = 0;
  int64_t created_at_ms = 0;
  int64_t updated_at_ms = 0;
  // Unique among the project's live triggers; not part of any revision (renaming a trigger
  // changes nothing it schedules).
  std::string name;
  std::optional<int64_t> deleted_at_ms;  // tombstone, as for tasks
};

// One immutable trigger revision of kind qinglong/cron@v1; it pins a task revision and digest.
struct TriggerRevisionRecord {
  std::string project_id;
  std::string trigger_id;
  int64_t revision = 0;
  std::string mutation_id;
  std::string task_id;
  int64_t task_revision = 0;
  std::string task_digest;
  std::string expression;
  std::string timezone;  // canonical IANA name
  std::string misfire;   // "skip" | "fire_once"
  std::string overlap = "allow";  // "allow" | "forbid" | "replace" (core/overlap.h)
  int64_t jitter_ms = 0;          // 0 .. kMaxJitterMs (core/jitter.h)
  bool enabled = true;
  std::string content_digest;
  int64_t created_at_ms = 0;
};

// The durable cursor of one trigger head. `next_fire_at_ms` empty = needs initialisation.
struct ScheduleRecord {
  std::string project_id;
  std::string trigger_id;
  int64_t trigger_revision = 0;
  std::optional<int64_t> next_fire_at_ms;
  std::optional<int64_t> last_scheduled_at_ms;
  int64_t state_version = 0;
  int64_t published_at_ms = 0;  // creation time of the trigger revision; initialisation base
  bool exhausted = false;       // the expression has no fire time left
  int64_t updated_at_ms = 0;
};

// A schedule row that is eligible for a decision, with the revision it follows.
struct DueSchedule {
  ScheduleRecord schedule;
  TriggerRevisionRecord trigger;
};

// Snapshot of the retry policy taken when a run is created.
struct RetryPolicy {
  int max_attempts = 1;             // 1..16
  bool retry_on_lost = false;
  bool retry_on_timeout = false;    // a timed-out attempt is retried like a failed one
  std::string safety = "unknown";   // unknown | idempotent | deduplicated
  int64_t backoff_base_ms = 1000;   // ≤ 24 h
  int64_t backoff_max_ms = 60'000;  // ≤ 24 h, ≥ base
  bool operator==(const RetryPolicy&) const = default;
};

struct RunRecord {
  std::string id;
  std::string project_id;
  std::string task_id;
  int64_t task_revision = 0;
  std::string task_digest;
  std::string execution_revision_id;
  std::optional<std::string> trigger_id;
  std::optional<int64_t> trigger_revision;
  std::optional<int64_t> scheduled_for_ms;
  std::string trigger_type;  // cron | manual | api
  std::string status;        // RunStatus wire name
  int64_t version = 0;
  int64_t event_sequence = 0;
  int priority = 0;
  std::optional<std::string> idempotency_key;
  std::optional<std::string> retry_of_run_id;
  int64_t created_at_ms = 0;
  std::optional<int64_t> queued_at_ms;
  std::optional<int64_t> started_at_ms;
  std::optional<int64_t> finished_at_ms;
  std::optional<int64_t> retry_at_ms;  // when a retry_wait run becomes queued again
  std::optional<int64_t> cancel_requested_at_ms;
  std::optional<std::string> cancel_reason;
  std::optional<std::string> error_code;
  std::optional<std::string> error_summary;
  std::optional<int> exit_code;
  RetryPolicy retry_policy;
};

struct AttemptRecord {
  std::string id;
  std::string run_id;
  int attempt = 1;
  std::string status;         // AttemptStatus wire name
  std::string executor_type;  // local_process | remote_worker
  int64_t callback_sequence = 0;
  std::optional<int64_t> pid;
  std::optional<int64_t> process_start_ticks;
  std::optional<std::string> log_path;
  int64_t created_at_ms = 0;
  std::optional<int64_t> started_at_ms;
  std::optional<int64_t> finished_at_ms;
  std::optional<int> exit_code;
  std::optional<std::string> error_code;
  std::optional<std::string> error_summary;
};

struct EventRecord {
  std::string run_id;
  int64_t sequence = 0;
  std::string type;        // run.<state>, attempt.<state>, run.created, ...
  std::string actor_type;  // scheduler | dispatcher | executor | user | worker | recovery
  std::optional<std::string> attempt_id;
  std::optional<std::string> dedupe_key;
  std::string payload_json = "{}";  // canonical JSON object, ≤ 16 KiB
  int64_t created_at_ms = 0;
};

// Largest canonical event payload a store accepts.
inline constexpr size_t kMaxEventPayloadBytes = 16 * 1024;

}  // namespace ql
