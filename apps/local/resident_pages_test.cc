#include "resident_pages.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace ql::local {
namespace {

constexpr size_t kBytes = 64 * 4096;

// Resident kB of the mapping that starts at `at`, from /proc/self/smaps; -1 when not found.
long ResidentKib(const void* at) {
  FILE* smaps = std::fopen("/proc/self/smaps", "re");
  if (smaps == nullptr) return -1;
  char line[4096];
  bool in_it = false;
  long kib = -1;
  while (std::fgets(line, sizeof line, smaps) != nullptr) {
    unsigned long begin = 0, end = 0;
    if (std::sscanf(line, "%lx-%lx ", &begin, &end) == 2 && std::strchr(line, ':') != nullptr &&
        std::strstr(line, " kB") == nullptr) {
      in_it = begin == reinterpret_cast<unsigned long>(at);
      continue;
    }
    if (in_it && std::sscanf(line, "Rss: %ld kB", &kib) == 1) break;
  }
  std::fclose(smaps);
  return kib;
}

class ResidentPagesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char path[] = "/tmp/ql-resident-XXXXXX";
    fd_ = mkstemp(path);
    ASSERT_GE(fd_, 0);
    unlink(path);
    std::string bytes(kBytes, '\0');
    for (size_t i = 0; i < kBytes; ++i) bytes[i] = static_cast<char>('a' + i % 26);
    ASSERT_EQ(write(fd_, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  }
  void TearDown() override { close(fd_); }

  static int Sum(const char* p) {
    int sum = 0;
    for (size_t i = 0; i < kBytes; i += 4096) sum += p[i];
    return sum;
  }

  int fd_ = -1;
};

TEST_F(ResidentPagesTest, ReadOnlyFilePagesLeaveTheResidentSetAndReadBackTheSame) {
  auto* p = static_cast<char*>(mmap(nullptr, kBytes, PROT_READ, MAP_PRIVATE, fd_, 0));
  ASSERT_NE(p, MAP_FAILED);
  const int before = Sum(p);  // every page touched
  ASSERT_EQ(ResidentKib(p), static_cast<long>(kBytes / 1024));

  const ReleasedPages released = ReleaseReadOnlyFilePages();
  EXPECT_GT(released.mappings, 0);
  EXPECT_EQ(ResidentKib(p), 0);
  EXPECT_EQ(Sum(p), before);  // read again from the page cache
  munmap(p, kBytes);
}

// A read-only mapping with a page copied on write (as relocated constants are, once the loader
// has made them read-only) must keep that page: it exists nowhere else.
TEST_F(ResidentPagesTest, AMappingWithAPageCopiedOnWriteIsLeftWhole) {
  auto* p = static_cast<char*>(mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd_, 0));
  ASSERT_NE(p, MAP_FAILED);
  p[4096] = '#';
  ASSERT_EQ(mprotect(p, kBytes, PROT_READ), 0);
  const long resident = ResidentKib(p);

  ReleaseReadOnlyFilePages();
  EXPECT_EQ(p[4096], '#');
  EXPECT_EQ(ResidentKib(p), resident);
  munmap(p, kBytes);
}

}  // namespace
}  // namespace ql::local
