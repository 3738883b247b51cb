#pragma once

// The control plane's side of the worker protocol (docs/worker-protocol.md, DESIGN §6):
// authentication, sessions, pulls that grant fenced run leases, and the lease calls that carry
// an attempt from claimed to its end. Every state change goes through the run repository with
// the lease fence attached, so a fenced session, a wrong token or an expired lease changes
// nothing. Transport-neutral: the HTTP layer parses requests into these calls.

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ql/core/approval_ports.h"
#include "ql/core/artifact_store.h"
#include "ql/core/clock.h"
#include "ql/core/event_log.h"
#include "ql/core/execution_plan.h"
#include "ql/core/governance.h"
#include "ql/core/log_source.h"
#include "ql/core/ports.h"
#include "ql/core/status.h"
#include "ql/core/worker_ports.h"
#include "ql/engine/attempt_runner.h"
#include "ql/engine/metrics.h"
#include "ql/engine/run_settlement.h"
#include "ql/engine/secret_resolution.h"

namespace ql {

struct WorkerServiceOptions {
  int64_t session_ttl_ms = 30'000;
  int64_t heartbeat_interval_ms = 5'000;
  int64_t lease_ttl_ms = 30'000;
  // Bytes of one remote attempt's log the control plane stores; chunks past it are dropped.
  int64_t log_cap_bytes = 8 * 1024 * 1024;
  // Bytes of all of a run's attempts' logs: each offer carries the cap its attempt should keep
  // (AttemptLogCap over the logs of the run's earlier attempts). 0 means no run cap.
  int64_t run_log_cap_bytes = 32 * 1024 * 1024;
  // Measures the stored logs of a run's earlier attempts for the offers' caps; without it every
  // offer carries log_cap_bytes. Must outlive the service.
  const LogSource* logs = nullptr;
  // Looks up the sealed versions of a plan's secrets for its lease (secret_resolution.h); must
  // outlive the service. Without it a plan that names a secret fails with secret_unavailable.
  SecretRepository* secrets = nullptr;
  // Resolves approved runs in recovery_required from their lost attempt's late report (automatic
  // evidence resolution); must outlive the service. Without it such a report is refused as late.
  ApprovalRepository* approvals = nullptr;
  // Give each offer's command the variables of run_environment.h (TZ, LANG, QL_TASK_NAME,
  // QL_PROJECT, QL_SCHEDULED_FOR); must outlive the service. Without `definitions` offers carry
  // only the task's environment.
  DefinitionRepository* definitions = nullptr;
  ProjectRepository* projects = nullptr;
  // A verified worker token is trusted this long (monotonic clock) before it is looked up
  // again, so a revoked credential is refused by every replica within this bound; unknown
  // tokens are never remembered. 0 looks every call up.
  int64_t auth_cache_ms = kAuthCacheMs;
  // The daemon log: how remote runs end (RunSettlement). Must outlive the service; null: none.
  EventLog* event_log = nullptr;
  // Serves the script versions leased runs execute (OpenLeaseBlob), read through the run's
  // project; `definitions` names each run's pinned plan. Must outlive the service. Without
  // either, every blob a worker asks for is artifact_not_found.
  ArtifactRepository* artifacts = nullptr;
};

// Returns ok when the options are within bounds (ttl 1..600 s, heartbeat < session ttl, log cap
// 1 KiB..1 GiB, run log cap 0 or 1 KiB..64 GiB); InvalidArgument `invalid_worker_options`
// naming the option otherwise.
Status ValidateWorkerServiceOptions(const WorkerServiceOptions& options);

// Which lease a call is about, as the worker presents it.
struct LeaseCall {
  std::string worker_id;  // from authentication
  std::string offer_id;
  std::string session_id;
  int64_t generation = 0;
  std::string lease_token;
};

struct OfferToken {
  std::string offer_id;
  std::string lease_token;
};

struct WorkerOffer {
  GrantedLease lease;
  ExecutionPlan plan;
  // The sealed versions of the plan's secret variables; only the worker opens them.
  std::vector<SealedVariable> secrets;
  // The output this attempt should keep in its log, marker line included (see
  // WorkerServiceOptions::run_log_cap_bytes).
  int64_t log_cap_bytes = 0;
};

struct PullAnswer {
  std::vector<WorkerOffer> offers;
  std::vector<std::string> cancel;  // offer ids whose runs have a cancel request
};

struct HeartbeatAnswer {
  WorkerSessionRecord session;
  std::vector<std::string> cancel;
};

struct CompleteAnswer {
  std::string run_status;
  std::string attempt_status;
};

// A blob a lease's run needs, opened for its holder (WorkerService::OpenLeaseBlob).
struct LeaseBlob {
  std::string project_id;  // the run's project: every chunk is read through its holding
  BlobDescriptor blob;
};

// Longest decoded log chunk one call may carry.
inline constexpr int64_t kMaxWorkerLogChunkBytes = 256 * 1024;

class WorkerService {
 public:
  WorkerService(WorkerSessionRepository& sessions, RunLeaseRepository& leases, RunRepository& runs,
                Clock& clock, RandomSource& random, Metrics& metrics,
                WorkerServiceOptions options = {});

