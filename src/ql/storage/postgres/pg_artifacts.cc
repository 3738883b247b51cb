#include "ql/storage/postgres/pg_artifacts.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ql/storage/postgres/pg_governance.h"
#include "ql/storage/postgres/pg_store_rows.h"

namespace ql::pg {
namespace {

constexpr char kScriptColumns[] =
    "SELECT project_id, name, latest_version, status, created_at_ms, updated_at_ms, "
    "deleted_at_ms FROM ql3.scripts ";

constexpr char kVersionColumns[] =
    "SELECT project_id, name, version, kind, digest, size, entry, created_by, created_at_ms "
    "FROM ql3.script_versions ";

std::vector<ScriptRecord> ReadScripts(const Rows& r) {
  std::vector<ScriptRecord> out;
  out.reserve(r.size());
  for (int i = 0; i < r.size(); ++i) {
    out.push_back(ScriptRecord{r.Text(i, 0), r.Text(i, 1), r.Int(i, 2), r.Text(i, 3), r.Int(i, 4),
                               r.Int(i, 5), r.OptInt(i, 6)});
  }
  return out;
}

std::vector<ScriptVersionRecord> ReadVersions(const Rows& r) {
  std::vector<ScriptVersionRecord> out;
  out.reserve(r.size());
  for (int i = 0; i < r.size(); ++i) {
    ScriptVersionRecord v;
    v.project_id = r.Text(i, 0);
    v.name = r.Text(i, 1);
    v.version = r.Int(i, 2);
    v.kind = r.Text(i, 3);
    v.digest = r.Text(i, 4);
    v.size = r.Int(i, 5);
    v.entry = r.Text(i, 6);
    v.created_by = r.Text(i, 7);
    v.created_at_ms = r.Int(i, 8);
    out.push_back(std::move(v));
  }
  return out;
}

std::vector<ScriptFile> ReadFiles(const Rows& r) {
  std::vector<ScriptFile> out;
  out.reserve(r.size());
  for (int i = 0; i < r.size(); ++i) {
    out.push_back(ScriptFile{r.Text(i, 0), r.Text(i, 1), r.Int(i, 2), r.Bool(i, 3)});
  }
  return out;
}

std::vector<ScriptVersionKey> ReadKeys(const Rows& r) {
  std::vector<ScriptVersionKey> out;
  out.reserve(r.size());
  for (int i = 0; i < r.size(); ++i) {
    out.push_back(ScriptVersionKey{r.Text(i, 0), r.Text(i, 1), r.Int(i, 2)});
  }
  return out;
}

// A text[] parameter of `items`.
Param TextArray(const std::vector<std::string>& items) {
  return PArray(std::vector<std::optional<std::string>>(items.begin(), items.end()));
}

class PgArtifactTx final : public ArtifactTx {
 public:
  // `write`: the transaction may change rows, and a script's head is locked when loaded.
  PgArtifactTx(Tx& tx, bool write) : tx_(tx), write_(write) {}

  Result<bool> PutChunk(const std::string& digest, std::string_view bytes,
                        int64_t now_ms) override {
    // xmax is 0 only on a row this statement inserted (an update sets it to this transaction).
    QL_ASSIGN_OR_RETURN(
        Rows rows,
        tx_.Exec("INSERT INTO ql3.artifact_chunks AS c (digest, size, bytes, touched_at_ms) "
                 "VALUES ($1, $2, $3::bytea, $4) ON CONFLICT (digest) DO UPDATE SET "
                 "touched_at_ms = GREATEST(c.touched_at_ms, EXCLUDED.touched_at_ms) "
                 "RETURNING (c.xmax = 0)",
                 {P(digest), P(static_cast<int64_t>(bytes.size())), PBytes(bytes), P(now_ms)}));
    QL_RETURN_IF_ERROR(rows.ExpectRows(1));
    const bool inserted = rows.Bool(0, 0);
    QL_RETURN_IF_ERROR(rows.status());
    return inserted;
  }

