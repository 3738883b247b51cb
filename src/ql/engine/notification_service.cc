#include "ql/engine/notification_service.h"

#include <nlohmann/json.hpp>
#include <utility>

#include "ql/core/canonical_json.h"
#include "ql/core/ids.h"

namespace ql {
namespace {

std::optional<PolicyFence> FenceOf(const Caller& caller, Action action) {
  if (caller.principal_id.empty()) return std::nullopt;
  return PolicyFence{caller.principal_id, RequiredRole(action)};
}

Actor ActorOf(const Caller& caller) { return Actor{caller.principal_id, caller.request_id}; }

}  // namespace

NotificationService::NotificationService(Store& store, GovernanceService& governance,
                                         ControlService& control, Clock& clock,
                                         RandomSource& random)
    : store_(store), governance_(governance), control_(control), clock_(clock), random_(random) {}

std::string NotificationService::NewId() {
  std::lock_guard<std::mutex> lock(random_mu_);
  return NewUuidV7(clock_.NowMs(), random_);
}

Result<std::string> NotificationService::ProjectFor(const Caller& caller, Action action,
                                                    const std::string& target) {
  return governance_.AuthorizedProjectId(caller, action, target);
}

Result<ChannelRecord> NotificationService::AddChannel(const Caller& caller, const std::string& name,
                                                      const std::string& type,
                                                      const std::string& config_json) {
  QL_RETURN_IF_ERROR(ValidateChannelName(name));
  QL_ASSIGN_OR_RETURN(std::string config, CanonicalChannelConfig(type, config_json));
  QL_ASSIGN_OR_RETURN(std::string project_id,
                      ProjectFor(caller, Action::kPublish, "notification channel " + name));
  CreateChannelCommand cmd;
  cmd.actor = ActorOf(caller);
  cmd.fence = FenceOf(caller, Action::kPublish);
  cmd.channel =
      ChannelRecord{NewId(), project_id, name, type, config, "", clock_.NowMs(), std::nullopt};
  return store_.notifications().CreateChannel(cmd);
}

Result<std::vector<ChannelRecord>> NotificationService::ListChannels(const Caller& caller) {
  QL_ASSIGN_OR_RETURN(std::string project_id,
                      ProjectFor(caller, Action::kRead, "notification channels"));
  return store_.notifications().ListChannels(project_id);
}

Result<ChannelRecord> NotificationService::RemoveChannel(const Caller& caller,
                                                         const std::string& name) {
  QL_RETURN_IF_ERROR(ValidateChannelName(name));
  QL_ASSIGN_OR_RETURN(std::string project_id,
                      ProjectFor(caller, Action::kPublish, "notification channel " + name));
  QL_ASSIGN_OR_RETURN(ChannelRecord channel,
                      store_.notifications().GetChannelByName(project_id, name));
  return store_.notifications().DeleteChannel(DeleteNotifyCommand{
      ActorOf(caller), FenceOf(caller, Action::kPublish), project_id, channel.id, clock_.NowMs()});
}

Result<OutboxRecord> NotificationService::TestChannel(const Caller& caller,
                                                      const std::string& name) {
  QL_RETURN_IF_ERROR(ValidateChannelName(name));
  QL_ASSIGN_OR_RETURN(std::string project_id,
                      ProjectFor(caller, Action::kOperateRuns, "notification channel " + name));
  QL_ASSIGN_OR_RETURN(ChannelRecord channel,
                      store_.notifications().GetChannelByName(project_id, name));
  const int64_t now = clock_.NowMs();
  OutboxRecord row;
  row.id = NewId();
  row.project_id = project_id;
  row.channel_id = channel.id;
  row.event = "test";
  QL_ASSIGN_OR_RETURN(row.payload_json,
                      CanonicalJson(nlohmann::json{{"event", "test"},
                                                   {"channel", channel.name},
                                                   {"requested_by", caller.principal_id},
                                                   {"occurred_at_ms", now}}));
  row.status = std::string(kDeliveryPending);
  row.next_attempt_at_ms = now;
  row.deadline_at_ms = now + ChannelLimitsOf(channel.config_json).deadline_ms;
  row.created_at_ms = now;
  return store_.notifications().EnqueueDelivery(row);
}

Result<RuleRecord> NotificationService::AddRule(const Caller& caller,
                                                const NewRuleRequest& request) {
  QL_RETURN_IF_ERROR(ValidateChannelName(request.channel));
  const std::optional<NotifyEvent> event = ParseNotifyEvent(request.event);
  if (!event) {
    return InvalidArgument("notify_event_invalid", "event " + QuoteForMessage(request.event) +
                                                       " is not one of " + NotifyEventNames());
  }
  QL_ASSIGN_OR_RETURN(std::string project_id,
                      ProjectFor(caller, Action::kPublish, "notification rule"));
  QL_ASSIGN_OR_RETURN(ChannelRecord channel,
                      store_.notifications().GetChannelByName(project_id, request.channel));
  RuleRecord rule;
  rule.id = NewId();
  rule.project_id = project_id;
  rule.channel_id = channel.id;
  rule.event = request.event;
  const bool change = *event == NotifyEvent::kFailed || *event == NotifyEvent::kTimedOut ||
                      *event == NotifyEvent::kRecovered;
  rule.mode = request.mode.value_or(change ? "change" : "every");
  rule.min_interval_ms =
      request.min_interval_ms.value_or(rule.mode == "every" ? kDefaultMinIntervalMs : 0);
  rule.threshold_ms = request.threshold_ms;
  rule.created_at_ms = clock_.NowMs();
  if (request.task) {
    QL_ASSIGN_OR_RETURN(std::string task_id, control_.ResolveTaskRef(*request.task, caller));
    rule.task_id = task_id;
  }
  CreateRuleCommand cmd{ActorOf(caller), FenceOf(caller, Action::kPublish), rule};
  return store_.notifications().CreateRule(cmd);
}

Result<std::vector<RuleRecord>> NotificationService::ListRules(const Caller& caller) {
  QL_ASSIGN_OR_RETURN(std::string project_id,
                      ProjectFor(caller, Action::kRead, "notification rules"));
  return store_.notifications().ListRules(project_id);
}

Result<RuleRecord> NotificationService::RemoveRule(const Caller& caller, const std::string& id) {
  QL_RETURN_IF_ERROR(ValidateId("rule id", id));
  QL_ASSIGN_OR_RETURN(std::string project_id,
                      ProjectFor(caller, Action::kPublish, "notification rule " + id));
  return store_.notifications().DeleteRule(DeleteNotifyCommand{
      ActorOf(caller), FenceOf(caller, Action::kPublish), project_id, id, clock_.NowMs()});
}

Result<std::vector<OutboxRecord>> NotificationService::ListDeliveries(const Caller& caller,
                                                                      bool failed_only, int limit) {
  QL_ASSIGN_OR_RETURN(std::string project_id,
                      ProjectFor(caller, Action::kRead, "notification deliveries"));
  return store_.notifications().ListDeliveries(DeliveryFilter{project_id, failed_only, limit});
}

Result<OutboxRecord> NotificationService::Redeliver(const Caller& caller, const std::string& id) {
  QL_RETURN_IF_ERROR(ValidateId("delivery id", id));
  QL_ASSIGN_OR_RETURN(std::string project_id,
                      ProjectFor(caller, Action::kOperateRuns, "notification delivery " + id));
  QL_ASSIGN_OR_RETURN(OutboxRecord row, store_.notifications().GetDelivery(project_id, id));
  QL_ASSIGN_OR_RETURN(ChannelRecord channel, [&]() -> Result<ChannelRecord> {
    QL_ASSIGN_OR_RETURN(std::vector<ChannelRecord> live,
                        store_.notifications().ListChannels(project_id));
    for (ChannelRecord& c : live) {
      if (c.id == row.channel_id) return std::move(c);
    }
    return NotFound("channel_not_found", "the channel of delivery " + id + " was deleted");
  }());
  return store_.notifications().Redeliver(
      DeleteNotifyCommand{ActorOf(caller), FenceOf(caller, Action::kOperateRuns), project_id, id,
                          clock_.NowMs()},
      ChannelLimitsOf(channel.config_json).deadline_ms);
}

}  // namespace ql
