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

struct LogChunk {
  std::string data;         // raw bytes of the log from the requested offset
  int64_t next_offset = 0;  // offset to ask for next (requested offset + data.size())
  bool eof = false;         // next_offset reached the end of the file as it was when read
  bool exists = false;      // the attempt has a log (a file on disk, or chunks stored)
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
};

}  // namespace ql
