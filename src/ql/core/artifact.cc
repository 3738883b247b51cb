#include "ql/core/artifact.h"

#include <algorithm>
#include <charconv>
#include <nlohmann/json.hpp>

#include "ql/core/canonical_json.h"

namespace ql {
namespace {

constexpr std::string_view kTreeKind = "qinglong/tree@v1";
constexpr size_t kMaxScriptNameChars = 128;

std::string ChunkName(const std::string& blob, size_t index) {
  return "blob " + blob + " chunk " + std::to_string(index);
}

Status BadTree(const std::string& why) { return InvalidArgument("artifact_tree_invalid", why); }

// Sorts and checks entries as EncodeTreeManifest accepts them.
Status CheckEntries(std::vector<TreeEntry>& entries) {
  if (entries.empty()) return BadTree("a tree needs at least one file");
  if (entries.size() > kMaxTreeEntries) {
    return BadTree("a tree holds at most " + std::to_string(kMaxTreeEntries) + " files, got " +
                   std::to_string(entries.size()));
  }
  for (const TreeEntry& e : entries) {
    QL_RETURN_IF_ERROR(ValidateArtifactPath(e.path));
    if (e.size < 0) return BadTree("file " + QuoteForMessage(e.path) + " has a negative size");
    if (!IsSha256Hex(e.digest)) {
      return BadTree("file " + QuoteForMessage(e.path) + " has no SHA-256 digest");
    }
  }
  std::sort(entries.begin(), entries.end(),
            [](const TreeEntry& a, const TreeEntry& b) { return a.path < b.path; });
  for (size_t i = 1; i < entries.size(); ++i) {
    const std::string& before = entries[i - 1].path;
    const std::string& path = entries[i].path;
    if (before == path) {
      return InvalidArgument("artifact_path_duplicate",
                             "the tree names " + QuoteForMessage(path) + " twice");
    }
  }
  // A file that is also a directory of another: `a` and `a/b`. With the paths sorted, `a/...`
  // need not follow `a` at once (`a-b` sorts between), so every prefix is looked up.
  for (const TreeEntry& e : entries) {
    for (size_t slash = e.path.find('/'); slash != std::string::npos;
         slash = e.path.find('/', slash + 1)) {
      const std::string dir = e.path.substr(0, slash);
      const bool file = std::binary_search(
          entries.begin(), entries.end(), TreeEntry{dir, false, 0, ""},
          [](const TreeEntry& a, const TreeEntry& b) { return a.path < b.path; });
      if (file) {
        return InvalidArgument(
            "artifact_path_conflict",
            QuoteForMessage(dir) + " is a file and the directory of " + QuoteForMessage(e.path));
      }
    }
  }
  return Status::Ok();
}

}  // namespace

BlobChunker::BlobChunker(int64_t max_bytes, size_t chunk_bytes)
    : max_bytes_(max_bytes), chunk_bytes_(std::max<size_t>(chunk_bytes, 1)) {}

Status BlobChunker::Emit(const ChunkSink& sink) {
  const std::string digest = Sha256Hex(pending_);
  QL_RETURN_IF_ERROR(sink(digest, pending_));
  chunks_.push_back(digest);
  pending_.clear();
  return Status::Ok();
}

Status BlobChunker::Add(std::string_view bytes, const ChunkSink& sink) {
  if (size_ + static_cast<int64_t>(bytes.size()) > max_bytes_) {
    return InvalidArgument("artifact_too_large", "the blob is larger than the limit of " +
                                                     std::to_string(max_bytes_) + " bytes");
  }
  size_ += static_cast<int64_t>(bytes.size());
  whole_.Update(bytes);
  while (!bytes.empty()) {
    const size_t take = std::min(bytes.size(), chunk_bytes_ - pending_.size());
    pending_.append(bytes.substr(0, take));
    bytes.remove_prefix(take);
    if (pending_.size() == chunk_bytes_) QL_RETURN_IF_ERROR(Emit(sink));
  }
  return Status::Ok();
}

Result<BlobDescriptor> BlobChunker::Finish(const ChunkSink& sink) {
  if (!pending_.empty()) QL_RETURN_IF_ERROR(Emit(sink));
  BlobDescriptor out;
  out.digest = whole_.FinishHex();
  out.size = size_;
  out.chunks = std::move(chunks_);
  chunks_.clear();
  size_ = 0;
  return out;
}

BlobVerifier::BlobVerifier(BlobDescriptor expected) : expected_(std::move(expected)) {}

Status BlobVerifier::Next(std::string_view bytes) {
  if (next_ >= expected_.chunks.size()) {
    return Corrupt("artifact_corrupt", "blob " + expected_.digest + " has more than its " +
                                           std::to_string(expected_.chunks.size()) + " chunks");
  }
  if (Sha256Hex(bytes) != expected_.chunks[next_]) {
    return Corrupt("artifact_corrupt", ChunkName(expected_.digest, next_) +
                                           " does not have its digest " + expected_.chunks[next_]);
  }
  ++next_;
  size_ += static_cast<int64_t>(bytes.size());
  whole_.Update(bytes);
  return Status::Ok();
}

Status BlobVerifier::Finish() {
  if (next_ != expected_.chunks.size()) {
    return Corrupt("artifact_corrupt", "blob " + expected_.digest + " ended after " +
                                           std::to_string(next_) + " of its " +
                                           std::to_string(expected_.chunks.size()) + " chunks");
  }
  if (size_ != expected_.size || whole_.FinishHex() != expected_.digest) {
    return Corrupt("artifact_corrupt",
                   "blob " + expected_.digest + " read back does not have its digest and size");
  }
  return Status::Ok();
}

Status ValidateArtifactPath(std::string_view path) {
  auto bad = [&](const std::string& rule) {
    return InvalidArgument("artifact_path_invalid", "path " + QuoteForMessage(path) + " " + rule);
  };
  if (path.empty()) return bad("is empty");
  if (path.size() > kMaxArtifactPathBytes) {
    return bad("is longer than " + std::to_string(kMaxArtifactPathBytes) + " bytes");
  }
  if (!IsValidUtf8(path)) return bad("is not UTF-8");
  for (char c : path) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f || c == '\\') {
      return bad("holds a control character or a backslash");
    }
  }
  if (path.front() == '/') return bad("is absolute");
  size_t begin = 0;
  while (true) {
    const size_t end = path.find('/', begin);
    const std::string_view segment =
        path.substr(begin, end == std::string_view::npos ? std::string_view::npos : end - begin);
    if (segment.empty()) return bad("has an empty segment");
    if (segment == "." || segment == "..") return bad("has a . or .. segment");
    if (end == std::string_view::npos) break;
    begin = end + 1;
  }
  return Status::Ok();
}

