#include "resident_pages.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace ql::local {

namespace {

struct Mapping {
  uintptr_t begin = 0;
  uintptr_t end = 0;
  bool read_only_file = false;  // r-xp or r--p, backed by a file
  int64_t anonymous_kib = -1;   // pages copied on write (relocations); -1 until read
};

}  // namespace

ReleasedPages ReleaseReadOnlyFilePages() {
  ReleasedPages released;
  // Read every mapping first (no allocation between the reads and the madvise calls matters:
  // the mappings chosen are read-only, nothing can write to them meanwhile).
  std::vector<Mapping> mappings;
  FILE* smaps = std::fopen("/proc/self/smaps", "re");
  if (smaps == nullptr) return released;
  char line[4096];
  while (std::fgets(line, sizeof line, smaps) != nullptr) {
    unsigned long begin = 0, end = 0;
    char perms[8] = {};
    int path_at = 0;
    if (std::sscanf(line, "%lx-%lx %7s %*s %*s %*s %n", &begin, &end, perms, &path_at) >= 3 &&
        path_at > 0) {
      Mapping m;
      m.begin = begin;
      m.end = end;
      const bool read_only = std::strcmp(perms, "r-xp") == 0 || std::strcmp(perms, "r--p") == 0;
      m.read_only_file = read_only && line[path_at] == '/';
      mappings.push_back(m);
      continue;
    }
    long kib = 0;
    if (!mappings.empty() && std::sscanf(line, "Anonymous: %ld kB", &kib) == 1) {
      mappings.back().anonymous_kib = kib;
    }
  }
  std::fclose(smaps);
  for (const Mapping& m : mappings) {
    // A page copied on write (a relocated constant) exists nowhere else: it must stay. Such a
    // mapping is left whole.
    if (!m.read_only_file || m.anonymous_kib != 0) continue;
    if (::madvise(reinterpret_cast<void*>(m.begin), m.end - m.begin, MADV_DONTNEED) == 0) {
      ++released.mappings;
      released.bytes += static_cast<int64_t>(m.end - m.begin);
    }
  }
  return released;
}

}  // namespace ql::local
