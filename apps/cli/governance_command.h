#pragma once

// Governance commands of `ql` (DESIGN §9): who may do what.
//
//   ql whoami
//   ql principal add NAME [--kind user|service] | list | disable NAME | enable NAME
//   ql token create [--principal NAME] [--expires 30d] | list | revoke ID
//   ql project add NAME [--name DISPLAY] | list | archive NAME | set NAME [--keep-days N]
//       [--keep-runs K] (retention_command.h)
//   ql role grant PRINCIPAL ROLE [--project NAME | --installation]
//   ql role revoke PRINCIPAL [--project NAME | --installation] | list [--project NAME |
//       --installation]
//   ql audit list [--limit N]
//
// Every command prints a table, or with --json the API's JSON. `token create` prints the token
// alone on its last line (it is shown once). Refusals print the server's code and message
// (e.g. permission_denied naming the role needed) and exit 1.

#include <CLI/CLI.hpp>

namespace ql::cli {

// Registers whoami, principal, token, project, role and audit on `app`.
void RegisterGovernanceCommands(CLI::App& app);

}  // namespace ql::cli
