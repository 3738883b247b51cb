#include "ql/engine/sign_in_service.h"

#include <utility>

#include "ql/core/digest.h"
#include "ql/core/ids.h"
#include "ql/core/totp.h"

namespace ql {
namespace {

// A recovery code as typed: lower case, without spaces or dashes.
std::string NormalizeRecoveryCode(const std::string& code) {
  std::string out;
  for (char c : code) {
    if (c == ' ' || c == '-') continue;
    out += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  }
  return out;
}

// A set-up code as typed: upper case, without spaces or dashes.
std::string NormalizeSetupCode(const std::string& code) {
  std::string out;
  for (char c : code) {
    if (c == ' ' || c == '-') continue;
    out += static_cast<char>(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
  }
  return out;
}

}  // namespace

SignInService::SignInService(GovernanceService& governance, PasswordHasher& hasher, Clock& clock,
                             RandomSource& random, SignInOptions options)
    : governance_(governance), hasher_(hasher), clock_(clock), random_(random), options_(options) {}

const std::string& SignInService::DecoyHash() {
  std::lock_guard<std::mutex> lock(mu_);
  if (decoy_hash_.empty()) {
    Result<std::string> hash = hasher_.Hash(RandomHex(random_, 16));
    decoy_hash_ = hash.ok() ? *hash : std::string("$argon2id$");
  }
  return decoy_hash_;
}

bool SignInService::AddressBlocked(const std::string& address, bool count_failure) {
  const int64_t now = clock_.NowMs();
  std::lock_guard<std::mutex> lock(mu_);
  Window& w = failures_by_address_[address];
  if (now - w.start_ms >= 60'000) w = Window{now, 0};
  if (count_failure) ++w.failures;
  // Forget quiet addresses so a scan of many addresses cannot grow the map without bound.
  if (failures_by_address_.size() > 10'000) {
    for (auto it = failures_by_address_.begin(); it != failures_by_address_.end();) {
      it = now - it->second.start_ms >= 60'000 ? failures_by_address_.erase(it) : std::next(it);
    }
  }
  return w.failures >= options_.max_failures_per_address_per_minute;
}

Result<SignedIn> SignInService::SignIn(const std::string& name, const std::string& password,
                                       SessionClient client, const std::string& address,
                                       const std::string& request_id,
                                       const std::string& second_factor) {
  if (AddressBlocked(address, false)) {
    return Unavailable("too_many_attempts",
                       "too many failed sign-ins from this address; wait a minute");
  }
  const Status failed = PermissionDenied(
      "sign_in_failed", "wrong name or password, or too many attempts; try again later");
  GovernanceRepository& repo = governance_.repository();
  // The same work whether or not the account exists: one Argon2id check either way.
  Result<PrincipalRecord> principal =
      ValidatePrincipalName(name).ok()
          ? repo.FindPrincipalByName(name)
          : Result<PrincipalRecord>(NotFound("principal_not_found", "no such principal"));
  if (!principal.ok() && principal.status().code() != StatusCode::kNotFound) {
    return principal.status();
  }
  std::optional<PasswordRecord> stored;
  if (principal.ok()) {
    QL_ASSIGN_OR_RETURN(stored, repo.GetPassword(principal->id));
  }
  const bool matches = hasher_.Verify(stored.has_value() ? stored->hash : DecoyHash(), password);
  if (!principal.ok() || !stored.has_value()) {
    AddressBlocked(address, true);
    governance_.RecordAuthFailure(request_id, "sign_in_failed");
    return failed;
  }
  SignInCommand cmd;
  cmd.principal_id = principal->id;
  cmd.password_ok = matches;
  cmd.lock_after = options_.lock_after;
  cmd.lock_ms = options_.lock_ms;
  cmd.request_id = request_id;
  cmd.now_ms = clock_.NowMs();
  if (matches && stored->totp_enabled) {
    if (second_factor.empty()) {
      return PermissionDenied("totp_required",
                              "this account has a second factor: give the one-time code from "
                              "your authenticator (or a recovery code)");
    }
    std::string secret;
    const int64_t step = Base32Decode(stored->totp_secret, &secret)
                             ? TotpMatch(secret, second_factor, cmd.now_ms)
                             : -1;
    if (step >= 0) {
      cmd.totp_step = step;
    } else {
      cmd.recovery_digest = Sha256Hex(NormalizeRecoveryCode(second_factor));
    }
  }
  SignedIn out;
  if (matches) {
    NewSession(client, address, cmd.now_ms, &cmd.session, &cmd.session_digest, &out.session.token);
  }
  if (matches) {
    // A password chosen by an admin must be changed first; an installation that requires a
    // second factor lets an account without one only enrol it.
    if (stored->must_change) {
      cmd.session.restriction = std::string(kRestrictPasswordChange);
    } else if (!stored->totp_enabled) {
      QL_ASSIGN_OR_RETURN(bool required, SecondFactorRequired(principal->id));
      if (required) cmd.session.restriction = std::string(kRestrictTotpEnrolment);
    }
  }
  Result<TokenRecord> recorded = repo.RecordSignIn(cmd);
  if (!recorded.ok()) {
    if (recorded.status().reason() == "sign_in_failed") AddressBlocked(address, true);
    return recorded.status();
  }
  out.session.record = std::move(recorded).value();
  out.principal = std::move(principal).value();
  out.must_change_password = stored->must_change;
  return out;
}

Result<SignInService::Credentials> SignInService::CredentialsOf(const std::string& principal_id) {
  QL_ASSIGN_OR_RETURN(std::optional<PasswordRecord> stored,
                      governance_.repository().GetPassword(principal_id));
  return Credentials{stored.has_value(), stored.has_value() && stored->totp_enabled};
}

Result<bool> SignInService::SecondFactorRequired(const std::string& principal_id) {
  GovernanceRepository& repo = governance_.repository();
  QL_ASSIGN_OR_RETURN(InstallationSettings settings, repo.GetInstallationSettings());
  if (settings.require_second_factor == kSecondFactorEveryone) return true;
  if (settings.require_second_factor != kSecondFactorAdmins) return false;
  QL_ASSIGN_OR_RETURN(PrincipalRoles roles, repo.RolesOf(principal_id));
  if (roles.installation >= Role::kAdmin) return true;
  for (const auto& [project, role] : roles.projects) {
    if (role >= Role::kAdmin) return true;
  }
  return false;
}

Result<InstallationSettings> SignInService::Settings(const Caller& caller) {
  QL_RETURN_IF_ERROR(governance_.Authorize(caller, "", Action::kManageIdentity, "settings.get"));
  QL_ASSIGN_OR_RETURN(InstallationSettings settings,
                      governance_.repository().GetInstallationSettings());
  settings.setup_code_digest.reset();
  return settings;
}

Result<InstallationSettings> SignInService::SetRequireSecondFactor(const Caller& caller,
                                                                   const std::string& value) {
  return governance_.repository().SetRequireSecondFactor(
      Actor{caller.principal_id, caller.request_id}, value, clock_.NowMs());
}

Result<std::string> SignInService::IssueSetupCode(int64_t valid_ms) {
  GovernanceRepository& repo = governance_.repository();
  QL_ASSIGN_OR_RETURN(PrincipalRecord owner,
                      repo.FindPrincipalByName(std::string(kBootstrapOwnerName)));
  QL_ASSIGN_OR_RETURN(std::optional<PasswordRecord> stored, repo.GetPassword(owner.id));
  if (stored.has_value()) return std::string();
  std::string code;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // 80 bits, typed from a file: five groups of four base32 characters.
    std::string raw(10, '\0');
    random_.Fill(std::span<uint8_t>(reinterpret_cast<uint8_t*>(raw.data()), raw.size()));
    const std::string b32 = Base32Encode(raw);
    for (size_t i = 0; i < b32.size(); i += 4) {
      code += (code.empty() ? "" : "-") + b32.substr(i, 4);
    }
  }
  const int64_t now = clock_.NowMs();
  QL_RETURN_IF_ERROR(repo.SetSetupCode(Sha256Hex(NormalizeSetupCode(code)), now + valid_ms, now));
  return code;
}

Result<bool> SignInService::SetupPending() {
  QL_ASSIGN_OR_RETURN(InstallationSettings settings,
                      governance_.repository().GetInstallationSettings());
  return settings.setup_code_digest.has_value() &&
         settings.setup_code_expires_at_ms.value_or(0) > clock_.NowMs();
}

bool SignInService::IsSetupCode(const std::string& code) {
  Result<InstallationSettings> settings = governance_.repository().GetInstallationSettings();
  return settings.ok() && settings->setup_code_digest.has_value() &&
         ConstantTimeEquals(*settings->setup_code_digest, Sha256Hex(NormalizeSetupCode(code)));
}

Result<SignedIn> SignInService::CompleteSetup(const std::string& code, const std::string& password,
                                              SessionClient client, const std::string& address,
                                              const std::string& request_id) {
  if (AddressBlocked(address, false)) {
    return Unavailable("too_many_attempts",
                       "too many failed attempts from this address; wait a minute");
  }
  QL_RETURN_IF_ERROR(CheckPasswordPolicy(password, std::string(kBootstrapOwnerName)));
  QL_ASSIGN_OR_RETURN(std::string hash, hasher_.Hash(password));
  SetupCommand cmd;
  cmd.code_digest = Sha256Hex(NormalizeSetupCode(code));
  cmd.hash = std::move(hash);
  cmd.request_id = request_id;
  cmd.now_ms = clock_.NowMs();
  SignedIn out;
  NewSession(client, address, cmd.now_ms, &cmd.session, &cmd.session_digest, &out.session.token);
  Result<SetupResult> done = governance_.repository().CompleteSetup(cmd);
  if (!done.ok()) {
    if (done.status().reason() == "setup_code_invalid") AddressBlocked(address, true);
    return done.status();
  }
  out.session.record = std::move(done->session);
  out.principal = std::move(done->principal);
  if (options_.on_setup_complete) options_.on_setup_complete();
  return out;
}

Result<SignedIn> SignInService::SignInExternal(const PrincipalRecord& principal,
                                               std::string_view method, SessionClient client,
                                               const std::string& address,
                                               const std::string& request_id) {
  ExternalSignInCommand cmd;
  cmd.principal_id = principal.id;
  cmd.method = std::string(method);
  cmd.request_id = request_id;
  cmd.now_ms = clock_.NowMs();
  SignedIn out;
  NewSession(client, address, cmd.now_ms, &cmd.session, &cmd.session_digest, &out.session.token);
  cmd.session.label = std::string(method) + " " + cmd.session.label;
  QL_ASSIGN_OR_RETURN(out.session.record, governance_.repository().RecordExternalSignIn(cmd));
  out.principal = principal;
  return out;
}

void SignInService::NewSession(SessionClient client, const std::string& address, int64_t now_ms,
                               TokenRecord* session, std::string* digest, std::string* token) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    *token = "qls_" + RandomHex(random_, 32);
    session->id = NewUuidV7(now_ms, random_);
  }
  const bool panel = client == SessionClient::kPanel;
  session->expires_at_ms = now_ms + (panel ? options_.panel_session_ms : options_.cli_session_ms);
  session->idle_timeout_ms = panel ? options_.panel_idle_ms : options_.cli_idle_ms;
  session->label = std::string(panel ? "panel" : "ql login") +
                   (address.empty() ? std::string() : " from " + address.substr(0, 64));
  *digest = Sha256Hex(*token);
}

