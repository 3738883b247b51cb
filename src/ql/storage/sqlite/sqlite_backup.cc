#include "ql/storage/sqlite/sqlite_backup.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string_view>
#include <thread>
#include <utility>

#include "ql/core/digest.h"
#include "ql/storage/sqlite/sqlite_db.h"
#include "ql/storage/sqlite/sqlite_migrations.h"

namespace ql {
namespace {

// "QLBK": marks the archive as a QingLong backup in the SQLite header (PRAGMA application_id).
constexpr int kBackupApplicationId = 0x514c424b;

constexpr char kCreateTables[] =
    "CREATE TABLE manifest (key TEXT NOT NULL PRIMARY KEY, value TEXT NOT NULL) STRICT;"
    "CREATE TABLE files (id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE, "
    "mode INTEGER NOT NULL, size INTEGER NOT NULL, sha256 TEXT NOT NULL) STRICT;"
    "CREATE TABLE chunks (file_id INTEGER NOT NULL REFERENCES files (id), "
    "seq INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY (file_id, seq)) STRICT;";

// An open SQLite connection, closed on destruction.
struct Connection {
  sqlite3* db = nullptr;
  Connection() = default;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection() {
    if (db != nullptr) sqlite3_close_v2(db);
  }
};

// A prepared statement, finalized on destruction.
struct Statement {
  sqlite3_stmt* stmt = nullptr;
  Statement() = default;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement() {
    if (stmt != nullptr) sqlite3_finalize(stmt);
  }
};

Status Mapped(sqlite3* db, int rc, std::string_view operation) {
  return sqlite::StatusFromSqlite(rc, db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc),
                                  operation);
}

Status OpenConnection(const std::string& path, int flags, Connection& out,
                      std::string_view operation) {
  const int rc = sqlite3_open_v2(path.c_str(), &out.db, flags | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) return Mapped(out.db, rc, operation);
  sqlite3_extended_result_codes(out.db, 1);
  return Status::Ok();
}

Status Exec(sqlite3* db, const std::string& sql, std::string_view operation) {
  char* error = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error);
  sqlite3_free(error);
  if (rc != SQLITE_OK) return Mapped(db, rc, operation);
  return Status::Ok();
}

Status Prepare(sqlite3* db, std::string_view sql, Statement& out, std::string_view operation) {
  const int rc =
      sqlite3_prepare_v2(db, sql.data(), static_cast<int>(sql.size()), &out.stmt, nullptr);
  if (rc != SQLITE_OK) return Mapped(db, rc, operation);
  return Status::Ok();
}

// Returns the first column of the only row of `sql` as text ("" for NULL or no row).
Result<std::string> QueryText(sqlite3* db, std::string_view sql, std::string_view operation) {
  Statement s;
  QL_RETURN_IF_ERROR(Prepare(db, sql, s, operation));
  const int rc = sqlite3_step(s.stmt);
  if (rc == SQLITE_DONE) return std::string();
  if (rc != SQLITE_ROW) return Mapped(db, rc, operation);
  const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(s.stmt, 0));
  return text == nullptr ? std::string()
                         : std::string(text, static_cast<size_t>(sqlite3_column_bytes(s.stmt, 0)));
}

std::string ErrnoText(int err) { return std::strerror(err); }

bool WriteAll(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

Status BackupCorrupt(const std::string& path, const std::string& what) {
  return Corrupt("backup_corrupt", "the backup's copy of " + path + " is damaged: " + what);
}

}  // namespace

Status ValidateBackupPath(const std::string& path) {
  auto invalid = [&](const std::string& why) {
    std::string shown = path.substr(0, 200);
    for (char& c : shown) {
      if (static_cast<unsigned char>(c) < 0x20) c = '?';
    }
    return InvalidArgument("backup_path_invalid",
                           "the backup names a file '" + shown + "' that " + why +
                               "; a restore writes only plain relative paths");
  };
  if (path.empty()) return invalid("is empty");
  if (path.size() > 4096) return invalid("is too long");
  if (path.front() == '/') return invalid("is absolute");
  if (path.find('\0') != std::string::npos || path.find('\\') != std::string::npos) {
    return invalid("holds a NUL byte or a backslash");
  }
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    const std::string_view part(path.data() + start, end - start);
    if (part.empty() || part == "." || part == "..") {
      return invalid("has an empty, '.' or '..' component");
    }
    start = end + 1;
  }
  return Status::Ok();
}

