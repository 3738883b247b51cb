#include "ql/engine/control_service.h"

#include <algorithm>
#include <array>
#include <utility>

#include "ql/core/approval.h"
#include "ql/core/artifact_store.h"
#include "ql/core/canonical_json.h"
#include "ql/core/cron.h"
#include "ql/core/digest.h"
#include "ql/core/execution_plan.h"
#include "ql/core/ids.h"
#include "ql/core/jitter.h"
#include "ql/core/misfire.h"
#include "ql/core/overlap.h"
#include "ql/core/retry_policy.h"
#include "ql/core/rfc3339.h"
#include "ql/core/states.h"
#include "ql/core/store_commands.h"
#include "ql/core/task_spec.h"

namespace ql {
namespace {

using nlohmann::json;

// Cursors are bound to the listing that issued them, so one listing's cursor is rejected by
// another instead of silently paging from an unrelated key.
constexpr std::string_view kTasksCursor = "tasks";
constexpr std::string_view kApprovalsCursor = "approvals";
constexpr std::string_view kTriggersCursor = "triggers";
constexpr std::string_view kRunsCursor = "runs";
constexpr size_t kMaxCursorBytes = 512;

constexpr char kBase64Url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

std::string Base64UrlEncode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = (uint32_t(uint8_t(in[i])) << 16) | (uint32_t(uint8_t(in[i + 1])) << 8) |
                       uint32_t(uint8_t(in[i + 2]));
    out.push_back(kBase64Url[(v >> 18) & 63]);
    out.push_back(kBase64Url[(v >> 12) & 63]);
    out.push_back(kBase64Url[(v >> 6) & 63]);
    out.push_back(kBase64Url[v & 63]);
  }
  if (i + 1 == in.size()) {
    const uint32_t v = uint32_t(uint8_t(in[i])) << 16;
    out.push_back(kBase64Url[(v >> 18) & 63]);
    out.push_back(kBase64Url[(v >> 12) & 63]);
  } else if (i + 2 == in.size()) {
    const uint32_t v = (uint32_t(uint8_t(in[i])) << 16) | (uint32_t(uint8_t(in[i + 1])) << 8);
    out.push_back(kBase64Url[(v >> 18) & 63]);
    out.push_back(kBase64Url[(v >> 12) & 63]);
    out.push_back(kBase64Url[(v >> 6) & 63]);
  }
  return out;
}

std::optional<std::string> Base64UrlDecode(std::string_view in) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '-') return 62;
    if (c == '_') return 63;
    return -1;
  };
  if (in.size() % 4 == 1) return std::nullopt;
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    const int v = value(c);
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  // Leftover bits must be zero so every cursor has exactly one spelling.
  if (bits > 0 && (acc & ((1u << bits) - 1)) != 0) return std::nullopt;
  return out;
}

std::string EncodeCursor(std::string_view kind, const std::string& key) {
  return Base64UrlEncode(std::string(kind) + ":" + key);
}

Result<std::optional<std::string>> DecodeCursor(std::string_view kind,
                                                const std::optional<std::string>& cursor) {
  if (!cursor.has_value()) return std::optional<std::string>();
  auto invalid = [&]() {
    return InvalidArgument("invalid_cursor", "cursor " + QuoteForMessage(*cursor, 32) +
                                                 " was not issued by this " + std::string(kind) +
                                                 " listing");
  };
  if (cursor->empty() || cursor->size() > kMaxCursorBytes) return invalid();
  std::optional<std::string> decoded = Base64UrlDecode(*cursor);
  const std::string prefix = std::string(kind) + ":";
  if (!decoded.has_value() || decoded->size() <= prefix.size() ||
      decoded->compare(0, prefix.size(), prefix) != 0) {
    return invalid();
  }
  std::string key = decoded->substr(prefix.size());
  for (char c : key) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return invalid();
  }
  if (!IsValidUtf8(key)) return invalid();
  return std::optional<std::string>(std::move(key));
}

Status ValidateLimit(int limit) {
  if (limit < 1 || limit > kMaxPageLimit) {
    return InvalidArgument("invalid_limit", "limit must be 1.." + std::to_string(kMaxPageLimit) +
                                                ", got " + std::to_string(limit));
  }
  return Status::Ok();
}

Result<PageRequest> ToPageRequest(std::string_view kind, const PageQuery& page) {
  QL_RETURN_IF_ERROR(ValidateLimit(page.limit));
  QL_ASSIGN_OR_RETURN(std::optional<std::string> key, DecodeCursor(kind, page.cursor));
  PageRequest request;
  request.after_key = std::move(key);
  request.limit = page.limit;
  return request;
}

// Mutation ids and idempotency keys are opaque client tokens: printable ASCII without spaces,
// so they are safe in logs, URLs and error messages.
bool IsTokenChar(char c) { return c > 0x20 && c < 0x7f; }

Status ValidateToken(std::string_view field, std::string_view reason, std::string_view value,
                     size_t max_bytes) {
  if (value.empty() || value.size() > max_bytes) {
    return InvalidArgument(std::string(reason), std::string(field) + " must be 1.." +
                                                    std::to_string(max_bytes) + " bytes, got " +
                                                    std::to_string(value.size()));
  }
  for (char c : value) {
    if (!IsTokenChar(c)) {
      return InvalidArgument(std::string(reason),
                             std::string(field) + " " + QuoteForMessage(value) +
                                 " may only contain printable ASCII characters without spaces");
    }
  }
  return Status::Ok();
}

// True when an enabled trigger revision admits nothing because its pin is not `task`, the task's
// current revision, or that revision is disabled (the trigger view's pin_stale).
bool PinIsStale(const TriggerRevisionRecord& trigger, const TaskRevisionRecord& task) {
  return trigger.task_revision != task.revision || !task.enabled ||
         trigger.task_digest != task.content_digest;
}

// A deleted trigger takes no change (the store refuses it too, after checks that would name a
// less precise reason).
Status RequireLive(const TriggerView& trigger) {
  if (!trigger.head.deleted_at_ms.has_value()) return Status::Ok();
  return Conflict("trigger_deleted", "trigger " + trigger.head.trigger_id + " was deleted");
}

Status NotFoundAs(const Status& status, std::string_view reason, const std::string& message) {
  if (status.code() == StatusCode::kNotFound) return NotFound(std::string(reason), message);
  return status;
}

Status ValidateCancelReason(const std::string& reason) {
  if (reason.empty() || !IsValidUtf8(reason)) {
    return InvalidArgument(
        "invalid_cancel_reason",
        "reason must be a non-empty UTF-8 string, got " + QuoteForMessage(reason));
  }
  size_t chars = 0;
  for (unsigned char c : reason) {
    if ((c & 0xc0) != 0x80) ++chars;
    if (c < 0x20 || c == 0x7f) {
      return InvalidArgument("invalid_cancel_reason",
                             "reason " + QuoteForMessage(reason) + " contains a control character");
    }
  }
  if (chars > kMaxCancelReasonChars) {
    return InvalidArgument("invalid_cancel_reason",
                           "reason must be at most " + std::to_string(kMaxCancelReasonChars) +
                               " characters, got " + std::to_string(chars));
  }
  return Status::Ok();
}

}  // namespace

ControlService::ControlService(Store& store, Clock& clock, RandomSource& random,
                               ControlOptions options)
    : store_(store),
      clock_(clock),
      random_(random),
      options_(std::move(options)),
      // Ids of governance writes need no determinism; their own source keeps random_ to us.
      governance_(store, clock, SecureRandom(), kDefaultProjectSlug),
      retention_(store, governance_, clock, SecureRandom()) {}

Status ControlService::ValidateOptions(const ControlOptions& options) {
  if (!ParseExecutorType(options.executor_type).has_value()) {
    return InvalidArgument("invalid_executor_type",
                           "executor_type " + QuoteForMessage(options.executor_type) +
                               " is not \"local_process\" or \"remote_worker\"");
  }
  QL_RETURN_IF_ERROR(ValidateGraceMs(options.grace_ms));
  if (options.default_project_name.empty()) {
    return InvalidArgument("invalid_project_name", "default_project_name must not be empty");
  }
  return Status::Ok();
}

AuditRecord ControlService::DefinitionFact(const Caller& caller, std::string_view action,
                                           std::string_view target_kind,
                                           const std::string& target_id,
                                           const std::string& project_id, int64_t now_ms) {
  return SucceededFact(NewId(), Actor{caller.principal_id, caller.request_id}, action,
                       target_kind, target_id, project_id, now_ms);
}

std::string ControlService::NewId() {
  const int64_t now = clock_.NowMs();
  std::lock_guard<std::mutex> lock(random_mu_);
  return NewUuidV7(now, random_);
}

std::string ControlService::DerivedId(std::string_view kind, const std::string& project_id,
                                      const std::string& mutation_id) {
  // A name-based UUID (version 8, RFC 9562 §5.8) so a replayed create names the same object.
  std::string material = "ql:create:v1";
  material.push_back('\0');
  material.append(kind);
  material.push_back('\0');
  material.append(project_id);
  material.push_back('\0');
  material.append(mutation_id);
  std::string hex = Sha256Hex(material).substr(0, 32);
  hex[12] = '8';
  static constexpr char kVariant[] = "89ab";
  const int nibble = hex[16] <= '9' ? hex[16] - '0' : hex[16] - 'a' + 10;
  hex[16] = kVariant[nibble & 3];
  return hex.substr(0, 8) + "-" + hex.substr(8, 4) + "-" + hex.substr(12, 4) + "-" +
         hex.substr(16, 4) + "-" + hex.substr(20, 12);
}

Result<std::string> ControlService::MutationIdOrNew(const std::optional<std::string>& mutation_id) {
  if (!mutation_id.has_value()) return NewId();
  QL_RETURN_IF_ERROR(
      ValidateToken("mutation_id", "invalid_mutation_id", *mutation_id, kMaxMutationIdBytes));
  return *mutation_id;
}

Result<ProjectRecord> ControlService::EnsureDefaultProject() {
  {
    std::lock_guard<std::mutex> lock(project_mu_);
    if (project_.has_value()) return *project_;
  }
  const std::string id = NewId();
  QL_ASSIGN_OR_RETURN(ProjectRecord project,
                      store_.projects().EnsureProject(
                          id, kDefaultProjectSlug, options_.default_project_name, clock_.NowMs()));
  std::lock_guard<std::mutex> lock(project_mu_);
  project_ = project;
  return project;
}

