#pragma once

// Single sign-on through an OpenID Connect provider (DESIGN §9): the authorization code flow
// with PKCE. Begin keeps the sign-in's state digest, nonce and verifier in the store (any
// replica may receive the provider's answer) and gives the provider's URL; Finish takes them
// back once (a state is good for one answer and ten minutes), checks that the answer comes back
// to the browser that started it, lets the provider verify the code and the ID token, maps the
// claims to a principal (OidcConfig), brings the principal's provider-managed role bindings in
// line with its groups, and creates a session like a password sign-in. Every failure is an audit
// fact.
//
// Errors: PermissionDenied `oidc_state_invalid`, `oidc_no_principal`, `oidc_failed`,
// `principal_disabled`; Unavailable `oidc_unavailable`; the store's errors.

#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "ql/core/clock.h"
#include "ql/core/oidc_config.h"
#include "ql/core/ports.h"
#include "ql/engine/governance_service.h"
#include "ql/engine/sign_in_service.h"

namespace ql {

// Seals a session token to a `ql login` public key (secrets::SealToPublicKey).
using CliTokenSealer =
    std::function<Result<std::string>(const std::string& public_key, const std::string& token)>;

class OidcSignIn {
 public:
  // Every reference must outlive the service. Thread-safe. Without `seal_for_cli`, `ql login`
  // cannot sign in through the provider (Begin answers InvalidArgument `oidc_cli_unsupported`).
  OidcSignIn(OidcConfig config, OidcProvider& provider, GovernanceService& governance,
             SignInService& sign_in, Clock& clock, RandomSource& random,
             CliTokenSealer seal_for_cli = nullptr);

  struct Started {
    std::string url;    // the provider's authorization URL
    std::string state;  // for the browser to hold (a cookie) until the provider answers
  };
  // A panel sign-in, or one for `ql login` (client kCli): its loopback listener's port and the
  // public key its session token is sealed to. InvalidArgument `invalid_cli_port`,
  // `invalid_public_key`.
  Result<Started> Begin(SessionClient client, std::optional<int64_t> cli_port = std::nullopt,
                        const std::string& cli_key = std::string());

  // How a sign-in ended, and where its answer goes: the panel, or the loopback port of the
  // `ql login` that started it (known once the state was recognised).
  struct Outcome {
    Status status;
    SignedIn signed_in;  // when status is ok
    bool cli = false;
    std::optional<int64_t> cli_port;
    std::string sealed_token;  // cli: the session token sealed to its key
  };
  // `state`, `code` and `iss` (RFC 9207: when the provider names itself, it must be the
  // configured issuer) from the provider's redirect, `browser_state` from the browser's cookie.
  Outcome Finish(const std::string& state, const std::string& browser_state,
                 const std::string& code, const std::optional<std::string>& iss,
                 const std::string& address, const std::string& request_id);

  const std::string& name() const { return config_.name; }

  // How long a started sign-in may take.
  static constexpr int64_t kLoginTtlMs = 10 * 60 * 1000;

 private:
  Result<PrincipalRecord> PrincipalFor(const OidcClaims& claims, const std::string& request_id);
  Status ReconcileBindings(const PrincipalRecord& principal, const OidcClaims& claims,
                           const std::string& request_id);

  OidcConfig config_;
  OidcProvider& provider_;
  GovernanceService& governance_;
  SignInService& sign_in_;
  Clock& clock_;
  RandomSource& random_;
  CliTokenSealer seal_for_cli_;
  std::mutex mu_;  // guards random_
};

}  // namespace ql
