// `ql notify`: the bodies its flags turn into, what is refused before any request, and the
// commands against a scripted server.

#include "notify_command.h"

#include <gtest/gtest.h>

#include <sstream>

#include "fake_api_server.h"

namespace ql::cli {
namespace {

using nlohmann::json;

// The usage error reason of a failed result (and that it is one), or "" when it succeeded.
template <typename T>
std::string UsageReason(const CliResult<T>& result) {
  if (result.ok()) return "";
  EXPECT_EQ(result.error().exit_code(), kExitUsage) << result.error().ToString();
  return result.error().reason();
}

TEST(ParseHeaderFlagsTest, ReadsNameValuePairs) {
  CliResult<json> headers = ParseHeaderFlags({"X-Team=ops", "Authorization=Bearer a=b", "X-E="});
  ASSERT_TRUE(headers.ok()) << headers.error().ToString();
  EXPECT_EQ(*headers, json::parse(R"({"X-Team":"ops","Authorization":"Bearer a=b","X-E":""})"));
  EXPECT_EQ(*ParseHeaderFlags({}), json::object());
}

TEST(ParseHeaderFlagsTest, RefusesMalformedHeaders) {
  for (const char* bad : {"X-Team", "=ops", "X Team=ops", "X-Team:=ops", "X-Team: ops",
                          "X-Team=a\r\nX-Evil: 1", "X-Team=a\nb", "é=1"}) {
    EXPECT_EQ(UsageReason(ParseHeaderFlags({bad})), "invalid_header") << bad;
  }
  CliResult<json> twice = ParseHeaderFlags({"X-Team=a", "x-team=b"});
  EXPECT_EQ(UsageReason(twice), "invalid_header");
  EXPECT_NE(twice.error().message().find("twice"), std::string::npos);
  EXPECT_TRUE(ParseHeaderFlags({"X-Tab=a\tb"}).ok());  // a tab is allowed in a field value
}

TEST(BuildChannelBodyTest, SetsOnlyTheKeysGiven) {
  ChannelAddArgs args;
  args.name = "ops";
  args.type = "webhook";
  args.url = "https://hooks.example.com/x";
  args.signing_secret = "HOOK_KEY";
  args.headers = {"X-Team=ops"};
  CliResult<json> body = BuildChannelBody(args);
  ASSERT_TRUE(body.ok()) << body.error().ToString();
  EXPECT_EQ(*body, json::parse(R"({"name":"ops","type":"webhook","config":{
      "url":"https://hooks.example.com/x","signing_secret":"HOOK_KEY",
      "headers":{"X-Team":"ops"}}})"));

