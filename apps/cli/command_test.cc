// The management commands against a scripted HTTP server on loopback: what they send, what they
// print, and how they exit.

#include <gtest/gtest.h>
#include <httplib.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>

#include "fake_api_server.h"
#include "retention_command.h"
#include "run_command.h"
#include "status_command.h"
#include "task_command.h"
#include "trigger_command.h"

namespace ql::cli {
namespace {

using nlohmann::json;

// ---------------------------------------------------------------------------------------------
// BuildTaskBody: the request a set of flags turns into.

TEST(BuildTaskBodyTest, ShellCommandWithEveryContentFlag) {
  TaskContentFlags flags;
  flags.shell = "echo hi";
  flags.bash = true;
  flags.timeout = "1h30m";
  flags.env = {"A=1", "B=x=y", "EMPTY="};
  flags.workdir = "/srv";
  flags.labels = {"team=ops"};
  flags.disabled = true;
  CliResult<json> body = BuildTaskBody(flags, "hello", nullptr);
  ASSERT_TRUE(body.ok()) << body.error().ToString();
  EXPECT_EQ(*body, json::parse(R"({
    "name": "hello",
    "spec": {"command": {"kind": "shell", "command": "echo hi", "shell": "/bin/bash"},
             "environment": {"A": "1", "B": "x=y", "EMPTY": ""},
             "workingDirectory": "/srv", "timeoutMs": 5400000},
    "labels": {"team": "ops"},
    "enabled": false})"));
}

TEST(BuildTaskBodyTest, ArgvCommandTakesItsArgumentsAndExtraArgs) {
  TaskContentFlags flags;
  flags.argv_file = "/usr/bin/find";
  flags.args = {"/tmp", "-name"};
  flags.extra_args = {"-delete"};
  CliResult<json> body = BuildTaskBody(flags, "clean", nullptr);
  ASSERT_TRUE(body.ok());
  EXPECT_EQ((*body)["spec"]["command"], json::parse(R"({"kind":"argv","file":"/usr/bin/find",
                            "args":["/tmp","-name","-delete"]})"));
  EXPECT_FALSE((*body)["spec"].contains("timeoutMs"));  // the server's default applies
  EXPECT_EQ((*body)["enabled"], true);
}

TEST(BuildTaskBodyTest, RetryFlagsBecomeARetryPolicy) {
  TaskContentFlags flags;
  flags.shell = "true";
  flags.max_attempts = 3;
  flags.retry_on_lost = true;
  flags.backoff = "10s";
  CliResult<json> body = BuildTaskBody(flags, "t", nullptr);
  ASSERT_TRUE(body.ok());
  EXPECT_EQ((*body)["retry"], json::parse(R"({"max_attempts":3,"retry_on_lost":true,
                                              "safety":"idempotent","backoff_base_ms":10000})"));
  flags.safety = "deduplicated";
  EXPECT_EQ((*BuildTaskBody(flags, "t", nullptr))["retry"]["safety"], "deduplicated");

  TaskContentFlags plain;
  plain.shell = "true";
  EXPECT_FALSE((*BuildTaskBody(plain, "t", nullptr)).contains("retry"));
}

TEST(BuildTaskBodyTest, BadFlagsAreUsageErrorsNamingTheFlag) {
  const auto reason = [](TaskContentFlags flags) {
    CliResult<json> body = BuildTaskBody(flags, "t", nullptr);
    EXPECT_FALSE(body.ok());
    if (body.ok()) return std::string();
    EXPECT_EQ(body.error().exit_code(), kExitUsage);
    return body.error().reason();
  };
  TaskContentFlags none;
  EXPECT_EQ(reason(none), "command_required");

  TaskContentFlags both;
  both.shell = "x";
  both.argv_file = "/bin/true";
  EXPECT_EQ(reason(both), "command_conflict");

  TaskContentFlags timeout;
  timeout.shell = "x";
  timeout.timeout = "30 seconds";
  EXPECT_EQ(reason(timeout), "invalid_duration");

  TaskContentFlags env;
  env.shell = "x";
  env.env = {"NOEQUALS"};
  EXPECT_EQ(reason(env), "invalid_env");
  env.env = {"A=1", "A=2"};
  EXPECT_EQ(reason(env), "invalid_env");

  TaskContentFlags arg;
  arg.shell = "x";
  arg.extra_args = {"-v"};
  EXPECT_EQ(reason(arg), "command_conflict");
  arg.extra_args.clear();
  arg.args = {"stray"};  // an unquoted shell command, say
  EXPECT_EQ(reason(arg), "command_conflict");
}

TEST(BuildTaskBodyTest, PublishKeepsWhatNoFlagChanges) {
  const json current = json::parse(R"({
    "id": "t1", "revision": 2, "name": "backup", "enabled": true,
    "labels": {"team": "ops"},
    "spec": {"command": {"kind": "shell", "command": "tar c /srv", "shell": "/bin/sh"},
             "environment": {"A": "1"}, "workingDirectory": "/srv", "timeoutMs": 60000}})");
  TaskContentFlags flags;
  flags.timeout = "5m";
  flags.disabled = true;
  CliResult<json> body = BuildTaskBody(flags, std::nullopt, &current);
  ASSERT_TRUE(body.ok()) << body.error().ToString();
  EXPECT_EQ((*body)["name"], "backup");
  EXPECT_EQ((*body)["spec"]["command"]["command"], "tar c /srv");
  EXPECT_EQ((*body)["spec"]["environment"], json::parse(R"({"A":"1"})"));
  EXPECT_EQ((*body)["spec"]["workingDirectory"], "/srv");
  EXPECT_EQ((*body)["spec"]["timeoutMs"], 300000);
  EXPECT_EQ((*body)["labels"], json::parse(R"({"team":"ops"})"));
  EXPECT_EQ((*body)["enabled"], false);

  TaskContentFlags replace;
  replace.env = {"B=2"};
  replace.clear_workdir = true;
  replace.bash = true;
  CliResult<json> replaced = BuildTaskBody(replace, "renamed", &current);
  ASSERT_TRUE(replaced.ok()) << replaced.error().ToString();
  EXPECT_EQ((*replaced)["name"], "renamed");
  // --env sets one variable and keeps the others.
  EXPECT_EQ((*replaced)["spec"]["environment"], json::parse(R"({"A":"1","B":"2"})"));
  EXPECT_FALSE((*replaced)["spec"].contains("workingDirectory"));
  EXPECT_EQ((*replaced)["spec"]["command"]["shell"], "/bin/bash");

