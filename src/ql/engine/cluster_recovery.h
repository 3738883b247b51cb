#pragma once

// The bounded recovery cycle of a cluster replica: at startup (it must converge before the
// replica admits anything) and then periodically. It settles abandoned remote work — a run
// whose worker lease expired by the database clock becomes lost and goes through its retry
// policy — requeues due retries, and never touches a pristine admission or a live lease.

#include <cstdint>
#include <string>

#include "ql/core/clock.h"
#include "ql/core/ports.h"
#include "ql/core/status.h"
#include "ql/core/worker_ports.h"
#include "ql/engine/metrics.h"
#include "ql/engine/run_settlement.h"

namespace ql {

struct RecoveryReport {
  int candidates = 0;
  int live = 0;        // a worker still holds a live lease: left alone
  int lost = 0;        // started work whose lease expired: made lost, then settled
  int settled = 0;     // lost runs moved on (retry_wait, failed or cancelled)
  int redispatch = 0;  // queued, never started, lease expired: the next pull may grant it
  int stuck = 0;       // drifted in a way no rule settles: left alone, reported
  int requeued = 0;    // retry_wait → queued with attempt N+1
  int timed_out = 0;   // remote runs ended by the control plane past timeout + grace
  int errors = 0;
  Status first_error;
};

class ClusterRecovery {
 public:
  // With `log`, runs it settles are daemon log lines (RunSettlement) and so is each cycle that
  // found lost, timed out or stuck runs (`recovery.round`). `log` must outlive this object.
  ClusterRecovery(ClusterRecoveryRepository& candidates, RunRepository& runs, Clock& clock,
                  RandomSource& random, Metrics& metrics, EventLog* log = nullptr);

  // Examines every candidate (in pages of `page`) once and requeues due retries. Errors on one
  // run are counted and the cycle goes on; a failed listing is returned.
  // `scope` says which runs the cycle lists (startup: kAll; periodic cycles: kBeyondQueue).
  Result<RecoveryReport> RunOnce(int page = 256, RecoveryScope scope = RecoveryScope::kAll);

  // From now on each cycle also ends remote runs still running longer than their plan's
  // timeout plus `grace_ms` (database clock) as timed_out, whatever their worker reports; the
  // worker learns it on its next lease call. `leases` must outlive this object.
  void EnforceTimeouts(RunLeaseRepository& leases, int64_t grace_ms);

 private:
  Status Settle(const RecoveryCandidate& c, RecoveryReport& report);

  ClusterRecoveryRepository& candidates_;
  RunRepository& runs_;
  Metrics& metrics_;
  EventLog* log_;
  RunSettlement settlement_;
  RunLeaseRepository* leases_ = nullptr;
  int64_t timeout_grace_ms_ = 0;
};

}  // namespace ql
