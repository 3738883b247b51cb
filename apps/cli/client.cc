#include "client.h"

#include <httplib.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

#include "ql/core/http_endpoint.h"
#include "yaml_output.h"

namespace ql::cli {
namespace {

constexpr int kConnectTimeoutS = 5;
constexpr int kReadTimeoutS = 60;
constexpr size_t kMaxErrorSnippet = 200;
constexpr char kUserAgent[] = "ql/1";

std::string Lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string JoinPath(const std::string& dir, const std::string& file) {
  if (dir.empty()) return file;
  return dir.back() == '/' ? dir + file : dir + "/" + file;
}

// Returns how to pass a value that was not found, for the not-found messages.
std::string HowToPass(std::string_view what, std::string_view flag, std::string_view env,
                      const std::string& file, const std::string& data_source) {
  std::ostringstream out;
  out << "no " << what << " found: pass " << flag << ", set " << env
      << ", or point ql at the data directory of a running ql-local with --data DIR or "
         "QL_DATA_DIR (looked for "
      << file << "; data directory from " << data_source << ")";
  return out.str();
}

enum class ReadOutcome { kOk, kMissing, kUnreadable };

ReadOutcome ReadSmallFile(const std::string& path, std::string& text, std::string& why) {
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int e = errno;
    if (e == ENOENT || e == ENOTDIR || e == 0) return ReadOutcome::kMissing;
    why = std::strerror(e);
    return ReadOutcome::kUnreadable;
  }
  std::ostringstream buffer;
  buffer << in.rdbuf();
  text = buffer.str();
  return ReadOutcome::kOk;
}

// Returns a usage error when `token` cannot be sent as a bearer token. Never includes the token.
std::optional<CliError> CheckToken(const std::string& token, const std::string& source) {
  if (token.empty()) {
    return CliError::Usage("token_invalid", "the API token from " + source + " is empty");
  }
  for (unsigned char c : token) {
    if (c <= 0x20 || c == 0x7F) {
      return CliError::Usage("token_invalid", "the API token from " + source +
                                                  " contains whitespace or control characters");
    }
  }
  return std::nullopt;
}

}  // namespace

EnvLookup ProcessEnvironment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

CliResult<ServerAddress> ParseServerUrl(std::string_view url) {
  Result<HttpEndpoint> parsed = ParseHttpEndpoint(url, "--token");
  if (!parsed.ok()) {
    return CliError::Usage(
        "invalid_server_url",
        "server address '" + std::string(url) + "' is not valid: " + parsed.status().message());
  }
  return std::move(parsed).value();
}

std::string CredentialsPath(const EnvLookup& env) {
  std::optional<std::string> config = env("XDG_CONFIG_HOME");
  if (config && !config->empty()) return JoinPath(JoinPath(*config, "qinglong"), "credentials.json");
  std::optional<std::string> home = env("HOME");
  if (home && !home->empty()) {
    return JoinPath(JoinPath(JoinPath(*home, ".config"), "qinglong"), "credentials.json");
  }
  return std::string();
}

std::optional<SavedCredentials> LoadCredentials(const std::string& path) {
  if (path.empty()) return std::nullopt;
  std::string text;
  std::string why;
  if (ReadSmallFile(path, text, why) != ReadOutcome::kOk) return std::nullopt;
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("server") || !j["server"].is_string() ||
      !j.contains("token") || !j["token"].is_string()) {
    return std::nullopt;
  }
  SavedCredentials out;
  out.server = j["server"].get<std::string>();
  out.token = j["token"].get<std::string>();
  out.principal = j.value("principal", "");
  out.expires_at = j.value("expires_at", "");
  out.ca_file = j.value("ca_file", "");
  return out;
}

