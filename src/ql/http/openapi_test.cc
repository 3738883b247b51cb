// docs/openapi.json against the route table (ql::ApiRoutes()): every route is documented once,
// with its metric name as operationId, its permission and the error codes admission can answer;
// nothing is documented that the table does not serve. scripts/check-openapi.py validates the
// document against the OpenAPI 3.1 schema.

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "ql/http/api_server.h"
#include "ql/http/openapi_document.h"

#ifndef QL_OPENAPI_JSON
#error "QL_OPENAPI_JSON must name docs/openapi.json (src/ql/http/CMakeLists.txt)"
#endif

namespace ql {
namespace {

using nlohmann::json;

constexpr const char* kMethods[] = {"get", "put", "post", "delete", "options", "head", "patch",
                                    "trace"};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// "/api/v1/tasks/{task}" and "/api/v1/tasks/{id}" alike become "/api/v1/tasks/{id}": the route
// table names every path parameter {id}, OpenAPI templating lets the document name it.
std::string Normalize(const std::string& path) {
  std::string out;
  for (size_t i = 0; i < path.size(); ++i) {
    if (path[i] == '{') {
      const size_t end = path.find('}', i);
      if (end == std::string::npos) return path + " (unbalanced braces)";
      out += "{id}";
      i = end;
    } else {
      out += path[i];
    }
  }
  return out;
}

std::string Upper(std::string s) {
  for (char& c : s) c = static_cast<char>(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
  return s;
}

bool IsApiPath(const std::string& pattern) { return pattern.rfind("/api/v1/", 0) == 0; }

struct Operation {
  std::string path;  // as the document spells it
  json body;
};

class OpenApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    text_ = ReadFile(QL_OPENAPI_JSON);
    ASSERT_FALSE(text_.empty()) << QL_OPENAPI_JSON << " is missing or empty";
    doc_ = json::parse(text_, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(doc_.is_discarded()) << QL_OPENAPI_JSON << " is not JSON";
    ASSERT_TRUE(doc_.contains("paths") && doc_["paths"].is_object());
    for (const auto& [path, item] : doc_["paths"].items()) {
      for (const char* method : kMethods) {
        if (!item.contains(method)) continue;
        operations_[{Upper(method), Normalize(path)}].push_back(Operation{path, item[method]});
      }
    }
    routes_ = ApiRoutes();
  }

  // The route the document is checked against, or nullptr.
  const ApiRoute* RouteFor(const std::string& method, const std::string& pattern) const {
    for (const ApiRoute& r : routes_) {
      if (r.method == method && r.pattern == pattern) return &r;
    }
    return nullptr;
  }

  std::string text_;
  json doc_;
  std::map<std::pair<std::string, std::string>, std::vector<Operation>> operations_;
  std::vector<ApiRoute> routes_;
};

// The document's own route, documented before it is in the route table. Once the table serves
// it, it is checked like every other route.
const ApiRoute kDocumentRoute{"GET", "/api/v1/openapi.json", "openapi", "public"};

// Codes every route can answer: the server's own refusals before a route is looked at, a
// handler that throws, and the strict query check every handler makes.
const std::set<std::string> kEveryRoute = {"bad_request",        "uri_too_long",
                                            "headers_too_large",  "too_many_headers",
                                            "expectation_failed", "internal",
                                            "unknown_parameter",  "duplicate_parameter"};
// Admission of every /api/v1 route.
const std::set<std::string> kApiAdmission = {"shutting_down", "overloaded"};
// Admission of every authenticated route (the identity decided before the body, and confirmed
// after it), and of a restricted session (a password to change, a second factor to enrol).
const std::set<std::string> kAuthenticated = {"unauthorized", "credentials_unavailable",
                                              "password_change_required",
                                              "totp_enrolment_required"};
// Admission by method: a GET carries no body; a write's body is refused by its media type or
// length, and a write authenticated by the session cookie needs its CSRF token.
const std::set<std::string> kGetAdmission = {"unexpected_body"};
const std::set<std::string> kBodyAdmission = {"unsupported_media_type", "body_too_large"};
const std::set<std::string> kCookieWrite = {"csrf_failed"};
// Admission of every /api/v1 write while the readiness audit fails (ql-cluster): the audit's
// code, or the key provider's (ADR-0037), 503.
const std::set<std::string> kWriteGate = {"not_ready",
                                          "database_unavailable",
                                          "server_read_only",
                                          "server_in_recovery",
                                          "runtime_role_invalid",
                                          "admin_role_invalid",
                                          "worker_role_invalid",
                                          "schema_contract_invalid",
                                          "migration_history_invalid",
                                          "capability_invalid",
                                          "migration_role_invalid",
                                          "secret_key_provider_missing",
                                          "secret_key_file_missing",
                                          "secret_key_file_mode",
                                          "secret_key_file_owner",
                                          "secret_key_file_size",
                                          "secret_key_file_type",
                                          "secret_key_file_io",
                                          "key_provider_failed",
                                          "key_provider_timeout",
                                          "key_provider_protocol"};

std::set<std::string> ExpectedAdmission(const ApiRoute& route) {
  std::set<std::string> out = kEveryRoute;
  const std::set<std::string>& by_method = route.method == "GET" ? kGetAdmission : kBodyAdmission;
  out.insert(by_method.begin(), by_method.end());
  if (IsApiPath(route.pattern)) {
    out.insert(kApiAdmission.begin(), kApiAdmission.end());
    if (route.method != "GET") out.insert(kWriteGate.begin(), kWriteGate.end());
    if (route.permission != "public") {
      out.insert(kAuthenticated.begin(), kAuthenticated.end());
      if (route.method != "GET") out.insert(kCookieWrite.begin(), kCookieWrite.end());
    }
  }
  return out;
}

void CheckOperation(const ApiRoute& route, const Operation& op, const json& doc) {
  SCOPED_TRACE(route.method + " " + route.pattern);
  const json& o = op.body;
  ASSERT_TRUE(o.is_object());
  EXPECT_EQ(o.value("operationId", ""), route.name) << "operationId is the route's metric name";
  EXPECT_EQ(o.value("x-ql-permission", ""), route.permission);
  EXPECT_TRUE(o.contains("summary") && o["summary"].is_string() &&
              !o["summary"].get<std::string>().empty());

  // Public routes need no credentials; the others keep the document's (bearer or cookie).
  if (route.permission == "public") {
    EXPECT_TRUE(o.contains("security") && o["security"] == json::array())
        << "a public route is documented with security: []";
  } else {
    EXPECT_FALSE(o.contains("security")) << "an authenticated route keeps the document's security";
  }

  ASSERT_TRUE(o.contains("x-ql-error-codes") && o["x-ql-error-codes"].is_array());
  std::set<std::string> codes;
  for (const json& c : o["x-ql-error-codes"]) {
    ASSERT_TRUE(c.is_string());
    EXPECT_TRUE(codes.insert(c.get<std::string>()).second) << "repeated code " << c;
  }
  if (route.permission != "public") {
    EXPECT_FALSE(codes.empty());
  }
  for (const std::string& code : ExpectedAdmission(route)) {
    EXPECT_TRUE(codes.count(code) == 1) << "x-ql-error-codes lacks " << code
                                        << ", which admission answers on this route";
  }
  // Every code has a status, and the operation documents a response for it.
  ASSERT_TRUE(doc.contains("x-ql-error-code-statuses"));
  ASSERT_TRUE(o.contains("responses") && o["responses"].is_object());
  const json& statuses = doc["x-ql-error-code-statuses"];
  for (const std::string& code : codes) {
    if (!statuses.contains(code)) {
      ADD_FAILURE() << code << " has no status in x-ql-error-code-statuses";
      continue;
    }
    bool documented = false;
    for (const json& s : statuses[code]) {
      documented = documented || o["responses"].contains(std::to_string(s.get<int>()));
    }
    EXPECT_TRUE(documented) << code << ": no response documented for its status";
  }
}

TEST_F(OpenApiTest, EveryRouteIsDocumentedOnceWithItsNameAndPermission) {
  ASSERT_FALSE(routes_.empty());
  for (const ApiRoute& route : routes_) {
    const auto it = operations_.find({route.method, route.pattern});
    if (it == operations_.end()) {
      ADD_FAILURE() << route.method << " " << route.pattern << " (" << route.name
                    << ") is not documented in docs/openapi.json";
      continue;
    }
    EXPECT_EQ(it->second.size(), 1u)
        << route.method << " " << route.pattern << " is documented " << it->second.size()
        << " times (under differently named path parameters)";
    for (const Operation& op : it->second) CheckOperation(route, op, doc_);
  }
}

TEST_F(OpenApiTest, NothingIsDocumentedThatTheRouteTableDoesNotServe) {
  for (const auto& [key, ops] : operations_) {
    const auto& [method, pattern] = key;
    const ApiRoute* route = RouteFor(method, pattern);
    if (route == nullptr && method == kDocumentRoute.method &&
        pattern == kDocumentRoute.pattern) {
      // Not served yet: it must be documented exactly as it will be.
      ASSERT_EQ(ops.size(), 1u);
      CheckOperation(kDocumentRoute, ops.front(), doc_);
      continue;
    }
    EXPECT_TRUE(route != nullptr) << method << " " << ops.front().path
                                  << " is documented but no route serves it";
  }
}

TEST_F(OpenApiTest, TheDocumentRouteIsDocumented) {
  const auto it = operations_.find({kDocumentRoute.method, kDocumentRoute.pattern});
  ASSERT_TRUE(it != operations_.end());
  const ApiRoute* served = RouteFor(kDocumentRoute.method, kDocumentRoute.pattern);
  if (served != nullptr) {
    EXPECT_EQ(served->name, kDocumentRoute.name);
    EXPECT_EQ(served->permission, kDocumentRoute.permission);
  }
}

TEST_F(OpenApiTest, IsAnOpenApi31DocumentWithBothSecuritySchemes) {
  EXPECT_EQ(doc_.value("openapi", ""), "3.1.0");
  const json& schemes = doc_["components"]["securitySchemes"];
  EXPECT_EQ(schemes["bearerAuth"]["type"], "http");
  EXPECT_EQ(schemes["bearerAuth"]["scheme"], "bearer");
  EXPECT_EQ(schemes["cookieAuth"]["type"], "apiKey");
  EXPECT_EQ(schemes["cookieAuth"]["in"], "cookie");
  EXPECT_EQ(schemes["cookieAuth"]["name"], "ql_session");
  // The error body is api::ErrorJson's: {"code", "message"}.
  const json& error = doc_["components"]["schemas"]["Error"];
  EXPECT_EQ(error["required"], json::array({"code", "message"}));
}

TEST_F(OpenApiTest, TheEmbeddedDocumentIsTheFile) {
  // Not EXPECT_EQ: its diff of two 270 KB strings says nothing a size does not.
  EXPECT_TRUE(http::OpenApiDocument() == text_)
      << "ql_http embeds another version of docs/openapi.json (" << http::OpenApiDocument().size()
      << " bytes, the file has " << text_.size() << "): rebuild";
}

}  // namespace
}  // namespace ql
