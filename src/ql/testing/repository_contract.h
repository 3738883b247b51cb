#pragma once

// The repository contract: one value-parameterised GoogleTest suite that every storage adapter
// runs, so the SQLite and PostgreSQL stores cannot drift apart. An adapter's test file
// instantiates it once with a factory per configuration:
//
//   QL_INSTANTIATE_REPOSITORY_CONTRACT(
//       Sqlite, ::ql::testing::StoreFactory{"standalone", [] { return MakeStore(); }});
//
// Every test gets a fresh store from the factory and a FakeClock / SeededRandom of its own.

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ql/core/approval_ports.h"
#include "ql/core/artifact_store.h"
#include "ql/core/governance_ports.h"
#include "ql/core/notification_store.h"
#include "ql/core/ports.h"
#include "ql/core/records.h"
#include "ql/core/retention.h"
#include "ql/core/secret_store.h"
#include "ql/testing/fake_clock.h"

namespace ql::testing {

// Makes stores for the contract suite.
struct StoreFactory {
  // Names the configuration in test names: letters, digits and underscores only.
  std::string name;
  // Returns a fresh, empty, fully migrated store that no other test shares.
  std::function<std::unique_ptr<Store>()> make;
  // Reads the clock the store stamps a trigger's publication with when that is the database's
  // own clock (PostgreSQL); empty when the store uses the test's FakeClock.
  std::function<int64_t()> database_clock_ms;
  // Changes the stored bytes of the artifact chunk `chunk_digest` of `store` (a store this
  // factory made) behind the store's back, keeping their length, as a disk or an operator
  // could; reports its own failures through GoogleTest. Every factory must give one: the
  // artifact contract fails without it.
  std::function<void(Store& store, const std::string& chunk_digest)> corrupt_chunk;
};

// Prints the factory's name (GoogleTest calls this for parameter values).
void PrintTo(const StoreFactory& factory, std::ostream* os);

// Returns the factory's name as the test-name suffix.
std::string StoreFactoryName(const ::testing::TestParamInfo<StoreFactory>& info);

// The fixture of every contract test. Helpers build valid commands so each test states only
// what it is about.
class RepositoryContractTest : public ::testing::TestWithParam<StoreFactory> {
 protected:
  void SetUp() override;

  Store& store() { return *store_; }
  const ProjectRecord& project() const { return project_; }
  FakeClock& clock() { return clock_; }
  int64_t Now() const { return clock_.NowMs(); }
  // Returns the time the store would stamp a publication with now (StoreFactory).
  int64_t PublicationClockMs() const;
  // Returns a new UUIDv7 stamped with the fake clock.
  std::string NewId();

  // Returns a command publishing `name` as a new task (expected empty) or as the revision after
  // `expected`, with a local_process execution revision when enabled.
  PublishTaskCommand TaskCommand(const std::string& task_id, std::optional<int64_t> expected,
                                 const std::string& name, bool enabled = true);
  // Publishes a task revision (see TaskCommand).
  Result<TaskRevisionRecord> PublishTask(const std::string& task_id,
                                         std::optional<int64_t> expected, const std::string& name,
                                         bool enabled = true);
  // Returns a command publishing a cron trigger pinning `task` (its revision and digest).
  PublishTriggerCommand TriggerCommand(const std::string& trigger_id,
                                       std::optional<int64_t> expected,
                                       const TaskRevisionRecord& task, bool enabled = true);
  Result<TriggerRevisionRecord> PublishTrigger(const std::string& trigger_id,
                                               std::optional<int64_t> expected,
                                               const TaskRevisionRecord& task, bool enabled = true);

  // Returns the schedule advance that moves `due` to `cursor` without admitting a run.
  ScheduleAdvance MoveCursor(const DueSchedule& due, std::optional<int64_t> cursor);
  // Returns the schedule advance admitting the occurrence at `due`'s cursor (a cron run with
  // its idempotency key and the task's local_process execution revision) and moving the cursor
  // to `next_cursor` (empty: exhausted).
  Result<ScheduleAdvance> Admit(const DueSchedule& due, std::optional<int64_t> next_cursor);
  // The same, moving the cursor to the next fire time of `due`'s trigger revision after the
  // occurrence: what the scheduler decides for an occurrence inside its grace.
  Result<ScheduleAdvance> Admit(const DueSchedule& due);
  // Returns the first fire time of `due`'s trigger revision (its expression and zone) strictly
  // after `after_ms`.
  Result<int64_t> NextFireOf(const DueSchedule& due, int64_t after_ms);
  // Returns the due row of `trigger_id` at `now_ms`, or NotFound when it is not due.
  Result<DueSchedule> DueRow(const std::string& trigger_id, int64_t now_ms);

