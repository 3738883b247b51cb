#include "ql/testing/run_steps.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ql::testing {
namespace {

NewEvent Event(const char* type, const char* actor_type, std::optional<std::string> attempt_id) {
  return NewEvent{type, actor_type, std::move(attempt_id), std::nullopt, "{}"};
}

}  // namespace

Result<RunRecord> LoseAfterStart(RunRepository& runs, const RunRecord& queued, int64_t now_ms) {
  QL_ASSIGN_OR_RETURN(std::vector<AttemptRecord> attempts, runs.ListAttempts(queued.id));
  if (attempts.empty()) return NotFound("attempt_not_found", "run " + queued.id + " has none");
  const std::string attempt = attempts.back().id;
  struct Step {
    const char* run_to;
    const char* attempt_from;
    const char* attempt_to;
    std::vector<NewEvent> events;
  };
  const Step steps[] = {
      {"dispatching", "claimed", "starting", {Event("run.dispatching", "dispatcher", attempt)}},
      {"running", "starting", "running", {Event("run.running", "executor", attempt)}},
      {"recovery_required",
       "running",
       "lost",
       {Event("attempt.lost", "recovery", attempt),
        Event("run.recovery_required", "recovery", std::nullopt)}},
  };
  RunRecord run = queued;
  for (const Step& step : steps) {
    RunTransitionCommand cmd;
    cmd.run_id = run.id;
    cmd.expected_version = run.version;
    cmd.run_to = step.run_to;
    cmd.attempt_id = attempt;
    cmd.expected_attempt_status = step.attempt_from;
    cmd.attempt_to = step.attempt_to;
    if (std::string(step.run_to) == "running") {
      cmd.pid = 4242;
      cmd.started_at_ms = now_ms;
      cmd.attempt_started_at_ms = now_ms;
    }
    cmd.events = step.events;
    cmd.now_ms = now_ms;
    QL_ASSIGN_OR_RETURN(run, runs.ApplyTransition(cmd));
  }
  return run;
}

}  // namespace ql::testing
