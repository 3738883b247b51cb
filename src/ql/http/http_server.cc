#include "ql/http/http_server.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/stream_traits.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/chunk_encode.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <chrono>
#include <fstream>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>

#if QL_TLS
#include <openssl/ssl.h>

#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#endif

#include "ql/http/api_json.h"
#include "ql/http/http_parse.h"

// Defined only by executables that load the TLS library when a TLS listener is configured
// rather than at start (ql-local, apps/local/tls_library.cc): returns whether it could be
// loaded, else writes why into `error`. Null elsewhere: the library is linked as usual.
extern "C" __attribute__((weak)) int ql_load_tls_library(char* error, size_t size);

namespace ql::http {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

// A connection that is closed after its answer reads and drops what its client still sends for
// at most this long and this many bytes, so the client reads the answer instead of a reset.
constexpr auto kLingerTime = std::chrono::seconds(2);
constexpr size_t kLingerBytes = size_t{4} << 20;

void FillError(Response& res, int status, std::string_view code, std::string_view message) {
  res.status = status;
  res.SetContent(
      api::ErrorJson(code, message).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
      "application/json");
}

}  // namespace

struct HttpServer::Impl {
  ServerLimits limits;
  ServerHandlers handlers;
  std::unique_ptr<net::io_context> ioc = std::make_unique<net::io_context>(1);
  std::unique_ptr<net::thread_pool> workers;
  std::unique_ptr<tcp::acceptor> acceptor;
#if QL_TLS
  std::unique_ptr<net::ssl::context> tls;
#endif
  std::thread io_thread;
  int port = 0;
  bool started = false;
  bool stopped = false;
  std::atomic<int> connections{0};
  std::atomic<int> requests{0};
  std::mutex addresses_mu;
  std::unordered_map<std::string, int> per_address;  // guarded by addresses_mu
  // Where lingering connections drop what they read (only the I/O thread reads into it).
  std::array<char, 16 * 1024> discard{};

  void Accept();
  void OnAccept(const boost::system::error_code& ec, tcp::socket socket);
  void Release(const std::string& address) {
    connections.fetch_sub(1);
    std::lock_guard<std::mutex> lock(addresses_mu);
    auto it = per_address.find(address);
    if (it != per_address.end() && --it->second <= 0) per_address.erase(it);
  }
};

namespace {

template <class Stream>
class Session : public std::enable_shared_from_this<Session<Stream>> {
 public:
  template <class... Args>
  Session(HttpServer::Impl& server, std::string address, Args&&... args)
      : s_(server), stream_(std::forward<Args>(args)...), address_(std::move(address)) {
    head_deadline_ = Clock::now() + std::chrono::milliseconds(s_.limits.head_timeout_ms);
  }

  ~Session() {
    EndStream();
    s_.Release(address_);
  }

  void Start() {
#if QL_TLS
    if constexpr (!std::is_same_v<Stream, beast::tcp_stream>) {
      Lowest().expires_at(head_deadline_);
      stream_.async_handshake(net::ssl::stream_base::server,
                              [self = this->shared_from_this()](beast::error_code ec) {
                                if (ec) return self->Close();
                                self->ReadHead();
                              });
      return;
    }
#endif
    ReadHead();
  }

 private:
  beast::tcp_stream& Lowest() { return beast::get_lowest_layer(stream_); }

  // Waits for the first byte of the next request on a keep-alive connection, then reads it.
  void AwaitRequest() {
    if (buffer_.size() > 0) {
      head_deadline_ = Clock::now() + std::chrono::milliseconds(s_.limits.head_timeout_ms);
      return ReadHead();
    }
    buffer_.shrink_to_fit();  // an idle connection keeps no buffer
    Lowest().expires_after(std::chrono::milliseconds(s_.limits.idle_timeout_ms));
    stream_.async_read_some(buffer_.prepare(512), [self = this->shared_from_this()](
                                                      beast::error_code ec, size_t n) {
      if (ec) return self->Close();
      self->buffer_.commit(n);
      self->head_deadline_ =
          Clock::now() + std::chrono::milliseconds(self->s_.limits.head_timeout_ms);
      self->ReadHead();
    });
  }

