#include "ql/exec/supervision_runner.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "ql/exec/executor.h"

namespace ql::exec {
namespace {

// Creates `dir` with mode 0700 unless it exists.
Status MakePrivateDirectory(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0700) == 0 || errno == EEXIST) return Status::Ok();
  return Internal("exec_io_error", "cannot create " + dir + ": " + std::strerror(errno));
}

class SupervisionHandle final : public AttemptHandle {
 public:
  explicit SupervisionHandle(Supervision supervision) : supervision_(std::move(supervision)) {}

  std::optional<AttemptOutcome> Poll() override {
    switch (supervision_.Poll()) {
      case Supervision::State::kRunning:
        return std::nullopt;
      case Supervision::State::kLost: {
        AttemptOutcome lost;
        lost.kind = AttemptOutcome::Kind::kLost;
        lost.message = "the attempt's supervisor vanished without recording a result";
        return lost;
      }
      case Supervision::State::kFinished:
        break;
    }
    const Outcome& o = *supervision_.outcome();
    AttemptOutcome out;
    out.message = o.message;
    out.confinement = o.confinement;
    out.descendants_ended = o.descendants_ended;
    out.log_truncated = o.log_truncated;
    out.log_bytes = o.log_bytes_written;
    switch (o.kind) {
      case OutcomeKind::kExited:
        out.kind = AttemptOutcome::Kind::kExited;
        out.exit_code = o.exit_code.value_or(0);
        break;
      case OutcomeKind::kSignaled:
        out.kind = AttemptOutcome::Kind::kSignaled;
        out.signal = o.signal.value_or(0);
        break;
      case OutcomeKind::kTimedOut:
        out.kind = AttemptOutcome::Kind::kTimedOut;
        break;
      case OutcomeKind::kCancelled:
        out.kind = AttemptOutcome::Kind::kCancelled;
        break;
      case OutcomeKind::kSpawnFailed:
        out.kind = AttemptOutcome::Kind::kSpawnFailed;
        out.error_code = o.error_code;
        break;
    }
    if (o.kind == OutcomeKind::kExited || o.kind == OutcomeKind::kSignaled) {
      out.limit_error_code = o.error_code;
    }
    return out;
  }

  bool LogTruncated() const override { return supervision_.LogTruncated(); }
  Status RequestCancel() override { return supervision_.RequestCancel(); }
  int64_t pid() const override { return supervision_.supervisor().pid; }
  int64_t process_start_ticks() const override {
    return static_cast<int64_t>(supervision_.supervisor().start_time_ticks);
  }

 private:
  Supervision supervision_;
};

}  // namespace

SupervisionRunner::SupervisionRunner(std::vector<std::string> supervisor_prefix,
                                     std::string run_root, std::string work_root,
                                     SupervisorLauncher* launcher, bool fsync_results)
    : supervisor_prefix_(std::move(supervisor_prefix)),
      run_root_(std::move(run_root)),
      work_root_(std::move(work_root)),
      launcher_(launcher),
      fsync_results_(fsync_results) {}

Result<std::unique_ptr<AttemptHandle>> SupervisionRunner::Launch(const AttemptLaunch& launch) {
  LaunchSpec spec;
  spec.attempt_dir = run_root_ + "/" + launch.attempt_id;
  spec.argv = launch.argv;
  spec.environment = launch.environment;
  spec.secret_environment = launch.secret_environment;
  spec.mask_values = launch.mask_values;
  QL_ASSIGN_OR_RETURN(spec.confinement, ConfinementOf(launch));
  spec.working_directory = launch.working_directory;
  if (!spec.working_directory.has_value()) {
    QL_ASSIGN_OR_RETURN(spec.working_directory, TaskDirectory(launch.task_id));
    if (spec.confinement.mode != Confinement::Mode::kHost) {
      char real[PATH_MAX];
      if (realpath(spec.working_directory->c_str(), real) == nullptr) {
        return Internal("exec_io_error", "cannot resolve " + *spec.working_directory + ": " +
                                             std::strerror(errno));
      }
      spec.confinement.own_directory = real;
    }
    // As root, the task's own directory belongs to its project's uid (never following a link).
    if (spec.confinement.mode == Confinement::Mode::kRootNamespaces &&
        fchownat(AT_FDCWD, spec.working_directory->c_str(), spec.confinement.uid,
                 spec.confinement.gid, AT_SYMLINK_NOFOLLOW) != 0) {
      return Internal("exec_io_error", "cannot give " + *spec.working_directory + " to uid " +
                                           std::to_string(spec.confinement.uid) + ": " +
                                           std::strerror(errno));
    }
  }
  spec.timeout_ms = launch.timeout_ms;
  spec.log_path = launch.log_path;
  spec.log_cap_bytes = launch.log_cap_bytes;
  spec.fsync_result = fsync_results_;
  QL_ASSIGN_OR_RETURN(Supervision supervision, Supervision::Launch(supervisor_prefix_, spec, launcher_));
  return std::unique_ptr<AttemptHandle>(new SupervisionHandle(std::move(supervision)));
}

