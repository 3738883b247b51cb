#include "ql/http/http_message.h"

#include <algorithm>

namespace ql::http {

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

template <typename Fields>
const std::string* FindField(const Fields& fields, std::string_view name) {
  for (const auto& [key, value] : fields) {
    if (EqualsIgnoreCase(key, name)) return &value;
  }
  return nullptr;
}

}  // namespace

std::string Request::Header(std::string_view name) const {
  const std::string* value = FindField(headers, name);
  return value == nullptr ? std::string() : *value;
}

bool Request::HasHeader(std::string_view name) const { return FindField(headers, name) != nullptr; }

bool Request::DeclaresBody() const {
  return HasHeader("Content-Length") ? Header("Content-Length") != "0"
                                     : HasHeader("Transfer-Encoding");
}

std::optional<std::string> Request::Param(std::string_view name) const {
  auto it = params.find(std::string(name));
  if (it == params.end()) return std::nullopt;
  return it->second;
}

size_t Request::ParamCount(std::string_view name) const {
  return params.count(std::string(name));
}

void Response::SetHeader(std::string_view name, std::string value) {
  EraseHeader(name);
  headers.emplace_back(std::string(name), std::move(value));
}

void Response::EraseHeader(std::string_view name) {
  headers.erase(std::remove_if(headers.begin(), headers.end(),
                               [&](const auto& field) { return EqualsIgnoreCase(field.first, name); }),
                headers.end());
}

std::string Response::Header(std::string_view name) const {
  const std::string* value = FindField(headers, name);
  return value == nullptr ? std::string() : *value;
}

bool Response::HasHeader(std::string_view name) const {
  return FindField(headers, name) != nullptr;
}

void Response::SetContent(std::string content, std::string_view content_type) {
  body = std::move(content);
  SetHeader("Content-Type", std::string(content_type));
}

std::optional<std::string> PercentDecode(std::string_view text, bool plus_is_space) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '%') {
      if (i + 2 >= text.size()) return std::nullopt;
      const int hi = HexValue(text[i + 1]);
      const int lo = HexValue(text[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

bool SplitTarget(std::string_view target, std::string* path,
                 std::multimap<std::string, std::string>* params) {
  if (target.empty() || target.front() != '/') return false;
  const size_t question = target.find('?');
  *path = std::string(target.substr(0, question));
  params->clear();
  if (question == std::string_view::npos) return true;
  std::string_view query = target.substr(question + 1);
  while (!query.empty()) {
    const size_t amp = std::min(query.find('&'), query.size());
    const std::string_view pair = query.substr(0, amp);
    query.remove_prefix(std::min(amp + 1, query.size()));
    if (pair.empty()) continue;
    const size_t eq = pair.find('=');
    std::optional<std::string> key = PercentDecode(pair.substr(0, eq), true);
    std::optional<std::string> value =
        eq == std::string_view::npos ? std::string() : PercentDecode(pair.substr(eq + 1), true);
    if (!key.has_value() || !value.has_value()) return false;
    params->emplace(std::move(*key), std::move(*value));
  }
  return true;
}

std::string_view StatusReason(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 411: return "Length Required";
    case 412: return "Precondition Failed";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 417: return "Expectation Failed";
    case 422: return "Unprocessable Content";
    case 428: return "Precondition Required";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "";
  }
}

}  // namespace ql::http
