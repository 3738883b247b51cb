#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "ql/core/approval.h"
#include "ql/core/placement.h"
#include "ql/core/records.h"
#include "ql/core/secret_ref.h"
#include "ql/core/status.h"

namespace ql {

// The only writable task kind; also the digest domain of task revision content.
inline constexpr std::string_view kCommandTaskKind = "qinglong/command@v1";

inline constexpr size_t kMaxCommandArgs = 256;
inline constexpr size_t kMaxEnvironmentEntries = 256;
inline constexpr size_t kMaxPathBytes = 4095;  // PATH_MAX on Linux less the terminating NUL
inline constexpr int64_t kMinTimeoutMs = 1;
inline constexpr int64_t kMaxTimeoutMs = int64_t{365} * 24 * 60 * 60 * 1000;
inline constexpr int64_t kDefaultTimeoutMs = int64_t{24} * 60 * 60 * 1000;
inline constexpr size_t kMaxSpecCanonicalBytes = 64 * 1024;
inline constexpr size_t kMaxTaskNameChars = 128;
inline constexpr size_t kMaxLabels = 32;
inline constexpr size_t kMaxLabelValueChars = 256;

// Runs `file` directly with `args` (argv[1..]); no shell is involved.
struct ArgvCommand {
  std::string file;  // absolute path
  std::vector<std::string> args;
  bool operator==(const ArgvCommand&) const = default;
};

// Runs `shell -c command`.
struct ShellCommand {
  std::string command;            // non-empty
  std::string shell = "/bin/sh";  // "/bin/sh" or "/bin/bash"
  bool operator==(const ShellCommand&) const = default;
};

// Runs a script of the project's library (artifact_store.h) with an interpreter:
// `/usr/bin/env INTERPRETER <script dir>/ENTRY ARGS...`, the script materialised read-only.
// A task names the script; publishing pins it (version, digest, kind, entry and the interpreter
// its entry's extension implies), so a revision runs exactly the bytes it was published with.
struct ScriptCommand {
  std::string script;  // the script's name
  std::optional<int64_t> version;
  std::string digest;       // the version's digest (a file's blob or a tree's manifest)
  std::string script_kind;  // file | tree
  std::string entry;        // the file run: a path of the version
  std::string interpreter;  // node | python3 | sh | bash
  std::vector<std::string> args;
  // Every pin field is set (as publishing leaves it).
  bool pinned() const {
    return version.has_value() && !digest.empty() && !script_kind.empty() && !entry.empty() &&
           !interpreter.empty();
  }
  bool operator==(const ScriptCommand&) const = default;
};

// The interpreters a script command may name.
bool IsScriptInterpreter(std::string_view name);

// Limits a task asks for its commands. The installation's limits are the default and the
// ceiling: a task can only ask for less (the smaller value applies).
struct TaskLimits {
  std::optional<int64_t> memory_mib;   // 4 .. 1048576
  std::optional<int64_t> pids;         // 1 .. 1048576 (processes and threads)
  std::optional<int64_t> cpu_seconds;  // 1 .. 31536000 (CPU time of each process)
  std::optional<int64_t> open_files;   // 16 .. 1048576
  bool empty() const { return !memory_mib && !pids && !cpu_seconds && !open_files; }
  bool operator==(const TaskLimits&) const = default;
};

// Parses {"memoryMib","pids","cpuSeconds","openFiles"} (each optional) at `path`. Errors:
// InvalidArgument spec_invalid_type, spec_unknown_field, spec_invalid_limit (out of range).
Result<TaskLimits> ParseTaskLimits(const nlohmann::json& value, std::string_view path);
// Returns the JSON form of `limits` (only the fields set).
nlohmann::json TaskLimitsToJson(const TaskLimits& limits);

// A validated, normalised `qinglong/command@v1` spec.
struct CommandSpec {
  std::variant<ArgvCommand, ShellCommand, ScriptCommand> command;
  // Sorted by name, names unique.
  std::vector<std::pair<std::string, std::string>> environment;
  std::optional<std::string> working_directory;  // absolute when set
  int64_t timeout_ms = kDefaultTimeoutMs;
  TaskLimits limits;
  // False ("network": "none"): the command gets a network namespace with only loopback.
  bool network = true;
  // True ("isolation": "none"): the command runs as the daemon's user without namespaces, beside
  // the daemon's files; refused unless the installation allows it (--allow-unconfined-tasks).
  bool unconfined = false;
  // Where a remote worker may run it (placement.h); the default pool with no labels when absent.
  Placement placement;
  bool operator==(const CommandSpec&) const = default;
};

// Validates and normalises a `qinglong/command@v1` spec given as JSON:
//   {"command": {"kind":"argv","file":"/abs","args":["..."]}
//             | {"kind":"shell","command":"...","shell":"/bin/sh"|"/bin/bash"}
//             | {"kind":"script","script":"NAME","version":N,"digest":"...","scriptKind":
//                "file"|"tree","entry":"path","interpreter":"node"|"python3"|"sh"|"bash",
//                "args":["..."]} (all but "kind" and "script" optional until published),
//    "environment": {"NAME":"value"}, "workingDirectory": "/abs", "timeoutMs": 30000,
//    "limits": {"memoryMib": 256, "pids": 64, "cpuSeconds": 600, "openFiles": 1024},
//    "network": "host" | "none", "isolation": "confined" | "none",
//    "placement": {"pool": "gpu", "labels": {"arch": "arm64"}}}
// `command` is required; `args` defaults to [], `shell` to "/bin/sh", `environment` to {},
// `timeoutMs` to kDefaultTimeoutMs; `workingDirectory` stays unset when absent. Every error is
// InvalidArgument whose message names the field path (`spec.command.args[3]`) and the offending
// value; reasons:
//   spec_unknown_field        a field not listed above, at any level;
//   spec_missing_field        `command`, `command.kind`, `command.file` or `command.command`;
//   spec_invalid_type         a value of the wrong JSON type (including null);
//   spec_invalid_command_kind `command.kind` other than "argv", "shell" or "script";
//   spec_invalid_script       a script command's name, version, digest, kind, entry or
//                             interpreter that breaks its rule;
//   spec_invalid_path         `file` / `workingDirectory` not absolute, containing NUL, or longer
//                             than kMaxPathBytes bytes;
//   spec_too_many_args        more than kMaxCommandArgs arguments;
//   spec_invalid_arg          an argument containing NUL;
//   spec_invalid_command      an empty shell command or one containing NUL;
//   spec_invalid_shell        a shell other than /bin/sh or /bin/bash;
//   spec_too_many_env         more than kMaxEnvironmentEntries variables;
//   spec_invalid_env_name     a name not matching [A-Za-z_][A-Za-z0-9_]*, starting with QL3_,
//                             or equal to QL_RUN_ID / QL_ATTEMPT_ID (the executor sets those);
//   spec_invalid_env_value    a value containing NUL;
//   spec_invalid_secret_ref   a value starting with `qlsecret:v1:` that is not a canonical
//                             SecretRef (secret_ref.h); such a value names a secret, never holds
//                             one;
//   spec_timeout_out_of_range `timeoutMs` outside [kMinTimeoutMs, kMaxTimeoutMs];
//   spec_invalid_limit        a `limits` value outside its range (TaskLimits);
//   spec_invalid_network      `network` other than "host" or "none";
//   spec_invalid_isolation    `isolation` other than "confined" or "none", or "none" together
//                             with `network` "none" (which needs namespaces);
//   spec_invalid_utf8         a string that is not valid UTF-8;
//   spec_too_large            canonical encoding of the normalised spec over 64 KiB.
// Duplicate environment names cannot be seen in a parsed nlohmann::json (the parser keeps one),
// so callers must parse request text with ParseJsonStrict, which rejects them.
Result<CommandSpec> ParseCommandSpec(const nlohmann::json& spec);

// Returns the normalised JSON form of `spec`: every default written out, environment as an
// object (so canonically sorted), `workingDirectory` only when set, `limits` only when some
// limit is set, `network` and `isolation` only when "none" (so specs without them keep their
// digests).
// ParseCommandSpec(CommandSpecToJson(s)) == s for every valid `s`.
nlohmann::json CommandSpecToJson(const CommandSpec& spec);

// Returns ok when `spec` (for example one built in code) obeys every rule of ParseCommandSpec and
// is normalised (environment sorted by name without duplicates, a script command pinned);
// otherwise the error ParseCommandSpec would give, InvalidArgument `spec_not_normalized`, or
// `spec_script_unpinned`.
Status ValidateCommandSpec(const CommandSpec& spec);

// Returns the variables of `environment` whose value is a SecretRef, decoded, in order. Errors:
// those of DecodeSecretRef (never for a validated spec).
Result<std::vector<std::pair<std::string, SecretRef>>> SecretEnvironment(
    const std::vector<std::pair<std::string, std::string>>& environment);

// Returns true when `name` may be set in a task's environment: it matches [A-Za-z_][A-Za-z0-9_]*,
// does not start with "QL3_" and is neither QL_RUN_ID nor QL_ATTEMPT_ID.
bool IsAllowedEnvName(std::string_view name);

// The content of one task revision.
struct TaskContent {
  std::string name;
  std::string kind = std::string(kCommandTaskKind);
  CommandSpec spec;
  std::map<std::string, std::string> labels;
  bool enabled = true;
  RetryPolicy retry;  // snapshot into every run of the revision
  // Manual runs need a second person's approval (DESIGN §9.1); not part of the execution plan.
  std::optional<ApprovalPolicy> approval;
  // At most this many unfinished runs of the task when a cron occurrence is admitted, else the
  // occurrence is recorded as skipped (DESIGN §11); absent = unlimited. Manual runs are not
  // limited. Not part of the execution plan.
  std::optional<int64_t> concurrency;
  bool operator==(const TaskContent&) const = default;
};

// Validates a task publish body {"name": ..., "kind": "qinglong/command@v1" (optional),
// "spec": {...}, "labels": {...} (optional), "enabled": bool (optional, default true),
// "retry": {...} (optional retry policy, see retry_policy.h), "approval": {...} (optional approval
// policy, see approval.h: every approval_* reason), "concurrency": 1..10000 (optional)}.
// Envelope fields of the request (mutation id, expected revision) must be removed first: any
// other field is `task_unknown_field`. Errors are InvalidArgument with reasons:
//   task_invalid_type     the body is not an object, or `kind` / `enabled` has the wrong type;
//   task_unknown_field    a top-level field not listed above;
//   task_missing_field    `name` or `spec` absent;
//   task_kind_unsupported a kind other than qinglong/command@v1;
//   task_invalid_name     not a string, 0 or more than 128 characters (code points), a control
//                         character, or invalid UTF-8;
//   invalid_concurrency   `concurrency` not an integer in 1..kMaxConcurrency;
//   task_invalid_label    `labels` not an object, more than 32 labels, a key not matching
//                         [a-z0-9][a-z0-9._/-]{0,62}, or a value that is not a string of at most
//                         256 characters;
// plus every error of ParseCommandSpec for `spec`. Same duplicate-key caveat as ParseCommandSpec.
Result<TaskContent> ParseTaskContent(const nlohmann::json& body);

// Checks the name of a task or trigger: valid UTF-8, 1..`max_chars` code points, no control
// character, no '/' (names are path segments of the API) and not the form of a canonical id
// (a reference is an id or a name, never both). Errors carry `reason` and name `path`.
Status ValidateObjectName(std::string_view reason, std::string_view path, const std::string& name,
                          size_t max_chars);

// Returns {"enabled","kind","labels","name","retry","spec"} with the normalised spec and policy,
// plus "approval" and "concurrency" when the content has them (so contents without them keep
// their digests);
// ParseTaskContent(TaskContentToJson(c)) == c for every valid `c`.
nlohmann::json TaskContentToJson(const TaskContent& content);

// Returns the canonical JSON encoding of TaskContentToJson(content). `content` must be valid
// (as ParseTaskContent returns it); strings that are not valid UTF-8 are encoded with U+FFFD.
std::string TaskContentCanonical(const TaskContent& content);

// Returns DomainDigest("qinglong/command@v1", TaskContentCanonical(content)): the task
// revision's content digest, recomputed and compared on every read.
std::string TaskContentDigest(const TaskContent& content);

// The digest domain of cron trigger revision content.
inline constexpr std::string_view kCronTriggerKind = "qinglong/cron@v1";

// Returns the content digest of a cron trigger revision: DomainDigest("qinglong/cron@v1") of
// the canonical JSON of its enabled flag, expression, misfire policy, pinned task id, revision
// and digest, and time zone, plus its overlap policy when that is not "allow" and its jitter
// window when that is not 0. Written at publish and recomputed by the cluster admission.
std::string TriggerContentDigest(const TriggerRevisionRecord& revision);

}  // namespace ql
