#pragma once

// Secret use-cases (DESIGN §10) for the HTTP API and the CLI: set a value (sealed here, before
// the store sees it), list names with versions and times, delete (crypto-shredding). Values
// travel only into Set and never out of this service; no answer, message or audit fact holds
// one. Authorization asks GovernanceService: writes need admin in the project, listing viewer.
//
// Errors: InvalidArgument secret_name_invalid, secret_value_empty, secret_value_too_large;
// NotFound secret_not_found, project_not_found; PermissionDenied permission_denied; Unavailable
// secrets_unavailable (no key provider configured) and the key provider's errors; Conflict
// secret_version_conflict (when several writers kept racing), project_archived.

#include <string>
#include <string_view>
#include <vector>

#include "ql/core/clock.h"
#include "ql/core/ports.h"
#include "ql/core/secret_store.h"
#include "ql/core/status.h"
#include "ql/engine/governance_service.h"

namespace ql {

// How often Set seals again when another writer took the version it sealed for.
inline constexpr int kSecretWriteAttempts = 5;

class SecretService {
 public:
  // `sealer` may be null: then every call fails with secrets_unavailable. All references must
  // outlive the service. Thread-safe.
  SecretService(Store& store, GovernanceService& governance, SecretSealer* sealer, Clock& clock);

  // Seals `value` as the secret's next version and stores it; returns the secret's head.
  Result<SecretRecord> Set(const Caller& caller, const std::string& name, std::string_view value);
  // Lists the secrets of the caller's project (tombstones included) by name.
  Result<std::vector<SecretRecord>> List(const Caller& caller);
  // Deletes the secret (its versions' keys are destroyed); returns the tombstone.
  Result<SecretRecord> Remove(const Caller& caller, const std::string& name);

 private:
  Status RequireSealer() const;
  // Resolves the caller's project and authorizes `action` there.
  Result<std::string> ProjectFor(const Caller& caller, Action action, const std::string& target);

  Store& store_;
  GovernanceService& governance_;
  SecretSealer* sealer_;
  Clock& clock_;
};

}  // namespace ql
