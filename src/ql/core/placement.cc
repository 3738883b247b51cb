#include "ql/core/placement.h"

#include <utility>

#include "ql/core/canonical_json.h"

namespace ql {
namespace {

using nlohmann::json;

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool IsAlnum(char c) { return IsLowerAlnum(c) || (c >= 'A' && c <= 'Z'); }

Status Invalid(std::string_view reason, std::string_view path, std::string_view what) {
  return InvalidArgument(std::string(reason), std::string(path) + ": " + std::string(what));
}

std::string Field(std::string_view base, std::string_view key) {
  return std::string(base) + "." + std::string(key);
}

}  // namespace

Status ValidatePoolName(std::string_view reason, std::string_view path, std::string_view name) {
  bool ok = !name.empty() && name.size() <= 63 && IsLowerAlnum(name[0]);
  for (char c : name) ok = ok && (IsLowerAlnum(c) || c == '_' || c == '-');
  if (ok) return Status::Ok();
  return Invalid(reason, path,
                 QuoteForMessage(name) +
                     " is not a pool name (1..63 of a-z, 0-9, '_' and '-', starting with a "
                     "letter or digit)");
}

Status ValidatePlacementLabel(std::string_view reason, std::string_view path, std::string_view key,
                              std::string_view value) {
  bool key_ok = !key.empty() && key.size() <= 63 && IsLowerAlnum(key[0]);
  for (char c : key)
    key_ok = key_ok && (IsLowerAlnum(c) || c == '.' || c == '_' || c == '/' || c == '-');
  if (!key_ok) {
    return Invalid(reason, path,
                   "label key " + QuoteForMessage(key) +
                       " is not 1..63 of a-z, 0-9, '.', '_', '/' and '-' starting with a letter "
                       "or digit");
  }
  bool value_ok = !value.empty() && value.size() <= 128;
  for (char c : value) {
    value_ok = value_ok &&
               (IsAlnum(c) || c == '.' || c == '_' || c == ':' || c == '/' || c == '+' || c == '-');
  }
  if (!value_ok) {
    return Invalid(reason, path,
                   "label " + std::string(key) + " has value " + QuoteForMessage(value) +
                       ", not 1..128 of A-Z, a-z, 0-9, '.', '_', ':', '/', '+' and '-'");
  }
  return Status::Ok();
}

Result<std::map<std::string, std::string>> ParsePlacementLabels(std::string_view reason,
                                                                std::string_view path,
                                                                const json& labels) {
  if (!labels.is_object()) {
    return Invalid(reason, path, "expected an object of labels, got " + DescribeJsonValue(labels));
  }
  if (labels.size() > static_cast<size_t>(kMaxPlacementLabels)) {
    return Invalid(
        reason, path,
        std::to_string(labels.size()) + " labels, at most " + std::to_string(kMaxPlacementLabels));
  }
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : labels.items()) {
    if (!value.is_string()) {
      return Invalid(reason, Field(path, key),
                     "expected a string, got " + DescribeJsonValue(value));
    }
    const std::string text = value.get<std::string>();
    QL_RETURN_IF_ERROR(ValidatePlacementLabel(reason, Field(path, key), key, text));
    out.emplace(key, text);
  }
  return out;
}

Result<Placement> ParsePlacement(const json& value, std::string_view path) {
  if (!value.is_object()) {
    return Invalid("spec_invalid_type", path,
                   "expected an object, got " + DescribeJsonValue(value));
  }
  for (const auto& [key, unused] : value.items()) {
    if (key != "pool" && key != "labels") {
      return Invalid("spec_unknown_field", Field(path, key),
                     "unknown field (allowed: pool, labels)");
    }
  }
  Placement out;
  if (value.contains("pool")) {
    const json& pool = value.at("pool");
    if (!pool.is_string()) {
      return Invalid("spec_invalid_type", Field(path, "pool"),
                     "expected a string, got " + DescribeJsonValue(pool));
    }
    out.pool = pool.get<std::string>();
    QL_RETURN_IF_ERROR(ValidatePoolName("spec_invalid_placement", Field(path, "pool"), out.pool));
  }
  if (value.contains("labels")) {
    QL_ASSIGN_OR_RETURN(
        out.labels,
        ParsePlacementLabels("spec_invalid_placement", Field(path, "labels"), value.at("labels")));
  }
  return out;
}

json PlacementToJson(const Placement& placement) {
  json out = {{"pool", placement.pool}};
  if (!placement.labels.empty()) out["labels"] = placement.labels;
  return out;
}

Result<std::pair<std::string, std::string>> ParseLabelAssignment(std::string_view reason,
                                                                 std::string_view text) {
  const size_t eq = text.find('=');
  if (eq == std::string_view::npos) {
    return InvalidArgument(std::string(reason),
                           "label " + QuoteForMessage(text) + " is not KEY=VALUE");
  }
  std::pair<std::string, std::string> out{std::string(text.substr(0, eq)),
                                          std::string(text.substr(eq + 1))};
  QL_RETURN_IF_ERROR(ValidatePlacementLabel(reason, "label", out.first, out.second));
  return out;
}

std::string DescribePlacement(const Placement& placement) {
  std::string out = "pool " + placement.pool;
  if (!placement.labels.empty()) {
    out += ", labels ";
    bool first = true;
    for (const auto& [key, value] : placement.labels) {
      if (!first) out += ",";
      first = false;
      out += key + "=" + value;
    }
  }
  return out;
}

}  // namespace ql
