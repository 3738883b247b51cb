#include "ql/core/task_spec.h"

#include <initializer_list>
#include <optional>

#include "ql/core/artifact.h"
#include "ql/core/canonical_json.h"
#include "ql/core/digest.h"
#include "ql/core/ids.h"
#include "ql/core/overlap.h"
#include "ql/core/retry_policy.h"
#include "ql/core/secret_ref.h"

namespace ql {
namespace {

using nlohmann::json;

bool IsIdentifierKey(std::string_view key) {
  if (key.empty()) return false;
  for (size_t i = 0; i < key.size(); ++i) {
    const char c = key[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

// Returns the path of field `key` under `base`: `base.key`, or `base["odd key"]`; a top-level
// field (empty `base`) is just `key`.
std::string Field(std::string_view base, std::string_view key) {
  if (IsIdentifierKey(key)) {
    return base.empty() ? std::string(key) : std::string(base) + "." + std::string(key);
  }
  return std::string(base) + "[" + QuoteForMessage(key) + "]";
}

std::string Index(std::string_view base, size_t i) {
  return std::string(base) + "[" + std::to_string(i) + "]";
}

Status SpecError(std::string reason, std::string_view path, std::string_view what) {
  return InvalidArgument(std::move(reason), std::string(path) + ": " + std::string(what));
}

Status WrongType(std::string reason, std::string_view path, std::string_view expected,
                 const json& got) {
  return SpecError(std::move(reason), path,
                   "expected " + std::string(expected) + ", got " + DescribeJsonValue(got));
}

// Rejects any key of `object` not in `allowed`, naming the first one in key order.
Status CheckFields(std::string reason, std::string_view path, const json& object,
                   std::initializer_list<std::string_view> allowed, std::string_view context) {
  for (const auto& [key, unused] : object.items()) {
    bool known = false;
    for (std::string_view a : allowed) known = known || a == key;
    if (known) continue;
    std::string list;
    for (std::string_view a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
    return SpecError(std::move(reason), Field(path, key),
                     "unknown field" + std::string(context) + "; allowed fields are " + list);
  }
  return Status::Ok();
}

// Returns the string at `path`, checking type and UTF-8.
Result<std::string> GetSpecString(std::string_view path, const json& value) {
  if (!value.is_string()) return WrongType("spec_invalid_type", path, "a string", value);
  const std::string& s = value.get_ref<const std::string&>();
  if (!IsValidUtf8(s)) return SpecError("spec_invalid_utf8", path, "string is not valid UTF-8");
  return s;
}

bool ContainsNul(std::string_view s) { return s.find('\0') != std::string_view::npos; }

Status CheckAbsolutePath(std::string_view path, std::string_view value) {
  if (value.empty() || value.front() != '/') {
    return SpecError("spec_invalid_path", path,
                     QuoteForMessage(value) + " is not an absolute path (must start with /)");
  }
  if (ContainsNul(value)) {
    return SpecError("spec_invalid_path", path, QuoteForMessage(value) + " contains a NUL byte");
  }
  if (value.size() > kMaxPathBytes) {
    return SpecError("spec_invalid_path", path,
                     "path of " + std::to_string(value.size()) + " bytes is longer than " +
                         std::to_string(kMaxPathBytes) + " bytes: " + QuoteForMessage(value));
  }
  return Status::Ok();
}

Result<ArgvCommand> ParseArgv(std::string_view path, const json& command) {
  QL_RETURN_IF_ERROR(CheckFields("spec_unknown_field", path, command, {"kind", "file", "args"},
                                 " for an argv command"));
  ArgvCommand argv;
  const std::string file_path = Field(path, "file");
  if (!command.contains("file")) {
    return SpecError("spec_missing_field", file_path,
                     "required field is missing (the absolute path of the program to run)");
  }
  QL_ASSIGN_OR_RETURN(argv.file, GetSpecString(file_path, command.at("file")));
  QL_RETURN_IF_ERROR(CheckAbsolutePath(file_path, argv.file));

  if (command.contains("args")) {
    const std::string args_path = Field(path, "args");
    const json& args = command.at("args");
    if (!args.is_array()) return WrongType("spec_invalid_type", args_path, "an array", args);
    if (args.size() > kMaxCommandArgs) {
      return SpecError("spec_too_many_args", args_path,
                       std::to_string(args.size()) + " arguments given, at most " +
                           std::to_string(kMaxCommandArgs) + " allowed");
    }
    argv.args.reserve(args.size());
    for (size_t i = 0; i < args.size(); ++i) {
      const std::string arg_path = Index(args_path, i);
      QL_ASSIGN_OR_RETURN(std::string arg, GetSpecString(arg_path, args[i]));
      if (ContainsNul(arg)) {
        return SpecError("spec_invalid_arg", arg_path,
                         QuoteForMessage(arg) + " contains a NUL byte");
      }
      argv.args.push_back(std::move(arg));
    }
  }
  return argv;
}

Result<ShellCommand> ParseShell(std::string_view path, const json& command) {
  QL_RETURN_IF_ERROR(CheckFields("spec_unknown_field", path, command, {"kind", "command", "shell"},
                                 " for a shell command"));
  ShellCommand shell;
  const std::string command_path = Field(path, "command");
  if (!command.contains("command")) {
    return SpecError("spec_missing_field", command_path,
                     "required field is missing (the shell command line to run)");
  }
  QL_ASSIGN_OR_RETURN(shell.command, GetSpecString(command_path, command.at("command")));
  if (shell.command.empty()) {
    return SpecError("spec_invalid_command", command_path, "shell command is empty");
  }
  if (ContainsNul(shell.command)) {
    return SpecError("spec_invalid_command", command_path,
                     QuoteForMessage(shell.command) + " contains a NUL byte");
  }
  if (command.contains("shell")) {
    const std::string shell_path = Field(path, "shell");
    QL_ASSIGN_OR_RETURN(shell.shell, GetSpecString(shell_path, command.at("shell")));
    if (shell.shell != "/bin/sh" && shell.shell != "/bin/bash") {
      return SpecError("spec_invalid_shell", shell_path,
                       QuoteForMessage(shell.shell) +
                           " is not an allowed shell; use \"/bin/sh\" or \"/bin/bash\"");
    }
  }
  return shell;
}

Result<ScriptCommand> ParseScript(std::string_view path, const json& command) {
  QL_RETURN_IF_ERROR(CheckFields(
      "spec_unknown_field", path, command,
      {"kind", "script", "version", "digest", "scriptKind", "entry", "interpreter", "args"},
      " for a script command"));
  ScriptCommand script;
  const std::string name_path = Field(path, "script");
  if (!command.contains("script")) {
    return SpecError("spec_missing_field", name_path,
                     "required field is missing (the name of a script of the project)");
  }
  QL_ASSIGN_OR_RETURN(script.script, GetSpecString(name_path, command.at("script")));
  if (Status valid = ValidateScriptName(script.script); !valid.ok()) {
    return SpecError("spec_invalid_script", name_path, valid.message());
  }
  if (command.contains("version")) {
    const std::string version_path = Field(path, "version");
    const json& version = command.at("version");
    if (!version.is_number_integer()) {
      return WrongType("spec_invalid_type", version_path, "an integer", version);
    }
    const int64_t v = version.get<int64_t>();
    if (v < 1) return SpecError("spec_invalid_script", version_path, "a version is >= 1");
    script.version = v;
  }
  if (command.contains("digest")) {
    const std::string digest_path = Field(path, "digest");
    QL_ASSIGN_OR_RETURN(script.digest, GetSpecString(digest_path, command.at("digest")));
    if (!IsSha256Hex(script.digest)) {
      return SpecError("spec_invalid_script", digest_path,
                       QuoteForMessage(script.digest) + " is not 64 lowercase hex digits");
    }
  }
  if (command.contains("scriptKind")) {
    const std::string kind_path = Field(path, "scriptKind");
    QL_ASSIGN_OR_RETURN(script.script_kind, GetSpecString(kind_path, command.at("scriptKind")));
    if (script.script_kind != "file" && script.script_kind != "tree") {
      return SpecError("spec_invalid_script", kind_path,
                       QuoteForMessage(script.script_kind) + " is neither \"file\" nor \"tree\"");
    }
  }
  if (command.contains("entry")) {
    const std::string entry_path = Field(path, "entry");
    QL_ASSIGN_OR_RETURN(script.entry, GetSpecString(entry_path, command.at("entry")));
    if (Status valid = ValidateArtifactPath(script.entry); !valid.ok()) {
      return SpecError("spec_invalid_script", entry_path, valid.message());
    }
  }
  if (command.contains("interpreter")) {
    const std::string interpreter_path = Field(path, "interpreter");
    QL_ASSIGN_OR_RETURN(script.interpreter,
                        GetSpecString(interpreter_path, command.at("interpreter")));
    if (!IsScriptInterpreter(script.interpreter)) {
      return SpecError("spec_invalid_script", interpreter_path,
                       QuoteForMessage(script.interpreter) +
                           " is not an interpreter; use node, python3, sh or bash");
    }
  }
  if (command.contains("args")) {
    QL_ASSIGN_OR_RETURN(ArgvCommand args,
                        ParseArgv(path, json{{"file", "/"}, {"args", command.at("args")}}));
    script.args = std::move(args.args);
  }
  return script;
}

Result<std::variant<ArgvCommand, ShellCommand, ScriptCommand>> ParseCommand(const json& command) {
  constexpr std::string_view kPath = "spec.command";
  if (!command.is_object()) return WrongType("spec_invalid_type", kPath, "an object", command);
  const std::string kind_path = Field(kPath, "kind");
  if (!command.contains("kind")) {
    return SpecError("spec_missing_field", kind_path,
                     "required field is missing; use \"argv\" or \"shell\"");
  }
  QL_ASSIGN_OR_RETURN(std::string kind, GetSpecString(kind_path, command.at("kind")));
  using Command = std::variant<ArgvCommand, ShellCommand, ScriptCommand>;
  if (kind == "argv") {
    QL_ASSIGN_OR_RETURN(ArgvCommand argv, ParseArgv(kPath, command));
    return Command(std::move(argv));
  }
  if (kind == "shell") {
    QL_ASSIGN_OR_RETURN(ShellCommand shell, ParseShell(kPath, command));
    return Command(std::move(shell));
  }
  if (kind == "script") {
    QL_ASSIGN_OR_RETURN(ScriptCommand script, ParseScript(kPath, command));
    return Command(std::move(script));
  }
  return SpecError(
      "spec_invalid_command_kind", kind_path,
      QuoteForMessage(kind) + " is not a command kind; use \"argv\", \"shell\" or \"script\"");
}

bool MatchesEnvNamePattern(std::string_view name) { return IsIdentifierKey(name); }

Result<std::vector<std::pair<std::string, std::string>>> ParseEnvironment(const json& env) {
  constexpr std::string_view kPath = "spec.environment";
  if (!env.is_object()) return WrongType("spec_invalid_type", kPath, "an object", env);
  if (env.size() > kMaxEnvironmentEntries) {
    return SpecError("spec_too_many_env", kPath,
                     std::to_string(env.size()) + " variables given, at most " +
                         std::to_string(kMaxEnvironmentEntries) + " allowed");
  }
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(env.size());
  // nlohmann objects iterate in byte order of the keys, so `out` comes out sorted.
  for (const auto& [name, value] : env.items()) {
    if (!IsValidUtf8(name)) {
      return SpecError("spec_invalid_utf8", kPath, "a variable name is not valid UTF-8");
    }
    if (!MatchesEnvNamePattern(name)) {
      return SpecError("spec_invalid_env_name", kPath,
                       "variable name " + QuoteForMessage(name) +
                           " is invalid; names must match [A-Za-z_][A-Za-z0-9_]*");
    }
    if (name.starts_with("QL3_")) {
      return SpecError("spec_invalid_env_name", kPath,
                       "variable name " + QuoteForMessage(name) + " uses the reserved prefix QL3_");
    }
    if (name == "QL_RUN_ID" || name == "QL_ATTEMPT_ID") {
      return SpecError("spec_invalid_env_name", kPath,
                       "variable name " + QuoteForMessage(name) +
                           " is reserved; the executor sets it for every run");
    }
    const std::string value_path = Field(kPath, name);
    QL_ASSIGN_OR_RETURN(std::string text, GetSpecString(value_path, value));
    if (ContainsNul(text)) {
      return SpecError("spec_invalid_env_value", value_path,
                       QuoteForMessage(text) + " contains a NUL byte");
    }
    if (LooksLikeSecretRef(text)) {
      if (Status ref = DecodeSecretRef(text).status(); !ref.ok()) {
        return SpecError("spec_invalid_secret_ref", value_path, ref.message());
      }
    }
    out.emplace_back(name, std::move(text));
  }
  return out;
}

Result<int64_t> ParseTimeout(const json& value) {
  constexpr std::string_view kPath = "spec.timeoutMs";
  if (!value.is_number_integer()) {
    return WrongType("spec_invalid_type", kPath, "an integer number of milliseconds", value);
  }
  const bool too_big =
      value.is_number_unsigned() &&
      value.get<json::number_unsigned_t>() > static_cast<json::number_unsigned_t>(kMaxTimeoutMs);
  const int64_t ms = too_big ? kMaxTimeoutMs + 1 : value.get<int64_t>();
  if (too_big || ms < kMinTimeoutMs || ms > kMaxTimeoutMs) {
    return SpecError("spec_timeout_out_of_range", kPath,
                     DescribeJsonValue(value) + " is outside 1 ms .. 365 days (" +
                         std::to_string(kMaxTimeoutMs) + " ms)");
  }
  return ms;
}

size_t CountCodePoints(std::string_view utf8) {
  size_t n = 0;
  for (char c : utf8) n += (static_cast<unsigned char>(c) & 0xc0) != 0x80;
  return n;
}

// Returns the first control character (C0, DEL or C1) in valid UTF-8 `s`, if any.
std::optional<uint32_t> FirstControlChar(std::string_view s) {
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) return c;
    // C1 controls U+0080..U+009F are encoded as C2 80 .. C2 9F.
    if (c == 0xc2 && i + 1 < s.size()) {
      const unsigned char next = static_cast<unsigned char>(s[i + 1]);
      if (next >= 0x80 && next <= 0x9f) return next;
    }
  }
  return std::nullopt;
}

std::string CodePointName(uint32_t cp) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out = "U+00";
  out.push_back(kHex[(cp >> 4) & 0xf]);
  out.push_back(kHex[cp & 0xf]);
  return out;
}

Status CheckName(const json& value) {
  if (!value.is_string()) return WrongType("task_invalid_name", "name", "a string", value);
  return ValidateObjectName("task_invalid_name", "name", value.get_ref<const std::string&>(),
                            kMaxTaskNameChars);
}

bool IsLabelKey(std::string_view key) {
  if (key.empty() || key.size() > 63) return false;
  for (size_t i = 0; i < key.size(); ++i) {
    const char c = key[i];
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    const bool punct = c == '.' || c == '_' || c == '/' || c == '-';
    if (!alnum && !(i > 0 && punct)) return false;
  }
  return true;
}

Result<std::map<std::string, std::string>> ParseLabels(const json& labels) {
  constexpr std::string_view kPath = "labels";
  if (!labels.is_object()) return WrongType("task_invalid_label", kPath, "an object", labels);
  if (labels.size() > kMaxLabels) {
    return SpecError("task_invalid_label", kPath,
                     std::to_string(labels.size()) + " labels given, at most " +
                         std::to_string(kMaxLabels) + " allowed");
  }
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : labels.items()) {
    if (!IsLabelKey(key)) {
      return SpecError("task_invalid_label", kPath,
                       "label key " + QuoteForMessage(key) +
                           " is invalid; keys must match [a-z0-9][a-z0-9._/-]{0,62}");
    }
    const std::string value_path = Field(kPath, key);
    if (!value.is_string()) return WrongType("task_invalid_label", value_path, "a string", value);
    const std::string& text = value.get_ref<const std::string&>();
    if (!IsValidUtf8(text)) {
      return SpecError("task_invalid_label", value_path, "value is not valid UTF-8");
    }
    if (const size_t chars = CountCodePoints(text); chars > kMaxLabelValueChars) {
      return SpecError("task_invalid_label", value_path,
                       "value has " + std::to_string(chars) + " characters, at most " +
                           std::to_string(kMaxLabelValueChars) +
                           " allowed: " + QuoteForMessage(text));
    }
    out.emplace(key, text);
  }
  return out;
}

}  // namespace

Result<TaskLimits> ParseTaskLimits(const json& value, std::string_view path) {
  if (!value.is_object()) return WrongType("spec_invalid_type", path, "an object", value);
  QL_RETURN_IF_ERROR(CheckFields("spec_unknown_field", path, value,
                                 {"memoryMib", "pids", "cpuSeconds", "openFiles"}, ""));
  TaskLimits out;
  struct Range {
    const char* name;
    std::optional<int64_t>* field;
    int64_t min;
    int64_t max;
  };
  for (const Range& r : {Range{"memoryMib", &out.memory_mib, 4, 1048576},
                         Range{"pids", &out.pids, 1, 1048576},
                         Range{"cpuSeconds", &out.cpu_seconds, 1, 31536000},
                         Range{"openFiles", &out.open_files, 16, 1048576}}) {
    if (!value.contains(r.name)) continue;
    const std::string field = Field(path, r.name);
    const json& v = value.at(r.name);
    if (!v.is_number_integer()) return WrongType("spec_invalid_type", field, "an integer", v);
    const bool in_range = !v.is_number_unsigned() || v.get<json::number_unsigned_t>() <=
                                                         static_cast<json::number_unsigned_t>(r.max);
    const int64_t n = in_range ? v.get<int64_t>() : r.max + 1;
    if (n < r.min || n > r.max) {
      return SpecError("spec_invalid_limit", field,
                       DescribeJsonValue(v) + " is outside " + std::to_string(r.min) + " .. " +
                           std::to_string(r.max));
    }
    *r.field = n;
  }
  return out;
}

json TaskLimitsToJson(const TaskLimits& limits) {
  json out = json::object();
  if (limits.memory_mib) out["memoryMib"] = *limits.memory_mib;
  if (limits.pids) out["pids"] = *limits.pids;
  if (limits.cpu_seconds) out["cpuSeconds"] = *limits.cpu_seconds;
  if (limits.open_files) out["openFiles"] = *limits.open_files;
  return out;
}

Result<CommandSpec> ParseCommandSpec(const json& spec) {
  constexpr std::string_view kPath = "spec";
  if (!spec.is_object()) return WrongType("spec_invalid_type", kPath, "an object", spec);
  QL_RETURN_IF_ERROR(CheckFields("spec_unknown_field", kPath, spec,
                                 {"command", "environment", "workingDirectory", "timeoutMs",
                                  "limits", "network", "isolation", "placement"},
                                 ""));
  CommandSpec out;
  if (!spec.contains("command")) {
    return SpecError("spec_missing_field", Field(kPath, "command"),
                     "required field is missing ({\"kind\":\"argv\",...} or "
                     "{\"kind\":\"shell\",...})");
  }
  QL_ASSIGN_OR_RETURN(out.command, ParseCommand(spec.at("command")));
  if (spec.contains("environment")) {
    QL_ASSIGN_OR_RETURN(out.environment, ParseEnvironment(spec.at("environment")));
  }
  if (spec.contains("workingDirectory")) {
    const std::string wd_path = Field(kPath, "workingDirectory");
    QL_ASSIGN_OR_RETURN(std::string wd, GetSpecString(wd_path, spec.at("workingDirectory")));
    QL_RETURN_IF_ERROR(CheckAbsolutePath(wd_path, wd));
    out.working_directory = std::move(wd);
  }
  if (spec.contains("timeoutMs")) {
    QL_ASSIGN_OR_RETURN(out.timeout_ms, ParseTimeout(spec.at("timeoutMs")));
  }
  if (spec.contains("limits")) {
    QL_ASSIGN_OR_RETURN(out.limits, ParseTaskLimits(spec.at("limits"), Field(kPath, "limits")));
  }
  // "network": "host" | "none" and "isolation": "confined" | "none": true when "none".
  auto none_of = [&](const char* field, const char* other, const char* reason) -> Result<bool> {
    const std::string path = Field(kPath, field);
    QL_ASSIGN_OR_RETURN(std::string value, GetSpecString(path, spec.at(field)));
    if (value != other && value != "none") {
      return SpecError(reason, path,
                       QuoteForMessage(value) + " is not \"" + other + "\" or \"none\"");
    }
    return value == "none";
  };
  if (spec.contains("network")) {
    QL_ASSIGN_OR_RETURN(bool none, none_of("network", "host", "spec_invalid_network"));
    out.network = !none;
  }
  if (spec.contains("isolation")) {
    const std::string path = Field(kPath, "isolation");
    QL_ASSIGN_OR_RETURN(out.unconfined, none_of("isolation", "confined", "spec_invalid_isolation"));
    if (out.unconfined && !out.network) {
      return SpecError("spec_invalid_isolation", path,
                       "\"none\" cannot be combined with network \"none\", which needs "
                       "namespaces");
    }
  }
  if (spec.contains("placement")) {
    QL_ASSIGN_OR_RETURN(out.placement,
                        ParsePlacement(spec.at("placement"), Field(kPath, "placement")));
  }
  // Every string is valid UTF-8 and every number an int64 here, so encoding cannot fail.
  const size_t size = internal::CanonicalJsonLossy(CommandSpecToJson(out)).size();
  if (size > kMaxSpecCanonicalBytes) {
    return SpecError("spec_too_large", kPath,
                     "canonical encoding is " + std::to_string(size) + " bytes, at most " +
                         std::to_string(kMaxSpecCanonicalBytes) + " allowed");
  }
  return out;
}

json CommandSpecToJson(const CommandSpec& spec) {
  json out = json::object();
  if (const auto* argv = std::get_if<ArgvCommand>(&spec.command)) {
    out["command"] = {{"kind", "argv"}, {"file", argv->file}, {"args", argv->args}};
  } else if (const auto* shell = std::get_if<ShellCommand>(&spec.command)) {
    out["command"] = {{"kind", "shell"}, {"command", shell->command}, {"shell", shell->shell}};
  } else {
    const auto& script = std::get<ScriptCommand>(spec.command);
    json command = {{"kind", "script"}, {"script", script.script}, {"args", script.args}};
    if (script.version) command["version"] = *script.version;
    if (!script.digest.empty()) command["digest"] = script.digest;
    if (!script.script_kind.empty()) command["scriptKind"] = script.script_kind;
    if (!script.entry.empty()) command["entry"] = script.entry;
    if (!script.interpreter.empty()) command["interpreter"] = script.interpreter;
    out["command"] = std::move(command);
  }
  json env = json::object();
  for (const auto& [name, value] : spec.environment) env[name] = value;
  out["environment"] = std::move(env);
  if (spec.working_directory.has_value()) out["workingDirectory"] = *spec.working_directory;
  out["timeoutMs"] = spec.timeout_ms;
  if (!spec.limits.empty()) out["limits"] = TaskLimitsToJson(spec.limits);
  if (!spec.network) out["network"] = "none";
  if (spec.unconfined) out["isolation"] = "none";
  if (!spec.placement.is_default()) out["placement"] = PlacementToJson(spec.placement);
  return out;
}

Status ValidateCommandSpec(const CommandSpec& spec) {
  for (size_t i = 1; i < spec.environment.size(); ++i) {
    if (!(spec.environment[i - 1].first < spec.environment[i].first)) {
      return InvalidArgument("spec_not_normalized",
                             "spec.environment: variables are not sorted by name without "
                             "duplicates at " +
                                 QuoteForMessage(spec.environment[i].first));
    }
  }
  QL_ASSIGN_OR_RETURN(CommandSpec reparsed, ParseCommandSpec(CommandSpecToJson(spec)));
  if (!(reparsed == spec)) {
    return InvalidArgument("spec_not_normalized", "spec: not in normalised form");
  }
  if (const auto* script = std::get_if<ScriptCommand>(&spec.command)) {
    if (!script->pinned()) {
      return InvalidArgument("spec_script_unpinned",
                             "spec.command: script " + script->script +
                                 " is not pinned to a version, digest, entry and interpreter");
    }
  }
  return Status::Ok();
}

bool IsScriptInterpreter(std::string_view name) {
  return name == "node" || name == "python3" || name == "sh" || name == "bash";
}

bool IsAllowedEnvName(std::string_view name) {
  return MatchesEnvNamePattern(name) && !name.starts_with("QL3_") && name != "QL_RUN_ID" &&
         name != "QL_ATTEMPT_ID";
}

Status ValidateObjectName(std::string_view reason, std::string_view path, const std::string& name,
                          size_t max_chars) {
  const std::string code(reason);
  if (!IsValidUtf8(name)) return SpecError(code, path, "name is not valid UTF-8");
  const size_t chars = CountCodePoints(name);
  if (chars == 0) return SpecError(code, path, "name is empty");
  if (chars > max_chars) {
    return SpecError(code, path,
                     "name has " + std::to_string(chars) + " characters, at most " +
                         std::to_string(max_chars) + " allowed: " + QuoteForMessage(name));
  }
  if (const std::optional<uint32_t> control = FirstControlChar(name)) {
    return SpecError(code, path,
                     QuoteForMessage(name) + " contains the control character " +
                         CodePointName(*control));
  }
  if (name.find('/') != std::string::npos) {
    return SpecError(code, path,
                     QuoteForMessage(name) + " contains '/'; a name is part of URL paths");
  }
  if (IsCanonicalUuid(name)) {
    return SpecError(code, path,
                     QuoteForMessage(name) + " has the form of an id; a name must not, so that "
                                             "every reference is either an id or a name");
  }
  return Status::Ok();
}

Result<TaskContent> ParseTaskContent(const json& body) {
  if (!body.is_object()) return WrongType("task_invalid_type", "body", "an object", body);
  QL_RETURN_IF_ERROR(CheckFields("task_unknown_field", "", body,
                                 {"name", "kind", "spec", "labels", "enabled", "retry", "approval",
                                  "concurrency"},
                                 " of a task"));
  TaskContent out;
  if (body.contains("kind")) {
    const json& kind = body.at("kind");
    if (!kind.is_string()) return WrongType("task_invalid_type", "kind", "a string", kind);
    if (kind.get_ref<const std::string&>() != kCommandTaskKind) {
      return SpecError("task_kind_unsupported", "kind",
                       QuoteForMessage(kind.get_ref<const std::string&>()) +
                           " is not supported; the only writable kind is \"" +
                           std::string(kCommandTaskKind) + "\"");
    }
  }
  if (!body.contains("name")) {
    return SpecError("task_missing_field", "name", "required field is missing");
  }
  QL_RETURN_IF_ERROR(CheckName(body.at("name")));
  out.name = body.at("name").get<std::string>();
  if (!body.contains("spec")) {
    return SpecError("task_missing_field", "spec", "required field is missing");
  }
  QL_ASSIGN_OR_RETURN(out.spec, ParseCommandSpec(body.at("spec")));
  if (body.contains("labels")) {
    QL_ASSIGN_OR_RETURN(out.labels, ParseLabels(body.at("labels")));
  }
  if (body.contains("enabled")) {
    const json& enabled = body.at("enabled");
    if (!enabled.is_boolean())
      return WrongType("task_invalid_type", "enabled", "a boolean", enabled);
    out.enabled = enabled.get<bool>();
  }
  if (body.contains("retry")) {
    QL_ASSIGN_OR_RETURN(out.retry, ParseRetryPolicy(body.at("retry")));
  }
  if (body.contains("approval")) {
    QL_ASSIGN_OR_RETURN(out.approval, ParseApprovalPolicy(body.at("approval")));
  }
  if (body.contains("concurrency")) {
    const json& limit = body.at("concurrency");
    if (!limit.is_number_integer() || limit.get<int64_t>() < 1 ||
        limit.get<int64_t>() > kMaxConcurrency) {
      return InvalidArgument("invalid_concurrency",
                             "concurrency must be an integer 1.." +
                                 std::to_string(kMaxConcurrency) + ", got " +
                                 QuoteForMessage(limit.dump()));
    }
    out.concurrency = limit.get<int64_t>();
  }
  return out;
}

json TaskContentToJson(const TaskContent& content) {
  json labels = json::object();
  for (const auto& [key, value] : content.labels) labels[key] = value;
  json out{{"enabled", content.enabled},
           {"kind", content.kind},
           {"labels", std::move(labels)},
           {"name", content.name},
           {"retry", RetryPolicyToJson(content.retry)},
           {"spec", CommandSpecToJson(content.spec)}};
  if (content.approval.has_value()) out["approval"] = ApprovalPolicyToJson(*content.approval);
  if (content.concurrency.has_value()) out["concurrency"] = *content.concurrency;
  return out;
}

std::string TaskContentCanonical(const TaskContent& content) {
  return internal::CanonicalJsonLossy(TaskContentToJson(content));
}

std::string TaskContentDigest(const TaskContent& content) {
  return DomainDigest(kCommandTaskKind, TaskContentCanonical(content));
}

std::string TriggerContentDigest(const TriggerRevisionRecord& r) {
  nlohmann::json content = {
      {"enabled", r.enabled},       {"expression", r.expression}, {"misfire", r.misfire},
      {"task_digest", r.task_digest}, {"task_id", r.task_id},     {"task_revision", r.task_revision},
      {"timezone", r.timezone}};
  // Present only when it is not the default, so revisions written before it existed keep
  // their digests.
  if (r.overlap != "allow") content["overlap"] = r.overlap;
  if (r.jitter_ms != 0) content["jitter_ms"] = r.jitter_ms;
  return DomainDigest(kCronTriggerKind, internal::CanonicalJsonLossy(content));
}

Result<std::vector<std::pair<std::string, SecretRef>>> SecretEnvironment(
    const std::vector<std::pair<std::string, std::string>>& environment) {
  std::vector<std::pair<std::string, SecretRef>> out;
  for (const auto& [name, value] : environment) {
    if (!LooksLikeSecretRef(value)) continue;
    QL_ASSIGN_OR_RETURN(SecretRef ref, DecodeSecretRef(value));
    out.emplace_back(name, std::move(ref));
  }
  return out;
}

}  // namespace ql
