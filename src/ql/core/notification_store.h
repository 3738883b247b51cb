#pragma once

// The notification port (DESIGN §14), written once over a store's primitives as secret_store.h
// is: a store implements NotificationTx (row reads and writes inside one of its transactions)
// and NotificationTxRunner; NotificationStore holds the rules — the policy fence, names, the
// outbox's leases and attempts. NotifyRunOutcomeInTx is what every store calls inside the
// transaction that moves a run, so the outbox row commits with the state change that causes it.
//
// Errors beyond ports.h's conventions:
//   InvalidArgument  channel_name_invalid, channel_type_invalid, channel_config_invalid,
//                    notify_event_invalid, notify_mode_invalid, notify_interval_invalid,
//                    notify_threshold_invalid, invalid_id, invalid_limit
//   NotFound         channel_not_found, rule_not_found, delivery_not_found, task_not_found
//   Duplicate        channel_name_duplicate
//   Conflict         delivery_lease_lost (the attempt's lease was taken over), delivery_pending
//                    (redelivering a row that is still due), and the fence's project_archived

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ql/core/clock.h"
#include "ql/core/governance_ports.h"
#include "ql/core/governance_store.h"
#include "ql/core/notification.h"
#include "ql/core/status.h"

namespace ql {

struct CreateChannelCommand {
  Actor actor;
  std::optional<PolicyFence> fence;
  ChannelRecord channel;  // id chosen by the caller; config checked and made canonical here
};

struct CreateRuleCommand {
  Actor actor;
  std::optional<PolicyFence> fence;
  RuleRecord rule;  // id chosen by the caller
};

struct DeleteNotifyCommand {
  Actor actor;
  std::optional<PolicyFence> fence;
  std::string project_id;
  std::string id;  // channel or rule id
  int64_t now_ms = 0;
};

// What one send attempt of a claimed row came to.
struct DeliveryResult {
  std::string id;
  std::string owner;  // the lease owner that claimed it
  bool delivered = false;
  std::optional<int64_t> retry_at_ms;  // when not delivered: the next attempt, or none (dead)
  std::optional<int> status_code;
  std::optional<std::string> error;
  int64_t latency_ms = 0;
  int64_t now_ms = 0;
};

// A claimed outbox row with its channel.
struct ClaimedDelivery {
  OutboxRecord row;
  ChannelRecord channel;
};

struct DeliveryFilter {
  std::string project_id;
  bool failed_only = false;  // dead, or pending after a failed attempt
  int limit = 100;
};

class NotificationRepository {
 public:
  virtual ~NotificationRepository() = default;
  // Stores a channel under the fence. Duplicate `channel_name_duplicate` for a live name.
  virtual Result<ChannelRecord> CreateChannel(const CreateChannelCommand& cmd) = 0;
  virtual Result<std::vector<ChannelRecord>> ListChannels(const std::string& project_id) = 0;
  // The live channel of that name; NotFound `channel_not_found`.
  virtual Result<ChannelRecord> GetChannelByName(const std::string& project_id,
                                                 const std::string& name) = 0;
  // Deletes a live channel and its rules; its pending rows go dead when claimed.
  virtual Result<ChannelRecord> DeleteChannel(const DeleteNotifyCommand& cmd) = 0;
  // Stores a rule of a live channel (`channel_not_found`) and, when it names one, an existing
  // task of the project (`task_not_found`).
  virtual Result<RuleRecord> CreateRule(const CreateRuleCommand& cmd) = 0;
  virtual Result<std::vector<RuleRecord>> ListRules(const std::string& project_id) = 0;
  virtual Result<RuleRecord> DeleteRule(const DeleteNotifyCommand& cmd) = 0;
  // Writes a pending row outside any run (a channel test).
  virtual Result<OutboxRecord> EnqueueDelivery(const OutboxRecord& row) = 0;
  // Takes up to `limit` rows due at `now_ms` — pending ones whose next attempt is due, and
  // delivering ones whose lease ran out (their sender died) — leases them to `owner` until
  // now + lease_ms and counts the attempt. Rows other claimers hold are skipped, never waited
  // for.
  virtual Result<std::vector<ClaimedDelivery>> ClaimDueDeliveries(const std::string& owner,
                                                                  int64_t now_ms, int64_t lease_ms,
                                                                  int limit) = 0;
  // Extends the lease of a row `owner` still holds to now + lease_ms (a sender about to send a
  // row late in its batch, or after a pause); Conflict `delivery_lease_lost` when another
  // claimer took it over or it was settled.
  virtual Result<OutboxRecord> RenewDeliveryLease(const std::string& id, const std::string& owner,
                                                  int64_t now_ms, int64_t lease_ms) = 0;
  // Records an attempt of a row `owner` still holds; Conflict `delivery_lease_lost` otherwise.
  virtual Result<OutboxRecord> RecordDelivery(const DeliveryResult& result) = 0;
  // Lists a project's rows, newest first.
  virtual Result<std::vector<OutboxRecord>> ListDeliveries(const DeliveryFilter& filter) = 0;
  virtual Result<OutboxRecord> GetDelivery(const std::string& project_id,
                                           const std::string& id) = 0;
  // Makes a delivered or dead row pending again now, with a fresh budget of attempts and a new
  // deadline, under the fence (operator). Conflict `delivery_pending` for a row still due.
  virtual Result<OutboxRecord> Redeliver(const DeleteNotifyCommand& cmd, int64_t deadline_ms) = 0;
  // Counts rows by status (for metrics and the status page).
  virtual Result<std::vector<std::pair<std::string, int64_t>>> CountDeliveries() = 0;
  // Writes the rows of `late` and `missing` rules due at `now_ms` (SweepOverdueInTx); returns
  // how many it wrote. Cheap when no such rule exists.
  virtual Result<int> SweepOverdue(int64_t now_ms) = 0;
  // Deletes up to `limit` delivered or dead rows of no run (tests, missing, approvals) created
  // before `before_ms`; rows of a run go with it (retention). Returns how many it deleted.
  virtual Result<int> PurgeRunlessDeliveries(int64_t before_ms, int limit) = 0;
};

// Row primitives inside one transaction; nothing here decides.
class NotificationTx {
 public:
  virtual ~NotificationTx() = default;
  virtual Status InsertChannel(const ChannelRecord& channel) = 0;
  virtual Result<std::vector<ChannelRecord>> LoadChannels(const std::string& project_id,
                                                          bool live_only) = 0;
  virtual Result<std::optional<ChannelRecord>> LoadChannel(const std::string& id) = 0;
  virtual Status MarkChannelDeleted(const std::string& id, int64_t now_ms) = 0;
  virtual Status InsertRule(const RuleRecord& rule) = 0;
  // The rules of a project, in id order; with `task_id`, only those naming it or every task.
  virtual Result<std::vector<RuleRecord>> LoadRules(const std::string& project_id,
                                                    const std::optional<std::string>& task_id) = 0;
  virtual Status DeleteRules(const std::string& project_id,
                             const std::optional<std::string>& rule_id,
                             const std::optional<std::string>& channel_id) = 0;
  virtual Result<std::vector<RuleStateRecord>> LoadRuleStates(const std::string& task_id) = 0;
  virtual Status SaveRuleState(const RuleStateRecord& state) = 0;
  virtual Result<std::vector<ChannelStateRecord>> LoadChannelStates(
      const std::string& project_id) = 0;
  virtual Status SaveChannelState(const ChannelStateRecord& state) = 0;
  // Inserts a row unless one with its id exists (a replayed decision); returns whether it did.
  virtual Result<bool> InsertOutbox(const OutboxRecord& row) = 0;
  // Whether any row is due at `now_ms` (a read: the loop's idle poll takes no write lock).
  virtual Result<bool> AnyDue(int64_t now_ms) = 0;
  // The due rows (see ClaimDueDeliveries), locked (skipping locked rows) when the store can.
  virtual Result<std::vector<OutboxRecord>> LockDue(int64_t now_ms, int limit) = 0;
  virtual Result<std::optional<OutboxRecord>> LoadOutbox(const std::string& id) = 0;
  // Overwrites status, attempts, times, lease and last-attempt fields of row `row.id` where its
  // status and lease owner are still `expected_status` / `expected_owner`; returns whether it did.
  virtual Result<bool> UpdateOutbox(const OutboxRecord& row, std::string_view expected_status,
                                    const std::optional<std::string>& expected_owner) = 0;
  virtual Result<std::vector<OutboxRecord>> ListOutbox(const DeliveryFilter& filter) = 0;
  virtual Result<std::vector<std::pair<std::string, int64_t>>> CountOutbox() = 0;
  // Deletes up to `limit` delivered or dead rows without a run created before `before_ms`.
  virtual Result<int> DeleteSettledRunless(int64_t before_ms, int limit) = 0;
  // Every rule of event late or missing, of every project, in id order.
  virtual Result<std::vector<RuleRecord>> LoadSweepRules() = 0;
  // Up to `limit` runs of the project (of `task_id` when given) queued since before
  // `queued_before_ms` (their occurrence, else their creation) or running since before
  // `started_before_ms`, oldest first.
  virtual Result<std::vector<RunRecord>> OverdueRuns(const std::string& project_id,
                                                     const std::optional<std::string>& task_id,
                                                     int64_t queued_before_ms,
                                                     int64_t started_before_ms, int limit) = 0;
  // When the task's last successful run finished (nullopt: never).
  virtual Result<std::optional<int64_t>> LastSuccessAt(const std::string& task_id) = 0;
  // The name of a task (nullopt when it does not exist).
  virtual Result<std::optional<std::string>> TaskName(const std::string& task_id) = 0;
  virtual Result<std::optional<std::string>> TaskProject(const std::string& task_id) = 0;
};

// Reads; writes of the delivery machinery (outbox rows, attempts); and writes of a project's
// configuration (channels, rules, redelivery), which PostgreSQL runs on the admin role.
enum class NotificationTxKind { kRead, kWrite, kConfigure };

class NotificationTxRunner {
 public:
  virtual ~NotificationTxRunner() = default;
  virtual Status Run(NotificationTxKind kind, std::string_view operation,
                     const std::function<Status(GovernanceTx&, NotificationTx&)>& body) = 0;
};

// Called by a store inside the transaction that moves `run` to `status`: loads the rules of the
// run's task, decides (PlanRunOutcome) and writes the states and outbox rows. Does nothing for a
// status no rule is about or a project without rules.
Status NotifyRunOutcomeInTx(NotificationTx& tx, const RunRecord& run, RunStatus status,
                            int64_t now_ms);
// The same for a run the caller has not read back: `load` reads it only when its task has rules,
// so a skipped admission in a project without rules costs one rule lookup and nothing more.
Status NotifyRunOutcomeInTx(NotificationTx& tx, const std::string& project_id,
                            const std::string& task_id,
                            const std::function<Result<RunRecord>()>& load, RunStatus status,
                            int64_t now_ms);

// Called by the approval store inside the transaction that asks for or decides a request of
// task `task_id`: loads the task's `approval` rules and, when there are any, the outcome
// (`describe`: names are read only then), decides (PlanApprovalOutcome) and writes the states
// and outbox rows.
Status NotifyApprovalInTx(NotificationTx& tx, const std::string& project_id,
                          const std::string& task_id,
                          const std::function<Result<ApprovalOutcome>()>& describe);

// The sweep of the rules no state change triggers, inside one transaction: a `late` rule writes
// a row for each run of its task (or project) still queued `threshold_ms` after it was due, or
// running longer than that; a `missing` rule (dead-man's switch, one task) writes a row when
// the task has had no success for `threshold_ms` — once per silence, counted from its last
// success or from the rule's creation, whichever is later. Row ids are derived from the rule
// and the run or the silence, so sweeping again (or on another replica) writes nothing twice.
Result<int> SweepOverdueInTx(NotificationTx& tx, int64_t now_ms);

class NotificationStore final : public NotificationRepository {
 public:
  // `runner` and `random` (audit ids) must outlive the store.
  NotificationStore(NotificationTxRunner& runner, RandomSource& random);

