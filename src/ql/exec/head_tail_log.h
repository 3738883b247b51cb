#pragma once

// The supervisor's log writer: keeps the head and the tail of an attempt's output within a cap,
// with a one-line marker between them when the middle was dropped (internal).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ql::exec::internal {

// The most bytes of a cap that go to the tail; the rest of the cap is the head.
inline constexpr int64_t kMaxTailBytes = 1024 * 1024;

// Returns the marker line written between head and tail when `dropped` bytes were left out,
// preceded by a newline when the head does not end with one.
std::string TruncationMarker(int64_t dropped, bool head_ends_line);

// Keeps at most `cap_bytes` of the output given to Append() in a log file: the first
// `cap - tail` bytes (the head) are written to the file at once, so they are readable while
// the command runs and survive a crash; the last `tail = min(cap / 2, kMaxTailBytes)` bytes
// are held in a ring buffer of that size, allocated only once output reaches past the head
// (most commands never fill their head, and a megabyte zeroed per attempt costs more CPU than a
// trivial command does), and written by Finish(). When more than the cap
// arrived, Finish() writes TruncationMarker() and then the tail, which starts after the first
// newline of the buffer when it holds one (so it begins with a whole line; the skipped bytes
// count as dropped). Memory is bounded by the tail; nothing else is buffered.
class HeadTailLog {
 public:
  // `fd` (not owned) is the log file, open for appending.
  HeadTailLog(int fd, int64_t cap_bytes);

  // Keeps `data`. Returns false when a write failed (errno is set); later calls write nothing.
  bool Append(std::string_view data);
  // Writes the marker (if bytes were dropped) and the tail. Call once, at the end of the
  // attempt. Returns false when a write failed (errno is set).
  bool Finish();

  // True once output beyond the cap arrived (some of it will be dropped).
  bool truncated() const { return dropped_ > 0; }
  // Output bytes in the file (head and tail, without the marker), final after Finish().
  int64_t kept_bytes() const { return head_written_ + tail_written_; }
  // Output bytes left out, final after Finish().
  int64_t dropped_bytes() const { return dropped_; }
  int64_t cap_bytes() const { return cap_; }
  // Memory held for the tail: 0 until output reaches past the head.
  size_t tail_buffer_bytes() const { return ring_.size(); }

 private:
  bool Write(const char* data, size_t size);
  // Appends to the ring, dropping its oldest bytes when full.
  void PushTail(std::string_view data);

  int fd_;
  int64_t cap_;
  int64_t head_cap_;
  int64_t head_written_ = 0;
  int64_t tail_written_ = 0;
  int64_t dropped_ = 0;
  char last_head_byte_ = '\n';
  char last_dropped_byte_ = '\n';
  size_t tail_cap_;
  std::vector<char> ring_;  // empty until the first byte of the tail, then tail_cap_ bytes
  size_t ring_start_ = 0;
  size_t ring_size_ = 0;
  bool failed_ = false;
  bool finished_ = false;
};

}  // namespace ql::exec::internal
