#include "ql/storage/sqlite/sqlite_artifacts.h"

#include <memory>
#include <utility>

#include "ql/storage/sqlite/sqlite_db.h"
#include "ql/storage/sqlite/sqlite_governance.h"

namespace ql::sqlite {
namespace {

constexpr char kScriptColumns[] =
    "SELECT project_id, name, latest_version, status, created_at_ms, updated_at_ms, "
    "deleted_at_ms FROM scripts ";

constexpr char kVersionColumns[] =
    "SELECT project_id, name, version, kind, digest, size, entry, created_by, created_at_ms "
    "FROM script_versions ";

// Blobs a project holds: uploaded, or named by one of its script versions or their files.
constexpr char kHeldDigests[] =
    "SELECT digest FROM artifact_uploads WHERE project_id = ?1 "
    "UNION SELECT digest FROM script_versions WHERE project_id = ?1 "
    "UNION SELECT digest FROM script_version_files WHERE project_id = ?1";

ScriptRecord ReadScript(const Stmt& s) {
  return ScriptRecord{s.Text(0), s.Text(1), s.Int(2), s.Text(3), s.Int(4), s.Int(5), s.OptInt(6)};
}

ScriptVersionRecord ReadVersion(const Stmt& s) {
  ScriptVersionRecord v;
  v.project_id = s.Text(0);
  v.name = s.Text(1);
  v.version = s.Int(2);
  v.kind = s.Text(3);
  v.digest = s.Text(4);
  v.size = s.Int(5);
  v.entry = s.Text(6);
  v.created_by = s.Text(7);
  v.created_at_ms = s.Int(8);
  return v;
}

class SqliteArtifactTx final : public ArtifactTx {
 public:
  explicit SqliteArtifactTx(Db& db) : db_(db) {}

  Result<bool> PutChunk(const std::string& digest, std::string_view bytes,
                        int64_t now_ms) override {
    QL_ASSIGN_OR_RETURN(Stmt touch, db_.Prepare("UPDATE artifact_chunks SET touched_at_ms = "
                                                "max(touched_at_ms, ?2) WHERE digest = ?1"));
    touch.BindAll(digest, now_ms);
    QL_RETURN_IF_ERROR(touch.Run());
    if (db_.Changes() == 1) return false;
    QL_ASSIGN_OR_RETURN(Stmt insert, db_.Prepare("INSERT INTO artifact_chunks (digest, size, "
                                                 "bytes, touched_at_ms) VALUES (?1, ?2, ?3, ?4)"));
    insert.Bind(1, digest).Bind(2, static_cast<int64_t>(bytes.size()));
    insert.BindBlob(3, bytes).Bind(4, now_ms);
    QL_RETURN_IF_ERROR(insert.Run());
    return true;
  }

  Result<std::vector<std::pair<std::string, int64_t>>> ChunkSizes(
      const std::vector<std::string>& digests) override {
    std::vector<std::pair<std::string, int64_t>> out;
    for (const std::string& digest : digests) {
      QL_ASSIGN_OR_RETURN(Stmt s,
                          db_.Prepare("SELECT size FROM artifact_chunks WHERE digest = ?1"));
      s.BindAll(digest);
      QL_RETURN_IF_ERROR(EachRow(s, [&](const Stmt& r) { out.emplace_back(digest, r.Int(0)); }));
    }
    return out;
  }

  Result<std::optional<std::string>> ReadChunk(const std::string& digest) override {
    QL_ASSIGN_OR_RETURN(Stmt s, db_.Prepare("SELECT bytes FROM artifact_chunks WHERE digest = ?1"));
    s.BindAll(digest);
    std::optional<std::string> out;
    QL_RETURN_IF_ERROR(EachRow(s, [&](const Stmt& r) { out = r.Blob(0); }));
    return out;
  }

  Result<std::optional<StoredBlob>> LoadBlob(const std::string& digest) override {
    std::optional<StoredBlob> out;
    {
      QL_ASSIGN_OR_RETURN(Stmt s, db_.Prepare("SELECT size, touched_at_ms FROM artifact_blobs "
                                              "WHERE digest = ?1"));
      s.BindAll(digest);
      QL_RETURN_IF_ERROR(EachRow(s, [&](const Stmt& r) {
        out = StoredBlob{BlobDescriptor{digest, r.Int(0), {}}, r.Int(1)};
      }));
    }
    if (!out) return out;
    QL_ASSIGN_OR_RETURN(Stmt s, db_.Prepare("SELECT chunk_digest FROM artifact_blob_chunks "
                                            "WHERE blob_digest = ?1 ORDER BY seq"));
    s.BindAll(digest);
    QL_RETURN_IF_ERROR(EachRow(s, [&](const Stmt& r) { out->blob.chunks.push_back(r.Text(0)); }));
    return out;
  }

