#pragma once

// The Artifact store port (DESIGN §14; ADR-0037 step 5), written once over a store's row
// primitives the way secret_store.h is. Three layers:
//
//   chunks   content-addressed pieces of at most kArtifactChunkBytes (SHA-256 of their bytes),
//            shared by every blob and project that holds the same bytes: stored once;
//   blobs    immutable byte strings named by their SHA-256, an ordered list of chunks;
//   scripts  named, versioned entries of a project: a version is one file, or a directory tree
//            whose canonical manifest (artifact.h) is itself a blob; versions are append-only.
//
// A project holds a blob only by uploading its bytes (an upload row) or by a script version
// that names it, and can read only the blobs it holds: knowing a digest is never enough to
// read, or to publish, another project's bytes. Uploads stream: a blob is cut into chunks as it
// arrives and each chunk is written in its own short transaction, so no blob is ever whole in
// memory or in one transaction; the blob row is committed once every chunk is there. Chunks,
// blobs and uploads nobody references are purged after a grace period (an upload in flight
// touches what it writes), script versions by retention.
//
// Errors beyond ports.h's conventions:
//   InvalidArgument  artifact_too_large, artifact_project_quota, artifact_path_*,
//                    artifact_tree_invalid, script_name_invalid, script_ref_invalid,
//                    script_entry_invalid, artifact_digest_invalid
//   NotFound         script_not_found, script_version_not_found, artifact_not_found (a blob
//                    the project does not hold, or one that was purged)
//   Corrupt          artifact_corrupt (stored bytes that do not have their digest)
//   Conflict         script_version_conflict (another push took the version first), and the
//                    policy fence's project_archived
//   PermissionDenied the policy fence's codes

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ql/core/artifact.h"
#include "ql/core/governance_ports.h"
#include "ql/core/governance_store.h"
#include "ql/core/ports.h"
#include "ql/core/status.h"

