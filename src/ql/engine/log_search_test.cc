#include "ql/engine/log_search.h"

#include <gtest/gtest.h>

#include <string>

namespace ql {
namespace {

// A log in memory that hands out at most `chunk` bytes per read, so lines cross chunks.
class MemoryLog final : public LogSource {
 public:
  MemoryLog(std::string data, size_t chunk) : data_(std::move(data)), chunk_(chunk) {}
  Result<LogChunk> ReadLog(const AttemptRecord&, int64_t offset, size_t max_bytes) const override {
    LogChunk c;
    c.exists = true;
    c.size = static_cast<int64_t>(data_.size());
    const size_t at = std::min(static_cast<size_t>(offset), data_.size());
    c.data = data_.substr(at, std::min({max_bytes, chunk_, data_.size() - at}));
    c.next_offset = offset + static_cast<int64_t>(c.data.size());
    c.eof = c.next_offset >= c.size;
    ++reads;
    return c;
  }
  Result<int64_t> LogSize(const AttemptRecord&) const override {
    return static_cast<int64_t>(data_.size());
  }
  mutable int reads = 0;

 private:
  std::string data_;
  size_t chunk_;
};

TEST(LogSearchTest, FindsLinesAcrossChunksWithTheirNumbersAndOffsets) {
  const std::string log = "start\nERROR: disk full\nok\nan error again\nlast Error";
  for (size_t chunk : {1u, 3u, 7u, 1000u}) {
    MemoryLog logs(log, chunk);
    Result<LogSearchResult> r = SearchLog(logs, AttemptRecord{}, "error", 10);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->matches.size(), 3u) << "chunk " << chunk;
    EXPECT_EQ(r->matches[0].line, 2);
    EXPECT_EQ(r->matches[0].offset, 6);
    EXPECT_EQ(r->matches[0].text, "ERROR: disk full");
    EXPECT_EQ(r->matches[1].line, 4);
    EXPECT_EQ(r->matches[1].offset, 26);
    EXPECT_EQ(r->matches[2].line, 5);  // the last line has no newline
    EXPECT_EQ(r->matches[2].text, "last Error");
    EXPECT_FALSE(r->more);
    EXPECT_TRUE(r->complete);
    EXPECT_EQ(r->searched_bytes, static_cast<int64_t>(log.size()));
  }
}

TEST(LogSearchTest, StopsAtTheLimitAndSaysThereIsMore) {
  std::string log;
  for (int i = 0; i < 50; ++i) log += "hit " + std::to_string(i) + "\n";
  MemoryLog logs(log, 16);
  Result<LogSearchResult> r = SearchLog(logs, AttemptRecord{}, "hit", 5);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->matches.size(), 5u);
  EXPECT_EQ(r->matches[4].text, "hit 4");
  EXPECT_TRUE(r->more);
  EXPECT_LT(r->searched_bytes, static_cast<int64_t>(log.size()));
}

TEST(LogSearchTest, ALongLineIsCutInTheResultButSearchedWhole) {
  const std::string log = std::string(3000, 'x') + "needle" + std::string(10, 'y') + "\nshort\n";
  MemoryLog logs(log, 64);
  Result<LogSearchResult> r = SearchLog(logs, AttemptRecord{}, "NEEDLE", 10);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->matches.size(), 1u);
  EXPECT_EQ(r->matches[0].line, 1);
  EXPECT_TRUE(r->matches[0].truncated);
  EXPECT_EQ(r->matches[0].text.size(), kMaxMatchLineBytes);
}

TEST(LogSearchTest, ReadsNoMoreThanItsBoundAndSaysSo) {
  std::string log;
  for (int i = 0; i < 1000; ++i) log += "line\n";
  MemoryLog logs(log, 100);
  Result<LogSearchResult> r = SearchLog(logs, AttemptRecord{}, "absent", 10, 1000);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->complete);
  EXPECT_EQ(r->searched_bytes, 1000);
  EXPECT_EQ(logs.reads, 10);
}

TEST(LogSearchTest, BadQueriesAndLimitsAreRefused) {
  MemoryLog logs("a\n", 10);
  EXPECT_EQ(SearchLog(logs, AttemptRecord{}, "", 10).status().reason(), "invalid_query");
  EXPECT_EQ(SearchLog(logs, AttemptRecord{}, "a\nb", 10).status().reason(), "invalid_query");
  EXPECT_EQ(SearchLog(logs, AttemptRecord{}, std::string(201, 'a'), 10).status().reason(),
            "invalid_query");
  EXPECT_EQ(SearchLog(logs, AttemptRecord{}, "a", 0).status().reason(), "invalid_limit");
  EXPECT_EQ(SearchLog(logs, AttemptRecord{}, "a", 1001).status().reason(), "invalid_limit");
}

}  // namespace
}  // namespace ql
