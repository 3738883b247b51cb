#include "ql/core/execution_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "ql/core/canonical_json.h"
#include "ql/core/digest.h"

namespace ql {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

constexpr std::string_view kTaskId = "017f22e2-79b0-7cc3-98c4-dc0c0c07398f";
constexpr std::string_view kSampleTaskDigest =
    "9fb7f1baa54c6895f5212ac3c89eac45c6667a4d85e6a3cd900c40529fb11bc0";

// The content of task_spec_test's sample body, whose digest is kSampleTaskDigest.
TaskContent SampleContent() {
  Result<json> body = ParseJsonStrict(R"({
    "labels": {"team": "ops", "env/prod": "1"},
    "spec": {"environment": {"TZ": "Asia/Shanghai"},
             "command": {"kind": "shell", "command": "tar czf /backup/nas.tgz /data"}},
    "name": "备份 NAS"
  })");
  Result<TaskContent> content = ParseTaskContent(*body);
  EXPECT_TRUE(content.ok()) << content.status().ToString();
  return *content;
}

TaskContent ArgvContent() {
  TaskContent content;
  content.name = "echo";
  content.spec.command = ArgvCommand{"/bin/echo", {"hello", "", "world"}};
  content.spec.environment = {{"A", "1"}, {"B", ""}};
  content.spec.working_directory = "/tmp";
  content.spec.timeout_ms = 5000;
  return content;
}

ExecutionPlan SamplePlan() {
  Result<ExecutionPlan> plan =
      BuildExecutionPlan(kTaskId, 3, SampleContent(), kSampleTaskDigest, "local_process");
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  return *plan;
}

TEST(BuildExecutionPlanTest, ShellFormRunsShellDashC) {
  ExecutionPlan plan = SamplePlan();
  EXPECT_EQ(plan.task_id, kTaskId);
  EXPECT_EQ(plan.task_revision, 3);
  EXPECT_EQ(plan.task_digest, kSampleTaskDigest);
  EXPECT_EQ(plan.executor_type, "local_process");
  EXPECT_EQ(plan.argv,
            (std::vector<std::string>{"/bin/sh", "-c", "tar czf /backup/nas.tgz /data"}));
  EXPECT_EQ(plan.environment,
            (std::vector<std::pair<std::string, std::string>>{{"TZ", "Asia/Shanghai"}}));
  EXPECT_FALSE(plan.working_directory.has_value());
  EXPECT_EQ(plan.timeout_ms, 86'400'000);
}

TEST(BuildExecutionPlanTest, ArgvFormRunsFileWithArgs) {
  TaskContent content = ArgvContent();
  Result<ExecutionPlan> plan =
      BuildExecutionPlan(kTaskId, 1, content, TaskContentDigest(content), "remote_worker");
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->argv, (std::vector<std::string>{"/bin/echo", "hello", "", "world"}));
  EXPECT_EQ(plan->environment,
            (std::vector<std::pair<std::string, std::string>>{{"A", "1"}, {"B", ""}}));
  EXPECT_EQ(plan->working_directory, "/tmp");
  EXPECT_EQ(plan->timeout_ms, 5000);
  EXPECT_EQ(plan->executor_type, "remote_worker");
}

TaskContent ScriptContent(bool pinned) {
  TaskContent content;
  content.name = "hello";
  ScriptCommand script;
  script.script = "hello";
  script.args = {"--flag", "x"};
  if (pinned) {
    script.version = 2;
    script.digest = std::string(64, 'a');
    script.script_kind = "tree";
    script.entry = "bin/main.py";
    script.interpreter = "python3";
  }
  content.spec.command = script;
  return content;
}

TEST(BuildExecutionPlanTest, AScriptPlanRunsItsPinnedVersionWithItsInterpreter) {
  TaskContent content = ScriptContent(/*pinned=*/true);
  Result<ExecutionPlan> plan =
      BuildExecutionPlan(kTaskId, 1, content, TaskContentDigest(content), "local_process");
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->argv, (std::vector<std::string>{"/usr/bin/env", "python3", "--flag", "x"}));
  ASSERT_TRUE(plan->script.has_value());
  EXPECT_EQ(*plan->script, (ScriptPin{"hello", 2, std::string(64, 'a'), "tree", "bin/main.py"}));
  // The pin is part of the plan's digest and survives its stored form.
  Result<ExecutionPlan> back = PlanFromJson(PlanToJson(*plan));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, *plan);
  ExecutionPlan other = *plan;
  other.script->digest = std::string(64, 'b');
  EXPECT_NE(PlanDigest(other), PlanDigest(*plan));
  // A stored script plan whose argv does not start with the launcher and an interpreter is
  // refused, as is a pin with a bad digest.
  nlohmann::json bad = PlanToJson(*plan);
  bad["argv"] = {"/bin/sh", "-c", "x"};
  EXPECT_EQ(PlanFromJson(bad).status().reason(), "plan_invalid");
  bad = PlanToJson(*plan);
  bad["script"]["digest"] = "nope";
  EXPECT_EQ(PlanFromJson(bad).status().reason(), "plan_invalid");
}

