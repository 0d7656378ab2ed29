#pragma once
// Assembles the HTTP API: the routes of http/route_table.hpp bound to their handlers, each with the
// policy of its kind of access, and the request pipeline every request goes through:
//
//   route match (404/405) -> middleware::run_chain BEFORE the body is parsed
//        (rate limit -> authorization [permission check on the external pool, bounded by
//         auth.permission_timeout_ms] -> access switch for user writes -> API metrics -> business
//         metrics)
//   -> handler -> chain on_complete(status) + latency per route template and status.
//
// Handlers learn the server-resolved operator through the reserved request header
// `authenticated_operator_header`: the API first drops whatever the client sent under that name,
// then writes the resolved identity (copy-then-overwrite, so it can never be forged).

#include "actors/batch_coordinator.hpp"
#include "config/store.hpp"
#include "http/middleware/pipeline.hpp"
#include "http/middleware/route_policy.hpp"
#include "http/router.hpp"
#include "http/server/message.hpp"
#include "metrics/registry.hpp"
#include "persistence/db_pool.hpp"
#include "runtime/services.hpp"
#include "service/status_read.hpp"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace changeflow::http {

struct service_context {
  config::store& config;
  persistence::db_pool& db;
  metrics::registry& metrics;
  int expected_schema_version = 0;
  /// Reason the service is not ready beyond the database check ("migrations pending",
  /// "rehydrating 40/100"); nullopt when ready.
  std::function<std::optional<std::string>()> not_ready_reason;
  /// Actors, pools and clock shared with the request actors.
  runtime::services* services = nullptr;
  /// Connections for status reads (GET /api/v1/changes...), apart from the transition pool; null = use `db`.
  persistence::db_pool* reads = nullptr;
  persistence::db_pool& read_pool() { return reads ? *reads : db; }
  /// Status reads of one change and their waits (service/status_read); null: GET .../{id} answers 503.
  service::status_reads* status = nullptr;
  /// The permission round trip the chain uses (external pool, auth.permission_timeout_ms), for
  /// handlers whose rule codes depend on the body or a stored row (the user API's subject checks).
  /// Set by make_api; empty before, and answering "failed" (deny) once the API is gone.
  middleware::permission_check check_permissions;
};

/// Lower-case name of the reserved header holding the server-resolved account (absent when the
/// caller is anonymous). Never trust a client value: make_api removes it before writing its own.
inline constexpr std::string_view authenticated_operator_header = "x-changeflow-authenticated-operator";

/// The server-resolved account of this request, if any.
std::optional<std::string> authenticated_operator(const http_server::request& req);

/// One row of the policy table.
struct route_policy_entry {
  std::string method;
  std::string pattern;
  middleware::route_policy policy;
};

/// The middleware policy of each kind of route (http/route_table.hpp says which kind each route is).
middleware::route_policy policy_for(route_access access);
/// The policy of one route: its access kind's, except that ops reads (GET) are limited in their own
/// bucket (`rate_limit.ops_read`), apart from ops actions (`rate_limit.ops`).
middleware::route_policy policy_for(const route_spec& spec);

/// Every route of http/route_table.hpp with its policy.
const std::vector<route_policy_entry>& route_policies();

/// The complete route table exactly as the service serves it (health, changes, callbacks, ops,
/// openapi), each route carrying its policy from route_policies(). main and the tests share it.
/// Throws std::logic_error when a handler serves a route outside http/route_table.hpp, or a route
/// of the table has no handler or two.
std::shared_ptr<const router> build_routes(service_context& ctx,
                                           std::optional<actors::batch_coordinator> batch = std::nullopt);

/// Builds the request handler for http_server::server from a filled route table. The handler owns
/// the rate limiter and the permission-timeout timer; keep it alive until the external pool has
/// been stopped (permission answers arriving later would find it gone).
http_server::handler make_api(service_context& ctx, std::shared_ptr<const router> routes);

}  // namespace changeflow::http
