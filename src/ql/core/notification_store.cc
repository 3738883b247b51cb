#include "ql/core/notification_store.h"

#include <algorithm>
#include <map>
#include <utility>

#include "ql/core/ids.h"
#include "ql/core/store_commands.h"

namespace ql {
namespace {

// The fence of a write, or (for the system) only the project's existence.
Status Fence(GovernanceTx& gov, const std::optional<PolicyFence>& fence,
             const std::string& project_id) {
  if (fence) return CheckPolicyFence(gov, *fence, project_id);
  QL_ASSIGN_OR_RETURN(std::optional<ProjectRecord> project, gov.LoadProject(project_id));
  if (!project) return NotFound("project_not_found", "project " + project_id + " does not exist");
  return Status::Ok();
}

Status ChannelNotFound(std::string_view what) {
  return NotFound("channel_not_found", "channel " + std::string(what) + " does not exist");
}

Status DeliveryNotFound(const std::string& id) {
  return NotFound("delivery_not_found", "delivery " + id + " does not exist in this project");
}

std::string Truncated(std::string text) {
  if (text.size() > kMaxDeliveryErrorChars) text.resize(kMaxDeliveryErrorChars);
  // Never cut a UTF-8 sequence in half: drop trailing continuation bytes and their lead.
  while (!text.empty() && (static_cast<unsigned char>(text.back()) & 0xC0) == 0x80) text.pop_back();
  if (!text.empty() && static_cast<unsigned char>(text.back()) >= 0xC0) text.pop_back();
  return text;
}

// What a planner reads besides the rules: the project's live channels, the rules' states for
// the task and the channels' rate windows.
struct PlanInputs {
  std::map<std::string, ChannelRecord> channels;
  std::map<std::string, RuleStateRecord> states;
  std::map<std::string, ChannelStateRecord> windows;
};

Result<PlanInputs> LoadPlanInputs(NotificationTx& tx, const std::string& project_id,
                                  const std::string& task_id) {
  PlanInputs in;
  QL_ASSIGN_OR_RETURN(std::vector<ChannelRecord> channel_rows,
                      tx.LoadChannels(project_id, /*live_only=*/true));
  for (ChannelRecord& c : channel_rows) in.channels.emplace(c.id, std::move(c));
  QL_ASSIGN_OR_RETURN(std::vector<RuleStateRecord> state_rows, tx.LoadRuleStates(task_id));
  for (RuleStateRecord& s : state_rows) in.states.emplace(s.rule_id, std::move(s));
  QL_ASSIGN_OR_RETURN(std::vector<ChannelStateRecord> window_rows,
                      tx.LoadChannelStates(project_id));
  for (ChannelStateRecord& w : window_rows) in.windows.emplace(w.channel_id, std::move(w));
  return in;
}

Status WritePlan(NotificationTx& tx, const NotifyPlan& plan) {
  for (const RuleStateRecord& s : plan.states) QL_RETURN_IF_ERROR(tx.SaveRuleState(s));
  for (const ChannelStateRecord& w : plan.channel_states) {
    QL_RETURN_IF_ERROR(tx.SaveChannelState(w));
  }
  for (const OutboxRecord& row : plan.outbox) {
    QL_ASSIGN_OR_RETURN(bool inserted, tx.InsertOutbox(row));
    (void)inserted;  // a replay of the same decision finds its row
  }
  return Status::Ok();
}

}  // namespace

Status NotifyRunOutcomeInTx(NotificationTx& tx, const RunRecord& run, RunStatus status,
                            int64_t now_ms) {
  return NotifyRunOutcomeInTx(
      tx, run.project_id, run.task_id, [&]() -> Result<RunRecord> { return run; }, status, now_ms);
}

Status NotifyRunOutcomeInTx(NotificationTx& tx, const std::string& project_id,
                            const std::string& task_id,
                            const std::function<Result<RunRecord>()>& load, RunStatus status,
                            int64_t now_ms) {
  if (!IsNotifiableRunStatus(status)) return Status::Ok();
  QL_ASSIGN_OR_RETURN(std::vector<RuleRecord> rules, tx.LoadRules(project_id, task_id));
  if (rules.empty()) return Status::Ok();
  QL_ASSIGN_OR_RETURN(RunRecord run, load());
  QL_ASSIGN_OR_RETURN(PlanInputs in, LoadPlanInputs(tx, run.project_id, run.task_id));
  QL_ASSIGN_OR_RETURN(std::optional<std::string> task_name, tx.TaskName(run.task_id));
  RunOutcome outcome{run, status, task_name.value_or(run.task_id), now_ms};
  return WritePlan(tx, PlanRunOutcome(outcome, rules, in.states, in.channels, in.windows));
}

Status NotifyApprovalInTx(NotificationTx& tx, const std::string& project_id,
                          const std::string& task_id,
                          const std::function<Result<ApprovalOutcome>()>& describe) {
  QL_ASSIGN_OR_RETURN(std::vector<RuleRecord> rules, tx.LoadRules(project_id, task_id));
  std::erase_if(rules, [](const RuleRecord& r) {
    return r.event != NotifyEventName(NotifyEvent::kApproval);
  });
  if (rules.empty()) return Status::Ok();
  QL_ASSIGN_OR_RETURN(ApprovalOutcome outcome, describe());
  QL_ASSIGN_OR_RETURN(PlanInputs in, LoadPlanInputs(tx, outcome.project_id, outcome.task_id));
  return WritePlan(tx, PlanApprovalOutcome(outcome, rules, in.states, in.channels, in.windows));
}

Result<int> SweepOverdueInTx(NotificationTx& tx, int64_t now_ms) {
  QL_ASSIGN_OR_RETURN(std::vector<RuleRecord> rules, tx.LoadSweepRules());
  int written = 0;
  for (const RuleRecord& rule : rules) {
    if (!rule.threshold_ms) continue;
    QL_ASSIGN_OR_RETURN(std::optional<ChannelRecord> channel, tx.LoadChannel(rule.channel_id));
    if (!channel || channel->deleted_at_ms) continue;
    const int64_t before = now_ms - *rule.threshold_ms;
    if (rule.event == NotifyEventName(NotifyEvent::kLate)) {
      QL_ASSIGN_OR_RETURN(std::vector<RunRecord> runs,
                          tx.OverdueRuns(rule.project_id, rule.task_id, before, before, 100));
      for (const RunRecord& run : runs) {
        QL_ASSIGN_OR_RETURN(std::optional<std::string> name, tx.TaskName(run.task_id));
        QL_ASSIGN_OR_RETURN(
            bool inserted,
            tx.InsertOutbox(LateRow(rule, *channel, run, name.value_or(run.task_id), now_ms)));
        written += inserted ? 1 : 0;
      }
    } else if (rule.event == NotifyEventName(NotifyEvent::kMissing) && rule.task_id) {
      QL_ASSIGN_OR_RETURN(std::optional<std::string> name, tx.TaskName(*rule.task_id));
      if (!name) continue;
      QL_ASSIGN_OR_RETURN(std::optional<int64_t> last, tx.LastSuccessAt(*rule.task_id));
      const int64_t since = std::max(last.value_or(0), rule.created_at_ms);
      if (since > before) continue;
      QL_ASSIGN_OR_RETURN(bool inserted, tx.InsertOutbox(MissingRow(rule, *channel, *rule.task_id,
                                                                    *name, last, since, now_ms)));
      written += inserted ? 1 : 0;
    }
  }
  return written;
}

NotificationStore::NotificationStore(NotificationTxRunner& runner, RandomSource& random)
    : runner_(runner), random_(random) {}

AuditRecord NotificationStore::Fact(const Actor& actor, std::string_view action,
                                    std::string_view kind, const std::string& project_id,
                                    const std::string& target, int64_t now_ms) {
  std::string id;
  {
    std::lock_guard<std::mutex> lock(random_mu_);
    id = NewUuidV7(now_ms, random_);
  }
  return SucceededFact(std::move(id), actor, action, kind, target, project_id, now_ms);
}

Result<ChannelRecord> NotificationStore::CreateChannel(const CreateChannelCommand& cmd) {
  ChannelRecord channel = cmd.channel;
  QL_RETURN_IF_ERROR(ValidateId("channel id", channel.id));
  QL_RETURN_IF_ERROR(ValidateId("project id", channel.project_id));
  QL_RETURN_IF_ERROR(ValidateChannelName(channel.name));
  QL_ASSIGN_OR_RETURN(channel.config_json,
                      CanonicalChannelConfig(channel.type, channel.config_json));
  channel.created_by = cmd.actor.principal_id;
  channel.deleted_at_ms.reset();
  const AuditRecord fact = Fact(cmd.actor, "notify.channel.create", "notification_channel",
                                channel.project_id, channel.name, channel.created_at_ms);
  QL_RETURN_IF_ERROR(runner_.Run(
      NotificationTxKind::kConfigure, "create channel", [&](GovernanceTx& gov, NotificationTx& tx) {
        QL_RETURN_IF_ERROR(Fence(gov, cmd.fence, channel.project_id));
        QL_ASSIGN_OR_RETURN(std::vector<ChannelRecord> live,
                            tx.LoadChannels(channel.project_id, /*live_only=*/true));
        for (const ChannelRecord& c : live) {
          if (c.name == channel.name) {
            return Duplicate("channel_name_duplicate",
                             "channel " + channel.name + " already exists in this project");
          }
        }
        QL_RETURN_IF_ERROR(tx.InsertChannel(channel));
        return gov.InsertAudit(fact);
      }));
  return channel;
}

Result<std::vector<ChannelRecord>> NotificationStore::ListChannels(const std::string& project_id) {
  QL_RETURN_IF_ERROR(ValidateId("project id", project_id));
  std::vector<ChannelRecord> out;
  QL_RETURN_IF_ERROR(runner_.Run(NotificationTxKind::kRead, "list channels",
                                 [&](GovernanceTx&, NotificationTx& tx) -> Status {
                                   QL_ASSIGN_OR_RETURN(out, tx.LoadChannels(project_id, true));
                                   return Status::Ok();
                                 }));
  return out;
}

Result<ChannelRecord> NotificationStore::GetChannelByName(const std::string& project_id,
                                                          const std::string& name) {
  QL_RETURN_IF_ERROR(ValidateChannelName(name));
  QL_ASSIGN_OR_RETURN(std::vector<ChannelRecord> live, ListChannels(project_id));
  for (ChannelRecord& c : live) {
    if (c.name == name) return std::move(c);
  }
  return ChannelNotFound(name);
}

Result<ChannelRecord> NotificationStore::DeleteChannel(const DeleteNotifyCommand& cmd) {
  QL_RETURN_IF_ERROR(ValidateId("project id", cmd.project_id));
  QL_RETURN_IF_ERROR(ValidateId("channel id", cmd.id));
  ChannelRecord out;
  QL_RETURN_IF_ERROR(runner_.Run(
      NotificationTxKind::kConfigure, "delete channel", [&](GovernanceTx& gov, NotificationTx& tx) {
        QL_RETURN_IF_ERROR(Fence(gov, cmd.fence, cmd.project_id));
        QL_ASSIGN_OR_RETURN(std::optional<ChannelRecord> channel, tx.LoadChannel(cmd.id));
        if (!channel || channel->project_id != cmd.project_id || channel->deleted_at_ms) {
          return ChannelNotFound(cmd.id);
        }
        QL_RETURN_IF_ERROR(tx.DeleteRules(cmd.project_id, std::nullopt, cmd.id));
        QL_RETURN_IF_ERROR(tx.MarkChannelDeleted(cmd.id, cmd.now_ms));
        out = *channel;
        out.deleted_at_ms = cmd.now_ms;
        return gov.InsertAudit(Fact(cmd.actor, "notify.channel.delete", "notification_channel",
                                    cmd.project_id, channel->name, cmd.now_ms));
      }));
  return out;
}

Result<RuleRecord> NotificationStore::CreateRule(const CreateRuleCommand& cmd) {
  RuleRecord rule = cmd.rule;
  QL_RETURN_IF_ERROR(ValidateId("rule id", rule.id));
  QL_RETURN_IF_ERROR(ValidateId("project id", rule.project_id));
  QL_RETURN_IF_ERROR(ValidateId("channel id", rule.channel_id));
  if (rule.task_id) QL_RETURN_IF_ERROR(ValidateId("task id", *rule.task_id));
  QL_RETURN_IF_ERROR(ValidateRule(rule));
  rule.created_by = cmd.actor.principal_id;
  QL_RETURN_IF_ERROR(runner_.Run(
      NotificationTxKind::kConfigure, "create rule", [&](GovernanceTx& gov, NotificationTx& tx) {
        QL_RETURN_IF_ERROR(Fence(gov, cmd.fence, rule.project_id));
        QL_ASSIGN_OR_RETURN(std::optional<ChannelRecord> channel, tx.LoadChannel(rule.channel_id));
        if (!channel || channel->project_id != rule.project_id || channel->deleted_at_ms) {
          return ChannelNotFound(rule.channel_id);
        }
        if (rule.task_id) {
          QL_ASSIGN_OR_RETURN(std::optional<std::string> project, tx.TaskProject(*rule.task_id));
          if (project != rule.project_id) {
            return NotFound("task_not_found",
                            "task " + *rule.task_id + " does not exist in this project");
          }
        }
        QL_RETURN_IF_ERROR(tx.InsertRule(rule));
        return gov.InsertAudit(Fact(cmd.actor, "notify.rule.create", "notification_rule",
                                    rule.project_id, rule.id, rule.created_at_ms));
      }));
  return rule;
}

Result<std::vector<RuleRecord>> NotificationStore::ListRules(const std::string& project_id) {
  QL_RETURN_IF_ERROR(ValidateId("project id", project_id));
  std::vector<RuleRecord> out;
  QL_RETURN_IF_ERROR(runner_.Run(NotificationTxKind::kRead, "list rules",
                                 [&](GovernanceTx&, NotificationTx& tx) -> Status {
                                   QL_ASSIGN_OR_RETURN(out, tx.LoadRules(project_id, std::nullopt));
                                   return Status::Ok();
                                 }));
  return out;
}

Result<RuleRecord> NotificationStore::DeleteRule(const DeleteNotifyCommand& cmd) {
  QL_RETURN_IF_ERROR(ValidateId("project id", cmd.project_id));
  QL_RETURN_IF_ERROR(ValidateId("rule id", cmd.id));
  RuleRecord out;
  QL_RETURN_IF_ERROR(runner_.Run(
      NotificationTxKind::kConfigure, "delete rule", [&](GovernanceTx& gov, NotificationTx& tx) {
        QL_RETURN_IF_ERROR(Fence(gov, cmd.fence, cmd.project_id));
        QL_ASSIGN_OR_RETURN(std::vector<RuleRecord> rules,
                            tx.LoadRules(cmd.project_id, std::nullopt));
        const RuleRecord* found = nullptr;
        for (const RuleRecord& r : rules) {
          if (r.id == cmd.id) found = &r;
        }
        if (found == nullptr) {
          return NotFound("rule_not_found", "rule " + cmd.id + " does not exist in this project");
        }
        out = *found;
        QL_RETURN_IF_ERROR(tx.DeleteRules(cmd.project_id, cmd.id, std::nullopt));
        return gov.InsertAudit(Fact(cmd.actor, "notify.rule.delete", "notification_rule",
                                    cmd.project_id, cmd.id, cmd.now_ms));
      }));
  return out;
}

Result<OutboxRecord> NotificationStore::EnqueueDelivery(const OutboxRecord& row) {
  QL_RETURN_IF_ERROR(ValidateId("delivery id", row.id));
  QL_RETURN_IF_ERROR(ValidateId("channel id", row.channel_id));
  QL_RETURN_IF_ERROR(runner_.Run(NotificationTxKind::kWrite, "enqueue delivery",
                                 [&](GovernanceTx&, NotificationTx& tx) -> Status {
                                   QL_ASSIGN_OR_RETURN(bool inserted, tx.InsertOutbox(row));
                                   (void)inserted;
                                   return Status::Ok();
                                 }));
  return row;
}

Result<std::vector<ClaimedDelivery>> NotificationStore::ClaimDueDeliveries(const std::string& owner,
                                                                           int64_t now_ms,
                                                                           int64_t lease_ms,
                                                                           int limit) {
  QL_RETURN_IF_ERROR(RequireLimit("claim limit", limit));
  QL_RETURN_IF_ERROR(RequireText("owner", owner));
  std::vector<ClaimedDelivery> out;
  // Idle rounds read; only a round with something due writes.
  bool any = false;
  QL_RETURN_IF_ERROR(runner_.Run(NotificationTxKind::kRead, "look for due deliveries",
                                 [&](GovernanceTx&, NotificationTx& tx) -> Status {
                                   QL_ASSIGN_OR_RETURN(any, tx.AnyDue(now_ms));
                                   return Status::Ok();
                                 }));
  if (!any) return out;
  QL_RETURN_IF_ERROR(runner_.Run(
      NotificationTxKind::kWrite, "claim deliveries", [&](GovernanceTx&, NotificationTx& tx) {
        out.clear();
        QL_ASSIGN_OR_RETURN(std::vector<OutboxRecord> due, tx.LockDue(now_ms, limit));
        std::map<std::string, std::optional<ChannelRecord>> channels;
        for (OutboxRecord& row : due) {
          auto it = channels.find(row.channel_id);
          if (it == channels.end()) {
            QL_ASSIGN_OR_RETURN(std::optional<ChannelRecord> c, tx.LoadChannel(row.channel_id));
            it = channels.emplace(row.channel_id, std::move(c)).first;
          }
          const std::string expected_status = row.status;
          const std::optional<std::string> expected_owner = row.lease_owner;
          if (!it->second || it->second->deleted_at_ms) {
            row.status = std::string(kDeliveryDead);
            row.last_error = "the channel was deleted";
            row.lease_owner.reset();
            row.lease_until_ms.reset();
            QL_ASSIGN_OR_RETURN(bool done, tx.UpdateOutbox(row, expected_status, expected_owner));
            (void)done;
            continue;
          }
          row.status = std::string(kDeliveryDelivering);
          row.attempts += 1;
          row.lease_owner = owner;
          row.lease_until_ms = now_ms + lease_ms;
          QL_ASSIGN_OR_RETURN(bool claimed, tx.UpdateOutbox(row, expected_status, expected_owner));
          if (claimed) out.push_back(ClaimedDelivery{row, *it->second});
        }
        return Status::Ok();
      }));
  return out;
}

namespace {

Status LeaseLost(const std::string& id, const std::string& owner) {
  return Conflict("delivery_lease_lost", "delivery " + id + " is no longer held by " + owner);
}

// The row `owner` is sending: Conflict `delivery_lease_lost` when it is settled or another
// claimer holds it.
Result<OutboxRecord> LoadHeld(NotificationTx& tx, const std::string& id, const std::string& owner) {
  QL_ASSIGN_OR_RETURN(std::optional<OutboxRecord> row, tx.LoadOutbox(id));
  if (!row || row->status != kDeliveryDelivering || row->lease_owner != owner) {
    return LeaseLost(id, owner);
  }
  return *std::move(row);
}

}  // namespace

Result<OutboxRecord> NotificationStore::RenewDeliveryLease(const std::string& id,
                                                           const std::string& owner, int64_t now_ms,
                                                           int64_t lease_ms) {
  QL_RETURN_IF_ERROR(ValidateId("delivery id", id));
  QL_RETURN_IF_ERROR(RequireText("owner", owner));
  OutboxRecord out;
  QL_RETURN_IF_ERROR(runner_.Run(
      NotificationTxKind::kWrite, "renew delivery lease", [&](GovernanceTx&, NotificationTx& tx) {
        QL_ASSIGN_OR_RETURN(OutboxRecord next, LoadHeld(tx, id, owner));
        // Still ours even when the lease ran out: a claimer that took it would own it now, and
        // the update below only applies while this owner still holds it.
        next.lease_until_ms = now_ms + lease_ms;
        QL_ASSIGN_OR_RETURN(bool done, tx.UpdateOutbox(next, kDeliveryDelivering, owner));
        if (!done) return LeaseLost(id, owner);
        out = std::move(next);
        return Status::Ok();
      }));
  return out;
}

Result<OutboxRecord> NotificationStore::RecordDelivery(const DeliveryResult& result) {
  QL_RETURN_IF_ERROR(ValidateId("delivery id", result.id));
  OutboxRecord out;
  QL_RETURN_IF_ERROR(runner_.Run(
      NotificationTxKind::kWrite, "record delivery", [&](GovernanceTx&, NotificationTx& tx) {
        QL_ASSIGN_OR_RETURN(OutboxRecord next, LoadHeld(tx, result.id, result.owner));
        next.lease_owner.reset();
        next.lease_until_ms.reset();
        next.last_status_code = result.status_code;
        next.last_latency_ms = result.latency_ms;
        next.last_error =
            result.error ? std::optional<std::string>(Truncated(*result.error)) : std::nullopt;
        if (result.delivered) {
          next.status = std::string(kDeliveryDelivered);
          next.delivered_at_ms = result.now_ms;
        } else if (result.retry_at_ms) {
          next.status = std::string(kDeliveryPending);
          next.next_attempt_at_ms = *result.retry_at_ms;
        } else {
          next.status = std::string(kDeliveryDead);
        }
        QL_ASSIGN_OR_RETURN(bool done, tx.UpdateOutbox(next, kDeliveryDelivering, result.owner));
        if (!done) return LeaseLost(result.id, result.owner);
        out = std::move(next);
        return Status::Ok();
      }));
  return out;
}

Result<std::vector<OutboxRecord>> NotificationStore::ListDeliveries(const DeliveryFilter& filter) {
  QL_RETURN_IF_ERROR(ValidateId("project id", filter.project_id));
  QL_RETURN_IF_ERROR(RequireLimit("limit", filter.limit));
  std::vector<OutboxRecord> out;
  QL_RETURN_IF_ERROR(runner_.Run(NotificationTxKind::kRead, "list deliveries",
                                 [&](GovernanceTx&, NotificationTx& tx) -> Status {
                                   QL_ASSIGN_OR_RETURN(out, tx.ListOutbox(filter));
                                   return Status::Ok();
                                 }));
  return out;
}

Result<OutboxRecord> NotificationStore::GetDelivery(const std::string& project_id,
                                                    const std::string& id) {
  QL_RETURN_IF_ERROR(ValidateId("delivery id", id));
  std::optional<OutboxRecord> out;
  QL_RETURN_IF_ERROR(runner_.Run(NotificationTxKind::kRead, "read delivery",
                                 [&](GovernanceTx&, NotificationTx& tx) -> Status {
                                   QL_ASSIGN_OR_RETURN(out, tx.LoadOutbox(id));
                                   return Status::Ok();
                                 }));
  if (!out || out->project_id != project_id) return DeliveryNotFound(id);
  return std::move(*out);
}

Result<OutboxRecord> NotificationStore::Redeliver(const DeleteNotifyCommand& cmd,
                                                  int64_t deadline_ms) {
  QL_RETURN_IF_ERROR(ValidateId("delivery id", cmd.id));
  OutboxRecord out;
  QL_RETURN_IF_ERROR(runner_.Run(
      NotificationTxKind::kConfigure, "redeliver", [&](GovernanceTx& gov, NotificationTx& tx) {
        QL_RETURN_IF_ERROR(Fence(gov, cmd.fence, cmd.project_id));
        QL_ASSIGN_OR_RETURN(std::optional<OutboxRecord> row, tx.LoadOutbox(cmd.id));
        if (!row || row->project_id != cmd.project_id) return DeliveryNotFound(cmd.id);
        if (row->status != kDeliveryDelivered && row->status != kDeliveryDead) {
          return Conflict("delivery_pending",
                          "delivery " + cmd.id + " is " + row->status + ": it is still being sent");
        }
        const std::string expected = row->status;
        OutboxRecord next = *row;
        next.status = std::string(kDeliveryPending);
        next.attempts = 0;
        next.next_attempt_at_ms = cmd.now_ms;
        next.deadline_at_ms = cmd.now_ms + deadline_ms;
        next.delivered_at_ms.reset();
        QL_ASSIGN_OR_RETURN(bool done, tx.UpdateOutbox(next, expected, std::nullopt));
        if (!done) return Conflict("delivery_pending", "delivery " + cmd.id + " changed meanwhile");
        out = std::move(next);
        return gov.InsertAudit(Fact(cmd.actor, "notify.redeliver", "notification_delivery",
                                    cmd.project_id, cmd.id, cmd.now_ms));
      }));
  return out;
}

Result<int> NotificationStore::SweepOverdue(int64_t now_ms) {
  // Idle rounds read; only projects with late or missing rules pay for a write.
  bool any = false;
  QL_RETURN_IF_ERROR(runner_.Run(NotificationTxKind::kRead, "look for sweep rules",
                                 [&](GovernanceTx&, NotificationTx& tx) -> Status {
                                   QL_ASSIGN_OR_RETURN(std::vector<RuleRecord> rules,
                                                       tx.LoadSweepRules());
                                   any = !rules.empty();
                                   return Status::Ok();
                                 }));
  if (!any) return 0;
  int written = 0;
  QL_RETURN_IF_ERROR(runner_.Run(NotificationTxKind::kWrite, "sweep late and missing",
                                 [&](GovernanceTx&, NotificationTx& tx) -> Status {
                                   QL_ASSIGN_OR_RETURN(written, SweepOverdueInTx(tx, now_ms));
                                   return Status::Ok();
                                 }));
  return written;
}

Result<int> NotificationStore::PurgeRunlessDeliveries(int64_t before_ms, int limit) {
  int deleted = 0;
  QL_RETURN_IF_ERROR(runner_.Run(NotificationTxKind::kWrite, "purge settled deliveries",
                                 [&](GovernanceTx&, NotificationTx& tx) -> Status {
                                   QL_ASSIGN_OR_RETURN(deleted,
                                                       tx.DeleteSettledRunless(before_ms, limit));
                                   return Status::Ok();
                                 }));
  return deleted;
}

Result<std::vector<std::pair<std::string, int64_t>>> NotificationStore::CountDeliveries() {
  std::vector<std::pair<std::string, int64_t>> out;
  QL_RETURN_IF_ERROR(runner_.Run(NotificationTxKind::kRead, "count deliveries",
                                 [&](GovernanceTx&, NotificationTx& tx) -> Status {
                                   QL_ASSIGN_OR_RETURN(out, tx.CountOutbox());
                                   return Status::Ok();
                                 }));
  return out;
}

}  // namespace ql