  // Replacing the whole environment is explicit; removing one variable is too.
  TaskContentFlags whole;
  whole.clear_env = true;
  whole.env = {"C=3"};
  EXPECT_EQ((*BuildTaskBody(whole, std::nullopt, &current))["spec"]["environment"],
            json::parse(R"({"C":"3"})"));
  TaskContentFlags unset;
  unset.unset_env = {"A"};
  unset.unset_labels = {"team"};
  CliResult<json> removed = BuildTaskBody(unset, std::nullopt, &current);
  ASSERT_TRUE(removed.ok()) << removed.error().ToString();
  EXPECT_EQ((*removed)["spec"]["environment"], json::object());
  EXPECT_EQ((*removed)["labels"], json::object());
  unset.unset_env = {"NOPE"};
  EXPECT_EQ(BuildTaskBody(unset, std::nullopt, &current).error().reason(), "unknown_env");
  unset.unset_env = {"A"};
  unset.env = {"A=2"};
  EXPECT_EQ(BuildTaskBody(unset, std::nullopt, &current).error().reason(), "flag_conflict");
}

TEST(BuildTaskBodyTest, PublishKeepsTheRetryPolicyAndChangesOnlyTheFieldsGiven) {
  const json current = json::parse(R"({
    "name": "n", "enabled": true, "labels": {},
    "spec": {"command": {"kind": "shell", "command": "x", "shell": "/bin/sh"}},
    "retry": {"max_attempts": 3, "retry_on_lost": false, "safety": "deduplicated",
              "backoff_base_ms": 5000, "backoff_max_ms": 60000}})");
  TaskContentFlags untouched;
  EXPECT_EQ((*BuildTaskBody(untouched, std::nullopt, &current))["retry"], current["retry"]);

  TaskContentFlags lost;
  lost.retry_on_lost = true;
  const json retry = (*BuildTaskBody(lost, std::nullopt, &current))["retry"];
  EXPECT_EQ(retry["retry_on_lost"], true);
  EXPECT_EQ(retry["safety"], "deduplicated");  // the declared safety is kept
  EXPECT_EQ(retry["max_attempts"], 3);

  TaskContentFlags both;
  both.retry_on_lost = true;
  both.no_retry_on_lost = true;
  EXPECT_EQ(BuildTaskBody(both, std::nullopt, &current).error().reason(), "flag_conflict");
}

// Retrying timeouts is a single field of the policy: set by --retry-on-timeout, kept by an edit
// that does not name it, cleared by --no-retry-on-timeout.
TEST(BuildTaskBodyTest, RetryOnTimeoutIsSetKeptAndClearedByItsFlags) {
  TaskContentFlags add;
  add.shell = "sleep 9";
  add.timeout = "2s";
  add.max_attempts = 2;
  add.retry_on_timeout = true;
  CliResult<json> added = BuildTaskBody(add, "slow", nullptr);
  ASSERT_TRUE(added.ok()) << added.error().ToString();
  EXPECT_EQ((*added)["retry"], json::parse(R"({"max_attempts":2,"retry_on_timeout":true})"));

  const json current = json::parse(R"({
    "name": "slow", "enabled": true, "labels": {},
    "spec": {"command": {"kind": "shell", "command": "sleep 9", "shell": "/bin/sh"}},
    "retry": {"max_attempts": 2, "retry_on_lost": false, "retry_on_timeout": true,
              "safety": "unknown", "backoff_base_ms": 1000, "backoff_max_ms": 60000}})");
  TaskContentFlags other;
  other.max_attempts = 3;
  const json kept = (*BuildTaskBody(other, std::nullopt, &current))["retry"];
  EXPECT_EQ(kept["retry_on_timeout"], true);
  EXPECT_EQ(kept["max_attempts"], 3);

  TaskContentFlags off;
  off.no_retry_on_timeout = true;
  const json cleared = (*BuildTaskBody(off, std::nullopt, &current))["retry"];
  EXPECT_EQ(cleared["retry_on_timeout"], false);
  EXPECT_EQ(cleared["max_attempts"], 2);

  TaskContentFlags both;
  both.retry_on_timeout = true;
  both.no_retry_on_timeout = true;
  EXPECT_EQ(BuildTaskBody(both, std::nullopt, &current).error().reason(), "flag_conflict");
}

TEST(BuildTaskBodyTest, PlacementFlagsEditThePlacementAsLabelFlagsEditLabels) {
  TaskContentFlags add;
  add.shell = "true";
  add.pool = "gpu";
  add.worker_labels = {"arch=arm64"};
  add.labels = {"team=ml"};  // the task's own labels stay apart
  CliResult<json> added = BuildTaskBody(add, "t", nullptr);
  ASSERT_TRUE(added.ok()) << added.error().ToString();
  EXPECT_EQ((*added)["spec"]["placement"],
            json::parse(R"({"pool":"gpu","labels":{"arch":"arm64"}})"));
  EXPECT_EQ((*added)["labels"], json::parse(R"({"team":"ml"})"));

  const json current = json::parse(R"({"name": "t", "revision": 1, "labels": {},
      "spec": {"command": {"kind": "shell", "command": "true", "shell": "/bin/sh"},
               "placement": {"pool": "gpu", "labels": {"arch": "arm64", "cuda": "12"}}}})");
  // No placement flag: the placement is kept as it is.
  TaskContentFlags none;
  none.timeout = "5s";
  EXPECT_EQ((*BuildTaskBody(none, std::nullopt, &current))["spec"]["placement"],
            current["spec"]["placement"]);
  // --worker-label sets one and keeps the others; --pool keeps the labels.
  TaskContentFlags one;
  one.worker_labels = {"cuda=13"};
  one.pool = "gpu-big";
  EXPECT_EQ((*BuildTaskBody(one, std::nullopt, &current))["spec"]["placement"],
            json::parse(R"({"pool":"gpu-big","labels":{"arch":"arm64","cuda":"13"}})"));
  TaskContentFlags unset;
  unset.unset_worker_labels = {"cuda"};
  EXPECT_EQ((*BuildTaskBody(unset, std::nullopt, &current))["spec"]["placement"],
            json::parse(R"({"pool":"gpu","labels":{"arch":"arm64"}})"));
  unset.unset_worker_labels = {"zone"};
  EXPECT_EQ(BuildTaskBody(unset, std::nullopt, &current).error().reason(), "unknown_worker_label");
  // `--pool default` alone removes the placement.
  TaskContentFlags back;
  back.pool = "default";
  EXPECT_FALSE((*BuildTaskBody(back, std::nullopt, &current))["spec"].contains("placement"));
  // ... but with --worker-label it is the default pool with those labels.
  back.worker_labels = {"arch=amd64"};
  EXPECT_EQ((*BuildTaskBody(back, std::nullopt, &current))["spec"]["placement"],
            json::parse(R"({"pool":"default","labels":{"arch":"amd64","cuda":"12"}})"));

  TaskContentFlags bad;
  bad.shell = "true";
  bad.worker_labels = {"arch"};
  EXPECT_EQ(BuildTaskBody(bad, "t", nullptr).error().reason(), "invalid_worker_label");
}

// ---------------------------------------------------------------------------------------------
// Commands against a scripted server.

class CommandTest : public ::testing::Test {
 protected:
  CommandContext Context(bool json = false) {
    GlobalOptions options;
    options.server = server_.url();
    options.token = "test-token";
    options.json = json;
    return CommandContext(
        options, [](const std::string&) { return std::nullopt; }, out_, err_);
  }
  static void Json(httplib::Response& res, const json& body, int status = 200) {
    res.status = status;
    res.set_content(body.dump(), "application/json");
  }

  FakeServer server_;
  std::ostringstream out_;
  std::ostringstream err_;
};

