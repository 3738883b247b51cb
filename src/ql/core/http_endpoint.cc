#include "ql/core/http_endpoint.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cctype>
#include <string>

namespace ql {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

Result<HttpEndpoint> ParseHttpEndpoint(std::string_view url, std::string_view token_flag) {
  const auto invalid = [](const std::string& why) { return InvalidArgument("invalid_url", why); };
  if (url.empty()) return invalid("it is empty");
  std::string_view rest = url;
  HttpEndpoint endpoint;
  const size_t scheme_end = rest.find("://");
  if (scheme_end != std::string_view::npos) {
    const std::string scheme = Lower(rest.substr(0, scheme_end));
    if (scheme != "http" && scheme != "https") return invalid("the scheme must be http or https");
    endpoint.tls = scheme == "https";
    endpoint.port = endpoint.tls ? 443 : 80;
    rest.remove_prefix(scheme_end + 3);
  }
  const size_t slash = rest.find('/');
  const std::string_view authority = rest.substr(0, slash);
  if (slash != std::string_view::npos) {
    std::string_view path = rest.substr(slash);
    while (!path.empty() && path.back() == '/') path.remove_suffix(1);
    if (path.find_first_of("?# ") != std::string_view::npos) {
      return invalid("it must not contain a query, a fragment or spaces");
    }
    endpoint.base_path = std::string(path);
  }
  if (authority.find('@') != std::string_view::npos) {
    return invalid("credentials in the URL are not supported; use " + std::string(token_flag));
  }
  std::string_view port_text;
  if (!authority.empty() && authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return invalid("unclosed '[' in the IPv6 address");
    endpoint.host = std::string(authority.substr(1, close - 1));
    const std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return invalid("unexpected text after the IPv6 address");
      port_text = after.substr(1);
      if (port_text.empty()) return invalid("the port is empty");
    }
  } else {
    const size_t colon = authority.rfind(':');
    endpoint.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) {
      port_text = authority.substr(colon + 1);
      if (port_text.empty()) return invalid("the port is empty");
    }
  }
  if (endpoint.host.empty()) return invalid("the host is empty");
  if (endpoint.host.find_first_of(" \t\r\n") != std::string::npos) {
    return invalid("the host contains whitespace");
  }
  if (!port_text.empty()) {
    if (port_text.size() > 5 || port_text.find_first_not_of("0123456789") != std::string::npos) {
      return invalid("port '" + std::string(port_text) + "' is not a number in 1..65535");
    }
    endpoint.port = std::stoi(std::string(port_text));
    if (endpoint.port < 1 || endpoint.port > 65535) {
      return invalid("port '" + std::string(port_text) + "' is not a number in 1..65535");
    }
  }
  endpoint.url = endpoint.SchemeHostPort() + endpoint.base_path;
  return endpoint;
}

std::string HttpEndpoint::SchemeHostPort() const {
  const bool ipv6 = host.find(':') != std::string::npos;
  return std::string(tls ? "https://" : "http://") + (ipv6 ? "[" + host + "]" : host) + ":" +
         std::to_string(port);
}

bool IsLoopbackHost(std::string_view host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (Lower(host) == "localhost" || host == "::1") return true;
  in_addr v4{};
  const std::string text(host);
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, text.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

Status CheckPlainHttpAllowed(std::string_view host, bool tls, bool allow_insecure,
                             std::string_view what, std::string_view allow_flag) {
  if (tls || allow_insecure || IsLoopbackHost(host)) return Status();
  return InvalidArgument(
      "insecure_http_refused",
      std::string(what) +
          " is plain HTTP off loopback, so tokens would cross the network in clear text; use "
          "TLS, or pass " +
          std::string(allow_flag) + " to accept that on a network you trust");
}

std::string PercentEncode(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 0xF];
    }
  }
  return out;
}

}  // namespace ql