CliResult<Connection> ResolveConnection(const GlobalOptions& options, const EnvLookup& env,
                                        bool token_required) {
  const auto non_empty_env = [&](const std::string& name) -> std::optional<std::string> {
    std::optional<std::string> value = env(name);
    if (value && value->empty()) return std::nullopt;
    return value;
  };
  std::string data_dir = "./data";
  std::string data_source = "the default ./data";
  bool explicit_data = true;
  if (options.data_dir) {
    data_dir = *options.data_dir;
    data_source = "--data";
  } else if (std::optional<std::string> dir = non_empty_env("QL_DATA_DIR")) {
    data_dir = *dir;
    data_source = "QL_DATA_DIR";
  } else {
    explicit_data = false;
  }
  // What `ql login` kept, unless a data directory was named.
  const std::string credentials_file = CredentialsPath(env);
  const std::optional<SavedCredentials> saved =
      explicit_data ? std::nullopt : LoadCredentials(credentials_file);

  Connection connection;
  std::string server_url;
  if (options.server) {
    server_url = *options.server;
    connection.server_source = "--server";
  } else if (std::optional<std::string> url = non_empty_env("QL_SERVER")) {
    server_url = *url;
    connection.server_source = "QL_SERVER";
  } else if (saved.has_value()) {
    server_url = saved->server;
    connection.server_source = credentials_file;
  } else {
    const std::string file = JoinPath(data_dir, "server.json");
    std::string text;
    std::string why;
    switch (ReadSmallFile(file, text, why)) {
      case ReadOutcome::kMissing:
        return CliError::Usage("server_not_found", HowToPass("server address", "--server URL",
                                                             "QL_SERVER", file, data_source));
      case ReadOutcome::kUnreadable:
        return CliError::Usage("server_file_unreadable", "cannot read " + file + ": " + why +
                                                             "; pass --server URL or set "
                                                             "QL_SERVER");
      case ReadOutcome::kOk:
        break;
    }
    const nlohmann::json parsed = nlohmann::json::parse(text, nullptr, false);
    if (!parsed.is_object() || !parsed.contains("server") || !parsed["server"].is_string()) {
      return CliError::Usage("server_file_invalid",
                             file +
                                 " is not {\"server\": URL, ...}; pass --server URL or set "
                                 "QL_SERVER");
    }
    server_url = parsed["server"].get<std::string>();
    connection.server_source = file;
  }
  CliResult<ServerAddress> address = ParseServerUrl(server_url);
  if (!address.ok()) {
    return CliError::Usage(address.error().reason(),
                           address.error().message() + " (from " + connection.server_source + ")");
  }
  connection.server = std::move(address).value();
  const bool allow_insecure =
      options.allow_insecure_http || non_empty_env("QL_ALLOW_INSECURE_HTTP") == "true";
  if (Status st = CheckPlainHttpAllowed(connection.server.host, connection.server.tls,
                                        allow_insecure, "server address " + connection.server.url,
                                        "--allow-insecure-http");
      !st.ok()) {
    return CliError::Usage(st.reason(), st.message() + " (from " + connection.server_source + ")");
  }
  const auto flag_or_env = [&](const std::optional<std::string>& flag, const char* name) {
    if (flag) return *flag;
    return non_empty_env(name).value_or("");
  };
  connection.tls.ca_file = flag_or_env(options.ca_file, "QL_CA_FILE");
  if (connection.tls.ca_file.empty() && saved.has_value() && saved->server == server_url) {
    connection.tls.ca_file = saved->ca_file;
  }
  connection.tls.cert_file = flag_or_env(options.client_cert, "QL_CLIENT_CERT");
  connection.tls.key_file = flag_or_env(options.client_key, "QL_CLIENT_KEY");
  if (connection.tls.cert_file.empty() != connection.tls.key_file.empty()) {
    return CliError::Usage("tls_flags_incomplete",
                           "a client certificate needs both --client-cert and --client-key");
  }

  if (options.token) {
    connection.token = *options.token;
    connection.token_source = "--token";
  } else if (std::optional<std::string> token = non_empty_env("QL_TOKEN")) {
    connection.token = *token;
    connection.token_source = "QL_TOKEN";
  } else if (saved.has_value() && ParseServerUrl(saved->server).ok() &&
             ParseServerUrl(saved->server)->url == connection.server.url) {
    connection.token = saved->token;
    connection.token_source = credentials_file + " (ql login)";
  } else if (!token_required) {
    connection.token_source = "none";
  } else {
    const std::string file = JoinPath(data_dir, "owner.token");
    std::string text;
    std::string why;
    switch (ReadSmallFile(file, text, why)) {
      case ReadOutcome::kMissing:
        return CliError::Usage("token_not_found", HowToPass("API token", "--token TOKEN",
                                                            "QL_TOKEN", file, data_source));
      case ReadOutcome::kUnreadable:
        return CliError::Usage("token_unreadable",
                               "cannot read " + file + ": " + why +
                                   " (it is private to the user running ql-local); run ql as "
                                   "that user, or pass --token TOKEN or set QL_TOKEN");
      case ReadOutcome::kOk:
        break;
    }
    const size_t end = text.find_first_of("\r\n");
    connection.token = text.substr(0, end);
    connection.token_source = file;
  }
  if (std::optional<CliError> bad = CheckToken(connection.token, connection.token_source);
      bad && (token_required || !connection.token.empty())) {
    return *bad;
  }
  if (options.project) {
    connection.project = *options.project;
  } else if (std::optional<std::string> project = non_empty_env("QL_PROJECT")) {
    connection.project = *project;
  }
  return connection;
}

