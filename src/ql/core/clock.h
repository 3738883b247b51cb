#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace ql {

// A source of the current time. Everything below the composition roots takes a Clock& so that
// scheduling can be driven deterministically in tests.
class Clock {
 public:
  virtual ~Clock() = default;
  // Returns the current wall-clock time in UTC milliseconds since the Unix epoch.
  virtual int64_t NowMs() const = 0;
  // Returns a monotonic reading in milliseconds (only differences are meaningful).
  virtual int64_t MonotonicMs() const = 0;
};

// A source of random bytes (ids, tokens). Injected so tests can be seeded.
class RandomSource {
 public:
  virtual ~RandomSource() = default;
  // Fills `out` with random bytes.
  virtual void Fill(std::span<std::uint8_t> out) = 0;
};

// Returns the process-wide system clock. The only code that reads the system clock.
Clock& SystemClock();

// Returns the process-wide cryptographically secure random source (the kernel's getrandom).
RandomSource& SecureRandom();

}  // namespace ql
