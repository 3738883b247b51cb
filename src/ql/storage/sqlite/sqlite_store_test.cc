#include "ql/storage/sqlite/sqlite_store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ql/core/canonical_json.h"
#include "ql/core/digest.h"
#include "ql/core/execution_plan.h"
#include "ql/core/ids.h"
#include "ql/core/migration_stream.h"
#include "ql/storage/sqlite/sqlite_db.h"
#include "ql/storage/sqlite/sqlite_migrations.h"
#include "ql/testing/fake_clock.h"
#include "ql/testing/repository_contract.h"
#include "ql/testing/unique_index_contract.h"

namespace ql {
namespace {

namespace fs = std::filesystem;

// A temporary directory removed with everything in it when destroyed.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "ql-sqlite-XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  std::string File(const std::string& name) const { return (fs::path(path_) / name).string(); }

 private:
  std::string path_;
};

// A store on a file of its own, deleted with it.
class TempFileStore final : public Store {
 public:
  TempFileStore(std::unique_ptr<TempDir> dir, std::unique_ptr<SqliteStore> store)
      : dir_(std::move(dir)), store_(std::move(store)) {}
  ProjectRepository& projects() override { return store_->projects(); }
  DefinitionRepository& definitions() override { return store_->definitions(); }
  ScheduleRepository& schedules() override { return store_->schedules(); }
  RunRepository& runs() override { return store_->runs(); }
  GovernanceRepository& governance() override { return store_->governance(); }
  ApprovalRepository& approvals() override { return store_->approvals(); }
  RetentionRepository& retention() override { return store_->retention(); }
  SecretRepository& secrets() override { return store_->secrets(); }
  NotificationRepository& notifications() override { return store_->notifications(); }
  ArtifactRepository& artifacts() override { return store_->artifacts(); }
  // The database file.
  std::string path() const { return dir_->File("qinglong.db"); }

 private:
  std::unique_ptr<TempDir> dir_;  // outlives the store: declared first, destroyed last
  std::unique_ptr<SqliteStore> store_;
};

// Flips one byte of a stored artifact chunk on a connection of its own, as a disk or an operator
// could; the trigger that keeps chunks immutable is dropped first.
void CorruptChunk(Store& store, const std::string& chunk_digest) {
  auto* file = dynamic_cast<TempFileStore*>(&store);
  ASSERT_NE(file, nullptr) << "not a store of FileFactory";
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(file->path().c_str(), &db), SQLITE_OK);
  std::unique_ptr<sqlite3, int (*)(sqlite3*)> closer(db, sqlite3_close);
  sqlite3_busy_timeout(db, 5000);
  ASSERT_EQ(sqlite3_exec(db, "DROP TRIGGER IF EXISTS artifact_chunks_immutable", nullptr, nullptr,
                         nullptr),
            SQLITE_OK)
      << sqlite3_errmsg(db);
  std::string bytes;
  {
    sqlite3_stmt* read = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT bytes FROM artifact_chunks WHERE digest = ?1", -1,
                                 &read, nullptr),
              SQLITE_OK)
        << sqlite3_errmsg(db);
    sqlite3_bind_text(read, 1, chunk_digest.c_str(), -1, SQLITE_TRANSIENT);
    if (sqlite3_step(read) == SQLITE_ROW) {
      bytes.assign(static_cast<const char*>(sqlite3_column_blob(read, 0)),
                   static_cast<size_t>(sqlite3_column_bytes(read, 0)));
    }
    sqlite3_finalize(read);
  }
  ASSERT_FALSE(bytes.empty()) << "no chunk " << chunk_digest;
  bytes[bytes.size() / 2] ^= 0x01;
  sqlite3_stmt* write = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "UPDATE artifact_chunks SET bytes = ?2 WHERE digest = ?1", -1,
                               &write, nullptr),
            SQLITE_OK)
      << sqlite3_errmsg(db);
  sqlite3_bind_text(write, 1, chunk_digest.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_blob(write, 2, bytes.data(), static_cast<int>(bytes.size()), SQLITE_TRANSIENT);
  const int rc = sqlite3_step(write);
  sqlite3_finalize(write);
  ASSERT_EQ(rc, SQLITE_DONE) << sqlite3_errmsg(db);
  ASSERT_EQ(sqlite3_changes(db), 1);
}

testing::StoreFactory FileFactory(const std::string& profile) {
  return testing::StoreFactory{
      .name = profile,
      .make = [profile]() -> std::unique_ptr<Store> {
        auto dir = std::make_unique<TempDir>();
        testing::FakeClock clock;
        SqliteOptions options;
        options.path = dir->File("qinglong.db");
        options.profile = profile;
        Result<std::unique_ptr<SqliteStore>> store = SqliteStore::Open(options, clock);
        if (!store.ok()) {
          ADD_FAILURE() << store.status().ToString();
          return nullptr;
        }
        return std::make_unique<TempFileStore>(std::move(dir), std::move(store).value());
      },
      .database_clock_ms = nullptr,
      .corrupt_chunk = CorruptChunk};
}

}  // namespace
}  // namespace ql

