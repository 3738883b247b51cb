#pragma once

// The wire form of retention settings (docs/api.md): GET and POST
// /api/v1/projects/{id}/retention and /api/v1/tasks/{id}/retention.

#include <nlohmann/json.hpp>

#include "ql/core/retention.h"
#include "ql/core/status.h"
#include "ql/engine/retention_service.h"

namespace ql::api {

// {project_id, task_id (null for a project), keep_days, keep_runs (null = inherited), version,
//  updated_at (null when never set), effective: {keep_days, keep_runs}}.
nlohmann::json RetentionJson(const RetentionView& view);

// Applies a POST body to `current`: a field left out keeps its value, null clears it (inherit),
// an integer sets it. Errors (InvalidArgument): unknown_field, invalid_type, invalid_keep_days,
// invalid_keep_runs.
Result<RetentionSettings> ApplyRetentionBody(const nlohmann::json& body,
                                             const RetentionSettings& current);

}  // namespace ql::api
