#pragma once

// The command isolation flags shared by ql-local and ql-worker (src/ql/exec/README.md,
// "Confinement"; docs/security.md).

#include <CLI/CLI.hpp>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "ql/core/status.h"
#include "ql/exec/confinement.h"
#include "ql/exec/supervision_runner.h"

namespace ql {

struct IsolationFlags {
  // "auto": the strongest level this host allows, named at start; "required": refuse to start
  // below user-namespace; "off": commands run as the daemon's user and see its files.
  std::string isolation = "auto";
  std::string uid_range = "1900000000-1900065535";
  // -1: the profile's default; 0: no limit.
  int64_t memory_mib = -1;
  int64_t pids = -1;
  int64_t cpu_seconds = -1;
  int64_t open_files = -1;
  std::vector<std::string> writable;
  std::vector<std::string> hidden;
  bool allow_unconfined = false;
};

// Adds --isolation, --command-uids, --command-memory-mib, --command-pids,
// --command-cpu-seconds, --command-open-files, --command-writable, --command-hide and
// --allow-unconfined-tasks.
inline void AddIsolationFlags(CLI::App& command, IsolationFlags& flags) {
  command
      .add_option("--isolation", flags.isolation,
                  "Command isolation: auto (strongest this host allows), required (refuse to "
                  "start without namespaces) or off (commands run as this daemon's user)")
      ->check(CLI::IsMember({"auto", "required", "off"}));
  command.add_option("--command-uids", flags.uid_range,
                     "Range FIRST-LAST of the uids given to projects' commands when running as "
                     "root (default 1900000000-1900065535)");
  command.add_option("--command-memory-mib", flags.memory_mib,
                     "Memory limit of each command in MiB, 0 for none (default: edge 128, "
                     "otherwise 1024)");
  command.add_option("--command-pids", flags.pids,
                     "Processes and threads of each command, 0 for no limit (default: edge 64, "
                     "otherwise 512)");
  command.add_option("--command-cpu-seconds", flags.cpu_seconds,
                     "CPU seconds of each process of a command, 0 for no limit (default none)");
  command.add_option("--command-open-files", flags.open_files,
                     "Open files of each process of a command, 0 for no limit (default: edge "
                     "256, otherwise 4096)");
  command
      .add_option("--command-writable", flags.writable,
                  "A directory every command may write besides its working directory "
                  "(repeatable; the rest of the host is read-only)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  command
      .add_option("--command-hide", flags.hidden,
                  "A file or directory no command may see (repeatable; the data directory and "
                  "key and token files are always hidden)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  command.add_flag("--allow-unconfined-tasks", flags.allow_unconfined,
                   "Let tasks that ask for it (spec isolation \"none\") run as this daemon's "
                   "user without namespaces, beside its files (off by default; said at start, "
                   "in ql status and /readyz)");
}

// Probes the host and builds the runner's isolation. `uid_file` keeps the projects' uids;
// `always_hidden` are the daemon's own secrets (data directory, key, token and TLS files).
// Errors: InvalidArgument `invalid_isolation_flags` (a value), Unavailable
// `isolation_unavailable` (--isolation required on a host without namespaces).
inline Result<exec::RunnerIsolation> BuildIsolation(const IsolationFlags& flags,
                                                    const std::string& profile,
                                                    const std::string& uid_file,
                                                    std::vector<std::string> always_hidden) {
  namespace fs = std::filesystem;
  auto bad = [](const std::string& why) {
    return InvalidArgument("invalid_isolation_flags", why);
  };
  const bool edge = profile == "edge";
  exec::RunnerIsolation isolation;
  auto limit = [&](int64_t value, int64_t edge_default, int64_t other_default, int64_t scale,
                   const char* flag) -> Result<std::optional<int64_t>> {
    if (value < -1) return bad(std::string(flag) + " must be 0 or more");
    if (value == -1) value = edge ? edge_default : other_default;
    if (value == 0) return std::optional<int64_t>();
    return std::optional<int64_t>(value * scale);
  };
  QL_ASSIGN_OR_RETURN(isolation.limits.memory_bytes,
                      limit(flags.memory_mib, 128, 1024, int64_t{1} << 20, "--command-memory-mib"));
  QL_ASSIGN_OR_RETURN(isolation.limits.pids, limit(flags.pids, 64, 512, 1, "--command-pids"));
  QL_ASSIGN_OR_RETURN(isolation.limits.cpu_seconds,
                      limit(flags.cpu_seconds, 0, 0, 1, "--command-cpu-seconds"));
  QL_ASSIGN_OR_RETURN(isolation.limits.open_files,
                      limit(flags.open_files, 256, 4096, 1, "--command-open-files"));
  QL_ASSIGN_OR_RETURN(auto range, exec::ParseUidRange(flags.uid_range));

  exec::IsolationOptions options;
  options.enabled = flags.isolation != "off";
  isolation.report = exec::ProbeIsolation(options);
  isolation.report.unconfined_tasks_allowed = flags.allow_unconfined;
  isolation.allow_unconfined = flags.allow_unconfined;
  if (flags.isolation == "required" && isolation.report.Rank() == 0) {
    return Unavailable("isolation_unavailable",
                       "--isolation required, but " + isolation.report.Summary());
  }
  QL_ASSIGN_OR_RETURN(exec::ProjectUids uids,
                      exec::ProjectUids::Open(uid_file, range.first, range.second));
  isolation.uids = std::make_shared<exec::ProjectUids>(std::move(uids));
  // Hidden and writable paths are resolved once: the command's namespace sees real paths.
  auto resolve = [](const std::string& path) -> std::string {
    std::error_code ec;
    fs::path real = fs::weakly_canonical(fs::absolute(path), ec);
    return ec ? fs::absolute(path).lexically_normal().string() : real.string();
  };
  for (const std::string& path : always_hidden) {
    if (!path.empty()) isolation.hidden_paths.push_back(resolve(path));
  }
  for (const std::string& path : flags.hidden) isolation.hidden_paths.push_back(resolve(path));
  for (const std::string& path : flags.writable) {
    std::error_code ec;
    if (!fs::is_directory(path, ec)) return bad("--command-writable " + path + " is no directory");
    isolation.writable_paths.push_back(resolve(path));
  }
  return isolation;
}

}  // namespace ql
