#pragma once

// The payloads of the events every store writes when it creates a run, so the SQLite and
// PostgreSQL stores write the same bytes.

#include <string>
#include <string_view>

#include "ql/core/ports.h"
#include "ql/core/status.h"

namespace ql {

// run.created: {"retry_of_run_id"?, "scheduled_for_ms"?, "task_revision", "trigger_id"?,
// "trigger_revision"?, "trigger_type"} as canonical JSON.
Result<std::string> RunCreatedPayload(const NewRun& run);

// run.queued for attempt `attempt`: {"attempt", "executor_type"} as canonical JSON.
Result<std::string> RunQueuedPayload(int attempt, std::string_view executor_type);

// run.skipped: {"reason"} as canonical JSON ("overlap" or "concurrency").
Result<std::string> RunSkippedPayload(std::string_view reason);

}  // namespace ql
