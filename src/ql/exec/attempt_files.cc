#include "ql/exec/attempt_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>

#include "ql/exec/posix_util.h"

namespace ql::exec::internal {
namespace {

using nlohmann::json;

// Dumps without throwing on invalid UTF-8 (paths and messages are replaced, never lost).
std::string DumpLenient(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

json IdentityJson(const ProcessIdentity& id) {
  return json{{"pid", id.pid}, {"start_time_ticks", id.start_time_ticks}};
}

template <typename T>
json OptionalJson(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

// Typed field access with errors that name the file and the field.
class FieldReader {
 public:
  FieldReader(const json& object, std::string_view what) : object_(object), what_(what) {}

  Status Bad(std::string_view field, std::string_view why) const {
    return Corrupt("exec_corrupt_record",
                   std::string(what_) + ": field '" + std::string(field) + "' " + std::string(why));
  }

  Result<const json*> Get(const char* key) const {
    auto it = object_.find(key);
    if (it == object_.end()) return Bad(key, "is missing");
    return &*it;
  }

  Result<std::string> String(const char* key) const {
    QL_ASSIGN_OR_RETURN(const json* v, Get(key));
    if (!v->is_string()) return Bad(key, "is not a string");
    return v->get<std::string>();
  }

  Result<int64_t> Int(const char* key) const {
    QL_ASSIGN_OR_RETURN(const json* v, Get(key));
    if (!v->is_number_integer()) return Bad(key, "is not an integer");
    return v->get<int64_t>();
  }

  Result<std::optional<int64_t>> OptionalInt(const char* key) const {
    auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) return std::optional<int64_t>();
    if (!it->is_number_integer()) return Bad(key, "is not an integer or null");
    return std::optional<int64_t>(it->get<int64_t>());
  }

  Result<bool> Bool(const char* key) const {
    QL_ASSIGN_OR_RETURN(const json* v, Get(key));
    if (!v->is_boolean()) return Bad(key, "is not a boolean");
    return v->get<bool>();
  }

  Result<ProcessIdentity> Identity(const char* key) const {
    QL_ASSIGN_OR_RETURN(const json* v, Get(key));
    if (!v->is_object()) return Bad(key, "is not an object");
    FieldReader inner(*v, what_);
    QL_ASSIGN_OR_RETURN(int64_t pid, inner.Int("pid"));
    QL_ASSIGN_OR_RETURN(const json* ticks, inner.Get("start_time_ticks"));
    if (!ticks->is_number_unsigned() && !ticks->is_number_integer()) {
      return Bad(key, "has a non-integer start_time_ticks");
    }
    if (pid <= 0) return Bad(key, "has a non-positive pid");
    return ProcessIdentity{static_cast<pid_t>(pid), ticks->get<uint64_t>()};
  }

 private:
  const json& object_;
  std::string_view what_;
};

Result<json> ParseObject(std::string_view text, std::string_view what) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Corrupt("exec_corrupt_record", std::string(what) + " is not a JSON object");
  }
  return j;
}

Status FsyncDirectoryOf(const std::string& path) {
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Internal("exec_io_error", ErrnoMessage("cannot open directory " + dir, errno));
  int rc = fsync(fd);
  int err = errno;
  close(fd);
  if (rc != 0) return Internal("exec_io_error", ErrnoMessage("cannot fsync directory " + dir, err));
  return Status::Ok();
}

json LimitsJson(const CommandLimits& l) {
  json j = json::object();
  if (l.memory_bytes) j["memory_bytes"] = *l.memory_bytes;
  if (l.pids) j["pids"] = *l.pids;
  if (l.cpu_seconds) j["cpu_seconds"] = *l.cpu_seconds;
  if (l.open_files) j["open_files"] = *l.open_files;
  return j;
}

json ConfinementJson(const Confinement& c) {
  return json{{"mode", ConfinementModeName(c.mode)},
              {"uid", c.uid},
              {"gid", c.gid},
              {"hidden_paths", c.hidden_paths},
              {"writable_paths", c.writable_paths},
              {"read_only_paths", c.read_only_paths},
              {"own_directory", c.own_directory},
              {"network", c.network},
              {"limits", LimitsJson(c.limits)},
              {"cgroups",
               {{"version", c.cgroups.version},
                {"unified", c.cgroups.unified},
                {"memory", c.cgroups.memory},
                {"pids", c.cgroups.pids}}}};
}

Result<Confinement> ParseConfinement(const json& j, std::string_view what) {
  auto bad = [&](std::string_view why) {
    return Corrupt("exec_corrupt_record",
                   std::string(what) + ": field 'confinement' " + std::string(why));
  };
  if (!j.is_object()) return bad("is not an object");
  Confinement c;
  try {
    std::optional<Confinement::Mode> mode = ParseConfinementMode(j.at("mode").get<std::string>());
    if (!mode) return bad("names no known mode");
    c.mode = *mode;
    c.uid = j.at("uid").get<uint32_t>();
    c.gid = j.at("gid").get<uint32_t>();
    c.hidden_paths = j.at("hidden_paths").get<std::vector<std::string>>();
    c.writable_paths = j.at("writable_paths").get<std::vector<std::string>>();
    c.own_directory = j.value("own_directory", std::string());
    if (j.contains("read_only_paths")) {
      c.read_only_paths = j.at("read_only_paths").get<std::vector<std::string>>();
    }
    c.network = j.at("network").get<bool>();
    const json& limits = j.at("limits");
    for (auto [key, field] : {std::pair{"memory_bytes", &c.limits.memory_bytes},
                              std::pair{"pids", &c.limits.pids},
                              std::pair{"cpu_seconds", &c.limits.cpu_seconds},
                              std::pair{"open_files", &c.limits.open_files}}) {
      if (limits.contains(key)) *field = limits.at(key).get<int64_t>();
    }
    const json& cgroups = j.at("cgroups");
    c.cgroups.version = cgroups.at("version").get<int>();
    c.cgroups.unified = cgroups.at("unified").get<std::string>();
    c.cgroups.memory = cgroups.at("memory").get<std::string>();
    c.cgroups.pids = cgroups.at("pids").get<std::string>();
  } catch (const json::exception& e) {
    return bad(std::string("is malformed: ") + e.what());
  }
  return c;
}

}  // namespace

