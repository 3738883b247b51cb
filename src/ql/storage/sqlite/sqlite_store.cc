#include "ql/storage/sqlite/sqlite_store.h"

#include <sqlite3.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "ql/core/canonical_json.h"
#include "ql/core/governance_store.h"
#include "ql/core/ids.h"
#include "ql/core/migration_stream.h"
#include "ql/core/store_commands.h"
#include "ql/storage/sqlite/sqlite_approvals.h"
#include "ql/storage/sqlite/sqlite_artifacts.h"
#include "ql/storage/sqlite/sqlite_db.h"
#include "ql/storage/sqlite/sqlite_governance.h"
#include "ql/storage/sqlite/sqlite_migrations.h"
#include "ql/storage/sqlite/sqlite_notifications.h"
#include "ql/storage/sqlite/sqlite_retention.h"
#include "ql/storage/sqlite/sqlite_secrets.h"
#include "ql/storage/sqlite/sqlite_store_rows.h"

namespace ql {

using sqlite::Db;
using sqlite::Execute;
using sqlite::ExecuteCas;
using sqlite::kProjectColumns;
using sqlite::LoadProject;
using sqlite::QueryAll;
using sqlite::QueryOne;
using sqlite::ReadProject;
using sqlite::Stmt;
using sqlite::Tx;
using sqlite::TxMode;

namespace {

// ---------------------------------------------------------------------------------------------
// Migrations

Status ReadHistory(Db& db, std::vector<SqliteHistoryRow>* out) {
  out->clear();
  QL_ASSIGN_OR_RETURN(
      std::optional<int64_t> has_history,
      QueryOne<int64_t>(db,
                        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = "
                        "'schema_migrations'",
                        [](const Stmt& s) { return s.Int(0); }));
  if (has_history.value_or(0) == 0) {
    QL_ASSIGN_OR_RETURN(
        std::optional<int64_t> objects,
        QueryOne<int64_t>(
            db, "SELECT count(*) FROM sqlite_master WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\'",
            [](const Stmt& s) { return s.Int(0); }));
    if (objects.value_or(0) != 0) {
      return Corrupt("migration_history_invalid",
                     "the database holds tables but no schema_migrations history; it was not "
                     "created by this store and is left untouched");
    }
    return Status();
  }
  Result<std::vector<SqliteHistoryRow>> rows = QueryAll<SqliteHistoryRow>(
      db,
      "SELECT id, stream, dialect, checksum, applied_at_ms FROM schema_migrations ORDER BY rowid",
      [](const Stmt& s) {
        return SqliteHistoryRow{s.Text(0), s.Text(1), s.Text(2), s.Text(3), s.Int(4)};
      });
  if (!rows.ok()) {
    if (rows.status().code() == StatusCode::kInternal) {
      return Corrupt("migration_history_invalid",
                     "schema_migrations does not have the columns id, stream, dialect, checksum "
                     "and applied_at_ms");
    }
    return rows.status();
  }
  *out = std::move(rows).value();
  return Status();
}

std::vector<HistoryRow> ToHistoryRows(const std::vector<SqliteHistoryRow>& rows) {
  std::vector<HistoryRow> out;
  out.reserve(rows.size());
  for (const SqliteHistoryRow& row : rows) {
    out.push_back(HistoryRow{row.id, row.checksum, row.stream, row.dialect});
  }
  return out;
}

Status CapabilityInvalid(std::string message) {
  return Corrupt("capability_invalid", std::move(message));
}

// Moves the capability row to `step` from exactly step.version - 1 (absent for version 1).
Status ApplyCapabilityStep(Db& db, const sqlite::SchemaCapability& step) {
  QL_ASSIGN_OR_RETURN(std::optional<int64_t> current,
                      QueryOne<int64_t>(
                          db, "SELECT version FROM schema_capabilities WHERE name = ?",
                          [](const Stmt& s) { return s.Int(0); }, step.name));
  const int64_t previous = step.version - 1;
  if (previous == 0) {
    if (current.has_value()) {
      return CapabilityInvalid(
          Cat({"capability ", step.name, " exists at version ", std::to_string(*current),
               " before migration ", step.migration_id, " creates version 1"}));
    }
    return Execute(db,
                   "INSERT INTO schema_capabilities (name, version, capability_map, migration_id) "
                   "VALUES (?, ?, ?, ?)",
                   step.name, step.version, step.capability_map, step.migration_id);
  }
  if (!current.has_value() || *current != previous) {
    return CapabilityInvalid(
        Cat({"capability ", step.name, " is at version ",
             current.has_value() ? std::to_string(*current) : "none", "; migration ",
             step.migration_id, " moves it only from version ", std::to_string(previous)}));
  }
  return ExecuteCas(db, CapabilityInvalid("capability row changed during migration"),
                    "UPDATE schema_capabilities SET version = ?, capability_map = ?, "
                    "migration_id = ? WHERE name = ? AND version = ?",
                    step.version, step.capability_map, step.migration_id, step.name, previous);
}

Result<std::vector<SqliteCapabilityRow>> ReadCapabilities(Db& db) {
  QL_ASSIGN_OR_RETURN(
      std::optional<int64_t> exists,
      QueryOne<int64_t>(db,
                        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = "
                        "'schema_capabilities'",
                        [](const Stmt& s) { return s.Int(0); }));
  if (exists.value_or(0) == 0) return std::vector<SqliteCapabilityRow>();
  return QueryAll<SqliteCapabilityRow>(
      db,
      "SELECT name, version, capability_map, migration_id FROM schema_capabilities ORDER BY name",
      [](const Stmt& s) {
        return SqliteCapabilityRow{s.Text(0), s.Int(1), s.Text(2), s.Text(3)};
      });
}

// Returns the capability step a database with `history` must hold: the last step written by
// an applied migration, or nullptr when none has been applied yet.
const sqlite::SchemaCapability* CapabilityAfter(const std::vector<SqliteHistoryRow>& history) {
  const sqlite::SchemaCapability* want = nullptr;
  for (const sqlite::SchemaCapability& step : sqlite::CapabilitySteps()) {
    for (const SqliteHistoryRow& row : history) {
      if (row.id == step.migration_id) want = &step;
    }
  }
  return want;
}

// Requires `rows` to be exactly `want` (no row at all when `want` is null).
Status CheckCapability(const std::vector<SqliteCapabilityRow>& rows,
                       const sqlite::SchemaCapability* want) {
  if (want == nullptr) {
    if (rows.empty()) return Status();
    return CapabilityInvalid(Cat({"capability ", Quote(rows.front().name), " version ",
                                  std::to_string(rows.front().version),
                                  " exists before the migration that creates it was applied"}));
  }
  if (rows.size() != 1) {
    return CapabilityInvalid(
        Cat({"expected exactly one capability row (", want->name, " version ",
             std::to_string(want->version), "), found ", std::to_string(rows.size())}));
  }
  const SqliteCapabilityRow& row = rows.front();
  if (row.name != want->name || row.version != want->version ||
      row.capability_map != want->capability_map || row.migration_id != want->migration_id) {
    return CapabilityInvalid(Cat(
        {"capability row is ", Quote(row.name), " version ", std::to_string(row.version), " from ",
         Quote(row.migration_id), " with map ", QuoteForMessage(row.capability_map, 200),
         "; this build needs ", want->name, " version ", std::to_string(want->version), " from ",
         want->migration_id, " with map ", want->capability_map}));
  }
  return Status();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Opening and migrating

SqliteStore::SqliteStore(std::unique_ptr<sqlite::Db> db)
    : db_(std::move(db)),
      governance_runner_(std::make_unique<sqlite::SqliteGovernanceRunner>(*db_)),
      governance_(std::make_unique<GovernanceStore>(*governance_runner_, SecureRandom())),
      approvals_runner_(std::make_unique<sqlite::SqliteApprovalRunner>(*db_)),
      approvals_(std::make_unique<ApprovalStore>(*approvals_runner_, SecureRandom())),
      retention_(sqlite::NewSqliteRetention(*db_)),
      secret_runner_(std::make_unique<sqlite::SqliteSecretRunner>(*db_)),
      secrets_(std::make_unique<SecretStore>(*secret_runner_, SecureRandom())),
      notification_runner_(std::make_unique<sqlite::SqliteNotificationRunner>(*db_)),
      notifications_(std::make_unique<NotificationStore>(*notification_runner_, SecureRandom())),
      artifact_runner_(std::make_unique<sqlite::SqliteArtifactRunner>(*db_)),
      artifacts_(std::make_unique<ArtifactStore>(*artifact_runner_, SecureRandom())) {}

Status SqliteStore::Fence(const std::optional<PolicyFence>& fence, const std::string& project_id) {
  if (!fence.has_value()) return Status();
  std::unique_ptr<GovernanceTx> tx = sqlite::NewGovernanceTx(*db_);
  return CheckPolicyFence(*tx, *fence, project_id);
}

Status SqliteStore::FenceAnyStatus(const std::optional<PolicyFence>& fence,
                                   const std::string& project_id) {
  Status st = Fence(fence, project_id);
  // Cancelling stays possible in an archived project: it only stops work.
  if (st.code() == StatusCode::kConflict && st.reason() == "project_archived") return Status();
  return st;
}

SqliteStore::~SqliteStore() = default;

Result<std::unique_ptr<SqliteStore>> SqliteStore::Open(const SqliteOptions& options, Clock& clock) {
  const bool edge = options.profile == kSqliteProfileEdge;
  if (!edge && options.profile != kSqliteProfileStandalone) {
    return InvalidArgument(
        "invalid_profile",
        Cat({"SQLite profile must be edge or standalone, got ", Quote(options.profile)}));
  }
  if (options.path.empty()) {
    return InvalidArgument("invalid_sqlite_options", "the database path is empty");
  }
  if (options.busy_timeout_ms < 0 || options.max_busy_retries < 0) {
    return InvalidArgument("invalid_sqlite_options",
                           "busy_timeout_ms and max_busy_retries must not be negative");
  }
  if (edge) {
    // No up-front page-cache block per connection (SQLite allocates one of 20 pages by default):
    // pages are allocated as they are read. Process-wide, so only before SQLite's first use; a
    // later call is refused by SQLite and changes nothing.
    static const int configured = sqlite3_config(SQLITE_CONFIG_PAGECACHE, nullptr, 0, 0);
    (void)configured;
  }
  QL_ASSIGN_OR_RETURN(std::unique_ptr<Db> db,
                      Db::Open(options.path, options.busy_timeout_ms, options.max_busy_retries));

  // Connection-scoped settings only: none of them writes to the file, so a refused database
  // stays byte-for-byte unchanged.
  const char* connection_pragmas =
      edge ? "PRAGMA foreign_keys = ON; PRAGMA synchronous = FULL; PRAGMA cache_size = -4096; "
             "PRAGMA mmap_size = 0;"
           : "PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL; PRAGMA cache_size = -16384;";
  QL_RETURN_IF_ERROR(db->WithConnection([&]() -> Status {
    QL_RETURN_IF_ERROR(db->ExecScript(connection_pragmas, "configuring the connection"));
    QL_ASSIGN_OR_RETURN(std::string fk, db->QueryText("PRAGMA foreign_keys", "reading pragmas"));
    if (fk != "1") {
      return Internal("foreign_keys_unsupported",
                      "this SQLite build cannot enforce foreign keys; the store needs them");
    }
    return Status();
  }));

  // The whole history is read and judged before anything is written.
  const MigrationStream& stream = sqlite::SqliteMainStream();
  std::vector<SqliteHistoryRow> history;
  std::vector<SqliteCapabilityRow> capabilities;
  QL_RETURN_IF_ERROR(
      db->Transact(TxMode::kRead, "reading the migration history", [&](Tx&) -> Status {
        QL_RETURN_IF_ERROR(ReadHistory(*db, &history));
        QL_ASSIGN_OR_RETURN(capabilities, ReadCapabilities(*db));
        return Status();
      }));
  QL_ASSIGN_OR_RETURN(std::vector<const Migration*> pending,
                      PendingMigrations(stream, ToHistoryRows(history)));
  QL_RETURN_IF_ERROR(CheckCapability(capabilities, CapabilityAfter(history)));

  // The journal mode is stored in the file, so it is set only once the file is known to be ours.
  const std::string journal_mode = edge ? "delete" : "wal";
  QL_RETURN_IF_ERROR(db->WithConnection([&]() -> Status {
    QL_ASSIGN_OR_RETURN(std::string mode, db->QueryText(edge ? "PRAGMA journal_mode = DELETE"
                                                             : "PRAGMA journal_mode = WAL",
                                                        "setting the journal mode"));
    if (mode != journal_mode && !(options.path == ":memory:" && mode == "memory")) {
      return Unavailable("journal_mode_unsupported",
                         Cat({"SQLite kept journal mode ", Quote(mode), " instead of ",
                              journal_mode, " for the ", options.profile, " profile"}));
    }
    return Status();
  }));

  for (const Migration* migration : pending) {
    QL_RETURN_IF_ERROR(db->Transact(
        TxMode::kWrite, Cat({"applying migration ", migration->id}), [&](Tx&) -> Status {
          // Another process may have migrated since the history was read: judge it again
          // under the write lock and skip what is already applied.
          QL_RETURN_IF_ERROR(ReadHistory(*db, &history));
          QL_ASSIGN_OR_RETURN(std::vector<const Migration*> now_pending,
                              PendingMigrations(stream, ToHistoryRows(history)));
          if (now_pending.empty() || now_pending.front() != migration) return Status();
          QL_RETURN_IF_ERROR(db->ExecScript(migration->sql, Cat({"migration ", migration->id})));
          QL_RETURN_IF_ERROR(Execute(*db,
                                     "INSERT INTO schema_migrations (id, stream, dialect, "
                                     "checksum, applied_at_ms) VALUES (?, ?, ?, ?, ?)",
                                     migration->id, stream.name, stream.dialect,
                                     migration->checksum, clock.NowMs()));
          for (const sqlite::SchemaCapability& step : sqlite::CapabilitySteps()) {
            if (step.migration_id == migration->id) {
              QL_RETURN_IF_ERROR(ApplyCapabilityStep(*db, step));
            }
          }
          return Status();
        }));
  }

  QL_RETURN_IF_ERROR(
      db->Transact(TxMode::kRead, "verifying the schema capability", [&](Tx&) -> Status {
        QL_ASSIGN_OR_RETURN(capabilities, ReadCapabilities(*db));
        return CheckCapability(capabilities, &sqlite::ExpectedCapability());
      }));
  // Migrations touched every page of the schema; an edge daemon need not keep them cached.
  if (!pending.empty()) db->ReleaseMemory();
  return std::unique_ptr<SqliteStore>(new SqliteStore(std::move(db)));
}

Result<SqliteSettings> SqliteStore::Settings() {
  SqliteSettings out;
  QL_RETURN_IF_ERROR(db_->WithConnection([&]() -> Status {
    auto read_int = [&](std::string_view pragma, int64_t* value) -> Status {
      QL_ASSIGN_OR_RETURN(std::string text, db_->QueryText(pragma, "reading pragmas"));
      *value = std::stoll(text.empty() ? "0" : text);
      return Status();
    };
    QL_ASSIGN_OR_RETURN(out.journal_mode, db_->QueryText("PRAGMA journal_mode", "reading pragmas"));
    QL_RETURN_IF_ERROR(read_int("PRAGMA synchronous", &out.synchronous));
    QL_RETURN_IF_ERROR(read_int("PRAGMA cache_size", &out.cache_size));
    QL_RETURN_IF_ERROR(read_int("PRAGMA mmap_size", &out.mmap_size));
    int64_t fk = 0;
    QL_RETURN_IF_ERROR(read_int("PRAGMA foreign_keys", &fk));
    out.foreign_keys = fk != 0;
    return read_int("PRAGMA busy_timeout", &out.busy_timeout_ms);
  }));
  return out;
}

Result<std::vector<SqliteHistoryRow>> SqliteStore::History() {
  std::vector<SqliteHistoryRow> out;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kRead, "reading the migration history",
                                   [&](Tx&) { return ReadHistory(*db_, &out); }));
  return out;
}

Result<std::vector<SqliteCapabilityRow>> SqliteStore::Capabilities() {
  std::vector<SqliteCapabilityRow> out;
  QL_RETURN_IF_ERROR(
      db_->Transact(TxMode::kRead, "reading the schema capability", [&](Tx&) -> Status {
        QL_ASSIGN_OR_RETURN(out, ReadCapabilities(*db_));
        return Status();
      }));
  return out;
}

// ---------------------------------------------------------------------------------------------
// Projects

Result<ProjectRecord> SqliteStore::EnsureProject(const std::string& id_if_new,
                                                 const std::string& slug, const std::string& name,
                                                 int64_t now_ms) {
  QL_RETURN_IF_ERROR(RequireText("project slug", slug));
  ProjectRecord out;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kWrite, "ensuring a project", [&](Tx&) -> Status {
    static const std::string kBySlug =
        Cat({"SELECT ", kProjectColumns, " FROM projects p WHERE p.slug = ?"});
    QL_ASSIGN_OR_RETURN(std::optional<ProjectRecord> existing,
                        QueryOne<ProjectRecord>(*db_, kBySlug, ReadProject, slug));
    if (existing.has_value()) {
      out = std::move(*existing);
      return Status();
    }
    QL_RETURN_IF_ERROR(ValidateId("project id", id_if_new));
    out = ProjectRecord{id_if_new, slug, name, std::string(kProjectActive), 1, now_ms, now_ms};
    return Execute(*db_,
                   "INSERT INTO projects (id, slug, name, status, version, created_at_ms, "
                   "updated_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?)",
                   out.id, out.slug, out.name, out.status, out.version, out.created_at_ms,
                   out.updated_at_ms);
  }));
  return out;
}

