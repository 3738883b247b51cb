#include "control_client.h"

#include <absl/strings/escaping.h>
#include <httplib.h>

#include <cctype>
#include <charconv>
#include <exception>
#include <stdexcept>

#include "ql/core/http_endpoint.h"
#include "ql/core/ids.h"

namespace ql::worker {
namespace {

using nlohmann::json;

constexpr size_t kMaxErrorSnippet = 200;
constexpr size_t kMaxIdleConnections = 8;

Status FromHttpStatus(int http_status, std::string reason, std::string message) {
  switch (http_status) {
    case 400:
    case 401:
      return InvalidArgument(std::move(reason), std::move(message));
    case 403:  // e.g. pool_not_allowed: asking again changes nothing
      return PermissionDenied(std::move(reason), std::move(message));
    case 404:
      return NotFound(std::move(reason), std::move(message));
    case 409:
      return Conflict(std::move(reason), std::move(message));
    case 503:
      return Unavailable(std::move(reason), std::move(message));
    default:
      return Internal(std::move(reason), std::move(message));
  }
}

// Returns the error a non-2xx answer stands for: {"code", "message"} (the API's error shape)
// becomes reason=code; any other body becomes `http_<status>` with the start of the body.
Status ErrorFromAnswer(int http_status, const std::string& body) {
  const json parsed = json::parse(body, nullptr, false);
  if (parsed.is_object() && parsed.contains("code") && parsed["code"].is_string()) {
    std::string message = parsed.contains("message") && parsed["message"].is_string()
                              ? parsed["message"].get<std::string>()
                              : "";
    if (message.empty()) message = "the control plane answered HTTP " + std::to_string(http_status);
    return FromHttpStatus(http_status, parsed["code"].get<std::string>(), std::move(message));
  }
  std::string snippet = body.substr(0, kMaxErrorSnippet);
  while (!snippet.empty() && (snippet.back() == '\n' || snippet.back() == '\r')) {
    snippet.pop_back();
  }
  std::string message = "the control plane answered HTTP " + std::to_string(http_status);
  if (!snippet.empty()) message += ": " + snippet;
  return FromHttpStatus(http_status, "http_" + std::to_string(http_status), std::move(message));
}

Status InvalidResponse(const std::string& what, const std::string& why) {
  return Internal("invalid_response", "the control plane's answer to " + what + " " + why);
}

// Decoders throw nlohmann::json::exception on a missing field or a wrong type; Decode turns
// that into invalid_response.
template <typename T, typename F>
Result<T> Decode(const std::string& what, F&& decode) {
  try {
    return decode();
  } catch (const json::exception& e) {
    return InvalidResponse(what, std::string("is not the expected JSON: ") + e.what());
  } catch (const std::invalid_argument& e) {
    return InvalidResponse(what, std::string("holds an invalid value: ") + e.what());
  }
}

std::optional<std::string> OptionalString(const json& object, const char* key) {
  if (!object.contains(key) || object[key].is_null()) return std::nullopt;
  return object.at(key).get<std::string>();
}

std::vector<std::string> StringList(const json& object, const char* key) {
  std::vector<std::string> out;
  if (!object.contains(key) || object[key].is_null()) return out;
  for (const json& item : object.at(key)) out.push_back(item.get<std::string>());
  return out;
}

json SessionBody(const SessionRef& session) {
  return json{{"session_id", session.session_id}, {"generation", session.generation}};
}

json LeaseBody(const LeaseRef& lease) {
  json body = SessionBody(lease.session);
  body["lease_token"] = lease.lease_token;
  return body;
}

std::string SessionPath(const SessionRef& session, std::string_view step) {
  return "/worker/v1/sessions/" + session.session_id + "/" + std::string(step);
}

std::string LeasePath(const LeaseRef& lease, std::string_view step) {
  return "/worker/v1/leases/" + lease.offer_id + "/" + std::string(step);
}

LeaseOffer DecodeOffer(const json& o) {
  LeaseOffer offer;
  offer.offer_id = o.at("offer_id").get<std::string>();
  offer.run_id = o.at("run_id").get<std::string>();
  offer.attempt_id = o.at("attempt_id").get<std::string>();
  offer.attempt = o.value("attempt", int64_t{0});
  offer.project_id = o.value("project_id", std::string());
  offer.task_id = o.value("task_id", std::string());
  offer.task_revision = o.value("task_revision", int64_t{0});
  offer.execution_revision_id = o.value("execution_revision_id", std::string());
  offer.lease_version = o.value("lease_version", int64_t{0});
  offer.lease_expires_at_ms = o.value("lease_expires_at_ms", int64_t{0});
  offer.lease_ttl_ms = o.value("lease_ttl_ms", int64_t{0});
  offer.log_cap_bytes = o.value("log_cap_bytes", int64_t{0});
  const json& plan = o.at("plan");
  offer.plan.argv = plan.at("argv").get<std::vector<std::string>>();
  if (plan.contains("environment") && !plan["environment"].is_null()) {
    for (const auto& [key, value] : plan.at("environment").items()) {
      offer.plan.environment.emplace_back(key, value.get<std::string>());
    }
  }
  offer.plan.working_directory = OptionalString(plan, "working_directory");
  if (plan.contains("timeout_ms") && !plan["timeout_ms"].is_null()) {
    offer.plan.timeout_ms = plan.at("timeout_ms").get<int64_t>();
  }
  if (plan.contains("limits") && !plan["limits"].is_null()) {
    Result<TaskLimits> limits = ParseTaskLimits(plan.at("limits"), "plan.limits");
    if (!limits.ok()) throw std::invalid_argument(limits.status().message());
    offer.plan.limits = *limits;
  }
  if (plan.contains("script") && !plan["script"].is_null()) {
    const json& script = plan.at("script");
    offer.plan.script =
        ScriptPin{script.at("name").get<std::string>(), script.at("version").get<int64_t>(),
                  script.at("digest").get<std::string>(), script.at("kind").get<std::string>(),
                  script.at("entry").get<std::string>()};
  }
  offer.plan.network = plan.value("network", std::string("host")) != "none";
  offer.plan.unconfined = plan.value("isolation", std::string("confined")) == "none";
  for (const json& s : o.value("secrets", json::array())) {
    offer.secrets.push_back(SealedVariable{
        s.at("variable").get<std::string>(),
        SecretRef{s.at("project_id").get<std::string>(), s.at("name").get<std::string>(),
                  s.at("version").get<int64_t>()},
        SealedSecretValue{s.at("key_id").get<std::string>(), s.at("wrapped_key").get<std::string>(),
                          s.at("sealed_value").get<std::string>()}});
  }
  return offer;
}

}  // namespace

Result<ControlEndpoint> ParseControlUrl(std::string_view url) {
  Result<HttpEndpoint> parsed = ParseHttpEndpoint(url, "--token-file");
  if (!parsed.ok()) {
    return InvalidArgument("invalid_control_url",
                           "control plane address '" + std::string(url) +
                               "' is not valid: " + parsed.status().message());
  }
  return std::move(parsed).value();
}

ControlClient::ControlClient(ControlEndpoint endpoint, std::string token,
                             ControlClientOptions options)
    : endpoint_(std::move(endpoint)), token_(std::move(token)), options_(std::move(options)) {}

ControlClient::~ControlClient() = default;

std::unique_ptr<httplib::Client> ControlClient::Acquire() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      std::unique_ptr<httplib::Client> client = std::move(idle_.back());
      idle_.pop_back();
      return client;
    }
  }
  auto client = std::make_unique<httplib::Client>(
      endpoint_.SchemeHostPort(), options_.tls.cert_file, options_.tls.key_file);
