// The PostgreSQL side of the artifact store (pg_artifacts.h) beyond the repository contract:
// chunk bytes stored exactly as sent over binary bytea, the schema's own guards (immutable
// chunks, append-only versions, script tombstones) and the roles' privileges, pushes of one
// script from two replicas taking turns on its head, and reads served by the runtime role alone.

#include "ql/storage/postgres/pg_artifacts.h"

#include <gtest/gtest.h>

#include <latch>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ql/core/artifact_store.h"
#include "ql/core/digest.h"
#include "ql/core/ids.h"
#include "ql/storage/postgres/pg_client.h"
#include "ql/storage/postgres/pg_migrations.h"
#include "ql/storage/postgres/pg_store.h"
#include "ql/storage/postgres/pg_test_support.h"
#include "ql/testing/contract_assertions.h"
#include "ql/testing/fake_clock.h"

namespace ql {
namespace {

using pg::testing::PgTestCluster;

constexpr int64_t kT0 = 1'780'000'000'000;

std::unique_ptr<PostgresStore> OpenStore(const std::string& database, bool with_admin = true) {
  PgTestCluster& cluster = PgTestCluster::Get();
  PostgresStoreOptions options;
  options.runtime.url = cluster.Url(pg::kRuntimeRole, database);
  options.runtime.max_connections = 2;
  if (with_admin) {
    pg::PoolOptions admin;
    admin.url = cluster.Url(pg::kAdminRole, database);
    admin.max_connections = 2;
    options.admin = admin;
  }
  Result<std::unique_ptr<PostgresStore>> store = PostgresStore::Open(options);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::move(store).value() : nullptr;
}

class PgArtifactsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    database_ = PgTestCluster::Get().NewDatabase();
    store_ = OpenStore(database_);
    ASSERT_NE(store_, nullptr);
    Result<ProjectRecord> project =
        store_->EnsureProject(NewUuidV7(kT0, random_), kDefaultProjectSlug, "Default", kT0);
    ASSERT_TRUE(project.ok()) << project.status().ToString();
    project_ = project->id;
  }

  std::string Psql(const std::string& sql) {
    Result<std::string> out = PgTestCluster::Get().server().Psql(database_, sql);
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    return out.ok() ? *out : "";
  }

  // Streams `bytes` into the project through `artifacts`, `piece` bytes per write.
  Result<BlobDescriptor> Upload(ArtifactRepository& artifacts, std::string_view bytes,
                                size_t piece = 100) {
    BeginUploadCommand cmd;
    cmd.project_id = project_;
    cmd.now_ms = kT0;
    std::unique_ptr<BlobUpload> upload = artifacts.BeginUpload(cmd);
    for (size_t at = 0; at < bytes.size(); at += piece) {
      QL_RETURN_IF_ERROR(upload->Write(bytes.substr(at, piece)));
    }
    return upload->Finish();
  }

  Result<std::string> ReadAll(ArtifactRepository& artifacts, const std::string& digest) {
    std::string out;
    QL_RETURN_IF_ERROR(artifacts.ReadBlob(project_, digest, [&](std::string_view bytes) {
      out.append(bytes);
      return Status::Ok();
    }));
    return out;
  }

  PushScriptCommand FilePush(const std::string& name, const BlobDescriptor& blob, int64_t now_ms) {
    PushScriptCommand cmd;
    cmd.project_id = project_;
    cmd.name = name;
    cmd.kind = std::string(kScriptKindFile);
    cmd.files = {ScriptFile{name + ".sh", blob.digest, blob.size, true}};
    cmd.now_ms = now_ms;
    return cmd;
  }

  ::ql::testing::SeededRandom random_{11};
  std::string database_;
  std::unique_ptr<PostgresStore> store_;
  std::string project_;
};

