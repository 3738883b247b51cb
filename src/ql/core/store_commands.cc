#include "ql/core/store_commands.h"

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ql/core/canonical_json.h"
#include "ql/core/digest.h"
#include "ql/core/execution_plan.h"
#include "ql/core/ids.h"
#include "ql/core/jitter.h"
#include "ql/core/overlap.h"
#include "ql/core/task_spec.h"

namespace ql {

std::string Cat(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (std::string_view part : parts) out.append(part);
  return out;
}

std::string Quote(std::string_view value) { return QuoteForMessage(value); }

// ---------------------------------------------------------------------------------------------
// Validation of commands

Status RequireText(std::string_view field, std::string_view value) {
  if (value.empty()) return InvalidArgument("missing_field", Cat({field, " is empty"}));
  return Status();
}

Status RequireDigest(std::string_view field, std::string_view value) {
  if (!IsSha256Hex(value)) {
    return InvalidArgument("invalid_digest",
                           Cat({field, " must be 64 lowercase hex digits, got ", Quote(value)}));
  }
  return Status();
}

Status RequireRevision(std::string_view field, int64_t revision) {
  if (revision < 1 || revision > kMaxTaskRevision) {
    return InvalidArgument("invalid_revision", Cat({field, " must be 1 .. 2147483647, got ",
                                                    std::to_string(revision)}));
  }
  return Status();
}

Status RequireLimit(std::string_view field, int limit) {
  if (limit < 1 || limit > kMaxListLimit) {
    return InvalidArgument("invalid_limit",
                           Cat({field, " must be 1 .. ", std::to_string(kMaxListLimit), ", got ",
                                std::to_string(limit)}));
  }
  return Status();
}

Status RequireCanonicalJson(std::string_view field, std::string_view text, bool object) {
  Result<nlohmann::json> parsed = ParseJsonStrict(text);
  if (!parsed.ok()) {
    return InvalidArgument("invalid_json", Cat({field, ": ", parsed.status().message()}));
  }
  if (object && !parsed->is_object()) {
    return InvalidArgument(
        "invalid_json", Cat({field, " must be a JSON object, got ", DescribeJsonValue(*parsed)}));
  }
  Result<std::string> canonical = CanonicalJson(*parsed);
  if (!canonical.ok()) {
    return InvalidArgument("invalid_json", Cat({field, ": ", canonical.status().message()}));
  }
  if (*canonical != text) {
    return InvalidArgument("json_not_canonical",
                           Cat({field,
                                " is not in canonical JSON form (sorted keys, no "
                                "insignificant whitespace)"}));
  }
  return Status();
}

Result<std::string> CanonicalEventPayload(std::string_view type, std::string_view payload) {
  Result<nlohmann::json> parsed = ParseJsonStrict(payload);
  if (!parsed.ok()) {
    return InvalidArgument("event_payload_invalid", Cat({"payload of event ", Quote(type), ": ",
                                                         parsed.status().message()}));
  }
  if (!parsed->is_object()) {
    return InvalidArgument("event_payload_invalid",
                           Cat({"payload of event ", Quote(type), " must be a JSON object, got ",
                                DescribeJsonValue(*parsed)}));
  }
  Result<std::string> canonical = CanonicalJson(*parsed);
  if (!canonical.ok()) {
    return InvalidArgument("event_payload_invalid", Cat({"payload of event ", Quote(type), ": ",
                                                         canonical.status().message()}));
  }
  if (canonical->size() > kMaxEventPayloadBytes) {
    return InvalidArgument(
        "event_payload_too_large",
        Cat({"payload of event ", Quote(type), " is ", std::to_string(canonical->size()),
             " bytes in canonical form; at most ", std::to_string(kMaxEventPayloadBytes),
             " are allowed"}));
  }
  return std::move(canonical).value();
}

Status RequireExecutorType(std::string_view value) {
  if (!ParseExecutorType(value).has_value()) {
    return InvalidArgument(
        "invalid_executor_type",
        Cat({"executor type must be local_process or remote_worker, got ", Quote(value)}));
  }
  return Status();
}

Status RequireActorType(std::string_view value) {
  if (!ParseActorType(value).has_value()) {
    return InvalidArgument("invalid_actor_type",
                           Cat({"actor type must be scheduler, dispatcher, executor, user, worker "
                                "or recovery, got ",
                                Quote(value)}));
  }
  return Status();
}

Status RequireRetryPolicy(const RetryPolicy& policy) {
  constexpr int64_t kDayMs = 24LL * 3600 * 1000;
  if (policy.max_attempts < 1 || policy.max_attempts > 16) {
    return InvalidArgument("invalid_retry_policy",
                           Cat({"retry policy max_attempts must be 1 .. 16, got ",
                                std::to_string(policy.max_attempts)}));
  }
  if (policy.safety != "unknown" && policy.safety != "idempotent" &&
      policy.safety != "deduplicated") {
    return InvalidArgument("invalid_retry_policy",
                           Cat({"retry policy safety must be unknown, idempotent or deduplicated, "
                                "got ",
                                Quote(policy.safety)}));
  }
  if (policy.backoff_base_ms < 0 || policy.backoff_base_ms > kDayMs ||
      policy.backoff_max_ms < policy.backoff_base_ms || policy.backoff_max_ms > kDayMs) {
    return InvalidArgument("invalid_retry_policy",
                           "retry policy backoff must satisfy 0 <= base <= max <= 24 h");
  }
  return Status();
}

Result<std::vector<PreparedEvent>> PrepareEvents(const std::vector<NewEvent>& events) {
  std::vector<PreparedEvent> out;
  std::set<std::string> dedupe_keys;
  for (const NewEvent& event : events) {
    QL_RETURN_IF_ERROR(RequireText("event type", event.type));
    QL_RETURN_IF_ERROR(RequireActorType(event.actor_type));
    if (event.attempt_id.has_value()) {
      QL_RETURN_IF_ERROR(ValidateId("attempt_id", *event.attempt_id));
    }
    if (event.dedupe_key.has_value()) {
      QL_RETURN_IF_ERROR(RequireText("event dedupe_key", *event.dedupe_key));
      if (!dedupe_keys.insert(*event.dedupe_key).second) {
        return Duplicate("dedupe_key_duplicate", Cat({"dedupe key ", Quote(*event.dedupe_key),
                                                      " appears twice in one transition"}));
      }
    }
    QL_ASSIGN_OR_RETURN(std::string payload, CanonicalEventPayload(event.type, event.payload_json));
    out.push_back(PreparedEvent{&event, std::move(payload)});
  }
  return out;
}

Status ValidateNewRun(const NewRun& run) {
  QL_RETURN_IF_ERROR(ValidateId("run_id", run.run_id));
  QL_RETURN_IF_ERROR(ValidateId("attempt_id", run.attempt_id));
  QL_RETURN_IF_ERROR(ValidateId("project_id", run.project_id));
  QL_RETURN_IF_ERROR(ValidateId("task_id", run.task_id));
  QL_RETURN_IF_ERROR(RequireRevision("task_revision", run.task_revision));
  QL_RETURN_IF_ERROR(RequireDigest("task_digest", run.task_digest));
  QL_RETURN_IF_ERROR(RequireText("execution_revision_id", run.execution_revision_id));
  QL_RETURN_IF_ERROR(RequireExecutorType(run.executor_type));
  if (!ParseTriggerType(run.trigger_type).has_value()) {
    return InvalidArgument(
        "invalid_trigger_type",
        Cat({"trigger type must be cron, manual, api or approved, got ", Quote(run.trigger_type)}));
  }
  if (run.trigger_id.has_value()) QL_RETURN_IF_ERROR(ValidateId("trigger_id", *run.trigger_id));
  if (run.trigger_revision.has_value()) {
    QL_RETURN_IF_ERROR(RequireRevision("trigger_revision", *run.trigger_revision));
  }
  if (run.idempotency_key.has_value()) {
    QL_RETURN_IF_ERROR(RequireText("idempotency_key", *run.idempotency_key));
  }
  if (run.retry_of_run_id.has_value()) {
    QL_RETURN_IF_ERROR(ValidateId("retry_of_run_id", *run.retry_of_run_id));
  }
  QL_RETURN_IF_ERROR(RequireRetryPolicy(run.retry_policy));
  QL_RETURN_IF_ERROR(RequireActorType(run.actor_type));
  if (run.run_id == run.attempt_id) {
    return InvalidArgument("invalid_id", "run_id and attempt_id must differ");
  }
  return Status();
}

Status RequireJitterRelease(const NewRun& run, int64_t jitter_ms) {
  std::optional<int64_t> expected;
  if (jitter_ms > 0 && run.trigger_id.has_value() && run.scheduled_for_ms.has_value()) {
    expected = *run.scheduled_for_ms +
               JitterOffsetMs(*run.trigger_id, *run.scheduled_for_ms, jitter_ms);
  }
  if (run.release_at_ms == expected) return Status();
  return InvalidArgument(
      "invalid_schedule_advance",
      Cat({"the admitted run's release time must be its occurrence plus the trigger's jitter "
           "offset (",
           expected.has_value() ? std::to_string(*expected) : std::string("none"), "), got ",
           run.release_at_ms.has_value() ? std::to_string(*run.release_at_ms)
                                         : std::string("none")}));
}

// ---------------------------------------------------------------------------------------------
// Stored state

Result<RunStatus> StoredRunStatus(const RunRecord& run) {
  std::optional<RunStatus> status = ParseRunStatus(run.status);
  if (!status.has_value()) {
    return Corrupt("stored_status_invalid",
                   Cat({"run ", run.id, " holds unknown status ", Quote(run.status)}));
  }
  return *status;
}

Result<AttemptStatus> StoredAttemptStatus(const AttemptRecord& attempt) {
  std::optional<AttemptStatus> status = ParseAttemptStatus(attempt.status);
  if (!status.has_value()) {
    return Corrupt("stored_status_invalid",
                   Cat({"attempt ", attempt.id, " holds unknown status ", Quote(attempt.status)}));
  }
  return *status;
}

Result<CheckedTransition> CheckTransitionCommand(const RunTransitionCommand& t) {
  QL_RETURN_IF_ERROR(ValidateId("run_id", t.run_id));
  CheckedTransition out;
  if (t.run_to.has_value()) {
    out.run_to = ParseRunStatus(*t.run_to);
    if (!out.run_to.has_value()) {
      return InvalidArgument("invalid_status",
                             Cat({"run_to ", Quote(*t.run_to), " is not a run status"}));
    }
  }
  if (t.attempt_to.has_value()) {
    out.attempt_to = ParseAttemptStatus(*t.attempt_to);
    if (!out.attempt_to.has_value()) {
      return InvalidArgument("invalid_status", Cat({"attempt_to ", Quote(*t.attempt_to),
                                                    " is not an attempt status"}));
    }
  }
  if (t.expected_attempt_status.has_value()) {
    out.expected_attempt = ParseAttemptStatus(*t.expected_attempt_status);
    if (!out.expected_attempt.has_value()) {
      return InvalidArgument("invalid_status",
                             Cat({"expected_attempt_status ", Quote(*t.expected_attempt_status),
                                  " is not an attempt status"}));
    }
  }
  out.attempt_fields = t.pid.has_value() || t.process_start_ticks.has_value() ||
                       t.log_path.has_value() || t.attempt_started_at_ms.has_value() ||
                       t.attempt_finished_at_ms.has_value() || t.attempt_exit_code.has_value() ||
                       t.attempt_error_code.has_value() || t.attempt_error_summary.has_value();
  if ((out.attempt_to.has_value() || out.expected_attempt.has_value() || out.attempt_fields ||
       t.lease.has_value()) &&
      !t.attempt_id.has_value()) {
    return InvalidArgument("attempt_id_required",
                           "an attempt status or attempt field update needs attempt_id");
  }
  if (t.attempt_id.has_value()) QL_RETURN_IF_ERROR(ValidateId("attempt_id", *t.attempt_id));
  if (out.attempt_to.has_value() && !out.expected_attempt.has_value()) {
    return InvalidArgument("expected_attempt_status_required",
                           "an attempt status change needs expected_attempt_status");
  }
  if (t.new_attempt_id.has_value()) {
    QL_RETURN_IF_ERROR(ValidateId("new_attempt_id", *t.new_attempt_id));
    if (out.run_to != RunStatus::kQueued) {
      return InvalidArgument("invalid_transition",
                             "a new attempt is added only when the run moves back to queued");
    }
  }
  if (out.run_to == RunStatus::kRetryWait && !t.retry_at_ms.has_value()) {
    return InvalidArgument("retry_at_required", "a move to retry_wait needs retry_at_ms");
  }
  QL_ASSIGN_OR_RETURN(out.events, PrepareEvents(t.events));
  return out;
}

Result<std::vector<CheckedTransition>> CheckTransitions(
    const std::vector<RunTransitionCommand>& transitions) {
  if (transitions.empty()) {
    return InvalidArgument("invalid_transition", "a transition sequence needs a transition");
  }
  std::vector<CheckedTransition> out;
  for (const RunTransitionCommand& t : transitions) {
    if (t.run_id != transitions.front().run_id) {
      return InvalidArgument("invalid_transition",
                             "every transition of a sequence belongs to the same run");
    }
    QL_ASSIGN_OR_RETURN(CheckedTransition checked, CheckTransitionCommand(t));
    out.push_back(std::move(checked));
  }
  return out;
}

namespace {

Status CancelWins(const RunRecord& run) {
  return Conflict("cancel_requested",
                  Cat({"run ", run.id, " has a cancel request; it can only stop as cancelled"}));
}

}  // namespace

Result<RunMove> DecideRunMove(const RunRecord& run, const RunTransitionCommand& t,
                              const CheckedTransition& checked) {
  Status version_conflict = Conflict(
      "version_conflict", Cat({"run ", run.id, " is at version ", std::to_string(run.version),
                               ", not the expected ", std::to_string(t.expected_version)}));
  if (run.version != t.expected_version) return version_conflict;
  QL_ASSIGN_OR_RETURN(RunStatus from, StoredRunStatus(run));
  if (checked.run_to.has_value()) {
    QL_RETURN_IF_ERROR(CheckRunTransition(from, *checked.run_to));
    if (run.cancel_requested_at_ms.has_value() && IsCancelBlocked(*checked.run_to)) {
      return CancelWins(run);
    }
  } else if (IsTerminal(from)) {
    return Conflict("run_terminal",
                    Cat({"run ", run.id, " is ", run.status, "; finished runs never change"}));
  }
  RunMove move{from, checked.run_to.value_or(from), std::nullopt, t.finished_at_ms,
               std::move(version_conflict)};
  if (checked.run_to == RunStatus::kQueued) move.queued_at_ms = t.now_ms;
  if (checked.run_to.has_value() && IsTerminal(*checked.run_to) &&
      !move.finished_at_ms.has_value()) {
    move.finished_at_ms = t.now_ms;
  }
  return move;
}

Result<std::optional<AttemptMove>> DecideAttemptMove(const RunRecord& run,
                                                     const std::optional<AttemptRecord>& attempt,
                                                     const RunTransitionCommand& t,
                                                     const CheckedTransition& checked) {
  if (!attempt.has_value() || attempt->run_id != run.id) {
    return NotFound("attempt_not_found",
                    Cat({"run ", run.id, " has no attempt ", t.attempt_id.value_or("")}));
  }
  QL_ASSIGN_OR_RETURN(AttemptStatus current, StoredAttemptStatus(*attempt));
  Status status_conflict =
      Conflict("attempt_status_conflict",
               Cat({"attempt ", attempt->id, " is ", attempt->status, ", not the expected ",
                    t.expected_attempt_status.value_or(attempt->status)}));
  if (checked.expected_attempt.has_value() && *checked.expected_attempt != current) {
    return status_conflict;
  }
  if (checked.attempt_to.has_value()) {
    QL_RETURN_IF_ERROR(CheckAttemptTransition(current, *checked.attempt_to));
    if (run.cancel_requested_at_ms.has_value() && IsCancelBlocked(*checked.attempt_to)) {
      return CancelWins(run);
    }
  } else if (IsTerminal(current) && checked.attempt_fields) {
    return Conflict("attempt_terminal", Cat({"attempt ", attempt->id, " is ", attempt->status,
                                             "; finished attempts never change"}));
  }
  if (!checked.attempt_to.has_value() && !checked.attempt_fields) {
    return std::optional<AttemptMove>();
  }
  AttemptMove move{current, checked.attempt_to.value_or(current), t.attempt_finished_at_ms,
                   std::move(status_conflict)};
  if (checked.attempt_to.has_value() && IsTerminal(*checked.attempt_to) &&
      !move.finished_at_ms.has_value()) {
    move.finished_at_ms = t.now_ms;
  }
  return std::optional<AttemptMove>(std::move(move));
}

Result<int> DecideNewAttempt(const RunRecord& run, const std::optional<AttemptRecord>& latest) {
  if (!latest.has_value()) {
    return Corrupt("run_without_attempt", Cat({"run ", run.id, " has no attempt"}));
  }
  QL_ASSIGN_OR_RETURN(AttemptStatus latest_status, StoredAttemptStatus(*latest));
  if (!IsTerminal(latest_status)) {
    return Conflict("attempt_not_terminal",
                    Cat({"attempt ", std::to_string(latest->attempt), " of run ", run.id,
                         " is still ", latest->status}));
  }
  if (latest->attempt + 1 > run.retry_policy.max_attempts) {
    return Conflict("retry_attempts_exhausted",
                    Cat({"run ", run.id, " has used all ",
                         std::to_string(run.retry_policy.max_attempts), " attempts"}));
  }
  return latest->attempt + 1;
}

bool IsCancelBlocked(RunStatus to) {
  return to == RunStatus::kSucceeded || to == RunStatus::kFailed || to == RunStatus::kTimedOut ||
         to == RunStatus::kRetryWait || to == RunStatus::kQueued;
}

bool IsCancelBlocked(AttemptStatus to) {
  return to == AttemptStatus::kSucceeded || to == AttemptStatus::kFailed ||
         to == AttemptStatus::kTimedOut;
}

// ---------------------------------------------------------------------------------------------
// Page keys

namespace {

constexpr char kBase64Url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

}  // namespace

std::string Base64UrlEncode(std::string_view in) {
  std::string out;
  uint32_t buffer = 0;
  int bits = 0;
  for (unsigned char c : in) {
    buffer = (buffer << 8) | c;
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      out.push_back(kBase64Url[(buffer >> bits) & 0x3f]);
    }
  }
  if (bits > 0) out.push_back(kBase64Url[(buffer << (6 - bits)) & 0x3f]);
  return out;
}