TEST_F(CommandTest, TaskAddPostsTheBodyWithAMutationIdAndPrintsTheId) {
  server_.http().Post("/api/v1/tasks", [&](const httplib::Request& req, httplib::Response& res) {
    server_.Record(req);
    Json(res, {{"id", "task-1"}, {"revision", 1}}, 201);
  });
  TaskAddArgs args;
  args.name = "hello";
  args.content.shell = "echo hello";
  args.content.timeout = "30s";
  CommandContext context = Context();
  EXPECT_EQ(TaskAdd(args, context), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "task-1\n");
  const json sent = json::parse(server_.bodies().at(0));
  EXPECT_EQ(sent["name"], "hello");
  EXPECT_EQ(sent["spec"]["timeoutMs"], 30000);
  EXPECT_EQ(sent["mutation_id"].get<std::string>().size(), 36u);
}

TEST_F(CommandTest, ServerErrorPrintsCodeAndMessageAndExitsOne) {
  server_.http().Post("/api/v1/tasks", [&](const httplib::Request&, httplib::Response& res) {
    Json(res, {{"code", "spec_timeout_out_of_range"}, {"message", "timeoutMs too large"}}, 400);
  });
  TaskAddArgs args;
  args.name = "t";
  args.content.shell = "true";
  args.content.timeout = "400d";
  CommandContext context = Context();
  EXPECT_EQ(TaskAdd(args, context), kExitFailure);
  EXPECT_EQ(err_.str(), "error: spec_timeout_out_of_range: timeoutMs too large\n");
  EXPECT_EQ(out_.str(), "");
}

TEST_F(CommandTest, WithJsonErrorsAreOneJsonObject) {
  server_.http().Post("/api/v1/tasks", [&](const httplib::Request&, httplib::Response& res) {
    Json(res, {{"code", "spec_timeout_out_of_range"}, {"message", "timeoutMs \"too\" large"}}, 400);
  });
  TaskAddArgs args;
  args.name = "t";
  args.content.shell = "true";
  CommandContext context = Context(/*json=*/true);
  EXPECT_EQ(TaskAdd(args, context), kExitFailure);
  EXPECT_EQ(err_.str(),
            R"({"code":"spec_timeout_out_of_range","message":"timeoutMs \"too\" large"})"
            "\n");
  EXPECT_EQ(json::parse(err_.str()),
            json({{"code", "spec_timeout_out_of_range"}, {"message", "timeoutMs \"too\" large"}}));
  EXPECT_EQ(out_.str(), "");

  // Local failures too, with their exit status.
  err_.str("");
  args.content.timeout = "5 minutes";
  EXPECT_EQ(TaskAdd(args, context), kExitUsage);
  EXPECT_EQ(json::parse(err_.str())["code"], "invalid_duration");
}

TEST_F(CommandTest, MalformedDurationExitsTwoBeforeAnyRequest) {
  TaskAddArgs args;
  args.name = "t";
  args.content.shell = "true";
  args.content.timeout = "5 minutes";
  CommandContext context = Context();
  EXPECT_EQ(TaskAdd(args, context), kExitUsage);
  EXPECT_NE(err_.str().find("error: invalid_duration: --timeout '5 minutes'"), std::string::npos)
      << err_.str();
  EXPECT_TRUE(server_.requests().empty());
}

TEST_F(CommandTest, RetentionSetSendsOnlyTheFlagsGivenAndShowsWhatApplies) {
  const json answer = {{"project_id", "p-1"},          {"task_id", nullptr},
                       {"keep_days", 7},                {"keep_runs", nullptr},
                       {"effective", {{"keep_days", 7}, {"keep_runs", 1000}}}};
  server_.http().Post("/api/v1/projects/default/retention",
                      [&](const httplib::Request& req, httplib::Response& res) {
                        server_.Record(req);
                        Json(res, answer);
                      });
  server_.http().Get("/api/v1/tasks/t-1/retention",
                     [&](const httplib::Request& req, httplib::Response& res) {
                       server_.Record(req);
                       Json(res, answer);
                     });
  RetentionArgs args;
  args.target = "default";
  args.keep_days = "7";
  args.keep_runs = "inherit";
  CommandContext context = Context();
  EXPECT_EQ(RetentionSet(args, /*task=*/false, context), kExitOk) << err_.str();
  EXPECT_EQ(json::parse(server_.bodies().at(0)), json::parse(R"({"keep_days":7,"keep_runs":null})"));
  EXPECT_EQ(out_.str(),
            "project default: keep finished runs 7 days (set here), at most 1000 runs per task "
            "(inherited)\n");

  // No flag: the settings are only read.
  RetentionArgs show;
  show.target = "t-1";
  CommandContext show_context = Context();
  EXPECT_EQ(RetentionSet(show, /*task=*/true, show_context), kExitOk) << err_.str();
  EXPECT_EQ(server_.requests().back(), "GET /api/v1/tasks/t-1/retention");

  RetentionArgs bad;
  bad.target = "default";
  bad.keep_runs = "0";
  CommandContext bad_context = Context();
  EXPECT_EQ(RetentionSet(bad, /*task=*/false, bad_context), kExitUsage);
  EXPECT_NE(err_.str().find("--keep-runs"), std::string::npos) << err_.str();
  EXPECT_EQ(server_.requests().size(), 2u);
}

TEST_F(CommandTest, TaskPublishSendsTheExpectedRevisionAndPrintsTheNewOne) {
  server_.http().Get("/api/v1/tasks/t1", [&](const httplib::Request& req, httplib::Response& res) {
    server_.Record(req);
    Json(res, json::parse(R"({"id":"t1","revision":1,"name":"n","enabled":true,"labels":{},
                              "spec":{"command":{"kind":"shell","command":"a","shell":"/bin/sh"},
                                      "environment":{},"timeoutMs":1000}})"));
  });
  server_.http().Post("/api/v1/tasks/t1/revisions",
                      [&](const httplib::Request& req, httplib::Response& res) {
                        server_.Record(req);
                        Json(res, {{"id", "t1"}, {"revision", 2}}, 201);
                      });
  TaskPublishArgs args;
  args.task_id = "t1";
  args.expected_revision = 1;
  args.content.shell = "b";
  CommandContext context = Context();
  EXPECT_EQ(TaskPublish(args, context), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "2\n");
  const json sent = json::parse(server_.bodies().at(1));
  EXPECT_EQ(sent["expected_revision"], 1);
  EXPECT_EQ(sent["spec"]["command"]["command"], "b");
  EXPECT_EQ(sent["spec"]["timeoutMs"], 1000);
}

