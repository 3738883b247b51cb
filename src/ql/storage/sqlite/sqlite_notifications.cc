#include "ql/storage/sqlite/sqlite_notifications.h"

#include <utility>

#include "ql/storage/sqlite/sqlite_db.h"
#include "ql/storage/sqlite/sqlite_governance.h"
#include "ql/storage/sqlite/sqlite_store_rows.h"

namespace ql::sqlite {
namespace {

constexpr char kChannelColumns[] =
    "SELECT id, project_id, name, type, config_json, created_by, created_at_ms, deleted_at_ms "
    "FROM notification_channels ";

constexpr char kRuleColumns[] =
    "SELECT id, project_id, channel_id, event, task_id, mode, min_interval_ms, threshold_ms, "
    "created_by, created_at_ms FROM notification_rules ";

constexpr char kOutboxColumns[] =
    "SELECT id, project_id, channel_id, rule_id, event, task_id, run_id, payload_json, status, "
    "attempts, next_attempt_at_ms, deadline_at_ms, lease_owner, lease_until_ms, "
    "last_status_code, last_error, last_latency_ms, created_at_ms, delivered_at_ms "
    "FROM notification_outbox ";

ChannelRecord ReadChannel(const Stmt& s) {
  return ChannelRecord{s.Text(0), s.Text(1), s.Text(2), s.Text(3),
                       s.Text(4), s.Text(5), s.Int(6),  s.OptInt(7)};
}

RuleRecord ReadRule(const Stmt& s) {
  RuleRecord r;
  r.id = s.Text(0);
  r.project_id = s.Text(1);
  r.channel_id = s.Text(2);
  r.event = s.Text(3);
  r.task_id = s.OptText(4);
  r.mode = s.Text(5);
  r.min_interval_ms = s.Int(6);
  r.threshold_ms = s.OptInt(7);
  r.created_by = s.Text(8);
  r.created_at_ms = s.Int(9);
  return r;
}

OutboxRecord ReadOutbox(const Stmt& s) {
  OutboxRecord o;
  o.id = s.Text(0);
  o.project_id = s.Text(1);
  o.channel_id = s.Text(2);
  o.rule_id = s.OptText(3);
  o.event = s.Text(4);
  o.task_id = s.OptText(5);
  o.run_id = s.OptText(6);
  o.payload_json = s.Text(7);
  o.status = s.Text(8);
  o.attempts = static_cast<int>(s.Int(9));
  o.next_attempt_at_ms = s.Int(10);
  o.deadline_at_ms = s.Int(11);
  o.lease_owner = s.OptText(12);
  o.lease_until_ms = s.OptInt(13);
  if (std::optional<int64_t> code = s.OptInt(14)) o.last_status_code = static_cast<int>(*code);
  o.last_error = s.OptText(15);
  o.last_latency_ms = s.OptInt(16);
  o.created_at_ms = s.Int(17);
  o.delivered_at_ms = s.OptInt(18);
  return o;
}

template <typename Row, typename Read>
Result<std::vector<Row>> All(Stmt& s, Read read) {
  std::vector<Row> out;
  while (true) {
    QL_ASSIGN_OR_RETURN(bool more, s.Step());
    if (!more) return out;
    out.push_back(read(s));
  }
}

class SqliteNotificationTx final : public NotificationTx {
 public:
  explicit SqliteNotificationTx(Db& db) : db_(db) {}

  Status InsertChannel(const ChannelRecord& c) override {
    QL_ASSIGN_OR_RETURN(Stmt s, db_.Prepare("INSERT INTO notification_channels (id, project_id, "
                                            "name, type, config_json, created_by, created_at_ms) "
                                            "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"));
    s.BindAll(c.id, c.project_id, c.name, c.type, c.config_json, c.created_by, c.created_at_ms);
    return s.Run();
  }

  Result<std::vector<ChannelRecord>> LoadChannels(const std::string& project_id,
                                                  bool live_only) override {
    static const std::string kSql = std::string(kChannelColumns) +
                                    "WHERE project_id = ?1 AND (?2 = 0 OR deleted_at_ms IS NULL) "
                                    "ORDER BY name, created_at_ms";
    QL_ASSIGN_OR_RETURN(Stmt s, db_.Prepare(kSql));
    s.BindAll(project_id, live_only);
    return All<ChannelRecord>(s, ReadChannel);
  }

