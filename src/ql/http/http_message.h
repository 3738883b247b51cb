#pragma once

// The request and response of QingLong's HTTP listeners, independent of the library that reads
// and writes them (http_server.h): what routing, admission and handlers see. Private to ql_http.

#include <atomic>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ql::http {

struct Request {
  std::string method;  // as sent: GET, HEAD, POST, ...
  std::string target;  // the request target as sent
  // The path of the target exactly as sent (not percent-decoded, never normalised): routes
  // match only their canonical spelling, so `/API/v1`, `//`, `/./`, `%2F` and a trailing slash
  // match nothing instead of another route.
  std::string path;
  // The query's parameters, percent-decoded ('+' is a space), in order; a repeated name appears
  // once per occurrence.
  std::multimap<std::string, std::string> params;
  // Header fields in order as sent (names as spelt by the client).
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::string remote_address;  // the peer's IP address
  // What admission decided about this request (for example its authenticated identity), handed
  // to the handler of the same request.
  std::shared_ptr<const void> decision;

  // The first field named `name` (case-insensitive), or "" when absent.
  std::string Header(std::string_view name) const;
  bool HasHeader(std::string_view name) const;
  // True when the request announces a body: a Content-Length other than 0, or a
  // Transfer-Encoding.
  bool DeclaresBody() const;
  std::optional<std::string> Param(std::string_view name) const;
  size_t ParamCount(std::string_view name) const;
};

// One piece of a streamed answer (see Response::stream).
struct StreamStep {
  std::string data;   // bytes to send now (may be empty)
  bool more = false;  // false: the stream ends after `data`
};

struct Response {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // Ends the connection after this answer.
  bool close = false;
  // When set, the answer is streamed with chunked encoding instead of `body`: called on a
  // worker thread again and again (it may block briefly, e.g. to wait for new data) until it
  // returns more = false; `gone` turns true once the client has closed its side.
  std::function<StreamStep(const std::atomic<bool>& gone)> stream;
  // Called once when a streamed answer ends, however it ends.
  std::function<void()> on_stream_end;

  // Replaces every field named `name` (case-insensitive) with one.
  void SetHeader(std::string_view name, std::string value);
  void EraseHeader(std::string_view name);
  std::string Header(std::string_view name) const;
  bool HasHeader(std::string_view name) const;
  // Sets the body and its Content-Type.
  void SetContent(std::string content, std::string_view content_type);
};

bool EqualsIgnoreCase(std::string_view a, std::string_view b);

// Percent-decodes `text`; with `plus_is_space` a '+' is a space (query strings). Returns nullopt
// for a malformed escape.
std::optional<std::string> PercentDecode(std::string_view text, bool plus_is_space);

// Splits a request target into its raw path and decoded query parameters; false when the
// target is not origin-form ("/...") or the query holds a malformed escape.
bool SplitTarget(std::string_view target, std::string* path,
                 std::multimap<std::string, std::string>* params);

// The reason phrase of an HTTP status code ("Not Found"), or "" for an unknown one.
std::string_view StatusReason(int status);

}  // namespace ql::http
