#include "database_url.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "ql/storage/postgres/pg_client.h"

namespace ql::cluster {
namespace {

std::string Trim(std::string s) {
  size_t end = s.find_last_not_of(" \t\r\n");
  s.erase(end == std::string::npos ? 0 : end + 1);
  size_t begin = s.find_first_not_of(" \t\r\n");
  return begin == std::string::npos ? "" : s.substr(begin);
}

}  // namespace

Result<std::string> ResolveOptionalDatabaseUrl(const UrlSource& source) {
  if (!source.flag_value.empty() && !source.file_path.empty()) {
    return InvalidArgument("database_url_ambiguous",
                           source.what + " and " + source.what + "-file are both given; use one");
  }
  std::string url = source.flag_value;
  if (!source.file_path.empty()) {
    std::ifstream in(source.file_path);
    if (!in) {
      return InvalidArgument("database_url_file_unreadable",
                             "cannot read " + source.what + "-file " + source.file_path);
    }
    std::stringstream ss;
    ss << in.rdbuf();
    url = Trim(ss.str());
    if (url.empty()) {
      return InvalidArgument("database_url_file_unreadable",
                             source.what + "-file " + source.file_path + " is empty");
    }
  }
  if (url.empty() && !source.env_name.empty()) {
    if (const char* env = std::getenv(source.env_name.c_str()); env != nullptr) url = env;
  }
  if (url.empty()) return std::string();
  Result<std::string> checked = pg::CheckDatabaseUrl(url, pg::InsecureAllowedByEnvironment());
  if (!checked.ok()) {
    return Status(checked.status().code(), checked.status().reason(),
                  source.what + ": " + checked.status().message());
  }
  return checked;
}

Result<std::string> ResolveDatabaseUrl(const UrlSource& source) {
  QL_ASSIGN_OR_RETURN(std::string url, ResolveOptionalDatabaseUrl(source));
  if (url.empty()) {
    return InvalidArgument("database_url_missing", source.what + " is required (or " + source.what +
                                                       "-file, or " + source.env_name +
                                                       " in the environment)");
  }
  return url;
}

}  // namespace ql::cluster
