#pragma once

// Moves runs along their lifecycle through any store's RunRepository, for tests above the
// repositories that need a run in a given state without an executor or a worker.

#include <cstdint>

#include "ql/core/ports.h"
#include "ql/core/status.h"

namespace ql::testing {

// Starts `queued` (a queued run with its claimed attempt) — dispatching, then running with a pid
// — and then loses it after the start, as recovery does when the executor vanished: the attempt
// becomes lost and the run recovery_required (an approved run) with run.recovery_required.
// Returns the run as stored; Conflict when the run moved meanwhile.
Result<RunRecord> LoseAfterStart(RunRepository& runs, const RunRecord& queued, int64_t now_ms);

}  // namespace ql::testing
