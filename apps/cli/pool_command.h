#pragma once

// `ql pool list|show|grant|revoke|set`: worker pools of the installation over the HTTP API
// (/api/v1/pools). Every command needs an installation admin; a server without remote workers
// (ql-local) answers workers_unavailable.
//
//   ql pool list                                   each pool: open?, limit, grants, workers
//   ql pool show POOL                              one pool and its grants
//   ql pool grant POOL --project P [--max-running N] [--weight W]
//   ql pool revoke POOL --project P
//   ql pool set POOL [--open | --granted-only] [--max-running N | --no-max-running]
//
// `--project` after `grant` / `revoke` names the project the grant is for (a slug or an id); it
// is not the project the request works in. The global `--project` given before `pool` is taken
// when the subcommand has none; $QL_PROJECT never is (a grant names its project explicitly).

#include <CLI/CLI.hpp>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "client.h"

namespace ql::cli {

struct PoolGrantArgs {
  std::string pool;
  std::optional<std::string> project;  // --project P (of `grant` itself)
  std::optional<int64_t> max_running;  // --max-running N
  std::optional<int64_t> weight;       // --weight W (1..100, checked by the server)
};

struct PoolRevokeArgs {
  std::string pool;
  std::optional<std::string> project;  // --project P (of `revoke` itself)
};

struct PoolSetArgs {
  std::string pool;
  bool open = false;                   // --open: the pool serves every project
  bool granted_only = false;           // --granted-only: only projects granted it
  std::optional<int64_t> max_running;  // --max-running N
  bool no_max_running = false;         // --no-max-running: no pool-wide limit
};

// Returns the body of POST /api/v1/pools/{name}: {"serves_all_projects"?, "max_running"?}
// (max_running null clears the limit). Usage errors (exit 2): flag_required when no flag is
// given, flag_conflict for --open with --granted-only or --max-running with --no-max-running.
CliResult<nlohmann::json> BuildPoolSetBody(const PoolSetArgs& args);

// GET /api/v1/pools; prints a table (POOL, OPEN, MAX RUNNING, GRANTS, WORKERS, RUNNING), grants
// by project slug when the projects can be listed, else by id (--json: the API's {"items"}).
int PoolList(CommandContext& context);
// GET /api/v1/pools/{name}; prints its fields and its grants (--json: the pool).
int PoolShow(const std::string& pool, CommandContext& context);
// POST /api/v1/pools/{name}/grants {"project", "max_running"?, "weight"?}; prints the grant
// (--json: the grant). Usage error project_required when no project is named.
int PoolGrant(const PoolGrantArgs& args, CommandContext& context);
// POST /api/v1/pools/{name}/revoke {"project"}; prints what was revoked (--json: the pool).
// Usage error project_required when no project is named.
int PoolRevoke(const PoolRevokeArgs& args, CommandContext& context);
// POST /api/v1/pools/{name} with BuildPoolSetBody; prints the pool's settings (--json: the pool).
int PoolSet(const PoolSetArgs& args, CommandContext& context);

// Registers `pool` and its subcommands on `app` (and the global options on its root).
void RegisterPoolCommands(CLI::App& app);

}  // namespace ql::cli