  const WorkerServiceOptions& options() const { return options_; }

  // Returns the worker id of a bearer token (remembered for options().auth_cache_ms);
  // NotFound `unauthorized` otherwise. Thread-safe.
  Result<std::string> Authenticate(std::string_view token);

  // `placement` is the pool the worker asks for (empty: its credential's; another than its
  // credential's is PermissionDenied `pool_not_allowed`) and the labels it offers (validated by
  // the caller's parser); `agent_version` is cut to 64 bytes.
  Result<WorkerSessionRecord> Register(const std::string& worker_id,
                                       const nlohmann::json& capabilities, int max_concurrent_runs,
                                       int available_slots, const Placement& placement = {},
                                       std::string_view agent_version = {});
  Result<HeartbeatAnswer> Heartbeat(const std::string& worker_id, const std::string& session_id,
                                    int64_t generation, int available_slots);
  Result<WorkerSessionRecord> SetStatus(const std::string& worker_id, const std::string& session_id,
                                        int64_t generation, const std::string& status);
  // Grants queued runs to the session's offers, up to `available_slots`. While granting is off
  // (SetGranting(false): the replica is not ready), it grants no new lease; an offer that already
  // names a lease (the replay of a lost answer) is still answered.
  Result<PullAnswer> Pull(const std::string& worker_id, const std::string& session_id,
                          int64_t generation, int available_slots,
                          const std::vector<OfferToken>& offers);
  // Not ready means no writes (ADR-0037): the replica turns granting off while its readiness
  // audit fails; lease steps, logs and results of runs already granted go on. Thread-safe.
  void SetGranting(bool granting) { granting_.store(granting); }

  // Each returns "starting" / "running", or "already_starting" / "already_running" on a replay.
  Result<std::string> Starting(const LeaseCall& call);
  Result<std::string> Running(const LeaseCall& call, int64_t pid);
  Result<LeaseRenewal> Renew(const LeaseCall& call);
  Result<LeaseLogAppend> AppendLog(const LeaseCall& call, int64_t offset, std::string_view data);
  // `outcome.kind` must not be kLost (a worker that lost its process says nothing). The holder's
  // report of an attempt the control plane already declared lost is refused as late, except for
  // an approved run waiting in recovery_required: the report is evidence of how the command
  // ended, and resolves the run (exit 0: succeeded, anything else: failed) unless a human
  // resolved it first.
  // `started_pid`: the command ran as this process and ended before its start was reported;
  // an attempt still `starting` goes through `running` first (one call, as `running` then
  // `complete` would). Ignored when the start was reported already; refused with a
  // spawn_failed outcome (a command that could not start has no pid).
  Result<CompleteAnswer> Complete(const LeaseCall& call, const AttemptOutcome& outcome,
                                  std::optional<int64_t> started_pid = std::nullopt);

  // Opens blob `digest` for the holder of `call`'s lease (`GET .../blobs/{digest}`). The lease is
  // fenced as `Renew` fences it — current, this session's and token's, not expired by the
  // database clock, its attempt not ended — and renewed as `Renew` renews it (the holder is
  // working on it), with Renew's errors. The digest must be one the lease's run needs: its pinned
  // script's digest (a file's blob, a tree's manifest) or, for a tree, a file its manifest lists.
  // Anything else (a plan without a script, another script's or project's blob, a blob the run's
  // project no longer holds) is NotFound `artifact_not_found`, the same whether or not the
  // digest exists elsewhere; a malformed digest is InvalidArgument `artifact_digest_invalid`.
  Result<LeaseBlob> OpenLeaseBlob(const LeaseCall& call, const std::string& digest);
  // Returns chunk `index` of an opened blob, verified, in a store transaction of its own through
  // the run's project (ArtifactRepository::ReadBlobChunk, with its errors).
  Result<std::string> ReadLeaseBlobChunk(const LeaseBlob& blob, size_t index);

