#pragma once

// Run logs of remote attempts, read from ql3.run_log_chunks (runtime pool).

#include "ql/core/log_source.h"
#include "ql/storage/postgres/pg_client.h"

namespace ql {

class PostgresLogSource final : public LogSource {
 public:
  // `pool` (the runtime role's) must outlive this object.
  explicit PostgresLogSource(pg::Pool& pool) : pool_(pool) {}

  Result<LogChunk> ReadLog(const AttemptRecord& attempt, int64_t offset,
                           size_t max_bytes) const override;
  // Returns the bytes of the attempt's stored chunks (the end of the last one), 0 without any.
  Result<int64_t> LogSize(const AttemptRecord& attempt) const override;

 private:
  pg::Pool& pool_;
};

}  // namespace ql
