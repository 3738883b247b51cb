#include "ql/http/api_server.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <limits>
#include <mutex>
#include <set>
#include <string_view>
#include <thread>
#include <utility>

#include "ql/core/canonical_json.h"
#include "ql/core/digest.h"
#include "ql/core/rfc3339.h"
#include "ql/core/states.h"
#include "ql/core/store_commands.h"
#include "ql/core/timezone.h"
#include "ql/engine/log_search.h"
#include "ql/http/access_log.h"
#include "ql/http/api_json.h"
#include "ql/http/http_server.h"
#include "ql/http/openapi_document.h"
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

// What a route expects of its request body.
enum class Body {
  kNone,      // GET and DELETE: no body is read; handlers see {}
  kOptional,  // an empty body counts as {}
  kRequired,  // a JSON object must be sent
  kBytes,     // raw bytes, not parsed: the handler checks the media type once the caller is
              // allowed, then reads req.body
};

// A service a route needs that a server may not hold.
enum class Needs { kNothing, kSignIn, kSecrets, kNotify, kScripts, kPlacement };

struct Call;

// One route: the request it answers, who may call it, its body and its handler. The table
// (kRoutes, below ApiServer::Impl) is the only place routes are declared: admission, dispatch,
// metrics and ApiRoutes() all read it.
struct RouteSpec {
  std::string_view method;
  std::string_view pattern;  // "{id}" matches one non-empty path segment
  std::string_view name;     // metric label: bounded, never an id
  // Who may call it (docs/api.md): public | authenticated | viewer | operator | admin | owner
  // (in the request's project, or the addressed object's) | installation_admin | self (the
  // principal itself, or an installation admin).
  std::string_view permission;
  Body body;
  Needs needs;
  void (ApiServer::Impl::*handle)(Call&);
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

bool IsApiPath(std::string_view path) {
  return path == kApiPrefix ||
         (path.size() > kApiPrefix.size() && path.compare(0, kApiPrefix.size(), kApiPrefix) == 0 &&
          path[kApiPrefix.size()] == '/');
}

void SendJson(http::Response& res, int status, const json& body) {
  res.status = status;
  res.SetContent(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void SendError(http::Response& res, int status, std::string_view code, std::string_view message) {
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

// What admission decided about a request: its route and its identity, from the request line
// and headers, before any body is read, carried by the request itself (Request::decision) to
// its handler and to the metrics. Routes are matched here once; dispatch never matches again.
// An /api/v1 request that reaches its handler without an identity is refused; nothing on this
// side maps "no principal" to the system.
struct Admission {
  const RouteSpec* route = nullptr;  // nullptr: no route (the request was refused)
  std::string id;                    // the route's {id} segment, decoded
  bool decided = false;              // `who` holds an authenticated identity
  Authentication who;
  std::string token_digest;
  // Authenticated by the panel's session cookie (not an Authorization header): its writes need
  // the session's CSRF token.
  bool via_cookie = false;
  // When admission began (the clock's monotonic reading), and the bytes of the answer's body
  // (the listener moves the body out before the answer is logged), for the daemon log. Written
  // by the request's own admission, handler and stream, one after the other.
  int64_t admitted_ms = 0;
  mutable std::atomic<int64_t> body_bytes{0};
};

// The panel's session cookie.
constexpr std::string_view kSessionCookie = "ql_session";

// The CSRF token of a session: derived from the session's token, which the page's script never
// sees (the cookie is HttpOnly), so a cross-site page cannot compute it.
std::string CsrfTokenOf(std::string_view session_token) {
  return Sha256Hex(std::string("ql-csrf:") + std::string(session_token)).substr(0, 32);
}

// The routes a restricted session may use: what lifts the restriction, and what a page needs
// to show it.
bool AllowedWhileRestricted(std::string_view restriction, std::string_view route) {
  static constexpr std::string_view kAlways[] = {"whoami", "sign_out", "password.change"};
  static constexpr std::string_view kEnrolment[] = {"totp.enrol", "totp.confirm"};
  for (std::string_view r : kAlways) {
    if (r == route) return true;
  }
  if (restriction == kRestrictTotpEnrolment) {
    for (std::string_view r : kEnrolment) {
      if (r == route) return true;
    }
  }
  return false;
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

namespace {

// What a route's handler is given: the request, its answer, and what admission and the
// route's policies decided before it ran.
struct Call {
  const http::Request& req;
  http::Response& res;
  const Admission& identity;
  // The route's {id} segment, decoded ("" when the pattern has none); for /api/v1/runs/{id}
  // routes, the run id a prefix names.
  std::string id;
  Query query;
  Caller caller;  // /api/v1 routes: who acts, with the request's project and request id
  json body;      // the JSON body per the route's Body policy; {} when there is none
};

}  // namespace

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
  // Set by SetWritable: while true, writes are refused with `write_refusal` (under
  // readiness_mu).
  std::atomic<bool> writes_refused{false};
  Status write_refusal;
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
  // Records the size of `res`'s body in the request's admission, counting a stream as it goes.
  void CountBody(const http::Request& req, http::Response& res) const;
  // Writes the access log line and the slow-request warning of an answered request.
  void LogAnswer(const http::Request& req, const http::Response& res, const Admission* decided,
                 std::string_view route);
  const Clock& clock() const { return options.clock != nullptr ? *options.clock : SystemClock(); }
  json IsolationJson() const {
    return json{{"level", options.isolation_level}, {"detail", options.isolation_detail}};
  }
  // The routes' handlers (kRoutes names each).
  void Livez(Call& c);
  void Readyz(Call& c);
  void ScrapeMetrics(Call& c);
  void OpenApi(Call& c);
  void ProjectsList(Call& c);
  void TasksCreate(Call& c);
  void TasksList(Call& c);
  void TaskGet(Call& c);
  void TaskRevisionsCreate(Call& c);
  void TaskDelete(Call& c);
  void TaskEnable(Call& c);
  void TaskDisable(Call& c);
  void AnswerTask(Call& c, const Result<PublishedTask>& published);
  // Sets task_name, trigger_name, requester_name, actor_name, target_name and
  // decision.decided_by_name beside the ids of runs, triggers, approval requests and audit facts
  // (`items`: one object or an array of them); null when the object is gone.
  Status AddNames(json& items);
  void TriggerDelete(Call& c);
  void TaskRevisionsList(Call& c);
  void TriggersCreate(Call& c);
  void TriggerRevisionsCreate(Call& c);
  void TriggersList(Call& c);
  void TriggerGet(Call& c);
  void TriggerEnable(Call& c);
  void TriggerDisable(Call& c);
  void TriggerRepin(Call& c);
  void AnswerTrigger(Call& c, const Result<PublishedTrigger>& published);
  void TriggerNext(Call& c);
  void CronNext(Call& c);
  void RunsList(Call& c);
  void RunsCreate(Call& c);
  void TaskRunsCreate(Call& c);
  void StartRun(Call& c, StartRunRequest request);
  void RunResolve(Call& c);
  void ApprovalsList(Call& c);
  void ApprovalGet(Call& c);
  void ApprovalApprove(Call& c);
  void ApprovalReject(Call& c);
  void RunGet(Call& c);
  void RunEvents(Call& c);
  void RunLog(Call& c);
  void RunLogSearch(Call& c);
  void RunCancel(Call& c);
  void RunRetry(Call& c);
  void Whoami(Call& c);
  void PrincipalsList(Call& c);
  void PrincipalsCreate(Call& c);
  void PrincipalGet(Call& c);
  void PrincipalDisable(Call& c);
  void PrincipalEnable(Call& c);
  void SetPrincipalStatus(Call& c, std::string_view status);
  void TokensList(Call& c);
  void TokensCreate(Call& c);
  void TokenRevoke(Call& c);
  void ProjectsCreate(Call& c);
  void ProjectGet(Call& c);
  void ProjectArchive(Call& c);
  void ProjectBindingsList(Call& c);
  void InstallationBindingsList(Call& c);
  void ListBindings(Call& c, const std::string& scope);
  void ProjectBindingsWrite(Call& c);
  void InstallationBindingsWrite(Call& c);
  void WriteBinding(Call& c, const std::string& scope);
  void AuditList(Call& c);
  void ProjectRetentionGet(Call& c);
  void ProjectRetentionSet(Call& c);
  void TaskRetentionGet(Call& c);
  void TaskRetentionSet(Call& c);
  void AnswerRetention(Call& c, bool task, bool set);
  void GetStatus(Call& c);
  void SecretsList(Call& c);
  void BlobUpload(Call& c);
  void BlobCompose(Call& c);
  void BlobGet(Call& c);
  void ScriptsList(Call& c);
  void ScriptGet(Call& c);
  void ScriptVersionsList(Call& c);
  void ScriptPush(Call& c);
  void ScriptContent(Call& c);
  void ScriptDelete(Call& c);
  void PoolsList(Call& c);
  void PoolGet(Call& c);
  void PoolSet(Call& c);
  void PoolGrant(Call& c);
  void PoolRevoke(Call& c);
  void WorkersList(Call& c);
  void WorkerGet(Call& c);
  void WorkerDrain(Call& c);
  void WorkerResume(Call& c);
  // Streams a blob the caller's project holds, chunk by chunk, each verified.
  void StreamBlob(const Caller& caller, const BlobDescriptor& blob, std::string content_type,
                  http::Response& res);
  void SecretPut(Call& c);
  void SecretDelete(Call& c);
  void NotifyChannelsList(Call& c);
  void NotifyChannelsCreate(Call& c);
  void NotifyChannelDelete(Call& c);
  void NotifyChannelTest(Call& c);
  void NotifyRulesList(Call& c);
  void NotifyRulesCreate(Call& c);
  void NotifyRuleDelete(Call& c);
  void NotifyDeliveriesList(Call& c);
  void NotifyRedeliver(Call& c);
  // The names rules and deliveries show: live channels by id (null once deleted), tasks.
  struct NotifyNames {
    std::map<std::string, std::string> channels;
    std::map<std::string, std::string> tasks;
    json Channel(const std::string& id) const;
    json Task(const std::optional<std::string>& id) const;
  };
  Result<NotifyNames> NamesForNotify(const Caller& caller, const std::set<std::string>& task_ids);
  // The answer objects of rules and deliveries, with channel and task names.
  Result<json> RulesJson(const Caller& caller, const std::vector<RuleRecord>& rules);
  Result<json> DeliveriesJson(const Caller& caller, const std::vector<OutboxRecord>& rows);
  void SignIn(Call& c);
  void SignInMethods(Call& c);
  void PrincipalPasswordRemove(Call& c);
  void OidcBegin(Call& c);
  void OidcCallback(Call& c);
  void Setup(Call& c);
  void SettingsGet(Call& c);
  void SettingsSet(Call& c);
  // Answers a sign-in: the session as an HttpOnly cookie for the panel, else its token.
  void SendSignedIn(Call& c, const SignedIn& signed_in, bool panel);
  // Refuses a sign-in request sent from another site's page or not as JSON (login CSRF).
  bool RefuseCrossSiteSignIn(Call& c);
  void SignOut(Call& c);
  void SessionsList(Call& c);
  void SessionRevoke(Call& c);
  void PasswordChange(Call& c);
  void PrincipalPassword(Call& c);
  void TotpEnrol(Call& c);
  void TotpConfirm(Call& c);
  void TotpDisable(Call& c);
  // "; Secure" when the listener speaks TLS: the attribute of every cookie set.
  std::string SecureAttribute() const { return options.tls.has_value() ? "; Secure" : ""; }
  enum class Auth { kOk, kDenied, kUnavailable };
  // Authenticates the bearer token of `req`; on kOk fills `who` and `digest` (of the token), on
  // kDenied `why` (a code).
  // A request without an Authorization header authenticates with the panel's session cookie;
  // then `csrf` (when given) receives the CSRF token its writes must carry.
  Auth Authenticate(const http::Request& req, Authentication* who, std::string* why,
                    std::string* digest = nullptr, std::string* csrf = nullptr) const;
  // The caller of an /api/v1 request whose identity PreRoute decided: its principal, its
  // token's expiry, the `project` query parameter and the request id.
  static Caller CallerOf(const http::Request& req, const Admission& identity);
  void ServeLog(const std::string& run_id, const http::Request& req, const Caller& caller,
                const Admission& identity, http::Response& res);
  void StartFollow(const std::string& run_id, int attempt_number, int64_t offset,
                   const Caller& caller, const Admission& identity, http::Response& res);
};

namespace {

using Impl = ApiServer::Impl;

const RouteSpec kRoutes[] = {
    {"GET", "/livez", "livez", "public", Body::kNone, Needs::kNothing, &Impl::Livez},
    {"GET", "/readyz", "readyz", "public", Body::kNone, Needs::kNothing, &Impl::Readyz},
    {"GET", "/metrics", "metrics", "public", Body::kNone, Needs::kNothing, &Impl::ScrapeMetrics},
    {"GET", "/api/v1/openapi.json", "openapi", "public", Body::kNone, Needs::kNothing,
     &Impl::OpenApi},
    {"GET", "/api/v1/whoami", "whoami", "authenticated", Body::kNone, Needs::kNothing,
     &Impl::Whoami},
    {"POST", "/api/v1/sign-in", "sign_in", "public", Body::kRequired, Needs::kSignIn,
     &Impl::SignIn},
    {"GET", "/api/v1/sign-in/methods", "sign_in.methods", "public", Body::kNone, Needs::kSignIn,
     &Impl::SignInMethods},
    {"GET", "/api/v1/sign-in/oidc", "sign_in.oidc", "public", Body::kNone, Needs::kSignIn,
     &Impl::OidcBegin},
    {"GET", "/api/v1/sign-in/oidc/callback", "sign_in.oidc_callback", "public", Body::kNone,
     Needs::kSignIn, &Impl::OidcCallback},
    {"POST", "/api/v1/setup", "setup", "public", Body::kRequired, Needs::kSignIn, &Impl::Setup},
    {"GET", "/api/v1/settings", "settings.get", "installation_admin", Body::kNone, Needs::kSignIn,
     &Impl::SettingsGet},
    {"POST", "/api/v1/settings", "settings.write", "installation_admin", Body::kRequired,
     Needs::kSignIn, &Impl::SettingsSet},
    {"POST", "/api/v1/sign-out", "sign_out", "authenticated", Body::kOptional, Needs::kSignIn,
     &Impl::SignOut},
    {"GET", "/api/v1/sessions", "sessions.list", "self", Body::kNone, Needs::kSignIn,
     &Impl::SessionsList},
    {"POST", "/api/v1/sessions/{id}/revoke", "sessions.revoke", "self", Body::kOptional,
     Needs::kSignIn, &Impl::SessionRevoke},
    {"POST", "/api/v1/password", "password.change", "authenticated", Body::kRequired,
     Needs::kSignIn, &Impl::PasswordChange},
    {"POST", "/api/v1/principals/{id}/password", "principals.password", "installation_admin",
     Body::kRequired, Needs::kSignIn, &Impl::PrincipalPassword},
    {"DELETE", "/api/v1/principals/{id}/password", "principals.password.remove",
     "installation_admin", Body::kNone, Needs::kSignIn, &Impl::PrincipalPasswordRemove},
    {"POST", "/api/v1/totp/enrol", "totp.enrol", "authenticated", Body::kOptional, Needs::kSignIn,
     &Impl::TotpEnrol},
    {"POST", "/api/v1/totp/confirm", "totp.confirm", "authenticated", Body::kRequired,
     Needs::kSignIn, &Impl::TotpConfirm},
    {"POST", "/api/v1/totp/disable", "totp.disable", "authenticated", Body::kRequired,
     Needs::kSignIn, &Impl::TotpDisable},
    {"GET", "/api/v1/projects", "projects.list", "authenticated", Body::kNone, Needs::kNothing,
     &Impl::ProjectsList},
    {"POST", "/api/v1/projects", "projects.create", "installation_admin", Body::kRequired,
     Needs::kNothing, &Impl::ProjectsCreate},
    {"GET", "/api/v1/projects/{id}", "projects.get", "viewer", Body::kNone, Needs::kNothing,
     &Impl::ProjectGet},
    {"POST", "/api/v1/projects/{id}/archive", "projects.archive", "owner", Body::kOptional,
     Needs::kNothing, &Impl::ProjectArchive},
    {"GET", "/api/v1/projects/{id}/bindings", "projects.bindings.list", "viewer", Body::kNone,
     Needs::kNothing, &Impl::ProjectBindingsList},
    {"POST", "/api/v1/projects/{id}/bindings", "projects.bindings.write", "admin", Body::kRequired,
     Needs::kNothing, &Impl::ProjectBindingsWrite},
    {"GET", "/api/v1/installation/bindings", "installation.bindings.list", "installation_admin",
     Body::kNone, Needs::kNothing, &Impl::InstallationBindingsList},
    {"POST", "/api/v1/installation/bindings", "installation.bindings.write", "installation_admin",
     Body::kRequired, Needs::kNothing, &Impl::InstallationBindingsWrite},
    {"GET", "/api/v1/principals", "principals.list", "installation_admin", Body::kNone,
     Needs::kNothing, &Impl::PrincipalsList},
    {"POST", "/api/v1/principals", "principals.create", "installation_admin", Body::kRequired,
     Needs::kNothing, &Impl::PrincipalsCreate},
    {"GET", "/api/v1/principals/{id}", "principals.get", "self", Body::kNone, Needs::kNothing,
     &Impl::PrincipalGet},
    {"POST", "/api/v1/principals/{id}/disable", "principals.disable", "installation_admin",
     Body::kOptional, Needs::kNothing, &Impl::PrincipalDisable},
    {"POST", "/api/v1/principals/{id}/enable", "principals.enable", "installation_admin",
     Body::kOptional, Needs::kNothing, &Impl::PrincipalEnable},
    {"GET", "/api/v1/tokens", "tokens.list", "self", Body::kNone, Needs::kNothing,
     &Impl::TokensList},
    {"POST", "/api/v1/tokens", "tokens.create", "self", Body::kOptional, Needs::kNothing,
     &Impl::TokensCreate},
    {"POST", "/api/v1/tokens/{id}/revoke", "tokens.revoke", "self", Body::kOptional,
     Needs::kNothing, &Impl::TokenRevoke},
    {"GET", "/api/v1/audit", "audit.list", "installation_admin", Body::kNone, Needs::kNothing,
     &Impl::AuditList},
    {"POST", "/api/v1/tasks", "tasks.create", "admin", Body::kRequired, Needs::kNothing,
     &Impl::TasksCreate},
    {"GET", "/api/v1/tasks", "tasks.list", "viewer", Body::kNone, Needs::kNothing,
     &Impl::TasksList},
    {"GET", "/api/v1/tasks/{id}", "tasks.get", "viewer", Body::kNone, Needs::kNothing,
     &Impl::TaskGet},
    {"POST", "/api/v1/tasks/{id}/revisions", "tasks.revisions.create", "admin", Body::kRequired,
     Needs::kNothing, &Impl::TaskRevisionsCreate},
    {"DELETE", "/api/v1/tasks/{id}", "tasks.delete", "admin", Body::kNone, Needs::kNothing,
     &Impl::TaskDelete},
    {"POST", "/api/v1/tasks/{id}/enable", "tasks.enable", "admin", Body::kOptional, Needs::kNothing,
     &Impl::TaskEnable},
    {"POST", "/api/v1/tasks/{id}/disable", "tasks.disable", "admin", Body::kOptional,
     Needs::kNothing, &Impl::TaskDisable},
    {"GET", "/api/v1/tasks/{id}/revisions", "tasks.revisions.list", "viewer", Body::kNone,
     Needs::kNothing, &Impl::TaskRevisionsList},
    {"POST", "/api/v1/triggers", "triggers.create", "admin", Body::kRequired, Needs::kNothing,
     &Impl::TriggersCreate},
    {"GET", "/api/v1/triggers", "triggers.list", "viewer", Body::kNone, Needs::kNothing,
     &Impl::TriggersList},
    {"GET", "/api/v1/triggers/{id}", "triggers.get", "viewer", Body::kNone, Needs::kNothing,
     &Impl::TriggerGet},
    {"POST", "/api/v1/triggers/{id}/enable", "triggers.enable", "operator", Body::kOptional,
     Needs::kNothing, &Impl::TriggerEnable},
    {"POST", "/api/v1/triggers/{id}/disable", "triggers.disable", "operator", Body::kOptional,
     Needs::kNothing, &Impl::TriggerDisable},
    {"POST", "/api/v1/triggers/{id}/repin", "triggers.repin", "admin", Body::kOptional,
     Needs::kNothing, &Impl::TriggerRepin},
    {"POST", "/api/v1/triggers/{id}/revisions", "triggers.revisions.create", "admin",
     Body::kRequired, Needs::kNothing, &Impl::TriggerRevisionsCreate},
    {"GET", "/api/v1/triggers/{id}/next", "triggers.next", "viewer", Body::kNone, Needs::kNothing,
     &Impl::TriggerNext},
    {"DELETE", "/api/v1/triggers/{id}", "triggers.delete", "admin", Body::kNone, Needs::kNothing,
     &Impl::TriggerDelete},
    {"GET", "/api/v1/cron/next", "cron.next", "authenticated", Body::kNone, Needs::kNothing,
     &Impl::CronNext},
    {"GET", "/api/v1/runs", "runs.list", "viewer", Body::kNone, Needs::kNothing, &Impl::RunsList},
    {"POST", "/api/v1/runs", "runs.create", "operator", Body::kRequired, Needs::kNothing,
     &Impl::RunsCreate},
    {"GET", "/api/v1/runs/{id}", "runs.get", "viewer", Body::kNone, Needs::kNothing, &Impl::RunGet},
    {"GET", "/api/v1/runs/{id}/events", "runs.events", "viewer", Body::kNone, Needs::kNothing,
     &Impl::RunEvents},
    {"GET", "/api/v1/runs/{id}/log", "runs.log", "viewer", Body::kNone, Needs::kNothing,
     &Impl::RunLog},
    {"GET", "/api/v1/runs/{id}/log/search", "runs.log.search", "viewer", Body::kNone,
     Needs::kNothing, &Impl::RunLogSearch},
    {"POST", "/api/v1/runs/{id}/cancel", "runs.cancel", "operator", Body::kOptional,
     Needs::kNothing, &Impl::RunCancel},
    {"POST", "/api/v1/runs/{id}/retry", "runs.retry", "operator", Body::kOptional, Needs::kNothing,
     &Impl::RunRetry},
    {"POST", "/api/v1/runs/{id}/resolve", "runs.resolve", "admin", Body::kRequired, Needs::kNothing,
     &Impl::RunResolve},
    {"POST", "/api/v1/tasks/{id}/runs", "tasks.runs.create", "operator", Body::kOptional,
     Needs::kNothing, &Impl::TaskRunsCreate},
    {"GET", "/api/v1/approvals", "approvals.list", "viewer", Body::kNone, Needs::kNothing,
     &Impl::ApprovalsList},
    {"GET", "/api/v1/approvals/{id}", "approvals.get", "viewer", Body::kNone, Needs::kNothing,
     &Impl::ApprovalGet},
    {"POST", "/api/v1/approvals/{id}/approve", "approvals.approve", "admin", Body::kOptional,
     Needs::kNothing, &Impl::ApprovalApprove},
    {"POST", "/api/v1/approvals/{id}/reject", "approvals.reject", "operator", Body::kRequired,
     Needs::kNothing, &Impl::ApprovalReject},
    {"GET", "/api/v1/status", "status", "viewer", Body::kNone, Needs::kNothing, &Impl::GetStatus},
    {"GET", "/api/v1/projects/{id}/retention", "projects.retention.get", "viewer", Body::kNone,
     Needs::kNothing, &Impl::ProjectRetentionGet},
    {"POST", "/api/v1/projects/{id}/retention", "projects.retention.set", "admin", Body::kOptional,
     Needs::kNothing, &Impl::ProjectRetentionSet},
    {"GET", "/api/v1/tasks/{id}/retention", "tasks.retention.get", "viewer", Body::kNone,
     Needs::kNothing, &Impl::TaskRetentionGet},
    {"POST", "/api/v1/tasks/{id}/retention", "tasks.retention.set", "admin", Body::kOptional,
     Needs::kNothing, &Impl::TaskRetentionSet},
    {"GET", "/api/v1/secrets", "secrets.list", "viewer", Body::kNone, Needs::kSecrets,
     &Impl::SecretsList},
    {"PUT", "/api/v1/secrets/{id}", "secrets.put", "admin", Body::kRequired, Needs::kSecrets,
     &Impl::SecretPut},
    {"DELETE", "/api/v1/secrets/{id}", "secrets.delete", "admin", Body::kNone, Needs::kSecrets,
     &Impl::SecretDelete},
    {"POST", "/api/v1/blobs", "blobs.upload", "admin", Body::kBytes, Needs::kScripts,
     &Impl::BlobUpload},
    {"POST", "/api/v1/blobs/compose", "blobs.compose", "admin", Body::kRequired, Needs::kScripts,
     &Impl::BlobCompose},
    {"GET", "/api/v1/blobs/{id}", "blobs.get", "viewer", Body::kNone, Needs::kScripts,
     &Impl::BlobGet},
    {"GET", "/api/v1/scripts", "scripts.list", "viewer", Body::kNone, Needs::kScripts,
     &Impl::ScriptsList},
    {"GET", "/api/v1/scripts/{id}", "scripts.get", "viewer", Body::kNone, Needs::kScripts,
     &Impl::ScriptGet},
    {"DELETE", "/api/v1/scripts/{id}", "scripts.delete", "admin", Body::kNone, Needs::kScripts,
     &Impl::ScriptDelete},
    {"GET", "/api/v1/scripts/{id}/versions", "scripts.versions.list", "viewer", Body::kNone,
     Needs::kScripts, &Impl::ScriptVersionsList},
    {"POST", "/api/v1/scripts/{id}/versions", "scripts.push", "admin", Body::kRequired,
     Needs::kScripts, &Impl::ScriptPush},
    {"GET", "/api/v1/scripts/{id}/content", "scripts.content", "viewer", Body::kNone,
     Needs::kScripts, &Impl::ScriptContent},
    {"GET", "/api/v1/pools", "pools.list", "installation_admin", Body::kNone, Needs::kPlacement,
     &Impl::PoolsList},
    {"GET", "/api/v1/pools/{id}", "pools.get", "installation_admin", Body::kNone, Needs::kPlacement,
     &Impl::PoolGet},
    {"POST", "/api/v1/pools/{id}", "pools.set", "installation_admin", Body::kRequired,
     Needs::kPlacement, &Impl::PoolSet},
    {"POST", "/api/v1/pools/{id}/grants", "pools.grant", "installation_admin", Body::kRequired,
     Needs::kPlacement, &Impl::PoolGrant},
    {"POST", "/api/v1/pools/{id}/revoke", "pools.revoke", "installation_admin", Body::kRequired,
     Needs::kPlacement, &Impl::PoolRevoke},
    {"GET", "/api/v1/workers", "workers.list", "installation_admin", Body::kNone, Needs::kPlacement,
     &Impl::WorkersList},
    {"GET", "/api/v1/workers/{id}", "workers.get", "installation_admin", Body::kNone,
     Needs::kPlacement, &Impl::WorkerGet},
    {"POST", "/api/v1/workers/{id}/drain", "workers.drain", "installation_admin", Body::kOptional,
     Needs::kPlacement, &Impl::WorkerDrain},
    {"POST", "/api/v1/workers/{id}/resume", "workers.resume", "installation_admin", Body::kOptional,
     Needs::kPlacement, &Impl::WorkerResume},
    {"GET", "/api/v1/notify/channels", "notify.channels.list", "viewer", Body::kNone,
     Needs::kNotify, &Impl::NotifyChannelsList},
    {"POST", "/api/v1/notify/channels", "notify.channels.create", "admin", Body::kRequired,
     Needs::kNotify, &Impl::NotifyChannelsCreate},
    {"DELETE", "/api/v1/notify/channels/{id}", "notify.channels.delete", "admin", Body::kNone,
     Needs::kNotify, &Impl::NotifyChannelDelete},
    {"POST", "/api/v1/notify/channels/{id}/test", "notify.channels.test", "operator",
     Body::kOptional, Needs::kNotify, &Impl::NotifyChannelTest},
    {"GET", "/api/v1/notify/rules", "notify.rules.list", "viewer", Body::kNone, Needs::kNotify,
     &Impl::NotifyRulesList},
    {"POST", "/api/v1/notify/rules", "notify.rules.create", "admin", Body::kRequired,
     Needs::kNotify, &Impl::NotifyRulesCreate},
    {"DELETE", "/api/v1/notify/rules/{id}", "notify.rules.delete", "admin", Body::kNone,
     Needs::kNotify, &Impl::NotifyRuleDelete},
    {"GET", "/api/v1/notify/deliveries", "notify.deliveries.list", "viewer", Body::kNone,
     Needs::kNotify, &Impl::NotifyDeliveriesList},
    {"POST", "/api/v1/notify/deliveries/{id}/redeliver", "notify.deliveries.redeliver", "operator",
     Body::kOptional, Needs::kNotify, &Impl::NotifyRedeliver},
};

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

}  // namespace

ApiServer::ApiServer(ControlService& service, Metrics& metrics, ApiServerOptions options)
    : impl_(std::make_unique<Impl>(service, metrics, std::move(options))) {
  metrics.Describe("ql_http_requests_total", "counter",
                   "HTTP requests answered, by route and status code.");
  metrics.Describe("ql_http_in_flight", "gauge",
                   "HTTP requests between their head and the end of their answer when /metrics "
                   "was read.");
  metrics.Describe("ql_http_connections", "gauge", "HTTP connections open when /metrics was read.");
  metrics.Describe("ql_http_log_followers", "gauge", "Log follow streams open.");
  metrics.Describe("ql_runs_queued", "gauge",
                   "Runs in the queued state when /metrics was read (NaN: the store could not "
                   "be read).");
  DescribeProcessMetrics(metrics, impl_->options.version);
}

ApiServer::~ApiServer() { Stop(); }

ApiServer::Impl::Auth ApiServer::Impl::Authenticate(const http::Request& req, Authentication* who,
                                                    std::string* why, std::string* digest,
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

Caller ApiServer::Impl::CallerOf(const http::Request& req, const Admission& identity) {
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
  // Set first, so that even a refused request or a panel file is timed for the daemon log.
  auto decision = std::make_shared<Admission>();
  decision->admitted_ms = clock().MonotonicMs();
  req.decision = decision;
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
  decision->route = match.route;
  decision->id = match.id;
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
      service.governance().RecordAuthFailure(req.Header("X-Request-Id").substr(0, 64), why);
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
    // A restricted session (a password to change, a second factor to enrol) may do that one
    // thing and nothing else, decided here with the identity.
    if (const std::string& restriction = who.token.restriction; !restriction.empty()) {
      if (match.kind == RouteMatch::Kind::kFound &&
          !AllowedWhileRestricted(restriction, match.route->name)) {
        return reject(403, restriction + "_required",
                      restriction == kRestrictPasswordChange
                          ? "choose a new password first (POST /api/v1/password)"
                          : "this installation requires a second factor: enrol one first "
                            "(POST /api/v1/totp/enrol, then /api/v1/totp/confirm)");
      }
    }
    decision->decided = true;
    decision->who = std::move(who);
    decision->token_digest = std::move(digest);
    decision->via_cookie = via_cookie;
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
  if (IsApiPath(req.path) && match.route->method != "GET" && writes_refused.load()) {
    Status why;
    {
      std::lock_guard<std::mutex> lock(readiness_mu);
      why = write_refusal;
    }
    res.SetHeader("Retry-After", "5");
    return reject(
        503, why.reason().empty() ? "not_ready" : why.reason(),
        "writes are refused while the readiness audit fails (reads still work): " + why.message());
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
  res.SetHeader("Cache-Control",
                std::string(file.immutable ? kPanelImmutableCacheControl : kPanelPageCacheControl));
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
  handlers.admit = [this](http::Request& req, http::Response& res) {
    const bool admitted = Admit(req, res);
    if (!admitted) CountBody(req, res);
    return admitted;
  };
  handlers.handle = [this](http::Request& req, http::Response& res) {
    try {
      Dispatch(req, res);
    } catch (const std::exception& e) {
      res = http::Response{};
      SendError(res, 500, "internal", std::string("internal error: ") + e.what());
    }
    CountBody(req, res);
  };
  handlers.answered = [this](const http::Request& req, const http::Response& res) {
    // The route admission matched; /livez, answered before admission, is matched here.
    const auto* decided = static_cast<const Admission*>(req.decision.get());
    const RouteSpec* matched =
        decided != nullptr ? decided->route : MatchRoute(req.method, req.path).route;
    const std::string_view route = matched != nullptr             ? matched->name
                                   : PanelFileFor(req) != nullptr ? "panel"
                                                                  : "none";
    metrics.Increment("ql_http_requests_total", "route=\"" + std::string(route) + "\",code=\"" +
                                                    std::to_string(res.status) + "\"");
    LogAnswer(req, res, decided, route);
  };
  return handlers;
}

void ApiServer::Impl::CountBody(const http::Request& req, http::Response& res) const {
  const auto* decided = static_cast<const Admission*>(req.decision.get());
  if (decided == nullptr || options.event_log == nullptr) return;
  decided->body_bytes = static_cast<int64_t>(res.body.size());
  if (res.stream) {
    // The stream holds the admission it counts into.
    res.stream = [inner = std::move(res.stream), keep = req.decision,
                  decided](const std::atomic<bool>& gone) {
      http::StreamStep step = inner(gone);
      decided->body_bytes += static_cast<int64_t>(step.data.size());
      return step;
    };
  }
}

void ApiServer::Impl::LogAnswer(const http::Request& req, const http::Response& res,
                                const Admission* decided, std::string_view route) {
  EventLog* log = options.event_log;
  if (log == nullptr) return;
  // Answered before admission (/livez): no time was taken.
  const int64_t duration =
      decided != nullptr ? std::max<int64_t>(0, clock().MonotonicMs() - decided->admitted_ms) : 0;
  const bool slow = options.slow_request_ms > 0 && duration >= options.slow_request_ms;
  if (!slow && !(options.access_log && log->Enabled(LogLevel::kInfo))) return;
  const std::string_view principal =
      decided != nullptr && decided->decided ? std::string_view(decided->who.principal.name) : "";
  const int64_t bytes =
      decided != nullptr ? decided->body_bytes.load() : static_cast<int64_t>(res.body.size());
  const std::vector<LogField> fields =
      http::AccessLogFields(req, res.status, bytes, duration, route, principal);
  if (options.access_log) log->Write(LogLevel::kInfo, "http.request", fields);
  if (slow) log->Write(LogLevel::kWarn, "http.slow_request", fields);
}

void ApiServer::Impl::Dispatch(const http::Request& req, http::Response& res) {
  static const Admission kUndecided;
  const Admission& identity =
      req.decision != nullptr ? *static_cast<const Admission*>(req.decision.get()) : kUndecided;
  if (identity.route == nullptr) {  // Admit answered these already
    SendError(res, 404, "route_not_found", "no route for " + QuoteForMessage(req.path, 128));
    return;
  }
  const RouteSpec& route = *identity.route;
  if (IsApiPath(req.path) && route.permission != std::string_view("public")) {
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
  if (route.needs == Needs::kSignIn && options.sign_in == nullptr) {
    SendError(res, 503, "sign_in_unavailable", "this server does not sign people in");
    return;
  }
  if (route.needs == Needs::kSecrets && options.secrets == nullptr) {
    SendError(res, 503, "secrets_unavailable", "this server does not hold secrets");
    return;
  }
  if (route.needs == Needs::kScripts && options.scripts == nullptr) {
    SendError(res, 503, "scripts_unavailable", "this server does not keep scripts");
    return;
  }
  if (route.needs == Needs::kPlacement && options.placement == nullptr) {
    SendError(res, 503, "workers_unavailable", "this server has no remote workers");
    return;
  }
  if (route.needs == Needs::kNotify && options.notify == nullptr) {
    SendError(res, 503, "notifications_unavailable", "this server does not send notifications");
    return;
  }
  Call call{req, res, identity, identity.id, Query(req),
            // Only /api/v1 routes act for a caller, and a principal was confirmed above.
            IsApiPath(req.path) && identity.decided ? CallerOf(req, identity) : Caller{},
            json::object()};
  if (route.body == Body::kBytes) {
    // The media type is the handler's to check, once the caller was found allowed.
    QL_HTTP_TRY(res, call.query.Check({}));
  } else if (route.body != Body::kNone) {
    QL_HTTP_TRY(res, call.query.Check({}));
    QL_HTTP_ASSIGN(res, call.body, api::ParseBody(req.body, route.body == Body::kRequired));
  }
  // A run is addressed by its id or a unique prefix of it: every run route gets the id.
  if (route.pattern.starts_with("/api/v1/runs/{id}")) {
    QL_HTTP_ASSIGN(res, call.id, service.ResolveRunRef(call.id, call.caller));
  }
  (this->*route.handle)(call);
}

void ApiServer::Impl::Livez(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({}));
  SendJson(c.res, 200, json{{"status", "ok"}});
}

void ApiServer::Impl::Readyz(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({}));
  if (withdrawn.load()) {
    SendError(c.res, 503, "shutting_down", "the server is shutting down");
  } else if (!ready.load()) {
    Status why;
    {
      std::lock_guard<std::mutex> lock(readiness_mu);
      why = not_ready;
    }
    SendError(c.res, 503, why.reason(), why.message());
  } else {
    json out{{"status", "ready"}};
    if (!options.isolation_level.empty()) out["command_isolation"] = IsolationJson();
    SendJson(c.res, 200, out);
  }
}

void ApiServer::Impl::ScrapeMetrics(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({}));
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
  c.res.status = 200;
  c.res.SetContent(metrics.RenderPrometheus(), "text/plain; version=0.0.4; charset=utf-8");
}

void ApiServer::Impl::OpenApi(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({}));
  c.res.status = 200;
  c.res.SetContent(std::string(http::OpenApiDocument()), "application/json");
}

void ApiServer::Impl::ProjectsList(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({}));
  QL_HTTP_ASSIGN(c.res, std::vector<ProjectRecord> projects, service.ListProjects(c.caller));
  json items = json::array();
  for (const ProjectRecord& p : projects) items.push_back(api::ProjectJson(p));
  SendJson(c.res, 200, json{{"items", std::move(items)}});
}

void ApiServer::Impl::TasksCreate(Call& c) {
  TaskWrite write;
  QL_HTTP_ASSIGN(c.res, write.mutation_id, TakeString(c.body, "mutation_id"));
  write.body = std::move(c.body);
  QL_HTTP_ASSIGN(c.res, PublishedTask published, service.PublishTask(write, c.caller));
  c.res.SetHeader("X-QL-Replayed", BoolHeader(published.replayed));
  SendJson(c.res, published.replayed ? 200 : 201, api::TaskJson(published.task));
}

void ApiServer::Impl::TasksList(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({"limit", "cursor", "q", "label", "last_status"}));
  PageQuery page;
  QL_HTTP_ASSIGN(c.res, page.limit,
                 c.query.Integer("limit", "invalid_limit", 1, kMaxPageLimit, kDefaultPageLimit));
  page.cursor = c.query.Get("cursor");
  TaskListQuery query;
  query.text = c.query.Get("q");
  query.label = c.query.Get("label");
  query.last_status = c.query.Get("last_status");
  QL_HTTP_ASSIGN(c.res, PageResult<TaskView> listed, service.ListTasks(page, c.caller, query));
  json items = json::array();
  for (const TaskView& t : listed.items) items.push_back(api::TaskJson(t));
  SendJson(c.res, 200, ItemsJson(std::move(items), listed.next_cursor));
}

void ApiServer::Impl::TaskGet(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({}));
  QL_HTTP_ASSIGN(c.res, TaskView task, service.GetTask(c.id, c.caller));
  SendJson(c.res, 200, api::TaskJson(task));
}