TEST(BuildExecutionPlanTest, AnUnpinnedScriptHasNoPlan) {
  TaskContent content = ScriptContent(/*pinned=*/false);
  Result<ExecutionPlan> plan =
      BuildExecutionPlan(kTaskId, 1, content, TaskContentDigest(content), "local_process");
  EXPECT_EQ(plan.status().reason(), "spec_script_unpinned");
}

TEST(BuildExecutionPlanTest, RefusesDisabledRevisions) {
  TaskContent content = ArgvContent();
  content.enabled = false;
  Result<ExecutionPlan> plan =
      BuildExecutionPlan(kTaskId, 2, content, TaskContentDigest(content), "local_process");
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(plan.status().reason(), "task_disabled");
  EXPECT_THAT(plan.status().message(), HasSubstr("revision 2"));
}

TEST(BuildExecutionPlanTest, VerifiesTheTaskDigest) {
  TaskContent content = SampleContent();
  content.name = "renamed";  // content drifted from the digest it was stored with
  Result<ExecutionPlan> plan =
      BuildExecutionPlan(kTaskId, 3, content, kSampleTaskDigest, "local_process");
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kCorrupt);
  EXPECT_EQ(plan.status().reason(), "digest_mismatch");
  EXPECT_THAT(plan.status().message(), HasSubstr(std::string(kSampleTaskDigest)));
}

TEST(BuildExecutionPlanTest, RejectsBadIdentity) {
  const TaskContent content = SampleContent();
  auto reason = [&](std::string_view id, int64_t revision, std::string_view digest,
                    std::string_view executor) {
    return BuildExecutionPlan(id, revision, content, digest, executor).status().reason();
  };
  EXPECT_EQ(reason("TASK", 3, kSampleTaskDigest, "local_process"), "invalid_id");
  EXPECT_EQ(reason(kTaskId, 0, kSampleTaskDigest, "local_process"), "invalid_revision");
  EXPECT_EQ(reason(kTaskId, kMaxTaskRevision + 1, kSampleTaskDigest, "local_process"),
            "invalid_revision");
  EXPECT_EQ(reason(kTaskId, 3, "abc", "local_process"), "invalid_digest");
  std::string upper(kSampleTaskDigest);
  upper[0] = 'F';
  EXPECT_EQ(reason(kTaskId, 3, upper, "local_process"), "invalid_digest");
  EXPECT_EQ(reason(kTaskId, 3, kSampleTaskDigest, "docker"), "invalid_executor_type");
  Status s = BuildExecutionPlan(kTaskId, 3, content, kSampleTaskDigest, "docker").status();
  EXPECT_THAT(s.message(), HasSubstr("\"docker\""));
}

TEST(BuildExecutionPlanTest, RevalidatesTheContent) {
  TaskContent content = ArgvContent();
  content.kind = "qinglong/script@v1";
  EXPECT_EQ(BuildExecutionPlan(kTaskId, 1, content, TaskContentDigest(content), "local_process")
                .status()
                .reason(),
            "task_kind_unsupported");
  content = ArgvContent();
  content.spec.environment = {{"QL_RUN_ID", "forged"}};
  EXPECT_EQ(BuildExecutionPlan(kTaskId, 1, content, TaskContentDigest(content), "local_process")
                .status()
                .reason(),
            "spec_invalid_env_name");
  content = ArgvContent();
  content.spec.environment = {{"B", "1"}, {"A", "2"}};
  EXPECT_EQ(BuildExecutionPlan(kTaskId, 1, content, TaskContentDigest(content), "local_process")
                .status()
                .reason(),
            "spec_not_normalized");
}

