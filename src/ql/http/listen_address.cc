#include "ql/http/listen_address.h"

#include "ql/core/http_endpoint.h"

namespace ql {

Result<std::pair<std::string, int>> ParseListenAddress(const std::string& listen,
                                                       const std::string& flag) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == listen.size()) {
    return InvalidArgument("invalid_listen_address",
                           flag + " '" + listen + "' must be HOST:PORT, e.g. 127.0.0.1:5700");
  }
  const std::string port_text = listen.substr(colon + 1);
  if (port_text.size() > 5 || port_text.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(port_text) > 65535) {
    return InvalidArgument("invalid_listen_address",
                           "port '" + port_text + "' in " + flag + " is not a number in 0..65535");
  }
  return std::make_pair(listen.substr(0, colon), std::stoi(port_text));
}

Result<std::optional<ListenerTls>> DecideListenSecurity(const std::string& host,
                                                        const ListenSecurityFlags& flags,
                                                        std::string_view listen_flag) {
  if (flags.tls_cert.empty() != flags.tls_key.empty() ||
      (!flags.tls_client_ca.empty() && flags.tls_cert.empty())) {
    return InvalidArgument("tls_flags_incomplete",
                           "TLS needs both --tls-cert and --tls-key (and --tls-client-ca only "
                           "with them)");
  }
  std::optional<ListenerTls> tls;
  if (!flags.tls_cert.empty()) {
    tls = ListenerTls{flags.tls_cert, flags.tls_key, flags.tls_client_ca};
  }
  QL_RETURN_IF_ERROR(CheckPlainHttpAllowed(host, tls.has_value(), flags.allow_insecure_http,
                                           std::string(listen_flag) + " " + host,
                                           "--allow-insecure-http"));
  return tls;
}

}  // namespace ql
