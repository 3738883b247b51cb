#pragma once

// Internal to the SQLite adapter: the notification primitives (core/notification_store.h) over
// one connection, and the runner that gives them a transaction together with the governance
// primitives of the same transaction. NewNotificationTx lets the run transitions and the
// approvals write the outbox inside their own transaction.

#include <memory>

#include "ql/core/notification_store.h"

namespace ql::sqlite {

class Db;

// The primitives over `db`, inside whatever transaction `db` has open.
std::unique_ptr<NotificationTx> NewNotificationTx(Db& db);

// Runs reads as BEGIN and writes as BEGIN IMMEDIATE transactions of `db`.
class SqliteNotificationRunner final : public NotificationTxRunner {
 public:
  explicit SqliteNotificationRunner(Db& db) : db_(db) {}
  Status Run(NotificationTxKind kind, std::string_view operation,
             const std::function<Status(GovernanceTx&, NotificationTx&)>& body) override;

 private:
  Db& db_;
};

}  // namespace ql::sqlite
