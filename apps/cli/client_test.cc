#include "client.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

namespace ql::cli {
namespace {

namespace fs = std::filesystem;

EnvLookup FakeEnv(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "ql_cli_test.XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }
  void Write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ + "/" + name) << text;
  }

 private:
  std::string path_;
};

TEST(ParseServerUrlTest, AcceptsHttpUrlsAndBareHostPort) {
  CliResult<ServerAddress> a = ParseServerUrl("http://127.0.0.1:5700");
  ASSERT_TRUE(a.ok()) << a.error().message();
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 5700);
  EXPECT_EQ(a->base_path, "");
  EXPECT_EQ(a->url, "http://127.0.0.1:5700");

  CliResult<ServerAddress> b = ParseServerUrl("localhost:5800");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->host, "localhost");
  EXPECT_EQ(b->port, 5800);

  CliResult<ServerAddress> c = ParseServerUrl("HTTP://ql.example/prefix/");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->port, 80);
  EXPECT_EQ(c->base_path, "/prefix");
  EXPECT_EQ(c->url, "http://ql.example:80/prefix");

  CliResult<ServerAddress> d = ParseServerUrl("http://[::1]:5700");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->host, "::1");
  EXPECT_EQ(d->url, "http://[::1]:5700");
}

TEST(ParseServerUrlTest, RejectsWhatItCannotConnectToWithAUsageError) {
  for (const char* bad :
       {"", "http://", "http://:5700", "http://host:", "http://host:0", "http://host:65536",
        "http://host:57x0", "ftp://host", "http://u:p@h:1", "http://[::1", "http://host:1/p?q=1"}) {
    CliResult<ServerAddress> r = ParseServerUrl(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().exit_code(), kExitUsage) << bad;
    EXPECT_EQ(r.error().reason(), "invalid_server_url") << bad;
  }
  CliResult<ServerAddress> tls = ParseServerUrl("https://ql.example");
  ASSERT_TRUE(tls.ok());
  EXPECT_TRUE(tls->tls);
  EXPECT_EQ(tls->port, 443);
}

TEST(ResolveConnectionTest, ReadsServerFileAndOwnerTokenFromTheDataDirectory) {
  TempDir dir;
  dir.Write("server.json", R"({"server":"http://127.0.0.1:5711","pid":42})");
  dir.Write("owner.token", "0123456789abcdef0123456789abcdef\n");
  GlobalOptions options;
  options.data_dir = dir.path();
  CliResult<Connection> c = ResolveConnection(options, FakeEnv({}));
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->server.port, 5711);
  EXPECT_EQ(c->token, "0123456789abcdef0123456789abcdef");
  EXPECT_EQ(c->server_source, dir.path() + "/server.json");
  EXPECT_EQ(c->token_source, dir.path() + "/owner.token");
}