std::string UrlEncode(std::string_view text) { return PercentEncode(text); }

std::string WithQuery(std::string path,
                      const std::vector<std::pair<std::string, std::string>>& params) {
  char separator = path.find('?') == std::string::npos ? '?' : '&';
  for (const auto& [key, value] : params) {
    if (value.empty()) continue;
    path += separator;
    path += UrlEncode(key) + "=" + UrlEncode(value);
    separator = '&';
  }
  return path;
}

CliError ErrorFromResponse(int status, std::string_view body) {
  const nlohmann::json parsed = nlohmann::json::parse(body, nullptr, false);
  const nlohmann::json* error = &parsed;
  if (parsed.is_object() && parsed.contains("error") && parsed["error"].is_object()) {
    error = &parsed["error"];
  }
  if (error->is_object() && error->contains("code") && (*error)["code"].is_string()) {
    std::string message = error->value("message", "");
    if (message.empty()) message = "HTTP " + std::to_string(status);
    return CliError::Failure((*error)["code"].get<std::string>(), message);
  }
  std::string snippet(body.substr(0, kMaxErrorSnippet));
  while (!snippet.empty() && (snippet.back() == '\n' || snippet.back() == '\r')) {
    snippet.pop_back();
  }
  if (body.size() > kMaxErrorSnippet) snippet += "…";
  return CliError::Failure(
      "http_" + std::to_string(status),
      snippet.empty() ? "the server answered HTTP " + std::to_string(status)
                      : "the server answered HTTP " + std::to_string(status) + ": " + snippet);
}

std::string HttpResponse::Header(std::string_view name) const {
  const std::string wanted = Lower(name);
  for (const auto& [key, value] : headers) {
    if (Lower(key) == wanted) return value;
  }
  return "";
}

ApiClient::ApiClient(Connection connection)
    : connection_(std::move(connection)),
      http_(std::make_unique<httplib::Client>(connection_.server.SchemeHostPort(),
                                              connection_.tls.cert_file,
                                              connection_.tls.key_file)) {
#ifdef CPPHTTPLIB_OPENSSL_SUPPORT
  if (connection_.server.tls) {
    http_->enable_server_certificate_verification(true);
    if (!connection_.tls.ca_file.empty()) http_->set_ca_cert_path(connection_.tls.ca_file.c_str());
  }
#endif
  http_->set_connection_timeout(kConnectTimeoutS, 0);
  http_->set_read_timeout(kReadTimeoutS, 0);
  http_->set_write_timeout(kReadTimeoutS, 0);
  http_->set_keep_alive(true);
  if (!connection_.token.empty()) http_->set_bearer_token_auth(connection_.token);
  http_->set_default_headers({{"User-Agent", kUserAgent}, {"Accept", "application/json"}});
}

ApiClient::~ApiClient() = default;

std::string ApiClient::FullPath(const std::string& path) const {
  if (connection_.project.empty() || path.rfind("/api/v1/", 0) != 0) {
    return connection_.server.base_path + path;
  }
  const char separator = path.find('?') == std::string::npos ? '?' : '&';
  return connection_.server.base_path + path + separator + "project=" +
         UrlEncode(connection_.project);
}

