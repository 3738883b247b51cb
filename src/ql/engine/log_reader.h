#pragma once

// Reads run logs for the API. Logs are plain files written by the local process executor under
// one log root (data/log); an attempt's `log_path` names its file. The reader never follows a
// path out of that root, so a corrupted or hostile log_path cannot expose other files.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "ql/core/log_source.h"
#include "ql/core/records.h"
#include "ql/core/status.h"

namespace ql {

class LogReader final : public LogSource {
 public:
  // Reads logs below `log_root` (an existing directory; symlinks in it are resolved once here).
  explicit LogReader(std::string log_root);

  // Returns up to min(max_bytes, kMaxLogChunkBytes) bytes of the attempt's log starting at byte
  // `offset`. An attempt without a log_path, or whose file does not exist yet, yields an empty
  // chunk with exists=false and eof=true; an offset at or past the end yields an empty chunk
  // with eof=true and next_offset = offset. A relative log_path is taken relative to the log
  // root. Errors: InvalidArgument `invalid_offset` (negative offset); Corrupt
  // `log_path_invalid` when the path (after resolving symlinks) lies outside the log root or is
  // not a regular file; Unavailable `log_unreadable` when the file cannot be opened or read.
  Result<LogChunk> ReadLog(const AttemptRecord& attempt, int64_t offset,
                           size_t max_bytes) const override;
  // Returns the size of the attempt's log file, 0 when it has none. Errors as ReadLog's.
  Result<int64_t> LogSize(const AttemptRecord& attempt) const override;

  const std::string& log_root() const { return root_; }

 private:
  // Returns the canonical path of the attempt's log file, nullopt when it has none (no log_path
  // or no file). Errors: Corrupt `log_path_invalid`, Unavailable `log_unreadable`.
  Result<std::optional<std::string>> Resolve(const AttemptRecord& attempt) const;

  std::string root_;  // canonical absolute path, no trailing slash (except "/")
};

}  // namespace ql
