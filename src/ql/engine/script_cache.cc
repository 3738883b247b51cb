#include "ql/engine/script_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

#include "ql/core/digest.h"

namespace ql {
namespace {

namespace fs = std::filesystem;

// The largest manifest fetched (a tree of kMaxTreeEntries long paths).
constexpr size_t kMaxManifestBytes = size_t{16} << 20;

Status IoError(const std::string& what, int err) {
  return Internal("script_cache_io", what + ": " + std::strerror(err));
}

// Hashes the regular file at `path` (never through a symbolic link); nullopt when unreadable.
std::optional<std::string> HashFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return std::nullopt;
  }
  Sha256Hasher hasher;
  char buffer[64 * 1024];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      return std::nullopt;
    }
    if (n == 0) break;
    hasher.Update(std::string_view(buffer, static_cast<size_t>(n)));
  }
  ::close(fd);
  return hasher.FinishHex();
}

std::optional<std::string> ReadSmallFile(const std::string& path, size_t max) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string out;
  char buffer[64 * 1024];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || out.size() + static_cast<size_t>(n) > max) {
      ::close(fd);
      if (n == 0) return out;
      return std::nullopt;
    }
    out.append(buffer, static_cast<size_t>(n));
  }
}

// Writes a fetched blob to `path` (created, never replacing anything), checking its digest.
Status WriteBlob(const std::string& path, const std::string& digest, mode_t mode,
                 const BlobFetch& fetch) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return IoError("cannot create " + path, errno);
  Sha256Hasher hasher;
  Status written = fetch(digest, [&](std::string_view bytes) -> Status {
    hasher.Update(bytes);
    while (!bytes.empty()) {
      const ssize_t n = ::write(fd, bytes.data(), bytes.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return IoError("cannot write " + path, errno);
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return Status::Ok();
  });
  if (written.ok() && ::fchmod(fd, mode) != 0) written = IoError("cannot chmod " + path, errno);
  ::close(fd);
  if (!written.ok()) return written;
  if (hasher.FinishHex() != digest) {
    return Corrupt("artifact_corrupt",
                   "the bytes fetched for blob " + digest + " do not have its digest");
  }
  return Status::Ok();
}

// Removes a directory tree this cache made read-only.
void RemoveTree(const std::string& path) {
  std::error_code ec;
  for (fs::recursive_directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_directory(ec) && !it->is_symlink(ec)) {
      fs::permissions(it->path(), fs::perms::owner_all, fs::perm_options::add, ec);
    }
  }
  fs::permissions(path, fs::perms::owner_all, fs::perm_options::add, ec);
  fs::remove_all(path, ec);
}

// Makes every directory of a fetched tree read-only (0555), the deepest first.
void SealDirectories(const std::string& root) {
  std::vector<std::string> dirs;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_directory(ec) && !it->is_symlink(ec)) dirs.push_back(it->path().string());
  }
  std::sort(dirs.begin(), dirs.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  for (const std::string& dir : dirs) ::chmod(dir.c_str(), 0555);
  ::chmod(root.c_str(), 0555);
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

ScriptCache::ScriptCache(std::string root, int64_t max_bytes, int64_t idle_evict_ms)
    : root_(std::move(root)), max_bytes_(max_bytes), idle_evict_ms_(idle_evict_ms) {}

ScriptCacheStats ScriptCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

bool ScriptCache::Verify(const std::string& dir, const ScriptPin& pin) const {
  if (pin.kind == "file") {
    std::optional<std::string> digest = HashFile(dir + "/" + pin.entry);
    return digest.has_value() && *digest == pin.digest;
  }
  std::optional<std::string> manifest =
      ReadSmallFile(root_ + "/" + pin.digest + ".manifest", kMaxManifestBytes);
  if (!manifest || Sha256Hex(*manifest) != pin.digest) return false;
  Result<std::vector<TreeEntry>> entries = DecodeTreeManifest(*manifest);
  if (!entries.ok()) return false;
  for (const TreeEntry& e : *entries) {
    std::optional<std::string> digest = HashFile(dir + "/" + e.path);
    if (!digest || *digest != e.digest) return false;
  }
  return true;
}

Status ScriptCache::Fetch(const ScriptPin& pin, const BlobFetch& fetch, const std::string& into) {
  if (::mkdir(into.c_str(), 0755) != 0) return IoError("cannot create " + into, errno);
  if (pin.kind == "file") {
    return WriteBlob(into + "/" + pin.entry, pin.digest, 0444, fetch);
  }
  std::string manifest;
  QL_RETURN_IF_ERROR(fetch(pin.digest, [&](std::string_view bytes) -> Status {
    if (manifest.size() + bytes.size() > kMaxManifestBytes) {
      return Corrupt("artifact_corrupt", "the manifest of tree " + pin.digest + " is too large");
    }
    manifest.append(bytes);
    return Status::Ok();
  }));
  if (Sha256Hex(manifest) != pin.digest) {
    return Corrupt("artifact_corrupt",
                   "the bytes fetched for tree " + pin.digest + " do not have its digest");
  }
  QL_ASSIGN_OR_RETURN(std::vector<TreeEntry> entries, DecodeTreeManifest(manifest));
  for (const TreeEntry& e : entries) {
    // Paths were checked by the manifest's rules: relative, no `.` or `..` segments.
    for (size_t slash = e.path.find('/'); slash != std::string::npos;
         slash = e.path.find('/', slash + 1)) {
      const std::string dir = into + "/" + e.path.substr(0, slash);
      if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
        return IoError("cannot create " + dir, errno);
      }
    }
    QL_RETURN_IF_ERROR(WriteBlob(into + "/" + e.path, e.digest, e.executable ? 0555 : 0444, fetch));
  }
  const std::string manifest_path = root_ + "/" + pin.digest + ".manifest";
  const std::string manifest_tmp = into + ".manifest";
  const int fd =
      ::open(manifest_tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0444);
  if (fd < 0) return IoError("cannot create " + manifest_tmp, errno);
  const bool ok =
      ::write(fd, manifest.data(), manifest.size()) == static_cast<ssize_t>(manifest.size());
  ::close(fd);
  if (!ok || ::rename(manifest_tmp.c_str(), manifest_path.c_str()) != 0) {
    return IoError("cannot write " + manifest_path, errno);
  }
  return Status::Ok();
}

