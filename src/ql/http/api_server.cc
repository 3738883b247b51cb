#include "ql/http/api_server.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <limits>
#include <mutex>
#include <string_view>
#include <thread>
#include <utility>

#include "ql/core/canonical_json.h"
#include "ql/core/digest.h"
#include "ql/core/rfc3339.h"
#include "ql/core/states.h"
#include "ql/core/timezone.h"
#include "ql/http/api_json.h"
#include "ql/http/http_server.h"
#include "ql/http/process_metrics.h"
#include "ql/http/retention_json.h"

namespace ql {
namespace {

using nlohmann::json;

// Longer bearer tokens are refused without hashing them.
constexpr size_t kMaxBearerTokenBytes = 512;
// Headers a client may send (more are answered 431 by the server).
constexpr size_t kMaxClientHeaders = 100;
constexpr size_t kDefaultLogChunkBytes = 64 * 1024;
constexpr int kDefaultEventLimit = 100;
constexpr std::string_view kApiPrefix = "/api/v1";

enum class RouteId {
  kLivez,
  kReadyz,
  kMetrics,
  kProjectsList,
  kTasksCreate,
  kTasksList,
  kTaskGet,
  kTaskRevisionsCreate,
  kTaskRevisionsList,
  kTaskDelete,
  kTriggersCreate,
  kTriggersList,
  kTriggerGet,
  kTriggerEnable,
  kTriggerDisable,
  kTriggerRepin,
  kTriggerRevisionsCreate,
  kTriggerNext,
  kTriggerDelete,
  kCronNext,
  kRunsList,
  kRunsCreate,
  kRunGet,
  kRunEvents,
  kRunLog,
  kRunCancel,
  kRunRetry,
  kRunResolve,
  kTaskRunsCreate,
  kApprovalsList,
  kApprovalGet,
  kApprovalApprove,
  kApprovalReject,
  kStatus,
  kWhoami,
  kSignIn,
  kSignOut,
  kSessionsList,
  kSessionRevoke,
  kPasswordChange,
  kPrincipalPassword,
  kTotpEnrol,
  kTotpConfirm,
  kTotpDisable,
  kPrincipalsList,
  kPrincipalsCreate,
  kPrincipalGet,
  kPrincipalDisable,
  kPrincipalEnable,
  kTokensList,
  kTokensCreate,
  kTokenRevoke,
  kProjectsCreate,
  kProjectGet,
  kProjectArchive,
  kProjectBindingsList,
  kProjectBindingsWrite,
  kInstallationBindingsList,
  kInstallationBindingsWrite,
  kAuditList,
  kProjectRetentionGet,
  kProjectRetentionSet,
  kTaskRetentionGet,
  kTaskRetentionSet,
  kSecretsList,
  kSecretPut,
  kSecretDelete,
};

struct RouteSpec {
  std::string_view method;
  std::string_view pattern;  // "{id}" matches one non-empty path segment
  RouteId id;
  std::string_view name;  // metric label: bounded, never an id
  // Who may call it (docs/api.md): public | authenticated | viewer | operator | admin | owner
  // (in the request's project, or the addressed object's) | installation_admin | self (the
  // principal itself, or an installation admin).
  std::string_view permission;
};

constexpr RouteSpec kRoutes[] = {
    {"GET", "/livez", RouteId::kLivez, "livez", "public"},
    {"GET", "/readyz", RouteId::kReadyz, "readyz", "public"},
    {"GET", "/metrics", RouteId::kMetrics, "metrics", "public"},
    {"GET", "/api/v1/whoami", RouteId::kWhoami, "whoami", "authenticated"},
    {"POST", "/api/v1/sign-in", RouteId::kSignIn, "sign_in", "public"},
    {"POST", "/api/v1/sign-out", RouteId::kSignOut, "sign_out", "authenticated"},
    {"GET", "/api/v1/sessions", RouteId::kSessionsList, "sessions.list", "self"},
    {"POST", "/api/v1/sessions/{id}/revoke", RouteId::kSessionRevoke, "sessions.revoke", "self"},
    {"POST", "/api/v1/password", RouteId::kPasswordChange, "password.change", "authenticated"},
    {"POST", "/api/v1/principals/{id}/password", RouteId::kPrincipalPassword,
     "principals.password", "installation_admin"},
    {"POST", "/api/v1/totp/enrol", RouteId::kTotpEnrol, "totp.enrol", "authenticated"},
    {"POST", "/api/v1/totp/confirm", RouteId::kTotpConfirm, "totp.confirm", "authenticated"},
    {"POST", "/api/v1/totp/disable", RouteId::kTotpDisable, "totp.disable", "authenticated"},
    {"GET", "/api/v1/projects", RouteId::kProjectsList, "projects.list", "authenticated"},
    {"POST", "/api/v1/projects", RouteId::kProjectsCreate, "projects.create",
     "installation_admin"},
    {"GET", "/api/v1/projects/{id}", RouteId::kProjectGet, "projects.get", "viewer"},
    {"POST", "/api/v1/projects/{id}/archive", RouteId::kProjectArchive, "projects.archive",
     "owner"},
    {"GET", "/api/v1/projects/{id}/bindings", RouteId::kProjectBindingsList,
     "projects.bindings.list", "viewer"},
    {"POST", "/api/v1/projects/{id}/bindings", RouteId::kProjectBindingsWrite,
     "projects.bindings.write", "admin"},
    {"GET", "/api/v1/installation/bindings", RouteId::kInstallationBindingsList,
     "installation.bindings.list", "installation_admin"},
    {"POST", "/api/v1/installation/bindings", RouteId::kInstallationBindingsWrite,
     "installation.bindings.write", "installation_admin"},
    {"GET", "/api/v1/principals", RouteId::kPrincipalsList, "principals.list",
     "installation_admin"},
    {"POST", "/api/v1/principals", RouteId::kPrincipalsCreate, "principals.create",
     "installation_admin"},
    {"GET", "/api/v1/principals/{id}", RouteId::kPrincipalGet, "principals.get", "self"},
    {"POST", "/api/v1/principals/{id}/disable", RouteId::kPrincipalDisable, "principals.disable",
     "installation_admin"},
    {"POST", "/api/v1/principals/{id}/enable", RouteId::kPrincipalEnable, "principals.enable",
     "installation_admin"},
    {"GET", "/api/v1/tokens", RouteId::kTokensList, "tokens.list", "self"},
    {"POST", "/api/v1/tokens", RouteId::kTokensCreate, "tokens.create", "self"},
    {"POST", "/api/v1/tokens/{id}/revoke", RouteId::kTokenRevoke, "tokens.revoke", "self"},
    {"GET", "/api/v1/audit", RouteId::kAuditList, "audit.list", "installation_admin"},
    {"POST", "/api/v1/tasks", RouteId::kTasksCreate, "tasks.create", "admin"},
    {"GET", "/api/v1/tasks", RouteId::kTasksList, "tasks.list", "viewer"},
    {"GET", "/api/v1/tasks/{id}", RouteId::kTaskGet, "tasks.get", "viewer"},
    {"POST", "/api/v1/tasks/{id}/revisions", RouteId::kTaskRevisionsCreate,
     "tasks.revisions.create", "admin"},
    {"DELETE", "/api/v1/tasks/{id}", RouteId::kTaskDelete, "tasks.delete", "admin"},
    {"GET", "/api/v1/tasks/{id}/revisions", RouteId::kTaskRevisionsList, "tasks.revisions.list",
     "viewer"},
    {"POST", "/api/v1/triggers", RouteId::kTriggersCreate, "triggers.create", "admin"},
    {"GET", "/api/v1/triggers", RouteId::kTriggersList, "triggers.list", "viewer"},
    {"GET", "/api/v1/triggers/{id}", RouteId::kTriggerGet, "triggers.get", "viewer"},
    {"POST", "/api/v1/triggers/{id}/enable", RouteId::kTriggerEnable, "triggers.enable",
     "operator"},
    {"POST", "/api/v1/triggers/{id}/disable", RouteId::kTriggerDisable, "triggers.disable",
     "operator"},
    {"POST", "/api/v1/triggers/{id}/repin", RouteId::kTriggerRepin, "triggers.repin", "admin"},
    {"POST", "/api/v1/triggers/{id}/revisions", RouteId::kTriggerRevisionsCreate,
     "triggers.revisions.create", "admin"},
    {"GET", "/api/v1/triggers/{id}/next", RouteId::kTriggerNext, "triggers.next", "viewer"},
    {"DELETE", "/api/v1/triggers/{id}", RouteId::kTriggerDelete, "triggers.delete", "admin"},
    {"GET", "/api/v1/cron/next", RouteId::kCronNext, "cron.next", "authenticated"},
    {"GET", "/api/v1/runs", RouteId::kRunsList, "runs.list", "viewer"},
    {"POST", "/api/v1/runs", RouteId::kRunsCreate, "runs.create", "operator"},
    {"GET", "/api/v1/runs/{id}", RouteId::kRunGet, "runs.get", "viewer"},
    {"GET", "/api/v1/runs/{id}/events", RouteId::kRunEvents, "runs.events", "viewer"},
    {"GET", "/api/v1/runs/{id}/log", RouteId::kRunLog, "runs.log", "viewer"},
    {"POST", "/api/v1/runs/{id}/cancel", RouteId::kRunCancel, "runs.cancel", "operator"},
    {"POST", "/api/v1/runs/{id}/retry", RouteId::kRunRetry, "runs.retry", "operator"},
    {"POST", "/api/v1/runs/{id}/resolve", RouteId::kRunResolve, "runs.resolve", "admin"},
    {"POST", "/api/v1/tasks/{id}/runs", RouteId::kTaskRunsCreate, "tasks.runs.create",
     "operator"},
    {"GET", "/api/v1/approvals", RouteId::kApprovalsList, "approvals.list", "viewer"},
    {"GET", "/api/v1/approvals/{id}", RouteId::kApprovalGet, "approvals.get", "viewer"},
    {"POST", "/api/v1/approvals/{id}/approve", RouteId::kApprovalApprove, "approvals.approve",
     "admin"},
    {"POST", "/api/v1/approvals/{id}/reject", RouteId::kApprovalReject, "approvals.reject",
     "operator"},
    {"GET", "/api/v1/status", RouteId::kStatus, "status", "viewer"},
    {"GET", "/api/v1/projects/{id}/retention", RouteId::kProjectRetentionGet,
     "projects.retention.get", "viewer"},
    {"POST", "/api/v1/projects/{id}/retention", RouteId::kProjectRetentionSet,
     "projects.retention.set", "admin"},
    {"GET", "/api/v1/tasks/{id}/retention", RouteId::kTaskRetentionGet, "tasks.retention.get",
     "viewer"},
    {"POST", "/api/v1/tasks/{id}/retention", RouteId::kTaskRetentionSet, "tasks.retention.set",
     "admin"},
    {"GET", "/api/v1/secrets", RouteId::kSecretsList, "secrets.list", "viewer"},
    {"PUT", "/api/v1/secrets/{id}", RouteId::kSecretPut, "secrets.put", "admin"},
    {"DELETE", "/api/v1/secrets/{id}", RouteId::kSecretDelete, "secrets.delete", "admin"},
};

struct RouteMatch {
  enum class Kind { kFound, kNotFound, kMethodNotAllowed } kind = Kind::kNotFound;
  const RouteSpec* route = nullptr;
  std::string id;     // the {id} segment, when the pattern has one
  std::string allow;  // for kMethodNotAllowed: the methods the path accepts
};

bool MatchPattern(std::string_view pattern, std::string_view path, std::string* id) {
  while (!pattern.empty() || !path.empty()) {
    if (pattern.empty() || path.empty() || pattern[0] != '/' || path[0] != '/') return false;
    pattern.remove_prefix(1);
    path.remove_prefix(1);
    const size_t pe = std::min(pattern.find('/'), pattern.size());
    const size_t se = std::min(path.find('/'), path.size());
    const std::string_view pseg = pattern.substr(0, pe);
    const std::string_view sseg = path.substr(0, se);
    if (pseg == "{id}") {
      // The one segment that is decoded: an id or name, never empty, never a path of its own
      // (an escaped '/' or a dot segment matches nothing).
      std::optional<std::string> decoded = http::PercentDecode(sseg, false);
      if (!decoded.has_value() || decoded->empty() || *decoded == "." || *decoded == ".." ||
          decoded->find('/') != std::string::npos) {
        return false;
      }
      *id = std::move(*decoded);
    } else if (pseg != sseg) {
      return false;
    }
    pattern.remove_prefix(pe);
    path.remove_prefix(se);
  }
  return true;
}

RouteMatch MatchRoute(std::string_view method, std::string_view path) {
  if (method == "HEAD") method = "GET";
  RouteMatch out;
  for (const RouteSpec& route : kRoutes) {
    std::string id;
    if (!MatchPattern(route.pattern, path, &id)) continue;
    if (route.method == method) {
      out.kind = RouteMatch::Kind::kFound;
      out.route = &route;
      out.id = std::move(id);
      return out;
    }
    out.kind = RouteMatch::Kind::kMethodNotAllowed;
    if (out.allow.find(route.method) == std::string::npos) {
      if (!out.allow.empty()) out.allow += ", ";
      out.allow += route.method;
    }
  }
  return out;
}

bool IsApiPath(std::string_view path) {
  return path == kApiPrefix ||
         (path.size() > kApiPrefix.size() && path.compare(0, kApiPrefix.size(), kApiPrefix) == 0 &&
          path[kApiPrefix.size()] == '/');
}

void SendJson(http::Response& res, int status, const json& body) {
  res.status = status;
  res.SetContent(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void SendError(http::Response& res, int status, std::string_view code,
               std::string_view message) {
  SendJson(res, status, api::ErrorJson(code, message));
}

void SendStatus(http::Response& res, const Status& status) {
  const std::string code =
      status.reason().empty() ? std::string(StatusCodeName(status.code())) : status.reason();
  SendError(res, api::HttpStatusFor(status.code()), code, status.message());
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

// Query string access with the same strictness as bodies: unknown or repeated parameters are
// rejected, integers must be plain decimal within range.
class Query {
 public:
  explicit Query(const http::Request& req) : req_(req) {}

  Status Check(std::initializer_list<std::string_view> allowed) const {
    for (auto it = req_.params.begin(); it != req_.params.end(); ++it) {
      // Every /api/v1 route takes the project it works in.
      bool known = it->first == "project";
      for (std::string_view name : allowed) known = known || it->first == name;
      if (!known) {
        std::string list;
        for (std::string_view name : allowed) {
          if (!list.empty()) list += ", ";
          list += name;
        }
        return InvalidArgument(
            "unknown_parameter",
            "query parameter " + QuoteForMessage(it->first) + " is not accepted here" +
                (list.empty() ? std::string(" (none are)") : " (accepted: " + list + ")"));
      }
      if (req_.params.count(it->first) > 1) {
        return InvalidArgument(
            "duplicate_parameter",
            "query parameter " + QuoteForMessage(it->first) + " is given more than once");
      }
    }
    return Status::Ok();
  }

  std::optional<std::string> Get(std::string_view name) const {
    auto it = req_.params.find(std::string(name));
    if (it == req_.params.end()) return std::nullopt;
    return it->second;
  }

  Result<std::string> Required(std::string_view name) const {
    std::optional<std::string> value = Get(name);
    if (!value.has_value()) {
      return InvalidArgument("missing_parameter",
                             "query parameter " + std::string(name) + " is required");
    }
    return std::move(*value);
  }

  Result<int64_t> Integer(std::string_view name, std::string_view reason, int64_t min, int64_t max,
                          int64_t fallback) const {
    std::optional<std::string> text = Get(name);
    if (!text.has_value()) return fallback;
    int64_t value = 0;
    const char* begin = text->data();
    const char* end = begin + text->size();
    const bool digits_only =
        !text->empty() && std::all_of(text->begin() + (text->front() == '-' ? 1 : 0), text->end(),
                                      [](char c) { return c >= '0' && c <= '9'; });
    auto [ptr, ec] = std::from_chars(begin, end, value);
    if (!digits_only || (text->size() == 1 && text->front() == '-') || ec != std::errc() ||
        ptr != end || value < min || value > max) {
      return InvalidArgument(std::string(reason),
                             "query parameter " + std::string(name) + " must be an integer in " +
                                 std::to_string(min) + ".." + std::to_string(max) + ", got " +
                                 QuoteForMessage(*text));
    }
    return value;
  }

  Result<bool> Bool(std::string_view name, std::string_view reason, bool fallback) const {
    std::optional<std::string> text = Get(name);
    if (!text.has_value()) return fallback;
    if (*text == "true") return true;
    if (*text == "false") return false;
    return InvalidArgument(std::string(reason), "query parameter " + std::string(name) +
                                                    " must be true or false, got " +
                                                    QuoteForMessage(*text));
  }

 private:
  const http::Request& req_;
};

const char* BoolHeader(bool value) { return value ? "true" : "false"; }

}  // namespace

// The identity of a request: decided by Admit from the request line and headers, before any
// body is read, and carried by the request itself (Request::decision) to its handler. An
// /api/v1 request that reaches its handler without one is refused; nothing on this side maps
// "no principal" to the system.
struct RequestIdentity {
  bool decided = false;
  Authentication who;
  std::string token_digest;
  // Authenticated by the panel's session cookie (not an Authorization header): its writes need
  // the session's CSRF token.
  bool via_cookie = false;
};

// The panel's session cookie.
constexpr std::string_view kSessionCookie = "ql_session";

// The CSRF token of a session: derived from the session's token, which the page's script never
// sees (the cookie is HttpOnly), so a cross-site page cannot compute it.
std::string CsrfTokenOf(std::string_view session_token) {
  return Sha256Hex(std::string("ql-csrf:") + std::string(session_token)).substr(0, 32);
}

// The value of cookie `name` in a Cookie header, or "".
std::string CookieValue(const std::string& header, std::string_view name) {
  size_t at = 0;
  while (at < header.size()) {
    while (at < header.size() && (header[at] == ' ' || header[at] == ';')) ++at;
    const size_t end = std::min(header.find(';', at), header.size());
    const std::string_view pair = std::string_view(header).substr(at, end - at);
    const size_t eq = pair.find('=');
    if (eq != std::string_view::npos && pair.substr(0, eq) == name) {
      return std::string(pair.substr(eq + 1));
    }
    at = end + 1;
  }
  return std::string();
}

struct ApiServer::Impl {
  Impl(ControlService& service, Metrics& metrics, ApiServerOptions options)
      : service(service), metrics(metrics), options(std::move(options)) {}

  ControlService& service;
  Metrics& metrics;
  ApiServerOptions options;
  std::unique_ptr<http::HttpServer> server;  // created by Start (plain or TLS)
  int port = 0;
  std::atomic<bool> started{false};
  std::atomic<bool> stopped{false};
  std::atomic<bool> ready{false};
  std::atomic<bool> withdrawn{false};
  std::mutex readiness_mu;
  Status not_ready{Unavailable("not_ready", "the server is starting and not ready yet")};
  std::atomic<int> followers{0};
  std::mutex wake_mu;
  std::condition_variable wake_cv;  // wakes log followers on withdrawal

  // The listener's limits and the calls it makes (admission, handling, metrics).
  http::ServerLimits Limits() const;
  http::ServerHandlers Handlers();
  // Answers with a panel file and its headers (the caller has checked method and body).
  void ServePanelFile(const PanelFile& file, http::Response& res) const;
  // Returns the panel file served at `req`'s path, or nullptr.
  const PanelFile* PanelFileFor(const http::Request& req) const;
  // The one admission decision, from the request line and headers alone: true lets the
  // request's body be read, with its identity in `req.decision`; false refuses with `res`.
  bool Admit(http::Request& req, http::Response& res);
  void Dispatch(const http::Request& req, http::Response& res);
  json IsolationJson() const {
    return json{{"level", options.isolation_level}, {"detail", options.isolation_detail}};
  }
  void Handle(const RouteMatch& match, const http::Request& req, http::Response& res,
              const std::string& body, const RequestIdentity& identity);
  // Serves sign-in, sign-out, sessions and passwords (options.sign_in is set).
  void HandleSignIn(RouteId route, const std::string& id, const http::Request& req,
                    const Query& query, const json& body, const Caller& caller,
                    const RequestIdentity& identity, http::Response& res);
  // Serves the /api/v1/secrets routes; `name` is the path's secret name.
  void HandleSecrets(RouteId route, const std::string& name, const Query& query, const json& body,
                     const Caller& caller, http::Response& res);
  enum class Auth { kOk, kDenied, kUnavailable };
  // Authenticates the bearer token of `req`; on kOk fills `who` and `digest` (of the token), on
  // kDenied `why` (a code).
  // A request without an Authorization header authenticates with the panel's session cookie;
  // then `csrf` (when given) receives the CSRF token its writes must carry.
  Auth Authenticate(const http::Request& req, Authentication* who, std::string* why,
                    std::string* digest = nullptr, std::string* csrf = nullptr) const;
  // The caller of an /api/v1 request whose identity PreRoute decided: its principal, its
  // token's expiry, the `project` query parameter and the request id.
  static Caller CallerOf(const http::Request& req, const RequestIdentity& identity);
  void ServeLog(const std::string& run_id, const http::Request& req, const Caller& caller,
                const RequestIdentity& identity, http::Response& res);
  void StartFollow(const std::string& run_id, int attempt_number, int64_t offset,
                   const Caller& caller, const RequestIdentity& identity, http::Response& res);
};

ApiServer::ApiServer(ControlService& service, Metrics& metrics, ApiServerOptions options)
    : impl_(std::make_unique<Impl>(service, metrics, std::move(options))) {
  metrics.Describe("ql_http_requests_total", "counter",
                   "HTTP requests answered, by route and status code.");
  metrics.Describe("ql_http_in_flight", "gauge",
                   "HTTP requests between their head and the end of their answer when /metrics "
                   "was read.");
  metrics.Describe("ql_http_connections", "gauge",
                   "HTTP connections open when /metrics was read.");
  metrics.Describe("ql_http_log_followers", "gauge", "Log follow streams open.");
  metrics.Describe("ql_runs_queued", "gauge",
                   "Runs in the queued state when /metrics was read (NaN: the store could not "
                   "be read).");
  DescribeProcessMetrics(metrics, impl_->options.version);
}

ApiServer::~ApiServer() { Stop(); }

ApiServer::Impl::Auth ApiServer::Impl::Authenticate(const http::Request& req,
                                                    Authentication* who, std::string* why,
                                                    std::string* digest,
                                                    std::string* csrf) const {
  *why = "unauthorized";
  const std::string header = req.Header("Authorization");
  constexpr std::string_view kScheme = "bearer ";
  std::string cookie;
  std::string_view token;
  if (header.empty()) {
    // The panel's session cookie stands in for a missing Authorization header.
    cookie = CookieValue(req.Header("Cookie"), kSessionCookie);
    if (cookie.empty()) {
      *why = "token_missing";
      return Auth::kDenied;
    }
    token = cookie;
    if (csrf != nullptr) *csrf = CsrfTokenOf(cookie);
  } else if (header.size() <= kScheme.size() ||
             !EqualsIgnoreCase(std::string_view(header).substr(0, kScheme.size()), kScheme)) {
    *why = "token_missing";
    return Auth::kDenied;
  } else {
    token = std::string_view(header).substr(kScheme.size());
  }
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  while (!token.empty() && token.back() == ' ') token.remove_suffix(1);
  if (token.empty() || token.size() > kMaxBearerTokenBytes) return Auth::kDenied;
  const std::string token_digest = Sha256Hex(token);
  Result<Authentication> found = options.authenticate(token_digest);
  if (found.ok()) {
    *who = std::move(found).value();
    if (digest != nullptr) *digest = token_digest;
    return Auth::kOk;
  }
  if (found.status().code() == StatusCode::kPermissionDenied) return Auth::kDenied;
  return Auth::kUnavailable;
}

Caller ApiServer::Impl::CallerOf(const http::Request& req, const RequestIdentity& identity) {
  Caller caller;
  caller.principal_id = identity.who.principal.id;
  caller.token_expires_at_ms = identity.who.token.expires_at_ms;
  caller.token_id = identity.who.token.id;
  caller.token_kind = identity.who.token.kind;
  if (req.ParamCount("project") == 1) caller.project = *req.Param("project");
  caller.request_id = req.Header("X-Request-Id").substr(0, 64);
  return caller;
}

bool ApiServer::Impl::Admit(http::Request& req, http::Response& res) {
  req.decision.reset();
  const bool has_body = req.DeclaresBody();
  // The body of a request answered here is never read (the server closes the connection after
  // the answer, so its bytes are not taken for the next request).
  auto reject = [&](int status, std::string_view code, std::string_view message) {
    SendError(res, status, code, message);
    if (has_body) res.close = true;
    return false;
  };
  if (const PanelFile* file = PanelFileFor(req); file != nullptr) {
    if (req.method != "GET" && req.method != "HEAD") {
      res.SetHeader("Allow", "GET, HEAD");
      return reject(405, "method_not_allowed",
                    req.method + " is not allowed on " + QuoteForMessage(req.path, 128) +
                        " (allowed: GET, HEAD)");
    }
    if (has_body) return reject(400, "unexpected_body", "GET requests carry no body");
    ServePanelFile(*file, res);
    return false;
  }
  // Matched once here for both decisions below. Public routes under /api/v1 (signing in) are
  // admitted without an identity.
  const RouteMatch match = MatchRoute(req.method, req.path);
  const bool public_api = match.kind == RouteMatch::Kind::kFound &&
                          match.route->permission == std::string_view("public");
  if (IsApiPath(req.path)) {
    if (withdrawn.load()) {
      return reject(503, "shutting_down", "the server is shutting down and admits no requests");
    }
    if (server->requests() > options.max_in_flight) {
      res.SetHeader("Retry-After", "1");
      return reject(503, "overloaded",
                    "more than " + std::to_string(options.max_in_flight) +
                        " requests are in flight; retry shortly");
    }
  }
  if (IsApiPath(req.path) && !public_api) {
    Authentication who;
    std::string why;
    std::string digest;
    std::string csrf;
    const Auth auth = Authenticate(req, &who, &why, &digest, &csrf);
    if (auth == Auth::kUnavailable) {
      res.SetHeader("Retry-After", "1");
      return reject(503, "credentials_unavailable",
                    "the credential store cannot be read right now; retry shortly");
    }
    if (auth != Auth::kOk) {
      service.governance().RecordAuthFailure(req.Header("X-Request-Id").substr(0, 64),
                                             why);
      res.SetHeader("WWW-Authenticate", "Bearer");
      return reject(401, "unauthorized",
                    "missing or wrong bearer token in the Authorization header");
    }
    // A cookie rides along with any request the browser sends, a cross-site one included: the
    // writes it authenticates must also carry the session's CSRF token, which only a page of
    // this origin was given, and must not come from another site.
    const bool via_cookie = !csrf.empty();
    if (via_cookie && req.method != "GET" && req.method != "HEAD") {
      const std::string site = req.Header("Sec-Fetch-Site");
      if (req.Header("X-QL-CSRF") != csrf || (!site.empty() && site != "same-origin")) {
        return reject(403, "csrf_failed",
                      "a write authenticated by the session cookie needs the session's "
                      "X-QL-CSRF header and must come from this origin");
      }
    }
    req.decision = std::make_shared<const RequestIdentity>(
        RequestIdentity{true, std::move(who), std::move(digest), via_cookie});
  }
  if (match.kind == RouteMatch::Kind::kNotFound) {
    return reject(404, "route_not_found", "no route for " + QuoteForMessage(req.path, 128));
  }
  if (match.kind == RouteMatch::Kind::kMethodNotAllowed) {
    res.SetHeader("Allow", match.allow);
    return reject(405, "method_not_allowed",
                  req.method + " is not allowed on " + QuoteForMessage(req.path, 128) +
                      " (allowed: " + match.allow + ")");
  }
  if (match.route->method == "GET" && has_body) {
    return reject(400, "unexpected_body", "GET requests carry no body");
  }
  if (has_body) {
    const std::string content_type = req.Header("Content-Type");
    if (content_type.rfind("multipart/", 0) == 0) {
      return reject(415, "unsupported_media_type",
                    "request bodies are JSON (Content-Type: application/json), got " +
                        QuoteForMessage(content_type));
    }
    const std::string encoding = req.Header("Content-Encoding");
    if (!encoding.empty() && encoding != "identity") {
      return reject(
          415, "unsupported_media_type",
          "request bodies are not compressed, got Content-Encoding " + QuoteForMessage(encoding));
    }
    if (req.HasHeader("Content-Length")) {
      const std::string length = req.Header("Content-Length");
      uint64_t n = 0;
      auto [ptr, ec] = std::from_chars(length.data(), length.data() + length.size(), n);
      if (ec != std::errc() || ptr != length.data() + length.size()) {
        return reject(400, "bad_request",
                      "Content-Length " + QuoteForMessage(length) + " is not a number");
      }
      if (n > options.max_body_bytes) {
        return reject(413, "body_too_large",
                      "request body of " + std::to_string(n) + " bytes exceeds the limit of " +
                          std::to_string(options.max_body_bytes) + " bytes");
      }
    }
  }
  return true;
}

const PanelFile* ApiServer::Impl::PanelFileFor(const http::Request& req) const {
  if (options.panel == nullptr || IsApiPath(req.path)) return nullptr;
  return options.panel->Find(req.path);
}

void ApiServer::Impl::ServePanelFile(const PanelFile& file, http::Response& res) const {
  res.EraseHeader("Cache-Control");
  res.SetHeader("Cache-Control", std::string(file.immutable ? kPanelImmutableCacheControl
                                                             : kPanelPageCacheControl));
  res.SetHeader("Content-Security-Policy", std::string(kPanelContentSecurityPolicy));
  res.SetHeader("Referrer-Policy", "no-referrer");
  res.SetHeader("X-Frame-Options", "DENY");
  res.status = 200;
  res.SetContent(std::string(file.body), std::string(file.content_type));
}

http::ServerLimits ApiServer::Impl::Limits() const {
  http::ServerLimits limits;
  limits.workers = options.threads;
  limits.max_connections = options.max_connections;
  limits.max_connections_per_address =
      std::min(options.max_connections_per_address, options.max_connections);
  limits.head_timeout_ms = options.read_timeout_ms;
  limits.body_grace_ms = options.read_timeout_ms;
  limits.min_body_bytes_per_second = options.min_body_bytes_per_second;
  limits.idle_timeout_ms = options.idle_timeout_ms;
  limits.write_timeout_ms = options.write_timeout_ms;
  limits.max_headers = kMaxClientHeaders;
  limits.max_body_bytes = options.max_body_bytes;
  // Every answer, the server's own refusals included; a panel file replaces Cache-Control.
  limits.default_headers = {{"X-Content-Type-Options", "nosniff"}, {"Cache-Control", "no-store"}};
  return limits;
}

http::ServerHandlers ApiServer::Impl::Handlers() {
  http::ServerHandlers handlers;
  // Liveness needs nothing but memory: answered on the I/O thread, so it holds even while
  // every worker waits on the store.
  handlers.immediate = [](const http::Request& req, http::Response& res) {
    if (req.path != "/livez" || (req.method != "GET" && req.method != "HEAD") ||
        !req.params.empty() || req.DeclaresBody()) {
      return false;
    }
    SendJson(res, 200, json{{"status", "ok"}});
    return true;
  };
  handlers.admit = [this](http::Request& req, http::Response& res) { return Admit(req, res); };
  handlers.handle = [this](http::Request& req, http::Response& res) {
    try {
      Dispatch(req, res);
    } catch (const std::exception& e) {
      res = http::Response{};
      SendError(res, 500, "internal", std::string("internal error: ") + e.what());
    }
  };
  handlers.answered = [this](const http::Request& req, const http::Response& res) {
    const RouteMatch match = MatchRoute(req.method, req.path);
    const std::string_view route = match.kind == RouteMatch::Kind::kFound ? match.route->name
                                   : PanelFileFor(req) != nullptr         ? "panel"
                                                                          : "none";
    metrics.Increment("ql_http_requests_total", "route=\"" + std::string(route) + "\",code=\"" +
                                                    std::to_string(res.status) + "\"");
  };
  return handlers;
}

void ApiServer::Impl::Dispatch(const http::Request& req, http::Response& res) {
  static const RequestIdentity kUndecided;
  const RequestIdentity& identity =
      req.decision != nullptr ? *static_cast<const RequestIdentity*>(req.decision.get())
                              : kUndecided;
  const RouteMatch match = MatchRoute(req.method, req.path);
  if (match.kind != RouteMatch::Kind::kFound) {  // PreRoute answered these already
    SendError(res, 404, "route_not_found", "no route for " + QuoteForMessage(req.path, 128));
    return;
  }
  if (IsApiPath(req.path) && match.route->permission != std::string_view("public")) {
    // Fail closed: no decided identity, no answer.
    if (!identity.decided || identity.who.principal.id.empty()) {
      res.SetHeader("WWW-Authenticate", "Bearer");
      SendError(res, 401, "unauthorized", "the request carries no authenticated identity");
      return;
    }
    // The identity stays the one decided before the body; it is confirmed (never changed) now
    // that the body is in: a token that expired or was revoked, or a principal disabled, while
    // the body was in flight ends the request here, as does a credential store that fails.
    Result<Authentication> again = options.authenticate(identity.token_digest);
    if (!again.ok()) {
      if (again.status().code() == StatusCode::kPermissionDenied) {
        res.SetHeader("WWW-Authenticate", "Bearer");
        SendError(res, 401, "unauthorized",
                  "the token expired or was revoked while the request was in flight");
      } else {
        res.SetHeader("Retry-After", "1");
        SendError(res, 503, "credentials_unavailable",
                  "the credential store cannot be read right now; retry shortly");
      }
      return;
    }
    if (again->principal.id != identity.who.principal.id) {
      SendError(res, 401, "unauthorized", "the token no longer names the same principal");
      return;
    }
  }
  Handle(match, req, res, req.body, identity);
}

namespace {

// Runs `fn` (returning a Status) and sends its error, if any. Returns true on success.
#define QL_HTTP_TRY(res, expr)             \
  do {                                     \
    ::ql::Status ql_http_status_ = (expr); \
    if (!ql_http_status_.ok()) {           \
      SendStatus(res, ql_http_status_);    \
      return;                              \
    }                                      \
  } while (0)

#define QL_HTTP_ASSIGN(res, lhs, rexpr) \
  QL_HTTP_ASSIGN_IMPL_(QL_CONCAT_(ql_http_result_, __LINE__), res, lhs, rexpr)
#define QL_HTTP_ASSIGN_IMPL_(tmp, res, lhs, rexpr) \
  auto tmp = (rexpr);                              \
  if (!tmp.ok()) {                                 \
    SendStatus(res, tmp.status());                 \
    return;                                        \
  }                                                \
  lhs = std::move(tmp).value()

json ItemsJson(json items, const std::optional<std::string>& next_cursor) {
  return json{{"items", std::move(items)},
              {"next_cursor", next_cursor.has_value() ? json(*next_cursor) : json(nullptr)}};
}

// Removes an envelope field from a task body and returns it.
Result<std::optional<std::string>> TakeString(json& body, std::string_view name) {
  QL_ASSIGN_OR_RETURN(std::optional<std::string> value, api::OptionalString(body, name));
  body.erase(std::string(name));
  return value;
}

}  // namespace

void ApiServer::Impl::Handle(const RouteMatch& match, const http::Request& req,
                             http::Response& res, const std::string& body_text,
                             const RequestIdentity& identity) {
  const Query query(req);
  const bool post = match.route->method == "POST" || match.route->method == "PUT";
  // Only task bodies are required; the action routes accept an empty body as {}.
  const bool body_required = match.route->id == RouteId::kTasksCreate ||
                             match.route->id == RouteId::kTaskRevisionsCreate ||
                             match.route->id == RouteId::kTriggersCreate ||
                             match.route->id == RouteId::kTriggerRevisionsCreate ||
                             match.route->id == RouteId::kRunsCreate ||
                             match.route->id == RouteId::kApprovalReject ||
                             match.route->id == RouteId::kRunResolve ||
                             match.route->id == RouteId::kPrincipalsCreate ||
                             match.route->id == RouteId::kProjectsCreate ||
                             match.route->id == RouteId::kProjectBindingsWrite ||
                             match.route->id == RouteId::kInstallationBindingsWrite ||
                             match.route->id == RouteId::kSecretPut ||
                             match.route->id == RouteId::kSignIn ||
                             match.route->id == RouteId::kPasswordChange ||
                             match.route->id == RouteId::kPrincipalPassword ||
                             match.route->id == RouteId::kTotpConfirm ||
                             match.route->id == RouteId::kTotpDisable;
  json body = json::object();
  if (post) {
    QL_HTTP_TRY(res, query.Check({}));
    QL_HTTP_ASSIGN(res, body, api::ParseBody(body_text, body_required));
  }
  const std::string& id = match.id;
  // Only /api/v1 routes act for a caller, and Dispatch made sure each has a principal.
  const Caller caller = IsApiPath(req.path) && identity.decided ? CallerOf(req, identity)
                                                                : Caller{};
  GovernanceService& governance = service.governance();

  switch (match.route->id) {
    case RouteId::kLivez:
      QL_HTTP_TRY(res, query.Check({}));
      SendJson(res, 200, json{{"status", "ok"}});
      return;
    case RouteId::kReadyz:
      QL_HTTP_TRY(res, query.Check({}));
      if (withdrawn.load()) {
        SendError(res, 503, "shutting_down", "the server is shutting down");
      } else if (!ready.load()) {
        Status why;
        {
          std::lock_guard<std::mutex> lock(readiness_mu);
          why = not_ready;
        }
        SendError(res, 503, why.reason(), why.message());
      } else {
        json body{{"status", "ready"}};
        if (!options.isolation_level.empty()) body["command_isolation"] = IsolationJson();
        SendJson(res, 200, body);
      }
      return;
    case RouteId::kMetrics:
      QL_HTTP_TRY(res, query.Check({}));
      metrics.SetGauge("ql_http_in_flight", "", server->requests());
      metrics.SetGauge("ql_http_connections", "", server->connections());
      metrics.SetGauge("ql_http_log_followers", "", followers.load());
      {
        // Read at every scrape: an index range of the queued runs, and a few /proc files. A
        // failure shows as NaN (the queue) or as the last values (the process), never as 5xx.
        const Result<int64_t> queued = service.CountQueuedRuns();
        metrics.SetGauge(
            "ql_runs_queued", "",
            queued.ok() ? static_cast<double>(*queued) : std::numeric_limits<double>::quiet_NaN());
        (void)RecordProcessMetrics(metrics);
      }
      res.status = 200;
      res.SetContent(metrics.RenderPrometheus(), "text/plain; version=0.0.4; charset=utf-8");
      return;

    case RouteId::kProjectsList: {
      QL_HTTP_TRY(res, query.Check({}));
      QL_HTTP_ASSIGN(res, std::vector<ProjectRecord> projects, service.ListProjects(caller));
      json items = json::array();
      for (const ProjectRecord& p : projects) items.push_back(api::ProjectJson(p));
      SendJson(res, 200, json{{"items", std::move(items)}});
      return;
    }

    case RouteId::kTasksCreate: {
      TaskWrite write;
      QL_HTTP_ASSIGN(res, write.mutation_id, TakeString(body, "mutation_id"));
      write.body = std::move(body);
      QL_HTTP_ASSIGN(res, PublishedTask published, service.PublishTask(write, caller));
      res.SetHeader("X-QL-Replayed", BoolHeader(published.replayed));
      SendJson(res, published.replayed ? 200 : 201, api::TaskJson(published.task));
      return;
    }
    case RouteId::kTasksList: {
      QL_HTTP_TRY(res, query.Check({"limit", "cursor"}));
      PageQuery page;
      QL_HTTP_ASSIGN(res, page.limit,
                     query.Integer("limit", "invalid_limit", 1, kMaxPageLimit, kDefaultPageLimit));
      page.cursor = query.Get("cursor");
      QL_HTTP_ASSIGN(res, PageResult<TaskView> listed, service.ListTasks(page, caller));
      json items = json::array();
      for (const TaskView& t : listed.items) items.push_back(api::TaskJson(t));
      SendJson(res, 200, ItemsJson(std::move(items), listed.next_cursor));
      return;
    }
    case RouteId::kTaskGet: {
      QL_HTTP_TRY(res, query.Check({}));
      QL_HTTP_ASSIGN(res, TaskView task, service.GetTask(id, caller));
      SendJson(res, 200, api::TaskJson(task));
      return;
    }
    case RouteId::kTaskRevisionsCreate: {
      QL_HTTP_ASSIGN(res, std::optional<int64_t> expected,
                     api::OptionalInteger(body, "expected_revision"));
      if (!expected.has_value()) {
        SendError(res, 400, "missing_field",
                  "field expected_revision is required: the revision this update replaces");
        return;
      }
      body.erase("expected_revision");
      TaskWrite write;
      QL_HTTP_ASSIGN(res, std::optional<bool> repin, api::OptionalBool(body, "repin_triggers"));
      body.erase("repin_triggers");
      write.repin_triggers = repin.value_or(false);
      QL_HTTP_ASSIGN(res, write.mutation_id, TakeString(body, "mutation_id"));
      write.body = std::move(body);
      QL_HTTP_ASSIGN(res, PublishedTask published,
                     service.PublishTaskRevision(id, *expected, write, caller));
      res.SetHeader("X-QL-Replayed", BoolHeader(published.replayed));
      json out = api::TaskJson(published.task);
      out["repinned_triggers"] = published.trigger_ids;
      out["stale_triggers"] = published.stale_triggers;
      SendJson(res, published.replayed ? 200 : 201, out);
      return;
    }
    case RouteId::kTaskDelete: {
      QL_HTTP_TRY(res, query.Check({}));
      QL_HTTP_TRY(res, api::CheckFields(body, {}));
      QL_HTTP_ASSIGN(res, PublishedTask deleted, service.DeleteTask(id, caller));
      res.SetHeader("X-QL-Replayed", BoolHeader(deleted.replayed));
      json out = api::TaskJson(deleted.task);
      out["deleted_triggers"] = deleted.trigger_ids;
      SendJson(res, 200, out);
      return;
    }
    case RouteId::kTriggerDelete: {
      QL_HTTP_TRY(res, query.Check({}));
      QL_HTTP_TRY(res, api::CheckFields(body, {}));
      QL_HTTP_ASSIGN(res, PublishedTrigger deleted, service.DeleteTrigger(id, caller));
      res.SetHeader("X-QL-Replayed", BoolHeader(deleted.replayed));
      SendJson(res, 200, api::TriggerJson(deleted.trigger));
      return;
    }
    case RouteId::kTaskRevisionsList: {
      QL_HTTP_TRY(res, query.Check({}));
      QL_HTTP_ASSIGN(res, std::vector<TaskRevisionRecord> revisions, service.TaskHistory(id, caller));
      json items = json::array();
      for (const TaskRevisionRecord& r : revisions) items.push_back(api::TaskRevisionJson(r));
      SendJson(res, 200, json{{"items", std::move(items)}});
      return;
    }

    case RouteId::kTriggersCreate: {
      QL_HTTP_TRY(res,
                  api::CheckFields(body, {"task_id", "expression", "timezone", "misfire", "overlap",
                                          "jitter_ms", "enabled", "mutation_id", "name"}));
      TriggerWrite write;
      QL_HTTP_ASSIGN(res, write.task_id, api::RequiredString(body, "task_id"));
      QL_HTTP_ASSIGN(res, write.expression, api::RequiredString(body, "expression"));
      QL_HTTP_ASSIGN(res, write.timezone, api::RequiredString(body, "timezone"));
      QL_HTTP_ASSIGN(res, std::optional<std::string> misfire, api::OptionalString(body, "misfire"));
      if (misfire.has_value()) write.misfire = *misfire;
      QL_HTTP_ASSIGN(res, std::optional<std::string> overlap, api::OptionalString(body, "overlap"));
      if (overlap.has_value()) write.overlap = *overlap;
      QL_HTTP_ASSIGN(res, std::optional<int64_t> jitter, api::OptionalInteger(body, "jitter_ms"));
      write.jitter_ms = jitter.value_or(0);
      QL_HTTP_ASSIGN(res, std::optional<bool> enabled, api::OptionalBool(body, "enabled"));
      write.enabled = enabled.value_or(true);
      QL_HTTP_ASSIGN(res, write.mutation_id, api::OptionalString(body, "mutation_id"));
      QL_HTTP_ASSIGN(res, write.name, api::OptionalString(body, "name"));
      QL_HTTP_ASSIGN(res, PublishedTrigger published, service.AddTrigger(write, caller));
      res.SetHeader("X-QL-Replayed", BoolHeader(published.replayed));
      SendJson(res, published.replayed ? 200 : 201, api::TriggerJson(published.trigger));
      return;
    }
    case RouteId::kTriggerRevisionsCreate: {
      QL_HTTP_TRY(res, api::CheckFields(body, {"expected_revision", "expression", "timezone",
                                               "misfire", "overlap", "jitter_ms", "name"}));
      QL_HTTP_ASSIGN(res, std::optional<int64_t> expected,
                     api::OptionalInteger(body, "expected_revision"));
      if (!expected.has_value()) {
        SendError(res, 400, "missing_field",
                  "field expected_revision is required: the revision this edit replaces");
        return;
      }
      TriggerEdit edit;
      QL_HTTP_ASSIGN(res, edit.expression, api::OptionalString(body, "expression"));
      QL_HTTP_ASSIGN(res, edit.timezone, api::OptionalString(body, "timezone"));
      QL_HTTP_ASSIGN(res, edit.misfire, api::OptionalString(body, "misfire"));
      QL_HTTP_ASSIGN(res, edit.overlap, api::OptionalString(body, "overlap"));
      QL_HTTP_ASSIGN(res, edit.jitter_ms, api::OptionalInteger(body, "jitter_ms"));
      QL_HTTP_ASSIGN(res, edit.name, api::OptionalString(body, "name"));
      QL_HTTP_ASSIGN(res, PublishedTrigger published,
                     service.EditTrigger(id, *expected, edit, caller));
      res.SetHeader("X-QL-Replayed", BoolHeader(published.replayed));
      SendJson(res, published.replayed ? 200 : 201, api::TriggerJson(published.trigger));
      return;
    }
    case RouteId::kTriggersList: {
      QL_HTTP_TRY(res, query.Check({"task_id", "limit", "cursor"}));
      PageQuery page;
      QL_HTTP_ASSIGN(res, page.limit,
                     query.Integer("limit", "invalid_limit", 1, kMaxPageLimit, kDefaultPageLimit));
      page.cursor = query.Get("cursor");
      QL_HTTP_ASSIGN(res, PageResult<TriggerView> listed,
                     service.ListTriggers(query.Get("task_id"), page, caller));
      json items = json::array();
      for (const TriggerView& t : listed.items) items.push_back(api::TriggerJson(t));
      SendJson(res, 200, ItemsJson(std::move(items), listed.next_cursor));
      return;
    }
    case RouteId::kTriggerGet: {
      QL_HTTP_TRY(res, query.Check({}));
      QL_HTTP_ASSIGN(res, TriggerView trigger, service.GetTrigger(id, caller));
      SendJson(res, 200, api::TriggerJson(trigger));
      return;
    }
    case RouteId::kTriggerEnable:
    case RouteId::kTriggerDisable:
    case RouteId::kTriggerRepin: {
      QL_HTTP_TRY(res, api::CheckFields(body, {}));
      Result<PublishedTrigger> published =
          match.route->id == RouteId::kTriggerRepin
              ? service.RepinTrigger(id, caller)
              : service.SetTriggerEnabled(id, match.route->id == RouteId::kTriggerEnable, caller);
      QL_HTTP_TRY(res, published.status());
      res.SetHeader("X-QL-Replayed", BoolHeader(published->replayed));
      SendJson(res, 200, api::TriggerJson(published->trigger));
      return;
    }
    case RouteId::kTriggerNext: {
      QL_HTTP_TRY(res, query.Check({"count"}));
      QL_HTTP_ASSIGN(
          res, int64_t count,
          query.Integer("count", "invalid_count", 1, kMaxPreviewCount, kDefaultPreviewCount));
      QL_HTTP_ASSIGN(res, TriggerPreview preview,
                     service.PreviewTrigger(id, static_cast<int>(count), caller));
      QL_HTTP_ASSIGN(res, TimeZone zone, TimeZone::Load(preview.trigger.revision.timezone));
      SendJson(res, 200,
               json{{"trigger_id", preview.trigger.head.trigger_id},
                    {"state", preview.trigger.state},
                    {"admitting", preview.trigger.state == "active"},
                    {"expression", preview.trigger.revision.expression},
                    {"timezone", preview.trigger.revision.timezone},
                    {"misfire", preview.trigger.revision.misfire},
                    {"overlap", preview.trigger.revision.overlap},
                    {"jitter_ms", preview.trigger.revision.jitter_ms},
                    {"fire_times", api::FireTimesJson(preview.fire_times_ms, zone)}});
      return;
    }
    case RouteId::kCronNext: {
      QL_HTTP_TRY(res, query.Check({"expression", "timezone", "from", "count"}));
      QL_HTTP_ASSIGN(res, std::string expression, query.Required("expression"));
      QL_HTTP_ASSIGN(res, std::string timezone, query.Required("timezone"));
      std::optional<int64_t> from;
      if (std::optional<std::string> text = query.Get("from"); text.has_value()) {
        QL_HTTP_ASSIGN(res, from, ParseRfc3339(*text));
      }
      QL_HTTP_ASSIGN(
          res, int64_t count,
          query.Integer("count", "invalid_count", 1, kMaxPreviewCount, kDefaultPreviewCount));
      QL_HTTP_ASSIGN(res, CronPreview preview,
                     service.PreviewCron(expression, timezone, from, static_cast<int>(count)));
      QL_HTTP_ASSIGN(res, TimeZone zone, TimeZone::Load(preview.timezone));
      SendJson(res, 200,
               json{{"expression", preview.expression},
                    {"timezone", preview.timezone},
                    {"fire_times", api::FireTimesJson(preview.fire_times_ms, zone)}});
      return;
    }

    case RouteId::kRunsList: {
      QL_HTTP_TRY(res, query.Check({"task_id", "trigger_id", "status", "limit", "cursor"}));
      RunQuery filter;
      filter.task_id = query.Get("task_id");
      filter.trigger_id = query.Get("trigger_id");
      filter.status = query.Get("status");
      PageQuery page;
      QL_HTTP_ASSIGN(res, page.limit,
                     query.Integer("limit", "invalid_limit", 1, kMaxPageLimit, kDefaultPageLimit));
      page.cursor = query.Get("cursor");
      QL_HTTP_ASSIGN(res, PageResult<RunRecord> listed, service.ListRuns(filter, page, caller));
      json items = json::array();
      for (const RunRecord& r : listed.items) items.push_back(api::RunJson(r));
      SendJson(res, 200, ItemsJson(std::move(items), listed.next_cursor));
      return;
    }
    case RouteId::kRunsCreate:
    case RouteId::kTaskRunsCreate: {
      const bool by_path = match.route->id == RouteId::kTaskRunsCreate;
      if (by_path) {
        QL_HTTP_TRY(res, api::CheckFields(body, {"idempotency_key", "priority"}));
      } else {
        QL_HTTP_TRY(res, api::CheckFields(body, {"task_id", "idempotency_key", "priority"}));
      }
      StartRunRequest request;
      if (by_path) {
        request.task_id = id;
      } else {
        QL_HTTP_ASSIGN(res, request.task_id, api::RequiredString(body, "task_id"));
      }
      QL_HTTP_ASSIGN(res, request.idempotency_key, api::OptionalString(body, "idempotency_key"));
      QL_HTTP_ASSIGN(res, std::optional<int64_t> priority, api::OptionalInteger(body, "priority"));
      if (priority.has_value()) {
        if (*priority < kMinRunPriority || *priority > kMaxRunPriority) {
          SendError(res, 400, "invalid_priority",
                    "priority must be " + std::to_string(kMinRunPriority) + ".." +
                        std::to_string(kMaxRunPriority) + ", got " + std::to_string(*priority));
          return;
        }
        request.priority = static_cast<int>(*priority);
      }
      QL_HTTP_ASSIGN(res, StartedRun started, service.StartRun(request, caller));
      res.SetHeader("X-QL-Replayed", BoolHeader(started.replayed));
      if (started.approval.has_value()) {
        SendJson(res, 202, api::ApprovalRequiredJson(*started.approval));
        return;
      }
      SendJson(res, started.replayed ? 200 : 201, api::RunJson(started.run));
      return;
    }
    case RouteId::kRunResolve: {
      QL_HTTP_TRY(res, api::CheckFields(body, {"resolution", "reason"}));
      QL_HTTP_ASSIGN(res, std::string resolution, api::RequiredString(body, "resolution"));
      QL_HTTP_ASSIGN(res, std::string reason, api::RequiredString(body, "reason"));
      QL_HTTP_ASSIGN(res, ResolveRunResult resolved,
                     service.ResolveRun(id, resolution, reason, caller));
      res.SetHeader("X-QL-Replayed", BoolHeader(resolved.replayed));
      SendJson(res, 200, api::ResolutionJson(resolved));
      return;
    }
    case RouteId::kApprovalsList: {
      QL_HTTP_TRY(res, query.Check({"status", "limit", "cursor"}));
      PageQuery page;
      QL_HTTP_ASSIGN(res, page.limit,
                     query.Integer("limit", "invalid_limit", 1, kMaxPageLimit, kDefaultPageLimit));
      page.cursor = query.Get("cursor");
      QL_HTTP_ASSIGN(res, PageResult<ApprovalRequestRecord> listed,
                     service.ListApprovals(query.Get("status"), page, caller));
      json items = json::array();
      for (const ApprovalRequestRecord& r : listed.items) {
        items.push_back(api::ApprovalRequestJson(r));
      }
      SendJson(res, 200, ItemsJson(std::move(items), listed.next_cursor));
      return;
    }
    case RouteId::kApprovalGet: {
      QL_HTTP_TRY(res, query.Check({}));
      QL_HTTP_ASSIGN(res, ApprovalView view, service.GetApproval(id, caller));
      SendJson(res, 200, api::ApprovalJson(view));
      return;
    }
    case RouteId::kApprovalApprove: {
      QL_HTTP_TRY(res, api::CheckFields(body, {}));
      QL_HTTP_ASSIGN(res, ApproveResult approved, service.Approve(id, caller));
      res.SetHeader("X-QL-Replayed", BoolHeader(approved.replayed));
      json out = api::ApprovalJson(approved.approval);
      out["run"] = api::RunJson(approved.run);
      SendJson(res, approved.replayed ? 200 : 201, out);
      return;
    }
    case RouteId::kApprovalReject: {
      QL_HTTP_TRY(res, api::CheckFields(body, {"reason"}));
      QL_HTTP_ASSIGN(res, std::string reason, api::RequiredString(body, "reason"));
      QL_HTTP_ASSIGN(res, ApprovalView view, service.Reject(id, reason, caller));
      SendJson(res, 200, api::ApprovalJson(view));
      return;
    }
    case RouteId::kRunGet: {
      QL_HTTP_TRY(res, query.Check({}));
      QL_HTTP_ASSIGN(res, RunView run, service.GetRun(id, caller));
      SendJson(res, 200, api::RunJson(run));
      return;
    }
    case RouteId::kRunEvents: {
      QL_HTTP_TRY(res, query.Check({"after", "limit"}));
      QL_HTTP_ASSIGN(res, int64_t after, query.Integer("after", "invalid_after", 0, INT64_MAX, 0));
      QL_HTTP_ASSIGN(res, int64_t limit,
                     query.Integer("limit", "invalid_limit", 1, kMaxPageLimit, kDefaultEventLimit));
      QL_HTTP_ASSIGN(res, std::vector<EventRecord> events,
                     service.ListRunEvents(id, after, static_cast<int>(limit), caller));
      json items = json::array();
      int64_t next_after = after;
      for (const EventRecord& e : events) {
        items.push_back(api::EventJson(e));
        next_after = std::max(next_after, e.sequence);
      }
      SendJson(res, 200, json{{"items", std::move(items)}, {"next_after", next_after}});
      return;
    }
    case RouteId::kRunLog:
      ServeLog(id, req, caller, identity, res);
      return;
    case RouteId::kRunCancel: {
      QL_HTTP_TRY(res, api::CheckFields(body, {"reason"}));
      QL_HTTP_ASSIGN(res, std::optional<std::string> reason, api::OptionalString(body, "reason"));
      QL_HTTP_ASSIGN(res, RunRecord run, service.CancelRun(id, reason, caller));
      SendJson(res, 200, api::RunJson(run));
      return;
    }
    case RouteId::kRunRetry: {
      QL_HTTP_TRY(res, api::CheckFields(body, {}));
      QL_HTTP_ASSIGN(res, StartedRun started, service.RetryRun(id, caller));
      SendJson(res, 201, api::RunJson(started.run));
      return;
    }
    case RouteId::kWhoami: {
      QL_HTTP_TRY(res, query.Check({}));
      QL_HTTP_ASSIGN(res, WhoAmI who, governance.Whoami(caller));
      json out = api::WhoAmIJson(who);
      // How the caller signed in, and until when.
      json session{{"kind", identity.who.token.kind},
                   {"token_id", identity.who.token.id},
                   {"expires_at", api::TimeJson(identity.who.token.expires_at_ms)},
                   {"idle_timeout_ms", identity.who.token.idle_timeout_ms.has_value()
                                           ? json(*identity.who.token.idle_timeout_ms)
                                           : json(nullptr)},
                   {"label", identity.who.token.label}};
      if (identity.via_cookie) {
        session["csrf_token"] = CsrfTokenOf(CookieValue(req.Header("Cookie"), kSessionCookie));
      }
      out["session"] = std::move(session);
      SendJson(res, 200, out);
      return;
    }
    case RouteId::kSignIn:
    case RouteId::kSignOut:
    case RouteId::kSessionsList:
    case RouteId::kSessionRevoke:
    case RouteId::kPasswordChange:
    case RouteId::kPrincipalPassword:
    case RouteId::kTotpEnrol:
    case RouteId::kTotpConfirm:
    case RouteId::kTotpDisable:
      if (options.sign_in == nullptr) {
        SendError(res, 503, "sign_in_unavailable", "this server does not sign people in");
        return;
      }
      HandleSignIn(match.route->id, id, req, query, body, caller, identity, res);
      return;
    case RouteId::kPrincipalsList: {
      QL_HTTP_TRY(res, query.Check({}));
      QL_HTTP_ASSIGN(res, std::vector<PrincipalRecord> principals,
                     governance.ListPrincipals(caller));
      json items = json::array();
      for (const PrincipalRecord& p : principals) items.push_back(api::PrincipalJson(p));
      SendJson(res, 200, ItemsJson(std::move(items), std::nullopt));
      return;
    }
    case RouteId::kPrincipalsCreate: {
      QL_HTTP_TRY(res, api::CheckFields(body, {"name", "kind"}));
      QL_HTTP_ASSIGN(res, std::string name, api::RequiredString(body, "name"));
      QL_HTTP_ASSIGN(res, std::optional<std::string> kind, api::OptionalString(body, "kind"));
      QL_HTTP_ASSIGN(res, PrincipalRecord principal,
                     governance.AddPrincipal(caller, name, kind.value_or("user")));
      SendJson(res, 201, api::PrincipalJson(principal));
      return;
    }
    case RouteId::kPrincipalGet: {
      QL_HTTP_TRY(res, query.Check({}));
      QL_HTTP_ASSIGN(res, PrincipalRecord principal, governance.GetPrincipal(caller, id));
      SendJson(res, 200, api::PrincipalJson(principal));
      return;
    }
    case RouteId::kPrincipalDisable:
    case RouteId::kPrincipalEnable: {
      QL_HTTP_TRY(res, api::CheckFields(body, {}));
      QL_HTTP_ASSIGN(res, PrincipalRecord principal,
                     governance.SetPrincipalStatus(
                         caller, id,
                         match.route->id == RouteId::kPrincipalDisable ? "disabled" : "active"));
      SendJson(res, 200, api::PrincipalJson(principal));
      return;
    }
    case RouteId::kTokensList: {
      QL_HTTP_TRY(res, query.Check({}));
      QL_HTTP_ASSIGN(res, std::vector<TokenRecord> tokens, governance.ListTokens(caller));
      json items = json::array();
      for (const TokenRecord& t : tokens) items.push_back(api::TokenJson(t));
      SendJson(res, 200, ItemsJson(std::move(items), std::nullopt));
      return;
    }
    case RouteId::kTokensCreate: {
      QL_HTTP_TRY(res, api::CheckFields(body, {"principal", "expires_in_ms"}));
      QL_HTTP_ASSIGN(res, std::optional<std::string> principal,
                     api::OptionalString(body, "principal"));
      QL_HTTP_ASSIGN(res, std::optional<int64_t> ttl, api::OptionalInteger(body, "expires_in_ms"));
      QL_HTTP_ASSIGN(res, MintedToken minted,
                     governance.CreateToken(caller, principal.value_or(""), ttl));
      json out = api::TokenJson(minted.record);
      out["token"] = minted.token;
      SendJson(res, 201, out);
      return;
    }
    case RouteId::kTokenRevoke: {
      QL_HTTP_TRY(res, api::CheckFields(body, {}));
      QL_HTTP_ASSIGN(res, TokenRecord token, governance.RevokeToken(caller, id));
      SendJson(res, 200, api::TokenJson(token));
      return;
    }
    case RouteId::kProjectsCreate: {
      QL_HTTP_TRY(res, api::CheckFields(body, {"slug", "name"}));
      QL_HTTP_ASSIGN(res, std::string slug, api::RequiredString(body, "slug"));
      QL_HTTP_ASSIGN(res, std::optional<std::string> name, api::OptionalString(body, "name"));
      QL_HTTP_ASSIGN(res, ProjectRecord project,
                     governance.CreateProject(caller, slug, name.value_or("")));
      SendJson(res, 201, api::ProjectJson(project));
      return;
    }
    case RouteId::kProjectGet: {
      QL_HTTP_TRY(res, query.Check({}));
      QL_HTTP_ASSIGN(res, ProjectRecord project, governance.GetProject(caller, id));
      SendJson(res, 200, api::ProjectJson(project));
      return;
    }
    case RouteId::kProjectArchive: {
      QL_HTTP_TRY(res, api::CheckFields(body, {}));
      QL_HTTP_ASSIGN(res, ProjectRecord project, governance.ArchiveProject(caller, id));
      SendJson(res, 200, api::ProjectJson(project));
      return;
    }
    case RouteId::kProjectBindingsList:
    case RouteId::kInstallationBindingsList: {
      QL_HTTP_TRY(res, query.Check({}));
      const std::string scope = match.route->id == RouteId::kProjectBindingsList
                                    ? id
                                    : std::string(kInstallationScope);
      QL_HTTP_ASSIGN(res, std::vector<BindingView> bindings,
                     governance.ListBindings(caller, scope));
      json items = json::array();
      for (const BindingView& b : bindings) items.push_back(api::BindingJson(b));
      SendJson(res, 200, ItemsJson(std::move(items), std::nullopt));
      return;
    }
    case RouteId::kProjectBindingsWrite:
    case RouteId::kInstallationBindingsWrite: {
      QL_HTTP_TRY(res, api::CheckFields(body, {"principal", "role", "mutation_id"}));
      QL_HTTP_ASSIGN(res, std::string principal, api::RequiredString(body, "principal"));
      QL_HTTP_ASSIGN(res, std::string role, api::RequiredString(body, "role"));
      QL_HTTP_ASSIGN(res, std::optional<std::string> mutation_id,
                     api::OptionalString(body, "mutation_id"));
      const std::string scope = match.route->id == RouteId::kProjectBindingsWrite
                                    ? id
                                    : std::string(kInstallationScope);
      QL_HTTP_ASSIGN(res, WriteBindingResult written,
                     governance.WriteBinding(caller, scope, principal, role, mutation_id));
      res.SetHeader("X-QL-Replayed", BoolHeader(written.replayed));
      SendJson(res, written.replayed ? 200 : 201, api::BindingJson(written.binding));
      return;
    }
    case RouteId::kAuditList: {
      QL_HTTP_TRY(res, query.Check({"limit", "cursor"}));
      PageRequest page;
      QL_HTTP_ASSIGN(res, int64_t limit,
                     query.Integer("limit", "invalid_limit", 1, kMaxPageLimit, kDefaultPageLimit));
      page.limit = static_cast<int>(limit);
      page.after_key = query.Get("cursor");
      QL_HTTP_ASSIGN(res, Page<AuditRecord> facts, governance.ListAudit(caller, page));
      json items = json::array();
      for (const AuditRecord& a : facts.items) items.push_back(api::AuditJson(a));
      SendJson(res, 200, ItemsJson(std::move(items), facts.next_key));
      return;
    }
    case RouteId::kProjectRetentionGet:
    case RouteId::kProjectRetentionSet:
    case RouteId::kTaskRetentionGet:
    case RouteId::kTaskRetentionSet: {
      RetentionService& retention = service.retention();
      const bool task = match.route->id == RouteId::kTaskRetentionGet ||
                        match.route->id == RouteId::kTaskRetentionSet;
      if (!post) QL_HTTP_TRY(res, query.Check({}));
      std::string target = id;
      if (task) {
        QL_HTTP_ASSIGN(res, target, service.ResolveTaskRef(id, caller));
      }
      QL_HTTP_ASSIGN(res, RetentionView view,
                     task ? retention.GetTaskRetention(caller, target)
                          : retention.GetProjectRetention(caller, target));
      if (post) {
        QL_HTTP_ASSIGN(res, RetentionSettings settings,
                       api::ApplyRetentionBody(body, view.stored.settings));
        QL_HTTP_ASSIGN(res, view,
                       task ? retention.SetTaskRetention(caller, target, settings)
                            : retention.SetProjectRetention(caller, target, settings));
      }
      SendJson(res, 200, api::RetentionJson(view));
      return;
    }
    case RouteId::kSecretsList:
    case RouteId::kSecretPut:
    case RouteId::kSecretDelete:
      HandleSecrets(match.route->id, id, query, body, caller, res);
      return;
    case RouteId::kStatus: {
      QL_HTTP_TRY(res, query.Check({}));
      QL_HTTP_ASSIGN(res, StatusSummary summary, service.GetStatus(caller));
      json out = api::StatusJson(summary);
      out["ready"] = ready.load() && !withdrawn.load();
      if (!options.isolation_level.empty()) out["command_isolation"] = IsolationJson();
      SendJson(res, 200, out);
      return;
    }
  }
  SendError(res, 404, "route_not_found", "no route for " + QuoteForMessage(req.path, 128));
}

void ApiServer::Impl::HandleSecrets(RouteId route, const std::string& name, const Query& query,
                                    const json& body, const Caller& caller,
                                    http::Response& res) {
  if (options.secrets == nullptr) {
    SendError(res, 503, "secrets_unavailable", "this server does not hold secrets");
    return;
  }
  SecretService& secrets = *options.secrets;
  switch (route) {
    case RouteId::kSecretsList: {
      QL_HTTP_TRY(res, query.Check({}));
      QL_HTTP_ASSIGN(res, std::vector<SecretRecord> listed, secrets.List(caller));
      json items = json::array();
      for (const SecretRecord& secret : listed) items.push_back(api::SecretJson(secret));
      SendJson(res, 200, json{{"items", std::move(items)}});
      return;
    }
    case RouteId::kSecretPut: {
      // The value is answered by nothing: the reply is the secret's head.
      QL_HTTP_TRY(res, api::CheckFields(body, {"value"}));
      QL_HTTP_ASSIGN(res, std::string value, api::RequiredString(body, "value"));
      QL_HTTP_ASSIGN(res, SecretRecord stored, secrets.Set(caller, name, value));
      SendJson(res, 200, api::SecretJson(stored));
      return;
    }
    case RouteId::kSecretDelete: {
      QL_HTTP_TRY(res, query.Check({}));
      QL_HTTP_ASSIGN(res, SecretRecord deleted, secrets.Remove(caller, name));
      SendJson(res, 200, api::SecretJson(deleted));
      return;
    }
    default:
      break;
  }
  SendError(res, 404, "route_not_found", "no secrets route");
}

void ApiServer::Impl::HandleSignIn(RouteId route, const std::string& id,
                                   const http::Request& req, const Query& query,
                                   const json& body, const Caller& caller,
                                   const RequestIdentity& identity, http::Response& res) {
  SignInService& sign_in = *options.sign_in;
  const std::string secure = options.tls.has_value() ? "; Secure" : "";
  switch (route) {
    case RouteId::kSignIn: {
      // No signing in from another site's page (login CSRF: a form that signs the victim into
      // the attacker's account): a browser says where the request comes from, and a form
      // cannot send JSON.
      const std::string site = req.Header("Sec-Fetch-Site");
      const std::string type = req.Header("Content-Type");
      if ((!site.empty() && site != "same-origin" && site != "none") ||
          type.rfind("application/json", 0) != 0) {
        SendError(res, 403, "csrf_failed",
                  "sign in from this server's own page or a program sending application/json");
        return;
      }
      QL_HTTP_TRY(res, api::CheckFields(body, {"name", "password", "client", "totp"}));
      QL_HTTP_ASSIGN(res, std::optional<std::string> totp, api::OptionalString(body, "totp"));
      QL_HTTP_ASSIGN(res, std::string name, api::RequiredString(body, "name"));
      QL_HTTP_ASSIGN(res, std::string password, api::RequiredString(body, "password"));
      QL_HTTP_ASSIGN(res, std::optional<std::string> client, api::OptionalString(body, "client"));
      if (client.has_value() && *client != "panel" && *client != "cli") {
        SendError(res, 400, "invalid_client", "client is panel or cli, got " +
                                                  QuoteForMessage(*client));
        return;
      }
      const bool panel = client.value_or("panel") == "panel";
      Result<SignedIn> signed_in =
          sign_in.SignIn(name, password, panel ? SessionClient::kPanel : SessionClient::kCli,
                         req.remote_address,
                         caller.request_id.empty() ? req.Header("X-Request-Id").substr(0, 64)
                                                   : caller.request_id,
                         totp.value_or(""));
      if (!signed_in.ok()) {
        const std::string& reason = signed_in.status().reason();
        if (reason == "sign_in_failed" || reason == "totp_required") {
          SendError(res, 401, reason, signed_in.status().message());
        } else if (reason == "too_many_attempts") {
          res.SetHeader("Retry-After", "60");
          SendError(res, 429, reason, signed_in.status().message());
        } else {
          SendStatus(res, signed_in.status());
        }
        return;
      }
      json out{{"principal", api::PrincipalJson(signed_in->principal)},
               {"session", api::TokenJson(signed_in->session.record)},
               {"must_change_password", signed_in->must_change_password}};
      if (panel) {
        const int64_t max_age_s = (signed_in->session.record.expires_at_ms.value_or(0) -
                                   signed_in->session.record.created_at_ms) /
                                  1000;
        res.SetHeader("Set-Cookie", std::string(kSessionCookie) + "=" +
                                        signed_in->session.token + "; Path=/; Max-Age=" +
                                        std::to_string(max_age_s) +
                                        "; HttpOnly; SameSite=Strict" + secure);
        out["csrf_token"] = CsrfTokenOf(signed_in->session.token);
      } else {
        out["token"] = signed_in->session.token;
      }
      SendJson(res, 200, out);
      return;
    }
    case RouteId::kSignOut: {
      QL_HTTP_TRY(res, api::CheckFields(body, {}));
      QL_HTTP_TRY(res, sign_in.SignOut(caller));
      if (identity.via_cookie) {
        res.SetHeader("Set-Cookie", std::string(kSessionCookie) +
                                        "=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict" + secure);
      }
      SendJson(res, 200, json{{"signed_out", identity.who.token.kind == kTokenSession}});
      return;
    }
    case RouteId::kSessionsList: {
      QL_HTTP_TRY(res, query.Check({"principal"}));
      QL_HTTP_ASSIGN(res, std::vector<TokenRecord> sessions,
                     sign_in.ListSessions(caller, query.Get("principal").value_or("")));
      json items = json::array();
      for (const TokenRecord& t : sessions) {
        json item = api::TokenJson(t);
        item["current"] = t.id == identity.who.token.id;
        items.push_back(std::move(item));
      }
      SendJson(res, 200, ItemsJson(std::move(items), std::nullopt));
      return;
    }
    case RouteId::kSessionRevoke: {
      QL_HTTP_TRY(res, api::CheckFields(body, {}));
      QL_HTTP_ASSIGN(res, TokenRecord session, sign_in.RevokeSession(caller, id));
      SendJson(res, 200, api::TokenJson(session));
      return;
    }
    case RouteId::kPasswordChange: {
      QL_HTTP_TRY(res, api::CheckFields(body, {"current_password", "new_password"}));
      QL_HTTP_ASSIGN(res, std::optional<std::string> current,
                     api::OptionalString(body, "current_password"));
      QL_HTTP_ASSIGN(res, std::string replacement, api::RequiredString(body, "new_password"));
      QL_HTTP_TRY(res, sign_in.ChangeOwnPassword(caller, current.value_or(""), replacement));
      SendJson(res, 200, json{{"password_set", true}});
      return;
    }
    case RouteId::kPrincipalPassword: {
      QL_HTTP_TRY(res, api::CheckFields(body, {"new_password", "require_change"}));
      QL_HTTP_ASSIGN(res, std::string replacement, api::RequiredString(body, "new_password"));
      bool require_change = false;
      if (body.contains("require_change")) {
        if (!body.at("require_change").is_boolean()) {
          SendError(res, 400, "invalid_require_change", "require_change is true or false");
          return;
        }
        require_change = body.at("require_change").get<bool>();
      }
      QL_HTTP_TRY(res, sign_in.ResetPassword(caller, id, replacement, require_change));
      SendJson(res, 200, json{{"password_set", true}, {"require_change", require_change}});
      return;
    }
    case RouteId::kTotpEnrol: {
      QL_HTTP_TRY(res, api::CheckFields(body, {}));
      QL_HTTP_ASSIGN(res, SignInService::TotpEnrolment enrolment, sign_in.EnrolTotp(caller));
      SendJson(res, 200, json{{"secret", enrolment.secret}, {"otpauth_uri", enrolment.uri}});
      return;
    }
    case RouteId::kTotpConfirm: {
      QL_HTTP_TRY(res, api::CheckFields(body, {"code"}));
      QL_HTTP_ASSIGN(res, std::string code, api::RequiredString(body, "code"));
      QL_HTTP_ASSIGN(res, std::vector<std::string> recovery, sign_in.ConfirmTotp(caller, code));
      SendJson(res, 200, json{{"enabled", true}, {"recovery_codes", recovery}});
      return;
    }
    case RouteId::kTotpDisable: {
      QL_HTTP_TRY(res, api::CheckFields(body, {"current_password"}));
      QL_HTTP_ASSIGN(res, std::string current, api::RequiredString(body, "current_password"));
      QL_HTTP_TRY(res, sign_in.DisableTotp(caller, current));
      SendJson(res, 200, json{{"enabled", false}});
      return;
    }
    default:
      break;
  }
  SendError(res, 404, "route_not_found", "no sign-in route");
}

void ApiServer::Impl::ServeLog(const std::string& run_id, const http::Request& req,
                               const Caller& caller, const RequestIdentity& identity,
                               http::Response& res) {
  const Query query(req);
  QL_HTTP_TRY(res, query.Check({"offset", "limit", "attempt", "follow"}));
  QL_HTTP_ASSIGN(res, int64_t offset, query.Integer("offset", "invalid_offset", 0, INT64_MAX, 0));
  QL_HTTP_ASSIGN(res, int64_t limit,
                 query.Integer("limit", "invalid_limit", 1, static_cast<int64_t>(kMaxLogChunkBytes),
                               static_cast<int64_t>(kDefaultLogChunkBytes)));
  QL_HTTP_ASSIGN(res, int64_t attempt_number,
                 query.Integer("attempt", "invalid_attempt", 1, 1'000'000, 0));
  QL_HTTP_ASSIGN(res, bool follow, query.Bool("follow", "invalid_follow", false));
  QL_HTTP_ASSIGN(res, RunView view, service.GetRun(run_id, caller));
  const AttemptRecord* attempt = nullptr;
  for (const AttemptRecord& a : view.attempts) {
    if (attempt_number == 0 || a.attempt == attempt_number) attempt = &a;
  }
  if (attempt == nullptr) {
    SendError(res, 404, "attempt_not_found",
              attempt_number == 0
                  ? "run " + run_id + " has no attempt"
                  : "run " + run_id + " has no attempt " + std::to_string(attempt_number));
    return;
  }
  res.SetHeader("X-QL-Attempt", std::to_string(attempt->attempt));
  if (follow) {
    StartFollow(run_id, attempt->attempt, offset, caller, identity, res);
    return;
  }
  QL_HTTP_ASSIGN(res, LogChunk chunk,
                 options.log_reader->ReadLog(*attempt, offset, static_cast<size_t>(limit)));
  res.SetHeader("X-QL-Log-Offset", std::to_string(offset));
  res.SetHeader("X-QL-Log-Next-Offset", std::to_string(chunk.next_offset));
  res.SetHeader("X-QL-Log-Eof", chunk.eof ? "true" : "false");
  res.SetHeader("X-QL-Log-Exists", chunk.exists ? "true" : "false");
  res.SetHeader("X-QL-Log-Size", std::to_string(chunk.size));
  res.status = 200;
  res.SetContent(std::move(chunk.data), "text/plain; charset=utf-8");
}

void ApiServer::Impl::StartFollow(const std::string& run_id, int attempt_number, int64_t offset,
                                  const Caller& caller, const RequestIdentity& identity,
                                  http::Response& res) {
  if (followers.fetch_add(1) >= options.max_log_followers) {
    followers.fetch_sub(1);
    res.SetHeader("Retry-After", "5");
    SendError(res, 503, "overloaded",
              "at most " + std::to_string(options.max_log_followers) +
                  " log follow streams may be open at once");
    return;
  }
  struct FollowState {
    std::string run_id;
    int attempt_number = 0;
    int64_t position = 0;
    std::chrono::steady_clock::time_point deadline;
    Caller caller;
    std::string token_digest;
  };
  auto state = std::make_shared<FollowState>();
  state->caller = caller;
  state->token_digest = identity.token_digest;
  state->run_id = run_id;
  state->attempt_number = attempt_number;
  state->position = offset;
  state->deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(options.max_follow_ms);
  res.status = 200;
  res.SetHeader("Content-Type", "text/plain; charset=utf-8");
  res.on_stream_end = [this] { followers.fetch_sub(1); };
  // One turn per call: confirm the follower, send what is new, or wait a poll interval.
  res.stream = [this, state](const std::atomic<bool>& gone) -> http::StreamStep {
    if (gone.load() || withdrawn.load() || std::chrono::steady_clock::now() >= state->deadline) {
      return {};
    }
    // The follower's token and its right to read the run are confirmed at every turn: a
    // revoked token (within the authentication cache's bound), a disabled principal or a
    // revoked role ends the stream.
    if (!options.authenticate(state->token_digest).ok()) return {};
    // Look at the run before reading: when it is finished and the read then finds nothing
    // new, the file is drained for good.
    Result<RunView> view = service.GetRun(state->run_id, state->caller);
    if (!view.ok()) return {};
    const AttemptRecord* attempt = nullptr;
    for (const AttemptRecord& a : view->attempts) {
      if (a.attempt == state->attempt_number) attempt = &a;
    }
    if (attempt == nullptr) return {};
    const std::optional<RunStatus> run_status = ParseRunStatus(view->run.status);
    const std::optional<AttemptStatus> attempt_status = ParseAttemptStatus(attempt->status);
    const bool finished = (run_status.has_value() && IsTerminal(*run_status)) ||
                          (attempt_status.has_value() && IsTerminal(*attempt_status));
    Result<LogChunk> chunk =
        options.log_reader->ReadLog(*attempt, state->position, kDefaultLogChunkBytes);
    if (!chunk.ok()) return {};
    if (!chunk->data.empty()) {
      state->position = chunk->next_offset;
      return {std::move(chunk->data), true};
    }
    if (finished) return {};
    std::unique_lock<std::mutex> lock(wake_mu);
    wake_cv.wait_for(lock, std::chrono::milliseconds(options.follow_poll_ms),
                     [this] { return withdrawn.load(); });
    return {std::string(), true};
  };
}

std::vector<ApiRoute> ApiRoutes() {
  std::vector<ApiRoute> out;
  for (const RouteSpec& r : kRoutes) {
    out.push_back(ApiRoute{std::string(r.method), std::string(r.pattern), std::string(r.name),
                           std::string(r.permission)});
  }
  return out;
}

Status ApiServer::Start(const std::string& host, int port) {
  Impl& s = *impl_;
  if (s.started.exchange(true)) return Conflict("already_started", "the server was started");
  const ApiServerOptions& o = s.options;
  auto invalid = [&](const std::string& message) {
    s.started = false;
    return InvalidArgument("invalid_server_options", message);
  };
  if (!o.authenticate) return invalid("authenticate is required");
  if (o.max_body_bytes < 1024 || o.max_body_bytes > (size_t{16} << 20)) {
    return invalid("max_body_bytes must be 1 KiB .. 16 MiB");
  }
  if (o.max_in_flight < 1 || o.max_in_flight > 10'000) return invalid("max_in_flight 1..10000");
  if (o.max_connections <= o.max_in_flight || o.max_connections > 100'000) {
    return invalid("max_connections must be max_in_flight+1..100000");
  }
  if (o.max_connections_per_address < 1) return invalid("max_connections_per_address must be > 0");
  if (o.threads < 1 || o.threads > 64) return invalid("threads must be 1..64");
  if (o.max_log_followers < 0 || o.max_log_followers >= o.threads) {
    return invalid("max_log_followers must be 0..threads-1 so followers never take every worker");
  }
  if (o.read_timeout_ms < 1 || o.write_timeout_ms < 1 || o.idle_timeout_ms < 1) {
    return invalid("timeouts must be > 0");
  }
  if (o.min_body_bytes_per_second < 1) return invalid("min_body_bytes_per_second must be > 0");
  if (o.max_follow_ms < 1 || o.follow_poll_ms < 1) {
    return invalid("max_follow_ms and follow_poll_ms must be > 0");
  }
  if (o.log_reader == nullptr) return invalid("log_reader is required");
  if (port < 0 || port > 65535) return invalid("port must be 0..65535");

  Result<std::unique_ptr<http::HttpServer>> server =
      http::HttpServer::Create(o.tls, s.Limits(), s.Handlers());
  if (!server.ok()) {
    s.started = false;
    return server.status();
  }
  s.server = std::move(server).value();
  if (Status listening = s.server->Start(host, port); !listening.ok()) {
    s.server.reset();
    s.started = false;
    return listening;
  }
  s.port = s.server->port();
  return Status::Ok();
}

int ApiServer::port() const { return impl_->port; }

void ApiServer::SetReady(bool ready) {
  SetReadiness(ready ? Status::Ok()
                     : Unavailable("not_ready", "the server is starting and not ready yet"));
}

void ApiServer::SetReadiness(const Status& readiness) {
  std::lock_guard<std::mutex> lock(impl_->readiness_mu);
  if (!readiness.ok()) impl_->not_ready = readiness;
  impl_->ready = readiness.ok();
}

void ApiServer::WithdrawAdmission() {
  {
    std::lock_guard<std::mutex> lock(impl_->wake_mu);
    impl_->withdrawn = true;
  }
  impl_->wake_cv.notify_all();
}

void ApiServer::Stop() {
  WithdrawAdmission();
  if (impl_->stopped.exchange(true)) return;
  if (!impl_->started.load()) return;
  impl_->server->Stop();
}

}  // namespace ql