CliError ApiClient::TransportError(int error) const {
  const std::string where =
      connection_.server.url + " (address from " + connection_.server_source + ")";
  const auto unreachable = [&](const std::string& why) {
    return CliError::Unreachable("server_unreachable",
                                 "cannot reach the QingLong server at " + where + ": " + why +
                                     "; is it running? pass --server URL or --data DIR to choose "
                                     "another");
  };
  switch (static_cast<httplib::Error>(error)) {
    case httplib::Error::Connection:
      return unreachable("connection refused, or the host cannot be resolved or reached");
    case httplib::Error::ConnectionTimeout:
      return unreachable("no answer to the connection within " + std::to_string(kConnectTimeoutS) +
                         " s");
    case httplib::Error::Read:
    case httplib::Error::Write:
      return CliError::Unreachable(
          "connection_lost",
          "lost the connection to the QingLong server at " + where +
              " before the response was complete (a change it asked for may or may not have "
              "taken effect; check before retrying)");
#ifdef CPPHTTPLIB_OPENSSL_SUPPORT
    case httplib::Error::SSLServerVerification: {
      const long verify = http_->get_openssl_verify_result();
      return CliError::Failure(
          "tls_verification_failed",
          "the server at " + where + " is not trusted: " +
              (verify != X509_V_OK ? X509_verify_cert_error_string(verify)
                                   : "its certificate does not name this host") +
              "; pass --ca-file with the CA that signed it");
    }
    case httplib::Error::SSLConnection:
      return CliError::Failure("tls_handshake_failed",
                               "the TLS handshake with " + where +
                                   " failed (not an https server, or it wants a client "
                                   "certificate: --client-cert/--client-key)");
    case httplib::Error::SSLLoadingCerts:
      return CliError::Usage("tls_file_unreadable",
                             "cannot load the TLS files (--ca-file, --client-cert, --client-key)");
#endif
    default:
      return unreachable(httplib::to_string(static_cast<httplib::Error>(error)));
  }
}

CliResult<HttpResponse> ApiClient::Send(std::string_view method, const std::string& path,
                                        const std::string& body) {
  const std::string full = FullPath(path);
  const auto call = [&]() -> std::optional<httplib::Result> {
    if (method == "GET") return http_->Get(full);
    if (method == "POST") return http_->Post(full, body, "application/json");
    if (method == "PUT") return http_->Put(full, body, "application/json");
    if (method == "PATCH") return http_->Patch(full, body, "application/json");
    if (method == "DELETE") return http_->Delete(full);
    return std::nullopt;
  };
  std::optional<httplib::Result> sent = call();
  if (!sent) return CliError::Failure("internal", "unsupported HTTP method " + std::string(method));
  httplib::Result& result = *sent;
  if (!result) return TransportError(static_cast<int>(result.error()));
  HttpResponse response;
  response.status = result->status;
  response.content_type = result->get_header_value("Content-Type");
  response.headers.assign(result->headers.begin(), result->headers.end());
  response.body = std::move(result->body);
  return response;
}

namespace {

CliResult<nlohmann::json> JsonBody(CliResult<HttpResponse> response, const std::string& path) {
  if (!response.ok()) return response.error();
  if (response->status < 200 || response->status > 299) {
    return ErrorFromResponse(response->status, response->body);
  }
  if (response->body.empty()) return nlohmann::json();
  nlohmann::json parsed = nlohmann::json::parse(response->body, nullptr, false);
  if (parsed.is_discarded()) {
    return CliError::Failure("invalid_response", "the server's answer to " + path + " is not JSON");
  }
  return parsed;
}

}  // namespace

CliResult<nlohmann::json> ApiClient::PostBytes(const std::string& path, const std::string& bytes) {
  const std::string full = FullPath(path);
  httplib::Result result = http_->Post(full, bytes, "application/octet-stream");
  if (!result) return TransportError(static_cast<int>(result.error()));
  HttpResponse response;
  response.status = result->status;
  response.content_type = result->get_header_value("Content-Type");
  response.body = std::move(result->body);
  return JsonBody(std::move(response), path);
}

CliResult<nlohmann::json> ApiClient::GetJson(const std::string& path) {
  return JsonBody(Send("GET", path), path);
}

CliResult<nlohmann::json> ApiClient::PostJson(const std::string& path, const nlohmann::json& body) {
  return JsonBody(Send("POST", path, body.is_null() ? "{}" : body.dump()), path);
}

CliResult<nlohmann::json> ApiClient::PutJson(const std::string& path, const std::string& body) {
  return JsonBody(Send("PUT", path, body), path);
}

