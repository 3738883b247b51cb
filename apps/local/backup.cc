#include "backup.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string_view>
#include <system_error>
#include <vector>

#include "ql/core/clock.h"
#include "ql/core/rfc3339.h"
#include "ql/storage/sqlite/sqlite_backup.h"
#include "ql_version.h"

namespace fs = std::filesystem;

namespace ql::local {
namespace {

constexpr char kDatabaseFile[] = "db/qinglong.db";
constexpr char kKeyFile[] = "secret.key";
constexpr char kLogDir[] = "log";

std::string ErrnoText(int err) { return std::strerror(err); }

// Closes a descriptor when it goes out of scope.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// Removes a file or directory tree on scope exit unless released.
class RemoveOnExit {
 public:
  explicit RemoveOnExit(fs::path path) : path_(std::move(path)) {}
  RemoveOnExit(const RemoveOnExit&) = delete;
  RemoveOnExit& operator=(const RemoveOnExit&) = delete;
  ~RemoveOnExit() {
    if (path_.empty()) return;
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  void Release() { path_.clear(); }

 private:
  fs::path path_;
};

void SyncDirectory(const fs::path& dir) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() >= 0) ::fsync(fd.get());
}

// Adds the regular file at `source` as `name`; a file that vanished meanwhile (a log the
// retention purge removed) is skipped: returns false.
Result<bool> AddFileAt(BackupArchiveWriter& writer, const fs::path& source, const std::string& name,
                       int64_t& bytes) {
  Fd fd(::open(source.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ENOENT) return false;
    return Unavailable("backup_source_unreadable",
                       "cannot open " + source.string() + ": " + ErrnoText(errno));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  QL_ASSIGN_OR_RETURN(BackupFileEntry entry,
                      writer.AddFile(name, static_cast<uint32_t>(st.st_mode & 0777), fd.get()));
  bytes += entry.size;
  return true;
}

// Returns the log files below `log_root` as paths relative to it, sorted; symbolic links and
// other non-regular entries are counted in `skipped`, never followed.
Result<std::vector<std::string>> ListLogs(const fs::path& log_root, int& skipped) {
  std::vector<std::string> out;
  std::error_code ec;
  if (!fs::exists(log_root, ec)) return out;
  fs::recursive_directory_iterator it(log_root, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code type_ec;
    const fs::file_status status = it->symlink_status(type_ec);
    if (type_ec) continue;  // removed while listing
    if (fs::is_directory(status)) continue;
    if (!fs::is_regular_file(status)) {
      ++skipped;
      continue;
    }
    out.push_back(it->path().lexically_relative(log_root).generic_string());
  }
  if (ec && ec != std::errc::no_such_file_or_directory) {
    return Unavailable("backup_source_unreadable",
                       "cannot list " + log_root.string() + ": " + ec.message());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The files a backup may hold, by name: the database, the key, and logs under log/.
bool IsDataDirectoryFile(const std::string& path) {
  return path == kDatabaseFile || path == kKeyFile ||
         path.rfind(std::string(kLogDir) + "/", 0) == 0;
}

// Opens (creating when absent) each directory of `parts` below `dir`, never following a
// symbolic link; returns the innermost one.
Result<int> OpenDirectories(int dir, const std::vector<std::string>& parts, const fs::path& shown) {
  int current = ::dup(dir);
  for (const std::string& part : parts) {
    if (::mkdirat(current, part.c_str(), 0777) != 0 && errno != EEXIST) {
      const int err = errno;
      ::close(current);
      return Unavailable("restore_write_failed",
                         "cannot create a directory of " + shown.string() + ": " + ErrnoText(err));
    }
    const int next =
        ::openat(current, part.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    const int err = errno;
    ::close(current);
    if (next < 0) {
      return InvalidArgument("backup_path_invalid",
                             "the backup's " + shown.string() +
                                 " needs a directory where something else is: " + ErrnoText(err));
    }
    current = next;
  }
  return current;
}

// Writes `file` below the directory `root_fd` (a fresh staging directory), verified.
Status WriteRestoredFile(const BackupArchiveReader& reader, const BackupFileEntry& file,
                         int root_fd) {
  // Judged again where it is used: openat would follow a ".." out of the directory.
  QL_RETURN_IF_ERROR(ValidateBackupPath(file.path));
  std::vector<std::string> parts;
  for (size_t start = 0;;) {
    const size_t end = file.path.find('/', start);
    parts.push_back(file.path.substr(start, end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  const std::string leaf = parts.back();
  parts.pop_back();
  QL_ASSIGN_OR_RETURN(int dir_raw, OpenDirectories(root_fd, parts, file.path));
  Fd dir(dir_raw);
  Fd fd(::openat(dir.get(), leaf.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                 0600));
  if (fd.get() < 0) {
    if (errno == EEXIST) {
      return InvalidArgument("backup_path_invalid",
                             "the backup names " + file.path + " more than once");
    }
    return Unavailable("restore_write_failed",
                       "cannot create " + file.path + ": " + ErrnoText(errno));
  }
  QL_RETURN_IF_ERROR(reader.Extract(file, fd.get()));
  // Group and others never get write access, whatever the backup says.
  if (::fchmod(fd.get(), file.mode & 0755) != 0 || ::fsync(fd.get()) != 0) {
    return Unavailable("restore_write_failed",
                       "cannot finish " + file.path + ": " + ErrnoText(errno));
  }
  ::fsync(dir.get());
  return Status::Ok();
}

Status CheckRestoreTarget(const fs::path& target) {
  std::error_code ec;
  const fs::file_status status = fs::symlink_status(target, ec);
  if (!ec && fs::exists(status)) {
    if (!fs::is_directory(status)) {
      return Conflict("restore_target_not_empty",
                      target.string() +
                          " exists and is not a directory; restore into a new or "
                          "empty directory");
    }
    if (!fs::is_empty(target, ec) || ec) {
      return Conflict("restore_target_not_empty",
                      target.string() +
                          " is not empty; restore into a new or empty directory (a restore "
                          "never overwrites a data directory)");
    }
  }
  const fs::path parent = target.parent_path();
  if (!fs::is_directory(parent, ec)) {
    return Unavailable(
        "restore_target_unwritable",
        "the parent directory " + parent.string() + " of " + target.string() + " does not exist");
  }
  return Status::Ok();
}

}  // namespace

Status Backup(const BackupRequest& request) {
  if (request.to.empty()) {
    return InvalidArgument("invalid_arguments", "--to FILE is required");
  }
  const fs::path data = fs::absolute(request.data_dir).lexically_normal();
  const fs::path database = data / kDatabaseFile;
  std::error_code ec;
  if (!fs::is_regular_file(database, ec)) {
    return InvalidArgument(
        "data_dir_invalid",
        data.string() + " is not a ql-local data directory (no " + kDatabaseFile + ")");
  }
  const fs::path to = fs::absolute(request.to).lexically_normal();
  const fs::path tmp = to.string() + ".tmp";
  const fs::path snapshot = to.string() + ".db.tmp";
  // Leftovers of an interrupted backup to the same file.
  fs::remove(tmp, ec);
  fs::remove(snapshot, ec);
  RemoveOnExit drop_tmp(tmp);
  RemoveOnExit drop_snapshot(snapshot);

  QL_ASSIGN_OR_RETURN(std::unique_ptr<BackupArchiveWriter> writer,
                      BackupArchiveWriter::Create(tmp.string()));
  QL_ASSIGN_OR_RETURN(std::string schema,
                      SnapshotSqliteDatabase(database.string(), snapshot.string()));
  int64_t bytes = 0;
  {
    Fd fd(::open(snapshot.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) {
      return Unavailable("backup_source_unreadable",
                         "cannot read the database copy: " + ErrnoText(errno));
    }
    struct stat st {};
    const uint32_t mode =
        ::stat(database.c_str(), &st) == 0 ? static_cast<uint32_t>(st.st_mode & 0777) : 0600;
    QL_ASSIGN_OR_RETURN(BackupFileEntry entry, writer->AddFile(kDatabaseFile, mode, fd.get()));
    bytes += entry.size;
  }
  fs::remove(snapshot, ec);

  // Logs after the database: every log the copied rows name is there (a log of a run newer
  // than the copy is kept too and simply has no row).
  int skipped = 0;
  QL_ASSIGN_OR_RETURN(std::vector<std::string> logs, ListLogs(data / kLogDir, skipped));
  int log_count = 0;
  for (const std::string& log : logs) {
    QL_ASSIGN_OR_RETURN(bool added, AddFileAt(*writer, data / kLogDir / log,
                                              std::string(kLogDir) + "/" + log, bytes));
    if (added) ++log_count;
  }
  if (request.include_key) {
    QL_ASSIGN_OR_RETURN(bool added, AddFileAt(*writer, data / kKeyFile, kKeyFile, bytes));
    if (!added) {
      return NotFound("secret_key_missing",
                      "--include-key: there is no " + (data / kKeyFile).string());
    }
  }

  BackupManifest manifest;
  manifest.created_at_ms = SystemClock().NowMs();
  manifest.schema_version = schema;
  manifest.key_included = request.include_key;
  manifest.producer = std::string("ql-local ") + kProjectVersion;
  QL_RETURN_IF_ERROR(writer->Finish(manifest));
  writer.reset();
  fs::rename(tmp, to, ec);
  if (ec) {
    return Unavailable("backup_file_unwritable", "cannot rename " + tmp.string() + " to " +
                                                     to.string() + ": " + ec.message());
  }
  drop_tmp.Release();
  SyncDirectory(to.parent_path());

  std::cout << "backup written: " << to.string() << " (database at schema " << schema << ", "
            << log_count << " log file(s), " << bytes << " bytes; secret key "
            << (request.include_key ? "included" : "not included") << ")\n";
  if (skipped > 0) {
    std::cout << skipped << " entr" << (skipped == 1 ? "y" : "ies")
              << " under log/ that are not regular files were left out\n";
  }
  if (request.include_key) {
    std::cerr << "warning: " << to.string()
              << " holds secret.key, the key that opens every secret in it: keep it as safe as "
                 "the secrets themselves\n";
  } else {
    std::cerr << "note: the backup does not hold secret.key; keep a copy of "
              << (data / kKeyFile).string()
              << " somewhere safe and apart from the backup: without it the secrets in the "
                 "backup cannot be opened\n";
  }
  return Status::Ok();
}

Status Restore(const RestoreRequest& request) {
  if (request.from.empty() || request.data_dir.empty()) {
    return InvalidArgument("invalid_arguments", "--from FILE and --data DIR are required");
  }
  QL_ASSIGN_OR_RETURN(std::unique_ptr<BackupArchiveReader> reader,
                      BackupArchiveReader::Open(request.from));
  // Every name is judged before anything is written.
  bool has_database = false;
  bool has_key = false;
  int log_count = 0;
  int64_t bytes = 0;
  for (const BackupFileEntry& file : reader->files()) {
    QL_RETURN_IF_ERROR(ValidateBackupPath(file.path));
    if (!IsDataDirectoryFile(file.path)) {
      return InvalidArgument("backup_path_invalid", "the backup names a file " + file.path +
                                                        " that is not part of a data directory");
    }
    has_database = has_database || file.path == kDatabaseFile;
    has_key = has_key || file.path == kKeyFile;
    if (file.path != kDatabaseFile && file.path != kKeyFile) ++log_count;
    bytes += file.size;
  }
  if (!has_database) {
    return InvalidArgument("backup_invalid", request.from + " holds no database");
  }
  QL_RETURN_IF_ERROR(CheckBackupSchema(reader->manifest().schema_version));

  fs::path target = fs::absolute(request.data_dir).lexically_normal();
  if (!target.has_filename()) target = target.parent_path();  // "dir/" names dir
  QL_RETURN_IF_ERROR(CheckRestoreTarget(target));
  std::string pattern =
      (target.parent_path() / ("." + target.filename().string() + ".restore-XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    return Unavailable(
        "restore_target_unwritable",
        "cannot create a directory in " + target.parent_path().string() + ": " + ErrnoText(errno));
  }
  const fs::path staging = pattern;
  RemoveOnExit drop_staging(staging);
  Fd root(::open(staging.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (root.get() < 0) {
    return Unavailable("restore_target_unwritable",
                       "cannot open " + staging.string() + ": " + ErrnoText(errno));
  }
  // The layout `ql-local serve` makes on a first start: the directory 0700 with db/, log/ and
  // run/ inside.
  for (const char* dir : {"db", "log", "run"}) {
    if (::mkdirat(root.get(), dir, 0777) != 0) {
      return Unavailable("restore_write_failed",
                         "cannot create " + (staging / dir).string() + ": " + ErrnoText(errno));
    }
  }
  for (const BackupFileEntry& file : reader->files()) {
    QL_RETURN_IF_ERROR(WriteRestoredFile(*reader, file, root.get()));
  }
  ::fsync(root.get());
  if (::fchmod(root.get(), 0700) != 0) {
    return Unavailable("restore_write_failed",
                       "cannot set the mode of " + staging.string() + ": " + ErrnoText(errno));
  }
  // Every file is verified; the directory becomes the data directory in one rename (replacing
  // an empty directory of that name).
  if (::rename(staging.c_str(), target.c_str()) != 0) {
    const int err = errno;
    if (err == ENOTEMPTY || err == EEXIST || err == ENOTDIR) {
      return Conflict("restore_target_not_empty",
                      target.string() + " is no longer empty; nothing was restored");
    }
    return Unavailable("restore_target_unwritable", "cannot rename the restored directory to " +
                                                        target.string() + ": " + ErrnoText(err));
  }
  drop_staging.Release();
  SyncDirectory(target.parent_path());

  const BackupManifest& manifest = reader->manifest();
  std::cout << "restored " << request.from << " into " << target.string() << "\n"
            << "  backup made " << FormatRfc3339Utc(manifest.created_at_ms) << " by "
            << (manifest.producer.empty() ? "ql-local" : manifest.producer) << "\n"
            << "  database: " << kDatabaseFile << " (schema " << manifest.schema_version
            << "; ql-local serve applies any newer migration on start)\n"
            << "  logs: " << log_count << " file(s)\n"
            << "  total: " << reader->files().size() << " file(s), " << bytes << " bytes\n";
  if (has_key) {
    std::cout << "  secret key: secret.key restored\n";
  } else {
    std::cout << "  secret key: not in the backup; copy the old secret.key (mode 0600) into "
              << target.string()
              << " before the first start, or the restored secrets cannot be opened\n";
  }
  std::cout << "start it with: ql-local serve --data " << target.string()
            << " (a new owner.token is written on the first start)\n";
  return Status::Ok();
}

BackupCommands::BackupCommands(CLI::App& app) {
  backup_ = app.add_subcommand(
      "backup", "Write a backup of a data directory to one file (while the daemon runs or not)");
  backup_->add_option("--data", backup_request_.data_dir, "Data directory (default ./data)");
  backup_->add_option("--to", backup_request_.to, "The backup file to write (mode 0600)")
      ->required();
  backup_->add_flag("--include-key", backup_request_.include_key,
                    "Also store secret.key: the file then opens every secret");
  restore_ = app.add_subcommand("restore", "Restore a backup into a new data directory");
  restore_->add_option("--from", restore_request_.from, "A file ql-local backup wrote")->required();
  restore_
      ->add_option("--data", restore_request_.data_dir,
                   "The data directory to create (must not exist, or be empty)")
      ->required();
}

bool BackupCommands::parsed() const { return backup_->parsed() || restore_->parsed(); }

int BackupCommands::Run() const {
  const Status status = backup_->parsed() ? Backup(backup_request_) : Restore(restore_request_);
  if (status.ok()) return 0;
  std::cerr << "error: " << status.reason() << ": " << status.message() << "\n";
  return 1;
}

}  // namespace ql::local
