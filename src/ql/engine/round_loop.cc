#include "ql/engine/round_loop.h"

#include <chrono>
#include <exception>
#include <string>
#include <utility>

namespace ql {

void ConditionSleeper::SleepFor(int64_t ms) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, std::chrono::milliseconds(ms), [&] { return stop_ || woken_; });
  woken_ = false;
}

void ConditionSleeper::Wake() {
  {
    std::lock_guard lock(mu_);
    woken_ = true;
  }
  cv_.notify_all();
}

void ConditionSleeper::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
}

bool ConditionSleeper::stopped() const {
  std::lock_guard lock(mu_);
  return stop_;
}

RoundLoop::RoundLoop(Round round, Sleeper& sleeper, RoundLoopOptions options)
    : round_(std::move(round)), sleeper_(sleeper), options_(std::move(options)) {
  if (options_.metrics != nullptr) {
    options_.metrics->Describe("ql_loop_exceptions_total", "counter",
                               "Rounds of a loop that threw an exception (the loop went on).");
  }
}

int64_t RoundLoop::GuardedRound() {
  std::string what;
  try {
    return round_();
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
    what = "an exception that is not a std::exception";
  }
  // Bounded: an exception text is diagnostic, not a place for payloads.
  if (what.size() > 160) what = what.substr(0, 160) + "...";
  {
    std::lock_guard lock(mu_);
    ++exceptions_;
  }
  if (options_.metrics != nullptr) {
    options_.metrics->Increment("ql_loop_exceptions_total", "loop=\"" + options_.name + "\"");
  }
  if (options_.diagnostics) {
    options_.diagnostics(options_.name,
                         Internal("loop_exception", "a round threw (" + what +
                                                        "); the loop goes on after " +
                                                        std::to_string(options_.error_delay_ms) +
                                                        " ms"));
  }
  return options_.error_delay_ms;
}

void RoundLoop::Run() {
  while (!sleeper_.stopped()) {
    const int64_t delay = GuardedRound();
    {
      std::lock_guard lock(mu_);
      ++rounds_;
    }
    if (delay > 0 && !sleeper_.stopped()) sleeper_.SleepFor(delay);
  }
}

int64_t RoundLoop::rounds() const {
  std::lock_guard lock(mu_);
  return rounds_;
}

int64_t RoundLoop::exceptions() const {
  std::lock_guard lock(mu_);
  return exceptions_;
}

}  // namespace ql
