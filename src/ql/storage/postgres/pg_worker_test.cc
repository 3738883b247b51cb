#include "ql/storage/postgres/pg_worker.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ql/core/digest.h"
#include "ql/core/ids.h"
#include "ql/core/placement.h"
#include "ql/core/placement_ports.h"
#include "ql/core/states.h"
#include "ql/engine/cluster_recovery.h"
#include "ql/engine/control_service.h"
#include "ql/engine/metrics.h"
#include "ql/engine/worker_service.h"
#include "ql/storage/postgres/pg_client.h"
#include "ql/storage/postgres/pg_cluster_recovery.h"
#include "ql/storage/postgres/pg_credentials.h"
#include "ql/storage/postgres/pg_log_source.h"
#include "ql/storage/postgres/pg_migrations.h"
#include "ql/storage/postgres/pg_store.h"
#include "ql/storage/postgres/pg_test_support.h"
#include "ql/testing/fake_clock.h"
#include "ql/testing/test_principals.h"

namespace ql {
namespace {

using nlohmann::json;
using pg::testing::PgTestCluster;

::testing::AssertionResult Fails(const Status& status, std::string_view reason) {
  if (!status.ok() && status.reason() == reason) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "expected " << reason << ", got " << status.ToString();
}

template <typename T>
::testing::AssertionResult Fails(const Result<T>& result, std::string_view reason) {
  return Fails(result.status(), reason);
}

std::string Token(RandomSource& random) { return RandomHex(random, 32); }

// What a worker registers with (--pool, --label).
Placement Place(std::string pool, std::map<std::string, std::string> labels = {}) {
  Placement p;
  p.pool = std::move(pool);
  p.labels = std::move(labels);
  return p;
}

constexpr char kAgentVersion[] = "ql-worker 0.0.0-test";

// One worker process as the control plane sees it: its credential, session and offers.
struct Worker {
  std::string id;     // credential id
  std::string token;  // bearer token
  std::string session;
  int64_t generation = 0;
  int slots = 4;  // of its session
};

class PgWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override { Open(WorkerServiceOptions{}); }

  void Open(WorkerServiceOptions options) {
    service_.reset();
    db_ = PgTestCluster::Get().NewDatabase();
    PostgresStoreOptions store_options;
    store_options.runtime.url = PgTestCluster::Get().Url(pg::kRuntimeRole, db_);
    store_options.runtime.max_connections = 8;
    pg::PoolOptions admin;
    admin.url = PgTestCluster::Get().Url(pg::kAdminRole, db_);
    admin.max_connections = 2;
    store_options.admin = admin;
    store_ = std::move(PostgresStore::Open(store_options)).value();
    pg::PoolOptions ingress;
    ingress.url = PgTestCluster::Get().Url(pg::kWorkerIngressRole, db_);
    ingress.max_connections = 8;
    ingress_ = std::move(pg::Pool::Create(ingress)).value();
    sessions_ = std::make_unique<pg::PostgresWorkerSessions>(*ingress_);
    leases_ = std::make_unique<pg::PostgresRunLeases>(store_->runtime_pool());
    ControlOptions control_options;
    control_options.executor_type = "remote_worker";
    control_ = std::make_unique<ControlService>(*store_, SystemClock(), random_, control_options);
    ASSERT_TRUE(control_->EnsureDefaultProject().ok());
    logs_ = std::make_unique<PostgresLogSource>(store_->runtime_pool());
    options.logs = logs_.get();
    if (evidence_) options.approvals = &store_->approvals();  // as ql-cluster serve does
    service_ = std::make_unique<WorkerService>(*sessions_, *leases_, store_->runs(), SystemClock(),
                                               random_, metrics_, options);
  }

  void OpenWithoutTokenTrust() {
    WorkerServiceOptions options;
    options.auth_cache_ms = 0;
    Open(options);
  }

  // A worker whose credential is minted for the pool it registers in.
  Worker NewWorker(const std::string& name, int slots = 4, const Placement& placement = {}) {
    Result<pg::MintedCredential> minted =
        pg::MintCredential(*store_->admin_pool(), pg::CredentialKind::kWorker, name, SystemClock(),
                           random_, placement.pool);
    EXPECT_TRUE(minted.ok()) << minted.status().ToString();
    Worker w;
    w.token = minted->token;
    w.id = service_->Authenticate(w.token).value();
    Register(w, slots, placement);
    return w;
  }

  void Register(Worker& w, int slots = 4, const Placement& placement = {}) {
    Result<WorkerSessionRecord> s =
        service_->Register(w.id, json::object(), slots, slots, placement, kAgentVersion);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    w.session = s->id;
    w.generation = s->generation;
    w.slots = slots;
  }

  std::string PublishTask(const std::string& command, json retry = json(), int64_t timeout_ms = 0) {
    json body{{"name", "t-" + RandomHex(random_, 4)},
              {"spec", {{"command", {{"kind", "shell"}, {"command", command}}}}}};
    if (timeout_ms > 0) body["spec"]["timeoutMs"] = timeout_ms;
    if (!retry.is_null()) body["retry"] = retry;
    Result<PublishedTask> task = control_->PublishTask(TaskWrite{body, std::nullopt});
    EXPECT_TRUE(task.ok()) << task.status().ToString();
    return task->task.head.task_id;
  }

  std::string StartRun(const std::string& task_id, int priority = 0) {
    StartRunRequest request;
    request.task_id = task_id;
    request.priority = priority;
    Result<StartedRun> run = control_->StartRun(request);
    EXPECT_TRUE(run.ok()) << run.status().ToString();
    return run->run.id;
  }

  Result<PullAnswer> Pull(const Worker& w, std::vector<OfferToken> offers, int slots = 4) {
    return service_->Pull(w.id, w.session, w.generation, slots, offers);
  }

  OfferToken NewOffer() { return {NewUuidV7(SystemClock().NowMs(), random_), Token(random_)}; }

  LeaseCall Call(const Worker& w, const OfferToken& offer) {
    return LeaseCall{w.id, offer.offer_id, w.session, w.generation, offer.lease_token};
  }

  // Pulls one run and brings it to running.
  OfferToken Take(const Worker& w) {
    OfferToken offer = NewOffer();
    Result<PullAnswer> pulled = Pull(w, {offer});
    EXPECT_TRUE(pulled.ok()) << pulled.status().ToString();
    EXPECT_EQ(pulled->offers.size(), 1u);
    Result<std::string> starting = service_->Starting(Call(w, offer));
    EXPECT_TRUE(starting.ok() && *starting == "starting") << starting.status().ToString();
    Result<std::string> running = service_->Running(Call(w, offer), 4242);
    EXPECT_TRUE(running.ok() && *running == "running") << running.status().ToString();
    return offer;
  }

  // Pulls one granted, unstarted lease.
  OfferToken PullOne(const Worker& w) {
    OfferToken offer = NewOffer();
    Result<PullAnswer> pulled = Pull(w, {offer});
    EXPECT_TRUE(pulled.ok()) << pulled.status().ToString();
    EXPECT_TRUE(pulled.ok() && pulled->offers.size() == 1u);
    return offer;
  }

  // Opens a transaction on its own connection holding the row of `session_id` with `lock`.
  std::unique_ptr<pg::Connection> HoldSession(const std::string& session_id,
                                              const std::string& lock) {
    auto conn = pg::Connection::Open(PgTestCluster::Get().Url(pg::kMigrationRole, db_), {});
    EXPECT_TRUE(conn.ok()) << conn.status().ToString();
    if (!conn.ok()) return nullptr;
    EXPECT_TRUE((*conn)->Exec("BEGIN", {}, "barrier").ok());
    auto held = (*conn)->Exec("SELECT 1 FROM ql3.worker_sessions WHERE id = $1 " + lock,
                              {pg::P(session_id)}, "barrier");
    EXPECT_TRUE(held.ok()) << held.status().ToString();
    return std::move(*conn);
  }

  RunRecord Run(const std::string& run_id) { return store_->runs().GetRun(run_id).value(); }

  std::string DefaultProject() { return control_->EnsureDefaultProject().value().id; }

  // Creates another project; its tasks are published and started by the caller `In(slug)`.
  std::string NewProject(const std::string& slug) {
    const int64_t now = SystemClock().NowMs();
    Result<ProjectRecord> project = store_->EnsureProject(NewUuidV7(now, random_), slug, slug, now);
    EXPECT_TRUE(project.ok()) << project.status().ToString();
    return project.ok() ? project->id : std::string();
  }

  static Caller In(const std::string& slug) {
    Caller caller;
    caller.project = slug;  // empty: the default project
    return caller;
  }

  // Publishes `true` in project `slug` with `placement` as the spec's "placement" (none if null).
  std::string PublishIn(const std::string& slug, const json& placement = json()) {
    json body{{"name", "p-" + RandomHex(random_, 4)},
              {"spec", {{"command", {{"kind", "shell"}, {"command", "true"}}}}}};
    if (!placement.is_null()) body["spec"]["placement"] = placement;
    Result<PublishedTask> task = control_->PublishTask(TaskWrite{body, std::nullopt}, In(slug));
    EXPECT_TRUE(task.ok()) << task.status().ToString();
    return task.ok() ? task->task.head.task_id : std::string();
  }

  std::string StartRunIn(const std::string& slug, const std::string& task_id) {
    StartRunRequest request;
    request.task_id = task_id;
    Result<StartedRun> run = control_->StartRun(request, In(slug));
    EXPECT_TRUE(run.ok()) << run.status().ToString();
    return run.ok() ? run->run.id : std::string();
  }

  // Pulls with `n` fresh offers; returns the granted runs with the offers that hold them, in
  // grant order (a grant fills the offers in the order it chose the runs).
  std::vector<std::pair<std::string, OfferToken>> PullGrants(const Worker& w, int n) {
    std::vector<OfferToken> offers;
    for (int i = 0; i < n; ++i) offers.push_back(NewOffer());
    Result<PullAnswer> pulled = Pull(w, offers, w.slots);
    EXPECT_TRUE(pulled.ok()) << pulled.status().ToString();
    std::vector<std::pair<std::string, OfferToken>> out;
    if (!pulled.ok()) return out;
    for (const OfferToken& offer : offers) {
      for (const WorkerOffer& o : pulled->offers) {
        if (o.lease.offer_id == offer.offer_id) out.emplace_back(o.lease.run_id, offer);
      }
    }
    EXPECT_EQ(out.size(), pulled->offers.size());
    return out;
  }

  std::vector<std::string> PullRuns(const Worker& w, int n) {
    std::vector<std::string> out;
    for (const auto& [run_id, offer] : PullGrants(w, n)) out.push_back(run_id);
    return out;
  }

  // Starts and ends a granted run: its lease is no longer live.
  void Finish(const Worker& w, const OfferToken& offer) {
    ASSERT_EQ(service_->Starting(Call(w, offer)).value(), "starting");
    AttemptOutcome exited;
    exited.kind = AttemptOutcome::Kind::kExited;
    exited.exit_code = 0;
    Result<CompleteAnswer> done = service_->Complete(Call(w, offer), exited, 4242);
    ASSERT_TRUE(done.ok()) << done.status().ToString();
    EXPECT_EQ(done->run_status, "succeeded");
  }

