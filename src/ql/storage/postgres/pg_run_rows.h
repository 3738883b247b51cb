#pragma once

// Row writers shared by the PostgreSQL repositories (internal to the adapter).

#include <cstdint>
#include <vector>

#include "ql/core/ports.h"
#include "ql/core/status.h"
#include "ql/storage/postgres/pg_client.h"

namespace ql::pg {

// Inserts queued runs, each with its claimed first attempt, its retry policy snapshot and the
// events run.created (sequence 1) and run.queued (sequence 2), every timestamp `now_ms`, in one
// statement. A taken idempotency key is Duplicate `idempotency_key_duplicate` (the transaction
// is then aborted: the caller must roll back).
Status InsertQueuedRuns(Tx& tx, const std::vector<const NewRun*>& runs, int64_t now_ms);

// InsertQueuedRuns of one run.
Status InsertQueuedRun(Tx& tx, const NewRun& run, int64_t now_ms);

}  // namespace ql::pg
