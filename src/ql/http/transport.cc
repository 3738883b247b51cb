#include "ql/http/transport.h"

#include <absl/strings/match.h>
#include <sys/socket.h>

#include <charconv>
#include <fstream>
#include <string>
#include <utility>

#include "ql/core/canonical_json.h"
#include "ql/http/api_json.h"

// Defined only by executables that load the TLS library when a TLS listener is configured
// rather than at start (ql-local, apps/local/tls_library.cc): returns whether it could be
// loaded, else writes why into `error`. Null elsewhere: the library is linked as usual.
extern "C" __attribute__((weak)) int ql_load_tls_library(char* error, size_t size);

namespace ql::transport {
namespace {

using HandlerResponse = httplib::Server::HandlerResponse;

void CloseAfterAnswer(httplib::Response& res) {
  if (!res.has_header("Connection")) res.set_header("Connection", "close");
}

}  // namespace

ConnectionPool::ConnectionPool(size_t threads, int max_connections, std::atomic<int>& connections)
    : pool_(threads), max_connections_(max_connections), connections_(connections) {}

bool ConnectionPool::enqueue(std::function<void()> fn) {
  // Only the listener thread enqueues, so the check and the increment cannot interleave with
  // another admission; workers only decrement.
  if (connections_.load() >= max_connections_) return false;
  connections_.fetch_add(1);
  pool_.enqueue([this, fn = std::move(fn)]() {
    fn();
    connections_.fetch_sub(1);
  });
  return true;
}

void ConnectionPool::shutdown() { pool_.shutdown(); }

bool DeclaresBody(const httplib::Request& req) {
  return req.has_header("Content-Length") ? req.get_header_value("Content-Length") != "0"
                                          : req.has_header("Transfer-Encoding");
}

void SendError(httplib::Response& res, int status, std::string_view code,
               std::string_view message) {
  res.status = status;
  res.set_content(
      api::ErrorJson(code, message).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
      "application/json");
}

void Configure(httplib::Server& server, const Limits& limits, std::atomic<int>& connections,
               Gate gate) {
  server.new_task_queue = [threads = limits.threads, max = limits.max_connections,
                           &connections]() -> httplib::TaskQueue* {
    return new ConnectionPool(static_cast<size_t>(threads), max, connections);
  };
  server.set_read_timeout(limits.read_timeout_ms / 1000, (limits.read_timeout_ms % 1000) * 1000);
  server.set_write_timeout(limits.write_timeout_ms / 1000, (limits.write_timeout_ms % 1000) * 1000);
  server.set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  // httplib calls this for "Expect: 100-continue" after the headers and before routing; any
  // status but 100 (and 417, which httplib would send as a bare line and then read on) is
  // written as the final answer without reading the body. The gate never answers 417 here: it
  // only refuses expectations other than 100-continue, which do not reach this handler.
  server.set_expect_100_continue_handler([gate, max_body = limits.max_body_bytes](
                                             const httplib::Request& req, httplib::Response& res) {
    if (gate(req, res) == HandlerResponse::Handled) {
      CloseAfterAnswer(res);
      return res.status;
    }
    const std::string length = req.get_header_value("Content-Length");
    uint64_t declared = 0;
    const auto [ptr, ec] = std::from_chars(length.data(), length.data() + length.size(), declared);
    if (length.empty()) return 100;
    if (ec != std::errc() || ptr != length.data() + length.size()) {
      SendError(res, 400, "bad_request", "Content-Length " + length + " is not a number");
    } else if (declared > max_body) {
      SendError(res, 413, "body_too_large",
                "request body of " + length + " bytes exceeds the limit of " +
                    std::to_string(max_body) + " bytes");
    } else {
      return 100;
    }
    CloseAfterAnswer(res);
    return res.status;
  });
  server.set_pre_routing_handler(
      [gate = std::move(gate)](const httplib::Request& req, httplib::Response& res) {
        // RFC 9110 §10.1.1: an expectation the server cannot meet is answered 417.
        const std::string expect = req.get_header_value("Expect");
        if (!expect.empty() && !absl::EqualsIgnoreCase(expect, "100-continue")) {
          SendError(res, 417, "expectation_failed",
                    "only Expect: 100-continue is supported, got " + QuoteForMessage(expect));
          CloseAfterAnswer(res);
          return HandlerResponse::Handled;
        }
        const HandlerResponse handled = gate(req, res);
        if (handled == HandlerResponse::Handled && DeclaresBody(req)) CloseAfterAnswer(res);
        return handled;
      });
}

namespace {

Status RequireReadable(const std::string& file, std::string_view flag) {
  std::ifstream in(file);
  if (file.empty() || !in.good()) {
    return InvalidArgument("tls_file_unreadable",
                           std::string(flag) + " file '" + file + "' cannot be read");
  }
  return Status();
}

}  // namespace

Result<std::unique_ptr<httplib::Server>> NewServer(const std::optional<ListenerTls>& tls) {
  if (!tls.has_value()) return std::make_unique<httplib::Server>();
#if QL_TLS
  if (ql_load_tls_library != nullptr) {
    char error[512] = {};
    if (ql_load_tls_library(error, sizeof error) == 0) {
      return Unavailable("tls_library_unavailable",
                         std::string("the TLS library cannot be loaded: ") + error);
    }
  }
  QL_RETURN_IF_ERROR(RequireReadable(tls->cert_file, "--tls-cert"));
  QL_RETURN_IF_ERROR(RequireReadable(tls->key_file, "--tls-key"));
  if (!tls->client_ca_file.empty()) {
    QL_RETURN_IF_ERROR(RequireReadable(tls->client_ca_file, "--tls-client-ca"));
  }
  auto server = std::make_unique<httplib::SSLServer>(
      tls->cert_file.c_str(), tls->key_file.c_str(),
      tls->client_ca_file.empty() ? nullptr : tls->client_ca_file.c_str());
  if (!server->is_valid()) {
    return InvalidArgument(
        "tls_invalid", "the TLS certificate '" + tls->cert_file + "' and key '" + tls->key_file +
                           "' cannot be used: not PEM, or the key does not match the "
                           "certificate" +
                           (tls->client_ca_file.empty()
                                ? std::string()
                                : ", or the client CA '" + tls->client_ca_file + "' is not PEM"));
  }
  return std::unique_ptr<httplib::Server>(std::move(server));
#else
  return InvalidArgument("tls_unsupported",
                         "this build has no TLS (built with -DQL_TLS=OFF); rebuild with TLS or "
                         "listen on loopback without --tls-cert");
#endif
}

}  // namespace ql::transport
