#include "ql/core/notification.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "ql/core/canonical_json.h"
#include "ql/core/digest.h"
#include "ql/core/secret_ref.h"

namespace ql {
namespace {

using nlohmann::json;

constexpr std::pair<NotifyEvent, std::string_view> kEventNames[] = {
    {NotifyEvent::kFailed, "failed"},       {NotifyEvent::kTimedOut, "timed_out"},
    {NotifyEvent::kRecovered, "recovered"}, {NotifyEvent::kSucceeded, "succeeded"},
    {NotifyEvent::kSkipped, "skipped"},     {NotifyEvent::kRecoveryRequired, "recovery_required"},
    {NotifyEvent::kLate, "late"},           {NotifyEvent::kMissing, "missing"},
    {NotifyEvent::kApproval, "approval"},
};

Status ConfigError(std::string_view key, std::string_view why) {
  return InvalidArgument("channel_config_invalid",
                         "channel setting " + std::string(key) + " " + std::string(why));
}

bool IsUrlHostChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '-' || c == '[' || c == ']' || c == ':';
}

// Checks an http(s) URL: scheme, a host, no whitespace, control characters or credentials.
Status CheckUrl(std::string_view key, const json& value) {
  if (!value.is_string()) return ConfigError(key, "must be a string URL");
  const std::string url = value.get<std::string>();
  if (url.size() > 2048) return ConfigError(key, "is longer than 2048 characters");
  std::string_view rest;
  if (url.rfind("https://", 0) == 0) {
    rest = std::string_view(url).substr(8);
  } else if (url.rfind("http://", 0) == 0) {
    rest = std::string_view(url).substr(7);
  } else {
    return ConfigError(key, "must start with https:// or http://, got " + QuoteForMessage(url));
  }
  for (char c : url) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) {
      return ConfigError(key, "must not hold spaces or control characters");
    }
  }
  const std::string_view authority = rest.substr(0, rest.find_first_of("/?#"));
  if (authority.empty()) return ConfigError(key, "has no host");
  if (authority.find('@') != std::string_view::npos) {
    return ConfigError(key, "must not carry credentials (user@host); use url_secret instead");
  }
  for (char c : authority) {
    if (!IsUrlHostChar(c))
      return ConfigError(key, "has an invalid host " + QuoteForMessage(authority));
  }
  return Status::Ok();
}

Status CheckSecretName(std::string_view key, const json& value) {
  if (!value.is_string()) return ConfigError(key, "must name a secret of the project");
  Status valid = ValidateSecretName(value.get<std::string>());
  if (!valid.ok()) return ConfigError(key, "must name a secret of the project: " + valid.message());
  return Status::Ok();
}

Status CheckText(std::string_view key, const json& value, size_t max) {
  if (!value.is_string() || value.get<std::string>().empty() ||
      value.get<std::string>().size() > max) {
    return ConfigError(key, "must be a string of 1.." + std::to_string(max) + " characters");
  }
  for (char c : value.get<std::string>()) {
    if (c == '\r' || c == '\n' || c == '\0') return ConfigError(key, "must be one line");
  }
  return Status::Ok();
}

Status CheckInt(std::string_view key, const json& value, int64_t lo, int64_t hi) {
  if (!value.is_number_integer() || value.get<int64_t>() < lo || value.get<int64_t>() > hi) {
    return ConfigError(key, "must be an integer " + std::to_string(lo) + ".." + std::to_string(hi));
  }
  return Status::Ok();
}

// An address of the form local@domain without spaces, angle brackets or line breaks.
Status CheckAddress(std::string_view key, const json& value) {
  QL_RETURN_IF_ERROR(CheckText(key, value, 254));
  const std::string a = value.get<std::string>();
  const size_t at = a.find('@');
  if (at == std::string::npos || at == 0 || at + 1 >= a.size() ||
      a.find_first_of(" <>,;\"") != std::string::npos) {
    return ConfigError(key, "must be an e-mail address, got " + QuoteForMessage(a));
  }
  return Status::Ok();
}

bool IsHeaderNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