std::string PathIn(std::string_view dir, std::string_view name) {
  std::string path(dir);
  if (path.empty() || path.back() != '/') path += '/';
  path += name;
  return path;
}

std::string ErrnoMessage(std::string_view what, int err) {
  const char* text = strerrordesc_np(err);
  return std::string(what) + ": " + (text ? text : "errno " + std::to_string(err));
}

Result<std::string> EncodeSpec(const LaunchSpec& spec) {
  json env = json::array();
  for (const auto& [name, value] : spec.environment) env.push_back(json::array({name, value}));
  json j{{"argv", spec.argv},
         {"environment", std::move(env)},
         {"working_directory", spec.working_directory.value_or(spec.default_working_directory)},
         {"timeout_ms", spec.timeout_ms},
         {"log_path", spec.log_path},
         {"log_cap_bytes", spec.log_cap_bytes},
         {"kill_grace_ms", spec.kill_grace_ms},
         {"fsync_result", spec.fsync_result}};
  if (spec.confinement != Confinement{}) j["confinement"] = ConfinementJson(spec.confinement);
  try {
    return j.dump();
  } catch (const json::exception&) {
    // The command's strings are passed to execve byte for byte; replacing bytes would run
    // something else, so refuse instead.
    return InvalidArgument("exec_bad_spec", "argv, environment or a path is not valid UTF-8");
  }
}

std::string EncodeSupervisor(const SupervisorRecord& r) {
  json j{{"supervisor", IdentityJson(r.supervisor)},
         {"boot_id", r.boot_id},
         {"command", r.command ? IdentityJson(*r.command) : json(nullptr)},
         {"started_at_ms", r.started_at_ms}};
  return DumpLenient(j);
}

std::string EncodeResult(const ResultRecord& r) {
  const Outcome& o = r.outcome;
  json j{{"outcome", OutcomeKindName(o.kind)},
         {"exit_code", OptionalJson(o.exit_code)},
         {"signal", OptionalJson(o.signal)},
         {"log_bytes_written", o.log_bytes_written},
         {"log_bytes_dropped", o.log_bytes_dropped},
         {"output_bytes", o.output_bytes},
         {"log_truncated", o.log_truncated},
         {"truncated_at_bytes", OptionalJson(o.truncated_at_bytes)},
         {"started_at_ms", o.started_at_ms},
         {"finished_at_ms", o.finished_at_ms},
         {"message", o.message},
         {"error_code", o.error_code},
         {"confinement", o.confinement},
         {"descendants_ended", o.descendants_ended},
         {"supervisor", IdentityJson(r.supervisor)},
         {"boot_id", r.boot_id}};
  return DumpLenient(j);
}

namespace {

constexpr std::string_view kSecretsMagic = "qinglong/attempt-secrets@v1\n";
constexpr char kSecretVariable = 'E';
constexpr char kMaskValue = 'M';

void AppendSized(std::string& out, std::string_view bytes) {
  const uint32_t size = static_cast<uint32_t>(bytes.size());
  out.append(reinterpret_cast<const char*>(&size), sizeof(size));
  out.append(bytes);
}

// Reads one length-prefixed field at `at`; nullopt when the input ends early.
std::optional<std::string> ReadSized(std::string_view in, size_t& at) {
  uint32_t size = 0;
  if (in.size() - at < sizeof(size)) return std::nullopt;
  std::memcpy(&size, in.data() + at, sizeof(size));
  at += sizeof(size);
  if (in.size() - at < size) return std::nullopt;
  std::string field(in.substr(at, size));
  at += size;
  return field;
}

}  // namespace