Result<Confinement> SupervisionRunner::ConfinementOf(const AttemptLaunch& launch) const {
  Confinement c;
  c.mode = isolation_.report.mode;
  c.limits = isolation_.limits;
  // A task may ask for less than the installation allows, never for more.
  auto lower = [](std::optional<int64_t>& limit, const std::optional<int64_t>& asked,
                  int64_t scale) {
    if (!asked) return;
    const int64_t value = *asked * scale;
    limit = limit ? std::min(*limit, value) : value;
  };
  lower(c.limits.memory_bytes, launch.limits.memory_mib, int64_t{1} << 20);
  lower(c.limits.pids, launch.limits.pids, 1);
  lower(c.limits.cpu_seconds, launch.limits.cpu_seconds, 1);
  lower(c.limits.open_files, launch.limits.open_files, 1);
  c.network = launch.network;
  if (launch.unconfined) {
    if (!isolation_.allow_unconfined) {
      return InvalidArgument("confinement_unavailable",
                             "the task asks to run unconfined (isolation none), which this "
                             "installation does not allow (--allow-unconfined-tasks)");
    }
    c.mode = Confinement::Mode::kHost;
  }
  if (c.mode == Confinement::Mode::kHost) {
    if (!c.network) {
      return InvalidArgument("confinement_unavailable",
                             "the task asks for no network, which needs namespaces; this host "
                             "runs commands at isolation level " +
                                 isolation_.report.level);
    }
    return c;
  }
  if (isolation_.uids == nullptr) {
    return Internal("exec_bad_spec", "confined commands need a project uid range");
  }
  QL_ASSIGN_OR_RETURN(c.uid, isolation_.uids->UidOf(launch.project_id));
  c.gid = c.uid;
  c.hidden_paths = isolation_.hidden_paths;
  c.writable_paths = isolation_.writable_paths;
  if (!launch.script_directory.empty()) c.read_only_paths.push_back(launch.script_directory);
  c.cgroups = isolation_.report.cgroups;
  return c;
}

Result<std::string> SupervisionRunner::TaskDirectory(const std::string& task_id) const {
  constexpr char kPlain[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_";
  const bool plain = !task_id.empty() && task_id.size() <= 128 &&
                     task_id.find_first_not_of(kPlain) == std::string::npos;
  if (!plain) {
    return InvalidArgument("invalid_task_id", "task id '" + task_id.substr(0, 128) +
                                                  "' cannot name a working directory");
  }
  QL_RETURN_IF_ERROR(MakePrivateDirectory(work_root_));
  const std::string dir = work_root_ + "/" + task_id;
  QL_RETURN_IF_ERROR(MakePrivateDirectory(dir));
  return dir;
}

Result<std::unique_ptr<AttemptHandle>> SupervisionRunner::Adopt(const std::string& attempt_id) {
  QL_ASSIGN_OR_RETURN(Supervision supervision, Supervision::Adopt(run_root_ + "/" + attempt_id));
  return std::unique_ptr<AttemptHandle>(new SupervisionHandle(std::move(supervision)));
}

}  // namespace ql::exec
