#pragma once

// The rules shared by every migration runner and readiness check: what a well-formed stream
// looks like in code, and whether a database's history is an exact prefix of it. Pure: callers
// read the history rows and apply the SQL; nothing here touches a database.

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "ql/core/status.h"

namespace ql {

inline constexpr std::string_view kSqliteMainStream = "sqlite-main";
inline constexpr std::string_view kPostgresqlMainStream = "postgresql-main";
inline constexpr std::string_view kSqliteDialect = "sqlite";
inline constexpr std::string_view kPostgresqlDialect = "postgresql";

struct Migration {
  // "0001-lower-kebab-name" in sqlite-main, "pg-0001-lower-kebab-name" in postgresql-main.
  std::string id;
  // Lowercase hex SHA-256 of `sql` (see MigrationChecksum).
  std::string checksum;
  std::string sql;
};

struct MigrationStream {
  std::string name;                   // "sqlite-main" | "postgresql-main"
  std::string dialect;                // "sqlite" | "postgresql"
  std::vector<Migration> migrations;  // in apply order
};

// One row of a database's migration history as read from storage.
struct HistoryRow {
  std::string id;
  std::string checksum;
  std::string stream;
  std::string dialect;
};

// History faults, in the precedence order PendingMigrations reports them (see there). Each is
// returned with category Corrupt.
inline constexpr std::string_view kReasonMigrationWrongStream = "migration_wrong_stream";
inline constexpr std::string_view kReasonMigrationIdMalformed = "migration_id_malformed";
inline constexpr std::string_view kReasonMigrationDuplicate = "migration_duplicate";
inline constexpr std::string_view kReasonMigrationUnknown = "migration_unknown";
inline constexpr std::string_view kReasonMigrationGap = "migration_gap";
inline constexpr std::string_view kReasonMigrationChecksumMismatch = "migration_checksum_mismatch";
inline constexpr std::array<std::string_view, 6> kMigrationHistoryFaultReasons = {
    kReasonMigrationWrongStream, kReasonMigrationIdMalformed, kReasonMigrationDuplicate,
    kReasonMigrationUnknown,     kReasonMigrationGap,         kReasonMigrationChecksumMismatch,
};

// Reasons only ValidateStream returns (besides reusing the history reasons above).
inline constexpr std::string_view kReasonMigrationStreamUnknown = "migration_stream_unknown";
inline constexpr std::string_view kReasonMigrationDialectMismatch = "migration_dialect_mismatch";
inline constexpr std::string_view kReasonMigrationChecksumMalformed =
    "migration_checksum_malformed";
inline constexpr std::string_view kReasonMigrationPrepareUnpaired = "migration_prepare_unpaired";

// Longest migration id accepted; longer ids are malformed (this also bounds error messages).
inline constexpr std::size_t kMaxMigrationIdLength = 128;

// Returns the lowercase hex SHA-256 of `sql`: the checksum a Migration must carry.
std::string MigrationChecksum(std::string_view sql);

// Checks the code's own stream, the first fault in list order winning. Returns ok, or
// InvalidArgument with one of these reasons:
//   migration_stream_unknown      name is neither "sqlite-main" nor "postgresql-main";
//   migration_dialect_mismatch    dialect is not the stream's ("sqlite" / "postgresql");
//   migration_id_malformed        an id does not fit the stream's scheme: an optional "pg-"
//                                 prefix (required for postgresql-main, forbidden for
//                                 sqlite-main), four digits from 0001, "-", and a lower-kebab
//                                 name ([a-z0-9]+ words joined by single hyphens), at most
//                                 kMaxMigrationIdLength characters;
//   migration_duplicate           a number appears twice;
//   migration_gap                 numbers are not 0001, 0002, ... in list order;
//   migration_checksum_malformed  a checksum is not 64 lowercase hex digits;
//   migration_checksum_mismatch   a checksum is not the SHA-256 of its SQL;
//   migration_prepare_unpaired    a prepare migration ("...-NAME-prepare") is not followed
//                                 directly by its commit migration ("...-NAME-commit"), or a
//                                 commit migration does not follow its prepare migration.
// The message names the offending migration id.
Status ValidateStream(const MigrationStream& stream);

// A step that cannot run inside a transaction (CREATE INDEX CONCURRENTLY) is split into two
// migrations: "NNNN-NAME-prepare" holds the non-transactional statements, written so that running
// them again completes or repeats them; "NNNN+1-NAME-commit" runs in one transaction, checks what
// they built and completes the pair. A history row is written only for a migration that ran
// whole: the runner keeps the marker of a pair in progress apart from the history, and writes
// both history rows in the commit migration's transaction, so an interrupted pair is pending
// in full and running it again runs the statements again before the commit migration.
// Returns true when `id` names a prepare migration.
bool IsPrepareMigration(std::string_view id);
// Returns true when `id` names a commit migration.
bool IsCommitMigration(std::string_view id);

// Returns the code's migrations the database still needs, in apply order, as pointers into
// `code.migrations` (valid while `code` lives). `history` is the database's whole history in
// the order it was applied (ordering rows by id gives the same order for a valid history).
//
// Fails when `code` is malformed (the ValidateStream error, InvalidArgument), and fails closed
// with Corrupt when the history is not an exact prefix of the code's list. Every row is examined
// before deciding; when several faults are present, the first class in this order is reported,
// naming every offending id of that class (up to five, then a count):
//   1. migration_wrong_stream       a row records another stream or dialect — the database
//                                   belongs to a different stream, so nothing else is meaningful;
//   2. migration_id_malformed       a row id does not fit this stream's id scheme;
//   3. migration_duplicate          the same id appears in two rows;
//   4. migration_unknown            an id this code does not have (the database is newer than
//                                   the code, or was migrated by another build);
//   5. migration_gap                the ids are all known but not the code's first N ids in
//                                   order (a missing earlier migration, or rows out of order);
//   6. migration_checksum_mismatch  a known id with a different checksum (the SQL was edited
//                                   after it landed).
// Structural faults come before content faults because a checksum comparison is only
// meaningful once the rows are known to line up with the code's list.
Result<std::vector<const Migration*>> PendingMigrations(const MigrationStream& code,
                                                        const std::vector<HistoryRow>& history);

// Returns true when `status` is one of PendingMigrations' Corrupt history faults (a reason in
// kMigrationHistoryFaultReasons with category Corrupt); readiness maps these to
// "migration_history_invalid". Stream validation errors (InvalidArgument) are not history faults.
bool IsMigrationHistoryFault(const Status& status);

}  // namespace ql
