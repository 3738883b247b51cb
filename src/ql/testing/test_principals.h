#pragma once

// Principals for tests above the repositories (engine, daemons' stores) that need a requester
// and an approver: the installation owner is bootstrapped, then principals are added and bound.

#include <string>

#include "ql/core/clock.h"
#include "ql/core/governance.h"
#include "ql/core/governance_ports.h"
#include "ql/core/status.h"

namespace ql::testing {

class TestPrincipals {
 public:
  // `gov`, `clock` and `random` must outlive this object.
  TestPrincipals(GovernanceRepository& gov, Clock& clock, RandomSource& random);

  // Bootstraps the installation owner "root" (once per store); returns it.
  Result<PrincipalRecord> Bootstrap();

  // Creates principal `name` as root and binds `role` in `scope` (no binding for kNone).
  Result<PrincipalRecord> Add(const std::string& name, Role role, const std::string& scope);

  // Returns the bootstrapped owner.
  const PrincipalRecord& root() const { return root_; }

 private:
  std::string NewId();

  GovernanceRepository& gov_;
  Clock& clock_;
  RandomSource& random_;
  PrincipalRecord root_;
};

}  // namespace ql::testing
