// ql-cluster: the composition root of the cluster profile (PostgreSQL). Subcommands:
//   migrate   bring the database to the code's schema, as ql3_migration
//   audit     the read-only readiness audit, as the runtime role
//   catalog   print the catalog of schema ql3 the auditor compares (maintenance)
// Exit codes: 0 success, 1 failure (database unreachable, lock held, ...), 2 invalid input,
// 3 not ready (the audit failed; the stable code is printed).

#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <string>

#include "database_url.h"
#include "ql/core/clock.h"
#include "ql/storage/postgres/pg_audit.h"
#include "ql/storage/postgres/pg_client.h"
#include "ql/storage/postgres/pg_migrations.h"

namespace ql::cluster {
namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNotReady = 3;

int Fail(const Status& status) {
  std::cerr << "error: " << status.reason() << ": " << status.message() << "\n";
  return status.code() == StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
}

void AddUrlOptions(CLI::App* cmd, UrlSource& source, const std::string& description) {
  cmd->add_option("--database-url", source.flag_value, description);
  cmd->add_option("--database-url-file", source.file_path,
                  "read the database URL from this file instead");
}

int Migrate(const UrlSource& source) {
  Result<std::string> url = ResolveDatabaseUrl(source);
  if (!url.ok()) return Fail(url.status());
  Result<pg::MigrateReport> report = pg::Migrate(*url, SystemClock());
  if (!report.ok()) return Fail(report.status());
  for (const std::string& id : report->applied) std::cout << "applied " << id << "\n";
  const pg::SchemaCapability& cap = pg::ExpectedCapability();
  std::cout << (report->applied.empty() ? "schema already current: " : "schema migrated: ")
            << pg::PostgresMainStream().migrations.back().id << ", " << cap.name << " v"
            << cap.version << "; grants applied\n";
  return 0;
}

int Audit(const UrlSource& source) {
  Result<std::string> url = ResolveDatabaseUrl(source);
  if (!url.ok()) return Fail(url.status());
  pg::SessionOptions session;
  session.application_name = "qinglong-audit";
  Result<std::unique_ptr<pg::Connection>> conn = pg::Connection::Open(*url, session);
  if (!conn.ok()) return Fail(conn.status());
  Status status = pg::AuditReadiness(**conn);
  if (status.ok()) {
    std::cout << "ready\n";
    return 0;
  }
  if (status.code() != StatusCode::kCorrupt) return Fail(status);
  std::cout << "not ready: " << status.reason() << ": " << status.message() << "\n";
  return kExitNotReady;
}

int Catalog(const UrlSource& source) {
  Result<std::string> url = ResolveDatabaseUrl(source);
  if (!url.ok()) return Fail(url.status());
  Result<std::unique_ptr<pg::Connection>> conn = pg::Connection::Open(*url, {});
  if (!conn.ok()) return Fail(conn.status());
  Result<std::vector<std::string>> lines = pg::ReadSchemaCatalog(**conn);
  if (!lines.ok()) return Fail(lines.status());
  for (const std::string& line : *lines) std::cout << line << "\n";
  return 0;
}

int Main(int argc, char** argv) {
  CLI::App app{"ql-cluster: the QingLong control plane on PostgreSQL"};
  app.require_subcommand(1);

  UrlSource migrate_url{"", "", "QL3_MIGRATION_DATABASE_URL", "--database-url"};
  CLI::App* migrate = app.add_subcommand(
      "migrate", "apply the postgresql-main migrations and grants (as ql3_migration)");
  AddUrlOptions(migrate, migrate_url, "the migration role's URL (or QL3_MIGRATION_DATABASE_URL)");

  UrlSource audit_url{"", "", "QL3_DATABASE_URL", "--database-url"};
  CLI::App* audit =
      app.add_subcommand("audit",
                         "check readiness read-only, as the runtime role (exit 3 when "
                         "not ready)");
  AddUrlOptions(audit, audit_url, "the runtime role's URL (or QL3_DATABASE_URL)");

  UrlSource catalog_url{"", "", "QL3_DATABASE_URL", "--database-url"};
  CLI::App* catalog = app.add_subcommand(
      "catalog", "print the catalog of schema ql3 that the audit compares (maintenance)");
  AddUrlOptions(catalog, catalog_url, "any role's URL (or QL3_DATABASE_URL)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : kExitUsage;
  }
  if (*migrate) return Migrate(migrate_url);
  if (*audit) return Audit(audit_url);
  if (*catalog) return Catalog(catalog_url);
  return kExitUsage;
}

}  // namespace
}  // namespace ql::cluster

int main(int argc, char** argv) { return ql::cluster::Main(argc, argv); }
