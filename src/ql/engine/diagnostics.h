#pragma once

#include <functional>
#include <string_view>

#include "ql/core/status.h"

namespace ql {

// The low-sensitivity diagnostic log a composition root hands to the loops it owns: one line
// per call, naming the component and a Status (its reason and message). Callers never put a
// URL, a token, a payload or a command line into it.
using DiagnosticLog = std::function<void(std::string_view component, const Status& status)>;

}  // namespace ql