Status CheckHeaders(const json& value) {
  if (!value.is_object() || value.size() > 20) {
    return ConfigError("headers", "must be an object of at most 20 name: value pairs");
  }
  for (const auto& [name, v] : value.items()) {
    if (name.empty() || name.size() > 64 ||
        !std::all_of(name.begin(), name.end(), IsHeaderNameChar)) {
      return ConfigError("headers", "has an invalid header name " + QuoteForMessage(name));
    }
    std::string lower = name;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](char c) { return static_cast<char>(std::tolower(c)); });
    for (std::string_view reserved : {"host", "content-type", "content-length", "idempotency-key",
                                      "x-ql-signature", "transfer-encoding", "connection"}) {
      if (lower == reserved) {
        return ConfigError("headers", "may not set " + name + " (the sender sets it)");
      }
    }
    QL_RETURN_IF_ERROR(CheckText("headers." + name, v, 1024));
  }
  return Status::Ok();
}

// One of url and url_secret, exactly.
Status CheckUrlOrSecret(const json& config) {
  const bool url = config.contains("url");
  const bool secret = config.contains("url_secret");
  if (url == secret) return ConfigError("url", "or url_secret is required (exactly one of them)");
  return url ? CheckUrl("url", config["url"]) : CheckSecretName("url_secret", config["url_secret"]);
}

}  // namespace

std::string_view NotifyEventName(NotifyEvent event) {
  for (const auto& [e, name] : kEventNames) {
    if (e == event) return name;
  }
  return "unknown";
}

std::optional<NotifyEvent> ParseNotifyEvent(std::string_view name) {
  for (const auto& [e, n] : kEventNames) {
    if (n == name) return e;
  }
  return std::nullopt;
}

std::string NotifyEventNames() {
  std::string out;
  for (const auto& [e, n] : kEventNames) {
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out;
}

bool IsChannelType(std::string_view type) {
  return std::find(std::begin(kChannelTypes), std::end(kChannelTypes), type) !=
         std::end(kChannelTypes);
}

Status ValidateChannelName(std::string_view name) {
  const auto ok = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '-';
  };
  if (name.empty() || name.size() > kMaxChannelNameChars ||
      !std::all_of(name.begin(), name.end(), ok) || name[0] == '.' || name[0] == '-' ||
      name[0] == '_') {
    return InvalidArgument("channel_name_invalid",
                           "a channel name is 1..64 of A-Z a-z 0-9 _ . - starting with a letter "
                           "or digit, got " +
                               QuoteForMessage(name));
  }
  return Status::Ok();
}

