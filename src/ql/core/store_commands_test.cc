#include "ql/core/store_commands.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ql/core/execution_plan.h"

namespace ql {
namespace {

using ::testing::HasSubstr;

constexpr char kRunId[] = "0190a5b2-7c3e-7a1b-8c4d-5e6f708192a3";
constexpr char kAttemptId[] = "0190a5b2-7c3e-7a1b-8c4d-5e6f708192a4";
constexpr char kProjectId[] = "0190a5b2-7c3e-7a1b-8c4d-5e6f708192a5";
constexpr char kTaskId[] = "0190a5b2-7c3e-7a1b-8c4d-5e6f708192a6";
const std::string kDigest(64, 'a');

NewRun ValidRun() {
  NewRun run;
  run.run_id = kRunId;
  run.attempt_id = kAttemptId;
  run.project_id = kProjectId;
  run.task_id = kTaskId;
  run.task_revision = 1;
  run.task_digest = kDigest;
  run.execution_revision_id = "qltd:v1:1:" + kDigest;
  run.executor_type = "local_process";
  run.trigger_type = "manual";
  run.actor_type = "user";
  return run;
}

TEST(StoreCommandsTest, IdKeyIsUnpaddedBase64UrlAndRoundTrips) {
  // Keys held by clients across an upgrade must still decode: the encoding is fixed.
  const std::string key = EncodeIdKey("tasks", kRunId);
  EXPECT_EQ(key, "dGFza3M6MDE5MGE1YjItN2MzZS03YTFiLThjNGQtNWU2ZjcwODE5MmEz");
  Result<std::string> id = DecodeIdKey("tasks", key);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(*id, kRunId);
}

TEST(StoreCommandsTest, PageKeyOfAnotherListingIsRefused) {
  Result<std::string> id = DecodeIdKey("triggers", EncodeIdKey("tasks", kRunId));
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(id.status().reason(), "invalid_page_key");
  EXPECT_THAT(id.status().message(), HasSubstr("this triggers listing"));

  RunRecord run;
  run.id = kRunId;
  run.created_at_ms = 1767225600000;
  EXPECT_EQ(DecodeIdKey("runs", EncodeRunKey(run)).status().reason(), "invalid_page_key");
  EXPECT_EQ(DecodeRunKey(EncodeIdKey("tasks", kRunId)).status().reason(), "invalid_page_key");
}

TEST(StoreCommandsTest, RunKeyRoundTripsItsPosition) {
  RunRecord run;
  run.id = kRunId;
  run.created_at_ms = 1767225600000;
  const std::string key = EncodeRunKey(run);
  EXPECT_EQ(key, "cnVuczoxNzY3MjI1NjAwMDAwOjAxOTBhNWIyLTdjM2UtN2ExYi04YzRkLTVlNmY3MDgxOTJhMw");
  Result<RunPosition> position = DecodeRunKey(key);
  ASSERT_TRUE(position.ok()) << position.status().ToString();
  EXPECT_EQ(position->created_at_ms, 1767225600000);
  EXPECT_EQ(position->id, kRunId);

  run.created_at_ms = INT64_MAX;
  position = DecodeRunKey(EncodeRunKey(run));
  ASSERT_TRUE(position.ok()) << position.status().ToString();
  EXPECT_EQ(position->created_at_ms, INT64_MAX);
}

TEST(StoreCommandsTest, MalformedRunKeysAreRefused) {
  const std::string id(kRunId);
  const std::vector<std::string> raws = {"runs:9223372036854775808:" + id,  // past INT64_MAX
                                         "runs:-1:" + id, "runs::" + id, "runs:12:not-a-uuid"};
  for (const std::string& raw : raws) {
    EXPECT_EQ(DecodeRunKey(Base64UrlEncode(raw)).status().reason(), "invalid_page_key") << raw;
  }
  RunRecord run;
  run.id = id;
  run.created_at_ms = 5;
  const std::string key = EncodeRunKey(run);
  EXPECT_EQ(DecodeRunKey(key + "=").status().reason(), "invalid_page_key");  // padding
}

TEST(StoreCommandsTest, Base64UrlDecodeAcceptsOnlyWhatEncodeWrites) {
  EXPECT_EQ(Base64UrlEncode("a"), "YQ");
  EXPECT_EQ(Base64UrlDecode("YQ"), std::optional<std::string>("a"));
  EXPECT_EQ(Base64UrlDecode("YR"), std::nullopt);    // non-zero trailing bits
  EXPECT_EQ(Base64UrlDecode("Y"), std::nullopt);     // a dangling character
  EXPECT_EQ(Base64UrlDecode("YQ=="), std::nullopt);  // padding
  EXPECT_EQ(Base64UrlDecode("+/"), std::nullopt);    // the standard, not the URL, alphabet
  EXPECT_EQ(Base64UrlEncode("\xfb\xff"), "-_8");
}

TEST(StoreCommandsTest, ValidateNewRunAcceptsAValidRunAndRefusesEqualRunAndAttemptIds) {
  EXPECT_TRUE(ValidateNewRun(ValidRun()).ok());

  NewRun run = ValidRun();
  run.attempt_id = run.run_id;
  Status status = ValidateNewRun(run);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.reason(), "invalid_id");
  EXPECT_EQ(status.message(), "run_id and attempt_id must differ");
}

TEST(StoreCommandsTest, ValidateNewRunNamesTheBadField) {
  NewRun run = ValidRun();
  run.task_revision = 0;
  Status status = ValidateNewRun(run);
  EXPECT_EQ(status.reason(), "invalid_revision");
  EXPECT_EQ(status.message(), "task_revision must be 1 .. 2147483647, got 0");

  run = ValidRun();
  run.trigger_type = "webhook";
  EXPECT_EQ(ValidateNewRun(run).reason(), "invalid_trigger_type");

  run = ValidRun();
  run.retry_policy.backoff_max_ms = run.retry_policy.backoff_base_ms - 1;
  EXPECT_EQ(ValidateNewRun(run).reason(), "invalid_retry_policy");
}

TEST(StoreCommandsTest, PrepareEventsReturnsCanonicalPayloadsInOrder) {
  const std::vector<NewEvent> events = {
      {"run.note", "user", std::nullopt, "note-1", "{ \"b\": 1, \"a\": [true] }"},
      {"run.note", "worker", kAttemptId, std::nullopt, "{}"},
  };
  Result<std::vector<PreparedEvent>> prepared = PrepareEvents(events);
  ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
  ASSERT_EQ(prepared->size(), 2u);
  EXPECT_EQ((*prepared)[0].event, &events[0]);
  EXPECT_EQ((*prepared)[0].payload, "{\"a\":[true],\"b\":1}");
  EXPECT_EQ((*prepared)[1].event, &events[1]);
  EXPECT_EQ((*prepared)[1].payload, "{}");
}

TEST(StoreCommandsTest, PrepareEventsRefusesARepeatedDedupeKey) {
  const std::vector<NewEvent> events = {
      {"run.note", "user", std::nullopt, "same", "{}"},
      {"run.note", "user", std::nullopt, "other", "{}"},
      {"run.note", "user", std::nullopt, "same", "{}"},
  };
  Result<std::vector<PreparedEvent>> prepared = PrepareEvents(events);
  ASSERT_FALSE(prepared.ok());
  EXPECT_EQ(prepared.status().code(), StatusCode::kDuplicate);
  EXPECT_EQ(prepared.status().reason(), "dedupe_key_duplicate");
  EXPECT_THAT(prepared.status().message(), HasSubstr("same"));
}

TEST(StoreCommandsTest, PrepareEventsCapsTheCanonicalPayloadSize) {
  // {"x":"..."} is 8 bytes plus the string; whitespace outside it does not count.
  const std::string at_cap = "{ \"x\" : \"" + std::string(kMaxEventPayloadBytes - 8, 'a') + "\" }";
  const std::vector<NewEvent> fits = {{"run.note", "user", std::nullopt, std::nullopt, at_cap}};
  Result<std::vector<PreparedEvent>> prepared = PrepareEvents(fits);
  ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
  EXPECT_EQ((*prepared)[0].payload.size(), kMaxEventPayloadBytes);

  const std::string over_cap = "{\"x\":\"" + std::string(kMaxEventPayloadBytes - 7, 'a') + "\"}";
  const std::vector<NewEvent> too_large = {
      {"run.note", "user", std::nullopt, std::nullopt, over_cap}};
  prepared = PrepareEvents(too_large);
  ASSERT_FALSE(prepared.ok());
  EXPECT_EQ(prepared.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(prepared.status().reason(), "event_payload_too_large");
}

TEST(StoreCommandsTest, PrepareEventsRefusesAPayloadThatIsNotAnObject) {
  const std::vector<NewEvent> events = {{"run.note", "user", std::nullopt, std::nullopt, "[1]"}};
  Result<std::vector<PreparedEvent>> prepared = PrepareEvents(events);
  ASSERT_FALSE(prepared.ok());
  EXPECT_EQ(prepared.status().reason(), "event_payload_invalid");
}

// A valid publish of revision 1 with one local_process execution revision.
PublishTaskCommand ValidPublish() {
  PublishTaskCommand cmd;
  cmd.project_id = "0190d3a0-0000-7000-8000-000000000001";
  cmd.task_id = "0190d3a0-0000-7000-8000-000000000002";
  cmd.mutation_id = "m-1";
  cmd.revision.name = "backup";
  cmd.revision.kind = "qinglong/command@v1";
  cmd.revision.spec_json = "{}";
  cmd.revision.labels_json = "{}";
  cmd.revision.enabled = true;
  cmd.revision.content_digest = std::string(64, 'a');
  ExecutionRevisionRecord exec;
  exec.executor_type = "local_process";
  exec.plan_digest = std::string(64, 'b');
  exec.task_digest = cmd.revision.content_digest;
  exec.id = ExecutionRevisionId(1, exec.plan_digest);
  exec.plan_json = "{}";
  cmd.executions.push_back(exec);
  return cmd;
}

TEST(StoreCommandsTest, ValidatePublishTaskChecksEveryExecutionRevision) {
  EXPECT_TRUE(ValidatePublishTask(ValidPublish()).ok());

  PublishTaskCommand disabled = ValidPublish();
  disabled.revision.enabled = false;
  EXPECT_EQ(ValidatePublishTask(disabled).reason(), "execution_for_disabled_revision");

  PublishTaskCommand wrong_id = ValidPublish();
  wrong_id.executions[0].id = ExecutionRevisionId(2, wrong_id.executions[0].plan_digest);
  EXPECT_EQ(ValidatePublishTask(wrong_id).reason(), "invalid_execution_revision");

  PublishTaskCommand twice = ValidPublish();
  twice.executions.push_back(twice.executions[0]);
  EXPECT_EQ(ValidatePublishTask(twice).reason(), "invalid_execution_revision");

  PublishTaskCommand other_digest = ValidPublish();
  other_digest.executions[0].task_digest = std::string(64, 'c');
  EXPECT_EQ(ValidatePublishTask(other_digest).reason(), "execution_digest_mismatch");

  PublishTaskCommand last = ValidPublish();
  last.expected_revision = kMaxTaskRevision;
  EXPECT_EQ(ValidatePublishTask(last).reason(), "invalid_revision");

  PublishTaskCommand unnamed = ValidPublish();
  unnamed.revision.name.clear();
  EXPECT_EQ(ValidatePublishTask(unnamed).reason(), "missing_field");
}

TEST(StoreCommandsTest, ATombstoneIsADisabledRevisionOverAnExistingTaskOrTrigger) {
  PublishTaskCommand tombstone = ValidPublish();
  tombstone.tombstone = true;
  tombstone.expected_revision = 1;
  EXPECT_EQ(ValidatePublishTask(tombstone).reason(), "invalid_tombstone");  // enabled
  tombstone.revision.enabled = false;
  tombstone.executions.clear();
  EXPECT_TRUE(ValidatePublishTask(tombstone).ok());
  PublishTaskCommand first = tombstone;
  first.expected_revision.reset();
  EXPECT_EQ(ValidatePublishTask(first).reason(), "invalid_tombstone");
  PublishTaskCommand repinned = tombstone;
  repinned.repin_triggers = true;
  EXPECT_EQ(ValidatePublishTask(repinned).reason(), "invalid_tombstone");
}

TEST(StoreCommandsTest, ValidatePublishTriggerChecksThePinAndTheMisfirePolicy) {
  PublishTriggerCommand cmd;
  cmd.project_id = "0190d3a0-0000-7000-8000-000000000001";
  cmd.trigger_id = "0190d3a0-0000-7000-8000-000000000003";
  cmd.mutation_id = "m-2";
  cmd.revision.task_id = "0190d3a0-0000-7000-8000-000000000002";
  cmd.revision.task_revision = 1;
  cmd.revision.task_digest = std::string(64, 'a');
  cmd.revision.expression = "* * * * *";
  cmd.revision.timezone = "UTC";
  cmd.revision.misfire = "skip";
  cmd.revision.content_digest = std::string(64, 'd');
  cmd.name = "nightly";
  EXPECT_TRUE(ValidatePublishTrigger(cmd).ok());
  PublishTriggerCommand unnamed = cmd;
  unnamed.name.clear();
  EXPECT_EQ(ValidatePublishTrigger(unnamed).reason(), "missing_field");
  unnamed.expected_revision = 1;  // an update keeps the name it has
  EXPECT_TRUE(ValidatePublishTrigger(unnamed).ok());
  PublishTriggerCommand tombstone = unnamed;
  tombstone.tombstone = true;
  EXPECT_EQ(ValidatePublishTrigger(tombstone).reason(), "invalid_tombstone");
  tombstone.revision.enabled = false;
  EXPECT_TRUE(ValidatePublishTrigger(tombstone).ok());
  PublishTriggerCommand bad_misfire = cmd;
  bad_misfire.revision.misfire = "replay";
  EXPECT_EQ(ValidatePublishTrigger(bad_misfire).reason(), "invalid_misfire_policy");
  PublishTriggerCommand bad_pin = cmd;
  bad_pin.revision.task_digest = "x";
  EXPECT_EQ(ValidatePublishTrigger(bad_pin).reason(), "invalid_digest");
}

}  // namespace
}  // namespace ql
