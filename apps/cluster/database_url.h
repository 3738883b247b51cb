#pragma once

// Where ql-cluster finds its database URLs: a flag, a file (so the URL need not appear in the
// process list) or an environment variable, in that order of precedence. The URL is then
// checked by the adapter's policy (TLS verify-full unless QL3_POSTGRES_ALLOW_INSECURE=true).

#include <string>

#include "ql/core/status.h"

namespace ql::cluster {

struct UrlSource {
  std::string flag_value;  // --X-database-url
  std::string file_path;   // --X-database-url-file
  std::string env_name;    // e.g. QL3_DATABASE_URL
  std::string what;        // names the URL in messages, e.g. "--database-url"
};

// Returns the checked URL, or: InvalidArgument `database_url_missing` when no source is set,
// `database_url_ambiguous` when both flag and file are given, `database_url_file_unreadable`,
// or the adapter's `invalid_database_url` / `insecure_database_url`.
Result<std::string> ResolveDatabaseUrl(const UrlSource& source);

// Like ResolveDatabaseUrl, but an unset source is not an error: returns "".
Result<std::string> ResolveOptionalDatabaseUrl(const UrlSource& source);

}  // namespace ql::cluster
