#include "ql/storage/postgres/pg_notifications.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ql/storage/postgres/pg_governance.h"
#include "ql/storage/postgres/pg_store_rows.h"

namespace ql::pg {
namespace {

constexpr char kChannelColumns[] =
    "SELECT id, project_id, name, type, config_json, created_by, created_at_ms, deleted_at_ms "
    "FROM ql3.notification_channels ";

constexpr char kRuleColumns[] =
    "SELECT id, project_id, channel_id, event, task_id, mode, min_interval_ms, threshold_ms, "
    "created_by, created_at_ms FROM ql3.notification_rules ";

constexpr char kOutboxColumns[] =
    "SELECT id, project_id, channel_id, rule_id, event, task_id, run_id, payload_json, status, "
    "attempts, next_attempt_at_ms, deadline_at_ms, lease_owner, lease_until_ms, "
    "last_status_code, last_error, last_latency_ms, created_at_ms, delivered_at_ms "
    "FROM ql3.notification_outbox ";

std::vector<ChannelRecord> ReadChannels(const Rows& r) {
  std::vector<ChannelRecord> out;
  for (int i = 0; i < r.size(); ++i) {
    out.push_back(ChannelRecord{r.Text(i, 0), r.Text(i, 1), r.Text(i, 2), r.Text(i, 3),
                                r.Text(i, 4), r.Text(i, 5), r.Int(i, 6), r.OptInt(i, 7)});
  }
  return out;
}

std::vector<RuleRecord> ReadRules(const Rows& r) {
  std::vector<RuleRecord> out;
  for (int i = 0; i < r.size(); ++i) {
    RuleRecord rule;
    rule.id = r.Text(i, 0);
    rule.project_id = r.Text(i, 1);
    rule.channel_id = r.Text(i, 2);
    rule.event = r.Text(i, 3);
    rule.task_id = r.OptText(i, 4);
    rule.mode = r.Text(i, 5);
    rule.min_interval_ms = r.Int(i, 6);
    rule.threshold_ms = r.OptInt(i, 7);
    rule.created_by = r.Text(i, 8);
    rule.created_at_ms = r.Int(i, 9);
    out.push_back(std::move(rule));
  }
  return out;
}

std::vector<OutboxRecord> ReadOutbox(const Rows& r) {
  std::vector<OutboxRecord> out;
  for (int i = 0; i < r.size(); ++i) {
    OutboxRecord o;
    o.id = r.Text(i, 0);
    o.project_id = r.Text(i, 1);
    o.channel_id = r.Text(i, 2);
    o.rule_id = r.OptText(i, 3);
    o.event = r.Text(i, 4);
    o.task_id = r.OptText(i, 5);
    o.run_id = r.OptText(i, 6);
    o.payload_json = r.Text(i, 7);
    o.status = r.Text(i, 8);
    o.attempts = static_cast<int>(r.Int(i, 9));
    o.next_attempt_at_ms = r.Int(i, 10);
    o.deadline_at_ms = r.Int(i, 11);
    o.lease_owner = r.OptText(i, 12);
    o.lease_until_ms = r.OptInt(i, 13);
    if (std::optional<int64_t> code = r.OptInt(i, 14)) o.last_status_code = static_cast<int>(*code);
    o.last_error = r.OptText(i, 15);
    o.last_latency_ms = r.OptInt(i, 16);
    o.created_at_ms = r.Int(i, 17);
    o.delivered_at_ms = r.OptInt(i, 18);
    out.push_back(std::move(o));
  }
  return out;
}

class PgNotificationTx final : public NotificationTx {
 public:
  // `lock_channels`: LoadChannel locks the row (FOR UPDATE), so that a rule created for a
  // channel and the channel's deletion commit one after the other. Admin writes only.
  PgNotificationTx(Tx& tx, bool lock_channels) : tx_(tx), lock_channels_(lock_channels) {}