  Result<std::optional<ChannelRecord>> LoadChannel(const std::string& id) override {
    static const std::string kSql = std::string(kChannelColumns) + "WHERE id = ?1";
    QL_ASSIGN_OR_RETURN(Stmt s, db_.Prepare(kSql));
    s.BindAll(id);
    QL_ASSIGN_OR_RETURN(std::vector<ChannelRecord> rows, All<ChannelRecord>(s, ReadChannel));
    if (rows.empty()) return std::optional<ChannelRecord>();
    return std::optional<ChannelRecord>(std::move(rows.front()));
  }

  Status MarkChannelDeleted(const std::string& id, int64_t now_ms) override {
    QL_ASSIGN_OR_RETURN(Stmt s, db_.Prepare("UPDATE notification_channels SET deleted_at_ms = ?2 "
                                            "WHERE id = ?1 AND deleted_at_ms IS NULL"));
    s.BindAll(id, now_ms);
    return s.Run();
  }

  Status InsertRule(const RuleRecord& r) override {
    QL_ASSIGN_OR_RETURN(
        Stmt s, db_.Prepare("INSERT INTO notification_rules (id, project_id, channel_id, event, "
                            "task_id, mode, min_interval_ms, threshold_ms, created_by, "
                            "created_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"));
    s.BindAll(r.id, r.project_id, r.channel_id, r.event, r.task_id, r.mode, r.min_interval_ms,
              r.threshold_ms, r.created_by, r.created_at_ms);
    return s.Run();
  }

  Result<std::vector<RuleRecord>> LoadRules(const std::string& project_id,
                                            const std::optional<std::string>& task_id) override {
    static const std::string kSql =
        std::string(kRuleColumns) +
        "WHERE project_id = ?1 AND (?2 IS NULL OR task_id IS NULL OR task_id = ?2) ORDER BY id";
    QL_ASSIGN_OR_RETURN(Stmt s, db_.Prepare(kSql));
    s.BindAll(project_id, task_id);
    return All<RuleRecord>(s, ReadRule);
  }

  Status DeleteRules(const std::string& project_id, const std::optional<std::string>& rule_id,
                     const std::optional<std::string>& channel_id) override {
    QL_ASSIGN_OR_RETURN(Stmt s, db_.Prepare("DELETE FROM notification_rules WHERE project_id = ?1 "
                                            "AND (?2 IS NULL OR id = ?2) "
                                            "AND (?3 IS NULL OR channel_id = ?3)"));
    s.BindAll(project_id, rule_id, channel_id);
    return s.Run();
  }

  Result<std::vector<RuleStateRecord>> LoadRuleStates(const std::string& task_id) override {
    QL_ASSIGN_OR_RETURN(Stmt s, db_.Prepare("SELECT rule_id, task_id, failing, suppressed, "
                                            "last_sent_at_ms, updated_at_ms FROM "
                                            "notification_rule_states WHERE task_id = ?1"));
    s.BindAll(task_id);
    return All<RuleStateRecord>(s, [](const Stmt& r) {
      return RuleStateRecord{r.Text(0), r.Text(1), r.Bool(2), r.Int(3), r.OptInt(4), r.Int(5)};
    });
  }

  Status SaveRuleState(const RuleStateRecord& st) override {
    QL_ASSIGN_OR_RETURN(
        Stmt s, db_.Prepare("INSERT INTO notification_rule_states (rule_id, task_id, failing, "
                            "suppressed, last_sent_at_ms, updated_at_ms) "
                            "VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (task_id, rule_id) DO "
                            "UPDATE SET failing = ?3, suppressed = ?4, last_sent_at_ms = ?5, "
                            "updated_at_ms = ?6"));
    s.BindAll(st.rule_id, st.task_id, st.failing, st.suppressed, st.last_sent_at_ms,
              st.updated_at_ms);
    return s.Run();
  }

  Result<std::vector<ChannelStateRecord>> LoadChannelStates(
      const std::string& project_id) override {
    QL_ASSIGN_OR_RETURN(Stmt s, db_.Prepare("SELECT channel_id, window_started_at_ms, "
                                            "sent_in_window FROM notification_channel_states "
                                            "WHERE project_id = ?1"));
    s.BindAll(project_id);
    return All<ChannelStateRecord>(s, [](const Stmt& r) {
      return ChannelStateRecord{r.Text(0), r.Int(1), r.Int(2)};
    });
  }

  Status SaveChannelState(const ChannelStateRecord& st) override {
    QL_ASSIGN_OR_RETURN(
        Stmt s, db_.Prepare("INSERT INTO notification_channel_states (channel_id, project_id, "
                            "window_started_at_ms, sent_in_window) SELECT ?1, project_id, ?2, ?3 "
                            "FROM notification_channels WHERE id = ?1 ON CONFLICT (channel_id) "
                            "DO UPDATE SET window_started_at_ms = ?2, sent_in_window = ?3"));
    s.BindAll(st.channel_id, st.window_started_at_ms, st.sent_in_window);
    return s.Run();
  }