  Result<std::vector<std::pair<std::string, int64_t>>> ChunkSizes(
      const std::vector<std::string>& digests) override {
    return Query(tx_,
                 "SELECT digest, size FROM ql3.artifact_chunks WHERE digest = ANY ($1::text[]) "
                 "ORDER BY digest",
                 {TextArray(digests)}, [](const Rows& r) {
                   std::vector<std::pair<std::string, int64_t>> out;
                   for (int i = 0; i < r.size(); ++i) out.emplace_back(r.Text(i, 0), r.Int(i, 1));
                   return out;
                 });
  }

  Result<std::optional<std::string>> ReadChunk(const std::string& digest) override {
    // The bytes come back in binary format: a chunk's own size on the wire, not twice it.
    QL_ASSIGN_OR_RETURN(
        Rows rows, tx_.Exec("SELECT bytes FROM ql3.artifact_chunks WHERE digest = $1", {P(digest)},
                            ResultFormat::kBinary));
    if (rows.empty()) return std::optional<std::string>();
    QL_RETURN_IF_ERROR(rows.ExpectRows(1));
    std::string bytes = rows.Bytes(0, 0);
    QL_RETURN_IF_ERROR(rows.status());
    return std::optional<std::string>(std::move(bytes));
  }

  Result<std::optional<StoredBlob>> LoadBlob(const std::string& digest) override {
    // One row per chunk in order (one row with NULL chunk columns for an empty blob).
    QL_ASSIGN_OR_RETURN(Rows rows,
                        tx_.Exec("SELECT b.digest, b.size, b.chunk_count, b.touched_at_ms, c.seq, "
                                 "c.chunk_digest FROM ql3.artifact_blobs b LEFT JOIN "
                                 "ql3.artifact_blob_chunks c ON c.blob_digest = b.digest "
                                 "WHERE b.digest = $1 ORDER BY c.seq",
                                 {P(digest)}));
    if (rows.empty()) return std::optional<StoredBlob>();
    StoredBlob out;
    out.blob.digest = rows.Text(0, 0);
    out.blob.size = rows.Int(0, 1);
    const int64_t chunk_count = rows.Int(0, 2);
    out.touched_at_ms = rows.Int(0, 3);
    for (int i = 0; i < rows.size(); ++i) {
      const std::optional<int64_t> seq = rows.OptInt(i, 4);
      if (!seq) continue;
      if (*seq != static_cast<int64_t>(out.blob.chunks.size())) {
        return Corrupt("artifact_corrupt", "blob " + digest + " lists chunk " +
                                               std::to_string(*seq) + " out of sequence");
      }
      out.blob.chunks.push_back(rows.Text(i, 5));
    }
    QL_RETURN_IF_ERROR(rows.status());
    if (static_cast<int64_t>(out.blob.chunks.size()) != chunk_count) {
      return Corrupt("artifact_corrupt", "blob " + digest + " has " + std::to_string(chunk_count) +
                                             " chunks but lists " +
                                             std::to_string(out.blob.chunks.size()));
    }
    return std::optional<StoredBlob>(std::move(out));
  }

  Status PutBlob(const BlobDescriptor& blob, int64_t now_ms) override {
    // The chunk list is written only with the row that this statement inserted.
    return tx_
        .Exec(
            "WITH blob AS (INSERT INTO ql3.artifact_blobs AS b (digest, size, chunk_count, "
            "touched_at_ms) VALUES ($1, $2, $3, $4) ON CONFLICT (digest) DO UPDATE SET "
            "touched_at_ms = GREATEST(b.touched_at_ms, EXCLUDED.touched_at_ms) "
            "RETURNING (b.xmax = 0) AS inserted) "
            "INSERT INTO ql3.artifact_blob_chunks (blob_digest, seq, chunk_digest) "
            "SELECT $1::text, c.ord - 1, c.digest FROM blob, unnest($5::text[]) WITH ORDINALITY "
            "AS c (digest, ord) WHERE blob.inserted",
            {P(blob.digest), P(blob.size), P(static_cast<int64_t>(blob.chunks.size())), P(now_ms),
             TextArray(blob.chunks)})
        .status();
  }

