#pragma once

// The unique indexes that hold only some rows of their table — partial unique indexes in
// PostgreSQL (schema_contract.txt: "index NAME CREATE UNIQUE INDEX ... WHERE ..."), and their
// SQLite counterparts — with the stable code a violation maps to. The repository contract suite
// expects these codes from both stores (a live name taken, an idempotency key or a dedupe key
// used twice, a cron occurrence admitted twice), so each adapter's error mapping must give the
// same code for the raw violation as well: a write that races past a probe hits the index, and
// the caller must not see a different answer then. The PostgreSQL and SQLite store tests
// violate each index for real and check the mapping against this list.

#include <string_view>

#include "ql/core/status.h"

namespace ql::testing {

struct ConditionalUniqueIndex {
  std::string_view postgres_index;  // its name in schema_contract.txt
  std::string_view sqlite_columns;  // what SQLite's "UNIQUE constraint failed: ..." names
  StatusCode code;
  std::string_view reason;
};

inline constexpr ConditionalUniqueIndex kConditionalUniqueIndexes[] = {
    {"runs_idempotency_key_key", "runs.project_id, runs.idempotency_key", StatusCode::kDuplicate,
     "idempotency_key_duplicate"},
    // SQLite keeps a cron run's key in the row: one occurrence is one key there.
    {"runs_cron_occurrence_key", "runs.project_id, runs.idempotency_key", StatusCode::kDuplicate,
     "idempotency_key_duplicate"},
    {"run_events_dedupe_key_key", "run_events.run_id, run_events.dedupe_key",
     StatusCode::kDuplicate, "dedupe_key_duplicate"},
    {"task_heads_live_name", "task_heads.project_id, task_heads.name", StatusCode::kDuplicate,
     "name_duplicate"},
    {"trigger_heads_live_name", "trigger_heads.project_id, trigger_heads.name",
     StatusCode::kDuplicate, "name_duplicate"},
    {"notification_channels_live_name",
     "notification_channels.project_id, notification_channels.name", StatusCode::kDuplicate,
     "channel_name_duplicate"},
};

}  // namespace ql::testing
