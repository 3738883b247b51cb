#pragma once

// `ql-local backup` and `ql-local restore`: a whole local installation in one file, taken while
// the daemon runs, and restored into a new data directory anywhere (log paths are stored
// relative to the log root, so the restored directory need not be where the old one was).
//
// A backup holds db/qinglong.db (a consistent copy through SQLite's online backup API), every
// log file under log/, and secret.key only when asked. It never holds owner.token (a restored
// daemon makes a new one for the same owner), setup.code, server.json, ql-local.lock,
// command-uids, run/ (supervisor records of live commands) or work/ (the tasks' own
// directories). The file format is described in ql/storage/sqlite/sqlite_backup.h.

#include <memory>
#include <string>

#include "ql/core/status.h"

namespace CLI {
class App;
}  // namespace CLI

namespace ql::local {

struct BackupRequest {
  std::string data_dir = "./data";
  std::string to;            // the backup file; written as <to>.tmp, then renamed
  bool include_key = false;  // also store secret.key (with a warning)
};

struct RestoreRequest {
  std::string from;      // a file `ql-local backup` wrote
  std::string data_dir;  // must not exist, or be an empty directory
};

// Writes a backup of `request.data_dir` to `request.to` (mode 0600), replacing the file only
// once the new one is complete. Prints what it wrote on stdout and the secret key warning on
// stderr. Errors: InvalidArgument `data_dir_invalid` (no database there), Unavailable
// `backup_file_unwritable`, `backup_source_unreadable`, `database_busy`, and the store's.
Status Backup(const BackupRequest& request);

// Restores `request.from` into `request.data_dir` with the layout and modes a first start of
// ql-local makes. Every file is written below a temporary directory beside the target and its
// size and SHA-256 verified; only then is the directory renamed into place, so a failure leaves
// nothing behind. Prints what it restored on stdout. Errors: NotFound `backup_file_missing`,
// InvalidArgument `backup_invalid`, `backup_format_unsupported`, `backup_schema_unknown`,
// `backup_path_invalid` (a name that could reach outside the directory), Corrupt
// `backup_corrupt`, Conflict `restore_target_not_empty`, Unavailable `restore_target_unwritable`
// or `restore_write_failed`.
Status Restore(const RestoreRequest& request);

// The `backup` and `restore` subcommands of ql-local, registered on its command line.
class BackupCommands {
 public:
  // Registers both subcommands on `app`.
  explicit BackupCommands(CLI::App& app);
  BackupCommands(const BackupCommands&) = delete;
  BackupCommands& operator=(const BackupCommands&) = delete;
  // Returns true when the command line chose one of them.
  bool parsed() const;
  // Runs the chosen one; returns the process exit status (0 done, 1 failed).
  int Run() const;

 private:
  CLI::App* backup_ = nullptr;
  CLI::App* restore_ = nullptr;
  BackupRequest backup_request_;
  RestoreRequest restore_request_;
};

}  // namespace ql::local
