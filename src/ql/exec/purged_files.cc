#include "ql/exec/purged_files.h"

#include <filesystem>
#include <system_error>

namespace ql::exec {
namespace {

namespace fs = std::filesystem;

// True when `path` lies strictly below `root` (both normalised, no symlink resolution).
bool IsBelow(const fs::path& path, const fs::path& root) {
  auto p = path.begin();
  for (auto r = root.begin(); r != root.end(); ++r, ++p) {
    if (r->empty()) continue;  // a trailing separator
    if (p == path.end() || *p != *r) return false;
  }
  return p != path.end();
}

bool IsPlainComponent(const std::string& name) {
  if (name.empty() || name == "." || name == "..") return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

PurgedFiles RemovePurgedFiles(const PurgeResult& purged, const std::string& log_root,
                              const std::string& run_root) {
  PurgedFiles out;
  const fs::path logs = fs::path(log_root).lexically_normal();
  for (const PurgedAttempt& attempt : purged.attempts) {
    if (attempt.log_path.has_value() && !attempt.log_path->empty()) {
      fs::path path(*attempt.log_path);
      if (path.is_relative()) path = logs / path;
      path = path.lexically_normal();
      if (!IsBelow(path, logs)) {
        ++out.errors;
      } else {
        std::error_code ec;
        if (fs::remove(path, ec)) ++out.logs;
        if (ec) ++out.errors;
        // The directories of the run and of the task go once their last log is gone.
        for (fs::path dir = path.parent_path(); IsBelow(dir, logs); dir = dir.parent_path()) {
          if (!fs::remove(dir, ec)) break;  // fails harmlessly while not empty
        }
      }
    }
    if (!IsPlainComponent(attempt.id)) {
      ++out.errors;
      continue;
    }
    std::error_code ec;
    const std::uintmax_t removed = fs::remove_all(fs::path(run_root) / attempt.id, ec);
    if (ec) {
      ++out.errors;
    } else if (removed > 0) {
      ++out.attempt_dirs;
    }
  }
  return out;
}

}  // namespace ql::exec
