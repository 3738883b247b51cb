#include "ql/testing/test_principals.h"

#include "ql/core/digest.h"
#include "ql/core/ids.h"

namespace ql::testing {

TestPrincipals::TestPrincipals(GovernanceRepository& gov, Clock& clock, RandomSource& random)
    : gov_(gov), clock_(clock), random_(random) {}

std::string TestPrincipals::NewId() { return NewUuidV7(clock_.NowMs(), random_); }

Result<PrincipalRecord> TestPrincipals::Bootstrap() {
  BootstrapCommand cmd;
  cmd.principal_id = NewId();
  cmd.name = "root";
  cmd.token_id = NewId();
  cmd.token_digest = Sha256Hex("token-of-root-" + cmd.principal_id);
  cmd.mutation_id = "bootstrap:" + cmd.principal_id;
  cmd.now_ms = clock_.NowMs();
  QL_ASSIGN_OR_RETURN(BootstrapResult booted, gov_.Bootstrap(cmd));
  root_ = booted.principal;
  return root_;
}

Result<PrincipalRecord> TestPrincipals::Add(const std::string& name, Role role,
                                            const std::string& scope) {
  CreatePrincipalCommand create;
  create.actor = Actor{root_.id, "add-" + name};
  create.id = NewId();
  create.name = name;
  create.now_ms = clock_.NowMs();
  QL_ASSIGN_OR_RETURN(PrincipalRecord principal, gov_.CreatePrincipal(create));
  if (role == Role::kNone) return principal;
  WriteBindingCommand bind;
  bind.actor = Actor{root_.id, "bind-" + name};
  bind.scope = scope;
  bind.subject_id = principal.id;
  bind.role = std::string(RoleName(role));
  bind.mutation_id = NewId();
  bind.now_ms = clock_.NowMs();
  QL_RETURN_IF_ERROR(gov_.WriteBinding(bind).status());
  return principal;
}

}  // namespace ql::testing