  // Returns a manual run of `task` (its current local_process execution revision).
  Result<NewRun> ManualRun(const TaskRevisionRecord& task);
  // Creates a task with a queued manual run.
  Result<RunRecord> QueuedRun(int priority = 0);
  // Moves a queued run to running (attempt 1 running) and returns it.
  Result<RunRecord> StartRun(const RunRecord& run);
  // The two transitions StartRun applies to the attempt `attempt_id` of `run`: claimed →
  // starting (run dispatching), then starting → running with pid 4242, the second naming the
  // version the first leaves.
  std::pair<RunTransitionCommand, RunTransitionCommand> StartTransitions(
      const RunRecord& run, const std::string& attempt_id) const;

 private:
  std::unique_ptr<Store> store_;
  ProjectRecord project_;
  FakeClock clock_;
  SeededRandom random_{20260101};
};

// The governance part of the contract (governance_contract.cc): principals, tokens, projects,
// role bindings, the policy fence and the audit, on the same stores.
class GovernanceContract : public RepositoryContractTest {
 protected:
  GovernanceRepository& gov() { return store().governance(); }
  // Bootstraps `name` as installation owner with the token "token-of-<name>".
  PrincipalRecord Owner(const std::string& name = "owner");
  // Creates principal `name` as `actor`.
  Result<PrincipalRecord> AddPrincipal(const PrincipalRecord& actor, const std::string& name);
  // Writes a binding of `subject` in `scope` as `actor` (a fresh mutation id when empty).
  Result<WriteBindingResult> Grant(const PrincipalRecord& actor, const std::string& scope,
                                   const PrincipalRecord& subject, Role role,
                                   std::string mutation_id = "");
  // Publishes a new enabled task `name` fenced as `actor` with the admin role.
  Result<TaskRevisionRecord> PublishAs(const PrincipalRecord& actor, const std::string& name);
};

// The approval part of the contract (approval_contract.cc): requests, approvals with the run
// they create, rejections, expiry, staleness and resolutions of runs in recovery_required. Each
// test starts with an installation owner, a project operator and a project admin.
class ApprovalContract : public GovernanceContract {
 protected:
  void SetUp() override;
  // Publishes a new enabled task whose manual runs need approval by `approver_role`.
  Result<TaskRevisionRecord> PublishGuarded(const std::string& name,
                                            const std::string& approver_role = "admin",
                                            int64_t ttl_ms = kDefaultApprovalTtlMs);
  // Returns a request by `requester` to run `task`'s current revision.
  RequestApprovalCommand RequestCommand(const PrincipalRecord& requester,
                                        const TaskRevisionRecord& task);
  // Returns an approval of `request_id` by `approver` with fresh ids.
  ApproveCommand ApproveAs(const PrincipalRecord& approver, const std::string& request_id);
  // Returns a resolution of `run_id` by `actor` with a reason (and fresh ids for a retry).
  ResolveRunCommand ResolveAs(const PrincipalRecord& actor, const std::string& run_id,
                              const std::string& resolution);
  // Requests (operator_), approves (admin_) and starts a run of a new guarded task, then loses
  // its attempt after start: the run is in recovery_required.
  Result<RunRecord> RecoveryRequiredRun();
  // The same with the task's approver role, the requester and the approver given.
  Result<RunRecord> RecoveryRequiredRun(const std::string& approver_role,
                                        const PrincipalRecord& requester,
                                        const PrincipalRecord& approver);
  // Starts `queued` (an approved run) and loses its attempt after start, as the executor's
  // settlement records it: the run moves to recovery_required.
  Result<RunRecord> LoseAfterStart(const RunRecord& queued);

