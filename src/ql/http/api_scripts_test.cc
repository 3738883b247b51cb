// /api/v1/blobs and /api/v1/scripts over a real SQLite store, sent the way an attacker would:
// roles below the route's, another project's admin who knows a digest, wrong media types,
// pieces of the wrong size, paths that climb out of a tree, parameters no route takes. Each
// refusal is checked by its status and code; the round trips check the bytes and the headers
// a client verifies them by.

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "httplib_config.h"
#include "ql/core/digest.h"
#include "ql/core/governance.h"
#include "ql/core/ids.h"
#include "ql/engine/control_service.h"
#include "ql/engine/log_reader.h"
#include "ql/engine/metrics.h"
#include "ql/engine/script_service.h"
#include "ql/engine/token_authenticator.h"
#include "ql/http/api_server.h"
#include "ql/storage/sqlite/sqlite_store.h"
#include "ql/testing/fake_clock.h"
#include "ql/testing/raw_http.h"

namespace ql {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr size_t kMiB = size_t{1} << 20;

struct Reply {
  int status = 0;
  json body;
  std::string raw;
  httplib::Headers headers;
  std::string code() const { return body.is_object() ? body.value("code", "") : ""; }
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

// Deterministic pseudo-random bytes: other seeds or lengths give pieces of other digests.
std::string Bytes(size_t n, uint64_t seed) {
  std::string out(n, '\0');
  uint64_t x = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (size_t i = 0; i < n; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    out[i] = static_cast<char>(x >> 56);
  }
  return out;
}

json File(const std::string& path, const std::string& digest, int64_t size,
          bool executable = false) {
  return json{{"path", path}, {"digest", digest}, {"size", size}, {"executable", executable}};
}

class ApiScriptsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "ql-scripts-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    fs::create_directories(dir_ / "log");
    SqliteOptions sqlite;
    sqlite.path = (dir_ / "ql.db").string();
    auto store = SqliteStore::Open(sqlite, clock_);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
    service_ = std::make_unique<ControlService>(*store_, clock_, random_, ControlOptions{});
    auto project = service_->EnsureDefaultProject();
    ASSERT_TRUE(project.ok()) << project.status().ToString();
    alpha_id_ = project->id;
    log_reader_ = std::make_unique<LogReader>((dir_ / "log").string());
    authenticator_ = std::make_unique<TokenAuthenticator>(store_->governance(), clock_);

    BootstrapCommand boot;
    boot.principal_id = Id();
    boot.name = "root";
    boot.token_id = Id();
    boot.token_digest = Sha256Hex("root-token-0123456789");
    boot.mutation_id = "bootstrap";
    boot.now_ms = clock_.NowMs();
    auto booted = store_->governance().Bootstrap(boot);
    ASSERT_TRUE(booted.ok()) << booted.status().ToString();
    root_ = "root-token-0123456789";

    scripts_ =
        std::make_unique<ScriptService>(*store_, service_->governance(), clock_, ArtifactLimits{});
    options_.authenticate = [this](const std::string& digest) -> Result<Authentication> {
      return authenticator_->Authenticate(digest);
    };
    options_.log_reader = log_reader_.get();
    options_.scripts = scripts_.get();
    server_ = std::make_unique<ApiServer>(*service_, metrics_, options_);
    ASSERT_TRUE(server_->Start("127.0.0.1", 0).ok());
    server_->SetReady(true);

    // Project "default" (A) and project "beta" (B), each with its own people.
    Reply beta = Send(root_, "POST", "/api/v1/projects", json{{"slug", "beta"}}.dump());
    ASSERT_EQ(beta.status, 201) << beta.raw;
    beta_id_ = beta.body["id"];
    nobody_ = AddMember("nobody", "", Role::kNone);
    viewer_ = AddMember("a-viewer", alpha_id_, Role::kViewer);
    operator_ = AddMember("a-operator", alpha_id_, Role::kOperator);
    admin_ = AddMember("a-admin", alpha_id_, Role::kAdmin);
    beta_admin_ = AddMember("b-admin", beta_id_, Role::kAdmin);
  }

  void TearDown() override {
    server_.reset();
    scripts_.reset();
    authenticator_.reset();
    service_.reset();
    store_.reset();
    fs::remove_all(dir_);
  }

  std::string Id() { return NewUuidV7(clock_.NowMs(), random_); }

  // Creates principal `name` with a token, bound to `role` in `project` (none for kNone).
  std::string AddMember(const std::string& name, const std::string& project, Role role) {
    CreatePrincipalCommand principal;
    principal.id = Id();
    principal.name = name;
    principal.now_ms = clock_.NowMs();
    auto created = store_->governance().CreatePrincipal(principal);
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    const std::string token = "tok-" + Id();
    CreateTokenCommand cmd;
    cmd.id = Id();
    cmd.principal_id = principal.id;
    cmd.token_digest = Sha256Hex(token);
    cmd.now_ms = clock_.NowMs();
    EXPECT_TRUE(store_->governance().CreateToken(cmd).ok());
    if (role != Role::kNone) {
      WriteBindingCommand bind;
      bind.scope = project;
      bind.subject_id = principal.id;
      bind.role = std::string(RoleName(role));
      bind.mutation_id = Id();
      bind.now_ms = clock_.NowMs();
      auto written = store_->governance().WriteBinding(bind);
      EXPECT_TRUE(written.ok()) << written.status().ToString();
    }
    return token;
  }

