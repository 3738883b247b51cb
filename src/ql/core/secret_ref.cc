#include "ql/core/secret_ref.h"

#include <nlohmann/json.hpp>
#include <utility>

#include "ql/core/canonical_json.h"
#include "ql/core/ids.h"
#include "ql/core/store_commands.h"

namespace ql {
namespace {

using nlohmann::json;

bool IsNameStart(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; }

bool IsNameChar(char c) { return IsNameStart(c) || (c >= '0' && c <= '9') || c == '.' || c == '-'; }

Status Malformed(std::string_view text, std::string_view why) {
  return InvalidArgument("secret_ref_malformed",
                         "secret ref " + QuoteForMessage(text) + " " + std::string(why));
}

Status FieldType(std::string_view field, std::string_view expected, const json& value) {
  return InvalidArgument("secret_ref_field_type", "secret ref field " + std::string(field) +
                                                      " must be " + std::string(expected) +
                                                      ", got " + DescribeJsonValue(value));
}

json RefJson(const SecretRef& ref) {
  json object = {{"projectId", ref.project_id}, {"name", ref.name}};
  if (ref.version.has_value()) object["version"] = *ref.version;
  return object;
}

}  // namespace

Status ValidateSecretName(std::string_view name) {
  auto invalid = [&](std::string_view why) {
    return InvalidArgument("secret_name_invalid", "secret name " + QuoteForMessage(name) + " " +
                                                      std::string(why) +
                                                      " (allowed: [A-Za-z_][A-Za-z0-9_.-]{0,127})");
  };
  if (name.empty()) return invalid("is empty");
  if (name.size() > kMaxSecretNameChars) {
    return invalid("is longer than " + std::to_string(kMaxSecretNameChars) + " characters");
  }
  if (!IsNameStart(name.front())) return invalid("must start with a letter or '_'");
  for (char c : name) {
    if (!IsNameChar(c)) return invalid("holds a character outside letters, digits, '_', '.', '-'");
  }
  return Status::Ok();
}

Status ValidateSecretRef(const SecretRef& ref) {
  if (!IsCanonicalUuid(ref.project_id)) {
    return InvalidArgument(
        "secret_ref_project_invalid",
        "secret ref project id " + QuoteForMessage(ref.project_id) + " is not a canonical UUID");
  }
  QL_RETURN_IF_ERROR(ValidateSecretName(ref.name));
  if (ref.version.has_value() && *ref.version < 1) {
    return InvalidArgument(
        "secret_ref_version_invalid",
        "secret ref version must be at least 1, got " + std::to_string(*ref.version));
  }
  return Status::Ok();
}

Result<std::string> EncodeSecretRef(const SecretRef& ref) {
  QL_RETURN_IF_ERROR(ValidateSecretRef(ref));
  // Validated fields are ASCII and integers, so the canonical encoding cannot fail.
  return std::string(kSecretRefPrefix) +
         Base64UrlEncode(internal::CanonicalJsonLossy(RefJson(ref)));
}

bool LooksLikeSecretRef(std::string_view text) { return text.starts_with(kSecretRefPrefix); }

Result<SecretRef> DecodeSecretRef(std::string_view text) {
  if (text.size() > kMaxSecretRefBytes) {
    return Malformed(text, "is longer than " + std::to_string(kMaxSecretRefBytes) + " bytes");
  }
  if (!LooksLikeSecretRef(text)) {
    return Malformed(text, "does not start with " + std::string(kSecretRefPrefix));
  }
  std::optional<std::string> payload = Base64UrlDecode(text.substr(kSecretRefPrefix.size()));
  if (!payload.has_value() || payload->empty()) {
    return Malformed(text, "does not carry unpadded base64url after the prefix");
  }
  Result<json> parsed = ParseJsonStrict(*payload);
  if (!parsed.ok() || !parsed->is_object()) {
    return Malformed(text, "does not carry a JSON object");
  }
  const json& object = *parsed;
  for (const auto& [key, value] : object.items()) {
    if (key != "projectId" && key != "name" && key != "version") {
      return InvalidArgument("secret_ref_unknown_field",
                             "secret ref has unknown field " + QuoteForMessage(key));
    }
  }
  SecretRef ref;
  for (const char* field : {"projectId", "name"}) {
    auto it = object.find(field);
    if (it == object.end()) {
      return InvalidArgument("secret_ref_field_type",
                             "secret ref lacks the field " + std::string(field));
    }
    if (!it->is_string()) return FieldType(field, "a string", *it);
  }
  ref.project_id = object.at("projectId").get<std::string>();
  ref.name = object.at("name").get<std::string>();
  if (auto it = object.find("version"); it != object.end()) {
    if (!it->is_number_integer()) return FieldType("version", "an integer", *it);
    ref.version = it->get<int64_t>();
  }
  QL_RETURN_IF_ERROR(ValidateSecretRef(ref));
  if (internal::CanonicalJsonLossy(object) != *payload) {
    return InvalidArgument(
        "secret_ref_not_canonical",
        "secret ref " + QuoteForMessage(text) + " is not in canonical form; write it as " +
            std::string(kSecretRefPrefix) + Base64UrlEncode(internal::CanonicalJsonLossy(object)));
  }
  return ref;
}

}  // namespace ql