namespace ql {

inline constexpr std::string_view kScriptActive = "active";
inline constexpr std::string_view kScriptDeleted = "deleted";
inline constexpr std::string_view kScriptKindFile = "file";
inline constexpr std::string_view kScriptKindTree = "tree";

// Limits of what a project may store; the installation sets them (flags of the daemons).
struct ArtifactLimits {
  int64_t max_blob_bytes = int64_t{256} << 20;
  // The bytes of the distinct chunks of the blobs a project holds (uploads and script
  // versions): the pieces of a composed file and the file itself count once.
  int64_t max_project_bytes = int64_t{2} << 30;
};

// What keeps unreferenced artifacts between an upload and the push that names them, and how
// long a script's older versions stay when no task pins them.
struct ArtifactRetention {
  int64_t orphan_grace_ms = int64_t{24} * 60 * 60 * 1000;
  int64_t version_keep_ms = int64_t{30} * 24 * 60 * 60 * 1000;
};

// A script's head: its latest version and whether it was deleted.
struct ScriptRecord {
  std::string project_id;
  std::string name;
  int64_t latest_version = 0;
  std::string status;  // active | deleted
  int64_t created_at_ms = 0;
  int64_t updated_at_ms = 0;
  std::optional<int64_t> deleted_at_ms;
  bool operator==(const ScriptRecord&) const = default;
};

// One file of a script version: for a `file` version exactly one, named by the script's file
// name; for a `tree`, every entry of its manifest.
struct ScriptFile {
  std::string path;
  std::string digest;
  int64_t size = 0;
  bool executable = false;
  bool operator==(const ScriptFile&) const = default;
};

struct ScriptVersionRecord {
  std::string project_id;
  std::string name;
  int64_t version = 0;
  std::string kind;    // file | tree
  std::string digest;  // the file's blob, or the tree's manifest blob
  int64_t size = 0;    // the file's bytes, or the sum of the tree's files
  // The file run: the file's name (`file`), or a path of the tree (`tree`).
  std::string entry;
  std::string created_by;  // principal id; empty for the system
  int64_t created_at_ms = 0;
  // Filled by GetScriptVersion (not by listings), sorted by path.
  std::vector<ScriptFile> files;
  bool operator==(const ScriptVersionRecord&) const = default;
};

// The key of one version.
struct ScriptVersionKey {
  std::string project_id;
  std::string name;
  int64_t version = 0;
  auto operator<=>(const ScriptVersionKey&) const = default;
};

// Streams one blob into a project (ArtifactRepository::BeginUpload). Not thread-safe.
class BlobUpload {
 public:
  virtual ~BlobUpload() = default;
  // Adds bytes; every chunk they complete is stored before this returns. Errors:
  // InvalidArgument artifact_too_large (past the blob limit), the store's.
  virtual Status Write(std::string_view bytes) = 0;
  // Stores the last chunk, commits the blob and records the project's upload (under the fence
  // given to BeginUpload). Errors: artifact_project_quota, the fence's, the store's; after a
  // failed commit Finish may be called again, after a successful one it is upload_finished.
  // Chunks are written before the fence is checked: callers authorize first (ScriptService).
  virtual Result<BlobDescriptor> Finish() = 0;
};

struct BeginUploadCommand {
  Actor actor;
  std::optional<PolicyFence> fence;
  std::string project_id;
  ArtifactLimits limits;
  int64_t now_ms = 0;
};

// Joins pieces the project uploaded (each a blob of one chunk: every piece but the last exactly
// the store's chunk size, the last 1..chunk size) into the blob of their bytes in order, so a
// client can send a large blob in requests of one chunk each, to any replica.
struct ComposeBlobCommand {
  Actor actor;
  std::optional<PolicyFence> fence;
  std::string project_id;
  std::vector<std::string> pieces;  // digests, in order
  ArtifactLimits limits;
  int64_t now_ms = 0;
};

struct PushScriptCommand {
  Actor actor;
  std::optional<PolicyFence> fence;
  std::string project_id;
  std::string name;
  std::string kind;  // file | tree
  // Blobs the project holds. A `file` has one, whose path is the file's name (one segment); a
  // `tree` has 1..kMaxTreeEntries. Sizes and digests must be the stored blobs'.
  std::vector<ScriptFile> files;
  // The file run; empty for a `file` (its name). Must name one of `files`.
  std::string entry;
  // When set, the script's latest version must still be this one (0: no version yet), else
  // Conflict script_version_conflict: a compare-and-set against another push.
  std::optional<int64_t> expected_latest;
  ArtifactLimits limits;
  int64_t now_ms = 0;
};

struct PushScriptResult {
  ScriptVersionRecord version;
  // The content equals the latest version's: nothing was written and `version` is that one.
  bool unchanged = false;
};

struct DeleteScriptCommand {
  Actor actor;
  std::optional<PolicyFence> fence;
  std::string project_id;
  std::string name;
  int64_t now_ms = 0;
};

struct PurgeArtifactsCommand {
  int64_t now_ms = 0;
  ArtifactRetention retention;
  // Versions that stay whatever their age: those a live task (or a run not finished) pins.
  std::vector<ScriptVersionKey> pinned;
  // The most versions removed in one call (1..1000).
  int limit = 100;
};

struct PurgeArtifactsResult {
  int64_t versions = 0;
  int64_t uploads = 0;
  int64_t blobs = 0;
  int64_t chunks = 0;
  int64_t chunk_bytes = 0;
  bool operator==(const PurgeArtifactsResult&) const = default;
};

// Receives a blob's bytes chunk by chunk, each verified against its own digest first; the
// blob's whole digest is checked after the last (then ReadBlob returns its error).
using BlobSink = std::function<Status(std::string_view bytes)>;

class ArtifactRepository {
 public:
  virtual ~ArtifactRepository() = default;

  // Starts streaming a blob into `cmd.project_id`; errors of the fence surface at Finish.
  virtual std::unique_ptr<BlobUpload> BeginUpload(const BeginUploadCommand& cmd) = 0;
  // Commits the blob of `cmd.pieces` and records the project's upload (see ComposeBlobCommand).
  // Errors: NotFound artifact_not_found (a piece the project does not hold), InvalidArgument
  // artifact_piece_invalid (a piece of the wrong size or more than one chunk),
  // artifact_too_large, artifact_project_quota, Corrupt artifact_corrupt, the fence's.
  virtual Result<BlobDescriptor> ComposeBlob(const ComposeBlobCommand& cmd) = 0;
  // Returns the descriptor of a blob the project holds; NotFound artifact_not_found otherwise.
  virtual Result<BlobDescriptor> StatBlob(const std::string& project_id,
                                          const std::string& digest) = 0;
  // Streams a blob the project holds to `sink`, one verified chunk at a time, all from one
  // snapshot. Errors: NotFound artifact_not_found, Corrupt artifact_corrupt, the sink's.
  virtual Status ReadBlob(const std::string& project_id, const std::string& digest,
                          const BlobSink& sink) = 0;

