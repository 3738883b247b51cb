#pragma once

// The ql client's connection to a QingLong server: where the server and token come from, the
// HTTP calls, how failures become exit statuses. ql speaks the HTTP API only.

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "ql/core/http_endpoint.h"

namespace CLI {
class App;
}  // namespace CLI

namespace httplib {
class Client;
}  // namespace httplib

namespace ql::cli {

// Exit statuses of ql management commands.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;      // the server refused, or a local failure
inline constexpr int kExitUsage = 2;        // bad flags or arguments, nothing to connect with
inline constexpr int kExitUnreachable = 3;  // the server could not be reached
// How a run ended, for commands that wait for one (run start --wait/--follow, run log -f).
inline constexpr int kExitRunFailed = 10;            // failed: the command exited non-zero
inline constexpr int kExitRunTimedOut = 11;          // timed out
inline constexpr int kExitRunCancelled = 12;         // cancelled
inline constexpr int kExitApprovalRequired = 13;     // waits for another person's approval
inline constexpr int kExitRunRecoveryRequired = 14;  // outcome unknown: an admin resolves it
inline constexpr int kExitRunSkipped = 15;           // skipped at admission

// Why a command failed: printed as "error: <reason>: <message>", and the exit status to return.
class CliError {
 public:
  CliError(int exit_code, std::string reason, std::string message)
      : exit_code_(exit_code), reason_(std::move(reason)), message_(std::move(message)) {}

  // Returns an error for bad local input (exit 2).
  static CliError Usage(std::string reason, std::string message) {
    return CliError(kExitUsage, std::move(reason), std::move(message));
  }
  // Returns an error the server reported, or a local failure (exit 1).
  static CliError Failure(std::string reason, std::string message) {
    return CliError(kExitFailure, std::move(reason), std::move(message));
  }
  // Returns an error for a server that cannot be reached (exit 3).
  static CliError Unreachable(std::string reason, std::string message) {
    return CliError(kExitUnreachable, std::move(reason), std::move(message));
  }

  int exit_code() const { return exit_code_; }
  const std::string& reason() const { return reason_; }
  const std::string& message() const { return message_; }
  // Returns "error: <reason>: <message>".
  std::string ToString() const { return "error: " + reason_ + ": " + message_; }

