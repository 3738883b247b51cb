// The backup archive and the online database copy: files stream through in 1 MiB chunks and come
// back byte for byte, and a damaged chunk, a foreign file or a name that could leave the
// restored directory is refused with its code.

#include "ql/storage/sqlite/sqlite_backup.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "ql/core/digest.h"
#include "ql/storage/sqlite/sqlite_migrations.h"
#include "ql/storage/sqlite/sqlite_store.h"
#include "ql/testing/fake_clock.h"

namespace ql {
namespace {

namespace fs = std::filesystem;

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

void WriteFile(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// Runs `sql` on the SQLite file at `path` with a plain connection.
void ExecOn(const fs::path& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* error = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error);
  EXPECT_EQ(rc, SQLITE_OK) << (error != nullptr ? error : "");
  sqlite3_free(error);
  sqlite3_close(db);
}

class SqliteBackupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "ql-backup-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes an archive holding `files` (name → bytes) and returns its path.
  fs::path WriteArchive(const std::vector<std::pair<std::string, std::string>>& files) {
    const fs::path archive = dir_ / "backup.qlb";
    auto writer = BackupArchiveWriter::Create(archive.string());
    EXPECT_TRUE(writer.ok()) << writer.status().ToString();
    for (const auto& [name, bytes] : files) {
      const fs::path source = dir_ / "source";
      WriteFile(source, bytes);
      const int fd = ::open(source.c_str(), O_RDONLY);
      Result<BackupFileEntry> entry = (*writer)->AddFile(name, 0640, fd);
      ::close(fd);
      EXPECT_TRUE(entry.ok()) << entry.status().ToString();
    }
    BackupManifest manifest;
    manifest.created_at_ms = 1'780'000'000'000;
    manifest.schema_version = "0018-relative-log-paths";
    manifest.producer = "ql-local test";
    EXPECT_TRUE((*writer)->Finish(manifest).ok());
    return archive;
  }

  Status ExtractAll(const BackupArchiveReader& reader) {
    for (const BackupFileEntry& file : reader.files()) {
      const fs::path out = dir_ / ("out-" + std::to_string(file.id));
      const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      Status st = reader.Extract(file, fd);
      ::close(fd);
      QL_RETURN_IF_ERROR(st);
    }
    return Status::Ok();
  }

  fs::path dir_;
};

TEST_F(SqliteBackupTest, FilesComeBackByteForByteInMebibyteChunks) {
  std::string big(2 * kBackupChunkBytes + 12345, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 7919) >> 3);
  const fs::path archive =
      WriteArchive({{"db/qinglong.db", big}, {"log/t/r/1.log", "hello\n"}, {"log/t/r/2.log", ""}});
  EXPECT_EQ(fs::status(archive).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);

  auto reader = BackupArchiveReader::Open(archive.string());
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  EXPECT_EQ((*reader)->manifest().schema_version, "0018-relative-log-paths");
  EXPECT_EQ((*reader)->manifest().created_at_ms, 1'780'000'000'000);
  EXPECT_FALSE((*reader)->manifest().key_included);
  ASSERT_EQ((*reader)->files().size(), 3u);
  const BackupFileEntry& db = (*reader)->files()[0];
  EXPECT_EQ(db.path, "db/qinglong.db");
  EXPECT_EQ(db.mode, 0640u);
  EXPECT_EQ(db.size, static_cast<int64_t>(big.size()));
  EXPECT_EQ(db.sha256, Sha256Hex(big));
  ASSERT_TRUE(ExtractAll(**reader).ok());
  EXPECT_EQ(ReadFile(dir_ / ("out-" + std::to_string(db.id))), big);
  EXPECT_EQ(ReadFile(dir_ / ("out-" + std::to_string((*reader)->files()[1].id))), "hello\n");
  EXPECT_EQ(ReadFile(dir_ / ("out-" + std::to_string((*reader)->files()[2].id))), "");
  reader->reset();