void ApiServer::Impl::TaskRevisionsCreate(Call& c) {
  QL_HTTP_ASSIGN(c.res, std::optional<int64_t> expected,
                 api::OptionalInteger(c.body, "expected_revision"));
  if (!expected.has_value()) {
    SendError(c.res, 400, "missing_field",
              "field expected_revision is required: the revision this update replaces");
    return;
  }
  c.body.erase("expected_revision");
  TaskWrite write;
  QL_HTTP_ASSIGN(c.res, std::optional<bool> repin, api::OptionalBool(c.body, "repin_triggers"));
  c.body.erase("repin_triggers");
  write.repin_triggers = repin.value_or(false);
  QL_HTTP_ASSIGN(c.res, write.mutation_id, TakeString(c.body, "mutation_id"));
  write.body = std::move(c.body);
  QL_HTTP_ASSIGN(c.res, PublishedTask published,
                 service.PublishTaskRevision(c.id, *expected, write, c.caller));
  c.res.SetHeader("X-QL-Replayed", BoolHeader(published.replayed));
  json out = api::TaskJson(published.task);
  out["repinned_triggers"] = published.trigger_ids;
  out["stale_triggers"] = published.stale_triggers;
  SendJson(c.res, published.replayed ? 200 : 201, out);
}

void ApiServer::Impl::TaskDelete(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({}));
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {}));
  QL_HTTP_ASSIGN(c.res, PublishedTask deleted, service.DeleteTask(c.id, c.caller));
  c.res.SetHeader("X-QL-Replayed", BoolHeader(deleted.replayed));
  json out = api::TaskJson(deleted.task);
  out["deleted_triggers"] = deleted.trigger_ids;
  SendJson(c.res, 200, out);
}

