#include "ql/exec/supervision_runner.h"

#include <sys/stat.h>

#include <cerrno>
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
        break;
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
  spec.working_directory = launch.working_directory;
  if (!spec.working_directory.has_value()) {
    QL_ASSIGN_OR_RETURN(spec.working_directory, TaskDirectory(launch.task_id));
  }
  spec.timeout_ms = launch.timeout_ms;
  spec.log_path = launch.log_path;
  spec.log_cap_bytes = launch.log_cap_bytes;
  spec.fsync_result = fsync_results_;
  QL_ASSIGN_OR_RETURN(Supervision supervision, Supervision::Launch(supervisor_prefix_, spec, launcher_));
  return std::unique_ptr<AttemptHandle>(new SupervisionHandle(std::move(supervision)));
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
