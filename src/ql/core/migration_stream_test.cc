#include "ql/core/migration_stream.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cctype>
#include <string>
#include <vector>

namespace ql {
namespace {

using ::testing::HasSubstr;

Migration M(std::string id) {
  std::string sql = "CREATE TABLE t_" + id + " (id INTEGER PRIMARY KEY);";
  return Migration{std::move(id), MigrationChecksum(sql), sql};
}

MigrationStream Sqlite(std::vector<std::string> ids) {
  MigrationStream s{std::string(kSqliteMainStream), std::string(kSqliteDialect), {}};
  for (auto& id : ids) s.migrations.push_back(M(std::move(id)));
  return s;
}

MigrationStream Postgres(std::vector<std::string> ids) {
  MigrationStream s{std::string(kPostgresqlMainStream), std::string(kPostgresqlDialect), {}};
  for (auto& id : ids) s.migrations.push_back(M(std::move(id)));
  return s;
}

// The code's stream used by most history tests.
MigrationStream Code() {
  return Sqlite({"0001-initial", "0002-runs", "0003-attempts", "0004-events"});
}

HistoryRow Row(const MigrationStream& s, std::size_t index) {
  const Migration& m = s.migrations[index];
  return HistoryRow{m.id, m.checksum, s.name, s.dialect};
}

// History rows for the first `n` migrations of `s`, exactly as a migrator would have written.
std::vector<HistoryRow> Prefix(const MigrationStream& s, std::size_t n) {
  std::vector<HistoryRow> rows;
  for (std::size_t i = 0; i < n; ++i) rows.push_back(Row(s, i));
  return rows;
}

std::vector<std::string> Ids(const std::vector<const Migration*>& ms) {
  std::vector<std::string> ids;
  for (const Migration* m : ms) ids.push_back(m->id);
  return ids;
}

TEST(MigrationChecksumTest, IsLowercaseHexSha256OfTheSql) {
  EXPECT_EQ(MigrationChecksum(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(MigrationChecksum("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(MigrationStreamTest, AcceptsWellFormedStreams) {
  EXPECT_TRUE(ValidateStream(Code()).ok());
  EXPECT_TRUE(ValidateStream(Postgres({"pg-0001-schema-capability", "pg-0002-run-core",
                                       "pg-0003-run-retry-policy"}))
                  .ok());
  EXPECT_TRUE(ValidateStream(Sqlite({"0001-a", "0002-v2-b9"})).ok());
  EXPECT_TRUE(ValidateStream(Sqlite({})).ok());
}

TEST(MigrationStreamTest, RejectsUnknownStreamAndWrongDialect) {
  MigrationStream s = Code();
  s.name = "sqlite";
  Status st = ValidateStream(s);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.reason(), "migration_stream_unknown");
  EXPECT_THAT(st.message(), HasSubstr("'sqlite'"));

  s = Code();
  s.dialect = "postgresql";
  st = ValidateStream(s);
  EXPECT_EQ(st.reason(), "migration_dialect_mismatch");
  EXPECT_EQ(st.message(),
            "migration stream 'sqlite-main' has dialect 'postgresql', expected 'sqlite'");

  s = Postgres({"pg-0001-a"});
  s.dialect = "postgres";
  EXPECT_EQ(ValidateStream(s).reason(), "migration_dialect_mismatch");
}

TEST(MigrationStreamTest, RejectsIdsOutsideTheSqliteScheme) {
  for (std::string bad : std::vector<std::string>{"1-a",
                                                  "001-a",
                                                  "00001-a",
                                                  "0001",
                                                  "0001-",
                                                  "0001-A",
                                                  "0001_a",
                                                  "0001-a_b",
                                                  "0001--a",
                                                  "0001-a--b",
                                                  "0001-a-",
                                                  "0000-a",
                                                  "pg-0001-a",
                                                  "0001-a b",
                                                  " 0001-a",
                                                  "0001-\xc3\xa4",
                                                  "0001-" + std::string(124, 'a'),
                                                  "",
                                                  "a001-x",
                                                  "0x01-a"}) {
    Status st = ValidateStream(Sqlite({bad}));
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(st.reason(), "migration_id_malformed") << "'" << bad << "'";
  }
  // The longest allowed id is accepted.
  EXPECT_TRUE(ValidateStream(Sqlite({"0001-" + std::string(123, 'a')})).ok());
  EXPECT_EQ(ValidateStream(Sqlite({"0001-Initial"})).message(),
            "migration id '0001-Initial' in stream 'sqlite-main' does not match "
            "'NNNN-lower-kebab-name'");
}

TEST(MigrationStreamTest, RejectsIdsOutsideThePostgresqlScheme) {
  for (std::string bad : {"0001-a", "PG-0001-a", "pg0001-a", "pg-1-a", "pg-0000-a", "pg-0001",
                          "pg--0001-a", "pg-0001-A", "sqlite-0001-a"}) {
    EXPECT_EQ(ValidateStream(Postgres({bad})).reason(), "migration_id_malformed") << bad;
  }
  EXPECT_EQ(ValidateStream(Postgres({"0001-run-core"})).message(),
            "migration id '0001-run-core' in stream 'postgresql-main' does not match "
            "'pg-NNNN-lower-kebab-name'");
}

TEST(MigrationStreamTest, RejectsDuplicateAndNonContiguousNumbers) {
  Status st = ValidateStream(Sqlite({"0001-a", "0001-b"}));
  EXPECT_EQ(st.reason(), "migration_duplicate");
  EXPECT_EQ(st.message(), "migration id '0001-b' in stream 'sqlite-main' reuses number 0001");
  EXPECT_EQ(ValidateStream(Sqlite({"0001-a", "0002-b", "0001-a"})).reason(), "migration_duplicate");

  st = ValidateStream(Sqlite({"0001-a", "0003-c"}));
  EXPECT_EQ(st.reason(), "migration_gap");
  EXPECT_EQ(st.message(),
            "migration id '0003-c' is at position 2 of stream 'sqlite-main', expected number 0002");
  EXPECT_EQ(ValidateStream(Sqlite({"0002-b"})).reason(), "migration_gap");
  EXPECT_EQ(ValidateStream(Postgres({"pg-0002-b", "pg-0001-a"})).reason(), "migration_gap");
}

TEST(MigrationStreamTest, APrepareMigrationIsFollowedDirectlyByItsCommit) {
  EXPECT_TRUE(ValidateStream(Postgres({"pg-0001-a", "pg-0002-runs-index-prepare",
                                       "pg-0003-runs-index-commit", "pg-0004-b"}))
                  .ok());
  EXPECT_TRUE(IsPrepareMigration("pg-0002-runs-index-prepare"));
  EXPECT_FALSE(IsPrepareMigration("pg-0003-runs-index-commit"));
  EXPECT_TRUE(IsCommitMigration("pg-0003-runs-index-commit"));

  Status st = ValidateStream(Postgres({"pg-0001-runs-index-prepare", "pg-0002-b"}));
  EXPECT_EQ(st.reason(), "migration_prepare_unpaired");
  EXPECT_EQ(st.message(), "prepare migration 'pg-0001-runs-index-prepare' is not followed "
                          "directly by its commit migration");
  EXPECT_EQ(ValidateStream(Postgres({"pg-0001-runs-index-prepare"})).reason(),
            "migration_prepare_unpaired");
  EXPECT_EQ(ValidateStream(Postgres({"pg-0001-runs-index-prepare", "pg-0002-other-commit"}))
                .reason(),
            "migration_prepare_unpaired");
  st = ValidateStream(Postgres({"pg-0001-a", "pg-0002-runs-index-commit"}));
  EXPECT_EQ(st.reason(), "migration_prepare_unpaired");
  EXPECT_EQ(st.message(),
            "commit migration 'pg-0002-runs-index-commit' does not follow its prepare migration");
}

TEST(MigrationStreamTest, RejectsMalformedOrWrongChecksums) {
  for (std::string bad : std::vector<std::string>{
           std::string(""), std::string(63, 'a'), std::string(65, 'a'), std::string(64, 'A'),
           std::string(64, 'g'), "sha256:" + std::string(57, 'a')}) {
    MigrationStream s = Code();
    s.migrations[2].checksum = bad;
    Status st = ValidateStream(s);
    EXPECT_EQ(st.reason(), "migration_checksum_malformed") << bad;
    EXPECT_THAT(st.message(), HasSubstr("'0003-attempts'"));
  }

  MigrationStream s = Code();
  s.migrations[1].sql += "\n-- edited after landing";
  Status st = ValidateStream(s);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.reason(), "migration_checksum_mismatch");
  EXPECT_THAT(st.message(), HasSubstr("'0002-runs'"));
  EXPECT_THAT(st.message(), HasSubstr(MigrationChecksum(s.migrations[1].sql)));
}

TEST(PendingMigrationsTest, ReturnsTheRemainingMigrationsInOrder) {
  const MigrationStream code = Code();
  for (std::size_t applied = 0; applied <= code.migrations.size(); ++applied) {
    Result<std::vector<const Migration*>> pending = PendingMigrations(code, Prefix(code, applied));
    ASSERT_TRUE(pending.ok()) << applied << ": " << pending.status().ToString();
    ASSERT_EQ(pending->size(), code.migrations.size() - applied);
    for (std::size_t i = 0; i < pending->size(); ++i) {
      EXPECT_EQ((*pending)[i], &code.migrations[applied + i]);  // points into the code's list
    }
  }
  const MigrationStream pg = Postgres({"pg-0001-schema-capability", "pg-0002-run-core"});
  Result<std::vector<const Migration*>> pending = PendingMigrations(pg, Prefix(pg, 1));
  ASSERT_TRUE(pending.ok());
  EXPECT_EQ(Ids(*pending), std::vector<std::string>{"pg-0002-run-core"});
}

TEST(PendingMigrationsTest, RejectsAMalformedCodeStreamAsInvalidArgument) {
  MigrationStream code = Sqlite({"0001-a", "0003-c"});
  Result<std::vector<const Migration*>> r = PendingMigrations(code, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().reason(), "migration_gap");
  EXPECT_FALSE(IsMigrationHistoryFault(r.status()));
}

Status Fault(const MigrationStream& code, const std::vector<HistoryRow>& history) {
  Result<std::vector<const Migration*>> r = PendingMigrations(code, history);
  if (r.ok()) return Status::Ok();
  EXPECT_EQ(r.status().code(), StatusCode::kCorrupt) << r.status().ToString();
  EXPECT_TRUE(IsMigrationHistoryFault(r.status())) << r.status().ToString();
  return r.status();
}

TEST(PendingMigrationsTest, WrongStreamOrDialect) {
  const MigrationStream code = Code();
  std::vector<HistoryRow> h = Prefix(code, 2);
  h[1].stream = "postgresql-main";
  Status st = Fault(code, h);
  EXPECT_EQ(st.reason(), "migration_wrong_stream");
  EXPECT_EQ(st.message(),
            "migration history for stream 'sqlite-main' (dialect 'sqlite') holds rows of another "
            "stream or dialect: '0002-runs' (stream 'postgresql-main', dialect 'sqlite')");

  h = Prefix(code, 2);
  h[0].dialect = "postgresql";
  EXPECT_EQ(Fault(code, h).reason(), "migration_wrong_stream");

  // A PostgreSQL database's history offered to the SQLite stream, and the reverse.
  const MigrationStream pg = Postgres({"pg-0001-schema-capability", "pg-0002-run-core"});
  st = Fault(code, Prefix(pg, 2));
  EXPECT_EQ(st.reason(), "migration_wrong_stream");
  EXPECT_THAT(st.message(), HasSubstr("'pg-0001-schema-capability'"));
  EXPECT_THAT(st.message(), HasSubstr("'pg-0002-run-core'"));
  EXPECT_EQ(Fault(pg, Prefix(code, 1)).reason(), "migration_wrong_stream");
}

TEST(PendingMigrationsTest, MalformedHistoryIds) {
  const MigrationStream code = Code();
  for (std::string bad : {"pg-0001-initial", "1-initial", "0001-Initial", "0001_initial", "",
                          "0001-initial ", "0000-zero"}) {
    std::vector<HistoryRow> h = Prefix(code, 1);
    h.push_back(HistoryRow{bad, std::string(64, 'a'), code.name, code.dialect});
    Status st = Fault(code, h);
    EXPECT_EQ(st.reason(), "migration_id_malformed") << bad;
    EXPECT_THAT(st.message(), HasSubstr("'" + bad + "'"));
  }
}

TEST(PendingMigrationsTest, DuplicateHistoryRows) {
  const MigrationStream code = Code();
  std::vector<HistoryRow> h = Prefix(code, 2);
  h.push_back(Row(code, 0));
  h.push_back(Row(code, 0));  // a third copy is still reported once
  Status st = Fault(code, h);
  EXPECT_EQ(st.reason(), "migration_duplicate");
  EXPECT_EQ(st.message(),
            "migration history for stream 'sqlite-main' records more than once: '0001-initial'");

  h = Prefix(code, 2);
  h.push_back(Row(code, 1));
  h.back().checksum = std::string(64, 'b');  // a duplicate with another checksum is a duplicate
  EXPECT_EQ(Fault(code, h).reason(), "migration_duplicate");
}

TEST(PendingMigrationsTest, UnknownIdsMeanTheDatabaseIsAhead) {
  const MigrationStream code = Code();
  MigrationStream newer = Code();
  newer.migrations.push_back(M("0005-leases"));
  newer.migrations.push_back(M("0006-sessions"));
  Status st = Fault(code, Prefix(newer, 6));
  EXPECT_EQ(st.reason(), "migration_unknown");
  EXPECT_EQ(st.message(),
            "migration history for stream 'sqlite-main' holds migrations this build does not know "
            "(the database is newer or was migrated by another build): '0005-leases', "
            "'0006-sessions'");

  // Same number, different name: the code does not have that id.
  std::vector<HistoryRow> h = Prefix(code, 1);
  h.push_back(HistoryRow{"0002-other-runs", code.migrations[1].checksum, code.name, code.dialect});
  st = Fault(code, h);
  EXPECT_EQ(st.reason(), "migration_unknown");
  EXPECT_THAT(st.message(), HasSubstr("'0002-other-runs'"));

  // An empty code stream knows nothing.
  EXPECT_EQ(Fault(Sqlite({}), Prefix(code, 1)).reason(), "migration_unknown");
}

TEST(PendingMigrationsTest, GapsAndOrder) {
  const MigrationStream code = Code();
  Status st = Fault(code, {Row(code, 0), Row(code, 2)});
  EXPECT_EQ(st.reason(), "migration_gap");
  EXPECT_EQ(st.message(),
            "migration history for stream 'sqlite-main' has a gap: '0002-runs' not applied "
            "although later '0003-attempts' is");

  st = Fault(code, {Row(code, 3)});
  EXPECT_EQ(st.reason(), "migration_gap");
  EXPECT_THAT(st.message(), HasSubstr("'0001-initial', '0002-runs', '0003-attempts' not applied"));

  st = Fault(code, {Row(code, 1), Row(code, 0)});
  EXPECT_EQ(st.reason(), "migration_gap");
  EXPECT_EQ(st.message(),
            "migration history for stream 'sqlite-main' is out of order: position 1 holds "
            "'0002-runs', expected '0001-initial'");
}

TEST(PendingMigrationsTest, ChecksumMismatch) {
  const MigrationStream code = Code();
  std::vector<HistoryRow> h = Prefix(code, 3);
  h[1].checksum = MigrationChecksum("CREATE TABLE runs_v0 (id INTEGER);");
  Status st = Fault(code, h);
  EXPECT_EQ(st.reason(), "migration_checksum_mismatch");
  EXPECT_THAT(st.message(), HasSubstr("'0002-runs' (database '" + h[1].checksum + "', code " +
                                      code.migrations[1].checksum + ")"));

  // Uppercase hex of the right digest is still a different checksum: comparison is exact.
  h = Prefix(code, 1);
  for (char& c : h[0].checksum) c = static_cast<char>(std::toupper(c));
  EXPECT_EQ(Fault(code, h).reason(), "migration_checksum_mismatch");
}

TEST(PendingMigrationsTest, EnumeratesTheWholeHistoryBeforeDeciding) {
  // The first row's fault is the lowest-precedence class; a later row's graver fault wins.
  const MigrationStream code = Code();
  std::vector<HistoryRow> h = Prefix(code, 3);
  h[0].checksum = std::string(64, 'c');
  h[2].stream = "postgresql-main";
  EXPECT_EQ(Fault(code, h).reason(), "migration_wrong_stream");
}

TEST(PendingMigrationsTest, ReportsTheFirstFaultClassInPrecedenceOrder) {
  // One history holding every fault class; repairing the reported class reveals the next.
  const MigrationStream code = Code();
  MigrationStream newer = Code();
  newer.migrations.push_back(M("0005-leases"));

  HistoryRow checksum_fault = Row(code, 0);
  checksum_fault.checksum = std::string(64, 'd');
  HistoryRow wrong_stream{"pg-0001-schema-capability", std::string(64, 'e'), "postgresql-main",
                          "postgresql"};
  HistoryRow malformed{"0002_runs", std::string(64, 'f'), code.name, code.dialect};

  std::vector<HistoryRow> h = {checksum_fault, Row(code, 2), Row(code, 2),
                               Row(newer, 4),  malformed,    wrong_stream};
  // checksum: 0001; gap: 0002 missing; duplicate: 0003; unknown: 0005; malformed; wrong stream.
  auto drop = [&](auto pred) { std::erase_if(h, pred); };

  EXPECT_EQ(Fault(code, h).reason(), "migration_wrong_stream");
  drop([](const HistoryRow& r) { return r.stream != "sqlite-main"; });
  EXPECT_EQ(Fault(code, h).reason(), "migration_id_malformed");
  drop([](const HistoryRow& r) { return r.id == "0002_runs"; });
  EXPECT_EQ(Fault(code, h).reason(), "migration_duplicate");
  h.erase(h.begin() + 2);  // one copy of 0003
  EXPECT_EQ(Fault(code, h).reason(), "migration_unknown");
  drop([](const HistoryRow& r) { return r.id == "0005-leases"; });
  EXPECT_EQ(Fault(code, h).reason(), "migration_gap");
  h.insert(h.begin() + 1, Row(code, 1));
  EXPECT_EQ(Fault(code, h).reason(), "migration_checksum_mismatch");
  h[0] = Row(code, 0);
  Result<std::vector<const Migration*>> pending = PendingMigrations(code, h);
  ASSERT_TRUE(pending.ok()) << pending.status().ToString();
  EXPECT_EQ(Ids(*pending), std::vector<std::string>{"0004-events"});

  // The published precedence list matches what was observed above.
  EXPECT_EQ(std::vector<std::string_view>(kMigrationHistoryFaultReasons.begin(),
                                          kMigrationHistoryFaultReasons.end()),
            (std::vector<std::string_view>{"migration_wrong_stream", "migration_id_malformed",
                                           "migration_duplicate", "migration_unknown",
                                           "migration_gap", "migration_checksum_mismatch"}));
}

TEST(PendingMigrationsTest, NamesAtMostFiveIdsThenCounts) {
  const MigrationStream code = Sqlite({"0001-a"});
  std::vector<HistoryRow> h = Prefix(code, 1);
  for (int i = 2; i <= 9; ++i) {
    h.push_back(HistoryRow{"000" + std::to_string(i) + "-x", std::string(64, 'a'), code.name,
                           code.dialect});
  }
  Status st = Fault(code, h);
  EXPECT_EQ(st.reason(), "migration_unknown");
  EXPECT_THAT(st.message(),
              HasSubstr("'0002-x', '0003-x', '0004-x', '0005-x', '0006-x' and 3 more"));
  EXPECT_THAT(st.message(), ::testing::Not(HasSubstr("'0007-x'")));
}

TEST(PendingMigrationsTest, HugeCorruptIdGivesABoundedMessage) {
  const MigrationStream code = Code();
  std::vector<HistoryRow> h = {HistoryRow{std::string(1 << 20, 'z'), "", code.name, code.dialect}};
  Status st = Fault(code, h);
  EXPECT_EQ(st.reason(), "migration_id_malformed");
  EXPECT_LT(st.message().size(), 400u);
  EXPECT_THAT(st.message(), HasSubstr("(1048576 bytes)"));
}

TEST(MigrationHistoryFaultTest, RecognisesOnlyCorruptHistoryReasons) {
  for (std::string_view reason : kMigrationHistoryFaultReasons) {
    EXPECT_TRUE(IsMigrationHistoryFault(Corrupt(std::string(reason), "x"))) << reason;
    EXPECT_FALSE(IsMigrationHistoryFault(InvalidArgument(std::string(reason), "x"))) << reason;
  }
  EXPECT_FALSE(IsMigrationHistoryFault(Status::Ok()));
  EXPECT_FALSE(IsMigrationHistoryFault(Corrupt("migration_stream_unknown", "x")));
  EXPECT_FALSE(IsMigrationHistoryFault(Corrupt("schema_contract_invalid", "x")));
}

}  // namespace
}  // namespace ql
