#pragma once

// Signing in from the CLI: `ql login` (a password, kept as an expiring session token in
// ~/.config/qinglong/credentials.json, 0600), `ql logout`, `ql passwd` (one's own password),
// `ql principal passwd NAME` (an admin's reset) and `ql session list|revoke`.

#include <CLI/CLI.hpp>

namespace ql::cli {

// Registers login, logout, passwd and session on `app`; `principal` is the existing
// `ql principal` command, which gets `passwd`.
void RegisterSessionCommands(CLI::App& app, CLI::App& principal);

}  // namespace ql::cli
