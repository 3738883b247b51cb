// Races of governance and approvals on PostgreSQL (DESIGN §9, §9.1), each with exactly one
// serial outcome. Every race is forced into its contended interleaving: a barrier transaction
// holds the governance lock (or a row, or a table) while the racers start, the test sees them
// queue on it in pg_locks (or pg_stat_activity), and only then lets them go, in the order they
// queued.

#include "ql/storage/postgres/pg_governance.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "ql/core/approval_store.h"
#include "ql/core/digest.h"
#include "ql/core/governance.h"
#include "ql/core/ids.h"
#include "ql/engine/control_service.h"
#include "ql/storage/postgres/pg_approvals.h"
#include "ql/storage/postgres/pg_client.h"
#include "ql/storage/postgres/pg_migrations.h"
#include "ql/storage/postgres/pg_store.h"
#include "ql/storage/postgres/pg_test_support.h"
#include "ql/testing/fake_clock.h"
#include "ql/testing/run_steps.h"

namespace ql {
namespace {

using pg::testing::PgTestCluster;
using nlohmann::json;

class PgGovernanceRaceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PgTestCluster& cluster = PgTestCluster::Get();
    database_ = cluster.NewDatabase();
    PostgresStoreOptions options;
    options.runtime.url = cluster.Url(pg::kRuntimeRole, database_);
    options.runtime.max_connections = 4;
    pg::PoolOptions admin;
    admin.url = cluster.Url(pg::kAdminRole, database_);
    admin.max_connections = 4;
    options.admin = admin;
    auto store = PostgresStore::Open(options);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
    ControlOptions control;
    control.executor_type = "remote_worker";
    control_ = std::make_unique<ControlService>(*store_, clock_, random_, control);
    auto project = control_->EnsureDefaultProject();
    ASSERT_TRUE(project.ok()) << project.status().ToString();
    project_id_ = project->id;

    BootstrapCommand boot;
    boot.principal_id = Id();
    boot.name = "root";
    boot.token_id = Id();
    boot.token_digest = Sha256Hex("root");
    boot.mutation_id = "bootstrap";
    boot.now_ms = clock_.NowMs();
    auto booted = gov().Bootstrap(boot);
    ASSERT_TRUE(booted.ok()) << booted.status().ToString();
    root_ = booted->principal;
  }

  GovernanceRepository& gov() { return store_->governance(); }
  // Races call it from two threads at once: the seeded source is not thread-safe.
  std::string Id() {
    std::lock_guard<std::mutex> lock(id_mu_);
    return NewUuidV7(clock_.NowMs(), random_);
  }
  std::mutex id_mu_;
  Caller As(const PrincipalRecord& p) { return Caller{p.id, "", "race"}; }

  PrincipalRecord Add(const std::string& name, Role role, const std::string& scope) {
    CreatePrincipalCommand cmd;
    cmd.id = Id();
    cmd.name = name;
    cmd.now_ms = clock_.NowMs();
    auto created = gov().CreatePrincipal(cmd);
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    if (role != Role::kNone) EXPECT_TRUE(Bind(root_, scope, *created, role).ok());
    return created.ok() ? *created : PrincipalRecord{};
  }

  Result<WriteBindingResult> Bind(const PrincipalRecord& actor, const std::string& scope,
                                  const PrincipalRecord& subject, Role role) {
    WriteBindingCommand cmd;
    cmd.actor = Actor{actor.id, "race"};
    cmd.scope = scope;
    cmd.subject_id = subject.id;
    cmd.role = std::string(RoleName(role));
    cmd.mutation_id = Id();
    cmd.now_ms = clock_.NowMs();
    return gov().WriteBinding(cmd);
  }

  TaskWrite Task(const std::string& name) {
    TaskWrite write;
    write.body = {{"name", name}, {"spec", {{"command", {{"kind", "shell"}, {"command", "true"}}}}}};
    return write;
  }

  // Opens a barrier: a transaction holding the exclusive governance lock.
  std::unique_ptr<pg::Connection> HoldGovernanceLock() {
    auto conn = pg::Connection::Open(PgTestCluster::Get().Url(pg::kAdminRole, database_), {});
    EXPECT_TRUE(conn.ok()) << conn.status().ToString();
    if (!conn.ok()) return nullptr;
    EXPECT_TRUE((*conn)->Exec("BEGIN", {}, "barrier").ok());
    EXPECT_TRUE((*conn)
                    ->Exec("SELECT pg_advisory_xact_lock($1)", {pg::P(pg::kGovernanceLockKey)},
                           "barrier")
                    .ok());
    return std::move(conn).value();
  }
  void Release(pg::Connection& barrier) {
    EXPECT_TRUE(barrier.Exec("COMMIT", {}, "barrier").ok());
  }