TEST(PlanDigestTest, PinsCanonicalEncodingAndDigest) {
  ExecutionPlan plan = SamplePlan();
  EXPECT_EQ(PlanCanonical(plan),
            R"({"argv":["/bin/sh","-c","tar czf /backup/nas.tgz /data"],)"
            R"("environment":{"TZ":"Asia/Shanghai"},"executorType":"local_process",)"
            R"("retry":{"backoff_base_ms":1000,"backoff_max_ms":60000,"max_attempts":1,)"
            R"("retry_on_lost":false,"safety":"unknown"},)"
            R"("schema":"qinglong/command-execution@v1","taskDigest":)"
            R"("9fb7f1baa54c6895f5212ac3c89eac45c6667a4d85e6a3cd900c40529fb11bc0",)"
            R"("taskId":"017f22e2-79b0-7cc3-98c4-dc0c0c07398f","taskRevision":3,)"
            R"("timeoutMs":86400000})");
  // Computed independently with sha256sum over "qinglong/execution-plan@v1\0" + canonical.
  EXPECT_EQ(PlanDigest(plan), "3d1b7f501e92b42655120628f593e86d2a9cbfca2046cfa1c603e30b73be90c2");
  plan.executor_type = "remote_worker";
  EXPECT_EQ(PlanDigest(plan), "665bba3b302881b4523ea175d113ddad0c95279202c87ca23f0cef7545a04693");
}

TEST(PlanDigestTest, CoversEveryField) {
  const ExecutionPlan base = SamplePlan();
  const std::string digest = PlanDigest(base);
  std::vector<ExecutionPlan> variants(8, base);
  variants[0].task_id = "017f22e2-79b0-7cc3-98c4-dc0c0c07398e";
  variants[1].task_revision = 4;
  variants[2].task_digest[63] = 'a';
  variants[3].executor_type = "remote_worker";
  variants[4].argv.back() += " ";
  variants[5].environment.emplace_back("ZZ", "1");
  variants[6].working_directory = "/";
  variants[7].timeout_ms = 1;
  for (const ExecutionPlan& v : variants) {
    EXPECT_NE(PlanDigest(v), digest) << PlanCanonical(v);
    EXPECT_EQ(VerifyPlanDigest(v, digest).reason(), "digest_mismatch");
  }
}

TEST(PlanDigestTest, LimitsAndNetworkAreBoundAndRoundTrip) {
  const ExecutionPlan base = SamplePlan();
  ExecutionPlan limited = base;
  limited.limits.memory_mib = 64;
  ExecutionPlan offline = base;
  offline.network = false;
  EXPECT_NE(PlanDigest(limited), PlanDigest(base));
  EXPECT_NE(PlanDigest(offline), PlanDigest(base));
  EXPECT_NE(PlanDigest(offline), PlanDigest(limited));
  for (const ExecutionPlan& p : {limited, offline}) {
    Result<ExecutionPlan> back = PlanFromJson(PlanToJson(p));
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(*back, p);
  }
  nlohmann::json bad = PlanToJson(offline);
  bad["network"] = "host";  // the default is never written: a stored "host" is not ours
  EXPECT_EQ(PlanFromJson(bad).status().reason(), "plan_invalid");
  bad = PlanToJson(limited);
  bad["limits"] = nlohmann::json::object();
  EXPECT_EQ(PlanFromJson(bad).status().reason(), "plan_invalid");
}

TEST(VerifyPlanDigestTest, AcceptsOnlyTheExactDigest) {
  const ExecutionPlan plan = SamplePlan();
  const std::string digest = PlanDigest(plan);
  EXPECT_TRUE(VerifyPlanDigest(plan, digest).ok());
  Status s = VerifyPlanDigest(plan, std::string(64, '0'));
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_EQ(s.reason(), "digest_mismatch");
  EXPECT_THAT(s.message(), HasSubstr(digest));
  std::string upper = digest;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  EXPECT_EQ(VerifyPlanDigest(plan, upper).reason(), "digest_mismatch");
  EXPECT_EQ(VerifyPlanDigest(plan, "").reason(), "digest_mismatch");
}

TEST(ExecutionRevisionIdTest, FormatsAndParsesStrictly) {
  const std::string digest(kSampleTaskDigest);
  const std::string id = ExecutionRevisionId(12, digest);
  EXPECT_EQ(id, "qltd:v1:12:" + digest);
  Result<ExecutionRevisionRef> ref = ParseExecutionRevisionId(id);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  EXPECT_EQ(ref->revision, 12);
  EXPECT_EQ(ref->digest, digest);
  EXPECT_TRUE(ParseExecutionRevisionId("qltd:v1:2147483647:" + digest).ok());

  std::string upper = digest;
  upper[5] = 'A';
  for (const std::string& bad : {
           "qltd:v1:012:" + digest,          // leading zero
           "qltd:v1:0:" + digest,            // below 1
           "qltd:v1:2147483648:" + digest,   // above 2^31 - 1
           "qltd:v1:99999999999:" + digest,  // overflow
           "qltd:v1:-1:" + digest,           // sign
           "qltd:v1:+1:" + digest,           // sign
           "qltd:v1::" + digest,             // empty revision
           "qltd:v2:1:" + digest,            // unknown version
           "QLTD:v1:1:" + digest,            // case drift
           "qltd:v1:1:" + upper,             // case drift in the digest
           "qltd:v1:1:" + digest + ":x",     // extra part
           "qltd:v1:1:" + digest.substr(1),  // short digest
           std::string("qltd:v1:1"),         // no digest
           std::string(" qltd:v1:1:") + digest,
       }) {
    Result<ExecutionRevisionRef> r = ParseExecutionRevisionId(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().reason(), "invalid_execution_revision") << bad;
  }
}

