#pragma once

// `ql secret set|list|rm`: secrets of a project over the HTTP API (/api/v1/secrets).
//
//   ql secret set NAME [--from-file PATH]   the value is read from stdin (one trailing newline
//                                           removed) or from the file (byte for byte); never
//                                           from the command line, where ps and the shell
//                                           history would see it
//   ql secret list [--json]                 names, current versions, status and times
//   ql secret rm NAME                       destroys the keys of every version (irreversible)
//
// No command ever prints a value: the server never answers one.

#include <CLI/CLI.hpp>
#include <istream>
#include <string>

#include "client.h"

namespace ql::cli {

// Returns the secret value read from `in` (stdin): everything up to its end, less one trailing
// "\n" or "\r\n". Usage errors: secret_value_empty, secret_value_invalid (not UTF-8, which the
// API's JSON cannot carry).
CliResult<std::string> ReadSecretValue(std::istream& in, bool strip_newline);

// Registers `secret` and its subcommands on `app`.
void RegisterSecretCommands(CLI::App& app);

}  // namespace ql::cli