Result<std::string> ControlService::ProjectId() {
  QL_ASSIGN_OR_RETURN(ProjectRecord project, EnsureDefaultProject());
  return project.id;
}

Result<std::string> ControlService::ProjectIdFor(const Caller& caller) {
  if (caller.project.empty()) return ProjectId();
  QL_ASSIGN_OR_RETURN(ProjectRecord project, governance_.ResolveProject(caller.project));
  return project.id;
}

Status ControlService::Allow(const Caller& caller, const std::string& project_id, Action action,
                             std::string_view target, const Status& not_found, Role at_least) {
  Status st = governance_.Authorize(caller, project_id, action, target, at_least);
  if (st.reason() == "hidden") return not_found;
  return st;
}

std::optional<PolicyFence> ControlService::FenceOf(const Caller& caller, Action action,
                                                   Role at_least) {
  if (caller.principal_id.empty()) return std::nullopt;
  return PolicyFence{caller.principal_id, std::max(RequiredRole(action), at_least)};
}

Result<Role> ControlService::ApproverFloor(const TaskRevisionRecord& revision) {
  if (!revision.approval_json.has_value()) return Role::kNone;
  Result<nlohmann::json> parsed = ParseJsonStrict(*revision.approval_json);
  if (!parsed.ok()) return Corrupt("approval_corrupt", parsed.status().message());
  QL_ASSIGN_OR_RETURN(ApprovalPolicy policy, ParseApprovalPolicy(*parsed));
  return policy.required ? policy.approver_role : Role::kNone;
}

Result<Role> ControlService::TriggerFloor(const TriggerView& trigger) {
  QL_ASSIGN_OR_RETURN(TaskView task, GetTask(trigger.revision.task_id));
  return ApproverFloor(task.revision);
}

Result<std::vector<ProjectRecord>> ControlService::ListProjects(const Caller& caller) {
  QL_RETURN_IF_ERROR(EnsureDefaultProject().status());
  return governance_.ListProjects(caller);
}

// ---------------------------------------------------------------------------------------------
// Tasks

Result<std::optional<ControlService::PinnedPlan>> ControlService::PlanOf(
    const TaskRevisionRecord& revision) {
  if (!revision.enabled) return std::optional<PinnedPlan>();
  auto execution = store_.definitions().FindExecutionRevision(revision.task_id, revision.revision,
                                                              options_.executor_type);
  if (!execution.ok()) {
    if (execution.status().code() != StatusCode::kNotFound) return execution.status();
    return std::optional<PinnedPlan>();
  }
  QL_ASSIGN_OR_RETURN(json plan_json, ParseJsonStrict(execution->plan_json));
  QL_ASSIGN_OR_RETURN(ExecutionPlan plan, PlanFromJson(plan_json));
  QL_RETURN_IF_ERROR(VerifyPlanDigest(plan, execution->plan_digest));
  if (plan.task_digest != revision.content_digest) {
    return Corrupt("digest_mismatch", "execution revision " + execution->id +
                                          " does not belong to task revision digest " +
                                          revision.content_digest);
  }
  return std::optional<PinnedPlan>(PinnedPlan{std::move(execution).value(), std::move(plan)});
}

Status ControlService::PinScript(const std::string& project_id, TaskContent& content) {
  auto* script = std::get_if<ScriptCommand>(&content.spec.command);
  if (script == nullptr) return Status::Ok();
  QL_ASSIGN_OR_RETURN(
      ScriptVersionRecord version,
      store_.artifacts().GetScriptVersion(project_id, script->script, script->version));
  const std::string named = script->script + "@" + std::to_string(version.version);
  if (!script->digest.empty() && script->digest != version.digest) {
    return InvalidArgument("script_digest_mismatch", "spec.command.digest " + script->digest +
                                                         " is not the digest of " + named + " (" +
                                                         version.digest + ")");
  }
  if (!script->script_kind.empty() && script->script_kind != version.kind) {
    return InvalidArgument("script_digest_mismatch",
                           "spec.command.scriptKind " + script->script_kind +
                               " is not the kind of " + named + " (" + version.kind + ")");
  }
  if (script->entry.empty()) {
    script->entry = version.entry;
  } else {
    const bool found = std::any_of(version.files.begin(), version.files.end(),
                                   [&](const ScriptFile& f) { return f.path == script->entry; });
    if (!found) {
      return InvalidArgument(
          "script_entry_invalid",
          "spec.command.entry " + QuoteForMessage(script->entry) + " is not a file of " + named);
    }
  }
  if (script->interpreter.empty()) {
    std::optional<std::string> interpreter = InterpreterForPath(script->entry);
    if (!interpreter) {
      return InvalidArgument("script_interpreter_required",
                             "the interpreter of " + named + "'s entry " +
                                 QuoteForMessage(script->entry) +
                                 " cannot be told from its name; give one (node, python3, sh, "
                                 "bash)");
    }
    script->interpreter = *interpreter;
  }
  script->version = version.version;
  script->digest = version.digest;
  script->script_kind = version.kind;
  return Status::Ok();
}

Result<PublishedTask> ControlService::Publish(const std::string& project_id,
                                              const std::string& task_id,
                                              std::optional<int64_t> expected_revision,
                                              const std::string& mutation_id,
                                              const TaskContent& requested, const Caller& caller,
                                              bool repin_triggers, bool tombstone) {
  TaskContent content = requested;
  // A revision after one that needs approval is published by someone who may approve: else
  // dropping the policy would be a way around it.
  Role floor = Role::kNone;
  if (expected_revision.has_value() && !tombstone) {
    auto current = store_.definitions().GetTaskRevision(task_id, *expected_revision);
    if (current.ok()) {
      QL_ASSIGN_OR_RETURN(floor, ApproverFloor(*current));
    }
  }
  QL_RETURN_IF_ERROR(Allow(caller, project_id, Action::kPublish, "tasks.publish",
                           NotFound("task_not_found", "task " + task_id + " does not exist"),
                           floor));
  // A script command is pinned to the version it names (the latest when none) here, after the
  // caller may publish: the revision holds its digest, entry and interpreter.
  QL_RETURN_IF_ERROR(PinScript(project_id, content));
  const int64_t revision = expected_revision.value_or(0) + 1;
  if (revision > kMaxTaskRevision) {
    return InvalidArgument("invalid_expected_revision", "expected_revision " +
                                                            std::to_string(*expected_revision) +
                                                            " leaves no room for another revision");
  }
  QL_ASSIGN_OR_RETURN(auto secret_refs, SecretEnvironment(content.spec.environment));
  for (const auto& [variable, ref] : secret_refs) {
    if (ref.project_id != project_id) {
      return InvalidArgument("secret_ref_other_project",
                             "spec.environment." + variable + " names secret " + ref.name +
                                 " of project " + ref.project_id +
                                 "; a task may only use secrets of its own project " + project_id);
    }
  }
  const int64_t now = clock_.NowMs();
  const std::string digest = TaskContentDigest(content);

  PublishTaskCommand cmd;
  cmd.project_id = project_id;
  cmd.task_id = task_id;
  cmd.expected_revision = expected_revision;
  cmd.mutation_id = mutation_id;
  cmd.fence = FenceOf(caller, Action::kPublish, floor);
  cmd.now_ms = now;
  cmd.repin_triggers = repin_triggers;
  cmd.tombstone = tombstone;
  cmd.audit = DefinitionFact(caller,
                             tombstone                        ? "task.delete"
                             : expected_revision.has_value() ? "task.revise"
                                                             : "task.create",
                             "task", task_id, project_id, now);
  TaskRevisionRecord& rec = cmd.revision;
  rec.project_id = project_id;
  rec.task_id = task_id;
  rec.revision = revision;
  rec.mutation_id = mutation_id;
  rec.name = content.name;
  rec.kind = content.kind;
  rec.spec_json = internal::CanonicalJsonLossy(CommandSpecToJson(content.spec));
  json labels = json::object();
  for (const auto& [key, value] : content.labels) labels[key] = value;
  rec.labels_json = internal::CanonicalJsonLossy(labels);
  if (content.approval.has_value()) {
    rec.approval_json = internal::CanonicalJsonLossy(ApprovalPolicyToJson(*content.approval));
  }
  rec.concurrency = content.concurrency;
  rec.enabled = content.enabled;
  rec.content_digest = digest;
  rec.created_at_ms = now;
  if (!caller.principal_id.empty()) rec.published_by = caller.principal_id;
  if (content.enabled) {
    QL_ASSIGN_OR_RETURN(ExecutionPlan plan, BuildExecutionPlan(task_id, revision, content, digest,
                                                               options_.executor_type));
    ExecutionRevisionRecord execution;
    execution.plan_digest = PlanDigest(plan);
    execution.id = ExecutionRevisionId(revision, execution.plan_digest);
    execution.project_id = project_id;
    execution.task_id = task_id;
    execution.task_revision = revision;
    execution.task_digest = digest;
    execution.executor_type = options_.executor_type;
    execution.plan_json = PlanCanonical(plan);
    execution.created_at_ms = now;
    cmd.executions.push_back(std::move(execution));
  }
  QL_ASSIGN_OR_RETURN(PublishTaskResult result, store_.definitions().PublishTaskRevision(cmd));
  QL_ASSIGN_OR_RETURN(TaskView view, ViewOf(result.revision));
  PublishedTask out{std::move(view), result.replayed, std::move(result.trigger_ids), 0};
  if (expected_revision.has_value() && !tombstone) {
    // What the user must hear: triggers this revision left pinned to an older one.
    std::optional<std::string> cursor;
    do {
      QL_ASSIGN_OR_RETURN(Page<TriggerRevisionRecord> page,
                          store_.definitions().ListTriggers(
                              project_id, task_id, PageRequest{cursor, kMaxPageLimit}));
      for (const TriggerRevisionRecord& t : page.items) {
        if (t.enabled && PinIsStale(t, out.task.revision)) ++out.stale_triggers;
      }
      cursor = page.next_key;
    } while (cursor.has_value());
  }
  return out;
}

