#include "ql/engine/outage_log.h"

namespace ql {
namespace {

bool IsOutage(const Status& status) {
  switch (status.code()) {
    case StatusCode::kUnavailable:
    case StatusCode::kBusy:
    case StatusCode::kOutcomeUnknown:
    case StatusCode::kInternal:
      return true;
    default:
      return false;
  }
}

}  // namespace

void OutageLog::Observe(const Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  if (IsOutage(status)) {
    ++failures_;
    if (down_) return;
    down_ = true;
    since_ms_ = clock_.MonotonicMs();
    if (log_ != nullptr) {
      log_->Error("database.unavailable", {{"component", component_},
                                           {"code", status.reason()},
                                           {"message", status.message().substr(0, 300)}});
    }
    return;
  }
  if (!down_) return;
  if (log_ != nullptr) {
    log_->Info("database.available", {{"component", component_},
                                      {"down_ms", clock_.MonotonicMs() - since_ms_},
                                      {"failures", failures_}});
  }
  down_ = false;
  failures_ = 0;
}

bool OutageLog::down() const {
  std::lock_guard<std::mutex> lock(mu_);
  return down_;
}

}  // namespace ql