#ifdef CPPHTTPLIB_OPENSSL_SUPPORT
  if (endpoint_.tls) {
    client->enable_server_certificate_verification(true);
    if (!options_.tls.ca_file.empty()) client->set_ca_cert_path(options_.tls.ca_file.c_str());
  }
#endif
  const auto seconds = [](int64_t ms) { return static_cast<time_t>(ms / 1000); };
  const auto micros = [](int64_t ms) { return static_cast<time_t>((ms % 1000) * 1000); };
  client->set_connection_timeout(seconds(options_.connect_timeout_ms),
                                 micros(options_.connect_timeout_ms));
  client->set_read_timeout(seconds(options_.read_timeout_ms), micros(options_.read_timeout_ms));
  client->set_write_timeout(seconds(options_.read_timeout_ms), micros(options_.read_timeout_ms));
  client->set_keep_alive(true);
  // A request goes out as two writes (head, then body): with Nagle's algorithm the body would
  // wait for the acknowledgement of the head, which the control plane delays by up to 40 ms.
  client->set_tcp_nodelay(true);
  client->set_bearer_token_auth(token_);
  client->set_default_headers(
      {{"User-Agent", options_.user_agent}, {"Accept", "application/json"}});
  return client;
}

void ControlClient::Release(std::unique_ptr<httplib::Client> client) {
  std::lock_guard<std::mutex> lock(mu_);
  if (idle_.size() < kMaxIdleConnections) idle_.push_back(std::move(client));
}