  Status Grant(const std::string& pool, const std::string& project_id,
               std::optional<int64_t> max_running = std::nullopt, int64_t weight = 1) {
    GrantPoolCommand cmd;
    cmd.pool = pool;
    cmd.project_id = project_id;
    cmd.max_running = max_running;
    cmd.weight = weight;
    cmd.now_ms = SystemClock().NowMs();
    return store_->placement().GrantPool(cmd).status();
  }

  Status Revoke(const std::string& pool, const std::string& project_id) {
    RevokePoolCommand cmd;
    cmd.pool = pool;
    cmd.project_id = project_id;
    cmd.now_ms = SystemClock().NowMs();
    return store_->placement().RevokePool(cmd);
  }

  // Sets (or clears, with nullopt) the pool's cap of live leases.
  Result<PoolRecord> SetPoolMax(const std::string& pool, std::optional<int64_t> max_running) {
    SetPoolCommand cmd;
    cmd.pool = pool;
    cmd.max_running = max_running;
    cmd.now_ms = SystemClock().NowMs();
    return store_->placement().SetPool(cmd);
  }

  Result<WorkerRecord> Drain(const std::string& worker, bool drain) {
    DrainWorkerCommand cmd;
    cmd.worker = worker;
    cmd.drain = drain;
    cmd.now_ms = SystemClock().NowMs();
    return store_->placement().DrainWorker(cmd);
  }

  std::vector<std::string> EventTypes(const std::string& run_id) {
    std::vector<std::string> out;
    for (const EventRecord& e : store_->runs().ListEvents(run_id, 0, 1000).value()) {
      out.push_back(e.type);
    }
    return out;
  }

  int64_t Count(const std::string& sql) {
    Result<std::string> r = PgTestCluster::Get().server().Psql(db_, sql);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::stoll(*r) : -1;
  }

  RandomSource& random_ = SecureRandom();
  Metrics metrics_;
  std::string db_;
  std::unique_ptr<PostgresStore> store_;
  std::unique_ptr<pg::Pool> ingress_;
  std::unique_ptr<pg::PostgresWorkerSessions> sessions_;
  std::unique_ptr<pg::PostgresRunLeases> leases_;
  std::unique_ptr<ControlService> control_;
  std::unique_ptr<PostgresLogSource> logs_;
  std::unique_ptr<WorkerService> service_;
  bool evidence_ = false;  // resolve recovery_required runs from late reports (as ql-cluster)
};

TEST_F(PgWorkerTest, APulledRunGoesFromLeaseToSuccessWithItsLog) {
  const std::string task = PublishTask("echo hello");
  const std::string run_id = StartRun(task);
  Worker w = NewWorker("w1");
  OfferToken offer = NewOffer();
  Result<PullAnswer> pulled = Pull(w, {offer});
  ASSERT_TRUE(pulled.ok()) << pulled.status().ToString();
  ASSERT_EQ(pulled->offers.size(), 1u);
  const WorkerOffer& o = pulled->offers[0];
  EXPECT_EQ(o.lease.run_id, run_id);
  EXPECT_EQ(o.lease.offer_id, offer.offer_id);
  EXPECT_EQ(o.lease.lease_version, 1);
  EXPECT_EQ(o.plan.argv.back(), "echo hello");
  EXPECT_EQ(Run(run_id).status, "queued");  // leased, not started

  EXPECT_EQ(service_->Starting(Call(w, offer)).value(), "starting");
  EXPECT_EQ(service_->Starting(Call(w, offer)).value(), "already_starting");
  EXPECT_EQ(Run(run_id).status, "dispatching");
  EXPECT_EQ(service_->Running(Call(w, offer), 777).value(), "running");
  EXPECT_EQ(service_->Running(Call(w, offer), 777).value(), "already_running");
  EXPECT_EQ(service_->Starting(Call(w, offer)).value(), "already_running");
  EXPECT_EQ(Run(run_id).status, "running");

  Result<LeaseLogAppend> log = service_->AppendLog(Call(w, offer), 0, "hello\n");
  ASSERT_TRUE(log.ok()) << log.status().ToString();
  EXPECT_EQ(log->next_offset, 6);
  EXPECT_EQ(service_->AppendLog(Call(w, offer), 0, "hello\n").value().next_offset, 6);
  Result<LeaseRenewal> renewed = service_->Renew(Call(w, offer));
  ASSERT_TRUE(renewed.ok()) << renewed.status().ToString();
  EXPECT_EQ(renewed->lease_version, 2);
  EXPECT_FALSE(renewed->cancel_requested);

  AttemptOutcome exited;
  exited.kind = AttemptOutcome::Kind::kExited;
  exited.exit_code = 0;
  Result<CompleteAnswer> done = service_->Complete(Call(w, offer), exited);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->run_status, "succeeded");
  EXPECT_EQ(done->attempt_status, "succeeded");
  // A repeated complete (its answer was lost) answers the record again.
  EXPECT_EQ(service_->Complete(Call(w, offer), exited).value().run_status, "succeeded");

  const std::vector<std::string> types = EventTypes(run_id);
  for (const char* want :
       {"attempt.leased", "run.dispatching", "attempt.starting", "attempt.running", "run.running",
        "attempt.succeeded", "run.succeeded"}) {
    EXPECT_NE(std::find(types.begin(), types.end(), want), types.end()) << want;
  }
  PostgresLogSource logs(store_->runtime_pool());
  AttemptRecord attempt = store_->runs().ListAttempts(run_id).value().back();
  EXPECT_EQ(logs.ReadLog(attempt, 0, 1024).value().data, "hello\n");
  // The token never reaches the database.
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.run_events WHERE payload_json LIKE '%" +
                  offer.lease_token + "%'"),
            0);
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.run_dispatch_leases WHERE status = 'granted'"), 0);
}

TEST_F(PgWorkerTest, ACompleteCarryingAPidRecordsTheStartThenTheEndInOneCall) {
  const std::string run_id = StartRun(PublishTask("true"));
  Worker w = NewWorker("w1");
  const OfferToken offer = PullOne(w);
  ASSERT_EQ(service_->Starting(Call(w, offer)).value(), "starting");
  AttemptOutcome exited;
  exited.kind = AttemptOutcome::Kind::kExited;
  AttemptOutcome spawn_failed;
  spawn_failed.kind = AttemptOutcome::Kind::kSpawnFailed;
  // A pid only comes with a command that started, and is a positive integer.
  EXPECT_TRUE(Fails(service_->Complete(Call(w, offer), spawn_failed, 4242), "invalid_argument"));
  EXPECT_TRUE(Fails(service_->Complete(Call(w, offer), exited, 0), "invalid_argument"));
  EXPECT_EQ(Run(run_id).status, "dispatching");

  Result<CompleteAnswer> done = service_->Complete(Call(w, offer), exited, 4242);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->run_status, "succeeded");
  const RunRecord run = Run(run_id);
  EXPECT_EQ(run.status, "succeeded");
  EXPECT_TRUE(run.started_at_ms.has_value());
  const std::vector<AttemptRecord> attempts = store_->runs().ListAttempts(run_id).value();
  ASSERT_EQ(attempts.size(), 1u);
  EXPECT_EQ(attempts[0].pid, 4242);
  EXPECT_EQ(attempts[0].status, "succeeded");
  // The same history as `running` then `complete`.
  const std::vector<std::string> types = EventTypes(run_id);
  const auto at = [&](const std::string& type) {
    return std::find(types.begin(), types.end(), type) - types.begin();
  };
  EXPECT_LT(at("run.running"), at("attempt.succeeded"));
  EXPECT_LT(at("attempt.running"), at("run.running"));
  EXPECT_LT(at("attempt.succeeded"), static_cast<long>(types.size()));
  // A repeated complete answers the recorded end, pid or not.
  EXPECT_EQ(service_->Complete(Call(w, offer), exited, 4242).value().run_status, "succeeded");
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.run_events WHERE type = "
                  "'attempt.late_callback_ignored'"),
            0);
}

// The replica that granted a lease steps it on what it knows (no read of the lease before the
// step); what another replica or a cancel changed meanwhile makes that knowledge stale, and the
// step then goes the way it goes on a replica that knows nothing: same answers, same history.
TEST_F(PgWorkerTest, TheGrantingReplicaStepsALeaseOnWhatItKnowsAndAStaleHintChangesNothing) {
  WorkerService other(*sessions_, *leases_, store_->runs(), SystemClock(), random_, metrics_, {});
  const auto hints = [&](const std::string& result) {
    const std::string series = "ql_worker_lease_hints_total{result=\"" + result + "\"} ";
    const std::string text = metrics_.RenderPrometheus();
    const size_t at = text.find(series);
    return at == std::string::npos ? 0 : std::stoll(text.substr(at + series.size()));
  };
  AttemptOutcome exited;
  exited.kind = AttemptOutcome::Kind::kExited;
  exited.exit_code = 0;
  const std::string task = PublishTask("true");
  Worker w = NewWorker("w1");

  // Known all the way: starting, then the end with the pid, both decided on the grant's state.
  const std::string known = StartRun(task);
  OfferToken offer = PullOne(w);
  ASSERT_EQ(service_->Starting(Call(w, offer)).value(), "starting");
  Result<CompleteAnswer> done = service_->Complete(Call(w, offer), exited, 4242);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->run_status, "succeeded");
  EXPECT_EQ(hints("used"), 2);
  EXPECT_EQ(hints("stale"), 0);

  // Known nowhere: the same run taken by a replica that did not grant it.
  const std::string unknown = StartRun(task);
  offer = NewOffer();
  ASSERT_EQ(Pull(w, {offer}).value().offers.size(), 1u);
  ASSERT_EQ(other.Starting(Call(w, offer)).value(), "starting");
  ASSERT_EQ(other.Complete(Call(w, offer), exited, 4242).value().run_status, "succeeded");
  EXPECT_EQ(hints("used"), 2);
  EXPECT_EQ(EventTypes(known), EventTypes(unknown));
  EXPECT_EQ(Run(known).status, "succeeded");
  EXPECT_EQ(store_->runs().ListAttempts(known).value().at(0).pid, 4242);

  // Stale step: the start went through another replica; this one's hint still says claimed.
  const std::string moved = StartRun(task);
  offer = PullOne(w);
  ASSERT_EQ(other.Starting(Call(w, offer)).value(), "starting");
  EXPECT_EQ(service_->Starting(Call(w, offer)).value(), "already_starting");
  EXPECT_EQ(hints("stale"), 1);
  ASSERT_EQ(service_->Complete(Call(w, offer), exited, 4242).value().run_status, "succeeded");
  EXPECT_EQ(EventTypes(moved), EventTypes(known));

  // Stale end: a cancel after the start moved the run on; the cancel wins as it always does.
  const std::string cancelled = StartRun(task);
  offer = PullOne(w);
  ASSERT_EQ(service_->Starting(Call(w, offer)).value(), "starting");
  EXPECT_EQ(hints("used"), 3);
  ASSERT_TRUE(control_->CancelRun(cancelled, std::string("stop")).ok());
  Result<CompleteAnswer> ended = service_->Complete(Call(w, offer), exited, 4242);
  ASSERT_TRUE(ended.ok()) << ended.status().ToString();
  EXPECT_EQ(ended->run_status, "cancelled");
  EXPECT_EQ(hints("stale"), 2);
  EXPECT_EQ(Run(cancelled).status, "cancelled");
  const std::vector<std::string> types = EventTypes(cancelled);
  EXPECT_EQ(std::count(types.begin(), types.end(), "attempt.running"), 1);
  EXPECT_EQ(std::count(types.begin(), types.end(), "attempt.cancelled"), 1);
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.run_events WHERE type = "
                  "'attempt.late_callback_ignored'"),
            0);
}

