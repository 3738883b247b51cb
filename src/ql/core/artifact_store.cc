#include "ql/core/artifact_store.h"

#include <algorithm>
#include <set>
#include <utility>

#include "ql/core/canonical_json.h"
#include "ql/core/ids.h"

namespace ql {
namespace {

constexpr std::string_view kScriptTarget = "script";

Status ArtifactNotFound(const std::string& digest) {
  return NotFound("artifact_not_found", "blob " + digest + " is not held by this project");
}

Status ScriptNotFound(const std::string& name) {
  return NotFound("script_not_found", "script " + name + " does not exist");
}

Status VersionNotFound(const std::string& name, int64_t version) {
  return NotFound("script_version_not_found", "script " + name + " has no version " +
                                                  std::to_string(version) +
                                                  " (never pushed, or purged by retention)");
}

Status ValidateNamed(const std::string& project_id, const std::string& name) {
  QL_RETURN_IF_ERROR(ValidateId("project id", project_id));
  return ValidateScriptName(name);
}

// The fence of a write, or (for the system) only the project's existence.
Status Fence(GovernanceTx& gov, const std::optional<PolicyFence>& fence,
             const std::string& project_id) {
  if (fence) return CheckPolicyFence(gov, *fence, project_id);
  QL_ASSIGN_OR_RETURN(std::optional<ProjectRecord> project, gov.LoadProject(project_id));
  if (!project) return NotFound("project_not_found", "project " + project_id + " does not exist");
  return Status::Ok();
}

// Checks the quota for adding `adding` bytes the project does not hold yet (`held`: what it
// holds without them, read when not given).
Status CheckQuota(ArtifactTx& tx, const std::string& project_id, int64_t adding,
                  const ArtifactLimits& limits, std::optional<int64_t> known = std::nullopt) {
  if (adding <= 0) return Status::Ok();
  int64_t held = 0;
  if (known.has_value()) {
    held = *known;
  } else {
    QL_ASSIGN_OR_RETURN(held, tx.ProjectBytes(project_id));
  }
  if (held + adding > limits.max_project_bytes) {
    return InvalidArgument("artifact_project_quota",
                           "the project would hold " + std::to_string(held + adding) +
                               " bytes of artifacts, more than its limit of " +
                               std::to_string(limits.max_project_bytes));
  }
  return Status::Ok();
}

// Requires every chunk `blob` lists to be stored still (an orphan purge may have removed one
// between its write and this commit): else Unavailable artifact_chunk_missing, `retry` saying
// what to do again.
Status RequireChunks(ArtifactTx& tx, const BlobDescriptor& blob, std::string_view retry) {
  QL_ASSIGN_OR_RETURN(auto sizes, tx.ChunkSizes(blob.chunks));
  std::set<std::string> present;
  for (const auto& [chunk, size] : sizes) present.insert(chunk);
  for (const std::string& chunk : blob.chunks) {
    if (present.count(chunk) == 0) {
      return Unavailable("artifact_chunk_missing", "chunk " + chunk + " of blob " + blob.digest +
                                                       " was removed meanwhile; " +
                                                       std::string(retry));
    }
  }
  return Status::Ok();
}

// Commits an uploaded or composed blob as held by `project_id`: its chunks still there, the
// project's quota when the blob is new to it, the blob row and the upload row.
Status CommitHeldBlob(ArtifactTx& tx, const std::string& project_id, const BlobDescriptor& blob,
                      const ArtifactLimits& limits, int64_t now_ms, std::string_view retry) {
  QL_RETURN_IF_ERROR(RequireChunks(tx, blob, retry));
  QL_ASSIGN_OR_RETURN(bool held, tx.ProjectHolds(project_id, blob.digest));
  QL_ASSIGN_OR_RETURN(int64_t before, tx.ProjectBytes(project_id));
  QL_RETURN_IF_ERROR(tx.PutBlob(blob, now_ms));
  QL_RETURN_IF_ERROR(tx.PutUpload(project_id, blob.digest, now_ms));
  if (held) return Status::Ok();
  // Measured after the write (the transaction is undone on a refusal): chunks the project
  // already holds (a composed file's pieces) add nothing.
  QL_ASSIGN_OR_RETURN(int64_t after, tx.ProjectBytes(project_id));
  return CheckQuota(tx, project_id, after - before, limits, before);
}

// The files of a push, checked and sorted by path; `entry` resolved.
struct CheckedPush {
  std::vector<ScriptFile> files;
  std::string entry;
  int64_t size = 0;
};

Result<CheckedPush> CheckPush(const PushScriptCommand& cmd) {
  CheckedPush out;
  out.files = cmd.files;
  for (const ScriptFile& f : out.files) {
    QL_RETURN_IF_ERROR(ValidateArtifactPath(f.path));
    QL_RETURN_IF_ERROR(ValidateArtifactDigest(f.digest));
    if (f.size < 0) {
      return InvalidArgument("artifact_tree_invalid",
                             "file " + QuoteForMessage(f.path) + " has a negative size");
    }
    out.size += f.size;
  }
  if (cmd.kind == kScriptKindFile) {
    if (out.files.size() != 1) {
      return InvalidArgument("artifact_tree_invalid", "a file script has exactly one file, got " +
                                                          std::to_string(out.files.size()));
    }
    if (out.files[0].path.find('/') != std::string::npos) {
      return InvalidArgument("artifact_path_invalid",
                             "the file of a file script is a name without '/', got " +
                                 QuoteForMessage(out.files[0].path));
    }
    if (!cmd.entry.empty() && cmd.entry != out.files[0].path) {
      return InvalidArgument("script_entry_invalid", "the entry of a file script is its file " +
                                                         QuoteForMessage(out.files[0].path));
    }
    out.entry = out.files[0].path;
    return out;
  }
  if (cmd.kind != kScriptKindTree) {
    return InvalidArgument("script_kind_invalid",
                           "script kind must be file or tree, got " + QuoteForMessage(cmd.kind));
  }
  std::sort(out.files.begin(), out.files.end(),
            [](const ScriptFile& a, const ScriptFile& b) { return a.path < b.path; });
  if (cmd.entry.empty()) {
    return InvalidArgument("script_entry_invalid", "a tree script needs an entry: the file run");
  }
  const bool named = std::any_of(out.files.begin(), out.files.end(),
                                 [&](const ScriptFile& f) { return f.path == cmd.entry; });
  if (!named) {
    return InvalidArgument("script_entry_invalid",
                           "entry " + QuoteForMessage(cmd.entry) + " is not a file of the tree");
  }
  out.entry = cmd.entry;
  return out;
}

// Bytes of a string blob written in one piece (a tree's manifest): its chunks, then the blob.
Result<BlobDescriptor> DescribeString(std::string_view bytes, size_t chunk_bytes,
                                      std::vector<std::pair<std::string, std::string>>& chunks) {
  BlobChunker chunker(int64_t{1} << 40, chunk_bytes);
  auto keep = [&](const std::string& digest, std::string_view piece) {
    chunks.emplace_back(digest, std::string(piece));
    return Status::Ok();
  };
  QL_RETURN_IF_ERROR(chunker.Add(bytes, keep));
  return chunker.Finish(keep);
}

class StoreUpload final : public BlobUpload {
 public:
  StoreUpload(ArtifactStore& store, BeginUploadCommand cmd)
      : store_(store),
        cmd_(std::move(cmd)),
        chunker_(cmd_.limits.max_blob_bytes, store.chunk_bytes()) {}