  ChannelAddArgs bare;
  bare.name = "n";
  bare.type = "slack";
  EXPECT_EQ((*BuildChannelBody(bare))["config"], json::object());
}

TEST(BuildChannelBodyTest, MapsEveryFlagToItsConfigKey) {
  ChannelAddArgs smtp;
  smtp.name = "mail";
  smtp.type = "smtp";
  smtp.host = "smtp.example.com";
  smtp.port = 587;
  smtp.security = "starttls";
  smtp.username = "bot";
  smtp.password_secret = "SMTP_PASS";
  smtp.from = "ql@example.com";
  smtp.to = {"a@example.com", "b@example.com"};
  smtp.language = "zh-CN";
  smtp.rate_per_minute = 5;
  smtp.max_attempts = 3;
  smtp.deadline = "2h";
  CliResult<json> body = BuildChannelBody(smtp);
  ASSERT_TRUE(body.ok()) << body.error().ToString();
  EXPECT_EQ((*body)["config"], json::parse(R"({"host":"smtp.example.com","port":587,
      "security":"starttls","username":"bot","password_secret":"SMTP_PASS",
      "from":"ql@example.com","to":["a@example.com","b@example.com"],"language":"zh-CN",
      "rate_per_minute":5,"max_attempts":3,"deadline_s":7200})"));

  ChannelAddArgs telegram;
  telegram.name = "tg";
  telegram.type = "telegram";
  telegram.token_secret = "TG_TOKEN";
  telegram.chat_id = "-100123";
  telegram.api_base = "https://tg.example.com";
  EXPECT_EQ((*BuildChannelBody(telegram))["config"],
            json::parse(R"({"token_secret":"TG_TOKEN","chat_id":"-100123",
                            "api_base":"https://tg.example.com"})"));

  ChannelAddArgs bark;
  bark.name = "phone";
  bark.type = "bark";
  bark.device_key_secret = "BARK_KEY";
  bark.server = "https://bark.example.com";
  EXPECT_EQ((*BuildChannelBody(bark))["config"],
            json::parse(R"({"device_key_secret":"BARK_KEY","server":"https://bark.example.com"})"));

  ChannelAddArgs feishu;
  feishu.name = "fs";
  feishu.type = "feishu";
  feishu.url_secret = "FEISHU_URL";
  EXPECT_EQ((*BuildChannelBody(feishu))["config"], json::parse(R"({"url_secret":"FEISHU_URL"})"));
}

TEST(BuildChannelBodyTest, FlagsAreSetOverConfig) {
  ChannelAddArgs args;
  args.name = "ops";
  args.type = "webhook";
  args.config = R"({"url":"https://old.example.com","rate_per_minute":2,
                    "headers":{"X-Team":"dev","X-Keep":"1"}})";
  args.url = "https://new.example.com";
  args.headers = {"x-team=ops"};
  CliResult<json> body = BuildChannelBody(args);
  ASSERT_TRUE(body.ok()) << body.error().ToString();
  EXPECT_EQ((*body)["config"], json::parse(R"({"url":"https://new.example.com",
      "rate_per_minute":2,"headers":{"X-Keep":"1","x-team":"ops"}})"));
}

TEST(BuildChannelBodyTest, RefusesWhatTheClientCanJudge) {
  ChannelAddArgs args;
  args.name = "ops";
  args.type = "pagerduty";
  CliResult<json> type = BuildChannelBody(args);
  EXPECT_EQ(UsageReason(type), "invalid_type");
  EXPECT_NE(type.error().message().find("webhook, smtp"), std::string::npos);

  args.type = "webhook";
  for (const char* config : {"[1]", "{", "\"url\"", "null"}) {
    args.config = config;
    EXPECT_EQ(UsageReason(BuildChannelBody(args)), "invalid_config") << config;
  }
  args.config.reset();

  args.headers = {"X-Team ops"};
  EXPECT_EQ(UsageReason(BuildChannelBody(args)), "invalid_header");
  args.headers.clear();

  args.deadline = "1.5h";
  EXPECT_EQ(UsageReason(BuildChannelBody(args)), "invalid_duration");
  args.deadline.reset();

  // --server after the subcommand is bark's; for another type it was meant for ql.
  args.server = "http://127.0.0.1:5700";
  CliResult<json> server = BuildChannelBody(args);
  EXPECT_EQ(UsageReason(server), "flag_conflict");
  EXPECT_NE(server.error().message().find("before `notify`"), std::string::npos);
}

TEST(BuildRuleBodyTest, SendsOnlyTheOptionalKeysGiven) {
  RuleAddArgs args;
  args.channel = "ops";
  args.event = "failed";
  EXPECT_EQ(*BuildRuleBody(args), json::parse(R"({"channel":"ops","event":"failed"})"));

  args.task = "backup";
  args.every = true;
  args.min_interval = "10m";
  EXPECT_EQ(*BuildRuleBody(args), json::parse(R"({"channel":"ops","event":"failed",
      "task":"backup","mode":"every","min_interval_s":600})"));

  RuleAddArgs late;
  late.channel = "ops";
  late.event = "late";
  late.after = "90";
  EXPECT_EQ((*BuildRuleBody(late))["after_s"], 90);
  late.event = "missing";
  late.after = "1d";
  EXPECT_EQ((*BuildRuleBody(late))["after_s"], 86400);
}

TEST(BuildRuleBodyTest, AcceptsEveryEventAndRefusesOthers) {
  RuleAddArgs args;
  args.channel = "ops";
  for (const char* event : {"failed", "timed_out", "recovered", "succeeded", "skipped", "late",
                            "missing", "approval", "recovery_required"}) {
    args.event = event;
    EXPECT_TRUE(BuildRuleBody(args).ok()) << event;
  }
  for (const char* event : {"", "fail", "FAILED", "timed-out", "test"}) {
    args.event = event;
    EXPECT_EQ(UsageReason(BuildRuleBody(args)), "invalid_event") << event;
  }
  args.event = "failed";
  args.min_interval = "10 minutes";
  CliResult<json> bad = BuildRuleBody(args);
  EXPECT_EQ(UsageReason(bad), "invalid_duration");
  EXPECT_NE(bad.error().message().find("--min-interval '10 minutes'"), std::string::npos);
  args.min_interval.reset();
  args.after = "500ms";
  EXPECT_EQ(UsageReason(BuildRuleBody(args)), "invalid_duration");
}

// ---------------------------------------------------------------------------------------------
// Commands against a scripted server.

class NotifyCommandTest : public ::testing::Test {
 protected:
  CommandContext Context(bool json = false, bool wide = false) {
    GlobalOptions options;
    options.server = server_.url();
    options.token = "test-token";
    options.project = "ops team";
    options.json = json;
    options.wide = wide;
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

TEST_F(NotifyCommandTest, ChannelAddPostsInTheProjectAndPrintsTheChannel) {
  server_.http().Post("/api/v1/notify/channels",
                      [&](const httplib::Request& req, httplib::Response& res) {
                        server_.Record(req);
                        Json(res,
                             {{"id", "c-1"},
                              {"name", "ops"},
                              {"type", "webhook"},
                              {"config", {{"url", "https://h.example.com"}}}},
                             201);
                      });
  ChannelAddArgs args;
  args.name = "ops";
  args.type = "webhook";
  args.url = "https://h.example.com";
  CommandContext context = Context();
  EXPECT_EQ(ChannelAdd(args, context), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "added channel ops (type webhook, id c-1)\n");
  EXPECT_EQ(server_.requests(),
            std::vector<std::string>{"POST /api/v1/notify/channels?project=ops team"});
  EXPECT_EQ(json::parse(server_.bodies().at(0)), json::parse(R"({"name":"ops","type":"webhook",
                            "config":{"url":"https://h.example.com"}})"));
}

TEST_F(NotifyCommandTest, InvalidInputExitsTwoBeforeAnyRequest) {
  ChannelAddArgs channel;
  channel.name = "ops";
  channel.type = "fax";
  CommandContext context = Context();
  EXPECT_EQ(ChannelAdd(channel, context), kExitUsage);
  EXPECT_NE(err_.str().find("error: invalid_type: --type 'fax'"), std::string::npos) << err_.str();

  RuleAddArgs rule;
  rule.channel = "ops";
  rule.event = "exploded";
  EXPECT_EQ(RuleAdd(rule, context), kExitUsage);
  EXPECT_NE(err_.str().find("error: invalid_event: --on 'exploded'"), std::string::npos);

  DeliveryListArgs list;
  list.limit = 0;
  EXPECT_EQ(DeliveryList(list, context), kExitUsage);
  EXPECT_TRUE(server_.requests().empty());
}

TEST_F(NotifyCommandTest, ServerErrorsPrintAsEveryCommandPrintsThem) {
  server_.http().Post("/api/v1/notify/rules", [&](const httplib::Request&, httplib::Response& res) {
    Json(res, {{"code", "notify_threshold_invalid"}, {"message", "late needs after_s"}}, 400);
  });
  RuleAddArgs rule;
  rule.channel = "ops";
  rule.event = "late";
  CommandContext context = Context();
  EXPECT_EQ(RuleAdd(rule, context), kExitFailure);
  EXPECT_EQ(err_.str(), "error: notify_threshold_invalid: late needs after_s\n");
  EXPECT_EQ(out_.str(), "");
}

TEST_F(NotifyCommandTest, ChannelListShowsWhereEachSends) {
  server_.http().Get("/api/v1/notify/channels",
                     [&](const httplib::Request&, httplib::Response& res) {
                       Json(res, json::parse(R"({"items":[
      {"id":"c1","name":"hook","type":"webhook","config":{"url":"https://h.example.com"},
       "created_at":"2026-01-02T03:04:05Z"},
      {"id":"c2","name":"fs","type":"feishu","config":{"url_secret":"FS_URL"},
       "created_at":"2026-01-02T03:04:06Z"},
      {"id":"c3","name":"mail","type":"smtp","config":{"host":"smtp.example.com","port":465},
       "created_at":"2026-01-02T03:04:07Z"},
      {"id":"c4","name":"tg","type":"telegram","config":{"token_secret":"T","chat_id":"-100"},
       "created_at":"2026-01-02T03:04:08Z"}]})"));
                     });
  CommandContext context = Context();
  EXPECT_EQ(ChannelList(context), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(),
            "NAME  TYPE      DESTINATION            CREATED\n"
            "hook  webhook   https://h.example.com  2026-01-02T03:04:05Z\n"
            "fs    feishu    secret:FS_URL          2026-01-02T03:04:06Z\n"
            "mail  smtp      smtp.example.com:465   2026-01-02T03:04:07Z\n"
            "tg    telegram  -100                   2026-01-02T03:04:08Z\n");
}

TEST_F(NotifyCommandTest, RuleListNamesEveryTaskRules) {
  server_.http().Get("/api/v1/notify/rules", [&](const httplib::Request&, httplib::Response& res) {
    Json(res, json::parse(R"({"items":[
      {"id":"r1","channel":"ops","event":"failed","task_id":null,"task_name":null,
       "mode":"change","min_interval_s":60,"after_s":null},
      {"id":"r2","channel":"ops","event":"late","task_id":"t1","task_name":"backup",
       "mode":"every","min_interval_s":60,"after_s":600}]})"));
  });
  CommandContext context = Context();
  EXPECT_EQ(RuleList(context), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(),
            "ID  EVENT   TASK          CHANNEL  MODE\n"
            "r1  failed  (every task)  ops      change\n"
            "r2  late    backup        ops      every\n");
}

TEST_F(NotifyCommandTest, DeliveriesFiltersAndShortensIds) {
  server_.http().Get("/api/v1/notify/deliveries",
                     [&](const httplib::Request& req, httplib::Response& res) {
                       server_.Record(req);
                       Json(res, json::parse(R"({"items":[
      {"id":"0190aaaa-1111-7000-8000-000000000001","channel":"ops","event":"failed",
       "task_id":"t1","task_name":"backup","status":"dead","attempts":8,
       "last_status_code":502,"last_error":"bad gateway","last_latency_ms":1250,
       "created_at":"2026-01-02T03:04:05Z"},
      {"id":"0190bbbb-2222-7000-8000-000000000002","channel":"ops","event":"test",
       "task_id":null,"task_name":null,"status":"pending","attempts":0,
       "last_status_code":null,"last_error":null,"last_latency_ms":null,
       "created_at":"2026-01-02T03:04:06Z"}]})"));
                     });
  DeliveryListArgs args;
  args.failed = true;
  args.limit = 20;
  CommandContext context = Context();
  EXPECT_EQ(DeliveryList(args, context), kExitOk) << err_.str();
  EXPECT_EQ(server_.requests().at(0),
            "GET /api/v1/notify/deliveries?failed=true&limit=20&project=ops team");
  EXPECT_EQ(out_.str(),
            "ID        CHANNEL  EVENT   TASK    STATUS   ATTEMPTS  CODE  LATENCY  ERROR        "
            "CREATED\n"
            "0190aaaa  ops      failed  backup  dead     8         502   1.2s     bad gateway  "
            "2026-01-02T03:04:05Z\n"
            "0190bbbb  ops      test    -       pending  0         -     -        -            "
            "2026-01-02T03:04:06Z\n");
}