Result<PublishedTask> ControlService::PublishTask(const TaskWrite& write, const Caller& caller) {
  QL_ASSIGN_OR_RETURN(std::string mutation_id, MutationIdOrNew(write.mutation_id));
  QL_ASSIGN_OR_RETURN(TaskContent content, ParseTaskContent(write.body));
  QL_ASSIGN_OR_RETURN(std::string project_id, ProjectIdFor(caller));
  const std::string task_id =
      write.mutation_id.has_value() ? DerivedId("task", project_id, mutation_id) : NewId();
  return Publish(project_id, task_id, std::nullopt, mutation_id, content, caller,
                 /*repin_triggers=*/false, /*tombstone=*/false);
}

Result<PublishedTask> ControlService::PublishTaskRevision(const std::string& task_ref,
                                                          int64_t expected_revision,
                                                          const TaskWrite& write,
                                                          const Caller& caller) {
  QL_ASSIGN_OR_RETURN(const std::string task_id, ResolveTaskRef(task_ref, caller));
  if (expected_revision < 1 || expected_revision > kMaxTaskRevision) {
    return InvalidArgument("invalid_expected_revision",
                           "expected_revision must be 1.." + std::to_string(kMaxTaskRevision) +
                               ", got " + std::to_string(expected_revision));
  }
  QL_ASSIGN_OR_RETURN(std::string mutation_id, MutationIdOrNew(write.mutation_id));
  QL_ASSIGN_OR_RETURN(TaskContent content, ParseTaskContent(write.body));
  auto head = store_.definitions().GetTaskHead(task_id);
  if (!head.ok()) {
    return NotFoundAs(head.status(), "task_not_found", "task " + task_id + " does not exist");
  }
  return Publish(head->project_id, task_id, expected_revision, mutation_id, content, caller,
                 write.repin_triggers, /*tombstone=*/false);
}

Result<TaskView> ControlService::ViewOf(const TaskRevisionRecord& revision) {
  auto head = store_.definitions().GetTaskHead(revision.task_id);
  if (!head.ok()) {
    return NotFoundAs(head.status(), "task_not_found",
                      "task " + revision.task_id + " does not exist");
  }
  QL_ASSIGN_OR_RETURN(std::optional<PinnedPlan> plan, PlanOf(revision));
  TaskView view{std::move(head).value(), revision, std::nullopt, nullptr};
  if (plan.has_value()) view.retry = plan->plan.retry_policy;
  return view;
}

Result<TaskView> ControlService::GetTask(const std::string& task_ref, const Caller& caller) {
  QL_ASSIGN_OR_RETURN(const std::string task_id, ResolveTaskRef(task_ref, caller));
  auto head = store_.definitions().GetTaskHead(task_id);
  if (!head.ok()) {
    return NotFoundAs(head.status(), "task_not_found", "task " + task_id + " does not exist");
  }
  QL_RETURN_IF_ERROR(Allow(caller, head->project_id, Action::kRead, "tasks.get",
                           NotFound("task_not_found", "task " + task_id + " does not exist")));
  QL_ASSIGN_OR_RETURN(TaskRevisionRecord revision,
                      store_.definitions().GetTaskRevision(task_id, head->current_revision));
  QL_ASSIGN_OR_RETURN(std::optional<PinnedPlan> plan, PlanOf(revision));
  TaskView view{std::move(head).value(), std::move(revision), std::nullopt, nullptr};
  if (plan.has_value()) view.retry = plan->plan.retry_policy;
  if (!view.head.deleted_at_ms.has_value()) {
    QL_ASSIGN_OR_RETURN(view.overview, OverviewOf(view.head.project_id, task_id));
  }
  return view;
}

Result<std::shared_ptr<const TaskOverview>> ControlService::OverviewOf(
    const std::string& project_id, const std::string& task_id) {
  auto overview = std::make_shared<TaskOverview>();
  PageRequest request;
  request.limit = kMaxPageLimit;
  for (;;) {
    QL_ASSIGN_OR_RETURN(Page<TriggerRevisionRecord> listed,
                        store_.definitions().ListTriggers(project_id, task_id, request));
    for (const TriggerRevisionRecord& revision : listed.items) {
      QL_ASSIGN_OR_RETURN(TriggerHeadRecord head,
                          store_.definitions().GetTriggerHead(revision.trigger_id));
      QL_ASSIGN_OR_RETURN(TriggerView trigger, ViewOf(head, revision));
      if (trigger.next_fire_at_ms.has_value() &&
          (!overview->next_fire_at_ms.has_value() ||
           *trigger.next_fire_at_ms < *overview->next_fire_at_ms)) {
        overview->next_fire_at_ms = trigger.next_fire_at_ms;
      }
      overview->triggers.push_back(std::move(trigger));
    }
    if (!listed.next_key.has_value()) break;
    request.after_key = listed.next_key;
  }
  RunFilter filter;
  filter.project_id = project_id;
  filter.task_id = task_id;
  PageRequest newest;
  newest.limit = 1;
  QL_ASSIGN_OR_RETURN(Page<RunRecord> runs, store_.runs().ListRuns(filter, newest));
  if (!runs.items.empty()) overview->last_run = std::move(runs.items.front());
  return std::shared_ptr<const TaskOverview>(std::move(overview));
}

namespace {

// The publish body of `revision` as it is, under `name` and `enabled`, with `retry` (a disabled
// revision has none of its own).
json RevisionBody(const TaskRevisionRecord& revision, const std::string& name, bool enabled,
                  const std::optional<RetryPolicy>& retry) {
  json body = {{"name", name},
               {"spec", json::parse(revision.spec_json)},
               {"labels", json::parse(revision.labels_json)},
               {"enabled", enabled}};
  if (retry.has_value()) body["retry"] = RetryPolicyToJson(*retry);
  if (revision.approval_json.has_value()) body["approval"] = json::parse(*revision.approval_json);
  if (revision.concurrency.has_value()) body["concurrency"] = *revision.concurrency;
  return body;
}

char AsciiLower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool ContainsIgnoringCase(std::string_view haystack, std::string_view needle) {
  return std::search(haystack.begin(), haystack.end(), needle.begin(), needle.end(),
                     [](char a, char b) { return AsciiLower(a) == AsciiLower(b); }) !=
         haystack.end();
}

}  // namespace

Result<PageResult<TaskView>> ControlService::ListTasks(const PageQuery& page, const Caller& caller,
                                                       const TaskListQuery& query) {
  QL_ASSIGN_OR_RETURN(PageRequest request, ToPageRequest(kTasksCursor, page));
  if (query.text.has_value() && (query.text->empty() || query.text->size() > 200)) {
    return InvalidArgument("invalid_text", "q must be 1..200 bytes of text to find in task names");
  }
  std::optional<std::pair<std::string, std::optional<std::string>>> label;
  if (query.label.has_value()) {
    const size_t eq = query.label->find('=');
    std::string key = query.label->substr(0, eq);
    if (key.empty() || query.label->size() > 512) {
      return InvalidArgument(
          "invalid_label", "label " + QuoteForMessage(*query.label) + " must be KEY or KEY=VALUE");
    }
    label.emplace(std::move(key), eq == std::string::npos
                                      ? std::nullopt
                                      : std::optional<std::string>(query.label->substr(eq + 1)));
  }
  if (query.last_status.has_value() && *query.last_status != "none" &&
      !ParseRunStatus(*query.last_status).has_value()) {
    std::string names = "none";
    for (RunStatus s : kAllRunStatuses) {
      names += ", ";
      names += RunStatusName(s);
    }
    return InvalidArgument("invalid_status", "last_status " + QuoteForMessage(*query.last_status) +
                                                 " is not a run status (" + names + ")");
  }
  QL_ASSIGN_OR_RETURN(std::string project_id, ProjectIdFor(caller));
  QL_RETURN_IF_ERROR(Allow(caller, project_id, Action::kRead, "tasks.list",
                           RoleDenied(Role::kViewer, "tasks.list", project_id)));
  const bool filtered = query.text || query.label || query.last_status;
  PageResult<TaskView> out;
  const size_t wanted = static_cast<size_t>(request.limit);
  // Unfiltered, one page of the store is one page of the list. Filtered, pages are read until
  // `wanted` tasks match; the cursor then continues after the last task examined.
  for (;;) {
    QL_ASSIGN_OR_RETURN(Page<TaskRevisionRecord> listed,
                        store_.definitions().ListTasks(project_id, request));
    std::optional<std::string> last_examined;
    for (const TaskRevisionRecord& revision : listed.items) {
      if (out.items.size() == wanted) break;
      last_examined = revision.task_id;
      QL_ASSIGN_OR_RETURN(TaskView view, ViewOf(revision));
      const std::string& name = view.head.name.empty() ? revision.name : view.head.name;
      if (query.text.has_value() && !ContainsIgnoringCase(name, *query.text)) continue;
      if (label.has_value()) {
        const json labels = json::parse(revision.labels_json, nullptr, false);
        if (!labels.is_object() || !labels.contains(label->first)) continue;
        if (label->second.has_value() && labels[label->first] != *label->second) continue;
      }
      QL_ASSIGN_OR_RETURN(view.overview, OverviewOf(project_id, revision.task_id));
      if (query.last_status.has_value()) {
        const std::string status =
            view.overview->last_run.has_value() ? view.overview->last_run->status : "none";
        if (status != *query.last_status) continue;
      }
      out.items.push_back(std::move(view));
    }
    const bool store_has_more = listed.next_key.has_value();
    const bool page_cut = last_examined.has_value() && !listed.items.empty() &&
                          *last_examined != listed.items.back().task_id;
    if (page_cut || (out.items.size() == wanted && store_has_more)) {
      out.next_cursor = EncodeCursor(kTasksCursor, EncodeIdKey("tasks", *last_examined));
      break;
    }
    if (!store_has_more || !filtered) break;
    request.after_key = listed.next_key;
  }
  return out;
}