Result<json> ControlClient::Post(const std::string& path, const json& body) {
  std::unique_ptr<httplib::Client> client = Acquire();
  httplib::Result result =
      client->Post(endpoint_.base_path + path, body.dump(), "application/json");
  if (!result) {
    // The connection is in an unknown state; it is dropped rather than pooled.
    return Unavailable("control_unreachable", "no answer from the control plane at " +
                                                  endpoint_.url + " to " + path + ": " +
                                                  httplib::to_string(result.error()));
  }
  const int http_status = result->status;
  std::string answer = std::move(result->body);
  Release(std::move(client));
  if (http_status < 200 || http_status > 299) return ErrorFromAnswer(http_status, answer);
  json parsed = json::parse(answer, nullptr, false);
  if (!parsed.is_object()) return InvalidResponse(path, "is not a JSON object");
  return parsed;
}

Result<SessionGrant> ControlClient::Register(const RegisterRequest& request) {
  const std::string path = "/worker/v1/sessions";
  json body{{"capabilities", request.capabilities},
            {"max_concurrent_runs", request.max_concurrent_runs},
            {"available_slots", request.available_slots},
            {"software_version", request.software_version},
            {"labels", request.placement.labels}};
  // Without one the control plane registers the session in its credential's pool.
  if (!request.placement.pool.empty()) body["pool"] = request.placement.pool;
  QL_ASSIGN_OR_RETURN(json answer, Post(path, body));
  QL_ASSIGN_OR_RETURN(SessionGrant grant, Decode<SessionGrant>(path, [&] {
                        SessionGrant g;
                        g.session_id = answer.at("session_id").get<std::string>();
                        g.generation = answer.at("generation").get<int64_t>();
                        g.status = answer.value("status", std::string());
                        g.expires_at_ms = answer.value("expires_at_ms", int64_t{0});
                        g.session_ttl_ms = answer.value("session_ttl_ms", int64_t{0});
                        g.heartbeat_interval_ms = answer.at("heartbeat_interval_ms").get<int64_t>();
                        g.lease_ttl_ms = answer.at("lease_ttl_ms").get<int64_t>();
                        g.pool = answer.value("pool", std::string());
                        return g;
                      }));
  if (!IsCanonicalUuid(grant.session_id)) {
    return InvalidResponse(path, "has a session_id that is not a UUID");
  }
  if (grant.heartbeat_interval_ms <= 0 || grant.lease_ttl_ms <= 0) {
    return InvalidResponse(path, "has a non-positive heartbeat interval or lease TTL");
  }
  return grant;
}

