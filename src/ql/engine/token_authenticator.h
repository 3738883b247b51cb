#pragma once

// Authenticates API bearer tokens against the governance store (DESIGN §9) for every API
// listener. A verified token is remembered for at most kAuthCacheMs, so a revoked token or a
// disabled principal stops working on every replica within that bound; unknown tokens are never
// cached. A token's last-used time is recorded at most once a minute, and for a session at least
// every quarter of its idle bound (so use keeps it alive).

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "ql/core/clock.h"
#include "ql/core/governance_ports.h"
#include "ql/core/status.h"

namespace ql {

class TokenAuthenticator {
 public:
  // `governance` and `clock` must outlive the authenticator. Thread-safe.
  TokenAuthenticator(GovernanceRepository& governance, Clock& clock)
      : governance_(governance), clock_(clock) {}

  // Returns the live token's principal, or PermissionDenied `unauthorized` (unknown, revoked or
  // expired token, disabled principal) with the store's reason in the message; store failures
  // are returned as they are (Unavailable, Busy, ...).
  Result<Authentication> Authenticate(const std::string& token_digest);
  // Drops what is remembered of a token, after this process changed it (a lifted restriction).
  void Forget(const std::string& token_digest);

 private:
  struct Entry {
    Authentication auth;
    int64_t valid_until_ms = 0;
  };
  static constexpr size_t kMaxEntries = 1024;
  static constexpr int64_t kTouchEveryMs = 60'000;

  GovernanceRepository& governance_;
  Clock& clock_;
  std::mutex mu_;
  std::map<std::string, Entry> cache_;              // by digest; guarded by mu_
  std::map<std::string, int64_t> touched_at_ms_;  // by token id; guarded by mu_
};

}  // namespace ql