std::optional<std::string> Base64UrlDecode(std::string_view in) {
  std::string out;
  uint32_t buffer = 0;
  int bits = 0;
  for (char c : in) {
    const char* pos = std::char_traits<char>::find(kBase64Url, 64, c);
    if (pos == nullptr) return std::nullopt;
    buffer = (buffer << 6) | static_cast<uint32_t>(pos - kBase64Url);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((buffer >> bits) & 0xff));
    }
  }
  // Leftover bits must be zero padding of the last character, never a whole character.
  if (bits >= 6 || (buffer & ((1u << bits) - 1)) != 0) return std::nullopt;
  return out;
}

Status InvalidPageKey(std::string_view listing) {
  return InvalidArgument("invalid_page_key",
                         Cat({"page key was not issued by this ", listing,
                              " listing; pass next_key from the previous page unchanged"}));
}

std::string EncodeIdKey(std::string_view listing, std::string_view id) {
  return Base64UrlEncode(Cat({listing, ":", id}));
}

Result<std::string> DecodeIdKey(std::string_view listing, std::string_view key) {
  std::optional<std::string> raw = Base64UrlDecode(key);
  const std::string prefix = Cat({listing, ":"});
  if (!raw.has_value() || raw->rfind(prefix, 0) != 0) return InvalidPageKey(listing);
  std::string id = raw->substr(prefix.size());
  if (!IsCanonicalUuid(id)) return InvalidPageKey(listing);
  return id;
}

