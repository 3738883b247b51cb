#pragma once

// The NotificationSender of the daemons (engine/notification_delivery.h), over libcurl.
// Requests never follow redirects, never send to a loopback or link-local address unless the
// operator allows it (the daemon's own API and a cloud's metadata service live there), and are
// cut off after the message's timeout. A webhook signature is made at send time, so every
// attempt carries a fresh timestamp; the idempotency key stays the same.

#include <string>

#include "ql/engine/notification_delivery.h"

namespace ql::notify {

struct CurlSenderOptions {
  // Allows destinations on 127.0.0.0/8, ::1, 169.254.0.0/16 and fe80::/10.
  bool allow_loopback = false;
  // The CA bundle for https and TLS mail; empty uses the system's.
  std::string ca_file;
};

class CurlSender final : public NotificationSender {
 public:
  explicit CurlSender(CurlSenderOptions options);
  ~CurlSender() override;
  SendReply Send(const OutgoingMessage& message) override;

 private:
  SendReply SendHttp(const OutgoingMessage& message);
  SendReply SendMail(const OutgoingMessage& message);
  CurlSenderOptions options_;
};

// Returns "t=<unix_s>,v1=<hex HMAC-SHA256(key, "<unix_s>.<body>")>".
std::string WebhookSignature(const std::string& key, int64_t unix_s, const std::string& body);

// The signature of a Feishu (Lark) custom bot with signed requests: base64 of HMAC-SHA256 keyed
// with "<unix_s>\n<secret>" over nothing; sent as "timestamp" and "sign" in the body.
std::string FeishuSignature(const std::string& secret, int64_t unix_s);
// The signature of a DingTalk custom robot with signed requests: base64 of
// HMAC-SHA256(secret, "<unix_ms>\n<secret>"); sent URL-encoded as timestamp= and sign= on the URL.
std::string DingTalkSignature(const std::string& secret, int64_t unix_ms);

}  // namespace ql::notify
