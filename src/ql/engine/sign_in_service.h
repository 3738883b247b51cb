#pragma once

// People sign in (DESIGN §9): a name and a password give a session — a token of kind
// `session`, stored like every token (only its digest), with an absolute and an idle expiry —
// for the panel (sent as an HttpOnly cookie) or for `ql login` (kept by the CLI). Passwords are
// set by their principal or reset by an installation admin of at least its rank; either ends
// the principal's other sessions. Failed sign-ins are counted per account in the store (a lock
// for a while after too many in a row, the same on every replica) and per client address in
// memory; every answer to a failed sign-in is the same, and takes as long whether the account
// exists or not. Every sign-in, failure and lock-out is an audit fact.
//
// Errors: PermissionDenied `sign_in_failed` (unknown name, wrong password, locked or disabled
// account, no password set: one answer for all), Unavailable `too_many_attempts` (this address
// failed too often; retry later), InvalidArgument from CheckPasswordPolicy, PermissionDenied
// `wrong_password` (the current password given to change one's own is wrong), and the
// governance store's errors.

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ql/core/clock.h"
#include "ql/core/password.h"
#include "ql/core/ports.h"
#include "ql/engine/governance_service.h"

namespace ql {

struct SignInOptions {
  // The panel's session: ends 12 h after sign-in, or after 30 minutes unused.
  int64_t panel_session_ms = 12LL * 3600 * 1000;
  int64_t panel_idle_ms = 30LL * 60 * 1000;
  // What `ql login` keeps: 30 days, or 7 days unused.
  int64_t cli_session_ms = 30LL * 24 * 3600 * 1000;
  int64_t cli_idle_ms = 7LL * 24 * 3600 * 1000;
  // Failed attempts in a row that lock an account, and for how long.
  int64_t lock_after = 10;
  int64_t lock_ms = 15LL * 60 * 1000;
  // Failed attempts one client address may make in a minute before it is told to wait.
  int max_failures_per_address_per_minute = 20;
  // Called once the set-up code was used (ql-local removes its file). Optional.
  std::function<void()> on_setup_complete;
};

enum class SessionClient { kPanel, kCli };

struct SignedIn {
  MintedToken session;
  PrincipalRecord principal;
  bool must_change_password = false;
};

class SignInService {
 public:
  // Every reference must outlive the service. Thread-safe.
  SignInService(GovernanceService& governance, PasswordHasher& hasher, Clock& clock,
                RandomSource& random, SignInOptions options = {});

  // `second_factor` is a 6-digit TOTP code or a recovery code; an account with a confirmed
  // second factor and the right password but no code gets PermissionDenied `totp_required`
  // (nothing recorded), a wrong code counts as a failed attempt.
  Result<SignedIn> SignIn(const std::string& name, const std::string& password,
                          SessionClient client, const std::string& address,
                          const std::string& request_id, const std::string& second_factor = "");
  // Starts enrolling a second factor (RFC 6238 TOTP) for the caller: a new secret, pending until
  // confirmed with a code. Conflict `totp_enabled` when one is confirmed already.
  struct TotpEnrolment {
    std::string secret;  // base32, for typing in
    std::string uri;     // otpauth://, for a QR code
  };
  Result<TotpEnrolment> EnrolTotp(const Caller& caller);
  // Confirms the pending secret with a current code; returns ten one-time recovery codes (shown
  // once; only their digests are kept). Lifts the caller's session's totp_enrolment
  // restriction. InvalidArgument `totp_invalid`, Conflict
  // `totp_not_enrolled`.
  Result<std::vector<std::string>> ConfirmTotp(const Caller& caller, const std::string& code);
  // Removes the caller's second factor; its password must be given. PermissionDenied
  // `wrong_password`; Conflict `second_factor_required` when the installation requires one.
  Status DisableTotp(const Caller& caller, const std::string& current_password);
  // Ends the session the caller authenticated with (a no-op for an API token).
  Status SignOut(const Caller& caller);
  // The caller changes its own password; `current` must be right. Its other sessions end.
  Status ChangeOwnPassword(const Caller& caller, const std::string& current,
                           const std::string& replacement);
  // An installation admin (of at least the principal's rank) sets another's password; with
  // `require_change` the next sign-in must choose a new one. The principal's sessions end.
  Status ResetPassword(const Caller& caller, const std::string& principal_name_or_id,
                       const std::string& replacement, bool require_change);
  // An installation admin (of at least the principal's rank) removes its password and second
  // factor: it can no longer sign in with one, and its sessions end.
  Status RemovePassword(const Caller& caller, const std::string& principal_name_or_id);
  // Live sessions of the caller, or of `principal` (an installation admin's view).
  Result<std::vector<TokenRecord>> ListSessions(const Caller& caller, const std::string& principal);
  Result<TokenRecord> RevokeSession(const Caller& caller, const std::string& session_id);
  // Whether the principal has a password, and a confirmed second factor.
  struct Credentials {
    bool password_set = false;
    bool totp_enabled = false;
  };
  Result<Credentials> CredentialsOf(const std::string& principal_id);
  // Whether a password sign-in of this principal needs a second factor (the installation's
  // require_second_factor setting and the principal's roles).
  Result<bool> SecondFactorRequired(const std::string& principal_id);
  // The installation's sign-in settings (installation admins), and setting whether a second
  // factor is required: "off", "admins" (admin or owner anywhere) or "everyone".
  Result<InstallationSettings> Settings(const Caller& caller);
  Result<InstallationSettings> SetRequireSecondFactor(const Caller& caller,
                                                      const std::string& value);
  // First start: when the bootstrap owner has no password, stores the digest of a new one-time
  // set-up code valid for `valid_ms` and returns the code (for a 0600 file); "" when the owner
  // has a password (nothing stored).
  Result<std::string> IssueSetupCode(int64_t valid_ms);
  // Whether a set-up code is waiting to be used, and whether `code` is it.
  Result<bool> SetupPending();
  bool IsSetupCode(const std::string& code);
  // The owner chooses its first password with the set-up code and is signed in. One answer,
  // PermissionDenied `setup_code_invalid`, for a wrong, used or expired code (counted against
  // the address like a failed sign-in); the password policy's errors.
  Result<SignedIn> CompleteSetup(const std::string& code, const std::string& password,
                                 SessionClient client, const std::string& address,
                                 const std::string& request_id);
  // A session for a principal an identity provider vouched for (`method`: "oidc").
  Result<SignedIn> SignInExternal(const PrincipalRecord& principal, std::string_view method,
                                  SessionClient client, const std::string& address,
                                  const std::string& request_id);
  // How new password hashes are made, for people.
  std::string hash_parameters() const { return hasher_.Describe(); }

 private:
  // Counts a failure from `address`; true when the address is over its budget.
  bool AddressBlocked(const std::string& address, bool count_failure);
  // A new session's record (id, expiry, idle timeout, label), its digest and its token.
  void NewSession(SessionClient client, const std::string& address, int64_t now_ms,
                  TokenRecord* session, std::string* digest, std::string* token);
  // A hash to check passwords of unknown accounts against, so they take as long.
  const std::string& DecoyHash();

  GovernanceService& governance_;
  PasswordHasher& hasher_;
  Clock& clock_;
  RandomSource& random_;
  SignInOptions options_;
  std::mutex mu_;  // guards the members below and random_
  std::string decoy_hash_;
  struct Window {
    int64_t start_ms = 0;
    int failures = 0;
  };
  std::map<std::string, Window> failures_by_address_;
};

}  // namespace ql
