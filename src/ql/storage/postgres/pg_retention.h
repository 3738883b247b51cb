#pragma once

// Internal to the PostgreSQL adapter: the retention port (core/retention.h). Settings are
// written through the admin pool (like every management write) and read, with the purge,
// through the runtime pool, whose DELETE grants exist for the purge alone.

#include <memory>

#include "ql/core/retention.h"
#include "ql/storage/postgres/pg_client.h"

namespace ql::pg {

// Returns the retention repository over the pools (which must outlive it). SetRetention needs
// `admin`, else Unavailable `admin_pool_missing`.
std::unique_ptr<RetentionRepository> NewPgRetention(Pool& runtime, Pool* admin);

}  // namespace ql::pg
