// libql-oidc.so: single sign-on for ql-local, loaded only when --oidc-config is given. The
// provider client needs OpenSSL (JOSE signatures, https to the provider); an edge daemon that
// does not sign people in through a provider never maps it (DESIGN §9, "Single sign-on").

#include "ql/oidc/client/http_provider.h"

extern "C" __attribute__((visibility("default"))) ql::OidcProvider* ql_oidc_create_provider(
    const ql::OidcConfig* config, ql::Clock* clock) {
  return new ql::oidc::HttpProvider(*config, *clock);
}
