#pragma once

// Artifacts (DESIGN §14; ADR-0037 step 5, the shared Artifact store): immutable blobs named by
// the SHA-256 of their bytes, kept as an ordered list of chunks each named by its own SHA-256, so
// that equal chunks are stored once and a blob is written and read one chunk at a time, never
// whole. A directory tree is a blob too: its canonical manifest, which names each file's blob.
// Scripts are named, versioned artifacts of a project (`NAME[@VERSION]`).
//
// This file is the store-independent part: chunking and digesting a stream, verifying one read
// back, the tree manifest, and the names. Every digest is 64 lowercase hex digits (IsSha256Hex).

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ql/core/digest.h"
#include "ql/core/status.h"

namespace ql {

// Chunk size of blobs written here. A reader never assumes it: a blob's descriptor lists its
// chunks, and every chunk but the last has the same size.
inline constexpr size_t kArtifactChunkBytes = size_t{1} << 20;

// What names a blob: the SHA-256 of its bytes, its size and its chunks' digests in order.
struct BlobDescriptor {
  std::string digest;
  int64_t size = 0;
  std::vector<std::string> chunks;

  bool operator==(const BlobDescriptor&) const = default;
};

// Receives one chunk (its digest and bytes) as soon as it is complete; an error stops the blob.
using ChunkSink = std::function<Status(const std::string& digest, std::string_view bytes)>;

// Cuts a stream into chunks and digests it, holding at most one chunk.
class BlobChunker {
 public:
  // `max_bytes`: the largest blob accepted; `chunk_bytes` >= 1 (tests use small ones).
  explicit BlobChunker(int64_t max_bytes, size_t chunk_bytes = kArtifactChunkBytes);

  // Adds `bytes`, calling `sink` for every chunk they complete. Errors: InvalidArgument
  // `artifact_too_large` once the blob exceeds `max_bytes` (nothing more is taken); the sink's.
  Status Add(std::string_view bytes, const ChunkSink& sink);
  // Emits the last chunk (none for an empty blob) and returns the descriptor. Errors: the sink's.
  Result<BlobDescriptor> Finish(const ChunkSink& sink);

 private:
  Status Emit(const ChunkSink& sink);

  int64_t max_bytes_;
  size_t chunk_bytes_;
  int64_t size_ = 0;
  std::string pending_;
  Sha256Hasher whole_;
  std::vector<std::string> chunks_;
};

// Checks a blob read back one chunk at a time against its descriptor, before any byte is used.
class BlobVerifier {
 public:
  explicit BlobVerifier(BlobDescriptor expected);

  // Checks the next chunk. Errors: Corrupt `artifact_corrupt` naming the blob and the chunk
  // (a chunk whose bytes do not have its digest, or more chunks than the descriptor lists).
  Status Next(std::string_view bytes);
  // After the last chunk: every chunk came, and the bytes have the blob's digest and size.
  // Errors: Corrupt `artifact_corrupt`.
  Status Finish();

 private:
  BlobDescriptor expected_;
  size_t next_ = 0;
  int64_t size_ = 0;
  Sha256Hasher whole_;
};

// One file of a directory tree.
struct TreeEntry {
  std::string path;  // relative, '/'-separated: see ValidateArtifactPath
  bool executable = false;
  int64_t size = 0;
  std::string digest;  // the file's blob

  bool operator==(const TreeEntry&) const = default;
};

// Longest path of a tree entry, and most entries in one tree.
inline constexpr size_t kMaxArtifactPathBytes = 1024;
inline constexpr size_t kMaxTreeEntries = 10000;

// Returns ok when `path` is a relative path of a file in a tree: non-empty UTF-8 segments
// separated by single '/', none `.` or `..`, no leading or trailing '/', no NUL, backslash or
// control character, at most kMaxArtifactPathBytes. Otherwise InvalidArgument
// `artifact_path_invalid` quoting the path and naming the rule.
Status ValidateArtifactPath(std::string_view path);

// The canonical manifest of a tree (a blob whose digest names the tree): the JSON object
// {"entries":[{"digest":..,"executable":..,"path":..,"size":..},...],"kind":"qinglong/tree@v1"}
// with entries sorted by path. Errors, InvalidArgument: `artifact_path_invalid`;
// `artifact_path_duplicate` (a path twice); `artifact_path_conflict` (a file is also another's
// directory); `artifact_tree_invalid` (no entry, too many, a negative size or a bad digest).
Result<std::string> EncodeTreeManifest(std::vector<TreeEntry> entries);

// Reads a manifest written by EncodeTreeManifest; anything else (another spelling included) is
// Corrupt `artifact_tree_invalid`, as are entries EncodeTreeManifest would refuse.
Result<std::vector<TreeEntry>> DecodeTreeManifest(std::string_view manifest);

// A script as a task names it: NAME, or NAME@VERSION pinned to one version (>= 1).
struct ScriptRef {
  std::string name;
  std::optional<int64_t> version;

  bool operator==(const ScriptRef&) const = default;
};

// A script name is [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}: a file name, safe in a URL path segment
// and a shell word, never `@`. Otherwise InvalidArgument `script_name_invalid`.
Status ValidateScriptName(std::string_view name);

// Parses NAME or NAME@VERSION. Errors, InvalidArgument: `script_name_invalid`;
// `script_ref_invalid` (an empty, non-decimal, zero or too large version).
Result<ScriptRef> ParseScriptRef(std::string_view text);

// The interpreter a script runs with when its task names none, chosen by the extension of its
// file name (or, for a tree, of its entry point): .js/.mjs/.cjs node, .py python3, .sh sh, .bash
// bash; nullopt for any other (the task must name one).
std::optional<std::string> InterpreterForPath(std::string_view path);

}  // namespace ql
