#pragma once

// Internal to the PostgreSQL adapter: database URL policy, one libpq connection with its
// prepared-statement cache, a bounded pool, the transaction runner with bounded whole-transaction
// retry, typed fail-closed decoding, and the one function that maps SQLSTATE to Status. No libpq
// type appears here; <libpq-fe.h> stays in the .cc files, and nothing outside storage/postgres
// includes this header.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ql/core/status.h"

struct pg_conn;
struct pg_result;

namespace ql::pg {

// ---------------------------------------------------------------------------------------------
// Database URLs

// The environment variable that allows a URL without verified TLS (sslmode disable, allow,
// prefer or require); only the exact value "true" allows it.
inline constexpr char kAllowInsecureEnv[] = "QL3_POSTGRES_ALLOW_INSECURE";

// Returns true when kAllowInsecureEnv is "true".
bool InsecureAllowedByEnvironment();

// Checks a PostgreSQL URL or key=value connection string and returns it with sslmode made
// explicit: a URL without sslmode gets verify-full; verify-full and verify-ca are accepted; any
// weaker mode is InvalidArgument `insecure_database_url` unless `allow_insecure`. A string
// libpq cannot parse is InvalidArgument `invalid_database_url`. Messages never quote the URL.
Result<std::string> CheckDatabaseUrl(const std::string& url, bool allow_insecure);

// Returns the user name the URL connects as ("" when it names none).
std::string DatabaseUrlUser(const std::string& url);

// ---------------------------------------------------------------------------------------------
// Errors

// Where a failing call came from; a connection lost after COMMIT was sent leaves the outcome
// unknown.
enum class PgPhase { kConnect, kStatement, kCommit };

// Maps an error to a Status: the single place that reads SQLSTATE and constraint names.
//   40001 serialization_failure, 40P01 deadlock   → Busy `serialization_failure` /
//                                                   `deadlock_detected` (Transact retries these)
//   55P03 lock_not_available, 57014 query_canceled → Busy `lock_timeout` / `statement_timeout`
//   23505 unique_violation, 23503 foreign_key_violation, 23514 check_violation: by constraint
//         name, one rule per constraint of schema_contract.txt — Duplicate
//         (`idempotency_key_duplicate`, `dedupe_key_duplicate`, `slug_duplicate`,
//         `name_duplicate`, `duplicate_id`), Conflict (`mutation_id_reused`,
//         `revision_conflict`, `fence_conflict`, `log_offset_mismatch`, `migration_conflict`),
//         NotFound `reference_not_found`, InvalidArgument `constraint_violated` /
//         `invalid_credential_name`, Corrupt `capability_invalid`; a constraint without a rule
//         → Corrupt `unknown_constraint`. The message names the constraint.
//   23502 not_null, 22xxx data                    → InvalidArgument `constraint_violated` /
//                                                   `value_too_large`
//   QL001 (immutable row trigger)                 → Conflict `row_immutable`
//   QL002 (purge of an unfinished run's rows)     → Conflict `run_not_finished`
//   class 08, 57P01..57P03, no SQLSTATE with the connection gone → Unavailable
//         `database_unavailable`, or OutcomeUnknown `commit_outcome_unknown` in phase kCommit
//   25006 read_only_sql_transaction               → Unavailable `database_read_only`
//   42501 insufficient_privilege                  → Internal `insufficient_privilege`
//   anything else                                 → Internal `database_error`
// `operation` names the work; messages quote neither SQL nor parameters.
Status StatusFromPg(std::string_view sqlstate, std::string_view constraint, bool connection_lost,
                    std::string_view operation, PgPhase phase);

// ---------------------------------------------------------------------------------------------
// Diagnostics

// Receives one line per notice the server or libpq reports outside a statement's result (a
// NOTICE or WARNING raised by a statement, the FATAL a server sends before it ends a session):
// "postgres: SEVERITY SQLSTATE: primary message", never a DETAIL line, a URL or a parameter.
// Called on the thread that is using the connection.
using NoticeSink = std::function<void(const std::string& line)>;

// Installs the process-wide sink for every connection opened afterwards; nullptr restores the
// default, which writes each line to stderr. libpq never prints to stderr itself.
void SetNoticeSink(NoticeSink sink);

// ---------------------------------------------------------------------------------------------
// Parameters and rows

// One query parameter in text form; empty = NULL. Never logged. A binary parameter (PBytes)
// carries raw bytes sent in binary format instead.
struct Param {
  std::optional<std::string> text;
  bool binary = false;
};
Param P(int64_t value);
inline Param P(int value) { return P(static_cast<int64_t>(value)); }
Param P(bool value);
Param P(std::string_view value);
inline Param P(const std::string& value) { return P(std::string_view(value)); }
inline Param P(const char* value) { return P(std::string_view(value)); }
inline Param P(std::nullopt_t) { return Param{}; }
template <typename T>
Param P(const std::optional<T>& value) {
  return value.has_value() ? P(*value) : Param{};
}

// A bytea parameter sent as its raw bytes in binary format: no escaping, no hex text twice its
// size. Cast it in SQL ($1::bytea).
Param PBytes(std::string_view bytes);

// A one-dimensional array parameter in PostgreSQL's text form ({"a","b",NULL}); cast it in SQL
// ($1::text[], $2::bigint[], ...). Every element is quoted and escaped.
Param PArray(const std::vector<std::optional<std::string>>& elements);

// Largest magnitude an integer column may hold; larger values fail closed as Corrupt.
inline constexpr int64_t kMaxSafeInteger = 9'007'199'254'740'991;  // 2^53 - 1

// How a statement's result columns come back: as text, or in binary format (for bytea results:
// their raw bytes, not hex text twice their size). Only Bytes reads a binary column; the other
// getters fail closed on one.
enum class ResultFormat { kText, kBinary };

// The rows of one statement. Typed getters check the column type, nullability and range; on
// the first mismatch they record Corrupt (`decode_drift` / `integer_out_of_range`) and return a
// default value, so a caller decodes every row and then checks Status() once.
class Rows {
 public:
  explicit Rows(pg_result* result, std::string operation);
  Rows(Rows&& other) noexcept;
  Rows& operator=(Rows&& other) noexcept;
  Rows(const Rows&) = delete;
  Rows& operator=(const Rows&) = delete;
  ~Rows();

