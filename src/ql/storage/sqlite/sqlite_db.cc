#include "ql/storage/sqlite/sqlite_db.h"

#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <utility>

namespace ql::sqlite {
namespace {

std::string Op(std::string_view operation) { return std::string(operation); }

// A unique index the services care about, told apart by the columns SQLite names.
struct UniqueIndexReason {
  std::string_view columns;
  StatusCode code;
  std::string_view reason;
  std::string_view message;
};

constexpr UniqueIndexReason kUniqueIndexReasons[] = {
    {"runs.project_id, runs.idempotency_key", StatusCode::kDuplicate, "idempotency_key_duplicate",
     "a run with this idempotency key exists already in the project"},
    {"run_events.run_id, run_events.dedupe_key", StatusCode::kDuplicate, "dedupe_key_duplicate",
     "an event with this dedupe key exists already on the run"},
    {"projects.slug", StatusCode::kDuplicate, "slug_duplicate",
     "a project with this slug exists already"},
    {"task_revisions.mutation_id", StatusCode::kConflict, "mutation_id_reused",
     "the mutation id was used by another write"},
    {"trigger_revisions.mutation_id", StatusCode::kConflict, "mutation_id_reused",
     "the mutation id was used by another write"},
    {"role_bindings.mutation_id", StatusCode::kConflict, "mutation_id_reused",
     "the mutation id was used by another write"},
    {"principals.name", StatusCode::kDuplicate, "principal_name_duplicate",
     "a principal with this name exists already"},
    // The live-name indexes (partial: a deleted head or channel frees its name), as PostgreSQL's
    // task_heads_live_name, trigger_heads_live_name and notification_channels_live_name.
    {"task_heads.project_id, task_heads.name", StatusCode::kDuplicate, "name_duplicate",
     "a task with this name exists already in the project"},
    {"trigger_heads.project_id, trigger_heads.name", StatusCode::kDuplicate, "name_duplicate",
     "a trigger with this name exists already in the project"},
    {"notification_channels.project_id, notification_channels.name", StatusCode::kDuplicate,
     "channel_name_duplicate", "a channel with this name exists already in the project"},
    {"role_bindings.scope, role_bindings.subject_id, role_bindings.version", StatusCode::kConflict,
     "binding_version_conflict", "another binding of the subject was written at the same time"},
};

Status DuplicateFromDetail(std::string_view detail, std::string_view operation) {
  for (const UniqueIndexReason& entry : kUniqueIndexReasons) {
    if (detail.find(entry.columns) != std::string_view::npos) {
      return Status(entry.code, std::string(entry.reason),
                    Op(operation) + ": " + std::string(entry.message));
    }
  }
  return Duplicate("duplicate_id", Op(operation) + ": a record with this id exists already");
}

// Sleeps before retry `attempt` (0-based): 5, 10, 20, 40 ms ... capped at 200 ms. Bounded by
// the caller's retry count, so a busy store answers Busy instead of hanging.
void Backoff(int attempt) {
  const int64_t ms = std::min<int64_t>(int64_t{5} << std::min(attempt, 6), 200);
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

}  // namespace

Status StatusFromSqlite(int code, std::string_view detail, std::string_view operation,
                        SqlitePhase phase) {
  const int primary = code & 0xff;
  switch (primary) {
    case SQLITE_OK:
    case SQLITE_ROW:
    case SQLITE_DONE:
      return Status();
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_PROTOCOL:
      return Busy("store_busy", Op(operation) +
                                    ": the database stayed locked by another connection past "
                                    "the busy timeout and the bounded retries; try again later");
    case SQLITE_CONSTRAINT:
      switch (code) {
        case SQLITE_CONSTRAINT_PRIMARYKEY:
        case SQLITE_CONSTRAINT_UNIQUE:
          return DuplicateFromDetail(detail, operation);
        case SQLITE_CONSTRAINT_FOREIGNKEY:
          return NotFound("reference_not_found",
                          Op(operation) + ": a record it refers to does not exist");
        case SQLITE_CONSTRAINT_TRIGGER:
          // Only our own RAISE(ABORT, ...) messages get here ("... are immutable").
          return Conflict("row_immutable", Op(operation) + ": " + std::string(detail));
        default:
          return InvalidArgument("constraint_violated",
                                 Op(operation) + ": a value breaks a rule of the stored schema");
      }
    case SQLITE_TOOBIG:
    case SQLITE_RANGE:
      return InvalidArgument("value_too_large",
                             Op(operation) + ": a value is too large for the database");
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return Corrupt("database_corrupt",
                     Op(operation) + ": the database file is damaged or is not a SQLite database");
    case SQLITE_IOERR:
      if (phase == SqlitePhase::kCommit) {
        return OutcomeUnknown("commit_outcome_unknown",
                              Op(operation) +
                                  ": an I/O error interrupted COMMIT; the write may or may not "
                                  "be durable, read it back before repeating it");
      }
      return Unavailable("storage_io_error", Op(operation) +
                                                 ": an I/O error occurred reading or writing the "
                                                 "database file");
    case SQLITE_FULL:
      return Unavailable("storage_full", Op(operation) + ": the disk holding the database is full");
    case SQLITE_CANTOPEN:
      return Unavailable("database_cannot_open",
                         Op(operation) +
                             ": the database file cannot be opened (missing "
                             "directory or permissions)");
    case SQLITE_READONLY:
      return Unavailable("database_read_only", Op(operation) + ": the database file is read-only");
    case SQLITE_PERM:
    case SQLITE_AUTH:
      return Unavailable("database_permission_denied",
                         Op(operation) + ": access to the database file was denied");
    case SQLITE_NOMEM:
      return Unavailable("out_of_memory", Op(operation) + ": SQLite ran out of memory");
    case SQLITE_INTERRUPT:
      return Unavailable("interrupted", Op(operation) + ": the operation was interrupted");
    default:
      return Internal("sqlite_error", Op(operation) + ": " + std::string(detail) +
                                          " (SQLite code " + std::to_string(code) + ")");
  }
}

// ---------------------------------------------------------------------------------------------
// Stmt

Stmt::Stmt(Db* db, sqlite3_stmt* stmt, bool* in_use) : db_(db), stmt_(stmt), in_use_(in_use) {}

Stmt::Stmt(Stmt&& other) noexcept
    : db_(other.db_), stmt_(other.stmt_), in_use_(other.in_use_), bind_error_(other.bind_error_) {
  other.stmt_ = nullptr;
  other.in_use_ = nullptr;
}

Stmt::~Stmt() {
  if (stmt_ == nullptr) return;
  if (in_use_ != nullptr) {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
    *in_use_ = false;
  } else {
    sqlite3_finalize(stmt_);
  }
}

Stmt& Stmt::Bind(int index, int64_t value) {
  const int rc = sqlite3_bind_int64(stmt_, index, static_cast<sqlite3_int64>(value));
  if (rc != SQLITE_OK && bind_error_ == 0) bind_error_ = rc;
  return *this;
}

Stmt& Stmt::Bind(int index, std::string_view value) {
  const int rc =
      sqlite3_bind_text64(stmt_, index, value.data(), value.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
  if (rc != SQLITE_OK && bind_error_ == 0) bind_error_ = rc;
  return *this;
}

Stmt& Stmt::BindBlob(int index, std::string_view bytes) {
  const int rc = sqlite3_bind_blob64(stmt_, index, bytes.empty() ? "" : bytes.data(), bytes.size(),
                                     SQLITE_TRANSIENT);
  if (rc != SQLITE_OK && bind_error_ == 0) bind_error_ = rc;
  return *this;
}

Stmt& Stmt::Bind(int index, std::nullopt_t) {
  const int rc = sqlite3_bind_null(stmt_, index);
  if (rc != SQLITE_OK && bind_error_ == 0) bind_error_ = rc;
  return *this;
}

Result<bool> Stmt::Step() {
  if (bind_error_ != 0) {
    return StatusFromSqlite(bind_error_, db_->ErrorMessage(), db_->operation_);
  }
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return StatusFromSqlite(rc, db_->ErrorMessage(), db_->operation_);
}

Status Stmt::Run() {
  for (;;) {
    Result<bool> row = Step();
    if (!row.ok()) return row.status();
    if (!*row) return Status();
  }
}

bool Stmt::IsNull(int column) const { return sqlite3_column_type(stmt_, column) == SQLITE_NULL; }

int64_t Stmt::Int(int column) const { return sqlite3_column_int64(stmt_, column); }

std::string Stmt::Text(int column) const {
  const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, column));
  if (text == nullptr) return std::string();
  return std::string(text, static_cast<size_t>(sqlite3_column_bytes(stmt_, column)));
}

std::string Stmt::Blob(int column) const {
  const auto* bytes = static_cast<const char*>(sqlite3_column_blob(stmt_, column));
  if (bytes == nullptr) return std::string();
  return std::string(bytes, static_cast<size_t>(sqlite3_column_bytes(stmt_, column)));
}

std::optional<int64_t> Stmt::OptInt(int column) const {
  if (IsNull(column)) return std::nullopt;
  return Int(column);
}

std::optional<std::string> Stmt::OptText(int column) const {
  if (IsNull(column)) return std::nullopt;
  return Text(column);
}

// ---------------------------------------------------------------------------------------------
// Db

Db::Db(sqlite3* handle, int busy_timeout_ms, int max_busy_retries)
    : handle_(handle), busy_timeout_ms_(busy_timeout_ms), max_busy_retries_(max_busy_retries) {}

Db::~Db() {
  for (auto& [sql, entry] : cache_) sqlite3_finalize(entry->stmt);
  cache_.clear();
  sqlite3_close_v2(handle_);
}

Result<std::unique_ptr<Db>> Db::Open(const std::string& path, int busy_timeout_ms,
                                     int max_busy_retries) {
  sqlite3* handle = nullptr;
  const int rc =
      sqlite3_open_v2(path.c_str(), &handle,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    Status status =
        StatusFromSqlite(rc, handle != nullptr ? sqlite3_errmsg(handle) : sqlite3_errstr(rc),
                         "opening the SQLite database", SqlitePhase::kOpen);
    sqlite3_close_v2(handle);
    return status;
  }
  sqlite3_extended_result_codes(handle, 1);
  sqlite3_busy_timeout(handle, busy_timeout_ms);
  // Defensive mode refuses writable_schema and similar ways of corrupting the file by SQL.
  sqlite3_db_config(handle, SQLITE_DBCONFIG_DEFENSIVE, 1, nullptr);
  return std::unique_ptr<Db>(new Db(handle, busy_timeout_ms, max_busy_retries));
}

Status Db::WithConnection(const std::function<Status()>& body) {
  std::lock_guard<std::mutex> lock(mu_);
  operation_ = "configuring the connection";
  const auto give_up =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(busy_timeout_ms_);
  for (int attempt = 0;; ++attempt) {
    Status status = body();
    if (status.code() != StatusCode::kBusy ||
        (attempt >= max_busy_retries_ && std::chrono::steady_clock::now() >= give_up)) {
      return status;
    }
    Backoff(attempt);
  }
}

Status Db::Transact(TxMode mode, std::string_view operation,
                    const std::function<Status(Tx&)>& body) {
  std::lock_guard<std::mutex> lock(mu_);
  operation_ = std::string(operation);
  for (int attempt = 0;; ++attempt) {
    Status status = RunOnce(mode, operation, body);
    if (status.code() != StatusCode::kBusy || attempt >= max_busy_retries_) return status;
    Backoff(attempt);
  }
}

Status Db::RunOnce(TxMode mode, std::string_view operation,
                   const std::function<Status(Tx&)>& body) {
  QL_RETURN_IF_ERROR(ExecControl(mode == TxMode::kWrite ? "BEGIN IMMEDIATE" : "BEGIN", operation,
                                 SqlitePhase::kStatement));
  Tx tx;
  Status status = body(tx);
  if (!status.ok() || tx.rollback_only()) {
    RollbackIfActive();
    return status;
  }
  Status commit = ExecControl("COMMIT", operation, SqlitePhase::kCommit);
  // A busy COMMIT leaves the transaction open; nothing was written, so roll back and rerun.
  if (!commit.ok()) RollbackIfActive();
  return commit;
}

Status Db::ExecControl(std::string_view sql, std::string_view operation, SqlitePhase phase) {
  QL_ASSIGN_OR_RETURN(Stmt stmt, Prepare(sql));
  if (stmt.bind_error_ == 0) {
    const int rc = sqlite3_step(stmt.stmt_);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
      return StatusFromSqlite(rc, ErrorMessage(), operation, phase);
    }
  }
  return Status();
}