  PrincipalRecord owner_;
  PrincipalRecord operator_;
  PrincipalRecord admin_;
};

// The retention part of the contract (retention_contract.cc): settings with inheritance and
// the policy fence, and the purge of finished runs.
class RetentionContract : public GovernanceContract {
 protected:
  RetentionRepository& retention() { return store().retention(); }
  // Creates a run of `task` and moves it to succeeded at the current fake time.
  Result<RunRecord> FinishedRun(const TaskRevisionRecord& task,
                                std::optional<std::string> retry_of = std::nullopt);
  // Returns the retention settings command of a project (task empty) or task.
  SetRetentionCommand Settings(const std::string& task_id, std::optional<int> keep_days,
                               std::optional<int> keep_runs);
  // Purges one batch of `task` under the given effective settings at the current fake time.
  Result<PurgeResult> Purge(const TaskRevisionRecord& task, int keep_days, int keep_runs,
                            int limit = 100);
};

// The admission-policy part of the contract (overlap_contract.cc): a trigger's overlap policy
// and a task's concurrency limit decided in the admission transaction (DESIGN §11), and the
// admission's recomputation of the next fire time from the stored trigger revision.
class OverlapContract : public RepositoryContractTest {
 protected:
  // Publishes a task (with `concurrency` as its limit when set).
  Result<TaskRevisionRecord> LimitedTask(std::optional<int64_t> concurrency);
  // Publishes a trigger of `task` with policy `overlap` and sets its cursor 1 s ahead.
  Result<std::string> OverlapTrigger(const TaskRevisionRecord& task, const std::string& overlap);
  // Moves the clock to the trigger's cursor and admits that occurrence (the cursor moves to the
  // next fire time); `run_id` receives the id of the run the admission was asked to write.
  Result<AdvanceOutcome> Fire(const std::string& trigger_id, std::string& run_id);
  // Moves a running run to succeeded.
  Result<RunRecord> Succeed(const RunRecord& running);
  // Publishes a trigger of a new task under `misfire`, sets its cursor on its first fire time
  // after now, moves the clock `late_by_ms` past that occurrence and returns the due row.
  Result<DueSchedule> DueOccurrence(const std::string& misfire, int64_t late_by_ms);
};

// The secrets part of the contract (secret_contract.cc): sealed versions, the fence and audit
// of secret writes, shredding and rotation, on the same stores.
class SecretContract : public GovernanceContract {
 protected:
  SecretRepository& secrets() { return store().secrets(); }
  // Writes version `version` of `name` in the test project as `actor` (fenced as admin), with
  // sealed material recognisable by `tag`.
  Result<SecretVersionRecord> Put(const PrincipalRecord& actor, const std::string& name,
                                  int64_t version, const std::string& tag);
  Result<SecretRecord> Delete(const PrincipalRecord& actor, const std::string& name);
  SecretRef Ref(const std::string& name, std::optional<int64_t> version = std::nullopt);
};

// The notifications part of the contract (notification_contract.cc): channels and rules under
// the fence, the outbox row written in the transaction that moves a run, the rules' state (a
// change of state, not every failure), and the outbox's leases.
class NotificationContract : public GovernanceContract {
 protected:
  void SetUp() override;
  NotificationRepository& notify();
  // Creates a webhook channel `name` as the owner.
  Result<ChannelRecord> Channel(const std::string& name,
                                const std::string& config = R"({"url":"https://example.test/h"})");
  // Creates a rule of `channel` on `event` for `task_id` (every task when empty) as the owner.
  Result<RuleRecord> Rule(const ChannelRecord& channel, const std::string& event,
                          std::optional<std::string> task_id, const std::string& mode = "change",
                          int64_t min_interval_ms = 0);
  // Runs `task` once and ends it as `status` (succeeded, failed or timed_out).
  Result<RunRecord> Ended(const TaskRevisionRecord& task, const std::string& status);
  // Every outbox row of the project, newest first.
  std::vector<OutboxRecord> Outbox();

  PrincipalRecord owner_;
};

// The artifacts part of the contract (artifact_contract.cc): chunked content-addressed blobs
// streamed in and out with bounded memory and verified on the way back, what a project holds,
// versioned scripts under the fence with their audit, quotas, and the purge of old versions and
// unreferenced bytes. Each test starts with an installation owner.
class ArtifactContract : public GovernanceContract {
 protected:
  void SetUp() override;
  ArtifactRepository& artifacts() { return store().artifacts(); }
  // Creates another active project.
  ProjectRecord OtherProject(const std::string& slug = "other");
  // Returns an upload into `project_id` by `actor`, fenced as admin, at the current fake time.
  BeginUploadCommand UploadAs(const PrincipalRecord& actor, const std::string& project_id);
  // Streams `bytes` in pieces of `piece` bytes and finishes; the first error is returned.
  Result<BlobDescriptor> Upload(const BeginUploadCommand& cmd, std::string_view bytes,
                                size_t piece = size_t{64} << 10);
  // Uploads `bytes` into `project_id` as the owner.
  Result<BlobDescriptor> Upload(const std::string& project_id, std::string_view bytes);
  // Reads a whole blob back (small blobs only).
  Result<std::string> ReadAll(const std::string& project_id, const std::string& digest);
  // Returns a push, by `actor` fenced as admin, of the file script `name` whose one file is
  // `blob` named `file`.
  PushScriptCommand FilePush(const PrincipalRecord& actor, const std::string& project_id,
                             const std::string& name, const std::string& file,
                             const BlobDescriptor& blob);
  // Pushes at the current fake time, then moves the clock on.
  Result<PushScriptResult> Push(PushScriptCommand cmd);
  // Deletes `name` as `actor` fenced as admin, then moves the clock on.
  Result<ScriptRecord> DeleteAs(const PrincipalRecord& actor, const std::string& project_id,
                                const std::string& name);
  // The audit facts about scripts, newest first.
  std::vector<AuditRecord> ScriptFacts();

