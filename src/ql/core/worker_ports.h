#pragma once

// The ports of remote execution (DESIGN §6, docs/worker-protocol.md): worker authentication and
// sessions (served by the worker-ingress role) and run leases (served by the runtime role).
// Every lease time is read from the store's clock, never from a node's.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ql/core/placement.h"
#include "ql/core/ports.h"
#include "ql/core/status.h"

namespace ql {

inline constexpr int kMaxOffersPerPull = 16;
inline constexpr int kMaxCapabilitiesBytes = 16 * 1024;
inline constexpr int kMaxConcurrentRunsPerSession = 1024;

struct WorkerSessionRecord {
  std::string id;
  std::string worker_id;  // the credential's id
  int64_t generation = 0;
  std::string status;  // active | draining | offline | fenced
  int max_concurrent_runs = 0;
  int available_slots = 0;
  int64_t version = 0;
  int64_t heartbeat_at_ms = 0;
  int64_t expires_at_ms = 0;
  // Where the session takes runs (placement.h): its pool and labels, as registered.
  Placement placement;
  std::string agent_version;  // what the worker said it is, at most 64 bytes
};

struct RegisterSessionCommand {
  std::string worker_id;
  std::string session_id;         // a fresh UUID chosen by the control plane
  std::string capabilities_json;  // canonical JSON object, at most kMaxCapabilitiesBytes
  int max_concurrent_runs = 1;
  int available_slots = 0;
  int64_t ttl_ms = 0;
  // Validated (ValidatePoolName, ValidatePlacementLabel). The pool is what the worker asked
  // for, empty when it named none: the session goes to its credential's pool, and asking for
  // another is PermissionDenied `pool_not_allowed`.
  Placement placement;
  std::string agent_version;
};

class WorkerSessionRepository {
 public:
  virtual ~WorkerSessionRepository() = default;
  // Returns the id of the live worker credential with this token digest; NotFound
  // `unauthorized` when there is none (unknown or revoked).
  virtual Result<std::string> AuthenticateWorker(const std::string& token_digest) = 0;
  // Creates the worker's next session (generation = previous + 1) and fences every older one,
  // in one transaction.
  virtual Result<WorkerSessionRecord> RegisterSession(const RegisterSessionCommand& command) = 0;
  // Extends a session: expiry = store clock + ttl_ms; records the free slots. NotFound
  // `session_not_found` (unknown, or another worker's), Conflict `session_fenced` (an older
  // generation or a fenced session), Conflict `session_expired` (offline: the worker must
  // register a new session). A session whose expiry passed but is not offline is extended.
  virtual Result<WorkerSessionRecord> Heartbeat(const std::string& worker_id,
                                                const std::string& session_id, int64_t generation,
                                                int available_slots, int64_t ttl_ms) = 0;
  // Moves a session to draining or offline (capacity 0); idempotent; same errors as Heartbeat
  // (offline → draining is session_expired).
  virtual Result<WorkerSessionRecord> SetSessionStatus(const std::string& worker_id,
                                                       const std::string& session_id,
                                                       int64_t generation,
                                                       const std::string& status) = 0;
};

struct OfferProposal {
  std::string offer_id;      // UUID chosen by the worker
  std::string token_digest;  // SHA-256 hex of the worker's lease token
};

struct PullCommand {
  std::string worker_id;
  std::string session_id;
  int64_t generation = 0;
  int available_slots = 0;
  std::vector<OfferProposal> offers;  // 1..kMaxOffersPerPull
  int64_t lease_ttl_ms = 0;
};

// A granted lease with everything the worker needs to run the attempt.
struct GrantedLease {
  std::string offer_id;
  std::string run_id;
  std::string attempt_id;
  int attempt = 1;
  std::string project_id;
  std::string task_id;
  int64_t task_revision = 0;
  std::string task_digest;
  std::string execution_revision_id;
  std::string plan_json;
  std::string plan_digest;
  int64_t lease_version = 0;
  int64_t lease_expires_at_ms = 0;
  int64_t run_version = 0;  // the run's version once the grant was recorded
  bool replay = false;      // the same offer returned again (the first answer was lost)
};

// What one pull changed and found, read in its transaction.
struct LeaseGrant {
  std::vector<GrantedLease> granted;
  // The session's granted leases whose run has a cancel intent (as ListCancelledOffers).
  std::vector<std::string> cancelled;
};

struct LeaseRenewal {
  int64_t lease_version = 0;
  int64_t lease_expires_at_ms = 0;
  bool cancel_requested = false;
};

struct LeaseLogAppend {
  int64_t next_offset = 0;
  bool truncated = false;  // output at or past the cap was dropped
};

// What is recorded about a lease and its attempt, for replays and late calls.
struct LeaseState {
  std::string offer_id;
  std::string run_id;
  std::string attempt_id;
  std::string worker_id;
  std::string session_id;
  int64_t generation = 0;
  std::string token_digest;
  std::string lease_status;  // granted | released | expired
  std::string attempt_status;
  std::string run_status;
  int64_t run_version = 0;
  std::optional<int> exit_code;
  bool cancel_requested = false;
};

// A remote run that has outlived its timeout by more than the grace.
struct OverdueRun {
  std::string run_id;
  std::string attempt_id;
};

class RunLeaseRepository {
 public:
  virtual ~RunLeaseRepository() = default;
  // Grants at most min(offers, available_slots, max_concurrent_runs − live leases) leases on
  // runnable runs (queued, no cancel intent, latest attempt a claimed remote_worker attempt with
  // no lease or an expired one that never started), by priority then FIFO, skipping rows other
  // transactions hold. A proposal whose offer id already names this session's granted, unstarted
  // lease with the same token digest is returned again (replay) and takes no new run. Errors:
  // session errors as in WorkerSessionRepository::Heartbeat plus Conflict `session_inactive`
  // (a draining session: the worker is stopping), Conflict `session_expired` (an offline
  // session, or one whose expiry passed by the database clock: the worker heartbeats or
  // registers a new session and keeps working), Conflict `lease_fenced` (an offer id taken by
  // another lease or token). The answer also lists the session's cancelled leases, read in the
  // same transaction.
  virtual Result<LeaseGrant> GrantLeases(const PullCommand& command) = 0;
  // Extends a lease (expiry = store clock + ttl_ms, version + 1) while its attempt has not ended.
  virtual Result<LeaseRenewal> RenewLease(const LeaseFence& fence, int64_t ttl_ms) = 0;
  // Appends output at `offset` (which must equal the bytes held: Conflict `log_offset_mismatch`
  // otherwise, unless it is the identical last chunk sent again). Bytes past `cap_bytes` are
  // dropped; the first drop records attempt.log_truncated.
  virtual Result<LeaseLogAppend> AppendLeaseLog(const LeaseFence& fence, int64_t offset,
                                                std::string_view data, int64_t cap_bytes,
                                                int64_t now_ms) = 0;
  // Returns the recorded lease of `offer_id`; NotFound `lease_not_found`.
  virtual Result<LeaseState> GetLeaseState(const std::string& offer_id) = 0;
  // Returns the offer ids of the session's granted leases whose run has a cancel intent.
  virtual Result<std::vector<std::string>> ListCancelledOffers(const std::string& worker_id,
                                                               const std::string& session_id) = 0;
  // Lists remote runs (dispatching or running) started longer ago than their plan's timeout
  // plus `grace_ms` by the store's clock, at most `limit`.
  virtual Result<std::vector<OverdueRun>> ListOverdueRuns(int64_t grace_ms, int limit) = 0;
};

}  // namespace ql