  Status PutBlob(const BlobDescriptor& blob, int64_t now_ms) override {
    {
      QL_ASSIGN_OR_RETURN(Stmt touch, db_.Prepare("UPDATE artifact_blobs SET touched_at_ms = "
                                                  "max(touched_at_ms, ?2) WHERE digest = ?1"));
      touch.BindAll(blob.digest, now_ms);
      QL_RETURN_IF_ERROR(touch.Run());
      if (db_.Changes() == 1) return Status::Ok();
    }
    {
      QL_ASSIGN_OR_RETURN(Stmt insert,
                          db_.Prepare("INSERT INTO artifact_blobs (digest, size, chunk_count, "
                                      "touched_at_ms) VALUES (?1, ?2, ?3, ?4)"));
      insert.BindAll(blob.digest, blob.size, static_cast<int64_t>(blob.chunks.size()), now_ms);
      QL_RETURN_IF_ERROR(insert.Run());
    }
    for (size_t i = 0; i < blob.chunks.size(); ++i) {
      QL_ASSIGN_OR_RETURN(Stmt chunk,
                          db_.Prepare("INSERT INTO artifact_blob_chunks (blob_digest, seq, "
                                      "chunk_digest) VALUES (?1, ?2, ?3)"));
      chunk.BindAll(blob.digest, static_cast<int64_t>(i), blob.chunks[i]);
      QL_RETURN_IF_ERROR(chunk.Run());
    }
    return Status::Ok();
  }

  Status PutUpload(const std::string& project_id, const std::string& digest,
                   int64_t now_ms) override {
    QL_ASSIGN_OR_RETURN(Stmt s, db_.Prepare("INSERT INTO artifact_uploads (project_id, digest, "
                                            "touched_at_ms) VALUES (?1, ?2, ?3) "
                                            "ON CONFLICT (project_id, digest) DO UPDATE SET "
                                            "touched_at_ms = max(touched_at_ms, "
                                            "excluded.touched_at_ms)"));
    s.BindAll(project_id, digest, now_ms);
    return s.Run();
  }

  Result<bool> ProjectHolds(const std::string& project_id, const std::string& digest) override {
    QL_ASSIGN_OR_RETURN(
        Stmt s,
        db_.Prepare("SELECT EXISTS (SELECT 1 FROM artifact_uploads WHERE project_id = ?1 AND "
                    "digest = ?2) OR EXISTS (SELECT 1 FROM script_versions WHERE project_id = ?1 "
                    "AND digest = ?2) OR EXISTS (SELECT 1 FROM script_version_files WHERE "
                    "project_id = ?1 AND digest = ?2)"));
    s.BindAll(project_id, digest);
    bool held = false;
    QL_RETURN_IF_ERROR(EachRow(s, [&](const Stmt& r) { held = r.Bool(0); }));
    return held;
  }

  Result<int64_t> ProjectBytes(const std::string& project_id) override {
    static const std::string kSql =
        std::string(
            "SELECT coalesce(sum(size), 0) FROM artifact_chunks WHERE digest IN (SELECT "
            "chunk_digest FROM artifact_blob_chunks WHERE blob_digest IN (") +
        kHeldDigests + "))";
    QL_ASSIGN_OR_RETURN(Stmt s, db_.Prepare(kSql));
    s.BindAll(project_id);
    int64_t bytes = 0;
    QL_RETURN_IF_ERROR(EachRow(s, [&](const Stmt& r) { bytes = r.Int(0); }));
    return bytes;
  }

  Result<std::optional<ScriptRecord>> LoadScript(const std::string& project_id,
                                                 const std::string& name) override {
    static const std::string kSql =
        std::string(kScriptColumns) + "WHERE project_id = ?1 AND name = ?2";
    QL_ASSIGN_OR_RETURN(Stmt s, db_.Prepare(kSql));
    s.BindAll(project_id, name);
    std::optional<ScriptRecord> out;
    QL_RETURN_IF_ERROR(EachRow(s, [&](const Stmt& r) { out = ReadScript(r); }));
    return out;
  }

  Result<std::vector<ScriptRecord>> ListScripts(const std::string& project_id) override {
    static const std::string kSql =
        std::string(kScriptColumns) + "WHERE project_id = ?1 ORDER BY name";
    QL_ASSIGN_OR_RETURN(Stmt s, db_.Prepare(kSql));
    s.BindAll(project_id);
    std::vector<ScriptRecord> out;
    QL_RETURN_IF_ERROR(EachRow(s, [&](const Stmt& r) { out.push_back(ReadScript(r)); }));
    return out;
  }