Result<std::string> CanonicalChannelConfig(std::string_view type, std::string_view config_json) {
  if (!IsChannelType(type)) {
    return InvalidArgument("channel_type_invalid",
                           "channel type " + QuoteForMessage(type) +
                               " is not one of webhook, smtp, feishu, dingtalk, wecom, telegram, "
                               "slack, discord, bark");
  }
  if (config_json.size() > kMaxChannelConfigBytes) {
    return ConfigError("document", "is larger than 8 KiB");
  }
  Result<json> parsed = ParseJsonStrict(config_json);
  if (!parsed.ok() || !parsed->is_object()) {
    return ConfigError("document", "must be a JSON object");
  }
  const json& c = *parsed;
  std::vector<std::string_view> allowed = {"language", "rate_per_minute", "max_attempts",
                                           "deadline_s"};
  if (type == "webhook") {
    allowed.insert(allowed.end(), {"url", "url_secret", "signing_secret", "headers"});
    QL_RETURN_IF_ERROR(CheckUrlOrSecret(c));
    if (c.contains("signing_secret")) {
      QL_RETURN_IF_ERROR(CheckSecretName("signing_secret", c["signing_secret"]));
    }
    if (c.contains("headers")) QL_RETURN_IF_ERROR(CheckHeaders(c["headers"]));
  } else if (type == "telegram") {
    allowed.insert(allowed.end(), {"token_secret", "chat_id", "api_base"});
    if (!c.contains("token_secret")) return ConfigError("token_secret", "is required");
    QL_RETURN_IF_ERROR(CheckSecretName("token_secret", c["token_secret"]));
    if (!c.contains("chat_id")) return ConfigError("chat_id", "is required");
    QL_RETURN_IF_ERROR(CheckText("chat_id", c["chat_id"], 64));
    if (c.contains("api_base")) QL_RETURN_IF_ERROR(CheckUrl("api_base", c["api_base"]));
  } else if (type == "bark") {
    allowed.insert(allowed.end(), {"device_key_secret", "server"});
    if (!c.contains("device_key_secret")) return ConfigError("device_key_secret", "is required");
    QL_RETURN_IF_ERROR(CheckSecretName("device_key_secret", c["device_key_secret"]));
    if (c.contains("server")) QL_RETURN_IF_ERROR(CheckUrl("server", c["server"]));
  } else if (type == "smtp") {
    allowed.insert(allowed.end(),
                   {"host", "port", "security", "username", "password_secret", "from", "to"});
    if (!c.contains("host")) return ConfigError("host", "is required");
    QL_RETURN_IF_ERROR(CheckText("host", c["host"], 253));
    if (c.contains("port")) QL_RETURN_IF_ERROR(CheckInt("port", c["port"], 1, 65535));
    if (c.contains("security")) {
      const json& s = c["security"];
      if (!s.is_string() || (s != "starttls" && s != "tls" && s != "none")) {
        return ConfigError("security", "must be starttls, tls or none");
      }
    }
    if (c.contains("username")) QL_RETURN_IF_ERROR(CheckText("username", c["username"], 254));
    if (c.contains("password_secret")) {
      QL_RETURN_IF_ERROR(CheckSecretName("password_secret", c["password_secret"]));
    }
    if (c.contains("password_secret") != c.contains("username")) {
      return ConfigError("username", "and password_secret go together");
    }
    if (!c.contains("from")) return ConfigError("from", "is required");
    QL_RETURN_IF_ERROR(CheckAddress("from", c["from"]));
    if (!c.contains("to") || !c["to"].is_array() || c["to"].empty() || c["to"].size() > 50) {
      return ConfigError("to", "must be a list of 1..50 e-mail addresses");
    }
    for (const json& to : c["to"]) QL_RETURN_IF_ERROR(CheckAddress("to", to));
  } else {  // feishu, dingtalk, wecom, slack, discord
    allowed.insert(allowed.end(), {"url", "url_secret"});
    QL_RETURN_IF_ERROR(CheckUrlOrSecret(c));
    if (type == "feishu" || type == "dingtalk") {
      // The secret of the bot's signed-request ("加签") security setting.
      allowed.push_back("signing_secret");
      if (c.contains("signing_secret")) {
        QL_RETURN_IF_ERROR(CheckSecretName("signing_secret", c["signing_secret"]));
      }
    }
  }
  for (const auto& [key, value] : c.items()) {
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      return ConfigError(key, "is not a setting of a " + std::string(type) + " channel");
    }
  }
  if (c.contains("language")) {
    const json& l = c["language"];
    if (!l.is_string() || (l != "en" && l != "zh-CN")) {
      return ConfigError("language", "must be en or zh-CN");
    }
  }
  if (c.contains("rate_per_minute")) {
    QL_RETURN_IF_ERROR(CheckInt("rate_per_minute", c["rate_per_minute"], 1, kMaxRatePerMinute));
  }
  if (c.contains("max_attempts")) {
    QL_RETURN_IF_ERROR(CheckInt("max_attempts", c["max_attempts"], 1, kMaxMaxAttempts));
  }
  if (c.contains("deadline_s")) {
    QL_RETURN_IF_ERROR(CheckInt("deadline_s", c["deadline_s"], 60, 7 * 24 * 3600));
  }
  Result<std::string> canonical = CanonicalJson(c);
  if (!canonical.ok()) return ConfigError("document", "cannot be encoded");
  return canonical;
}

ChannelLimits ChannelLimitsOf(std::string_view config_json) {
  ChannelLimits out;
  Result<json> parsed = ParseJsonStrict(config_json);
  if (!parsed.ok() || !parsed->is_object()) return out;
  const json& c = *parsed;
  if (c.contains("rate_per_minute") && c["rate_per_minute"].is_number_integer()) {
    out.rate_per_minute = c["rate_per_minute"].get<int>();
  }
  if (c.contains("max_attempts") && c["max_attempts"].is_number_integer()) {
    out.max_attempts = c["max_attempts"].get<int>();
  }
  if (c.contains("deadline_s") && c["deadline_s"].is_number_integer()) {
    out.deadline_ms = c["deadline_s"].get<int64_t>() * 1000;
  }
  if (c.contains("language") && c["language"].is_string()) {
    out.language = c["language"].get<std::string>();
  }
  return out;
}

