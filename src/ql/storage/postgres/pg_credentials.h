#pragma once

// Bearer credentials of the cluster (API and workers): minted by the admin role, stored only as
// the SHA-256 digest of the token, verified by the digest. A token is "ql3_" followed by 64
// hex digits (256 random bits) and is shown once, when minted.

#include <cstdint>
#include <string>

#include "ql/core/clock.h"
#include "ql/core/status.h"
#include "ql/storage/postgres/pg_client.h"

namespace ql::pg {

enum class CredentialKind { kApi, kWorker };

struct MintedCredential {
  std::string id;
  std::string name;
  std::string token;  // shown once; never stored
};

// Validates `name` ([A-Za-z0-9][A-Za-z0-9._-]{0,127}): InvalidArgument `invalid_credential_name`.
Status ValidateCredentialName(const std::string& name);

// Mints a credential through the admin pool. Duplicate `name_duplicate` when the name is taken.
Result<MintedCredential> MintCredential(Pool& admin, CredentialKind kind, const std::string& name,
                                        Clock& clock, RandomSource& random);

// Revokes the named credential (admin pool); NotFound `credential_not_found`.
Status RevokeCredential(Pool& admin, CredentialKind kind, const std::string& name, Clock& clock);

// Returns whether a live (not revoked) API credential has this token digest (runtime pool).
Result<bool> VerifyApiCredential(Pool& runtime, const std::string& token_digest);

}  // namespace ql::pg