QL_INSTANTIATE_REPOSITORY_CONTRACT(Sqlite, ::ql::FileFactory("edge"),
                                   ::ql::FileFactory("standalone"));

namespace ql {
namespace {

SqliteOptions Options(const std::string& path, const std::string& profile = "standalone") {
  SqliteOptions options;
  options.path = path;
  options.profile = profile;
  return options;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Runs SQL on a separate raw connection, as an operator or another process would.
class RawConnection {
 public:
  explicit RawConnection(const std::string& path) {
    EXPECT_EQ(sqlite3_open(path.c_str(), &db_), SQLITE_OK);
    sqlite3_busy_timeout(db_, 5000);
  }
  ~RawConnection() { sqlite3_close(db_); }
  // Returns the SQLite result code of executing `sql`.
  int Exec(const std::string& sql) {
    char* error = nullptr;
    const int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &error);
    if (error != nullptr) last_error_ = error;
    sqlite3_free(error);
    return sqlite3_extended_errcode(db_) != SQLITE_OK && rc != SQLITE_OK
               ? sqlite3_extended_errcode(db_)
               : rc;
  }
  std::string Text(const std::string& sql) {
    sqlite3_stmt* stmt = nullptr;
    std::string out;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK &&
        sqlite3_step(stmt) == SQLITE_ROW && sqlite3_column_text(stmt, 0) != nullptr) {
      out = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
    }
    sqlite3_finalize(stmt);
    return out;
  }
  const std::string& last_error() const { return last_error_; }

