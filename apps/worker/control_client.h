#pragma once

// Typed calls of the control plane's worker protocol (`/worker/v1`, docs/worker-protocol.md)
// over plain HTTP with a bearer token. Every call is a POST of a JSON object; errors come back as
// ql::Status values whose reason is the control plane's error code.

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ql/core/execution_plan.h"
#include "ql/core/http_endpoint.h"
#include "ql/core/status.h"
#include "ql/core/task_spec.h"
#include "ql/engine/secret_resolution.h"

namespace httplib {
class Client;
}  // namespace httplib

namespace ql::worker {

// Where the control plane's worker listener is. Only plain http: ql-worker is built without TLS.
using ControlEndpoint = HttpEndpoint;

// Parses "http://host[:port][/prefix]" or "host:port". Errors: InvalidArgument
// `invalid_control_url` naming what is wrong (https is refused: no TLS support).
Result<ControlEndpoint> ParseControlUrl(std::string_view url);

struct ControlClientOptions {
  int64_t connect_timeout_ms = 5000;
  int64_t read_timeout_ms = 30000;  // also the write timeout
  std::string user_agent = "ql-worker/0.1.0";
  ClientTls tls;  // used when the endpoint is https
};

// `POST /worker/v1/sessions`.
struct RegisterRequest {
  nlohmann::json capabilities = nlohmann::json::object();
  int max_concurrent_runs = 1;
  int available_slots = 1;
  std::string software_version;
  Placement placement;  // --pool and --label
};

struct SessionGrant {
  std::string session_id;
  int64_t generation = 0;
  std::string status;
  int64_t expires_at_ms = 0;
  int64_t session_ttl_ms = 0;
  int64_t heartbeat_interval_ms = 0;
  int64_t lease_ttl_ms = 0;
  std::string pool;  // the pool the session is in: its credential's
};

// Names the session on every later call.
struct SessionRef {
  std::string session_id;
  int64_t generation = 0;
};

struct HeartbeatAnswer {
  std::string status;
  int64_t expires_at_ms = 0;
  std::vector<std::string> cancel;  // offer ids whose run has a cancel request
};

// One (offer id, lease token) pair proposed in a pull.
struct OfferProposal {
  std::string offer_id;
  std::string lease_token;

  bool operator==(const OfferProposal&) const = default;
};

// What to run, as pinned by the control plane. `environment` holds neither QL_RUN_ID nor
// QL_ATTEMPT_ID; the worker adds them.
struct WirePlan {
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> environment;
  std::optional<std::string> working_directory;
  int64_t timeout_ms = 0;
  TaskLimits limits;
  bool network = true;
  bool unconfined = false;
  // A script command's pinned version: the worker fetches it (ControlClient::FetchBlob) and puts
  // its entry's path after the interpreter (argv[2]). Unset for other commands.
  std::optional<ScriptPin> script;
};

// One granted lease.
struct LeaseOffer {
  std::string offer_id;
  std::string run_id;
  std::string attempt_id;
  int64_t attempt = 0;
  std::string project_id;
  std::string task_id;
  int64_t task_revision = 0;
  std::string execution_revision_id;
  int64_t lease_version = 0;
  int64_t lease_expires_at_ms = 0;
  int64_t lease_ttl_ms = 0;
  // The output this attempt's log should hold, marker line included; 0 when the control plane
  // names none.
  int64_t log_cap_bytes = 0;
  WirePlan plan;
  // The sealed versions of the plan's secret variables, opened only right before spawn.
  std::vector<SealedVariable> secrets;
};

struct PullAnswer {
  std::vector<LeaseOffer> offers;
  std::vector<std::string> cancel;
};

// Names one lease on the lease calls.
struct LeaseRef {
  SessionRef session;
  std::string offer_id;
  std::string lease_token;
};

struct RenewAnswer {
  int64_t lease_version = 0;
  int64_t lease_expires_at_ms = 0;
  bool cancel_requested = false;
};

struct LogAnswer {
  int64_t next_offset = 0;
  bool truncated = false;
};

// The end of an attempt as reported by `complete`.
struct Completion {
  std::string outcome;  // exited, signaled, timed_out, cancelled, spawn_failed
  std::optional<int> exit_code;
  std::optional<int> signal;
  std::string message;
  // spawn_failed: secret_not_found, secret_unavailable or secret_corrupt when a secret could not
  // be opened, artifact_unavailable or artifact_corrupt when the script could not be fetched,
  // script_plan_invalid for a script plan without its pin, confinement_failed or
  // cgroup_setup_failed; exited or signaled:
  // memory_limit_exceeded, pids_limit_exceeded or cpu_limit_exceeded; empty otherwise.
  std::string error_code;
  // How the command was confined, in one line (empty when it never started).
  std::string confinement;
  // Processes the command left running at its end, ended with its run.
  int64_t descendants_ended = 0;
  bool log_truncated = false;
  // The command's pid when it ended before its start was reported (the control plane records
  // the start first); empty once `running` was reported.
  std::optional<int64_t> pid;
};

struct CompleteAnswer {
  std::string run_status;
  std::string attempt_status;
};

// The largest log chunk one `log` call may carry (decoded bytes).
inline constexpr size_t kMaxLogChunkBytes = 256 * 1024;

// Calls the worker protocol. Thread-safe: calls from several threads run concurrently on
// separate keep-alive connections. The token never appears in any Status.
//
// Errors of every call: Unavailable `control_unreachable` when the request could not be sent or
// its answer was not received (the call may or may not have taken effect; every call is
// idempotent, so the same call may be repeated); otherwise the control plane's error code as the
// reason, with the category by HTTP status: 400 and 401 InvalidArgument, 404 NotFound,
// 409 Conflict, 503 Unavailable, anything else Internal (`http_<status>` when the body carries
// no code). A 2xx answer that is not the documented JSON is Internal `invalid_response`.
class ControlClient {
 public:
  ControlClient(ControlEndpoint endpoint, std::string token, ControlClientOptions options = {});
  ~ControlClient();
  ControlClient(const ControlClient&) = delete;
  ControlClient& operator=(const ControlClient&) = delete;

