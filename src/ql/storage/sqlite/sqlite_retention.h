#pragma once

// Internal to the SQLite adapter: the retention port (core/retention.h) over the store's
// connection. SqliteStore hands it out as its RetentionRepository.

#include <memory>

#include "ql/core/retention.h"

namespace ql::sqlite {

class Db;

// Returns the retention repository over `db` (which must outlive it).
std::unique_ptr<RetentionRepository> NewSqliteRetention(Db& db);

}  // namespace ql::sqlite