  Result<bool> InsertOutbox(const OutboxRecord& o) override {
    QL_ASSIGN_OR_RETURN(
        Stmt s,
        db_.Prepare("INSERT INTO notification_outbox (id, project_id, channel_id, rule_id, event, "
                    "task_id, run_id, payload_json, status, attempts, next_attempt_at_ms, "
                    "deadline_at_ms, created_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, "
                    "?10, ?11, ?12, ?13) ON CONFLICT (id) DO NOTHING"));
    s.BindAll(o.id, o.project_id, o.channel_id, o.rule_id, o.event, o.task_id, o.run_id,
              o.payload_json, o.status, o.attempts, o.next_attempt_at_ms, o.deadline_at_ms,
              o.created_at_ms);
    QL_RETURN_IF_ERROR(s.Run());
    return db_.Changes() == 1;
  }

  Result<bool> AnyDue(int64_t now_ms) override {
    QL_ASSIGN_OR_RETURN(
        Stmt s, db_.Prepare("SELECT EXISTS (SELECT 1 FROM notification_outbox INDEXED BY "
                            "notification_outbox_due WHERE status = 'pending' AND "
                            "next_attempt_at_ms <= ?1) OR EXISTS (SELECT 1 FROM "
                            "notification_outbox INDEXED BY notification_outbox_leased WHERE "
                            "status = 'delivering' AND lease_until_ms <= ?1)"));
    s.BindAll(now_ms);
    QL_ASSIGN_OR_RETURN(bool row, s.Step());
    return row && s.Int(0) != 0;
  }

  Result<std::vector<OutboxRecord>> LockDue(int64_t now_ms, int limit) override {
    // One writer at a time holds the database: nothing to skip.
    static const std::string kSql =
        "SELECT * FROM (" + std::string(kOutboxColumns) +
        "INDEXED BY notification_outbox_due WHERE status = 'pending' AND next_attempt_at_ms <= ?1 "
        "UNION ALL " +
        kOutboxColumns +
        "INDEXED BY notification_outbox_leased WHERE status = 'delivering' AND "
        "lease_until_ms <= ?1) ORDER BY next_attempt_at_ms, id LIMIT ?2";
    QL_ASSIGN_OR_RETURN(Stmt s, db_.Prepare(kSql));
    s.BindAll(now_ms, limit);
    return All<OutboxRecord>(s, ReadOutbox);
  }

  Result<std::optional<OutboxRecord>> LoadOutbox(const std::string& id) override {
    static const std::string kSql = std::string(kOutboxColumns) + "WHERE id = ?1";
    QL_ASSIGN_OR_RETURN(Stmt s, db_.Prepare(kSql));
    s.BindAll(id);
    QL_ASSIGN_OR_RETURN(std::vector<OutboxRecord> rows, All<OutboxRecord>(s, ReadOutbox));
    if (rows.empty()) return std::optional<OutboxRecord>();
    return std::optional<OutboxRecord>(std::move(rows.front()));
  }

  Result<bool> UpdateOutbox(const OutboxRecord& o, std::string_view expected_status,
                            const std::optional<std::string>& expected_owner) override {
    QL_ASSIGN_OR_RETURN(
        Stmt s, db_.Prepare("UPDATE notification_outbox SET status = ?2, attempts = ?3, "
                            "next_attempt_at_ms = ?4, deadline_at_ms = ?5, lease_owner = ?6, "
                            "lease_until_ms = ?7, last_status_code = ?8, last_error = ?9, "
                            "last_latency_ms = ?10, delivered_at_ms = ?11 "
                            "WHERE id = ?1 AND status = ?12 AND lease_owner IS ?13"));
    s.BindAll(o.id, o.status, o.attempts, o.next_attempt_at_ms, o.deadline_at_ms, o.lease_owner,
              o.lease_until_ms, o.last_status_code, o.last_error, o.last_latency_ms,
              o.delivered_at_ms, expected_status, expected_owner);
    QL_RETURN_IF_ERROR(s.Run());
    return db_.Changes() == 1;
  }