  Reply Send(const std::string& token, const std::string& method, const std::string& path,
             const std::string& body = "", const std::string& content_type = "application/json",
             int port = 0) {
    httplib::Client client("127.0.0.1", port != 0 ? port : server_->port());
    client.set_read_timeout(15, 0);
    client.set_default_headers({{"Authorization", "Bearer " + token}});
    httplib::Result result = method == "GET" ? client.Get(path.c_str())
                             : method == "DELETE"
                                 ? client.Delete(path.c_str())
                                 : client.Post(path.c_str(), body, content_type.c_str());
    Reply reply;
    if (!result) return reply;
    reply.status = result->status;
    reply.raw = result->body;
    reply.headers = result->headers;
    reply.body = json::parse(result->body, nullptr, false);
    return reply;
  }

  Reply Upload(const std::string& token, const std::string& bytes,
               const std::string& project = "") {
    return Send(token, "POST", "/api/v1/blobs" + (project.empty() ? "" : "?project=" + project),
                bytes, "application/octet-stream");
  }

  Reply Push(const std::string& token, const std::string& name, const json& body,
             const std::string& project = "") {
    return Send(
        token, "POST",
        "/api/v1/scripts/" + name + "/versions" + (project.empty() ? "" : "?project=" + project),
        body.dump());
  }

  // Uploads `bytes` as admin of A and pushes them as file script `name` (path `file`).
  Reply PushFile(const std::string& name, const std::string& file, const std::string& bytes) {
    Reply blob = Upload(admin_, bytes);
    EXPECT_EQ(blob.status, 201) << blob.raw;
    return Push(
        admin_, name,
        json{{"kind", "file"},
             {"files",
              json::array({File(file, Sha256Hex(bytes), static_cast<int64_t>(bytes.size()))})}});
  }

  // Sends `request` as it is on a connection of its own and returns the status and the code.
  std::pair<int, std::string> Raw(const std::string& request) {
    const testing::Exchanged ex = testing::Exchange(server_->port(), request, 5000);
    const std::string& answer = ex.answer;
    int status = 0;
    if (answer.rfind("HTTP/1.1 ", 0) == 0) status = std::atoi(answer.c_str() + 9);
    const size_t start = answer.find("\r\n\r\n");
    json body =
        start == std::string::npos ? json() : json::parse(answer.substr(start + 4), nullptr, false);
    return {status, body.is_object() ? body.value("code", "") : ""};
  }

  fs::path dir_;
  testing::FakeClock clock_{1'780'000'000'000};
  testing::SeededRandom random_{23};
  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<ControlService> service_;
  std::unique_ptr<LogReader> log_reader_;
  std::unique_ptr<TokenAuthenticator> authenticator_;
  std::unique_ptr<ScriptService> scripts_;
  ApiServerOptions options_;
  Metrics metrics_;
  std::unique_ptr<ApiServer> server_;
  std::string alpha_id_;
  std::string beta_id_;
  std::string root_;
  std::string nobody_;
  std::string viewer_;
  std::string operator_;
  std::string admin_;
  std::string beta_admin_;
};

#define EXPECT_REFUSED(reply, want_status, want_code)              \
  do {                                                             \
    const Reply& r_ = (reply);                                     \
    EXPECT_EQ(r_.status, want_status) << r_.raw;                   \
    EXPECT_EQ(r_.code(), want_code) << r_.status << " " << r_.raw; \
  } while (0)

TEST_F(ApiScriptsTest, AViewerReadsButNeitherViewerNorOperatorWrites) {
  const std::string bytes = "#!/bin/sh\necho hello\n";
  Reply pushed = PushFile("hello.sh", "hello.sh", bytes);
  ASSERT_EQ(pushed.status, 201) << pushed.raw;
  const std::string digest = Sha256Hex(bytes);

  // Reads: list, show, history, cat, the blob itself.
  Reply listed = Send(viewer_, "GET", "/api/v1/scripts");
  ASSERT_EQ(listed.status, 200) << listed.raw;
  ASSERT_EQ(listed.body["items"].size(), 1u);
  EXPECT_EQ(listed.body["items"][0]["name"], "hello.sh");
  Reply shown = Send(viewer_, "GET", "/api/v1/scripts/hello.sh");
  ASSERT_EQ(shown.status, 200) << shown.raw;
  EXPECT_EQ(shown.body["version"]["version"], 1);
  EXPECT_EQ(Send(viewer_, "GET", "/api/v1/scripts/hello.sh/versions").status, 200);
  Reply cat = Send(viewer_, "GET", "/api/v1/scripts/hello.sh/content");
  ASSERT_EQ(cat.status, 200) << cat.raw;
  EXPECT_EQ(cat.raw, bytes);
  Reply blob = Send(viewer_, "GET", "/api/v1/blobs/" + digest);
  ASSERT_EQ(blob.status, 200) << blob.raw;
  EXPECT_EQ(blob.raw, bytes);

  // Writes, by a viewer and by an operator: refused before anything is stored.
  const std::string fresh = "#!/bin/sh\necho not yours\n";
  const json changed{{"kind", "file"},
                     {"files", json::array({File("hello.sh", digest, bytes.size(), true)})}};
  for (const std::string* who : {&viewer_, &operator_}) {
    SCOPED_TRACE(who == &viewer_ ? "viewer" : "operator");
    EXPECT_REFUSED(Upload(*who, fresh), 403, "permission_denied");
    EXPECT_REFUSED(
        Send(*who, "POST", "/api/v1/blobs/compose", json{{"pieces", json::array({digest})}}.dump()),
        403, "permission_denied");
    EXPECT_REFUSED(Push(*who, "hello.sh", changed), 403, "permission_denied");
    EXPECT_REFUSED(Push(*who, "other.sh", changed), 403, "permission_denied");
    EXPECT_REFUSED(Send(*who, "DELETE", "/api/v1/scripts/hello.sh"), 403, "permission_denied");
  }
  // A principal with no role in the project does not see it at all, and cannot write there.
  EXPECT_REFUSED(Send(nobody_, "GET", "/api/v1/scripts"), 404, "project_not_found");
  EXPECT_REFUSED(Send(nobody_, "GET", "/api/v1/scripts/hello.sh/content"), 404,
                 "project_not_found");
  EXPECT_REFUSED(Send(nobody_, "GET", "/api/v1/blobs/" + digest), 404, "project_not_found");
  EXPECT_REFUSED(Upload(nobody_, fresh), 403, "permission_denied");
  EXPECT_REFUSED(Push(nobody_, "hello.sh", changed), 403, "permission_denied");

  // Nothing changed: the refused upload was not stored, the script is still version 1 and live.
  EXPECT_REFUSED(Send(admin_, "GET", "/api/v1/blobs/" + Sha256Hex(fresh)), 404,
                 "artifact_not_found");
  Reply after = Send(admin_, "GET", "/api/v1/scripts/hello.sh");
  ASSERT_EQ(after.status, 200) << after.raw;
  EXPECT_EQ(after.body["latest_version"], 1);
  EXPECT_EQ(after.body["status"], "active");
  EXPECT_EQ(after.body["version"]["files"][0]["executable"], false);
  EXPECT_EQ(Send(admin_, "GET", "/api/v1/scripts/other.sh").code(), "script_not_found");
}

