// The `ql` command-line client. Each command group registers itself here.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>
#include <string>

#include "approval_command.h"
#include "client.h"
#include "completion_command.h"
#include "cron_command.h"
#include "governance_command.h"
#include "notify_command.h"
#include "pool_command.h"
#include "ql_version.h"
#include "run_command.h"
#include "script_command.h"
#include "secret_command.h"
#include "status_command.h"
#include "task_command.h"
#include "trigger_command.h"
#include "worker_command.h"

int main(int argc, char** argv) {
  CLI::App app{"QingLong command-line client", "ql"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("ql ") + ql::kProjectVersion);
  ql::cli::RegisterCronCommands(app);
  ql::cli::RegisterTaskCommands(app);
  ql::cli::RegisterTriggerCommands(app);
  ql::cli::RegisterRunCommands(app);
  ql::cli::RegisterStatusCommand(app);
  ql::cli::RegisterGovernanceCommands(app);
  ql::cli::RegisterApprovalCommands(app);
  ql::cli::RegisterSecretCommands(app);
  ql::cli::RegisterScriptCommands(app);
  ql::cli::RegisterNotifyCommands(app);
  ql::cli::RegisterPoolCommands(app);
  ql::cli::RegisterWorkerCommands(app);
  ql::cli::RegisterCompletionCommand(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {
    return e.get_exit_code();  // the command already reported the problem
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help
  } catch (const CLI::ParseError& e) {
    std::string message = e.what();
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::ExtrasError)) {
      message += " (quote an argument that contains spaces, such as a cron expression)";
    }
    // The options were not parsed, so --json is looked for in the raw arguments.
    const bool json = std::find(argv + 1, argv + argc, std::string("--json")) != argv + argc;
    std::cerr << ql::cli::ErrorLine("invalid_usage", message, json) << "\n";
    if (!json) std::cerr << "Run with --help for usage.\n";
    std::cerr.flush();
    return ql::cli::kExitInvalidInput;
  }
  return 0;
}
