// The artifacts part of the repository contract (DESIGN §14; core/artifact_store.h): blobs
// streamed in and read back byte-identical and verified, equal chunks stored once whoever
// uploads them, bounded memory for a blob far larger than a chunk, a damaged chunk stopped
// before the reader sees it, blobs readable and publishable only by a project that holds them,
// versioned scripts under the policy fence with their audit, quotas, and the purge of old
// versions and of what nothing references. Runs on every store through RepositoryContractTest.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ql/core/artifact.h"
#include "ql/core/artifact_store.h"
#include "ql/core/digest.h"
#include "ql/core/governance.h"
#include "ql/testing/contract_assertions.h"
#include "ql/testing/repository_contract.h"

namespace ql::testing {

namespace internal {
bool LinkArtifactContract() { return true; }
}  // namespace internal

namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kHourMs = 3'600'000;
constexpr int64_t kDayMs = 24 * kHourMs;

// Deterministic bytes in which no two chunks are equal (xorshift64*), produced piece by piece.
class ByteStream {
 public:
  explicit ByteStream(uint64_t seed) : state_(seed * 0x9e3779b97f4a7c15ULL | 1) {}
  // Replaces `out` with the next `n` bytes.
  void Fill(std::string& out, size_t n) {
    out.resize(n);
    for (size_t i = 0; i < n; i += 8) {
      const uint64_t word = Next();
      std::memcpy(out.data() + i, &word, std::min<size_t>(8, n - i));
    }
  }

 private:
  uint64_t Next() {
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    return state_ * 0x2545f4914f6cdd1dULL;
  }
  uint64_t state_;
};

std::string Bytes(size_t n, uint64_t seed) {
  std::string out;
  ByteStream(seed).Fill(out, n);
  return out;
}

// Reads a field of /proc/self/status in KiB (VmHWM, VmRSS); -1 when absent.
int64_t ProcStatusKib(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1));
  }
  return -1;
}