TEST_F(ApiScriptsTest, AnotherProjectsAdminWhoKnowsADigestCannotUseIt) {
  const std::string secret = "#!/bin/sh\necho the alpha project's own code\n";
  const std::string digest = Sha256Hex(secret);
  const int64_t size = static_cast<int64_t>(secret.size());
  ASSERT_EQ(PushFile("alpha.sh", "alpha.sh", secret).status, 201);
  ASSERT_EQ(Send(admin_, "GET", "/api/v1/blobs/" + digest).status, 200);

  // In B, the digest names nothing B holds.
  EXPECT_REFUSED(Send(beta_admin_, "GET", "/api/v1/blobs/" + digest + "?project=beta"), 404,
                 "artifact_not_found");
  EXPECT_REFUSED(Send(beta_admin_, "GET", "/api/v1/blobs/" + digest + "?project=" + beta_id_), 404,
                 "artifact_not_found");
  // Asking in A, where B's admin holds no role: A is not even visible.
  EXPECT_REFUSED(Send(beta_admin_, "GET", "/api/v1/blobs/" + digest + "?project=default"), 404,
                 "project_not_found");
  EXPECT_REFUSED(Send(beta_admin_, "GET", "/api/v1/blobs/" + digest + "?project=" + alpha_id_), 404,
                 "project_not_found");
  EXPECT_REFUSED(Send(beta_admin_, "GET", "/api/v1/blobs/" + digest), 404, "project_not_found");
  EXPECT_REFUSED(Send(beta_admin_, "GET", "/api/v1/scripts/alpha.sh/content?project=default"), 404,
                 "project_not_found");
  EXPECT_REFUSED(Send(beta_admin_, "GET", "/api/v1/scripts?project=default"), 404,
                 "project_not_found");
  EXPECT_REFUSED(Send(beta_admin_, "GET", "/api/v1/scripts/alpha.sh?project=beta"), 404,
                 "script_not_found");
  EXPECT_REFUSED(Send(beta_admin_, "GET", "/api/v1/scripts/alpha.sh/content?project=beta"), 404,
                 "script_not_found");

  // Publishing a version in B that names A's blob, as a file or inside a tree.
  EXPECT_REFUSED(
      Push(beta_admin_, "stolen.sh",
           json{{"kind", "file"}, {"files", json::array({File("stolen.sh", digest, size)})}},
           "beta"),
      404, "artifact_not_found");
  const std::string own = "#!/bin/sh\n. ./lib.sh\n";
  ASSERT_EQ(Upload(beta_admin_, own, "beta").status, 201);
  EXPECT_REFUSED(Push(beta_admin_, "stolen",
                      json{{"kind", "tree"},
                           {"entry", "main.sh"},
                           {"files", json::array({File("main.sh", Sha256Hex(own), own.size()),
                                                  File("lib.sh", digest, size)})}},
                      "beta"),
                 404, "artifact_not_found");
  // Joining it into a blob of B's.
  EXPECT_REFUSED(Send(beta_admin_, "POST", "/api/v1/blobs/compose?project=beta",
                      json{{"pieces", json::array({digest})}}.dump()),
                 404, "artifact_not_found");
  // Writing in A itself.
  EXPECT_REFUSED(
      Push(beta_admin_, "alpha.sh",
           json{{"kind", "file"}, {"files", json::array({File("alpha.sh", digest, size)})}},
           "default"),
      403, "permission_denied");
  EXPECT_REFUSED(Send(beta_admin_, "DELETE", "/api/v1/scripts/alpha.sh?project=default"), 403,
                 "permission_denied");
  EXPECT_REFUSED(Upload(beta_admin_, "x", "default"), 403, "permission_denied");

  // Nothing of it was written in B.
  EXPECT_REFUSED(Send(beta_admin_, "GET", "/api/v1/scripts/stolen.sh?project=beta"), 404,
                 "script_not_found");
  EXPECT_REFUSED(Send(beta_admin_, "GET", "/api/v1/scripts/stolen?project=beta"), 404,
                 "script_not_found");
  Reply listed = Send(beta_admin_, "GET", "/api/v1/scripts?project=beta");
  ASSERT_EQ(listed.status, 200) << listed.raw;
  EXPECT_TRUE(listed.body["items"].empty()) << listed.raw;
  EXPECT_REFUSED(Send(beta_admin_, "GET", "/api/v1/blobs/" + digest + "?project=beta"), 404,
                 "artifact_not_found");
  // A is untouched.
  Reply alpha = Send(admin_, "GET", "/api/v1/scripts/alpha.sh");
  ASSERT_EQ(alpha.status, 200) << alpha.raw;
  EXPECT_EQ(alpha.body["latest_version"], 1);
  EXPECT_EQ(alpha.body["status"], "active");
}