  // Waits until `n` sessions wait for the governance lock of this database.
  bool Queued(int n) {
    const std::string sql =
        "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
        "WHERE l.locktype = 'advisory' AND NOT l.granted AND d.datname = '" +
        database_ + "'";
    for (int i = 0; i < 500; ++i) {
      auto out = PgTestCluster::Get().server().Psql("postgres", sql);
      if (out.ok() && !out->empty() && std::stoll(*out) == n) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  int64_t Count(const std::string& sql) {
    auto out = PgTestCluster::Get().server().Psql(database_, sql);
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    return out.ok() ? std::stoll(*out) : -1;
  }

  testing::FakeClock clock_{1'780'000'000'000};
  testing::SeededRandom random_{99};
  std::string database_;
  std::unique_ptr<PostgresStore> store_;
  std::unique_ptr<ControlService> control_;
  std::string project_id_;
  PrincipalRecord root_;
};

TEST_F(PgGovernanceRaceTest, ARevokeThatCommitsFirstWinsOverAPublishOfTheRevokedAdmin) {
  const PrincipalRecord eve = Add("eve", Role::kAdmin, project_id_);
  auto barrier = HoldGovernanceLock();
  ASSERT_NE(barrier, nullptr);
  auto revoke = std::async(std::launch::async, [&] { return Bind(root_, project_id_, eve, Role::kNone); });
  ASSERT_TRUE(Queued(1)) << "the revoke did not queue on the governance lock";
  auto publish = std::async(std::launch::async,
                            [&] { return control_->PublishTask(Task("late"), As(eve)); });
  ASSERT_TRUE(Queued(2)) << "the publish did not queue behind the revoke";
  Release(*barrier);
  ASSERT_TRUE(revoke.get().ok());
  Result<PublishedTask> published = publish.get();
  EXPECT_EQ(published.status().code(), StatusCode::kPermissionDenied)
      << published.status().ToString();
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.task_revisions WHERE name = 'late'"), 0);
}

TEST_F(PgGovernanceRaceTest, APublishThatCommitsFirstStandsAndTheRevokeFollowsIt) {
  const PrincipalRecord eve = Add("eve", Role::kAdmin, project_id_);
  auto barrier = HoldGovernanceLock();
  ASSERT_NE(barrier, nullptr);
  auto publish = std::async(std::launch::async,
                            [&] { return control_->PublishTask(Task("early"), As(eve)); });
  ASSERT_TRUE(Queued(1)) << "the publish did not queue on the governance lock";
  auto revoke = std::async(std::launch::async, [&] { return Bind(root_, project_id_, eve, Role::kNone); });
  ASSERT_TRUE(Queued(2)) << "the revoke did not queue behind the publish";
  Release(*barrier);
  Result<PublishedTask> published = publish.get();
  EXPECT_TRUE(published.ok()) << published.status().ToString();
  ASSERT_TRUE(revoke.get().ok());
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.task_revisions WHERE name = 'early'"), 1);
  // Now the revoke stands.
  EXPECT_EQ(control_->PublishTask(Task("after"), As(eve)).status().code(),
            StatusCode::kPermissionDenied);
}

TEST_F(PgGovernanceRaceTest, AnArchiveThatCommitsFirstRefusesAManualRunInFlight) {
  const PrincipalRecord ops = Add("ops", Role::kOperator, project_id_);
  auto task = control_->PublishTask(Task("job"));
  ASSERT_TRUE(task.ok()) << task.status().ToString();
  auto barrier = HoldGovernanceLock();
  ASSERT_NE(barrier, nullptr);
  auto archive = std::async(std::launch::async, [&] {
    return gov().ArchiveProject(Actor{root_.id, "race"}, project_id_, clock_.NowMs());
  });
  ASSERT_TRUE(Queued(1));
  StartRunRequest request;
  request.task_id = task->task.head.task_id;
  auto run = std::async(std::launch::async, [&] { return control_->StartRun(request, As(ops)); });
  ASSERT_TRUE(Queued(2)) << "the run did not queue behind the archive";
  Release(*barrier);
  ASSERT_TRUE(archive.get().ok());
  Result<StartedRun> started = run.get();
  EXPECT_EQ(started.status().reason(), "project_archived") << started.status().ToString();
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.runs"), 0);
}

TEST_F(PgGovernanceRaceTest, TwoGrantsOfOneSubjectGetConsecutiveVersions) {
  const PrincipalRecord fay = Add("fay", Role::kNone, project_id_);
  auto barrier = HoldGovernanceLock();
  ASSERT_NE(barrier, nullptr);
  auto first = std::async(std::launch::async, [&] { return Bind(root_, project_id_, fay, Role::kViewer); });
  auto second = std::async(std::launch::async, [&] { return Bind(root_, project_id_, fay, Role::kAdmin); });
  ASSERT_TRUE(Queued(2)) << "the grants did not both queue";
  Release(*barrier);
  Result<WriteBindingResult> a = first.get();
  Result<WriteBindingResult> b = second.get();
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_NE(a->binding.version, b->binding.version);
  EXPECT_EQ(a->binding.version + b->binding.version, 3);  // 1 and 2
  EXPECT_EQ(Count("SELECT count(DISTINCT version) FROM ql3.role_bindings WHERE subject_id = '" +
                  fay.id + "'"),
            2);
}

TEST_F(PgGovernanceRaceTest, TwoOwnersRemovingEachOtherLeaveExactlyOneOwner) {
  const std::string installation(kInstallationScope);
  const PrincipalRecord gus = Add("gus", Role::kOwner, installation);
  auto barrier = HoldGovernanceLock();
  ASSERT_NE(barrier, nullptr);
  auto root_removes_gus =
      std::async(std::launch::async, [&] { return Bind(root_, installation, gus, Role::kNone); });
  auto gus_removes_root =
      std::async(std::launch::async, [&] { return Bind(gus, installation, root_, Role::kNone); });
  ASSERT_TRUE(Queued(2)) << "the removals did not both queue";
  Release(*barrier);
  Result<WriteBindingResult> a = root_removes_gus.get();
  Result<WriteBindingResult> b = gus_removes_root.get();
  EXPECT_NE(a.ok(), b.ok()) << a.status().ToString() << " / " << b.status().ToString();
  // The loser is refused because it is now the last owner, or because it is no owner any more.
  const Status& lost = a.ok() ? b.status() : a.status();
  EXPECT_TRUE(lost.reason() == "last_owner" || lost.reason() == "permission_denied")
      << lost.ToString();
  auto owners = gov().ListBindings(installation);
  ASSERT_TRUE(owners.ok());
  ASSERT_EQ(owners->size(), 1u);
  EXPECT_EQ(owners->front().role, "owner");
}

// Runs approval transactions on `pool`, holding the one named `operation` after its last write
// and before its COMMIT until Resume(), so a test can run a competitor against its locks.
class PausingApprovalRunner final : public ApprovalTxRunner {
 public:
  PausingApprovalRunner(pg::Pool& pool, std::string operation)
      : inner_(pool), operation_(std::move(operation)) {}
  Status Run(ApprovalTxKind kind, std::string_view operation,
             const std::function<Status(ApprovalTx&)>& body) override {
    return inner_.Run(kind, operation, [&](ApprovalTx& tx) -> Status {
      Status st = body(tx);
      if (st.ok() && operation == operation_) {
        std::unique_lock<std::mutex> lock(mu_);
        paused_ = true;
        cv_.notify_all();
        cv_.wait(lock, [&] { return resumed_; });
      }
      return st;
    });
  }
  bool WaitUntilPaused() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return paused_; });
  }
  void Resume() {
    std::lock_guard<std::mutex> lock(mu_);
    resumed_ = true;
    cv_.notify_all();
  }
  // Resumes on destruction, so a failed assertion never leaves the paused transaction waiting
  // (declare it right after the future of the paused transaction).
  struct ResumeOnExit {
    PausingApprovalRunner& runner;
    ~ResumeOnExit() { runner.Resume(); }
  };

 private:
  pg::PgApprovalRunner inner_;
  std::string operation_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool paused_ = false;
  bool resumed_ = false;
};

