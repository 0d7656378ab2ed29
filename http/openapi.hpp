#pragma once
// The OpenAPI 3 description of the API, served at GET /api/openapi.json. Kept in one literal in
// openapi.cpp; http_policy_test/openapi_test check that its (path, method) set equals the real route
// table built by build_routes(), so a route added without documentation fails the build's tests.

#include "http/router.hpp"

#include <nlohmann/json.hpp>

#include <set>
#include <string>
#include <utility>

namespace changeflow::http {

/// The parsed document (parsed once; never throws after the first successful parse).
const nlohmann::json& openapi_document();

/// {(METHOD, "/path/{param}")} documented in the document's "paths".
std::set<std::pair<std::string, std::string>> documented_operations(const nlohmann::json& doc);

/// GET /api/openapi.json
void add_openapi_route(router& r);

}  // namespace changeflow::http