TEST_F(ApiScriptsTest, UploadsTakeOnlyRawBytesOfAtMostOneMiB) {
  // The media type: application/octet-stream, nothing else.
  EXPECT_REFUSED(Send(admin_, "POST", "/api/v1/blobs", "{}", "application/json"), 415,
                 "unsupported_media_type");
  EXPECT_REFUSED(Send(admin_, "POST", "/api/v1/blobs", "echo hi", "text/plain"), 415,
                 "unsupported_media_type");
  const std::string head =
      "POST /api/v1/blobs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: "
      "Bearer " +
      admin_ + "\r\nConnection: close\r\n";
  EXPECT_EQ(Raw(head + "Content-Length: 7\r\n\r\necho hi"),
            std::make_pair(415, std::string("unsupported_media_type")));
  EXPECT_EQ(Raw(head + "Content-Type: multipart/form-data; boundary=x\r\nContent-Length: "
                       "7\r\n\r\necho hi"),
            std::make_pair(415, std::string("unsupported_media_type")));
  // None of those was stored.
  EXPECT_REFUSED(Send(admin_, "GET", "/api/v1/blobs/" + Sha256Hex("echo hi")), 404,
                 "artifact_not_found");
  EXPECT_REFUSED(Send(admin_, "GET", "/api/v1/blobs/" + Sha256Hex("{}")), 404,
                 "artifact_not_found");

  // A body over 1 MiB is refused from its declared length, before a byte of it is read, and
  // when it is sent whole.
  EXPECT_EQ(Raw(head + "Content-Type: application/octet-stream\r\nContent-Length: " +
                std::to_string(kMiB + 1) + "\r\n\r\n"),
            std::make_pair(413, std::string("body_too_large")));
  EXPECT_REFUSED(Upload(admin_, Bytes(kMiB + 1, 9)), 413, "body_too_large");
  EXPECT_REFUSED(Send(admin_, "GET", "/api/v1/blobs/" + Sha256Hex(Bytes(kMiB + 1, 9))), 404,
                 "artifact_not_found");
  // Exactly 1 MiB is one piece.
  Reply full = Upload(admin_, Bytes(kMiB, 9));
  ASSERT_EQ(full.status, 201) << full.raw;
  EXPECT_EQ(full.body["size"], kMiB);
  EXPECT_EQ(full.body["chunks"], 1);
  // An empty body is the empty blob.
  Reply empty = Upload(admin_, "");
  ASSERT_EQ(empty.status, 201) << empty.raw;
  EXPECT_EQ(empty.body["digest"], Sha256Hex(""));
  EXPECT_EQ(empty.body["size"], 0);
  EXPECT_EQ(empty.body["chunks"], 0);

  // Query parameters: an upload takes only ?project=.
  EXPECT_REFUSED(Send(admin_, "POST", "/api/v1/blobs?name=x", "x", "application/octet-stream"), 400,
                 "unknown_parameter");
  EXPECT_REFUSED(Send(admin_, "POST", "/api/v1/blobs?project=default&project=beta", "x",
                      "application/octet-stream"),
                 400, "duplicate_parameter");
}

TEST_F(ApiScriptsTest, MalformedDigestsAndPiecesAreRefused) {
  for (const std::string& bad :
       {std::string("not-a-digest"), Sha256Hex("x").substr(0, 63), Sha256Hex("x") + "0",
        std::string(64, 'A'), std::string(64, 'g'), std::string("%20") + Sha256Hex("x")}) {
    SCOPED_TRACE(bad);
    EXPECT_REFUSED(Send(viewer_, "GET", "/api/v1/blobs/" + bad), 400, "artifact_digest_invalid");
  }
  // Segments no route matches.
  EXPECT_REFUSED(Send(viewer_, "GET", "/api/v1/blobs/%2E%2E"), 404, "route_not_found");
  EXPECT_REFUSED(Send(viewer_, "GET", "/api/v1/blobs/..%2Fscripts"), 404, "route_not_found");

  const std::string small = Bytes(1000, 1);
  const std::string last = Bytes(10, 2);
  const std::string whole = Bytes(kMiB, 3);
  for (const std::string* piece : {&small, &last, &whole}) {
    ASSERT_EQ(Upload(admin_, *piece).status, 201);
  }
  auto compose = [&](const std::vector<std::string>& pieces) {
    json list = json::array();
    for (const std::string& p : pieces) list.push_back(p);
    return Send(admin_, "POST", "/api/v1/blobs/compose", json{{"pieces", list}}.dump());
  };
  // A piece that is not 1 MiB but not the last.
  EXPECT_REFUSED(compose({Sha256Hex(small), Sha256Hex(last)}), 400, "artifact_piece_invalid");
  EXPECT_REFUSED(compose({Sha256Hex(whole), Sha256Hex(small), Sha256Hex(whole)}), 400,
                 "artifact_piece_invalid");
  // A piece that is itself a composed blob of more than one chunk.
  Reply two = compose({Sha256Hex(whole), Sha256Hex(small)});
  ASSERT_EQ(two.status, 201) << two.raw;
  EXPECT_EQ(two.body["chunks"], 2);
  EXPECT_REFUSED(compose({two.body["digest"].get<std::string>(), Sha256Hex(last)}), 400,
                 "artifact_piece_invalid");
  // Digests that are malformed, or name nothing the project uploaded.
  EXPECT_REFUSED(compose({Sha256Hex(whole), "zz"}), 400, "artifact_digest_invalid");
  EXPECT_REFUSED(compose({Sha256Hex(whole), Sha256Hex("never uploaded")}), 404,
                 "artifact_not_found");
  // The body's shape.
  EXPECT_REFUSED(Send(admin_, "POST", "/api/v1/blobs/compose", R"({"pieces":"abc"})"), 400,
                 "invalid_body");
  EXPECT_REFUSED(Send(admin_, "POST", "/api/v1/blobs/compose", R"({"pieces":[1]})"), 400,
                 "invalid_body");
  EXPECT_REFUSED(Send(admin_, "POST", "/api/v1/blobs/compose", R"({})"), 400, "invalid_body");
  EXPECT_REFUSED(Send(admin_, "POST", "/api/v1/blobs/compose", R"({"pieces":[],"project":"beta"})"),
                 400, "unknown_field");
  // Compose takes JSON, never raw bytes.
  EXPECT_REFUSED(
      Send(admin_, "POST", "/api/v1/blobs/compose", "pieces", "application/octet-stream"), 400,
      "invalid_json");
}

