#pragma once

// `ql notify`: notification channels, rules and deliveries of a project over the HTTP API
// (/api/v1/notify, DESIGN §14).
//
//   ql notify channel add NAME --type TYPE [--url URL | --url-secret SECRET] [--header N=V]...
//                         [--signing-secret SECRET] [--token-secret SECRET --chat-id ID]
//                         [--api-base URL] [--device-key-secret SECRET] [--server URL]
//                         [--host H --port N --security S --username U --password-secret SECRET
//                          --from ADDR --to ADDR...] [--language en|zh-CN]
//                         [--rate-per-minute N] [--max-attempts N] [--deadline D] [--config JSON]
//   ql notify channel list | test NAME [--wait] | rm NAME
//   ql notify rule add --channel NAME --on EVENT [--task NAME] [--every] [--min-interval D]
//                      [--after D]
//   ql notify rule list | rm ID
//   ql notify deliveries [--failed] [--limit N]
//   ql notify redeliver ID
//
// Credentials are never values on the command line: every *-secret flag names a project secret
// (`ql secret set`). The client checks what it can judge alone (the channel type, the event,
// durations, --header and --config shapes) and exits 2 before any request; the server checks
// the rest (required keys per type, ranges) and answers with its stable codes.

#include <CLI/CLI.hpp>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "client.h"

namespace ql::cli {

// The flags of `notify channel add`; a flag left out sets no key of the config.
struct ChannelAddArgs {
  std::string name;
  std::string type;                              // --type
  std::optional<std::string> url;                // --url
  std::optional<std::string> url_secret;         // --url-secret
  std::optional<std::string> signing_secret;     // --signing-secret
  std::vector<std::string> headers;              // --header NAME=VALUE...
  std::optional<std::string> token_secret;       // --token-secret
  std::optional<std::string> chat_id;            // --chat-id
  std::optional<std::string> api_base;           // --api-base
  std::optional<std::string> device_key_secret;  // --device-key-secret
  std::optional<std::string> server;             // --server (bark's server, not QingLong's)
  std::optional<std::string> host;               // --host
  std::optional<int64_t> port;                   // --port
  std::optional<std::string> security;           // --security starttls|tls|none
  std::optional<std::string> username;           // --username
  std::optional<std::string> password_secret;    // --password-secret
  std::optional<std::string> from;               // --from
  std::vector<std::string> to;                   // --to ADDR...
  std::optional<std::string> language;           // --language en|zh-CN
  std::optional<int64_t> rate_per_minute;        // --rate-per-minute
  std::optional<int64_t> max_attempts;           // --max-attempts
  std::optional<std::string> deadline;           // --deadline DURATION (whole seconds)
  std::optional<std::string> config;             // --config JSON: an object under the flags
};

struct ChannelTestArgs {
  std::string name;
  bool wait = false;  // --wait: until the test message is delivered or dead
  int64_t poll_ms = 500;
  int64_t wait_timeout_ms = 30'000;
};

struct RuleAddArgs {
  std::string channel;                      // --channel
  std::string event;                        // --on
  std::optional<std::string> task;          // --task NAME or id (none: every task)
  bool every = false;                       // --every: mode every
  std::optional<std::string> min_interval;  // --min-interval DURATION
  std::optional<std::string> after;         // --after DURATION (late, missing)
};

struct DeliveryListArgs {
  bool failed = false;  // --failed
  int64_t limit = 50;   // --limit
};

// Returns the `headers` object of repeated --header NAME=VALUE flags. Usage error
// invalid_header for a pair without '=', a name that is not an HTTP token, a value with a line
// break or other control character, or a name given twice (ignoring case).
CliResult<nlohmann::json> ParseHeaderFlags(const std::vector<std::string>& pairs);

// Returns the POST /api/v1/notify/channels body of `args`: {"name", "type", "config"}, the
// config being --config with each flag given set over it (--header adds to its headers).
// Usage errors: invalid_type (not one of ql::kChannelTypes), invalid_config (--config not a
// JSON object), invalid_header, invalid_duration (--deadline), flag_conflict (--server for a
// type other than bark: QingLong's --server goes before `notify`).
CliResult<nlohmann::json> BuildChannelBody(const ChannelAddArgs& args);

// Returns the POST /api/v1/notify/rules body of `args`, with only the optional keys given.
// Usage errors: invalid_event (not a NotifyEvent name), invalid_duration (--min-interval,
// --after).
CliResult<nlohmann::json> BuildRuleBody(const RuleAddArgs& args);

// POST /api/v1/notify/channels; prints "added channel NAME (type TYPE, id ID)" (--json: the
// channel).
int ChannelAdd(const ChannelAddArgs& args, CommandContext& context);
// GET /api/v1/notify/channels; prints NAME TYPE DESTINATION CREATED (--json: the answer).
int ChannelList(CommandContext& context);
// POST /api/v1/notify/channels/{name}/test; prints the queued delivery's id (--json: the
// delivery). With --wait, polls the newest deliveries until it is delivered (exit 0) or dead,
// or wait_timeout_ms passes (exit 1 with its last error: delivery_failed, delivery_wait_timeout;
// delivery_not_found when it is no longer listed).
int ChannelTest(const ChannelTestArgs& args, CommandContext& context);
// DELETE /api/v1/notify/channels/{name}; prints "channel NAME deleted" (--json: the channel).
int ChannelRemove(const std::string& name, CommandContext& context);
// POST /api/v1/notify/rules; prints the rule's id and what it sends where (--json: the rule).
int RuleAdd(const RuleAddArgs& args, CommandContext& context);
// GET /api/v1/notify/rules; prints ID EVENT TASK CHANNEL MODE (--json: the answer).
int RuleList(CommandContext& context);
// DELETE /api/v1/notify/rules/{id}; prints "rule ID deleted" (--json: the rule).
int RuleRemove(const std::string& id, CommandContext& context);
// GET /api/v1/notify/deliveries[?failed=true]&limit=N; prints a table with ids cut to unique
// prefixes unless --wide (--json: the answer). --limit below 1 is invalid_limit (exit 2).
int DeliveryList(const DeliveryListArgs& args, CommandContext& context);
// POST /api/v1/notify/deliveries/{id}/redeliver. An id of 8 characters or more but shorter than
// a UUID is first matched against the newest 100 failed deliveries, then the newest 100 of all:
// a unique prefix stands for its delivery, one shared by several is delivery_id_ambiguous
// (exit 2), an unmatched one is sent as given. Prints "delivery ID queued again (STATUS)"
// (--json: the delivery).
int Redeliver(const std::string& id, CommandContext& context);

// Registers the `notify` command group on `app` (and the global options on its root).
void RegisterNotifyCommands(CLI::App& app);

}  // namespace ql::cli