  // Returns chunk `index` of `blob` (a descriptor StatBlob returned) checked against its digest,
  // in a transaction of its own: a long read (an HTTP answer) holds no transaction between
  // chunks. Errors: NotFound artifact_not_found, Corrupt artifact_corrupt, InvalidArgument
  // artifact_chunk_index (past the last chunk).
  virtual Result<std::string> ReadBlobChunk(const std::string& project_id,
                                            const BlobDescriptor& blob, size_t index) = 0;

  // Appends a version to `cmd.name` (creating the script, or activating a deleted one again),
  // under the fence; a push whose files, kind and entry equal the latest version's writes
  // nothing. A tree's manifest is stored as a blob. Audited as `script.push`.
  virtual Result<PushScriptResult> PushScript(const PushScriptCommand& cmd) = 0;
  // Returns the head of a script, deleted ones included; NotFound script_not_found.
  virtual Result<ScriptRecord> GetScript(const std::string& project_id,
                                         const std::string& name) = 0;
  // Lists the heads of a project by name, deleted ones included.
  virtual Result<std::vector<ScriptRecord>> ListScripts(const std::string& project_id) = 0;
  // Returns a version with its files (the latest when `version` is unset). NotFound
  // script_not_found (no such script, or unset version of a deleted one),
  // script_version_not_found (never pushed, or purged).
  virtual Result<ScriptVersionRecord> GetScriptVersion(const std::string& project_id,
                                                       const std::string& name,
                                                       std::optional<int64_t> version) = 0;
  // Lists the stored versions of a script, newest first, without files.
  virtual Result<std::vector<ScriptVersionRecord>> ListScriptVersions(const std::string& project_id,
                                                                      const std::string& name) = 0;
  // Marks a script deleted under the fence (its versions stay until retention purges them, so
  // tasks pinned to them still run). NotFound script_not_found; deleting again writes nothing.
  // Audited as `script.delete`.
  virtual Result<ScriptRecord> DeleteScript(const DeleteScriptCommand& cmd) = 0;

  // Removes up to `limit` script versions that are older than the retention, not the latest of
  // a live script and not pinned; then uploads, blobs and chunks nobody references that are
  // older than the grace.
  virtual Result<PurgeArtifactsResult> PurgeArtifacts(const PurgeArtifactsCommand& cmd) = 0;
  // Returns the bytes of the distinct chunks of the blobs a project holds (its quota's measure).
  virtual Result<int64_t> ProjectBytes(const std::string& project_id) = 0;
};

// A stored blob's row: its descriptor and when it was last written or touched.
struct StoredBlob {
  BlobDescriptor blob;
  int64_t touched_at_ms = 0;
};

// Row primitives inside one transaction; nothing here decides.
class ArtifactTx {
 public:
  virtual ~ArtifactTx() = default;
  // Inserts a chunk, or when it exists sets its touched time to `now_ms`; returns whether it
  // was inserted. The caller has checked that `bytes` have `digest`.
  virtual Result<bool> PutChunk(const std::string& digest, std::string_view bytes,
                                int64_t now_ms) = 0;
  // Returns the sizes of the chunks that exist among `digests` (absent ones are missing).
  virtual Result<std::vector<std::pair<std::string, int64_t>>> ChunkSizes(
      const std::vector<std::string>& digests) = 0;
  // Returns a chunk's bytes, or nullopt.
  virtual Result<std::optional<std::string>> ReadChunk(const std::string& digest) = 0;
  virtual Result<std::optional<StoredBlob>> LoadBlob(const std::string& digest) = 0;
  // Inserts the blob and its chunk list, or when it exists sets its touched time.
  virtual Status PutBlob(const BlobDescriptor& blob, int64_t now_ms) = 0;
  // Records (or touches) that the project uploaded the blob.
  virtual Status PutUpload(const std::string& project_id, const std::string& digest,
                           int64_t now_ms) = 0;
  // Whether the project holds the blob: an upload, or a script version or file naming it.
  virtual Result<bool> ProjectHolds(const std::string& project_id, const std::string& digest) = 0;
  // The bytes of the distinct chunks of the blobs the project holds.
  virtual Result<int64_t> ProjectBytes(const std::string& project_id) = 0;

  virtual Result<std::optional<ScriptRecord>> LoadScript(const std::string& project_id,
                                                         const std::string& name) = 0;
  virtual Result<std::vector<ScriptRecord>> ListScripts(const std::string& project_id) = 0;
  // Inserts the head when `insert`, else overwrites its latest version, status, updated and
  // deleted times.
  virtual Status SaveScript(const ScriptRecord& script, bool insert) = 0;
  // Returns a version, with its files when `with_files`.
  virtual Result<std::optional<ScriptVersionRecord>> LoadVersion(const std::string& project_id,
                                                                 const std::string& name,
                                                                 int64_t version,
                                                                 bool with_files) = 0;
  virtual Result<std::vector<ScriptVersionRecord>> ListVersions(const std::string& project_id,
                                                                const std::string& name) = 0;
  // Inserts a version and its files. Duplicate when the version exists.
  virtual Status InsertVersion(const ScriptVersionRecord& version) = 0;

