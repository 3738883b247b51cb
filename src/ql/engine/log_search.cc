#include "ql/engine/log_search.h"

#include <algorithm>
#include <string>
#include <utility>

namespace ql {
namespace {

char Lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool ContainsFolded(std::string_view line, std::string_view folded_query) {
  if (folded_query.size() > line.size()) return false;
  const auto it = std::search(line.begin(), line.end(), folded_query.begin(), folded_query.end(),
                              [](char a, char b) { return Lower(a) == b; });
  return it != line.end();
}

}  // namespace

Status ValidateLogQuery(std::string_view query) {
  if (query.empty() || query.size() > kMaxLogQueryBytes) {
    return InvalidArgument("invalid_query",
                           "the search text is 1.." + std::to_string(kMaxLogQueryBytes) + " bytes");
  }
  if (query.find_first_of(std::string_view("\n\r\0", 3)) != std::string_view::npos) {
    return InvalidArgument("invalid_query", "the search text is one line (no newline or NUL)");
  }
  return Status::Ok();
}

Result<LogSearchResult> SearchLog(const LogSource& logs, const AttemptRecord& attempt,
                                  std::string_view query, int limit, int64_t max_bytes) {
  QL_RETURN_IF_ERROR(ValidateLogQuery(query));
  if (limit < 1 || limit > kMaxLogMatches) {
    return InvalidArgument("invalid_limit",
                           "limit is 1.." + std::to_string(kMaxLogMatches) + " matches");
  }
  std::string folded(query);
  std::transform(folded.begin(), folded.end(), folded.begin(), Lower);

  LogSearchResult out;
  QL_ASSIGN_OR_RETURN(out.size, logs.LogSize(attempt));
  // The line being read, which may span chunks: its start, its first bytes (what a result
  // shows), the last query-length-1 bytes read (so a match across a chunk boundary is found),
  // and whether it matched already.
  struct Line {
    bool open = false;
    int64_t start = 0;
    std::string head;
    std::string window;
    bool matched = false;
  } cur;
  int64_t number = 1;
  const size_t overlap = folded.size() - 1;
  // Adds `piece` (no newline in it) to the current line.
  const auto add = [&](std::string_view piece, int64_t at) {
    if (!cur.open) {
      cur = Line{};
      cur.open = true;
      cur.start = at;
    }
    if (!cur.matched) {
      std::string joined = cur.window;
      joined.append(piece);
      cur.matched = ContainsFolded(joined, folded);
      cur.window = joined.size() > overlap ? joined.substr(joined.size() - overlap) : joined;
    }
    if (cur.head.size() < kMaxMatchLineBytes) {
      cur.head.append(piece.substr(0, kMaxMatchLineBytes - cur.head.size()));
    }
  };
  // Ends the current line; false once the limit is passed.
  const auto end = [&](int64_t total_length) -> bool {
    if (cur.matched) {
      if (static_cast<int>(out.matches.size()) == limit) {
        out.more = true;
        return false;
      }
      LogMatch m;
      m.line = number;
      m.offset = cur.start;
      m.truncated = total_length > static_cast<int64_t>(kMaxMatchLineBytes);
      m.text = std::move(cur.head);
      out.matches.push_back(std::move(m));
    }
    ++number;
    cur.open = false;
    return true;
  };
  int64_t offset = 0;
  while (offset < out.size) {
    if (offset >= max_bytes) {
      out.complete = false;
      break;
    }
    QL_ASSIGN_OR_RETURN(LogChunk chunk, logs.ReadLog(attempt, offset, kMaxLogChunkBytes));
    if (chunk.data.empty()) break;
    const std::string_view data = chunk.data;
    for (size_t at = 0; at < data.size();) {
      const size_t nl = data.find('\n', at);
      const size_t stop = nl == std::string_view::npos ? data.size() : nl;
      add(data.substr(at, stop - at), offset + static_cast<int64_t>(at));
      if (nl == std::string_view::npos) break;
      const int64_t line_end = offset + static_cast<int64_t>(nl);
      if (!end(line_end - cur.start)) {
        out.searched_bytes = line_end + 1;
        return out;
      }
      at = nl + 1;
    }
    offset = chunk.next_offset;
    out.searched_bytes = offset;
    if (chunk.eof) break;
  }
  if (cur.open && out.complete) (void)end(out.searched_bytes - cur.start);
  return out;
}

}  // namespace ql
