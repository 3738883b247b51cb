#include "ql/http/worker_api_server.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ql/core/artifact_store.h"
#include "ql/core/digest.h"
#include "ql/core/ids.h"
#include "ql/core/rfc3339.h"
#include "ql/engine/control_service.h"
#include "ql/http/httplib_config.h"
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

// A POST to `path` with the given extra header lines and body.
std::string Post(const std::string& path, const std::string& headers, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + headers +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

std::string Auth() { return std::string("Authorization: Bearer ") + kWorkerToken + "\r\n"; }

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

// One lease, held as the store holds it: GetLeaseState reads it, RenewLease fences it as the
// PostgreSQL store does (worker, session and generation, token, still granted, not expired) and
// counts the renewals. Nothing else of the lease repository is exercised.
class OneLease final : public RunLeaseRepository {
 public:
  void Set(LeaseState state, bool expired = false) {
    std::lock_guard<std::mutex> lock(mu_);
    state_ = std::move(state);
    expired_ = expired;
  }
  int renewals() const {
    std::lock_guard<std::mutex> lock(mu_);
    return renewals_;
  }
  void SetGrant(std::optional<GrantedLease> grant) {
    std::lock_guard<std::mutex> lock(mu_);
    grant_ = std::move(grant);
  }

  Result<LeaseGrant> GrantLeases(const PullCommand& c) override {
    std::lock_guard<std::mutex> lock(mu_);
    LeaseGrant out;
    if (grant_) {
      GrantedLease g = *grant_;
      g.offer_id = c.offers.at(0).offer_id;
      out.granted.push_back(g);
    }
    return out;
  }
  Result<LeaseRenewal> RenewLease(const LeaseFence& fence, int64_t ttl_ms) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (fence.offer_id != state_.offer_id) {
      return NotFound("lease_not_found", "no lease has offer id " + fence.offer_id);
    }
    if (fence.worker_id != state_.worker_id || fence.session_id != state_.session_id ||
        fence.generation != state_.generation || fence.token_digest != state_.token_digest) {
      return Conflict("lease_fenced", "the lease is held by another worker session");
    }
    if (state_.lease_status != "granted") {
      return Conflict("attempt_finished", "the attempt of the lease has ended");
    }
    if (expired_) return Conflict("lease_expired", "the lease expired by the database clock");
    ++renewals_;
    return LeaseRenewal{renewals_ + 1, 1790000000000 + ttl_ms, false};
  }
  Result<LeaseLogAppend> AppendLeaseLog(const LeaseFence&, int64_t, std::string_view, int64_t,
                                        int64_t) override {
    return Unavailable("no_logs", "logs are not part of this test");
  }
  Result<LeaseState> GetLeaseState(const std::string& offer_id) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (offer_id != state_.offer_id) {
      return NotFound("lease_not_found", "no lease has offer id " + offer_id);
    }
    return state_;
  }
  Result<std::vector<std::string>> ListCancelledOffers(const std::string&,
                                                       const std::string&) override {
    return std::vector<std::string>();
  }
  Result<std::vector<OverdueRun>> ListOverdueRuns(int64_t, int) override {
    return std::vector<OverdueRun>();
  }

 private:
  mutable std::mutex mu_;
  LeaseState state_;
  bool expired_ = false;
  int renewals_ = 0;
  std::optional<GrantedLease> grant_;
};

constexpr char kOffer[] = "01900000-0000-7000-8000-0000000000f1";
constexpr char kSession[] = "01900000-0000-7000-8000-0000000000a1";
const std::string kLeaseToken(64, 'c');

