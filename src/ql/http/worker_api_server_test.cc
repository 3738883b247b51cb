#include "ql/http/worker_api_server.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include "ql/core/digest.h"
#include "ql/core/rfc3339.h"
#include "ql/storage/sqlite/sqlite_store.h"
#include "ql/testing/fake_clock.h"
#include "ql/testing/raw_http.h"

namespace ql {
namespace {

namespace fs = std::filesystem;
using testing::Exchange;
using testing::Exchanged;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kWorkerToken[] = "worker-token-0123456789abcdef";

// Knows one worker token and records sessions; counts credential lookups.
class FakeSessions final : public WorkerSessionRepository {
 public:
  Result<std::string> AuthenticateWorker(const std::string& token_digest) override {
    ++lookups;
    if (token_digest == Sha256Hex(kWorkerToken)) return std::string("worker-1");
    return NotFound("unauthorized", "unknown worker token");
  }
  Result<WorkerSessionRecord> RegisterSession(const RegisterSessionCommand& command) override {
    WorkerSessionRecord record;
    record.id = command.session_id;
    record.worker_id = command.worker_id;
    record.generation = 1;
    record.status = "active";
    record.max_concurrent_runs = command.max_concurrent_runs;
    record.available_slots = command.available_slots;
    return record;
  }
  Result<WorkerSessionRecord> Heartbeat(const std::string&, const std::string&, int64_t, int,
                                        int64_t) override {
    return NotFound("session_not_found", "no sessions here");
  }
  Result<WorkerSessionRecord> SetSessionStatus(const std::string&, const std::string&, int64_t,
                                               const std::string&) override {
    return NotFound("session_not_found", "no sessions here");
  }
  std::atomic<int> lookups{0};
};

// Leases are not exercised here.
class NoLeases final : public RunLeaseRepository {
 public:
  Result<LeaseGrant> GrantLeases(const PullCommand&) override { return None(); }
  Result<LeaseRenewal> RenewLease(const LeaseFence&, int64_t) override { return None(); }
  Result<LeaseLogAppend> AppendLeaseLog(const LeaseFence&, int64_t, std::string_view, int64_t,
                                        int64_t) override {
    return None();
  }
  Result<LeaseState> GetLeaseState(const std::string&) override { return None(); }
  Result<std::vector<std::string>> ListCancelledOffers(const std::string&,
                                                       const std::string&) override {
    return None();
  }
  Result<std::vector<OverdueRun>> ListOverdueRuns(int64_t, int) override { return None(); }

 private:
  static Status None() { return Unavailable("no_leases", "leases are not part of this test"); }
};

class WorkerApiServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "ql-worker-api-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    SqliteOptions sqlite;
    sqlite.path = (dir_ / "ql.db").string();
    auto store = SqliteStore::Open(sqlite, clock_);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
    service_ = std::make_unique<WorkerService>(sessions_, leases_, store_->runs(), clock_, random_,
                                               metrics_);
    server_ = std::make_unique<WorkerApiServer>(*service_, metrics_);
    Status started = server_->Start("127.0.0.1", 0);
    ASSERT_TRUE(started.ok()) << started.ToString();
  }
  void TearDown() override {
    server_.reset();
    service_.reset();
    store_.reset();
    fs::remove_all(dir_);
  }