// Approvals: a guarded task with a pending request by an operator, and two approvers.
class PgApprovalRaceTest : public PgGovernanceRaceTest {
 protected:
  void SetUp() override {
    PgGovernanceRaceTest::SetUp();
    if (HasFatalFailure()) return;
    ops_ = Add("ops", Role::kOperator, project_id_);
    amy_ = Add("amy", Role::kAdmin, project_id_);
    TaskWrite write = Task("guarded");
    write.body["approval"] = {{"required", true}};
    auto task = control_->PublishTask(write);
    ASSERT_TRUE(task.ok()) << task.status().ToString();
    StartRunRequest request;
    request.task_id = task->task.head.task_id;
    auto started = control_->StartRun(request, As(ops_));
    ASSERT_TRUE(started.ok()) << started.status().ToString();
    ASSERT_TRUE(started->approval.has_value());
    approval_id_ = started->approval->id;
  }

  int64_t Runs() { return Count("SELECT count(*) FROM ql3.runs"); }

  // Publishes a guarded task whose requests expire after `ttl_ms` and requests a run of it as
  // the operator; returns the request's id.
  std::string RequestExpiringAfter(int64_t ttl_ms) {
    TaskWrite write = Task("brief");
    write.body["approval"] = {{"required", true}, {"ttl_ms", ttl_ms}};
    auto task = control_->PublishTask(write);
    EXPECT_TRUE(task.ok()) << task.status().ToString();
    if (!task.ok()) return "";
    StartRunRequest request;
    request.task_id = task->task.head.task_id;
    auto started = control_->StartRun(request, As(ops_));
    EXPECT_TRUE(started.ok() && started->approval.has_value()) << started.status().ToString();
    return started.ok() && started->approval.has_value() ? started->approval->id : "";
  }

