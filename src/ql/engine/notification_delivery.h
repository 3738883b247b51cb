#pragma once

// The delivery loop of the notification outbox (DESIGN §14). Each round claims the due rows
// (leased to this process, skipping rows another replica holds), renders each for its channel
// (secrets opened here, right before sending), sends it through a NotificationSender with the
// row's id as the idempotency key, and records the attempt: delivered, the next attempt after a
// doubling backoff, or dead after the channel's last attempt or its deadline. A crash between
// the claim and the record leaves the row leased; when the lease runs out any replica sends it
// again with the same key. The loop runs on its own thread and never blocks admission or
// dispatch; a sender that hangs is cut off by its timeout, which is shorter than the lease.
// The rows of a batch are sent one after another: a row whose lease has less than two send
// timeouts left is renewed before it is sent, and skipped when another replica took it over.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ql/core/clock.h"
#include "ql/core/log_source.h"
#include "ql/core/notification_store.h"
#include "ql/core/ports.h"
#include "ql/core/secret_store.h"
#include "ql/core/status.h"
#include "ql/engine/diagnostics.h"
#include "ql/engine/metrics.h"

namespace ql {

// One message ready for the wire.
struct OutgoingMessage {
  std::string transport = "http";  // http | smtp
  std::string idempotency_key;     // the outbox row's id
  int64_t timeout_ms = 10'000;
  // http: a POST of `body` to `url` with `headers` (Content-Type included).
  std::string url;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // Signs the request at send time with `signing_key`, by `signing_scheme`:
  //   ql        X-QL-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(key, "t.body")>
  //   feishu    "timestamp" and "sign" (base64 HMAC-SHA256 keyed "t\nkey" of nothing) in the body
  //   dingtalk  timestamp=<unix ms>&sign=<base64 HMAC-SHA256(key, "t\nkey")> on the URL
  std::optional<std::string> signing_key;
  std::string signing_scheme = "ql";
  // smtp
  std::string smtp_host;
  int smtp_port = 587;
  std::string smtp_security = "starttls";  // starttls | tls | none
  std::string smtp_username;
  std::string smtp_password;
  std::string mail_from;
  std::vector<std::string> mail_to;
  std::string subject;  // also the title of chat messages
  std::string text;     // the plain-text body (e-mail)
};

// What the wire said.
struct SendReply {
  bool transport_ok = false;  // a complete answer came back (any HTTP status; SMTP accepted)
  int status_code = 0;        // HTTP status, or the last SMTP reply code
  std::string body;           // the first 4 KiB of the answer
  std::string error;          // when !transport_ok: what went wrong, no secret in it
  int64_t latency_ms = 0;
};

// Sends messages; implemented with libcurl in src/ql/notify. Thread-safe.
class NotificationSender {
 public:
  virtual ~NotificationSender() = default;
  virtual SendReply Send(const OutgoingMessage& message) = 0;
};

// How much of a run's log a message carries: its last lines, within both bounds.
inline constexpr size_t kLogTailLines = 10;
inline constexpr size_t kLogTailBytes = 1024;

// The last `max_lines` lines of `data` (the end of a log; `whole` when it starts at the log's
// first byte, else its first, partial line is dropped) in at most `max_bytes` bytes, cut at a
// line or UTF-8 boundary, without a trailing newline; invalid UTF-8 is replaced with U+FFFD.
std::string LastLogLines(std::string_view data, bool whole, size_t max_lines, size_t max_bytes);

// Renders row `row` of `channel` with `secrets` (the values of its *_secret settings, by secret
// name). `public_url` (may be empty) is where run and approval links point; `log_tail` (may be
// empty) is the end of the run's log, shown after the facts. Errors: InvalidArgument
// `channel_config_invalid` for a stored config that no longer reads.
Result<OutgoingMessage> RenderNotification(const ChannelRecord& channel, const OutboxRecord& row,
                                           const std::map<std::string, std::string>& secrets,
                                           const std::string& public_url,
                                           const std::string& log_tail = "");

// Whether a complete answer means the channel accepted the message: a 2xx status, and for the
// chat APIs that answer 200 with an error inside, their success code (Feishu code 0, DingTalk
// and WeCom errcode 0, Telegram ok).
bool Accepted(std::string_view channel_type, const SendReply& reply);

// How long a delivered or dead row of no run (a channel test, a missing-run alert, an approval)
// is kept; rows of a run are purged with the run.
inline constexpr int64_t kRunlessDeliveryKeepMs = 30LL * 24 * 3600 * 1000;

struct NotificationDeliveryOptions {
  std::string owner;  // this process's lease owner name (unique per replica)
  int64_t lease_ms = 60'000;
  int64_t send_timeout_ms = 10'000;
  int64_t retry_base_ms = 10'000;
  int64_t poll_ms = 1'000;
  // How often the late and missing rules are swept.
  int64_t sweep_ms = 5'000;
  // How often delivered and dead rows of no run older than kRunlessDeliveryKeepMs are purged.
  int64_t purge_ms = 3'600'000;
  int batch = 20;
  std::string public_url;
  // Where the last lines of a failed run's log are read from (none: messages carry no log).
  const LogSource* logs = nullptr;
};

class NotificationDelivery {
 public:
  // `sender` is made on first use (ql-local loads it from a module only when a row is due); a
  // factory that fails leaves rows pending and says why once. `sealer` may be null: channels
  // with secrets then fail their attempts with secrets_unavailable.
  using SenderFactory = std::function<Result<std::unique_ptr<NotificationSender>>()>;
  NotificationDelivery(Store& store, SecretSealer* sealer, SenderFactory sender, Clock& clock,
                       Metrics& metrics, NotificationDeliveryOptions options);

  // Claims, sends and records one batch; returns how many rows it attempted.
  Result<int> RunRound();
  // For a RoundLoop: one round, then the delay before the next (none when the batch was full).
  int64_t RunLoopRound(const DiagnosticLog& diagnostics);

 private:
  // Sends one claimed row and records what happened.
  Status Deliver(const ClaimedDelivery& claimed);
  Result<std::map<std::string, std::string>> OpenSecrets(const ChannelRecord& channel);
  // The last lines of the log of the run of `row` when its event is about a failure or a run
  // still running; empty otherwise, or when the log cannot be read.
  std::string LogTailOf(const OutboxRecord& row);

  Store& store_;
  SecretSealer* sealer_;
  SenderFactory factory_;
  std::unique_ptr<NotificationSender> sender_;
  int64_t next_sweep_ms_ = 0;
  int64_t next_purge_ms_ = 0;
  Clock& clock_;
  Metrics& metrics_;
  NotificationDeliveryOptions options_;
};

}  // namespace ql