// A worker fetching the script versions of its leased runs (docs/worker-protocol.md "Blobs")
// from a real artifact store (SQLite, blobs cut into 7-byte chunks so that every answer streams
// several), with runs published and started through the ControlService.
class WorkerBlobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "ql-worker-blobs-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    SqliteOptions sqlite;
    sqlite.path = (dir_ / "ql.db").string();
    auto store = SqliteStore::Open(sqlite, clock_);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
    control_ = std::make_unique<ControlService>(*store_, clock_, random_, ControlOptions{});
    Result<ProjectRecord> project = control_->EnsureDefaultProject();
    ASSERT_TRUE(project.ok()) << project.status().ToString();
    project_ = project->id;
    auto* artifacts = dynamic_cast<ArtifactStore*>(&store_->artifacts());
    ASSERT_NE(artifacts, nullptr);
    small_chunks_ = std::make_unique<ArtifactStore>(artifacts->runner(), random_, 7);

    // A file script, a tree script, a blob the project uploaded for nothing, and a blob of
    // another project.
    greet_ = Upload(project_, "echo \"hello from the pinned bytes: $*\"\n");
    Push("greet", kScriptKindFile, {{"greet.sh", greet_}}, "");
    main_ = Upload(project_, ". \"$(dirname \"$0\")/lib/util.sh\"; util\n");
    util_ = Upload(project_, "util() { echo from-util; }\n");
    const ScriptVersionRecord tree =
        Push("pkg", kScriptKindTree, {{"main.sh", main_}, {"lib/util.sh", util_}}, "main.sh");
    manifest_ = tree.digest;
    unrelated_ = Upload(project_, "bytes the project uploaded and no run names");
    Result<ProjectRecord> other =
        store_->projects().EnsureProject(NewId(), "other", "Other", clock_.NowMs());
    ASSERT_TRUE(other.ok()) << other.status().ToString();
    foreign_ = Upload(other->id, "another project's bytes");

    file_run_ = StartTask("file-task", {{"kind", "script"}, {"script", "greet"}});
    tree_run_ = StartTask("tree-task", {{"kind", "script"}, {"script", "pkg"}});
    shell_run_ = StartTask("shell-task", {{"kind", "shell"}, {"command", "echo hi"}});

    WorkerServiceOptions options;
    options.definitions = &store_->definitions();
    options.artifacts = &store_->artifacts();
    service_ = std::make_unique<WorkerService>(sessions_, leases_, store_->runs(), clock_, random_,
                                               metrics_, options);
    server_ = std::make_unique<WorkerApiServer>(*service_, metrics_);
    Status started = server_->Start("127.0.0.1", 0);
    ASSERT_TRUE(started.ok()) << started.ToString();
  }
  void TearDown() override {
    server_.reset();
    service_.reset();
    control_.reset();
    store_.reset();
    fs::remove_all(dir_);
  }

  struct Stored {
    std::string digest;
    std::string bytes;
    int64_t size = 0;
  };

  Stored Upload(const std::string& project_id, const std::string& bytes) {
    BeginUploadCommand cmd;
    cmd.actor = Actor{"", "req-upload"};
    cmd.project_id = project_id;
    cmd.now_ms = clock_.NowMs();
    std::unique_ptr<BlobUpload> upload = small_chunks_->BeginUpload(cmd);
    EXPECT_TRUE(upload->Write(bytes).ok());
    Result<BlobDescriptor> blob = upload->Finish();
    EXPECT_TRUE(blob.ok()) << blob.status().ToString();
    EXPECT_GT(blob->chunks.size(), 1u);
    return Stored{blob->digest, bytes, blob->size};
  }

  ScriptVersionRecord Push(const std::string& name, std::string_view kind,
                           const std::vector<std::pair<std::string, Stored>>& files,
                           const std::string& entry) {
    PushScriptCommand cmd;
    cmd.actor = Actor{"", "req-push-" + name};
    cmd.project_id = project_;
    cmd.name = name;
    cmd.kind = std::string(kind);
    for (const auto& [path, blob] : files)
      cmd.files.push_back({path, blob.digest, blob.size, false});
    cmd.entry = entry;
    cmd.now_ms = clock_.NowMs();
    Result<PushScriptResult> pushed = store_->artifacts().PushScript(cmd);
    EXPECT_TRUE(pushed.ok()) << pushed.status().ToString();
    return pushed.ok() ? pushed->version : ScriptVersionRecord{};
  }

  RunRecord StartTask(const std::string& name, const nlohmann::json& command) {
    TaskWrite write;
    write.body = {{"name", name}, {"spec", {{"command", command}}}};
    Result<PublishedTask> task = control_->PublishTask(write);
    EXPECT_TRUE(task.ok()) << task.status().ToString();
    StartRunRequest request;
    request.task_id = task->task.head.task_id;
    Result<StartedRun> run = control_->StartRun(request);
    EXPECT_TRUE(run.ok()) << run.status().ToString();
    return run->run;
  }

  // Makes the lease `kOffer` this worker's session's lease on `run`.
  LeaseState HoldLease(const RunRecord& run, bool expired = false) {
    LeaseState state;
    state.offer_id = kOffer;
    state.run_id = run.id;
    Result<std::vector<AttemptRecord>> attempts = store_->runs().ListAttempts(run.id);
    EXPECT_TRUE(attempts.ok() && !attempts->empty());
    if (attempts.ok() && !attempts->empty()) state.attempt_id = attempts->back().id;
    state.worker_id = "worker-1";
    state.session_id = kSession;
    state.generation = 2;
    state.token_digest = Sha256Hex(kLeaseToken);
    state.lease_status = "granted";
    state.attempt_status = "starting";
    state.run_status = "dispatching";
    leases_.Set(state, expired);
    return state;
  }

  std::string NewId() { return "01900000-0000-7000-8000-" + RandomHex(random_, 6); }

  struct Answer {
    int status = 0;
    std::string body;
    std::string digest_header;
    std::string size_header;
    std::string code;  // of an error answer
  };

  // GET .../blobs/{digest} as `session` / `generation` / `token` present the lease.
  Answer Fetch(const std::string& digest, const std::string& session = kSession,
               int64_t generation = 2, const std::string& token = kLeaseToken,
               const std::string& offer = kOffer) {
    httplib::Client client("127.0.0.1", server_->port());
    client.set_read_timeout(5, 0);
    httplib::Headers headers{{"Authorization", std::string("Bearer ") + kWorkerToken}};
    if (!token.empty()) headers.emplace("X-QL-Lease-Token", token);
    httplib::Result res =
        client.Get("/worker/v1/leases/" + offer + "/blobs/" + digest + "?session_id=" + session +
                       "&generation=" + std::to_string(generation),
                   headers);
    Answer out;
    if (!res) return out;
    out.status = res->status;
    out.body = res->body;
    out.digest_header = res->get_header_value("X-QL-Digest");
    out.size_header = res->get_header_value("X-QL-Size");
    if (out.status != 200) {
      out.code = nlohmann::json::parse(out.body, nullptr, false).value("code", "");
    }
    return out;
  }

  // POST .../renew with the same presentation of the lease: what every other lease call answers.
  Answer Renew(const std::string& session = kSession, int64_t generation = 2,
               const std::string& token = kLeaseToken) {
    httplib::Client client("127.0.0.1", server_->port());
    client.set_bearer_token_auth(kWorkerToken);
    const nlohmann::json body{
        {"session_id", session}, {"generation", generation}, {"lease_token", token}};
    httplib::Result res = client.Post("/worker/v1/leases/" + std::string(kOffer) + "/renew",
                                      body.dump(), "application/json");
    Answer out;
    if (!res) return out;
    out.status = res->status;
    out.body = res->body;
    if (out.status != 200) {
      out.code = nlohmann::json::parse(out.body, nullptr, false).value("code", "");
    }
    return out;
  }

  fs::path dir_;
  testing::FakeClock clock_{ParseRfc3339("2026-01-01T00:00:00Z").value()};
  testing::SeededRandom random_{17};
  Metrics metrics_;
  FakeSessions sessions_;
  OneLease leases_;
  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<ControlService> control_;
  std::unique_ptr<ArtifactStore> small_chunks_;
  std::string project_;
  Stored greet_, main_, util_, unrelated_, foreign_;
  std::string manifest_;
  RunRecord file_run_, tree_run_, shell_run_;
  std::unique_ptr<WorkerService> service_;
  std::unique_ptr<WorkerApiServer> server_;
};

