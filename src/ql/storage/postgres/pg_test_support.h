#pragma once

// Test support for the PostgreSQL adapter (included by *_test.cc only): one throwaway server
// per test binary with the roles of deploy/postgres/roles.sql, and a fresh database per test,
// copied from a template that `Migrate` brought to the code's schema as ql3_migration. A test
// that cannot get its server fails; it never skips.

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>

#include "ql/storage/postgres/pg_migrations.h"
#include "ql/testing/fake_clock.h"
#include "ql/testing/postgres_server.h"

#ifndef QL_SOURCE_DIR
#error "QL_SOURCE_DIR must name the source tree (for deploy/postgres/roles.sql)"
#endif

namespace ql::pg::testing {

class PgTestCluster {
 public:
  // Starts the server on first use; aborts the test binary when that fails. The server is
  // stopped and its directory removed when the test binary exits.
  static PgTestCluster& Get() {
    static PgTestCluster cluster;
    return cluster;
  }

  ::ql::testing::PostgresServer& server() { return *server_; }

  // A URL for `role` on `database` (loopback, trust authentication, sslmode=disable).
  std::string Url(const std::string& role, const std::string& database) const {
    return server_->Url(role, database);
  }

  // Creates an empty database owned by ql3_migration, with the connect grants of roles.sql.
  std::string NewEmptyDatabase() {
    std::string name = "t" + std::to_string(::getpid()) + "_" + std::to_string(next_++);
    Create(name, "template0");
    return name;
  }

  // Creates a database at the code's full schema (copied from the migrated template).
  std::string NewDatabase() {
    std::lock_guard<std::mutex> lock(mu_);
    std::string name = "t" + std::to_string(::getpid()) + "_" + std::to_string(next_++);
    Create(name, "ql_template");
    return name;
  }

 private:
  PgTestCluster() {
    ::setenv("QL3_POSTGRES_ALLOW_INSECURE", "true", 1);
    auto server = ::ql::testing::PostgresServer::Start();
    if (!server.ok()) {
      std::fprintf(stderr, "cannot start PostgreSQL for the tests: %s\n",
                   server.status().ToString().c_str());
      std::abort();
    }
    server_ = std::move(server).value();
    Must(server_->PsqlFile("postgres", std::string(QL_SOURCE_DIR) + "/deploy/postgres/roles.sql"));
    Create("ql_template", "template0");
    ::ql::testing::FakeClock clock;
    Result<MigrateReport> migrated = Migrate(server_->Url(kMigrationRole, "ql_template"), clock);
    if (!migrated.ok()) {
      std::fprintf(stderr, "cannot migrate the template database: %s\n",
                   migrated.status().ToString().c_str());
      std::abort();
    }
  }

  void Create(const std::string& name, const std::string& tmpl) {
    Must(server_->Psql("postgres", "CREATE DATABASE " + name + " OWNER ql3_migration TEMPLATE " +
                                       tmpl + ";\nREVOKE ALL ON DATABASE " + name +
                                       " FROM PUBLIC;\nGRANT CONNECT ON DATABASE " + name +
                                       " TO ql3_runtime, ql3_admin, ql3_worker_ingress;\n"));
  }

  static void Must(const Result<std::string>& r) {
    if (!r.ok()) {
      std::fprintf(stderr, "PostgreSQL test setup failed: %s\n", r.status().ToString().c_str());
      std::abort();
    }
  }

  std::unique_ptr<::ql::testing::PostgresServer> server_;
  std::mutex mu_;
  std::atomic<int> next_{0};
};

}  // namespace ql::pg::testing