  Status PutUpload(const std::string& project_id, const std::string& digest,
                   int64_t now_ms) override {
    return tx_
        .Exec(
            "INSERT INTO ql3.artifact_uploads AS u (project_id, digest, touched_at_ms) "
            "VALUES ($1, $2, $3) ON CONFLICT (project_id, digest) DO UPDATE SET "
            "touched_at_ms = GREATEST(u.touched_at_ms, EXCLUDED.touched_at_ms)",
            {P(project_id), P(digest), P(now_ms)})
        .status();
  }

  Result<bool> ProjectHolds(const std::string& project_id, const std::string& digest) override {
    QL_ASSIGN_OR_RETURN(Rows rows, tx_.Exec("SELECT EXISTS (SELECT 1 FROM ql3.artifact_uploads "
                                            "WHERE project_id = $1 AND digest = $2) "
                                            "OR EXISTS (SELECT 1 FROM ql3.script_versions "
                                            "WHERE project_id = $1 AND digest = $2) "
                                            "OR EXISTS (SELECT 1 FROM ql3.script_version_files "
                                            "WHERE project_id = $1 AND digest = $2)",
                                            {P(project_id), P(digest)}));
    QL_RETURN_IF_ERROR(rows.ExpectRows(1));
    const bool held = rows.Bool(0, 0);
    QL_RETURN_IF_ERROR(rows.status());
    return held;
  }

  Result<int64_t> ProjectBytes(const std::string& project_id) override {
    QL_ASSIGN_OR_RETURN(
        Rows rows,
        tx_.Exec("SELECT coalesce(sum(c.size), 0)::bigint FROM ql3.artifact_chunks c "
                 "WHERE c.digest IN (SELECT bc.chunk_digest FROM ql3.artifact_blob_chunks bc "
                 "WHERE bc.blob_digest IN (SELECT digest FROM ql3.artifact_uploads WHERE "
                 "project_id = $1 UNION SELECT digest FROM ql3.script_versions WHERE project_id "
                 "= $1 UNION SELECT digest FROM ql3.script_version_files WHERE project_id = $1))",
                 {P(project_id)}));
    QL_RETURN_IF_ERROR(rows.ExpectRows(1));
    const int64_t bytes = rows.Int(0, 0);
    QL_RETURN_IF_ERROR(rows.status());
    return bytes;
  }

  Result<std::optional<ScriptRecord>> LoadScript(const std::string& project_id,
                                                 const std::string& name) override {
    static const std::string kRead =
        std::string(kScriptColumns) + "WHERE project_id = $1 AND name = $2";
    // A write locks the head it loads: pushes and deletions of one script take turns, so a
    // push computes its version from the head the previous one left.
    static const std::string kLocked = kRead + std::string(LockClause(Lock::kUpdate));
    QL_ASSIGN_OR_RETURN(
        auto rows, Query(tx_, write_ ? kLocked : kRead, {P(project_id), P(name)}, ReadScripts));
    return First(std::move(rows));
  }

  Result<std::vector<ScriptRecord>> ListScripts(const std::string& project_id) override {
    static const std::string kSql =
        std::string(kScriptColumns) + "WHERE project_id = $1 ORDER BY name COLLATE \"C\"";
    return Query(tx_, kSql, {P(project_id)}, ReadScripts);
  }