Result<ProjectRecord> SqliteStore::GetProject(const std::string& project_id) {
  std::optional<ProjectRecord> out;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kRead, "reading a project", [&](Tx&) -> Status {
    QL_ASSIGN_OR_RETURN(out, LoadProject(*db_, project_id));
    return Status();
  }));
  if (!out.has_value()) {
    return NotFound("project_not_found", Cat({"project ", project_id, " does not exist"}));
  }
  return std::move(*out);
}

Result<ProjectRecord> SqliteStore::GetProjectBySlug(const std::string& slug) {
  std::optional<ProjectRecord> out;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kRead, "reading a project", [&](Tx&) -> Status {
    static const std::string kSql =
        Cat({"SELECT ", kProjectColumns, " FROM projects p WHERE p.slug = ?"});
    QL_ASSIGN_OR_RETURN(out, QueryOne<ProjectRecord>(*db_, kSql, ReadProject, slug));
    return Status();
  }));
  if (!out.has_value()) {
    return NotFound("project_not_found", Cat({"no project has slug ", Quote(slug)}));
  }
  return std::move(*out);
}

Result<std::vector<ProjectRecord>> SqliteStore::ListProjects() {
  std::vector<ProjectRecord> out;
  QL_RETURN_IF_ERROR(db_->Transact(TxMode::kRead, "listing projects", [&](Tx&) -> Status {
    static const std::string kSql =
        Cat({"SELECT ", kProjectColumns, " FROM projects p ORDER BY p.slug"});
    QL_ASSIGN_OR_RETURN(out, QueryAll<ProjectRecord>(*db_, kSql, ReadProject));
    return Status();
  }));
  return out;
}

}  // namespace ql
