// libql-notify.so: the wire of notifications for ql-local (libcurl and its TLS library), loaded
// only when a notification is due (DESIGN §14).

#include "ql/notify/curl_sender.h"

extern "C" __attribute__((visibility("default"))) ql::NotificationSender* ql_notify_create_sender(
    bool allow_loopback) {
  ql::notify::CurlSenderOptions options;
  options.allow_loopback = allow_loopback;
  return new ql::notify::CurlSender(options);
}
