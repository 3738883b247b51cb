#pragma once

// QL_FUZZ_CHECK(condition, detail): when `condition` is false, prints the condition, where it
// is and `detail` (escaped, cut to 400 bytes), then aborts, so libFuzzer keeps the input as a
// crash. Active in every build (not tied to NDEBUG).

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace ql::fuzz {

[[noreturn]] inline void Fail(const char* condition, const char* file, int line,
                              std::string_view detail) {
  std::string shown;
  for (char c : detail.substr(0, 400)) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f && c != '\\') {
      shown.push_back(c);
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      shown += "\\x";
      shown.push_back(kHex[u >> 4]);
      shown.push_back(kHex[u & 15]);
    }
  }
  std::fprintf(stderr, "%s:%d: check failed: %s\n  detail: %s%s\n", file, line, condition,
               shown.c_str(), detail.size() > 400 ? "..." : "");
  std::abort();
}

}  // namespace ql::fuzz

#define QL_FUZZ_CHECK(condition, detail)                                          \
  do {                                                                            \
    if (!(condition)) ::ql::fuzz::Fail(#condition, __FILE__, __LINE__, (detail)); \
  } while (0)
