#include "yaml_output.h"

#include <gtest/gtest.h>

namespace ql::cli {
namespace {

using nlohmann::json;

TEST(YamlOutputTest, BlockStyleWithPlainAndQuotedScalars) {
  const json doc = json::parse(R"({
    "name": "backup", "enabled": true, "attempts": 3, "note": null,
    "labels": {"team": "ops"}, "triggers": [{"cron": "0 3 * * *", "tz": "Asia/Shanghai"}],
    "tags": ["a", "b"], "empty": {}, "none": [], "code": "true", "at": "12:30",
    "text": "two\nlines", "hash": "a #b", "colon": "key: value", "num": "007"
  })");
  EXPECT_EQ(YamlOutput(doc),
            "at: \"12:30\"\n"
            "attempts: 3\n"
            "code: \"true\"\n"
            "colon: \"key: value\"\n"
            "empty: {}\n"
            "enabled: true\n"
            "hash: \"a #b\"\n"
            "labels:\n"
            "  team: ops\n"
            "name: backup\n"
            "none: []\n"
            "note: null\n"
            "num: \"007\"\n"
            "tags:\n"
            "- a\n"
            "- b\n"
            "text: \"two\\nlines\"\n"
            "triggers:\n"
            "- cron: \"0 3 * * *\"\n"
            "  tz: Asia/Shanghai\n");
}

TEST(YamlOutputTest, ScalarsAndNestedLists) {
  EXPECT_EQ(YamlOutput(json("x")), "x\n");
  EXPECT_EQ(YamlOutput(json::array()), "[]\n");
  EXPECT_EQ(YamlOutput(json::parse(R"([[1, 2], {"a": [3]}])")),
            "- - 1\n"
            "  - 2\n"
            "- a:\n"
            "  - 3\n");
  EXPECT_EQ(YamlOutput(json::parse(R"({"url": "https://ql.example.test/x", "名字": "任务"})")),
            "url: https://ql.example.test/x\n"
            "名字: 任务\n");
}

}  // namespace
}  // namespace ql::cli