std::vector<std::string> ChannelSecretNames(std::string_view config_json) {
  std::vector<std::string> out;
  Result<json> parsed = ParseJsonStrict(config_json);
  if (!parsed.ok() || !parsed->is_object()) return out;
  for (const auto& [key, value] : parsed->items()) {
    if (key.size() > 7 && key.compare(key.size() - 7, 7, "_secret") == 0 && value.is_string()) {
      out.push_back(value.get<std::string>());
    }
  }
  return out;
}

Status ValidateRule(const RuleRecord& rule) {
  const std::optional<NotifyEvent> event = ParseNotifyEvent(rule.event);
  if (!event.has_value()) {
    return InvalidArgument("notify_event_invalid", "event " + QuoteForMessage(rule.event) +
                                                       " is not one of " + NotifyEventNames());
  }
  const bool changeable = *event == NotifyEvent::kFailed || *event == NotifyEvent::kTimedOut;
  if (rule.mode != "change" && rule.mode != "every") {
    return InvalidArgument("notify_mode_invalid",
                           "mode is change or every, got " + QuoteForMessage(rule.mode));
  }
  if (rule.mode == "change" && !changeable && *event != NotifyEvent::kRecovered) {
    return InvalidArgument("notify_mode_invalid",
                           "only failed and timed_out rules notify on a change of state; " +
                               rule.event + " rules use mode every");
  }
  if (*event == NotifyEvent::kRecovered && rule.mode != "change") {
    return InvalidArgument("notify_mode_invalid", "a recovered rule is a change of state");
  }
  if (rule.min_interval_ms < 0 || rule.min_interval_ms > kMaxMinIntervalMs) {
    return InvalidArgument(
        "notify_interval_invalid",
        "the minimum interval is 0..7 days, got " + std::to_string(rule.min_interval_ms) + " ms");
  }
  const bool needs_threshold = *event == NotifyEvent::kLate || *event == NotifyEvent::kMissing;
  if (needs_threshold != rule.threshold_ms.has_value()) {
    return InvalidArgument("notify_threshold_invalid",
                           needs_threshold ? rule.event + " rules need a threshold (--after)"
                                           : rule.event + " rules take no threshold");
  }
  if (rule.threshold_ms.has_value() &&
      (*rule.threshold_ms < 1000 || *rule.threshold_ms > 30LL * 24 * 3600 * 1000)) {
    return InvalidArgument("notify_threshold_invalid", "the threshold is 1 s .. 30 days");
  }
  if (*event == NotifyEvent::kMissing && !rule.task_id.has_value()) {
    return InvalidArgument("notify_task_required",
                           "a missing rule watches one task: name it (--task)");
  }
  return Status::Ok();
}

std::string OutboxId(std::string_view rule_id, std::string_view event, std::string_view subject) {
  std::string hex =
      DomainDigest("ql.notification.v1",
                   std::string(rule_id) + "\n" + std::string(event) + "\n" + std::string(subject));
  // RFC 9562 version 8 (custom), variant 0b10.
  hex[12] = '8';
  static constexpr char kVariant[] = "89ab";
  hex[16] = kVariant[(hex[16] >= 'a' ? hex[16] - 'a' + 10 : hex[16] - '0') & 3];
  return hex.substr(0, 8) + "-" + hex.substr(8, 4) + "-" + hex.substr(12, 4) + "-" +
         hex.substr(16, 4) + "-" + hex.substr(20, 12);
}

bool IsNotifiableRunStatus(RunStatus status) {
  return status == RunStatus::kFailed || status == RunStatus::kTimedOut ||
         status == RunStatus::kSucceeded || status == RunStatus::kSkipped ||
         status == RunStatus::kRecoveryRequired;
}