// Resets the process's peak RSS (VmHWM) to its current RSS; false when the kernel refuses.
bool ResetPeakRss() {
  std::ofstream out("/proc/self/clear_refs");
  if (!out) return false;
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

// Checks that `status` failed with `code` and the stable `reason`, naming both when not.
::testing::AssertionResult HasError(const Status& status, StatusCode code,
                                    std::string_view reason) {
  if (status.code() == code && status.reason() == reason) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "expected " << StatusCodeName(code) << " / " << reason << ", got "
         << StatusCodeName(status.code()) << " / " << status.ToString();
}

template <typename T>
::testing::AssertionResult HasError(const Result<T>& result, StatusCode code,
                                    std::string_view reason) {
  return HasError(result.status(), code, reason);
}

// Descriptions of records for failure messages (GoogleTest would print their bytes).
std::string Describe(const BlobDescriptor& b) {
  std::string out = "blob " + b.digest + " size=" + std::to_string(b.size) + " chunks=[";
  for (size_t i = 0; i < b.chunks.size(); ++i) out += (i ? "," : "") + b.chunks[i];
  return out + "]";
}

std::string Describe(const std::vector<ScriptFile>& files) {
  std::string out;
  for (const ScriptFile& f : files) {
    out += (out.empty() ? "" : "; ") + f.path + " " + f.digest + " size=" + std::to_string(f.size) +
           (f.executable ? " executable" : "");
  }
  return "[" + out + "]";
}

std::string Describe(const ScriptRecord& s) {
  return s.project_id + "/" + s.name + " latest=" + std::to_string(s.latest_version) + " " +
         s.status + " created=" + std::to_string(s.created_at_ms) +
         " updated=" + std::to_string(s.updated_at_ms) +
         " deleted=" + (s.deleted_at_ms ? std::to_string(*s.deleted_at_ms) : "never");
}

std::string Describe(const PurgeArtifactsResult& r) {
  return "versions=" + std::to_string(r.versions) + " uploads=" + std::to_string(r.uploads) +
         " blobs=" + std::to_string(r.blobs) + " chunks=" + std::to_string(r.chunks) +
         " chunk_bytes=" + std::to_string(r.chunk_bytes);
}

std::vector<int64_t> VersionNumbers(const std::vector<ScriptVersionRecord>& versions) {
  std::vector<int64_t> out;
  for (const ScriptVersionRecord& v : versions) out.push_back(v.version);
  return out;
}

// The bytes a project holds; -1 (and a failure) when the store cannot say.
int64_t HeldBytes(ArtifactRepository& artifacts, const std::string& project_id) {
  Result<int64_t> held = artifacts.ProjectBytes(project_id);
  EXPECT_TRUE(held.ok()) << held.status().ToString();
  return held.ok() ? *held : -1;
}

ScriptFile FileOf(const std::string& path, const BlobDescriptor& blob, bool executable = false) {
  return ScriptFile{path, blob.digest, blob.size, executable};
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Fixture helpers

void ArtifactContract::SetUp() {
  GovernanceContract::SetUp();
  if (HasFatalFailure()) return;
  owner_ = Owner();
}

ProjectRecord ArtifactContract::OtherProject(const std::string& slug) {
  Result<ProjectRecord> made = store().projects().EnsureProject(NewId(), slug, slug, Now());
  EXPECT_TRUE(made.ok()) << made.status().ToString();
  clock().Advance(1);
  return made.ok() ? *made : ProjectRecord{};
}

BeginUploadCommand ArtifactContract::UploadAs(const PrincipalRecord& actor,
                                              const std::string& project_id) {
  BeginUploadCommand cmd;
  cmd.actor = Actor{actor.id, "req-upload"};
  cmd.fence = PolicyFence{actor.id, Role::kAdmin};
  cmd.project_id = project_id;
  cmd.now_ms = Now();
  return cmd;
}

Result<BlobDescriptor> ArtifactContract::Upload(const BeginUploadCommand& cmd,
                                                std::string_view bytes, size_t piece) {
  std::unique_ptr<BlobUpload> upload = artifacts().BeginUpload(cmd);
  for (size_t at = 0; at < bytes.size(); at += piece) {
    QL_RETURN_IF_ERROR(upload->Write(bytes.substr(at, piece)));
  }
  Result<BlobDescriptor> blob = upload->Finish();
  clock().Advance(1);
  return blob;
}

Result<BlobDescriptor> ArtifactContract::Upload(const std::string& project_id,
                                                std::string_view bytes) {
  return Upload(UploadAs(owner_, project_id), bytes);
}

Result<std::string> ArtifactContract::ReadAll(const std::string& project_id,
                                              const std::string& digest) {
  std::string out;
  QL_RETURN_IF_ERROR(artifacts().ReadBlob(project_id, digest, [&](std::string_view bytes) {
    out.append(bytes);
    return Status::Ok();
  }));
  return out;
}

PushScriptCommand ArtifactContract::FilePush(const PrincipalRecord& actor,
                                             const std::string& project_id, const std::string& name,
                                             const std::string& file, const BlobDescriptor& blob) {
  PushScriptCommand cmd;
  cmd.actor = Actor{actor.id, "req-push-" + name};
  cmd.fence = PolicyFence{actor.id, Role::kAdmin};
  cmd.project_id = project_id;
  cmd.name = name;
  cmd.kind = std::string(kScriptKindFile);
  cmd.files = {FileOf(file, blob)};
  return cmd;
}

Result<PushScriptResult> ArtifactContract::Push(PushScriptCommand cmd) {
  cmd.now_ms = Now();
  clock().Advance(1);
  return artifacts().PushScript(cmd);
}

Result<ScriptRecord> ArtifactContract::DeleteAs(const PrincipalRecord& actor,
                                                const std::string& project_id,
                                                const std::string& name) {
  DeleteScriptCommand cmd;
  cmd.actor = Actor{actor.id, "req-delete-" + name};
  cmd.fence = PolicyFence{actor.id, Role::kAdmin};
  cmd.project_id = project_id;
  cmd.name = name;
  cmd.now_ms = Now();
  clock().Advance(1);
  return artifacts().DeleteScript(cmd);
}

std::vector<AuditRecord> ArtifactContract::ScriptFacts() {
  Result<Page<AuditRecord>> audit = gov().ListAudit(PageRequest{std::nullopt, 500});
  EXPECT_TRUE(audit.ok()) << audit.status().ToString();
  std::vector<AuditRecord> out;
  if (!audit.ok()) return out;
  for (const AuditRecord& fact : audit->items) {
    if (fact.target_kind == "script") out.push_back(fact);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Blobs

TEST_P(ArtifactContract, BlobsReadBackByteIdenticalWhateverTheirSize) {
  const size_t chunk = kArtifactChunkBytes;
  struct Case {
    const char* what;
    std::string bytes;
    size_t chunks;
  };
  const std::vector<Case> cases = {
      {"an empty blob", "", 0},
      {"exactly one chunk", Bytes(chunk, 1), 1},
      {"three chunks and a tail", Bytes(3 * chunk + 12'345, 2), 4},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    // Odd pieces, so that writes straddle chunk boundaries.
    QL_ASSERT_OK_AND_ASSIGN(BlobDescriptor blob,
                            Upload(UploadAs(owner_, project().id), c.bytes, 100'003));
    EXPECT_EQ(blob.digest, Sha256Hex(c.bytes)) << "a blob is named by the SHA-256 of its bytes";
    EXPECT_EQ(blob.size, static_cast<int64_t>(c.bytes.size()));
    ASSERT_EQ(blob.chunks.size(), c.chunks);
    for (size_t i = 0; i < blob.chunks.size(); ++i) {
      EXPECT_EQ(blob.chunks[i], Sha256Hex(std::string_view(c.bytes).substr(i * chunk, chunk)))
          << "chunk " << i << " is named by the SHA-256 of its own bytes";
    }
    QL_ASSERT_OK_AND_ASSIGN(BlobDescriptor stat, artifacts().StatBlob(project().id, blob.digest));
    EXPECT_EQ(Describe(stat), Describe(blob))
        << "StatBlob disagrees with the descriptor the upload returned";

    std::string read;
    size_t calls = 0;
    size_t largest = 0;
    QL_ASSERT_OK(artifacts().ReadBlob(project().id, blob.digest, [&](std::string_view bytes) {
      read.append(bytes);
      ++calls;
      largest = std::max(largest, bytes.size());
      return Status::Ok();
    }));
    EXPECT_EQ(read.size(), c.bytes.size());
    EXPECT_TRUE(read == c.bytes) << "the bytes read back differ from those uploaded";
    EXPECT_EQ(calls, c.chunks) << "the reader gets one call per chunk";
    EXPECT_LE(largest, chunk) << "a reader is handed one chunk at a time, never the whole blob";
  }
}

TEST_P(ArtifactContract, EqualChunksAreStoredOnceAndPurgedOnceAfterTheGrace) {
  // 3 MiB made of one 1 MiB pattern: three chunk references, one distinct chunk.
  const std::string pattern = Bytes(kArtifactChunkBytes, 3);
  const std::string bytes = pattern + pattern + pattern;
  const ProjectRecord other = OtherProject();
  const int64_t first_at = Now();
  QL_ASSERT_OK_AND_ASSIGN(BlobDescriptor a, Upload(project().id, bytes));
  QL_ASSERT_OK_AND_ASSIGN(BlobDescriptor b, Upload(other.id, bytes));
  EXPECT_EQ(Describe(a), Describe(b)) << "the same bytes make the same blob in every project";
  EXPECT_EQ(a.chunks, std::vector<std::string>(3, Sha256Hex(pattern)));
  // Each project is charged for the distinct chunks of what it holds (here one), though the
  // bytes are stored once across projects.
  EXPECT_EQ(HeldBytes(artifacts(), project().id), kMiB);
  EXPECT_EQ(HeldBytes(artifacts(), other.id), kMiB);

  ArtifactRetention retention;
  retention.orphan_grace_ms = kHourMs;
  PurgeArtifactsCommand purge;
  purge.retention = retention;
  // Within the grace (the first upload is exactly grace old, not older): nothing goes.
  clock().SetNowMs(first_at + kHourMs);
  purge.now_ms = Now();
  QL_ASSERT_OK_AND_ASSIGN(PurgeArtifactsResult early, artifacts().PurgeArtifacts(purge));
  EXPECT_EQ(Describe(early), Describe(PurgeArtifactsResult{}))
      << "a purge inside the orphan grace removed something";
  QL_ASSERT_OK_AND_ASSIGN(std::string still, ReadAll(project().id, a.digest));
  EXPECT_TRUE(still == bytes);

  // Past the grace nothing references them: both uploads, the blob and its one chunk go.
  clock().Advance(kHourMs);
  purge.now_ms = Now();
  QL_ASSERT_OK_AND_ASSIGN(PurgeArtifactsResult purged, artifacts().PurgeArtifacts(purge));
  EXPECT_EQ(Describe(purged), Describe(PurgeArtifactsResult{0, 2, 1, 1, kMiB}))
      << "3 MiB of one repeated 1 MiB pattern in two projects is one stored chunk of 1 MiB";
  for (const std::string& project_id : {project().id, other.id}) {
    EXPECT_TRUE(HasError(artifacts().StatBlob(project_id, a.digest), StatusCode::kNotFound,
                         "artifact_not_found"));
    EXPECT_EQ(HeldBytes(artifacts(), project_id), 0);
  }
  QL_ASSERT_OK_AND_ASSIGN(PurgeArtifactsResult again, artifacts().PurgeArtifacts(purge));
  EXPECT_EQ(Describe(again), Describe(PurgeArtifactsResult{})) << "a second purge found more";
}

TEST_P(ArtifactContract, A200MiBBlobStreamsInAndOutWithBoundedMemory) {
  constexpr int64_t kTotal = 200 * kMiB;
  constexpr size_t kPiece = size_t{64} << 10;
  constexpr int64_t kBudgetKib = 64 * 1024;
  const auto started = std::chrono::steady_clock::now();
  // Peak RSS from here on: after resetting it, VmHWM is the highest RSS since the reset.
  const bool reset = ResetPeakRss();
  const int64_t before_kib = reset ? ProcStatusKib("VmRSS") : ProcStatusKib("VmHWM");
  ASSERT_GT(before_kib, 0) << "cannot read /proc/self/status";

  // Written in 64 KiB pieces from a generator: the blob is never whole in this process.
  std::unique_ptr<BlobUpload> upload = artifacts().BeginUpload(UploadAs(owner_, project().id));
  ByteStream generator(2026);
  Sha256Hasher written;
  std::string piece;
  for (int64_t at = 0; at < kTotal; at += static_cast<int64_t>(kPiece)) {
    generator.Fill(piece, kPiece);
    written.Update(piece);
    const Status st = upload->Write(piece);
    ASSERT_TRUE(st.ok()) << "writing at byte " << at << ": " << st.ToString();
  }
  QL_ASSERT_OK_AND_ASSIGN(BlobDescriptor blob, upload->Finish());
  upload.reset();
  const std::string expected = written.FinishHex();
  EXPECT_EQ(blob.digest, expected);
  EXPECT_EQ(blob.size, kTotal);
  EXPECT_EQ(blob.chunks.size(), static_cast<size_t>(kTotal / kMiB));

  // Read back through a sink that only hashes.
  Sha256Hasher read;
  int64_t read_bytes = 0;
  size_t largest = 0;
  QL_ASSERT_OK(artifacts().ReadBlob(project().id, blob.digest, [&](std::string_view bytes) {
    read.Update(bytes);
    read_bytes += static_cast<int64_t>(bytes.size());
    largest = std::max(largest, bytes.size());
    return Status::Ok();
  }));
  const int64_t peak_kib = ProcStatusKib("VmHWM");
  const auto elapsed_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::steady_clock::now() - started)
                              .count();
  EXPECT_EQ(read.FinishHex(), expected) << "the 200 MiB read back differ from those written";
  EXPECT_EQ(read_bytes, kTotal);
  EXPECT_LE(largest, kArtifactChunkBytes) << "a reader is handed one chunk at a time";

  const int64_t growth_kib = peak_kib - before_kib;
  const std::string how =
      reset ? "peak RSS (VmHWM, reset through /proc/self/clear_refs) minus the RSS at the reset"
            : "/proc/self/clear_refs is not writable here, so this is VmHWM after minus VmHWM "
              "before: only a lower bound of the growth when an earlier test peaked higher";
  EXPECT_LT(growth_kib, kBudgetKib)
      << "uploading and reading 200 MiB grew the process by " << growth_kib << " KiB, more than "
      << kBudgetKib << " KiB: something holds the blob, or many chunks, in memory (" << how << ")";
  RecordProperty("peak_rss_growth_kib", std::to_string(growth_kib));
  RecordProperty("elapsed_ms", std::to_string(elapsed_ms));
  std::printf("[ artifact ] %s: 200 MiB up and down in %lld ms, peak RSS growth %lld KiB (%s)\n",
              GetParam().name.c_str(), static_cast<long long>(elapsed_ms),
              static_cast<long long>(growth_kib), how.c_str());
}

TEST_P(ArtifactContract, ACorruptChunkIsDetectedBeforeItsBytesReachTheReader) {
  ASSERT_TRUE(GetParam().corrupt_chunk)
      << "factory " << GetParam().name
      << " gives no corrupt_chunk hook (StoreFactory::corrupt_chunk): this test needs one to "
         "damage a stored chunk";
  const std::string bytes = Bytes(2 * kArtifactChunkBytes + 4096, 4);
  QL_ASSERT_OK_AND_ASSIGN(BlobDescriptor blob, Upload(project().id, bytes));
  ASSERT_EQ(blob.chunks.size(), 3u);
  GetParam().corrupt_chunk(store(), blob.chunks[1]);
  ASSERT_FALSE(HasFailure()) << "the factory's corrupt_chunk hook failed";

  std::string received;
  const Status st = artifacts().ReadBlob(project().id, blob.digest, [&](std::string_view b) {
    received.append(b);
    return Status::Ok();
  });
  EXPECT_TRUE(HasError(st, StatusCode::kCorrupt, "artifact_corrupt"));
  EXPECT_NE(st.message().find(blob.digest), std::string::npos)
      << "the error names the damaged blob: " << st.ToString();
  EXPECT_NE(st.message().find(blob.chunks[1]), std::string::npos)
      << "the error names the damaged chunk: " << st.ToString();
  // The sound first chunk may have been handed over; nothing of the damaged one was.
  EXPECT_EQ(received.size(), kArtifactChunkBytes)
      << "the reader received " << received.size() << " bytes; only the first chunk ("
      << kArtifactChunkBytes << " bytes) precedes the damaged one";
  EXPECT_TRUE(received == bytes.substr(0, std::min(received.size(), kArtifactChunkBytes)))
      << "the reader received bytes that are not the blob's first chunk";
  // A blob that shares no chunk with it still reads.
  const std::string sound = Bytes(4096, 5);
  QL_ASSERT_OK_AND_ASSIGN(BlobDescriptor other, Upload(project().id, sound));
  QL_ASSERT_OK_AND_ASSIGN(std::string read, ReadAll(project().id, other.digest));
  EXPECT_TRUE(read == sound);
}

TEST_P(ArtifactContract, AProjectReadsAndPublishesOnlyBlobsItHolds) {
  const ProjectRecord other = OtherProject();
  const std::string bytes = "#!/bin/sh\necho only project A uploaded this\n";
  QL_ASSERT_OK_AND_ASSIGN(BlobDescriptor blob, Upload(project().id, bytes));

  // Knowing the digest (and even the size) is not enough.
  EXPECT_TRUE(HasError(artifacts().StatBlob(other.id, blob.digest), StatusCode::kNotFound,
                       "artifact_not_found"));
  bool sink_called = false;
  EXPECT_TRUE(HasError(artifacts().ReadBlob(other.id, blob.digest,
                                            [&](std::string_view) {
                                              sink_called = true;
                                              return Status::Ok();
                                            }),
                       StatusCode::kNotFound, "artifact_not_found"));
  EXPECT_FALSE(sink_called) << "project B was handed bytes of a blob only project A uploaded";
  EXPECT_TRUE(HasError(Push(FilePush(owner_, other.id, "stolen", "stolen.sh", blob)),
                       StatusCode::kNotFound, "artifact_not_found"));
  EXPECT_TRUE(HasError(artifacts().GetScript(other.id, "stolen"), StatusCode::kNotFound,
                       "script_not_found"));
  EXPECT_EQ(HeldBytes(artifacts(), other.id), 0);

  // Once B uploads the same bytes itself, it holds the blob.
  QL_ASSERT_OK_AND_ASSIGN(BlobDescriptor own, Upload(other.id, bytes));
  EXPECT_EQ(Describe(own), Describe(blob));
  QL_ASSERT_OK_AND_ASSIGN(BlobDescriptor stat, artifacts().StatBlob(other.id, blob.digest));
  EXPECT_EQ(Describe(stat), Describe(blob));
  QL_ASSERT_OK_AND_ASSIGN(std::string read, ReadAll(other.id, blob.digest));
  EXPECT_EQ(read, bytes);
  QL_ASSERT_OK_AND_ASSIGN(PushScriptResult pushed,
                          Push(FilePush(owner_, other.id, "stolen", "stolen.sh", blob)));
  EXPECT_EQ(pushed.version.version, 1);
  EXPECT_EQ(pushed.version.project_id, other.id);
}

// ---------------------------------------------------------------------------------------------
// Scripts

TEST_P(ArtifactContract, PushesAppendVersionsAndAnUnchangedPushWritesNothing) {
  QL_ASSERT_OK_AND_ASSIGN(BlobDescriptor one, Upload(project().id, "echo one\n"));
  QL_ASSERT_OK_AND_ASSIGN(BlobDescriptor two, Upload(project().id, "echo two\n"));
  QL_ASSERT_OK_AND_ASSIGN(PushScriptResult v1,
                          Push(FilePush(owner_, project().id, "hello", "hello.sh", one)));
  EXPECT_FALSE(v1.unchanged);
  EXPECT_EQ(v1.version.version, 1);
  EXPECT_EQ(v1.version.kind, kScriptKindFile);
  EXPECT_EQ(v1.version.digest, one.digest) << "a file version is named by its file's blob";
  EXPECT_EQ(v1.version.size, one.size);
  EXPECT_EQ(v1.version.entry, "hello.sh") << "a file script runs its one file";
  EXPECT_EQ(v1.version.created_by, owner_.id);

  QL_ASSERT_OK_AND_ASSIGN(PushScriptResult same,
                          Push(FilePush(owner_, project().id, "hello", "hello.sh", one)));
  EXPECT_TRUE(same.unchanged) << "pushing the latest content again made a new version";
  EXPECT_EQ(same.version.version, 1);

  QL_ASSERT_OK_AND_ASSIGN(PushScriptResult v2,
                          Push(FilePush(owner_, project().id, "hello", "hello.sh", two)));
  EXPECT_FALSE(v2.unchanged);
  EXPECT_EQ(v2.version.version, 2);
  EXPECT_EQ(v2.version.digest, two.digest);

  // A push made against a stale view of the script loses its compare-and-set.
  PushScriptCommand stale = FilePush(owner_, project().id, "hello", "hello.sh", one);
  stale.expected_latest = 1;
  EXPECT_TRUE(HasError(Push(stale), StatusCode::kConflict, "script_version_conflict"));

  QL_ASSERT_OK_AND_ASSIGN(std::vector<ScriptVersionRecord> versions,
                          artifacts().ListScriptVersions(project().id, "hello"));
  EXPECT_EQ(VersionNumbers(versions), (std::vector<int64_t>{2, 1})) << "newest first";
  QL_ASSERT_OK_AND_ASSIGN(ScriptRecord head, artifacts().GetScript(project().id, "hello"));
  EXPECT_EQ(head.latest_version, 2);
  EXPECT_EQ(head.status, kScriptActive);
  QL_ASSERT_OK_AND_ASSIGN(ScriptVersionRecord latest,
                          artifacts().GetScriptVersion(project().id, "hello", std::nullopt));
  EXPECT_EQ(latest.version, 2);
  EXPECT_EQ(Describe(latest.files), Describe(std::vector<ScriptFile>{FileOf("hello.sh", two)}));
  EXPECT_TRUE(HasError(artifacts().GetScriptVersion(project().id, "hello", 3),
                       StatusCode::kNotFound, "script_version_not_found"));
  EXPECT_TRUE(HasError(artifacts().GetScriptVersion(project().id, "never", std::nullopt),
                       StatusCode::kNotFound, "script_not_found"));

  // A file whose claimed size is not its blob's is refused.
  PushScriptCommand lying = FilePush(owner_, project().id, "hello", "hello.sh", one);
  lying.files[0].size = one.size + 1;
  EXPECT_TRUE(HasError(Push(lying), StatusCode::kInvalidArgument, "artifact_tree_invalid"));
  EXPECT_EQ(artifacts().GetScript(project().id, "hello")->latest_version, 2);
}

TEST_P(ArtifactContract, ATreeIsNamedByItsManifestAndListsItsFilesByPath) {
  QL_ASSERT_OK_AND_ASSIGN(BlobDescriptor run, Upload(project().id, "#!/bin/sh\n. lib/util.sh\n"));
  QL_ASSERT_OK_AND_ASSIGN(BlobDescriptor util, Upload(project().id, "util() { :; }\n"));
  QL_ASSERT_OK_AND_ASSIGN(BlobDescriptor readme, Upload(project().id, "read me\n"));
  PushScriptCommand cmd;
  cmd.actor = Actor{owner_.id, "req-tree"};
  cmd.fence = PolicyFence{owner_.id, Role::kAdmin};
  cmd.project_id = project().id;
  cmd.name = "tools";
  cmd.kind = std::string(kScriptKindTree);
  cmd.files = {FileOf("lib/util.sh", util), FileOf("run.sh", run, true), FileOf("README", readme)};
  cmd.entry = "run.sh";
  QL_ASSERT_OK_AND_ASSIGN(PushScriptResult pushed, Push(cmd));

  QL_ASSERT_OK_AND_ASSIGN(
      std::string manifest,
      EncodeTreeManifest({TreeEntry{"lib/util.sh", false, util.size, util.digest},
                          TreeEntry{"run.sh", true, run.size, run.digest},
                          TreeEntry{"README", false, readme.size, readme.digest}}));
  EXPECT_EQ(pushed.version.digest, Sha256Hex(manifest))
      << "a tree version is named by the SHA-256 of its canonical manifest";
  EXPECT_EQ(pushed.version.kind, kScriptKindTree);
  EXPECT_EQ(pushed.version.entry, "run.sh");
  EXPECT_EQ(pushed.version.size, run.size + util.size + readme.size);
  QL_ASSERT_OK_AND_ASSIGN(ScriptVersionRecord got,
                          artifacts().GetScriptVersion(project().id, "tools", 1));
  // Sorted by bytes: "README" before "lib/" (a collation that ignores case would not).
  EXPECT_EQ(Describe(got.files),
            Describe(std::vector<ScriptFile>{FileOf("README", readme), FileOf("lib/util.sh", util),
                                             FileOf("run.sh", run, true)}))
      << "files come back sorted by path, with their executable bits";
  // The manifest is a blob the project holds: a worker fetches and verifies it like any other.
  QL_ASSERT_OK_AND_ASSIGN(std::string stored, ReadAll(project().id, got.digest));
  EXPECT_EQ(stored, manifest);

  // The entry must be a file of the tree.
  PushScriptCommand bad_entry = cmd;
  bad_entry.entry = "missing.sh";
  EXPECT_TRUE(HasError(Push(bad_entry), StatusCode::kInvalidArgument, "script_entry_invalid"));
  bad_entry.entry.clear();
  EXPECT_TRUE(HasError(Push(bad_entry), StatusCode::kInvalidArgument, "script_entry_invalid"));
  // A file claiming another size than its blob's.
  PushScriptCommand lying = cmd;
  lying.files[0].size = util.size + 10;
  EXPECT_TRUE(HasError(Push(lying), StatusCode::kInvalidArgument, "artifact_tree_invalid"));
  QL_ASSERT_OK_AND_ASSIGN(std::vector<ScriptVersionRecord> versions,
                          artifacts().ListScriptVersions(project().id, "tools"));
  EXPECT_EQ(VersionNumbers(versions), (std::vector<int64_t>{1})) << "a refused push wrote one";

  // The same tree in another order is unchanged; a changed bit is a new version.
  PushScriptCommand reordered = cmd;
  std::reverse(reordered.files.begin(), reordered.files.end());
  QL_ASSERT_OK_AND_ASSIGN(PushScriptResult same, Push(reordered));
  EXPECT_TRUE(same.unchanged) << "the same files in another order made a new version";
  PushScriptCommand chmod = cmd;
  chmod.files[0].executable = true;
  QL_ASSERT_OK_AND_ASSIGN(PushScriptResult v2, Push(chmod));
  EXPECT_FALSE(v2.unchanged);
  EXPECT_EQ(v2.version.version, 2);
  EXPECT_NE(v2.version.digest, pushed.version.digest);
  QL_ASSERT_OK_AND_ASSIGN(versions, artifacts().ListScriptVersions(project().id, "tools"));
  EXPECT_EQ(VersionNumbers(versions), (std::vector<int64_t>{2, 1})) << "newest first";
  for (const ScriptVersionRecord& v : versions) {
    EXPECT_TRUE(v.files.empty()) << "listings carry no files";
  }
}

TEST_P(ArtifactContract, WritesAreFencedAndAudited) {
  QL_ASSERT_OK_AND_ASSIGN(BlobDescriptor blob, Upload(project().id, "echo audited\n"));
  QL_ASSERT_OK_AND_ASSIGN(PrincipalRecord viewer, AddPrincipal(owner_, "viewer"));
  QL_ASSERT_OK(Grant(owner_, project().id, viewer, Role::kViewer));
  QL_ASSERT_OK_AND_ASSIGN(PrincipalRecord stranger, AddPrincipal(owner_, "stranger"));
  const int64_t bytes_before = HeldBytes(artifacts(), project().id);

  for (const PrincipalRecord* refused : {&viewer, &stranger}) {
    SCOPED_TRACE(refused->name);
    EXPECT_TRUE(HasError(Push(FilePush(*refused, project().id, "deploy", "deploy.sh", blob)),
                         StatusCode::kPermissionDenied, "permission_denied"));
    EXPECT_TRUE(HasError(Upload(UploadAs(*refused, project().id), "echo not theirs\n"),
                         StatusCode::kPermissionDenied, "permission_denied"));
  }
  EXPECT_TRUE(HasError(artifacts().GetScript(project().id, "deploy"), StatusCode::kNotFound,
                       "script_not_found"));
  EXPECT_TRUE(HasError(artifacts().StatBlob(project().id, Sha256Hex("echo not theirs\n")),
                       StatusCode::kNotFound, "artifact_not_found"));
  EXPECT_EQ(HeldBytes(artifacts(), project().id), bytes_before);
  EXPECT_TRUE(ScriptFacts().empty()) << "a refused write left an audit fact";

  QL_ASSERT_OK(Push(FilePush(owner_, project().id, "deploy", "deploy.sh", blob)));
  QL_ASSERT_OK(Push(FilePush(owner_, project().id, "deploy", "deploy.sh", blob)));  // unchanged
  EXPECT_TRUE(HasError(DeleteAs(viewer, project().id, "deploy"), StatusCode::kPermissionDenied,
                       "permission_denied"));
  EXPECT_EQ(artifacts().GetScript(project().id, "deploy")->status, kScriptActive);
  QL_ASSERT_OK(DeleteAs(owner_, project().id, "deploy"));
  QL_ASSERT_OK(DeleteAs(owner_, project().id, "deploy"));  // deleting again writes nothing

  const std::vector<AuditRecord> facts = ScriptFacts();
  ASSERT_EQ(facts.size(), 2u) << "one fact per push that wrote a version and per deletion";
  EXPECT_EQ(facts[0].action, "script.delete");
  EXPECT_EQ(facts[0].target_id, "deploy");
  EXPECT_EQ(facts[0].request_id, "req-delete-deploy");
  EXPECT_EQ(facts[1].action, "script.push");
  EXPECT_EQ(facts[1].target_id, "deploy@1");
  EXPECT_EQ(facts[1].request_id, "req-push-deploy");
  for (const AuditRecord& fact : facts) {
    EXPECT_EQ(fact.actor_id, owner_.id);
    EXPECT_EQ(fact.project_id, project().id);
    EXPECT_EQ(fact.outcome, "ok");
  }

  // An archived project takes no uploads, pushes or deletions.
  QL_ASSERT_OK(gov().ArchiveProject(Actor{owner_.id, "r"}, project().id, Now()));
  EXPECT_TRUE(
      HasError(Upload(project().id, "echo archived\n"), StatusCode::kConflict, "project_archived"));
  EXPECT_TRUE(HasError(Push(FilePush(owner_, project().id, "deploy", "deploy.sh", blob)),
                       StatusCode::kConflict, "project_archived"));
  EXPECT_TRUE(HasError(DeleteAs(owner_, project().id, "deploy"), StatusCode::kConflict,
                       "project_archived"));
  EXPECT_EQ(artifacts().GetScript(project().id, "deploy")->status, kScriptDeleted);
  EXPECT_EQ(ScriptFacts().size(), 2u);
}

TEST_P(ArtifactContract, ADeletedScriptKeepsItsVersionsAndContinuesItsNumbering) {
  QL_ASSERT_OK_AND_ASSIGN(BlobDescriptor one, Upload(project().id, "echo one\n"));
  QL_ASSERT_OK_AND_ASSIGN(BlobDescriptor two, Upload(project().id, "echo two\n"));
  QL_ASSERT_OK(Push(FilePush(owner_, project().id, "job", "job.sh", one)));
  QL_ASSERT_OK(Push(FilePush(owner_, project().id, "job", "job.sh", two)));
  QL_ASSERT_OK_AND_ASSIGN(ScriptRecord deleted, DeleteAs(owner_, project().id, "job"));
  EXPECT_EQ(deleted.status, kScriptDeleted);
  ASSERT_TRUE(deleted.deleted_at_ms.has_value());
  EXPECT_EQ(deleted.latest_version, 2);
  QL_ASSERT_OK_AND_ASSIGN(ScriptRecord head, artifacts().GetScript(project().id, "job"));
  EXPECT_EQ(Describe(head), Describe(deleted));
  QL_ASSERT_OK_AND_ASSIGN(ScriptRecord again, DeleteAs(owner_, project().id, "job"));
  EXPECT_EQ(Describe(again), Describe(deleted)) << "deleting a deleted script changed it";
  EXPECT_TRUE(
      HasError(DeleteAs(owner_, project().id, "never"), StatusCode::kNotFound, "script_not_found"));

  // The latest is gone by name; pinned versions still resolve (tasks pinned to them run).
  EXPECT_TRUE(HasError(artifacts().GetScriptVersion(project().id, "job", std::nullopt),
                       StatusCode::kNotFound, "script_not_found"));
  QL_ASSERT_OK_AND_ASSIGN(ScriptVersionRecord v1,
                          artifacts().GetScriptVersion(project().id, "job", 1));
  EXPECT_EQ(v1.digest, one.digest);
  QL_ASSERT_OK_AND_ASSIGN(ScriptVersionRecord v2,
                          artifacts().GetScriptVersion(project().id, "job", 2));
  EXPECT_EQ(v2.digest, two.digest);
  QL_ASSERT_OK_AND_ASSIGN(std::string read, ReadAll(project().id, two.digest));
  EXPECT_EQ(read, "echo two\n");

  // Pushing again (even the last content) revives it with the next number.
  QL_ASSERT_OK_AND_ASSIGN(PushScriptResult v3,
                          Push(FilePush(owner_, project().id, "job", "job.sh", two)));
  EXPECT_FALSE(v3.unchanged);
  EXPECT_EQ(v3.version.version, 3);
  QL_ASSERT_OK_AND_ASSIGN(head, artifacts().GetScript(project().id, "job"));
  EXPECT_EQ(head.status, kScriptActive);
  EXPECT_FALSE(head.deleted_at_ms.has_value());
  EXPECT_EQ(head.latest_version, 3);
  QL_ASSERT_OK_AND_ASSIGN(ScriptVersionRecord latest,
                          artifacts().GetScriptVersion(project().id, "job", std::nullopt));
  EXPECT_EQ(latest.version, 3);
  QL_ASSERT_OK_AND_ASSIGN(std::vector<ScriptRecord> listed, artifacts().ListScripts(project().id));
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(Describe(listed[0]), Describe(head));
}

// ---------------------------------------------------------------------------------------------
// Limits and purge

TEST_P(ArtifactContract, BlobAndProjectLimitsAreEnforced) {
  BeginUploadCommand small = UploadAs(owner_, project().id);
  small.limits.max_blob_bytes = 10;
  QL_ASSERT_OK_AND_ASSIGN(BlobDescriptor ten, Upload(small, "0123456789"));
  EXPECT_EQ(ten.size, 10);
  small.now_ms = Now();
  EXPECT_TRUE(
      HasError(Upload(small, "0123456789A"), StatusCode::kInvalidArgument, "artifact_too_large"));
  // Refused at Write, and Finish says the same.
  std::unique_ptr<BlobUpload> upload = artifacts().BeginUpload(small);
  EXPECT_TRUE(
      HasError(upload->Write("0123456789AB"), StatusCode::kInvalidArgument, "artifact_too_large"));
  EXPECT_TRUE(HasError(upload->Finish(), StatusCode::kInvalidArgument, "artifact_too_large"));
  EXPECT_TRUE(HasError(artifacts().StatBlob(project().id, Sha256Hex("0123456789A")),
                       StatusCode::kNotFound, "artifact_not_found"));

  // The project's quota counts the distinct blobs it holds, checked when an upload finishes.
  const ProjectRecord other = OtherProject();
  BeginUploadCommand quota = UploadAs(owner_, other.id);
  quota.limits.max_project_bytes = 100;
  const std::string sixty = Bytes(60, 6);
  QL_ASSERT_OK(Upload(quota, sixty));
  quota.now_ms = Now();
  EXPECT_TRUE(HasError(Upload(quota, Bytes(60, 7)), StatusCode::kInvalidArgument,
                       "artifact_project_quota"));
  EXPECT_TRUE(HasError(artifacts().StatBlob(other.id, Sha256Hex(Bytes(60, 7))),
                       StatusCode::kNotFound, "artifact_not_found"));
  // Bytes it already holds are not counted twice; up to the limit exactly is fine.
  quota.now_ms = Now();
  QL_ASSERT_OK(Upload(quota, sixty));
  quota.now_ms = Now();
  QL_ASSERT_OK(Upload(quota, Bytes(40, 8)));
  EXPECT_EQ(HeldBytes(artifacts(), other.id), 100);
  quota.now_ms = Now();
  EXPECT_TRUE(HasError(Upload(quota, "x"), StatusCode::kInvalidArgument, "artifact_project_quota"));
  // Another project's bytes are its own.
  EXPECT_EQ(HeldBytes(artifacts(), project().id), 10);
}

TEST_P(ArtifactContract, PurgeRemovesOldUnpinnedVersionsAndWhatNothingHolds) {
  ArtifactRetention retention;
  retention.orphan_grace_ms = kHourMs;
  retention.version_keep_ms = kDayMs;
  const ProjectRecord other = OtherProject();
  std::vector<BlobDescriptor> a, b;
  for (int i = 1; i <= 3; ++i) {
    QL_ASSERT_OK_AND_ASSIGN(BlobDescriptor blob,
                            Upload(project().id, "echo a" + std::to_string(i) + "\n"));
    a.push_back(blob);
  }
  for (int i = 1; i <= 2; ++i) {
    QL_ASSERT_OK_AND_ASSIGN(BlobDescriptor blob,
                            Upload(project().id, "echo b" + std::to_string(i) + "\n"));
    b.push_back(blob);
  }
  QL_ASSERT_OK_AND_ASSIGN(BlobDescriptor c1, Upload(project().id, "echo c1\n"));
  // active: v1 (pinned), v2, v3 (latest).
  for (const BlobDescriptor& blob : a) {
    QL_ASSERT_OK(Push(FilePush(owner_, project().id, "active", "active.sh", blob)));
  }
  // gone: deleted, nothing pinned.
  for (const BlobDescriptor& blob : b) {
    QL_ASSERT_OK(Push(FilePush(owner_, project().id, "gone", "gone.sh", blob)));
  }
  QL_ASSERT_OK(DeleteAs(owner_, project().id, "gone"));
  // pinned: deleted, its one version pinned.
  QL_ASSERT_OK(Push(FilePush(owner_, project().id, "pinned", "pinned.sh", c1)));
  QL_ASSERT_OK(DeleteAs(owner_, project().id, "pinned"));
  // The other project holds active@2's bytes through a script of its own.
  QL_ASSERT_OK(Upload(other.id, "echo a2\n"));
  QL_ASSERT_OK(Push(FilePush(owner_, other.id, "shared", "shared.sh", a[1])));

  // Two days on: everything above is past both the version retention and the orphan grace.
  clock().Advance(2 * kDayMs);
  // young: two versions pushed now; v1 is not the latest but not old either.
  QL_ASSERT_OK_AND_ASSIGN(BlobDescriptor d1, Upload(project().id, "echo d1\n"));
  QL_ASSERT_OK_AND_ASSIGN(BlobDescriptor d2, Upload(project().id, "echo d2\n"));
  QL_ASSERT_OK(Push(FilePush(owner_, project().id, "young", "young.sh", d1)));
  QL_ASSERT_OK(Push(FilePush(owner_, project().id, "young", "young.sh", d2)));

  PurgeArtifactsCommand purge;
  purge.now_ms = Now();
  purge.retention = retention;
  purge.pinned = {ScriptVersionKey{project().id, "active", 1},
                  ScriptVersionKey{project().id, "pinned", 1}};
  QL_ASSERT_OK_AND_ASSIGN(PurgeArtifactsResult purged, artifacts().PurgeArtifacts(purge));
  // Versions active@2, gone@1, gone@2; the uploads of a2, b1, b2 in this project; blobs b1 and
  // b2 (a2 is still the other project's), and their chunks.
  EXPECT_EQ(Describe(purged), Describe(PurgeArtifactsResult{3, 3, 2, 2, b[0].size + b[1].size}));

  auto version_of = [&](const std::string& name, int64_t version) {
    return artifacts().GetScriptVersion(project().id, name, version);
  };
  EXPECT_TRUE(version_of("active", 1).ok()) << "a pinned version was purged";
  EXPECT_TRUE(HasError(version_of("active", 2), StatusCode::kNotFound, "script_version_not_found"));
  EXPECT_TRUE(version_of("active", 3).ok()) << "the latest version of an active script was purged";
  EXPECT_TRUE(HasError(version_of("gone", 1), StatusCode::kNotFound, "script_version_not_found"));
  EXPECT_TRUE(HasError(version_of("gone", 2), StatusCode::kNotFound, "script_version_not_found"));
  EXPECT_TRUE(version_of("pinned", 1).ok()) << "a pinned version of a deleted script was purged";
  EXPECT_TRUE(version_of("young", 1).ok()) << "a version younger than the retention was purged";
  QL_ASSERT_OK_AND_ASSIGN(std::vector<ScriptVersionRecord> active,
                          artifacts().ListScriptVersions(project().id, "active"));
  EXPECT_EQ(VersionNumbers(active), (std::vector<int64_t>{3, 1}));
  // The script heads stay (a deleted one as a tombstone).
  QL_ASSERT_OK_AND_ASSIGN(ScriptRecord gone, artifacts().GetScript(project().id, "gone"));
  EXPECT_EQ(gone.status, kScriptDeleted);

  // What kept versions name still reads, byte-identical; what only purged ones named is gone.
  for (const auto& [blob, text] : std::vector<std::pair<BlobDescriptor, std::string>>{
           {a[0], "echo a1\n"}, {a[2], "echo a3\n"}, {c1, "echo c1\n"}, {d1, "echo d1\n"}}) {
    Result<std::string> read = ReadAll(project().id, blob.digest);
    ASSERT_TRUE(read.ok()) << text << ": " << read.status().ToString();
    EXPECT_EQ(*read, text);
  }
  for (const BlobDescriptor& blob : {a[1], b[0], b[1]}) {
    EXPECT_TRUE(HasError(artifacts().StatBlob(project().id, blob.digest), StatusCode::kNotFound,
                         "artifact_not_found"));
  }
  // The chunks of a blob the other project still holds stay.
  QL_ASSERT_OK_AND_ASSIGN(std::string shared, ReadAll(other.id, a[1].digest));
  EXPECT_EQ(shared, "echo a2\n");

  QL_ASSERT_OK_AND_ASSIGN(PurgeArtifactsResult again, artifacts().PurgeArtifacts(purge));
  EXPECT_EQ(Describe(again), Describe(PurgeArtifactsResult{})) << "a second purge found more";
}

TEST_P(ArtifactContract, ComposedPiecesMakeTheBlobOfTheirBytesAndAreChecked) {
  // Three pieces of one chunk each (the last shorter) compose the blob of their bytes, named
  // by the digest of all of them: the same descriptor a streamed upload of those bytes gets.
  const std::string first(kArtifactChunkBytes, 'a');
  const std::string second(kArtifactChunkBytes, 'b');
  const std::string tail = "tail";
  std::vector<std::string> pieces;
  for (const std::string* piece : {&first, &second, &tail}) {
    QL_ASSERT_OK_AND_ASSIGN(BlobDescriptor uploaded, Upload(project().id, *piece));
    pieces.push_back(uploaded.digest);
  }
  ComposeBlobCommand compose;
  compose.actor = Actor{owner_.id, "req-compose"};
  compose.fence = PolicyFence{owner_.id, Role::kAdmin};
  compose.project_id = project().id;
  compose.pieces = pieces;
  compose.now_ms = Now();
  QL_ASSERT_OK_AND_ASSIGN(BlobDescriptor composed, artifacts().ComposeBlob(compose));
  const std::string whole = first + second + tail;
  EXPECT_EQ(composed.digest, Sha256Hex(whole));
  EXPECT_EQ(composed.size, static_cast<int64_t>(whole.size()));
  QL_ASSERT_OK_AND_ASSIGN(BlobDescriptor streamed, Upload(project().id, whole));
  EXPECT_EQ(streamed, composed) << "composing and streaming the same bytes disagree";
  for (size_t i = 0; i < composed.chunks.size(); ++i) {
    QL_ASSERT_OK_AND_ASSIGN(std::string chunk,
                            artifacts().ReadBlobChunk(project().id, composed, i));
    EXPECT_EQ(Sha256Hex(chunk), composed.chunks[i]);
  }
  EXPECT_TRUE(HasError(artifacts().ReadBlobChunk(project().id, composed, 3),
                       StatusCode::kInvalidArgument, "artifact_chunk_index"));

  // A piece that is not a whole chunk before the last one, or another project's piece, is
  // refused; so is a reader who does not hold the blob.
  ComposeBlobCommand short_middle = compose;
  short_middle.pieces = {pieces[2], pieces[0]};
  EXPECT_TRUE(HasError(artifacts().ComposeBlob(short_middle), StatusCode::kInvalidArgument,
                       "artifact_piece_invalid"));
  const ProjectRecord other = OtherProject();
  ComposeBlobCommand foreign = compose;
  foreign.project_id = other.id;
  EXPECT_TRUE(
      HasError(artifacts().ComposeBlob(foreign), StatusCode::kNotFound, "artifact_not_found"));
  EXPECT_TRUE(HasError(artifacts().ReadBlobChunk(other.id, composed, 0), StatusCode::kNotFound,
                       "artifact_not_found"));

  // A compare-and-set on the latest version: the version expected must be the current one.
  QL_ASSERT_OK_AND_ASSIGN(BlobDescriptor one, Upload(project().id, "echo one\n"));
  PushScriptCommand push = FilePush(owner_, project().id, "cas", "cas.sh", one);
  push.expected_latest = 0;
  QL_ASSERT_OK_AND_ASSIGN(PushScriptResult v1, Push(push));
  EXPECT_EQ(v1.version.version, 1);
  QL_ASSERT_OK_AND_ASSIGN(BlobDescriptor two, Upload(project().id, "echo two\n"));
  PushScriptCommand next = FilePush(owner_, project().id, "cas", "cas.sh", two);
  next.expected_latest = 1;
  QL_ASSERT_OK_AND_ASSIGN(PushScriptResult v2, Push(next));
  EXPECT_EQ(v2.version.version, 2);
  next.expected_latest = 1;
  EXPECT_TRUE(HasError(Push(next), StatusCode::kConflict, "script_version_conflict"))
      << "a push against version 1 succeeded although version 2 exists";
}

}  // namespace ql::testing
