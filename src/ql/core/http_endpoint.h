#pragma once

// The address of a QingLong HTTP listener as a client is given it
// ("http[s]://host[:port][/prefix]" or "host:port"), parsed the same way by every client (`ql`,
// `ql-worker`), and the plain-HTTP policy both clients and listeners apply: tokens cross a
// network only inside TLS unless the operator explicitly allows otherwise.

#include <string>
#include <string_view>

#include "ql/core/status.h"

namespace ql {

struct HttpEndpoint {
  std::string url;        // normalised "http[s]://host:port" plus base path, for messages
  bool tls = false;       // https
  std::string host;       // without IPv6 brackets
  int port = 80;          // 443 by default for https
  std::string base_path;  // "" or "/prefix" (no trailing slash), prepended to every path

  // Returns "http[s]://host:port" (IPv6 in brackets), the form an HTTP client connects to.
  std::string SchemeHostPort() const;
};

// How a client verifies the server and authenticates itself over https.
struct ClientTls {
  std::string ca_file;    // PEM CAs to verify the server with; empty: the system store
  std::string cert_file;  // PEM client certificate to present (with key_file), or empty
  std::string key_file;
};

// Parses `url` (a bare "host:port" is http). On error returns InvalidArgument `invalid_url`
// whose message says only what is wrong ("the port is empty", ...), for the caller to wrap with
// its own code and subject. `token_flag` is suggested instead of credentials in the URL.
Result<HttpEndpoint> ParseHttpEndpoint(std::string_view url, std::string_view token_flag);

// Returns true for "localhost", an IPv4 address in 127.0.0.0/8 and the IPv6 "::1".
bool IsLoopbackHost(std::string_view host);

// Returns `text` percent-encoded for one path segment or query value (RFC 3986 unreserved
// characters are kept, every other byte becomes %XX).
std::string PercentEncode(std::string_view text);

// Refuses plain HTTP off loopback: a client connecting to, or a listener on, a non-loopback
// `host` without TLS answers InvalidArgument `insecure_http_refused`, whose message names
// `what` (e.g. "control plane address http://10.0.0.5:5801") and `allow_flag`, unless
// `allow_insecure` (the operator passed `allow_flag`). A wildcard listen address (0.0.0.0, ::)
// is not loopback.
Status CheckPlainHttpAllowed(std::string_view host, bool tls, bool allow_insecure,
                             std::string_view what, std::string_view allow_flag);

}  // namespace ql
