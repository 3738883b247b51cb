#pragma once

// Backups of a local data directory (`ql-local backup` / `restore`): a consistent copy of the
// SQLite database taken through SQLite's online backup API while the daemon runs, and the
// backup archive itself, which is a SQLite file too:
//
//   manifest (key, value)                     format, format_version, created_at_ms,
//                                             schema_version, key_included, producer
//   files (id, path, mode, size, sha256)      one row per file, path relative to the data
//                                             directory ('/'-separated), permission bits only
//   chunks (file_id, seq, data)               the file's bytes in chunks of at most 1 MiB
//
// Neither side holds a whole file in memory: a file is written and read one chunk at a time,
// and its SHA-256 is computed while it streams. No SQLite type appears here.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ql/core/status.h"

namespace ql {

inline constexpr char kBackupFormat[] = "qinglong-local-backup";
inline constexpr int64_t kBackupFormatVersion = 1;
inline constexpr size_t kBackupChunkBytes = 1024 * 1024;

// What a backup archive says about itself.
struct BackupManifest {
  int64_t format_version = kBackupFormatVersion;
  int64_t created_at_ms = 0;
  std::string schema_version;  // the last migration applied to the database in the backup
  bool key_included = false;   // whether secret.key is one of the files
  std::string producer;        // "ql-local <version>"
};

// One file of a backup archive.
struct BackupFileEntry {
  int64_t id = 0;
  std::string path;   // relative to the data directory, '/'-separated
  uint32_t mode = 0;  // permission bits (at most 0777)
  int64_t size = 0;
  std::string sha256;  // 64 lowercase hex digits
};

// Copies the database at `source` into a new file `target` through the online backup API, from
// a read-only connection, so the copy is one consistent state even while another process
// writes (a busy source is retried for up to `busy_timeout_ms`). The copy is left in
// rollback-journal mode and checked with quick_check. Returns the id of the last migration
// applied to it. Errors: NotFound `database_missing`, Unavailable `database_busy`, Corrupt
// `database_corrupt` (the copy fails quick_check), or the mapped SQLite error.
Result<std::string> SnapshotSqliteDatabase(const std::string& source, const std::string& target,
                                           int busy_timeout_ms = 30'000);

// Returns Ok when `schema_version` is a migration this build knows, so a daemon of this build
// can open (and upgrade) the database; InvalidArgument `backup_schema_unknown` naming it
// otherwise (a backup made by a newer ql-local).
Status CheckBackupSchema(const std::string& schema_version);

// Writes a new backup archive file.
class BackupArchiveWriter {
 public:
  // Creates the archive at `path`, which must not exist (mode 0600). Unavailable
  // `backup_file_unwritable` when it cannot be created.
  static Result<std::unique_ptr<BackupArchiveWriter>> Create(const std::string& path);
  ~BackupArchiveWriter();
  BackupArchiveWriter(const BackupArchiveWriter&) = delete;
  BackupArchiveWriter& operator=(const BackupArchiveWriter&) = delete;

  // Adds the bytes readable from `fd` (to its end) as file `path` with permission bits `mode`,
  // in chunks of kBackupChunkBytes; returns the entry written. InvalidArgument
  // `backup_path_invalid` for a path that is not relative and plain (ValidateBackupPath),
  // Unavailable `backup_source_unreadable` when `fd` cannot be read.
  Result<BackupFileEntry> AddFile(const std::string& path, uint32_t mode, int fd);

  // Writes the manifest, commits and closes the file durably (fsync). Nothing is readable as a
  // backup until this returns Ok.
  Status Finish(const BackupManifest& manifest);

 private:
  struct Impl;
  explicit BackupArchiveWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Reads a backup archive.
class BackupArchiveReader {
 public:
  // Opens `path` read-only and reads its manifest and file list. NotFound `backup_file_missing`
  // when it does not exist; InvalidArgument `backup_invalid` when it is not a QingLong backup
  // (not SQLite, or no manifest of this format); InvalidArgument `backup_format_unsupported`
  // for a newer format version; Corrupt `backup_corrupt` when its tables are damaged.
  static Result<std::unique_ptr<BackupArchiveReader>> Open(const std::string& path);
  ~BackupArchiveReader();
  BackupArchiveReader(const BackupArchiveReader&) = delete;
  BackupArchiveReader& operator=(const BackupArchiveReader&) = delete;

  const BackupManifest& manifest() const { return manifest_; }
  const std::vector<BackupFileEntry>& files() const { return files_; }

  // Writes the bytes of `file` to `fd` one chunk at a time and checks that the chunks are
  // complete and in order, and that their size and SHA-256 are the recorded ones. Corrupt
  // `backup_corrupt` naming the file otherwise (what was written to `fd` must then be
  // discarded); Unavailable `restore_write_failed` when `fd` cannot be written.
  Status Extract(const BackupFileEntry& file, int fd) const;

 private:
  struct Impl;
  explicit BackupArchiveReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  BackupManifest manifest_;
  std::vector<BackupFileEntry> files_;
};

// Returns Ok when `path` is a plain relative path: not empty, no leading '/', no empty, "." or
// ".." component, no NUL or backslash, at most 4096 bytes. InvalidArgument `backup_path_invalid`
// naming it otherwise. A restore writes only such paths, below the directory it restores into.
Status ValidateBackupPath(const std::string& path);

}  // namespace ql
