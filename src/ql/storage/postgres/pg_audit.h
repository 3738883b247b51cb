#pragma once

// The readiness auditor: before a replica opens any repository, timer or HTTP admission, and
// again periodically while it serves, it proves — read-only, as the runtime role — that the
// database is exactly what the code expects. Six gates in order, the first failure wins:
//   1. server_in_recovery          the server is a standby (pg_is_in_recovery());
//      server_read_only            default_transaction_read_only or transaction_read_only is on;
//      server_version_unsupported  a major version outside 15..18;
//   2. migration_history_invalid   the history is not exactly the code's postgresql-main stream;
//   3. capability_invalid          the control-core capability row is not exactly the code's;
//   4. schema_contract_invalid     the catalog of schema ql3 (relations, columns and types,
//                                  indexes, constraints, triggers, functions, rules, row-level
//                                  security and its policies, relation storage options) differs
//                                  from schema_contract.txt: a missing or an extra object is drift;
//   5. runtime_role_invalid        the role is a superuser, the migration role, an owner, a
//                                  member of another role, may create objects anywhere, or holds
//                                  one privilege too many or too few on a ql3 object (and so for
//                                  ql3_worker_ingress's privileges);
//   6. admin_role_invalid          ql3_admin fails the same checks against its own grants
//                                  (grants.sql).
// CheckPredicateLockRoom reports predicate_lock_room_insufficient for SERIALIZABLE admission.
// CheckConnectedRole adds admin_role_invalid / worker_role_invalid for a configured URL that
// does not log in as its role. Messages name the object or privilege at fault and never a URL,
// password or parameter.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ql/core/migration_stream.h"
#include "ql/core/status.h"
#include "ql/storage/postgres/pg_client.h"