TEST_F(PgWorkerTest, APidOnTheCompleteOfARunningAttemptChangesNothingButTheEnd) {
  const std::string run_id = StartRun(PublishTask("true"));
  Worker w = NewWorker("w1");
  const OfferToken offer = Take(w);  // running with pid 4242
  AttemptOutcome exited;
  exited.kind = AttemptOutcome::Kind::kExited;
  exited.exit_code = 1;
  Result<CompleteAnswer> done = service_->Complete(Call(w, offer), exited, 999);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->run_status, "failed");
  EXPECT_EQ(store_->runs().ListAttempts(run_id).value()[0].pid, 4242);
}

TEST_F(PgWorkerTest, ALostCommitReplyOfAReadOnlyWorkerCallIsRetriedTransparently) {
  OpenWithoutTokenTrust();  // every Authenticate reaches the database
  Worker w = NewWorker("w1");
  std::atomic<int> commits{0};
  ingress_->SetCommitFaultForTesting([&](std::string_view operation) -> Status {
    if (operation != "authenticating a worker" || commits.fetch_add(1) > 0) return Status::Ok();
    return pg::StatusFromPg("", "", true, operation, pg::PgPhase::kCommit);
  });
  Result<std::string> id = service_->Authenticate(w.token);
  ingress_->SetCommitFaultForTesting(nullptr);
  ASSERT_TRUE(id.ok()) << id.status().ToString();  // not commit_outcome_unknown
  EXPECT_EQ(*id, w.id);
  EXPECT_EQ(commits.load(), 2);  // the lost reply, then the transparent rerun
}

TEST_F(PgWorkerTest, ALostPullAnswerIsReplayedAndNeverGrantsASecondLease) {
  const std::string task = PublishTask("true");
  const std::string first = StartRun(task);
  StartRun(task);
  Worker w = NewWorker("w1");
  OfferToken offer = NewOffer();
  Result<PullAnswer> a = Pull(w, {offer}, 1);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_EQ(a->offers.size(), 1u);
  Result<PullAnswer> b = Pull(w, {offer}, 1);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_EQ(b->offers.size(), 1u);
  EXPECT_TRUE(b->offers[0].lease.replay);
  EXPECT_EQ(b->offers[0].lease.run_id, first);
  EXPECT_EQ(b->offers[0].lease.lease_version, 1);
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.run_dispatch_leases"), 1);
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.run_events WHERE type = 'attempt.leased'"), 1);
  // The same offer id under another token is someone else's.
  EXPECT_TRUE(Fails(Pull(w, {{offer.offer_id, Token(random_)}}), "lease_fenced"));
  // Bad proposals change nothing.
  EXPECT_TRUE(Fails(Pull(w, {{offer.offer_id, "short"}}), "invalid_lease_token"));
  EXPECT_TRUE(Fails(Pull(w, {{"not-a-uuid", Token(random_)}}), "invalid_id"));
  EXPECT_TRUE(Fails(Pull(w, {}), "invalid_argument"));
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.run_dispatch_leases"), 1);
}

TEST_F(PgWorkerTest, GrantsFollowPriorityThenFifoWithinTheSessionsCapacity) {
  const std::string task = PublishTask("true");
  const std::string low1 = StartRun(task);
  const std::string high = StartRun(task, 5);
  StartRun(task);
  Worker w = NewWorker("w1", 2);
  Result<PullAnswer> pulled = Pull(w, {NewOffer(), NewOffer(), NewOffer()}, 2);
  ASSERT_TRUE(pulled.ok()) << pulled.status().ToString();
  ASSERT_EQ(pulled->offers.size(), 2u);
  EXPECT_EQ(pulled->offers[0].lease.run_id, high);
  EXPECT_EQ(pulled->offers[1].lease.run_id, low1);
  // Both slots are taken by live leases: nothing more until one ends.
  EXPECT_EQ(Pull(w, {NewOffer()}, 2).value().offers.size(), 0u);
}

TEST_F(PgWorkerTest, ANotReadyReplicaGrantsNoNewLeaseButReplaysOneItGranted) {
  const std::string task = PublishTask("true");
  const std::string first = StartRun(task);
  const std::string second = StartRun(task);
  Worker w = NewWorker("w1", 4);
  const OfferToken granted = NewOffer();
  Result<PullAnswer> before = Pull(w, {granted}, 4);
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  ASSERT_EQ(before->offers.size(), 1u);
  EXPECT_EQ(before->offers[0].lease.run_id, first);

  // The readiness audit fails: the queued run stays queued, whatever the worker offers.
  service_->SetGranting(false);
  Result<PullAnswer> unready = Pull(w, {NewOffer(), NewOffer()}, 4);
  ASSERT_TRUE(unready.ok()) << unready.status().ToString();
  EXPECT_EQ(unready->offers.size(), 0u) << "a not-ready replica granted a lease";
  // The answer of the earlier pull, lost on the wire, is still delivered.
  Result<PullAnswer> replay = Pull(w, {granted}, 4);
  ASSERT_TRUE(replay.ok()) << replay.status().ToString();
  ASSERT_EQ(replay->offers.size(), 1u);
  EXPECT_EQ(replay->offers[0].lease.run_id, first);

  // Ready again: granted.
  service_->SetGranting(true);
  Result<PullAnswer> after = Pull(w, {NewOffer()}, 4);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  ASSERT_EQ(after->offers.size(), 1u);
  EXPECT_EQ(after->offers[0].lease.run_id, second);
}

TEST_F(PgWorkerTest, AJitteredRunIsNotGrantedBeforeItsReleaseTime) {
  const std::string task = PublishTask("true");
  const std::string held = StartRun(task);
  // As a trigger with jitter admits it: queued until a release time a minute from now.
  Count("WITH u AS (UPDATE ql3.runs SET queued_at_ms = created_at_ms + 60000 WHERE id = '" + held +
        "' RETURNING 1) SELECT count(*) FROM u");
  Worker w = NewWorker("w1", 2);
  Result<PullAnswer> early = Pull(w, {NewOffer()}, 2);
  ASSERT_TRUE(early.ok()) << early.status().ToString();
  EXPECT_EQ(early->offers.size(), 0u) << "granted before its release time";
  // Released (its time has come on the database clock): granted.
  Count("WITH u AS (UPDATE ql3.runs SET queued_at_ms = (extract(epoch FROM clock_timestamp()) * "
        "1000)::bigint - 1, created_at_ms = (extract(epoch FROM clock_timestamp()) * 1000)::bigint "
        "- 2000 WHERE id = '" + held + "' RETURNING 1) SELECT count(*) FROM u");
  Result<PullAnswer> released = Pull(w, {NewOffer()}, 2);
  ASSERT_TRUE(released.ok()) << released.status().ToString();
  ASSERT_EQ(released->offers.size(), 1u);
  EXPECT_EQ(released->offers[0].lease.run_id, held);
}

