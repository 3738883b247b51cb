#include "supervision_runner.h"

#include <utility>

#include "ql/exec/executor.h"

namespace ql::local {
namespace {

class SupervisionHandle final : public AttemptHandle {
 public:
  explicit SupervisionHandle(exec::Supervision supervision)
      : supervision_(std::move(supervision)) {}

  std::optional<AttemptOutcome> Poll() override {
    switch (supervision_.Poll()) {
      case exec::Supervision::State::kRunning:
        return std::nullopt;
      case exec::Supervision::State::kLost: {
        AttemptOutcome lost;
        lost.kind = AttemptOutcome::Kind::kLost;
        lost.message = "the attempt's supervisor vanished without recording a result";
        return lost;
      }
      case exec::Supervision::State::kFinished:
        break;
    }
    const exec::Outcome& o = *supervision_.outcome();
    AttemptOutcome out;
    out.message = o.message;
    out.log_truncated = o.log_truncated;
    out.log_bytes = o.log_bytes_written;
    switch (o.kind) {
      case exec::OutcomeKind::kExited:
        out.kind = AttemptOutcome::Kind::kExited;
        out.exit_code = o.exit_code.value_or(0);
        break;
      case exec::OutcomeKind::kSignaled:
        out.kind = AttemptOutcome::Kind::kSignaled;
        out.signal = o.signal.value_or(0);
        break;
      case exec::OutcomeKind::kTimedOut:
        out.kind = AttemptOutcome::Kind::kTimedOut;
        break;
      case exec::OutcomeKind::kCancelled:
        out.kind = AttemptOutcome::Kind::kCancelled;
        break;
      case exec::OutcomeKind::kSpawnFailed:
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
  exec::Supervision supervision_;
};

}  // namespace

SupervisionRunner::SupervisionRunner(std::vector<std::string> supervisor_prefix,
                                     std::string run_root, std::string default_working_directory)
    : supervisor_prefix_(std::move(supervisor_prefix)),
      run_root_(std::move(run_root)),
      default_working_directory_(std::move(default_working_directory)) {}

Result<std::unique_ptr<AttemptHandle>> SupervisionRunner::Launch(const AttemptLaunch& launch) {
  exec::LaunchSpec spec;
  spec.attempt_dir = run_root_ + "/" + launch.attempt_id;
  spec.argv = launch.argv;
  spec.environment = launch.environment;
  spec.working_directory = launch.working_directory;
  spec.default_working_directory = default_working_directory_;
  spec.timeout_ms = launch.timeout_ms;
  spec.log_path = launch.log_path;
  spec.log_cap_bytes = launch.log_cap_bytes;
  QL_ASSIGN_OR_RETURN(exec::Supervision supervision,
                      exec::Supervision::Launch(supervisor_prefix_, spec));
  return std::unique_ptr<AttemptHandle>(new SupervisionHandle(std::move(supervision)));
}

Result<std::unique_ptr<AttemptHandle>> SupervisionRunner::Adopt(const std::string& attempt_id) {
  QL_ASSIGN_OR_RETURN(exec::Supervision supervision,
                      exec::Supervision::Adopt(run_root_ + "/" + attempt_id));
  return std::unique_ptr<AttemptHandle>(new SupervisionHandle(std::move(supervision)));
}

}  // namespace ql::local
