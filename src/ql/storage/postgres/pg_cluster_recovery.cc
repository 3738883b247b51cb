#include "ql/storage/postgres/pg_cluster_recovery.h"

namespace ql {

using pg::P;
using pg::Rows;
using pg::Tx;

Result<std::vector<RecoveryCandidate>> PostgresClusterRecovery::ListRecoveryCandidates(
    const std::string& after_run_id, int limit, RecoveryScope scope) {
  if (limit < 1 || limit > 1000) {
    return InvalidArgument("invalid_limit",
                           "limit " + std::to_string(limit) + " is outside 1..1000");
  }
  // The exclusion rule of DESIGN §5.2: a pristine admission is not abandoned work.
#define QL_RECOVERY_SQL(STATUSES)                                                              \
  "WITH clock AS MATERIALIZED (SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint " \
  "AS now_ms) "                                                                                \
  "SELECT r.id, a.id, r.status, a.status, "                                                    \
  "EXISTS (SELECT 1 FROM ql3.run_dispatch_leases l WHERE l.attempt_id = a.id AND "             \
  "l.status = 'granted' AND l.expires_at_ms > clock.now_ms), "                                 \
  "(a.started_at_ms IS NULL AND a.callback_sequence = 0) "                                     \
  "FROM ql3.runs r CROSS JOIN clock "                                                          \
  "JOIN LATERAL (SELECT * FROM ql3.run_attempts x WHERE x.run_id = r.id "                      \
  "ORDER BY x.attempt DESC LIMIT 1) a ON true "                                                \
  "WHERE r.status IN (" STATUSES                                                               \
  ") "                                                                                         \
  "AND r.id > $1 AND a.executor_type = 'remote_worker' "                                       \
  "AND NOT (r.status = 'queued' AND r.cancel_requested_at_ms IS NULL AND "                     \
  "r.queued_at_ms IS NOT NULL AND a.status = 'claimed' AND a.callback_sequence = 0 AND "       \
  "a.worker_id IS NULL AND a.worker_session_id IS NULL AND a.session_generation IS NULL AND "  \
  "a.lease_expires_at_ms IS NULL AND a.offer_id IS NULL AND a.pid IS NULL AND "                \
  "a.process_start_ticks IS NULL AND a.log_path IS NULL AND a.started_at_ms IS NULL AND "      \
  "a.finished_at_ms IS NULL AND a.exit_code IS NULL AND a.error_code IS NULL AND "             \
  "a.error_summary IS NULL AND "                                                               \
  "NOT EXISTS (SELECT 1 FROM ql3.run_dispatch_leases l WHERE l.attempt_id = a.id)) "           \
  "ORDER BY r.id LIMIT $2"
  static constexpr char kAllSql[] =
      QL_RECOVERY_SQL("'created', 'queued', 'dispatching', 'running', 'lost'");
  static constexpr char kBeyondQueueSql[] =
      QL_RECOVERY_SQL("'created', 'dispatching', 'running', 'lost'");
#undef QL_RECOVERY_SQL
  const char* sql = scope == RecoveryScope::kAll ? kAllSql : kBeyondQueueSql;
  std::vector<RecoveryCandidate> out;
  QL_RETURN_IF_ERROR(pool_.Transact(
      {pg::Isolation::kRepeatableRead, true}, "listing recovery candidates", [&](Tx& tx) -> Status {
        out.clear();
        QL_ASSIGN_OR_RETURN(Rows rows, tx.Exec(sql, {P(after_run_id), P(limit)}));
        for (int i = 0; i < rows.size(); ++i) {
          out.push_back({rows.Text(i, 0), rows.Text(i, 1), rows.Text(i, 2), rows.Text(i, 3),
                         rows.Bool(i, 4), rows.Bool(i, 5)});
        }
        return rows.status();
      }));
  return out;
}

}  // namespace ql