  void ReadHead() {
    parser_.emplace();
    PrepareParser(*parser_, s_.limits);
    Lowest().expires_at(head_deadline_);
    bhttp::async_read_header(
        stream_, buffer_, *parser_,
        [self = this->shared_from_this()](beast::error_code ec, size_t) { self->OnHead(ec); });
  }

  void OnHead(beast::error_code ec) {
    // A refusal answers this request (a HEAD's without a body), never the previous one of the
    // connection.
    req_ = Request{};
    req_.remote_address = address_;
    if (ec) {
      if (std::optional<Refusal> refusal = RefusalForHeadError(ec, s_.limits)) {
        return Refuse(*refusal);
      }
      return Close();  // the client went away, timed out or sent nothing
    }
    if (std::optional<Refusal> refusal = RequestFromHead(*parser_, s_.limits, &req_)) {
      return Refuse(*refusal);
    }
    expect_continue_ = ExpectsContinue(req_);
    s_.requests.fetch_add(1);
    counted_ = true;
    res_ = Response{};
    if (s_.handlers.immediate && s_.handlers.immediate(req_, res_)) {
      if (req_.DeclaresBody()) res_.close = true;
      return Answer();
    }
    // A request without a body is decided and served in one turn on a worker: no second hop.
    const bool bodyless = parser_->is_done() && !req_.DeclaresBody();
    net::post(*s_.workers, [self = this->shared_from_this(), bodyless] {
      const bool admitted = self->s_.handlers.admit(self->req_, self->res_);
      if (admitted && bodyless) {
        self->s_.handlers.handle(self->req_, self->res_);
        net::post(self->stream_.get_executor(), [self] { self->Answer(); });
        return;
      }
      net::post(self->stream_.get_executor(), [self, admitted] { self->OnAdmitted(admitted); });
    });
  }

  void OnAdmitted(bool admitted) {
    if (!admitted) {
      if (req_.DeclaresBody()) res_.close = true;  // its bytes must not be read as a request
      return Answer();
    }
    if (std::optional<Refusal> refusal = StartBody(*parser_, s_.limits)) return Refuse(*refusal);
    body_start_ = Clock::now();
    if (expect_continue_ && !parser_->is_done()) {
      auto interim = std::make_shared<bhttp::response<bhttp::empty_body>>(bhttp::status::continue_,
                                                                         11);
      Lowest().expires_after(std::chrono::milliseconds(s_.limits.write_timeout_ms));
      bhttp::async_write(stream_, *interim,
                         [self = this->shared_from_this(), interim](beast::error_code ec, size_t) {
                           if (ec) return self->Close();
                           self->body_start_ = Clock::now();
                           self->ReadBody();
                         });
      return;
    }
    ReadBody();
  }

  void ReadBody() {
    if (parser_->is_done()) return Handle();
    // The body's deadline grows with what has arrived: a client must keep up the minimum rate.
    const size_t received = parser_->get().body().size();
    const auto allowed =
        std::chrono::milliseconds(s_.limits.body_grace_ms) +
        std::chrono::milliseconds(received * 1000 /
                                  std::max<size_t>(1, s_.limits.min_body_bytes_per_second));
    Lowest().expires_at(body_start_ + allowed);
    bhttp::async_read_some(stream_, buffer_, *parser_,
                           [self = this->shared_from_this()](beast::error_code ec, size_t) {
                             if (ec) {
                               std::optional<Refusal> refusal =
                                   RefusalForBodyError(ec, self->s_.limits);
                               if (refusal.has_value()) return self->Refuse(*refusal);
                               return self->Close();
                             }
                             self->ReadBody();
                           });
  }

  void Handle() {
    req_.body = std::move(parser_->get().body());
    net::post(*s_.workers, [self = this->shared_from_this()] {
      self->s_.handlers.handle(self->req_, self->res_);
      net::post(self->stream_.get_executor(), [self] { self->Answer(); });
    });
  }

  // Answers a request the server refuses by itself, then closes.
  void Refuse(const Refusal& refusal) {
    res_ = Response{};
    FillError(res_, refusal.status, refusal.code, refusal.message);
    res_.close = true;
    Answer();
  }

  void ApplyDefaults(Response& res) const {
    for (const auto& [name, value] : s_.limits.default_headers) {
      if (!res.HasHeader(name)) res.headers.emplace_back(name, value);
    }
  }

