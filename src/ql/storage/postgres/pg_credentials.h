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
// A worker credential is bound to `pool` (ValidatePoolName: InvalidArgument `invalid_pool`): its
// sessions register there and nowhere else. API credentials have no pool.
Result<MintedCredential> MintCredential(Pool& admin, CredentialKind kind, const std::string& name,
                                        Clock& clock, RandomSource& random,
                                        const std::string& pool = "default");

// Whether pool `pool` serves any project: it is open, or granted to one (admin pool). A worker
// token minted for a pool that serves none takes no run until an installation admin grants one.
Result<bool> PoolServesAProject(Pool& admin, const std::string& pool);

// Revokes the named credential (admin pool); NotFound `credential_not_found`.
Status RevokeCredential(Pool& admin, CredentialKind kind, const std::string& name, Clock& clock);

struct MintedApiToken {
  std::string principal_id;
  std::string token_id;
  std::string name;
  std::string token;  // shown once; never stored
  bool owner = false;  // the principal was bootstrapped as installation owner
};

// Mints an API token for a new principal `name` through the admin pool (`ql-cluster token
// create`): on an installation without an owner the principal (kind user) becomes its owner;
// otherwise it is created as a service principal with no role (grant one with `ql role grant`).
// Duplicate `name_duplicate` when a principal of that name exists (mint further tokens for it
// with `ql token create --principal NAME`).
Result<MintedApiToken> MintApiToken(Pool& admin, const std::string& name, Clock& clock,
                                    RandomSource& random);

// Revokes every live token of the principal `name` (admin pool); NotFound
// `principal_not_found`.
Status RevokeApiTokens(Pool& admin, const std::string& name, Clock& clock);

}  // namespace ql::pg
