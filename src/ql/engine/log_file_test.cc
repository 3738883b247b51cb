#include "ql/engine/log_file.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace ql {
namespace {

namespace fs = std::filesystem;

std::string Slurp(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class LogFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ql-logfile-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(LogFileTest, ReopenWritesToANewFileAfterARename) {
  const fs::path path = dir_ / "ql.log";
  Result<std::unique_ptr<LogFile>> file = LogFile::Open(path.string());
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  (*file)->WriteLine("one");
  fs::rename(path, dir_ / "ql.log.1");
  (*file)->WriteLine("two");  // still the renamed file, as a rotation expects
  ASSERT_TRUE((*file)->Reopen().ok());
  (*file)->WriteLine("three");
  EXPECT_EQ(Slurp(dir_ / "ql.log.1"), "one\ntwo\n");
  EXPECT_EQ(Slurp(path), "three\n");
  EXPECT_EQ(fs::status(path).permissions() & fs::perms::others_all, fs::perms::none);
}

TEST_F(LogFileTest, AReopenThatFailsKeepsTheOldFile) {
  const fs::path sub = dir_ / "sub";
  fs::create_directories(sub);
  Result<std::unique_ptr<LogFile>> file = LogFile::Open((sub / "ql.log").string());
  ASSERT_TRUE(file.ok());
  fs::rename(sub, dir_ / "moved");
  Status st = (*file)->Reopen();
  EXPECT_EQ(st.reason(), "log_file_io");
  (*file)->WriteLine("kept");
  EXPECT_EQ(Slurp(dir_ / "moved" / "ql.log"), "kept\n");
}

TEST_F(LogFileTest, LinesOfManyThreadsNeverInterleave) {
  const fs::path path = dir_ / "ql.log";
  auto file = LogFile::Open(path.string());
  ASSERT_TRUE(file.ok());
  const std::string line(3000, 'x');
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) (*file)->WriteLine(line);
    });
  }
  for (std::thread& t : threads) t.join();
  std::ifstream in(path);
  int count = 0;
  for (std::string got; std::getline(in, got); ++count) ASSERT_EQ(got, line);
  EXPECT_EQ(count, 800);
}

TEST_F(LogFileTest, AnUnopenablePathIsAnError) {
  EXPECT_EQ(LogFile::Open((dir_ / "missing" / "ql.log").string()).status().reason(), "log_file_io");
}

}  // namespace
}  // namespace ql
