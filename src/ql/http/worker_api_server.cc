#include "ql/http/worker_api_server.h"

#include <absl/strings/escaping.h>

#include <atomic>
#include <charconv>
#include <functional>
#include <regex>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "ql/core/digest.h"
#include "ql/http/api_json.h"
#include "ql/http/http_server.h"

namespace ql {
namespace {

using nlohmann::json;

constexpr size_t kMaxTokenBytes = 512;

// What admission decided about a request, carried by the request (Request::decision) to its
// handler: the authenticated worker and the route with its path id.
struct Admitted {
  std::string worker_id;
  size_t route = 0;
  std::string id;
  std::string detail;  // the route's second path parameter (a blob's digest), if any
};

void SendJson(http::Response& res, int status, const json& body) {
  res.status = status;
  res.SetContent(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void SendStatus(http::Response& res, const Status& st) {
  const std::string code =
      st.reason().empty() ? std::string(StatusCodeName(st.code())) : st.reason();
  const int http = code == "unauthorized" ? 401 : api::HttpStatusFor(st.code());
  SendJson(res, http, api::ErrorJson(code, st.message()));
}

// The value of a Content-Length header; unparsable or absent counts as 0 (the server refuses
// an invalid length before admission).
uint64_t ParseLength(const std::string& text) {
  uint64_t value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc() && ptr == text.data() + text.size() ? value : 0;
}

Result<int64_t> RequiredInteger(const json& body, std::string_view name) {
  QL_ASSIGN_OR_RETURN(std::optional<int64_t> v, api::OptionalInteger(body, name));
  if (!v.has_value()) {
    return InvalidArgument("missing_field", "field " + std::string(name) + " is required");
  }
  return *v;
}

Result<int> SmallInteger(const json& body, std::string_view name, int min, int max) {
  QL_ASSIGN_OR_RETURN(int64_t v, RequiredInteger(body, name));
  if (v < min || v > max) {
    return InvalidArgument("invalid_argument", "field " + std::string(name) + " must be " +
                                                   std::to_string(min) + ".." +
                                                   std::to_string(max));
  }
  return static_cast<int>(v);
}

json SessionJson(const WorkerSessionRecord& s, const WorkerServiceOptions& o) {
  return json{{"session_id", s.id},
              {"generation", s.generation},
              {"status", s.status},
              {"available_slots", s.available_slots},
              {"max_concurrent_runs", s.max_concurrent_runs},
              {"expires_at_ms", s.expires_at_ms},
              {"session_ttl_ms", o.session_ttl_ms},
              {"heartbeat_interval_ms", o.heartbeat_interval_ms},
              {"lease_ttl_ms", o.lease_ttl_ms},
              {"pool", s.placement.pool},
              {"labels", s.placement.labels}};
}

json OfferJson(const WorkerOffer& offer, const WorkerServiceOptions& o) {
  const GrantedLease& g = offer.lease;
  json env = json::object();
  for (const auto& [k, v] : offer.plan.environment) env[k] = v;
  // Sealed material only: the worker unwraps the data keys with its own key provider.
  json secrets = json::array();
  for (const SealedVariable& s : offer.secrets) {
    secrets.push_back({{"variable", s.variable},
                       {"project_id", s.version.project_id},
                       {"name", s.version.name},
                       {"version", *s.version.version},
                       {"key_id", s.sealed.key_id},
                       {"wrapped_key", s.sealed.wrapped_key},
                       {"sealed_value", s.sealed.sealed_value}});
  }
  json out{{"offer_id", g.offer_id},
           {"run_id", g.run_id},
           {"attempt_id", g.attempt_id},
           {"attempt", g.attempt},
           {"project_id", g.project_id},
           {"task_id", g.task_id},
           {"task_revision", g.task_revision},
           {"execution_revision_id", g.execution_revision_id},
           {"lease_version", g.lease_version},
           {"lease_expires_at_ms", g.lease_expires_at_ms},
           {"lease_ttl_ms", o.lease_ttl_ms},
           {"log_cap_bytes", offer.log_cap_bytes},
           {"plan",
            {{"argv", offer.plan.argv},
             {"environment", env},
             {"working_directory", offer.plan.working_directory.has_value()
                                       ? json(*offer.plan.working_directory)
                                       : json(nullptr)},
             {"timeout_ms", offer.plan.timeout_ms},
             {"limits", TaskLimitsToJson(offer.plan.limits)},
             {"network", offer.plan.network ? "host" : "none"},
             {"isolation", offer.plan.unconfined ? "none" : "confined"}}},
           {"secrets", std::move(secrets)}};
  if (offer.plan.script) {
    // The version the worker fetches (GET .../blobs/{digest}) and runs, by digest.
    const ScriptPin& pin = *offer.plan.script;
    out["plan"]["script"] = json{{"name", pin.name},
                                 {"version", pin.version},
                                 {"digest", pin.digest},
                                 {"kind", pin.kind},
                                 {"entry", pin.entry}};
  }
  return out;
}

Result<AttemptOutcome> ParseOutcome(const json& body) {
  QL_ASSIGN_OR_RETURN(std::string kind, api::RequiredString(body, "outcome"));
  QL_ASSIGN_OR_RETURN(std::optional<int64_t> exit_code, api::OptionalInteger(body, "exit_code"));
  QL_ASSIGN_OR_RETURN(std::optional<int64_t> signal, api::OptionalInteger(body, "signal"));
  QL_ASSIGN_OR_RETURN(std::optional<std::string> message, api::OptionalString(body, "message"));
  QL_ASSIGN_OR_RETURN(std::optional<bool> truncated, api::OptionalBool(body, "log_truncated"));
  QL_ASSIGN_OR_RETURN(std::optional<std::string> code, api::OptionalString(body, "error_code"));
  AttemptOutcome o;
  using K = AttemptOutcome::Kind;
  const bool limit_code = code.has_value() && (*code == "memory_limit_exceeded" ||
                                               *code == "pids_limit_exceeded" ||
                                               *code == "cpu_limit_exceeded");
  if ((kind == "exited" || kind == "signaled") && code.has_value()) {
    if (!limit_code) {
      return InvalidArgument("invalid_argument",
                             "error_code of an exited or signaled outcome must be "
                             "memory_limit_exceeded, pids_limit_exceeded or cpu_limit_exceeded");
    }
    o.limit_error_code = *code;
  }
  if (kind == "exited") {
    if (!exit_code.has_value() || *exit_code < 0 || *exit_code > 255) {
      return InvalidArgument("invalid_argument", "outcome exited needs exit_code 0..255");
    }
    o.kind = K::kExited;
    o.exit_code = static_cast<int>(*exit_code);
  } else if (kind == "signaled") {
    if (!signal.has_value() || *signal < 1 || *signal > 128) {
      return InvalidArgument("invalid_argument", "outcome signaled needs signal 1..128");
    }
    o.kind = K::kSignaled;
    o.signal = static_cast<int>(*signal);
  } else if (kind == "timed_out") {
    o.kind = K::kTimedOut;
  } else if (kind == "cancelled") {
    o.kind = K::kCancelled;
  } else if (kind == "spawn_failed") {
    o.kind = K::kSpawnFailed;
    if (code.has_value()) {
      if (!IsSecretRunError(*code) && *code != "confinement_failed" &&
          *code != "cgroup_setup_failed" && *code != "confinement_unavailable" &&
          *code != "artifact_unavailable" && *code != "artifact_corrupt" &&
          *code != "script_plan_invalid") {
        return InvalidArgument("invalid_argument",
                               "error_code must be secret_not_found, secret_unavailable, "
                               "secret_corrupt, confinement_failed, cgroup_setup_failed, "
                               "confinement_unavailable, artifact_unavailable, artifact_corrupt "
                               "or script_plan_invalid");
      }
      o.error_code = *code;
    }
  } else {
    return InvalidArgument("invalid_argument",
                           "outcome must be exited, signaled, timed_out, cancelled or "
                           "spawn_failed");
  }
  if (message.has_value()) {
    if (message->size() > 1024) {
      return InvalidArgument("invalid_argument", "message exceeds 1024 bytes");
    }
    o.message = *message;
  }
  o.log_truncated = truncated.value_or(false);
  QL_ASSIGN_OR_RETURN(std::optional<std::string> confinement,
                      api::OptionalString(body, "confinement"));
  if (confinement.has_value()) {
    if (confinement->size() > 1024) {
      return InvalidArgument("invalid_argument", "confinement exceeds 1024 bytes");
    }
    o.confinement = *confinement;
  }
  QL_ASSIGN_OR_RETURN(std::optional<int64_t> ended,
                      api::OptionalInteger(body, "descendants_ended"));
  if (ended.has_value() && (*ended < 0 || *ended > 1'000'000)) {
    return InvalidArgument("invalid_argument", "descendants_ended must be 0..1000000");
  }
  o.descendants_ended = ended.value_or(0);
  return o;
}

}  // namespace

struct WorkerApiServer::Impl {
  Impl(WorkerService& service, Metrics& metrics, WorkerApiServerOptions options)
      : service(service), metrics(metrics), options(options) {}

  WorkerService& service;
  Metrics& metrics;
  WorkerApiServerOptions options;
  std::unique_ptr<http::HttpServer> server;  // created by Start (plain or TLS)
  std::atomic<bool> admitting{true};
  using Handler = std::function<Status(const std::string& worker, const std::string& id,
                                       const json& body, http::Response& res)>;
  // A GET route's handler: the request itself (its query and headers), no body.
  using GetHandler = std::function<Status(const Admitted& admitted, const http::Request& req,
                                          http::Response& res)>;
  struct Route {
    std::regex pattern;
    std::string_view method;  // POST (a JSON body) or GET (none)
    std::string_view name;
    Handler handler;
    GetHandler get;
  };
  std::vector<Route> routes;
  int port = 0;

  // Admits a request from its line and headers alone, before its body is read: the replica is
  // admitting, the worker token authenticates, the route exists, the body has a declared length
  // within the limit. Records the authenticated worker for the handler.
  bool Admit(http::Request& req, http::Response& res) {
    req.decision.reset();
    if (!admitting.load()) {
      SendJson(res, 503, api::ErrorJson("shutting_down", "this replica is stopping; use another"));
      return false;
    }
    const std::string auth = req.Header("Authorization");
    constexpr std::string_view kBearer = "Bearer ";
    if (auth.size() <= kBearer.size() || auth.compare(0, kBearer.size(), kBearer) != 0 ||
        auth.size() - kBearer.size() > kMaxTokenBytes) {
      SendJson(res, 401, api::ErrorJson("unauthorized", "a worker bearer token is required"));
      return false;
    }
    Result<std::string> worker = service.Authenticate(auth.substr(kBearer.size()));
    if (!worker.ok()) {
      SendStatus(res, worker.status());
      return false;
    }
    auto decision = std::make_shared<Admitted>();
    bool routed = false;
    for (size_t i = 0; i < routes.size() && !routed; ++i) {
      std::smatch match;
      if (std::regex_match(req.path, match, routes[i].pattern)) {
        routed = true;
        decision->route = i;
        if (match.size() > 1) decision->id = match[1].str();
        if (match.size() > 2) decision->detail = match[2].str();
      }
    }
    const std::string_view method = routed ? routes[decision->route].method : "POST";
    if (req.method != method) {
      res.SetHeader("Allow", std::string(method));
      SendJson(res, 405,
               api::ErrorJson("method_not_allowed",
                              routed ? "this worker route answers " + std::string(method)
                                     : std::string("worker calls are POST requests")));
      return false;
    }
    if (!routed) {
      SendJson(res, 404, api::ErrorJson("route_not_found", "no worker route for this path"));
      return false;
    }
    if (method == "GET" && req.DeclaresBody()) {
      SendJson(res, 400, api::ErrorJson("invalid_argument", "a worker GET carries no body"));
      return false;
    }
    // Workers always send a length.
    if (req.HasHeader("Transfer-Encoding")) {
      SendJson(res, 411,
               api::ErrorJson("length_required", "worker calls carry a Content-Length body"));
      return false;
    }
    if (ParseLength(req.Header("Content-Length")) > options.max_body_bytes) {
      SendJson(
          res, 413,
          api::ErrorJson("body_too_large", "request body exceeds " +
                                               std::to_string(options.max_body_bytes) + " bytes"));
      return false;
    }
    decision->worker_id = std::move(worker).value();
    req.decision = std::move(decision);
    return true;
  }

  // Parses the body of an admitted request and runs `handler`; any error answers with its code.
  void Serve(const http::Request& req, http::Response& res) {
    const auto* admitted = static_cast<const Admitted*>(req.decision.get());
    if (admitted == nullptr || admitted->route >= routes.size()) {
      return SendJson(res, 500, api::ErrorJson("internal", "request was not admitted"));
    }
    const Route& route = routes[admitted->route];
    metrics.Increment("ql_worker_requests_total", "route=\"" + std::string(route.name) + "\"");
    if (route.get) {
      Status st = route.get(*admitted, req, res);
      if (!st.ok()) SendStatus(res, st);
      return;
    }
    Result<json> body = api::ParseBody(req.body, true);
    if (!body.ok()) return SendStatus(res, body.status());
    Status st = route.handler(admitted->worker_id, admitted->id, *body, res);
    if (!st.ok()) SendStatus(res, st);
  }

  Result<LeaseCall> ParseLeaseCall(const std::string& worker, const std::string& offer,
                                   const json& body,
                                   std::initializer_list<std::string_view> fields) {
    QL_RETURN_IF_ERROR(api::CheckFields(body, fields));
    LeaseCall call;
    call.worker_id = worker;
    call.offer_id = offer;
    QL_ASSIGN_OR_RETURN(call.session_id, api::RequiredString(body, "session_id"));
    QL_ASSIGN_OR_RETURN(call.generation, RequiredInteger(body, "generation"));
    QL_ASSIGN_OR_RETURN(call.lease_token, api::RequiredString(body, "lease_token"));
    return call;
  }

  void Routes() {
    const WorkerServiceOptions& o = service.options();
    auto post = [this](const std::string& pattern, std::string_view route, Handler handler) {
      routes.push_back(Route{std::regex(pattern), "POST", route, std::move(handler), nullptr});
    };
    post("/worker/v1/sessions", "sessions.register",
         [this, &o](const std::string& worker, const std::string&, const json& body,
                    http::Response& res) -> Status {
           QL_RETURN_IF_ERROR(
               api::CheckFields(body, {"capabilities", "max_concurrent_runs", "available_slots",
                                       "software_version", "pool", "labels"}));
           json capabilities =
               body.contains("capabilities") ? body.at("capabilities") : json::object();
           QL_ASSIGN_OR_RETURN(
               int max, SmallInteger(body, "max_concurrent_runs", 1, kMaxConcurrentRunsPerSession));
           QL_ASSIGN_OR_RETURN(
               int slots, SmallInteger(body, "available_slots", 0, kMaxConcurrentRunsPerSession));
           QL_ASSIGN_OR_RETURN(std::optional<std::string> version,
                               api::OptionalString(body, "software_version"));
           // The pool is the credential's; a worker may name it (and is refused another).
           Placement offered;
           QL_ASSIGN_OR_RETURN(std::optional<std::string> pool, api::OptionalString(body, "pool"));
           offered.pool = pool.value_or("");
           if (pool.has_value()) {
             QL_RETURN_IF_ERROR(ValidatePoolName("invalid_argument", "pool", offered.pool));
           }
           if (body.contains("labels")) {
             QL_ASSIGN_OR_RETURN(offered.labels, ParsePlacementLabels("invalid_argument", "labels",
                                                                      body.at("labels")));
           }
           QL_ASSIGN_OR_RETURN(
               WorkerSessionRecord s,
               service.Register(worker, capabilities, max, slots, offered, version.value_or("")));
           SendJson(res, 201, SessionJson(s, o));
           return Status::Ok();
         });
    post("/worker/v1/sessions/([^/]{1,128})/heartbeat", "sessions.heartbeat",
         [this, &o](const std::string& worker, const std::string& id, const json& body,
                    http::Response& res) -> Status {
           QL_RETURN_IF_ERROR(api::CheckFields(body, {"generation", "available_slots"}));
           QL_ASSIGN_OR_RETURN(int64_t generation, RequiredInteger(body, "generation"));
           QL_ASSIGN_OR_RETURN(
               int slots, SmallInteger(body, "available_slots", 0, kMaxConcurrentRunsPerSession));
           QL_ASSIGN_OR_RETURN(HeartbeatAnswer a, service.Heartbeat(worker, id, generation, slots));
           json out = SessionJson(a.session, o);
           out["cancel"] = a.cancel;
           SendJson(res, 200, out);
           return Status::Ok();
         });
    for (std::string status : {"drain", "offline"}) {
      post("/worker/v1/sessions/([^/]{1,128})/" + status,
           status == "drain" ? "sessions.drain" : "sessions.offline",
           [this, &o, status](const std::string& worker, const std::string& id, const json& body,
                              http::Response& res) -> Status {
             QL_RETURN_IF_ERROR(api::CheckFields(body, {"generation"}));
             QL_ASSIGN_OR_RETURN(int64_t generation, RequiredInteger(body, "generation"));
             QL_ASSIGN_OR_RETURN(WorkerSessionRecord s,
                                 service.SetStatus(worker, id, generation,
                                                   status == "drain" ? "draining" : "offline"));
             SendJson(res, 200, SessionJson(s, o));
             return Status::Ok();
           });
    }
    post("/worker/v1/pull", "pull",
         [this, &o](const std::string& worker, const std::string&, const json& body,
                    http::Response& res) -> Status {
           QL_RETURN_IF_ERROR(
               api::CheckFields(body, {"session_id", "generation", "available_slots", "offers"}));
           QL_ASSIGN_OR_RETURN(std::string session, api::RequiredString(body, "session_id"));
           QL_ASSIGN_OR_RETURN(int64_t generation, RequiredInteger(body, "generation"));
           QL_ASSIGN_OR_RETURN(
               int slots, SmallInteger(body, "available_slots", 0, kMaxConcurrentRunsPerSession));
           if (!body.contains("offers") || !body.at("offers").is_array()) {
             return InvalidArgument("invalid_type", "offers must be an array");
           }
           std::vector<OfferToken> offers;
           for (const json& item : body.at("offers")) {
             if (!item.is_object()) {
               return InvalidArgument("invalid_type", "each offer must be an object");
             }
             QL_RETURN_IF_ERROR(api::CheckFields(item, {"offer_id", "lease_token"}));
             QL_ASSIGN_OR_RETURN(std::string offer, api::RequiredString(item, "offer_id"));
             QL_ASSIGN_OR_RETURN(std::string token, api::RequiredString(item, "lease_token"));
             offers.push_back({std::move(offer), std::move(token)});
           }
           QL_ASSIGN_OR_RETURN(PullAnswer a,
                               service.Pull(worker, session, generation, slots, offers));
           json out{{"offers", json::array()}, {"cancel", a.cancel}};
           for (const WorkerOffer& offer : a.offers) out["offers"].push_back(OfferJson(offer, o));
           SendJson(res, 200, out);
           return Status::Ok();
         });
    post("/worker/v1/leases/([^/]{1,128})/starting", "leases.starting",
         [this](const std::string& worker, const std::string& id, const json& body,
                http::Response& res) -> Status {
           QL_ASSIGN_OR_RETURN(
               LeaseCall call,
               ParseLeaseCall(worker, id, body, {"session_id", "generation", "lease_token"}));
           QL_ASSIGN_OR_RETURN(std::string status, service.Starting(call));
           SendJson(res, 200, json{{"status", status}});
           return Status::Ok();
         });
    post("/worker/v1/leases/([^/]{1,128})/running", "leases.running",
         [this](const std::string& worker, const std::string& id, const json& body,
                http::Response& res) -> Status {
           QL_ASSIGN_OR_RETURN(LeaseCall call,
                               ParseLeaseCall(worker, id, body,
                                              {"session_id", "generation", "lease_token", "pid"}));
           QL_ASSIGN_OR_RETURN(int64_t pid, RequiredInteger(body, "pid"));
           QL_ASSIGN_OR_RETURN(std::string status, service.Running(call, pid));
           SendJson(res, 200, json{{"status", status}});
           return Status::Ok();
         });
    post("/worker/v1/leases/([^/]{1,128})/renew", "leases.renew",
         [this](const std::string& worker, const std::string& id, const json& body,
                http::Response& res) -> Status {
           QL_ASSIGN_OR_RETURN(
               LeaseCall call,
               ParseLeaseCall(worker, id, body, {"session_id", "generation", "lease_token"}));
           QL_ASSIGN_OR_RETURN(LeaseRenewal r, service.Renew(call));
           SendJson(res, 200,
                    json{{"lease_version", r.lease_version},
                         {"lease_expires_at_ms", r.lease_expires_at_ms},
                         {"cancel_requested", r.cancel_requested}});
           return Status::Ok();
         });
    post("/worker/v1/leases/([^/]{1,128})/log", "leases.log",
         [this](const std::string& worker, const std::string& id, const json& body,
                http::Response& res) -> Status {
           QL_ASSIGN_OR_RETURN(LeaseCall call, ParseLeaseCall(worker, id, body,
                                                              {"session_id", "generation",
                                                               "lease_token", "offset", "data"}));
           QL_ASSIGN_OR_RETURN(int64_t offset, RequiredInteger(body, "offset"));
           QL_ASSIGN_OR_RETURN(std::string encoded, api::RequiredString(body, "data"));
           std::string data;
           if (!absl::Base64Unescape(encoded, &data)) {
             return InvalidArgument("invalid_argument", "data is not valid base64");
           }
           QL_ASSIGN_OR_RETURN(LeaseLogAppend a, service.AppendLog(call, offset, data));
           SendJson(res, 200, json{{"next_offset", a.next_offset}, {"truncated", a.truncated}});
           return Status::Ok();
         });
    post("/worker/v1/leases/([^/]{1,128})/complete", "leases.complete",
         [this](const std::string& worker, const std::string& id, const json& body,
                http::Response& res) -> Status {
           QL_ASSIGN_OR_RETURN(
               LeaseCall call,
               ParseLeaseCall(worker, id, body,
                              {"session_id", "generation", "lease_token", "outcome", "exit_code",
                               "signal", "message", "log_truncated", "error_code", "pid",
                               "confinement", "descendants_ended"}));
           QL_ASSIGN_OR_RETURN(AttemptOutcome outcome, ParseOutcome(body));
           QL_ASSIGN_OR_RETURN(std::optional<int64_t> pid, api::OptionalInteger(body, "pid"));
           QL_ASSIGN_OR_RETURN(CompleteAnswer a, service.Complete(call, outcome, pid));
           SendJson(res, 200,
                    json{{"run_status", a.run_status}, {"attempt_status", a.attempt_status}});
           return Status::Ok();
         });
    // The bytes of a script version the lease's run executes (docs/worker-protocol.md "Blobs"):
    // the lease names itself in the query and the X-QL-Lease-Token header (never in the URL).
    routes.push_back(Route{
        std::regex("/worker/v1/leases/([^/]{1,128})/blobs/([^/]{1,128})"), "GET", "leases.blob",
        nullptr,
        [this](const Admitted& admitted, const http::Request& req, http::Response& res) -> Status {
          for (const auto& [name, value] : req.params) {
            if (name != "session_id" && name != "generation") {
              return InvalidArgument("unknown_field", "unknown query parameter " + name);
            }
          }
          LeaseCall call;
          call.worker_id = admitted.worker_id;
          call.offer_id = admitted.id;
          if (req.ParamCount("session_id") != 1 || req.ParamCount("generation") != 1) {
            return InvalidArgument("missing_field",
                                   "query parameters session_id and generation are required");
          }
          call.session_id = *req.Param("session_id");
          const std::string generation = *req.Param("generation");
          const auto [end, ec] = std::from_chars(
              generation.data(), generation.data() + generation.size(), call.generation);
          if (ec != std::errc() || end != generation.data() + generation.size()) {
            return InvalidArgument("invalid_argument", "generation must be an integer");
          }
          call.lease_token = req.Header("X-QL-Lease-Token");
          QL_ASSIGN_OR_RETURN(LeaseBlob blob, service.OpenLeaseBlob(call, admitted.detail));
          StreamLeaseBlob(blob, res);
          return Status::Ok();
        }});
  }

  // Answers an opened blob: its first chunk is read before the answer starts (so a blob whose
  // bytes cannot be read is an error, not a short answer), every later one in a store
  // transaction of its own as the connection takes it; none is held across a network write.
  // A chunk that fails later ends the answer early: shorter than X-QL-Size, without the digest
  // X-QL-Digest names, which the worker checks.
  void StreamLeaseBlob(const LeaseBlob& blob, http::Response& res) {
    res.status = 200;
    res.SetHeader("Content-Type", "application/octet-stream");
    res.SetHeader("X-QL-Digest", blob.blob.digest);
    res.SetHeader("X-QL-Size", std::to_string(blob.blob.size));
    res.body.clear();
    if (blob.blob.chunks.empty()) return;
    Result<std::string> first = service.ReadLeaseBlobChunk(blob, 0);
    if (!first.ok()) {
      res.headers.clear();
      SendStatus(res, first.status());
      return;
    }
    if (blob.blob.chunks.size() == 1) {
      if (Sha256Hex(*first) != blob.blob.digest) {
        res.headers.clear();
        SendStatus(res, Corrupt("artifact_corrupt",
                                "blob " + blob.blob.digest + " does not have its digest"));
        return;
      }
      res.body = std::move(first).value();
      return;
    }
    struct State {
      size_t next = 0;
      std::string first;
      Sha256Hasher whole;
    };
    auto state = std::make_shared<State>();
    state->first = std::move(first).value();
    res.stream = [this, blob, state](const std::atomic<bool>& gone) -> http::StreamStep {
      if (state->next == 0) {
        state->next = 1;
        state->whole.Update(state->first);
        return http::StreamStep{std::exchange(state->first, std::string()), true};
      }
      if (gone.load() || state->next >= blob.blob.chunks.size()) return http::StreamStep{"", false};
      Result<std::string> chunk = service.ReadLeaseBlobChunk(blob, state->next);
      if (!chunk.ok()) return http::StreamStep{"", false};
      state->whole.Update(*chunk);
      ++state->next;
      const bool last = state->next == blob.blob.chunks.size();
      if (last && state->whole.FinishHex() != blob.blob.digest) return http::StreamStep{"", false};
      return http::StreamStep{std::move(*chunk), !last};
    };
  }
};

WorkerApiServer::WorkerApiServer(WorkerService& service, Metrics& metrics,
                                 WorkerApiServerOptions options)
    : impl_(std::make_unique<Impl>(service, metrics, options)) {
  metrics.Describe("ql_worker_requests_total", "counter", "Worker protocol calls, by route.");
}

WorkerApiServer::~WorkerApiServer() { Stop(); }

Status WorkerApiServer::Start(const std::string& host, int port) {
  Impl& s = *impl_;
  if (s.server != nullptr) return Conflict("already_started", "the server was started");
  http::ServerLimits limits;
  limits.workers = s.options.threads;
  limits.max_connections = s.options.max_connections;
  limits.max_connections_per_address = s.options.max_connections;
  limits.head_timeout_ms = s.options.read_timeout_ms;
  limits.body_grace_ms = s.options.read_timeout_ms;
  limits.write_timeout_ms = s.options.write_timeout_ms;
  limits.max_body_bytes = s.options.max_body_bytes;
  http::ServerHandlers handlers;
  handlers.admit = [&s](http::Request& req, http::Response& res) { return s.Admit(req, res); };
  handlers.handle = [&s](http::Request& req, http::Response& res) { s.Serve(req, res); };
  s.Routes();
  QL_ASSIGN_OR_RETURN(s.server, http::HttpServer::Create(s.options.tls, limits, handlers));
  if (Status listening = s.server->Start(host, port); !listening.ok()) {
    s.server.reset();
    return Unavailable("listen_failed",
                       "cannot listen on " + host + ":" + std::to_string(port) + " for workers");
  }
  s.port = s.server->port();
  return Status::Ok();
}

int WorkerApiServer::port() const { return impl_->port; }

void WorkerApiServer::WithdrawAdmission() { impl_->admitting.store(false); }

void WorkerApiServer::Stop() {
  impl_->admitting.store(false);
  if (impl_->server == nullptr) return;
  impl_->server->Stop();
}

}  // namespace ql
