#pragma once

// The cluster coordinator of DESIGN §5.2 as a step function: every replica runs one, with no
// leader. A round claims a bounded batch of due schedule rows (a short row lease taken by the
// database clock), decides each outside any transaction with the shared decision function
// using the claim's acquisition time as "now", and commits each decision under the full claim
// fence. The composition root calls RunRound() from one thread (rounds never overlap) and
// sleeps NextDelayMs() between rounds.

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "ql/core/clock.h"
#include "ql/core/misfire.h"
#include "ql/core/ports.h"
#include "ql/core/status.h"
#include "ql/engine/diagnostics.h"
#include "ql/engine/metrics.h"
#include "ql/engine/schedule_decider.h"

namespace ql {

struct ClusterSchedulerOptions {
  std::string owner;          // unique per process, 1..128 bytes
  int claims_per_round = 16;  // 1..256
  // While rounds come back full (a burst), each next round claims twice as many rows, up to
  // this many (claims_per_round..256); the first round that is not full goes back to
  // claims_per_round. 0 = no growth.
  int max_claims_per_round = 0;
  int64_t lease_ms = 30'000;  // 1 s .. 60 s
  int64_t cadence_ms = 1000;  // longest idle sleep, 100 ms .. 60 s
  int64_t grace_ms = 30'000;  // misfire grace, at most 5 min
  std::string executor_type = "remote_worker";
};

class ClusterScheduler {
 public:
  ClusterScheduler(ClusterScheduleRepository& schedules, DefinitionRepository& definitions,
                   RandomSource& random, Metrics& metrics, ClusterSchedulerOptions options);

  // InvalidArgument `invalid_scheduler_option` naming the bound that does not hold.
  static Status ValidateOptions(const ClusterSchedulerOptions& options);

  // Claims one batch, decides every row and commits the decisions together in one transaction
  // (rows that raced are left out; if the transaction itself fails, each decision is committed
  // on its own). A decision that fails (corrupt definition, storage error) is counted and its
  // claim simply expires; the other claims of the round still commit. Whole-transaction
  // reruns, reruns that ran out and batches committed one by one are counted and reported as
  // one diagnostic line. A failed claim statement is returned. Rounds never overlap: a call
  // while another round of this scheduler runs is Busy `round_in_progress` and does nothing.
  Result<RoundReport> RunRound();

  // 0 when the batch came back full or a row is still due; otherwise the time until the
  // earliest cursor by the database clock, at most the cadence.
  Result<int64_t> NextDelayMs(const RoundReport& report);

  // Called after each round that admitted runs (to nudge a dispatcher).
  void SetOnAdmitted(std::function<void()> on_admitted) { on_admitted_ = std::move(on_admitted); }

  // Receives the slow-path line of a round (component "scheduler").
  void SetDiagnostics(DiagnosticLog diagnostics) { diagnostics_ = std::move(diagnostics); }

  const ClusterSchedulerOptions& options() const { return options_; }

  // Makes the round in progress stop before its next commit (its remaining claims expire and
  // are taken over); later rounds claim nothing. Safe from any thread.
  void RequestStop() { stopping_ = true; }

 private:
  void Account(const ClaimDecision& decision, misfire::Decision::Kind kind, AdvanceOutcome outcome,
               RoundReport& report);
  void Fail(const Status& status, RoundReport& report);
  Result<RoundReport> Round();
  // Counts and reports the round's whole-transaction reruns and one-by-one fallback.
  void ReportSlowPath(size_t decisions, const Status& batch_failure, RoundReport& report);

  ClusterScheduleRepository& schedules_;
  RandomSource& random_;
  Metrics& metrics_;
  ClusterSchedulerOptions options_;
  ScheduleDecider decider_;
  std::function<void()> on_admitted_;
  DiagnosticLog diagnostics_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> in_round_{false};
  int batch_;  // rows the next round claims
};

}  // namespace ql