Result<HeartbeatAnswer> ControlClient::Heartbeat(const SessionRef& session, int available_slots) {
  const std::string path = SessionPath(session, "heartbeat");
  json body{{"generation", session.generation}, {"available_slots", available_slots}};
  QL_ASSIGN_OR_RETURN(json answer, Post(path, body));
  return Decode<HeartbeatAnswer>(path, [&] {
    HeartbeatAnswer a;
    a.status = answer.value("status", std::string());
    a.expires_at_ms = answer.value("expires_at_ms", int64_t{0});
    a.cancel = StringList(answer, "cancel");
    return a;
  });
}

Status ControlClient::Drain(const SessionRef& session) {
  return Post(SessionPath(session, "drain"), json{{"generation", session.generation}}).status();
}

Status ControlClient::Offline(const SessionRef& session) {
  return Post(SessionPath(session, "offline"), json{{"generation", session.generation}}).status();
}

Result<PullAnswer> ControlClient::Pull(const SessionRef& session, int available_slots,
                                       const std::vector<OfferProposal>& offers) {
  const std::string path = "/worker/v1/pull";
  json body = SessionBody(session);
  body["available_slots"] = available_slots;
  json proposals = json::array();
  for (const OfferProposal& offer : offers) {
    proposals.push_back({{"offer_id", offer.offer_id}, {"lease_token", offer.lease_token}});
  }
  body["offers"] = std::move(proposals);
  QL_ASSIGN_OR_RETURN(json answer, Post(path, body));
  return Decode<PullAnswer>(path, [&] {
    PullAnswer a;
    if (answer.contains("offers") && !answer["offers"].is_null()) {
      for (const json& o : answer.at("offers")) a.offers.push_back(DecodeOffer(o));
    }
    a.cancel = StringList(answer, "cancel");
    return a;
  });
}

Result<std::string> ControlClient::Starting(const LeaseRef& lease) {
  const std::string path = LeasePath(lease, "starting");
  QL_ASSIGN_OR_RETURN(json answer, Post(path, LeaseBody(lease)));
  return Decode<std::string>(path, [&] { return answer.at("status").get<std::string>(); });
}

Result<std::string> ControlClient::Running(const LeaseRef& lease, int64_t pid) {
  const std::string path = LeasePath(lease, "running");
  json body = LeaseBody(lease);
  body["pid"] = pid;
  QL_ASSIGN_OR_RETURN(json answer, Post(path, body));
  return Decode<std::string>(path, [&] { return answer.at("status").get<std::string>(); });
}

Result<RenewAnswer> ControlClient::Renew(const LeaseRef& lease) {
  const std::string path = LeasePath(lease, "renew");
  QL_ASSIGN_OR_RETURN(json answer, Post(path, LeaseBody(lease)));
  return Decode<RenewAnswer>(path, [&] {
    RenewAnswer a;
    a.lease_version = answer.value("lease_version", int64_t{0});
    a.lease_expires_at_ms = answer.value("lease_expires_at_ms", int64_t{0});
    a.cancel_requested = answer.value("cancel_requested", false);
    return a;
  });
}

Result<LogAnswer> ControlClient::Log(const LeaseRef& lease, int64_t offset, std::string_view data) {
  if (data.size() > kMaxLogChunkBytes) {
    return InvalidArgument("log_chunk_too_large", "a log chunk holds at most " +
                                                      std::to_string(kMaxLogChunkBytes) +
                                                      " bytes, got " + std::to_string(data.size()));
  }
  const std::string path = LeasePath(lease, "log");
  json body = LeaseBody(lease);
  body["offset"] = offset;
  // absl::string_view is not std::string_view in every absl build.
  body["data"] = absl::Base64Escape(absl::string_view(data.data(), data.size()));
  QL_ASSIGN_OR_RETURN(json answer, Post(path, body));
  return Decode<LogAnswer>(path, [&] {
    LogAnswer a;
    a.next_offset = answer.at("next_offset").get<int64_t>();
    a.truncated = answer.value("truncated", false);
    return a;
  });
}

