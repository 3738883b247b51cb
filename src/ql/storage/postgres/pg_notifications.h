#pragma once

// Internal to the PostgreSQL adapter: the notification primitives (core/notification_store.h)
// over one transaction, and the runner that picks the role. NewNotificationTx lets the run
// transitions, the cron admissions and the approvals write the outbox inside their own
// transaction.
//
// Roles: channels and rules are project configuration, written (created, deleted) by the admin
// role as definitions and secrets are, and so is a redelivery (an operator's write under the
// fence, with its audit fact); reads, the outbox rows a transition or admission writes, channel
// tests, and the delivery loop's claims and records run as the runtime role (grants.sql).
//
// Concurrency: the delivery loop locks due rows FOR UPDATE SKIP LOCKED, so two replicas never
// claim the same row, and every later write of a row compares its status and lease owner. The
// outcome of a run (or an approval change) whose task has rules takes a transaction-level advisory lock on its project
// (kNotifyLockClass) before it reads the rules' and channels' state, so two runs of a project
// that end at once update that state one after the other, as on SQLite.

#include <cstdint>
#include <memory>

#include "ql/core/notification_store.h"
#include "ql/storage/postgres/pg_client.h"

namespace ql::pg {

// The first key of the advisory lock a run outcome takes on its project ("qlnt" in ASCII).
inline constexpr int32_t kNotifyLockClass = 0x716c6e74;

// The primitives over `tx`, inside its transaction.
std::unique_ptr<NotificationTx> NewNotificationTx(Tx& tx);

class PgNotificationRunner final : public NotificationTxRunner {
 public:
  // Channel and rule writes and redeliveries fail with Unavailable `admin_pool_missing` without
  // an admin pool.
  PgNotificationRunner(Pool& runtime, Pool* admin) : runtime_(runtime), admin_(admin) {}
  Status Run(NotificationTxKind kind, std::string_view operation,
             const std::function<Status(GovernanceTx&, NotificationTx&)>& body) override;

 private:
  Pool& runtime_;
  Pool* admin_;
};

}  // namespace ql::pg