Result<std::string> ScriptCache::Materialize(const ScriptPin& pin, const BlobFetch& fetch) {
  if (!IsSha256Hex(pin.digest)) {
    return InvalidArgument("artifact_digest_invalid", "not a digest: " + pin.digest);
  }
  QL_RETURN_IF_ERROR(ValidateArtifactPath(pin.entry));
  std::lock_guard<std::mutex> lock(mu_);
  if (::mkdir(root_.c_str(), 0711) != 0 && errno != EEXIST) {
    return IoError("cannot create " + root_, errno);
  }
  const std::string dir = root_ + "/" + pin.digest;
  struct stat st;
  if (::lstat(dir.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode) && Verify(dir, pin)) {
      ::utimensat(AT_FDCWD, dir.c_str(), nullptr, AT_SYMLINK_NOFOLLOW);
      ++stats_.hits;
      return dir;
    }
    // Damaged (or another version's file under the same digest): never run, fetched again.
    ++stats_.damaged;
    const std::string trash =
        root_ + "/.trash-" + std::to_string(::getpid()) + "-" + std::to_string(++counter_);
    if (::rename(dir.c_str(), trash.c_str()) != 0) return IoError("cannot move " + dir, errno);
    RemoveTree(trash);
  }
  const std::string tmp =
      root_ + "/.tmp-" + std::to_string(::getpid()) + "-" + std::to_string(++counter_);
  Status fetched = Fetch(pin, fetch, tmp);
  if (fetched.ok()) {
    SealDirectories(tmp);
    if (::rename(tmp.c_str(), dir.c_str()) != 0) fetched = IoError("cannot move " + tmp, errno);
  }
  if (!fetched.ok()) {
    RemoveTree(tmp);
    std::error_code ec;
    fs::remove(tmp + ".manifest", ec);
    return fetched;
  }
  ++stats_.fetches;
  Evict(pin.digest);
  return dir;
}

void ScriptCache::Evict(const std::string& keep) {
  if (max_bytes_ <= 0) return;
  struct Entry {
    std::string digest;
    int64_t used_ms = 0;
    int64_t bytes = 0;
  };
  std::vector<Entry> entries;
  int64_t total = 0;
  std::error_code ec;
  for (fs::directory_iterator it(root_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!IsSha256Hex(name) || !it->is_directory(ec)) continue;
    Entry e{name, 0, 0};
    struct stat st;
    if (::lstat(it->path().c_str(), &st) == 0) e.used_ms = int64_t{st.st_mtime} * 1000;
    std::error_code walk;
    for (fs::recursive_directory_iterator f(it->path(), walk), fend; !walk && f != fend;
         f.increment(walk)) {
      if (f->is_regular_file(walk)) e.bytes += static_cast<int64_t>(f->file_size(walk));
    }
    total += e.bytes;
    entries.push_back(std::move(e));
  }
  if (total <= max_bytes_) return;
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.used_ms < b.used_ms; });
  const int64_t idle_before = NowMs() - idle_evict_ms_;
  for (const Entry& e : entries) {
    if (total <= max_bytes_) break;
    // An entry used recently may belong to an attempt still running: it stays.
    if (e.digest == keep || e.used_ms >= idle_before) continue;
    const std::string trash =
        root_ + "/.trash-" + std::to_string(::getpid()) + "-" + std::to_string(++counter_);
    if (::rename((root_ + "/" + e.digest).c_str(), trash.c_str()) != 0) continue;
    RemoveTree(trash);
    fs::remove(root_ + "/" + e.digest + ".manifest", ec);
    total -= e.bytes;
    ++stats_.evicted;
  }
}

}  // namespace ql