Status ApiServer::Impl::AddNames(json& items) {
  std::vector<json*> objects;
  if (items.is_array()) {
    for (json& item : items) objects.push_back(&item);
  } else {
    objects.push_back(&items);
  }
  std::set<std::string> tasks, triggers, principals;
  auto id_of = [](const json& object, const char* field) -> std::optional<std::string> {
    auto it = object.find(field);
    if (it == object.end() || !it->is_string()) return std::nullopt;
    return it->get<std::string>();
  };
  // An audit fact's target, by its kind.
  auto target_set = [&](const json& object) -> std::set<std::string>* {
    const std::string kind = object.value("target_kind", "");
    if (kind == "task") return &tasks;
    if (kind == "trigger") return &triggers;
    if (kind == "principal") return &principals;
    return nullptr;
  };
  for (const json* o : objects) {
    if (auto id = id_of(*o, "task_id")) tasks.insert(*id);
    if (auto id = id_of(*o, "trigger_id")) triggers.insert(*id);
    if (auto id = id_of(*o, "requester_id")) principals.insert(*id);
    if (auto id = id_of(*o, "actor_id")) principals.insert(*id);
    if (auto id = id_of(*o, "target_id"); id && target_set(*o) != nullptr) {
      target_set(*o)->insert(*id);
    }
    if (o->contains("decision") && (*o)["decision"].is_object()) {
      if (auto id = id_of((*o)["decision"], "decided_by")) principals.insert(*id);
    }
  }
  QL_ASSIGN_OR_RETURN(ControlService::DisplayNames names,
                      service.NamesOf(tasks, triggers, principals));
  auto name_of = [](const std::map<std::string, std::string>& known,
                    const std::optional<std::string>& id) -> json {
    if (!id.has_value()) return nullptr;
    auto it = known.find(*id);
    return it == known.end() ? json(nullptr) : json(it->second);
  };
  for (json* o : objects) {
    if (o->contains("task_id")) (*o)["task_name"] = name_of(names.tasks, id_of(*o, "task_id"));
    if (o->contains("trigger_id")) {
      (*o)["trigger_name"] = name_of(names.triggers, id_of(*o, "trigger_id"));
    }
    if (o->contains("requester_id")) {
      (*o)["requester_name"] = name_of(names.principals, id_of(*o, "requester_id"));
    }
    if (o->contains("actor_id")) {
      (*o)["actor_name"] = name_of(names.principals, id_of(*o, "actor_id"));
    }
    if (o->contains("target_id")) {
      const std::string kind = o->value("target_kind", "");
      (*o)["target_name"] = kind == "task"      ? name_of(names.tasks, id_of(*o, "target_id"))
                            : kind == "trigger" ? name_of(names.triggers, id_of(*o, "target_id"))
                            : kind == "principal"
                                ? name_of(names.principals, id_of(*o, "target_id"))
                                : json(nullptr);
    }
    if (o->contains("decision") && (*o)["decision"].is_object()) {
      json& decision = (*o)["decision"];
      decision["decided_by_name"] = name_of(names.principals, id_of(decision, "decided_by"));
    }
  }
  return Status();
}

