#pragma once

// Where the API reads run logs from: files on the local machine (engine/log_reader.h) or the
// database (the cluster keeps remote attempts' logs in PostgreSQL).

#include <cstddef>
#include <cstdint>
#include <string>

#include "ql/core/records.h"
#include "ql/core/status.h"

namespace ql {

// The largest chunk one ReadLog call returns, whatever the caller asks for.
inline constexpr size_t kMaxLogChunkBytes = 1 << 20;

// What an attempt keeps of its output even when the earlier attempts of its run used up the
// run's log cap: its first and last 32 KiB, so every attempt's error stays readable.
inline constexpr int64_t kMinAttemptLogBytes = 64 * 1024;

// The most bytes the marker line between a truncated log's head and tail takes; a writer whose
// file must stay within a cap (a worker's, which the control plane caps again) keeps this much
// of the cap free for it.
inline constexpr int64_t kLogMarkerRoomBytes = 64;

// Returns the most bytes of output the next attempt of a run may keep in its log: the
// per-attempt cap, lowered to what is left of the per-run cap after `used_by_earlier` bytes of
// the run's earlier attempts, but never below min(kMinAttemptLogBytes, attempt_cap).
// `run_cap` <= 0 means no per-run cap.
int64_t AttemptLogCap(int64_t attempt_cap, int64_t run_cap, int64_t used_by_earlier);

struct LogChunk {
  std::string data;         // raw bytes of the log from the requested offset
  int64_t next_offset = 0;  // offset to ask for next (requested offset + data.size())
  bool eof = false;         // next_offset reached the end of the file as it was when read
  bool exists = false;      // the attempt has a log (a file on disk, or chunks stored)
  int64_t size = 0;         // the log's size in bytes when read (0 without a log)
};

// Where the API reads run logs from: files on the local machine (LogReader) or the database
// (the cluster keeps remote attempts' logs in PostgreSQL).
class LogSource {
 public:
  virtual ~LogSource() = default;
  // Returns up to min(max_bytes, kMaxLogChunkBytes) bytes of the attempt's log starting at byte
  // `offset`. An attempt without a log yet yields an empty chunk with exists=false and
  // eof=true; an offset at or past the end yields an empty chunk with eof=true and next_offset
  // = offset. A negative offset is InvalidArgument `invalid_offset`.
  virtual Result<LogChunk> ReadLog(const AttemptRecord& attempt, int64_t offset,
                                   size_t max_bytes) const = 0;
  // Returns the size in bytes of the attempt's log as it is now; 0 when it has none. Errors as
  // ReadLog's.
  virtual Result<int64_t> LogSize(const AttemptRecord& attempt) const = 0;
};

}  // namespace ql