  Status SaveScript(const ScriptRecord& h, bool insert) override {
    QL_ASSIGN_OR_RETURN(
        Stmt s, db_.Prepare(insert ? "INSERT INTO scripts (project_id, name, latest_version, "
                                     "status, created_at_ms, updated_at_ms, deleted_at_ms) "
                                     "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"
                                   : "UPDATE scripts SET latest_version = ?3, status = ?4, "
                                     "updated_at_ms = ?6, deleted_at_ms = ?7 "
                                     "WHERE project_id = ?1 AND name = ?2"));
    // Both forms number their parameters alike; the UPDATE leaves ?5 (created_at_ms) unused.
    s.BindAll(h.project_id, h.name, h.latest_version, h.status, h.created_at_ms, h.updated_at_ms,
              h.deleted_at_ms);
    return s.Run();
  }

  Result<std::optional<ScriptVersionRecord>> LoadVersion(const std::string& project_id,
                                                         const std::string& name, int64_t version,
                                                         bool with_files) override {
    static const std::string kSql =
        std::string(kVersionColumns) + "WHERE project_id = ?1 AND name = ?2 AND version = ?3";
    std::optional<ScriptVersionRecord> out;
    {
      QL_ASSIGN_OR_RETURN(Stmt s, db_.Prepare(kSql));
      s.BindAll(project_id, name, version);
      QL_RETURN_IF_ERROR(EachRow(s, [&](const Stmt& r) { out = ReadVersion(r); }));
    }
    if (!out || !with_files) return out;
    QL_ASSIGN_OR_RETURN(Stmt s, db_.Prepare("SELECT path, digest, size, executable FROM "
                                            "script_version_files WHERE project_id = ?1 AND "
                                            "name = ?2 AND version = ?3 ORDER BY path"));
    s.BindAll(project_id, name, version);
    QL_RETURN_IF_ERROR(EachRow(s, [&](const Stmt& r) {
      out->files.push_back(ScriptFile{r.Text(0), r.Text(1), r.Int(2), r.Bool(3)});
    }));
    return out;
  }

  Result<std::vector<ScriptVersionRecord>> ListVersions(const std::string& project_id,
                                                        const std::string& name) override {
    static const std::string kSql =
        std::string(kVersionColumns) + "WHERE project_id = ?1 AND name = ?2 ORDER BY version DESC";
    QL_ASSIGN_OR_RETURN(Stmt s, db_.Prepare(kSql));
    s.BindAll(project_id, name);
    std::vector<ScriptVersionRecord> out;
    QL_RETURN_IF_ERROR(EachRow(s, [&](const Stmt& r) { out.push_back(ReadVersion(r)); }));
    return out;
  }

  Status InsertVersion(const ScriptVersionRecord& v) override {
    {
      QL_ASSIGN_OR_RETURN(
          Stmt s, db_.Prepare("INSERT INTO script_versions (project_id, name, version, kind, "
                              "digest, size, entry, created_by, created_at_ms) "
                              "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"));
      s.BindAll(v.project_id, v.name, v.version, v.kind, v.digest, v.size, v.entry, v.created_by,
                v.created_at_ms);
      QL_RETURN_IF_ERROR(s.Run());
    }
    for (const ScriptFile& f : v.files) {
      QL_ASSIGN_OR_RETURN(
          Stmt s, db_.Prepare("INSERT INTO script_version_files (project_id, name, version, "
                              "path, digest, size, executable) "
                              "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"));
      s.BindAll(v.project_id, v.name, v.version, f.path, f.digest, f.size, f.executable);
      QL_RETURN_IF_ERROR(s.Run());
    }
    return Status::Ok();
  }

  Result<std::vector<ScriptVersionKey>> ListExpiredVersions(int64_t cutoff_ms, int limit) override {
    QL_ASSIGN_OR_RETURN(
        Stmt s, db_.Prepare("SELECT v.project_id, v.name, v.version FROM script_versions v "
                            "JOIN scripts s ON s.project_id = v.project_id AND s.name = v.name "
                            "WHERE v.created_at_ms < ?1 AND NOT (s.status = 'active' AND "
                            "s.latest_version = v.version) "
                            "ORDER BY v.created_at_ms, v.project_id, v.name, v.version "
                            "LIMIT ?2"));
    s.BindAll(cutoff_ms, limit);
    std::vector<ScriptVersionKey> out;
    QL_RETURN_IF_ERROR(EachRow(s, [&](const Stmt& r) {
      out.push_back(ScriptVersionKey{r.Text(0), r.Text(1), r.Int(2)});
    }));
    return out;
  }