  void Answer() {
    ApplyDefaults(res_);
    keep_alive_ = !res_.close && parser_.has_value() && parser_->is_header_done() &&
                  parser_->get().keep_alive() && !EqualsIgnoreCase(res_.Header("Connection"), "close");
    if (res_.stream) return StreamHead();
    const bool head_only = req_.method == "HEAD";
    auto message = std::make_shared<bhttp::response<bhttp::string_body>>();
    message->version(11);
    message->result(static_cast<unsigned>(res_.status));
    message->reason(StatusReason(res_.status));
    for (const auto& [name, value] : res_.headers) {
      if (EqualsIgnoreCase(name, "Connection") || EqualsIgnoreCase(name, "Content-Length")) {
        continue;
      }
      message->insert(name, value);
    }
    message->keep_alive(keep_alive_);
    message->content_length(res_.body.size());
    if (!head_only) message->body() = std::move(res_.body);
    Lowest().expires_after(std::chrono::milliseconds(s_.limits.write_timeout_ms));
    bhttp::async_write(stream_, *message,
                       [self = this->shared_from_this(), message](beast::error_code ec, size_t) {
                         self->Finish(ec);
                       });
  }

  void Finish(beast::error_code ec) {
    if (counted_) {
      counted_ = false;
      s_.requests.fetch_sub(1);
      if (s_.handlers.answered) s_.handlers.answered(req_, res_);
    }
    if (ec) return Close();
    if (!keep_alive_) return Linger();
    AwaitRequest();
  }

  // A streamed answer: the head with chunked encoding, then each piece as the stream gives it.
  void StreamHead() {
    keep_alive_ = false;  // a stream ends its connection
    stream_head_ = std::make_shared<bhttp::response<bhttp::empty_body>>();
    stream_head_->version(11);
    stream_head_->result(static_cast<unsigned>(res_.status));
    stream_head_->reason(StatusReason(res_.status));
    for (const auto& [name, value] : res_.headers) {
      if (EqualsIgnoreCase(name, "Connection") || EqualsIgnoreCase(name, "Content-Length")) {
        continue;
      }
      stream_head_->insert(name, value);
    }
    stream_head_->keep_alive(false);
    stream_head_->chunked(true);
    serializer_ = std::make_shared<bhttp::response_serializer<bhttp::empty_body>>(*stream_head_);
    streaming_ = true;
    Lowest().expires_after(std::chrono::milliseconds(s_.limits.write_timeout_ms));
    bhttp::async_write_header(stream_, *serializer_,
                              [self = this->shared_from_this()](beast::error_code ec, size_t) {
                                if (ec) return self->Finish(ec);
                                self->Lowest().expires_never();
                                self->WatchForClose();
                                self->StreamNext();
                              });
  }

  // Marks the client gone as soon as its side becomes readable (closed, or sending what it has
  // no reason to send while a stream is open).
  void WatchForClose() {
    Lowest().socket().async_wait(tcp::socket::wait_read,
                                 [gone = gone_](beast::error_code) { gone->store(true); });
  }

  void StreamNext() {
    if (head_only_stream()) return EndChunks();
    net::post(*s_.workers, [self = this->shared_from_this()] {
      auto step = std::make_shared<StreamStep>(self->res_.stream(*self->gone_));
      net::post(self->stream_.get_executor(), [self, step] { self->OnStreamStep(step); });
    });
  }

  bool head_only_stream() const { return req_.method == "HEAD"; }

  void OnStreamStep(const std::shared_ptr<StreamStep>& step) {
    if (gone_->load()) return Finish(beast::error_code(net::error::connection_reset));
    if (step->data.empty()) {
      if (step->more) return StreamNext();
      return EndChunks();
    }
    Lowest().expires_after(std::chrono::milliseconds(s_.limits.write_timeout_ms));
    net::async_write(stream_, bhttp::make_chunk(net::buffer(step->data)),
                     [self = this->shared_from_this(), step](beast::error_code ec, size_t) {
                       if (ec) return self->Finish(ec);
                       self->Lowest().expires_never();
                       if (step->more) return self->StreamNext();
                       self->EndChunks();
                     });
  }

  void EndChunks() {
    Lowest().expires_after(std::chrono::milliseconds(s_.limits.write_timeout_ms));
    net::async_write(stream_, bhttp::make_chunk_last(),
                     [self = this->shared_from_this()](beast::error_code ec, size_t) {
                       self->EndStream();
                       self->Finish(ec);
                     });
  }