void Db::RollbackIfActive() {
  if (sqlite3_get_autocommit(handle_) != 0) return;  // SQLite already rolled back
  (void)ExecControl("ROLLBACK", "rolling back", SqlitePhase::kStatement);
}

Result<Stmt> Db::Prepare(std::string_view sql) {
  auto it = cache_.find(std::string(sql));
  if (it != cache_.end() && !it->second->in_use) {
    it->second->in_use = true;
    return Stmt(this, it->second->stmt, &it->second->in_use);
  }
  sqlite3_stmt* stmt = nullptr;
  const unsigned flags = it == cache_.end() ? SQLITE_PREPARE_PERSISTENT : 0;
  const int rc =
      sqlite3_prepare_v3(handle_, sql.data(), static_cast<int>(sql.size()), flags, &stmt, nullptr);
  if (rc != SQLITE_OK) {
    return StatusFromSqlite(rc, ErrorMessage(), operation_);
  }
  if (it != cache_.end()) return Stmt(this, stmt, nullptr);  // nested use: owned, finalized
  auto entry = std::make_unique<CachedStatement>();
  entry->stmt = stmt;
  entry->in_use = true;
  bool* in_use = &entry->in_use;
  cache_.emplace(std::string(sql), std::move(entry));
  return Stmt(this, stmt, in_use);
}