void ApiServer::Impl::AnswerTask(Call& c, const Result<PublishedTask>& published) {
  QL_HTTP_TRY(c.res, published.status());
  c.res.SetHeader("X-QL-Replayed", BoolHeader(published->replayed));
  json out = api::TaskJson(published->task);
  out["repinned_triggers"] = published->trigger_ids;
  out["stale_triggers"] = published->stale_triggers;
  SendJson(c.res, 200, out);
}

void ApiServer::Impl::TaskEnable(Call& c) {
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {}));
  AnswerTask(c, service.SetTaskEnabled(c.id, true, c.caller));
}

void ApiServer::Impl::TaskDisable(Call& c) {
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {}));
  AnswerTask(c, service.SetTaskEnabled(c.id, false, c.caller));
}

void ApiServer::Impl::TriggerDelete(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({}));
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {}));
  QL_HTTP_ASSIGN(c.res, PublishedTrigger deleted, service.DeleteTrigger(c.id, c.caller));
  c.res.SetHeader("X-QL-Replayed", BoolHeader(deleted.replayed));
  SendJson(c.res, 200, api::TriggerJson(deleted.trigger));
}

void ApiServer::Impl::TaskRevisionsList(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({}));
  QL_HTTP_ASSIGN(c.res, std::vector<TaskRevisionRecord> revisions,
                 service.TaskHistory(c.id, c.caller));
  json items = json::array();
  for (const TaskRevisionRecord& r : revisions) items.push_back(api::TaskRevisionJson(r));
  SendJson(c.res, 200, json{{"items", std::move(items)}});
}

void ApiServer::Impl::TriggersCreate(Call& c) {
  QL_HTTP_TRY(c.res,
              api::CheckFields(c.body, {"task_id", "expression", "timezone", "misfire", "overlap",
                                        "jitter_ms", "enabled", "mutation_id", "name"}));
  TriggerWrite write;
  QL_HTTP_ASSIGN(c.res, write.task_id, api::RequiredString(c.body, "task_id"));
  QL_HTTP_ASSIGN(c.res, write.expression, api::RequiredString(c.body, "expression"));
  QL_HTTP_ASSIGN(c.res, write.timezone, api::RequiredString(c.body, "timezone"));
  QL_HTTP_ASSIGN(c.res, std::optional<std::string> misfire, api::OptionalString(c.body, "misfire"));
  if (misfire.has_value()) write.misfire = *misfire;
  QL_HTTP_ASSIGN(c.res, std::optional<std::string> overlap, api::OptionalString(c.body, "overlap"));
  if (overlap.has_value()) write.overlap = *overlap;
  QL_HTTP_ASSIGN(c.res, std::optional<int64_t> jitter, api::OptionalInteger(c.body, "jitter_ms"));
  write.jitter_ms = jitter.value_or(0);
  QL_HTTP_ASSIGN(c.res, std::optional<bool> enabled, api::OptionalBool(c.body, "enabled"));
  write.enabled = enabled.value_or(true);
  QL_HTTP_ASSIGN(c.res, write.mutation_id, api::OptionalString(c.body, "mutation_id"));
  QL_HTTP_ASSIGN(c.res, write.name, api::OptionalString(c.body, "name"));
  QL_HTTP_ASSIGN(c.res, PublishedTrigger published, service.AddTrigger(write, c.caller));
  c.res.SetHeader("X-QL-Replayed", BoolHeader(published.replayed));
  SendJson(c.res, published.replayed ? 200 : 201, api::TriggerJson(published.trigger));
}

void ApiServer::Impl::TriggerRevisionsCreate(Call& c) {
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {"expected_revision", "expression", "timezone",
                                               "misfire", "overlap", "jitter_ms", "name"}));
  QL_HTTP_ASSIGN(c.res, std::optional<int64_t> expected,
                 api::OptionalInteger(c.body, "expected_revision"));
  if (!expected.has_value()) {
    SendError(c.res, 400, "missing_field",
              "field expected_revision is required: the revision this edit replaces");
    return;
  }
  TriggerEdit edit;
  QL_HTTP_ASSIGN(c.res, edit.expression, api::OptionalString(c.body, "expression"));
  QL_HTTP_ASSIGN(c.res, edit.timezone, api::OptionalString(c.body, "timezone"));
  QL_HTTP_ASSIGN(c.res, edit.misfire, api::OptionalString(c.body, "misfire"));
  QL_HTTP_ASSIGN(c.res, edit.overlap, api::OptionalString(c.body, "overlap"));
  QL_HTTP_ASSIGN(c.res, edit.jitter_ms, api::OptionalInteger(c.body, "jitter_ms"));
  QL_HTTP_ASSIGN(c.res, edit.name, api::OptionalString(c.body, "name"));
  QL_HTTP_ASSIGN(c.res, PublishedTrigger published,
                 service.EditTrigger(c.id, *expected, edit, c.caller));
  c.res.SetHeader("X-QL-Replayed", BoolHeader(published.replayed));
  SendJson(c.res, published.replayed ? 200 : 201, api::TriggerJson(published.trigger));
}

void ApiServer::Impl::TriggersList(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({"task_id", "limit", "cursor"}));
  PageQuery page;
  QL_HTTP_ASSIGN(c.res, page.limit,
                 c.query.Integer("limit", "invalid_limit", 1, kMaxPageLimit, kDefaultPageLimit));
  page.cursor = c.query.Get("cursor");
  QL_HTTP_ASSIGN(c.res, PageResult<TriggerView> listed,
                 service.ListTriggers(c.query.Get("task_id"), page, c.caller));
  json items = json::array();
  for (const TriggerView& t : listed.items) items.push_back(api::TriggerJson(t));
  QL_HTTP_TRY(c.res, AddNames(items));
  SendJson(c.res, 200, ItemsJson(std::move(items), listed.next_cursor));
}

void ApiServer::Impl::TriggerGet(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({}));
  QL_HTTP_ASSIGN(c.res, TriggerView trigger, service.GetTrigger(c.id, c.caller));
  json out = api::TriggerJson(trigger);
  QL_HTTP_TRY(c.res, AddNames(out));
  SendJson(c.res, 200, out);
}

void ApiServer::Impl::TriggerEnable(Call& c) {
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {}));
  AnswerTrigger(c, service.SetTriggerEnabled(c.id, true, c.caller));
}

void ApiServer::Impl::TriggerDisable(Call& c) {
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {}));
  AnswerTrigger(c, service.SetTriggerEnabled(c.id, false, c.caller));
}

void ApiServer::Impl::TriggerRepin(Call& c) {
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {}));
  AnswerTrigger(c, service.RepinTrigger(c.id, c.caller));
}

void ApiServer::Impl::AnswerTrigger(Call& c, const Result<PublishedTrigger>& published) {
  QL_HTTP_TRY(c.res, published.status());
  c.res.SetHeader("X-QL-Replayed", BoolHeader(published->replayed));
  SendJson(c.res, 200, api::TriggerJson(published->trigger));
}

void ApiServer::Impl::TriggerNext(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({"count"}));
  QL_HTTP_ASSIGN(
      c.res, int64_t count,
      c.query.Integer("count", "invalid_count", 1, kMaxPreviewCount, kDefaultPreviewCount));
  QL_HTTP_ASSIGN(c.res, TriggerPreview preview,
                 service.PreviewTrigger(c.id, static_cast<int>(count), c.caller));
  QL_HTTP_ASSIGN(c.res, TimeZone zone, TimeZone::Load(preview.trigger.revision.timezone));
  SendJson(c.res, 200,
           json{{"trigger_id", preview.trigger.head.trigger_id},
                {"state", preview.trigger.state},
                {"admitting", preview.trigger.state == "active"},
                {"expression", preview.trigger.revision.expression},
                {"timezone", preview.trigger.revision.timezone},
                {"misfire", preview.trigger.revision.misfire},
                {"overlap", preview.trigger.revision.overlap},
                {"jitter_ms", preview.trigger.revision.jitter_ms},
                {"fire_times", api::FireTimesJson(preview.fire_times_ms, zone)}});
}

void ApiServer::Impl::CronNext(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({"expression", "timezone", "from", "count"}));
  QL_HTTP_ASSIGN(c.res, std::string expression, c.query.Required("expression"));
  QL_HTTP_ASSIGN(c.res, std::string timezone, c.query.Required("timezone"));
  std::optional<int64_t> from;
  if (std::optional<std::string> text = c.query.Get("from"); text.has_value()) {
    QL_HTTP_ASSIGN(c.res, from, ParseRfc3339(*text));
  }
  QL_HTTP_ASSIGN(
      c.res, int64_t count,
      c.query.Integer("count", "invalid_count", 1, kMaxPreviewCount, kDefaultPreviewCount));
  QL_HTTP_ASSIGN(c.res, CronPreview preview,
                 service.PreviewCron(expression, timezone, from, static_cast<int>(count)));
  QL_HTTP_ASSIGN(c.res, TimeZone zone, TimeZone::Load(preview.timezone));
  SendJson(c.res, 200,
           json{{"expression", preview.expression},
                {"timezone", preview.timezone},
                {"fire_times", api::FireTimesJson(preview.fire_times_ms, zone)}});
}

void ApiServer::Impl::RunsList(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({"task_id", "trigger_id", "status", "since", "until", "limit",
                                    "cursor", "short_ids"}));
  QL_HTTP_ASSIGN(c.res, const bool short_ids,
                 c.query.Bool("short_ids", "invalid_short_ids", false));
  RunQuery filter;
  filter.task_id = c.query.Get("task_id");
  filter.trigger_id = c.query.Get("trigger_id");
  filter.status = c.query.Get("status");
  for (auto [name, field] :
       {std::pair{"since", &filter.since_ms}, std::pair{"until", &filter.until_ms}}) {
    if (std::optional<std::string> text = c.query.Get(name); text.has_value()) {
      Result<int64_t> at = ParseRfc3339(*text);
      if (!at.ok()) {
        SendError(c.res, 400, "invalid_time",
                  std::string(name) + " " + QuoteForMessage(*text) +
                      " is not an RFC 3339 time (2026-12-06T08:00:00Z or with an offset)");
        return;
      }
      *field = *at;
    }
  }
  PageQuery page;
  QL_HTTP_ASSIGN(c.res, page.limit,
                 c.query.Integer("limit", "invalid_limit", 1, kMaxPageLimit, kDefaultPageLimit));
  page.cursor = c.query.Get("cursor");
  QL_HTTP_ASSIGN(c.res, PageResult<RunRecord> listed, service.ListRuns(filter, page, c.caller));
  json items = json::array();
  for (const RunRecord& r : listed.items) items.push_back(api::RunJson(r));
  if (short_ids) {
    QL_HTTP_ASSIGN(c.res, auto prefixes, service.ShortRunIds(listed.items, c.caller));
    for (json& item : items) item["short_id"] = prefixes[item.value("id", std::string())];
  }
  QL_HTTP_TRY(c.res, AddNames(items));
  SendJson(c.res, 200, ItemsJson(std::move(items), listed.next_cursor));
}

void ApiServer::Impl::RunsCreate(Call& c) {
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {"task_id", "idempotency_key", "priority"}));
  StartRunRequest request;
  QL_HTTP_ASSIGN(c.res, request.task_id, api::RequiredString(c.body, "task_id"));
  StartRun(c, std::move(request));
}

void ApiServer::Impl::TaskRunsCreate(Call& c) {
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {"idempotency_key", "priority"}));
  StartRunRequest request;
  request.task_id = c.id;
  StartRun(c, std::move(request));
}

void ApiServer::Impl::StartRun(Call& c, StartRunRequest request) {
  QL_HTTP_ASSIGN(c.res, request.idempotency_key, api::OptionalString(c.body, "idempotency_key"));
  QL_HTTP_ASSIGN(c.res, std::optional<int64_t> priority, api::OptionalInteger(c.body, "priority"));
  if (priority.has_value()) {
    if (*priority < kMinRunPriority || *priority > kMaxRunPriority) {
      SendError(c.res, 400, "invalid_priority",
                "priority must be " + std::to_string(kMinRunPriority) + ".." +
                    std::to_string(kMaxRunPriority) + ", got " + std::to_string(*priority));
      return;
    }
    request.priority = static_cast<int>(*priority);
  }
  QL_HTTP_ASSIGN(c.res, StartedRun started, service.StartRun(request, c.caller));
  c.res.SetHeader("X-QL-Replayed", BoolHeader(started.replayed));
  if (started.approval.has_value()) {
    SendJson(c.res, 202, api::ApprovalRequiredJson(*started.approval));
    return;
  }
  SendJson(c.res, started.replayed ? 200 : 201, api::RunJson(started.run));
}

