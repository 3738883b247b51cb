#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ql/core/placement.h"
#include "ql/core/records.h"
#include "ql/core/status.h"
#include "ql/core/task_spec.h"

namespace ql {

// The digest domain of execution plans.
inline constexpr std::string_view kExecutionPlanDomain = "qinglong/execution-plan@v1";
// The `schema` field every stored plan carries.
inline constexpr std::string_view kExecutionPlanSchema = "qinglong/command-execution@v1";
inline constexpr std::string_view kExecutorLocalProcess = "local_process";
inline constexpr std::string_view kExecutorRemoteWorker = "remote_worker";
// Task revisions are 1 .. 2^31 - 1 so they fit every storage column and wire format.
inline constexpr int64_t kMaxTaskRevision = 2147483647;

// What a script command's run needs of the artifact store: the version it was published with.
struct ScriptPin {
  std::string name;
  int64_t version = 0;
  std::string digest;  // a file's blob or a tree's manifest
  std::string kind;    // file | tree
  std::string entry;   // the file run, a path of the version
  bool operator==(const ScriptPin&) const = default;
};

// argv[0] of a script command's plan: it finds the interpreter in the command's PATH.
inline constexpr std::string_view kScriptLauncher = "/usr/bin/env";

// The frozen, digest-bound plan derived from one enabled task revision. Runs pin it; the
// executor runs exactly this and never reads the task again. Name and labels are not part of it.
struct ExecutionPlan {
  std::string task_id;
  int64_t task_revision = 0;
  std::string task_digest;    // TaskContentDigest of the source revision
  std::string executor_type;  // kExecutorLocalProcess or kExecutorRemoteWorker
  // argv form: [file, args...]; shell form: [shell, "-c", command]; script form:
  // [kScriptLauncher, interpreter, args...], the script's path inserted after the interpreter at
  // launch (where the runner materialised `script`).
  std::vector<std::string> argv;
  std::optional<ScriptPin> script;
  // Sorted by name, names unique; QL_RUN_ID / QL_ATTEMPT_ID are added by the executor.
  std::vector<std::pair<std::string, std::string>> environment;
  std::optional<std::string> working_directory;
  int64_t timeout_ms = 0;
  TaskLimits limits;     // the task's own limits (the executor applies the smaller of these
                         // and the installation's)
  bool network = true;   // false: no network but loopback
  bool unconfined = false;  // true: as the daemon's user, no namespaces (if the host allows)
  RetryPolicy retry_policy;  // snapshot into every run of this plan
  Placement placement;       // where a remote worker may run it (placement.h)
  bool operator==(const ExecutionPlan&) const = default;
};

// Builds the plan for revision `task_revision` of task `task_id` with content `content` whose
// stored digest is `task_digest`. Re-validates the content and recomputes its digest first.
// Errors: InvalidArgument `invalid_id` (task_id not a canonical UUID), `invalid_revision`
// (outside 1 .. kMaxTaskRevision), `invalid_digest` (not 64 lowercase hex),
// `invalid_executor_type`, `task_kind_unsupported`, `task_disabled` (a disabled revision has no
// plan), any ValidateCommandSpec error; Corrupt `digest_mismatch` when TaskContentDigest(content)
// differs from `task_digest`.
Result<ExecutionPlan> BuildExecutionPlan(std::string_view task_id, int64_t task_revision,
                                         const TaskContent& content, std::string_view task_digest,
                                         std::string_view executor_type);

// Returns the execution revision identity "qltd:v1:<revision>:<digest>" (decimal revision,
// lowercase hex digest).
std::string ExecutionRevisionId(int64_t revision, std::string_view plan_digest);

// The two parts of an execution revision identity.
struct ExecutionRevisionRef {
  int64_t revision = 0;
  std::string digest;
  bool operator==(const ExecutionRevisionRef&) const = default;
};

// Parses "qltd:v1:<revision>:<digest>" exactly as ExecutionRevisionId writes it: revision
// 1 .. kMaxTaskRevision in decimal without sign or leading zeros, digest 64 lowercase hex.
// Anything else (other prefix, case drift, overflow, extra parts) is InvalidArgument
// `invalid_execution_revision`.
Result<ExecutionRevisionRef> ParseExecutionRevisionId(std::string_view id);

// Returns the stored JSON form: {"argv","environment" (object),"executorType","schema",
// "taskDigest","taskId","taskRevision","timeoutMs"} plus "workingDirectory" when set, "limits"
// when a limit is set, "network": "none" when the task has no network, "isolation": "none"
// when it runs unconfined, "script": {"digest","entry","kind","name","version"} for a script
// command and "placement": {"pool","labels"} when it is not the default pool without labels
// (plans without them keep their digests).
nlohmann::json PlanToJson(const ExecutionPlan& plan);

// Reads a plan back from PlanToJson's form, strictly: a missing or unknown field, a wrong type,
// a wrong schema, or a value outside the rules BuildExecutionPlan guarantees (ids, digest,
// executor type, argv[0] absolute, no NUL in argv/environment/working directory, environment
// names allowed, timeout range) is Corrupt `plan_invalid` naming the field.
// PlanFromJson(PlanToJson(p)) == p for every plan BuildExecutionPlan returns.
Result<ExecutionPlan> PlanFromJson(const nlohmann::json& json);

// Returns the canonical JSON encoding of PlanToJson(plan). `plan` must hold valid UTF-8
// strings (as every built or parsed plan does); invalid bytes are encoded as U+FFFD.
std::string PlanCanonical(const ExecutionPlan& plan);

// Returns DomainDigest(kExecutionPlanDomain, PlanCanonical(plan)).
std::string PlanDigest(const ExecutionPlan& plan);

// Returns ok when PlanDigest(plan) equals `expected_digest` (compared in constant time), else
// Corrupt `digest_mismatch` naming both digests.
Status VerifyPlanDigest(const ExecutionPlan& plan, std::string_view expected_digest);

}  // namespace ql
