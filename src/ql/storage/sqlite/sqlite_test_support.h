#pragma once

// Test support for the SQLite upgrade tests (included by *_test.cc only): the embedded migrations
// applied one by one as the store applies them, and a fixture holding a database file in a
// temporary directory with a plain connection to it and the store that upgrades it.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ql/core/migration_stream.h"
#include "ql/storage/sqlite/sqlite_db.h"
#include "ql/storage/sqlite/sqlite_migrations.h"
#include "ql/storage/sqlite/sqlite_store.h"
#include "ql/testing/fake_clock.h"

namespace ql::sqlite::testing {

// Applies the embedded migrations after `after` up to and including `last` the way the store
// does: each in its own write transaction with its history row and capability step.
inline Status MigrateUpTo(Db& db, std::string_view last, std::string_view after = "") {
  QL_RETURN_IF_ERROR(db.WithConnection(
      [&] { return db.ExecScript("PRAGMA foreign_keys = ON;", "configuring the connection"); }));
  for (const EmbeddedSql& file : EmbeddedMigrationFiles()) {
    if (file.id <= after) continue;
    if (file.id > last) break;
    QL_RETURN_IF_ERROR(db.Transact(TxMode::kWrite, file.id, [&](Tx&) -> Status {
      QL_RETURN_IF_ERROR(db.ExecScript(file.sql, file.id));
      QL_ASSIGN_OR_RETURN(Stmt history,
                          db.Prepare("INSERT INTO schema_migrations VALUES (?, ?, ?, ?, ?)"));
      QL_RETURN_IF_ERROR(history
                             .BindAll(file.id, kSqliteMainStream, kSqliteDialect,
                                      MigrationChecksum(file.sql), int64_t{1000})
                             .Run());
      for (const SchemaCapability& step : CapabilitySteps()) {
        if (step.migration_id != file.id) continue;
        QL_ASSIGN_OR_RETURN(
            Stmt capability,
            db.Prepare("INSERT OR REPLACE INTO schema_capabilities VALUES (?, ?, ?, ?)"));
        QL_RETURN_IF_ERROR(
            capability.BindAll(step.name, step.version, step.capability_map, step.migration_id)
                .Run());
      }
      return Status::Ok();
    }));
  }
  return Status::Ok();
}

inline std::vector<std::string> Split(const std::string& text, char separator) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, separator);) out.push_back(item);
  return out;
}

// A database file in a temporary directory (removed after the test), a plain connection to it
// (db_) and the store that upgrades it.
class SqliteUpgradeFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "ql-upgrade-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    path_ = (dir_ / "ql.db").string();
  }
  void TearDown() override {
    db_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Lets a store open the file, which migrates it to the latest schema, then connects again
  // (the earlier plain connection must be closed); the store stays open for the caller.
  // nullptr (with a failure) when the store cannot open it.
  std::unique_ptr<SqliteStore> UpgradeByTheStore() {
    db_.reset();
    SqliteOptions options;
    options.path = path_;
    auto store = SqliteStore::Open(options, clock_);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    if (!store.ok()) return nullptr;
    Connect();
    return std::move(store).value();
  }

  // Opens a plain connection to the database file (no store), as an operator would.
  void Connect() {
    auto db = Db::Open(path_, 5000, 0);
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    db_ = std::move(db).value();
  }

  std::string Query(const std::string& sql) {
    std::string out;
    Status st = db_->WithConnection([&]() -> Status {
      QL_ASSIGN_OR_RETURN(out, db_->QueryText(sql, "reading"));
      return Status::Ok();
    });
    EXPECT_TRUE(st.ok()) << sql << ": " << st.ToString();
    return out;
  }

  Status Exec(const std::string& sql) {
    return db_->WithConnection([&] { return db_->ExecScript(sql, "writing"); });
  }

  // Runs `sql` in one write transaction.
  Status Fill(const std::string& sql) {
    return db_->Transact(TxMode::kWrite, "filling",
                         [&](Tx&) { return db_->ExecScript(sql, "filling"); });
  }

  // Every row of `table` over `columns`, one quoted line per row, sorted.
  std::string Rows(const std::string& table, const std::string& columns) {
    std::string line;
    for (const std::string& column : Split(columns, ',')) {
      line += (line.empty() ? "" : " || '|' || ") + std::string("quote(") + column + ")";
    }
    return Query("SELECT group_concat(line, char(10)) FROM (SELECT " + line + " AS line FROM " +
                 table + " ORDER BY line)");
  }

  std::string Columns(const std::string& table) {
    return Query("SELECT group_concat(name, ',') FROM pragma_table_info('" + table + "')");
  }

  // The tables of the schema (not SQLite's own), sorted.
  std::vector<std::string> Tables() {
    return Split(Query("SELECT group_concat(name, ',') FROM (SELECT name FROM sqlite_master WHERE "
                       "type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name)"),
                 ',');
  }

  std::string ForeignKeys(const std::string& table) {
    return Query(
        "SELECT group_concat(line, char(10)) FROM (SELECT \"table\" || '(' || \"to\" || ') <- ' || "
        "\"from\" || ' ' || on_delete || ' ' || on_update AS line FROM pragma_foreign_key_list('" +
        table + "') ORDER BY line)");
  }

  // Indexes and triggers as `type name on table: sql`, one per line.
  std::set<std::string> IndexesAndTriggers() {
    const std::vector<std::string> lines = Split(
        Query("SELECT group_concat(line, char(10)) FROM (SELECT type || ' ' || name || ' on ' || "
              "tbl_name || ': ' || coalesce(sql, '(automatic)') AS line FROM sqlite_master "
              "WHERE type IN ('index', 'trigger') ORDER BY line)"),
        '\n');
    return std::set<std::string>(lines.begin(), lines.end());
  }

  std::filesystem::path dir_;
  std::string path_;
  std::unique_ptr<Db> db_;
  ::ql::testing::FakeClock clock_{1'780'000'000'000};
};

}  // namespace ql::sqlite::testing
