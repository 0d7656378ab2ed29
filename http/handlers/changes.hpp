#pragma once
#include "http/api.hpp"

namespace changeflow::http {
/// POST /api/v1/changes, GET /api/v1/changes/{id}, GET /api/v1/changes[?subject=...]. The requester
/// is the verified identity; who may see or submit what is decided by middleware/ownership.hpp.
void add_change_routes(router& r, service_context& ctx);
}  // namespace changeflow::http