TEST(ResolveConnectionTest, TheSessionOfQlLoginComesBeforeTheDefaultDataDirectory) {
  TempDir home;
  std::filesystem::create_directories(home.path() + "/.config/qinglong");
  home.Write(".config/qinglong/credentials.json",
             R"({"server":"http://127.0.0.1:5722","token":"qls_abc","principal":"alice"})");
  CliResult<Connection> c = ResolveConnection({}, FakeEnv({{"HOME", home.path()}}));
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->server.port, 5722);
  EXPECT_EQ(c->token, "qls_abc");
  EXPECT_EQ(c->server_source, home.path() + "/.config/qinglong/credentials.json");
  // The kept token goes only to the server it was made for.
  GlobalOptions other;
  other.server = "http://127.0.0.1:5799";
  CliResult<Connection> elsewhere =
      ResolveConnection(other, FakeEnv({{"HOME", home.path()}}));
  ASSERT_FALSE(elsewhere.ok());
  EXPECT_EQ(elsewhere.error().reason(), "token_not_found");
  // A named data directory wins over it.
  TempDir data;
  data.Write("server.json", R"({"server":"http://127.0.0.1:5711","pid":42})");
  data.Write("owner.token", "owner-token\n");
  CliResult<Connection> local = ResolveConnection(
      {}, FakeEnv({{"HOME", home.path()}, {"QL_DATA_DIR", data.path()}}));
  ASSERT_TRUE(local.ok()) << local.error().message();
  EXPECT_EQ(local->token, "owner-token");
}

TEST(ResolveConnectionTest, DataDirectoryComesFromQlDataDirWhenNoFlag) {
  TempDir dir;
  dir.Write("server.json", R"({"server":"http://127.0.0.1:5712"})");
  dir.Write("owner.token", "tok");
  CliResult<Connection> c = ResolveConnection({}, FakeEnv({{"QL_DATA_DIR", dir.path()}}));
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->server.port, 5712);
}

TEST(ResolveConnectionTest, PlainHttpOffLoopbackIsRefusedUnlessExplicitlyAllowed) {
  GlobalOptions options;
  options.server = "http://10.0.0.5:5700";
  options.token = "tok";
  CliResult<Connection> refused = ResolveConnection(options, FakeEnv({}));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().exit_code(), kExitUsage);
  EXPECT_EQ(refused.error().reason(), "insecure_http_refused");
  EXPECT_NE(refused.error().message().find("--allow-insecure-http"), std::string::npos);

  EXPECT_TRUE(
      ResolveConnection(options, FakeEnv({{"QL_ALLOW_INSECURE_HTTP", "true"}})).ok());
  options.allow_insecure_http = true;
  EXPECT_TRUE(ResolveConnection(options, FakeEnv({})).ok());

  GlobalOptions tls;
  tls.server = "https://10.0.0.5:5700";
  tls.token = "tok";
  tls.client_cert = "client.pem";
  CliResult<Connection> half = ResolveConnection(tls, FakeEnv({}));
  ASSERT_FALSE(half.ok());
  EXPECT_EQ(half.error().reason(), "tls_flags_incomplete");
  CliResult<Connection> full =
      ResolveConnection(tls, FakeEnv({{"QL_CLIENT_KEY", "client.key"}, {"QL_CA_FILE", "ca.pem"}}));
  ASSERT_TRUE(full.ok()) << full.error().message();
  EXPECT_EQ(full->tls.ca_file, "ca.pem");
  EXPECT_EQ(full->tls.key_file, "client.key");
}

