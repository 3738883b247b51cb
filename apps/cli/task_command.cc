#include "task_command.h"

#include <functional>
#include <map>
#include <memory>

#include "output.h"
#include "ql/core/artifact.h"
#include "ql/core/clock.h"
#include "ql/core/ids.h"
#include "ql/core/secret_ref.h"
#include "retention_command.h"

namespace ql::cli {
namespace {

using nlohmann::json;

// Parses NAME=VALUE pairs into an object; `what` names the flag in messages.
CliResult<json> PairsFlag(const std::string& flag, const std::string& reason,
                          const std::vector<std::string>& pairs) {
  json out = json::object();
  for (const std::string& pair : pairs) {
    const size_t eq = pair.find('=');
    if (eq == std::string::npos || eq == 0) {
      return CliError::Usage(reason, flag + " '" + pair + "' must be NAME=VALUE");
    }
    const std::string name = pair.substr(0, eq);
    if (out.contains(name)) {
      return CliError::Usage(reason, flag + " names '" + name + "' twice");
    }
    out[name] = pair.substr(eq + 1);
  }
  return out;
}

// The pool a task runs in when its spec names none (ql/core/placement.h).
constexpr char kDefaultPoolName[] = "default";

std::string NewMutationId() { return NewUuidV7(SystemClock().NowMs(), SecureRandom()); }

std::string TaskPath(const std::string& id) { return "/api/v1/tasks/" + UrlEncode(id); }

// Adds the content flags shared by add and publish to `command`.
void AddContentFlags(CLI::App* command, const std::shared_ptr<TaskContentFlags>& flags,
                     bool publish) {
  command->add_option_function<std::string>(
      "--shell", [flags](const std::string& v) { flags->shell = v; },
      "Run COMMAND with /bin/sh -c (quote it)");
  command->add_flag("--bash", flags->bash, "Run the --shell command with /bin/bash instead");
  command->add_option_function<std::string>(
      "--argv", [flags](const std::string& v) { flags->argv_file = v; },
      "Run FILE (an absolute path) directly, no shell, with the ARGS that follow; when an "
      "argument starts with '-', put all ARGS after `--`");
  command->add_option_function<std::string>(
      "--script", [flags](const std::string& v) { flags->script = v; },
      "Run a script of the project (ql script push): NAME for its latest version, pinned when "
      "published, or NAME@VERSION; the ARGS that follow are its arguments");
  command->add_option_function<std::string>(
      "--interpreter", [flags](const std::string& v) { flags->interpreter = v; },
      "The --script's interpreter: node, python3, sh or bash (default: by its extension)");
  // A minimum of one value keeps `--` and what follows in this command rather than its parent.
  command
      ->add_option("args", flags->args,
                   "Arguments for --argv FILE (all after `--` when one starts with '-')")
      ->expected(1, -1);
  command->add_option("--arg", flags->extra_args, "One more argument for --argv (repeatable)")
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  command->add_option_function<std::string>(
      "--timeout", [flags](const std::string& v) { flags->timeout = v; },
      "Kill the command after this long: 500ms, 30s, 5m, 2h, 1d, 1h30m or milliseconds "
      "(server default 1d)");
  command
      ->add_option("--env", flags->env,
                   "Set environment variable NAME=VALUE (repeatable; an edit keeps the other "
                   "variables)")
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  command
      ->add_option("--secret-env", flags->secret_env,
                   "Environment variable VAR=SECRET[@VERSION] set from a secret of the project "
                   "when the command starts (repeatable; see `ql secret`)")
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  command->add_option_function<std::string>(
      "--workdir", [flags](const std::string& v) { flags->workdir = v; },
      "Working directory (absolute path)");
  command
      ->add_option("--label", flags->labels,
                   "Set label KEY=VALUE (repeatable; an edit keeps the other labels)")
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  command->add_flag("--disabled", flags->disabled,
                    "Publish the revision disabled: triggers admit nothing and manual runs are "
                    "refused");
  command->add_option_function<int64_t>(
      "--max-attempts", [flags](const int64_t& v) { flags->max_attempts = v; },
      "Attempts per run, 1-16 (retry policy)");
  command->add_flag("--retry-on-lost", flags->retry_on_lost,
                    "Retry attempts lost with their executor; declares the command safe to run "
                    "twice (--safety idempotent) unless --safety says otherwise");
  command->add_flag("--retry-on-timeout", flags->retry_on_timeout,
                    "Retry an attempt that ran into --timeout as a failed one is retried (up to "
                    "--max-attempts, same backoff); without it a timeout ends the run");
  command
      ->add_option_function<std::string>(
          "--safety", [flags](const std::string& v) { flags->safety = v; },
          "Whether a repeated run is harmless: unknown, idempotent or deduplicated")
      ->check(CLI::IsMember({"unknown", "idempotent", "deduplicated"}));
  command->add_option_function<std::string>(
      "--backoff", [flags](const std::string& v) { flags->backoff = v; },
      "First retry delay (duration)");
  command->add_option_function<std::string>(
      "--backoff-max", [flags](const std::string& v) { flags->backoff_max = v; },
      "Longest retry delay (duration)");
  command->add_option_function<std::string>(
      "--mutation-id", [flags](const std::string& v) { flags->mutation_id = v; },
      "Idempotency id of this write: repeating the command with the same id replays it "
      "instead of writing twice (default: a fresh id)");
  command->add_flag("--require-approval", flags->require_approval,
                    "Manual runs wait until another principal approves them");
  command
      ->add_option_function<std::string>(
          "--approver-role", [flags](const std::string& v) { flags->approver_role = v; },
          "Who approves: admin (default) or owner")
      ->check(CLI::IsMember({"admin", "owner"}));
  command->add_option_function<std::string>(
      "--approval-ttl", [flags](const std::string& v) { flags->approval_ttl = v; },
      "How long a request waits for a decision (duration, default 24h)");
  command->add_option_function<int64_t>(
      "--concurrency", [flags](const int64_t& v) { flags->concurrency = v; },
      "At most N unfinished runs of the task: a cron occurrence beyond it is recorded as "
      "skipped (manual runs are not limited)");
  command->add_option_function<int64_t>(
      "--memory-mib", [flags](const int64_t& v) { flags->memory_mib = v; },
      "Memory limit of the command in MiB (at most the installation's)");
  command->add_option_function<int64_t>(
      "--pids", [flags](const int64_t& v) { flags->pids = v; },
      "Processes and threads the command may have at once (at most the installation's)");
  command->add_option_function<int64_t>(
      "--cpu-seconds", [flags](const int64_t& v) { flags->cpu_seconds = v; },
      "CPU seconds each process of the command may use");
  command->add_option_function<int64_t>(
      "--open-files", [flags](const int64_t& v) { flags->open_files = v; },
      "Open files of each process of the command (at most the installation's)");
  command
      ->add_option_function<std::string>(
          "--network", [flags](const std::string& v) { flags->network = v; },
          "host (default) or none: the command gets only a loopback interface")
      ->check(CLI::IsMember({"host", "none"}));
  command
      ->add_option_function<std::string>(
          "--isolation", [flags](const std::string& v) { flags->isolation = v; },
          "confined (default) or none: run as the daemon's user without namespaces, only where "
          "the installation allows it (--allow-unconfined-tasks)")
      ->check(CLI::IsMember({"confined", "none"}));
  command
      ->add_option_function<std::string>(
          "--pool", [flags](const std::string& v) { flags->pool = v; },
          "Run on a worker of this pool (`default`: the default pool; with no --worker-label it "
          "drops the placement)")
      ->type_name("POOL");
  command
      ->add_option("--worker-label", flags->worker_labels,
                   "Run only on workers with label KEY=VALUE (repeatable; an edit keeps the "
                   "other worker labels). Not --label, the task's own labels")
      ->type_name("KEY=VALUE")
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  if (publish) {
    command->add_flag("--clear-worker-labels", flags->clear_worker_labels,
                      "Start from no worker labels: with --worker-label, replace them all; "
                      "alone, remove them");
    command
        ->add_option("--unset-worker-label", flags->unset_worker_labels,
                     "Remove one worker label (repeatable)")
        ->expected(1)
        ->allow_extra_args(false)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    command->add_flag("--clear-limits", flags->clear_limits,
                      "Publish without limits of the task's own (the installation's apply)");
    command->add_flag("--no-concurrency", flags->no_concurrency,
                      "Publish without a concurrency limit");
    command->add_flag("--no-approval", flags->no_approval,
                      "Publish without an approval requirement");
    command->add_flag("--enabled", flags->enabled, "Publish the revision enabled");
    command->add_flag("--clear-env", flags->clear_env,
                      "Start from an empty environment: with --env, replace the whole "
                      "environment; alone, remove every variable");
    command
        ->add_option("--unset-env", flags->unset_env,
                     "Remove one environment variable, plain or secret (repeatable)")
        ->expected(1)
        ->allow_extra_args(false)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    command->add_flag("--clear-workdir", flags->clear_workdir,
                      "Publish without a working directory");
    command->add_flag("--clear-labels", flags->clear_labels,
                      "Start from no labels: with --label, replace them all; alone, remove them");
    command->add_option("--unset-label", flags->unset_labels, "Remove one label (repeatable)")
        ->expected(1)
        ->allow_extra_args(false)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    command->add_flag("--no-retry-on-lost", flags->no_retry_on_lost,
                      "Stop retrying attempts lost with their executor");
    command->add_flag("--no-retry-on-timeout", flags->no_retry_on_timeout,
                      "Stop retrying attempts that ran into their timeout");
  }
}

// How one environment variable reads: NAME=VALUE, or NAME ← secret SECRET (latest | vN).
std::string EnvEntryText(const std::string& name, const json& value) {
  const std::string text = value.is_string() ? value.get<std::string>() : value.dump();
  if (text.starts_with("qlsecret:")) {
    if (Result<SecretRef> ref = DecodeSecretRef(text); ref.ok()) {
      return name + " \u2190 secret " + ref->name +
             (ref->version.has_value() ? " v" + std::to_string(*ref->version) : " (latest)");
    }
  }
  return name + "=" + ShellQuote(text);
}

std::string EnvironmentSummary(const json& spec) {
  if (!spec.contains("environment") || !spec["environment"].is_object() ||
      spec["environment"].empty()) {
    return "-";
  }
  std::string out;
  for (const auto& [name, value] : spec["environment"].items()) {
    if (!out.empty()) out += ", ";
    out += EnvEntryText(name, value);
  }
  return out;
}

std::string Compact(const json& value) {
  if (value.is_null()) return "-";
  if (value.is_string()) return value.get<std::string>();
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

// Adds to `out` one line per key of two objects that differs: "+what KEY=V", "-what KEY",
// "what KEY: old -> new"; `entry` formats one key and value.
void MapChanges(const std::string& what, const json& before, const json& after,
                const std::function<std::string(const std::string&, const json&)>& entry,
                std::vector<std::string>& out) {
  const json empty = json::object();
  const json& b = before.is_object() ? before : empty;
  const json& a = after.is_object() ? after : empty;
  for (const auto& [key, value] : a.items()) {
    if (!b.contains(key)) {
      out.push_back("+" + what + " " + entry(key, value));
    } else if (b[key] != value) {
      out.push_back(what + " " + entry(key, b[key]) + " -> " + entry(key, value));
    }
  }
  for (const auto& [key, value] : b.items()) {
    if (!a.contains(key)) out.push_back("-" + what + " " + key);
  }
}

// What a new revision changed, one line each, for people: the name, enabled, the command and
// every other spec field, each environment variable and label, the retry and approval policies
// and the concurrency limit.
std::vector<std::string> RevisionChanges(const json& before, const json& after) {
  std::vector<std::string> out;
  for (const char* key : {"name", "enabled"}) {
    if (before.value(key, json()) != after.value(key, json())) {
      out.push_back(std::string(key) + ": " + Compact(before.value(key, json())) + " -> " +
                    Compact(after.value(key, json())));
    }
  }
  const json b = before.value("spec", json::object());
  const json a = after.value("spec", json::object());
  if (b.value("command", json()) != a.value("command", json())) {
    out.push_back("command: " + CommandSummary(b) + " -> " + CommandSummary(a));
  }
  json other_b = b, other_a = a;
  for (const char* key : {"command", "environment"}) {
    other_b.erase(key);
    other_a.erase(key);
  }
  MapChanges(
      "spec", other_b, other_a,
      [](const std::string& key, const json& value) { return key + "=" + Compact(value); }, out);
  MapChanges("env", b.value("environment", json::object()), a.value("environment", json::object()),
             EnvEntryText, out);
  MapChanges(
      "label", before.value("labels", json::object()), after.value("labels", json::object()),
      [](const std::string& key, const json& value) { return key + "=" + Compact(value); }, out);
  for (const char* key : {"retry", "approval", "concurrency"}) {
    if (before.value(key, json()) != after.value(key, json())) {
      out.push_back(std::string(key) + ": " + Compact(before.value(key, json())) + " -> " +
                    Compact(after.value(key, json())));
    }
  }
  return out;
}

// A schedule in words when its expression has a common shape, the expression and its zone always.
std::string ScheduleWords(const json& schedule) {
  const std::string expression = JsonText(schedule, "expression", "");
  const std::string words = DescribeCron(expression);
  return (words.empty() ? expression : words + " (" + expression + ")") + " " +
         JsonText(schedule, "timezone", "");
}

// One schedule of the cron list: ScheduleWords, and its state unless it is active.
std::string ScheduleText(const json& schedule) {
  std::string out = ScheduleWords(schedule);
  const std::string state = JsonText(schedule, "state", "");
  if (state != "active") out += " [" + state + "]";
  return out;
}

std::string SchedulesText(const json& task) {
  const json schedules = task.value("schedules", json::array());
  if (!schedules.is_array() || schedules.empty()) return "manual";
  const bool task_enabled = task.value("enabled", true);
  std::string out;
  for (json schedule : schedules) {
    // A disabled task's triggers wait for it; that is what ENABLED says already.
    if (!task_enabled && schedule.value("state", "") == "pin_stale") schedule["state"] = "active";
    out += (out.empty() ? "" : "; ") + ScheduleText(schedule);
  }
  return out;
}

// The last run for the cron list: "succeeded 3m ago (1.2s)", "running (started 12s ago)".
std::string LastRunText(const json& task, int64_t now_ms) {
  const json last = task.value("last_run", json());
  if (!last.is_object()) return "never";
  const std::string status = JsonText(last, "status", "?");
  const std::string finished = JsonText(last, "finished_at", "");
  if (!finished.empty()) {
    std::string out = status + " " + RelativeTime(finished, now_ms);
    const std::string elapsed = JsonElapsed(last, "started_at", "finished_at", "");
    if (!elapsed.empty()) out += " (" + elapsed + ")";
    return out;
  }
  const std::string started = JsonText(last, "started_at", "");
  if (!started.empty()) return status + " (started " + RelativeTime(started, now_ms) + ")";
  return status + " (" + RelativeTime(JsonText(last, "created_at", ""), now_ms) + ")";
}

std::string LabelsSummary(const json& labels) {
  if (!labels.is_object() || labels.empty()) return "-";
  std::string out;
  for (const auto& [key, value] : labels.items()) {
    if (!out.empty()) out += ", ";
    out += key + "=" + (value.is_string() ? value.get<std::string>() : value.dump());
  }
  return out;
}

std::string RetrySummary(const json& retry) {
  if (!retry.is_object()) return "-";
  const int64_t attempts = retry.value("max_attempts", int64_t{1});
  std::string out = std::to_string(attempts) + (attempts == 1 ? " attempt" : " attempts");
  if (attempts > 1) {
    out += ", backoff " + FormatDurationMs(retry.value("backoff_base_ms", int64_t{0})) + ".." +
           FormatDurationMs(retry.value("backoff_max_ms", int64_t{0}));
  }
  if (retry.value("retry_on_lost", false)) out += ", retries lost attempts";
  if (retry.value("retry_on_timeout", false)) {
    out += ", retries timeouts";
  } else if (attempts > 1) {
    out += ", timeouts not retried";
  }
  out += ", safety " + retry.value("safety", std::string("unknown"));
  return out;
}

std::string TimeoutSummary(const json& spec) {
  if (spec.contains("timeoutMs") && spec["timeoutMs"].is_number_integer()) {
    return FormatDurationMs(spec["timeoutMs"].get<int64_t>());
  }
  return "-";
}

}  // namespace

CliResult<json> BuildTaskBody(const TaskContentFlags& flags, const std::optional<std::string>& name,
                              const json* current) {
  const bool has_shell = flags.shell.has_value();
  const bool has_argv = flags.argv_file.has_value();
  const bool has_script = flags.script.has_value();
  if (int(has_shell) + int(has_argv) + int(has_script) > 1) {
    return CliError::Usage("command_conflict", "give one of --shell, --argv and --script");
  }
  if (flags.interpreter && !has_script) {
    return CliError::Usage("command_conflict", "--interpreter applies to --script commands");
  }
  if (flags.bash && has_argv) {
    return CliError::Usage("command_conflict", "--bash applies to --shell commands, not --argv");
  }
  if ((!flags.extra_args.empty() || !flags.args.empty()) && !has_argv && !has_script) {
    std::string first = flags.args.empty() ? flags.extra_args.front() : flags.args.front();
    return CliError::Usage("command_conflict", "argument '" + first +
                                                   "' belongs to a command run with --argv FILE; "
                                                   "give --argv, or quote the --shell command");
  }
  if (flags.enabled && flags.disabled) {
    return CliError::Usage("flag_conflict", "give either --enabled or --disabled, not both");
  }
  if (flags.clear_workdir && flags.workdir) {
    return CliError::Usage("flag_conflict", "--clear-workdir cannot be combined with --workdir");
  }
  if (flags.retry_on_lost && flags.no_retry_on_lost) {
    return CliError::Usage("flag_conflict",
                           "give either --retry-on-lost or --no-retry-on-lost, not both");
  }
  if (flags.retry_on_timeout && flags.no_retry_on_timeout) {
    return CliError::Usage("flag_conflict",
                           "give either --retry-on-timeout or --no-retry-on-timeout, not both");
  }

  json spec = json::object();
  json labels = json::object();
  bool enabled = true;
  std::string task_name = name.value_or("");
  if (current != nullptr) {
    if (current->contains("spec") && (*current)["spec"].is_object()) spec = (*current)["spec"];
    if (current->contains("labels") && (*current)["labels"].is_object()) {
      labels = (*current)["labels"];
    }
    enabled = current->value("enabled", true);
    if (!name) task_name = current->value("name", "");
  }

  // The command.
  if (has_shell) {
    spec["command"] = {{"kind", "shell"},
                       {"command", *flags.shell},
                       {"shell", flags.bash ? "/bin/bash" : "/bin/sh"}};
  } else if (has_argv) {
    std::vector<std::string> args = flags.args;
    args.insert(args.end(), flags.extra_args.begin(), flags.extra_args.end());
    spec["command"] = {{"kind", "argv"}, {"file", *flags.argv_file}, {"args", args}};
  } else if (has_script) {
    Result<ScriptRef> ref = ParseScriptRef(*flags.script);
    if (!ref.ok()) return CliError::Usage(ref.status().reason(), ref.status().message());
    std::vector<std::string> args = flags.args;
    args.insert(args.end(), flags.extra_args.begin(), flags.extra_args.end());
    json command = {{"kind", "script"}, {"script", ref->name}, {"args", args}};
    if (ref->version) command["version"] = *ref->version;
    if (flags.interpreter) command["interpreter"] = *flags.interpreter;
    spec["command"] = std::move(command);
  } else if (flags.repin_scripts) {
    if (!spec.contains("command") || !spec["command"].is_object() ||
        spec["command"].value("kind", "") != "script") {
      return CliError::Usage("task_not_script",
                             "this task runs no script: nothing to repin (ql task publish "
                             "--script NAME makes it run one)");
    }
    json& command = spec["command"];
    // An interpreter the entry's extension implied is chosen again for the new entry.
    const std::optional<std::string> implied =
        InterpreterForPath(command.value("entry", std::string()));
    if (implied && command.value("interpreter", std::string()) == *implied) {
      command.erase("interpreter");
    }
    for (const char* pin : {"version", "digest", "scriptKind", "entry"}) command.erase(pin);
  } else if (!spec.contains("command")) {
    return CliError::Usage("command_required",
                           "give the command: --shell 'COMMAND', --argv FILE [ARGS...] or "
                           "--script NAME [ARGS...]");
  } else if (flags.bash) {
    if (!spec["command"].is_object() || spec["command"].value("kind", "") != "shell") {
      return CliError::Usage("command_conflict",
                             "--bash applies to shell commands; this task runs an argv command");
    }
    spec["command"]["shell"] = "/bin/bash";
  }

  if (flags.timeout) {
    CliResult<int64_t> ms = DurationFlag("--timeout", *flags.timeout);
    if (!ms.ok()) return ms.error();
    spec["timeoutMs"] = *ms;
  }
  // The environment: each --env sets one variable, each --unset-env removes one.
  if (flags.clear_env || !spec.contains("environment") || !spec["environment"].is_object()) {
    spec["environment"] = json::object();
  }
  {
    CliResult<json> env = PairsFlag("--env", "invalid_env", flags.env);
    if (!env.ok()) return env.error();
    for (const std::string& name : flags.unset_env) {
      if (env->contains(name)) {
        return CliError::Usage("flag_conflict", name + " is both set (--env) and unset");
      }
      if (!spec["environment"].contains(name)) {
        return CliError::Usage("unknown_env", "--unset-env " + name +
                                                  ": the task has no environment variable " + name);
      }
      spec["environment"].erase(name);
    }
    for (const auto& [name, value] : env->items()) spec["environment"][name] = value;
  }
  if (flags.clear_workdir) spec.erase("workingDirectory");
  if (flags.workdir) spec["workingDirectory"] = *flags.workdir;
  // Limits: each flag given changes one limit and keeps the others.
  if (flags.clear_limits && (flags.memory_mib || flags.pids || flags.cpu_seconds ||
                             flags.open_files)) {
    return CliError::Usage("flag_conflict", "--clear-limits cannot be combined with a limit");
  }
  if (flags.clear_limits) spec.erase("limits");
  json limits = spec.contains("limits") && spec["limits"].is_object() ? spec["limits"]
                                                                      : json::object();
  if (flags.memory_mib) limits["memoryMib"] = *flags.memory_mib;
  if (flags.pids) limits["pids"] = *flags.pids;
  if (flags.cpu_seconds) limits["cpuSeconds"] = *flags.cpu_seconds;
  if (flags.open_files) limits["openFiles"] = *flags.open_files;
  if (!limits.empty()) spec["limits"] = limits;
  if (flags.network) {
    if (*flags.network == "none") {
      spec["network"] = "none";
    } else {
      spec.erase("network");
    }
  }
  if (flags.isolation) {
    if (*flags.isolation == "none") {
      spec["isolation"] = "none";
    } else {
      spec.erase("isolation");
    }
  }

  // Placement: the pool and the worker labels, changed like the task's labels.
  if (flags.pool || !flags.worker_labels.empty() || !flags.unset_worker_labels.empty() ||
      flags.clear_worker_labels) {
    const json current_placement = spec.value("placement", json::object());
    std::string pool = current_placement.is_object()
                           ? current_placement.value("pool", std::string(kDefaultPoolName))
                           : std::string(kDefaultPoolName);
    json worker_labels = current_placement.is_object()
                             ? current_placement.value("labels", json::object())
                             : json::object();
    if (!worker_labels.is_object()) worker_labels = json::object();
    CliResult<json> parsed =
        PairsFlag("--worker-label", "invalid_worker_label", flags.worker_labels);
    if (!parsed.ok()) return parsed.error();
    for (const std::string& key : flags.unset_worker_labels) {
      if (parsed->contains(key)) {
        return CliError::Usage("flag_conflict", "worker label " + key + " is both set and unset");
      }
      if (!worker_labels.contains(key)) {
        return CliError::Usage("unknown_worker_label", "--unset-worker-label " + key +
                                                           ": the task has no worker label " + key);
      }
      worker_labels.erase(key);
    }
    if (flags.pool) pool = *flags.pool;
    // `--pool default` alone goes back to no placement at all.
    if (flags.clear_worker_labels ||
        (flags.pool && *flags.pool == kDefaultPoolName && flags.worker_labels.empty())) {
      worker_labels = json::object();
    }
    for (const auto& [key, value] : parsed->items()) worker_labels[key] = value;
    if (pool == kDefaultPoolName && worker_labels.empty()) {
      spec.erase("placement");
    } else {
      json placement = {{"pool", pool}};
      if (!worker_labels.empty()) placement["labels"] = worker_labels;
      spec["placement"] = std::move(placement);
    }
  }

  // Labels: each --label sets one, each --unset-label removes one.
  if (flags.clear_labels) labels = json::object();
  {
    CliResult<json> parsed = PairsFlag("--label", "invalid_label", flags.labels);
    if (!parsed.ok()) return parsed.error();
    for (const std::string& key : flags.unset_labels) {
      if (parsed->contains(key)) {
        return CliError::Usage("flag_conflict", "label " + key + " is both set and unset");
      }
      if (!labels.contains(key)) {
        return CliError::Usage("unknown_label",
                               "--unset-label " + key + ": the task has no label " + key);
      }
      labels.erase(key);
    }
    for (const auto& [key, value] : parsed->items()) labels[key] = value;
  }
  if (flags.disabled) enabled = false;
  if (flags.enabled) enabled = true;

  json body = {{"name", task_name}, {"spec", spec}, {"labels", labels}, {"enabled", enabled}};

  // The retry policy is part of the revision's content: a publish keeps the current one.
  json retry = json::object();
  if (current != nullptr && current->contains("retry") && (*current)["retry"].is_object()) {
    retry = (*current)["retry"];
  }
  if (flags.max_attempts) retry["max_attempts"] = *flags.max_attempts;
  if (flags.safety) retry["safety"] = *flags.safety;
  if (flags.retry_on_lost) {
    retry["retry_on_lost"] = true;
    if (!flags.safety && retry.value("safety", "unknown") == "unknown") {
      retry["safety"] = "idempotent";
    }
  }
  if (flags.no_retry_on_lost) retry["retry_on_lost"] = false;
  if (flags.retry_on_timeout) retry["retry_on_timeout"] = true;
  if (flags.no_retry_on_timeout) retry["retry_on_timeout"] = false;
  if (flags.backoff) {
    CliResult<int64_t> ms = DurationFlag("--backoff", *flags.backoff);
    if (!ms.ok()) return ms.error();
    retry["backoff_base_ms"] = *ms;
  }
  if (flags.backoff_max) {
    CliResult<int64_t> ms = DurationFlag("--backoff-max", *flags.backoff_max);
    if (!ms.ok()) return ms.error();
    retry["backoff_max_ms"] = *ms;
  }
  if (!retry.empty()) body["retry"] = retry;

  // The approval policy is part of the revision too: a publish keeps the current one.
  if (flags.no_approval && (flags.require_approval || flags.approver_role || flags.approval_ttl)) {
    return CliError::Usage("flag_conflict",
                           "--no-approval cannot be combined with the other approval flags");
  }
  json approval = json::object();
  if (current != nullptr && current->contains("approval") &&
      (*current)["approval"].is_object()) {
    approval = (*current)["approval"];
  }
  if ((flags.approver_role || flags.approval_ttl) && !flags.require_approval &&
      !approval.value("required", false)) {
    return CliError::Usage("flag_conflict",
                           "--approver-role and --approval-ttl need --require-approval");
  }
  if (flags.require_approval) approval["required"] = true;
  if (flags.approver_role) approval["approver_role"] = *flags.approver_role;
  if (flags.approval_ttl) {
    CliResult<int64_t> ms = DurationFlag("--approval-ttl", *flags.approval_ttl);
    if (!ms.ok()) return ms.error();
    approval["ttl_ms"] = *ms;
  }
  if (!flags.no_approval && !approval.empty()) body["approval"] = approval;

  // So is the concurrency limit: a publish keeps the current one.
  if (flags.no_concurrency && flags.concurrency) {
    return CliError::Usage("flag_conflict", "give either --concurrency or --no-concurrency");
  }
  if (flags.concurrency) {
    body["concurrency"] = *flags.concurrency;
  } else if (!flags.no_concurrency && current != nullptr && current->contains("concurrency") &&
             (*current)["concurrency"].is_number_integer()) {
    body["concurrency"] = (*current)["concurrency"];
  }
  return body;
}

CliResult<json> AddSecretEnvironment(const std::vector<std::string>& secret_env,
                                     const std::vector<std::string>& env,
                                     const std::string& project_id, json body) {
  CliResult<json> pairs = PairsFlag("--secret-env", "invalid_secret_env", secret_env);
  if (!pairs.ok()) return pairs.error();
  json& environment = body["spec"]["environment"];
  for (const auto& [variable, target] : pairs->items()) {
    for (const std::string& plain : env) {
      if (plain.starts_with(variable + "=")) {
        return CliError::Usage("invalid_secret_env",
                               variable + " is given with both --env and --secret-env");
      }
    }
    std::string name = target.get<std::string>();
    std::optional<int64_t> version;
    if (const size_t at = name.find('@'); at != std::string::npos) {
      const std::string digits = name.substr(at + 1);
      if (digits.empty() || digits.size() > 18 ||
          digits.find_first_not_of("0123456789") != std::string::npos || digits[0] == '0') {
        return CliError::Usage("invalid_secret_env", "--secret-env " + variable +
                                                         ": version '" + digits +
                                                         "' is not a number from 1");
      }
      version = std::stoll(digits);
      name.resize(at);
    }
    Result<std::string> ref = EncodeSecretRef(SecretRef{project_id, name, version});
    if (!ref.ok()) {
      return CliError::Usage("invalid_secret_env",
                             "--secret-env " + variable + ": " + ref.status().message());
    }
    environment[variable] = *ref;
  }
  return body;
}

// Returns `body` with the --secret-env variables set, naming secrets of the project the
// command works in.
CliResult<json> WithSecretEnvironment(const TaskContentFlags& flags, ApiClient& api, json body) {
  if (flags.secret_env.empty()) return body;
  CliResult<json> status = api.GetJson("/api/v1/status");
  if (!status.ok()) return status.error();
  const std::string project_id =
      (*status).value("project", json::object()).value("id", std::string());
  return AddSecretEnvironment(flags.secret_env, flags.env, project_id, std::move(body));
}

int TaskAdd(const TaskAddArgs& args, CommandContext& context) {
  CliResult<json> body = BuildTaskBody(args.content, args.name, nullptr);
  if (!body.ok()) return context.Fail(body.error());
  (*body)["mutation_id"] = args.content.mutation_id.value_or(NewMutationId());
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  body = WithSecretEnvironment(args.content, **api, std::move(*body));
  if (!body.ok()) return context.Fail(body.error());
  CliResult<json> task = (*api)->PostJson("/api/v1/tasks", *body);
  if (!task.ok()) return context.Fail(task.error());
  if (context.json()) {
    context.out() << JsonOutput(*task) << "\n";
  } else {
    context.out() << JsonText(*task, "id", "") << "\n";
  }
  return kExitOk;
}

int TaskList(const TaskListArgs& args, CommandContext& context) {
  if (args.limit < 1) {
    return context.Fail(CliError::Usage("invalid_limit", "--limit must be at least 1"));
  }
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  CliResult<Listing> tasks = ListFrom(**api, "/api/v1/tasks",
                                      {{"q", args.text.value_or("")},
                                       {"label", args.label.value_or("")},
                                       {"last_status", args.last_status.value_or("")}},
                                      args.limit, args.cursor);
  if (!tasks.ok()) return context.Fail(tasks.error());
  if (context.json()) {
    context.out() << JsonOutput(tasks->ToJson()) << "\n";
    return kExitOk;
  }
  const int64_t now = SystemClock().NowMs();
  std::vector<std::string> headers = {"NAME", "SCHEDULE", "ENABLED", "LAST RUN", "NEXT FIRE"};
  if (context.wide()) {
    headers.insert(headers.begin(), "ID");
    headers.push_back("COMMAND");
  }
  Table table(headers);
  for (const json& task : tasks->items) {
    const bool enabled = JsonText(task, "enabled") == "true";
    const std::string next = JsonText(task, "next_fire_at", "");
    std::vector<std::string> row = {
        Ellipsize(JsonText(task, "name"), 32), Ellipsize(SchedulesText(task), 64),
        enabled ? "yes" : "no", LastRunText(task, now),
        next.empty() ? "-" : RelativeTime(next, now) + " (" + next + ")"};
    if (context.wide()) {
      row.insert(row.begin(), JsonText(task, "id"));
      row.push_back(
          Ellipsize(PrintableCell(CommandSummary(task.value("spec", json::object()))), 48));
    }
    table.AddRow(std::move(row));
  }
  table.Print(context.out());
  return kExitOk;
}

int TaskSetEnabled(const std::string& task_ref, bool enabled, CommandContext& context) {
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  CliResult<json> task =
      (*api)->PostJson(TaskPath(task_ref) + (enabled ? "/enable" : "/disable"), json::object());
  if (!task.ok()) return context.Fail(task.error());
  if (context.json()) {
    context.out() << JsonOutput(*task) << "\n";
    return kExitOk;
  }
  context.out() << JsonText(*task, "name") << (enabled ? " enabled" : " disabled") << " (revision "
                << JsonText(*task, "revision") << ")\n";
  return kExitOk;
}

int TaskShow(const std::string& task_id, CommandContext& context) {
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  CliResult<json> task = (*api)->GetJson(TaskPath(task_id));
  if (!task.ok()) return context.Fail(task.error());
  CliResult<json> history = (*api)->GetJson(TaskPath(task_id) + "/revisions");
  if (!history.ok()) return context.Fail(history.error());
  const json revisions = history->value("items", json::array());
  if (context.json()) {
    json out = *task;
    out["revisions"] = revisions;
    context.out() << JsonOutput(out) << "\n";
    return kExitOk;
  }
  const json spec = task->value("spec", json::object());
  const json command = spec.value("command", json::object());
  Table fields({"FIELD", "VALUE"});
  if (context.wide()) fields.AddRow({"id", JsonText(*task, "id")});
  fields.AddRow({"name", JsonText(*task, "name")});
  fields.AddRow({"revision", JsonText(*task, "revision")});
  fields.AddRow({"enabled", JsonText(*task, "enabled")});
  if (task->contains("deleted_at") && !(*task)["deleted_at"].is_null()) {
    fields.AddRow({"deleted", JsonText(*task, "deleted_at")});
  }
  if (JsonText(command, "kind", "") == "shell") {
    fields.AddRow({"shell", JsonText(command, "shell")});
    fields.AddRow({"command", JsonText(command, "command")});
  } else {
    fields.AddRow({"argv", CommandSummary(spec)});
  }
  fields.AddRow({"environment", EnvironmentSummary(spec)});
  fields.AddRow({"workdir", JsonText(spec, "workingDirectory")});
  fields.AddRow({"timeout", TimeoutSummary(spec)});
  {
    const json limits = spec.value("limits", json::object());
    std::string summary;
    for (const auto& [key, label] : {std::pair{"memoryMib", " MiB memory"},
                                     std::pair{"pids", " processes"},
                                     std::pair{"cpuSeconds", " CPU s"},
                                     std::pair{"openFiles", " open files"}}) {
      if (!limits.contains(key)) continue;
      if (!summary.empty()) summary += ", ";
      summary += limits[key].dump() + label;
    }
    fields.AddRow({"limits", summary.empty() ? "the installation's" : summary});
    fields.AddRow({"network", spec.value("network", std::string("host"))});
    fields.AddRow({"isolation", spec.value("isolation", std::string("confined"))});
  }
  if (spec.contains("placement") && spec["placement"].is_object()) {
    const json& placement = spec["placement"];
    const std::string worker_labels = KeyValueList(placement.value("labels", json::object()));
    fields.AddRow({"placement", "pool " + JsonText(placement, "pool", kDefaultPoolName) +
                                    (worker_labels.empty() ? "" : ", labels " + worker_labels)});
  }
  fields.AddRow({"labels", LabelsSummary(task->value("labels", json::object()))});
  fields.AddRow({"retry", RetrySummary(task->value("retry", json()))});
  fields.AddRow({"concurrency", task->value("concurrency", json()).is_null()
                                    ? "unlimited"
                                    : JsonText(*task, "concurrency")});
  fields.AddRow({"digest", JsonText(*task, "content_digest")});
  fields.AddRow({"created", JsonText(*task, "created_at")});
  fields.AddRow({"updated", JsonText(*task, "updated_at")});
  fields.Print(context.out());

  // Its schedules with their next fires, and its last runs.
  const int64_t now = SystemClock().NowMs();
  context.out() << "\n";
  Table triggers({"TRIGGER", "SCHEDULE", "STATE", "NEXT FIRES"});
  for (const json& schedule : task->value("schedules", json::array())) {
    std::string fires = "-";
    if (JsonText(schedule, "state", "") == "active") {
      CliResult<json> next = (*api)->GetJson(
          "/api/v1/triggers/" + UrlEncode(JsonText(schedule, "trigger_id", "")) + "/next?count=3");
      if (!next.ok()) return context.Fail(next.error());
      fires.clear();
      for (const json& fire : next->value("fire_times", json::array())) {
        fires += (fires.empty() ? "" : ", ") + JsonText(fire, "local");
      }
      if (fires.empty())
        fires = "-";
      else
        fires += " (" + RelativeTime(JsonText(schedule, "next_fire_at", ""), now) + ")";
    }
    triggers.AddRow({JsonText(schedule, "trigger_name"), ScheduleWords(schedule),
                     JsonText(schedule, "state"), fires});
  }
  if (triggers.rows() == 0) {
    context.out() << "no triggers: runs start by hand (ql run start " << JsonText(*task, "name")
                  << ")\n";
  } else {
    triggers.Print(context.out());
  }
  context.out() << "\n";
  // Each run by a prefix the server found unique among the project's runs (other tasks' runs
  // created in the same minute included); a server without short_ids is asked without it.
  const std::vector<std::pair<std::string, std::string>> query = {
      {"task_id", JsonText(*task, "id")}, {"limit", "5"}};
  std::vector<std::pair<std::string, std::string>> with_short_ids = query;
  if (!context.wide()) with_short_ids.emplace_back("short_ids", "true");
  CliResult<json> runs = (*api)->GetJson(WithQuery("/api/v1/runs", with_short_ids));
  if (!runs.ok() && runs.error().reason() == "unknown_parameter" && !context.wide()) {
    runs = (*api)->GetJson(WithQuery("/api/v1/runs", query));
  }
  if (!runs.ok()) return context.Fail(runs.error());
  const json recent = runs->value("items", json::array());
  std::vector<std::string> ids;
  std::vector<std::string> unique;
  for (const json& run : recent) {
    ids.push_back(JsonText(run, "id"));
    unique.push_back(JsonText(run, "short_id", ""));
  }
  const std::vector<std::string> short_ids = context.wide() ? ids : ShortIds(ids, unique);
  Table last({"RUN", "ORIGIN", "STATUS", "STARTED", "DURATION", "EXIT"});
  for (size_t i = 0; i < recent.size(); ++i) {
    const json& run = recent[i];
    std::string origin = JsonText(run, "trigger_type");
    if (!JsonText(run, "trigger_name", "").empty()) origin += " " + JsonText(run, "trigger_name");
    last.AddRow({short_ids[i], origin, JsonText(run, "status"),
                 RelativeTime(JsonText(run, "started_at", ""), now),
                 JsonElapsed(run, "started_at", "finished_at"), JsonText(run, "exit_code")});
  }
  if (last.rows() == 0) {
    context.out() << "no runs yet\n";
  } else {
    last.Print(context.out());
  }
  context.out() << "\n";
  Table table({"REVISION", "NAME", "ENABLED", "COMMAND", "CREATED"});
  for (const json& revision : revisions) {
    table.AddRow(
        {JsonText(revision, "revision"), Ellipsize(JsonText(revision, "name"), 32),
         JsonText(revision, "enabled") == "true" ? "yes" : "no",
         Ellipsize(PrintableCell(CommandSummary(revision.value("spec", json::object()))), 48),
         JsonText(revision, "created_at")});
  }
  table.Print(context.out());
  return kExitOk;
}

int TaskPublish(const TaskPublishArgs& args, CommandContext& context) {
  if (args.expected_revision < (args.edit ? 0 : 1)) {
    return context.Fail(CliError::Usage("invalid_expected_revision",
                                        "--expected-revision must be the task's current "
                                        "revision number (1 or more)"));
  }
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  CliResult<json> current = (*api)->GetJson(TaskPath(args.task_id));
  if (!current.ok()) return context.Fail(current.error());
  CliResult<json> body = BuildTaskBody(args.content, args.name, &*current);
  if (!body.ok()) return context.Fail(body.error());
  body = WithSecretEnvironment(args.content, **api, std::move(*body));
  if (!body.ok()) return context.Fail(body.error());
  // The server checks the expected revision; the current one supplies unchanged fields (and
  // the revision itself when `task edit` is not given one).
  (*body)["expected_revision"] = args.expected_revision > 0
                                     ? args.expected_revision
                                     : current->value("revision", int64_t{0});
  (*body)["mutation_id"] = args.content.mutation_id.value_or(NewMutationId());
  if (args.repin) (*body)["repin_triggers"] = true;
  // By id: a rename must not make the request miss its task.
  CliResult<json> task =
      (*api)->PostJson(TaskPath(JsonText(*current, "id")) + "/revisions", *body);
  if (!task.ok()) return context.Fail(task.error());
  if (context.json()) {
    context.out() << JsonOutput(*task) << "\n";
  } else {
    context.out() << JsonText(*task, "revision", "") << "\n";
    const std::vector<std::string> changes = RevisionChanges(*current, *task);
    context.err() << JsonText(*task, "name") << " revision " << JsonText(*task, "revision", "")
                  << (changes.empty() ? ": nothing changed\n" : ":\n");
    for (const std::string& change : changes)
      context.err() << "  " << PrintableCell(change) << "\n";
  }
  const int64_t stale = task->value("stale_triggers", int64_t{0});
  if (stale > 0) {
    context.err() << "note: " << stale
                  << (stale == 1 ? " trigger of this task still pins an older revision and admits"
                                 : " triggers of this task still pin an older revision and admit")
                  << " nothing until repinned (ql trigger repin NAME, or publish with ql task "
                     "edit)\n";
  }
  return kExitOk;
}

int TaskRemove(const std::string& task_ref, CommandContext& context) {
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  CliResult<json> task = (*api)->DeleteJson(TaskPath(task_ref));
  if (!task.ok()) return context.Fail(task.error());
  if (context.json()) {
    context.out() << JsonOutput(*task) << "\n";
    return kExitOk;
  }
  context.out() << JsonText(*task, "id") << " deleted\n";
  for (const json& trigger : task->value("deleted_triggers", json::array())) {
    context.out() << trigger.get<std::string>() << " deleted (trigger)\n";
  }
  return kExitOk;
}

void RegisterTaskCommands(CLI::App& app) {
  AddGlobalOptions(app);
  CLI::App* task = app.add_subcommand("task", "Define tasks: the commands QingLong runs");
  task->require_subcommand(1);
  task->fallthrough();

  auto add_args = std::make_shared<TaskAddArgs>();
  auto add_flags = std::shared_ptr<TaskContentFlags>(add_args, &add_args->content);
  CLI::App* add = task->add_subcommand(
      "add", "Create a task and print its id: ql task add NAME --shell 'COMMAND' [flags]");
  add->fallthrough();
  add->add_option("name", add_args->name, "Task name")->required();
  AddContentFlags(add, add_flags, /*publish=*/false);
  add->callback([add, add_args] {
    RunCommand(*add, [&](CommandContext& context) { return TaskAdd(*add_args, context); });
  });

  auto list_args = std::make_shared<TaskListArgs>();
  CLI::App* list = task->add_subcommand(
      "list",
      "The cron list: each task's schedules, last run and next fire (--wide: ids and "
      "commands too)");
  list->fallthrough();
  list->add_option("--limit", list_args->limit, "Show at most N tasks")->capture_default_str();
  list->add_option("--cursor", list_args->cursor,
                   "Continue a listing where a --json listing's next_cursor says");
  list->add_option_function<std::string>(
      "--search,-q", [list_args](const std::string& v) { list_args->text = v; },
      "Only tasks whose name contains TEXT (ignoring case)");
  list->add_option_function<std::string>(
      "--label", [list_args](const std::string& v) { list_args->label = v; },
      "Only tasks with this label: KEY=VALUE, or KEY for any value");
  list->add_option_function<std::string>(
      "--last-status", [list_args](const std::string& v) { list_args->last_status = v; },
      "Only tasks whose last run is in this state (succeeded, failed, running, ...), or none: "
      "never ran");
  list->callback([list, list_args] {
    RunCommand(*list, [&](CommandContext& context) { return TaskList(*list_args, context); });
  });

  for (const bool enabled : {true, false}) {
    auto ref = std::make_shared<std::string>();
    CLI::App* toggle = task->add_subcommand(
        enabled ? "enable" : "disable",
        enabled ? "Enable a task: publish it enabled and repin its triggers, so they fire again"
                : "Disable a task: publish it disabled; its triggers admit nothing and manual "
                  "runs are refused until it is enabled");
    toggle->fallthrough();
    toggle->add_option("task", *ref, "Task name or id")->required();
    toggle->callback([toggle, ref, enabled] {
      RunCommand(*toggle,
                 [&](CommandContext& context) { return TaskSetEnabled(*ref, enabled, context); });
    });
  }

  auto show_id = std::make_shared<std::string>();
  CLI::App* show = task->add_subcommand("show", "Show a task's current revision and history");
  show->fallthrough();
  show->add_option("task", *show_id, "Task name or id")->required();
  show->callback([show, show_id] {
    RunCommand(*show, [&](CommandContext& context) { return TaskShow(*show_id, context); });
  });

  auto publish_args = std::make_shared<TaskPublishArgs>();
  auto publish_flags = std::shared_ptr<TaskContentFlags>(publish_args, &publish_args->content);
  CLI::App* publish = task->add_subcommand(
      "publish",
      "Publish a new revision of a task and print its number; flags left out keep the current "
      "revision's values");
  publish->fallthrough();
  publish->add_option("task", publish_args->task_id, "Task name or id")->required();
  publish
      ->add_option("--expected-revision", publish_args->expected_revision,
                   "The revision this one replaces (the task's current revision)")
      ->required();
  publish->add_option_function<std::string>(
      "--name", [publish_args](const std::string& v) { publish_args->name = v; }, "New task name");
  AddContentFlags(publish, publish_flags, /*publish=*/true);
  publish->callback([publish, publish_args] {
    RunCommand(*publish,
               [&](CommandContext& context) { return TaskPublish(*publish_args, context); });
  });

  auto repin_args = std::make_shared<TaskPublishArgs>();
  repin_args->edit = true;
  repin_args->repin = true;
  repin_args->content.repin_scripts = true;
  CLI::App* repin = task->add_subcommand(
      "repin",
      "Move a task to its script's latest version: a new revision pinned to it, with the task's "
      "triggers repinned in the same transaction");
  repin->fallthrough();
  repin->add_option("task", repin_args->task_id, "Task name or id")->required();
  repin->callback([repin, repin_args] {
    RunCommand(*repin, [&](CommandContext& context) { return TaskPublish(*repin_args, context); });
  });

  auto edit_args = std::make_shared<TaskPublishArgs>();
  edit_args->edit = true;
  edit_args->repin = true;
  auto edit_flags = std::shared_ptr<TaskContentFlags>(edit_args, &edit_args->content);
  CLI::App* edit = task->add_subcommand(
      "edit",
      "Publish a new revision of a task and repin its triggers in the same transaction (so "
      "they keep firing); flags left out keep the current revision's values");
  edit->fallthrough();
  edit->add_option("task", edit_args->task_id, "Task name or id")->required();
  edit->add_option("--expected-revision", edit_args->expected_revision,
                   "Refuse the edit unless the task is still at this revision (default: "
                   "whatever revision it is at)");
  edit->add_option_function<std::string>(
      "--name", [edit_args](const std::string& v) { edit_args->name = v; }, "Rename the task");
  edit->add_flag_callback(
      "--no-repin", [edit_args] { edit_args->repin = false; },
      "Leave the triggers on the old revision (they admit nothing until repinned)");
  AddContentFlags(edit, edit_flags, /*publish=*/true);
  edit->callback([edit, edit_args] {
    RunCommand(*edit, [&](CommandContext& context) { return TaskPublish(*edit_args, context); });
  });

  auto rm_ref = std::make_shared<std::string>();
  CLI::App* rm = task->add_subcommand(
      "rm",
      "Delete a task and its triggers: nothing new runs; the history stays until retention");
  rm->fallthrough();
  rm->add_option("task", *rm_ref, "Task name or id")->required();
  rm->callback([rm, rm_ref] {
    RunCommand(*rm, [&](CommandContext& context) { return TaskRemove(*rm_ref, context); });
  });
  AddRetentionSetCommand(*task, /*task=*/true);
}

}  // namespace ql::cli
