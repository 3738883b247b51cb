#include "ql/http/api_json.h"

#include "ql/core/canonical_json.h"
#include "ql/core/rfc3339.h"

namespace ql::api {
namespace {

using nlohmann::json;

template <typename T>
json Nullable(const std::optional<T>& value) {
  return value.has_value() ? json(*value) : json(nullptr);
}

// Stored JSON columns are canonical JSON written by the services; a value that no longer
// parses is shown as null rather than failing the whole listing.
json StoredJson(const std::string& text) {
  json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
  return parsed.is_discarded() ? json(nullptr) : parsed;
}

json RetryPolicyJson(const RetryPolicy& policy) {
  json out = json::object();
  json::object_t& o = out.get_ref<json::object_t&>();
  o.emplace("max_attempts", policy.max_attempts);
  o.emplace("retry_on_lost", policy.retry_on_lost);
  o.emplace("retry_on_timeout", policy.retry_on_timeout);
  o.emplace("safety", policy.safety);
  o.emplace("backoff_base_ms", policy.backoff_base_ms);
  o.emplace("backoff_max_ms", policy.backoff_max_ms);
  return out;
}

Status WrongType(std::string_view name, std::string_view want, const json& value) {
  return InvalidArgument("invalid_type", "field " + std::string(name) + " must be " +
                                             std::string(want) + ", got " +
                                             DescribeJsonValue(value));
}

}  // namespace

int HttpStatusFor(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return 200;
    case StatusCode::kInvalidArgument:
      return 400;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kPermissionDenied:
      return 403;
    case StatusCode::kConflict:
    case StatusCode::kDuplicate:
      return 409;
    case StatusCode::kBusy:
    case StatusCode::kUnavailable:
    case StatusCode::kOutcomeUnknown:
      return 503;
    case StatusCode::kCorrupt:
    case StatusCode::kInternal:
      return 500;
  }
  return 500;
}

json ErrorJson(std::string_view code, std::string_view message) {
  return json{{"code", std::string(code)}, {"message", std::string(message)}};
}

json TimeJson(std::optional<int64_t> ms) {
  return ms.has_value() ? json(FormatRfc3339Utc(*ms)) : json(nullptr);
}

json WaitingJson(const WaitingReason& w) {
  return json{{"reason", w.reason},
              {"pool", w.placement.pool},
              {"labels", w.placement.labels},
              {"detail", w.detail}};
}

json PoolGrantJson(const PoolGrantRecord& g) {
  return json{{"pool", g.pool},
              {"project_id", g.project_id},
              {"max_running", g.max_running.has_value() ? json(*g.max_running) : json(nullptr)},
              {"weight", g.weight},
              {"created_by", g.created_by},
              {"created_at", TimeJson(g.created_at_ms)},
              {"updated_at", TimeJson(g.updated_at_ms)}};
}

json PoolJson(const PoolRecord& p) {
  json grants = json::array();
  for (const PoolGrantRecord& g : p.grants) grants.push_back(PoolGrantJson(g));
  return json{{"name", p.name},
              // A pool only workers name (no row yet) serves no project.
              {"configured", p.version > 0},
              {"serves_all_projects", p.serves_all_projects},
              {"max_running", p.max_running.has_value() ? json(*p.max_running) : json(nullptr)},
              {"grants", std::move(grants)},
              {"live_workers", p.live_workers},
              {"running", p.running}};
}

json WorkerJson(const WorkerRecord& w) {
  json out = {{"id", w.id},
              {"name", w.name},
              {"pool", w.pool},
              {"created_at", TimeJson(w.created_at_ms)},
              {"revoked", w.revoked_at_ms.has_value()},
              {"drained", w.drained_at_ms.has_value()},
              {"drained_at", TimeJson(w.drained_at_ms)},
              {"live", w.live},
              {"running", w.running_run_ids.size()},
              {"running_runs", w.running_run_ids}};
  // The state people read first: revoked, drained (no new runs), or the session's.
  std::string state = "never_connected";
  if (w.session.has_value()) {
    const WorkerSessionRecord& s = *w.session;
    state = w.live ? s.status : (s.status == "active" ? "expired" : s.status);
    out["labels"] = s.placement.labels;
    out["version"] = s.agent_version;
    out["slots"] = s.max_concurrent_runs;
    out["available_slots"] = s.available_slots;
    out["last_seen"] = TimeJson(s.heartbeat_at_ms);
    out["session_id"] = s.id;
    out["generation"] = s.generation;
  } else {
    out["labels"] = json::object();
    out["version"] = nullptr;
    out["slots"] = 0;
    out["available_slots"] = 0;
    out["last_seen"] = nullptr;
    out["session_id"] = nullptr;
    out["generation"] = nullptr;
  }
  if (w.revoked_at_ms.has_value()) {
    state = "revoked";
  } else if (w.drained_at_ms.has_value()) {
    state = "drained";
  }
  out["state"] = state;
  return out;
}