TEST_F(WorkerBlobTest, ALeaseFetchesItsPinnedFileAndTheFilesOfItsTree) {
  HoldLease(file_run_);
  Answer file = Fetch(greet_.digest);
  ASSERT_EQ(file.status, 200) << file.body;
  EXPECT_EQ(file.body, greet_.bytes);
  EXPECT_EQ(file.digest_header, greet_.digest);
  EXPECT_EQ(file.size_header, std::to_string(greet_.bytes.size()));
  EXPECT_EQ(leases_.renewals(), 1) << "a blob request is fenced (and renews) like renew";

  HoldLease(tree_run_);
  Answer manifest = Fetch(manifest_);
  ASSERT_EQ(manifest.status, 200) << manifest.body;
  EXPECT_EQ(Sha256Hex(manifest.body), manifest_);
  Result<std::vector<TreeEntry>> entries = DecodeTreeManifest(manifest.body);
  ASSERT_TRUE(entries.ok()) << entries.status().ToString();
  ASSERT_EQ(entries->size(), 2u);
  for (const Stored& file : {main_, util_}) {
    Answer got = Fetch(file.digest);
    ASSERT_EQ(got.status, 200) << got.body;
    EXPECT_EQ(got.body, file.bytes);
    EXPECT_EQ(got.digest_header, file.digest);
  }
}