Result<PublishedTask> ControlService::SetTaskEnabled(const std::string& task_ref, bool enabled,
                                                     const Caller& caller) {
  QL_ASSIGN_OR_RETURN(TaskView current, GetTask(task_ref, caller));
  const std::string& task_id = current.head.task_id;
  // Decided before the no-op answer, so a caller without the role learns nothing from it.
  QL_ASSIGN_OR_RETURN(const Role floor, ApproverFloor(current.revision));
  QL_RETURN_IF_ERROR(Allow(
      caller, current.head.project_id, Action::kPublish, enabled ? "tasks.enable" : "tasks.disable",
      NotFound("task_not_found", "task " + task_id + " does not exist"), floor));
  if (current.head.deleted_at_ms.has_value()) {
    return NotFound("task_not_found", "task " + task_id + " was deleted");
  }
  if (current.revision.enabled == enabled) {
    current.overview = nullptr;
    return PublishedTask{std::move(current), true, {}, 0};
  }
  std::optional<RetryPolicy> retry = current.retry;
  if (!retry.has_value() && enabled) {
    // A disabled revision has no execution plan: the policy is the last enabled revision's.
    QL_ASSIGN_OR_RETURN(std::vector<TaskRevisionRecord> history,
                        store_.definitions().ListTaskRevisions(task_id));
    for (const TaskRevisionRecord& older : history) {
      if (!older.enabled) continue;
      QL_ASSIGN_OR_RETURN(std::optional<PinnedPlan> plan, PlanOf(older));
      if (plan.has_value()) {
        retry = plan->plan.retry_policy;
        break;
      }
    }
  }
  QL_ASSIGN_OR_RETURN(
      TaskContent content,
      ParseTaskContent(RevisionBody(current.revision, current.revision.name, enabled, retry)));
  return Publish(current.head.project_id, task_id, current.head.current_revision, NewId(), content,
                 caller, /*repin_triggers=*/enabled, /*tombstone=*/false);
}

Result<std::vector<TaskRevisionRecord>> ControlService::TaskHistory(const std::string& task_ref,
                                                                    const Caller& caller) {
  QL_ASSIGN_OR_RETURN(const std::string task_id, ResolveTaskRef(task_ref, caller));
  auto head = store_.definitions().GetTaskHead(task_id);
  if (!head.ok()) {
    return NotFoundAs(head.status(), "task_not_found", "task " + task_id + " does not exist");
  }
  QL_RETURN_IF_ERROR(Allow(caller, head->project_id, Action::kRead, "tasks.history",
                           NotFound("task_not_found", "task " + task_id + " does not exist")));
  return store_.definitions().ListTaskRevisions(task_id);
}

Result<std::string> ControlService::ResolveTaskRef(const std::string& ref, const Caller& caller) {
  if (IsCanonicalUuid(ref)) return ref;
  if (ref.empty()) return InvalidArgument("invalid_id", "task_id is empty: give a task id or name");
  QL_ASSIGN_OR_RETURN(std::string project_id, ProjectIdFor(caller));
  QL_ASSIGN_OR_RETURN(std::optional<TaskHeadRecord> head,
                      store_.definitions().FindTaskByName(project_id, ref));
  if (!head.has_value()) {
    return NotFound("task_not_found", "no task named " + QuoteForMessage(ref) + " in project " +
                                          project_id);
  }
  return head->task_id;
}

Result<std::string> ControlService::ResolveTriggerRef(const std::string& ref,
                                                      const Caller& caller) {
  if (IsCanonicalUuid(ref)) return ref;
  if (ref.empty()) {
    return InvalidArgument("invalid_id", "trigger_id is empty: give a trigger id or name");
  }
  QL_ASSIGN_OR_RETURN(std::string project_id, ProjectIdFor(caller));
  QL_ASSIGN_OR_RETURN(std::optional<TriggerHeadRecord> head,
                      store_.definitions().FindTriggerByName(project_id, ref));
  if (!head.has_value()) {
    return NotFound("trigger_not_found", "no trigger named " + QuoteForMessage(ref) +
                                             " in project " + project_id);
  }
  return head->trigger_id;
}

Result<PublishedTask> ControlService::DeleteTask(const std::string& task_ref,
                                                 const Caller& caller) {
  QL_ASSIGN_OR_RETURN(TaskView current, GetTask(task_ref, caller));
  const std::string& task_id = current.head.task_id;
  QL_RETURN_IF_ERROR(Allow(caller, current.head.project_id, Action::kPublish, "tasks.delete",
                           NotFound("task_not_found", "task " + task_id + " does not exist")));
  if (current.head.deleted_at_ms.has_value()) return PublishedTask{std::move(current), true};
  // The last revision is the current one disabled. Its name is checked as it was stored, not
  // as a new name would be.
  QL_ASSIGN_OR_RETURN(TaskContent content, ParseTaskContent(RevisionBody(
                                               current.revision, "deleted", false, current.retry)));
  content.name = current.revision.name;
  return Publish(current.head.project_id, task_id, current.head.current_revision, NewId(), content,
                 caller, /*repin_triggers=*/false, /*tombstone=*/true);
}

// ---------------------------------------------------------------------------------------------
// Triggers

Result<TriggerView> ControlService::ViewOf(const TriggerHeadRecord& head,
                                           const TriggerRevisionRecord& revision) {
  TriggerView view;
  view.head = head;
  view.revision = revision;
  auto schedule = store_.definitions().GetSchedule(head.trigger_id);
  if (schedule.ok()) {
    view.schedule = std::move(schedule).value();
  } else if (schedule.status().code() != StatusCode::kNotFound) {
    return schedule.status();
  }
  QL_ASSIGN_OR_RETURN(TaskHeadRecord task, store_.definitions().GetTaskHead(revision.task_id));
  QL_ASSIGN_OR_RETURN(TaskRevisionRecord current,
                      store_.definitions().GetTaskRevision(task.task_id, task.current_revision));
  view.pin_stale = PinIsStale(revision, current);
  const bool exhausted =
      view.schedule.has_value() && view.schedule->trigger_revision == revision.revision &&
      (view.schedule->exhausted || view.schedule->next_fire_at_ms == misfire::kExhaustedCursorMs);
  if (head.deleted_at_ms.has_value()) {
    view.state = "deleted";
  } else if (!revision.enabled) {
    view.state = "disabled";
  } else if (view.pin_stale) {
    view.state = "pin_stale";
  } else if (exhausted) {
    view.state = "exhausted";
  } else {
    view.state = "active";
    QL_ASSIGN_OR_RETURN(std::vector<int64_t> next, AdmissionPreview(view, 1));
    if (next.empty()) {
      view.state = "exhausted";
    } else {
      view.next_fire_at_ms = next.front();
    }
  }
  return view;
}

Result<std::vector<int64_t>> ControlService::AdmissionPreview(const TriggerView& view, int count) {
  const TriggerRevisionRecord& t = view.revision;
  auto cron = CronSchedule::Create(t.expression, t.timezone);
  if (!cron.ok()) {
    return Corrupt("trigger_invalid", "stored trigger " + t.trigger_id + " revision " +
                                          std::to_string(t.revision) +
                                          " no longer parses: " + cron.status().message());
  }
  auto policy = ParseMisfirePolicy(t.misfire);
  if (!policy.ok()) {
    return Corrupt("trigger_invalid", "stored trigger " + t.trigger_id + " has misfire policy " +
                                          QuoteForMessage(t.misfire));
  }
  std::optional<int64_t> cursor;
  int64_t published_at = t.created_at_ms;
  if (view.schedule.has_value() && view.schedule->trigger_revision == t.revision) {
    if (view.schedule->exhausted || view.schedule->next_fire_at_ms == misfire::kExhaustedCursorMs) {
      return std::vector<int64_t>();
    }
    cursor = view.schedule->next_fire_at_ms;
    published_at = view.schedule->published_at_ms;
  }
  const CronSchedule& schedule = *cron;
  const misfire::NextFireFn next = [&schedule](int64_t after) { return schedule.NextAfter(after); };
  // Replays the scheduler's decisions at the current time: the same function, the same grace,
  // so the list is exactly what it will admit (late occurrences skipped or fired once), and
  // then the future occurrences in order.
  const int64_t now = clock_.NowMs();
  std::vector<int64_t> out;
  for (int steps = 0; static_cast<int>(out.size()) < count && steps < 4 * count + 8; ++steps) {
    if (cursor.has_value() && *cursor > now) {
      out.push_back(*cursor);
      cursor = next(*cursor);
      if (!cursor.has_value()) break;
      continue;
    }
    const misfire::Decision d =
        misfire::Decide(cursor, now, published_at, options_.grace_ms, *policy, next);
    if (d.admit_scheduled_for_ms.has_value()) out.push_back(*d.admit_scheduled_for_ms);
    if (d.kind == misfire::Decision::Kind::kExhausted || !d.new_cursor_ms.has_value()) break;
    cursor = d.new_cursor_ms;
  }
  return out;
}

