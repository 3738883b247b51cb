#include "ql/oidc/id_token.h"

#include <openssl/crypto.h>

#include <cmath>
#include <string_view>

namespace ql::oidc {
namespace {

// NumericDates beyond this many seconds from the epoch (about year 5138) are refused, so the
// millisecond arithmetic below cannot overflow.
constexpr double kMaxNumericDateS = 1e11;

Status ClaimInvalid(std::string_view claim, std::string_view why) {
  return InvalidArgument("oidc_token_claim_invalid",
                         "the ID token's \"" + std::string(claim) + "\" claim " + std::string(why));
}

// Reads NumericDate claim `claim` in milliseconds: nullopt when absent, an error when it is not
// a number in range.
Result<std::optional<int64_t>> NumericDateMs(const nlohmann::json& payload, const char* claim) {
  const auto it = payload.find(claim);
  if (it == payload.end()) return std::optional<int64_t>();
  if (!it->is_number()) return ClaimInvalid(claim, "is not a number");
  const double seconds = it->get<double>();
  if (!std::isfinite(seconds) || std::fabs(seconds) > kMaxNumericDateS) {
    return ClaimInvalid(claim, "is out of range");
  }
  return std::optional<int64_t>(static_cast<int64_t>(std::floor(seconds * 1000.0)));
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

Result<std::optional<std::string>> OptionalString(const nlohmann::json& payload,
                                                  const char* claim) {
  const auto it = payload.find(claim);
  if (it == payload.end() || it->is_null()) return std::optional<std::string>();
  if (!it->is_string()) return ClaimInvalid(claim, "is not a string");
  return std::optional<std::string>(it->get<std::string>());
}

Status CheckAudience(const nlohmann::json& payload, const IdTokenExpectations& expected) {
  const auto aud = payload.find("aud");
  const auto mismatch = [&] {
    return InvalidArgument("oidc_token_audience_mismatch",
                           "the ID token's audience does not include this client");
  };
  size_t audiences = 0;
  bool found = false;
  if (aud == payload.end()) return mismatch();
  if (aud->is_string()) {
    audiences = 1;
    found = aud->get<std::string>() == expected.client_id;
  } else if (aud->is_array()) {
    for (const nlohmann::json& entry : *aud) {
      if (!entry.is_string()) return ClaimInvalid("aud", "holds an entry that is not a string");
      found = found || entry.get<std::string>() == expected.client_id;
    }
    audiences = aud->size();
  } else {
    return ClaimInvalid("aud", "is neither a string nor an array of strings");
  }
  if (!found) return mismatch();
  const auto azp = payload.find("azp");
  if (azp != payload.end()) {
    if (!azp->is_string() || azp->get<std::string>() != expected.client_id) {
      return InvalidArgument("oidc_token_azp_mismatch",
                             "the ID token's authorized party (azp) is not this client");
    }
  } else if (audiences > 1) {
    return InvalidArgument("oidc_token_azp_mismatch",
                           "the ID token has several audiences and no authorized party (azp)");
  }
  return Status::Ok();
}

Status CheckTimes(const nlohmann::json& payload, const IdTokenExpectations& expected) {
  const int64_t now = expected.now_ms;
  const int64_t leeway = expected.leeway_s * 1000;
  QL_ASSIGN_OR_RETURN(const std::optional<int64_t> exp, NumericDateMs(payload, "exp"));
  if (!exp.has_value()) return InvalidArgument("oidc_token_expired", "the ID token has no exp");
  if (*exp <= now - leeway) {
    return InvalidArgument(
        "oidc_token_expired",
        "the ID token expired " + std::to_string((now - *exp) / 1000) + " s ago");
  }
  QL_ASSIGN_OR_RETURN(const std::optional<int64_t> iat, NumericDateMs(payload, "iat"));
  if (!iat.has_value()) return InvalidArgument("oidc_token_iat_invalid", "the ID token has no iat");
  if (*iat > now + leeway) {
    return InvalidArgument(
        "oidc_token_iat_invalid",
        "the ID token was issued " + std::to_string((*iat - now) / 1000) + " s in the future");
  }
  if (*iat < now - kMaxIdTokenAgeS * 1000 - leeway) {
    return InvalidArgument("oidc_token_iat_invalid",
                           "the ID token was issued " + std::to_string((now - *iat) / 1000) +
                               " s ago; at most " + std::to_string(kMaxIdTokenAgeS) +
                               " s are accepted");
  }
  QL_ASSIGN_OR_RETURN(const std::optional<int64_t> nbf, NumericDateMs(payload, "nbf"));
  if (nbf.has_value() && *nbf > now + leeway) {
    return InvalidArgument(
        "oidc_token_not_yet_valid",
        "the ID token is not valid for another " + std::to_string((*nbf - now) / 1000) + " s");
  }
  if (expected.max_age_s.has_value()) {
    QL_ASSIGN_OR_RETURN(const std::optional<int64_t> auth_time,
                        NumericDateMs(payload, "auth_time"));
    if (!auth_time.has_value()) {
      return InvalidArgument("oidc_token_auth_too_old",
                             "max_age was requested and the ID token has no auth_time");
    }
    if (*auth_time < now - *expected.max_age_s * 1000 - leeway) {
      return InvalidArgument("oidc_token_auth_too_old",
                             "the user authenticated " + std::to_string((now - *auth_time) / 1000) +
                                 " s ago; max_age is " + std::to_string(*expected.max_age_s) +
                                 " s");
    }
  }
  return Status::Ok();
}

Result<std::vector<std::string>> Groups(const nlohmann::json& payload) {
  std::vector<std::string> groups;
  const auto it = payload.find("groups");
  if (it == payload.end() || it->is_null()) return groups;
  if (it->is_string()) {
    groups.push_back(it->get<std::string>());
    return groups;
  }
  if (!it->is_array()) return ClaimInvalid("groups", "is neither a string nor an array");
  for (const nlohmann::json& group : *it) {
    // Groups decide roles: a malformed list is refused rather than read in part.
    if (!group.is_string()) return ClaimInvalid("groups", "holds an entry that is not a string");
    groups.push_back(group.get<std::string>());
  }
  return groups;
}

}  // namespace

Result<IdTokenClaims> ValidateIdToken(const nlohmann::json& payload,
                                      const IdTokenExpectations& expected) {
  if (expected.issuer.empty() || expected.client_id.empty() || expected.nonce.empty() ||
      expected.leeway_s < 0 || (expected.max_age_s.has_value() && *expected.max_age_s < 0)) {
    return InvalidArgument("oidc_expectation_invalid",
                           "an ID token is checked against a non-empty issuer, client id and "
                           "nonce and a non-negative leeway and max_age");
  }
  if (!payload.is_object()) return ClaimInvalid("(payload)", "is not a JSON object");
  const auto iss = payload.find("iss");
  if (iss == payload.end() || !iss->is_string() || iss->get<std::string>() != expected.issuer) {
    return InvalidArgument("oidc_token_issuer_mismatch",
                           "the ID token's issuer (iss) is not the configured issuer");
  }
  QL_RETURN_IF_ERROR(CheckAudience(payload, expected));
  QL_RETURN_IF_ERROR(CheckTimes(payload, expected));
  const auto nonce = payload.find("nonce");
  if (nonce == payload.end() || !nonce->is_string() ||
      !ConstantTimeEquals(nonce->get<std::string>(), expected.nonce)) {
    return InvalidArgument("oidc_token_nonce_mismatch",
                           "the ID token's nonce is missing or not the one this sign-in sent");
  }
  const auto sub = payload.find("sub");
  if (sub == payload.end() || !sub->is_string() || sub->get<std::string>().empty() ||
      sub->get<std::string>().size() > kMaxSubjectBytes) {
    return InvalidArgument("oidc_token_sub_invalid",
                           "the ID token's subject (sub) must be a string of 1 to " +
                               std::to_string(kMaxSubjectBytes) + " bytes");
  }
  IdTokenClaims claims;
  claims.sub = sub->get<std::string>();
  QL_ASSIGN_OR_RETURN(claims.email, OptionalString(payload, "email"));
  QL_ASSIGN_OR_RETURN(claims.preferred_username, OptionalString(payload, "preferred_username"));
  QL_ASSIGN_OR_RETURN(claims.name, OptionalString(payload, "name"));
  const auto verified = payload.find("email_verified");
  claims.email_verified = verified != payload.end() &&
                          ((verified->is_boolean() && verified->get<bool>()) ||
                           (verified->is_string() && verified->get<std::string>() == "true"));
  QL_ASSIGN_OR_RETURN(claims.groups, Groups(payload));
  claims.payload = payload;
  return claims;
}

}  // namespace ql::oidc