namespace {

// `text` cut to at most `max` bytes without splitting a UTF-8 sequence.
std::string TruncatedUtf8(std::string text, size_t max) {
  if (text.size() <= max) return text;
  size_t end = max;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  text.resize(end);
  return text;
}

json RunFacts(const RunOutcome& o, std::string_view event) {
  const RunRecord& r = o.run;
  json facts{{"event", event},
             {"project_id", r.project_id},
             {"task_id", r.task_id},
             {"task_name", o.task_name},
             {"run_id", r.id},
             {"run_status", RunStatusName(o.status)},
             {"trigger_type", r.trigger_type},
             {"occurred_at_ms", o.now_ms}};
  if (r.exit_code.has_value()) facts["exit_code"] = *r.exit_code;
  if (r.error_code.has_value()) facts["error_code"] = *r.error_code;
  if (r.error_summary.has_value()) facts["error_summary"] = TruncatedUtf8(*r.error_summary, 300);
  if (r.scheduled_for_ms.has_value()) facts["scheduled_for_ms"] = *r.scheduled_for_ms;
  if (r.started_at_ms.has_value()) facts["started_at_ms"] = *r.started_at_ms;
  if (r.finished_at_ms.has_value()) facts["finished_at_ms"] = *r.finished_at_ms;
  if (r.started_at_ms.has_value() && r.finished_at_ms.has_value()) {
    facts["duration_ms"] = *r.finished_at_ms - *r.started_at_ms;
  }
  return facts;
}

}  // namespace

namespace {

OutboxRecord PendingRow(const RuleRecord& rule, const ChannelRecord& channel,
                        std::string_view subject, const json& facts, int64_t now_ms) {
  OutboxRecord row;
  row.id = OutboxId(rule.id, rule.event, subject);
  row.project_id = rule.project_id;
  row.channel_id = channel.id;
  row.rule_id = rule.id;
  row.event = rule.event;
  Result<std::string> payload = CanonicalJson(facts);
  row.payload_json = payload.ok() ? *payload : std::string("{}");
  row.status = std::string(kDeliveryPending);
  row.next_attempt_at_ms = now_ms;
  row.deadline_at_ms = now_ms + ChannelLimitsOf(channel.config_json).deadline_ms;
  row.created_at_ms = now_ms;
  return row;
}

}  // namespace

OutboxRecord LateRow(const RuleRecord& rule, const ChannelRecord& channel, const RunRecord& run,
                     const std::string& task_name, int64_t now_ms) {
  RunOutcome outcome{run, ParseRunStatus(run.status).value_or(RunStatus::kQueued), task_name,
                     now_ms};
  json facts = RunFacts(outcome, "late");
  const bool running = run.status == RunStatusName(RunStatus::kRunning);
  facts["phase"] = running ? "running" : "queued";
  facts["threshold_ms"] = rule.threshold_ms.value_or(0);
  const int64_t since = running ? run.started_at_ms.value_or(now_ms)
                                : run.scheduled_for_ms.value_or(run.created_at_ms);
  facts["for_ms"] = now_ms - since;
  OutboxRecord row = PendingRow(rule, channel, run.id, facts, now_ms);
  row.task_id = run.task_id;
  row.run_id = run.id;
  return row;
}

OutboxRecord MissingRow(const RuleRecord& rule, const ChannelRecord& channel,
                        const std::string& task_id, const std::string& task_name,
                        std::optional<int64_t> last_success_ms, int64_t silent_since_ms,
                        int64_t now_ms) {
  json facts{{"event", "missing"},
             {"project_id", rule.project_id},
             {"task_id", task_id},
             {"task_name", task_name},
             {"threshold_ms", rule.threshold_ms.value_or(0)},
             {"for_ms", now_ms - silent_since_ms},
             {"occurred_at_ms", now_ms}};
  if (last_success_ms) facts["last_success_at_ms"] = *last_success_ms;
  OutboxRecord row =
      PendingRow(rule, channel, task_id + ":" + std::to_string(silent_since_ms), facts, now_ms);
  row.task_id = task_id;
  return row;
}