TEST_F(PgWorkerTest, ConcurrentPullsNeverGrantOneRunTwice) {
  const std::string task = PublishTask("true");
  constexpr int kRuns = 40;
  for (int i = 0; i < kRuns; ++i) StartRun(task);
  std::vector<Worker> workers;
  for (int i = 0; i < 4; ++i) workers.push_back(NewWorker("w" + std::to_string(i), 16));
  std::vector<std::vector<std::string>> granted(workers.size());
  std::vector<std::thread> threads;
  std::atomic<int> errors{0};
  for (size_t i = 0; i < workers.size(); ++i) {
    threads.emplace_back([&, i] {
      ::ql::testing::SeededRandom random(100 + i);
      for (int round = 0; round < 6; ++round) {
        std::vector<OfferToken> offers;
        for (int k = 0; k < 3; ++k) {
          offers.push_back({NewUuidV7(SystemClock().NowMs(), random), Token(random)});
        }
        Result<PullAnswer> a =
            service_->Pull(workers[i].id, workers[i].session, workers[i].generation, 16, offers);
        if (!a.ok()) {
          ++errors;
          continue;
        }
        for (const WorkerOffer& o : a->offers) granted[i].push_back(o.lease.run_id);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  std::set<std::string> all;
  size_t total = 0;
  for (const auto& g : granted) {
    total += g.size();
    all.insert(g.begin(), g.end());
  }
  EXPECT_EQ(total, all.size()) << "a run was granted twice";
  EXPECT_EQ(total, static_cast<size_t>(kRuns));
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.run_dispatch_leases WHERE status = 'granted'"), kRuns);
}

TEST_F(PgWorkerTest, ANewSessionFencesTheOldOneAndItsLeases) {
  const std::string run_id = StartRun(PublishTask("sleep 5"));
  Worker old_session = NewWorker("w1");
  OfferToken offer = Take(old_session);
  Worker fresh = old_session;
  Register(fresh);
  EXPECT_EQ(fresh.generation, old_session.generation + 1);

  const RunRecord before = Run(run_id);
  EXPECT_TRUE(Fails(service_->Renew(Call(old_session, offer)), "session_fenced"));
  EXPECT_TRUE(Fails(service_->AppendLog(Call(old_session, offer), 0, "x"), "session_fenced"));
  AttemptOutcome exited;
  exited.kind = AttemptOutcome::Kind::kExited;
  EXPECT_TRUE(Fails(service_->Complete(Call(old_session, offer), exited), "session_fenced"));
  EXPECT_TRUE(
      Fails(service_->Heartbeat(old_session.id, old_session.session, old_session.generation, 1),
            "session_fenced"));
  EXPECT_TRUE(Fails(Pull(old_session, {NewOffer()}), "session_fenced"));
  // The new session cannot use the old session's lease either.
  EXPECT_TRUE(Fails(service_->Renew(Call(fresh, offer)), "lease_fenced"));
  const RunRecord after = Run(run_id);
  EXPECT_EQ(after.status, "running");
  EXPECT_EQ(after.version, before.version);
  EXPECT_EQ(after.event_sequence, before.event_sequence);
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.run_log_chunks"), 0);
}

// The session row's locks: a lease step holds FOR KEY SHARE, a grant or heartbeat FOR NO KEY
// UPDATE, a registration that fences the session FOR UPDATE.
TEST_F(PgWorkerTest, ALeaseStepDoesNotQueueBehindAGrantOrHeartbeatOfItsSession) {
  StartRun(PublishTask("sleep 5"));
  Worker w = NewWorker("w1");
  const OfferToken offer = PullOne(w);
  // A barrier holds the session row as a grant or heartbeat of the same session does.
  std::unique_ptr<pg::Connection> held = HoldSession(w.session, "FOR NO KEY UPDATE");
  ASSERT_NE(held, nullptr);
  pg::Connection& barrier = *held;
  auto starting = std::async(std::launch::async, [&] { return service_->Starting(Call(w, offer)); });
  const bool done_while_held =
      starting.wait_for(std::chrono::seconds(3)) == std::future_status::ready;
  ASSERT_TRUE(barrier.Exec("COMMIT", {}, "barrier").ok());
  EXPECT_TRUE(done_while_held) << "the step waited for the session's grant or heartbeat";
  Result<std::string> started = starting.get();
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  EXPECT_EQ(*started, "starting");
}

TEST_F(PgWorkerTest, ARegistrationWaitsForALeaseStepInFlightAndFencesTheStepsAfterIt) {
  StartRun(PublishTask("sleep 5"));
  Worker old_session = NewWorker("w1");
  const OfferToken offer = PullOne(old_session);
  // A barrier holds the session row as a lease step in flight does.
  std::unique_ptr<pg::Connection> held = HoldSession(old_session.session, "FOR KEY SHARE");
  ASSERT_NE(held, nullptr);
  pg::Connection& barrier = *held;
  auto registered = std::async(std::launch::async, [&] {
    return service_->Register(old_session.id, json::object(), 4, 4);
  });
  const bool done_while_held =
      registered.wait_for(std::chrono::milliseconds(1500)) == std::future_status::ready;
  // The step in flight still reads its session unfenced.
  auto unfenced = barrier.Exec("SELECT status FROM ql3.worker_sessions WHERE id = $1",
                               {pg::P(old_session.session)}, "barrier");
  ASSERT_TRUE(barrier.Exec("COMMIT", {}, "barrier").ok());
  EXPECT_FALSE(done_while_held) << "the registration fenced a session under a step in flight";
  ASSERT_TRUE(unfenced.ok()) << unfenced.status().ToString();
  EXPECT_EQ(unfenced->Text(0, 0), "active");
  Result<WorkerSessionRecord> fresh = registered.get();
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  EXPECT_EQ(fresh->generation, old_session.generation + 1);
  // The steps after the fence are refused.
  EXPECT_TRUE(Fails(service_->Starting(Call(old_session, offer)), "session_fenced"));
}

TEST_F(PgWorkerTest, AWrongTokenAnotherWorkerOrARevokedCredentialChangesNothing) {
  OpenWithoutTokenTrust();  // the revocation is seen at once
  StartRun(PublishTask("sleep 5"));
  Worker w = NewWorker("w1");
  Worker other = NewWorker("w2");
  OfferToken offer = Take(w);
  EXPECT_TRUE(Fails(
      service_->Renew(LeaseCall{w.id, offer.offer_id, w.session, w.generation, Token(random_)}),
      "lease_fenced"));
  EXPECT_TRUE(Fails(service_->Renew(LeaseCall{other.id, offer.offer_id, other.session,
                                              other.generation, offer.lease_token}),
                    "lease_fenced"));
  EXPECT_TRUE(
      Fails(service_->Heartbeat(other.id, w.session, w.generation, 1), "session_not_found"));
  EXPECT_TRUE(Fails(service_->Authenticate("ql3_" + RandomHex(random_, 32)), "unauthorized"));
  ASSERT_TRUE(
      pg::RevokeCredential(*store_->admin_pool(), pg::CredentialKind::kWorker, "w1", SystemClock())
          .ok());
  EXPECT_TRUE(Fails(service_->Authenticate(w.token), "unauthorized"));
  EXPECT_EQ(service_->Authenticate(other.token).value(), other.id);
}

TEST_F(PgWorkerTest, AVerifiedTokenIsTrustedForTheBoundThenItsRevocationHolds) {
  WorkerServiceOptions options;
  options.auth_cache_ms = 600;
  Open(options);
  Worker w = NewWorker("w1");
  EXPECT_EQ(service_->Authenticate(w.token).value(), w.id);
  const auto verified = std::chrono::steady_clock::now();
  ASSERT_TRUE(
      pg::RevokeCredential(*store_->admin_pool(), pg::CredentialKind::kWorker, "w1", SystemClock())
          .ok());
  // Within the bound the verified token is not looked up again.
  Result<std::string> trusted = service_->Authenticate(w.token);
  if (std::chrono::steady_clock::now() - verified < std::chrono::milliseconds(500)) {
    EXPECT_TRUE(trusted.ok()) << trusted.status().ToString();
  }
  std::this_thread::sleep_until(verified + std::chrono::milliseconds(650));
  EXPECT_TRUE(Fails(service_->Authenticate(w.token), "unauthorized"));
  // An unknown token is never remembered, and a failed lookup is not either.
  EXPECT_TRUE(Fails(service_->Authenticate(w.token), "unauthorized"));
  WorkerServiceOptions bad;
  bad.auth_cache_ms = 60'001;
  EXPECT_EQ(ValidateWorkerServiceOptions(bad).reason(), "invalid_worker_options");
}

TEST_F(PgWorkerTest, AnExpiredLeaseRefusesEveryCallAndRecoveryRetriesTheRun) {
  WorkerServiceOptions options;
  options.lease_ttl_ms = 1000;
  options.heartbeat_interval_ms = 500;
  Open(options);
  const std::string task = PublishTask("sleep 5", json{{"max_attempts", 2},
                                                       {"retry_on_lost", true},
                                                       {"safety", "idempotent"},
                                                       {"backoff_base_ms", 0},
                                                       {"backoff_max_ms", 0}});
  const std::string run_id = StartRun(task);
  Worker dead = NewWorker("w1");
  OfferToken offer = Take(dead);
  std::this_thread::sleep_for(std::chrono::milliseconds(1300));
  EXPECT_TRUE(Fails(service_->Renew(Call(dead, offer)), "lease_expired"));
  AttemptOutcome exited;
  exited.kind = AttemptOutcome::Kind::kExited;
  EXPECT_TRUE(Fails(service_->Complete(Call(dead, offer), exited), "lease_expired"));
  EXPECT_EQ(Run(run_id).status, "running");

  PostgresClusterRecovery candidates(store_->runtime_pool());
  ClusterRecovery recovery(candidates, store_->runs(), SystemClock(), random_, metrics_);
  Result<RecoveryReport> report = recovery.RunOnce();
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->lost, 1);
  EXPECT_EQ(report->requeued, 1);
  EXPECT_EQ(Run(run_id).status, "queued");
  std::vector<AttemptRecord> attempts = store_->runs().ListAttempts(run_id).value();
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_EQ(attempts[0].status, "lost");
  EXPECT_EQ(attempts[1].status, "claimed");

  // The late worker's calls stay refused; another worker runs attempt 2 to the end.
  EXPECT_TRUE(Fails(service_->Renew(Call(dead, offer)), "attempt_finished"));
  Worker alive = NewWorker("w2");
  OfferToken second = Take(alive);
  exited.exit_code = 0;
  Result<CompleteAnswer> done = service_->Complete(Call(alive, second), exited);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->run_status, "succeeded");
  EXPECT_EQ(store_->runs().ListAttempts(run_id).value().back().attempt, 2);
  const std::vector<std::string> types = EventTypes(run_id);
  EXPECT_NE(std::find(types.begin(), types.end(), "attempt.late_callback_ignored"), types.end());
}

TEST_F(PgWorkerTest, AnExpiredLeaseWithoutRetryPolicyFailsTheRun) {
  WorkerServiceOptions options;
  options.lease_ttl_ms = 1000;
  options.heartbeat_interval_ms = 500;
  Open(options);
  const std::string run_id = StartRun(PublishTask("sleep 5"));
  Worker dead = NewWorker("w1");
  Take(dead);
  std::this_thread::sleep_for(std::chrono::milliseconds(1300));
  PostgresClusterRecovery candidates(store_->runtime_pool());
  ClusterRecovery recovery(candidates, store_->runs(), SystemClock(), random_, metrics_);
  ASSERT_TRUE(recovery.RunOnce().ok());
  EXPECT_EQ(Run(run_id).status, "failed");
  EXPECT_EQ(store_->runs().ListAttempts(run_id).value().size(), 1u);
}

TEST_F(PgWorkerTest, AnExpiredUnstartedLeaseIsGrantedAgainAndTheOldOfferIsGone) {
  WorkerServiceOptions options;
  options.lease_ttl_ms = 1000;
  options.heartbeat_interval_ms = 500;
  Open(options);
  const std::string run_id = StartRun(PublishTask("true"));
  Worker slow = NewWorker("w1");
  OfferToken offer = NewOffer();
  ASSERT_EQ(Pull(slow, {offer}).value().offers.size(), 1u);
  Worker other = NewWorker("w2");
  EXPECT_EQ(Pull(other, {NewOffer()}).value().offers.size(), 0u);  // still leased
  std::this_thread::sleep_for(std::chrono::milliseconds(1300));
  Result<PullAnswer> again = Pull(other, {NewOffer()});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ASSERT_EQ(again->offers.size(), 1u);
  EXPECT_EQ(again->offers[0].lease.run_id, run_id);
  EXPECT_EQ(again->offers[0].lease.lease_version, 2);
  EXPECT_TRUE(Fails(service_->Starting(Call(slow, offer)), "lease_not_found"));
  EXPECT_EQ(Run(run_id).status, "queued");
}

// Approved runs (DESIGN §9.1): once a worker acknowledged the start, a lost lease leaves the
// effect unknown, so the run waits for a human whatever its retry policy says.
class PgWorkerApprovalTest : public PgWorkerTest {
 protected:
  void SetUp() override {
    WorkerServiceOptions options;
    options.lease_ttl_ms = 1000;
    options.heartbeat_interval_ms = 500;
    evidence_ = true;
    Open(options);
    testing::TestPrincipals people(store_->governance(), SystemClock(), random_);
    ASSERT_TRUE(people.Bootstrap().ok());
    const std::string project = control_->EnsureDefaultProject()->id;
    ops_ = people.Add("ops", Role::kOperator, project).value();
    amy_ = people.Add("amy", Role::kAdmin, project).value();
    json body{{"name", "guarded"},
              {"spec", {{"command", {{"kind", "shell"}, {"command", "sleep 5"}}}}},
              {"retry",
               {{"max_attempts", 3},
                {"retry_on_lost", true},
                {"safety", "idempotent"},
                {"backoff_base_ms", 0},
                {"backoff_max_ms", 0}}},
              {"approval", {{"required", true}}}};
    Result<PublishedTask> task = control_->PublishTask(TaskWrite{body, std::nullopt});
    ASSERT_TRUE(task.ok()) << task.status().ToString();
    StartRunRequest request;
    request.task_id = task->task.head.task_id;
    Result<StartedRun> requested = control_->StartRun(request, Caller{ops_.id, "", "req"});
    ASSERT_TRUE(requested.ok() && requested->approval.has_value()) << requested.status().ToString();
    Result<ApproveResult> approved =
        control_->Approve(requested->approval->id, Caller{amy_.id, "", "approve"});
    ASSERT_TRUE(approved.ok()) << approved.status().ToString();
    run_id_ = approved->run.id;
  }

  Result<RecoveryReport> Recover() {
    PostgresClusterRecovery candidates(store_->runtime_pool());
    ClusterRecovery recovery(candidates, store_->runs(), SystemClock(), random_, metrics_);
    return recovery.RunOnce();
  }

  PrincipalRecord ops_;
  PrincipalRecord amy_;
  std::string run_id_;
};

TEST_F(PgWorkerApprovalTest, AStartedApprovedRunWhoseLeaseExpiredWaitsForRecovery) {
  Worker dead = NewWorker("w1");
  OfferToken offer = Take(dead);
  std::this_thread::sleep_for(std::chrono::milliseconds(1300));
  Result<RecoveryReport> report = Recover();
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->lost, 1);
  EXPECT_EQ(report->requeued, 0);
  RunRecord run = Run(run_id_);
  EXPECT_EQ(run.status, "recovery_required");
  EXPECT_EQ(run.error_code, "attempt_lost");
  std::vector<AttemptRecord> attempts = store_->runs().ListAttempts(run_id_).value();
  ASSERT_EQ(attempts.size(), 1u);
  EXPECT_EQ(attempts[0].status, "lost");
  std::vector<std::string> types = EventTypes(run_id_);
  EXPECT_EQ(std::count(types.begin(), types.end(), "run.recovery_required"), 1);

  // Nothing runs it again: no later cycle requeues it, no worker is offered it.
  ASSERT_TRUE(Recover().ok());
  Worker other = NewWorker("w2");
  EXPECT_EQ(Pull(other, {NewOffer()}).value().offers.size(), 0u);
  // The dead worker's late result is evidence of how the command ended: it resolves the run
  // (automatic evidence resolution), still without a second execution.
  AttemptOutcome exited;
  exited.kind = AttemptOutcome::Kind::kExited;
  exited.exit_code = 0;
  Result<CompleteAnswer> late = service_->Complete(Call(dead, offer), exited);
  ASSERT_TRUE(late.ok()) << late.status().ToString();
  EXPECT_EQ(late->run_status, "succeeded");
  EXPECT_EQ(late->attempt_status, "lost");
  EXPECT_EQ(Run(run_id_).status, "succeeded");
  Result<RunResolutionRecord> resolution = store_->approvals().GetResolution(run_id_);
  ASSERT_TRUE(resolution.ok()) << resolution.status().ToString();
  EXPECT_FALSE(resolution->resolved_by.has_value());
  EXPECT_NE(resolution->reason.find("exit code 0"), std::string::npos) << resolution->reason;
  EXPECT_EQ(store_->runs().ListAttempts(run_id_).value().size(), 1u);
  EXPECT_EQ(Pull(other, {NewOffer()}).value().offers.size(), 0u);
  // A repeated report changes nothing more.
  EXPECT_TRUE(Fails(service_->Complete(Call(dead, offer), exited), "attempt_finished"));
  types = EventTypes(run_id_);
  EXPECT_EQ(std::count(types.begin(), types.end(), "run.recovery_resolved"), 1);
  EXPECT_EQ(std::count(types.begin(), types.end(), "run.succeeded"), 1);
}

TEST_F(PgWorkerApprovalTest, WithoutAnApprovalStoreALateResultIsRefusedAndTheRunWaits) {
  evidence_ = false;
  WorkerServiceOptions options;
  options.lease_ttl_ms = 1000;
  options.heartbeat_interval_ms = 500;
  options.logs = logs_.get();
  service_ = std::make_unique<WorkerService>(*sessions_, *leases_, store_->runs(), SystemClock(),
                                             random_, metrics_, options);
  Worker dead = NewWorker("w1");
  OfferToken offer = Take(dead);
  std::this_thread::sleep_for(std::chrono::milliseconds(1300));
  ASSERT_TRUE(Recover().ok());
  AttemptOutcome exited;
  exited.kind = AttemptOutcome::Kind::kExited;
  EXPECT_TRUE(Fails(service_->Complete(Call(dead, offer), exited), "attempt_finished"));
  EXPECT_EQ(Run(run_id_).status, "recovery_required");
  std::vector<std::string> types = EventTypes(run_id_);
  EXPECT_NE(std::find(types.begin(), types.end(), "attempt.late_callback_ignored"), types.end());
}

TEST_F(PgWorkerApprovalTest, AHumanResolutionAndALateWorkerResultHaveOneTerminalWinner) {
  Worker dead = NewWorker("w1");
  OfferToken offer = Take(dead);
  std::this_thread::sleep_for(std::chrono::milliseconds(1300));
  ASSERT_TRUE(Recover().ok());
  ASSERT_EQ(Run(run_id_).status, "recovery_required");
  // A barrier holds the run's row: the resolution queues on it while the late result arrives.
  auto conn = pg::Connection::Open(PgTestCluster::Get().Url(pg::kMigrationRole, db_), {});
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  pg::Connection& barrier = **conn;
  ASSERT_TRUE(barrier.Exec("BEGIN", {}, "barrier").ok());
  auto locked =
      barrier.Exec("SELECT 1 FROM ql3.runs WHERE id = $1 FOR UPDATE", {pg::P(run_id_)}, "barrier");
  ASSERT_TRUE(locked.ok()) << locked.status().ToString();
  auto resolve = std::async(std::launch::async, [&] {
    return control_->ResolveRun(run_id_, "succeeded", "the deploy log shows it finished",
                                Caller{amy_.id, "", "resolve"});
  });
  AttemptOutcome exited;
  exited.kind = AttemptOutcome::Kind::kExited;
  exited.exit_code = 1;
  auto late =
      std::async(std::launch::async, [&] { return service_->Complete(Call(dead, offer), exited); });
  // Both queue on the run's row: the resolution to end it, the late result to record itself.
  const std::string waiting =
      "SELECT count(*) FROM pg_stat_activity WHERE datname = '" + db_ +
      "' AND wait_event_type = 'Lock' AND wait_event IN ('transactionid', 'tuple')";
  bool queued = false;
  for (int i = 0; i < 500 && !queued; ++i) {
    queued = Count(waiting) == 2;
    if (!queued) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(queued) << "the resolution and the late result did not both queue on the run";
  ASSERT_TRUE(barrier.Exec("COMMIT", {}, "barrier").ok());
  // Exactly one of them resolves the run: the human (the late result is then refused as late)
  // or the evidence (exit 1: failed; the human's different resolution is then refused).
  Result<CompleteAnswer> reported = late.get();
  Result<ResolveRunResult> resolved = resolve.get();
  ASSERT_NE(reported.ok(), resolved.ok())
      << reported.status().ToString() << " / " << resolved.status().ToString();
  RunRecord run = Run(run_id_);
  Result<RunResolutionRecord> resolution = store_->approvals().GetResolution(run_id_);
  ASSERT_TRUE(resolution.ok()) << resolution.status().ToString();
  if (resolved.ok()) {
    EXPECT_TRUE(Fails(reported, "attempt_finished"));
    EXPECT_EQ(run.status, "succeeded");
    EXPECT_EQ(resolution->resolved_by, amy_.id);
  } else {
    EXPECT_EQ(resolved.status().reason(), "run_already_resolved") << resolved.status().ToString();
    EXPECT_EQ(reported->run_status, "failed");
    EXPECT_EQ(run.status, "failed");
    EXPECT_FALSE(resolution->resolved_by.has_value());
  }
  std::cout << "winner: " << (resolved.ok() ? "the human resolution" : "the late result") << "\n";
  // And a result arriving after the resolution changes nothing either.
  EXPECT_TRUE(Fails(service_->Complete(Call(dead, offer), exited), "attempt_finished"));
  EXPECT_EQ(Run(run_id_).status, run.status);
  EXPECT_FALSE(run.exit_code.has_value());
  const std::vector<std::string> types = EventTypes(run_id_);
  int terminal = 0;
  for (const std::string& t : types) {
    if (t == "run.succeeded" || t == "run.failed" || t == "run.cancelled" || t == "run.timed_out") {
      ++terminal;
    }
  }
  EXPECT_EQ(terminal, 1);
  EXPECT_EQ(std::count(types.begin(), types.end(), "run.recovery_resolved"), 1);
  EXPECT_GE(std::count(types.begin(), types.end(), "attempt.late_callback_ignored"), 1);
  ASSERT_EQ(store_->runs().ListAttempts(run_id_).value().back().status, "lost");
}

TEST_F(PgWorkerApprovalTest, AnApprovedRunWhoseWorkerNeverStartedItIsGrantedAgain) {
  Worker slow = NewWorker("w1");
  OfferToken offer = NewOffer();
  ASSERT_EQ(Pull(slow, {offer}).value().offers.size(), 1u);
  std::this_thread::sleep_for(std::chrono::milliseconds(1300));
  Result<RecoveryReport> report = Recover();
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->redispatch, 1);
  EXPECT_EQ(report->lost, 0);
  EXPECT_EQ(Run(run_id_).status, "queued");
  Worker other = NewWorker("w2");
  OfferToken second = Take(other);
  AttemptOutcome exited;
  exited.kind = AttemptOutcome::Kind::kExited;
  exited.exit_code = 0;
  Result<CompleteAnswer> done = service_->Complete(Call(other, second), exited);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->run_status, "succeeded");
  std::vector<AttemptRecord> attempts = store_->runs().ListAttempts(run_id_).value();
  ASSERT_EQ(attempts.size(), 1u);
  EXPECT_EQ(attempts[0].status, "succeeded");
  const std::vector<std::string> types = EventTypes(run_id_);
  EXPECT_EQ(std::count(types.begin(), types.end(), "run.recovery_required"), 0);
}

