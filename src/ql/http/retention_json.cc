#include "ql/http/retention_json.h"

#include <optional>
#include <string>
#include <string_view>

#include "ql/core/rfc3339.h"
#include "ql/http/api_json.h"

namespace ql::api {
namespace {

using nlohmann::json;

json Optional(const std::optional<int>& value) {
  return value.has_value() ? json(*value) : json(nullptr);
}

// Reads one field of the body into `slot` (see ApplyRetentionBody).
Status ApplyField(const json& body, std::string_view name, int max, const char* reason,
                  std::optional<int>& slot) {
  const auto it = body.find(std::string(name));
  if (it == body.end()) return Status::Ok();
  if (it->is_null()) {
    slot.reset();
    return Status::Ok();
  }
  QL_ASSIGN_OR_RETURN(std::optional<int64_t> value, OptionalInteger(body, name));
  if (*value < 1 || *value > max) {
    return InvalidArgument(reason, std::string(name) + " must be 1.." + std::to_string(max) +
                                       ", got " + std::to_string(*value));
  }
  slot = static_cast<int>(*value);
  return Status::Ok();
}

}  // namespace

json RetentionJson(const RetentionView& view) {
  const RetentionRecord& r = view.stored;
  return json{
      {"project_id", r.project_id},
      {"task_id", r.task_id.empty() ? json(nullptr) : json(r.task_id)},
      {"keep_days", Optional(r.settings.keep_days)},
      {"keep_runs", Optional(r.settings.keep_runs)},
      {"version", r.version},
      {"updated_at", r.version == 0 ? json(nullptr) : json(FormatRfc3339Utc(r.updated_at_ms))},
      {"effective",
       {{"keep_days", view.effective.keep_days}, {"keep_runs", view.effective.keep_runs}}}};
}

Result<RetentionSettings> ApplyRetentionBody(const json& body, const RetentionSettings& current) {
  QL_RETURN_IF_ERROR(CheckFields(body, {"keep_days", "keep_runs"}));
  RetentionSettings out = current;
  QL_RETURN_IF_ERROR(ApplyField(body, "keep_days", kMaxKeepDays, "invalid_keep_days",
                                out.keep_days));
  QL_RETURN_IF_ERROR(ApplyField(body, "keep_runs", kMaxKeepRuns, "invalid_keep_runs",
                                out.keep_runs));
  return out;
}

}  // namespace ql::api