namespace {

// Takes one message of `channel`'s rate window at `now` (a window older than a minute starts
// again); false when the window is full.
bool TakeRateSlot(std::map<std::string, ChannelStateRecord>& windows, const ChannelRecord& channel,
                  int64_t now) {
  ChannelStateRecord& window = windows[channel.id];
  window.channel_id = channel.id;
  if (now - window.window_started_at_ms >= kChannelRateWindowMs) {
    window.window_started_at_ms = now;
    window.sent_in_window = 0;
  }
  if (window.sent_in_window >= ChannelLimitsOf(channel.config_json).rate_per_minute) return false;
  ++window.sent_in_window;
  return true;
}

// The rate windows that differ from what was stored.
std::vector<ChannelStateRecord> ChangedWindows(
    const std::map<std::string, ChannelStateRecord>& windows,
    const std::map<std::string, ChannelStateRecord>& stored) {
  std::vector<ChannelStateRecord> out;
  for (const auto& [id, window] : windows) {
    auto it = stored.find(id);
    if (it == stored.end() || !(it->second == window)) out.push_back(window);
  }
  return out;
}

}  // namespace

NotifyPlan PlanRunOutcome(const RunOutcome& outcome, const std::vector<RuleRecord>& rules,
                          const std::map<std::string, RuleStateRecord>& states,
                          const std::map<std::string, ChannelRecord>& channels,
                          const std::map<std::string, ChannelStateRecord>& channel_states) {
  NotifyPlan plan;
  const RunStatus s = outcome.status;
  if (!IsNotifiableRunStatus(s)) return plan;
  const bool failure = s == RunStatus::kFailed || s == RunStatus::kTimedOut;
  const bool success = s == RunStatus::kSucceeded;
  const int64_t now = outcome.now_ms;
  std::map<std::string, ChannelStateRecord> windows = channel_states;

  for (const RuleRecord& rule : rules) {
    const auto channel = channels.find(rule.channel_id);
    if (channel == channels.end() || channel->second.deleted_at_ms.has_value()) continue;
    const std::optional<NotifyEvent> event = ParseNotifyEvent(rule.event);
    if (!event.has_value()) continue;
    RuleStateRecord state;
    if (auto it = states.find(rule.id); it != states.end()) {
      state = it->second;
    } else {
      state.rule_id = rule.id;
      state.task_id = outcome.run.task_id;
    }
    const RuleStateRecord before = state;

    // Whether this outcome is what the rule is about, and whether it may send now.
    bool matches = false;
    bool send = false;
    int64_t failures = 0;
    switch (*event) {
      case NotifyEvent::kFailed:
      case NotifyEvent::kTimedOut:
        matches = *event == NotifyEvent::kFailed ? failure : s == RunStatus::kTimedOut;
        if (success) {
          state.failing = false;
          state.suppressed = 0;
        }
        if (matches) {
          send = rule.mode == "change" ? !state.failing
                                       : !state.last_sent_at_ms ||
                                             now - *state.last_sent_at_ms >= rule.min_interval_ms;
        }
        break;
      case NotifyEvent::kRecovered:
        if (failure) {
          state.failing = true;
          ++state.suppressed;  // failures since the last success
        } else if (success && state.failing) {
          matches = true;
          send = true;
          failures = state.suppressed;
        }
        break;
      case NotifyEvent::kSucceeded:
      case NotifyEvent::kSkipped:
      case NotifyEvent::kRecoveryRequired:
        matches = (*event == NotifyEvent::kSucceeded && success) ||
                  (*event == NotifyEvent::kSkipped && s == RunStatus::kSkipped) ||
                  (*event == NotifyEvent::kRecoveryRequired && s == RunStatus::kRecoveryRequired);
        send = matches &&
               (!state.last_sent_at_ms || now - *state.last_sent_at_ms >= rule.min_interval_ms);
        break;
      case NotifyEvent::kLate:
      case NotifyEvent::kMissing:
      case NotifyEvent::kApproval:
        break;  // not run outcomes: the sweeps and approvals write these
    }

    if (matches && send) {
      // The channel's rate window: a full window holds the message back like the interval does.
      send = TakeRateSlot(windows, channel->second, now);
      if (send) {
        json facts = RunFacts(outcome, rule.event);
        if (*event == NotifyEvent::kRecovered) {
          facts["failures"] = failures;
        } else {
          facts["suppressed"] = state.suppressed;
        }
        OutboxRecord row = PendingRow(rule, channel->second, outcome.run.id, facts, now);
        row.task_id = outcome.run.task_id;
        row.run_id = outcome.run.id;
        plan.outbox.push_back(std::move(row));
        state.last_sent_at_ms = now;
        state.suppressed = 0;
        if (*event == NotifyEvent::kRecovered) state.failing = false;
        if (*event == NotifyEvent::kFailed || *event == NotifyEvent::kTimedOut) {
          state.failing = true;
        }
      }
    }
    if (matches && !send) {
      if (*event == NotifyEvent::kRecovered) {
        // Held back by the channel's rate: the recovery is still owed, stay failing.
      } else {
        ++state.suppressed;
        if ((*event == NotifyEvent::kFailed || *event == NotifyEvent::kTimedOut) &&
            rule.mode == "change" && !state.failing) {
          // The change itself was held back by the channel's rate: the next failure tries again.
        } else if (*event == NotifyEvent::kFailed || *event == NotifyEvent::kTimedOut) {
          state.failing = true;
        }
      }
    }
    if (!(state == before) || !states.count(rule.id)) {
      state.updated_at_ms = now;
      plan.states.push_back(std::move(state));
    }
  }
  plan.channel_states = ChangedWindows(windows, channel_states);
  return plan;
}