TEST_F(CommandTest, TaskEditByNameRepinsOverTheCurrentRevisionAndRemoveDeletes) {
  server_.http().Get("/api/v1/tasks/nightly backup",
                     [&](const httplib::Request& req, httplib::Response& res) {
                       server_.Record(req);
                       Json(res, json::parse(R"({"id":"t1","revision":4,"name":"nightly backup",
                              "enabled":true,"labels":{},"spec":{"command":{"kind":"shell",
                              "command":"a","shell":"/bin/sh"},"environment":{},
                              "timeoutMs":1000}})"));
                     });
  server_.http().Post("/api/v1/tasks/t1/revisions",
                      [&](const httplib::Request& req, httplib::Response& res) {
                        server_.Record(req);
                        const bool repin = json::parse(req.body).value("repin_triggers", false);
                        Json(res, {{"id", "t1"}, {"revision", 5}, {"stale_triggers", repin ? 0 : 2}},
                             201);
                      });
  server_.http().Delete("/api/v1/tasks/nightly backup",
                        [&](const httplib::Request& req, httplib::Response& res) {
                          server_.Record(req);
                          Json(res, {{"id", "t1"}, {"deleted_triggers", {"g1", "g2"}}});
                        });
  TaskPublishArgs edit;
  edit.task_id = "nightly backup";
  edit.edit = true;
  edit.repin = true;
  edit.content.shell = "b";
  CommandContext context = Context();
  EXPECT_EQ(TaskPublish(edit, context), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "5\n");
  // What changed goes to stderr, stdout stays the revision number.
  EXPECT_NE(err_.str().find("command: a -> "), std::string::npos) << err_.str();
  // Addressed by name, published by id over the revision the server showed.
  EXPECT_EQ(server_.requests().at(0), "GET /api/v1/tasks/nightly backup");
  EXPECT_EQ(server_.requests().at(1), "POST /api/v1/tasks/t1/revisions");
  json sent = json::parse(server_.bodies().at(1));
  EXPECT_EQ(sent["expected_revision"], 4);
  EXPECT_EQ(sent["repin_triggers"], true);

  edit.repin = false;
  out_.str("");
  CommandContext no_repin = Context();
  EXPECT_EQ(TaskPublish(edit, no_repin), kExitOk) << err_.str();
  sent = json::parse(server_.bodies().at(3));
  EXPECT_FALSE(sent.contains("repin_triggers"));
  EXPECT_NE(err_.str().find("2 triggers of this task still pin an older revision"),
            std::string::npos)
      << err_.str();

  out_.str("");
  CommandContext rm = Context();
  EXPECT_EQ(TaskRemove("nightly backup", rm), kExitOk) << err_.str();
  EXPECT_EQ(server_.requests().back(), "DELETE /api/v1/tasks/nightly backup");
  EXPECT_EQ(out_.str(), "t1 deleted\ng1 deleted (trigger)\ng2 deleted (trigger)\n");
}

// Serves `total` runs r0..r{total-1} in pages of at most the requested limit.
void ServeRuns(FakeServer& server, int total) {
  server.http().Get(
      "/api/v1/runs", [&server, total](const httplib::Request& req, httplib::Response& res) {
        server.Record(req);
        const int start = req.has_param("cursor") ? std::stoi(req.get_param_value("cursor")) : 0;
        const int limit = std::stoi(req.get_param_value("limit"));
        json items = json::array();
        for (int i = start; i < std::min(total, start + limit); ++i) {
          items.push_back({{"id", "r" + std::to_string(i)},
                           {"task_id", "t"},
                           {"trigger_id", nullptr},
                           {"trigger_type", "manual"},
                           {"status", "succeeded"},
                           {"scheduled_for", nullptr},
                           {"exit_code", 0}});
        }
        json next = start + limit < total ? json(std::to_string(start + limit)) : json(nullptr);
        res.set_content(json{{"items", items}, {"next_cursor", next}}.dump(), "application/json");
      });
}

// Runs `ql run list --json` with `args` and returns what it printed, parsed.
json RunListJson(const RunListArgs& args, CommandContext context, std::ostringstream& out) {
  EXPECT_EQ(RunList(args, context), kExitOk);
  return json::parse(out.str(), nullptr, false);
}

TEST_F(CommandTest, RunListFollowsCursorsUntilTheLimitAndPrintsTheApiPageShape) {
  ServeRuns(server_, 1200);
  RunListArgs args;
  args.limit = 700;
  args.task_id = "t";
  const json listing = RunListJson(args, Context(/*json=*/true), out_);
  ASSERT_TRUE(listing.is_object()) << out_.str() << err_.str();
  const json& runs = listing["items"];
  ASSERT_TRUE(runs.is_array());
  ASSERT_EQ(runs.size(), 700u);
  EXPECT_EQ(runs[0]["id"], "r0");
  EXPECT_EQ(runs[699]["id"], "r699");
  EXPECT_TRUE(runs[0]["scheduled_for"].is_null());
  EXPECT_EQ(listing["next_cursor"], "700");
  EXPECT_EQ(server_.requests(),
            (std::vector<std::string>{"GET /api/v1/runs?limit=500&task_id=t",
                                      "GET /api/v1/runs?cursor=500&limit=200&task_id=t"}));
}

TEST_F(CommandTest, RunListContinuesFromTheCursorItPrinted) {
  ServeRuns(server_, 5);
  RunListArgs args;
  args.limit = 2;
  args.cursor = "2";
  const json listing = RunListJson(args, Context(/*json=*/true), out_);
  ASSERT_TRUE(listing.is_object()) << out_.str() << err_.str();
  ASSERT_EQ(listing["items"].size(), 2u);
  EXPECT_EQ(listing["items"][0]["id"], "r2");
  EXPECT_EQ(listing["next_cursor"], "4");
  EXPECT_EQ(server_.requests(), (std::vector<std::string>{"GET /api/v1/runs?cursor=2&limit=2"}));
}

TEST_F(CommandTest, RunListStopsWhenTheListingEndsWithANullCursor) {
  ServeRuns(server_, 3);
  const json listing = RunListJson(RunListArgs{}, Context(/*json=*/true), out_);
  ASSERT_TRUE(listing.is_object()) << out_.str() << err_.str();
  EXPECT_EQ(listing["items"].size(), 3u);
  ASSERT_TRUE(listing.contains("next_cursor"));
  EXPECT_TRUE(listing["next_cursor"].is_null());
  EXPECT_EQ(server_.requests().size(), 1u);
}

// Serves `total` objects {id: "<prefix><i>"} at `path` in pages, cursor = next index.
void ServeIds(FakeServer& server, const std::string& path, const std::string& prefix, int total) {
  server.http().Get(path, [&server, prefix, total](const httplib::Request& req,
                                                   httplib::Response& res) {
    server.Record(req);
    const int start = req.has_param("cursor") ? std::stoi(req.get_param_value("cursor")) : 0;
    const int limit = std::stoi(req.get_param_value("limit"));
    json items = json::array();
    for (int i = start; i < std::min(total, start + limit); ++i) {
      items.push_back({{"id", prefix + std::to_string(i)}});
    }
    json next = start + limit < total ? json(std::to_string(start + limit)) : json(nullptr);
    res.set_content(json{{"items", items}, {"next_cursor", next}}.dump(), "application/json");
  });
}

