#pragma once

// `ql status`: is the server up and ready, and what is it holding.

#include <CLI/CLI.hpp>

#include "client.h"

namespace ql::cli {

// GETs /readyz and /api/v1/status and prints the server address (and where it came from),
// readiness, project, executor type, enabled triggers and run counts by state. With --json one
// object: the /api/v1/status answer plus "server" and "ready" (and "not_ready" with the
// server's {"code","message"} when it is not ready). Exits 0 when the server is ready, 1 when it
// answers but is not ready (starting or shutting down), 3 when it cannot be reached.
int Status(CommandContext& context);

// Registers `status` on `app` (and the global options on its root).
void RegisterStatusCommand(CLI::App& app);

}  // namespace ql::cli
