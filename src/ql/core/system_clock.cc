// The only file that reads the system clock or the operating system's random source.
#include <sys/random.h>

#include <cerrno>

#include <chrono>
#include <cstdlib>

#include "ql/core/clock.h"

namespace ql {
namespace {

class SystemClockImpl final : public Clock {
 public:
  int64_t NowMs() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
  int64_t MonotonicMs() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
};

class SecureRandomImpl final : public RandomSource {
 public:
  void Fill(std::span<std::uint8_t> out) override {
    // The kernel's CSPRNG: no user-space generator state to seed or to page in.
    size_t filled = 0;
    while (filled < out.size()) {
      const ssize_t n = ::getrandom(out.data() + filled, out.size() - filled, 0);
      if (n < 0 && errno == EINTR) continue;
      // Without randomness no id or token is safe to hand out.
      if (n <= 0) std::abort();
      filled += static_cast<size_t>(n);
    }
  }
};

}  // namespace

Clock& SystemClock() {
  static SystemClockImpl clock;
  return clock;
}

RandomSource& SecureRandom() {
  static SecureRandomImpl random;
  return random;
}

}  // namespace ql
