// Three real `ql-cluster serve` replicas share one PostgreSQL: every occurrence of every
// trigger becomes exactly one run, also when one replica is SIGKILLed while it holds claims.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "cluster_harness.h"
#include "harness.h"
#include "ql/storage/postgres/pg_client.h"
#include "ql/testing/postgres_server.h"

namespace ql::itest {
namespace {

using nlohmann::json;
using ::ql::testing::PostgresServer;

class ClusterReplicasTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = StartMigratedPostgres();
    ASSERT_NE(server_, nullptr);
    token_ = MintCredential(*server_, "token", "itest");
    ASSERT_FALSE(token_.empty());
  }

  std::vector<std::string> ReplicaArgs(bool admin) const {
    std::vector<std::string> args = {"--database-url", server_->Url("ql3_runtime", "qinglong"),
                                     "--lease-ms", "5000"};
    if (admin) {
      args.push_back("--admin-database-url");
      args.push_back(server_->Url("ql3_admin", "qinglong"));
    }
    return args;
  }

  std::string Log(const std::string& name) const { return dir_.path() + "/" + name + ".log"; }

  json Post(const Replica& r, const std::string& path, const json& body) {
    httplib::Client client("127.0.0.1", r.port());
    client.set_bearer_token_auth(token_.c_str());
    client.set_keep_alive(false);
    client.set_read_timeout(30, 0);
    auto res = client.Post(path.c_str(), body.dump(), "application/json");
    EXPECT_TRUE(res && res->status < 300) << path << " " << (res ? res->body : "no response");
    return res ? json::parse(res->body, nullptr, false) : json();
  }

  // One integer from the database (superuser).
  int64_t Count(const std::string& sql) {
    Result<std::string> out = server_->Psql("qinglong", sql);
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    return out.ok() && !out->empty() ? std::stoll(*out) : -1;
  }

  // Publishes a task and `n` every-second triggers through the API of `r`.
  void PublishEverySecond(const Replica& r, int n) {
    json task =
        Post(r, "/api/v1/tasks",
             {{"name", "tick"}, {"spec", {{"command", {{"kind", "shell"}, {"command", "true"}}}}}});
    ASSERT_TRUE(task.contains("id")) << task.dump();
    for (int i = 0; i < n; ++i) {
      Post(r, "/api/v1/triggers",
           {{"task_id", task["id"]}, {"expression", "* * * * * *"}, {"timezone", "UTC"}});
    }
  }

  // Checks the invariant over scheduled seconds [from_ms, to_ms]: every trigger has exactly
  // one run per second, each with one attempt and two events.
  void ExpectExactlyOncePerOccurrence(int triggers, int64_t from_ms, int64_t to_ms) {
    const std::string window =
        " scheduled_for_ms BETWEEN " + std::to_string(from_ms) + " AND " + std::to_string(to_ms);
    const int64_t seconds = (to_ms - from_ms) / 1000 + 1;
    EXPECT_EQ(Count("SELECT count(*) FROM (SELECT trigger_id, scheduled_for_ms FROM ql3.runs "
                    "GROUP BY 1, 2 HAVING count(*) > 1) d"),
              0)
        << "duplicate occurrences";
    EXPECT_EQ(Count("SELECT count(*) FROM ql3.runs WHERE" + window), triggers * seconds)
        << "missing occurrences in the window";
    EXPECT_EQ(Count("SELECT count(*) FROM ql3.runs r WHERE" + window +
                    " AND ((SELECT count(*) FROM ql3.run_attempts a WHERE a.run_id = r.id) <> 1"
                    " OR r.event_sequence < 2)"),
              0)
        << "runs without exactly one attempt or without their admission events";
  }