TEST_F(ApiScriptsTest, ALargeFileRoundTripsThroughPiecesComposeAndContent) {
  const std::string big = Bytes(2 * kMiB + kMiB / 2, 42);
  const std::vector<std::string> parts = {big.substr(0, kMiB), big.substr(kMiB, kMiB),
                                          big.substr(2 * kMiB)};
  json pieces = json::array();
  for (const std::string& part : parts) {
    Reply piece = Upload(admin_, part);
    ASSERT_EQ(piece.status, 201) << piece.raw;
    EXPECT_EQ(piece.body["digest"], Sha256Hex(part));
    EXPECT_EQ(piece.body["size"], part.size());
    EXPECT_EQ(piece.body["chunks"], 1);
    pieces.push_back(piece.body["digest"]);
  }
  Reply composed = Send(admin_, "POST", "/api/v1/blobs/compose", json{{"pieces", pieces}}.dump());
  ASSERT_EQ(composed.status, 201) << composed.raw;
  const std::string digest = Sha256Hex(big);
  EXPECT_EQ(composed.body["digest"], digest);
  EXPECT_EQ(composed.body["size"], big.size());
  EXPECT_EQ(composed.body["chunks"], 3);

  Reply pushed = Push(
      admin_, "big.py",
      json{{"kind", "file"}, {"files", json::array({File("big.py", digest, big.size(), true)})}});
  ASSERT_EQ(pushed.status, 201) << pushed.raw;
  EXPECT_EQ(pushed.body["version"], 1);
  EXPECT_EQ(pushed.body["unchanged"], false);
  EXPECT_EQ(pushed.body["kind"], "file");
  EXPECT_EQ(pushed.body["digest"], digest);
  EXPECT_EQ(pushed.body["entry"], "big.py");

  for (const std::string& path : std::vector<std::string>{
           "/api/v1/scripts/big.py/content", "/api/v1/scripts/big.py/content?version=1",
           "/api/v1/scripts/big.py/content?path=big.py"}) {
    SCOPED_TRACE(path);
    Reply content = Send(viewer_, "GET", path);
    ASSERT_EQ(content.status, 200) << content.raw.substr(0, 200);
    EXPECT_EQ(content.raw.size(), big.size());
    EXPECT_TRUE(content.raw == big) << "the content differs from the bytes pushed";
    EXPECT_EQ(content.header("X-QL-Digest"), Sha256Hex(content.raw));
    EXPECT_EQ(content.header("X-QL-Digest"), digest);
    EXPECT_EQ(content.header("X-QL-Size"), std::to_string(big.size()));
    EXPECT_EQ(content.header("X-QL-Script-Version"), "1");
    EXPECT_EQ(content.header("X-QL-Script-Path"), "big.py");
    EXPECT_EQ(content.header("Content-Type"), "application/octet-stream");
  }
  Reply blob = Send(viewer_, "GET", "/api/v1/blobs/" + digest);
  ASSERT_EQ(blob.status, 200);
  EXPECT_TRUE(blob.raw == big);
  EXPECT_EQ(blob.header("X-QL-Digest"), digest);
  EXPECT_EQ(blob.header("X-QL-Size"), std::to_string(big.size()));
  // The empty blob: no chunk, no byte, and still its headers.
  ASSERT_EQ(Upload(admin_, "").status, 201);
  Reply none = Send(viewer_, "GET", "/api/v1/blobs/" + Sha256Hex(""));
  ASSERT_EQ(none.status, 200) << none.raw;
  EXPECT_EQ(none.raw, "");
  EXPECT_EQ(none.header("X-QL-Digest"), Sha256Hex(""));
  EXPECT_EQ(none.header("X-QL-Size"), "0");
}

