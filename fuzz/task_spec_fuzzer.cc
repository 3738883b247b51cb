// Feeds the input as a JSON document (read with ParseJsonStrict, as the API reads bodies) to
// ParseTaskContent as a task publish body, to ParseCommandSpec as a `qinglong/command@v1` spec
// (the document itself and its "spec" field), and to ParseRetryPolicy / ParseApprovalPolicy /
// ParseTaskLimits with its "retry", "approval" and "spec"."limits" fields (task_spec.h).
//
// Invariants:
// - every refusal is InvalidArgument with a reason of the documented family (spec_*, task_*,
//   retry_*, approval_*, invalid_concurrency) and a UTF-8 message;
// - an accepted spec is normalised and valid (ValidateCommandSpec), obeys the documented bounds
//   (absolute paths, at most 256 arguments and variables, sorted unique allowed names, a timeout
//   in range, canonical SecretRefs that encode back to the same text), its JSON form has a
//   strict canonical encoding of at most 64 KiB, and ParseCommandSpec(CommandSpecToJson(s)) == s;
// - an accepted task reads back the same from TaskContentToJson and from its canonical text,
//   and its canonical text and digest do not depend on how the input was spelt;
// - retry, approval and limits policies read back the same from their JSON forms.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "fuzz_check.h"
#include "ql/core/approval.h"
#include "ql/core/canonical_json.h"
#include "ql/core/retry_policy.h"
#include "ql/core/secret_ref.h"
#include "ql/core/task_spec.h"