TEST_F(CommandTest, TaskAndTriggerListsPrintTheApiPageShapeAndContinueFromACursor) {
  ServeIds(server_, "/api/v1/tasks", "task", 5);
  ServeIds(server_, "/api/v1/triggers", "trigger", 5);
  TaskListArgs tasks;
  tasks.limit = 2;
  tasks.cursor = "1";
  CommandContext task_context = Context(/*json=*/true);
  ASSERT_EQ(TaskList(tasks, task_context), kExitOk) << err_.str();
  const json task_page = json::parse(out_.str(), nullptr, false);
  ASSERT_TRUE(task_page.is_object()) << out_.str();
  ASSERT_EQ(task_page["items"].size(), 2u);
  EXPECT_EQ(task_page["items"][0]["id"], "task1");
  EXPECT_EQ(task_page["next_cursor"], "3");

  out_.str("");
  TriggerListArgs triggers;
  CommandContext trigger_context = Context(/*json=*/true);
  ASSERT_EQ(TriggerList(triggers, trigger_context), kExitOk) << err_.str();
  const json trigger_page = json::parse(out_.str(), nullptr, false);
  ASSERT_TRUE(trigger_page.is_object()) << out_.str();
  EXPECT_EQ(trigger_page["items"].size(), 5u);
  EXPECT_TRUE(trigger_page["next_cursor"].is_null());
  EXPECT_EQ(server_.requests(), (std::vector<std::string>{"GET /api/v1/tasks?cursor=1&limit=2",
                                                          "GET /api/v1/triggers?limit=500"}));
}

TEST_F(CommandTest, RunListTableAlignsColumns) {
  ServeRuns(server_, 2);
  RunListArgs args;
  CommandContext context = Context();
  EXPECT_EQ(RunList(args, context), kExitOk);
  EXPECT_EQ(out_.str(),
            "RUN  TASK  ORIGIN  STATUS     SCHEDULED  STARTED  DURATION  EXIT\n"
            "r0   t     manual  succeeded  -          -        -         0\n"
            "r1   t     manual  succeeded  -          -        -         0\n");
}

// The table shows each run by one length of prefix, at least what the server found unique in
// the project (a run of another task may share more than the listed runs do); a server that does
// not know short_ids is asked again without it.
TEST_F(CommandTest, RunListTableShowsPrefixesTheServerFoundUniqueInTheProject) {
  const std::vector<std::string> ids = {"019ca86a-3a60-78bc-be53-37cf59c55371",
                                        "019ca86b-0000-7000-8000-000000000000"};
  std::atomic<bool> knows_short_ids = true;
  server_.http().Get("/api/v1/runs", [&](const httplib::Request& req, httplib::Response& res) {
    server_.Record(req);
    if (req.has_param("short_ids") && !knows_short_ids) {
      Json(res, {{"code", "unknown_parameter"}, {"message", "unknown query parameter"}}, 400);
      return;
    }
    json items = json::array();
    for (const std::string& id : ids) {
      json run = {{"id", id},
                  {"task_name", "t"},
                  {"trigger_type", "manual"},
                  {"status", "succeeded"},
                  {"exit_code", 0}};
      if (req.has_param("short_ids")) run["short_id"] = id == ids[0] ? "019ca86a-3a" : "019ca86b";
      items.push_back(run);
    }
    Json(res, {{"items", items}, {"next_cursor", nullptr}});
  });
  CommandContext context = Context();
  ASSERT_EQ(RunList(RunListArgs{}, context), kExitOk) << err_.str();
  EXPECT_NE(server_.requests().at(0).find("short_ids=true"), std::string::npos);
  EXPECT_NE(out_.str().find("\n019ca86a-3a "), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("\n019ca86b-00 "), std::string::npos) << out_.str();

  knows_short_ids = false;
  out_.str("");
  CommandContext older = Context();
  ASSERT_EQ(RunList(RunListArgs{}, older), kExitOk) << err_.str();
  EXPECT_EQ(server_.requests().size(), 3u);
  EXPECT_EQ(server_.requests().at(2).find("short_ids"), std::string::npos);
  EXPECT_NE(out_.str().find("\n019ca86a "), std::string::npos) << out_.str();
}

TEST_F(CommandTest, RunListRejectsAnUnknownStatusLocally) {
  RunListArgs args;
  args.status = "done";
  CommandContext context = Context();
  EXPECT_EQ(RunList(args, context), kExitUsage);
  EXPECT_NE(err_.str().find("retry_wait"), std::string::npos) << err_.str();
  EXPECT_TRUE(server_.requests().empty());
}

TEST_F(CommandTest, RunShowJsonIsTheRunWithEveryPageOfEvents) {
  server_.http().Get("/api/v1/runs/r1", [&](const httplib::Request&, httplib::Response& res) {
    Json(res,
         {{"id", "r1"}, {"status", "succeeded"}, {"attempts", json::array({{{"attempt", 1}}})}});
  });
  server_.http().Get(
      "/api/v1/runs/r1/events", [&](const httplib::Request& req, httplib::Response& res) {
        server_.Record(req);
        const int after = std::stoi(req.get_param_value("after"));
        const int limit = std::stoi(req.get_param_value("limit"));
        json items = json::array();
        for (int seq = after + 1; seq <= std::min(after + limit, 620); ++seq) {
          items.push_back({{"sequence", seq}, {"type", "run.queued"}});
        }
        Json(res,
             {{"items", items}, {"next_after", items.empty() ? after : after + int(items.size())}});
      });
  CommandContext context = Context(/*json=*/true);
  EXPECT_EQ(RunShow("r1", context), kExitOk) << err_.str();
  const json run = json::parse(out_.str());
  EXPECT_EQ(run["id"], "r1");
  EXPECT_EQ(run["attempts"].size(), 1u);
  ASSERT_EQ(run["events"].size(), 620u);
  EXPECT_EQ(run["events"][619]["sequence"], 620);
}

TEST_F(CommandTest, RunShowSaysWhyAQueuedRunWaitsForAWorker) {
  json run = {{"id", "r1"},
              {"status", "queued"},
              {"attempts", json::array()},
              {"waiting",
               {{"reason", "waiting_for_worker"},
                {"pool", "gpu"},
                {"labels", {{"arch", "arm64"}, {"cuda", "12"}}},
                {"detail", "no live worker of pool gpu has these labels"}}}};
  server_.http().Get("/api/v1/runs/r1",
                     [&](const httplib::Request&, httplib::Response& res) { Json(res, run); });
  server_.http().Get("/api/v1/runs/r1/events",
                     [&](const httplib::Request&, httplib::Response& res) {
                       Json(res, {{"items", json::array()}, {"next_after", 0}});
                     });
  CommandContext context = Context();
  EXPECT_EQ(RunShow("r1", context), kExitOk) << err_.str();
  EXPECT_NE(out_.str().find("\nwaiting_for_worker: pool gpu, labels arch=arm64,cuda=12: no live "
                            "worker of pool gpu has these labels\n"),
            std::string::npos)
      << out_.str();

  // Without labels the labels part is left out; without `waiting` there is no such line.
  run["waiting"]["labels"] = json::object();
  out_.str("");
  EXPECT_EQ(RunShow("r1", context), kExitOk) << err_.str();
  EXPECT_NE(out_.str().find("\nwaiting_for_worker: pool gpu: no live worker"), std::string::npos)
      << out_.str();
  run.erase("waiting");
  out_.str("");
  EXPECT_EQ(RunShow("r1", context), kExitOk) << err_.str();
  EXPECT_EQ(out_.str().find("waiting_for_worker"), std::string::npos) << out_.str();
}

