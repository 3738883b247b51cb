#include "ql/notify/curl_sender.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <sodium.h>
#include <sys/socket.h>

#include <array>
#include <chrono>
#include <cstring>
#include <ctime>
#include <mutex>
#include <string_view>

namespace ql::notify {
namespace {

constexpr size_t kMaxReplyBytes = 4096;

// Whether `addr` is loopback or link-local (IPv4 and IPv6, IPv4-mapped included).
bool IsLocalAddress(const sockaddr* addr) {
  if (addr->sa_family == AF_INET) {
    const uint32_t ip = ntohl(reinterpret_cast<const sockaddr_in*>(addr)->sin_addr.s_addr);
    return (ip >> 24) == 127 || (ip >> 16) == 0xA9FE || ip == 0;
  }
  if (addr->sa_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&a) || IN6_IS_ADDR_LINKLOCAL(&a) || IN6_IS_ADDR_UNSPECIFIED(&a)) {
      return true;
    }
    if (IN6_IS_ADDR_V4MAPPED(&a)) {
      const uint8_t* b = a.s6_addr;
      return b[12] == 127 || (b[12] == 169 && b[13] == 254) ||
             (b[12] == 0 && b[13] == 0 && b[14] == 0 && b[15] == 0);
    }
    return false;
  }
  return true;  // no other families
}

struct Transfer {
  bool allow_loopback = false;
  bool refused_local = false;
  std::string reply;
  std::string upload;
  size_t uploaded = 0;
};

curl_socket_t OpenSocket(void* clientp, curlsocktype, curl_sockaddr* address) {
  auto* t = static_cast<Transfer*>(clientp);
  if (!t->allow_loopback && IsLocalAddress(&address->addr)) {
    t->refused_local = true;
    return CURL_SOCKET_BAD;
  }
  return ::socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
}

size_t Collect(char* data, size_t size, size_t n, void* userp) {
  auto* t = static_cast<Transfer*>(userp);
  const size_t bytes = size * n;
  if (t->reply.size() < kMaxReplyBytes) {
    t->reply.append(data, std::min(bytes, kMaxReplyBytes - t->reply.size()));
  }
  return bytes;
}

size_t Supply(char* buffer, size_t size, size_t n, void* userp) {
  auto* t = static_cast<Transfer*>(userp);
  const size_t room = size * n;
  const size_t left = t->upload.size() - t->uploaded;
  const size_t bytes = std::min(room, left);
  std::memcpy(buffer, t->upload.data() + t->uploaded, bytes);
  t->uploaded += bytes;
  return bytes;
}

std::string Base64(std::string_view in) {
  std::string out(sodium_base64_encoded_len(in.size(), sodium_base64_VARIANT_ORIGINAL), '\0');
  sodium_bin2base64(out.data(), out.size(), reinterpret_cast<const unsigned char*>(in.data()),
                    in.size(), sodium_base64_VARIANT_ORIGINAL);
  out.resize(std::strlen(out.c_str()));
  return out;
}

// A header value in RFC 2047 form when it is not plain ASCII.
std::string HeaderWord(const std::string& text) {
  for (char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80 || c == '\r' || c == '\n') {
      return "=?UTF-8?B?" + Base64(text) + "?=";
    }
  }
  return text;
}

std::string RfcDate() {
  char buf[64];
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  std::strftime(buf, sizeof buf, "%a, %d %b %Y %H:%M:%S +0000", &tm);
  return buf;
}

// The body in base64 lines of 76 characters.
std::string WrappedBase64(std::string_view text) {
  const std::string b = Base64(text);
  std::string out;
  for (size_t i = 0; i < b.size(); i += 76) out += b.substr(i, 76) + "\r\n";
  return out;
}

int64_t MsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               start)
      .count();
}

struct Easy {
  CURL* h = curl_easy_init();
  curl_slist* list = nullptr;
  ~Easy() {
    curl_slist_free_all(list);
    if (h != nullptr) curl_easy_cleanup(h);
  }
};

