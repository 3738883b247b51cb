#pragma once

// Internal to the SQLite adapter: one connection with its prepared-statement cache, the
// transaction runner with bounded busy retry, and the one function that maps SQLite result
// codes to Status. No SQLite type appears here; <sqlite3.h> stays in the .cc files.

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "ql/core/status.h"

struct sqlite3;
struct sqlite3_stmt;

namespace ql::sqlite {

// Where a failing result code came from; a failed COMMIT may leave the outcome unknown.
enum class SqlitePhase { kOpen, kStatement, kCommit };

// Maps a SQLite (extended) result code to a Status. The single place that does so:
//   BUSY, LOCKED, PROTOCOL            → Busy `store_busy`
//   CONSTRAINT_UNIQUE / PRIMARYKEY    → Duplicate, reason by unique index:
//                                       `idempotency_key_duplicate`, `dedupe_key_duplicate`,
//                                       `slug_duplicate`, `principal_name_duplicate`,
//                                       `name_duplicate` (a live task or trigger name),
//                                       `channel_name_duplicate`, else `duplicate_id`; a reused
//                                       mutation id is Conflict `mutation_id_reused`
//   CONSTRAINT_FOREIGNKEY             → NotFound `reference_not_found`
//   CONSTRAINT_TRIGGER                → Conflict `row_immutable` (append-only tables)
//   other CONSTRAINT, TOOBIG, RANGE   → InvalidArgument `constraint_violated` / `value_too_large`
//   CORRUPT, NOTADB                   → Corrupt `database_corrupt`
//   IOERR at COMMIT                   → OutcomeUnknown `commit_outcome_unknown`
//   IOERR, FULL, CANTOPEN, READONLY, PERM, AUTH, NOMEM, INTERRUPT → Unavailable (one reason each)
//   anything else                     → Internal `sqlite_error`
// `detail` is sqlite3_errmsg; it is used to tell unique indexes apart and is only quoted in
// Internal messages, so no constraint or column name reaches a caller otherwise.
Status StatusFromSqlite(int code, std::string_view detail, std::string_view operation,
                        SqlitePhase phase = SqlitePhase::kStatement);

class Db;

// A prepared statement borrowed from the connection's cache. Destroying it resets the
// statement and clears its bindings. Bind errors are reported by the next Step / Run.
class Stmt {
 public:
  Stmt(Stmt&& other) noexcept;
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  Stmt& operator=(Stmt&&) = delete;
  ~Stmt();

  Stmt& Bind(int index, int64_t value);
  Stmt& Bind(int index, int value) { return Bind(index, static_cast<int64_t>(value)); }
  Stmt& Bind(int index, bool value) { return Bind(index, static_cast<int64_t>(value ? 1 : 0)); }
  Stmt& Bind(int index, std::string_view value);
  Stmt& Bind(int index, const std::string& value) { return Bind(index, std::string_view(value)); }
  Stmt& Bind(int index, const char* value) { return Bind(index, std::string_view(value)); }
  Stmt& Bind(int index, std::nullopt_t);
  // Binds bytes as a BLOB (Bind of a string binds TEXT).
  Stmt& BindBlob(int index, std::string_view bytes);
  template <typename T>
  Stmt& Bind(int index, const std::optional<T>& value) {
    return value.has_value() ? Bind(index, *value) : Bind(index, std::nullopt);
  }
  // Binds `values` to parameters 1, 2, ... in order.
  template <typename... T>
  Stmt& BindAll(const T&... values) {
    int index = 0;
    (Bind(++index, values), ...);
    return *this;
  }

  // Steps once. Returns true when a row is available, false when the statement is done.
  Result<bool> Step();
  // Steps to completion, discarding rows (for INSERT / UPDATE).
  Status Run();

  bool IsNull(int column) const;
  int64_t Int(int column) const;
  bool Bool(int column) const { return Int(column) != 0; }
  std::string Text(int column) const;
  // The bytes of a BLOB (or TEXT) column.
  std::string Blob(int column) const;
  std::optional<int64_t> OptInt(int column) const;
  std::optional<std::string> OptText(int column) const;