  // Registers a new session of the credential, fencing its older ones.
  Result<SessionGrant> Register(const RegisterRequest& request);
  // Extends the session and returns the offer ids of its leases whose run must be cancelled.
  Result<HeartbeatAnswer> Heartbeat(const SessionRef& session, int available_slots);
  // Sets the session draining (no new leases; running ones continue).
  Status Drain(const SessionRef& session);
  // Sets the session offline (final).
  Status Offline(const SessionRef& session);
  // Proposes 1..16 offers and returns the granted ones.
  Result<PullAnswer> Pull(const SessionRef& session, int available_slots,
                          const std::vector<OfferProposal>& offers);
  // `starting`: returns "starting", "already_starting" or "already_running".
  Result<std::string> Starting(const LeaseRef& lease);
  // `running`: returns "running" or "already_running".
  Result<std::string> Running(const LeaseRef& lease, int64_t pid);
  Result<RenewAnswer> Renew(const LeaseRef& lease);
  // Appends `data` (at most kMaxLogChunkBytes) at byte `offset` of the attempt's output.
  Result<LogAnswer> Log(const LeaseRef& lease, int64_t offset, std::string_view data);
  Result<CompleteAnswer> Complete(const LeaseRef& lease, const Completion& completion);
  // `GET /worker/v1/leases/{offer}/blobs/{digest}`: streams a blob the lease's run needs to
  // `sink` as it arrives (the control plane renews the lease as `renew` does). The caller checks
  // the digest of what it received; an answer shorter or longer than its X-QL-Size is Unavailable
  // `blob_truncated`. Errors of the sink end the transfer and are returned as they are.
  Status FetchBlob(const LeaseRef& lease, const std::string& digest,
                   const std::function<Status(std::string_view bytes)>& sink);

  const ControlEndpoint& endpoint() const { return endpoint_; }

 private:
  // POSTs `body` to `path` and returns the JSON object of a 2xx answer.
  Result<nlohmann::json> Post(const std::string& path, const nlohmann::json& body);
  std::unique_ptr<httplib::Client> Acquire();
  void Release(std::unique_ptr<httplib::Client> client);

  ControlEndpoint endpoint_;
  std::string token_;
  ControlClientOptions options_;
  std::mutex mu_;
  std::vector<std::unique_ptr<httplib::Client>> idle_;  // guarded by mu_
};

// Returns true for 401 `unauthorized`: the token is wrong or revoked.
bool IsUnauthorized(const Status& status);
// Returns true when the session can no longer act: `session_fenced` or `session_not_found`.
bool IsSessionLost(const Status& status);
// Returns true for `session_expired`: the session expired or is offline; the worker extends it
// by a heartbeat or registers a new one, and keeps working.
bool IsSessionExpired(const Status& status);
// Returns true when a lease call says the lease is gone for this worker: `lease_fenced`,
// `lease_expired`, `lease_not_found` or `attempt_finished`.
bool IsLeaseLost(const Status& status);

}  // namespace ql::worker
