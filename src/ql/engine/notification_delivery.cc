#include "ql/engine/notification_delivery.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>
#include <vector>

#include "ql/core/canonical_json.h"
#include "ql/core/rfc3339.h"
#include "ql/core/secret_ref.h"

namespace ql {
namespace {

using nlohmann::json;

constexpr size_t kMaxChatText = 1800;  // below Discord's 2000-character limit

std::string Duration(int64_t ms) {
  if (ms < 1000) return std::to_string(ms) + " ms";
  if (ms < 60'000) {
    const int64_t tenths = ms / 100;
    return std::to_string(tenths / 10) + "." + std::to_string(tenths % 10) + " s";
  }
  return std::to_string(ms / 60'000) + " min " + std::to_string(ms / 1000 % 60) + " s";
}

std::string Str(const json& facts, const char* key) {
  return facts.contains(key) && facts[key].is_string() ? facts[key].get<std::string>() : "";
}

std::optional<int64_t> Int(const json& facts, const char* key) {
  if (facts.contains(key) && facts[key].is_number_integer()) return facts[key].get<int64_t>();
  return std::nullopt;
}

struct Words {
  std::string title;
  std::vector<std::string> lines;
};

std::string Link(const std::string& public_url, std::string_view path) {
  std::string base = public_url;
  while (!base.empty() && base.back() == '/') base.pop_back();
  return base + "/#/" + std::string(path);
}

// The words of an approval change.
Words ComposeApproval(const json& facts, bool zh, const std::string& prefix,
                      const std::string& public_url) {
  const std::string task = Str(facts, "task_name").empty() ? "?" : Str(facts, "task_name");
  const std::string phase = Str(facts, "phase");
  const std::string by = Str(facts, "decided_by");
  const std::string id = Str(facts, "approval_id");
  Words w;
  if (phase == "requested") {
    w.title = prefix + (zh ? "任务 " + task + " 请求审批（申请人 " + Str(facts, "requester") + "）"
                           : task + ": approval requested by " + Str(facts, "requester"));
    w.lines.push_back((zh ? "审批人角色：" : "Approver role: ") + Str(facts, "approver_role"));
    if (std::optional<int64_t> at = Int(facts, "expires_at_ms")) {
      w.lines.push_back((zh ? "过期时间：" : "Expires: ") + FormatRfc3339Utc(*at));
    }
  } else if (phase == "approved") {
    w.title = prefix +
              (zh ? "任务 " + task + " 的审批已由 " + by + " 批准" : task + ": approved by " + by);
    if (std::string run = Str(facts, "run_id"); !run.empty()) {
      w.lines.push_back((zh ? "运行：" : "Run: ") + run);
    }
  } else if (phase == "rejected") {
    w.title = prefix +
              (zh ? "任务 " + task + " 的审批已被 " + by + " 拒绝" : task + ": rejected by " + by);
    if (std::string reason = Str(facts, "reason"); !reason.empty()) {
      w.lines.push_back((zh ? "理由：" : "Reason: ") + reason);
    }
  } else {
    w.title =
        prefix + (zh ? "任务 " + task + " 的审批请求已过期" : task + ": approval request expired");
  }
  w.lines.push_back((zh ? "审批：" : "Approval: ") + id);
  if (std::optional<int64_t> n = Int(facts, "suppressed"); n && *n > 0) {
    w.lines.push_back(zh ? "自上一条通知以来另有 " + std::to_string(*n) + " 条被合并未发"
                         : std::to_string(*n) + " more held back since the last message");
  }
  if (!public_url.empty() && !id.empty()) w.lines.push_back(Link(public_url, "approvals/" + id));
  return w;
}

// The title and lines of a message, in the channel's language.
Words Compose(const OutboxRecord& row, const json& facts, const std::string& language,
              const std::string& public_url, const std::string& log_tail) {
  const bool zh = language == "zh-CN";
  const std::string task = Str(facts, "task_name").empty() ? "?" : Str(facts, "task_name");
  const std::string& e = row.event;
  Words w;
  const std::string prefix = zh ? "[青龙] " : "[QingLong] ";
  if (e == "failed") {
    w.title = prefix + (zh ? "任务 " + task + " 运行失败" : task + " failed");
    if (Str(facts, "run_status") == "timed_out") {
      w.title = prefix + (zh ? "任务 " + task + " 运行超时" : task + " timed out");
    }
  } else if (e == "timed_out") {
    w.title = prefix + (zh ? "任务 " + task + " 运行超时" : task + " timed out");
  } else if (e == "recovered") {
    const int64_t n = Int(facts, "failures").value_or(0);
    w.title = prefix + (zh ? "任务 " + task + " 已恢复（此前失败 " + std::to_string(n) + " 次）"
                           : task + " recovered after " + std::to_string(n) + " failure" +
                                 (n == 1 ? "" : "s"));
  } else if (e == "succeeded") {
    w.title = prefix + (zh ? "任务 " + task + " 运行成功" : task + " succeeded");
  } else if (e == "skipped") {
    w.title = prefix + (zh ? "任务 " + task + " 的一次运行被跳过" : task + ": a run was skipped");
  } else if (e == "recovery_required") {
    w.title = prefix + (zh ? "任务 " + task + " 的运行需要人工处理"
                           : task + ": a run needs an operator (recovery_required)");
  } else if (e == "late") {
    const std::string for_text = Duration(Int(facts, "for_ms").value_or(0));
    w.title = prefix + (Str(facts, "phase") == "running"
                            ? (zh ? "任务 " + task + " 已运行 " + for_text + "，超过阈值"
                                  : task + " has been running for " + for_text)
                            : (zh ? "任务 " + task + " 到点 " + for_text + " 后仍在排队"
                                  : task + " is still queued " + for_text + " after it was due"));
  } else if (e == "missing") {
    const std::string for_text = Duration(Int(facts, "for_ms").value_or(0));
    w.title = prefix + (zh ? "任务 " + task + " 已有 " + for_text + " 没有成功运行"
                           : task + " has not succeeded for " + for_text);
    if (std::optional<int64_t> last = Int(facts, "last_success_at_ms")) {
      w.lines.push_back((zh ? "上次成功：" : "Last success: ") + FormatRfc3339Utc(*last));
    } else {
      w.lines.push_back(zh ? "自规则建立以来没有成功过。" : "No success since the rule was added.");
    }
    return w;
  } else if (e == "approval") {
    return ComposeApproval(facts, zh, prefix, public_url);
  } else if (e == "test") {
    w.title = prefix + (zh ? "测试通知" : "test notification");
    w.lines.push_back(zh ? "通知渠道 " + Str(facts, "channel") + " 工作正常。"
                         : "Channel " + Str(facts, "channel") + " works.");
    return w;
  } else {
    w.title = prefix + task + ": " + e;
  }
  const std::string run_id = Str(facts, "run_id");
  if (!run_id.empty()) w.lines.push_back((zh ? "运行：" : "Run: ") + run_id);
  std::string status = Str(facts, "run_status");
  if (std::optional<int64_t> code = Int(facts, "exit_code")) {
    status += zh ? "（退出码 " + std::to_string(*code) + "）"
                 : " (exit code " + std::to_string(*code) + ")";
  }
  if (!status.empty()) w.lines.push_back((zh ? "状态：" : "Status: ") + status);
  if (std::string error = Str(facts, "error_summary"); !error.empty()) {
    w.lines.push_back((zh ? "错误：" : "Error: ") + error);
  }
  if (std::optional<int64_t> d = Int(facts, "duration_ms")) {
    w.lines.push_back((zh ? "耗时：" : "Duration: ") + Duration(*d));
  }
  if (std::optional<int64_t> at = Int(facts, "scheduled_for_ms")) {
    w.lines.push_back((zh ? "计划时间：" : "Scheduled for: ") + FormatRfc3339Utc(*at));
  }
  if (std::optional<int64_t> n = Int(facts, "suppressed"); n && *n > 0) {
    w.lines.push_back(zh ? "自上一条通知以来另有 " + std::to_string(*n) + " 条被合并未发"
                         : std::to_string(*n) + " more held back since the last message");
  }
  if (!public_url.empty() && !run_id.empty()) w.lines.push_back(Link(public_url, "runs/" + run_id));
  if (!log_tail.empty()) {
    w.lines.push_back(zh ? "日志末尾：" : "Last lines of the log:");
    w.lines.push_back(log_tail);
  }
  return w;
}

std::string Joined(const Words& w, bool with_title, size_t max) {
  std::string out = with_title ? w.title : "";
  for (const std::string& line : w.lines) {
    if (!out.empty()) out += "\n";
    out += line;
  }
  if (out.size() > max) {
    size_t end = max;
    while (end > 0 && (static_cast<unsigned char>(out[end]) & 0xC0) == 0x80) --end;
    out.resize(end);
    out += "…";
  }
  return out;
}

std::string Secret(const std::map<std::string, std::string>& secrets, const json& config,
                   const char* key) {
  if (!config.contains(key)) return "";
  auto it = secrets.find(config[key].get<std::string>());
  return it == secrets.end() ? "" : it->second;
}

std::string UrlOf(const std::map<std::string, std::string>& secrets, const json& config) {
  if (config.contains("url")) return config["url"].get<std::string>();
  return Secret(secrets, config, "url_secret");
}

std::string Dump(const json& body) {
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

std::string LastLogLines(std::string_view data, bool whole, size_t max_lines, size_t max_bytes) {
  if (!whole) {
    const size_t first = data.find('\n');
    data = first == std::string_view::npos ? std::string_view() : data.substr(first + 1);
  }
  while (!data.empty() && (data.back() == '\n' || data.back() == '\r')) data.remove_suffix(1);
  // The last lines, newest first, while they fit; a last line longer than the bound keeps its
  // end.
  std::vector<std::string_view> kept;
  size_t bytes = 0;
  size_t end = data.size();
  while (kept.size() < max_lines) {
    const size_t nl = end == 0 ? std::string_view::npos : data.rfind('\n', end - 1);
    const size_t begin = nl == std::string_view::npos ? 0 : nl + 1;
    std::string_view line = data.substr(begin, end - begin);
    const size_t cost = line.size() + (kept.empty() ? 0 : 1);
    if (bytes + cost > max_bytes) {
      if (kept.empty()) {
        size_t cut = line.size() - max_bytes;
        while (cut < line.size() && (static_cast<unsigned char>(line[cut]) & 0xC0) == 0x80) ++cut;
        kept.push_back(line.substr(cut));
      }
      break;
    }
    kept.push_back(line);
    bytes += cost;
    if (nl == std::string_view::npos) break;
    end = nl;
  }
  std::string joined;
  for (auto it = kept.rbegin(); it != kept.rend(); ++it) {
    if (it != kept.rbegin()) joined += '\n';
    joined.append(*it);
  }
  // What a chat or a mail can show: terminal escape sequences (colours) and other control
  // characters dropped, tabs and newlines kept, valid UTF-8.
  std::string text;
  const std::string_view tail = joined;
  for (size_t i = 0; i < tail.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(tail[i]);
    if (c == 0x1b) {
      if (i + 1 < tail.size() && tail[i + 1] == '[') {  // CSI: ESC [ params final-byte
        i += 2;
        while (i < tail.size() && !(tail[i] >= 0x40 && tail[i] <= 0x7e)) ++i;
      }
      continue;
    }
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) continue;
    text.push_back(static_cast<char>(c));
  }
  return ReplaceInvalidUtf8(text);
}

Result<OutgoingMessage> RenderNotification(const ChannelRecord& channel, const OutboxRecord& row,
                                           const std::map<std::string, std::string>& secrets,
                                           const std::string& public_url,
                                           const std::string& log_tail) {
  Result<json> config = ParseJsonStrict(channel.config_json);
  Result<json> facts = ParseJsonStrict(row.payload_json);
  if (!config.ok() || !config->is_object() || !facts.ok() || !facts->is_object()) {
    return InvalidArgument("channel_config_invalid",
                           "channel " + channel.name + " or its message does not read as JSON");
  }
  const json& c = *config;
  const ChannelLimits limits = ChannelLimitsOf(channel.config_json);
  const Words words = Compose(row, *facts, limits.language, public_url, log_tail);
  OutgoingMessage m;
  m.idempotency_key = row.id;
  m.subject = words.title;
  m.text = Joined(words, /*with_title=*/false, 16 * 1024);
  const std::string chat = Joined(words, /*with_title=*/true, kMaxChatText);
  m.headers.emplace_back("Content-Type", "application/json; charset=utf-8");
  const std::string& type = channel.type;
  if (type == "webhook") {
    m.url = UrlOf(secrets, c);
    json body{{"id", row.id},
              {"event", row.event},
              {"project_id", row.project_id},
              {"title", words.title},
              {"text", m.text},
              {"facts", *facts},
              {"created_at", FormatRfc3339Utc(row.created_at_ms)}};
    if (row.task_id) body["task_id"] = *row.task_id;
    if (row.run_id) body["run_id"] = *row.run_id;
    if (!log_tail.empty()) body["log_tail"] = log_tail;
    m.body = Dump(body);
    if (c.contains("headers")) {
      for (const auto& [name, value] : c["headers"].items()) {
        m.headers.emplace_back(name, value.get<std::string>());
      }
    }
    if (c.contains("signing_secret")) m.signing_key = Secret(secrets, c, "signing_secret");
  } else if (type == "slack") {
    m.url = UrlOf(secrets, c);
    m.body = Dump(json{{"text", chat}});
  } else if (type == "discord") {
    m.url = UrlOf(secrets, c);
    m.body = Dump(json{{"content", chat}});
  } else if (type == "feishu") {
    m.url = UrlOf(secrets, c);
    m.body = Dump(json{{"msg_type", "text"}, {"content", {{"text", chat}}}});
  } else if (type == "dingtalk" || type == "wecom") {
    m.url = UrlOf(secrets, c);
    m.body = Dump(json{{"msgtype", "text"}, {"text", {{"content", chat}}}});
  } else if (type == "telegram") {
    std::string base = c.value("api_base", std::string("https://api.telegram.org"));
    while (!base.empty() && base.back() == '/') base.pop_back();
    m.url = base + "/bot" + Secret(secrets, c, "token_secret") + "/sendMessage";
    m.body = Dump(json{{"chat_id", c["chat_id"]}, {"text", chat}});
  } else if (type == "bark") {
    std::string base = c.value("server", std::string("https://api.day.app"));
    while (!base.empty() && base.back() == '/') base.pop_back();
    m.url = base + "/push";
    m.body = Dump(json{{"device_key", Secret(secrets, c, "device_key_secret")},
                       {"title", words.title},
                       {"body", Joined(words, false, kMaxChatText)},
                       {"group", "QingLong"}});
  } else if (type == "smtp") {
    m.transport = "smtp";
    m.headers.clear();
    m.smtp_host = c["host"].get<std::string>();
    m.smtp_security = c.value("security", std::string("starttls"));
    m.smtp_port = c.value("port", m.smtp_security == "tls"    ? 465
                                  : m.smtp_security == "none" ? 25
                                                              : 587);
    m.smtp_username = c.value("username", std::string());
    m.smtp_password = Secret(secrets, c, "password_secret");
    m.mail_from = c["from"].get<std::string>();
    for (const json& to : c["to"]) m.mail_to.push_back(to.get<std::string>());
  } else {
    return InvalidArgument("channel_type_invalid", "channel type " + type + " is not known");
  }
  if ((type == "feishu" || type == "dingtalk") && c.contains("signing_secret")) {
    m.signing_key = Secret(secrets, c, "signing_secret");
    m.signing_scheme = type;
  }
  return m;
}

bool Accepted(std::string_view type, const SendReply& reply) {
  if (!reply.transport_ok) return false;
  if (type == "smtp") return reply.status_code >= 200 && reply.status_code < 300;
  if (reply.status_code < 200 || reply.status_code > 299) return false;
  if (type == "feishu" || type == "dingtalk" || type == "wecom" || type == "telegram") {
    Result<json> body = ParseJsonStrict(reply.body);
    if (!body.ok() || !body->is_object()) return false;
    if (type == "telegram") return body->value("ok", false) == true;
    if (type == "feishu") {
      const json code =
          body->contains("code") ? (*body)["code"] : body->value("StatusCode", json(0));
      return code.is_number_integer() && code.get<int64_t>() == 0;
    }
    return body->contains("errcode") && (*body)["errcode"].is_number_integer() &&
           (*body)["errcode"].get<int64_t>() == 0;
  }
  return true;
}

NotificationDelivery::NotificationDelivery(Store& store, SecretSealer* sealer, SenderFactory sender,
                                           Clock& clock, Metrics& metrics,
                                           NotificationDeliveryOptions options)
    : store_(store),
      sealer_(sealer),
      factory_(std::move(sender)),
      clock_(clock),
      metrics_(metrics),
      options_(std::move(options)) {
  metrics_.Describe("ql_notifications_total", "counter",
                    "Notification send attempts by channel type and outcome (delivered, retry, "
                    "dead).");
}

Result<std::map<std::string, std::string>> NotificationDelivery::OpenSecrets(
    const ChannelRecord& channel) {
  std::map<std::string, std::string> out;
  for (const std::string& name : ChannelSecretNames(channel.config_json)) {
    if (sealer_ == nullptr) {
      return Unavailable("secrets_unavailable", "channel " + channel.name + " needs secret " +
                                                    name + " but this process has no key provider");
    }
    QL_ASSIGN_OR_RETURN(SecretVersionRecord version,
                        store_.secrets().ResolveSecret(SecretRef{channel.project_id, name, {}}));
    QL_ASSIGN_OR_RETURN(
        std::string value,
        sealer_->Open(SecretRef{channel.project_id, name, version.version}, version.sealed));
    out.emplace(name, std::move(value));
  }
  return out;
}

std::string NotificationDelivery::LogTailOf(const OutboxRecord& row) {
  if (options_.logs == nullptr || !row.run_id.has_value()) return "";
  const bool about_failure = row.event == "failed" || row.event == "timed_out" ||
                             row.event == "recovery_required" || row.event == "late";
  if (!about_failure) return "";
  Result<std::vector<AttemptRecord>> attempts = store_.runs().ListAttempts(*row.run_id);
  if (!attempts.ok() || attempts->empty()) return "";
  const AttemptRecord& last = attempts->back();
  Result<int64_t> size = options_.logs->LogSize(last);
  if (!size.ok() || *size <= 0) return "";
  // Enough bytes for the lines kept, and one more line's end to find where they start.
  const int64_t window = static_cast<int64_t>(kLogTailBytes) * 2;
  const int64_t offset = std::max<int64_t>(0, *size - window);
  Result<LogChunk> chunk = options_.logs->ReadLog(last, offset, static_cast<size_t>(window));
  if (!chunk.ok()) return "";
  return LastLogLines(chunk->data, offset == 0, kLogTailLines, kLogTailBytes);
}

Status NotificationDelivery::Deliver(const ClaimedDelivery& claimed) {
  const OutboxRecord& row = claimed.row;
  const ChannelLimits limits = ChannelLimitsOf(claimed.channel.config_json);
  DeliveryResult result;
  result.id = row.id;
  result.owner = options_.owner;

  SendReply reply;
  Result<std::map<std::string, std::string>> secrets = OpenSecrets(claimed.channel);
  Result<OutgoingMessage> message =
      secrets.ok()
          ? RenderNotification(claimed.channel, row, *secrets, options_.public_url, LogTailOf(row))
          : Result<OutgoingMessage>(secrets.status());
  if (!message.ok()) {
    reply.error = message.status().reason() + ": " + message.status().message();
  } else {
    // A batch is sent one row after another, so a row late in a long batch (slow receivers, or
    // a process that was paused) may be near the end of the lease its claim took. Unless two
    // send timeouts of it are left, the lease is renewed first; when another replica has taken
    // the row over meanwhile this one does not send it (the new holder does).
    const int64_t before = clock_.NowMs();
    if (!row.lease_until_ms || before + 2 * options_.send_timeout_ms > *row.lease_until_ms) {
      QL_RETURN_IF_ERROR(store_.notifications()
                             .RenewDeliveryLease(row.id, options_.owner, before, options_.lease_ms)
                             .status());
    }
    message->timeout_ms = options_.send_timeout_ms;
    reply = sender_->Send(*message);
  }
  const int64_t now = clock_.NowMs();
  result.now_ms = now;
  result.latency_ms = reply.latency_ms;
  if (reply.transport_ok) result.status_code = reply.status_code;
  result.delivered = Accepted(claimed.channel.type, reply);
  if (!result.delivered) {
    std::string error = reply.error;
    if (error.empty() && reply.transport_ok) {
      error = "answered " + std::to_string(reply.status_code) +
              (reply.body.empty() ? "" : ": " + reply.body.substr(0, 200));
    }
    result.error = error;
    const int64_t next = now + DeliveryBackoffMs(row.attempts, options_.retry_base_ms);
    if (row.attempts < limits.max_attempts && next <= row.deadline_at_ms) result.retry_at_ms = next;
  }
  const std::string outcome = result.delivered     ? "delivered"
                              : result.retry_at_ms ? "retry"
                                                   : "dead";
  metrics_.Increment("ql_notifications_total",
                     "channel=\"" + claimed.channel.type + "\",outcome=\"" + outcome + "\"");
  return store_.notifications().RecordDelivery(result).status();
}

Result<int> NotificationDelivery::RunRound() {
  if (clock_.NowMs() >= next_sweep_ms_) {
    next_sweep_ms_ = clock_.NowMs() + options_.sweep_ms;
    QL_RETURN_IF_ERROR(store_.notifications().SweepOverdue(clock_.NowMs()).status());
  }
  if (clock_.NowMs() >= next_purge_ms_) {
    // Rows of a run go with it (retention); the others are kept for kRunlessDeliveryKeepMs.
    next_purge_ms_ = clock_.NowMs() + options_.purge_ms;
    QL_RETURN_IF_ERROR(store_.notifications()
                           .PurgeRunlessDeliveries(clock_.NowMs() - kRunlessDeliveryKeepMs, 1000)
                           .status());
  }
  QL_ASSIGN_OR_RETURN(std::vector<ClaimedDelivery> claimed,
                      store_.notifications().ClaimDueDeliveries(options_.owner, clock_.NowMs(),
                                                                options_.lease_ms, options_.batch));
  if (claimed.empty()) return 0;
  if (!sender_) {
    Result<std::unique_ptr<NotificationSender>> made = factory_();
    if (!made.ok()) {
      // Nothing was sent: the rows wait for a later round (the claim counted an attempt).
      for (const ClaimedDelivery& c : claimed) {
        DeliveryResult back{
            c.row.id,     options_.owner,          false, clock_.NowMs() + options_.retry_base_ms,
            std::nullopt, made.status().message(), 0,     clock_.NowMs()};
        (void)store_.notifications().RecordDelivery(back);
      }
      return made.status();
    }
    sender_ = std::move(*made);
  }
  Status first;
  for (const ClaimedDelivery& c : claimed) {
    Status st = Deliver(c);
    if (!st.ok() && first.ok()) first = st;
  }
  if (!first.ok()) return first;
  return static_cast<int>(claimed.size());
}

int64_t NotificationDelivery::RunLoopRound(const DiagnosticLog& diagnostics) {
  Result<int> n = RunRound();
  if (!n.ok()) {
    if (diagnostics) diagnostics("notifications", n.status());
    return options_.poll_ms;
  }
  return *n >= options_.batch ? 0 : options_.poll_ms;
}

}  // namespace ql
