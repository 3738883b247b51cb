#pragma once

// Notifications (DESIGN §14): channels, rules, the rules' state and the transactional outbox.
//
// A *channel* is where messages go (a webhook, an SMTP mailbox, a chat bot); its settings are a
// JSON object checked here, and every credential in it is the name of a project secret, never a
// value. A *rule* says which event of which task (or of every task of the project) goes to which
// channel. When a run changes state, the store that commits the change also runs PlanRunOutcome
// over the matching rules in the same transaction and writes what it decided: the rules' new
// state and at most one outbox row per rule. A delivery loop later sends each outbox row, with
// its id as the idempotency key of every attempt.
//
// Nothing floods by default: a `failed` or `timed_out` rule notifies when a task starts failing
// (a change of state), not on every failure; `recovered` notifies once on the first success
// after failures, saying how many failures it covers; every other event is sent at most once per
// rule, task and interval (min_interval_ms), and a channel sends at most rate_per_minute messages
// a minute. What was held back is counted and said in the next message ("N more suppressed").

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ql/core/records.h"
#include "ql/core/states.h"
#include "ql/core/status.h"

namespace ql {

// The events a rule can name.
enum class NotifyEvent {
  kFailed,            // a run failed after its last attempt, or timed out
  kTimedOut,          // a run timed out
  kRecovered,         // the first success after failures
  kSucceeded,         // every success (opt-in), at most once per interval
  kSkipped,           // an occurrence skipped by overlap or misfire
  kRecoveryRequired,  // a run an operator must resolve
  kLate,              // a run still queued threshold_ms after it was due
  kMissing,           // no success of the task within threshold_ms (dead-man's switch)
  kApproval,          // an approval was requested or decided
};

std::string_view NotifyEventName(NotifyEvent event);
std::optional<NotifyEvent> ParseNotifyEvent(std::string_view name);
// "failed, timed_out, …" for messages.
std::string NotifyEventNames();

// Channel types.
inline constexpr std::string_view kChannelTypes[] = {
    "webhook", "smtp", "feishu", "dingtalk", "wecom", "telegram", "slack", "discord", "bark"};
bool IsChannelType(std::string_view type);

// Outbox row statuses.
inline constexpr std::string_view kDeliveryPending = "pending";
inline constexpr std::string_view kDeliveryDelivering = "delivering";
inline constexpr std::string_view kDeliveryDelivered = "delivered";
inline constexpr std::string_view kDeliveryDead = "dead";

// Bounds and defaults.
inline constexpr size_t kMaxChannelNameChars = 64;
inline constexpr size_t kMaxChannelConfigBytes = 8 * 1024;
inline constexpr int kDefaultRatePerMinute = 10;
inline constexpr int kMaxRatePerMinute = 600;
inline constexpr int kDefaultMaxAttempts = 8;
inline constexpr int kMaxMaxAttempts = 20;
inline constexpr int64_t kDefaultDeliveryDeadlineMs = 24LL * 3600 * 1000;
inline constexpr int64_t kDefaultMinIntervalMs = 60 * 1000;
inline constexpr int64_t kMaxMinIntervalMs = 7LL * 24 * 3600 * 1000;
inline constexpr size_t kMaxDeliveryErrorChars = 300;
// The length of the window the channel rate counts in.
inline constexpr int64_t kChannelRateWindowMs = 60 * 1000;

struct ChannelRecord {
  std::string id;  // canonical UUID
  std::string project_id;
  std::string name;
  std::string type;         // one of kChannelTypes
  std::string config_json;  // canonical; secrets by name only
  std::string created_by;   // principal id; empty for the system
  int64_t created_at_ms = 0;
  std::optional<int64_t> deleted_at_ms;
  bool operator==(const ChannelRecord&) const = default;
};

// The settings every channel type shares, read from its config.
struct ChannelLimits {
  int rate_per_minute = kDefaultRatePerMinute;
  int max_attempts = kDefaultMaxAttempts;
  int64_t deadline_ms = kDefaultDeliveryDeadlineMs;
  std::string language = "en";  // en | zh-CN
};

struct RuleRecord {
  std::string id;  // canonical UUID
  std::string project_id;
  std::string channel_id;
  std::string event;                   // NotifyEvent name
  std::optional<std::string> task_id;  // none: every task of the project
  // `change` (failed, timed_out: on the change to failing) or `every` (each one, at most once per
  // min_interval_ms); the other events are always `every`, recovered always `change`.
  std::string mode;
  int64_t min_interval_ms = 0;
  std::optional<int64_t> threshold_ms;  // late, missing
  std::string created_by;
  int64_t created_at_ms = 0;
  bool operator==(const RuleRecord&) const = default;
};

// What a rule remembers about one task.
struct RuleStateRecord {
  std::string rule_id;
  std::string task_id;
  bool failing = false;
  int64_t suppressed = 0;  // held back since the last message (failures, for recovered)
  std::optional<int64_t> last_sent_at_ms;
  int64_t updated_at_ms = 0;
  bool operator==(const RuleStateRecord&) const = default;
};

// A channel's count of messages in its current rate window.
struct ChannelStateRecord {
  std::string channel_id;
  int64_t window_started_at_ms = 0;
  int64_t sent_in_window = 0;
  bool operator==(const ChannelStateRecord&) const = default;
};

struct OutboxRecord {
  std::string id;  // canonical UUID; the idempotency key of every attempt
  std::string project_id;
  std::string channel_id;
  std::optional<std::string> rule_id;  // none for a test message
  std::string event;                   // a NotifyEvent name, or "test"
  std::optional<std::string> task_id;
  std::optional<std::string> run_id;
  std::string payload_json;  // the facts the message is rendered from
  std::string status;        // pending | delivering | delivered | dead
  int attempts = 0;
  int64_t next_attempt_at_ms = 0;
  int64_t deadline_at_ms = 0;
  std::optional<std::string> lease_owner;
  std::optional<int64_t> lease_until_ms;
  std::optional<int> last_status_code;
  std::optional<std::string> last_error;
  std::optional<int64_t> last_latency_ms;
  int64_t created_at_ms = 0;
  std::optional<int64_t> delivered_at_ms;
  bool operator==(const OutboxRecord&) const = default;
};

// Returns ok when `name` is 1..64 of [A-Za-z0-9_.-], starting with a letter or digit; otherwise
// InvalidArgument `channel_name_invalid`.
Status ValidateChannelName(std::string_view name);

// Checks the settings of a channel of `type` and returns them in canonical form. Shared keys:
// language (en | zh-CN), rate_per_minute (1..600), max_attempts (1..20), deadline_s (60..604800).
// Per type:
//   webhook                      url | url_secret (one), signing_secret, headers {name: value}
//   feishu dingtalk wecom slack discord   url | url_secret (one); feishu and dingtalk also
//                                signing_secret (the bot's signed-request secret)
//   telegram                     token_secret, chat_id, api_base (default https://api.telegram.org)
//   bark                         device_key_secret, server (default https://api.day.app)
//   smtp                         host, port, security (starttls | tls | none), username,
//                                password_secret, from, to [addresses]
// A *_secret value is a secret name of the project. A url is http or https with a host.
// Errors: InvalidArgument `channel_type_invalid`, `channel_config_invalid` (naming the key).
Result<std::string> CanonicalChannelConfig(std::string_view type, std::string_view config_json);

// Returns the shared settings of a stored channel config (defaults where unset).
ChannelLimits ChannelLimitsOf(std::string_view config_json);

// Returns the secret names a channel config refers to (the values of its *_secret keys).
std::vector<std::string> ChannelSecretNames(std::string_view config_json);

// Checks a rule before it is stored: a known event (`notify_event_invalid`), mode
// (`notify_mode_invalid`: change only for failed and timed_out), min_interval_ms 0..7 days, a
// threshold for late and missing and none otherwise (`notify_threshold_invalid`), a task for
// missing (`notify_task_required`: a dead-man's switch watches one task).
Status ValidateRule(const RuleRecord& rule);

// The id of the outbox row `rule_id` writes for `event` of `subject` (a run id, or a window for
// the sweeps): a UUID derived from the three, so a replayed decision finds its row.
std::string OutboxId(std::string_view rule_id, std::string_view event, std::string_view subject);

// The outcome of a run's state change, as rules see it.
struct RunOutcome {
  RunRecord run;  // after the change
  RunStatus status = RunStatus::kSucceeded;
  std::string task_name;
  int64_t now_ms = 0;
};

// The rule states, channel states and outbox rows a run outcome leads to.
struct NotifyPlan {
  std::vector<RuleStateRecord> states;  // to save (insert or update)
  std::vector<ChannelStateRecord> channel_states;
  std::vector<OutboxRecord> outbox;
};

// Returns true when runs entering `status` can concern a rule (failed, timed_out, succeeded,
// skipped, recovery_required).
bool IsNotifiableRunStatus(RunStatus status);

// The row a `late` rule writes for `run` (queued or running too long) and the row a `missing`
// rule writes for task `task_id` silent since `silent_since_ms` (its last success, or the rule's
// creation), both pending at `now_ms` on channel `channel`.
OutboxRecord LateRow(const RuleRecord& rule, const ChannelRecord& channel, const RunRecord& run,
                     const std::string& task_name, int64_t now_ms);
OutboxRecord MissingRow(const RuleRecord& rule, const ChannelRecord& channel,
                        const std::string& task_id, const std::string& task_name,
                        std::optional<int64_t> last_success_ms, int64_t silent_since_ms,
                        int64_t now_ms);

// Decides what `outcome` does to `rules` (the project's rules naming the run's task or every
// task; in id order) given their stored `states` (by rule id, for this task), the channels'
// `channels` (by id; a rule of a deleted or unknown channel is ignored) and `channel_states`.
NotifyPlan PlanRunOutcome(const RunOutcome& outcome, const std::vector<RuleRecord>& rules,
                          const std::map<std::string, RuleStateRecord>& states,
                          const std::map<std::string, ChannelRecord>& channels,
                          const std::map<std::string, ChannelStateRecord>& channel_states);

// A change of an approval request, as rules see it: asked for (`requested`), or decided
// (`approved`, `rejected`, `expired`).
struct ApprovalOutcome {
  std::string approval_id;
  std::string project_id;
  std::string task_id;
  std::string task_name;
  std::string phase;                      // requested | approved | rejected | expired
  std::string requester;                  // the requester's name
  std::string approver_role;              // admin | owner
  std::optional<std::string> decided_by;  // the decider's name (approved, rejected)
  std::optional<std::string> reason;      // a rejection's reason
  std::optional<std::string> run_id;      // the run an approval created
  int64_t expires_at_ms = 0;
  int64_t now_ms = 0;
};

// Decides what an approval change does to `rules` (as PlanRunOutcome; only `approval` rules
// concern it). Every request and every decision is a message of its own, held back only by the
// channel's rate window — and a request also by the rule's min_interval_ms per task, so a task
// asked for again and again cannot flood the channel. What was held back is counted and said
// in the next message.
NotifyPlan PlanApprovalOutcome(const ApprovalOutcome& outcome, const std::vector<RuleRecord>& rules,
                               const std::map<std::string, RuleStateRecord>& states,
                               const std::map<std::string, ChannelRecord>& channels,
                               const std::map<std::string, ChannelStateRecord>& channel_states);

// The delay before attempt `attempt` + 1 after `attempt` failed: `base_ms` doubling per
// attempt, at most an hour.
int64_t DeliveryBackoffMs(int attempt, int64_t base_ms);

}  // namespace ql