  void EndStream() {
    if (!streaming_) return;
    streaming_ = false;
    if (res_.on_stream_end) res_.on_stream_end();
  }

  // Ends a connection whose answer said `Connection: close`: stop sending, then read and drop
  // what the client may still be sending for a short while, so it reads the answer rather than
  // a reset.
  void Linger() {
#if QL_TLS
    if constexpr (!std::is_same_v<Stream, beast::tcp_stream>) {
      Lowest().expires_after(kLingerTime);
      stream_.async_shutdown([self = this->shared_from_this()](beast::error_code) {
        self->Close();
      });
      return;
    }
#endif
    beast::error_code ignored;
    Lowest().socket().shutdown(tcp::socket::shutdown_send, ignored);
    Lowest().expires_after(kLingerTime);
    Drain();
  }

  void Drain() {
    Lowest().async_read_some(net::buffer(s_.discard),
                             [self = this->shared_from_this()](beast::error_code ec, size_t n) {
                               self->lingered_ += n;
                               if (ec || self->lingered_ > kLingerBytes) return self->Close();
                               self->Drain();
                             });
  }

  void Close() {
    if (counted_) {
      counted_ = false;
      s_.requests.fetch_sub(1);
      if (s_.handlers.answered) s_.handlers.answered(req_, res_);
    }
    EndStream();
    beast::error_code ignored;
    Lowest().socket().shutdown(tcp::socket::shutdown_both, ignored);
    Lowest().close();
  }

  HttpServer::Impl& s_;
  Stream stream_;
  const std::string address_;
  beast::flat_buffer buffer_{kReadBufferBytes};
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  Request req_;
  Response res_;
  Clock::time_point head_deadline_;
  Clock::time_point body_start_;
  bool expect_continue_ = false;
  bool keep_alive_ = false;
  bool counted_ = false;
  bool streaming_ = false;
  size_t lingered_ = 0;
  std::shared_ptr<bhttp::response<bhttp::empty_body>> stream_head_;
  std::shared_ptr<bhttp::response_serializer<bhttp::empty_body>> serializer_;
  std::shared_ptr<std::atomic<bool>> gone_ = std::make_shared<std::atomic<bool>>(false);
};

}  // namespace

void HttpServer::Impl::Accept() {
  acceptor->async_accept(net::make_strand(*ioc),
                         [this](const boost::system::error_code& ec, tcp::socket socket) {
                           OnAccept(ec, std::move(socket));
                         });
}

