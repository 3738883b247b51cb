#pragma once

// Searching a run's log (the API's GET /runs/{id}/log/search): the lines of one attempt's log
// that contain a text, read through a LogSource in bounded chunks, so a 32 MiB log is searched
// without holding it in memory. Matching is a plain substring match, case-insensitive for ASCII
// letters; each line is numbered from 1 and located by the byte offset of its start, so a
// reader can open the log there.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ql/core/log_source.h"
#include "ql/core/records.h"
#include "ql/core/status.h"

namespace ql {

inline constexpr size_t kMaxLogQueryBytes = 200;
inline constexpr int kDefaultLogMatches = 100;
inline constexpr int kMaxLogMatches = 1000;
// The most of a matching line a result carries; longer lines are cut (marked truncated).
inline constexpr size_t kMaxMatchLineBytes = 500;
// The most bytes one search reads; beyond it the result says where it stopped.
inline constexpr int64_t kMaxLogSearchBytes = 256LL * 1024 * 1024;

struct LogMatch {
  int64_t line = 0;    // 1-based
  int64_t offset = 0;  // byte offset of the line's start
  std::string text;    // the line without its newline, at most kMaxMatchLineBytes
  bool truncated = false;
};

struct LogSearchResult {
  std::vector<LogMatch> matches;
  bool more = false;           // another match exists beyond `limit`
  int64_t searched_bytes = 0;  // how much of the log was read
  int64_t size = 0;            // the log's size when the search began
  bool complete = true;        // false when kMaxLogSearchBytes stopped it
};

// Checks a query: 1..kMaxLogQueryBytes bytes, no newline, no NUL. InvalidArgument
// `invalid_query` otherwise.
Status ValidateLogQuery(std::string_view query);

// The first `limit` lines of the attempt's log that contain `query` (see above). Errors: those
// of ValidateLogQuery, InvalidArgument `invalid_limit` (limit outside 1..kMaxLogMatches), and the
// LogSource's.
Result<LogSearchResult> SearchLog(const LogSource& logs, const AttemptRecord& attempt,
                                  std::string_view query, int limit,
                                  int64_t max_bytes = kMaxLogSearchBytes);

}  // namespace ql