// Sets what every transfer shares: timeouts, no signals, no redirects, the socket guard.
void Common(Easy& e, Transfer& t, int64_t timeout_ms, const std::string& ca_file) {
  curl_easy_setopt(e.h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e.h, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout_ms));
  curl_easy_setopt(e.h, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(std::min<int64_t>(timeout_ms, 5000)));
  curl_easy_setopt(e.h, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(e.h, CURLOPT_OPENSOCKETFUNCTION, OpenSocket);
  curl_easy_setopt(e.h, CURLOPT_OPENSOCKETDATA, &t);
  curl_easy_setopt(e.h, CURLOPT_WRITEFUNCTION, Collect);
  curl_easy_setopt(e.h, CURLOPT_WRITEDATA, &t);
  if (!ca_file.empty()) curl_easy_setopt(e.h, CURLOPT_CAINFO, ca_file.c_str());
}

SendReply Finish(Easy& e, Transfer& t, CURLcode code, std::chrono::steady_clock::time_point start) {
  SendReply reply;
  reply.latency_ms = MsSince(start);
  long status = 0;
  curl_easy_getinfo(e.h, CURLINFO_RESPONSE_CODE, &status);
  reply.status_code = static_cast<int>(status);
  reply.body = std::move(t.reply);
  if (code == CURLE_OK) {
    reply.transport_ok = true;
  } else if (t.refused_local) {
    reply.error = "refused: the destination is a loopback or link-local address";
  } else {
    reply.error = curl_easy_strerror(code);
  }
  return reply;
}

}  // namespace

namespace {

using Mac = std::array<unsigned char, crypto_auth_hmacsha256_BYTES>;

Mac HmacSha256(std::string_view key, std::string_view text) {
  Mac mac{};
  crypto_auth_hmacsha256_state state;
  crypto_auth_hmacsha256_init(&state, reinterpret_cast<const unsigned char*>(key.data()),
                              key.size());
  crypto_auth_hmacsha256_update(&state, reinterpret_cast<const unsigned char*>(text.data()),
                                text.size());
  crypto_auth_hmacsha256_final(&state, mac.data());
  return mac;
}

std::string HmacSha256Base64(std::string_view key, std::string_view text) {
  const Mac mac = HmacSha256(key, text);
  char b64[sodium_base64_ENCODED_LEN(crypto_auth_hmacsha256_BYTES, sodium_base64_VARIANT_ORIGINAL)];
  sodium_bin2base64(b64, sizeof b64, mac.data(), mac.size(), sodium_base64_VARIANT_ORIGINAL);
  return b64;
}

}  // namespace

std::string WebhookSignature(const std::string& key, int64_t unix_s, const std::string& body) {
  const Mac mac = HmacSha256(key, std::to_string(unix_s) + "." + body);
  char hex[2 * crypto_auth_hmacsha256_BYTES + 1];
  sodium_bin2hex(hex, sizeof hex, mac.data(), mac.size());
  return "t=" + std::to_string(unix_s) + ",v1=" + hex;
}

std::string FeishuSignature(const std::string& secret, int64_t unix_s) {
  return HmacSha256Base64(std::to_string(unix_s) + "\n" + secret, "");
}

std::string DingTalkSignature(const std::string& secret, int64_t unix_ms) {
  return HmacSha256Base64(secret, std::to_string(unix_ms) + "\n" + secret);
}

CurlSender::CurlSender(CurlSenderOptions options) : options_(std::move(options)) {
  static std::once_flag once;
  std::call_once(once, [] {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    (void)sodium_init();
  });
}

CurlSender::~CurlSender() = default;

SendReply CurlSender::Send(const OutgoingMessage& message) {
  return message.transport == "smtp" ? SendMail(message) : SendHttp(message);
}

