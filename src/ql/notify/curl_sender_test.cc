#include "ql/notify/curl_sender.h"

#include <gtest/gtest.h>

namespace ql::notify {
namespace {

// The receiver's check (Python's hmac over "<t>.<body>") agrees with the sender's signature.
TEST(WebhookSignatureTest, IsHmacSha256OfTimestampDotBody) {
  EXPECT_EQ(WebhookSignature("key", 1'700'000'000, R"({"a":1})"),
            "t=1700000000,v1=a438e398bfafc57e4396bb7fc2304422f0f768e965d073ca313cb52e22e6ad03");
}

// The chat bots' own schemes, checked against values their documented algorithms give
// (Python's hmac and base64): Feishu keys the HMAC with "t\nsecret" over nothing, DingTalk signs
// "t_ms\nsecret" with the secret.
TEST(ChatSignatureTest, FeishuAndDingTalkSchemes) {
  EXPECT_EQ(FeishuSignature("SECabc", 1'700'000'000),
            "XprR1de+0SSBnwWyU/4k6x2TL+Q2SJlM5NNEdAv7MWg=");
  EXPECT_EQ(DingTalkSignature("SECabc", 1'700'000'000'123),
            "IqXBU/aLfwMA3S/tDcfRmHx5vWHw9Y1aOgFLBr1Ti9w=");
}

// A destination on loopback is refused before connecting unless the operator allows it.
TEST(CurlSenderTest, RefusesLoopbackDestinationsByDefault) {
  CurlSender sender(CurlSenderOptions{});
  OutgoingMessage m;
  m.url = "http://127.0.0.1:9/hook";
  m.body = "{}";
  m.timeout_ms = 2000;
  const SendReply reply = sender.Send(m);
  EXPECT_FALSE(reply.transport_ok);
  EXPECT_NE(reply.error.find("loopback"), std::string::npos) << reply.error;
  m.url = "http://[::ffff:127.0.0.1]:9/hook";
  EXPECT_NE(sender.Send(m).error.find("loopback"), std::string::npos);
  m.url = "http://169.254.169.254/latest/meta-data";
  EXPECT_NE(sender.Send(m).error.find("loopback"), std::string::npos);
  // Allowed, the same address is tried (and nobody listens on the discard port).
  CurlSender allowed(CurlSenderOptions{true, ""});
  m.url = "http://127.0.0.1:9/hook";
  const SendReply tried = allowed.Send(m);
  EXPECT_FALSE(tried.transport_ok);
  EXPECT_EQ(tried.error.find("loopback"), std::string::npos) << tried.error;
}

// A file: or other URL is never opened, whatever a stored config says.
TEST(CurlSenderTest, OnlyHttpAndHttpsAreSpoken) {
  CurlSender sender(CurlSenderOptions{true, ""});
  OutgoingMessage m;
  m.url = "file:///etc/passwd";
  m.body = "{}";
  const SendReply reply = sender.Send(m);
  EXPECT_FALSE(reply.transport_ok);
  EXPECT_TRUE(reply.body.empty());
}

}  // namespace
}  // namespace ql::notify