Result<std::string> SnapshotSqliteDatabase(const std::string& source, const std::string& target,
                                           int busy_timeout_ms) {
  struct stat st {};
  if (::stat(source.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return NotFound("database_missing", "no database at " + source);
  }
  Connection from;
  QL_RETURN_IF_ERROR(OpenConnection(source, SQLITE_OPEN_READONLY, from, "opening the database"));
  sqlite3_busy_timeout(from.db, 1000);
  Connection to;
  QL_RETURN_IF_ERROR(OpenConnection(target, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, to,
                                    "creating the database copy"));
  ::chmod(target.c_str(), 0600);

  // One step of every page: the whole copy is read in one read transaction of the source, so
  // it is one committed state whatever the daemon writes meanwhile.
  const auto give_up =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(busy_timeout_ms);
  for (;;) {
    sqlite3_backup* backup = sqlite3_backup_init(to.db, "main", from.db, "main");
    if (backup == nullptr) return Mapped(to.db, sqlite3_errcode(to.db), "copying the database");
    const int step = sqlite3_backup_step(backup, -1);
    const int finish = sqlite3_backup_finish(backup);
    if (step == SQLITE_DONE && finish == SQLITE_OK) break;
    const int primary = step & 0xff;
    if ((primary == SQLITE_BUSY || primary == SQLITE_LOCKED) &&
        std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED) {
      return Unavailable("database_busy", "the database stayed locked for " +
                                              std::to_string(busy_timeout_ms / 1000) +
                                              " s; try again");
    }
    return Mapped(to.db, step != SQLITE_DONE ? step : finish, "copying the database");
  }
  // The copy stands alone: no -wal file beside it, whatever journal the source uses.
  QL_RETURN_IF_ERROR(Exec(to.db, "PRAGMA journal_mode = DELETE", "finishing the database copy"));
  QL_ASSIGN_OR_RETURN(std::string check,
                      QueryText(to.db, "PRAGMA quick_check", "checking the database copy"));
  if (check != "ok") {
    return Corrupt("database_corrupt", "the database copy fails SQLite's quick_check: " + check);
  }
  QL_ASSIGN_OR_RETURN(std::string schema, QueryText(to.db, "SELECT max(id) FROM schema_migrations",
                                                    "reading the database copy's schema version"));
  return schema;
}

Status CheckBackupSchema(const std::string& schema_version) {
  for (const Migration& migration : sqlite::SqliteMainStream().migrations) {
    if (migration.id == schema_version) return Status::Ok();
  }
  return InvalidArgument("backup_schema_unknown",
                         "the backup's database is at schema '" + schema_version +
                             "', which this ql-local does not know (a backup of a newer "
                             "ql-local); restore it with that version or a later one");
}

// ---------------------------------------------------------------------------------------------
// BackupArchiveWriter

struct BackupArchiveWriter::Impl {
  std::string path;
  Connection conn;
};

BackupArchiveWriter::BackupArchiveWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
BackupArchiveWriter::~BackupArchiveWriter() = default;

Result<std::unique_ptr<BackupArchiveWriter>> BackupArchiveWriter::Create(const std::string& path) {
  // Created here, empty and 0600, so the archive is never readable by others for a moment.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    return Unavailable("backup_file_unwritable", "cannot create " + path + ": " + ErrnoText(errno));
  }
  ::close(fd);
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  Status opened = OpenConnection(path, SQLITE_OPEN_READWRITE, impl->conn, "creating the backup");
  // The file is new and is renamed into place only when complete: no journal is needed, and
  // Finish makes it durable with one fsync.
  if (opened.ok()) {
    opened = Exec(impl->conn.db,
                  "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; PRAGMA application_id = " +
                      std::to_string(kBackupApplicationId) + "; BEGIN; " + kCreateTables,
                  "creating the backup");
  }
  if (!opened.ok()) {
    return Unavailable("backup_file_unwritable",
                       "cannot write the backup " + path + ": " + opened.message());
  }
  return std::unique_ptr<BackupArchiveWriter>(new BackupArchiveWriter(std::move(impl)));
}

