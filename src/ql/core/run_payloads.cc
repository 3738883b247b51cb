#include "ql/core/run_payloads.h"

#include <nlohmann/json.hpp>

#include "ql/core/canonical_json.h"

namespace ql {

Result<std::string> RunCreatedPayload(const NewRun& run) {
  nlohmann::json created = {{"task_revision", run.task_revision},
                            {"trigger_type", run.trigger_type}};
  if (run.trigger_id.has_value()) created["trigger_id"] = *run.trigger_id;
  if (run.trigger_revision.has_value()) created["trigger_revision"] = *run.trigger_revision;
  if (run.scheduled_for_ms.has_value()) created["scheduled_for_ms"] = *run.scheduled_for_ms;
  if (run.retry_of_run_id.has_value()) created["retry_of_run_id"] = *run.retry_of_run_id;
  return CanonicalJson(created);
}

Result<std::string> RunQueuedPayload(int attempt, std::string_view executor_type) {
  return CanonicalJson(nlohmann::json{{"attempt", attempt}, {"executor_type", executor_type}});
}

Result<std::string> RunSkippedPayload(std::string_view reason) {
  return CanonicalJson(nlohmann::json{{"reason", reason}});
}

}  // namespace ql
