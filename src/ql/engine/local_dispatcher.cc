#include "ql/engine/local_dispatcher.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "ql/core/canonical_json.h"
#include "ql/core/execution_plan.h"
#include "ql/core/ids.h"
#include "ql/core/states.h"
#include "ql/core/task_spec.h"
#include "ql/engine/run_environment.h"
#include "ql/engine/secret_resolution.h"

namespace ql {
namespace {

constexpr int kRetryPromotionsPerTick = 16;

std::string Name(RunStatus s) { return std::string(RunStatusName(s)); }
std::string Name(AttemptStatus s) { return std::string(AttemptStatusName(s)); }

NewEvent Event(std::string type, const std::string& actor, std::optional<std::string> attempt_id,
               const nlohmann::json& payload = nlohmann::json::object()) {
  return MakeRunEvent(std::move(type), actor, std::move(attempt_id), payload);
}

}  // namespace

Result<LocalDispatcherOptions> LocalDispatcherOptionsForProfile(std::string_view profile) {
  LocalDispatcherOptions options;
  if (profile == "edge") {
    options.max_concurrency = 1;
    options.log_cap_bytes = 2LL * 1024 * 1024;
    options.run_log_cap_bytes = 8LL * 1024 * 1024;
  } else if (profile == "standalone") {
    options.max_concurrency = 4;
    options.log_cap_bytes = 8LL * 1024 * 1024;
    options.run_log_cap_bytes = 32LL * 1024 * 1024;
  } else {
    return InvalidArgument(
        "unknown_profile",
        "unknown deployment profile '" + std::string(profile) + "': expected edge or standalone");
  }
  return options;
}

LocalDispatcher::LocalDispatcher(RunRepository& runs, DefinitionRepository& definitions,
                                 AttemptRunner& runner, Clock& clock, RandomSource& random,
                                 Metrics& metrics, LocalDispatcherOptions options)
    : runs_(runs),
      definitions_(definitions),
      runner_(runner),
      clock_(clock),
      random_(random),
      metrics_(metrics),
      options_(std::move(options)),
      settlement_(runs, clock, random, metrics, "executor", options_.event_log),
      outage_("dispatcher", options_.event_log, clock) {
  metrics_.Describe("ql_executor_starts_total", "counter", "Attempts started by the dispatcher.");
  metrics_.Describe("ql_dispatcher_errors_total", "counter", "Dispatcher storage errors.");
}

std::string LocalDispatcher::LogPathFor(const RunRecord& run, const AttemptRecord& attempt) const {
  return run.task_id + "/" + run.id + "/" + std::to_string(attempt.attempt) + ".log";
}

int64_t LocalDispatcher::LogCapFor(const std::vector<AttemptRecord>& attempts,
                                   size_t index) const {
  if (options_.run_log_cap_bytes <= 0 || options_.logs == nullptr) return options_.log_cap_bytes;
  int64_t used = 0;
  for (size_t i = 0; i < index && i < attempts.size(); ++i) {
    Result<int64_t> size = options_.logs->LogSize(attempts[i]);
    used += size.ok() ? *size : options_.log_cap_bytes;
  }
  return AttemptLogCap(options_.log_cap_bytes, options_.run_log_cap_bytes, used);
}

Status LocalDispatcher::ResolveSecrets(const RunRecord& run, AttemptLaunch& launch) {
  if (options_.secrets == nullptr) {
    QL_ASSIGN_OR_RETURN(auto refs, SecretEnvironment(launch.environment));
    if (refs.empty()) return Status::Ok();
    return Unavailable("secret_unavailable", "variable " + refs.front().first +
                                                 " names a secret, and this daemon has no "
                                                 "secret store");
  }
  QL_ASSIGN_OR_RETURN(std::vector<SealedVariable> sealed,
                      LookUpSecrets(*options_.secrets, run.project_id, launch.environment));
  return OpenSecrets(options_.sealer, sealed, launch);
}

Status LocalDispatcher::Launch(const RunRecord& run, TickReport& report) {
  QL_ASSIGN_OR_RETURN(std::vector<AttemptRecord> attempts, runs_.ListAttempts(run.id));
  if (attempts.empty() || attempts.back().status != Name(AttemptStatus::kClaimed)) {
    return Conflict("attempt_not_claimed", "run " + run.id + " has no claimed attempt");
  }
  const AttemptRecord& attempt = attempts.back();
  const int64_t now = clock_.NowMs();
  // Stored relative to the log root, so a data directory can be moved or restored elsewhere;
  // the supervisor writes to the absolute path.
  const std::string log_path = LogPathFor(run, attempt);
  const int64_t log_cap = LogCapFor(attempts, attempts.size() - 1);

  RunTransitionCommand dispatching;
  dispatching.run_id = run.id;
  dispatching.expected_version = run.version;
  dispatching.run_to = Name(RunStatus::kDispatching);
  dispatching.attempt_id = attempt.id;
  dispatching.expected_attempt_status = Name(AttemptStatus::kClaimed);
  dispatching.attempt_to = Name(AttemptStatus::kStarting);
  dispatching.log_path = log_path;
  dispatching.events = {Event(std::string(kEventRunDispatching), "dispatcher", attempt.id),
                        Event(AttemptEventType(AttemptStatus::kStarting), "dispatcher", attempt.id,
                              {{"attempt", attempt.attempt}})};
  dispatching.now_ms = now;
  QL_ASSIGN_OR_RETURN(RunRecord current, runs_.ApplyTransition(dispatching));

  // The pinned plan is the only thing that may run; it is re-verified against its digest.
  auto fail = [&](const std::string& code, const std::string& summary) -> Status {
    RunTransitionCommand failed;
    failed.run_id = run.id;
    failed.expected_version = current.version;
    failed.run_to = Name(RunStatus::kFailed);
    failed.attempt_id = attempt.id;
    failed.expected_attempt_status = Name(AttemptStatus::kStarting);
    failed.attempt_to = Name(AttemptStatus::kFailed);
    failed.finished_at_ms = clock_.NowMs();
    failed.attempt_finished_at_ms = failed.finished_at_ms;
    failed.error_code = code;
    failed.error_summary = summary;
    failed.attempt_error_code = code;
    failed.attempt_error_summary = summary;
    failed.events = {Event(AttemptEventType(AttemptStatus::kFailed), "dispatcher", attempt.id,
                           {{"error_code", code}, {"message", summary}}),
                     Event(RunEventType(RunStatus::kFailed), "dispatcher", attempt.id)};
    failed.now_ms = *failed.finished_at_ms;
    Result<RunRecord> r = runs_.ApplyTransition(failed);
    metrics_.Increment("ql_run_transitions_total", R"(to="failed")");
    if (r.ok() && options_.event_log != nullptr) {
      options_.event_log->Warn("run.failed", {{"run", run.id},
                                              {"task", run.task_id},
                                              {"attempt", attempt.attempt},
                                              {"code", code},
                                              {"message", summary.substr(0, 300)}});
    }
    return r.ok() ? Status::Ok() : r.status();
  };

  Result<ExecutionRevisionRecord> execution =
      definitions_.GetExecutionRevision(run.execution_revision_id);
  if (!execution.ok()) return fail("execution_revision_missing", execution.status().message());
  Result<nlohmann::json> plan_json = ParseJsonStrict(execution->plan_json);
  if (!plan_json.ok()) return fail("execution_revision_corrupt", plan_json.status().message());
  Result<ExecutionPlan> plan = PlanFromJson(*plan_json);
  if (!plan.ok()) return fail("execution_revision_corrupt", plan.status().message());
  if (Status st = VerifyPlanDigest(*plan, execution->plan_digest); !st.ok()) {
    return fail(st.reason(), st.message());
  }
  if (plan->task_digest != run.task_digest) {
    return fail("digest_mismatch", "execution plan does not belong to the run's task digest");
  }

  AttemptLaunch launch;
  launch.run_id = run.id;
  launch.attempt_id = attempt.id;
  launch.project_id = run.project_id;
  launch.task_id = run.task_id;
  launch.argv = plan->argv;
  launch.environment = plan->environment;
  Result<EnvironmentList> context =
      RunContextEnvironment(definitions_, options_.projects, run, plan->environment);
  if (!context.ok()) return context.status();  // the store: the next tick tries again
  for (auto& variable : *context) launch.environment.push_back(std::move(variable));
  launch.environment.emplace_back("QL_RUN_ID", run.id);
  launch.environment.emplace_back("QL_ATTEMPT_ID", attempt.id);
  launch.working_directory = plan->working_directory;
  launch.timeout_ms = plan->timeout_ms;
  launch.limits = plan->limits;
  launch.network = plan->network;
  launch.unconfined = plan->unconfined;
  launch.log_path = options_.log_root + "/" + log_path;
  launch.log_cap_bytes = log_cap;
  if (plan->script) {
    // The version the revision pinned, verified byte for byte; a version the store no longer
    // has (or bytes that do not have their digest) fails the attempt, a store that cannot be
    // read now is tried again at the next tick.
    if (options_.script_cache == nullptr || options_.artifacts == nullptr) {
      return fail("artifact_unavailable", "this daemon keeps no scripts");
    }
    ArtifactRepository& artifacts = *options_.artifacts;
    const std::string project_id = run.project_id;
    Result<std::string> dir = options_.script_cache->Materialize(
        *plan->script,
        [&](const std::string& digest, const std::function<Status(std::string_view)>& sink) {
          return artifacts.ReadBlob(project_id, digest, sink);
        });
    if (!dir.ok()) {
      const StatusCode code = dir.status().code();
      if (code == StatusCode::kUnavailable || code == StatusCode::kBusy) return dir.status();
      const std::string what = "script " + plan->script->name + "@" +
                               std::to_string(plan->script->version) + " (" + plan->script->digest +
                               "): " + dir.status().message();
      return fail(code == StatusCode::kCorrupt ? "artifact_corrupt" : "artifact_unavailable", what);
    }
    launch.script_directory = *dir;
    launch.argv.insert(launch.argv.begin() + 2, *dir + "/" + plan->script->entry);
  }
  if (Status st = ResolveSecrets(run, launch); !st.ok()) return fail(st.reason(), st.message());
  Result<std::unique_ptr<AttemptHandle>> handle = runner_.Launch(launch);
  if (!handle.ok()) {
    // A task asking for what this host's isolation cannot give names that; the rest is the
    // executor's failure.
    const bool unavailable = handle.status().reason() == "confinement_unavailable";
    return fail(unavailable ? "confinement_unavailable" : "exec_spawn_failed",
                handle.status().message());
  }

  const int64_t started = clock_.NowMs();
  RunTransitionCommand running = RunningTransition(run.id, current.version, attempt.id,
                                                   (*handle)->pid(), "dispatcher", started);
  running.process_start_ticks = (*handle)->process_start_ticks();
  Active entry{run.id, attempt.id, std::move(handle).value()};
  entry.log_cap_bytes = log_cap;
  Result<RunRecord> r = runs_.ApplyTransition(running);
  // Whatever happened to the write, the process exists now and must be watched to its end.
  active_.emplace(attempt.id, std::move(entry));
  ++report.launched;
  metrics_.Increment("ql_executor_starts_total");
  metrics_.Increment("ql_run_transitions_total", R"(to="running")");
  return r.ok() ? Status::Ok() : r.status();
}

Status LocalDispatcher::Recover() {
  QL_ASSIGN_OR_RETURN(std::vector<RunRecord> active, runs_.ListActive());
  for (const RunRecord& run : active) {
    QL_ASSIGN_OR_RETURN(std::vector<AttemptRecord> attempts, runs_.ListAttempts(run.id));
    if (attempts.empty()) continue;
    const AttemptRecord& attempt = attempts.back();
    if (attempt.executor_type != options_.executor_type) continue;
    std::optional<AttemptStatus> status = ParseAttemptStatus(attempt.status);
    if (!status) return Corrupt("status_invalid", "attempt " + attempt.id + " has unknown status");
    if (run.status == Name(RunStatus::kLost) && IsTerminal(*status)) {
      // The daemon stopped between recording the loss and settling the run.
      QL_RETURN_IF_ERROR(settlement_.SettleLost(run, attempt, ""));
      continue;
    }
    if (IsTerminal(*status) || *status == AttemptStatus::kClaimed) continue;
    Result<std::unique_ptr<AttemptHandle>> handle = runner_.Adopt(attempt.id);
    if (!handle.ok()) {
      // What cannot be proven alive is lost; it is never signalled.
      AttemptOutcome lost;
      lost.kind = AttemptOutcome::Kind::kLost;
      lost.message =
          "the attempt could not be reattached after a restart: " + handle.status().message();
      QL_RETURN_IF_ERROR(settlement_.Finish(run.id, attempt.id, lost));
      continue;
    }
    const std::optional<AttemptOutcome> outcome = (*handle)->Poll();
    {
      // Said once per start of the daemon that adopted it.
      NewEvent adopted = Event(std::string(kEventAdopted), "recovery", attempt.id,
                               {{"pid", (*handle)->pid()}, {"running", !outcome.has_value()}});
      adopted.dedupe_key = "adopted:" + attempt.id + ":" + std::to_string(clock_.NowMs());
      Result<EventRecord> noted = runs_.AppendEvent(run.id, adopted, clock_.NowMs());
      if (!noted.ok() && noted.status().code() != StatusCode::kDuplicate) return noted.status();
      if (options_.event_log != nullptr) {
        options_.event_log->Info("attempt.adopted", {{"run", run.id},
                                                     {"task", run.task_id},
                                                     {"attempt", attempt.attempt},
                                                     {"pid", (*handle)->pid()},
                                                     {"running", !outcome.has_value()}});
      }
    }
    if (outcome.has_value()) {
      QL_RETURN_IF_ERROR(settlement_.Finish(run.id, attempt.id, *outcome));
      continue;
    }
    if (*status == AttemptStatus::kStarting) {
      // Launched, but the daemon stopped before recording it running.
      RunTransitionCommand t;
      t.run_id = run.id;
      t.expected_version = run.version;
      t.run_to = Name(RunStatus::kRunning);
      t.attempt_id = attempt.id;
      t.expected_attempt_status = attempt.status;
      t.attempt_to = Name(AttemptStatus::kRunning);
      t.started_at_ms = clock_.NowMs();
      t.attempt_started_at_ms = t.started_at_ms;
      t.pid = (*handle)->pid();
      t.process_start_ticks = (*handle)->process_start_ticks();
      t.events = {Event(AttemptEventType(AttemptStatus::kRunning), "recovery", attempt.id),
                  Event(RunEventType(RunStatus::kRunning), "recovery", attempt.id)};
      t.now_ms = *t.started_at_ms;
      Result<RunRecord> r = runs_.ApplyTransition(t);
      if (!r.ok()) return r.status();
    }
    Active entry{run.id, attempt.id, std::move(handle).value()};
    entry.log_cap_bytes = LogCapFor(attempts, attempts.size() - 1);
    active_.emplace(attempt.id, std::move(entry));
  }
  active_count_ = static_cast<int>(active_.size());
  return Status::Ok();
}

Status LocalDispatcher::Watch(Active& a, bool& done) {
  done = false;
  QL_ASSIGN_OR_RETURN(RunRecord run, runs_.GetRun(a.run_id));
  if (run.cancel_requested_at_ms.has_value() && !a.cancel_sent) {
    QL_RETURN_IF_ERROR(a.handle->RequestCancel());
    a.cancel_sent = true;
  }
  if (!a.truncation_recorded && a.handle->LogTruncated()) {
    NewEvent e = Event(std::string(kEventLogTruncated), "executor", a.attempt_id,
                       {{"cap_bytes", a.log_cap_bytes}});
    e.dedupe_key = "log_truncated:" + a.attempt_id;
    Result<EventRecord> r = runs_.AppendEvent(a.run_id, e, clock_.NowMs());
    if (r.ok() || r.status().code() == StatusCode::kDuplicate) {
      a.truncation_recorded = true;
    } else {
      return r.status();
    }
  }
  std::optional<AttemptOutcome> outcome = a.handle->Poll();
  if (!outcome) return Status::Ok();
  QL_RETURN_IF_ERROR(settlement_.Finish(a.run_id, a.attempt_id, *outcome));
  done = true;
  return Status::Ok();
}

Result<TickReport> LocalDispatcher::Tick(bool launch_new) {
  TickReport report;
  // The first store call of every tick says whether the store answers.
  if (Result<int> requeued = settlement_.PromoteRetries(kRetryPromotionsPerTick); requeued.ok()) {
    outage_.Observe(Status::Ok());
    report.requeued += *requeued;
  } else {
    outage_.Observe(requeued.status());
    ++report.errors;
    metrics_.Increment("ql_dispatcher_errors_total");
  }
  for (auto it = active_.begin(); it != active_.end();) {
    bool done = false;
    Status st = Watch(it->second, done);
    if (!st.ok()) {
      ++report.errors;
      metrics_.Increment("ql_dispatcher_errors_total");
    }
    if (done) {
      ++report.finished;
      it = active_.erase(it);
    } else {
      ++it;
    }
  }
  active_count_ = static_cast<int>(active_.size());
  if (!launch_new) return report;
  const int capacity = options_.max_concurrency - static_cast<int>(active_.size());
  if (capacity <= 0) return report;
  QL_ASSIGN_OR_RETURN(std::vector<RunRecord> queued,
                      runs_.ListDispatchable(options_.executor_type, capacity, clock_.NowMs()));
  for (const RunRecord& run : queued) {
    Status st = Launch(run, report);
    if (!st.ok() && st.code() != StatusCode::kConflict) {
      ++report.errors;
      metrics_.Increment("ql_dispatcher_errors_total");
    }
  }
  active_count_ = static_cast<int>(active_.size());
  return report;
}

}  // namespace ql
