#include "ql/engine/token_authenticator.h"

#include <utility>

namespace ql {

Result<Authentication> TokenAuthenticator::Authenticate(const std::string& token_digest) {
  const int64_t now = clock_.NowMs();
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(token_digest);
    if (it != cache_.end()) {
      if (it->second.valid_until_ms > now &&
          (!it->second.auth.token.expires_at_ms.has_value() ||
           *it->second.auth.token.expires_at_ms > now)) {
        return it->second.auth;
      }
      cache_.erase(it);
    }
  }
  Result<Authentication> found = governance_.Authenticate(token_digest, now);
  if (!found.ok()) {
    const StatusCode code = found.status().code();
    if (code == StatusCode::kNotFound || code == StatusCode::kConflict ||
        code == StatusCode::kInvalidArgument) {
      return PermissionDenied("unauthorized", found.status().message());
    }
    return found.status();
  }
  bool touch = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cache_.size() >= kMaxEntries) cache_.clear();
    cache_[token_digest] = Entry{*found, now + kAuthCacheMs};
    if (touched_at_ms_.size() >= kMaxEntries) touched_at_ms_.clear();
    auto [it, inserted] = touched_at_ms_.emplace(found->token.id, now);
    if (inserted || now - it->second >= kTouchEveryMs) {
      it->second = now;
      touch = true;
    }
  }
  // Best effort: a lost last-used time is not worth failing a request for.
  if (touch) (void)governance_.TouchToken(found->token.id, now);
  return found;
}

}  // namespace ql