TEST(PlanJsonTest, RoundTripsBuiltPlans) {
  TaskContent argv = ArgvContent();
  for (const ExecutionPlan& plan :
       {SamplePlan(),
        *BuildExecutionPlan(kTaskId, 7, argv, TaskContentDigest(argv), "remote_worker")}) {
    // Through text, as storage does.
    Result<json> stored = ParseJsonStrict(*CanonicalJson(PlanToJson(plan)));
    ASSERT_TRUE(stored.ok());
    Result<ExecutionPlan> back = PlanFromJson(*stored);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(*back, plan);
    EXPECT_TRUE(VerifyPlanDigest(*back, PlanDigest(plan)).ok());
  }
}

void ExpectPlanError(const json& j, std::initializer_list<std::string_view> message_parts) {
  Result<ExecutionPlan> r = PlanFromJson(j);
  ASSERT_FALSE(r.ok()) << "accepted: " << j.dump();
  EXPECT_EQ(r.status().code(), StatusCode::kCorrupt);
  EXPECT_EQ(r.status().reason(), "plan_invalid");
  for (std::string_view part : message_parts) {
    EXPECT_THAT(r.status().message(), HasSubstr(std::string(part)));
  }
}

TEST(PlanJsonTest, RejectsAnythingBuildExecutionPlanCannotProduce) {
  const json good = PlanToJson(SamplePlan());
  ASSERT_TRUE(PlanFromJson(good).ok());
  ExpectPlanError(json::array(), {"expected an object"});

  json j = good;
  j["extra"] = 1;
  ExpectPlanError(j, {"\"extra\"", "unknown field"});
  for (const char* field : {"argv", "environment", "executorType", "schema", "taskDigest", "taskId",
                            "taskRevision", "timeoutMs"}) {
    j = good;
    j.erase(field);
    ExpectPlanError(j, {field, "missing"});
  }
  j = good;
  j["schema"] = "qinglong/command-execution@v2";
  ExpectPlanError(j, {"schema", "qinglong/command-execution@v2"});
  j = good;
  j["taskId"] = "x";
  ExpectPlanError(j, {"taskId", "\"x\""});
  j = good;
  j["taskRevision"] = 0;
  ExpectPlanError(j, {"taskRevision", "got 0"});
  j = good;
  j["taskRevision"] = "3";
  ExpectPlanError(j, {"taskRevision", "string \"3\""});
  j = good;
  j["taskRevision"] = 3.0;
  ExpectPlanError(j, {"taskRevision", "number"});
  j = good;
  j["taskDigest"] = "ABC";
  ExpectPlanError(j, {"taskDigest"});
  j = good;
  j["executorType"] = "docker";
  ExpectPlanError(j, {"executorType", "\"docker\""});
  j = good;
  j["argv"] = json::array();
  ExpectPlanError(j, {"argv"});
  j = good;
  j["argv"] = {"sh", "-c", "x"};
  ExpectPlanError(j, {"argv[0]", "\"sh\"", "absolute"});
  j = good;
  j["argv"] = {"/bin/sh", 1};
  ExpectPlanError(j, {"argv[1]", "integer 1"});
  j = good;
  j["argv"] = {"/bin/sh", std::string("a\0b", 3)};
  ExpectPlanError(j, {"argv[1]", "NUL"});
  j = good;
  j["environment"] = {{"QL_ATTEMPT_ID", "x"}};
  ExpectPlanError(j, {"environment", "\"QL_ATTEMPT_ID\""});
  j = good;
  j["environment"] = {{"A", 1}};
  ExpectPlanError(j, {"environment.A", "integer 1"});
  j = good;
  j["environment"] = json::array();
  ExpectPlanError(j, {"environment"});
  j = good;
  j["workingDirectory"] = "tmp";
  ExpectPlanError(j, {"workingDirectory", "\"tmp\""});
  j = good;
  j["workingDirectory"] = nullptr;
  ExpectPlanError(j, {"workingDirectory", "null"});
  j = good;
  j["timeoutMs"] = kMaxTimeoutMs + 1;
  ExpectPlanError(j, {"timeoutMs"});
  j = good;
  j["timeoutMs"] = UINT64_MAX;
  ExpectPlanError(j, {"timeoutMs"});
}

}  // namespace
}  // namespace ql