// Every byte value, NUL included, is stored as sent: each chunk row holds exactly its piece
// (its length and its hex as the server prints them), and reads back byte-identical.
TEST_F(PgArtifactsTest, ChunksHoldExactlyTheBytesSent) {
  pg::PgArtifactRunner runner(store_->runtime_pool(), store_->admin_pool());
  ArtifactStore artifacts(runner, random_, /*chunk_bytes=*/256);
  std::string bytes;
  for (int round = 0; round < 3; ++round) {
    for (int b = 255; b >= 0; --b) bytes.push_back(static_cast<char>(b ^ round));
  }
  bytes += "tail";
  QL_ASSERT_OK_AND_ASSIGN(BlobDescriptor blob, Upload(artifacts, bytes, 77));
  EXPECT_EQ(blob.digest, Sha256Hex(bytes));
  ASSERT_EQ(blob.chunks.size(), 4u);
  for (size_t i = 0; i < blob.chunks.size(); ++i) {
    const std::string piece = bytes.substr(i * 256, 256);
    EXPECT_EQ(blob.chunks[i], Sha256Hex(piece));
    std::string hex;
    for (unsigned char c : piece) {
      static constexpr char kHex[] = "0123456789abcdef";
      hex.push_back(kHex[c >> 4]);
      hex.push_back(kHex[c & 15]);
    }
    EXPECT_EQ(Psql("SELECT size || ' ' || length(bytes) || ' ' || encode(bytes, 'hex') FROM "
                   "ql3.artifact_chunks WHERE digest = '" +
                   blob.chunks[i] + "'"),
              std::to_string(piece.size()) + " " + std::to_string(piece.size()) + " " + hex + "\n");
  }
  EXPECT_EQ(
      Psql("SELECT string_agg(chunk_digest, ',' ORDER BY seq) FROM ql3.artifact_blob_chunks "
           "WHERE blob_digest = '" +
           blob.digest + "'"),
      blob.chunks[0] + "," + blob.chunks[1] + "," + blob.chunks[2] + "," + blob.chunks[3] + "\n");
  QL_ASSERT_OK_AND_ASSIGN(std::string back, ReadAll(artifacts, blob.digest));
  EXPECT_EQ(back, bytes);

  // A chunk written again is touched, not inserted; its bytes stay.
  Status again = runner.Run(ArtifactTxKind::kWrite, "again", [&](GovernanceTx&, ArtifactTx& tx) {
    const std::string piece = bytes.substr(0, 256);
    QL_ASSIGN_OR_RETURN(bool inserted, tx.PutChunk(blob.chunks[0], piece, kT0 + 5));
    EXPECT_FALSE(inserted);
    QL_ASSIGN_OR_RETURN(inserted, tx.PutChunk(blob.chunks[0], piece, kT0 - 5));
    EXPECT_FALSE(inserted);
    QL_ASSIGN_OR_RETURN(inserted, tx.PutChunk(Sha256Hex("new"), "new", kT0));
    EXPECT_TRUE(inserted);
    return Status::Ok();
  });
  ASSERT_TRUE(again.ok()) << again.ToString();
  EXPECT_EQ(
      Psql("SELECT touched_at_ms FROM ql3.artifact_chunks WHERE digest = '" + blob.chunks[0] + "'"),
      std::to_string(kT0 + 5) + "\n");
  EXPECT_EQ(Psql("SELECT count(*) FROM ql3.artifact_chunks"), "5\n");
}

