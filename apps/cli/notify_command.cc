#include "notify_command.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <memory>
#include <set>
#include <string_view>
#include <thread>
#include <utility>

#include "output.h"
#include "ql/core/clock.h"
#include "ql/core/notification.h"

namespace ql::cli {
namespace {

using nlohmann::json;

constexpr char kChannels[] = "/api/v1/notify/channels";
constexpr char kRules[] = "/api/v1/notify/rules";
constexpr char kDeliveries[] = "/api/v1/notify/deliveries";
// How many of the newest deliveries `channel test --wait` and a short id are looked for in.
constexpr int64_t kRecentDeliveries = 100;
// The length of a canonical UUID, and of the shortest prefix that stands for one (as for runs).
constexpr size_t kUuidChars = 36;
constexpr size_t kMinIdPrefixChars = 8;

std::string ChannelPath(const std::string& name) {
  return std::string(kChannels) + "/" + UrlEncode(name);
}
std::string DeliveryPath(const std::string& id) {
  return std::string(kDeliveries) + "/" + UrlEncode(id);
}

// "webhook, smtp, …" for messages.
std::string ChannelTypeNames() {
  std::string out;
  for (std::string_view type : kChannelTypes) out += (out.empty() ? "" : ", ") + std::string(type);
  return out;
}

json Items(const json& answer) {
  return answer.is_object() && answer.contains("items") && answer["items"].is_array()
             ? answer["items"]
             : json::array();
}

// Prints `value` as JSON (with --json) or `text`.
int Answer(CommandContext& context, const json& value, const std::string& text) {
  if (context.json()) {
    context.out() << JsonOutput(value) << "\n";
  } else {
    context.out() << text;
  }
  return kExitOk;
}

// True for the characters of an HTTP token (RFC 9110 tchar), what a header name is made of.
bool IsTokenChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

std::string Lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// Where a channel sends, in a few words: its url, the secret holding it, the SMTP host or the
// Telegram chat.
std::string Destination(const json& channel) {
  const json config = channel.value("config", json::object());
  if (!config.is_object()) return "-";
  for (const char* secret : {"url_secret", "device_key_secret"}) {
    if (!JsonText(config, secret, "").empty()) return "secret:" + JsonText(config, secret);
  }
  if (!JsonText(config, "url", "").empty()) return JsonText(config, "url");
  if (!JsonText(config, "host", "").empty()) {
    const std::string port = JsonText(config, "port", "");
    return JsonText(config, "host") + (port.empty() ? "" : ":" + port);
  }
  return JsonText(config, "chat_id");
}

// The task a rule or delivery is about: its name (with --wide also the id), else its id, else
// `none`.
std::string TaskText(const json& object, bool wide, const std::string& none) {
  const std::string name = JsonText(object, "task_name", "");
  const std::string id = JsonText(object, "task_id", "");
  if (id.empty() && name.empty()) return none;
  if (name.empty()) return id;
  return wide && !id.empty() ? name + " (" + id + ")" : name;
}

// The last failure of a delivery: "connection refused (HTTP 502)", or "" when none is known.
std::string LastFailure(const json& delivery) {
  const std::string error = JsonText(delivery, "last_error", "");
  const std::string code = JsonText(delivery, "last_status_code", "");
  if (code.empty()) return error;
  return error.empty() ? "HTTP " + code : error + " (HTTP " + code + ")";
}

// The time the last attempt of a delivery took ("85ms"), or "" when none is known.
std::string LatencyText(const json& delivery) {
  const json latency = delivery.is_object() ? delivery.value("last_latency_ms", json()) : json();
  return latency.is_number_integer() ? FormatElapsedMs(latency.get<int64_t>()) : "";
}

void Sleep(int64_t ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

CliResult<json> RecentDeliveries(ApiClient& api, bool failed) {
  std::vector<std::pair<std::string, std::string>> params;
  if (failed) params.emplace_back("failed", "true");
  params.emplace_back("limit", std::to_string(kRecentDeliveries));
  CliResult<json> listed = api.GetJson(WithQuery(kDeliveries, params));
  if (!listed.ok()) return listed.error();
  return Items(*listed);
}

// Polls the newest deliveries until `id` is delivered or dead, or the wait times out.
int WaitForDelivery(ApiClient& api, const std::string& id, const ChannelTestArgs& args,
                    CommandContext& context) {
  const Clock& clock = SystemClock();
  const int64_t deadline = clock.MonotonicMs() + args.wait_timeout_ms;
  json last;
  while (true) {
    CliResult<json> items = RecentDeliveries(api, /*failed=*/false);
    if (!items.ok()) return context.Fail(items.error());
    for (const json& delivery : *items) {
      if (JsonText(delivery, "id", "") == id) last = delivery;
    }
    const std::string status = JsonText(last, "status", "");
    if (status == "delivered") {
      std::string how = JsonText(last, "last_status_code", "");
      if (!how.empty()) how = "HTTP " + how;
      if (const std::string latency = LatencyText(last); !latency.empty()) {
        how += (how.empty() ? "" : ", ") + latency;
      }
      context.err() << "ql: delivery " << id << " delivered"
                    << (how.empty() ? "" : " (" + how + ")") << "\n";
      context.err().flush();
      return kExitOk;
    }
    if (status == "dead") {
      const std::string failure = LastFailure(last);
      return context.Fail(CliError::Failure(
          "delivery_dead", "delivery " + id + " gave up after " + JsonText(last, "attempts") +
                               " attempt(s)" + (failure.empty() ? "" : ": " + failure)));
    }
    if (clock.MonotonicMs() >= deadline) break;
    Sleep(std::min(args.poll_ms, std::max<int64_t>(deadline - clock.MonotonicMs(), 1)));
  }
  if (last.is_null()) {
    return context.Fail(CliError::Failure("delivery_not_found",
                                          "delivery " + id + " is not among the newest " +
                                              std::to_string(kRecentDeliveries) + " deliveries"));
  }
  const std::string failure = LastFailure(last);
  return context.Fail(CliError::Failure(
      "delivery_wait_timeout", "delivery " + id + " is still " + JsonText(last, "status") +
                                   " after " + FormatDurationMs(args.wait_timeout_ms) + " (" +
                                   JsonText(last, "attempts") + " attempt(s)" +
                                   (failure.empty() ? "" : ", last: " + failure) + ")"));
}

// Returns the delivery id `id` stands for: itself, or the one recent delivery it is a prefix of.
CliResult<std::string> ResolveDeliveryId(ApiClient& api, const std::string& id) {
  if (id.size() >= kUuidChars || id.size() < kMinIdPrefixChars) return id;
  for (const bool failed : {true, false}) {
    CliResult<json> items = RecentDeliveries(api, failed);
    if (!items.ok()) return items.error();
    std::set<std::string> matches;
    for (const json& delivery : *items) {
      const std::string candidate = JsonText(delivery, "id", "");
      if (candidate.starts_with(id)) matches.insert(candidate);
    }
    if (matches.size() == 1) return *matches.begin();
    if (matches.size() > 1) {
      return CliError::Usage("delivery_id_ambiguous",
                             "'" + id + "' starts " + std::to_string(matches.size()) +
                                 " delivery ids: give more of it (ql notify deliveries --wide)");
    }
  }
  return id;
}

// Adds option `name` setting `args->*member` when given.
template <typename Args, typename T>
CLI::Option* OptionalFlag(CLI::App* command, const std::shared_ptr<Args>& args,
                          std::optional<T> Args::*member, const std::string& name,
                          const std::string& help) {
  return command->add_option_function<T>(
      name, [args, member](const T& value) { (*args).*member = value; }, help);
}

// Adds a repeatable option `name` collecting one value per use.
CLI::Option* RepeatedFlag(CLI::App* command, std::vector<std::string>& target,
                          const std::string& name, const std::string& help) {
  return command->add_option(name, target, help)
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

// The config flags of `channel add`: each sets one key of the channel's config.
void AddChannelConfigFlags(CLI::App* add, const std::shared_ptr<ChannelAddArgs>& args) {
  using A = ChannelAddArgs;
  OptionalFlag(add, args, &A::url, "--url",
               "Where to send (url): the webhook or the bot's webhook URL, http or https")
      ->type_name("URL");
  OptionalFlag(add, args, &A::url_secret, "--url-secret",
               "A project secret holding the URL instead, when the URL carries a token "
               "(url_secret)")
      ->type_name("SECRET");
  OptionalFlag(add, args, &A::signing_secret, "--signing-secret",
               "webhook, feishu, dingtalk: a project secret to sign each request with "
               "(X-QL-Signature; the bot's signed-request secret for feishu and dingtalk)")
      ->type_name("SECRET");
  RepeatedFlag(add, args->headers, "--header",
               "webhook: send header NAME=VALUE with each request (repeatable; headers)")
      ->type_name("NAME=VALUE");
  OptionalFlag(add, args, &A::token_secret, "--token-secret",
               "telegram: a project secret holding the bot token (token_secret)")
      ->type_name("SECRET");
  OptionalFlag(add, args, &A::chat_id, "--chat-id", "telegram: the chat to post in (chat_id)")
      ->type_name("ID");
  OptionalFlag(add, args, &A::api_base, "--api-base",
               "telegram: the Bot API address (api_base; default https://api.telegram.org)")
      ->type_name("URL");
  OptionalFlag(add, args, &A::device_key_secret, "--device-key-secret",
               "bark: a project secret holding the device key (device_key_secret)")
      ->type_name("SECRET");
  OptionalFlag(add, args, &A::server, "--server",
               "bark: the Bark server (server; default https://api.day.app). QingLong's own "
               "--server goes before `notify` here")
      ->type_name("URL");
  OptionalFlag(add, args, &A::host, "--host", "smtp: the mail server's host name (host)");
  OptionalFlag(add, args, &A::port, "--port", "smtp: the mail server's port (port)");
  OptionalFlag(add, args, &A::security, "--security", "smtp: starttls, tls or none (security)")
      ->check(CLI::IsMember({"starttls", "tls", "none"}));
  OptionalFlag(add, args, &A::username, "--username", "smtp: the user to sign in as (username)");
  OptionalFlag(add, args, &A::password_secret, "--password-secret",
               "smtp: a project secret holding the password (password_secret)")
      ->type_name("SECRET");
  OptionalFlag(add, args, &A::from, "--from", "smtp: the sender address (from)")->type_name("ADDR");
  RepeatedFlag(add, args->to, "--to", "smtp: a recipient address (repeatable; to)")
      ->type_name("ADDR");
  OptionalFlag(add, args, &A::language, "--language",
               "The language of the messages: en (default) or zh-CN (language)")
      ->check(CLI::IsMember({"en", "zh-CN"}));
  OptionalFlag(add, args, &A::rate_per_minute, "--rate-per-minute",
               "At most N messages a minute; the rest are counted in the next one "
               "(rate_per_minute; default 10)");
  OptionalFlag(add, args, &A::max_attempts, "--max-attempts",
               "Attempts per message before it is dead (max_attempts; default 8)");
  OptionalFlag(add, args, &A::deadline, "--deadline",
               "Give a message up this long after it was queued: seconds or 30m, 2h, 1d "
               "(deadline_s; default 1d)")
      ->type_name("DURATION");
  OptionalFlag(add, args, &A::config, "--config",
               "The config as a JSON object; the flags above are set over it")
      ->type_name("JSON");
}

void AddChannelCommands(CLI::App* notify) {
  CLI::App* channel =
      notify->add_subcommand("channel", "Add, list, test and delete notification channels");
  channel->require_subcommand(1);
  channel->fallthrough();

  auto add_args = std::make_shared<ChannelAddArgs>();
  CLI::App* add = channel->add_subcommand(
      "add", "Add a channel: where messages go. Credentials are names of project secrets");
  add->fallthrough();
  add->add_option("name", add_args->name, "Channel name: letters, digits, _ . -")->required();
  add->add_option("--type", add_args->type, "One of " + ChannelTypeNames())
      ->required()
      ->type_name("TYPE");
  AddChannelConfigFlags(add, add_args);
  add->callback([add, add_args] {
    RunCommand(*add, [&](CommandContext& context) { return ChannelAdd(*add_args, context); });
  });

  CLI::App* list = channel->add_subcommand("list", "List channels and where they send");
  list->fallthrough();
  list->callback(
      [list] { RunCommand(*list, [](CommandContext& context) { return ChannelList(context); }); });

  auto test_args = std::make_shared<ChannelTestArgs>();
  CLI::App* test = channel->add_subcommand("test", "Send a test message through a channel");
  test->fallthrough();
  test->add_option("name", test_args->name, "Channel name")->required();
  test->add_flag("--wait", test_args->wait,
                 "Wait (at most 30s) until it is delivered (exit 0) or given up (exit 1 with "
                 "the last error)");
  test->callback([test, test_args] {
    RunCommand(*test, [&](CommandContext& context) { return ChannelTest(*test_args, context); });
  });

  auto rm_name = std::make_shared<std::string>();
  CLI::App* rm = channel->add_subcommand("rm", "Delete a channel");
  rm->fallthrough();
  rm->add_option("name", *rm_name, "Channel name")->required();
  rm->callback([rm, rm_name] {
    RunCommand(*rm, [&](CommandContext& context) { return ChannelRemove(*rm_name, context); });
  });
}

void AddRuleCommands(CLI::App* notify) {
  CLI::App* rule =
      notify->add_subcommand("rule", "Add, list and delete rules: which events go where");
  rule->require_subcommand(1);
  rule->fallthrough();

  auto add_args = std::make_shared<RuleAddArgs>();
  CLI::App* add = rule->add_subcommand("add",
                                       "Send an event of a task (or of every task) to a "
                                       "channel");
  add->fallthrough();
  add->add_option("--channel", add_args->channel, "Channel name")->required();
  add->add_option("--on", add_args->event, "The event: " + NotifyEventNames())
      ->required()
      ->type_name("EVENT");
  OptionalFlag(add, add_args, &RuleAddArgs::task, "--task",
               "Only this task, by name or id (default: every task of the project)")
      ->type_name("NAME");
  add->add_flag("--every", add_args->every,
                "failed, timed_out: notify on each one (at most once per --min-interval), not "
                "only when the task starts failing");
  OptionalFlag(add, add_args, &RuleAddArgs::min_interval, "--min-interval",
               "At most one message per task this often (approval: one request message): "
               "seconds or 90s, 10m, 2h, 1d (server default 1m)")
      ->type_name("DURATION");
  OptionalFlag(add, add_args, &RuleAddArgs::after, "--after",
               "late: still queued this long after it was due; missing: no success for this "
               "long (seconds or 90s, 10m, 2h, 1d)")
      ->type_name("DURATION");
  add->callback([add, add_args] {
    RunCommand(*add, [&](CommandContext& context) { return RuleAdd(*add_args, context); });
  });

  CLI::App* list = rule->add_subcommand("list", "List rules");
  list->fallthrough();
  list->callback(
      [list] { RunCommand(*list, [](CommandContext& context) { return RuleList(context); }); });

  auto rm_id = std::make_shared<std::string>();
  CLI::App* rm = rule->add_subcommand("rm", "Delete a rule");
  rm->fallthrough();
  rm->add_option("id", *rm_id, "Rule id")->required();
  rm->callback([rm, rm_id] {
    RunCommand(*rm, [&](CommandContext& context) { return RuleRemove(*rm_id, context); });
  });
}

void AddDeliveryCommands(CLI::App* notify) {
  auto list_args = std::make_shared<DeliveryListArgs>();
  CLI::App* list =
      notify->add_subcommand("deliveries", "List messages sent or to send, newest first");
  list->fallthrough();
  list->add_flag("--failed", list_args->failed, "Only messages that failed or were given up");
  list->add_option("--limit", list_args->limit, "Show at most N")->capture_default_str();
  list->callback([list, list_args] {
    RunCommand(*list, [&](CommandContext& context) { return DeliveryList(*list_args, context); });
  });

  auto id = std::make_shared<std::string>();
  CLI::App* redeliver =
      notify->add_subcommand("redeliver", "Send a message again (a dead one, say)");
  redeliver->fallthrough();
  redeliver->add_option("id", *id, "Delivery id, or a unique prefix of a recent one")->required();
  redeliver->callback([redeliver, id] {
    RunCommand(*redeliver, [&](CommandContext& context) { return Redeliver(*id, context); });
  });
}
}  // namespace

CliResult<json> ParseHeaderFlags(const std::vector<std::string>& pairs) {
  json out = json::object();
  std::set<std::string> seen;
  for (const std::string& pair : pairs) {
    const size_t eq = pair.find('=');
    const std::string name = eq == std::string::npos ? pair : pair.substr(0, eq);
    if (eq == std::string::npos || name.empty() ||
        !std::all_of(name.begin(), name.end(), IsTokenChar)) {
      return CliError::Usage("invalid_header",
                             "--header '" + PrintableCell(pair) +
                                 "' must be NAME=VALUE with a header name such as X-Team");
    }
    const std::string value = pair.substr(eq + 1);
    if (std::any_of(value.begin(), value.end(), [](char c) {
          return (static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f;
        })) {
      return CliError::Usage("invalid_header", "--header " + name +
                                                   " has a line break or control character in "
                                                   "its value");
    }
    if (!seen.insert(Lower(name)).second) {
      return CliError::Usage("invalid_header", "--header names '" + name + "' twice");
    }
    out[name] = value;
  }
  return out;
}

CliResult<json> BuildChannelBody(const ChannelAddArgs& args) {
  if (!IsChannelType(args.type)) {
    return CliError::Usage("invalid_type", "--type '" + PrintableCell(args.type) +
                                               "' is not a channel type (" + ChannelTypeNames() +
                                               ")");
  }
  if (args.server && args.type != "bark") {
    return CliError::Usage("flag_conflict",
                           "--server after `notify channel add` is the bark server (--type "
                           "bark); name the QingLong server before `notify`: ql --server URL "
                           "notify ...");
  }
  json config = json::object();
  if (args.config) {
    try {
      config = json::parse(*args.config);
    } catch (const json::exception&) {
      config = nullptr;
    }
    if (!config.is_object()) {
      return CliError::Usage("invalid_config",
                             "--config must be a JSON object, such as '{\"rate_per_minute\":5}'");
    }
  }
  const std::pair<const char*, const std::optional<std::string>*> strings[] = {
      {"url", &args.url},
      {"url_secret", &args.url_secret},
      {"signing_secret", &args.signing_secret},
      {"token_secret", &args.token_secret},
      {"chat_id", &args.chat_id},
      {"api_base", &args.api_base},
      {"device_key_secret", &args.device_key_secret},
      {"server", &args.server},
      {"host", &args.host},
      {"security", &args.security},
      {"username", &args.username},
      {"password_secret", &args.password_secret},
      {"from", &args.from},
      {"language", &args.language},
  };
  for (const auto& [key, value] : strings) {
    if (value->has_value()) config[key] = **value;
  }
  const std::pair<const char*, const std::optional<int64_t>*> numbers[] = {
      {"port", &args.port},
      {"rate_per_minute", &args.rate_per_minute},
      {"max_attempts", &args.max_attempts},
  };
  for (const auto& [key, value] : numbers) {
    if (value->has_value()) config[key] = **value;
  }
  if (args.deadline) {
    CliResult<int64_t> seconds = SecondsFlag("--deadline", *args.deadline);
    if (!seconds.ok()) return seconds.error();
    config["deadline_s"] = *seconds;
  }
  if (!args.to.empty()) config["to"] = args.to;
  if (!args.headers.empty()) {
    CliResult<json> headers = ParseHeaderFlags(args.headers);
    if (!headers.ok()) return headers.error();
    // --header adds to (or replaces one of) the headers --config gives.
    if (!config.contains("headers") || !config["headers"].is_object()) {
      config["headers"] = json::object();
    }
    json& merged = config["headers"];
    for (auto header = headers->begin(); header != headers->end(); ++header) {
      for (auto it = merged.begin(); it != merged.end();) {
        it = Lower(it.key()) == Lower(header.key()) ? merged.erase(it) : std::next(it);
      }
      merged[header.key()] = header.value();
    }
  }
  return json{{"name", args.name}, {"type", args.type}, {"config", std::move(config)}};
}

CliResult<json> BuildRuleBody(const RuleAddArgs& args) {
  if (!ParseNotifyEvent(args.event)) {
    return CliError::Usage("invalid_event", "--on '" + PrintableCell(args.event) +
                                                "' is not an event (" + NotifyEventNames() + ")");
  }
  json body = {{"channel", args.channel}, {"event", args.event}};
  if (args.task) body["task"] = *args.task;
  if (args.every) body["mode"] = "every";
  if (args.min_interval) {
    CliResult<int64_t> seconds = SecondsFlag("--min-interval", *args.min_interval);
    if (!seconds.ok()) return seconds.error();
    body["min_interval_s"] = *seconds;
  }
  if (args.after) {
    CliResult<int64_t> seconds = SecondsFlag("--after", *args.after);
    if (!seconds.ok()) return seconds.error();
    body["after_s"] = *seconds;
  }
  return body;
}

int ChannelAdd(const ChannelAddArgs& args, CommandContext& context) {
  CliResult<json> body = BuildChannelBody(args);
  if (!body.ok()) return context.Fail(body.error());
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  CliResult<json> created = (*api)->PostJson(kChannels, *body);
  if (!created.ok()) return context.Fail(created.error());
  return Answer(context, *created,
                "added channel " + JsonText(*created, "name") + " (type " +
                    JsonText(*created, "type") + ", id " + JsonText(*created, "id") + ")\n");
}

int ChannelList(CommandContext& context) {
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  CliResult<json> listed = (*api)->GetJson(kChannels);
  if (!listed.ok()) return context.Fail(listed.error());
  if (context.json()) return Answer(context, *listed, "");
  std::vector<std::string> headers = {"NAME", "TYPE", "DESTINATION", "CREATED"};
  if (context.wide()) headers.insert(headers.begin(), "ID");
  Table table(std::move(headers));
  for (const json& channel : Items(*listed)) {
    std::vector<std::string> row = {JsonText(channel, "name"), JsonText(channel, "type"),
                                    Destination(channel), JsonText(channel, "created_at")};
    if (context.wide()) row.insert(row.begin(), JsonText(channel, "id"));
    table.AddRow(std::move(row));
  }
  table.Print(context.out());
  return kExitOk;
}

int ChannelTest(const ChannelTestArgs& args, CommandContext& context) {
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  CliResult<json> delivery = (*api)->PostJson(ChannelPath(args.name) + "/test", json::object());
  if (!delivery.ok()) return context.Fail(delivery.error());
  const std::string id = JsonText(*delivery, "id", "");
  Answer(context, *delivery,
         "delivery " + id + " queued: a test message to channel " + args.name + "\n");
  context.out().flush();
  if (!args.wait) return kExitOk;
  return WaitForDelivery(**api, id, args, context);
}

int ChannelRemove(const std::string& name, CommandContext& context) {
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  CliResult<json> deleted = (*api)->DeleteJson(ChannelPath(name));
  if (!deleted.ok()) return context.Fail(deleted.error());
  return Answer(context, *deleted, "channel " + JsonText(*deleted, "name") + " deleted\n");
}

int RuleAdd(const RuleAddArgs& args, CommandContext& context) {
  CliResult<json> body = BuildRuleBody(args);
  if (!body.ok()) return context.Fail(body.error());
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  CliResult<json> rule = (*api)->PostJson(kRules, *body);
  if (!rule.ok()) return context.Fail(rule.error());
  return Answer(context, *rule,
                "added rule " + JsonText(*rule, "id") + ": " + JsonText(*rule, "event") + " of " +
                    TaskText(*rule, /*wide=*/false, "every task") + " to channel " +
                    JsonText(*rule, "channel") + " (mode " + JsonText(*rule, "mode") + ")\n");
}

int RuleList(CommandContext& context) {
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  CliResult<json> listed = (*api)->GetJson(kRules);
  if (!listed.ok()) return context.Fail(listed.error());
  if (context.json()) return Answer(context, *listed, "");
  Table table({"ID", "EVENT", "TASK", "CHANNEL", "MODE"});
  for (const json& rule : Items(*listed)) {
    table.AddRow({JsonText(rule, "id"), JsonText(rule, "event"),
                  TaskText(rule, context.wide(), "(every task)"), JsonText(rule, "channel"),
                  JsonText(rule, "mode")});
  }
  table.Print(context.out());
  return kExitOk;
}

int RuleRemove(const std::string& id, CommandContext& context) {
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  CliResult<json> deleted = (*api)->DeleteJson(std::string(kRules) + "/" + UrlEncode(id));
  if (!deleted.ok()) return context.Fail(deleted.error());
  return Answer(context, *deleted, "rule " + JsonText(*deleted, "id") + " deleted\n");
}

int DeliveryList(const DeliveryListArgs& args, CommandContext& context) {
  if (args.limit < 1) {
    return context.Fail(CliError::Usage("invalid_limit", "--limit must be at least 1"));
  }
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  std::vector<std::pair<std::string, std::string>> params;
  if (args.failed) params.emplace_back("failed", "true");
  params.emplace_back("limit", std::to_string(args.limit));
  CliResult<json> listed = (*api)->GetJson(WithQuery(kDeliveries, params));
  if (!listed.ok()) return context.Fail(listed.error());
  if (context.json()) return Answer(context, *listed, "");
  const json items = Items(*listed);
  std::vector<std::string> ids;
  for (const json& delivery : items) ids.push_back(JsonText(delivery, "id"));
  const std::vector<std::string> shown = context.wide() ? ids : ShortIds(ids);
  Table table({"ID", "CHANNEL", "EVENT", "TASK", "STATUS", "ATTEMPTS", "CODE", "LATENCY", "ERROR",
               "CREATED"});
  for (size_t i = 0; i < items.size(); ++i) {
    const json& delivery = items[i];
    const std::string latency = LatencyText(delivery);
    const std::string error = JsonText(delivery, "last_error", "-");
    table.AddRow({shown[i], JsonText(delivery, "channel"), JsonText(delivery, "event"),
                  TaskText(delivery, context.wide(), "-"), JsonText(delivery, "status"),
                  JsonText(delivery, "attempts"), JsonText(delivery, "last_status_code"),
                  latency.empty() ? "-" : latency, context.wide() ? error : Ellipsize(error, 60),
                  JsonText(delivery, "created_at")});
  }
  table.Print(context.out());
  return kExitOk;
}

int Redeliver(const std::string& id, CommandContext& context) {
  CliResult<ApiClient*> api = context.Api();
  if (!api.ok()) return context.Fail(api.error());
  CliResult<std::string> resolved = ResolveDeliveryId(**api, id);
  if (!resolved.ok()) return context.Fail(resolved.error());
  CliResult<json> delivery =
      (*api)->PostJson(DeliveryPath(*resolved) + "/redeliver", json::object());
  if (!delivery.ok()) return context.Fail(delivery.error());
  return Answer(context, *delivery,
                "delivery " + JsonText(*delivery, "id") + " queued again (" +
                    JsonText(*delivery, "status") + ")\n");
}

void RegisterNotifyCommands(CLI::App& app) {
  AddGlobalOptions(app);
  CLI::App* notify = app.add_subcommand(
      "notify", "Notifications: channels, rules of which events go where, deliveries");
  notify->require_subcommand(1);
  notify->fallthrough();
  AddChannelCommands(notify);
  AddRuleCommands(notify);
  AddDeliveryCommands(notify);
}

}  // namespace ql::cli