  sqlite3* conn = nullptr;
  ASSERT_EQ(sqlite3_open(archive.c_str(), &conn), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(conn, "SELECT count(*), max(length(data)) FROM chunks", -1, &stmt,
                               nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int64(stmt, 0), 4);  // three of the database, one of the first log
  EXPECT_EQ(sqlite3_column_int64(stmt, 1), static_cast<int64_t>(kBackupChunkBytes));
  sqlite3_finalize(stmt);
  sqlite3_close(conn);
}

TEST_F(SqliteBackupTest, ADamagedMissingOrExtraChunkIsRefused) {
  const std::string big(kBackupChunkBytes + 10, 'x');
  for (const std::string& damage :
       {std::string("UPDATE chunks SET data = zeroblob(length(data)) WHERE seq = 1"),
        std::string("DELETE FROM chunks WHERE seq = 0"),
        std::string("UPDATE chunks SET data = CAST(data || x'00' AS BLOB) WHERE seq = 1"),
        std::string("UPDATE files SET sha256 = replace(sha256, substr(sha256, 1, 1), 'f')")}) {
    SCOPED_TRACE(damage);
    const fs::path archive = WriteArchive({{"db/qinglong.db", big}});
    ExecOn(archive, damage);
    auto reader = BackupArchiveReader::Open(archive.string());
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    Status extracted = ExtractAll(**reader);
    EXPECT_EQ(extracted.code(), StatusCode::kCorrupt) << extracted.ToString();
    EXPECT_EQ(extracted.reason(), "backup_corrupt");
    reader->reset();
    fs::remove(archive);
  }
}

TEST_F(SqliteBackupTest, AFileThatIsNotABackupIsRefusedWithItsCode) {
  auto missing = BackupArchiveReader::Open((dir_ / "none").string());
  EXPECT_EQ(missing.status().reason(), "backup_file_missing");

  WriteFile(dir_ / "text", "just some text, not a backup\n");
  EXPECT_EQ(BackupArchiveReader::Open((dir_ / "text").string()).status().reason(),
            "backup_invalid");
  EXPECT_EQ(BackupArchiveReader::Open(dir_.string()).status().reason(), "backup_invalid");

  // A SQLite file of another kind: the daemon's own database.
  testing::FakeClock clock{1'780'000'000'000};
  SqliteOptions options;
  options.path = (dir_ / "q.db").string();
  ASSERT_TRUE(SqliteStore::Open(options, clock).ok());
  EXPECT_EQ(BackupArchiveReader::Open(options.path).status().reason(), "backup_invalid");

  const fs::path newer = WriteArchive({{"db/qinglong.db", "x"}});
  ExecOn(newer, "UPDATE manifest SET value = '2' WHERE key = 'format_version'");
  EXPECT_EQ(BackupArchiveReader::Open(newer.string()).status().reason(),
            "backup_format_unsupported");
}

TEST_F(SqliteBackupTest, NamesThatCouldLeaveTheDirectoryAreRefused) {
  for (const std::string& bad :
       std::vector<std::string>{"", "/etc/passwd", "../x", "log/../../x", "log//x", "log/./x",
                                "log/x/", "a\\b", std::string("a\0b", 3)}) {
    SCOPED_TRACE(bad);
    EXPECT_EQ(ValidateBackupPath(bad).reason(), "backup_path_invalid");
  }
  for (const std::string& good :
       std::vector<std::string>{"db/qinglong.db", "secret.key", "log/t/r/1.log", "log/..x"}) {
    EXPECT_TRUE(ValidateBackupPath(good).ok()) << good;
  }
  // The writer refuses them too, and the reader refuses a mode that is not permission bits
  // (a symbolic link's or a device's).
  auto writer = BackupArchiveWriter::Create((dir_ / "w").string());
  ASSERT_TRUE(writer.ok());
  EXPECT_EQ((*writer)->AddFile("../x", 0600, -1).status().reason(), "backup_path_invalid");
  writer->reset();
  const fs::path archive = WriteArchive({{"log/link", "target"}});
  ExecOn(archive, "UPDATE files SET mode = 41471");  // S_IFLNK | 0777
  EXPECT_EQ(BackupArchiveReader::Open(archive.string()).status().reason(), "backup_path_invalid");
}

TEST_F(SqliteBackupTest, TheDatabaseCopyIsConsistentAndStandsAlone) {
  testing::FakeClock clock{1'780'000'000'000};
  SqliteOptions options;
  options.path = (dir_ / "q.db").string();
  auto store = SqliteStore::Open(options, clock);  // WAL, open while the copy is taken
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const fs::path copy = dir_ / "copy.db";
  Result<std::string> schema = SnapshotSqliteDatabase(options.path, copy.string());
  ASSERT_TRUE(schema.ok()) << schema.status().ToString();
  EXPECT_EQ(*schema, sqlite::SqliteMainStream().migrations.back().id);
  EXPECT_FALSE(fs::exists(copy.string() + "-wal"));
  EXPECT_TRUE(CheckBackupSchema(*schema).ok());
  EXPECT_EQ(CheckBackupSchema("0099-from-the-future").reason(), "backup_schema_unknown");
  // The copy opens as a store of its own.
  SqliteOptions copied;
  copied.path = copy.string();
  EXPECT_TRUE(SqliteStore::Open(copied, clock).ok());

  EXPECT_EQ(SnapshotSqliteDatabase((dir_ / "none.db").string(), (dir_ / "c2.db").string())
                .status()
                .reason(),
            "database_missing");
}

}  // namespace
}  // namespace ql
