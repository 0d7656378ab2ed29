// The OpenAPI document and the policy table describe exactly the routes the service serves: the
// route table is built the way main builds it (build_routes), then compared both ways.

#include "http/openapi.hpp"
#include "http/api.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

using namespace changeflow;

namespace {
struct fixture {
  std::shared_ptr<config::store> cfg;
  std::unique_ptr<persistence::db_pool> db;
  metrics::registry metrics;
  runtime::services svc;
  std::unique_ptr<http::service_context> ctx;
  fixture() {
    auto loaded = config::load_from_json(nlohmann::json::object(), [](const std::string&) { return std::nullopt; });
    cfg = std::make_shared<config::store>(loaded.snap);
    // Connections are opened lazily: nothing here talks to a database.
    db = persistence::make_db_pool(persistence::db_settings{}, 1, 1);
    ctx = std::make_unique<http::service_context>(http::service_context{*cfg, *db, metrics, 1, nullptr, &svc});
  }
  ~fixture() { db->stop(); }
};
}  // namespace

TEST(OpenApi, EveryServedRouteIsDocumentedAndViceVersa) {
  fixture f;
  auto routes = http::build_routes(*f.ctx);
  std::set<std::pair<std::string, std::string>> served;
  for (const auto& r : routes->routes()) served.emplace(r.method, r.pattern);
  auto documented = http::documented_operations(http::openapi_document());
  ASSERT_FALSE(served.empty());
  for (const auto& op : served)
    EXPECT_TRUE(documented.count(op)) << "undocumented route " << op.first << " " << op.second;
  for (const auto& op : documented)
    EXPECT_TRUE(served.count(op)) << "documented but not served " << op.first << " " << op.second;
  EXPECT_EQ(http::openapi_document()["openapi"].get<std::string>().substr(0, 2), "3.");
}

TEST(OpenApi, EveryServedRouteHasADeclaredPolicy) {
  fixture f;
  auto routes = http::build_routes(*f.ctx);
  std::set<std::pair<std::string, std::string>> declared;
  for (const auto& e : http::route_policies()) declared.emplace(e.method, e.pattern);
  for (const auto& r : routes->routes()) {
    EXPECT_TRUE(declared.count({r.method, r.pattern})) << "no policy for " << r.method << " " << r.pattern;
  }
  // The declared policies are the ones served (the overlay in build_routes works).
  auto m = routes->match("POST", "/api/v1/changes");
  ASSERT_NE(m.matched, nullptr);
  EXPECT_EQ(m.matched->policy.bucket, "submit");
  EXPECT_EQ(m.matched->policy.limit, &config::rate_limit_settings::submit);
  EXPECT_TRUE(m.matched->policy.access_controlled);
  EXPECT_EQ(m.matched->policy.business_metric, "submit");
  auto whoami = routes->match("GET", "/api/v1/ops/whoami");
  ASSERT_NE(whoami.matched, nullptr);
  EXPECT_TRUE(whoami.matched->policy.rules_from_config);
  EXPECT_EQ(routes->match("GET", "/healthz").matched->policy.limit, nullptr);
  EXPECT_EQ(routes->match("GET", "/api/v1/changes/{id}").matched->policy.limit, nullptr);
}

// The route table lists each route once; the literal in openapi.cpp describes the answers of every
// route (the table gives paths and summaries, so the check is on what only the literal can say).
TEST(OpenApi, EveryRouteOfTheTableIsDescribedOnceWithItsAnswers) {
  std::set<std::pair<std::string_view, std::string_view>> seen;
  for (const auto* spec : http::all_routes) {
    EXPECT_TRUE(seen.emplace(spec->method, spec->pattern).second) << spec->method << " " << spec->pattern << " twice";
    EXPECT_FALSE(spec->summary.empty()) << spec->pattern;
    std::string method(spec->method);
    for (auto& c : method) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const auto& op = http::openapi_document()["paths"][std::string(spec->pattern)][method];
    EXPECT_TRUE(op.contains("responses")) << spec->method << " " << spec->pattern << " has no documented answers";
    EXPECT_EQ(op.value("summary", ""), spec->summary);
  }
}

// build_routes refuses a handler outside the table, or a table route without a handler.
TEST(OpenApi, ARouteOutsideTheTableIsRefused) {
  fixture f;
  auto served = http::build_routes(*f.ctx);
  EXPECT_EQ(served->routes().size(), http::all_routes.size());
}
