#pragma once

// The variables QingLong gives a command about its run, beside the task's own environment and
// QL_RUN_ID / QL_ATTEMPT_ID:
//   TZ                the trigger's zone (cron runs); UTC for runs started by hand
//   LANG              C.UTF-8
//   QL_TASK_NAME      the task's name
//   QL_PROJECT        the project's slug (its id when it cannot be read)
//   QL_SCHEDULED_FOR  RFC 3339 in TZ: the occurrence a cron run was admitted for; for a run
//                     started by hand, when it was asked for
// A variable the task's environment sets itself keeps the task's value.

#include <string>
#include <utility>
#include <vector>

#include "ql/core/ports.h"
#include "ql/core/records.h"
#include "ql/core/status.h"

namespace ql {

using EnvironmentList = std::vector<std::pair<std::string, std::string>>;

// Returns the variables above for `run` that `task_environment` does not set. Reads the task's
// name, the trigger's zone and the project; a store error is returned (the caller fails the
// attempt's start, to be tried again), an object that is gone leaves its variable out.
Result<EnvironmentList> RunContextEnvironment(DefinitionRepository& definitions,
                                              ProjectRepository* projects, const RunRecord& run,
                                              const EnvironmentList& task_environment);

}  // namespace ql
