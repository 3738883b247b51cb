#include "ql/exec/head_tail_log.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace ql::exec::internal {
namespace {

// Runs `chunks` through a HeadTailLog over a fresh file and returns the file's content.
class HeadTailLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char path[] = "/tmp/ql-head-tail-XXXXXX";
    fd_ = mkstemp(path);
    ASSERT_GE(fd_, 0);
    path_ = path;
  }
  void TearDown() override {
    close(fd_);
    unlink(path_.c_str());
  }

  std::string Content() const {
    std::string out;
    char buffer[65536];
    ssize_t n;
    off_t at = 0;
    while ((n = pread(fd_, buffer, sizeof(buffer), at)) > 0) {
      out.append(buffer, static_cast<size_t>(n));
      at += n;
    }
    return out;
  }

  int fd_ = -1;
  std::string path_;
};

TEST_F(HeadTailLogTest, OutputWithinTheCapIsKeptWhole) {
  HeadTailLog log(fd_, 100);
  ASSERT_TRUE(log.Append("first line\n"));
  ASSERT_TRUE(log.Append(std::string(60, 'x')));
  ASSERT_TRUE(log.Finish());
  EXPECT_EQ(Content(), "first line\n" + std::string(60, 'x'));
  EXPECT_FALSE(log.truncated());
  EXPECT_EQ(log.kept_bytes(), 71);
  EXPECT_EQ(log.dropped_bytes(), 0);
}

TEST_F(HeadTailLogTest, TheTailBufferIsTakenOnlyOnceOutputReachesPastTheHead) {
  // The default cap of a remote worker: a 1 MiB tail behind a 15 MiB head.
  HeadTailLog log(fd_, 16LL * 1024 * 1024);
  ASSERT_TRUE(log.Append("a short command's whole output\n"));
  EXPECT_EQ(log.tail_buffer_bytes(), 0u);
  ASSERT_TRUE(log.Finish());
  EXPECT_EQ(Content(), "a short command's whole output\n");

  HeadTailLog small(fd_, 100);
  ASSERT_TRUE(small.Append(std::string(50, 'h')));
  EXPECT_EQ(small.tail_buffer_bytes(), 0u);
  ASSERT_TRUE(small.Append("t"));
  EXPECT_EQ(small.tail_buffer_bytes(), 50u);
}

TEST_F(HeadTailLogTest, FarAboveTheCapKeepsHeadMarkerAndLastLines) {
  const int64_t cap = 64 * 1024;
  HeadTailLog log(fd_, cap);
  int64_t total = 0;
  for (int i = 0; i < 200000; ++i) {
    const std::string line = "line " + std::to_string(i) + "\n";
    total += static_cast<int64_t>(line.size());
    ASSERT_TRUE(log.Append(line));
  }
  ASSERT_TRUE(log.Append("ERROR: the last line\n"));
  total += 21;
  ASSERT_TRUE(log.truncated());
  // The head is on disk before the end; the tail is not.
  const std::string before = Content();
  EXPECT_EQ(before.size(), static_cast<size_t>(cap / 2));
  EXPECT_TRUE(before.starts_with("line 0\nline 1\n"));
  ASSERT_TRUE(log.Finish());

  const std::string content = Content();
  EXPECT_TRUE(content.starts_with(before));
  EXPECT_TRUE(content.ends_with("line 199999\nERROR: the last line\n"));
  const std::string marker = TruncationMarker(log.dropped_bytes(), before.back() == '\n');
  EXPECT_NE(content.find(marker), std::string::npos) << content.substr(cap / 2, 200);
  EXPECT_EQ(log.kept_bytes() + log.dropped_bytes(), total);
  EXPECT_EQ(static_cast<int64_t>(content.size()), log.kept_bytes() + static_cast<int64_t>(marker.size()));
  EXPECT_LE(log.kept_bytes(), cap);
  // The tail starts with a whole line.
  const std::string after_marker = content.substr(content.find(marker) + marker.size());
  EXPECT_TRUE(after_marker.starts_with("line ")) << after_marker.substr(0, 20);
}

TEST_F(HeadTailLogTest, TheMarkerCountsEveryDroppedByte) {
  HeadTailLog log(fd_, 10);  // head 5, tail 5
  ASSERT_TRUE(log.Append("abcdefgh"));
  ASSERT_TRUE(log.Append("ijklmnopqrstuvwxyz"));
  ASSERT_TRUE(log.Finish());
  EXPECT_EQ(Content(), "abcde\n--- qinglong: 16 bytes truncated ---\nvwxyz");
  EXPECT_EQ(log.dropped_bytes(), 16);
  EXPECT_EQ(log.kept_bytes(), 10);
}

TEST_F(HeadTailLogTest, ALargeCapKeepsAtMostTheMaximumTail) {
  const int64_t cap = 8 * kMaxTailBytes;
  HeadTailLog log(fd_, cap);
  ASSERT_TRUE(log.Append(std::string(static_cast<size_t>(cap) + 1, 'a')));
  ASSERT_TRUE(log.Append(std::string(static_cast<size_t>(kMaxTailBytes), 'z')));
  EXPECT_EQ(Content().size(), static_cast<size_t>(cap - kMaxTailBytes)) << "head written at once";
  ASSERT_TRUE(log.Finish());
  const std::string content = Content();
  EXPECT_TRUE(content.ends_with("\n" + std::string(static_cast<size_t>(kMaxTailBytes), 'z')));
  EXPECT_EQ(log.dropped_bytes(), kMaxTailBytes + 1);
}

TEST_F(HeadTailLogTest, AZeroCapKeepsOnlyTheMarker) {
  HeadTailLog log(fd_, 0);
  ASSERT_TRUE(log.Append("abc"));
  ASSERT_TRUE(log.Finish());
  EXPECT_EQ(Content(), "--- qinglong: 3 bytes truncated ---\n");
}

}  // namespace
}  // namespace ql::exec::internal