SendReply CurlSender::SendHttp(const OutgoingMessage& m) {
  Easy e;
  Transfer t;
  t.allow_loopback = options_.allow_loopback;
  if (e.h == nullptr) return SendReply{false, 0, "", "curl_easy_init failed", 0};
  Common(e, t, m.timeout_ms, options_.ca_file);
  curl_easy_setopt(e.h, CURLOPT_PROTOCOLS_STR, "http,https");
  // A chat bot's signature is made now, for this attempt: Feishu's goes in the body, DingTalk's
  // on the URL.
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const int64_t now_s = std::chrono::duration_cast<std::chrono::seconds>(now).count();
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(now).count();
  std::string url = m.url;
  std::string body = m.body;
  if (m.signing_key.has_value() && m.signing_scheme == "feishu" && body.starts_with("{")) {
    body.insert(1, "\"timestamp\":\"" + std::to_string(now_s) + "\",\"sign\":\"" +
                       FeishuSignature(*m.signing_key, now_s) + "\"" +
                       (body.size() > 2 ? "," : ""));
  } else if (m.signing_key.has_value() && m.signing_scheme == "dingtalk") {
    char* sign = curl_easy_escape(e.h, DingTalkSignature(*m.signing_key, now_ms).c_str(), 0);
    url += (url.find('?') == std::string::npos ? "?" : "&") + std::string("timestamp=") +
           std::to_string(now_ms) + "&sign=" + (sign != nullptr ? sign : "");
    curl_free(sign);
  }
  curl_easy_setopt(e.h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(e.h, CURLOPT_POST, 1L);
  curl_easy_setopt(e.h, CURLOPT_POSTFIELDS, body.data());
  curl_easy_setopt(e.h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  curl_easy_setopt(e.h, CURLOPT_USERAGENT, "QingLong-Notify/1");
  for (const auto& [name, value] : m.headers) {
    e.list = curl_slist_append(e.list, (name + ": " + value).c_str());
  }
  e.list = curl_slist_append(e.list, ("Idempotency-Key: " + m.idempotency_key).c_str());
  e.list = curl_slist_append(e.list, "Expect:");
  if (m.signing_key.has_value() && m.signing_scheme == "ql") {
    e.list = curl_slist_append(
        e.list, ("X-QL-Signature: " + WebhookSignature(*m.signing_key, now_s, body)).c_str());
  }
  curl_easy_setopt(e.h, CURLOPT_HTTPHEADER, e.list);
  const auto start = std::chrono::steady_clock::now();
  const CURLcode code = curl_easy_perform(e.h);
  return Finish(e, t, code, start);
}

SendReply CurlSender::SendMail(const OutgoingMessage& m) {
  Easy e;
  Transfer t;
  t.allow_loopback = options_.allow_loopback;
  if (e.h == nullptr) return SendReply{false, 0, "", "curl_easy_init failed", 0};
  Common(e, t, m.timeout_ms, options_.ca_file);
  curl_easy_setopt(e.h, CURLOPT_PROTOCOLS_STR, "smtp,smtps");
  const std::string scheme = m.smtp_security == "tls" ? "smtps://" : "smtp://";
  const std::string url = scheme + m.smtp_host + ":" + std::to_string(m.smtp_port);
  curl_easy_setopt(e.h, CURLOPT_URL, url.c_str());
  if (m.smtp_security == "starttls") curl_easy_setopt(e.h, CURLOPT_USE_SSL, CURLUSESSL_ALL);
  if (!m.smtp_username.empty()) {
    curl_easy_setopt(e.h, CURLOPT_USERNAME, m.smtp_username.c_str());
    curl_easy_setopt(e.h, CURLOPT_PASSWORD, m.smtp_password.c_str());
  }
  const std::string from = "<" + m.mail_from + ">";
  curl_easy_setopt(e.h, CURLOPT_MAIL_FROM, from.c_str());
  std::string to_header;
  for (const std::string& to : m.mail_to) {
    e.list = curl_slist_append(e.list, ("<" + to + ">").c_str());
    to_header += (to_header.empty() ? "" : ", ") + to;
  }
  curl_easy_setopt(e.h, CURLOPT_MAIL_RCPT, e.list);
  t.upload = "Date: " + RfcDate() + "\r\nFrom: QingLong <" + m.mail_from + ">\r\nTo: " + to_header +
             "\r\nSubject: " + HeaderWord(m.subject) + "\r\nMessage-ID: <" + m.idempotency_key +
             "@qinglong>\r\nX-QL-Idempotency-Key: " + m.idempotency_key +
             "\r\nMIME-Version: 1.0\r\nContent-Type: text/plain; charset=UTF-8\r\n"
             "Content-Transfer-Encoding: base64\r\n\r\n" +
             WrappedBase64(m.text);
  curl_easy_setopt(e.h, CURLOPT_READFUNCTION, Supply);
  curl_easy_setopt(e.h, CURLOPT_READDATA, &t);
  curl_easy_setopt(e.h, CURLOPT_UPLOAD, 1L);
  const auto start = std::chrono::steady_clock::now();
  const CURLcode code = curl_easy_perform(e.h);
  SendReply reply = Finish(e, t, code, start);
  if (reply.transport_ok && reply.status_code == 0) reply.status_code = 250;
  return reply;
}

}  // namespace ql::notify