// The schema keeps its own promises whatever a role's code does: a chunk's bytes never change
// (its touched time does), versions and their files are never updated, a script's row is never
// deleted; the runtime role writes nothing.
TEST_F(PgArtifactsTest, TheSchemaGuardsChunksVersionsAndTombstones) {
  QL_ASSERT_OK_AND_ASSIGN(BlobDescriptor blob, Upload(store_->artifacts(), "echo hello\n"));
  QL_ASSERT_OK_AND_ASSIGN(PushScriptResult pushed,
                          store_->artifacts().PushScript(FilePush("hello", blob, kT0 + 1)));
  ASSERT_EQ(pushed.version.version, 1);
  const std::string chunk = blob.chunks.at(0);

  auto as_admin = [&](const std::string& sql) {
    return store_->admin_pool()->Transact({}, "guard",
                                          [&](pg::Tx& tx) { return tx.Exec(sql).status(); });
  };
  auto as_runtime = [&](const std::string& sql) {
    return store_->runtime_pool().Transact({}, "guard",
                                           [&](pg::Tx& tx) { return tx.Exec(sql).status(); });
  };
  EXPECT_EQ(as_admin("UPDATE ql3.artifact_chunks SET bytes = '\\x00'::bytea || bytes "
                     "WHERE digest = '" +
                     chunk + "'")
                .reason(),
            "row_immutable");
  EXPECT_EQ(as_admin("UPDATE ql3.artifact_chunks SET size = size WHERE digest = '" + chunk + "'")
                .reason(),
            "row_immutable");
  EXPECT_TRUE(as_admin("UPDATE ql3.artifact_chunks SET touched_at_ms = touched_at_ms + 1").ok());
  EXPECT_EQ(as_admin("UPDATE ql3.script_versions SET entry = 'other.sh'").reason(),
            "row_immutable");
  EXPECT_EQ(as_admin("UPDATE ql3.script_version_files SET executable = false").reason(),
            "row_immutable");
  // No role may delete a script, and not even the owner gets past the trigger.
  EXPECT_EQ(as_admin("DELETE FROM ql3.scripts").reason(), "insufficient_privilege");
  Result<std::string> owner_delete =
      PgTestCluster::Get().server().Psql(database_, "DELETE FROM ql3.scripts");
  EXPECT_FALSE(owner_delete.ok());
  EXPECT_NE(owner_delete.status().message().find("scripts rows are immutable"), std::string::npos)
      << owner_delete.status().ToString();
  EXPECT_EQ(as_admin("TRUNCATE ql3.artifact_chunks CASCADE").reason(), "insufficient_privilege");
  EXPECT_EQ(
      as_admin("DELETE FROM ql3.artifact_blobs WHERE digest = '" + blob.digest + "'").reason(),
      "artifact_not_found");  // still named by an upload and a version
  for (const char* table :
       {"artifact_chunks", "artifact_blobs", "artifact_blob_chunks", "artifact_uploads", "scripts",
        "script_versions", "script_version_files"}) {
    SCOPED_TRACE(table);
    EXPECT_TRUE(as_runtime(std::string("SELECT count(*) FROM ql3.") + table).ok());
    EXPECT_EQ(as_runtime(std::string("DELETE FROM ql3.") + table).reason(),
              "insufficient_privilege");
  }
  EXPECT_EQ(Psql("SELECT count(*) FROM ql3.script_versions"), "1\n");
}

