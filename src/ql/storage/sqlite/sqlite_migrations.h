#pragma once

// The sqlite-main migration stream compiled into the binary, and the schema capability row the
// migrations maintain.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "ql/core/migration_stream.h"

namespace ql::sqlite {

// One file of migrations/, as compiled into the library (file name without ".sql", content).
struct EmbeddedSql {
  std::string_view id;
  std::string_view sql;
};

// Returns the migration files in file-name order. Defined in a source file generated at build
// time from migrations/*.sql.
std::span<const EmbeddedSql> EmbeddedMigrationFiles();

// Returns stream "sqlite-main" (dialect "sqlite") built from EmbeddedMigrationFiles(), each
// migration carrying MigrationChecksum of its SQL. Built once; valid for the process lifetime.
const MigrationStream& SqliteMainStream();

// The name of the capability row of a local (SQLite) store.
inline constexpr std::string_view kLocalControlCore = "local-control-core";

// One version of the capability row: written by migration `migration_id` in the same
// transaction, moving only from version - 1 (version 1 is inserted into an empty table).
struct SchemaCapability {
  std::string_view name;
  int64_t version = 0;
  std::string_view capability_map;  // canonical JSON object
  std::string_view migration_id;
};

// Returns every capability version in order; the last one is what a current database holds.
std::span<const SchemaCapability> CapabilitySteps();

// Returns the capability row the code requires after all migrations: CapabilitySteps().back().
const SchemaCapability& ExpectedCapability();

}  // namespace ql::sqlite
