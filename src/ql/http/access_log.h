#pragma once

// What the daemon log says about one HTTP request (the access log and slow requests). Private
// to ql_http.

#include <cstdint>
#include <string_view>
#include <vector>

#include "ql/core/event_log.h"
#include "ql/http/http_message.h"

namespace ql::http {

// Returns the fields of one answered request: method, path (never the query string), the
// query's parameter names only (`query=a,b`, never their values), status, bytes of the answer's
// body, duration in milliseconds, the peer's address, the route's name and the principal's name
// when known. No header, cookie, token or body is ever read for it. Path and names are cut at
// 256 bytes.
std::vector<LogField> AccessLogFields(const Request& req, int status, int64_t bytes,
                                      int64_t duration_ms, std::string_view route,
                                      std::string_view principal);

}  // namespace ql::http
