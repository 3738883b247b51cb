#include "ql/storage/postgres/pg_migrations.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ql::pg {
namespace {

constexpr std::string_view kGrantsId = "grants";

// Statement bounds of migration transactions: DDL may legitimately run long, lock waits not.
SessionOptions MigrationSession(SessionOptions session) {
  session.application_name = "qinglong-migrate";
  session.statement_timeout_ms = std::max(session.statement_timeout_ms, 600'000);
  return session;
}

std::string BeginSql(const SessionOptions& s) {
  return "BEGIN ISOLATION LEVEL READ COMMITTED READ WRITE; SET LOCAL statement_timeout = " +
         std::to_string(s.statement_timeout_ms) +
         "; SET LOCAL lock_timeout = " + std::to_string(s.lock_timeout_ms) +
         "; SET LOCAL idle_in_transaction_session_timeout = " +
         std::to_string(s.idle_in_transaction_timeout_ms);
}

Status CapabilityInvalid(std::string message) {
  return Corrupt("capability_invalid", std::move(message));
}

// The capability version a database with `applied` migrations must hold (nullptr: none yet).
const SchemaCapability* CapabilityAfter(std::span<const SchemaCapability> steps,
                                        const std::vector<std::string>& applied) {
  const SchemaCapability* want = nullptr;
  for (const SchemaCapability& step : steps) {
    for (const std::string& id : applied) {
      if (id == step.migration_id) want = &step;
    }
  }
  return want;
}

Status ApplyCapabilityStep(Connection& conn, const SchemaCapability& step) {
  if (step.version == 1) {
    return conn
        .Exec(
            "INSERT INTO ql3.schema_capabilities (name, version, capability_map, migration_id) "
            "VALUES ($1, 1, $2, $3)",
            {P(step.name), P(step.capability_map), P(step.migration_id)}, "write capability")
        .status();
  }
  QL_ASSIGN_OR_RETURN(
      Rows updated,
      conn.Exec("UPDATE ql3.schema_capabilities SET version = $2, capability_map = $3, "
                "migration_id = $4 WHERE name = $1 AND version = $5",
                {P(step.name), P(step.version), P(step.capability_map), P(step.migration_id),
                 P(step.version - 1)},
                "write capability"));
  if (updated.affected() != 1) {
    return CapabilityInvalid("capability " + std::string(step.name) + " is not at version " +
                             std::to_string(step.version - 1));
  }
  return Status::Ok();
}

// Takes the migration advisory lock with `try_lock_sql` (its transaction or session form);
// Busy `migration_lock_held` when another migrator holds it.
Status TryMigrationLock(Connection& conn, const char* try_lock_sql) {
  QL_ASSIGN_OR_RETURN(Rows lock,
                      conn.Exec(try_lock_sql, {P(kMigrationLockKey)}, "take the migration lock"));
  if (!lock.Bool(0, 0)) {
    QL_RETURN_IF_ERROR(lock.status());
    return Busy("migration_lock_held",
                "another migrator holds the migration lock; nothing was changed (retry when it "
                "has finished)");
  }
  return lock.status();
}

// The statements of a prepare migration, each sent on its own (a non-transactional statement
// cannot share a query string with another): each ends with ';' at the end of a line; blank
// lines and lines that start with "--" are dropped.
std::vector<std::string> PrepareStatements(std::string_view sql) {
  std::vector<std::string> out;
  std::string current;
  size_t start = 0;
  while (start < sql.size()) {
    size_t end = sql.find('\n', start);
    if (end == std::string_view::npos) end = sql.size();
    std::string_view line = sql.substr(start, end - start);
    start = end + 1;
    while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.remove_suffix(1);
    const size_t first = line.find_first_not_of(' ');
    if (first == std::string_view::npos || line.substr(first).starts_with("--")) continue;
    current += std::string(line) + "\n";
    if (line.back() == ';') {
      out.push_back(std::move(current));
      current.clear();
    }
  }
  if (current.find_first_not_of(" \n") != std::string::npos) out.push_back(std::move(current));
  return out;
}

// The marker of `prepare`, or nullopt when it has none.
Result<std::optional<MigrationMarker>> ReadMarker(Connection& conn, const Migration& prepare) {
  QL_ASSIGN_OR_RETURN(std::vector<MigrationMarker> markers, ReadMigrationMarkers(conn));
  for (MigrationMarker& marker : markers) {
    if (marker.id == prepare.id) return std::optional<MigrationMarker>(std::move(marker));
  }
  return std::optional<MigrationMarker>();
}

// InvalidArgument `migration_marker_missing` unless the marker table exists: a pair cannot run
// before the migration that creates it.
Status RequireMarkerTable(Connection& conn, const Migration& prepare) {
  QL_ASSIGN_OR_RETURN(
      Rows exists, conn.Exec("SELECT to_regclass('ql3.schema_migration_markers') IS NOT NULL", {},
                             "read migration markers"));
  const bool present = exists.Bool(0, 0);
  QL_RETURN_IF_ERROR(exists.status());
  if (!present) {
    return InvalidArgument("migration_marker_missing",
                           "prepare migration " + prepare.id +
                               " comes before ql3.schema_migration_markers exists; a pair "
                               "needs its marker table (pg-0025-migration-markers)");
  }
  return Status::Ok();
}

// Writes the history row of `m` and applies the capability steps that name it.
Status WriteHistory(Connection& conn, const MigrationStream& stream,
                    std::span<const SchemaCapability> steps, const Migration& m, int64_t now_ms) {
  QL_RETURN_IF_ERROR(
      conn.Exec("INSERT INTO ql3.schema_migrations (id, stream, dialect, checksum, "
                "applied_at_ms) VALUES ($1, $2, $3, $4, $5)",
                {P(m.id), P(stream.name), P(stream.dialect), P(m.checksum), P(now_ms)},
                "write migration history")
          .status());
  for (const SchemaCapability& step : steps) {
    if (step.migration_id == m.id) QL_RETURN_IF_ERROR(ApplyCapabilityStep(conn, step));
  }
  return Status::Ok();
}

// Runs the statements of `prepare` outside any transaction, each on its own, under the
// session-level migration lock (it excludes every migration transaction). With `marked` (a
// pair whose prepare migration has no history row) it first writes the pair's marker (a new
// row, or the old one restarted at zero statements) and counts each statement that completes;
// without (a prepare history row written before markers existed) it only runs them. Nothing
// happens when another migrator completed the pair meanwhile.
Status RunPrepared(Connection& conn, const MigrationStream& stream, const Migration& prepare,
                   bool marked, const SessionOptions& session, Clock& clock,
                   const MigrationFault& fault) {
  QL_RETURN_IF_ERROR(TryMigrationLock(conn, "SELECT pg_try_advisory_lock($1)"));
  auto body = [&]() -> Status {
    QL_ASSIGN_OR_RETURN(std::vector<HistoryRow> history, ReadHistory(conn));
    QL_ASSIGN_OR_RETURN(std::vector<const Migration*> pending, PendingMigrations(stream, history));
    const bool needed = marked ? !pending.empty() && pending.front()->id == prepare.id
                               : !history.empty() && history.back().id == prepare.id;
    if (!needed) return Status::Ok();
    const std::vector<std::string> statements = PrepareStatements(prepare.sql);
    if (marked) {
      QL_RETURN_IF_ERROR(
          conn.Exec("INSERT INTO ql3.schema_migration_markers (id, checksum, statements, "
                    "statements_run, started_at_ms, updated_at_ms) VALUES ($1, $2, $3, 0, $4, "
                    "$4) ON CONFLICT (id) DO UPDATE SET checksum = EXCLUDED.checksum, "
                    "statements = EXCLUDED.statements, statements_run = 0, "
                    "updated_at_ms = EXCLUDED.updated_at_ms",
                    {P(prepare.id), P(prepare.checksum), P(static_cast<int64_t>(statements.size())),
                     P(clock.NowMs())},
                    "mark migration " + prepare.id)
              .status());
      if (fault) QL_RETURN_IF_ERROR(fault("marked"));
    }
    QL_RETURN_IF_ERROR(conn.ExecScript(
        "SET statement_timeout = " + std::to_string(session.statement_timeout_ms) +
            "; SET lock_timeout = " + std::to_string(session.lock_timeout_ms),
        "bound migration " + prepare.id));
    for (size_t i = 0; i < statements.size(); ++i) {
      QL_RETURN_IF_ERROR(conn.ExecScript(statements[i], "migration " + prepare.id));
      if (marked) {
        QL_RETURN_IF_ERROR(
            conn.Exec("UPDATE ql3.schema_migration_markers SET statements_run = "
                      "$2, updated_at_ms = $3 WHERE id = $1",
                      {P(prepare.id), P(static_cast<int64_t>(i + 1)), P(clock.NowMs())},
                      "mark migration " + prepare.id)
                .status());
      }
      if (fault) QL_RETURN_IF_ERROR(fault("statement " + std::to_string(i + 1)));
    }
    if (fault) QL_RETURN_IF_ERROR(fault("prepared"));
    return conn.ExecScript("RESET statement_timeout; RESET lock_timeout",
                           "unbound migration " + prepare.id);
  };
  Status status = body();
  Result<Rows> unlock =
      conn.Exec("SELECT pg_advisory_unlock($1)", {P(kMigrationLockKey)}, "release the lock");
  if (!status.ok()) return status;
  return unlock.status();
}

// What one migration transaction asks its caller to do next.
struct StepOutcome {
  bool done = false;                       // nothing was pending: the grants were applied
  const Migration* run_prepare = nullptr;  // run these prepare statements first (nothing changed)
  bool marked = false;                     // ... counting them in the pair's marker
};

// One transaction: lock, check history, apply the next pending migration (or the grants when
// none is pending). A pair lands in one transaction — the prepare migration's history row, the
// commit migration with its history row and capability step, the marker deleted — but only
// once its statements ran in this call of MigrateStream (`prepared` names the prepare migration
// whose statements did); until then the step changes nothing and asks for them instead.
Status MigrateStep(Connection& conn, const MigrationStream& stream,
                   std::span<const SchemaCapability> steps, const SessionOptions& session,
                   Clock& clock, MigrateReport& report, const std::string& prepared,
                   StepOutcome& outcome) {
  QL_RETURN_IF_ERROR(conn.ExecScript(BeginSql(session), "begin migration"));
  const size_t applied_before = report.applied.size();
  auto body = [&]() -> Status {
    QL_RETURN_IF_ERROR(TryMigrationLock(conn, "SELECT pg_try_advisory_xact_lock($1)"));
    QL_ASSIGN_OR_RETURN(std::vector<HistoryRow> history, ReadHistory(conn));
    QL_ASSIGN_OR_RETURN(std::vector<const Migration*> pending, PendingMigrations(stream, history));
    std::vector<std::string> applied;
    for (const HistoryRow& row : history) applied.push_back(row.id);
    QL_ASSIGN_OR_RETURN(std::vector<CapabilityRow> capabilities, ReadCapabilities(conn));
    QL_RETURN_IF_ERROR(CheckCapability(capabilities, CapabilityAfter(steps, applied)));
    if (pending.empty()) {
      outcome.done = true;
      return conn.ExecScript(GrantsSql(), "apply grants");
    }
    const Migration& next = *pending.front();
    const int64_t now = clock.NowMs();
    if (IsPrepareMigration(next.id)) {
      QL_RETURN_IF_ERROR(RequireMarkerTable(conn, next));
      if (prepared != next.id) {
        outcome.run_prepare = &next;
        outcome.marked = true;
        return Status::Ok();
      }
      QL_ASSIGN_OR_RETURN(std::optional<MigrationMarker> marker, ReadMarker(conn, next));
      if (!marker.has_value() || marker->checksum != next.checksum ||
          marker->statements_run != marker->statements) {
        return Busy("migration_lock_held",
                    "another migrator restarted the statements of " + next.id +
                        " after this one ran them; nothing was changed (retry when it has "
                        "finished)");
      }
      const Migration& commit = *pending[1];  // ValidateStream: a commit follows its prepare
      QL_RETURN_IF_ERROR(WriteHistory(conn, stream, steps, next, now));
      QL_RETURN_IF_ERROR(conn.ExecScript(commit.sql, "migration " + commit.id));
      QL_RETURN_IF_ERROR(WriteHistory(conn, stream, steps, commit, now));
      QL_RETURN_IF_ERROR(conn.Exec("DELETE FROM ql3.schema_migration_markers WHERE id = $1",
                                   {P(next.id)}, "clear migration marker")
                             .status());
      report.applied.push_back(next.id);
      report.applied.push_back(commit.id);
      return Status::Ok();
    }
    if (IsCommitMigration(next.id)) {
      // Pending on its own only under a prepare history row written before markers existed
      // (that row was written before its statements ran): run them again first.
      const Migration& prepare = (&next)[-1];  // ValidateStream: a commit follows its prepare
      if (prepared != prepare.id) {
        outcome.run_prepare = &prepare;
        outcome.marked = false;
        return Status::Ok();
      }
    }
    QL_RETURN_IF_ERROR(conn.ExecScript(next.sql, "migration " + next.id));
    QL_RETURN_IF_ERROR(WriteHistory(conn, stream, steps, next, now));
    report.applied.push_back(next.id);
    return Status::Ok();
  };
  Status status = body();
  if (!status.ok() || outcome.run_prepare != nullptr) {
    if (conn.InTransaction()) (void)conn.ExecScript("ROLLBACK", "rollback migration");
    report.applied.resize(applied_before);
    return status;
  }
  Status commit = conn.ExecScript("COMMIT", "commit migration", PgPhase::kCommit);
  if (!commit.ok()) report.applied.resize(applied_before);
  return commit;
}

}  // namespace

const MigrationStream& PostgresMainStream() {
  static const MigrationStream* const kStream = [] {
    auto* stream = new MigrationStream;
    stream->name = std::string(kPostgresqlMainStream);
    stream->dialect = std::string(kPostgresqlDialect);
    for (const EmbeddedSql& file : EmbeddedMigrationFiles()) {
      if (!file.id.starts_with("pg-")) continue;
      stream->migrations.push_back(
          Migration{std::string(file.id), MigrationChecksum(file.sql), std::string(file.sql)});
    }
    return stream;
  }();
  return *kStream;
}

std::string_view GrantsSql() {
  for (const EmbeddedSql& file : EmbeddedMigrationFiles()) {
    if (file.id == kGrantsId) return file.sql;
  }
  return {};
}

std::span<const SchemaCapability> CapabilitySteps() {
  // Each version names what the schema can do once its migration has landed.
  static constexpr SchemaCapability kSteps[] = {
      {kControlCore, 1,
       R"({"attempts":1,"definitions":1,"events":1,"projects":1,"retry_policies":1,"runs":1})",
       "pg-0003-run-core"},
      {kControlCore, 2,
       R"({"attempts":1,"definitions":1,"events":1,"projects":1,"retry_policies":1,"runs":1,)"
       R"("schedule_claims":1,"schedules":1})",
       "pg-0004-trigger-schedules"},
      {kControlCore, 3,
       R"({"attempts":1,"definitions":1,"dispatch_leases":1,"events":1,"projects":1,)"
       R"("retry_policies":1,"runs":1,"schedule_claims":1,"schedules":1,"worker_credentials":1,)"
       R"("worker_sessions":1})",
       "pg-0005-worker-dispatch"},
      {kControlCore, 4,
       R"({"api_credentials":1,"attempts":1,"definitions":1,"dispatch_leases":1,"events":1,)"
       R"("projects":1,"retry_policies":1,"runs":1,"schedule_claims":1,"schedules":1,)"
       R"("worker_credentials":1,"worker_sessions":1})",
       "pg-0006-api-credentials"},
      {kControlCore, 5,
       R"({"api_credentials":1,"attempts":1,"definitions":1,"dispatch_leases":1,"events":1,)"
       R"("projects":1,"retry_policies":1,"run_logs":1,"runs":1,"schedule_claims":1,)"
       R"("schedules":1,"worker_credentials":1,"worker_sessions":1})",
       "pg-0007-run-logs"},
      {kControlCore, 6,
       R"({"api_credentials":1,"attempts":1,"definitions":1,"dispatch_leases":2,"events":1,)"
       R"("projects":1,"retry_policies":1,"run_logs":1,"runs":1,"schedule_claims":1,)"
       R"("schedules":1,"worker_credentials":1,"worker_sessions":1})",
       "pg-0008-worker-leases"},
      {kControlCore, 7,
       R"({"api_credentials":1,"attempts":1,"definitions":1,"dispatch_leases":2,"events":1,)"
       R"("projects":1,"retry_policies":1,"run_logs":1,"runs":1,"schedule_claims":2,)"
       R"("schedules":1,"worker_credentials":1,"worker_sessions":1})",
       "pg-0009-heap-only-claims"},
      {kControlCore, 8,
       R"({"attempts":1,"definitions":1,"dispatch_leases":2,"events":1,"governance":1,)"
       R"("projects":1,"retry_policies":1,"run_logs":1,"runs":1,"schedule_claims":2,)"
       R"("schedules":1,"worker_credentials":1,"worker_sessions":1})",
       "pg-0010-governance"},
      {kControlCore, 9,
       R"({"attempts":1,"definitions":1,"dispatch_leases":2,"events":1,"governance":1,)"
       R"("projects":1,"retry_policies":1,"run_logs":1,"runs":2,"schedule_claims":2,)"
       R"("schedules":1,"worker_credentials":1,"worker_sessions":1})",
       "pg-0011-cron-runs-carry-their-key"},
      {kControlCore, 10,
       R"({"approvals":1,"attempts":1,"definitions":1,"dispatch_leases":2,"events":1,)"
       R"("governance":1,"projects":1,"retry_policies":1,"run_logs":1,"runs":3,)"
       R"("schedule_claims":2,"schedules":1,"worker_credentials":1,"worker_sessions":1})",
       "pg-0012-approvals"},
      {kControlCore, 11,
       R"({"approvals":1,"attempts":1,"definitions":1,"dispatch_leases":2,"events":1,)"
       R"("governance":1,"projects":1,"retention":1,"retry_policies":1,"run_logs":1,"runs":3,)"
       R"("schedule_claims":2,"schedules":1,"worker_credentials":1,"worker_sessions":1})",
       "pg-0013-retention"},
      {kControlCore, 12,
       R"({"approvals":1,"attempts":1,"definitions":1,"dispatch_leases":2,"events":1,)"
       R"("governance":1,"projects":1,"retention":1,"retry_policies":1,"run_logs":1,"runs":3,)"
       R"("schedule_claims":2,"schedules":1,"secrets":1,"worker_credentials":1,)"
       R"("worker_sessions":1})",
       "pg-0014-secrets"},
      {kControlCore, 13,
       R"({"approvals":2,"attempts":1,"definitions":1,"dispatch_leases":2,"events":1,)"
       R"("governance":1,"projects":1,"retention":1,"retry_policies":1,"run_logs":1,"runs":3,)"
       R"("schedule_claims":2,"schedules":1,"secrets":1,"worker_credentials":1,)"
       R"("worker_sessions":1})",
       "pg-0015-approval-evidence-and-retries"},
      {kControlCore, 14,
       R"({"approvals":2,"attempts":1,"definitions":2,"dispatch_leases":2,"events":1,)"
       R"("governance":1,"projects":1,"retention":1,"retry_policies":1,"run_logs":1,"runs":4,)"
       R"("schedule_claims":2,"schedules":1,"secrets":1,"worker_credentials":1,)"
       R"("worker_sessions":1})",
       "pg-0016-overlap"},
      {kControlCore, 15,
       R"({"approvals":2,"attempts":1,"definitions":3,"dispatch_leases":2,"events":1,)"
       R"("governance":1,"projects":1,"retention":1,"retry_policies":1,"run_logs":1,"runs":4,)"
       R"("schedule_claims":2,"schedules":1,"secrets":1,"worker_credentials":1,)"
       R"("worker_sessions":1})",
       "pg-0017-names-and-tombstones"},
      {kControlCore, 16,
       R"({"approvals":2,"attempts":1,"definitions":4,"dispatch_leases":2,"events":1,)"
       R"("governance":1,"projects":1,"retention":1,"retry_policies":1,"run_logs":1,"runs":4,)"
       R"("schedule_claims":2,"schedules":1,"secrets":1,"worker_credentials":1,)"
       R"("worker_sessions":1})",
       "pg-0018-trigger-jitter"},
      {kControlCore, 17,
       R"({"approvals":2,"attempts":1,"definitions":4,"dispatch_leases":2,"events":2,)"
       R"("governance":1,"projects":1,"retention":1,"retry_policies":2,"run_logs":1,"runs":5,)"
       R"("schedule_claims":2,"schedules":1,"secrets":1,"worker_credentials":1,)"
       R"("worker_sessions":1})",
       "pg-0019-compact-runs"},
      {kControlCore, 18,
       R"({"approvals":2,"attempts":1,"definitions":4,"dispatch_leases":2,"events":2,)"
       R"("governance":2,"projects":1,"retention":1,"retry_policies":2,"run_logs":1,"runs":5,)"
       R"("schedule_claims":2,"schedules":1,"secrets":1,"worker_credentials":1,)"
       R"("worker_sessions":1})",
       "pg-0020-sign-in"},
      {kControlCore, 19,
       R"({"approvals":2,"attempts":1,"definitions":5,"dispatch_leases":2,"events":2,)"
       R"("governance":2,"projects":1,"retention":1,"retry_policies":2,"run_logs":1,"runs":5,)"
       R"("schedule_claims":2,"schedules":1,"secrets":1,"worker_credentials":1,)"
       R"("worker_sessions":1})",
       "pg-0021-published-by"},
      {kControlCore, 20,
       R"({"approvals":2,"attempts":1,"definitions":5,"dispatch_leases":2,"events":2,)"
       R"("governance":3,"projects":1,"retention":1,"retry_policies":2,"run_logs":1,"runs":5,)"
       R"("schedule_claims":2,"schedules":1,"secrets":1,"worker_credentials":1,)"
       R"("worker_sessions":1})",
       "pg-0022-sign-in-policies"},
      {kControlCore, 21,
       R"({"approvals":2,"attempts":1,"definitions":5,"dispatch_leases":2,"events":2,)"
       R"("governance":3,"notifications":1,"projects":1,"retention":1,"retry_policies":2,)"
       R"("run_logs":1,"runs":5,"schedule_claims":2,"schedules":1,"secrets":1,)"
       R"("worker_credentials":1,"worker_sessions":1})",
       "pg-0023-notifications"},
      {kControlCore, 22,
       R"({"approvals":2,"attempts":1,"definitions":5,"dispatch_leases":2,"events":2,)"
       R"("governance":3,"notifications":1,"projects":1,"retention":1,"retry_policies":3,)"
       R"("run_logs":1,"runs":5,"schedule_claims":2,"schedules":1,"secrets":1,)"
       R"("worker_credentials":1,"worker_sessions":1})",
       "pg-0024-retry-on-timeout"},
      {kControlCore, 23,
       R"({"approvals":2,"attempts":1,"definitions":5,"dispatch_leases":2,"events":2,)"
       R"("governance":3,"migration_markers":1,"notifications":1,"projects":1,"retention":1,)"
       R"("retry_policies":3,"run_logs":1,"runs":5,"schedule_claims":2,"schedules":1,)"
       R"("secrets":1,"worker_credentials":1,"worker_sessions":1})",
       "pg-0025-migration-markers"},
      {kControlCore, 24,
       R"({"approvals":2,"attempts":1,"definitions":5,"dispatch_leases":2,"events":2,)"
       R"("governance":3,"migration_markers":1,"notifications":1,"projects":1,"retention":1,)"
       R"("retry_policies":3,"run_logs":1,"runs":5,"schedule_claims":2,"schedules":1,)"
       R"("secrets":1,"worker_credentials":1,"worker_sessions":2})",
       "pg-0026-dump-stable-checks"},
      {kControlCore, 25,
       R"({"approvals":2,"artifacts":1,"attempts":1,"definitions":5,"dispatch_leases":2,)"
       R"("events":2,"governance":3,"migration_markers":1,"notifications":1,"projects":1,)"
       R"("retention":1,"retry_policies":3,"run_logs":1,"runs":5,"schedule_claims":2,)"
       R"("schedules":1,"secrets":1,"worker_credentials":1,"worker_sessions":2})",
       "pg-0027-artifacts"},
      {kControlCore, 26,
       R"({"approvals":2,"artifacts":1,"attempts":1,"definitions":6,"dispatch_leases":2,)"
       R"("events":2,"governance":3,"migration_markers":1,"notifications":1,"placement":1,)"
       R"("projects":1,"retention":1,"retry_policies":3,"run_logs":1,"runs":5,)"
       R"("schedule_claims":2,"schedules":1,"secrets":1,"worker_credentials":1,)"
       R"("worker_sessions":3})",
       "pg-0028-worker-placement"},
      {kControlCore, 27,
       R"({"approvals":2,"artifacts":1,"attempts":1,"definitions":6,"dispatch_leases":2,)"
       R"("events":2,"governance":3,"migration_markers":1,"notifications":1,"placement":1,)"
       R"("projects":1,"retention":1,"retry_policies":3,"run_logs":1,"runs":5,)"
       R"("schedule_claims":2,"schedules":1,"secrets":1,"worker_credentials":2,)"
       R"("worker_sessions":3})",
       "pg-0029-worker-credential-pools"},
  };
  return kSteps;
}

const SchemaCapability& ExpectedCapability() { return CapabilitySteps().back(); }

Result<std::vector<CapabilityRow>> ReadCapabilities(Connection& conn) {
  QL_ASSIGN_OR_RETURN(Rows exists,
                      conn.Exec("SELECT to_regclass('ql3.schema_capabilities') IS NOT NULL", {},
                                "read capability"));
  if (!exists.Bool(0, 0)) {
    QL_RETURN_IF_ERROR(exists.status());
    return std::vector<CapabilityRow>();
  }
  QL_ASSIGN_OR_RETURN(Rows rows, conn.Exec("SELECT name, version, capability_map, migration_id "
                                           "FROM ql3.schema_capabilities ORDER BY name",
                                           {}, "read capability"));
  std::vector<CapabilityRow> out;
  for (int i = 0; i < rows.size(); ++i) {
    out.push_back({rows.Text(i, 0), rows.Int(i, 1), rows.Text(i, 2), rows.Text(i, 3)});
  }
  QL_RETURN_IF_ERROR(rows.status());
  return out;
}

Result<std::vector<MigrationMarker>> ReadMigrationMarkers(Connection& conn) {
  QL_ASSIGN_OR_RETURN(
      Rows readable,
      conn.Exec("SELECT coalesce(has_table_privilege(to_regclass('ql3.schema_migration_markers'), "
                "'SELECT'), false)",
                {}, "read migration markers"));
  const bool present = readable.Bool(0, 0);
  QL_RETURN_IF_ERROR(readable.status());
  if (!present) return std::vector<MigrationMarker>();
  QL_ASSIGN_OR_RETURN(Rows rows, conn.Exec("SELECT id, checksum, statements, statements_run, "
                                           "started_at_ms, updated_at_ms FROM "
                                           "ql3.schema_migration_markers ORDER BY id",
                                           {}, "read migration markers"));
  std::vector<MigrationMarker> out;
  for (int i = 0; i < rows.size(); ++i) {
    out.push_back({rows.Text(i, 0), rows.Text(i, 1), rows.Int(i, 2), rows.Int(i, 3), rows.Int(i, 4),
                   rows.Int(i, 5)});
  }
  QL_RETURN_IF_ERROR(rows.status());
  return out;
}

Status CheckCapability(const std::vector<CapabilityRow>& rows, const SchemaCapability* want) {
  if (want == nullptr) {
    if (!rows.empty()) return CapabilityInvalid("a capability row exists before its migration");
    return Status::Ok();
  }
  if (rows.size() != 1) {
    return CapabilityInvalid("expected exactly one capability row, found " +
                             std::to_string(rows.size()));
  }
  const CapabilityRow& row = rows.front();
  if (row.name != want->name || row.version != want->version ||
      row.capability_map != want->capability_map || row.migration_id != want->migration_id) {
    return CapabilityInvalid("capability row " + row.name + " v" + std::to_string(row.version) +
                             " does not match " + std::string(want->name) + " v" +
                             std::to_string(want->version));
  }
  return Status::Ok();
}

Result<std::vector<HistoryRow>> ReadHistory(Connection& conn) {
  QL_ASSIGN_OR_RETURN(Rows probe,
                      conn.Exec("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'ql3'), "
                                "to_regclass('ql3.schema_migrations') IS NOT NULL",
                                {}, "read migration history"));
  bool schema = probe.Bool(0, 0);
  bool table = probe.Bool(0, 1);
  QL_RETURN_IF_ERROR(probe.status());
  if (!schema) return std::vector<HistoryRow>();
  if (!table) {
    return Corrupt("migration_history_invalid", "schema ql3 exists but holds no migration history");
  }
  QL_ASSIGN_OR_RETURN(Rows rows, conn.Exec("SELECT id, checksum, stream, dialect FROM "
                                           "ql3.schema_migrations ORDER BY id",
                                           {}, "read migration history"));
  std::vector<HistoryRow> history;
  for (int i = 0; i < rows.size(); ++i) {
    history.push_back({rows.Text(i, 0), rows.Text(i, 1), rows.Text(i, 2), rows.Text(i, 3)});
  }
  QL_RETURN_IF_ERROR(rows.status());
  return history;
}

Result<std::vector<std::string>> PendingMigrationIds(const std::string& url,
                                                     const SessionOptions& session) {
  QL_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn,
                      Connection::Open(url, MigrationSession(session)));
  QL_ASSIGN_OR_RETURN(Rows who, conn->Exec("SELECT current_user::text", {}, "read role"));
  const std::string role = who.Text(0, 0);
  QL_RETURN_IF_ERROR(who.status());
  if (role != kMigrationRole) {
    return InvalidArgument("migration_role_invalid",
                           "migrations run as " + std::string(kMigrationRole) +
                               " (the owner of schema ql3), not as " + role);
  }
  QL_ASSIGN_OR_RETURN(std::vector<HistoryRow> history, ReadHistory(*conn));
  QL_ASSIGN_OR_RETURN(std::vector<const Migration*> pending,
                      PendingMigrations(PostgresMainStream(), history));
  std::vector<std::string> ids;
  for (const Migration* m : pending) ids.push_back(m->id);
  return ids;
}

