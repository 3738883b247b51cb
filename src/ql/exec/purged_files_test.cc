#include "ql/exec/purged_files.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace ql::exec {
namespace {

namespace fs = std::filesystem;

class PurgedFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "ql-purge-XXXXXX").string();
    root_ = mkdtemp(pattern.data());
    fs::create_directories(root_ / "log" / "task-a");
    fs::create_directories(root_ / "run");
  }
  void TearDown() override { fs::remove_all(root_); }
  void Touch(const fs::path& path) {
    fs::create_directories(path.parent_path());
    std::ofstream(path) << "x";
  }

  fs::path root_;
};

TEST_F(PurgedFilesTest, RemovesLogsAndAttemptDirectoriesOfPurgedAttemptsOnly) {
  Touch(root_ / "log" / "task-a" / "run-1.log");
  Touch(root_ / "log" / "task-a" / "run-2.log");
  Touch(root_ / "log" / "task-b" / "run-3.log");
  Touch(root_ / "run" / "att-1" / "result.json");
  Touch(root_ / "run" / "att-2" / "result.json");
  Touch(root_ / "run" / "att-3" / "result.json");
  Touch(root_ / "secret");

  PurgeResult purged;
  purged.attempts = {
      {"att-1", "run-1", (root_ / "log" / "task-a" / "run-1.log").string()},
      {"att-3", "run-3", std::string("task-b/run-3.log")},  // relative to the log root
      {"att-9", "run-9", std::nullopt},                     // never started: nothing on disk
      {"../run", "run-x", std::string("../secret")},        // hostile: outside both roots
  };
  const PurgedFiles removed =
      RemovePurgedFiles(purged, (root_ / "log").string(), (root_ / "run").string());
  EXPECT_EQ(removed.logs, 2);
  EXPECT_EQ(removed.attempt_dirs, 2);
  EXPECT_EQ(removed.errors, 2);

  EXPECT_FALSE(fs::exists(root_ / "log" / "task-a" / "run-1.log"));
  EXPECT_TRUE(fs::exists(root_ / "log" / "task-a" / "run-2.log"));
  EXPECT_FALSE(fs::exists(root_ / "log" / "task-b"));  // emptied, so removed
  EXPECT_TRUE(fs::exists(root_ / "log"));
  EXPECT_FALSE(fs::exists(root_ / "run" / "att-1"));
  EXPECT_TRUE(fs::exists(root_ / "run" / "att-2"));
  EXPECT_FALSE(fs::exists(root_ / "run" / "att-3"));
  EXPECT_TRUE(fs::exists(root_ / "run"));
  EXPECT_TRUE(fs::exists(root_ / "secret"));

  // Repeating the purge (after a crash) finds nothing left and fails nothing.
  purged.attempts.pop_back();
  const PurgedFiles again =
      RemovePurgedFiles(purged, (root_ / "log").string(), (root_ / "run").string());
  EXPECT_EQ(again.logs + again.attempt_dirs + again.errors, 0);
}

TEST_F(PurgedFilesTest, TheRunAndTaskDirectoriesOfPerAttemptLogsGoWithTheirLastLog) {
  Touch(root_ / "log" / "task-c" / "run-4" / "1.log");
  Touch(root_ / "log" / "task-c" / "run-4" / "2.log");
  Touch(root_ / "log" / "task-c" / "run-5" / "1.log");
  PurgeResult purged;
  purged.attempts = {{"att-4a", "run-4", std::string("task-c/run-4/1.log")},
                     {"att-4b", "run-4", std::string("task-c/run-4/2.log")}};
  const PurgedFiles removed =
      RemovePurgedFiles(purged, (root_ / "log").string(), (root_ / "run").string());
  EXPECT_EQ(removed.logs, 2);
  EXPECT_EQ(removed.errors, 0);
  EXPECT_FALSE(fs::exists(root_ / "log" / "task-c" / "run-4"));
  EXPECT_TRUE(fs::exists(root_ / "log" / "task-c" / "run-5" / "1.log"));

  purged.attempts = {{"att-5", "run-5", std::string("task-c/run-5/1.log")}};
  EXPECT_EQ(RemovePurgedFiles(purged, (root_ / "log").string(), (root_ / "run").string()).logs, 1);
  EXPECT_FALSE(fs::exists(root_ / "log" / "task-c"));
  EXPECT_TRUE(fs::exists(root_ / "log"));
}

}  // namespace
}  // namespace ql::exec
