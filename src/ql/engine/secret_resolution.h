#pragma once

// Resolution of a plan's SecretRefs right before an attempt starts (DESIGN §10). Looking up and
// opening are separate steps so the cluster can split them: the control plane looks up the
// sealed versions and hands them to the worker in its lease; only the worker opens them.
// ql-local does both in its dispatcher. A run whose secret cannot be resolved fails with the
// error's reason as its error code; a variable is never set to an empty or guessed value.

#include <string>
#include <vector>

#include "ql/core/secret_store.h"
#include "ql/core/status.h"
#include "ql/engine/attempt_runner.h"

namespace ql {

// One secret variable of a plan, with the sealed version it resolves to.
struct SealedVariable {
  std::string variable;
  SecretRef version;  // version always set
  SealedSecretValue sealed;
  bool operator==(const SealedVariable&) const = default;
};

// Looks up every SecretRef variable of `environment` for a run of `project_id`. Errors:
// NotFound `secret_not_found` (missing, deleted, another project's, or a version that is
// gone; the message names the variable and the secret), and the store's errors.
Result<std::vector<SealedVariable>> LookUpSecrets(
    SecretRepository& secrets, const std::string& project_id,
    const std::vector<std::pair<std::string, std::string>>& environment);

// Opens `sealed` with `sealer` and moves each variable from launch.environment to
// launch.secret_environment, adding its value to launch.mask_values. Errors (the message names
// the variable and the secret, never a value): NotFound `secret_not_found` (a shredded
// version), Unavailable `secret_unavailable` (this process cannot unwrap: another key, a key
// provider that failed or timed out, or no provider at all when `sealer` is null), Corrupt
// `secret_corrupt`.
Status OpenSecrets(SecretSealer* sealer, const std::vector<SealedVariable>& sealed,
                   AttemptLaunch& launch);

// Returns true for the reasons OpenSecrets and LookUpSecrets give a run: secret_not_found,
// secret_unavailable, secret_corrupt.
bool IsSecretRunError(std::string_view reason);

}  // namespace ql