Status SignInService::SignOut(const Caller& caller) {
  if (caller.token_kind != kTokenSession || caller.token_id.empty()) return Status::Ok();
  return governance_.RevokeToken(caller, caller.token_id).status();
}

Status SignInService::ChangeOwnPassword(const Caller& caller, const std::string& current,
                                        const std::string& replacement) {
  if (caller.principal_id.empty()) {
    return InvalidArgument("missing_field", "the system has no password");
  }
  GovernanceRepository& repo = governance_.repository();
  QL_ASSIGN_OR_RETURN(PrincipalRecord principal, repo.GetPrincipal(caller.principal_id));
  QL_RETURN_IF_ERROR(CheckPasswordPolicy(replacement, principal.name));
  QL_ASSIGN_OR_RETURN(std::optional<PasswordRecord> stored, repo.GetPassword(principal.id));
  // A principal without a password yet (signed in with a token) sets its first one.
  if (stored.has_value() && !hasher_.Verify(stored->hash, current)) {
    return PermissionDenied("wrong_password", "the current password is wrong");
  }
  if (stored.has_value() && hasher_.Verify(stored->hash, replacement)) {
    return InvalidArgument("password_unchanged", "choose a password other than the current one");
  }
  QL_ASSIGN_OR_RETURN(std::string hash, hasher_.Hash(replacement));
  SetPasswordCommand cmd;
  cmd.actor = Actor{caller.principal_id, caller.request_id};
  cmd.principal_id = principal.id;
  cmd.hash = std::move(hash);
  cmd.keep_token_id = caller.token_id;
  cmd.now_ms = clock_.NowMs();
  return repo.SetPassword(cmd);
}

