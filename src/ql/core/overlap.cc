#include "ql/core/overlap.h"

#include <string>

#include "ql/core/canonical_json.h"

namespace ql {

std::string_view OverlapPolicyName(OverlapPolicy policy) {
  switch (policy) {
    case OverlapPolicy::kAllow:
      return "allow";
    case OverlapPolicy::kForbid:
      return "forbid";
    case OverlapPolicy::kReplace:
      return "replace";
  }
  return "unknown";
}

Result<OverlapPolicy> ParseOverlapPolicy(std::string_view name) {
  for (OverlapPolicy p : {OverlapPolicy::kAllow, OverlapPolicy::kForbid, OverlapPolicy::kReplace}) {
    if (OverlapPolicyName(p) == name) return p;
  }
  return InvalidArgument("invalid_overlap_policy",
                         "overlap must be allow, forbid or replace, got " + QuoteForMessage(name));
}

}  // namespace ql
