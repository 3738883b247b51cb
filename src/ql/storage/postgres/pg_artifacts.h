#pragma once

// Internal to the PostgreSQL adapter: the artifact primitives (core/artifact_store.h) over one
// transaction, and the runner that picks the role: reads (serving a blob, a script, a version)
// as the runtime role, which may only SELECT artifacts; writes (chunks and blobs of an upload,
// pushes, deletions, the purge) as the admin role. Chunk bytes travel as binary bytea, never
// as hex text.

#include "ql/core/artifact_store.h"
#include "ql/storage/postgres/pg_client.h"

namespace ql::pg {

class PgArtifactRunner final : public ArtifactTxRunner {
 public:
  // Writes fail with Unavailable `admin_pool_missing` without an admin pool.
  PgArtifactRunner(Pool& runtime, Pool* admin) : runtime_(runtime), admin_(admin) {}
  // A read is one REPEATABLE READ READ ONLY transaction, so a blob streamed chunk by chunk comes
  // from one snapshot; a write is one READ COMMITTED transaction in which a script's head is
  // locked when it is loaded (pushes and deletions of one script run one after the other).
  Status Run(ArtifactTxKind kind, std::string_view operation,
             const std::function<Status(GovernanceTx&, ArtifactTx&)>& body) override;

 private:
  Pool& runtime_;
  Pool* admin_;
};

}  // namespace ql::pg