Status SignInService::ResetPassword(const Caller& caller, const std::string& principal_name_or_id,
                                    const std::string& replacement, bool require_change) {
  QL_ASSIGN_OR_RETURN(PrincipalRecord principal,
                      governance_.GetPrincipal(caller, principal_name_or_id));
  if (principal.id != caller.principal_id) {
    QL_RETURN_IF_ERROR(
        governance_.Authorize(caller, "", Action::kManageIdentity, "principals.password"));
  }
  QL_RETURN_IF_ERROR(CheckPasswordPolicy(replacement, principal.name));
  QL_ASSIGN_OR_RETURN(std::string hash, hasher_.Hash(replacement));
  SetPasswordCommand cmd;
  cmd.actor = Actor{caller.principal_id, caller.request_id};
  cmd.principal_id = principal.id;
  cmd.hash = std::move(hash);
  cmd.must_change = require_change;
  cmd.keep_token_id = principal.id == caller.principal_id ? caller.token_id : std::string();
  // An admin's reset is how a person who lost the device gets back in.
  cmd.clear_second_factor = principal.id != caller.principal_id;
  cmd.now_ms = clock_.NowMs();
  return governance_.repository().SetPassword(cmd);
}

Status SignInService::RemovePassword(const Caller& caller,
                                     const std::string& principal_name_or_id) {
  QL_ASSIGN_OR_RETURN(PrincipalRecord principal,
                      governance_.GetPrincipal(caller, principal_name_or_id));
  return governance_.repository().RemovePassword(Actor{caller.principal_id, caller.request_id},
                                                 principal.id, clock_.NowMs());
}

