#pragma once

// `ql task add|list|show|publish`: tasks over the HTTP API (/api/v1/tasks).

#include <CLI/CLI.hpp>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "client.h"

namespace ql::cli {

// The content flags shared by `task add` and `task publish`. Unset optionals and empty lists
// mean "not given".
struct TaskContentFlags {
  std::optional<std::string> shell;        // --shell COMMAND
  bool bash = false;                       // --bash: run the shell command with /bin/bash
  std::optional<std::string> argv_file;    // --argv FILE: run FILE directly, no shell
  std::optional<std::string> script;       // --script NAME[@VERSION]: a script of the project
  std::optional<std::string> interpreter;  // --interpreter node|python3|sh|bash (--script)
  bool repin_scripts = false;              // `task repin`: the script's latest version
  std::vector<std::string> args;           // ARGS: the positional arguments after FILE / `--`
  std::vector<std::string> extra_args;     // --arg VALUE (appended after ARGS)
  std::optional<std::string> timeout;      // --timeout DURATION
  std::vector<std::string> env;            // --env NAME=VALUE, repeatable
  std::vector<std::string> secret_env;     // --secret-env VAR=SECRET[@VERSION], repeatable
  bool clear_env = false;                  // --clear-env (publish)
  std::vector<std::string> unset_env;      // --unset-env NAME, repeatable (publish)
  std::optional<std::string> workdir;      // --workdir DIR
  bool clear_workdir = false;              // --clear-workdir (publish)
  std::vector<std::string> labels;         // --label KEY=VALUE, repeatable
  bool clear_labels = false;               // --clear-labels (publish)
  std::vector<std::string> unset_labels;   // --unset-label KEY, repeatable (publish)
  bool disabled = false;                   // --disabled
  bool enabled = false;                    // --enabled (publish)
  std::optional<int64_t> max_attempts;     // --max-attempts N
  bool retry_on_lost = false;              // --retry-on-lost
  bool no_retry_on_lost = false;           // --no-retry-on-lost (publish)
  bool retry_on_timeout = false;           // --retry-on-timeout
  bool no_retry_on_timeout = false;        // --no-retry-on-timeout (publish)
  std::optional<std::string> safety;       // --safety unknown|idempotent|deduplicated
  std::optional<std::string> backoff;      // --backoff DURATION
  std::optional<std::string> backoff_max;  // --backoff-max DURATION
  std::optional<std::string> mutation_id;  // --mutation-id ID (makes a retried write a replay)
  bool require_approval = false;              // --require-approval
  bool no_approval = false;                   // --no-approval (publish)
  std::optional<std::string> approver_role;   // --approver-role admin|owner
  std::optional<std::string> approval_ttl;    // --approval-ttl DURATION
  std::optional<int64_t> concurrency;         // --concurrency N (cron runs at once)
  bool no_concurrency = false;                // --no-concurrency (publish)
  std::optional<int64_t> memory_mib;          // --memory-mib N
  std::optional<int64_t> pids;                // --pids N
  std::optional<int64_t> cpu_seconds;         // --cpu-seconds N
  std::optional<int64_t> open_files;          // --open-files N
  bool clear_limits = false;                  // --clear-limits (publish)
  std::optional<std::string> network;         // --network host|none
  std::optional<std::string> isolation;       // --isolation confined|none
  std::optional<std::string> pool;            // --pool P: the worker pool that runs it
  std::vector<std::string> worker_labels;     // --worker-label KEY=VALUE, repeatable
  bool clear_worker_labels = false;           // --clear-worker-labels (publish)
  std::vector<std::string> unset_worker_labels;  // --unset-worker-label KEY, repeatable (publish)
};

// Builds the body of a task publish request (without mutation_id or expected_revision):
// {"name", "spec": {"command", "environment", "workingDirectory"?, "timeoutMs"?}, "labels",
// "enabled", "retry"?}. With `current` (a task as GET /api/v1/tasks/{id} returns it) every
// content flag left out keeps the current value; --env / --label set or override one variable /
// label each and --unset-env / --unset-label remove one (unknown_env / unknown_label when the
// task has none of that name); --clear-env / --clear-labels start from an empty set, so with
// --env / --label they replace the whole set; retry flags change single fields of the current
// retry policy. --retry-on-lost without --safety declares the command idempotent unless the policy
// already names a safety (the server retries lost attempts only of commands declared safe);
// --retry-on-timeout retries attempts that ran into --timeout as failed ones are retried.
// The spec's `placement` ({"pool", "labels"?}: which remote workers may run it) follows the
// labels' rules: --pool replaces the pool and keeps the worker labels, --worker-label sets one,
// --unset-worker-label removes one (unknown_worker_label), --clear-worker-labels starts from
// none; `--pool default` without --worker-label drops the labels too, and the default pool
// without labels is sent as no placement at all.
// Usage errors (exit 2): command_required (neither --shell nor --argv for a new task),
// command_conflict (both, or --bash with --argv, or ARGS or --arg without --argv),
// invalid_duration,
// invalid_env (not NAME=VALUE, or a name given twice), invalid_label, invalid_worker_label,
// flag_conflict (--enabled with --disabled, --retry-on-lost with --no-retry-on-lost,
// --retry-on-timeout with --no-retry-on-timeout, --clear-workdir with --workdir, a variable or
// worker label both set and unset).
CliResult<nlohmann::json> BuildTaskBody(const TaskContentFlags& flags,
                                        const std::optional<std::string>& name,
                                        const nlohmann::json* current);

// Sets one environment variable of `body`'s spec per --secret-env VAR=SECRET[@VERSION] to the
// SecretRef of that secret in the project with id `project_id` (the value is never sent or
// known here). Usage errors (exit 2): invalid_secret_env (not VAR=NAME[@N], an invalid secret
// name or version, a variable given twice or also given with --env).
CliResult<nlohmann::json> AddSecretEnvironment(const std::vector<std::string>& secret_env,
                                               const std::vector<std::string>& env,
                                               const std::string& project_id,
                                               nlohmann::json body);

struct TaskAddArgs {
  std::string name;
  TaskContentFlags content;
};

struct TaskListArgs {
  int64_t limit = 1000;  // tasks to show at most
  std::string cursor;    // --cursor: a next_cursor printed before
  std::optional<std::string> text;         // --search TEXT: in the name
  std::optional<std::string> label;        // --label KEY[=VALUE]
  std::optional<std::string> last_status;  // --last-status STATUS|none
};

struct TaskPublishArgs {
  std::string task_id;  // a name or an id
  // The revision replaced; 0 (`task edit` without --expected-revision): the current one.
  int64_t expected_revision = 0;
  std::optional<std::string> name;  // --name NEW
  TaskContentFlags content;
  bool repin = false;  // repin the task's triggers in the same transaction (`task edit`)
  bool edit = false;   // `task edit`: the expected revision may be left out
};

// POST /api/v1/tasks; prints the new task id (--json: the task object).
int TaskAdd(const TaskAddArgs& args, CommandContext& context);
// GET /api/v1/tasks (following cursors); prints a table (--json: an array of tasks).
int TaskList(const TaskListArgs& args, CommandContext& context);
// GET /api/v1/tasks/{id} and its revisions; prints the current revision and the history
// (--json: the task with a `revisions` array, newest first).
int TaskShow(const std::string& task_id, CommandContext& context);
// POST /api/v1/tasks/{id}/revisions on top of the current revision; prints the new revision
// number (--json: the task object).
int TaskPublish(const TaskPublishArgs& args, CommandContext& context);
// DELETE /api/v1/tasks/{id or name}; prints "<id> deleted" and the triggers deleted with it
// (--json: the task object).
int TaskRemove(const std::string& task_ref, CommandContext& context);

// Registers `task add|list|show|publish` on `app` (and the global options on its root).
void RegisterTaskCommands(CLI::App& app);

}  // namespace ql::cli
