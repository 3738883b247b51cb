#include "ql/core/execution_plan.h"

#include <charconv>

#include "ql/core/artifact.h"
#include "ql/core/canonical_json.h"
#include "ql/core/digest.h"
#include "ql/core/ids.h"
#include "ql/core/retry_policy.h"

namespace ql {
namespace {

using nlohmann::json;

// The longest argv a valid spec yields: file plus kMaxCommandArgs arguments.
constexpr size_t kMaxPlanArgv = kMaxCommandArgs + 1;

bool IsExecutorType(std::string_view type) {
  return type == kExecutorLocalProcess || type == kExecutorRemoteWorker;
}

bool ContainsNul(std::string_view s) { return s.find('\0') != std::string_view::npos; }

Status PlanInvalid(std::string_view field, std::string_view what) {
  return Corrupt("plan_invalid",
                 "execution plan field " + std::string(field) + ": " + std::string(what));
}

Result<std::string> PlanString(const json& plan, std::string_view field) {
  const json& value = plan.at(std::string(field));
  if (!value.is_string()) {
    return PlanInvalid(field, "expected a string, got " + DescribeJsonValue(value));
  }
  const std::string& s = value.get_ref<const std::string&>();
  if (!IsValidUtf8(s)) return PlanInvalid(field, "not valid UTF-8");
  if (ContainsNul(s)) return PlanInvalid(field, QuoteForMessage(s) + " contains a NUL byte");
  return s;
}

Result<int64_t> PlanInteger(const json& plan, std::string_view field, int64_t min, int64_t max) {
  const json& value = plan.at(std::string(field));
  if (!value.is_number_integer() ||
      (value.is_number_unsigned() &&
       value.get<json::number_unsigned_t>() > static_cast<json::number_unsigned_t>(max))) {
    return PlanInvalid(field, "expected an integer in " + std::to_string(min) + " .. " +
                                  std::to_string(max) + ", got " + DescribeJsonValue(value));
  }
  const int64_t v = value.get<int64_t>();
  if (v < min || v > max) {
    return PlanInvalid(field, "expected an integer in " + std::to_string(min) + " .. " +
                                  std::to_string(max) + ", got " + std::to_string(v));
  }
  return v;
}

bool IsAbsolutePath(std::string_view p) {
  return !p.empty() && p.front() == '/' && p.size() <= kMaxPathBytes && !ContainsNul(p);
}

}  // namespace

Result<ExecutionPlan> BuildExecutionPlan(std::string_view task_id, int64_t task_revision,
                                         const TaskContent& content, std::string_view task_digest,
                                         std::string_view executor_type) {
  QL_RETURN_IF_ERROR(ValidateId("task_id", task_id));
  if (task_revision < 1 || task_revision > kMaxTaskRevision) {
    return InvalidArgument("invalid_revision", "task_revision: " + std::to_string(task_revision) +
                                                   " is outside 1 .. " +
                                                   std::to_string(kMaxTaskRevision));
  }
  if (!IsSha256Hex(task_digest)) {
    return InvalidArgument("invalid_digest", "task_digest: " + QuoteForMessage(task_digest) +
                                                 " is not 64 lowercase hex digits");
  }
  if (!IsExecutorType(executor_type)) {
    return InvalidArgument("invalid_executor_type",
                           "executor_type: " + QuoteForMessage(executor_type) +
                               " is not \"local_process\" or \"remote_worker\"");
  }
  if (content.kind != kCommandTaskKind) {
    return InvalidArgument("task_kind_unsupported", "kind: " + QuoteForMessage(content.kind) +
                                                        " cannot be executed; only " +
                                                        std::string(kCommandTaskKind) + " can");
  }
  if (!content.enabled) {
    return InvalidArgument("task_disabled", "task " + std::string(task_id) + " revision " +
                                                std::to_string(task_revision) +
                                                " is disabled and has no execution plan");
  }
  QL_RETURN_IF_ERROR(ValidateCommandSpec(content.spec));
  const std::string actual = TaskContentDigest(content);
  if (!ConstantTimeEquals(actual, task_digest)) {
    return Corrupt("digest_mismatch", "task " + std::string(task_id) + " revision " +
                                          std::to_string(task_revision) + ": content digest is " +
                                          actual + ", stored digest is " +
                                          std::string(task_digest));
  }

  ExecutionPlan plan;
  plan.task_id = std::string(task_id);
  plan.task_revision = task_revision;
  plan.task_digest = std::string(task_digest);
  plan.executor_type = std::string(executor_type);
  if (const auto* argv = std::get_if<ArgvCommand>(&content.spec.command)) {
    plan.argv.reserve(argv->args.size() + 1);
    plan.argv.push_back(argv->file);
    plan.argv.insert(plan.argv.end(), argv->args.begin(), argv->args.end());
  } else if (const auto* shell = std::get_if<ShellCommand>(&content.spec.command)) {
    plan.argv = {shell->shell, "-c", shell->command};
  } else {
    const auto& script = std::get<ScriptCommand>(content.spec.command);
    // The script's own path goes between the interpreter and the arguments at launch, once it
    // is materialised (ScriptPin).
    plan.argv = {std::string(kScriptLauncher), script.interpreter};
    plan.argv.insert(plan.argv.end(), script.args.begin(), script.args.end());
    plan.script =
        ScriptPin{script.script, *script.version, script.digest, script.script_kind, script.entry};
  }
  plan.environment = content.spec.environment;
  plan.working_directory = content.spec.working_directory;
  plan.timeout_ms = content.spec.timeout_ms;
  plan.limits = content.spec.limits;
  plan.network = content.spec.network;
  plan.unconfined = content.spec.unconfined;
  plan.retry_policy = content.retry;
  plan.placement = content.spec.placement;
  return plan;
}

std::string ExecutionRevisionId(int64_t revision, std::string_view plan_digest) {
  return "qltd:v1:" + std::to_string(revision) + ":" + std::string(plan_digest);
}

Result<ExecutionRevisionRef> ParseExecutionRevisionId(std::string_view id) {
  const auto invalid = [&](std::string_view why) {
    return InvalidArgument(
        "invalid_execution_revision",
        "execution revision " + QuoteForMessage(id, 96) + ": " + std::string(why));
  };
  constexpr std::string_view kPrefix = "qltd:v1:";
  if (!id.starts_with(kPrefix)) return invalid("does not start with \"qltd:v1:\"");
  std::string_view rest = id.substr(kPrefix.size());
  const size_t colon = rest.find(':');
  if (colon == std::string_view::npos) return invalid("has no digest part");
  const std::string_view number = rest.substr(0, colon);
  const std::string_view digest = rest.substr(colon + 1);
  if (number.empty() || number.size() > 10 || number.front() == '0' ||
      number.find_first_not_of("0123456789") != std::string_view::npos) {
    return invalid("revision must be a decimal integer without sign or leading zeros");
  }
  int64_t revision = 0;
  std::from_chars(number.data(), number.data() + number.size(), revision);
  if (revision < 1 || revision > kMaxTaskRevision) {
    return invalid("revision is outside 1 .. " + std::to_string(kMaxTaskRevision));
  }
  if (!IsSha256Hex(digest)) return invalid("digest must be 64 lowercase hex digits");
  return ExecutionRevisionRef{revision, std::string(digest)};
}

json PlanToJson(const ExecutionPlan& plan) {
  json env = json::object();
  for (const auto& [name, value] : plan.environment) env[name] = value;
  json out = {{"argv", plan.argv},
              {"environment", std::move(env)},
              {"executorType", plan.executor_type},
              {"retry", RetryPolicyToJson(plan.retry_policy)},
              {"schema", kExecutionPlanSchema},
              {"taskDigest", plan.task_digest},
              {"taskId", plan.task_id},
              {"taskRevision", plan.task_revision},
              {"timeoutMs", plan.timeout_ms}};
  if (plan.working_directory.has_value()) out["workingDirectory"] = *plan.working_directory;
  if (!plan.limits.empty()) out["limits"] = TaskLimitsToJson(plan.limits);
  if (!plan.network) out["network"] = "none";
  if (plan.unconfined) out["isolation"] = "none";
  if (!plan.placement.is_default()) out["placement"] = PlacementToJson(plan.placement);
  if (plan.script) {
    out["script"] = {{"name", plan.script->name},
                     {"version", plan.script->version},
                     {"digest", plan.script->digest},
                     {"kind", plan.script->kind},
                     {"entry", plan.script->entry}};
  }
  return out;
}

Result<ExecutionPlan> PlanFromJson(const json& j) {
  if (!j.is_object()) {
    return Corrupt("plan_invalid",
                   "execution plan: expected an object, got " + DescribeJsonValue(j));
  }
  static constexpr std::string_view kRequired[] = {
      "argv",   "environment", "executorType", "retry",
      "schema", "taskDigest",  "taskId",       "taskRevision", "timeoutMs"};
  for (const auto& [key, unused] : j.items()) {
    bool known = key == "workingDirectory" || key == "limits" || key == "network" ||
                 key == "isolation" || key == "script" || key == "placement";
    for (std::string_view r : kRequired) known = known || key == r;
    if (!known) return PlanInvalid(QuoteForMessage(key), "unknown field");
  }
  for (std::string_view r : kRequired) {
    if (!j.contains(std::string(r))) return PlanInvalid(r, "missing");
  }

  ExecutionPlan plan;
  QL_ASSIGN_OR_RETURN(std::string schema, PlanString(j, "schema"));
  if (schema != kExecutionPlanSchema) {
    return PlanInvalid("schema", QuoteForMessage(schema) + " is not \"" +
                                     std::string(kExecutionPlanSchema) + "\"");
  }
  QL_ASSIGN_OR_RETURN(plan.task_id, PlanString(j, "taskId"));
  if (!IsCanonicalUuid(plan.task_id)) {
    return PlanInvalid("taskId", QuoteForMessage(plan.task_id) + " is not a canonical UUID");
  }
  QL_ASSIGN_OR_RETURN(plan.task_revision, PlanInteger(j, "taskRevision", 1, kMaxTaskRevision));
  QL_ASSIGN_OR_RETURN(plan.task_digest, PlanString(j, "taskDigest"));
  if (!IsSha256Hex(plan.task_digest)) {
    return PlanInvalid("taskDigest",
                       QuoteForMessage(plan.task_digest) + " is not 64 lowercase hex digits");
  }
  {
    Result<RetryPolicy> retry = ParseRetryPolicy(j.at("retry"));
    if (!retry.ok()) return PlanInvalid("retry", retry.status().message());
    plan.retry_policy = *retry;
  }
  QL_ASSIGN_OR_RETURN(plan.executor_type, PlanString(j, "executorType"));
  if (!IsExecutorType(plan.executor_type)) {
    return PlanInvalid("executorType", QuoteForMessage(plan.executor_type) +
                                           " is not \"local_process\" or \"remote_worker\"");
  }

  const json& argv = j.at("argv");
  if (!argv.is_array() || argv.empty() || argv.size() > kMaxPlanArgv) {
    return PlanInvalid("argv", "expected an array of 1 .. " + std::to_string(kMaxPlanArgv) +
                                   " strings, got " + DescribeJsonValue(argv));
  }
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string field = "argv[" + std::to_string(i) + "]";
    const json& arg = argv[i];
    if (!arg.is_string()) {
      return PlanInvalid(field, "expected a string, got " + DescribeJsonValue(arg));
    }
    const std::string& s = arg.get_ref<const std::string&>();
    if (!IsValidUtf8(s)) return PlanInvalid(field, "not valid UTF-8");
    if (ContainsNul(s)) return PlanInvalid(field, QuoteForMessage(s) + " contains a NUL byte");
    plan.argv.push_back(s);
  }
  if (!IsAbsolutePath(plan.argv.front())) {
    return PlanInvalid("argv[0]", QuoteForMessage(plan.argv.front()) + " is not an absolute path");
  }

