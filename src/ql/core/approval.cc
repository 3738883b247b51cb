#include "ql/core/approval.h"

#include <string>

#include "ql/core/canonical_json.h"
#include "ql/core/digest.h"

namespace ql {
namespace {

using nlohmann::json;

Status ApprovalError(std::string_view reason, std::string_view field, const std::string& what) {
  return InvalidArgument(std::string(reason), "approval." + std::string(field) + ": " + what);
}

}  // namespace

Result<ApprovalPolicy> ParseApprovalPolicy(const json& value) {
  if (!value.is_object()) {
    return InvalidArgument("approval_invalid_type",
                           "approval: must be an object, got " + DescribeJsonValue(value));
  }
  ApprovalPolicy out;
  for (const auto& [key, field] : value.items()) {
    if (key == "required") {
      if (!field.is_boolean()) {
        return ApprovalError("approval_invalid_type", key,
                             "must be a boolean, got " + DescribeJsonValue(field));
      }
      out.required = field.get<bool>();
    } else if (key == "approver_role") {
      if (!field.is_string()) {
        return ApprovalError("approval_invalid_type", key,
                             "must be a string, got " + DescribeJsonValue(field));
      }
      const std::string& name = field.get_ref<const std::string&>();
      if (name == RoleName(Role::kAdmin)) {
        out.approver_role = Role::kAdmin;
      } else if (name == RoleName(Role::kOwner)) {
        out.approver_role = Role::kOwner;
      } else {
        return ApprovalError("approval_invalid_role", key,
                             QuoteForMessage(name) + " is not admin or owner");
      }
    } else if (key == "ttl_ms") {
      if (!field.is_number_integer()) {
        return ApprovalError("approval_invalid_type", key,
                             "must be an integer, got " + DescribeJsonValue(field));
      }
      const int64_t ttl = field.get<int64_t>();
      if (ttl < kMinApprovalTtlMs || ttl > kMaxApprovalTtlMs) {
        return ApprovalError("approval_ttl_out_of_range", key,
                             std::to_string(ttl) + " is outside " +
                                 std::to_string(kMinApprovalTtlMs) + " .. " +
                                 std::to_string(kMaxApprovalTtlMs) + " ms (1 second .. 30 days)");
      }
      out.ttl_ms = ttl;
    } else {
      return ApprovalError("approval_unknown_field", key,
                           "unknown field of an approval policy (known: required, "
                           "approver_role, ttl_ms)");
    }
  }
  return out;
}

json ApprovalPolicyToJson(const ApprovalPolicy& policy) {
  return json{{"approver_role", std::string(RoleName(policy.approver_role))},
              {"required", policy.required},
              {"ttl_ms", policy.ttl_ms}};
}

Result<std::optional<ApprovalPolicy>> RequiredApproval(const TaskRevisionRecord& revision) {
  if (!revision.approval_json.has_value()) return std::optional<ApprovalPolicy>();
  Result<json> parsed = ParseJsonStrict(*revision.approval_json);
  Result<ApprovalPolicy> policy =
      parsed.ok() ? ParseApprovalPolicy(*parsed) : Result<ApprovalPolicy>(parsed.status());
  if (!policy.ok()) {
    return Corrupt("approval_policy_invalid", "task " + revision.task_id + " revision " +
                                                  std::to_string(revision.revision) +
                                                  ": stored approval policy: " +
                                                  policy.status().message());
  }
  if (!policy->required) return std::optional<ApprovalPolicy>();
  return std::optional<ApprovalPolicy>(*policy);
}

Status ValidateApprovalStatus(std::string_view status) {
  if (status == kApprovalPending || status == kApprovalApproved || status == kApprovalRejected ||
      status == kApprovalExpired) {
    return Status::Ok();
  }
  return InvalidArgument("invalid_status", "approval status " + QuoteForMessage(status) +
                                               " is not pending, approved, rejected or expired");
}

std::string ApprovalPayloadCanonical(const ApprovalRequestRecord& r) {
  json payload = {{"action", r.action},
                  {"execution_revision_id", r.execution_revision_id},
                  {"priority", r.priority},
                  {"project_id", r.project_id},
                  {"task_digest", r.task_digest},
                  {"task_id", r.task_id},
                  {"task_revision", r.task_revision}};
  if (r.idempotency_key.has_value()) payload["idempotency_key"] = *r.idempotency_key;
  if (r.retry_of_run_id.has_value()) payload["retry_of_run_id"] = *r.retry_of_run_id;
  return internal::CanonicalJsonLossy(payload);
}

std::string ApprovalPayloadDigest(std::string_view payload) {
  return DomainDigest("qinglong/approval-action@v1", payload);
}

Status ValidateApprovalReason(std::string_view reason) {
  if (reason.empty() || !IsValidUtf8(reason)) {
    return InvalidArgument("invalid_reason", "reason must be a non-empty UTF-8 string, got " +
                                                 QuoteForMessage(reason));
  }
  size_t chars = 0;
  for (unsigned char c : reason) {
    if ((c & 0xc0) != 0x80) ++chars;
    if (c < 0x20 || c == 0x7f) {
      return InvalidArgument("invalid_reason",
                             "reason " + QuoteForMessage(reason) + " contains a control character");
    }
  }
  if (chars > kMaxApprovalReasonChars) {
    return InvalidArgument("invalid_reason", "reason must be at most " +
                                                 std::to_string(kMaxApprovalReasonChars) +
                                                 " characters, got " + std::to_string(chars));
  }
  return Status::Ok();
}

}  // namespace ql
