#pragma once
// The OpenAPI 3 description of the API, served at GET /api/openapi.json: paths and summaries from
// http/route_table.hpp, parameters, bodies and answers from the literal in openapi.cpp.
// openapi_test checks that the literal describes the answers of every route of the table and
// nothing else, so a route added without documentation fails the tests.

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
