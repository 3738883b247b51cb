#pragma once

// Row writers shared by the PostgreSQL repositories (internal to the adapter).

#include <cstdint>

#include "ql/core/ports.h"
#include "ql/core/status.h"
#include "ql/storage/postgres/pg_client.h"

namespace ql::pg {

// Inserts a queued run with its claimed first attempt, its retry policy snapshot and the
// events run.created (sequence 1) and run.queued (sequence 2), every timestamp `now_ms`.
// A taken idempotency key is Duplicate `idempotency_key_duplicate` (the transaction is then
// aborted: the caller must roll back).
Status InsertQueuedRun(Tx& tx, const NewRun& run, int64_t now_ms);

}  // namespace ql::pg