TEST_F(PgWorkerTest, CancelReachesTheWorkerAndTheRunEndsCancelled) {
  const std::string run_id = StartRun(PublishTask("sleep 30"));
  Worker w = NewWorker("w1");
  OfferToken offer = Take(w);
  ASSERT_TRUE(control_->CancelRun(run_id, std::string("stop")).ok());
  EXPECT_TRUE(service_->Renew(Call(w, offer)).value().cancel_requested);
  Result<HeartbeatAnswer> beat = service_->Heartbeat(w.id, w.session, w.generation, 3);
  ASSERT_TRUE(beat.ok()) << beat.status().ToString();
  EXPECT_EQ(beat->cancel, std::vector<std::string>{offer.offer_id});
  // A pull says so too, whether or not it grants anything.
  Result<PullAnswer> pulled = Pull(w, {NewOffer()});
  ASSERT_TRUE(pulled.ok()) << pulled.status().ToString();
  EXPECT_TRUE(pulled->offers.empty());
  EXPECT_EQ(pulled->cancel, std::vector<std::string>{offer.offer_id});
  // Whatever the command did, a cancel request ends the run cancelled.
  AttemptOutcome exited;
  exited.kind = AttemptOutcome::Kind::kExited;
  exited.exit_code = 0;
  Result<CompleteAnswer> done = service_->Complete(Call(w, offer), exited);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->run_status, "cancelled");
}