// Replicas pushing one script at the same time take turns on its head: every push lands as
// its own version, numbered without a gap, and none is refused for a version another took.
TEST_F(PgArtifactsTest, ConcurrentPushesOfOneScriptTakeTurns) {
  std::unique_ptr<PostgresStore> other = OpenStore(database_);
  ASSERT_NE(other, nullptr);
  QL_ASSERT_OK_AND_ASSIGN(BlobDescriptor first, Upload(store_->artifacts(), "echo 0\n"));
  QL_ASSERT_OK_AND_ASSIGN(PushScriptResult created,
                          store_->artifacts().PushScript(FilePush("job", first, kT0)));
  ASSERT_EQ(created.version.version, 1);
  constexpr int kRounds = 10;
  std::vector<BlobDescriptor> blobs;
  for (int i = 0; i < 2 * kRounds; ++i) {
    QL_ASSERT_OK_AND_ASSIGN(BlobDescriptor blob,
                            Upload(store_->artifacts(), "echo " + std::to_string(i + 1) + "\n"));
    blobs.push_back(blob);
  }
  std::set<int64_t> versions = {1};
  for (int round = 0; round < kRounds; ++round) {
    Result<PushScriptResult> a = InvalidArgument("unset", "");
    Result<PushScriptResult> b = InvalidArgument("unset", "");
    std::latch start(2);
    std::thread ta([&] {
      start.arrive_and_wait();
      a = store_->artifacts().PushScript(FilePush("job", blobs[2 * round], kT0 + 10 + round));
    });
    std::thread tb([&] {
      start.arrive_and_wait();
      b = other->artifacts().PushScript(FilePush("job", blobs[2 * round + 1], kT0 + 10 + round));
    });
    ta.join();
    tb.join();
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    EXPECT_NE(a->version.version, b->version.version);
    versions.insert(a->version.version);
    versions.insert(b->version.version);
  }
  EXPECT_EQ(versions.size(), static_cast<size_t>(2 * kRounds + 1));
  EXPECT_EQ(*versions.rbegin(), 2 * kRounds + 1);
  QL_ASSERT_OK_AND_ASSIGN(ScriptRecord head, other->artifacts().GetScript(project_, "job"));
  EXPECT_EQ(head.latest_version, 2 * kRounds + 1);
}

// A replica with the runtime role alone serves what was written (blobs, scripts, versions with
// their files, the quota's measure) and refuses every write for want of the admin role.
TEST_F(PgArtifactsTest, TheRuntimeRoleReadsAndNeverWrites) {
  const std::string bytes(3000, 'x');
  QL_ASSERT_OK_AND_ASSIGN(BlobDescriptor blob, Upload(store_->artifacts(), bytes));
  QL_ASSERT_OK_AND_ASSIGN(PushScriptResult pushed,
                          store_->artifacts().PushScript(FilePush("x", blob, kT0 + 1)));
  std::unique_ptr<PostgresStore> runtime_only = OpenStore(database_, /*with_admin=*/false);
  ASSERT_NE(runtime_only, nullptr);
  ArtifactRepository& reader = runtime_only->artifacts();
  QL_ASSERT_OK_AND_ASSIGN(std::string back, ReadAll(reader, blob.digest));
  EXPECT_EQ(back, bytes);
  QL_ASSERT_OK_AND_ASSIGN(BlobDescriptor stat, reader.StatBlob(project_, blob.digest));
  EXPECT_EQ(stat, blob);
  QL_ASSERT_OK_AND_ASSIGN(ScriptVersionRecord version,
                          reader.GetScriptVersion(project_, "x", std::nullopt));
  EXPECT_EQ(version, pushed.version);
  QL_ASSERT_OK_AND_ASSIGN(int64_t held, reader.ProjectBytes(project_));
  EXPECT_EQ(held, 3000);

  Result<BlobDescriptor> upload = Upload(reader, "more");
  EXPECT_EQ(upload.status().reason(), "admin_pool_missing") << upload.status().ToString();
  EXPECT_EQ(reader.PushScript(FilePush("x", blob, kT0 + 2)).status().reason(),
            "admin_pool_missing");
  PurgeArtifactsCommand purge;
  purge.now_ms = kT0;
  EXPECT_EQ(reader.PurgeArtifacts(purge).status().reason(), "admin_pool_missing");
}

