#pragma once

// The postgresql-main migration stream compiled into the binary, the schema capability steps,
// the grants, and the migrator behind `ql-cluster migrate`.

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ql/core/clock.h"
#include "ql/core/migration_stream.h"
#include "ql/core/status.h"
#include "ql/storage/postgres/pg_client.h"

namespace ql::pg {

// One embedded SQL file (file name without ".sql", content).
struct EmbeddedSql {
  std::string_view id;
  std::string_view sql;
};

// Returns migrations/pg-*.sql in file-name order followed by grants.sql (id "grants") and
// schema_contract.txt (id "schema_contract").
// Defined in a source file generated at build time.
std::span<const EmbeddedSql> EmbeddedMigrationFiles();

// Returns stream "postgresql-main" (dialect "postgresql") of the pg-* files, each migration
// carrying MigrationChecksum of its SQL.
const MigrationStream& PostgresMainStream();

// Returns grants.sql: the exact privileges of ql3_runtime, ql3_admin and ql3_worker_ingress.
std::string_view GrantsSql();

// The capability row name of a PostgreSQL control plane.
inline constexpr std::string_view kControlCore = "control-core";

// One version of the capability row: written by migration `migration_id` in the same
// transaction, moving only from version - 1 (version 1 is inserted into an empty table).
struct SchemaCapability {
  std::string_view name;
  int64_t version = 0;
  std::string_view capability_map;  // canonical JSON object
  std::string_view migration_id;
};

std::span<const SchemaCapability> CapabilitySteps();
// The capability row the code requires after all migrations: CapabilitySteps().back().
const SchemaCapability& ExpectedCapability();

// The role names the migration grants to and the auditor checks.
inline constexpr char kMigrationRole[] = "ql3_migration";
inline constexpr char kRuntimeRole[] = "ql3_runtime";
inline constexpr char kAdminRole[] = "ql3_admin";
inline constexpr char kWorkerIngressRole[] = "ql3_worker_ingress";

// The fixed key of the transaction-scoped advisory lock every migration transaction takes.
inline constexpr int64_t kMigrationLockKey = 0x716c335f6d696772;  // "ql3_migr"

struct MigrateReport {
  std::vector<std::string> applied;  // migration ids applied by this run, in order
};

// Brings the database at `url` (already checked by CheckDatabaseUrl) to the code's schema, as
// the migration role. Each migration runs in its own transaction together with its history row
// and capability step (a prepare/commit pair as MigrateStream describes); every transaction first
// takes the advisory lock with try-lock, reads and checks the whole history (PendingMigrations),
// and only then changes anything. A final transaction re-checks history and capability and applies
// grants.sql. Errors: InvalidArgument `migration_role_invalid` when not connected as ql3_migration;
// Busy `migration_lock_held` when another migrator holds the lock (nothing was changed by this
// transaction); Corrupt with the core's history reasons or `migration_history_invalid` /
// `capability_invalid`; Unavailable when the server is unreachable or read-only. A migration
// whose SQL fails rolls back with its history and capability rows.
Result<MigrateReport> Migrate(const std::string& url, Clock& clock,
                              const SessionOptions& session = {});

// The ids of the compiled migrations the database at `url` has not applied yet, in order
// (read-only: it changes nothing). Errors as Migrate's: `migration_role_invalid`, the history
// faults, Unavailable when the server cannot be reached.
Result<std::vector<std::string>> PendingMigrationIds(const std::string& url,
                                                     const SessionOptions& session = {});

// Tests only: called at "marked" (a pair's marker written, its statements not run yet),
// "statement N" (the prepare migration's Nth statement ran and was counted) and "prepared" (its
// statements ran, the commit migration not yet); a non-ok return ends the migrator right there,
// as a crash would (its connection closes, nothing is undone).
using MigrationFault = std::function<Status(std::string_view point)>;

// Applies `stream` instead of the compiled one (tests: a migration that fails midway, a
// prepare/commit pair). A prepare/commit pair (see IsPrepareMigration) is applied as: the
// pair's marker in ql3.schema_migration_markers (not the history); then the prepare statements
// outside any transaction, one by one, under the session-level migration lock, each counted in
// the marker; then one transaction with the prepare migration's history row, the commit
// migration, its history row and capability step, and the marker deleted. The history never
// holds a migration that has not run whole: after a crash anywhere in between both halves are
// pending, and migrating again runs the statements again, then the commit transaction. A
// history written before markers existed (the prepare row without its commit) is still read:
// its statements run again, then the commit migration alone. InvalidArgument
// `capability_step_invalid` when a capability step names a prepare migration,
// `migration_marker_missing` when a pair comes before the marker table exists.
Result<MigrateReport> MigrateStream(const std::string& url, const MigrationStream& stream,
                                    std::span<const SchemaCapability> steps, Clock& clock,
                                    const SessionOptions& session = {},
                                    const MigrationFault& fault = {});

// The marker of a prepare/commit pair that was started and has not landed, as stored.
struct MigrationMarker {
  std::string id;  // the prepare migration
  std::string checksum;
  int64_t statements = 0;      // in the prepare migration
  int64_t statements_run = 0;  // completed by the latest run of them
  int64_t started_at_ms = 0;   // the first run
  int64_t updated_at_ms = 0;   // the latest start or completed statement
};

// Reads the markers (id order). Empty when the marker table does not exist yet (a schema
// before pg-0025) or the connected role may not read it.
Result<std::vector<MigrationMarker>> ReadMigrationMarkers(Connection& conn);

// Reads the history rows (id order). Empty when schema ql3 does not exist yet; Corrupt
// `migration_history_invalid` when ql3 exists without a history table.
Result<std::vector<HistoryRow>> ReadHistory(Connection& conn);

// The capability rows as stored.
struct CapabilityRow {
  std::string name;
  int64_t version = 0;
  std::string capability_map;
  std::string migration_id;
};

// Reads the capability rows (empty when the table does not exist yet).
Result<std::vector<CapabilityRow>> ReadCapabilities(Connection& conn);

// Checks that `rows` is exactly `want` (no row at all when `want` is null); Corrupt
// `capability_invalid` naming the difference otherwise.
Status CheckCapability(const std::vector<CapabilityRow>& rows, const SchemaCapability* want);

}  // namespace ql::pg