  // Waits until /readyz of `r` answers `status` with `code` (any code for 200); returns the
  // milliseconds it took, or -1 after `timeout_ms`.
  int64_t WaitReadyz(const Replica& r, int status, const std::string& code, int64_t timeout_ms) {
    httplib::Client client("127.0.0.1", r.port());
    client.set_keep_alive(false);
    client.set_read_timeout(5, 0);
    const auto start = std::chrono::steady_clock::now();
    const auto elapsed = [&] {
      return std::chrono::duration_cast<std::chrono::milliseconds>(
                 std::chrono::steady_clock::now() - start)
          .count();
    };
    while (elapsed() <= timeout_ms) {
      auto res = client.Get("/readyz");
      if (res && res->status == status) {
        json body = json::parse(res->body, nullptr, false);
        if (status == 200 || (body.is_object() && body.value("code", "") == code)) {
          return static_cast<int64_t>(elapsed());
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return int64_t{-1};
  }

  int64_t DbNowMs() {
    return Count("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint");
  }

  // Starts `a` (which publishes `triggers` every-second triggers), `b` and `victim`, which
  // claims big batches so that it is likely to hold claims when it is stopped; `from` is the
  // first scheduled second all three see. Returns once they have run for 5 s.
  void StartTwoAndAVictim(Replica& a, Replica& b, Replica& victim, int triggers, int64_t& from) {
    ASSERT_TRUE(a.Start(ReplicaArgs(/*admin=*/true)));
    PublishEverySecond(a, triggers);
    ASSERT_TRUE(b.Start(ReplicaArgs(false)));
    std::vector<std::string> victim_args = ReplicaArgs(false);
    victim_args.insert(victim_args.end(), {"--claims-per-round", "256"});
    ASSERT_TRUE(victim.Start(victim_args));
    from = (DbNowMs() / 1000 + 2) * 1000;
    std::this_thread::sleep_for(std::chrono::seconds(5));
  }

  // A schedule row a replica held claimed: its trigger, cursor and claim expiry.
  struct Held {
    std::string trigger;
    int64_t cursor;
    int64_t expires;
  };

  // Freezes `victim` (SIGSTOP) at a moment it holds claims and returns what it holds, with the
  // victim left frozen; empty when it was never caught within 60 s. Rounds are short (a claim
  // lives a few milliseconds before its admission clears it), so the watch runs through one open
  // connection; after the freeze a COMMIT already on the wire gets 200 ms to land. With
  // `inside_transaction` it also has to have stopped inside a transaction (a backend idle in
  // transaction for longer than a live replica leaves one). Otherwise it is thawed and watched
  // again; `thawed` counts how often.
  std::vector<Held> FreezeHoldingClaims(Replica& victim, bool inside_transaction, int& thawed) {
    std::vector<Held> held;
    Result<std::unique_ptr<pg::Connection>> watch =
        pg::Connection::Open(server_->Url(PostgresServer::kSuperuser, "qinglong"), {});
    EXPECT_TRUE(watch.ok()) << watch.status().ToString();
    if (!watch.ok()) return held;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (held.empty() && std::chrono::steady_clock::now() < give_up) {
      Result<pg::Rows> claimed = (*watch)->Exec(
          "SELECT count(*) FROM ql3.trigger_schedules WHERE claim_owner = 'victim'", {}, "watch");
      EXPECT_TRUE(claimed.ok()) << claimed.status().ToString();
      if (!claimed.ok()) return held;
      if (claimed->Int(0, 0) > 0) {
        victim.Freeze();
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        Result<pg::Rows> stuck = (*watch)->Exec(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = 'qinglong' AND state = "
            "'idle in transaction' AND clock_timestamp() - state_change > interval '150 ms'",
            {}, "stuck");
        Result<pg::Rows> rows = (*watch)->Exec(
            "SELECT trigger_id, next_fire_at_ms, claim_expires_at_ms FROM "
            "ql3.trigger_schedules WHERE claim_owner = 'victim'",
            {}, "held");
        EXPECT_TRUE(stuck.ok() && rows.ok());
        if (!stuck.ok() || !rows.ok()) return held;
        if (!inside_transaction || stuck->Int(0, 0) > 0) {
          for (int i = 0; i < rows->size(); ++i) {
            held.push_back({rows->Text(i, 0), rows->Int(i, 1), rows->Int(i, 2)});
          }
        }
        if (!held.empty()) break;
        victim.Thaw();
        ++thawed;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
    return held;
  }

  TempDir dir_;
  std::unique_ptr<PostgresServer> server_;
  std::string token_;
};

TEST_F(ClusterReplicasTest, ThreeReplicasAdmitEveryOccurrenceExactlyOnce) {
  constexpr int kTriggers = 1000;
  Replica a("replica-a", Log("a")), b("replica-b", Log("b")), c("replica-c", Log("c"));
  ASSERT_TRUE(a.Start(ReplicaArgs(/*admin=*/true)));
  PublishEverySecond(a, kTriggers);
  ASSERT_TRUE(b.Start(ReplicaArgs(false)));
  ASSERT_TRUE(c.Start(ReplicaArgs(false)));
  // The window starts once every trigger is published and every replica is up.
  const int64_t from = (DbNowMs() / 1000 + 2) * 1000;
  std::this_thread::sleep_for(std::chrono::seconds(60));
  const int64_t to = (DbNowMs() / 1000 - 3) * 1000;
  EXPECT_EQ(a.Stop(), 0);
  EXPECT_EQ(b.Stop(), 0);
  EXPECT_EQ(c.Stop(), 0);
  ExpectExactlyOncePerOccurrence(kTriggers, from, to);
}

TEST_F(ClusterReplicasTest, KilledReplicasClaimsAreTakenOverOnlyAfterExpiry) {
  constexpr int kTriggers = 300;
  Replica a("replica-a", Log("a")), b("replica-b", Log("b")), victim("victim", Log("v"));
  int64_t from = 0;
  ASSERT_NO_FATAL_FAILURE(StartTwoAndAVictim(a, b, victim, kTriggers, from));

  // Kill the victim at a moment it holds claims.
  int thawed = 0;
  std::vector<Held> held = FreezeHoldingClaims(victim, /*inside_transaction=*/false, thawed);
  victim.Kill();
  std::cout << "victim thawed " << thawed << " time(s) before it was caught holding claims\n";
  ASSERT_FALSE(held.empty()) << "the victim never held a claim while watched";

  // Wait past the lease, then a little more so the takeover can finish.
  std::this_thread::sleep_for(std::chrono::seconds(10));
  const int64_t to = (DbNowMs() / 1000 - 3) * 1000;
  EXPECT_EQ(a.Stop(), 0);
  EXPECT_EQ(b.Stop(), 0);
  for (const Held& h : held) {
    // The claimed occurrence was admitted exactly once, and not before the claim expired by
    // the database clock.
    EXPECT_EQ(Count("SELECT count(*) FROM ql3.runs WHERE trigger_id = '" + h.trigger +
                    "' AND scheduled_for_ms = " + std::to_string(h.cursor)),
              1)
        << h.trigger;
    EXPECT_GE(Count("SELECT min(created_at_ms) FROM ql3.runs WHERE trigger_id = '" + h.trigger +
                    "' AND scheduled_for_ms = " + std::to_string(h.cursor)),
              h.expires)
        << "taken over before the claim expired";
  }
  std::cout << "victim held " << held.size() << " claim(s) when killed\n";
  ExpectExactlyOncePerOccurrence(kTriggers, from, to);
}

// The chaos finding behind the lease-derived idle-in-transaction bound: a replica SIGSTOPped
// inside its admission transaction, holding its claimed rows locked, must not delay the
// takeover past lease + 2 s, and once thawed it must admit nothing of what it had claimed.
TEST_F(ClusterReplicasTest, AReplicaFrozenInsideItsAdmissionIsTakenOverAndAdmitsNothingAfter) {
  constexpr int kTriggers = 300;
  constexpr int64_t kLeaseMs = 5000;
  Replica a("replica-a", Log("a")), b("replica-b", Log("b")), victim("victim", Log("v"));
  int64_t from = 0;
  ASSERT_NO_FATAL_FAILURE(StartTwoAndAVictim(a, b, victim, kTriggers, from));

  // Freeze the victim inside its admission transaction, holding claimed rows locked.
  int thawed = 0;
  std::vector<Held> held = FreezeHoldingClaims(victim, /*inside_transaction=*/true, thawed);
  std::cout << "victim thawed " << thawed
            << " time(s) before it was frozen inside a transaction holding " << held.size()
            << " claim(s)\n";
  ASSERT_FALSE(held.empty()) << "the victim was never frozen inside its admission";

  // While it stays frozen, the others take each held occurrence over once the claim expired by
  // the database clock, and within 2 s of that.
  std::this_thread::sleep_for(std::chrono::milliseconds(kLeaseMs + 4000));
  for (const Held& h : held) {
    const std::string occurrence = "trigger_id = '" + h.trigger +
                                   "' AND scheduled_for_ms = " + std::to_string(h.cursor);
    EXPECT_EQ(Count("SELECT count(*) FROM ql3.runs WHERE " + occurrence), 1) << h.trigger;
    const int64_t admitted = Count("SELECT min(created_at_ms) FROM ql3.runs WHERE " + occurrence);
    EXPECT_GE(admitted, h.expires) << "taken over before the claim expired";
    // The claim was taken before the freeze, so this is within lease + 2 s of the freeze.
    EXPECT_LE(admitted, h.expires + 2000) << "taken over more than 2 s after the claim expired";
  }

  // Thawed, the victim finds its transaction ended and its claims gone: it admits nothing twice
  // and goes on serving.
  victim.Thaw();
  std::this_thread::sleep_for(std::chrono::seconds(4));
  for (const Held& h : held) {
    EXPECT_EQ(Count("SELECT count(*) FROM ql3.runs WHERE trigger_id = '" + h.trigger +
                    "' AND scheduled_for_ms = " + std::to_string(h.cursor)),
              1)
        << h.trigger;
  }
  httplib::Client probe("127.0.0.1", victim.port());
  auto live = probe.Get("/livez");
  EXPECT_TRUE(live && live->status == 200) << "the thawed replica stopped serving";
  const int64_t to = (DbNowMs() / 1000 - 3) * 1000;
  EXPECT_EQ(victim.Stop(), 0);
  EXPECT_EQ(a.Stop(), 0);
  EXPECT_EQ(b.Stop(), 0);
  ExpectExactlyOncePerOccurrence(kTriggers, from, to);
}

TEST_F(ClusterReplicasTest, ARevocationOnOneReplicaIsEnforcedByAnotherWithinTheBound) {
  Replica a("replica-a", Log("a")), b("replica-b", Log("b"));
  ASSERT_TRUE(a.Start(ReplicaArgs(/*admin=*/true)));
  ASSERT_TRUE(b.Start(ReplicaArgs(/*admin=*/true)));
  // The owner adds dana as an admin of the default project, with a token, through replica a.
  Post(a, "/api/v1/principals", {{"name", "dana"}});
  json minted = Post(a, "/api/v1/tokens", {{"principal", "dana"}});
  ASSERT_TRUE(minted.contains("token")) << minted.dump();
  const std::string dana = minted["token"];
  Post(a, "/api/v1/projects/default/bindings", {{"principal", "dana"}, {"role", "admin"}});
  const auto publish_on_b = [&](const std::string& name) {
    httplib::Client client("127.0.0.1", b.port());
    client.set_bearer_token_auth(dana.c_str());
    client.set_keep_alive(false);
    auto res = client.Post(
        "/api/v1/tasks",
        json{{"name", name}, {"spec", {{"command", {{"kind", "shell"}, {"command", "true"}}}}}}
            .dump(),
        "application/json");
    return res ? res->status : -1;
  };
  ASSERT_EQ(publish_on_b("before"), 201);

  // Revoked on a: b refuses at once (the fence reads the binding in the write's transaction).
  Post(a, "/api/v1/projects/default/bindings", {{"principal", "dana"}, {"role", "none"}});
  EXPECT_EQ(publish_on_b("after-revoke"), 403);

  // Disabled on a: b stops authenticating the token within the 2 s cache bound.
  Post(a, "/api/v1/projects/default/bindings", {{"principal", "dana"}, {"role", "admin"}});
  ASSERT_EQ(publish_on_b("granted-again"), 201);
  const auto disabled_at = std::chrono::steady_clock::now();
  Post(a, "/api/v1/principals/dana/disable", json::object());
  int status = 0;
  while (std::chrono::steady_clock::now() - disabled_at < std::chrono::seconds(5)) {
    status = publish_on_b("while-disabled");
    if (status == 401) break;
    // Until the cache expires the token authenticates, and the write's own fence refuses it.
    EXPECT_EQ(status, 403);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const auto bound = std::chrono::steady_clock::now() - disabled_at;
  EXPECT_EQ(status, 401);
  EXPECT_LE(bound, std::chrono::milliseconds(2'500));
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.task_revisions WHERE name IN ('after-revoke', "
                  "'while-disabled')"),
            0);
  EXPECT_EQ(a.Stop(), 0);
  EXPECT_EQ(b.Stop(), 0);
}

// /readyz is a living signal: it answers 503 with the stable code within the readiness period
// (the audit reruns every 5 s while ready) once PostgreSQL is stopped, turns read-only or drifts,
// and 200 again soon after it is healthy (every second while not ready).
TEST_F(ClusterReplicasTest, ReadinessFollowsTheDatabase) {
  constexpr int64_t kReadinessPeriodMs = 5000;
  constexpr int64_t kNotReadyPeriodMs = 1000;
  constexpr int64_t kSlackMs = 2000;  // one audit, a reconnect and a loaded machine
  Replica a("replica-a", Log("a"));
  ASSERT_TRUE(a.Start(ReplicaArgs(/*admin=*/true)));
  httplib::Client client("127.0.0.1", a.port());
  client.set_keep_alive(false);
  client.set_read_timeout(5, 0);
  const auto wait_readyz = [&](int status, const std::string& code, int64_t timeout_ms) {
    return WaitReadyz(a, status, code, timeout_ms);
  };
  ASSERT_EQ(HttpGetStatus(a.url() + "/readyz"), 200);
  PublishEverySecond(a, 1);  // something to admit every second

  ASSERT_TRUE(server_->Stop().ok());
  const int64_t down_ms =
      wait_readyz(503, "database_unavailable", kReadinessPeriodMs + kSlackMs);
  ASSERT_TRUE(server_->Restart().ok());
  const int64_t up_ms = wait_readyz(200, "", kNotReadyPeriodMs + kSlackMs);
  EXPECT_GE(down_ms, 0) << "/readyz did not leave 200 while the database was down";
  EXPECT_GE(up_ms, 0) << "/readyz did not return to 200 after the database came back";

  ASSERT_TRUE(server_
                  ->Psql("postgres",
                         "ALTER SYSTEM SET default_transaction_read_only = on;\n"
                         "SELECT pg_reload_conf();")
                  .ok());
  const int64_t read_only_ms =
      wait_readyz(503, "server_read_only", kReadinessPeriodMs + kSlackMs);
  ASSERT_TRUE(server_
                  ->Psql("postgres",
                         "ALTER SYSTEM RESET default_transaction_read_only;\n"
                         "SELECT pg_reload_conf();")
                  .ok());
  const int64_t writable_ms = wait_readyz(200, "", kNotReadyPeriodMs + kSlackMs);
  EXPECT_GE(read_only_ms, 0) << "/readyz stayed 200 on a read-only primary";
  EXPECT_GE(writable_ms, 0);

  ASSERT_TRUE(server_->Psql("qinglong", "GRANT DELETE ON ql3.projects TO ql3_runtime").ok());
  const int64_t drift_ms =
      wait_readyz(503, "runtime_role_invalid", kReadinessPeriodMs + kSlackMs);
  EXPECT_GE(drift_ms, 0) << "/readyz stayed 200 under drift";

  // Not ready means no writes: a write answers 503 with the audit's code (and writes nothing),
  // a read still answers, and the scheduler admits nothing until the audit passes again.
  httplib::Client api("127.0.0.1", a.port());
  api.set_bearer_token_auth(token_.c_str());
  api.set_keep_alive(false);
  api.set_read_timeout(10, 0);
  const json task = {{"name", "while-drifted"},
                     {"spec", {{"command", {{"kind", "shell"}, {"command", "true"}}}}}};
  auto refused = api.Post("/api/v1/tasks", task.dump(), "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 503) << refused->body;
  EXPECT_EQ(json::parse(refused->body, nullptr, false).value("code", ""), "runtime_role_invalid")
      << refused->body;
  auto read = api.Get("/api/v1/tasks");
  ASSERT_TRUE(read);
  EXPECT_EQ(read->status, 200) << read->body;
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // a round in flight ends
  const int64_t runs_drifted = Count("SELECT count(*) FROM ql3.runs");
  std::this_thread::sleep_for(std::chrono::seconds(3));
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.runs"), runs_drifted)
      << "occurrences admitted while the readiness audit failed";
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.task_revisions WHERE name = 'while-drifted'"), 0);

  ASSERT_TRUE(server_->Psql("qinglong", "REVOKE DELETE ON ql3.projects FROM ql3_runtime").ok());
  const int64_t healed_ms = wait_readyz(200, "", kNotReadyPeriodMs + kSlackMs);
  EXPECT_GE(healed_ms, 0);
  const int64_t runs_healed = Count("SELECT count(*) FROM ql3.runs");
  std::this_thread::sleep_for(std::chrono::seconds(3));
  EXPECT_GT(Count("SELECT count(*) FROM ql3.runs"), runs_healed)
      << "admission did not resume after the audit passed";
  // Writes are let through again (a database_unavailable answer is retried, as its code says;
  // the gate's code must never come back).
  int written = 0;
  for (int i = 0; i < 3 && (written == 0 || written >= 300); ++i) {
    auto answer = api.Post("/api/v1/tasks", task.dump(), "application/json");
    ASSERT_TRUE(answer);
    written = answer->status;
    EXPECT_NE(json::parse(answer->body, nullptr, false).value("code", ""), "runtime_role_invalid");
  }
  EXPECT_LT(written, 300) << "a write was refused after the audit passed";
  // The daemon log said so, once each way (text format: one line per change).
  const std::string log = ReadFile(Log("a"));
  EXPECT_NE(log.find("warn readiness.changed ready=false code=runtime_role_invalid"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("warn readiness.changed ready=false code=database_unavailable"),
            std::string::npos);
  EXPECT_NE(log.find("info readiness.changed ready=true"), std::string::npos);

  std::cout << "[readiness] database stopped -> 503 in " << down_ms << " ms, back -> 200 in "
            << up_ms << " ms; read-only -> 503 in " << read_only_ms << " ms, writable -> 200 in "
            << writable_ms << " ms; drift -> 503 in " << drift_ms << " ms, healed -> 200 in "
            << healed_ms << " ms\n";
  EXPECT_EQ(a.Stop(), 0);
  EXPECT_EQ(client.Get("/readyz"), nullptr);  // the replica is gone
}

// ADR-0037: a replica is ready only with a working key provider. Without one, or with one that
// cannot be opened or fails its wrap/unwrap round trip, it serves not ready with the provider's
// code, refuses writes with that code and admits nothing; a key file fixed while it runs is
// picked up within the not-ready period and the replica turns ready and writable.
TEST_F(ClusterReplicasTest, AReplicaIsReadyOnlyWithAWorkingKeyProvider) {
  constexpr int64_t kTimeoutMs = 10'000;
  // Something to admit every second, published through a replica with the harness's key.
  Replica keyed("keyed", Log("keyed"));
  ASSERT_TRUE(keyed.Start(ReplicaArgs(/*admin=*/true))) << ReadFile(Log("keyed"));
  PublishEverySecond(keyed, 1);
  EXPECT_EQ(keyed.Stop(), 0);

  Replica bare("bare", Log("bare"));
  bare.OmitKeyProvider();
  ASSERT_TRUE(bare.StartServing(ReplicaArgs(/*admin=*/true))) << ReadFile(Log("bare"));
  EXPECT_GE(WaitReadyz(bare, 503, "secret_key_provider_missing", kTimeoutMs), 0)
      << ReadFile(Log("bare"));
  const int64_t runs = Count("SELECT count(*) FROM ql3.runs");
  httplib::Client api("127.0.0.1", bare.port());
  api.set_bearer_token_auth(token_.c_str());
  api.set_keep_alive(false);
  api.set_read_timeout(10, 0);
  const json task = {{"name", "keyless"},
                     {"spec", {{"command", {{"kind", "shell"}, {"command", "true"}}}}}};
  auto refused = api.Post("/api/v1/tasks", task.dump(), "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 503) << refused->body;
  EXPECT_EQ(json::parse(refused->body, nullptr, false).value("code", ""),
            "secret_key_provider_missing")
      << refused->body;
  auto read = api.Get("/api/v1/tasks");
  ASSERT_TRUE(read);
  EXPECT_EQ(read->status, 200) << read->body;
  std::this_thread::sleep_for(std::chrono::seconds(3));  // three occurrences fall due
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.runs"), runs) << "a replica without a key admitted";
  EXPECT_EQ(Count("SELECT count(*) FROM ql3.task_revisions WHERE name = 'keyless'"), 0);
  EXPECT_EQ(bare.Stop(), 0);
  const std::string said = ReadFile(Log("bare"));
  EXPECT_NE(said.find("not ready: secret_key_provider_missing: "), std::string::npos) << said;
  EXPECT_NE(said.find("warn readiness.changed ready=false code=secret_key_provider_missing"),
            std::string::npos)
      << said;

  // A key file that cannot be opened has its own code, and so has a helper that fails.
  const std::string key = dir_.path() + "/late.key";
  std::vector<std::string> late_args = ReplicaArgs(/*admin=*/true);
  late_args.insert(late_args.end(), {"--secret-key-file", key});
  Replica late("late", Log("late"));
  ASSERT_TRUE(late.StartServing(late_args)) << ReadFile(Log("late"));
  EXPECT_GE(WaitReadyz(late, 503, "secret_key_file_missing", kTimeoutMs), 0);
  ASSERT_EQ(RunCommand({"/bin/sh", "-c", "head -c 32 /dev/urandom > '" + key + "'"}).exit_code, 0);
  ASSERT_EQ(::chmod(key.c_str(), 0644), 0);
  EXPECT_GE(WaitReadyz(late, 503, "secret_key_file_mode", kTimeoutMs), 0);
  std::vector<std::string> helper_args = ReplicaArgs(false);
  helper_args.insert(helper_args.end(),
                     {"--secret-key-exec", "/bin/false", "--secret-key-id", "kms:none"});
  Replica helper("helper", Log("helper"));
  ASSERT_TRUE(helper.StartServing(helper_args)) << ReadFile(Log("helper"));
  EXPECT_GE(WaitReadyz(helper, 503, "key_provider_failed", kTimeoutMs), 0);
  EXPECT_EQ(helper.Stop(), 0);

  // With the key file fixed, the same replica turns ready without a restart, and writes.
  ASSERT_EQ(::chmod(key.c_str(), 0600), 0);
  EXPECT_GE(WaitReadyz(late, 200, "", kTimeoutMs), 0);
  httplib::Client late_api("127.0.0.1", late.port());
  late_api.set_bearer_token_auth(token_.c_str());
  late_api.set_keep_alive(false);
  late_api.set_read_timeout(10, 0);
  auto written = late_api.Post("/api/v1/tasks", task.dump(), "application/json");
  ASSERT_TRUE(written);
  EXPECT_LT(written->status, 300) << written->body;
  EXPECT_EQ(late.Stop(), 0);
}

}  // namespace
}  // namespace ql::itest