std::string EncodeRunKey(const RunRecord& run) {
  return Base64UrlEncode(Cat({"runs:", std::to_string(run.created_at_ms), ":", run.id}));
}

Result<RunPosition> DecodeRunKey(std::string_view key) {
  std::optional<std::string> raw = Base64UrlDecode(key);
  if (!raw.has_value() || raw->rfind("runs:", 0) != 0) return InvalidPageKey("runs");
  const std::string rest = raw->substr(5);
  const size_t colon = rest.find(':');
  if (colon == std::string::npos || colon == 0 || colon > 19) return InvalidPageKey("runs");
  RunPosition position;
  for (size_t i = 0; i < colon; ++i) {
    if (rest[i] < '0' || rest[i] > '9') return InvalidPageKey("runs");
    if (position.created_at_ms > (INT64_MAX - (rest[i] - '0')) / 10) return InvalidPageKey("runs");
    position.created_at_ms = position.created_at_ms * 10 + (rest[i] - '0');
  }
  position.id = rest.substr(colon + 1);
  if (!IsCanonicalUuid(position.id)) return InvalidPageKey("runs");
  return position;
}

Status ValidatePublishTask(const PublishTaskCommand& cmd) {
  QL_RETURN_IF_ERROR(ValidateId("project_id", cmd.project_id));
  QL_RETURN_IF_ERROR(ValidateId("task_id", cmd.task_id));
  QL_RETURN_IF_ERROR(RequireText("mutation_id", cmd.mutation_id));
  if (cmd.expected_revision.has_value()) {
    QL_RETURN_IF_ERROR(RequireRevision("expected_revision", *cmd.expected_revision));
    if (*cmd.expected_revision == kMaxTaskRevision) {
      return InvalidArgument("invalid_revision", "the task has reached the last revision number");
    }
  }
  const TaskRevisionRecord& content = cmd.revision;
  QL_RETURN_IF_ERROR(RequireText("task kind", content.kind));
  QL_RETURN_IF_ERROR(RequireCanonicalJson("task spec", content.spec_json, /*object=*/true));
  QL_RETURN_IF_ERROR(RequireCanonicalJson("task labels", content.labels_json, /*object=*/false));
  if (content.approval_json.has_value()) {
    QL_RETURN_IF_ERROR(
        RequireCanonicalJson("task approval", *content.approval_json, /*object=*/true));
  }
  if (content.concurrency.has_value() &&
      (*content.concurrency < 1 || *content.concurrency > kMaxConcurrency)) {
    return InvalidArgument("invalid_concurrency",
                           Cat({"task concurrency must be 1..", std::to_string(kMaxConcurrency),
                                ", got ", std::to_string(*content.concurrency)}));
  }
  QL_RETURN_IF_ERROR(RequireDigest("task content_digest", content.content_digest));
  QL_RETURN_IF_ERROR(RequireText("task name", content.name));
  if (cmd.tombstone && (content.enabled || !cmd.expected_revision.has_value())) {
    return InvalidArgument("invalid_tombstone",
                           "a task is deleted with a disabled revision over an existing one");
  }
  if (cmd.tombstone && cmd.repin_triggers) {
    return InvalidArgument("invalid_tombstone", "a deleted task's triggers are not repinned");
  }
  const int64_t new_revision = cmd.expected_revision.value_or(0) + 1;
  if (!content.enabled && !cmd.executions.empty()) {
    return InvalidArgument("execution_for_disabled_revision",
                           "a disabled task revision has no execution revisions");
  }
  std::set<std::string> executor_types;
  for (const ExecutionRevisionRecord& exec : cmd.executions) {
    QL_RETURN_IF_ERROR(RequireExecutorType(exec.executor_type));
    if (!executor_types.insert(exec.executor_type).second) {
      return InvalidArgument("invalid_execution_revision",
                             Cat({"two execution revisions for executor ", exec.executor_type}));
    }
    QL_RETURN_IF_ERROR(RequireDigest("execution plan_digest", exec.plan_digest));
    if (exec.task_digest != content.content_digest) {
      return InvalidArgument(
          "execution_digest_mismatch",
          Cat({"execution revision ", Quote(exec.id), " pins task digest ", Quote(exec.task_digest),
               ", not the revision's ", content.content_digest}));
    }
    if (exec.id != ExecutionRevisionId(new_revision, exec.plan_digest)) {
      return InvalidArgument("invalid_execution_revision",
                             Cat({"execution revision id ", Quote(exec.id), " must be ",
                                  ExecutionRevisionId(new_revision, exec.plan_digest)}));
    }
    QL_RETURN_IF_ERROR(RequireCanonicalJson("execution plan", exec.plan_json, /*object=*/true));
  }
  return Status();
}