TEST_F(ApiScriptsTest, ATreeServesItsEntryAndTheFilePathSelects) {
  const std::string main_sh = "#!/bin/sh\n. ./lib/util.sh\nhello\n";
  const std::string util_sh = "hello() { echo hi; }\n";
  ASSERT_EQ(Upload(admin_, main_sh).status, 201);
  ASSERT_EQ(Upload(admin_, util_sh).status, 201);
  const json files = json::array({File("main.sh", Sha256Hex(main_sh), main_sh.size(), true),
                                  File("lib/util.sh", Sha256Hex(util_sh), util_sh.size())});
  Reply pushed =
      Push(admin_, "tool", json{{"kind", "tree"}, {"entry", "main.sh"}, {"files", files}});
  ASSERT_EQ(pushed.status, 201) << pushed.raw;
  EXPECT_EQ(pushed.body["kind"], "tree");
  EXPECT_EQ(pushed.body["entry"], "main.sh");
  EXPECT_EQ(pushed.body["size"], main_sh.size() + util_sh.size());
  ASSERT_EQ(pushed.body["files"].size(), 2u);
  EXPECT_EQ(pushed.body["files"][0]["path"], "lib/util.sh");  // sorted by path
  EXPECT_EQ(pushed.body["files"][1]["path"], "main.sh");
  EXPECT_EQ(pushed.body["files"][1]["executable"], true);
  // The version's digest is its manifest's, a blob the project now holds.
  const std::string manifest = pushed.body["digest"];
  EXPECT_NE(manifest, Sha256Hex(main_sh));
  Reply listed_manifest = Send(viewer_, "GET", "/api/v1/blobs/" + manifest);
  ASSERT_EQ(listed_manifest.status, 200) << listed_manifest.raw;
  EXPECT_EQ(Sha256Hex(listed_manifest.raw), manifest);
  EXPECT_NE(listed_manifest.raw.find("qinglong/tree@v1"), std::string::npos);

  Reply entry = Send(viewer_, "GET", "/api/v1/scripts/tool/content");
  ASSERT_EQ(entry.status, 200) << entry.raw;
  EXPECT_EQ(entry.raw, main_sh);
  EXPECT_EQ(entry.header("X-QL-Script-Path"), "main.sh");
  EXPECT_EQ(entry.header("X-QL-Digest"), Sha256Hex(main_sh));
  Reply util = Send(viewer_, "GET", "/api/v1/scripts/tool/content?path=lib/util.sh");
  ASSERT_EQ(util.status, 200) << util.raw;
  EXPECT_EQ(util.raw, util_sh);
  EXPECT_EQ(util.header("X-QL-Script-Path"), "lib/util.sh");
  EXPECT_EQ(util.header("X-QL-Size"), std::to_string(util_sh.size()));
  Reply escaped = Send(viewer_, "GET", "/api/v1/scripts/tool/content?path=lib%2Futil.sh");
  EXPECT_EQ(escaped.status, 200) << escaped.raw;
  EXPECT_EQ(escaped.raw, util_sh);
  for (const std::string& path :
       {std::string("util.sh"), std::string("lib"), std::string("../main.sh"),
        std::string("lib/../main.sh"), std::string("/main.sh")}) {
    SCOPED_TRACE(path);
    EXPECT_REFUSED(Send(viewer_, "GET", "/api/v1/scripts/tool/content?path=" + path), 404,
                   "script_file_not_found");
  }
}

TEST_F(ApiScriptsTest, PathsThatLeaveTheTreeAreRefused) {
  const std::string main_sh = "#!/bin/sh\necho main\n";
  const std::string x = "x\n";
  ASSERT_EQ(Upload(admin_, main_sh).status, 201);
  ASSERT_EQ(Upload(admin_, x).status, 201);
  for (const std::string& path :
       {std::string("../x"), std::string("/abs"), std::string("a//b"), std::string("a/../../x"),
        std::string("./x"), std::string("a/."), std::string("a/"), std::string("a\\..\\x"),
        std::string("a\nb"), std::string("")}) {
    SCOPED_TRACE(json(path).dump());
    const json files = json::array(
        {File("main.sh", Sha256Hex(main_sh), main_sh.size()), File(path, Sha256Hex(x), x.size())});
    EXPECT_REFUSED(
        Push(admin_, "escape", json{{"kind", "tree"}, {"entry", "main.sh"}, {"files", files}}), 400,
        "artifact_path_invalid");
    // As the entry too.
    EXPECT_REFUSED(Push(admin_, "escape",
                        json{{"kind", "tree"},
                             {"entry", path},
                             {"files", json::array({File(path, Sha256Hex(x), x.size())})}}),
                   400, "artifact_path_invalid");
    // And as a file script's name.
    EXPECT_REFUSED(
        Push(admin_, "escape",
             json{{"kind", "file"}, {"files", json::array({File(path, Sha256Hex(x), x.size())})}}),
        400, "artifact_path_invalid");
  }
  // A file script's name is one segment.
  EXPECT_REFUSED(
      Push(admin_, "escape",
           json{{"kind", "file"}, {"files", json::array({File("a/b", Sha256Hex(x), x.size())})}}),
      400, "artifact_path_invalid");
  // Other malformed trees.
  const json twice = json::array({File("main.sh", Sha256Hex(main_sh), main_sh.size()),
                                  File("main.sh", Sha256Hex(x), x.size())});
  EXPECT_REFUSED(
      Push(admin_, "escape", json{{"kind", "tree"}, {"entry", "main.sh"}, {"files", twice}}), 400,
      "artifact_path_duplicate");
  const json nested = json::array(
      {File("a", Sha256Hex(main_sh), main_sh.size()), File("a/b", Sha256Hex(x), x.size())});
  EXPECT_REFUSED(Push(admin_, "escape", json{{"kind", "tree"}, {"entry", "a"}, {"files", nested}}),
                 400, "artifact_path_conflict");
  const json one = json::array({File("main.sh", Sha256Hex(main_sh), main_sh.size())});
  EXPECT_REFUSED(Push(admin_, "escape", json{{"kind", "tree"}, {"files", one}}), 400,
                 "script_entry_invalid");
  EXPECT_REFUSED(
      Push(admin_, "escape", json{{"kind", "tree"}, {"entry", "other.sh"}, {"files", one}}), 400,
      "script_entry_invalid");
  EXPECT_REFUSED(
      Push(admin_, "escape", json{{"kind", "dir"}, {"entry", "main.sh"}, {"files", one}}), 400,
      "script_kind_invalid");
  EXPECT_REFUSED(Push(admin_, "escape", json{{"kind", "file"}, {"files", json::array()}}), 400,
                 "artifact_tree_invalid");
  // A size other than the blob's.
  EXPECT_REFUSED(Push(admin_, "escape",
                      json{{"kind", "file"},
                           {"files", json::array({File("main.sh", Sha256Hex(main_sh), 1)})}}),
                 400, "artifact_tree_invalid");
  // Bodies a push does not take.
  EXPECT_REFUSED(Push(admin_, "escape", json{{"kind", "file"}, {"files", one}, {"name", "x"}}), 400,
                 "unknown_field");
  EXPECT_REFUSED(Push(admin_, "escape", json{{"files", one}}), 400, "missing_field");
  EXPECT_REFUSED(Push(admin_, "escape", json{{"kind", "file"}, {"files", "main.sh"}}), 400,
                 "invalid_body");
  EXPECT_REFUSED(
      Push(admin_, "escape",
           json{{"kind", "file"},
                {"files", json::array({{{"path", "main.sh"}, {"digest", Sha256Hex(main_sh)}}})}}),
      400, "missing_field");
  EXPECT_REFUSED(Push(admin_, "escape",
                      json{{"kind", "file"},
                           {"files", json::array({File("main.sh", "../../etc/passwd", 3)})}}),
                 400, "artifact_digest_invalid");
  // Script names that are not one safe word.
  EXPECT_REFUSED(Push(admin_, "-x", json{{"kind", "file"}, {"files", one}}), 400,
                 "script_name_invalid");
  EXPECT_REFUSED(Push(admin_, "a%40b", json{{"kind", "file"}, {"files", one}}), 400,
                 "script_name_invalid");
  EXPECT_REFUSED(Push(admin_, "a%20b", json{{"kind", "file"}, {"files", one}}), 400,
                 "script_name_invalid");
  // None of it created the script.
  EXPECT_REFUSED(Send(admin_, "GET", "/api/v1/scripts/escape"), 404, "script_not_found");
  Reply listed = Send(admin_, "GET", "/api/v1/scripts");
  ASSERT_EQ(listed.status, 200);
  EXPECT_TRUE(listed.body["items"].empty()) << listed.raw;
}