  Status InsertChannel(const ChannelRecord& c) override {
    return tx_
        .Exec(
            "INSERT INTO ql3.notification_channels (id, project_id, name, type, config_json, "
            "created_by, created_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7)",
            {P(c.id), P(c.project_id), P(c.name), P(c.type), P(c.config_json), P(c.created_by),
             P(c.created_at_ms)})
        .status();
  }

  Result<std::vector<ChannelRecord>> LoadChannels(const std::string& project_id,
                                                  bool live_only) override {
    static const std::string kSql =
        std::string(kChannelColumns) +
        "WHERE project_id = $1 AND ($2::boolean IS FALSE OR deleted_at_ms IS NULL) "
        "ORDER BY name COLLATE \"C\", created_at_ms";
    return Query(tx_, kSql, {P(project_id), P(live_only)}, ReadChannels);
  }

  Result<std::optional<ChannelRecord>> LoadChannel(const std::string& id) override {
    static const std::string kSql = std::string(kChannelColumns) + "WHERE id = $1";
    static const std::string kLocked = kSql + " FOR UPDATE";
    QL_ASSIGN_OR_RETURN(auto rows,
                        Query(tx_, lock_channels_ ? kLocked : kSql, {P(id)}, ReadChannels));
    return First(std::move(rows));
  }

  Status MarkChannelDeleted(const std::string& id, int64_t now_ms) override {
    return tx_
        .Exec(
            "UPDATE ql3.notification_channels SET deleted_at_ms = $2 "
            "WHERE id = $1 AND deleted_at_ms IS NULL",
            {P(id), P(now_ms)})
        .status();
  }

  Status InsertRule(const RuleRecord& r) override {
    return tx_
        .Exec(
            "INSERT INTO ql3.notification_rules (id, project_id, channel_id, event, task_id, "
            "mode, min_interval_ms, threshold_ms, created_by, created_at_ms) "
            "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            {P(r.id), P(r.project_id), P(r.channel_id), P(r.event), P(r.task_id), P(r.mode),
             P(r.min_interval_ms), P(r.threshold_ms), P(r.created_by), P(r.created_at_ms)})
        .status();
  }

  Result<std::vector<RuleRecord>> LoadRules(const std::string& project_id,
                                            const std::optional<std::string>& task_id) override {
    static const std::string kSql =
        std::string(kRuleColumns) +
        "WHERE project_id = $1 AND ($2::text IS NULL OR task_id IS NULL OR task_id = $2) "
        "ORDER BY id COLLATE \"C\"";
    QL_ASSIGN_OR_RETURN(std::vector<RuleRecord> rules,
                        Query(tx_, kSql, {P(project_id), P(task_id)}, ReadRules));
    if (task_id.has_value() && !rules.empty()) {
      // The outcome of a run or the change of an approval (the callers that name a task) is
      // about to read and write the rules' and channels' state: one at a time per project. Each later
      // statement of a READ COMMITTED transaction then sees what the previous holder committed.
      QL_RETURN_IF_ERROR(tx_.Exec("SELECT pg_advisory_xact_lock($1::integer, hashtext($2))",
                                  {P(static_cast<int64_t>(kNotifyLockClass)), P(project_id)})
                             .status());
    }
    return rules;
  }

  Status DeleteRules(const std::string& project_id, const std::optional<std::string>& rule_id,
                     const std::optional<std::string>& channel_id) override {
    return tx_
        .Exec(
            "DELETE FROM ql3.notification_rules WHERE project_id = $1 "
            "AND ($2::text IS NULL OR id = $2) AND ($3::text IS NULL OR channel_id = $3)",
            {P(project_id), P(rule_id), P(channel_id)})
        .status();
  }

