#include "ql/engine/notification_delivery.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace ql {
namespace {

using nlohmann::json;

ChannelRecord Channel(const std::string& type, const std::string& config) {
  return ChannelRecord{"01a24dbf-ded7-7ade-8f9e-6f24a01ecd39",
                       "01a24dbf-ded7-7ade-8f9e-000000000001",
                       "ops",
                       type,
                       config,
                       "",
                       0,
                       std::nullopt};
}

OutboxRecord Failed() {
  OutboxRecord row;
  row.id = "01a24dbf-dee1-72cb-b70e-4b94cfd223ed";
  row.project_id = "01a24dbf-ded7-7ade-8f9e-000000000001";
  row.event = "failed";
  row.run_id = "01a24dbf-0000-7000-8000-000000000009";
  row.payload_json =
      R"({"duration_ms":1250,"error_code":"exit_nonzero","event":"failed","exit_code":3,)"
      R"("run_id":"01a24dbf-0000-7000-8000-000000000009","run_status":"failed",)"
      R"("suppressed":4,"task_name":"backup"})";
  return row;
}

TEST(RenderNotificationTest, AWebhookCarriesTheFactsTheKeyAndItsSigningKey) {
  Result<OutgoingMessage> m = RenderNotification(
      Channel("webhook",
              R"({"headers":{"X-Team":"ops"},"signing_secret":"k","url":"https://h.test/x"})"),
      Failed(), {{"k", "the-key"}}, "https://ql.example.test/");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->url, "https://h.test/x");
  EXPECT_EQ(m->idempotency_key, "01a24dbf-dee1-72cb-b70e-4b94cfd223ed");
  EXPECT_EQ(m->signing_key, "the-key");
  const json body = json::parse(m->body);
  EXPECT_EQ(body["id"], m->idempotency_key);
  EXPECT_EQ(body["event"], "failed");
  EXPECT_EQ(body["facts"]["exit_code"], 3);
  EXPECT_EQ(body["title"], "[QingLong] backup failed");
  const std::string text = body["text"];
  EXPECT_NE(text.find("failed (exit code 3)"), std::string::npos) << text;
  EXPECT_NE(text.find("Duration: 1.2 s"), std::string::npos) << text;
  EXPECT_NE(text.find("4 more held back"), std::string::npos) << text;
  EXPECT_NE(text.find("https://ql.example.test/#/runs/01a24dbf-0000-7000-8000-000000000009"),
            std::string::npos)
      << text;
  bool team = false;
  for (const auto& [k, v] : m->headers) team = team || (k == "X-Team" && v == "ops");
  EXPECT_TRUE(team);
}

TEST(RenderNotificationTest, ChatFormatsAndTheirSecretsInTheirPlaces) {
  const OutboxRecord row = Failed();
  Result<OutgoingMessage> tg = RenderNotification(
      Channel("telegram", R"({"api_base":"http://tg.test","chat_id":"-100","token_secret":"t"})"),
      row, {{"t", "123:abc"}}, "");
  ASSERT_TRUE(tg.ok());
  EXPECT_EQ(tg->url, "http://tg.test/bot123:abc/sendMessage");
  EXPECT_EQ(json::parse(tg->body)["chat_id"], "-100");
  Result<OutgoingMessage> feishu = RenderNotification(Channel("feishu", R"({"url_secret":"u"})"),
                                                      row, {{"u", "https://f.test/h"}}, "");
  ASSERT_TRUE(feishu.ok());
  EXPECT_EQ(feishu->url, "https://f.test/h");
  EXPECT_EQ(json::parse(feishu->body)["msg_type"], "text");
  Result<OutgoingMessage> zh = RenderNotification(
      Channel("dingtalk", R"({"language":"zh-CN","url":"https://d.test"})"), row, {}, "");
  ASSERT_TRUE(zh.ok());
  const std::string content = json::parse(zh->body)["text"]["content"];
  EXPECT_EQ(content.rfind("[青龙] 任务 backup 运行失败", 0), 0u) << content;
  Result<OutgoingMessage> mail = RenderNotification(
      Channel("smtp", R"({"from":"a@b.test","host":"mx.test","security":"tls","to":["c@d.test"]})"),
      row, {}, "");
  ASSERT_TRUE(mail.ok());
  EXPECT_EQ(mail->transport, "smtp");
  EXPECT_EQ(mail->smtp_port, 465);
  EXPECT_EQ(mail->subject, "[QingLong] backup failed");
}

TEST(AcceptedTest, ChatApisThatAnswer200WithAnErrorAreNotDelivered) {
  EXPECT_TRUE(Accepted("webhook", SendReply{true, 204, "", "", 1}));
  EXPECT_FALSE(Accepted("webhook", SendReply{true, 500, "", "", 1}));
  EXPECT_FALSE(Accepted("webhook", SendReply{false, 0, "", "timeout", 1}));
  EXPECT_TRUE(Accepted("feishu", SendReply{true, 200, R"({"code":0,"msg":"success"})", "", 1}));
  EXPECT_FALSE(Accepted("feishu", SendReply{true, 200, R"({"code":19021,"msg":"sign"})", "", 1}));
  EXPECT_FALSE(Accepted("dingtalk", SendReply{true, 200, R"({"errcode":310000})", "", 1}));
  EXPECT_TRUE(Accepted("wecom", SendReply{true, 200, R"({"errcode":0,"errmsg":"ok"})", "", 1}));
  EXPECT_FALSE(Accepted("telegram", SendReply{true, 200, R"({"ok":false})", "", 1}));
  EXPECT_FALSE(Accepted("dingtalk", SendReply{true, 200, "not json", "", 1}));
}

}  // namespace
}  // namespace ql
