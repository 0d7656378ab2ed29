#pragma once
#include "http/api.hpp"

namespace changeflow::http {
/// POST/GET /api/v1/subscriptions, DELETE /api/v1/subscriptions/{id} and the ops view of deliveries,
/// GET /api/v1/ops/notifications. Who may subscribe to what follows who may see it
/// (middleware/ownership.hpp): a change's viewers may subscribe to it, a subject's permitted callers
/// (its rule code or an operator code) to the subject. Owners and operators delete.
void add_subscription_routes(router& r, service_context& ctx);
}  // namespace changeflow::http