Result<std::vector<TokenRecord>> SignInService::ListSessions(const Caller& caller,
                                                             const std::string& principal) {
  std::string principal_id = caller.principal_id;
  if (!principal.empty()) {
    QL_ASSIGN_OR_RETURN(PrincipalRecord found, governance_.GetPrincipal(caller, principal));
    principal_id = found.id;
  }
  if (principal_id != caller.principal_id) {
    QL_RETURN_IF_ERROR(governance_.Authorize(caller, "", Action::kManageIdentity, "sessions.list"));
  }
  QL_ASSIGN_OR_RETURN(std::vector<TokenRecord> tokens,
                      governance_.repository().ListTokens(principal_id));
  const int64_t now = clock_.NowMs();
  std::vector<TokenRecord> out;
  for (TokenRecord& t : tokens) {
    const bool live = !t.revoked_at_ms.has_value() &&
                      (!t.expires_at_ms.has_value() || *t.expires_at_ms > now) &&
                      (!t.idle_timeout_ms.has_value() ||
                       t.last_used_at_ms.value_or(t.created_at_ms) + *t.idle_timeout_ms > now);
    if (t.kind == kTokenSession && live) out.push_back(std::move(t));
  }
  return out;
}

Result<TokenRecord> SignInService::RevokeSession(const Caller& caller,
                                                 const std::string& session_id) {
  return governance_.RevokeToken(caller, session_id);
}