Result<PublishedTrigger> ControlService::AddTrigger(const TriggerWrite& write,
                                                    const Caller& caller) {
  if (write.name.has_value()) {
    QL_RETURN_IF_ERROR(
        ValidateObjectName("trigger_invalid_name", "name", *write.name, kMaxTaskNameChars));
  }
  QL_ASSIGN_OR_RETURN(CronSchedule cron, CronSchedule::Create(write.expression, write.timezone));
  QL_ASSIGN_OR_RETURN(MisfirePolicy misfire, ParseMisfirePolicy(write.misfire));
  QL_ASSIGN_OR_RETURN(OverlapPolicy overlap, ParseOverlapPolicy(write.overlap));
  QL_RETURN_IF_ERROR(ValidateJitterMs(write.jitter_ms));
  QL_ASSIGN_OR_RETURN(std::string mutation_id, MutationIdOrNew(write.mutation_id));
  auto task = GetTask(write.task_id, caller);
  if (!task.ok()) return task.status();
  const std::string& task_id = task->head.task_id;
  // A trigger lives in its task's project.
  const std::string project_id = task->head.project_id;
  QL_ASSIGN_OR_RETURN(const Role floor, ApproverFloor(task->revision));
  QL_RETURN_IF_ERROR(Allow(caller, project_id, Action::kPublish, "triggers.create",
                           NotFound("task_not_found", "task " + task_id + " does not exist"),
                           floor));
  if (task->head.deleted_at_ms.has_value()) {
    return Conflict("task_deleted", "task " + task_id + " was deleted");
  }
  if (!task->revision.enabled) {
    return Conflict("task_disabled", "task " + task_id + " revision " +
                                         std::to_string(task->revision.revision) +
                                         " is disabled; a trigger must pin an enabled revision");
  }
  const int64_t now = clock_.NowMs();
  PublishTriggerCommand cmd;
  cmd.project_id = project_id;
  cmd.trigger_id =
      write.mutation_id.has_value() ? DerivedId("trigger", project_id, mutation_id) : NewId();
  cmd.mutation_id = mutation_id;
  cmd.fence = FenceOf(caller, Action::kPublish, floor);
  cmd.now_ms = now;
  cmd.audit = DefinitionFact(caller, "trigger.create", "trigger", cmd.trigger_id, project_id, now);
  // Unnamed: after the task and the last 12 hex digits of the id (random in a new id, a hash
  // of the mutation id in a derived one), as the upgrade named the triggers it found.
  cmd.name = write.name.value_or(task->head.name + "-" + cmd.trigger_id.substr(24));
  TriggerRevisionRecord& r = cmd.revision;
  r.project_id = project_id;
  r.trigger_id = cmd.trigger_id;
  r.revision = 1;
  r.mutation_id = mutation_id;
  r.task_id = task_id;
  r.task_revision = task->revision.revision;
  r.task_digest = task->revision.content_digest;
  r.expression = cron.expression();
  r.timezone = cron.zone().name();
  r.misfire = std::string(MisfirePolicyName(misfire));
  r.overlap = std::string(OverlapPolicyName(overlap));
  r.jitter_ms = write.jitter_ms;
  r.enabled = write.enabled;
  r.content_digest = TriggerContentDigest(r);
  r.created_at_ms = now;
  QL_ASSIGN_OR_RETURN(PublishTriggerResult result,
                      store_.definitions().PublishTriggerRevision(cmd));
  QL_ASSIGN_OR_RETURN(TriggerHeadRecord head,
                      store_.definitions().GetTriggerHead(result.revision.trigger_id));
  QL_ASSIGN_OR_RETURN(TriggerView view, ViewOf(head, result.revision));
  return PublishedTrigger{std::move(view), result.replayed};
}

Result<PublishedTrigger> ControlService::PublishTriggerRevisionOf(
    const TriggerView& current, TriggerRevisionRecord next, const Caller& caller,
    std::string_view audit_action, Action action, std::optional<int64_t> expected_revision,
    const std::string& name, bool tombstone, Role at_least) {
  PublishTriggerCommand cmd;
  cmd.name = name;
  cmd.tombstone = tombstone;
  cmd.fence = FenceOf(caller, action, at_least);
  cmd.project_id = current.head.project_id;
  cmd.trigger_id = current.head.trigger_id;
  cmd.expected_revision = expected_revision.value_or(current.head.current_revision);
  cmd.mutation_id = NewId();
  cmd.now_ms = clock_.NowMs();
  cmd.audit = DefinitionFact(caller, audit_action, "trigger", cmd.trigger_id, cmd.project_id,
                             cmd.now_ms);
  next.revision = *cmd.expected_revision + 1;
  next.mutation_id = cmd.mutation_id;
  next.created_at_ms = cmd.now_ms;
  next.content_digest = TriggerContentDigest(next);
  cmd.revision = std::move(next);
  QL_ASSIGN_OR_RETURN(PublishTriggerResult result,
                      store_.definitions().PublishTriggerRevision(cmd));
  QL_ASSIGN_OR_RETURN(TriggerHeadRecord head,
                      store_.definitions().GetTriggerHead(result.revision.trigger_id));
  QL_ASSIGN_OR_RETURN(TriggerView view, ViewOf(head, result.revision));
  return PublishedTrigger{std::move(view), result.replayed};
}

Result<TriggerView> ControlService::GetTrigger(const std::string& trigger_ref,
                                               const Caller& caller) {
  QL_ASSIGN_OR_RETURN(const std::string trigger_id, ResolveTriggerRef(trigger_ref, caller));
  auto head = store_.definitions().GetTriggerHead(trigger_id);
  if (!head.ok()) {
    return NotFoundAs(head.status(), "trigger_not_found",
                      "trigger " + trigger_id + " does not exist");
  }
  QL_RETURN_IF_ERROR(
      Allow(caller, head->project_id, Action::kRead, "triggers.get",
            NotFound("trigger_not_found", "trigger " + trigger_id + " does not exist")));
  QL_ASSIGN_OR_RETURN(TriggerRevisionRecord revision,
                      store_.definitions().GetTriggerRevision(trigger_id, head->current_revision));
  return ViewOf(*head, revision);
}

Result<PublishedTrigger> ControlService::DeleteTrigger(const std::string& trigger_ref,
                                                       const Caller& caller) {
  QL_ASSIGN_OR_RETURN(TriggerView current, GetTrigger(trigger_ref, caller));
  QL_RETURN_IF_ERROR(Allow(caller, current.head.project_id, Action::kPublish, "triggers.delete",
                           NotFound("trigger_not_found",
                                    "trigger " + current.head.trigger_id + " does not exist")));
  if (current.head.deleted_at_ms.has_value()) return PublishedTrigger{std::move(current), true};
  TriggerRevisionRecord next = current.revision;
  next.enabled = false;
  return PublishTriggerRevisionOf(current, std::move(next), caller, "trigger.delete",
                                  Action::kPublish, std::nullopt, "", /*tombstone=*/true);
}

Result<PublishedTrigger> ControlService::SetTriggerEnabled(const std::string& trigger_id,
                                                           bool enabled, const Caller& caller) {
  QL_ASSIGN_OR_RETURN(TriggerView current, GetTrigger(trigger_id, caller));
  // Disabling is always allowed; enabling a trigger of a guarded task needs its approvers' role.
  Role floor = Role::kNone;
  if (enabled) {
    QL_ASSIGN_OR_RETURN(floor, TriggerFloor(current));
  }
  QL_RETURN_IF_ERROR(
      Allow(caller, current.head.project_id, Action::kToggleTriggers, "triggers.toggle",
            NotFound("trigger_not_found", "trigger " + trigger_id + " does not exist"), floor));
  QL_RETURN_IF_ERROR(RequireLive(current));
  if (current.revision.enabled == enabled) return PublishedTrigger{std::move(current), true};
  if (enabled && current.pin_stale) {
    return Conflict("trigger_pin_stale",
                    "trigger " + trigger_id + " pins task revision " +
                        std::to_string(current.revision.task_revision) +
                        ", which is no longer the task's current enabled revision; repin it "
                        "before enabling");
  }
  TriggerRevisionRecord next = current.revision;
  next.enabled = enabled;
  return PublishTriggerRevisionOf(current, std::move(next), caller,
                                  enabled ? "trigger.enable" : "trigger.disable",
                                  Action::kToggleTriggers, std::nullopt, "", false, floor);
}

Result<PublishedTrigger> ControlService::RepinTrigger(const std::string& trigger_id,
                                                      const Caller& caller) {
  QL_ASSIGN_OR_RETURN(TriggerView current, GetTrigger(trigger_id, caller));
  QL_ASSIGN_OR_RETURN(const Role floor, TriggerFloor(current));
  QL_RETURN_IF_ERROR(
      Allow(caller, current.head.project_id, Action::kPublish, "triggers.repin",
            NotFound("trigger_not_found", "trigger " + trigger_id + " does not exist"), floor));
  QL_RETURN_IF_ERROR(RequireLive(current));
  // Authorized above for the trigger's project, which is its task's.
  QL_ASSIGN_OR_RETURN(TaskView task, GetTask(current.revision.task_id));
  if (task.revision.revision == current.revision.task_revision &&
      task.revision.content_digest == current.revision.task_digest) {
    if (current.revision.enabled && !task.revision.enabled) {
      return Conflict("task_disabled", "task " + task.head.task_id + " revision " +
                                           std::to_string(task.revision.revision) +
                                           " is disabled; disable the trigger or publish an "
                                           "enabled task revision");
    }
    return PublishedTrigger{std::move(current), true};
  }
  if (current.revision.enabled && !task.revision.enabled) {
    return Conflict("task_disabled", "task " + task.head.task_id + " revision " +
                                         std::to_string(task.revision.revision) +
                                         " is disabled; an enabled trigger cannot pin it");
  }
  TriggerRevisionRecord next = current.revision;
  next.task_revision = task.revision.revision;
  next.task_digest = task.revision.content_digest;
  return PublishTriggerRevisionOf(current, std::move(next), caller, "trigger.repin",
                                  Action::kPublish, std::nullopt, "", false, floor);
}

Result<PublishedTrigger> ControlService::EditTrigger(const std::string& trigger_id,
                                                     int64_t expected_revision,
                                                     const TriggerEdit& edit,
                                                     const Caller& caller) {
  if (expected_revision < 1) {
    return InvalidArgument("invalid_expected_revision",
                           "expected_revision must be at least 1, got " +
                               std::to_string(expected_revision));
  }
  QL_ASSIGN_OR_RETURN(TriggerView current, GetTrigger(trigger_id, caller));
  QL_ASSIGN_OR_RETURN(const Role floor, TriggerFloor(current));
  QL_RETURN_IF_ERROR(
      Allow(caller, current.head.project_id, Action::kPublish, "triggers.edit",
            NotFound("trigger_not_found", "trigger " + trigger_id + " does not exist"), floor));
  QL_RETURN_IF_ERROR(RequireLive(current));
  TriggerRevisionRecord next = current.revision;
  QL_ASSIGN_OR_RETURN(CronSchedule cron,
                      CronSchedule::Create(edit.expression.value_or(next.expression),
                                           edit.timezone.value_or(next.timezone)));
  QL_ASSIGN_OR_RETURN(MisfirePolicy misfire,
                      ParseMisfirePolicy(edit.misfire.value_or(next.misfire)));
  QL_ASSIGN_OR_RETURN(OverlapPolicy overlap,
                      ParseOverlapPolicy(edit.overlap.value_or(next.overlap)));
  next.expression = cron.expression();
  next.timezone = cron.zone().name();
  next.misfire = std::string(MisfirePolicyName(misfire));
  next.overlap = std::string(OverlapPolicyName(overlap));
  next.jitter_ms = edit.jitter_ms.value_or(next.jitter_ms);
  QL_RETURN_IF_ERROR(ValidateJitterMs(next.jitter_ms));
  if (edit.name.has_value()) {
    QL_RETURN_IF_ERROR(
        ValidateObjectName("trigger_invalid_name", "name", *edit.name, kMaxTaskNameChars));
  }
  const bool renamed = edit.name.has_value() && *edit.name != current.head.name;
  if (expected_revision == current.head.current_revision && !renamed &&
      TriggerContentDigest(next) == current.revision.content_digest) {
    return PublishedTrigger{std::move(current), true};
  }
  return PublishTriggerRevisionOf(current, std::move(next), caller, "trigger.revise",
                                  Action::kPublish, expected_revision, renamed ? *edit.name : "",
                                  false, floor);
}