CliResult<nlohmann::json> ApiClient::DeleteJson(const std::string& path) {
  return JsonBody(Send("DELETE", path), path);
}

CliResult<int> ApiClient::GetStream(
    const std::string& path,
    const std::function<void(const std::vector<std::pair<std::string, std::string>>&)>& on_headers,
    const std::function<bool(const char* data, size_t size)>& sink, int read_timeout_s) {
  int status = 0;
  std::string error_body;
  bool stopped = false;
  http_->set_read_timeout(read_timeout_s, 0);
  httplib::Result result = http_->Get(
      FullPath(path), httplib::Headers{},
      [&](const httplib::Response& response) {
        status = response.status;
        if (status >= 200 && status <= 299 && on_headers) {
          std::vector<std::pair<std::string, std::string>> headers(response.headers.begin(),
                                                                   response.headers.end());
          on_headers(headers);
        }
        return true;
      },
      [&](const char* data, size_t size) {
        if (status < 200 || status > 299) {
          if (error_body.size() < 64 * 1024) error_body.append(data, size);
          return true;
        }
        if (!sink(data, size)) {
          stopped = true;
          return false;
        }
        return true;
      });
  http_->set_read_timeout(kReadTimeoutS, 0);
  if (!result) {
    if (stopped && result.error() == httplib::Error::Canceled) return status;
    return TransportError(static_cast<int>(result.error()));
  }
  if (status < 200 || status > 299) return ErrorFromResponse(status, error_body);
  return status;
}

nlohmann::json Listing::ToJson() const {
  return nlohmann::json{{"items", items}, {"next_cursor", next_cursor}};
}

CliResult<Listing> ListFrom(ApiClient& api, const std::string& path,
                            const std::vector<std::pair<std::string, std::string>>& params,
                            int64_t limit, const std::string& cursor) {
  Listing listing;
  std::string next = cursor;
  std::vector<std::string> seen;
  while (static_cast<int64_t>(listing.items.size()) < limit) {
    std::vector<std::pair<std::string, std::string>> query = params;
    // The last page asks for exactly what is missing, so a listing that stops at `limit` stops
    // at a page boundary and the page's next_cursor is where it continues.
    const int64_t page = std::min<int64_t>(kMaxPageSize, limit - listing.items.size());
    query.emplace_back("limit", std::to_string(page));
    query.emplace_back("cursor", next);
    CliResult<nlohmann::json> body = api.GetJson(WithQuery(path, query));
    if (!body.ok()) return body.error();
    if (!body->is_object() || !(*body)["items"].is_array()) {
      return CliError::Failure("invalid_response",
                               "the server's answer to " + path + " has no items array");
    }
    if (static_cast<int64_t>((*body)["items"].size()) > page) {
      return CliError::Failure("invalid_response",
                               "the server's answer to " + path + " is longer than asked for");
    }
    for (nlohmann::json& item : (*body)["items"]) listing.items.push_back(std::move(item));
    const nlohmann::json& page_next = (*body)["next_cursor"];
    if (!page_next.is_string() || page_next.get<std::string>().empty() ||
        (*body)["items"].empty()) {
      listing.next_cursor = nullptr;
      break;
    }
    next = page_next.get<std::string>();
    listing.next_cursor = next;
    if (std::find(seen.begin(), seen.end(), next) != seen.end()) {
      return CliError::Failure("invalid_response",
                               "the server returned the same cursor twice for " + path);
    }
    seen.push_back(next);
  }
  return listing;
}

CommandContext::CommandContext(GlobalOptions options, EnvLookup env, std::ostream& out,
                               std::ostream& err)
    : options_(std::move(options)), env_(std::move(env)), out_(out), err_(err) {}

CommandContext::~CommandContext() = default;

CliResult<ApiClient*> CommandContext::Api() {
  if (!api_) {
    CliResult<Connection> connection = ResolveConnection(options_, env_);
    if (!connection.ok()) return connection.error();
    api_ = std::make_unique<ApiClient>(std::move(connection).value());
  }
  return api_.get();
}

CliResult<ApiClient*> CommandContext::ApiWithoutToken() {
  if (!api_without_token_) {
    CliResult<Connection> connection = ResolveConnection(options_, env_, false);
    if (!connection.ok()) return connection.error();
    api_without_token_ = std::make_unique<ApiClient>(std::move(connection).value());
  }
  return api_without_token_.get();
}

