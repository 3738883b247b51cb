#include "ql/exec/log_masker.h"

#include <algorithm>

namespace ql::exec {

LogMasker::LogMasker(std::vector<std::string> values) {
  std::erase_if(values, [](const std::string& v) { return v.size() < kMinMaskedBytes; });
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  values_ = std::move(values);
  for (const std::string& v : values_) longest_ = std::max(longest_, v.size());
}

void LogMasker::Write(std::string_view chunk, std::string& out) {
  if (!active()) {
    out.append(chunk);
    return;
  }
  pending_.append(chunk);
  // An occurrence starting at or after `settled` may still be incomplete.
  const size_t keep = longest_ - 1;
  if (pending_.size() <= keep) return;
  Emit(pending_.size() - keep, out);
}

void LogMasker::Finish(std::string& out) {
  if (!pending_.empty()) Emit(pending_.size(), out);
  pending_.clear();
  covered_ = 0;
}

void LogMasker::Emit(size_t settled, std::string& out) {
  runs_.clear();
  if (covered_ > 0) runs_.emplace_back(0, covered_);
  for (const std::string& value : values_) {
    for (size_t at = pending_.find(value); at != std::string::npos && at < settled;
         at = pending_.find(value, at + 1)) {
      runs_.emplace_back(at, at + value.size());
    }
  }
  std::sort(runs_.begin(), runs_.end());
  size_t cursor = 0;  // the next byte of pending_ not yet written or hidden
  bool open = false;  // a run is being extended
  size_t run_begin = 0, run_end = 0;
  auto close_run = [&]() {
    out.append(pending_, cursor, run_begin - cursor);
    // The run at offset 0 that continues a covered prefix already has its "***".
    if (!(run_begin == 0 && covered_ > 0)) out.append(kMask);
    cursor = run_end;
  };
  for (const auto& [begin, end] : runs_) {
    if (open && begin <= run_end) {
      run_end = std::max(run_end, end);
      continue;
    }
    if (open) close_run();
    open = true;
    run_begin = begin;
    run_end = end;
  }
  if (open) close_run();
  if (cursor < settled) out.append(pending_, cursor, settled - cursor);
  // Bytes past `settled` that the last run covers stay held but are already masked.
  covered_ = cursor > settled ? cursor - settled : 0;
  pending_.erase(0, settled);
}

}  // namespace ql::exec
