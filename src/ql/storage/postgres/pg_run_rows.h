#pragma once

// Row writers shared by the PostgreSQL repositories (internal to the adapter).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ql/core/ports.h"
#include "ql/core/status.h"
#include "ql/storage/postgres/pg_client.h"

namespace ql::pg {

// Inserts queued runs, each with its retry policy snapshot, its claimed first attempt and the
// events run.created (sequence 1) and run.queued (sequence 2), every timestamp `now_ms`, in one
// statement. A cron run's events are not stored (ListEvents derives them from the run row and
// its first attempt), nor its idempotency key (rebuilt from its occurrence when read). A taken
// idempotency key or cron occurrence is Duplicate `idempotency_key_duplicate` (the transaction
// is then aborted: the caller must roll back).
Status InsertQueuedRuns(Tx& tx, const std::vector<const NewRun*>& runs, int64_t now_ms);

// The admission events of a cron run that stores none (run.created, then run.queued with its
// first attempt or run.skipped {reason} without one, both by the scheduler at created_at_ms),
// rebuilt from the run row and its first attempt exactly as InsertQueuedRuns and
// InsertSkippedRuns build them; empty for other runs and for cron runs admitted before
// pg-0019, whose events are stored.
Result<std::vector<EventRecord>> DeriveAdmissionEvents(Tx& tx, const RunRecord& run);

// The number of admission events DeriveAdmissionEvents rebuilds for the runs `run_ids`.
Result<int64_t> CountDerivedAdmissionEvents(Tx& tx, const Param& run_ids);

// InsertQueuedRuns of one run.
Status InsertQueuedRun(Tx& tx, const NewRun& run, int64_t now_ms);

// A cron occurrence admission refused (DESIGN §11), with why.
struct SkippedRun {
  const NewRun* run = nullptr;
  std::string_view reason;  // kSkipReasonOverlap | kSkipReasonConcurrency (core/overlap.h)
  std::string summary;
};

// Inserts refused occurrences as runs in state skipped (error_code the reason, finished at
// `now_ms`) with their retry policy snapshot and the events run.created (sequence 1) and
// run.skipped {reason} (sequence 2), not stored for cron runs, as for InsertQueuedRuns; no
// attempt. They keep their occurrences: a taken one is Duplicate `idempotency_key_duplicate`.
// Each skip's notifications (NotifyRunOutcomeInTx, at `now_ms`) are written in `tx` too.
Status InsertSkippedRuns(Tx& tx, const std::vector<SkippedRun>& runs, int64_t now_ms);

// Records a cancel intent with `reason` (payload: the run.cancel_requested event's canonical
// payload) on `run`, read under a row lock and without an intent yet: a run that has not
// started (created, queued, retry_wait) is cancelled at once with its attempt and lease; a
// started run keeps its state until its executor honours the intent. A terminal run → Conflict
// run_terminal.
Status CancelRunInTx(Tx& tx, const RunRecord& run, const std::string& reason,
                     const std::string& actor_type, const std::string& payload, int64_t now_ms);

// Applies the trigger's overlap policy (`overlap`) and the task's concurrency limit to one cron
// occurrence about to be admitted in `tx`: returns the refusal when it is to be recorded as
// skipped (forbid while a run of the trigger is unfinished; the task's unfinished runs, less
// those a replace cancels, at the limit); under `replace` otherwise gives every unfinished run
// of the trigger a cancel intent with reason "replaced". Reads nothing under `allow` without a
// limit. `unwritten`: runs of the task this transaction admits but has not written yet, counted
// against the limit too. The returned refusal points at `run`.
Result<std::optional<SkippedRun>> ApplyOverlapInTx(Tx& tx, const NewRun& run,
                                                   const std::string& overlap,
                                                   std::optional<int64_t> concurrency,
                                                   int64_t unwritten = 0);

}  // namespace ql::pg
