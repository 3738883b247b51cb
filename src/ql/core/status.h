#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace ql {

// The short list of failure categories. Each tells the caller to do something different.
enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // the input is wrong; fix it and do not retry as is
  kNotFound,         // the named thing does not exist
  kConflict,         // a version, revision or fence was lost to someone else
  kDuplicate,        // the thing (id, key, mutation) already exists
  kBusy,             // transiently busy (lock timeout, SQLITE_BUSY); retryable
  kUnavailable,      // the store or peer cannot be reached; retryable later
  kOutcomeUnknown,   // a commit may or may not have happened; reconcile, never blindly retry
  kCorrupt,          // stored data or a contract check does not hold; fail closed
  kInternal,         // a bug or an unexpected environment failure
  kPermissionDenied, // the acting principal's role does not allow it (or it is disabled)
};

// Returns the lowercase snake_case name of `code` ("invalid_argument", "conflict", ...).
std::string_view StatusCodeName(StatusCode code);

// A value-typed outcome: ok, or a category, a stable machine-readable reason (for example
// "cron_field_out_of_range") and a human message that names the problem.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string reason, std::string message)
      : code_(code), reason_(std::move(reason)), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  // Returns the stable reason code; for ok statuses it is empty.
  const std::string& reason() const { return reason_; }
  const std::string& message() const { return message_; }
  // Returns "reason: message" (or "ok").
  std::string ToString() const;

  bool operator==(const Status&) const = default;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string reason_;
  std::string message_;
};

// Builders for each category; `reason` is the stable code, `message` names the problem.
Status InvalidArgument(std::string reason, std::string message);
Status NotFound(std::string reason, std::string message);
Status Conflict(std::string reason, std::string message);
Status Duplicate(std::string reason, std::string message);
Status Busy(std::string reason, std::string message);
Status Unavailable(std::string reason, std::string message);
Status OutcomeUnknown(std::string reason, std::string message);
Status Corrupt(std::string reason, std::string message);
Status Internal(std::string reason, std::string message);
Status PermissionDenied(std::string reason, std::string message);

// Either a value or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(v_).ok());
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  // Returns the error, or an ok Status when a value is held.
  Status status() const { return ok() ? Status() : std::get<Status>(v_); }

  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  // On a temporary Result the value is moved out, so `for (x : *Load())` never dangles.
  T value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace ql

// Evaluates `expr` (a Status); returns it from the current function when not ok.
#define QL_RETURN_IF_ERROR(expr)         \
  do {                                   \
    ::ql::Status ql_status_ = (expr);    \
    if (!ql_status_.ok()) return ql_status_; \
  } while (0)

#define QL_CONCAT_INNER_(a, b) a##b
#define QL_CONCAT_(a, b) QL_CONCAT_INNER_(a, b)

// Evaluates `rexpr` (a Result<T>); on error returns its status, else moves the value into `lhs`.
#define QL_ASSIGN_OR_RETURN(lhs, rexpr) \
  QL_ASSIGN_OR_RETURN_IMPL_(QL_CONCAT_(ql_result_, __LINE__), lhs, rexpr)
#define QL_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                              \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
