// The only file that reads the system clock or the operating system's random source.
#include <openssl/rand.h>

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
    if (out.empty()) return;
    if (RAND_bytes(out.data(), static_cast<int>(out.size())) != 1) {
      // Without randomness no id or token is safe to hand out.
      std::abort();
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