Status ValidatePublishTrigger(const PublishTriggerCommand& cmd) {
  QL_RETURN_IF_ERROR(ValidateId("project_id", cmd.project_id));
  QL_RETURN_IF_ERROR(ValidateId("trigger_id", cmd.trigger_id));
  QL_RETURN_IF_ERROR(RequireText("mutation_id", cmd.mutation_id));
  if (cmd.expected_revision.has_value()) {
    QL_RETURN_IF_ERROR(RequireRevision("expected_revision", *cmd.expected_revision));
    if (*cmd.expected_revision == kMaxTaskRevision) {
      return InvalidArgument("invalid_revision",
                             "the trigger has reached the last revision number");
    }
  }
  const TriggerRevisionRecord& content = cmd.revision;
  QL_RETURN_IF_ERROR(ValidateId("trigger task_id", content.task_id));
  QL_RETURN_IF_ERROR(RequireRevision("trigger task_revision", content.task_revision));
  QL_RETURN_IF_ERROR(RequireDigest("trigger task_digest", content.task_digest));
  QL_RETURN_IF_ERROR(RequireText("trigger expression", content.expression));
  QL_RETURN_IF_ERROR(RequireText("trigger timezone", content.timezone));
  if (content.misfire != "skip" && content.misfire != "fire_once") {
    return InvalidArgument("invalid_misfire_policy", Cat({"misfire must be skip or fire_once, got ",
                                                          Quote(content.misfire)}));
  }
  QL_RETURN_IF_ERROR(ParseOverlapPolicy(content.overlap).status());
  QL_RETURN_IF_ERROR(ValidateJitterMs(content.jitter_ms));
  QL_RETURN_IF_ERROR(RequireDigest("trigger content_digest", content.content_digest));
  if (!cmd.expected_revision.has_value()) QL_RETURN_IF_ERROR(RequireText("trigger name", cmd.name));
  if (cmd.tombstone && (content.enabled || !cmd.expected_revision.has_value())) {
    return InvalidArgument("invalid_tombstone",
                           "a trigger is deleted with a disabled revision over an existing one");
  }
  return Status();
}

