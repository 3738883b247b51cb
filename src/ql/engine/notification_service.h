#pragma once

// Notification use-cases (DESIGN §14) for the HTTP API and the CLI: channels (add, list, test,
// delete), rules (add, list, delete) and deliveries (list, redeliver). Authorization asks
// GovernanceService in the caller's project: channel and rule writes need admin (like
// publishing), a test message and a redelivery operator, reading viewer. Credentials are named
// secrets of the project; no value passes through here.
//
// Errors: those of notification_store.h, task_not_found for a rule's task, project_not_found,
// permission_denied.

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ql/core/clock.h"
#include "ql/core/notification_store.h"
#include "ql/core/ports.h"
#include "ql/core/status.h"
#include "ql/engine/control_service.h"
#include "ql/engine/governance_service.h"

namespace ql {

struct NewRuleRequest {
  std::string channel;  // name
  std::string event;
  std::optional<std::string> task;  // name or id; none: every task
  std::optional<std::string> mode;  // default: change for failed/timed_out/recovered, else every
  std::optional<int64_t> min_interval_ms;  // default 0 for change rules, 60 s for every rules
  std::optional<int64_t> threshold_ms;
};

class NotificationService {
 public:
  // All references must outlive the service. Thread-safe.
  NotificationService(Store& store, GovernanceService& governance, ControlService& control,
                      Clock& clock, RandomSource& random);

  Result<ChannelRecord> AddChannel(const Caller& caller, const std::string& name,
                                   const std::string& type, const std::string& config_json);
  Result<std::vector<ChannelRecord>> ListChannels(const Caller& caller);
  Result<ChannelRecord> RemoveChannel(const Caller& caller, const std::string& name);
  // Queues a test message to the channel now; returns its delivery row.
  Result<OutboxRecord> TestChannel(const Caller& caller, const std::string& name);
  Result<RuleRecord> AddRule(const Caller& caller, const NewRuleRequest& request);
  Result<std::vector<RuleRecord>> ListRules(const Caller& caller);
  Result<RuleRecord> RemoveRule(const Caller& caller, const std::string& id);
  Result<std::vector<OutboxRecord>> ListDeliveries(const Caller& caller, bool failed_only,
                                                   int limit);
  Result<OutboxRecord> Redeliver(const Caller& caller, const std::string& id);

 private:
  Result<std::string> ProjectFor(const Caller& caller, Action action, const std::string& target);
  std::string NewId();

  Store& store_;
  GovernanceService& governance_;
  ControlService& control_;
  Clock& clock_;
  RandomSource& random_;
  std::mutex random_mu_;
};

}  // namespace ql
