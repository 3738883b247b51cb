#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include "ql/engine/diagnostics.h"
#include "ql/engine/metrics.h"

namespace ql {

// A sleep that can be cut short. Stop() is permanent; Wake() ends the current (or next) sleep.
class Sleeper {
 public:
  virtual ~Sleeper() = default;
  // Sleeps up to `ms` milliseconds; returns early after Wake() or Stop().
  virtual void SleepFor(int64_t ms) = 0;
  virtual void Wake() = 0;
  virtual void Stop() = 0;
  virtual bool stopped() const = 0;
};

// A Sleeper on a condition variable (real time).
class ConditionSleeper final : public Sleeper {
 public:
  void SleepFor(int64_t ms) override;
  void Wake() override;
  void Stop() override;
  bool stopped() const override;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool woken_ = false;
};

struct RoundLoopOptions {
  // Names the loop in its metric label and diagnostics ([a-z_]+, e.g. "scheduler").
  std::string name = "loop";
  // Counts exceptions in ql_loop_exceptions_total{loop="<name>"} when set.
  Metrics* metrics = nullptr;
  // Receives one line per exception when set.
  DiagnosticLog diagnostics;
  // How long to sleep after a round that threw.
  int64_t error_delay_ms = 1000;
};

// Drives a round function until stopped: one round at a time (rounds never overlap), sleeping the
// delay each round returns (0 = start the next round at once). Run() blocks on the caller's
// thread; after Stop() it returns as soon as the round in progress (if any) has finished, so
// stopping is bounded by the longest round. A round that throws does not end the loop: the
// exception is counted and logged, and the next round starts after error_delay_ms.
class RoundLoop {
 public:
  // Runs one round and returns how long to sleep before the next, in milliseconds.
  using Round = std::function<int64_t()>;

  RoundLoop(Round round, Sleeper& sleeper, RoundLoopOptions options = {});

  void Run();
  void Stop() { sleeper_.Stop(); }
  // Returns the number of rounds completed (a round that threw included).
  int64_t rounds() const;
  // Returns the number of rounds that threw.
  int64_t exceptions() const;

 private:
  // Runs one round; an exception becomes a metric, a diagnostic line and the error delay.
  int64_t GuardedRound();

  Round round_;
  Sleeper& sleeper_;
  RoundLoopOptions options_;
  mutable std::mutex mu_;
  int64_t rounds_ = 0;
  int64_t exceptions_ = 0;
};

}  // namespace ql
