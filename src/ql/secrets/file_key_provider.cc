#include "ql/secrets/file_key_provider.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "ql/secrets/aead.h"

namespace ql::secrets {
namespace {

constexpr std::string_view kKeyIdLabel = "qinglong/key-id@v1";
constexpr std::string_view kWrapDomain = "qinglong/data-key@v1\n";

Status Io(const std::string& what, const std::string& path, int err) {
  return Internal("secret_key_file_io",
                  "cannot " + what + " key file " + path + ": " + std::strerror(err));
}

std::string KeyIdOf(const SecretBytes& key) {
  unsigned char digest[8];
  crypto_generichash(digest, sizeof(digest),
                     reinterpret_cast<const unsigned char*>(kKeyIdLabel.data()), kKeyIdLabel.size(),
                     key.data(), key.size());
  char hex[2 * sizeof(digest) + 1];
  sodium_bin2hex(hex, sizeof(hex), digest, sizeof(digest));
  return "file:" + std::string(hex);
}

std::string WrapAssociatedData(const std::string& key_id) {
  return std::string(kWrapDomain) + key_id;
}

// Reads the whole key file from `fd` (open on `path`) after checking what it is.
Result<SecretBytes> ReadKeyFile(int fd, const std::string& path) {
  struct stat st;
  if (fstat(fd, &st) != 0) return Io("stat", path, errno);
  if (!S_ISREG(st.st_mode)) {
    return InvalidArgument("secret_key_file_type", "key file " + path + " is not a regular file");
  }
  if (st.st_uid != geteuid()) {
    return InvalidArgument("secret_key_file_owner",
                           "key file " + path + " is owned by uid " + std::to_string(st.st_uid) +
                               ", not by this process's uid " + std::to_string(geteuid()));
  }
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return InvalidArgument("secret_key_file_mode",
                           "key file " + path + " has mode " + mode +
                               "; it must be readable by its owner only (chmod 600 " + path + ")");
  }
  if (st.st_size != static_cast<off_t>(FileKeyProvider::kKeyFileBytes)) {
    return InvalidArgument("secret_key_file_size",
                           "key file " + path + " holds " + std::to_string(st.st_size) +
                               " bytes; a key file holds exactly " +
                               std::to_string(FileKeyProvider::kKeyFileBytes) + " random bytes");
  }
  SecretBytes key(FileKeyProvider::kKeyFileBytes);
  size_t got = 0;
  while (got < key.size()) {
    ssize_t n = read(fd, key.data() + got, key.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Io("read", path, errno);
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got != key.size()) {
    return InvalidArgument("secret_key_file_size",
                           "key file " + path + " ended after " + std::to_string(got) + " bytes");
  }
  return key;
}

Status FsyncParentOf(const std::string& path) {
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Io("open the directory of", path, errno);
  int rc = fsync(fd);
  int err = errno;
  close(fd);
  return rc == 0 ? Status::Ok() : Io("fsync the directory of", path, err);
}

// Writes a new key to a temporary file beside `path` and links it into place; EEXIST from the
// link means another process created the file first, which is fine: its key is used.
Status CreateKeyFile(const std::string& path, bool& created) {
  SecretBytes key = SecretBytes::Random(FileKeyProvider::kKeyFileBytes);
  char suffix[17];
  uint64_t nonce = randombytes_random() | (uint64_t{randombytes_random()} << 32);
  std::snprintf(suffix, sizeof(suffix), "%016llx", static_cast<unsigned long long>(nonce));
  const std::string tmp = path + ".tmp-" + suffix;
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return Io("create", tmp, errno);
  size_t done = 0;
  int err = 0;
  while (done < key.size()) {
    ssize_t n = write(fd, key.data() + done, key.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      err = errno;
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (err == 0 && fsync(fd) != 0) err = errno;
  close(fd);
  if (err == 0) {
    if (link(tmp.c_str(), path.c_str()) == 0) {
      created = true;
    } else if (errno != EEXIST) {
      err = errno;
    }
  }
  unlink(tmp.c_str());
  if (err != 0) return Io("write", path, err);
  return created ? FsyncParentOf(path) : Status::Ok();
}

}  // namespace

Result<std::unique_ptr<FileKeyProvider>> FileKeyProvider::Open(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) {
      return NotFound("secret_key_file_missing", "key file " + path + " does not exist");
    }
    if (err == ELOOP) {
      return InvalidArgument("secret_key_file_type", "key file " + path + " is a symbolic link");
    }
    return Io("open", path, err);
  }
  Result<SecretBytes> key = ReadKeyFile(fd, path);
  close(fd);
  if (!key.ok()) return key.status();
  return FromKey(std::move(key).value());
}

Result<std::unique_ptr<FileKeyProvider>> FileKeyProvider::OpenOrCreate(const std::string& path,
                                                                       bool* created) {
  bool made = false;
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) return Io("stat", path, errno);
    QL_RETURN_IF_ERROR(CreateKeyFile(path, made));
  }
  if (created != nullptr) *created = made;
  return Open(path);
}

Result<std::unique_ptr<FileKeyProvider>> FileKeyProvider::FromKey(SecretBytes key) {
  if (key.size() != kKeyFileBytes) {
    return InvalidArgument("secret_bad_key", "a file provider key is " +
                                                 std::to_string(kKeyFileBytes) + " bytes, got " +
                                                 std::to_string(key.size()));
  }
  std::string key_id = KeyIdOf(key);
  return std::unique_ptr<FileKeyProvider>(new FileKeyProvider(std::move(key), std::move(key_id)));
}

Result<WrappedKey> FileKeyProvider::Wrap(const SecretBytes& data_key) {
  if (data_key.size() != kDataKeyBytes) {
    return InvalidArgument("secret_bad_key", "a data key is " + std::to_string(kDataKeyBytes) +
                                                 " bytes, got " + std::to_string(data_key.size()));
  }
  QL_ASSIGN_OR_RETURN(AeadBox box, AeadSeal(key_, data_key.view(), WrapAssociatedData(key_id_)));
  return WrappedKey{key_id_, box.nonce + box.ciphertext};
}

Result<SecretBytes> FileKeyProvider::Unwrap(const WrappedKey& wrapped) {
  if (wrapped.key_id != key_id_) {
    return NotFound("secret_key_unknown", "the data key was wrapped with key " + wrapped.key_id +
                                              ", but the key file holds key " + key_id_);
  }
  if (wrapped.ciphertext.size() != kAeadNonceBytes + kDataKeyBytes + kAeadTagBytes) {
    return Corrupt("secret_corrupt",
                   "the wrapped data key has " + std::to_string(wrapped.ciphertext.size()) +
                       " bytes; the file provider writes " +
                       std::to_string(kAeadNonceBytes + kDataKeyBytes + kAeadTagBytes));
  }
  AeadBox box{wrapped.ciphertext.substr(0, kAeadNonceBytes),
              wrapped.ciphertext.substr(kAeadNonceBytes)};
  return AeadOpen(key_, box, WrapAssociatedData(key_id_), "the wrapped data key");
}

}  // namespace ql::secrets