 private:
  Result<LeaseFence> Fence(const LeaseCall& call) const;
  // Returns the log cap of the attempt `lease` offers: the per-attempt cap, lowered by the
  // per-run cap after the stored logs of the run's earlier attempts (one that cannot be
  // measured counts as a full attempt cap).
  int64_t LogCapOf(const GrantedLease& lease);
  // Applies one lease-fenced step; on a broken fence records a late call when the attempt has
  // ended, and returns the fence error.
  Status Refused(const LeaseCall& call, std::string_view step, const Status& error);
  Result<std::string> Step(const LeaseCall& call, bool to_running, int64_t pid);

  // What this replica last knew of a lease it granted or moved: enough to build the next step's
  // transition without reading the lease first. Never trusted: every transition built from it
  // carries the lease fence and the run version it names, so a hint that is no longer current
  // (a cancel, a step taken through another replica) changes nothing, and the call then goes
  // the way it goes on a replica without a hint: read the lease, decide, write.
  struct LeaseHint {
    std::string worker_id;
    std::string session_id;
    int64_t generation = 0;
    std::string token_digest;
    std::string run_id;
    std::string attempt_id;
    int attempt = 1;
    std::string attempt_status;   // as the hint's step left it: claimed, starting or running
    int64_t run_version = 0;      // the run's version as the hint's step left it
    std::optional<RunRecord> run;  // the whole run, once a step of this replica returned it
    int64_t noted_monotonic_ms = 0;
  };
  // Returns the hint of `call`'s lease when it names the caller's own session and token.
  std::optional<LeaseHint> HintFor(const LeaseCall& call, const LeaseFence& fence);
  void NoteHint(const std::string& offer_id, LeaseHint hint);
  void ForgetHint(const std::string& offer_id);
  // The step of `call` decided on its hint; nullopt when there is none or it was stale.
  std::optional<std::string> StepFromHint(const LeaseCall& call, const LeaseFence& fence,
                                          bool to_running, int64_t pid);
  // The end of `call`'s attempt recorded on its hint; nullopt when there is none or it was stale.
  std::optional<CompleteAnswer> CompleteFromHint(const LeaseCall& call, const LeaseFence& fence,
                                                 const AttemptOutcome& outcome,
                                                 std::optional<int64_t> started_pid);
  // Looks up the plan's secrets for a lease (errors of LookUpSecrets, or secret_unavailable
  // without a secret store).
  Result<std::vector<SealedVariable>> SealedSecretsOf(const std::string& project_id,
                                                      const ExecutionPlan& plan);
  // The file digests a tree's manifest lists, read through `project_id`.
  Result<std::shared_ptr<const std::set<std::string>>> TreeFiles(const std::string& project_id,
                                                                 const std::string& manifest);

  WorkerSessionRepository& sessions_;
  RunLeaseRepository& leases_;
  RunRepository& runs_;
  Clock& clock_;
  RandomSource& random_;
  Metrics& metrics_;
  WorkerServiceOptions options_;
  RunSettlement settlement_;

  struct TrustedToken {
    std::string worker_id;
    int64_t until_monotonic_ms = 0;
  };
  static constexpr size_t kMaxTrustedTokens = 1024;
  std::mutex auth_mu_;
  std::map<std::string, TrustedToken> trusted_;  // by token digest; guarded by auth_mu_

  static constexpr size_t kMaxLeaseHints = 4096;
  std::atomic<bool> granting_{true};
  std::mutex hints_mu_;
  std::unordered_map<std::string, LeaseHint> hints_;  // by offer id; guarded by hints_mu_

  // Decoded manifests by their digest: a manifest is content-addressed and verified when read, so
  // what it lists never changes (each read of a file still goes through the run's project).
  static constexpr size_t kMaxTreeManifests = 16;
  std::mutex trees_mu_;
  std::map<std::string, std::shared_ptr<const std::set<std::string>>> trees_;  // trees_mu_
};

}  // namespace ql