Status Db::ExecScript(std::string_view sql, std::string_view operation) {
  const std::string text(sql);
  char* error = nullptr;
  const int rc = sqlite3_exec(handle_, text.c_str(), nullptr, nullptr, &error);
  if (rc == SQLITE_OK) return Status();
  const std::string detail = error != nullptr ? error : sqlite3_errstr(rc);
  sqlite3_free(error);
  return StatusFromSqlite(rc, detail, operation);
}

Result<std::string> Db::QueryText(std::string_view sql, std::string_view operation) {
  sqlite3_stmt* raw = nullptr;
  const int rc =
      sqlite3_prepare_v2(handle_, sql.data(), static_cast<int>(sql.size()), &raw, nullptr);
  if (rc != SQLITE_OK) return StatusFromSqlite(rc, ErrorMessage(), operation);
  Stmt stmt(this, raw, nullptr);
  QL_ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return std::string();
  return stmt.Text(0);
}

int64_t Db::Changes() const { return sqlite3_changes(handle_); }

void Db::ReleaseMemory() {
  std::lock_guard<std::mutex> lock(mu_);
  ::sqlite3_db_release_memory(handle_);
}

std::string Db::ErrorMessage() const { return sqlite3_errmsg(handle_); }

}  // namespace ql::sqlite