Result<BackupFileEntry> BackupArchiveWriter::AddFile(const std::string& path, uint32_t mode,
                                                     int fd) {
  QL_RETURN_IF_ERROR(ValidateBackupPath(path));
  sqlite3* db = impl_->conn.db;
  BackupFileEntry entry;
  entry.path = path;
  entry.mode = mode & 0777;
  {
    Statement insert;
    QL_RETURN_IF_ERROR(Prepare(db,
                               "INSERT INTO files (path, mode, size, sha256) VALUES (?, ?, 0, '')",
                               insert, "writing the backup"));
    sqlite3_bind_text(insert.stmt, 1, path.c_str(), static_cast<int>(path.size()),
                      SQLITE_TRANSIENT);
    sqlite3_bind_int64(insert.stmt, 2, entry.mode);
    const int rc = sqlite3_step(insert.stmt);
    if (rc != SQLITE_DONE) return Mapped(db, rc, "writing the backup");
    entry.id = sqlite3_last_insert_rowid(db);
  }
  Statement chunk;
  QL_RETURN_IF_ERROR(Prepare(db, "INSERT INTO chunks (file_id, seq, data) VALUES (?, ?, ?)", chunk,
                             "writing the backup"));
  Sha256Hasher hasher;
  std::string buffer(kBackupChunkBytes, '\0');
  int64_t seq = 0;
  for (;;) {
    // Fill a whole chunk (short reads are merged) so chunks are 1 MiB but the last.
    size_t filled = 0;
    while (filled < buffer.size()) {
      const ssize_t n = ::read(fd, buffer.data() + filled, buffer.size() - filled);
      if (n < 0) {
        if (errno == EINTR) continue;
        return Unavailable("backup_source_unreadable",
                           "cannot read " + path + ": " + ErrnoText(errno));
      }
      if (n == 0) break;
      filled += static_cast<size_t>(n);
    }
    if (filled == 0) break;
    const std::string_view data(buffer.data(), filled);
    hasher.Update(data);
    sqlite3_reset(chunk.stmt);
    sqlite3_bind_int64(chunk.stmt, 1, entry.id);
    sqlite3_bind_int64(chunk.stmt, 2, seq++);
    sqlite3_bind_blob64(chunk.stmt, 3, data.data(), data.size(), SQLITE_STATIC);
    const int rc = sqlite3_step(chunk.stmt);
    if (rc != SQLITE_DONE) return Mapped(db, rc, "writing the backup");
    entry.size += static_cast<int64_t>(filled);
    if (filled < buffer.size()) break;
  }
  entry.sha256 = hasher.FinishHex();
  Statement update;
  QL_RETURN_IF_ERROR(Prepare(db, "UPDATE files SET size = ?, sha256 = ? WHERE id = ?", update,
                             "writing the backup"));
  sqlite3_bind_int64(update.stmt, 1, entry.size);
  sqlite3_bind_text(update.stmt, 2, entry.sha256.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(update.stmt, 3, entry.id);
  const int rc = sqlite3_step(update.stmt);
  if (rc != SQLITE_DONE) return Mapped(db, rc, "writing the backup");
  return entry;
}

Status BackupArchiveWriter::Finish(const BackupManifest& manifest) {
  sqlite3* db = impl_->conn.db;
  const std::pair<std::string, std::string> rows[] = {
      {"format", kBackupFormat},
      {"format_version", std::to_string(manifest.format_version)},
      {"created_at_ms", std::to_string(manifest.created_at_ms)},
      {"schema_version", manifest.schema_version},
      {"key_included", manifest.key_included ? "true" : "false"},
      {"producer", manifest.producer},
  };
  for (const auto& [key, value] : rows) {
    Statement insert;
    QL_RETURN_IF_ERROR(Prepare(db, "INSERT INTO manifest (key, value) VALUES (?, ?)", insert,
                               "writing the backup"));
    sqlite3_bind_text(insert.stmt, 1, key.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(insert.stmt, 2, value.c_str(), -1, SQLITE_TRANSIENT);
    const int rc = sqlite3_step(insert.stmt);
    if (rc != SQLITE_DONE) return Mapped(db, rc, "writing the backup");
  }
  QL_RETURN_IF_ERROR(Exec(db, "COMMIT", "writing the backup"));
  const int rc = sqlite3_close_v2(db);
  impl_->conn.db = nullptr;
  if (rc != SQLITE_OK) return Mapped(nullptr, rc, "closing the backup");
  const int fd = ::open(impl_->path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    return Unavailable("backup_file_unwritable",
                       "cannot flush " + impl_->path + " to disk: " + ErrnoText(err));
  }
  ::close(fd);
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// BackupArchiveReader

struct BackupArchiveReader::Impl {
  std::string path;
  Connection conn;
};

BackupArchiveReader::BackupArchiveReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
BackupArchiveReader::~BackupArchiveReader() = default;

Result<std::unique_ptr<BackupArchiveReader>> BackupArchiveReader::Open(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return NotFound("backup_file_missing", "no backup at " + path + ": " + ErrnoText(errno));
  }
  const Status not_a_backup = InvalidArgument(
      "backup_invalid", path + " is not a QingLong backup (ql-local backup writes one)");
  if (!S_ISREG(st.st_mode)) return not_a_backup;
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  if (!OpenConnection(path, SQLITE_OPEN_READONLY, impl->conn, "opening the backup").ok()) {
    return not_a_backup;
  }
  sqlite3* db = impl->conn.db;
  Result<std::string> application_id = QueryText(db, "PRAGMA application_id", "reading");
  if (!application_id.ok() || *application_id != std::to_string(kBackupApplicationId)) {
    return not_a_backup;
  }

  BackupManifest manifest;
  std::string format;
  bool has_version = false;
  {
    Statement s;
    if (!Prepare(db, "SELECT key, value FROM manifest", s, "reading the backup").ok()) {
      return not_a_backup;
    }
    for (;;) {
      const int rc = sqlite3_step(s.stmt);
      if (rc == SQLITE_DONE) break;
      if (rc != SQLITE_ROW) return BackupCorrupt("the manifest", sqlite3_errmsg(db));
      const std::string key = reinterpret_cast<const char*>(sqlite3_column_text(s.stmt, 0));
      const char* raw = reinterpret_cast<const char*>(sqlite3_column_text(s.stmt, 1));
      const std::string value = raw != nullptr ? raw : "";
      if (key == "format") {
        format = value;
      } else if (key == "format_version") {
        has_version = !value.empty() &&
                      value.find_first_not_of("0123456789") == std::string::npos &&
                      value.size() < 10;
        if (has_version) manifest.format_version = std::stoll(value);
      } else if (key == "created_at_ms") {
        manifest.created_at_ms = std::strtoll(value.c_str(), nullptr, 10);
      } else if (key == "schema_version") {
        manifest.schema_version = value;
      } else if (key == "key_included") {
        manifest.key_included = value == "true";
      } else if (key == "producer") {
        manifest.producer = value;
      }
    }
  }
  if (format != kBackupFormat || !has_version) return not_a_backup;
  if (manifest.format_version != kBackupFormatVersion) {
    return InvalidArgument("backup_format_unsupported",
                           path + " is a backup of format version " +
                               std::to_string(manifest.format_version) + "; this ql-local reads " +
                               std::to_string(kBackupFormatVersion));
  }

  std::vector<BackupFileEntry> files;
  {
    Statement s;
    if (!Prepare(db, "SELECT id, path, mode, size, sha256 FROM files ORDER BY id", s,
                 "reading the backup")
             .ok()) {
      return BackupCorrupt("the file list", sqlite3_errmsg(db));
    }
    for (;;) {
      const int rc = sqlite3_step(s.stmt);
      if (rc == SQLITE_DONE) break;
      if (rc != SQLITE_ROW) return BackupCorrupt("the file list", sqlite3_errmsg(db));
      BackupFileEntry entry;
      entry.id = sqlite3_column_int64(s.stmt, 0);
      const char* file_path = reinterpret_cast<const char*>(sqlite3_column_text(s.stmt, 1));
      entry.path =
          file_path != nullptr
              ? std::string(file_path, static_cast<size_t>(sqlite3_column_bytes(s.stmt, 1)))
              : "";
      const int64_t mode = sqlite3_column_int64(s.stmt, 2);
      entry.size = sqlite3_column_int64(s.stmt, 3);
      const char* digest = reinterpret_cast<const char*>(sqlite3_column_text(s.stmt, 4));
      entry.sha256 = digest != nullptr ? digest : "";
      // Permission bits only: a file type (a symlink, a device) is never restored.
      if (mode < 0 || mode > 0777) {
        return InvalidArgument("backup_path_invalid",
                               "the backup gives " + entry.path + " the mode " +
                                   std::to_string(mode) +
                                   ", which is not permission bits of a regular file");
      }
      entry.mode = static_cast<uint32_t>(mode);
      if (entry.size < 0 || !IsSha256Hex(entry.sha256)) {
        return BackupCorrupt(entry.path, "its size or digest is malformed");
      }
      files.push_back(std::move(entry));
    }
  }
  auto reader = std::unique_ptr<BackupArchiveReader>(new BackupArchiveReader(std::move(impl)));
  reader->manifest_ = std::move(manifest);
  reader->files_ = std::move(files);
  return reader;
}

Status BackupArchiveReader::Extract(const BackupFileEntry& file, int fd) const {
  sqlite3* db = impl_->conn.db;
  Statement s;
  if (!Prepare(db, "SELECT seq, data FROM chunks WHERE file_id = ? ORDER BY seq", s,
               "reading the backup")
           .ok()) {
    return BackupCorrupt(file.path, sqlite3_errmsg(db));
  }
  sqlite3_bind_int64(s.stmt, 1, file.id);
  Sha256Hasher hasher;
  int64_t expected_seq = 0;
  int64_t size = 0;
  for (;;) {
    const int rc = sqlite3_step(s.stmt);
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) return BackupCorrupt(file.path, sqlite3_errmsg(db));
    if (sqlite3_column_int64(s.stmt, 0) != expected_seq++) {
      return BackupCorrupt(file.path, "a chunk is missing");
    }
    const void* data = sqlite3_column_blob(s.stmt, 1);
    const int bytes = sqlite3_column_bytes(s.stmt, 1);
    if (bytes <= 0 || static_cast<size_t>(bytes) > kBackupChunkBytes) {
      return BackupCorrupt(file.path, "a chunk has an impossible size");
    }
    size += bytes;
    if (size > file.size) return BackupCorrupt(file.path, "it is longer than recorded");
    hasher.Update(std::string_view(static_cast<const char*>(data), static_cast<size_t>(bytes)));
    if (!WriteAll(fd, data, static_cast<size_t>(bytes))) {
      return Unavailable("restore_write_failed",
                         "cannot write " + file.path + ": " + ErrnoText(errno));
    }
  }
  if (size != file.size) return BackupCorrupt(file.path, "it is shorter than recorded");
  if (!ConstantTimeEquals(hasher.FinishHex(), file.sha256)) {
    return BackupCorrupt(file.path, "its SHA-256 is not the recorded one");
  }
  return Status::Ok();
}

}  // namespace ql
