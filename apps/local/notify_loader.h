#pragma once

// Opens libql-notify.so (beside the executable, or $QL_NOTIFY_MODULE) and makes the sender of
// notifications. ql-local calls it only when a notification is due, so an edge daemon without
// channels never maps libcurl. Unavailable `notify_module_unavailable` when it cannot be opened.

#include <memory>

#include "ql/core/status.h"
#include "ql/engine/notification_delivery.h"

namespace ql {

Result<std::unique_ptr<NotificationSender>> LoadNotificationSender(bool allow_loopback);

}  // namespace ql