TEST_F(NotifyCommandTest, ChannelTestWaitsUntilDelivered) {
  server_.http().Post("/api/v1/notify/channels/ops/test",
                      [&](const httplib::Request& req, httplib::Response& res) {
                        server_.Record(req);
                        Json(res, {{"id", "d-1"}, {"status", "pending"}}, 201);
                      });
  int polls = 0;
  server_.http().Get("/api/v1/notify/deliveries",
                     [&](const httplib::Request& req, httplib::Response& res) {
                       server_.Record(req);
                       const bool done = ++polls >= 2;
                       Json(res, {{"items",
                                   {{{"id", "d-0"}, {"status", "dead"}},
                                    {{"id", "d-1"},
                                     {"status", done ? "delivered" : "delivering"},
                                     {"last_status_code", 200},
                                     {"last_latency_ms", 85}}}}});
                     });
  ChannelTestArgs args;
  args.name = "ops";
  args.wait = true;
  args.poll_ms = 10;
  CommandContext context = Context();
  EXPECT_EQ(ChannelTest(args, context), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "delivery d-1 queued: a test message to channel ops\n");
  EXPECT_EQ(err_.str(), "ql: delivery d-1 delivered (HTTP 200, 85ms)\n");
  EXPECT_EQ(server_.requests().at(1), "GET /api/v1/notify/deliveries?limit=100&project=ops team");
}

