#pragma once

// The notification flags shared by ql-local and ql-cluster (README "Notifications"), and the
// delivery options they give.

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "ql/engine/notification_delivery.h"

namespace ql {

struct NotifyFlags {
  std::string public_url;  // where run links in messages point
  bool allow_loopback = false;
  int64_t retry_base_ms = 10'000;
  int64_t timeout_ms = 10'000;
};

// Adds --public-url, --notify-allow-loopback, --notify-retry-base and --notify-timeout to
// `command`, filling `flags`.
inline void AddNotifyFlags(CLI::App& command, NotifyFlags& flags) {
  command.add_option("--public-url", flags.public_url,
                     "The panel's address as people reach it (links in notifications)");
  command.add_flag("--notify-allow-loopback", flags.allow_loopback,
                   "Allow notifications to loopback and link-local addresses (refused by "
                   "default: the server's own API and metadata services live there)");
  command
      .add_option("--notify-retry-base", flags.retry_base_ms,
                  "Milliseconds before a failed notification's first retry (doubling after)")
      ->check(CLI::Range(int64_t{100}, int64_t{3'600'000}));
  command
      .add_option("--notify-timeout", flags.timeout_ms,
                  "Milliseconds one notification attempt may take")
      ->check(CLI::Range(int64_t{100}, int64_t{60'000}));
}

// The delivery loop's options for lease owner `owner`. A send is cut off at its timeout; the
// lease outlasts it, so only a dead sender loses it.
inline NotificationDeliveryOptions DeliveryOptions(const NotifyFlags& flags, std::string owner) {
  NotificationDeliveryOptions options;
  options.owner = std::move(owner);
  options.public_url = flags.public_url;
  options.retry_base_ms = flags.retry_base_ms;
  options.send_timeout_ms = flags.timeout_ms;
  options.lease_ms = 3 * flags.timeout_ms + 1000;
  return options;
}

}  // namespace ql