json ProjectJson(const ProjectRecord& p) {
  return json{{"id", p.id},
              {"slug", p.slug},
              {"name", p.name},
              {"status", p.status},
              {"version", p.version},
              {"created_at", TimeJson(p.created_at_ms)},
              {"updated_at", TimeJson(p.updated_at_ms)}};
}

json SecretJson(const SecretRecord& s) {
  return json{{"name", s.name},
              {"project_id", s.project_id},
              {"current_version", s.current_version},
              {"status", s.status},
              {"created_at", TimeJson(s.created_at_ms)},
              {"updated_at", TimeJson(s.updated_at_ms)},
              {"deleted_at", TimeJson(s.deleted_at_ms)}};
}

json PrincipalJson(const PrincipalRecord& p) {
  return json{{"id", p.id},
              {"kind", p.kind},
              {"name", p.name},
              {"status", p.status},
              {"version", p.version},
              {"created_at", TimeJson(p.created_at_ms)},
              {"updated_at", TimeJson(p.updated_at_ms)}};
}

json TokenJson(const TokenRecord& t) {
  return json{{"id", t.id},
              {"principal_id", t.principal_id},
              {"created_at", TimeJson(t.created_at_ms)},
              {"expires_at", TimeJson(t.expires_at_ms)},
              {"revoked_at", TimeJson(t.revoked_at_ms)},
              {"last_used_at", TimeJson(t.last_used_at_ms)},
              {"kind", t.kind},
              {"idle_timeout_ms",
               t.idle_timeout_ms.has_value() ? json(*t.idle_timeout_ms) : json(nullptr)},
              {"label", t.label},
              {"restriction", t.restriction.empty() ? json(nullptr) : json(t.restriction)}};
}

json BindingJson(const RoleBindingRecord& b) {
  return json{{"scope", b.scope},         {"principal_id", b.subject_id},
              {"version", b.version},     {"role", b.role},
              {"mutation_id", b.mutation_id}, {"changed_by", b.changed_by},
              {"created_at", TimeJson(b.created_at_ms)}};
}

json BindingJson(const BindingView& b) {
  json out = BindingJson(b.binding);
  out["principal"] = b.subject_name;
  return out;
}

json AuditJson(const AuditRecord& a) {
  return json{{"id", a.id},
              {"at", TimeJson(a.at_ms)},
              {"actor_id", a.actor_id.has_value() ? json(*a.actor_id) : json(nullptr)},
              {"action", a.action},
              {"target_kind", a.target_kind},
              {"target_id", a.target_id},
              {"project_id", a.project_id.has_value() ? json(*a.project_id) : json(nullptr)},
              {"outcome", a.outcome},
              {"code", a.code},
              {"request_id", a.request_id}};
}

json WhoAmIJson(const WhoAmI& who) {
  json projects = json::array();
  for (size_t i = 0; i < who.roles.projects.size() && i < who.projects.size(); ++i) {
    projects.push_back(json{{"id", who.projects[i].id},
                            {"slug", who.projects[i].slug},
                            {"role", RoleName(who.roles.projects[i].second)}});
  }
  return json{{"principal", PrincipalJson(who.principal)},
              {"installation_role", RoleName(who.roles.installation)},
              {"projects", std::move(projects)}};
}

json TaskRevisionJson(const TaskRevisionRecord& r) {
  return json{{"task_id", r.task_id},
              {"project_id", r.project_id},
              {"revision", r.revision},
              {"mutation_id", r.mutation_id},
              {"name", r.name},
              {"kind", r.kind},
              {"spec", StoredJson(r.spec_json)},
              {"labels", StoredJson(r.labels_json)},
              {"enabled", r.enabled},
              {"content_digest", r.content_digest},
              {"created_at", TimeJson(r.created_at_ms)},
              {"published_by", r.published_by.has_value() ? json(*r.published_by) : json(nullptr)}};
}