TEST_F(NotifyCommandTest, ChannelTestWaitFailsWithTheLastError) {
  server_.http().Post("/api/v1/notify/channels/ops/test",
                      [&](const httplib::Request&, httplib::Response& res) {
                        Json(res, {{"id", "d-1"}, {"status", "pending"}}, 201);
                      });
  std::string status = "dead";
  server_.http().Get("/api/v1/notify/deliveries",
                     [&](const httplib::Request&, httplib::Response& res) {
                       Json(res, {{"items",
                                   {{{"id", "d-1"},
                                     {"status", status},
                                     {"attempts", 3},
                                     {"last_status_code", 401},
                                     {"last_error", "unauthorized"}}}}});
                     });
  ChannelTestArgs args;
  args.name = "ops";
  args.wait = true;
  args.poll_ms = 10;
  args.wait_timeout_ms = 50;
  CommandContext dead = Context();
  EXPECT_EQ(ChannelTest(args, dead), kExitFailure);
  EXPECT_EQ(err_.str(),
            "error: delivery_dead: delivery d-1 gave up after 3 attempt(s): unauthorized (HTTP "
            "401)\n");

  err_.str("");
  status = "pending";
  CommandContext pending = Context();
  EXPECT_EQ(ChannelTest(args, pending), kExitFailure);
  EXPECT_EQ(err_.str(),
            "error: delivery_wait_timeout: delivery d-1 is still pending after 50ms (3 "
            "attempt(s), last: unauthorized (HTTP 401))\n");
}