void ApiServer::Impl::RunResolve(Call& c) {
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {"resolution", "reason"}));
  QL_HTTP_ASSIGN(c.res, std::string resolution, api::RequiredString(c.body, "resolution"));
  QL_HTTP_ASSIGN(c.res, std::string reason, api::RequiredString(c.body, "reason"));
  QL_HTTP_ASSIGN(c.res, ResolveRunResult resolved,
                 service.ResolveRun(c.id, resolution, reason, c.caller));
  c.res.SetHeader("X-QL-Replayed", BoolHeader(resolved.replayed));
  SendJson(c.res, 200, api::ResolutionJson(resolved));
}

void ApiServer::Impl::ApprovalsList(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({"status", "limit", "cursor"}));
  PageQuery page;
  QL_HTTP_ASSIGN(c.res, page.limit,
                 c.query.Integer("limit", "invalid_limit", 1, kMaxPageLimit, kDefaultPageLimit));
  page.cursor = c.query.Get("cursor");
  QL_HTTP_ASSIGN(c.res, PageResult<ApprovalRequestRecord> listed,
                 service.ListApprovals(c.query.Get("status"), page, c.caller));
  json items = json::array();
  for (const ApprovalRequestRecord& r : listed.items) {
    items.push_back(api::ApprovalRequestJson(r));
  }
  QL_HTTP_TRY(c.res, AddNames(items));
  SendJson(c.res, 200, ItemsJson(std::move(items), listed.next_cursor));
}

void ApiServer::Impl::ApprovalGet(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({}));
  QL_HTTP_ASSIGN(c.res, ApprovalView view, service.GetApproval(c.id, c.caller));
  json out = api::ApprovalJson(view);
  QL_HTTP_TRY(c.res, AddNames(out));
  SendJson(c.res, 200, out);
}

void ApiServer::Impl::ApprovalApprove(Call& c) {
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {}));
  QL_HTTP_ASSIGN(c.res, ApproveResult approved, service.Approve(c.id, c.caller));
  c.res.SetHeader("X-QL-Replayed", BoolHeader(approved.replayed));
  json out = api::ApprovalJson(approved.approval);
  out["run"] = api::RunJson(approved.run);
  SendJson(c.res, approved.replayed ? 200 : 201, out);
}

void ApiServer::Impl::ApprovalReject(Call& c) {
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {"reason"}));
  QL_HTTP_ASSIGN(c.res, std::string reason, api::RequiredString(c.body, "reason"));
  QL_HTTP_ASSIGN(c.res, ApprovalView view, service.Reject(c.id, reason, c.caller));
  SendJson(c.res, 200, api::ApprovalJson(view));
}

void ApiServer::Impl::RunGet(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({}));
  QL_HTTP_ASSIGN(c.res, RunView run, service.GetRun(c.id, c.caller));
  json out = api::RunJson(run);
  QL_HTTP_TRY(c.res, AddNames(out));
  // A queued remote run that no live worker may take says why (the caller may read the run).
  if (options.placement != nullptr && run.run.status == RunStatusName(RunStatus::kQueued)) {
    QL_HTTP_ASSIGN(c.res, std::optional<WaitingReason> waiting,
                   options.placement->Waiting(run.run.id));
    if (waiting.has_value()) out["waiting"] = api::WaitingJson(*waiting);
  }
  SendJson(c.res, 200, out);
}

void ApiServer::Impl::RunEvents(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({"after", "limit"}));
  QL_HTTP_ASSIGN(c.res, int64_t after, c.query.Integer("after", "invalid_after", 0, INT64_MAX, 0));
  QL_HTTP_ASSIGN(c.res, int64_t limit,
                 c.query.Integer("limit", "invalid_limit", 1, kMaxPageLimit, kDefaultEventLimit));
  QL_HTTP_ASSIGN(c.res, std::vector<EventRecord> events,
                 service.ListRunEvents(c.id, after, static_cast<int>(limit), c.caller));
  json items = json::array();
  int64_t next_after = after;
  for (const EventRecord& e : events) {
    items.push_back(api::EventJson(e));
    next_after = std::max(next_after, e.sequence);
  }
  SendJson(c.res, 200, json{{"items", std::move(items)}, {"next_after", next_after}});
}

namespace {

// Attempt `number` of the run (0: its latest); NotFound `attempt_not_found` when it has none.
Result<const AttemptRecord*> AttemptOf(const RunView& view, const std::string& run_id,
                                       int64_t number) {
  const AttemptRecord* attempt = nullptr;
  for (const AttemptRecord& a : view.attempts) {
    if (number == 0 || a.attempt == number) attempt = &a;
  }
  if (attempt == nullptr) {
    return NotFound("attempt_not_found",
                    number == 0 ? "run " + run_id + " has no attempt"
                                : "run " + run_id + " has no attempt " + std::to_string(number));
  }
  return attempt;
}

}  // namespace

void ApiServer::Impl::RunLog(Call& c) { ServeLog(c.id, c.req, c.caller, c.identity, c.res); }

void ApiServer::Impl::RunLogSearch(Call& c) {
  const Query query(c.req);
  QL_HTTP_TRY(c.res, query.Check({"q", "attempt", "limit"}));
  QL_HTTP_ASSIGN(c.res, std::string text, query.Required("q"));
  QL_HTTP_TRY(c.res, ValidateLogQuery(text));
  QL_HTTP_ASSIGN(c.res, int64_t limit,
                 query.Integer("limit", "invalid_limit", 1, kMaxLogMatches, kDefaultLogMatches));
  QL_HTTP_ASSIGN(c.res, int64_t attempt_number,
                 query.Integer("attempt", "invalid_attempt", 1, 1'000'000, 0));
  QL_HTTP_ASSIGN(c.res, RunView view, service.GetRun(c.id, c.caller));
  QL_HTTP_ASSIGN(c.res, const AttemptRecord* attempt, AttemptOf(view, c.id, attempt_number));
  QL_HTTP_ASSIGN(c.res, LogSearchResult found,
                 SearchLog(*options.log_reader, *attempt, text, static_cast<int>(limit)));
  json matches = json::array();
  for (const LogMatch& m : found.matches) {
    matches.push_back(
        json{{"line", m.line}, {"offset", m.offset}, {"text", m.text}, {"truncated", m.truncated}});
  }
  SendJson(c.res, 200,
           json{{"attempt", attempt->attempt},
                {"matches", std::move(matches)},
                {"more", found.more},
                {"complete", found.complete},
                {"searched_bytes", found.searched_bytes},
                {"size", found.size}});
}

void ApiServer::Impl::RunCancel(Call& c) {
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {"reason"}));
  QL_HTTP_ASSIGN(c.res, std::optional<std::string> reason, api::OptionalString(c.body, "reason"));
  QL_HTTP_ASSIGN(c.res, RunRecord run, service.CancelRun(c.id, reason, c.caller));
  SendJson(c.res, 200, api::RunJson(run));
}

void ApiServer::Impl::RunRetry(Call& c) {
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {}));
  QL_HTTP_ASSIGN(c.res, StartedRun started, service.RetryRun(c.id, c.caller));
  if (started.approval.has_value()) {  // a guarded task: the retry waits for its approval
    SendJson(c.res, 202, api::ApprovalRequiredJson(*started.approval));
    return;
  }
  SendJson(c.res, 201, api::RunJson(started.run));
}

void ApiServer::Impl::Whoami(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({}));
  QL_HTTP_ASSIGN(c.res, WhoAmI who, service.governance().Whoami(c.caller));
  json out = api::WhoAmIJson(who);
  // How the caller signed in, and until when.
  json session{{"kind", c.identity.who.token.kind},
               {"token_id", c.identity.who.token.id},
               {"expires_at", api::TimeJson(c.identity.who.token.expires_at_ms)},
               {"idle_timeout_ms", c.identity.who.token.idle_timeout_ms.has_value()
                                       ? json(*c.identity.who.token.idle_timeout_ms)
                                       : json(nullptr)},
               {"label", c.identity.who.token.label},
               {"restriction", c.identity.who.token.restriction.empty()
                                   ? json(nullptr)
                                   : json(c.identity.who.token.restriction)}};
  if (c.identity.via_cookie) {
    session["csrf_token"] = CsrfTokenOf(CookieValue(c.req.Header("Cookie"), kSessionCookie));
  }
  out["session"] = std::move(session);
  // What the caller may sign in with (the Account page offers what is missing); left out when
  // the password table cannot be read (a replica without the admin role).
  if (options.sign_in != nullptr && !c.caller.principal_id.empty()) {
    Result<SignInService::Credentials> credentials =
        options.sign_in->CredentialsOf(c.caller.principal_id);
    if (credentials.ok()) {
      out["password_set"] = credentials->password_set;
      out["totp_enabled"] = credentials->totp_enabled;
    }
  }
  SendJson(c.res, 200, out);
}

void ApiServer::Impl::PrincipalsList(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({}));
  QL_HTTP_ASSIGN(c.res, std::vector<PrincipalRecord> principals,
                 service.governance().ListPrincipals(c.caller));
  json items = json::array();
  for (const PrincipalRecord& p : principals) items.push_back(api::PrincipalJson(p));
  SendJson(c.res, 200, ItemsJson(std::move(items), std::nullopt));
}

void ApiServer::Impl::PrincipalsCreate(Call& c) {
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {"name", "kind"}));
  QL_HTTP_ASSIGN(c.res, std::string name, api::RequiredString(c.body, "name"));
  QL_HTTP_ASSIGN(c.res, std::optional<std::string> kind, api::OptionalString(c.body, "kind"));
  QL_HTTP_ASSIGN(c.res, PrincipalRecord principal,
                 service.governance().AddPrincipal(c.caller, name, kind.value_or("user")));
  SendJson(c.res, 201, api::PrincipalJson(principal));
}

void ApiServer::Impl::PrincipalGet(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({}));
  QL_HTTP_ASSIGN(c.res, PrincipalRecord principal,
                 service.governance().GetPrincipal(c.caller, c.id));
  SendJson(c.res, 200, api::PrincipalJson(principal));
}

void ApiServer::Impl::PrincipalDisable(Call& c) { SetPrincipalStatus(c, "disabled"); }

void ApiServer::Impl::PrincipalEnable(Call& c) { SetPrincipalStatus(c, "active"); }

void ApiServer::Impl::SetPrincipalStatus(Call& c, std::string_view status) {
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {}));
  QL_HTTP_ASSIGN(c.res, PrincipalRecord principal,
                 service.governance().SetPrincipalStatus(c.caller, c.id, std::string(status)));
  SendJson(c.res, 200, api::PrincipalJson(principal));
}

void ApiServer::Impl::TokensList(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({}));
  QL_HTTP_ASSIGN(c.res, std::vector<TokenRecord> tokens, service.governance().ListTokens(c.caller));
  json items = json::array();
  for (const TokenRecord& t : tokens) items.push_back(api::TokenJson(t));
  SendJson(c.res, 200, ItemsJson(std::move(items), std::nullopt));
}

void ApiServer::Impl::TokensCreate(Call& c) {
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {"principal", "expires_in_ms"}));
  QL_HTTP_ASSIGN(c.res, std::optional<std::string> principal,
                 api::OptionalString(c.body, "principal"));
  QL_HTTP_ASSIGN(c.res, std::optional<int64_t> ttl, api::OptionalInteger(c.body, "expires_in_ms"));
  QL_HTTP_ASSIGN(c.res, MintedToken minted,
                 service.governance().CreateToken(c.caller, principal.value_or(""), ttl));
  json out = api::TokenJson(minted.record);
  out["token"] = minted.token;
  SendJson(c.res, 201, out);
}

void ApiServer::Impl::TokenRevoke(Call& c) {
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {}));
  QL_HTTP_ASSIGN(c.res, TokenRecord token, service.governance().RevokeToken(c.caller, c.id));
  SendJson(c.res, 200, api::TokenJson(token));
}

void ApiServer::Impl::ProjectsCreate(Call& c) {
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {"slug", "name"}));
  QL_HTTP_ASSIGN(c.res, std::string slug, api::RequiredString(c.body, "slug"));
  QL_HTTP_ASSIGN(c.res, std::optional<std::string> name, api::OptionalString(c.body, "name"));
  QL_HTTP_ASSIGN(c.res, ProjectRecord project,
                 service.governance().CreateProject(c.caller, slug, name.value_or("")));
  SendJson(c.res, 201, api::ProjectJson(project));
}

void ApiServer::Impl::ProjectGet(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({}));
  QL_HTTP_ASSIGN(c.res, ProjectRecord project, service.governance().GetProject(c.caller, c.id));
  SendJson(c.res, 200, api::ProjectJson(project));
}

void ApiServer::Impl::ProjectArchive(Call& c) {
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {}));
  QL_HTTP_ASSIGN(c.res, ProjectRecord project, service.governance().ArchiveProject(c.caller, c.id));
  SendJson(c.res, 200, api::ProjectJson(project));
}

void ApiServer::Impl::ProjectBindingsList(Call& c) { ListBindings(c, c.id); }

void ApiServer::Impl::InstallationBindingsList(Call& c) {
  ListBindings(c, std::string(kInstallationScope));
}

void ApiServer::Impl::ListBindings(Call& c, const std::string& scope) {
  QL_HTTP_TRY(c.res, c.query.Check({}));
  QL_HTTP_ASSIGN(c.res, std::vector<BindingView> bindings,
                 service.governance().ListBindings(c.caller, scope));
  json items = json::array();
  for (const BindingView& b : bindings) items.push_back(api::BindingJson(b));
  SendJson(c.res, 200, ItemsJson(std::move(items), std::nullopt));
}

void ApiServer::Impl::ProjectBindingsWrite(Call& c) { WriteBinding(c, c.id); }

void ApiServer::Impl::InstallationBindingsWrite(Call& c) {
  WriteBinding(c, std::string(kInstallationScope));
}

void ApiServer::Impl::WriteBinding(Call& c, const std::string& scope) {
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {"principal", "role", "mutation_id"}));
  QL_HTTP_ASSIGN(c.res, std::string principal, api::RequiredString(c.body, "principal"));
  QL_HTTP_ASSIGN(c.res, std::string role, api::RequiredString(c.body, "role"));
  QL_HTTP_ASSIGN(c.res, std::optional<std::string> mutation_id,
                 api::OptionalString(c.body, "mutation_id"));
  QL_HTTP_ASSIGN(c.res, WriteBindingResult written,
                 service.governance().WriteBinding(c.caller, scope, principal, role, mutation_id));
  c.res.SetHeader("X-QL-Replayed", BoolHeader(written.replayed));
  SendJson(c.res, written.replayed ? 200 : 201, api::BindingJson(written.binding));
}