  // A POST to `path` with the given extra header lines and body.
  static std::string Post(const std::string& path, const std::string& headers,
                          const std::string& body) {
    return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + headers +
           "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  }
  static std::string Auth() {
    return std::string("Authorization: Bearer ") + kWorkerToken + "\r\n";
  }

  fs::path dir_;
  testing::FakeClock clock_{ParseRfc3339("2026-01-01T00:00:00Z").value()};
  testing::SeededRandom random_{11};
  Metrics metrics_;
  FakeSessions sessions_;
  NoLeases leases_;
  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<WorkerService> service_;
  std::unique_ptr<WorkerApiServer> server_;
};

constexpr char kRegister[] = R"({"max_concurrent_runs":2,"available_slots":2})";

TEST_F(WorkerApiServerTest, AuthenticatedCallsAreServedWithOneCredentialLookup) {
  Exchanged registered = Exchange(
      server_->port(), Post("/worker/v1/sessions", Auth() + "Connection: close\r\n", kRegister));
  EXPECT_THAT(registered.answer, StartsWith("HTTP/1.1 201"));
  EXPECT_THAT(registered.answer, HasSubstr("\"max_concurrent_runs\":2"));
  EXPECT_EQ(sessions_.lookups.load(), 1);
}

TEST_F(WorkerApiServerTest, AnonymousBodiesAreRefusedFromTheHeadersAndNeverRead) {
  // A declared body that never comes: refused at once, and the connection ends.
  const auto start = std::chrono::steady_clock::now();
  Exchanged unsent = Exchange(server_->port(),
                              "POST /worker/v1/sessions HTTP/1.1\r\nHost: x\r\n"
                              "Content-Length: 1000000\r\n\r\n",
                              5000);
  EXPECT_THAT(unsent.answer, StartsWith("HTTP/1.1 401"));
  EXPECT_THAT(unsent.answer, HasSubstr("unauthorized"));
  EXPECT_TRUE(unsent.closed);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));

  // A wrong token asking to send: 401 instead of 100 Continue.
  Exchanged asked = Exchange(server_->port(),
                             "POST /worker/v1/sessions HTTP/1.1\r\nHost: x\r\n"
                             "Authorization: Bearer wrong-token\r\nContent-Length: 50\r\n"
                             "Expect: 100-continue\r\n\r\n",
                             5000);
  EXPECT_THAT(asked.answer, StartsWith("HTTP/1.1 401"));
  EXPECT_THAT(asked.answer, ::testing::Not(HasSubstr("100 Continue")));
  EXPECT_TRUE(asked.closed);

  // The body is itself a request, which a connection kept open would answer next.
  const std::string smuggled = "POST /worker/v1/sessions HTTP/1.1\r\nHost: x\r\n\r\n";
  Exchanged refused = Exchange(server_->port(), Post("/worker/v1/sessions", "", smuggled));
  EXPECT_THAT(refused.answer, StartsWith("HTTP/1.1 401"));
  EXPECT_EQ(refused.answer.find("HTTP/1.1", 1), std::string::npos) << refused.answer;
  EXPECT_TRUE(refused.closed);
}

TEST_F(WorkerApiServerTest, AuthenticatedRequestsAreCheckedBeforeTheirBodies) {
  const std::string huge = "POST /worker/v1/sessions HTTP/1.1\r\nHost: x\r\n" + Auth() +
                           "Content-Length: 2000000\r\n\r\n";
  Exchanged too_large = Exchange(server_->port(), huge, 5000);
  EXPECT_THAT(too_large.answer, StartsWith("HTTP/1.1 413"));
  EXPECT_THAT(too_large.answer, HasSubstr("body_too_large"));
  EXPECT_TRUE(too_large.closed);

  Exchanged unknown = Exchange(
      server_->port(),
      "POST /worker/v1/nothing HTTP/1.1\r\nHost: x\r\n" + Auth() + "Content-Length: 100000\r\n\r\n",
      5000);
  EXPECT_THAT(unknown.answer, StartsWith("HTTP/1.1 404"));
  EXPECT_TRUE(unknown.closed);

  Exchanged get = Exchange(server_->port(), "GET /worker/v1/sessions HTTP/1.1\r\nHost: x\r\n" +
                                                Auth() + "Connection: close\r\n\r\n");
  EXPECT_THAT(get.answer, StartsWith("HTTP/1.1 405"));
  EXPECT_THAT(get.answer, HasSubstr("Allow: POST"));

  Exchanged chunked =
      Exchange(server_->port(), "POST /worker/v1/sessions HTTP/1.1\r\nHost: x\r\n" + Auth() +
                                    "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n");
  EXPECT_THAT(chunked.answer, StartsWith("HTTP/1.1 411"));
  EXPECT_TRUE(chunked.closed);

  server_->WithdrawAdmission();
  Exchanged stopping = Exchange(server_->port(), Post("/worker/v1/sessions", Auth(), kRegister));
  EXPECT_THAT(stopping.answer, StartsWith("HTTP/1.1 503"));
  EXPECT_THAT(stopping.answer, HasSubstr("shutting_down"));
}

}  // namespace
}  // namespace ql