  // Queues amy's approval of approval_id_ on the governance lock, then `competitor` (a write
  // that takes the lock exclusively) behind it; checks that both commit in that order, the
  // approval with its one run and receipt.
  void ApproveBefore(const std::string& what, const std::function<Status()>& competitor) {
    auto barrier = HoldGovernanceLock();
    ASSERT_NE(barrier, nullptr);
    auto approve =
        std::async(std::launch::async, [&] { return control_->Approve(approval_id_, As(amy_)); });
    ASSERT_TRUE(Queued(1)) << "the approval did not queue on the governance lock";
    auto other = std::async(std::launch::async, competitor);
    ASSERT_TRUE(Queued(2)) << "the " << what << " did not queue behind the approval";
    Release(*barrier);
    Result<ApproveResult> approved = approve.get();
    ASSERT_TRUE(approved.ok()) << approved.status().ToString();
    Status st = other.get();
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(Runs(), 1);
    EXPECT_EQ(Count("SELECT count(*) FROM ql3.approval_receipts"), 1);
  }

  std::string Decisions(const std::string& request_id) {
    auto out = PgTestCluster::Get().server().Psql(
        database_,
        "SELECT coalesce(string_agg(decision, ','), '') FROM ql3.approval_decisions "
        "WHERE request_id = '" +
            request_id + "'");
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    if (!out.ok()) return "?";
    std::string decisions = *out;
    while (!decisions.empty() && decisions.back() == '\n') decisions.pop_back();
    return decisions;
  }