void ApiServer::Impl::AuditList(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({"limit", "cursor"}));
  PageRequest page;
  QL_HTTP_ASSIGN(c.res, int64_t limit,
                 c.query.Integer("limit", "invalid_limit", 1, kMaxPageLimit, kDefaultPageLimit));
  page.limit = static_cast<int>(limit);
  page.after_key = c.query.Get("cursor");
  QL_HTTP_ASSIGN(c.res, Page<AuditRecord> facts, service.governance().ListAudit(c.caller, page));
  json items = json::array();
  for (const AuditRecord& a : facts.items) items.push_back(api::AuditJson(a));
  QL_HTTP_TRY(c.res, AddNames(items));
  SendJson(c.res, 200, ItemsJson(std::move(items), facts.next_key));
}

void ApiServer::Impl::ProjectRetentionGet(Call& c) { AnswerRetention(c, false, false); }

void ApiServer::Impl::ProjectRetentionSet(Call& c) { AnswerRetention(c, false, true); }

void ApiServer::Impl::TaskRetentionGet(Call& c) { AnswerRetention(c, true, false); }

void ApiServer::Impl::TaskRetentionSet(Call& c) { AnswerRetention(c, true, true); }

void ApiServer::Impl::AnswerRetention(Call& c, bool task, bool set) {
  RetentionService& retention = service.retention();
  if (!set) QL_HTTP_TRY(c.res, c.query.Check({}));
  std::string target = c.id;
  if (task) {
    QL_HTTP_ASSIGN(c.res, target, service.ResolveTaskRef(c.id, c.caller));
  }
  QL_HTTP_ASSIGN(c.res, RetentionView view,
                 task ? retention.GetTaskRetention(c.caller, target)
                      : retention.GetProjectRetention(c.caller, target));
  if (set) {
    QL_HTTP_ASSIGN(c.res, RetentionSettings settings,
                   api::ApplyRetentionBody(c.body, view.stored.settings));
    QL_HTTP_ASSIGN(c.res, view,
                   task ? retention.SetTaskRetention(c.caller, target, settings)
                        : retention.SetProjectRetention(c.caller, target, settings));
  }
  SendJson(c.res, 200, api::RetentionJson(view));
}

void ApiServer::Impl::GetStatus(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({}));
  QL_HTTP_ASSIGN(c.res, StatusSummary summary, service.GetStatus(c.caller));
  json out = api::StatusJson(summary);
  out["ready"] = ready.load() && !withdrawn.load();
  if (!options.isolation_level.empty()) out["command_isolation"] = IsolationJson();
  SendJson(c.res, 200, out);
}

void ApiServer::Impl::SecretsList(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({}));
  QL_HTTP_ASSIGN(c.res, std::vector<SecretRecord> listed, options.secrets->List(c.caller));
  json items = json::array();
  for (const SecretRecord& secret : listed) items.push_back(api::SecretJson(secret));
  SendJson(c.res, 200, json{{"items", std::move(items)}});
}

void ApiServer::Impl::SecretPut(Call& c) {
  // The value is answered by nothing: the reply is the secret's head.
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {"value"}));
  QL_HTTP_ASSIGN(c.res, std::string value, api::RequiredString(c.body, "value"));
  QL_HTTP_ASSIGN(c.res, SecretRecord stored, options.secrets->Set(c.caller, c.id, value));
  SendJson(c.res, 200, api::SecretJson(stored));
}

void ApiServer::Impl::SecretDelete(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({}));
  QL_HTTP_ASSIGN(c.res, SecretRecord deleted, options.secrets->Remove(c.caller, c.id));
  SendJson(c.res, 200, api::SecretJson(deleted));
}

namespace {

json BlobJson(const BlobDescriptor& blob) {
  return json{{"digest", blob.digest},
              {"size", blob.size},
              {"chunks", static_cast<int64_t>(blob.chunks.size())}};
}

json ScriptHeadJson(const ScriptRecord& s) {
  return json{{"name", s.name},
              {"project_id", s.project_id},
              {"latest_version", s.latest_version},
              {"status", s.status},
              {"created_at", api::TimeJson(s.created_at_ms)},
              {"updated_at", api::TimeJson(s.updated_at_ms)},
              {"deleted_at", api::TimeJson(s.deleted_at_ms)}};
}

json ScriptVersionJson(const ScriptVersionRecord& v, bool with_files) {
  json out{{"name", v.name},
           {"version", v.version},
           {"kind", v.kind},
           {"digest", v.digest},
           {"size", v.size},
           {"entry", v.entry},
           {"created_by", v.created_by.empty() ? json(nullptr) : json(v.created_by)},
           {"created_at", api::TimeJson(v.created_at_ms)}};
  if (with_files) {
    json files = json::array();
    for (const ScriptFile& f : v.files) {
      files.push_back(json{
          {"path", f.path}, {"digest", f.digest}, {"size", f.size}, {"executable", f.executable}});
    }
    out["files"] = std::move(files);
  }
  return out;
}

// Reads {"path","digest","size","executable"} objects of a push.
Result<std::vector<ScriptFile>> FilesOf(const json& body) {
  if (!body.contains("files") || !body["files"].is_array()) {
    return InvalidArgument("invalid_body", "files must be an array of {path, digest, size}");
  }
  std::vector<ScriptFile> files;
  for (const json& f : body["files"]) {
    if (!f.is_object()) return InvalidArgument("invalid_body", "each file must be an object");
    QL_RETURN_IF_ERROR(api::CheckFields(f, {"path", "digest", "size", "executable"}));
    ScriptFile file;
    QL_ASSIGN_OR_RETURN(file.path, api::RequiredString(f, "path"));
    QL_ASSIGN_OR_RETURN(file.digest, api::RequiredString(f, "digest"));
    QL_ASSIGN_OR_RETURN(std::optional<int64_t> size, api::OptionalInteger(f, "size"));
    if (!size) return InvalidArgument("missing_field", "each file needs its size");
    file.size = *size;
    QL_ASSIGN_OR_RETURN(std::optional<bool> executable, api::OptionalBool(f, "executable"));
    file.executable = executable.value_or(false);
    files.push_back(std::move(file));
  }
  return files;
}

// The version a script route names with ?version=N (unset: the latest).
Result<std::optional<int64_t>> VersionParam(const Query& query) {
  std::optional<std::string> text = query.Get("version");
  if (!text) return std::optional<int64_t>();
  int64_t version = 0;
  auto [ptr, ec] = std::from_chars(text->data(), text->data() + text->size(), version);
  if (ec != std::errc() || ptr != text->data() + text->size() || version < 1) {
    return InvalidArgument("script_ref_invalid",
                           "version must be a whole number >= 1, got " + QuoteForMessage(*text));
  }
  return std::optional<int64_t>(version);
}

}  // namespace

void ApiServer::Impl::StreamBlob(const Caller& caller, const BlobDescriptor& blob,
                                 std::string content_type, http::Response& res) {
  res.status = 200;
  res.SetHeader("Content-Type", std::move(content_type));
  res.SetHeader("X-QL-Digest", blob.digest);
  res.SetHeader("X-QL-Size", std::to_string(blob.size));
  // Each chunk is read in a transaction of its own and checked against its digest before a
  // byte of it is sent; the whole digest is checked before the last chunk goes out. A chunk that
  // fails ends the answer early, so what arrived is shorter than X-QL-Size and does not have
  // the digest X-QL-Digest names: clients check both (`ql script cat` does).
  struct State {
    size_t next = 0;
    Sha256Hasher whole;
  };
  auto state = std::make_shared<State>();
  res.stream = [this, caller, blob, state](const std::atomic<bool>& gone) -> http::StreamStep {
    if (gone.load() || state->next >= blob.chunks.size()) return http::StreamStep{"", false};
    Result<std::string> chunk = options.scripts->ReadChunk(caller, blob, state->next);
    if (!chunk.ok()) return http::StreamStep{"", false};
    state->whole.Update(*chunk);
    ++state->next;
    const bool last = state->next == blob.chunks.size();
    if (last && state->whole.FinishHex() != blob.digest) return http::StreamStep{"", false};
    return http::StreamStep{std::move(*chunk), !last};
  };
  if (blob.chunks.empty()) res.stream = nullptr;
}

void ApiServer::Impl::BlobUpload(Call& c) {
  QL_HTTP_TRY(c.res, options.scripts->MayPublish(c.caller));
  if (c.req.Header("Content-Type") != "application/octet-stream") {
    SendError(c.res, 415, "unsupported_media_type",
              "this route takes raw bytes (Content-Type: application/octet-stream), got " +
                  QuoteForMessage(c.req.Header("Content-Type")));
    return;
  }
  QL_HTTP_ASSIGN(c.res, BlobDescriptor blob, options.scripts->Upload(c.caller, c.req.body));
  SendJson(c.res, 201, BlobJson(blob));
}

void ApiServer::Impl::BlobCompose(Call& c) {
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {"pieces"}));
  if (!c.body.contains("pieces") || !c.body["pieces"].is_array()) {
    SendError(c.res, 400, "invalid_body", "pieces must be an array of blob digests");
    return;
  }
  std::vector<std::string> pieces;
  for (const json& piece : c.body["pieces"]) {
    if (!piece.is_string()) {
      SendError(c.res, 400, "invalid_body", "pieces must be an array of blob digests");
      return;
    }
    pieces.push_back(piece.get<std::string>());
  }
  QL_HTTP_ASSIGN(c.res, BlobDescriptor blob, options.scripts->Compose(c.caller, pieces));
  SendJson(c.res, 201, BlobJson(blob));
}

void ApiServer::Impl::BlobGet(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({}));
  QL_HTTP_ASSIGN(c.res, BlobDescriptor blob, options.scripts->Stat(c.caller, c.id));
  StreamBlob(c.caller, blob, "application/octet-stream", c.res);
}

void ApiServer::Impl::ScriptsList(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({}));
  QL_HTTP_ASSIGN(c.res, std::vector<ScriptRecord> listed, options.scripts->List(c.caller));
  json items = json::array();
  for (const ScriptRecord& script : listed) items.push_back(ScriptHeadJson(script));
  SendJson(c.res, 200, json{{"items", std::move(items)}});
}

void ApiServer::Impl::ScriptGet(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({"version"}));
  QL_HTTP_ASSIGN(c.res, std::optional<int64_t> version, VersionParam(c.query));
  QL_HTTP_ASSIGN(c.res, auto found, options.scripts->Get(c.caller, c.id, version));
  json out = ScriptHeadJson(found.first);
  out["version"] = ScriptVersionJson(found.second, /*with_files=*/true);
  SendJson(c.res, 200, out);
}

void ApiServer::Impl::ScriptVersionsList(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({}));
  QL_HTTP_ASSIGN(c.res, std::vector<ScriptVersionRecord> versions,
                 options.scripts->History(c.caller, c.id));
  json items = json::array();
  for (const ScriptVersionRecord& v : versions) items.push_back(ScriptVersionJson(v, false));
  SendJson(c.res, 200, json{{"items", std::move(items)}});
}

void ApiServer::Impl::ScriptPush(Call& c) {
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {"kind", "files", "entry", "expected_latest"}));
  ::ql::ScriptPush push;
  QL_HTTP_ASSIGN(c.res, push.kind, api::RequiredString(c.body, "kind"));
  QL_HTTP_ASSIGN(c.res, push.files, FilesOf(c.body));
  QL_HTTP_ASSIGN(c.res, std::optional<std::string> entry, api::OptionalString(c.body, "entry"));
  push.entry = entry.value_or("");
  QL_HTTP_ASSIGN(c.res, push.expected_latest, api::OptionalInteger(c.body, "expected_latest"));
  QL_HTTP_ASSIGN(c.res, PushScriptResult pushed, options.scripts->Push(c.caller, c.id, push));
  json out = ScriptVersionJson(pushed.version, /*with_files=*/true);
  out["unchanged"] = pushed.unchanged;
  SendJson(c.res, pushed.unchanged ? 200 : 201, out);
}

void ApiServer::Impl::ScriptContent(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({"version", "path"}));
  QL_HTTP_ASSIGN(c.res, std::optional<int64_t> version, VersionParam(c.query));
  QL_HTTP_ASSIGN(c.res, auto found, options.scripts->Get(c.caller, c.id, version));
  const ScriptVersionRecord& v = found.second;
  const std::string path = c.query.Get("path").value_or(v.entry);
  const ScriptFile* file = nullptr;
  for (const ScriptFile& f : v.files) {
    if (f.path == path) file = &f;
  }
  if (file == nullptr) {
    SendError(c.res, 404, "script_file_not_found",
              "script " + v.name + " version " + std::to_string(v.version) + " has no file " +
                  QuoteForMessage(path));
    return;
  }
  QL_HTTP_ASSIGN(c.res, BlobDescriptor blob, options.scripts->Stat(c.caller, file->digest));
  c.res.SetHeader("X-QL-Script-Version", std::to_string(v.version));
  c.res.SetHeader("X-QL-Script-Path", file->path);
  StreamBlob(c.caller, blob, "application/octet-stream", c.res);
}

void ApiServer::Impl::ScriptDelete(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({}));
  QL_HTTP_ASSIGN(c.res, ScriptRecord deleted, options.scripts->Remove(c.caller, c.id));
  SendJson(c.res, 200, ScriptHeadJson(deleted));
}

void ApiServer::Impl::PoolsList(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({}));
  QL_HTTP_ASSIGN(c.res, std::vector<PoolRecord> pools, options.placement->ListPools(c.caller));
  json items = json::array();
  for (const PoolRecord& p : pools) items.push_back(api::PoolJson(p));
  SendJson(c.res, 200, json{{"items", std::move(items)}});
}

void ApiServer::Impl::PoolGet(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({}));
  QL_HTTP_ASSIGN(c.res, PoolRecord pool, options.placement->GetPool(c.caller, c.id));
  SendJson(c.res, 200, api::PoolJson(pool));
}

