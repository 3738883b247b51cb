#pragma once

// The OpenAPI 3.1 document of the API: docs/openapi.json, embedded in ql_http at build time by
// cmake/QlEmbedOpenApi.cmake (read-only data, not copied at start). Served as
// GET /api/v1/openapi.json (application/json); src/ql/http/openapi_test.cc checks it against
// the route table and scripts/check-openapi.py against the OpenAPI 3.1 schema.

#include <string_view>

namespace ql::http {

// Returns the document's bytes, exactly as in docs/openapi.json.
std::string_view OpenApiDocument();

}  // namespace ql::http
