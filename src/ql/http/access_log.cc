#include "ql/http/access_log.h"

#include <string>

namespace ql::http {
namespace {

constexpr size_t kMaxText = 256;

std::string Cut(std::string_view text) {
  return std::string(text.substr(0, kMaxText)) + (text.size() > kMaxText ? "..." : "");
}

}  // namespace

std::vector<LogField> AccessLogFields(const Request& req, int status, int64_t bytes,
                                      int64_t duration_ms, std::string_view route,
                                      std::string_view principal) {
  std::vector<LogField> fields = {{"method", Cut(req.method)}, {"path", Cut(req.path)}};
  if (!req.params.empty()) {
    // Names only: a value may be a credential (`?token=`) or personal data.
    std::string names;
    for (auto it = req.params.begin(); it != req.params.end();
         it = req.params.upper_bound(it->first)) {
      if (!names.empty()) names += ',';
      names += it->first;
    }
    fields.emplace_back("query", Cut(names));
  }
  fields.emplace_back("status", status);
  fields.emplace_back("bytes", bytes);
  fields.emplace_back("ms", duration_ms);
  fields.emplace_back("remote", Cut(req.remote_address));
  fields.emplace_back("route", route);
  if (!principal.empty()) fields.emplace_back("principal", Cut(principal));
  return fields;
}

}  // namespace ql::http
