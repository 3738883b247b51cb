#include "ql/engine/worker_service.h"

#include <algorithm>
#include <utility>

#include "ql/core/artifact.h"
#include "ql/core/canonical_json.h"
#include "ql/core/digest.h"
#include "ql/core/ids.h"
#include "ql/core/states.h"
#include "ql/core/task_spec.h"
#include "ql/engine/run_environment.h"

namespace ql {
namespace {

std::string Name(RunStatus s) { return std::string(RunStatusName(s)); }
std::string Name(AttemptStatus s) { return std::string(AttemptStatusName(s)); }

// The largest tree manifest read for a lease (as ScriptCache reads: a tree of kMaxTreeEntries
// long paths).
constexpr size_t kMaxManifestBytes = size_t{16} << 20;

// The one answer to a blob a lease may not read: never whether the digest exists elsewhere.
Status BlobNotFound(const std::string& digest) {
  return NotFound("artifact_not_found", "blob " + digest + " is not part of this lease's run");
}

bool IsLowerHex(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

Status ValidateLeaseToken(std::string_view token) {
  if (token.size() < 64 || token.size() > 128 || !IsLowerHex(token)) {
    return InvalidArgument("invalid_lease_token",
                           "lease_token must be 64 to 128 lowercase hex digits (at least 256 "
                           "random bits)");
  }
  return Status::Ok();
}

// The claimed attempt to starting and its run to dispatching, as of `run_version`.
RunTransitionCommand StartingTransition(const std::string& run_id, int64_t run_version,
                                        const std::string& attempt_id, int64_t now_ms) {
  RunTransitionCommand t;
  t.run_id = run_id;
  t.expected_version = run_version;
  t.attempt_id = attempt_id;
  t.now_ms = now_ms;
  t.run_to = Name(RunStatus::kDispatching);
  t.expected_attempt_status = Name(AttemptStatus::kClaimed);
  t.attempt_to = Name(AttemptStatus::kStarting);
  t.events = {MakeRunEvent(std::string(kEventRunDispatching), "worker", attempt_id),
              MakeRunEvent(AttemptEventType(AttemptStatus::kStarting), "worker", attempt_id)};
  return t;
}

Status ValidateSession(const std::string& session_id, int64_t generation) {
  QL_RETURN_IF_ERROR(ValidateId("session_id", session_id));
  if (generation < 1) {
    return InvalidArgument("invalid_argument", "generation must be a positive integer");
  }
  return Status::Ok();
}

Status ValidateSlots(int max_concurrent_runs, int available_slots) {
  if (max_concurrent_runs < 1 || max_concurrent_runs > kMaxConcurrentRunsPerSession) {
    return InvalidArgument("invalid_argument", "max_concurrent_runs must be 1.." +
                                                   std::to_string(kMaxConcurrentRunsPerSession));
  }
  if (available_slots < 0 || available_slots > max_concurrent_runs) {
    return InvalidArgument("invalid_argument", "available_slots must be 0..max_concurrent_runs (" +
                                                   std::to_string(max_concurrent_runs) + ")");
  }
  return Status::Ok();
}

// Says how a reported attempt ended, for the reason of an evidence resolution.
std::string DescribeOutcome(const AttemptOutcome& outcome) {
  switch (outcome.kind) {
    case AttemptOutcome::Kind::kExited:
      return "exit code " + std::to_string(outcome.exit_code);
    case AttemptOutcome::Kind::kSignaled:
      return "signal " + std::to_string(outcome.signal);
    case AttemptOutcome::Kind::kTimedOut:
      return "a timeout";
    case AttemptOutcome::Kind::kCancelled:
      return "a cancellation";
    case AttemptOutcome::Kind::kSpawnFailed:
      return "a failed start";
    case AttemptOutcome::Kind::kLost:
      break;
  }
  return "a lost process";
}

}  // namespace

Status ValidateWorkerServiceOptions(const WorkerServiceOptions& o) {
  auto bad = [](const std::string& what) {
    return InvalidArgument("invalid_worker_options", what);
  };
  if (o.session_ttl_ms < 1000 || o.session_ttl_ms > 600'000) {
    return bad("session ttl must be 1000..600000 ms");
  }
  if (o.lease_ttl_ms < 1000 || o.lease_ttl_ms > 600'000) {
    return bad("lease ttl must be 1000..600000 ms");
  }
  if (o.heartbeat_interval_ms < 100 || o.heartbeat_interval_ms >= o.session_ttl_ms) {
    return bad("heartbeat interval must be at least 100 ms and shorter than the session ttl");
  }
  if (o.log_cap_bytes < 1024 || o.log_cap_bytes > (int64_t{1} << 30)) {
    return bad("worker log cap must be 1 KiB..1 GiB");
  }
  if (o.auth_cache_ms < 0 || o.auth_cache_ms > 60'000) {
    return bad("worker token cache must be 0..60000 ms");
  }
  if (o.run_log_cap_bytes != 0 &&
      (o.run_log_cap_bytes < 1024 || o.run_log_cap_bytes > (int64_t{1} << 36))) {
    return bad("worker run log cap must be 0 (none) or 1 KiB..64 GiB");
  }
  return Status::Ok();
}

WorkerService::WorkerService(WorkerSessionRepository& sessions, RunLeaseRepository& leases,
                             RunRepository& runs, Clock& clock, RandomSource& random,
                             Metrics& metrics, WorkerServiceOptions options)
    : sessions_(sessions),
      leases_(leases),
      runs_(runs),
      clock_(clock),
      random_(random),
      metrics_(metrics),
      options_(options),
      settlement_(runs, clock, random, metrics, "worker", options_.event_log) {
  metrics_.Describe("ql_worker_leases_granted_total", "counter", "Run leases granted to workers.");
  metrics_.Describe("ql_worker_evidence_resolutions_total", "counter",
                    "Approved runs in recovery_required resolved by their lost attempt's late "
                    "report.");
  metrics_.Describe("ql_worker_calls_refused_total", "counter",
                    "Worker lease calls refused by the fence, by reason.");
  metrics_.Describe("ql_worker_blobs_served_total", "counter",
                    "Blobs of script versions opened for the workers whose runs need them.");
  metrics_.Describe("ql_worker_lease_hints_total", "counter",
                    "Lease steps decided on what this replica knew of the lease (used) or read "
                    "again because that was no longer current (stale).");
}

Result<std::string> WorkerService::Authenticate(std::string_view token) {
  if (token.empty() || token.size() > 512) {
    return NotFound("unauthorized", "a worker token is required");
  }
  const std::string digest = Sha256Hex(token);
  if (options_.auth_cache_ms > 0) {
    std::lock_guard<std::mutex> lock(auth_mu_);
    auto it = trusted_.find(digest);
    if (it != trusted_.end() && it->second.until_monotonic_ms > clock_.MonotonicMs()) {
      return it->second.worker_id;
    }
  }
  const int64_t looked_up_at = clock_.MonotonicMs();
  QL_ASSIGN_OR_RETURN(std::string worker_id, sessions_.AuthenticateWorker(digest));
  if (options_.auth_cache_ms > 0) {
    std::lock_guard<std::mutex> lock(auth_mu_);
    if (trusted_.size() >= kMaxTrustedTokens) {
      std::erase_if(trusted_, [&](const auto& entry) {
        return entry.second.until_monotonic_ms <= looked_up_at;
      });
      if (trusted_.size() >= kMaxTrustedTokens) trusted_.clear();
    }
    trusted_[digest] = TrustedToken{worker_id, looked_up_at + options_.auth_cache_ms};
  }
  return worker_id;
}

Result<WorkerSessionRecord> WorkerService::Register(const std::string& worker_id,
                                                    const nlohmann::json& capabilities,
                                                    int max_concurrent_runs, int available_slots,
                                                    const Placement& placement,
                                                    std::string_view agent_version) {
  if (!capabilities.is_object()) {
    return InvalidArgument("invalid_argument", "capabilities must be a JSON object");
  }
  QL_RETURN_IF_ERROR(ValidateSlots(max_concurrent_runs, available_slots));
  QL_ASSIGN_OR_RETURN(std::string canonical, CanonicalJson(capabilities));
  if (canonical.size() > static_cast<size_t>(kMaxCapabilitiesBytes)) {
    return InvalidArgument("invalid_argument", "capabilities exceed 16 KiB");
  }
  RegisterSessionCommand c;
  c.worker_id = worker_id;
  c.session_id = NewUuidV7(clock_.NowMs(), random_);
  c.capabilities_json = std::move(canonical);
  c.max_concurrent_runs = max_concurrent_runs;
  c.available_slots = available_slots;
  c.ttl_ms = options_.session_ttl_ms;
  if (!placement.pool.empty()) {
    QL_RETURN_IF_ERROR(ValidatePoolName("invalid_argument", "pool", placement.pool));
  }
  for (const auto& [key, value] : placement.labels) {
    QL_RETURN_IF_ERROR(ValidatePlacementLabel("invalid_argument", "labels", key, value));
  }
  c.placement = placement;
  c.agent_version = std::string(agent_version.substr(0, 64));
  return sessions_.RegisterSession(c);
}

Result<HeartbeatAnswer> WorkerService::Heartbeat(const std::string& worker_id,
                                                 const std::string& session_id, int64_t generation,
                                                 int available_slots) {
  QL_RETURN_IF_ERROR(ValidateSession(session_id, generation));
  if (available_slots < 0 || available_slots > kMaxConcurrentRunsPerSession) {
    return InvalidArgument("invalid_argument", "available_slots must be 0..1024");
  }
  HeartbeatAnswer out;
  QL_ASSIGN_OR_RETURN(out.session, sessions_.Heartbeat(worker_id, session_id, generation,
                                                       available_slots, options_.session_ttl_ms));
  QL_ASSIGN_OR_RETURN(out.cancel, leases_.ListCancelledOffers(worker_id, session_id));
  return out;
}

Result<WorkerSessionRecord> WorkerService::SetStatus(const std::string& worker_id,
                                                     const std::string& session_id,
                                                     int64_t generation,
                                                     const std::string& status) {
  QL_RETURN_IF_ERROR(ValidateSession(session_id, generation));
  return sessions_.SetSessionStatus(worker_id, session_id, generation, status);
}

Result<std::vector<SealedVariable>> WorkerService::SealedSecretsOf(
    const std::string& project_id, const ExecutionPlan& plan) {
  if (options_.secrets != nullptr) {
    return LookUpSecrets(*options_.secrets, project_id, plan.environment);
  }
  QL_ASSIGN_OR_RETURN(auto refs, SecretEnvironment(plan.environment));
  if (refs.empty()) return std::vector<SealedVariable>();
  return Unavailable("secret_unavailable", "variable " + refs.front().first +
                                               " names a secret, and this control plane has "
                                               "no secret store");
}

Result<PullAnswer> WorkerService::Pull(const std::string& worker_id, const std::string& session_id,
                                       int64_t generation, int available_slots,
                                       const std::vector<OfferToken>& offers) {
  QL_RETURN_IF_ERROR(ValidateSession(session_id, generation));
  if (offers.empty() || offers.size() > static_cast<size_t>(kMaxOffersPerPull)) {
    return InvalidArgument(
        "invalid_argument",
        "offers must hold 1.." + std::to_string(kMaxOffersPerPull) + " proposals");
  }
  if (available_slots < 0 || available_slots > kMaxConcurrentRunsPerSession) {
    return InvalidArgument("invalid_argument", "available_slots must be 0..1024");
  }
  PullCommand c;
  c.worker_id = worker_id;
  c.session_id = session_id;
  c.generation = generation;
  // Not ready: replays only (no slot for a fresh offer).
  c.available_slots = granting_.load() ? available_slots : 0;
  c.lease_ttl_ms = options_.lease_ttl_ms;
  for (const OfferToken& o : offers) {
    QL_RETURN_IF_ERROR(ValidateId("offer_id", o.offer_id));
    QL_RETURN_IF_ERROR(ValidateLeaseToken(o.lease_token));
    for (const OfferProposal& seen : c.offers) {
      if (seen.offer_id == o.offer_id) {
        return InvalidArgument("invalid_argument", "offer id " + o.offer_id + " is repeated");
      }
    }
    c.offers.push_back({o.offer_id, Sha256Hex(o.lease_token)});
  }
  QL_ASSIGN_OR_RETURN(LeaseGrant grant, leases_.GrantLeases(c));
  std::vector<GrantedLease>& granted = grant.granted;
  for (const GrantedLease& g : granted) {
    auto proposal = std::find_if(c.offers.begin(), c.offers.end(),
                                 [&](const OfferProposal& p) { return p.offer_id == g.offer_id; });
    if (proposal == c.offers.end()) continue;
    LeaseHint hint;
    hint.worker_id = worker_id;
    hint.session_id = session_id;
    hint.generation = generation;
    hint.token_digest = proposal->token_digest;
    hint.run_id = g.run_id;
    hint.attempt_id = g.attempt_id;
    hint.attempt = g.attempt;
    hint.attempt_status = Name(AttemptStatus::kClaimed);
    hint.run_version = g.run_version;
    NoteHint(g.offer_id, std::move(hint));
  }
  PullAnswer out;
  for (GrantedLease& g : granted) {
    // Only the pinned plan may run; it is re-verified against its digest before it leaves.
    Result<ExecutionPlan> plan = [&]() -> Result<ExecutionPlan> {
      QL_ASSIGN_OR_RETURN(nlohmann::json json, ParseJsonStrict(g.plan_json));
      QL_ASSIGN_OR_RETURN(ExecutionPlan p, PlanFromJson(json));
      QL_RETURN_IF_ERROR(VerifyPlanDigest(p, g.plan_digest));
      if (p.task_digest != g.task_digest) {
        return Corrupt("digest_mismatch", "execution plan does not belong to the run's task");
      }
      return p;
    }();
    const std::string token = std::find_if(offers.begin(), offers.end(), [&](const OfferToken& o) {
                                return o.offer_id == g.offer_id;
                              })->lease_token;
    LeaseCall call{worker_id, g.offer_id, session_id, generation, token};
    // The sealed secrets travel in the lease; a missing one fails the run before it leaves.
    Result<std::vector<SealedVariable>> sealed = std::vector<SealedVariable>();
    if (plan.ok()) sealed = SealedSecretsOf(g.project_id, *plan);
    // A store that could not be read fails the pull; the worker's retry replays the offer.
    if (!sealed.ok() && !IsSecretRunError(sealed.status().reason())) return sealed.status();
    if (!plan.ok() || !sealed.ok()) {
      // The run cannot be executed by anyone: it fails here, under the lease just granted.
      Result<std::string> started = Starting(call);
      if (started.ok()) {
        AttemptOutcome failed;
        failed.kind = AttemptOutcome::Kind::kSpawnFailed;
        if (!plan.ok()) {
          failed.message = "execution revision is unusable: " + plan.status().message();
        } else {
          failed.error_code = sealed.status().reason();
          failed.message = sealed.status().message();
        }
        (void)Complete(call, failed);
      }
      continue;
    }
    if (options_.definitions != nullptr) {
      // What the command is told about its run; a store that cannot be read fails the pull,
      // and the worker's retry replays the offer.
      QL_ASSIGN_OR_RETURN(RunRecord run, runs_.GetRun(g.run_id));
      QL_ASSIGN_OR_RETURN(
          EnvironmentList context,
          RunContextEnvironment(*options_.definitions, options_.projects, run, plan->environment));
      for (auto& variable : context) plan->environment.push_back(std::move(variable));
    }
    if (!g.replay) metrics_.Increment("ql_worker_leases_granted_total");
    const int64_t log_cap = LogCapOf(g);
    out.offers.push_back(
        {std::move(g), std::move(plan).value(), std::move(sealed).value(), log_cap});
  }
  out.cancel = std::move(grant.cancelled);
  return out;
}

int64_t WorkerService::LogCapOf(const GrantedLease& lease) {
  if (options_.logs == nullptr || options_.run_log_cap_bytes <= 0 || lease.attempt <= 1) {
    return options_.log_cap_bytes;
  }
  Result<std::vector<AttemptRecord>> attempts = runs_.ListAttempts(lease.run_id);
  int64_t used = 0;
  if (!attempts.ok()) {
    used = options_.log_cap_bytes * (lease.attempt - 1);  // as if each had filled its cap
  } else {
    for (const AttemptRecord& a : *attempts) {
      if (a.attempt >= lease.attempt) continue;
      Result<int64_t> size = options_.logs->LogSize(a);
      used += size.ok() ? *size : options_.log_cap_bytes;
    }
  }
  return AttemptLogCap(options_.log_cap_bytes, options_.run_log_cap_bytes, used);
}

Result<LeaseFence> WorkerService::Fence(const LeaseCall& call) const {
  QL_RETURN_IF_ERROR(ValidateId("offer_id", call.offer_id));
  QL_RETURN_IF_ERROR(ValidateSession(call.session_id, call.generation));
  QL_RETURN_IF_ERROR(ValidateLeaseToken(call.lease_token));
  return LeaseFence{call.worker_id, call.offer_id, call.session_id, call.generation,
                    Sha256Hex(call.lease_token)};
}

Status WorkerService::Refused(const LeaseCall& call, std::string_view step, const Status& error) {
  metrics_.Increment("ql_worker_calls_refused_total", "reason=\"" + error.reason() + "\"");
  if (error.reason() == "attempt_finished") {
    // Recorded once per lease and step; the call changes nothing else.
    Result<LeaseState> state = leases_.GetLeaseState(call.offer_id);
    if (state.ok()) {
      NewEvent late =
          MakeRunEvent(std::string(kEventAttemptLateCallbackIgnored), "worker", state->attempt_id,
                       {{"offer_id", call.offer_id}, {"call", std::string(step)}});
      late.dedupe_key = "late:" + call.offer_id + ":" + std::string(step);
      (void)runs_.AppendEvent(state->run_id, late, clock_.NowMs());
    }
  }
  return error;
}

std::optional<WorkerService::LeaseHint> WorkerService::HintFor(const LeaseCall& call,
                                                               const LeaseFence& fence) {
  std::lock_guard<std::mutex> lock(hints_mu_);
  auto it = hints_.find(call.offer_id);
  if (it == hints_.end()) return std::nullopt;
  const LeaseHint& hint = it->second;
  if (clock_.MonotonicMs() - hint.noted_monotonic_ms > options_.lease_ttl_ms) {
    hints_.erase(it);  // the lease has expired or been renewed since: read it
    return std::nullopt;
  }
  if (hint.worker_id != call.worker_id || hint.session_id != call.session_id ||
      hint.generation != call.generation ||
      !ConstantTimeEquals(hint.token_digest, fence.token_digest)) {
    return std::nullopt;
  }
  return hint;
}

void WorkerService::NoteHint(const std::string& offer_id, LeaseHint hint) {
  hint.noted_monotonic_ms = clock_.MonotonicMs();
  std::lock_guard<std::mutex> lock(hints_mu_);
  if (hints_.size() >= kMaxLeaseHints && hints_.find(offer_id) == hints_.end()) {
    std::erase_if(hints_, [&](const auto& entry) {
      return hint.noted_monotonic_ms - entry.second.noted_monotonic_ms > options_.lease_ttl_ms;
    });
    if (hints_.size() >= kMaxLeaseHints) hints_.clear();
  }
  hints_[offer_id] = std::move(hint);
}

void WorkerService::ForgetHint(const std::string& offer_id) {
  std::lock_guard<std::mutex> lock(hints_mu_);
  hints_.erase(offer_id);
}

std::optional<std::string> WorkerService::StepFromHint(const LeaseCall& call,
                                                       const LeaseFence& fence, bool to_running,
                                                       int64_t pid) {
  std::optional<LeaseHint> hint = HintFor(call, fence);
  if (!hint) return std::nullopt;
  const int64_t now = clock_.NowMs();
  RunTransitionCommand t;
  if (!to_running) {
    if (hint->attempt_status != Name(AttemptStatus::kClaimed)) return std::nullopt;
    t = StartingTransition(hint->run_id, hint->run_version, hint->attempt_id, now);
  } else {
    if (pid < 1 || hint->attempt_status != Name(AttemptStatus::kStarting)) return std::nullopt;
    t = RunningTransition(hint->run_id, hint->run_version, hint->attempt_id, pid, "worker", now);
  }
  t.lease = fence;
  Result<RunRecord> applied = runs_.ApplyTransition(t);
  if (!applied.ok()) {
    metrics_.Increment("ql_worker_lease_hints_total", R"(result="stale")");
    return std::nullopt;
  }
  metrics_.Increment("ql_worker_lease_hints_total", R"(result="used")");
  metrics_.Increment("ql_run_transitions_total",
                     to_running ? R"(to="running")" : R"(to="dispatching")");
  hint->attempt_status = Name(to_running ? AttemptStatus::kRunning : AttemptStatus::kStarting);
  hint->run_version = applied->version;
  hint->run = std::move(applied).value();
  NoteHint(call.offer_id, std::move(*hint));
  return std::string(to_running ? "running" : "starting");
}

std::optional<CompleteAnswer> WorkerService::CompleteFromHint(const LeaseCall& call,
                                                              const LeaseFence& fence,
                                                              const AttemptOutcome& outcome,
                                                              std::optional<int64_t> started_pid) {
  std::optional<LeaseHint> hint = HintFor(call, fence);
  if (!hint || !hint->run.has_value()) return std::nullopt;
  if (hint->attempt_status != Name(AttemptStatus::kStarting) &&
      hint->attempt_status != Name(AttemptStatus::kRunning)) {
    return std::nullopt;
  }
  AttemptRecord attempt;
  attempt.id = hint->attempt_id;
  attempt.run_id = hint->run_id;
  attempt.attempt = hint->attempt;
  attempt.status = hint->attempt_status;
  FinishRecord recorded;
  Status st = settlement_.FinishFrom(*hint->run, {attempt}, hint->attempt_id, outcome, &fence,
                                     &recorded, started_pid);
  if (!st.ok() || recorded.run_status.empty()) {
    metrics_.Increment("ql_worker_lease_hints_total", R"(result="stale")");
    return std::nullopt;
  }
  metrics_.Increment("ql_worker_lease_hints_total", R"(result="used")");
  ForgetHint(call.offer_id);
  return CompleteAnswer{recorded.run_status, recorded.attempt_status};
}

Result<std::string> WorkerService::Step(const LeaseCall& call, bool to_running, int64_t pid) {
  QL_ASSIGN_OR_RETURN(LeaseFence fence, Fence(call));
  if (std::optional<std::string> stepped = StepFromHint(call, fence, to_running, pid)) {
    return *stepped;
  }
  const std::string_view step = to_running ? "running" : "starting";
  for (int tries = 0; tries < 3; ++tries) {
    Result<LeaseState> state = leases_.GetLeaseState(call.offer_id);
    if (!state.ok()) return state.status();
    if (state->worker_id != call.worker_id) {
      return NotFound("lease_not_found", "no lease has offer id " + call.offer_id);
    }
    const std::optional<AttemptStatus> attempt = ParseAttemptStatus(state->attempt_status);
    if (!attempt) return Corrupt("status_invalid", "attempt has an unknown status");
    const bool same_holder = state->session_id == call.session_id &&
                             state->generation == call.generation &&
                             ConstantTimeEquals(state->token_digest, fence.token_digest);
    if (same_holder && state->lease_status == "granted") {
      if (*attempt == AttemptStatus::kRunning) return std::string("already_running");
      if (*attempt == AttemptStatus::kStarting && !to_running) {
        return std::string("already_starting");
      }
    }
    const int64_t now = clock_.NowMs();
    // The lease state was read with the run's version, so the transition below holds only if
    // nothing changed the run since.
    if (to_running && pid < 1) {
      return InvalidArgument("invalid_argument", "pid must be a positive integer");
    }
    RunTransitionCommand t =
        to_running ? RunningTransition(state->run_id, state->run_version, state->attempt_id, pid,
                                       "worker", now)
                   : StartingTransition(state->run_id, state->run_version, state->attempt_id, now);
    t.lease = fence;
    Result<RunRecord> applied = runs_.ApplyTransition(t);
    if (applied.ok()) {
      metrics_.Increment("ql_run_transitions_total",
                         to_running ? R"(to="running")" : R"(to="dispatching")");
      return std::string(step);
    }
    const Status& st = applied.status();
    if (IsLeaseFenceError(st)) return Refused(call, step, st);
    if (st.reason() == "cancel_requested" || st.reason() == "run_terminal") {
      return Refused(
          call, step,
          Conflict("attempt_finished", "run " + state->run_id + " was cancelled or ended"));
    }
    if (st.reason() == "version_conflict" || st.reason() == "attempt_status_conflict") {
      continue;  // moved on meanwhile: read again (a replay is answered above)
    }
    if (st.reason() == kReasonIllegalTransition) {
      return Refused(call, step,
                     Conflict("attempt_finished",
                              "attempt " + state->attempt_id + " is " + state->attempt_status));
    }
    return st;
  }
  return Conflict("lease_busy", "the run of lease " + call.offer_id + " kept changing");
}

Result<std::string> WorkerService::Starting(const LeaseCall& call) { return Step(call, false, 0); }

Result<std::string> WorkerService::Running(const LeaseCall& call, int64_t pid) {
  return Step(call, true, pid);
}

Result<LeaseRenewal> WorkerService::Renew(const LeaseCall& call) {
  QL_ASSIGN_OR_RETURN(LeaseFence fence, Fence(call));
  Result<LeaseRenewal> r = leases_.RenewLease(fence, options_.lease_ttl_ms);
  if (!r.ok() && IsLeaseFenceError(r.status())) return Refused(call, "renew", r.status());
  return r;
}

Result<LeaseLogAppend> WorkerService::AppendLog(const LeaseCall& call, int64_t offset,
                                                std::string_view data) {
  QL_ASSIGN_OR_RETURN(LeaseFence fence, Fence(call));
  if (offset < 0) return InvalidArgument("invalid_argument", "offset must not be negative");
  if (data.empty() || static_cast<int64_t>(data.size()) > kMaxWorkerLogChunkBytes) {
    return InvalidArgument("invalid_argument", "a log chunk holds 1 to 262144 bytes");
  }
  Result<LeaseLogAppend> r =
      leases_.AppendLeaseLog(fence, offset, data, options_.log_cap_bytes, clock_.NowMs());
  if (!r.ok() && IsLeaseFenceError(r.status())) return Refused(call, "log", r.status());
  return r;
}

Result<CompleteAnswer> WorkerService::Complete(const LeaseCall& call,
                                               const AttemptOutcome& outcome,
                                               std::optional<int64_t> started_pid) {
  QL_ASSIGN_OR_RETURN(LeaseFence fence, Fence(call));
  if (outcome.kind == AttemptOutcome::Kind::kLost) {
    return InvalidArgument("invalid_argument", "a worker reports an outcome, never lost");
  }
  if (started_pid.has_value() &&
      (*started_pid < 1 || outcome.kind == AttemptOutcome::Kind::kSpawnFailed)) {
    return InvalidArgument("invalid_argument",
                           "pid must be a positive integer, and only with an outcome of a "
                           "command that started");
  }
  if (std::optional<CompleteAnswer> done = CompleteFromHint(call, fence, outcome, started_pid)) {
    return *done;
  }
  ForgetHint(call.offer_id);
  QL_ASSIGN_OR_RETURN(LeaseState state, leases_.GetLeaseState(call.offer_id));
  if (state.worker_id != call.worker_id) {
    return NotFound("lease_not_found", "no lease has offer id " + call.offer_id);
  }
  const bool same_holder = state.session_id == call.session_id &&
                           state.generation == call.generation &&
                           ConstantTimeEquals(state.token_digest, fence.token_digest);
  if (!same_holder) {
    return Refused(call, "complete",
                   Conflict("lease_fenced",
                            "lease " + call.offer_id + " is held by another session or token"));
  }
  // Finish leaves an attempt that already ended as it is; otherwise its transition holds only
  // under the fence. A command that ended before its start was reported is recorded running
  // first, in the same transaction.
  FinishRecord recorded;
  Status st = settlement_.Finish(state.run_id, state.attempt_id, outcome, &fence, &recorded,
                                 started_pid);
  if (!st.ok()) {
    if (IsLeaseFenceError(st)) return Refused(call, "complete", st);
    return st;
  }
  if (!recorded.run_status.empty()) {
    return CompleteAnswer{recorded.run_status, recorded.attempt_status};
  }
  // Finished earlier by this very holder (a repeated complete): answer the record.
  QL_ASSIGN_OR_RETURN(LeaseState after, leases_.GetLeaseState(call.offer_id));
  const std::optional<AttemptStatus> attempt = ParseAttemptStatus(after.attempt_status);
  if (!attempt || !IsTerminal(*attempt)) {
    return Refused(call, "complete", Conflict("attempt_finished", "the attempt did not end"));
  }
  if (*attempt == AttemptStatus::kLost) {
    // A worker never reports a loss: the control plane declared this attempt lost after its
    // lease expired. For an approved run waiting in recovery_required the holder's report is
    // evidence of the outcome nobody knew; anything else is too late to change the run.
    if (options_.approvals != nullptr &&
        after.run_status == RunStatusName(RunStatus::kRecoveryRequired)) {
      EvidenceResolutionCommand evidence;
      evidence.run_id = state.run_id;
      evidence.attempt_id = state.attempt_id;
      evidence.succeeded = outcome.kind == AttemptOutcome::Kind::kExited && outcome.exit_code == 0;
      evidence.evidence = "worker " + call.worker_id + " reported " + DescribeOutcome(outcome) +
                          " after its lease ended";
      evidence.now_ms = clock_.NowMs();
      Result<ResolveRunResult> resolved = options_.approvals->ResolveFromEvidence(evidence);
      if (resolved.ok() && !resolved->replayed) {
        metrics_.Increment("ql_worker_evidence_resolutions_total");
        return CompleteAnswer{resolved->run.status, after.attempt_status};
      }
      // A human resolved it first, or the run moved on: the report is late after all.
      if (!resolved.ok() && resolved.status().reason() != "run_not_recovery_required" &&
          resolved.status().reason() != "evidence_attempt_mismatch") {
        return resolved.status();
      }
    }
    return Refused(call, "complete",
                   Conflict("attempt_finished",
                            "the attempt was declared lost; its late result "
                            "is ignored"));
  }
  return CompleteAnswer{after.run_status, after.attempt_status};
}

Result<std::shared_ptr<const std::set<std::string>>> WorkerService::TreeFiles(
    const std::string& project_id, const std::string& manifest) {
  {
    std::lock_guard<std::mutex> lock(trees_mu_);
    auto it = trees_.find(manifest);
    if (it != trees_.end()) return it->second;
  }
  std::string bytes;
  QL_RETURN_IF_ERROR(
      options_.artifacts->ReadBlob(project_id, manifest, [&](std::string_view chunk) -> Status {
        if (bytes.size() + chunk.size() > kMaxManifestBytes) {
          return Corrupt("artifact_tree_invalid",
                         "the manifest of tree " + manifest + " is larger than a manifest can be");
        }
        bytes.append(chunk);
        return Status::Ok();
      }));
  QL_ASSIGN_OR_RETURN(std::vector<TreeEntry> entries, DecodeTreeManifest(bytes));
  auto files = std::make_shared<std::set<std::string>>();
  for (const TreeEntry& e : entries) files->insert(e.digest);
  std::lock_guard<std::mutex> lock(trees_mu_);
  if (trees_.size() >= kMaxTreeManifests) trees_.clear();
  trees_[manifest] = files;
  return std::shared_ptr<const std::set<std::string>>(std::move(files));
}

Result<LeaseBlob> WorkerService::OpenLeaseBlob(const LeaseCall& call, const std::string& digest) {
  QL_ASSIGN_OR_RETURN(LeaseFence fence, Fence(call));
  QL_RETURN_IF_ERROR(ValidateArtifactDigest(digest));
  QL_ASSIGN_OR_RETURN(LeaseState state, leases_.GetLeaseState(call.offer_id));
  if (state.worker_id != call.worker_id) {
    return NotFound("lease_not_found", "no lease has offer id " + call.offer_id);
  }
  // The whole fence in one store transaction, as every other lease call has it.
  if (Result<LeaseRenewal> renewed = leases_.RenewLease(fence, options_.lease_ttl_ms);
      !renewed.ok()) {
    if (IsLeaseFenceError(renewed.status())) return Refused(call, "blob", renewed.status());
    return renewed.status();
  }
  if (options_.artifacts == nullptr || options_.definitions == nullptr) {
    return BlobNotFound(digest);
  }
  // What the run needs is named by its pinned plan, re-verified against its digest.
  QL_ASSIGN_OR_RETURN(RunRecord run, runs_.GetRun(state.run_id));
  QL_ASSIGN_OR_RETURN(ExecutionRevisionRecord execution,
                      options_.definitions->GetExecutionRevision(run.execution_revision_id));
  QL_ASSIGN_OR_RETURN(nlohmann::json plan_json, ParseJsonStrict(execution.plan_json));
  QL_ASSIGN_OR_RETURN(ExecutionPlan plan, PlanFromJson(plan_json));
  QL_RETURN_IF_ERROR(VerifyPlanDigest(plan, execution.plan_digest));
  if (!plan.script) return BlobNotFound(digest);
  const ScriptPin& pin = *plan.script;
  bool needed = digest == pin.digest;
  if (!needed && pin.kind == kScriptKindTree) {
    Result<std::shared_ptr<const std::set<std::string>>> files =
        TreeFiles(run.project_id, pin.digest);
    if (!files.ok()) {
      // The manifest is gone from the project: so is every file it could have named.
      if (files.status().code() == StatusCode::kNotFound) return BlobNotFound(digest);
      return files.status();
    }
    needed = (*files)->count(digest) > 0;
  }
  if (!needed) return BlobNotFound(digest);
  Result<BlobDescriptor> blob = options_.artifacts->StatBlob(run.project_id, digest);
  if (!blob.ok()) {
    if (blob.status().code() == StatusCode::kNotFound) return BlobNotFound(digest);
    return blob.status();
  }
  metrics_.Increment("ql_worker_blobs_served_total");
  return LeaseBlob{run.project_id, std::move(blob).value()};
}

Result<std::string> WorkerService::ReadLeaseBlobChunk(const LeaseBlob& blob, size_t index) {
  if (options_.artifacts == nullptr) return BlobNotFound(blob.blob.digest);
  return options_.artifacts->ReadBlobChunk(blob.project_id, blob.blob, index);
}

}  // namespace ql
