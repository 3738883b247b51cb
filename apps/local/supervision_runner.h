#pragma once

#include <string>
#include <vector>

#include "ql/engine/attempt_runner.h"

namespace ql::local {

// Runs attempts with the POSIX supervisor of src/ql/exec: one supervisor process per attempt
// (this executable re-executed as `ql-local supervise DIR`), attempt files under run_root.
class SupervisionRunner final : public AttemptRunner {
 public:
  SupervisionRunner(std::vector<std::string> supervisor_prefix, std::string run_root,
                    std::string default_working_directory);
  Result<std::unique_ptr<AttemptHandle>> Launch(const AttemptLaunch& launch) override;
  Result<std::unique_ptr<AttemptHandle>> Adopt(const std::string& attempt_id) override;

 private:
  std::vector<std::string> supervisor_prefix_;
  std::string run_root_;
  std::string default_working_directory_;
};

}  // namespace ql::local
