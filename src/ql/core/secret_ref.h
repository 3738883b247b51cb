#pragma once

// SecretRefs: the only form in which a task spec, a plan or an API answer names a secret. A ref
// is `qlsecret:v1:` followed by the unpadded base64url of the canonical JSON
// {"name":NAME,"projectId":UUID[,"version":N]}; without a version it means the secret's current
// version. Every ref has exactly one spelling, so refs compare equal as strings.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "ql/core/status.h"

namespace ql {

inline constexpr std::string_view kSecretRefPrefix = "qlsecret:v1:";
// A secret name is [A-Za-z_][A-Za-z0-9_.-]{0,127}: safe in a URL path segment, a log line and a
// shell word, and never mistaken for a ref or an option.
inline constexpr size_t kMaxSecretNameChars = 128;
// Longer texts are refused before they are decoded; the longest valid ref is about 300 bytes.
inline constexpr size_t kMaxSecretRefBytes = 1024;

// Names one secret of one project, at a pinned version or (nullopt) its current one.
struct SecretRef {
  std::string project_id;  // canonical UUID
  std::string name;
  std::optional<int64_t> version;  // >= 1 when set

  bool operator==(const SecretRef&) const = default;
};

// Returns ok when `name` is a valid secret name; otherwise InvalidArgument `secret_name_invalid`
// with a message that quotes the name and says which rule it breaks.
Status ValidateSecretName(std::string_view name);

// Returns ok when `ref` has a canonical UUID project id (`secret_ref_project_invalid`), a valid
// name (`secret_name_invalid`) and a version >= 1 when set (`secret_ref_version_invalid`); every
// error is InvalidArgument and names the offending value.
Status ValidateSecretRef(const SecretRef& ref);

// Returns the canonical text of `ref`. Errors: those of ValidateSecretRef.
Result<std::string> EncodeSecretRef(const SecretRef& ref);

// Parses a ref written by EncodeSecretRef. Errors, all InvalidArgument:
//   `secret_ref_malformed`       no `qlsecret:v1:` prefix, longer than kMaxSecretRefBytes, not
//                                unpadded base64url, or the payload is not a strict JSON object;
//   `secret_ref_unknown_field`   a key other than projectId, name and version (named);
//   `secret_ref_field_type`      a field of the wrong JSON type, or projectId/name missing;
//   `secret_ref_not_canonical`   the payload is valid but not its canonical encoding (key order,
//                                whitespace, escapes), so a second spelling of a ref is refused;
// and those of ValidateSecretRef for the decoded fields.
Result<SecretRef> DecodeSecretRef(std::string_view text);

// Returns true when `text` starts with the ref prefix (a spec entry meant as a ref, valid or not).
bool LooksLikeSecretRef(std::string_view text);

}  // namespace ql