size_t EncodedSecretsSize(const LaunchSpec& spec) {
  if (spec.secret_environment.empty() && spec.mask_values.empty()) return 0;
  size_t size = kSecretsMagic.size();
  for (const auto& [name, value] : spec.secret_environment) {
    size += 1 + 2 * sizeof(uint32_t) + name.size() + value.size();
  }
  for (const std::string& value : spec.mask_values) size += 1 + sizeof(uint32_t) + value.size();
  return size;
}

std::string EncodeSecrets(const LaunchSpec& spec) {
  if (spec.secret_environment.empty() && spec.mask_values.empty()) return "";
  std::string out(kSecretsMagic);
  for (const auto& [name, value] : spec.secret_environment) {
    out.push_back(kSecretVariable);
    AppendSized(out, name);
    AppendSized(out, value);
  }
  for (const std::string& value : spec.mask_values) {
    out.push_back(kMaskValue);
    AppendSized(out, value);
  }
  return out;
}

Result<AttemptSecrets> DecodeSecrets(std::string_view in) {
  auto bad = [] { return Corrupt("exec_corrupt_record", "the attempt's secrets are damaged"); };
  if (!in.starts_with(kSecretsMagic)) return bad();
  AttemptSecrets secrets;
  size_t at = kSecretsMagic.size();
  while (at < in.size()) {
    const char kind = in[at++];
    std::optional<std::string> first = ReadSized(in, at);
    if (!first.has_value()) return bad();
    if (kind == kMaskValue) {
      secrets.mask_values.push_back(std::move(*first));
    } else if (kind == kSecretVariable) {
      std::optional<std::string> value = ReadSized(in, at);
      if (!value.has_value()) return bad();
      secrets.environment.emplace_back(std::move(*first), std::move(*value));
    } else {
      return bad();
    }
  }
  return secrets;
}

Result<LaunchSpec> DecodeSpec(std::string_view text, std::string_view what) {
  QL_ASSIGN_OR_RETURN(json j, ParseObject(text, what));
  FieldReader f(j, what);
  LaunchSpec spec;
  QL_ASSIGN_OR_RETURN(const json* argv, f.Get("argv"));
  if (!argv->is_array()) return f.Bad("argv", "is not an array");
  for (const json& a : *argv) {
    if (!a.is_string()) return f.Bad("argv", "holds a non-string");
    spec.argv.push_back(a.get<std::string>());
  }
  QL_ASSIGN_OR_RETURN(const json* env, f.Get("environment"));
  if (!env->is_array()) return f.Bad("environment", "is not an array");
  for (const json& e : *env) {
    if (!e.is_array() || e.size() != 2 || !e[0].is_string() || !e[1].is_string()) {
      return f.Bad("environment", "holds an entry that is not a [name, value] pair of strings");
    }
    spec.environment.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
  }
  QL_ASSIGN_OR_RETURN(spec.working_directory, f.String("working_directory"));
  QL_ASSIGN_OR_RETURN(spec.timeout_ms, f.Int("timeout_ms"));
  QL_ASSIGN_OR_RETURN(spec.log_path, f.String("log_path"));
  QL_ASSIGN_OR_RETURN(spec.log_cap_bytes, f.Int("log_cap_bytes"));
  QL_ASSIGN_OR_RETURN(spec.kill_grace_ms, f.Int("kill_grace_ms"));
  // Optional: a spec.json written before the field existed asked for an fsynced result.
  if (j.contains("fsync_result")) {
    QL_ASSIGN_OR_RETURN(spec.fsync_result, f.Bool("fsync_result"));
  }
  // Optional: absent for a command run as the daemon without limits.
  if (auto it = j.find("confinement"); it != j.end()) {
    QL_ASSIGN_OR_RETURN(spec.confinement, ParseConfinement(*it, what));
  }
  return spec;
}

Result<SupervisorRecord> DecodeSupervisor(std::string_view text, std::string_view what) {
  QL_ASSIGN_OR_RETURN(json j, ParseObject(text, what));
  FieldReader f(j, what);
  SupervisorRecord r;
  QL_ASSIGN_OR_RETURN(r.supervisor, f.Identity("supervisor"));
  QL_ASSIGN_OR_RETURN(r.boot_id, f.String("boot_id"));
  auto it = j.find("command");
  if (it != j.end() && !it->is_null()) {
    QL_ASSIGN_OR_RETURN(r.command, f.Identity("command"));
  }
  QL_ASSIGN_OR_RETURN(r.started_at_ms, f.Int("started_at_ms"));
  return r;
}