  int size() const;
  bool empty() const { return size() == 0; }
  // Rows changed by INSERT / UPDATE / DELETE.
  int64_t affected() const;

  bool IsNull(int row, int column) const;
  int64_t Int(int row, int column) const;  // int2, int4 or int8
  std::optional<int64_t> OptInt(int row, int column) const;
  bool Bool(int row, int column) const;
  std::string Text(int row, int column) const;  // text, varchar, name, uuid
  std::optional<std::string> OptText(int row, int column) const;
  std::string Bytes(int row, int column) const;  // bytea, decoded (text or binary format)

  // Ok, or the first decoding fault recorded by a getter.
  const Status& status() const { return status_; }
  // Fails closed with Corrupt `row_count_drift` unless there are exactly `n` rows.
  Status ExpectRows(int n) const;

 private:
  void Fail(std::string reason, std::string message) const;
  bool CheckCell(int row, int column, std::initializer_list<unsigned> oids, bool nullable,
                 bool binary_ok = false) const;

  pg_result* result_;
  std::string operation_;
  mutable Status status_;
};

// ---------------------------------------------------------------------------------------------
// Connections

// Session settings applied to every connection (a pool sets the three bounds once per session).
struct SessionOptions {
  std::string application_name = "qinglong";
  int connect_timeout_s = 5;
  int statement_timeout_ms = 5000;
  int lock_timeout_ms = 2000;
  int idle_in_transaction_timeout_ms = 10000;
};

// One statement of a pipeline (Connection::Prefetch).
struct Statement {
  std::string sql;
  std::vector<Param> params;
  ResultFormat results = ResultFormat::kText;
};

// One libpq connection: UTC session, search_path ql3, the application name; statements run
// through a per-connection prepared-statement cache.
class Connection {
 public:
  // Connects; Unavailable `database_unavailable` when the server cannot be reached or refuses
  // the login (the message carries libpq's reason, never the URL).
  static Result<std::unique_ptr<Connection>> Open(const std::string& url,
                                                  const SessionOptions& options);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Runs one parameterised statement (prepared once per connection).
  Result<Rows> Exec(std::string_view sql, const std::vector<Param>& params,
                    std::string_view operation, PgPhase phase = PgPhase::kStatement,
                    ResultFormat results = ResultFormat::kText);
  // Runs `statements` now, in order, in one round trip (libpq's pipeline mode), and keeps their
  // results for the Exec calls that ask for the same statements with the same parameters next,
  // in the same order: a sequence of statements whose texts and parameters are known up front
  // costs one round trip instead of one each, and the code that runs them stays as it is. The
  // server runs them exactly as if they had been sent one by one; a failing one aborts those
  // after it. An Exec that asks for anything else drops what is kept (reporting the first
  // failure among it, if any, since the transaction is then aborted) and runs normally.
  void Prefetch(const std::vector<Statement>& statements, std::string_view operation);
  // Opens a transaction with `statements` (BEGIN and its SET LOCALs, without parameters) sent
  // ahead of the first statement that follows, in the same round trip; ExecScript sends them on
  // their own first. Until then nothing is open on the server: BeginPending() is true and
  // ForgetPendingBegin() drops them.
  void BeginWithNextStatement(std::vector<std::string> statements);
  bool BeginPending() const { return !pending_begin_.empty(); }
  void ForgetPendingBegin() { pending_begin_.clear(); }
  // Runs a script of statements without parameters (migrations, transaction control).
  Status ExecScript(std::string_view sql, std::string_view operation,
                    PgPhase phase = PgPhase::kStatement);
  // True while the socket is up and no transaction is open.
  bool Reusable() const;
  // For an idle connection: false when the server has ended it meanwhile (a restart, a failover,
  // a terminated backend), which libpq only notices on the next use. Reads what the server sent
  // (its goodbye, or a notice) without waiting.
  bool StillOpen();
  bool InTransaction() const;
  // The server's process id (for tests that terminate a backend).
  int BackendPid() const;

