#include "ql/engine/round_loop.h"

#include <chrono>

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

void RoundLoop::Run() {
  while (!sleeper_.stopped()) {
    const int64_t delay = round_();
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

}  // namespace ql