TEST_F(WorkerBlobTest, ADigestTheLeasesRunDoesNotNeedIsNotFoundWhereverItExists) {
  const std::string never_stored = Sha256Hex("bytes nobody ever stored");
  // The same answer, but for the digest it names, whether the bytes exist elsewhere or not.
  const auto same_as_never_stored = [&](const Answer& a, const std::string& digest) {
    Answer never = Fetch(never_stored);
    std::string expected = never.body;
    expected.replace(expected.find(never_stored), never_stored.size(), digest);
    return never.status == 404 && never.code == "artifact_not_found" && a.status == 404 &&
           a.body == expected;
  };
  HoldLease(file_run_);
  EXPECT_TRUE(same_as_never_stored(Fetch(unrelated_.digest), unrelated_.digest))
      << "a blob of the run's project that the run does not name";
  EXPECT_TRUE(same_as_never_stored(Fetch(foreign_.digest), foreign_.digest))
      << "another project's blob";
  EXPECT_TRUE(same_as_never_stored(Fetch(util_.digest), util_.digest))
      << "a file of another script of the project";
  EXPECT_TRUE(same_as_never_stored(Fetch(manifest_), manifest_))
      << "another script's version of the project";

  HoldLease(tree_run_);
  EXPECT_TRUE(same_as_never_stored(Fetch(greet_.digest), greet_.digest))
      << "a tree's lease reads its manifest and its files only";
  EXPECT_TRUE(same_as_never_stored(Fetch(foreign_.digest), foreign_.digest));

  HoldLease(shell_run_);
  EXPECT_TRUE(same_as_never_stored(Fetch(greet_.digest), greet_.digest))
      << "a run that runs no script reads nothing";

  Answer malformed = Fetch("ABC");
  EXPECT_EQ(malformed.status, 400);
  EXPECT_EQ(malformed.code, "artifact_digest_invalid");
}

