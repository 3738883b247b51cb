#pragma once

#include <string>
#include <utility>

#include "ql/core/status.h"

namespace ql {

// Parses "HOST:PORT" (port 0..65535; 0 picks a free port). InvalidArgument
// `invalid_listen_address` naming `flag` and the value otherwise.
Result<std::pair<std::string, int>> ParseListenAddress(const std::string& listen,
                                                       const std::string& flag = "--listen");

}  // namespace ql
