#include "ql/engine/log_reader.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace ql {
namespace {

namespace fs = std::filesystem;

class LogReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "ql-log-reader-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    fs::create_directories(dir_ / "log" / "task");
  }
  void TearDown() override { fs::remove_all(dir_); }

  void Write(const fs::path& path, const std::string& content) {
    std::ofstream out(path, std::ios::binary);
    out << content;
  }

  AttemptRecord AttemptWithLog(std::string path) {
    AttemptRecord attempt;
    attempt.id = "attempt-1";
    attempt.log_path = std::move(path);
    return attempt;
  }

  fs::path dir_;
};

TEST_F(LogReaderTest, LogSizeIsTheFileSizeOrZeroWithoutAFile) {
  const fs::path file = dir_ / "log" / "task" / "run.log";
  Write(file, "hello world\n");
  LogReader reader((dir_ / "log").string());
  Result<int64_t> size = reader.LogSize(AttemptWithLog(file.string()));
  ASSERT_TRUE(size.ok()) << size.status().ToString();
  EXPECT_EQ(*size, 12);
  Result<int64_t> missing = reader.LogSize(AttemptWithLog((dir_ / "log" / "none.log").string()));
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(*missing, 0);
  Write(dir_ / "elsewhere.log", "x");
  Result<int64_t> outside = reader.LogSize(AttemptWithLog((dir_ / "elsewhere.log").string()));
  ASSERT_FALSE(outside.ok());
  EXPECT_EQ(outside.status().reason(), "log_path_invalid");
}

TEST_F(LogReaderTest, ReadsChunksAndReportsEof) {
  const fs::path file = dir_ / "log" / "task" / "run.log";
  Write(file, "hello world\n");
  LogReader reader((dir_ / "log").string());
  auto first = reader.ReadLog(AttemptWithLog(file.string()), 0, 5);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->data, "hello");
  EXPECT_EQ(first->next_offset, 5);
  EXPECT_FALSE(first->eof);
  EXPECT_TRUE(first->exists);
  EXPECT_EQ(first->size, 12);

  auto rest = reader.ReadLog(AttemptWithLog(file.string()), first->next_offset, 1000);
  ASSERT_TRUE(rest.ok());
  EXPECT_EQ(rest->data, " world\n");
  EXPECT_EQ(rest->next_offset, 12);
  EXPECT_TRUE(rest->eof);

  // Growth after the first read is seen from the returned offset.
  Write(file, "hello world\nmore\n");
  auto grown = reader.ReadLog(AttemptWithLog(file.string()), rest->next_offset, 1000);
  ASSERT_TRUE(grown.ok());
  EXPECT_EQ(grown->data, "more\n");
  EXPECT_TRUE(grown->eof);
}

TEST_F(LogReaderTest, RelativePathIsUnderTheRoot) {
  Write(dir_ / "log" / "task" / "r.log", "abc");
  LogReader reader((dir_ / "log").string());
  auto chunk = reader.ReadLog(AttemptWithLog("task/r.log"), 1, 100);
  ASSERT_TRUE(chunk.ok()) << chunk.status().ToString();
  EXPECT_EQ(chunk->data, "bc");
}

TEST_F(LogReaderTest, MissingLogIsEmptyNotAnError) {
  LogReader reader((dir_ / "log").string());
  AttemptRecord no_path;
  auto none = reader.ReadLog(no_path, 0, 100);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->exists);
  EXPECT_TRUE(none->eof);
  EXPECT_EQ(none->data, "");

  auto not_yet = reader.ReadLog(AttemptWithLog((dir_ / "log/task/later.log").string()), 0, 100);
  ASSERT_TRUE(not_yet.ok());
  EXPECT_FALSE(not_yet->exists);
}

TEST_F(LogReaderTest, OffsetPastEndIsEmptyAndNegativeIsRejected) {
  const fs::path file = dir_ / "log" / "task" / "run.log";
  Write(file, "abc");
  LogReader reader((dir_ / "log").string());
  auto past = reader.ReadLog(AttemptWithLog(file.string()), 10, 100);
  ASSERT_TRUE(past.ok());
  EXPECT_EQ(past->data, "");
  EXPECT_EQ(past->next_offset, 10);
  EXPECT_TRUE(past->eof);

  auto negative = reader.ReadLog(AttemptWithLog(file.string()), -1, 100);
  ASSERT_FALSE(negative.ok());
  EXPECT_EQ(negative.status().reason(), "invalid_offset");
}

TEST_F(LogReaderTest, RefusesPathsOutsideTheRoot) {
  Write(dir_ / "secret.txt", "secret");
  LogReader reader((dir_ / "log").string());
  for (const std::string& path :
       {(dir_ / "secret.txt").string(), (dir_ / "log" / ".." / "secret.txt").string(),
        std::string("../secret.txt"), std::string("/etc/passwd"), (dir_ / "log").string()}) {
    auto chunk = reader.ReadLog(AttemptWithLog(path), 0, 100);
    ASSERT_FALSE(chunk.ok()) << path;
    EXPECT_EQ(chunk.status().reason(), "log_path_invalid") << path;
  }
}

TEST_F(LogReaderTest, RefusesSymlinkPointingOutOfTheRoot) {
  Write(dir_ / "secret.txt", "secret");
  fs::create_symlink(dir_ / "secret.txt", dir_ / "log" / "task" / "link.log");
  LogReader reader((dir_ / "log").string());
  auto chunk = reader.ReadLog(AttemptWithLog((dir_ / "log/task/link.log").string()), 0, 100);
  ASSERT_FALSE(chunk.ok());
  EXPECT_EQ(chunk.status().reason(), "log_path_invalid");
}

TEST_F(LogReaderTest, RefusesDirectoriesInsideTheRoot) {
  LogReader reader((dir_ / "log").string());
  auto chunk = reader.ReadLog(AttemptWithLog((dir_ / "log/task").string()), 0, 100);
  ASSERT_FALSE(chunk.ok());
  EXPECT_EQ(chunk.status().reason(), "log_path_invalid");
}

TEST_F(LogReaderTest, CapsChunkSize) {
  const fs::path file = dir_ / "log" / "task" / "big.log";
  Write(file, std::string(kMaxLogChunkBytes + 10, 'x'));
  LogReader reader((dir_ / "log").string());
  auto chunk = reader.ReadLog(AttemptWithLog(file.string()), 0, kMaxLogChunkBytes * 4);
  ASSERT_TRUE(chunk.ok());
  EXPECT_EQ(chunk->data.size(), kMaxLogChunkBytes);
  EXPECT_FALSE(chunk->eof);
}

}  // namespace
}  // namespace ql