Result<PageResult<TriggerView>> ControlService::ListTriggers(
    const std::optional<std::string>& task_ref, const PageQuery& page, const Caller& caller) {
  std::optional<std::string> task_id;
  if (task_ref.has_value()) {
    QL_ASSIGN_OR_RETURN(task_id, ResolveTaskRef(*task_ref, caller));
  }
  QL_ASSIGN_OR_RETURN(PageRequest request, ToPageRequest(kTriggersCursor, page));
  QL_ASSIGN_OR_RETURN(std::string project_id, ProjectIdFor(caller));
  QL_RETURN_IF_ERROR(Allow(caller, project_id, Action::kRead, "triggers.list",
                           RoleDenied(Role::kViewer, "triggers.list", project_id)));
  QL_ASSIGN_OR_RETURN(Page<TriggerRevisionRecord> listed,
                      store_.definitions().ListTriggers(project_id, task_id, request));
  PageResult<TriggerView> out;
  out.items.reserve(listed.items.size());
  for (const TriggerRevisionRecord& revision : listed.items) {
    QL_ASSIGN_OR_RETURN(TriggerHeadRecord head,
                        store_.definitions().GetTriggerHead(revision.trigger_id));
    QL_ASSIGN_OR_RETURN(TriggerView view, ViewOf(head, revision));
    out.items.push_back(std::move(view));
  }
  if (listed.next_key.has_value()) {
    out.next_cursor = EncodeCursor(kTriggersCursor, *listed.next_key);
  }
  return out;
}

Result<TriggerPreview> ControlService::PreviewTrigger(const std::string& trigger_id, int count,
                                                      const Caller& caller) {
  if (count < 1 || count > kMaxPreviewCount) {
    return InvalidArgument("invalid_count", "count must be 1.." + std::to_string(kMaxPreviewCount) +
                                                ", got " + std::to_string(count));
  }
  QL_ASSIGN_OR_RETURN(TriggerView view, GetTrigger(trigger_id, caller));
  QL_ASSIGN_OR_RETURN(std::vector<int64_t> times, AdmissionPreview(view, count));
  return TriggerPreview{std::move(view), std::move(times)};
}