TEST_F(NotifyCommandTest, RedeliverResolvesAShortIdAmongRecentDeliveries) {
  server_.http().Get("/api/v1/notify/deliveries",
                     [&](const httplib::Request& req, httplib::Response& res) {
                       server_.Record(req);
                       Json(res, json::parse(R"({"items":[
                         {"id":"0190aaaa-1111-7000-8000-000000000001","status":"dead"},
                         {"id":"0190aaaa-2222-7000-8000-000000000002","status":"dead"}]})"));
                     });
  server_.http().Post(R"(/api/v1/notify/deliveries/([^/]+)/redeliver)",
                      [&](const httplib::Request& req, httplib::Response& res) {
                        server_.Record(req);
                        Json(res, {{"id", req.matches[1].str()}, {"status", "pending"}});
                      });
  CommandContext context = Context();
  EXPECT_EQ(Redeliver("0190aaaa-2", context), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "delivery 0190aaaa-2222-7000-8000-000000000002 queued again (pending)\n");
  EXPECT_EQ(server_.requests(),
            (std::vector<std::string>{
                "GET /api/v1/notify/deliveries?failed=true&limit=100&project=ops team",
                "POST /api/v1/notify/deliveries/0190aaaa-2222-7000-8000-000000000002/redeliver"
                "?project=ops team"}));

  CommandContext ambiguous = Context();
  EXPECT_EQ(Redeliver("0190aaaa", ambiguous), kExitUsage);
  EXPECT_NE(err_.str().find("error: delivery_id_ambiguous"), std::string::npos) << err_.str();

  // Fewer than 8 characters are not a prefix to look up: the server judges them.
  CommandContext too_short = Context();
  EXPECT_EQ(Redeliver("0190aaa", too_short), kExitOk) << err_.str();
  EXPECT_EQ(server_.requests().back(),
            "POST /api/v1/notify/deliveries/0190aaa/redeliver?project=ops team");
}

TEST_F(NotifyCommandTest, RemovalsPrintWhatWasDeleted) {
  server_.http().Delete("/api/v1/notify/channels/ops",
                        [&](const httplib::Request&, httplib::Response& res) {
                          Json(res, {{"id", "c1"}, {"name", "ops"}, {"deleted_at", "2026"}});
                        });
  server_.http().Delete("/api/v1/notify/rules/r1",
                        [&](const httplib::Request&, httplib::Response& res) {
                          Json(res, {{"id", "r1"}});
                        });
  CommandContext context = Context();
  EXPECT_EQ(ChannelRemove("ops", context), kExitOk) << err_.str();
  EXPECT_EQ(RuleRemove("r1", context), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "channel ops deleted\nrule r1 deleted\n");

  out_.str("");
  CommandContext json_context = Context(/*json=*/true);
  EXPECT_EQ(RuleRemove("r1", json_context), kExitOk);
  EXPECT_EQ(json::parse(out_.str()), json({{"id", "r1"}}));
}

}  // namespace
}  // namespace ql::cli
