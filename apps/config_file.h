#pragma once

// The daemons' configuration files (/etc/qinglong/ql-local.conf, ql-cluster.conf,
// ql-worker.conf; README "Configuration file"). A file sets the same flags as the command line,
// by their long names without `--`:
//
//   # comment
//   listen = 127.0.0.1:5700
//   log-format = json
//   command-writable = /srv/shared      (a repeatable flag may appear on several lines)
//   allow-insecure-http = false         (a flag takes true/false, yes/no, on/off, 1/0)
//   oidc-config = "/etc/qinglong/sign in.json"   (quotes keep spaces; \" and \\ inside them)
//
// Flags on the command line and the environment variables that stand for a flag override the
// file. A file the daemon cannot read, a line that is not `key = value`, an unknown key, a key
// set twice that takes one value, or a value its flag refuses is an error naming the file and
// the line.

#include <CLI/CLI.hpp>
#include <map>
#include <string>
#include <vector>

#include "ql/core/status.h"

namespace ql {

// One `key = value` line of a configuration file.
struct ConfigSetting {
  std::string key;
  std::string value;
  int line = 0;
};

// Reads `path`. InvalidArgument `config_file_invalid` naming `path:line` for a line that is not
// `key = value`; `config_file_unreadable` when the file cannot be read.
Result<std::vector<ConfigSetting>> ReadConfigFile(const std::string& path);

// How a program's configuration file maps onto its command line.
struct ConfigTarget {
  // The command whose flags the file sets (an App or a subcommand), and the first index in
  // the command line after that command's name (1 for a program without subcommands, 2 after
  // `ql-local serve`).
  const CLI::App* command = nullptr;
  size_t first_arg = 1;
  // Flags the file may name although `command` does not take them (another subcommand's, as
  // ql-cluster's `audit` reading serve's file): they are skipped, not refused.
  const CLI::App* also_known = nullptr;
  // Flags that name one setting together (`database-url`, `database-url-file`): when the
  // command line or the environment gives any of them, the file's are all left out.
  std::vector<std::vector<std::string>> groups;
  // The environment variable that stands for a flag (`profile` -> QL_DEPLOYMENT_PROFILE).
  std::map<std::string, std::string> environment;
  // How the command is invoked, for messages ("ql-local serve").
  std::string usage;
};

// The path of `--config PATH` (or `--config=PATH`) in `args` from `first_arg`, or empty.
std::string ConfigPathArgument(const std::vector<std::string>& args, size_t first_arg);

// The command line with a configuration file's settings applied, and the settings applied.
struct MergedCommandLine {
  std::vector<std::string> args;
  std::vector<ConfigSetting> applied;
};

// Returns `args` with the file's settings inserted as flags right after the command's name, so
// that the command line's own flags (which come after them) are parsed with them. Settings
// overridden by the command line or the environment are left out. Errors name `path:line`.
Result<MergedCommandLine> ApplyConfigFile(const std::string& path,
                                          const std::vector<std::string>& args,
                                          const ConfigTarget& target);

// A CLI11 parse error of a merged command line, naming the file's line when the flag the
// message starts with ("--flag: ...", "Could not convert: --flag = ...") came from the file.
std::string ExplainParseError(const std::string& message, const std::string& path,
                              const std::vector<ConfigSetting>& applied);

// Adds `--config` to `command` (its value is applied before parsing, by ParseWithConfigFile).
void AddConfigFlag(CLI::App& command, std::string& path);

// Parses `argc`/`argv` with `app`, first applying the configuration file `--config` names when
// `target.command` is set (the caller passes the command the command line selects). A usage
// error is written to standard error as `error: invalid_arguments: ...` (or the file's code).
// Returns -1 when the daemon should go on, else the exit code (0 after --help or --version).
int ParseWithConfigFile(CLI::App& app, int argc, char** argv, const ConfigTarget& target,
                        int usage_exit);

// `message` (a start-up error naming a flag, e.g. "--log-format must be text or json") prefixed
// with `FILE:LINE: ` when that flag's value came from the configuration file ParseWithConfigFile
// applied in this process; otherwise `message` as is.
std::string WithConfigLine(const std::string& message);

}  // namespace ql