Result<CompleteAnswer> ControlClient::Complete(const LeaseRef& lease,
                                               const Completion& completion) {
  const std::string path = LeasePath(lease, "complete");
  json body = LeaseBody(lease);
  body["outcome"] = completion.outcome;
  // Absent values are left out: the control plane reads a present null as a wrong type.
  if (completion.exit_code) body["exit_code"] = *completion.exit_code;
  if (completion.signal) body["signal"] = *completion.signal;
  // The control plane keeps at most 1024 bytes of message; cut on a character boundary.
  std::string message = completion.message;
  if (message.size() > 1024) {
    size_t cut = 1024;
    while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80) --cut;
    message.resize(cut);
  }
  body["message"] = message;
  if (!completion.error_code.empty()) body["error_code"] = completion.error_code;
  if (!completion.confinement.empty()) body["confinement"] = completion.confinement;
  if (completion.descendants_ended > 0) body["descendants_ended"] = completion.descendants_ended;
  body["log_truncated"] = completion.log_truncated;
  if (completion.pid) body["pid"] = *completion.pid;
  QL_ASSIGN_OR_RETURN(json answer, Post(path, body));
  return Decode<CompleteAnswer>(path, [&] {
    CompleteAnswer a;
    a.run_status = answer.value("run_status", std::string());
    a.attempt_status = answer.value("attempt_status", std::string());
    return a;
  });
}

Status ControlClient::FetchBlob(const LeaseRef& lease, const std::string& digest,
                                const std::function<Status(std::string_view bytes)>& sink) {
  const std::string path = LeasePath(lease, "blobs/" + digest);
  // The token goes in a header, never in the URL.
  const std::string target = endpoint_.base_path + path +
                             "?session_id=" + lease.session.session_id +
                             "&generation=" + std::to_string(lease.session.generation);
  int http_status = 0;
  std::optional<int64_t> size;
  int64_t received = 0;
  std::string error_body;
  Status sunk = Status::Ok();
  std::unique_ptr<httplib::Client> client = Acquire();
  httplib::Result result = client->Get(
      target, httplib::Headers{{"X-QL-Lease-Token", lease.lease_token}},
      [&](const httplib::Response& response) {
        http_status = response.status;
        const std::string declared = response.get_header_value("X-QL-Size");
        int64_t value = 0;
        const auto [end, ec] =
            std::from_chars(declared.data(), declared.data() + declared.size(), value);
        if (ec == std::errc() && end == declared.data() + declared.size() && value >= 0) {
          size = value;
        }
        return true;
      },
      [&](const char* data, size_t length) {
        if (http_status < 200 || http_status > 299) {
          if (error_body.size() < 64 * 1024) error_body.append(data, length);
          return true;
        }
        received += static_cast<int64_t>(length);
        sunk = sink(std::string_view(data, length));
        return sunk.ok();
      });
  if (!sunk.ok()) return sunk;  // the connection is dropped, not pooled
  if (!result) {
    return Unavailable("control_unreachable", "no answer from the control plane at " +
                                                  endpoint_.url + " to " + path + ": " +
                                                  httplib::to_string(result.error()));
  }
  Release(std::move(client));
  if (http_status < 200 || http_status > 299) return ErrorFromAnswer(http_status, error_body);
  if (!size.has_value() || *size != received) {
    return Unavailable("blob_truncated", "the control plane's answer to " + path + " held " +
                                             std::to_string(received) + " bytes, not the " +
                                             (size ? std::to_string(*size) : "unnamed") +
                                             " it announced");
  }
  return Status::Ok();
}

bool IsUnauthorized(const Status& status) { return status.reason() == "unauthorized"; }

bool IsSessionLost(const Status& status) {
  return status.reason() == "session_fenced" || status.reason() == "session_not_found";
}

bool IsSessionExpired(const Status& status) { return status.reason() == "session_expired"; }

bool IsLeaseLost(const Status& status) {
  return status.reason() == "lease_fenced" || status.reason() == "lease_expired" ||
         status.reason() == "lease_not_found" || status.reason() == "attempt_finished";
}

}  // namespace ql::worker
