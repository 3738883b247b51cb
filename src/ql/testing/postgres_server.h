#pragma once

// A throwaway PostgreSQL server for tests and benchmarks: Debian's postgresql-15 (or the newest
// installed major) initialised in a temporary directory, on a free loopback port, stopped and
// removed when the object goes away. Running as root, the server runs as the `postgres` system
// user (PostgreSQL refuses root). Nothing here links libpq: SQL goes through `psql`.

#include <memory>
#include <string>
#include <vector>

#include "ql/core/status.h"

namespace ql::testing {

struct PostgresServerOptions {
  // Extra `-c name=value` settings for the postmaster.
  std::vector<std::string> settings;
  // Durability off (fsync, synchronous_commit, full_page_writes) for fast tests; benchmarks
  // keep the defaults.
  bool fast = true;
  // Allows streaming replication connections (wal_level replica, a replication entry).
  bool replication = false;
};

class PostgresServer {
 public:
  // The superuser initdb creates; tests use it only to set up roles and databases.
  static constexpr char kSuperuser[] = "qlsuper";

  // Initialises and starts a server; Unavailable when no PostgreSQL server binaries are
  // installed or the server does not come up (the message carries the tail of its log).
  static Result<std::unique_ptr<PostgresServer>> Start(const PostgresServerOptions& options = {});
  // Starts a streaming standby of `primary` (pg_basebackup -R) on its own port.
  static Result<std::unique_ptr<PostgresServer>> StartStandby(const PostgresServer& primary);

  ~PostgresServer();
  PostgresServer(const PostgresServer&) = delete;
  PostgresServer& operator=(const PostgresServer&) = delete;

  int port() const { return port_; }
  const std::string& data_dir() const { return data_dir_; }
  const std::string& bin_dir() const { return bin_dir_; }

  // Returns "postgresql://USER@127.0.0.1:PORT/DB?sslmode=disable" (trust authentication).
  std::string Url(const std::string& user, const std::string& database) const;

  // Runs `sql` with psql as the superuser against `database`, stopping at the first error;
  // returns the unaligned, tuples-only output. Internal with psql's stderr on failure.
  Result<std::string> Psql(const std::string& database, const std::string& sql) const;
  // Runs `sql` with psql as `user` (any role; trust authentication).
  Result<std::string> PsqlAs(const std::string& user, const std::string& database,
                             const std::string& sql) const;
  // Runs a file with psql as the superuser (e.g. deploy/postgres/roles.sql).
  Result<std::string> PsqlFile(const std::string& database, const std::string& path) const;
  // Returns a plain-text pg_dump of `database` (schema and data of every schema).
  Result<std::string> PgDump(const std::string& database) const;

  // Stops the server (fast shutdown) / starts it again on the same port.
  Status Stop();
  Status Restart();
  // Promotes a standby to primary.
  Status Promote();

 private:
  PostgresServer() = default;
  Status StartProcess();

  std::string root_dir_;
  std::string data_dir_;
  std::string bin_dir_;
  std::string run_as_;  // system user the server runs as; empty = this process's user
  int port_ = 0;
  bool running_ = false;
};

// Returns the directory of the newest installed PostgreSQL server binaries
// (QL_TEST_PG_BINDIR when set), or "" when none is installed.
std::string FindPostgresBinDir();

}  // namespace ql::testing