  Status Write(std::string_view bytes) override {
    if (!failed_.ok()) return failed_;
    failed_ = chunker_.Add(bytes, Sink());
    return failed_;
  }

  Result<BlobDescriptor> Finish() override {
    if (!failed_.ok()) return failed_;
    if (committed_) return InvalidArgument("upload_finished", "the upload was finished already");
    // The last chunk is stored once; a commit that failed (a quota, a chunk purged meanwhile)
    // may be tried again.
    if (!described_) {
      Result<BlobDescriptor> described = chunker_.Finish(Sink());
      if (!described.ok()) {
        failed_ = described.status();
        return failed_;
      }
      described_ = std::move(described).value();
    }
    const BlobDescriptor& blob = *described_;
    // Uploads are not audited one by one: the push that names them is.
    QL_RETURN_IF_ERROR(store_.runner().Run(
        ArtifactTxKind::kWrite, "commit blob", [&](GovernanceTx& gov, ArtifactTx& tx) {
          QL_RETURN_IF_ERROR(Fence(gov, cmd_.fence, cmd_.project_id));
          return CommitHeldBlob(tx, cmd_.project_id, blob, cmd_.limits, cmd_.now_ms,
                                "upload again");
        }));
    committed_ = true;
    return blob;
  }

 private:
  ChunkSink Sink() {
    return [this](const std::string& digest, std::string_view bytes) {
      return store_.PutChunk(digest, bytes, cmd_.now_ms);
    };
  }

