#pragma once

#include <CLI/CLI.hpp>

namespace ql::cli {

// The exit code for invalid input (bad arguments, expression, zone or timestamp).
inline constexpr int kExitInvalidInput = 2;

// Registers the `cron` command group on `app`:
//   ql cron next EXPRESSION --tz ZONE [--from RFC3339] [--count N]
// prints the next N (default 5, at most 1000) fire times strictly after --from (default now),
// one RFC 3339 line each with the zone's offset at that instant; with --json one object in the
// shape of the API's GET /api/v1/cron/next: {"expression", "timezone", "fire_times": [{"at"
// (UTC), "local"}]}. Invalid input prints "error: <reason>: <message>" (with --json
// {"code", "message"}) on stderr and ends the parse with CLI::RuntimeError(2).
void RegisterCronCommands(CLI::App& app);

}  // namespace ql::cli
