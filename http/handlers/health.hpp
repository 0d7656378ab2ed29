#pragma once
#include "http/api.hpp"

namespace changeflow::http {
/// GET /healthz (process alive), GET /readyz (database reachable, schema current, service ready),
/// GET /metrics (Prometheus text).
void add_health_routes(router& r, service_context& ctx);
}  // namespace changeflow::http
