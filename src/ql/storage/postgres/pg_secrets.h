#pragma once

// Internal to the PostgreSQL adapter: the secrets primitives (core/secret_store.h) over one
// transaction, and the runner that picks the role: reads (resolving a secret into a lease,
// listing) as the runtime role, which may only SELECT secrets; writes (new versions,
// shredding, rotation) as the admin role.

#include "ql/core/secret_store.h"
#include "ql/storage/postgres/pg_client.h"

namespace ql::pg {

class PgSecretRunner final : public SecretTxRunner {
 public:
  // Writes fail with Unavailable `admin_pool_missing` without an admin pool.
  PgSecretRunner(Pool& runtime, Pool* admin) : runtime_(runtime), admin_(admin) {}
  Status Run(SecretTxKind kind, std::string_view operation,
             const std::function<Status(GovernanceTx&, SecretTx&)>& body) override;

 private:
  Pool& runtime_;
  Pool* admin_;
};

}  // namespace ql::pg