  const json& env = j.at("environment");
  if (!env.is_object() || env.size() > kMaxEnvironmentEntries) {
    return PlanInvalid("environment", "expected an object of at most " +
                                          std::to_string(kMaxEnvironmentEntries) +
                                          " strings, got " + DescribeJsonValue(env));
  }
  for (const auto& [name, value] : env.items()) {
    const std::string field = "environment." + std::string(IsValidUtf8(name) ? name : "?");
    if (!IsAllowedEnvName(name)) {
      return PlanInvalid("environment",
                         "variable name " + QuoteForMessage(name) + " is not allowed");
    }
    if (!value.is_string()) {
      return PlanInvalid(field, "expected a string, got " + DescribeJsonValue(value));
    }
    const std::string& s = value.get_ref<const std::string&>();
    if (!IsValidUtf8(s)) return PlanInvalid(field, "not valid UTF-8");
    if (ContainsNul(s)) return PlanInvalid(field, QuoteForMessage(s) + " contains a NUL byte");
    plan.environment.emplace_back(name, s);
  }

  if (j.contains("workingDirectory")) {
    QL_ASSIGN_OR_RETURN(std::string wd, PlanString(j, "workingDirectory"));
    if (!IsAbsolutePath(wd)) {
      return PlanInvalid("workingDirectory", QuoteForMessage(wd) + " is not an absolute path");
    }
    plan.working_directory = std::move(wd);
  }
  QL_ASSIGN_OR_RETURN(plan.timeout_ms, PlanInteger(j, "timeoutMs", kMinTimeoutMs, kMaxTimeoutMs));
  if (j.contains("limits")) {
    Result<TaskLimits> limits = ParseTaskLimits(j.at("limits"), "limits");
    if (!limits.ok() || limits->empty()) {
      return PlanInvalid("limits", limits.ok() ? "is empty" : limits.status().message());
    }
    plan.limits = *limits;
  }
  if (j.contains("network")) {
    QL_ASSIGN_OR_RETURN(std::string network, PlanString(j, "network"));
    if (network != "none") return PlanInvalid("network", QuoteForMessage(network) + " is not \"none\"");
    plan.network = false;
  }
  if (j.contains("isolation")) {
    QL_ASSIGN_OR_RETURN(std::string isolation, PlanString(j, "isolation"));
    if (isolation != "none") {
      return PlanInvalid("isolation", QuoteForMessage(isolation) + " is not \"none\"");
    }
    plan.unconfined = true;
  }
  if (j.contains("placement")) {
    Result<Placement> placement = ParsePlacement(j.at("placement"), "placement");
    if (!placement.ok() || placement->is_default()) {
      return PlanInvalid(
          "placement", placement.ok() ? "is the default placement" : placement.status().message());
    }
    plan.placement = std::move(*placement);
  }
  if (j.contains("script")) {
    const json& script = j.at("script");
    if (!script.is_object() || script.size() != 5) {
      return PlanInvalid("script", "expected {name, version, digest, kind, entry}, got " +
                                       DescribeJsonValue(script));
    }
    ScriptPin pin;
    QL_ASSIGN_OR_RETURN(pin.name, PlanString(script, "name"));
    QL_ASSIGN_OR_RETURN(pin.version, PlanInteger(script, "version", 1, INT64_MAX));
    QL_ASSIGN_OR_RETURN(pin.digest, PlanString(script, "digest"));
    QL_ASSIGN_OR_RETURN(pin.kind, PlanString(script, "kind"));
    QL_ASSIGN_OR_RETURN(pin.entry, PlanString(script, "entry"));
    if (!ValidateScriptName(pin.name).ok() || !IsSha256Hex(pin.digest) ||
        (pin.kind != "file" && pin.kind != "tree") || !ValidateArtifactPath(pin.entry).ok()) {
      return PlanInvalid("script", "the script's name, digest, kind or entry breaks its rule");
    }
    if (plan.argv.size() < 2 || plan.argv[0] != kScriptLauncher ||
        !IsScriptInterpreter(plan.argv[1])) {
      return PlanInvalid("argv", "a script plan starts with " + std::string(kScriptLauncher) +
                                     " and an interpreter");
    }
    plan.script = std::move(pin);
  }
  return plan;
}

std::string PlanCanonical(const ExecutionPlan& plan) {
  return internal::CanonicalJsonLossy(PlanToJson(plan));
}

std::string PlanDigest(const ExecutionPlan& plan) {
  return DomainDigest(kExecutionPlanDomain, PlanCanonical(plan));
}

Status VerifyPlanDigest(const ExecutionPlan& plan, std::string_view expected_digest) {
  const std::string actual = PlanDigest(plan);
  if (ConstantTimeEquals(actual, expected_digest)) return Status::Ok();
  return Corrupt("digest_mismatch", "execution plan of task " + plan.task_id + " revision " +
                                        std::to_string(plan.task_revision) + ": digest is " +
                                        actual + ", expected " +
                                        QuoteForMessage(expected_digest, 80));
}

}  // namespace ql