  PrincipalRecord owner_;
};

namespace internal {
// Return true; referenced by the instantiation macro so the suites' object files, which hold
// the test registrations, are always linked from the static library.
bool LinkRepositoryContract();
bool LinkGovernanceContract();
bool LinkApprovalContract();
bool LinkRetentionContract();
bool LinkSecretContract();
bool LinkOverlapContract();
bool LinkNotificationContract();
bool LinkArtifactContract();
}  // namespace internal

}  // namespace ql::testing

// Instantiates the contract suite under `prefix` for the StoreFactory values that follow. Use
// at namespace scope, once per test binary and prefix.
#define QL_INSTANTIATE_REPOSITORY_CONTRACT(prefix, ...)                                    \
  namespace ql::testing {                                                                  \
  [[maybe_unused]] static const bool ql_repository_contract_linked_##prefix =              \
      internal::LinkRepositoryContract() && internal::LinkGovernanceContract() &&          \
      internal::LinkApprovalContract() && internal::LinkRetentionContract() &&             \
      internal::LinkSecretContract() && internal::LinkOverlapContract() &&                 \
      internal::LinkNotificationContract() && internal::LinkArtifactContract();            \
  INSTANTIATE_TEST_SUITE_P(prefix, RepositoryContractTest, ::testing::Values(__VA_ARGS__), \
                           StoreFactoryName);                                              \
  INSTANTIATE_TEST_SUITE_P(prefix, GovernanceContract, ::testing::Values(__VA_ARGS__),     \
                           StoreFactoryName);                                              \
  INSTANTIATE_TEST_SUITE_P(prefix, ApprovalContract, ::testing::Values(__VA_ARGS__),       \
                           StoreFactoryName);                                              \
  INSTANTIATE_TEST_SUITE_P(prefix, RetentionContract, ::testing::Values(__VA_ARGS__),      \
                           StoreFactoryName);                                              \
  INSTANTIATE_TEST_SUITE_P(prefix, SecretContract, ::testing::Values(__VA_ARGS__),         \
                           StoreFactoryName);                                              \
  INSTANTIATE_TEST_SUITE_P(prefix, OverlapContract, ::testing::Values(__VA_ARGS__),        \
                           StoreFactoryName);                                              \
  INSTANTIATE_TEST_SUITE_P(prefix, NotificationContract, ::testing::Values(__VA_ARGS__),   \
                           StoreFactoryName);                                              \
  INSTANTIATE_TEST_SUITE_P(prefix, ArtifactContract, ::testing::Values(__VA_ARGS__),       \
                           StoreFactoryName);                                              \
  }                                                                                        \
  static_assert(true, "require a semicolon")
