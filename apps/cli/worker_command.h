#pragma once

// `ql worker list|show|drain|resume`: the remote workers of the installation over the HTTP API
// (/api/v1/workers). Every command needs an installation admin; a server without remote workers
// (ql-local) answers workers_unavailable.
//
//   ql worker list           name, state, pool, labels, slots in use, version, last heartbeat
//   ql worker show NAME      every field, with the ids of the runs it is running
//   ql worker drain NAME     it takes no new runs; the ones it runs finish
//   ql worker resume NAME    it takes runs again

#include <CLI/CLI.hpp>
#include <string>

#include "client.h"

namespace ql::cli {

// GET /api/v1/workers; prints a table (NAME, STATE, POOL, LABELS, SLOTS as running/slots,
// VERSION, LAST SEEN; --wide: ID first) (--json: the API's {"items"}).
int WorkerList(CommandContext& context);
// GET /api/v1/workers/{name or id}; prints every field (--json: the worker).
int WorkerShow(const std::string& worker, CommandContext& context);
// POST /api/v1/workers/{name}/drain (`drain` true) or /resume; prints the worker's new state
// (--json: the worker).
int WorkerDrain(const std::string& worker, bool drain, CommandContext& context);

// Registers `worker` and its subcommands on `app` (and the global options on its root).
void RegisterWorkerCommands(CLI::App& app);

}  // namespace ql::cli