NotifyPlan PlanApprovalOutcome(const ApprovalOutcome& outcome, const std::vector<RuleRecord>& rules,
                               const std::map<std::string, RuleStateRecord>& states,
                               const std::map<std::string, ChannelRecord>& channels,
                               const std::map<std::string, ChannelStateRecord>& channel_states) {
  NotifyPlan plan;
  const int64_t now = outcome.now_ms;
  const bool request = outcome.phase == "requested";
  std::map<std::string, ChannelStateRecord> windows = channel_states;
  for (const RuleRecord& rule : rules) {
    if (rule.event != NotifyEventName(NotifyEvent::kApproval)) continue;
    const auto channel = channels.find(rule.channel_id);
    if (channel == channels.end() || channel->second.deleted_at_ms.has_value()) continue;
    RuleStateRecord state;
    if (auto it = states.find(rule.id); it != states.end()) {
      state = it->second;
    } else {
      state.rule_id = rule.id;
      state.task_id = outcome.task_id;
    }
    // A request waits out the rule's interval; a decision always goes (it answers a request).
    bool send =
        !request || !state.last_sent_at_ms || now - *state.last_sent_at_ms >= rule.min_interval_ms;
    if (send) send = TakeRateSlot(windows, channel->second, now);
    if (send) {
      json facts{{"event", "approval"},
                 {"phase", outcome.phase},
                 {"approval_id", outcome.approval_id},
                 {"project_id", outcome.project_id},
                 {"task_id", outcome.task_id},
                 {"task_name", outcome.task_name},
                 {"requester", outcome.requester},
                 {"approver_role", outcome.approver_role},
                 {"expires_at_ms", outcome.expires_at_ms},
                 {"occurred_at_ms", now},
                 {"suppressed", state.suppressed}};
      if (outcome.decided_by) facts["decided_by"] = *outcome.decided_by;
      if (outcome.reason) facts["reason"] = TruncatedUtf8(*outcome.reason, 300);
      if (outcome.run_id) facts["run_id"] = *outcome.run_id;
      OutboxRecord row =
          PendingRow(rule, channel->second, outcome.approval_id + ":" + outcome.phase, facts, now);
      row.task_id = outcome.task_id;
      row.run_id = outcome.run_id;
      plan.outbox.push_back(std::move(row));
      if (request) state.last_sent_at_ms = now;
      state.suppressed = 0;
    } else {
      ++state.suppressed;
    }
    state.updated_at_ms = now;
    plan.states.push_back(std::move(state));
  }
  plan.channel_states = ChangedWindows(windows, channel_states);
  return plan;
}

int64_t DeliveryBackoffMs(int attempt, int64_t base_ms) {
  int64_t delay = std::max<int64_t>(base_ms, 1);
  for (int i = 1; i < attempt && delay < 3600 * 1000; ++i) delay *= 2;
  return std::min<int64_t>(delay, 3600 * 1000);
}

}  // namespace ql