  Result<ChannelRecord> CreateChannel(const CreateChannelCommand& cmd) override;
  Result<std::vector<ChannelRecord>> ListChannels(const std::string& project_id) override;
  Result<ChannelRecord> GetChannelByName(const std::string& project_id,
                                         const std::string& name) override;
  Result<ChannelRecord> DeleteChannel(const DeleteNotifyCommand& cmd) override;
  Result<RuleRecord> CreateRule(const CreateRuleCommand& cmd) override;
  Result<std::vector<RuleRecord>> ListRules(const std::string& project_id) override;
  Result<RuleRecord> DeleteRule(const DeleteNotifyCommand& cmd) override;
  Result<OutboxRecord> EnqueueDelivery(const OutboxRecord& row) override;
  Result<std::vector<ClaimedDelivery>> ClaimDueDeliveries(const std::string& owner, int64_t now_ms,
                                                          int64_t lease_ms, int limit) override;
  Result<OutboxRecord> RenewDeliveryLease(const std::string& id, const std::string& owner,
                                          int64_t now_ms, int64_t lease_ms) override;
  Result<OutboxRecord> RecordDelivery(const DeliveryResult& result) override;
  Result<std::vector<OutboxRecord>> ListDeliveries(const DeliveryFilter& filter) override;
  Result<OutboxRecord> GetDelivery(const std::string& project_id, const std::string& id) override;
  Result<OutboxRecord> Redeliver(const DeleteNotifyCommand& cmd, int64_t deadline_ms) override;
  Result<std::vector<std::pair<std::string, int64_t>>> CountDeliveries() override;
  Result<int> SweepOverdue(int64_t now_ms) override;
  Result<int> PurgeRunlessDeliveries(int64_t before_ms, int limit) override;

 private:
  AuditRecord Fact(const Actor& actor, std::string_view action, std::string_view kind,
                   const std::string& project_id, const std::string& target, int64_t now_ms);

  NotificationTxRunner& runner_;
  RandomSource& random_;
  std::mutex random_mu_;
};

}  // namespace ql