namespace {

using nlohmann::json;

void CheckError(const ql::Status& status, std::initializer_list<std::string_view> families) {
  QL_FUZZ_CHECK(status.code() == ql::StatusCode::kInvalidArgument, status.ToString());
  bool known = false;
  for (std::string_view family : families) known = known || status.reason().starts_with(family);
  QL_FUZZ_CHECK(known, status.ToString());
  QL_FUZZ_CHECK(ql::IsValidUtf8(status.message()), status.message());
}

bool IsAbsolute(const std::string& path) {
  return !path.empty() && path[0] == '/' && path.size() <= ql::kMaxPathBytes &&
         path.find('\0') == std::string::npos;
}

void CheckSpec(const ql::CommandSpec& spec) {
  if (const auto* argv = std::get_if<ql::ArgvCommand>(&spec.command)) {
    QL_FUZZ_CHECK(IsAbsolute(argv->file), argv->file);
    QL_FUZZ_CHECK(argv->args.size() <= ql::kMaxCommandArgs, "too many arguments");
    for (const std::string& arg : argv->args) {
      QL_FUZZ_CHECK(ql::IsValidUtf8(arg) && arg.find('\0') == std::string::npos, arg);
    }
  } else {
    const auto& shell = std::get<ql::ShellCommand>(spec.command);
    QL_FUZZ_CHECK(!shell.command.empty() && shell.command.find('\0') == std::string::npos,
                  shell.command);
    QL_FUZZ_CHECK(shell.shell == "/bin/sh" || shell.shell == "/bin/bash", shell.shell);
  }
  QL_FUZZ_CHECK(spec.environment.size() <= ql::kMaxEnvironmentEntries, "too many variables");
  for (size_t i = 0; i < spec.environment.size(); ++i) {
    const auto& [name, value] = spec.environment[i];
    QL_FUZZ_CHECK(ql::IsAllowedEnvName(name), name);
    QL_FUZZ_CHECK(i == 0 || spec.environment[i - 1].first < name, name);
    QL_FUZZ_CHECK(ql::IsValidUtf8(value) && value.find('\0') == std::string::npos, value);
    if (ql::LooksLikeSecretRef(value)) {
      const ql::Result<ql::SecretRef> ref = ql::DecodeSecretRef(value);
      QL_FUZZ_CHECK(ref.ok(), value);
      const ql::Result<std::string> encoded = ql::EncodeSecretRef(*ref);
      QL_FUZZ_CHECK(encoded.ok() && *encoded == value, "a SecretRef with a second spelling");
    }
  }
  QL_FUZZ_CHECK(ql::SecretEnvironment(spec.environment).ok(), "secret environment");
  if (spec.working_directory) {
    QL_FUZZ_CHECK(IsAbsolute(*spec.working_directory), *spec.working_directory);
  }
  QL_FUZZ_CHECK(spec.timeout_ms >= ql::kMinTimeoutMs && spec.timeout_ms <= ql::kMaxTimeoutMs,
                std::to_string(spec.timeout_ms));
  QL_FUZZ_CHECK(!(spec.unconfined && !spec.network), "isolation none with network none");

  const ql::Status valid = ql::ValidateCommandSpec(spec);
  QL_FUZZ_CHECK(valid.ok(), valid.ToString());
  const json form = ql::CommandSpecToJson(spec);
  const ql::Result<std::string> canonical = ql::CanonicalJson(form);
  QL_FUZZ_CHECK(canonical.ok(), canonical.status().ToString());
  QL_FUZZ_CHECK(canonical->size() <= ql::kMaxSpecCanonicalBytes, "spec over 64 KiB accepted");
  QL_FUZZ_CHECK(ql::internal::CanonicalJsonLossy(form) == *canonical, *canonical);
  const ql::Result<ql::CommandSpec> again = ql::ParseCommandSpec(form);
  QL_FUZZ_CHECK(again.ok() && *again == spec, *canonical);
}

void CheckCommandSpec(const json& doc) {
  const ql::Result<ql::CommandSpec> spec = ql::ParseCommandSpec(doc);
  if (!spec.ok()) {
    CheckError(spec.status(), {"spec_"});
    return;
  }
  CheckSpec(*spec);
}

void CheckTask(const json& doc) {
  const ql::Result<ql::TaskContent> task = ql::ParseTaskContent(doc);
  if (!task.ok()) {
    CheckError(task.status(), {"task_", "spec_", "retry_", "approval_", "invalid_concurrency"});
    return;
  }
  CheckSpec(task->spec);
  QL_FUZZ_CHECK(
      ql::ValidateObjectName("task_invalid_name", "name", task->name, ql::kMaxTaskNameChars).ok(),
      task->name);
  QL_FUZZ_CHECK(task->labels.size() <= ql::kMaxLabels, "too many labels");
  const json form = ql::TaskContentToJson(*task);
  const ql::Result<ql::TaskContent> again = ql::ParseTaskContent(form);
  QL_FUZZ_CHECK(again.ok() && *again == *task,
                form.dump(-1, ' ', false, json::error_handler_t::replace));

  const std::string canonical = ql::TaskContentCanonical(*task);
  const ql::Result<std::string> strict = ql::CanonicalJson(form);
  QL_FUZZ_CHECK(strict.ok() && *strict == canonical, canonical);
  const ql::Result<json> reparsed = ql::ParseJsonStrict(canonical);
  QL_FUZZ_CHECK(reparsed.ok(), canonical);
  const ql::Result<ql::TaskContent> from_text = ql::ParseTaskContent(*reparsed);
  QL_FUZZ_CHECK(from_text.ok() && *from_text == *task, canonical);
  QL_FUZZ_CHECK(ql::TaskContentCanonical(*from_text) == canonical, canonical);
  QL_FUZZ_CHECK(ql::TaskContentDigest(*from_text) == ql::TaskContentDigest(*task), canonical);
}

void CheckPolicies(const json& doc) {
  if (!doc.is_object()) return;
  if (auto it = doc.find("retry"); it != doc.end()) {
    const ql::Result<ql::RetryPolicy> retry = ql::ParseRetryPolicy(*it);
    if (retry.ok()) {
      const ql::Result<ql::RetryPolicy> again = ql::ParseRetryPolicy(ql::RetryPolicyToJson(*retry));
      QL_FUZZ_CHECK(again.ok() && *again == *retry, it->dump());
      QL_FUZZ_CHECK(retry->max_attempts >= 1 && retry->backoff_max_ms >= retry->backoff_base_ms,
                    it->dump());
    } else {
      CheckError(retry.status(), {"retry_"});
    }
  }
  if (auto it = doc.find("approval"); it != doc.end()) {
    const ql::Result<ql::ApprovalPolicy> approval = ql::ParseApprovalPolicy(*it);
    if (approval.ok()) {
      const ql::Result<ql::ApprovalPolicy> again =
          ql::ParseApprovalPolicy(ql::ApprovalPolicyToJson(*approval));
      QL_FUZZ_CHECK(again.ok() && *again == *approval, it->dump());
    } else {
      CheckError(approval.status(), {"approval_"});
    }
  }
  if (auto spec = doc.find("spec"); spec != doc.end() && spec->is_object()) {
    if (auto it = spec->find("limits"); it != spec->end()) {
      const ql::Result<ql::TaskLimits> limits = ql::ParseTaskLimits(*it, "spec.limits");
      if (limits.ok()) {
        const ql::Result<ql::TaskLimits> again =
            ql::ParseTaskLimits(ql::TaskLimitsToJson(*limits), "spec.limits");
        QL_FUZZ_CHECK(again.ok() && *again == *limits, it->dump());
      } else {
        CheckError(limits.status(), {"spec_"});
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const ql::Result<json> doc = ql::ParseJsonStrict(text);
  if (!doc.ok()) return 0;
  CheckTask(*doc);
  CheckCommandSpec(*doc);
  if (doc->is_object()) {
    if (auto it = doc->find("spec"); it != doc->end()) CheckCommandSpec(*it);
  }
  CheckPolicies(*doc);
  return 0;
}