TEST_F(CommandTest, RunLogPrintsEveryChunkByteForByte) {
  const std::string log = std::string("line 1\n\0binary\xff\n", 16) + std::string(3000, 'x');
  server_.http().Get("/api/v1/runs/r1/log", [&](const httplib::Request& req,
                                                httplib::Response& res) {
    server_.Record(req);
    const size_t offset = req.has_param("offset") ? std::stoul(req.get_param_value("offset")) : 0;
    const size_t chunk = 1000;  // smaller than asked, as a server may answer
    const std::string data = log.substr(std::min(offset, log.size()), chunk);
    res.set_header("X-QL-Attempt", "1");
    res.set_header("X-QL-Log-Next-Offset", std::to_string(offset + data.size()));
    res.set_header("X-QL-Log-Eof", offset + data.size() >= log.size() ? "true" : "false");
    res.set_content(data, "text/plain");
  });
  RunLogArgs args;
  args.run_id = "r1";
  CommandContext context = Context();
  EXPECT_EQ(RunLog(args, context), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), log);
  // After the first answer every read names the attempt, so a retry cannot switch files midway.
  EXPECT_NE(server_.requests().back().find("attempt=1"), std::string::npos);
}

TEST_F(CommandTest, RunLogFollowStreamsUntilTheRunEndsAndPrintsTheTail) {
  std::atomic<int> run_reads{0};
  server_.http().Get("/api/v1/runs/r1", [&](const httplib::Request&, httplib::Response& res) {
    // Running at the first look, succeeded at the second.
    const bool done = run_reads.fetch_add(1) >= 1;
    Json(res, {{"id", "r1"},
               {"status", done ? "succeeded" : "running"},
               {"attempts", json::array({{{"attempt", 1}}})}});
  });
  server_.http().Get(
      "/api/v1/runs/r1/log", [&](const httplib::Request& req, httplib::Response& res) {
        server_.Record(req);
        res.set_header("X-QL-Attempt", "1");
        const std::string offset = req.has_param("offset") ? req.get_param_value("offset") : "0";
        if (req.has_param("follow")) {
          // A stream that ends early (as at the server's length bound) after "one\n".
          const std::string data = offset == "0" ? "one\n" : "";
          res.set_content(data, "text/plain");
          return;
        }
        const std::string data = offset == "4" ? "two\n" : "";
        res.set_header("X-QL-Log-Next-Offset", std::to_string(std::stoi(offset) + data.size()));
        res.set_header("X-QL-Log-Eof", "true");
        res.set_content(data, "text/plain");
      });
  RunLogArgs args;
  args.run_id = "r1";
  args.follow = true;
  args.poll_ms = 1;
  CommandContext context = Context();
  EXPECT_EQ(RunLog(args, context), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "one\ntwo\n");
  const std::vector<std::string> requests = server_.requests();
  ASSERT_GE(requests.size(), 3u);
  EXPECT_EQ(requests[0], "GET /api/v1/runs/r1/log?follow=true");
  EXPECT_EQ(requests[1], "GET /api/v1/runs/r1/log?attempt=1&follow=true&offset=4");
}

TEST_F(CommandTest, RunLogFollowContinuesIntoTheNextAttemptWithoutRepeatingOutput) {
  // Attempt 1 wrote "first\n" and failed; attempt 2 writes "second\n" to a log of its own.
  std::atomic<int> run_reads{0};
  server_.http().Get("/api/v1/runs/r1", [&](const httplib::Request&, httplib::Response& res) {
    const int n = run_reads.fetch_add(1);
    json attempts = json::array({{{"attempt", 1}}});
    if (n >= 1) attempts.push_back({{"attempt", 2}});
    Json(res, {{"id", "r1"}, {"status", n >= 2 ? "failed" : "retry_wait"}, {"attempts", attempts}});
  });
  server_.http().Get("/api/v1/runs/r1/log", [&](const httplib::Request& req,
                                                httplib::Response& res) {
    server_.Record(req);
    const std::string attempt = req.has_param("attempt") ? req.get_param_value("attempt") : "1";
    const std::string file = attempt == "1" ? "first\n" : run_reads.load() < 2 ? "" : "second\n";
    const size_t offset = req.has_param("offset") ? std::stoul(req.get_param_value("offset")) : 0;
    const std::string data = file.substr(std::min(offset, file.size()));
    res.set_header("X-QL-Attempt", attempt);
    res.set_header("X-QL-Log-Next-Offset", std::to_string(offset + data.size()));
    res.set_header("X-QL-Log-Eof", "true");
    res.set_content(data, "text/plain");
  });
  RunLogArgs args;
  args.run_id = "r1";
  args.follow = true;
  args.poll_ms = 1;
  CommandContext context = Context();
  // Following a run to its end exits with its outcome: it failed.
  EXPECT_EQ(RunLog(args, context), kExitRunFailed) << err_.str();
  EXPECT_EQ(out_.str(), "first\nsecond\n");
  EXPECT_NE(err_.str().find("attempt 2"), std::string::npos) << err_.str();
}

// Serves `log` as attempt 1 of run r1, honouring offset and limit, with the size header.
void ServeLog(FakeServer& server, const std::string& log, std::atomic<int64_t>& served) {
  server.http().Get("/api/v1/runs/r1/log", [&](const httplib::Request& req,
                                               httplib::Response& res) {
    server.Record(req);
    const size_t offset = req.has_param("offset") ? std::stoul(req.get_param_value("offset")) : 0;
    const size_t limit = req.has_param("limit") ? std::stoul(req.get_param_value("limit")) : 65536;
    const std::string data = log.substr(std::min(offset, log.size()), limit);
    served += static_cast<int64_t>(data.size());
    res.set_header("X-QL-Attempt", "1");
    res.set_header("X-QL-Log-Size", std::to_string(log.size()));
    res.set_header("X-QL-Log-Next-Offset", std::to_string(offset + data.size()));
    res.set_header("X-QL-Log-Eof", offset + data.size() >= log.size() ? "true" : "false");
    res.set_content(data, "text/plain");
  });
}

TEST_F(CommandTest, RunLogTailPrintsTheLastLinesReadingOnlyTheEndOfTheLog) {
  std::string log;
  for (int i = 0; i < 100000; ++i) log += "line " + std::to_string(i) + "\n";
  std::atomic<int64_t> served{0};
  ServeLog(server_, log, served);
  for (const int lines : {1, 3, 20000}) {
    out_.str("");
    served = 0;
    RunLogArgs args;
    args.run_id = "r1";
    args.tail = std::to_string(lines);
    CommandContext context = Context();
    EXPECT_EQ(RunLog(args, context), kExitOk) << err_.str();
    std::string expected;
    for (int i = 100000 - lines; i < 100000; ++i) expected += "line " + std::to_string(i) + "\n";
    EXPECT_TRUE(out_.str() == expected) << lines << ": " << out_.str().substr(0, 40);
    EXPECT_LT(served.load(), static_cast<int64_t>(log.size() / 2)) << lines;
  }
}