json TaskJson(const TaskView& t) {
  const TaskRevisionRecord& r = t.revision;
  json out{{"id", t.head.task_id},
           {"project_id", t.head.project_id},
           {"revision", r.revision},
           {"mutation_id", r.mutation_id},
           {"name", t.head.name.empty() ? r.name : t.head.name},
           {"deleted_at", TimeJson(t.head.deleted_at_ms)},
           {"kind", r.kind},
           {"spec", StoredJson(r.spec_json)},
           {"labels", StoredJson(r.labels_json)},
           {"enabled", r.enabled},
           {"content_digest", r.content_digest},
           {"created_at", TimeJson(t.head.created_at_ms)},
           {"updated_at", TimeJson(t.head.updated_at_ms)},
           {"revision_created_at", TimeJson(r.created_at_ms)},
           {"published_by", r.published_by.has_value() ? json(*r.published_by) : json(nullptr)},
           {"retry", t.retry.has_value() ? RetryPolicyJson(*t.retry) : json(nullptr)},
           {"approval", r.approval_json.has_value() ? StoredJson(*r.approval_json) : json(nullptr)},
           {"concurrency", r.concurrency.has_value() ? json(*r.concurrency) : json(nullptr)}};
  if (t.overview != nullptr) {
    json schedules = json::array();
    for (const TriggerView& trigger : t.overview->triggers) {
      schedules.push_back({{"trigger_id", trigger.head.trigger_id},
                           {"trigger_name", trigger.head.name},
                           {"expression", trigger.revision.expression},
                           {"timezone", trigger.revision.timezone},
                           {"enabled", trigger.revision.enabled},
                           {"state", trigger.state},
                           {"next_fire_at", TimeJson(trigger.next_fire_at_ms)}});
    }
    out["schedules"] = std::move(schedules);
    out["next_fire_at"] = TimeJson(t.overview->next_fire_at_ms);
    json last = nullptr;
    if (const std::optional<RunRecord>& run = t.overview->last_run; run.has_value()) {
      std::optional<int64_t> duration;
      if (run->started_at_ms.has_value() && run->finished_at_ms.has_value()) {
        duration = *run->finished_at_ms - *run->started_at_ms;
      }
      last = {{"id", run->id},
              {"status", run->status},
              {"trigger_type", run->trigger_type},
              {"scheduled_for", TimeJson(run->scheduled_for_ms)},
              {"created_at", TimeJson(run->created_at_ms)},
              {"started_at", TimeJson(run->started_at_ms)},
              {"finished_at", TimeJson(run->finished_at_ms)},
              {"duration_ms", Nullable(duration)},
              {"exit_code", Nullable(run->exit_code)}};
    }
    out["last_run"] = std::move(last);
  }
  return out;
}

json TriggerJson(const TriggerView& t) {
  const TriggerRevisionRecord& r = t.revision;
  json next_local = nullptr;
  if (t.next_fire_at_ms.has_value()) {
    auto zone = TimeZone::Load(r.timezone);
    if (zone.ok()) next_local = FormatRfc3339(*t.next_fire_at_ms, *zone);
  }
  json out{{"id", t.head.trigger_id},
           {"name", t.head.name},
           {"deleted_at", TimeJson(t.head.deleted_at_ms)},
           {"project_id", t.head.project_id},
           {"task_id", r.task_id},
           {"revision", r.revision},
           {"mutation_id", r.mutation_id},
           {"task_revision", r.task_revision},
           {"task_digest", r.task_digest},
           {"expression", r.expression},
           {"timezone", r.timezone},
           {"misfire", r.misfire},
           {"overlap", r.overlap},
           {"jitter_ms", r.jitter_ms},
           {"enabled", r.enabled},
           {"state", t.state},
           {"pin_stale", t.pin_stale},
           {"next_fire_at", TimeJson(t.next_fire_at_ms)},
           {"next_fire_at_local", next_local},
           {"last_scheduled_at", nullptr},
           {"content_digest", r.content_digest},
           {"created_at", TimeJson(t.head.created_at_ms)},
           {"updated_at", TimeJson(t.head.updated_at_ms)},
           {"revision_created_at", TimeJson(r.created_at_ms)}};
  if (t.schedule.has_value()) out["last_scheduled_at"] = TimeJson(t.schedule->last_scheduled_at_ms);
  return out;
}