TEST(ResolveConnectionTest, FlagsWinOverEnvironmentWhichWinsOverTheDataDirectory) {
  TempDir dir;
  dir.Write("server.json", R"({"server":"http://127.0.0.1:1111"})");
  dir.Write("owner.token", "file-token");
  const EnvLookup env = FakeEnv({{"QL_SERVER", "http://127.0.0.1:2222"},
                                 {"QL_TOKEN", "env-token"},
                                 {"QL_DATA_DIR", dir.path()}});
  CliResult<Connection> from_env = ResolveConnection({}, env);
  ASSERT_TRUE(from_env.ok());
  EXPECT_EQ(from_env->server.port, 2222);
  EXPECT_EQ(from_env->token, "env-token");
  EXPECT_EQ(from_env->server_source, "QL_SERVER");

  GlobalOptions flags;
  flags.server = "http://127.0.0.1:3333";
  flags.token = "flag-token";
  CliResult<Connection> from_flags = ResolveConnection(flags, env);
  ASSERT_TRUE(from_flags.ok());
  EXPECT_EQ(from_flags->server.port, 3333);
  EXPECT_EQ(from_flags->token, "flag-token");

  // Each value is resolved on its own: a server flag with the token from the data directory.
  GlobalOptions server_only;
  server_only.server = "http://127.0.0.1:4444";
  CliResult<Connection> mixed =
      ResolveConnection(server_only, FakeEnv({{"QL_DATA_DIR", dir.path()}}));
  ASSERT_TRUE(mixed.ok());
  EXPECT_EQ(mixed->server.port, 4444);
  EXPECT_EQ(mixed->token, "file-token");
}

TEST(ResolveConnectionTest, NothingFoundIsAUsageErrorSayingHowToPassTheValues) {
  TempDir dir;
  GlobalOptions options;
  options.data_dir = dir.path() + "/missing";
  CliResult<Connection> c = ResolveConnection(options, FakeEnv({}));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().exit_code(), kExitUsage);
  EXPECT_EQ(c.error().reason(), "server_not_found");
  for (const char* hint : {"--server", "QL_SERVER", "--data", "server.json"}) {
    EXPECT_NE(c.error().message().find(hint), std::string::npos) << c.error().message();
  }

  dir.Write("server.json", R"({"server":"http://127.0.0.1:5700"})");
  options.data_dir = dir.path();
  CliResult<Connection> no_token = ResolveConnection(options, FakeEnv({}));
  ASSERT_FALSE(no_token.ok());
  EXPECT_EQ(no_token.error().exit_code(), kExitUsage);
  EXPECT_EQ(no_token.error().reason(), "token_not_found");
  EXPECT_NE(no_token.error().message().find("--token"), std::string::npos);
  EXPECT_NE(no_token.error().message().find("QL_TOKEN"), std::string::npos);
}

TEST(ResolveConnectionTest, DamagedServerFileAndBadTokensAreUsageErrorsThatHideTheToken) {
  TempDir dir;
  dir.Write("server.json", "not json");
  dir.Write("owner.token", "tok");
  GlobalOptions options;
  options.data_dir = dir.path();
  CliResult<Connection> damaged = ResolveConnection(options, FakeEnv({}));
  ASSERT_FALSE(damaged.ok());
  EXPECT_EQ(damaged.error().reason(), "server_file_invalid");

  GlobalOptions bad_token;
  bad_token.server = "http://127.0.0.1:1";
  bad_token.token = "secret value\r\nX-Injected: 1";
  CliResult<Connection> r = ResolveConnection(bad_token, FakeEnv({}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().exit_code(), kExitUsage);
  EXPECT_EQ(r.error().reason(), "token_invalid");
  EXPECT_EQ(r.error().message().find("secret"), std::string::npos);
}

TEST(ResolveConnectionTest, UnreadableTokenFileSaysWhoseItIs) {
  if (::geteuid() == 0) GTEST_SKIP() << "root reads any file regardless of its mode";
  TempDir dir;
  dir.Write("server.json", R"({"server":"http://127.0.0.1:5700"})");
  dir.Write("owner.token", "tok");
  ::chmod((dir.path() + "/owner.token").c_str(), 0);
  GlobalOptions options;
  options.data_dir = dir.path();
  CliResult<Connection> r = ResolveConnection(options, FakeEnv({}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().reason(), "token_unreadable");
}

TEST(UrlTest, EncodesPathSegmentsAndQueryValues) {
  EXPECT_EQ(UrlEncode("abc-123_~."), "abc-123_~.");
  EXPECT_EQ(UrlEncode("../x y&z"), "..%2Fx%20y%26z");
  EXPECT_EQ(WithQuery("/api/v1/runs", {{"task_id", "t 1"}, {"status", ""}, {"limit", "5"}}),
            "/api/v1/runs?task_id=t%201&limit=5");
  EXPECT_EQ(WithQuery("/x?a=1", {{"b", "2"}}), "/x?a=1&b=2");
}

TEST(ErrorFromResponseTest, UsesTheServerCodeAndMessage) {
  CliError e = ErrorFromResponse(409, R"({"code":"revision_conflict","message":"current is 3"})");
  EXPECT_EQ(e.exit_code(), kExitFailure);
  EXPECT_EQ(e.ToString(), "error: revision_conflict: current is 3");

  CliError nested = ErrorFromResponse(404, R"({"error":{"code":"run_not_found","message":"m"}})");
  EXPECT_EQ(nested.reason(), "run_not_found");

  CliError plain = ErrorFromResponse(502, "Bad Gateway\n");
  EXPECT_EQ(plain.exit_code(), kExitFailure);
  EXPECT_EQ(plain.reason(), "http_502");
  EXPECT_NE(plain.message().find("Bad Gateway"), std::string::npos);
}

// A real HTTP server on a loopback port chosen by the kernel.
class ApiClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_.Get("/api/v1/echo-auth", [](const httplib::Request& req, httplib::Response& res) {
      res.set_content(
          nlohmann::json{{"authorization", req.get_header_value("Authorization")}}.dump(),
          "application/json");
    });
    server_.Get("/api/v1/missing", [](const httplib::Request&, httplib::Response& res) {
      res.status = 404;
      res.set_content(R"({"code":"run_not_found","message":"no run x"})", "application/json");
    });
    server_.Post("/api/v1/echo", [](const httplib::Request& req, httplib::Response& res) {
      res.status = 201;
      res.set_content(req.body, "application/json");
    });
    server_.Get("/api/v1/stream", [](const httplib::Request&, httplib::Response& res) {
      res.set_chunked_content_provider("application/octet-stream",
                                       [](size_t offset, httplib::DataSink& sink) {
                                         sink.write("one\n", 4);
                                         sink.write(std::string("\0two\n", 5).data(), 5);
                                         sink.done();
                                         return true;
                                       });
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    ASSERT_GT(port_, 0);
    // The socket listens from bind on, so requests queue until the loop accepts them.
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // stop() only ends a loop that is running; wait for it so TearDown cannot hang.
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  void TearDown() override {
    server_.stop();
    thread_.join();
  }
  Connection ConnectionTo(int port) {
    Connection c;
    c.server = *ParseServerUrl("http://127.0.0.1:" + std::to_string(port));
    c.server_source = "--server";
    c.token = "t0ken";
    c.token_source = "--token";
    return c;
  }

  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

TEST_F(ApiClientTest, SendsTheBearerTokenAndParsesJson) {
  ApiClient api(ConnectionTo(port_));
  CliResult<nlohmann::json> r = api.GetJson("/api/v1/echo-auth");
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ((*r)["authorization"], "Bearer t0ken");

  CliResult<nlohmann::json> posted = api.PostJson("/api/v1/echo", {{"a", 1}});
  ASSERT_TRUE(posted.ok());
  EXPECT_EQ((*posted)["a"], 1);
}

TEST_F(ApiClientTest, ServerErrorsExitOneWithTheirCode) {
  ApiClient api(ConnectionTo(port_));
  CliResult<nlohmann::json> r = api.GetJson("/api/v1/missing");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().exit_code(), kExitFailure);
  EXPECT_EQ(r.error().ToString(), "error: run_not_found: no run x");
}

TEST_F(ApiClientTest, StreamsBodyBytesExactly) {
  ApiClient api(ConnectionTo(port_));
  std::string received;
  CliResult<int> r = api.GetStream(
      "/api/v1/stream", nullptr,
      [&](const char* data, size_t size) {
        received.append(data, size);
        return true;
      },
      5);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(received, std::string("one\n\0two\n", 9));
}

TEST_F(ApiClientTest, UnreachableServerExitsThreeNamingTheAddressButNotTheToken) {
  // A port that was just bound and released has nothing listening on it.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int dead_port = ntohs(addr.sin_port);
  ::close(fd);
  ApiClient api(ConnectionTo(dead_port));
  CliResult<nlohmann::json> r = api.GetJson("/api/v1/tasks");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().exit_code(), kExitUnreachable);
  EXPECT_EQ(r.error().reason(), "server_unreachable");
  EXPECT_NE(r.error().message().find("http://127.0.0.1:" + std::to_string(dead_port)),
            std::string::npos)
      << r.error().message();
  EXPECT_EQ(r.error().message().find("t0ken"), std::string::npos);
}

}  // namespace
}  // namespace ql::cli