TriggerRevisionRecord DerivedTriggerRevision(const TriggerRevisionRecord& current,
                                             int64_t task_revision, const std::string& task_digest,
                                             bool enabled, const std::string& task_mutation_id,
                                             int64_t now_ms) {
  TriggerRevisionRecord next = current;
  next.revision = current.revision + 1;
  next.mutation_id = Cat({task_mutation_id, ":", current.trigger_id});
  next.task_revision = task_revision;
  next.task_digest = task_digest;
  next.enabled = enabled;
  next.created_at_ms = now_ms;
  next.content_digest = TriggerContentDigest(next);
  return next;
}

std::optional<TriggerRevisionRecord> TriggerRevisionForTaskPublish(
    const PublishTaskCommand& cmd, const TaskRevisionRecord& task,
    const TriggerRevisionRecord& trigger) {
  if (cmd.tombstone) {
    return DerivedTriggerRevision(trigger, trigger.task_revision, trigger.task_digest, false,
                                  cmd.mutation_id, cmd.now_ms);
  }
  if (!cmd.repin_triggers || (trigger.enabled && !task.enabled)) return std::nullopt;
  return DerivedTriggerRevision(trigger, task.revision, task.content_digest, trigger.enabled,
                                cmd.mutation_id, cmd.now_ms);
}

}  // namespace ql