TEST_F(CommandTest, RunLogTailOfAShortLogPrintsItAll) {
  const std::string log = "one\ntwo\nthree without newline";
  std::atomic<int64_t> served{0};
  ServeLog(server_, log, served);
  RunLogArgs args;
  args.run_id = "r1";
  args.tail = "2";
  CommandContext context = Context();
  EXPECT_EQ(RunLog(args, context), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "two\nthree without newline");
  out_.str("");
  args.tail = "10";
  EXPECT_EQ(RunLog(args, context), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), log);
}

TEST_F(CommandTest, RunLogTailRefusesAnythingButAPositiveInteger) {
  for (const std::string bad : {"0", "-3", "abc", "", "5x", "99999999999"}) {
    err_.str("");
    RunLogArgs args;
    args.run_id = "r1";
    args.tail = bad;
    CommandContext context = Context();
    EXPECT_EQ(RunLog(args, context), kExitUsage) << bad;
    EXPECT_NE(err_.str().find("--tail must be a positive integer"), std::string::npos)
        << err_.str();
  }
  EXPECT_TRUE(server_.requests().empty());
}

TEST_F(CommandTest, RunLogFollowReopensAStreamThatStaysSilent) {
  std::atomic<bool> finished{false};
  server_.http().Get("/api/v1/runs/r1", [&](const httplib::Request&, httplib::Response& res) {
    Json(res, {{"id", "r1"},
               {"status", finished.load() ? "succeeded" : "running"},
               {"attempts", json::array({{{"attempt", 1}}})}});
  });
  server_.http().Get(
      "/api/v1/runs/r1/log", [&](const httplib::Request& req, httplib::Response& res) {
        server_.Record(req);
        res.set_header("X-QL-Attempt", "1");
        const std::string offset = req.has_param("offset") ? req.get_param_value("offset") : "0";
        if (req.has_param("follow") && offset == "0") {
          // "a", then silence longer than the client's read timeout.
          res.set_chunked_content_provider("text/plain", [&](size_t sent, httplib::DataSink& sink) {
            if (sent == 0) {
              sink.write("a", 1);
              return true;
            }
            // Much longer than the client waits; it reconnects rather than sit through this.
            for (int i = 0; i < 40 && sink.is_writable(); ++i) {
              std::this_thread::sleep_for(std::chrono::milliseconds(100));
            }
            sink.done();
            return true;
          });
          return;
        }
        finished = true;
        const std::string data = offset == "1" && req.has_param("follow") ? "b" : "";
        res.set_header("X-QL-Log-Next-Offset", std::to_string(std::stoi(offset) + data.size()));
        res.set_header("X-QL-Log-Eof", "true");
        res.set_content(data, "text/plain");
      });
  RunLogArgs args;
  args.run_id = "r1";
  args.follow = true;
  args.poll_ms = 1;
  args.follow_read_timeout_s = 1;
  CommandContext context = Context();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(RunLog(args, context), kExitOk) << err_.str();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(3500));
  EXPECT_EQ(out_.str(), "ab");
  EXPECT_EQ(err_.str(), "");
}

TEST_F(CommandTest, TriggerEditSendsOnlyTheChangedFieldsOverTheCurrentRevision) {
  const std::string id = "0190d5d0-0000-7000-8000-0000000000aa";
  server_.http().Get("/api/v1/triggers/" + id,
                     [&](const httplib::Request& req, httplib::Response& res) {
                       server_.Record(req);
                       Json(res, {{"id", id}, {"revision", 3}, {"state", "active"}});
                     });
  server_.http().Post("/api/v1/triggers/" + id + "/revisions",
                      [&](const httplib::Request& req, httplib::Response& res) {
                        server_.Record(req);
                        Json(res, {{"id", id}, {"revision", 4}, {"state", "active"}}, 201);
                      });
  TriggerEditArgs nothing;
  nothing.trigger_id = id;
  CommandContext refused = Context();
  EXPECT_EQ(TriggerEdit(nothing, refused), kExitUsage);
  EXPECT_NE(err_.str().find("nothing_to_edit"), std::string::npos) << err_.str();
  EXPECT_TRUE(server_.bodies().empty());

  TriggerEditArgs bad_jitter;
  bad_jitter.trigger_id = id;
  bad_jitter.jitter = "half a minute";
  CommandContext refused_jitter = Context();
  EXPECT_EQ(TriggerEdit(bad_jitter, refused_jitter), kExitUsage);
  EXPECT_NE(err_.str().find("invalid_duration: --jitter 'half a minute'"), std::string::npos)
      << err_.str();
  EXPECT_TRUE(server_.bodies().empty());
  err_.str("");

  TriggerEditArgs args;
  args.trigger_id = id;
  args.expression = "0 4 * * *";
  args.overlap = "forbid";
  args.jitter = "1m30s";
  CommandContext context = Context();
  ASSERT_EQ(TriggerEdit(args, context), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), id + " active revision 4\n");
  ASSERT_EQ(server_.bodies().size(), 2u);
  EXPECT_EQ(json::parse(server_.bodies()[1]), (json{{"expected_revision", 3},
                                                    {"expression", "0 4 * * *"},
                                                    {"overlap", "forbid"},
                                                    {"jitter_ms", 90000}}));
}

TEST_F(CommandTest, TriggerNextPrintsLocalTimesAndWarnsWhenNotActive) {
  server_.http().Get("/api/v1/triggers/g1/next",
                     [&](const httplib::Request& req, httplib::Response& res) {
                       server_.Record(req);
                       Json(res, json::parse(R"({"state":"disabled","fire_times":[
                         {"at":"2026-03-08T07:00:00Z","local":"2026-03-08T03:00:00-04:00"},
                         {"at":"2026-03-09T06:00:00Z","local":"2026-03-09T02:00:00-04:00"}]})"));
                     });
  TriggerNextArgs args;
  args.trigger_id = "g1";
  args.count = 2;
  CommandContext context = Context();
  EXPECT_EQ(TriggerNext(args, context), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "2026-03-08T03:00:00-04:00\n2026-03-09T02:00:00-04:00\n");
  EXPECT_NE(err_.str().find("disabled"), std::string::npos);
  EXPECT_EQ(server_.requests().at(0), "GET /api/v1/triggers/g1/next?count=2");
}

TEST_F(CommandTest, StatusReportsNotReadyWithExitOne) {
  server_.http().Get("/readyz", [&](const httplib::Request&, httplib::Response& res) {
    Json(res, {{"code", "not_ready"}, {"message", "starting"}}, 503);
  });
  CommandContext context = Context(/*json=*/true);
  EXPECT_EQ(Status(context), kExitFailure);
  const json out = json::parse(out_.str());
  EXPECT_EQ(out["ready"], false);
  EXPECT_EQ(out["not_ready"]["code"], "not_ready");
}

// ---------------------------------------------------------------------------------------------
// The command line as `ql` parses it.