 private:
  sqlite3* db_ = nullptr;
  std::string last_error_;
};

#define ASSERT_OK_AND_MOVE(lhs, expr)                                                             \
  auto QL_CONCAT_(tmp_, __LINE__) = (expr);                                                       \
  ASSERT_TRUE(QL_CONCAT_(tmp_, __LINE__).ok()) << QL_CONCAT_(tmp_, __LINE__).status().ToString(); \
  lhs = std::move(QL_CONCAT_(tmp_, __LINE__)).value()

// The migrations that have landed. Their ids and checksums never change: an edit to a landed
// migration fails here and must become a new migration instead.
TEST(SqliteMigrationsTest, LandedIdsAndChecksumsArePinned) {
  const std::vector<std::pair<std::string, std::string>> landed = {
      {"0001-history-and-capabilities",
       "3f2dd2d6910b61cdb50a9ae14103125b915029054b58274e24c08aa7566277fa"},
      {"0002-projects-and-definitions",
       "27f66459b00b2a1c93165144de2b46629deb4f075bb6b029c32dbc113f39ae66"},
      {"0003-schedules", "32042587026ba1244fa8f8edabd6406980f660297c7870937085c21f6b17d210"},
      {"0004-runs", "11570c80ca47b59504be7d34e59f071d071daf400153a3ca705367c296bd09e8"},
      {"0005-governance", "7383a50490135e5ad625dee6227a1bc9c7b33150db406296c2d3c7707455cd17"},
      {"0006-approvals", "15b1d407a2fdb125147b894de39f7d407aea5d483c4279192501bfa5667c99f0"},
      {"0007-retention", "a0e068328c04e39cadd27f2991ec6b25e11a5e3c2201e8ec01191d8135070574"},
      {"0008-secrets", "ea66eef9cbd0791fa3e4217ba6e8fb8c03f7770eba53d49d492459d06b8bb4d6"},
      {"0009-approval-evidence-and-retries",
       "dfb60aebf996f2d0752bcbf917e3254501b6e269e13635a09e742ce0a189d915"},
      {"0010-overlap", "9a8bdf6ec70c37bc36bff906eee0d9e68a3c4dcbaa89223d47b3ec98d7ca988d"},
      {"0011-names-and-tombstones",
       "805a0be3530e41fa7fe46faecca6fe81b8e1b97ec3703ed9dea5b4a588896276"},
      {"0012-trigger-jitter", "f20087a4ac3f1ce0d567497b96ab87829dc1fdfabc60a6c5001d9d13fe80f4e0"},
      {"0013-sign-in", "74915d2bf9f6e22292a64ddbe3e3d8ddd9aaea433d248dfcde930167f81512e4"},
      {"0014-published-by", "46c5e8636f6f1db1e0ddcf2ccdca273801de06bfa8724ea0044fc608289d726a"},
      {"0015-sign-in-policies", "33821fe954b285a83c7c41ac9c1202aa6983af385896d6210ef1f71aafff0a18"},
      {"0016-notifications", "bbdbf4ba1ed7c4b95c417a060bee61e32859165267f91ca7b10994f9dc846db5"},
      {"0017-retry-on-timeout", "9cb06400c917e6dd9a76781440c2358e75e4464afea9729881e59fee4800bb51"},
      {"0018-relative-log-paths",
       "3ebfe442434aec17d132b46d61878c2d2ab7253ecf37e0aab689aac66f668fb5"},
      {"0019-artifacts", "96cf71aac3442a0e6927a1db44b795d7687b4dc29e85fd4524ffaec9daa590fe"},
  };
  const MigrationStream& stream = sqlite::SqliteMainStream();
  EXPECT_EQ(stream.name, "sqlite-main");
  EXPECT_EQ(stream.dialect, "sqlite");
  ASSERT_GE(stream.migrations.size(), landed.size());
  for (size_t i = 0; i < landed.size(); ++i) {
    EXPECT_EQ(stream.migrations[i].id, landed[i].first);
    EXPECT_EQ(stream.migrations[i].checksum, landed[i].second) << landed[i].first;
    EXPECT_EQ(Sha256Hex(stream.migrations[i].sql), stream.migrations[i].checksum);
  }
  const Status valid = ValidateStream(stream);
  EXPECT_TRUE(valid.ok()) << valid.ToString();
}

TEST(SqliteMigrationsTest, CapabilityMapIsCanonicalAndWrittenByAKnownMigration) {
  const sqlite::SchemaCapability& capability = sqlite::ExpectedCapability();
  EXPECT_EQ(capability.name, "local-control-core");
  EXPECT_EQ(capability.version, 16);
  Result<nlohmann::json> map = ParseJsonStrict(capability.capability_map);
  ASSERT_TRUE(map.ok()) << map.status().ToString();
  EXPECT_EQ(internal::CanonicalJsonLossy(*map), capability.capability_map);
  bool known = false;
  for (const Migration& migration : sqlite::SqliteMainStream().migrations) {
    known = known || migration.id == capability.migration_id;
  }
  EXPECT_TRUE(known);
}

TEST(SqliteStoreTest, OpenAppliesEveryMigrationWithHistoryAndCapability) {
  TempDir dir;
  testing::FakeClock clock;
  ASSERT_OK_AND_MOVE(std::unique_ptr<SqliteStore> store,
                     SqliteStore::Open(Options(dir.File("a.db")), clock));
  ASSERT_OK_AND_MOVE(std::vector<SqliteHistoryRow> history, store->History());
  const MigrationStream& stream = sqlite::SqliteMainStream();
  ASSERT_EQ(history.size(), stream.migrations.size());
  for (size_t i = 0; i < history.size(); ++i) {
    EXPECT_EQ(history[i].id, stream.migrations[i].id);
    EXPECT_EQ(history[i].checksum, stream.migrations[i].checksum);
    EXPECT_EQ(history[i].stream, "sqlite-main");
    EXPECT_EQ(history[i].dialect, "sqlite");
    EXPECT_EQ(history[i].applied_at_ms, clock.NowMs());
  }
  ASSERT_OK_AND_MOVE(std::vector<SqliteCapabilityRow> capabilities, store->Capabilities());
  ASSERT_EQ(capabilities.size(), 1u);
  EXPECT_EQ(capabilities[0].name, sqlite::ExpectedCapability().name);
  EXPECT_EQ(capabilities[0].version, sqlite::ExpectedCapability().version);
  EXPECT_EQ(capabilities[0].capability_map, sqlite::ExpectedCapability().capability_map);
  EXPECT_EQ(capabilities[0].migration_id, sqlite::ExpectedCapability().migration_id);
}

TEST(SqliteStoreTest, ProfilesApplyTheirPragmas) {
  TempDir dir;
  testing::FakeClock clock;
  {
    ASSERT_OK_AND_MOVE(std::unique_ptr<SqliteStore> edge,
                       SqliteStore::Open(Options(dir.File("edge.db"), "edge"), clock));
    ASSERT_OK_AND_MOVE(SqliteSettings settings, edge->Settings());
    EXPECT_EQ(settings.journal_mode, "delete");
    EXPECT_EQ(settings.cache_size, -4096);
    EXPECT_EQ(settings.mmap_size, 0);
    EXPECT_EQ(settings.synchronous, 2);
    EXPECT_TRUE(settings.foreign_keys);
    EXPECT_EQ(settings.busy_timeout_ms, 5000);
  }
  {
    ASSERT_OK_AND_MOVE(std::unique_ptr<SqliteStore> standalone,
                       SqliteStore::Open(Options(dir.File("standalone.db")), clock));
    ASSERT_OK_AND_MOVE(SqliteSettings settings, standalone->Settings());
    EXPECT_EQ(settings.journal_mode, "wal");
    EXPECT_EQ(settings.cache_size, -16384);
    EXPECT_EQ(settings.synchronous, 1);
    EXPECT_TRUE(settings.foreign_keys);
  }
  // The journal mode is a property of the file: another connection sees it too.
  EXPECT_EQ(RawConnection(dir.File("standalone.db")).Text("PRAGMA journal_mode"), "wal");
  EXPECT_EQ(RawConnection(dir.File("edge.db")).Text("PRAGMA journal_mode"), "delete");
}

TEST(SqliteStoreTest, ReopenIsIdempotentAndKeepsData) {
  TempDir dir;
  testing::FakeClock clock;
  testing::SeededRandom random(7);
  const std::string path = dir.File("a.db");
  std::string project_id;
  std::vector<SqliteHistoryRow> first_history;
  {
    ASSERT_OK_AND_MOVE(std::unique_ptr<SqliteStore> store, SqliteStore::Open(Options(path), clock));
    ASSERT_OK_AND_MOVE(ProjectRecord project,
                       store->EnsureProject(NewUuidV7(clock.NowMs(), random), "default", "Default",
                                            clock.NowMs()));
    project_id = project.id;
    ASSERT_OK_AND_MOVE(first_history, store->History());
  }
  clock.Advance(60'000);
  for (const char* profile : {"standalone", "edge", "standalone"}) {
    SCOPED_TRACE(profile);
    ASSERT_OK_AND_MOVE(std::unique_ptr<SqliteStore> store,
                       SqliteStore::Open(Options(path, profile), clock));
    ASSERT_OK_AND_MOVE(std::vector<SqliteHistoryRow> history, store->History());
    ASSERT_EQ(history.size(), first_history.size());
    for (size_t i = 0; i < history.size(); ++i) {
      EXPECT_EQ(history[i].applied_at_ms, first_history[i].applied_at_ms);
    }
    ASSERT_OK_AND_MOVE(ProjectRecord project, store->GetProject(project_id));
    EXPECT_EQ(project.slug, "default");
  }
}

// Opens `path` expecting a refusal with `reason`, and checks the file did not change.
void ExpectRefusedUnchanged(const std::string& path, const std::string& reason,
                            StatusCode code = StatusCode::kCorrupt) {
  const std::string before = ReadBytes(path);
  ASSERT_FALSE(before.empty());
  testing::FakeClock clock(2'000'000'000'000);
  for (const char* profile : {"edge", "standalone"}) {
    SCOPED_TRACE(profile);
    Result<std::unique_ptr<SqliteStore>> store = SqliteStore::Open(Options(path, profile), clock);
    ASSERT_FALSE(store.ok());
    EXPECT_EQ(store.status().code(), code) << store.status().ToString();
    EXPECT_EQ(store.status().reason(), reason) << store.status().ToString();
    EXPECT_TRUE(ReadBytes(path) == before) << "a refused database must not be modified";
  }
}

// Creates a current database at `path` and closes it.
void CreateDatabase(const std::string& path) {
  testing::FakeClock clock;
  Result<std::unique_ptr<SqliteStore>> store = SqliteStore::Open(Options(path), clock);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
}

TEST(SqliteStoreTest, NewerDatabaseIsRefusedAndLeftUntouched) {
  TempDir dir;
  const std::string path = dir.File("a.db");
  CreateDatabase(path);
  ASSERT_EQ(RawConnection(path).Exec(
                "INSERT INTO schema_migrations VALUES ('0005-from-a-newer-build', 'sqlite-main', "
                "'sqlite', '" +
                std::string(64, 'a') + "', 1)"),
            SQLITE_OK);
  ExpectRefusedUnchanged(path, std::string(kReasonMigrationUnknown));
}

TEST(SqliteStoreTest, TamperedChecksumIsRefused) {
  TempDir dir;
  const std::string path = dir.File("a.db");
  CreateDatabase(path);
  ASSERT_EQ(
      RawConnection(path).Exec("UPDATE schema_migrations SET checksum = '" + std::string(64, 'b') +
                               "' WHERE id = '0002-projects-and-definitions'"),
      SQLITE_OK);
  ExpectRefusedUnchanged(path, std::string(kReasonMigrationChecksumMismatch));
}

TEST(SqliteStoreTest, GappedHistoryIsRefused) {
  TempDir dir;
  const std::string path = dir.File("a.db");
  CreateDatabase(path);
  ASSERT_EQ(RawConnection(path).Exec("DELETE FROM schema_migrations WHERE id = '0002-projects-and-"
                                     "definitions'"),
            SQLITE_OK);
  ExpectRefusedUnchanged(path, std::string(kReasonMigrationGap));
}

TEST(SqliteStoreTest, DatabaseOfAnotherStreamIsRefused) {
  TempDir dir;
  const std::string path = dir.File("a.db");
  ASSERT_EQ(RawConnection(path).Exec(
                "CREATE TABLE schema_migrations (id TEXT PRIMARY KEY, stream TEXT, dialect TEXT, "
                "checksum TEXT, applied_at_ms INTEGER);"
                "INSERT INTO schema_migrations VALUES ('pg-0001-schema-capability', "
                "'postgresql-main', 'postgresql', '" +
                std::string(64, 'c') + "', 1);"),
            SQLITE_OK);
  ExpectRefusedUnchanged(path, std::string(kReasonMigrationWrongStream));
}

TEST(SqliteStoreTest, ForeignDatabaseWithoutHistoryIsRefused) {
  TempDir dir;
  const std::string path = dir.File("a.db");
  ASSERT_EQ(RawConnection(path).Exec("CREATE TABLE crontab (id INTEGER PRIMARY KEY, cmd TEXT);"
                                     "INSERT INTO crontab (cmd) VALUES ('echo hi');"),
            SQLITE_OK);
  ExpectRefusedUnchanged(path, "migration_history_invalid");
}

TEST(SqliteStoreTest, FileThatIsNotADatabaseIsCorrupt) {
  TempDir dir;
  const std::string path = dir.File("a.db");
  {
    std::ofstream out(path, std::ios::binary);
    out << std::string(4096, 'x');
  }
  ExpectRefusedUnchanged(path, "database_corrupt");
}

TEST(SqliteStoreTest, TamperedCapabilityIsRefused) {
  TempDir dir;
  const std::string path = dir.File("a.db");
  CreateDatabase(path);
  ASSERT_EQ(RawConnection(path).Exec("UPDATE schema_capabilities SET version = version + 1"),
            SQLITE_OK);
  ExpectRefusedUnchanged(path, "capability_invalid");
  ASSERT_EQ(RawConnection(path).Exec(
                "UPDATE schema_capabilities SET version = version - 1, capability_map = '{\"runs\":1}'"),
            SQLITE_OK);
  ExpectRefusedUnchanged(path, "capability_invalid");
}

TEST(SqliteStoreTest, InvalidOptionsAreRejected) {
  TempDir dir;
  testing::FakeClock clock;
  Result<std::unique_ptr<SqliteStore>> cluster =
      SqliteStore::Open(Options(dir.File("a.db"), "cluster"), clock);
  EXPECT_EQ(cluster.status().reason(), "invalid_profile");
  EXPECT_FALSE(fs::exists(dir.File("a.db")));
  Result<std::unique_ptr<SqliteStore>> missing_dir =
      SqliteStore::Open(Options(dir.File("no/such/dir/a.db")), clock);
  EXPECT_EQ(missing_dir.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(missing_dir.status().reason(), "database_cannot_open");
}

TEST(SqliteStoreTest, AppendOnlyTablesRefuseUpdatesInTheDatabaseItself) {
  TempDir dir;
  const std::string path = dir.File("a.db");
  CreateDatabase(path);
  RawConnection raw(path);
  ASSERT_EQ(raw.Exec("PRAGMA foreign_keys = OFF; INSERT INTO run_events VALUES "
                     "('r', 1, 'run.created', 'user', NULL, NULL, '{}', 1)"),
            SQLITE_OK);
  EXPECT_EQ(raw.Exec("UPDATE run_events SET type = 'run.queued'"), SQLITE_CONSTRAINT_TRIGGER);
  EXPECT_EQ(raw.Exec("DELETE FROM run_events"), SQLITE_CONSTRAINT_TRIGGER);
  EXPECT_EQ(raw.Text("SELECT type FROM run_events"), "run.created");
}

// Purge is the one deletion path: a run goes only once finished, its events only with it.
TEST(SqliteStoreTest, OnlyFinishedRunsAndTheirEventsCanBeDeleted) {
  TempDir dir;
  const std::string path = dir.File("a.db");
  CreateDatabase(path);
  RawConnection raw(path);
  ASSERT_EQ(raw.Exec("PRAGMA foreign_keys = OFF; INSERT INTO runs (id, project_id, task_id, "
                     "task_revision, task_digest, execution_revision_id, trigger_type, status, "
                     "version, event_sequence, priority, created_at_ms) VALUES ('r', 'p', 't', 1, '" +
                     std::string(64, 'a') +
                     "', 'e', 'manual', 'running', 1, 1, 0, 1); INSERT INTO run_events VALUES "
                     "('r', 1, 'run.created', 'user', NULL, NULL, '{}', 1)"),
            SQLITE_OK);
  EXPECT_EQ(raw.Exec("DELETE FROM run_events"), SQLITE_CONSTRAINT_TRIGGER);
  EXPECT_EQ(raw.Exec("DELETE FROM runs"), SQLITE_CONSTRAINT_TRIGGER);
  ASSERT_EQ(raw.Exec("UPDATE runs SET status = 'succeeded'"), SQLITE_OK);
  EXPECT_EQ(raw.Exec("UPDATE run_events SET type = 'run.queued'"), SQLITE_CONSTRAINT_TRIGGER);
  EXPECT_EQ(raw.Exec("DELETE FROM run_events"), SQLITE_OK);
  EXPECT_EQ(raw.Exec("DELETE FROM runs"), SQLITE_OK);
  EXPECT_EQ(raw.Text("SELECT count(*) FROM runs"), "0");
}

TEST(SqliteStoreTest, LockedDatabaseAnswersBusyAfterBoundedRetries) {
  for (const char* profile : {"edge", "standalone"}) {
    SCOPED_TRACE(profile);
    TempDir dir;
    const std::string path = dir.File("a.db");
    testing::FakeClock clock;
    testing::SeededRandom random(3);
    SqliteOptions options = Options(path, profile);
    options.busy_timeout_ms = 50;
    options.max_busy_retries = 2;
    ASSERT_OK_AND_MOVE(std::unique_ptr<SqliteStore> store, SqliteStore::Open(options, clock));
    ASSERT_OK_AND_MOVE(ProjectRecord project,
                       store->EnsureProject(NewUuidV7(clock.NowMs(), random), "default", "Default",
                                            clock.NowMs()));

    RawConnection other(path);
    ASSERT_EQ(other.Exec("BEGIN IMMEDIATE"), SQLITE_OK);  // another writer holds the lock
    const auto start = std::chrono::steady_clock::now();
    Result<ProjectRecord> blocked =
        store->EnsureProject(NewUuidV7(clock.NowMs(), random), "second", "Second", clock.NowMs());
    const auto elapsed = std::chrono::steady_clock::now() - start;
    EXPECT_EQ(blocked.status().code(), StatusCode::kBusy) << blocked.status().ToString();
    EXPECT_EQ(blocked.status().reason(), "store_busy");
    // Three attempts of 50 ms each, plus backoff: bounded, never a hang.
    EXPECT_GE(elapsed, std::chrono::milliseconds(150));
    EXPECT_LT(elapsed, std::chrono::seconds(5));
    // Readers are not blocked by a pending writer.
    ASSERT_OK_AND_MOVE(ProjectRecord read, store->GetProject(project.id));
    EXPECT_EQ(read.slug, "default");

    ASSERT_EQ(other.Exec("ROLLBACK"), SQLITE_OK);
    ASSERT_OK_AND_MOVE(
        ProjectRecord second,
        store->EnsureProject(NewUuidV7(clock.NowMs(), random), "second", "Second", clock.NowMs()));
    EXPECT_EQ(second.slug, "second");
  }
}

// Publishes one task and creates one queued manual run; returns the run id.
std::string MakeRun(SqliteStore& store, testing::FakeClock& clock, testing::SeededRandom& random) {
  auto id = [&] { return NewUuidV7(clock.NowMs(), random); };
  Result<ProjectRecord> project = store.EnsureProject(id(), "default", "Default", clock.NowMs());
  EXPECT_TRUE(project.ok()) << project.status().ToString();
  PublishTaskCommand cmd;
  cmd.project_id = project->id;
  cmd.task_id = id();
  cmd.mutation_id = id();
  cmd.now_ms = clock.NowMs();
  cmd.revision.name = "job";
  cmd.revision.kind = "qinglong/command@v1";
  cmd.revision.spec_json = R"({"command":"true"})";
  cmd.revision.labels_json = "{}";
  cmd.revision.content_digest = Sha256Hex("job");
  ExecutionRevisionRecord exec;
  exec.executor_type = "local_process";
  exec.task_digest = cmd.revision.content_digest;
  exec.plan_json = R"({"plan":1})";
  exec.plan_digest = Sha256Hex(cmd.task_id);
  exec.id = ExecutionRevisionId(1, exec.plan_digest);
  cmd.executions = {exec};
  Result<PublishTaskResult> task = store.PublishTaskRevision(cmd);
  EXPECT_TRUE(task.ok()) << task.status().ToString();
  NewRun run;
  run.run_id = id();
  run.attempt_id = id();
  run.project_id = project->id;
  run.task_id = cmd.task_id;
  run.task_revision = 1;
  run.task_digest = cmd.revision.content_digest;
  run.execution_revision_id = exec.id;
  run.executor_type = "local_process";
  run.trigger_type = "api";
  run.actor_type = "user";
  run.now_ms = clock.NowMs();
  Result<RunRecord> created = store.CreateRun(run);
  EXPECT_TRUE(created.ok()) << created.status().ToString();
  return run.run_id;
}

// The SQLite counterparts of PostgreSQL's partial unique indexes, violated for real: a copy of a
// row that the index holds is refused with the same stable code as in PostgreSQL
// (testing::kConditionalUniqueIndexes: what the repository contract expects of both stores),
// without naming a column; the copy moved outside the index is accepted.
TEST(SqliteStoreTest, EveryConditionalUniqueIndexMapsItsViolationAsPostgresDoes) {
  TempDir dir;
  const std::string path = dir.File("a.db");
  testing::FakeClock clock;
  testing::SeededRandom random(17);
  std::string run_id;
  {
    ASSERT_OK_AND_MOVE(std::unique_ptr<SqliteStore> store, SqliteStore::Open(Options(path), clock));
    run_id = MakeRun(*store, clock, random);
  }
  auto id = [&] { return "'" + NewUuidV7(clock.NowMs(), random) + "'"; };
  // A raw connection (foreign keys off): everything below is rolled back.
  ASSERT_OK_AND_MOVE(std::unique_ptr<sqlite::Db> db, sqlite::Db::Open(path, 1000, 3));
  // Copies the row of `table` matching `where` with `set` applied (each NEW_ID in it a fresh
  // id), as one script.
  auto copy = [&](const std::string& table, const std::string& where, std::string set) {
    for (size_t at = set.find("NEW_ID"); at != std::string::npos; at = set.find("NEW_ID")) {
      set.replace(at, 6, id());
    }
    return db->ExecScript(
        "DROP TABLE IF EXISTS temp.copied; CREATE TEMP TABLE copied AS SELECT "
        "* FROM main." +
            table + " WHERE " + where + "; UPDATE copied SET " + set + "; INSERT INTO main." +
            table + " SELECT * FROM copied;",
        "copying a row");
  };
  struct Case {
    std::string table, where, duplicate, outside;
  };
  const std::string project = "(SELECT project_id FROM main.runs LIMIT 1)";
  const std::string keyed_run = id();
  Status body = db->WithConnection([&]() -> Status {
    QL_RETURN_IF_ERROR(db->ExecScript("BEGIN IMMEDIATE", "begin"));
    // The rows the indexes hold: the task head of MakeRun, a trigger head, a live channel, a
    // run with a key and an event with a dedupe key.
    QL_RETURN_IF_ERROR(db->ExecScript(
        "INSERT INTO trigger_heads (trigger_id, project_id, task_id, current_revision, "
        "created_at_ms, updated_at_ms, name) SELECT " +
            id() +
            ", project_id, task_id, 1, 1, 1, 'every' FROM task_heads;"
            "INSERT INTO notification_channels (id, project_id, name, type, config_json, "
            "created_by, created_at_ms) VALUES (" +
            id() + ", " + project + ", 'ops', 'webhook', '{}', 'test', 1);",
        "seeding"));
    QL_RETURN_IF_ERROR(copy("runs", "id = '" + run_id + "'",
                            "id = " + keyed_run + ", idempotency_key = 'client-key'"));
    QL_RETURN_IF_ERROR(copy("run_events", "run_id = '" + run_id + "' AND sequence = 1",
                            "sequence = 100, dedupe_key = 'once'"));
    const std::map<std::string, Case> cases = {
        {"runs.project_id, runs.idempotency_key",
         {"runs", "id = " + keyed_run, "id = NEW_ID", "id = NEW_ID, idempotency_key = NULL"}},
        {"run_events.run_id, run_events.dedupe_key",
         {"run_events", "run_id = '" + run_id + "' AND sequence = 100", "sequence = 101",
          "sequence = 102, dedupe_key = NULL"}},
        {"task_heads.project_id, task_heads.name",
         {"task_heads", "name = 'job'", "task_id = NEW_ID", "task_id = NEW_ID, deleted_at_ms = 1"}},
        {"trigger_heads.project_id, trigger_heads.name",
         {"trigger_heads", "name = 'every'", "trigger_id = NEW_ID",
          "trigger_id = NEW_ID, deleted_at_ms = 1"}},
        {"notification_channels.project_id, notification_channels.name",
         {"notification_channels", "name = 'ops'", "id = NEW_ID",
          "id = NEW_ID, deleted_at_ms = 1"}},
    };
    for (const testing::ConditionalUniqueIndex& index : testing::kConditionalUniqueIndexes) {
      SCOPED_TRACE(std::string(index.postgres_index));
      auto c = cases.find(std::string(index.sqlite_columns));
      EXPECT_NE(c, cases.end()) << "no SQLite case for " << index.sqlite_columns;
      if (c == cases.end()) continue;
      const Status refused = copy(c->second.table, c->second.where, c->second.duplicate);
      EXPECT_EQ(refused.code(), index.code) << refused.ToString();
      EXPECT_EQ(refused.reason(), index.reason) << refused.ToString();
      EXPECT_EQ(refused.message().find(c->second.table + "."), std::string::npos)
          << "no column names leak: " << refused.ToString();
      const Status outside = copy(c->second.table, c->second.where, c->second.outside);
      EXPECT_TRUE(outside.ok()) << outside.ToString();
    }
    return db->ExecScript("ROLLBACK", "rollback");
  });
  EXPECT_TRUE(body.ok()) << body.ToString();
}

TEST(SqliteStoreTest, ConcurrentWritersThroughTwoConnectionsLoseNothing) {
  for (const char* profile : {"edge", "standalone"}) {
    SCOPED_TRACE(profile);
    TempDir dir;
    const std::string path = dir.File("a.db");
    testing::FakeClock clock;
    testing::SeededRandom random(11);
    ASSERT_OK_AND_MOVE(std::unique_ptr<SqliteStore> a,
                       SqliteStore::Open(Options(path, profile), clock));
    ASSERT_OK_AND_MOVE(std::unique_ptr<SqliteStore> b,
                       SqliteStore::Open(Options(path, profile), clock));
    const std::string run_id = MakeRun(*a, clock, random);

    constexpr int kThreadsPerStore = 2;
    constexpr int kEventsPerThread = 25;
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;
    for (SqliteStore* store : {a.get(), b.get()}) {
      for (int t = 0; t < kThreadsPerStore; ++t) {
        threads.emplace_back([&, store] {
          for (int i = 0; i < kEventsPerThread; ++i) {
            Result<EventRecord> event = store->AppendEvent(
                run_id, NewEvent{"attempt.note", "executor", std::nullopt, std::nullopt, "{}"},
                clock.NowMs());
            if (!event.ok()) ++failures;
          }
        });
      }
    }
    for (std::thread& thread : threads) thread.join();
    EXPECT_EQ(failures.load(), 0);
    const int total = 2 + 2 * kThreadsPerStore * kEventsPerThread;
    ASSERT_OK_AND_MOVE(RunRecord run, b->GetRun(run_id));
    EXPECT_EQ(run.event_sequence, total);
    ASSERT_OK_AND_MOVE(std::vector<EventRecord> events, a->ListEvents(run_id, 0, 1000));
    ASSERT_EQ(events.size(), static_cast<size_t>(total));
    for (int i = 0; i < total; ++i) EXPECT_EQ(events[i].sequence, i + 1);
  }
}

TEST(SqliteStoreTest, ConcurrentOpensMigrateOnce) {
  TempDir dir;
  const std::string path = dir.File("a.db");
  testing::FakeClock clock;
  std::vector<std::unique_ptr<SqliteStore>> stores(4);
  std::vector<Status> statuses(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      Result<std::unique_ptr<SqliteStore>> store = SqliteStore::Open(Options(path), clock);
      statuses[i] = store.status();
      if (store.ok()) stores[i] = std::move(store).value();
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const Status& status : statuses) EXPECT_TRUE(status.ok()) << status.ToString();
  ASSERT_NE(stores[0], nullptr);
  ASSERT_OK_AND_MOVE(std::vector<SqliteHistoryRow> history, stores[0]->History());
  EXPECT_EQ(history.size(), sqlite::SqliteMainStream().migrations.size());
}

// SQLite answers some lock requests Busy at once rather than through the busy handler (a
// journal-mode change while another connection migrates): connection set-up runs again until
// the busy timeout has passed, then gives up with Busy.
TEST(SqliteStoreTest, ConnectionSetUpRetriesBusyAnswersUntilTheBusyTimeout) {
  TempDir dir;
  auto db = sqlite::Db::Open(dir.File("c.db"), /*busy_timeout_ms=*/300, /*max_busy_retries=*/2);
  ASSERT_TRUE(db.ok()) << db.status().ToString();
  int calls = 0;
  Status passes = (*db)->WithConnection([&]() -> Status {
    return ++calls < 4 ? Busy("store_busy", "locked") : Status();
  });
  EXPECT_TRUE(passes.ok()) << passes.ToString();
  EXPECT_EQ(calls, 4);

  calls = 0;
  const auto start = std::chrono::steady_clock::now();
  Status refused = (*db)->WithConnection([&]() -> Status {
    ++calls;
    return Busy("store_busy", "locked");
  });
  EXPECT_EQ(refused.code(), StatusCode::kBusy);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(300));
  EXPECT_GT(calls, 3);
}

TEST(SqliteErrorMappingTest, ResultCodesMapToStableCategories) {
  using sqlite::StatusFromSqlite;
  EXPECT_EQ(StatusFromSqlite(SQLITE_BUSY, "database is locked", "op").code(), StatusCode::kBusy);
  EXPECT_EQ(StatusFromSqlite(SQLITE_BUSY_SNAPSHOT, "", "op").code(), StatusCode::kBusy);
  EXPECT_EQ(StatusFromSqlite(SQLITE_LOCKED, "", "op").code(), StatusCode::kBusy);

  const Status key = StatusFromSqlite(
      SQLITE_CONSTRAINT_UNIQUE, "UNIQUE constraint failed: runs.project_id, runs.idempotency_key",
      "creating a run");
  EXPECT_EQ(key.code(), StatusCode::kDuplicate);
  EXPECT_EQ(key.reason(), "idempotency_key_duplicate");
  EXPECT_EQ(key.message().find("runs."), std::string::npos) << "no column names leak";
  EXPECT_EQ(
      StatusFromSqlite(SQLITE_CONSTRAINT_UNIQUE,
                       "UNIQUE constraint failed: run_events.run_id, run_events.dedupe_key", "op")
          .reason(),
      "dedupe_key_duplicate");
  const Status id =
      StatusFromSqlite(SQLITE_CONSTRAINT_PRIMARYKEY, "UNIQUE constraint failed: runs.id", "op");
  EXPECT_EQ(id.code(), StatusCode::kDuplicate);
  EXPECT_EQ(id.reason(), "duplicate_id");
  EXPECT_EQ(StatusFromSqlite(SQLITE_CONSTRAINT_UNIQUE,
                             "UNIQUE constraint failed: task_revisions.mutation_id", "op")
                .code(),
            StatusCode::kConflict);
  EXPECT_EQ(
      StatusFromSqlite(SQLITE_CONSTRAINT_FOREIGNKEY, "FOREIGN KEY constraint failed", "op").code(),
      StatusCode::kNotFound);
  EXPECT_EQ(StatusFromSqlite(SQLITE_CONSTRAINT_CHECK, "CHECK constraint failed: x", "op").code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(
      StatusFromSqlite(SQLITE_CONSTRAINT_TRIGGER, "run events are append-only", "op").reason(),
      "row_immutable");
  EXPECT_EQ(StatusFromSqlite(SQLITE_CORRUPT, "", "op").code(), StatusCode::kCorrupt);
  EXPECT_EQ(StatusFromSqlite(SQLITE_NOTADB, "", "op").code(), StatusCode::kCorrupt);
  EXPECT_EQ(StatusFromSqlite(SQLITE_FULL, "", "op").reason(), "storage_full");
  EXPECT_EQ(StatusFromSqlite(SQLITE_IOERR_WRITE, "", "op").code(), StatusCode::kUnavailable);
  EXPECT_EQ(StatusFromSqlite(SQLITE_IOERR_FSYNC, "", "op", sqlite::SqlitePhase::kCommit).code(),
            StatusCode::kOutcomeUnknown);
  EXPECT_EQ(StatusFromSqlite(SQLITE_CANTOPEN, "", "op").code(), StatusCode::kUnavailable);
  EXPECT_EQ(StatusFromSqlite(SQLITE_READONLY, "", "op").code(), StatusCode::kUnavailable);
  EXPECT_EQ(StatusFromSqlite(SQLITE_MISUSE, "bad", "op").code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace ql
