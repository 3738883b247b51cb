#pragma once

#include <memory>
#include <string>

#include "ql/core/status.h"
#include "ql/secrets/key_provider.h"
#include "ql/secrets/secret_bytes.h"

namespace ql::secrets {

// The `file` key provider: a 32-byte key in a file readable by its owner only (mode 0600 or
// stricter), held in memory for the life of the process. Data keys are wrapped with the AEAD of
// aead.h under the file key, bound to the key id, as nonce || ciphertext (72 bytes). The key id
// is "file:" and 16 hex digits of a keyed BLAKE2b of a fixed label under the key: the same file
// always has the same id, different keys practically never share one, and the id reveals
// nothing about the key.
class FileKeyProvider final : public KeyProvider {
 public:
  inline static constexpr size_t kKeyFileBytes = 32;

  // Loads the key from `path`. Errors: NotFound `secret_key_file_missing`; InvalidArgument
  // `secret_key_file_type` (a symlink or not a regular file), `secret_key_file_owner` (owned by
  // another user), `secret_key_file_mode` (any group or other permission bit; the message shows
  // the mode and says to chmod 600), `secret_key_file_size` (not exactly 32 bytes); Internal
  // `secret_key_file_io`. Each message names the path.
  static Result<std::unique_ptr<FileKeyProvider>> Open(const std::string& path);

  // Creates `path` with 32 random bytes and mode 0600 when it does not exist, then Open()s it;
  // `*created` (when given) tells whether this call created it. The file appears complete or
  // not at all (written to a temporary file, fsynced, then hard-linked into place), so two
  // processes starting at once end up with the same key. The parent directory must exist.
  // Errors: those of Open, and Internal `secret_key_file_io` when it cannot be created.
  static Result<std::unique_ptr<FileKeyProvider>> OpenOrCreate(const std::string& path,
                                                               bool* created = nullptr);

  // Returns a provider holding `key` (kKeyFileBytes), for tests and tools that hold the key
  // elsewhere. Errors: InvalidArgument `secret_bad_key`.
  static Result<std::unique_ptr<FileKeyProvider>> FromKey(SecretBytes key);

  const std::string& key_id() const override { return key_id_; }
  // Never fails for a data key of the right size.
  Result<WrappedKey> Wrap(const SecretBytes& data_key) override;
  // Errors: NotFound `secret_key_unknown` when `wrapped.key_id` is not this key's id (naming
  // both), Corrupt `secret_corrupt` when the wrapped key does not verify under this key.
  Result<SecretBytes> Unwrap(const WrappedKey& wrapped) override;

 private:
  FileKeyProvider(SecretBytes key, std::string key_id)
      : key_(std::move(key)), key_id_(std::move(key_id)) {}

  SecretBytes key_;
  std::string key_id_;
};

}  // namespace ql::secrets