class CommandLineTest : public CommandTest {
 protected:
  // Parses `args` as ql would and returns the exit status; stdout is captured into out_.
  int Ql(std::vector<std::string> args) {
    CLI::App app{"ql"};
    app.require_subcommand(1);
    RegisterTaskCommands(app);
    RegisterTriggerCommands(app);
    RegisterRunCommands(app);
    RegisterStatusCommand(app);
    std::vector<std::string> reversed(args.rbegin(), args.rend());
    std::streambuf* saved = std::cout.rdbuf(out_.rdbuf());
    int status = 0;
    try {
      app.parse(reversed);
    } catch (const CLI::RuntimeError& e) {
      status = e.get_exit_code();
    } catch (const CLI::ParseError& e) {
      err_ << e.what();
      status = kExitUsage;
    }
    std::cout.rdbuf(saved);
    return status;
  }
  void AcceptTasks() {
    server_.http().Post("/api/v1/tasks", [&](const httplib::Request& req, httplib::Response& res) {
      server_.Record(req);
      Json(res, {{"id", "task-9"}}, 201);
    });
  }
};

TEST_F(CommandLineTest, GlobalOptionsWorkBeforeAndAfterTheSubcommand) {
  AcceptTasks();
  EXPECT_EQ(Ql({"--server", server_.url(), "--token", "t", "task", "add", "a", "--shell", "true"}),
            kExitOk)
      << err_.str();
  EXPECT_EQ(Ql({"task", "add", "b", "--shell", "true", "--server", server_.url(), "--token", "t"}),
            kExitOk)
      << err_.str();
  EXPECT_EQ(Ql({"task", "--server", server_.url(), "add", "c", "--token", "t", "--shell", "true",
                "--json"}),
            kExitOk)
      << err_.str();
  EXPECT_EQ(server_.bodies().size(), 3u);
  EXPECT_EQ(json::parse(server_.bodies()[2])["name"], "c");
  EXPECT_NE(out_.str().find("\"id\": \"task-9\""), std::string::npos) << out_.str();
}

// --output yaml prints what --json prints, as YAML; --output json is --json; a bad format is a
// usage error before anything is sent.
TEST_F(CommandLineTest, OutputYamlAndJsonAndNothingElse) {
  AcceptTasks();
  EXPECT_EQ(Ql({"task", "add", "a", "--shell", "true", "--output", "yaml", "--server",
                server_.url(), "--token", "t"}),
            kExitOk)
      << err_.str();
  EXPECT_NE(out_.str().find("id: task-9\n"), std::string::npos) << out_.str();
  EXPECT_EQ(out_.str().find('{'), std::string::npos) << out_.str();
  out_.str("");
  EXPECT_EQ(Ql({"task", "add", "b", "--shell", "true", "--output", "json", "--server",
                server_.url(), "--token", "t"}),
            kExitOk)
      << err_.str();
  EXPECT_NE(out_.str().find("\"id\": \"task-9\""), std::string::npos) << out_.str();
  EXPECT_NE(Ql({"task", "add", "c", "--shell", "true", "--output", "xml", "--server",
                server_.url(), "--token", "t"}),
            kExitOk);
  EXPECT_EQ(server_.bodies().size(), 2u);
}

TEST_F(CommandLineTest, RepeatedEnvAndArgvArgumentsParse) {
  AcceptTasks();
  EXPECT_EQ(Ql({"task", "add", "n", "--env", "A=1", "--env", "B=2", "--argv", "/bin/echo", "x",
                "y z", "--timeout", "500ms", "--server", server_.url(), "--token", "t"}),
            kExitOk)
      << err_.str();
  const json sent = json::parse(server_.bodies().at(0));
  EXPECT_EQ(sent["spec"]["environment"], json::parse(R"({"A":"1","B":"2"})"));
  EXPECT_EQ(sent["spec"]["command"]["args"], json::parse(R"(["x","y z"])"));
  EXPECT_EQ(sent["spec"]["timeoutMs"], 500);
  EXPECT_EQ(out_.str(), "task-9\n");
}

TEST_F(CommandLineTest, TaskAddPoolAndWorkerLabelsBecomeThePlacement) {
  AcceptTasks();
  EXPECT_EQ(Ql({"task", "add", "train", "--shell", "python train.py", "--pool", "gpu",
                "--worker-label", "arch=arm64", "--worker-label", "cuda=12", "--label", "team=ml",
                "--server", server_.url(), "--token", "t"}),
            kExitOk)
      << err_.str();
  const json sent = json::parse(server_.bodies().at(0));
  EXPECT_EQ(sent["spec"]["placement"],
            json::parse(R"({"pool":"gpu","labels":{"arch":"arm64","cuda":"12"}})"));
  EXPECT_EQ(sent["labels"], json::parse(R"({"team":"ml"})"));

  // Without the flags the spec has no placement: the default pool.
  EXPECT_EQ(
      Ql({"task", "add", "plain", "--shell", "true", "--server", server_.url(), "--token", "t"}),
      kExitOk)
      << err_.str();
  EXPECT_FALSE(json::parse(server_.bodies().at(1))["spec"].contains("placement"));
}

TEST_F(CommandLineTest, ArgvArgumentsThatStartWithADashGoAllAfterDoubleDash) {
  AcceptTasks();
  EXPECT_EQ(Ql({"task", "add", "n", "--server", server_.url(), "--token", "t", "--argv", "/bin/ls",
                "--arg=-a", "--", "/tmp", "-l", "--timeout", "5"}),
            kExitOk)
      << err_.str();
  const json sent = json::parse(server_.bodies().at(0));
  EXPECT_EQ(sent["spec"]["command"]["args"], json::parse(R"(["/tmp","-l","--timeout","5","-a"])"));
  EXPECT_FALSE(sent["spec"].contains("timeoutMs"));

  EXPECT_EQ(Ql({"task", "add", "j", "--argv", "/bin/sh", "--", "-c", "echo hi", "--server",
                server_.url(), "--token", "t"}),
            kExitUsage)
      << "after `--` even --server is an argument, so no server is known";
  EXPECT_EQ(Ql({"--server", server_.url(), "--token", "t", "task", "add", "j", "--argv", "/bin/sh",
                "--", "-c", "echo hi"}),
            kExitOk)
      << err_.str();
  EXPECT_EQ(json::parse(server_.bodies().at(1))["spec"]["command"]["args"],
            json::parse(R"(["-c","echo hi"])"));

  // Without `--` a dash argument is an unknown option, not silently an argument.
  EXPECT_EQ(Ql({"task", "add", "m", "--server", server_.url(), "--token", "t", "--argv", "/bin/ls",
                "-l"}),
            kExitUsage);
  // Arguments after `--` need --argv.
  EXPECT_EQ(Ql({"task", "add", "k", "--server", server_.url(), "--token", "t", "--shell", "true",
                "--", "x"}),
            kExitUsage);
  EXPECT_EQ(server_.bodies().size(), 2u);
}

TEST_F(CommandLineTest, BadFlagValuesAreUsageErrors) {
  EXPECT_EQ(Ql({"trigger", "add", "t", "--cron", "* * * * *", "--tz", "UTC", "--misfire", "later",
                "--server", server_.url(), "--token", "t"}),
            kExitUsage);
  EXPECT_EQ(Ql({"trigger", "add", "t", "--tz", "UTC", "--server", server_.url()}), kExitUsage);
  EXPECT_TRUE(server_.requests().empty());
}

}  // namespace
}  // namespace ql::cli
