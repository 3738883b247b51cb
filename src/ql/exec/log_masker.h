#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ql::exec {

// Replaces exact secret values with "***" in a byte stream that arrives in chunks (a command's
// output as it is read), so a value split across two reads is masked like any other. Every byte
// covered by an occurrence of any value is hidden: overlapping or adjacent occurrences become
// one "***", and a value that contains another is masked whole.
//
// Values shorter than kMinMaskedBytes are not masked: a one-to-three-byte value ("1", "on",
// "yes") occurs by chance in ordinary output, masking it would mangle the log without protecting
// anything, and a secret that short cannot be kept secret anyway. Empty values are ignored too.
//
// To see a value across a chunk boundary the masker holds back the last (longest value − 1)
// bytes of what it has read until more output or Finish() shows they are not the start of a
// value; nothing else is delayed. Not thread-safe.
class LogMasker {
 public:
  inline static constexpr size_t kMinMaskedBytes = 4;
  inline static constexpr std::string_view kMask = "***";

  // Masks `values` (duplicates and values shorter than kMinMaskedBytes are dropped).
  explicit LogMasker(std::vector<std::string> values = {});

  // Returns true when there is at least one value to mask; when false Write() passes every
  // chunk through unchanged and holds nothing back.
  bool active() const { return !values_.empty(); }
  // Returns the number of bytes read but not yet written out (at most longest value − 1).
  size_t held() const { return pending_.size(); }

  // Appends to `out` the masked output that `chunk` makes final.
  void Write(std::string_view chunk, std::string& out);
  // Appends the bytes still held back, masked, to `out`; call once at the end of the stream.
  // The masker is empty again afterwards.
  void Finish(std::string& out);

 private:
  // Masks and writes out the first `settled` bytes of pending_: every occurrence that starts
  // there is complete in pending_ and is masked.
  void Emit(size_t settled, std::string& out);

  std::vector<std::string> values_;
  size_t longest_ = 0;
  std::string pending_;
  // The first `covered_` bytes of pending_ belong to an occurrence whose "***" is written.
  size_t covered_ = 0;
  std::vector<std::pair<size_t, size_t>> runs_;  // scratch: covered [begin, end) ranges
};

}  // namespace ql::exec
