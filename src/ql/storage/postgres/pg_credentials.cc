#include "ql/storage/postgres/pg_credentials.h"

#include <regex>

#include "ql/core/digest.h"
#include "ql/core/ids.h"

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
                                        Clock& clock, RandomSource& random) {
  QL_RETURN_IF_ERROR(ValidateCredentialName(name));
  MintedCredential minted{NewUuidV7(clock.NowMs(), random), name, "ql3_" + RandomHex(random, 32)};
  const std::string digest = Sha256Hex(minted.token);
  QL_RETURN_IF_ERROR(admin.Transact({}, "minting a credential", [&](Tx& tx) {
    return tx
        .Exec(std::string("INSERT INTO ") + Table(kind) +
                  " (id, name, token_digest, created_at_ms) VALUES ($1, $2, $3, $4)",
              {P(minted.id), P(name), P(digest), P(clock.NowMs())})
        .status();
  }));
  return minted;
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

Result<bool> VerifyApiCredential(Pool& runtime, const std::string& token_digest) {
  bool live = false;
  QL_RETURN_IF_ERROR(runtime.Transact(
      {Isolation::kReadCommitted, true}, "verifying a credential", [&](Tx& tx) -> Status {
        QL_ASSIGN_OR_RETURN(Rows rows, tx.Exec("SELECT 1 FROM ql3.api_credentials WHERE "
                                               "token_digest = $1 AND revoked_at_ms IS NULL",
                                               {P(token_digest)}));
        live = rows.size() == 1;
        return Status::Ok();
      }));
  return live;
}

}  // namespace ql::pg
