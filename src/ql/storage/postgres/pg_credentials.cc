#include "ql/storage/postgres/pg_credentials.h"

#include <regex>

#include "ql/core/digest.h"
#include "ql/core/governance_store.h"
#include "ql/core/ids.h"
#include "ql/core/placement.h"
#include "ql/storage/postgres/pg_governance.h"

namespace ql::pg {
namespace {

const char* Table(CredentialKind kind) {
  return kind == CredentialKind::kApi ? "ql3.api_credentials" : "ql3.worker_credentials";
}

}  // namespace

Status ValidateCredentialName(const std::string& name) {
  static const std::regex kName("[A-Za-z0-9][A-Za-z0-9._-]{0,127}");
  if (!std::regex_match(name, kName)) {
    return InvalidArgument("invalid_credential_name",
                           "credential name '" + name.substr(0, 140) +
                               "' must be 1..128 letters, digits, '.', '_' or '-', starting "
                               "with a letter or digit");
  }
  return Status::Ok();
}

Result<MintedCredential> MintCredential(Pool& admin, CredentialKind kind, const std::string& name,
                                        Clock& clock, RandomSource& random,
                                        const std::string& pool) {
  QL_RETURN_IF_ERROR(ValidateCredentialName(name));
  if (kind == CredentialKind::kWorker) {
    QL_RETURN_IF_ERROR(ValidatePoolName("invalid_pool", "pool", pool));
  }
  MintedCredential minted{NewUuidV7(clock.NowMs(), random), name, "ql3_" + RandomHex(random, 32)};
  const std::string digest = Sha256Hex(minted.token);
  QL_RETURN_IF_ERROR(admin.Transact({}, "minting a credential", [&](Tx& tx) {
    if (kind == CredentialKind::kWorker) {
      return tx
          .Exec(
              "INSERT INTO ql3.worker_credentials (id, name, token_digest, created_at_ms, pool) "
              "VALUES ($1, $2, $3, $4, $5)",
              {P(minted.id), P(name), P(digest), P(clock.NowMs()), P(pool)})
          .status();
    }
    return tx
        .Exec(std::string("INSERT INTO ") + Table(kind) +
                  " (id, name, token_digest, created_at_ms) VALUES ($1, $2, $3, $4)",
              {P(minted.id), P(name), P(digest), P(clock.NowMs())})
        .status();
  }));
  return minted;
}

Result<bool> PoolServesAProject(Pool& admin, const std::string& pool) {
  bool serves = false;
  QL_RETURN_IF_ERROR(
      admin.Transact({Isolation::kReadCommitted, true}, "reading a pool", [&](Tx& tx) -> Status {
        QL_ASSIGN_OR_RETURN(
            Rows rows,
            tx.Exec("SELECT EXISTS (SELECT 1 FROM ql3.worker_pools WHERE name = $1 AND "
                    "serves_all_projects) OR EXISTS (SELECT 1 FROM ql3.worker_pool_grants WHERE "
                    "pool = $1)",
                    {P(pool)}));
        QL_RETURN_IF_ERROR(rows.ExpectRows(1));
        serves = rows.Bool(0, 0);
        return rows.status();
      }));
  return serves;
}

Status RevokeCredential(Pool& admin, CredentialKind kind, const std::string& name, Clock& clock) {
  QL_RETURN_IF_ERROR(ValidateCredentialName(name));
  return admin.Transact({}, "revoking a credential", [&](Tx& tx) -> Status {
    QL_ASSIGN_OR_RETURN(
        Rows rows, tx.Exec(std::string("UPDATE ") + Table(kind) +
                               " SET revoked_at_ms = coalesce(revoked_at_ms, $2) WHERE name = $1",
                           {P(name), P(clock.NowMs())}));
    if (rows.affected() != 1) {
      return NotFound("credential_not_found", "no credential named '" + name + "'");
    }
    return Status::Ok();
  });
}

Result<MintedApiToken> MintApiToken(Pool& admin, const std::string& name, Clock& clock,
                                    RandomSource& random) {
  QL_RETURN_IF_ERROR(ValidateCredentialName(name));
  QL_RETURN_IF_ERROR(ValidatePrincipalName(name));
  PgGovernanceRunner runner(admin, &admin);
  GovernanceStore governance(runner, random);
  const int64_t now = clock.NowMs();
  MintedApiToken out;
  out.name = name;
  out.token = "ql3_" + RandomHex(random, 32);
  out.token_id = NewUuidV7(now, random);
  const std::string digest = Sha256Hex(out.token);
  if (governance.FindPrincipalByName(name).ok()) {
    return Duplicate("name_duplicate", "a principal named " + name +
                                           " exists already; mint its tokens with ql token "
                                           "create --principal " + name);
  }
  BootstrapCommand bootstrap;
  bootstrap.principal_id = NewUuidV7(now, random);
  bootstrap.name = name;
  bootstrap.token_id = out.token_id;
  bootstrap.token_digest = digest;
  bootstrap.mutation_id = "bootstrap:" + bootstrap.principal_id;
  bootstrap.now_ms = now;
  Result<BootstrapResult> booted = governance.Bootstrap(bootstrap);
  if (booted.ok()) {
    out.principal_id = booted->principal.id;
    out.owner = true;
    return out;
  }
  if (booted.status().reason() != "already_bootstrapped") return booted.status();
  // The admin role's direct access to the database is trusted: it acts as the system.
  CreatePrincipalCommand create;
  create.id = bootstrap.principal_id;
  create.kind = std::string(kPrincipalService);
  create.name = name;
  create.now_ms = now;
  Result<PrincipalRecord> principal = governance.CreatePrincipal(create);
  if (!principal.ok()) {
    if (principal.status().reason() == "principal_name_duplicate") {
      return Duplicate("name_duplicate", "a principal named " + name + " exists already");
    }
    return principal.status();
  }
  CreateTokenCommand token;
  token.id = out.token_id;
  token.principal_id = principal->id;
  token.token_digest = digest;
  token.now_ms = now;
  QL_RETURN_IF_ERROR(governance.CreateToken(token).status());
  out.principal_id = principal->id;
  return out;
}

Status RevokeApiTokens(Pool& admin, const std::string& name, Clock& clock) {
  QL_RETURN_IF_ERROR(ValidatePrincipalName(name));
  PgGovernanceRunner runner(admin, &admin);
  GovernanceStore governance(runner, SecureRandom());
  QL_ASSIGN_OR_RETURN(PrincipalRecord principal, governance.FindPrincipalByName(name));
  QL_ASSIGN_OR_RETURN(std::vector<TokenRecord> tokens, governance.ListTokens(principal.id));
  for (const TokenRecord& token : tokens) {
    if (token.revoked_at_ms.has_value()) continue;
    QL_RETURN_IF_ERROR(governance.RevokeToken(Actor{}, token.id, clock.NowMs()).status());
  }
  return Status::Ok();
}

}  // namespace ql::pg
