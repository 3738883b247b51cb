#pragma once

// Approval commands of `ql` (DESIGN §9.1): a second person approves manual runs of tasks that
// require it, and an admin resolves approved runs whose fate is unknown.
//
//   ql approval list [--status pending|approved|rejected|expired] [--limit N] [--cursor C]
//   ql approval show ID
//   ql approval approve ID
//   ql approval reject ID --reason TEXT
//
// `approval show` prints the request, its decision and, once approved, the receipt linking
// request, decision, approved action and run. Every command prints the API's JSON with --json.
// Refusals print the server's code and message (approval_self, permission_denied,
// approval_expired, approval_stale, ...) and exit 1.

#include <CLI/CLI.hpp>

namespace ql::cli {

// Registers `approval` on `app`.
void RegisterApprovalCommands(CLI::App& app);

}  // namespace ql::cli
