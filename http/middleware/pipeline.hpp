#pragma once
// The middleware chain every routed request goes through BEFORE its body is parsed:
//
//   resolve identity (once, shared by every link)
//     -> 1. rate limit       429 RATE_LIMITED        counted in
//     changeflow_rate_limited_total{bucket}
//     -> 2. authorization    401 / 403 "Access denied" (permission check is async: external call)
//     -> 3. API metrics      changeflow_http_requests_received_total{route,method}
//     -> 4. business metrics changeflow_business_activity_total{action,stage} for routes declaring
//     one
//     -> handler (outside this file); afterwards outcome.on_complete(status) counts 2xx "succeeded"
//
// Rejected requests stop at their link: they consume nothing downstream and never enter business
// counts. Running before body parsing means a malformed body cannot pre-empt a 401/403/429 with a
// 400. Metrics are emitted through metrics::registry, which never throws; the labels are the route
// template, never the raw path, and user ids only when metrics.user_labels is on.

#include "config/snapshot.hpp"
#include "http/identity/resolver.hpp"
#include "http/middleware/authorization.hpp"
#include "http/middleware/rate_limiter.hpp"
#include "http/middleware/route_policy.hpp"
#include "http/server/message.hpp"
#include "metrics/registry.hpp"

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace changeflow::http::middleware {

/// What the chain may look at: everything but the body.
struct request_head {
  std::string method;
  std::string route;  // the matched route template ("/api/v1/changes/{id}"), never the raw path
  identity::header_map headers;
  std::string peer_address;  // TCP peer
};

request_head head_of(const http_server::request& req, std::string route_template);

using permission_callback = std::function<void(permission_outcome)>;
/// One round trip asking whether `subject` holds any of `rules`. Must call the callback exactly
/// once (extra calls are ignored; a throw counts as an error = 403), from any thread, and must
/// bound its own wait with a timeout: a callback that never comes leaves the request pending.
using permission_check = std::function<void(std::string subject, std::vector<std::string> rules, permission_callback)>;

/// Owned by the service; must outlive every chain still waiting for a permission answer.
struct chain_deps {
  std::function<std::shared_ptr<const config::snapshot>()> config;
  rate_limiter& limiter;
  metrics::registry& metrics;
  permission_check check_permissions;
  std::function<std::chrono::system_clock::time_point()> clock;
};

struct chain_outcome {
  /// Set when the chain refused the request: send it as is and do not run the handler.
  std::optional<http_server::response> rejection;
  identity::resolve_result who;
  std::string client_address;      // as appended by a trusted proxy, else the TCP peer
  std::string rate_limit_subject;  // account, or "ip:" + client_address
  /// Only when proceeding: call once with the status the handler replied with. Counts "succeeded"
  /// business activity for 2xx; never throws.
  std::function<void(unsigned status)> on_complete;

  bool proceed() const { return !rejection.has_value(); }
};

/// Runs the chain and calls `done` exactly once — synchronously unless a permission check is
/// needed, then from whatever thread answers it.
void run_chain(const request_head& head, const route_policy& policy, chain_deps& deps,
               std::function<void(chain_outcome)> done);

}  // namespace changeflow::http::middleware
