#include "ql/engine/oidc_sign_in.h"

#include <utility>

#include "ql/core/digest.h"
#include "ql/core/ids.h"
#include "ql/core/store_commands.h"

namespace ql {

OidcSignIn::OidcSignIn(OidcConfig config, OidcProvider& provider, GovernanceService& governance,
                       SignInService& sign_in, Clock& clock, RandomSource& random,
                       CliTokenSealer seal_for_cli)
    : config_(std::move(config)),
      provider_(provider),
      governance_(governance),
      sign_in_(sign_in),
      clock_(clock),
      random_(random),
      seal_for_cli_(std::move(seal_for_cli)) {}

Result<OidcSignIn::Started> OidcSignIn::Begin(SessionClient client, std::optional<int64_t> cli_port,
                                              const std::string& cli_key) {
  OidcLoginRecord login;
  if (client == SessionClient::kCli) {
    if (!seal_for_cli_) {
      return InvalidArgument("oidc_cli_unsupported", "this server cannot seal a token for ql");
    }
    if (!cli_port.has_value() || *cli_port < 1024 || *cli_port > 65535) {
      return InvalidArgument("invalid_cli_port", "port is ql login's loopback port, 1024-65535");
    }
    // A key that cannot be sealed to is refused now, not after the person signed in: an X25519
    // public key is 32 bytes.
    std::optional<std::string> raw = Base64UrlDecode(cli_key);
    if (!raw.has_value() || raw->size() != 32) {
      return InvalidArgument("invalid_public_key",
                             "key is ql's public key: 32 bytes in unpadded base64url");
    }
    login.cli_port = cli_port;
    login.cli_key = cli_key;
  }
  Started out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out.state = RandomHex(random_, 32);
    login.nonce = RandomHex(random_, 16);
    // 64 characters of the unreserved set: a PKCE verifier (RFC 7636 §4.1).
    login.code_verifier = RandomHex(random_, 32);
  }
  login.state_digest = Sha256Hex(out.state);
  login.client = client == SessionClient::kPanel ? "panel" : "cli";
  login.created_at_ms = clock_.NowMs();
  login.expires_at_ms = login.created_at_ms + kLoginTtlMs;
  QL_ASSIGN_OR_RETURN(out.url,
                      provider_.AuthorizationUrl(out.state, login.nonce, login.code_verifier));
  QL_RETURN_IF_ERROR(governance_.repository().BeginOidcLogin(login));
  return out;
}

OidcSignIn::Outcome OidcSignIn::Finish(const std::string& state, const std::string& browser_state,
                                       const std::string& code,
                                       const std::optional<std::string>& iss,
                                       const std::string& address, const std::string& request_id) {
  Outcome out;
  auto fail = [&](Status status) {
    governance_.RecordAuthFailure(request_id, status.reason());
    out.status = std::move(status);
    return out;
  };
  // The answer must come back to the browser that started the sign-in (else an attacker could
  // sign a victim into the attacker's account with the attacker's own code).
  if (state.size() != 64 || browser_state.empty() || !ConstantTimeEquals(state, browser_state)) {
    return fail(PermissionDenied("oidc_state_invalid",
                                 "this sign-in was not started in this browser; start again"));
  }
  Result<OidcLoginRecord> login =
      governance_.repository().TakeOidcLogin(Sha256Hex(state), clock_.NowMs());
  if (!login.ok()) return fail(login.status());
  out.cli = login->client == "cli";
  out.cli_port = login->cli_port;
  // A mix-up attack sends another provider's answer here: a provider that names itself must be
  // ours.
  if (iss.has_value() && *iss != config_.issuer) {
    return fail(PermissionDenied("oidc_failed", "the answer names another issuer"));
  }
  Result<OidcClaims> claims = provider_.Redeem(code, login->code_verifier, login->nonce);
  if (!claims.ok()) return fail(claims.status());
  Result<PrincipalRecord> principal = PrincipalFor(*claims, request_id);
  if (!principal.ok()) return fail(principal.status());
  // A disabled principal changes nothing, its bindings included: the sign-in below refuses it
  // (and audits the refusal against the principal).
  if (principal->status == kPrincipalActive) {
    if (Status st = ReconcileBindings(*principal, *claims, request_id); !st.ok()) return fail(st);
  }
  // RecordExternalSignIn audits its own refusal (a principal disabled meanwhile).
  Result<SignedIn> signed_in = sign_in_.SignInExternal(
      *principal, "oidc", out.cli ? SessionClient::kCli : SessionClient::kPanel, address,
      request_id);
  if (!signed_in.ok()) {
    out.status = signed_in.status();
    return out;
  }
  out.signed_in = std::move(signed_in).value();
  if (out.cli) {
    Result<std::string> sealed =
        seal_for_cli_ ? seal_for_cli_(login->cli_key.value_or(""), out.signed_in.session.token)
                      : Result<std::string>(InvalidArgument("oidc_cli_unsupported", "no sealer"));
    if (!sealed.ok()) {
      out.status = sealed.status();
      return out;
    }
    out.sealed_token = std::move(sealed).value();
    out.signed_in.session.token.clear();
  }
  return out;
}

