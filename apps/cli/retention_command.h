#pragma once

// Retention settings from `ql` (DESIGN §11):
//
//   ql project set NAME [--keep-days N|inherit] [--keep-runs K|inherit]
//   ql task set TASK_ID [--keep-days N|inherit] [--keep-runs K|inherit]
//
// A flag left out keeps the stored value; `inherit` clears it (a task then follows its
// project, a project the built-in 30 days / 1,000 runs). Without any flag the command only
// shows the settings. Prints what is set and what applies, or with --json the API's answer.

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "client.h"

namespace ql::cli {

// What `set` asks for: empty = keep; "inherit" or a positive integer.
struct RetentionArgs {
  std::string target;  // project name or id, or task id
  std::optional<std::string> keep_days;
  std::optional<std::string> keep_runs;
};

// Returns the POST body of `args`; a value that is neither `inherit` nor a positive integer is
// a usage error naming the flag.
CliResult<nlohmann::json> BuildRetentionBody(const RetentionArgs& args);

// Shows (no flag given) or changes the retention of a project (`task` false) or a task.
int RetentionSet(const RetentionArgs& args, bool task, CommandContext& context);

// Adds `set` to `parent` (the project or the task command).
void AddRetentionSetCommand(CLI::App& parent, bool task);

}  // namespace ql::cli