Result<std::string> EncodeTreeManifest(std::vector<TreeEntry> entries) {
  QL_RETURN_IF_ERROR(CheckEntries(entries));
  nlohmann::json list = nlohmann::json::array();
  for (const TreeEntry& e : entries) {
    list.push_back(
        {{"digest", e.digest}, {"executable", e.executable}, {"path", e.path}, {"size", e.size}});
  }
  return CanonicalJson({{"entries", std::move(list)}, {"kind", std::string(kTreeKind)}});
}

Result<std::vector<TreeEntry>> DecodeTreeManifest(std::string_view manifest) {
  auto corrupt = [](const std::string& why) {
    return Corrupt("artifact_tree_invalid", "tree manifest: " + why);
  };
  Result<nlohmann::json> parsed = ParseJsonStrict(manifest);
  if (!parsed.ok()) return corrupt(parsed.status().message());
  const nlohmann::json& j = *parsed;
  if (!j.is_object() || j.size() != 2 || !j.contains("kind") || j["kind"] != kTreeKind ||
      !j.contains("entries") || !j["entries"].is_array()) {
    return corrupt(std::string("not a ") + std::string(kTreeKind) + " object");
  }
  std::vector<TreeEntry> entries;
  for (const nlohmann::json& e : j["entries"]) {
    if (!e.is_object() || e.size() != 4 || !e.contains("digest") || !e["digest"].is_string() ||
        !e.contains("executable") || !e["executable"].is_boolean() || !e.contains("path") ||
        !e["path"].is_string() || !e.contains("size") || !e["size"].is_number_integer()) {
      return corrupt("an entry is not {digest, executable, path, size}");
    }
    entries.push_back({e["path"].get<std::string>(), e["executable"].get<bool>(),
                       e["size"].get<int64_t>(), e["digest"].get<std::string>()});
  }
  Result<std::string> again = EncodeTreeManifest(entries);
  if (!again.ok()) return corrupt(again.status().message());
  if (*again != manifest) return corrupt("not in its canonical form");
  std::sort(entries.begin(), entries.end(),
            [](const TreeEntry& a, const TreeEntry& b) { return a.path < b.path; });
  return entries;
}

Status ValidateScriptName(std::string_view name) {
  auto bad = [&](const std::string& rule) {
    return InvalidArgument("script_name_invalid",
                           "script name " + QuoteForMessage(name) + " " + rule);
  };
  if (name.empty()) return bad("is empty");
  if (name.size() > kMaxScriptNameChars) {
    return bad("is longer than " + std::to_string(kMaxScriptNameChars) + " characters");
  }
  auto word = [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  };
  if (!word(name.front())) return bad("must start with a letter, a digit or _");
  for (char c : name) {
    if (!word(c) && c != '.' && c != '-') {
      return bad("may hold only letters, digits and _ . -");
    }
  }
  return Status::Ok();
}

Result<ScriptRef> ParseScriptRef(std::string_view text) {
  ScriptRef ref;
  const size_t at = text.find('@');
  QL_RETURN_IF_ERROR(ValidateScriptName(text.substr(0, at)));
  ref.name = std::string(text.substr(0, at));
  if (at == std::string_view::npos) return ref;
  const std::string_view digits = text.substr(at + 1);
  int64_t version = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), version);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || version < 1 ||
      digits.front() == '0') {
    return InvalidArgument("script_ref_invalid",
                           "script reference " + QuoteForMessage(text) +
                               ": the version after @ must be a whole number from 1");
  }
  ref.version = version;
  return ref;
}

std::optional<std::string> InterpreterForPath(std::string_view path) {
  const size_t slash = path.rfind('/');
  const std::string_view file = slash == std::string_view::npos ? path : path.substr(slash + 1);
  const size_t dot = file.rfind('.');
  if (dot == std::string_view::npos || dot == 0) return std::nullopt;
  const std::string_view ext = file.substr(dot + 1);
  if (ext == "js" || ext == "mjs" || ext == "cjs") return std::string("node");
  if (ext == "py") return std::string("python3");
  if (ext == "sh") return std::string("sh");
  if (ext == "bash") return std::string("bash");
  return std::nullopt;
}

}  // namespace ql