Result<MigrateReport> MigrateStream(const std::string& url, const MigrationStream& stream,
                                    std::span<const SchemaCapability> steps, Clock& clock,
                                    const SessionOptions& session, const MigrationFault& fault) {
  QL_RETURN_IF_ERROR(ValidateStream(stream));
  SessionOptions s = MigrationSession(session);
  QL_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn, Connection::Open(url, s));
  QL_ASSIGN_OR_RETURN(Rows who, conn->Exec("SELECT current_user::text", {}, "read role"));
  std::string role = who.Text(0, 0);
  QL_RETURN_IF_ERROR(who.status());
  if (role != kMigrationRole) {
    return InvalidArgument("migration_role_invalid",
                           "migrations run as " + std::string(kMigrationRole) +
                               " (the owner of schema ql3), not as " + role);
  }
  for (const SchemaCapability& step : steps) {
    if (IsPrepareMigration(step.migration_id)) {
      return InvalidArgument("capability_step_invalid",
                             "capability " + std::string(step.name) + " v" +
                                 std::to_string(step.version) + " names prepare migration " +
                                 std::string(step.migration_id) +
                                 "; a pair moves the capability with its commit migration");
    }
  }
  MigrateReport report;
  std::string prepared;
  for (;;) {
    StepOutcome outcome;
    QL_RETURN_IF_ERROR(MigrateStep(*conn, stream, steps, s, clock, report, prepared, outcome));
    if (outcome.done) break;
    if (outcome.run_prepare != nullptr) {
      QL_RETURN_IF_ERROR(
          RunPrepared(*conn, stream, *outcome.run_prepare, outcome.marked, s, clock, fault));
      prepared = outcome.run_prepare->id;
    }
  }
  return report;
}

Result<MigrateReport> Migrate(const std::string& url, Clock& clock, const SessionOptions& session) {
  return MigrateStream(url, PostgresMainStream(), CapabilitySteps(), clock, session);
}

}  // namespace ql::pg
