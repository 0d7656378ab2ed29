#pragma once
// Assembles the HTTP API: the route table, and the request pipeline that every request goes
// through (route match -> handler), with latency metrics per route template and status.

#include "actors/services.hpp"
#include "config/store.hpp"
#include "http/router.hpp"
#include "http/server/message.hpp"
#include "metrics/registry.hpp"
#include "persistence/db_pool.hpp"

#include <functional>
#include <optional>
#include <string>

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
  actors::services* services = nullptr;
};

/// Builds the request handler for http_server::server from a filled route table.
http_server::handler make_api(service_context& ctx, std::shared_ptr<const router> routes);

}  // namespace changeflow::http
