#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "ql/core/artifact_store.h"
#include "ql/core/clock.h"
#include "ql/core/event_log.h"
#include "ql/core/log_source.h"
#include "ql/core/ports.h"
#include "ql/core/records.h"
#include "ql/core/secret_store.h"
#include "ql/core/status.h"
#include "ql/engine/attempt_runner.h"
#include "ql/engine/metrics.h"
#include "ql/engine/outage_log.h"
#include "ql/engine/run_settlement.h"
#include "ql/engine/script_cache.h"

namespace ql {

struct LocalDispatcherOptions {
  int max_concurrency = 4;  // edge 1
  // Output kept in one attempt's log (head and tail, see exec::LaunchSpec::log_cap_bytes):
  // standalone 8 MiB, edge 2 MiB.
  int64_t log_cap_bytes = 8LL * 1024 * 1024;
  // Output kept in the logs of all attempts of one run: a retry gets the per-attempt cap, or
  // what its run's earlier attempts left of this one if less, but never less than
  // kMinAttemptLogBytes (AttemptLogCap). Standalone 32 MiB, edge 8 MiB; 0 means no run cap.
  int64_t run_log_cap_bytes = 32LL * 1024 * 1024;
  // data/log (absolute); each attempt's output goes to <root>/<task>/<run>/<attempt number>.log,
  // and the attempt's log_path stores <task>/<run>/<attempt number>.log, relative to the root.
  std::string log_root;
  // Measures the logs of a run's earlier attempts for the per-run cap; required when
  // run_log_cap_bytes > 0 (must outlive the dispatcher).
  const LogSource* logs = nullptr;
  std::string executor_type = "local_process";
  // Resolve a plan's SecretRefs right before its command starts (secret_resolution.h); both
  // must outlive the dispatcher. Without them a plan that names a secret fails with
  // secret_unavailable.
  SecretRepository* secrets = nullptr;
  SecretSealer* sealer = nullptr;
  // Names the project in QL_PROJECT (run_environment.h); without it the project's id is used.
  ProjectRepository* projects = nullptr;
  // The daemon log (must outlive the dispatcher): how runs end (RunSettlement), attempts
  // adopted or lost at Recover(), and the store unreachable and back (OutageLog, component
  // "dispatcher"). Null: none.
  EventLog* event_log = nullptr;
  // Where a script command's version is materialised and whence its bytes come (both must
  // outlive the dispatcher). Without them a script command fails with artifact_unavailable.
  ScriptCache* script_cache = nullptr;
  ArtifactRepository* artifacts = nullptr;
};

// Returns the dispatcher options of "edge" or "standalone" (log_root and logs left empty).
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
    int64_t log_cap_bytes = 0;  // the cap this attempt runs with
  };

  Status Launch(const RunRecord& run, TickReport& report);
  // Resolves the plan's secret variables of `launch` into its secret environment; a run whose
  // secret cannot be resolved fails with the error's reason (secret_resolution.h).
  Status ResolveSecrets(const RunRecord& run, AttemptLaunch& launch);
  Status Watch(Active& active, bool& done);
  // Returns the attempt's log path relative to the log root: <task>/<run>/<attempt number>.log.
  std::string LogPathFor(const RunRecord& run, const AttemptRecord& attempt) const;
  // Returns the log cap of `attempts[index]`: the per-attempt cap, lowered by the per-run cap
  // after the logs of the attempts before it (an unreadable one counts as a full attempt cap).
  int64_t LogCapFor(const std::vector<AttemptRecord>& attempts, size_t index) const;

  RunRepository& runs_;
  DefinitionRepository& definitions_;
  AttemptRunner& runner_;
  Clock& clock_;
  RandomSource& random_;
  Metrics& metrics_;
  LocalDispatcherOptions options_;
  RunSettlement settlement_;
  OutageLog outage_;
  std::map<std::string, Active> active_;  // by attempt id
  std::atomic<int> active_count_{0};
};

}  // namespace ql
