#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "ql/core/clock.h"
#include "ql/core/ports.h"
#include "ql/core/records.h"
#include "ql/core/status.h"
#include "ql/core/secret_store.h"
#include "ql/engine/attempt_runner.h"
#include "ql/engine/metrics.h"
#include "ql/engine/run_settlement.h"

namespace ql {

struct LocalDispatcherOptions {
  int max_concurrency = 4;                     // edge 1
  int64_t log_cap_bytes = 64LL * 1024 * 1024;  // edge 4 MiB, standalone 64 MiB
  std::string log_root;                        // data/log; logs go to <root>/<task>/<run>.log
  std::string executor_type = "local_process";
  // Resolve a plan's SecretRefs right before its command starts (secret_resolution.h); both
  // must outlive the dispatcher. Without them a plan that names a secret fails with
  // secret_unavailable.
  SecretRepository* secrets = nullptr;
  SecretSealer* sealer = nullptr;
};

// Returns the dispatcher options of "edge" or "standalone" (log_root left empty).
Result<LocalDispatcherOptions> LocalDispatcherOptionsForProfile(std::string_view profile);

struct TickReport {
  int launched = 0;
  int finished = 0;
  int requeued = 0;  // retry_wait → queued with a new attempt
  int errors = 0;
};

// The local dispatcher of DESIGN §6 as step functions: Recover() once at startup, then Tick()
// from one thread. It moves runs through dispatching → running → a terminal state (or
// retry_wait), one transaction per transition, and never bulk-resets anything.
class LocalDispatcher {
 public:
  LocalDispatcher(RunRepository& runs, DefinitionRepository& definitions, AttemptRunner& runner,
                  Clock& clock, RandomSource& random, Metrics& metrics,
                  LocalDispatcherOptions options);

  // Reconciles every non-terminal attempt left by an earlier incarnation: a live process is
  // watched again, a finished one is recorded with its outcome, a vanished one becomes lost and
  // goes through the run's retry policy.
  Status Recover();

  // Promotes due retries, watches running attempts (cancel intents, log truncation, exits) and,
  // when `launch_new`, starts queued runs up to the concurrency bound.
  Result<TickReport> Tick(bool launch_new = true);

  // Returns the number of attempts currently watched (as of the end of the last step; safe to
  // call from any thread).
  int active() const { return active_count_.load(); }

 private:
  struct Active {
    std::string run_id;
    std::string attempt_id;
    std::unique_ptr<AttemptHandle> handle;
    bool cancel_sent = false;
    bool truncation_recorded = false;
  };

  Status Launch(const RunRecord& run, TickReport& report);
  // Resolves the plan's secret variables of `launch` into its secret environment; a run whose
  // secret cannot be resolved fails with the error's reason (secret_resolution.h).
  Status ResolveSecrets(const RunRecord& run, AttemptLaunch& launch);
  Status Watch(Active& active, bool& done);
  std::string LogPathFor(const RunRecord& run) const;

  RunRepository& runs_;
  DefinitionRepository& definitions_;
  AttemptRunner& runner_;
  Clock& clock_;
  RandomSource& random_;
  Metrics& metrics_;
  LocalDispatcherOptions options_;
  RunSettlement settlement_;
  std::map<std::string, Active> active_;  // by attempt id
  std::atomic<int> active_count_{0};
};

}  // namespace ql