 private:
  int exit_code_;
  std::string reason_;
  std::string message_;
};

// Either a value or a CliError.
template <typename T>
class [[nodiscard]] CliResult {
 public:
  CliResult(T value) : v_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  CliResult(CliError error) : v_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return v_.index() == 0; }
  const CliError& error() const { return std::get<CliError>(v_); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, CliError> v_;
};

// Looks up an environment variable; nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

// Returns an EnvLookup over the process environment.
EnvLookup ProcessEnvironment();

// Options every management command accepts, before or after the subcommand.
struct GlobalOptions {
  std::optional<std::string> server;    // --server URL
  std::optional<std::string> token;     // --token TOKEN
  std::optional<std::string> data_dir;  // --data DIR
  std::optional<std::string> project;   // --project NAME (else $QL_PROJECT; else the default)
  std::optional<std::string> ca_file;      // --ca-file FILE (else $QL_CA_FILE)
  std::optional<std::string> client_cert;  // --client-cert FILE (else $QL_CLIENT_CERT)
  std::optional<std::string> client_key;   // --client-key FILE (else $QL_CLIENT_KEY)
  bool allow_insecure_http = false;  // --allow-insecure-http (or $QL_ALLOW_INSECURE_HTTP=true)
  bool json = false;                 // --json, or --output json|yaml: data, not tables
  bool yaml = false;                 // --output yaml: that data as YAML
  bool wide = false;                 // --wide: tables show full ids beside names
};

// A server address taken apart: http or https.
using ServerAddress = HttpEndpoint;

// Parses "http[s]://host[:port][/prefix]" or "host:port". Errors (usage): invalid_server_url
// for an empty or malformed URL, a bad port, or a scheme other than http and https.
CliResult<ServerAddress> ParseServerUrl(std::string_view url);

// Where to send requests and the bearer token to send; `*_source` says where each was found
// ("--server", "QL_SERVER", "<dir>/server.json", ...), for messages. The token itself is never
// part of any message.
struct Connection {
  ServerAddress server;
  std::string server_source;
  std::string token;
  std::string token_source;
  // The project every /api/v1 request names (?project=); empty: the server's default project.
  std::string project;
  // How an https server is verified and whom ql presents itself as.
  ClientTls tls;
};

// Resolves the server and the token, each independently: the flag, else the environment
// (QL_SERVER, QL_TOKEN), else the local data directory (--data, else QL_DATA_DIR, else ./data)
// where ql-local writes server.json ({"server": URL, "pid": N}) and owner.token (one line).
// Errors (all usage, exit 2, since the fix is to pass the value another way):
// server_not_found / token_not_found naming the file looked for and how to pass the value;
// server_file_unreadable / token_unreadable when the file exists but cannot be read;
// server_file_invalid when server.json is not the expected JSON; invalid_server_url;
// insecure_http_refused for plain http to a non-loopback host without --allow-insecure-http;
// tls_flags_incomplete for only one of the client certificate and key;
// token_invalid for an empty token or one with whitespace or control bytes. The TLS files
// come from --ca-file / --client-cert / --client-key, else QL_CA_FILE / QL_CLIENT_CERT /
// QL_CLIENT_KEY.
// When no data directory is named (--data, QL_DATA_DIR), the server, CA file and token that
// `ql login` kept (CredentialsPath) come before ./data; its token is used only for its server.
// With `token_required` false a missing token is not an error (the token is then empty).
CliResult<Connection> ResolveConnection(const GlobalOptions& options, const EnvLookup& env,
                                        bool token_required = true);

// What `ql login` keeps (0600): the server, the session token, who signed in, until when, and
// the CA file the server was verified with.
struct SavedCredentials {
  std::string server;
  std::string token;
  std::string principal;
  std::string expires_at;
  std::string ca_file;
};

// $XDG_CONFIG_HOME/qinglong/credentials.json, else $HOME/.config/qinglong/credentials.json;
// "" when neither variable is set.
std::string CredentialsPath(const EnvLookup& env);
// The credentials kept at `path`, or nullopt when there are none (or they are unreadable).
std::optional<SavedCredentials> LoadCredentials(const std::string& path);

// Returns `text` percent-encoded for use as one path segment or query value (RFC 3986
// unreserved characters are kept).
std::string UrlEncode(std::string_view text);

// Returns `path` with the non-empty `params` appended as an encoded query string.
std::string WithQuery(std::string path,
                      const std::vector<std::pair<std::string, std::string>>& params);

// Returns the error a non-2xx response stands for: the server's {"code","message"} body (also
// accepted nested as {"error":{...}}) becomes reason=code, message=message, exit 1; any other
// body becomes reason "http_<status>" with the start of the body as message.
CliError ErrorFromResponse(int status, std::string_view body);

// A raw HTTP response.
struct HttpResponse {
  int status = 0;
  std::string content_type;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;

  // Returns the first value of header `name` (compared ignoring case), or "" when absent.
  std::string Header(std::string_view name) const;
};

// Calls the QingLong HTTP API with bearer authentication. Transport failures become exit-3
// errors that name the server address and where it came from; non-2xx responses become
// ErrorFromResponse errors; a 2xx body that is not JSON becomes invalid_response (exit 1).
class ApiClient {
 public:
  explicit ApiClient(Connection connection);
  ~ApiClient();
  ApiClient(const ApiClient&) = delete;
  ApiClient& operator=(const ApiClient&) = delete;

  // Sends one request and returns the response whatever its status; fails only on transport.
  // `body` is sent as application/json when `method` is POST, PUT or PATCH.
  CliResult<HttpResponse> Send(std::string_view method, const std::string& path,
                               const std::string& body = "");

  // GETs `path` and returns the JSON body of a 2xx response.
  CliResult<nlohmann::json> GetJson(const std::string& path);
  // POSTs `body` to `path` and returns the JSON body of a 2xx response (null when empty).
  CliResult<nlohmann::json> PostJson(const std::string& path, const nlohmann::json& body);
  // PUTs the already serialised JSON `body` to `path`; the JSON body of a 2xx response.
  CliResult<nlohmann::json> PutJson(const std::string& path, const std::string& body);
  // POSTs raw `bytes` (application/octet-stream); the JSON body of a 2xx response.
  CliResult<nlohmann::json> PostBytes(const std::string& path, const std::string& bytes);
  // DELETEs `path`; the JSON body of a 2xx response.
  CliResult<nlohmann::json> DeleteJson(const std::string& path);

