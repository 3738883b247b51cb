#pragma once

// `ql script push|list|show|cat|history|diff|rm`: the script library of a project over the HTTP
// API (/api/v1/scripts, /api/v1/blobs).
//
//   ql script push NAME PATH [--entry FILE]   a file, or a directory tree (symbolic links and
//                                             .git are left out); files are sent in pieces of
//                                             one chunk (1 MiB), the server digests them
//   ql script list                            names, latest versions, status
//   ql script show NAME[@VERSION]             a version: digest, entry, files
//   ql script cat NAME[@VERSION] [--path P]   a file's bytes, checked against its digest
//   ql script history NAME                    every stored version, newest first
//   ql script diff NAME[@A] [B]               unified diff (diff -u) of two versions (default:
//                                             the one before A, and A = the latest)
//   ql script rm NAME                         deletes the script; pinned versions stay until
//                                             retention

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "client.h"

namespace ql::cli {

// One file of a tree to push: its path in the tree and where it is on disk.
struct LocalScriptFile {
  std::string path;
  std::string disk_path;
  bool executable = false;
};

// Lists the regular files below `dir` in path order, as tree paths ('/'-separated, relative);
// symbolic links, sockets and the like and any `.git` directory are left out. Usage errors:
// script_path_unreadable.
CliResult<std::vector<LocalScriptFile>> ListScriptTree(const std::string& dir);

// Registers `script` and its subcommands on `app`.
void RegisterScriptCommands(CLI::App& app);

}  // namespace ql::cli
