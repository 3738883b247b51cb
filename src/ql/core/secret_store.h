#pragma once

// Secrets by reference (DESIGN §10): the secrets port, written once over a store's primitives
// the way governance_store.h is. A secret is (project, name) with append-only versions; a
// version holds only sealed material — the value's ciphertext, the data key wrapped by a key
// provider and that key's id — never plaintext. Sealing and opening happen outside the store
// (SecretSealer, implemented by src/ql/secrets). Deleting a secret destroys the wrapped keys of
// all its versions (crypto-shredding) and keeps the secret as a tombstone. Every write appends
// a security audit fact in its own transaction; no fact, row or message ever holds a value.
//
// Errors beyond ports.h's conventions:
//   InvalidArgument  secret_name_invalid, secret_ref_*, secret_sealed_invalid, invalid_id
//   NotFound         secret_not_found (missing, deleted, or a version that is gone)
//   Conflict         secret_version_conflict (another writer stored that version first),
//                    secret_key_changed (a rotation lost its compare-and-set), and the policy
//                    fence's project_archived
//   PermissionDenied the policy fence's permission_denied, principal_disabled,
//                    principal_not_found

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ql/core/governance_ports.h"
#include "ql/core/governance_store.h"
#include "ql/core/ports.h"
#include "ql/core/secret_ref.h"
#include "ql/core/status.h"