void ApiServer::Impl::PoolSet(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({}));
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {"serves_all_projects", "max_running"}));
  QL_HTTP_ASSIGN(c.res, std::optional<bool> open, api::OptionalBool(c.body, "serves_all_projects"));
  std::optional<std::optional<int64_t>> max;
  if (c.body.contains("max_running")) {
    if (c.body.at("max_running").is_null()) {
      max = std::optional<int64_t>();  // null clears the limit
    } else {
      QL_HTTP_ASSIGN(c.res, std::optional<int64_t> value,
                     api::OptionalInteger(c.body, "max_running"));
      max = value;
    }
  }
  QL_HTTP_ASSIGN(c.res, PoolRecord pool, options.placement->SetPool(c.caller, c.id, open, max));
  SendJson(c.res, 200, api::PoolJson(pool));
}

void ApiServer::Impl::PoolGrant(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({}));
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {"project", "max_running", "weight"}));
  QL_HTTP_ASSIGN(c.res, std::string project, api::RequiredString(c.body, "project"));
  QL_HTTP_ASSIGN(c.res, std::optional<int64_t> max, api::OptionalInteger(c.body, "max_running"));
  QL_HTTP_ASSIGN(c.res, std::optional<int64_t> weight, api::OptionalInteger(c.body, "weight"));
  QL_HTTP_ASSIGN(c.res, PoolGrantRecord grant,
                 options.placement->Grant(c.caller, c.id, project, max, weight.value_or(1)));
  SendJson(c.res, 200, api::PoolGrantJson(grant));
}

void ApiServer::Impl::PoolRevoke(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({}));
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {"project"}));
  QL_HTTP_ASSIGN(c.res, std::string project, api::RequiredString(c.body, "project"));
  QL_HTTP_TRY(c.res, options.placement->Revoke(c.caller, c.id, project));
  QL_HTTP_ASSIGN(c.res, PoolRecord pool, options.placement->GetPool(c.caller, c.id));
  SendJson(c.res, 200, api::PoolJson(pool));
}

void ApiServer::Impl::WorkersList(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({}));
  QL_HTTP_ASSIGN(c.res, std::vector<WorkerRecord> workers,
                 options.placement->ListWorkers(c.caller));
  json items = json::array();
  for (const WorkerRecord& w : workers) items.push_back(api::WorkerJson(w));
  SendJson(c.res, 200, json{{"items", std::move(items)}});
}

void ApiServer::Impl::WorkerGet(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({}));
  QL_HTTP_ASSIGN(c.res, WorkerRecord worker, options.placement->GetWorker(c.caller, c.id));
  SendJson(c.res, 200, api::WorkerJson(worker));
}

void ApiServer::Impl::WorkerDrain(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({}));
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {}));
  QL_HTTP_ASSIGN(c.res, WorkerRecord worker, options.placement->Drain(c.caller, c.id, true));
  SendJson(c.res, 200, api::WorkerJson(worker));
}

void ApiServer::Impl::WorkerResume(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({}));
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {}));
  QL_HTTP_ASSIGN(c.res, WorkerRecord worker, options.placement->Drain(c.caller, c.id, false));
  SendJson(c.res, 200, api::WorkerJson(worker));
}

namespace {

json ChannelJson(const ChannelRecord& c) {
  json config = json::parse(c.config_json, nullptr, false);
  return json{{"id", c.id},
              {"name", c.name},
              {"type", c.type},
              {"config", config.is_discarded() ? json::object() : config},
              {"created_by", c.created_by.empty() ? json(nullptr) : json(c.created_by)},
              {"created_at", api::TimeJson(c.created_at_ms)},
              {"deleted_at", api::TimeJson(c.deleted_at_ms)}};
}

// A whole number of seconds from the body, within [lo, hi], as milliseconds.
Result<std::optional<int64_t>> SecondsField(const json& body, std::string_view name, int64_t lo,
                                            int64_t hi) {
  QL_ASSIGN_OR_RETURN(std::optional<int64_t> s, api::OptionalInteger(body, name));
  if (!s) return std::optional<int64_t>();
  if (*s < lo || *s > hi) {
    return InvalidArgument("invalid_field", std::string(name) + " must be " + std::to_string(lo) +
                                                ".." + std::to_string(hi) + " seconds");
  }
  return std::optional<int64_t>(*s * 1000);
}

}  // namespace

json ApiServer::Impl::NotifyNames::Channel(const std::string& id) const {
  auto it = channels.find(id);
  return it == channels.end() ? json(nullptr) : json(it->second);
}

json ApiServer::Impl::NotifyNames::Task(const std::optional<std::string>& id) const {
  if (!id) return nullptr;
  auto it = tasks.find(*id);
  return it == tasks.end() ? json(nullptr) : json(it->second);
}

Result<ApiServer::Impl::NotifyNames> ApiServer::Impl::NamesForNotify(
    const Caller& caller, const std::set<std::string>& task_ids) {
  NotifyNames out;
  QL_ASSIGN_OR_RETURN(std::vector<ChannelRecord> channels, options.notify->ListChannels(caller));
  for (const ChannelRecord& c : channels) out.channels.emplace(c.id, c.name);
  QL_ASSIGN_OR_RETURN(ControlService::DisplayNames names, service.NamesOf(task_ids, {}, {}));
  out.tasks = std::move(names.tasks);
  return out;
}

Result<json> ApiServer::Impl::RulesJson(const Caller& caller,
                                        const std::vector<RuleRecord>& rules) {
  std::set<std::string> task_ids;
  for (const RuleRecord& r : rules) {
    if (r.task_id) task_ids.insert(*r.task_id);
  }
  QL_ASSIGN_OR_RETURN(NotifyNames names, NamesForNotify(caller, task_ids));
  json items = json::array();
  for (const RuleRecord& r : rules) {
    items.push_back(json{{"id", r.id},
                         {"channel", names.Channel(r.channel_id)},
                         {"channel_id", r.channel_id},
                         {"event", r.event},
                         {"task_id", r.task_id ? json(*r.task_id) : json(nullptr)},
                         {"task_name", names.Task(r.task_id)},
                         {"mode", r.mode},
                         {"min_interval_s", r.min_interval_ms / 1000},
                         {"after_s", r.threshold_ms ? json(*r.threshold_ms / 1000) : json(nullptr)},
                         {"created_at", api::TimeJson(r.created_at_ms)}});
  }
  return items;
}

Result<json> ApiServer::Impl::DeliveriesJson(const Caller& caller,
                                             const std::vector<OutboxRecord>& rows) {
  std::set<std::string> task_ids;
  for (const OutboxRecord& r : rows) {
    if (r.task_id) task_ids.insert(*r.task_id);
  }
  QL_ASSIGN_OR_RETURN(NotifyNames names, NamesForNotify(caller, task_ids));
  json items = json::array();
  for (const OutboxRecord& r : rows) {
    items.push_back(json{
        {"id", r.id},
        {"channel", names.Channel(r.channel_id)},
        {"channel_id", r.channel_id},
        {"event", r.event},
        {"task_id", r.task_id ? json(*r.task_id) : json(nullptr)},
        {"task_name", names.Task(r.task_id)},
        {"run_id", r.run_id ? json(*r.run_id) : json(nullptr)},
        {"status", r.status},
        {"attempts", r.attempts},
        {"next_attempt_at", r.status == kDeliveryPending ? api::TimeJson(r.next_attempt_at_ms)
                                                         : json(nullptr)},
        {"last_status_code", r.last_status_code ? json(*r.last_status_code) : json(nullptr)},
        {"last_error", r.last_error ? json(*r.last_error) : json(nullptr)},
        {"last_latency_ms", r.last_latency_ms ? json(*r.last_latency_ms) : json(nullptr)},
        {"created_at", api::TimeJson(r.created_at_ms)},
        {"delivered_at", api::TimeJson(r.delivered_at_ms)}});
  }
  return items;
}

void ApiServer::Impl::NotifyChannelsList(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({}));
  QL_HTTP_ASSIGN(c.res, std::vector<ChannelRecord> listed, options.notify->ListChannels(c.caller));
  json items = json::array();
  for (const ChannelRecord& channel : listed) items.push_back(ChannelJson(channel));
  SendJson(c.res, 200, json{{"items", std::move(items)}});
}

void ApiServer::Impl::NotifyChannelsCreate(Call& c) {
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {"name", "type", "config"}));
  QL_HTTP_ASSIGN(c.res, std::string name, api::RequiredString(c.body, "name"));
  QL_HTTP_ASSIGN(c.res, std::string type, api::RequiredString(c.body, "type"));
  if (!c.body.contains("config") || !c.body["config"].is_object()) {
    SendError(c.res, 400, "channel_config_invalid", "config must be a JSON object");
    return;
  }
  QL_HTTP_ASSIGN(c.res, ChannelRecord channel,
                 options.notify->AddChannel(c.caller, name, type, c.body["config"].dump()));
  SendJson(c.res, 201, ChannelJson(channel));
}

void ApiServer::Impl::NotifyChannelDelete(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({}));
  QL_HTTP_ASSIGN(c.res, ChannelRecord channel, options.notify->RemoveChannel(c.caller, c.id));
  SendJson(c.res, 200, ChannelJson(channel));
}

void ApiServer::Impl::NotifyChannelTest(Call& c) {
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {}));
  QL_HTTP_ASSIGN(c.res, OutboxRecord row, options.notify->TestChannel(c.caller, c.id));
  QL_HTTP_ASSIGN(c.res, json items, DeliveriesJson(c.caller, {row}));
  SendJson(c.res, 202, items.at(0));
}

void ApiServer::Impl::NotifyRulesList(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({}));
  QL_HTTP_ASSIGN(c.res, std::vector<RuleRecord> rules, options.notify->ListRules(c.caller));
  QL_HTTP_ASSIGN(c.res, json items, RulesJson(c.caller, rules));
  SendJson(c.res, 200, json{{"items", std::move(items)}});
}

void ApiServer::Impl::NotifyRulesCreate(Call& c) {
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {"channel", "event", "task", "mode", "min_interval_s",
                                               "after_s"}));
  NewRuleRequest request;
  QL_HTTP_ASSIGN(c.res, request.channel, api::RequiredString(c.body, "channel"));
  QL_HTTP_ASSIGN(c.res, request.event, api::RequiredString(c.body, "event"));
  QL_HTTP_ASSIGN(c.res, request.task, api::OptionalString(c.body, "task"));
  QL_HTTP_ASSIGN(c.res, request.mode, api::OptionalString(c.body, "mode"));
  QL_HTTP_ASSIGN(c.res, request.min_interval_ms,
                 SecondsField(c.body, "min_interval_s", 0, kMaxMinIntervalMs / 1000));
  QL_HTTP_ASSIGN(c.res, request.threshold_ms, SecondsField(c.body, "after_s", 1, 30LL * 24 * 3600));
  QL_HTTP_ASSIGN(c.res, RuleRecord rule, options.notify->AddRule(c.caller, request));
  QL_HTTP_ASSIGN(c.res, json items, RulesJson(c.caller, {rule}));
  SendJson(c.res, 201, items.at(0));
}

void ApiServer::Impl::NotifyRuleDelete(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({}));
  QL_HTTP_ASSIGN(c.res, RuleRecord rule, options.notify->RemoveRule(c.caller, c.id));
  QL_HTTP_ASSIGN(c.res, json items, RulesJson(c.caller, {rule}));
  SendJson(c.res, 200, items.at(0));
}

void ApiServer::Impl::NotifyDeliveriesList(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({"failed", "limit"}));
  bool failed = false;
  if (std::optional<std::string> f = c.query.Get("failed")) {
    if (*f != "true" && *f != "false") {
      SendError(c.res, 400, "invalid_parameter", "failed is true or false");
      return;
    }
    failed = *f == "true";
  }
  QL_HTTP_ASSIGN(c.res, int64_t limit,
                 c.query.Integer("limit", "invalid_limit", 1, kMaxListLimit, 100));
  QL_HTTP_ASSIGN(c.res, std::vector<OutboxRecord> rows,
                 options.notify->ListDeliveries(c.caller, failed, static_cast<int>(limit)));
  QL_HTTP_ASSIGN(c.res, json items, DeliveriesJson(c.caller, rows));
  SendJson(c.res, 200, json{{"items", std::move(items)}});
}

void ApiServer::Impl::NotifyRedeliver(Call& c) {
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {}));
  QL_HTTP_ASSIGN(c.res, OutboxRecord row, options.notify->Redeliver(c.caller, c.id));
  QL_HTTP_ASSIGN(c.res, json items, DeliveriesJson(c.caller, {row}));
  SendJson(c.res, 202, items.at(0));
}

bool ApiServer::Impl::RefuseCrossSiteSignIn(Call& c) {
  // No signing in from another site's page (login CSRF: a form that signs the victim into
  // the attacker's account): a browser says where the request comes from, and a form
  // cannot send JSON.
  const std::string site = c.req.Header("Sec-Fetch-Site");
  const std::string type = c.req.Header("Content-Type");
  if ((!site.empty() && site != "same-origin" && site != "none") ||
      type.rfind("application/json", 0) != 0) {
    SendError(c.res, 403, "csrf_failed",
              "sign in from this server's own page or a program sending application/json");
    return true;
  }
  return false;
}

void ApiServer::Impl::SendSignedIn(Call& c, const SignedIn& signed_in, bool panel) {
  const TokenRecord& session = signed_in.session.record;
  json out{
      {"principal", api::PrincipalJson(signed_in.principal)},
      {"session", api::TokenJson(session)},
      {"must_change_password", signed_in.must_change_password},
      {"restriction", session.restriction.empty() ? json(nullptr) : json(session.restriction)}};
  if (panel) {
    const int64_t max_age_s = (session.expires_at_ms.value_or(0) - session.created_at_ms) / 1000;
    c.res.SetHeader("Set-Cookie", std::string(kSessionCookie) + "=" + signed_in.session.token +
                                      "; Path=/; Max-Age=" + std::to_string(max_age_s) +
                                      "; HttpOnly; SameSite=Strict" + SecureAttribute());
    out["csrf_token"] = CsrfTokenOf(signed_in.session.token);
  } else {
    out["token"] = signed_in.session.token;
  }
  SendJson(c.res, 200, out);
}

namespace {

// The client a sign-in body names: panel (the default) or cli.
Result<bool> PanelClient(const json& body) {
  QL_ASSIGN_OR_RETURN(std::optional<std::string> client, api::OptionalString(body, "client"));
  if (client.has_value() && *client != "panel" && *client != "cli") {
    return InvalidArgument("invalid_client",
                           "client is panel or cli, got " + QuoteForMessage(*client));
  }
  return client.value_or("panel") == "panel";
}

}  // namespace