  std::chrono::steady_clock::time_point last_used;

 private:
  explicit Connection(pg_conn* conn);
  Status ErrorStatus(pg_result* result, std::string_view operation, PgPhase phase) const;

  // Returns the prepared statement's name of `sql`, preparing it first when this connection has
  // not.
  Result<std::string> PreparedName(const std::string& sql, size_t params,
                                   std::string_view operation, PgPhase phase);
  // Sends a pending BEGIN on its own (simple query protocol).
  Status FlushPendingBegin(std::string_view operation);

  struct Prefetched {
    std::string key;  // the statement and its parameters (PrefetchKey)
    Result<Rows> rows;
  };

  pg_conn* conn_;
  std::unordered_map<std::string, std::string> prepared_;  // sql → statement name
  std::deque<Prefetched> prefetched_;                       // in the order they were sent
  std::vector<std::string> pending_begin_;                  // BeginWithNextStatement
};

// ---------------------------------------------------------------------------------------------
// Transactions

enum class Isolation { kReadCommitted, kRepeatableRead, kSerializable };

struct TxOptions {
  Isolation isolation = Isolation::kReadCommitted;
  bool read_only = false;
  // false: COMMIT returns before the WAL is flushed (`synchronous_commit = off` for this
  // transaction only). Only for writes whose loss in a crash is harmless by design.
  bool durable_commit = true;
  // true: prepared statements run as generic plans (`plan_cache_mode = force_generic_plan` for
  // this transaction), planned once per connection. For statements whose plan does not depend
  // on their parameters and costs more to make than to run.
  bool generic_plans = false;
  // true: the planner keeps away from sequential scans (`enable_seqscan = off` for this
  // transaction). For SERIALIZABLE transactions that reach rows by address or key: a sequential
  // scan predicate-locks the whole table, and then every concurrent write to it is a conflict.
  bool keyed_access = false;
};

// Handed to a transaction body: runs statements on the transaction's connection.
class Tx {
 public:
  explicit Tx(Connection& conn, std::string_view operation) : conn_(conn), operation_(operation) {}
  Result<Rows> Exec(std::string_view sql, const std::vector<Param>& params = {},
                    ResultFormat results = ResultFormat::kText);
  // Connection::Prefetch on the transaction's connection.
  void Prefetch(const std::vector<Statement>& statements) {
    conn_.Prefetch(statements, operation_);
  }
  // Makes the runner roll back although the body succeeded.
  void RollbackOnly() { rollback_only_ = true; }
  bool rollback_only() const { return rollback_only_; }
  Connection& connection() { return conn_; }

