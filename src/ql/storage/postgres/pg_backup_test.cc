// Backups of a cluster database (docs/operations.md): a `pg_dump -Fc` restored with
// `pg_restore` into a new database is the same database to the readiness auditor — every CHECK
// constraint, index and privilege comes back word for word — so replicas serve it at once.

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "ql/storage/postgres/pg_audit.h"
#include "ql/storage/postgres/pg_client.h"
#include "ql/storage/postgres/pg_migrations.h"
#include "ql/storage/postgres/pg_test_support.h"

namespace ql::pg {
namespace {

using testing::PgTestCluster;

// Runs `command` through /bin/sh; returns its exit status and, on failure, its output.
int RunShell(const std::string& command, std::string& output) {
  const std::string log = ::testing::TempDir() + "pg-backup-test.log";
  const int status = std::system((command + " >'" + log + "' 2>&1").c_str());
  output.clear();
  if (FILE* f = std::fopen(log.c_str(), "r")) {
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) output.append(buf, n);
    std::fclose(f);
  }
  return status;
}

TEST(PostgresBackupTest, ADumpRestoredIntoANewDatabasePassesTheReadinessAudit) {
  PgTestCluster& cluster = PgTestCluster::Get();
  const std::string source = cluster.NewDatabase();
  ASSERT_TRUE(cluster.server()
                  .Psql(source,
                        "INSERT INTO ql3.worker_credentials (id, name, token_digest, "
                        "created_at_ms) VALUES ('w1', 'host-1', repeat('a', 64), 1)")
                  .ok());
  const std::string dump = ::testing::TempDir() + source + ".dump";
  std::string output;
  ASSERT_EQ(RunShell("'" + cluster.server().bin_dir() + "/pg_dump' -Fc -f '" + dump + "' -d '" +
                         cluster.Url(kMigrationRole, source) + "'",
                     output),
            0)
      << output;

  // A new database as deploy/postgres/roles.sql makes one, restored by its owner.
  const std::string target = cluster.NewEmptyDatabase();
  ASSERT_EQ(RunShell("'" + cluster.server().bin_dir() +
                         "/pg_restore' --exit-on-error --single-transaction -d '" +
                         cluster.Url(kMigrationRole, target) + "' '" + dump + "'",
                     output),
            0)
      << output;
  std::remove(dump.c_str());

  Result<std::unique_ptr<Connection>> runtime =
      Connection::Open(cluster.Url(kRuntimeRole, target), {});
  ASSERT_TRUE(runtime.ok()) << runtime.status().ToString();
  Status audit = AuditReadiness(**runtime);
  EXPECT_TRUE(audit.ok()) << audit.ToString();
  Result<std::string> rows =
      cluster.server().Psql(target, "SELECT name FROM ql3.worker_credentials");
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  EXPECT_EQ(*rows, "host-1\n");
  // Nothing is pending: `ql-cluster migrate` on the restored database changes nothing.
  Result<std::vector<std::string>> pending =
      PendingMigrationIds(cluster.Url(kMigrationRole, target));
  ASSERT_TRUE(pending.ok()) << pending.status().ToString();
  EXPECT_TRUE(pending->empty());
}

}  // namespace
}  // namespace ql::pg
