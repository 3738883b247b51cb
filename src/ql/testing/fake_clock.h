#pragma once

#include <atomic>
#include <cstdint>
#include <random>

#include "ql/core/clock.h"

namespace ql::testing {

// A manually advanced clock; thread-safe.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t now_ms = 1'767'225'600'000) : now_ms_(now_ms), mono_ms_(0) {}
  int64_t NowMs() const override { return now_ms_.load(); }
  int64_t MonotonicMs() const override { return mono_ms_.load(); }
  // Moves both readings forward by `delta_ms`.
  void Advance(int64_t delta_ms) {
    now_ms_ += delta_ms;
    mono_ms_ += delta_ms;
  }
  // Sets the wall clock (may go backwards, to test clock regression); monotonic time is kept.
  void SetNowMs(int64_t now_ms) { now_ms_ = now_ms; }

 private:
  std::atomic<int64_t> now_ms_;
  std::atomic<int64_t> mono_ms_;
};

// A deterministic random source seeded explicitly.
class SeededRandom final : public RandomSource {
 public:
  explicit SeededRandom(uint64_t seed) : engine_(seed) {}
  void Fill(std::span<std::uint8_t> out) override {
    for (auto& b : out) b = static_cast<std::uint8_t>(engine_() & 0xff);
  }

 private:
  std::mt19937_64 engine_;
};

}  // namespace ql::testing