  // GETs `path` and hands each chunk of a 2xx body to `sink` as it arrives (returning false
  // stops the transfer). `on_headers` sees the response headers first. `read_timeout_s` bounds
  // the wait for each chunk. A non-2xx status becomes ErrorFromResponse of its body.
  CliResult<int> GetStream(
      const std::string& path,
      const std::function<void(const std::vector<std::pair<std::string, std::string>>&)>&
          on_headers,
      const std::function<bool(const char* data, size_t size)>& sink, int read_timeout_s);

  const Connection& connection() const { return connection_; }

 private:
  CliError TransportError(int error) const;
  std::string FullPath(const std::string& path) const;

  Connection connection_;
  std::unique_ptr<httplib::Client> http_;
};

// Part of a keyset-paged collection, shaped like one page of the API.
struct Listing {
  nlohmann::json items = nlohmann::json::array();  // in the server's order
  // Where the listing continues (pass it back as `cursor`), or null when it has ended.
  nlohmann::json next_cursor;
  // Returns {"items": [...], "next_cursor": ...}, the API's page shape.
  nlohmann::json ToJson() const;
};

// Lists a keyset-paged collection: GETs `path` with `params` plus limit and cursor, starting at
// `cursor` ("" = the beginning) and following each page's next_cursor until `limit` items are
// collected or the listing ends. Fails with the first failing page's error, or
// invalid_response when a page has no `items` array or repeats a cursor.
CliResult<Listing> ListFrom(ApiClient& api, const std::string& path,
                            const std::vector<std::pair<std::string, std::string>>& params,
                            int64_t limit, const std::string& cursor);

// The largest page the API serves.
inline constexpr int64_t kMaxPageSize = 500;

// What one management command runs with: global options, output streams and, once asked for,
// the API client (the connection is resolved on first use, so usage errors come first).
class CommandContext {
 public:
  CommandContext(GlobalOptions options, EnvLookup env, std::ostream& out, std::ostream& err);
  ~CommandContext();

  // Returns the client, resolving the connection on the first call.
  CliResult<ApiClient*> Api();
  // Returns a client whose token may be missing (signing in), resolved on the first call.
  CliResult<ApiClient*> ApiWithoutToken();
  const EnvLookup& env() const { return env_; }

  const GlobalOptions& options() const { return options_; }
  bool json() const { return options_.json; }
  bool wide() const { return options_.wide; }
  std::ostream& out() { return out_; }
  std::ostream& err() { return err_; }

  // Prints `error` on the error stream (as ErrorLine, JSON with --json) and returns its exit
  // status.
  int Fail(const CliError& error);

 private:
  GlobalOptions options_;
  EnvLookup env_;
  std::ostream& out_;
  std::ostream& err_;
  std::unique_ptr<ApiClient> api_;
  std::unique_ptr<ApiClient> api_without_token_;
};

// Returns the line that reports a failure: "error: <reason>: <message>", or with `json` the
// one-line JSON object {"code": reason, "message": message} (invalid UTF-8 replaced).
std::string ErrorLine(const std::string& reason, const std::string& message, bool json);

// Adds --server, --token, --data and --json to `root` once (later calls do nothing). Set
// fallthrough() on subcommands so the options are also accepted after them.
void AddGlobalOptions(CLI::App& root);

// Returns the global options given on the command line of the app tree `app` belongs to.
GlobalOptions GlobalOptionsOf(const CLI::App& app);

// Runs `command` with a context over the process environment and standard streams, built from
// the global options of `app`'s tree. A non-zero exit status ends the parse with
// CLI::RuntimeError(status), which the caller of App::parse turns into the process exit status.
void RunCommand(const CLI::App& app, const std::function<int(CommandContext&)>& command);

// Returns `value` as JSON text for --json output: indented, invalid UTF-8 replaced.
// (As YAML under --output yaml: the last GlobalOptionsOf of the process decides.)
std::string JsonOutput(const nlohmann::json& value);

}  // namespace ql::cli
