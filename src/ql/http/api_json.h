#pragma once

// Wire codecs of the HTTP API: records to JSON objects (snake_case fields, times as RFC 3339
// UTC strings, absent values as null) and strict readers for request bodies. Shared by the
// server and any client that wants the same shapes.

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ql/core/placement_ports.h"
#include "ql/core/records.h"
#include "ql/core/secret_store.h"
#include "ql/core/status.h"
#include "ql/core/timezone.h"
#include "ql/engine/control_service.h"
#include "ql/engine/governance_service.h"

namespace ql::api {

// Returns the HTTP status of a failure category: InvalidArgument 400, NotFound 404,
// Conflict and Duplicate 409, Busy, Unavailable and OutcomeUnknown 503, Corrupt and Internal
// 500 (ok maps to 200).
int HttpStatusFor(StatusCode code);

// Returns {"code": code, "message": message}.
nlohmann::json ErrorJson(std::string_view code, std::string_view message);

// Returns `ms` as RFC 3339 UTC ("2026-03-08T07:00:00Z"), or null when absent.
nlohmann::json TimeJson(std::optional<int64_t> ms);
// Placement (placement_ports.h): {"reason","pool","labels","detail"}.
nlohmann::json WaitingJson(const WaitingReason& waiting);
nlohmann::json PoolGrantJson(const PoolGrantRecord& grant);
nlohmann::json PoolJson(const PoolRecord& pool);
nlohmann::json WorkerJson(const WorkerRecord& worker);

nlohmann::json ProjectJson(const ProjectRecord& project);
nlohmann::json PrincipalJson(const PrincipalRecord& principal);
// A token's record: never its secret nor its digest.
nlohmann::json TokenJson(const TokenRecord& token);
nlohmann::json BindingJson(const BindingView& binding);
nlohmann::json BindingJson(const RoleBindingRecord& binding);
nlohmann::json AuditJson(const AuditRecord& fact);
nlohmann::json WhoAmIJson(const WhoAmI& who);
// A task with its current revision: id, project_id, revision, name, kind, spec, labels,
// enabled, retry (null for a disabled revision), content_digest, mutation_id, created_at,
// updated_at, revision_created_at.
nlohmann::json TaskJson(const TaskView& task);
// One revision of a task's history.
nlohmann::json TaskRevisionJson(const TaskRevisionRecord& revision);
// A trigger with its current revision, state, pin staleness and next fire time.
nlohmann::json TriggerJson(const TriggerView& trigger);
// A run without its attempts.
nlohmann::json RunJson(const RunRecord& run);
// A run with an `attempts` array.
nlohmann::json RunJson(const RunView& run);
nlohmann::json AttemptJson(const AttemptRecord& attempt);
nlohmann::json EventJson(const EventRecord& event);
nlohmann::json StatusJson(const StatusSummary& status);
// An approval request: id, project_id, action, task_id, task_revision, task_digest,
// execution_revision_id, priority, idempotency_key, payload_digest, requester_id,
// requester_binding_version, approver_role, status, created_at, expires_at, decided_at.
nlohmann::json ApprovalRequestJson(const ApprovalRequestRecord& request);
// A request with `decision`, `action` and `receipt` (each null until it exists).
nlohmann::json ApprovalJson(const ApprovalView& view);
// The 202 answer of a run that needs approval: {"code": "approval_required", "message",
// "approval_id", "approval": ApprovalRequestJson}.
nlohmann::json ApprovalRequiredJson(const ApprovalRequestRecord& request);
// A resolution with the resolved run and the retry's new run (null unless a retry).
nlohmann::json ResolutionJson(const ResolveRunResult& resolved);
// Returns a secret's name, project, current version, status and times; never a value.
nlohmann::json SecretJson(const SecretRecord& secret);
// Returns [{"at": UTC time, "local": the same instant in `zone` with its offset}, ...].
nlohmann::json FireTimesJson(const std::vector<int64_t>& times_ms, const TimeZone& zone);

// Parses a request body as one strict JSON object. An empty body is {} when `required` is
// false. Errors (InvalidArgument): invalid_json (empty when required, not JSON, or not an
// object), and the strict parser's json_invalid_utf8, json_duplicate_key, json_too_deep,
// json_number_unsupported.
Result<nlohmann::json> ParseBody(std::string_view text, bool required);

// Returns InvalidArgument unknown_field naming the first field of `body` not in `allowed`.
Status CheckFields(const nlohmann::json& body, std::initializer_list<std::string_view> allowed);

// Typed field readers for a JSON object body. A present field of the wrong type (including
// null) is InvalidArgument invalid_type; a missing required field is missing_field.
Result<std::optional<std::string>> OptionalString(const nlohmann::json& body,
                                                  std::string_view name);
Result<std::string> RequiredString(const nlohmann::json& body, std::string_view name);
Result<std::optional<int64_t>> OptionalInteger(const nlohmann::json& body, std::string_view name);
Result<std::optional<bool>> OptionalBool(const nlohmann::json& body, std::string_view name);

}  // namespace ql::api
