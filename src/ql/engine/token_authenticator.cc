#include "ql/engine/token_authenticator.h"

#include <algorithm>

#include <utility>

namespace ql {

Result<Authentication> TokenAuthenticator::Authenticate(const std::string& token_digest) {
  const int64_t now = clock_.NowMs();
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(token_digest);
    if (it != cache_.end()) {
      if (it->second.valid_until_ms > now && (!it->second.auth.token.expires_at_ms.has_value() ||
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
    // A session's idle bound counts from its last recorded use: record it often enough that a
    // session in use never idles out (a quarter of the bound, at most once a minute).
    int64_t every = kTouchEveryMs;
    if (found->token.idle_timeout_ms.has_value()) {
      every = std::max<int64_t>(1000, std::min(every, *found->token.idle_timeout_ms / 4));
    }
    auto [it, inserted] = touched_at_ms_.emplace(found->token.id, now);
    if (inserted || now - it->second >= every) {
      it->second = now;
      touch = true;
    }
  }
  // Best effort: a lost last-used time is not worth failing a request for.
  if (touch) (void)governance_.TouchToken(found->token.id, now);
  return found;
}

void TokenAuthenticator::Forget(const std::string& token_digest) {
  std::lock_guard<std::mutex> lock(mu_);
  cache_.erase(token_digest);
}

}  // namespace ql
