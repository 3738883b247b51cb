#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "ql/core/status.h"
#include "ql/http/listener_tls.h"

namespace ql {

// Parses "HOST:PORT" (port 0..65535; 0 picks a free port). InvalidArgument
// `invalid_listen_address` naming `flag` and the value otherwise.
Result<std::pair<std::string, int>> ParseListenAddress(const std::string& listen,
                                                       const std::string& flag = "--listen");

// The TLS flags of a listening command: `--tls-cert`, `--tls-key`, `--tls-client-ca`,
// `--allow-insecure-http`.
struct ListenSecurityFlags {
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
  bool allow_insecure_http = false;
};

// Decides how a listener on `host` (from `listen_flag`) serves: TLS with the files of `flags`,
// or plain (nullopt). InvalidArgument `tls_flags_incomplete` when only one of --tls-cert and
// --tls-key is given, or --tls-client-ca without them; `insecure_http_refused` for plain HTTP
// on a non-loopback host without --allow-insecure-http.
Result<std::optional<ListenerTls>> DecideListenSecurity(const std::string& host,
                                                        const ListenSecurityFlags& flags,
                                                        std::string_view listen_flag);

}  // namespace ql