 private:
  friend class Db;
  Stmt(Db* db, sqlite3_stmt* stmt, bool* in_use);

  Db* db_;
  sqlite3_stmt* stmt_;
  bool* in_use_;  // the cache slot's flag; nullptr when this statement is owned and finalized
  int bind_error_ = 0;
};

// Steps `s` to its end, handing every row to `row`.
template <typename Row>
Status EachRow(Stmt& s, Row row) {
  while (true) {
    QL_ASSIGN_OR_RETURN(bool more, s.Step());
    if (!more) return Status::Ok();
    row(s);
  }
}

enum class TxMode { kRead, kWrite };

// Handed to a transaction body.
class Tx {
 public:
  // Makes the runner roll back although the body succeeded (a decision that writes nothing).
  void RollbackOnly() { rollback_only_ = true; }
  bool rollback_only() const { return rollback_only_; }

 private:
  bool rollback_only_ = false;
};

// One SQLite connection used by several threads: every use holds the connection mutex.
class Db {
 public:
  // Opens `path` read-write, creating the file when absent, with extended result codes, the
  // busy timeout and defensive mode set. Unavailable `database_cannot_open` (or the mapped
  // code) when the file cannot be opened.
  static Result<std::unique_ptr<Db>> Open(const std::string& path, int busy_timeout_ms,
                                          int max_busy_retries);
  ~Db();
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  // Runs `body` in one transaction (BEGIN IMMEDIATE for kWrite, BEGIN for kRead) holding the
  // connection mutex, and commits when it returns ok (rolls back otherwise, or when it asked
  // to). A Busy outcome (lock not acquired within the busy timeout, or a busy COMMIT) rolls
  // back and reruns the whole body up to max_busy_retries more times with a short backoff,
  // then returns Busy. Nothing else is retried: a Conflict or an unknown COMMIT outcome is
  // returned as is. `operation` names the work in error messages.
  Status Transact(TxMode mode, std::string_view operation, const std::function<Status(Tx&)>& body);

  // Runs `body` holding the connection mutex outside any transaction (for pragmas that cannot
  // run inside one). SQLite answers some lock requests Busy at once instead of waiting (a
  // journal-mode change while another connection migrates, to avoid a deadlock), so a Busy body
  // is run again after a short backoff until the busy timeout has passed: `body` must be
  // idempotent.
  Status WithConnection(const std::function<Status()>& body);

  // The calls below require the connection mutex (inside Transact or WithConnection).

  // Returns the cached prepared statement for `sql`; a fresh uncached one when the cached
  // statement is in use by an enclosing caller.
  Result<Stmt> Prepare(std::string_view sql);
  // Executes a script of one or more statements (migrations, pragmas) without caching.
  Status ExecScript(std::string_view sql, std::string_view operation);
  // Returns the first column of the first row of `sql` as text ("" when NULL or no row).
  Result<std::string> QueryText(std::string_view sql, std::string_view operation);
  // Returns the number of rows changed by the last INSERT / UPDATE / DELETE.
  int64_t Changes() const;
  // Returns the last error message of the connection.
  std::string ErrorMessage() const;

  // Frees the page cache pages no statement holds (after migrations, which read every page);
  // takes the connection mutex itself.
  void ReleaseMemory();

 private:
  friend class Stmt;
  struct CachedStatement {
    sqlite3_stmt* stmt = nullptr;
    bool in_use = false;
  };

  Db(sqlite3* handle, int busy_timeout_ms, int max_busy_retries);
  Status RunOnce(TxMode mode, std::string_view operation, const std::function<Status(Tx&)>& body);
  Status ExecControl(std::string_view sql, std::string_view operation, SqlitePhase phase);
  void RollbackIfActive();

  std::mutex mu_;
  sqlite3* handle_;
  int busy_timeout_ms_;
  int max_busy_retries_;
  std::string operation_;  // names the running work in statement error messages
  std::unordered_map<std::string, std::unique_ptr<CachedStatement>> cache_;
};

}  // namespace ql::sqlite