Result<SignInService::TotpEnrolment> SignInService::EnrolTotp(const Caller& caller) {
  GovernanceRepository& repo = governance_.repository();
  QL_ASSIGN_OR_RETURN(PrincipalRecord principal, repo.GetPrincipal(caller.principal_id));
  QL_ASSIGN_OR_RETURN(std::optional<PasswordRecord> stored, repo.GetPassword(principal.id));
  if (stored.has_value() && stored->totp_enabled) {
    return Conflict("totp_enabled", "a second factor is set already; remove it first");
  }
  std::string secret;
  {
    std::lock_guard<std::mutex> lock(mu_);
    secret.resize(20);
    random_.Fill(std::span<uint8_t>(reinterpret_cast<uint8_t*>(secret.data()), secret.size()));
  }
  SetSecondFactorCommand cmd;
  cmd.actor = Actor{caller.principal_id, caller.request_id};
  cmd.principal_id = principal.id;
  cmd.totp_secret = Base32Encode(secret);
  cmd.audit_action = "totp.enrol";
  cmd.now_ms = clock_.NowMs();
  QL_RETURN_IF_ERROR(repo.SetSecondFactor(cmd));
  return TotpEnrolment{cmd.totp_secret, TotpUri("QingLong", principal.name, secret)};
}

Result<std::vector<std::string>> SignInService::ConfirmTotp(const Caller& caller,
                                                            const std::string& code) {
  GovernanceRepository& repo = governance_.repository();
  QL_ASSIGN_OR_RETURN(std::optional<PasswordRecord> stored, repo.GetPassword(caller.principal_id));
  if (!stored.has_value() || stored->totp_secret.empty()) {
    return Conflict("totp_not_enrolled", "start with POST /api/v1/totp/enrol (ql totp enrol)");
  }
  if (stored->totp_enabled) return Conflict("totp_enabled", "the second factor is confirmed");
  std::string secret;
  const int64_t now = clock_.NowMs();
  const int64_t step =
      Base32Decode(stored->totp_secret, &secret) ? TotpMatch(secret, code, now) : -1;
  if (step < 0) {
    return InvalidArgument("totp_invalid",
                           "the code does not match; check the authenticator's clock and retry");
  }
  std::vector<std::string> codes;
  std::string digests;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int i = 0; i < 10; ++i) {
      const std::string raw = RandomHex(random_, 5);
      codes.push_back(raw.substr(0, 5) + "-" + raw.substr(5));
      digests += (digests.empty() ? "" : " ") + Sha256Hex(raw);
    }
  }
  SetSecondFactorCommand cmd;
  cmd.actor = Actor{caller.principal_id, caller.request_id};
  cmd.principal_id = caller.principal_id;
  cmd.totp_secret = stored->totp_secret;
  cmd.totp_enabled = true;
  cmd.totp_last_step = step;
  cmd.recovery_digests = digests;
  cmd.audit_action = "totp.enable";
  cmd.lift_token_id = caller.token_id;
  cmd.now_ms = now;
  QL_RETURN_IF_ERROR(repo.SetSecondFactor(cmd));
  return codes;
}

Status SignInService::DisableTotp(const Caller& caller, const std::string& current_password) {
  GovernanceRepository& repo = governance_.repository();
  QL_ASSIGN_OR_RETURN(std::optional<PasswordRecord> stored, repo.GetPassword(caller.principal_id));
  if (!stored.has_value() || !hasher_.Verify(stored->hash, current_password)) {
    return PermissionDenied("wrong_password", "the current password is wrong");
  }
  QL_ASSIGN_OR_RETURN(bool required, SecondFactorRequired(caller.principal_id));
  if (required) {
    return Conflict("second_factor_required",
                    "this installation requires a second factor for your account; it cannot "
                    "be removed (an admin's password reset replaces a lost one)");
  }
  SetSecondFactorCommand cmd;
  cmd.actor = Actor{caller.principal_id, caller.request_id};
  cmd.principal_id = caller.principal_id;
  cmd.audit_action = "totp.disable";
  cmd.now_ms = clock_.NowMs();
  return repo.SetSecondFactor(cmd);
}

}  // namespace ql