TEST_F(PgWorkerTest, CancellingALeasedUnstartedRunEndsItAndRefusesItsStart) {
  const std::string run_id = StartRun(PublishTask("true"));
  Worker w = NewWorker("w1");
  OfferToken offer = NewOffer();
  ASSERT_EQ(Pull(w, {offer}).value().offers.size(), 1u);
  ASSERT_TRUE(control_->CancelRun(run_id, std::nullopt).ok());
  EXPECT_EQ(Run(run_id).status, "cancelled");
  EXPECT_TRUE(Fails(service_->Starting(Call(w, offer)), "attempt_finished"));
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.run_dispatch_leases WHERE status = 'granted'"), 0);
  const std::vector<std::string> types = EventTypes(run_id);
  EXPECT_NE(std::find(types.begin(), types.end(), "attempt.late_callback_ignored"), types.end());
}

TEST_F(PgWorkerTest, LogsAreAppendedInOrderAndCappedWithOneTruncationEvent) {
  WorkerServiceOptions options;
  options.log_cap_bytes = 1024;
  Open(options);
  const std::string run_id = StartRun(PublishTask("true"));
  Worker w = NewWorker("w1");
  OfferToken offer = Take(w);
  const std::string first(1000, 'a');
  EXPECT_EQ(service_->AppendLog(Call(w, offer), 0, first).value().next_offset, 1000);
  EXPECT_TRUE(Fails(service_->AppendLog(Call(w, offer), 5, "gap"), "log_offset_mismatch"));
  EXPECT_TRUE(Fails(service_->AppendLog(Call(w, offer), 1001, "gap"), "log_offset_mismatch"));
  Result<LeaseLogAppend> over = service_->AppendLog(Call(w, offer), 1000, std::string(100, 'b'));
  ASSERT_TRUE(over.ok()) << over.status().ToString();
  EXPECT_TRUE(over->truncated);
  EXPECT_TRUE(service_->AppendLog(Call(w, offer), 1100, "more").value().truncated);
  EXPECT_EQ(Count("SELECT coalesce(sum(octet_length(data)), 0) FROM ql3.run_log_chunks"), 1024);
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.run_events WHERE type = 'attempt.log_truncated'"), 1);
  EXPECT_TRUE(Fails(service_->AppendLog(Call(w, offer), 0, ""), "invalid_argument"));
  EXPECT_EQ(Run(run_id).status, "running");
}

TEST_F(PgWorkerTest, EachAttemptHasItsOwnLogAndRetriesAreOfferedWhatTheRunCapLeaves) {
  WorkerServiceOptions options;
  options.log_cap_bytes = 200 * 1024;
  options.run_log_cap_bytes = 300 * 1024;
  Open(options);
  const std::string run_id = StartRun(PublishTask(
      "exit 1", json{{"max_attempts", 3}, {"backoff_base_ms", 0}, {"backoff_max_ms", 0}}));
  Worker w = NewWorker("w1");
  PostgresClusterRecovery candidates(store_->runtime_pool());
  ClusterRecovery recovery(candidates, store_->runs(), SystemClock(), random_, metrics_);
  std::vector<int64_t> caps;
  std::vector<std::string> texts;
  for (int attempt = 1; attempt <= 3; ++attempt) {
    OfferToken offer = NewOffer();
    Result<PullAnswer> pulled = Pull(w, {offer});
    ASSERT_TRUE(pulled.ok()) << pulled.status().ToString();
    ASSERT_EQ(pulled->offers.size(), 1u) << attempt;
    caps.push_back(pulled->offers[0].log_cap_bytes);
    ASSERT_TRUE(service_->Starting(Call(w, offer)).ok());
    ASSERT_TRUE(service_->Running(Call(w, offer), 4242).ok());
    const std::string head = "attempt " + std::to_string(attempt) + "\n";
    const std::string tail = "\nERROR in attempt " + std::to_string(attempt) + "\n";
    texts.push_back(head + std::string(150 * 1024 - head.size() - tail.size(), 'x') + tail);
    ASSERT_TRUE(service_->AppendLog(Call(w, offer), 0, texts.back()).ok());
    AttemptOutcome failed;
    failed.kind = AttemptOutcome::Kind::kExited;
    failed.exit_code = 1;
    ASSERT_TRUE(service_->Complete(Call(w, offer), failed).ok());
    if (attempt < 3) {
      ASSERT_TRUE(recovery.RunOnce().ok());
      ASSERT_EQ(Run(run_id).status, "queued") << attempt;
    }
  }
  // 150 KiB of the run's 300 KiB are left for attempt 2, none for attempt 3, which still keeps
  // its head and tail.
  EXPECT_EQ(caps, (std::vector<int64_t>{200 * 1024, 150 * 1024, kMinAttemptLogBytes}));
  EXPECT_EQ(Run(run_id).status, "failed");
  const std::vector<AttemptRecord> attempts = store_->runs().ListAttempts(run_id).value();
  ASSERT_EQ(attempts.size(), 3u);
  for (size_t i = 0; i < attempts.size(); ++i) {
    Result<LogChunk> read = logs_->ReadLog(attempts[i], 0, kMaxLogChunkBytes);
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    EXPECT_TRUE(read->data == texts[i]) << "attempt " << i + 1 << " reads only its own log";
    EXPECT_EQ(read->size, static_cast<int64_t>(texts[i].size()));
    EXPECT_EQ(logs_->LogSize(attempts[i]).value(), static_cast<int64_t>(texts[i].size()));
  }
}

TEST_F(PgWorkerTest, TheControlPlaneEndsARunThatOutlivesItsTimeout) {
  const std::string run_id = StartRun(PublishTask("sleep 30", json(), 50));
  Worker w = NewWorker("w1");
  OfferToken offer = Take(w);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  PostgresClusterRecovery candidates(store_->runtime_pool());
  ClusterRecovery recovery(candidates, store_->runs(), SystemClock(), random_, metrics_);
  recovery.EnforceTimeouts(*leases_, 100);
  Result<RecoveryReport> report = recovery.RunOnce();
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->timed_out, 1);
  EXPECT_EQ(Run(run_id).status, "timed_out");
  EXPECT_TRUE(Fails(service_->Renew(Call(w, offer)), "attempt_finished"));
}

