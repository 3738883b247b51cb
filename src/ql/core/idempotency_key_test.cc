#include "ql/core/idempotency_key.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

namespace ql {
namespace {

constexpr std::string_view kTrigger = "0190a5c2-7b3e-7d41-9f00-1a2b3c4d5e6f";

TEST(CronIdempotencyKeyTest, FormatsTheDocumentedKey) {
  EXPECT_EQ(CronIdempotencyKey(kTrigger, 3, 1767225600000),
            "ql3:cron:v1:0190a5c2-7b3e-7d41-9f00-1a2b3c4d5e6f:3:1767225600000");
  EXPECT_EQ(CronIdempotencyKey(kTrigger, 1, 0),
            "ql3:cron:v1:0190a5c2-7b3e-7d41-9f00-1a2b3c4d5e6f:1:0");
}

TEST(CronIdempotencyKeyTest, RoundTrips) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  struct Case {
    std::string_view id;
    int64_t revision;
    int64_t scheduled;
  } cases[] = {
      {kTrigger, 1, 0},
      {kTrigger, 2, 60000},
      {"00000000-0000-0000-0000-000000000000", 1, 1},
      {"ffffffff-ffff-ffff-ffff-ffffffffffff", kMax, kMax},
      {"abcdef01-2345-6789-abcd-ef0123456789", 1000000, 4102444800000},
  };
  for (const Case& c : cases) {
    std::string key = CronIdempotencyKey(c.id, c.revision, c.scheduled);
    Result<CronKeyParts> parts = ParseCronIdempotencyKey(key);
    ASSERT_TRUE(parts.ok()) << key << ": " << parts.status().ToString();
    EXPECT_EQ(parts->trigger_id, c.id);
    EXPECT_EQ(parts->trigger_revision, c.revision);
    EXPECT_EQ(parts->scheduled_for_ms, c.scheduled);
    EXPECT_EQ(
        CronIdempotencyKey(parts->trigger_id, parts->trigger_revision, parts->scheduled_for_ms),
        key);
  }
}

TEST(CronIdempotencyKeyTest, DistinctOccurrencesGetDistinctKeys) {
  // Neighbouring values must not collide: the unique index relies on it.
  EXPECT_NE(CronIdempotencyKey(kTrigger, 1, 12), CronIdempotencyKey(kTrigger, 11, 2));
  EXPECT_NE(CronIdempotencyKey(kTrigger, 1, 60000), CronIdempotencyKey(kTrigger, 2, 60000));
  EXPECT_NE(CronIdempotencyKey(kTrigger, 1, 60000), CronIdempotencyKey(kTrigger, 1, 60001));
}

TEST(CronIdempotencyKeyTest, RejectsMalformedKeys) {
  const std::string id(kTrigger);
  const std::string malformed[] = {
      "",
      "ql3:cron:v1:",
      "ql3:cron:v1",
      "ql3:cron:v2:" + id + ":1:0",
      "QL3:cron:v1:" + id + ":1:0",
      "ql3:Cron:v1:" + id + ":1:0",
      " ql3:cron:v1:" + id + ":1:0",
      "ql3:manual:v1:" + id + ":1:0",
      // field count
      "ql3:cron:v1:" + id,
      "ql3:cron:v1:" + id + ":1",
      "ql3:cron:v1:" + id + ":1:0:",
      "ql3:cron:v1:" + id + ":1:0:5",
      "ql3:cron:v1::" + id + ":1:0",
      "ql3:cron:v1:" + id + "::1:0",
      // trigger id
      "ql3:cron:v1::1:0",
      "ql3:cron:v1:0190A5C2-7B3E-7D41-9F00-1A2B3C4D5E6F:1:0",
      "ql3:cron:v1:0190a5c27b3e7d419f001a2b3c4d5e6f:1:0",
      "ql3:cron:v1:{0190a5c2-7b3e-7d41-9f00-1a2b3c4d5e6f}:1:0",
      "ql3:cron:v1:0190a5c2-7b3e-7d41-9f00-1a2b3c4d5e6:1:0",
      "ql3:cron:v1:0190a5c2-7b3e-7d41-9f00-1a2b3c4d5e6f0:1:0",
      "ql3:cron:v1:0190a5c2-7b3e-7d41-9f0-01a2b3c4d5e6f:1:0",
      "ql3:cron:v1:0190a5g2-7b3e-7d41-9f00-1a2b3c4d5e6f:1:0",
      "ql3:cron:v1:trigger-1:1:0",
      // revision
      "ql3:cron:v1:" + id + ":0:0",
      "ql3:cron:v1:" + id + ":-1:0",
      "ql3:cron:v1:" + id + ":+1:0",
      "ql3:cron:v1:" + id + ":01:0",
      "ql3:cron:v1:" + id + ": 1:0",
      "ql3:cron:v1:" + id + ":1 :0",
      "ql3:cron:v1:" + id + ":1.0:0",
      "ql3:cron:v1:" + id + ":1e3:0",
      "ql3:cron:v1:" + id + ":0x1:0",
      "ql3:cron:v1:" + id + ":9223372036854775808:0",
      "ql3:cron:v1:" + id + ":99999999999999999999999:0",
      // scheduled time
      "ql3:cron:v1:" + id + ":1:",
      "ql3:cron:v1:" + id + ":1:-1",
      "ql3:cron:v1:" + id + ":1:+0",
      "ql3:cron:v1:" + id + ":1:00",
      "ql3:cron:v1:" + id + ":1:060000",
      "ql3:cron:v1:" + id + ":1:60000 ",
      "ql3:cron:v1:" + id + ":1:60000\n",
      "ql3:cron:v1:" + id + ":1:9223372036854775808",
      "ql3:cron:v1:" + id + ":1:６０",
      std::string("ql3:cron:v1:") + id + ":1:6" + '\0',
  };
  for (const std::string& key : malformed) {
    Result<CronKeyParts> parts = ParseCronIdempotencyKey(key);
    ASSERT_FALSE(parts.ok()) << "accepted '" << key << "'";
    EXPECT_EQ(parts.status().code(), StatusCode::kInvalidArgument) << key;
    EXPECT_EQ(parts.status().reason(), "invalid_idempotency_key") << key;
  }
}

TEST(CronIdempotencyKeyTest, MessagesNameTheOffendingField) {
  const std::string id(kTrigger);
  EXPECT_EQ(ParseCronIdempotencyKey("ql3:cron:v2:" + id + ":1:0").status().message(),
            "idempotency key 'ql3:cron:v2:0190a5c2-7b3e-7d41-9f00-1a2b3c4d5e6f:1:0' does not "
            "start with 'ql3:cron:v1:'");
  EXPECT_EQ(ParseCronIdempotencyKey("ql3:cron:v1:" + id + ":1").status().message(),
            "idempotency key 'ql3:cron:v1:0190a5c2-7b3e-7d41-9f00-1a2b3c4d5e6f:1' must have "
            "exactly 3 fields <triggerId>:<triggerRevision>:<scheduledForMs> after the prefix, "
            "found 2");
  EXPECT_EQ(ParseCronIdempotencyKey("ql3:cron:v1:ABC:1:0").status().message(),
            "idempotency key trigger id 'ABC' is not a canonical lowercase UUID (8-4-4-4-12 hex "
            "digits)");
  EXPECT_EQ(ParseCronIdempotencyKey("ql3:cron:v1:" + id + ":0:0").status().message(),
            "idempotency key trigger revision '0' must be >= 1");
  EXPECT_EQ(ParseCronIdempotencyKey("ql3:cron:v1:" + id + ":01:0").status().message(),
            "idempotency key trigger revision '01' is not a plain decimal integer within int64 "
            "(no sign or leading zeros)");
  EXPECT_EQ(ParseCronIdempotencyKey("ql3:cron:v1:" + id + ":1:-5").status().message(),
            "idempotency key scheduled time '-5' is not a plain decimal integer within int64 (no "
            "sign or leading zeros)");
}

TEST(CronIdempotencyKeyTest, HugeInputGivesABoundedMessage) {
  std::string key = "ql3:cron:v1:" + std::string(100000, 'a') + ":1:0";
  Status st = ParseCronIdempotencyKey(key).status();
  EXPECT_EQ(st.reason(), "invalid_idempotency_key");
  EXPECT_LT(st.message().size(), 300u);
  EXPECT_NE(st.message().find("(100000 bytes)"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace ql
