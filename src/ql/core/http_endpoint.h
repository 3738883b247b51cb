#pragma once

// The address of a QingLong HTTP listener as a client is given it ("http://host[:port][/prefix]"
// or "host:port"), parsed the same way by every client (`ql`, `ql-worker`). Clients speak plain
// http only; TLS is terminated in front of them.

#include <string>
#include <string_view>

#include "ql/core/status.h"

namespace ql {

struct HttpEndpoint {
  std::string url;   // normalised "http://host:port" plus base path, for messages
  std::string host;  // without IPv6 brackets
  int port = 80;
  std::string base_path;  // "" or "/prefix" (no trailing slash), prepended to every path
};

// Parses `url`. On error returns InvalidArgument `invalid_url` whose message says only what is
// wrong ("the port is empty", ...), for the caller to wrap with its own code and subject.
// `program` names the client in the https refusal; `token_flag` is suggested instead of
// credentials in the URL.
Result<HttpEndpoint> ParseHttpEndpoint(std::string_view url, std::string_view program,
                                       std::string_view token_flag);

}  // namespace ql