// The purge removes old versions that are not the latest of a live script, then uploads,
// blobs and chunks nothing names once the grace has passed, counting each and the bytes.
TEST_F(PgArtifactsTest, ThePurgeRemovesWhatNothingHolds) {
  pg::PgArtifactRunner runner(store_->runtime_pool(), store_->admin_pool());
  ArtifactStore artifacts(runner, random_, /*chunk_bytes=*/4);
  QL_ASSERT_OK_AND_ASSIGN(BlobDescriptor v1, Upload(artifacts, "aaaabbbb"));
  QL_ASSERT_OK_AND_ASSIGN(BlobDescriptor v2, Upload(artifacts, "aaaacccc"));
  QL_ASSERT_OK_AND_ASSIGN(BlobDescriptor loose, Upload(artifacts, "dddd"));
  QL_ASSERT_OK_AND_ASSIGN(auto p1, artifacts.PushScript(FilePush("s", v1, kT0 + 1)));
  QL_ASSERT_OK_AND_ASSIGN(auto p2, artifacts.PushScript(FilePush("s", v2, kT0 + 2)));
  ASSERT_EQ(p2.version.version, 2);
  QL_ASSERT_OK_AND_ASSIGN(int64_t held, artifacts.ProjectBytes(project_));
  EXPECT_EQ(held, 4 * 4);  // the distinct chunks aaaa, bbbb, cccc and dddd

  PurgeArtifactsCommand purge;
  purge.now_ms = kT0 + 100;
  purge.retention.version_keep_ms = 50;
  purge.retention.orphan_grace_ms = 50;
  QL_ASSERT_OK_AND_ASSIGN(PurgeArtifactsResult first, artifacts.PurgeArtifacts(purge));
  // Version 1 goes; its blob stays while its upload does, and the loose upload goes with its
  // blob and the one chunk nothing else lists.
  EXPECT_EQ(first.versions, 1);
  EXPECT_EQ(first.uploads, 2);  // v1's (no version names it now) and the loose one
  EXPECT_EQ(first.blobs, 2);
  EXPECT_EQ(first.chunks, 2);  // "bbbb" and "dddd"; "aaaa" is v2's too
  EXPECT_EQ(first.chunk_bytes, 8);
  EXPECT_EQ(artifacts.GetScriptVersion(project_, "s", 1).status().reason(),
            "script_version_not_found");
  QL_ASSERT_OK_AND_ASSIGN(std::string kept, ReadAll(artifacts, v2.digest));
  EXPECT_EQ(kept, "aaaacccc");
  EXPECT_EQ(ReadAll(artifacts, loose.digest).status().reason(), "artifact_not_found");
  QL_ASSERT_OK_AND_ASSIGN(held, artifacts.ProjectBytes(project_));
  EXPECT_EQ(held, 8);

  // A deleted script's latest version goes too, unless it is pinned.
  DeleteScriptCommand del;
  del.project_id = project_;
  del.name = "s";
  del.now_ms = kT0 + 3;
  ASSERT_TRUE(artifacts.DeleteScript(del).ok());
  purge.pinned = {ScriptVersionKey{project_, "s", 2}};
  QL_ASSERT_OK_AND_ASSIGN(PurgeArtifactsResult pinned, artifacts.PurgeArtifacts(purge));
  EXPECT_EQ(pinned, PurgeArtifactsResult{});
  purge.pinned.clear();
  QL_ASSERT_OK_AND_ASSIGN(PurgeArtifactsResult last, artifacts.PurgeArtifacts(purge));
  EXPECT_EQ(last.versions, 1);
  EXPECT_EQ(last.uploads, 1);
  EXPECT_EQ(last.blobs, 1);
  EXPECT_EQ(last.chunks, 2);
  EXPECT_EQ(last.chunk_bytes, 8);
  EXPECT_EQ(Psql("SELECT (SELECT count(*) FROM ql3.artifact_chunks) + (SELECT count(*) FROM "
                 "ql3.artifact_blobs) + (SELECT count(*) FROM ql3.artifact_blob_chunks) + "
                 "(SELECT count(*) FROM ql3.artifact_uploads) + (SELECT count(*) FROM "
                 "ql3.script_versions) + (SELECT count(*) FROM ql3.script_version_files)"),
            "0\n");
  QL_ASSERT_OK_AND_ASSIGN(ScriptRecord tombstone, artifacts.GetScript(project_, "s"));
  EXPECT_EQ(tombstone.status, kScriptDeleted);
  (void)p1;
}

}  // namespace
}  // namespace ql
