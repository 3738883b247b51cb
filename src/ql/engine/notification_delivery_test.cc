#include "ql/engine/notification_delivery.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>

#include "ql/engine/control_service.h"
#include "ql/engine/metrics.h"
#include "ql/storage/sqlite/sqlite_store.h"
#include "ql/testing/fake_clock.h"

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

// A failure's message ends with the last lines of the run's log, in every format.
TEST(RenderNotificationTest, TheLogsLastLinesEndTheMessage) {
  const std::string tail = "step 9\nerror: disk full";
  Result<OutgoingMessage> hook = RenderNotification(
      Channel("webhook", R"({"url":"https://h.test/x"})"), Failed(), {}, "", tail);
  ASSERT_TRUE(hook.ok());
  const json body = json::parse(hook->body);
  EXPECT_EQ(body["log_tail"], tail);
  const std::string text = body["text"];
  EXPECT_TRUE(text.ends_with("Last lines of the log:\n" + tail)) << text;
  Result<OutgoingMessage> zh = RenderNotification(
      Channel("wecom", R"({"language":"zh-CN","url":"https://w.test"})"), Failed(), {}, "", tail);
  ASSERT_TRUE(zh.ok());
  const std::string content = json::parse(zh->body)["text"]["content"];
  EXPECT_TRUE(content.ends_with("日志末尾：\n" + tail)) << content;
  Result<OutgoingMessage> none =
      RenderNotification(Channel("webhook", R"({"url":"https://h.test/x"})"), Failed(), {}, "", "");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(json::parse(none->body).contains("log_tail"));
}

TEST(LastLogLinesTest, KeepsTheLastLinesWithinBothBoundsAndShowsOnlyText) {
  std::string log;
  for (int i = 1; i <= 30; ++i) log += "line-" + std::to_string(i) + "\n";
  EXPECT_EQ(LastLogLines(log, true, 3, 1024), "line-28\nline-29\nline-30");
  // A window that starts mid-line drops the partial first line.
  EXPECT_EQ(LastLogLines("ne-7\nline-8\n", false, 10, 1024), "line-8");
  EXPECT_EQ(LastLogLines("ne-7\nline-8\n", true, 10, 1024), "ne-7\nline-8");
  // The byte bound keeps whole lines; a single longer line keeps its end.
  EXPECT_EQ(LastLogLines("aaaa\nbbbb\ncccc", true, 10, 9), "bbbb\ncccc");
  EXPECT_EQ(LastLogLines(std::string(50, 'x') + "END", true, 10, 8), "xxxxxEND");
  // Colours and other control characters are dropped; broken UTF-8 is replaced.
  EXPECT_EQ(LastLogLines("\x1b[31mred\x1b[0m\tok\r\n", true, 10, 1024), "red\tok");
  EXPECT_EQ(LastLogLines("bad \xff byte", true, 10, 1024), "bad \xef\xbf\xbd byte");
  // A cut never splits a character.
  EXPECT_EQ(LastLogLines("\xe6\x97\xa5\xe5\xbf\x97", true, 10, 4), "\xe5\xbf\x97");
  EXPECT_EQ(LastLogLines("", true, 10, 1024), "");
}

TEST(RenderNotificationTest, ApprovalsNameTheTaskThePeopleAndTheLink) {
  OutboxRecord row;
  row.id = "01a24dbf-dee1-72cb-b70e-4b94cfd223ee";
  row.project_id = "01a24dbf-ded7-7ade-8f9e-000000000001";
  row.event = "approval";
  row.payload_json =
      R"({"approval_id":"01a24dbf-0000-7000-8000-0000000000aa","approver_role":"admin",)"
      R"("event":"approval","expires_at_ms":1700000000000,"phase":"requested",)"
      R"("requester":"ops","task_name":"deploy"})";
  Result<OutgoingMessage> asked = RenderNotification(
      Channel("webhook", R"({"url":"https://h.test/x"})"), row, {}, "https://ql.test");
  ASSERT_TRUE(asked.ok());
  const json body = json::parse(asked->body);
  EXPECT_EQ(body["title"], "[QingLong] deploy: approval requested by ops");
  const std::string text = body["text"];
  EXPECT_NE(text.find("Approver role: admin"), std::string::npos) << text;
  EXPECT_NE(text.find("Expires: 2023-11-14T22:13:20Z"), std::string::npos) << text;
  EXPECT_NE(text.find("https://ql.test/#/approvals/01a24dbf-0000-7000-8000-0000000000aa"),
            std::string::npos)
      << text;
  row.payload_json =
      R"({"approval_id":"01a24dbf-0000-7000-8000-0000000000aa","decided_by":"amy",)"
      R"("event":"approval","phase":"rejected","reason":"freeze","task_name":"deploy"})";
  Result<OutgoingMessage> no = RenderNotification(
      Channel("feishu", R"({"language":"zh-CN","url":"https://f.test"})"), row, {}, "");
  ASSERT_TRUE(no.ok());
  const std::string content = json::parse(no->body)["content"]["text"];
  EXPECT_EQ(content.rfind("[青龙] 任务 deploy 的审批已被 amy 拒绝\n理由：freeze", 0), 0u)
      << content;
}

// Feishu and DingTalk sign by their own schemes; a webhook by X-QL-Signature.
TEST(RenderNotificationTest, EachSignedChannelNamesItsScheme) {
  Result<OutgoingMessage> feishu =
      RenderNotification(Channel("feishu", R"({"signing_secret":"s","url":"https://f.test"})"),
                         Failed(), {{"s", "SECx"}}, "");
  ASSERT_TRUE(feishu.ok());
  EXPECT_EQ(feishu->signing_key, "SECx");
  EXPECT_EQ(feishu->signing_scheme, "feishu");
  Result<OutgoingMessage> ding =
      RenderNotification(Channel("dingtalk", R"({"signing_secret":"s","url":"https://d.test"})"),
                         Failed(), {{"s", "SECy"}}, "");
  ASSERT_TRUE(ding.ok());
  EXPECT_EQ(ding->signing_scheme, "dingtalk");
  Result<OutgoingMessage> hook =
      RenderNotification(Channel("webhook", R"({"signing_secret":"s","url":"https://h.test"})"),
                         Failed(), {{"s", "k"}}, "");
  ASSERT_TRUE(hook.ok());
  EXPECT_EQ(hook->signing_scheme, "ql");
  Result<OutgoingMessage> plain =
      RenderNotification(Channel("dingtalk", R"({"url":"https://d.test"})"), Failed(), {}, "");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->signing_key.has_value());
  EXPECT_FALSE(
      CanonicalChannelConfig("wecom", R"({"signing_secret":"s","url":"https://w.test"})").ok());
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

// Two delivery loops ("replicas") over one store. The sender runs a hook inside each send, so a
// test can move time on and let the other loop run a round while a row is on the wire.
class DeliveryLoopTest : public ::testing::Test {
 protected:
  struct Sent {
    std::string by;
    std::string key;
  };

  class HookedSender final : public NotificationSender {
   public:
    HookedSender(DeliveryLoopTest& test, std::string name) : test_(test), name_(std::move(name)) {}
    SendReply Send(const OutgoingMessage& message) override {
      test_.sent_.push_back(Sent{name_, message.idempotency_key});
      if (test_.during_send_) test_.during_send_(name_);
      return SendReply{true, 204, "", "", 3};
    }

   private:
    DeliveryLoopTest& test_;
    std::string name_;
  };

  void SetUp() override {
    char tmpl[] = "/tmp/ql-deliver-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    SqliteOptions options;
    options.path = dir_ + "/q.db";
    store_ = std::move(SqliteStore::Open(options, clock_).value());
    ControlService control(*store_, clock_, random_, ControlOptions{});
    Result<ProjectRecord> project = control.EnsureDefaultProject();
    ASSERT_TRUE(project.ok()) << project.status().ToString();
    project_id_ = project->id;
    CreateChannelCommand cmd;
    cmd.channel.id = "01a24dbf-ded7-7ade-8f9e-6f24a01ecd39";
    cmd.channel.project_id = project_id_;
    cmd.channel.name = "ops";
    cmd.channel.type = "webhook";
    cmd.channel.config_json = R"({"url":"https://hooks.example/ops"})";
    cmd.channel.created_at_ms = clock_.NowMs();
    Result<ChannelRecord> channel = store_->notifications().CreateChannel(cmd);
    ASSERT_TRUE(channel.ok()) << channel.status().ToString();
    channel_id_ = channel->id;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Enqueue(int n) {
    OutboxRecord row;
    row.id = "01a24dbf-dee1-72cb-b70e-00000000000" + std::to_string(n);
    row.project_id = project_id_;
    row.channel_id = channel_id_;
    row.event = "test";
    row.payload_json = R"({"channel":"ops"})";
    row.status = "pending";
    row.next_attempt_at_ms = clock_.NowMs();
    row.deadline_at_ms = clock_.NowMs() + 3'600'000;
    row.created_at_ms = clock_.NowMs();
    EXPECT_TRUE(store_->notifications().EnqueueDelivery(row).ok());
    return row.id;
  }

  // A loop as ql-cluster makes it with --notify-timeout 1000: a lease of 3 s + 1 s.
  std::unique_ptr<NotificationDelivery> Loop(const std::string& name) {
    NotificationDeliveryOptions options;
    options.owner = name;
    options.send_timeout_ms = 1'000;
    options.lease_ms = 4'000;
    options.sweep_ms = 3'600'000;
    return std::make_unique<NotificationDelivery>(
        *store_, nullptr,
        [this, name]() -> Result<std::unique_ptr<NotificationSender>> {
          return std::unique_ptr<NotificationSender>(std::make_unique<HookedSender>(*this, name));
        },
        clock_, metrics_, options);
  }

  std::vector<std::string> KeysSentBy(const std::string& name) const {
    std::vector<std::string> out;
    for (const Sent& s : sent_) {
      if (s.by == name) out.push_back(s.key);
    }
    return out;
  }

  std::string dir_;
  testing::FakeClock clock_;
  testing::SeededRandom random_{7};
  Metrics metrics_;
  std::unique_ptr<SqliteStore> store_;
  std::string project_id_;
  std::string channel_id_;
  std::vector<Sent> sent_;
  std::function<void(const std::string&)> during_send_;
};

// Each send takes 1.5 s, so the third row of a batch is sent after the 4 s lease its claim
// took would have run out; replica b looks for due rows during every send of replica a. The
// lease is renewed before that send, so b finds nothing and every row goes out once.
TEST_F(DeliveryLoopTest, ABatchLongerThanItsLeaseRenewsItAndNoOtherReplicaSendsItsRows) {
  const std::vector<std::string> keys = {Enqueue(1), Enqueue(2), Enqueue(3)};
  std::unique_ptr<NotificationDelivery> a = Loop("replica-a");
  std::unique_ptr<NotificationDelivery> b = Loop("replica-b");
  std::vector<int> b_rounds;
  during_send_ = [&](const std::string& who) {
    if (who != "replica-a") return;
    clock_.Advance(1'500);
    Result<int> n = b->RunRound();
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    b_rounds.push_back(*n);
  };
  Result<int> n = a->RunRound();
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 3);
  // b looked while each of the three rows was on the wire and took none of them.
  EXPECT_EQ(b_rounds, (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(KeysSentBy("replica-a"), keys);
  EXPECT_TRUE(KeysSentBy("replica-b").empty());
  for (const std::string& id : keys) {
    Result<OutboxRecord> row = store_->notifications().GetDelivery(project_id_, id);
    ASSERT_TRUE(row.ok()) << row.status().ToString();
    EXPECT_EQ(row->status, "delivered");
    EXPECT_EQ(row->attempts, 1);
  }
}

// Replica a is paused for 10 s while its first row is on the wire; replica b takes over the
// whole batch meanwhile and sends it. When a resumes it sends none of the rows it no longer
// holds: only the row that was already on the wire reaches the receiver twice (same key).
TEST_F(DeliveryLoopTest, AReplicaPausedMidBatchDoesNotSendTheRowsAnotherTookOver) {
  const std::vector<std::string> keys = {Enqueue(1), Enqueue(2), Enqueue(3)};
  std::unique_ptr<NotificationDelivery> a = Loop("replica-a");
  std::unique_ptr<NotificationDelivery> b = Loop("replica-b");
  bool paused = false;
  during_send_ = [&](const std::string& who) {
    if (who != "replica-a" || paused) return;
    paused = true;
    clock_.Advance(10'000);
    Result<int> n = b->RunRound();
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_EQ(*n, 3);
  };
  Result<int> n = a->RunRound();
  EXPECT_EQ(n.status().reason(), "delivery_lease_lost") << n.status().ToString();
  EXPECT_EQ(KeysSentBy("replica-a"), (std::vector<std::string>{keys[0]}));
  EXPECT_EQ(KeysSentBy("replica-b"), keys);
  for (const std::string& id : keys) {
    Result<OutboxRecord> row = store_->notifications().GetDelivery(project_id_, id);
    ASSERT_TRUE(row.ok()) << row.status().ToString();
    EXPECT_EQ(row->status, "delivered");
    EXPECT_EQ(row->attempts, 2);
  }
}

}  // namespace
}  // namespace ql
