#include "ql/core/placement.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "ql/core/execution_plan.h"
#include "ql/core/task_spec.h"

namespace ql {
namespace {

using nlohmann::json;

TEST(PlacementTest, APlacementReadsItsPoolAndLabelsAndTheDefaultIsLeftOutOfTheSpec) {
  Result<CommandSpec> spec = ParseCommandSpec(
      {{"command", {{"kind", "shell"}, {"command", "true"}}},
       {"placement", {{"pool", "gpu"}, {"labels", {{"arch", "arm64"}, {"zone", "cn-east/1"}}}}}});
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->placement.pool, "gpu");
  EXPECT_EQ(spec->placement.labels.at("zone"), "cn-east/1");
  EXPECT_EQ(CommandSpecToJson(*spec)["placement"],
            (json{{"pool", "gpu"}, {"labels", {{"arch", "arm64"}, {"zone", "cn-east/1"}}}}));
  // {"pool": "default"} is the default: the canonical spec (and so its digest) leaves it out.
  Result<CommandSpec> plain =
      ParseCommandSpec({{"command", {{"kind", "shell"}, {"command", "true"}}},
                        {"placement", {{"pool", "default"}}}});
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(CommandSpecToJson(*plain).contains("placement"));
}

TEST(PlacementTest, BadPlacementsAreRefusedNamingTheField) {
  const json command = {{"kind", "shell"}, {"command", "true"}};
  auto reason = [&](const json& placement) {
    Result<CommandSpec> spec = ParseCommandSpec({{"command", command}, {"placement", placement}});
    return spec.ok() ? std::string("ok") : spec.status().reason();
  };
  EXPECT_EQ(reason({{"pool", "GPU"}}), "spec_invalid_placement");
  EXPECT_EQ(reason({{"pool", "../x"}}), "spec_invalid_placement");
  EXPECT_EQ(reason({{"pool", ""}}), "spec_invalid_placement");
  EXPECT_EQ(reason({{"pool", std::string(64, 'a')}}), "spec_invalid_placement");
  EXPECT_EQ(reason({{"pool", std::string(63, 'a')}}), "ok");
  EXPECT_EQ(reason({{"pool", 3}}), "spec_invalid_type");
  EXPECT_EQ(reason({{"labels", {{"Arch", "x"}}}}), "spec_invalid_placement");
  EXPECT_EQ(reason({{"labels", {{"arch", "a b"}}}}), "spec_invalid_placement");
  EXPECT_EQ(reason({{"labels", {{"arch", ""}}}}), "spec_invalid_placement");
  EXPECT_EQ(reason({{"labels", {{"arch", 1}}}}), "spec_invalid_placement");
  EXPECT_EQ(reason({{"labels", json::array()}}), "spec_invalid_placement");
  EXPECT_EQ(reason({{"node", "x"}}), "spec_unknown_field");
  EXPECT_EQ(reason("gpu"), "spec_invalid_type");
  json many = json::object();
  for (int i = 0; i < kMaxPlacementLabels + 1; ++i) many["k" + std::to_string(i)] = "v";
  EXPECT_EQ(reason({{"labels", many}}), "spec_invalid_placement");
  Result<CommandSpec> spec =
      ParseCommandSpec({{"command", command}, {"placement", {{"labels", {{"arch", "a b"}}}}}});
  EXPECT_NE(spec.status().message().find("spec.placement.labels.arch"), std::string::npos)
      << spec.status().message();
}

TEST(PlacementTest, ThePlanCarriesThePlacementAndItsDigestChangesWithIt) {
  TaskContent content;
  content.name = "t";
  content.spec.command = ShellCommand{"true", "/bin/sh"};
  const std::string id = "01890000-0000-7000-8000-000000000001";
  Result<ExecutionPlan> plain =
      BuildExecutionPlan(id, 1, content, TaskContentDigest(content), kExecutorRemoteWorker);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_FALSE(PlanToJson(*plain).contains("placement"));
  content.spec.placement.pool = "gpu";
  content.spec.placement.labels["arch"] = "arm64";
  Result<ExecutionPlan> placed =
      BuildExecutionPlan(id, 1, content, TaskContentDigest(content), kExecutorRemoteWorker);
  ASSERT_TRUE(placed.ok()) << placed.status().ToString();
  const json stored = PlanToJson(*placed);
  EXPECT_EQ(stored["placement"], (json{{"pool", "gpu"}, {"labels", {{"arch", "arm64"}}}}));
  EXPECT_NE(PlanDigest(*plain), PlanDigest(*placed));
  Result<ExecutionPlan> back = PlanFromJson(stored);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, *placed);
  // A stored plan naming the default placement was not written by PlanToJson.
  json odd = PlanToJson(*plain);
  odd["placement"] = {{"pool", "default"}};
  EXPECT_EQ(PlanFromJson(odd).status().reason(), "plan_invalid");
}

TEST(PlacementTest, LabelAssignmentsAndDescriptions) {
  Result<std::pair<std::string, std::string>> label =
      ParseLabelAssignment("invalid_label", "a=b=c");
  EXPECT_EQ(label.status().reason(), "invalid_label");
  label = ParseLabelAssignment("invalid_label", "arch=x86");
  ASSERT_TRUE(label.ok());
  EXPECT_EQ(label->second, "x86");
  EXPECT_EQ(ParseLabelAssignment("invalid_label", "arch").status().reason(), "invalid_label");
  EXPECT_EQ(DescribePlacement({"gpu", {{"arch", "x86"}, {"os", "linux"}}}),
            "pool gpu, labels arch=x86,os=linux");
}

}  // namespace
}  // namespace ql