 private:
  Connection& conn_;
  std::string_view operation_;
  bool rollback_only_ = false;
};

// A fault injected at the adapter boundary (tests only): called after COMMIT succeeded; a
// non-ok return is reported instead of success, as if the reply had been lost.
using CommitFault = std::function<Status(std::string_view operation)>;

struct PoolOptions {
  std::string url;  // checked by CheckDatabaseUrl
  SessionOptions session;
  int min_connections = 0;
  int max_connections = 4;
  int acquire_timeout_ms = 5000;
  int idle_lifetime_ms = 60'000;
  // Whole-transaction retry of serialization failures and deadlocks.
  int max_tx_attempts = 8;
  int max_tx_retry_ms = 2000;
};

// A bounded pool; one connection per business transaction.
class Pool {
 public:
  // Validates the options (InvalidArgument `invalid_pool_options`) and opens min_connections.
  static Result<std::unique_ptr<Pool>> Create(const PoolOptions& options);
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // Runs `body` in one transaction on one pooled connection and commits when it returns ok
  // (rolls back otherwise, or when it asked to). Serialization failures and deadlocks (in the
  // body or at COMMIT) roll back and rerun the whole body, up to max_tx_attempts in all and
  // within max_tx_retry_ms, then Unavailable `retry_exhausted`. A READ ONLY transaction
  // (options.read_only) whose COMMIT reply was lost wrote nothing, so it is rerun the same way
  // instead of reported; once the bounds are spent it is Unavailable `database_unavailable`.
  // Nothing else is retried; a connection lost after COMMIT of a read-write transaction was
  // sent is OutcomeUnknown. Acquire timeout → Unavailable
  // `pool_acquire_timeout`; a closed pool → Unavailable `pool_closed`.
  Status Transact(const TxOptions& options, std::string_view operation,
                  const std::function<Status(Tx&)>& body);

  // Runs `body` on a pooled connection outside any transaction (catalog reads, advisory work).
  Status WithConnection(std::string_view operation, const std::function<Status(Connection&)>& body);

  // Closes idle connections and refuses new work; waits for borrowed connections to return,
  // at most `wait_ms`.
  void Close(int wait_ms = 10'000);

  // How many whole-transaction retries happened (serialization failures, deadlocks, lost COMMIT
  // replies of read-only transactions).
  int64_t retries() const;
  // How many idle connections were found ended by the server (restart, failover, a terminated
  // backend) when about to be handed out, and replaced.
  int64_t ended_idle_connections() const;
  int open_connections() const;
  const PoolOptions& options() const { return options_; }

  void SetCommitFaultForTesting(CommitFault fault);

 private:
  explicit Pool(PoolOptions options);
  Result<std::unique_ptr<Connection>> Acquire(std::string_view operation);
  void Release(std::unique_ptr<Connection> conn);
  Status RunOnce(Connection& conn, const TxOptions& options, std::string_view operation,
                 const std::function<Status(Tx&)>& body);

  PoolOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Connection>> idle_;
  int open_ = 0;
  bool closed_ = false;
  int64_t retries_ = 0;
  int64_t ended_idle_ = 0;
  CommitFault commit_fault_;
};

}  // namespace ql::pg