void HttpServer::Impl::OnAccept(const boost::system::error_code& ec, tcp::socket socket) {
  if (ec == net::error::operation_aborted || !acceptor->is_open()) return;
  if (!ec) {
    boost::system::error_code addr_ec;
    const tcp::endpoint peer = socket.remote_endpoint(addr_ec);
    std::string address = addr_ec ? std::string() : peer.address().to_string();
    bool admit = connections.load() < limits.max_connections;
    if (admit) {
      std::lock_guard<std::mutex> lock(addresses_mu);
      int& count = per_address[address];
      admit = count < limits.max_connections_per_address;
      if (admit) {
        ++count;
      } else if (count == 0) {
        per_address.erase(address);
      }
    }
    if (!admit) {
      socket.close(addr_ec);  // refused before anything is read
    } else {
      connections.fetch_add(1);
      socket.set_option(tcp::no_delay(true), addr_ec);
#if QL_TLS
      if (tls != nullptr) {
        std::make_shared<Session<beast::ssl_stream<beast::tcp_stream>>>(
            *this, std::move(address), std::move(socket), *tls)
            ->Start();
      } else
#endif
      {
        std::make_shared<Session<beast::tcp_stream>>(*this, std::move(address), std::move(socket))
            ->Start();
      }
    }
  }
  Accept();
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() { Stop(); }

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

Result<std::unique_ptr<HttpServer>> HttpServer::Create(const std::optional<ListenerTls>& tls,
                                                       ServerLimits limits,
                                                       ServerHandlers handlers) {
  auto impl = std::make_unique<Impl>();
  impl->limits = std::move(limits);
  impl->handlers = std::move(handlers);
  if (tls.has_value()) {
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
    try {
      auto context = std::make_unique<net::ssl::context>(net::ssl::context::tls_server);
      context->set_options(net::ssl::context::default_workarounds | net::ssl::context::no_sslv2 |
                           net::ssl::context::no_sslv3 | net::ssl::context::no_tlsv1 |
                           net::ssl::context::no_tlsv1_1 | net::ssl::context::no_compression);
      SSL_CTX_set_min_proto_version(context->native_handle(), TLS1_2_VERSION);
      context->use_certificate_chain_file(tls->cert_file);
      context->use_private_key_file(tls->key_file, net::ssl::context::pem);
      if (!tls->client_ca_file.empty()) {
        context->load_verify_file(tls->client_ca_file);
        context->set_verify_mode(net::ssl::verify_peer | net::ssl::verify_fail_if_no_peer_cert);
      }
      impl->tls = std::move(context);
    } catch (const boost::system::system_error&) {
      return InvalidArgument(
          "tls_invalid",
          "the TLS certificate '" + tls->cert_file + "' and key '" + tls->key_file +
              "' cannot be used: not PEM, or the key does not match the certificate" +
              (tls->client_ca_file.empty()
                   ? std::string()
                   : ", or the client CA '" + tls->client_ca_file + "' is not PEM"));
    }
#else
    return InvalidArgument("tls_unsupported",
                           "this build has no TLS (built with -DQL_TLS=OFF); rebuild with TLS or "
                           "listen on loopback without --tls-cert");
#endif
  }
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

Status HttpServer::Start(const std::string& host, int port) {
  Impl& s = *impl_;
  if (s.started) return Conflict("already_started", "the server was started");
  auto failed = [&] {
    s.acceptor.reset();
    return Unavailable("listen_failed", "cannot listen on " + host + ":" +
                                            (port == 0 ? std::string("(any port)")
                                                       : std::to_string(port)));
  };
  boost::system::error_code ec;
  const net::ip::address address = net::ip::make_address(host == "localhost" ? "127.0.0.1" : host,
                                                         ec);
  if (ec) return failed();
  const tcp::endpoint endpoint(address, static_cast<unsigned short>(port));
  s.acceptor = std::make_unique<tcp::acceptor>(*s.ioc);
  s.acceptor->open(endpoint.protocol(), ec);
  if (ec) return failed();
  s.acceptor->set_option(net::socket_base::reuse_address(true), ec);
  s.acceptor->bind(endpoint, ec);
  if (ec) return failed();
  s.acceptor->listen(net::socket_base::max_listen_connections, ec);
  if (ec) return failed();
  s.port = s.acceptor->local_endpoint(ec).port();
  // Every connection is a descriptor: raise the soft limit toward what the cap needs (plus room
  // for the store, logs and commands) when the hard limit allows.
  if (rlimit files{}; ::getrlimit(RLIMIT_NOFILE, &files) == 0) {
    const rlim_t wanted = static_cast<rlim_t>(s.limits.max_connections) + 1024;
    if (files.rlim_cur != RLIM_INFINITY && files.rlim_cur < wanted) {
      files.rlim_cur = files.rlim_max == RLIM_INFINITY ? wanted : std::min(wanted, files.rlim_max);
      (void)::setrlimit(RLIMIT_NOFILE, &files);
    }
  }
  s.started = true;
  s.workers = std::make_unique<net::thread_pool>(static_cast<size_t>(s.limits.workers));
  s.Accept();
  s.io_thread = std::thread([&s] { s.ioc->run(); });
  return Status::Ok();
}

int HttpServer::port() const { return impl_->port; }
int HttpServer::connections() const { return impl_->connections.load(); }
int HttpServer::requests() const { return impl_->requests.load(); }

void HttpServer::Stop() {
  Impl& s = *impl_;
  if (!s.started || s.stopped) return;
  s.stopped = true;
  net::post(*s.ioc, [&s] {
    boost::system::error_code ignored;
    s.acceptor->close(ignored);
  });
  // Calls already on a worker finish (their answers are then dropped); nothing new starts.
  s.workers->stop();
  s.workers->join();
  s.ioc->stop();
  if (s.io_thread.joinable()) s.io_thread.join();
  // Destroying the context destroys every connection still waiting on it, closing its socket.
  s.acceptor.reset();
  s.ioc.reset();
}

}  // namespace ql::http