TEST_F(ApiScriptsTest, VersionsAppendUnchangedPushesWriteNothingDeleteKeepsThem) {
  const std::string v1 = "echo one\n";
  const std::string v2 = "echo two\n";
  Reply first = PushFile("job.sh", "job.sh", v1);
  ASSERT_EQ(first.status, 201) << first.raw;
  EXPECT_EQ(first.body["version"], 1);
  EXPECT_EQ(first.body["unchanged"], false);
  // The same content again: 200, unchanged, still version 1.
  Reply again = PushFile("job.sh", "job.sh", v1);
  ASSERT_EQ(again.status, 200) << again.raw;
  EXPECT_EQ(again.body["unchanged"], true);
  EXPECT_EQ(again.body["version"], 1);
  EXPECT_EQ(again.body["digest"], Sha256Hex(v1));
  // New content: 201, version 2.
  Reply second = PushFile("job.sh", "job.sh", v2);
  ASSERT_EQ(second.status, 201) << second.raw;
  EXPECT_EQ(second.body["version"], 2);
  EXPECT_EQ(second.body["unchanged"], false);
  // A lost compare-and-set: the pusher saw version 1 (or none), the script is at 2.
  for (int seen : {1, 0}) {
    SCOPED_TRACE(seen);
    EXPECT_REFUSED(Push(admin_, "job.sh",
                        json{{"kind", "file"},
                             {"files", json::array({File("job.sh", Sha256Hex(v1), v1.size())})},
                             {"expected_latest", seen}}),
                   409, "script_version_conflict");
  }

  Reply versions = Send(viewer_, "GET", "/api/v1/scripts/job.sh/versions");
  ASSERT_EQ(versions.status, 200) << versions.raw;
  ASSERT_EQ(versions.body["items"].size(), 2u);
  EXPECT_EQ(versions.body["items"][0]["version"], 2);
  EXPECT_EQ(versions.body["items"][1]["version"], 1);
  EXPECT_EQ(versions.body["items"][1]["digest"], Sha256Hex(v1));
  EXPECT_FALSE(versions.body["items"][0].contains("files"));
  Reply latest = Send(viewer_, "GET", "/api/v1/scripts/job.sh");
  ASSERT_EQ(latest.status, 200);
  EXPECT_EQ(latest.body["latest_version"], 2);
  EXPECT_EQ(latest.body["version"]["version"], 2);
  EXPECT_EQ(Send(viewer_, "GET", "/api/v1/scripts/job.sh/content?version=1").raw, v1);
  EXPECT_REFUSED(Send(viewer_, "GET", "/api/v1/scripts/job.sh?version=3"), 404,
                 "script_version_not_found");

  // Delete: the head is gone for unversioned reads; versions stay readable by number.
  Reply deleted = Send(admin_, "DELETE", "/api/v1/scripts/job.sh");
  ASSERT_EQ(deleted.status, 200) << deleted.raw;
  EXPECT_EQ(deleted.body["status"], "deleted");
  EXPECT_FALSE(deleted.body["deleted_at"].is_null());
  EXPECT_REFUSED(Send(viewer_, "GET", "/api/v1/scripts/job.sh"), 404, "script_not_found");
  EXPECT_REFUSED(Send(viewer_, "GET", "/api/v1/scripts/job.sh/content"), 404, "script_not_found");
  Reply old = Send(viewer_, "GET", "/api/v1/scripts/job.sh?version=1");
  ASSERT_EQ(old.status, 200) << old.raw;
  EXPECT_EQ(old.body["status"], "deleted");
  EXPECT_EQ(old.body["version"]["version"], 1);
  Reply old_content = Send(viewer_, "GET", "/api/v1/scripts/job.sh/content?version=1");
  ASSERT_EQ(old_content.status, 200) << old_content.raw;
  EXPECT_EQ(old_content.raw, v1);
  EXPECT_EQ(old_content.header("X-QL-Digest"), Sha256Hex(v1));
  EXPECT_EQ(Send(viewer_, "GET", "/api/v1/scripts/job.sh/versions").body["items"].size(), 2u);
  Reply listed = Send(viewer_, "GET", "/api/v1/scripts");
  ASSERT_EQ(listed.body["items"].size(), 1u);
  EXPECT_EQ(listed.body["items"][0]["status"], "deleted");
  // Deleting again answers the tombstone; a script never pushed is not found.
  Reply twice = Send(admin_, "DELETE", "/api/v1/scripts/job.sh");
  EXPECT_EQ(twice.status, 200) << twice.raw;
  EXPECT_EQ(twice.body["deleted_at"], deleted.body["deleted_at"]);
  EXPECT_REFUSED(Send(admin_, "DELETE", "/api/v1/scripts/never.sh"), 404, "script_not_found");

  // Pushing the deleted script's latest content again is a new version, and makes it live.
  Reply revived = PushFile("job.sh", "job.sh", v2);
  ASSERT_EQ(revived.status, 201) << revived.raw;
  EXPECT_EQ(revived.body["version"], 3);
  EXPECT_EQ(revived.body["unchanged"], false);
  Reply live = Send(viewer_, "GET", "/api/v1/scripts/job.sh");
  ASSERT_EQ(live.status, 200) << live.raw;
  EXPECT_EQ(live.body["status"], "active");
  EXPECT_TRUE(live.body["deleted_at"].is_null());
}