  // Waits until `n` sessions of this database wait for a row lock (another transaction's
  // uncommitted row).
  bool WaitingOnRows(int n) {
    const std::string sql =
        "SELECT count(*) FROM pg_stat_activity WHERE datname = '" + database_ +
        "' AND wait_event_type = 'Lock' AND wait_event IN ('transactionid', 'tuple')";
    for (int i = 0; i < 500; ++i) {
      auto out = PgTestCluster::Get().server().Psql("postgres", sql);
      if (out.ok() && !out->empty() && std::stoll(*out) == n) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  // Approves approval_id_ as root and loses the run after its start: it waits in
  // recovery_required for amy (an admin) to resolve it.
  RunRecord RecoveryRequiredRun() {
    Result<ApproveResult> approved = control_->Approve(approval_id_, As(root_));
    EXPECT_TRUE(approved.ok()) << approved.status().ToString();
    if (!approved.ok()) return RunRecord{};
    Result<RunRecord> lost = testing::LoseAfterStart(store_->runs(), approved->run, clock_.NowMs());
    EXPECT_TRUE(lost.ok()) << lost.status().ToString();
    return lost.ok() ? *lost : RunRecord{};
  }

  Result<ResolveRunResult> ResolveAsAmy(const std::string& run_id) {
    return control_->ResolveRun(run_id, "failed", "the target shows no change", As(amy_));
  }

  // Runs of an archived project that have not started and are not cancelled: none may exist
  // once an archive has returned (it cancels every one it finds, and none can be added later).
  int64_t UnstartedRunsOfArchivedProjects() {
    return Count(
        "SELECT count(*) FROM ql3.runs r JOIN ql3.projects p ON p.id = r.project_id WHERE "
        "p.status = 'archived' AND r.status IN ('created', 'queued', 'retry_wait')");
  }

  // Waits until `n` sessions of this database wait for a lock on table ql3.`table`.
  bool WaitingOnTable(const std::string& table, int n) {
    const std::string sql =
        "SELECT count(*) FROM pg_locks WHERE locktype = 'relation' AND NOT granted AND "
        "database = (SELECT oid FROM pg_database WHERE datname = current_database()) AND "
        "relation = 'ql3." +
        table + "'::regclass";
    for (int i = 0; i < 500; ++i) {
      auto out = PgTestCluster::Get().server().Psql(database_, sql);
      if (out.ok() && !out->empty() && std::stoll(*out) == n) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  // Resolutions and their audit facts.
  int64_t Resolutions() {
    return Count("SELECT count(*) FROM ql3.run_resolutions") +
           Count("SELECT count(*) FROM ql3.security_audit WHERE action = 'run.resolve'");
  }

  PrincipalRecord ops_;
  PrincipalRecord amy_;
  std::string approval_id_;
};

TEST_F(PgApprovalRaceTest, TwoApprovalsOfOneRequestCreateOneRunAndOneReceipt) {
  auto barrier = HoldGovernanceLock();
  ASSERT_NE(barrier, nullptr);
  auto first = std::async(std::launch::async, [&] { return control_->Approve(approval_id_, As(amy_)); });
  auto second =
      std::async(std::launch::async, [&] { return control_->Approve(approval_id_, As(root_)); });
  ASSERT_TRUE(Queued(2)) << "the approvals did not both queue";
  Release(*barrier);
  Result<ApproveResult> a = first.get();
  Result<ApproveResult> b = second.get();
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_NE(a->replayed, b->replayed) << "exactly one approval commits, the other replays it";
  EXPECT_EQ(a->approval.receipt->id, b->approval.receipt->id);
  EXPECT_EQ(a->run.id, b->run.id);
  EXPECT_EQ(Runs(), 1);
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.approval_receipts"), 1);
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.approval_decisions"), 1);
}

TEST_F(PgApprovalRaceTest, ApproveAgainstRejectHasOneWinner) {
  auto barrier = HoldGovernanceLock();
  ASSERT_NE(barrier, nullptr);
  auto approve =
      std::async(std::launch::async, [&] { return control_->Approve(approval_id_, As(amy_)); });
  auto reject = std::async(std::launch::async,
                           [&] { return control_->Reject(approval_id_, "freeze", As(root_)); });
  ASSERT_TRUE(Queued(2)) << "approve and reject did not both queue";
  Release(*barrier);
  Result<ApproveResult> a = approve.get();
  Result<ApprovalView> r = reject.get();
  EXPECT_NE(a.ok(), r.ok()) << a.status().ToString() << " / " << r.status().ToString();
  const Status& lost = a.ok() ? r.status() : a.status();
  EXPECT_TRUE(lost.reason() == "approval_rejected" || lost.reason() == "approval_already_approved")
      << lost.ToString();
  EXPECT_EQ(Runs(), a.ok() ? 1 : 0);
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.approval_decisions"), 1);
}

TEST_F(PgApprovalRaceTest, ARevokeThatCommitsFirstMakesTheApprovalFailWithNothingWritten) {
  auto barrier = HoldGovernanceLock();
  ASSERT_NE(barrier, nullptr);
  auto revoke =
      std::async(std::launch::async, [&] { return Bind(root_, project_id_, amy_, Role::kNone); });
  ASSERT_TRUE(Queued(1)) << "the revoke did not queue on the governance lock";
  auto approve =
      std::async(std::launch::async, [&] { return control_->Approve(approval_id_, As(amy_)); });
  ASSERT_TRUE(Queued(2)) << "the approval did not queue behind the revoke";
  Release(*barrier);
  ASSERT_TRUE(revoke.get().ok());
  Result<ApproveResult> approved = approve.get();
  EXPECT_EQ(approved.status().reason(), "permission_denied") << approved.status().ToString();
  EXPECT_EQ(Runs(), 0);
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.approval_decisions"), 0);
}

TEST_F(PgApprovalRaceTest, AnArchiveThatCommitsFirstMakesTheApprovalFailWithNothingWritten) {
  auto barrier = HoldGovernanceLock();
  ASSERT_NE(barrier, nullptr);
  auto archive = std::async(std::launch::async, [&] {
    return gov().ArchiveProject(Actor{root_.id, "race"}, project_id_, clock_.NowMs());
  });
  ASSERT_TRUE(Queued(1));
  auto approve =
      std::async(std::launch::async, [&] { return control_->Approve(approval_id_, As(amy_)); });
  ASSERT_TRUE(Queued(2)) << "the approval did not queue behind the archive";
  Release(*barrier);
  ASSERT_TRUE(archive.get().ok());
  Result<ApproveResult> approved = approve.get();
  EXPECT_EQ(approved.status().reason(), "project_archived") << approved.status().ToString();
  EXPECT_EQ(Runs(), 0);
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.approval_decisions"), 0);
}

TEST_F(PgApprovalRaceTest, AnExpirySweepThatCommitsFirstRefusesTheApproval) {
  const std::string id = RequestExpiringAfter(1000);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // due by the database clock
  PausingApprovalRunner runner(store_->runtime_pool(), "expiring approvals");
  ApprovalStore sweeper(runner, random_);
  auto sweep = std::async(std::launch::async, [&] { return sweeper.ExpireDue(10, 0); });
  PausingApprovalRunner::ResumeOnExit resume_on_exit{runner};
  ASSERT_TRUE(runner.WaitUntilPaused()) << "the sweep did not reach its commit";
  auto approve = std::async(std::launch::async, [&] { return control_->Approve(id, As(amy_)); });
  ASSERT_TRUE(WaitingOnRows(1)) << "the approval did not queue on the request the sweep holds";
  runner.Resume();
  Result<int> expired = sweep.get();
  ASSERT_TRUE(expired.ok()) << expired.status().ToString();
  EXPECT_EQ(*expired, 1);
  Result<ApproveResult> approved = approve.get();
  EXPECT_EQ(approved.status().reason(), "approval_expired") << approved.status().ToString();
  EXPECT_EQ(Runs(), 0);
  EXPECT_EQ(Decisions(id), "expired");
}

TEST_F(PgApprovalRaceTest, AnApprovalInFlightIsNeverExpiredByASweep) {
  const std::string id = RequestExpiringAfter(1000);
  PausingApprovalRunner runner(store_->runtime_pool(), "approving a request");
  ApprovalStore approver(runner, random_);
  ApproveCommand cmd;
  cmd.actor = Actor{amy_.id, "race"};
  cmd.request_id = id;
  cmd.decision_id = Id();
  cmd.action_id = Id();
  cmd.receipt_id = Id();
  cmd.run_id = Id();
  cmd.attempt_id = Id();
  cmd.executor_type = "remote_worker";
  cmd.now_ms = clock_.NowMs();
  auto approve = std::async(std::launch::async, [&] { return approver.Approve(cmd); });
  PausingApprovalRunner::ResumeOnExit resume_on_exit{runner};
  ASSERT_TRUE(runner.WaitUntilPaused()) << "the approval did not reach its commit";
  // The request falls due while the approval holds it; a sweep now passes it by.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  auto sweep = std::async(std::launch::async, [&] { return control_->ExpireApprovals(10); });
  ASSERT_EQ(sweep.wait_for(std::chrono::seconds(10)), std::future_status::ready)
      << "the sweep waited for the approval instead of passing it by";
  runner.Resume();
  Result<int> expired = sweep.get();
  ASSERT_TRUE(expired.ok()) << expired.status().ToString();
  EXPECT_EQ(*expired, 0);
  Result<ApproveResult> approved = approve.get();
  ASSERT_TRUE(approved.ok()) << approved.status().ToString();
  // Past the request's expiry, later sweeps leave the approved request alone.
  Result<int> later = control_->ExpireApprovals(10);
  ASSERT_TRUE(later.ok()) << later.status().ToString();
  EXPECT_EQ(*later, 0);
  EXPECT_EQ(Decisions(id), "approved");
  EXPECT_EQ(Runs(), 1);
}

TEST_F(PgApprovalRaceTest, AnApprovalThatCommitsFirstStandsAndTheRevokeFollowsIt) {
  const std::string second = RequestExpiringAfter(3'600'000);
  ApproveBefore("revoke", [&] { return Bind(root_, project_id_, amy_, Role::kNone).status(); });
  // Now the revoke stands: the same approver approves nothing more.
  EXPECT_EQ(control_->Approve(second, As(amy_)).status().reason(), "approval_not_found");
  EXPECT_EQ(Decisions(second), "");
  EXPECT_EQ(Runs(), 1);
}

TEST_F(PgApprovalRaceTest, AnApprovalThatCommitsFirstStandsAndTheArchiveFollowsIt) {
  const std::string second = RequestExpiringAfter(3'600'000);
  ApproveBefore("archive", [&] {
    return gov().ArchiveProject(Actor{root_.id, "race"}, project_id_, clock_.NowMs()).status();
  });
  // Now the archive stands: nothing else of the project is approved.
  EXPECT_EQ(control_->Approve(second, As(root_)).status().reason(), "project_archived");
  EXPECT_EQ(Decisions(second), "");
  EXPECT_EQ(Runs(), 1);
}

TEST_F(PgApprovalRaceTest, TwoRequestsWithOneKeyAtOnceAnswerTheSameRequest) {
  // A barrier holds the key on an uncommitted row, so both requests look it up, find nothing
  // and queue at the insert; once it rolls back, one inserts and the other hits its key.
  auto conn = pg::Connection::Open(PgTestCluster::Get().Url(pg::kMigrationRole, database_), {});
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  pg::Connection& barrier = **conn;
  ASSERT_TRUE(barrier.Exec("BEGIN", {}, "barrier").ok());
  ASSERT_TRUE(barrier
                  .Exec("UPDATE ql3.approval_requests SET idempotency_key = 'deploy-7' "
                        "WHERE id = $1",
                        {pg::P(approval_id_)}, "barrier")
                  .ok());
  StartRunRequest request;
  request.task_id = control_->GetApproval(approval_id_, As(amy_))->request.task_id;
  request.idempotency_key = "deploy-7";
  auto first =
      std::async(std::launch::async, [&] { return control_->StartRun(request, As(ops_)); });
  auto second =
      std::async(std::launch::async, [&] { return control_->StartRun(request, As(ops_)); });
  ASSERT_TRUE(WaitingOnRows(2)) << "the requests did not both reach the insert";
  ASSERT_TRUE(barrier.Exec("ROLLBACK", {}, "barrier").ok());
  Result<StartedRun> a = first.get();
  Result<StartedRun> b = second.get();
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_TRUE(a->approval.has_value() && b->approval.has_value());
  EXPECT_EQ(a->approval->id, b->approval->id);
  EXPECT_NE(a->replayed, b->replayed) << "exactly one request commits, the other replays it";
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.approval_requests WHERE idempotency_key = 'deploy-7'"),
            1);
}

TEST_F(PgApprovalRaceTest, ALostCommitReplyOfAnApprovalIsReconciledByApprovingAgain) {
  int faults = 0;
  store_->runtime_pool().SetCommitFaultForTesting([&](std::string_view op) -> Status {
    if (op != "approving a request" || faults++ > 0) return Status::Ok();
    return pg::StatusFromPg("", "", true, op, pg::PgPhase::kCommit);
  });
  Result<ApproveResult> lost = control_->Approve(approval_id_, As(amy_));
  EXPECT_EQ(lost.status().code(), StatusCode::kOutcomeUnknown) << lost.status().ToString();
  EXPECT_EQ(faults, 1);
  // The approval did commit; approving again returns its receipt and creates no second run.
  Result<ApproveResult> again = control_->Approve(approval_id_, As(amy_));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(again->replayed);
  EXPECT_EQ(Runs(), 1);
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.approval_receipts"), 1);
  EXPECT_EQ(again->run.id, again->approval.receipt->run_id);
}

TEST_F(PgApprovalRaceTest, ARevokeThatCommitsFirstMakesTheResolutionFailWithNothingWritten) {
  const RunRecord run = RecoveryRequiredRun();
  ASSERT_EQ(run.status, "recovery_required");
  auto barrier = HoldGovernanceLock();
  ASSERT_NE(barrier, nullptr);
  auto revoke =
      std::async(std::launch::async, [&] { return Bind(root_, project_id_, amy_, Role::kNone); });
  ASSERT_TRUE(Queued(1)) << "the revoke did not queue on the governance lock";
  auto resolve = std::async(std::launch::async, [&] { return ResolveAsAmy(run.id); });
  ASSERT_TRUE(Queued(2)) << "the resolution did not queue behind the revoke";
  Release(*barrier);
  ASSERT_TRUE(revoke.get().ok());
  Result<ResolveRunResult> resolved = resolve.get();
  EXPECT_EQ(resolved.status().reason(), "permission_denied") << resolved.status().ToString();
  EXPECT_EQ(Resolutions(), 0);
  Result<RunRecord> after = store_->runs().GetRun(run.id);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(after->status, "recovery_required");
  EXPECT_EQ(after->version, run.version);
  EXPECT_EQ(after->event_sequence, run.event_sequence);
}

TEST_F(PgApprovalRaceTest, AResolutionThatCommitsFirstStandsAndTheRevokeFollowsIt) {
  const RunRecord run = RecoveryRequiredRun();
  ASSERT_EQ(run.status, "recovery_required");
  auto barrier = HoldGovernanceLock();
  ASSERT_NE(barrier, nullptr);
  auto resolve = std::async(std::launch::async, [&] { return ResolveAsAmy(run.id); });
  ASSERT_TRUE(Queued(1)) << "the resolution did not queue on the governance lock";
  auto revoke =
      std::async(std::launch::async, [&] { return Bind(root_, project_id_, amy_, Role::kNone); });
  ASSERT_TRUE(Queued(2)) << "the revoke did not queue behind the resolution";
  Release(*barrier);
  Result<ResolveRunResult> resolved = resolve.get();
  ASSERT_TRUE(resolved.ok()) << resolved.status().ToString();
  EXPECT_EQ(resolved->run.status, "failed");
  ASSERT_TRUE(revoke.get().ok());
  EXPECT_EQ(Resolutions(), 2);
  EXPECT_EQ(store_->runs().GetRun(run.id)->status, "failed");
  // Now the revoke stands: amy resolves nothing more, not even a replay of her own resolution.
  EXPECT_FALSE(ResolveAsAmy(run.id).ok());
  EXPECT_EQ(Resolutions(), 2);
}

// Archive vs. human recovery (seed ADR-0037 §8: "Project archive and manual recovery
// authorization race"), the archive first: it holds the governance lock exclusively, the
// resolution queues behind it on the shared lock of its policy fence, and once the archive has
// committed the fence reads the project as archived. The resolution loses cleanly: nothing is
// written, and the run waits in recovery_required as it was (not lost, not half resolved).
TEST_F(PgApprovalRaceTest, AnArchiveThatCommitsFirstMakesTheResolutionFailWithNothingWritten) {
  const RunRecord run = RecoveryRequiredRun();
  ASSERT_EQ(run.status, "recovery_required");
  auto barrier = HoldGovernanceLock();
  ASSERT_NE(barrier, nullptr);
  auto archive = std::async(std::launch::async, [&] {
    return control_->governance().ArchiveProject(As(root_), project_id_);
  });
  ASSERT_TRUE(Queued(1)) << "the archive did not queue on the governance lock";
  auto resolve = std::async(std::launch::async, [&] {
    return control_->ResolveRun(run.id, "retry", "the target shows no change", As(amy_));
  });
  if (resolve.wait_for(std::chrono::milliseconds(300)) == std::future_status::ready) {
    ADD_FAILURE() << "the resolution did not wait for the archive";
  } else {
    EXPECT_TRUE(Queued(2)) << "the resolution did not queue behind the archive";
  }
  Release(*barrier);
  Result<ProjectRecord> archived = archive.get();
  ASSERT_TRUE(archived.ok()) << archived.status().ToString();
  EXPECT_EQ(archived->status, "archived");
  Result<ResolveRunResult> resolved = resolve.get();
  EXPECT_EQ(resolved.status().reason(), "project_archived") << resolved.status().ToString();
  EXPECT_EQ(Resolutions(), 0);
  EXPECT_EQ(Runs(), 1) << "no retry run";
  Result<RunRecord> after = store_->runs().GetRun(run.id);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(after->status, "recovery_required");
  EXPECT_EQ(after->version, run.version);
  EXPECT_EQ(after->event_sequence, run.event_sequence);
  EXPECT_EQ(UnstartedRunsOfArchivedProjects(), 0);
}

// The resolution first, caught in flight right after its policy fence: it has locked the run
// and read the project as active, and written nothing yet (a barrier holds run_resolutions,
// the table it reads next, so it waits there). An archive that starts now queues on the
// governance lock the resolution holds shared (pg_locks shows it, and it does not return)
// until the resolution has written everything (the run failed, a retry run queued, the
// resolution and its audit fact) and committed; only then does it archive and cancel the runs
// that have not started, the retry run among them. Without the fence the archive would commit
// and sweep first, and the retry run would commit after it, queued in an archived project.
TEST_F(PgApprovalRaceTest, AnArchiveWaitsForAResolutionPastItsFenceAndCancelsItsRetryRun) {
  const RunRecord run = RecoveryRequiredRun();
  ASSERT_EQ(run.status, "recovery_required");
  auto conn = pg::Connection::Open(PgTestCluster::Get().Url(pg::kMigrationRole, database_), {});
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  pg::Connection& barrier = **conn;
  ASSERT_TRUE(barrier.Exec("BEGIN", {}, "barrier").ok());
  ASSERT_TRUE(
      barrier.Exec("LOCK TABLE ql3.run_resolutions IN ACCESS EXCLUSIVE MODE", {}, "barrier").ok());
  auto resolve = std::async(std::launch::async, [&] {
    return control_->ResolveRun(run.id, "retry", "the target shows no change", As(amy_));
  });
  ASSERT_TRUE(WaitingOnTable("run_resolutions", 1))
      << "the resolution did not pass its fence and reach run_resolutions";
  auto archive = std::async(std::launch::async, [&] {
    return control_->governance().ArchiveProject(As(root_), project_id_);
  });
  if (archive.wait_for(std::chrono::milliseconds(300)) == std::future_status::ready) {
    ADD_FAILURE() << "the archive finished while the resolution was in flight";
  } else {
    EXPECT_TRUE(Queued(1)) << "the archive did not queue on the resolution's fence";
  }
  ASSERT_TRUE(barrier.Exec("COMMIT", {}, "barrier").ok());
  Result<ResolveRunResult> resolved = resolve.get();
  ASSERT_TRUE(resolved.ok()) << resolved.status().ToString();
  ASSERT_TRUE(resolved->retry_run.has_value());
  EXPECT_EQ(resolved->run.status, "failed");
  Result<ProjectRecord> archived = archive.get();
  ASSERT_TRUE(archived.ok()) << archived.status().ToString();
  EXPECT_EQ(archived->status, "archived");
  // One resolution with its audit fact; the run ended once; the retry run exists and was
  // cancelled by the archive: nothing of the archived project is left to start.
  EXPECT_EQ(Resolutions(), 2);
  EXPECT_EQ(store_->runs().GetRun(run.id)->status, "failed");
  Result<RunRecord> retry = store_->runs().GetRun(resolved->retry_run->id);
  ASSERT_TRUE(retry.ok()) << retry.status().ToString();
  EXPECT_EQ(retry->status, "cancelled");
  EXPECT_EQ(retry->cancel_reason, "project_archived");
  EXPECT_EQ(UnstartedRunsOfArchivedProjects(), 0);
  // Now the archive stands: nothing more is resolved in the project.
  EXPECT_EQ(control_->ResolveRun(run.id, "retry", "again", As(amy_)).status().reason(),
            "project_archived");
}

}  // namespace
}  // namespace ql
