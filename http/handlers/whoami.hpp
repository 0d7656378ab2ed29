#pragma once
#include "http/api.hpp"

#include <nlohmann/json.hpp>

#include <string_view>

namespace changeflow::http {
/// GET /api/v1/ops/whoami: the operator as the SERVER resolved it. The client's query parameters
/// are copied first and the reserved __authenticatedOperator is overwritten afterwards, so a forged
/// value never survives; the echoed parameters are the audit form (masked, truncated). The ops
/// console builds on this route.
void add_whoami_route(router& r, service_context& ctx);

/// Query string -> JSON object of percent-decoded values (a repeated name keeps the last value).
nlohmann::json query_params_json(std::string_view query);
}  // namespace changeflow::http