  Status SaveScript(const ScriptRecord& s, bool insert) override {
    if (insert) {
      return Execute(tx_,
                     "INSERT INTO ql3.scripts (project_id, name, latest_version, status, "
                     "created_at_ms, updated_at_ms, deleted_at_ms) "
                     "VALUES ($1, $2, $3, $4, $5, $6, $7)",
                     {P(s.project_id), P(s.name), P(s.latest_version), P(s.status),
                      P(s.created_at_ms), P(s.updated_at_ms), P(s.deleted_at_ms)});
    }
    return ExecuteCas(tx_, NotFound("script_not_found", "script " + s.name + " does not exist"),
                      "UPDATE ql3.scripts SET latest_version = $3, status = $4, "
                      "updated_at_ms = $5, deleted_at_ms = $6 WHERE project_id = $1 AND name = $2",
                      {P(s.project_id), P(s.name), P(s.latest_version), P(s.status),
                       P(s.updated_at_ms), P(s.deleted_at_ms)});
  }

  Result<std::optional<ScriptVersionRecord>> LoadVersion(const std::string& project_id,
                                                         const std::string& name, int64_t version,
                                                         bool with_files) override {
    static const std::string kSql =
        std::string(kVersionColumns) + "WHERE project_id = $1 AND name = $2 AND version = $3";
    QL_ASSIGN_OR_RETURN(auto rows,
                        Query(tx_, kSql, {P(project_id), P(name), P(version)}, ReadVersions));
    std::optional<ScriptVersionRecord> found = First(std::move(rows));
    if (!found || !with_files) return found;
    QL_ASSIGN_OR_RETURN(found->files,
                        Query(tx_,
                              "SELECT path, digest, size, executable FROM "
                              "ql3.script_version_files WHERE project_id = $1 AND name = $2 "
                              "AND version = $3 ORDER BY path COLLATE \"C\"",
                              {P(project_id), P(name), P(version)}, ReadFiles));
    return found;
  }

  Result<std::vector<ScriptVersionRecord>> ListVersions(const std::string& project_id,
                                                        const std::string& name) override {
    static const std::string kSql =
        std::string(kVersionColumns) + "WHERE project_id = $1 AND name = $2 ORDER BY version DESC";
    return Query(tx_, kSql, {P(project_id), P(name)}, ReadVersions);
  }

  Status InsertVersion(const ScriptVersionRecord& v) override {
    std::vector<std::optional<std::string>> paths, digests, sizes, executables;
    for (const ScriptFile& f : v.files) {
      paths.emplace_back(f.path);
      digests.emplace_back(f.digest);
      sizes.emplace_back(std::to_string(f.size));
      executables.emplace_back(f.executable ? "t" : "f");
    }
    // The version and its files in one statement; a version taken by another push fails on
    // script_versions_pkey.
    return Execute(
        tx_,
        "WITH v AS (INSERT INTO ql3.script_versions (project_id, name, version, kind, digest, "
        "size, entry, created_by, created_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) "
        "RETURNING project_id, name, version) "
        "INSERT INTO ql3.script_version_files (project_id, name, version, path, digest, size, "
        "executable) SELECT v.project_id, v.name, v.version, f.path, f.digest, f.size, "
        "f.executable FROM v, unnest($10::text[], $11::text[], $12::bigint[], $13::boolean[]) "
        "AS f (path, digest, size, executable)",
        {P(v.project_id), P(v.name), P(v.version), P(v.kind), P(v.digest), P(v.size), P(v.entry),
         P(v.created_by), P(v.created_at_ms), PArray(paths), PArray(digests), PArray(sizes),
         PArray(executables)});
  }

  Result<std::vector<ScriptVersionKey>> ListExpiredVersions(int64_t cutoff_ms, int limit) override {
    return Query(tx_,
                 "SELECT v.project_id, v.name, v.version FROM ql3.script_versions v "
                 "WHERE v.created_at_ms < $1 AND NOT EXISTS (SELECT 1 FROM ql3.scripts s "
                 "WHERE s.project_id = v.project_id AND s.name = v.name AND s.status = 'active' "
                 "AND s.latest_version = v.version) "
                 "ORDER BY v.created_at_ms, v.project_id, v.name COLLATE \"C\", v.version "
                 "LIMIT $2",
                 {P(cutoff_ms), P(static_cast<int64_t>(limit))}, ReadKeys);
  }

