// Starts a throwaway PostgreSQL (ql/testing/postgres_server.h) with the roles of
// deploy/postgres/roles.sql, for tests written in other languages:
//
//   throwaway_postgres ROLES_SQL
//
// prints one JSON line {"runtime", "admin", "worker", "migration"} (the URLs of database
// qinglong as each role), keeps the server while its standard input stays open, then stops it
// and removes its directory. Exit 1 (with the reason on stderr) when the server cannot start.

#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "ql/testing/postgres_server.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: throwaway_postgres ROLES_SQL\n";
    return 2;
  }
  auto server = ql::testing::PostgresServer::Start();
  if (!server.ok()) {
    std::cerr << server.status().ToString() << "\n";
    return 1;
  }
  auto roles = (*server)->PsqlFile("postgres", argv[1]);
  if (!roles.ok()) {
    std::cerr << roles.status().ToString() << "\n";
    return 1;
  }
  const auto url = [&](const char* role) { return (*server)->Url(role, "qinglong"); };
  std::cout << nlohmann::json{{"runtime", url("ql3_runtime")},
                              {"admin", url("ql3_admin")},
                              {"worker", url("ql3_worker_ingress")},
                              {"migration", url("ql3_migration")}}
                   .dump()
            << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  return 0;
}