  ArtifactStore& store_;
  BeginUploadCommand cmd_;
  BlobChunker chunker_;
  Status failed_ = Status::Ok();
  std::optional<BlobDescriptor> described_;
  bool committed_ = false;
};

}  // namespace

Status ValidateArtifactDigest(std::string_view digest) {
  if (IsSha256Hex(digest)) return Status::Ok();
  return InvalidArgument(
      "artifact_digest_invalid",
      "a digest is 64 lowercase hex digits (SHA-256), got " + QuoteForMessage(digest));
}

ArtifactStore::ArtifactStore(ArtifactTxRunner& runner, RandomSource& random, size_t chunk_bytes)
    : runner_(runner), random_(random), chunk_bytes_(std::max<size_t>(chunk_bytes, 1)) {}

AuditRecord ArtifactStore::Fact(const Actor& actor, std::string_view action,
                                const std::string& project_id, const std::string& target,
                                int64_t now_ms) {
  AuditRecord fact;
  {
    std::lock_guard<std::mutex> lock(random_mu_);
    fact.id = NewUuidV7(now_ms, random_);
  }
  fact.at_ms = now_ms;
  if (!actor.principal_id.empty()) fact.actor_id = actor.principal_id;
  fact.action = std::string(action);
  fact.target_kind = std::string(kScriptTarget);
  fact.target_id = target;
  fact.project_id = project_id;
  fact.outcome = std::string(kAuditOk);
  fact.code = std::string(kAuditOk);
  fact.request_id = actor.request_id;
  return fact;
}

Status ArtifactStore::PutChunk(const std::string& digest, std::string_view bytes, int64_t now_ms) {
  if (bytes.empty() || Sha256Hex(bytes) != digest) {
    return Internal("artifact_chunk_invalid", "chunk " + digest + " does not have its digest");
  }
  return runner_.Run(ArtifactTxKind::kWrite, "store chunk", [&](GovernanceTx&, ArtifactTx& tx) {
    return tx.PutChunk(digest, bytes, now_ms).status();
  });
}

std::unique_ptr<BlobUpload> ArtifactStore::BeginUpload(const BeginUploadCommand& cmd) {
  return std::make_unique<StoreUpload>(*this, cmd);
}

Result<BlobDescriptor> ArtifactStore::ComposeBlob(const ComposeBlobCommand& cmd) {
  QL_RETURN_IF_ERROR(ValidateId("project id", cmd.project_id));
  const int64_t chunk = static_cast<int64_t>(chunk_bytes_);
  if (static_cast<int64_t>(cmd.pieces.size()) > cmd.limits.max_blob_bytes / chunk + 1) {
    return InvalidArgument("artifact_too_large", "the blob is larger than the limit of " +
                                                     std::to_string(cmd.limits.max_blob_bytes) +
                                                     " bytes");
  }
  for (const std::string& piece : cmd.pieces) QL_RETURN_IF_ERROR(ValidateArtifactDigest(piece));
  // The whole digest is computed from the stored bytes, one piece at a time.
  BlobDescriptor blob;
  blob.chunks = cmd.pieces;
  QL_RETURN_IF_ERROR(
      runner_.Run(ArtifactTxKind::kRead, "compose blob", [&](GovernanceTx&, ArtifactTx& tx) {
        Sha256Hasher whole;
        blob.size = 0;
        for (size_t i = 0; i < cmd.pieces.size(); ++i) {
          const std::string& piece = cmd.pieces[i];
          QL_ASSIGN_OR_RETURN(bool held, tx.ProjectHolds(cmd.project_id, piece));
          QL_ASSIGN_OR_RETURN(std::optional<StoredBlob> stored, tx.LoadBlob(piece));
          if (!held || !stored) return ArtifactNotFound(piece);
          const bool last = i + 1 == cmd.pieces.size();
          if (stored->blob.chunks != std::vector<std::string>{piece} ||
              (!last && stored->blob.size != chunk) || stored->blob.size > chunk) {
            return InvalidArgument("artifact_piece_invalid",
                                   "piece " + std::to_string(i) + " (" + piece + ", " +
                                       std::to_string(stored->blob.size) +
                                       " bytes) must be one chunk of " + std::to_string(chunk) +
                                       " bytes (the last 1.." + std::to_string(chunk) + ")");
          }
          QL_ASSIGN_OR_RETURN(std::optional<std::string> bytes, tx.ReadChunk(piece));
          if (!bytes || Sha256Hex(*bytes) != piece) {
            return Corrupt("artifact_corrupt",
                           "piece " + piece + " is missing or does not have its digest");
          }
          whole.Update(*bytes);
          blob.size += static_cast<int64_t>(bytes->size());
          if (blob.size > cmd.limits.max_blob_bytes) {
            return InvalidArgument("artifact_too_large",
                                   "the blob is larger than the limit of " +
                                       std::to_string(cmd.limits.max_blob_bytes) + " bytes");
          }
        }
        blob.digest = whole.FinishHex();
        return Status::Ok();
      }));
  QL_RETURN_IF_ERROR(
      runner_.Run(ArtifactTxKind::kWrite, "compose blob", [&](GovernanceTx& gov, ArtifactTx& tx) {
        QL_RETURN_IF_ERROR(Fence(gov, cmd.fence, cmd.project_id));
        return CommitHeldBlob(tx, cmd.project_id, blob, cmd.limits, cmd.now_ms,
                              "upload the piece again");
      }));
  return blob;
}

Result<BlobDescriptor> ArtifactStore::StatBlob(const std::string& project_id,
                                               const std::string& digest) {
  QL_RETURN_IF_ERROR(ValidateId("project id", project_id));
  QL_RETURN_IF_ERROR(ValidateArtifactDigest(digest));
  BlobDescriptor out;
  QL_RETURN_IF_ERROR(
      runner_.Run(ArtifactTxKind::kRead, "read blob", [&](GovernanceTx&, ArtifactTx& tx) {
        QL_ASSIGN_OR_RETURN(bool held, tx.ProjectHolds(project_id, digest));
        if (!held) return ArtifactNotFound(digest);
        QL_ASSIGN_OR_RETURN(std::optional<StoredBlob> blob, tx.LoadBlob(digest));
        if (!blob) return ArtifactNotFound(digest);
        out = blob->blob;
        return Status::Ok();
      }));
  return out;
}

Status ArtifactStore::ReadBlob(const std::string& project_id, const std::string& digest,
                               const BlobSink& sink) {
  QL_RETURN_IF_ERROR(ValidateId("project id", project_id));
  QL_RETURN_IF_ERROR(ValidateArtifactDigest(digest));
  Status sink_status = Status::Ok();
  Status read = runner_.Run(ArtifactTxKind::kRead, "read blob", [&](GovernanceTx&, ArtifactTx& tx) {
    QL_ASSIGN_OR_RETURN(bool held, tx.ProjectHolds(project_id, digest));
    if (!held) return ArtifactNotFound(digest);
    QL_ASSIGN_OR_RETURN(std::optional<StoredBlob> blob, tx.LoadBlob(digest));
    if (!blob) return ArtifactNotFound(digest);
    BlobVerifier verifier(blob->blob);
    for (size_t i = 0; i < blob->blob.chunks.size(); ++i) {
      QL_ASSIGN_OR_RETURN(std::optional<std::string> bytes, tx.ReadChunk(blob->blob.chunks[i]));
      if (!bytes) {
        return Corrupt("artifact_corrupt", "blob " + digest + " chunk " + std::to_string(i) +
                                               " is missing from the store");
      }
      QL_RETURN_IF_ERROR(verifier.Next(*bytes));
      sink_status = sink(*bytes);
      if (!sink_status.ok()) return sink_status;
    }
    return verifier.Finish();
  });
  if (!sink_status.ok()) return sink_status;
  return read;
}

Result<std::string> ArtifactStore::ReadBlobChunk(const std::string& project_id,
                                                 const BlobDescriptor& blob, size_t index) {
  QL_RETURN_IF_ERROR(ValidateId("project id", project_id));
  QL_RETURN_IF_ERROR(ValidateArtifactDigest(blob.digest));
  if (index >= blob.chunks.size()) {
    return InvalidArgument("artifact_chunk_index", "blob " + blob.digest + " has " +
                                                       std::to_string(blob.chunks.size()) +
                                                       " chunks, not " + std::to_string(index + 1));
  }
  std::string out;
  QL_RETURN_IF_ERROR(
      runner_.Run(ArtifactTxKind::kRead, "read chunk", [&](GovernanceTx&, ArtifactTx& tx) {
        QL_ASSIGN_OR_RETURN(bool held, tx.ProjectHolds(project_id, blob.digest));
        if (!held) return ArtifactNotFound(blob.digest);
        QL_ASSIGN_OR_RETURN(std::optional<std::string> bytes, tx.ReadChunk(blob.chunks[index]));
        if (!bytes) {
          return Corrupt("artifact_corrupt", "blob " + blob.digest + " chunk " +
                                                 std::to_string(index) +
                                                 " is missing from the store");
        }
        out = std::move(*bytes);
        return Status::Ok();
      }));
  if (Sha256Hex(out) != blob.chunks[index]) {
    return Corrupt("artifact_corrupt", "blob " + blob.digest + " chunk " + std::to_string(index) +
                                           " does not have its digest");
  }
  return out;
}

Result<PushScriptResult> ArtifactStore::PushScript(const PushScriptCommand& cmd) {
  QL_RETURN_IF_ERROR(ValidateNamed(cmd.project_id, cmd.name));
  QL_ASSIGN_OR_RETURN(CheckedPush push, CheckPush(cmd));
  // A tree's manifest, and its chunks (a manifest of 10,000 entries is about 1.5 MiB).
  std::string manifest;
  BlobDescriptor manifest_blob;
  std::vector<std::pair<std::string, std::string>> manifest_chunks;
  std::string digest;
  if (cmd.kind == kScriptKindTree) {
    std::vector<TreeEntry> entries;
    entries.reserve(push.files.size());
    for (const ScriptFile& f : push.files) {
      entries.push_back(TreeEntry{f.path, f.executable, f.size, f.digest});
    }
    QL_ASSIGN_OR_RETURN(manifest, EncodeTreeManifest(std::move(entries)));
    QL_ASSIGN_OR_RETURN(manifest_blob, DescribeString(manifest, chunk_bytes_, manifest_chunks));
    digest = manifest_blob.digest;
    for (const auto& [chunk, bytes] : manifest_chunks) {
      QL_RETURN_IF_ERROR(PutChunk(chunk, bytes, cmd.now_ms));
    }
  } else {
    digest = push.files[0].digest;
  }
  PushScriptResult result;
  const AuditRecord fact = Fact(cmd.actor, "script.push", cmd.project_id, cmd.name, cmd.now_ms);
  QL_RETURN_IF_ERROR(
      runner_.Run(ArtifactTxKind::kWrite, "push script", [&](GovernanceTx& gov, ArtifactTx& tx) {
        result = PushScriptResult{};
        QL_RETURN_IF_ERROR(Fence(gov, cmd.fence, cmd.project_id));
        // Every file must be a blob the project holds, with the size it claims.
        std::set<std::string> fresh;
        for (const ScriptFile& f : push.files) {
          QL_ASSIGN_OR_RETURN(bool held, tx.ProjectHolds(cmd.project_id, f.digest));
          QL_ASSIGN_OR_RETURN(std::optional<StoredBlob> blob, tx.LoadBlob(f.digest));
          if (!held || !blob) return ArtifactNotFound(f.digest);
          if (blob->blob.size != f.size) {
            return InvalidArgument("artifact_tree_invalid",
                                   "file " + QuoteForMessage(f.path) + " claims " +
                                       std::to_string(f.size) + " bytes; blob " + f.digest +
                                       " has " + std::to_string(blob->blob.size));
          }
        }
        QL_ASSIGN_OR_RETURN(std::optional<ScriptRecord> head,
                            tx.LoadScript(cmd.project_id, cmd.name));
        const int64_t latest = head ? head->latest_version : 0;
        if (head && head->status == kScriptActive && latest > 0) {
          QL_ASSIGN_OR_RETURN(std::optional<ScriptVersionRecord> last,
                              tx.LoadVersion(cmd.project_id, cmd.name, latest, true));
          if (last && last->kind == cmd.kind && last->digest == digest &&
              last->entry == push.entry && last->files == push.files &&
              (!cmd.expected_latest || *cmd.expected_latest == latest)) {
            result.version = *last;
            result.unchanged = true;
            return Status::Ok();
          }
        }
        if (cmd.expected_latest && *cmd.expected_latest != latest) {
          return Conflict("script_version_conflict", "script " + cmd.name + " is at version " +
                                                         std::to_string(latest) + ", not " +
                                                         std::to_string(*cmd.expected_latest) +
                                                         " (another push came first)");
        }
        if (cmd.kind == kScriptKindTree) {
          QL_ASSIGN_OR_RETURN(bool held, tx.ProjectHolds(cmd.project_id, digest));
          if (!held) {
            QL_RETURN_IF_ERROR(CheckQuota(tx, cmd.project_id, manifest_blob.size, cmd.limits));
          }
          QL_RETURN_IF_ERROR(RequireChunks(tx, manifest_blob, "push again"));
          QL_RETURN_IF_ERROR(tx.PutBlob(manifest_blob, cmd.now_ms));
        }
        ScriptRecord next = head.value_or(
            ScriptRecord{cmd.project_id, cmd.name, 0, "", cmd.now_ms, cmd.now_ms, std::nullopt});
        next.latest_version = latest + 1;
        next.status = std::string(kScriptActive);
        next.updated_at_ms = cmd.now_ms;
        next.deleted_at_ms.reset();
        QL_RETURN_IF_ERROR(tx.SaveScript(next, /*insert=*/!head.has_value()));
        ScriptVersionRecord version;
        version.project_id = cmd.project_id;
        version.name = cmd.name;
        version.version = latest + 1;
        version.kind = cmd.kind;
        version.digest = digest;
        version.size = push.size;
        version.entry = push.entry;
        version.created_by = cmd.actor.principal_id;
        version.created_at_ms = cmd.now_ms;
        version.files = push.files;
        QL_RETURN_IF_ERROR(tx.InsertVersion(version));
        result.version = version;
        AuditRecord audit = fact;
        audit.target_id = cmd.name + "@" + std::to_string(version.version);
        return gov.InsertAudit(audit);
      }));
  return result;
}

Result<ScriptRecord> ArtifactStore::GetScript(const std::string& project_id,
                                              const std::string& name) {
  QL_RETURN_IF_ERROR(ValidateNamed(project_id, name));
  std::optional<ScriptRecord> head;
  QL_RETURN_IF_ERROR(
      runner_.Run(ArtifactTxKind::kRead, "read script", [&](GovernanceTx&, ArtifactTx& tx) {
        QL_ASSIGN_OR_RETURN(head, tx.LoadScript(project_id, name));
        return Status::Ok();
      }));
  if (!head) return ScriptNotFound(name);
  return *head;
}

Result<std::vector<ScriptRecord>> ArtifactStore::ListScripts(const std::string& project_id) {
  QL_RETURN_IF_ERROR(ValidateId("project id", project_id));
  std::vector<ScriptRecord> out;
  QL_RETURN_IF_ERROR(
      runner_.Run(ArtifactTxKind::kRead, "list scripts", [&](GovernanceTx&, ArtifactTx& tx) {
        QL_ASSIGN_OR_RETURN(out, tx.ListScripts(project_id));
        return Status::Ok();
      }));
  return out;
}

Result<ScriptVersionRecord> ArtifactStore::GetScriptVersion(const std::string& project_id,
                                                            const std::string& name,
                                                            std::optional<int64_t> version) {
  QL_RETURN_IF_ERROR(ValidateNamed(project_id, name));
  if (version && *version < 1) {
    return InvalidArgument("script_ref_invalid",
                           "a script version is >= 1, got " + std::to_string(*version));
  }
  ScriptVersionRecord out;
  QL_RETURN_IF_ERROR(
      runner_.Run(ArtifactTxKind::kRead, "read script", [&](GovernanceTx&, ArtifactTx& tx) {
        QL_ASSIGN_OR_RETURN(std::optional<ScriptRecord> head, tx.LoadScript(project_id, name));
        if (!head) return ScriptNotFound(name);
        int64_t wanted = 0;
        if (version) {
          wanted = *version;
        } else {
          if (head->status != kScriptActive) {
            return NotFound("script_not_found",
                            "script " + name + " was deleted; name a version to read it");
          }
          wanted = head->latest_version;
        }
        QL_ASSIGN_OR_RETURN(std::optional<ScriptVersionRecord> found,
                            tx.LoadVersion(project_id, name, wanted, true));
        if (!found) return VersionNotFound(name, wanted);
        out = std::move(*found);
        return Status::Ok();
      }));
  return out;
}

Result<std::vector<ScriptVersionRecord>> ArtifactStore::ListScriptVersions(
    const std::string& project_id, const std::string& name) {
  QL_RETURN_IF_ERROR(ValidateNamed(project_id, name));
  std::vector<ScriptVersionRecord> out;
  QL_RETURN_IF_ERROR(
      runner_.Run(ArtifactTxKind::kRead, "list versions", [&](GovernanceTx&, ArtifactTx& tx) {
        QL_ASSIGN_OR_RETURN(std::optional<ScriptRecord> head, tx.LoadScript(project_id, name));
        if (!head) return ScriptNotFound(name);
        QL_ASSIGN_OR_RETURN(out, tx.ListVersions(project_id, name));
        return Status::Ok();
      }));
  return out;
}

Result<ScriptRecord> ArtifactStore::DeleteScript(const DeleteScriptCommand& cmd) {
  QL_RETURN_IF_ERROR(ValidateNamed(cmd.project_id, cmd.name));
  ScriptRecord out;
  const AuditRecord fact = Fact(cmd.actor, "script.delete", cmd.project_id, cmd.name, cmd.now_ms);
  QL_RETURN_IF_ERROR(
      runner_.Run(ArtifactTxKind::kWrite, "delete script", [&](GovernanceTx& gov, ArtifactTx& tx) {
        QL_RETURN_IF_ERROR(Fence(gov, cmd.fence, cmd.project_id));
        QL_ASSIGN_OR_RETURN(std::optional<ScriptRecord> head,
                            tx.LoadScript(cmd.project_id, cmd.name));
        if (!head) return ScriptNotFound(cmd.name);
        out = *head;
        if (head->status == kScriptDeleted) return Status::Ok();
        out.status = std::string(kScriptDeleted);
        out.updated_at_ms = cmd.now_ms;
        out.deleted_at_ms = cmd.now_ms;
        QL_RETURN_IF_ERROR(tx.SaveScript(out, /*insert=*/false));
        return gov.InsertAudit(fact);
      }));
  return out;
}

Result<PurgeArtifactsResult> ArtifactStore::PurgeArtifacts(const PurgeArtifactsCommand& cmd) {
  if (cmd.limit < 1 || cmd.limit > 1000) {
    return InvalidArgument("invalid_limit",
                           "limit must be 1..1000, got " + std::to_string(cmd.limit));
  }
  const std::set<ScriptVersionKey> pinned(cmd.pinned.begin(), cmd.pinned.end());
  PurgeArtifactsResult result;
  QL_RETURN_IF_ERROR(
      runner_.Run(ArtifactTxKind::kWrite, "purge artifacts", [&](GovernanceTx&, ArtifactTx& tx) {
        result = PurgeArtifactsResult{};
        const int64_t version_cutoff = cmd.now_ms - cmd.retention.version_keep_ms;
        // Pinned versions are skipped, so more are read than may be removed.
        QL_ASSIGN_OR_RETURN(
            std::vector<ScriptVersionKey> expired,
            tx.ListExpiredVersions(version_cutoff, cmd.limit + static_cast<int>(std::min<size_t>(
                                                                   pinned.size(), 1000))));
        for (const ScriptVersionKey& key : expired) {
          if (result.versions >= cmd.limit) break;
          if (pinned.count(key) > 0) continue;
          QL_RETURN_IF_ERROR(tx.DeleteVersion(key));
          ++result.versions;
        }
        const int64_t orphan_cutoff = cmd.now_ms - cmd.retention.orphan_grace_ms;
        QL_ASSIGN_OR_RETURN(result.uploads, tx.DeleteOrphanUploads(orphan_cutoff));
        QL_ASSIGN_OR_RETURN(result.blobs, tx.DeleteOrphanBlobs(orphan_cutoff));
        QL_ASSIGN_OR_RETURN(auto chunks, tx.DeleteOrphanChunks(orphan_cutoff));
        result.chunks = chunks.first;
        result.chunk_bytes = chunks.second;
        return Status::Ok();
      }));
  return result;
}

Result<int64_t> ArtifactStore::ProjectBytes(const std::string& project_id) {
  QL_RETURN_IF_ERROR(ValidateId("project id", project_id));
  int64_t out = 0;
  QL_RETURN_IF_ERROR(
      runner_.Run(ArtifactTxKind::kRead, "project bytes", [&](GovernanceTx&, ArtifactTx& tx) {
        QL_ASSIGN_OR_RETURN(out, tx.ProjectBytes(project_id));
        return Status::Ok();
      }));
  return out;
}

}  // namespace ql