  Status DeleteVersion(const ScriptVersionKey& key) override {
    // Its files go with it (ON DELETE CASCADE).
    return Execute(tx_,
                   "DELETE FROM ql3.script_versions WHERE project_id = $1 AND name = $2 "
                   "AND version = $3",
                   {P(key.project_id), P(key.name), P(key.version)});
  }

  Result<int64_t> DeleteOrphanUploads(int64_t cutoff_ms) override {
    QL_ASSIGN_OR_RETURN(Rows rows,
                        tx_.Exec("DELETE FROM ql3.artifact_uploads u WHERE u.touched_at_ms < $1 "
                                 "AND NOT EXISTS (SELECT 1 FROM ql3.script_versions v "
                                 "WHERE v.project_id = u.project_id AND v.digest = u.digest) "
                                 "AND NOT EXISTS (SELECT 1 FROM ql3.script_version_files f "
                                 "WHERE f.project_id = u.project_id AND f.digest = u.digest)",
                                 {P(cutoff_ms)}));
    return rows.affected();
  }

  Result<int64_t> DeleteOrphanBlobs(int64_t cutoff_ms) override {
    // Their chunk lists go with them (ON DELETE CASCADE).
    QL_ASSIGN_OR_RETURN(
        Rows rows,
        tx_.Exec("DELETE FROM ql3.artifact_blobs b WHERE b.touched_at_ms < $1 "
                 "AND NOT EXISTS (SELECT 1 FROM ql3.artifact_uploads u WHERE u.digest = b.digest) "
                 "AND NOT EXISTS (SELECT 1 FROM ql3.script_versions v WHERE v.digest = b.digest) "
                 "AND NOT EXISTS (SELECT 1 FROM ql3.script_version_files f "
                 "WHERE f.digest = b.digest)",
                 {P(cutoff_ms)}));
    return rows.affected();
  }

  Result<std::pair<int64_t, int64_t>> DeleteOrphanChunks(int64_t cutoff_ms) override {
    QL_ASSIGN_OR_RETURN(
        Rows rows,
        tx_.Exec("WITH gone AS (DELETE FROM ql3.artifact_chunks c WHERE c.touched_at_ms < $1 "
                 "AND NOT EXISTS (SELECT 1 FROM ql3.artifact_blob_chunks bc "
                 "WHERE bc.chunk_digest = c.digest) RETURNING c.size) "
                 "SELECT count(*), coalesce(sum(size), 0)::bigint FROM gone",
                 {P(cutoff_ms)}));
    QL_RETURN_IF_ERROR(rows.ExpectRows(1));
    std::pair<int64_t, int64_t> out{rows.Int(0, 0), rows.Int(0, 1)};
    QL_RETURN_IF_ERROR(rows.status());
    return out;
  }

 private:
  Tx& tx_;
  bool write_;
};

}  // namespace

Status PgArtifactRunner::Run(ArtifactTxKind kind, std::string_view operation,
                             const std::function<Status(GovernanceTx&, ArtifactTx&)>& body) {
  const bool write = kind == ArtifactTxKind::kWrite;
  if (write && admin_ == nullptr) {
    return Unavailable(
        "admin_pool_missing",
        std::string(operation) + " needs the admin database URL (--admin-database-url)");
  }
  TxOptions options;
  options.read_only = !write;
  // A read-only REPEATABLE READ transaction reads one snapshot and never fails to serialize.
  options.isolation = write ? Isolation::kReadCommitted : Isolation::kRepeatableRead;
  Pool& pool = write ? *admin_ : runtime_;
  return pool.Transact(options, operation, [&](Tx& tx) {
    std::unique_ptr<GovernanceTx> governance = NewGovernanceTx(tx);
    PgArtifactTx artifacts(tx, write);
    return body(*governance, artifacts);
  });
}

}  // namespace ql::pg