  Result<std::vector<OutboxRecord>> ListOutbox(const DeliveryFilter& f) override {
    static const std::string kSql =
        std::string(kOutboxColumns) +
        "WHERE project_id = ?1 AND (?2 = 0 OR status = 'dead' OR (status <> 'delivered' AND "
        "attempts > 0 AND last_status_code IS NOT 200 AND last_error IS NOT NULL)) "
        "ORDER BY created_at_ms DESC, id DESC LIMIT ?3";
    QL_ASSIGN_OR_RETURN(Stmt s, db_.Prepare(kSql));
    s.BindAll(f.project_id, f.failed_only, f.limit);
    return All<OutboxRecord>(s, ReadOutbox);
  }

  Result<std::vector<std::pair<std::string, int64_t>>> CountOutbox() override {
    QL_ASSIGN_OR_RETURN(Stmt s, db_.Prepare("SELECT status, count(*) FROM notification_outbox "
                                            "GROUP BY status ORDER BY status"));
    return All<std::pair<std::string, int64_t>>(
        s, [](const Stmt& r) { return std::make_pair(r.Text(0), r.Int(1)); });
  }

  Result<int> DeleteSettledRunless(int64_t before_ms, int limit) override {
    QL_ASSIGN_OR_RETURN(Stmt s,
                        db_.Prepare("DELETE FROM notification_outbox WHERE id IN (SELECT id FROM "
                                    "notification_outbox WHERE run_id IS NULL AND status IN "
                                    "('delivered', 'dead') AND created_at_ms < ?1 LIMIT ?2)"));
    s.BindAll(before_ms, limit);
    QL_RETURN_IF_ERROR(s.Run());
    return static_cast<int>(db_.Changes());
  }

  Result<std::vector<RuleRecord>> LoadSweepRules() override {
    static const std::string kSql =
        std::string(kRuleColumns) + "WHERE event IN ('late', 'missing') ORDER BY id";
    QL_ASSIGN_OR_RETURN(Stmt s, db_.Prepare(kSql));
    return All<RuleRecord>(s, ReadRule);
  }

  Result<std::vector<RunRecord>> OverdueRuns(const std::string& project_id,
                                             const std::optional<std::string>& task_id,
                                             int64_t queued_before_ms, int64_t started_before_ms,
                                             int limit) override {
    static const std::string kSql =
        std::string("SELECT ") + kRunColumns + kRunFrom +
        " WHERE r.project_id = ?1 AND (?2 IS NULL OR r.task_id = ?2) AND ("
        "(r.status = 'queued' AND coalesce(r.scheduled_for_ms, r.created_at_ms) <= ?3) OR "
        "(r.status = 'running' AND r.started_at_ms <= ?4)) ORDER BY r.created_at_ms, r.id "
        "LIMIT ?5";
    QL_ASSIGN_OR_RETURN(Stmt s, db_.Prepare(kSql));
    s.BindAll(project_id, task_id, queued_before_ms, started_before_ms, limit);
    return All<RunRecord>(s, ReadRun);
  }

  Result<std::optional<int64_t>> LastSuccessAt(const std::string& task_id) override {
    QL_ASSIGN_OR_RETURN(Stmt s, db_.Prepare("SELECT max(finished_at_ms) FROM runs WHERE "
                                            "task_id = ?1 AND status = 'succeeded'"));
    s.BindAll(task_id);
    QL_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) return std::optional<int64_t>();
    return s.OptInt(0);
  }

  Result<std::optional<std::string>> TaskName(const std::string& task_id) override {
    return OneText("SELECT name FROM task_heads WHERE task_id = ?1", task_id);
  }

  Result<std::optional<std::string>> TaskProject(const std::string& task_id) override {
    return OneText("SELECT project_id FROM task_heads WHERE task_id = ?1", task_id);
  }

 private:
  Result<std::optional<std::string>> OneText(std::string_view sql, const std::string& arg) {
    QL_ASSIGN_OR_RETURN(Stmt s, db_.Prepare(sql));
    s.BindAll(arg);
    QL_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) return std::optional<std::string>();
    return s.OptText(0);
  }

  Db& db_;
};

}  // namespace

std::unique_ptr<NotificationTx> NewNotificationTx(Db& db) {
  return std::make_unique<SqliteNotificationTx>(db);
}

Status SqliteNotificationRunner::Run(
    NotificationTxKind kind, std::string_view operation,
    const std::function<Status(GovernanceTx&, NotificationTx&)>& body) {
  const TxMode mode = kind == NotificationTxKind::kRead ? TxMode::kRead : TxMode::kWrite;
  return db_.Transact(mode, operation, [&](Tx&) {
    std::unique_ptr<GovernanceTx> governance = NewGovernanceTx(db_);
    SqliteNotificationTx tx(db_);
    return body(*governance, tx);
  });
}

}  // namespace ql::sqlite
