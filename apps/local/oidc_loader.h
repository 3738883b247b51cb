#pragma once

// Opens libql-oidc.so (beside the executable, or $QL_OIDC_MODULE) and makes the provider client
// of an --oidc-config. Unavailable `oidc_module_unavailable` when the module cannot be opened.

#include <memory>

#include "ql/core/clock.h"
#include "ql/core/oidc_config.h"
#include "ql/core/status.h"

namespace ql {

Result<std::unique_ptr<OidcProvider>> LoadOidcProvider(const OidcConfig& config, Clock& clock);

}  // namespace ql