TEST_F(WorkerBlobTest, ALeaseNotCurrentOrNotThisSessionsIsRefusedLikeEveryLeaseCall) {
  struct Case {
    std::string what;
    std::string session = kSession;
    int64_t generation = 2;
    std::string token = kLeaseToken;
    bool expired = false;
    std::string lease_status = "granted";
    std::string worker = "worker-1";
    int status = 0;
    std::string code;
  };
  const std::vector<Case> cases = {
      {"expired", kSession, 2, kLeaseToken, true, "granted", "worker-1", 409, "lease_expired"},
      {"another session", "01900000-0000-7000-8000-0000000000a2", 2, kLeaseToken, false, "granted",
       "worker-1", 409, "lease_fenced"},
      {"an older generation", kSession, 1, kLeaseToken, false, "granted", "worker-1", 409,
       "lease_fenced"},
      {"another token", kSession, 2, std::string(64, 'd'), false, "granted", "worker-1", 409,
       "lease_fenced"},
      {"released", kSession, 2, kLeaseToken, false, "released", "worker-1", 409,
       "attempt_finished"},
      {"another worker's lease", kSession, 2, kLeaseToken, false, "granted", "worker-2", 404,
       "lease_not_found"},
  };
  for (const Case& c : cases) {
    LeaseState state = HoldLease(file_run_, c.expired);
    state.lease_status = c.lease_status;
    state.worker_id = c.worker;
    leases_.Set(state, c.expired);
    Answer blob = Fetch(greet_.digest, c.session, c.generation, c.token);
    EXPECT_EQ(blob.status, c.status) << c.what << ": " << blob.body;
    EXPECT_EQ(blob.code, c.code) << c.what;
    EXPECT_TRUE(blob.digest_header.empty()) << c.what;
    EXPECT_EQ(blob.body.find("pinned bytes"), std::string::npos) << c.what;
    if (c.worker == "worker-1") {
      // Every other lease call is refused alike.
      Answer renew = Renew(c.session, c.generation, c.token);
      EXPECT_EQ(renew.status, blob.status) << c.what;
      EXPECT_EQ(renew.code, blob.code) << c.what;
    }
  }
  EXPECT_EQ(leases_.renewals(), 0);

  HoldLease(file_run_);
  Answer no_token = Fetch(greet_.digest, kSession, 2, "");
  EXPECT_EQ(no_token.status, 400);
  EXPECT_EQ(no_token.code, "invalid_lease_token");
  Answer unknown =
      Fetch(greet_.digest, kSession, 2, kLeaseToken, "01900000-0000-7000-8000-0000000000f9");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(unknown.code, "lease_not_found");

  // Only GET, and only with a worker's token.
  Exchanged post = Exchange(server_->port(), "POST /worker/v1/leases/" + std::string(kOffer) +
                                                 "/blobs/" + greet_.digest +
                                                 " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                                                 kWorkerToken + "\r\nContent-Length: 2\r\n\r\n{}");
  EXPECT_THAT(post.answer, StartsWith("HTTP/1.1 405"));
  EXPECT_THAT(post.answer, HasSubstr("Allow: GET"));
  Exchanged anonymous = Exchange(
      server_->port(), "GET /worker/v1/leases/" + std::string(kOffer) + "/blobs/" + greet_.digest +
                           "?session_id=" + kSession +
                           "&generation=2 HTTP/1.1\r\nHost: x\r\nX-QL-Lease-Token: " + kLeaseToken +
                           "\r\nConnection: close\r\n\r\n");
  EXPECT_THAT(anonymous.answer, StartsWith("HTTP/1.1 401"));
  EXPECT_EQ(anonymous.answer.find("pinned bytes"), std::string::npos);
}

TEST_F(WorkerBlobTest, TheOfferNamesTheScriptPinAndTheEndOfAFailedFetchIsAccepted) {
  // A pull of the file task's run: the offer's plan names the version it runs, by digest.
  Result<ExecutionRevisionRecord> execution =
      store_->definitions().GetExecutionRevision(file_run_.execution_revision_id);
  ASSERT_TRUE(execution.ok()) << execution.status().ToString();
  GrantedLease grant;
  grant.run_id = file_run_.id;
  grant.attempt_id = NewId();
  grant.project_id = project_;
  grant.task_id = file_run_.task_id;
  grant.task_revision = file_run_.task_revision;
  grant.task_digest = file_run_.task_digest;
  grant.execution_revision_id = execution->id;
  grant.plan_json = execution->plan_json;
  grant.plan_digest = execution->plan_digest;
  leases_.SetGrant(grant);
  const nlohmann::json pull{{"session_id", kSession},
                            {"generation", 2},
                            {"available_slots", 1},
                            {"offers", {{{"offer_id", kOffer}, {"lease_token", kLeaseToken}}}}};
  Exchanged pulled = Exchange(
      server_->port(), Post("/worker/v1/pull", Auth() + "Connection: close\r\n", pull.dump()));
  ASSERT_THAT(pulled.answer, StartsWith("HTTP/1.1 200"));
  const nlohmann::json answer =
      nlohmann::json::parse(pulled.answer.substr(pulled.answer.find("\r\n\r\n") + 4));
  ASSERT_EQ(answer["offers"].size(), 1u) << answer.dump();
  const nlohmann::json& plan = answer["offers"][0]["plan"];
  EXPECT_EQ(plan["argv"], nlohmann::json({"/usr/bin/env", "sh"}));
  EXPECT_EQ(plan["script"], nlohmann::json({{"name", "greet"},
                                            {"version", 1},
                                            {"digest", greet_.digest},
                                            {"kind", "file"},
                                            {"entry", "greet.sh"}}));

  // A plan that runs no script names none.
  execution = store_->definitions().GetExecutionRevision(shell_run_.execution_revision_id);
  ASSERT_TRUE(execution.ok());
  grant.run_id = shell_run_.id;
  grant.task_id = shell_run_.task_id;
  grant.task_digest = shell_run_.task_digest;
  grant.plan_json = execution->plan_json;
  grant.plan_digest = execution->plan_digest;
  leases_.SetGrant(grant);
  pulled = Exchange(server_->port(),
                    Post("/worker/v1/pull", Auth() + "Connection: close\r\n", pull.dump()));
  ASSERT_THAT(pulled.answer, StartsWith("HTTP/1.1 200"));
  const nlohmann::json shell =
      nlohmann::json::parse(pulled.answer.substr(pulled.answer.find("\r\n\r\n") + 4));
  EXPECT_FALSE(shell["offers"][0]["plan"].contains("script")) << shell.dump();

  // The worker reports a version it could not fetch (or a plan without its pin) with its code;
  // the protocol takes it (this store has no leases, so the end itself goes no further).
  HoldLease(file_run_);
  for (const std::string code :
       {"artifact_unavailable", "artifact_corrupt", "script_plan_invalid", "not_a_code"}) {
    const nlohmann::json complete{
        {"session_id", kSession},     {"generation", 2},
        {"lease_token", kLeaseToken}, {"outcome", "spawn_failed"},
        {"error_code", code},         {"message", "script greet@1: cannot fetch"}};
    Exchanged completed =
        Exchange(server_->port(), Post("/worker/v1/leases/" + std::string(kOffer) + "/complete",
                                       Auth() + "Connection: close\r\n", complete.dump()));
    if (code == "not_a_code") {
      EXPECT_THAT(completed.answer, HasSubstr("\"code\":\"invalid_argument\"")) << code;
    } else {
      EXPECT_THAT(completed.answer, HasSubstr("\"code\":\"lease_unsupported\""))
          << code << ": " << completed.answer;
    }
  }
}

}  // namespace
}  // namespace ql