json RunJson(const RunRecord& r) {
  // The hottest answer of the API (every run listing): built field by field into the object,
  // with no initializer list (whose nested arrays and copies cost most of its time).
  json out = json::object();
  json::object_t& o = out.get_ref<json::object_t&>();
  o.emplace("id", r.id);
  o.emplace("project_id", r.project_id);
  o.emplace("task_id", r.task_id);
  o.emplace("task_revision", r.task_revision);
  o.emplace("task_digest", r.task_digest);
  o.emplace("execution_revision_id", r.execution_revision_id);
  o.emplace("trigger_id", Nullable(r.trigger_id));
  o.emplace("trigger_revision", Nullable(r.trigger_revision));
  o.emplace("trigger_type", r.trigger_type);
  o.emplace("status", r.status);
  o.emplace("version", r.version);
  o.emplace("priority", r.priority);
  o.emplace("idempotency_key", Nullable(r.idempotency_key));
  o.emplace("retry_of_run_id", Nullable(r.retry_of_run_id));
  o.emplace("scheduled_for", TimeJson(r.scheduled_for_ms));
  o.emplace("created_at", TimeJson(r.created_at_ms));
  o.emplace("queued_at", TimeJson(r.queued_at_ms));
  o.emplace("started_at", TimeJson(r.started_at_ms));
  o.emplace("finished_at", TimeJson(r.finished_at_ms));
  o.emplace("retry_at", TimeJson(r.retry_at_ms));
  o.emplace("cancel_requested_at", TimeJson(r.cancel_requested_at_ms));
  o.emplace("cancel_reason", Nullable(r.cancel_reason));
  o.emplace("exit_code", Nullable(r.exit_code));
  o.emplace("error_code", Nullable(r.error_code));
  o.emplace("error_summary", Nullable(r.error_summary));
  o.emplace("retry_policy", RetryPolicyJson(r.retry_policy));
  return out;
}

json ApprovalRequestJson(const ApprovalRequestRecord& r) {
  return json{{"id", r.id},
              {"project_id", r.project_id},
              {"action", r.action},
              {"task_id", r.task_id},
              {"task_revision", r.task_revision},
              {"task_digest", r.task_digest},
              {"execution_revision_id", r.execution_revision_id},
              {"priority", r.priority},
              {"idempotency_key", Nullable(r.idempotency_key)},
              {"retry_of_run_id", Nullable(r.retry_of_run_id)},
              {"payload_digest", r.payload_digest},
              {"requester_id", r.requester_id},
              {"requester_binding_version", r.requester_binding_version},
              {"approver_role", r.approver_role},
              {"status", r.status},
              {"created_at", TimeJson(r.created_at_ms)},
              {"expires_at", TimeJson(r.expires_at_ms)},
              {"decided_at", TimeJson(r.decided_at_ms)}};
}

json ApprovalJson(const ApprovalView& v) {
  json out = ApprovalRequestJson(v.request);
  out["decision"] = nullptr;
  if (v.decision.has_value()) {
    const ApprovalDecisionRecord& d = *v.decision;
    out["decision"] = json{{"id", d.id},
                           {"decision", d.decision},
                           {"decided_by", Nullable(d.decided_by)},
                           {"decider_binding_version", Nullable(d.decider_binding_version)},
                           {"reason", Nullable(d.reason)},
                           {"decided_at", TimeJson(d.decided_at_ms)}};
  }
  out["action"] = nullptr;
  if (v.action.has_value()) {
    const ApprovedActionRecord& a = *v.action;
    out["action"] = json{{"id", a.id},
                         {"action", a.action},
                         {"payload_digest", a.payload_digest},
                         {"status", a.status},
                         {"run_id", a.run_id},
                         {"consumed_at", TimeJson(a.consumed_at_ms)}};
  }
  out["receipt"] = nullptr;
  if (v.receipt.has_value()) {
    const ApprovalReceiptRecord& r = *v.receipt;
    out["receipt"] = json{{"id", r.id},
                          {"request_id", r.request_id},
                          {"decision_id", r.decision_id},
                          {"action_id", r.action_id},
                          {"run_id", r.run_id},
                          {"created_at", TimeJson(r.created_at_ms)}};
  }
  return out;
}

json ApprovalRequiredJson(const ApprovalRequestRecord& request) {
  return json{{"code", "approval_required"},
              {"message", "task " + request.task_id +
                              " requires approval before it runs; approval request " + request.id +
                              " waits for approval by a principal with the " +
                              request.approver_role + " role"},
              {"approval_id", request.id},
              {"approval", ApprovalRequestJson(request)}};
}

json ResolutionJson(const ResolveRunResult& resolved) {
  const RunResolutionRecord& r = resolved.resolution;
  return json{{"run_id", r.run_id},
              {"resolution", r.resolution},
              {"reason", r.reason},
              {"resolved_by", Nullable(r.resolved_by)},
              {"retry_run_id", Nullable(r.retry_run_id)},
              {"created_at", TimeJson(r.created_at_ms)},
              {"run", RunJson(resolved.run)},
              {"retry_run", resolved.retry_run.has_value() ? RunJson(*resolved.retry_run)
                                                           : json(nullptr)}};
}

