#pragma once

// The OpenID Connect provider over the network (OidcProvider): discovery
// (`<issuer>/.well-known/openid-configuration`), the provider's signing keys (jwks_uri), and the
// token endpoint, over https (or plain http to a loopback provider when the configuration allows
// it) with the system's or the configured CAs. The discovery document and the keys are kept for
// an hour; a token signed with a key not seen yet refetches the keys once (a provider rotating
// its keys), at most once a minute. Thread-safe.

#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "ql/core/clock.h"
#include "ql/core/oidc_config.h"
#include "ql/oidc/discovery.h"
#include "ql/oidc/jose.h"

namespace ql::oidc {

class HttpProvider final : public OidcProvider {
 public:
  // `clock` must outlive the provider.
  HttpProvider(OidcConfig config, Clock& clock);

  Result<std::string> AuthorizationUrl(const std::string& state, const std::string& nonce,
                                       const std::string& code_verifier) override;
  Result<OidcClaims> Redeem(const std::string& code, const std::string& code_verifier,
                            const std::string& nonce) override;

  // Fetches the discovery document (and checks it) now: a start-up check.
  Status Check();

  static constexpr int64_t kCacheMs = 3600 * 1000;
  static constexpr int64_t kKeyRefetchMs = 60 * 1000;
  static constexpr size_t kMaxResponseBytes = 1 << 20;

 private:
  Result<ProviderMetadata> Metadata();
  Result<JwkSet> Keys(const ProviderMetadata& metadata, bool refresh);
  // GET (body empty) or POST a form to `url`; the answer's JSON object.
  Result<nlohmann::json> Exchange(const std::string& url, const std::string& what,
                                  const std::string& form_body);

  const OidcConfig config_;
  Clock& clock_;
  std::mutex mu_;  // guards the members below
  std::optional<ProviderMetadata> metadata_;
  int64_t metadata_at_ms_ = 0;
  std::optional<JwkSet> keys_;
  int64_t keys_at_ms_ = 0;
};

}  // namespace ql::oidc