  Result<std::vector<RuleStateRecord>> LoadRuleStates(const std::string& task_id) override {
    return Query(tx_,
                 "SELECT rule_id, task_id, failing, suppressed, last_sent_at_ms, updated_at_ms "
                 "FROM ql3.notification_rule_states WHERE task_id = $1",
                 {P(task_id)}, [](const Rows& r) {
                   std::vector<RuleStateRecord> out;
                   for (int i = 0; i < r.size(); ++i) {
                     out.push_back(RuleStateRecord{r.Text(i, 0), r.Text(i, 1), r.Bool(i, 2),
                                                   r.Int(i, 3), r.OptInt(i, 4), r.Int(i, 5)});
                   }
                   return out;
                 });
  }

  Status SaveRuleState(const RuleStateRecord& st) override {
    return tx_
        .Exec(
            "INSERT INTO ql3.notification_rule_states (rule_id, task_id, failing, suppressed, "
            "last_sent_at_ms, updated_at_ms) VALUES ($1, $2, $3, $4, $5, $6) "
            "ON CONFLICT (task_id, rule_id) DO UPDATE SET failing = EXCLUDED.failing, "
            "suppressed = EXCLUDED.suppressed, last_sent_at_ms = EXCLUDED.last_sent_at_ms, "
            "updated_at_ms = EXCLUDED.updated_at_ms",
            {P(st.rule_id), P(st.task_id), P(st.failing), P(st.suppressed), P(st.last_sent_at_ms),
             P(st.updated_at_ms)})
        .status();
  }

  Result<std::vector<ChannelStateRecord>> LoadChannelStates(
      const std::string& project_id) override {
    return Query(tx_,
                 "SELECT channel_id, window_started_at_ms, sent_in_window "
                 "FROM ql3.notification_channel_states WHERE project_id = $1",
                 {P(project_id)}, [](const Rows& r) {
                   std::vector<ChannelStateRecord> out;
                   for (int i = 0; i < r.size(); ++i) {
                     out.push_back(ChannelStateRecord{r.Text(i, 0), r.Int(i, 1), r.Int(i, 2)});
                   }
                   return out;
                 });
  }

  Status SaveChannelState(const ChannelStateRecord& st) override {
    return tx_
        .Exec(
            "INSERT INTO ql3.notification_channel_states (channel_id, project_id, "
            "window_started_at_ms, sent_in_window) SELECT id, project_id, $2::bigint, "
            "$3::bigint FROM ql3.notification_channels WHERE id = $1 "
            "ON CONFLICT (channel_id) DO UPDATE SET "
            "window_started_at_ms = EXCLUDED.window_started_at_ms, "
            "sent_in_window = EXCLUDED.sent_in_window",
            {P(st.channel_id), P(st.window_started_at_ms), P(st.sent_in_window)})
        .status();
  }

  Result<bool> InsertOutbox(const OutboxRecord& o) override {
    QL_ASSIGN_OR_RETURN(
        Rows rows,
        tx_.Exec("INSERT INTO ql3.notification_outbox (id, project_id, channel_id, rule_id, "
                 "event, task_id, run_id, payload_json, status, attempts, next_attempt_at_ms, "
                 "deadline_at_ms, created_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, "
                 "$10, $11, $12, $13) ON CONFLICT (id) DO NOTHING",
                 {P(o.id), P(o.project_id), P(o.channel_id), P(o.rule_id), P(o.event), P(o.task_id),
                  P(o.run_id), P(o.payload_json), P(o.status), P(o.attempts),
                  P(o.next_attempt_at_ms), P(o.deadline_at_ms), P(o.created_at_ms)}));
    return rows.affected() == 1;
  }

  Result<bool> AnyDue(int64_t now_ms) override {
    QL_ASSIGN_OR_RETURN(
        int64_t any,
        Query(tx_,
              "SELECT (EXISTS (SELECT 1 FROM ql3.notification_outbox WHERE status = 'pending' "
              "AND next_attempt_at_ms <= $1) OR EXISTS (SELECT 1 FROM ql3.notification_outbox "
              "WHERE status = 'delivering' AND lease_until_ms <= $1))::int",
              {P(now_ms)}, [](const Rows& r) { return r.size() == 1 ? r.Int(0, 0) : int64_t{0}; }));
    return any != 0;
  }