int CommandContext::Fail(const CliError& error) {
  err_ << ErrorLine(error.reason(), error.message(), json()) << "\n";
  err_.flush();
  return error.exit_code();
}

std::string ErrorLine(const std::string& reason, const std::string& message, bool json) {
  if (!json) return CliError(kExitFailure, reason, message).ToString();
  return nlohmann::json{{"code", reason}, {"message", message}}.dump(
      -1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void AddGlobalOptions(CLI::App& root) {
  if (root.get_option_no_throw("--server") != nullptr) return;
  root.add_option("--server",
                  "QingLong server URL, e.g. http://127.0.0.1:5700 (default: "
                  "$QL_SERVER, else server.json in the data directory)")
      ->type_name("URL");
  root.add_option("--token",
                  "API bearer token (default: $QL_TOKEN, else owner.token in the "
                  "data directory)")
      ->type_name("TOKEN");
  root.add_option("--data",
                  "ql-local data directory to find server.json and owner.token in "
                  "(default: $QL_DATA_DIR, else ./data)")
      ->type_name("DIR");
  root.add_option("--project",
                  "the project to work in, by name or id (default: $QL_PROJECT, else the "
                  "server's default project)")
      ->type_name("NAME");
  root.add_option("--ca-file",
                  "PEM CAs to verify an https server with (default: $QL_CA_FILE, else the "
                  "system store)")
      ->type_name("FILE");
  root.add_option("--client-cert", "PEM client certificate to present over https")
      ->type_name("FILE");
  root.add_option("--client-key", "PEM private key of --client-cert")->type_name("FILE");
  root.add_flag("--allow-insecure-http")
      ->description("Allow plain http to a non-loopback server (tokens in clear text)");
  root.add_flag("--json")->description("Print JSON for scripts instead of tables");
  root.add_option("--output", "table (default), json (as --json) or yaml (the same data as YAML)")
      ->type_name("FORMAT")
      ->check(CLI::IsMember({"table", "json", "yaml"}));
  root.add_flag("--wide")->description("Tables show full ids beside names");
}

namespace {
// Whether JsonOutput writes YAML (--output yaml); one command per process.
bool yaml_output = false;
}  // namespace

GlobalOptions GlobalOptionsOf(const CLI::App& app) {
  const CLI::App* root = &app;
  while (root->get_parent() != nullptr) root = root->get_parent();
  GlobalOptions options;
  const auto string_option = [&](const char* name) -> std::optional<std::string> {
    const CLI::Option* option = root->get_option_no_throw(name);
    if (option == nullptr || option->count() == 0) return std::nullopt;
    return option->as<std::string>();
  };
  options.server = string_option("--server");
  options.token = string_option("--token");
  options.data_dir = string_option("--data");
  options.project = string_option("--project");
  options.ca_file = string_option("--ca-file");
  options.client_cert = string_option("--client-cert");
  options.client_key = string_option("--client-key");
  const auto flag = [&](const char* name) {
    const CLI::Option* option = root->get_option_no_throw(name);
    return option != nullptr && option->count() > 0;
  };
  options.allow_insecure_http = flag("--allow-insecure-http");
  const std::optional<std::string> output = string_option("--output");
  options.yaml = output == "yaml";
  options.json = flag("--json") || output == "json" || options.yaml;
  yaml_output = options.yaml;
  options.wide = flag("--wide");
  return options;
}

void RunCommand(const CLI::App& app, const std::function<int(CommandContext&)>& command) {
  CommandContext context(GlobalOptionsOf(app), ProcessEnvironment(), std::cout, std::cerr);
  int status = kExitOk;
  try {
    status = command(context);
  } catch (const nlohmann::json::exception& e) {
    // A server answer of an unexpected shape; commands read documented fields only.
    status = context.Fail(CliError::Failure("invalid_response",
                                            std::string("unexpected server answer: ") + e.what()));
  }
  std::cout.flush();
  if (status != kExitOk) throw CLI::RuntimeError(status);
}

std::string JsonOutput(const nlohmann::json& value) {
  if (yaml_output) return YamlOutput(value);
  return value.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace ql::cli
