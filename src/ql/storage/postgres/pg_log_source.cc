#include "ql/storage/postgres/pg_log_source.h"

#include <algorithm>
#include <string>

namespace ql {

using pg::P;
using pg::Rows;
using pg::Tx;

Result<LogChunk> PostgresLogSource::ReadLog(const AttemptRecord& attempt, int64_t offset,
                                            size_t max_bytes) const {
  if (offset < 0) {
    return InvalidArgument("invalid_offset",
                           "log offset " + std::to_string(offset) + " must not be negative");
  }
  const size_t want = std::min(max_bytes, kMaxLogChunkBytes);
  LogChunk chunk;
  chunk.next_offset = offset;
  QL_RETURN_IF_ERROR(pool_.Transact(
      {pg::Isolation::kRepeatableRead, true}, "reading a run log", [&](Tx& tx) -> Status {
        chunk.data.clear();
        chunk.next_offset = offset;
        QL_ASSIGN_OR_RETURN(
            Rows end, tx.Exec("SELECT byte_offset + octet_length(data) FROM ql3.run_log_chunks "
                              "WHERE attempt_id = $1 ORDER BY byte_offset DESC LIMIT 1",
                              {P(attempt.id)}));
        chunk.exists = end.size() == 1;
        const int64_t total = chunk.exists ? end.Int(0, 0) : 0;
        QL_RETURN_IF_ERROR(end.status());
        chunk.size = total;
        if (!chunk.exists || offset >= total || want == 0) {
          chunk.eof = offset >= total;
          return Status::Ok();
        }
        // Chunks overlapping [offset, offset + want), in order.
        QL_ASSIGN_OR_RETURN(
            Rows rows,
            tx.Exec("SELECT byte_offset, data FROM ql3.run_log_chunks WHERE attempt_id = $1 AND "
                    "byte_offset < $2 + $3::bigint AND byte_offset + octet_length(data) > $2 "
                    "ORDER BY byte_offset",
                    {P(attempt.id), P(offset), P(static_cast<int64_t>(want))}));
        int64_t position = offset;
        for (int i = 0; i < rows.size() && chunk.data.size() < want; ++i) {
          const int64_t start = rows.Int(i, 0);
          const std::string data = rows.Bytes(i, 1);
          if (start > position) break;  // a gap: never return bytes out of order
          const size_t skip = static_cast<size_t>(position - start);
          if (skip >= data.size()) continue;
          const size_t take = std::min(data.size() - skip, want - chunk.data.size());
          chunk.data.append(data, skip, take);
          position += static_cast<int64_t>(take);
        }
        QL_RETURN_IF_ERROR(rows.status());
        chunk.next_offset = position;
        chunk.eof = position >= total;
        return Status::Ok();
      }));
  return chunk;
}

Result<int64_t> PostgresLogSource::LogSize(const AttemptRecord& attempt) const {
  int64_t size = 0;
  QL_RETURN_IF_ERROR(pool_.Transact(
      {pg::Isolation::kReadCommitted, true}, "measuring a run log", [&](Tx& tx) -> Status {
        QL_ASSIGN_OR_RETURN(
            Rows end, tx.Exec("SELECT byte_offset + octet_length(data) FROM ql3.run_log_chunks "
                              "WHERE attempt_id = $1 ORDER BY byte_offset DESC LIMIT 1",
                              {P(attempt.id)}));
        size = end.size() == 1 ? end.Int(0, 0) : 0;
        return end.status();
      }));
  return size;
}

}  // namespace ql