  Result<std::vector<OutboxRecord>> LockDue(int64_t now_ms, int limit) override {
    // Rows another claimer holds are skipped, never waited for; one it has just moved on is
    // re-checked against the conditions before it is locked.
    static const std::string kSql =
        std::string(kOutboxColumns) +
        "WHERE (status = 'pending' AND next_attempt_at_ms <= $1) "
        "OR (status = 'delivering' AND lease_until_ms <= $1) "
        "ORDER BY next_attempt_at_ms, id COLLATE \"C\" LIMIT $2 FOR UPDATE SKIP LOCKED";
    return Query(tx_, kSql, {P(now_ms), P(static_cast<int64_t>(limit))}, ReadOutbox);
  }

  Result<std::optional<OutboxRecord>> LoadOutbox(const std::string& id) override {
    static const std::string kSql = std::string(kOutboxColumns) + "WHERE id = $1";
    QL_ASSIGN_OR_RETURN(auto rows, Query(tx_, kSql, {P(id)}, ReadOutbox));
    return First(std::move(rows));
  }

  Result<bool> UpdateOutbox(const OutboxRecord& o, std::string_view expected_status,
                            const std::optional<std::string>& expected_owner) override {
    QL_ASSIGN_OR_RETURN(
        Rows rows,
        tx_.Exec(
            "UPDATE ql3.notification_outbox SET status = $2, attempts = $3, "
            "next_attempt_at_ms = $4, deadline_at_ms = $5, lease_owner = $6, "
            "lease_until_ms = $7, last_status_code = $8, last_error = $9, "
            "last_latency_ms = $10, delivered_at_ms = $11 "
            "WHERE id = $1 AND status = $12 AND lease_owner IS NOT DISTINCT FROM $13::text",
            {P(o.id), P(o.status), P(o.attempts), P(o.next_attempt_at_ms), P(o.deadline_at_ms),
             P(o.lease_owner), P(o.lease_until_ms), P(o.last_status_code), P(o.last_error),
             P(o.last_latency_ms), P(o.delivered_at_ms), P(expected_status), P(expected_owner)}));
    return rows.affected() == 1;
  }

  Result<std::vector<OutboxRecord>> ListOutbox(const DeliveryFilter& f) override {
    static const std::string kSql =
        std::string(kOutboxColumns) +
        "WHERE project_id = $1 AND ($2::boolean IS FALSE OR status = 'dead' OR "
        "(status <> 'delivered' AND attempts > 0 AND last_status_code IS DISTINCT FROM 200 AND "
        "last_error IS NOT NULL)) "
        "ORDER BY created_at_ms DESC, id COLLATE \"C\" DESC LIMIT $3";
    return Query(tx_, kSql, {P(f.project_id), P(f.failed_only), P(static_cast<int64_t>(f.limit))},
                 ReadOutbox);
  }

  Result<std::vector<std::pair<std::string, int64_t>>> CountOutbox() override {
    return Query(tx_,
                 "SELECT status, count(*) FROM ql3.notification_outbox "
                 "GROUP BY status ORDER BY status COLLATE \"C\"",
                 {}, [](const Rows& r) {
                   std::vector<std::pair<std::string, int64_t>> out;
                   for (int i = 0; i < r.size(); ++i) out.emplace_back(r.Text(i, 0), r.Int(i, 1));
                   return out;
                 });
  }

  Result<int> DeleteSettledRunless(int64_t before_ms, int limit) override {
    QL_ASSIGN_OR_RETURN(
        Rows rows,
        tx_.Exec("DELETE FROM ql3.notification_outbox WHERE id IN (SELECT id FROM "
                 "ql3.notification_outbox WHERE run_id IS NULL AND status IN ('delivered', "
                 "'dead') AND created_at_ms < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)",
                 {P(before_ms), P(static_cast<int64_t>(limit))}));
    return static_cast<int>(rows.affected());
  }