namespace ql {

inline constexpr std::string_view kSecretActive = "active";
inline constexpr std::string_view kSecretDeleted = "deleted";
// Bounds of the stored texts (the sealed value of a 64 KiB secret is about 87 KiB).
inline constexpr size_t kMaxSealedValueChars = 96 * 1024;
inline constexpr size_t kMaxWrappedKeyChars = 4096;
// Versions a rotation reads at once.
inline constexpr int kRewrapBatch = 100;

// The sealed material of one version as a store keeps it. `wrapped_key` and `sealed_value` are
// unpadded base64url (the wrapped data key; the AEAD nonce followed by ciphertext and tag).
// key_id and wrapped_key are empty once the version was shredded.
struct SealedSecretValue {
  std::string key_id;
  std::string wrapped_key;
  std::string sealed_value;
  bool operator==(const SealedSecretValue&) const = default;
};

// A secret's head: its current version and whether it was deleted.
struct SecretRecord {
  std::string project_id;
  std::string name;
  int64_t current_version = 0;
  std::string status;  // active | deleted
  int64_t created_at_ms = 0;
  int64_t updated_at_ms = 0;
  std::optional<int64_t> deleted_at_ms;
  bool operator==(const SecretRecord&) const = default;
};

// One stored version.
struct SecretVersionRecord {
  std::string project_id;
  std::string name;
  int64_t version = 0;
  SealedSecretValue sealed;
  std::string created_by;  // principal id; empty for the system
  int64_t created_at_ms = 0;
  std::optional<int64_t> shredded_at_ms;
  bool operator==(const SecretVersionRecord&) const = default;
};

struct PutSecretCommand {
  Actor actor;
  std::optional<PolicyFence> fence;  // none for the system
  std::string project_id;
  std::string name;
  // Must be the secret's current version + 1 (1 for a new name; a deleted secret continues its
  // numbering): the value was sealed for exactly this version.
  int64_t version = 0;
  SealedSecretValue sealed;
  int64_t now_ms = 0;
};

struct DeleteSecretCommand {
  Actor actor;
  std::optional<PolicyFence> fence;
  std::string project_id;
  std::string name;
  int64_t now_ms = 0;
};

// A position in the rotation's walk over live wrapped keys, ordered by (project, name, version).
struct SecretVersionKey {
  std::string project_id;
  std::string name;
  int64_t version = 0;
};

struct RewrapSecretCommand {
  Actor actor;
  SecretVersionKey version;
  // The compare-and-set: the version must still hold exactly this key id and wrapped key.
  std::string old_key_id;
  std::string old_wrapped_key;
  std::string new_key_id;
  std::string new_wrapped_key;
  int64_t now_ms = 0;
};

class SecretRepository {
 public:
  virtual ~SecretRepository() = default;
  // Appends version cmd.version of (project, name), activating a deleted secret again, under
  // the fence. Conflict `secret_version_conflict` when the current version is not
  // cmd.version - 1; NotFound `project_not_found`. Audited as `secret.write`.
  virtual Result<SecretVersionRecord> PutSecret(const PutSecretCommand& cmd) = 0;
  // Returns the head of (project, name), tombstones included; NotFound `secret_not_found`.
  virtual Result<SecretRecord> GetSecret(const std::string& project_id,
                                         const std::string& name) = 0;
  // Lists the heads of a project by name, tombstones included.
  virtual Result<std::vector<SecretRecord>> ListSecrets(const std::string& project_id) = 0;
  // Returns the sealed version `ref` names (its current one when ref.version is unset).
  // NotFound `secret_not_found` when the secret does not exist, was deleted, or the version does
  // not exist or was shredded; each message names the secret, never a value.
  virtual Result<SecretVersionRecord> ResolveSecret(const SecretRef& ref) = 0;
  // Shreds the wrapped keys of every version and marks the secret deleted, under the fence.
  // NotFound `secret_not_found`; deleting a tombstone again returns it and writes nothing.
  // Audited as `secret.delete`.
  virtual Result<SecretRecord> DeleteSecret(const DeleteSecretCommand& cmd) = 0;
  // Returns up to `limit` live (unshredded) versions after `after` (from the start when unset),
  // in (project, name, version) order, for a rotation.
  virtual Result<std::vector<SecretVersionRecord>> ListLiveVersions(
      const std::optional<SecretVersionKey>& after, int limit) = 0;
  // Replaces a version's wrapped key when it still holds the old one; ciphertext is untouched.
  // Conflict `secret_key_changed` otherwise (rewrapped or shredded meanwhile). Audited as
  // `secret.rewrap`.
  virtual Status RewrapSecret(const RewrapSecretCommand& cmd) = 0;
};

// Seals and opens values for a store's versions with a key provider; implemented in
// src/ql/secrets (envelope.h) and picked by a composition root. Thread-safe.
class SecretSealer {
 public:
  virtual ~SecretSealer() = default;
  // Returns the id of the key new values are wrapped with.
  virtual const std::string& key_id() const = 0;
  // Seals `value` as version `version` (project, name and version set).
  virtual Result<SealedSecretValue> Seal(const SecretRef& version, std::string_view value) = 0;
  // Returns the plaintext of version `version`. Errors: NotFound `secret_key_unknown`, Corrupt
  // `secret_corrupt`, Unavailable `key_provider_*`; never bytes that did not verify.
  virtual Result<std::string> Open(const SecretRef& version, const SealedSecretValue& sealed) = 0;
};

// Row primitives inside one transaction; nothing here decides.
class SecretTx {
 public:
  virtual ~SecretTx() = default;
  virtual Result<std::optional<SecretRecord>> LoadSecret(const std::string& project_id,
                                                         const std::string& name) = 0;
  virtual Result<std::vector<SecretRecord>> ListSecrets(const std::string& project_id) = 0;
  // Inserts the head when `insert`, else overwrites its version, status, updated and deleted
  // times.
  virtual Status SaveSecret(const SecretRecord& secret, bool insert) = 0;
  virtual Result<std::optional<SecretVersionRecord>> LoadVersion(const std::string& project_id,
                                                                 const std::string& name,
                                                                 int64_t version) = 0;
  virtual Status InsertVersion(const SecretVersionRecord& version) = 0;
  // Clears key id and wrapped key of every live version of the secret; returns how many.
  virtual Result<int64_t> ShredVersions(const std::string& project_id, const std::string& name,
                                        int64_t now_ms) = 0;
  virtual Result<std::vector<SecretVersionRecord>> ListLiveVersions(
      const std::optional<SecretVersionKey>& after, int limit) = 0;
  // Sets the new key where the old one is still stored; returns whether a row changed.
  virtual Result<bool> ReplaceWrappedKey(const RewrapSecretCommand& cmd) = 0;
};

// Reads run on the runtime role, writes (put, delete, rewrap) on the admin role in PostgreSQL.
enum class SecretTxKind { kRead, kWrite };

class SecretTxRunner {
 public:
  virtual ~SecretTxRunner() = default;
  // Runs `body` in one transaction of `kind` with the governance primitives of the same
  // transaction (for the fence and the audit), committing when it returns ok.
  virtual Status Run(SecretTxKind kind, std::string_view operation,
                     const std::function<Status(GovernanceTx&, SecretTx&)>& body) = 0;
};

class SecretStore final : public SecretRepository {
 public:
  // `runner` and `random` (audit ids) must outlive the store.
  SecretStore(SecretTxRunner& runner, RandomSource& random);

  Result<SecretVersionRecord> PutSecret(const PutSecretCommand& cmd) override;
  Result<SecretRecord> GetSecret(const std::string& project_id, const std::string& name) override;
  Result<std::vector<SecretRecord>> ListSecrets(const std::string& project_id) override;
  Result<SecretVersionRecord> ResolveSecret(const SecretRef& ref) override;
  Result<SecretRecord> DeleteSecret(const DeleteSecretCommand& cmd) override;
  Result<std::vector<SecretVersionRecord>> ListLiveVersions(
      const std::optional<SecretVersionKey>& after, int limit) override;
  Status RewrapSecret(const RewrapSecretCommand& cmd) override;

 private:
  AuditRecord Fact(const Actor& actor, std::string_view action, const std::string& project_id,
                   const std::string& name, int64_t now_ms);

  SecretTxRunner& runner_;
  RandomSource& random_;
  std::mutex random_mu_;
};

// Returns the NotFound `secret_not_found` for `ref`, saying why (`why`).
Status SecretNotFound(const SecretRef& ref, std::string_view why);

}  // namespace ql