// A timeout a worker reports is retried like a failure only when the task says
// retry_on_timeout; one the control plane decides itself (the worker did not end the command)
// is retried only when lost attempts may be too.
TEST_F(PgWorkerTest, ATimeoutIsRetriedOnlyWhenTheTaskSaysSo) {
  AttemptOutcome timed_out;
  timed_out.kind = AttemptOutcome::Kind::kTimedOut;
  const json once{{"max_attempts", 2}, {"backoff_base_ms", 0}, {"backoff_max_ms", 0}};
  json again = once;
  again["retry_on_timeout"] = true;
  Worker w = NewWorker("w1");

  const std::string plain = StartRun(PublishTask("sleep 30", once, 60'000));
  Result<CompleteAnswer> ended = service_->Complete(Call(w, Take(w)), timed_out);
  ASSERT_TRUE(ended.ok()) << ended.status().ToString();
  EXPECT_EQ(ended->run_status, "timed_out");
  EXPECT_EQ(store_->runs().ListAttempts(plain).value().size(), 1u);

  const std::string retried = StartRun(PublishTask("sleep 30", again, 60'000));
  EXPECT_TRUE(Run(retried).retry_policy.retry_on_timeout);
  Result<CompleteAnswer> first = service_->Complete(Call(w, Take(w)), timed_out);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->attempt_status, "timed_out");
  EXPECT_EQ(first->run_status, "retry_wait");
  PostgresClusterRecovery candidates(store_->runtime_pool());
  ClusterRecovery recovery(candidates, store_->runs(), SystemClock(), random_, metrics_);
  ASSERT_TRUE(recovery.RunOnce().ok());
  EXPECT_EQ(Run(retried).status, "queued");
  Result<CompleteAnswer> second = service_->Complete(Call(w, Take(w)), timed_out);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(second->run_status, "timed_out");  // max_attempts bounds timeouts too
  std::vector<AttemptRecord> attempts = store_->runs().ListAttempts(retried).value();
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_EQ(attempts[0].status, "timed_out");
  EXPECT_EQ(attempts[1].status, "timed_out");

  // The control plane ends a run that outlived its timeout without the worker: the command may
  // still run there, so retry_on_timeout alone does not start it again.
  const std::string overdue = StartRun(PublishTask("sleep 30", again, 50));
  Take(w);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  recovery.EnforceTimeouts(*leases_, 100);
  Result<RecoveryReport> report = recovery.RunOnce();
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->timed_out, 1);
  EXPECT_EQ(Run(overdue).status, "timed_out");
  EXPECT_EQ(store_->runs().ListAttempts(overdue).value().size(), 1u);
}

TEST_F(PgWorkerTest, SessionsDrainAndGoOfflineAndTakeNoRunsThen) {
  StartRun(PublishTask("true"));
  Worker w = NewWorker("w1");
  Result<WorkerSessionRecord> drained =
      service_->SetStatus(w.id, w.session, w.generation, "draining");
  ASSERT_TRUE(drained.ok()) << drained.status().ToString();
  EXPECT_EQ(drained->available_slots, 0);
  EXPECT_TRUE(Fails(Pull(w, {NewOffer()}), "session_inactive"));
  ASSERT_TRUE(service_->SetStatus(w.id, w.session, w.generation, "offline").ok());
  // Offline is final for the session, not for the worker: it registers a new one.
  EXPECT_TRUE(Fails(Pull(w, {NewOffer()}), "session_expired"));
  EXPECT_TRUE(
      Fails(service_->SetStatus(w.id, w.session, w.generation, "draining"), "session_expired"));
  EXPECT_TRUE(Fails(service_->Heartbeat(w.id, w.session, w.generation, 1), "session_expired"));
  EXPECT_TRUE(Fails(service_->Register(w.id, json::array(), 1, 1), "invalid_argument"));
  EXPECT_TRUE(Fails(service_->Register(w.id, json::object(), 0, 0), "invalid_argument"));
  EXPECT_TRUE(Fails(service_->Register(w.id, json::object(), 2, 3), "invalid_argument"));
}

TEST_F(PgWorkerTest, AnExpiredSessionIsNotADrainAHeartbeatExtendsItAndOfflineIsReplaced) {
  const std::string task = PublishTask("true");
  StartRun(task);
  Worker w = NewWorker("w1");
  OfferToken running = Take(w);
  StartRun(task);
  // The session expired by the database clock (its heartbeats were lost in an outage).
  ASSERT_TRUE(PgTestCluster::Get()
                  .server()
                  .Psql(db_, "UPDATE ql3.worker_sessions SET expires_at_ms = 1 WHERE id = '" +
                                 w.session + "'")
                  .ok());
  Result<PullAnswer> expired = Pull(w, {NewOffer()});
  EXPECT_TRUE(Fails(expired, "session_expired"));
  EXPECT_NE(expired.status().message().find("heartbeat"), std::string::npos);
  Result<HeartbeatAnswer> extended = service_->Heartbeat(w.id, w.session, w.generation, 4);
  ASSERT_TRUE(extended.ok()) << extended.status().ToString();
  EXPECT_EQ(extended->session.status, "active");
  Result<PullAnswer> again = Pull(w, {NewOffer()});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->offers.size(), 1u);

  // Offline: the leases it holds can still be renewed and reported, and a new session of the
  // same worker takes runs.
  ASSERT_TRUE(service_->SetStatus(w.id, w.session, w.generation, "offline").ok());
  EXPECT_TRUE(service_->Renew(Call(w, running)).ok());
  StartRun(task);
  Register(w);
  Result<PullAnswer> fresh = Pull(w, {NewOffer()});
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  EXPECT_EQ(fresh->offers.size(), 1u);
}

// Worker placement (DESIGN §6.6): a pool serves the projects granted to it (or all, when open),
// a run goes only to a worker of the pool its plan names and with the labels it needs.
TEST_F(PgWorkerTest, APoolServesOnlyItsProjectsAndARevokeStopsNewGrants) {
  const std::string project = DefaultProject();
  const std::string other = NewProject("other");
  const std::string gpu_task = PublishIn("", json{{"pool", "gpu"}});
  const std::string other_gpu_task = PublishIn("other", json{{"pool", "gpu"}});
  const std::string plain = StartRun(PublishTask("true"));
  const std::string gpu1 = StartRun(gpu_task);
  const std::string gpu2 = StartRun(gpu_task);
  Worker gpu = NewWorker("gpu-1", 8, Place("gpu"));
  Worker cpu = NewWorker("cpu-1", 8);

  // Nobody configured pool gpu: it serves no project.
  EXPECT_TRUE(PullRuns(gpu, 4).empty()) << "a pool without a row was served";
  // The default pool's worker takes the default pool's run, never one that needs pool gpu.
  EXPECT_EQ(PullRuns(cpu, 4), std::vector<std::string>{plain});

  // Granted to the other project: its runs, not this project's.
  ASSERT_TRUE(Grant("gpu", other).ok());
  const std::string other_gpu = StartRunIn("other", other_gpu_task);
  EXPECT_EQ(PullRuns(gpu, 4), std::vector<std::string>{other_gpu})
      << "a pool served a project it was not granted to";

  ASSERT_TRUE(Grant("gpu", project).ok());
  const std::vector<std::pair<std::string, OfferToken>> granted = PullGrants(gpu, 1);
  ASSERT_EQ(granted.size(), 1u);
  EXPECT_EQ(granted[0].first, gpu1);
  EXPECT_TRUE(PullRuns(cpu, 4).empty()) << "a run that needs pool gpu went to the default pool";

  // Revoked: no new grant of the project's runs; the lease granted before still starts.
  ASSERT_TRUE(Revoke("gpu", project).ok());
  EXPECT_TRUE(PullRuns(gpu, 4).empty()) << "granted after the revoke";
  EXPECT_EQ(Run(gpu2).status, "queued");
  EXPECT_EQ(service_->Starting(Call(gpu, granted[0].second)).value(), "starting");
  EXPECT_TRUE(Fails(Revoke("gpu", project), "pool_grant_not_found"));
  const PoolRecord pool = store_->placement().GetPool("gpu").value();
  EXPECT_FALSE(pool.serves_all_projects);
  ASSERT_EQ(pool.grants.size(), 1u);
  EXPECT_EQ(pool.grants[0].project_id, other);
}

TEST_F(PgWorkerTest, ARunNeedingLabelsGoesOnlyToAWorkerCarryingThem) {
  const std::string run = StartRun(PublishIn("", json{{"labels", {{"arch", "arm64"}}}}));
  Worker amd = NewWorker("amd", 4, Place("default", {{"arch", "amd64"}}));
  Worker bare = NewWorker("bare", 4);
  Worker arm = NewWorker("arm", 4, Place("default", {{"arch", "arm64"}, {"zone", "b"}}));
  EXPECT_TRUE(PullRuns(amd, 4).empty()) << "granted to a worker with another arch";
  EXPECT_TRUE(PullRuns(bare, 4).empty()) << "granted to a worker without labels";
  // Labels the run does not ask for are no obstacle.
  EXPECT_EQ(PullRuns(arm, 4), std::vector<std::string>{run});
  // A run that needs no label goes to any worker of its pool.
  const std::string any = StartRun(PublishTask("true"));
  EXPECT_EQ(PullRuns(amd, 4), std::vector<std::string>{any});
}

TEST_F(PgWorkerTest, APoolsCapBoundsTheLiveLeasesOfAllItsWorkers) {
  ASSERT_TRUE(Grant("gpu", DefaultProject()).ok());
  Result<PoolRecord> capped = SetPoolMax("gpu", 2);
  ASSERT_TRUE(capped.ok()) << capped.status().ToString();
  EXPECT_EQ(capped->max_running, 2);
  const std::string task = PublishIn("", json{{"pool", "gpu"}});
  std::vector<std::string> runs;
  for (int i = 0; i < 5; ++i) runs.push_back(StartRun(task));
  Worker a = NewWorker("gpu-a", 8, Place("gpu"));
  Worker b = NewWorker("gpu-b", 8, Place("gpu"));

  const std::vector<std::pair<std::string, OfferToken>> first = PullGrants(a, 8);
  ASSERT_EQ(first.size(), 2u) << "the pool's cap is 2 whatever the session could take";
  EXPECT_EQ(first[0].first, runs[0]);
  EXPECT_EQ(first[1].first, runs[1]);
  EXPECT_TRUE(PullRuns(a, 8).empty());
  EXPECT_TRUE(PullRuns(b, 8).empty()) << "another worker of the pool went past its cap";
  const PoolRecord pool = store_->placement().GetPool("gpu").value();
  EXPECT_EQ(pool.running, 2);
  EXPECT_EQ(pool.live_workers, 2);

  // One ends: one more, to either worker.
  Finish(a, first[0].second);
  EXPECT_EQ(PullRuns(b, 8), std::vector<std::string>{runs[2]});
  EXPECT_TRUE(PullRuns(a, 8).empty());
  // The cap cleared: the rest.
  ASSERT_TRUE(SetPoolMax("gpu", std::nullopt).ok());
  EXPECT_EQ(PullRuns(a, 8), (std::vector<std::string>{runs[3], runs[4]}));
}

TEST_F(PgWorkerTest, AGrantsCapBoundsItsProjectsLiveLeasesInThePool) {
  const std::string project = DefaultProject();
  const std::string other = NewProject("other");
  ASSERT_TRUE(Grant("gpu", project, 2).ok());
  ASSERT_TRUE(Grant("gpu", other).ok());
  const std::string task = PublishIn("", json{{"pool", "gpu"}});
  const std::string other_task = PublishIn("other", json{{"pool", "gpu"}});
  std::vector<std::string> runs;
  for (int i = 0; i < 5; ++i) runs.push_back(StartRun(task));
  std::vector<std::string> other_runs;
  for (int i = 0; i < 3; ++i) other_runs.push_back(StartRunIn("other", other_task));
  Worker w = NewWorker("gpu-1", 16, Place("gpu"));

  const std::vector<std::pair<std::string, OfferToken>> granted = PullGrants(w, 16);
  std::set<std::string> got;
  for (const auto& [run_id, offer] : granted) got.insert(run_id);
  // Two of the capped project, every run of the uncapped one.
  EXPECT_EQ(got,
            (std::set<std::string>{runs[0], runs[1], other_runs[0], other_runs[1], other_runs[2]}));
  EXPECT_TRUE(PullRuns(w, 4).empty());
  for (const auto& [run_id, offer] : granted) {
    if (run_id == runs[0]) Finish(w, offer);
  }
  EXPECT_EQ(PullRuns(w, 4), std::vector<std::string>{runs[2]});
  EXPECT_TRUE(PullRuns(w, 4).empty());
}

// Runs by project: "A" for the default project's, "B" for the other's.
std::string Projects(const std::vector<std::string>& granted, const std::set<std::string>& a,
                     const std::set<std::string>& b) {
  std::string out;
  for (const std::string& run : granted) out += a.count(run) ? "A" : b.count(run) ? "B" : "?";
  return out;
}

TEST_F(PgWorkerTest, ProjectsTakeTurnsSoOneBacklogDoesNotStarveAnotherProjectsRuns) {
  NewProject("other");
  const std::string a_task = PublishTask("true");
  const std::string b_task = PublishIn("other");
  std::set<std::string> a;
  for (int i = 0; i < 200; ++i) a.insert(StartRun(a_task));
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::set<std::string> b;
  for (int i = 0; i < 3; ++i) b.insert(StartRunIn("other", b_task));
  Worker w = NewWorker("w1", 8);
  // Turns by the fewest live leases, ties to the older queued head (the backlog's).
  EXPECT_EQ(Projects(PullRuns(w, 8), a, b), "ABABABAA");
}

TEST_F(PgWorkerTest, GrantWeightsSplitAPoolsRunsBetweenItsProjects) {
  const std::string other = NewProject("other");
  ASSERT_TRUE(Grant("gpu", DefaultProject(), std::nullopt, 3).ok());
  ASSERT_TRUE(Grant("gpu", other, std::nullopt, 1).ok());
  const std::string a_task = PublishIn("", json{{"pool", "gpu"}});
  const std::string b_task = PublishIn("other", json{{"pool", "gpu"}});
  std::set<std::string> a;
  for (int i = 0; i < 20; ++i) a.insert(StartRun(a_task));
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::set<std::string> b;
  for (int i = 0; i < 6; ++i) b.insert(StartRunIn("other", b_task));
  Worker w = NewWorker("gpu-1", 16, Place("gpu"));
  // Each next run to the smallest (live + taken) / weight, ties to the older head.
  EXPECT_EQ(Projects(PullRuns(w, 8), a, b), "ABAAABAA");
  // The live leases count in the next grant: 9 to 3 in all.
  EXPECT_EQ(Projects(PullRuns(w, 4), a, b), "ABAA");
}

TEST_F(PgWorkerTest, ADrainedWorkerIsGrantedNothingUntilResumed) {
  const std::string task = PublishTask("true");
  const std::string first = StartRun(task);
  const std::string second = StartRun(task);
  Worker w = NewWorker("w1");
  Worker other = NewWorker("w2");
  Result<WorkerRecord> drained = Drain("w1", true);
  ASSERT_TRUE(drained.ok()) << drained.status().ToString();
  EXPECT_TRUE(drained->drained_at_ms.has_value());
  EXPECT_TRUE(PullRuns(w, 4).empty()) << "a drained worker was granted a run";
  // A new session of the drained worker is drained too; other workers are not.
  Register(w);
  EXPECT_TRUE(PullRuns(w, 4).empty()) << "a new session of a drained worker was granted a run";
  EXPECT_EQ(PullRuns(other, 1), std::vector<std::string>{first});
  Result<WorkerRecord> resumed = Drain(w.id, false);
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  EXPECT_FALSE(resumed->drained_at_ms.has_value());
  EXPECT_EQ(PullRuns(w, 4), std::vector<std::string>{second});
  EXPECT_TRUE(Fails(Drain("nobody", true), "worker_not_found"));
}

// A pull in flight holds its pool's lock (shared). `ql worker drain` waits for it, and once the
// drain has returned no pull of that worker is granted a run.
TEST_F(PgWorkerTest, ADrainWaitsForThePullsInFlightOfItsPool) {
  const std::string run = StartRun(PublishTask("true"));
  Worker w = NewWorker("w1");
  auto conn = pg::Connection::Open(PgTestCluster::Get().Url(pg::kMigrationRole, db_), {});
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  pg::Connection& barrier = **conn;
  ASSERT_TRUE(barrier.Exec("BEGIN", {}, "barrier").ok());
  ASSERT_TRUE(barrier
                  .Exec("SELECT pg_advisory_xact_lock_shared(hashtextextended('ql3.pool:' || "
                        "$1, 0))",
                        {pg::P(std::string("default"))}, "barrier")
                  .ok());
  auto drained = std::async(std::launch::async, [&] { return Drain("w1", true); });
  const bool done_while_held =
      drained.wait_for(std::chrono::milliseconds(1500)) == std::future_status::ready;
  ASSERT_TRUE(barrier.Exec("COMMIT", {}, "barrier").ok());
  EXPECT_FALSE(done_while_held) << "the drain returned while a pull of its pool was in flight";
  Result<WorkerRecord> done = drained.get();
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_TRUE(done->drained_at_ms.has_value());
  EXPECT_TRUE(PullRuns(w, 4).empty()) << "a drained worker was granted a run";
  EXPECT_EQ(Run(run).status, "queued");
}

TEST_F(PgWorkerTest, AWaitingRunSaysWhichWorkerIsMissingAndWorkersShowWhatTheyRun) {
  const std::string project = DefaultProject();
  const std::string other = NewProject("other");
  ASSERT_TRUE(Grant("gpu", other).ok());     // configured, serving another project only
  ASSERT_TRUE(Grant("cpu", project).ok());   // serving it, nobody registered
  ASSERT_TRUE(Grant("edge", project).ok());  // serving it, a worker without the labels
  const std::string unconfigured = StartRun(PublishIn("", json{{"pool", "nowhere"}}));
  const std::string unserved = StartRun(PublishIn("", json{{"pool", "gpu"}}));
  const std::string no_worker = StartRun(PublishIn("", json{{"pool", "cpu"}}));
  const std::string no_labels =
      StartRun(PublishIn("", json{{"pool", "edge"}, {"labels", {{"arch", "arm64"}}}}));
  const std::string eligible = StartRun(PublishTask("true"));
  Worker gpu = NewWorker("gpu-1", 4, Place("gpu"));
  Worker edge = NewWorker("edge-1", 4, Place("edge", {{"arch", "amd64"}}));
  Worker plain = NewWorker("plain-1", 4, Place("default", {{"zone", "b"}}));

  const auto explain = [&](const std::vector<std::string>& ids) {
    std::map<std::string, WaitingReason> out;
    Result<std::vector<WaitingReason>> why = store_->placement().ExplainWaiting(ids);
    EXPECT_TRUE(why.ok()) << why.status().ToString();
    if (why.ok()) {
      for (const WaitingReason& w : *why) out[w.run_id] = w;
    }
    return out;
  };
  std::map<std::string, WaitingReason> why =
      explain({unconfigured, unserved, no_worker, no_labels, eligible});
  ASSERT_EQ(why.size(), 5u);
  for (const std::string& run : {unconfigured, unserved, no_worker, no_labels}) {
    EXPECT_EQ(why[run].reason, "waiting_for_worker") << why[run].detail;
  }
  EXPECT_NE(why[unconfigured].detail.find("pool nowhere is not configured"), std::string::npos)
      << why[unconfigured].detail;
  EXPECT_EQ(why[unserved].detail, "pool gpu does not serve this project");
  EXPECT_EQ(why[no_worker].detail, "no live worker in pool cpu");
  EXPECT_EQ(why[no_labels].detail, "no live worker in pool edge has the labels");
  EXPECT_EQ(why[no_labels].placement, Place("edge", {{"arch", "arm64"}}));
  EXPECT_EQ(why[eligible].reason, "") << why[eligible].detail;
  EXPECT_EQ(why[eligible].detail, "");
  Result<std::vector<WaitingCount>> counts = store_->placement().CountWaiting();
  ASSERT_TRUE(counts.ok()) << counts.status().ToString();
  std::map<std::string, int64_t> by_pool;
  for (const WaitingCount& c : *counts) by_pool[c.pool] = c.runs;
  EXPECT_EQ(by_pool,
            (std::map<std::string, int64_t>{{"cpu", 1}, {"edge", 1}, {"gpu", 1}, {"nowhere", 1}}));
  // A drained worker is no live worker.
  ASSERT_TRUE(Drain("edge-1", true).ok());
  EXPECT_EQ(explain({no_labels})[no_labels].detail, "no live worker in pool edge");

  EXPECT_EQ(PullRuns(plain, 4), std::vector<std::string>{eligible});
  Result<std::vector<WorkerRecord>> workers = store_->placement().ListWorkers();
  ASSERT_TRUE(workers.ok()) << workers.status().ToString();
  std::map<std::string, WorkerRecord> by_name;
  for (const WorkerRecord& w : *workers) by_name[w.name] = w;
  ASSERT_EQ(by_name.size(), 3u);
  const WorkerRecord& p = by_name["plain-1"];
  EXPECT_EQ(p.id, plain.id);
  EXPECT_TRUE(p.live);
  ASSERT_TRUE(p.session.has_value());
  EXPECT_EQ(p.session->id, plain.session);
  EXPECT_EQ(p.session->placement, Place("default", {{"zone", "b"}}));
  EXPECT_EQ(p.session->agent_version, kAgentVersion);
  EXPECT_EQ(p.running_run_ids, std::vector<std::string>{eligible});
  EXPECT_FALSE(p.drained_at_ms.has_value());
  const WorkerRecord& e = by_name["edge-1"];
  ASSERT_TRUE(e.session.has_value());
  EXPECT_EQ(e.session->placement, Place("edge", {{"arch", "amd64"}}));
  EXPECT_TRUE(e.drained_at_ms.has_value());
  EXPECT_TRUE(e.running_run_ids.empty());
  EXPECT_EQ(by_name["gpu-1"].session->placement.pool, "gpu");
  EXPECT_EQ(store_->placement().GetWorker("plain-1").value().running_run_ids,
            std::vector<std::string>{eligible});
}

// The credential decides the pool. A token minted for pool blue cannot register in pool gpu
// (granted to another project) and so never pulls that project's runs; without a pool it
// registers in blue; naming blue works too.
TEST_F(PgWorkerTest, AWorkerCredentialRegistersOnlyInThePoolItWasMintedFor) {
  const std::string other = NewProject("other");
  ASSERT_TRUE(Grant("gpu", other).ok());
  const std::string gpu_run = StartRunIn("other", PublishIn("other", json{{"pool", "gpu"}}));
  Result<pg::MintedCredential> minted = pg::MintCredential(
      *store_->admin_pool(), pg::CredentialKind::kWorker, "blue-1", SystemClock(), random_, "blue");
  ASSERT_TRUE(minted.ok()) << minted.status().ToString();
  Worker blue;
  blue.token = minted->token;
  blue.id = service_->Authenticate(blue.token).value();

  Result<WorkerSessionRecord> refused =
      service_->Register(blue.id, json::object(), 4, 4, Place("gpu"), kAgentVersion);
  EXPECT_TRUE(Fails(refused, "pool_not_allowed"));
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(refused.status().message().find("bound to pool 'blue'"), std::string::npos)
      << refused.status().ToString();
  // Nothing was registered: the worker has no session, and the gpu run still waits.
  WorkerRecord listed = store_->placement().GetWorker("blue-1").value();
  EXPECT_EQ(listed.pool, "blue");
  EXPECT_FALSE(listed.session.has_value());

  Register(blue, 4, Place("", {{"zone", "a"}}));
  WorkerRecord registered = store_->placement().GetWorker("blue-1").value();
  ASSERT_TRUE(registered.session.has_value());
  EXPECT_EQ(registered.session->placement, Place("blue", {{"zone", "a"}}));
  EXPECT_TRUE(PullRuns(blue, 4).empty()) << "a blue worker pulled a run of pool gpu";
  EXPECT_EQ(Run(gpu_run).status, "queued");
  Register(blue, 4, Place("blue"));
  EXPECT_EQ(store_->placement().GetWorker("blue-1").value().session->generation, 2);
  // A replica of an older version writes a session without that check: the database refuses a
  // session in another pool than its credential's.
  Status direct = ingress_->Transact({}, "an older replica's registration", [&](pg::Tx& tx) {
    return tx
        .Exec(
            "INSERT INTO ql3.worker_sessions (id, credential_id, generation, status, "
            "capabilities_json, max_concurrent_runs, available_slots, version, heartbeat_at_ms, "
            "expires_at_ms, created_at_ms, updated_at_ms, pool) VALUES ($1, $2, 9, 'active', "
            "'{}', 1, 1, 1, 0, 0, 0, 0, 'gpu')",
            {pg::P(NewUuidV7(SystemClock().NowMs(), random_)), pg::P(blue.id)})
        .status();
  });
  EXPECT_TRUE(Fails(direct, "pool_not_allowed"));
  EXPECT_EQ(direct.code(), StatusCode::kPermissionDenied);

  // A pool name the store would refuse is refused before anything is written.
  EXPECT_TRUE(Fails(pg::MintCredential(*store_->admin_pool(), pg::CredentialKind::kWorker, "bad-1",
                                       SystemClock(), random_, "Bad"),
                    "invalid_pool"));
  EXPECT_TRUE(Fails(store_->placement().GetWorker("bad-1"), "worker_not_found"));
}

}  // namespace
}  // namespace ql