Result<ResultRecord> DecodeResult(std::string_view text, std::string_view what) {
  QL_ASSIGN_OR_RETURN(json j, ParseObject(text, what));
  FieldReader f(j, what);
  ResultRecord r;
  Outcome& o = r.outcome;
  QL_ASSIGN_OR_RETURN(std::string kind, f.String("outcome"));
  std::optional<OutcomeKind> parsed = ParseOutcomeKind(kind);
  if (!parsed) return f.Bad("outcome", "names no known outcome: " + kind);
  o.kind = *parsed;
  QL_ASSIGN_OR_RETURN(std::optional<int64_t> exit_code, f.OptionalInt("exit_code"));
  QL_ASSIGN_OR_RETURN(std::optional<int64_t> signal, f.OptionalInt("signal"));
  if (exit_code) o.exit_code = static_cast<int>(*exit_code);
  if (signal) o.signal = static_cast<int>(*signal);
  QL_ASSIGN_OR_RETURN(o.log_bytes_written, f.Int("log_bytes_written"));
  // Optional, so that a result.json written by an older supervisor still reads.
  QL_ASSIGN_OR_RETURN(std::optional<int64_t> dropped, f.OptionalInt("log_bytes_dropped"));
  o.log_bytes_dropped = dropped.value_or(0);
  QL_ASSIGN_OR_RETURN(o.output_bytes, f.Int("output_bytes"));
  QL_ASSIGN_OR_RETURN(o.log_truncated, f.Bool("log_truncated"));
  QL_ASSIGN_OR_RETURN(o.truncated_at_bytes, f.OptionalInt("truncated_at_bytes"));
  QL_ASSIGN_OR_RETURN(o.started_at_ms, f.Int("started_at_ms"));
  QL_ASSIGN_OR_RETURN(o.finished_at_ms, f.Int("finished_at_ms"));
  QL_ASSIGN_OR_RETURN(o.message, f.String("message"));
  // Optional, so that a result.json written by an older supervisor still reads.
  if (j.contains("error_code")) {
    QL_ASSIGN_OR_RETURN(o.error_code, f.String("error_code"));
  }
  if (j.contains("confinement")) {
    QL_ASSIGN_OR_RETURN(o.confinement, f.String("confinement"));
  }
  QL_ASSIGN_OR_RETURN(std::optional<int64_t> ended, f.OptionalInt("descendants_ended"));
  o.descendants_ended = ended.value_or(0);
  QL_ASSIGN_OR_RETURN(r.supervisor, f.Identity("supervisor"));
  QL_ASSIGN_OR_RETURN(r.boot_id, f.String("boot_id"));
  return r;
}

Status WriteFileAtomically(const std::string& path, std::string_view content,
                           Durability durability) {
  std::string temp = path + ".tmp";
  int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Internal("exec_io_error", ErrnoMessage("cannot create " + temp, errno));
  if (!WriteAll(fd, content.data(), content.size())) {
    int err = errno;
    close(fd);
    unlink(temp.c_str());
    return Internal("exec_io_error", ErrnoMessage("cannot write " + temp, err));
  }
  if (durability == Durability::kPowerLossSafe && fsync(fd) != 0) {
    int err = errno;
    close(fd);
    unlink(temp.c_str());
    return Internal("exec_io_error", ErrnoMessage("cannot fsync " + temp, err));
  }
  close(fd);
  if (rename(temp.c_str(), path.c_str()) != 0) {
    int err = errno;
    unlink(temp.c_str());
    return Internal("exec_io_error", ErrnoMessage("cannot rename " + temp + " to " + path, err));
  }
  return durability == Durability::kPowerLossSafe ? FsyncDirectoryOf(path) : Status::Ok();
}

Result<std::optional<std::string>> ReadFileIfExists(const std::string& path, size_t max_bytes) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::optional<std::string>();
    return Internal("exec_io_error", ErrnoMessage("cannot open " + path, errno));
  }
  std::string content;
  char buffer[4096];
  while (true) {
    ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      close(fd);
      return Internal("exec_io_error", ErrnoMessage("cannot read " + path, err));
    }
    if (n == 0) break;
    content.append(buffer, static_cast<size_t>(n));
    if (content.size() > max_bytes) {
      close(fd);
      return Corrupt("exec_corrupt_record",
                     path + " is larger than " + std::to_string(max_bytes) + " bytes");
    }
  }
  close(fd);
  return std::optional<std::string>(std::move(content));
}

bool FileExists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

}  // namespace ql::exec::internal
