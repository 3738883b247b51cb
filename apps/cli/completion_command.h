#pragma once

// `ql completion bash|zsh`: a shell completion script for ql, generated from the command tree
// itself, so it offers exactly the commands and flags this build has.

#include <string>

namespace CLI {
class App;
}  // namespace CLI

namespace ql::cli {

// Returns the completion script of `root`'s command tree for `shell` ("bash" or "zsh"; zsh
// loads the bash function through bashcompinit).
std::string CompletionScript(const CLI::App& root, const std::string& shell);

void RegisterCompletionCommand(CLI::App& app);

}  // namespace ql::cli