Result<PrincipalRecord> OidcSignIn::PrincipalFor(const OidcClaims& claims,
                                                 const std::string& request_id) {
  QL_ASSIGN_OR_RETURN(std::string name, OidcPrincipalName(config_, claims));
  GovernanceRepository& repo = governance_.repository();
  Result<PrincipalRecord> found = repo.FindPrincipalByName(name);
  if (found.ok() || found.status().code() != StatusCode::kNotFound) return found;
  if (!config_.create_principals) {
    return PermissionDenied("oidc_no_principal",
                            "no principal named " + name + " exists (create_principals is off)");
  }
  CreatePrincipalCommand cmd;
  cmd.actor = Actor{std::string(), request_id};  // the system, vouched for by the provider
  cmd.name = name;
  cmd.now_ms = clock_.NowMs();
  {
    std::lock_guard<std::mutex> lock(mu_);
    cmd.id = NewUuidV7(cmd.now_ms, random_);
  }
  Result<PrincipalRecord> created = repo.CreatePrincipal(cmd);
  // Two first sign-ins at once: the other one created it.
  if (!created.ok() && created.status().code() == StatusCode::kDuplicate) {
    return repo.FindPrincipalByName(name);
  }
  return created;
}

Status OidcSignIn::ReconcileBindings(const PrincipalRecord& principal, const OidcClaims& claims,
                                     const std::string& request_id) {
  GovernanceRepository& repo = governance_.repository();
  for (const auto& [scope_name, desired] : OidcDesiredRoles(config_, claims)) {
    std::string scope = scope_name;
    if (scope_name != kInstallationScope) {
      Result<ProjectRecord> project = governance_.ResolveProject(scope_name);
      if (!project.ok()) continue;  // a project the configuration names that does not exist
      scope = project->id;
    }
    QL_ASSIGN_OR_RETURN(std::vector<RoleBindingRecord> bindings, repo.ListBindings(scope));
    std::optional<RoleBindingRecord> current;
    for (RoleBindingRecord& b : bindings) {
      if (b.subject_id == principal.id) current = std::move(b);
    }
    const bool managed =
        current.has_value() && current->mutation_id.rfind(kOidcMutationPrefix, 0) == 0;
    const std::string held = current.has_value() ? current->role : std::string("none");
    const std::string wanted(RoleName(desired));
    // A binding made by hand is an admin's decision: the provider's groups never change it.
    if (held == wanted || (current.has_value() && !managed)) continue;
    if (desired == Role::kNone && !managed) continue;
    WriteBindingCommand cmd;
    cmd.actor = Actor{std::string(), request_id};
    cmd.scope = scope;
    cmd.subject_id = principal.id;
    cmd.role = wanted;
    cmd.now_ms = clock_.NowMs();
    {
      std::lock_guard<std::mutex> lock(mu_);
      cmd.mutation_id = std::string(kOidcMutationPrefix) + NewUuidV7(cmd.now_ms, random_);
    }
    Result<WriteBindingResult> written = repo.WriteBinding(cmd);
    // The last owner of a scope keeps its role until another owner exists.
    if (!written.ok() && written.status().reason() != "last_owner") return written.status();
  }
  return Status();
}

}  // namespace ql