Result<CronPreview> ControlService::PreviewCron(const std::string& expression,
                                                const std::string& timezone,
                                                std::optional<int64_t> from_ms, int count) {
  if (count < 1 || count > kMaxPreviewCount) {
    return InvalidArgument("invalid_count", "count must be 1.." + std::to_string(kMaxPreviewCount) +
                                                ", got " + std::to_string(count));
  }
  QL_ASSIGN_OR_RETURN(CronSchedule cron, CronSchedule::Create(expression, timezone));
  CronPreview out;
  out.expression = cron.expression();
  out.timezone = cron.zone().name();
  int64_t after = from_ms.value_or(clock_.NowMs());
  while (static_cast<int>(out.fire_times_ms.size()) < count) {
    std::optional<int64_t> next = cron.NextAfter(after);
    if (!next.has_value()) break;
    out.fire_times_ms.push_back(*next);
    after = *next;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Runs

Result<StartedRun> ControlService::CreateManualRun(
    const std::string& task_id, const std::optional<std::string>& idempotency_key, int priority,
    const std::optional<std::string>& retry_of, const Caller& caller) {
  auto head = store_.definitions().GetTaskHead(task_id);
  if (!head.ok()) {
    return NotFoundAs(head.status(), "task_not_found", "task " + task_id + " does not exist");
  }
  const std::string project_id = head->project_id;
  QL_RETURN_IF_ERROR(Allow(caller, project_id, Action::kOperateRuns, "runs.create",
                           NotFound("task_not_found", "task " + task_id + " does not exist")));
  if (head->deleted_at_ms.has_value()) {
    return Conflict("task_deleted", "task " + task_id + " was deleted; it starts no runs");
  }
  auto replay = [&]() -> Result<std::optional<StartedRun>> {
    auto existing = store_.runs().FindRunByIdempotencyKey(project_id, *idempotency_key);
    if (!existing.ok()) {
      if (existing.status().code() == StatusCode::kNotFound) {
        return std::optional<StartedRun>();
      }
      return existing.status();
    }
    if (existing->task_id != task_id) {
      return Conflict("idempotency_key_reused",
                      "idempotency_key " + QuoteForMessage(*idempotency_key) +
                          " already names run " + existing->id + " of task " + existing->task_id);
    }
    return std::optional<StartedRun>(StartedRun{std::move(existing).value(), true});
  };
  if (idempotency_key.has_value()) {
    QL_ASSIGN_OR_RETURN(std::optional<StartedRun> replayed, replay());
    if (replayed.has_value()) return std::move(*replayed);
  }
  QL_ASSIGN_OR_RETURN(TaskView task, GetTask(task_id));  // authorized above
  if (!task.revision.enabled) {
    return Conflict("task_disabled", "task " + task_id + " revision " +
                                         std::to_string(task.revision.revision) +
                                         " is disabled; publish an enabled revision to run it");
  }
  QL_ASSIGN_OR_RETURN(std::optional<PinnedPlan> plan, PlanOf(task.revision));
  if (!plan.has_value()) {
    return Conflict("execution_revision_missing",
                    "task " + task_id + " revision " + std::to_string(task.revision.revision) +
                        " has no execution revision for executor " + options_.executor_type);
  }
  QL_ASSIGN_OR_RETURN(std::optional<ApprovalPolicy> approval, RequiredApproval(task.revision));
  if (approval.has_value()) {
    return RequestApproval(task, *plan, idempotency_key, priority, retry_of, caller);
  }
  NewRun run;
  run.run_id = NewId();
  run.attempt_id = NewId();
  run.project_id = project_id;
  run.task_id = task_id;
  run.task_revision = task.revision.revision;
  run.task_digest = task.revision.content_digest;
  run.execution_revision_id = plan->record.id;
  run.executor_type = options_.executor_type;
  run.trigger_type = std::string(TriggerTypeName(TriggerType::kManual));
  run.priority = priority;
  run.idempotency_key = idempotency_key;
  run.retry_of_run_id = retry_of;
  run.retry_policy = plan->plan.retry_policy;
  run.actor_type = std::string(ActorTypeName(ActorType::kUser));
  run.fence = FenceOf(caller, Action::kOperateRuns);
  run.now_ms = clock_.NowMs();
  auto created = store_.runs().CreateRun(run);
  if (created.ok()) return StartedRun{std::move(created).value(), false};
  if (created.status().code() == StatusCode::kDuplicate && idempotency_key.has_value()) {
    // Another request with the same key committed first: answer as its replay.
    QL_ASSIGN_OR_RETURN(std::optional<StartedRun> replayed, replay());
    if (replayed.has_value()) return std::move(*replayed);
  }
  return created.status();
}

Actor ControlService::ActorOf(const Caller& caller) {
  return Actor{caller.principal_id, caller.request_id};
}

Result<StartedRun> ControlService::RequestApproval(
    const TaskView& task, const PinnedPlan& plan,
    const std::optional<std::string>& idempotency_key, int priority,
    const std::optional<std::string>& retry_of, const Caller& caller) {
  if (caller.principal_id.empty()) {
    return PermissionDenied("principal_required",
                            "task " + task.head.task_id +
                                " requires approval; only a principal can request a run of it");
  }
  RequestApprovalCommand cmd;
  cmd.actor = ActorOf(caller);
  cmd.id = NewId();
  cmd.project_id = task.head.project_id;
  cmd.task_id = task.head.task_id;
  cmd.task_revision = task.revision.revision;
  cmd.task_digest = task.revision.content_digest;
  cmd.execution_revision_id = plan.record.id;
  cmd.priority = priority;
  cmd.idempotency_key = idempotency_key;
  cmd.retry_of_run_id = retry_of;
  cmd.now_ms = clock_.NowMs();
  QL_ASSIGN_OR_RETURN(RequestApprovalResult requested, store_.approvals().RequestApproval(cmd));
  if (requested.replayed && requested.request.status != kApprovalPending) {
    // The key names a request that was decided: answering 202 would read as still pending.
    const ApprovalRequestRecord& r = requested.request;
    const std::string reason = r.status == kApprovalApproved
                                   ? std::string("approval_already_approved")
                                   : "approval_" + r.status;
    return Conflict(reason, "idempotency_key " + QuoteForMessage(*idempotency_key) +
                                " names approval request " + r.id + ", which was " + r.status +
                                "; request the run again with a new idempotency_key");
  }
  StartedRun out;
  out.replayed = requested.replayed;
  out.approval = std::move(requested.request);
  return out;
}

Result<ApprovalRequestRecord> ControlService::AllowedRequest(const std::string& request_id,
                                                             Action action,
                                                             std::string_view target,
                                                             const Caller& caller) {
  QL_RETURN_IF_ERROR(ValidateId("approval_id", request_id));
  const Status hidden =
      NotFound("approval_not_found", "approval request " + request_id + " does not exist");
  auto view = store_.approvals().GetApproval(request_id);
  if (!view.ok()) return NotFoundAs(view.status(), "approval_not_found", hidden.message());
  QL_RETURN_IF_ERROR(Allow(caller, view->request.project_id, action, target, hidden));
  return std::move(view->request);
}

Result<PageResult<ApprovalRequestRecord>> ControlService::ListApprovals(
    const std::optional<std::string>& status, const PageQuery& page, const Caller& caller) {
  QL_ASSIGN_OR_RETURN(PageRequest request, ToPageRequest(kApprovalsCursor, page));
  if (status.has_value()) QL_RETURN_IF_ERROR(ValidateApprovalStatus(*status));
  QL_ASSIGN_OR_RETURN(std::string project_id, ProjectIdFor(caller));
  QL_RETURN_IF_ERROR(Allow(caller, project_id, Action::kRead, "approvals.list",
                           RoleDenied(Role::kViewer, "approvals.list", project_id)));
  ApprovalFilter filter;
  filter.project_id = project_id;
  filter.status = status;
  QL_ASSIGN_OR_RETURN(Page<ApprovalRequestRecord> listed,
                      store_.approvals().ListApprovals(filter, request));
  PageResult<ApprovalRequestRecord> out;
  out.items = std::move(listed.items);
  if (listed.next_key.has_value()) {
    out.next_cursor = EncodeCursor(kApprovalsCursor, *listed.next_key);
  }
  return out;
}

Result<ApprovalView> ControlService::GetApproval(const std::string& request_id,
                                                 const Caller& caller) {
  QL_RETURN_IF_ERROR(AllowedRequest(request_id, Action::kRead, "approvals.get", caller).status());
  return store_.approvals().GetApproval(request_id);
}

Result<ApproveResult> ControlService::Approve(const std::string& request_id,
                                              const Caller& caller) {
  QL_ASSIGN_OR_RETURN(ApprovalRequestRecord request,
                      AllowedRequest(request_id, Action::kRead, "approvals.approve", caller));
  if (caller.principal_id.empty()) {
    return PermissionDenied("principal_required", "only a principal can approve a request");
  }
  if (caller.principal_id == request.requester_id) {
    // Whatever roles the requester holds, the second pair of eyes must be someone else's.
    return PermissionDenied("approval_self", "approval request " + request_id +
                                                 " was made by the same principal; another one "
                                                 "must approve it");
  }
  QL_RETURN_IF_ERROR(
      Allow(caller, request.project_id, Action::kApprove, "approvals.approve",
            NotFound("approval_not_found", "approval request " + request_id + " does not exist")));
  // The retry policy of the run comes from the pinned plan; the store re-verifies the pin.
  auto execution = store_.definitions().GetExecutionRevision(request.execution_revision_id);
  if (!execution.ok()) {
    if (execution.status().code() != StatusCode::kNotFound) return execution.status();
    return Conflict("approval_stale", "the plan of approval request " + request_id +
                                          " no longer exists");
  }
  QL_ASSIGN_OR_RETURN(json plan_json, ParseJsonStrict(execution->plan_json));
  QL_ASSIGN_OR_RETURN(ExecutionPlan plan, PlanFromJson(plan_json));
  QL_RETURN_IF_ERROR(VerifyPlanDigest(plan, execution->plan_digest));
  ApproveCommand cmd;
  cmd.actor = ActorOf(caller);
  cmd.request_id = request_id;
  cmd.decision_id = NewId();
  cmd.action_id = NewId();
  cmd.receipt_id = NewId();
  cmd.run_id = NewId();
  cmd.attempt_id = NewId();
  cmd.executor_type = execution->executor_type;
  cmd.retry_policy = plan.retry_policy;
  cmd.now_ms = clock_.NowMs();
  return store_.approvals().Approve(cmd);
}

Result<ApprovalView> ControlService::Reject(const std::string& request_id,
                                            const std::string& reason, const Caller& caller) {
  QL_RETURN_IF_ERROR(ValidateApprovalReason(reason));
  QL_ASSIGN_OR_RETURN(ApprovalRequestRecord request,
                      AllowedRequest(request_id, Action::kOperateRuns, "approvals.reject", caller));
  if (caller.principal_id.empty()) {
    return PermissionDenied("principal_required", "only a principal can reject a request");
  }
  return store_.approvals().Reject(
      RejectCommand{ActorOf(caller), request.id, NewId(), reason, clock_.NowMs()});
}

Result<ResolveRunResult> ControlService::ResolveRun(const std::string& run_id,
                                                    const std::string& resolution,
                                                    const std::string& reason,
                                                    const Caller& caller) {
  QL_RETURN_IF_ERROR(ValidateId("run_id", run_id));
  QL_RETURN_IF_ERROR(ValidateApprovalReason(reason));
  QL_ASSIGN_OR_RETURN(RunView view, GetRun(run_id, caller));
  QL_RETURN_IF_ERROR(Allow(caller, view.run.project_id, Action::kApprove, "runs.resolve",
                           NotFound("run_not_found", "run " + run_id + " does not exist")));
  if (caller.principal_id.empty()) {
    return PermissionDenied("principal_required", "only a principal can resolve a run");
  }
  ResolveRunCommand cmd;
  cmd.actor = ActorOf(caller);
  cmd.run_id = run_id;
  cmd.resolution = resolution;
  cmd.reason = reason;
  cmd.new_run_id = NewId();
  cmd.new_attempt_id = NewId();
  cmd.now_ms = clock_.NowMs();
  return store_.approvals().ResolveRun(cmd);
}

Result<int> ControlService::ExpireApprovals(int limit) {
  return store_.approvals().ExpireDue(limit, clock_.NowMs());
}

Result<StartedRun> ControlService::StartRun(const StartRunRequest& request,
                                            const Caller& caller) {
  QL_ASSIGN_OR_RETURN(const std::string task_id, ResolveTaskRef(request.task_id, caller));
  if (request.idempotency_key.has_value()) {
    QL_RETURN_IF_ERROR(ValidateToken("idempotency_key", "invalid_idempotency_key",
                                     *request.idempotency_key, kMaxIdempotencyKeyBytes));
    if (request.idempotency_key->rfind("ql3:", 0) == 0) {
      return InvalidArgument("invalid_idempotency_key",
                             "idempotency_key " + QuoteForMessage(*request.idempotency_key) +
                                 " starts with \"ql3:\", which is reserved for cron occurrences");
    }
  }
  const int priority = request.priority.value_or(0);
  if (priority < kMinRunPriority || priority > kMaxRunPriority) {
    return InvalidArgument("invalid_priority", "priority must be " +
                                                   std::to_string(kMinRunPriority) + ".." +
                                                   std::to_string(kMaxRunPriority) + ", got " +
                                                   std::to_string(priority));
  }
  return CreateManualRun(task_id, request.idempotency_key, priority, std::nullopt, caller);
}

Result<StartedRun> ControlService::RetryRun(const std::string& run_id, const Caller& caller) {
  QL_ASSIGN_OR_RETURN(RunView view, GetRun(run_id, caller));
  const RunRecord* run = &view.run;
  const std::optional<RunStatus> status = ParseRunStatus(run->status);
  if (!status.has_value() || !IsTerminal(*status)) {
    return Conflict("run_not_terminal", "run " + run_id + " is " + run->status +
                                            "; only succeeded, failed, cancelled, timed_out or skipped "
                                            "runs can be retried");
  }
  return CreateManualRun(run->task_id, std::nullopt, run->priority, run_id, caller);
}

Result<RunRecord> ControlService::CancelRun(const std::string& run_id,
                                            const std::optional<std::string>& reason,
                                            const Caller& caller) {
  QL_RETURN_IF_ERROR(ValidateId("run_id", run_id));
  const std::string why = reason.value_or("user");
  QL_RETURN_IF_ERROR(ValidateCancelReason(why));
  QL_ASSIGN_OR_RETURN(RunView view, GetRun(run_id, caller));
  const RunRecord* run = &view.run;
  QL_RETURN_IF_ERROR(Allow(caller, run->project_id, Action::kOperateRuns, "runs.cancel",
                           NotFound("run_not_found", "run " + run_id + " does not exist")));
  const std::optional<RunStatus> status = ParseRunStatus(run->status);
  if (status.has_value() && IsTerminal(*status)) {
    return Conflict("run_already_terminal",
                    "run " + run_id + " already finished as " + run->status);
  }
  if (status == RunStatus::kRecoveryRequired) {
    return Conflict("run_recovery_required",
                    "run " + run_id + " requires recovery; resolve it (ql run resolve) instead");
  }
  return store_.runs().RequestCancel(run_id, why, std::string(ActorTypeName(ActorType::kUser)),
                                     clock_.NowMs(), FenceOf(caller, Action::kOperateRuns));
}

Result<RunView> ControlService::GetRun(const std::string& run_id, const Caller& caller) {
  QL_RETURN_IF_ERROR(ValidateId("run_id", run_id));
  auto run = store_.runs().GetRun(run_id);
  if (!run.ok()) {
    return NotFoundAs(run.status(), "run_not_found", "run " + run_id + " does not exist");
  }
  QL_RETURN_IF_ERROR(Allow(caller, run->project_id, Action::kRead, "runs.get",
                           NotFound("run_not_found", "run " + run_id + " does not exist")));
  QL_ASSIGN_OR_RETURN(std::vector<AttemptRecord> attempts, store_.runs().ListAttempts(run_id));
  RunView view{std::move(run).value(), std::move(attempts), {}};
  // The script a run executes is named by its pinned plan (a plan gone or unreadable names none:
  // the run's own record says why it failed).
  auto execution = store_.definitions().GetExecutionRevision(view.run.execution_revision_id);
  if (execution.ok()) {
    Result<json> plan_json = ParseJsonStrict(execution->plan_json);
    Result<ExecutionPlan> plan =
        plan_json.ok() ? PlanFromJson(*plan_json) : Result<ExecutionPlan>(plan_json.status());
    if (plan.ok() && plan->script) view.artifacts.push_back(*plan->script);
  } else if (execution.status().code() != StatusCode::kNotFound) {
    return execution.status();
  }
  return view;
}

Result<ControlService::DisplayNames> ControlService::NamesOf(
    const std::set<std::string>& task_ids, const std::set<std::string>& trigger_ids,
    const std::set<std::string>& principal_ids) {
  DisplayNames out;
  auto known = [](const Status& st) { return st.ok() || st.code() == StatusCode::kNotFound; };
  for (const std::string& id : task_ids) {
    auto head = store_.definitions().GetTaskHead(id);
    if (!known(head.status())) return head.status();
    if (!head.ok()) continue;
    if (!head->name.empty()) {
      out.tasks[id] = head->name;
      continue;
    }
    auto revision = store_.definitions().GetTaskRevision(id, head->current_revision);
    if (!known(revision.status())) return revision.status();
    if (revision.ok()) out.tasks[id] = revision->name;
  }
  for (const std::string& id : trigger_ids) {
    auto head = store_.definitions().GetTriggerHead(id);
    if (!known(head.status())) return head.status();
    if (head.ok()) out.triggers[id] = head->name;
  }
  for (const std::string& id : principal_ids) {
    auto principal = store_.governance().GetPrincipal(id);
    if (!known(principal.status())) return principal.status();
    if (principal.ok()) out.principals[id] = principal->name;
  }
  return out;
}

Result<std::string> ControlService::ResolveRunRef(const std::string& ref, const Caller& caller) {
  if (IsCanonicalUuid(ref)) return ref;
  // A prefix of a canonical id: lowercase hex digits, dashes exactly where an id has them.
  static constexpr std::string_view kLow = "00000000-0000-0000-0000-000000000000";
  static constexpr std::string_view kHigh = "ffffffff-ffff-ffff-ffff-ffffffffffff";
  bool prefix = ref.size() >= 8 && ref.size() < kLow.size();
  for (size_t i = 0; prefix && i < ref.size(); ++i) {
    const char c = ref[i];
    prefix = kLow[i] == '-' ? c == '-' : ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
  }
  if (!prefix) {
    return InvalidArgument("invalid_id", "run id " + QuoteForMessage(ref) +
                                             " is neither a run id nor a prefix of one (at least "
                                             "8 characters, lowercase hex digits and dashes)");
  }
  QL_ASSIGN_OR_RETURN(std::string project_id, ProjectIdFor(caller));
  QL_RETURN_IF_ERROR(Allow(caller, project_id, Action::kRead, "runs.get",
                           NotFound("run_not_found", "no run id starts with " + ref)));
  RunFilter filter;
  filter.project_id = project_id;
  filter.id_range.emplace(ref + std::string(kLow.substr(ref.size())),
                          ref + std::string(kHigh.substr(ref.size())));
  PageRequest request;
  request.limit = 5;
  QL_ASSIGN_OR_RETURN(Page<RunRecord> found, store_.runs().ListRuns(filter, request));
  std::erase_if(found.items, [&](const RunRecord& r) { return !r.id.starts_with(ref); });
  if (found.items.empty()) {
    return NotFound("run_not_found",
                    "no run of project " + project_id + " has an id starting with " + ref);
  }
  if (found.items.size() > 1) {
    // Each candidate with its task's name and creation time, so a person can tell which is meant;
    // a task whose name cannot be read is named by its id.
    std::set<std::string> task_ids;
    for (const RunRecord& r : found.items) task_ids.insert(r.task_id);
    Result<DisplayNames> names = NamesOf(task_ids, {}, {});
    std::string candidates;
    for (const RunRecord& r : found.items) {
      std::string task = r.task_id;
      if (names.ok()) {
        if (auto it = names->tasks.find(r.task_id); it != names->tasks.end()) {
          task = QuoteForMessage(it->second);
        }
      }
      candidates += (candidates.empty() ? "" : "; ") + r.id + " (task " + task + ", created " +
                    FormatRfc3339Utc(r.created_at_ms) + ")";
    }
    return Conflict(
        "run_ref_ambiguous",
        "run id prefix " + ref + " matches " +
            (found.next_key.has_value() ? std::string("more than 5 runs, the newest: ")
                                        : std::to_string(found.items.size()) + " runs: ") +
            candidates + "; give more characters of the one you mean");
  }
  return std::move(found.items.front().id);
}

Result<std::map<std::string, std::string>> ControlService::ShortRunIds(
    const std::vector<RunRecord>& runs, const Caller& caller) {
  constexpr size_t kMinPrefix = 8;
  constexpr int kMaxWindowPages = 10;
  // Runs sharing their first 8 characters were created within the same ~65 s (UUIDv7): only
  // they can share a longer prefix, so each such window of the project is read once.
  std::map<std::pair<std::string, std::string>, std::vector<std::string>> windows;
  for (const RunRecord& r : runs) {
    if (r.id.size() < kMinPrefix) continue;
    windows[{r.project_id, r.id.substr(0, kMinPrefix)}].push_back(r.id);
  }
  std::map<std::string, std::string> out;
  std::set<std::string> allowed;
  for (const auto& [window, ids] : windows) {
    const auto& [project_id, prefix] = window;
    if (allowed.insert(project_id).second) {
      QL_RETURN_IF_ERROR(Allow(caller, project_id, Action::kRead, "runs.list",
                               RoleDenied(Role::kViewer, "runs.list", project_id)));
    }
    RunFilter filter;
    filter.project_id = project_id;
    filter.id_range.emplace(prefix + "-0000-0000-0000-000000000000",
                            prefix + "-ffff-ffff-ffff-ffffffffffff");
    PageRequest request;
    request.limit = kMaxPageLimit;
    std::vector<std::string> neighbours;
    bool complete = false;
    for (int page = 0; page < kMaxWindowPages && !complete; ++page) {
      QL_ASSIGN_OR_RETURN(Page<RunRecord> found, store_.runs().ListRuns(filter, request));
      for (RunRecord& r : found.items) neighbours.push_back(std::move(r.id));
      complete = !found.next_key.has_value();
      request.after_key = std::move(found.next_key);
    }
    for (const std::string& id : ids) {
      out[id] = complete ? id.substr(0, UniqueIdPrefixLength(id, neighbours, kMinPrefix)) : id;
    }
  }
  return out;
}

Result<AttemptRecord> ControlService::LatestAttempt(const std::string& run_id,
                                                    const Caller& caller) {
  QL_ASSIGN_OR_RETURN(RunView view, GetRun(run_id, caller));
  if (view.attempts.empty()) {
    return NotFound("attempt_not_found", "run " + run_id + " has no attempt");
  }
  return std::move(view.attempts.back());
}

Result<PageResult<RunRecord>> ControlService::ListRuns(const RunQuery& query,
                                                       const PageQuery& page,
                                                       const Caller& caller) {
  std::optional<std::string> task_id;
  std::optional<std::string> trigger_id;
  if (query.task_id.has_value()) {
    QL_ASSIGN_OR_RETURN(task_id, ResolveTaskRef(*query.task_id, caller));
  }
  if (query.trigger_id.has_value()) {
    QL_ASSIGN_OR_RETURN(trigger_id, ResolveTriggerRef(*query.trigger_id, caller));
  }
  if (query.status.has_value() && !ParseRunStatus(*query.status).has_value()) {
    std::string names;
    for (RunStatus s : kAllRunStatuses) {
      if (!names.empty()) names += ", ";
      names += RunStatusName(s);
    }
    return InvalidArgument("invalid_status", "status " + QuoteForMessage(*query.status) +
                                                 " is not a run status (" + names + ")");
  }
  QL_ASSIGN_OR_RETURN(PageRequest request, ToPageRequest(kRunsCursor, page));
  QL_ASSIGN_OR_RETURN(std::string project_id, ProjectIdFor(caller));
  QL_RETURN_IF_ERROR(Allow(caller, project_id, Action::kRead, "runs.list",
                           RoleDenied(Role::kViewer, "runs.list", project_id)));
  RunFilter filter;
  filter.project_id = project_id;
  filter.task_id = task_id;
  filter.trigger_id = trigger_id;
  filter.status = query.status;
  if (query.since_ms.has_value() && query.until_ms.has_value() &&
      *query.since_ms >= *query.until_ms) {
    return InvalidArgument("invalid_time_range", "since must be before until");
  }
  filter.created_from_ms = query.since_ms;
  filter.created_before_ms = query.until_ms;
  QL_ASSIGN_OR_RETURN(Page<RunRecord> listed, store_.runs().ListRuns(filter, request));
  PageResult<RunRecord> out;
  out.items = std::move(listed.items);
  if (listed.next_key.has_value()) out.next_cursor = EncodeCursor(kRunsCursor, *listed.next_key);
  return out;
}

Result<std::vector<EventRecord>> ControlService::ListRunEvents(const std::string& run_id,
                                                               int64_t after_sequence, int limit,
                                                               const Caller& caller) {
  QL_RETURN_IF_ERROR(ValidateId("run_id", run_id));
  if (after_sequence < 0) {
    return InvalidArgument("invalid_after",
                           "after must be >= 0, got " + std::to_string(after_sequence));
  }
  QL_RETURN_IF_ERROR(ValidateLimit(limit));
  QL_RETURN_IF_ERROR(GetRun(run_id, caller).status());
  return store_.runs().ListEvents(run_id, after_sequence, limit);
}

Result<int64_t> ControlService::CountQueuedRuns() {
  return store_.runs().CountRunsInStatus(RunStatus::kQueued);
}

Result<StatusSummary> ControlService::GetStatus(const Caller& caller) {
  StatusSummary out;
  QL_RETURN_IF_ERROR(EnsureDefaultProject().status());
  QL_ASSIGN_OR_RETURN(std::string project_id, ProjectIdFor(caller));
  QL_RETURN_IF_ERROR(Allow(caller, project_id, Action::kRead, "status",
                           RoleDenied(Role::kViewer, "status", project_id)));
  QL_ASSIGN_OR_RETURN(out.project, store_.projects().GetProject(project_id));
  out.executor_type = options_.executor_type;
  out.now_ms = clock_.NowMs();
  // Only what the caller may see: the project it asked about.
  QL_ASSIGN_OR_RETURN(auto counts, store_.runs().CountRunsByStatus(project_id));
  for (RunStatus s : kAllRunStatuses) {
    const std::string name(RunStatusName(s));
    int64_t n = 0;
    for (const auto& [status, count] : counts) {
      if (status == name) n += count;
    }
    out.runs_by_status.emplace_back(name, n);
  }
  QL_ASSIGN_OR_RETURN(out.enabled_triggers,
                      store_.definitions().CountEnabledTriggers(project_id));
  QL_ASSIGN_OR_RETURN(out.stale_triggers, store_.definitions().CountStaleTriggers(project_id));
  return out;
}

}  // namespace ql
