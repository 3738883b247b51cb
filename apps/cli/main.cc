// The `ql` command-line client. Each command group registers itself here.
#include <CLI/CLI.hpp>
#include <iostream>

#include "cron_command.h"
#include "governance_command.h"
#include "run_command.h"
#include "status_command.h"
#include "task_command.h"
#include "trigger_command.h"

int main(int argc, char** argv) {
  CLI::App app{"QingLong command-line client", "ql"};
  app.require_subcommand(1);
  ql::cli::RegisterCronCommands(app);
  ql::cli::RegisterTaskCommands(app);
  ql::cli::RegisterTriggerCommands(app);
  ql::cli::RegisterRunCommands(app);
  ql::cli::RegisterStatusCommand(app);
  ql::cli::RegisterGovernanceCommands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {
    return e.get_exit_code();  // the command already reported the problem
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help
  } catch (const CLI::ParseError& e) {
    std::cerr << "error: invalid_usage: " << e.what();
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::ExtrasError)) {
      std::cerr << " (quote an argument that contains spaces, such as a cron expression)";
    }
    std::cerr << "\nRun with --help for usage." << std::endl;
    return ql::cli::kExitInvalidInput;
  }
  return 0;
}