  // Versions created before `cutoff_ms` that are not the latest of an active script, oldest
  // first, at most `limit`.
  virtual Result<std::vector<ScriptVersionKey>> ListExpiredVersions(int64_t cutoff_ms,
                                                                    int limit) = 0;
  // Deletes a version with its files.
  virtual Status DeleteVersion(const ScriptVersionKey& key) = 0;
  // Deletes uploads touched before `cutoff_ms` whose blob no version of their project names.
  virtual Result<int64_t> DeleteOrphanUploads(int64_t cutoff_ms) = 0;
  // Deletes blobs touched before `cutoff_ms` that no upload, version or file names.
  virtual Result<int64_t> DeleteOrphanBlobs(int64_t cutoff_ms) = 0;
  // Deletes chunks touched before `cutoff_ms` that no blob lists; returns how many and bytes.
  virtual Result<std::pair<int64_t, int64_t>> DeleteOrphanChunks(int64_t cutoff_ms) = 0;
};

// Reads run on the runtime role, writes on the admin role in PostgreSQL (chunk writes of an
// upload too: they are the project's content).
enum class ArtifactTxKind { kRead, kWrite };

class ArtifactTxRunner {
 public:
  virtual ~ArtifactTxRunner() = default;
  // Runs `body` in one transaction of `kind` with the governance primitives of the same
  // transaction (for the fence and the audit), committing when it returns ok.
  virtual Status Run(ArtifactTxKind kind, std::string_view operation,
                     const std::function<Status(GovernanceTx&, ArtifactTx&)>& body) = 0;
};

class ArtifactStore final : public ArtifactRepository {
 public:
  // `runner` and `random` (audit ids) must outlive the store. `chunk_bytes` is the size blobs
  // written here are cut into (tests use small ones).
  ArtifactStore(ArtifactTxRunner& runner, RandomSource& random,
                size_t chunk_bytes = kArtifactChunkBytes);

  std::unique_ptr<BlobUpload> BeginUpload(const BeginUploadCommand& cmd) override;
  Result<BlobDescriptor> ComposeBlob(const ComposeBlobCommand& cmd) override;
  Result<BlobDescriptor> StatBlob(const std::string& project_id,
                                  const std::string& digest) override;
  Status ReadBlob(const std::string& project_id, const std::string& digest,
                  const BlobSink& sink) override;
  Result<std::string> ReadBlobChunk(const std::string& project_id, const BlobDescriptor& blob,
                                    size_t index) override;
  Result<PushScriptResult> PushScript(const PushScriptCommand& cmd) override;
  Result<ScriptRecord> GetScript(const std::string& project_id, const std::string& name) override;
  Result<std::vector<ScriptRecord>> ListScripts(const std::string& project_id) override;
  Result<ScriptVersionRecord> GetScriptVersion(const std::string& project_id,
                                               const std::string& name,
                                               std::optional<int64_t> version) override;
  Result<std::vector<ScriptVersionRecord>> ListScriptVersions(const std::string& project_id,
                                                              const std::string& name) override;
  Result<ScriptRecord> DeleteScript(const DeleteScriptCommand& cmd) override;
  Result<PurgeArtifactsResult> PurgeArtifacts(const PurgeArtifactsCommand& cmd) override;
  Result<int64_t> ProjectBytes(const std::string& project_id) override;

  // Stores one chunk in its own transaction after checking its digest (used by uploads).
  Status PutChunk(const std::string& digest, std::string_view bytes, int64_t now_ms);
  size_t chunk_bytes() const { return chunk_bytes_; }
  ArtifactTxRunner& runner() { return runner_; }
  AuditRecord Fact(const Actor& actor, std::string_view action, const std::string& project_id,
                   const std::string& target, int64_t now_ms);

 private:
  ArtifactTxRunner& runner_;
  RandomSource& random_;
  std::mutex random_mu_;
  size_t chunk_bytes_;
};

// Checks a digest's form: 64 lowercase hex digits, else InvalidArgument artifact_digest_invalid.
Status ValidateArtifactDigest(std::string_view digest);

}  // namespace ql
