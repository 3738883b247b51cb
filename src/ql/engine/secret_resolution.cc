#include "ql/engine/secret_resolution.h"

#include <algorithm>
#include <utility>

#include "ql/core/task_spec.h"

namespace ql {
namespace {

std::string Describe(const std::string& variable, const SecretRef& ref) {
  std::string out = "variable " + variable + " (secret " + ref.name;
  if (ref.version) out += " version " + std::to_string(*ref.version);
  return out + ")";
}

}  // namespace

Result<std::vector<SealedVariable>> LookUpSecrets(
    SecretRepository& secrets, const std::string& project_id,
    const std::vector<std::pair<std::string, std::string>>& environment) {
  QL_ASSIGN_OR_RETURN(auto refs, SecretEnvironment(environment));
  std::vector<SealedVariable> out;
  for (const auto& [variable, ref] : refs) {
    if (ref.project_id != project_id) {
      return NotFound("secret_not_found", Describe(variable, ref) +
                                              " belongs to another project than the run");
    }
    Result<SecretVersionRecord> found = secrets.ResolveSecret(ref);
    if (!found.ok()) {
      if (found.status().reason() != "secret_not_found") return found.status();
      return NotFound("secret_not_found",
                      Describe(variable, ref) + ": " + found.status().message());
    }
    out.push_back(SealedVariable{variable, SecretRef{ref.project_id, ref.name, found->version},
                                 found->sealed});
  }
  return out;
}

Status OpenSecrets(SecretSealer* sealer, const std::vector<SealedVariable>& sealed,
                   AttemptLaunch& launch) {
  for (const SealedVariable& v : sealed) {
    if (sealer == nullptr) {
      return Unavailable("secret_unavailable",
                         Describe(v.variable, v.version) +
                             " cannot be opened: this process has no secret key provider");
    }
    Result<std::string> value = sealer->Open(v.version, v.sealed);
    if (!value.ok()) {
      const Status& st = value.status();
      const std::string what = Describe(v.variable, v.version) + " cannot be opened: ";
      if (st.reason() == "secret_not_found") return NotFound("secret_not_found", what + st.message());
      if (st.reason() == "secret_corrupt") return Corrupt("secret_corrupt", what + st.message());
      return Unavailable("secret_unavailable", what + st.reason() + ": " + st.message());
    }
    auto& env = launch.environment;
    env.erase(std::remove_if(env.begin(), env.end(),
                             [&](const auto& entry) { return entry.first == v.variable; }),
              env.end());
    launch.mask_values.push_back(*value);
    launch.secret_environment.emplace_back(v.variable, std::move(value).value());
  }
  return Status::Ok();
}

bool IsSecretRunError(std::string_view reason) {
  return reason == "secret_not_found" || reason == "secret_unavailable" ||
         reason == "secret_corrupt";
}

}  // namespace ql