void ApiServer::Impl::SignIn(Call& c) {
  if (RefuseCrossSiteSignIn(c)) return;
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {"name", "password", "client", "totp"}));
  QL_HTTP_ASSIGN(c.res, std::optional<std::string> totp, api::OptionalString(c.body, "totp"));
  QL_HTTP_ASSIGN(c.res, std::string name, api::RequiredString(c.body, "name"));
  QL_HTTP_ASSIGN(c.res, std::string password, api::RequiredString(c.body, "password"));
  QL_HTTP_ASSIGN(c.res, const bool panel, PanelClient(c.body));
  Result<SignedIn> signed_in = options.sign_in->SignIn(
      name, password, panel ? SessionClient::kPanel : SessionClient::kCli, c.req.remote_address,
      c.caller.request_id.empty() ? c.req.Header("X-Request-Id").substr(0, 64)
                                  : c.caller.request_id,
      totp.value_or(""));
  if (!signed_in.ok()) {
    const std::string reason = signed_in.status().reason();
    if (reason == "sign_in_failed" || reason == "totp_required") {
      SendError(c.res, 401, reason, signed_in.status().message());
    } else if (reason == "too_many_attempts") {
      c.res.SetHeader("Retry-After", "60");
      SendError(c.res, 429, reason, signed_in.status().message());
    } else {
      SendStatus(c.res, signed_in.status());
    }
    return;
  }
  SendSignedIn(c, *signed_in, panel);
}

void ApiServer::Impl::SignInMethods(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({}));
  QL_HTTP_ASSIGN(c.res, const bool setup, options.sign_in->SetupPending());
  json oidc = nullptr;
  if (options.oidc != nullptr) {
    oidc = json{{"name", options.oidc->name()}, {"url", "/api/v1/sign-in/oidc"}};
  }
  SendJson(c.res, 200, json{{"password", true}, {"oidc", oidc}, {"setup", setup}});
}

// The cookie that ties a provider's answer to the browser that started the sign-in: sent back
// on the provider's top-level redirect (SameSite=Lax), only to the sign-in paths.
constexpr std::string_view kOidcStateCookie = "ql_oidc_state";

void ApiServer::Impl::OidcBegin(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({"client", "port", "key"}));
  if (options.oidc == nullptr) {
    SendError(c.res, 404, "oidc_not_configured", "this server has no single sign-on provider");
    return;
  }
  // `ql login` names its loopback port and the public key its token is sealed to.
  const std::string client = c.query.Get("client").value_or("panel");
  if (client != "panel" && client != "cli") {
    SendError(c.res, 400, "invalid_client",
              "client is panel or cli, got " + QuoteForMessage(client));
    return;
  }
  std::optional<int64_t> port;
  if (client == "cli") {
    QL_HTTP_ASSIGN(c.res, int64_t p, c.query.Integer("port", "invalid_cli_port", 1024, 65535, 0));
    port = p;
  }
  Result<OidcSignIn::Started> started =
      options.oidc->Begin(client == "cli" ? SessionClient::kCli : SessionClient::kPanel, port,
                          c.query.Get("key").value_or(""));
  if (!started.ok() && started.status().code() == StatusCode::kInvalidArgument) {
    SendStatus(c.res, started.status());
    return;
  }
  if (!started.ok()) {
    c.res.status = 303;
    c.res.SetHeader("Location", "/?sign_in_error=" + started.status().reason());
    c.res.SetContent("", "text/plain");
    return;
  }
  c.res.SetHeader("Set-Cookie", std::string(kOidcStateCookie) + "=" + started->state +
                                    "; Path=/api/v1/sign-in/oidc; Max-Age=" +
                                    std::to_string(OidcSignIn::kLoginTtlMs / 1000) +
                                    "; HttpOnly; SameSite=Lax" + SecureAttribute());
  c.res.SetHeader("Referrer-Policy", "no-referrer");
  c.res.status = 302;
  c.res.SetHeader("Location", started->url);
  c.res.SetContent("", "text/plain");
}

void ApiServer::Impl::OidcCallback(Call& c) {
  // A provider may add parameters of its own to its answer; they are ignored (RFC 6749
  // §4.1.2), but each one this sign-in reads must come once.
  if (options.oidc == nullptr) {
    SendError(c.res, 404, "oidc_not_configured", "this server has no single sign-on provider");
    return;
  }
  // Whatever happens, the state cookie has done its work.
  const std::string clear_state = std::string(kOidcStateCookie) +
                                  "=; Path=/api/v1/sign-in/oidc; Max-Age=0; HttpOnly; "
                                  "SameSite=Lax" +
                                  SecureAttribute();
  auto back = [&](std::string_view error) {
    c.res.headers.emplace_back("Set-Cookie", clear_state);
    c.res.SetHeader("Referrer-Policy", "no-referrer");
    c.res.status = 303;
    c.res.SetHeader("Location",
                    error.empty() ? std::string("/") : "/?sign_in_error=" + std::string(error));
    c.res.SetContent("", "text/plain");
  };
  const std::string request_id = c.req.Header("X-Request-Id").substr(0, 64);
  for (const char* name : {"code", "state", "iss", "error"}) {
    if (c.req.ParamCount(name) > 1) {
      service.governance().RecordAuthFailure(request_id, "oidc_failed");
      back("oidc_failed");
      return;
    }
  }
  if (c.query.Get("error").has_value() || !c.query.Get("code").has_value()) {
    // The person cancelled at the provider, or the provider refused.
    service.governance().RecordAuthFailure(request_id, "oidc_failed");
    back("oidc_failed");
    return;
  }
  OidcSignIn::Outcome outcome = options.oidc->Finish(
      c.query.Get("state").value_or(""), CookieValue(c.req.Header("Cookie"), kOidcStateCookie),
      *c.query.Get("code"), c.query.Get("iss"), c.req.remote_address, request_id);
  if (outcome.cli && outcome.cli_port.has_value()) {
    // Back to the `ql login` that started it, on this machine's loopback (only the port came
    // from the request): its token sealed to its key, or why not.
    c.res.headers.emplace_back("Set-Cookie", clear_state);
    c.res.SetHeader("Referrer-Policy", "no-referrer");
    c.res.status = 303;
    c.res.SetHeader("Location", "http://127.0.0.1:" + std::to_string(*outcome.cli_port) +
                                    "/callback?" +
                                    (outcome.status.ok() ? "sealed=" + outcome.sealed_token
                                                         : "error=" + outcome.status.reason()));
    c.res.SetContent("", "text/plain");
    return;
  }
  if (!outcome.status.ok()) {
    back(outcome.status.reason());
    return;
  }
  const SignedIn* signed_in = &outcome.signed_in;
  const TokenRecord& session = signed_in->session.record;
  const int64_t max_age_s = (session.expires_at_ms.value_or(0) - session.created_at_ms) / 1000;
  c.res.headers.emplace_back("Set-Cookie", std::string(kSessionCookie) + "=" +
                                               signed_in->session.token +
                                               "; Path=/; Max-Age=" + std::to_string(max_age_s) +
                                               "; HttpOnly; SameSite=Strict" + SecureAttribute());
  back("");
}

void ApiServer::Impl::Setup(Call& c) {
  if (RefuseCrossSiteSignIn(c)) return;
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {"code", "password", "client"}));
  QL_HTTP_ASSIGN(c.res, std::string code, api::RequiredString(c.body, "code"));
  QL_HTTP_ASSIGN(c.res, std::string password, api::RequiredString(c.body, "password"));
  QL_HTTP_ASSIGN(c.res, const bool panel, PanelClient(c.body));
  Result<SignedIn> signed_in = options.sign_in->CompleteSetup(
      code, password, panel ? SessionClient::kPanel : SessionClient::kCli, c.req.remote_address,
      c.req.Header("X-Request-Id").substr(0, 64));
  if (!signed_in.ok()) {
    if (signed_in.status().reason() == "too_many_attempts") {
      c.res.SetHeader("Retry-After", "60");
      SendError(c.res, 429, "too_many_attempts", signed_in.status().message());
    } else {
      SendStatus(c.res, signed_in.status());
    }
    return;
  }
  SendSignedIn(c, *signed_in, panel);
}

void ApiServer::Impl::SettingsGet(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({}));
  QL_HTTP_ASSIGN(c.res, InstallationSettings settings, options.sign_in->Settings(c.caller));
  SendJson(c.res, 200, json{{"require_second_factor", settings.require_second_factor}});
}

void ApiServer::Impl::SettingsSet(Call& c) {
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {"require_second_factor"}));
  QL_HTTP_ASSIGN(c.res, std::string value, api::RequiredString(c.body, "require_second_factor"));
  QL_HTTP_ASSIGN(c.res, InstallationSettings settings,
                 options.sign_in->SetRequireSecondFactor(c.caller, value));
  SendJson(c.res, 200, json{{"require_second_factor", settings.require_second_factor}});
}

void ApiServer::Impl::SignOut(Call& c) {
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {}));
  QL_HTTP_TRY(c.res, options.sign_in->SignOut(c.caller));
  if (c.identity.via_cookie) {
    c.res.SetHeader("Set-Cookie", std::string(kSessionCookie) +
                                      "=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict" +
                                      SecureAttribute());
  }
  SendJson(c.res, 200, json{{"signed_out", c.identity.who.token.kind == kTokenSession}});
}

void ApiServer::Impl::SessionsList(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({"principal"}));
  QL_HTTP_ASSIGN(c.res, std::vector<TokenRecord> sessions,
                 options.sign_in->ListSessions(c.caller, c.query.Get("principal").value_or("")));
  json items = json::array();
  for (const TokenRecord& t : sessions) {
    json item = api::TokenJson(t);
    item["current"] = t.id == c.identity.who.token.id;
    items.push_back(std::move(item));
  }
  SendJson(c.res, 200, ItemsJson(std::move(items), std::nullopt));
}

void ApiServer::Impl::SessionRevoke(Call& c) {
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {}));
  QL_HTTP_ASSIGN(c.res, TokenRecord session, options.sign_in->RevokeSession(c.caller, c.id));
  SendJson(c.res, 200, api::TokenJson(session));
}

void ApiServer::Impl::PasswordChange(Call& c) {
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {"current_password", "new_password"}));
  QL_HTTP_ASSIGN(c.res, std::optional<std::string> current,
                 api::OptionalString(c.body, "current_password"));
  QL_HTTP_ASSIGN(c.res, std::string replacement, api::RequiredString(c.body, "new_password"));
  QL_HTTP_TRY(c.res,
              options.sign_in->ChangeOwnPassword(c.caller, current.value_or(""), replacement));
  if (options.forget_token) options.forget_token(c.identity.token_digest);
  SendJson(c.res, 200, json{{"password_set", true}});
}

void ApiServer::Impl::PrincipalPassword(Call& c) {
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {"new_password", "require_change"}));
  QL_HTTP_ASSIGN(c.res, std::string replacement, api::RequiredString(c.body, "new_password"));
  bool require_change = false;
  if (c.body.contains("require_change")) {
    if (!c.body.at("require_change").is_boolean()) {
      SendError(c.res, 400, "invalid_require_change", "require_change is true or false");
      return;
    }
    require_change = c.body.at("require_change").get<bool>();
  }
  QL_HTTP_TRY(c.res, options.sign_in->ResetPassword(c.caller, c.id, replacement, require_change));
  SendJson(c.res, 200, json{{"password_set", true}, {"require_change", require_change}});
}

void ApiServer::Impl::PrincipalPasswordRemove(Call& c) {
  QL_HTTP_TRY(c.res, c.query.Check({}));
  QL_HTTP_TRY(c.res, options.sign_in->RemovePassword(c.caller, c.id));
  SendJson(c.res, 200, json{{"password_set", false}});
}

void ApiServer::Impl::TotpEnrol(Call& c) {
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {}));
  QL_HTTP_ASSIGN(c.res, SignInService::TotpEnrolment enrolment,
                 options.sign_in->EnrolTotp(c.caller));
  SendJson(c.res, 200, json{{"secret", enrolment.secret}, {"otpauth_uri", enrolment.uri}});
}

void ApiServer::Impl::TotpConfirm(Call& c) {
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {"code"}));
  QL_HTTP_ASSIGN(c.res, std::string code, api::RequiredString(c.body, "code"));
  QL_HTTP_ASSIGN(c.res, std::vector<std::string> recovery,
                 options.sign_in->ConfirmTotp(c.caller, code));
  if (options.forget_token) options.forget_token(c.identity.token_digest);
  SendJson(c.res, 200, json{{"enabled", true}, {"recovery_codes", recovery}});
}

void ApiServer::Impl::TotpDisable(Call& c) {
  QL_HTTP_TRY(c.res, api::CheckFields(c.body, {"current_password"}));
  QL_HTTP_ASSIGN(c.res, std::string current, api::RequiredString(c.body, "current_password"));
  QL_HTTP_TRY(c.res, options.sign_in->DisableTotp(c.caller, current));
  SendJson(c.res, 200, json{{"enabled", false}});
}

void ApiServer::Impl::ServeLog(const std::string& run_id, const http::Request& req,
                               const Caller& caller, const Admission& identity,
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
  QL_HTTP_ASSIGN(res, const AttemptRecord* attempt, AttemptOf(view, run_id, attempt_number));
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
                                  const Caller& caller, const Admission& identity,
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

void ApiServer::SetWritable(const Status& verdict) {
  std::lock_guard<std::mutex> lock(impl_->readiness_mu);
  if (!verdict.ok()) impl_->write_refusal = verdict;
  impl_->writes_refused = !verdict.ok();
}

void ApiServer::SetReadiness(const Status& readiness) {
  std::lock_guard<std::mutex> lock(impl_->readiness_mu);
  const bool changed = readiness.ok() != impl_->ready.load() ||
                       (!readiness.ok() && readiness.reason() != impl_->not_ready.reason());
  if (changed && impl_->options.event_log != nullptr) {
    if (readiness.ok()) {
      impl_->options.event_log->Info("readiness.changed", {{"ready", true}});
    } else {
      impl_->options.event_log->Warn("readiness.changed",
                                     {{"ready", false},
                                      {"code", readiness.reason()},
                                      {"message", readiness.message().substr(0, 300)}});
    }
  }
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