  Status DeleteVersion(const ScriptVersionKey& key) override {
    for (const char* sql : {"DELETE FROM script_version_files WHERE project_id = ?1 AND "
                            "name = ?2 AND version = ?3",
                            "DELETE FROM script_versions WHERE project_id = ?1 AND name = ?2 "
                            "AND version = ?3"}) {
      QL_ASSIGN_OR_RETURN(Stmt s, db_.Prepare(sql));
      s.BindAll(key.project_id, key.name, key.version);
      QL_RETURN_IF_ERROR(s.Run());
    }
    return Status::Ok();
  }

  Result<int64_t> DeleteOrphanUploads(int64_t cutoff_ms) override {
    QL_ASSIGN_OR_RETURN(Stmt s,
                        db_.Prepare("DELETE FROM artifact_uploads WHERE touched_at_ms < ?1 AND "
                                    "NOT EXISTS (SELECT 1 FROM script_versions v WHERE "
                                    "v.project_id = artifact_uploads.project_id AND "
                                    "v.digest = artifact_uploads.digest) AND "
                                    "NOT EXISTS (SELECT 1 FROM script_version_files f WHERE "
                                    "f.project_id = artifact_uploads.project_id AND "
                                    "f.digest = artifact_uploads.digest)"));
    s.BindAll(cutoff_ms);
    QL_RETURN_IF_ERROR(s.Run());
    return db_.Changes();
  }

  Result<int64_t> DeleteOrphanBlobs(int64_t cutoff_ms) override {
    static constexpr char kOrphan[] =
        "SELECT digest FROM artifact_blobs b WHERE b.touched_at_ms < ?1 AND "
        "NOT EXISTS (SELECT 1 FROM artifact_uploads u WHERE u.digest = b.digest) AND "
        "NOT EXISTS (SELECT 1 FROM script_versions v WHERE v.digest = b.digest) AND "
        "NOT EXISTS (SELECT 1 FROM script_version_files f WHERE f.digest = b.digest)";
    {
      QL_ASSIGN_OR_RETURN(Stmt s, db_.Prepare(std::string("DELETE FROM artifact_blob_chunks "
                                                          "WHERE blob_digest IN (") +
                                              kOrphan + ")"));
      s.BindAll(cutoff_ms);
      QL_RETURN_IF_ERROR(s.Run());
    }
    QL_ASSIGN_OR_RETURN(Stmt s, db_.Prepare(std::string("DELETE FROM artifact_blobs WHERE "
                                                        "digest IN (") +
                                            kOrphan + ")"));
    s.BindAll(cutoff_ms);
    QL_RETURN_IF_ERROR(s.Run());
    return db_.Changes();
  }

  Result<std::pair<int64_t, int64_t>> DeleteOrphanChunks(int64_t cutoff_ms) override {
    static constexpr char kWhere[] =
        " FROM artifact_chunks c WHERE c.touched_at_ms < ?1 AND NOT EXISTS (SELECT 1 FROM "
        "artifact_blob_chunks bc WHERE bc.chunk_digest = c.digest)";
    std::pair<int64_t, int64_t> out{0, 0};
    {
      QL_ASSIGN_OR_RETURN(
          Stmt s, db_.Prepare(std::string("SELECT count(*), coalesce(sum(c.size), 0)") + kWhere));
      s.BindAll(cutoff_ms);
      QL_RETURN_IF_ERROR(EachRow(s, [&](const Stmt& r) { out = {r.Int(0), r.Int(1)}; }));
    }
    if (out.first == 0) return out;
    QL_ASSIGN_OR_RETURN(
        Stmt s, db_.Prepare(std::string("DELETE FROM artifact_chunks WHERE digest IN (SELECT "
                                        "c.digest") +
                            kWhere + ")"));
    s.BindAll(cutoff_ms);
    QL_RETURN_IF_ERROR(s.Run());
    return out;
  }

 private:
  Db& db_;
};

}  // namespace

Status SqliteArtifactRunner::Run(ArtifactTxKind kind, std::string_view operation,
                                 const std::function<Status(GovernanceTx&, ArtifactTx&)>& body) {
  const TxMode mode = kind == ArtifactTxKind::kRead ? TxMode::kRead : TxMode::kWrite;
  return db_.Transact(mode, operation, [&](Tx&) {
    std::unique_ptr<GovernanceTx> governance = NewGovernanceTx(db_);
    SqliteArtifactTx artifacts(db_);
    return body(*governance, artifacts);
  });
}

}  // namespace ql::sqlite
