#include "ql/testing/upgrade_fixtures.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "ql/core/approval.h"
#include "ql/core/canonical_json.h"
#include "ql/core/digest.h"
#include "ql/core/execution_plan.h"
#include "ql/core/idempotency_key.h"
#include "ql/core/task_spec.h"

namespace ql::testing {

Result<PublishedRevision> PublishRevision(const std::string& project_id, const std::string& task_id,
                                          int64_t revision, const std::string& body_json,
                                          const std::string& executor_type, int64_t created_at_ms) {
  QL_ASSIGN_OR_RETURN(nlohmann::json body, ParseJsonStrict(body_json));
  QL_ASSIGN_OR_RETURN(TaskContent content, ParseTaskContent(body));
  PublishedRevision out;
  TaskRevisionRecord& r = out.revision;
  r.project_id = project_id;
  r.task_id = task_id;
  r.revision = revision;
  r.mutation_id = "m-" + task_id + "-" + std::to_string(revision);
  r.name = content.name;
  r.kind = content.kind;
  r.spec_json = internal::CanonicalJsonLossy(CommandSpecToJson(content.spec));
  nlohmann::json labels = nlohmann::json::object();
  for (const auto& [key, value] : content.labels) labels[key] = value;
  r.labels_json = internal::CanonicalJsonLossy(labels);
  if (content.approval.has_value()) {
    r.approval_json = internal::CanonicalJsonLossy(ApprovalPolicyToJson(*content.approval));
  }
  r.concurrency = content.concurrency;
  r.enabled = content.enabled;
  r.content_digest = TaskContentDigest(content);
  r.created_at_ms = created_at_ms;
  out.retry_policy = content.retry;
  if (content.enabled) {
    QL_ASSIGN_OR_RETURN(ExecutionPlan plan, BuildExecutionPlan(task_id, revision, content,
                                                               r.content_digest, executor_type));
    ExecutionRevisionRecord& e = out.execution;
    e.plan_digest = PlanDigest(plan);
    e.id = ExecutionRevisionId(revision, e.plan_digest);
    e.project_id = project_id;
    e.task_id = task_id;
    e.task_revision = revision;
    e.task_digest = r.content_digest;
    e.executor_type = executor_type;
    e.plan_json = PlanCanonical(plan);
    e.created_at_ms = created_at_ms;
    out.retry_policy = plan.retry_policy;
  }
  return out;
}

TriggerRevisionRecord PinTrigger(const TaskRevisionRecord& task, const std::string& trigger_id,
                                 int64_t revision, const std::string& expression,
                                 const std::string& timezone, const std::string& misfire,
                                 int64_t created_at_ms, const std::string& overlap,
                                 int64_t jitter_ms) {
  TriggerRevisionRecord t;
  t.project_id = task.project_id;
  t.trigger_id = trigger_id;
  t.revision = revision;
  t.mutation_id = "m-" + trigger_id + "-" + std::to_string(revision);
  t.task_id = task.task_id;
  t.task_revision = task.revision;
  t.task_digest = task.content_digest;
  t.expression = expression;
  t.timezone = timezone;
  t.misfire = misfire;
  t.overlap = overlap;
  t.jitter_ms = jitter_ms;
  t.enabled = true;
  t.created_at_ms = created_at_ms;
  t.content_digest = TriggerContentDigest(t);
  return t;
}

Result<UpgradeData> MakeUpgradeData(const std::string& executor_type) {
  UpgradeData d;
  int n = 0;
  for (const char* name :
       {"P",  "T1",  "T3",  "T4",  "T5",  "T6",  "G1",  "G2",  "G3",  "G4",  "R1",  "R2",
        "R3", "R4",  "R5",  "R6",  "R7",  "R8",  "R9",  "R10", "A1",  "A2",  "A3",  "A4",
        "A5", "A6",  "A7",  "A8",  "A9",  "A10", "U1",  "U2",  "U3",  "K1",  "K2",  "K3",
        "K4", "AR1", "AR2", "AR3", "AR4", "AD2", "AD4", "AA2", "AA4", "RC2", "RC4", "AU1",
        "N1", "NR1", "O1",  "W1",  "WS1", "OF1", "C1",  "C2",  "W2",  "WS2", "W3"}) {
    std::string tail = std::to_string(++n);
    d.v[name] = "0190a000-0000-7000-8000-" + std::string(12 - tail.size(), '0') + tail;
  }
  const std::string p = d.id("P");
  const std::string shell = R"("spec":{"command":{"kind":"shell","command":)";
  struct TaskBody {
    const char* key;
    const char* task;
    int64_t revision;
    std::string body;
    int64_t at;
  };
  const std::vector<TaskBody> bodies = {
      {"T1r1", "T1", 1, R"({"name":"backup",)" + shell + R"("echo one"}}})", 1'779'900'000'000},
      {"T1r2", "T1", 2,
       R"({"name":"backup",)" + shell +
           R"("tar czf /tmp/etc.tgz /etc"},"environment":{"MODE":"full"},"timeoutMs":600000},)"
           R"("labels":{"tier":"a"},"retry":{"max_attempts":3,"backoff_base_ms":1000,)"
           R"("backoff_max_ms":60000}})",
       1'779'910'000'000},
      {"T3", "T3", 1,
       R"({"name":"deploy",)" + shell +
           R"("./deploy.sh"}},"approval":{"required":true,"approver_role":"admin"}})",
       1'779'920'000'000},
      {"T4", "T4", 1, R"({"name":"report",)" + shell + R"("report"}},"concurrency":2})",
       1'779'930'000'000},
      {"T5", "T5", 1, R"({"name":"cleanup",)" + shell + R"("rm -rf /tmp/old"}}})",
       1'779'940'000'000},
      {"T6", "T6", 1, R"({"name":"old-job","enabled":false,)" + shell + R"("true"}}})",
       1'779'950'000'000},
  };
  for (const TaskBody& b : bodies) {
    QL_ASSIGN_OR_RETURN(PublishedRevision r,
                        PublishRevision(p, d.id(b.task), b.revision, b.body, executor_type, b.at));
    d.v["X" + std::string(b.key)] = r.execution.id;
    d.v["D" + std::string(b.key)] = r.revision.content_digest;
    d.tasks[b.key] = std::move(r);
  }
  d.tasks["T5"].revision.published_by = d.id("U1");
  const TaskRevisionRecord& t1 = d.tasks["T1r2"].revision;
  const TaskRevisionRecord& t4 = d.tasks["T4"].revision;
  d.triggers["G1"] =
      PinTrigger(t1, d.id("G1"), 1, "*/5 * * * *", "UTC", "fire_once", 1'779'911'000'000);
  d.triggers["G2"] =
      PinTrigger(t1, d.id("G2"), 1, "0 * * * *", "Asia/Shanghai", "skip", 1'779'912'000'000);
  d.triggers["G3"] =
      PinTrigger(t4, d.id("G3"), 1, "30 2 * * *", "UTC", "skip", 1'779'931'000'000, "forbid");
  d.triggers["G4"] =
      PinTrigger(t4, d.id("G4"), 1, "0 3 * * *", "UTC", "skip", 1'779'932'000'000, "allow", 60'000);

  d.tokens = {{"K1", "qlt_upgrade_owner_token"},        {"K2", "qlt_upgrade_revoked_token"},
              {"K3", "qls_upgrade_panel_session"},      {"K4", "qls_upgrade_restricted_session"},
              {"C1", "qlt_upgrade_cluster_credential"}, {"C2", "qlt_upgrade_revoked_credential"},
              {"W1", "qlw_upgrade_worker_credential"},  {"OF1", "qll_upgrade_lease_token"},
              {"W2", "qlw_upgrade_gpu_worker"},         {"W3", "qlw_upgrade_bound_worker"}};
  for (const auto& [name, token] : d.tokens) d.v[name + "D"] = Sha256Hex(token);
  d.v["SETUPD"] = Sha256Hex("setup-code");
  d.v["STATED"] = Sha256Hex("oidc-state");
  d.v["RECOVERYD"] = Sha256Hex("recovery-1") + " " + Sha256Hex("recovery-2");
  d.v["KEYC0"] = CronIdempotencyKey(d.id("G1"), 1, kUpgradeC0);
  d.v["KEYG2"] = CronIdempotencyKey(d.id("G2"), 1, kUpgradeC2 - 3'600'000);
  d.v["KEYG3"] = CronIdempotencyKey(d.id("G3"), 1, kUpgradeG3At);

  // The approval requests' canonical payloads, as RequestApproval computes them.
  for (const char* request : {"AR1", "AR2", "AR3", "AR4"}) {
    ApprovalRequestRecord r;
    r.action = std::string(kApprovalActionRunCreate);
    if (std::string_view(request) == "AR3") r.retry_of_run_id = d.id("R5");
    r.project_id = p;
    r.task_id = d.id("T3");
    r.task_revision = 1;
    r.task_digest = d.v["DT3"];
    r.execution_revision_id = d.v["XT3"];
    const std::string payload = ApprovalPayloadCanonical(r);
    d.v[std::string(request) + "P"] = payload;
    d.v[std::string(request) + "PD"] = ApprovalPayloadDigest(payload);
  }
  return d;
}

std::string MigrationTestName(const std::string& migration_id) {
  std::string name = migration_id;
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

std::string SqlText(const std::string& value) {
  std::string out = "'";
  for (char c : value) {
    out.push_back(c);
    if (c == '\'') out.push_back('\'');
  }
  return out + "'";
}

std::string SqlText(const std::optional<std::string>& value) {
  return value ? SqlText(*value) : "NULL";
}

namespace {

std::string N(int64_t value) { return std::to_string(value); }

std::string B(bool value, SqlBooleans booleans) {
  if (booleans == SqlBooleans::kIntegers) return value ? "1" : "0";
  return value ? "true" : "false";
}

}  // namespace

std::string InsertTaskSql(const PublishedRevision& p, bool head,
                          const std::optional<std::string>& name,
                          std::optional<int64_t> deleted_at_ms, SqlBooleans booleans) {
  const TaskRevisionRecord& r = p.revision;
  std::string sql;
  if (head) {
    sql +=
        "INSERT INTO task_heads (task_id, project_id, current_revision, created_at_ms, "
        "updated_at_ms" +
        std::string(name ? ", name, deleted_at_ms" : "") + ") VALUES (" + SqlText(r.task_id) +
        ", " + SqlText(r.project_id) + ", " + N(r.revision) + ", " + N(r.created_at_ms) + ", " +
        N(r.created_at_ms) +
        (name ? ", " + SqlText(*name) + ", " + (deleted_at_ms ? N(*deleted_at_ms) : "NULL") : "") +
        ");\n";
  }
  std::string columns =
      "task_id, revision, project_id, mutation_id, name, kind, spec_json, labels_json, enabled, "
      "content_digest, created_at_ms";
  std::string values = SqlText(r.task_id) + ", " + N(r.revision) + ", " + SqlText(r.project_id) +
                       ", " + SqlText(r.mutation_id) + ", " + SqlText(r.name) + ", " +
                       SqlText(r.kind) + ", " + SqlText(r.spec_json) + ", " +
                       SqlText(r.labels_json) + ", " + B(r.enabled, booleans) + ", " +
                       SqlText(r.content_digest) + ", " + N(r.created_at_ms);
  if (r.approval_json) columns += ", approval_json", values += ", " + SqlText(r.approval_json);
  if (r.concurrency) columns += ", concurrency", values += ", " + N(*r.concurrency);
  if (r.published_by) columns += ", published_by", values += ", " + SqlText(r.published_by);
  sql += "INSERT INTO task_revisions (" + columns + ") VALUES (" + values + ");\n";
  if (!p.execution.id.empty()) {
    const ExecutionRevisionRecord& e = p.execution;
    sql +=
        "INSERT INTO execution_revisions (id, project_id, task_id, task_revision, task_digest, "
        "executor_type, plan_json, plan_digest, created_at_ms) VALUES (" +
        SqlText(e.id) + ", " + SqlText(e.project_id) + ", " + SqlText(e.task_id) + ", " +
        N(e.task_revision) + ", " + SqlText(e.task_digest) + ", " + SqlText(e.executor_type) +
        ", " + SqlText(e.plan_json) + ", " + SqlText(e.plan_digest) + ", " + N(e.created_at_ms) +
        ");\n";
  }
  return sql;
}

std::string InsertTriggerSql(const TriggerRevisionRecord& t, const std::optional<std::string>& name,
                             SqlBooleans booleans) {
  std::string columns =
      "trigger_id, revision, project_id, mutation_id, task_id, task_revision, task_digest, "
      "expression, timezone, misfire, enabled, content_digest, created_at_ms";
  std::string values = SqlText(t.trigger_id) + ", " + N(t.revision) + ", " + SqlText(t.project_id) +
                       ", " + SqlText(t.mutation_id) + ", " + SqlText(t.task_id) + ", " +
                       N(t.task_revision) + ", " + SqlText(t.task_digest) + ", " +
                       SqlText(t.expression) + ", " + SqlText(t.timezone) + ", " +
                       SqlText(t.misfire) + ", " + B(t.enabled, booleans) + ", " +
                       SqlText(t.content_digest) + ", " + N(t.created_at_ms);
  if (t.overlap != "allow") columns += ", overlap", values += ", " + SqlText(t.overlap);
  if (t.jitter_ms != 0) columns += ", jitter_ms", values += ", " + N(t.jitter_ms);
  return "INSERT INTO trigger_heads (trigger_id, project_id, task_id, current_revision, "
         "created_at_ms, updated_at_ms" +
         std::string(name ? ", name" : "") + ") VALUES (" + SqlText(t.trigger_id) + ", " +
         SqlText(t.project_id) + ", " + SqlText(t.task_id) + ", " + N(t.revision) + ", " +
         N(t.created_at_ms) + ", " + N(t.created_at_ms) + (name ? ", " + SqlText(*name) : "") +
         ");\n" + "INSERT INTO trigger_revisions (" + columns + ") VALUES (" + values + ");\n";
}

std::string FillSql(std::string_view sql, const std::map<std::string, std::string>& values) {
  std::string out;
  size_t at = 0;
  while (at < sql.size()) {
    const size_t open = sql.find("${", at);
    const size_t close = open == std::string_view::npos ? open : sql.find('}', open);
    if (close == std::string_view::npos) {
      out.append(sql.substr(at));
      break;
    }
    out.append(sql.substr(at, open - at));
    const std::string name(sql.substr(open + 2, close - open - 2));
    auto it = values.find(name);
    if (it == values.end()) {
      out.append(sql.substr(open, close - open + 1));
    } else {
      for (char c : it->second) {
        out.push_back(c);
        if (c == '\'') out.push_back('\'');
      }
    }
    at = close + 1;
  }
  return out;
}

std::optional<std::string> UnfilledName(std::string_view sql) {
  const size_t open = sql.find("${");
  if (open == std::string_view::npos) return std::nullopt;
  const size_t close = sql.find('}', open);
  return std::string(sql.substr(open, close == std::string_view::npos ? 16 : close - open + 1));
}

}  // namespace ql::testing
