#include "ql/core/status.h"

namespace ql {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid_argument";
    case StatusCode::kNotFound: return "not_found";
    case StatusCode::kConflict: return "conflict";
    case StatusCode::kDuplicate: return "duplicate";
    case StatusCode::kBusy: return "busy";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kOutcomeUnknown: return "outcome_unknown";
    case StatusCode::kCorrupt: return "corrupt";
    case StatusCode::kInternal: return "internal";
    case StatusCode::kPermissionDenied: return "permission_denied";
  }
  return "internal";
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  return reason_ + ": " + message_;
}

Status InvalidArgument(std::string r, std::string m) {
  return Status(StatusCode::kInvalidArgument, std::move(r), std::move(m));
}
Status NotFound(std::string r, std::string m) {
  return Status(StatusCode::kNotFound, std::move(r), std::move(m));
}
Status Conflict(std::string r, std::string m) {
  return Status(StatusCode::kConflict, std::move(r), std::move(m));
}
Status Duplicate(std::string r, std::string m) {
  return Status(StatusCode::kDuplicate, std::move(r), std::move(m));
}
Status Busy(std::string r, std::string m) {
  return Status(StatusCode::kBusy, std::move(r), std::move(m));
}
Status Unavailable(std::string r, std::string m) {
  return Status(StatusCode::kUnavailable, std::move(r), std::move(m));
}
Status OutcomeUnknown(std::string r, std::string m) {
  return Status(StatusCode::kOutcomeUnknown, std::move(r), std::move(m));
}
Status Corrupt(std::string r, std::string m) {
  return Status(StatusCode::kCorrupt, std::move(r), std::move(m));
}
Status Internal(std::string r, std::string m) {
  return Status(StatusCode::kInternal, std::move(r), std::move(m));
}
Status PermissionDenied(std::string r, std::string m) {
  return Status(StatusCode::kPermissionDenied, std::move(r), std::move(m));
}

}  // namespace ql
