#include "ql/exec/supervision_runner.h"

#include <utility>

#include "ql/exec/executor.h"

namespace ql::exec {
namespace {

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
                                     std::string run_root, std::string default_working_directory)
    : supervisor_prefix_(std::move(supervisor_prefix)),
      run_root_(std::move(run_root)),
      default_working_directory_(std::move(default_working_directory)) {}

Result<std::unique_ptr<AttemptHandle>> SupervisionRunner::Launch(const AttemptLaunch& launch) {
  LaunchSpec spec;
  spec.attempt_dir = run_root_ + "/" + launch.attempt_id;
  spec.argv = launch.argv;
  spec.environment = launch.environment;
  spec.secret_environment = launch.secret_environment;
  spec.mask_values = launch.mask_values;
  spec.working_directory = launch.working_directory;
  spec.default_working_directory = default_working_directory_;
  spec.timeout_ms = launch.timeout_ms;
  spec.log_path = launch.log_path;
  spec.log_cap_bytes = launch.log_cap_bytes;
  QL_ASSIGN_OR_RETURN(Supervision supervision, Supervision::Launch(supervisor_prefix_, spec));
  return std::unique_ptr<AttemptHandle>(new SupervisionHandle(std::move(supervision)));
}

Result<std::unique_ptr<AttemptHandle>> SupervisionRunner::Adopt(const std::string& attempt_id) {
  QL_ASSIGN_OR_RETURN(Supervision supervision, Supervision::Adopt(run_root_ + "/" + attempt_id));
  return std::unique_ptr<AttemptHandle>(new SupervisionHandle(std::move(supervision)));
}

}  // namespace ql::exec
