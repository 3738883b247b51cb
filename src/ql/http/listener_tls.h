#pragma once

// The TLS settings of an HTTP listener (`--tls-cert`, `--tls-key`, `--tls-client-ca`).

#include <string>

namespace ql {

struct ListenerTls {
  std::string cert_file;  // PEM certificate chain, leaf first
  std::string key_file;   // PEM private key of the leaf
  // When set, PEM certificate authorities: a client must present a certificate one of them
  // signed, or its handshake fails.
  std::string client_ca_file;
};

// Returns true when this build has TLS (CMake option QL_TLS).
bool TlsAvailable();

}  // namespace ql