TEST_F(ApiScriptsTest, QueryParametersAreStrict) {
  ASSERT_EQ(PushFile("q.sh", "q.sh", "echo q\n").status, 201);
  const std::string digest = Sha256Hex("echo q\n");
  // Parameters a route does not take.
  for (const auto& [method, path] : std::vector<std::pair<std::string, std::string>>{
           {"GET", "/api/v1/scripts?version=1"},
           {"GET", "/api/v1/scripts?limit=10"},
           {"GET", "/api/v1/scripts/q.sh?path=q.sh"},
           {"GET", "/api/v1/scripts/q.sh/versions?version=1"},
           {"GET", "/api/v1/scripts/q.sh/content?file=q.sh"},
           {"GET", "/api/v1/blobs/" + digest + "?version=1"},
           {"DELETE", "/api/v1/scripts/q.sh?version=1"},
           {"POST", "/api/v1/blobs/compose?force=true"},
           {"POST", "/api/v1/scripts/q.sh/versions?version=2"}}) {
    SCOPED_TRACE(method + " " + path);
    EXPECT_REFUSED(Send(admin_, method, path, json{{"pieces", json::array()}}.dump()), 400,
                   "unknown_parameter");
  }
  EXPECT_REFUSED(Send(viewer_, "GET", "/api/v1/scripts/q.sh?version=1&version=1"), 400,
                 "duplicate_parameter");
  // Versions are whole numbers >= 1.
  for (const std::string& version :
       {std::string("0"), std::string("-1"), std::string("abc"), std::string("1.5"),
        std::string("1e2"), std::string("+1"), std::string(""), std::string("%201"),
        std::string("99999999999999999999")}) {
    SCOPED_TRACE(version);
    EXPECT_REFUSED(Send(viewer_, "GET", "/api/v1/scripts/q.sh?version=" + version), 400,
                   "script_ref_invalid");
    EXPECT_REFUSED(Send(viewer_, "GET", "/api/v1/scripts/q.sh/content?version=" + version), 400,
                   "script_ref_invalid");
  }
  // A GET with a body.
  const std::string head =
      "GET /api/v1/scripts HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: "
      "Bearer " +
      viewer_ + "\r\nConnection: close\r\n";
  EXPECT_EQ(Raw(head + "Content-Length: 2\r\n\r\n{}"),
            std::make_pair(400, std::string("unexpected_body")));
}

TEST_F(ApiScriptsTest, AServerWithoutAScriptLibraryAnswers503) {
  ApiServerOptions options = options_;
  options.scripts = nullptr;
  Metrics metrics;
  ApiServer bare(*service_, metrics, options);
  ASSERT_TRUE(bare.Start("127.0.0.1", 0).ok());
  bare.SetReady(true);
  for (const auto& [method, path] :
       std::vector<std::pair<std::string, std::string>>{{"GET", "/api/v1/scripts"},
                                                        {"GET", "/api/v1/scripts/a.sh"},
                                                        {"GET", "/api/v1/scripts/a.sh/versions"},
                                                        {"GET", "/api/v1/scripts/a.sh/content"},
                                                        {"GET", "/api/v1/blobs/" + Sha256Hex("")},
                                                        {"DELETE", "/api/v1/scripts/a.sh"},
                                                        {"POST", "/api/v1/scripts/a.sh/versions"},
                                                        {"POST", "/api/v1/blobs/compose"}}) {
    SCOPED_TRACE(method + " " + path);
    EXPECT_REFUSED(Send(admin_, method, path, "{}", "application/json", bare.port()), 503,
                   "scripts_unavailable");
  }
  EXPECT_REFUSED(
      Send(admin_, "POST", "/api/v1/blobs", "x", "application/octet-stream", bare.port()), 503,
      "scripts_unavailable");
  // Still no entry without a token.
  EXPECT_REFUSED(Send("wrong", "GET", "/api/v1/scripts", "", "", bare.port()), 401, "unauthorized");
}

}  // namespace
}  // namespace ql