json RunJson(const RunView& view) {
  json out = RunJson(view.run);
  json attempts = json::array();
  for (const AttemptRecord& a : view.attempts) attempts.push_back(AttemptJson(a));
  out["attempts"] = std::move(attempts);
  json artifacts = json::array();
  for (const ScriptPin& pin : view.artifacts) {
    artifacts.push_back(json{{"kind", "script"},
                             {"name", pin.name},
                             {"version", pin.version},
                             {"digest", pin.digest},
                             {"script_kind", pin.kind},
                             {"entry", pin.entry}});
  }
  out["artifacts"] = std::move(artifacts);
  return out;
}

json AttemptJson(const AttemptRecord& a) {
  return json{{"id", a.id},
              {"run_id", a.run_id},
              {"attempt", a.attempt},
              {"status", a.status},
              {"executor_type", a.executor_type},
              {"pid", Nullable(a.pid)},
              {"has_log", a.log_path.has_value()},
              {"created_at", TimeJson(a.created_at_ms)},
              {"started_at", TimeJson(a.started_at_ms)},
              {"finished_at", TimeJson(a.finished_at_ms)},
              {"exit_code", Nullable(a.exit_code)},
              {"error_code", Nullable(a.error_code)},
              {"error_summary", Nullable(a.error_summary)}};
}

json EventJson(const EventRecord& e) {
  return json{{"run_id", e.run_id},
              {"sequence", e.sequence},
              {"type", e.type},
              {"actor_type", e.actor_type},
              {"attempt_id", Nullable(e.attempt_id)},
              {"payload", StoredJson(e.payload_json)},
              {"created_at", TimeJson(e.created_at_ms)}};
}

json StatusJson(const StatusSummary& s) {
  json runs = json::object();
  int64_t total = 0;
  for (const auto& [status, count] : s.runs_by_status) {
    runs[status] = count;
    total += count;
  }
  return json{{"project", ProjectJson(s.project)},
              {"executor_type", s.executor_type},
              {"now", TimeJson(s.now_ms)},
              {"runs_by_status", std::move(runs)},
              {"runs_total", total},
              {"enabled_triggers", s.enabled_triggers},
              {"stale_triggers", s.stale_triggers}};
}

json FireTimesJson(const std::vector<int64_t>& times_ms, const TimeZone& zone) {
  json out = json::array();
  for (int64_t ms : times_ms) {
    out.push_back(json{{"at", FormatRfc3339Utc(ms)}, {"local", FormatRfc3339(ms, zone)}});
  }
  return out;
}

Result<json> ParseBody(std::string_view text, bool required) {
  if (text.empty()) {
    if (!required) return json::object();
    return InvalidArgument("invalid_json", "request body is empty; expected a JSON object");
  }
  QL_ASSIGN_OR_RETURN(json body, ParseJsonStrict(text));
  if (!body.is_object()) {
    return InvalidArgument("invalid_json",
                           "request body must be a JSON object, got " + DescribeJsonValue(body));
  }
  return body;
}

Status CheckFields(const json& body, std::initializer_list<std::string_view> allowed) {
  for (const auto& [key, value] : body.items()) {
    bool known = false;
    for (std::string_view name : allowed) known = known || key == name;
    if (!known) {
      std::string list;
      for (std::string_view name : allowed) {
        if (!list.empty()) list += ", ";
        list += name;
      }
      return InvalidArgument("unknown_field", "field " + QuoteForMessage(key) +
                                                  " is not accepted here (accepted: " + list + ")");
    }
  }
  return Status::Ok();
}

Result<std::optional<std::string>> OptionalString(const json& body, std::string_view name) {
  auto it = body.find(std::string(name));
  if (it == body.end()) return std::optional<std::string>();
  if (!it->is_string()) return WrongType(name, "a string", *it);
  return std::optional<std::string>(it->get<std::string>());
}

Result<std::string> RequiredString(const json& body, std::string_view name) {
  QL_ASSIGN_OR_RETURN(std::optional<std::string> value, OptionalString(body, name));
  if (!value.has_value()) {
    return InvalidArgument("missing_field", "field " + std::string(name) + " is required");
  }
  return std::move(*value);
}

Result<std::optional<int64_t>> OptionalInteger(const json& body, std::string_view name) {
  auto it = body.find(std::string(name));
  if (it == body.end()) return std::optional<int64_t>();
  if (!it->is_number_integer()) return WrongType(name, "an integer", *it);
  return std::optional<int64_t>(it->get<int64_t>());
}

Result<std::optional<bool>> OptionalBool(const json& body, std::string_view name) {
  auto it = body.find(std::string(name));
  if (it == body.end()) return std::optional<bool>();
  if (!it->is_boolean()) return WrongType(name, "a boolean", *it);
  return std::optional<bool>(it->get<bool>());
}

}  // namespace ql::api
