#include "ql/exec/head_tail_log.h"

#include <algorithm>
#include <cstring>

#include "ql/exec/posix_util.h"

namespace ql::exec::internal {

std::string TruncationMarker(int64_t dropped, bool head_ends_line) {
  std::string marker = head_ends_line ? "" : "\n";
  marker += "--- qinglong: " + std::to_string(dropped) + " bytes truncated ---\n";
  return marker;
}

HeadTailLog::HeadTailLog(int fd, int64_t cap_bytes) : fd_(fd), cap_(std::max<int64_t>(cap_bytes, 0)) {
  const int64_t tail = std::min(cap_ / 2, kMaxTailBytes);
  head_cap_ = cap_ - tail;
  tail_cap_ = static_cast<size_t>(tail);
}

bool HeadTailLog::Write(const char* data, size_t size) {
  if (failed_) return false;
  if (size > 0 && !WriteAll(fd_, data, size)) failed_ = true;
  return !failed_;
}

bool HeadTailLog::Append(std::string_view data) {
  if (finished_ || data.empty()) return !failed_;
  const size_t head = static_cast<size_t>(
      std::min<int64_t>(head_cap_ - head_written_, static_cast<int64_t>(data.size())));
  if (head > 0) {
    if (!Write(data.data(), head)) return false;
    head_written_ += static_cast<int64_t>(head);
    last_head_byte_ = data[head - 1];
    data.remove_prefix(head);
  }
  PushTail(data);
  return !failed_;
}

void HeadTailLog::PushTail(std::string_view data) {
  if (data.empty()) return;
  if (ring_.size() != tail_cap_) ring_.resize(tail_cap_);
  const size_t capacity = tail_cap_;
  if (data.size() >= capacity) {
    // Everything held so far and the front of `data` fall out.
    const size_t cut = data.size() - capacity;
    dropped_ += static_cast<int64_t>(ring_size_ + cut);
    if (cut > 0) {
      last_dropped_byte_ = data[cut - 1];
    } else if (ring_size_ > 0) {
      last_dropped_byte_ = ring_[(ring_start_ + ring_size_ - 1) % capacity];
    }
    if (capacity > 0) std::memcpy(ring_.data(), data.data() + cut, capacity);
    ring_start_ = 0;
    ring_size_ = capacity;
    return;
  }
  const size_t overflow = ring_size_ + data.size() > capacity ? ring_size_ + data.size() - capacity : 0;
  if (overflow > 0) {
    last_dropped_byte_ = ring_[(ring_start_ + overflow - 1) % capacity];
    ring_start_ = (ring_start_ + overflow) % capacity;
    ring_size_ -= overflow;
    dropped_ += static_cast<int64_t>(overflow);
  }
  size_t at = (ring_start_ + ring_size_) % capacity;
  const size_t first = std::min(data.size(), capacity - at);
  std::memcpy(ring_.data() + at, data.data(), first);
  std::memcpy(ring_.data(), data.data() + first, data.size() - first);
  ring_size_ += data.size();
}

bool HeadTailLog::Finish() {
  if (finished_) return !failed_;
  finished_ = true;
  std::string tail(ring_size_, '\0');
  const size_t capacity = ring_.size();
  for (size_t i = 0, at = ring_start_; i < ring_size_; ++i, at = at + 1 == capacity ? 0 : at + 1) {
    tail[i] = ring_[at];
  }
  if (dropped_ > 0 && last_dropped_byte_ != '\n') {
    // Begin the tail with a whole line when the buffer holds a line break before its end.
    const size_t newline = tail.find('\n');
    if (newline != std::string::npos && newline + 1 < tail.size()) {
      dropped_ += static_cast<int64_t>(newline + 1);
      tail.erase(0, newline + 1);
    }
  }
  if (dropped_ > 0) {
    const std::string marker = TruncationMarker(dropped_, last_head_byte_ == '\n');
    if (!Write(marker.data(), marker.size())) return false;
  }
  if (!Write(tail.data(), tail.size())) return false;
  tail_written_ = static_cast<int64_t>(tail.size());
  return true;
}

}  // namespace ql::exec::internal