namespace ql::pg {

inline constexpr std::string_view kServerInRecovery = "server_in_recovery";
inline constexpr std::string_view kServerReadOnly = "server_read_only";
inline constexpr std::string_view kServerVersionUnsupported = "server_version_unsupported";
inline constexpr std::string_view kMigrationHistoryInvalid = "migration_history_invalid";
inline constexpr std::string_view kCapabilityInvalid = "capability_invalid";
inline constexpr std::string_view kSchemaContractInvalid = "schema_contract_invalid";
inline constexpr std::string_view kRuntimeRoleInvalid = "runtime_role_invalid";
inline constexpr std::string_view kAdminRoleInvalid = "admin_role_invalid";
inline constexpr std::string_view kWorkerRoleInvalid = "worker_role_invalid";
inline constexpr std::string_view kMigrationRoleInvalid = "migration_role_invalid";
inline constexpr std::string_view kPredicateLockRoomInsufficient =
    "predicate_lock_room_insufficient";

// The predicate-lock room a SERIALIZABLE admission of up to 256 claimed rows needs so that it
// locks tuples, not whole pages or tables (docs/design-notes.md, Isolation): the server's
// max_pred_locks_per_transaction, its effective max_pred_locks_per_relation (a negative value
// v means max_pred_locks_per_transaction / -v) and max_pred_locks_per_page, at least.
inline constexpr int64_t kMinPredLocksPerTransaction = 1024;
inline constexpr int64_t kMinPredLocksPerRelation = 512;
inline constexpr int64_t kMinPredLocksPerPage = 128;

// Supported server majors (server_version_num 150000 .. 189999).
inline constexpr int64_t kMinServerVersionNum = 150000;
inline constexpr int64_t kMaxServerVersionNum = 189999;

// Gate 1's version part: Corrupt `server_version_unsupported` outside the supported majors.
Status CheckServerVersion(int64_t server_version_num);

// Runs the six gates on `conn` (the runtime role's connection). Ok means ready. A failed gate
// is Corrupt with the gate's code as reason; a database error is returned as mapped (e.g.
// Unavailable). Nothing is written: the gates after the first run in one READ ONLY transaction
// that is rolled back.
Status AuditReadiness(Connection& conn);

// Gate 2 against `stream` (AuditReadiness passes the compiled one): Corrupt
// `migration_history_invalid` when the history is not exactly `stream`, naming the history
// fault, or the first pending migration and how many are pending — and, for the prepare half
// of a pair that a migrator started and did not finish, when it started and how many of its
// statements ran (its marker). A database error as mapped.
Status CheckMigrationHistory(Connection& conn, const MigrationStream& stream);

// Checks that `conn` is logged in (current and session user) as `role`; Corrupt `code` naming
// both roles otherwise, a database error as mapped.
Status CheckConnectedRole(Connection& conn, std::string_view role, std::string_view code);

// The server's predicate-lock settings (per_relation as configured: negative means a fraction).
struct PredicateLockSettings {
  int64_t per_transaction = 0;
  int64_t per_relation_setting = 0;
  int64_t per_page = 0;
  // The tuple and page locks one transaction may hold on one relation before PostgreSQL
  // replaces them by a lock on the whole relation.
  int64_t PerRelation() const;
};

Result<PredicateLockSettings> ReadPredicateLockSettings(Connection& conn);

// Checks predicate-lock settings against the minimums above: Corrupt
// `predicate_lock_room_insufficient` naming each setting that falls short, its value and the
// value needed.
Status PredicateLockRoomVerdict(const PredicateLockSettings& settings);

// Reads the server's settings and checks them (PredicateLockRoomVerdict); a database error as
// mapped.
Status CheckPredicateLockRoom(Connection& conn);

// The largest admission batch whose predicate locks stay below the relation threshold of
// `settings` (half of it: the rows, plus the index pages a batch reads): `wanted` when the
// settings have the room above.
int ClaimsWithinPredicateLockRoom(const PredicateLockSettings& settings, int wanted);

// Returns the catalog of schema ql3 as sorted lines (what gate 4 compares).
Result<std::vector<std::string>> ReadSchemaCatalog(Connection& conn);

// Returns the lines of schema_contract.txt (sorted, no blanks).
std::vector<std::string> ExpectedSchemaCatalog();

// The exact table privileges of the runtime role: "table: PRIV,PRIV" in table order.
std::vector<std::string> ExpectedRuntimePrivileges();

// The URLs a replica is configured with; admin and worker may be empty (not configured).
struct ReadinessUrls {
  std::string runtime;
  std::string admin;
  std::string worker;
};

// Readiness as a living signal: each Check() runs the whole audit as the runtime role and checks
// that the admin and worker-ingress URLs (when configured) log in as ql3_admin and
// ql3_worker_ingress. It keeps one connection per URL of its own (outside any pool, so a busy
// pool cannot make it fail) and opens a fresh one whenever the last check lost it, so a check
// after a reconnect always audits the database it reconnected to. Not thread-safe.
class ReadinessProbe {
 public:
  ReadinessProbe(ReadinessUrls urls, std::string application_name);
  ~ReadinessProbe();

  // Returns Ok when ready; Corrupt with an audit code (server_in_recovery, server_read_only,
  // schema_contract_invalid, admin_role_invalid, worker_role_invalid, ...) when the database is
  // reachable but not ready; Unavailable `database_unavailable` when a URL cannot be reached.
  Status Check();

  // The predicate-lock settings, read on the runtime connection. Not part of Check: a replica
  // admits under SERIALIZABLE without the room too, in smaller batches
  // (PredicateLockRoomVerdict, ClaimsWithinPredicateLockRoom).
  Result<PredicateLockSettings> ReadPredicateLocks();

 private:
  // Runs `check` on `conn`, opening it first when needed; drops it after any failure that is
  // not an audit verdict.
  Status On(std::unique_ptr<Connection>& conn, const std::string& url,
            const std::function<Status(Connection&)>& check);

  ReadinessUrls urls_;
  SessionOptions session_;
  std::unique_ptr<Connection> runtime_;
  std::unique_ptr<Connection> admin_;
  std::unique_ptr<Connection> worker_;
};

}  // namespace ql::pg