  Result<std::vector<RuleRecord>> LoadSweepRules() override {
    static const std::string kSql =
        std::string(kRuleColumns) + "WHERE event IN ('late', 'missing') ORDER BY id COLLATE \"C\"";
    return Query(tx_, kSql, {}, ReadRules);
  }

  Result<std::vector<RunRecord>> OverdueRuns(const std::string& project_id,
                                             const std::optional<std::string>& task_id,
                                             int64_t queued_before_ms, int64_t started_before_ms,
                                             int limit) override {
    static const std::string kSql =
        std::string("SELECT ") + kRunColumns + kRunFrom +
        " WHERE r.project_id = $1 AND ($2::text IS NULL OR r.task_id = $2) AND ("
        "(r.status = 'queued' AND coalesce(r.scheduled_for_ms, r.created_at_ms) <= $3) OR "
        "(r.status = 'running' AND r.started_at_ms <= $4)) ORDER BY r.created_at_ms, "
        "r.id COLLATE \"C\" LIMIT $5";
    return Query(tx_, kSql,
                 {P(project_id), P(task_id), P(queued_before_ms), P(started_before_ms),
                  P(static_cast<int64_t>(limit))},
                 [](const Rows& r) {
                   std::vector<RunRecord> out;
                   for (int i = 0; i < r.size(); ++i) out.push_back(ReadRun(r, i));
                   return out;
                 });
  }

  Result<std::optional<int64_t>> LastSuccessAt(const std::string& task_id) override {
    return Query(tx_,
                 "SELECT max(finished_at_ms) FROM ql3.runs WHERE task_id = $1 AND "
                 "status = 'succeeded'",
                 {P(task_id)}, [](const Rows& r) {
                   return r.size() == 1 ? r.OptInt(0, 0) : std::optional<int64_t>();
                 });
  }

  Result<std::optional<std::string>> TaskName(const std::string& task_id) override {
    return OneText("SELECT name FROM ql3.task_heads WHERE task_id = $1", task_id);
  }

  Result<std::optional<std::string>> TaskProject(const std::string& task_id) override {
    return OneText("SELECT project_id FROM ql3.task_heads WHERE task_id = $1", task_id);
  }

 private:
  Result<std::optional<std::string>> OneText(std::string_view sql, const std::string& arg) {
    QL_ASSIGN_OR_RETURN(Rows rows, tx_.Exec(sql, {P(arg)}));
    std::optional<std::string> out = rows.empty() ? std::nullopt : rows.OptText(0, 0);
    QL_RETURN_IF_ERROR(rows.status());
    return out;
  }

  Tx& tx_;
  const bool lock_channels_;
};

}  // namespace

std::unique_ptr<NotificationTx> NewNotificationTx(Tx& tx) {
  return std::make_unique<PgNotificationTx>(tx, /*lock_channels=*/false);
}

Status PgNotificationRunner::Run(
    NotificationTxKind kind, std::string_view operation,
    const std::function<Status(GovernanceTx&, NotificationTx&)>& body) {
  const bool admin = kind == NotificationTxKind::kConfigure;
  const bool write = admin || kind == NotificationTxKind::kWrite;
  if (admin && admin_ == nullptr) {
    return Unavailable(
        "admin_pool_missing",
        std::string(operation) + " needs the admin database URL (--admin-database-url)");
  }
  TxOptions options;
  options.read_only = !write;
  Pool& pool = admin ? *admin_ : runtime_;
  return pool.Transact(options, operation, [&](Tx& tx) {
    std::unique_ptr<GovernanceTx> governance = NewGovernanceTx(tx);
    PgNotificationTx notifications(tx, /*lock_channels=*/admin);
    return body(*governance, notifications);
  });
}

}  // namespace ql::pg
